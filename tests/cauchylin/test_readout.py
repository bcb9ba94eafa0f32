"""The readout solve: against scipy's optimiser on the same objective, on data with known truth."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize
from scipy.stats import cauchy

from cauchylin.readout import (
    cauchy_nll,
    constant_columns,
    fit_cauchy_readout,
    readout_objective,
)


def _data(n: int, c: int, seed: int, noise: float = 0.1) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, generator=g, dtype=torch.float64) * torch.linspace(0.1, 3.0, c)
    w = torch.randn(c, generator=g, dtype=torch.float64)
    e = noise * torch.tan(math.pi * (torch.rand(n, generator=g, dtype=torch.float64) - 0.5))
    return x, x @ w + 1.5 + e, w


def _scipy_fit(x: np.ndarray, t: np.ndarray, penalty: float, start: np.ndarray) -> np.ndarray:
    """The same objective J minimised by scipy's BFGS, in (w, b, log sigma)."""
    sd = x.std(0, ddof=1)
    c = x.shape[1]

    def f(p: np.ndarray) -> float:
        w, b, sigma = p[:c], p[c], math.exp(p[c + 1])
        nll = -cauchy.logpdf(t, loc=x @ w + b, scale=sigma).mean()
        return float(nll + penalty * ((sd * w) ** 2).sum())

    return minimize(f, start, method="BFGS", options={"gtol": 1e-10, "maxiter": 10_000}).x


@pytest.mark.parametrize("penalty", [0.0, 1e-3, 1e-1])
def test_the_solve_is_scipys_minimum_of_the_same_objective(penalty: float) -> None:
    x, t, _ = _data(300, 5, seed=1)
    fit = fit_cauchy_readout(x, t, penalties=[penalty], tol=1e-14, max_iter=5000)
    ours = readout_objective(x, t, fit.weight, fit.bias, fit.noise, penalty)
    # scipy from the least-squares start: the local minimum of the bulk, as ours
    ls = np.linalg.lstsq(np.c_[x.numpy(), np.ones(300)], t.numpy(), rcond=None)[0]
    start = np.r_[ls, math.log(0.5)]
    p = _scipy_fit(x.numpy(), t.numpy(), penalty, start)
    theirs = readout_objective(x, t, torch.tensor(p[:5]), p[5], math.exp(p[6]), penalty)
    assert float(ours) <= float(theirs) + 1e-9
    assert abs(float(ours) - float(theirs)) < 1e-7
    np.testing.assert_allclose(fit.weight.numpy(), p[:5], atol=1e-4)
    np.testing.assert_allclose(float(fit.bias), p[5], atol=1e-4)
    np.testing.assert_allclose(float(fit.noise), math.exp(p[6]), rtol=1e-4)


def test_the_objective_is_the_mean_cauchy_nll_plus_the_penalty() -> None:
    x, t, _ = _data(50, 3, seed=2)
    w, b, s = torch.tensor([0.3, -1.0, 2.0], dtype=torch.float64), 0.7, 0.4
    ref = -cauchy.logpdf(t.numpy(), loc=(x @ w).numpy() + b, scale=s).mean()
    ref += 0.01 * float(((x.std(0) * w) ** 2).sum())
    assert abs(float(readout_objective(x, t, w, b, s, 0.01)) - ref) < 1e-12
    nll = cauchy_nll(t, x @ w + b, torch.tensor(s, dtype=torch.float64))
    np.testing.assert_allclose(nll.numpy(), -cauchy.logpdf(t.numpy(), (x @ w).numpy() + b, s))


def test_the_truth_is_recovered_under_cauchy_noise_with_outliers() -> None:
    # 2000 rows, Cauchy noise of scale 0.1 plus 10% of targets shifted by 1000: the Cauchy
    # likelihood's bounded influence keeps the fit on the bulk (least squares would not).
    x, t, w = _data(2000, 4, seed=3)
    g = torch.Generator().manual_seed(4)
    bad = torch.rand(2000, generator=g) < 0.1
    t = torch.where(bad, t + 1000.0, t)
    fit = fit_cauchy_readout(x, t)
    # the MLE's standard error here is about 0.1 * sqrt(2 / n) / sd(x_j) < 0.01; 0.05 is > 5 se
    np.testing.assert_allclose(fit.weight.numpy(), w.numpy(), atol=0.05)
    assert abs(float(fit.bias) - 1.5) < 0.05
    assert 0.08 < float(fit.noise) < 0.14


def test_cross_validation_shrinks_features_that_hold_nothing() -> None:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(60, 30, generator=g, dtype=torch.float64)  # pure noise features
    t = 2.0 + 0.3 * torch.tan(math.pi * (torch.rand(60, generator=g, dtype=torch.float64) - 0.5))
    noisy = fit_cauchy_readout(x, t)
    assert noisy.penalty == 1.0  # the largest of the grid
    x2, t2, _ = _data(60, 3, seed=6, noise=0.01)
    assert fit_cauchy_readout(x2, t2).penalty <= 1e-2  # a strong signal: little penalty


@pytest.mark.parametrize("seed", range(4))
def test_the_averaged_readout_is_a_likelihood_weighted_mean_of_the_penalties_readouts(
    seed: int,
) -> None:
    # 60 rows of 6 features: cross-validation runs; each penalty's readout refitted on every
    # row alone is what the average is made of (penalties far enough apart that their readouts
    # differ by 0.1 or more, so that the shares can be read back)
    x, t, _ = _data(60, 6, seed=30 + seed, noise=1.0)
    grid = [1e-6, 1e-2, 1.0]
    least = fit_cauchy_readout(x, t, penalties=grid)
    average = fit_cauchy_readout(x, t, penalties=grid, penalty_rule="average")
    alone = [fit_cauchy_readout(x, t, penalties=[p]) for p in grid]
    # [w, b, sigma] of each penalty's readout as the columns; the average's as the target
    columns = torch.stack([torch.cat([f.weight, f.bias[None], f.noise[None]]) for f in alone], 1)
    target = torch.cat([average.weight, average.bias[None], average.noise[None]])
    share = torch.linalg.lstsq(
        torch.cat([columns, torch.ones(1, 3, dtype=x.dtype)]),
        torch.cat([target, torch.ones(1, dtype=x.dtype)]),
    ).solution
    rebuilt = columns @ share
    # each refit stops when J moves by less than 1e-8 (1 + |J|); J is quadratic near its
    # minimum, so the coefficients are good to about sqrt(1e-8) = 1e-4: 1e-3 is ten times that
    # (the penalties' readouts differ from one another by 0.01 to 1)
    np.testing.assert_allclose(rebuilt.numpy(), target.numpy(), atol=1e-3, rtol=1e-3)
    # the shares are exp(-n (cv_j - cv_min)), normalised, of the held-out NLLs it reports; read
    # back through refits good to ~1e-4 from readouts 0.1 apart, they are good to ~1e-3
    expected = torch.softmax(-60 * torch.tensor(least.cv_nlls, dtype=x.dtype), 0)
    np.testing.assert_allclose(share.numpy(), expected.numpy(), atol=1e-2)
    assert average.cv_nlls == least.cv_nlls and least.cv_nlls[grid.index(least.penalty)] == (
        least.cv_nll
    )
    assert (average.penalty, average.cv_nll) == (least.penalty, least.cv_nll)


def test_without_cross_validation_the_averaged_readout_is_the_one_fit() -> None:
    x, t, _ = _data(400, 3, seed=8)  # 400 >= 20 (3 + 1) rows: the smallest penalty, no choice
    least = fit_cauchy_readout(x, t)
    average = fit_cauchy_readout(x, t, penalty_rule="average")
    assert torch.equal(least.weight, average.weight) and torch.equal(least.noise, average.noise)


def test_the_median_error_rule_picks_the_penalty_of_the_least_median_out_of_fold_residual() -> None:
    # 14 distinct rows, each 5 times, in 14 folds: copies of a row share a fold, so every fold
    # holds out one distinct row and the cross-validation is leave-one-row-out, which the
    # public solve reproduces row by row. torch's median of 70 values is the 35th smallest: the
    # 7th smallest of the 14 rows' absolute residuals.
    grid = [1e-6, 1e-2, 1.0]
    checked, differs = 0, 0
    for seed in range(8):
        x, t, _ = _data(14, 4, seed=40 + seed, noise=1.0)
        big_x, big_t = x.repeat_interleave(5, 0), t.repeat_interleave(5)
        fit = fit_cauchy_readout(
            big_x, big_t, penalties=grid, folds=14, penalty_rule="median_error"
        )
        least = fit_cauchy_readout(big_x, big_t, penalties=grid, folds=14)
        medians = []
        for p in grid:
            residuals = []
            for i in range(14):
                keep = torch.arange(14) != i
                f = fit_cauchy_readout(
                    x[keep].repeat_interleave(5, 0), t[keep].repeat_interleave(5), penalties=[p]
                )
                residuals.append(abs(float(t[i] - x[i] @ f.weight - f.bias)))
            medians.append(sorted(residuals)[6])
        order = sorted(range(3), key=lambda j: medians[j])
        # the fold fits stop at a looser tolerance (coefficients good to ~1e-3): compare only
        # where the best median is ahead of the next by more than 1%
        if medians[order[1]] > 1.01 * medians[order[0]]:
            checked += 1
            assert fit.penalty == grid[order[0]], (seed, medians, fit.penalty)
        differs += fit.penalty != least.penalty
        assert fit.cv_nll == least.cv_nlls[grid.index(fit.penalty)]  # its own held-out NLL
    assert checked >= 6 and differs >= 1  # the rule is seen choosing, and choosing otherwise


def test_many_columns_are_read_through_their_principal_components() -> None:
    # rank-3 features spread over 40 columns: the projected solve predicts as the full one
    g = torch.Generator().manual_seed(7)
    z = torch.randn(400, 3, generator=g, dtype=torch.float64)
    x = z @ torch.randn(3, 40, generator=g, dtype=torch.float64)
    x = x + 1e-6 * torch.randn(400, 40, generator=g, dtype=torch.float64)
    t = z @ torch.tensor([1.0, -1.0, 0.5], dtype=torch.float64) + 0.01 * torch.randn(
        400, generator=g, dtype=torch.float64
    )
    full = fit_cauchy_readout(x, t, penalties=[1e-6])
    small = fit_cauchy_readout(x, t, penalties=[1e-6], max_dimension=3)
    np.testing.assert_allclose(small.predict(x)[0].numpy(), full.predict(x)[0].numpy(), atol=2e-3)


def test_a_float32_input_gives_a_float32_readout_solved_in_float64() -> None:
    x, t, _ = _data(200, 3, seed=8)
    fit32 = fit_cauchy_readout(x.float(), t.float(), penalties=[1e-4])
    fit64 = fit_cauchy_readout(x, t, penalties=[1e-4])
    assert fit32.weight.dtype == torch.float32
    np.testing.assert_allclose(fit32.weight.numpy(), fit64.weight.float().numpy(), rtol=1e-4)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"features": torch.zeros(10), "targets": torch.zeros(10)}, "features must be"),
        ({"features": torch.zeros(10, 2), "targets": torch.zeros(9)}, "targets"),
        (
            {"features": torch.zeros(10, 2, dtype=torch.long), "targets": torch.zeros(10)},
            "floating",
        ),
        (
            {"features": torch.full((10, 2), math.nan), "targets": torch.zeros(10)},
            "features must be finite",
        ),
        (
            {"features": torch.zeros(10, 2), "targets": torch.zeros(10), "penalties": []},
            "penalties",
        ),
        (
            {"features": torch.zeros(10, 2), "targets": torch.zeros(10), "penalties": [-1.0]},
            "penalties",
        ),
        ({"features": torch.zeros(8, 2), "targets": torch.zeros(8)}, "at least 10 rows"),
        ({"features": torch.zeros(10, 2), "targets": torch.zeros(10), "folds": 0}, "folds"),
        ({"features": torch.zeros(10, 2), "targets": torch.zeros(10), "rtol": -1.0}, "rtol"),
        (
            {"features": torch.zeros(10, 2), "targets": torch.zeros(10), "rtol": torch.zeros(3)},
            "rtol must be",
        ),
        (
            {"features": torch.zeros(10, 2), "targets": torch.zeros(10), "penalty_rule": "mean"},
            "penalty_rule must be one of",
        ),
    ],
)
def test_bad_arguments_are_named(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        fit_cauchy_readout(**kwargs)


@pytest.mark.parametrize("distinct", [1, 2, 3])
def test_a_few_distinct_rows_repeated_give_a_finite_readout(distinct: int) -> None:
    """A table of a few distinct rows, each repeated: copies share a fold, so most folds held
    out every copy of a row and some were fitted on nothing (a singular solve before), and
    with no penalty the rows do not determine every coefficient. The readout is the
    minimum-norm one, and it predicts each row's target (the rows' Cauchy location)."""
    g = torch.Generator().manual_seed(distinct)
    base = torch.randn(distinct, 6, generator=g, dtype=torch.float64)
    targets = torch.arange(1.0, distinct + 1, dtype=torch.float64) * 10
    x, t = base.repeat(40, 1), targets.repeat(40)
    for penalties in ((0.0,), (0.0, 1e-3, 1.0)):
        fit = fit_cauchy_readout(x, t, penalties=penalties)
        assert bool(torch.isfinite(fit.weight).all()) and math.isfinite(float(fit.bias))
        assert math.isfinite(float(fit.noise)) and float(fit.noise) > 0
        if penalties == (0.0,):  # unpenalised: the rows' targets exactly (to the solve)
            loc, _ = fit.predict(base)
            torch.testing.assert_close(loc, targets, rtol=1e-6, atol=1e-6)


def _rounded_copy(column: torch.Tensor, ulps: float, seed: int) -> torch.Tensor:
    """``column`` (constant) with float32 rounding noise of about ``ulps`` ulps, as a network's
    float32 features at one prefix differ between batch positions."""
    g = torch.Generator().manual_seed(seed)
    eps = torch.finfo(torch.float32).eps
    return column * (1 + ulps * eps * torch.randn(column.shape, generator=g, dtype=column.dtype))


def test_a_column_constant_up_to_float32_rounding_is_read_as_constant() -> None:
    """A feature that is one value up to 20 float32 ulps of rounding, given in float64 with the
    float32 rtol: weight 0, and the readout is the one fitted without that column, whatever
    the rounding's draw (unstandardised, the rounding was fitted with weights of 1e5 that
    changed with every draw: the same model on a CPU and on a GPU disagreed)."""
    x, t, _ = _data(200, 3, seed=11)
    rtol = 256 * torch.finfo(torch.float32).eps
    without = fit_cauchy_readout(x, t, penalties=[1e-4])
    for seed in (0, 1):
        rounded = _rounded_copy(torch.full((200, 1), 2.5, dtype=torch.float64), 20, seed)
        both = torch.cat([x[:, :1], rounded, x[:, 1:]], 1)
        fit = fit_cauchy_readout(both, t, penalties=[1e-4], rtol=rtol)
        assert float(fit.weight[1]) == 0.0
        keep = [0, 2, 3]
        torch.testing.assert_close(fit.weight[keep], without.weight, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(fit.bias, without.bias, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(fit.noise, without.noise, rtol=1e-9, atol=1e-12)


def test_a_small_but_real_spread_is_kept() -> None:
    """A column whose spread is 1e-3 of its magnitude (far above any rounding) carries the
    signal and is read: its weight recovers the truth, under the float32 rtol too."""
    g = torch.Generator().manual_seed(12)
    n = 2000
    x = 1000.0 + torch.randn(n, 1, generator=g, dtype=torch.float64)  # relative spread 1e-3
    e = 0.1 * torch.tan(math.pi * (torch.rand(n, generator=g, dtype=torch.float64) - 0.5))
    t = 3.0 * (x[:, 0] - 1000.0) + e
    for rtol in (None, 256 * torch.finfo(torch.float32).eps):
        fit = fit_cauchy_readout(x, t, penalties=[0.0], rtol=rtol)
        # the MLE's standard error is about 0.1 * sqrt(2 / n) = 0.003; 0.03 is 10 of them
        assert abs(float(fit.weight[0]) - 3.0) < 0.03


def test_constant_columns_by_their_spread_relative_to_their_size() -> None:
    g = torch.Generator().manual_seed(13)
    z = torch.randn(50, generator=g, dtype=torch.float64)
    x = torch.stack([1e6 + 1e-4 * z, 1e6 + 10 * z, torch.zeros(50), 1e-30 * z], 1)
    # relative spreads about 1e-10, 1e-5, exactly 0 and 1 (a column of tiny values varies)
    assert constant_columns(x, 1e-7).tolist() == [True, False, True, False]
    assert constant_columns(x, 1e-3).tolist() == [True, True, True, False]
    per_column = torch.tensor([0.0, 1e-3, 0.0, 0.0], dtype=torch.float64)
    assert constant_columns(x, per_column).tolist() == [False, True, True, False]


def test_the_least_squares_location_is_the_ridge_fit_moved_by_its_median_residual() -> None:
    """``location="least_squares"``: the weights are scikit-learn's ridge on the standardised
    features (the penalty ``n lambda``, the intercept unpenalised), the bias that fit's moved
    by the median of its residuals, ``sigma`` their median absolute deviation."""
    from sklearn.linear_model import Ridge

    x, t, _ = _data(120, 4, seed=14, noise=0.3)
    lam = 1e-2
    fit = fit_cauchy_readout(x, t, penalties=[lam], location="least_squares")
    assert fit.location == "least_squares" and fit.iterations == 0
    mean, sd = x.mean(0), x.std(0)
    xs = ((x - mean) / sd).numpy()
    ridge = Ridge(alpha=len(t) * lam, solver="cholesky").fit(xs, t.numpy())
    resid = t.numpy() - ridge.predict(xs)
    med = np.sort(resid)[(len(resid) - 1) // 2]  # torch's median: the lower middle value
    np.testing.assert_allclose(fit.weight.numpy(), ridge.coef_ / sd.numpy(), rtol=1e-8)
    bias = ridge.intercept_ + med - float((fit.weight * mean).sum())
    assert abs(float(fit.bias) - bias) < 1e-8
    spread = np.sort(np.abs(resid - med))[(len(resid) - 1) // 2]
    assert abs(float(fit.noise) - spread) < 1e-10


def test_the_location_chosen_is_cauchy_under_gross_errors_and_least_squares_under_gaussian() -> (
    None
):
    """``location="choose"``: with a tenth of the targets off by 1000 least squares is dragged
    and the Cauchy fit is kept; on 30 rows of Gaussian noise the least-squares fit is kept
    (its held-out errors are smaller there), and each is the fit of that location alone."""
    x, t, w = _data(400, 3, seed=15)
    g = torch.Generator().manual_seed(16)
    gross = torch.where(torch.rand(400, generator=g) < 0.1, t + 1000.0, t)
    fit = fit_cauchy_readout(x, gross, location="choose")
    assert fit.location == "cauchy"
    alone = fit_cauchy_readout(x, gross, penalties=[fit.penalty])
    torch.testing.assert_close(fit.weight, alone.weight, rtol=1e-6, atol=1e-8)
    dragged = fit_cauchy_readout(x, gross, penalties=[fit.penalty], location="least_squares")
    assert float((dragged.weight - w).abs().max()) > 2 * float((fit.weight - w).abs().max())
    g = torch.Generator().manual_seed(17)
    xg = torch.randn(30, 6, generator=g, dtype=torch.float64)
    tg = xg @ torch.linspace(-1, 1, 6, dtype=torch.float64) + torch.randn(30, generator=g)
    fit = fit_cauchy_readout(xg, tg, location="choose")
    assert fit.location == "least_squares"
    alone = fit_cauchy_readout(xg, tg, penalties=[fit.penalty], location="least_squares")
    torch.testing.assert_close(fit.weight, alone.weight, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(fit.bias, alone.bias, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"location": "median"}, "location must be one of"),
        ({"location": "choose", "penalty_rule": "average"}, 'location="choose" picks one fit'),
    ],
)
def test_bad_locations_are_named(kwargs: dict, match: str) -> None:
    x, t, _ = _data(40, 2, seed=18)
    with pytest.raises(ValueError, match=match):
        fit_cauchy_readout(x, t, **kwargs)
