r"""The step budget chosen on rows held out of training: keep the network that reads them best.

On a small table the network keeps fitting its training rows long after it stops predicting new
ones (on a 72-row table, the held-out median absolute error after 100 steps was a quarter of the
one after 1000), while on a larger or less regular table every step helps. Which holds is a
property of the data, so it is measured: :class:`StepChoiceCallback` holds a share of the training
rows out of training (the *validation rows*, :func:`validation_share`), and at ten evenly spaced
steps (:func:`choice_steps`) solves the readouts on the training rows
(:func:`~cauchylin_hf.readouts.solve_readouts`) and scores the validation rows: the median
absolute error of each validation text's last number (its target in a table) in its own units,
read by those readouts. At the end of training the trainable parameters of the best step
are put back. The readouts that the model keeps are then solved on the training rows and the
validation rows together; the rows held out to calibrate on are neither trained on nor used to
choose, so the conformal widths keep their guarantee.

The score at a step is what the final model is judged by (the solved readout on the features of
that step), not the training loss or the shared head's error: the shared head keeps improving on
the training rows while the readouts on the features get worse.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from torch.utils.data import Dataset
from transformers import TrainerCallback, TrainingArguments
from transformers.trainer_callback import TrainerControl, TrainerState

from cauchylin._validation import auto_or_share
from cauchylin.value_space import from_value_space

from .data.sampling import sample_rows
from .predict import exact_median
from .readouts import number_features, solve_readouts
from .resume_checks import inner_model
from .tokenizer import NumericTokenizer
from .trainer_checkpoints import CHECKPOINT_PREFIX

__all__ = [
    "CHOICES",
    "CHOICE_FILE",
    "CHOICE_WEIGHTS_FILE",
    "MAX_SCORED_ROWS",
    "MIN_VALIDATION_ROWS",
    "VALIDATION_FRACTION",
    "StepChoice",
    "StepChoiceCallback",
    "choice_steps",
    "validation_share",
    "validation_size",
]

CHOICE_FILE = "step_choice.json"
"""The file in every checkpoint holding the scores so far and the step chosen so far."""

CHOICE_WEIGHTS_FILE = "step_choice.safetensors"
"""The file in every checkpoint holding the trainable parameters of the step chosen so far."""

VALIDATION_FRACTION = 0.15
"""The share of the training rows (after the calibration hold-out) that ``step_choice="auto"``
holds out to choose the step on."""

MIN_VALIDATION_ROWS = 8
"""The fewest validation rows ``"auto"`` holds out (fewer training rows than this share needs:
no choice, the last step is kept)."""

CHOICES = 10
"""How many evenly spaced steps are scored (the last step among them)."""

MAX_SCORED_ROWS = 2000
"""The most training rows a step's readouts are solved on, and the most validation rows scored
(a seeded random sample of larger sets): a choice costs a few forward passes, not an epoch."""


def validation_share(rows: int, step_choice: float | str | None) -> float:
    """The share of ``rows`` training rows held out to choose the step on (0: none).

    ``"auto"``: :data:`VALIDATION_FRACTION` when that is at least :data:`MIN_VALIDATION_ROWS`
    rows, else 0; a share in ``(0, 1)``: that share; None or 0: none.

    Raises:
        ValueError: another string, or a share outside ``[0, 1)`` (naming ``step_choice``).

    Example:
        >>> validation_share(400, "auto"), validation_share(40, "auto"), validation_share(40, 0.5)
        (0.15, 0.0, 0.5)
    """
    setting = auto_or_share("step_choice", step_choice)
    if setting is None:
        return 0.0
    if setting == "auto":
        return VALIDATION_FRACTION if rows * VALIDATION_FRACTION >= MIN_VALIDATION_ROWS else 0.0
    return float(setting)


def validation_size(rows: int, step_choice: float | str | None) -> int:
    """How many of ``rows`` training rows are held out to choose the step on: the share of
    :func:`validation_share`, rounded, at most :data:`MAX_SCORED_ROWS`.

    Example:
        >>> validation_size(400, "auto"), validation_size(40, "auto"), validation_size(10**6, 0.1)
        (60, 0, 2000)
    """
    return min(round(validation_share(rows, step_choice) * rows), MAX_SCORED_ROWS)


def choice_steps(max_steps: int, choices: int = CHOICES) -> list[int]:
    """The steps scored: ``choices`` evenly spaced ones ending at ``max_steps`` (each at least 1).

    Example:
        >>> choice_steps(1000)
        [100, 200, 300, 400, 500, 600, 700, 800, 900, 1000]
        >>> choice_steps(4)
        [1, 2, 3, 4]
    """
    if max_steps < 1:
        return []
    return sorted({max(1, round(max_steps * (k + 1) / choices)) for k in range(choices)})


@dataclass
class StepChoice:
    """What :class:`StepChoiceCallback` measured.

    Attributes:
        scores: ``{step: validation MdAE}`` at each scored step (the last number of each
            validation text, in its own units; ``nan`` where nothing could be scored).
        chosen: the step whose parameters the model keeps (None before training ends).
        validation_rows: how many rows were held out to choose on.
    """

    scores: dict[int, float] = field(default_factory=dict)
    chosen: int | None = None
    validation_rows: int = 0

    def sentence(self, max_steps: int) -> str:
        """One line for a log: which step was kept, and why (empty before a choice).

        Example:
            >>> StepChoice({100: 4.0, 200: 5.0}, chosen=100, validation_rows=9).sentence(200)
            'kept step 100 of 200: of 2 steps scored, it read the last numbers of the 9 rows held out of training best (median absolute error 4, against 5 at the last step)'
        """
        if self.chosen is None or not self.scores:
            return ""
        best = self.scores[self.chosen]
        last = self.scores.get(max(self.scores), math.nan)
        start = (
            f"of {len(self.scores)} steps scored, it read the last numbers of the "
            f"{self.validation_rows} rows held out of training best (median absolute error "
            f"{best:.4g}"
        )
        if self.chosen == max(self.scores):
            return f"kept the last step ({self.chosen}): {start})"
        return (
            f"kept step {self.chosen} of {max_steps}: {start}, against {last:.4g} at the last step)"
        )


def _last_number_errors(model: Any, tokenizer: NumericTokenizer, data: Dataset) -> torch.Tensor:
    """``|y - median|`` of each text's last number in its own units, read with the model's
    current readouts."""
    feats = number_features(model, tokenizer, data)
    if len(feats) == 0:
        return torch.zeros(0, dtype=torch.float64)
    index = feats.text_index
    last = torch.ones_like(index, dtype=torch.bool)
    last[:-1] = index[1:] != index[:-1]  # numbers come in text order, position order within
    space = model.config.value_space
    true = from_value_space(feats.targets[last], space)
    return (true - from_value_space(feats.loc_y[last], space)).abs()


def _subset(data: Dataset, limit: int, seed: int) -> Dataset:
    rows = sample_rows(len(data), limit, seed)  # type: ignore[arg-type]
    return data if rows is None else torch.utils.data.Subset(data, rows)


class StepChoiceCallback(TrainerCallback):
    """Score the network at :func:`choice_steps` on the validation rows and keep the best.

    At each scored step it solves the readouts on (a sample of at most :data:`MAX_SCORED_ROWS
    of) ``train_rows``, reads the validation rows' last numbers with them and records the
    median absolute error; the trainable parameters of the best step so far are copied to the
    CPU. At the end of training they are put back (a tie keeps the later step). The readouts
    solved while scoring are left in the model: solve them again after training (the
    :class:`~cauchylin_hf.trainer.CauchyTrainer` does).

    Every checkpoint gets the scores so far and the best step's parameters
    (:data:`CHOICE_FILE`, :data:`CHOICE_WEIGHTS_FILE`), so that a run resumed from it
    (:meth:`resume_from`) keeps the network an uninterrupted run keeps.

    Args:
        model: the model being trained (a PEFT model or a ``CauchyLMForCausalLM``).
        tokenizer: its numeric tokenizer.
        train_rows: the encoded training rows (the readouts are solved on them).
        validation_rows: the encoded rows held out of training to choose on.
        seed: seed of the samples.
        batch_size: texts per forward pass while scoring.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: NumericTokenizer,
        train_rows: Dataset,
        validation_rows: Dataset,
        *,
        seed: int = 0,
        batch_size: int = 32,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.train_rows = _subset(train_rows, MAX_SCORED_ROWS, seed)
        self.validation_rows = _subset(validation_rows, MAX_SCORED_ROWS, seed + 1)
        self.seed = seed
        self.batch_size = batch_size
        self.choice = StepChoice(validation_rows=len(validation_rows))  # type: ignore[arg-type]
        self.steps: set[int] = set()
        self._best: dict[str, torch.Tensor] | None = None
        self._best_score = math.inf

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.steps = set(choice_steps(int(state.max_steps)))

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if state.global_step not in self.steps:
            return
        score = self.score()
        self.choice.scores[state.global_step] = score
        if score <= self._best_score:  # a tie keeps the later step (more training, same error)
            self._best_score = score
            self.choice.chosen = state.global_step
            self._best = {
                name: p.detach().to("cpu", copy=True)
                for name, p in self.model.named_parameters()
                if p.requires_grad
            }

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self._best is None or self.choice.chosen == state.global_step:
            return
        with torch.no_grad():
            for name, p in self.model.named_parameters():
                if name in self._best:
                    p.copy_(self._best[name].to(p.device))
        self._best = None

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Write the scores and the best step's parameters into the checkpoint just saved, so
        that a run resumed from it chooses among every step, those before it included."""
        folder = Path(args.output_dir or ".") / f"{CHECKPOINT_PREFIX}-{state.global_step}"
        if not state.is_world_process_zero or not folder.is_dir():
            return
        scores = {str(k): v for k, v in self.choice.scores.items()}
        record = {"scores": scores, "chosen": self.choice.chosen}
        tensors = {} if self._best is None else {k: v.contiguous() for k, v in self._best.items()}
        for name, write in (
            (CHOICE_WEIGHTS_FILE, lambda path: save_file(tensors, str(path))),
            (CHOICE_FILE, lambda path: path.write_text(json.dumps(record) + "\n", "utf-8")),
        ):
            temporary = folder / f".{name}.tmp"
            write(temporary)
            os.replace(temporary, folder / name)

    def resume_from(self, checkpoint: str | os.PathLike[str]) -> None:
        """Take up the scores and the best parameters a checkpoint holds (none: a checkpoint of
        a run that chose nothing yet, or written before a choice was made, scores from here)."""
        folder = Path(checkpoint)
        if not (folder / CHOICE_FILE).is_file() or not (folder / CHOICE_WEIGHTS_FILE).is_file():
            return
        record = json.loads((folder / CHOICE_FILE).read_text("utf-8"))
        self.choice.scores = {int(k): float(v) for k, v in record["scores"].items()}
        self.choice.chosen = record["chosen"]
        best = load_file(str(folder / CHOICE_WEIGHTS_FILE))
        self._best = best or None
        if self.choice.chosen is not None:
            self._best_score = self.choice.scores[self.choice.chosen]

    @torch.no_grad()
    def score(self) -> float:
        """The validation rows' median absolute error with readouts solved now (``nan``: none
        could be read, or the solve failed)."""
        inner = inner_model(self.model)
        try:
            solve_readouts(
                inner, self.tokenizer, self.train_rows, seed=self.seed, batch_size=self.batch_size
            )
        except ValueError:  # too few numbers of any context: the shared head reads them
            pass
        errors = _last_number_errors(inner, self.tokenizer, self.validation_rows)
        finite = errors[torch.isfinite(errors)]
        return exact_median(finite.numpy()) if finite.numel() else math.nan
