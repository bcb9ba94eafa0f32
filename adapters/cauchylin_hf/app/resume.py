"""``cauchylin-lm train``'s checkpoints, decided before torch is imported.

Everything here uses the standard library only (the console script runs it in its checks,
:func:`cauchylin_hf.app.checks.preflight`), so a resume that cannot go on, or a new training
into a folder that holds an earlier training's checkpoints, is refused at once, before any
model is built or any tokenizer trained:

* ``--resume-from-checkpoint`` with no complete checkpoint in ``--output-dir``;
* a checkpoint with a damaged or missing file
  (:func:`~cauchylin_hf.trainer_checkpoints.check_checkpoint`; a missing optimizer state only
  with ``--fresh-optimizer-state``);
* a resume with other data, another model or another setting that changes what is trained:
  every checkpoint holds the record :func:`run_record` makes of its command, and the resume's
  record is compared with it;
* a new training (no ``--resume-from-checkpoint``) into a folder with checkpoints.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ..trainer_checkpoints import (
    TRAINER_STATE_FILE,
    CheckpointError,
    check_checkpoint,
    list_checkpoints,
    read_run_record,
    resolve_resume_checkpoint,
    run_differences,
)

__all__ = ["check_checkpoints", "resumed_from", "run_record"]

_NAMES = {
    "data": "the data (--data)",
    "model_config": "the model (MODEL's config.json, or --from-config)",
    "vocab_size": "--vocab-size",
    "template": "--template",
    "target": "--target",
    "max_length": "--max-length",
    "batch_size": "--batch-size",
    "train_backbone": "the backbone trained (--train-backbone)",
    "target_weight": "--target-weight",
    "learning_rate": "--learning-rate",
    "lr_scheduler": "--lr-scheduler",
    "warmup_ratio": "--warmup-ratio",
    "warmup_steps": "--warmup-steps",
    "seed": "--seed",
}


def _digest(path: Path) -> str:
    """A SHA-256 of a data file, or of a saved dataset folder's files (names and contents)."""
    h = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        if path.is_dir():
            h.update(str(file.relative_to(path)).encode("utf-8", "surrogateescape") + b"\0")
        with file.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]


def _config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _backbone_trained(args: argparse.Namespace) -> bool:
    """Whether the backbone trains: ``--train-backbone`` / ``--no-train-backbone``, else yes for
    ``--from-config`` and for a saved causal model that trained it, no for a base."""
    if args.train_backbone is not None:
        return bool(args.train_backbone)
    if args.from_config is not None:
        return True
    config = _config(Path(args.model) / "config.json")
    return config.get("model_type") == "cauchy_lm" and not config.get("freeze_backbone", True)


def run_record(args: argparse.Namespace) -> dict[str, Any]:
    """What a training command ran on, as its checkpoints record it
    (:data:`~cauchylin_hf.trainer_checkpoints.RUN_FILE`).

    The data file's digest, the model's (its ``config.json``, or the ``--from-config`` preset
    or file), the options that change what is trained on or which parameters train, and those
    of the schedule and the batch order (learning rate, schedule, warm-up, seed).

    Args:
        args: the parsed arguments of ``train``.

    Returns:
        The record (JSON values).

    Example:
        >>> import tempfile
        >>> data = Path(tempfile.mkdtemp()) / "t.txt"
        >>> _ = data.write_text("3 eggs\\n")
        >>> args = argparse.Namespace(data=str(data), model=None, from_config="qwen2-tiny",
        ...     vocab_size=1024, template=None, target=None, max_length=None, batch_size=8,
        ...     train_backbone=None)
        >>> record = run_record(args)
        >>> record["model_config"], record["train_backbone"], len(record["data"])
        ('qwen2-tiny', True, 16)
    """
    if args.from_config is not None:
        preset = Path(args.from_config)
        model: str | None = _digest(preset) if preset.is_file() else str(args.from_config)
    else:
        config = Path(args.model) / "config.json"
        model = _digest(config) if config.is_file() else None
    record: dict[str, Any] = {
        "data": _digest(Path(args.data)),
        "model_config": model,
        "template": args.template,
        "target": args.target,
        "max_length": args.max_length,
        "batch_size": args.batch_size,
        "train_backbone": _backbone_trained(args),
    }
    # the loss itself: another weight of the target (or none given) trains another model
    record["target_weight"] = getattr(args, "target_weight", None)
    # The schedule and the order of the batches: a resumed optimizer would keep the old
    # learning rate silently, and another seed would draw other batches than the run skips.
    for key in ("learning_rate", "lr_scheduler", "warmup_ratio", "warmup_steps", "seed"):
        if hasattr(args, key):
            record[key] = getattr(args, key)
    if args.from_config is not None:
        record["vocab_size"] = args.vocab_size
    return record


def check_checkpoints(args: argparse.Namespace) -> str | None:
    """The checkpoint ``train`` resumes from, or None; refuse what cannot go on (see above).

    Args:
        args: the parsed arguments of ``train``.

    Returns:
        The checkpoint folder to resume from (``--resume-from-checkpoint``), or None.

    Raises:
        ValueError: the refusal (one line: what, and what to do).

    Example:
        >>> import tempfile
        >>> out = Path(tempfile.mkdtemp())
        >>> (out / "checkpoint-4").mkdir()
        >>> _ = (out / "checkpoint-4" / "trainer_state.json").write_text('{"global_step": 4}')
        >>> check_checkpoints(argparse.Namespace(output_dir=str(out), resume_from_checkpoint=None))
        ... # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: --output-dir '...' holds the checkpoints of an earlier training (checkpoint-4): ...
    """
    out = Path(args.output_dir)
    resume = args.resume_from_checkpoint
    if resume is None or resume is False:
        found = list_checkpoints(out)
        if found:
            raise ValueError(
                f"--output-dir {args.output_dir!r} holds the checkpoints of an earlier training "
                f"({found[-1].name}): continue it with --resume-from-checkpoint, or delete them "
                "to start anew"
            )
        return None
    try:
        checkpoint = resolve_resume_checkpoint(resume, out)
    except ValueError as exc:
        message = str(exc).replace("resume_from_checkpoint", "--resume-from-checkpoint")
        raise ValueError(message) from None
    assert checkpoint is not None
    check_checkpoint(
        checkpoint,
        fresh_optimizer_state=bool(getattr(args, "fresh_optimizer_state", False)),
        accept="--fresh-optimizer-state",
    )
    saved = read_run_record(checkpoint)
    if saved is not None:
        differ = run_differences(saved, run_record(args), _NAMES)
        if differ:
            raise CheckpointError(
                f"checkpoint {checkpoint!r} belongs to another training: {'; '.join(differ)}; "
                "resume with the command that started it, or start a new training in another "
                "--output-dir"
            )
    step = _config(Path(checkpoint) / TRAINER_STATE_FILE).get("global_step")
    max_steps = getattr(args, "max_steps", -1)
    if isinstance(step, int) and max_steps is not None and 0 < max_steps <= step:
        raise ValueError(
            f"checkpoint {checkpoint!r} is at step {step} and --max-steps is {max_steps}: "
            "nothing is left to train; raise --max-steps to train further"
        )
    return checkpoint


def resumed_from(checkpoint: str | os.PathLike[str]) -> str:
    """How the output names a resume: ``checkpoint-40 in OUT (step 40)``, the step read from
    the checkpoint's ``trainer_state.json`` (checked by :func:`check_checkpoints`).

    Args:
        checkpoint: the checkpoint folder.

    Returns:
        The phrase.

    Example:
        >>> import tempfile
        >>> ckpt = Path(tempfile.mkdtemp()) / "checkpoint-40"
        >>> ckpt.mkdir()
        >>> _ = (ckpt / "trainer_state.json").write_text('{"global_step": 40}')
        >>> resumed_from(ckpt)  # doctest: +ELLIPSIS
        'checkpoint-40 in ... (step 40)'
    """
    folder = Path(checkpoint)
    state = _config(folder / TRAINER_STATE_FILE)
    return f"{folder.name} in {folder.parent} (step {state.get('global_step', '?')})"
