"""How steady the solved readouts are late in training: the held-out error step by step.

Trains the causal model of ``bench_quality.py`` (same backbone, recipe, tables, split and
defaults) and, at every ``--every``-th step from ``--from`` to the last, solves the readouts
on the training texts (as :func:`cauchylin_hf.readouts.solve_readouts` does after training)
and scores the held-out target's median absolute error (MdAE). It does so with the penalty
chosen by cross-validation (the default) and with each penalty of the grid held fixed, and
records the penalty cross-validation chose for the target's context. Late in a cosine schedule
the learning rate is a small share of its peak and the features move little: if the MdAE jumps
between neighbouring steps with the chosen penalty but not with a fixed one, the jumps come
from the penalty's choice; if it jumps with every penalty, from the fit itself or the features.
``average`` is the readouts of every penalty averaged by their held-out likelihoods
(:func:`cauchylin.readout.fit_cauchy_readout`'s ``penalty_rule="average"``).

Training is the same whatever is solved along the way (the readouts take no part in the
training loss). Run::

    python benchmarks/probe_readout_steadiness.py --tables friedman1 --seeds 0 --json FILE
    python benchmarks/probe_readout_steadiness.py --quick      # toy sizes (a smoke run)
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _mdae(model: Any, ntok: Any, held: list[str]) -> float:
    from cauchylin_hf.app import compare

    p = compare.causal_predictions(model, ntok, held, (0.5,), calibrated=False)
    return float((p["median"] - p["true"]).abs().median())


def _run(job: dict[str, Any]) -> list[dict[str, Any]]:
    """One training run; a row per probed step."""
    import torch
    from bench_quality import QUICK_SIZES, load_table
    from cauchylin_hf.app import compare
    from cauchylin_hf.app.reports import target_context
    from cauchylin_hf.readouts import solve_readouts
    from transformers import TrainerCallback

    from cauchylin.readout import DEFAULT_PENALTIES

    torch.set_num_threads(1)
    train, held, _ = load_table(job["table"], job["quick"])
    recipe = compare.Recipe(
        max_steps=job["steps"], seed=job["seed"], **(QUICK_SIZES if job["quick"] else {})
    )
    rows: list[dict[str, Any]] = []
    steps = set(range(job["first"], job["steps"] + 1, job["every"]))

    class Probe(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, train_dataloader=None, **kw):
            if state.global_step not in steps:
                return
            # the run's numeric tokenizer, as its training batches' collator holds it
            ntok = train_dataloader.collate_fn.tokenizer
            row: dict[str, Any] = {**job, "step": state.global_step}
            was = model.training
            model.eval()
            with torch.no_grad():
                for name, grid, rule in [
                    ("chosen", DEFAULT_PENALTIES, "least"),
                    ("average", DEFAULT_PENALTIES, "average"),
                    *((f"{p:g}", (p,), "least") for p in DEFAULT_PENALTIES),
                ]:
                    report = solve_readouts(model, ntok, train, penalties=grid, penalty_rule=rule)
                    row[f"mdae {name}"] = _mdae(model, ntok, held)
                    if name == "chosen":
                        code = target_context(model, ntok, train[0], None)
                        row[f"penalty {name}"] = next(
                            (c["penalty"] for c in report.contexts if c["code"] == code), None
                        )
            model.train(was)
            rows.append(row)
            print(
                f"  {job['table']} seed {job['seed']} step {state.global_step}: "
                + " ".join(f"{k}={v:.4g}" for k, v in row.items() if k.startswith("mdae"))
                + f" penalty={row['penalty chosen']}",
                flush=True,
            )

    compare.train_causal_run(train, recipe, callbacks=[Probe()])
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tables", default="friedman1")
    p.add_argument("--seeds", default="0")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--from", dest="first", type=int, default=800)
    p.add_argument("--every", type=int, default=20)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.first, args.every = 20, 10, 5
    jobs = [
        {"table": t, "seed": int(s), "steps": args.steps, "first": args.first,
         "every": args.every, "quick": args.quick}
        for t in args.tables.split(",") for s in args.seeds.split(",")
    ]  # fmt: skip
    start = time.perf_counter()
    out: list[dict[str, Any]] = []
    with ProcessPoolExecutor(args.workers) as pool:
        for rows in pool.map(_run, jobs):
            out.extend(rows)
    for job in jobs:
        mine = [r for r in out if (r["table"], r["seed"]) == (job["table"], job["seed"])]
        for key in [k for k in mine[0] if k.startswith("mdae")] if mine else []:
            values = [r[key] for r in mine]
            jumps = [abs(b / a - 1) for a, b in itertools.pairwise(values) if a > 0]
            print(
                f"{job['table']} seed {job['seed']} {key}: min {min(values):.4g} max "
                f"{max(values):.4g} median step-to-step change {statistics.median(jumps):.1%}"
            )
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "rows": out}, indent=1))
    print(f"# total wall time {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
