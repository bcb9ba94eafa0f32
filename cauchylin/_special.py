"""Numerically stable special functions of the Cauchy law, with hand-written derivatives.

Two families of functions live here:

* the *two-argument* kernels used by :class:`~cauchylin.CauchyVector`, which take the
  displacement ``d = x - loc`` and the scale ``s`` separately (:func:`log_pdf`,
  :func:`log_cdf_sf`, :func:`log_cdf`, :func:`log_sf`, :func:`cdf`, :func:`sf`). They never form
  the standardised ``z = d / s``, which saves a division, cannot overflow, and gives the exact
  answer for a *degenerate* component (``s = 0``, a point mass at ``loc``: the cdf is the step
  ``1[x >= loc]``);
* the *standardised* wrappers ``*_std(z)`` (``s = 1``) kept for callers that already hold ``z``.

Every function computes in ``float32`` or ``float64`` (``bfloat16`` and ``float16`` inputs are
promoted to ``float32``, see :func:`working_dtype`). The identities used:

* ``cdf = 1/2 + atan(z)/pi = atan2(s, -d)/pi``; the smaller tail is
  ``t = atan2(s, |d|)/pi <= 1/2``, accurate to an ulp or two for every ``d`` while it is a normal
  float (``|z| < 2.7e37`` in float32).
* ``log cdf = log t`` for ``d < 0`` and ``log(1 - t)`` for ``d >= 0`` (mirror for ``log sf``).
  Where ``t`` is below the smallest normal float (subnormal or zero: ``|d| / s`` beyond about
  ``2.7e37`` in float32, ``1.4e307`` in float64) ``log t = log(s) - log|d| - log(pi)``, exact there
  because ``atan(r) = r (1 - r^2/3 + ...)`` with ``r = s / |d| < 1e-37``; so the logs stay finite
  out to ``s`` the smallest subnormal and ``|d|`` the largest float (float32: down to about
  ``-193``), and ``-inf`` comes only from ``s = 0`` or an infinite ``d``.
  A single output uses one ``log``: ``1 - t`` is carried as an unevaluated sum ``hi + lo``
  (``hi = fl(1 - t)``, ``lo`` its exact rounding error, Fast2Sum), so
  ``log(1 - t) = log(hi) + lo/hi`` never rounds ``1 - tiny`` to ``1``. The pair uses ``log t``
  and ``log1p(-t)``. Branches are selected by exact 0/1 arithmetic (``lerp`` with weights 0
  and 1, sign tricks) on *finite* values, and ``-inf`` comes out only where the probability is
  exactly zero. ``torch.where`` (slow on CPU) is used only on the general path, which the CPU
  takes only when a tail is subnormal or zero.
* ``log p = -log(pi) - log(s (1 + z^2))`` with ``s (1 + z^2) = s + (d / s) d`` (one ``log``) on
  CPU, or ``2 log(hypot(sqrt(s), |d| / sqrt(s)))`` on other devices and wherever the former
  overflows (``|z|`` beyond about ``1.8e19``); where that overflows too (``|d| / sqrt(s)`` beyond
  the float range) ``log(s) - 2 log(m) - log1p((n/m)^2)`` with ``m = max(|d|, s)``,
  ``n = min(|d|, s)``, which cannot overflow.

Every kernel allocates few temporaries and works in place: on CPU the cost of a kernel is
dominated by its transcendental calls and the number of fresh full-size tensors.

The derivatives are written by hand (``torch.autograd.Function``) because autograd through
``abs`` would give a zero gradient at ``d = 0`` and through ``s^2 + d^2`` an overflow in the tails;
the hand-written ones are finite and correctly signed for every finite ``d`` and ``s > 0``, and at
``d = +-inf`` they are the limits (``0`` in ``d``; ``0`` or ``1/s`` in ``s``). Each ``Function``
has both modes of differentiation from the same partial derivatives: ``backward`` (reverse mode:
``backward()``, ``torch.func.grad``, ``jacrev``) and a forward rule (forward mode:
``torch.func.jvp``, ``jacfwd``, ``torch.autograd.forward_ad``), both written with differentiable
torch operations, so higher derivatives (``hessian``) compose. The forward rule is installed as
``jvp`` on a subclass of each ``Function`` (:func:`_with_jvp`), which forward-mode AD and the
``torch.func`` transforms apply; ``torch.compile`` sees the class without it, because Dynamo
refuses to trace a ``Function`` that defines ``jvp``. Each is written in the ``setup_context``
style with ``generate_vmap_rule = True``: under ``vmap`` with ``grad`` or ``jvp`` the forward,
``backward`` and ``jvp`` run on batched tensors, which they support because, under a
``torch.func`` transform, the forward takes its functional path (no in-place ``out=`` operation;
a host-side reduction that picks a path reads every batch member through
:func:`cauchylin._validation.host_values`). Under ``vmap`` alone, and without a gradient outside
any transform, the forward runs directly (no autograd overhead); while a graph is captured
(``torch.jit.trace``, ``torch.compile``, ``torch.export``) the autograd ``Function`` is always used
and the forward takes no branch that depends on tensor values, so the captured graph is the same
with and without gradients.

The module also holds :func:`standard_cauchy` (the sampler every Cauchy draw uses) and
:func:`cauchy_kl`, the one kernel of the Cauchy KL divergence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from cauchylin._validation import host_values, is_tracing, transforms_active

__all__ = [
    "LOG_PI",
    "cauchy_kl",
    "cdf",
    "cdf_std",
    "icdf",
    "icdf_std",
    "log1p_square",
    "log_cdf",
    "log_cdf_sf",
    "log_cdf_std",
    "log_pdf",
    "log_pdf_finite",
    "log_pdf_std",
    "log_sf",
    "log_sf_std",
    "log_tail_std",
    "ovr_log_probs_std",
    "sf",
    "sf_std",
    "standard_cauchy",
    "working_dtype",
]

LOG_PI = math.log(math.pi)
_INV_PI = 1.0 / math.pi


def working_dtype(*tensors: Any) -> torch.dtype:
    """The dtype used internally: ``float64`` if any input is ``float64``, else ``float32``.

    Args:
        *tensors: tensors (other objects are ignored).

    Returns:
        ``torch.float64`` or ``torch.float32`` (half-precision inputs compute in float32).

    Example:
        >>> import torch
        >>> working_dtype(torch.ones(1, dtype=torch.bfloat16))
        torch.float32
    """
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.dtype == torch.float64:
            return torch.float64
    return torch.float32


def _broadcast_shape(*shapes: Sequence[int]) -> torch.Size:
    """``torch.broadcast_shapes`` without its Python overhead (about 20 us a call in torch 2.13,
    more than a small kernel): the same rule, the same ``RuntimeError``. While a graph is captured
    torch's own function runs (symbolic sizes)."""
    if is_tracing():
        return torch.broadcast_shapes(*shapes)
    ndim = max(len(shape) for shape in shapes)
    out = [1] * ndim
    for shape in shapes:
        for i, n in enumerate(shape, ndim - len(shape)):
            if n != 1:
                if out[i] != 1 and out[i] != n:
                    raise RuntimeError(f"shapes {[tuple(x) for x in shapes]} do not broadcast")
                out[i] = n
    return torch.Size(out)


def _as_working(*tensors: torch.Tensor) -> list[torch.Tensor]:
    dtype = working_dtype(*tensors)
    # (no call where the dtype is already right: under vmap even a no-op .to costs a dispatch)
    return [t if t.dtype == dtype else t.to(dtype) for t in tensors]


def _fast_paths() -> bool:
    """Whether the in-place ``out=`` kernels and the host-side reductions that pick a path may run:
    in eager execution only, not while a graph is captured nor under a ``torch.func`` transform
    (whose batched tensors support neither)."""
    return not is_tracing() and not transforms_active()


def _forward_ad_active() -> bool:
    """Whether a forward-mode AD level is open (``torch.autograd.forward_ad.dual_level``)."""
    return getattr(torch.autograd.forward_ad, "_current_level", -1) >= 0


def _differentiating_transform() -> bool:
    """Whether a ``torch.func`` transform other than ``vmap`` is active (``grad``, ``jvp``,
    ``functionalize``, and those built on them: ``jacrev``, ``jacfwd``, ``hessian``)."""
    functorch = getattr(torch._C, "_functorch", None)
    if functorch is None:  # pragma: no cover - a torch without torch.func
        return False
    batching = functorch.TransformType.Vmap
    for level in functorch.get_interpreter_stack() or ():
        if level.key() != batching:
            return True
    return False


def _needs_function(*tensors: torch.Tensor) -> bool:
    """Whether the autograd ``Function`` must be applied rather than its forward called directly:
    a gradient is wanted, a graph is captured, forward-mode AD or a differentiating ``torch.func``
    transform is active (their rules are the ``Function``'s ``backward`` and ``jvp``). Under
    ``vmap`` alone the forward runs directly on the batched tensors (its functional path): the
    vmap rule of a ``Function`` would only add a round of Python bookkeeping per call."""
    if torch.is_grad_enabled():
        for t in tensors:
            if t.requires_grad:
                return True
    return is_tracing() or _forward_ad_active() or _differentiating_transform()


def _with_jvp(fn: type[torch.autograd.Function]) -> type[torch.autograd.Function]:
    """``fn`` with its forward-mode rule ``fn.tangent`` installed as ``jvp``.

    Two classes because Dynamo refuses to trace a ``Function`` that defines ``jvp``
    ("Unsupported custom jvp", also when nothing asks for forward mode): ``torch.compile`` sees
    the class without it, forward-mode AD and the ``torch.func`` transforms the one with it.
    """
    return type(fn.__name__ + "Jvp", (fn,), {"jvp": staticmethod(fn.tangent)})  # type: ignore[attr-defined]


def _function_for(fn: type[torch.autograd.Function]) -> type[torch.autograd.Function]:
    """The class to apply: with ``jvp`` under forward-mode AD or a ``torch.func`` transform (not
    while a graph is captured), else without."""
    if not is_tracing() and (transforms_active() or _forward_ad_active()):
        return _JVP[fn]
    return fn


def _apply(fn: type[torch.autograd.Function], d: torch.Tensor, s: torch.Tensor, *extra: Any) -> Any:
    """``fn.apply`` when a derivative rule may be needed (see :func:`_needs_function`), else its
    forward directly.

    The direct call saves the autograd overhead in eager execution. While tracing or compiling
    the ``Function`` is always applied, so the captured graph does not depend on whether the
    example inputs required gradients (and its in-place ``out=`` kernels stay inside it).
    """
    if _needs_function(d, s):
        return _function_for(fn).apply(d, s, *extra)
    return fn.forward(d, s, *extra)


def _tangent(
    out_shape: torch.Size, *pairs: tuple[torch.Tensor | None, torch.Tensor]
) -> torch.Tensor:
    """``sum_i tangent_i * partial_i`` over the pairs whose tangent is given, of ``out_shape``."""
    total: torch.Tensor | None = None
    for tangent, partial in pairs:
        if tangent is None:
            continue
        term = tangent * partial
        total = term if total is None else total + term
    if total is None:  # (no input carried a tangent)
        return pairs[0][1].new_zeros(out_shape)
    return total.expand(out_shape) if total.shape != out_shape else total


def _reduce_to(grad: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Sum a broadcast gradient back to the shape (and dtype) of the input it belongs to."""
    if grad.shape != like.shape:
        grad = grad.sum_to_size(like.shape)
    return grad.to(like.dtype)


# ---------------------------------------------------------------------------- log density


def _unit_ratio(a: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """``a / h`` for ``0 <= a <= h = hypot(a, s)``, with the limit ``1`` at ``a = h = inf``.

    ``inf / inf`` (an infinite displacement) is NaN in floating point; the ratio tends to 1 there.
    (``0 / 0``, a point mass on its atom, also becomes 1; no formula is finite there anyway.)
    """
    return torch.div(a, h).nan_to_num_(nan=1.0)


def _cpu_all_finite(y: torch.Tensor) -> bool:
    """True when the CPU tensor ``y`` is non-empty and finite (one reduction; CPU: no sync).

    Under ``vmap`` the reduction reads every batch member's values (:func:`host_values`); always
    ``False`` while a graph is captured (the caller then takes its general path).
    """
    values = host_values(y)  # (None first: under torch.jit.trace even numel() is traced)
    return values is not None and values.numel() > 0 and math.isfinite(float(values.amax()))


def _log_pdf_cpu(d: torch.Tensor, s: torch.Tensor) -> torch.Tensor | None:
    """The log-density from ``s (1 + z^2) = s + (d / s) d`` (two cheap operations and one
    ``log``) on a CPU, or ``None`` where that is not exact: on another device, while a graph is
    captured, or where ``s + d^2 / s`` is not finite somewhere.

    It overflows only for ``|z|`` beyond ``~1.8e19 / sqrt(s)``; one CPU reduction (no device
    sync) detects that rare case and inf/NaN inputs, which then take the max/min form of
    :func:`_log_pdf_general`. A result here therefore also says that every ``d`` and ``s`` is
    finite (an infinite or NaN one makes ``s + d^2 / s`` infinite or NaN).
    """
    if d.device.type != "cpu":
        return None
    y = torch.addcmul(s, torch.div(d, s), d)
    if not _cpu_all_finite(y):
        return None
    # -log(pi) - log(y) in one operation: the same rounding as -(log y) - log(pi)
    return torch.rsub(y.log_(), -LOG_PI)


def _log_pdf_general(d: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """``-log(pi) - 2 log(hypot(sqrt(s), |d| / sqrt(s)))``, and the max/min form where that overflows.

    ``s (1 + z^2) = hypot(sqrt(s), |d| / sqrt(s))^2``: one ``log`` of a product, accurate near
    ``log p = -log(pi)``. Where ``|d| / sqrt(s)`` overflows (``|d| > 3.4e38 sqrt(s)`` in float32)
    the result is far from 0 and ``log(s) - 2 log(m) - log1p((n/m)^2)`` with
    ``m = max(|d|, s)``, ``n = min(|d|, s)`` (nothing squared before it is at most 1) is exact to
    a few ulp. For ``s = 0`` (a point mass) the result is ``-inf`` off the atom (the limit of the
    density) and NaN on it (there is no density).
    """
    shape = _broadcast_shape(d.shape, s.shape)
    a = torch.abs(d).expand(shape)
    r = torch.sqrt(s)
    h = torch.hypot(r, a / r)
    out = torch.log(h).mul_(-2.0).sub_(LOG_PI)
    over = torch.isinf(h)
    m = torch.maximum(a, s)
    n = torch.minimum(a, s)
    ratio = n.div_(m)
    tail = ratio.mul_(ratio).log1p_().neg_()  # full (broadcast) shape, like m
    tail.sub_(m.log_().mul_(2.0)).add_(torch.log(s)).sub_(LOG_PI)
    return torch.where(over, tail, out)


def _log_pdf_partials(d: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(d log p / dd, d log p / ds) = (-2 d / (s^2 + d^2), (d^2 - s^2) / (s (s^2 + d^2)))``,
    written with the bounded ratios ``d / h`` and ``s / h`` (``h = hypot(d, s)``): no overflow,
    and the limits at ``d = +-inf``."""
    h = torch.hypot(d, s)
    u = torch.copysign(_unit_ratio(d.abs(), h), d)  # d / h in [-1, 1]; +-1 at d = +-inf
    v = s / h  # in [0, 1]
    return -2.0 * u / h, (u - v) * (u + v) / s


class _LogPdf(torch.autograd.Function):
    """``log p(x) = -log(pi) + log(s) - log(s^2 + d^2)`` as a function of ``(d, s)``."""

    generate_vmap_rule = True

    @staticmethod
    def forward(d: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        out = _log_pdf_cpu(d, s)
        return _log_pdf_general(d, s) if out is None else out

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        d, s = ctx.saved_tensors
        p_d, p_s = _log_pdf_partials(d, s)
        grad_d = grad_s = None
        if ctx.needs_input_grad[0]:
            grad_d = _reduce_to(grad * p_d, d)
        if ctx.needs_input_grad[1]:
            grad_s = _reduce_to(grad * p_s, s)
        return grad_d, grad_s

    @staticmethod
    def tangent(ctx: Any, t_d: torch.Tensor | None, t_s: torch.Tensor | None) -> torch.Tensor:
        d, s = ctx.saved_tensors
        p_d, p_s = _log_pdf_partials(d, s)
        return _tangent(p_d.shape, (t_d, p_d), (t_s, p_s))


def log_pdf(d: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """Log-density of ``Cauchy(loc, s)`` at ``x = loc + d``: ``-log(pi s) - log(1 + (d/s)^2)``.

    Args:
        d: displacement ``x - loc``, any shape.
        s: scale, broadcastable with ``d``; ``s = 0`` (a point mass, which has no density)
            gives ``-inf`` off the atom and NaN on it.

    Returns:
        The broadcast log-density in the working dtype (float32 for half inputs), accurate to a
        few ulp for ``|d|/s`` from 0 to beyond ``1e30``.

    Example:
        >>> import torch
        >>> log_pdf(torch.tensor([0.0, 1e30]), torch.tensor(1.0))
        tensor([  -1.1447, -139.2998])
    """
    d, s = _as_working(d, s)
    return _apply(_LogPdf, d, s)


def log_pdf_finite(d: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """:func:`log_pdf`, and whether its own finiteness read found every ``d`` and ``s`` finite.

    On a CPU :func:`log_pdf` reads (once, on the host) whether ``s + d^2 / s`` is finite to pick
    its fast form; the flag hands that read on, so a caller that must check its inputs for
    NaN/inf needs no read of its own when the flag is ``True``.

    Args:
        d: displacement ``x - loc``, any shape.
        s: scale, broadcastable with ``d``.

    Returns:
        ``(log_pdf(d, s), finite)``: ``finite`` is ``True`` only when every ``d`` and ``s`` was
        read to be finite (and ``s`` nonzero); ``False`` says nothing was learned (another
        device, a graph capture, a gradient or a differentiating transform wanted, or a value
        that is not finite), and the caller must check for itself.

    Example:
        >>> import torch
        >>> log_pdf_finite(torch.tensor([0.0, float("nan")]), torch.tensor(1.0))
        (tensor([-1.1447,     nan]), False)
    """
    d, s = _as_working(d, s)
    if not _needs_function(d, s):
        out = _log_pdf_cpu(d, s)
        if out is not None:
            return out, True
    return _apply(_LogPdf, d, s), False


def log1p_square(z: torch.Tensor) -> torch.Tensor:
    """``log(1 + z**2)`` without overflow for any finite or infinite ``z``, full relative accuracy.

    For ``|z| > 1`` it is evaluated as ``2 log|z| + log1p(z**-2)`` so ``z**2`` never overflows; for
    ``|z| <= 1`` as ``log1p(z**2)``, which keeps the relative accuracy of tiny results.

    Args:
        z: any floating tensor.

    Returns:
        A tensor of the same shape and dtype.

    Example:
        >>> import torch
        >>> log1p_square(torch.tensor([0.0, 1e-10, 1e30]))
        tensor([0.0000e+00, 1.0000e-20, 1.3816e+02])
    """
    az = z.abs()
    big = az > 1.0
    safe_big = torch.where(big, az, torch.ones_like(az))
    safe_small = torch.where(big, torch.zeros_like(az), az)
    return torch.where(
        big,
        2.0 * torch.log(safe_big) + torch.log1p(safe_big.reciprocal().square()),
        torch.log1p(safe_small.square()),
    )


def log_pdf_std(z: torch.Tensor) -> torch.Tensor:
    """``log p(z) = -log(pi) - log(1 + z**2)`` of the standard Cauchy density.

    Args:
        z: standardised argument, any shape.

    Returns:
        The log-density in the working dtype.

    Example:
        >>> import torch
        >>> log_pdf_std(torch.tensor([0.0]))
        tensor([-1.1447])
    """
    (z,) = _as_working(z)
    return _apply(_LogPdf, z, z.new_ones(()))


# ---------------------------------------------------------------------------- cdf and sf


def _small_tail(d: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """``t = atan2(s, |d|) / pi <= 1/2``, the smaller tail probability (a fresh tensor)."""
    if not _fast_paths():  # (out= and a batched s on an unbatched |d|: not under vmap)
        return torch.atan2(s, torch.abs(d)).mul_(_INV_PI)
    t = torch.abs(d.expand(_broadcast_shape(d.shape, s.shape)))
    torch.atan2(s, t, out=t)
    return t.mul_(_INV_PI)


def _upper_mask(d: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """1.0 where ``d >= +0`` (there the cdf is the larger side), 0.0 where ``d < 0`` or ``d = -0``."""
    half = torch.full((), 0.5, dtype=d.dtype, device=d.device)
    return torch.copysign(half, d.detach()).add_(0.5).expand(shape)


def _cpu_all_normal(t: torch.Tensor) -> bool:
    """True on CPU when every tail ``t`` is a normal float (a reduction, no device sync).

    Then ``log t`` is accurate everywhere and the logs themselves can be selected by an exact 0/1
    ``lerp``; a subnormal or zero tail (point mass, infinite ``x``, ``|z| > 2.7e37`` in float32)
    or a NaN takes the general path. Always ``False`` while a graph is captured or under a
    ``torch.func`` transform.
    """
    return (
        _fast_paths()
        and t.device.type == "cpu"
        and t.numel() > 0
        and float(t.amin()) >= torch.finfo(t.dtype).tiny
    )


def _log_small_tail(t: torch.Tensor, d: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """``log t`` of the small tail ``t = atan2(s, |d|) / pi``, also where ``t`` is subnormal or 0.

    There ``r = s / |d| < pi * tiny`` and ``atan(r) = r`` to far below an ulp, so
    ``log t = log(s) - log|d| - log(pi)``: finite for every ``s > 0`` and finite ``d``.
    """
    log_t = torch.log(t)
    # (s = 0 is a point mass: t = 0 exactly and log t = -inf, also on its atom where |d| = 0)
    tiny = (t < torch.finfo(t.dtype).tiny) & (s > 0)
    a = torch.where(tiny, d.abs(), 1.0)
    sw = torch.where(tiny, s, 1.0)
    return torch.where(tiny, torch.log(sw) - torch.log(a) - LOG_PI, log_t)


def _log_cdf_forward(d: torch.Tensor, s: torch.Tensor, flip: bool = False) -> torch.Tensor:
    """``log cdf`` (``flip``: ``log sf``).

    CPU, every tail normal: ``log t`` and ``log1p(-t)`` selected by an exact 0/1 ``lerp``.
    Otherwise a single ``log``: with ``u = sigma t`` (``sigma = copysign(1, d)``, negated for
    ``flip``) and ``m = 1/2 + copysign(1/2, u)`` (1 where the output is the larger side),
    ``arg = m - u`` is ``t`` exactly (``m = 0``) or ``hi = fl(1 - t)`` (``m = 1``), and
    ``lo = (m - arg) - u`` is exactly 0 or the rounding error of ``hi`` (Fast2Sum, ``t <= 1/2``);
    so ``log(arg + lo) = log(arg) + lo / arg``. ``lo / arg`` is NaN only where ``arg = lo = 0``
    (``t = 0``); it is replaced by 0 there. Where ``arg`` is a subnormal or zero small tail the
    log comes from :func:`_log_small_tail`.
    """
    u = _small_tail(d, s)
    if _cpu_all_normal(u):
        m = _upper_mask(d, u.shape)
        small = torch.log(u)
        large = u.neg_().log1p_()
        if flip:
            return torch.lerp(large, small, m, out=small)
        return torch.lerp(small, large, m, out=small)
    u.copysign_(d)  # (in place on u, which carries d's batch dimensions under vmap)
    if flip:
        u.neg_()  # +0 becomes -0: a point mass has sf(loc) = 0 exactly
    half = torch.full((), 0.5, dtype=u.dtype, device=u.device)
    arg = torch.copysign(half, u).add_(0.5).sub_(u)
    lo = torch.copysign(half, u).add_(0.5).sub_(arg).sub_(u)
    lo.div_(arg).nan_to_num_(nan=0.0)
    return _log_small_tail(arg, d, s).add_(lo)


def _log_pair_forward(d: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log cdf, log sf)`` with the same exact selections as :func:`_log_cdf_forward`."""
    t = _small_tail(d, s)
    m = _upper_mask(d, t.shape)
    if _cpu_all_normal(t):
        small = torch.log(t)
        large = t.neg_().log1p_()
        log_cdf = torch.lerp(small, large, m)
        return log_cdf, torch.lerp(large, small, m, out=large)
    small = _log_small_tail(t, d, s)
    large = torch.log1p(-t)
    return torch.where(m > 0, large, small), torch.where(m > 0, small, large)


def _tail_grads(
    d: torch.Tensor, s: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Partial derivatives of ``log t`` and ``log(1 - t)`` in ``a = |d|`` and ``s``.

    With ``theta = atan2(s, a) = pi t``, ``h = hypot(a, s)``, ``s/h = sin(theta)`` and
    ``a/h = cos(theta)``:
    ``d log t / da = -(s/h) / (h theta) = -sinc(t) / h``,
    ``d log t / ds = (a/h) sinc(t) / s``,
    ``d log(1-t) / da = (s/h) / (h (pi - theta))`` and
    ``d log(1-t) / ds = -(a/h) / (h (pi - theta))``.
    ``sinc(t) = sin(theta) / theta`` tends to 1 where ``theta`` underflows, so every derivative
    stays finite and correctly signed. ``t`` is recomputed here (differentiably, for second
    derivatives) instead of being saved by the forward.
    """
    a = d.abs()
    t = torch.atan2(s, a) * _INV_PI
    h = torch.hypot(a, s)
    sinc = torch.sinc(t)
    comp = h * (math.pi - math.pi * t)
    a_h = _unit_ratio(a, h)  # 1 at a = inf: the limits there are finite (0, or 1/s)
    small_a = -sinc / h
    small_s = a_h * sinc / s
    large_a = (s / h) / comp
    large_s = -a_h / comp
    return small_a, small_s, large_a, large_s


# Row blocks of the CPU forward hold about this many elements (1 MiB of float32 per temporary).
BLOCK_ELEMENTS = 1 << 18


def _block_rows(shape: torch.Size) -> int:
    """Rows (along the first dimension) per block of about :data:`BLOCK_ELEMENTS` elements, or 0
    to evaluate whole: a small input (at most two blocks), a 0-d one, or too few rows to split."""
    numel = math.prod(shape)
    if len(shape) == 0 or numel <= 2 * BLOCK_ELEMENTS:
        return 0
    rows = max(1, BLOCK_ELEMENTS // max(1, numel // shape[0]))
    return 0 if rows * 2 > shape[0] else rows


def _log_cdf_sf_whole(
    d: torch.Tensor, s: torch.Tensor, which: str
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    if which == "cdf":
        return _log_cdf_forward(d, s)
    if which == "sf":
        return _log_cdf_forward(d, s, flip=True)
    return _log_pair_forward(d, s)


def _log_cdf_sf_blocks(
    d: torch.Tensor, s: torch.Tensor, which: str
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The forward of :class:`_LogCdfSf`, in row blocks on the CPU for large inputs.

    Why: the exact evaluation needs three or four temporaries of the input's size. For an
    ``[N, V]`` input of many megabytes, glibc's allocator returns each freed temporary to the
    operating system and page-faults the next one in again (16k faults per call at
    ``[1024, 4096]``), which costs more than the arithmetic. Blocks of about ``BLOCK_ELEMENTS``
    along the first dimension keep the temporaries small enough to be reused and cache-resident
    (an input with fewer than two such blocks is evaluated whole). Every element is exact to a
    few ulp either way; each block picks its path (the lerp of two logs, or the compensated
    single log where a tail probability is 0) from its own elements.
    """
    if not _fast_paths() or d.device.type != "cpu":
        return _log_cdf_sf_whole(d, s, which)
    shape = _broadcast_shape(d.shape, s.shape)
    rows = _block_rows(shape)
    if rows == 0:
        return _log_cdf_sf_whole(d, s, which)
    d, s = d.expand(shape), s.expand(shape)
    outs = [
        torch.empty(shape, dtype=d.dtype, device=d.device)
        for _ in range(2 if which == "both" else 1)
    ]
    for start in range(0, shape[0], rows):
        block = _log_cdf_sf_whole(d[start : start + rows], s[start : start + rows], which)
        for out, part in zip(outs, block if which == "both" else (block,), strict=True):
            out[start : start + rows].copy_(part)
    return (outs[0], outs[1]) if which == "both" else outs[0]


def _log_cdf_sf_partials(
    d: torch.Tensor, s: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(d log cdf / dd, d log cdf / ds, d log sf / dd, d log sf / ds)`` from :func:`_tail_grads`."""
    small_a, small_s, large_a, large_s = _tail_grads(d, s)
    # m = 1 where d >= +0 (the cdf is the large side); exact 0/1 lerps select the branch.
    m = _upper_mask(d, small_a.shape)
    # d log cdf / dd = pdf / cdf > 0 and d log sf / dd = -pdf / sf < 0.
    cdf_d = torch.lerp(-small_a, large_a, m)
    cdf_s = torch.lerp(small_s, large_s, m)
    sf_d = torch.lerp(-large_a, small_a, m)
    sf_s = torch.lerp(large_s, small_s, m)
    return cdf_d, cdf_s, sf_d, sf_s


class _LogCdfSf(torch.autograd.Function):
    """``(log cdf, log sf)`` of ``Cauchy(loc, s)`` at ``x = loc + d``, or one of them."""

    generate_vmap_rule = True

    @staticmethod
    def forward(
        d: torch.Tensor, s: torch.Tensor, which: str
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        return _log_cdf_sf_blocks(d, s, which)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        d, s, ctx.which = inputs
        ctx.save_for_backward(d, s)
        ctx.save_for_forward(d, s)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        d, s = ctx.saved_tensors
        cdf_d, cdf_s, sf_d, sf_s = _log_cdf_sf_partials(d, s)
        if ctx.which == "cdf":
            pairs = [(grads[0], cdf_d, cdf_s)]
        elif ctx.which == "sf":
            pairs = [(grads[0], sf_d, sf_s)]
        else:
            pairs = [(grads[0], cdf_d, cdf_s), (grads[1], sf_d, sf_s)]
        grad_d = grad_s = None
        for g, gd, gs in pairs:
            if g is None:
                continue
            if ctx.needs_input_grad[0]:
                grad_d = g * gd if grad_d is None else grad_d + g * gd
            if ctx.needs_input_grad[1]:
                grad_s = g * gs if grad_s is None else grad_s + g * gs
        if grad_d is not None:
            grad_d = _reduce_to(grad_d, d)
        if grad_s is not None:
            grad_s = _reduce_to(grad_s, s)
        return grad_d, grad_s, None

    @staticmethod
    def tangent(
        ctx: Any, t_d: torch.Tensor | None, t_s: torch.Tensor | None, _: None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        d, s = ctx.saved_tensors
        cdf_d, cdf_s, sf_d, sf_s = _log_cdf_sf_partials(d, s)
        shape = cdf_d.shape
        if ctx.which == "cdf":
            return _tangent(shape, (t_d, cdf_d), (t_s, cdf_s))
        if ctx.which == "sf":
            return _tangent(shape, (t_d, sf_d), (t_s, sf_s))
        return _tangent(shape, (t_d, cdf_d), (t_s, cdf_s)), _tangent(
            shape, (t_d, sf_d), (t_s, sf_s)
        )


def log_cdf_sf(d: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log P(X <= loc + d), log P(X > loc + d))`` for ``X ~ Cauchy(loc, s)``, both ``<= 0``.

    ``log P(X <= x) = log(atan2(s, -d) / pi)`` and ``log P(X > x) = log(atan2(s, d) / pi)``,
    evaluated as described in the module docstring: accurate to a few ulp for ``|d|/s`` up to
    ``1e30`` and beyond, exact ``0``/``-inf`` for a point mass (``s = 0``).

    Args:
        d: displacement ``x - loc``.
        s: scale, broadcastable with ``d``, ``>= 0``.

    Returns:
        Two tensors of the broadcast shape in the working dtype.

    Example:
        >>> import torch
        >>> lc, ls = log_cdf_sf(torch.tensor([-1e30, 0.0, 1e30]), torch.tensor(1.0))
        >>> lc
        tensor([-7.0222e+01, -6.9315e-01, -3.1831e-31])
    """
    d, s = _as_working(d, s)
    return _apply(_LogCdfSf, d, s, "both")


def log_cdf(d: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """``log P(X <= loc + d)`` for ``X ~ Cauchy(loc, s)``; see :func:`log_cdf_sf`.

    Args:
        d: displacement ``x - loc``.
        s: scale, broadcastable with ``d``.

    Returns:
        The broadcast log-cdf (``<= 0``) in the working dtype.

    Example:
        >>> import torch
        >>> log_cdf(torch.tensor([0.0]), torch.tensor(2.0))
        tensor([-0.6931])
    """
    d, s = _as_working(d, s)
    return _apply(_LogCdfSf, d, s, "cdf")


def log_sf(d: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """``log P(X > loc + d)`` for ``X ~ Cauchy(loc, s)``; see :func:`log_cdf_sf`.

    Args:
        d: displacement ``x - loc``.
        s: scale, broadcastable with ``d``.

    Returns:
        The broadcast log-survival function (``<= 0``) in the working dtype.

    Example:
        >>> import torch
        >>> log_sf(torch.tensor([1e30]), torch.tensor(1.0))
        tensor([-70.2223])
    """
    d, s = _as_working(d, s)
    return _apply(_LogCdfSf, d, s, "sf")


class _Cdf(torch.autograd.Function):
    """``cdf = atan2(s, -d) / pi`` (``upper``: ``sf = atan2(s, d) / pi``) as a function of ``(d, s)``.

    ``d cdf / dd = p = (s/h) / (pi h)`` and ``d cdf / ds = -(d/h) / (pi h)`` with
    ``h = hypot(d, s)``; ``sf`` has the opposite signs. Written as ratios in ``[-1, 1]`` over
    ``h`` they neither overflow nor become NaN at ``d = +-inf`` (where both are 0), unlike
    autograd through ``atan2`` (``inf / inf``).
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(d: torch.Tensor, s: torch.Tensor, upper: bool) -> torch.Tensor:
        if upper:
            return torch.atan2(s, d).mul_(_INV_PI)
        if not _fast_paths():
            return torch.atan2(s, -d).mul_(_INV_PI)
        out = torch.neg(d.expand(_broadcast_shape(d.shape, s.shape)))  # one fresh tensor
        return torch.atan2(s, out, out=out).mul_(_INV_PI)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        d, s, ctx.upper = inputs
        ctx.save_for_backward(d, s)
        ctx.save_for_forward(d, s)

    @staticmethod
    def _partials(ctx: Any, d: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.hypot(d, s)
        sign = -_INV_PI if ctx.upper else _INV_PI
        u = torch.copysign(_unit_ratio(d.abs(), h), d)
        return (s / h) / h * sign, u / h * -sign

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        d, s = ctx.saved_tensors
        p_d, p_s = _Cdf._partials(ctx, d, s)
        grad_d = grad_s = None
        if ctx.needs_input_grad[0]:
            grad_d = _reduce_to(grad * p_d, d)
        if ctx.needs_input_grad[1]:
            grad_s = _reduce_to(grad * p_s, s)
        return grad_d, grad_s, None

    @staticmethod
    def tangent(
        ctx: Any, t_d: torch.Tensor | None, t_s: torch.Tensor | None, _: None
    ) -> torch.Tensor:
        d, s = ctx.saved_tensors
        p_d, p_s = _Cdf._partials(ctx, d, s)
        return _tangent(torch.broadcast_shapes(p_d.shape, p_s.shape), (t_d, p_d), (t_s, p_s))


def cdf(d: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """``P(X <= loc + d) = atan2(s, -d) / pi`` (no cancellation in the left tail).

    The gradients are finite everywhere ``s > 0``, ``d = +-inf`` included (both are 0 there).

    Args:
        d: displacement ``x - loc``.
        s: scale, broadcastable with ``d``; ``s = 0`` gives the step ``1[d >= 0]``.

    Returns:
        The broadcast cdf in the working dtype.

    Example:
        >>> import torch
        >>> cdf(torch.tensor([-1e30, 0.0]), torch.tensor(1.0))
        tensor([3.1831e-31, 5.0000e-01])
    """
    d, s = _as_working(d, s)
    return _apply(_Cdf, d, s, False)


def sf(d: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """``P(X > loc + d) = atan2(s, d) / pi`` (no cancellation in the right tail).

    The gradients are finite everywhere ``s > 0``, ``d = +-inf`` included (both are 0 there).

    Args:
        d: displacement ``x - loc``.
        s: scale, broadcastable with ``d``; ``s = 0`` gives the step ``1[d < 0]``.

    Returns:
        The broadcast survival function in the working dtype.

    Example:
        >>> import torch
        >>> sf(torch.tensor([1e30]), torch.tensor(1.0))
        tensor([3.1831e-31])
    """
    d, s = _as_working(d, s)
    return _apply(_Cdf, d, s, True)


# ---------------------------------------------------------------------------- standardised


def ovr_log_probs_std(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log P(Z <= z), log P(Z > z))`` for a standard Cauchy ``Z``, both ``<= 0``.

    With ``z = (loc - threshold) / scale`` this is ``(log P, log(1 - P))`` of the one-vs-rest
    probability ``P = P(X > threshold)`` of ``X ~ Cauchy(loc, scale)``.

    Args:
        z: standardised argument.

    Returns:
        Two tensors in the working dtype (float32 for half-precision inputs).

    Example:
        >>> import torch
        >>> ovr_log_probs_std(torch.tensor([0.0]))
        (tensor([-0.6931]), tensor([-0.6931]))
    """
    (z,) = _as_working(z)
    return _apply(_LogCdfSf, z, z.new_ones(()), "both")


def log_cdf_std(z: torch.Tensor) -> torch.Tensor:
    """``log(1/2 + atan(z)/pi)``, accurate in the far left tail and near 1.

    Example:
        >>> import torch
        >>> log_cdf_std(torch.tensor([-1e30]))
        tensor([-70.2223])
    """
    (z,) = _as_working(z)
    return _apply(_LogCdfSf, z, z.new_ones(()), "cdf")


def log_sf_std(z: torch.Tensor) -> torch.Tensor:
    """``log(1/2 - atan(z)/pi)``, accurate in the far right tail and near 1.

    Example:
        >>> import torch
        >>> log_sf_std(torch.tensor([1e30]))
        tensor([-70.2223])
    """
    (z,) = _as_working(z)
    return _apply(_LogCdfSf, z, z.new_ones(()), "sf")


def log_tail_std(a: torch.Tensor) -> torch.Tensor:
    """``log(atan2(1, a) / pi)`` for ``a >= 0``: the log of the smaller tail probability.

    Example:
        >>> import torch
        >>> log_tail_std(torch.tensor([0.0]))
        tensor([-0.6931])
    """
    return log_sf_std(a.abs())


def cdf_std(z: torch.Tensor) -> torch.Tensor:
    """``1/2 + atan(z)/pi`` computed as ``atan2(1, -z)/pi`` (no cancellation in the left tail).

    Example:
        >>> import torch
        >>> cdf_std(torch.tensor([0.0]))
        tensor([0.5000])
    """
    (z,) = _as_working(z)
    return _apply(_Cdf, z, z.new_ones(()), False)


def sf_std(z: torch.Tensor) -> torch.Tensor:
    """``1/2 - atan(z)/pi`` computed as ``atan2(1, z)/pi``.

    Example:
        >>> import torch
        >>> sf_std(torch.tensor([0.0]))
        tensor([0.5000])
    """
    (z,) = _as_working(z)
    return _apply(_Cdf, z, z.new_ones(()), True)


# ---------------------------------------------------------------------------- quantile


def _quantile_general(q: torch.Tensor) -> torch.Tensor:
    """The standard quantile as functional ops (autograd, tracing, other devices); NaN outside
    ``[0, 1]``. The same formula as :func:`_quantile_block`."""
    p = torch.minimum(q, 1.0 - q)
    a = torch.minimum(p, 0.5 - p)
    t = torch.tan(a * math.pi)
    m = (p < 0.25).to(q.dtype)
    one = torch.ones((), dtype=q.dtype, device=q.device)
    z = torch.copysign(torch.lerp(t, one, m) / torch.lerp(one, t, m), q - 0.5)
    inside = (q >= 0) & (q <= 1)
    return torch.where(inside, z, torch.full((), math.nan, dtype=q.dtype, device=q.device))


def _quantile_block(
    q: torch.Tensor,
    loc: torch.Tensor | None,
    scale: torch.Tensor | None,
    out: torch.Tensor,
    p: torch.Tensor,
    m: torch.Tensor,
    t: torch.Tensor,
) -> None:
    """``out = loc + scale z(q)`` (``z(q)`` alone without ``loc``) in place, for ``q`` in ``[0, 1]``.

    ``p``, ``m``, ``t`` are scratch buffers of ``out``'s shape. Twelve in-place passes, one
    ``tan``, no ``torch.where`` (see :func:`icdf`).
    """
    one = torch.ones((), dtype=out.dtype, device=out.device)
    half = torch.full((), 0.5, dtype=out.dtype, device=out.device)
    torch.sub(one, q, out=p)  # 1 - q: exact for q >= 1/2
    torch.minimum(q, p, out=p)  # p = min(q, 1 - q), the tail probability, exact
    torch.lt(p, 0.25, out=m)  # m = 1 in the tails, 0 in the centre
    torch.sub(half, p, out=t)  # 1/2 - p: exact for p >= 1/4
    torch.minimum(p, t, out=t)  # a = min(p, 1/2 - p) in [0, 1/4], exact
    t.mul_(math.pi).tan_()  # tan(pi a) in [0, 1]
    torch.lerp(t, one, m, out=p)  # numerator: t in the centre, 1 in the tails
    torch.lerp(one, t, m, out=t)  # denominator: 1 in the centre, t in the tails
    p.div_(t)  # |z|: tan(pi a) or cot(pi a) (inf where q is 0 or 1)
    torch.sub(q, half, out=t)  # the side: q - 1/2 < 0 below the median (q = -0.0 included)
    if loc is None or scale is None:
        torch.copysign(p, t, out=out)
        return
    torch.copysign(p, t, out=p)
    torch.addcmul(loc, scale, p, out=out)


def _quantile_fast_ok(q: torch.Tensor, scale: torch.Tensor | None) -> bool:
    """CPU eager only: every ``q`` in ``[0, 1]`` (no NaN) and every ``scale > 0`` (one reduction
    each, no device sync); then no NaN and no ``0 * inf`` needs fixing and the blocked in-place
    kernel runs. Always False while a graph is captured or under a ``torch.func`` transform."""
    if not _fast_paths() or q.device.type != "cpu" or q.numel() == 0:
        return False
    lo, hi = torch.aminmax(q.detach())
    if not (float(lo) >= 0.0 and float(hi) <= 1.0):  # False for NaN
        return False
    return scale is None or scale.numel() == 0 or float(scale.detach().amin()) > 0.0


def icdf(
    q: torch.Tensor, loc: torch.Tensor | None = None, scale: torch.Tensor | None = None
) -> torch.Tensor:
    """Cauchy quantile ``loc + scale tan(pi (q - 1/2))``, exact infinities at ``q = 0`` and ``1``.

    With the tail probability ``p = min(q, 1 - q)`` (exact: ``1 - q`` is exact for ``q >= 1/2``)
    and ``a = min(p, 1/2 - p)`` in ``[0, 1/4]`` (exact: ``1/2 - p`` is exact for ``p >= 1/4``),
    ``|z| = tan(pi a)`` in the centre (``p >= 1/4``) and ``cot(pi a) = 1/tan(pi a)`` in the tails,
    with the sign of ``q - 1/2``. The argument of the one ``tan`` is always an exact reduced
    number, so ``z`` is within 3 ulp for every normal ``q`` (2.0 measured in float32 against mpmath;
    a subnormal ``q`` adds the relative spacing ``2**-149 / q`` of ``pi q``, and
    ``tan(pi (q - 1/2))`` itself is ``-2.3e7`` at ``q = 1`` in float32: wrong sign, not ``+inf``),
    and ``q = 0`` (also ``-0.0``) gives ``-inf``,
    ``q = 1`` gives ``+inf``. The centre/tail choice is an exact 0/1 weight in two ``lerp`` (a
    ratio ``num / den`` that is ``t / 1`` or ``1 / t``), not ``torch.where``.

    On the CPU without gradients the result is computed in place, in row blocks of about
    :data:`BLOCK_ELEMENTS` whose scratch buffers stay in cache (one fresh tensor, the result). A
    ``q`` outside ``[0, 1]``, a NaN, a zero ``scale``, gradients, a graph capture or another
    device take the functional path (same formula, NaN outside ``[0, 1]``, and ``+-inf`` for a
    point mass at ``q`` in ``{0, 1}`` where ``0 * inf`` would be NaN).

    Args:
        q: probabilities in ``[0, 1]``; NaN outside.
        loc: location, broadcastable with ``q`` (None: the standard quantile ``z`` alone).
        scale: scale ``>= 0``, broadcastable (None with ``loc`` None).

    Returns:
        The broadcast quantiles in the working dtype of the inputs (float32 for half precision).

    Example:
        >>> import torch
        >>> icdf(torch.tensor([0.0, 0.75, 1.0]), torch.tensor(2.0), torch.tensor(3.0))
        tensor([-inf, 5., inf])
    """
    if (loc is None) != (scale is None):
        raise ValueError("icdf: give both loc and scale, or neither")
    if loc is None or scale is None:
        (q,) = _as_working(q)
        tensors = [q]
        shape = q.shape
    else:
        q, loc, scale = _as_working(q, loc, scale)
        tensors = [q, loc, scale]
        shape = _broadcast_shape(q.shape, loc.shape, scale.shape)
    wants_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
    if wants_grad or len(shape) == 0 or _forward_ad_active() or not _quantile_fast_ok(q, scale):
        z = _quantile_general(q)
        if loc is None or scale is None:
            return z
        out = torch.addcmul(loc, scale, z)  # as the fast path: loc + scale z
        # a point mass (scale 0) has 0 * inf = NaN at q in {0, 1}: its quantiles are z there
        return torch.where(torch.isinf(z), z.expand_as(out), out)
    out = torch.empty(shape, dtype=q.dtype, device=q.device)
    inputs = [x.expand(shape) for x in tensors]
    rows = _block_rows(shape) or shape[0]
    scratch = [out.new_empty((min(rows, shape[0]), *shape[1:])) for _ in range(3)]
    for start in range(0, shape[0], rows):
        stop = min(start + rows, shape[0])
        xs = [x[start:stop] for x in inputs]
        loc_b, scale_b = (xs[1], xs[2]) if len(xs) == 3 else (None, None)
        buffers = (b[: stop - start] for b in scratch)
        _quantile_block(xs[0], loc_b, scale_b, out[start:stop], *buffers)
    return out


def icdf_std(q: torch.Tensor) -> torch.Tensor:
    """The standard Cauchy quantile ``tan(pi (q - 1/2))`` with exact infinities at 0 and 1.

    :func:`icdf` with ``loc = 0`` and ``scale = 1`` (see there for the exact range reduction):
    ``-inf`` at ``q = 0`` (``-0.0`` included) and ``+inf`` at ``q = 1`` instead of a large finite
    number of the wrong sign (``tan(pi (1 - 1/2))`` in floating point is ``-2.3e7``, not
    ``+inf``), within 3 ulp elsewhere (normal ``q``).

    Args:
        q: probabilities in ``[0, 1]``; NaN outside.

    Returns:
        Quantiles in the working dtype.

    Example:
        >>> import torch
        >>> icdf_std(torch.tensor([-0.0, 0.0, 0.5, 1.0]))
        tensor([-inf, -inf, 0., inf])
    """
    return icdf(q)


# ---------------------------------------------------------------------------- sampling


def standard_cauchy(
    shape: Sequence[int] | torch.Size,
    like: torch.Tensor,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Standard Cauchy draws via the exact quantile of a float64 uniform on the open interval.

    Args:
        shape: the shape of the draws.
        like: a tensor whose device and dtype the draws take.
        generator: optional ``torch.Generator``.

    Returns:
        ``tan(pi (u - 1/2))`` for ``u ~ Uniform(0, 1)`` in float64 (clamped away from 0 and 1,
        so every draw is finite in float64), cast to ``like.dtype``.

    Example:
        >>> import torch
        >>> standard_cauchy((2, 3), torch.zeros(1), torch.Generator().manual_seed(0)).shape
        torch.Size([2, 3])
    """
    u = torch.rand(torch.Size(shape), dtype=torch.float64, device=like.device, generator=generator)
    u = u.clamp(2.0**-60, 1.0 - 2.0**-53)
    return icdf_std(u).to(like.dtype)


# ---------------------------------------------------------------------------- KL divergence


class _CauchyKL(torch.autograd.Function):
    """``KL(C(m1, g1) || C(m2, g2))`` of ``(dm = m1 - m2, g1, g2)``; see :func:`cauchy_kl`."""

    generate_vmap_rule = True

    @staticmethod
    def forward(dm: torch.Tensor, g1: torch.Tensor, g2: torch.Tensor) -> torch.Tensor:
        # r^2 = ((g1 - g2)^2 + dm^2) / (4 g1 g2); r itself from hypot (no overflow of squares).
        den = torch.sqrt(g1).mul(torch.sqrt(g2)).mul_(2.0)
        h = torch.hypot(g1 - g2, dm)
        r = h / den
        small = torch.log1p(torch.square(torch.minimum(r, torch.ones_like(r))))
        # r > 1: log(1 + r^2) = 2 log r + log1p(r^-2); where r overflows (h = 1e30,
        # den = 2e-15 in float32), 2 (log h - log den) instead, with r^-2 below an ulp.
        finite = torch.isfinite(r)
        rf = torch.where(r > 1.0, r, 2.0)
        large = torch.where(
            finite,
            2.0 * torch.log(rf) + torch.log1p(torch.reciprocal(rf).square()),
            2.0 * (torch.log(h) - torch.log(den)),
        )
        return torch.where(r > 1.0, large, small)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def _partials(
        dm: torch.Tensor, g1: torch.Tensor, g2: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # With D = (g1 + g2)^2 + dm^2 = h^2 and a = (g1 - g2)/h, b = dm/h, c = (g1 + g2)/h (all in
        # [-1, 1]): dKL/ddm = 2 b / h, dKL/dg1 = (a c - b^2) / g1, dKL/dg2 = (-a c - b^2) / g2.
        # Every one is 0 at p == q (a = b = 0), where autograd through hypot would give 0/0.
        h = torch.hypot(g1 + g2, dm)
        a = (g1 - g2) / h
        b = dm / h
        c = (g1 + g2) / h
        ac = a * c
        bb = b * b
        return 2.0 * b / h, (ac - bb) / g1, (-ac - bb) / g2

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        dm, g1, g2 = ctx.saved_tensors
        p_dm, p_g1, p_g2 = _CauchyKL._partials(dm, g1, g2)
        grad_dm = grad_g1 = grad_g2 = None
        if ctx.needs_input_grad[0]:
            grad_dm = _reduce_to(grad * p_dm, dm)
        if ctx.needs_input_grad[1]:
            grad_g1 = _reduce_to(grad * p_g1, g1)
        if ctx.needs_input_grad[2]:
            grad_g2 = _reduce_to(grad * p_g2, g2)
        return grad_dm, grad_g1, grad_g2

    @staticmethod
    def tangent(
        ctx: Any, t_dm: torch.Tensor | None, t_g1: torch.Tensor | None, t_g2: torch.Tensor | None
    ) -> torch.Tensor:
        dm, g1, g2 = ctx.saved_tensors
        p_dm, p_g1, p_g2 = _CauchyKL._partials(dm, g1, g2)
        return _tangent(p_dm.shape, (t_dm, p_dm), (t_g1, p_g1), (t_g2, p_g2))


def cauchy_kl(
    m1: torch.Tensor, g1: torch.Tensor, m2: torch.Tensor, g2: torch.Tensor
) -> torch.Tensor:
    r"""Element-wise ``KL(Cauchy(m1, g1) || Cauchy(m2, g2))``, the one Cauchy-KL kernel.

    .. math::

        \mathrm{KL} = \log\frac{(g_1 + g_2)^2 + (m_1 - m_2)^2}{4 g_1 g_2}
        = \log\big(1 + r^2\big),\qquad
        r = \frac{\operatorname{hypot}(g_1 - g_2,\ m_1 - m_2)}{2 \sqrt{g_1} \sqrt{g_2}}.

    ``log1p(r^2)`` for ``r <= 1`` (never negative, exactly 0 for equal laws, full relative
    accuracy near 0), ``2 log r + log1p(r^-2)`` for ``r > 1``, and ``2 (log hypot - log den)``
    where ``r`` itself overflows, so float32 gives 205.8464 at ``p = (1e30, 1e-15)``,
    ``q = (0, 1e-15)``. The derivatives are written by hand as bounded ratios: finite everywhere
    ``g1, g2 > 0`` and exactly 0 at ``p == q``.

    Args:
        m1: location of ``p``.
        g1: scale of ``p`` (``> 0``).
        m2: location of ``q``.
        g2: scale of ``q`` (``> 0``); all four broadcast.

    Returns:
        The broadcast divergences (``>= 0``) in the working dtype (float32 for half inputs).

    Example:
        >>> import torch
        >>> one, zero = torch.tensor(1.0), torch.tensor(0.0)
        >>> cauchy_kl(zero, one, torch.tensor(2.0), one)  # log(8 / 4)
        tensor(0.6931)
        >>> cauchy_kl(torch.tensor(1e30), torch.tensor(1e-15), zero, torch.tensor(1e-15))
        tensor(205.8464)
    """
    m1, g1, m2, g2 = _as_working(m1, g1, m2, g2)
    dm = m1 - m2
    dm, g1, g2 = torch.broadcast_tensors(dm, g1, g2)
    if _needs_function(dm, g1, g2):
        return _function_for(_CauchyKL).apply(dm, g1, g2)
    return _CauchyKL.forward(dm, g1, g2)


# Each Function with its forward-mode rule installed (see _with_jvp).
_JVP: dict[type[torch.autograd.Function], type[torch.autograd.Function]] = {
    fn: _with_jvp(fn) for fn in (_LogPdf, _LogCdfSf, _Cdf, _CauchyKL)
}
