"""The ``Trainer`` of the causal language model, and the one that also reads its numbers out.

* :class:`CausalTrainer`: a ``transformers.Trainer`` with the
  :class:`~cauchylin_hf.data.NumericDataCollator`, a
  :class:`~cauchylin_hf.training_callbacks.LossPartsCallback` (``trainer.loss_parts``), the
  classification head's parameters in optimizer groups of their own, and the model's loss taken
  as a per-micro-batch mean.
* :class:`CauchyTrainer`: a :class:`CausalTrainer` that owns a whole training, as TRL's
  ``SFTTrainer`` owns its data preparation: it encodes texts, files or datasets, holds texts out
  of training to calibrate on, checks a checkpoint before resuming from it, and after
  ``train()`` solves a readout per context and calibrates the intervals
  (:mod:`cauchylin_hf.readouts`). Its options are the fields of
  :class:`~cauchylin_hf.training_args.CauchyTrainingArguments`;
  :func:`cauchylin_hf.training.train` is a short wrapper over it.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import ConcatDataset, Dataset
from transformers import Trainer, TrainerCallback, TrainingArguments, set_seed

from cauchylin.conformal import calibration_holdout

from .data import NumericDataCollator
from .data.streaming import CopiesOfOneText, LazyNumericDataset, as_numeric_dataset
from .hf_compat import progress_bars
from .holdout import (
    HOLDOUT_FILE,
    DataSource,
    calibration_split,
    check_resumed_holdout,
    holdout_record,
    readout_rows,
    run_record,
)
from .readouts import CalibrationReport, ReadoutReport, calibrate, cross_calibrate, solve_readouts
from .resume_checks import check_resume, inner_model
from .step_choice import StepChoiceCallback, StopAtStep, validation_size
from .threads import fit_threads
from .tokenizer import NumericTokenizer
from .trainer_checkpoints import (
    CheckpointError,
    read_run_record,
    resolve_resume_checkpoint,
    run_differences,
)
from .training_args import CauchyTrainingArguments
from .training_callbacks import CheckpointFilesCallback, LossPartsCallback

__all__ = ["CauchyTrainer", "CausalTrainer", "fitted_threads"]

logger = logging.getLogger("cauchylin_hf.training")  # the warnings train() has always given


@contextmanager
def fitted_threads(threads: int | None) -> Iterator[None]:
    """torch's CPU threads set to ``threads`` (None: no more than the free cores,
    :func:`~cauchylin_hf.threads.fit_threads`; a lowered count is logged once), restored after."""
    before = torch.get_num_threads()
    choice = fit_threads(threads)
    if choice.first:
        logger.warning(choice.sentence("train(threads=N) chooses another number"))
    try:
        yield
    finally:
        torch.set_num_threads(before)


class CausalTrainer(Trainer):
    """A ``Trainer`` set up for the causal language model.

    The collator is a :class:`~cauchylin_hf.data.NumericDataCollator` (right padding) unless one
    is given; a :class:`~cauchylin_hf.training_callbacks.LossPartsCallback` records the loss
    parts (``trainer.loss_parts``). The optimizer is the Trainer's own (``args.optim``), with
    the classification head's parameters in groups of their own at
    ``config.classifier_lr_scale`` times the learning rate; the scheduler then scales every
    group alike. When the model does not declare ``accepts_loss_kwargs`` the Trainer is told
    its loss is a per-micro-batch mean (otherwise a ``forward`` with ``**kwargs`` would make the
    Trainer skip the division by the gradient accumulation steps and multiply the loss by the
    number of data-parallel ranks). ``processing_class`` is the
    :class:`~cauchylin_hf.tokenizer.NumericTokenizer`; :meth:`save_model` saves it beside the
    model (the checkpoints get it from
    :class:`~cauchylin_hf.training_callbacks.CheckpointFilesCallback`).

    Args:
        model: a ``CauchyLMForCausalLM`` (or a PEFT model wrapping one).
        args: the arguments; default :class:`CauchyTrainingArguments` ``()``.
        data_collator: the collator; default ``NumericDataCollator(processing_class)``.
        train_dataset: encoded training examples.
        eval_dataset: encoded evaluation examples.
        processing_class: the numeric tokenizer, or None with an explicit ``data_collator``.
        callbacks: more callbacks.
        **kwargs: the ``Trainer``'s other keywords.

    Raises:
        ValueError: for an empty dataset, or no tokenizer and no collator.
    """

    def __init__(
        self,
        model: nn.Module | None = None,
        args: TrainingArguments | None = None,
        data_collator: Callable[[list[Mapping[str, Any]]], dict[str, torch.Tensor]] | None = None,
        train_dataset: Dataset | None = None,
        eval_dataset: Dataset | None = None,
        processing_class: NumericTokenizer | None = None,
        callbacks: Sequence[TrainerCallback] | None = None,
        **kwargs: Any,
    ) -> None:
        for name, ds in (("train_dataset", train_dataset), ("eval_dataset", eval_dataset)):
            if ds is not None and hasattr(ds, "__len__") and len(ds) == 0:
                raise ValueError(f"{name} is empty: the dataset needs at least one example")
        if data_collator is None:
            if processing_class is None:
                raise ValueError("make_trainer needs a tokenizer or an explicit data_collator")
            data_collator = NumericDataCollator(processing_class, padding_side="right")
        self.numeric_tokenizer = processing_class
        self.loss_parts = LossPartsCallback()
        super().__init__(
            model=model,
            args=args if args is not None else CauchyTrainingArguments(),
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            callbacks=[self.loss_parts, *(callbacks or ())],
            **kwargs,
        )
        assert self.model is not None  # the Trainer refuses no model
        self.loss_parts.attach(self.model)
        if not hasattr(inner_model(self.model), "accepts_loss_kwargs"):
            self.model_accepts_loss_kwargs = False

    def create_optimizer(self, model: nn.Module | None = None) -> torch.optim.Optimizer:
        optimizer = super().create_optimizer(model)
        target = self.model if model is None else model
        assert target is not None  # the Trainer always has a model here
        inner = inner_model(target)
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

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """Save the model (the ``Trainer``'s way) and, outside a checkpoint, the tokenizer."""
        super().save_model(output_dir, _internal_call)
        if not _internal_call and self.numeric_tokenizer is not None:
            if self.is_world_process_zero():
                self.numeric_tokenizer.save_pretrained(str(output_dir or self.args.output_dir))


class CauchyTrainer(CausalTrainer):
    """A :class:`CausalTrainer` that holds texts out to calibrate on, and after training solves
    the readouts and calibrates the intervals: the whole of :func:`cauchylin_hf.training.train`
    but its evaluation and its final save.

    At construction it encodes ``train_dataset`` and ``eval_dataset`` (texts, a dataset file, a
    ``datasets`` dataset or an encoded dataset; :func:`~cauchylin_hf.data.streaming.as_numeric_dataset`,
    cut to ``args.max_length``), holds out ``args.calibration`` of the training texts (copies of
    one text on one side, drawn with ``args.seed`` or the last ones:
    :func:`~cauchylin_hf.holdout.calibration_split`), with ``args.step_choice`` a share of the
    rest held out of a first run to choose how many steps a second run on every row takes
    (:mod:`cauchylin_hf.step_choice`), and, with
    ``args.resume_from_checkpoint``,
    refuses a checkpoint that does not fit before any text is encoded. :meth:`train` trains (on
    ``args.threads`` CPU threads), then solves a readout per context on at most
    ``args.readout_rows`` training rows (``args.readouts``) and calibrates on the held-out texts
    (or, with ``"auto"`` and fewer than 100 texts, by cross-conformal widths). What it read and
    found is kept: :attr:`readouts`, :attr:`calibration`, :attr:`readout_data`,
    :attr:`calibration_dataset`, :attr:`calibration_note`, :attr:`resumed_step`,
    :attr:`validation_dataset`, :attr:`step_choice` (the
    :class:`~cauchylin_hf.step_choice.StepChoiceCallback`, or None) and
    :attr:`choosing_history` (the loss rows of a step choice's first run; the second run's are
    the ``loss_parts`` history).

    Checkpoints (``save_steps``) hold the tokenizer, the digests of the weights, the record of
    the held-out texts (:data:`~cauchylin_hf.holdout.HOLDOUT_FILE`) and of the run, and
    ``args.checkpoint_files``; ``args.save_total_limit`` keeps the newest complete ones (the
    rotation is :class:`~cauchylin_hf.training_callbacks.CheckpointFilesCallback`'s, so the
    ``Trainer`` is given no limit of its own).

    Args:
        model: a ``CauchyLMForCausalLM`` (or a PEFT model wrapping one).
        args: a :class:`~cauchylin_hf.training_args.CauchyTrainingArguments` (default: its
            defaults).
        train_dataset: the training data.
        eval_dataset: held-out data (evaluated during training with ``eval_strategy``).
        processing_class: the model's :class:`~cauchylin_hf.tokenizer.NumericTokenizer`.
        calibration_dataset: calibration texts of their own (nothing is held out then).
        callbacks: more callbacks.
        **kwargs: the ``Trainer``'s other keywords.

    Raises:
        ValueError: for arguments that are not ``CauchyTrainingArguments``, empty or missing
            training data, a bad ``calibration`` or ``calibration_split``; a ``CheckpointError``
            for a checkpoint the resume cannot use.

    Example:
        >>> import tempfile, torch
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
        >>> _ = torch.manual_seed(0)
        >>> model, ntok = CauchyLMForCausalLM.from_base(
        ...     tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True)
        >>> args = CauchyTrainingArguments(tempfile.mkdtemp(), max_steps=2, logging_steps=1,
        ...                                disable_tqdm=True)
        >>> texts = ["3 boxes of 12 eggs hold 36 eggs.", "2 boxes of 6 eggs hold 12 eggs."]
        >>> trainer = CauchyTrainer(model, args=args, train_dataset=texts, processing_class=ntok)
        >>> from transformers import PrinterCallback
        >>> trainer.remove_callback(PrinterCallback)  # no log lines
        >>> trainer.train().global_step, trainer.readouts is not None
        (2, True)
    """

    args: CauchyTrainingArguments

    def __init__(
        self,
        model: nn.Module | None = None,
        args: CauchyTrainingArguments | None = None,
        train_dataset: DataSource | None = None,
        eval_dataset: DataSource | None = None,
        processing_class: NumericTokenizer | None = None,
        *,
        calibration_dataset: DataSource | None = None,
        callbacks: Sequence[TrainerCallback] = (),
        **kwargs: Any,
    ) -> None:
        args = CauchyTrainingArguments() if args is None else args
        if not isinstance(args, CauchyTrainingArguments):
            raise ValueError(
                "args must be a CauchyTrainingArguments (it holds the hold-out's and the "
                f"readouts' options), got {type(args).__name__}"
            )
        if not isinstance(processing_class, NumericTokenizer):
            raise ValueError(
                f"tokenizer must be a cauchylin_hf.tokenizer.NumericTokenizer, got "
                f"{type(processing_class).__name__}"
            )
        assert model is not None  # checked by the Trainer too
        saving = CheckpointFilesCallback(
            processing_class, args.checkpoint_files, args.save_total_limit
        )
        self.resume_checkpoint = resolve_resume_checkpoint(
            args.resume_from_checkpoint, Path(args.output_dir or ".")
        )
        self.resumed_step: int | None = None
        if self.resume_checkpoint is not None:  # before any work: one that does not fit is refused
            self.resumed_step = check_resume(
                model, processing_class, self.resume_checkpoint, args.fresh_optimizer_state,
                "fresh_optimizer_state=True",
            )  # fmt: skip
        train_ds = self._hold_out(model, processing_class, args, train_dataset, calibration_dataset)
        eval_ds = None
        if eval_dataset is not None:
            eval_ds = as_numeric_dataset(
                eval_dataset, processing_class, name="eval_texts", max_length=args.max_length
            )
        if args.eval_strategy != "no" and eval_ds is None:
            raise ValueError("eval_steps needs eval_texts")
        saving.files = self._checkpoint_files(model, args, train_ds)
        if self.resume_checkpoint is not None:
            self._refuse_another_run(self.resume_checkpoint)
        own = copy.copy(args)
        own.save_total_limit = None  # the rotation is the callback's (complete checkpoints only)
        self.readouts: ReadoutReport | None = None
        self.calibration: CalibrationReport | None = None
        self.readout_data: Dataset | None = None
        self.train_runtime = 0.0
        super().__init__(
            model=model,
            args=own,
            train_dataset=train_ds,
            eval_dataset=eval_ds,
            processing_class=processing_class,
            callbacks=[saving, *callbacks],
            **kwargs,
        )
        self.step_choice: StepChoiceCallback | None = None
        if self.validation_dataset is not None:
            self.step_choice = StepChoiceCallback(
                model, processing_class, train_ds, self.validation_dataset, seed=args.seed,
                batch_size=args.per_device_eval_batch_size,
            )  # fmt: skip
            self.add_callback(self.step_choice)

    def _hold_out(
        self,
        model: nn.Module,
        tokenizer: NumericTokenizer,
        args: CauchyTrainingArguments,
        data: DataSource | None,
        given: DataSource | None,
    ) -> Dataset:
        """The training examples; sets :attr:`calibration_dataset`, :attr:`calibration_note`
        and the record of the held-out texts."""
        train_ds = None
        if data is not None:
            train_ds = as_numeric_dataset(
                data, tokenizer, name="train_texts", max_length=args.max_length
            )
        if train_ds is None:
            raise ValueError("train_texts is None: pass the training texts")
        try:
            rows = len(train_ds)  # type: ignore[arg-type]
        except TypeError:  # an iterable dataset: nothing of it is held out
            rows = 0
        if args.calibration_split not in ("random", "last"):
            raise ValueError(
                f'calibration_split must be "random" or "last", got {args.calibration_split!r}'
            )
        calibration = given if given is not None else args.calibration
        self.calibration_note = ""
        try:
            train_ds, held = calibration_split(
                train_ds, calibration, tokenizer, args.max_length, args.seed,
                last=args.calibration_split == "last",
            )  # fmt: skip
        except CopiesOfOneText as exc:  # nothing can be held out: train on it, calibrate nothing
            held, self.calibration_note = None, str(exc)
        else:
            share = calibration if isinstance(calibration, (str, int, float)) else None
            if held is None and share is not None and rows and calibration_holdout(rows, share):
                self.calibration_note = (
                    f"none of the {rows} training texts fell in the hold-out (they are copies of "
                    "a few distinct texts, and copies stay on one side): the intervals are not "
                    "calibrated"
                )
        self.calibration_dataset = held
        # the texts held out of training, recorded in every checkpoint and checked on resume
        self._holding = held is not None and isinstance(calibration, (str, int, float))
        self._holdout = holdout_record(rows, held if self._holding else None, args.seed)
        # fewer texts than a hold-out needs: cross-conformal widths from the training texts
        self._cross = calibration == "auto" and held is None and not self.calibration_note
        return self._hold_out_validation(model, tokenizer, args, train_ds)

    def _hold_out_validation(
        self,
        model: nn.Module,
        tokenizer: NumericTokenizer,
        args: CauchyTrainingArguments,
        train_ds: Dataset,
    ) -> Dataset:
        """The training examples less the ones held out to choose the step on
        (:mod:`cauchylin_hf.step_choice`); sets :attr:`validation_dataset`."""
        self.validation_dataset: Dataset | None = None
        self.choosing_history: list[dict[str, float]] = []
        numbers = getattr(inner_model(model).config, "num_token_id", None) is not None
        try:
            rows = len(train_ds)  # type: ignore[arg-type]
        except TypeError:  # a stream: nothing of it is held out
            rows = 0
        self._all_rows = train_ds  # the second run of a step choice trains on them all
        size = validation_size(rows, args.step_choice)  # checks the value first
        if size == 0 or not args.readouts or not numbers:
            return train_ds
        kept: Dataset
        held: Dataset | None
        try:
            if isinstance(train_ds, LazyNumericDataset):  # a table read by rows: a sample
                kept, held = train_ds.split_sample(size, args.seed + 1)
            else:  # copies of one text on one side
                kept, held = calibration_split(
                    train_ds, size / rows, tokenizer, args.max_length, args.seed + 1
                )
        except (CopiesOfOneText, ValueError):  # copies of one text, or too few to split
            return train_ds
        if held is None:
            return train_ds
        self.validation_dataset = held
        return kept

    def _checkpoint_files(
        self, model: nn.Module, args: CauchyTrainingArguments, train_ds: Dataset
    ) -> dict[str, str]:
        """The files of every checkpoint: ``args.checkpoint_files``, the run's record and the
        hold-out's."""
        batch = {
            "batch_size": args.per_device_train_batch_size,
            "gradient_accumulation_steps": args.gradient_accumulation_steps,
        }
        files, self._record = run_record(args.checkpoint_files, train_ds, model, batch)
        files[HOLDOUT_FILE] = json.dumps(self._holdout) + "\n"
        return files

    def _refuse_another_run(self, resume: str) -> None:
        """Refuse a checkpoint of a run that held out other texts, or trained on other data,
        batches or parameters."""
        if self._holding:  # the most specific reason first
            check_resumed_holdout(resume, self._holdout)
        differ = run_differences(read_run_record(resume) or {}, self._record)
        if differ:
            raise CheckpointError(
                f"checkpoint {resume!r} was written by a training on other data, with other "
                f"batches or other trained parameters ({'; '.join(differ)}): resume with the "
                "data, the model and the options the training started with"
            )

    def train(  # type: ignore[override]
        self, resume_from_checkpoint: bool | str | os.PathLike[str] | None = None, **kwargs: Any
    ) -> Any:
        """Train (the ``Trainer``'s loop), then solve the readouts and calibrate.

        Args:
            resume_from_checkpoint: a checkpoint to resume from (True: the latest in
                ``args.output_dir``), checked first; default ``args.resume_from_checkpoint``.
            **kwargs: the ``Trainer``'s other ``train`` keywords.

        Returns:
            The ``Trainer``'s ``TrainOutput``.
        """
        resume = self.resume_checkpoint
        if resume_from_checkpoint is not None:
            resume = resolve_resume_checkpoint(
                resume_from_checkpoint, Path(self.args.output_dir or ".")
            )
            if resume is not None and resume != self.resume_checkpoint:
                assert self.model is not None and self.numeric_tokenizer is not None
                self.resumed_step = check_resume(
                    self.model, self.numeric_tokenizer, resume, self.args.fresh_optimizer_state,
                    "fresh_optimizer_state=True",
                )  # fmt: skip
                self._refuse_another_run(resume)
        if resume is not None and self.step_choice is not None:
            self.step_choice.resume_from(resume)
        with fitted_threads(self.args.threads):
            start = time.perf_counter()
            with progress_bars(not self.args.disable_tqdm):
                out = super().train(resume_from_checkpoint=resume, **kwargs)
                if self.step_choice is not None:
                    out = self._train_again(out, **kwargs)
            self.train_runtime = time.perf_counter() - start
            self.read_numbers_out()
        return out

    def _train_again(self, first: Any, **kwargs: Any) -> Any:
        """The second run of a step choice: from the starting parameters, with the same seed
        and schedule, on every training row, stopped at the chosen step
        (:mod:`cauchylin_hf.step_choice`); the first run's loss rows move to
        :attr:`choosing_history`."""
        assert self.step_choice is not None
        steps = self.step_choice.choice.chosen or first.global_step  # nothing scored: the last
        self.choosing_history = self.loss_parts.history
        self.loss_parts.history = []
        self.step_choice.restore_start()
        self.train_dataset = self._all_rows  # the validation rows among them
        self.optimizer, self.lr_scheduler = None, None  # fresh, as a run of its own
        schedule = self.args.max_steps
        self.args.max_steps = int(self.state.max_steps)  # the first run's schedule
        stop = StopAtStep(steps)
        self.remove_callback(self.step_choice)
        self.add_callback(stop)
        set_seed(self.args.seed)  # the data order and draws of a run of its own
        try:
            return super().train(resume_from_checkpoint=None, **kwargs)
        finally:
            self.args.max_steps = schedule
            self.remove_callback(stop)
            self.add_callback(self.step_choice)

    def read_numbers_out(self) -> None:
        """Solve the readouts on the training rows (``args.readouts``) and calibrate on the
        held-out texts (a model without ``<NUM>``: neither); sets :attr:`readouts`,
        :attr:`calibration` and :attr:`readout_data`."""
        args, tokenizer = self.args, self.numeric_tokenizer
        assert self.model is not None and tokenizer is not None and self.train_dataset is not None
        inner = inner_model(self.model)
        numbers = getattr(inner.config, "num_token_id", None) is not None
        batch = args.per_device_eval_batch_size
        if args.readouts:
            rows: Dataset = self.train_dataset
            if self.validation_dataset is not None and rows is not self._all_rows:
                rows = ConcatDataset([rows, self.validation_dataset])  # not trained on (yet)
            self.readout_data = readout_rows(rows, args.seed, args.readout_rows)
            if numbers:
                self.readouts = solve_readouts(
                    inner, tokenizer, self.readout_data, batch_size=batch
                )
            if self._cross and self.readouts is not None:
                self.calibration = cross_calibrate(
                    inner, tokenizer, self.readout_data, self.readouts, seed=args.seed,
                    batch_size=batch,
                )  # fmt: skip
        if self.calibration_dataset is not None:
            self.calibration = None
            if numbers:
                self.calibration = calibrate(
                    inner, tokenizer, self.calibration_dataset, batch_size=batch
                )
