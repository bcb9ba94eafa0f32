"""Training through the solved readouts: solve them every few steps and train the network on their likelihood.

After training, ``train`` solves a linear Cauchy readout per context on the network's features
(:func:`cauchylin_hf.readouts.solve_readouts`); during training only the shared regression head
``Y = W_reg U' + b_reg`` reads them, so the features are shaped for a readout that is not the one
used. This probe trains the causal model of ``bench_quality.py`` (same backbone, recipe, tables
and split) with the readouts solved every ``--every`` optimizer steps on the training rows (from
that step on), and adds to the loss, at every ``<NUM>`` target whose context has a solved
readout, that readout's Cauchy negative log-likelihood of the target::

    L = L_cls + lambda * L_reg + lambda * mean_i NLL(t_i; w_k . [loc_U'_i, numbers_i] + b_k, sigma_k)

with the readout ``(w_k, b_k, sigma_k)`` of position ``i``'s context ``k`` held fixed between
two solves, so the gradient reaches the network through ``w_k`` (the direction that readout
reads). ``--target-only`` keeps the term at each text's last number (a table's target) only.
The network is trained once per setting and seed; ``--every 0`` is the package's defaults, run
in the same call so that every ratio is paired by seed. The readouts are solved again after
training and the held-out target's median absolute error (MdAE) is scored as
``bench_quality.py`` does. Run::

    python benchmarks/probe_through_readouts.py --tables barley,friedman1 --seeds 0,1,2 --every 0,100 --json FILE
    python benchmarks/probe_through_readouts.py --quick      # toy sizes (a smoke run)

It is a probe, not a setting of the package: the term is added by wrapping the loss function
that the model's ``forward`` calls (:func:`cauchylin_hf.loss.shifted_causal_loss`), while
:func:`installed` is active.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _paired_runs import (
    added_loss_term,
    common_arguments,
    integers,
    paired_report,
    run_grid,
    train_and_score,
)


def number_positions(
    model: Any, labels: Any, numeric_values: Any, attention_mask: Any, target_only: bool = False
) -> tuple[Any, Any, Any]:
    """``(at, codes, numbers)``: where a position predicts a ``<NUM>`` target, and what its readout reads.

    ``labels`` are unshifted (the inputs, ``-100`` at padding), as the collator gives them:
    position ``i`` predicts label ``i + 1``. ``at`` is ``[B, L - 1]`` bool over the predicting
    positions (each text's last number only with ``target_only``); ``codes`` and ``numbers`` are
    the model's :meth:`readout_context` at the predicting positions (``[B, L - 1]`` and
    ``[B, L - 1, S]``, numbers None when ``S = 0``).
    """
    import torch

    mask = torch.ones_like(labels) if attention_mask is None else attention_mask
    ids = torch.where(labels < 0, torch.zeros_like(labels), labels)
    codes, numbers = model.readout_context(ids, numeric_values, mask)
    num = int(model.config.num_token_id)
    at = (labels[:, 1:] == num) & mask[:, 1:].bool() & mask[:, :-1].bool()
    if target_only:
        index = torch.arange(at.shape[1], device=at.device).expand_as(at)
        last = torch.where(at, index, torch.full_like(index, -1)).max(1).values
        at = at & (index == last[:, None])
    return at, codes[:, :-1], None if numbers is None else numbers[:, :-1]


def readout_term(
    model: Any,
    U_all: Any,
    labels: Any,
    numeric_values: Any,
    attention_mask: Any,
    target_only: bool = False,
) -> Any:
    """The mean readout NLL of the ``<NUM>`` targets whose context has a solved readout, or None.

    The positions are :func:`number_positions`'; a target's readout is its predicting
    position's context's.
    """
    import torch

    from cauchylin import CauchyVector
    from cauchylin.nn.modes import STANDARD
    from cauchylin.readout import cauchy_nll
    from cauchylin.value_space import to_value_space

    table = model.action.readouts
    if table.num_contexts == 0 or numeric_values is None:
        return None
    at, codes, numbers = number_positions(
        model, labels, numeric_values, attention_mask, target_only
    )
    at = at & torch.isin(codes, table.codes.to(codes.device))
    if not bool(at.any()):
        return None
    U = CauchyVector(U_all.loc[:, :-1][at], U_all.scale[:, :-1][at], validate_args=False)
    read = None if numbers is None else numbers[at]
    cfg = model.config
    out = model.action(U, STANDARD, cfg.loss_temperature, context=codes[at], numbers=read)
    t = to_value_space(numeric_values[:, 1:][at].float(), cfg.value_space)
    return cauchy_nll(t, out.loc_Y.float(), out.scale_Y.float()).mean()


TRAINING: dict[int, Any] = {}
"""The models being trained through their readouts, by ``id`` of their ``Action``."""


def installed(target_only: bool = False) -> contextlib.AbstractContextManager[None]:
    """Add ``reg_weight`` times :func:`readout_term` to the training loss of every model that a
    :func:`resolve_every` callback trains, while active."""

    def term(action, U_all, labels, numeric_values, mask):
        model = TRAINING.get(id(action))
        if model is None:
            return None
        return readout_term(model, U_all, labels, numeric_values, mask, target_only)

    return added_loss_term(term)


def resolve_every(every: int) -> Any:
    """A Trainer callback that solves the readouts on the training rows every ``every`` steps
    (and lets :func:`installed` train its model through them)."""
    from cauchylin_hf.readouts import solve_readouts
    from transformers import TrainerCallback

    class ResolveEvery(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kw):
            TRAINING[id(model.action)] = model

        def on_step_end(self, args, state, control, model=None, train_dataloader=None, **kw):
            if state.global_step % every == 0 and state.global_step < state.max_steps:
                was = model.training
                # the run's numeric tokenizer, as its training batches' collator holds it
                tokenizer = train_dataloader.collate_fn.tokenizer
                solve_readouts(model, tokenizer, train_dataloader.dataset)
                model.train(was)

        def on_train_end(self, args, state, control, model=None, **kw):
            TRAINING.pop(id(model.action), None)

    return ResolveEvery()


def run(table: str, seed: int, steps: int, every: int, target_only: bool, quick: bool) -> dict:
    """One network trained with the readouts solved every ``every`` steps (0: the defaults)."""
    with installed(target_only):
        callbacks = [] if every == 0 else [resolve_every(every)]
        mdae, seconds = train_and_score(table, seed, steps, quick, callbacks)
    return {
        "table": table,
        "seed": seed,
        "steps": steps,
        "every": every,
        "target_only": target_only,
        "mdae": mdae,
        "train_cpu_s": seconds,
    }


def report(rows: list[dict]) -> list[str]:
    """A markdown table: per table, each setting's seeds, median, and median / defaults'."""
    return paired_report(rows, lambda r: str(r["every"] or "defaults"), "every")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common_arguments(p)
    p.add_argument("--every", default="0,100", help="solve every this many steps; 0: defaults")
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error(f"--steps must be at least 1, got {args.steps}")
    everies = integers(p, "--every", args.every)
    seeds = integers(p, "--seeds", args.seeds)
    if not everies or any(e < 0 for e in everies):
        p.error(f"--every must list steps >= 0, got {args.every!r}")
    steps = 4 if args.quick else args.steps
    rows = run_grid(
        args.tables,
        seeds,
        everies,
        lambda table, seed, every: run(table, seed, steps, every, args.target_only, args.quick),
        args.json,
    )
    print("\n".join(report(rows)))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
