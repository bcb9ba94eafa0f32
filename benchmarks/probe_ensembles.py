"""Do several trained networks, averaged, read a table better than one?

``bench_quality.py --save-predictions`` keeps every run's held-out predictions: the median of
the target and, for the causal model, ``loc_Y`` and ``scale_Y`` of its Cauchy law in the value
space ``t = g(y)``. This script groups the causal runs of each table into ensembles of
``--members`` consecutive seeds (seeds 0-2, 3-5, ... for three members) and scores each
ensemble's held-out median absolute error (MdAE) against its members' and against the better of
linear regression and gradient boosting on the same split.

An ensemble's prediction is the mean of its members' Cauchy variables
(:func:`cauchylin_hf.ensemble.average_number_predictions`): for independent (or fully dependent)
``Y_k ~ Cauchy(loc_k, scale_k)``, ``(1/K) sum_k Y_k ~ Cauchy(mean loc_k, mean scale_k)``
exactly, so its median is ``g^{-1}(mean loc_k)``: the members averaged in the value space. The median of the members' medians is printed beside it. No network is trained
here; the runs' files are read as they are. Run::

    python benchmarks/bench_quality.py --tables ... --models causal --seeds 0,1,2,3,4,5,6,7,8 \\
        --save-predictions --json MEMBERS
    python benchmarks/probe_ensembles.py --json MEMBERS --members 3
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

RULES = ("Cauchy mean", "median of medians")
"""How an ensemble's members are combined (see the module docstring)."""


def saved_law(m: dict[str, list[float]], levels: tuple[float, ...], value_space: str) -> Any:
    """A run's saved targets (``loc``, ``scale``, ``true``) as the library's
    :class:`~cauchylin_hf.predict.NumberPredictions`, every row a target."""
    import torch
    from cauchylin_hf.predict import NumberPredictions, value_prediction

    n = len(m["loc"])
    loc, scale = (torch.tensor(m[k], dtype=torch.float64) for k in ("loc", "scale"))
    return NumberPredictions(
        prediction=value_prediction(loc, scale, torch.ones(n), levels, value_space),
        true=torch.tensor(m["true"], dtype=torch.float64),
        text_index=torch.arange(n),
        is_target=torch.ones(n, dtype=torch.bool),
        fields=["target"] * n,
    )


def combine(members: list[dict[str, list[float]]], rule: str, value_space: str) -> list[float]:
    """The ensemble's held-out medians from its members' saved predictions."""
    import torch

    if rule == "Cauchy mean":  # the library's ensemble, on the saved laws
        from cauchylin_hf.ensemble import average_number_predictions

        parts = [saved_law(m, (0.5,), value_space) for m in members]
        return average_number_predictions(parts).prediction.median.tolist()
    if rule == "median of medians":
        med = torch.tensor([m["median"] for m in members], dtype=torch.float64)
        # the lower median for an even count, as torch.median takes it
        return med.median(0).values.tolist()
    raise ValueError(f"rule must be one of {RULES}, got {rule!r}")


def mdae(pred: list[float], true: list[float]) -> float:
    """Median absolute error."""
    return statistics.median(abs(p - t) for p, t in zip(pred, true, strict=True))


def ensembles(
    rows: list[dict[str, Any]],
    table: str,
    name: str,
    steps: int,
    members: int,
    corrupt: float = 0.0,
) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """The table's runs of ``name`` at ``steps`` (by seed) on targets corrupted at the share
    ``corrupt`` (0: the clean runs), and their groups of ``members`` consecutive seeds (a last
    incomplete group left out)."""
    runs = sorted(
        (
            r
            for r in rows
            if r["table"] == table
            and r["name"] == name
            and r["steps"] == steps
            and float(r.get("corrupt") or 0.0) == corrupt
            and "predictions" in r
        ),
        key=lambda r: r["seed"],
    )
    groups = [runs[i : i + members] for i in range(0, len(runs) - members + 1, members)]
    return runs, groups


def report(
    rows: list[dict[str, Any]],
    tables: list[str],
    name: str,
    steps: int,
    members: int,
    value_space: str,
    corrupt: float = 0.0,
) -> list[dict[str, Any]]:
    """Print one markdown table per rule; return a row per table and ensemble."""
    out: list[dict[str, Any]] = []
    for table in tables:
        _, groups = ensembles(rows, table, name, steps, members, corrupt)
        refs = [
            r["mdae"]
            for r in rows
            if r["table"] == table
            and r["name"] in ("linear regression (features)", "gradient boosting (features)")
        ]
        for group in groups:
            truth = group[0]["predictions"]["true"]
            for m in group[1:]:
                if m["predictions"]["true"] != truth:
                    raise SystemExit(f"{table}: the runs' held-out rows differ")
            hgb = [
                r["train_seconds"]
                for r in rows
                if r["table"] == table and r["name"] == "gradient boosting (features)"
            ]
            entry = {
                "table": table,
                "seeds": [m["seed"] for m in group],
                "member_mdae": [m["mdae"] for m in group],
                "best_reference": min(refs) if refs else None,
                "train_seconds": sum(m["train_seconds"] for m in group),
                "gradient_boosting_seconds": hgb[0] if hgb else None,
            }
            for rule in RULES:
                pred = combine([m["predictions"] for m in group], rule, value_space)
                entry[rule] = mdae(pred, truth)
            out.append(entry)
    for rule in RULES:
        dirty = f", {corrupt:g} of the targets corrupted" if corrupt else ""
        print(f"\n### {rule}: ensembles of {members} ({name}, {steps} steps{dirty})\n")
        print(
            "| table | one network: the first ensemble's seeds (median) | one network: all seeds "
            "(median) | ensembles | median | ensembles / one (first seeds) | ensembles / one (all "
            "seeds) | ensembles / better of LR, HGB | training s: ensemble, one network, HGB |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for table in tables:
            mine = [e for e in out if e["table"] == table]
            if not mine:
                continue
            singles = [s for e in mine for s in e["member_mdae"]]
            first = statistics.median(mine[0]["member_mdae"])
            ens = [e[rule] for e in mine]
            med = statistics.median(ens)
            best = mine[0]["best_reference"]
            ratio = f"**{med / best:.2f}**" if best else ""
            one_s = statistics.median(e["train_seconds"] / members for e in mine)
            hgb_s = mine[0]["gradient_boosting_seconds"]
            seconds = f"{statistics.median(e['train_seconds'] for e in mine):.0f}, {one_s:.0f}, "
            seconds += f"{hgb_s:.2f}" if hgb_s is not None else "-"
            every = statistics.median(singles)
            print(
                f"| {table} | {first:.4g} | {every:.4g} ({len(singles)}) | "
                f"{' / '.join(f'{v:.4g}' for v in ens)} | {med:.4g} | {med / first:.2f} | "
                f"{med / every:.2f} | {ratio} | {seconds} |"
            )
    return out


COVERAGE_LEVELS = (0.5, 0.8, 0.9, 0.95)
"""The levels at which the calibrated ensembles' coverage is scored (``--calibrated``)."""


def calibrated_coverage(group: list[dict[str, Any]], value_space: str) -> dict[str, float]:
    """The held-out coverage of an ensemble calibrated on the members' shared hold-out
    (:func:`cauchylin_hf.ensemble.ensemble_calibration` of their saved laws there)."""
    import torch
    from cauchylin_hf.ensemble import average_number_predictions, ensemble_calibration

    def part(m: dict[str, list[float]]) -> Any:
        return saved_law(m, COVERAGE_LEVELS, value_space)

    calibration = ensemble_calibration([part(m["calibration_predictions"]) for m in group])
    ens = average_number_predictions(
        [part(m["predictions"]) for m in group], calibration=calibration
    ).prediction
    true = torch.tensor(group[0]["predictions"]["true"], dtype=torch.float64)
    out = {"calibration_rows": float(calibration.count)}
    for j, c in enumerate(COVERAGE_LEVELS):
        inside = (true >= ens.lower[:, j]) & (true <= ens.upper[:, j])
        out[str(c)] = float(inside.double().mean())
        out[f"calibrated_{c}"] = float(ens.calibrated[:, j].double().mean())
    return out


def coverage_report(
    rows: list[dict[str, Any]], tables: list[str], name: str, steps: int, members: int,
    value_space: str,
) -> list[dict[str, Any]]:  # fmt: skip
    """Print each table's calibrated ensembles' coverage against the binomial 99% band of its
    held-out count, and the coverage pooled over the tables; return a row per ensemble."""
    from bench_quality import _band

    out = []
    for table in tables:
        _, groups = ensembles(rows, table, name, steps, members)
        for k, group in enumerate(groups):
            if not all("calibration_predictions" in m for m in group):
                continue
            for m in group[1:]:
                if (
                    m["calibration_predictions"]["true"]
                    != group[0]["calibration_predictions"]["true"]
                ):
                    raise SystemExit(f"{table}: the members were calibrated on other rows")
            entry = {"table": table, "ensemble": k, "seeds": [m["seed"] for m in group]}
            entry["count"] = len(group[0]["predictions"]["true"])
            entry.update(calibrated_coverage(group, value_space))
            entry["member_coverage"] = {
                str(c): [m["coverage"].get(str(c)) for m in group] for c in COVERAGE_LEVELS
            }
            out.append(entry)
    if not out:
        return out
    print(f"\n### Coverage of ensembles of {members} calibrated on their shared hold-out\n")
    print(
        "| table | held out | calibrated on | "
        + " | ".join(f"{round(100 * c)}%: ensembles (99% band)" for c in COVERAGE_LEVELS)
        + " |"
    )
    print("|---|---|---|" + "---|" * len(COVERAGE_LEVELS))
    outside = 0
    for table in tables:
        mine = [e for e in out if e["table"] == table]
        if not mine:
            continue
        n = mine[0]["count"]
        cells = []
        for c in COVERAGE_LEVELS:
            lo, hi = _band(n, c)
            vals = []
            for e in mine:
                v = e[str(c)]
                bad = not lo <= v <= hi
                outside += bad
                vals.append(f"**{v:.2f}**" if bad else f"{v:.2f}")
            cells.append(f"{' / '.join(vals)} ({lo:.2f}-{hi:.2f})")
        print(f"| {table} | {n} | {int(mine[0]['calibration_rows'])} | " + " | ".join(cells) + " |")
    checks = len(out) * len(COVERAGE_LEVELS)
    print(f"\n{outside} of {checks} table-level checks outside the band (bold)")
    count = max(e["ensemble"] for e in out) + 1
    for k in range(count):
        mine = [e for e in out if e["ensemble"] == k]
        total = sum(e["count"] for e in mine)
        parts = []
        for c in COVERAGE_LEVELS:
            v = sum(e[str(c)] * e["count"] for e in mine) / total
            lo, hi = _band(total, c)
            flag = "" if lo <= v <= hi else " (outside)"
            parts.append(f"{round(100 * c)}% {v:.3f} ({lo:.3f}-{hi:.3f}){flag}")
        print(f"pooled, ensemble {k} ({total} rows of {len(mine)} tables): " + ", ".join(parts))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--json", required=True, help="a bench_quality.py file with predictions")
    p.add_argument("--tables", default=None, help="comma-separated (default: every table)")
    p.add_argument("--name", default="causal", help="the runs' row name (default: causal)")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--members", type=int, default=3)
    p.add_argument(
        "--corrupt",
        type=float,
        default=0.0,
        help="the runs on targets corrupted at this share (bench_quality.py --corrupt; default "
        "0: the clean runs)",
    )
    p.add_argument("--value-space", default="signed_log1p", help="the models' config.value_space")
    p.add_argument("--out", default=None, help="write the ensembles' rows here (JSON)")
    p.add_argument(
        "--calibrated",
        action="store_true",
        help="also score the coverage of each ensemble calibrated on its members' shared "
        "hold-out (runs of bench_quality.py's variant with one calibration hold-out for every "
        "seed, with --save-predictions; pass --name with that variant's name)",
    )
    args = p.parse_args(argv)
    if args.members < 1:
        p.error("--members must be positive")
    with open(args.json) as f:
        rows = json.load(f)["rows"]
    known = list(dict.fromkeys(r["table"] for r in rows if "predictions" in r))
    if not known:
        p.error(f"{args.json} has no saved predictions (bench_quality.py --save-predictions)")
    tables = args.tables.split(",") if args.tables else known
    out = report(rows, tables, args.name, args.steps, args.members, args.value_space, args.corrupt)
    if not out:
        p.error(
            f"no table of {args.json} has {args.members} runs of {args.name!r} at {args.steps} "
            "steps with saved predictions (see --name, --steps, --members)"
        )
    coverage = []
    if args.calibrated:
        coverage = coverage_report(
            rows, tables, args.name, args.steps, args.members, args.value_space
        )
        if not coverage:
            p.error(f"no run of {args.name!r} in {args.json} saved its calibration hold-out")
    if args.out:
        tmp = args.out + ".tmp"
        payload = {"source": os.path.basename(args.json), "ensembles": out, "coverage": coverage}
        with open(tmp, "w") as f:
            json.dump(payload, f, indent=1)
        os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
