r"""Predict numbers: the next number after a prompt, and every number of a text, with intervals.

The regression head gives, at every position, ``Y ~ Cauchy(loc_Y, scale_Y)`` in the model's value
space ``t = g(y)`` (``config.value_space``, see :mod:`cauchylin.value_space`). The number that
follows has median ``g^{-1}(loc_Y)`` and exact central intervals
``g^{-1}(loc_Y ± scale_Y tan(pi c / 2))`` of coverage ``c`` (``c = 0.5``: ``loc_Y ± scale_Y``).

* :func:`predict_values` — the next number after each prompt (a prompt ends where the number
  would start, e.g. ``"..., area "``);
* :func:`number_predictions` — every number of each text, read in one teacher-forced pass (the
  prediction for a number only sees the text before it, so it equals :func:`predict_values` on
  that prefix), with the field each number belongs to (:func:`iter_number_predictions` a batch
  at a time; :class:`NumberReader` from the heads of a pass run elsewhere, such as
  ``evaluate_model``'s);
* :func:`number_metrics` — error, rank correlation and interval coverage of those predictions,
  for the target number of each text (the last one, or a named field) and per field;
* :func:`target_numbers` — the target number of each text, read from the text alone (e.g. the
  training targets, whose median is the baseline every model must beat);
* :func:`learning_check` — whether a model has learnt anything about the target: its median
  absolute error beside the training median's, and whether its predictions vary at all.

**Say when nothing was learnt.** A model that has not yet learnt to read the target predicts
about the same number for every text (typically near the training median). Its errors then look
plausible, and a rank correlation computed from tiny differences between near-equal predictions
can still be high. :func:`learning_check` compares the spread of the predictions (their
interquartile range) with the spread of the true targets: a ratio below ``min_spread`` (default
:data:`MIN_SPREAD`, 0.1) flags the predictions as flat. A model that predicts the target well
has a ratio near 1; one whose predictions explain only 1% of the targets' variance has about
0.1.
"""

from __future__ import annotations

import difflib
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from cauchylin.conformal import interval_score
from cauchylin.levels import REPORTED_LEVELS
from cauchylin.metrics import interval_coverage, ks_uniform, quantiles, rank_correlation
from cauchylin.nn.modes import STANDARD
from cauchylin.value_space import (
    from_value_space,
    value_cdf,
    value_log_density,
    value_quantiles,
)

from .data.sampling import UniformSample
from .generation import check_prompt_lengths, position_ids_from_mask
from .loss import before_numbers
from .numbers import field_of, find_numbers, number_fields
from .tokenizer import NumericTokenizer

__all__ = [
    "KEPT_VALUES",
    "MIN_SPREAD",
    "LearningCheck",
    "NumberMetrics",
    "NumberPredictions",
    "NumberReader",
    "ValuePrediction",
    "concat_number_predictions",
    "exact_median",
    "iter_number_predictions",
    "learning_check",
    "number_heads",
    "number_metrics",
    "number_predictions",
    "predict_values",
    "spearman_undefined",
    "target_numbers",
    "value_prediction",
]

MIN_SPREAD = 0.1
"""Predictions whose interquartile range is below this share of the true targets' are flat
(:func:`learning_check`)."""


def _sig(x: torch.Tensor | float) -> float:
    """A float to 7 significant digits (float32 precision), for printing and JSON."""
    return float(f"{float(x):.7g}")


def _check_levels(levels: Sequence[float]) -> tuple[float, ...]:
    out = tuple(float(c) for c in levels)
    if not out or any(not 0.0 < c < 1.0 for c in out):
        raise ValueError(f"levels must be coverages in (0, 1), got {levels!r}")
    return out


def _check_model(model: Any, tokenizer: Any) -> int:
    if not isinstance(tokenizer, NumericTokenizer):
        raise ValueError(
            f"tokenizer must be a cauchylin_hf.NumericTokenizer, got {type(tokenizer).__name__}"
        )
    num = getattr(getattr(model, "config", None), "num_token_id", None)
    if num is None:
        raise ValueError("the model has no <NUM> token (config.num_token_id is None)")
    return int(num)


@dataclass
class ValuePrediction:
    """The predicted next number of each prompt (or each number of a text), with intervals.

    Attributes:
        median: ``[N]`` the median number ``g^{-1}(loc_Y)``, in the numbers' units.
        loc: ``[N]`` ``loc_Y`` in the value space.
        scale: ``[N]`` ``scale_Y`` in the value space.
        p_num: ``[N]`` ``P(<NUM>)``, the one-vs-rest probability that a number comes next.
        levels: the coverages of the intervals.
        lower: ``[N, L]`` interval starts, one column per level.
        upper: ``[N, L]`` interval ends.
        value_space: the model's value space.
        calibrated: ``[N, L]`` bool: the interval is the split-conformal one
            (``g^{-1}(loc_Y ± q(c) scale_Y)``, :mod:`cauchylin_hf.readouts`) rather than the
            Cauchy one (``g^{-1}(loc_Y ± tan(pi c / 2) scale_Y)``). Default: all False.
        calibration_count: ``[N]`` how many held-out numbers the calibration of each row was
            fitted on (0: none). Default: zeros.

    Example:
        >>> import torch
        >>> p = ValuePrediction(torch.tensor([53.6]), torch.tensor([4.0]), torch.tensor([0.1]),
        ...                     torch.tensor([0.9]), (0.5,), torch.tensor([[48.4]]),
        ...                     torch.tensor([[59.3]]), "signed_log1p")
        >>> p.interval(0.5)
        (tensor([48.4000]), tensor([59.3000]))
        >>> p.rows()[0]["median"], p.rows()[0]["interval_50"], p.rows()[0]["calibrated_50"]
        (53.6, [48.4, 59.3], False)
    """

    median: torch.Tensor
    loc: torch.Tensor
    scale: torch.Tensor
    p_num: torch.Tensor
    levels: tuple[float, ...]
    lower: torch.Tensor
    upper: torch.Tensor
    value_space: str
    calibrated: torch.Tensor | None = None
    calibration_count: torch.Tensor | None = None

    def __post_init__(self) -> None:
        n = self.median.numel()
        if self.calibrated is None:
            self.calibrated = torch.zeros(n, len(self.levels), dtype=torch.bool)
        if self.calibration_count is None:
            self.calibration_count = torch.zeros(n, dtype=torch.long)

    def interval(self, level: float) -> tuple[torch.Tensor, torch.Tensor]:
        """The central interval of one of :attr:`levels`.

        Args:
            level: a coverage in :attr:`levels`.

        Returns:
            ``(lower [N], upper [N])``.

        Raises:
            ValueError: ``level`` is not one of :attr:`levels`.

        Example:
            >>> import torch
            >>> p = ValuePrediction(torch.tensor([5.0]), torch.tensor([5.0]), torch.tensor([1.0]),
            ...                     torch.tensor([0.5]), (0.5, 0.9), torch.tensor([[4.0, -1.3]]),
            ...                     torch.tensor([[6.0, 11.3]]), "identity")
            >>> p.interval(0.9)
            (tensor([-1.3000]), tensor([11.3000]))
        """
        for j, c in enumerate(self.levels):
            if math.isclose(c, float(level)):
                return self.lower[:, j], self.upper[:, j]
        raise ValueError(f"level {level!r} is not among the predicted levels {self.levels}")

    def rows(self) -> list[dict[str, Any]]:
        """One plain ``dict`` per prediction (for JSON or a table).

        Returns:
            ``[{"median", "loc", "scale", "p_num", "interval_50": [lo, hi], "calibrated_50":
            bool, ..., "calibrated_on": n}, ...]`` with Python floats (numbers to 7 significant
            digits; an end beyond float32's range is its largest number, ``3.402823e+38``).

        Example:
            >>> import torch
            >>> p = ValuePrediction(torch.tensor([5.0]), torch.tensor([5.0]), torch.tensor([1.0]),
            ...                     torch.tensor([0.5]), (0.5,), torch.tensor([[4.0]]),
            ...                     torch.tensor([[6.0]]), "identity")
            >>> p.rows()  # doctest: +NORMALIZE_WHITESPACE
            [{'median': 5.0, 'loc': 5.0, 'scale': 1.0, 'p_num': 0.5, 'interval_50': [4.0, 6.0],
              'calibrated_50': False, 'calibrated_on': 0}]
        """
        assert self.calibrated is not None and self.calibration_count is not None
        out = []
        for i in range(self.median.numel()):
            row: dict[str, Any] = {
                "median": _sig(self.median[i]),
                "loc": float(self.loc[i]),
                "scale": float(self.scale[i]),
                "p_num": float(self.p_num[i]),
            }
            for j, c in enumerate(self.levels):
                key = f"{round(100 * c):d}"
                row[f"interval_{key}"] = [_sig(self.lower[i, j]), _sig(self.upper[i, j])]
                row[f"calibrated_{key}"] = bool(self.calibrated[i, j])
            row["calibrated_on"] = int(self.calibration_count[i])
            out.append(row)
        return out


def value_prediction(
    loc: torch.Tensor,
    scale: torch.Tensor,
    p_num: torch.Tensor,
    levels: tuple[float, ...],
    value_space: str,
    widths: torch.Tensor | None = None,
    counts: torch.Tensor | None = None,
) -> ValuePrediction:
    """The medians and intervals of Cauchy laws ``Y ~ Cauchy(loc, scale)`` in the value space.

    The median is ``g^{-1}(loc)``; the interval of coverage ``c`` is the Cauchy one,
    ``g^{-1}(loc ± tan(pi c / 2) scale)``, or, where ``widths`` gives a width ``q(c)``, the
    calibrated ``g^{-1}(loc ± q(c) scale)``. Ends beyond float32's range are its largest number.

    Args:
        loc: ``[N]`` ``loc_Y``.
        scale: ``[N]`` ``scale_Y``, positive.
        p_num: ``[N]`` ``P(<NUM>)`` of each row.
        levels: the coverages.
        value_space: one of :data:`cauchylin.value_space.VALUE_SPACES`.
        widths: ``[N, L]`` calibrated widths in units of ``scale`` (NaN: none for that row and
            level), or None.
        counts: ``[N]`` the calibration rows behind each row's widths, or None.

    Returns:
        A :class:`ValuePrediction` (float64).

    Example:
        >>> import torch
        >>> p = value_prediction(torch.tensor([0.0]), torch.tensor([1.0]), torch.tensor([1.0]),
        ...                      (0.5,), "identity", widths=torch.tensor([[2.0]]))
        >>> p.median.tolist(), p.interval(0.5), p.calibrated.tolist()
        ([0.0], (tensor([-2.], dtype=torch.float64), tensor([2.], dtype=torch.float64)), [[True]])
    """
    loc, scale = loc.double(), scale.double()
    qs = [(1 - c) / 2 for c in levels]
    lower = torch.stack([value_quantiles(loc, scale, q, value_space) for q in qs], -1)
    upper = torch.stack([value_quantiles(loc, scale, 1 - q, value_space) for q in qs], -1)
    lower, upper = lower.reshape(-1, len(levels)), upper.reshape(-1, len(levels))
    calibrated = torch.zeros_like(lower, dtype=torch.bool)
    if widths is not None:
        calibrated = ~torch.isnan(widths)
        half = torch.nan_to_num(widths, nan=0.0) * scale.reshape(-1, 1)
        centre = loc.reshape(-1, 1)
        lower = torch.where(calibrated, from_value_space(centre - half, value_space), lower)
        upper = torch.where(calibrated, from_value_space(centre + half, value_space), upper)
    # The numbers are float32: a median or an end beyond its range (the value space's inverse
    # of a wide interval overflows it long before float64's) is float32's largest number, so
    # every interval lies in the numbers' range and holds its median.
    largest = float(torch.finfo(torch.float32).max)
    median = value_quantiles(loc, scale, 0.5, value_space).clamp(-largest, largest)
    column = median.reshape(-1, 1)
    lower = torch.minimum(lower.clamp(-largest, largest), column)
    upper = torch.maximum(upper.clamp(-largest, largest), column)
    return ValuePrediction(
        median=median,
        loc=loc,
        scale=scale,
        p_num=p_num.double(),
        levels=levels,
        lower=lower,
        upper=upper,
        value_space=value_space,
        calibrated=calibrated,
        calibration_count=counts if counts is not None else None,
    )


def _calibration(
    model: Any, rows: torch.Tensor, levels: tuple[float, ...], use: bool
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The conformal widths ``[N, L]`` (NaN where none) and counts ``[N]`` of table rows."""
    table = model.action.readouts
    if not use or table.num_contexts == 0:
        return None, None
    rows = rows.to(table.widths.device)
    columns = []
    for c in levels:
        if table.level_index(c) is None:
            columns.append(torch.full(rows.shape, math.nan, dtype=torch.float64))
        else:
            columns.append(table.widths_at(rows, c).double().cpu())
    counts = table.calibrated_on(rows).cpu()
    return torch.stack(columns, -1).reshape(-1, len(levels)), counts


@torch.no_grad()
def _heads_at(
    model: Any,
    enc: Any,
    select: torch.Tensor,
    mode: str,
    temperature: float | None,
    num: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(loc_Y, scale_Y, P(<NUM>), readout-table row)`` at the positions ``select`` (``[B, S]``)
    of the tokenizer's (CPU) encoding ``enc``, read on the model's device."""
    device = next(model.parameters()).device
    ids, values = enc["input_ids"].to(device), enc["numeric_values"].to(device)
    mask, select = enc["attention_mask"].to(device), select.to(device)
    hidden, _ = model.encode(
        ids, values, mask, use_cache=False, position_ids=position_ids_from_mask(mask)
    )
    codes, numbers = model.readout_context(ids, values, mask)
    codes = codes[select]
    numbers = None if numbers is None else numbers[select]
    _, act = model.heads(hidden[select], mode, temperature, context=codes, numbers=numbers)
    return number_heads(model, act, codes, num)


def number_heads(
    model: Any, act: Any, codes: torch.Tensor, num: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(loc_Y, scale_Y, P(<NUM>), readout-table row)`` of an action output at some positions.

    Args:
        model: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM`.
        act: the :class:`cauchylin.nn.ActionOutput` of those positions (``[N]`` of them).
        codes: ``[N]`` their context codes (the readout table's rows are looked up from them).
        num: the ``<NUM>`` id.

    Returns:
        Four ``[N]`` tensors on the CPU, as :class:`NumberReader` reads them (the predictions
        of a model on any device are CPU tensors).

    Example:
        >>> import torch
        >>> from cauchylin.nn.modes import STANDARD
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
        >>> model, ntok = CauchyLMForCausalLM.from_base(
        ...     tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True)
        >>> ids = torch.tensor([[5, 6]])
        >>> hidden, _ = model.encode(ids, None, torch.ones_like(ids))
        >>> codes, _ = model.readout_context(ids, torch.zeros(ids.shape), torch.ones_like(ids))
        >>> _, act = model.heads(hidden[0], STANDARD, context=codes[0])
        >>> [t.shape for t in number_heads(model, act, codes[0], model.config.num_token_id)]
        [torch.Size([2]), torch.Size([2]), torch.Size([2]), torch.Size([2])]
    """
    log_p = act.S[..., num : num + 1].ovr_log_prob(
        act.threshold if act.threshold.ndim == 0 else act.threshold[num : num + 1]
    )[0][..., 0]
    rows = model.action.readouts.lookup(codes)
    return act.loc_Y.cpu(), act.scale_Y.cpu(), log_p.exp().cpu(), rows.cpu()


def predict_values(
    model: Any,
    tokenizer: NumericTokenizer,
    prompts: str | Sequence[str],
    *,
    levels: Sequence[float] = REPORTED_LEVELS,
    mode: str = STANDARD,
    temperature: float | None = None,
    batch_size: int = 32,
    calibrated: bool = True,
) -> ValuePrediction:
    """The next number after each prompt: median, ``P(<NUM>)`` and central intervals.

    Each prompt is read up to its end (write it so that the number would come next, e.g.
    ``"radius 14.2, area "``); the heads at its last token give ``Y``. The model is put in eval
    mode. The numbers in the prompt are read as values, as in training. The model may be on any
    device (the prompts are encoded on the CPU and moved to it); the predictions are CPU tensors.

    Args:
        model: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM`.
        tokenizer: its :class:`~cauchylin_hf.tokenizer.NumericTokenizer`.
        prompts: one prompt or a list.
        levels: coverages of the central intervals, each in ``(0, 1)``.
        mode: inference mode of the heads (default ``"standard"``, the training mode, whose
            intervals the training calibrates).
        temperature: ``T`` (default ``config.temperature``).
        batch_size: prompts per forward pass.
        calibrated: use the model's split-conformal widths where it has them for the prompt's
            context and the level (:mod:`cauchylin_hf.readouts`); False gives the Cauchy
            intervals ``g^{-1}(loc_Y ± tan(pi c / 2) scale_Y)`` everywhere.

    Returns:
        A :class:`ValuePrediction` with one row per prompt (``calibrated`` says which intervals
        are conformal).

    Raises:
        ValueError: an empty prompt list, a bad level or batch size, a tokenizer that is not a
            ``NumericTokenizer``, a model without ``<NUM>``, or a prompt that leaves no
            position for the number after it
            (:func:`~cauchylin_hf.generation.check_prompt_lengths`).

    Example:
        >>> import torch
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
        >>> _ = torch.manual_seed(0)
        >>> model, ntok = CauchyLMForCausalLM.from_base(
        ...     tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True)
        >>> pred = predict_values(model, ntok, ["3 boxes of 12 eggs hold ", "a 2 by 3 room is "])
        >>> pred.median.shape, pred.lower.shape  # untrained: the numbers mean nothing yet
        (torch.Size([2]), torch.Size([2, 3]))
        >>> bool((pred.lower[:, 0] <= pred.median).all() and (pred.median <= pred.upper[:, 0]).all())
        True
    """
    num = _check_model(model, tokenizer)
    items = [prompts] if isinstance(prompts, str) else list(prompts)
    if not items:
        raise ValueError("prompts is empty")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    lv = _check_levels(levels)
    lengths = [len(ids) for ids in tokenizer(items)["input_ids"]]
    if 0 in lengths:
        i = lengths.index(0)
        raise ValueError(
            f"prompt {i + 1} of {len(items)} has no tokens ({items[i]!r}): a number is predicted "
            "after some text; give each prompt the text before the number"
        )
    check_prompt_lengths(model, lengths)
    model.eval()
    parts: list[tuple[torch.Tensor, ...]] = []
    for start in range(0, len(items), batch_size):
        enc = tokenizer(items[start : start + batch_size], padding=True, return_tensors="pt")
        mask = enc["attention_mask"].bool()
        last = mask.shape[1] - 1 - mask.flip(1).long().argmax(1)  # last real token per row
        select = torch.zeros_like(mask)
        select[torch.arange(mask.shape[0]), last] = True
        parts.append(_heads_at(model, enc, select, mode, temperature, num))
    loc, scale, p, rows = (torch.cat(t) for t in zip(*parts, strict=True))
    widths, counts = _calibration(model, rows, lv, calibrated)
    return value_prediction(loc, scale, p, lv, model.config.value_space, widths, counts)


@dataclass
class NumberPredictions:
    """Predictions for every number of a list of texts, one row per number.

    Attributes:
        prediction: the :class:`ValuePrediction` rows.
        true: ``[N]`` the numbers as written.
        text_index: ``[N]`` which text each number is in.
        is_target: ``[N]`` bool, the target number of its text.
        fields: the field of each number (:func:`field_of`).

    Example:
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
        >>> model, ntok = CauchyLMForCausalLM.from_base(
        ...     tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True)
        >>> out = number_predictions(model, ntok, ["a 1, b 2.", "a 5, b 7, c 9."])
        >>> out.text_index.tolist(), out.is_target.tolist(), out.prediction.median.shape
        ([0, 0, 1, 1, 1], [False, True, False, False, True], torch.Size([5]))
    """

    prediction: ValuePrediction
    true: torch.Tensor
    text_index: torch.Tensor
    is_target: torch.Tensor
    fields: list[str]


def number_predictions(
    model: Any,
    tokenizer: NumericTokenizer,
    texts: Iterable[str],
    *,
    target_field: str | None = None,
    levels: Sequence[float] = REPORTED_LEVELS,
    mode: str = STANDARD,
    temperature: float | None = None,
    batch_size: int = 32,
    calibrated: bool = True,
) -> NumberPredictions:
    """Predict every number of each text from the text before it, in one pass per batch.

    The target of a text is its last number, or with ``target_field`` the last number whose
    field (:func:`field_of`) equals it. Numbers cut off by the tokenizer's ``max_length`` are
    left out. This holds every prediction; :func:`iter_number_predictions` gives them a batch
    at a time and :class:`NumberMetrics` scores them as they come, for data of any size.

    Args:
        model: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM`.
        tokenizer: its :class:`~cauchylin_hf.tokenizer.NumericTokenizer`.
        texts: the texts (each with at least one number to count), read once in order.
        target_field: the field of the target number (default: the last number of each text).
        levels: coverages of the central intervals.
        mode: inference mode of the heads (default ``"standard"``).
        temperature: ``T`` (default ``config.temperature``).
        batch_size: texts per forward pass.
        calibrated: use the model's conformal widths where it has them (as
            :func:`predict_values`).

    Returns:
        :class:`NumberPredictions`.

    Raises:
        ValueError: no text holds a number, or as :func:`predict_values`.

    Example:
        >>> import torch
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
        >>> model, ntok = CauchyLMForCausalLM.from_base(
        ...     tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True)
        >>> out = number_predictions(model, ntok, ["width 3, height 4, area 12."])
        >>> out.fields, out.true.tolist(), out.is_target.tolist()
        (['width', 'height', 'area'], [3.0, 4.0, 12.0], [False, False, True])
    """
    parts = list(
        iter_number_predictions(
            model,
            tokenizer,
            texts,
            target_field=target_field,
            levels=levels,
            mode=mode,
            temperature=temperature,
            batch_size=batch_size,
            calibrated=calibrated,
        )
    )
    if not parts:
        raise ValueError("no text holds a number: nothing to predict")
    return concat_number_predictions(parts)


def iter_number_predictions(
    model: Any,
    tokenizer: NumericTokenizer,
    texts: Iterable[str],
    *,
    target_field: str | None = None,
    levels: Sequence[float] = REPORTED_LEVELS,
    mode: str = STANDARD,
    temperature: float | None = None,
    batch_size: int = 32,
    calibrated: bool = True,
) -> Iterator[NumberPredictions]:
    """:func:`number_predictions` a batch of texts at a time, reading ``texts`` as it goes.

    Each yielded :class:`NumberPredictions` holds the numbers of one batch of ``batch_size``
    texts (a batch without numbers yields nothing); ``text_index`` counts from the first text
    of ``texts``. Memory holds one batch: ``texts`` may be a generator, a file read line by
    line or an Arrow column of millions of rows. Concatenated
    (:func:`concat_number_predictions`), the batches equal :func:`number_predictions`.

    Args:
        model: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM`.
        tokenizer: its :class:`~cauchylin_hf.tokenizer.NumericTokenizer`.
        texts: the texts, read once in order.
        target_field: the field of the target number (default: the last number of each text).
        levels: coverages of the central intervals.
        mode: inference mode of the heads (default ``"standard"``).
        temperature: ``T`` (default ``config.temperature``).
        batch_size: texts per forward pass.
        calibrated: use the model's conformal widths where it has them.

    Yields:
        :class:`NumberPredictions`, one per batch of texts that holds a number.

    Raises:
        ValueError: as :func:`predict_values` (a text too long for the model's context is
            refused when its batch is read, naming its index among all texts); a
            ``target_field`` that is the field of no number of the texts (after the last
            batch).

    Example:
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
        >>> model, ntok = CauchyLMForCausalLM.from_base(
        ...     tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True)
        >>> texts = (f"width {w}, area {2 * w}." for w in range(5))  # a generator
        >>> [p.text_index.tolist() for p in iter_number_predictions(model, ntok, texts, batch_size=2)]
        [[0, 0, 1, 1], [2, 2, 3, 3], [4, 4]]
    """
    num = _check_model(model, tokenizer)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    reader = NumberReader(model, target_field=target_field, levels=levels, calibrated=calibrated)
    model.eval()
    for chunk in _batched(texts, batch_size):
        enc = tokenizer(chunk, padding=True, return_tensors="pt")
        ids, mask = enc["input_ids"], enc["attention_mask"].bool()
        lengths = mask.sum(1).tolist()
        if 0 in lengths:  # no position to read it at: padding would be read instead
            i = lengths.index(0)
            raise ValueError(
                f"text {reader.start + i + 1} has no tokens ({chunk[i]!r}): a number is "
                "predicted after some text; give each text the text before the number"
            )
        check_prompt_lengths(model, lengths, first_index=reader.start)
        select = before_numbers(ids, mask, num)
        heads = None
        if bool(select.any()):
            heads = _heads_at(model, enc, select, mode, temperature, num)
        preds = reader.add(chunk, ids, mask, enc["numeric_values"], heads)
        if preds is not None:
            yield preds
    reader.finish()


class NumberReader:
    """The :class:`NumberPredictions` of batches of texts whose heads were computed already.

    :func:`iter_number_predictions` feeds it the batches it encodes and scores itself; a loop
    that runs the model on the texts for its own reasons (``evaluate_model``'s single pass
    over held-out data) feeds it the heads at the positions before each number of its batches
    (:func:`~cauchylin_hf.loss.before_numbers`, in row-major order; :func:`number_heads`),
    so that every text is read once. Numbers are matched to the texts' spans in order; one
    that is a text's first token has no prediction.

    Args:
        model: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM`.
        target_field: the field of the target number (default: the last number of each text).
        levels: coverages of the central intervals.
        calibrated: use the model's conformal widths where it has them.
        texts: the texts, for :meth:`read` (read as it needs them).
        sink: what :meth:`read` hands each batch's predictions to (e.g.
            :meth:`NumberMetrics.add`).

    Raises:
        ValueError: a bad level.

    Example:
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
        >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), tiny_tokenizer())
        >>> reader = NumberReader(model, levels=(0.5, 0.9))
        >>> reader.levels, reader.start
        ((0.5, 0.9), 0)

        :meth:`add` shows a batch read.
    """

    def __init__(
        self,
        model: Any,
        *,
        target_field: str | None = None,
        levels: Sequence[float] = REPORTED_LEVELS,
        calibrated: bool = True,
        texts: Iterable[str] | None = None,
        sink: Callable[[NumberPredictions], object] | None = None,
    ) -> None:
        self.model = model
        self.sink = sink
        self._texts = None if texts is None else iter(texts)
        self.num = int(model.config.num_token_id)
        self.target_field = target_field
        self.levels = _check_levels(levels)
        self.calibrated = calibrated
        self.start = 0
        """The index of the next text among all the texts read."""
        self._fields_seen: dict[str, None] = {}  # (at most 1000, to name in finish's error)
        self._target_seen = False

    def add(
        self,
        texts: Sequence[str],
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        numeric_values: torch.Tensor,
        heads: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None,
    ) -> NumberPredictions | None:
        """The predictions of one batch of texts (None when none of them holds a number).

        Args:
            texts: the batch's texts.
            input_ids: ``[B, L]`` their ids (``<NUM>`` at the numbers).
            attention_mask: ``[B, L]``.
            numeric_values: ``[B, L]`` the numbers' values.
            heads: :func:`number_heads` at the positions before the numbers (None: none).

        Returns:
            :class:`NumberPredictions` of the batch, or None.

        Example:
        >>> from cauchylin_hf.testing import scored_number_batch
        >>> model, b = scored_number_batch(["width 3, area 6.", "width 4, area 8."])
        >>> texts, act, codes = b["texts"], b["act"], b["codes"]
        >>> ids, mask, values = b["input_ids"], b["attention_mask"], b["numeric_values"]
        >>> reader = NumberReader(model)
        >>> heads = number_heads(model, act, codes, model.config.num_token_id)
        >>> preds = reader.add(texts, ids, mask, values, heads)
        >>> preds.fields, preds.true.tolist(), preds.text_index.tolist()
        (['width', 'area', 'width', 'area'], [3.0, 6.0, 4.0, 8.0], [0, 0, 1, 1])
        """
        # one copy of the batch to the CPU: reading it number by number on a GPU would sync
        # at every number
        num, mask = self.num, attention_mask.bool().cpu()
        ids, numeric_values = input_ids.cpu(), numeric_values.cpu()
        at_num = before_numbers(ids, mask, num)[:, :-1]  # aligned with ids[:, 1:]
        start = self.start
        self.start += len(texts)
        if heads is None or not bool(at_num.any()):
            return None
        loc, scale, p, rows = heads
        true: list[float] = []
        index: list[int] = []
        target: list[bool] = []
        fields: list[str] = []
        for b, text in enumerate(texts):
            spans = find_numbers(text)
            real = mask[b].nonzero().flatten()
            at = ((ids[b] == num) & mask[b]).nonzero().flatten().tolist()  # k-th <NUM> = spans[k]
            kept = [k for k, i in enumerate(at) if i > int(real[0])]  # a first token: no prefix
            every = [
                field_of(text[(spans[k - 1].end if k else 0) : s.start])
                for k, s in enumerate(spans)
            ]
            # the target among all the text's numbers: a cut-off target is no target
            tgt = _target_index(every, list(range(len(spans))), self.target_field)
            self._target_seen = self._target_seen or tgt >= 0
            for f in every:
                if len(self._fields_seen) < 1000:
                    self._fields_seen.setdefault(f)
            true.extend(float(v) for v in numeric_values[b, 1:][at_num[b]])
            index.extend([start + b] * len(kept))
            target.extend(k == tgt for k in kept)
            fields.extend(every[k] for k in kept)
        widths, counts = _calibration(self.model, rows, self.levels, self.calibrated)
        return NumberPredictions(
            prediction=value_prediction(
                loc, scale, p, self.levels, self.model.config.value_space, widths, counts
            ),
            true=torch.tensor(true, dtype=torch.float64),
            text_index=torch.tensor(index, dtype=torch.long),
            is_target=torch.tensor(target, dtype=torch.bool),
            fields=fields,
        )

    def heads(
        self, act: Any, codes: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """:func:`number_heads` of the model at some positions (for :meth:`read`).

        Args:
            act: the model's :meth:`~cauchylin_hf.model.CauchyLMForCausalLM.heads` output at
                those positions.
            codes: ``[K]`` their readout context codes.

        Returns:
            ``(loc, scale, p, rows)`` of the regression heads there (:func:`number_heads`).

        Example:
        >>> from cauchylin_hf.testing import scored_number_batch
        >>> model, b = scored_number_batch(["width 3, area 6.", "width 4, area 8."])
        >>> texts, act, codes = b["texts"], b["act"], b["codes"]
        >>> ids, mask, values = b["input_ids"], b["attention_mask"], b["numeric_values"]
        >>> loc, scale, p, rows = NumberReader(model).heads(act, codes)
        >>> loc.shape == scale.shape == p.shape == (len(codes),)
        True
        """
        return number_heads(self.model, act, codes, self.num)

    def read(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        numeric_values: torch.Tensor,
        heads: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None,
    ) -> None:
        """:meth:`add` on the next ``len(input_ids)`` texts of ``texts``; the predictions (if
        any) go to ``sink``.

        Args:
            input_ids: ``[B, L]`` the ids of the next ``B`` texts.
            attention_mask: ``[B, L]``.
            numeric_values: ``[B, L]``.
            heads: :meth:`heads` at the positions before their numbers (None: none).

        Example:
        >>> from cauchylin_hf.testing import scored_number_batch
        >>> model, b = scored_number_batch(["width 3, area 6.", "width 4, area 8."])
        >>> texts, act, codes = b["texts"], b["act"], b["codes"]
        >>> ids, mask, values = b["input_ids"], b["attention_mask"], b["numeric_values"]
        >>> got = []
        >>> reader = NumberReader(model, texts=texts, sink=got.append)
        >>> reader.read(ids, mask, values, reader.heads(act, codes))
        >>> reader.finish()
        >>> len(got), got[0].true.tolist()
        (1, [3.0, 6.0, 4.0, 8.0])

        Raises:
            ValueError: no ``texts`` given, or fewer texts than rows.
        """
        if self._texts is None:
            raise ValueError("NumberReader.read needs the texts: give texts=...")
        chunk = list(itertools.islice(self._texts, int(input_ids.shape[0])))
        if len(chunk) != int(input_ids.shape[0]):
            raise ValueError(
                f"the texts ran out after {self.start + len(chunk)}: fewer texts than rows read"
            )
        preds = self.add(chunk, input_ids, attention_mask, numeric_values, heads)
        if preds is not None and self.sink is not None:
            self.sink(preds)

    def finish(self) -> None:
        """Check, after the last batch, that ``target_field`` named the field of some number
        (and, with ``texts``, that every text was read).

        Raises:
            ValueError: a ``target_field`` that is the field of no number of the texts, or more
                texts than rows were read.

        Example:
        >>> from cauchylin_hf.testing import scored_number_batch
        >>> model, b = scored_number_batch(["width 3, area 6.", "width 4, area 8."])
        >>> texts, act, codes = b["texts"], b["act"], b["codes"]
        >>> ids, mask, values = b["input_ids"], b["attention_mask"], b["numeric_values"]
        >>> reader = NumberReader(model, target_field="aera")
        >>> _ = reader.add(texts, ids, mask, values, reader.heads(act, codes))
        >>> reader.finish()
        Traceback (most recent call last):
        ...
        ValueError: target_field 'aera' is the field of no number in the texts; did you mean 'area'? (their fields: 'width', 'area')
        """
        if self._texts is not None and next(self._texts, None) is not None:
            raise ValueError(f"more texts than the {self.start} rows read")
        if self.target_field is None or not self._fields_seen or self._target_seen:
            return
        # a misspelt field would otherwise score no target at all: every target metric NaN
        close = difflib.get_close_matches(self.target_field, list(self._fields_seen), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        shown = ", ".join(repr(f) for f in list(self._fields_seen)[:10])
        more = ", ..." if len(self._fields_seen) > 10 else ""
        raise ValueError(
            f"target_field {self.target_field!r} is the field of no number in the texts{hint} "
            f"(their fields: {shown}{more})"
        )


def _batched(texts: Iterable[str], size: int) -> Iterator[list[str]]:
    """Lists of ``size`` texts (the last may be shorter), read as they are needed."""
    batch: list[str] = []
    for text in texts:
        batch.append(text)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def concat_number_predictions(parts: Sequence[NumberPredictions]) -> NumberPredictions:
    """One :class:`NumberPredictions` of several, in order (e.g. the batches of
    :func:`iter_number_predictions`).

    Args:
        parts: at least one, all of the same levels and value space.

    Returns:
        Their rows, concatenated.

    Raises:
        ValueError: no parts, or parts of different levels or value spaces.

    Example:
        >>> import torch
        >>> p = ValuePrediction(torch.tensor([5.0]), torch.tensor([5.0]), torch.tensor([1.0]),
        ...                     torch.tensor([0.5]), (0.5,), torch.tensor([[4.0]]),
        ...                     torch.tensor([[6.0]]), "identity")
        >>> one = NumberPredictions(p, torch.tensor([5.5]), torch.tensor([0]), torch.tensor([True]), ["x"])
        >>> both = concat_number_predictions([one, one])
        >>> both.true.tolist(), both.fields, both.prediction.lower.shape
        ([5.5, 5.5], ['x', 'x'], torch.Size([2, 1]))
    """
    if not parts:
        raise ValueError("concat_number_predictions needs at least one NumberPredictions")
    first = parts[0].prediction
    for part in parts[1:]:
        q = part.prediction
        if q.levels != first.levels or q.value_space != first.value_space:
            raise ValueError(
                "the parts must share their levels and value space, got "
                f"{first.levels}/{first.value_space!r} and {q.levels}/{q.value_space!r}"
            )
    preds = [part.prediction for part in parts]

    def cat(name: str) -> torch.Tensor:
        return torch.cat([getattr(q, name) for q in preds])

    return NumberPredictions(
        prediction=ValuePrediction(
            median=cat("median"),
            loc=cat("loc"),
            scale=cat("scale"),
            p_num=cat("p_num"),
            levels=first.levels,
            lower=cat("lower"),
            upper=cat("upper"),
            value_space=first.value_space,
            calibrated=cat("calibrated"),
            calibration_count=cat("calibration_count"),
        ),
        true=torch.cat([part.true for part in parts]),
        text_index=torch.cat([part.text_index for part in parts]),
        is_target=torch.cat([part.is_target for part in parts]),
        fields=[f for part in parts for f in part.fields],
    )


def _target_index(fields: list[str], numbers: list[int], target_field: str | None) -> int:
    """Which of a text's numbers is its target: the last one, or the last of ``target_field``
    (``numbers`` are the indices of the numbers, ``fields`` their fields); -1 when none."""
    if target_field is None:
        return numbers[-1] if numbers else -1
    hits = [k for k, f in zip(numbers, fields, strict=True) if f == target_field]
    return hits[-1] if hits else -1


def target_numbers(texts: Sequence[str], *, target_field: str | None = None) -> list[float]:
    """The target number of each text, read from the text alone (no model).

    The same rule as :func:`number_predictions`: the last number of each text, or with
    ``target_field`` the last number whose field (:func:`field_of`) equals it. Texts without
    such a number are skipped.

    Args:
        texts: the texts.
        target_field: the field of the target number (default: the last number).

    Returns:
        The targets as the model reads them (float32 values), in text order.

    Raises:
        ValueError: ``texts`` holds something other than strings.

    Example:
        >>> target_numbers(["width 3, area 12.", "width 5, area 25, 2 rooms.", "none"])
        [12.0, 2.0]
        >>> target_numbers(["width 5, area 25, 2 rooms."], target_field="area")
        [25.0]
    """
    out: list[float] = []
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"texts[{i}] must be a str, got {type(text).__name__}")
        spans = find_numbers(text)
        fields = number_fields(text, spans)
        k = _target_index(fields, list(range(len(spans))), target_field)
        if k >= 0:
            out.append(float(spans[k].value))
    return out


def _median(values: torch.Tensor) -> float:
    """The usual median (the mean of the two middle values of an even count), nan when empty."""
    return quantiles(values, (0.5,))[0]


def _summary(pred: ValuePrediction, true: torch.Tensor, keep: torch.Tensor) -> dict[str, float]:
    err = (pred.median[keep] - true[keep]).abs()
    n = int(keep.sum())
    out = {
        "count": float(n),
        "mae": float(err.mean()) if err.numel() else math.nan,
        "mdae": _median(err),
        "spearman": rank_correlation(pred.median[keep], true[keep]) if err.numel() else math.nan,
        "p_num": float(pred.p_num[keep].mean()) if err.numel() else math.nan,
    }
    y, loc, scale = true[keep], pred.loc[keep], pred.scale[keep]
    out["log_score"] = (
        float(value_log_density(y, loc, scale, pred.value_space).mean()) if n else math.nan
    )
    out["pit_ks"] = ks_uniform(value_cdf(y, loc, scale, pred.value_space)) if n else math.nan
    assert pred.calibrated is not None
    for j, c in enumerate(pred.levels):
        key = f"{round(100 * c):d}"
        lo, hi = pred.lower[keep, j], pred.upper[keep, j]
        out[f"coverage_{key}"] = interval_coverage(y, lo, hi)
        out[f"interval_score_{key}"] = float(interval_score(y, lo, hi, c).mean()) if n else math.nan
        out[f"calibrated_{key}"] = (
            float(pred.calibrated[keep, j].double().mean()) if n else math.nan
        )
    return out


def number_metrics(preds: NumberPredictions) -> dict[str, float]:
    """Errors of the predicted numbers: for the targets, for all numbers and per field.

    For each group: ``count``, ``mae`` and ``mdae`` (mean and median absolute error of the
    median; the median of an even count is the mean of the two middle errors, as numpy's),
    ``spearman`` (rank correlation with the truth), ``p_num`` (mean ``P(<NUM>)``), the proper
    scores of the model's Cauchy predictive: ``log_score`` (mean log density of the true number,
    in its own units: :func:`cauchylin.value_space.value_log_density`; higher is better) and
    ``pit_ks`` (the Kolmogorov-Smirnov distance of the PIT values from uniform, 0 for a
    calibrated predictive), and per level ``coverage_50`` ... (share of true numbers inside each
    central interval; nominally the level), ``interval_score_50`` ... (the interval score of
    :func:`cauchylin.conformal.interval_score`; lower is better) and ``calibrated_50`` ... (the
    share of those intervals that are conformal). The CRPS is not reported: it is infinite for
    a Cauchy predictive. Keys: ``target/<name>``, ``all/<name>`` and ``field/<field>/<name>``.

    ``nan`` marks a value that is undefined for its group: ``spearman`` needs at least two
    numbers, and predictions and true values that are not all equal.

    Args:
        preds: from :func:`number_predictions`.

    Returns:
        A flat ``{key: float}`` dict (``nan`` where a group is empty).

    Example:
        >>> import torch
        >>> p = ValuePrediction(torch.tensor([1.0, 9.0]), torch.zeros(2), torch.ones(2),
        ...                     torch.ones(2), (0.5,), torch.tensor([[0.0], [8.0]]),
        ...                     torch.tensor([[2.0], [10.0]]), "identity")
        >>> m = number_metrics(NumberPredictions(p, torch.tensor([1.5, 12.0]), torch.tensor([0, 0]),
        ...                                      torch.tensor([False, True]), ["x", "y"]))
        >>> m["target/mae"], m["all/coverage_50"], m["field/x/mdae"]
        (3.0, 0.5, 0.5)
    """
    out: dict[str, float] = {}
    for group, keep in _groups(preds).items():
        for key, value in _summary(preds.prediction, preds.true, keep).items():
            out[f"{group}/{key}"] = value
    return out


def _groups(preds: NumberPredictions) -> dict[str, torch.Tensor]:
    """The groups of :func:`number_metrics` and the rows of each."""
    groups = {"target": preds.is_target, "all": torch.ones_like(preds.is_target)}
    for name in dict.fromkeys(preds.fields):
        groups[f"field/{name or '(none)'}"] = torch.tensor([f == name for f in preds.fields])
    return groups


def spearman_undefined(preds: NumberPredictions) -> dict[str, str]:
    """Why ``spearman`` is ``nan`` in a group of :func:`number_metrics`, for each such group.

    Args:
        preds: from :func:`number_predictions`.

    Returns:
        ``{group: reason}`` (``"target"``, ``"all"``, ``"field/<field>"``), e.g. ``"seen once"``
        or ``"the model predicts one value for all its 107 numbers"``; groups whose rank
        correlation is defined are left out.

    Example:
        >>> import torch
        >>> p = ValuePrediction(torch.tensor([4.0, 4.0, 2.0]), torch.zeros(3), torch.ones(3),
        ...                     torch.ones(3), (0.5,), torch.zeros(3, 1), torch.ones(3, 1),
        ...                     "identity")
        >>> spearman_undefined(NumberPredictions(p, torch.tensor([1.0, 3.0, 5.0]),
        ...     torch.tensor([0, 1, 2]), torch.tensor([False, False, True]), ["x", "x", "y"]))
        {'target': 'seen once', 'field/x': 'the model predicts one value for all its 2 numbers', 'field/y': 'seen once'}
    """
    out: dict[str, str] = {}
    for group, keep in _groups(preds).items():
        reason = _undefined_reason(int(keep.sum()), preds.prediction.median[keep], preds.true[keep])
        if reason:
            out[group] = reason
    return out


def _undefined_reason(n: int, predicted: torch.Tensor, true: torch.Tensor) -> str:
    """Why a group of ``n`` numbers has no rank correlation, read from its predicted and true
    values (all of them, or the uniform sample :class:`NumberMetrics` ranks); ``""`` when it
    has one."""
    if n < 2:
        return "seen once" if n == 1 else "not seen"
    flat_pred = bool((predicted == predicted[0]).all())
    flat_true = bool((true == true[0]).all())
    if flat_pred and flat_true:
        return f"its {n} true values are all equal, and so are the predictions"
    if flat_pred:
        return f"the model predicts one value for all its {n} numbers"
    if flat_true:
        return f"its {n} true values are all equal"
    return ""


EXACT_NUMBERS = 65_536
""":class:`NumberMetrics` scores up to this many numbers exactly as :func:`number_metrics`; past
it, ``spearman`` and ``pit_ks`` of a larger group read a uniform random sample of this many of
its numbers (the means stay exact, from running sums, and the median absolute errors exact up
to :data:`KEPT_VALUES` errors)."""

KEPT_VALUES = 100_000
"""The values kept per statistic that a median is taken of (the absolute errors of a group of
numbers, of ``evaluate``'s ``<NUM>`` targets, the targets' predicted and true values of the
learning check): up to this many the median is exact (every value kept); past it, a uniform
random sample (seeded) of this many values gives it, and the memory stays bounded however many
rows are read. The sampled median is then a value whose rank among all the values is off from
the middle by a fraction of their count with standard deviation ``0.5 / sqrt(KEPT_VALUES)``
(0.16%), and by more than ``sqrt(ln(2e6) / (2 KEPT_VALUES))`` (0.85%) with probability below
1e-6 (Hoeffding's bound, which holds for sampling without replacement)."""


class NumberMetrics:
    """:func:`number_metrics` of predictions that arrive a batch at a time, in bounded memory.

    Feed it the batches of :func:`iter_number_predictions` with :meth:`add`; :meth:`result`
    gives the keys and values of :func:`number_metrics` on all of them. Up to ``exact_numbers``
    numbers it holds the batches and calls :func:`number_metrics` itself (the same floats).
    Past that the means (``mae``, ``p_num``, ``log_score``, ``interval_score_*``) and shares
    (``coverage_*``, ``calibrated_*``) are running sums, ``spearman`` and ``pit_ks`` of a group
    of more than ``sample_size`` numbers read a uniform random sample (seeded) of that many of
    them (``{group}/rank_sample`` in the result gives its size), and each group's absolute
    errors and the target numbers' predicted and true values (:meth:`targets`) are kept up to
    ``kept_values`` of each: the median absolute error is exact up to that many numbers in the
    group, and past it the median of a uniform random sample of ``kept_values`` errors
    (``{group}/mdae_sample`` in the result gives its size). The memory held is bounded, however
    many numbers are added: about 10 MB per group at the defaults.

    Args:
        exact_numbers: the numbers held and scored exactly (default :data:`EXACT_NUMBERS`).
        sample_size: the sample's size past them (default ``exact_numbers``).
        seed: seed of the samples.
        kept_values: the errors (of each group) and target values kept (None:
            :data:`KEPT_VALUES`).

    Raises:
        ValueError: ``exact_numbers``, ``sample_size`` or ``kept_values`` not a positive int.

    Example:
        >>> import torch
        >>> p = ValuePrediction(torch.tensor([1.0, 9.0]), torch.zeros(2), torch.ones(2),
        ...                     torch.ones(2), (0.5,), torch.tensor([[0.0], [8.0]]),
        ...                     torch.tensor([[2.0], [10.0]]), "identity")
        >>> batch = NumberPredictions(p, torch.tensor([1.5, 12.0]), torch.tensor([0, 0]),
        ...                           torch.tensor([False, True]), ["x", "y"])
        >>> running = NumberMetrics(exact_numbers=1)  # past one number: streamed
        >>> for _ in range(3):
        ...     running.add(batch)
        >>> running.count, running.result()["target/mae"], running.result()["all/coverage_50"]
        (6, 3.0, 0.5)
    """

    def __init__(
        self,
        *,
        exact_numbers: int = EXACT_NUMBERS,
        sample_size: int | None = None,
        seed: int = 0,
        kept_values: int | None = None,
    ) -> None:
        if sample_size is None:
            sample_size = exact_numbers
        if kept_values is None:
            kept_values = KEPT_VALUES
        for name, value in (
            ("exact_numbers", exact_numbers),
            ("sample_size", sample_size),
            ("kept_values", kept_values),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.exact_numbers = exact_numbers
        self.sample_size = sample_size
        self.kept_values = kept_values
        self.count = 0
        self._held: list[NumberPredictions] = []
        self._seed = seed
        self._streaming = False
        self._levels: tuple[float, ...] = ()
        self._value_space = ""
        self._codes: dict[str, int] = {}
        self._sums: dict[str, np.ndarray] = {}
        self._samples: dict[str, UniformSample] = {}
        # per group: its count, the sum of its absolute errors and the errors kept
        self._counts: dict[str, int] = {}
        self._err_sums: dict[str, float] = {}
        self._errors: dict[str, UniformSample] = {}
        self._targets = UniformSample(kept_values, 2, seed=seed)

    def add(self, preds: NumberPredictions) -> None:
        """Score one batch of predictions.

        Args:
            preds: from :func:`iter_number_predictions` (or :func:`number_predictions`), of
                the same levels and value space as the earlier batches.

        Raises:
            ValueError: levels or a value space other than the earlier batches', or intervals
                with NaN ends (as :func:`number_metrics`).

        Example:
            >>> import torch
            >>> p = ValuePrediction(torch.tensor([1.0, 9.0]), torch.zeros(2), torch.ones(2),
            ...                     torch.ones(2), (0.5,), torch.tensor([[0.0], [8.0]]),
            ...                     torch.tensor([[2.0], [10.0]]), "identity")
            >>> batch = NumberPredictions(p, torch.tensor([1.5, 12.0]), torch.tensor([0, 0]),
            ...                           torch.tensor([False, True]), ["x", "y"])
            >>> running = NumberMetrics()
            >>> running.add(batch)
            >>> running.count
            2
        """
        n = int(preds.true.numel())
        if self.count and (
            preds.prediction.levels != self._levels
            or preds.prediction.value_space != self._value_space
        ):
            raise ValueError("every batch must share the levels and value space of the first")
        self._levels, self._value_space = preds.prediction.levels, preds.prediction.value_space
        self.count += n
        if not self._streaming:
            self._held.append(preds)
            if self.count <= self.exact_numbers:
                return
            self._streaming = True
            held, self._held = self._held, []
            for part in held:
                self._stream(part)
            return
        self._stream(preds)

    def _stream(self, preds: NumberPredictions) -> None:
        p, y = preds.prediction, preds.true.cpu()
        n = int(y.numel())
        if n == 0:
            return
        assert p.calibrated is not None
        # the one table of floats per number that the running sums add up
        err = (p.median - y).abs()
        log_d = value_log_density(y, p.loc, p.scale, p.value_space)
        pit = value_cdf(y, p.loc, p.scale, p.value_space)
        parts = [torch.ones_like(y), p.p_num, log_d]
        for j, c in enumerate(p.levels):
            lo, hi = p.lower[:, j], p.upper[:, j]
            interval_coverage(y, lo, hi)  # refuses NaN ends, as number_metrics does
            parts += [
                ((lo <= y) & (y <= hi)).double(),
                interval_score(y, lo, hi, c).double(),
                p.calibrated[:, j].double(),
            ]
        table = torch.stack(parts, -1).numpy()  # [n, 3 + 3 L]: what the means are sums of
        codes = np.fromiter(
            (self._codes.setdefault(f, len(self._codes)) for f in preds.fields),
            dtype=np.int32,
            count=n,
        )
        target = preds.is_target.numpy()
        self._targets.add(torch.stack([p.median, y], -1)[preds.is_target].numpy())
        err_col = err.to(torch.float64).numpy()[:, None]
        rows = torch.stack([p.median, y, pit], -1).numpy()
        groups = {"target": target, "all": None}
        for name, code in self._codes.items():
            groups[f"field/{name or '(none)'}"] = codes == code
        for group, keep in groups.items():
            if keep is not None and not keep.any():
                continue
            sub = table if keep is None else table[keep]
            width = sub.shape[1]
            self._sums.setdefault(group, np.zeros(width))
            self._sums[group] += sub.sum(0)
            if group not in self._samples:
                seed = self._seed + len(self._samples)
                self._samples[group] = UniformSample(self.sample_size, 3, seed=seed)
                self._errors[group] = UniformSample(self.kept_values, 1, seed=seed)
            self._samples[group].add(rows if keep is None else rows[keep])
            errs = err_col if keep is None else err_col[keep]
            self._errors[group].add(errs)
            self._counts[group] = self._counts.get(group, 0) + len(errs)
            self._err_sums[group] = self._err_sums.get(group, 0.0) + float(errs.sum())

    @property
    def target_count(self) -> int:
        """The number of target numbers added (:meth:`targets` holds them all, or a sample).

        Example:
            >>> NumberMetrics().target_count
            0
        """
        if not self._streaming:
            return sum(int(part.is_target.sum()) for part in self._held)
        return self._counts.get("target", 0)

    def targets(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The predicted medians and true values of the target numbers, in order; past
        ``kept_values`` of them, a uniform random sample (seeded) of ``kept_values`` pairs.

        Returns:
            ``(predicted [T], true [T])``, float64.

        Example:
            >>> import torch
            >>> p = ValuePrediction(torch.tensor([1.0, 9.0]), torch.zeros(2), torch.ones(2),
            ...                     torch.ones(2), (0.5,), torch.tensor([[0.0], [8.0]]),
            ...                     torch.tensor([[2.0], [10.0]]), "identity")
            >>> batch = NumberPredictions(p, torch.tensor([1.5, 12.0]), torch.tensor([0, 0]),
            ...                           torch.tensor([False, True]), ["x", "y"])
            >>> running = NumberMetrics()
            >>> running.add(batch)
            >>> running.targets()
            (tensor([9.], dtype=torch.float64), tensor([12.], dtype=torch.float64))
        """
        if not self._streaming:
            if not self._held:
                return torch.zeros(0, dtype=torch.float64), torch.zeros(0, dtype=torch.float64)
            both = concat_number_predictions(self._held)
            keep = both.is_target
            f64 = torch.float64
            return both.prediction.median[keep].to(f64), both.true[keep].to(f64)
        pairs = self._targets.values()
        return torch.from_numpy(pairs[:, 0].copy()), torch.from_numpy(pairs[:, 1].copy())

    def undefined(self) -> dict[str, str]:
        """:func:`spearman_undefined` of every number added: past ``exact_numbers``, read from
        the sample that ``spearman`` ranks.

        Returns:
            ``{group: reason}`` for the groups whose ``spearman`` is ``nan``.

        Example:
            >>> import torch
            >>> p = ValuePrediction(torch.tensor([1.0, 9.0]), torch.zeros(2), torch.ones(2),
            ...                     torch.ones(2), (0.5,), torch.tensor([[0.0], [8.0]]),
            ...                     torch.tensor([[2.0], [10.0]]), "identity")
            >>> batch = NumberPredictions(p, torch.tensor([1.5, 12.0]), torch.tensor([0, 0]),
            ...                           torch.tensor([False, True]), ["x", "y"])
            >>> running = NumberMetrics()
            >>> running.add(batch)
            >>> running.undefined()
            {'target': 'seen once', 'field/x': 'seen once', 'field/y': 'seen once'}
        """
        if not self._streaming:
            if not self._held:
                return {}
            return spearman_undefined(concat_number_predictions(self._held))
        out: dict[str, str] = {}
        for group in self._groups():
            n = self._counts.get(group, 0)
            sample = self._samples[group].values() if n else np.empty((0, 3))
            med, y = (torch.from_numpy(np.ascontiguousarray(sample[:, i])) for i in range(2))
            reason = _undefined_reason(n, med, y)
            if reason:
                out[group] = reason
        return out

    def result(self) -> dict[str, float]:
        """The metrics of every number added (the keys of :func:`number_metrics`).

        Returns:
            A flat ``{key: float}`` dict.

        Raises:
            ValueError: nothing was added.

        Example:
            >>> import torch
            >>> p = ValuePrediction(torch.tensor([1.0, 9.0]), torch.zeros(2), torch.ones(2),
            ...                     torch.ones(2), (0.5,), torch.tensor([[0.0], [8.0]]),
            ...                     torch.tensor([[2.0], [10.0]]), "identity")
            >>> batch = NumberPredictions(p, torch.tensor([1.5, 12.0]), torch.tensor([0, 0]),
            ...                           torch.tensor([False, True]), ["x", "y"])
            >>> running = NumberMetrics()
            >>> running.add(batch)
            >>> running.result()["all/mae"]  # (|1 - 1.5| + |9 - 12|) / 2
            1.75
        """
        if not self._streaming:
            if not self._held:
                raise ValueError("no number was predicted: nothing to score")
            return number_metrics(concat_number_predictions(self._held))
        out: dict[str, float] = {}
        for group in self._groups():
            for key, value in self._group(group).items():
                out[f"{group}/{key}"] = value
        return out

    def _groups(self) -> list[str]:
        return ["target", "all"] + [f"field/{f or '(none)'}" for f in self._codes]

    def _group(self, group: str) -> dict[str, float]:
        n = self._counts.get(group, 0)
        nan = math.nan
        sums = self._sums.get(group)
        kept = self._errors[group] if n else None
        err = kept.values()[:, 0] if kept is not None else np.empty(0)
        out = {"count": float(n), "mae": nan}
        if kept is not None:
            # every error while they fit (the mean as number_metrics takes it), else the sums
            exact = not kept.sampled
            out["mae"] = float(torch.from_numpy(err).mean()) if exact else self._err_sums[group] / n
        out["mdae"] = exact_median(err)
        sample = self._samples[group].values() if n else np.empty((0, 3))
        med, y, pit = (torch.from_numpy(np.ascontiguousarray(sample[:, i])) for i in range(3))
        out["spearman"] = rank_correlation(med, y) if n else nan
        assert sums is not None or n == 0
        out["p_num"] = float(sums[1] / n) if n and sums is not None else nan
        out["log_score"] = float(sums[2] / n) if n and sums is not None else nan
        out["pit_ks"] = ks_uniform(pit) if n else nan
        for j, c in enumerate(self._levels):
            key = f"{round(100 * c):d}"
            for k, name in enumerate(("coverage", "interval_score", "calibrated")):
                value = float(sums[3 + 3 * j + k] / n) if n and sums is not None else nan
                out[f"{name}_{key}"] = value
        # where a statistic read a sample, its size (the key is absent where it read every value)
        if kept is not None and kept.sampled:
            out["mdae_sample"] = float(kept.size)
        if n and self._samples[group].sampled:
            out["rank_sample"] = float(self._samples[group].size)
        return out


def exact_median(values: np.ndarray) -> float:
    """The median of a NumPy array as :func:`cauchylin.metrics.quantiles` gives it (the same two
    order statistics, the same interpolation), without sorting it all: one partitioned copy
    instead of a sorted copy and its int64 indices; nan when empty.

    Args:
        values: a 1-D float array.

    Returns:
        The median (``nan`` for no values).

    Example:
        >>> import numpy as np
        >>> exact_median(np.array([4.0, 1.0, 3.0, 2.0])), exact_median(np.array([]))
        (2.5, nan)
    """
    n = int(values.size)
    if n == 0:
        return math.nan
    h = 0.5 * (n - 1)
    lo = math.floor(h)
    hi = min(lo + 1, n - 1)
    part = np.partition(values, [lo, hi])
    a, b = float(part[lo]), float(part[hi])
    return a + (h - lo) * (b - a)


@dataclass(frozen=True)
class LearningCheck:
    """Has a model learnt the target? Its error beside the training median's, and the spread
    of its predictions beside the targets'.

    Attributes:
        count: the number of targets compared.
        mdae: the model's median absolute error.
        baseline: the constant the baseline predicts (the training targets' median).
        baseline_mdae: the median absolute error of predicting ``baseline`` for every target.
        spread_ratio: the interquartile range of the predictions over that of the true targets
            (``nan`` with fewer than 2 targets or targets that do not vary).
        min_spread: the ratio below which the predictions count as flat.
        mae: the model's mean absolute error.
        baseline_mae: the mean absolute error of predicting ``baseline`` for every target.

    Example:
        >>> check = LearningCheck(50, 30.0, 146.0, 31.0, 0.02, 0.1)
        >>> check.flat, check.beats_baseline
        (True, True)
        >>> print(check.warnings("area")[0])
        the predicted area barely varies (the interquartile range of the predictions is 2% of the true values'): the model has not learnt to read the target yet, and a rank correlation of near-equal predictions means little; train longer (more steps or epochs)
    """

    count: int
    mdae: float
    baseline: float
    baseline_mdae: float
    spread_ratio: float
    min_spread: float = MIN_SPREAD
    mae: float = math.nan
    baseline_mae: float = math.nan

    @property
    def flat(self) -> bool:
        """Whether the predictions barely vary (``spread_ratio < min_spread``; False for nan)."""
        return bool(self.spread_ratio < self.min_spread)

    @property
    def compares_means(self) -> bool:
        """Half the targets or more equal the baseline (its median error is 0, which no model
        beats): the mean absolute errors are compared instead."""
        return self.baseline_mdae == 0 and math.isfinite(self.baseline_mae)

    @property
    def beats_baseline(self) -> bool:
        """Whether the model's error is below the baseline's: the median absolute errors, or
        the mean ones where half the targets or more equal the baseline (its median error is
        0); True where every target equals it (nothing to beat).

        Example:
            >>> LearningCheck(40, 1e-5, 7.0, 0.0, math.nan, mae=1e-5, baseline_mae=2.5).beats_baseline
            True
        """
        if not self.compares_means:
            return bool(self.mdae < self.baseline_mdae)
        return bool(self.baseline_mae == 0 or self.mae < self.baseline_mae)

    def warnings(self, name: str = "target") -> list[str]:
        """What to tell the user: one sentence per problem (empty when the model learnt).

        Args:
            name: what the target is called in the sentences (a column name).

        Returns:
            A sentence when the predictions are flat, and one when the model's error is not
            below the baseline's.

        Example:
            >>> LearningCheck(50, 3.0, 146.0, 31.0, 0.9).warnings()
            []
            >>> LearningCheck(50, 40.0, 146.0, 31.0, 0.9).warnings("price")[0][:47]
            "the model's median absolute error on price, 40,"
        """
        out = []
        if self.flat:
            out.append(
                f"the predicted {name} barely varies (the interquartile range of the "
                f"predictions is {100 * self.spread_ratio:.0f}% of the true values'): the model "
                "has not learnt to read the target yet, and a rank correlation of near-equal "
                "predictions means little; train longer (more steps or epochs)"
            )
        if not self.beats_baseline and math.isfinite(self.mdae):
            kind, mine, theirs = "median", self.mdae, self.baseline_mdae
            if self.compares_means:  # half the targets or more are the median: the mean errors
                kind, mine, theirs = "mean", self.mae, self.baseline_mae
            out.append(
                f"the model's {kind} absolute error on {name}, {mine:.4g}, is not below "
                f"that of predicting the training median ({self.baseline:.4g}) for every row, "
                f"{theirs:.4g}: it has learnt nothing useful about the target yet; "
                "train longer (more steps or epochs)"
            )
        return out


def learning_check(
    predicted: torch.Tensor | Sequence[float],
    true: torch.Tensor | Sequence[float],
    baseline: float,
    *,
    min_spread: float = MIN_SPREAD,
) -> LearningCheck:
    """Compare a model's target predictions with the constant baseline and with the targets.

    With ``e_i = |predicted_i - true_i|`` and ``b_i = |baseline - true_i|``: ``mdae =
    median(e)``, ``baseline_mdae = median(b)``, ``mae = mean(e)``, ``baseline_mae = mean(b)``
    and ``spread_ratio = IQR(predicted) / IQR(true)`` (interquartile ranges, numpy's default
    interpolation). The predictions are flat when ``spread_ratio < min_spread``. The model
    beats the baseline when ``mdae < baseline_mdae``; where half the targets or more equal the
    baseline, ``baseline_mdae`` is 0 and no model could beat it, so the mean errors are
    compared (:attr:`LearningCheck.beats_baseline`).

    Args:
        predicted: ``[N]`` the predicted target numbers (the medians).
        true: ``[N]`` the true targets.
        baseline: the constant baseline, usually the median of the *training* targets
            (:func:`target_numbers` of the training texts).
        min_spread: the flat threshold, in ``(0, 1]``.

    Returns:
        A :class:`LearningCheck`.

    Raises:
        ValueError: mismatched or empty inputs, values that are not finite, a non-finite
            baseline or ``min_spread`` outside ``(0, 1]``.

    Example:
        >>> import torch
        >>> true = torch.arange(100.0)
        >>> learning_check(torch.full((100,), 49.0) + 0.01 * true, true, 50.0).flat
        True
        >>> good = learning_check(true + 0.5, true, 50.0)
        >>> good.flat, good.beats_baseline, good.mdae, good.baseline_mdae
        (False, True, 0.5, 25.0)
    """
    p = torch.as_tensor(predicted, dtype=torch.float64).reshape(-1)
    y = torch.as_tensor(true, dtype=torch.float64).reshape(-1)
    if p.numel() != y.numel():
        raise ValueError(
            f"predicted and true must have one value each per target, got {p.numel()} and "
            f"{y.numel()}"
        )
    if p.numel() == 0:
        raise ValueError("predicted is empty: no target to check")
    for name, t in (("predicted", p), ("true", y)):
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"{name} must be finite, but it holds a nan or an infinite value")
    if not math.isfinite(float(baseline)):
        raise ValueError(f"baseline must be finite, got {baseline!r}")
    if not 0.0 < float(min_spread) <= 1.0:
        raise ValueError(f"min_spread must lie in (0, 1], got {min_spread!r}")
    p25, p75 = quantiles(p, (0.25, 0.75))
    y25, y75 = quantiles(y, (0.25, 0.75))
    spread = (p75 - p25) / (y75 - y25) if p.numel() >= 2 and y75 > y25 else math.nan
    return LearningCheck(
        count=int(p.numel()),
        mdae=_median((p - y).abs()),
        baseline=float(baseline),
        baseline_mdae=_median((float(baseline) - y).abs()),
        spread_ratio=float(spread),
        min_spread=float(min_spread),
        mae=float((p - y).abs().mean()),
        baseline_mae=float((float(baseline) - y).abs().mean()),
    )
