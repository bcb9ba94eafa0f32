r"""The inference modes: one record per mode, the only place where a mode is defined.

Every mode is an :class:`InferenceMode` in :data:`MODE_TABLE`: how the decision input ``U'`` is
formed from ``U ~ Cauchy(loc_U, scale_U)`` (its ``rule``), whether it needs a draw fixed for a
whole sequence, whether it draws anew at every call, and how a generation step picks the next
token. :data:`MODES`, :func:`effective_mode`, :class:`~cauchylin.nn.Action` and the Hugging Face
generation loop all read this table, so a change to a mode is made here once.

The modes' formulas are written out on the documentation's [Inference modes][inference-modes-page] page
(each with a worked example on a toy model); here each rule is code, once.

The two shared modes take their draw (``eps_seed`` or ``eps_noise``, from :func:`draw_eps_seed`
/ :func:`draw_eps_noise`) as an argument so that a generation loop can hold one draw for a whole
sequence: the same individual (or the same systematic noise) replayed on every step and, for a
counterfactual, on a different input.

Next-token rules: the compatible mode samples ``softmax(loc_S / T)`` (:func:`sample_compatible`);
every other mode takes ``argmax_k P_k`` with ``P_k = 1/2 + atan((loc_S_k - tau_k)/scale_S_k)/pi``
(:func:`ovr_argmax`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from cauchylin import _special
from cauchylin._validation import check_finite, host_values, is_validating, require_tensor
from cauchylin.nn.mode_names import (
    CAUSAL,
    COMPATIBLE,
    INDIVIDUAL,
    MODE_NAMES,
    SAMPLING,
    SHARED_INDIVIDUAL,
    SHARED_NOISE,
    STANDARD,
)
from cauchylin.vector import CauchyVector

__all__ = [
    "CAUSAL",
    "COMPATIBLE",
    "INDIVIDUAL",
    "MODES",
    "MODE_TABLE",
    "SAMPLING",
    "SHARED_INDIVIDUAL",
    "SHARED_NOISE",
    "STANDARD",
    "Decoding",
    "FixedDraw",
    "InferenceMode",
    "check_draw",
    "check_sampling_options",
    "check_temperature",
    "draw_eps_noise",
    "draw_eps_seed",
    "effective_mode",
    "get_mode",
    "ovr_argmax",
    "resolve_mode",
    "sample_compatible",
]


# ============================================================================================
# Argument checks
# ============================================================================================


def check_temperature(temperature: float) -> float:
    """Check a temperature and return it as a Python float.

    Args:
        temperature: ``T``, a finite number ``>= 0`` (a one-element tensor is accepted).

    Returns:
        ``float(temperature)``.

    Raises:
        ValueError: not a number, a tensor with more than one element, negative, NaN or infinite.

    Example:
        >>> from cauchylin.nn.modes import check_temperature
        >>> check_temperature(0.5)
        0.5
    """
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


def check_sampling_options(top_k: int | None = None, top_p: float | None = None) -> None:
    """Check the ``top_k`` / ``top_p`` options of the compatible mode's sampling.

    Args:
        top_k: ``None`` or an int ``>= 1``.
        top_p: ``None`` or a number in ``(0, 1]``.

    Raises:
        ValueError: ``top_k < 1`` (or not an int), or ``top_p`` not a number (a string
            ``"0.9"`` included) or outside ``(0, 1]``.

    Example:
        >>> from cauchylin.nn.modes import check_sampling_options
        >>> check_sampling_options(top_k=20, top_p=0.9)  # fine: returns None
    """
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be None or an int >= 1, got {top_k!r}")
    if top_p is not None:
        # a real number only: float("0.9") would pass here and fail later, in a comparison
        number = isinstance(top_p, numbers.Real) or (
            isinstance(top_p, torch.Tensor) and top_p.numel() == 1 and top_p.is_floating_point()
        )
        if isinstance(top_p, bool) or not number:
            raise ValueError(f"top_p must be None or a number in (0, 1], got {top_p!r}")
        if not (0.0 < float(top_p) <= 1.0):
            raise ValueError(f"top_p must be None or lie in (0, 1], got {top_p!r}")


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

    For the ``shared_individual`` mode: drawn once per sequence and reused at every step (its
    rule: the documentation's [Inference modes][inference-modes-page] page).

    The uniform is drawn in float64 and cast; the result is then clamped into the open interval
    of ``dtype`` (``[tiny, 1 - ulp/2]``), so ``tan(pi (eps - 1/2))`` is always finite.

    Args:
        shape: e.g. ``[C]`` for one individual shared by the whole batch, ``[B, 1, C]`` for one
            per sequence of a ``[B, L, C]`` batch.
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
    return _special.standard_cauchy(torch.Size(shape), like, generator)


def _check_open_interval(name: str, eps: torch.Tensor) -> None:
    values = host_values(eps)  # (every member under vmap; nothing to read while tracing)
    if values is not None and not bool(((values > 0) & (values < 1)).all()):
        raise ValueError(f"{name} must lie in the open interval (0, 1) (shape {tuple(eps.shape)})")


@dataclass(frozen=True)
class FixedDraw:
    """The draw a shared mode holds fixed for a whole sequence.

    Attributes:
        name: the keyword it is passed under (``"eps_seed"`` or ``"eps_noise"``).
        sample: the function that draws it (:func:`draw_eps_seed` or :func:`draw_eps_noise`).
        check_values: raises ``ValueError`` for values outside its support (called while
            validating, see :func:`cauchylin.set_validate_args`).
        float64: draw it in float64 in generation loops (keeps the resolution of the
            quantile ``tan(pi (eps - 1/2))`` in the tails), else in the heads' compute dtype.

    Example:
        >>> from cauchylin.nn.modes import MODE_TABLE
        >>> MODE_TABLE["shared_individual"].draw.name, MODE_TABLE["standard"].draw is None
        ('eps_seed', True)
    """

    name: str
    sample: Callable[..., torch.Tensor]
    check_values: Callable[[str, torch.Tensor], None]
    float64: bool


EPS_SEED = FixedDraw("eps_seed", draw_eps_seed, _check_open_interval, float64=True)
EPS_NOISE = FixedDraw("eps_noise", draw_eps_noise, check_finite, float64=False)


def _given_draw(
    draw: FixedDraw, eps_seed: torch.Tensor | None, eps_noise: torch.Tensor | None
) -> torch.Tensor | None:
    """The one of ``eps_seed`` / ``eps_noise`` that ``draw`` names (the one place that picks)."""
    return eps_seed if draw.name == EPS_SEED.name else eps_noise


def check_draw(mode: str, draw: FixedDraw, eps: Any, shape: torch.Size) -> torch.Tensor:
    """Check the fixed draw of a shared mode against the shape of ``U``.

    Args:
        mode: the mode's name (for the messages).
        draw: the mode's :class:`FixedDraw`.
        eps: the given draw: a floating tensor of shape ``[C]`` or broadcastable to ``shape``
            without enlarging it (e.g. ``[B, 1, C]``).
        shape: the shape ``[..., C]`` of ``U``.

    Returns:
        ``eps`` (unchanged).

    Raises:
        ValueError: ``eps`` is missing, not a floating tensor, of the wrong shape or (while
            validating) outside its support.

    Example:
        >>> import torch
        >>> from cauchylin.nn.modes import MODE_TABLE, check_draw
        >>> spec = MODE_TABLE["shared_noise"].draw
        >>> check_draw("shared_noise", spec, torch.zeros(3), torch.Size([2, 3])).shape
        torch.Size([3])
    """
    name = draw.name
    if eps is None:
        raise ValueError(
            f"mode {mode!r} needs {name}: pass a fixed draw (see draw_{name}) of shape [C] or "
            f"broadcastable to U's shape {tuple(shape)}, e.g. [B, 1, C], and reuse it at every step"
        )
    require_tensor(name, eps, floating=True)
    try:
        fits = eps.ndim >= 1 and torch.broadcast_shapes(eps.shape, shape) == shape
    except RuntimeError:
        fits = False
    if not fits or eps.shape[-1] != shape[-1]:
        raise ValueError(
            f"{name} has shape {tuple(eps.shape)}; it must end in C={shape[-1]} and broadcast to "
            f"U's shape {tuple(shape)} without enlarging it (e.g. [C] or [B, 1, C])"
        )
    if is_validating():
        draw.check_values(name, eps)
    return eps


# ============================================================================================
# Next-token rules
# ============================================================================================


def sample_compatible(
    logits: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    r"""Sample token ids from ``softmax(logits / T)`` with optional top-k / top-p filtering.

    The compatible mode's token rule: ``loc_S`` is used as ordinary logits. ``top_k`` keeps the
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
    t = check_temperature(temperature)
    check_sampling_options(top_k, top_p)
    return _sample_logits(logits, t, top_k, top_p, generator)


def _sample_logits(
    logits: torch.Tensor,
    t: float,
    top_k: int | None,
    top_p: float | None,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """:func:`sample_compatible` on checked arguments."""
    if t == 0.0:
        return logits.argmax(dim=-1)
    v = logits.shape[-1]
    scores = logits.detach().to(_special.working_dtype(logits)).reshape(-1, v) / t
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


def ovr_argmax(
    loc_S: torch.Tensor, scale_S: torch.Tensor, threshold: torch.Tensor | float
) -> torch.Tensor:
    r"""``argmax_k P_k``, the token rule of every mode but ``compatible``.

    ``P_k = 1/2 + atan((loc_S_k - tau_k) / scale_S_k) / pi`` is increasing in the standardised
    score ``(loc_S_k - tau_k) / scale_S_k``, so the argmax is taken on that score: one pass, and
    scores whose ``P_k`` round to the same float stay apart.

    Args:
        loc_S: ``[..., V]`` class-score locations.
        scale_S: ``[..., V]`` class-score scales (``> 0``).
        threshold: the thresholds ``tau`` (``[]`` or ``[V]``).

    Returns:
        ``LongTensor [...]``.

    Example:
        >>> import torch
        >>> from cauchylin.nn.modes import ovr_argmax
        >>> ovr_argmax(torch.tensor([1.0, 3.0]), torch.tensor([1.0, 10.0]), 0.0)  # z = 1 vs 0.3
        tensor(0)
    """
    return ((loc_S - threshold) / scale_S).argmax(dim=-1)


# ============================================================================================
# Decision rules: U -> U'
# ============================================================================================

DecisionRule = Callable[
    [CauchyVector, float, torch.Tensor, "torch.Generator | None", "torch.Tensor | None"],
    CauchyVector,
]
"""``rule(U, T, noise, generator, draw) -> U'`` with ``noise = |b_noise|`` (parameter dtype)."""


def _causal(U: CauchyVector, t: float, noise: torch.Tensor, generator: Any, draw: Any) -> Any:
    return U


def _standard(U: CauchyVector, t: float, noise: torch.Tensor, generator: Any, draw: Any) -> Any:
    # U' = U + N, N ~ Cauchy(0, T n) independent of U and across positions.
    zeros = torch.zeros((), dtype=U.dtype, device=U.device).expand(U.shape)
    scale = (t * noise).to(U.dtype).expand(U.shape)
    return U + CauchyVector(zeros, scale, validate_args=False)


def _compatible(U: CauchyVector, t: float, noise: torch.Tensor, generator: Any, draw: Any) -> Any:
    return _standard(U, 1.0, noise, generator, draw)  # T is the softmax temperature here


def _sampling(U: CauchyVector, t: float, noise: torch.Tensor, generator: Any, draw: Any) -> Any:
    eps = draw_eps_noise(U.shape, generator=generator, device=U.device, dtype=U.dtype)
    return U + (t * noise.to(U.dtype)) * eps


def _shared_noise(U: CauchyVector, t: float, noise: torch.Tensor, generator: Any, draw: Any) -> Any:
    return U + (t * noise.to(U.dtype)) * draw.to(U.dtype)


def _individual(U: CauchyVector, t: float, noise: torch.Tensor, generator: Any, draw: Any) -> Any:
    loc = U.loc
    if U.is_independent:
        eps = draw_eps_noise(U.shape, generator=generator, device=U.device, dtype=U.dtype)
        u = loc + (t * U.scale) * eps
    else:  # respect the joint law: x from U.rsample, then loc + T (x - loc)
        u = loc + t * (U.rsample(generator=generator) - loc)
    return CauchyVector(u, noise.to(U.dtype).expand(u.shape), validate_args=False)


def _shared_individual(
    U: CauchyVector, t: float, noise: torch.Tensor, generator: Any, draw: Any
) -> Any:
    quantile = _special.icdf_std(draw).to(U.dtype)  # tan(pi (eps - 1/2)), in the draw's dtype
    u = U.loc + (t * U.scale) * quantile
    return CauchyVector(u, noise.to(U.dtype).expand(u.shape), validate_args=False)


# ============================================================================================
# The table
# ============================================================================================


@dataclass(frozen=True)
class InferenceMode:
    r"""One inference mode: its decision input, its draws and its next-token rule.

    Attributes:
        name: the mode's name (one of :data:`MODES`).
        rule: ``rule(U, T, noise, generator, draw) -> U'``, the decision input, with
            ``noise = |b_noise|`` and ``draw`` the fixed draw of a shared mode (else None).
        draw: the :class:`FixedDraw` a shared mode needs for a whole sequence, else None.
        random_per_step: the rule draws new randomness at every call (``sampling``,
            ``individual``).
        temperature_scales_noise: ``T`` scales the noise or the draw, so ``T = 0`` is the causal
            mode; False for ``compatible``, whose ``T`` is the softmax temperature.
        samples_logits: the next token is sampled from ``softmax(loc_S / T)``
            (:func:`sample_compatible`) instead of ``argmax_k P_k`` (:func:`ovr_argmax`).

    Example:
        >>> from cauchylin.nn.modes import MODE_TABLE
        >>> m = MODE_TABLE["sampling"]
        >>> m.random_per_step, m.draw is None, m.samples_logits
        (True, True, False)
    """

    name: str
    rule: DecisionRule
    draw: FixedDraw | None = None
    random_per_step: bool = False
    temperature_scales_noise: bool = True
    samples_logits: bool = False

    def choose(
        self,
        loc_S: torch.Tensor,
        scale_S: torch.Tensor | None,
        threshold: torch.Tensor | float,
        temperature: float,
        *,
        top_k: int | None = None,
        top_p: float | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """The next token of a generation step in this mode.

        Args:
            loc_S: ``[..., V]`` class-score locations.
            scale_S: ``[..., V]`` class-score scales (may be None when :attr:`samples_logits`).
            threshold: the thresholds ``tau`` (``[]`` or ``[V]``).
            temperature: ``T`` (the softmax temperature of the compatible mode).
            top_k: compatible mode only: keep the ``k`` largest logits.
            top_p: compatible mode only: nucleus mass in ``(0, 1]``.
            generator: compatible mode only: the ``torch.Generator`` of the draw.

        Returns:
            ``LongTensor [...]``.

        Raises:
            ValueError: a mode that needs ``scale_S`` called without it, or bad sampling
                options (see :func:`sample_compatible`).

        Example:
            >>> import torch
            >>> from cauchylin.nn.modes import MODE_TABLE
            >>> loc, scale = torch.tensor([1.0, 3.0]), torch.tensor([1.0, 10.0])
            >>> MODE_TABLE["causal"].choose(loc, scale, 0.0, 1.0)  # argmax of (loc - tau) / scale
            tensor(0)
            >>> MODE_TABLE["compatible"].choose(loc, None, 0.0, 0.0)  # T = 0: argmax loc_S
            tensor(1)
        """
        if self.samples_logits:
            return sample_compatible(
                loc_S, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator
            )
        if scale_S is None:
            raise ValueError(f"mode {self.name!r} chooses by P_k and needs scale_S")
        return ovr_argmax(loc_S, scale_S, threshold)


MODE_TABLE: dict[str, InferenceMode] = {
    m.name: m
    for m in (
        InferenceMode(CAUSAL, _causal),
        InferenceMode(STANDARD, _standard),
        InferenceMode(SAMPLING, _sampling, random_per_step=True),
        InferenceMode(COMPATIBLE, _compatible, temperature_scales_noise=False, samples_logits=True),
        InferenceMode(INDIVIDUAL, _individual, random_per_step=True),
        InferenceMode(SHARED_INDIVIDUAL, _shared_individual, draw=EPS_SEED),
        InferenceMode(SHARED_NOISE, _shared_noise, draw=EPS_NOISE),
    )
}
"""Every inference mode by name; :data:`MODES` lists the keys in this order."""

assert tuple(MODE_TABLE) == MODE_NAMES  # one record per name, in the names' order
MODES: tuple[str, ...] = MODE_NAMES
"""The inference modes accepted by :meth:`Action.forward` and :meth:`Action.decision_input`."""


def get_mode(mode: str | InferenceMode) -> InferenceMode:
    """The record of a mode, by name (a record is returned as it is).

    Callers that run many steps (a generation loop) look the mode up once and pass the record on.

    Args:
        mode: one of :data:`MODES`, or an :class:`InferenceMode`.

    Returns:
        The :class:`InferenceMode`.

    Raises:
        ValueError: an unknown mode (the message lists :data:`MODES`).

    Example:
        >>> from cauchylin.nn.modes import get_mode
        >>> get_mode("shared_noise").draw.name
        'eps_noise'
    """
    if isinstance(mode, InferenceMode):
        return mode
    spec = MODE_TABLE.get(mode) if isinstance(mode, str) else None
    if spec is None:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODE_TABLE)}")
    return spec


def resolve_mode(mode: str | InferenceMode, temperature: float = 1.0) -> InferenceMode:
    """The record of the mode that actually runs (see :func:`effective_mode`).

    Args:
        mode: one of :data:`MODES` (or its :class:`InferenceMode`).
        temperature: ``T >= 0``.

    Returns:
        The requested mode's :class:`InferenceMode`, or the causal one when ``T == 0`` and the
        mode's temperature scales its noise (every mode but ``compatible``).

    Raises:
        ValueError: an unknown mode or a bad temperature.

    Example:
        >>> from cauchylin.nn.modes import resolve_mode
        >>> resolve_mode("individual", 0.0).name, resolve_mode("individual", 0.5).name
        ('causal', 'individual')
    """
    spec = get_mode(mode)
    if check_temperature(temperature) == 0.0 and spec.temperature_scales_noise:
        return MODE_TABLE[CAUSAL]
    return spec


@dataclass(frozen=True, eq=False)
class Decoding:
    """How a decision is taken: the mode, its temperature, sampling options and fixed draw.

    Built once, and checked once, by :meth:`make` (a generation loop builds it before its first
    step); :meth:`cauchylin.nn.Action.step`, :meth:`~cauchylin.nn.Action.forward` and
    :meth:`~cauchylin.nn.Action.decision_input` take it in place of their separate arguments and
    trust it. The modes themselves are described on the documentation's
    [Inference modes][inference-modes-page] page.

    Attributes:
        mode: the requested mode's :class:`InferenceMode`.
        runs: the mode that runs: ``mode``, or the causal mode at ``T = 0`` when the mode's
            temperature scales its noise (every mode but ``compatible``).
        temperature: ``T >= 0``.
        top_k: compatible mode: keep the ``k`` largest logits (None: all).
        top_p: compatible mode: nucleus mass in ``(0, 1]`` (None: no filtering).
        generator: the ``torch.Generator`` of the random modes and of compatible sampling.
        draw: the fixed draw of a shared mode (``eps_seed`` or ``eps_noise``), checked against
            the shape given to :meth:`make`; None for the other modes.

    Example:
        >>> import torch
        >>> from cauchylin.nn.modes import Decoding
        >>> d = Decoding.make("sampling", 0.0)
        >>> d.mode.name, d.runs.name  # T = 0: the causal mode runs
        ('sampling', 'causal')
        >>> d = Decoding.make("shared_noise", 1.0, shape=(2, 3), eps_noise=torch.zeros(3))
        >>> tuple(d.draw.shape)
        (3,)
    """

    mode: InferenceMode
    runs: InferenceMode
    temperature: float
    top_k: int | None = None
    top_p: float | None = None
    generator: torch.Generator | None = None
    draw: torch.Tensor | None = None

    @classmethod
    def make(
        cls,
        mode: str | InferenceMode = STANDARD,
        temperature: float = 1.0,
        *,
        shape: Sequence[int] | torch.Size | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        generator: torch.Generator | None = None,
        eps_seed: torch.Tensor | None = None,
        eps_noise: torch.Tensor | None = None,
    ) -> Decoding:
        """Check the decision options once and hold them.

        Args:
            mode: one of :data:`MODES` (or its :class:`InferenceMode`).
            temperature: ``T >= 0`` (a one-element tensor is accepted).
            shape: the shape ``[..., C]`` of the ``U`` the decisions will be taken on; needed
                by the shared modes, whose draw is checked against it.
            top_k: compatible mode: ``None`` or an int ``>= 1``.
            top_p: compatible mode: ``None`` or a number in ``(0, 1]``.
            generator: the ``torch.Generator`` of the random draws.
            eps_seed: ``shared_individual``'s fixed draw: entries in ``(0, 1)``, shape ``[C]``
                or broadcastable to ``shape`` without enlarging it (e.g. ``[B, 1, C]``); see
                :func:`draw_eps_seed`.
            eps_noise: ``shared_noise``'s fixed draw (finite; same shape rules); see
                :func:`draw_eps_noise`.

        Returns:
            The checked :class:`Decoding`.

        Raises:
            ValueError: an unknown mode, a bad temperature, ``top_k`` or ``top_p``, or a shared
                mode whose draw is missing, of the wrong shape (or no ``shape`` to check it
                against) or (while validating) out of range. The draw is checked at every
                temperature, ``T = 0`` included, so a loop fails before its first step.

        Example:
            >>> from cauchylin.nn.modes import Decoding
            >>> Decoding.make("shared_individual", shape=(4, 8))
            Traceback (most recent call last):
            ...
            ValueError: mode 'shared_individual' needs eps_seed: pass a fixed draw (see draw_eps_seed) of shape [C] or broadcastable to U's shape (4, 8), e.g. [B, 1, C], and reuse it at every step
        """
        spec = get_mode(mode)
        t = check_temperature(temperature)
        check_sampling_options(top_k, top_p)
        draw = None
        if spec.draw is not None:
            if shape is None:
                raise ValueError(
                    f"mode {spec.name!r}: the shape of U is needed to check {spec.draw.name}"
                )
            given = _given_draw(spec.draw, eps_seed, eps_noise)
            draw = check_draw(spec.name, spec.draw, given, torch.Size(shape))
        return cls(spec, resolve_mode(spec, t), t, top_k, top_p, generator, draw)

    @classmethod
    def for_rows(
        cls,
        mode: str | InferenceMode = STANDARD,
        temperature: float = 1.0,
        *,
        rows: int,
        size: int,
        top_k: int | None = None,
        top_p: float | None = None,
        generator: torch.Generator | None = None,
        eps_seed: torch.Tensor | None = None,
        eps_noise: torch.Tensor | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> Decoding:
        """The decoding of ``rows`` sequences, with the shared modes' draw built here.

        A shared mode holds one draw per row for a whole sequence: the given one (``[C]``, the
        same for every row, or ``[rows, C]``), else a fresh one drawn once per row from
        ``generator``. It is held as ``[rows, C]`` on ``device``, in float64 for ``eps_seed``
        (:attr:`FixedDraw.float64`) and in ``dtype`` otherwise; :attr:`draws` gives it back by
        name. The other options are checked as by :meth:`make`.

        Args:
            mode: one of :data:`MODES` (or its :class:`InferenceMode`).
            temperature: ``T >= 0``.
            rows: the number of sequences ``B``.
            size: the causal size ``C``.
            top_k: compatible mode: ``None`` or an int ``>= 1``.
            top_p: compatible mode: ``None`` or a number in ``(0, 1]``.
            generator: the ``torch.Generator`` of every random draw (a fresh draw comes from
                it, on its device).
            eps_seed: ``shared_individual``'s draw (``[C]`` or ``[rows, C]``), or None to draw.
            eps_noise: ``shared_noise``'s draw (likewise).
            device: where the draw is held (default: where it was given or drawn).
            dtype: the dtype of ``eps_noise`` (default: torch's default dtype).

        Returns:
            The checked :class:`Decoding` (its :attr:`draw` ``[rows, C]`` for a shared mode).

        Raises:
            ValueError: as :meth:`make`, or a given draw that is neither ``[C]`` nor
                ``[rows, C]``.

        Example:
            >>> import torch
            >>> from cauchylin.nn.modes import Decoding
            >>> g = torch.Generator().manual_seed(0)
            >>> d = Decoding.for_rows("shared_individual", rows=2, size=3, generator=g)
            >>> tuple(d.draw.shape), d.draw.dtype, list(d.draws)
            ((2, 3), torch.float64, ['eps_seed'])
            >>> d = Decoding.for_rows("shared_noise", rows=2, size=3, eps_noise=torch.zeros(3))
            >>> d.draws["eps_noise"].tolist()  # the given [C] draw, in every row
            [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
        """
        spec = get_mode(mode)
        draws: dict[str, torch.Tensor] = {}
        if spec.draw is not None:
            shape = torch.Size((rows, size))
            given = _given_draw(spec.draw, eps_seed, eps_noise)
            dtype = torch.float64 if spec.draw.float64 else dtype
            if given is None:
                # drawn where the generator lives (a CPU generator draws float64 on the CPU)
                home = generator.device if generator is not None else device
                given = spec.draw.sample(shape, generator=generator, device=home, dtype=dtype)
            elif check_draw(spec.name, spec.draw, given, shape).shape not in ((size,), shape):
                raise ValueError(
                    f"{spec.draw.name} has shape {tuple(given.shape)}; expected [C]=[{size}] or "
                    f"[B, C]=[{rows}, {size}]"
                )
            draws[spec.draw.name] = given.to(device=device, dtype=dtype).expand(shape)
        return cls.make(
            spec,
            temperature,
            shape=(rows, size),
            top_k=top_k,
            top_p=top_p,
            generator=generator,
            **draws,
        )

    @property
    def draws(self) -> dict[str, torch.Tensor]:
        """The fixed draw by its keyword (``{"eps_seed": ...}``), empty for the other modes.

        Example:
            >>> import torch
            >>> from cauchylin.nn.modes import Decoding
            >>> Decoding.make("standard").draws
            {}
            >>> list(Decoding.make("shared_noise", shape=(3,), eps_noise=torch.zeros(3)).draws)
            ['eps_noise']
        """
        if self.mode.draw is None or self.draw is None:
            return {}
        return {self.mode.draw.name: self.draw}

    def decision_input(self, U: CauchyVector, noise: torch.Tensor) -> CauchyVector:
        """The decision input ``U'`` of the mode that runs (no checks: the record was checked).

        Args:
            U: :class:`~cauchylin.CauchyVector` ``[..., C]``.
            noise: ``|b_noise|`` ``[C]``.

        Returns:
            ``U'`` of ``U``'s shape.

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> from cauchylin.nn.modes import Decoding
            >>> U = CauchyVector(torch.zeros(1, 2), torch.ones(1, 2))
            >>> Decoding.make("standard", 2.0).decision_input(U, torch.full((2,), 0.5)).scale
            tensor([[2., 2.]])
        """
        draw = self.draw
        if draw is not None and draw.device != U.device:
            draw = draw.to(U.device)
        return self.runs.rule(U, self.temperature, noise, self.generator, draw)

    def choose(
        self, loc_S: torch.Tensor, scale_S: torch.Tensor | None, threshold: torch.Tensor | float
    ) -> torch.Tensor:
        """The next token by the rule of the mode that runs (:meth:`InferenceMode.choose`).

        Args:
            loc_S: ``[..., V]`` class-score locations.
            scale_S: ``[..., V]`` class-score scales (None allowed when the rule samples logits).
            threshold: the thresholds ``tau`` (``[]`` or ``[V]``).

        Returns:
            ``LongTensor [...]``.

        Raises:
            ValueError: a rule that needs ``scale_S`` given None.

        Example:
            >>> import torch
            >>> from cauchylin.nn.modes import Decoding
            >>> loc, scale = torch.tensor([1.0, 3.0]), torch.tensor([1.0, 10.0])
            >>> Decoding.make("causal").choose(loc, scale, 0.0)  # argmax of (loc - tau) / scale
            tensor(0)
        """
        if self.runs.samples_logits:
            return _sample_logits(loc_S, self.temperature, self.top_k, self.top_p, self.generator)
        if scale_S is None:
            raise ValueError(f"mode {self.runs.name!r} chooses by P_k and needs scale_S")
        return ovr_argmax(loc_S, scale_S, threshold)


def effective_mode(mode: str | InferenceMode, temperature: float = 1.0) -> str:
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
    return resolve_mode(mode, temperature).name
