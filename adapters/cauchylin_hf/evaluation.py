"""Held-out metrics of the causal language model: the token and number metrics, evaluate_model.

The documentation's page [Training][evaluation] shows them in use. Plain functions over tensors, each returning Python floats; :func:`compute_metrics` gathers
them, with the layer statistics of :mod:`cauchylin.metrics`, under these logging names, and
:func:`evaluate_model` computes them for a model on held-out texts:

======================================= =======================================================
name                                    what
======================================= =======================================================
``train/accuracy``                      token accuracy on a training batch
``eval/accuracy``                       token accuracy on an evaluation batch
``eval/num_precision``                  precision of predicting ``<NUM>``
``eval/num_recall``                     recall of ``<NUM>``
``eval/num_f1``                         F1 of ``<NUM>``
``eval/reg_mae``                        mean absolute error of ``loc_Y`` at ``<NUM>`` targets
``eval/reg_mdae``                       median absolute error of ``loc_Y`` at ``<NUM>`` targets
``dist/U_loc_{mean,median,std,iqr}``    statistics of ``loc_U`` over valid positions
``dist/U_scale_{mean,median,std,iqr}``  statistics of ``scale_U`` over valid positions
``dist/ovr_prob_sum_median_standard``   median over positions of ``sum_k P_k`` (standard mode)
``dist/ovr_prob_sum_median_causal``     the same in individual (causal) sampling
======================================= =======================================================

Conventions: *counted* positions are those whose label is not ``ignore_index`` and whose
``attention_mask`` (if given, a bool or 0/1 tensor: other values such as NaN are refused while
validation is on, see :func:`cauchylin.set_validate_args`) is 1; *valid* positions (for the
``dist/`` statistics) are those whose ``attention_mask`` is non-zero (all positions without a
mask). Predictions and labels are aligned: ``predictions[i]`` is the model's guess for
``labels[i]``. Medians interpolate linearly (as ``numpy.percentile``'s default). A metric with no
data is ``nan``, except precision / recall / F1, which are ``0.0`` when their denominator is 0
(the usual ``zero_division = 0`` convention: a model that never predicts ``<NUM>`` has
precision 0).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset

from cauchylin._validation import check_same_shape, positive_int, require_tensor
from cauchylin.metrics import (
    distribution_stats,
    ovr_prob_sum_median,
    ovr_prob_sums,
    quantiles,
    valid_positions,
)
from cauchylin.nn.modes import INDIVIDUAL, STANDARD
from cauchylin.vector import CauchyVector

from .batch import IGNORE_INDEX
from .data import NumericDataCollator
from .data.sampling import UniformSample
from .data.streaming import as_numeric_dataset
from .loss import before_numbers, next_token_targets
from .predict import KEPT_VALUES
from .tokenizer import NumericTokenizer

if TYPE_CHECKING:  # pragma: no cover
    from cauchylin.nn import Action

    from .predict import NumberReader

__all__ = [
    "EXACT_VALUES",
    "SAMPLE_VALUES",
    "compute_metrics",
    "counted_positions",
    "evaluate_model",
    "num_precision_recall_f1",
    "regression_errors",
    "token_accuracy",
]


def counted_positions(
    labels: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    ignore_index: int = IGNORE_INDEX,
) -> torch.Tensor:
    """Boolean ``[...]`` mask of the positions that count: ``labels != ignore_index`` and mask on.

    Args:
        labels: ``[...]`` integer labels.
        attention_mask: optional ``[...]``; 0 marks padding.
        ignore_index: the label of positions without a target.

    Returns:
        ``BoolTensor`` of ``labels``' shape.

    Raises:
        ValueError: mismatched shapes, a non-tensor argument, or (while validating) an
            ``attention_mask`` holding values other than 0/1, NaN included.

    Example:
        >>> import torch
        >>> counted_positions(torch.tensor([3, -100, 5]), torch.tensor([1, 1, 0]))
        tensor([ True, False, False])
    """
    require_tensor("labels", labels)
    counted = labels != ignore_index
    if attention_mask is not None:
        require_tensor("attention_mask", attention_mask)
        check_same_shape(labels=labels, attention_mask=attention_mask)
        counted = counted & valid_positions(attention_mask)
    return counted


def token_accuracy(
    predictions: torch.Tensor,
    labels: torch.Tensor,
    *,
    attention_mask: torch.Tensor | None = None,
    ignore_index: int = IGNORE_INDEX,
) -> float:
    """Fraction of counted positions where ``predictions == labels``.

    Args:
        predictions: ``[...]`` predicted token ids (e.g. ``ActionOutput.predict()``).
        labels: ``[...]`` true token ids, ``ignore_index`` where there is none.
        attention_mask: optional ``[...]``.
        ignore_index: label of positions that do not count.

    Returns:
        ``#correct / #counted``; ``nan`` when nothing is counted.

    Raises:
        ValueError: mismatched shapes, or an ``attention_mask`` other than 0/1 (see
            :func:`counted_positions`).

    Example:
        >>> import torch
        >>> token_accuracy(torch.tensor([1, 2, 3, 4]), torch.tensor([1, 0, 3, -100]))
        0.6666666666666666
    """
    require_tensor("predictions", predictions)
    check_same_shape(labels=labels, predictions=predictions)
    counted = counted_positions(labels, attention_mask, ignore_index=ignore_index)
    n = int(counted.sum())
    if n == 0:
        return math.nan
    correct = int(((predictions == labels) & counted).sum())
    return correct / n


def num_precision_recall_f1(
    predictions: torch.Tensor,
    labels: torch.Tensor,
    num_token_id: int,
    *,
    attention_mask: torch.Tensor | None = None,
    ignore_index: int = IGNORE_INDEX,
) -> tuple[float, float, float]:
    """Precision, recall and F1 of the ``<NUM>`` decision over counted positions.

    With ``tp = #(pred = NUM and label = NUM)``: precision ``= tp / #(pred = NUM)``,
    recall ``= tp / #(label = NUM)``, F1 ``= 2 P R / (P + R)`` (each 0 when its denominator is 0).

    Args:
        predictions: ``[...]`` predicted ids.
        labels: ``[...]`` true ids.
        num_token_id: the id of ``<NUM>``.
        attention_mask: optional ``[...]``.
        ignore_index: label of positions that do not count.

    Returns:
        ``(precision, recall, f1)``.

    Raises:
        ValueError: mismatched shapes, or an ``attention_mask`` other than 0/1 (see
            :func:`counted_positions`).

    Example:
        >>> import torch
        >>> pred = torch.tensor([9, 9, 1, 9])
        >>> lab = torch.tensor([9, 2, 9, 9])
        >>> num_precision_recall_f1(pred, lab, 9)  # tp 2, predicted 3, true 3
        (0.6666666666666666, 0.6666666666666666, 0.6666666666666666)
    """
    require_tensor("predictions", predictions)
    check_same_shape(labels=labels, predictions=predictions)
    counted = counted_positions(labels, attention_mask, ignore_index=ignore_index)
    pred_num = (predictions == num_token_id) & counted
    true_num = (labels == num_token_id) & counted
    tp = int((pred_num & true_num).sum())
    n_pred, n_true = int(pred_num.sum()), int(true_num.sum())
    precision = tp / n_pred if n_pred else 0.0
    recall = tp / n_true if n_true else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return precision, recall, f1


def regression_errors(
    pred_values: torch.Tensor,
    target_values: torch.Tensor,
    labels: torch.Tensor,
    num_token_id: int,
    *,
    attention_mask: torch.Tensor | None = None,
    ignore_index: int = IGNORE_INDEX,
) -> tuple[float, float]:
    """Mean and median absolute error of the regression prediction at ``<NUM>`` targets.

    Args:
        pred_values: ``[...]`` predicted values (``loc_Y``, the Cauchy median).
        target_values: ``[...]`` true values (read only at ``<NUM>`` targets).
        labels: ``[...]`` true ids; the positions with ``labels == num_token_id`` (and counted)
            are scored.
        num_token_id: the id of ``<NUM>``.
        attention_mask: optional ``[...]``.
        ignore_index: label of positions that do not count.

    Returns:
        ``(mae, mdae)``; ``(nan, nan)`` without ``<NUM>`` targets.

    Raises:
        ValueError: mismatched shapes, or an ``attention_mask`` other than 0/1 (see
            :func:`counted_positions`).

    Example:
        >>> import torch
        >>> regression_errors(torch.tensor([1.0, 5.0, 0.0]), torch.tensor([2.0, 0.0, 4.0]),
        ...                   torch.tensor([7, 3, 7]), 7)
        (2.5, 2.5)
    """
    require_tensor("pred_values", pred_values)
    require_tensor("target_values", target_values)
    check_same_shape(labels=labels, pred_values=pred_values, target_values=target_values)
    m = counted_positions(labels, attention_mask, ignore_index=ignore_index) & (
        labels == num_token_id
    )
    err = (pred_values.detach().double()[m] - target_values.detach().double()[m]).abs()
    if err.numel() == 0:
        return math.nan, math.nan
    return float(err.mean()), quantiles(err, (0.5,))[0]


def compute_metrics(
    *,
    labels: torch.Tensor | None = None,
    predictions: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    ignore_index: int = IGNORE_INDEX,
    num_token_id: int | None = None,
    pred_values: torch.Tensor | None = None,
    target_values: torch.Tensor | None = None,
    loc_U: torch.Tensor | None = None,
    scale_U: torch.Tensor | None = None,
    action: Action | None = None,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    chunk_size: int | None = None,
    train_predictions: torch.Tensor | None = None,
    train_labels: torch.Tensor | None = None,
    train_attention_mask: torch.Tensor | None = None,
) -> dict[str, float]:
    """All metrics that the given inputs allow, under their logging names (the module's table).

    The ``eval/`` metrics should come from deterministic inference (standard mode,
    ``predictions = ActionOutput.predict()``, ``pred_values = loc_Y``).

    * ``train/accuracy`` — needs ``train_predictions`` and ``train_labels``
      (``train_attention_mask`` optional);
    * ``eval/accuracy`` — needs ``predictions`` and ``labels``;
    * ``eval/num_precision``, ``eval/num_recall``, ``eval/num_f1`` — also ``num_token_id``;
    * ``eval/reg_mae``, ``eval/reg_mdae`` — also ``pred_values`` and ``target_values``;
    * ``dist/U_loc_*`` / ``dist/U_scale_*`` (``mean``, ``median``, ``std``, ``iqr``) — ``loc_U`` /
      ``scale_U`` (``[..., C]``) over positions with ``attention_mask != 0``;
    * ``dist/ovr_prob_sum_median_standard`` and ``dist/ovr_prob_sum_median_causal`` — also
      ``action`` (standard mode at ``temperature``; individual sampling at ``temperature`` with
      ``generator``).

    Args:
        labels: ``[...]`` evaluation labels (``ignore_index`` where none).
        predictions: ``[...]`` predicted ids aligned with ``labels``.
        attention_mask: optional ``[...]`` of the evaluation batch.
        ignore_index: label of positions that do not count.
        num_token_id: id of ``<NUM>``.
        pred_values: ``[...]`` regression predictions (``loc_Y``).
        target_values: ``[...]`` true values.
        loc_U: ``[..., C]``.
        scale_U: ``[..., C]``.
        action: the Action layer, for the OvR probability sums.
        temperature: temperature of those modes.
        generator: generator of the individual draws.
        chunk_size: positions per chunk for the probability sums.
        train_predictions: ``[...]`` predictions on a training batch.
        train_labels: ``[...]`` its labels.
        train_attention_mask: its optional mask.

    Returns:
        ``dict`` from metric name to float.

    Raises:
        ValueError: mismatched shapes, or an ``attention_mask`` other than 0/1 (see
            :func:`counted_positions`).

    Example:
        >>> import torch
        >>> m = compute_metrics(labels=torch.tensor([5, 7, 7]), predictions=torch.tensor([5, 7, 1]),
        ...                     num_token_id=7)
        >>> m["eval/accuracy"], m["eval/num_recall"]
        (0.6666666666666666, 0.5)
    """
    out: dict[str, float] = {}
    if train_predictions is not None and train_labels is not None:
        out["train/accuracy"] = token_accuracy(
            train_predictions,
            train_labels,
            attention_mask=train_attention_mask,
            ignore_index=ignore_index,
        )
    if predictions is not None and labels is not None:
        out["eval/accuracy"] = token_accuracy(
            predictions, labels, attention_mask=attention_mask, ignore_index=ignore_index
        )
        if num_token_id is not None:
            p, r, f = num_precision_recall_f1(
                predictions,
                labels,
                num_token_id,
                attention_mask=attention_mask,
                ignore_index=ignore_index,
            )
            out["eval/num_precision"], out["eval/num_recall"], out["eval/num_f1"] = p, r, f
    if (
        labels is not None
        and num_token_id is not None
        and pred_values is not None
        and target_values is not None
    ):
        mae, mdae = regression_errors(
            pred_values,
            target_values,
            labels,
            num_token_id,
            attention_mask=attention_mask,
            ignore_index=ignore_index,
        )
        out["eval/reg_mae"], out["eval/reg_mdae"] = mae, mdae
    for name, values in (("U_loc", loc_U), ("U_scale", scale_U)):
        if values is not None:
            for stat, v in distribution_stats(values, attention_mask).items():
                out[f"dist/{name}_{stat}"] = v
    if action is not None and loc_U is not None and scale_U is not None:
        U = CauchyVector(loc_U.detach(), scale_U.detach())
        for key, mode in (("standard", STANDARD), ("causal", INDIVIDUAL)):
            sums = ovr_prob_sums(
                action,
                U,
                mode=mode,
                temperature=temperature,
                generator=generator,
                chunk_size=chunk_size,
            )
            out[f"dist/ovr_prob_sum_median_{key}"] = ovr_prob_sum_median(sums, attention_mask)
    return out


# --------------------------------------------------------------------------------------------
# A model on held-out texts


@torch.no_grad()
def evaluate_model(
    model: nn.Module,
    tokenizer: NumericTokenizer,
    data: Dataset | Iterable[str] | os.PathLike[str],
    *,
    batch_size: int = 16,
    max_length: int | None = None,
    seed: int = 0,
    progress: bool = False,
    num_workers: int = 0,
    numbers: NumberReader | None = None,
) -> dict[str, float]:
    """Held-out metrics (:func:`compute_metrics`) and the mean loss parts.

    One forward pass per batch (eval mode, no gradients) gives the loss parts and the individual
    representation U at every position. Position ``i`` is scored against token ``i + 1`` (the
    model's shift) where both positions are real tokens. Predictions are ``argmax_k P_k`` in
    standard mode at the model's temperature and the regression prediction is the median number
    ``g^{-1}(loc_Y)`` of the model's value space (``loc_Y`` itself for ``"identity"``),
    computed in chunks of positions so that no ``[batch, seq, vocab]`` tensor is formed.
    :func:`compute_metrics` then gives token accuracy, ``<NUM>`` precision / recall / F1,
    regression MAE and median absolute error, statistics of ``loc_U`` and ``scale_U``, and the
    median OvR probability sums (standard and causal sampling, the latter drawn with a generator
    seeded by ``seed``).

    The data is read a batch at a time and scored as it goes (a streamed or memory-mapped
    dataset of any size takes bounded memory). Counts (accuracy, ``<NUM>`` precision / recall /
    F1, the loss) are running sums; the absolute errors at ``<NUM>`` targets are kept (one
    float64 each) up to :data:`~cauchylin_hf.predict.KEPT_VALUES` of them for the exact mean
    and median, and past that ``eval/reg_mae`` is a running mean and ``eval/reg_mdae`` the
    median of a uniform random sample (seeded by ``seed``) of that many errors, its size under
    ``eval/reg_mdae_sample`` (a key present only then). Up to :data:`EXACT_VALUES` values of ``loc_U``
    (positions times features) every statistic is :func:`compute_metrics`'s on everything; past
    that the ``dist/`` means and standard deviations are running ones over every position and
    their medians and interquartile ranges those of a uniform random sample (seeded by
    ``seed``) of :data:`SAMPLE_VALUES` values (of positions, for the probability sums).

    Args:
        model: the causal language model (a ``CauchyLMForCausalLM``).
        tokenizer: the numeric tokenizer (pad id).
        data: held-out texts, a dataset file (a ``Path``: JSONL with a ``"text"`` field or one
            text per line), or an encoded dataset.
        batch_size: examples per forward pass.
        max_length: cut texts to this many tokens (texts only).
        seed: seed of the causal-sampling draws of the probability sums.
        progress: show a tqdm bar.
        num_workers: ``DataLoader`` worker processes that read and encode batches ahead.
        numbers: also read the predictions of every number from the same forward passes: a
            :class:`~cauchylin_hf.predict.NumberReader` given the same texts in the same order
            (one per row of ``data``) and a ``sink`` (e.g.
            :meth:`~cauchylin_hf.predict.NumberMetrics.add`), so that the texts are read once
            for both the metrics here and the number metrics.

    Returns:
        A dict of floats: the ``eval/...`` and ``dist/...`` metrics of ``compute_metrics``, plus
        ``eval/loss``, ``eval/cls_loss``, ``eval/reg_loss`` (weighted by the counted positions and
        ``<NUM>`` targets of each batch, i.e. the loss of the whole set), ``eval/positions``
        (counted positions) and ``eval/num_targets`` (``<NUM>`` targets).

    Raises:
        ValueError: for empty data or a bad batch size; ``numbers`` whose texts are not the
            rows of ``data`` (fewer or more), or with an iterable dataset read by more than one
            worker (its rows would not come in order).

    Example:
        >>> import tempfile
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
        >>> model, ntok = CauchyLMForCausalLM.from_base(
        ...     tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True)
        >>> metrics = evaluate_model(model, ntok, ["2 boxes of 6 eggs hold 12 eggs."])
        >>> metrics["eval/positions"], metrics["eval/num_targets"]  # 31 ids (with eos), 2 <NUM> next
        (30.0, 2.0)
        >>> metrics["eval/loss"] == metrics["eval/cls_loss"] + metrics["eval/reg_loss"]
        True
        >>> 0.0 <= metrics["eval/accuracy"] <= 1.0, "eval/num_f1" in metrics
        (True, True)
    """
    batch_size = positive_int("batch_size", batch_size)
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
        raise ValueError(f"num_workers must be an int >= 0, got {num_workers!r}")
    loader = DataLoader(
        as_numeric_dataset(data, tokenizer, name="data", max_length=max_length),
        batch_size=batch_size,
        shuffle=False,
        collate_fn=NumericDataCollator(tokenizer, padding_side="right"),
        num_workers=num_workers,
    )
    if numbers is not None and num_workers > 1 and isinstance(loader.dataset, IterableDataset):
        # each worker streams its own share: the rows would not come in the texts' order
        raise ValueError(
            "numbers reads the texts in order: an iterable dataset takes num_workers <= 1 with it"
        )
    batches: Iterable[dict[str, torch.Tensor]] = loader
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(loader, desc="evaluate", leave=False)
    get_base_model = getattr(model, "get_base_model", None)  # a PEFT wrapper
    inner: Any = get_base_model() if callable(get_base_model) else model
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        scores = _PositionScores(inner, device, seed)
        losses = _LossSums()
        for batch in batches:
            batch = {k: v.to(device) for k, v in batch.items()}
            out = model(**batch)
            losses.add(out, batch, inner.config.num_token_id)
            scores.add(_batch_positions(inner, batch, out, numbers))
        metrics = scores.result()
        if numbers is not None:
            numbers.finish()
    finally:
        model.train(was_training)
    metrics.update(losses.metrics(float(getattr(inner.config, "reg_weight", 1.0))))
    return metrics


@dataclass
class _LossSums:
    """The loss of the whole set: each batch's mean loss parts weighted by what they counted."""

    cls_sum: float = 0.0
    reg_sum: float = 0.0
    cls_n: int = 0
    reg_n: int = 0

    def add(self, out: Any, batch: Mapping[str, torch.Tensor], num_token_id: int | None) -> None:
        n_cls = _count(out, "cls_count", batch, num_token_id)
        n_reg = _count(out, "reg_count", batch, num_token_id)
        self.cls_sum += float(out.cls_loss) * n_cls
        self.reg_sum += float(out.reg_loss) * n_reg
        self.cls_n += n_cls
        self.reg_n += n_reg

    def metrics(self, reg_weight: float) -> dict[str, float]:
        cls_mean = self.cls_sum / self.cls_n if self.cls_n else math.nan
        reg_mean = self.reg_sum / self.reg_n if self.reg_n else 0.0
        return {
            "eval/loss": cls_mean + reg_weight * reg_mean,
            "eval/cls_loss": cls_mean,
            "eval/reg_loss": reg_mean,
            "eval/positions": float(self.cls_n),
            "eval/num_targets": float(self.reg_n),
        }


def _count(
    out: Any,
    name: str,
    batch: Mapping[str, torch.Tensor],
    num_token_id: int | None,
) -> int:
    """A loss count of the model output (``cls_count`` / ``reg_count``), else from the batch."""
    value = getattr(out, name, None)
    if value is not None:
        return int(value)
    shifted = next_token_targets(batch["labels"], None, batch["attention_mask"])
    assert shifted.mask is not None
    counted = (shifted.labels != IGNORE_INDEX) & shifted.mask
    if name == "reg_count":
        counted = counted & (shifted.labels == num_token_id)
    return int(counted.sum())


def _batch_positions(
    inner: Any, batch: Mapping[str, torch.Tensor], out: Any, numbers: NumberReader | None = None
) -> dict[str, torch.Tensor]:
    """The scored positions of one batch (labels, predictions, U, ...), on the CPU; with
    ``numbers``, the predictions of the batch's numbers are read too."""
    action = inner.action
    temperature = float(inner.config.temperature)
    chunk = max(1, 2**22 // max(int(action.num_classes), 1))
    # position i predicts token i + 1: the model's shift; keep the real pairs
    shifted = next_token_targets(batch["labels"], batch["target_values"], batch["attention_mask"])
    pair = shifted.mask
    assert pair is not None and shifted.target_values is not None
    loc_u = shifted.positions(out.loc_U)[pair]
    scale_u = shifted.positions(out.scale_U)[pair]
    # the numbers are read as everywhere else: with the per-context readouts
    codes, numbers_at = inner.readout_context(
        batch["input_ids"], batch.get("numeric_values"), batch["attention_mask"]
    )
    codes = shifted.positions(codes)[pair]
    if numbers_at is not None:
        numbers_at = shifted.positions(numbers_at)[pair]
    predictions, pred_values, sums = [], [], []
    for start in range(0, loc_u.shape[0], chunk):
        U = CauchyVector(loc_u[start : start + chunk], scale_u[start : start + chunk])
        part = None if numbers_at is None else numbers_at[start : start + chunk]
        act = action(U, STANDARD, temperature, context=codes[start : start + chunk], numbers=part)
        predictions.append(act.predict().cpu())
        pred_values.append(act.value_median().float().cpu())
        # the standard mode's OvR probability sums, as ovr_prob_sums computes them (the same
        # chunks; the context moves only Y), for the streamed statistics
        sums.append(act.ovr_probs().to(torch.float64).sum(-1))
    if numbers is not None:
        at = before_numbers(batch["input_ids"], batch["attention_mask"], numbers.num)[:, :-1]
        _read_numbers(inner, batch, at[pair], loc_u, scale_u, codes, numbers_at, numbers)
    return {
        "labels": shifted.labels[pair].cpu(),
        "target_values": shifted.target_values[pair].cpu(),
        "loc_U": loc_u.float().cpu(),
        "scale_U": scale_u.float().cpu(),
        "predictions": torch.cat(predictions),
        "pred_values": torch.cat(pred_values),
        "sums_standard": torch.cat(sums),
    }


def _read_numbers(
    inner: Any,
    batch: Mapping[str, torch.Tensor],
    at: torch.Tensor,
    loc_u: torch.Tensor,
    scale_u: torch.Tensor,
    codes: torch.Tensor,
    numbers_at: torch.Tensor | None,
    reader: NumberReader,
) -> None:
    """Hand ``reader`` the heads at the batch's positions before a ``<NUM>`` (``at`` among the
    scored pairs, in row-major order as :func:`~cauchylin_hf.loss.before_numbers`)."""
    heads = None
    if bool(at.any()):
        U = CauchyVector(loc_u[at], scale_u[at])
        part = None if numbers_at is None else numbers_at[at]
        temperature = float(inner.config.temperature)
        act = inner.action(U, STANDARD, temperature, context=codes[at], numbers=part)
        heads = tuple(t.cpu() for t in reader.heads(act, codes[at]))
    ids = batch["input_ids"].cpu()
    values = batch.get("numeric_values")
    values = torch.zeros(ids.shape) if values is None else values.cpu()
    reader.read(ids, batch["attention_mask"].cpu(), values, heads)  # type: ignore[arg-type]


EXACT_VALUES = 2**22
""":func:`evaluate_model` holds up to this many values of ``loc_U`` (positions times features)
and computes every metric from all of them at once; past it, it streams (see there)."""

SAMPLE_VALUES = 2**18
"""The size of the uniform random sample the medians and interquartile ranges of the ``dist/``
statistics read once :func:`evaluate_model` streams."""


class _Spread:
    """The mean and (population) standard deviation of a stream of floats (Chan et al.'s
    pairwise update, in float64) and a uniform sample for its quantiles."""

    def __init__(self, seed: int) -> None:
        self.n = 0
        self.mean = 0.0
        self.m2 = 0.0
        self.sample = UniformSample(SAMPLE_VALUES, 1, seed=seed)

    def add(self, values: torch.Tensor) -> None:
        x = values.detach().to(torch.float64).reshape(-1).cpu()
        nb = int(x.numel())
        if nb == 0:
            return
        mb = float(x.mean())
        m2b = float((x - mb).square().sum())
        n = self.n + nb
        delta = mb - self.mean
        self.mean += delta * nb / n
        self.m2 += m2b + delta * delta * self.n * nb / n
        self.n = n
        self.sample.add(x.numpy()[:, None])

    def quantiles(self, qs: tuple[float, ...]) -> list[float]:
        return quantiles(torch.from_numpy(self.sample.values()[:, 0]), qs)

    def stats(self) -> dict[str, float]:
        """The keys of :func:`cauchylin.metrics.distribution_stats`."""
        if self.n == 0:
            return {"mean": math.nan, "median": math.nan, "std": math.nan, "iqr": math.nan}
        q25, q50, q75 = self.quantiles((0.25, 0.5, 0.75))
        return {
            "mean": self.mean,
            "median": q50,
            "std": math.sqrt(self.m2 / self.n),
            "iqr": q75 - q25,
        }


class _PositionScores:
    """The position metrics of :func:`evaluate_model`, a batch at a time: the batches are held
    (and scored by :func:`compute_metrics` at the end) up to :data:`EXACT_VALUES` values of
    ``loc_U``, then streamed into running counts, the kept errors and samples."""

    def __init__(self, inner: Any, device: torch.device, seed: int) -> None:
        self.inner = inner
        self.device = device
        self.num = inner.config.num_token_id
        self.temperature = float(inner.config.temperature)
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.held: list[dict[str, torch.Tensor]] | None = []
        self.values = 0
        self.counts = dict.fromkeys(("counted", "correct", "tp", "pred_num", "true_num"), 0)
        # the absolute errors at <NUM> targets: all of them up to KEPT_VALUES, then a sample
        self.errors = UniformSample(KEPT_VALUES, 1, seed=seed + 4)
        self.err_sum = 0.0
        self.spreads = {
            name: _Spread(seed + k)
            for k, name in enumerate(("U_loc", "U_scale", "standard", "causal"))
        }

    def add(self, part: dict[str, torch.Tensor]) -> None:
        if self.held is not None:
            self.held.append(part)
            self.values += part["loc_U"].numel()
            if self.values <= EXACT_VALUES:
                return
            held, self.held = self.held, None
            for p in held:
                self._stream(p)
            return
        self._stream(part)

    def _stream(self, part: dict[str, torch.Tensor]) -> None:
        labels, predictions = part["labels"], part["predictions"]
        counted = counted_positions(labels)
        c = self.counts
        c["counted"] += int(counted.sum())
        c["correct"] += int(((predictions == labels) & counted).sum())
        if self.num is not None:
            pred_num = (predictions == self.num) & counted
            true_num = (labels == self.num) & counted
            c["tp"] += int((pred_num & true_num).sum())
            c["pred_num"] += int(pred_num.sum())
            c["true_num"] += int(true_num.sum())
            m = true_num
            err = (part["pred_values"].double()[m] - part["target_values"].double()[m]).abs()
            self.errors.add(err.numpy()[:, None])
            self.err_sum += float(err.sum())
        self.spreads["U_loc"].add(part["loc_U"])
        self.spreads["U_scale"].add(part["scale_U"])
        self.spreads["standard"].add(part["sums_standard"])
        U = CauchyVector(part["loc_U"].to(self.device), part["scale_U"].to(self.device))
        sums = ovr_prob_sums(
            self.inner.action,
            U,
            mode=INDIVIDUAL,
            temperature=self.temperature,
            generator=self.generator,
        )
        self.spreads["causal"].add(sums)

    def result(self) -> dict[str, float]:
        if self.held is not None:
            if not self.held:
                raise ValueError("data is empty: no position to score")
            kept = {k: torch.cat([p[k] for p in self.held]) for k in self.held[0]}
            return compute_metrics(
                labels=kept["labels"],
                predictions=kept["predictions"],
                num_token_id=self.num,
                pred_values=kept["pred_values"],
                target_values=kept["target_values"],
                loc_U=kept["loc_U"].to(self.device),
                scale_U=kept["scale_U"].to(self.device),
                action=self.inner.action,
                temperature=self.temperature,
                generator=self.generator,
            )
        c = self.counts
        out = {"eval/accuracy": c["correct"] / c["counted"] if c["counted"] else math.nan}
        if self.num is not None:
            precision = c["tp"] / c["pred_num"] if c["pred_num"] else 0.0
            recall = c["tp"] / c["true_num"] if c["true_num"] else 0.0
            f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
            out["eval/num_precision"], out["eval/num_recall"], out["eval/num_f1"] = (
                precision,
                recall,
                f1,
            )
            err = torch.from_numpy(self.errors.values()[:, 0])
            if err.numel() == 0:
                out["eval/reg_mae"], out["eval/reg_mdae"] = math.nan, math.nan
            else:
                # every error while they fit; past that the mean of every error (running sum)
                # and the median of a uniform sample of them
                sampled = self.errors.sampled
                mae = self.err_sum / self.errors.offered if sampled else float(err.mean())
                out["eval/reg_mae"] = mae
                out["eval/reg_mdae"] = quantiles(err, (0.5,))[0]
                if sampled:
                    out["eval/reg_mdae_sample"] = float(self.errors.size)
        for name in ("U_loc", "U_scale"):
            for stat, v in self.spreads[name].stats().items():
                out[f"dist/{name}_{stat}"] = v
        for key in ("standard", "causal"):
            out[f"dist/ovr_prob_sum_median_{key}"] = self.spreads[key].quantiles((0.5,))[0]
        return out
