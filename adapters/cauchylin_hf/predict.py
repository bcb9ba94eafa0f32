r"""Predict numbers: the next number after a prompt, and every number of a text, with intervals.

The regression head gives, at every position, ``Y ~ Cauchy(loc_Y, scale_Y)`` in the model's value
space ``t = g(y)`` (``config.value_space``, see :mod:`cauchylin.value_space`). The number that
follows has median ``g^{-1}(loc_Y)`` and exact central intervals
``g^{-1}(loc_Y ± scale_Y tan(pi c / 2))`` of coverage ``c`` (``c = 0.5``: ``loc_Y ± scale_Y``).

* :func:`predict_values` — the next number after each prompt (a prompt ends where the number
  would start, e.g. ``"..., area "``);
* :func:`number_predictions` — every number of each text, read in one teacher-forced pass (the
  prediction for a number only sees the text before it, so it equals :func:`predict_values` on
  that prefix), with the field each number belongs to;
* :func:`number_metrics` — error, rank correlation and interval coverage of those predictions,
  for the target number of each text (the last one, or a named field) and per field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from cauchylin.metrics import interval_coverage, rank_correlation
from cauchylin.nn.modes import STANDARD
from cauchylin.value_space import value_quantiles

from .generation import position_ids_from_mask
from .numbers import find_numbers
from .tokenizer import NumericTokenizer

__all__ = [
    "DEFAULT_LEVELS",
    "NumberPredictions",
    "ValuePrediction",
    "field_of",
    "number_metrics",
    "number_predictions",
    "predict_values",
]

DEFAULT_LEVELS: tuple[float, ...] = (0.5, 0.8, 0.9)
"""Coverages of the central intervals reported by default."""

_FIELD_BREAK = re.compile(r"[,;:.!?()\[\]{}=\n\t]")


def field_of(prefix: str) -> str:
    """The field a number belongs to: the words just before it, after the last punctuation.

    ``"radius 17.99, mean area "`` gives ``"mean area"`` (at most the last three words); a number
    with no words before it since the last break gets ``""``.

    Args:
        prefix: the text before the number (from the previous number or the start).

    Returns:
        The field name (lower-case words joined by single spaces).

    Example:
        >>> field_of("radius 17.99, mean area "), field_of("3 boxes of "), field_of(", ")
        ('mean area', 'boxes of', '')
    """
    tail = _FIELD_BREAK.split(prefix)[-1]
    words = [w for w in re.findall(r"[^\W\d_]+", tail.lower())]
    return " ".join(words[-3:])


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

    Example:
        >>> import torch
        >>> p = ValuePrediction(torch.tensor([53.6]), torch.tensor([4.0]), torch.tensor([0.1]),
        ...                     torch.tensor([0.9]), (0.5,), torch.tensor([[48.4]]),
        ...                     torch.tensor([[59.3]]), "signed_log1p")
        >>> p.interval(0.5)
        (tensor([48.4000]), tensor([59.3000]))
        >>> p.rows()[0]["median"], p.rows()[0]["interval_50"]
        (53.6, [48.4, 59.3])
    """

    median: torch.Tensor
    loc: torch.Tensor
    scale: torch.Tensor
    p_num: torch.Tensor
    levels: tuple[float, ...]
    lower: torch.Tensor
    upper: torch.Tensor
    value_space: str

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
            ``[{"median", "loc", "scale", "p_num", "interval_50": [lo, hi], ...}, ...]`` with
            Python floats (numbers to 7 significant digits, ``inf`` for unbounded ends).

        Example:
            >>> import torch
            >>> p = ValuePrediction(torch.tensor([5.0]), torch.tensor([5.0]), torch.tensor([1.0]),
            ...                     torch.tensor([0.5]), (0.5,), torch.tensor([[4.0]]),
            ...                     torch.tensor([[6.0]]), "identity")
            >>> p.rows()
            [{'median': 5.0, 'loc': 5.0, 'scale': 1.0, 'p_num': 0.5, 'interval_50': [4.0, 6.0]}]
        """
        out = []
        for i in range(self.median.numel()):
            row: dict[str, Any] = {
                "median": _sig(self.median[i]),
                "loc": float(self.loc[i]),
                "scale": float(self.scale[i]),
                "p_num": float(self.p_num[i]),
            }
            for j, c in enumerate(self.levels):
                key = f"interval_{round(100 * c):d}"
                row[key] = [_sig(self.lower[i, j]), _sig(self.upper[i, j])]
            out.append(row)
        return out


def _prediction(
    loc: torch.Tensor,
    scale: torch.Tensor,
    p_num: torch.Tensor,
    levels: tuple[float, ...],
    value_space: str,
) -> ValuePrediction:
    loc, scale = loc.double(), scale.double()
    qs = [(1 - c) / 2 for c in levels]
    lower = torch.stack([value_quantiles(loc, scale, q, value_space) for q in qs], -1)
    upper = torch.stack([value_quantiles(loc, scale, 1 - q, value_space) for q in qs], -1)
    return ValuePrediction(
        median=value_quantiles(loc, scale, 0.5, value_space),
        loc=loc,
        scale=scale,
        p_num=p_num.double(),
        levels=levels,
        lower=lower.reshape(-1, len(levels)),
        upper=upper.reshape(-1, len(levels)),
        value_space=value_space,
    )


@torch.no_grad()
def _heads_at(
    model: Any,
    enc: Any,
    select: torch.Tensor,
    mode: str,
    temperature: float | None,
    num: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(loc_Y, scale_Y, P(<NUM>))`` at the positions ``select`` (``[B, S]`` bool)."""
    mask = enc["attention_mask"]
    hidden, _ = model.encode(
        enc["input_ids"],
        enc["numeric_values"],
        mask,
        use_cache=False,
        position_ids=position_ids_from_mask(mask),
    )
    _, act = model.heads(hidden[select], mode, temperature)
    log_p = act.S[..., num : num + 1].ovr_log_prob(
        act.threshold if act.threshold.ndim == 0 else act.threshold[num : num + 1]
    )[0][..., 0]
    return act.loc_Y, act.scale_Y, log_p.exp()


def predict_values(
    model: Any,
    tokenizer: NumericTokenizer,
    prompts: str | Sequence[str],
    *,
    levels: Sequence[float] = DEFAULT_LEVELS,
    mode: str = STANDARD,
    temperature: float | None = None,
    batch_size: int = 32,
) -> ValuePrediction:
    """The next number after each prompt: median, ``P(<NUM>)`` and exact central intervals.

    Each prompt is read up to its end (write it so that the number would come next, e.g.
    ``"radius 14.2, area "``); the heads at its last token give ``Y``. The model is put in eval
    mode. The numbers in the prompt are read as values, as in training.

    Args:
        model: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM`.
        tokenizer: its :class:`~cauchylin_hf.tokenizer.NumericTokenizer`.
        prompts: one prompt or a list.
        levels: coverages of the central intervals, each in ``(0, 1)``.
        mode: inference mode of the heads (default ``"standard"``, the training mode, whose
            intervals the training calibrates).
        temperature: ``T`` (default ``config.temperature``).
        batch_size: prompts per forward pass.

    Returns:
        A :class:`ValuePrediction` with one row per prompt.

    Raises:
        ValueError: an empty prompt list, a bad level or batch size, a tokenizer that is not a
            ``NumericTokenizer``, or a model without ``<NUM>``.

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
    model.eval()
    parts: list[tuple[torch.Tensor, ...]] = []
    for start in range(0, len(items), batch_size):
        enc = tokenizer(items[start : start + batch_size], padding=True, return_tensors="pt")
        mask = enc["attention_mask"].bool()
        last = mask.shape[1] - 1 - mask.flip(1).long().argmax(1)  # last real token per row
        select = torch.zeros_like(mask)
        select[torch.arange(mask.shape[0]), last] = True
        parts.append(_heads_at(model, enc, select, mode, temperature, num))
    loc, scale, p = (torch.cat(t) for t in zip(*parts, strict=True))
    return _prediction(loc, scale, p, lv, model.config.value_space)


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
    texts: Sequence[str],
    *,
    target_field: str | None = None,
    levels: Sequence[float] = DEFAULT_LEVELS,
    mode: str = STANDARD,
    temperature: float | None = None,
    batch_size: int = 32,
) -> NumberPredictions:
    """Predict every number of each text from the text before it, in one pass per batch.

    The target of a text is its last number, or with ``target_field`` the last number whose
    field (:func:`field_of`) equals it. Numbers cut off by the tokenizer's ``max_length`` are
    left out.

    Args:
        model: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM`.
        tokenizer: its :class:`~cauchylin_hf.tokenizer.NumericTokenizer`.
        texts: the texts (each with at least one number to count).
        target_field: the field of the target number (default: the last number of each text).
        levels: coverages of the central intervals.
        mode: inference mode of the heads (default ``"standard"``).
        temperature: ``T`` (default ``config.temperature``).
        batch_size: texts per forward pass.

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
    num = _check_model(model, tokenizer)
    items = list(texts)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    lv = _check_levels(levels)
    model.eval()
    parts: list[tuple[torch.Tensor, ...]] = []
    true: list[float] = []
    index: list[int] = []
    target: list[bool] = []
    fields: list[str] = []
    for start in range(0, len(items), batch_size):
        chunk = items[start : start + batch_size]
        enc = tokenizer(chunk, padding=True, return_tensors="pt")
        ids, mask = enc["input_ids"], enc["attention_mask"].bool()
        # position i predicts the token at i + 1: select i where i + 1 is a real <NUM>
        at_num = (ids[:, 1:] == num) & mask[:, 1:] & mask[:, :-1]
        select = torch.zeros_like(mask)
        select[:, :-1] = at_num
        if not bool(select.any()):
            continue
        parts.append(_heads_at(model, enc, select, mode, temperature, num))
        for b, text in enumerate(chunk):
            spans = find_numbers(text)
            real = mask[b].nonzero().flatten()
            at = ((ids[b] == num) & mask[b]).nonzero().flatten().tolist()  # k-th <NUM> = spans[k]
            kept = [k for k, i in enumerate(at) if i > int(real[0])]  # a first token: no prefix
            row_fields = [
                field_of(text[(spans[k - 1].end if k else 0) : spans[k].start]) for k in kept
            ]
            if target_field is None:
                tgt = len(spans) - 1
            else:
                hits = [k for k in kept if row_fields[kept.index(k)] == target_field]
                tgt = hits[-1] if hits else -1
            true.extend(float(v) for v in enc["numeric_values"][b, 1:][at_num[b]])
            index.extend([start + b] * len(kept))
            target.extend(k == tgt for k in kept)
            fields.extend(row_fields)
    if not parts:
        raise ValueError("no text holds a number: nothing to predict")
    loc, scale, p = (torch.cat(t) for t in zip(*parts, strict=True))
    return NumberPredictions(
        prediction=_prediction(loc, scale, p, lv, model.config.value_space),
        true=torch.tensor(true, dtype=torch.float64),
        text_index=torch.tensor(index),
        is_target=torch.tensor(target, dtype=torch.bool),
        fields=fields,
    )


def _summary(pred: ValuePrediction, true: torch.Tensor, keep: torch.Tensor) -> dict[str, float]:
    err = (pred.median[keep] - true[keep]).abs()
    out = {
        "count": float(int(keep.sum())),
        "mae": float(err.mean()) if err.numel() else math.nan,
        "mdae": float(err.median()) if err.numel() else math.nan,
        "spearman": rank_correlation(pred.median[keep], true[keep]) if err.numel() else math.nan,
        "p_num": float(pred.p_num[keep].mean()) if err.numel() else math.nan,
    }
    for j, c in enumerate(pred.levels):
        out[f"coverage_{round(100 * c):d}"] = interval_coverage(
            true[keep], pred.lower[keep, j], pred.upper[keep, j]
        )
    return out


def number_metrics(preds: NumberPredictions) -> dict[str, float]:
    """Errors of the predicted numbers: for the targets, for all numbers and per field.

    For each group: ``count``, ``mae`` and ``mdae`` (mean and median absolute error of the
    median), ``spearman`` (rank correlation with the truth), ``p_num`` (mean ``P(<NUM>)``) and
    ``coverage_50`` ... (share of true numbers inside each central interval; nominally the level).
    Keys: ``target/<name>``, ``all/<name>`` and ``field/<field>/<name>``.

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
    p, y = preds.prediction, preds.true
    out: dict[str, float] = {}
    groups = {"target": preds.is_target, "all": torch.ones_like(preds.is_target)}
    for name in dict.fromkeys(preds.fields):
        groups[f"field/{name or '(none)'}"] = torch.tensor([f == name for f in preds.fields])
    for group, keep in groups.items():
        for key, value in _summary(p, y, keep).items():
            out[f"{group}/{key}"] = value
    return out
