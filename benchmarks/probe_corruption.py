"""What corrupted training targets cost the causal language model, and where the cost arises.

For every table and seed, trains the causal model of ``bench_quality.py`` (same backbone,
recipe, tables, split and defaults) twice: on the clean training texts and on the same texts
with 10% of their targets multiplied by 100 (:func:`cauchylin_hf.app.compare.corrupt_targets`,
the grid's ``--corrupt 0.1``). Each network's held-out target is scored (median absolute error,
MdAE, of the uncalibrated median) with its readouts solved

* ``own``: on its own training targets, as training does (``least``: the penalty of the least
  cross-validated NLL, the default; ``average``: every penalty's readout averaged by their
  held-out likelihoods, ``penalty_rule="average"``);
* ``clean readouts`` (the corrupted network only): on the *clean* targets of the same rows.

The corrupted network read through clean readouts against the clean network separates what the
corruption does to the features (training) from what it does to the readouts' solve.

The cost is ``median(corrupted) / median(clean) - 1`` over the seeds; the report gives it with a
90% percentile-bootstrap interval (seeds resampled, each with its clean and corrupted run), and
the median of each seed's corrupted / clean ratio with the Wilcoxon signed-rank p-value of those
ratios, since a run's MdAE scatters widely with its seed and a few seeds pin the cost down
loosely.

With several seeds it also scores ensembles: ``K`` networks' predicted locations in the value
space averaged, every ``K``-subset of the seeds. (The average of Cauchy variables
``Cauchy(loc_k, scale_k)`` is ``Cauchy(mean loc, mean scale)`` whether they are independent or
move together, so the ensemble's median is the value of the mean location.) Run::

    python benchmarks/probe_corruption.py --tables friedman1,heavy,cancer --seeds 0,1,2,3,4 \\
        --workers 2 --json FILE
    python benchmarks/probe_corruption.py --quick      # toy sizes (a smoke run)

``--variant NAME`` trains one of ``bench_quality.py``'s causal variants (its ``--variants``)
instead of the defaults, clean and corrupted alike.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

FRACTION = 0.1
"""The share of training targets corrupted (the grid's ``--corrupt``)."""

FACTOR = 100.0
"""What a corrupted target is multiplied by (the grid's; ``--factor`` sets another: a factor
close to 1 is a placebo, a change of the training data that carries no outlier, whose "cost"
is the run-to-run spread of training alone)."""


def _row_key(numbers: Any) -> tuple[float, ...]:
    """What tells a training row apart: its numbers before the target (rounded, so that a
    text's value and its float32 encoding give the same key)."""
    return tuple(round(float(v), 4) for v in numbers)


def _targets_by_row(clean: list[str], corrupted: list[str]) -> dict[tuple, tuple[float, float]]:
    """Each training text's (clean, corrupted) target, keyed by the text's other numbers."""
    from cauchylin_hf.numbers import find_numbers

    out: dict[tuple, tuple[float, float]] = {}
    for a, b in zip(clean, corrupted, strict=True):
        na, nb = find_numbers(a), find_numbers(b)
        key = _row_key(n.value for n in na[:-1])
        if key in out:
            raise ValueError(
                "two training texts share every number but the target: this probe tells rows "
                "apart by their other numbers; choose a table without repeated rows"
            )
        out[key] = (float(na[-1].value), float(nb[-1].value))
    return out


def _with_targets(data: Any, num_id: int, targets: dict, which: int) -> Any:
    """The readout rows ``data`` with each row's target replaced by its clean (0) or
    corrupted (1) value."""
    from cauchylin_hf.data import NumericDataset

    rows = []
    for example in data:
        ids, values = example["input_ids"], example["numeric_values"]
        at = (ids == num_id).nonzero().flatten()
        values = values.clone()
        values[at[-1]] = targets[_row_key(values[at[:-1]])][which]
        rows.append({**example, "numeric_values": values})
    return NumericDataset(rows, name="readout rows")


def _run(job: dict[str, Any]) -> dict[str, Any]:
    """One training run, scored under each readout variant."""
    import torch
    from bench_quality import QUICK_SIZES, VARIANTS, load_table
    from cauchylin_hf.app import compare
    from cauchylin_hf.readouts import solve_readouts

    torch.set_num_threads(1)
    train, held, _ = load_table(job["table"], job["quick"])
    corrupted = compare.corrupt_targets(train, fraction=FRACTION, factor=job["factor"], seed=1)
    targets = _targets_by_row(train, corrupted)
    recipe = compare.Recipe(
        max_steps=job["steps"],
        seed=job["seed"],
        settings=dict(VARIANTS[job["variant"]]),
        **(QUICK_SIZES if job["quick"] else {}),
    )
    own = 1 if job["corrupt"] else 0
    model, ntok, result = compare.train_causal_run(corrupted if own else train, recipe)
    variants = [("own least", own, "least"), ("own average", own, "average")]
    if own:
        variants.append(("clean readouts", 0, "least"))
    row: dict[str, Any] = {**job, "loc": {}, "mdae": {}}
    for name, which, rule in variants:
        data = _with_targets(result.readout_data, model.config.num_token_id, targets, which)
        solve_readouts(model, ntok, data, penalty_rule=rule)
        p = compare.causal_predictions(model, ntok, held, (0.5,), calibrated=False)
        row["mdae"][name] = float((p["median"] - p["true"]).abs().median())
        row["loc"][name] = p["loc"].tolist()
    row["true"] = p["true"].tolist()
    row["value_space"] = model.config.value_space
    print(
        f"  {job['table']} seed {job['seed']} {'corrupted' if own else 'clean'}: "
        + " ".join(f"{k}={v:.4g}" for k, v in row["mdae"].items()),
        flush=True,
    )
    return row


def ensemble_mdae(rows: list[dict[str, Any]], variant: str) -> float:
    """The MdAE of the mean of ``rows``' value-space locations under ``variant``."""
    import torch

    from cauchylin.value_space import from_value_space

    loc = torch.tensor([r["loc"][variant] for r in rows], dtype=torch.float64).mean(0)
    true = torch.tensor(rows[0]["true"], dtype=torch.float64)
    return float((from_value_space(loc, rows[0]["value_space"]) - true).abs().median())


def cost_interval(
    clean: list[float], bad: list[float], level: float = 0.9, resamples: int = 10_000
) -> tuple[float, float]:
    """A percentile-bootstrap interval of the cost ``median(bad) / median(clean) - 1``.

    ``clean[i]`` and ``bad[i]`` are the runs of one seed (the same initial weights and data
    order), so seeds are resampled in pairs (scipy's ``stats.bootstrap``, ``paired=True``, a
    fixed random state): with a few seeds whose runs scatter widely, the interval says how far
    the cost of these seeds can be from the cost of the training recipe. One seed has no
    interval: ``(nan, nan)``.
    """
    import numpy as np
    from scipy import stats

    if len(clean) < 2:
        return math.nan, math.nan

    def cost(c: Any, b: Any, axis: int = -1) -> Any:
        return np.median(b, axis=axis) / np.median(c, axis=axis) - 1.0

    ci = stats.bootstrap(
        (np.asarray(clean, float), np.asarray(bad, float)), cost, paired=True,
        confidence_level=level, n_resamples=resamples, method="percentile", random_state=0,
        vectorized=True,
    ).confidence_interval  # fmt: skip
    return float(ci.low), float(ci.high)


def paired_test(clean: list[float], bad: list[float]) -> tuple[float, float]:
    """``(median of bad[i] / clean[i], two-sided Wilcoxon signed-rank p of their logs)``: each
    seed's corrupted run against its own clean run, and how often seeds of a recipe that the
    outliers do not change would tilt this far one way."""
    import numpy as np
    from scipy import stats

    ratio = np.asarray(bad, float) / np.asarray(clean, float)
    if not np.any(ratio != 1.0):  # identical runs (a factor of 1): nothing tilts, no ranks to test
        return 1.0, 1.0
    p = stats.wilcoxon(np.log(ratio), alternative="two-sided").pvalue
    return float(np.median(ratio)), float(p)


def report(rows: list[dict[str, Any]], members: int) -> str:
    """Per table: the seeds' MdAE, their medians, the corruption cost, and the ensembles'."""

    def med(values: list[float]) -> float:
        return statistics.median(values)

    lines = [
        "| table | factor | clean, own | corrupted, own | corrupted, clean readouts | cost (own) "
        "| its 90% interval | per-seed ratio (Wilcoxon p) | cost (clean readouts) | cost (average rule) "
        + (f"| ensembles of {members}: clean | corrupted | cost " if members > 1 else "")
        + "|",
        "|---" * (10 + 3 * (members > 1)) + "|",
    ]
    for table in dict.fromkeys(r["table"] for r in rows):
        clean = sorted((r for r in rows if r["table"] == table and not r["corrupt"]),
                       key=lambda r: r["seed"])  # fmt: skip
        factors = sorted(
            {r.get("factor", FACTOR) for r in rows if r["table"] == table and r["corrupt"]}
        )
        for factor in factors:
            bad = [
                r
                for r in rows
                if r["table"] == table and r["corrupt"] and r.get("factor", FACTOR) == factor
            ]
            bad.sort(key=lambda r: r["seed"])
            if [r["seed"] for r in clean] != [r["seed"] for r in bad] or not clean:
                continue  # the clean runs of the same seeds are not there

            def seeds(sel: list[dict[str, Any]], name: str) -> tuple[str, float, list[float]]:
                values = [r["mdae"][name] for r in sel]
                return " / ".join(f"{v:.4g}" for v in values), med(values), values

            (c, mc, own_clean), (b, mb, own_bad), (r_, mr, _) = (
                seeds(clean, "own least"), seeds(bad, "own least"), seeds(bad, "clean readouts")
            )  # fmt: skip
            ca = med([r["mdae"]["own average"] for r in clean])
            ba = med([r["mdae"]["own average"] for r in bad])
            low, high = cost_interval(own_clean, own_bad)
            ratio, p_value = paired_test(own_clean, own_bad)
            line = (
                f"| {table} | x{factor:g} | {c} ({mc:.4g}) | {b} ({mb:.4g}) | {r_} ({mr:.4g}) "
                f"| {mb / mc - 1:+.0%} | {low:+.0%} to {high:+.0%} "
                f"| {ratio:.3g} ({p_value:.2g}) | {mr / mc - 1:+.0%} | {ba / ca - 1:+.0%} "
            )
            if members > 1 and len(clean) >= members:
                subsets = list(itertools.combinations(range(len(clean)), members))
                ec = med([ensemble_mdae([clean[i] for i in s], "own least") for s in subsets])
                eb = med([ensemble_mdae([bad[i] for i in s], "own least") for s in subsets])
                line += f"| {ec:.4g} | {eb:.4g} | {eb / ec - 1:+.0%} "
            lines.append(line + "|")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tables", default="friedman1,heavy,cancer")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument(
        "--factor", type=float, default=FACTOR, help="what a corrupted target is multiplied by"
    )
    p.add_argument("--skip-clean", action="store_true", help="train the corrupted runs alone")
    p.add_argument("--members", type=int, default=3, help="networks per ensemble (1: none)")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument(
        "--variant",
        default="causal",
        help="the causal model's settings (bench_quality's --variants)",
    )
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json")
    p.add_argument(
        "--report", action="store_true", help="print the table of --json (FILE,FILE...) and stop"
    )
    args = p.parse_args(argv)
    if args.members < 1:
        p.error("--members must be at least 1")
    if not (math.isfinite(args.factor) and args.factor > 0):
        p.error("--factor must be a positive number")
    if args.report:
        if not args.json:
            p.error("--report reads --json")
        rows = [r for f in args.json.split(",") for r in json.loads(Path(f).read_text())["rows"]]
        print(report(rows, args.members))
        return 0
    from bench_quality import VARIANTS

    if args.variant not in VARIANTS:
        p.error(f"--variant must be one of {sorted(VARIANTS)}, got {args.variant!r}")
    if args.quick:
        args.steps = 10
    jobs = [
        {"table": t, "seed": int(s), "corrupt": c, "factor": args.factor, "steps": args.steps,
         "quick": args.quick, "variant": args.variant}
        for t in args.tables.split(",") for s in args.seeds.split(",")
        for c in ((True,) if args.skip_clean else (False, True))
    ]  # fmt: skip
    start = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        rows = list(pool.map(_run, jobs))
    print(report(rows, args.members))
    if args.json:
        tmp = Path(args.json).with_suffix(".tmp")
        tmp.write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))
        tmp.replace(args.json)
    print(f"# total wall time {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
