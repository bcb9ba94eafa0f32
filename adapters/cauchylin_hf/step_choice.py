r"""The step budget chosen on rows held out of training, then trained on every row.

On a small table the network keeps fitting its training rows long after it stops predicting new
ones (on a 72-row table, the held-out median absolute error after 100 steps was a quarter of the
one after 1000), while on a larger or less regular table every step helps. Which holds is a
property of the data, so it is measured, in two runs of the same schedule:

1. *Choosing.* :class:`StepChoiceCallback` holds a share of the training rows out of training
   (the *validation rows*, :func:`validation_share`), and at ten evenly spaced steps
   (:func:`choice_steps`) solves the readouts on the training rows
   (:func:`~cauchylin_hf.readouts.solve_readouts`) and scores the validation rows: the median
   absolute error of each validation text's last number (its target in a table) in its own
   units, read by those readouts, with its standard error (:func:`median_and_spread`). The step
   chosen is the latest within one standard error of the best (:class:`StepChoice`).
2. *Training again.* The network is put back to the parameters it started from
   (:meth:`StepChoiceCallback.restore_start`) and trained again, with the same seed and the same
   learning-rate schedule, on every training row (the validation rows included), stopping at
   the chosen step (:class:`StopAtStep`). Where the chosen step is the last, the result is the
   network a run without the choice trains; the rows held out to choose on cost no data.

The readouts that the model keeps are then solved on every training row; the rows held out to
calibrate on are neither trained on nor used to choose, so the conformal widths keep their
guarantee. The choice costs the first run and the second run's steps: at most twice the steps.

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
    "StopAtStep",
    "choice_steps",
    "median_and_spread",
    "validation_share",
    "validation_size",
]

CHOICE_FILE = "step_choice.json"
"""The file in every checkpoint holding the scores so far and the step chosen so far."""

CHOICE_WEIGHTS_FILE = "step_choice.safetensors"
"""The file in every checkpoint holding the trainable parameters the run started from (the
second run starts from them again)."""

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
        chosen: the step the second run stops at (None before a step is scored).
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

    def sentence(self) -> str:
        """One line for a log: the step chosen, and why (empty before a choice).

        Example:
            >>> c = StepChoice(validation_rows=9)
            >>> [c.add(k, Score(v, 0.5)) for k, v in ((100, 3.0), (200, 3.4), (300, 5.0))]
            [True, True, False]
            >>> c.sentence()
            'trained again on every row for 200 of 300 steps: the latest of 3 scored steps within a standard error of the best at reading the last numbers of the 9 rows held out (median absolute error 3.4; the best 3 ± 0.5 at step 100; 5 at the last step)'
        """
        best = self.best()
        if self.chosen is None or best is None:
            return ""
        last = max(self.scores)  # the last step of the schedule is always scored
        error = f"median absolute error {self.scores[self.chosen]:.4g}"
        if best != self.chosen:
            error += f"; the best {self.scores[best]:.4g} ± {self.spreads[best]:.2g} at step {best}"
        if last != self.chosen:
            error += f"; {self.scores[last]:.4g} at the last step"
        return (
            f"trained again on every row for {self.chosen} of {last} steps: the latest of "
            f"{len(self.scores)} scored steps within a standard error of the best at reading the "
            f"last numbers of the {self.validation_rows} rows held out ({error})"
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
    """Score the network at :func:`choice_steps` on the validation rows and choose a step.

    At each scored step it solves the readouts on (a sample of at most :data:`MAX_SCORED_ROWS
    of) ``train_rows``, reads the validation rows' last numbers with them and records the
    median absolute error with its standard error (:class:`StepChoice`: the step chosen is the
    latest within a standard error of the best). It keeps a CPU copy of the trainable
    parameters the run started from, for :meth:`restore_start`. The readouts solved while
    scoring are left in the model: solve them again after training (the
    :class:`~cauchylin_hf.trainer.CauchyTrainer` does, after training again on every row).

    Every checkpoint gets the scores so far and the starting parameters (:data:`CHOICE_FILE`,
    :data:`CHOICE_WEIGHTS_FILE`), so that a run resumed from it (:meth:`resume_from`) chooses
    what an uninterrupted run chooses and starts its second run from the same parameters.

    Args:
        model: the model being trained (a PEFT model or a ``CauchyLMForCausalLM``), as it
            starts.
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
        self._start = {
            name: p.detach().to("cpu", copy=True)
            for name, p in model.named_parameters()
            if p.requires_grad
        }

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.steps = set(choice_steps(int(state.max_steps)))

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if state.global_step in self.steps:
            self.choice.add(state.global_step, self.score())

    def restore_start(self) -> None:
        """Put the trainable parameters back to those the run started from."""
        with torch.no_grad():
            for name, p in self.model.named_parameters():
                if name in self._start:
                    p.copy_(self._start[name].to(p.device))

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Write the scores and the starting parameters into the checkpoint just saved, so that
        a run resumed from it chooses among every step, those before it included."""
        folder = Path(args.output_dir or ".") / f"{CHECKPOINT_PREFIX}-{state.global_step}"
        if not state.is_world_process_zero or not folder.is_dir():
            return
        record = {
            "scores": {str(k): v for k, v in self.choice.scores.items()},
            "spreads": {str(k): v for k, v in self.choice.spreads.items()},
            "chosen": self.choice.chosen,
        }
        tensors = {k: v.contiguous() for k, v in self._start.items()}
        for name, write in (
            (CHOICE_WEIGHTS_FILE, lambda path: save_file(tensors, str(path))),
            (CHOICE_FILE, lambda path: path.write_text(json.dumps(record) + "\n", "utf-8")),
        ):
            temporary = folder / f".{name}.tmp"
            write(temporary)
            os.replace(temporary, folder / name)

    def resume_from(self, checkpoint: str | os.PathLike[str]) -> None:
        """Take up the scores and the starting parameters a checkpoint holds (a checkpoint
        without them: a run that scored nothing yet, with the model given as its start)."""
        folder = Path(checkpoint)
        if not (folder / CHOICE_FILE).is_file() or not (folder / CHOICE_WEIGHTS_FILE).is_file():
            return
        record = json.loads((folder / CHOICE_FILE).read_text("utf-8"))
        self.choice.scores = {int(k): float(v) for k, v in record["scores"].items()}
        self.choice.spreads = {int(k): float(v) for k, v in record["spreads"].items()}
        self.choice.chosen = record["chosen"]
        start = load_file(str(folder / CHOICE_WEIGHTS_FILE))
        if set(start) != set(self._start):
            raise ValueError(
                f"checkpoint {str(checkpoint)!r} holds the starting values of other trainable "
                "parameters than the model's: resume with the model the training started with"
            )
        self._start = start

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


class StopAtStep(TrainerCallback):
    """Stop training at ``step`` (the schedule stays that of ``max_steps``) and save nothing.

    The second run of a step choice: it follows the first run's learning-rate schedule to the
    chosen step; its network is saved at the end, so it writes no checkpoints of its own.
    """

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        control.should_save = False
        if state.global_step >= self.step:
            control.should_training_stop = True
