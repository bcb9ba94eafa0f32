"""The texts a training holds out to calibrate on, and what its checkpoints record of its data.

* :func:`calibration_split`: the training examples and the ones held out of training to
  calibrate on (copies of one text on one side; a random draw or the last texts).
* :data:`HOLDOUT_FILE`, :func:`holdout_record`, :func:`check_resumed_holdout`: the record of the
  held-out texts in every checkpoint, and the refusal to resume with other ones.
* :func:`readout_rows`: the training rows the readouts are solved on.
* :func:`run_record`: what a checkpoint records of the training rows, the trained parameters and
  the batch (compared before a resume).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset, Subset

from cauchylin.conformal import calibration_holdout

from .data import NumericDataset
from .data.sampling import sample_rows
from .data.streaming import CopiesOfOneText, LazyNumericDataset, as_numeric_dataset
from .tokenizer import NumericTokenizer
from .trainer_checkpoints import RUN_FILE
from .training_options import READOUT_ROWS

__all__ = [
    "HOLDOUT_FILE",
    "DataSource",
    "calibration_split",
    "check_resumed_holdout",
    "example_key",
    "holdout_record",
    "readout_rows",
    "run_record",
    "trainable_count",
]

logger = logging.getLogger("cauchylin_hf.training")  # the warnings train() has always given

DataSource = Dataset | Iterable[str] | os.PathLike[str]
"""Training or evaluation data: an encoded dataset, texts, a dataset file (a ``Path``), or a
Hugging Face ``datasets.Dataset`` / ``IterableDataset`` with a ``"text"`` column."""


def _as_dataset(
    data: DataSource | None,
    tokenizer: NumericTokenizer,
    name: str,
    max_length: int | None,
) -> Dataset | None:
    """A dataset from texts, a file, a ``datasets`` dataset (encoded when read) or a dataset."""
    if data is None:
        return None
    return as_numeric_dataset(data, tokenizer, name=name, max_length=max_length)


def calibration_split(
    train_ds: Dataset,
    calibration: float | str | DataSource | None,
    tokenizer: NumericTokenizer,
    max_length: int | None,
    seed: int,
    *,
    last: bool = False,
) -> tuple[Dataset, Dataset | None]:
    """``(the examples to train on, the examples to calibrate on or None)``; ``last`` holds
    out the last examples (data in time order) instead of a random draw."""
    if calibration is None or isinstance(calibration, (str, int, float)):
        try:
            n = len(train_ds)  # type: ignore[arg-type]
        except TypeError:
            if calibration in (None, 0, 0.0):
                return train_ds, None
            raise ValueError(
                "a share of an iterable dataset cannot be held out: pass calibration texts or None"
            ) from None
        size = calibration_holdout(n, calibration)
        if size == 0:
            return train_ds, None
    else:
        held = _as_dataset(calibration, tokenizer, "calibration", max_length)
        return train_ds, held
    if isinstance(train_ds, LazyNumericDataset):  # by hash: nothing encoded, nothing kept per row
        return train_ds.split_last(size) if last else train_ds.split_held_out(size, seed)
    # Copies of one text go to the same side: a calibration text that training also saw would
    # be read better than a new one, and the intervals would come out too narrow. A held-out
    # text is calibrated on once: a text repeated ten times is not ten new texts (on the demo
    # corpus, calibrating on every copy covered 0.88 of new numbers at 90%, once 0.91).
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i in range(n):
        groups.setdefault(example_key(train_ds[i]), []).append(i)
    members = list(groups.values())
    if len(members) == 1:
        raise CopiesOfOneText(n)
    if last:  # the groups whose last copy comes last
        order = sorted(range(len(members)), key=lambda g: -members[g][-1])
    else:
        order = torch.randperm(len(members), generator=torch.Generator().manual_seed(seed)).tolist()
    taken, held_out = 0, []
    for g in order:
        if taken >= size:
            break
        if taken + len(members[g]) >= n:  # the last text: it stays to train on
            continue
        taken += len(members[g])
        held_out.append(members[g][0])
    chosen = {i for g in order[: len(held_out)] for i in members[g]}
    kept = [i for i in range(n) if i not in chosen]
    return Subset(train_ds, kept), Subset(train_ds, sorted(held_out))


HOLDOUT_FILE = "calibration_holdout.json"
"""The file in every checkpoint that records the texts the run held out of training to calibrate
on (their count, the seed and the training rows they were drawn with, and a digest of their
contents): a resumed run must hold out the same texts (checked when it resumes)."""


def holdout_record(rows: int, held: Dataset | None, seed: int) -> dict[str, Any]:
    """The record :data:`HOLDOUT_FILE` holds: ``rows`` training examples before the hold-out,
    ``held`` (the held-out examples, or None) drawn with ``seed``, and an order-free digest of
    the held-out examples' contents.

    Args:
        rows: the training examples the hold-out was drawn from.
        held: the held-out examples, or None when none are held out.
        seed: the seed of the draw.

    Returns:
        ``{"rows", "held_out", "seed", "digest"}``.

    Example:
        >>> holdout_record(10, None, 0)["held_out"]
        0
    """
    count = 0 if held is None else len(held)  # type: ignore[arg-type]
    keys = sorted(
        hashlib.sha256(repr(example_key(held[i])).encode()).hexdigest()  # type: ignore[index]
        for i in range(count)
    )
    digest = hashlib.sha256("\n".join(keys).encode()).hexdigest()
    return {"rows": int(rows), "held_out": count, "seed": int(seed), "digest": digest}


def check_resumed_holdout(checkpoint: str | os.PathLike[str], record: dict[str, Any]) -> None:
    """Refuse to resume a run whose calibration texts would not be the run's own.

    The texts held out to calibrate on must never have been trained on. A run resumed with
    another seed or other rows draws another hold-out, whose texts the run trained on before
    its checkpoint: the intervals calibrated on them would come out too narrow. ``record`` is
    this call's ``holdout_record``; the checkpoint's :data:`HOLDOUT_FILE` must hold the same
    digest. A checkpoint without the file (written by an earlier release) cannot be checked: a
    warning of the ``cauchylin_hf.training`` logger says so.

    Args:
        checkpoint: the checkpoint folder resumed from.
        record: this call's hold-out (only called when it holds texts out).

    Raises:
        ValueError: the checkpoint's hold-out differs, or its record cannot be read (the
            message names the file, both hold-outs and what to do).
    """
    path = Path(checkpoint) / HOLDOUT_FILE
    if not os.path.lexists(path):
        logger.warning(
            "%s holds no %s (written by an earlier release): the texts held out to calibrate "
            "on cannot be checked against the run's; resume with the run's seed and texts",
            checkpoint,
            HOLDOUT_FILE,
        )
        return
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        before = {k: saved[k] for k in ("rows", "held_out", "seed", "digest")}
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise ValueError(
            f"{path}: the record of the run's calibration texts cannot be read ({exc}); "
            "resume from another checkpoint, or pass calibration=None to resume without "
            "calibrating"
        ) from None
    if before["digest"] == record["digest"]:
        return
    if before["held_out"]:
        was = (
            f"held out {before['held_out']} of its {before['rows']} training texts (seed "
            f"{before['seed']})"
        )
    else:
        was = f"trained on all of its {before['rows']} texts"
    raise ValueError(
        f"resume_from_checkpoint: the run of {os.fspath(checkpoint)} {was} to calibrate on, and "
        f"this call holds out {record['held_out']} of {record['rows']} (seed {record['seed']}) "
        "that are not those: texts the run trained on would be calibrated on. Resume with the "
        "run's seed and training data, or hold nothing out (calibration=None, --calibration 0) "
        "or pass calibration texts of their own"
    )


def readout_rows(train_ds: Dataset, seed: int, limit: int = READOUT_ROWS) -> Dataset:
    """The training rows the readouts are solved on: all, or a sample of ``limit`` (a random
    one, or the stream's first rows for an iterable dataset)."""
    try:
        n = len(train_ds)  # type: ignore[arg-type]
    except TypeError:
        return NumericDataset(list(itertools.islice(iter(train_ds), limit)), name="readouts")
    rows = sample_rows(n, limit, seed)
    return train_ds if rows is None else Subset(train_ds, rows)


def example_key(example: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes two encoded examples the same text: their ids and numbers."""
    ids = example["input_ids"]
    values = example.get("numeric_values")
    ids_key = tuple(ids.tolist() if isinstance(ids, torch.Tensor) else ids)
    if values is None:
        return ids_key
    return ids_key, tuple(values.tolist() if isinstance(values, torch.Tensor) else values)


_DIGEST_ROWS = 1000
"""The most training examples (evenly spaced) whose ids and numbers a checkpoint's record
digests."""


def texts_digest(train_ds: Dataset) -> str | None:
    """A digest of up to :data:`_DIGEST_ROWS` evenly spaced training examples held in memory
    (None for data read from disk as it trains, or without a length)."""
    inner = train_ds.dataset if isinstance(train_ds, Subset) else train_ds
    if isinstance(inner, LazyNumericDataset):
        return None
    try:
        n = len(train_ds)  # type: ignore[arg-type]
    except TypeError:
        return None
    h = hashlib.sha256()
    for i in range(0, n, max(1, n // _DIGEST_ROWS)):
        h.update(repr(example_key(train_ds[i])).encode())
    return h.hexdigest()[:16]


def run_record(
    files: Mapping[str, str] | None,
    train_ds: Dataset,
    model: nn.Module,
    steps: Mapping[str, Any],
) -> tuple[dict[str, str], dict[str, Any]]:
    """``checkpoint_files`` with :data:`RUN_FILE` holding the training rows (their number and a
    digest), the trained parameters and the batch (added to a record the caller gave), and that
    record."""
    out = dict(files or {})
    record: dict[str, Any] = {}
    if RUN_FILE in out:
        given = json.loads(out[RUN_FILE])
        if not isinstance(given, dict):
            raise ValueError(f"checkpoint_files[{RUN_FILE!r}] must be a JSON object")
        record.update(given)
    try:
        record["train_rows"] = len(train_ds)  # type: ignore[arg-type]
    except TypeError:
        pass
    digest = texts_digest(train_ds)
    if digest is not None:
        record["train_texts"] = digest
    record["trainable_tensors"] = trainable_count(model)
    record.update(steps)
    out[RUN_FILE] = json.dumps(record, indent=2, ensure_ascii=False) + "\n"
    return out, record


def trainable_count(model: nn.Module) -> int:
    """The parameter tensors the optimizer steps (those that require a gradient)."""
    return sum(1 for p in model.parameters() if p.requires_grad)
