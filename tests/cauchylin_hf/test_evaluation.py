"""Metrics of the language model: hand-computed small cases and independent references
(explicit counting, numpy), and compute_metrics against the functions it gathers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from cauchylin_hf.evaluation import (
    compute_metrics,
    counted_positions,
    num_precision_recall_f1,
    regression_errors,
    token_accuracy,
)
from hypothesis import given
from hypothesis import strategies as st

from cauchylin import CauchyVector
from cauchylin.metrics import distribution_stats, ovr_prob_sum_median, ovr_prob_sums
from cauchylin.nn import Action

NUM = 7

# ------------------------------------------------------------------------------ hand-computed


def test_hand_computed_batch():
    labels = torch.tensor([[1, NUM, 3, -100], [NUM, NUM, 2, 5]])
    preds = torch.tensor([[1, NUM, 0, NUM], [NUM, 4, NUM, 5]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    # counted: (0,0) (0,1) (0,2) (1,0) (1,1) (1,2); correct: (0,0) (0,1) (1,0)
    assert token_accuracy(preds, labels, attention_mask=mask) == 3 / 6
    assert token_accuracy(preds, labels) == 4 / 7  # (1,3) counts without the mask
    # <NUM>: predicted at (0,1) (1,0) (1,2) [(0,3) is ignored]; true at (0,1) (1,0) (1,1)
    p, r, f = num_precision_recall_f1(preds, labels, NUM, attention_mask=mask)
    assert (p, r) == (2 / 3, 2 / 3) and math.isclose(f, 2 / 3)
    pred_v = torch.tensor([[0.0, 10.0, 0.0, 0.0], [1.0, -4.0, 0.0, 0.0]])
    target_v = torch.tensor([[9.0, 12.5, 9.0, 9.0], [0.0, 0.0, 9.0, 9.0]])
    # errors at <NUM> targets (0,1) (1,0) (1,1): 2.5, 1, 4 -> mean 2.5, median 2.5
    assert regression_errors(pred_v, target_v, labels, NUM, attention_mask=mask) == (2.5, 2.5)


def test_empty_cases_and_conventions():
    labels = torch.tensor([-100, -100])
    preds = torch.tensor([1, 2])
    assert math.isnan(token_accuracy(preds, labels))
    assert num_precision_recall_f1(preds, labels, NUM) == (0.0, 0.0, 0.0)
    assert num_precision_recall_f1(torch.tensor([1]), torch.tensor([NUM]), NUM) == (0.0, 0.0, 0.0)
    mae, mdae = regression_errors(torch.zeros(2), torch.zeros(2), labels, NUM)
    assert math.isnan(mae) and math.isnan(mdae)


def test_shape_errors():
    with pytest.raises(ValueError, match="predictions"):
        token_accuracy(torch.zeros(3, dtype=torch.long), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="attention_mask"):
        counted_positions(torch.zeros(3, dtype=torch.long), torch.ones(2))
    with pytest.raises(ValueError, match="target_values"):
        regression_errors(torch.zeros(3), torch.zeros(2), torch.zeros(3, dtype=torch.long), NUM)


# ------------------------------------------------------------------- independent references


@given(
    st.integers(min_value=0, max_value=2**31 - 1),
    st.integers(min_value=1, max_value=40),
)
def test_counting_metrics_against_explicit_loops(seed: int, n: int):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n)
    labels[rng.random(n) < 0.2] = -100
    preds = rng.integers(0, 10, n)
    mask = (rng.random(n) < 0.8).astype(np.int64)
    counted = [i for i in range(n) if labels[i] != -100 and mask[i] != 0]
    t = torch.as_tensor
    acc = token_accuracy(t(preds), t(labels), attention_mask=t(mask))
    if counted:
        assert acc == sum(preds[i] == labels[i] for i in counted) / len(counted)
    else:
        assert math.isnan(acc)
    tp = sum(1 for i in counted if preds[i] == NUM and labels[i] == NUM)
    fp = sum(1 for i in counted if preds[i] == NUM and labels[i] != NUM)
    fn = sum(1 for i in counted if preds[i] != NUM and labels[i] == NUM)
    p_ref = tp / (tp + fp) if tp + fp else 0.0
    r_ref = tp / (tp + fn) if tp + fn else 0.0
    f_ref = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    p, r, f = num_precision_recall_f1(t(preds), t(labels), NUM, attention_mask=t(mask))
    assert (p, r) == (p_ref, r_ref) and math.isclose(f, f_ref, abs_tol=1e-15)


def test_regression_errors_against_numpy():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, (6, 50))
    pred = rng.normal(size=(6, 50)) * 5
    target = rng.standard_cauchy((6, 50))
    target[labels != NUM] = np.nan  # never read
    mask = rng.random((6, 50)) < 0.9
    t = torch.as_tensor
    mae, mdae = regression_errors(t(pred), t(target), t(labels), NUM, attention_mask=t(mask))
    sel = (labels == NUM) & mask
    err = np.abs(pred[sel] - target[sel])
    assert mae == pytest.approx(err.mean(), rel=1e-12)
    assert mdae == pytest.approx(np.median(err), rel=1e-12)


def small_action(T_seed: int = 0) -> Action:
    g = torch.Generator().manual_seed(T_seed)
    act = Action(4, 6, threshold=0.5)
    with torch.no_grad():
        act.classifier.weight.copy_(torch.randn(6, 4, generator=g))
        act.classifier.bias.copy_(torch.randn(6, generator=g))
        act.b_noise.copy_(torch.tensor([0.3, -0.5, 0.2, 1.0]))
    return act


# ---------------------------------------------------------------------------- compute_metrics

ALL_NAMES = {
    "train/accuracy",
    "eval/accuracy",
    "eval/num_precision",
    "eval/num_recall",
    "eval/num_f1",
    "eval/reg_mae",
    "eval/reg_mdae",
    "dist/U_loc_mean",
    "dist/U_loc_median",
    "dist/U_loc_std",
    "dist/U_loc_iqr",
    "dist/U_scale_mean",
    "dist/U_scale_median",
    "dist/U_scale_std",
    "dist/U_scale_iqr",
    "dist/ovr_prob_sum_median_standard",
    "dist/ovr_prob_sum_median_causal",
}


def test_compute_metrics_names_and_values():
    act = small_action()
    g = torch.Generator().manual_seed(3)
    B, S = 2, 6
    labels = torch.randint(0, 6, (B, S), generator=g)
    labels[0, 1] = labels[1, 3] = 5  # <NUM> = 5 here
    labels[1, 5] = -100
    mask = torch.ones(B, S, dtype=torch.long)
    mask[0, 0] = 0
    loc = torch.randn(B, S, 4, generator=g)
    scale = torch.rand(B, S, 4, generator=g) + 0.1
    out = act(CauchyVector(loc, scale))
    preds = out.predict()
    target = torch.randn(B, S, generator=g)
    m = compute_metrics(
        labels=labels,
        predictions=preds,
        attention_mask=mask,
        num_token_id=5,
        pred_values=out.loc_Y.detach(),
        target_values=target,
        loc_U=loc,
        scale_U=scale,
        action=act,
        generator=torch.Generator().manual_seed(0),
        train_predictions=preds,
        train_labels=labels,
    )
    assert set(m) == ALL_NAMES
    assert all(isinstance(v, float) for v in m.values())
    assert m["eval/accuracy"] == token_accuracy(preds, labels, attention_mask=mask)
    assert m["train/accuracy"] == token_accuracy(preds, labels)
    assert (m["eval/num_precision"], m["eval/num_recall"], m["eval/num_f1"]) == (
        num_precision_recall_f1(preds, labels, 5, attention_mask=mask)
    )
    assert (m["eval/reg_mae"], m["eval/reg_mdae"]) == regression_errors(
        out.loc_Y, target, labels, 5, attention_mask=mask
    )
    for stat, v in distribution_stats(scale, mask).items():
        assert m[f"dist/U_scale_{stat}"] == v
    std_sums = ovr_prob_sums(act, CauchyVector(loc, scale))
    assert m["dist/ovr_prob_sum_median_standard"] == ovr_prob_sum_median(std_sums, mask)
    ind_sums = ovr_prob_sums(
        act, CauchyVector(loc, scale), mode="individual", generator=torch.Generator().manual_seed(0)
    )
    assert m["dist/ovr_prob_sum_median_causal"] == ovr_prob_sum_median(ind_sums, mask)
    # only what the inputs allow
    assert set(compute_metrics(labels=labels, predictions=preds)) == {"eval/accuracy"}
    assert set(compute_metrics(loc_U=loc)) == {
        f"dist/U_loc_{s}" for s in ("mean", "median", "std", "iqr")
    }
    assert compute_metrics() == {}


@pytest.mark.parametrize("bad", [float("nan"), 0.5, 2.0])
def test_attention_mask_must_be_zero_or_one(bad):
    """A NaN mask entry used to count as a position (NaN != 0); now every mask user refuses it."""
    labels = torch.tensor([1, 2, 3])
    preds = torch.tensor([1, 0, 3])
    mask = torch.tensor([1.0, bad, 1.0])
    match = r"attention_mask must hold only 0 and 1"
    with pytest.raises(ValueError, match=match):
        counted_positions(labels, mask)
    with pytest.raises(ValueError, match=match):
        token_accuracy(preds, labels, attention_mask=mask)
    with pytest.raises(ValueError, match=match):
        compute_metrics(labels=labels, predictions=preds, attention_mask=mask)
    # 0/1 float and bool masks agree
    assert token_accuracy(preds, labels, attention_mask=torch.tensor([1.0, 0.0, 1.0])) == 1.0
    assert token_accuracy(preds, labels, attention_mask=torch.tensor([True, False, True])) == 1.0
