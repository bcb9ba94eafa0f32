"""The arguments of a training: the ``Trainer``'s own and this library's, in one object.

:class:`CauchyTrainingArguments` is a ``transformers.TrainingArguments`` that also holds the
fields of :class:`~cauchylin_hf.training_options.CauchyOptions` (the calibration hold-out, the
readouts, the threads, ...), with the defaults the causal language model needs, as TRL's
``SFTConfig`` holds its data options beside the Trainer's. :func:`make_training_arguments` builds
one from keywords.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import TrainingArguments

from .training_options import CauchyOptions

__all__ = ["CauchyTrainingArguments", "make_training_arguments"]

_OWN = {f.name: f for f in dataclasses.fields(TrainingArguments)}


def _help(name: str) -> Any:
    """The metadata (help text) of a ``TrainingArguments`` field given another default here."""
    return _OWN[name].metadata


@dataclass
class CauchyTrainingArguments(CauchyOptions, TrainingArguments):  # type: ignore[misc]
    """``TrainingArguments`` with this library's options and the defaults its model needs.

    The fields of :class:`~cauchylin_hf.training_options.CauchyOptions` come after the
    ``Trainer``'s own (``output_dir`` stays the first positional argument); those that are the
    ``Trainer``'s own too (``max_steps``, ``num_train_epochs``, ``learning_rate``, the warm-up
    and the schedule, ``logging_steps``, ``save_steps``, ``save_total_limit``) are declared
    there with this library's defaults. Defaults that differ from ``TrainingArguments``' own:
    ``output_dir="cauchylin_output"``, ``num_train_epochs=1.0``, ``seed=0``,
    ``remove_unused_columns=False`` (the ``numeric_values`` and ``target_values`` columns must
    reach ``forward``), ``label_names=["labels"]``, ``report_to="none"``,
    ``save_strategy="no"`` (``"steps"`` when ``save_steps`` is given), ``logging_steps=10``,
    ``per_device_train_batch_size=16``, ``per_device_eval_batch_size=16``,
    ``learning_rate=1e-3`` (the heads train from an exact initialisation; lower it for LoRA or
    a full fine-tune), ``adam_beta2=0.95``, ``use_cpu=True`` when no CUDA device is visible, and
    ``ddp_backend="gloo"`` on CPU under a distributed launcher (``WORLD_SIZE`` > 1).
    ``warmup_ratio`` (a share of the steps) is taken on every transformers release: where the
    running release has no such field it becomes a ``warmup_steps`` below 1, which that release
    reads as the share (a ratio of 1 becomes the largest float below 1, for which
    ``ceil(steps * ratio)`` is still every step).

    Why ``adam_beta2=0.95`` (``TrainingArguments``' own default is 0.999): the token loss and
    the regression loss share the backbone, and AdamW divides every step by a running mean of
    the squared gradients with a memory of about ``1 / (1 - beta2)`` steps. With 0.999 that mean
    still carries the first steps, in which the token loss's gradients are far larger than the
    regression's, and once only the numbers are left to learn the backbone's steps stay at 1-2%
    of the learning rate: the numbers of fixed-template text stay at a constant per context for
    about a thousand steps. With 0.95 the memory is twenty steps and the steps are ten times
    larger (the measurements: the training page, "The optimizer's memory").

    Raises:
        ValueError: for ``remove_unused_columns=True`` (it would drop ``numeric_values`` from
            some datasets), a ``warmup_ratio`` outside ``[0, 1]`` or beside ``warmup_steps``,
            or a value ``TrainingArguments`` rejects.

    Example:
        >>> args = CauchyTrainingArguments("out", max_steps=10, calibration=0.1)
        >>> args.remove_unused_columns, args.label_names, args.learning_rate, args.calibration
        (False, ['labels'], 0.001, 0.1)
        >>> str(args.save_strategy.value), args.readouts
        ('no', True)
    """

    output_dir: str | None = field(default="cauchylin_output", metadata=_help("output_dir"))
    remove_unused_columns: bool = field(default=False, metadata=_help("remove_unused_columns"))
    label_names: list[str] | None = field(
        default_factory=lambda: ["labels"], metadata=_help("label_names")
    )
    report_to: Any = field(default="none", metadata=_help("report_to"))
    save_strategy: Any = field(default=None, metadata=_help("save_strategy"))
    per_device_train_batch_size: int = field(
        default=16, metadata=_help("per_device_train_batch_size")
    )
    per_device_eval_batch_size: int = field(
        default=16, metadata=_help("per_device_eval_batch_size")
    )
    adam_beta2: float = field(default=0.95, metadata=_help("adam_beta2"))
    use_cpu: bool | None = field(default=None, metadata=_help("use_cpu"))  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.remove_unused_columns:
            raise ValueError(
                "remove_unused_columns=True would drop the numeric_values / target_values "
                "columns; leave it False"
            )
        if self.save_strategy is None:  # save_steps alone means: save every that many
            self.save_strategy = "no" if self.save_steps is None else "steps"
        if self.save_steps is None:
            self.save_steps = _OWN["save_steps"].default  # type: ignore[assignment]
        if self.use_cpu is None:
            self.use_cpu = not torch.cuda.is_available()
        if self.use_cpu and self.ddp_backend is None and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            # torchrun / accelerate launch on CPU: gloo (in one process a backend would make
            # accelerate expect a process group).
            self.ddp_backend = "gloo"
        self._warmup_share()
        super().__post_init__()

    def _warmup_share(self) -> None:
        """``warmup_ratio`` as the running release takes it."""
        ratio = self.warmup_ratio
        if "warmup_ratio" in _OWN:
            if ratio is None:
                self.warmup_ratio = _OWN["warmup_ratio"].default  # type: ignore[assignment]
            return
        if ratio is None:
            return
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio <= 1:
            raise ValueError(f"warmup_ratio must be a number in [0, 1], got {ratio!r}")
        if self.warmup_steps:
            raise ValueError("pass warmup_ratio or warmup_steps, not both")
        self.warmup_steps = math.nextafter(1.0, 0.0) if ratio == 1 else float(ratio)


def make_training_arguments(
    output_dir: str | os.PathLike[str] = "cauchylin_output", **overrides: Any
) -> CauchyTrainingArguments:
    """:class:`CauchyTrainingArguments` for ``output_dir`` with ``overrides``.

    Args:
        output_dir: where the Trainer writes checkpoints and logs.
        **overrides: any field of :class:`CauchyTrainingArguments` (the ``Trainer``'s own and
            this library's).

    Returns:
        The arguments.

    Raises:
        ValueError: as :class:`CauchyTrainingArguments`.

    Example:
        >>> args = make_training_arguments("out", max_steps=10, logging_steps=1)
        >>> args.remove_unused_columns, args.label_names
        (False, ['labels'])
    """
    return CauchyTrainingArguments(output_dir=str(output_dir), **overrides)
