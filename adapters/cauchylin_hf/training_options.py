"""This library's training options, declared once (standard library only).

:class:`CauchyOptions` holds what training does beside the ``Trainer``'s own work: the texts held
out to calibrate on, the readouts solved after training, the sample they are solved on, the
threads, the files written into each checkpoint. Each field carries its default and its help
text (``dataclasses.field(metadata={"help": ...})``, the convention of ``TrainingArguments``
and ``HfArgumentParser``);
:class:`~cauchylin_hf.training_args.CauchyTrainingArguments` inherits the fields, and the
console script generates its ``train`` options from them before torch is imported
(:func:`command_line_flags`; a field's :class:`Flag` says how the command line gives it), and
reads them back with :func:`flag_values`. The ``Trainer``'s own options that the command line
sets are declared here too, with this library's defaults (``learning_rate=1e-3``, ...).

Example:
    >>> options = CauchyOptions(calibration=0.1)
    >>> options.calibration, options.readouts, options.calibration_split
    (0.1, True, 'random')
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["READOUT_ROWS", "CauchyOptions", "Flag", "command_line_flags", "flag_values"]

READOUT_ROWS = 50_000
"""The most training rows the readouts are solved on by default (a random sample of a larger
dataset)."""


@dataclass(frozen=True)
class Flag:
    """How ``cauchylin-lm train`` gives an option.

    Attributes:
        name: the option, e.g. ``"--max-steps"`` (its ``argparse`` destination: the name
            without dashes, ``-`` as ``_``).
        type: the name of the console script's parser of the value (``"steps"``,
            ``"positive"``, ``"positive_int"``, ``"count"``, ``"share"``, ``"calibration"``,
            ``"step_choice"``), or
            None for a string.
        negate: a switch that sets the option to False (``--no-readouts``).
        settings: the other ``argparse`` settings (``default`` where the command line's
            differs from the option's, ``help``, ``metavar``, ``choices``, ``group``).
    """

    name: str
    type: str | None = None
    negate: bool = False
    settings: tuple[tuple[str, Any], ...] = ()

    @property
    def dest(self) -> str:
        """The ``argparse`` destination of the flag."""
        return self.name.lstrip("-").replace("-", "_")


def _meta(help: str, flag: Flag | None = None) -> dict[str, Any]:
    """A field's metadata: its help text and (optionally) its command-line flag."""
    metadata: dict[str, Any] = {"help": help}
    if flag is not None:
        metadata["flag"] = flag
    return metadata


SCHEDULERS = (
    "linear",
    "cosine",
    "cosine_with_restarts",
    "polynomial",
    "constant",
    "constant_with_warmup",
    "inverse_sqrt",
)
"""The learning-rate schedules the command line offers (transformers' ``lr_scheduler_type``)."""


@dataclass
class CauchyOptions:
    """The options of a training: this library's, and the ``Trainer``'s own that the command
    line sets (with this library's defaults).

    Attributes:
        max_steps: optimizer steps; -1 trains ``num_train_epochs`` epochs.
        num_train_epochs: epochs when ``max_steps`` is -1.
        learning_rate: peak learning rate (AdamW); the heads train from an exact
            initialisation (lower it for LoRA or a full fine-tune).
        warmup_ratio: linear warm-up over this share of the steps.
        warmup_steps: linear warm-up steps.
        lr_scheduler_type: the learning-rate schedule.
        logging_steps: log the loss and its parts every this many steps.
        save_steps: write a checkpoint every this many optimizer steps; None writes none.
        save_total_limit: keep at most this many checkpoints (the oldest go); None keeps all.
        seed: seed of the data order, dropout and the draw of the held-out texts.
        max_length: cut texts to this many tokens (None: keep them whole).
        readouts: after training, solve a readout per context
            (:func:`~cauchylin_hf.readouts.solve_readouts`); False keeps the shared head alone.
        readout_rows: the most training rows the readouts are solved on (a random sample of a
            larger dataset; the first rows of a stream).
        calibration: ``"auto"``, a share in ``[0, 1)`` of the training texts held out (never
            trained on) to calibrate the intervals on, or None (no calibration).
        calibration_split: which texts a share holds out: ``"random"`` (drawn with ``seed``)
            or ``"last"`` (the last ones, for texts in time order).
        step_choice: ``"auto"``, a share in ``[0, 1)`` of the training texts (after the
            calibration hold-out) held out of a first run to choose, by the error of their last
            numbers, the step at which a second run on every training text stops (the same
            schedule; at most twice the steps), or None / 0 (the default: one run, every step):
            :mod:`cauchylin_hf.step_choice`.
        threads: torch CPU threads while training; None: no more than the free cores.
        fresh_optimizer_state: resume from a checkpoint without ``optimizer.pt``,
            ``scheduler.pt`` or ``rng_state.pth``, starting them afresh (default: refused).
        checkpoint_files: ``{file name: text}`` written into every checkpoint beside the model
            and the tokenizer; plain file names only.
    """

    max_steps: int = field(
        default=-1, metadata=_meta("optimizer steps (-1: epochs)", Flag("--max-steps", "steps"))
    )
    num_train_epochs: float = field(
        default=1.0, metadata=_meta("epochs when --max-steps is -1", Flag("--epochs", "positive"))
    )
    learning_rate: float = field(
        default=1e-3,
        metadata=_meta(
            "peak learning rate (AdamW)",
            Flag("--learning-rate", "positive", settings=(("help", None),)),
        ),
    )
    warmup_ratio: float | None = field(
        default=None,
        metadata=_meta(
            "linear warm-up over this share of the steps (converted to --warmup-steps)",
            Flag("--warmup-ratio", "share", settings=(("group", "warmup"),)),
        ),
    )
    warmup_steps: float = field(
        default=0,
        metadata=_meta(
            "linear warm-up steps (default 0)",
            Flag("--warmup-steps", "count", settings=(("group", "warmup"), ("default", None))),
        ),
    )
    lr_scheduler_type: str = field(
        default="linear",
        metadata=_meta(
            "learning-rate schedule (default linear)",
            Flag("--lr-scheduler", settings=(("choices", SCHEDULERS), ("default", None))),
        ),
    )
    logging_steps: float = field(
        default=10,
        metadata=_meta(
            "log every this many steps",
            Flag("--logging-steps", "positive_int", settings=(("help", None),)),
        ),
    )
    save_steps: float | None = field(
        default=None,
        metadata=_meta(
            "write a checkpoint (a loadable model folder, checkpoint-STEP in --output-dir) every "
            "this many steps (default: none)",
            Flag("--save-steps", "positive_int"),
        ),
    )
    save_total_limit: int | None = field(
        default=None,
        metadata=_meta(
            "keep only this many checkpoints while training, the newest (default 2)",
            Flag("--save-total-limit", "positive_int", settings=(("default", 2),)),
        ),
    )
    fresh_optimizer_state: bool = field(
        default=False,
        metadata=_meta(
            "resume from a checkpoint that lacks optimizer.pt, scheduler.pt or rng_state.pth, "
            "starting them afresh (default: refused)",
            Flag("--fresh-optimizer-state"),
        ),
    )
    calibration: float | str | None = field(
        default="auto",
        metadata=_meta(
            "hold out this share of the training rows (never trained on) to calibrate the "
            "intervals on; auto: 0.2 (at most 2000 rows) with 100 rows or more, else none and "
            "cross-conformal widths from the training rows; 0: no calibration",
            Flag("--calibration", "calibration", settings=(("metavar", "auto|SHARE"),)),
        ),
    )
    calibration_split: str = field(
        default="random",
        metadata=_meta(
            "which rows --calibration holds out: random (default) or the last ones (rows in "
            "time order: new rows come after the training rows, not among them)",
            Flag("--calibration-split", settings=(("choices", ("random", "last")),)),
        ),
    )
    step_choice: float | str | None = field(
        default=None,
        metadata=_meta(
            "hold this share of the training rows out of a first run, choose the step, of ten "
            "evenly spaced, within a standard error of the best at reading their last numbers "
            "with solved readouts, and train again on every row up to it (at most twice the "
            "steps); auto: 0.15 where that is 8 rows or more (default: one run, every step)",
            Flag("--step-choice", "step_choice", settings=(("metavar", "auto|SHARE"),)),
        ),
    )
    readouts: bool = field(
        default=True,
        metadata=_meta(
            "keep the one regression head trained for every number (default: after training, "
            "solve a readout per context, e.g. per table column, where it reads the numbers better)",
            Flag("--no-readouts", negate=True),
        ),
    )
    readout_rows: int = field(
        default=READOUT_ROWS,
        metadata=_meta("the most training rows the readouts are solved on (a random sample)"),
    )
    seed: int = field(
        default=0, metadata=_meta("seed of the data order, dropout and the hold-out's draw")
    )
    max_length: int | None = field(default=None, metadata=_meta("cut examples to this many tokens"))
    threads: int | None = field(
        default=None,
        metadata=_meta("torch CPU threads while training (default: no more than the free cores)"),
    )
    checkpoint_files: dict[str, Any] | None = field(
        default=None,
        metadata=_meta("{file name: text} written into every checkpoint beside the model"),
    )


def command_line_flags() -> list[tuple[str, str | None, dict[str, Any]]]:
    """The ``train`` options of the command line, one per option with a :class:`Flag`.

    Returns:
        ``(name, parser name or None, argparse settings)`` in the order of the fields; the
        settings hold the default (the option's, or the flag's own), the help text and the
        action of a switch.

    Example:
        >>> [name for name, _, _ in command_line_flags()][:3]
        ['--max-steps', '--epochs', '--learning-rate']
        >>> {name: settings.get("action") for name, _, settings in command_line_flags()
        ...  if name.startswith("--no-")}
        {'--no-readouts': 'store_true'}
    """
    out = []
    for f in fields(CauchyOptions):
        flag = f.metadata.get("flag")
        if flag is None:
            continue
        settings: dict[str, Any] = {"help": f.metadata["help"]}
        if flag.negate or f.default is False:
            settings["action"] = "store_true"
        else:
            settings["default"] = f.default
        settings.update(flag.settings)
        if settings.get("help") is None:
            del settings["help"]
        out.append((flag.name, flag.type, settings))
    return out


def flag_values(namespace: Any) -> dict[str, Any]:
    """The options the parsed command line gives: ``{field: value}`` for every option with a
    :class:`Flag`, a switch's ``negate`` applied; a flag left unset (None) where the option's
    default is not None gives nothing (the option keeps its default).

    Args:
        namespace: the parsed arguments of ``train``.

    Returns:
        The options by field name.

    Example:
        >>> import argparse
        >>> ns = argparse.Namespace(max_steps=5, epochs=1.0, learning_rate=0.01,
        ...     warmup_ratio=None, warmup_steps=None, lr_scheduler=None, logging_steps=10,
        ...     save_steps=None, save_total_limit=2, no_readouts=True, calibration="auto",
        ...     calibration_split="random", fresh_optimizer_state=False)
        >>> values = flag_values(ns)
        >>> values["max_steps"], values["readouts"], "lr_scheduler_type" in values
        (5, False, False)
    """
    out: dict[str, Any] = {}
    for f in fields(CauchyOptions):
        flag = f.metadata.get("flag")
        if flag is None:
            continue
        value = getattr(namespace, flag.dest)
        if flag.negate:
            value = not value
        if value is None and f.default is not None:
            continue
        out[f.name] = value
    return out
