"""Metrics of the layers: hand-computed small cases and independent numpy / scipy references."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from scipy import stats as sps

from cauchylin import CauchyVector
from cauchylin.metrics import (
    distribution_stats,
    ovr_prob_sum_median,
    ovr_prob_sums,
    quantiles,
    valid_positions,
)
from cauchylin.nn import Action, draw_eps_noise

# ------------------------------------------------------------------------------ hand-computed


def test_hand_computed_batch():
    values = torch.tensor([[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [100.0, -100.0]]])
    stats = distribution_stats(values, torch.tensor([[1, 1], [1, 0]]))
    # observations 1..6: mean 3.5, median 3.5, population std sqrt(35/12), IQR 4.75 - 2.25
    assert stats == pytest.approx(
        {"mean": 3.5, "median": 3.5, "std": math.sqrt(35 / 12), "iqr": 2.5}, rel=1e-12
    )
    assert quantiles(torch.tensor([3.0, 1.0, 2.0]), (0.0, 0.5, 1.0, 0.25)) == [1.0, 2.0, 3.0, 1.5]


def test_empty_cases_and_conventions():
    stats = distribution_stats(torch.ones(2, 3), torch.zeros(2))
    assert all(math.isnan(v) for v in stats.values())
    assert math.isnan(ovr_prob_sum_median(torch.ones(3), torch.zeros(3)))
    assert all(math.isnan(q) for q in quantiles(torch.zeros(0), (0.5, 0.9)))


def test_shape_errors():
    with pytest.raises(ValueError, match="attention_mask"):
        distribution_stats(torch.zeros(2, 3), torch.ones(3))
    with pytest.raises(ValueError, match="quantile"):
        quantiles(torch.zeros(3), (1.5,))


# ------------------------------------------------------------------- independent references


@pytest.mark.parametrize("n", [1, 2, 5, 10, 1001])
def test_statistics_against_numpy(n: int):
    rng = np.random.default_rng(n)
    values = rng.standard_cauchy((n, 3, 4))
    mask = rng.random((n, 3)) < 0.7
    mask[0, 0] = True
    stats = distribution_stats(torch.as_tensor(values), torch.as_tensor(mask))
    x = values[mask].reshape(-1)
    assert stats["mean"] == pytest.approx(np.mean(x), rel=1e-12, abs=1e-12)
    assert stats["median"] == pytest.approx(np.median(x), rel=1e-12, abs=1e-12)
    assert stats["std"] == pytest.approx(np.std(x), rel=1e-10)
    iqr = np.percentile(x, 75) - np.percentile(x, 25)
    assert stats["iqr"] == pytest.approx(iqr, rel=1e-12, abs=1e-12)
    qs = (0.0, 0.1, 0.33, 0.5, 0.9, 1.0)
    np.testing.assert_allclose(quantiles(torch.as_tensor(x), qs), np.quantile(x, qs), rtol=1e-12)


# ---------------------------------------------------------------------- OvR probability sums


def small_action(T_seed: int = 0) -> Action:
    g = torch.Generator().manual_seed(T_seed)
    act = Action(4, 6, threshold=0.5)
    with torch.no_grad():
        act.classifier.weight.copy_(torch.randn(6, 4, generator=g))
        act.classifier.bias.copy_(torch.randn(6, generator=g))
        act.b_noise.copy_(torch.tensor([0.3, -0.5, 0.2, 1.0]))
    return act


def scipy_sums(loc_S: np.ndarray, scale_S: np.ndarray, thr: float) -> np.ndarray:
    return sps.cauchy.sf(thr, loc=loc_S, scale=scale_S).sum(-1)


def test_ovr_prob_sums_standard_against_scipy_and_chunking():
    act = small_action()
    g = torch.Generator().manual_seed(1)
    loc = torch.randn(3, 5, 4, generator=g) * 2
    scale = torch.rand(3, 5, 4, generator=g) + 0.1
    U = CauchyVector(loc, scale)
    W = act.classifier.weight.detach().double().numpy()
    b = act.classifier.bias.detach().double().numpy()
    nb = np.abs(act.b_noise.detach().double().numpy())
    T = 0.8
    ref = scipy_sums(
        loc.double().numpy() @ W.T + b, (scale.double().numpy() + T * nb) @ np.abs(W).T, 0.5
    )
    for chunk in (None, 1, 4, 100):
        sums = ovr_prob_sums(act, U, temperature=T, chunk_size=chunk)
        assert sums.shape == (3, 5) and sums.dtype == torch.float64
        np.testing.assert_allclose(sums.numpy(), ref, rtol=1e-5)
    mask = torch.ones(3, 5)
    mask[0] = 0
    assert ovr_prob_sum_median(sums, mask) == pytest.approx(np.median(ref[1:]), rel=1e-5)


def test_ovr_prob_sums_individual_against_scipy():
    act = small_action()
    T = 1.2
    g = torch.Generator().manual_seed(2)
    loc = torch.randn(10, 4, generator=g)
    scale = torch.rand(10, 4, generator=g) + 0.1
    sums = ovr_prob_sums(
        act,
        CauchyVector(loc, scale),
        mode="individual",
        temperature=T,
        generator=torch.Generator().manual_seed(5),
    )
    # the documented draw: u = loc + T scale eps, eps = draw_eps_noise(U.shape, generator)
    eps = draw_eps_noise((10, 4), generator=torch.Generator().manual_seed(5)).double().numpy()
    u = loc.double().numpy() + T * scale.double().numpy() * eps
    W = act.classifier.weight.detach().double().numpy()
    b = act.classifier.bias.detach().double().numpy()
    nb = np.abs(act.b_noise.detach().double().numpy())
    ref = scipy_sums(u @ W.T + b, np.broadcast_to(nb @ np.abs(W).T, (10, 6)), 0.5)
    np.testing.assert_allclose(sums.numpy(), ref, rtol=1e-4)
    again = ovr_prob_sums(
        act,
        CauchyVector(loc, scale),
        mode="individual",
        temperature=T,
        generator=torch.Generator().manual_seed(5),
    )
    assert torch.equal(sums, again)
    with pytest.raises(ValueError, match="shared"):
        ovr_prob_sums(act, CauchyVector(loc, scale), mode="shared_noise")


def test_docstring_examples_of_the_metrics_run():
    import doctest

    import cauchylin.metrics

    result = doctest.testmod(cauchylin.metrics, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.attempted > 10 and result.failed == 0


@pytest.mark.parametrize("bad", [float("nan"), 0.5, 2.0])
def test_attention_mask_must_be_zero_or_one(bad):
    """A NaN mask entry used to count as a position (NaN != 0); now every mask user refuses it."""
    mask = torch.tensor([1.0, bad, 1.0])
    match = r"attention_mask must hold only 0 and 1"
    with pytest.raises(ValueError, match=match):
        valid_positions(mask)
    with pytest.raises(ValueError, match=match):
        distribution_stats(torch.ones(3, 2), mask)
    with pytest.raises(ValueError, match=match):
        ovr_prob_sum_median(torch.ones(3), mask)


# ------------------------------------------------------------------ rank correlation, coverage


def test_rank_correlation_matches_scipy_with_ties():
    from scipy.stats import spearmanr

    from cauchylin.metrics import rank_correlation

    g = torch.Generator().manual_seed(0)
    for n in (2, 3, 17, 200):
        a = torch.randint(0, 5, (n,), generator=g).double()  # many ties
        b = a + torch.randn(n, generator=g, dtype=torch.float64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # scipy warns on a constant input (nan expected)
            expected = spearmanr(a.numpy(), b.numpy()).statistic
        got = rank_correlation(a, b)
        if math.isnan(expected):
            assert math.isnan(got)
        else:
            assert abs(got - expected) < 1e-12 * n


def test_rank_correlation_edge_cases():
    from cauchylin.metrics import rank_correlation

    assert math.isnan(rank_correlation(torch.tensor([1.0]), torch.tensor([2.0])))
    assert math.isnan(rank_correlation(torch.ones(4), torch.arange(4.0)))
    with pytest.raises(ValueError, match="one length"):
        rank_correlation(torch.ones(3), torch.ones(4))
    with pytest.raises(ValueError, match="NaN"):
        rank_correlation(torch.tensor([1.0, float("nan")]), torch.ones(2))


def test_interval_coverage_counts_closed_intervals():
    from cauchylin.metrics import interval_coverage

    y = torch.tensor([0.0, 1.0, 2.0, 3.0])
    lo = torch.tensor([0.0, 1.5, -math.inf, 3.0])
    hi = torch.tensor([0.0, 2.0, 1.0, math.inf])
    assert interval_coverage(y, lo, hi) == 0.5  # the ends count; 1 and 2 fall outside
    with pytest.raises(ValueError, match="lower <= upper"):
        interval_coverage(y, hi, lo)
    assert math.isnan(interval_coverage(torch.zeros(0), torch.zeros(0), torch.zeros(0)))
