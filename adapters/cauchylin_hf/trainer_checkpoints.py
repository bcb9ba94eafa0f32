"""The checkpoints of a training run: where they are, which one to resume from, what they hold.

:func:`~cauchylin_hf.training.train` checkpoints with the ``Trainer``'s own machinery
(``save_steps``, ``save_total_limit``, ``resume_from_checkpoint``): every ``save_steps`` optimizer
steps it writes a folder ``checkpoint-<step>`` into the run's checkpoint folder, holding the model
(``save_pretrained``), the optimizer, the scheduler, the RNG states and ``trainer_state.json``
(the step, the log history, the data position). Resuming from one restores all of it, so the
resumed run takes the same steps on the same batches as one that was never interrupted.

This module holds the names of those folders and the choice of the checkpoint to resume from
(standard library only); :class:`~cauchylin_hf.training.CheckpointFilesCallback` writes the
numeric tokenizer and any other files (the CLI's ``data_format.json``) into each checkpoint, so
that ``CauchyLMForCausalLM.from_pretrained`` and ``cauchylin-lm predict`` load it (:func:`last_checkpoint`,
:func:`resolve_resume_checkpoint`). The Trainer writes ``trainer_state.json`` after the model,
the optimizer and the RNG states: a folder without it was cut off while being written (Ctrl-C, a
killed process) and is never resumed from.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> run = Path(tempfile.mkdtemp())
    >>> for step in (5, 10, 15):
    ...     (run / f"checkpoint-{step}").mkdir()
    ...     if step < 15:  # checkpoint-15 was cut off before its trainer_state.json
    ...         _ = (run / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    >>> last_checkpoint(run).name, checkpoint_step(last_checkpoint(run))
    ('checkpoint-10', 10)
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import struct
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "CHECKPOINT_PREFIX",
    "DIGESTS_FILE",
    "OPTIMIZER_FILES",
    "RUN_FILE",
    "TRAINER_STATE_FILE",
    "CheckpointError",
    "check_checkpoint",
    "checkpoint_step",
    "is_checkpoint_entry",
    "is_checkpoint_folder_name",
    "last_checkpoint",
    "list_checkpoints",
    "read_run_record",
    "record_digests",
    "remove_checkpoints",
    "resolve_resume_checkpoint",
    "rotate_checkpoints",
    "run_differences",
]

TRAINER_STATE_FILE = "trainer_state.json"
"""The file the Trainer writes last into a checkpoint (transformers' ``TRAINER_STATE_NAME``)."""

CHECKPOINT_PREFIX = "checkpoint"
"""The Trainer's name for its checkpoint folders, ``checkpoint-<step>`` (transformers'
``PREFIX_CHECKPOINT_DIR``, written out: this module uses the standard library only, so the
command line checks an output folder before transformers is imported)."""

OPTIMIZER_FILES = ("optimizer.pt", "scheduler.pt")
"""The optimizer's and the learning-rate scheduler's state in a checkpoint (transformers'
``OPTIMIZER_NAME`` and ``SCHEDULER_NAME``): a resume without them starts both afresh."""

RUN_FILE = "training_run.json"
"""What a checkpoint's training was run on (the number of training rows, the trainable
parameters; the command line adds its data file and model), compared on resume."""

DIGESTS_FILE = "weights_sha256.json"
"""The SHA-256 of each ``.safetensors`` file of a checkpoint, written once the checkpoint is
complete (safetensors keeps no checksum of its own; torch.save's archives do)."""

# ASCII digits only: str patterns' \d also takes other scripts' digits ("checkpoint-١٢")
_NAME = re.compile(rf"{re.escape(CHECKPOINT_PREFIX)}-([0-9]+)")


def is_checkpoint_folder_name(name: str) -> bool:
    """Whether a folder name is one the Trainer gives its checkpoints: ``checkpoint-<step>``.

    Args:
        name: a folder name (no parent).

    Returns:
        True for ``checkpoint-1900`` and the like.

    Example:
        >>> is_checkpoint_folder_name("checkpoint-1900"), is_checkpoint_folder_name("plots")
        (True, False)
    """
    return _NAME.fullmatch(name) is not None


def is_checkpoint_entry(name: str) -> bool:
    """Whether an entry of a run's checkpoint folder belongs to its checkpoints.

    That is a ``checkpoint-<step>`` folder, or the hidden folder an atomic save of one leaves
    beside it when the process is killed while writing (``.checkpoint-<step>.<random>.tmp``,
    :func:`~cauchylin_hf.atomic_save.staged_folder`'s names).

    Args:
        name: an entry's name (no parent).

    Returns:
        True for those names.

    Example:
        >>> [is_checkpoint_entry(n) for n in ("checkpoint-8", ".checkpoint-8.1f2e3d4c.tmp", "x")]
        [True, True, False]
    """
    if name.startswith("."):
        name = name[1:].split(".", 1)[0]
    return is_checkpoint_folder_name(name)


def checkpoint_step(path: str | os.PathLike[str]) -> int:
    """The optimizer step of a checkpoint folder, read from its name.

    Args:
        path: a ``checkpoint-<step>`` folder.

    Returns:
        The step.

    Raises:
        ValueError: the name is not ``checkpoint-<step>``.

    Example:
        >>> checkpoint_step("out/checkpoint-1900")
        1900
    """
    match = _NAME.fullmatch(Path(path).name)
    if match is None:
        raise ValueError(f"{os.fspath(path)!r} is not a checkpoint folder (checkpoint-<step>)")
    return int(match.group(1))


def list_checkpoints(folder: str | os.PathLike[str]) -> list[Path]:
    """The complete checkpoints in a run's checkpoint folder, oldest step first.

    A checkpoint is complete when it holds ``trainer_state.json``, which the Trainer writes after
    the model, the optimizer, the scheduler and the RNG states.

    Args:
        folder: the folder the Trainer writes its ``checkpoint-<step>`` folders into (a missing
            folder has none).

    Returns:
        The ``checkpoint-<step>`` folders, sorted by step.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> run = Path(tempfile.mkdtemp())
        >>> for step in (20, 100):
        ...     (run / f"checkpoint-{step}").mkdir()
        ...     _ = (run / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
        >>> [p.name for p in list_checkpoints(run)]
        ['checkpoint-20', 'checkpoint-100']
    """
    root = Path(folder)
    if not root.is_dir():
        return []
    found = [
        entry
        for entry in root.iterdir()
        if is_checkpoint_folder_name(entry.name) and (entry / TRAINER_STATE_FILE).is_file()
    ]
    return sorted(found, key=checkpoint_step)


def last_checkpoint(folder: str | os.PathLike[str]) -> Path | None:
    """The latest complete checkpoint in a run's checkpoint folder (see :func:`list_checkpoints`).

    Args:
        folder: the run's checkpoint folder.

    Returns:
        The ``checkpoint-<step>`` folder of the highest step, or None when there is none.

    Example:
        >>> import tempfile
        >>> last_checkpoint(tempfile.mkdtemp()) is None
        True
    """
    found = list_checkpoints(folder)
    return found[-1] if found else None


def resolve_resume_checkpoint(
    resume: bool | str | os.PathLike[str] | None, folder: str | os.PathLike[str]
) -> str | None:
    """The checkpoint a run resumes from: the latest in ``folder``, or the one named.

    Args:
        resume: True for the latest complete checkpoint in ``folder``; a path for that
            checkpoint; None or False to start a new run.
        folder: the run's checkpoint folder.

    Returns:
        The checkpoint folder as a string (what ``Trainer.train(resume_from_checkpoint=...)``
        takes), or None.

    Raises:
        ValueError: ``resume`` is True and ``folder`` holds no complete checkpoint, or a named
            checkpoint is not a folder with ``trainer_state.json``.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> run = Path(tempfile.mkdtemp())
        >>> (run / "checkpoint-8").mkdir()
        >>> _ = (run / "checkpoint-8" / "trainer_state.json").write_text("{}")
        >>> Path(resolve_resume_checkpoint(True, run)).name, resolve_resume_checkpoint(None, run)
        ('checkpoint-8', None)
    """
    if resume is None or resume is False:
        return None
    if resume is True:
        found = last_checkpoint(folder)
        if found is None:
            raise ValueError(
                f"resume_from_checkpoint: no complete checkpoint (checkpoint-<step> with "
                f"{TRAINER_STATE_FILE}) in {os.fspath(folder)!r} to resume from"
            )
        return str(found)
    if not isinstance(resume, (str, os.PathLike)):
        raise ValueError(
            f"resume_from_checkpoint must be True, a checkpoint folder or None, got {resume!r}"
        )
    if not os.fspath(resume):
        raise ValueError("resume_from_checkpoint: an empty name; name a checkpoint folder")
    path = Path(resume)
    if not (path / TRAINER_STATE_FILE).is_file():
        what = "does not exist" if not path.exists() else f"holds no {TRAINER_STATE_FILE}"
        raise ValueError(
            f"resume_from_checkpoint: {os.fspath(resume)!r} {what}; it must be a checkpoint "
            "folder written by a training with save_steps"
        )
    return str(path)


# --------------------------------------------------------------------------------------------
# What a checkpoint holds, checked before a resume


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed from: the message names its folder, the file and
    what to do.

    Example:
        >>> isinstance(CheckpointError("checkpoint-8: optimizer.pt is missing"), ValueError)
        True
    """


_STATE_NUMBERS = (
    "epoch",
    "max_steps",
    "num_train_epochs",
    "logging_steps",
    "eval_steps",
    "save_steps",
    "train_batch_size",
    "total_flos",
    "best_metric",
)
_WEIGHTS_SUFFIXES = (".safetensors", ".bin")


def _state_problem(state: Any, step: int | None) -> str | None:
    """What is wrong with a parsed ``trainer_state.json`` (None: nothing seen)."""
    if not isinstance(state, dict):
        return "does not hold a JSON object"
    global_step = state.get("global_step")
    if isinstance(global_step, bool) or not isinstance(global_step, int) or global_step < 0:
        return f"'global_step' must be an integer >= 0, not {str(global_step)[:40]!r}"
    if step is not None and global_step != step:
        return f"says step {global_step}, but the folder's name says step {step}"
    history = state.get("log_history", [])
    if not isinstance(history, list) or not all(isinstance(row, dict) for row in history):
        return "'log_history' must be a list of JSON objects"
    for key in _STATE_NUMBERS:
        value = state.get(key)
        if value is None:
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            return f"{key!r} must be a finite number, not {str(value)[:40]!r}"
    for key in ("stateful_callbacks", "trial_params"):
        if not isinstance(state.get(key) or {}, dict):
            return f"{key!r} must be a JSON object"
    return None


def _json_problem(path: Path) -> tuple[Any, str | None]:
    """``(the parsed JSON file, None)`` or ``(None, what is wrong)``."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None, "is not UTF-8 text"
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror or exc})"
    if not text.strip():
        return None, "is empty"
    try:
        return json.loads(text), None
    except (ValueError, RecursionError) as exc:
        return None, f"is not valid JSON ({str(exc).splitlines()[0][:120] if str(exc) else 'cut'})"


def _safetensors_problem(path: Path) -> str | None:
    """What is wrong with a ``.safetensors`` file's header and length (None: it is whole)."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return "is empty" if size == 0 else "is cut off (shorter than its header)"
            (length,) = struct.unpack("<Q", head)
            if length > size - 8 or length > 100_000_000:
                return "is cut off or not a safetensors file (its header runs past the end)"
            header = json.loads(f.read(length).decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return "is not a safetensors file (its header is not JSON)"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if not isinstance(header, dict):
        return "is not a safetensors file (its header is not a JSON object)"
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2):
            return f"is not a safetensors file (tensor {name[:60]!r} has no data offsets)"
        if not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets):
            return f"is not a safetensors file (tensor {name[:60]!r} has bad data offsets)"
        end = max(end, offsets[1])
    if 8 + length + end != size:
        what = "cut off" if 8 + length + end > size else "longer than its tensors"
        return f"is {what}: {size} bytes where its header describes {8 + length + end}"
    return None


def _zip_problem(path: Path) -> str | None:
    """What is wrong with a file ``torch.save`` wrote (a zip archive; None: it is whole)."""
    try:
        if path.stat().st_size == 0:
            return "is empty"
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, EOFError, ValueError, NotImplementedError):
        return "is cut off or not a file torch.save wrote"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    except Exception as exc:  # zlib and struct errors of a damaged archive
        return f"is damaged ({type(exc).__name__})"
    if bad is not None:
        return f"is damaged (its entry {bad!r} fails its checksum)"
    return None


def check_checkpoint(
    checkpoint: str | os.PathLike[str],
    *,
    fresh_optimizer_state: bool = False,
    accept: str = "fresh_optimizer_state=True",
) -> None:
    """Refuse a checkpoint that a resume would read wrong, before any model work.

    It reads the files the Trainer resumes from, with the standard library: ``trainer_state.json``
    (a JSON object whose step is the folder's, with numbers where numbers go),
    ``config.json`` and the other JSON files (the tokenizer's), the weights (every ``.safetensors`` file whole: its header and its length),
    and ``optimizer.pt``, ``scheduler.pt`` and the RNG states (whole archives, every entry's
    checksum). A missing optimizer, scheduler or RNG state is refused unless
    ``fresh_optimizer_state`` (the resume then starts them afresh, and the run no longer
    takes the steps of an uninterrupted one).

    Args:
        checkpoint: a ``checkpoint-<step>`` folder (or any folder a resume is pointed at).
        fresh_optimizer_state: accept a checkpoint without ``optimizer.pt`` / ``scheduler.pt``.
        accept: how the caller spells ``fresh_optimizer_state`` (named in the message).

    Raises:
        CheckpointError: the first problem, naming the checkpoint and the file, and what to do.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> ckpt = Path(tempfile.mkdtemp()) / "checkpoint-8"
        >>> ckpt.mkdir()
        >>> _ = (ckpt / "trainer_state.json").write_text('{"global_step": 8}')
        >>> check_checkpoint(ckpt)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        cauchylin_hf.trainer_checkpoints.CheckpointError: checkpoint '.../checkpoint-8': config.json is missing; ...
    """
    folder = Path(checkpoint)
    where = f"checkpoint {os.fspath(checkpoint)!r}"
    other = (
        "resume from an earlier checkpoint (name its folder), or delete this one to resume "
        "from the one before"
    )
    match = _NAME.fullmatch(folder.name)
    state, problem = _json_problem(folder / TRAINER_STATE_FILE)
    if problem is None:
        problem = _state_problem(state, int(match.group(1)) if match else None)
    if problem is not None:
        raise CheckpointError(f"{where}: {TRAINER_STATE_FILE} {problem}; {other}")
    config = folder / "config.json"
    if not config.is_file():
        raise CheckpointError(f"{where}: config.json is missing; {other}")
    parsed, problem = _json_problem(config)
    if problem is None and not isinstance(parsed, dict):
        problem = "does not hold a JSON object"
    if problem is not None:
        raise CheckpointError(f"{where}: config.json {problem}; {other}")
    for path in sorted(folder.glob("*.json")):  # the tokenizer's, generation_config.json, ...
        if path.name in (TRAINER_STATE_FILE, "config.json", RUN_FILE):
            continue
        parsed, problem = _json_problem(path)
        if problem is None and not isinstance(parsed, dict):
            problem = "does not hold a JSON object"
        if problem is not None:
            raise CheckpointError(f"{where}: {path.name} {problem}; {other}")
    weights = sorted(p for p in folder.iterdir() if p.name.endswith(_WEIGHTS_SUFFIXES))
    if not weights:
        raise CheckpointError(f"{where}: holds no model weights (model.safetensors); {other}")
    digests, _ = (
        _json_problem(folder / DIGESTS_FILE) if (folder / DIGESTS_FILE).is_file() else ({}, None)
    )
    for path in weights:
        problem = _safetensors_problem(path) if path.suffix == ".safetensors" else None
        if problem is None and isinstance(digests, dict) and path.name in digests:
            if _sha256(path) != digests[path.name]:
                problem = f"is damaged (its SHA-256 is not the one recorded in {DIGESTS_FILE})"
        if problem is None and path.name.endswith(".bin") and path.name != "training_args.bin":
            problem = _zip_problem(path)
        if problem is not None:
            raise CheckpointError(f"{where}: {path.name} {problem}; {other}")
    for name in OPTIMIZER_FILES:
        path = folder / name
        if not path.exists():
            if fresh_optimizer_state:
                continue
            raise CheckpointError(
                f"{where} holds no {name}: the resume would start the optimizer and the "
                f"learning-rate schedule afresh (not the steps of an uninterrupted run); pass "
                f"{accept} to accept that, or {other}"
            )
        problem = _zip_problem(path)
        if problem is not None:
            raise CheckpointError(
                f"{where}: {name} {problem}; {other} (or delete {name} and pass {accept} to "
                "start the optimizer afresh)"
            )
    rng_states = sorted(folder.glob("rng_state*.pth"))
    if not rng_states and not fresh_optimizer_state:
        raise CheckpointError(
            f"{where} holds no rng_state.pth: the resume would draw its random numbers (data "
            f"order, dropout) afresh (not the steps of an uninterrupted run); pass {accept} to "
            f"accept that, or {other}"
        )
    for path in rng_states:
        problem = _zip_problem(path)
        if problem is not None:
            raise CheckpointError(f"{where}: {path.name} {problem}; {other}")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def record_digests(
    checkpoint: str | os.PathLike[str], into: str | os.PathLike[str] | None = None
) -> None:
    """Write :data:`DIGESTS_FILE`: the SHA-256 of each ``.safetensors`` file of a checkpoint,
    which :func:`check_checkpoint` compares before a resume.

    Args:
        checkpoint: a complete checkpoint folder.
        into: the folder the file is written to (default: ``checkpoint``; a staging folder
            whose files are then moved in whole).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> ckpt = Path(tempfile.mkdtemp())
        >>> _ = (ckpt / "model.safetensors").write_bytes(b"x")
        >>> record_digests(ckpt)
        >>> json.loads((ckpt / DIGESTS_FILE).read_text())["model.safetensors"][:8]
        '2d711642'
    """
    folder = Path(checkpoint)
    digests = {p.name: _sha256(p) for p in sorted(folder.glob("*.safetensors"))}
    target = Path(into) if into is not None else folder
    (target / DIGESTS_FILE).write_text(json.dumps(digests, indent=2) + "\n", encoding="utf-8")


def read_run_record(checkpoint: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The :data:`RUN_FILE` of a checkpoint (None for a checkpoint without one).

    Args:
        checkpoint: a checkpoint folder.

    Returns:
        Its record.

    Raises:
        CheckpointError: the file is there but is not a JSON object.

    Example:
        >>> import tempfile
        >>> read_run_record(tempfile.mkdtemp()) is None
        True
    """
    path = Path(checkpoint) / RUN_FILE
    if not path.exists():
        return None
    record, problem = _json_problem(path)
    if problem is None and not isinstance(record, dict):
        problem = "does not hold a JSON object"
    if problem is not None:
        raise CheckpointError(
            f"checkpoint {os.fspath(checkpoint)!r}: {RUN_FILE} {problem}; delete the file to "
            "resume without comparing the runs"
        )
    return record


def run_differences(
    saved: Mapping[str, Any], current: Mapping[str, Any], names: Mapping[str, str] | None = None
) -> list[str]:
    """What differs between a checkpoint's run and the resume, one phrase per key.

    Only the keys both records hold are compared (a record written by an earlier release has
    fewer).

    Args:
        saved: the checkpoint's record (:func:`read_run_record`).
        current: the same keys for the resume.
        names: how to call each key in the phrases (default: the key).

    Returns:
        ``"<name>: <saved> then, <current> now"`` for each key whose values differ.

    Example:
        >>> run_differences({"train_rows": 120, "x": 1}, {"train_rows": 96, "x": 1})
        ['train_rows: 120 then, 96 now']
    """
    names = names or {}
    out = []
    for key, value in current.items():
        if key in saved and saved[key] != value:
            shown = [json.dumps(v, ensure_ascii=False) for v in (saved[key], value)]
            out.append(f"{names.get(key, key)}: {shown[0]} then, {shown[1]} now")
    return out


# --------------------------------------------------------------------------------------------
# Which checkpoints stay


def _remove(path: Path) -> None:
    """Remove a checkpoint folder; a link to one elsewhere is unlinked, its target kept."""
    if path.is_symlink():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def _entries_to_remove(root: Path, keep: Iterable[Path]) -> list[Path]:
    kept = {p.name for p in keep}
    newest = max((checkpoint_step(p) for p in keep), default=None)
    out = []
    for entry in root.iterdir() if root.is_dir() else ():
        if not is_checkpoint_entry(entry.name) or entry.name in kept or not entry.is_dir():
            continue
        if entry.name.startswith("."):  # an atomic save's hidden folder
            step_name = entry.name[1:].split(".", 1)[0]
        else:
            step_name = entry.name
        if newest is None or checkpoint_step(step_name) < newest:
            out.append(entry)
    return out


def rotate_checkpoints(
    folder: str | os.PathLike[str], limit: int, protect: str | os.PathLike[str] | None = None
) -> list[Path]:
    """Keep the ``limit`` newest complete checkpoints of a run (by step); remove the older ones
    and the cut-off folders older than the newest kept.

    Args:
        folder: the run's checkpoint folder.
        limit: how many complete checkpoints stay (at least 1).
        protect: a checkpoint that stays whatever its step (the best one, when tracked).

    Returns:
        The folders removed.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> run = Path(tempfile.mkdtemp())
        >>> for step in (2, 4, 6):
        ...     (run / f"checkpoint-{step}").mkdir()
        ...     _ = (run / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
        >>> [p.name for p in rotate_checkpoints(run, 2)], [p.name for p in list_checkpoints(run)]
        (['checkpoint-2'], ['checkpoint-4', 'checkpoint-6'])
    """
    complete = list_checkpoints(folder)
    keep = complete[-max(1, limit) :]
    if protect is not None:
        keep += [p for p in complete if p.name == Path(protect).name and p not in keep]
    removed = _entries_to_remove(Path(folder), keep)
    for path in removed:
        _remove(path)
    return removed


def remove_checkpoints(folder: str | os.PathLike[str]) -> list[Path]:
    """Remove every checkpoint of a run (complete or cut off), once its model is saved.

    Args:
        folder: the run's checkpoint folder.

    Returns:
        The folders removed.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> run = Path(tempfile.mkdtemp())
        >>> (run / "checkpoint-4").mkdir()
        >>> (run / "notes").mkdir()
        >>> [p.name for p in remove_checkpoints(run)], [p.name for p in run.iterdir()]
        (['checkpoint-4'], ['notes'])
    """
    root = Path(folder)
    removed = sorted(
        (e for e in (root.iterdir() if root.is_dir() else ()) if is_checkpoint_entry(e.name)),
        key=lambda e: e.name,
    )
    removed = [e for e in removed if e.is_dir()]
    for path in removed:
        _remove(path)
    return [e for e in removed if not e.exists() and not e.is_symlink()]
