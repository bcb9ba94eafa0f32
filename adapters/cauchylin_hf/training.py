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
import hashlib
import itertools
import json
import logging
import math
import os
import shutil
import tempfile
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

from .atomic_save import share_with_umask
from .data import NumericDataCollator, NumericDataset
from .evaluation import evaluate_model
from .hf_compat import progress_bars
from .readouts import (
    CalibrationReport,
    ReadoutReport,
    calibrate,
    cross_calibrate,
    solve_readouts,
)
from .save_and_load import is_checkpoint_file
from .streaming import CopiesOfOneText, LazyNumericDataset, as_numeric_dataset, sample_rows
from .threads import fit_threads
from .tokenizer import NumericTokenizer
from .trainer_checkpoints import (
    CHECKPOINT_PREFIX,
    DIGESTS_FILE,
    OPTIMIZER_FILES,
    RUN_FILE,
    TRAINER_STATE_FILE,
    CheckpointError,
    check_checkpoint,
    read_run_record,
    record_digests,
    resolve_resume_checkpoint,
    rotate_checkpoints,
    run_differences,
)

__all__ = [
    "HOLDOUT_FILE",
    "CheckpointFilesCallback",
    "DataSource",
    "LossPartsCallback",
    "TrainResult",
    "make_trainer",
    "make_training_arguments",
    "train",
]

logger = logging.getLogger(__name__)

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


def _is_trainer_file(name: str) -> bool:
    """The Trainer's own files in a checkpoint (its state, the optimizer's, the RNG states)."""
    own = (TRAINER_STATE_FILE, *OPTIMIZER_FILES, "scaler.pt", "training_args.bin", DIGESTS_FILE)
    return name in own or (name.startswith("rng_state") and name.endswith(".pth"))


class CheckpointFilesCallback(TrainerCallback):
    """Write the tokenizer and other files into every checkpoint the Trainer saves, and keep the
    newest checkpoints.

    The Trainer's checkpoint holds the model's weights and config; with the numeric tokenizer
    (and, for the CLI, ``data_format.json``) beside them it is a model folder of its own, loaded
    like the final model. The SHA-256 of its weights goes into ``weights_sha256.json``
    (:func:`~cauchylin_hf.trainer_checkpoints.record_digests`, compared before a resume), and
    every file of the checkpoint gets the permissions the umask gives new files (the weights are
    written private first). With ``save_total_limit`` the older
    checkpoints go, by step (:func:`~cauchylin_hf.trainer_checkpoints.rotate_checkpoints`).
    Only the main process writes.

    Args:
        tokenizer: the numeric tokenizer to save into each checkpoint, or None.
        files: ``{file name: text}`` to write into each checkpoint as well (plain file names).
        save_total_limit: keep this many checkpoints, the newest; None keeps every one.

    Raises:
        ValueError: a name in ``files`` is not a plain file name (a path, ``..``, empty).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from transformers import TrainerControl, TrainerState
        >>> run = Path(tempfile.mkdtemp())
        >>> (run / "checkpoint-3").mkdir()
        >>> cb = CheckpointFilesCallback(files={"notes.json": "{}"})
        >>> cb.on_save(TrainingArguments(str(run)), TrainerState(global_step=3), TrainerControl())
        >>> sorted(p.name for p in (run / "checkpoint-3").iterdir())  # and its weights' digests
        ['notes.json', 'weights_sha256.json']
        >>> CheckpointFilesCallback(files={"/etc/notes.json": "{}"})
        Traceback (most recent call last):
        ...
        ValueError: checkpoint_files: '/etc/notes.json' is not a plain file name (the files are written into each checkpoint folder)
    """

    def __init__(
        self,
        tokenizer: NumericTokenizer | None = None,
        files: Mapping[str, str] | None = None,
        save_total_limit: int | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.files = dict(files or {})
        for name in self.files:
            plain = isinstance(name, str) and name not in ("", ".", "..")
            if not plain or Path(name).name != name or "\\" in name or "\0" in name:
                raise ValueError(
                    f"checkpoint_files: {name!r} is not a plain file name (the files are "
                    "written into each checkpoint folder)"
                )
            if is_checkpoint_file(name) or _is_trainer_file(name):
                raise ValueError(
                    f"checkpoint_files: {name!r} is a file the checkpoint itself is made of (the "
                    "model, its tokenizer or the Trainer's state): choose another name"
                )
            if not isinstance(self.files[name], str):
                raise ValueError(
                    f"checkpoint_files[{name!r}] must be text (str), got "
                    f"{type(self.files[name]).__name__}"
                )
        self.save_total_limit = save_total_limit

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
        run = Path(args.output_dir or ".")
        folder = run / f"{CHECKPOINT_PREFIX}-{state.global_step}"
        if not folder.is_dir():  # a save that wrote no checkpoint (save_strategy "no")
            return
        # Written beside the checkpoint, then each file moved in whole: the Trainer wrote
        # trainer_state.json already, so a kill now must leave no file cut off in it.
        staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=run))
        try:
            for name, text in self.files.items():
                (staging / name).write_text(text, encoding="utf-8")
            if self.tokenizer is not None:
                self.tokenizer.save_pretrained(staging)
            for path in sorted(staging.iterdir()):
                os.replace(path, folder / path.name)
            record_digests(folder, staging)
            for path in sorted(staging.iterdir()):
                os.replace(path, folder / path.name)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        share_with_umask(folder)
        if self.save_total_limit is not None:
            rotate_checkpoints(run, self.save_total_limit, state.best_model_checkpoint)


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
        groups.setdefault(_example_key(train_ds[i]), []).append(i)
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


def _holdout_record(rows: int, held: Dataset | None, seed: int) -> dict[str, Any]:
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
        >>> _holdout_record(10, None, 0)["held_out"]
        0
    """
    count = 0 if held is None else len(held)  # type: ignore[arg-type]
    keys = sorted(
        hashlib.sha256(repr(_example_key(held[i])).encode()).hexdigest()  # type: ignore[index]
        for i in range(count)
    )
    digest = hashlib.sha256("\n".join(keys).encode()).hexdigest()
    return {"rows": int(rows), "held_out": count, "seed": int(seed), "digest": digest}


def _check_resumed_holdout(checkpoint: str | os.PathLike[str], record: dict[str, Any]) -> None:
    """Refuse to resume a run whose calibration texts would not be the run's own.

    The texts held out to calibrate on must never have been trained on. A run resumed with
    another seed or other rows draws another hold-out, whose texts the run trained on before
    its checkpoint: the intervals calibrated on them would come out too narrow. ``record`` is
    this call's ``_holdout_record``; the checkpoint's :data:`HOLDOUT_FILE` must hold the same
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
        calibration_note: why nothing was held out to calibrate on although ``calibration``
            asked for it (the training texts are copies of one text, or none of a few distinct
            texts fell in the hold-out); empty otherwise.
        resumed_step: the step of the checkpoint the run resumed from, or None for a new run.

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
    calibration_note: str = ""
    resumed_step: int | None = None

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


def _trainable_count(model: nn.Module) -> int:
    """The parameter tensors the optimizer steps (those that require a gradient)."""
    return sum(1 for p in model.parameters() if p.requires_grad)


def _weight_differences(model: nn.Module, checkpoint: Path) -> tuple[list[str], list[str]]:
    """Where the checkpoint's ``model.safetensors`` does not fit ``model`` (its tensors that the
    model lacks, and the shapes that differ), and its parameters that hold a NaN or an infinity
    (a file damaged inside its data: safetensors keeps no checksum)."""
    from safetensors import safe_open

    path = checkpoint / "model.safetensors"
    inner = _unwrap(model)
    own = {name: tuple(t.shape) for name, t in inner.state_dict().items()}
    if not path.is_file() or not own:
        return [], []
    parameters = {name for name, _ in inner.named_parameters()}
    found, broken = [], []
    with safe_open(str(path), framework="pt") as f:
        for name in f.keys():
            shape = tuple(f.get_slice(name).get_shape())
            if name not in own:
                found.append(f"{name}: in the checkpoint, not in the model")
            elif own[name] != shape:
                found.append(f"{name}: {list(shape)} in the checkpoint, {list(own[name])} here")
            elif name in parameters:
                tensor = f.get_tensor(name)
                if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                    broken.append(name)
    return found, broken


def _check_resume(
    model: nn.Module,
    tokenizer: NumericTokenizer,
    resume: str,
    fresh_optimizer_state: bool,
    accept: str,
) -> int:
    """Refuse a resume that would fail or go wrong after the work began: a damaged checkpoint,
    weights of another size or model, another tokenizer, another set of trained parameters.
    Returns the checkpoint's step."""
    from transformers import TrainerState as _State

    check_checkpoint(resume, fresh_optimizer_state=fresh_optimizer_state, accept=accept)
    folder = Path(resume)
    where = f"checkpoint {resume!r}"
    try:
        step = int(_State.load_from_json(str(folder / TRAINER_STATE_FILE)).global_step)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise CheckpointError(
            f"{where}: {TRAINER_STATE_FILE} is not a state the Trainer reads "
            f"({str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__}); resume "
            "from another checkpoint (name its folder)"
        ) from None
    differ, broken = _weight_differences(model, folder)
    if broken:
        more = f" and {len(broken) - 1} more" if len(broken) > 1 else ""
        raise CheckpointError(
            f"{where}: model.safetensors holds NaN or infinite values in {broken[0]}{more} (a "
            "damaged file, or a training that diverged before it was written); resume from an "
            "earlier checkpoint (name its folder)"
        )
    if differ:
        more = f" and {len(differ) - 2} more" if len(differ) > 2 else ""
        raise CheckpointError(
            f"{where} holds the weights of another model ({'; '.join(differ[:2])}{more}): "
            "resume with the model (base, size, config) the training started with"
        )
    if (folder / "tokenizer.json").is_file():
        saved = NumericTokenizer.from_pretrained(folder)
        if saved.tokenizer.get_vocab() != tokenizer.tokenizer.get_vocab():
            sizes = (
                f"{len(saved)} tokens, {len(tokenizer)} now"
                if len(saved) != len(tokenizer)
                else f"{len(saved)} tokens both, not the same ones"
            )
            raise CheckpointError(
                f"{where} was trained with another tokenizer ({sizes}): resume with the "
                "tokenizer (and, for a tokenizer trained on the data, the data) the training "
                "started with"
            )
    optimizer = folder / OPTIMIZER_FILES[0]
    if optimizer.is_file():
        try:
            state = torch.load(optimizer, map_location="cpu", weights_only=True, mmap=True)
            groups = state["param_groups"]
            saved_count = sum(len(group["params"]) for group in groups)
        except Exception as exc:  # a damaged archive's pickle: anything torch.load raises
            raise CheckpointError(
                f"{where}: {OPTIMIZER_FILES[0]} cannot be read "
                f"({str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__}); resume "
                f"from another checkpoint, or delete the file and pass {accept}"
            ) from None
        count = _trainable_count(model)
        if saved_count != count:
            raise CheckpointError(
                f"{where}: its optimizer state is for {saved_count} trained parameter tensors, "
                f"the model trains {count} now (was the backbone trained then and frozen now, or "
                "the other way round?): resume with the same trainable parameters"
            )
    return step


_DIGEST_ROWS = 1000
"""The most training examples (evenly spaced) whose ids and numbers a checkpoint's record
digests."""


def _texts_digest(train_ds: Dataset) -> str | None:
    """A digest of up to :data:`_DIGEST_ROWS` evenly spaced training examples held in memory
    (None for data read from disk as it trains, or without a length)."""
    import hashlib

    inner = train_ds.dataset if isinstance(train_ds, Subset) else train_ds
    if isinstance(inner, LazyNumericDataset):
        return None
    try:
        n = len(train_ds)  # type: ignore[arg-type]
    except TypeError:
        return None
    h = hashlib.sha256()
    for i in range(0, n, max(1, n // _DIGEST_ROWS)):
        h.update(repr(_example_key(train_ds[i])).encode())
    return h.hexdigest()[:16]


def _run_record(
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
    digest = _texts_digest(train_ds)
    if digest is not None:
        record["train_texts"] = digest
    record["trainable_tensors"] = _trainable_count(model)
    record.update(steps)
    out[RUN_FILE] = json.dumps(record, indent=2, ensure_ascii=False) + "\n"
    return out, record


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
    calibration_split: str = "random",
    save_steps: int | None = None,
    save_total_limit: int | None = None,
    resume_from_checkpoint: bool | str | os.PathLike[str] | None = None,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    checkpoint_files: Mapping[str, str] | None = None,
    threads: int | None = None,
    fresh_optimizer_state: bool = False,
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

    **Fewer than 100 texts.** ``"auto"`` then holds none out, and calibrates the contexts with a
    solved readout on the training texts by cross-conformal widths instead
    (:func:`~cauchylin_hf.readouts.cross_calibrate`: each number scored by the readout solved
    without its fold); the numbers the shared head reads keep the Cauchy intervals, which the
    prediction functions mark as not calibrated.

    **Time-ordered texts.** The guarantee needs the new rows to be exchangeable with the
    calibration rows. Rows in time order (a yearly series) are not: a random hold-out
    calibrates on years among the training years, and the intervals come out too narrow for the
    years after them. ``calibration_split="last"`` holds out the last texts instead (the
    latest, when the data is in time order), so the widths are fitted on rows that come after
    the ones trained on, as new rows will.

    **Checkpoints and resuming.** With ``save_steps=N`` the Trainer writes a checkpoint every
    ``N`` optimizer steps, a folder ``checkpoint-<step>`` in ``checkpoint_dir`` (default
    ``output_dir``) that holds the model, the tokenizer, the optimizer, the scheduler, the RNG
    states and the data position; it loads like the final model
    (``CauchyLMForCausalLM.from_pretrained`` and ``NumericTokenizer.from_pretrained``).
    ``save_total_limit`` keeps only that many, the newest by step. ``resume_from_checkpoint=True``
    continues from the latest complete checkpoint in ``checkpoint_dir`` (a path: from that one):
    called with the same model, data and options, the resumed run takes the same steps on the
    same batches as an uninterrupted one, and logs the same losses
    (:mod:`cauchylin_hf.trainer_checkpoints`). Before any work the checkpoint is checked: a
    damaged or missing file, weights of another size or model, another tokenizer, another
    number of training rows or of trained parameters are refused with a
    :class:`~cauchylin_hf.trainer_checkpoints.CheckpointError` that says what differs; so is a
    checkpoint without the optimizer's, the scheduler's or the RNG state, unless
    ``fresh_optimizer_state=True``.
    Every checkpoint also records the texts held out to calibrate on (:data:`HOLDOUT_FILE`): a
    resumed call that would hold out others (another ``seed``, other or more rows), texts the
    run has trained on, is refused. Ctrl-C raises ``KeyboardInterrupt`` as usual; the
    checkpoints written so far stay.

    **Threads.** On a CPU, training uses ``threads`` torch threads; by default no more than the
    cores that are free (the usable cores minus the one-minute load average, at least 1:
    :func:`~cauchylin_hf.threads.fit_threads`), which on a busy machine is many times faster
    than one thread per core. A lowered count is logged once (a warning of the
    ``cauchylin_hf.training`` logger); torch's own count is restored when ``train`` returns.

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
        calibration_split: which texts a share holds out: ``"random"`` (drawn with ``seed``)
            or ``"last"`` (the last ones, for texts in time order).
        save_steps: write a checkpoint every this many optimizer steps; None writes none.
        save_total_limit: keep at most this many checkpoints (the oldest go); None keeps all.
        resume_from_checkpoint: True to continue from the latest checkpoint in
            ``checkpoint_dir``, a checkpoint folder to continue from that one, or None.
        checkpoint_dir: the folder of the ``checkpoint-<step>`` folders (default
            ``output_dir``).
        checkpoint_files: ``{file name: text}`` written into every checkpoint beside the model
            and the tokenizer (the CLI's ``data_format.json``); plain file names only.
        threads: torch CPU threads while training; None: no more than the free cores.
        fresh_optimizer_state: resume from a checkpoint without ``optimizer.pt``,
            ``scheduler.pt`` or ``rng_state.pth``, starting them afresh (default: refused).
        **training_args: any other ``TrainingArguments`` field (e.g.
            ``gradient_accumulation_steps``, ``lr_scheduler_type``, ``weight_decay``), and
            ``warmup_ratio`` (a share of the steps; the running transformers release may spell
            it as a ``warmup_steps`` below 1).

    Returns:
        A :class:`TrainResult`.

    Raises:
        ValueError: for empty training or evaluation data (named), a text with no tokens, a
            malformed dataset file, a bad ``calibration``, bad options, or no checkpoint to
            resume from; a ``CheckpointError`` for a checkpoint that the resume cannot use.
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
    if threads is not None:
        positive_int("threads", threads)
    for name, optional in (("save_steps", save_steps), ("save_total_limit", save_total_limit)):
        if optional is not None:
            positive_int(name, optional)
    if not isinstance(tokenizer, NumericTokenizer):
        raise ValueError(
            f"tokenizer must be a cauchylin_hf.tokenizer.NumericTokenizer, got "
            f"{type(tokenizer).__name__}"
        )
    finite_number("learning_rate", learning_rate)
    saving = CheckpointFilesCallback(tokenizer, checkpoint_files, save_total_limit)
    checkpoints = Path(output_dir if checkpoint_dir is None else checkpoint_dir)
    resume = resolve_resume_checkpoint(resume_from_checkpoint, checkpoints)
    resumed_step = None
    if resume is not None:  # before any work: a checkpoint that does not fit is refused now
        resumed_step = _check_resume(
            model, tokenizer, resume, fresh_optimizer_state, "fresh_optimizer_state=True"
        )
    train_ds = _as_dataset(train_texts, tokenizer, "train_texts", max_length)
    if train_ds is None:
        raise ValueError("train_texts is None: pass the training texts")
    try:
        rows = len(train_ds)  # type: ignore[arg-type]
    except TypeError:  # an iterable dataset: nothing of it is held out
        rows = 0
    if calibration_split not in ("random", "last"):
        raise ValueError(f'calibration_split must be "random" or "last", got {calibration_split!r}')
    calibration_note = ""
    try:
        train_ds, calibration_ds = _calibration_split(
            train_ds, calibration, tokenizer, max_length, seed, last=calibration_split == "last"
        )
    except CopiesOfOneText as exc:  # nothing can be held out: train on it, calibrate nothing
        calibration_ds, calibration_note = None, str(exc)
    else:
        share = calibration if isinstance(calibration, (str, int, float)) else None
        if (
            calibration_ds is None
            and share is not None
            and rows
            and calibration_holdout(rows, share)
        ):
            calibration_note = (
                f"none of the {rows} training texts fell in the hold-out (they are copies of a "
                "few distinct texts, and copies stay on one side): the intervals are not "
                "calibrated"
            )
    # the texts held out of training, recorded in every checkpoint and checked on resume
    held_out = calibration_ds if calibration_ds is not None and train_ds is not None else None
    holding = held_out is not None and isinstance(calibration, (str, int, float))
    holdout = _holdout_record(rows, held_out if holding else None, seed)
    # fewer texts than a hold-out needs: cross-conformal widths from the training texts
    cross = calibration == "auto" and calibration_ds is None and not calibration_note
    eval_ds = _as_dataset(eval_texts, tokenizer, "eval_texts", max_length)
    if eval_steps is not None:
        if eval_ds is None:
            raise ValueError("eval_steps needs eval_texts")
        training_args.setdefault("eval_strategy", "steps")
        training_args.setdefault("eval_steps", eval_steps)
    batch = {
        "batch_size": batch_size,
        "gradient_accumulation_steps": training_args.get("gradient_accumulation_steps", 1),
    }
    saving.files, record = _run_record(checkpoint_files, train_ds, model, batch)
    saving.files[HOLDOUT_FILE] = json.dumps(holdout) + "\n"
    if resume is not None and holding:  # the most specific reason first
        _check_resumed_holdout(resume, holdout)
    if resume is not None:
        differ = run_differences(read_run_record(resume) or {}, record)
        if differ:
            raise CheckpointError(
                f"checkpoint {resume!r} was written by a training on other data, with other "
                f"batches or other trained parameters ({'; '.join(differ)}): resume with the "
                "data, the model and the options the training started with"
            )
    if save_steps is not None:
        training_args["save_steps"] = save_steps  # save_strategy "steps" then
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
        callbacks=[saving, *callbacks],
    )
    if not progress:
        trainer.remove_callback(PrinterCallback)  # no log lines either
    result = TrainResult(
        model=model, trainer=trainer, calibration_note=calibration_note, resumed_step=resumed_step
    )
    if calibration_ds is not None:
        result.calibration_size = len(calibration_ds)  # type: ignore[arg-type]
        result.calibration_data = calibration_ds
    before = torch.get_num_threads()
    choice = fit_threads(threads)
    if choice.first:
        logger.warning(choice.sentence("train(threads=N) chooses another number"))
    try:
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
            readout_rows = _readout_rows(train_ds, seed)
            result.readout_data = readout_rows
            result.readouts = _solve(model, tokenizer, readout_rows, args)
            if cross and result.readouts is not None:
                result.calibration = cross_calibrate(
                    _unwrap(model),
                    tokenizer,
                    readout_rows,
                    result.readouts,
                    seed=seed,
                    batch_size=args.per_device_eval_batch_size,
                )
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
    finally:
        torch.set_num_threads(before)
    return result
