"""Split-conformal widths: the order statistic, the coverage guarantee, the interval score."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scoringrules
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import binom

from cauchylin.conformal import (
    conformal_quantile,
    conformal_widths,
    interval_score,
    normalised_scores,
)
from tests.stats import FALSE_FAILURE_RATE, split_delta


@given(
    st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=60),
    st.floats(0.01, 0.99),
)
def test_the_quantile_is_the_brute_force_order_statistic(scores: list[float], level: float) -> None:
    s = torch.tensor(scores, dtype=torch.float64)
    n = len(scores)
    # brute force: the smallest score q such that at least (n + 1) level scores (plus the
    # unknown new one, counted as above) are <= q, i.e. #{s_i <= q} >= (n + 1) level
    ordered = sorted(scores)
    need = (n + 1) * level
    expect = next((q for q in ordered if sum(v <= q for v in scores) >= need - 1e-9), math.inf)
    assert float(conformal_quantile(s, level)) == expect


def test_split_conformal_covers_new_rows_at_every_level() -> None:
    # 20000 independent calibration sets of 19 rows from a heavy-tailed law that is not Cauchy
    # (Student t with 3 degrees of freedom around a wrong location and scale), one new row each:
    # the share of new rows inside loc +- q(c) scale is Binomial(20000, p) with
    # c <= p < c + 1/20. The band is the binomial's, at a false-failure rate of 1e-6 overall;
    # an off-by-one rank (ceil(n c)) misses by 1/20 and falls outside it.
    g = np.random.default_rng(0)
    trials, n = 20000, 19
    levels = (0.5, 0.8, 0.9, 0.95)
    calib = torch.tensor(g.standard_t(3, size=(trials, n)) * 2.0 + 1.0)
    new = torch.tensor(g.standard_t(3, size=trials) * 2.0 + 1.0)
    loc, scale = torch.zeros(n), torch.full((n,), 0.5)
    hits = torch.zeros(len(levels))
    for i in range(trials):
        q = conformal_widths(calib[i], loc, scale, levels)
        hits += (new[i].abs() <= q * 0.5).double()
    delta = split_delta(2 * len(levels), FALSE_FAILURE_RATE)
    for j, c in enumerate(levels):
        low = binom.ppf(delta, trials, c)
        high = binom.isf(delta, trials, min(c + 1 / (n + 1), 1.0))
        assert low <= float(hits[j]) <= high, (c, float(hits[j]) / trials)


def test_too_few_rows_for_a_level_give_an_unbounded_width() -> None:
    s = torch.arange(9, dtype=torch.float64)
    assert math.isinf(float(conformal_quantile(s, 0.95)))  # ceil(10 * 0.95) = 10 > 9
    assert float(conformal_quantile(s, 0.9)) == 8.0  # the 9th of 9


def test_normalised_scores_and_their_errors() -> None:
    t = torch.tensor([1.0, -3.0])
    out = normalised_scores(t, torch.tensor([0.0, 1.0]), torch.tensor([2.0, 0.5]))
    assert out.tolist() == [0.5, 8.0]
    with pytest.raises(ValueError, match="scale must be positive"):
        normalised_scores(t, t, torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="one shape"):
        normalised_scores(t, t, torch.ones(3))
    with pytest.raises(ValueError, match="level must lie"):
        conformal_quantile(torch.ones(3), 1.0)
    with pytest.raises(ValueError, match="NaN"):
        conformal_quantile(torch.tensor([math.nan]), 0.5)


@pytest.mark.parametrize("level", [0.5, 0.8, 0.95])
def test_interval_score_is_scoringrules(level: float) -> None:
    g = np.random.default_rng(1)
    t = g.normal(size=200)
    lo = g.normal(size=200) - 1.0
    hi = lo + g.exponential(size=200)
    ours = interval_score(torch.tensor(t), torch.tensor(lo), torch.tensor(hi), level)
    theirs = scoringrules.interval_score(t, lo, hi, 1.0 - level)
    np.testing.assert_allclose(ours.numpy(), theirs, rtol=1e-12)
