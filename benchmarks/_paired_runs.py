"""What the training probes share: the held-out score, the row log and the paired table.

A probe (``probe_through_readouts.py``, ``probe_field_heads.py``) trains the causal model of
``bench_quality.py`` with one change and with the defaults in the same call, one run per table,
seed and setting; every run is scored by the held-out target's median absolute error, written as
one JSON line, and the runs of a table are set beside the defaults' of the same seeds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any


def common_arguments(p: argparse.ArgumentParser) -> None:
    """The flags every probe takes: tables, seeds, steps, the term at the target only, the
    JSON-lines file and the toy sizes."""
    p.add_argument("--tables", default="barley,friedman1")
    p.add_argument("--seeds", default="0")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--target-only", action="store_true", help="the term at each text's target")
    p.add_argument("--json", default=None, help="append one JSON line per run to this file")
    p.add_argument("--quick", action="store_true", help="toy sizes: a smoke run")


def integers(p: argparse.ArgumentParser, flag: str, text: str) -> list[int]:
    """The comma-separated integers of a flag, or the parser's error naming it."""
    try:
        return [int(x) for x in text.split(",") if x]
    except ValueError as exc:
        p.error(f"{flag} takes integers: {exc}")
        raise  # p.error exits; this keeps type checkers informed


@contextlib.contextmanager
def added_loss_term(
    term: Callable[[Any, Any, Any, Any, Any], Any], weight: float = 1.0
) -> Iterator[None]:
    """While active, every training forward's loss is the package's plus
    ``weight * reg_weight * term(action, U_all, labels, numeric_values, attention_mask)``.

    ``term`` returns None where it adds nothing (e.g. a model the probe does not train);
    pre-shifted labels are left alone. It wraps the loss function that the model's ``forward``
    calls (:func:`cauchylin_hf.loss.shifted_causal_loss`, as ``cauchylin_hf.model`` holds it).
    """
    from cauchylin_hf import model as modeling

    plain = modeling.shifted_causal_loss

    def with_term(action, config, U_all, labels, target_values, numeric_values, mask, **kw):
        loss = plain(action, config, U_all, labels, target_values, numeric_values, mask, **kw)
        if kw.get("pre_shifted"):
            return loss
        extra = term(action, U_all, labels, numeric_values, mask)
        if extra is None:
            return loss
        return type(loss)(loss.total + weight * config.reg_weight * extra, loss.cls, loss.reg)

    modeling.shifted_causal_loss = with_term
    try:
        yield
    finally:
        modeling.shifted_causal_loss = plain


def add_to_optimizer(optimizer: Any, lr_scheduler: Any, params: Sequence[Any]) -> None:
    """Train ``params`` with the Trainer's optimizer on the network's schedule.

    A param group like the network's first, without weight decay, is added; where the schedule
    is a ``LambdaLR`` (the Trainer's warm-up and decay), the new group follows the first
    group's factor at every step.
    """
    group = dict(optimizer.param_groups[0])
    group["params"] = list(params)
    group["weight_decay"] = 0.0
    optimizer.add_param_group(group)
    lambdas = getattr(lr_scheduler, "lr_lambdas", None)
    if lambdas is not None:
        lambdas.append(lambdas[0])
        lr_scheduler.base_lrs.append(lr_scheduler.base_lrs[0])


def trained(
    table: str, seed: int, steps: int, quick: bool, callbacks: Sequence[Any] = ()
) -> tuple[Any, Any, Any, list[str], float]:
    """Train ``bench_quality.py``'s causal model on a table (one torch thread).

    Returns:
        ``(model, numeric tokenizer, TrainResult, held-out texts, training CPU seconds)``.
    """
    import torch
    from bench_quality import load_table
    from cauchylin_hf.app import compare

    torch.set_num_threads(1)
    texts, held, _ = load_table(table, quick)
    recipe = compare.Recipe(max_steps=steps, seed=seed)
    if quick:
        recipe = compare.Recipe(hidden_size=16, num_layers=1, num_heads=2, max_steps=steps)
    start = time.process_time()
    model, ntok, result = compare.train_causal_run(texts, recipe, callbacks=list(callbacks))
    return model, ntok, result, held, time.process_time() - start


def train_and_score(
    table: str, seed: int, steps: int, quick: bool, callbacks: Sequence[Any] = ()
) -> tuple[float, float]:
    """Train ``bench_quality.py``'s causal model on a table and score it on the held-out rows.

    Returns:
        ``(held-out target MdAE, training CPU seconds)``.
    """
    model, ntok, _, held, seconds = trained(table, seed, steps, quick, callbacks)
    return heldout_mdae(model, ntok, held), seconds


def heldout_mdae(model: Any, tokenizer: Any, held: list[str]) -> float:
    """The median absolute error of the held-out texts' targets (their last number), read at the
    predictive median as ``bench_quality.py`` scores it."""
    from cauchylin_hf.predict import number_predictions

    return target_mdae(number_predictions(model, tokenizer, held, levels=(0.5,)), held)


def target_mdae(pred: Any, held: list[str]) -> float:
    """The median absolute error of ``pred`` (a :class:`~cauchylin_hf.predict.NumberPredictions`
    of the texts ``held``) at each text's target, against the target as written in the text
    (read in float64, as ``bench_quality.py`` reads it)."""
    import torch
    from cauchylin_hf.app import compare

    true = torch.tensor([compare.split_at_target(t)[1] for t in held], dtype=torch.float64)
    median = pred.prediction.median[pred.is_target]
    if median.shape != true.shape:
        raise ValueError(f"{median.numel()} targets predicted for {len(held)} texts")
    return statistics.median((median - true).abs().tolist())


def run_grid(
    tables: str,
    seeds: Sequence[int],
    settings: Sequence[Any],
    run_one: Callable[[str, int, Any], dict],
    path: str | None,
) -> list[dict]:
    """``run_one(table, seed, setting)`` for every table (comma-separated), seed and setting in
    that order, each row recorded (:func:`record`) as it comes; the rows."""
    rows = []
    for table in [t for t in tables.split(",") if t]:
        for seed in seeds:
            for setting in settings:
                row = run_one(table, seed, setting)
                rows.append(row)
                record(row, path)
    return rows


def record(row: dict, path: str | None) -> None:
    """Print a run's row as JSON and append it to ``path`` (one line per run), if given."""
    print(json.dumps(row), flush=True)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


def paired_report(rows: list[dict], setting: Callable[[dict], str], column: str) -> list[str]:
    """A markdown table: per table, each setting's seeds, median, and median / the defaults'.

    ``setting(row)`` names a run's setting, ``"defaults"`` for the package's; ``column`` heads
    the settings' column.
    """
    lines = [f"| table | {column} | seeds | median | / defaults |", "|---|---|---|---|---|"]
    for table in dict.fromkeys(r["table"] for r in rows):
        mine = [r for r in rows if r["table"] == table]
        base = [r["mdae"] for r in mine if setting(r) == "defaults"]
        for name in dict.fromkeys(setting(r) for r in mine):
            runs = sorted((r for r in mine if setting(r) == name), key=lambda r: r["seed"])
            med = statistics.median(r["mdae"] for r in runs)
            ratio = f"{med / statistics.median(base):.2f}" if base else ""
            seeds = " / ".join(f"{r['mdae']:.4g}" for r in runs)
            lines.append(f"| {table} | {name} | {seeds} | {med:.4g} | {ratio} |")
    return lines
