"""Quality: the causal language model against language-model and regression baselines, at equal budget.

For each table every model gets the same Qwen2 backbone (H=64, 2 layers, built from a config,
nothing downloaded), the same steps, batch, learning rate, cosine schedule and seed
(``cauchylin_hf.app.compare``):

* ``causal``: the causal language model with the library's defaults (``--variants`` adds causal
  models with other settings, e.g. the previous default of the regression loss);
* ``CE text LM``: a plain softmax cross-entropy language model on the digit text, read two ways:
  the first number of its greedy continuation, and (``, median of 32 samples``) the median of 32
  sampled continuations' numbers with their sample quantiles as intervals;
* ``CE + NTL``: the same plus the Number Token Loss (``ntloss``, NTL-WAS, weight 0.3), read both
  ways;
* ``MSE head``: a pointwise regression head (a linear layer on the final hidden state before the
  target, squared error in the value space, the causal model's ``<NUM>`` inputs, no text loss).

Each is scored on the *target number* (the last number) of every held-out text: MAE, median
absolute error (MdAE), Spearman with the truth, coverage and interval score of the central
50/80/90/95% intervals (and coverage at every level of the reliability diagram), the log score
and the PIT's Kolmogorov-Smirnov distance from uniform where a model gives a density (the causal
model), the spread of its predictions (sd of ``sign(y) ln(1 + |y|)`` over the truth's: near 0
means a constant), next-token accuracy on the text tokens that are not numbers, training time.
The causal model is scored with its calibrated intervals (the package's default: a readout per
context solved after training, split-conformal widths on 20% of the training rows held out of
training) and with its raw Cauchy intervals; beside it, ``ridge readout (own features)``: a ridge
regression (scikit-learn's ``RidgeCV``) fitted on the causal model's own final hidden state at
the target position of every training row, the ceiling of a linear readout of its features.
Beside them, per table: predicting the training median, and on the raw columns
``LinearRegression``, ``HistGradientBoostingRegressor`` and ``HuberRegressor``, the first two
also with cross-conformal (CV+) intervals from MAPIE as the coverage reference.
``--learning-rate``, ``--batch-size``, ``--lr-scheduler`` and ``--adam-beta2`` change the shared
budget of every model (a grid with other values needs a ``--json`` of its own: ``--resume``
refuses to add to one that ran with others).
``--corrupt`` retrains the causal model (and each ``--variants`` variant), the CE and MSE models
at 1000 steps with 10% of the training targets multiplied by 100. ``--pretrained`` adds the path users take with a real decoder: a backbone first
trained with plain cross-entropy on other text (the demo corpus, ``--pretrain-steps``), then
fine-tuned on the table for 1000 steps either as the causal model (``from_base``) or by continued
cross-entropy.

Tables: ``demo`` (the embedded numeric corpus), ``cancer`` (scikit-learn's breast_cancer: seven
"mean" features, target "mean area"), ``diabetes`` (unscaled: ten features, target progression),
``friedman1``-``friedman3`` (scikit-learn's generators, 600 rows, seed 0, their default noise 0,
features and target written with four significant digits), ``wine`` (the twelve other columns,
target flavanoids: the column a linear regression on the others predicts best); from
statsmodels' datasets (the ``bench`` extra): ``engel`` (235 households: food expenditure from
income), ``grunfeld`` (a panel of 10 firms over 20 years: investment from firm, year, value and
capital) and ``sunspots`` (the yearly sunspot number from the three years before, the last 20%
of the years held out in time order); ``heavy``: Friedman #1 with Student-t noise of 1.5 degrees
of freedom on the target (infinite variance; the case the Cauchy likelihood is for). 80/20 splits
with seed 0 (sunspots: in time order); ``TABLE@S`` (``wine@1``) splits a table by the shuffle of
seed ``S`` instead, to tell a table's result from its one split.

Results are written to ``--json`` after every training run (a rerun with ``--resume`` skips the
runs already there), so an interrupted grid keeps what it measured. ``--ablation`` trains the
causal model once per changed default (each set back to its previous value alone).

Run (the full grid is many hours on 2 shared cores; one training process at a time)::

    python benchmarks/bench_quality.py --steps 300,1000,3000 --seeds 0,1,2 --corrupt 0.1 \\
        --pretrained --json docs/assets/benchmarks/quality_curves.json \\
        --plot docs/assets/benchmarks/quality_curves.png --resume
    python benchmarks/bench_quality.py --ablation --tables cancer --seeds 0,1,2,3,4 \\
        --json docs/assets/benchmarks/quality_ablation.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

LEVELS = (0.5, 0.8, 0.9, 0.95)
# the levels of the reliability diagram: the package's calibrated levels
DIAGRAM_LEVELS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)
SAMPLES = 32
QUICK_SIZES: dict[str, int] = {
    "hidden_size": 16, "num_layers": 1, "num_heads": 2, "vocab_size": 300, "batch_size": 8
}  # fmt: skip
"""The toy backbone and batch of ``--quick`` runs (the scripts' smoke tests), for this script
and the probes that train its recipe."""
TABLES = (
    "demo",
    "cancer",
    "diabetes",
    "friedman1",
    "friedman2",
    "friedman3",
    "wine",
    "engel",
    "grunfeld",
    "sunspots",
    "heavy",
    "penguins",
    "cars",
    "barley",
    "iris",
    "weather",
    "modechoice",
    "statecrime",
)
WORD_TABLES = ("penguins", "cars", "barley", "iris", "weather", "modechoice")
"""Real tables with word columns (the ``bench`` extra's palmerpenguins, vega_datasets and
statsmodels)."""
UNSEEN_TABLES = ("iris", "weather", "modechoice", "statecrime")
"""Tables added after the defaults and options were chosen, to check them on tables they were not
tuned on (no default or option of the package was ever measured on them before)."""
IN_TIME_ORDER = ("sunspots",)
"""Tables whose held-out rows are the last ones in time: one split only."""
SPLIT_MARK = "@"
"""``wine@3``: the table ``wine`` split 80/20 by a shuffle of seed 3 (plain ``wine``: seed 0,
the split of every table on the benchmark page). Each such label is a table of its own in the
runs, the reports and the references."""


def table_split(label: str) -> tuple[str, int]:
    """``(table, split seed)`` of a table label (``"wine@3"`` -> ``("wine", 3)``).

    Raises:
        ValueError: an unknown table, a split seed that is not an integer >= 1, or a split seed
            on a table with one split (the demo corpus, tables in time order).
    """
    name, mark, seed = label.partition(SPLIT_MARK)
    if name not in TABLES:
        raise ValueError(f"unknown table {name!r}; known: {', '.join(TABLES)}")
    if not mark:
        return name, 0
    if not seed.isdigit() or int(seed) < 1:
        raise ValueError(f"{label!r}: the split seed after {SPLIT_MARK!r} must be an integer >= 1")
    if name == "demo" or name in IN_TIME_ORDER:
        raise ValueError(f"{label!r}: {name} has one split (its held-out rows are fixed)")
    return name, int(seed)


PRETRAIN_TEXTS = 4000
FINETUNE_STEPS = 1000

# The defaults chosen by this benchmark, and the values they replaced (the ablation sets each
# back alone). Keep in step with CauchyLMConfig's defaults.
ABLATION: dict[str, dict[str, Any]] = {
    "value_space=identity": {"value_space": "identity"},
    "gamma_init=10": {"gamma_init": 10.0},
    "b_noise_init=0.1": {"b_noise_init": 0.1},
    "alpha=0": {"alpha": 0.0},
    "w_num_scale=None (unit w_num)": {"w_num_scale": None},
    "classifier_lr_scale=1": {"classifier_lr_scale": 1.0},
    "threshold=100": {"threshold": 100.0},
}

TRAINING_KEY = "min_rows_to_calibrate"
_PACKAGE: dict[str, Any] = {}  # the package's own value of each TRAINING_KEY, in this process
"""A variant's setting that is not a ``CauchyLMConfig`` field: the row count below which
``calibration="auto"`` holds nothing out and calibrates cross-conformally."""

SHARED_KEY = "shared_calibration"
SHARED = "causal (one calibration hold-out for every seed)"
SHARED_DRAW = 1000
"""The seed that draws the shared hold-out of :data:`SHARED` (not a training seed): a fifth of
the training rows (:data:`cauchylin.conformal.CALIBRATION_FRACTION`, also below 100 rows)."""

# Causal models with other settings (``--variants``); "causal" is the defaults.
VARIANTS: dict[str, dict[str, Any]] = {
    "causal": {},
    "causal (context-scaled gradient)": {"reg_scale_power": 2.0, "reg_context_tokens": 2},
    "causal (context-scaled, model's scale as spread)": {"reg_scale_power": 2.0},
    "causal (classifier_lr_scale=1)": {"classifier_lr_scale": 1.0},
    "causal (readout_numbers=0)": {"readout_numbers": 0},
    "causal (readout_numbers=16)": {"readout_numbers": 16},
    # the defaults' scale cutoff, by name (the defaults since the cutoff became one)
    "causal (reg_scale_cutoff=20)": {"reg_scale_cutoff": 20.0, "reg_context_tokens": 2},
    "causal (no scale cutoff)": {"reg_scale_cutoff": None, "reg_context_tokens": 0},
    # each text's last number (the table's target) weighed apart in the regression term
    "causal (reg_target_weight=2)": {"reg_target_weight": 2.0},
    "causal (reg_target_weight=4)": {"reg_target_weight": 4.0},
    # every row trained on below 500 rows, intervals cross-conformal (a training setting, not a
    # config field: ``_job`` sets cauchylin.conformal.MIN_ROWS_TO_CALIBRATE from it)
    "causal (cross-conformal below 500 rows)": {TRAINING_KEY: 500},
    # the same fifth of the training rows held out to calibrate on at every seed (a training
    # setting too), so that the seeds' networks can be calibrated as one ensemble on it
    SHARED: {SHARED_KEY: True},
}


def periodic_variant(sigma: float, frequencies: int) -> tuple[str, dict[str, Any]]:
    """The causal variant of ``--periodic``: its row name and its settings."""
    name = f"causal (periodic, K={frequencies}, sigma={_fmt(sigma)})"
    settings = {
        "numeric_encoding": "periodic",
        "numeric_frequencies": frequencies,
        "numeric_sigma": sigma,
    }
    return name, settings


# Model kinds (``--models``) and the names of the rows they produce.
MODELS = {
    "causal": "causal",
    "text": "CE text LM",
    "ntl": "CE + NTL",
    "mse": "MSE head",
}
SAMPLED = f", median of {SAMPLES} samples"


def _fmt(x: float) -> str:
    s = repr(float(x))
    return s[:-2] if s.endswith(".0") else s


def _sig4(x: float) -> str:
    """``x`` with four significant digits, in plain decimals (never an exponent)."""
    if x == 0:
        return "0"
    digits = max(0, 3 - math.floor(math.log10(abs(x))))
    s = f"{x:.{digits}f}"
    return s.rstrip("0").rstrip(".") if "." in s else s


def _rows(names: list[str], X: Any, y: Any, target: str, fmt: Any) -> list[str]:
    return [
        ", ".join(f"{n} {fmt(v)}" for n, v in zip(names, x, strict=True)) + f", {target} {fmt(t)}."
        for x, t in zip(X, y, strict=True)
    ]


def load_table(label: str, quick: bool = False) -> tuple[list[str], list[str], Any]:
    """``(train_texts, heldout_texts, (X_train, y_train, X_test, y_test) or None)`` of a table
    label (:func:`table_split`: ``"wine"``, or ``"wine@3"`` for another 80/20 split)."""
    try:
        name, split = table_split(label)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    if name == "demo":
        from cauchylin_hf.app.corpus import make_splits

        n_train, n_held = (400, 40) if quick else (4000, 200)
        s = make_splits(n_train, n_held, seed=0)
        return list(s.train), list(s.heldout), None
    import numpy as np
    from sklearn import datasets

    fmt = _fmt
    if name == "cancer":
        d = datasets.load_breast_cancer()
        cols = [0, 1, 2, 4, 5, 6, 7]
        names = [
            "radius",
            "texture",
            "perimeter",
            "smoothness",
            "compactness",
            "concavity",
            "concave points",
        ]
        X, y, target = d.data[:, cols], d.data[:, 3], "area"
    elif name == "diabetes":
        d = datasets.load_diabetes(scaled=False)
        # s1..s6 are serum measurements; their names keep digits out of the field names
        names = ["age", "sex", "bmi", "bp", "tc", "ldl", "hdl", "tch", "ltg", "glu"]
        X, y, target = d.data, d.target, "progression"
    elif name in ("friedman1", "friedman2", "friedman3"):
        make = getattr(datasets, f"make_{name}")
        X, y = make(n_samples=600, random_state=0)
        if name == "friedman1":
            names = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]
            target = "response"
        else:  # the circuit of Friedman #2/#3: resistance, frequency, inductance, capacitance
            names = ["resistance", "frequency", "inductance", "capacitance"]
            target = "impedance" if name == "friedman2" else "phase"
        fmt = _sig4
        X = np.vectorize(lambda v: float(_sig4(v)))(X)
        y = np.vectorize(lambda v: float(_sig4(v)))(y)
    elif name == "heavy":
        X, y = datasets.make_friedman1(n_samples=600, random_state=0)
        names = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]
        target = "response"
        y = y + np.random.default_rng(0).standard_t(1.5, size=y.shape)
        fmt = _sig4
        X = np.vectorize(lambda v: float(_sig4(v)))(X)
        y = np.vectorize(lambda v: float(_sig4(v)))(y)
    elif name in ("engel", "grunfeld", "sunspots", "statecrime"):
        return _statsmodels_table(name, quick, split)
    elif name in WORD_TABLES:
        return _word_table(name, quick, split)
    elif name == "wine":
        d = datasets.load_wine()
        j = d.feature_names.index("flavanoids")
        # digit-free field names (od280/od315 is the optical-density ratio)
        names = [
            n.replace("od280/od315_of_diluted_wines", "density ratio").replace("_", " ")
            for k, n in enumerate(d.feature_names)
            if k != j
        ]
        X, y, target = np.delete(d.data, j, axis=1), d.data[:, j], "flavanoids"
    else:
        raise SystemExit(f"unknown table {name!r}")
    return _split(_rows(names, X, y, target, fmt), X, y, quick, split)


def _statsmodels_table(name: str, quick: bool, split: int) -> tuple[list[str], list[str], Any]:
    """The tables from statsmodels' bundled datasets (the rows as text, and numeric columns)."""
    import numpy as np

    try:
        import statsmodels.api as sm
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise SystemExit(
            f"table {name!r} needs statsmodels: pip install 'cauchylin[bench]'"
        ) from exc
    d = getattr(sm.datasets, name).load_pandas().data
    if name == "engel":
        rows = [
            f"income {_sig4(a)} -> food expenditure {_sig4(b)}."
            for a, b in zip(d["income"], d["foodexp"], strict=True)
        ]
        X = np.array([[float(_sig4(a))] for a in d["income"]])
        y = np.array([float(_sig4(b)) for b in d["foodexp"]])
    elif name == "grunfeld":
        firms = sorted(set(d["firm"]))
        rows = [
            f"firm {f}, year {int(t)}, value {_sig4(v)}, capital {_sig4(c)} -> investment "
            f"{_sig4(i)}."
            for f, t, v, c, i in zip(
                d["firm"], d["year"], d["value"], d["capital"], d["invest"], strict=True
            )
        ]
        onehot = np.array([[float(f == g) for g in firms] for f in d["firm"]])
        X = np.c_[
            onehot,
            d["year"].to_numpy(float),
            [float(_sig4(v)) for v in d["value"]],
            [float(_sig4(c)) for c in d["capital"]],
        ]
        y = np.array([float(_sig4(i)) for i in d["invest"]])
    elif name == "statecrime":  # 51 states: the murder rate from five census shares
        cols = ["poverty", "hs_grad", "single", "white", "urban"]
        label = {"hs_grad": "high school"}
        rows = [
            ", ".join(f"{label.get(c, c)} {_sig4(float(r[c]))}" for c in cols)
            + f" -> murder {_sig4(float(r['murder']))}."
            for _, r in d.iterrows()
        ]
        X = np.array([[float(_sig4(float(r[c]))) for c in cols] for _, r in d.iterrows()])
        y = np.array([float(_sig4(float(v))) for v in d["murder"]])
    else:  # sunspots: the year's number from the three before it, held out in time order
        a = d["SUNACTIVITY"].to_numpy(float)
        years = d["YEAR"].to_numpy(int)
        rows, X_list = [], []
        for t in range(3, len(a)):
            rows.append(
                f"year {years[t]}, third last {_sig4(a[t - 3])}, second last {_sig4(a[t - 2])}, "
                f"last {_sig4(a[t - 1])} -> sunspots {_sig4(a[t])}."
            )
            X_list.append([years[t], a[t - 3], a[t - 2], a[t - 1]])
        X = np.vectorize(lambda v: float(_sig4(v)))(np.array(X_list))
        y = np.array([float(_sig4(v)) for v in a[3:]])
    return _split(rows, X, y, quick, split, name in IN_TIME_ORDER)


def _word_table(name: str, quick: bool, split: int) -> tuple[list[str], list[str], Any]:
    """Real tables whose rows hold words as well as numbers (words one-hot for scikit-learn).

    ``penguins`` (palmerpenguins, 333 complete rows: body mass from species, island, sex and
    three measurements), ``cars`` (vega_datasets, 392 complete rows: miles per gallon from
    cylinders, displacement, horsepower, weight, acceleration, model year and origin) and
    ``barley`` (vega_datasets, 120 rows: yield from variety, year and site; the site, a word,
    comes just before the target). Kept apart to check the defaults on (:data:`UNSEEN_TABLES`):
    ``iris`` (vega_datasets, 150 rows: petal width from the other three measurements and the
    species, a word just before the target), ``weather`` (vega_datasets' Seattle weather, 1461
    days: the high temperature from the month, precipitation, low, wind and the sky's word) and
    ``modechoice`` (statsmodels, 840 trips: the generalised cost from the mode's word, waiting
    time, in-vehicle cost and time, household income and party size).
    """
    import numpy as np

    try:
        if name == "penguins":
            from palmerpenguins import load_penguins

            d = load_penguins().dropna().reset_index(drop=True)
        elif name == "modechoice":
            import statsmodels.api as sm

            d = sm.datasets.modechoice.load_pandas().data
        else:
            from vega_datasets import local_data

            load = {"weather": "seattle_weather"}.get(name, name)
            d = getattr(local_data, load)().dropna().reset_index(drop=True)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise SystemExit(
            f"table {name!r} needs the bench extra: pip install 'cauchylin[bench]'"
        ) from exc
    if name == "penguins":
        words, numbers, target = (
            ["species", "island", "sex"],
            ["bill_length_mm", "bill_depth_mm", "flipper_length_mm"],
            "body_mass_g",
        )
        order = ["species", "island", "bill_length_mm", "bill_depth_mm", "flipper_length_mm", "sex"]
        label = {
            "bill_length_mm": "bill length",
            "bill_depth_mm": "bill depth",
            "flipper_length_mm": "flipper length",
            "body_mass_g": "body mass",
        }
    elif name == "cars":
        words, numbers, target = (
            ["Origin"],
            ["Cylinders", "Displacement", "Horsepower", "Weight_in_lbs", "Acceleration"],
            "Miles_per_Gallon",
        )
        d = d.assign(model_year=d["Year"].dt.year)
        numbers = [*numbers, "model_year"]
        order = ["Origin", *numbers]
        label = {
            "Weight_in_lbs": "weight",
            "Miles_per_Gallon": "miles per gallon",
            "model_year": "model year",
        }
    elif name == "barley":
        words, numbers, target = ["variety", "site"], ["year"], "yield"
        order = ["variety", "year", "site"]
        label = {}
    elif name == "iris":
        words, numbers, target = (
            ["species"],
            ["sepalLength", "sepalWidth", "petalLength"],
            "petalWidth",
        )
        order = [*numbers, "species"]
        label = {
            "sepalLength": "sepal length",
            "sepalWidth": "sepal width",
            "petalLength": "petal length",
            "petalWidth": "petal width",
        }
    elif name == "weather":  # Seattle, 2012-2015: the day's high from its low, rain, wind, sky
        d = d.assign(month=d["date"].dt.month)
        words, numbers, target = (
            ["weather"],
            ["month", "precipitation", "temp_min", "wind"],
            "temp_max",
        )
        order = [*numbers, "weather"]
        label = {"temp_min": "low", "temp_max": "high", "weather": "sky"}
    else:  # modechoice: the generalised cost of a trip from its mode, times, cost and party
        modes = {1.0: "air", 2.0: "train", 3.0: "bus", 4.0: "car"}
        d = d.assign(mode=d["mode"].map(modes))
        words, numbers, target = ["mode"], ["ttme", "invc", "invt", "hinc", "psize"], "gc"
        order = ["mode", *numbers]
        label = {
            "ttme": "waiting time",
            "invc": "vehicle cost",
            "invt": "vehicle time",
            "hinc": "household income",
            "psize": "party size",
            "gc": "cost",
        }

    def head(col: str) -> str:
        return label.get(col, col.replace("_", " ").lower())

    def cell(col: str, v: Any) -> str:
        return str(v) if col in words else _sig4(float(v))

    rows = [
        ", ".join(f"{head(c)} {cell(c, r[c])}" for c in order)
        + f" -> {head(target)} {_sig4(float(r[target]))}."
        for _, r in d.iterrows()
    ]
    onehot = [
        np.array([[float(v == level) for level in sorted(set(d[w]))] for v in d[w]]) for w in words
    ]
    X = np.c_[
        tuple([*onehot, *(np.array([float(_sig4(float(v))) for v in d[c]]) for c in numbers)])
    ]
    y = np.array([float(_sig4(float(v))) for v in d[target]])
    return _split(rows, X, y, quick, split)


def _split(
    rows: list[str], X: Any, y: Any, quick: bool, split: int = 0, in_time_order: bool = False
) -> tuple[list[str], list[str], Any]:
    """The 80/20 split of every table (shuffled with seed ``split`` unless in time order)."""
    idx = list(range(len(rows)))
    if not in_time_order:
        random.Random(split).shuffle(idx)
    cut = int(0.8 * len(rows))
    tr, te = idx[:cut], idx[cut:]
    if quick:
        tr, te = tr[:120], te[:20]
    return [rows[i] for i in tr], [rows[i] for i in te], (X[tr], y[tr], X[te], y[te])


def _spread(pred: Any, true: Any) -> float:
    """sd of ``sign(y) ln(1 + |y|)`` of the predictions over that of the truth."""
    import torch

    def t(v: Any) -> Any:
        v = torch.as_tensor(v, dtype=torch.float64)
        return torch.sign(v) * torch.log1p(v.abs())

    sd = float(t(true).std())
    return float(t(pred).std()) / sd if sd > 0 else math.nan


_PRETRAINED: dict[tuple[int, int, bool], Any] = {}


def _pretrained(job: dict[str, Any]) -> Any:
    """The CE-pretrained backbone of a job's seed (trained once per process)."""
    from cauchylin_hf.app import compare
    from cauchylin_hf.app.corpus import make_splits

    key = (job["seed"], job["pretrain_steps"], job["quick"])
    if key not in _PRETRAINED:
        n = 400 if job["quick"] else PRETRAIN_TEXTS
        texts = list(make_splits(n, 0, seed=1).train)
        recipe = compare.Recipe(**{**job["recipe"], "max_steps": job["pretrain_steps"]})
        start = time.perf_counter()
        _PRETRAINED[key] = compare.pretrain_text_backbone(texts, recipe)
        print(f"  pretrained a CE backbone in {time.perf_counter() - start:.0f} s", flush=True)
    return _PRETRAINED[key]


def _interval_scores(
    true: Any, lower: Any, upper: Any, levels: tuple[float, ...]
) -> dict[str, float]:
    """Mean interval score per level (:func:`cauchylin.conformal.interval_score`)."""
    import torch

    from cauchylin.conformal import interval_score

    t = torch.as_tensor(true, dtype=torch.float64)
    lo = torch.as_tensor(lower, dtype=torch.float64)
    hi = torch.as_tensor(upper, dtype=torch.float64)
    return {
        str(c): float(interval_score(t, lo[:, j], hi[:, j], c).mean()) for j, c in enumerate(levels)
    }


def _coverages(true: Any, lower: Any, upper: Any, levels: tuple[float, ...]) -> dict[str, float]:
    import torch

    t = torch.as_tensor(true, dtype=torch.float64)
    lo = torch.as_tensor(lower, dtype=torch.float64)
    hi = torch.as_tensor(upper, dtype=torch.float64)
    return {
        str(c): float(((lo[:, j] <= t) & (t <= hi[:, j])).double().mean())
        for j, c in enumerate(levels)
    }


def _ridge_ceiling(model: Any, ntok: Any, train: list[str], held: list[str]) -> float:
    """MdAE of a ridge readout of the causal model's own final hidden state (train rows fit)."""
    import numpy as np
    from cauchylin_hf.app import compare
    from sklearn.linear_model import RidgeCV

    from cauchylin.value_space import from_value_space, to_value_space

    space = model.config.value_space
    import torch

    def t_of(texts: list[str]) -> Any:
        y = torch.tensor([compare.split_at_target(t)[1] for t in texts], dtype=torch.float64)
        return to_value_space(y, space).numpy()

    z_tr = compare.hidden_at_targets(model, ntok, train).numpy()
    z_te = compare.hidden_at_targets(model, ntok, held).numpy()
    ridge = RidgeCV(alphas=np.logspace(-6, 3, 19)).fit(z_tr, t_of(train))
    pred = from_value_space(torch.tensor(ridge.predict(z_te)), space).numpy()
    true = np.array([compare.split_at_target(t)[1] for t in held])
    return float(np.median(np.abs(pred - true)))


def _job(job: dict[str, Any]) -> list[dict[str, Any]]:
    """One training run (one torch thread); its scored rows (two readings for text models)."""
    import torch

    torch.set_num_threads(1)
    from cauchylin_hf.app import compare

    every = tuple(sorted(set(LEVELS) | set(DIAGRAM_LEVELS)))
    train, held, _ = load_table(job["table"], job["quick"])
    if job["corrupt"]:
        train = compare.corrupt_targets(train, fraction=job["corrupt"], factor=100.0, seed=1)
    import cauchylin.conformal

    settings = dict(job["settings"])
    # a worker runs many jobs: every job sets the threshold, to the package's own by default
    _PACKAGE.setdefault(TRAINING_KEY, cauchylin.conformal.MIN_ROWS_TO_CALIBRATE)
    threshold = settings.pop(TRAINING_KEY, _PACKAGE[TRAINING_KEY])
    shared = bool(settings.pop(SHARED_KEY, False))
    cauchylin.conformal.MIN_ROWS_TO_CALIBRATE = int(threshold)
    recipe = compare.Recipe(**job["recipe"]).with_settings(**settings)
    base = _pretrained(job) if job["start"] == "pretrained" else None
    fallback = compare.training_median(train)
    start = time.perf_counter()
    scored: list[tuple[str, compare.Scores, Any]] = []
    chosen: dict[str, Any] = {}  # the step kept by the step choice, and its scores
    if job["kind"] in ("text", "ntl"):
        ntl = compare.NTL_WEIGHT if job["kind"] == "ntl" else 0.0
        model, tok, seconds = compare.train_text_baseline(train, recipe, ntl_weight=ntl, base=base)
        acc = compare.text_accuracy(model, tok, held, causal=False)
        pred, parsed = compare.baseline_predictions(model, tok, held, fallback=fallback)
        true = torch.tensor([compare.split_at_target(t)[1] for t in held], dtype=torch.float64)
        s = compare.score(
            pred, true, text_accuracy=acc, train_seconds=seconds, extra={"parsed": parsed}
        )
        scored.append((job["name"], s, pred))
        p = compare.sampled_predictions(
            model, tok, held, fallback=fallback, samples=SAMPLES, levels=every, seed=job["seed"]
        )
        s = compare.score(
            p["median"],
            p["true"],
            text_accuracy=acc,
            train_seconds=seconds,
            lower=p["lower"],
            upper=p["upper"],
            levels=every,
            extra={"parsed": p["parsed"]},
        )
        s.extra["interval_score"] = _interval_scores(p["true"], p["lower"], p["upper"], every)
        scored.append((job["name"] + SAMPLED, s, p["median"]))
    elif job["kind"] == "mse":
        reg, ntok, seconds = compare.train_mse_head(train, recipe)
        p = compare.mse_head_predictions(reg, ntok, held)
        true = p["true"]
        s = compare.score(p["median"], true, text_accuracy=math.nan, train_seconds=seconds)
        scored.append((job["name"], s, p["median"]))
    else:
        fit, held_for_calibration = train, None
        if shared:  # the same rows at every seed, never trained on
            n = cauchylin.conformal.calibration_holdout(
                len(train), cauchylin.conformal.CALIBRATION_FRACTION
            )
            order = list(range(len(train)))
            random.Random(SHARED_DRAW).shuffle(order)
            held_for_calibration = [train[i] for i in order[:n]]
            fit = [train[i] for i in sorted(order[n:])]
        model, ntok, result = compare.train_causal_run(
            fit, recipe, base=base, calibration=held_for_calibration
        )
        seconds = float(result.train_runtime)
        if result.step_choice is not None:
            chosen = {
                "step_chosen": result.step_choice.chosen,
                "step_scores": {str(k): v for k, v in result.step_choice.scores.items()},
            }
        s, p = _causal_scores(model, ntok, fit, held, every, seconds)
        if held_for_calibration is not None and job.get("save_predictions"):
            c = compare.causal_predictions(
                model, ntok, held_for_calibration, every, calibrated=False
            )
            p["calibration"] = {k: c[k].tolist() for k in ("loc", "scale", "true")}
        scored.append((job["name"], s, p))

        def solved_again(suffix: str, **solve: Any) -> None:
            """Score the same network with its readouts solved again on the same rows."""
            from cauchylin_hf.readouts import calibrate, solve_readouts

            solve_start = time.perf_counter()
            solve_readouts(model, ntok, result.readout_data, **solve)
            if result.calibration_data is not None:
                calibrate(model, ntok, result.calibration_data)
            solve_seconds = seconds + time.perf_counter() - solve_start
            s, p = _causal_scores(model, ntok, train, held, every, solve_seconds)
            scored.append((f"{job['name']} {suffix}", s, p))

        numbers = job.get("resolve_numbers")
        if numbers is not None:
            model.config.readout_numbers = int(numbers)
            solved_again(_resolved(int(numbers)))
        if job.get("resolve_average"):  # (after --resolve-numbers' setting, when both are given)
            solved_again(AVERAGED, penalty_rule="average")
        if job.get("resolve_median_error"):
            solved_again(MEDIAN_ERROR, penalty_rule="median_error")
        if job.get("resolve_location"):
            solved_again(LOCATION_CHOICE, location="choose")
        grid = job.get("resolve_penalties")
        if grid:
            solved_again(_penalty_grid(grid), penalties=tuple(grid))
    truth = [compare.split_at_target(t)[1] for t in held]
    out = []
    for name, s, pred in scored:
        saved = None
        calibration = None
        if isinstance(pred, dict):  # a causal model's: its medians, and loc/scale in t-space
            saved = {k: pred[k].tolist() for k in ("median", "loc", "scale")}
            calibration = pred.get("calibration")  # its raw law on the shared hold-out
            pred = pred["median"]
        row = {k: job[k] for k in ("table", "kind", "steps", "seed", "corrupt", "start")}
        row.update(
            name=name,
            count=len(held),
            mae=s.mae,
            mdae=s.mdae,
            spearman=s.spearman,
            spread=_spread(pred, truth),
            coverage={str(k): v for k, v in s.coverage.items()},
            text_accuracy=s.text_accuracy,
            train_seconds=s.train_seconds,
            wall_seconds=time.perf_counter() - start,
            **s.extra,
            **chosen,
        )
        if job.get("save_predictions"):
            row["predictions"] = saved or {"median": [float(v) for v in pred]}
            row["predictions"]["true"] = [float(v) for v in truth]
            if calibration is not None:
                row["calibration_predictions"] = calibration
        out.append(row)
        print(
            f"  done: {row['table']:9s} {name:36s} steps={row['steps']:<5d} seed={row['seed']} "
            f"{row['start']:10s} corrupt={row['corrupt']} MdAE={row['mdae']:.4g} "
            f"spread={row['spread']:.2f} text acc={row['text_accuracy']:.3f}",
            flush=True,
        )
    return out


AVERAGED = "[readouts averaged over the penalties]"
"""The suffix of the rows whose readouts were solved again with ``penalty_rule="average"``."""
MEDIAN_ERROR = "[penalty of the least median error]"
"""The suffix of the rows whose readouts were solved again with ``penalty_rule="median_error"``."""
LOCATION_CHOICE = "[location: Cauchy or least squares, by median error]"
"""The suffix of the rows whose readouts were solved again with ``location="choose"``."""


def _penalty_grid(grid: list[float]) -> str:
    """The suffix of the rows whose readouts were solved again with the penalty grid ``grid``."""
    return "[penalties " + ", ".join(f"{p:g}" for p in grid) + "]"


def _resolved(numbers: int) -> str:
    """The suffix of the rows whose readouts were solved again with ``numbers``."""
    return f"[readouts re-solved, readout_numbers={numbers}]"


def _causal_scores(
    model: Any, ntok: Any, train: list[str], held: list[str], every: tuple, seconds: float
) -> tuple[Any, dict[str, Any]]:
    """The causal model's scores on the held-out texts, and its predictions
    (``compare.causal_predictions``: the medians, ``loc``/``scale`` in the value space)."""
    from cauchylin_hf.app import compare

    from cauchylin.metrics import ks_uniform

    p = compare.causal_predictions(model, ntok, held, every)
    raw = compare.causal_predictions(model, ntok, held, every, calibrated=False)
    true = p["true"]
    s = compare.score(
        p["median"],
        true,
        text_accuracy=compare.text_accuracy(model, ntok, held, causal=True),
        train_seconds=seconds,
        lower=p["lower"],
        upper=p["upper"],
        levels=every,
    )
    s.extra.update(
        interval_score=_interval_scores(true, p["lower"], p["upper"], every),
        coverage_raw=_coverages(true, raw["lower"], raw["upper"], every),
        interval_score_raw=_interval_scores(true, raw["lower"], raw["upper"], every),
        calibrated_share=float(p["calibrated"].double().mean()),
        log_score=float(p["log_score"].mean()),
        pit_ks=ks_uniform(p["pit"]),
        shared_head_mdae=_shared_head_mdae(model, ntok, held),
    )
    s.extra["ridge_mdae"] = _ridge_ceiling(model, ntok, train, held)
    return s, p


def _shared_head_mdae(model: Any, ntok: Any, held: list[str]) -> float:
    """The held-out MdAE of the shared regression head alone (no per-context readout)."""
    import statistics

    import torch
    from cauchylin_hf.app import compare

    from cauchylin.value_space import from_value_space

    z = compare.hidden_at_targets(model, ntok, held).to(model.action.regressor.weight.dtype)
    with torch.no_grad():
        _, act = model.heads(z, "standard")  # no context codes: W_reg everywhere
    pred = from_value_space(act.loc_Y.double(), model.config.value_space)
    true = [compare.split_at_target(t)[1] for t in held]
    return float(statistics.median((pred - torch.tensor(true)).abs().tolist()))


REFERENCES = {
    "linear regression (features)": "linear",
    "gradient boosting (features)": "hgb",
    "Huber regression (features)": "huber",
}
"""The scikit-learn estimators on the raw columns, by the names of their rows."""
CONFORMAL = ", cross-conformal intervals"


def _estimator(kind: str) -> Any:
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.linear_model import HuberRegressor, LinearRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if kind == "linear":
        return LinearRegression()
    if kind == "hgb":
        return HistGradientBoostingRegressor(random_state=0)
    return make_pipeline(StandardScaler(), HuberRegressor(max_iter=1000))


def reference_rows(table: str, quick: bool) -> list[dict[str, Any]]:
    """Training median and (tables) scikit-learn's estimators on the raw columns.

    ``LinearRegression``, ``HistGradientBoostingRegressor`` and ``HuberRegressor`` (on
    standardised columns) fitted on every training row; the first two also with MAPIE's
    cross-conformal (CV+, 5 folds) intervals at every level, the coverage reference.
    """
    import warnings

    import numpy as np
    import torch
    from cauchylin_hf.app.compare import split_at_target, training_median

    from cauchylin.metrics import rank_correlation

    every = tuple(sorted(set(LEVELS) | set(DIAGRAM_LEVELS)))
    train, held, data = load_table(table, quick)
    true = np.array([split_at_target(t)[1] for t in held])
    common = {
        "table": table,
        "kind": "reference",
        "steps": 0,
        "seed": 0,
        "corrupt": 0.0,
        "start": "scratch",
        "count": len(held),
        "coverage": {},
        "text_accuracy": math.nan,
        "train_seconds": 0.0,
    }
    med = training_median(train)
    err = np.abs(true - med)
    rows = [
        {
            **common,
            "name": "training median",
            "mae": float(err.mean()),
            "mdae": float(np.median(err)),
            "spearman": math.nan,
            "spread": 0.0,
        }
    ]
    if data is None:
        return rows
    Xtr, ytr, Xte, yte = data
    for name, kind in REFERENCES.items():
        start = time.process_time()  # CPU seconds of the fit, beside the causal model's
        fitted = _estimator(kind).fit(Xtr, ytr)
        seconds = time.process_time() - start
        pred = fitted.predict(Xte)
        err = np.abs(pred - yte)
        rows.append(
            {
                **common,
                "train_seconds": seconds,
                "name": name,
                "mae": float(err.mean()),
                "mdae": float(np.median(err)),
                "spearman": rank_correlation(torch.tensor(pred), torch.tensor(yte)),
                "spread": _spread(pred, yte),
            }
        )
        if kind == "huber":
            continue
        try:
            from mapie.regression import CrossConformalRegressor
        except ImportError:  # pragma: no cover - depends on the environment
            print("  (no MAPIE: pip install 'cauchylin[bench]' for the conformal references)")
            continue
        # MAPIE needs more training rows than 1 / (1 - c) at each level c (96 for barley: 99%
        # is left out there)
        supported = [c for c in every if 1 / (1 - c) < len(ytr) and 1 / c < len(ytr)]
        conformal = CrossConformalRegressor(
            estimator=_estimator(kind),
            confidence_level=supported,
            cv=5,
            method="plus",
            random_state=0,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            conformal.fit_conformalize(Xtr, ytr)
            point, bounds = conformal.predict_interval(Xte)
        lower, upper = bounds[:, 0, :], bounds[:, 1, :]
        err = np.abs(point - yte)
        rows.append(
            {
                **common,
                "name": name + CONFORMAL,
                "mae": float(err.mean()),
                "mdae": float(np.median(err)),
                "spearman": rank_correlation(torch.tensor(point), torch.tensor(yte)),
                "spread": _spread(point, yte),
                "coverage": _coverages(yte, lower, upper, tuple(supported)),
                "interval_score": _interval_scores(yte, lower, upper, tuple(supported)),
            }
        )
    return rows


def _sel(rows: list[dict[str, Any]], **keys: Any) -> list[dict[str, Any]]:
    return [r for r in rows if all(r.get(k) == v for k, v in keys.items())]


def _median(values: list[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else math.nan


def _cov(row: dict[str, Any], level: float, key: str = "coverage") -> float:
    return float(row.get(key, {}).get(str(level), math.nan))


def print_tables(rows: list[dict[str, Any]], tables: list[str]) -> None:
    """Per table, start, corruption and budget: every model's seeds and their median."""
    head = (
        f"{'model':46s} {'steps':>5s} {'seed':>4s} {'MAE':>9s} {'MdAE':>9s} {'Spearman':>8s} "
        f"{'spread':>6s} {'cov50':>6s} {'cov80':>6s} {'cov90':>6s} {'cov95':>6s} {'IS90':>9s} "
        f"{'log sc':>7s} {'text acc':>8s} {'train s':>8s}"
    )

    def line(name: str, steps: str, seed: str, r: dict[str, Any]) -> str:
        cov = " ".join(f"{_cov(r, c):6.2f}" for c in LEVELS)
        return (
            f"{name:46s} {steps:>5s} {seed:>4s} {r['mae']:9.4g} {r['mdae']:9.4g} "
            f"{r['spearman']:8.3f} {r['spread']:6.2f} {cov} "
            f"{_cov(r, 0.9, 'interval_score'):9.4g} {r.get('log_score', math.nan):7.3f} "
            f"{r['text_accuracy']:8.3f} {r['train_seconds']:8.1f}"
        )

    for table in tables:
        trained = [r for r in rows if r["table"] == table and r["kind"] != "reference"]
        refs = _sel(rows, table=table, kind="reference")
        for start in ("scratch", "pretrained"):
            for corrupt in sorted({r["corrupt"] for r in trained}):
                sel = _sel(trained, start=start, corrupt=corrupt)
                if not sel:
                    continue
                tag = "clean" if not corrupt else f"{corrupt:.0%} of training targets x100"
                where = "" if start == "scratch" else ", fine-tuned from a CE-pretrained backbone"
                print(f"\n== {table} ({tag}{where})\n{head}")
                for r in refs if start == "scratch" and not corrupt else []:
                    print(line(r["name"], "", "", r))
                names = list(dict.fromkeys(r["name"] for r in sel))
                for steps in sorted({r["steps"] for r in sel}):
                    for name in names:
                        mine = sorted(_sel(sel, name=name, steps=steps), key=lambda r: r["seed"])
                        for r in mine:
                            print(line(name, str(steps), str(r["seed"]), r))
                        extra = [r for r in mine if "ridge_mdae" in r]
                        if extra:
                            print(
                                f"{'  ridge readout (own features) / shared head':46s} "
                                f"{steps:5d} {'':4s} {'':9s} "
                                + " ".join(f"{r['ridge_mdae']:.4g}" for r in extra)
                                + "  /  "
                                + " ".join(f"{r['shared_head_mdae']:.4g}" for r in extra)
                            )
                        if len(mine) > 1:
                            print(
                                f"{name:46s} {steps:5d} {'med':>4s} "
                                f"{_median([r['mae'] for r in mine]):9.4g} "
                                f"{_median([r['mdae'] for r in mine]):9.4g}"
                            )


def _band(n: int, level: float) -> tuple[float, float]:
    """The binomial 99% band of the coverage of ``n`` rows at a nominal ``level``."""
    from scipy.stats import binom

    return binom.ppf(0.005, n, level) / n, binom.isf(0.005, n, level) / n


def check_targets(
    rows: list[dict[str, Any]], tables: list[str], before: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The quality targets of the causal model, per table (medians over seeds, clean data, 1000 steps).

    Accuracy: MdAE at most 1.15 x the better of linear regression and gradient boosting on the
    raw columns, and at most 1.1 x the ridge readout of its own features, no seed above twice
    that bound; no table more than 10% worse than ``before`` (the previous grid). Intervals:
    coverage at 50/80/90/95% inside the binomial 99% band of the held-out count on every table
    and within 3 points of nominal pooled over the tables; the 90% interval score no worse than
    conformalised gradient boosting's on at least half the tables. On ``heavy``: MdAE at most 0.8
    x the MSE head's; 10% of the training targets x100 cost at most 10% (every table where it
    was run).
    """
    out = []
    for table in tables:
        refs = {r["name"]: r for r in _sel(rows, table=table, kind="reference")}
        clean = _sel(rows, table=table, corrupt=0.0, start="scratch", steps=1000)
        mine = _sel(clean, name="causal")
        if not mine:
            continue
        res: dict[str, Any] = {"table": table, "mdae": _median([r["mdae"] for r in mine])}
        lin = refs.get("linear regression (features)", {}).get("mdae", math.nan)
        hgb = refs.get("gradient boosting (features)", {}).get("mdae", math.nan)
        best = min(v for v in (lin, hgb, math.inf) if not math.isnan(v))
        ridge = _median([r.get("ridge_mdae", math.nan) for r in mine])
        bound = min(1.15 * best, 1.1 * ridge if not math.isnan(ridge) else math.inf)
        res["vs_best_sklearn"] = res["mdae"] / best if math.isfinite(best) else math.nan
        res["vs_ridge"] = res["mdae"] / ridge if ridge else math.nan
        res["worst_seed_vs_bound"] = max(r["mdae"] for r in mine) / bound if bound else math.nan
        if before:
            old = _median(
                [
                    r["mdae"]
                    for r in _sel(before, table=table, name="causal", corrupt=0.0)
                    if r["steps"] == 1000 and r["start"] == "scratch"
                ]
            )
            res["vs_before"] = res["mdae"] / old if old else math.nan
        n = int(mine[0].get("count", 0))
        res["coverage"] = {}
        for c in LEVELS:
            cov = _median([_cov(r, c) for r in mine])
            lo, hi = _band(n, c) if n else (math.nan, math.nan)
            res["coverage"][str(c)] = (cov, lo <= cov <= hi)
        hgb_c = refs.get("gradient boosting (features)" + CONFORMAL)
        if hgb_c is not None:
            res["is90_vs_hgb"] = _median([_cov(r, 0.9, "interval_score") for r in mine]) / _cov(
                hgb_c, 0.9, "interval_score"
            )
        bad = [
            r
            for r in _sel(rows, table=table, name="causal", steps=1000, start="scratch")
            if r["corrupt"]
        ]
        if bad:
            res["corrupt_ratio"] = _median([r["mdae"] for r in bad]) / res["mdae"]
        mse = _sel(clean, name=MODELS["mse"])
        if mse:
            res["vs_mse_head"] = res["mdae"] / _median([r["mdae"] for r in mse])
        out.append(res)
    return out


def pooled_coverage(
    rows: list[dict[str, Any]], name: str, key: str = "coverage"
) -> dict[str, float]:
    """Coverage per level pooled over every held-out row of every table (1000 steps, clean)."""
    sel = [r for r in rows if r["name"] == name and r["corrupt"] == 0.0 and r["start"] == "scratch"]
    sel = [r for r in sel if r["kind"] == "reference" or r["steps"] == 1000]
    out = {}
    for c in DIAGRAM_LEVELS:
        pairs = [(_cov(r, c, key), r.get("count", 0)) for r in sel]
        pairs = [(v, n) for v, n in pairs if not math.isnan(v) and n]
        total = sum(n for _, n in pairs)
        out[str(c)] = sum(v * n for v, n in pairs) / total if total else math.nan
    return out


def _print_targets(results: list[dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    print("\n== targets of the causal model (1000 steps, medians over seeds)")
    for r in results:
        parts = [f"{r['table']:9s} MdAE={r['mdae']:.4g}"]
        for key in (
            "vs_best_sklearn",
            "vs_ridge",
            "worst_seed_vs_bound",
            "vs_before",
            "is90_vs_hgb",
            "vs_mse_head",
            "corrupt_ratio",
        ):
            if key in r and not math.isnan(r[key]):
                parts.append(f"{key}={r[key]:.3g}")
        cov = " ".join(
            f"{float(c):.0%}:{v:.2f}{'' if ok else '!'}" for c, (v, ok) in r["coverage"].items()
        )
        print("  " + " ".join(parts) + f"  coverage {cov}")
    pooled = pooled_coverage(rows, "causal")
    if all(math.isnan(v) for v in pooled.values()):
        print("  pooled coverage: no clean causal run of 1000 steps to pool")
        return
    print(
        "  pooled coverage (every held-out row of every table): "
        + " ".join(f"{float(c):.0%}:{v:.3f}" for c, v in pooled.items() if float(c) in LEVELS)
    )


def plot(rows: list[dict[str, Any]], tables: list[str], path: str, machine: str) -> None:
    """Held-out target MdAE against training steps: one line per model, seed band, per table."""
    import _plotting
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    plt = _plotting.pyplot()
    cols = min(4, len(tables))
    nrows = math.ceil(len(tables) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.4 * nrows), squeeze=False)
    names = list(dict.fromkeys(r["name"] for r in rows if r["kind"] != "reference"))
    plain = [n for n in names if not n.endswith(SAMPLED)]
    colours = {n: f"C{i}" for i, n in enumerate(plain)}
    colours.update({n + SAMPLED: colours[n] for n in plain})
    if "causal" in colours:
        colours["causal"] = _plotting.OURS
    for ax, table in zip(axes.flat, tables, strict=False):
        for start in ("scratch", "pretrained"):
            for name in names:
                sel = _sel(rows, table=table, name=name, corrupt=0.0, start=start)
                steps = sorted({r["steps"] for r in sel})
                if not steps:
                    continue
                groups = [[r["mdae"] for r in _sel(sel, steps=s)] for s in steps]
                label = name if start == "scratch" else f"{name}, CE-pretrained backbone"
                ax.plot(
                    steps,
                    [statistics.median(g) for g in groups],
                    "--" if name.endswith(SAMPLED) else "-",
                    marker="o" if start == "scratch" else "*",
                    markersize=4 if start == "scratch" else 9,
                    color=colours[name],
                    label=label,
                    lw=1.8 if name == "causal" else 0.9,
                )
                ax.fill_between(
                    steps,
                    [min(g) for g in groups],
                    [max(g) for g in groups],
                    color=colours[name],
                    alpha=0.12,
                )
        for ref, ls in (("training median", ":"), ("linear regression (features)", "-.")):
            for r in _sel(rows, table=table, name=ref):
                ax.axhline(r["mdae"], color="k", ls=ls, lw=0.8, label=ref)
        ax.set_xscale("log")
        ax.set_yscale("log")
        budgets = sorted({r["steps"] for r in rows if r["kind"] != "reference"})
        ax.set_xticks(budgets, [str(b) for b in budgets])
        ax.xaxis.set_minor_locator(NullLocator())
        # 1-2-5 ticks in plain numbers: a table whose errors span less than a decade keeps labels
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.set_title(table)
        ax.set_xlabel("training steps (batch 32)")
        ax.set_ylabel("held-out target MdAE")
    for ax in list(axes.flat)[len(tables) :]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    for ax in list(axes.flat)[1 : len(tables)]:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    spare = list(axes.flat)[len(tables) :]
    if spare:
        spare[0].legend(handles, labels, fontsize=7, loc="center")
    else:  # right of the last panel, where it hides no line
        axes.flat[len(tables) - 1].legend(
            handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0)
        )
    _plotting.footnote(fig, machine + "; lines: median over seeds, band: min-max")
    _plotting.save(fig, path)


def _reference_errors(rows: list[dict[str, Any]], table: str) -> list[float]:
    """The held-out MdAE of linear regression and gradient boosting on ``table``."""
    return [
        r["mdae"]
        for r in rows
        if r["table"] == table
        and r["name"] in ("linear regression (features)", "gradient boosting (features)")
    ]


def learning_curve(rows: list[dict[str, Any]], tables: list[str]) -> str:
    """Markdown: per table and causal model, the held-out MdAE at each training budget (the
    median over the seeds in the rows, their count in brackets when more than one), beside
    the better of linear regression and gradient boosting."""
    causal = [r for r in rows if r["kind"] == "causal" and not r.get("corrupt")]
    budgets = sorted({int(r["steps"]) for r in causal})
    names = list(dict.fromkeys(r["name"] for r in causal))
    head = ["table", "model", *[f"{b} steps" for b in budgets], "best of LR / HGB"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for table in tables:
        refs = _reference_errors(rows, table)
        best = f"{min(refs):.4g}" if refs else ""
        for name in names:
            cells = []
            for b in budgets:
                got = [r["mdae"] for r in _sel(causal, table=table, name=name, steps=b)]
                n = f" ({len(got)})" if len(got) > 1 else ""
                cells.append(f"{_median(got):.4g}{n}" if got else "")
            if any(cells):
                out.append("| " + " | ".join([table, name, *cells, best]) + " |")
    return "\n".join(out)


def paired_table(rows: list[dict[str, Any]], tables: list[str], name: str) -> str:
    """Markdown: per table and budget, the causal defaults against the causal model ``name`` on
    the same seeds (clean data): each one's MdAE per seed, the median over seeds of the per-seed
    ratio ``name`` / defaults and its largest value, and each one's seed median over the better
    of linear regression and gradient boosting."""
    causal = [r for r in rows if r["kind"] == "causal" and not r.get("corrupt")]
    head = [
        "table",
        "steps",
        "defaults, seeds",
        f"{name}, seeds",
        "per-seed ratio: median (largest)",
        "better of LR / HGB",
        "defaults / better",
        f"{name} / better",
    ]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for table in tables:
        refs = _reference_errors(rows, table)
        best = min(refs) if refs else math.nan
        for steps in sorted({int(r["steps"]) for r in causal}):
            mine = {
                r["seed"]: r["mdae"] for r in _sel(causal, table=table, name="causal", steps=steps)
            }
            other = {
                r["seed"]: r["mdae"] for r in _sel(causal, table=table, name=name, steps=steps)
            }
            both = sorted(set(mine) & set(other))
            if not both:
                continue
            ratios = [other[s] / mine[s] for s in both]
            a = _median([mine[s] for s in both])
            b = _median([other[s] for s in both])
            cells = [
                table,
                str(steps),
                " / ".join(f"{mine[s]:.4g}" for s in both),
                " / ".join(f"{other[s]:.4g}" for s in both),
                f"{_median(ratios):.3f} ({max(ratios):.3f})",
                f"{best:.4g}",
                f"{a / best:.2f}",
                f"{b / best:.2f}",
            ]
            out.append("| " + " | ".join(c.replace("nan", "") for c in cells) + " |")
    return "\n".join(out)


def split_table(rows: list[dict[str, Any]], tables: list[str], steps: int = 1000) -> str:
    """Markdown: per table, the causal defaults' held-out MdAE on each of its splits (``TABLE``,
    ``TABLE@1``, ...; the median over the seeds of a split) over the better of linear regression
    and gradient boosting on that split, the median of those ratios over the splits, and on how
    many splits the ratio is at most 1.0 and 1.1."""
    causal = [
        r
        for r in rows
        if r["kind"] == "causal" and r["name"] == "causal" and not r.get("corrupt")
        and r["steps"] == steps and r["start"] == "scratch"
    ]  # fmt: skip
    labels = list(dict.fromkeys(r["table"] for r in causal))
    head = [
        "table",
        "splits",
        "causal / better of LR, HGB, split by split",
        "median",
        "<= 1.0",
        "<= 1.1",
    ]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for table in tables:
        splits, ratios = [], []
        for label in sorted(labels, key=lambda lb: table_split(lb)[1]):
            name, split = table_split(label)
            refs = _reference_errors(rows, label)
            if name != table or not refs:  # a split without its baselines is not shown
                continue
            err = _median([r["mdae"] for r in causal if r["table"] == label])
            splits.append(split)
            ratios.append(err / min(refs))
        if not ratios:
            continue
        cells = [
            table,
            ", ".join(str(split) for split in splits),
            " / ".join(f"{v:.2f}" for v in ratios),
            f"{_median(ratios):.2f}",
            f"{sum(v <= 1.0 for v in ratios)} of {len(ratios)}",
            f"{sum(v <= 1.1 for v in ratios)} of {len(ratios)}",
        ]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def markdown_report(rows: list[dict[str, Any]], tables: list[str]) -> str:
    """The grid as the benchmark page's markdown tables (1000 steps, medians over seeds, clean)."""

    def med(name: str, table: str, key: str = "mdae", steps: int = 1000) -> float:
        sel = [
            r
            for r in rows
            if r["table"] == table
            and r["name"] == name
            and r["corrupt"] == 0.0
            and r["start"] == "scratch"
            and (r["kind"] == "reference" or r["steps"] == steps)
        ]
        return _median([r.get(key, math.nan) for r in sel])

    def seeds(name: str, table: str, steps: int = 1000) -> str:
        sel = _sel(rows, table=table, name=name, corrupt=0.0, start="scratch", steps=steps)
        return " / ".join(f"{r['mdae']:.3g}" for r in sorted(sel, key=lambda r: r["seed"]))

    cols = [
        ("causal, seeds", None),
        ("ridge readout (own features)", "ridge"),
        ("shared head alone", "shared"),
        ("MSE head", MODELS["mse"]),
        ("CE text", MODELS["text"]),
        ("CE text, 32 samples", MODELS["text"] + SAMPLED),
        ("CE + NTL", MODELS["ntl"]),
        ("CE + NTL, 32 samples", MODELS["ntl"] + SAMPLED),
        ("linear regression", "linear regression (features)"),
        ("gradient boosting", "gradient boosting (features)"),
        ("Huber", "Huber regression (features)"),
        ("training median", "training median"),
    ]
    out = ["| table | " + " | ".join(c for c, _ in cols) + " |"]
    out.append("|---" * (len(cols) + 1) + "|")
    for table in tables:
        cells = []
        for _label, name in cols:
            if name is None:
                cells.append(seeds("causal", table))
            elif name == "ridge":
                cells.append(f"{med('causal', table, 'ridge_mdae'):.3g}")
            elif name == "shared":
                cells.append(f"{med('causal', table, 'shared_head_mdae'):.3g}")
            else:
                cells.append(f"{med(name, table):.3g}")
        out.append(f"| {table} | " + " | ".join(c.replace("nan", "") for c in cells) + " |")
    out.append("")
    head = ["table", "held-out rows"]
    for c in LEVELS:
        head.append(f"causal {round(100 * c)}%")
    head += ["causal IS90", "HGB CV+ IS90", "LR CV+ IS90", "CE samples IS90", "log score", "PIT KS"]
    out.append("| " + " | ".join(head) + " |")
    out.append("|---" * len(head) + "|")
    hgb = "gradient boosting (features)" + CONFORMAL
    lin = "linear regression (features)" + CONFORMAL
    for table in tables:
        mine = _sel(rows, table=table, name="causal", corrupt=0.0, start="scratch", steps=1000)
        if not mine:
            continue
        cells = [table, str(mine[0].get("count", ""))]
        for c in LEVELS:
            cells.append(f"{_median([_cov(r, c) for r in mine]):.2f}")
        for name in ("causal", hgb, lin, MODELS["text"] + SAMPLED):
            cells.append(f"{_is90(rows, name, table):.3g}")
        cells.append(f"{med('causal', table, 'log_score'):.3g}")
        cells.append(f"{med('causal', table, 'pit_ks'):.3g}")
        out.append("| " + " | ".join(x.replace("nan", "") for x in cells) + " |")
    return "\n".join(out)


def _is90(rows: list[dict[str, Any]], name: str, table: str) -> float:
    sel = [
        r
        for r in rows
        if r["table"] == table
        and r["name"] == name
        and r["corrupt"] == 0.0
        and r["start"] == "scratch"
        and (r["kind"] == "reference" or r["steps"] == 1000)
    ]
    return _median([_cov(r, 0.9, "interval_score") for r in sel])


def plot_reliability(rows: list[dict[str, Any]], path: str, machine: str) -> None:
    """Nominal against observed coverage, pooled over every held-out row of every table."""
    import _plotting

    plt = _plotting.pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 5.0))
    levels = list(DIAGRAM_LEVELS)
    ax.plot([0, 1], [0, 1], color="k", lw=0.8, ls=":", label="nominal")
    curves = [
        ("causal", "coverage", "causal LM, calibrated (default)", _plotting.OURS, "-"),
        ("causal", "coverage_raw", "causal LM, Cauchy intervals", _plotting.OURS, "--"),
        (MODELS["text"] + SAMPLED, "coverage", "CE text LM, 32 samples", "C1", "-"),
        (
            "gradient boosting (features)" + CONFORMAL,
            "coverage",
            "gradient boosting, CV+",
            "C2",
            "-",
        ),
        (
            "linear regression (features)" + CONFORMAL,
            "coverage",
            "linear regression, CV+",
            "C3",
            "-",
        ),
    ]
    for name, key, label, colour, ls in curves:
        pooled = pooled_coverage(rows, name, key)
        ys = [pooled[str(c)] for c in levels]
        if all(math.isnan(y) for y in ys):
            continue
        ax.plot(levels, ys, ls, marker="o", markersize=3, color=colour, label=label)
    ax.set_xlabel("nominal coverage of the central interval")
    ax.set_ylabel("observed coverage (held-out rows of every table)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title("Reliability of the intervals")
    _plotting.footnote(fig, machine + "; 1000 steps, every seed and table pooled", width=90)
    _plotting.save(fig, path)


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["table"], row["kind"], row["steps"], row["seed"], row["corrupt"], row["start"])


# The shared budget's settings a resumed grid must keep: its rows' keys do not name them.
RECIPE_FLAGS = {"adam_beta2": "--adam-beta2", "learning_rate": "--learning-rate",
                "batch_size": "--batch-size", "lr_scheduler": "--lr-scheduler"}  # fmt: skip


def _default_batch_size(quick: bool) -> int:
    """The batch of every model when ``--batch-size`` is not given: the toy's or the recipe's."""
    from cauchylin_hf.app.compare import Recipe

    return int(QUICK_SIZES["batch_size"]) if quick else Recipe.batch_size


def _check_same_recipe(saved: dict[str, Any], now: dict[str, Any], p: Any) -> None:
    """Refuse to resume a grid whose saved runs had another shared budget (files written before
    a setting was recorded ran at the recipe's default of it)."""
    from cauchylin_hf.app.compare import Recipe

    for field, flag in RECIPE_FLAGS.items():
        default = (
            _default_batch_size(bool(saved.get("quick")))
            if field == "batch_size"
            else getattr(Recipe, field)
        )
        before = saved.get(field, default)
        if before != now[field]:
            p.error(f"--resume: the runs in --json ran with {flag} {before}, not {now[field]}; "
                    "write this grid to a --json of its own")  # fmt: skip


def _write(path: str, payload: dict[str, Any]) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=1, default=float)
    os.replace(tmp, path)


def _list(text: str, kind: type, name: str, p: argparse.ArgumentParser) -> list[Any]:
    try:
        values = [kind(v) for v in text.split(",") if v]
    except ValueError:
        p.error(f"{name} must be a comma-separated list of {kind.__name__}, got {text!r}")
    if not values:
        p.error(f"{name} is empty")
    return values


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument(
        "--tables",
        "--datasets",
        dest="tables",
        default="demo,cancer,diabetes",
        help=f"comma-separated, of {', '.join(TABLES)}; TABLE{SPLIT_MARK}S (S >= 1) splits TABLE "
        "80/20 by a shuffle of seed S instead of 0 (a table of its own in the reports)",
    )
    p.add_argument("--steps", default="1000", help="training budgets, e.g. 300,1000,3000")
    p.add_argument("--seeds", default="0", help="training seeds, e.g. 0,1,2")
    p.add_argument("--models", default=",".join(MODELS), help=f"of {', '.join(MODELS)}")
    p.add_argument("--variants", default="", help="more causal variants: " + ", ".join(VARIANTS))
    p.add_argument(
        "--resolve-average",
        action="store_true",
        help="also score each causal model with its readouts solved again, the readouts of "
        'every penalty averaged (solve_readouts(penalty_rule="average")): a paired comparison '
        "on the same network, one more row per run",
    )
    p.add_argument(
        "--resolve-median-error",
        action="store_true",
        help="also score each causal model with its readouts solved again, the penalty chosen "
        'by the median out-of-fold absolute residual (penalty_rule="median_error"): a paired '
        "comparison on the same network, one more row per run",
    )
    p.add_argument(
        "--resolve-location",
        action="store_true",
        help="also score each causal model with its readouts solved again, each context's "
        "location fitted by Cauchy likelihood or least squares, whichever has the smaller "
        'median out-of-fold absolute residual (location="choose"): a paired comparison',
    )
    p.add_argument(
        "--resolve-penalties",
        type=lambda text: [float(v) for v in text.split(",")],
        default=None,
        metavar="P,P,...",
        help="also score each causal model with its readouts solved again, cross-validation "
        "choosing the ridge penalty from this grid (the default grid is "
        "cauchylin.readout.DEFAULT_PENALTIES): a paired comparison",
    )
    p.add_argument(
        "--resolve-numbers",
        type=int,
        default=None,
        metavar="S",
        help="also score each causal model with its readouts solved again, reading S earlier "
        "numbers (config.readout_numbers; 0: the hidden state alone): a paired comparison on "
        "the same network, one more row per run",
    )
    p.add_argument(
        "--save-predictions",
        action="store_true",
        help="keep each run's held-out predictions in its row of --json (the medians and the "
        "true targets; for causal models also loc_Y and scale_Y in the value space, and with "
        f"the variant {SHARED!r} their law on the shared hold-out too), for "
        "benchmarks/probe_ensembles.py",
    )
    p.add_argument(
        "--curve",
        action="store_true",
        help="with --report: print each table's held-out MdAE per training budget (the "
        "learning curve of the causal rows)",
    )
    p.add_argument(
        "--periodic",
        default="",
        metavar="SIGMAS",
        help="also train causal models whose numbers enter through the periodic numeric "
        "embedding (config.numeric_encoding='periodic'), one per initial frequency spread in "
        "this comma-separated list, e.g. 1,3",
    )
    p.add_argument(
        "--periodic-frequencies",
        type=int,
        default=16,
        metavar="K",
        help="the frequencies of --periodic (config.numeric_frequencies; default 16)",
    )
    p.add_argument(
        "--splits",
        action="store_true",
        help="with --report: print, per table, the causal defaults over the better of linear "
        "regression and gradient boosting on each of its splits (TABLE, TABLE@1, ...) at 1000 "
        "steps, and their median",
    )
    p.add_argument(
        "--paired",
        default=None,
        metavar="NAME",
        help="with --report: print, per table and budget, the causal defaults against the "
        "causal model of this row name on the same seeds",
    )
    p.add_argument(
        "--step-choice",
        default=None,
        type=lambda v: v if v == "auto" else float(v),
        metavar="auto|SHARE",
        help="the causal models hold out this share of their training rows to choose the step "
        "whose network is kept (cauchylin_hf.step_choice; default: none, the last step)",
    )
    p.add_argument("--corrupt", type=float, default=0.0, help="share of targets x100 (0: skip)")
    p.add_argument(
        "--corrupt-tables", default=None, help="the tables --corrupt retrains on (default: all)"
    )
    p.add_argument("--pretrained", action="store_true", help="also fine-tune a CE-pretrained one")
    p.add_argument("--pretrain-steps", type=int, default=1000)
    p.add_argument("--ablation", action="store_true", help="one run per reverted default")
    p.add_argument(
        "--adam-beta2",
        type=float,
        default=None,
        help="AdamW's beta2 for every model (default: the recipe's, the package's training default)",
    )
    p.add_argument(
        "--learning-rate",
        type=float,
        default=None,
        help="peak learning rate of every model (default: the recipe's, 3e-3); a grid with "
        "another one needs a --json of its own",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="texts per step for every model (default: the recipe's, 32); a grid with another "
        "one needs a --json of its own",
    )
    p.add_argument(
        "--lr-scheduler",
        default="cosine",
        help="the learning-rate schedule of every model, one of compare.LR_SCHEDULERS (cosine, "
        "warmup_stable_decay; default cosine); a grid with another one needs a --json of its own",
    )
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="toy sizes (smoke test)")
    p.add_argument("--json", default=None)
    p.add_argument("--resume", action="store_true", help="keep and skip the runs in --json")
    p.add_argument("--plot", default=None)
    p.add_argument("--reliability", default=None, help="write the reliability diagram here")
    p.add_argument(
        "--before", default=None, help="a previous grid's JSON: each table's change is reported"
    )
    p.add_argument(
        "--report",
        action="store_true",
        help="print the benchmark page's markdown tables of the JSON and stop (with --json)",
    )
    args = p.parse_args(argv)
    import _machine

    tables = _list(args.tables, str, "--tables", p)
    for t in tables:
        try:
            table_split(t)
        except ValueError as exc:
            p.error(str(exc))
    budgets = _list(args.steps, int, "--steps", p)
    seeds = _list(args.seeds, int, "--seeds", p)
    models = _list(args.models, str, "--models", p)
    for m in models:
        if m not in MODELS:
            p.error(f"unknown model {m!r}; known: {', '.join(MODELS)}")
    variants = [v for v in args.variants.split(",") if v]
    for v in variants:
        if v not in VARIANTS:
            p.error(f"unknown variant {v!r}; known: {', '.join(VARIANTS)}")
    variant_settings = {v: VARIANTS[v] for v in variants}
    if args.periodic:
        if args.periodic_frequencies < 1:
            p.error("--periodic-frequencies must be positive")
        for sigma in _list(args.periodic, float, "--periodic", p):
            if not (math.isfinite(sigma) and sigma > 0):
                p.error(f"--periodic: each frequency spread must be positive, got {sigma}")
            name, settings = periodic_variant(sigma, args.periodic_frequencies)
            variants.append(name)
            variant_settings[name] = settings
    from cauchylin_hf.app.compare import LR_SCHEDULERS, Recipe

    if args.adam_beta2 is None:
        args.adam_beta2 = Recipe.adam_beta2
    if not 0.0 <= args.adam_beta2 < 1.0:
        p.error("--adam-beta2 must lie in [0, 1)")
    if args.lr_scheduler not in LR_SCHEDULERS:
        p.error(
            f"--lr-scheduler: choose from {', '.join(LR_SCHEDULERS)}, got {args.lr_scheduler!r}"
        )
    if args.learning_rate is None:
        args.learning_rate = Recipe.learning_rate
    if args.batch_size is None:
        args.batch_size = _default_batch_size(args.quick)
    if not (math.isfinite(args.learning_rate) and args.learning_rate > 0):
        p.error(f"--learning-rate must be positive, got {args.learning_rate}")
    if args.batch_size < 1:
        p.error(f"--batch-size must be positive, got {args.batch_size}")
    if args.workers < 1 or min(budgets) < 1 or args.pretrain_steps < 1:
        p.error("--workers, --steps and --pretrain-steps must be positive")
    if not 0.0 <= args.corrupt <= 1.0:
        p.error("--corrupt must lie in [0, 1]")
    if (args.resume or args.report) and not args.json:
        p.error("--resume and --report need --json")
    if args.report:
        with open(args.json) as f:
            payload = json.load(f)
        saved = payload["rows"]
        m = payload.get("machine", {})
        where = (
            f"CPU {m.get('cpu', '?')} ({m.get('cpus', '?')} visible, "
            f"{m.get('cpu_capability', '?')}), one torch thread per training run, "
            f"torch {m.get('torch', '?')}"
        )
        in_file = list(dict.fromkeys(r["table"] for r in saved))
        if args.curve:
            print(learning_curve(saved, [t for t in tables if t in in_file] or in_file))
            return 0
        if args.paired:
            print(paired_table(saved, [t for t in tables if t in in_file] or in_file, args.paired))
            return 0
        if args.splits:
            bases = list(dict.fromkeys(table_split(t)[0] for t in in_file))
            print(split_table(saved, [t for t in tables if t in bases] or bases))
            return 0
        print(markdown_report(saved, [t for t in tables if t in in_file] or in_file))
        before = None
        if args.before:
            with open(args.before) as f:
                before = json.load(f)["rows"]
        _print_targets(check_targets(saved, in_file, before), saved)
        if args.reliability:
            plot_reliability(saved, args.reliability, where)
        if args.plot:
            plot(saved, in_file, args.plot, where)
        return 0
    corrupt_budget = FINETUNE_STEPS if FINETUNE_STEPS in budgets else budgets[0]
    corrupt_tables = tables
    if args.corrupt_tables:
        corrupt_tables = _list(args.corrupt_tables, str, "--corrupt-tables", p)
        for t in corrupt_tables:
            if t not in tables:
                p.error(f"--corrupt-tables: {t!r} is not among --tables")
    tune_budget = corrupt_budget

    jobs: list[dict[str, Any]] = []

    def add(table: str, kind: str, name: str, settings: dict, steps: int, seed: int, **kw: Any):
        recipe: dict[str, Any] = {
            "max_steps": steps,
            "seed": seed,
            "adam_beta2": args.adam_beta2,
            "learning_rate": args.learning_rate,
            "batch_size": args.batch_size,
            "lr_scheduler": args.lr_scheduler,
        }
        if args.step_choice is not None and kind == "causal":
            recipe["step_choice"] = args.step_choice
        if args.quick:  # the toy backbone; the batch is --batch-size's (its default: the toy's)
            recipe.update({**QUICK_SIZES, "batch_size": args.batch_size})
        job = {
            "table": table,
            "kind": kind,
            "name": name,
            "settings": settings,
            "steps": steps,
            "seed": seed,
            "corrupt": 0.0,
            "start": "scratch",
            "quick": args.quick,
            "save_predictions": args.save_predictions,  # every run, whatever its kind
            "recipe": recipe,
            "pretrain_steps": args.pretrain_steps,
        }
        jobs.append({**job, **kw})

    # budget by budget (the 1000-step runs first): an interrupted grid keeps the main budget
    order = sorted(budgets, key=lambda s: (s != FINETUNE_STEPS, s))
    if args.ablation:
        for seed in seeds:
            for table in tables:
                add(table, "causal", "defaults", {}, budgets[0], seed)
                for name, settings in ABLATION.items():
                    add(table, "causal", name, settings, budgets[0], seed)
    else:
        for steps in order:
            for seed in seeds:
                for table in tables:
                    for m in models:
                        if m == "causal":
                            for v in ["causal", *variants]:
                                add(
                                    table,
                                    "causal",
                                    v,
                                    variant_settings.get(v, {}),
                                    steps,
                                    seed,
                                    resolve_numbers=args.resolve_numbers,
                                    resolve_average=args.resolve_average,
                                    resolve_median_error=args.resolve_median_error,
                                    resolve_location=args.resolve_location,
                                    resolve_penalties=args.resolve_penalties,
                                )
                        else:
                            add(table, m, MODELS[m], {}, steps, seed)
            if steps == corrupt_budget and args.corrupt:
                for seed in seeds:
                    for table in corrupt_tables:
                        for m in ("causal", "text", "mse"):
                            if m not in models:
                                continue
                            # every causal variant too: what the outliers cost each of them
                            for v in ["causal", *variants] if m == "causal" else [MODELS[m]]:
                                settings = variant_settings.get(v, {})
                                add(table, m, v, settings, steps, seed, corrupt=args.corrupt)
            if steps == tune_budget and args.pretrained:
                for seed in seeds:
                    for table in tables:
                        if table == "demo":  # the pretraining text itself
                            continue
                        for m in ("causal", "text"):
                            if m in models:
                                add(table, m, MODELS[m], {}, steps, seed, start="pretrained")
    rows: list[dict[str, Any]] = []
    if args.resume and os.path.exists(args.json):
        with open(args.json) as f:
            payload = json.load(f)
        _check_same_recipe(payload.get("args", {}), vars(args), p)
        rows = [r for r in payload["rows"] if r["kind"] != "reference"]
        done = {(*_key(r), r["name"].removesuffix(SAMPLED)) for r in rows}
        jobs = [j for j in jobs if (*_key(j), j["name"]) not in done]
    machine = _machine.describe()
    print(
        f"# bench_quality: {len(jobs)} training runs to do, {args.workers} worker(s)\n# {machine}",
        flush=True,
    )
    # the references of every table in the file, also those a resumed run did not name again
    ref_tables = [*tables, *sorted({r["table"] for r in rows} - set(tables))]
    references = [r for table in ref_tables for r in reference_rows(table, args.quick)]

    def save() -> None:
        if args.json:
            payload = {
                "machine": _machine.machine_info(),
                "args": vars(args),
                "levels": LEVELS,
                "rows": rows + references,
            }
            _write(args.json, payload)

    start = time.perf_counter()
    if args.workers == 1:
        for i, job in enumerate(jobs):
            print(f"[{i + 1}/{len(jobs)}] {job['table']} {job['name']} {job['steps']}", flush=True)
            rows.extend(_job(job))
            save()
    else:
        import multiprocessing as mp

        with mp.get_context("spawn").Pool(args.workers) as pool:
            for out in pool.imap_unordered(_job, jobs, chunksize=1):
                rows.extend(out)
                save()
    rows.sort(key=lambda r: (*_key(r), r["name"]))
    save()
    everything = rows + references
    if not args.ablation:
        before = None
        if args.before:
            with open(args.before) as f:
                before = json.load(f)["rows"]
        print_tables(everything, tables)
        _print_targets(check_targets(everything, tables, before), everything)
    else:
        print("\n== ablation: each default set back alone (held-out target)")
        print(
            f"{'table':9s} {'change':32s} {'seed':>4s} {'MdAE':>9s} {'Spearman':>8s} "
            f"{'spread':>6s} {'cov50':>6s} {'cov90':>6s} {'text acc':>8s}"
        )
        for r in rows:
            print(
                f"{r['table']:9s} {r['name']:32s} {r['seed']:4d} {r['mdae']:9.4g} "
                f"{r['spearman']:8.3f} {r['spread']:6.2f} "
                f"{r['coverage'].get('0.5', math.nan):6.2f} "
                f"{r['coverage'].get('0.9', math.nan):6.2f} {r['text_accuracy']:8.3f}"
            )
    print(f"\n# total wall time {time.perf_counter() - start:.0f} s")
    if args.plot and not args.ablation:
        plot(everything, ref_tables, args.plot, machine)  # every table in the file
    if args.reliability and not args.ablation:
        plot_reliability(everything, args.reliability, machine)
    return 0


if __name__ == "__main__":
    sys.exit(main())
