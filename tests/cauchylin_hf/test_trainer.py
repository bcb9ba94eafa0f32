"""Training with the Hugging Face Trainer: the numeric columns reach forward, both loss parts fall.

Every test builds a tiny Qwen2 causal language model (hidden 32, 2 layers, fixed seed, backbone
frozen: the new heads train) on the synthetic numeric corpus and its BPE tokenizer.
"""

from __future__ import annotations

import json
import math
import time

import pytest
import torch
from cauchylin_hf.app.corpus import generate_sentences, make_splits, train_corpus_tokenizer
from cauchylin_hf.data import NumericDataCollator, NumericDataset
from cauchylin_hf.evaluation import evaluate_model
from cauchylin_hf.tokenizer import NumericTokenizer
from cauchylin_hf.training import (
    LossPartsCallback,
    TrainResult,
    make_trainer,
    make_training_arguments,
    train,
)

SEED = 0


@pytest.fixture(scope="module")
def ntok() -> NumericTokenizer:
    return NumericTokenizer(train_corpus_tokenizer(vocab_size=300))


def tiny_model(ntok: NumericTokenizer, seed: int = SEED, **settings):
    from cauchylin_hf.model import CauchyLMForCausalLM
    from cauchylin_hf.testing import tiny_base_model

    torch.manual_seed(seed)
    base = tiny_base_model("qwen2", vocab_size=len(ntok), hidden_size=32, seed=seed)
    return CauchyLMForCausalLM.from_base(base, tokenizer=ntok, **settings)


def quiet(**kw):
    return {"disable_tqdm": True, "log_level": "warning", **kw}


# ------------------------------------------------------------------ the main property


def test_training_lowers_both_loss_parts(ntok, tmp_path):
    """A short run on the synthetic corpus lowers the OvR loss and the regression loss.

    The first and last ``K`` logged values of each part are averaged (one log per 5 steps); the
    mean of the last ones must sit clearly below the mean of the first ones.
    """
    splits = make_splits(640, 32, seed=SEED)
    model = tiny_model(ntok)
    frozen = [p.requires_grad for p in model.backbone.parameters()]
    assert frozen and not any(frozen), "the backbone is frozen by default"
    start = time.perf_counter()
    result = train(
        model,
        ntok,
        splits.train,
        splits.heldout,
        tmp_path / "run",
        max_steps=80,
        batch_size=16,
        learning_rate=1e-2,
        logging_steps=5,
        seed=SEED,
        progress=False,
        save=False,
        evaluate=False,
        log_level="warning",
    )
    elapsed = time.perf_counter() - start
    assert isinstance(result, TrainResult) and result.global_step == 80
    k = 3
    drops = {}
    for part in ("cls_loss", "reg_loss", "loss"):
        series = result.series(part)
        assert len(series) == 16 and all(math.isfinite(v) for v in series)
        first, last = sum(series[:k]) / k, sum(series[-k:]) / k
        drops[part] = (first, last)
        assert last < first, f"{part} did not fall: first {first:.4f}, last {last:.4f}"
    cls_first, cls_last = drops["cls_loss"]
    reg_first, reg_last = drops["reg_loss"]
    assert cls_last < cls_first - 0.05 * abs(cls_first), drops
    assert reg_last < reg_first - 0.05 * abs(reg_first), drops
    # the backbone did not move, only the heads
    assert all(not p.requires_grad for p in model.backbone.parameters())
    print(f"\ntrain: {elapsed:.1f} s, first/last mean of {k} logs: {drops}")


# ------------------------------------------------------------------ plumbing


def test_numeric_columns_reach_forward(ntok, tmp_path):
    model = tiny_model(ntok)
    seen: list[dict] = []

    def pre_hook(module, args, kwargs):
        seen.append({k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)})

    ds = NumericDataset.from_texts(generate_sentences(8, seed=1), ntok)
    # the loss parts of the first batch before the update (sequential sampling: examples 0..7)
    with torch.no_grad():
        expected = model(**NumericDataCollator(ntok)([ds[i] for i in range(8)]))
    handle = model.register_forward_pre_hook(pre_hook, with_kwargs=True)
    trainer = make_trainer(
        model,
        ntok,
        ds,
        output_dir=str(tmp_path),
        max_steps=1,
        per_device_train_batch_size=8,
        train_sampling_strategy="sequential",
        logging_steps=1,
        **quiet(),
    )
    trainer.train()
    handle.remove()
    assert len(seen) == 1
    kw = seen[0]
    assert {"input_ids", "numeric_values", "attention_mask", "labels", "target_values"} <= set(kw)
    is_num = kw["input_ids"] == ntok.num_token_id
    assert is_num.any()
    assert torch.equal(kw["numeric_values"] != 0, is_num & (kw["numeric_values"] != 0))
    assert torch.equal(kw["target_values"], kw["numeric_values"])
    assert (kw["labels"][kw["attention_mask"] == 0] == -100).all()
    # the first logged loss parts are those of a direct forward on the same batch
    row = trainer.loss_parts.history[0]
    assert row["cls_loss"] == pytest.approx(expected.cls_loss.item(), rel=1e-5)
    assert row["reg_loss"] == pytest.approx(expected.reg_loss.item(), rel=1e-5)
    assert row["loss"] == pytest.approx(expected.loss.item(), rel=1e-5)
    logged = trainer.state.log_history[0]
    assert {"cls_loss", "reg_loss", "loss"} <= set(logged)


def test_gradient_accumulation_equals_large_batch(ntok, tmp_path):
    """2 micro-batches of 4 with accumulation give the parameters of one batch of 8.

    Equal token and <NUM> counts per example (one template), so mean-of-means = global mean;
    this checks that the Trainer divides the model's per-micro-batch mean loss by the
    accumulation steps (the model does not normalise by ``num_items_in_batch``). Plain SGD: its
    step is linear in the gradient (a missing division would double it), while Adam turns
    rounding-level differences of near-zero gradient entries into steps of the learning rate.
    The default regression loss weights each context by the spread of its numbers in the
    (micro-)batch, a batch statistic like batch norm's, so the equality is exact for the plain
    NLL gradient (``reg_scale_power=0``), set here.
    """
    texts = generate_sentences(24, seed=2, templates=["eggs"])
    ds = NumericDataset.from_texts(texts, ntok)
    assert len(set(ds.lengths)) == 1
    params = []
    for batch, accum in ((8, 1), (4, 2)):
        model = tiny_model(ntok, reg_scale_power=0.0)
        trainer = make_trainer(
            model,
            ntok,
            ds,
            output_dir=str(tmp_path / f"b{batch}"),
            max_steps=3,
            per_device_train_batch_size=batch,
            gradient_accumulation_steps=accum,
            train_sampling_strategy="sequential",
            learning_rate=1e-2,
            lr_scheduler_type="constant",
            optim="sgd",
            logging_steps=1,
            **quiet(),
        )
        trainer.train()
        params.append(
            {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
        )
        losses = [r["loss"] for r in trainer.loss_parts.history]
        params[-1]["__losses__"] = torch.tensor(losses)
    assert params[0].keys() == params[1].keys()
    for name in params[0]:
        torch.testing.assert_close(params[1][name], params[0][name], rtol=1e-5, atol=1e-6)


def test_train_evaluates_saves_and_reloads(ntok, tmp_path):
    from cauchylin_hf.model import CauchyLMForCausalLM

    splits = make_splits(64, 16, seed=3)
    heldout_file = tmp_path / "heldout.jsonl"  # a dataset file works as well as a list of texts
    heldout_file.write_text("".join(json.dumps({"text": t}) + "\n" for t in splits.heldout))
    model = tiny_model(ntok)
    out_dir = tmp_path / "trained"
    result = train(
        model,
        ntok,
        splits.train,
        heldout_file,
        out_dir,
        max_steps=6,
        batch_size=8,
        logging_steps=2,
        eval_steps=3,
        per_device_eval_batch_size=5,  # 16 held-out texts: batches of 5, 5, 5, 1
        eval_before=True,
        progress=False,
        log_level="warning",
    )
    assert result.output_dir == out_dir and result.global_step == 6
    assert [r["step"] for r in result.history] == [2.0, 4.0, 6.0]
    assert [r["step"] for r in result.eval_history] == [3.0, 6.0]
    for row in result.eval_history:
        assert {"eval_loss", "eval_cls_loss", "eval_reg_loss"} <= set(row)
        assert all(math.isfinite(v) for v in row.values())
        # the parts are averaged as the Trainer averages eval_loss (reg_weight = 1)
        total = row["eval_cls_loss"] + row["eval_reg_loss"]
        assert total == pytest.approx(row["eval_loss"], rel=1e-5)
    assert result.metrics is not None and result.initial_metrics is not None
    for key in ("loss", "cls_loss", "reg_loss"):
        assert math.isfinite(result.metrics[f"eval/{key}"])
    assert result.metrics["eval/loss"] != result.initial_metrics["eval/loss"]

    reloaded = CauchyLMForCausalLM.from_pretrained(out_dir)
    rtok = NumericTokenizer.from_pretrained(out_dir)
    assert rtok.num_token_id == ntok.num_token_id
    enc = rtok(splits.heldout[:2], padding=True, return_tensors="pt")
    model.eval()
    with torch.no_grad():
        a = model(**enc)
        b = reloaded(**enc)
    torch.testing.assert_close(b.loc_S, a.loc_S)
    torch.testing.assert_close(b.loc_Y, a.loc_Y)
    again = evaluate_model(reloaded, rtok, splits.heldout, batch_size=8)
    assert again["eval/loss"] == pytest.approx(result.metrics["eval/loss"], rel=1e-5)


def test_loss_parts_callback_with_a_plain_trainer(ntok, tmp_path):
    """The callback alone, with transformers.Trainer built by hand."""
    from cauchylin_hf.data import NumericDataCollator
    from transformers import Trainer

    model = tiny_model(ntok)
    cb = LossPartsCallback()
    trainer = Trainer(
        model=model,
        args=make_training_arguments(tmp_path, max_steps=4, logging_steps=2, **quiet()),
        train_dataset=NumericDataset.from_texts(generate_sentences(32, seed=4), ntok),
        data_collator=NumericDataCollator(ntok),
        callbacks=[cb],
    )
    trainer.train()
    assert [r["step"] for r in cb.history] == [2.0, 4.0]
    assert all(r["loss"] > 0 and r["cls_loss"] > 0 for r in cb.history)
    assert trainer.state.log_history[0]["cls_loss"] == cb.history[0]["cls_loss"]


@pytest.mark.parametrize("override", [None, 0.999])
def test_the_optimizer_forgets_old_gradients_after_about_twenty_steps(ntok, tmp_path, override):
    """AdamW's beta2 is 0.95 unless the user sets it (why: make_training_arguments' docstring)."""
    extra = {} if override is None else {"adam_beta2": override}
    trainer = make_trainer(
        tiny_model(ntok),
        ntok,
        NumericDataset.from_texts(generate_sentences(8, seed=4), ntok),
        output_dir=tmp_path,
        max_steps=1,
        **quiet(**extra),
    )
    optimizer = trainer.create_optimizer()
    expected = 0.95 if override is None else override
    assert {tuple(g["betas"]) for g in optimizer.param_groups} == {(0.9, expected)}


# ------------------------------------------------------------------ errors


def test_errors(ntok, tmp_path):
    model = tiny_model(ntok)
    with pytest.raises(ValueError, match="train_texts is empty"):
        train(model, ntok, [], None, tmp_path, progress=False)
    with pytest.raises(ValueError, match="eval_texts is empty"):
        train(model, ntok, ["3 eggs."], [], tmp_path, progress=False)
    with pytest.raises(ValueError, match=r"train_texts\[1\] has no tokens"):
        train(model, ntok, ["3 eggs.", ""], None, tmp_path, progress=False)
    with pytest.raises(ValueError, match="eval_steps needs eval_texts"):
        train(model, ntok, ["3 eggs."], None, tmp_path, eval_steps=2, progress=False)
    with pytest.raises(ValueError, match="NumericTokenizer"):
        train(model, ntok.tokenizer, ["3 eggs."], None, tmp_path, progress=False)
    with pytest.raises(FileNotFoundError, match=r"missing\.jsonl"):
        train(model, ntok, tmp_path / "missing.jsonl", None, tmp_path, progress=False)
    with pytest.raises(ValueError, match="batch_size"):
        train(model, ntok, ["3 eggs."], None, tmp_path, batch_size=0, progress=False)
    with pytest.raises(ValueError, match="remove_unused_columns"):
        make_training_arguments(tmp_path, remove_unused_columns=True)
    with pytest.raises(ValueError, match="train_dataset is empty"):
        make_trainer(
            model, ntok, torch.utils.data.TensorDataset(torch.zeros(0)), output_dir=tmp_path
        )
    with pytest.raises(ValueError, match="data is empty"):
        evaluate_model(model, ntok, [])
