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

import os
import re
from pathlib import Path

__all__ = [
    "CHECKPOINT_PREFIX",
    "checkpoint_step",
    "is_checkpoint_entry",
    "is_checkpoint_folder_name",
    "last_checkpoint",
    "list_checkpoints",
    "resolve_resume_checkpoint",
]

TRAINER_STATE_FILE = "trainer_state.json"
"""The file the Trainer writes last into a checkpoint (transformers' ``TRAINER_STATE_NAME``)."""

CHECKPOINT_PREFIX = "checkpoint"
"""The Trainer's name for its checkpoint folders, ``checkpoint-<step>`` (transformers'
``PREFIX_CHECKPOINT_DIR``, written out: this module uses the standard library only, so the
command line checks an output folder before transformers is imported)."""

_NAME = re.compile(rf"{re.escape(CHECKPOINT_PREFIX)}-(\d+)")


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
    path = Path(resume)
    if not (path / TRAINER_STATE_FILE).is_file():
        what = "does not exist" if not path.exists() else f"holds no {TRAINER_STATE_FILE}"
        raise ValueError(
            f"resume_from_checkpoint: {os.fspath(resume)!r} {what}; it must be a checkpoint "
            "folder written by a training with save_steps"
        )
    return str(path)
