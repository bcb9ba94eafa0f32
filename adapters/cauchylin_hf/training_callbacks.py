"""The callbacks of a training: the loss parts in the logs, the files of every checkpoint.

* :class:`LossPartsCallback` records both loss parts (``cls_loss``, ``reg_loss``) per logging
  step, averaged over the micro-batches of the step and over data-parallel ranks exactly as the
  Trainer averages ``loss``, and adds them to the Trainer's logs (progress bar, ``log_history``).
* :class:`CheckpointFilesCallback` writes the tokenizer and other files into every checkpoint,
  records the digests of its weights and keeps the newest checkpoints.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import TrainerCallback, TrainingArguments
from transformers.trainer_callback import TrainerControl, TrainerState

from .atomic_save import share_with_umask
from .save_and_load import is_checkpoint_file
from .tokenizer import NumericTokenizer
from .trainer_checkpoints import (
    CHECKPOINT_PREFIX,
    DIGESTS_FILE,
    OPTIMIZER_FILES,
    TRAINER_STATE_FILE,
    record_digests,
    rotate_checkpoints,
)

__all__ = ["LOSS_PARTS", "CheckpointFilesCallback", "LossPartsCallback"]

LOSS_PARTS = ("cls_loss", "reg_loss")
"""The loss parts of the model's output that :class:`LossPartsCallback` records."""

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
    attached when the Trainer is built or when training starts. :func:`~cauchylin_hf.training.make_trainer` adds one.
    Its ``on_*`` events take the arguments of every ``transformers.TrainerCallback`` event.

    Attributes:
        history: one dict per training log: ``step``, ``epoch``, ``loss`` (the Trainer's),
            ``cls_loss``, ``reg_loss``, ``learning_rate`` and ``grad_norm`` when logged.
        eval_history: one dict per evaluation: ``step``, ``eval_loss``, ``eval_cls_loss``,
            ``eval_reg_loss``.

    Example:
        >>> import tempfile
        >>> from transformers import PrinterCallback, Trainer
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
        >>> model, ntok = CauchyLMForCausalLM.from_base(
        ...     tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True)
        >>> from cauchylin_hf.data import NumericDataCollator, NumericDataset
        >>> from cauchylin_hf.training import make_training_arguments
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
            >>> from cauchylin_hf.training_args import make_training_arguments
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
            >>> from cauchylin_hf.training_args import make_training_arguments
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
