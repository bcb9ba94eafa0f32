"""Train the causal language model with the Hugging Face ``Trainer``.

The plain ``transformers.Trainer`` does the work; this module supplies what it needs:

* :func:`make_training_arguments`: ``TrainingArguments`` with the settings the model needs
  (``remove_unused_columns=False`` so ``numeric_values`` / ``target_values`` reach ``forward``,
  ``label_names=["labels"]``, no reporting integrations, CPU + gloo when there is no GPU).
* :class:`LossPartsCallback`: records both loss parts (``cls_loss``, ``reg_loss``) per logging
  step, averaged over the micro-batches of the step and over data-parallel ranks exactly as the
  Trainer averages ``loss``, and adds them to the Trainer's logs (progress bar, ``log_history``).
* :func:`make_trainer`: a ``Trainer`` with the :class:`~cauchylin_hf.data.NumericDataCollator` and
  the callback.
* :func:`train`: texts in, trained model, loss history and metrics out (the CLI and the demo call
  it), with the Trainer's checkpoints and resuming (``save_steps``, ``resume_from_checkpoint``;
  :mod:`cauchylin_hf.trainer_checkpoints`). Under ``torchrun`` / ``accelerate launch`` it trains
  data-parallel without changes.

The loss the Trainer optimises is the model's ``loss`` (``cls_loss + lambda * reg_loss``), a mean
over counted positions of each micro-batch. Under data parallelism every rank computes that mean on
its own shard and the gradients are averaged over ranks, as for any HF causal LM.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn
from torch.utils.data import Dataset, Subset
from transformers import PrinterCallback, Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_callback import TrainerControl, TrainerState

from cauchylin._validation import finite_number, positive_int
from cauchylin.conformal import calibration_holdout

from .data import NumericDataCollator, NumericDataset
from .evaluation import evaluate_model
from .hf_compat import progress_bars
from .readouts import CalibrationReport, ReadoutReport, calibrate, solve_readouts
from .streaming import LazyNumericDataset, as_numeric_dataset, sample_rows
from .tokenizer import NumericTokenizer
from .trainer_checkpoints import CHECKPOINT_PREFIX, resolve_resume_checkpoint

__all__ = [
    "CheckpointFilesCallback",
    "DataSource",
    "LossPartsCallback",
    "TrainResult",
    "make_trainer",
    "make_training_arguments",
    "train",
]

LOSS_PARTS = ("cls_loss", "reg_loss")
"""The loss parts of the model's output that :class:`LossPartsCallback` records."""
READOUT_ROWS = 50_000
"""The most training rows the readouts are solved on (a random sample of a larger dataset)."""


# --------------------------------------------------------------------------------------------
# Training arguments


def make_training_arguments(
    output_dir: str | os.PathLike[str] = "cauchylin_output", **overrides: Any
) -> TrainingArguments:
    """``TrainingArguments`` with the defaults the causal language model needs.

    Defaults (each can be overridden by keyword): ``remove_unused_columns=False`` (the
    ``numeric_values`` and ``target_values`` columns must reach ``forward``),
    ``label_names=["labels"]``, ``report_to="none"``, ``save_strategy="no"``,
    ``logging_steps=10``, ``per_device_train_batch_size=16``, ``learning_rate=1e-3`` (the heads
    train from an exact initialisation; lower it for LoRA or a full fine-tune),
    ``adam_beta2=0.95``, ``warmup_steps=0``, ``dataloader_num_workers=0``, ``use_cpu=True`` when
    no CUDA device is visible, and ``ddp_backend="gloo"`` on CPU under a distributed launcher
    (``WORLD_SIZE`` > 1).

    Why ``adam_beta2=0.95`` (``TrainingArguments``' own default is 0.999): the token loss and
    the regression loss share the backbone, and AdamW divides every step by a running mean of
    the squared gradients with a memory of about ``1 / (1 - beta2)`` steps. With 0.999 that mean
    still carries the first steps, in which the token loss's gradients are far larger than the
    regression's, and once only the numbers are left to learn the backbone's steps stay at 1-2%
    of the learning rate: the numbers of fixed-template text stay at a constant per context for
    about a thousand steps. With 0.95 the memory is twenty steps and the steps are ten times
    larger (the measurements: the training page, "The optimizer's memory").

    Args:
        output_dir: where the Trainer writes checkpoints and logs.
        **overrides: any ``TrainingArguments`` field.

    Returns:
        The arguments.

    Raises:
        ValueError: when ``remove_unused_columns=True`` is asked for (it would drop
            ``numeric_values`` from some datasets), or when ``TrainingArguments`` rejects a value.

    Example:
        >>> args = make_training_arguments("out", max_steps=10, logging_steps=1)
        >>> args.remove_unused_columns, args.label_names
        (False, ['labels'])
    """
    if overrides.get("remove_unused_columns"):
        raise ValueError(
            "remove_unused_columns=True would drop the numeric_values / target_values columns; "
            "leave it False"
        )
    overrides = _running_release_names(overrides)
    if overrides.get("save_steps") is not None:  # save_steps alone means: save every that many
        overrides.setdefault("save_strategy", "steps")
    use_cpu = overrides.get("use_cpu", not torch.cuda.is_available())
    defaults: dict[str, Any] = {
        "remove_unused_columns": False,
        "label_names": ["labels"],
        "report_to": "none",
        "save_strategy": "no",
        "logging_steps": 10,
        "per_device_train_batch_size": 16,
        "per_device_eval_batch_size": 16,
        "learning_rate": 1e-3,
        "adam_beta2": 0.95,
        "warmup_steps": 0,
        "dataloader_num_workers": 0,
        "use_cpu": use_cpu,
    }
    if use_cpu and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # torchrun / accelerate launch on CPU: gloo (in one process a backend would make
        # accelerate expect a process group).
        defaults["ddp_backend"] = "gloo"
    return TrainingArguments(output_dir=str(output_dir), **{**defaults, **overrides})


_FIELDS = frozenset(f.name for f in dataclasses.fields(TrainingArguments))


def _running_release_names(overrides: dict[str, Any]) -> dict[str, Any]:
    """``overrides`` with the fields that the running transformers release spells otherwise.

    ``warmup_ratio`` (a share of the steps) is a field up to transformers 5.x's removal of it;
    later releases read a ``warmup_steps`` below 1 as that share. ``warmup_steps=1.0`` means one
    step there, so a ratio of 1 becomes the largest float below 1, for which
    ``ceil(steps * ratio)`` is still every step (the product rounds below ``steps``).
    """
    if "warmup_ratio" not in overrides or "warmup_ratio" in _FIELDS:
        return overrides
    out = dict(overrides)
    ratio = out.pop("warmup_ratio")
    if ratio is None:
        return out
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio <= 1:
        raise ValueError(f"warmup_ratio must be a number in [0, 1], got {ratio!r}")
    if out.get("warmup_steps"):
        raise ValueError("pass warmup_ratio or warmup_steps, not both")
    out["warmup_steps"] = math.nextafter(1.0, 0.0) if ratio == 1 else float(ratio)
    return out


# --------------------------------------------------------------------------------------------
# Loss parts


class _Accumulator:
    """Weighted sums of the loss parts over forward passes since the last reset.

    The sums stay tensors on the model's device (no host sync per micro-batch); :meth:`mean`
    reduces them over data-parallel ranks at logging time.
    """

    def __init__(self) -> None:
        self.sums: torch.Tensor | None = None  # [len(LOSS_PARTS) + 1]: weighted parts, weight

    def reset(self) -> None:
        self.sums = None

    def add(self, parts: Sequence[torch.Tensor], weight: float) -> None:
        values = [p.detach().float().mean() * weight for p in parts]
        row = torch.stack([*values, values[0].new_tensor(float(weight))]).double()
        self.sums = row if self.sums is None else self.sums + row.to(self.sums.device)

    def mean(self, device: torch.device | str = "cpu") -> dict[str, float] | None:
        """The weighted mean of each part over the forward passes of all data-parallel ranks."""
        dev = torch.device(device)
        t = self.sums if self.sums is not None else torch.zeros(len(LOSS_PARTS) + 1)
        self.reset()
        t = t.to(dev, torch.float64)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            if torch.distributed.get_world_size() > 1:
                torch.distributed.all_reduce(t)  # every rank logs at the same steps
        t = t.cpu()
        if t[-1] <= 0:
            return None
        return {name: float(t[i] / t[-1]) for i, name in enumerate(LOSS_PARTS)}


class LossPartsCallback(TrainerCallback):
    """Record both loss parts of every logging step (and of every evaluation).

    A forward hook on the model reads ``cls_loss`` and ``reg_loss`` of each forward pass that
    computed a loss; at each logging step the callback averages them over the micro-batches since
    the previous log and over data-parallel ranks (the same averaging the Trainer applies to
    ``loss``; evaluation batches are weighted by their number of examples, as for
    ``eval_loss``), adds them to the logs (so they appear in the progress bar and in
    ``trainer.state.log_history``) and appends a row to :attr:`history`. Forward passes in eval
    mode go to the evaluation log instead, as ``eval_cls_loss`` / ``eval_reg_loss`` next to
    ``eval_loss``, and a row of :attr:`eval_history`.

    Works with the plain ``Trainer`` (and its subclasses): pass it in ``callbacks``; the hook is
    attached when the Trainer is built or when training starts. :func:`make_trainer` adds one.
    Its ``on_*`` events take the arguments of every ``transformers.TrainerCallback`` event.

    Attributes:
        history: one dict per training log: ``step``, ``epoch``, ``loss`` (the Trainer's),
            ``cls_loss``, ``reg_loss``, ``learning_rate`` and ``grad_norm`` when logged.
        eval_history: one dict per evaluation: ``step``, ``eval_loss``, ``eval_cls_loss``,
            ``eval_reg_loss``.

    Example:
        >>> import tempfile
        >>> from transformers import PrinterCallback
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
        >>> model, ntok = CauchyLMForCausalLM.from_base(
        ...     tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True)
        >>> ds = NumericDataset.from_texts(["3 boxes of 12 eggs hold 36 eggs."] * 4, ntok)
        >>> args = make_training_arguments(tempfile.mkdtemp(), max_steps=2, logging_steps=1,
        ...                                per_device_train_batch_size=2, disable_tqdm=True)
        >>> cb = LossPartsCallback()
        >>> trainer = Trainer(model, args, train_dataset=ds, data_collator=NumericDataCollator(ntok),
        ...                   callbacks=[cb])
        >>> trainer.remove_callback(PrinterCallback)  # no log lines
        >>> _ = trainer.train()
        >>> [row["step"] for row in cb.history], sorted(cb.history[0])
        ([1.0, 2.0], ['cls_loss', 'epoch', 'grad_norm', 'learning_rate', 'loss', 'reg_loss', 'step'])
        >>> row = cb.history[0]  # loss = cls_loss + reg_weight * reg_loss (reg_weight = 1)
        >>> abs(row["loss"] - (row["cls_loss"] + row["reg_loss"])) < 1e-3 * row["loss"]
        True
    """

    def __init__(self) -> None:
        self.history: list[dict[str, float]] = []
        self.eval_history: list[dict[str, float]] = []
        self._train = _Accumulator()
        self._eval = _Accumulator()
        self._handle: torch.utils.hooks.RemovableHandle | None = None
        self._model: nn.Module | None = None

    # -- hook
    def attach(self, model: nn.Module) -> None:
        """Hook ``model`` (the module whose output has ``cls_loss`` / ``reg_loss``).

        Args:
            model: the model the Trainer trains (a PEFT wrapper around it is fine).

        Example:
            >>> import tempfile, torch
            >>> from transformers import TrainerControl, TrainerState
            >>> from cauchylin_hf.model import CauchyLMForCausalLM
            >>> from cauchylin_hf.testing import tiny_base_model
            >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
            >>> cb = LossPartsCallback()
            >>> cb.attach(model)  # the hook now reads every forward pass with a loss
            >>> ids = torch.tensor([[5, 299, 7]])
            >>> out = model.train()(ids, torch.tensor([[0.0, 2.5, 0.0]]), labels=ids)
            >>> logs = {"loss": out.loss.item()}
            >>> args = make_training_arguments(tempfile.mkdtemp())
            >>> cb.on_log(args, TrainerState(), TrainerControl(), logs=logs)
            >>> abs(logs["cls_loss"] - out.cls_loss.item()) < 1e-6, len(cb.history)
            (True, 1)
        """
        if self._model is model and self._handle is not None:
            return
        self.detach()
        self._model = model
        self._handle = model.register_forward_hook(self._record, with_kwargs=True)

    def detach(self) -> None:
        """Remove the forward hook.

        Example:
            >>> import tempfile, torch
            >>> from transformers import TrainerControl, TrainerState
            >>> from cauchylin_hf.model import CauchyLMForCausalLM
            >>> from cauchylin_hf.testing import tiny_base_model
            >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
            >>> cb = LossPartsCallback()
            >>> cb.attach(model)
            >>> cb.detach()
            >>> ids = torch.tensor([[5, 6, 7]])
            >>> _ = model.train()(ids, labels=ids)  # not recorded
            >>> logs = {"loss": 1.0}
            >>> args = make_training_arguments(tempfile.mkdtemp())
            >>> cb.on_log(args, TrainerState(), TrainerControl(), logs=logs)
            >>> logs, cb.history
            ({'loss': 1.0}, [])
        """
        if self._handle is not None:
            self._handle.remove()
        self._handle = None
        self._model = None

    def _record(
        self,
        module: nn.Module,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        output: Any,
    ) -> None:
        found = [getattr(output, name, None) for name in LOSS_PARTS]
        parts = [p for p in found if isinstance(p, torch.Tensor)]
        if len(parts) != len(found):
            return
        if module.training:
            # The Trainer's logged loss is the plain mean over micro-batches.
            self._train.add(parts, 1.0)
        else:
            # Its eval_loss weights each batch by its number of examples.
            ids = kwargs.get("input_ids", args[0] if args else None)
            rows = ids.shape[0] if isinstance(ids, torch.Tensor) and ids.dim() > 1 else 1
            self._eval.add(parts, float(rows))

    # -- events
    def on_init_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Attach the hook to the Trainer's model.

        Args:
            args: the Trainer's ``TrainingArguments``; ``state``, ``control`` (left unchanged) and
                ``**kwargs`` as in every ``TrainerCallback`` event (``model``: the model to hook).
        """
        if kwargs.get("model") is not None:
            self.attach(kwargs["model"])

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Attach the hook (if not yet) and start from empty sums.

        Args:
            args: the Trainer's ``TrainingArguments``; ``state``, ``control`` (left unchanged) and
                ``**kwargs`` as in every ``TrainerCallback`` event (``model``: the model to hook).
        """
        if kwargs.get("model") is not None:
            self.attach(kwargs["model"])
        self._train.reset()
        self._eval.reset()

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Forget eval-mode forward passes made outside an evaluation (e.g. by other callbacks).

        Args:
            args: the Trainer's ``TrainingArguments``; ``state``, ``control`` (left unchanged) and
                ``**kwargs`` as in every ``TrainerCallback`` event (``model``: the model to hook).
        """
        self._eval.reset()

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        """Add the averaged loss parts to a training or evaluation log and record them.

        A log with ``loss`` gets ``cls_loss`` / ``reg_loss`` (means since the previous log); one
        with ``eval_loss`` gets ``eval_cls_loss`` / ``eval_reg_loss``. Nothing is added when no
        forward pass with a loss was seen.

        Args:
            args: the Trainer's ``TrainingArguments`` (``args.device``: where ranks reduce).
            state: the Trainer's ``TrainerState`` (its last ``log_history`` entry is updated too).
            control: the Trainer's ``TrainerControl`` (left unchanged).
            logs: the dict being logged, updated in place; None does nothing.
            **kwargs: the Trainer's other callback keywords (unused).
        """
        if logs is None:
            return
        entry = state.log_history[-1] if state.log_history else {}
        if "loss" in logs:
            parts = self._train.mean(args.device)
            if parts is not None:
                logs.update(parts)
                entry.update(parts)
                row = {"step": float(state.global_step), "loss": float(logs["loss"]), **parts}
                for key in ("epoch", "learning_rate", "grad_norm"):
                    if logs.get(key) is not None:
                        row[key] = float(logs[key])
                self.history.append(row)
        if "eval_loss" in logs:
            parts = self._eval.mean(args.device)
            if parts is not None:
                named = {f"eval_{k}": v for k, v in parts.items()}
                logs.update(named)
                entry.update(named)
                self.eval_history.append(
                    {
                        "step": float(state.global_step),
                        "eval_loss": float(logs["eval_loss"]),
                        **named,
                    }
                )


# --------------------------------------------------------------------------------------------
# Trainer


DataSource = Dataset | Iterable[str] | os.PathLike[str]
"""Training or evaluation data: an encoded dataset, texts, a dataset file (a ``Path``), or a
Hugging Face ``datasets.Dataset`` / ``IterableDataset`` with a ``"text"`` column."""


class CheckpointFilesCallback(TrainerCallback):
    """Write the tokenizer and other files into every checkpoint the Trainer saves.

    The Trainer's checkpoint holds the model's weights and config; with the numeric tokenizer
    (and, for the CLI, ``data_format.json``) beside them it is a model folder of its own, loaded
    like the final model. Only the main process writes.

    Args:
        tokenizer: the numeric tokenizer to save into each checkpoint, or None.
        files: ``{file name: text}`` to write into each checkpoint as well.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from transformers import TrainerControl, TrainerState
        >>> run = Path(tempfile.mkdtemp())
        >>> (run / "checkpoint-3").mkdir()
        >>> cb = CheckpointFilesCallback(files={"notes.json": "{}"})
        >>> cb.on_save(TrainingArguments(str(run)), TrainerState(global_step=3), TrainerControl())
        >>> sorted(p.name for p in (run / "checkpoint-3").iterdir())
        ['notes.json']
    """

    def __init__(
        self, tokenizer: NumericTokenizer | None = None, files: Mapping[str, str] | None = None
    ) -> None:
        self.tokenizer = tokenizer
        self.files = dict(files or {})

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Write the files into ``<args.output_dir>/checkpoint-<state.global_step>``.

        Args:
            args: the Trainer's ``TrainingArguments`` (``output_dir``: the checkpoint folder).
            state: the Trainer's ``TrainerState`` (``global_step``; ``is_world_process_zero``).
            control: the Trainer's ``TrainerControl`` (left unchanged).
            **kwargs: the Trainer's other callback keywords (unused).
        """
        if not state.is_world_process_zero:
            return
        folder = Path(args.output_dir or ".") / f"{CHECKPOINT_PREFIX}-{state.global_step}"
        if not folder.is_dir():  # a save that wrote no checkpoint (save_strategy "no")
            return
        for name, text in self.files.items():
            (folder / name).write_text(text, encoding="utf-8")
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(folder)


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


def _calibration_split(
    train_ds: Dataset,
    calibration: float | str | DataSource | None,
    tokenizer: NumericTokenizer,
    max_length: int | None,
    seed: int,
) -> tuple[Dataset, Dataset | None]:
    """``(the examples to train on, the examples to calibrate on or None)``."""
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
        return train_ds.split_held_out(size, seed)
    # Copies of one text go to the same side: a calibration text that training also saw would
    # be read better than a new one, and the intervals would come out too narrow. A held-out
    # text is calibrated on once: a text repeated ten times is not ten new texts (on the demo
    # corpus, calibrating on every copy covered 0.88 of new numbers at 90%, once 0.91).
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i in range(n):
        groups.setdefault(_example_key(train_ds[i]), []).append(i)
    members = list(groups.values())
    order = torch.randperm(len(members), generator=torch.Generator().manual_seed(seed)).tolist()
    taken, held_out = 0, []
    for g in order:
        if taken >= size:
            break
        taken += len(members[g])
        held_out.append(members[g][0])
    if taken >= n:
        raise ValueError(
            f"calibration={calibration!r}: the {n} training examples are copies of "
            f"{len(members)} texts, too few to hold some out and train on the rest"
        )
    chosen = {i for g in order[: len(held_out)] for i in members[g]}
    kept = [i for i in range(n) if i not in chosen]
    return Subset(train_ds, kept), Subset(train_ds, sorted(held_out))


def _readout_rows(train_ds: Dataset, seed: int) -> Dataset:
    """The training rows the readouts are solved on: all, or a sample of ``READOUT_ROWS``
    (a random one, or the stream's first rows for an iterable dataset)."""
    try:
        n = len(train_ds)  # type: ignore[arg-type]
    except TypeError:
        return NumericDataset(list(itertools.islice(iter(train_ds), READOUT_ROWS)), name="readouts")
    rows = sample_rows(n, READOUT_ROWS, seed)
    return train_ds if rows is None else Subset(train_ds, rows)


def _example_key(example: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes two encoded examples the same text: their ids and numbers."""
    ids = example["input_ids"]
    values = example.get("numeric_values")
    ids_key = tuple(ids.tolist() if isinstance(ids, torch.Tensor) else ids)
    if values is None:
        return ids_key
    return ids_key, tuple(values.tolist() if isinstance(values, torch.Tensor) else values)


def make_trainer(
    model: nn.Module,
    tokenizer: NumericTokenizer | None,
    train_dataset: Dataset | None = None,
    eval_dataset: Dataset | None = None,
    *,
    args: TrainingArguments | None = None,
    data_collator: Callable[[list[Mapping[str, Any]]], dict[str, torch.Tensor]] | None = None,
    callbacks: Sequence[TrainerCallback] = (),
    **arg_overrides: Any,
) -> Trainer:
    """A plain ``transformers.Trainer`` set up for the causal language model.

    The Trainer gets a :class:`~cauchylin_hf.data.NumericDataCollator` (right padding), a
    :class:`LossPartsCallback` and arguments from :func:`make_training_arguments`. Its optimizer
    is the Trainer's own (``args.optim``), with the classification head's parameters in groups of
    their own at ``config.classifier_lr_scale`` times the learning rate (as
    :meth:`~cauchylin_hf.model.CauchyLMForCausalLM.parameter_groups`); the scheduler then scales
    every group alike. The model's loss
    is taken as a per-micro-batch mean: when the model does not declare ``accepts_loss_kwargs``
    the Trainer is told it does not normalise by ``num_items_in_batch`` (otherwise a ``forward``
    with ``**kwargs`` would make the Trainer skip the division by the gradient accumulation steps
    and multiply the loss by the number of data-parallel ranks).

    Args:
        model: a ``CauchyLMForCausalLM`` (or a PEFT model wrapping one).
        tokenizer: the numeric tokenizer (pad id and side for the collator), or None with an
            explicit ``data_collator``.
        train_dataset: encoded training examples, e.g. a :class:`~cauchylin_hf.data.NumericDataset`.
        eval_dataset: encoded evaluation examples (for ``eval_strategy="steps"``).
        args: ``TrainingArguments``; default ``make_training_arguments(**arg_overrides)``.
        data_collator: the collator; default ``NumericDataCollator(tokenizer, padding_side="right")``.
        callbacks: more callbacks.
        **arg_overrides: ``TrainingArguments`` fields (only without ``args``).

    Returns:
        The Trainer. Its :class:`LossPartsCallback` is ``trainer.loss_parts``.

    Raises:
        ValueError: for an empty dataset, both ``args`` and overrides, or no tokenizer and no
            collator.

    Example:
        >>> import tempfile
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
        >>> model, ntok = CauchyLMForCausalLM.from_base(
        ...     tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True)
        >>> from transformers import PrinterCallback
        >>> ds = NumericDataset.from_texts(["3 boxes of 12 eggs hold 36 eggs."] * 4, ntok)
        >>> trainer = make_trainer(model, ntok, ds, output_dir=tempfile.mkdtemp(), max_steps=2,
        ...                        logging_steps=1, per_device_train_batch_size=2,
        ...                        disable_tqdm=True)
        >>> trainer.remove_callback(PrinterCallback)  # no log lines
        >>> trainer.args.remove_unused_columns, type(trainer.data_collator).__name__
        (False, 'NumericDataCollator')
        >>> _ = trainer.train()
        >>> [sorted(row)[:2] for row in trainer.loss_parts.history]
        [['cls_loss', 'epoch'], ['cls_loss', 'epoch']]
    """
    if args is not None and arg_overrides:
        raise ValueError(
            f"pass either args or TrainingArguments overrides, not both: {sorted(arg_overrides)}"
        )
    if args is None:
        args = make_training_arguments(**arg_overrides)
    for name, ds in (("train_dataset", train_dataset), ("eval_dataset", eval_dataset)):
        if ds is not None and hasattr(ds, "__len__") and len(ds) == 0:
            raise ValueError(f"{name} is empty: the dataset needs at least one example")
    if data_collator is None:
        if tokenizer is None:
            raise ValueError("make_trainer needs a tokenizer or an explicit data_collator")
        data_collator = NumericDataCollator(tokenizer, padding_side="right")
    callback = LossPartsCallback()
    trainer = _CausalTrainer(
        model=model,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        data_collator=data_collator,
        callbacks=[callback, *callbacks],
    )
    callback.attach(cast(nn.Module, trainer.model))
    _declare_mean_loss(trainer)
    trainer.loss_parts = callback  # type: ignore[attr-defined]
    return trainer


def _unwrap(model: nn.Module) -> nn.Module:
    base = getattr(model, "get_base_model", None)  # PEFT
    return cast(nn.Module, base()) if callable(base) else model


class _CausalTrainer(Trainer):
    """``Trainer`` whose optimizer puts the classification head in groups of their own."""

    def create_optimizer(self, model: nn.Module | None = None) -> torch.optim.Optimizer:
        optimizer = super().create_optimizer(model)
        target = self.model if model is None else model
        assert target is not None  # the Trainer always has a model here
        inner = _unwrap(target)
        scale = float(getattr(getattr(inner, "config", None), "classifier_lr_scale", 1.0))
        head_parameters = getattr(inner, "classification_head_parameters", None)
        if scale == 1.0 or not callable(head_parameters):
            return optimizer
        head = {id(p) for p in head_parameters()}
        for group in list(optimizer.param_groups):
            moved = [p for p in group["params"] if id(p) in head]
            if moved:
                group["params"] = [p for p in group["params"] if id(p) not in head]
                optimizer.add_param_group({**group, "params": moved, "lr": group["lr"] * scale})
        optimizer.param_groups[:] = [g for g in optimizer.param_groups if g["params"]]
        return optimizer


def _declare_mean_loss(trainer: Trainer) -> None:
    """Tell the Trainer the model's loss is a per-micro-batch mean (unless the model says more)."""
    inner = trainer.model
    base = getattr(inner, "get_base_model", None)
    if callable(base):  # PEFT
        inner = base()
    if not hasattr(inner, "accepts_loss_kwargs"):
        trainer.model_accepts_loss_kwargs = False


# --------------------------------------------------------------------------------------------
# train()


@dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes:
        model: the trained model (the same object that was passed in).
        trainer: the ``Trainer`` that trained it.
        history: one dict per logging step: ``step``, ``loss``, ``cls_loss``, ``reg_loss``,
            ``learning_rate``, ``grad_norm``, ``epoch`` (see :class:`LossPartsCallback`); a
            resumed run logs the steps after its checkpoint (the earlier ones are in the
            checkpoint's ``trainer_state.json``).
        eval_history: one dict per evaluation during training (``eval_strategy="steps"``).
        metrics: held-out metrics after training (:func:`evaluate_model`), or None without
            evaluation texts.
        initial_metrics: held-out metrics before training (``eval_before=True``), else None.
        output_dir: where the model and tokenizer were saved, or None (``save=False``).
        train_runtime: wall-clock seconds of ``trainer.train()``.
        global_step: optimizer steps taken.
        readouts: what :func:`~cauchylin_hf.readouts.solve_readouts` did after training (None
            with ``readouts=False``).
        calibration: what :func:`~cauchylin_hf.readouts.calibrate` did (None without
            calibration texts).
        readout_data: the training rows the readouts were solved on (None with
            ``readouts=False``): with :attr:`calibration_data`, what solving them again with
            other settings needs (e.g. ``config.readout_numbers``, then
            :func:`~cauchylin_hf.readouts.solve_readouts` and
            :func:`~cauchylin_hf.readouts.calibrate`).
        calibration_data: the examples the calibration read (None without calibration).
        calibration_size: how many examples the calibration read (held out of the training
            texts, or given).

    Example:
        >>> import tempfile
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
        >>> model, ntok = CauchyLMForCausalLM.from_base(
        ...     tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True)
        >>> result = train(model, ntok, ["3 boxes of 12 eggs hold 36 eggs."] * 4, None,
        ...                tempfile.mkdtemp(), max_steps=2, batch_size=2, logging_steps=1,
        ...                progress=False, save=False)
        >>> result.global_step, [row["step"] for row in result.history], result.metrics
        (2, [1.0, 2.0], None)
        >>> result.model is model, result.output_dir
        (True, None)
    """

    model: nn.Module
    trainer: Trainer
    history: list[dict[str, float]] = field(default_factory=list)
    eval_history: list[dict[str, float]] = field(default_factory=list)
    metrics: dict[str, float] | None = None
    initial_metrics: dict[str, float] | None = None
    output_dir: Path | None = None
    train_runtime: float = 0.0
    global_step: int = 0
    readouts: ReadoutReport | None = None
    calibration: CalibrationReport | None = None
    readout_data: Dataset | None = None
    calibration_data: Dataset | None = None
    calibration_size: int = 0

    def series(self, key: str) -> list[float]:
        """The values of ``key`` over :attr:`history`, in step order.

        Args:
            key: a column of :attr:`history`, e.g. ``"reg_loss"``, ``"loss"``, ``"step"``.

        Returns:
            One value per logged row that has ``key`` (rows without it are skipped).

        Example:
            >>> rows = [{"step": 10.0, "reg_loss": 0.5}, {"step": 20.0}]
            >>> result = TrainResult(model=None, trainer=None, history=rows)
            >>> result.series("reg_loss"), result.series("step")
            ([0.5], [10.0, 20.0])
        """
        return [row[key] for row in self.history if key in row]


def _solve(
    model: nn.Module, tokenizer: NumericTokenizer, data: Dataset, args: TrainingArguments
) -> ReadoutReport | None:
    """The per-context readouts, solved after training (a model without ``<NUM>``: none)."""
    inner = _unwrap(model)
    if getattr(inner.config, "num_token_id", None) is None:
        return None
    return solve_readouts(inner, tokenizer, data, batch_size=args.per_device_eval_batch_size)


def _calibrate(
    model: nn.Module, tokenizer: NumericTokenizer, data: Dataset, args: TrainingArguments
) -> CalibrationReport | None:
    """The conformal widths, from the held-out calibration texts (a model without ``<NUM>``:
    none)."""
    inner = _unwrap(model)
    if getattr(inner.config, "num_token_id", None) is None:
        return None
    return calibrate(inner, tokenizer, data, batch_size=args.per_device_eval_batch_size)


def train(
    model: nn.Module,
    tokenizer: NumericTokenizer,
    train_texts: DataSource,
    eval_texts: DataSource | None = None,
    output_dir: str | os.PathLike[str] = "cauchylin_output",
    *,
    max_steps: int = -1,
    num_train_epochs: float = 1.0,
    batch_size: int = 16,
    learning_rate: float = 1e-3,
    logging_steps: int = 10,
    eval_steps: int | None = None,
    max_length: int | None = None,
    seed: int = 0,
    progress: bool = True,
    save: bool = True,
    evaluate: bool = True,
    eval_before: bool = False,
    callbacks: Sequence[TrainerCallback] = (),
    readouts: bool = True,
    calibration: float | str | DataSource | None = "auto",
    save_steps: int | None = None,
    save_total_limit: int | None = None,
    resume_from_checkpoint: bool | str | os.PathLike[str] | None = None,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    checkpoint_files: Mapping[str, str] | None = None,
    **training_args: Any,
) -> TrainResult:
    """Train the causal language model on texts with the HF ``Trainer``.

    Encodes the texts (:class:`~cauchylin_hf.data.NumericDataset`), trains with
    :func:`make_trainer` (the Trainer's tqdm progress bar unless ``progress=False``), records both
    loss parts per logging step, then reads the numbers out as well as the features allow and
    calibrates their intervals (:mod:`cauchylin_hf.readouts`): a readout solved per context on
    the training texts (``readouts=True``) and split-conformal widths fitted on texts held out of
    training (``calibration``). It evaluates on ``eval_texts`` with :func:`evaluate_model` and
    saves the model and the tokenizer to ``output_dir``.

    **Calibration texts.** ``calibration="auto"`` (the default) holds out a fifth of the
    training texts (at most 2000, drawn with ``seed``) when there are at least 100 of them, and
    none otherwise (:func:`cauchylin.conformal.calibration_holdout`); a number in ``(0, 1)``
    holds out that share; texts, a file or a dataset are calibration texts of their own
    (nothing is held out); None or 0 calibrates nothing. Copies of one text are held out
    together or not at all (a calibration text that training saw would be read too well), and
    a held-out text is calibrated on once. From a ``datasets.Dataset`` the texts are held out
    by a hash of the text instead (about the share, copies together, nothing encoded:
    :meth:`~cauchylin_hf.streaming.LazyNumericDataset.split_held_out`), and the readouts are
    solved on at most ``READOUT_ROWS`` (50,000) training rows, a random sample. The
    model never trains on the texts it is calibrated on: that is what makes a calibrated
    interval of coverage ``c`` cover a new number with probability at least ``c``.

    **Checkpoints and resuming.** With ``save_steps=N`` the Trainer writes a checkpoint every
    ``N`` optimizer steps, a folder ``checkpoint-<step>`` in ``checkpoint_dir`` (default
    ``output_dir``) that holds the model, the tokenizer, the optimizer, the scheduler, the RNG
    states and the data position; it loads like the final model
    (``CauchyLMForCausalLM.from_pretrained`` and ``NumericTokenizer.from_pretrained``).
    ``save_total_limit`` keeps only that many, the newest. ``resume_from_checkpoint=True``
    continues from the latest complete checkpoint in ``checkpoint_dir`` (a path: from that one):
    called with the same model, data and options, the resumed run takes the same steps on the
    same batches as an uninterrupted one, and logs the same losses
    (:mod:`cauchylin_hf.trainer_checkpoints`). Ctrl-C raises ``KeyboardInterrupt`` as usual; the
    checkpoints written so far stay.

    Launched with ``torchrun --nproc_per_node N``
    (or ``accelerate launch``) the same call trains data-parallel: ``batch_size`` is per process;
    only the main process saves.

    Args:
        model: a ``CauchyLMForCausalLM`` (its trainable parameters train: by default the new
            heads, the backbone frozen), or a PEFT model wrapping one.
        tokenizer: the ``NumericTokenizer`` the model was built with.
        train_texts: training texts, a dataset file (a ``pathlib.Path``: JSONL with a ``"text"``
            field, or plain text with one example per line; see
            :func:`~cauchylin_hf.data.read_texts`), an encoded dataset, or a Hugging Face
            ``datasets.Dataset`` / ``IterableDataset`` with a ``"text"`` column, kept on disk
            and encoded as it is read (:func:`~cauchylin_hf.streaming.as_numeric_dataset`; an
            iterable one needs ``max_steps`` and ``calibration=None`` or texts of its own).
        eval_texts: held-out texts, file or dataset, or None.
        output_dir: where checkpoints, the final model and the tokenizer go.
        max_steps: optimizer steps; -1 trains ``num_train_epochs`` epochs.
        num_train_epochs: epochs when ``max_steps`` is -1.
        batch_size: examples per device per step.
        learning_rate: peak learning rate (AdamW, linear decay).
        logging_steps: log the loss and its parts every this many steps.
        eval_steps: also evaluate the loss (and its parts) on ``eval_texts`` every this many
            steps during training; None evaluates only at the end.
        max_length: cut texts to this many tokens.
        seed: seed of initialisation-free randomness (data order, dropout).
        progress: show the Trainer's progress bar (and its log lines); False trains silently.
        save: save the model and the tokenizer to ``output_dir`` at the end.
        evaluate: compute held-out metrics at the end (needs ``eval_texts``).
        eval_before: also compute them before training (the untrained baseline).
        callbacks: more Trainer callbacks.
        readouts: after training, solve a readout per context
            (:func:`~cauchylin_hf.readouts.solve_readouts`); False keeps the shared head alone.
        calibration: ``"auto"``, a share in ``(0, 1)``, calibration texts (a file or a dataset),
            or None (see above).
        save_steps: write a checkpoint every this many optimizer steps; None writes none.
        save_total_limit: keep at most this many checkpoints (the oldest go); None keeps all.
        resume_from_checkpoint: True to continue from the latest checkpoint in
            ``checkpoint_dir``, a checkpoint folder to continue from that one, or None.
        checkpoint_dir: the folder of the ``checkpoint-<step>`` folders (default
            ``output_dir``).
        checkpoint_files: ``{file name: text}`` written into every checkpoint beside the model
            and the tokenizer (the CLI's ``data_format.json``).
        **training_args: any other ``TrainingArguments`` field (e.g.
            ``gradient_accumulation_steps``, ``lr_scheduler_type``, ``weight_decay``), and
            ``warmup_ratio`` (a share of the steps; the running transformers release may spell
            it as a ``warmup_steps`` below 1).

    Returns:
        A :class:`TrainResult`.

    Raises:
        ValueError: for empty training or evaluation data (named), a text with no tokens, a
            malformed dataset file, a bad ``calibration``, bad options, or no checkpoint to
            resume from.
        FileNotFoundError: for a dataset file that does not exist.

    Example:
        >>> import tempfile, torch
        >>> _ = torch.manual_seed(0)  # the random part of the heads' init (w_num, W_reg)
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
        >>> model, ntok = CauchyLMForCausalLM.from_base(
        ...     tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True)
        >>> texts = ["3 boxes of 12 eggs hold 36 eggs.", "2 boxes of 6 eggs hold 12 eggs."] * 4
        >>> result = train(model, ntok, texts, ["4 boxes of 5 eggs hold 20 eggs."],
        ...                tempfile.mkdtemp(), max_steps=4, batch_size=4, logging_steps=2,
        ...                learning_rate=1e-2, progress=False, eval_before=True)
        >>> [row["step"] for row in result.history], len(result.series("reg_loss"))
        ([2.0, 4.0], 2)
        >>> result.series("loss")[-1] < result.series("loss")[0]
        True
        >>> result.metrics["eval/loss"] < result.initial_metrics["eval/loss"]
        True
        >>> sorted(p.name for p in result.output_dir.glob("*.json"))[:2]
        ['config.json', 'generation_config.json']
    """
    positive_int("batch_size", batch_size)
    positive_int("logging_steps", logging_steps)
    for name, optional in (("save_steps", save_steps), ("save_total_limit", save_total_limit)):
        if optional is not None:
            positive_int(name, optional)
    if not isinstance(tokenizer, NumericTokenizer):
        raise ValueError(
            f"tokenizer must be a cauchylin_hf.tokenizer.NumericTokenizer, got "
            f"{type(tokenizer).__name__}"
        )
    finite_number("learning_rate", learning_rate)
    train_ds = _as_dataset(train_texts, tokenizer, "train_texts", max_length)
    if train_ds is None:
        raise ValueError("train_texts is None: pass the training texts")
    train_ds, calibration_ds = _calibration_split(
        train_ds, calibration, tokenizer, max_length, seed
    )
    eval_ds = _as_dataset(eval_texts, tokenizer, "eval_texts", max_length)
    if eval_steps is not None:
        if eval_ds is None:
            raise ValueError("eval_steps needs eval_texts")
        training_args.setdefault("eval_strategy", "steps")
        training_args.setdefault("eval_steps", eval_steps)
    checkpoints = Path(output_dir if checkpoint_dir is None else checkpoint_dir)
    resume = resolve_resume_checkpoint(resume_from_checkpoint, checkpoints)
    if save_steps is not None:
        training_args["save_steps"] = save_steps  # save_strategy "steps" then
    if save_total_limit is not None:
        training_args["save_total_limit"] = save_total_limit
    args = make_training_arguments(
        checkpoints,
        max_steps=max_steps,
        num_train_epochs=num_train_epochs,
        per_device_train_batch_size=batch_size,
        per_device_eval_batch_size=training_args.pop("per_device_eval_batch_size", batch_size),
        learning_rate=float(learning_rate),
        logging_steps=logging_steps,
        seed=seed,
        disable_tqdm=not progress,
        **training_args,
    )
    trainer = make_trainer(
        model,
        tokenizer,
        train_ds,
        eval_ds if eval_steps is not None else None,
        args=args,
        callbacks=[CheckpointFilesCallback(tokenizer, checkpoint_files), *callbacks],
    )
    if not progress:
        trainer.remove_callback(PrinterCallback)  # no log lines either
    result = TrainResult(model=model, trainer=trainer)
    if calibration_ds is not None:
        result.calibration_size = len(calibration_ds)  # type: ignore[arg-type]
        result.calibration_data = calibration_ds
    if eval_before and evaluate and eval_ds is not None:
        result.initial_metrics = evaluate_model(
            model, tokenizer, eval_ds, batch_size=args.per_device_eval_batch_size
        )
    start = time.perf_counter()
    with progress_bars(progress):
        out = trainer.train(resume_from_checkpoint=resume)
    result.train_runtime = time.perf_counter() - start
    result.global_step = int(out.global_step)
    result.history = list(trainer.loss_parts.history)  # type: ignore[attr-defined]
    result.eval_history = list(trainer.loss_parts.eval_history)  # type: ignore[attr-defined]
    if readouts:
        result.readout_data = _readout_rows(train_ds, seed)
        result.readouts = _solve(model, tokenizer, result.readout_data, args)
    if calibration_ds is not None:
        result.calibration = _calibrate(model, tokenizer, calibration_ds, args)
    if evaluate and eval_ds is not None:
        result.metrics = evaluate_model(
            model, tokenizer, eval_ds, batch_size=args.per_device_eval_batch_size
        )
    if save:
        with progress_bars(progress):
            trainer.save_model(str(output_dir))
        if trainer.is_world_process_zero():
            tokenizer.save_pretrained(str(output_dir))
        result.output_dir = Path(output_dir)
    return result
