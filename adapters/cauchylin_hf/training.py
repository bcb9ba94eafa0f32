"""Train the causal language model with the Hugging Face ``Trainer``.

The work is :class:`~cauchylin_hf.trainer.CauchyTrainer`'s (a ``transformers.Trainer`` that also
holds texts out to calibrate on, solves the readouts and calibrates), with its arguments in
:class:`~cauchylin_hf.training_args.CauchyTrainingArguments`; this module adds the conveniences:

* :func:`train`: texts in, trained model, loss history and metrics out (the CLI and the demo call
  it): the arguments and the trainer built from keywords, held-out metrics before and after,
  the model and the tokenizer saved. Under ``torchrun`` / ``accelerate launch`` it trains
  data-parallel without changes.
* :func:`make_trainer`: a :class:`~cauchylin_hf.trainer.CausalTrainer` for encoded datasets.
* :func:`make_training_arguments`, :class:`LossPartsCallback`, :class:`CheckpointFilesCallback`,
  :data:`HOLDOUT_FILE`: from the modules that define them, named here too.

The loss the Trainer optimises is the model's ``loss`` (``cls_loss + lambda * reg_loss``), a mean
over counted positions of each micro-batch. Under data parallelism every rank computes that mean on
its own shard and the gradients are averaged over ranks, as for any HF causal LM.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset
from transformers import PrinterCallback, Trainer, TrainerCallback, TrainingArguments

from cauchylin._validation import finite_number, positive_int

from .evaluation import evaluate_model
from .hf_compat import progress_bars
from .holdout import HOLDOUT_FILE, DataSource
from .readouts import CalibrationReport, ReadoutReport
from .step_choice import StepChoice
from .tokenizer import NumericTokenizer
from .trainer import CauchyTrainer, CausalTrainer, fitted_threads
from .training_args import CauchyTrainingArguments, make_training_arguments
from .training_callbacks import CheckpointFilesCallback, LossPartsCallback
from .training_options import READOUT_ROWS

__all__ = [
    "HOLDOUT_FILE",
    "READOUT_ROWS",
    "CheckpointFilesCallback",
    "DataSource",
    "LossPartsCallback",
    "TrainResult",
    "make_trainer",
    "make_training_arguments",
    "train",
]


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
) -> CausalTrainer:
    """A :class:`~cauchylin_hf.trainer.CausalTrainer` for encoded datasets (no hold-out, no
    readouts: :class:`~cauchylin_hf.trainer.CauchyTrainer` does those).

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
        >>> from cauchylin_hf.data import NumericDataset
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
    return CausalTrainer(
        model=model,
        args=args,
        data_collator=data_collator,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        callbacks=callbacks,
    )


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
        step_choice: what choosing the step measured (the validation MdAE at each scored step
            of the first run and the step the second run stopped at:
            :class:`~cauchylin_hf.step_choice.StepChoice`), or None where no rows were held
            out to choose on (``step_choice``); :attr:`global_step` and :attr:`history` are
            then the second run's.

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
    step_choice: StepChoice | None = None

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

    def _take(self, trainer: CauchyTrainer, out: Any) -> None:
        """Fill the fields from ``trainer`` after its ``train()`` returned ``out``."""
        self.global_step = int(out.global_step)
        self.train_runtime = trainer.train_runtime
        self.history = list(trainer.loss_parts.history)
        self.eval_history = list(trainer.loss_parts.eval_history)
        self.readouts, self.calibration = trainer.readouts, trainer.calibration
        self.readout_data = trainer.readout_data
        self.calibration_data = trainer.calibration_dataset
        if trainer.calibration_dataset is not None:
            self.calibration_size = len(trainer.calibration_dataset)  # type: ignore[arg-type]
        self.calibration_note, self.resumed_step = trainer.calibration_note, trainer.resumed_step
        if trainer.step_choice is not None:
            self.step_choice = trainer.step_choice.choice


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

    A short wrapper: it builds :class:`~cauchylin_hf.training_args.CauchyTrainingArguments` from
    the keywords and a :class:`~cauchylin_hf.trainer.CauchyTrainer`, which encodes the texts
    (:class:`~cauchylin_hf.data.NumericDataset`), trains (the Trainer's tqdm progress bar unless
    ``progress=False``), records both loss parts per logging step, then reads the numbers out as well as the features allow and
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
    :meth:`~cauchylin_hf.data.streaming.LazyNumericDataset.split_held_out`), and the readouts are
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
            and encoded as it is read (:func:`~cauchylin_hf.data.streaming.as_numeric_dataset`; an
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
    options = {k: v for k, v in locals().items() if k in _OPTIONS}  # by their fields' names
    _check(tokenizer, batch_size, logging_steps, threads, save_steps, save_total_limit)
    finite_number("learning_rate", learning_rate)
    if eval_steps is not None:
        training_args.setdefault("eval_strategy", "steps")
    given = None if isinstance(calibration, (str, int, float, type(None))) else calibration
    options["learning_rate"] = float(learning_rate)
    options["calibration"] = calibration if given is None else None
    args = make_training_arguments(
        output_dir if checkpoint_dir is None else checkpoint_dir,
        **options,
        per_device_train_batch_size=batch_size,
        per_device_eval_batch_size=training_args.pop("per_device_eval_batch_size", batch_size),
        disable_tqdm=not progress,
        **training_args,
    )
    trainer = CauchyTrainer(
        model, args, train_texts, eval_texts, tokenizer, calibration_dataset=given,
        callbacks=callbacks,
    )  # fmt: skip
    if not progress:
        trainer.remove_callback(PrinterCallback)  # no log lines either
    result = TrainResult(model=model, trainer=trainer)
    eval_ds, batch = trainer.eval_dataset, args.per_device_eval_batch_size
    with fitted_threads(threads):
        if eval_before and evaluate and eval_ds is not None:
            result.initial_metrics = evaluate_model(model, tokenizer, eval_ds, batch_size=batch)
        result._take(trainer, trainer.train())
        if evaluate and eval_ds is not None:
            result.metrics = evaluate_model(model, tokenizer, eval_ds, batch_size=batch)
        if save:
            with progress_bars(progress):
                trainer.save_model(str(output_dir))
            result.output_dir = Path(output_dir)
    return result


_OPTIONS = frozenset(f.name for f in dataclasses.fields(CauchyTrainingArguments)) - {"output_dir"}
"""The parameters of :func:`train` that are fields of its arguments under the same name."""


def _check(
    tokenizer: Any,
    batch_size: int,
    logging_steps: int,
    threads: int | None,
    save_steps: int | None,
    save_total_limit: int | None,
) -> None:
    """The checks of :func:`train`'s arguments that name them (before any work)."""
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
