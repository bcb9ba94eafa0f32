"""This library's training options, declared once (standard library only).

:class:`CauchyOptions` holds what training does beside the ``Trainer``'s own work: the texts held
out to calibrate on, the readouts solved after training, the sample they are solved on, the
threads, the files written into each checkpoint. Each field carries its default and its help
text (``dataclasses.field(metadata={"help": ...})``, the convention of ``TrainingArguments``
and ``HfArgumentParser``);
:class:`~cauchylin_hf.training_args.CauchyTrainingArguments` inherits the fields, and the
console script generates its ``train`` options from them before torch is imported.

Example:
    >>> options = CauchyOptions(calibration=0.1)
    >>> options.calibration, options.readouts, options.calibration_split
    (0.1, True, 'random')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["READOUT_ROWS", "CauchyOptions"]

READOUT_ROWS = 50_000
"""The most training rows the readouts are solved on by default (a random sample of a larger
dataset)."""


@dataclass
class CauchyOptions:
    """The options of a training that the ``Trainer`` does not have.

    Attributes:
        max_length: cut texts to this many tokens (None: keep them whole).
        readouts: after training, solve a readout per context
            (:func:`~cauchylin_hf.readouts.solve_readouts`); False keeps the shared head alone.
        readout_rows: the most training rows the readouts are solved on (a random sample of a
            larger dataset; the first rows of a stream).
        calibration: ``"auto"``, a share in ``[0, 1)`` of the training texts held out (never
            trained on) to calibrate the intervals on, or None (no calibration).
        calibration_split: which texts a share holds out: ``"random"`` (drawn with ``seed``)
            or ``"last"`` (the last ones, for texts in time order).
        threads: torch CPU threads while training; None: no more than the free cores.
        fresh_optimizer_state: resume from a checkpoint without ``optimizer.pt``,
            ``scheduler.pt`` or ``rng_state.pth``, starting them afresh (default: refused).
        checkpoint_files: ``{file name: text}`` written into every checkpoint beside the model
            and the tokenizer; plain file names only.
    """

    max_length: int | None = field(
        default=None, metadata={"help": "cut examples to this many tokens"}
    )
    readouts: bool = field(
        default=True,
        metadata={
            "help": "after training, solve a readout per context (e.g. per table column) where "
            "it reads the numbers better than the one regression head trained for every number"
        },
    )
    readout_rows: int = field(
        default=READOUT_ROWS,
        metadata={"help": "the most training rows the readouts are solved on (a random sample)"},
    )
    calibration: float | str | None = field(
        default="auto",
        metadata={
            "help": "hold out this share of the training rows (never trained on) to calibrate "
            "the intervals on; auto: 0.2 (at most 2000 rows) with 100 rows or more, else none "
            "and cross-conformal widths from the training rows; 0: no calibration"
        },
    )
    calibration_split: str = field(
        default="random",
        metadata={
            "help": "which rows calibration holds out: random (default) or the last ones (rows "
            "in time order: new rows come after the training rows, not among them)",
            "choices": ("random", "last"),
        },
    )
    threads: int | None = field(
        default=None,
        metadata={"help": "torch CPU threads (default: no more than the free cores)"},
    )
    fresh_optimizer_state: bool = field(
        default=False,
        metadata={
            "help": "resume from a checkpoint that lacks optimizer.pt, scheduler.pt or "
            "rng_state.pth, starting them afresh (default: refused)"
        },
    )
    checkpoint_files: dict[str, Any] | None = field(
        default=None,
        metadata={"help": "{file name: text} written into every checkpoint beside the model"},
    )
