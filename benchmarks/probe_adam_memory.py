"""How AdamW's memory of the first steps slows the regression: the same run at two ``beta2``.

Trains the causal model of ``bench_quality.py`` (same backbone, budget and table) once per
``--beta2`` value and, at a few steps, measures on a fixed batch of 64 training rows:

* ``cls`` / ``reg``: the two loss parts;
* ``|g_cls|`` / ``|g_reg|``: the norm of each part's gradient on the decoder layers (before the
  Trainer's gradient clipping);
* ``step/lr``: the median over the decoder layers' parameters of AdamW's step in units of the
  learning rate, ``|m_hat| / (sqrt(v_hat) + eps)`` (the bias-corrected moments of the
  optimizer's own state; the Trainer clips each step's gradient to norm 1 before AdamW sees it).

Then the held-out target's median absolute error. The training page ("Numbers in every context")
quotes one such run.

Run::

    python benchmarks/probe_adam_memory.py --table cancer --seed 1 --beta2 0.999,0.95 \\
        --json docs/assets/benchmarks/adam_memory.json --plot docs/assets/benchmarks/adam_memory.png
    python benchmarks/probe_adam_memory.py --quick      # toy sizes (the test suite's run)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

STEPS = (1, 10, 30, 100, 200, 300, 500, 700, 1000)


def probe(
    table: str, seed: int, beta2: float, max_steps: int, quick: bool = False
) -> tuple[list[dict], float]:
    """The measurements at ``STEPS`` and the held-out MdAE of one training run."""
    import torch
    from bench_quality import QUICK_SIZES, load_table
    from cauchylin_hf.app import compare
    from cauchylin_hf.data import NumericDataCollator, NumericDataset
    from transformers import TrainerCallback

    train_texts, held, _ = load_table(table, quick)
    rows: list[dict[str, Any]] = []

    class Probe(TrainerCallback):
        def on_train_begin(self, args, state, control, train_dataloader=None, **kw):
            # the numeric tokenizer the run builds, as its training batches' collator holds it
            tokenizer = train_dataloader.collate_fn.tokenizer
            data = NumericDataset.from_texts(train_texts[:64], tokenizer)
            self.batch = NumericDataCollator(tokenizer)([data[i] for i in range(len(data))])

        def on_step_end(self, args, state, control, model=None, optimizer=None, **kw):
            step = state.global_step
            if step not in STEPS:
                return
            body = [p for n, p in model.named_parameters() if p.requires_grad and ".layers." in n]
            out = model(**self.batch)
            g_cls = torch.autograd.grad(out.cls_loss, body, retain_graph=True, allow_unused=True)
            g_reg = torch.autograd.grad(out.reg_loss, body, allow_unused=True)
            steps = []
            for p in body:
                st = optimizer.state[p]
                if "exp_avg" not in st:  # a parameter the loss does not reach
                    continue
                # the optimizer's own betas, as the Trainer built it
                m_hat = st["exp_avg"] / (1 - args.adam_beta1**step)
                v_hat = st["exp_avg_sq"] / (1 - args.adam_beta2**step)
                steps.append((m_hat.abs() / (v_hat.sqrt() + args.adam_epsilon)).flatten())

            def norm(grads: tuple) -> float:
                return math.sqrt(sum(float(g.square().sum()) for g in grads if g is not None))

            rows.append(
                {
                    "step": step,
                    "cls": float(out.cls_loss),
                    "reg": float(out.reg_loss),
                    "g_cls": norm(g_cls),
                    "g_reg": norm(g_reg),
                    "adam_step": float(torch.cat(steps).median()),
                }
            )

    recipe = compare.Recipe(
        max_steps=max_steps, seed=seed, adam_beta2=beta2, **(QUICK_SIZES if quick else {})
    )
    model, ntok, _ = compare.train_causal_run(train_texts, recipe, callbacks=[Probe()])
    p = compare.causal_predictions(model, ntok, held, (0.5,))
    return rows, float((p["median"] - p["true"]).abs().median())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--table", default="cancer")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--beta2", default="0.999,0.95")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--quick", action="store_true", help="toy sizes (smoke test)")
    p.add_argument("--json", default=None)
    p.add_argument("--plot", default=None)
    args = p.parse_args(argv)
    try:
        betas = [float(b) for b in args.beta2.split(",") if b]
    except ValueError:
        p.error(f"--beta2 must be a comma-separated list of numbers, got {args.beta2!r}")
    if not betas or not all(0.0 <= b < 1.0 for b in betas):
        p.error(f"every --beta2 must lie in [0, 1), got {args.beta2!r}")
    if args.steps < 1:
        p.error("--steps must be positive")
    import torch

    torch.set_num_threads(1)
    import _machine

    runs = []
    for beta2 in betas:
        rows, mdae = probe(args.table, args.seed, beta2, args.steps, args.quick)
        runs.append({"beta2": beta2, "rows": rows, "mdae": mdae})
        print(f"\n== {args.table}, seed {args.seed}, adam_beta2={beta2}")
        print(
            f"{'step':>5s} {'cls':>9s} {'reg':>8s} {'|g_cls|':>9s} {'|g_reg|':>8s} {'step/lr':>8s}"
        )
        for r in rows:
            print(
                f"{r['step']:5d} {r['cls']:9.4g} {r['reg']:8.3f} {r['g_cls']:9.4g} "
                f"{r['g_reg']:8.4g} {r['adam_step']:8.3f}"
            )
        print(f"held-out target MdAE {mdae:.4g}")
    if args.json:
        payload = {"machine": _machine.machine_info(), "args": vars(args), "runs": runs}
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(payload, f, indent=1)
        os.replace(tmp, args.json)
    if args.plot:
        plot(runs, args, _machine.describe())
    return 0


def plot(runs: list[dict], args: argparse.Namespace, machine: str) -> None:
    """AdamW's median step and the two gradient norms against the step, one line per beta2."""
    import _plotting

    plt = _plotting.pyplot()
    fig, (ax_step, ax_grad) = plt.subplots(1, 2, figsize=(11, 4.2))
    for run in runs:
        steps = [r["step"] for r in run["rows"]]
        label = f"beta2={run['beta2']} (held-out MdAE {run['mdae']:.3g})"
        ax_step.plot(steps, [r["adam_step"] for r in run["rows"]], marker="o", label=label)
        (line,) = ax_grad.plot(steps, [r["g_reg"] for r in run["rows"]], marker="o", label=label)
        ax_grad.plot(
            steps, [r["g_cls"] for r in run["rows"]], marker="x", ls="--", color=line.get_color()
        )
    ax_step.set(xscale="log", yscale="log", xlabel="training step", ylabel="median AdamW step / lr")
    ax_step.set_title("decoder layers: AdamW's step")
    ax_grad.set(xscale="log", yscale="log", xlabel="training step", ylabel="gradient norm")
    ax_grad.set_title("regression (o, solid) and token loss (x, dashed)")
    ax_step.legend(fontsize=8)
    fig.suptitle(f"{args.table}, seed {args.seed}, {args.steps} steps")
    _plotting.footnote(fig, machine)
    _plotting.save(fig, args.plot)


if __name__ == "__main__":
    raise SystemExit(main())
