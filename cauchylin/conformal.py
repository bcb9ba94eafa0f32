r"""Split-conformal widths for Cauchy predictive intervals.

A model predicts ``Y ~ Cauchy(loc, scale)``; its central interval of coverage ``c`` is
``loc ± tan(pi c / 2) scale``. That is right at every level only if the errors are Cauchy: for
light-tailed errors no Cauchy is right at 50% and 90% at once (its 90%/50% half-width ratio is
``tan(0.45 pi) / tan(0.25 pi) = 6.31``, a Gaussian's 2.44). Split-conformal calibration replaces
``tan(pi c / 2)`` by a width fitted on ``n`` rows that the model was not fitted on:

.. math::

    r_i = |t_i - \mathrm{loc}_i| / \mathrm{scale}_i, \qquad
    q(c) = r_{(\lceil (n + 1) c \rceil)},

the ``ceil((n + 1) c)``-th smallest score (``+inf`` when that exceeds ``n``). For a new row
exchangeable with the calibration rows, ``P(|t - loc| <= q(c) scale) >= c`` whatever the law of
the errors (and ``< c + 1/(n + 1)`` when the scores have no ties): the finite-sample guarantee of
split conformal prediction (Vovk et al., *Algorithmic Learning in a Random World*; Lei et al.,
2018). The scores are the model's errors in units of its own scale, so the intervals keep the
model's row-to-row widths (the normalised score of conformalized quantile regression).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from cauchylin._validation import auto_or_share, check_finite, require_tensor

__all__ = [
    "CALIBRATION_FRACTION",
    "MAX_CALIBRATION_ROWS",
    "MIN_ROWS_TO_CALIBRATE",
    "calibration_holdout",
    "conformal_quantile",
    "conformal_widths",
    "interval_score",
    "normalised_scores",
]

CALIBRATION_FRACTION = 0.2
"""The share of the training rows that ``calibration="auto"`` holds out to calibrate on."""

MAX_CALIBRATION_ROWS = 2000
"""The most rows ``"auto"`` (or a share) holds out: enough for every calibrated level."""

MIN_ROWS_TO_CALIBRATE = 100
"""With fewer training rows ``"auto"`` holds none out (20 rows would calibrate little and cost a
fifth of the data)."""


def conformal_quantile(scores: torch.Tensor, level: float) -> torch.Tensor:
    """The split-conformal quantile: the ``ceil((n + 1) level)``-th smallest of ``n`` scores.

    Args:
        scores: ``[n]`` conformity scores (``n >= 1``; NaN is refused).
        level: the coverage ``c`` in ``(0, 1)``.

    Returns:
        A 0-d tensor: that order statistic, or ``+inf`` when ``ceil((n + 1) c) > n`` (too few
        scores for the level: no finite width has the guarantee).

    Raises:
        ValueError: an empty or non-1-D tensor, NaN scores, or a level outside ``(0, 1)``.

    Example:
        >>> import torch
        >>> s = torch.tensor([0.3, 0.1, 0.9, 0.5])
        >>> float(conformal_quantile(s, 0.5)), float(conformal_quantile(s, 0.9))  # 3rd of 4; 5th
        (0.5, inf)
    """
    s = require_tensor("scores", scores, floating=True)
    if s.ndim != 1 or s.numel() == 0:
        raise ValueError(f"scores must be a non-empty 1-D tensor, got shape {tuple(s.shape)}")
    if bool(torch.isnan(s).any()):
        raise ValueError("scores must not hold NaN")
    c = float(level)
    if not 0.0 < c < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    n = s.numel()
    rank = math.ceil((n + 1) * c - 1e-12)  # 1-based; the tolerance keeps (n + 1) c = integer
    if rank > n:
        return torch.tensor(math.inf, dtype=s.dtype, device=s.device)
    return torch.kthvalue(s, rank).values


def normalised_scores(
    targets: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor
) -> torch.Tensor:
    """The conformity scores ``|t - loc| / scale`` of a location-scale predictive.

    Args:
        targets: ``[n]`` the observed values.
        loc: ``[n]`` predicted locations.
        scale: ``[n]`` predicted scales, positive.

    Returns:
        ``[n]`` scores, float64.

    Raises:
        ValueError: shapes that differ, non-finite values or a scale that is not positive.

    Example:
        >>> import torch
        >>> normalised_scores(torch.tensor([1.0, 4.0]), torch.tensor([0.0, 0.0]),
        ...                   torch.tensor([2.0, 2.0])).tolist()
        [0.5, 2.0]
    """
    t = require_tensor("targets", targets, floating=True).double()
    m = require_tensor("loc", loc, floating=True).double()
    g = require_tensor("scale", scale, floating=True).double()
    if not (t.shape == m.shape == g.shape):
        raise ValueError(
            f"targets, loc and scale must have one shape, got {tuple(t.shape)}, "
            f"{tuple(m.shape)}, {tuple(g.shape)}"
        )
    for name, x in (("targets", t), ("loc", m), ("scale", g)):
        check_finite(name, x)
    if bool((g <= 0).any()):
        raise ValueError("scale must be positive")
    return (t - m).abs() / g


def conformal_widths(
    targets: torch.Tensor,
    loc: torch.Tensor,
    scale: torch.Tensor,
    levels: Sequence[float],
) -> torch.Tensor:
    """The split-conformal widths ``q(c)`` of a Cauchy (or any location-scale) predictive.

    Args:
        targets: ``[n]`` calibration values (rows the model was not fitted on).
        loc: ``[n]`` the model's locations at those rows.
        scale: ``[n]`` its scales.
        levels: the coverages ``c``, each in ``(0, 1)``.

    Returns:
        ``[L]`` float64 widths in units of ``scale`` (``+inf`` where ``n`` is too small for the
        level): the calibrated interval of coverage ``c`` is ``loc ± q(c) scale``.

    Raises:
        ValueError: as :func:`normalised_scores` and :func:`conformal_quantile`.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> t = torch.randn(999, generator=g, dtype=torch.float64)  # Gaussian errors
        >>> q = conformal_widths(t, torch.zeros(999), torch.ones(999), (0.5, 0.9))
        >>> [round(v, 1) for v in q.tolist()]  # the normal's 0.674 and 1.645, not tan's 1 and 6.31
        [0.7, 1.6]
    """
    scores = normalised_scores(targets, loc, scale)
    return torch.stack([conformal_quantile(scores, c) for c in levels])


def interval_score(
    targets: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor, level: float
) -> torch.Tensor:
    r"""The interval score of a central interval (Gneiting and Raftery, 2007), elementwise.

    .. math::

        S_c(l, u; t) = (u - l) + \frac{2}{1 - c}\big[(l - t)_+ + (t - u)_+\big],

    a proper scoring rule for the central interval of coverage ``c``: lower is better; it rewards
    a narrow interval and penalises a miss by its distance.

    Args:
        targets: ``[...]`` observed values.
        lower: ``[...]`` interval starts.
        upper: ``[...]`` interval ends (``>= lower``; an end may be infinite).
        level: ``c`` in ``(0, 1)``.

    Returns:
        ``[...]`` scores (``inf`` for an unbounded interval).

    Raises:
        ValueError: a level outside ``(0, 1)``.

    Example:
        >>> import torch
        >>> interval_score(torch.tensor([0.0, 3.0]), torch.tensor([-1.0, -1.0]),
        ...                torch.tensor([1.0, 1.0]), 0.5).tolist()  # 2; 2 + 4 * 2
        [2.0, 10.0]
    """
    c = float(level)
    if not 0.0 < c < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    below = (lower - targets).clamp(min=0)
    above = (targets - upper).clamp(min=0)
    return (upper - lower) + (2.0 / (1.0 - c)) * (below + above)


def calibration_holdout(count: int, calibration: float | str | None) -> int:
    """How many of ``count`` training rows a ``calibration=...`` setting holds out.

    The one rule of the package's fitting functions (the language model's ``train``, the
    command line, the estimators): the rows held out are never trained on, and the conformal
    widths are fitted on them.

    ``"auto"``: :data:`CALIBRATION_FRACTION` of them, at most :data:`MAX_CALIBRATION_ROWS`,
    when there are at least :data:`MIN_ROWS_TO_CALIBRATE` (else 0); a share in ``(0, 1)``:
    that share (rounded, at most :data:`MAX_CALIBRATION_ROWS`); None or 0: none.

    Args:
        count: the number of training examples.
        calibration: ``"auto"``, a share in ``[0, 1)``, or None.

    Returns:
        The number held out.

    Raises:
        ValueError: another string, a share outside ``[0, 1)``, or a share that would leave no
            example to train on or none to calibrate on.

    Example:
        >>> calibration_holdout(500, "auto"), calibration_holdout(60, "auto"), calibration_holdout(60, 0.5)
        (100, 0, 30)
    """
    setting = auto_or_share("calibration", calibration)
    if setting is None:
        return 0
    if setting == "auto":
        if count < MIN_ROWS_TO_CALIBRATE:
            return 0
        share = CALIBRATION_FRACTION
    else:
        share = float(setting)
    size = min(round(share * count), MAX_CALIBRATION_ROWS)
    if size < 1 or size >= count:
        raise ValueError(
            f"calibration={calibration!r} of {count} training rows holds out {size}: "
            "nothing would be left to train on, or to calibrate on"
        )
    return size
