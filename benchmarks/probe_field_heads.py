"""Per-field heads while training: a linear Cauchy head per context, trained with the network.

After training, ``train`` solves a linear Cauchy readout per context (a table's field) on the
network's features, ``loc_Y = w_k . [loc_U', n] + b_k`` with noise ``sigma_k``
(:func:`cauchylin_hf.readouts.solve_readouts`); during training only the shared regression head
``Y = W_reg U' + b_reg`` reads them. This probe gives every context of the training rows with
enough numbers (:data:`cauchylin_hf.readouts.MIN_READOUT_COUNT`) a head of the readout's form,
``(w_k, b_k, log sigma_k)``, as parameters trained by the same optimizer and schedule as the
network (``w_k`` starts at ``[W_reg, 0]``, ``b_k`` at ``b_reg``, ``sigma_k`` at the median
absolute deviation of the context's training targets in the value space), and adds their Cauchy
NLL to the loss::

    L = L_cls + lambda * L_reg + c * lambda * mean_i NLL(t_i; w_k . [loc_U'_i, numbers_i] + b_k, sigma_k)

(``c`` is ``--weight``, default 1) so that the features are shaped for a per-field linear
read while the heads follow them (where
``probe_through_readouts.py`` holds solved readouts fixed between solves). ``--target-only``
keeps the term at each text's last number (a table's target). After training the readouts are
solved as always (the heads are dropped) and the held-out target's median absolute error is
scored as ``bench_quality.py`` does; ``--heads 0`` is the package's defaults, run in the same
call so that every ratio is paired by seed (the heads draw no random numbers: the network's
initialisation and the batches are the defaults'). Run::

    python benchmarks/probe_field_heads.py --tables barley,friedman1 --seeds 0,1,2 --heads 0,1 --json FILE
    python benchmarks/probe_field_heads.py --quick      # toy sizes (a smoke run)

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

import torch
from _paired_runs import (
    add_to_optimizer,
    added_loss_term,
    common_arguments,
    integers,
    paired_report,
    run_grid,
    train_and_score,
)
from torch import nn


class FieldHeads(nn.Module):
    """One linear Cauchy head per context code: ``loc = w_k . x + b_k``, ``scale = sigma_k``.

    The codes are kept in a :class:`cauchylin.nn.readouts.ContextReadouts` table (rows without
    a readout), so that a position finds its head by the package's own lookup.

    Args:
        codes: ``[K]`` int64 context codes, distinct.
        weight: ``[K, F]`` initial ``w_k``.
        bias: ``[K]`` initial ``b_k``.
        sigma: ``[K]`` initial ``sigma_k > 0``.
    """

    def __init__(
        self, codes: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, sigma: torch.Tensor
    ) -> None:
        from cauchylin.nn.readouts import ContextReadouts

        super().__init__()
        self.index = ContextReadouts(1)
        self.index.store(codes.tolist(), [None] * codes.numel())
        order = torch.argsort(codes)  # the table's rows are the codes in increasing order
        self.weight = nn.Parameter(weight[order].float().clone())
        self.bias = nn.Parameter(bias[order].float().clone())
        self.log_sigma = nn.Parameter(sigma[order].float().log())

    @property
    def codes(self) -> torch.Tensor:
        """``[K]`` the heads' codes, increasing (row ``k`` is head ``k``)."""
        return self.index.codes

    def rows(self, codes: torch.Tensor) -> torch.Tensor:
        """The head of each code, -1 where there is none."""
        return self.index.lookup(codes)

    def nll(self, features: torch.Tensor, rows: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """``[N]`` Cauchy NLL of ``t`` under the heads ``rows`` (each >= 0) at ``features`` ``[N, F]``."""
        from cauchylin.readout import cauchy_nll

        loc = (features.float() * self.weight[rows]).sum(-1) + self.bias[rows]
        return cauchy_nll(t.float(), loc, self.log_sigma[rows].exp())


def head_term(
    model: Any,
    heads: FieldHeads,
    U_all: Any,
    labels: Any,
    numeric_values: Any,
    attention_mask: Any,
    target_only: bool = False,
) -> Any:
    """The mean head NLL of the ``<NUM>`` targets whose context has a head, or None.

    The positions, codes and earlier numbers are ``probe_through_readouts.number_positions``';
    a head reads the readout's features (:meth:`ContextReadouts.features`, ``[loc_U', n]``).
    """
    from probe_through_readouts import number_positions

    from cauchylin.value_space import to_value_space

    if numeric_values is None:
        return None
    at, codes, numbers = number_positions(
        model, labels, numeric_values, attention_mask, target_only
    )
    rows = heads.rows(codes)
    at = at & (rows >= 0)
    if not bool(at.any()):
        return None
    loc = U_all.loc[:, :-1][at]
    if heads.weight.shape[1] == loc.shape[-1]:  # heads of loc_U' alone (--loc-only)
        x = loc
    else:
        x = model.action.readouts.features(loc, None if numbers is None else numbers[at])
    t = to_value_space(numeric_values[:, 1:][at].float(), model.config.value_space)
    return heads.nll(x, rows[at], t).mean()


def initial_heads(
    model: Any, dataloader: Any, target_only: bool = False, loc_only: bool = False
) -> FieldHeads:
    """A head per context with at least ``MIN_READOUT_COUNT`` numbers in the training rows.

    Each reads what a solved readout reads (``[loc_U', n]``), or ``loc_U'`` alone with
    ``loc_only``.

    Reads the rows through the training collator in order (no draw from the sampler, so the
    training batches stay the defaults'); only the token ids and numbers are needed, no forward.
    """
    from cauchylin_hf.readouts import MIN_READOUT_COUNT
    from probe_through_readouts import number_positions

    from cauchylin.value_space import to_value_space

    data, collate = dataloader.dataset, dataloader.collate_fn
    device = next(model.parameters()).device
    by_code: dict[int, list[float]] = {}
    for start in range(0, len(data), 64):
        batch = collate([data[i] for i in range(start, min(start + 64, len(data)))])
        labels = batch["labels"].to(device)
        values = batch["numeric_values"].to(device)
        mask = batch["attention_mask"].to(device)
        with torch.no_grad():
            at, codes, _ = number_positions(model, labels, values, mask, target_only)
        t = to_value_space(values[:, 1:][at].float(), model.config.value_space)
        for c, v in zip(codes[at].tolist(), t.tolist(), strict=True):
            by_code.setdefault(int(c), []).append(float(v))
    kept = sorted(c for c, v in by_code.items() if len(v) >= MIN_READOUT_COUNT)
    sigma = []
    for c in kept:
        v = torch.tensor(by_code[c])
        sigma.append(max(float((v - v.median()).abs().median()), 1e-3))
    head = model.action.regressor
    table = model.action.readouts
    extra = 0 if loc_only else table.numbers
    w = torch.cat([head.weight.detach()[0].float(), torch.zeros(extra)])
    k = len(kept)
    return FieldHeads(
        torch.tensor(kept, dtype=torch.long),
        w.expand(k, -1),
        head.bias.detach().float().expand(k),
        torch.tensor(sigma),
    ).to(device)


TRAINING: dict[int, tuple[Any, FieldHeads]] = {}
"""The models being trained with field heads (and their heads), by ``id`` of their ``Action``."""


def installed(
    target_only: bool = False, weight: float = 1.0
) -> contextlib.AbstractContextManager[None]:
    """Add ``weight * reg_weight`` times :func:`head_term` to the training loss of every model
    that a :func:`with_heads` callback trains, while active."""

    def term(action, U_all, labels, numeric_values, mask):
        entry = TRAINING.get(id(action))
        if entry is None:
            return None
        model, heads = entry
        return head_term(model, heads, U_all, labels, numeric_values, mask, target_only)

    return added_loss_term(term, weight)


def with_heads(target_only: bool = False, loc_only: bool = False) -> Any:
    """A Trainer callback that gives the model :func:`initial_heads` at the start of training,
    trained by the Trainer's optimizer on the network's schedule."""
    from transformers import TrainerCallback

    class WithHeads(TrainerCallback):
        heads: FieldHeads | None = None

        def on_train_begin(
            self, args, state, control, model=None, optimizer=None, lr_scheduler=None, **kw
        ):
            heads = initial_heads(model, kw["train_dataloader"], target_only, loc_only)
            self.heads = heads
            add_to_optimizer(optimizer, lr_scheduler, list(heads.parameters()))
            TRAINING[id(model.action)] = (model, heads)

        def on_train_end(self, args, state, control, model=None, **kw):
            TRAINING.pop(id(model.action), None)

    return WithHeads()


def run(
    table: str,
    seed: int,
    steps: int,
    heads: bool,
    target_only: bool = False,
    loc_only: bool = False,
    quick: bool = False,
    weight: float = 1.0,
) -> dict:
    """One network trained with field heads (or the defaults), scored on the held-out targets."""
    callback = with_heads(target_only, loc_only) if heads else None
    with installed(target_only, weight):
        callbacks = [] if callback is None else [callback]
        mdae, seconds = train_and_score(table, seed, steps, quick, callbacks)
    return {
        "table": table,
        "seed": seed,
        "steps": steps,
        "heads": int(heads),
        "target_only": target_only,
        "loc_only": loc_only,
        "weight": weight,
        "num_heads": 0 if callback is None else int(callback.heads.codes.numel()),
        "mdae": mdae,
        "train_cpu_s": seconds,
    }


def setting(row: dict) -> str:
    """A run's setting in words: ``defaults``, or ``field heads`` and its variant."""
    if not row["heads"]:
        return "defaults"
    parts = ["field heads"]
    if row.get("target_only"):
        parts.append("target only")
    if row.get("loc_only"):
        parts.append("loc_U' only")
    if row.get("weight", 1.0) != 1.0:
        parts.append(f"weight {row['weight']:g}")
    return ", ".join(parts)


def report(rows: list[dict]) -> list[str]:
    """A markdown table: per table, each setting's seeds, median, and median / defaults'."""
    return paired_report(rows, setting, "setting")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common_arguments(p)
    p.add_argument("--heads", default="0,1", help="1: with field heads, 0: the defaults")
    p.add_argument("--weight", type=float, default=1.0, help="the term's weight, times lambda")
    p.add_argument("--loc-only", action="store_true", help="heads read loc_U' alone")
    args = p.parse_args(argv)
    if not (args.weight > 0 and args.weight < float("inf")):
        p.error(f"--weight must be a finite number > 0, got {args.weight}")
    if args.steps < 1:
        p.error(f"--steps must be at least 1, got {args.steps}")
    settings = integers(p, "--heads", args.heads)
    seeds = integers(p, "--seeds", args.seeds)
    if not settings or any(h not in (0, 1) for h in settings):
        p.error(f"--heads must list 0 and/or 1, got {args.heads!r}")
    steps = 4 if args.quick else args.steps
    rows = run_grid(
        args.tables,
        seeds,
        [bool(h) for h in settings],
        lambda table, seed, heads: run(
            table,
            seed,
            steps,
            heads,
            args.target_only,
            args.loc_only,
            args.quick,
            args.weight,
        ),
        args.json,
    )
    print("\n".join(report(rows)))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
