r"""Pyro distributions over Cauchy vectors and one-vs-rest (OvR) decisions.

Three :class:`pyro.distributions.TorchDistribution` subclasses that follow torch/Pyro conventions
(``batch_shape``/``event_shape``, ``expand``, ``support``, ``arg_constraints``, ``has_rsample``,
``validate_args``) and work inside ``pyro.sample``, SVI, ``Predictive`` and ``poutine.trace``:

* :class:`IndependentCauchy` — ``C`` independent components ``X_c ~ Cauchy(loc_c, scale_c)``,
  event shape ``[C]``; ``log_prob`` is the summed Cauchy log-density (minus the Cauchy NLL).
* :class:`OvR` — ``V`` independent Bernoulli decisions ``B_k`` with
  ``p_k = P(S_k > tau_k) = 1/2 + atan((loc_k - tau_k)/scale_k)/pi`` for ``S_k ~ Cauchy(loc_k,
  scale_k)`` and threshold ``tau_k``, event shape ``[V]`` over multi-hot ``{0, 1}^V`` values;
  everything is computed in log space (no ``log(p + eps)``).
* :class:`OvRLabel` — the same OvR model observed through a single class index (a label), for
  ``pyro.sample(..., obs=label)`` without a one-hot tensor.

Closed-form KL divergences ``IndependentCauchy || IndependentCauchy``, ``IndependentCauchy ||
Independent(Cauchy, 1)`` (both directions) and ``OvR || OvR`` are registered with
:func:`torch.distributions.kl.register_kl` on import, so ``torch.distributions.kl_divergence``
(and Pyro's ``TraceMeanField_ELBO``) use them; the Cauchy ones share one kernel,
:func:`cauchylin._special.cauchy_kl`.

Validation follows torch: ``validate_args=None`` uses the global torch/Pyro default
(``pyro.enable_validation``), and is also off while cauchylin's own switch is off
(:func:`cauchylin.set_validate_args`, :func:`cauchylin.validation`); an explicit
``validate_args=True/False`` wins over both. When validating, the parameters are checked against
``arg_constraints`` (torch's event-dimension conventions: ``real_vector`` and
``independent(positive, 1)`` for parameters that carry the event dimension) *and* for finiteness,
and ``log_prob`` checks its value against ``support`` (torch's ``_validate_sample``), each raising
``ValueError`` that names the argument. Half-precision parameters are computed in
float32 internally and their log-probabilities are returned in float32.

The distributions work under the ``torch.func`` transforms (``vmap``, ``grad``, ``jacrev``,
``jacfwd``, ``jvp``, ``functional_call``) *with validation on*. torch's own checks branch in Python
on a tensor of booleans, which ``vmap`` refuses (torch's distributions need
``validate_args=False`` there); under a transform the same checks -- the parameter constraints,
the finiteness checks and the support of a ``log_prob`` value -- run on the values underneath the
transform's wrappers instead (:func:`cauchylin._validation.host_values`), so a bad value in any
member of a ``vmap`` batch raises the same ``ValueError``. While a graph is captured
(``torch.compile``, ``torch.export``, ``torch.jit.trace``) the value checks are skipped, as
everywhere in cauchylin; the shape checks always run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import torch
from pyro.distributions.torch_distribution import TorchDistribution
from torch.distributions import Cauchy, Distribution, Independent, constraints
from torch.distributions.kl import register_kl

from cauchylin import _special
from cauchylin._validation import (
    broadcast_shapes_or_raise,
    check_finite,
    host_values,
    is_tracing,
    is_validating,
    transforms_active,
)

__all__ = ["IndependentCauchy", "OvR", "OvRLabel"]

_LOG_4PI = math.log(4.0 * math.pi)
_Shape = Sequence[int] | torch.Size


# ---------------------------------------------------------------------------------------- helpers


def _to_tensor(x: torch.Tensor | float, like: torch.Tensor | None) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    if like is not None:
        return torch.as_tensor(float(x), dtype=like.dtype, device=like.device)
    return torch.as_tensor(float(x), dtype=torch.get_default_dtype())


def _broadcast_params(
    **named: torch.Tensor | float,
) -> tuple[list[torch.Tensor], torch.Size]:
    """Broadcast named parameters to a common shape and floating dtype; ``ValueError`` on mismatch."""
    given = list(named.values())
    head = given[0]
    if (  # the usual case first: tensors of one shape and floating dtype, nothing to do
        isinstance(head, torch.Tensor)
        and head.is_floating_point()
        and not is_tracing()  # (before any shape is compared: while tracing, shapes are traced)
        and head.dim()
        and all(
            isinstance(t, torch.Tensor) and t.shape == head.shape and t.dtype == head.dtype
            for t in given[1:]
        )
    ):
        return cast("list[torch.Tensor]", given), head.shape
    like = next((v for v in named.values() if isinstance(v, torch.Tensor)), None)
    tensors = {k: _to_tensor(v, like) for k, v in named.items()}
    dtype = None
    for t in tensors.values():
        if t.is_floating_point() and t.dtype != dtype:
            # (promote_types is an operator: under vmap a call costs a dispatch)
            dtype = t.dtype if dtype is None else torch.promote_types(dtype, t.dtype)
    dtype = dtype or torch.get_default_dtype()
    first = next(iter(tensors.values()))
    # (nothing to broadcast: under vmap even a no-op costs; while tracing, shapes are traced)
    if not is_tracing() and all(
        t.shape == first.shape and t.dtype == dtype for t in tensors.values()
    ):
        out = list(tensors.values())
    else:
        out = _broadcast_tensors(tensors, dtype)
    shape = out[0].shape
    if len(shape) == 0:
        listed = ", ".join(f"{k} {tuple(t.shape)}" for k, t in tensors.items())
        raise ValueError(
            "the parameters must have at least one dimension (the event dimension, last); "
            f"got {listed}"
        )
    return list(out), shape


def _broadcast_tensors(tensors: dict[str, torch.Tensor], dtype: torch.dtype) -> list[torch.Tensor]:
    """``torch.broadcast_tensors`` of the named tensors in ``dtype``; ``ValueError`` naming them
    where their shapes do not broadcast."""
    try:  # broadcast_tensors is a cheap C++ call; it only fails on incompatible shapes
        return list(
            torch.broadcast_tensors(
                *(t if t.dtype == dtype else t.to(dtype) for t in tensors.values())
            )
        )
    except RuntimeError:
        broadcast_shapes_or_raise(**{k: t.shape for k, t in tensors.items()})
        raise


def _resolve(validate_args: bool | None) -> bool | None:
    """``validate_args`` as given; ``None`` stays ``None`` (torch default) unless cauchylin's
    global switch is off, which turns validation off."""
    if validate_args is None and not is_validating(None):
        return False
    return validate_args


def _log_density(value: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Element-wise Cauchy log-density ``-log(pi) - log(scale) - log(1 + ((x - loc)/scale)^2)``.

    The displacement is formed in the working dtype and handed to :func:`cauchylin._special.log_pdf`
    (overflow-free, finite gradients, also at ``x = +-inf``).
    """
    return _log_density_finite(value, loc, scale)[0]


def _log_density_finite(
    value: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor
) -> tuple[torch.Tensor, bool]:
    """:func:`_log_density`, and ``True`` when its finiteness read
    (:func:`cauchylin._special.log_pdf_finite`) found every displacement ``value - loc`` and
    ``scale`` finite: with a finite ``loc``, no ``value`` is NaN or infinite."""
    dtype = _special.working_dtype(value, loc, scale)
    value, loc, scale = (t if t.dtype == dtype else t.to(dtype) for t in (value, loc, scale))
    return _special.log_pdf_finite(value - loc, scale)


def _init_distribution(
    d: TorchDistribution,
    cls: type[TorchDistribution],
    batch_shape: torch.Size,
    event_shape: torch.Size,
    validate_args: bool | None,
) -> None:
    """``super(cls, d).__init__(batch_shape, event_shape, validate_args)``, then the finiteness
    of every parameter (``arg_constraints``) when validating; also under ``torch.func``.

    torch checks the parameters against ``arg_constraints`` with a Python ``if`` on a tensor,
    which ``vmap`` refuses. Under a transform the flag is set as torch sets it and the same
    constraints, and the finiteness, are checked on the values underneath the transform's
    wrappers (every batch member). In both cases a screen of their extremes
    (:func:`_extremes_pass`) passes them all, and only when it fails do the checks run one by one
    for the message (which names the parameter and the constraint as torch's does).
    """
    names = list(d.arg_constraints)
    if not transforms_active():
        # torch's own check would put the whole tensor in its message (a 150-row dump for a
        # batch of 150): the same check here says the shape and how many values fail instead.
        super(cls, d).__init__(batch_shape, event_shape, validate_args=False)
        d._validate_args = Distribution._validate_args if validate_args is None else validate_args
        if d._validate_args:
            values = [host_values(getattr(d, name)) for name in names]
            if all(v is not None for v in values) and _extremes_pass(values, _interval_kinds(d)):
                return
            for name in names:
                value = getattr(d, name)
                _check_constraint(d, name, value, d.arg_constraints[name], "")
                check_finite(name, value)
        return
    super(cls, d).__init__(batch_shape, event_shape, validate_args=False)
    d._validate_args = Distribution._validate_args if validate_args is None else validate_args
    if not d._validate_args:
        return
    values = [host_values(getattr(d, name)) for name in names]
    if any(v is None for v in values):
        return  # (a graph capture: nothing to read)
    if _extremes_pass(values, _interval_kinds(d)):
        return
    for name, v in zip(names, values, strict=True):
        assert v is not None
        _check_constraint(
            d, name, v, d.arg_constraints[name], " (in a member of the torch.func batch)"
        )
        check_finite(name, getattr(d, name))


def _extremes_pass(values: list[torch.Tensor | None], kinds: tuple[str, ...] | None) -> bool:
    """One screen of every parameter's extremes: ``True`` when each is finite, and above 0
    where its constraint is ``positive``; ``False`` sends the caller to the checks one by one.

    The constraints screened are ``real`` and ``positive`` (reduced with ``all`` by
    ``independent``), which hold everywhere when the extremes pass; the layout of the batch
    dimensions underneath does not matter. A ``real`` parameter is screened by its sum (one
    reduction and one read: NaN and infinities propagate to it; a sum that overflows only sends
    the caller to the exact checks), a ``positive`` one by ``aminmax`` (which propagates NaN).
    ``kinds`` is :func:`_interval_kinds`; ``None`` (another constraint) never passes.

    Where it applies, :func:`_fused_screen` decides them all at once instead (one reduction and
    one host read: under ``vmap`` each operation costs a dispatch whatever its size).
    """
    if kinds is None or len(kinds) != len(values):
        return False
    fused = _fused_screen(values, kinds)
    if fused is not None:
        return fused
    if values and values[0] is not None and values[0].device.type != "cpu":
        # one host read for all of them (each read on a device waits for it)
        ends: list[torch.Tensor] = []
        for v in values:
            if v is None or not v.numel():
                return False
            ends.extend(torch.aminmax(v))
        read = torch.stack(ends).tolist()
        return all(
            -math.inf < read[2 * i] <= read[2 * i + 1] < math.inf
            and (kind == "real" or read[2 * i] > 0)
            for i, kind in enumerate(kinds)
        )
    for v, kind in zip(values, kinds, strict=True):
        # (on a CPU there is no device to wait for: a read is cheaper than a stack)
        if v is None or not v.numel():
            return False
        if kind == "real":
            if not math.isfinite(v.sum().item()):
                return False
            continue
        low, high = torch.aminmax(v)
        if not 0.0 < low.item() <= high.item() < math.inf:
            return False
    return True


def _fused_screen(values: list[torch.Tensor | None], kinds: tuple[str, ...]) -> bool | None:
    """:func:`_extremes_pass` for exactly one ``positive`` parameter and any ``real`` ones of its
    shape and floating dtype, in one operation per ``real`` parameter, one reduction and one host
    read; ``None`` where it does not apply (the caller screens them one by one).

    ``addcmul(y, r, y, value=0) = y + 0 * r * y`` is ``y`` exactly where ``r`` and ``y`` are
    finite, and NaN where either is infinite or NaN (``0 * inf`` is NaN). (torch's CPU kernel
    forms ``0 * r`` first, an exact zero, so nothing overflows; a kernel that formed ``r * y``
    first and overflowed would only send the caller to the checks one by one.) Folding every ``real`` parameter into the ``positive`` one this
    way (the ``positive`` one into itself when there is no other, so that its own infinities
    turn to NaN) leaves a tensor whose smallest entry (``amin`` propagates NaN) is above 0
    exactly when every ``real`` parameter is finite and the ``positive`` one is finite and above
    0.
    """
    if kinds.count("positive") != 1:
        return None
    positive = values[kinds.index("positive")]
    if positive is None or positive.is_meta or not positive.is_floating_point():
        return None
    reals: list[torch.Tensor] = []
    for v, kind in zip(values, kinds, strict=True):
        if kind == "real":
            if v is None or v.shape != positive.shape or v.dtype != positive.dtype:
                return None
            reals.append(v)
    if not positive.numel():
        return False
    y = positive
    for v in reals or [positive]:
        y = torch.addcmul(y, v, y, value=0.0)
    return 0.0 < y.amin().item()  # (NaN, and so every infinity, fails the comparison)


def _check_constraint(
    d: TorchDistribution,
    name: str,
    value: torch.Tensor,
    constraint: constraints.Constraint,
    where: str,
) -> None:
    """torch's parameter check, with a message that says the parameter's shape, how many of its
    values fail the constraint and the first of them, instead of printing the whole tensor."""
    if bool(constraint.check(value).all()):
        return
    base = constraint
    while isinstance(base, constraints.independent):
        base = base.base_constraint
    bad = ~base.check(value)  # per value (per event for a constraint that reduces itself)
    first = tuple(int(i) for i in bad.nonzero()[0].tolist()) if bad.dim() else ()
    at = value[first] if first else value
    example = f"; the first, at index {first}, is {at.item()!r}" if at.numel() == 1 else ""
    shape = tuple(getattr(d, name).shape)
    raise ValueError(
        f"Expected parameter {name} (Tensor of shape {shape}) of distribution "
        f"{type(d).__name__} to satisfy the constraint {constraint!r}, but {int(bad.sum())} of "
        f"{bad.numel()} values do not{example}{where}"
    )


_INTERVAL_KINDS: dict[type, tuple[str, ...] | None] = {}


def _interval_kinds(d: TorchDistribution) -> tuple[str, ...] | None:
    """:func:`_interval_kind` of every parameter of ``d`` in ``arg_constraints`` order, or
    ``None`` if one is neither ``real`` nor ``positive``; computed once per class (for a class
    whose ``arg_constraints`` is a class attribute)."""
    cls = type(d)
    shared = d.arg_constraints is getattr(cls, "arg_constraints", None)
    if shared and cls in _INTERVAL_KINDS:
        return _INTERVAL_KINDS[cls]
    listed = [_interval_kind(c) for c in d.arg_constraints.values()]
    kinds = None if None in listed else tuple(k for k in listed if k is not None)
    if shared:
        _INTERVAL_KINDS[cls] = kinds
    return kinds


def _interval_kind(constraint: constraints.Constraint) -> str | None:
    """``"real"`` or ``"positive"`` for those constraints (also inside ``independent``), else
    ``None``: the constraints that the extremes of a tensor decide."""
    while isinstance(constraint, constraints.independent):
        constraint = constraint.base_constraint
    if constraint is constraints.real:
        return "real"
    if constraint is constraints.positive:
        return "positive"
    return None


def _validate_value(d: TorchDistribution, value: torch.Tensor) -> None:
    """torch's ``_validate_sample`` (shape and support, torch's messages); for an empty ``value``
    only the shapes, since torch's ``independent`` constraints cannot reshape an empty tensor.
    Under a ``torch.func`` transform the support is checked on the values underneath its
    wrappers (torch's check branches on a tensor, which ``vmap`` refuses)."""
    if isinstance(value, torch.Tensor) and value.numel() > 0 and not transforms_active():
        d._validate_sample(value)
        return
    if not isinstance(value, torch.Tensor):
        d._validate_sample(value)  # (refuses a non-tensor, with torch's message)
        return
    _validate_value_shape(d, value)
    _validate_value_support(d, value)


def _validate_value_shape(d: TorchDistribution, value: torch.Tensor) -> None:
    """The shape half of :func:`_validate_value` under a transform (torch's messages)."""
    n = len(d.event_shape)
    if value.shape[value.dim() - n :] != d.event_shape or value.dim() < n:
        raise ValueError(
            f"The right-most size of value must match event_shape: {tuple(value.shape)} vs "
            f"{tuple(d.event_shape)}."
        )
    shape = d.batch_shape + d.event_shape
    if value.shape != shape:
        broadcast_shapes_or_raise(value=value.shape, distribution=shape)


def _validate_value_support(d: TorchDistribution, value: torch.Tensor) -> None:
    """The support half of :func:`_validate_value` under a transform: every batch member's
    values, read on the host."""
    values = host_values(value) if value.numel() > 0 else None
    support = d.support
    if values is not None and support is constraints.real_vector:
        # NaN, the one value real_vector refuses, propagates to the largest entry
        if not math.isnan(float(values.amax())):
            return
    if values is not None and support is not None and not bool(support.check(values).all()):
        raise ValueError(
            f"Expected value argument (Tensor of shape {tuple(value.shape)}) to be within the "
            f"support ({support!r}) of the distribution {type(d).__name__}, but found invalid "
            "values (in a member of the torch.func batch)"
        )


def _logits(
    z: torch.Tensor, log_pair: tuple[torch.Tensor, torch.Tensor] | None = None
) -> torch.Tensor:
    """OvR logits ``log p - log(1 - p)`` of ``p = 1/2 + atan(z)/pi`` without cancellation.

    ``log_pair`` is ``_special.ovr_log_probs_std(z)`` when the caller already has it.
    """
    log_p, log_q = _special.ovr_log_probs_std(z) if log_pair is None else log_pair
    z = z.to(log_p.dtype)
    near = z.abs() <= 1.0
    z_near = torch.where(near, z, torch.zeros_like(z))
    q_near = _special.sf_std(z_near)
    centre = torch.log1p(2.0 * torch.atan(z_near) / (math.pi * q_near))
    return torch.where(near, centre, log_p - log_q)


# ----------------------------------------------------------------------------- IndependentCauchy


class IndependentCauchy(TorchDistribution):
    r"""``C`` independent Cauchy components as one event of shape ``[C]``.

    .. math::

        \log p(x) = \sum_{c=1}^{C} \Big[-\log\pi - \log\gamma_c
            - \log\Big(1 + \Big(\frac{x_c - \mu_c}{\gamma_c}\Big)^2\Big)\Big]

    The negative of ``log_prob`` is the Cauchy negative log-likelihood summed over components.
    Conventions follow :class:`torch.distributions.Cauchy`: ``mean`` is NaN and ``variance`` is
    ``+inf`` (the moments do not exist), ``mode`` is ``loc``; ``rsample`` is reparameterised
    (``loc + scale * tan(pi (u - 1/2))`` with a float64 uniform ``u`` strictly inside (0, 1), so
    samples are always finite). The attribute names ``loc`` and ``scale`` and the constructor
    ``IndependentCauchy(loc=..., scale=...)`` make it usable by
    :class:`pyro.infer.reparam.LocScaleReparam`.

    Args:
        loc: locations (medians), shape ``[*batch, C]`` (at least one dimension).
        scale: scales (half widths), broadcastable with ``loc``; strictly positive and finite.
        validate_args: check the parameters (and ``log_prob`` values); ``None`` uses the torch /
            Pyro global default.

    Raises:
        ValueError: non-broadcastable shapes or zero-dimensional parameters (always); when
            validating, a non-positive ``scale`` or NaN/inf in ``loc`` or ``scale`` (the message
            names the parameter), and in ``log_prob`` a value outside the support or of the wrong
            event shape.

    Example:
        >>> import torch
        >>> from cauchylin.distributions import IndependentCauchy
        >>> d = IndependentCauchy(torch.zeros(2, 3), torch.ones(3))
        >>> d.batch_shape, d.event_shape
        (torch.Size([2]), torch.Size([3]))
        >>> d.rsample((5,)).shape
        torch.Size([5, 2, 3])
        >>> d.log_prob(torch.zeros(3))  # 3 * -log(pi)
        tensor([-3.4342, -3.4342])
    """

    arg_constraints = {  # noqa: RUF012
        "loc": constraints.real_vector,
        "scale": constraints.independent(constraints.positive, 1),
    }
    support = constraints.real_vector
    has_rsample = True

    def __init__(
        self,
        loc: torch.Tensor | float,
        scale: torch.Tensor | float,
        validate_args: bool | None = None,
    ) -> None:
        (self.loc, self.scale), shape = _broadcast_params(loc=loc, scale=scale)
        _init_distribution(self, IndependentCauchy, shape[:-1], shape[-1:], _resolve(validate_args))

    @classmethod
    def from_vector(cls, vector: Any, validate_args: bool | None = None) -> IndependentCauchy:
        """The distribution of an independent :class:`cauchylin.CauchyVector` (``u.to_distribution()``).

        Args:
            vector: a ``CauchyVector`` of shape ``[*batch, C]`` whose entries are independent.
            validate_args: as in the constructor.

        Returns:
            ``IndependentCauchy(vector.loc, vector.scale)``.

        Raises:
            ValueError: the vector's components share sources (after a mixing ``linear``, a
                broadcast or a repeated index), so the product of marginals is not its law.

        Example:
            >>> import torch, cauchylin
            >>> u = cauchylin.CauchyVector(torch.zeros(4), torch.ones(4))
            >>> IndependentCauchy.from_vector(u).event_shape
            torch.Size([4])
        """
        return vector.to_distribution(validate_args=validate_args)

    @classmethod
    def infer_shapes(  # type: ignore[override]  # (Pyro's is **arg_shapes; named here)
        cls, loc: _Shape, scale: _Shape
    ) -> tuple[torch.Size, torch.Size]:
        """``(batch_shape, event_shape)`` for parameters of the given shapes (Pyro's shape API).

        Args:
            loc: shape of ``loc``, ``[*batch, C]``.
            scale: shape of ``scale``, broadcastable with ``loc``'s.

        Returns:
            ``(batch_shape, event_shape)``: the broadcast shape without and with only its last
            dimension, ``[*batch]`` and ``[C]``.

        Raises:
            ValueError: the shapes do not broadcast.

        Example:
            >>> IndependentCauchy.infer_shapes(loc=(2, 3), scale=(3,))
            (torch.Size([2]), torch.Size([3]))
        """
        shape = broadcast_shapes_or_raise(loc=loc, scale=scale)
        return shape[:-1], shape[-1:]

    def expand(self, batch_shape: _Shape, _instance: Any = None) -> IndependentCauchy:
        """A view with a larger ``batch_shape`` (torch's ``Distribution.expand`` contract).

        Args:
            batch_shape: the new batch shape; the event shape ``[C]`` is kept.

        Returns:
            An ``IndependentCauchy`` whose parameters are expanded views (no copy).

        Example:
            >>> IndependentCauchy(torch.zeros(3), 1.0).expand([4]).batch_shape
            torch.Size([4])
        """
        new = self._get_checked_instance(IndependentCauchy, _instance)
        batch_shape = torch.Size(batch_shape)
        shape = batch_shape + self.event_shape
        new.loc = self.loc.expand(shape)
        new.scale = self.scale.expand(shape)
        super(IndependentCauchy, new).__init__(batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self) -> torch.Tensor:
        """NaN of shape ``[*batch, C]``: the mean of a Cauchy law does not exist (as torch's Cauchy)."""
        return torch.full(
            self._extended_shape(), math.nan, dtype=self.loc.dtype, device=self.loc.device
        )

    @property
    def mode(self) -> torch.Tensor:
        """``loc``, shape ``[*batch, C]``."""
        return self.loc

    @property
    def variance(self) -> torch.Tensor:
        """``+inf`` of shape ``[*batch, C]`` (as torch's Cauchy)."""
        return torch.full(
            self._extended_shape(), math.inf, dtype=self.loc.dtype, device=self.loc.device
        )

    def rsample(self, sample_shape: _Shape = ()) -> torch.Tensor:
        """Reparameterised draws ``loc + scale * eps``, ``eps`` from the exact standard quantile.

        Args:
            sample_shape: leading sample dimensions ``S``.

        Returns:
            Finite samples of shape ``[*S, *batch, C]`` (differentiable in ``loc`` and ``scale``).
            For float16 parameters, a draw beyond the float16 range is clamped to its largest
            finite value.
        """
        shape = self._extended_shape(torch.Size(sample_shape))
        dtype = _special.working_dtype(self.loc)
        eps = _special.standard_cauchy(shape, like=self.loc.to(dtype))
        x = self.loc.to(dtype) + eps * self.scale.to(dtype)
        if x.dtype != self.loc.dtype:
            big = torch.finfo(self.loc.dtype).max
            x = x.clamp(-big, big).to(self.loc.dtype)
        return x

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        r"""Summed log-density ``sum_c log p(value_c)``, shape ``[*S, *batch]``.

        Args:
            value: tensor of shape ``[*S, *batch, C]`` (broadcastable).

        Returns:
            ``sum_c [-log(pi) - log(scale_c) - log1p(((value_c - loc_c)/scale_c)^2)]``; float32
            for half-precision inputs.

        Raises:
            ValueError: (when validating) ``value`` holds NaN or has the wrong event shape.
        """
        if not self._validate_args:
            return _log_density(value, self.loc, self.scale).sum(-1)
        if not (isinstance(value, torch.Tensor) and value.numel() and transforms_active()):
            _validate_value(self, value)
            return _log_density(value, self.loc, self.scale).sum(-1)
        # Under a transform the support (no NaN) is read on the host; the density's own
        # finiteness read already proves it when it passes (a finite displacement from a
        # finite loc), so the value is read a second time only when that one fails.
        if value.shape != self._batch_shape + self._event_shape:
            _validate_value_shape(self, value)
        out, finite = _log_density_finite(value, self.loc, self.scale)
        if not finite:
            _validate_value_support(self, value)
        return out.sum(-1)

    def cdf(self, value: torch.Tensor) -> torch.Tensor:
        r"""Joint CDF ``P(X_1 <= x_1, ..., X_C <= x_C) = prod_c cdf_c(x_c)``, shape ``[*S, *batch]``.

        The components are independent, so the joint CDF is the product of the marginal CDFs
        ``1/2 + atan((x_c - loc_c)/scale_c)/pi``; it is computed as ``exp(sum_c log cdf_c)``
        (each ``log cdf_c`` from :func:`cauchylin._special.log_cdf`), so a product of many small
        factors neither underflows early nor loses accuracy.

        Args:
            value: tensor of shape ``[*S, *batch, C]`` (broadcastable).

        Returns:
            The joint probability in ``[0, 1]`` (float32 for half-precision inputs).

        Raises:
            ValueError: (when validating) ``value`` holds NaN or has the wrong event shape.

        Example:
            >>> d = IndependentCauchy(torch.zeros(2), torch.ones(2))
            >>> d.cdf(torch.tensor([0.0, 1.0]))  # 1/2 * 3/4
            tensor(0.3750)
        """
        if self._validate_args:
            _validate_value(self, value)
        dtype = _special.working_dtype(value, self.loc, self.scale)
        d = value.to(dtype) - self.loc.to(dtype)
        return _special.log_cdf(d, self.scale.to(dtype)).sum(-1).exp()

    def icdf(self, value: torch.Tensor) -> torch.Tensor:
        """Not defined: a joint CDF over ``C > 1`` components has no unique inverse.

        Args:
            value: a probability (any value is refused).

        Raises:
            NotImplementedError: always; invert the marginals instead, e.g.
                ``loc + scale * torch.tan(pi * (q - 0.5))``, or use
                :meth:`cauchylin.CauchyVector.icdf` for per-component quantiles.
        """
        raise NotImplementedError(
            "IndependentCauchy.icdf is not defined: the joint CDF of several components has no "
            "unique inverse; use the per-component quantiles, CauchyVector(loc, scale).icdf(q)"
        )

    def entropy(self) -> torch.Tensor:
        """Differential entropy ``sum_c log(4 pi scale_c)``, shape ``[*batch]``.

        Returns:
            The entropy in nats, shape ``[*batch]``.
        """
        return (_LOG_4PI + torch.log(self.scale)).sum(-1)


# ------------------------------------------------------------------------------------------ OvR


class OvR(TorchDistribution):
    r"""Independent one-vs-rest Bernoulli decisions over ``V`` classes, event shape ``[V]``.

    Class ``k`` fires when its Cauchy score ``S_k ~ Cauchy(loc_k, scale_k)`` exceeds its
    threshold ``tau_k``:

    .. math::

        p_k = P(S_k > \tau_k) = \frac12 + \frac1\pi \arctan\frac{\mu_k - \tau_k}{\gamma_k},
        \qquad
        \log p(b) = \sum_k b_k \log p_k + (1 - b_k) \log(1 - p_k).

    ``log p_k`` and ``log(1 - p_k)`` come from ``_special.ovr_log_probs_std`` (accurate in
    float32 for ``|mu - C|/gamma`` up to 1e30, finite gradients), never from ``log(p + eps)``.
    ``-log_prob(one_hot(y))`` is the OvR binary cross-entropy loss of label ``y``;
    :meth:`log_prob_index` computes it without the one-hot tensor. The classes are independent by
    definition of the OvR model; ``loc``/``scale`` are the *marginal* parameters of the scores
    (``OvR.from_vector(U.linear(W), threshold)`` uses the exact marginals of a dependent vector).

    Args:
        loc: score locations, shape ``[*batch, V]`` (at least one dimension after broadcasting).
        scale: score scales, broadcastable; strictly positive and finite.
        threshold: thresholds ``tau_k``, a number or a tensor broadcastable with ``loc``.
        validate_args: check parameters and ``log_prob`` values; ``None`` uses the torch / Pyro
            global default.

    Raises:
        ValueError: non-broadcastable shapes or zero-dimensional parameters (always); when
            validating, a non-positive ``scale``, NaN/inf in ``loc``/``scale``/``threshold`` (the
            message names the parameter), and in ``log_prob`` a value that is not 0/1.

    Example:
        >>> import torch
        >>> from cauchylin.distributions import OvR
        >>> d = OvR(torch.tensor([1.0, 0.0, -1.0]), torch.ones(3), threshold=0.0)
        >>> d.probs
        tensor([0.7500, 0.5000, 0.2500])
        >>> d.log_prob(torch.tensor([1.0, 0.0, 0.0]))  # log(0.75 * 0.5 * 0.75)
        tensor(-1.2685)
        >>> d.log_prob_index(torch.tensor(0))
        tensor(-1.2685)
    """

    arg_constraints = {  # noqa: RUF012
        "loc": constraints.real_vector,
        "scale": constraints.independent(constraints.positive, 1),
        "threshold": constraints.real_vector,
    }
    support = constraints.independent(constraints.boolean, 1)
    has_rsample = False

    def __init__(
        self,
        loc: torch.Tensor | float,
        scale: torch.Tensor | float,
        threshold: torch.Tensor | float = 0.0,
        validate_args: bool | None = None,
    ) -> None:
        (self.loc, self.scale, self.threshold), shape = _broadcast_params(
            loc=loc, scale=scale, threshold=threshold
        )
        _init_distribution(self, OvR, shape[:-1], shape[-1:], _resolve(validate_args))

    @classmethod
    def from_vector(
        cls,
        vector: Any,
        threshold: torch.Tensor | float = 0.0,
        validate_args: bool | None = None,
    ) -> OvR:
        """OvR decisions on the exact marginals of a :class:`cauchylin.CauchyVector` of scores.

        Args:
            vector: a ``CauchyVector`` ``[*batch, V]`` (dependent components are fine: each
                decision uses only its own marginal).
            threshold: thresholds, a number or a tensor broadcastable with ``[*batch, V]``.
            validate_args: as in the constructor.

        Returns:
            ``OvR(vector.loc, vector.scale, threshold)``.

        Example:
            >>> import torch, cauchylin
            >>> u = cauchylin.CauchyVector(torch.zeros(2), torch.ones(2))
            >>> OvR.from_vector(u.linear(torch.ones(5, 2)), 0.0).event_shape
            torch.Size([5])
        """
        return cls(vector.loc, vector.scale, threshold, validate_args=validate_args)

    @classmethod
    def infer_shapes(  # type: ignore[override]  # (Pyro's is **arg_shapes; named here)
        cls, loc: _Shape, scale: _Shape, threshold: _Shape = ()
    ) -> tuple[torch.Size, torch.Size]:
        """``(batch_shape, event_shape)`` for parameters of the given shapes (Pyro's shape API).

        Args:
            loc: shape of ``loc``, ``[*batch, V]``.
            scale: shape of ``scale``, broadcastable with ``loc``'s.
            threshold: shape of ``threshold`` (``()`` for a number).

        Returns:
            ``(batch_shape, event_shape)``: ``[*batch]`` and ``[V]`` of the broadcast shape.

        Raises:
            ValueError: the shapes do not broadcast.

        Example:
            >>> OvR.infer_shapes(loc=(4, 5), scale=(), threshold=(5,))
            (torch.Size([4]), torch.Size([5]))
        """
        shape = broadcast_shapes_or_raise(loc=loc, scale=scale, threshold=threshold)
        return shape[:-1], shape[-1:]

    def expand(self, batch_shape: _Shape, _instance: Any = None) -> OvR:
        """A view with a larger ``batch_shape`` (torch's ``Distribution.expand`` contract).

        Args:
            batch_shape: the new batch shape; the event shape ``[V]`` is kept.

        Returns:
            An ``OvR`` whose ``loc``, ``scale`` and ``threshold`` are expanded views (no copy).

        Example:
            >>> OvR(torch.zeros(3), 1.0).expand([2, 4]).batch_shape
            torch.Size([2, 4])
        """
        new = self._get_checked_instance(OvR, _instance)
        batch_shape = torch.Size(batch_shape)
        shape = batch_shape + self.event_shape
        new.loc = self.loc.expand(shape)
        new.scale = self.scale.expand(shape)
        new.threshold = self.threshold.expand(shape)
        super(OvR, new).__init__(batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    # ------------------------------------------------------------------ probabilities
    def _z(self) -> torch.Tensor:
        dtype = _special.working_dtype(self.loc)
        return (self.loc.to(dtype) - self.threshold.to(dtype)) / self.scale.to(dtype)

    def log_probs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(log p_k, log(1 - p_k))`` of ``p_k = 1/2 + atan(z_k)/pi``, ``z_k = (loc_k - tau_k)/scale_k``.

        Both logarithms are evaluated directly (never ``log(1 - p)`` of a rounded ``p``), so each is
        accurate to a few ulp in float32 for ``|z_k|`` up to ``1e30``.

        Returns:
            Two tensors of shape ``[*batch, V]``, each ``<= 0`` (float32 for half-precision
            parameters).

        Example:
            >>> lp, lq = OvR(torch.tensor([1e30]), 1.0).log_probs()
            >>> lp, lq  # log(1 - 1/(pi 1e30)) and log(1/(pi 1e30))
            (tensor([-3.1831e-31]), tensor([-70.2223]))
        """
        return _special.ovr_log_probs_std(self._z())

    @property
    def probs(self) -> torch.Tensor:
        """``p_k = 1/2 + atan(z_k)/pi`` with ``z_k = (loc_k - tau_k)/scale_k``, shape ``[*batch, V]``.

        Evaluated as ``atan2(1, -z_k)/pi``, which does not cancel for large negative ``z_k``.
        """
        return _special.cdf_std(self._z())

    @property
    def logits(self) -> torch.Tensor:
        """``log p_k - log(1 - p_k)``, accurate to a few ulp (relative) for every ``z``.

        For ``|z| > 1`` the difference of the two stable logs (at least ``log 3`` in magnitude, so
        no cancellation); for ``|z| <= 1`` the cancellation-free form
        ``log1p((p - q)/q) = log1p(2 atan(z) / (pi q))`` with ``q = 1 - p``.
        """
        return _logits(self._z())

    @property
    def mean(self) -> torch.Tensor:
        """``p_k``, shape ``[*batch, V]``."""
        return self.probs

    @property
    def mode(self) -> torch.Tensor:
        """``1`` where ``p_k > 1/2`` (``loc_k > tau_k``), else ``0``; shape ``[*batch, V]``."""
        return (self.loc > self.threshold).to(self.loc.dtype)

    @property
    def variance(self) -> torch.Tensor:
        """``p_k (1 - p_k)``, shape ``[*batch, V]``, evaluated as ``exp(log p_k + log(1 - p_k))``."""
        log_p, log_q = self.log_probs()
        return torch.exp(log_p + log_q)

    # ------------------------------------------------------------------ sampling and scoring
    def sample(self, sample_shape: _Shape = ()) -> torch.Tensor:
        """Independent 0/1 draws with ``P(B_k = 1) = p_k``, shape ``[*S, *batch, V]``.

        A float64 uniform is compared with the *smaller* tail ``t_k = min(p_k, 1 - p_k)`` (which
        is accurate even when ``p_k`` rounds to 1), so both rare outcomes keep their probability.

        Args:
            sample_shape: leading sample dimensions ``S``.

        Returns:
            A tensor of 0.0/1.0 in the parameters' dtype, shape ``[*S, *batch, V]``.
        """
        shape = self._extended_shape(torch.Size(sample_shape))
        with torch.no_grad():
            z = self._z()
            small_tail = _special.sf_std(z.abs()).to(torch.float64)  # min(p, 1 - p)
            u = torch.rand(shape, dtype=torch.float64, device=self.loc.device)
            rare = u < small_tail
            # z <= 0: p is the small tail, B = rare; z > 0: 1 - p is the small tail, B = not rare.
            fires = torch.where(z > 0, ~rare, rare)
            return fires.to(self.loc.dtype)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        r"""``sum_k value_k log p_k + (1 - value_k) log(1 - p_k)``, shape ``[*S, *batch]``.

        A term whose weight is exactly zero contributes exactly zero (no ``0 * -inf``).

        Args:
            value: multi-hot tensor ``[*S, *batch, V]`` of 0/1 (broadcastable).

        Returns:
            The log-probability (float32 for half-precision parameters), ``<= 0``.

        Raises:
            ValueError: (when validating) an entry other than 0/1 or the wrong event shape.
        """
        if self._validate_args:
            _validate_value(self, value)
        log_p, log_q = self.log_probs()
        value = value.to(log_p.dtype)
        zero = torch.zeros((), dtype=log_p.dtype, device=log_p.device)
        on = torch.where(value != 0, value * log_p, zero)
        off = torch.where(value != 1, (1.0 - value) * log_q, zero)
        return (on + off).sum(-1)

    def log_prob_index(self, index: torch.Tensor) -> torch.Tensor:
        r"""``log_prob(one_hot(index))`` without building the one-hot tensor.

        .. math::

            \log p(e_y) = \sum_k \log(1 - p_k) + \big(\log p_y - \log(1 - p_y)\big)

        Memory is ``O(batch * V)`` for the two log tensors plus ``O(batch)`` for the gather.

        Args:
            index: integer class indices in ``[0, V)``, shape ``[*S, *batch]`` (broadcastable
                with ``batch_shape``).

        Returns:
            The log-probability of the pattern "only class ``index`` fires", shape
            ``broadcast(index.shape, batch_shape)``.

        Raises:
            ValueError: (when validating) a non-integer ``index`` or one outside ``[0, V)``.

        Example:
            >>> d = OvR(torch.zeros(2, 4), 1.0, threshold=torch.tensor([0.0, 1.0, 2.0, 3.0]))
            >>> y = torch.tensor([1, 3])
            >>> torch.allclose(d.log_prob_index(y), d.log_prob(torch.nn.functional.one_hot(y, 4).float()))
            True
        """
        if isinstance(index, torch.Tensor):
            index = index.to(self.loc.device)
        else:
            index = torch.as_tensor(index, device=self.loc.device)
        num_classes = self.event_shape[0]
        if self._validate_args:
            if index.is_floating_point() or index.is_complex() or index.dtype == torch.bool:
                raise ValueError(f"index must be an integer tensor, got dtype {index.dtype}")
            values = host_values(index) if index.numel() else None
            if values is not None and bool(((values < 0) | (values >= num_classes)).any()):
                raise ValueError(
                    f"index must lie in [0, {num_classes}) (the number of classes V), but it "
                    f"holds {values.min().item()}..{values.max().item()} (shape {tuple(index.shape)})"
                )
        z = self._z()
        log_pair = _special.ovr_log_probs_std(z)
        log_q = log_pair[1]
        try:
            index, _ = torch.broadcast_tensors(index, log_q[..., 0])
        except RuntimeError:
            broadcast_shapes_or_raise(index=index.shape, batch_shape=self.batch_shape)
            raise
        logit = _logits(z, log_pair).expand(*index.shape, num_classes)
        picked = logit.gather(-1, index.long().unsqueeze(-1)).squeeze(-1)
        return log_q.sum(-1) + picked

    def entropy(self) -> torch.Tensor:
        """Entropy of the decisions, ``-sum_k [p_k log p_k + (1 - p_k) log(1 - p_k)]``.

        Returns:
            The entropy in nats, shape ``[*batch]``; at most ``V log 2`` (reached when every
            ``p_k = 1/2``).
        """
        log_p, log_q = self.log_probs()
        return -(log_p.exp() * log_p + log_q.exp() * log_q).sum(-1)

    def label_distribution(self) -> OvRLabel:
        """The same model observed through one class index: ``OvRLabel(loc, scale, threshold)``.

        Returns:
            An :class:`OvRLabel` with this distribution's parameters and ``validate_args``, batch
            shape ``[*batch]`` and event shape ``[]``.

        Example:
            >>> OvR(torch.zeros(3, 5), 1.0).label_distribution().batch_shape
            torch.Size([3])
        """
        return OvRLabel(self.loc, self.scale, self.threshold, validate_args=self._validate_args)


# ------------------------------------------------------------------------------------- OvRLabel


class OvRLabel(TorchDistribution):
    r"""An OvR model observed through a single label ``y`` (event shape ``[]``).

    ``log_prob(y)`` is the OvR log-likelihood of the one-hot pattern "only class ``y`` fires",
    ``OvR.log_prob_index(y)`` (minus the OvR binary cross-entropy of label ``y``):

    .. math::

        \log p(y) = \sum_k \log(1 - p_k) + \log p_y - \log(1 - p_y).

    It is meant for **observed** sites, ``pyro.sample("y", OvRLabel(...), obs=labels)``, where it
    gives exactly the OvR likelihood used in training. Its total mass over labels is
    ``P(exactly one class fires) <= 1``, so it is not a normalised law over ``{0..V-1}``;
    ``sample`` (used by ``Predictive`` and unobserved sites) draws from the normalised conditional
    law *given exactly one class fires*, ``P(y | one fires) = softmax(logits)_y``. Do not use it as
    a latent site in an ELBO.

    Args:
        loc: score locations ``[*batch, V]``.
        scale: score scales, broadcastable; strictly positive and finite.
        threshold: thresholds, a number or broadcastable tensor.
        validate_args: as for :class:`OvR`.

    Raises:
        ValueError: as for :class:`OvR`; ``log_prob`` with a label outside ``[0, V)``.

    Example:
        >>> import torch
        >>> from cauchylin.distributions import OvRLabel
        >>> d = OvRLabel(torch.tensor([[2.0, 0.0, -2.0]]), 1.0)
        >>> d.batch_shape, d.event_shape
        (torch.Size([1]), torch.Size([]))
        >>> d.log_prob(torch.tensor([0])).exp()  # p_0 (1 - p_1)(1 - p_2)
        tensor([0.3633])
    """

    arg_constraints = OvR.arg_constraints
    has_rsample = False

    def __init__(
        self,
        loc: torch.Tensor | float,
        scale: torch.Tensor | float,
        threshold: torch.Tensor | float = 0.0,
        validate_args: bool | None = None,
    ) -> None:
        self.ovr = OvR(loc, scale, threshold, validate_args=validate_args)
        self.loc, self.scale, self.threshold = self.ovr.loc, self.ovr.scale, self.ovr.threshold
        super().__init__(self.ovr.batch_shape, torch.Size(), validate_args=False)
        self._validate_args = self.ovr._validate_args

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self) -> constraints.Constraint:
        """``integer_interval(0, V - 1)``."""
        return constraints.integer_interval(0, self.ovr.event_shape[0] - 1)

    @classmethod
    def infer_shapes(  # type: ignore[override]  # (Pyro's is **arg_shapes; named here)
        cls, loc: _Shape, scale: _Shape, threshold: _Shape = ()
    ) -> tuple[torch.Size, torch.Size]:
        """``(batch_shape, event_shape)`` for parameters of the given shapes (event shape ``[]``).

        Args:
            loc: shape of ``loc``, ``[*batch, V]``.
            scale: shape of ``scale``, broadcastable with ``loc``'s.
            threshold: shape of ``threshold`` (``()`` for a number).

        Returns:
            ``(batch_shape, torch.Size([]))`` with ``batch_shape`` the broadcast shape without its
            last dimension.

        Raises:
            ValueError: the shapes do not broadcast.

        Example:
            >>> OvRLabel.infer_shapes(loc=(2, 5), scale=(), threshold=(5,))
            (torch.Size([2]), torch.Size([]))
        """
        shape = broadcast_shapes_or_raise(loc=loc, scale=scale, threshold=threshold)
        return shape[:-1], torch.Size()

    @property
    def num_classes(self) -> int:
        """The number of classes ``V``."""
        return self.ovr.event_shape[0]

    @property
    def logits(self) -> torch.Tensor:
        """Per-class OvR logits ``log p_k - log(1 - p_k)``, shape ``[*batch, V]``."""
        return self.ovr.logits

    def expand(self, batch_shape: _Shape, _instance: Any = None) -> OvRLabel:
        """A view with a larger ``batch_shape`` (torch's ``Distribution.expand`` contract).

        Args:
            batch_shape: the new batch shape (the event shape stays ``[]``).

        Returns:
            An ``OvRLabel`` over the expanded :class:`OvR` (parameters are views, no copy).
        """
        new = self._get_checked_instance(OvRLabel, _instance)
        batch_shape = torch.Size(batch_shape)
        new.ovr = self.ovr.expand(batch_shape)
        new.loc, new.scale, new.threshold = new.ovr.loc, new.ovr.scale, new.ovr.threshold
        super(OvRLabel, new).__init__(batch_shape, torch.Size(), validate_args=False)
        new._validate_args = self._validate_args
        return new

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """``OvR.log_prob_index(value)``: the OvR log-likelihood of label ``value``.

        ``log p(y) = sum_k log(1 - p_k) + log p_y - log(1 - p_y)`` (see the class docstring).

        Args:
            value: integer labels in ``[0, V)``, shape ``[*S, *batch]`` (broadcastable with
                ``batch_shape``); float tensors holding whole numbers are accepted.

        Returns:
            The log-likelihood, shape ``broadcast(value.shape, batch_shape)``, ``<= 0``.

        Raises:
            ValueError: (when validating, torch's ``_validate_sample``) a value outside the
                support ``integer_interval(0, V - 1)`` (a float that is not a whole number
                included) or one that does not broadcast with ``batch_shape``.
        """
        if isinstance(value, torch.Tensor):
            value = value.to(self.loc.device)
        else:
            value = torch.as_tensor(value, device=self.loc.device)
        if self._validate_args:
            # Pyro may hand over float labels from a float obs; the support accepts whole numbers.
            _validate_value(self, value)
        return self.ovr.log_prob_index(value.long())

    def sample(self, sample_shape: _Shape = ()) -> torch.Tensor:
        """Labels from ``softmax(logits)``: the OvR law conditioned on exactly one class firing.

        ``P(y | exactly one fires) = p_y prod_{k != y} (1 - p_k) / Z = softmax(logits)_y`` with
        ``logits_k = log p_k - log(1 - p_k)``.

        Args:
            sample_shape: leading sample dimensions ``S``.

        Returns:
            Integer (int64) labels of shape ``[*S, *batch]`` (empty when ``S`` or the batch has
            no element).

        Example:
            >>> d = OvRLabel(torch.tensor([5.0, -5.0, -5.0]), 1.0)
            >>> d.sample(), d.sample((2,)).shape, d.sample((0,)).shape
            (tensor(0), torch.Size([2]), torch.Size([0]))
        """
        shape = self._extended_shape(torch.Size(sample_shape))
        n = math.prod(torch.Size(sample_shape))
        # (a captured graph has fixed, non-empty shapes: no shape test to freeze into it)
        if not is_tracing() and (n == 0 or math.prod(self.batch_shape) == 0):
            return torch.empty(shape, dtype=torch.long, device=self.loc.device)
        with torch.no_grad():
            logits = self.ovr.logits.detach()
            probs = torch.softmax(logits.to(torch.float64), dim=-1)
            flat = probs.reshape(-1, probs.shape[-1])
            draws = torch.multinomial(flat, n, replacement=True)  # [batch, n]
            return draws.T.reshape(shape)

    def entropy(self) -> torch.Tensor:
        """Not defined: ``log_prob`` is not normalised over the labels.

        Raises:
            NotImplementedError: always; use :meth:`OvR.entropy` for the entropy of the decisions.
        """
        raise NotImplementedError(
            "OvRLabel.log_prob is the OvR likelihood of a one-hot pattern, not a normalised law "
            "over labels; use OvR.entropy() for the entropy of the decisions"
        )


# ------------------------------------------------------------------------------------------- KL


def _same_event(p: Any, q: Any) -> None:
    if p.event_shape != q.event_shape:
        raise ValueError(
            f"p and q must have the same event shape, got {tuple(p.event_shape)} and "
            f"{tuple(q.event_shape)}"
        )


@register_kl(IndependentCauchy, IndependentCauchy)
def _kl_independent_cauchy(p: IndependentCauchy, q: IndependentCauchy) -> torch.Tensor:
    r"""``sum_c log(((g1 + g2)^2 + (m1 - m2)^2) / (4 g1 g2))``, shape ``broadcast(batch)``."""
    _same_event(p, q)
    return _special.cauchy_kl(p.loc, p.scale, q.loc, q.scale).sum(-1)


def _as_cauchy_vector(d: Independent) -> Cauchy:
    """The ``Cauchy`` base of ``Independent(Cauchy, 1)``; ``NotImplementedError`` for any other."""
    base = d.base_dist
    if not isinstance(base, Cauchy) or d.reinterpreted_batch_ndims != 1:
        raise NotImplementedError(
            "KL between IndependentCauchy and Independent is implemented only for "
            f"Independent(Cauchy, 1); got Independent({type(base).__name__}, "
            f"{d.reinterpreted_batch_ndims})"
        )
    return base


@register_kl(IndependentCauchy, Independent)
def _kl_independent_cauchy_torch(p: IndependentCauchy, q: Independent) -> torch.Tensor:
    """``KL(IndependentCauchy || Independent(Cauchy, 1))``: the same closed form, summed over ``C``."""
    base = _as_cauchy_vector(q)
    _same_event(p, q)
    return _special.cauchy_kl(p.loc, p.scale, base.loc, base.scale).sum(-1)


@register_kl(Independent, IndependentCauchy)
def _kl_torch_independent_cauchy(p: Independent, q: IndependentCauchy) -> torch.Tensor:
    """``KL(Independent(Cauchy, 1) || IndependentCauchy)``: the same closed form, summed over ``C``."""
    base = _as_cauchy_vector(p)
    _same_event(p, q)
    return _special.cauchy_kl(base.loc, base.scale, q.loc, q.scale).sum(-1)


@register_kl(OvR, OvR)
def _kl_ovr(p: OvR, q: OvR) -> torch.Tensor:
    r"""``sum_k p_k (log p_k - log q_k) + (1 - p_k)(log(1 - p_k) - log(1 - q_k))``.

    Computed from the stable log pairs; each class term is clamped at 0 (it is mathematically
    non-negative) to remove rounding noise of order one ulp.
    """
    _same_event(p, q)
    lp1, lq1 = p.log_probs()
    lp2, lq2 = q.log_probs()
    zero = torch.zeros((), dtype=lp1.dtype, device=lp1.device)
    on = torch.where(lp1 > -math.inf, lp1.exp() * (lp1 - lp2), zero)
    off = torch.where(lq1 > -math.inf, lq1.exp() * (lq1 - lq2), zero)
    return (on + off).clamp_min(0.0).sum(-1)
