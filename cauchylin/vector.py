"""``CauchyVector``: a random vector with Cauchy marginals whose every answer is exact.

A ``CauchyVector`` ``X`` of shape ``[..., C]`` is stored as an affine function of independent
Cauchy *sources*::

    X = offset + sum_t  d_t * (M_t @ view_t(Z_{s(t)}))      Z_s ~ Cauchy(loc_s, scale_s) independent

where each term ``t`` reads one source ``Z_s`` (a leaf created by ``CauchyVector(loc, scale)``),
optionally re-indexed over the batch dimensions (``view_t``: expand, index, reshape), maps it with
a matrix ``M_t`` (``None`` for the identity, a row selection, or a dense ``[..., out, in]``
weight) and scales the rows by ``d_t``. Because the sources are kept, dependence is exact:

* marginals follow Cauchy linear stability per source:
  ``loc_X = offset + sum_t d_t (M_t loc_s)`` and ``scale_X = sum_s |sum_{t on s} d_t M_t| scale_s``;
* ``u.linear(W1) + u.linear(W2)`` merges into one term with matrix ``W1 + W2``;
* ``u.linear(W1).linear(W2)`` composes to ``W2 @ W1`` (marginal scale ``|W2 W1| scale``);
* ``rsample`` draws the sources and applies the maps, so samples follow the joint law.

Cost: a map is composed once per weight, never per token, so the vocabulary head
``U.linear(W_cls)`` with ``W_cls`` of shape ``[V, C]`` costs two GEMMs for its marginals and no
``[..., V, C]`` tensor. Terms that share a map object (``U + noise`` followed by ``linear``) are
summed before the GEMM, so ``(scale_U + |b_noise|) @ |W|.T`` is one GEMM. (A per-token factor
applied *before* a linear map, ``(U * t).linear(W)`` with ``t`` of shape ``[N, C]``, does compose
to a per-token ``[N, V, C]`` map; scale the leaf's parameters instead,
``CauchyVector(t * loc, t.abs() * scale)``, when ``U`` is a leaf.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from cauchylin import _special
from cauchylin._special import standard_cauchy
from cauchylin._validation import (
    broadcast_shapes_or_raise,
    check_finite,
    check_positive_finite,
    host_values,
    is_tracing,
    is_validating,
)
from cauchylin.distributions import IndependentCauchy

__all__ = ["CauchyVector", "cat", "kl_divergence"]

Number = int | float


class _Key:
    """The identity of one random variable: compared by ``is``, nothing else.

    A plain class rather than ``object()``, which Dynamo cannot trace: with it a forward that
    builds ``CauchyVector`` objects compiles with ``torch.compile(fullgraph=True)``.
    """

    __slots__ = ()


class _Source:
    """An independent Cauchy leaf: every entry of ``loc``/``scale`` ([*batch, C]) is its own variable.

    ``key`` identifies the random variable. ``.to()`` and ``.detach()`` build new ``_Source``
    objects (new parameter tensors) with the *same* key: the same random variable, so
    ``u.detach() - u`` is exactly 0 and samples share their draws.
    """

    __slots__ = ("key", "loc", "scale")

    def __init__(self, loc: torch.Tensor, scale: torch.Tensor, key: object | None = None) -> None:
        self.loc = loc
        self.scale = scale
        self.key = _Key() if key is None else key

    @property
    def batch_shape(self) -> torch.Size:
        return self.loc.shape[:-1]

    @property
    def size(self) -> int:
        return self.loc.shape[-1]


@dataclass(frozen=True, eq=False)
class _Term:
    """One summand ``row_scale * (M @ view(source))``.

    ``view`` is ``None`` (the source's own batch layout) or an integer tensor of flat indices into
    the source's batch. ``select`` (a 1-D index tensor of source components) and ``matrix``
    (``[*mb, out, in]``) are mutually exclusive; both ``None`` means the identity map.
    """

    source: _Source
    view: torch.Tensor | None = None
    select: torch.Tensor | None = None
    matrix: torch.Tensor | None = None
    row_scale: torch.Tensor | None = None

    @property
    def out_size(self) -> int:
        if self.matrix is not None:
            return self.matrix.shape[-2]
        if self.select is not None:
            return self.select.shape[0]
        return self.source.size

    def batch_shape(self) -> torch.Size:
        shapes = [self.view.shape if self.view is not None else self.source.batch_shape]
        if self.matrix is not None:
            shapes.append(self.matrix.shape[:-2])
        if self.row_scale is not None:
            shapes.append(self.row_scale.shape[:-1])
        return torch.broadcast_shapes(*shapes)

    def read(self, values: torch.Tensor) -> torch.Tensor:
        """Apply ``view`` to a source-shaped tensor ``[*S, *src_batch, C_s]`` (S: sample dims)."""
        if self.view is None:
            return values
        batch_nd = len(self.source.batch_shape)
        lead = values.shape[: values.ndim - batch_nd - 1]
        flat = values.reshape(*lead, -1, values.shape[-1])
        # index_select, not flat[..., view, :]: a 0-d view would be read as an integer there
        picked = flat.index_select(-2, self.view.reshape(-1))
        return picked.reshape((*lead, *self.view.shape, values.shape[-1]))

    def map(self, x: torch.Tensor, absolute: bool = False) -> torch.Tensor:
        """Apply the (optionally absolute) map to ``x`` of shape ``[..., in]``."""
        if self.matrix is not None:
            m = self.matrix.abs() if absolute else self.matrix
            if m.ndim == 2:
                x = torch.nn.functional.linear(x, m)
            else:
                x = torch.matmul(m, x.unsqueeze(-1)).squeeze(-1)
        elif self.select is not None:
            x = x.index_select(-1, self.select)
        if self.row_scale is not None:
            x = x * (self.row_scale.abs() if absolute else self.row_scale)
        return x

    def dense(self) -> torch.Tensor:
        """The whole map ``diag(row_scale) @ M`` as a (possibly batched) ``[*, out, in]`` matrix."""
        ref = self.source.loc
        if self.matrix is not None:
            m = self.matrix
        else:
            eye = torch.eye(self.source.size, dtype=ref.dtype, device=ref.device)
            m = eye if self.select is None else eye.index_select(0, self.select)
        if self.row_scale is not None:
            m = m * self.row_scale.unsqueeze(-1)
        return m

    def same_view(self, other: _Term) -> bool:
        if self.view is None or other.view is None:
            return self.view is None and other.view is None
        if self.view is other.view:
            return True
        # Equal views are merged (one map); while a graph is captured their values cannot be
        # compared, and the terms stay apart (the marginals are exact either way).
        return (
            not is_tracing()
            and self.view.shape == other.view.shape
            and bool(torch.equal(self.view, other.view))
        )


def _as_tensor(value: Any, like: torch.Tensor, name: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, int | float):
        return torch.tensor(float(value), dtype=like.dtype, device=like.device)
    raise TypeError(f"{name} must be a number or a tensor, got {type(value).__name__}")


def _float_dtype(*tensors: torch.Tensor) -> torch.dtype:
    dtypes = [t.dtype for t in tensors if t.is_floating_point()]
    if not dtypes:
        return torch.get_default_dtype()
    out = dtypes[0]
    for d in dtypes[1:]:
        out = torch.promote_types(out, d)
    return out


class CauchyVector:
    r"""A random vector ``[..., C]`` with Cauchy marginals and exact linear algebra.

    ``CauchyVector(loc, scale)`` creates independent components
    ``X_i ~ Cauchy(loc_i, scale_i)`` (``loc`` and ``scale`` broadcast). Linear maps, sums,
    shifts, scalings, indexing and concatenation return new vectors that remember which
    independent sources they came from, so that

    .. math::

        \sum_j w_j X_j \sim \mathrm{Cauchy}\Big(\sum_j w_j \mu_j,\ \sum_j |w_j| \gamma_j\Big)

    is applied per *source*, never to already-dependent components. Element-wise methods
    (``loc``, ``scale``, ``cdf``, ``log_prob``, ...) are exact marginals; ``rsample`` follows the
    joint law. An operation without a closed form raises instead of approximating.

    Args:
        loc: location, shape ``[..., C]`` (at least one dimension).
        scale: scale, broadcastable with ``loc``; strictly positive and finite.
        validate_args: check values (finite, ``scale > 0``); ``None`` uses the global default
            (see :func:`cauchylin.set_validate_args`).

    Raises:
        ValueError: non-broadcastable shapes, a zero-dimensional ``loc``, NaN/inf in ``loc`` or
            ``scale``, or a non-positive ``scale`` (when validating).

    Example:
        >>> import torch
        >>> from cauchylin import CauchyVector
        >>> u = CauchyVector(torch.zeros(3), torch.ones(3))
        >>> w = torch.tensor([[1.0, -2.0, 0.0], [0.5, 0.5, 0.5]])
        >>> s = u.linear(w)
        >>> s.scale
        tensor([3.0000, 1.5000])
        >>> (u.linear(w) - u.linear(w)).scale  # exactly zero: the same sources cancel
        tensor([0., 0.])
    """

    __slots__ = ("__weakref__", "_cache", "_offset", "_shape", "_terms", "_validate")

    def __init__(
        self,
        loc: torch.Tensor | Number,
        scale: torch.Tensor | Number,
        *,
        validate_args: bool | None = None,
    ) -> None:
        if not isinstance(loc, torch.Tensor):
            loc = torch.as_tensor(loc, dtype=torch.get_default_dtype())
        if not isinstance(scale, torch.Tensor):
            scale = torch.as_tensor(scale, dtype=loc.dtype, device=loc.device)
        shape = broadcast_shapes_or_raise(loc=loc.shape, scale=scale.shape)
        if len(shape) == 0:
            raise ValueError(
                "loc and scale must have at least one dimension (the component dimension C); "
                f"got loc {tuple(loc.shape)} and scale {tuple(scale.shape)}"
            )
        validate = is_validating(validate_args)
        if validate:
            check_finite("loc", loc)
            check_positive_finite("scale", scale)
        dtype = _float_dtype(loc, scale)
        loc = loc.to(dtype).expand(shape)
        scale = scale.to(dtype).expand(shape)
        self._terms: tuple[_Term, ...] = (_Term(_Source(loc, scale)),)
        self._offset: torch.Tensor | None = None
        self._shape = torch.Size(shape)
        self._validate = validate_args
        self._cache: dict[str, torch.Tensor] = {}

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def _build(
        cls,
        terms: Sequence[_Term],
        offset: torch.Tensor | None,
        shape: torch.Size,
        validate_args: bool | None,
    ) -> CauchyVector:
        out = cls.__new__(cls)
        out._terms = tuple(terms)
        out._offset = offset
        out._shape = torch.Size(shape)
        out._validate = validate_args
        out._cache = {}
        return out

    def _rebuild(
        self,
        terms: Sequence[_Term],
        offset: torch.Tensor | None,
        shape: torch.Size | None = None,
    ) -> CauchyVector:
        return CauchyVector._build(
            terms, offset, self._shape if shape is None else shape, self._validate
        )

    # ------------------------------------------------------------------ shape and dtype
    @property
    def shape(self) -> torch.Size:
        """The full shape ``[..., C]``.

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> CauchyVector(torch.zeros(2, 3), torch.ones(3)).shape
            torch.Size([2, 3])
        """
        return self._shape

    @property
    def batch_shape(self) -> torch.Size:
        """The shape without the component dimension, ``[...]``.

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> CauchyVector(torch.zeros(2, 3), torch.ones(3)).batch_shape
            torch.Size([2])
        """
        return self._shape[:-1]

    @property
    def event_size(self) -> int:
        """The number of components ``C`` (the last dimension).

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> CauchyVector(torch.zeros(2, 3), torch.ones(3)).event_size
            3
        """
        return self._shape[-1]

    @property
    def ndim(self) -> int:
        """Number of dimensions, the component dimension included.

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> CauchyVector(torch.zeros(2, 3), torch.ones(3)).ndim
            2
        """
        return len(self._shape)

    @property
    def dtype(self) -> torch.dtype:
        """Floating dtype of the parameters (promoted over all sources).

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> CauchyVector(torch.zeros(3), torch.ones(3)).to(torch.float64).dtype
            torch.float64
        """
        return _float_dtype(*[t.source.loc for t in self._terms])

    def _widest_source_param(self, key: object) -> torch.Tensor:
        """A parameter tensor of the widest dtype among the copies of the source ``key``."""
        best = None
        for t in self._terms:
            if t.source.key is key and (
                best is None or torch.promote_types(best.dtype, t.source.loc.dtype) != best.dtype
            ):
                best = t.source.loc
        assert best is not None
        return best

    @property
    def device(self) -> torch.device:
        """Device of the parameters.

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> CauchyVector(torch.zeros(3), torch.ones(3)).device
            device(type='cpu')
        """
        return self._terms[0].source.loc.device

    def __len__(self) -> int:
        """Size of the first dimension (like ``len`` of a tensor)."""
        return self._shape[0]

    def __repr__(self) -> str:
        """Shape, dtype and whether the components are independent."""
        kind = "independent" if self.is_independent else f"{len(self._terms)} term(s)"
        return f"CauchyVector(shape={tuple(self._shape)}, dtype={self.dtype}, {kind})"

    @property
    def is_independent(self) -> bool:
        """True when all entries (components and batch) are mutually independent.

        Decided from the structure, conservatively: every source entry must feed at most one
        entry of the vector. This holds for a leaf, element-wise combinations of distinct leaves,
        a component slice, and a ``cat`` of distinct leaves along the components; it is ``False``
        after a mixing linear map, a broadcast (``expand``) or a repeated index. A ``False`` never
        makes an answer wrong; it only makes :meth:`to_distribution` refuse.

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> u = CauchyVector(torch.zeros(3), torch.ones(3))
            >>> u.is_independent, u.linear(torch.ones(2, 3)).is_independent
            (True, False)
        """
        seen: set[int] = set()
        for term in self._terms:
            if id(term.source.key) in seen:
                return False
            seen.add(id(term.source.key))
            read_shape = term.view.shape if term.view is not None else term.source.batch_shape
            if read_shape != self.batch_shape:
                return False  # broadcast: one source entry feeds several batch entries
            if term.view is not None and _any_value(_repeats(term.view)):
                return False
            if term.select is not None and _any_value(_repeats(term.select)):
                return False
            if term.matrix is not None:
                # At most one non-zero per column (per batch element): each source component
                # feeds at most one output component.
                if _any_value((term.matrix != 0).sum(-2) > 1):
                    return False
        return True

    # ------------------------------------------------------------------ marginals
    def _marginal(self, which: str) -> torch.Tensor:
        cached = self._cache.get(which)
        if cached is not None:
            return cached
        result = self._compute_loc() if which == "loc" else self._compute_scale()
        result = result.expand(self._shape)
        self._cache[which] = result
        return result

    @property
    def loc(self) -> torch.Tensor:
        """Marginal locations (medians), shape ``[..., C]``: ``offset + sum_t d_t M_t loc_s``.

        Computed once (one GEMM per distinct map) and cached.

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> u = CauchyVector(torch.tensor([1.0, 2.0]), torch.ones(2))
            >>> u.linear(torch.tensor([[1.0, -1.0]]), torch.tensor([5.0])).loc
            tensor([4.])
        """
        return self._marginal("loc")

    @property
    def scale(self) -> torch.Tensor:
        """Marginal scales, shape ``[..., C]``: ``sum_s |sum_{t on s} d_t M_t| scale_s``.

        Maps that act on the same source add *before* the absolute value (dependence is exact);
        different sources add their scales. Computed once and cached.

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> u = CauchyVector(torch.zeros(2), torch.tensor([1.0, 3.0]))
            >>> (u.linear(torch.tensor([[1.0, 1.0]])) - u[..., :1]).scale  # u_1 cancels
            tensor([3.])
        """
        return self._marginal("scale")

    def _groups(self) -> dict[tuple[int, int, int], list[_Term]]:
        """Terms that share the same map objects, so their inputs can be summed before mapping."""
        groups: dict[tuple[int, int, int], list[_Term]] = {}
        for term in self._terms:
            key = (id(term.matrix), id(term.select), id(term.row_scale))
            groups.setdefault(key, []).append(term)
        return groups

    def _compute_loc(self) -> torch.Tensor:
        total: torch.Tensor | None = None
        for terms in self._groups().values():
            summed = _sum_broadcast([t.read(t.source.loc) for t in terms])
            mapped = terms[0].map(summed)
            total = mapped if total is None else total + mapped
        assert total is not None
        if self._offset is not None:
            total = total + self._offset
        return total

    def _compute_scale(self) -> torch.Tensor:
        by_source: dict[int, list[_Term]] = {}
        for term in self._terms:
            by_source.setdefault(id(term.source.key), []).append(term)
        shared = [ts for ts in by_source.values() if len(ts) > 1]
        if not shared:
            total: torch.Tensor | None = None
            for terms in self._groups().values():
                summed = _sum_broadcast([t.read(t.source.scale) for t in terms])
                mapped = terms[0].map(summed, absolute=True)
                total = mapped if total is None else total + mapped
            assert total is not None
            return total
        total = None
        for terms in by_source.values():
            part = terms[0].map(terms[0].read(terms[0].source.scale), absolute=True)
            if len(terms) > 1:
                part = _shared_source_scale(terms)
            total = part if total is None else total + part
        assert total is not None
        return total

    # ------------------------------------------------------------------ algebra
    def linear(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> CauchyVector:
        r"""The exact image ``X @ weight.T + bias`` (``nn.Linear`` convention).

        Marginals follow Cauchy linear stability. For independent components
        ``loc = loc_X @ W.T + b`` and ``scale = scale_X @ |W|.T``; in general the rule is applied
        per source through the composed map ``W M`` (``loc = (W M) loc_s + W offset + b``,
        ``scale = |W M| scale_s`` summed over the sources), so ``u.linear(W1).linear(W2)`` has
        scales ``|W2 W1| scale_u`` and not ``|W2| |W1| scale_u``.

        Dtypes promote like tensor arithmetic (and like ``+`` and :func:`cat` of vectors): the
        result has dtype ``torch.promote_types`` of the vector's, the weight's and the bias's
        dtypes, and a narrower vector is cast (``.to``, the same random variables) before the
        map. A float32 vector and a float64 weight give a float64 vector, a bfloat16 weight on
        a float32 vector a float32 one, and an integer or bool weight takes the vector's dtype.

        Args:
            weight: ``[out, C]`` or batched ``[..., out, C]`` (batch dims broadcast with ``X``);
                a real (floating, integer or bool) tensor.
            bias: ``[out]`` or ``[..., out]``, optional; a real tensor.

        Returns:
            A ``CauchyVector`` of shape ``[..., out]`` in the promoted dtype.

        Raises:
            ValueError: ``weight`` is not at least 2-D, its last dimension is not ``C``, the
                batch dimensions do not broadcast, ``bias`` has the wrong last dimension, or
                ``weight``/``bias`` is complex (the message names the dtypes).

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> u = CauchyVector(torch.zeros(2), torch.ones(2))
            >>> u.linear(torch.tensor([[1.0, 1.0]]), torch.tensor([3.0])).loc
            tensor([3.])
            >>> u.linear(torch.ones(1, 2, dtype=torch.float64)).scale  # float32 x float64
            tensor([2.], dtype=torch.float64)
        """
        if not isinstance(weight, torch.Tensor) or weight.ndim < 2:
            got = tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__
            raise ValueError(
                f"weight must be a tensor of shape [out, C] or [..., out, C]; got {got}"
            )
        if weight.shape[-1] != self.event_size:
            raise ValueError(
                f"weight has inner dimension {weight.shape[-1]} but the vector has C={self.event_size} "
                f"components (weight shape {tuple(weight.shape)}, vector shape {tuple(self._shape)})"
            )
        out_size = weight.shape[-2]
        batch = broadcast_shapes_or_raise(
            vector_batch=self.batch_shape, weight_batch=weight.shape[:-2]
        )
        if bias is not None:
            if bias.ndim == 0 or bias.shape[-1] != out_size:
                raise ValueError(
                    f"bias must have last dimension {out_size} to match weight {tuple(weight.shape)}; "
                    f"got bias {tuple(bias.shape)}"
                )
            batch = broadcast_shapes_or_raise(
                vector_batch=self.batch_shape,
                weight_batch=weight.shape[:-2],
                bias_batch=bias.shape[:-1],
            )
        for name, t in (("weight", weight), ("bias", bias)):
            if t is not None and t.is_complex():
                raise ValueError(
                    f"{name} must be a real tensor; got dtype {t.dtype} for a vector of dtype "
                    f"{self.dtype}"
                )
        dtype = self.dtype
        for t in (weight, bias):
            if t is not None:
                dtype = torch.promote_types(dtype, t.dtype)
        weight = weight.to(dtype)
        bias = None if bias is None else bias.to(dtype)
        vec = self if all(t.source.loc.dtype == dtype for t in self._terms) else self.to(dtype)
        if is_validating(self._validate):
            check_finite("weight", weight)
            if bias is not None:
                check_finite("bias", bias)
        # Terms with the same map keep sharing one composed map, so marginals stay one GEMM.
        composed: dict[tuple[int, int, int], _Term] = {}
        terms = []
        for term in vec._terms:
            key = (id(term.matrix), id(term.select), id(term.row_scale))
            if key not in composed:
                composed[key] = _compose(weight, term)
            proto = composed[key]
            terms.append(replace(term, select=None, matrix=proto.matrix, row_scale=None))
        offset = None
        if vec._offset is not None:
            offset = _apply_matrix(weight, vec._offset.to(dtype))
        if bias is not None:
            offset = bias if offset is None else offset + bias
        return self._rebuild(_merge_terms(terms), offset, torch.Size((*batch, out_size)))

    def __add__(self, other: CauchyVector | torch.Tensor | Number) -> CauchyVector:
        """``X + Y`` for a vector ``Y`` (sources tracked), or a shift ``X + t`` by a tensor/number.

        Independent vectors add their scales; terms on shared sources add their maps first, so
        ``u.linear(W1) + u.linear(W2)`` is exactly ``u.linear(W1 + W2)``. A shift moves the
        locations only.

        Args:
            other: a ``CauchyVector`` with the same ``C`` and a broadcastable batch shape, or a
                tensor/number broadcastable with ``[..., C]``.

        Returns:
            A ``CauchyVector`` of the broadcast shape.

        Raises:
            ValueError: different ``C``, shapes that do not broadcast, a shift that would change
                ``C``, or a non-finite shift (when validating).
            TypeError: ``other`` is neither a vector, a tensor nor a number.

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> u = CauchyVector(torch.zeros(2), torch.ones(2))
            >>> (u + u).scale, (u + CauchyVector(torch.zeros(2), torch.ones(2))).scale
            (tensor([2., 2.]), tensor([2., 2.]))
            >>> (u + torch.tensor([1.0, -1.0])).loc
            tensor([ 1., -1.])
        """
        if isinstance(other, CauchyVector):
            if other.event_size != self.event_size:
                raise ValueError(
                    f"cannot add vectors with {self.event_size} and {other.event_size} components "
                    f"(shapes {tuple(self._shape)} and {tuple(other._shape)})"
                )
            shape = broadcast_shapes_or_raise(left=self._shape, right=other._shape)
            offset = _add_optional(self._offset, other._offset)
            return self._rebuild(_merge_terms([*self._terms, *other._terms]), offset, shape)
        shift = _as_tensor(other, self._terms[0].source.loc, "other")
        shape = broadcast_shapes_or_raise(vector=self._shape, shift=shift.shape)
        if shape[-1] != self.event_size:
            raise ValueError(
                f"a shift of shape {tuple(shift.shape)} would change the number of components of a "
                f"vector of shape {tuple(self._shape)}"
            )
        if is_validating(self._validate):
            check_finite("shift", shift)
        # Offsets always carry the full component dimension so that linear() can map them.
        shift = shift.reshape(1) if shift.ndim == 0 else shift
        shift = shift.expand(*shift.shape[:-1], self.event_size)
        return self._rebuild(self._terms, _add_optional(self._offset, shift), shape)

    def __radd__(self, other: torch.Tensor | Number) -> CauchyVector:
        """``t + X``: the same as ``X + t``."""
        return self.__add__(other)

    def __neg__(self) -> CauchyVector:
        """``-X``: locations negated, scales unchanged (the same sources, map times -1).

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> u = CauchyVector(torch.ones(2), torch.ones(2))
            >>> (-u).loc, (u + (-u)).scale
            (tensor([-1., -1.]), tensor([0., 0.]))
        """
        return self * -1.0

    def __sub__(self, other: CauchyVector | torch.Tensor | Number) -> CauchyVector:
        """``X - Y`` = ``X + (-Y)``; see :meth:`__add__` (``x[0] - x[1]`` of a leaf adds scales).

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> x = CauchyVector(torch.zeros(2, 1), torch.tensor([[1.0], [2.0]]))
            >>> (x[0] - x[1]).scale, (x[0] - x[0]).scale
            (tensor([3.]), tensor([0.]))
        """
        # (method calls, not operators: they also run inside __torch_function__, where a
        # tracing torch.compile does not dispatch a nested vector-tensor operator again)
        return self.__add__(-other)

    def __rsub__(self, other: torch.Tensor | Number) -> CauchyVector:
        """``t - X`` for a tensor or number ``t``."""
        return self.__neg__().__add__(other)

    def __mul__(self, factor: torch.Tensor | Number) -> CauchyVector:
        """``a * X``: locations times ``a``, scales times ``|a|`` (element-wise, broadcasting).

        Args:
            factor: a number or a tensor broadcastable with ``[..., C]`` (zeros allowed: they
                give point masses).

        Returns:
            A ``CauchyVector`` of the broadcast shape over the same sources.

        Raises:
            NotImplementedError: ``factor`` is a ``CauchyVector`` (no closed form).
            ValueError: the shapes do not broadcast, ``C`` would change, or ``factor`` is not
                finite (when validating).

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> u = CauchyVector(torch.ones(2), torch.ones(2))
            >>> (torch.tensor([2.0, -3.0]) * u).scale
            tensor([2., 3.])
        """
        if isinstance(factor, CauchyVector):
            raise NotImplementedError(
                "the product of two Cauchy vectors is not Cauchy and has no closed form here"
            )
        a = _as_tensor(factor, self._terms[0].source.loc, "factor")
        shape = broadcast_shapes_or_raise(vector=self._shape, factor=a.shape)
        if shape[-1] != self.event_size:
            raise ValueError(
                f"a factor of shape {tuple(a.shape)} would change the number of components of a "
                f"vector of shape {tuple(self._shape)}"
            )
        if is_validating(self._validate):
            check_finite("factor", a)
        row = a if a.ndim > 0 else a.reshape(1)
        terms = []
        scaled: dict[int, torch.Tensor] = {}
        for term in self._terms:
            key = id(term.row_scale)
            if key not in scaled:
                scaled[key] = row if term.row_scale is None else term.row_scale * row
            terms.append(replace(term, row_scale=scaled[key]))
        offset = None if self._offset is None else self._offset * a
        return self._rebuild(terms, offset, shape)

    def __rmul__(self, factor: torch.Tensor | Number) -> CauchyVector:
        """``X * a``: the same as ``a * X``."""
        return self.__mul__(factor)

    def __truediv__(self, divisor: torch.Tensor | Number) -> CauchyVector:
        """``X / a`` for a number or tensor ``a`` (locations over ``a``, scales over ``|a|``).

        Raises:
            NotImplementedError: ``divisor`` is a ``CauchyVector`` (no closed form).
            ValueError: ``divisor`` is zero somewhere (when validating) or does not broadcast.

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> (CauchyVector(torch.ones(1), torch.ones(1)) / -4.0).scale
            tensor([0.2500])
        """
        if isinstance(divisor, CauchyVector):
            raise NotImplementedError(
                "the ratio of two Cauchy vectors is not an affine function of their sources and "
                "has no closed form here"
            )
        d = _as_tensor(divisor, self._terms[0].source.loc, "divisor")
        if is_validating(self._validate) and _any_value(d == 0, default=False):
            raise ValueError(f"divisor must be non-zero (shape {tuple(d.shape)})")
        return self.__mul__(d.reciprocal())

    def __rtruediv__(self, other: torch.Tensor | Number) -> CauchyVector:
        """``a / X`` is not affine in the sources: always raises ``NotImplementedError``."""
        raise NotImplementedError(
            "a / X for a Cauchy vector X is not an affine function of its sources; the joint law "
            "has no closed form here"
        )

    @classmethod
    def __torch_function__(
        cls,
        func: Callable[..., Any],
        types: tuple[type, ...],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        """A tensor operator that meets a vector: ``tensor * X`` is ``X.__rmul__(tensor)``.

        torch asks an argument's ``__torch_function__`` before a tensor operation runs. For
        ``+ - * /`` between a tensor and a vector it answers with the vector's own operator, so
        ``tensor * X`` means ``X.__rmul__(tensor)`` as Python's reflected operators would, also
        while ``torch.compile`` traces (Dynamo routes every operator with a tensor operand
        through this protocol, ``X * tensor`` included), and so does ``torch.sub(tensor, X)``
        (``tensor - X``) and its like; any other torch function refuses a vector
        (``NotImplemented``: torch raises ``TypeError``). ``Tensor.sub(a, b)`` means ``a - b``
        and ``Tensor.__rsub__(a, b)`` means ``b - a``, whichever of the two is the vector.

        Args:
            func: the tensor operation, e.g. ``torch.Tensor.__mul__``.
            types: the types that override ``__torch_function__``.
            args: its two arguments, a tensor and a vector in either order.
            kwargs: its keyword arguments (none for an operator).

        Returns:
            The vector's operator applied, or ``NotImplemented``.

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> (torch.tensor([2.0]) * CauchyVector(torch.ones(1), torch.ones(1))).scale
            tensor([2.])
        """
        operator = next((op for f, op in _PYTHON_OPERATORS if func is f), None)
        if operator is None:
            operator = _TENSOR_OPERATORS.get(getattr(func, "__name__", ""))
        if operator is None or kwargs or len(args) != 2:
            return NotImplemented
        name, reflected = operator
        left, right = (args[1], args[0]) if reflected else args  # the result is left <op> right
        if isinstance(left, CauchyVector) and not isinstance(right, CauchyVector):
            return getattr(left, f"__{name}__")(right)
        if isinstance(right, CauchyVector) and not isinstance(left, CauchyVector):
            return getattr(right, f"__r{name}__")(left)
        return NotImplemented

    # ------------------------------------------------------------------ views
    def _map_batch(
        self,
        op: Callable[[torch.Tensor], torch.Tensor],
        new_batch: torch.Size,
    ) -> CauchyVector:
        """Apply a batch-dimension view ``op`` (on tensors shaped ``[*batch]``) to every part."""
        batch = self.batch_shape
        # Every batch view is a gather: where each new position reads from the old flat batch.
        positions = op(torch.arange(math.prod(batch), device=self.device).reshape(batch))
        # (a gather of a fixed shape: a 0-d index tensor used as ``flat[i]`` would be read as an
        # integer, which a graph capture cannot do)
        flat_positions = positions.reshape(-1)

        def gather(flat: torch.Tensor) -> torch.Tensor:
            picked = flat.index_select(0, flat_positions)
            return picked.reshape((*positions.shape, *flat.shape[1:]))

        def on_trailing(t: torch.Tensor, trailing: int) -> torch.Tensor:
            tail = t.shape[t.ndim - trailing :]
            return gather(t.expand(*batch, *tail).reshape(-1, *tail))

        terms = []
        views: dict[int, torch.Tensor] = {}
        for term in self._terms:
            key = id(term.view) if term.view is not None else id(term.source)
            if key not in views:
                if term.view is None:
                    ref = term.source.loc
                    flat = torch.arange(math.prod(term.source.batch_shape), device=ref.device)
                    base = flat.reshape(term.source.batch_shape)
                else:
                    base = term.view
                views[key] = gather(base.expand(batch).reshape(-1))
            matrix = term.matrix
            if matrix is not None and matrix.ndim > 2:
                matrix = on_trailing(matrix, 2)
            row_scale = term.row_scale
            if row_scale is not None and row_scale.ndim > 1:
                row_scale = on_trailing(row_scale, 1)
            terms.append(replace(term, view=views[key], matrix=matrix, row_scale=row_scale))
        offset = self._offset
        if offset is not None and offset.ndim > 1:
            offset = on_trailing(offset, 1)
        return self._rebuild(_merge_terms(terms), offset, torch.Size((*new_batch, self.event_size)))

    def __getitem__(self, key: Any) -> CauchyVector:
        """Index or slice like a tensor; the component (last) dimension takes a slice or an index list.

        An integer on the component dimension would drop it and is refused: use ``x[..., k:k+1]``.
        Batch indexing keeps track of the sources, so ``x[0] + x[0]`` equals ``2 * x[0]`` in law and
        ``x[0] - x[1]`` of a leaf adds the two scales.

        Args:
            key: anything a tensor accepts on the batch dimensions (ints, slices, index lists and
                tensors, boolean masks, ``None``, ``...``); on the component dimension a slice, a
                1-D index list/tensor (repeats allowed) or a boolean mask of shape ``[C]``.

        Returns:
            A ``CauchyVector`` over the same sources.

        Raises:
            IndexError: too many indices, an integer or 2-D index on the component dimension,
                ``None`` after it, a mask of the wrong shape, or an index out of range.

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> x = CauchyVector(torch.zeros(4, 3), torch.ones(4, 3))
            >>> x[1:3, [0, 0]].shape, (x[0] + x[0]).scale
            (torch.Size([2, 2]), tensor([2., 2., 2.]))
        """
        batch_key, comp_key = _split_key(key, self.ndim)
        out = self
        if batch_key is not None:
            dummy = torch.empty(self.batch_shape, device="meta")
            new_batch = dummy[batch_key].shape
            out = out._map_batch(lambda t: t[batch_key], new_batch)
        if comp_key is not None:
            out = out._select_components(comp_key)
        return out

    def _select_components(self, comp_key: slice | torch.Tensor) -> CauchyVector:
        if isinstance(comp_key, torch.Tensor) and comp_key.dtype == torch.bool:
            if comp_key.shape != (self.event_size,):
                raise IndexError(
                    f"a boolean mask on the component dimension must have shape "
                    f"({self.event_size},); got {tuple(comp_key.shape)}"
                )
        index = torch.arange(self.event_size, device=self.device)[comp_key]
        if index.ndim != 1:
            raise IndexError("the component dimension takes a slice or a 1-D list of indices")
        # Maps shared between terms stay shared objects, so marginals remain one GEMM per map.
        memo: dict[tuple[int, int], torch.Tensor] = {}

        def pick(t: torch.Tensor, dim: int) -> torch.Tensor:
            key = (id(t), dim)
            if key not in memo:
                full = t.expand(*t.shape[:-1], self.event_size) if dim == -1 else t
                memo[key] = full.index_select(dim, index)
            return memo[key]

        terms = []
        for term in self._terms:
            if term.matrix is not None:
                new = replace(term, matrix=pick(term.matrix, -2))
            elif term.select is not None:
                new = replace(term, select=pick(term.select, 0))
            else:
                new = replace(term, select=index)
            if term.row_scale is not None:
                new = replace(new, row_scale=pick(term.row_scale, -1))
            terms.append(new)
        offset = None
        if self._offset is not None:
            offset = self._offset.expand(*self._offset.shape[:-1], self.event_size).index_select(
                -1, index
            )
        return self._rebuild(terms, offset, torch.Size((*self.batch_shape, index.numel())))

    def reshape(self, *shape: int | Sequence[int]) -> CauchyVector:
        """Reshape the batch dimensions; the last entry must stay ``C`` (or be -1).

        Args:
            *shape: the new shape ``[..., C]`` as ints or one sequence (``-1`` infers a size).

        Returns:
            A ``CauchyVector`` over the same sources (the same random variables, rearranged).

        Raises:
            ValueError: the new shape changes the component dimension or the number of elements.

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> CauchyVector(torch.zeros(6, 2), torch.ones(6, 2)).reshape(2, 3, -1).shape
            torch.Size([2, 3, 2])
        """
        target = _shape_arg(shape)
        if len(target) == 0 or target[-1] not in (-1, self.event_size):
            raise ValueError(
                f"reshape keeps the component dimension C={self.event_size}; got shape {tuple(target)}"
            )
        try:
            new_batch = torch.empty(self.batch_shape, device="meta").reshape(target[:-1]).shape
        except RuntimeError as err:
            raise ValueError(
                f"cannot reshape batch {tuple(self.batch_shape)} to {tuple(target[:-1])}"
            ) from err
        return self._map_batch(lambda t: t.reshape(new_batch), new_batch)

    def expand(self, *shape: int | Sequence[int]) -> CauchyVector:
        """Broadcast to a larger shape. The expanded entries are the *same* random variables.

        Like ``Tensor.expand`` this is a view: ``u.expand(2, C).rsample()`` has two identical
        rows, and a single component (``C = 1``) may be broadcast to ``C'`` identical components.
        Independent copies of a leaf are ``CauchyVector(u.loc.expand(...), u.scale.expand(...))``.

        Args:
            *shape: the new shape ``[..., C]`` (``-1`` keeps a dimension), as ints or one sequence.

        Returns:
            A ``CauchyVector`` of the new shape sharing this vector's sources.

        Raises:
            ValueError: the shape does not broadcast from the current one.

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> x = CauchyVector(torch.zeros(3), torch.ones(3)).expand(2, 3).rsample()
            >>> bool((x[0] == x[1]).all())
            True
        """
        target = _shape_arg(shape)
        new_c = self.event_size if len(target) > 0 and target[-1] == -1 else None
        if len(target) > 0 and new_c is None:
            new_c = target[-1]
        if len(target) == 0 or (new_c != self.event_size and self.event_size != 1):
            raise ValueError(
                f"cannot expand a vector of shape {tuple(self._shape)} to {tuple(target)}: the "
                f"component dimension C={self.event_size} can only be kept (or broadcast from 1)"
            )
        try:
            new_batch = torch.empty(self.batch_shape, device="meta").expand(target[:-1]).shape
        except RuntimeError as err:
            raise ValueError(
                f"cannot expand a vector of shape {tuple(self._shape)} to {tuple(target)}"
            ) from err
        out = self._map_batch(lambda t: t.expand(new_batch), new_batch)
        if new_c != self.event_size:
            assert new_c is not None  # (target is non-empty here)
            out = out._select_components(
                torch.zeros(int(new_c), dtype=torch.long, device=self.device)
            )
        return out

    def to(self, *args: Any, **kwargs: Any) -> CauchyVector:
        """Move or cast every parameter like ``Tensor.to``; the result is the *same* random vector.

        The dependence structure is kept, and the moved vector shares its sources with this one:
        ``(u.to(torch.float64) - u).scale`` is 0 and both sample the same draws.

        Args:
            *args: as for ``Tensor.to`` (a dtype, a device, a tensor).
            **kwargs: as for ``Tensor.to``.

        Returns:
            A ``CauchyVector`` with moved/cast parameters (index tensors only move device).

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> u = CauchyVector(torch.zeros(2), torch.ones(2))
            >>> u64 = u.to(torch.float64)
            >>> u64.dtype, (u64 - u).scale
            (torch.float64, tensor([0., 0.], dtype=torch.float64))
        """
        return self._map_tensors(
            lambda t: (
                t.to(*args, **kwargs) if t.is_floating_point() else _move_index(t, args, kwargs)
            )
        )

    def detach(self) -> CauchyVector:
        """The same random vector with its parameters detached from the autograd graph.

        Like :meth:`to`, it keeps the sources: ``(u.detach() - u).scale`` is 0, and
        ``cat([u, u.detach()])`` has identical halves; gradients flow only through ``u``.

        Returns:
            A ``CauchyVector`` whose parameters do not require gradients.

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> loc = torch.zeros(2, requires_grad=True)
            >>> u = CauchyVector(loc, torch.ones(2))
            >>> u.detach().loc.requires_grad, (u.detach() - u).scale.tolist()
            (False, [0.0, 0.0])
        """
        return self._map_tensors(lambda t: t.detach())

    def _map_tensors(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> CauchyVector:
        sources: dict[int, _Source] = {}
        memo: dict[int, torch.Tensor] = {}

        def conv_tensor(t: torch.Tensor) -> torch.Tensor:
            if id(t) not in memo:
                memo[id(t)] = fn(t)
            return memo[id(t)]

        def conv(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else conv_tensor(t)

        terms = []
        for term in self._terms:
            src = term.source
            if id(src) not in sources:
                sources[id(src)] = _Source(
                    conv_tensor(src.loc), conv_tensor(src.scale), key=src.key
                )
            terms.append(
                _Term(
                    sources[id(src)],
                    view=conv(term.view),
                    select=conv(term.select),
                    matrix=conv(term.matrix),
                    row_scale=conv(term.row_scale),
                )
            )
        return self._rebuild(terms, conv(self._offset))

    # ------------------------------------------------------------------ element-wise marginals
    def _displacement(
        self, x: torch.Tensor | Number, name: str
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x - loc, scale)`` in the working dtype (float32 for half precision)."""
        loc, scale = self.loc, self.scale
        x = _as_tensor(x, loc, name)
        broadcast_shapes_or_raise(**{name: x.shape, "vector": self._shape})
        # one reduction, no [..]-shaped mask: the largest entry is NaN iff some entry is NaN
        values = host_values(x) if is_validating(self._validate) and x.numel() > 0 else None
        if values is not None and math.isnan(float(values.amax())):
            raise ValueError(f"{name} holds NaN (shape {tuple(x.shape)})")
        dtype = _special.working_dtype(x, loc)
        x, loc, scale = x.to(dtype), loc.to(dtype), scale.to(dtype)
        return x - loc, scale

    def _check_density(self, scale: torch.Tensor) -> None:
        # one reduction, no mask: amin is > 0 iff every scale is (and NaN, never > 0, fails)
        values = host_values(scale) if is_validating(self._validate) and scale.numel() > 0 else None
        if values is not None and not float(values.amin()) > 0:
            raise ValueError(
                "log_prob of a degenerate component: some marginal scales are 0 (a point mass, "
                f"e.g. after u.linear(W) - u.linear(W)), which has no density (vector shape "
                f"{tuple(self._shape)}); use cdf/log_cdf, or disable validation to get -inf off "
                "the atom and NaN on it"
            )

    def log_prob(self, x: torch.Tensor | Number) -> torch.Tensor:
        r"""Marginal log-density of each component.

        .. math:: \log p(x) = -\log(\pi\,\gamma) - \log\big(1 + ((x - \mu)/\gamma)^2\big)

        evaluated as ``-log(pi) - log(scale + (x - loc)^2 / scale)`` on the CPU and, where that
        would overflow (and always on other devices), as
        ``-log(pi) + log(scale) - 2 log(m) - log1p((n/m)^2)`` with ``m = max(|x - loc|, scale)``
        and ``n = min(|x - loc|, scale)``: no overflow for any finite input, a few ulp in float32
        for ``|x - loc| / scale`` up to ``1e30`` and beyond. The gradients are finite for every
        ``x`` (also ``+-inf``, where they are the limits) where ``scale > 0``.

        Args:
            x: values, broadcastable with the vector's shape ``[..., C]``.

        Returns:
            The broadcast log-densities ``[..., C]`` (float32 for half-precision parameters).

        Raises:
            ValueError: ``x`` does not broadcast; when validating, ``x`` holds NaN or a component
                is degenerate (scale 0, a point mass without density).

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> CauchyVector(torch.zeros(2), torch.ones(2)).log_prob(torch.tensor([0.0, 1e30]))
            tensor([  -1.1447, -139.2998])
        """
        d, s = self._displacement(x, "x")
        self._check_density(s)
        return _special.log_pdf(d, s)

    def cdf(self, x: torch.Tensor | Number) -> torch.Tensor:
        r"""Marginal ``P(X <= x) = 1/2 + atan((x - loc)/scale)/pi``, as ``atan2(scale, loc - x)/pi``.

        Args:
            x: values, broadcastable with ``[..., C]``.

        Returns:
            Probabilities ``[..., C]``; a degenerate component (scale 0) gives the step
            ``1[x >= loc]``.

        Raises:
            ValueError: ``x`` does not broadcast, or holds NaN (when validating).

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> CauchyVector(torch.zeros(1), torch.ones(1)).cdf(torch.tensor([1.0]))
            tensor([0.7500])
        """
        d, s = self._displacement(x, "x")
        return _special.cdf(d, s)

    def sf(self, x: torch.Tensor | Number) -> torch.Tensor:
        r"""Marginal survival function ``P(X > x) = atan2(scale, x - loc)/pi``.

        Args:
            x: values, broadcastable with ``[..., C]``.

        Returns:
            Probabilities ``[..., C]`` (no cancellation in the right tail).

        Raises:
            ValueError: ``x`` does not broadcast, or holds NaN (when validating).

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> CauchyVector(torch.zeros(1), torch.ones(1)).sf(torch.tensor([1.0]))
            tensor([0.2500])
        """
        d, s = self._displacement(x, "x")
        return _special.sf(d, s)

    def log_cdf(self, x: torch.Tensor | Number) -> torch.Tensor:
        r"""``log P(X <= x)``, accurate to a few ulp in float32 for ``|x - loc|/scale`` up to ``1e30``.

        The smaller tail ``t = atan2(scale, |x - loc|)/pi`` is computed directly; the result is
        ``log t`` for ``x < loc`` and ``log(1 - t)`` (through an exact two-term ``1 - t``) for
        ``x >= loc``. No ``log(P + eps)`` tricks; always ``<= 0``.

        Args:
            x: values, broadcastable with ``[..., C]``.

        Returns:
            ``[..., C]`` log-probabilities (float32 for half-precision parameters).

        Raises:
            ValueError: ``x`` does not broadcast, or holds NaN (when validating).

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> CauchyVector(torch.zeros(1), torch.ones(1)).log_cdf(torch.tensor([-1e30]))
            tensor([-70.2223])
        """
        d, s = self._displacement(x, "x")
        return _special.log_cdf(d, s)

    def log_sf(self, x: torch.Tensor | Number) -> torch.Tensor:
        r"""``log P(X > x)``, accurate to a few ulp in float32 for ``|x - loc|/scale`` up to ``1e30``.

        Args:
            x: values, broadcastable with ``[..., C]``.

        Returns:
            ``[..., C]`` log-probabilities, ``<= 0``.

        Raises:
            ValueError: ``x`` does not broadcast, or holds NaN (when validating).

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> CauchyVector(torch.zeros(1), torch.ones(1)).log_sf(torch.tensor([1e30]))
            tensor([-70.2223])
        """
        d, s = self._displacement(x, "x")
        return _special.log_sf(d, s)

    def icdf(self, q: torch.Tensor | Number) -> torch.Tensor:
        r"""Marginal quantile ``loc + scale tan(pi (q - 1/2))``; exactly ``-inf``/``+inf`` at 0 and 1.

        Args:
            q: probabilities in ``[0, 1]``, broadcastable with ``[..., C]``.

        Returns:
            Quantiles ``[..., C]`` (float32 for half-precision parameters); a degenerate
            component (scale 0) gives ``loc`` for ``0 < q < 1``.

        Raises:
            ValueError: ``q`` does not broadcast, or lies outside ``[0, 1]`` / is NaN (when
                validating).

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> CauchyVector(torch.zeros(3), torch.ones(3)).icdf(torch.tensor([0.0, 0.75, 1.0]))
            tensor([-inf, 1., inf])
        """
        loc = self.loc
        q = _as_tensor(q, loc, "q")
        broadcast_shapes_or_raise(q=q.shape, vector=self._shape)
        values = host_values(q) if is_validating(self._validate) and q.numel() > 0 else None
        if values is not None:
            # one pass; a NaN propagates to both ends (then both tests fail)
            lo, hi = torch.aminmax(values)
            if not (float(lo) >= 0.0 and float(hi) <= 1.0):
                raise ValueError(f"q must lie in [0, 1] (shape {tuple(q.shape)})")
        return _special.icdf(q, loc, self.scale)

    def entropy(self) -> torch.Tensor:
        r"""Marginal differential entropy ``log(4 pi scale)`` per component.

        Returns:
            ``[..., C]`` entropies in nats (``-inf`` for a degenerate component).

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> CauchyVector(torch.zeros(1), torch.ones(1)).entropy()
            tensor([2.5310])
        """
        scale = self.scale
        return torch.log(scale.to(_special.working_dtype(scale))) + math.log(4 * math.pi)

    def ovr_prob(self, threshold: torch.Tensor | Number = 0.0) -> torch.Tensor:
        r"""One-vs-rest probability ``P(X > threshold) = 1/2 + atan((loc - threshold)/scale)/pi``.

        Args:
            threshold: ``tau_k``, broadcastable with ``[..., C]`` (a number, ``[C]`` per class, ...).

        Returns:
            ``[..., C]`` probabilities, computed as ``atan2(scale, threshold - loc)/pi``.

        Raises:
            ValueError: ``threshold`` does not broadcast, or holds NaN (when validating).

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> CauchyVector(torch.ones(1), torch.ones(1)).ovr_prob(0.0)
            tensor([0.7500])
        """
        d, s = self._displacement(threshold, "threshold")
        return _special.sf(d, s)

    def ovr_log_prob(
        self, threshold: torch.Tensor | Number = 0.0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        r"""``(log P, log(1 - P))`` of ``P = P(X > threshold)``, both ``<= 0``, accurate in the tails.

        ``log P = log sf(threshold)`` and ``log(1 - P) = log cdf(threshold)``, each a few ulp in
        float32 for ``|threshold - loc| / scale`` up to ``1e30``; the gradients are finite and
        correctly signed everywhere ``scale > 0``.

        Args:
            threshold: ``tau_k``, broadcastable with ``[..., C]``.

        Returns:
            Two ``[..., C]`` tensors (float32 for half-precision parameters).

        Raises:
            ValueError: ``threshold`` does not broadcast, or holds NaN (when validating).

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> log_p, log_1mp = CauchyVector(torch.zeros(1), torch.ones(1)).ovr_log_prob(1e30)
            >>> log_p, log_1mp
            (tensor([-70.2223]), tensor([-3.1831e-31]))
        """
        d, s = self._displacement(threshold, "threshold")
        log_cdf, log_sf = _special.log_cdf_sf(d, s)
        return log_sf, log_cdf

    # ------------------------------------------------------------------ sampling
    def rsample(
        self,
        sample_shape: Sequence[int] | torch.Size = (),
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Reparameterised draw from the joint law: sample every source, then apply the maps.

        Each source is drawn once per sample as ``loc + scale * eps`` with ``eps`` standard Cauchy
        (the exact quantile of a float64 uniform), then the maps, row scales and offsets are
        applied literally, so the draw follows the true joint law (shared sources, broadcasts and
        repeated indices give equal or dependent entries) and ``d sample / d loc`` is the map.

        Args:
            sample_shape: leading sample dimensions.
            generator: optional ``torch.Generator`` for reproducible draws.

        Returns:
            A tensor of shape ``[*sample_shape, ..., C]``; gradients flow to every parameter.

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> u = CauchyVector(torch.zeros(3), torch.ones(3))
            >>> x = u.expand(2, 3).rsample((5,), generator=torch.Generator().manual_seed(0))
            >>> x.shape, bool((x[:, 0] == x[:, 1]).all())
            (torch.Size([5, 2, 3]), True)
        """
        sample_shape = torch.Size(sample_shape)
        # One standard draw per random variable (source key), shared by its dtype/detached copies.
        eps_by_key: dict[int, torch.Tensor] = {}
        draws: dict[int, torch.Tensor] = {}
        total: torch.Tensor | None = None
        for term in self._terms:
            src = term.source
            if id(src) not in draws:
                key = id(src.key)
                if key not in eps_by_key:
                    eps_by_key[key] = standard_cauchy(
                        sample_shape + src.loc.shape, self._widest_source_param(src.key), generator
                    )
                draws[id(src)] = src.loc + src.scale * eps_by_key[key].to(src.loc.dtype)
            read = term.read(draws[id(src)])
            # Right-align the term's batch with the full batch, behind the sample dimensions.
            missing = len(self.batch_shape) - (read.ndim - len(sample_shape) - 1)
            read = read.reshape(*sample_shape, *([1] * missing), *read.shape[len(sample_shape) :])
            value = term.map(read)
            total = value if total is None else total + value
        assert total is not None
        if self._offset is not None:
            total = total + self._offset
        return total.expand(*sample_shape, *self._shape)

    def sample(
        self,
        sample_shape: Sequence[int] | torch.Size = (),
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Like :meth:`rsample` but without gradients.

        Args:
            sample_shape: leading sample dimensions.
            generator: optional ``torch.Generator`` for reproducible draws.

        Returns:
            A tensor of shape ``[*sample_shape, ..., C]`` that does not require gradients.

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> CauchyVector(torch.zeros(3), torch.ones(3)).sample((4,)).shape
            torch.Size([4, 3])
        """
        with torch.no_grad():
            return self.rsample(sample_shape, generator)

    # ------------------------------------------------------------------ interop
    def to_distribution(self, validate_args: bool | None = None) -> Any:
        """The Pyro distribution ``IndependentCauchy(loc, scale)`` of an independent vector.

        Args:
            validate_args: passed to the distribution.

        Returns:
            :class:`cauchylin.distributions.IndependentCauchy` with event shape ``[C]`` and batch
            shape ``[...]``.

        Raises:
            ValueError: the components are not independent (after a mixing ``linear``, a broadcast,
                or a repeated index), since a product of marginals would then be the wrong law.

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> d = CauchyVector(torch.zeros(2, 3), torch.ones(2, 3)).to_distribution()
            >>> d.batch_shape, d.event_shape
            (torch.Size([2]), torch.Size([3]))
        """
        if not self.is_independent:
            raise ValueError(
                "to_distribution() needs independent components, but this vector's components share "
                "sources (it came from a mixing linear map, a broadcast or a repeated index); its "
                "joint law is not a product of its marginals. Use .rsample() for the joint law, or "
                "CauchyVector(x.loc, x.scale) to deliberately build the independent approximation."
            )
        return IndependentCauchy(self.loc, self.scale, validate_args=validate_args)


# ---------------------------------------------------------------------- helpers


def _apply_matrix(weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    if weight.ndim == 2:
        return torch.nn.functional.linear(x, weight)
    return torch.matmul(weight, x.unsqueeze(-1)).squeeze(-1)


def _compose(weight: torch.Tensor, term: _Term) -> _Term:
    """``weight @ (diag(row_scale) @ M)`` as a dense matrix (``weight`` itself for the identity)."""
    if term.matrix is None and term.select is None and term.row_scale is None:
        return _Term(term.source, matrix=weight)
    w = weight
    if term.row_scale is not None:
        w = w * term.row_scale.unsqueeze(-2)
    if term.matrix is not None:
        return _Term(term.source, matrix=torch.matmul(w, term.matrix))
    if term.select is not None:
        full = w.new_zeros(*w.shape[:-1], term.source.size)
        full = full.index_add(-1, term.select, w)
        return _Term(term.source, matrix=full)
    return _Term(term.source, matrix=w)


def _merge_terms(terms: Sequence[_Term]) -> list[_Term]:
    """Merge terms that read the same source through the same view: their maps add."""
    merged: list[_Term] = []
    for term in terms:
        for i, existing in enumerate(merged):
            if existing.source is term.source and existing.same_view(term):
                if _same_map(existing, term):
                    merged[i] = replace(existing, row_scale=_double(existing.row_scale, existing))
                else:
                    merged[i] = replace(
                        existing,
                        select=None,
                        matrix=existing.dense() + term.dense(),
                        row_scale=None,
                    )
                break
        else:
            merged.append(term)
    return merged


def _same_map(a: _Term, b: _Term) -> bool:
    return a.matrix is b.matrix and a.select is b.select and a.row_scale is b.row_scale


def _double(row_scale: torch.Tensor | None, term: _Term) -> torch.Tensor:
    if row_scale is None:
        ref = term.source.loc
        return torch.full((term.out_size,), 2.0, dtype=ref.dtype, device=ref.device)
    return 2.0 * row_scale


def _add_optional(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    if a is None:
        return b
    if b is None:
        return a
    return a + b


def _sum_broadcast(values: Sequence[torch.Tensor]) -> torch.Tensor:
    total = values[0]
    for v in values[1:]:
        total = total + v
    return total


def _shared_source_scale(terms: Sequence[_Term]) -> torch.Tensor:
    """Exact marginal scales when one random variable (source key) is read by several terms.

    At each output position the terms split into classes that read the same source element;
    within a class the maps add before the absolute value, across classes the scales add. A class
    is encoded by the bit pattern of its members; only the patterns that occur are evaluated
    (one matrix product each), so the cost grows with the number of distinct patterns, not
    ``2**k``.
    """
    k = len(terms)
    if k > 62:
        raise NotImplementedError(
            f"one source is read by {k} terms; exact marginals are supported for at most 62"
        )
    src = terms[0].source
    device = src.loc.device
    batch = torch.broadcast_shapes(*[t.batch_shape() for t in terms])
    flat_index = torch.arange(math.prod(src.batch_shape), device=device).reshape(src.batch_shape)
    idx = [(t.view if t.view is not None else flat_index).expand(batch) for t in terms]
    # pattern[j]: bit i set where term i reads the same element as term j; rep[j]: j is the
    # lowest member of its class (the class representative) at that position.
    patterns = []
    reps = []
    for j in range(k):
        pattern = torch.zeros(batch, dtype=torch.int64, device=device)
        rep = torch.ones(batch, dtype=torch.bool, device=device)
        for i in range(k):
            same = idx[i] == idx[j]
            pattern = pattern | (same.to(torch.int64) << i)
            if i < j:
                rep = rep & ~same
        patterns.append(pattern)
        reps.append(rep)
    total: torch.Tensor | None = None
    for j in range(k):
        for value in _patterns_of(j, k, patterns[j], reps[j]):
            members = [i for i in range(k) if (value >> i) & 1]
            mask = reps[j] & (patterns[j] == value)
            if all(terms[i].source is terms[j].source for i in members):
                dense = _sum_broadcast([terms[i].dense() for i in members])
                part = _apply_matrix(dense.abs(), terms[j].read(terms[j].source.scale))
            else:
                # Copies of one variable with different parameter tensors (``.detach()``,
                # ``.to()``): weight each map by its own copy's scale before the absolute value.
                weighted = _sum_broadcast(
                    [
                        terms[i].dense() * terms[i].read(terms[i].source.scale).unsqueeze(-2)
                        for i in members
                    ]
                )
                part = weighted.abs().sum(-1)
            part = part * mask.unsqueeze(-1)
            total = part if total is None else total + part
    assert total is not None
    return total


# The name of a tensor operator or method -> (the operator, reflected): ``Tensor.__rsub__(a, b)``
# is ``b - a``, every other ``Tensor.sub(a, b)``-like name ``a - b``. Names, not the function
# objects: Dynamo passes some of them as traced functions, which a lookup by identity would not
# find; and it passes ``X - tensor`` either as ``Tensor.__rsub__(tensor, X)`` or as
# ``Tensor.sub(X, tensor)`` (torch 2.13 and 2.15 differ), which both mean ``X - tensor`` here.
_TENSOR_OPERATORS: dict[str, tuple[str, bool]] = {
    **dict.fromkeys(("__add__", "add"), ("add", False)),
    "__radd__": ("add", True),
    **dict.fromkeys(("__sub__", "sub", "subtract"), ("sub", False)),
    "__rsub__": ("sub", True),
    **dict.fromkeys(("__mul__", "mul", "multiply"), ("mul", False)),
    "__rmul__": ("mul", True),
    **dict.fromkeys(("__truediv__", "__div__", "div", "divide", "true_divide"), ("truediv", False)),
    **dict.fromkeys(("__rtruediv__", "__rdiv__"), ("truediv", True)),
}
# The reflected operators that torch writes in Python (the others are C methods): matched by
# identity first, since Dynamo (torch 2.15) reports the name of their decorator's inner function.
_PYTHON_OPERATORS: tuple[tuple[Callable[..., Any], tuple[str, bool]], ...] = (
    (torch.Tensor.__rsub__, ("sub", True)),
    (torch.Tensor.__rtruediv__, ("truediv", True)),
    (torch.Tensor.__rdiv__, ("truediv", True)),
)


def _repeats(index: torch.Tensor) -> torch.Tensor:
    """Whether the integer tensor ``index`` holds a value twice (a 0-d bool tensor; under ``vmap``
    one per batch member: a sort, not ``unique``, whose output size depends on the values)."""
    flat = index.reshape(-1).sort().values
    return (flat[1:] == flat[:-1]).any()


def _any_value(flags: torch.Tensor, default: bool = True) -> bool:
    """``flags.any()`` read on the host, over every member of a ``torch.func`` batch; ``default``
    while a graph is captured (no values to read: ``True`` is the conservative answer of
    :attr:`CauchyVector.is_independent`, ``False`` skips a value check)."""
    values = host_values(flags)
    if values is None:
        return default
    return bool(values.any())


# The most terms on one source whose classes are all enumerated while a graph is captured (2**k - 1
# matrix products; eager execution evaluates only the classes that occur).
_MAX_TRACED_SHARED_TERMS = 8


def _patterns_of(j: int, k: int, pattern: torch.Tensor, rep: torch.Tensor) -> list[int]:
    """The class patterns (bit sets of terms) whose lowest member is term ``j``: those that occur
    where ``j`` represents its class (eager), or every possible one while a graph is captured (no
    values to read: each is evaluated and masked where it does not occur)."""
    if not is_tracing():
        return torch.unique(pattern[rep]).tolist()
    if k > _MAX_TRACED_SHARED_TERMS:
        raise NotImplementedError(
            f"one source is read by {k} terms through different views; while a graph is "
            f"captured exact marginals are supported for at most {_MAX_TRACED_SHARED_TERMS}"
        )
    above = k - j - 1
    return [(1 << j) | (subset << (j + 1)) for subset in range(1 << above)]


def _split_key(key: Any, ndim: int) -> tuple[tuple[Any, ...] | None, slice | torch.Tensor | None]:
    """Split an index into the part for the batch dims and the part for the component dim."""
    if not isinstance(key, tuple):
        key = (key,)

    def consumes(k: Any) -> int:
        if k is None or k is Ellipsis:
            return 0
        if isinstance(k, torch.Tensor) and k.dtype == torch.bool:
            return k.ndim
        return 1

    used = sum(consumes(k) for k in key)
    if used > ndim:
        raise IndexError(f"too many indices for a CauchyVector with {ndim} dimensions")
    if Ellipsis in key:
        pos = key.index(Ellipsis)
        key = key[:pos] + (slice(None),) * (ndim - used) + key[pos + 1 :]
    else:
        key = key + (slice(None),) * (ndim - used)
    # The component dimension is addressed by the last consuming entry.
    last = max(i for i, k in enumerate(key) if consumes(k) > 0)
    if any(k is None for k in key[last + 1 :]):
        raise IndexError("cannot insert dimensions after the component dimension")
    comp = key[last]
    if isinstance(comp, torch.Tensor) and comp.dtype == torch.bool and comp.ndim > 1:
        raise IndexError("a boolean mask may not span the component dimension and batch dimensions")
    if isinstance(comp, int) or (isinstance(comp, torch.Tensor) and comp.ndim == 0):
        raise IndexError(
            "an integer index on the component dimension would drop it; use a slice such as x[..., k:k+1]"
        )
    if isinstance(comp, list):
        comp = torch.tensor(comp)
    batch_key = key[:last]
    comp_key = None if (isinstance(comp, slice) and comp == slice(None)) else comp
    if all(isinstance(k, slice) and k == slice(None) for k in batch_key):
        return None, comp_key
    return batch_key, comp_key


def _shape_arg(shape: tuple[int | Sequence[int], ...]) -> tuple[int, ...]:
    if len(shape) == 1 and not isinstance(shape[0], int):
        return tuple(shape[0])
    return tuple(int(s) for s in shape)  # type: ignore[arg-type]


def _move_index(t: torch.Tensor, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
    device = kwargs.get("device")
    for a in args:
        if isinstance(a, str | torch.device):
            device = a
        elif isinstance(a, torch.Tensor):
            device = a.device
    return t if device is None else t.to(device)


def cat(vectors: Sequence[CauchyVector], dim: int = -1) -> CauchyVector:
    """Concatenate vectors along the component dimension (``dim=-1``) or a batch dimension.

    Sources are kept: ``cat([u, u])`` has two perfectly dependent halves, not independent copies.

    Args:
        vectors: non-empty sequence of ``CauchyVector``; batch shapes must broadcast (component
            concatenation) or match except along ``dim`` (batch concatenation).
        dim: the dimension; ``-1`` (or ``ndim - 1``) is the component dimension.

    Returns:
        A ``CauchyVector`` over the sources of all inputs.

    Raises:
        ValueError: an empty sequence, a non-vector entry, mismatched shapes or numbers of
            dimensions, or ``dim`` out of range.

    Example:
        >>> import torch
        >>> from cauchylin import CauchyVector, cat
        >>> u = CauchyVector(torch.zeros(2), torch.ones(2))
        >>> both = cat([u, u])
        >>> both.shape, (both[..., :2] - both[..., 2:]).scale
        (torch.Size([4]), tensor([0., 0.]))
    """
    vectors = list(vectors)
    if not vectors:
        raise ValueError("vectors must be a non-empty sequence of CauchyVector")
    if not all(isinstance(v, CauchyVector) for v in vectors):
        raise ValueError("vectors must all be CauchyVector instances")
    ndim = vectors[0].ndim
    if any(v.ndim != ndim for v in vectors):
        raise ValueError(
            f"vectors must have the same number of dimensions; got {[tuple(v.shape) for v in vectors]}"
        )
    if not -ndim <= dim < ndim:
        raise ValueError(f"dim {dim} is out of range for vectors with {ndim} dimensions")
    d = dim % ndim
    if d == ndim - 1:
        return _cat_components(vectors)
    return _cat_batch(vectors, d)


def _cat_components(vectors: list[CauchyVector]) -> CauchyVector:
    try:
        batch = torch.broadcast_shapes(*[v.batch_shape for v in vectors])
    except RuntimeError:
        raise ValueError(
            "cat along the component dimension needs broadcastable batch shapes; got vectors of "
            f"shapes {[tuple(v.shape) for v in vectors]}"
        ) from None
    sizes = [v.event_size for v in vectors]
    total = sum(sizes)
    ref = vectors[0]._terms[0].source.loc
    terms: list[_Term] = []
    offsets = []
    start = 0
    for v, size in zip(vectors, sizes, strict=True):
        for term in v._terms:
            dense = term.dense()
            padded = dense.new_zeros(*dense.shape[:-2], total, dense.shape[-1])
            padded[..., start : start + size, :] = dense
            terms.append(replace(term, select=None, matrix=padded, row_scale=None))
        off = v._offset if v._offset is not None else ref.new_zeros(size)
        offsets.append(
            off.expand(*batch, size) if off.ndim > 1 else off.expand(*off.shape[:-1], size)
        )
        start += size
    offsets = [o.expand(*batch, o.shape[-1]) for o in offsets]
    offset = torch.cat(offsets, dim=-1) if any(v._offset is not None for v in vectors) else None
    return vectors[0]._rebuild(_merge_terms(terms), offset, torch.Size((*batch, total)))


def _cat_batch(vectors: list[CauchyVector], dim: int) -> CauchyVector:
    shapes = [v.shape for v in vectors]
    for s in shapes[1:]:
        if len(s) != len(shapes[0]) or any(
            a != b for i, (a, b) in enumerate(zip(s, shapes[0], strict=True)) if i != dim
        ):
            raise ValueError(
                f"shapes must match except along dim {dim}; got {[tuple(x) for x in shapes]}"
            )
    lengths = [s[dim] for s in shapes]
    out_batch = list(shapes[0][:-1])
    out_batch[dim] = sum(lengths)
    out_batch_t = torch.Size(out_batch)
    terms: list[_Term] = []
    start = 0
    ref = vectors[0]._terms[0].source.loc
    offset_parts = []
    for v, length in zip(vectors, lengths, strict=True):
        # Express every term on the full output batch: zero rows outside this part.
        mask_shape = [1] * len(out_batch)
        mask_shape[dim] = out_batch[dim]
        mask = ref.new_zeros(mask_shape)
        mask.narrow(dim, start, length).fill_(1.0)
        for term in v._terms:
            src_flat = torch.arange(math.prod(term.source.batch_shape), device=ref.device).reshape(
                term.source.batch_shape
            )
            view = (term.view if term.view is not None else src_flat).expand(v.batch_shape)
            pad = [
                view.new_zeros(
                    *view.shape[:dim], out_batch[dim] - start - length, *view.shape[dim + 1 :]
                )
            ]
            full_view = torch.cat(
                [view.new_zeros(*view.shape[:dim], start, *view.shape[dim + 1 :]), view, *pad],
                dim=dim,
            )
            dense = term.dense()
            if dense.ndim > 2:
                dense = dense.expand(*v.batch_shape, *dense.shape[-2:])
                zeros_before = dense.new_zeros(*dense.shape[:dim], start, *dense.shape[dim + 1 :])
                zeros_after = dense.new_zeros(
                    *dense.shape[:dim], out_batch[dim] - start - length, *dense.shape[dim + 1 :]
                )
                terms.append(
                    _Term(
                        term.source,
                        view=full_view,
                        matrix=torch.cat([zeros_before, dense, zeros_after], dim=dim),
                    )
                )
            else:
                row = mask.unsqueeze(-1).expand(*out_batch_t, dense.shape[-2])
                terms.append(_Term(term.source, view=full_view, matrix=dense, row_scale=row))
        off = v._offset if v._offset is not None else ref.new_zeros(v.event_size)
        offset_parts.append(off.expand(v.shape))
        start += length
    offset = (
        torch.cat(offset_parts, dim=dim) if any(v._offset is not None for v in vectors) else None
    )
    return vectors[0]._rebuild(
        _merge_terms(terms), offset, torch.Size((*out_batch_t, vectors[0].event_size))
    )


def kl_divergence(p: CauchyVector, q: CauchyVector) -> torch.Tensor:
    r"""Component-wise KL divergence of the marginals, ``[..., C]``.

    .. math::

        \mathrm{KL}(\mathrm{C}(m_1, g_1)\,\|\,\mathrm{C}(m_2, g_2))
        = \log\frac{(g_1 + g_2)^2 + (m_1 - m_2)^2}{4 g_1 g_2}
        = \log\Big(1 + \frac{(g_1 - g_2)^2 + (m_1 - m_2)^2}{4 g_1 g_2}\Big),

    evaluated by :func:`cauchylin._special.cauchy_kl` (the kernel the registered Pyro KL uses too):
    ``log1p(r^2)`` with ``r = hypot(g1 - g2, m1 - m2) / (2 sqrt(g1 g2))``, never negative, exact
    near zero, finite where ``r`` overflows, with finite gradients (0 at ``p == q``). For
    independent vectors ``.sum(-1)`` is the KL of the joint laws.

    Args:
        p: a ``CauchyVector``.
        q: a ``CauchyVector`` broadcastable with ``p``.

    Returns:
        The broadcast ``[..., C]`` divergences (``>= 0``, exactly 0 for equal marginals), in
        float32 for half-precision inputs.

    Raises:
        ValueError: ``p`` or ``q`` is not a ``CauchyVector``, or the shapes do not broadcast.

    Example:
        >>> import torch
        >>> from cauchylin import CauchyVector, kl_divergence
        >>> p = CauchyVector(torch.zeros(1), torch.ones(1))
        >>> kl_divergence(p, CauchyVector(torch.tensor([2.0]), torch.ones(1)))  # log(2)
        tensor([0.6931])
    """
    if not isinstance(p, CauchyVector) or not isinstance(q, CauchyVector):
        raise ValueError("p and q must be CauchyVector instances")
    broadcast_shapes_or_raise(p=p.shape, q=q.shape)
    return _special.cauchy_kl(p.loc, p.scale, q.loc, q.scale)
