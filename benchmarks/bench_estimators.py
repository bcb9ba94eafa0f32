"""Causal estimators against scikit-learn models on bundled tables, clean and with bad labels.

For every table and every repetition (a fresh random train/test split, 75/25, stratified for
classification), each model is fitted on the training rows three times: on the clean labels, and
with 10 % and 20 % of the training labels corrupted (the 20 % include the 10 %); it is always
scored on the clean test rows. Corruption:

* regression, ``--corruption scale`` (default): the chosen targets are multiplied by 100;
  ``--corruption shift``: they are moved up by 50 robust standard deviations
  (``IQR / 1.349`` of the clean training targets);
* classification: the chosen labels are replaced by a different class drawn at random.

Tables (all ship inside the scikit-learn wheel, nothing is downloaded):

==================  =====================================================================
regression
``diabetes``        ``load_diabetes``: disease progression from 10 features (442 rows)
``wine_alcohol``    ``load_wine``: alcohol content from the 12 other measurements (178 rows)
``cancer_smooth``   ``load_breast_cancer``: "mean smoothness" from the 27 features that are
                    not a version of smoothness (569 rows)
``engel``           statsmodels' ``engel``: food expenditure from income (235 rows; needs
                    statsmodels, not in the default list)
classification
``breast_cancer``   ``load_breast_cancer``: 2 classes, 30 features (569 rows)
``wine``            ``load_wine``: 3 classes, 13 features (178 rows)
``iris``            ``load_iris``: 3 classes, 4 features (150 rows)
``digits``          ``load_digits``: 10 classes, 64 features (1797 rows)
==================  =====================================================================

Models (every one sees standardised inputs; the two neural networks have the same hidden layers):

* ``causal``: ``cauchylin.estimators.CausalRegressor`` / ``CausalClassifier`` with default settings;
* ``mlp``: ``MLPRegressor`` (targets standardised by ``TransformedTargetRegressor``) /
  ``MLPClassifier``, scikit-learn's settings but ``max_iter=1000``;
* ``mlp_es``: the same with ``early_stopping=True`` (10 % of the rows held out, as ours);
* ``huber``: ``HuberRegressor`` (regression only);
* ``ridge`` / ``logreg``: ``Ridge`` / ``LogisticRegression``;
* ``hgb``: ``HistGradientBoostingRegressor`` / ``HistGradientBoostingClassifier``.

Metrics on the clean test rows, averaged over the repetitions (with their standard error): mean
and median absolute error (regression), accuracy (classification), and the share of test targets
inside the causal regressor's central 50 % and 90 % predictive intervals. The summary prints, per
regression table and corruption level, each model's median-error ratio corrupted / clean (the
ratio of the means over the splits, and the mean and standard error of the per-split ratios),
and the clean ratio causal / MLP (the better of the two MLPs), against the goals: the causal
model degrades least (also counted split by split against the least-degrading other model) and
by at most 10 %; clean, it is within 10 % of the MLP. ``--from-json`` re-prints and re-draws the
raw results of an earlier run without fitting anything.

``--upstream`` runs, instead, the robustness protocol of the causal-sklearn package:
``make_regression(n_samples=4000, n_features=12, noise=1, random_state=42)``, a random 80/20
split per seed, 30 % of the training labels shuffled among themselves (a random permutation of
those rows' targets), and the test mean absolute error of ``CausalRegressor`` beside ordinary
least squares, ``HuberRegressor`` and ``QuantileRegressor`` (the median, unpenalised), clean and
corrupted.

Run:
    python benchmarks/bench_estimators.py           # every table, 10 splits (~10 min on 1 core)
    python benchmarks/bench_estimators.py --upstream --seeds 3
    python benchmarks/bench_estimators.py --datasets diabetes,iris --seeds 3
    python benchmarks/bench_estimators.py --seeds 20 --json docs/assets/benchmarks/estimators.json \
        --plot docs/assets/benchmarks/estimators.png  # the documentation's figure (~20 min)
    python benchmarks/bench_estimators.py --from-json docs/assets/benchmarks/estimators.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for folder in (ROOT, os.path.dirname(os.path.abspath(__file__))):
    if folder not in sys.path:
        sys.path.insert(0, folder)

import numpy as np  # noqa: E402
import sklearn  # noqa: E402
import torch  # noqa: E402
from sklearn import datasets  # noqa: E402
from sklearn.compose import TransformedTargetRegressor  # noqa: E402
from sklearn.ensemble import (  # noqa: E402
    HistGradientBoostingClassifier,
    HistGradientBoostingRegressor,
)
from sklearn.linear_model import (  # noqa: E402
    HuberRegressor,
    LinearRegression,
    LogisticRegression,
    QuantileRegressor,
    Ridge,
)
from sklearn.model_selection import train_test_split  # noqa: E402
from sklearn.neural_network import MLPClassifier, MLPRegressor  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from cauchylin.estimators import CausalClassifier, CausalRegressor  # noqa: E402

LEVELS = (0.0, 0.1, 0.2)
REGRESSION_MODELS = ("causal", "mlp", "mlp_es", "huber", "ridge", "hgb")
CLASSIFICATION_MODELS = ("causal", "mlp", "mlp_es", "logreg", "hgb")
DEGRADATION_GOAL = 1.10  # corrupted / clean median error of the causal regressor
CLEAN_GOAL = 1.10  # clean median error, causal / MLP


# --------------------------------------------------------------------------------------------
# tables


def _without(X: np.ndarray, columns: list[int]) -> np.ndarray:
    return np.delete(X, columns, axis=1)


def _load(name: str) -> tuple[str, np.ndarray, np.ndarray]:
    """``(task, X, y)`` of a table; task is ``"regression"`` or ``"classification"``."""
    if name == "diabetes":
        X, y = datasets.load_diabetes(return_X_y=True)
        return "regression", X, y
    if name == "wine_alcohol":
        X = datasets.load_wine().data
        return "regression", _without(X, [0]), X[:, 0]
    if name == "cancer_smooth":
        X = datasets.load_breast_cancer().data
        return "regression", _without(X, [4, 14, 24]), X[:, 4]  # mean, se, worst smoothness
    if name == "engel":
        try:
            import statsmodels.api as sm
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise SystemExit("table 'engel' needs statsmodels: pip install statsmodels") from exc
        d = sm.datasets.engel.load_pandas().data
        return "regression", d[["income"]].to_numpy(float), d["foodexp"].to_numpy(float)
    loaders = {
        "breast_cancer": datasets.load_breast_cancer,
        "wine": datasets.load_wine,
        "iris": datasets.load_iris,
        "digits": datasets.load_digits,
    }
    X, y = loaders[name](return_X_y=True)
    return "classification", X, y


DATASETS = ("diabetes", "wine_alcohol", "cancer_smooth", "breast_cancer", "wine", "iris", "digits")
EXTRA_DATASETS = ("engel",)  # run when named (they need more than scikit-learn)


# --------------------------------------------------------------------------------------------
# models


def _models(task: str, names: list[str], seed: int, args: argparse.Namespace) -> dict:
    hidden = tuple(args.hidden)
    nn_kw = {"hidden_layer_sizes": hidden, "random_state": seed}
    if args.max_iter is not None:
        nn_kw["max_iter"] = args.max_iter
    mlp_kw = {
        "hidden_layer_sizes": hidden,
        "max_iter": args.max_iter if args.max_iter is not None else 1000,
        "random_state": seed,
    }
    if task == "regression":
        factories: dict[str, Callable[[], object]] = {
            "causal": lambda: CausalRegressor(**nn_kw),
            "mlp": lambda: TransformedTargetRegressor(
                make_pipeline(StandardScaler(), MLPRegressor(**mlp_kw)),
                transformer=StandardScaler(),
            ),
            "mlp_es": lambda: TransformedTargetRegressor(
                make_pipeline(StandardScaler(), MLPRegressor(**mlp_kw, early_stopping=True)),
                transformer=StandardScaler(),
            ),
            "huber": lambda: make_pipeline(StandardScaler(), HuberRegressor(max_iter=1000)),
            "ridge": lambda: make_pipeline(StandardScaler(), Ridge()),
            "hgb": lambda: HistGradientBoostingRegressor(random_state=seed),
        }
    else:
        factories = {
            "causal": lambda: CausalClassifier(**nn_kw),
            "mlp": lambda: make_pipeline(StandardScaler(), MLPClassifier(**mlp_kw)),
            "mlp_es": lambda: make_pipeline(
                StandardScaler(), MLPClassifier(**mlp_kw, early_stopping=True)
            ),
            "logreg": lambda: make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000)),
            "hgb": lambda: HistGradientBoostingClassifier(random_state=seed),
        }
    return {name: factories[name]() for name in names if name in factories}


# --------------------------------------------------------------------------------------------
# corruption


def _corrupt(
    task: str, y: np.ndarray, rows: np.ndarray, corruption: str, n_classes: int, seed: int
) -> np.ndarray:
    """A copy of ``y`` whose ``rows`` are corrupted (see the module docstring)."""
    out = y.copy()
    if rows.size == 0:
        return out
    if task == "regression":
        if corruption == "scale":
            out[rows] = out[rows] * 100.0
        else:
            q25, q75 = np.percentile(y, [25.0, 75.0])
            out[rows] = out[rows] + 50.0 * (q75 - q25) / 1.349
        return out
    rng = np.random.default_rng([seed, 17])
    out[rows] = (out[rows] + rng.integers(1, n_classes, size=rows.size)) % n_classes
    return out


# --------------------------------------------------------------------------------------------
# one table


def _score(task: str, model: object, X: np.ndarray, y: np.ndarray) -> dict[str, float]:
    pred = model.predict(X)  # type: ignore[attr-defined]
    if task == "classification":
        return {"accuracy": float(np.mean(pred == y))}
    err = np.abs(pred - y)
    scores = {"mae": float(err.mean()), "medae": float(np.median(err))}
    if isinstance(model, CausalRegressor):
        for coverage in (0.5, 0.9):
            lower, upper = model.predict_interval(X, coverage=coverage)
            scores[f"coverage_{round(coverage * 100)}"] = float(
                np.mean((lower <= y) & (y <= upper))
            )
    return scores


def run_table(name: str, args: argparse.Namespace) -> dict:
    """Every model, level and repetition on one table: ``{model: {level: {metric: [..]}}}``."""
    task, X, y = _load(name)
    if task == "classification":
        _, y = np.unique(y, return_inverse=True)
    n_classes = int(y.max()) + 1 if task == "classification" else 0
    names = REGRESSION_MODELS if task == "regression" else CLASSIFICATION_MODELS
    names = [m for m in names if args.models is None or m in args.models]
    raw: dict[str, dict[str, dict[str, list[float]]]] = {}
    seconds: dict[str, float] = {m: 0.0 for m in names}
    for rep in range(args.seeds):
        seed = args.seed_offset + rep
        X_tr, X_te, y_tr, y_te = train_test_split(
            X,
            y,
            test_size=0.25,
            random_state=seed,
            stratify=y if task == "classification" else None,
        )
        order = np.random.default_rng([seed, 3]).permutation(len(y_tr))
        for level in args.levels:
            rows = order[: round(level * len(y_tr))]  # nested: the 20 % include the 10 %
            y_fit = _corrupt(task, y_tr, rows, args.corruption, n_classes, seed)
            for model_name, model in _models(task, names, seed, args).items():
                start = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # convergence warnings of the baselines
                    model.fit(X_tr, y_fit)  # type: ignore[attr-defined]
                seconds[model_name] += time.perf_counter() - start
                per_level = raw.setdefault(model_name, {}).setdefault(f"{level:g}", {})
                for metric, value in _score(task, model, X_te, y_te).items():
                    per_level.setdefault(metric, []).append(value)
        print(f"  {name}: repetition {rep + 1}/{args.seeds} done", file=sys.stderr)
    return {"task": task, "n_rows": len(y), "raw": raw, "fit_seconds": seconds}


UPSTREAM_MODELS = ("causal", "ols", "huber", "quantile")
UPSTREAM_SHARE = 0.3


def run_upstream(args: argparse.Namespace) -> dict:
    """causal-sklearn's robustness protocol (module docstring): test MAE per model and seed,
    ``{"clean": {model: [..]}, "shuffled": {model: [..]}}``."""
    X, y = datasets.make_regression(n_samples=4000, n_features=12, noise=1, random_state=42)
    out: dict[str, dict[str, list[float]]] = {"clean": {}, "shuffled": {}}
    seconds = {m: 0.0 for m in UPSTREAM_MODELS}
    for rep in range(args.seeds):
        seed = args.seed_offset + rep
        X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, random_state=seed)
        rng = np.random.default_rng([seed, 11])
        rows = rng.choice(len(y_tr), size=round(UPSTREAM_SHARE * len(y_tr)), replace=False)
        shuffled = y_tr.copy()
        shuffled[rows] = y_tr[rng.permutation(rows)]
        for level, y_fit in (("clean", y_tr), ("shuffled", shuffled)):
            models = {
                "causal": CausalRegressor(tuple(args.hidden), random_state=seed),
                "ols": LinearRegression(),
                "huber": make_pipeline(StandardScaler(), HuberRegressor(max_iter=1000)),
                "quantile": QuantileRegressor(quantile=0.5, alpha=0.0, solver="highs"),
            }
            for name, model in models.items():
                start = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    model.fit(X_tr, y_fit)
                seconds[name] += time.perf_counter() - start
                mae = float(np.mean(np.abs(model.predict(X_te) - y_te)))
                out[level].setdefault(name, []).append(mae)
        print(f"  upstream protocol: repetition {rep + 1}/{args.seeds} done", file=sys.stderr)
    return {"mae": out, "fit_seconds": seconds}


def print_upstream(result: dict) -> None:
    """The upstream protocol's table: mean (standard error) test MAE, clean and shuffled."""
    mae = result["mae"]
    print(
        "\n== causal-sklearn robustness protocol: make_regression(4000, 12, noise=1), "
        f"{UPSTREAM_SHARE:.0%} of the training labels shuffled; test MAE, mean (se)"
    )
    print(f"{'model':10s} {'clean':>16s} {'shuffled':>16s} {'fit s':>8s}")
    for name in UPSTREAM_MODELS:
        cells = []
        for level in ("clean", "shuffled"):
            m, se = _mean_se(mae[level][name])
            cells.append(f"{m:9.3f} ({se:.3f})")
        print(f"{name:10s} {cells[0]:>16s} {cells[1]:>16s} {result['fit_seconds'][name]:8.1f}")


def _mean_se(values: list[float]) -> tuple[float, float]:
    a = np.asarray(values, dtype=np.float64)
    se = float(a.std(ddof=1) / math.sqrt(a.size)) if a.size > 1 else 0.0
    return float(a.mean()), se


def summarise(table: dict, levels: list[float]) -> dict:
    """Means, standard errors and the ratios of the goals for one table."""
    task = table["task"]
    main = "medae" if task == "regression" else "accuracy"
    clean = f"{levels[0]:g}"
    summary: dict[str, dict] = {}
    for model_name, per_level in table["raw"].items():
        entry: dict[str, dict] = {}
        for level, metrics in per_level.items():
            entry[level] = {m: _mean_se(v) for m, v in metrics.items()}
        base = entry[clean][main][0]
        for level in entry:
            value = entry[level][main][0]
            entry[level]["ratio_to_clean"] = value / base if base > 0 else math.nan
            # the same ratio split by split (paired: same split, same test rows)
            pairs = zip(per_level[level][main], per_level[clean][main], strict=True)
            ratios = [v / c if c > 0 else math.nan for v, c in pairs]
            entry[level]["split_ratios"] = ratios
            entry[level]["split_ratio"] = _mean_se(ratios)
        summary[model_name] = entry
    return summary


# --------------------------------------------------------------------------------------------
# printing


def print_table(name: str, table: dict, summary: dict, levels: list[float]) -> None:
    task = table["task"]
    labels = [f"{level:g}" for level in levels]
    print(f"\n{name} ({task}, {table['n_rows']} rows)")
    if task == "regression":
        head = "".join(f"  MedAE @{float(lv) * 100:>3.0f}%        MAE" for lv in labels)
        print(f"  {'model':<8s}{head}   fit s")
        for model_name, entry in summary.items():
            cells = "".join(
                f"  {entry[lv]['medae'][0]:9.4g} ±{entry[lv]['medae'][1]:<7.2g}"
                f"{entry[lv]['mae'][0]:9.4g}"
                for lv in labels
            )
            print(f"  {model_name:<8s}{cells}  {table['fit_seconds'][model_name]:6.1f}")
        print(
            "  median-error ratio corrupted / clean: ratio of the means "
            "(mean of the per-split ratios ± standard error)"
        )
        for model_name, entry in summary.items():
            ratios = "  ".join(
                f"@{float(lv) * 100:.0f}% {entry[lv]['ratio_to_clean']:8.3f} "
                f"({entry[lv]['split_ratio'][0]:.3f} ± {entry[lv]['split_ratio'][1]:.3f})"
                for lv in labels[1:]
            )
            print(f"    {model_name:<8s} {ratios}")
        causal = summary.get("causal")
        if causal is not None:
            cover = "  ".join(
                f"@{float(lv) * 100:.0f}%: 50% -> {causal[lv]['coverage_50'][0]:.2f}, "
                f"90% -> {causal[lv]['coverage_90'][0]:.2f}"
                for lv in labels
            )
            print(f"  causal interval coverage on clean test rows: {cover}")
    else:
        head = "".join(f"  accuracy @{float(lv) * 100:>3.0f}%" for lv in labels)
        print(f"  {'model':<8s}{head}   fit s")
        for model_name, entry in summary.items():
            cells = "".join(
                f"  {entry[lv]['accuracy'][0]:7.4f} ±{entry[lv]['accuracy'][1]:<6.2g}"
                for lv in labels
            )
            print(f"  {model_name:<8s}{cells}  {table['fit_seconds'][model_name]:6.1f}")


def goals(summaries: dict[str, tuple[dict, dict]], levels: list[float]) -> list[dict]:
    """The goal checks of every regression table (printed and returned)."""
    rows = []
    labels = [f"{level:g}" for level in levels]
    print("\ngoals (regression, median absolute error on the clean test rows):")
    for name, (table, summary) in summaries.items():
        if table["task"] != "regression" or "causal" not in summary:
            continue
        causal = summary["causal"]
        mlps = {m: summary[m][labels[0]]["medae"][0] for m in ("mlp", "mlp_es") if m in summary}
        if mlps:
            best_mlp = min(mlps, key=mlps.__getitem__)  # the goal is against the better MLP
            ratio = causal[labels[0]]["medae"][0] / mlps[best_mlp]
            ok = ratio <= CLEAN_GOAL
            print(
                f"  {name:<14s} clean: causal / {best_mlp} = {ratio:.3f} "
                f"({'ok' if ok else 'missed'}: goal <= {CLEAN_GOAL})"
            )
            rows.append(
                {
                    "table": name,
                    "level": 0.0,
                    "versus": best_mlp,
                    "causal_over_mlp": ratio,
                    "ok": ok,
                }
            )
        for lv in labels[1:]:
            own = causal[lv]["ratio_to_clean"]
            others = {m: s[lv]["ratio_to_clean"] for m, s in summary.items() if m != "causal"}
            best_other = min(others.items(), key=lambda kv: kv[1]) if others else ("-", math.inf)
            least = own <= best_other[1]
            within = own <= DEGRADATION_GOAL
            wins, splits = 0, 0
            if best_other[0] in summary:
                mine = causal[lv]["split_ratios"]
                theirs = summary[best_other[0]][lv]["split_ratios"]
                wins, splits = sum(a < b for a, b in zip(mine, theirs, strict=True)), len(mine)
            print(
                f"  {name:<14s} {float(lv) * 100:>3.0f}% corrupted: causal x{own:.3f} "
                f"({'ok' if within else 'missed'}: goal <= {DEGRADATION_GOAL}); "
                f"least-degrading other: {best_other[0]} x{best_other[1]:.3f} "
                f"({'causal degrades least' if least else 'causal does not degrade least'}; "
                f"less than {best_other[0]} in {wins} of {splits} splits)"
            )
            rows.append(
                {
                    "table": name,
                    "level": float(lv),
                    "causal_ratio": own,
                    "best_other": best_other[0],
                    "best_other_ratio": best_other[1],
                    "degrades_least": least,
                    "within_goal": within,
                    "splits_causal_degrades_less": wins,
                    "splits": splits,
                }
            )
    return rows


# --------------------------------------------------------------------------------------------
# figure


def plot(summaries: dict[str, tuple[dict, dict]], levels: list[float], note: str, path: str) -> str:
    """Left: median-error ratio corrupted / clean per regression table and level (bars above the
    axis are cut and labelled). Right: classification accuracy at the largest corruption level,
    with a tick at each model's clean accuracy."""
    from _plotting import OURS, TARGET, footnote, label_bar, pyplot, save

    plt = pyplot()
    labels = [f"{level:g}" for level in levels]
    reg = {n: s for n, (t, s) in summaries.items() if t["task"] == "regression"}
    cls = {n: s for n, (t, s) in summaries.items() if t["task"] == "classification"}
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    palette = {
        "causal": OURS,
        "mlp": "#bdbdbd",
        "mlp_es": "#757575",
        "huber": "#ffb300",
        "ridge": "#8d6e63",
        "logreg": "#8d6e63",
        "hgb": "#43a047",
    }
    top = 1.4
    if reg and len(labels) > 1:
        groups = [(n, lv) for n in reg for lv in labels[1:]]
        models = list(next(iter(reg.values())))
        width = 0.8 / len(models)
        for i, model in enumerate(models):
            xs = [g + (i - (len(models) - 1) / 2) * width for g in range(len(groups))]
            values = [reg[n][model][lv]["ratio_to_clean"] for n, lv in groups]
            shown = [min(v, top) for v in values]
            left.bar(xs, shown, width * 0.95, label=model, color=palette.get(model, "#616161"))
            for x, v in zip(xs, values, strict=True):
                if v > top:  # a cut bar: its value written upwards inside it
                    left.text(
                        x,
                        top - 0.01,
                        f"x{v:.0f}",
                        rotation=90,
                        ha="center",
                        va="top",
                        fontsize=6,
                        color="white",
                    )
                else:
                    label_bar(left, x, v, f"{v:.2f}", fontsize=6)
        left.axhline(1.0, color="black", lw=0.8)
        left.axhline(DEGRADATION_GOAL, color=TARGET, lw=1, ls="--", label="goal x1.1")
        left.set_ylim(0.9, top * 1.08)
        left.set_xticks(range(len(groups)))
        left.set_xticklabels([f"{n}\n{float(lv) * 100:.0f}%" for n, lv in groups], fontsize=8)
        left.set_ylabel("median |error|: corrupted / clean")
        left.set_title("Regression: degradation with corrupted targets (lower is better)")
        left.legend(fontsize=7, ncol=4, loc="upper left")
    if cls and len(labels) > 1:
        worst = labels[-1]
        names = list(cls)
        models = list(next(iter(cls.values())))
        width = 0.8 / len(models)
        for i, model in enumerate(models):
            xs = [g + (i - (len(models) - 1) / 2) * width for g in range(len(names))]
            noisy = [cls[n][model][worst]["accuracy"][0] for n in names]
            clean = [cls[n][model][labels[0]]["accuracy"][0] for n in names]
            left_edge = [x - width * 0.45 for x in xs]
            right.bar(xs, noisy, width * 0.95, label=model, color=palette.get(model, "#616161"))
            right.hlines(clean, left_edge, [x + width * 0.45 for x in xs], color="black", lw=1.2)
        right.set_xticks(range(len(names)))
        right.set_xticklabels(names, fontsize=8)
        right.set_ylim(0.4, 1.02)
        right.set_ylabel("test accuracy")
        right.set_title(
            f"Classification: accuracy, {float(worst) * 100:.0f}% of labels flipped (bars), "
            "clean (ticks)"
        )
        right.legend(fontsize=7, ncol=5, loc="lower left")
    footnote(fig, note)
    return save(fig, path)


# --------------------------------------------------------------------------------------------


def _write_json(path: str, payload: dict) -> None:
    """Write through a temporary file in the same folder, then rename (no half-written file)."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f, indent=2)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give it a normal file's mode
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    print(f"wrote {path}")


def _csv(parser: argparse.ArgumentParser, flag: str, text: str, allowed: tuple) -> list[str]:
    items = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in items if s not in allowed]
    if unknown or not items:
        parser.error(f"{flag}: unknown {unknown}; choose from {', '.join(allowed)}")
    return items


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", default=",".join(DATASETS), help="comma list of tables")
    parser.add_argument(
        "--models", default=None, help="comma list of models (default: all that apply)"
    )
    parser.add_argument("--seeds", type=int, default=10, help="repeated random splits")
    parser.add_argument(
        "--seed-offset", type=int, default=0, help="first split seed (tune on other splits)"
    )
    parser.add_argument(
        "--levels", default="0,0.1,0.2", help="comma list of corrupted shares, starting with 0"
    )
    parser.add_argument("--corruption", default="scale", choices=["scale", "shift"])
    parser.add_argument(
        "--hidden",
        default=None,
        help="hidden layer sizes of both neural networks, e.g. 64,64 (default: the causal "
        "estimators' default)",
    )
    parser.add_argument(
        "--max-iter", type=int, default=None, help="epochs cap of both networks (smoke tests)"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument(
        "--from-json",
        default=None,
        help="fit nothing: summarise, print and draw the raw results of an earlier --json file",
    )
    parser.add_argument("--json", default=None, help="also write the results to this file")
    parser.add_argument("--plot", default=None, help="also draw the results to this PNG file")
    parser.add_argument(
        "--upstream",
        action="store_true",
        help="run causal-sklearn's robustness protocol instead of the tables (see above)",
    )
    args = parser.parse_args(argv)

    names = _csv(parser, "--datasets", args.datasets, DATASETS + EXTRA_DATASETS)
    if args.models is not None:
        args.models = _csv(
            parser,
            "--models",
            args.models,
            tuple(dict.fromkeys(REGRESSION_MODELS + CLASSIFICATION_MODELS)),
        )
    try:
        args.levels = [float(s) for s in args.levels.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--levels: expected comma-separated numbers, got {args.levels!r}")
    if not args.levels or args.levels[0] != 0.0 or not all(0 <= v < 1 for v in args.levels):
        parser.error(f"--levels: expected shares in [0, 1) starting with 0, got {args.levels}")
    if args.seeds < 1:
        parser.error("--seeds must be >= 1")
    if args.hidden is None:
        args.hidden = list(CausalRegressor().hidden_layer_sizes)
    else:
        try:
            args.hidden = [int(s) for s in args.hidden.split(",") if s.strip()]
        except ValueError:
            parser.error(f"--hidden: expected comma-separated integers, got {args.hidden!r}")
    torch.set_num_threads(args.threads)

    command = "python benchmarks/bench_estimators.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    if args.from_json:
        with open(args.from_json) as f:
            earlier = json.load(f)
        machine, command = earlier["machine"], earlier["command"]
        settings = earlier["settings"]
        args.levels = settings["levels"]
        print(f"raw results of: {command}")
    else:
        machine = f"CPU, {torch.get_num_threads()} torch thread(s)"
        settings = {
            "seeds": args.seeds,
            "seed_offset": args.seed_offset,
            "levels": args.levels,
            "corruption": args.corruption,
            "hidden": args.hidden,
            "max_iter": args.max_iter,
        }
    print(
        f"{machine}; torch {torch.__version__}, scikit-learn {sklearn.__version__}; "
        f"{settings['seeds']} splits from seed {settings['seed_offset']}; corruption "
        f"{settings['corruption']}; hidden layers {tuple(settings['hidden'])}"
    )
    if args.upstream:
        upstream = run_upstream(args)
        print_upstream(upstream)
        result = {"machine": machine, "command": command, "settings": settings, **upstream}
        if args.json:
            _write_json(args.json, result)
        return result
    summaries: dict[str, tuple[dict, dict]] = {}
    for name in earlier["tables"] if args.from_json else names:
        if args.from_json:
            table = {k: v for k, v in earlier["tables"][name].items() if k != "summary"}
        else:
            table = run_table(name, args)
        summary = summarise(table, args.levels)
        summaries[name] = (table, summary)
        print_table(name, table, summary, args.levels)
    goal_rows = goals(summaries, args.levels)
    payload = {
        "machine": machine,
        "torch": torch.__version__,
        "sklearn": sklearn.__version__,
        "command": command,
        "settings": settings,
        "tables": {n: {**t, "summary": s} for n, (t, s) in summaries.items()},
        "goals": goal_rows,
    }
    if args.json:
        _write_json(args.json, payload)
    if args.plot:
        plot(summaries, args.levels, f"{machine}, torch {torch.__version__}.  {command}", args.plot)
    return payload


if __name__ == "__main__":
    main()
