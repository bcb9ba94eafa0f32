r"""The step budget chosen on rows held out of training.

On a small table the network keeps fitting its training rows long after it stops predicting new
ones (on a 72-row table, the held-out median absolute error after 100 steps was a quarter of the
one after 1000), while on a larger or less regular table every step helps. Which holds is a
property of the data, so it is measured: :class:`StepChoiceCallback` holds a share of the training
rows out of training (the *validation rows*, :func:`validation_share`), and at ten evenly spaced
steps (:func:`choice_steps`) solves the readouts on the training rows
(:func:`~cauchylin_hf.readouts.solve_readouts`) and scores the validation rows: the median
absolute error of each validation text's last number (its target in a table) in its own units,
read by those readouts, with its standard error (:func:`median_and_spread`). The step kept is
the latest within one standard error of the best (:class:`StepChoice`); at the end of training
its trainable parameters are put back. The readouts that the model keeps are then solved on the
training rows and the validation rows together; the rows held out to calibrate on are neither
trained on nor used to choose, so the conformal widths keep their guarantee.

The score at a step is what the final model is judged by (the solved readout on the features of
that step), not the training loss: the loss keeps falling on the training rows while the
readouts on the features read new rows worse. It reads the numbers alone, so it suits texts
whose numbers are what they are for (a table's rows); on free text the words matter as much.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from torch.utils.data import Dataset
from transformers import TrainerCallback, TrainingArguments
from transformers.trainer_callback import TrainerControl, TrainerState

from cauchylin._validation import auto_or_share
from cauchylin.value_space import from_value_space

from .holdout import readout_rows
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
    "Score",
    "StepChoice",
    "StepChoiceCallback",
    "choice_steps",
    "median_and_spread",
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


class Score(NamedTuple):
    """A step's score: the validation rows' median absolute error and its standard error."""

    mdae: float
    spread: float


def median_and_spread(errors: torch.Tensor) -> Score:
    """The median of ``errors`` and its distribution-free standard error.

    The standard error is half the distance between the sorted errors at the positions
    ``(n - 1)/2 - sqrt(n)/2`` and ``(n - 1)/2 + sqrt(n)/2`` (0-based, linearly interpolated,
    clamped to the sample): the rank of a sample median has a standard deviation of
    ``sqrt(n)/2`` whatever the law of the errors.

    Example:
        >>> median_and_spread(torch.arange(1.0, 101.0))
        Score(mdae=50.5, spread=5.0)
    """
    n = int(errors.numel())
    if n == 0:
        return Score(math.nan, math.nan)
    ordered = errors.double().sort().values

    def at(position: float) -> float:
        position = min(max(position, 0.0), n - 1.0)
        a = math.floor(position)
        b = min(a + 1, n - 1)
        return float(ordered[a] + (position - a) * (ordered[b] - ordered[a]))

    middle, half = (n - 1) / 2, math.sqrt(n) / 2
    return Score(exact_median(ordered.numpy()), 0.5 * (at(middle + half) - at(middle - half)))


@dataclass
class StepChoice:
    """What :class:`StepChoiceCallback` measured, and the step it kept.

    The step kept is the latest scored step whose score is within one standard error of the
    least score (the one-standard-error rule, read towards more training): a small validation
    set cannot tell apart steps closer than that, and of those the later network has also
    learnt the text's words longer.

    Attributes:
        scores: ``{step: validation MdAE}`` at each scored step (the last number of each
            validation text, in its own units; ``nan`` where nothing could be scored).
        spreads: ``{step: its standard error}`` (:func:`median_and_spread`).
        chosen: the step whose parameters the model keeps (None before a step is scored).
        validation_rows: how many rows were held out to choose on.
    """

    scores: dict[int, float] = field(default_factory=dict)
    spreads: dict[int, float] = field(default_factory=dict)
    chosen: int | None = None
    validation_rows: int = 0

    def best(self) -> int | None:
        """The step of the least score (the later of a tie); None before one is scored."""
        finite = [k for k, v in self.scores.items() if math.isfinite(v)]
        return min(finite, key=lambda k: (self.scores[k], -k)) if finite else None

    def add(self, step: int, score: Score) -> bool:
        """Record ``step``'s score; whether it is the step to keep now."""
        self.scores[step], self.spreads[step] = score.mdae, score.spread
        best = self.best()
        if best is None or not math.isfinite(score.mdae):
            return False
        band = self.scores[best] + (self.spreads[best] if math.isfinite(self.spreads[best]) else 0)
        if score.mdae <= band:  # the latest step within the band of the best so far
            self.chosen = step
            return True
        return False

    def sentence(self, max_steps: int) -> str:
        """One line for a log: which step was kept, and why (empty before a choice).

        Example:
            >>> c = StepChoice(validation_rows=9)
            >>> [c.add(k, Score(v, 0.5)) for k, v in ((100, 3.0), (200, 3.4), (300, 5.0))]
            [True, True, False]
            >>> c.sentence(300)
            'kept step 200 of 300: the latest of 3 scored steps within a standard error of the best at reading the last numbers of the 9 rows held out of training (median absolute error 3.4; the best 3 ± 0.5 at step 100; 5 at the last step)'
        """
        best = self.best()
        if self.chosen is None or best is None:
            return ""
        last = max(self.scores)
        error = f"median absolute error {self.scores[self.chosen]:.4g}"
        if best != self.chosen:
            error += f"; the best {self.scores[best]:.4g} ± {self.spreads[best]:.2g} at step {best}"
        if last != self.chosen:
            error += f"; {self.scores[last]:.4g} at the last step"
        kept = "the last step" if self.chosen == last else f"step {self.chosen} of {max_steps}"
        return (
            f"kept {kept}: the latest of {len(self.scores)} scored steps within a standard "
            "error of the best at reading the last numbers of the "
            f"{self.validation_rows} rows held out of training ({error})"
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


class StepChoiceCallback(TrainerCallback):
    """Score the network at :func:`choice_steps` on the validation rows and keep the best.

    At each scored step it solves the readouts on (a sample of at most :data:`MAX_SCORED_ROWS
    of) ``train_rows``, reads the validation rows' last numbers with them and records the
    median absolute error with its standard error; the trainable parameters of the step to keep
    so far (:class:`StepChoice`: the latest within a standard error of the best) are copied to
    the CPU. At the end of training they are put back. The readouts
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
        # the same sampling rule as the readouts' rows (holdout.readout_rows), at a smaller limit
        self.train_rows = readout_rows(train_rows, seed, MAX_SCORED_ROWS)
        self.validation_rows = readout_rows(validation_rows, seed + 1, MAX_SCORED_ROWS)
        self.seed = seed
        self.batch_size = batch_size
        self.choice = StepChoice(validation_rows=len(validation_rows))  # type: ignore[arg-type]
        self.steps: set[int] = set()
        self._best: dict[str, torch.Tensor] | None = None

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.steps = set(choice_steps(int(state.max_steps)))

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if state.global_step not in self.steps:
            return
        if self.choice.add(state.global_step, self.score()):
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
        record = {
            "scores": {str(k): v for k, v in self.choice.scores.items()},
            "spreads": {str(k): v for k, v in self.choice.spreads.items()},
            "chosen": self.choice.chosen,
        }
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
        self.choice.spreads = {int(k): float(v) for k, v in record["spreads"].items()}
        self.choice.chosen = record["chosen"]
        self._best = load_file(str(folder / CHOICE_WEIGHTS_FILE)) or None

    @torch.no_grad()
    def score(self) -> Score:
        """The validation rows' median absolute error with readouts solved now, and its
        standard error (``nan``: none could be read)."""
        inner = inner_model(self.model)
        try:
            solve_readouts(
                inner, self.tokenizer, self.train_rows, seed=self.seed, batch_size=self.batch_size
            )
        except ValueError:  # too few numbers of any context: the shared head reads them
            pass
        errors = _last_number_errors(inner, self.tokenizer, self.validation_rows)
        finite = errors[torch.isfinite(errors)]
        return median_and_spread(finite)
