"""Numerically stable special functions of the standard Cauchy law.

Every function here takes the *standardised* argument ``z = (x - loc) / scale`` and works in
``float32`` or ``float64`` (``bfloat16`` and ``float16`` are promoted to ``float32`` by
:func:`working_dtype`). The identities used are the ones in the notation page of the docs:

* ``cdf(z) = 1/2 + atan(z)/pi = atan2(1, -z)/pi``; the smaller tail is
  ``t(|z|) = atan2(1, |z|)/pi <= 1/2``, which is accurate to an ulp for every ``z``.
* ``log cdf(z) = log t(|z|)`` for ``z <= 0`` and ``log1p(-t(|z|))`` for ``z > 0`` (and the
  mirror for ``log sf``), so neither branch ever rounds ``1 - tiny``.
* ``log t(a) = -log(a) - log(pi)`` to within ``a**-2 / 3`` relative error once ``a`` is huge,
  which keeps the result exact where ``atan2(1, a)`` would be subnormal.
* ``log1p(z**2)`` is evaluated as ``2 log|z| + log1p(z**-2)`` for ``|z| > 1`` so that it never
  overflows.

The derivatives are written by hand (``torch.autograd.Function``) because autograd through
``abs`` would give a zero gradient at ``z = 0`` and through ``z**2`` an overflow in the tails.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "LOG_PI",
    "cdf_std",
    "icdf_std",
    "log1p_square",
    "log_cdf_std",
    "log_pdf_std",
    "log_sf_std",
    "log_tail_std",
    "ovr_log_probs_std",
    "sf_std",
    "working_dtype",
]

LOG_PI = math.log(math.pi)
# Past this |z| the tail probability atan2(1, |z|)/pi is replaced by its asymptote 1/(pi |z|);
# the relative error of that replacement is below |z|**-2 / 3 < 1e-38.
_HUGE = 1.0e19


def working_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """The dtype used internally: float64 stays, everything else computes in float32."""
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.dtype == torch.float64:
            return torch.float64
    return torch.float32


def log1p_square(z: torch.Tensor) -> torch.Tensor:
    """``log(1 + z**2)`` without overflow for any finite or infinite ``z``."""
    az = z.abs()
    big = az > 1.0
    # For |z| > 1: log(z^2 (1 + z^-2)) = 2 log|z| + log1p(z^-2); z^-2 cannot overflow there.
    safe_big = torch.where(big, az, torch.ones_like(az))
    safe_small = torch.where(big, torch.zeros_like(az), az)
    return torch.where(
        big,
        2.0 * torch.log(safe_big) + torch.log1p(safe_big.reciprocal().square()),
        torch.log1p(safe_small.square()),
    )


def log_pdf_std(z: torch.Tensor) -> torch.Tensor:
    """``log p(z) = -log(pi) - log(1 + z**2)`` of the standard Cauchy density."""
    return -LOG_PI - log1p_square(z)


def _tail_and_log_tail(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``t = atan2(1, a)/pi`` and ``log t`` for ``a >= 0``: the smaller tail probability.

    ``t`` is computed directly (never through ``exp(log t)``, which would turn the absolute error
    of ``log t`` into a relative error of ``t``); ``log t`` switches to ``-log(a) - log(pi)`` once
    ``t`` could be subnormal.
    """
    huge = a > _HUGE
    a_mod = torch.where(huge, torch.ones_like(a), a)
    a_huge = torch.where(huge, a, torch.ones_like(a))
    t = torch.atan2(torch.ones_like(a), a) / math.pi
    log_t = torch.where(
        huge,
        -torch.log(a_huge) - LOG_PI,
        torch.log(torch.atan2(torch.ones_like(a_mod), a_mod) / math.pi),
    )
    return t, log_t


def log_tail_std(a: torch.Tensor) -> torch.Tensor:
    """``log(atan2(1, a) / pi)`` for ``a >= 0``: the log of the smaller tail probability."""
    return _tail_and_log_tail(a)[1]


def _pdf_over_tails(a: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``p(a)/t(a)`` and ``p(a)/(1 - t(a))`` for ``a >= 0`` without overflow or underflow of ``a**2``.

    For ``a > 1`` with ``w = 1/a``: ``p = w**2 / (pi (1 + w**2))`` and
    ``p/t = w / ((1 + w**2) * atan(w)/w)``, whose last factor is 1 to working precision for tiny w.
    """
    big = a > 1.0
    w = torch.where(big, a.reciprocal(), torch.ones_like(a))
    a_small = torch.where(big, torch.zeros_like(a), a)
    w2 = w.square()
    atan_ratio = torch.where(w > 0, torch.atan(w) / torch.where(w > 0, w, torch.ones_like(w)), 1.0)
    pdf = torch.where(big, w2 / (math.pi * (1.0 + w2)), 1.0 / (math.pi * (1.0 + a_small.square())))
    ratio_small = torch.where(big, w / ((1.0 + w2) * atan_ratio), pdf / t)
    ratio_large = pdf / (1.0 - t)
    return ratio_small, ratio_large


def _log_pair_forward(
    z: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    a = z.abs()
    t, log_small = _tail_and_log_tail(a)
    # log(1 - t) with t <= 1/2 computed directly: log1p keeps full relative accuracy.
    log_large = torch.log1p(-t)
    positive = z > 0
    log_cdf = torch.where(positive, log_large, log_small)
    log_sf = torch.where(positive, log_small, log_large)
    return log_cdf, log_sf, t


class _LogCdfSf(torch.autograd.Function):
    """``(log cdf(z), log sf(z))`` with exact, finite, correctly signed derivatives.

    ``d/dz log cdf = p(z)/cdf(z)`` and ``d/dz log sf = -p(z)/sf(z)``; the ratios are evaluated by
    :func:`_pdf_over_tails` so that neither overflows nor loses its sign in the tails.
    """

    @staticmethod
    def forward(ctx, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ANN001
        log_cdf, log_sf, t = _log_pair_forward(z)
        ctx.save_for_backward(z, t)
        return log_cdf, log_sf

    @staticmethod
    def backward(ctx, grad_cdf: torch.Tensor, grad_sf: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
        z, t = ctx.saved_tensors
        ratio_small, ratio_large = _pdf_over_tails(z.abs(), t)
        positive = z > 0
        # z > 0: cdf is the large side, sf the small one; z <= 0: the other way round.
        d_log_cdf = torch.where(positive, ratio_large, ratio_small)
        d_log_sf = -torch.where(positive, ratio_small, ratio_large)
        grad = torch.zeros_like(z)
        if grad_cdf is not None:
            grad = grad + grad_cdf * d_log_cdf
        if grad_sf is not None:
            grad = grad + grad_sf * d_log_sf
        return grad


def _promote(z: torch.Tensor) -> tuple[torch.Tensor, torch.dtype]:
    out_dtype = z.dtype if z.is_floating_point() else torch.get_default_dtype()
    return z.to(working_dtype(z)), out_dtype


def ovr_log_probs_std(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log P(Z <= z), log P(Z > z))`` for a standard Cauchy ``Z``, both ``<= 0``.

    With ``z = (loc - threshold) / scale`` this is ``(log P, log(1 - P))`` of the one-vs-rest
    probability ``P = P(X > threshold)`` of ``X ~ Cauchy(loc, scale)``.
    The result is in the working dtype (float32 for half-precision inputs).
    """
    zw, _ = _promote(z)
    return _LogCdfSf.apply(zw)


def log_cdf_std(z: torch.Tensor) -> torch.Tensor:
    """``log(1/2 + atan(z)/pi)``, accurate in the far left tail and near 1."""
    return ovr_log_probs_std(z)[0]


def log_sf_std(z: torch.Tensor) -> torch.Tensor:
    """``log(1/2 - atan(z)/pi)``, accurate in the far right tail and near 1."""
    return ovr_log_probs_std(z)[1]


def cdf_std(z: torch.Tensor) -> torch.Tensor:
    """``1/2 + atan(z)/pi`` computed as ``atan2(1, -z)/pi`` (no cancellation in the left tail)."""
    zw, _ = _promote(z)
    return torch.atan2(torch.ones_like(zw), -zw) / math.pi


def sf_std(z: torch.Tensor) -> torch.Tensor:
    """``1/2 - atan(z)/pi`` computed as ``atan2(1, z)/pi``."""
    zw, _ = _promote(z)
    return torch.atan2(torch.ones_like(zw), zw) / math.pi


def icdf_std(q: torch.Tensor) -> torch.Tensor:
    """The standard Cauchy quantile ``tan(pi (q - 1/2))`` with exact infinities at 0 and 1.

    Three branches keep every step exact or well conditioned: ``q - 1/2`` is exact on
    ``[1/4, 3/4]`` (Sterbenz), and in the tails ``-1/tan(pi q)`` and ``1/tan(pi (1 - q))`` give
    ``-inf`` at ``q = 0`` and ``+inf`` at ``q = 1`` instead of a large finite number of the wrong
    sign.
    """
    qw, _ = _promote(q)
    low = qw < 0.25
    high = qw > 0.75
    mid_arg = torch.where(low | high, torch.zeros_like(qw), qw - 0.5)
    low_arg = torch.where(low, qw, torch.full_like(qw, 0.25))
    high_arg = torch.where(high, 1.0 - qw, torch.full_like(qw, 0.25))
    return torch.where(
        low,
        -torch.tan(math.pi * low_arg).reciprocal(),
        torch.where(high, torch.tan(math.pi * high_arg).reciprocal(), torch.tan(math.pi * mid_arg)),
    )
