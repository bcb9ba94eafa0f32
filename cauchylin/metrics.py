"""Monitoring metrics of the layers and of predicted numbers, as plain functions over tensors.

* the individual representation ``U`` and the class scores: :func:`distribution_stats` (mean,
  median, standard deviation, IQR of ``loc_U`` or ``scale_U`` over the valid positions),
  :func:`ovr_prob_sums` and :func:`ovr_prob_sum_median` (how far ``sum_k P_k`` is from 1);
* predicted numbers against the truth: :func:`rank_correlation` (Spearman),
  :func:`interval_coverage`, :func:`ks_uniform` (the PIT's distance from uniform);
* the helpers they share: :func:`valid_positions`, :func:`quantiles`.

Each returns Python floats. The metrics of a language model's tokens (token accuracy, the
``<NUM>`` decision, errors at ``<NUM>`` targets) and their logging names are the adapter's
(:mod:`cauchylin_hf.evaluation`).

Conventions: *valid* positions are those whose ``attention_mask`` (if given, a bool or 0/1
tensor: other values such as NaN are refused while validation is on, see
:func:`cauchylin.set_validate_args`) is non-zero, all positions without a mask. Medians and
quantiles interpolate linearly (as ``numpy.percentile``'s default); the standard deviation is the
population one (``ddof = 0``). A metric with no data is ``nan``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from cauchylin._validation import (
    check_binary_mask,
    check_same_shape,
    is_validating,
    positive_int,
    require_tensor,
)
from cauchylin.nn.modes import STANDARD, get_mode
from cauchylin.vector import CauchyVector

if TYPE_CHECKING:  # pragma: no cover
    from cauchylin.nn import Action

__all__ = [
    "distribution_stats",
    "interval_coverage",
    "ks_uniform",
    "ovr_prob_sum_median",
    "ovr_prob_sums",
    "quantiles",
    "rank_correlation",
    "valid_positions",
]


def valid_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """The positions that hold a token: ``attention_mask != 0``, after checking the mask.

    Args:
        attention_mask: ``[...]`` a bool or 0/1 tensor; 0 marks padding.

    Returns:
        ``BoolTensor`` of the mask's shape.

    Raises:
        ValueError: not a tensor, or (while validating) values other than 0/1, NaN included.

    Example:
        >>> import torch
        >>> valid_positions(torch.tensor([1.0, 0.0, 1.0]))
        tensor([ True, False,  True])
    """
    require_tensor("attention_mask", attention_mask)
    if is_validating(None):
        check_binary_mask("attention_mask", attention_mask)
    return attention_mask != 0


def quantiles(values: torch.Tensor, qs: tuple[float, ...]) -> list[float]:
    """Linearly interpolated quantiles of all entries (``numpy.quantile``'s default method).

    Works on any size (``torch.quantile`` refuses inputs above 2**24 elements): one sort in
    float64, then ``x[floor(h)] + (h - floor(h)) (x[ceil(h)] - x[floor(h)])`` with
    ``h = q (n - 1)``.

    Args:
        values: any shape; flattened.
        qs: quantile levels in ``[0, 1]``.

    Returns:
        One float per level; ``nan`` for every level when ``values`` is empty.

    Raises:
        ValueError: a level outside ``[0, 1]``.

    Example:
        >>> import torch
        >>> quantiles(torch.tensor([4.0, 1.0, 3.0, 2.0]), (0.5, 0.25))
        [2.5, 1.75]
    """
    for q in qs:
        if not 0.0 <= float(q) <= 1.0:
            raise ValueError(f"quantile levels must lie in [0, 1], got {q!r}")
    x = require_tensor("values", values).detach().reshape(-1).to(torch.float64)
    n = x.numel()
    if n == 0:
        return [math.nan for _ in qs]
    x = x.sort().values
    out = []
    for q in qs:
        h = float(q) * (n - 1)
        lo = math.floor(h)
        hi = min(lo + 1, n - 1)
        a, b = float(x[lo]), float(x[hi])
        out.append(a + (h - lo) * (b - a))
    return out


def _average_ranks(x: torch.Tensor) -> torch.Tensor:
    """Ranks 1..n of a 1-d tensor, ties sharing their average rank."""
    order = torch.argsort(x, stable=True)
    sorted_x = x[order]
    ranks = torch.empty_like(x)
    ranks[order] = torch.arange(1, x.numel() + 1, dtype=x.dtype, device=x.device)
    # tied runs: replace each run's ranks by their mean
    _, inverse, counts = torch.unique_consecutive(sorted_x, return_inverse=True, return_counts=True)
    sums = torch.zeros(counts.numel(), dtype=x.dtype, device=x.device)
    sums.index_add_(0, inverse, ranks[order])
    ranks[order] = (sums / counts.to(x.dtype))[inverse]
    return ranks


def rank_correlation(pred: torch.Tensor, target: torch.Tensor) -> float:
    """Spearman's rank correlation of predictions with the truth (ties get average ranks).

    ``rho = corr(rank(pred), rank(target))``, the Pearson correlation of the ranks, as
    ``scipy.stats.spearmanr`` computes it.

    Args:
        pred: ``[n]`` predictions.
        target: ``[n]`` true values.

    Returns:
        ``rho`` in ``[-1, 1]``; ``nan`` for fewer than two pairs or a constant input.

    Raises:
        ValueError: inputs that are not 1-d tensors of one length, or hold NaN.

    Example:
        >>> import torch
        >>> round(rank_correlation(torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([1.0, 3.0, 2.0, 4.0])), 6)
        0.8
    """
    require_tensor("pred", pred)
    require_tensor("target", target)
    if pred.dim() != 1 or target.shape != pred.shape:
        raise ValueError(
            f"pred and target must be 1-d of one length, got {tuple(pred.shape)} and "
            f"{tuple(target.shape)}"
        )
    a, b = pred.detach().double().cpu(), target.detach().double().cpu()
    if bool(torch.isnan(a).any() or torch.isnan(b).any()):
        raise ValueError("pred and target must not hold NaN")
    if a.numel() < 2:
        return math.nan
    ra, rb = _average_ranks(a), _average_ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = float(ra.norm() * rb.norm())
    return float((ra * rb).sum()) / den if den > 0 else math.nan


def interval_coverage(target: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor) -> float:
    """The share of true values inside their predicted intervals, ``lower <= y <= upper``.

    Args:
        target: ``[n]`` true values.
        lower: ``[n]`` interval starts (``-inf`` allowed).
        upper: ``[n]`` interval ends (``inf`` allowed).

    Returns:
        The coverage in ``[0, 1]``; ``nan`` without data.

    Raises:
        ValueError: shapes that differ, or an interval with ``lower > upper`` or NaN ends.

    Example:
        >>> import torch
        >>> interval_coverage(torch.tensor([1.0, 5.0]), torch.tensor([0.0, 0.0]), torch.tensor([2.0, 4.0]))
        0.5
    """
    for name, t in (("target", target), ("lower", lower), ("upper", upper)):
        require_tensor(name, t)
    check_same_shape(target=target, lower=lower, upper=upper)
    lo, hi = lower.detach().double(), upper.detach().double()
    if bool((torch.isnan(lo) | torch.isnan(hi) | (lo > hi)).any()):
        raise ValueError("every interval needs lower <= upper and no NaN ends")
    if target.numel() == 0:
        return math.nan
    y = target.detach().double()
    return float(((lo <= y) & (y <= hi)).double().mean())


def ks_uniform(u: torch.Tensor) -> float:
    r"""The Kolmogorov-Smirnov statistic of values against the uniform law on ``[0, 1]``.

    ``D = max_i max(i / n - u_(i), u_(i) - (i - 1) / n)`` over the sorted values: the largest
    distance between their empirical CDF and the identity. Applied to PIT values
    (:func:`cauchylin.value_space.value_cdf` of held-out numbers) it measures how far a
    predictive distribution is from calibrated (0: perfectly uniform PIT).

    Args:
        u: ``[n]`` values in ``[0, 1]``.

    Returns:
        ``D`` in ``[0, 1]``; ``nan`` without values.

    Raises:
        ValueError: values outside ``[0, 1]`` or NaN.

    Example:
        >>> import torch
        >>> from scipy.stats import kstest
        >>> u = torch.tensor([0.1, 0.4, 0.45, 0.9])
        >>> round(ks_uniform(u), 6), round(float(kstest(u.numpy(), "uniform").statistic), 6)
        (0.3, 0.3)
    """
    require_tensor("u", u)
    x = u.detach().double().flatten()
    if x.numel() == 0:
        return math.nan
    if bool((torch.isnan(x) | (x < 0) | (x > 1)).any()):
        raise ValueError("u must lie in [0, 1] (PIT values), without NaN")
    x = x.sort().values
    n = x.numel()
    i = torch.arange(1, n + 1, dtype=torch.float64)
    return float(torch.maximum(i / n - x, x - (i - 1) / n).max())


def distribution_stats(
    values: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> dict[str, float]:
    """Mean, median, standard deviation (ddof 0) and IQR of ``values`` over valid positions.

    Every component at every valid position is one observation.

    Args:
        values: ``[..., C]`` (e.g. ``loc_U`` or ``scale_U``).
        attention_mask: optional ``[...]`` (``values`` without its last dimension).

    Returns:
        ``{"mean", "median", "std", "iqr"}`` (``nan`` each when nothing is valid), with
        ``iqr = q75 - q25``.

    Raises:
        ValueError: ``attention_mask`` does not match ``values.shape[:-1]`` or (while
            validating) holds values other than 0/1.

    Example:
        >>> import torch
        >>> distribution_stats(torch.tensor([[1.0, 3.0], [100.0, 100.0]]), torch.tensor([1, 0]))
        {'mean': 2.0, 'median': 2.0, 'std': 1.0, 'iqr': 1.0}
    """
    require_tensor("values", values)
    x = values.detach().to(torch.float64)
    if attention_mask is not None:
        require_tensor("attention_mask", attention_mask)
        if tuple(attention_mask.shape) != tuple(values.shape[:-1]):
            raise ValueError(
                f"attention_mask shape {tuple(attention_mask.shape)} must equal values' shape "
                f"without its last dimension, {tuple(values.shape[:-1])}"
            )
        x = x[valid_positions(attention_mask).to(values.device)]
    x = x.reshape(-1)
    if x.numel() == 0:
        return {"mean": math.nan, "median": math.nan, "std": math.nan, "iqr": math.nan}
    mean = float(x.mean())
    std = float((x - mean).square().mean().sqrt())
    q25, q50, q75 = quantiles(x, (0.25, 0.5, 0.75))
    return {"mean": mean, "median": q50, "std": std, "iqr": q75 - q25}


def ovr_prob_sums(
    action: Action,
    U: CauchyVector,
    *,
    mode: str = STANDARD,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Per-position sum of the one-vs-rest probabilities, ``sum_k P_k``, without holding ``[N, V]``.

    The positions are processed in chunks of ``chunk_size`` rows (default: about ``2**22``
    scores per chunk), each through ``action(U_chunk, mode, temperature)``; the random modes draw
    chunk by chunk from ``generator``. For one individual whose next token has a single true
    value the sum should be close to 1 (see ``docs/training.md#evaluation``).

    Args:
        action: the :class:`~cauchylin.nn.Action` layer.
        U: ``[..., C]`` the Abduction output.
        mode: ``"standard"``, ``"individual"`` (causal sampling), or any non-shared mode.
        temperature: the mode's temperature.
        generator: optional ``torch.Generator`` for the random modes.
        chunk_size: positions per chunk.

    Returns:
        ``[...]`` float64 sums (``U``'s batch shape).

    Raises:
        ValueError: a shared mode (it needs a draw; use the Action directly), a bad mode or a
            bad ``chunk_size``.

    Example:
        >>> import torch
        >>> from cauchylin import CauchyVector
        >>> from cauchylin.nn import Action
        >>> act = Action(4, 6, threshold=0.0)  # b_cls = 0 after initialisation
        >>> U = CauchyVector(torch.zeros(2, 3, 4), torch.ones(2, 3, 4))
        >>> ovr_prob_sums(act, U, chunk_size=2)  # loc_S = 0 = C, so every P_k = 1/2: 6 * 1/2
        tensor([[3., 3., 3.],
                [3., 3., 3.]], dtype=torch.float64)
    """
    if get_mode(mode).draw is not None:  # (an unknown mode raises here, naming the modes)
        raise ValueError(f"ovr_prob_sums does not take the shared mode {mode!r}")
    if not isinstance(U, CauchyVector):
        raise ValueError(f"U must be a CauchyVector, got {type(U).__name__}")
    batch = U.batch_shape
    flat = U.reshape(-1, U.event_size)
    n = flat.batch_shape[0]
    if chunk_size is None:
        chunk_size = max(1, 2**22 // max(action.num_classes, 1))
    chunk_size = positive_int("chunk_size", chunk_size)
    sums = []
    with torch.no_grad():
        for start in range(0, n, chunk_size):
            part = flat[start : start + chunk_size]
            out = action(part, mode, temperature, generator=generator)
            sums.append(out.ovr_probs().to(torch.float64).sum(-1))
    total = torch.cat(sums) if sums else torch.zeros(0, dtype=torch.float64, device=U.device)
    return total.reshape(batch)


def ovr_prob_sum_median(sums: torch.Tensor, attention_mask: torch.Tensor | None = None) -> float:
    """Median over valid positions of per-position OvR probability sums (see :func:`ovr_prob_sums`).

    Args:
        sums: ``[...]`` per-position sums.
        attention_mask: optional ``[...]``.

    Returns:
        The median (``nan`` without valid positions).

    Raises:
        ValueError: ``sums`` is not a tensor, or ``attention_mask`` has a different shape or
            (while validating) holds values other than 0/1.

    Example:
        >>> import torch
        >>> round(ovr_prob_sum_median(torch.tensor([0.9, 1.4, 7.0]), torch.tensor([1, 1, 0])), 6)
        1.15
    """
    require_tensor("sums", sums)
    x = sums.detach()
    if attention_mask is not None:
        check_same_shape(sums=sums, attention_mask=attention_mask)
        x = x[valid_positions(attention_mask)]
    return quantiles(x, (0.5,))[0]
