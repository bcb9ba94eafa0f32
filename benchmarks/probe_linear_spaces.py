"""Is a table's miss its split? Linear readouts in the value space and in raw units, many splits.

The causal model reads numbers in the value space ``t = sign(y) ln(1 + |y|)`` and predicts the
median of a Cauchy law there (a linear readout on its features, among them the row's own
numbers). On a table whose relation is linear in the raw units (engel: food expenditure from
income) the plain linear fits tell how much of a miss is the space the model works in, and how
much the 80/20 split. On the raw columns alone (no network), this script scores, by the
held-out median absolute error (MdAE) in raw units:

* ``linear regression`` and ``gradient boosting`` (scikit-learn; the grid's yardstick is the
  better of the two),
* ``median regression``: least absolute deviations in raw units (``QuantileRegressor``),
* ``Cauchy, value space``: :func:`~cauchylin.readout.fit_cauchy_readout` of ``t(y)`` on
  ``t(x)``, read back through the inverse map (the median maps to the median),
* ``Cauchy, value space + raw``: the same reading ``x`` beside ``t(x)``,
* ``Cauchy, raw``: the Cauchy readout of ``y`` on ``x`` in raw units,

on ``bench_quality.py``'s split and on ``--splits`` other seeded 80/20 splits of the same rows
(its tables ``TABLE@1``, ``TABLE@2``, ..., on which it also trains the network), each as a
ratio to the better of linear regression and gradient boosting on that split. Run::

    python benchmarks/probe_linear_spaces.py --tables engel --splits 20 --json FILE
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

FITS = (
    "linear regression",
    "gradient boosting",
    "median regression",
    "Cauchy, value space",
    "Cauchy, value space + raw",
    "Cauchy, raw",
)


def scores(X: Any, y: Any, Xt: Any, yt: Any) -> dict[str, float]:
    """Each fit's held-out MdAE (raw units) on one split."""
    import numpy as np
    import torch
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.linear_model import LinearRegression, QuantileRegressor

    from cauchylin.readout import fit_cauchy_readout
    from cauchylin.value_space import SIGNED_LOG1P, from_value_space, to_value_space

    def t(a: Any) -> torch.Tensor:
        return to_value_space(torch.as_tensor(a, dtype=torch.float64), SIGNED_LOG1P)

    def cauchy(f: torch.Tensor, ft: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        r = fit_cauchy_readout(f, target)
        return ft @ r.weight + r.bias

    def mdae(pred: Any) -> float:
        return float(np.median(np.abs(np.asarray(pred, dtype=float) - yt)))

    x, xt = torch.as_tensor(X, dtype=torch.float64), torch.as_tensor(Xt, dtype=torch.float64)
    both, both_t = torch.cat([t(X), x], 1), torch.cat([t(Xt), xt], 1)
    return {
        "linear regression": mdae(LinearRegression().fit(X, y).predict(Xt)),
        "gradient boosting": mdae(
            HistGradientBoostingRegressor(random_state=0).fit(X, y).predict(Xt)
        ),
        "median regression": mdae(
            QuantileRegressor(quantile=0.5, alpha=0.0, solver="highs").fit(X, y).predict(Xt)
        ),
        "Cauchy, value space": mdae(from_value_space(cauchy(t(X), t(Xt), t(y)), SIGNED_LOG1P)),
        "Cauchy, value space + raw": mdae(
            from_value_space(cauchy(both, both_t, t(y)), SIGNED_LOG1P)
        ),
        "Cauchy, raw": mdae(cauchy(x, xt, torch.as_tensor(y, dtype=torch.float64))),
    }


def run(table: str, splits: int) -> dict[str, Any]:
    """The grid's split and ``splits`` others (``TABLE@1``, ``TABLE@2``, ... of
    ``bench_quality.py``: the same rows, shuffled with seeds 1, 2, ...), each fit against the
    better of linear regression and gradient boosting on that split."""
    from bench_quality import load_table

    _, _, arrays = load_table(table)
    if arrays is None:
        raise SystemExit(f"table {table!r} has no numeric columns to fit")
    X_tr, y_tr, X_te, y_te = arrays
    grid = scores(X_tr, y_tr, X_te, y_te)
    ratios: dict[str, list[float]] = {name: [] for name in FITS}
    for seed in range(1, splits + 1):
        _, _, (X_a, y_a, X_b, y_b) = load_table(f"{table}@{seed}")
        s = scores(X_a, y_a, X_b, y_b)
        best = min(s["linear regression"], s["gradient boosting"])
        for name in FITS:
            ratios[name].append(s[name] / best)
    best = min(grid["linear regression"], grid["gradient boosting"])
    return {
        "table": table,
        "rows": [len(y_tr), len(y_te)],
        "grid_split": grid,
        "grid_split_ratio": {name: v / best for name, v in grid.items()},
        "other_splits": splits,
        "ratio_median": {n: statistics.median(v) for n, v in ratios.items() if v},
        "ratio_mean": {n: statistics.fmean(v) for n, v in ratios.items() if v},
        "ratios": ratios,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tables", default="engel", help="comma-separated bench_quality.py tables")
    p.add_argument("--splits", type=int, default=20, help="other seeded 80/20 splits (>= 0)")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    if args.splits < 0:
        p.error(f"--splits must be >= 0, got {args.splits}")
    from bench_quality import IN_TIME_ORDER

    tables = [name for name in args.tables.split(",") if name]
    for name in tables:
        if args.splits and name in IN_TIME_ORDER:
            p.error(f"{name} has one split (its held-out rows are the last in time): --splits 0")
    results = [run(name, args.splits) for name in tables]
    for r in results:
        n_tr, n_te = r["rows"]
        print(f"\n{r['table']}: {n_tr} training rows, {n_te} held out; MdAE / better of LR, GB")
        print(f"| fit | grid split | ratio | median ratio, {r['other_splits']} other splits |")
        print("|---|---|---|---|")
        for name in FITS:
            other = r["ratio_median"].get(name, float("nan"))
            print(
                f"| {name} | {r['grid_split'][name]:.4g} | {r['grid_split_ratio'][name]:.2f} "
                f"| {other:.2f} |"
            )
    if args.json:
        tmp = f"{args.json}.tmp"
        with open(tmp, "w") as fh:
            json.dump(results, fh, indent=1)
        os.replace(tmp, args.json)


if __name__ == "__main__":
    main()
