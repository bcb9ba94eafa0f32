"""``cauchylin.estimators``: the scikit-learn contract, what the models learn, and the import guard.

Settings are small (a few hundred rows, tiny networks) so that the file runs in well under a
minute on one core. Statistical checks fix their seeds and derive their tolerances from a stated
false-failure rate (``tests/stats.py``).
"""

from __future__ import annotations

import doctest
import importlib
import math
import pickle
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("sklearn")

from scipy import stats as scipy_stats
from scipy.special import softmax
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.model_selection import GridSearchCV
from sklearn.neural_network import MLPRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from cauchylin import CauchyVector
from cauchylin.estimators import CausalClassifier, CausalRegressor
from cauchylin.nn import MODES
from tests.stats import binomial_epsilon, split_delta

# Settings for scikit-learn's checks: a tiny network that still fits their toy problems (R^2 >
# 0.5 on a regression, accuracy > 0.83 on blobs) in a few dozen steps.
FAST = {
    "hidden_layer_sizes": (8,),
    "max_iter": 30,
    "learning_rate": 0.01,
    "batch_size": 100,
    "n_iter_no_change": 5,
    "random_state": 0,
}

# scikit-learn's own checks. None is expected to fail; the two that the installed environment
# skips (array-API input: SCIPY_ARRAY_API unset; pandas input: pandas not installed) show as
# skipped with scikit-learn's reason.
EXPECTED_FAILED_CHECKS: dict[str, str] = {}


@parametrize_with_checks(
    [CausalRegressor(**FAST), CausalClassifier(**FAST)],
    expected_failed_checks=lambda est: EXPECTED_FAILED_CHECKS,
)
def test_sklearn_estimator_checks(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)


# --------------------------------------------------------------------------------------------
# what the regressor learns


def _linear_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    w = np.array([2.0, -1.0, 0.5])
    return X, X @ w + 1.0, w


def test_noiseless_linear_function_is_learnt():
    """No hidden layer makes the location of ``U`` (and of ``Y``) a linear function of ``x``, so
    the truth is in the model class and only the optimisation limits the error. A constant
    predictor errs by about the targets' spread ``sd(y)``; the Cauchy NLL keeps pulling
    ``scale_Y`` down on noiseless data, which sharpens the fit, so the held-out error must be a
    small fraction of ``sd(y)``: below 2 % at the median and 5 % at the worst point."""
    X, y, _ = _linear_data(400, seed=0)
    X_test, y_test, _ = _linear_data(200, seed=1)
    reg = CausalRegressor((), learning_rate=0.01, max_iter=400, random_state=0).fit(X, y)
    err = np.abs(reg.predict(X_test) - y_test)
    spread = y.std()
    assert np.median(err) < 0.02 * spread, (np.median(err), spread)
    assert err.max() < 0.05 * spread, (err.max(), spread)


def test_corrupted_targets_barely_move_the_median_error():
    """10 % of the training targets multiplied by 100: the Cauchy NLL gives a residual ``r`` a
    gradient ``2 r / (scale^2 + r^2) ~ 2 / r``, so the wild targets hardly pull; least squares
    (``MLPRegressor``, same data) follows them. With 10 % of the rows useless, the clean model's
    median error can grow like ``1 / sqrt(0.9)`` (5 %); we allow 25 %."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    f = lambda X: np.sin(X[:, 0]) + 0.5 * X[:, 1] ** 2 - X[:, 2]  # noqa: E731
    y = f(X) + 0.1 * rng.normal(size=300)
    X_test = rng.normal(size=(300, 3))
    bad = rng.choice(300, 30, replace=False)
    y_bad = y.copy()
    y_bad[bad] *= 100.0

    def medae(model, targets):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(X, targets)
        return float(np.median(np.abs(model.predict(X_test) - f(X_test))))

    causal = lambda: CausalRegressor((32,), random_state=0)  # noqa: E731
    clean, corrupted = medae(causal(), y), medae(causal(), y_bad)
    assert corrupted < 1.25 * clean, (clean, corrupted)
    mlp = lambda: MLPRegressor(hidden_layer_sizes=(32,), max_iter=300, random_state=0)  # noqa: E731
    mlp_clean, mlp_corrupted = medae(mlp(), y), medae(mlp(), y_bad)
    assert mlp_corrupted > 3 * mlp_clean  # the least-squares network is pulled away
    assert corrupted < mlp_corrupted / 3


def test_interval_coverage_on_cauchy_noise():
    """Data ``y = w.x + 1 + 0.5 eps``, ``eps ~ Cauchy(0, 1)``: the linear model is well specified,
    so the central intervals should hold their nominal coverage ``c`` on fresh rows.

    Two sources of error: (1) the test rows: the share inside the fitted intervals is a mean of
    ``m`` independent Bernoulli draws around its expectation, within Hoeffding's ``eps`` at a
    false-failure rate of 1e-6 (split over the checks); (2) the fitted scale: the Fisher
    information of a Cauchy scale is ``1 / (2 s^2)`` per row, so ``log s_hat`` has standard
    deviation ``sqrt(2 / n)``, which moves the coverage of ``loc +- s tan(pi c / 2)`` by
    ``2 t f(t) sqrt(2 / n)`` (``t = tan(pi c / 2)``, ``f`` the standard Cauchy density); we allow
    five of those standard deviations. The expected coverage of the fitted intervals is also
    computed exactly from the true law (scipy's Cauchy CDF) and held to the same allowance."""
    rng = np.random.default_rng(0)
    n, m = 2000, 4000
    w = np.array([2.0, -1.0])
    X = rng.normal(size=(n, 2))
    y = X @ w + 1.0 + 0.5 * rng.standard_cauchy(n)
    X_test = rng.normal(size=(m, 2))
    y_test = X_test @ w + 1.0 + 0.5 * rng.standard_cauchy(m)
    # A linear model cannot overfit 2000 rows: train on all of them (early stopping on 200 noisy
    # Cauchy rows would only make the stopping epoch, and so the fitted scale, noisier).
    # calibration=None: the model's own Cauchy intervals, which a well-specified fit gets right
    reg = CausalRegressor(
        (),
        batch_size=128,
        learning_rate=0.01,
        early_stopping=False,
        random_state=0,
        calibration=None,
    ).fit(X, y)
    centre = X_test @ w + 1.0
    delta = split_delta(2)
    for c in (0.5, 0.9):
        lower, upper = reg.predict_interval(X_test, coverage=c)
        t = math.tan(math.pi * c / 2)
        allowance = 5 * 2 * t * scipy_stats.cauchy.pdf(t) * math.sqrt(2 / n)
        expected = np.mean(
            scipy_stats.cauchy.cdf(upper, centre, 0.5) - scipy_stats.cauchy.cdf(lower, centre, 0.5)
        )
        assert abs(expected - c) < allowance, (c, expected, allowance)
        inside = np.mean((lower <= y_test) & (y_test <= upper))
        assert abs(inside - c) < binomial_epsilon(m, delta) + allowance, (c, inside)


def test_calibrated_intervals_cover_new_rows_whatever_the_noise():
    """Gaussian noise: no Cauchy is right at 50% and 90% at once (its 90%/50% width ratio is
    6.31, a Gaussian's 2.44), so the model's own intervals miss one level; the default
    calibration (a fifth of the rows held out, crepes' normalised split conformal) covers new
    rows at both. Given one calibration draw of n rows, the coverage is Beta(k, n + 1 - k)
    (k = ceil((n + 1) c)); m test rows estimate it within Hoeffding's bound: both at a
    false-failure rate of 1e-6 for the test."""
    from scipy.stats import beta

    rng = np.random.default_rng(4)
    n_rows, m = 1000, 4000
    X = rng.normal(size=(n_rows, 2))
    y = X @ np.array([1.0, -2.0]) + rng.normal(size=n_rows)
    X_test = rng.normal(size=(m, 2))
    y_test = X_test @ np.array([1.0, -2.0]) + rng.normal(size=m)
    reg = CausalRegressor((), learning_rate=0.01, random_state=0).fit(X, y)
    n = reg.calibration_size_
    assert n == 200
    delta = split_delta(4)
    raw_ratio = []
    for c in (0.5, 0.9):
        lower, upper = reg.predict_interval(X_test, coverage=c)
        inside = float(np.mean((lower <= y_test) & (y_test <= upper)))
        k = math.ceil((n + 1) * c)
        slack = binomial_epsilon(m, delta)
        assert beta.ppf(delta, k, n + 1 - k) - slack <= inside, (c, inside)
        assert inside <= beta.isf(delta, k, n + 1 - k) + slack, (c, inside)
        lo, hi = reg.predict_interval(X_test, coverage=c, calibrated=False)
        raw_ratio.append(float(np.mean((lo <= y_test) & (y_test <= hi))) - c)
    assert max(abs(r) for r in raw_ratio) > 0.05  # the Cauchy intervals miss a level
    # crepes' quantile is the package's own split-conformal width of the held-out rows
    from cauchylin.conformal import conformal_widths

    cal = reg.calibration_rows_
    d = reg.predict_distribution(X[cal])
    q = conformal_widths(torch.tensor(y[cal]), d.loc, d.scale, (0.9,))
    lower, upper = reg.predict_interval(X[:3], coverage=0.9)
    d3 = reg.predict_distribution(X[:3])
    np.testing.assert_allclose((upper - lower) / 2, float(q[0]) * d3.scale.numpy(), rtol=1e-9)


def test_mapie_wraps_the_estimator():
    """A plain scikit-learn regressor: MAPIE's cross-conformal wrapper fits and covers."""
    mapie = pytest.importorskip("mapie.regression")
    rng = np.random.default_rng(5)
    X = rng.normal(size=(300, 2))
    y = X @ np.array([1.0, 1.0]) + rng.normal(size=300)
    wrapped = mapie.CrossConformalRegressor(
        estimator=CausalRegressor((), learning_rate=0.02, max_iter=60, calibration=None),
        confidence_level=0.8,
        cv=3,
        random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wrapped.fit_conformalize(X, y)
        _, bounds = wrapped.predict_interval(X[:50])
    assert bounds.shape == (50, 2, 1) and bool((bounds[:, 0, 0] < bounds[:, 1, 0]).all())


def test_predict_distribution_matches_scipy():
    """``predict_distribution`` is ``Cauchy(loc_Y, scale_Y)`` per row in ``y``'s units: its
    median is ``predict``, its quantiles and log-densities those of scipy's Cauchy law, and
    ``predict_interval`` returns the central quantiles."""
    X, y, _ = _linear_data(120, seed=2)
    y = 1000.0 + 50.0 * y  # units far from standardised ones
    reg = CausalRegressor((8,), max_iter=50, random_state=0).fit(X, y)
    d = reg.predict_distribution(X[:7])
    assert isinstance(d, CauchyVector) and d.shape == (7,) and d.dtype == torch.float64
    loc, scale = d.loc.numpy(), d.scale.numpy()
    np.testing.assert_array_equal(loc, reg.predict(X[:7]))
    assert (scale > 0).all()
    q = np.array([0.05, 0.25, 0.5, 0.9])
    for qi in q:
        np.testing.assert_allclose(
            d.icdf(float(qi)).numpy(), scipy_stats.cauchy.ppf(qi, loc, scale), rtol=1e-12
        )
    np.testing.assert_allclose(
        d.log_prob(torch.as_tensor(y[:7])).numpy(),
        scipy_stats.cauchy.logpdf(y[:7], loc, scale),
        rtol=1e-10,
    )
    lower, upper = reg.predict_interval(X[:7], coverage=0.8, calibrated=False)
    np.testing.assert_allclose(lower, scipy_stats.cauchy.ppf(0.1, loc, scale), rtol=1e-12)
    np.testing.assert_allclose(upper, scipy_stats.cauchy.ppf(0.9, loc, scale), rtol=1e-12)
    assert d.to_distribution().event_shape == (7,)


def test_modes_at_predict_time():
    X, y, _ = _linear_data(100, seed=3)
    reg = CausalRegressor((8,), max_iter=30, random_state=0).fit(X, y)
    standard = reg.predict_distribution(X, mode="standard")
    causal = reg.predict_distribution(X, mode="causal")
    # the exogenous noise widens the law without moving its median
    np.testing.assert_allclose(causal.loc.numpy(), standard.loc.numpy(), rtol=1e-12)
    assert (causal.scale < standard.scale).all()
    # T = 0 turns every mode into the causal one
    for mode in MODES:
        np.testing.assert_allclose(
            reg.predict(X, mode=mode, temperature=0.0), causal.loc.numpy(), rtol=1e-12
        )
    # the random modes: reproducible by default, different with another generator
    first = reg.predict(X, mode="sampling")
    np.testing.assert_array_equal(first, reg.predict(X, mode="sampling"))
    other = reg.predict(X, mode="sampling", generator=torch.Generator().manual_seed(123))
    assert not np.allclose(first, other)
    for mode in ("individual", "shared_individual", "shared_noise"):
        assert np.isfinite(reg.predict(X, mode=mode)).all()
    with pytest.raises(ValueError, match="mode must be one of"):
        reg.predict(X, mode="greedy")
    with pytest.raises(ValueError, match="temperature"):
        reg.predict(X, temperature=-1.0)
    with pytest.raises(ValueError, match="coverage"):
        reg.predict_interval(X, coverage=1.0)


def test_float64_and_reproducibility():
    X, y, _ = _linear_data(80, seed=4)
    a = CausalRegressor((8,), max_iter=20, dtype="float64", random_state=7).fit(X, y)
    b = CausalRegressor((8,), max_iter=20, dtype="float64", random_state=7).fit(X, y)
    assert a.module_.action.regressor.weight.dtype == torch.float64
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
    c = CausalRegressor((8,), max_iter=20, dtype="float64", random_state=8).fit(X, y)
    assert not np.array_equal(a.predict(X), c.predict(X))


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("hidden_layer_sizes", (8, 0)),
        ("hidden_layer_sizes", "wide"),
        ("causal_size", 0),
        ("activation", "sigmoid"),
        ("gamma_init", 0.0),
        ("b_noise_init", -1.0),
        ("learning_rate", float("nan")),
        ("alpha", -1e-4),
        ("batch_size", 0),
        ("max_iter", 2.5),
        ("n_iter_no_change", 0),
        ("tol", -1.0),
        ("early_stopping", "yes"),
        ("validation_fraction", 1.0),
        ("mode", "greedy"),
        ("temperature", -0.5),
        ("dtype", "float16"),
    ],
)
def test_bad_settings_name_the_argument(setting, value):
    X, y, _ = _linear_data(30, seed=5)
    with pytest.raises(ValueError, match=setting):
        CausalRegressor(**{setting: value}).fit(X, y)


def test_classifier_threshold_is_checked():
    with pytest.raises(ValueError, match="threshold"):
        CausalClassifier(threshold=float("inf")).fit([[0.0], [1.0]], [0, 1])


def test_convergence_warning_and_progress_bar(capsys):
    X, y, _ = _linear_data(60, seed=6)
    with pytest.warns(ConvergenceWarning, match="max_iter=2"):
        CausalRegressor((4,), max_iter=2, verbose=True, random_state=0).fit(X, y)
    assert "CausalRegressor" in capsys.readouterr().err  # the tqdm bar's label
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        CausalRegressor((4,), max_iter=2, random_state=0).fit(X, y)
    assert capsys.readouterr().err == ""  # no bar by default


def test_not_fitted():
    with pytest.raises(NotFittedError):
        CausalRegressor().predict_distribution([[0.0]])
    with pytest.raises(NotFittedError):
        CausalClassifier().predict_proba([[0.0]])


# --------------------------------------------------------------------------------------------
# the classifier


def _blobs(n: int, seed: int, k: int = 3, gap: float = 8.0) -> tuple[np.ndarray, np.ndarray]:
    """``k`` unit-variance Gaussian clouds on a circle, neighbours ``gap`` standard deviations
    apart (for k = 3, gap 8: the Bayes error is below ``2 Phi(-4) = 6e-5`` per row)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, size=n)
    angles = 2 * np.pi * np.arange(k) / k
    radius = gap / (2 * np.sin(np.pi / k))
    centres = radius * np.stack([np.cos(angles), np.sin(angles)], axis=1)
    return centres[labels] + rng.normal(size=(n, 2)), labels


def test_classifier_separates_separable_classes():
    """With a Bayes error below 6e-5, 1000 held-out rows hold an error with probability below
    0.06; the classifier may afford 5 (a loose margin for a finite fit)."""
    X, y = _blobs(300, seed=0)
    X_test, y_test = _blobs(1000, seed=1)
    names = np.array(["north", "south", "west"])
    clf = CausalClassifier((16,), learning_rate=0.01, max_iter=60, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(X, names[y])
    assert clf.classes_.tolist() == ["north", "south", "west"]
    assert (clf.predict(X_test) != names[y_test]).sum() <= 5


def test_classifier_probabilities_match_scipy():
    """``predict_ovr_proba`` is ``P_k = P(S_k > C_k)`` of the scores ``predict_distribution``
    returns (scipy's Cauchy survival function); ``predict_proba`` normalises it and its argmax is
    ``predict``; the compatible mode is ``softmax(loc_S / T)``."""
    X, y = _blobs(150, seed=2, gap=3.0)
    clf = CausalClassifier((8,), threshold=0.5, max_iter=40, random_state=0).fit(X, y)
    S = clf.predict_distribution(X[:20])
    loc, scale = S.loc.numpy(), S.scale.numpy()
    P = scipy_stats.cauchy.sf(0.5, loc, scale)
    np.testing.assert_allclose(clf.predict_ovr_proba(X[:20]), P, rtol=1e-10)
    np.testing.assert_allclose(
        clf.predict_proba(X[:20]), P / P.sum(axis=1, keepdims=True), rtol=1e-10
    )
    np.testing.assert_array_equal(clf.predict(X[:20]), clf.classes_[P.argmax(axis=1)])
    p_compat = clf.predict_proba(X[:20], mode="compatible", temperature=2.0)
    np.testing.assert_allclose(p_compat, softmax(loc / 2.0, axis=1), rtol=1e-10)
    greedy = clf.predict_proba(X[:20], mode="compatible", temperature=0.0)
    np.testing.assert_array_equal(greedy.argmax(axis=1), loc.argmax(axis=1))
    assert set(np.unique(greedy)) <= {0.0, 1.0}


# --------------------------------------------------------------------------------------------
# the scikit-learn workflow


def test_pickle_round_trip():
    X, y, _ = _linear_data(60, seed=7)
    reg = CausalRegressor((8,), max_iter=10, random_state=0).fit(X, y)
    again = pickle.loads(pickle.dumps(reg))
    np.testing.assert_array_equal(again.predict(X), reg.predict(X))
    np.testing.assert_array_equal(
        again.predict_distribution(X).scale.numpy(), reg.predict_distribution(X).scale.numpy()
    )
    Xc, yc = _blobs(60, seed=3)
    clf = CausalClassifier((8,), max_iter=10, random_state=0).fit(Xc, yc)
    np.testing.assert_array_equal(
        pickle.loads(pickle.dumps(clf)).predict_proba(Xc), clf.predict_proba(Xc)
    )


def test_pipeline_and_grid_search():
    X, y, _ = _linear_data(120, seed=8)
    pipe = make_pipeline(StandardScaler(), CausalRegressor(max_iter=15, random_state=0))
    grid = GridSearchCV(
        pipe,
        {"causalregressor__hidden_layer_sizes": [(), (8,)], "causalregressor__alpha": [0.0]},
        cv=2,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        grid.fit(X, y)
    assert set(grid.best_params_) == {
        "causalregressor__hidden_layer_sizes",
        "causalregressor__alpha",
    }
    assert grid.predict(X).shape == (120,)
    assert np.isfinite(grid.best_score_)


# --------------------------------------------------------------------------------------------
# import guard and docstring examples


BLOCK_SKLEARN = textwrap.dedent(
    """
    import importlib.abc, sys

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "sklearn" or name.startswith("sklearn."):
                raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
            return None

    sys.meta_path.insert(0, Block())
    """
)


def test_core_imports_without_sklearn():
    """``import cauchylin`` (and every core submodule) never touches scikit-learn; the estimators
    say which extra to install."""
    code = BLOCK_SKLEARN + textwrap.dedent(
        """
        import cauchylin, cauchylin.nn, cauchylin.losses, cauchylin.distributions
        import cauchylin.metrics
        assert not any(m == "sklearn" or m.startswith("sklearn.") for m in sys.modules)
        try:
            import cauchylin.estimators
        except ImportError as exc:
            print("ImportError:", exc)
        else:
            raise SystemExit("cauchylin.estimators imported without scikit-learn")
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "pip install 'cauchylin[sklearn]'" in proc.stdout


@pytest.mark.parametrize(
    "module_name",
    [
        "cauchylin.estimators",
        "cauchylin.estimators.regressor",
        "cauchylin.estimators.classifier",
        "cauchylin.estimators._mlp",
        "cauchylin.estimators._training",
        "cauchylin.estimators._base",
    ],
)
def test_docstring_examples_run(module_name):
    module = importlib.import_module(module_name)
    torch.manual_seed(0)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for test in finder.find(module, module_name):
            runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0
    assert result.failed == 0, f"{result.failed} of {result.attempted} failed in {module_name}"


def test_early_stopping_keeps_the_best_validation_epoch():
    """An over-parameterised linear fit of pure noise: the training loss keeps falling while the
    validation loss turns up. Training must stop ``n_iter_no_change`` epochs after the best
    validation epoch and hand back that epoch's weights (their validation loss is the minimum)."""
    from cauchylin.estimators._training import train

    gen = torch.Generator().manual_seed(0)
    x, x_val = torch.randn(12, 40, generator=gen), torch.randn(200, 40, generator=gen)
    y, y_val = torch.randn(12, generator=gen), torch.randn(200, generator=gen)
    net = torch.nn.Linear(40, 1)
    torch.nn.init.zeros_(net.weight)
    torch.nn.init.zeros_(net.bias)

    def mse(m, a, b):
        return ((m(a)[:, 0] - b) ** 2).mean()

    result = train(
        net,
        mse,
        x,
        y,
        x_val=x_val,
        y_val=y_val,
        learning_rate=0.05,
        weight_decay=0.0,
        batch_size=12,
        max_iter=500,
        n_iter_no_change=5,
        tol=0.0,
        generator=torch.Generator().manual_seed(1),
    )
    curve = result.validation_losses
    assert result.converged and result.n_iter < 500
    assert result.loss_curve[-1] < result.loss_curve[0] / 2  # it did fit the training rows
    assert curve[-1] > min(curve)  # and the validation loss turned up: there was a best epoch
    assert result.best_epoch == 1 + int(np.argmin(curve))
    assert result.n_iter == result.best_epoch + 5
    with torch.no_grad():
        kept = float(mse(net, x_val, y_val))
    assert kept == pytest.approx(min(curve), rel=1e-6)
    assert kept < curve[-1]


def test_the_estimators_report_early_stopping():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 30))
    y = rng.normal(size=120)  # nothing to learn: validation loss stops improving early
    est = CausalRegressor(
        hidden_layer_sizes=(64,),
        max_iter=300,
        n_iter_no_change=4,
        early_stopping=True,
        validation_fraction=0.25,
        random_state=0,
    ).fit(X, y)
    curve = est.validation_loss_curve_
    assert curve is not None and len(curve) == est.n_iter_ < 300
    assert est.best_epoch_ == 1 + int(np.argmin(curve))
    assert est.n_iter_ == est.best_epoch_ + 4
    off = CausalRegressor(
        hidden_layer_sizes=(64,), max_iter=30, early_stopping=False, random_state=0
    ).fit(X, y)
    assert off.validation_loss_curve_ is None and off.best_epoch_ == off.n_iter_


def test_features_near_the_float64_limit_are_standardised_without_overflow():
    """Features around 1e300 (finite) train as well as the same features at unit scale."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 2))
    y = 2.0 * X[:, 0] + 0.1 * rng.normal(size=200)
    settings = {"hidden_layer_sizes": (8,), "max_iter": 60, "learning_rate": 0.03}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        unit = CausalRegressor(random_state=0, **settings).fit(X, y).predict(X)
        huge = CausalRegressor(random_state=0, **settings).fit(X * 1e300, y).predict(X * 1e300)
    assert np.unique(huge).size == X.shape[0]
    # Standardised, the two inputs are the same up to rounding: so are the predictions.
    np.testing.assert_allclose(huge, unit, rtol=1e-4, atol=1e-4)


def test_targets_the_training_dtype_cannot_hold_are_refused_by_name():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 2))
    y = rng.normal(size=50)
    y[0] = 1e308  # finite in float64, beyond float32 once standardised
    with pytest.raises(ValueError, match=r"^y is out of range: .*float32.*dtype='float64'"):
        CausalRegressor((8,), max_iter=3, random_state=0).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reg = CausalRegressor((8,), max_iter=5, random_state=0, dtype="float64").fit(X, y)
    assert np.isfinite(reg.predict(X)).all()


def test_classifier_defaults_converge_on_wine_without_a_warning():
    """scikit-learn's wine data (178 rows, 3 separable classes), a split on which the one-vs-rest
    loss kept falling by more than the old ``tol=1e-4`` per 20 epochs until ``max_iter=500``:
    the defaults stop by their own rule, warn of nothing, and classify the held-out rows."""
    from sklearn.datasets import load_wine
    from sklearn.model_selection import train_test_split

    X, y = load_wine(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        clf = CausalClassifier(random_state=2).fit(X_train, y_train)
    assert clf.n_iter_ < clf.max_iter
    assert clf.score(X_test, y_test) >= 0.9
