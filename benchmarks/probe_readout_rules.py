"""Which readouts to keep, and whether they read the row's numbers: four rules on one network.

Trains the causal model of ``bench_quality.py`` (same backbone, recipe, tables and split) once
per table and seed, then solves its readouts four times on the same training rows and scores the
held-out target's median absolute error (MdAE) after each (calibrated on the same held-out
rows; the calibration does not move the medians):

* ``hidden, if better``: the readouts read the final hidden state alone (``readout_numbers=0``)
  and replace the shared head only where their cross-validated NLL is below the shared head's
  NLL on the same (training) numbers: the package's defaults before the rule changed;
* ``hidden, every``: the same readouts, every one that solves replacing the shared head;
* ``+16 numbers, if better``: reading the row's 16 most recent numbers too, the old rule;
* ``+16 numbers, every``: both (the defaults now).

The network is trained once, so the four rows differ only by the readouts. Run::

    python benchmarks/probe_readout_rules.py --tables wine,engel --seeds 0 --json FILE
    python benchmarks/probe_readout_rules.py --quick      # toy sizes (a smoke run)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

RULES = (
    ("hidden, if better", 0, False),
    ("hidden, every", 0, True),
    ("+16 numbers, if better", 16, False),
    ("+16 numbers, every", 16, True),
)


def _keep_if_better(model: Any, report: Any) -> None:
    """Keep only the readouts whose cross-validated NLL beat the shared head's (the old rule)."""
    table = model.action.readouts
    better = {int(c["code"]) for c in report.contexts if c["solved_nll"] < c["shared_nll"]}
    rows = [(int(code), table.readout(i)) for i, code in enumerate(table.codes.tolist())]
    kept = [(code, fit) for code, fit in rows if code in better and fit is not None]
    table.store([code for code, _ in kept], [fit for _, fit in kept])
    model.config.readout_contexts = table.num_contexts


def run(table: str, seed: int, steps: int, quick: bool) -> dict[str, Any]:
    """One trained network, its held-out MdAE under each rule."""
    import torch
    from bench_quality import load_table
    from cauchylin_hf.app import compare
    from cauchylin_hf.readouts import calibrate, solve_readouts

    torch.set_num_threads(1)
    train, held, _ = load_table(table, quick)
    recipe = compare.Recipe(max_steps=steps, seed=seed)
    if quick:
        recipe = compare.Recipe(hidden_size=16, num_layers=1, num_heads=2, max_steps=steps)
    start = time.process_time()
    model, ntok, result = compare.train_causal_run(train, recipe)
    seconds = time.process_time() - start
    true = torch.tensor([compare.split_at_target(t)[1] for t in held], dtype=torch.float64)
    out: dict[str, Any] = {"table": table, "seed": seed, "steps": steps, "train_cpu_s": seconds}
    for name, numbers, every in RULES:
        model.config.readout_numbers = numbers
        report = solve_readouts(model, ntok, result.readout_data)
        if not every:
            _keep_if_better(model, report)
        if result.calibration_data is not None:
            calibrate(model, ntok, result.calibration_data)
        pred = compare.causal_predictions(model, ntok, held, (0.5,))["median"]
        # the mean of the two middle errors for an even count, as bench_quality.py reports
        out[name] = statistics.median((pred - true).abs().tolist())
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tables", default="wine,engel")
    p.add_argument("--seeds", default="0")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--json", default=None, help="append one JSON line per run to this file")
    p.add_argument("--quick", action="store_true", help="toy sizes: a smoke run")
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error(f"--steps must be at least 1, got {args.steps}")
    tables = [t for t in args.tables.split(",") if t]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    steps = 3 if args.quick else args.steps
    rows = []
    for table in tables:
        for seed in seeds:
            row = run(table, seed, steps, args.quick)
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.json:
                with open(args.json, "a", encoding="utf-8") as f:
                    f.write(json.dumps(row) + "\n")
    print("| table | " + " | ".join(name for name, _, _ in RULES) + " |")
    print("|---|" + "---|" * len(RULES))
    for table in tables:
        mine = [r for r in rows if r["table"] == table]
        cells = [f"{statistics.median(r[name] for r in mine):.4g}" for name, _, _ in RULES]
        print(f"| {table} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
