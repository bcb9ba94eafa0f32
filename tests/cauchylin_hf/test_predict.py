"""Predicting numbers: predict_values, number_predictions / number_metrics, and the training
settings behind them (w_num scale, classifier learning rate)."""

from __future__ import annotations

import math
import random
import tempfile

import pytest
import torch
from cauchylin_hf.app.corpus import train_corpus_tokenizer
from cauchylin_hf.model import CauchyLMForCausalLM
from cauchylin_hf.predict import (
    field_of,
    learning_check,
    number_metrics,
    number_predictions,
    predict_values,
    target_numbers,
)
from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
from cauchylin_hf.tokenizer import NumericTokenizer
from cauchylin_hf.training import make_trainer, train
from transformers import AutoModelForCausalLM, Qwen2Config


@pytest.fixture(scope="module")
def small():
    torch.manual_seed(0)
    return CauchyLMForCausalLM.from_base(
        tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True
    )


def test_prompt_prediction_equals_the_teacher_forced_one(small):
    """predict_values on a prefix reads the same heads as the pass over the whole text."""
    model, ntok = small
    texts = ["width 3, height 4, area 12.", "width 10, height 2.5, area 25."]
    full = number_predictions(model, ntok, texts)
    prompts = ["width 3, height 4, area ", "width 10, height 2.5, area "]
    one = predict_values(model, ntok, prompts)
    tgt = full.is_target
    torch.testing.assert_close(one.loc, full.prediction.loc[tgt], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(one.scale, full.prediction.scale[tgt], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(one.p_num, full.prediction.p_num[tgt], rtol=1e-5, atol=1e-6)
    assert full.fields == ["width", "height", "area"] * 2
    assert full.true.tolist() == [3.0, 4.0, 12.0, 10.0, 2.5, 25.0]


def test_left_and_right_padding_agree(small):
    model, ntok = small
    prompts = ["a 1 and", "the average of 18 and 74 is "]
    right = predict_values(model, ntok, prompts)
    ntok.padding_side = "left"
    try:
        left = predict_values(model, ntok, prompts)
    finally:
        ntok.padding_side = "right"
    torch.testing.assert_close(left.loc, right.loc, rtol=1e-5, atol=1e-5)


def test_intervals_are_exact_cauchy_quantiles(small):
    model, ntok = small
    pred = predict_values(model, ntok, ["x 5, y "], levels=(0.5, 0.9))
    lo, hi = pred.interval(0.5)
    g_inv = lambda t: math.copysign(math.expm1(abs(t)), t)  # noqa: E731
    loc, scale = float(pred.loc[0]), float(pred.scale[0])
    assert math.isclose(lo.item(), g_inv(loc - scale), rel_tol=1e-9)
    assert math.isclose(hi.item(), g_inv(loc + scale), rel_tol=1e-9)
    _, hi9 = pred.interval(0.9)
    assert math.isclose(hi9.item(), g_inv(loc + scale * math.tan(math.pi * 0.45)), rel_tol=1e-9)
    with pytest.raises(ValueError, match="not among"):
        pred.interval(0.8)


def test_bad_arguments_are_refused(small):
    model, ntok = small
    with pytest.raises(ValueError, match="empty"):
        predict_values(model, ntok, [])
    with pytest.raises(ValueError, match="levels"):
        predict_values(model, ntok, ["x"], levels=(1.0,))
    with pytest.raises(ValueError, match="NumericTokenizer"):
        predict_values(model, ntok.tokenizer, ["x"])
    with pytest.raises(ValueError, match="no text holds a number"):
        number_predictions(model, ntok, ["no numbers here"])


def test_field_names():
    assert field_of("radius 17.99, mean area ") == "mean area"
    assert field_of("Ann had ") == "ann had"
    assert field_of("(s1 ") == "s1"  # digits glued to a letter are part of the word
    assert field_of(", fuel heating oil -> price ") == "price"  # an arrow is a break
    assert field_of("") == ""


def test_number_metrics_against_hand_computed_values(small):
    model, ntok = small
    texts = ["width 3, height 4, area 12.", "width 10, height 2.5, area 25."]
    preds = number_predictions(model, ntok, texts)
    m = number_metrics(preds)
    med, y = preds.prediction.median, preds.true
    tgt = preds.is_target
    assert m["target/count"] == 2
    assert math.isclose(m["target/mae"], float((med[tgt] - y[tgt]).abs().mean()))
    lo, hi = preds.prediction.interval(0.5)
    inside = ((lo <= y) & (y <= hi)).double().mean().item()
    assert math.isclose(m["all/coverage_50"], inside)
    assert m["field/area/count"] == 2


def test_w_num_scale_sets_the_norm_against_the_embeddings():
    base = tiny_base_model("qwen2")
    rows = base.get_input_embeddings().weight.detach().norm(dim=1).mean().item()
    model = CauchyLMForCausalLM.from_base(base, num_token_id=299, w_num_scale=0.5)
    assert math.isclose(model.numeric_embedding.w_num.norm().item(), 0.5 * rows, rel_tol=1e-5)
    unit = CauchyLMForCausalLM.from_base(
        tiny_base_model("qwen2"), num_token_id=299, w_num_scale=None
    )
    assert math.isclose(unit.numeric_embedding.w_num.norm().item(), 1.0, rel_tol=1e-5)
    with pytest.raises(ValueError, match="w_num_scale"):
        CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299, w_num_scale=0.0)


def test_trainer_gives_the_classifier_its_learning_rate(small):
    model, ntok = small
    from cauchylin_hf.data import NumericDataset

    ds = NumericDataset.from_texts(["x 1, y 2."] * 4, ntok)
    trainer = make_trainer(
        model, ntok, ds, output_dir=tempfile.mkdtemp(), max_steps=1, learning_rate=2e-3
    )
    opt = trainer.create_optimizer()
    cls_ids = {id(p) for p in model.action.classifier.parameters()}
    for group in opt.param_groups:
        ids = {id(p) for p in group["params"]}
        assert ids <= cls_ids or not (ids & cls_ids)  # no group mixes the head and the rest
        expected = 2e-3 * model.config.classifier_lr_scale if ids <= cls_ids else 2e-3
        assert math.isclose(group["lr"], expected)
    assert set().union(*({id(p) for p in g["params"]} for g in opt.param_groups)) >= cls_ids


# ------------------------------------------------------------------ learning y = 2x


def _doubling(n, seed):
    r = random.Random(seed)
    out = []
    for _ in range(n):
        x = round(r.uniform(1, 500), 1)
        out.append(f"x {x:g}, y {2 * x:g}.")
    return out


@pytest.mark.slow
def test_a_model_trained_on_y_equals_2x_predicts_2x():
    """The regression learns a relation from text: held-out y within a few percent of 2x."""
    torch.manual_seed(0)
    train_texts, test_texts = _doubling(600, 0), _doubling(60, 1)
    tok = train_corpus_tokenizer(train_texts, vocab_size=300)
    ntok = NumericTokenizer(tok)
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=96,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    model = CauchyLMForCausalLM.from_base(
        AutoModelForCausalLM.from_config(cfg), ntok, freeze_backbone=False
    )
    train(
        model,
        ntok,
        [t + tok.eos_token for t in train_texts],
        None,
        tempfile.mkdtemp(),
        max_steps=400,
        batch_size=32,
        learning_rate=3e-3,
        lr_scheduler_type="cosine",
        warmup_steps=20,
        progress=False,
        save=False,
        evaluate=False,
    )
    prompts = [t[: t.index(", y ") + 4] for t in test_texts]
    xs = torch.tensor([float(t.split()[1].rstrip(",")) for t in test_texts], dtype=torch.float64)
    pred = predict_values(model, ntok, prompts)
    rel = ((pred.median - 2 * xs).abs() / (2 * xs)).median().item()
    # predicting the training median instead would be off by ~50% in the median
    assert rel < 0.05, rel


# ------------------------------------------------------------- say when nothing was learnt


def test_mdae_is_numpys_median_on_an_even_count(small):
    """target/mdae and field MdAEs: the mean of the two middle errors (numpy), not torch's lower
    median."""
    import numpy as np

    model, ntok = small
    texts = [f"width {w}, height {h}, area {w * h}." for w, h in ((3, 4), (10, 2), (5, 5), (7, 1))]
    preds = number_predictions(model, ntok, texts)
    m = number_metrics(preds)
    err = (preds.prediction.median - preds.true).abs().numpy()
    tgt = preds.is_target.numpy()
    assert tgt.sum() == 4
    assert math.isclose(m["target/mdae"], float(np.median(err[tgt])), rel_tol=1e-12)
    assert m["target/mdae"] != float(np.sort(err[tgt])[1])  # the lower median would differ
    assert math.isclose(m["all/mdae"], float(np.median(err)), rel_tol=1e-12)


def test_target_numbers_are_the_targets_number_predictions_marks(small):
    model, ntok = small
    texts = ["width 3, area 12, 2 rooms.", "no number", "area 7.5 and width 2"]
    for field in (None, "area", "width"):
        preds = number_predictions(model, ntok, texts, target_field=field)
        assert target_numbers(texts, target_field=field) == preds.true[preds.is_target].tolist()
    with pytest.raises(ValueError, match=r"texts\[1\] must be a str"):
        target_numbers(["a 1", 2])


def _check_reference(predicted, true, baseline):
    """learning_check's numbers from numpy: medians and interquartile ranges."""
    import numpy as np

    p, y = np.asarray(predicted, float), np.asarray(true, float)
    iqr = lambda v: np.quantile(v, 0.75) - np.quantile(v, 0.25)  # noqa: E731
    return np.median(np.abs(p - y)), np.median(np.abs(baseline - y)), iqr(p) / iqr(y)


@pytest.mark.parametrize("seed", range(5))
def test_learning_check_flags_a_constant_predictor_and_passes_a_good_one(seed):
    """A predictor that outputs (nearly) the training median for every row is flat (the constant
    one does not beat the baseline either); one that reads the target (error 5% of the spread) is
    neither. Numbers against numpy's median and quantiles."""
    g = torch.Generator().manual_seed(seed)
    true = 300 + 100 * torch.randn(200, generator=g, dtype=torch.float64)
    median = float(true[:100].median())  # "training" half
    held = true[100:]
    predictors = {
        "constant": torch.full_like(held, median),
        "near-constant": median + 0.01 * (held - median) + 0.1 * torch.randn(100, generator=g),
        "good": held + 5 * torch.randn(100, generator=g, dtype=torch.float64),
    }
    for name, predicted in predictors.items():
        check = learning_check(predicted, held, median)
        mdae, base, ratio = _check_reference(predicted, held, median)
        assert math.isclose(check.mdae, mdae, rel_tol=1e-12)
        assert math.isclose(check.baseline_mdae, base, rel_tol=1e-12)
        assert math.isclose(check.spread_ratio, ratio, rel_tol=1e-9, abs_tol=1e-15)
        learnt = name == "good"
        assert check.flat is not learnt, name
        assert (check.warnings("price") == []) is learnt
        if not learnt:  # 1% of the signal beats the baseline by a hair, and is still flagged
            assert "the predicted price barely varies" in check.warnings("price")[0]
        if name != "near-constant":
            assert check.beats_baseline is learnt


def test_learning_check_arguments():
    for args, message in (
        (([1.0, 2.0], [1.0], 0.0), "one value each per target"),
        (([], [], 0.0), "empty"),
        (([1.0, math.nan], [1.0, 2.0], 0.0), "predicted must be finite"),
        (([1.0, 2.0], [1.0, 2.0], math.inf), "baseline must be finite"),
    ):
        with pytest.raises(ValueError, match=message):
            learning_check(*args)
    with pytest.raises(ValueError, match="min_spread"):
        learning_check([1.0, 2.0], [1.0, 2.0], 0.0, min_spread=0.0)
    # targets that do not vary: no spread to compare with, so not flagged as flat
    same = learning_check([1.0, 2.0, 3.0], [5.0, 5.0, 5.0], 5.0)
    assert math.isnan(same.spread_ratio) and not same.flat


@pytest.mark.parametrize("share_at_median", [0.51, 0.7, 1.0])
def test_a_model_with_a_tiny_error_learnt_when_half_the_targets_are_the_median(share_at_median):
    """More than half the targets equal the median: the baseline's median error is 0, which no
    model beats; a model off by 1e-5 everywhere has learnt the target, one that predicts far
    off has not (the mean errors are compared)."""
    g = torch.Generator().manual_seed(0)
    n = 200
    at = round(share_at_median * n)
    true = torch.cat(
        [torch.full((at,), 7.0, dtype=torch.float64), 50 + torch.rand(n - at, generator=g)]
    )
    good = learning_check(true + 1e-5, true, 7.0)
    assert good.baseline_mdae == 0.0
    assert good.beats_baseline and not any("learnt nothing" in w for w in good.warnings())
    if share_at_median < 1.0:
        bad = learning_check(true + 30.0, true, 7.0)
        assert not bad.beats_baseline
        assert "mean absolute error on target, 30," in bad.warnings()[-1]


def test_a_target_field_no_number_has_is_refused_naming_the_fields(small):
    """A misspelt target_field scored no target: every target metric NaN, without a word."""
    model, ntok = small
    texts = ["width 3, height 4, area 12.", "width 10, height 2.5, area 25."]
    with pytest.raises(ValueError, match=r"'aera' is the field of no number.*did you mean 'area'"):
        number_predictions(model, ntok, texts, target_field="aera")
    found = number_predictions(model, ntok, texts, target_field="height")
    assert found.is_target.sum() == 2
    assert found.true[found.is_target].tolist() == [4.0, 2.5]
