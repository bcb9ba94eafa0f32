"""How AdamW's memory of the first steps slows the regression: the same run at two ``beta2``.

Trains the causal model of ``bench_quality.py`` (same backbone, budget and table) once per
``--beta2`` value and, at a few steps, measures on a fixed batch of 64 training rows:

* ``cls`` / ``reg``: the two loss parts;
* ``|g_cls|`` / ``|g_reg|``: the norm of each part's gradient on the decoder layers (before the
  Trainer's gradient clipping);
* ``step``: the median over the decoder layers' parameters of AdamW's step in units of the
  learning rate, ``|m_hat| / sqrt(v_hat)`` (bias-corrected moments of the optimizer's state).

Then the held-out target's median absolute error. The training page ("Numbers in every context")
quotes one such run.

Run::

    python benchmarks/probe_adam_memory.py --table cancer --seed 1 --beta2 0.999,0.95
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

STEPS = (1, 10, 30, 100, 200, 300, 500, 700, 1000)
BETA1 = 0.9  # TrainingArguments' adam_beta1, which the recipe keeps


def probe(table: str, seed: int, beta2: float, max_steps: int) -> tuple[list[dict], float]:
    """The measurements at ``STEPS`` and the held-out MdAE of one training run."""
    import torch
    from bench_quality import load_table
    from cauchylin_hf.app import compare
    from cauchylin_hf.data import NumericDataCollator, NumericDataset
    from transformers import TrainerCallback

    train_texts, held, _ = load_table(table)
    rows: list[dict[str, Any]] = []

    class Probe(TrainerCallback):
        def __init__(self, tokenizer: Any) -> None:
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
                m_hat = st["exp_avg"] / (1 - BETA1**step)
                v_hat = st["exp_avg_sq"] / (1 - beta2**step)
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

    recipe = compare.Recipe(max_steps=max_steps, seed=seed, adam_beta2=beta2)
    train = compare.train

    def with_probe(model: Any, tokenizer: Any, texts: Any, *a: Any, **kw: Any) -> Any:
        return train(model, tokenizer, texts, *a, callbacks=[Probe(tokenizer)], **kw)

    compare.train = with_probe
    try:
        model, ntok, _ = compare.train_causal(train_texts, recipe)
    finally:
        compare.train = train
    p = compare.causal_predictions(model, ntok, held, (0.5,))
    return rows, float((p["median"] - p["true"]).abs().median())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--table", default="cancer")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--beta2", default="0.999,0.95")
    p.add_argument("--steps", type=int, default=1000)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    for beta2 in (float(b) for b in args.beta2.split(",")):
        rows, mdae = probe(args.table, args.seed, beta2, args.steps)
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
