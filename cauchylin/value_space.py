r"""The space in which the regression value ``Y`` is a Cauchy variable.

The regression head predicts ``Y ~ Cauchy(loc_Y, scale_Y)`` in a *value space* ``t = g(y)`` and
the number itself is ``y = g^{-1}(t)``. Two spaces are offered:

==================  ==========================================  ===============================
name                ``t = g(y)``                                ``y = g^{-1}(t)``
==================  ==========================================  ===============================
``"identity"``      ``y``                                       ``t``
``"signed_log1p"``  ``sign(y) ln(1 + |y|)``                     ``sign(t) (e^{|t|} - 1)``
==================  ==========================================  ===============================

``"signed_log1p"`` is the map that :class:`~cauchylin.nn.NumericEmbedding` uses to read numbers,
so the model reads and writes numbers on one scale: products become sums and a relative error
becomes an absolute one. Because ``g`` is strictly increasing, the quantiles of ``y`` are the
images of the quantiles of ``t``, exactly: ``Q_y(q) = g^{-1}(loc_Y + scale_Y tan(pi (q - 1/2)))``,
so the median of the number is ``g^{-1}(loc_Y)`` and a central interval of ``t`` maps to a central
interval of ``y`` with the same coverage. The Cauchy algebra (linear maps, sums) holds in
``t``-space, where the heads compute.

Both maps are computed in float32 (float64 stays float64) with ``log1p``/``expm1``; ``g^{-1}`` of a
``t`` beyond the float range is ``±inf`` (an unbounded interval end), never NaN.
"""

from __future__ import annotations

import math

import torch

from cauchylin._special import cdf_std, icdf_std
from cauchylin._validation import one_of

__all__ = [
    "IDENTITY",
    "SIGNED_LOG1P",
    "VALUE_SPACES",
    "check_value_space",
    "from_value_space",
    "to_value_space",
    "value_cdf",
    "value_log_density",
    "value_quantiles",
]

IDENTITY = "identity"
"""Regress the numbers as they are: ``t = y``."""

SIGNED_LOG1P = "signed_log1p"
"""Regress ``t = sign(y) ln(1 + |y|)``, the scale on which the numeric embedding reads numbers."""

VALUE_SPACES: tuple[str, ...] = (IDENTITY, SIGNED_LOG1P)
"""The value spaces accepted by :class:`~cauchylin.nn.Action` and the Hugging Face config."""


def check_value_space(value_space: str) -> str:
    """Return ``value_space`` if it is one of :data:`VALUE_SPACES`.

    Args:
        value_space: the name to check.

    Returns:
        The name, unchanged.

    Raises:
        ValueError: an unknown name (the message lists the known ones).

    Example:
        >>> check_value_space("signed_log1p")
        'signed_log1p'
    """
    return str(one_of("value_space", value_space, VALUE_SPACES))


def _float(x: torch.Tensor) -> torch.Tensor:
    return x if x.dtype == torch.float64 else x.float()


def to_value_space(y: torch.Tensor, value_space: str) -> torch.Tensor:
    """``t = g(y)``: numbers to the space the regression head predicts in.

    Args:
        y: ``[...]`` numbers (any real dtype; half precision and integers compute in float32).
        value_space: one of :data:`VALUE_SPACES`.

    Returns:
        ``[...]`` float32 (float64 for float64 input).

    Raises:
        ValueError: an unknown ``value_space``.

    Example:
        >>> import torch
        >>> to_value_space(torch.tensor([-99.0, 0.0, 0.5, 1e6]), "signed_log1p")
        tensor([-4.6052,  0.0000,  0.4055, 13.8155])
    """
    check_value_space(value_space)
    y = _float(y)
    if value_space == IDENTITY:
        return y
    return torch.sign(y) * torch.log1p(y.abs())


def from_value_space(t: torch.Tensor, value_space: str) -> torch.Tensor:
    """``y = g^{-1}(t)``: back from the regression space to numbers.

    Args:
        t: ``[...]`` values in the regression space (``±inf`` allowed: interval ends).
        value_space: one of :data:`VALUE_SPACES`.

    Returns:
        ``[...]`` float32 (float64 for float64 input); ``±inf`` beyond the float range.

    Raises:
        ValueError: an unknown ``value_space``.

    Example:
        >>> import torch
        >>> t = to_value_space(torch.tensor([-99.0, 0.0, 0.5, 1e6]), "signed_log1p")
        >>> from_value_space(t, "signed_log1p")
        tensor([-9.9000e+01,  0.0000e+00,  5.0000e-01,  1.0000e+06])
        >>> from_value_space(torch.tensor([float("-inf"), 200.0]), "signed_log1p")
        tensor([-inf, inf])
    """
    check_value_space(value_space)
    t = _float(t)
    if value_space == IDENTITY:
        return t
    return torch.sign(t) * torch.expm1(t.abs())


def value_quantiles(
    loc: torch.Tensor, scale: torch.Tensor, q: torch.Tensor | float, value_space: str
) -> torch.Tensor:
    r"""Quantiles of the number ``y = g^{-1}(t)`` for ``t ~ Cauchy(loc, scale)``.

    ``Q_y(q) = g^{-1}(loc + scale tan(pi (q - 1/2)))``, exact because ``g`` is increasing; the
    Cauchy quantile uses the library's exact ``icdf`` (``q = 0`` and ``1`` give ``∓inf``).

    Args:
        loc: ``[...]`` ``loc_Y`` in the regression space.
        scale: ``[...]`` ``scale_Y > 0``.
        q: probabilities in ``[0, 1]``, a float or a tensor broadcastable with ``loc``.
        value_space: one of :data:`VALUE_SPACES`.

    Returns:
        The quantiles in the numbers' units, of the broadcast shape.

    Raises:
        ValueError: an unknown ``value_space`` or ``q`` outside ``[0, 1]``.

    Example:
        >>> import torch
        >>> loc, scale = torch.tensor([4.0]), torch.tensor([0.1])
        >>> lo, mid, hi = (value_quantiles(loc, scale, q, "signed_log1p") for q in (0.25, 0.5, 0.75))
        >>> round(mid.item(), 3), round(lo.item(), 3), round(hi.item(), 3)  # e^4 - 1, e^3.9 - 1, ...
        (53.598, 48.402, 59.34)
    """
    check_value_space(value_space)
    q_t = torch.as_tensor(q, dtype=torch.float64 if loc.dtype == torch.float64 else torch.float32)
    if bool(((q_t < 0) | (q_t > 1) | torch.isnan(q_t)).any()):
        raise ValueError(f"q must lie in [0, 1], got {q!r}")
    loc, scale = _float(loc), _float(scale)
    t = loc + scale * icdf_std(q_t.to(loc.device, loc.dtype))
    return from_value_space(t, value_space)


def value_log_density(
    y: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor, value_space: str
) -> torch.Tensor:
    r"""``log p(y)`` of the number ``y = g^{-1}(t)`` for ``t ~ Cauchy(loc, scale)``: the log score.

    By the change of variables, ``log p_y(y) = log p_t(g(y)) + log g'(y)`` with the Cauchy
    ``log p_t(t) = -log(pi scale) - log1p(((t - loc) / scale)^2)`` and ``log g'(y) = 0``
    (identity) or ``-log1p(|y|)`` (signed_log1p), so scores of models in different value spaces
    compare in the numbers' own units.

    Args:
        y: ``[...]`` numbers.
        loc: ``loc_Y`` (broadcast with ``y``).
        scale: ``scale_Y > 0`` (broadcast).
        value_space: one of :data:`VALUE_SPACES`.

    Returns:
        The log densities, of the broadcast shape (float32; float64 for float64 input).

    Raises:
        ValueError: an unknown ``value_space``.

    Example:
        >>> import math, torch
        >>> from scipy.stats import cauchy
        >>> y = torch.tensor([9.0], dtype=torch.float64)
        >>> lp = value_log_density(y, torch.tensor(2.0), torch.tensor(0.5), "signed_log1p")
        >>> bool(abs(float(lp) - (cauchy.logpdf(math.log(10.0), 2.0, 0.5) - math.log(10.0))) < 1e-12)
        True
    """
    check_value_space(value_space)
    y = _float(y)
    t = to_value_space(y, value_space)
    loc, scale = loc.to(t.dtype), scale.to(t.dtype)
    z = (t - loc) / scale
    out = -torch.log(math.pi * scale) - torch.log1p(z * z)
    if value_space == SIGNED_LOG1P:
        out = out - torch.log1p(y.abs())
    return out


def value_cdf(
    y: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor, value_space: str
) -> torch.Tensor:
    r"""``P(Y <= y)`` for the number ``Y = g^{-1}(t)``, ``t ~ Cauchy(loc, scale)``: the PIT value.

    ``F(y) = 1/2 + atan((g(y) - loc) / scale) / pi`` (``g`` increasing), computed with the
    library's stable Cauchy CDF. Over held-out numbers of a calibrated predictive these are
    uniform on ``[0, 1]``.

    Args:
        y: ``[...]`` numbers.
        loc: ``loc_Y`` (broadcast with ``y``).
        scale: ``scale_Y > 0`` (broadcast).
        value_space: one of :data:`VALUE_SPACES`.

    Returns:
        Probabilities in ``[0, 1]``, of the broadcast shape.

    Raises:
        ValueError: an unknown ``value_space``.

    Example:
        >>> import torch
        >>> value_cdf(torch.tensor([0.0, 53.598]), torch.tensor(4.0), torch.tensor(0.1), "signed_log1p")
        tensor([0.0080, 0.5000])
    """
    check_value_space(value_space)
    t = to_value_space(y, value_space)
    loc, scale = loc.to(t.dtype), scale.to(t.dtype)
    return cdf_std((t - loc) / scale)
