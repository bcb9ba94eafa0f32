r"""Model-agnostic layers of the causal decision model: embedding, Abduction, Action, modes.

The forward pass of seed 000 §2, for any feature tensor ``z`` of shape ``[..., H]``:

* :class:`NumericEmbedding` — ``e = base_embed + sign(v) ln(1 + |v|) w_num``;
* :class:`Abduction` — ``U ~ Cauchy(W_loc z + b_loc, softplus(W_scale z + b_scale))``, a
  :class:`~cauchylin.CauchyVector` of shape ``[..., C]``;
* :class:`Action` — the decision input ``U'`` of the chosen inference mode, the class scores
  ``S = W_cls U' + b_cls`` (``[..., V]``) and the regression value ``Y = W_reg U' + b_reg``
  (``[..., 1]``), all in closed form.

Inference modes (seed 003 for the first four, seed 000 §3 for the rest), with temperature ``T``
and ``n = |b_noise|``:

================== =====================================================================
mode               decision input ``U'`` fed to the linear heads
================== =====================================================================
causal             ``U`` itself (also every non-compatible mode at ``T = 0``)
standard           ``Cauchy(loc_U, scale_U + T n)`` — the training mode
sampling           ``Cauchy(loc_U + T n eps, scale_U)``, ``eps ~ Cauchy(0, 1)`` drawn
compatible         as standard at ``T = 1``; decisions by ``softmax(loc_S / T)``
individual         ``u ~ Cauchy(loc_U, T scale_U)`` drawn, then ``Cauchy(u, n)``
shared_individual  ``u = loc_U + T scale_U tan(pi (eps_seed - 1/2))``, then ``Cauchy(u, n)``
shared_noise       ``Cauchy(loc_U + T n eps_noise, scale_U)``
================== =====================================================================

The two shared modes take their draw (``eps_seed`` or ``eps_noise``, from :func:`draw_eps_seed`
/ :func:`draw_eps_noise`) as an argument so that a generation loop can hold one draw for a whole
sequence: the same individual (or the same systematic noise) replayed on every step and, for a
counterfactual, on a different input.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from cauchylin import _special
from cauchylin._validation import check_finite, is_validating
from cauchylin.vector import CauchyVector, standard_cauchy

if TYPE_CHECKING:  # pragma: no cover
    from cauchylin.losses import CausalLMLoss

__all__ = [
    "MODES",
    "Abduction",
    "Action",
    "ActionOutput",
    "NumericEmbedding",
    "draw_eps_noise",
    "draw_eps_seed",
    "effective_mode",
    "inverse_softplus",
    "sample_compatible",
]

MODES: tuple[str, ...] = (
    "causal",
    "standard",
    "sampling",
    "compatible",
    "individual",
    "shared_individual",
    "shared_noise",
)
"""The inference modes accepted by :meth:`Action.forward` and :meth:`Action.decision_input`."""

_INIT_OPTIONS = ("random_unit", "normal", "zeros")


def _low_precision(dtype: torch.dtype) -> bool:
    return dtype in (torch.float16, torch.bfloat16)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays, float32 stays, half precision computes in float32."""
    return torch.float32 if _low_precision(dtype) or not dtype.is_floating_point else dtype


# ============================================================================================
# Numeric embedding
# ============================================================================================


class NumericEmbedding(nn.Module):
    r"""Numeric-aware embedding: adds ``phi(v) = sign(v) ln(1 + |v|) w_num`` to the token embedding.

    .. math::

        e_i = \mathrm{base}_i + \phi(v_i), \qquad
        \phi(v) = \operatorname{sign}(v)\,\ln(1 + |v|)\; w_\mathrm{num}

    Non-numeric positions carry ``v = 0``, and ``phi(0)`` is exactly the zero vector, so there
    ``e`` equals the base embedding bit for bit (seed 000 §2.1).

    Args:
        hidden_size: ``H``, the embedding width.
        init: initial ``w_num``: ``"random_unit"`` (default; a standard normal direction scaled to
            unit Euclidean norm, SPEC §5 and seed 002), ``"normal"`` (entries ``N(0, 1/H)``, i.e.
            std ``1/sqrt(H)``, seed 000 §4) or ``"zeros"``.
        generator: optional ``torch.Generator`` for the random initialisations.
        device: device of ``w_num``.
        dtype: dtype of ``w_num`` (default: the global default dtype).

    Attributes:
        w_num: ``nn.Parameter`` of shape ``[H]``.

    Raises:
        ValueError: ``hidden_size < 1`` or an unknown ``init``.

    Example:
        >>> import torch
        >>> from cauchylin.nn import NumericEmbedding
        >>> emb = NumericEmbedding(4, generator=torch.Generator().manual_seed(0))
        >>> base = torch.zeros(1, 3, 4)
        >>> out = emb(base, torch.tensor([[0.0, 99.9, -1.0]]))
        >>> bool((out[0, 0] == 0).all()), round(out[0, 1].norm().item(), 4)  # ln(100.9)
        (True, 4.6141)
    """

    def __init__(
        self,
        hidden_size: int,
        *,
        init: str = "random_unit",
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(hidden_size, int) or hidden_size < 1:
            raise ValueError(f"hidden_size must be a positive int, got {hidden_size!r}")
        if init not in _INIT_OPTIONS:
            raise ValueError(f"init must be one of {_INIT_OPTIONS}, got {init!r}")
        self.hidden_size = hidden_size
        self.init = init
        self.w_num = nn.Parameter(torch.empty(hidden_size, device=device, dtype=dtype))
        self.reset_parameters(generator=generator)

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """Re-draw ``w_num`` according to ``self.init`` (see the class docstring).

        The random draw is made in float64 on the CPU (so a CPU generator works for any device)
        and normalised there before the cast, so the ``"random_unit"`` norm is 1 to the rounding
        of the parameter dtype.

        Args:
            generator: optional CPU ``torch.Generator`` for the draw (ignored by ``"zeros"``).

        Example:
            >>> import torch
            >>> from cauchylin.nn import NumericEmbedding
            >>> emb = NumericEmbedding(8)
            >>> emb.reset_parameters(torch.Generator().manual_seed(3))
            >>> first = emb.w_num.detach().clone()
            >>> emb.reset_parameters(torch.Generator().manual_seed(3))
            >>> bool(torch.equal(emb.w_num, first)), round(first.norm().item(), 5)  # unit norm
            (True, 1.0)
        """
        h = self.hidden_size
        with torch.no_grad():
            if self.init == "zeros":
                self.w_num.zero_()
                return
            draw = torch.randn(h, dtype=torch.float64, device="cpu", generator=generator)
            if self.init == "random_unit":
                draw = draw / torch.linalg.vector_norm(draw)
            else:
                draw = draw / math.sqrt(h)
            self.w_num.copy_(draw.to(self.w_num.dtype))

    def encode(self, numeric_values: torch.Tensor) -> torch.Tensor:
        r"""The numeric encoding ``phi(v) = sign(v) ln(1 + |v|) w_num``.

        Computed in ``float32`` (``float64`` when ``w_num`` or the values are ``float64``) with
        ``log1p``; ``phi(0)`` is exactly zero (``sign(0) = 0``). Integer values are accepted.

        Args:
            numeric_values: ``[...]`` the value at each position (0 where there is no number).

        Returns:
            ``[..., H]`` in the compute dtype (``float32`` unless ``float64`` is involved).

        Raises:
            ValueError: ``numeric_values`` is not a tensor, or (while validating, see
                :func:`cauchylin.set_validate_args`) holds NaN or an infinity.

        Example:
            >>> import torch
            >>> from cauchylin.nn import NumericEmbedding
            >>> emb = NumericEmbedding(2, init="zeros")
            >>> with torch.no_grad():
            ...     _ = emb.w_num.copy_(torch.tensor([1.0, -1.0]))
            >>> emb.encode(torch.tensor([0.0, -3.0]))
            tensor([[ 0.0000, -0.0000],
                    [-1.3863,  1.3863]], grad_fn=<MulBackward0>)
        """
        if not isinstance(numeric_values, torch.Tensor):
            raise ValueError(
                f"numeric_values must be a torch.Tensor, got {type(numeric_values).__name__}"
            )
        if is_validating():
            if numeric_values.is_floating_point() or numeric_values.is_complex():
                check_finite("numeric_values", numeric_values)
        dtype = torch.promote_types(
            _compute_dtype(self.w_num.dtype),
            _compute_dtype(numeric_values.dtype)
            if numeric_values.is_floating_point()
            else torch.float32,
        )
        v = numeric_values.to(device=self.w_num.device, dtype=dtype)
        magnitude = torch.sign(v) * torch.log1p(v.abs())
        return magnitude.unsqueeze(-1) * self.w_num.to(dtype)

    def forward(self, base_embeds: torch.Tensor, numeric_values: torch.Tensor) -> torch.Tensor:
        """The enhanced embedding ``base_embeds + phi(numeric_values)``.

        The sum is formed in the compute dtype and rounded once to ``base_embeds``' dtype; where
        ``numeric_values`` is 0 the output equals ``base_embeds`` exactly.

        Args:
            base_embeds: ``[..., H]`` token embeddings.
            numeric_values: ``[...]`` (``base_embeds`` without its last dimension, or
                broadcastable to it).

        Returns:
            ``[..., H]`` with ``base_embeds``' dtype and shape.

        Raises:
            ValueError: the last dimension of ``base_embeds`` is not ``H``, ``numeric_values`` does
                not broadcast to ``base_embeds.shape[:-1]``, or non-finite values (see
                :meth:`encode`).

        Example:
            >>> import torch
            >>> from cauchylin.nn import NumericEmbedding
            >>> emb = NumericEmbedding(3, generator=torch.Generator().manual_seed(0))
            >>> base = torch.randn(2, 4, 3, dtype=torch.bfloat16)
            >>> out = emb(base, torch.tensor([[0.0, 1.5, 0.0, 0.0], [0.0, 0.0, 0.0, -2e3]]))
            >>> out.dtype, bool(torch.equal(out[0, 0], base[0, 0]))
            (torch.bfloat16, True)
        """
        if not isinstance(base_embeds, torch.Tensor) or base_embeds.ndim < 1:
            raise ValueError("base_embeds must be a tensor of shape [..., H]")
        if base_embeds.shape[-1] != self.hidden_size:
            raise ValueError(
                f"base_embeds has last dimension {base_embeds.shape[-1]}, expected hidden_size "
                f"{self.hidden_size} (base_embeds shape {tuple(base_embeds.shape)})"
            )
        if not isinstance(numeric_values, torch.Tensor):
            raise ValueError(
                f"numeric_values must be a torch.Tensor, got {type(numeric_values).__name__}"
            )
        batch = base_embeds.shape[:-1]
        try:
            ok = torch.broadcast_shapes(numeric_values.shape, batch) == batch
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(
                f"numeric_values shape {tuple(numeric_values.shape)} must match (or broadcast to) "
                f"base_embeds without its last dimension, {tuple(batch)}"
            )
        phi = self.encode(numeric_values)
        dtype = torch.promote_types(phi.dtype, base_embeds.dtype)
        return (base_embeds.to(dtype) + phi).to(base_embeds.dtype)

    def extra_repr(self) -> str:
        """The settings shown in the module's ``repr``.

        Returns:
            ``"hidden_size=H, init='...'"``.
        """
        return f"hidden_size={self.hidden_size}, init={self.init!r}"


# ============================================================================================
# Abduction
# ============================================================================================


def inverse_softplus(gamma: float) -> float:
    r"""``softplus^{-1}(gamma) = log(exp(gamma) - 1)``, computed stably in float64.

    Evaluated as ``gamma + log(-expm1(-gamma))``, which neither overflows for large ``gamma``
    (``exp(1e4)`` would) nor cancels for small ones (``exp(1e-6) - 1`` would lose half the
    digits).

    Args:
        gamma: the target value of ``softplus``, finite and ``> 0``.

    Returns:
        ``x`` with ``log(1 + exp(x)) == gamma`` to float64 rounding.

    Raises:
        ValueError: ``gamma`` is not a finite positive number.

    Example:
        >>> from cauchylin.nn import inverse_softplus
        >>> round(inverse_softplus(10.0), 6), round(inverse_softplus(1e-6), 4)
        (9.999955, -13.8155)
    """
    try:
        g = float(gamma)
    except (TypeError, ValueError):
        raise ValueError(f"gamma must be a finite positive number, got {gamma!r}") from None
    if not math.isfinite(g) or g <= 0.0:
        raise ValueError(f"gamma must be a finite positive number, got {gamma!r}")
    return g + math.log(-math.expm1(-g))


def _best_bias(gamma: float, dtype: torch.dtype) -> float:
    """The value of ``dtype`` nearest ``softplus^-1(gamma)`` whose ``softplus`` is closest to gamma.

    ``softplus^-1`` is computed in float64 and rounded to ``dtype``; the few neighbouring
    representable values are then tried with torch's own ``softplus`` in that dtype (the one the
    forward pass uses) and the best is kept. This removes the extra rounding of the bias, so
    ``scale_U`` after initialisation is ``gamma`` to the rounding of ``dtype`` wherever that value
    is reachable. Everything runs on the CPU, so parameters on any device (``meta`` included) can
    be filled with the result.
    """
    x = torch.tensor(inverse_softplus(gamma), dtype=torch.float64, device="cpu")
    work = _compute_dtype(dtype)
    best = x.to(work)
    if work not in (torch.float32, torch.float64):
        return float(best)
    candidates = [best]
    up = torch.tensor(math.inf, dtype=work, device="cpu")
    down = torch.tensor(-math.inf, dtype=work, device="cpu")
    lo = hi = best
    for _ in range(4):
        lo = torch.nextafter(lo, down)
        hi = torch.nextafter(hi, up)
        candidates += [lo, hi]
    cand = torch.stack(candidates)
    err = (torch.nn.functional.softplus(cand).to(torch.float64) - gamma).abs()
    # Ties go to the first candidate: the correctly rounded inverse.
    return float(cand[int(torch.argmin(err))])


class Abduction(nn.Module):
    r"""Abduction network: infers the individual representation ``U ~ Cauchy(loc_U, scale_U)``.

    .. math::

        \mathrm{loc}_U = W_\mathrm{loc} z + b_\mathrm{loc}, \qquad
        \mathrm{scale}_U = \operatorname{softplus}(W_\mathrm{scale} z + b_\mathrm{scale})

    Initialisation (seed 002, SPEC §3): ``W_loc = I``, ``b_loc = 0``, ``W_scale = 0``,
    ``b_scale = softplus^-1(gamma_init)`` (:func:`inverse_softplus`, stable for any
    ``gamma_init`` from ``1e-6`` to ``1e4`` and beyond). Right after it, ``loc_U == z`` exactly
    (an identity GEMM is exact in IEEE arithmetic) and ``scale_U`` is the same constant
    ``softplus(b_scale) = gamma_init`` (to the parameter dtype's rounding) at every position.

    When ``in_features != causal_size`` the location weight is the rectangular identity
    ``eye(causal_size, in_features)``: the first ``min(C, H)`` coordinates of ``z`` are copied and,
    when ``C > H``, the remaining ``C - H`` coordinates of ``loc_U`` start at 0.

    ``scale_U`` is floored at the smallest normal number of its dtype (``torch.finfo.tiny``) so
    that it stays strictly positive even where ``softplus`` underflows; this changes nothing for
    any value above the floor.

    Args:
        in_features: ``H``, the width of ``z``.
        causal_size: ``C``, the width of ``U``.
        gamma_init: the initial constant scale ``gamma_0`` (default 10.0, seed 002).
        device: device of the parameters.
        dtype: dtype of the parameters (keep float32 or float64; half-precision inputs are
            computed in float32).

    Attributes:
        loc_net: ``nn.Linear(in_features, causal_size)``.
        scale_net: ``nn.Linear(in_features, causal_size)``.

    Raises:
        ValueError: non-positive sizes, or ``gamma_init`` that is not finite and ``> 0``.

    Example:
        >>> import torch
        >>> from cauchylin.nn import Abduction
        >>> abd = Abduction(4, 4, gamma_init=10.0)
        >>> z = torch.randn(2, 3, 4)
        >>> U = abd(z)
        >>> bool(torch.equal(U.loc, z)), round(U.scale[0, 0, 0].item(), 4)
        (True, 10.0)
    """

    def __init__(
        self,
        in_features: int,
        causal_size: int,
        *,
        gamma_init: float = 10.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        for name, size in (("in_features", in_features), ("causal_size", causal_size)):
            if not isinstance(size, int) or size < 1:
                raise ValueError(f"{name} must be a positive int, got {size!r}")
        inverse_softplus(gamma_init)  # validates gamma_init, raising a ValueError
        self.in_features = in_features
        self.causal_size = causal_size
        self.gamma_init = float(gamma_init)
        self.loc_net = nn.Linear(in_features, causal_size, device=device, dtype=dtype)
        self.scale_net = nn.Linear(in_features, causal_size, device=device, dtype=dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Apply the identity / constant-scale initialisation described in the class docstring.

        ``W_loc = eye(C, H)``, ``b_loc = 0``, ``W_scale = 0`` and ``b_scale`` the value of the
        parameter dtype whose ``softplus`` is nearest ``gamma_init``.

        Example:
            >>> import torch
            >>> from cauchylin.nn import Abduction
            >>> abd = Abduction(3, 3, gamma_init=2.0)
            >>> with torch.no_grad():
            ...     _ = abd.loc_net.weight.add_(1.0)
            >>> abd.reset_parameters()
            >>> U = abd(torch.tensor([[1.0, -2.0, 3.0]]))
            >>> U.loc.tolist(), U.scale.tolist()  # loc_U = z and scale_U = gamma_init again
            ([[1.0, -2.0, 3.0]], [[2.0, 2.0, 2.0]])
        """
        w = self.loc_net.weight
        with torch.no_grad():
            w.copy_(torch.eye(self.causal_size, self.in_features, dtype=w.dtype, device=w.device))
            self.loc_net.bias.zero_()
            self.scale_net.weight.zero_()
            bias = self.scale_net.bias
            bias.fill_(_best_bias(self.gamma_init, bias.dtype))

    def forward(self, z: torch.Tensor) -> CauchyVector:
        """Infer ``U`` from the features.

        Args:
            z: ``[..., H]`` features (any float dtype; ``bfloat16``/``float16`` are cast to the
                layer's dtype, float32 by default, before the linear maps).

        Returns:
            :class:`~cauchylin.CauchyVector` of shape ``[..., C]`` with independent components
            (a leaf), ``loc = W_loc z + b_loc`` and ``scale = softplus(W_scale z + b_scale)``.

        Raises:
            ValueError: ``z`` is not a floating tensor with last dimension ``H``; or (while
                validating) ``z`` produces a non-finite location.

        Example:
            >>> import torch
            >>> from cauchylin.nn import Abduction
            >>> U = Abduction(8, 8, gamma_init=1.0)(torch.randn(2, 8, dtype=torch.bfloat16))
            >>> U.shape, U.dtype, round(U.scale[0, 0].item(), 4)
            (torch.Size([2, 8]), torch.float32, 1.0)
        """
        if not isinstance(z, torch.Tensor) or not z.is_floating_point() or z.ndim < 1:
            raise ValueError("z must be a floating-point tensor of shape [..., in_features]")
        if z.shape[-1] != self.in_features:
            raise ValueError(
                f"z has last dimension {z.shape[-1]}, expected in_features {self.in_features} "
                f"(z shape {tuple(z.shape)})"
            )
        weight = self.loc_net.weight
        dtype = _compute_dtype(weight.dtype)
        x = z.to(dtype)

        def lin(layer: nn.Linear) -> torch.Tensor:
            return nn.functional.linear(x, layer.weight.to(dtype), layer.bias.to(dtype))

        loc = lin(self.loc_net)
        scale = nn.functional.softplus(lin(self.scale_net))
        scale = scale.clamp_min(torch.finfo(dtype).tiny)
        return CauchyVector(loc, scale)

    def extra_repr(self) -> str:
        """The settings shown in the module's ``repr``.

        Returns:
            ``"in_features=H, causal_size=C, gamma_init=..."``.
        """
        return (
            f"in_features={self.in_features}, causal_size={self.causal_size}, "
            f"gamma_init={self.gamma_init}"
        )


# ============================================================================================
# Draws of the sampling modes
# ============================================================================================


def draw_eps_seed(
    shape: Sequence[int] | torch.Size,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    r"""Draw the individual-selection factor ``eps_seed ~ Uniform(0, 1)^C`` on the open interval.

    For the ``shared_individual`` mode: drawn once per sequence and reused at every step,
    ``u_t = loc_U,t + T scale_U,t tan(pi (eps_seed - 1/2))``.

    The uniform is drawn in float64 and cast; the result is then clamped into the open interval
    of ``dtype`` (``[tiny, 1 - ulp/2]``), so ``tan(pi (eps - 1/2))`` is always finite.

    Args:
        shape: e.g. ``[C]`` for one individual shared by the whole batch, ``[B, 1, C]`` for one
            per sequence of a ``[B, S, C]`` batch.
        generator: optional ``torch.Generator`` (on ``device``) for reproducible draws.
        device: device of the result.
        dtype: floating dtype of the result (default: the global default dtype). ``float64``
            keeps the full resolution of the quantile in the tails.

    Returns:
        Tensor of ``shape`` with entries in ``(0, 1)``.

    Example:
        >>> import torch
        >>> from cauchylin.nn import draw_eps_seed
        >>> eps = draw_eps_seed((2, 1, 8), generator=torch.Generator().manual_seed(0))
        >>> eps.shape, bool(((eps > 0) & (eps < 1)).all())
        (torch.Size([2, 1, 8]), True)
    """
    dtype = torch.get_default_dtype() if dtype is None else dtype
    u = torch.rand(torch.Size(shape), dtype=torch.float64, device=device, generator=generator)
    u = u.to(dtype)
    one = torch.ones((), dtype=dtype, device=u.device)
    below_one = torch.nextafter(one, torch.zeros_like(one))
    return u.clamp(min=torch.finfo(dtype).tiny).minimum(below_one)


def draw_eps_noise(
    shape: Sequence[int] | torch.Size,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Draw standard Cauchy noise ``eps ~ Cauchy(0, I)``.

    The ``sampling`` mode draws ``eps = draw_eps_noise(U.shape, generator=generator)`` at every
    call; the ``shared_noise`` mode takes one such draw for a whole sequence. The draw is the
    exact quantile ``tan(pi (q - 1/2))`` of a float64 uniform ``q`` on the open interval.

    Args:
        shape: shape of the draw, e.g. ``[C]`` or ``[B, 1, C]``.
        generator: optional ``torch.Generator`` (on ``device``).
        device: device of the result.
        dtype: floating dtype of the result (default: the global default dtype).

    Returns:
        Finite tensor of ``shape``.

    Example:
        >>> import torch
        >>> from cauchylin.nn import draw_eps_noise
        >>> a = draw_eps_noise((3,), generator=torch.Generator().manual_seed(1))
        >>> b = draw_eps_noise((3,), generator=torch.Generator().manual_seed(1))
        >>> bool(torch.equal(a, b))
        True
    """
    dtype = torch.get_default_dtype() if dtype is None else dtype
    like = torch.empty(0, dtype=dtype, device=device)
    return standard_cauchy(torch.Size(shape), like, generator)


# ============================================================================================
# Compatible-mode sampling
# ============================================================================================


def _check_temperature(temperature: float) -> float:
    if isinstance(temperature, torch.Tensor):
        if temperature.numel() != 1:
            raise ValueError("temperature must be a number (or a one-element tensor)")
        temperature = temperature.item()
    try:
        t = float(temperature)
    except (TypeError, ValueError):
        raise ValueError(f"temperature must be a number, got {temperature!r}") from None
    if not math.isfinite(t) or t < 0:
        raise ValueError(f"temperature must be finite and >= 0, got {temperature!r}")
    return t


def sample_compatible(
    logits: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    r"""Sample token ids from ``softmax(logits / T)`` with optional top-k / top-p filtering.

    The compatible mode of seed 003: ``loc_S`` is used as ordinary logits. ``top_k`` keeps the
    ``k`` largest logits (ties with the ``k``-th are kept too); ``top_p`` keeps the smallest set of
    most probable tokens whose probability reaches ``p`` (the most probable token always stays);
    both may be combined (top-k first). The kept probabilities are renormalised.
    ``temperature = 0`` is greedy decoding (``argmax``, no randomness).

    Args:
        logits: ``[..., V]``.
        temperature: ``T >= 0``.
        top_k: ``None`` or an int ``>= 1`` (values above ``V`` keep everything).
        top_p: ``None`` or a float in ``(0, 1]``.
        generator: optional ``torch.Generator`` for reproducible draws.

    Returns:
        ``LongTensor`` of shape ``[...]``.

    Raises:
        ValueError: a negative or non-finite temperature, ``top_k < 1``, ``top_p`` outside
            ``(0, 1]``, or ``logits`` without a class dimension.

    Example:
        >>> import torch
        >>> from cauchylin.nn import sample_compatible
        >>> logits = torch.tensor([[0.0, 3.0, 1.0]])
        >>> sample_compatible(logits, temperature=0.0)
        tensor([1])
        >>> sample_compatible(logits, top_k=1, generator=torch.Generator().manual_seed(0))
        tensor([1])
    """
    if not isinstance(logits, torch.Tensor) or logits.ndim < 1 or logits.shape[-1] < 1:
        raise ValueError("logits must be a tensor of shape [..., V] with V >= 1")
    t = _check_temperature(temperature)
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be None or an int >= 1, got {top_k!r}")
    if top_p is not None:
        p = float(top_p)
        if not (0.0 < p <= 1.0):
            raise ValueError(f"top_p must be None or lie in (0, 1], got {top_p!r}")
    if t == 0.0:
        return logits.argmax(dim=-1)
    v = logits.shape[-1]
    scores = logits.detach().to(_compute_dtype(logits.dtype)).reshape(-1, v) / t
    neg_inf = torch.tensor(-math.inf, dtype=scores.dtype, device=scores.device)
    if top_k is not None and top_k < v:
        kth = scores.topk(top_k, dim=-1).values[:, -1:]
        scores = torch.where(scores < kth, neg_inf, scores)
    probs = torch.softmax(scores, dim=-1)
    if top_p is not None and top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        before = sorted_p.cumsum(dim=-1) - sorted_p  # mass strictly ahead of each token
        drop_sorted = before >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = torch.where(drop, torch.zeros_like(probs), probs)
    ids = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return ids.reshape(logits.shape[:-1])


# ============================================================================================
# Action
# ============================================================================================


def effective_mode(mode: str, temperature: float = 1.0) -> str:
    """The mode that actually runs: every non-compatible mode at ``temperature == 0`` is ``causal``.

    Args:
        mode: one of :data:`MODES`.
        temperature: ``T >= 0``.

    Returns:
        ``mode``, or ``"causal"`` when ``T == 0`` and ``mode != "compatible"``.

    Raises:
        ValueError: an unknown mode (the message lists :data:`MODES`) or a bad temperature.

    Example:
        >>> from cauchylin.nn import effective_mode
        >>> effective_mode("sampling", 0.0), effective_mode("compatible", 0.0)
        ('causal', 'compatible')
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    t = _check_temperature(temperature)
    if t == 0.0 and mode != "compatible":
        return "causal"
    return mode


@dataclass
class ActionOutput:
    r"""The decision distributions returned by :meth:`Action.forward`.

    Attributes:
        S: class scores, :class:`~cauchylin.CauchyVector` ``[..., V]`` (``None`` only when a
            caller builds an output without the classification head).
        Y: regression value, :class:`~cauchylin.CauchyVector` ``[..., 1]``.
        threshold: the OvR thresholds ``C`` (``[]`` or ``[V]``) used by the probabilities.
        mode: the mode that ran (see :func:`effective_mode`).
        temperature: the temperature ``T`` it ran with (the softmax temperature in compatible
            mode).
        U_prime: the decision input ``U'`` (``[..., C]``), e.g. to read the drawn individual.

    Example:
        >>> import torch
        >>> from cauchylin import CauchyVector
        >>> from cauchylin.nn import Action
        >>> out = Action(3, 5, threshold=0.0)(CauchyVector(torch.zeros(2, 3), torch.ones(2, 3)))
        >>> out.loc_S.shape, out.loc_Y.shape, round(out.normalised_ovr_probs()[0].sum().item(), 4)
        (torch.Size([2, 5]), torch.Size([2]), 1.0)
    """

    S: CauchyVector | None
    Y: CauchyVector
    threshold: torch.Tensor
    mode: str = "standard"
    temperature: float = 1.0
    U_prime: CauchyVector | None = None

    def _scores(self) -> CauchyVector:
        if self.S is None:
            raise ValueError("this ActionOutput carries no class scores S")
        return self.S

    @property
    def loc_S(self) -> torch.Tensor:
        """``[..., V]`` locations of the class scores: ``W_cls loc_U' + b_cls``."""
        return self._scores().loc

    @property
    def scale_S(self) -> torch.Tensor:
        """``[..., V]`` scales of the class scores: ``|W_cls| scale_U'``."""
        return self._scores().scale

    @property
    def logits(self) -> torch.Tensor:
        """``loc_S``, the logits of the compatible mode (equal to a copied base head's logits)."""
        return self.loc_S

    @property
    def loc_Y(self) -> torch.Tensor:
        """``[...]`` location of the regression value (the regression prediction)."""
        return self.Y.loc[..., 0]

    @property
    def scale_Y(self) -> torch.Tensor:
        """``[...]`` scale of the regression value."""
        return self.Y.scale[..., 0]

    def ovr_log_probs(self) -> tuple[torch.Tensor, torch.Tensor]:
        r"""``(log P_k, log(1 - P_k))``, ``[..., V]`` each, with ``P_k = P(S_k > C_k)``.

        ``P_k = 1/2 + atan((loc_S_k - C_k)/scale_S_k)/pi``, evaluated in log space (accurate in
        float32 for standardised arguments up to ``1e30``).

        Returns:
            Two tensors of shape ``[..., V]``, both ``<= 0`` (float32 for half precision).

        Raises:
            ValueError: the output carries no class scores (``S`` is ``None``).

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> from cauchylin.nn import ActionOutput
            >>> S = CauchyVector(torch.tensor([[1.0, 0.0, -1.0]]), torch.ones(1, 3))
            >>> Y = CauchyVector(torch.zeros(1, 1), torch.ones(1, 1))
            >>> out = ActionOutput(S, Y, threshold=torch.tensor(0.0))
            >>> log_p, log_1mp = out.ovr_log_probs()
            >>> log_p.exp(), log_1mp.exp()  # P = 1/2 + atan(z)/pi at z = 1, 0, -1
            (tensor([[0.7500, 0.5000, 0.2500]]), tensor([[0.2500, 0.5000, 0.7500]]))
        """
        return self._scores().ovr_log_prob(self.threshold)

    def ovr_probs(self) -> torch.Tensor:
        """``[..., V]`` one-vs-rest probabilities ``P_k = P(S_k > C_k)``.

        ``P_k = 1/2 + atan((loc_S_k - C_k)/scale_S_k)/pi``; the classes are not normalised (their
        sum is any number in ``(0, V)``).

        Returns:
            Probabilities in ``[0, 1]``, shape ``[..., V]``.

        Raises:
            ValueError: the output carries no class scores (``S`` is ``None``).

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> from cauchylin.nn import ActionOutput
            >>> S = CauchyVector(torch.tensor([[1.0, 0.0, -1.0]]), torch.ones(1, 3))
            >>> Y = CauchyVector(torch.zeros(1, 1), torch.ones(1, 1))
            >>> out = ActionOutput(S, Y, threshold=torch.tensor(0.0))
            >>> out.ovr_probs()
            tensor([[0.7500, 0.5000, 0.2500]])
        """
        return self._scores().ovr_prob(self.threshold)

    def normalised_ovr_probs(self) -> torch.Tensor:
        r"""``[..., V]`` the OvR probabilities normalised to a distribution: ``P_k / sum_j P_j``.

        Computed as ``exp(log P_k - logsumexp_j log P_j)``, so it stays exact when every
        ``P_k`` is tiny. Seed 000 §3.3 offers it as an alternative to the softmax of ``loc_S``.

        Returns:
            ``[..., V]`` probabilities that sum to 1 over the last dimension.

        Raises:
            ValueError: the output carries no class scores (``S`` is ``None``).

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> from cauchylin.nn import ActionOutput
            >>> S = CauchyVector(torch.tensor([[1.0, 0.0, -1.0]]), torch.ones(1, 3))
            >>> Y = CauchyVector(torch.zeros(1, 1), torch.ones(1, 1))
            >>> out = ActionOutput(S, Y, threshold=torch.tensor(0.0))
            >>> out.normalised_ovr_probs()  # (0.75, 0.5, 0.25) / 1.5
            tensor([[0.5000, 0.3333, 0.1667]])
        """
        log_p = self.ovr_log_probs()[0]
        return torch.softmax(log_p, dim=-1)

    def predict(self) -> torch.Tensor:
        """``LongTensor [...]``: the chosen token ids.

        ``argmax_k P_k`` (as ``argmax_k log P_k``) in every non-compatible mode; ``argmax_k loc_S``
        (greedy) in compatible mode. With per-class thresholds the two can differ.

        Returns:
            ``LongTensor`` of shape ``[...]`` (``S`` without its class dimension).

        Raises:
            ValueError: the output carries no class scores (``S`` is ``None``).

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> from cauchylin.nn import ActionOutput
            >>> S = CauchyVector(torch.tensor([[1.0, 0.0, -1.0]]), torch.ones(1, 3))
            >>> Y = CauchyVector(torch.zeros(1, 1), torch.ones(1, 1))
            >>> C = torch.tensor([2.0, -2.0, 0.0])  # class 1: z = 2, the largest P
            >>> ActionOutput(S, Y, C).predict(), ActionOutput(S, Y, C, mode="compatible").predict()
            (tensor([1]), tensor([0]))
        """
        if self.mode == "compatible":
            return self.loc_S.argmax(dim=-1)
        return self.ovr_log_probs()[0].argmax(dim=-1)

    def next_token(
        self,
        *,
        top_k: int | None = None,
        top_p: float | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """``LongTensor [...]``: the next token of a generation step in this output's mode.

        Compatible mode samples ``softmax(loc_S / T)`` with ``top_k``/``top_p``
        (:func:`sample_compatible`; greedy at ``T = 0``); the other modes return :meth:`predict`
        (their randomness, if any, was drawn when ``U'`` was formed) and ignore the arguments.

        Args:
            top_k: compatible mode only: keep the ``k`` largest logits (``None``: all).
            top_p: compatible mode only: nucleus mass in ``(0, 1]`` (``None``: no filtering).
            generator: compatible mode only: optional ``torch.Generator`` for the draw.

        Returns:
            ``LongTensor`` of shape ``[...]``.

        Raises:
            ValueError: the output carries no class scores, or (compatible mode) a bad ``top_k``
                or ``top_p`` (see :func:`sample_compatible`).

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> from cauchylin.nn import ActionOutput
            >>> S = CauchyVector(torch.tensor([[1.0, 3.0, -1.0]]), torch.ones(1, 3))
            >>> Y = CauchyVector(torch.zeros(1, 1), torch.ones(1, 1))
            >>> out = ActionOutput(S, Y, torch.tensor(0.0), mode="compatible", temperature=1.0)
            >>> out.next_token(top_k=1, generator=torch.Generator().manual_seed(0))  # only id 1 kept
            tensor([1])
            >>> ActionOutput(S, Y, torch.tensor(0.0)).next_token()  # standard mode: predict()
            tensor([1])
        """
        if self.mode == "compatible":
            return sample_compatible(
                self.loc_S,
                temperature=self.temperature,
                top_k=top_k,
                top_p=top_p,
                generator=generator,
            )
        return self.predict()


class Action(nn.Module):
    r"""Action network: exogenous noise, then linear classification and regression heads.

    .. math::

        S = W_\mathrm{cls} U' + b_\mathrm{cls} \in \mathbb{R}^V, \qquad
        Y = W_\mathrm{reg} U' + b_\mathrm{reg}, \qquad
        P_k = P(S_k > C_k) = \tfrac12 + \tfrac1\pi \arctan\frac{\mathrm{loc}_{S_k} - C_k}
        {\mathrm{scale}_{S_k}}

    where the decision input ``U'`` depends on the inference mode (see :data:`MODES` and the
    module docstring). In the default ``standard`` mode ``U' ~ Cauchy(loc_U, scale_U + T|b_noise|)``
    and ``scale_S = (scale_U + T|b_noise|) @ |W_cls|.T`` is a single GEMM.

    Initialisation (seed 002, SPEC §3): ``W_cls`` the default ``nn.Linear`` init (copy a base
    head with :meth:`copy_base_head`), ``b_cls = 0``, ``W_reg ~ N(0, 1/C)`` (std ``1/sqrt(C)``),
    ``b_reg = 0``, ``b_noise = b_noise_init`` in every component, thresholds ``= threshold``.

    Args:
        causal_size: ``C``.
        num_classes: ``V``, the number of rows of the classification head.
        threshold: initial OvR threshold ``C_k`` (default 100.0, seed 002).
        threshold_per_class: one threshold per class (shape ``[V]``) instead of a scalar (``[]``).
        learnable_threshold: the thresholds are an ``nn.Parameter`` (else a buffer).
        b_noise_init: the constant initial value of ``b_noise`` (default 0.1).
        device: device of the parameters.
        dtype: dtype of the parameters. Half-precision parameters are computed in float32: the
            heads are cast on every call (a copy of ``W_cls``; keep float32 master weights for
            speed), and the fused loss reads them tile by tile.

    Attributes:
        classifier: ``nn.Linear(C, V)``; ``weight`` is ``W_cls [V, C]``, ``bias`` is ``b_cls [V]``.
        regressor: ``nn.Linear(C, 1)``.
        b_noise: ``nn.Parameter [C]``.
        threshold: ``[]`` or ``[V]``, a parameter or a buffer.

    Raises:
        ValueError: non-positive sizes or non-finite initial values.

    Example:
        >>> import torch
        >>> from cauchylin import CauchyVector
        >>> from cauchylin.nn import Action
        >>> act = Action(4, 10, threshold=0.0)
        >>> U = CauchyVector(torch.randn(2, 3, 4), torch.ones(2, 3, 4))
        >>> out = act(U)  # standard mode
        >>> out.loc_S.shape, out.loc_Y.shape, out.predict().shape
        (torch.Size([2, 3, 10]), torch.Size([2, 3]), torch.Size([2, 3]))
    """

    threshold: torch.Tensor

    def __init__(
        self,
        causal_size: int,
        num_classes: int,
        *,
        threshold: float = 100.0,
        threshold_per_class: bool = False,
        learnable_threshold: bool = False,
        b_noise_init: float = 0.1,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        for name, size in (("causal_size", causal_size), ("num_classes", num_classes)):
            if not isinstance(size, int) or size < 1:
                raise ValueError(f"{name} must be a positive int, got {size!r}")
        for name, value in (("threshold", threshold), ("b_noise_init", b_noise_init)):
            if not isinstance(value, int | float) or not math.isfinite(float(value)):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        self.causal_size = causal_size
        self.num_classes = num_classes
        self.threshold_init = float(threshold)
        self.b_noise_init = float(b_noise_init)
        self.threshold_per_class = bool(threshold_per_class)
        self.learnable_threshold = bool(learnable_threshold)
        self.classifier = nn.Linear(causal_size, num_classes, device=device, dtype=dtype)
        self.regressor = nn.Linear(causal_size, 1, device=device, dtype=dtype)
        self.b_noise = nn.Parameter(torch.empty(causal_size, device=device, dtype=dtype))
        shape = (num_classes,) if threshold_per_class else ()
        thr = torch.empty(shape, device=device, dtype=self.b_noise.dtype)
        if learnable_threshold:
            self.threshold = nn.Parameter(thr)
        else:
            self.register_buffer("threshold", thr)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialise as in the class docstring (keeps the default ``nn.Linear`` ``W_cls``).

        ``W_cls`` is re-drawn by ``nn.Linear.reset_parameters`` (from the global torch RNG),
        ``b_cls = 0``, ``W_reg ~ N(0, 1/C)``, ``b_reg = 0``, ``b_noise = b_noise_init`` and the
        thresholds ``= threshold``.

        Example:
            >>> import torch
            >>> from cauchylin.nn import Action
            >>> act = Action(2, 3, threshold=1.0, b_noise_init=0.5)
            >>> with torch.no_grad():
            ...     _ = act.b_noise.mul_(10.0)
            ...     _ = act.threshold.fill_(7.0)
            >>> act.reset_parameters()
            >>> act.b_noise.detach(), act.threshold, act.classifier.bias.detach()
            (tensor([0.5000, 0.5000]), tensor(1.), tensor([0., 0., 0.]))
        """
        with torch.no_grad():
            self.classifier.reset_parameters()
            self.classifier.bias.zero_()
            self.regressor.weight.normal_(0.0, 1.0 / math.sqrt(self.causal_size))
            self.regressor.bias.zero_()
            self.b_noise.fill_(self.b_noise_init)
            self.threshold.fill_(self.threshold_init)

    def copy_base_head(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        """Copy a base language-model head into the classifier (seed 002 step 3).

        ``W_cls <- weight`` and ``b_cls <- bias`` (0 when the base head has none, as in Qwen), so
        that ``loc_S`` equals the base model's logits on the same features.

        Args:
            weight: ``[V, C]`` base head weight (e.g. ``lm_head.weight``; tied embeddings work).
            bias: ``[V]`` or ``None``.

        Raises:
            ValueError: the shapes differ from the classifier's.

        Example:
            >>> import torch
            >>> from cauchylin.nn import Abduction, Action
            >>> lm_head = torch.nn.Linear(4, 7, bias=False)
            >>> act = Action(4, 7)
            >>> act.copy_base_head(lm_head.weight)
            >>> z = torch.randn(3, 4)
            >>> bool(torch.equal(act(Abduction(4, 4)(z)).logits, lm_head(z)))
            True
        """
        w = self.classifier.weight
        if tuple(weight.shape) != tuple(w.shape):
            raise ValueError(
                f"weight must have shape {tuple(w.shape)} ([V, C]), got {tuple(weight.shape)}"
            )
        if bias is not None and tuple(bias.shape) != (self.num_classes,):
            raise ValueError(f"bias must have shape ({self.num_classes},), got {tuple(bias.shape)}")
        with torch.no_grad():
            w.copy_(weight)
            if bias is None:
                self.classifier.bias.zero_()
            else:
                self.classifier.bias.copy_(bias)

    # ---------------------------------------------------------------------------- modes
    def _noise_scale(self, temperature: float, like: CauchyVector) -> torch.Tensor:
        return (temperature * self.b_noise.abs()).to(like.dtype).expand(like.shape)

    def _check_input(self, U: CauchyVector) -> CauchyVector:
        if not isinstance(U, CauchyVector):
            raise ValueError(f"U must be a CauchyVector, got {type(U).__name__}")
        if U.event_size != self.causal_size:
            raise ValueError(
                f"U has {U.event_size} components, expected causal_size {self.causal_size} "
                f"(U shape {tuple(U.shape)})"
            )
        dtype = self._dtype()
        return U if U.dtype == dtype else U.to(dtype)

    def _dtype(self) -> torch.dtype:
        """The compute dtype: the parameters' dtype, float32 for half-precision parameters."""
        return _compute_dtype(self.classifier.weight.dtype)

    def _heads(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``W_cls, b_cls, W_reg, b_reg`` in the compute dtype (a no-op unless half precision)."""
        dtype = self._dtype()
        return (
            self.classifier.weight.to(dtype),
            self.classifier.bias.to(dtype),
            self.regressor.weight.to(dtype),
            self.regressor.bias.to(dtype),
        )

    def _check_draw(self, name: str, eps: Any, U: CauchyVector) -> torch.Tensor:
        if eps is None:
            raise ValueError(
                f"mode {'shared_individual' if name == 'eps_seed' else 'shared_noise'!r} needs "
                f"{name}: pass a fixed draw (see draw_{name}) of shape [C] or broadcastable to "
                f"U's shape {tuple(U.shape)}, e.g. [B, 1, C], and reuse it at every step"
            )
        if not isinstance(eps, torch.Tensor) or not eps.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got {type(eps).__name__}")
        try:
            fits = eps.ndim >= 1 and torch.broadcast_shapes(eps.shape, U.shape) == U.shape
        except RuntimeError:
            fits = False
        if not fits or eps.shape[-1] != U.event_size:
            raise ValueError(
                f"{name} has shape {tuple(eps.shape)}; it must end in C={U.event_size} and "
                f"broadcast to U's shape {tuple(U.shape)} without enlarging it (e.g. [C] or "
                f"[B, 1, C])"
            )
        if is_validating():
            if name == "eps_seed":
                if not bool(((eps > 0) & (eps < 1)).all()):
                    raise ValueError(
                        f"eps_seed must lie in the open interval (0, 1) (shape {tuple(eps.shape)})"
                    )
            else:
                check_finite(name, eps)
        return eps.to(U.device)

    def decision_input(
        self,
        U: CauchyVector,
        mode: str = "standard",
        temperature: float = 1.0,
        *,
        generator: torch.Generator | None = None,
        eps_seed: torch.Tensor | None = None,
        eps_noise: torch.Tensor | None = None,
    ) -> CauchyVector:
        r"""The decision input ``U'`` of a mode (before the linear heads).

        With ``T = temperature`` and ``n = |b_noise|``:

        * ``causal`` (and every mode but ``compatible`` at ``T = 0``): ``U' = U``;
        * ``standard``: ``U' = U + N``, ``N ~ Cauchy(0, T n)`` independent of ``U`` and across
          positions, so ``U' ~ Cauchy(loc_U, scale_U + T n)``;
        * ``compatible``: as ``standard`` at ``T = 1`` (``T`` is the softmax temperature here);
        * ``sampling``: ``eps = draw_eps_noise(U.shape, generator=generator)``, then
          ``U' = U + T n eps ~ Cauchy(loc_U + T n eps, scale_U)``;
        * ``individual``: one draw ``u ~ Cauchy(loc_U, T scale_U)`` per position (for an
          independent ``U``: ``u = loc_U + T scale_U eps`` with ``eps`` from
          :func:`draw_eps_noise`; otherwise ``loc_U + T (x - loc_U)`` with ``x`` from
          ``U.rsample`` so the joint law is respected), then ``U' ~ Cauchy(u, n)``;
        * ``shared_individual``: ``u = loc_U + T scale_U tan(pi (eps_seed - 1/2))``, then
          ``U' ~ Cauchy(u, n)``;
        * ``shared_noise``: ``U' = U + T n eps_noise ~ Cauchy(loc_U + T n eps_noise, scale_U)``.

        In the shared modes the temperature scales the fixed draw exactly as in their per-step
        counterparts (``individual`` and ``sampling``); at ``T = 1`` they are the formulas of
        seed 000 §3.4.

        Args:
            U: :class:`~cauchylin.CauchyVector` ``[..., C]`` (e.g. the :class:`Abduction` output).
            mode: one of :data:`MODES`.
            temperature: ``T >= 0``.
            generator: optional ``torch.Generator`` for the ``sampling`` and ``individual`` draws.
            eps_seed: required by ``shared_individual``: entries in ``(0, 1)``, shape ``[C]`` or
                broadcastable to ``U.shape`` (e.g. ``[B, 1, C]``).
            eps_noise: required by ``shared_noise``: finite, same shape rules.

        Returns:
            :class:`~cauchylin.CauchyVector` ``U'`` of ``U``'s shape.

        Raises:
            ValueError: unknown mode (listing :data:`MODES`), bad temperature, ``U`` of the wrong
                size, or a shared mode whose draw is missing, of the wrong shape or out of range
                (checked at every temperature, ``T = 0`` included).

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> from cauchylin.nn import Action
            >>> act = Action(3, 5, b_noise_init=0.5)
            >>> U = CauchyVector(torch.zeros(2, 3), torch.ones(2, 3))
            >>> act.decision_input(U, "standard", temperature=2.0).scale[0].tolist()  # 1 + 2 * 0.5
            [2.0, 2.0, 2.0]
            >>> act.decision_input(U, "sampling", temperature=0.0) is U  # T = 0: causal
            True
            >>> eps = torch.full((3,), 0.75)  # tan(pi (0.75 - 1/2)) = 1
            >>> Up = act.decision_input(U, "shared_individual", eps_seed=eps)
            >>> Up.loc[0].tolist(), Up.scale[0].tolist()  # u = loc_U + T scale_U * 1; scale |b_noise|
            ([1.0, 1.0, 1.0], [0.5, 0.5, 0.5])
        """
        run = effective_mode(mode, temperature)
        t = _check_temperature(temperature)
        U = self._check_input(U)
        # The shared modes always check their draw, also at T = 0 where it is not used, so that a
        # generation loop fails on its first step whatever the temperature.
        if mode == "shared_individual":
            eps_seed = self._check_draw("eps_seed", eps_seed, U)
        elif mode == "shared_noise":
            eps_noise = self._check_draw("eps_noise", eps_noise, U)
        if run == "causal":
            return U
        if run in ("standard", "compatible"):
            t_noise = 1.0 if run == "compatible" else t
            zeros = torch.zeros((), dtype=U.dtype, device=U.device).expand(U.shape)
            return U + CauchyVector(zeros, self._noise_scale(t_noise, U), validate_args=False)
        noise = self.b_noise.abs().to(U.dtype)
        if run == "sampling":
            eps = draw_eps_noise(U.shape, generator=generator, device=U.device, dtype=U.dtype)
            return U + (t * noise) * eps
        if run == "shared_noise":
            assert eps_noise is not None
            return U + (t * noise) * eps_noise.to(U.dtype)
        loc = U.loc
        if run == "individual":
            if U.is_independent:
                eps = draw_eps_noise(U.shape, generator=generator, device=U.device, dtype=U.dtype)
                u = loc + (t * U.scale) * eps
            else:
                u = loc + t * (U.rsample(generator=generator) - loc)
        else:  # shared_individual
            assert eps_seed is not None
            quantile = _special.icdf_std(eps_seed).to(U.dtype)  # tan(pi (eps - 1/2)), in eps' dtype
            u = loc + (t * U.scale) * quantile
        return CauchyVector(u, noise.expand(u.shape), validate_args=False)

    def forward(
        self,
        U: CauchyVector,
        mode: str = "standard",
        temperature: float = 1.0,
        *,
        generator: torch.Generator | None = None,
        eps_seed: torch.Tensor | None = None,
        eps_noise: torch.Tensor | None = None,
    ) -> ActionOutput:
        r"""Class scores and regression value of a mode: ``S = W_cls U' + b_cls``, ``Y = W_reg U' + b_reg``.

        ``U'`` is :meth:`decision_input` (same arguments). ``S`` and ``Y`` are exact
        :class:`~cauchylin.CauchyVector` images; their marginals cost one GEMM each for ``loc``
        and ``scale`` and are computed on first use.

        Args:
            U: :class:`~cauchylin.CauchyVector` ``[..., C]`` (e.g. the :class:`Abduction` output).
            mode: one of :data:`MODES` (default ``"standard"``).
            temperature: ``T >= 0``; 0 turns every non-compatible mode into ``causal``.
            generator: optional ``torch.Generator`` for the random modes.
            eps_seed: the fixed draw of ``shared_individual``.
            eps_noise: the fixed draw of ``shared_noise``.

        Returns:
            :class:`ActionOutput` with ``S [..., V]``, ``Y [..., 1]``, the thresholds, the mode
            that ran and ``U'``.

        Raises:
            ValueError: as :meth:`decision_input`.

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> from cauchylin.nn import Action, draw_eps_seed
            >>> act = Action(3, 5)
            >>> U = CauchyVector(torch.zeros(2, 3), torch.ones(2, 3))
            >>> eps = draw_eps_seed((3,), generator=torch.Generator().manual_seed(0))
            >>> out = act(U, "shared_individual", eps_seed=eps)
            >>> out.mode, out.loc_S.shape
            ('shared_individual', torch.Size([2, 5]))
        """
        run = effective_mode(mode, temperature)
        u_prime = self.decision_input(
            U,
            mode,
            temperature,
            generator=generator,
            eps_seed=eps_seed,
            eps_noise=eps_noise,
        )
        W, b, w_reg, b_reg = self._heads()
        S = u_prime.linear(W, b)
        Y = u_prime.linear(w_reg, b_reg)
        return ActionOutput(
            S=S,
            Y=Y,
            threshold=self.threshold,
            mode=run,
            temperature=_check_temperature(temperature),
            U_prime=u_prime,
        )

    # ---------------------------------------------------------------------------- training
    def loss(
        self,
        U: CauchyVector,
        labels: torch.Tensor,
        target_values: torch.Tensor | None = None,
        *,
        num_token_id: int | None = None,
        attention_mask: torch.Tensor | None = None,
        alpha: float = 0.0,
        reg_weight: float = 1.0,
        ignore_index: int = -100,
        temperature: float = 1.0,
        chunk_size: int | tuple[int, int] | None = None,
    ) -> CausalLMLoss:
        r"""The training objective in standard mode, without any ``[N, V]`` tensor.

        .. math::

            L = \underbrace{\frac{\sum_i L_{\mathrm{cls},i}}{\#\mathrm{counted}}}_{\text{OvR BCE}}
              + \lambda \underbrace{\frac{\sum_i m_i (\alpha + (1-\alpha) P_{\mathrm{NUM},i})
              L_{\mathrm{nll},i}}{\sum_i m_i}}_{\text{gated regression}}

        * classification: :func:`cauchylin.losses.ovr_bce_fused` on ``loc_U`` and the total scale
          ``scale_U + T|b_noise|`` with ``W_cls, b_cls`` and the thresholds (gradients reach
          ``b_noise`` and the thresholds through autograd); a ``U`` whose components are not
          independent (after a mixing linear map) takes the exact plain path instead;
        * ``P_<NUM>`` from the single class column ``S[..., num:num+1]`` (one GEMV);
        * regression: :func:`cauchylin.losses.gated_regression_loss` on ``Y`` with
          ``num_mask = (labels == num_token_id) & counted``; without ``num_token_id`` or
          ``target_values`` the regression term is exactly 0.

        Args:
            U: :class:`~cauchylin.CauchyVector` ``[..., C]``, the Abduction output.
            labels: ``[...]`` next-token ids, ``ignore_index`` where nothing is predicted.
            target_values: ``[...]`` the true numbers (read at ``<NUM>`` targets only).
            num_token_id: id of ``<NUM>``.
            attention_mask: optional ``[...]``; 0 marks padding.
            alpha: gate floor in ``[0, 1]`` (0: gate by ``P_<NUM>``; 1: no gating).
            reg_weight: ``lambda``.
            ignore_index: label of positions that do not count.
            temperature: noise temperature ``T`` of the standard mode (1 in training, SPEC §5).
            chunk_size: tiles of the fused OvR path (see :func:`cauchylin.losses.ovr_bce_fused`).

        Returns:
            :class:`cauchylin.losses.CausalLMLoss` ``(total, cls, reg)``.

        Raises:
            ValueError: shape mismatches, labels out of range, bad ``alpha`` (from
                :mod:`cauchylin.losses`), or a bad ``U``/temperature.

        Example:
            >>> import torch
            >>> from cauchylin.nn import Abduction, Action
            >>> abd, act = Abduction(8, 8, gamma_init=1.0), Action(8, 20, threshold=0.0)
            >>> U = abd(torch.randn(2, 5, 8))
            >>> labels = torch.tensor([[3, 19, 4, 19, -100], [1, 2, 19, 0, 5]])  # 19 = <NUM>
            >>> values = torch.tensor([[0.0, 12.5, 0.0, -3.0, 0.0], [0.0, 0.0, 7.0, 0.0, 0.0]])
            >>> out = act.loss(U, labels, values, num_token_id=19)
            >>> out.total.backward()
            >>> int(out.cls.count), int(out.reg.count), act.b_noise.grad.shape
            (9, 3, torch.Size([8]))
        """
        from cauchylin import losses

        t = _check_temperature(temperature)
        U = self._check_input(U)
        W, b = (
            self.classifier.weight,
            self.classifier.bias,
        )  # the fused path reads half tiles itself
        _, _, w_reg, b_reg = self._heads()
        if not isinstance(labels, torch.Tensor):
            raise ValueError(f"labels must be a torch.Tensor, got {type(labels).__name__}")
        if tuple(labels.shape) != tuple(U.batch_shape):
            raise ValueError(
                f"labels shape {tuple(labels.shape)} must equal U's batch shape "
                f"{tuple(U.batch_shape)}"
            )
        u_prime = self.decision_input(U, "standard", t)
        if U.is_independent:
            total_scale = U.scale + t * self.b_noise.abs().to(U.dtype)
            cls = losses.ovr_bce_fused(
                U.loc,
                total_scale,
                W,
                b,
                self.threshold,
                labels,
                ignore_index=ignore_index,
                attention_mask=attention_mask,
                chunk_size=chunk_size,
            )
        else:
            S = u_prime.linear(W.to(U.dtype), b.to(U.dtype))
            cls = losses.ovr_bce(
                S.loc,
                S.scale,
                labels,
                self.threshold,
                ignore_index=ignore_index,
                attention_mask=attention_mask,
            )
        Y = u_prime.linear(w_reg, b_reg)
        loc_Y, scale_Y = Y.loc[..., 0], Y.scale[..., 0]
        counted = labels != ignore_index
        if attention_mask is not None:
            counted = counted & (attention_mask != 0)
        log_p_num = None
        if num_token_id is None or target_values is None:
            num_mask = torch.zeros_like(counted)
            targets = torch.zeros_like(loc_Y)
        else:
            if not 0 <= int(num_token_id) < self.num_classes:
                raise ValueError(
                    f"num_token_id must lie in [0, {self.num_classes}), got {num_token_id!r}"
                )
            num_mask = counted & (labels == num_token_id)
            if not isinstance(target_values, torch.Tensor):
                raise ValueError(
                    f"target_values must be a torch.Tensor, got {type(target_values).__name__}"
                )
            if tuple(target_values.shape) != tuple(labels.shape):
                raise ValueError(
                    f"target_values shape {tuple(target_values.shape)} must equal the labels "
                    f"shape {tuple(labels.shape)}"
                )
            targets = target_values.to(device=loc_Y.device, dtype=loc_Y.dtype)
            targets = torch.where(num_mask, targets, torch.zeros_like(targets))
            if float(alpha) < 1.0:
                k = int(num_token_id)
                s_num = u_prime.linear(W[k : k + 1].to(U.dtype), b[k : k + 1].to(U.dtype))
                thr = self.threshold if self.threshold.ndim == 0 else self.threshold[k : k + 1]
                log_p_num = s_num.ovr_log_prob(thr)[0][..., 0]
        reg = losses.gated_regression_loss(
            loc_Y, scale_Y, targets, num_mask, log_p_num, alpha=alpha
        )
        return losses.causal_lm_loss(cls, reg, reg_weight=reg_weight)

    def extra_repr(self) -> str:
        """The settings shown in the module's ``repr``.

        Returns:
            ``"causal_size=C, num_classes=V, threshold=... (scalar|per class, fixed|learnable),
            b_noise_init=..."``.
        """
        kind = "learnable" if self.learnable_threshold else "fixed"
        per = "per class" if self.threshold_per_class else "scalar"
        return (
            f"causal_size={self.causal_size}, num_classes={self.num_classes}, "
            f"threshold={self.threshold_init} ({per}, {kind}), b_noise_init={self.b_noise_init}"
        )
