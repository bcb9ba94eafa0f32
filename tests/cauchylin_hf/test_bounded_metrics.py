"""Evaluation in bounded memory: the values a median is taken of are kept up to a budget (the
statistics exact, as before) and past it a seeded uniform sample of that many (the statistics
estimates within a stated rank error, said so in the result), however many rows arrive."""

from __future__ import annotations

import math
import random
import tracemalloc

import numpy as np
import pytest
import torch
from cauchylin_hf import evaluation
from cauchylin_hf.data.sampling import UniformSample
from cauchylin_hf.model import CauchyLMForCausalLM
from cauchylin_hf.predict import NumberMetrics, NumberPredictions, ValuePrediction
from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer

FAIL = 1e-6
"""The false-failure rate of the statistical tests below."""


def _rank_tolerance(k: int) -> float:
    """The rank error (a fraction of the count) that the median of a uniform sample of ``k``
    values, drawn without replacement from distinct values, exceeds with probability below
    :data:`FAIL`: the sample median lies below the population's ``(1/2 - e)``-quantile only if
    half the sample or more does, a deviation of ``e`` of a sample fraction from its mean, whose
    probability is at most ``exp(-2 k e^2)`` (Hoeffding's bound, which holds for sampling
    without replacement); the same above. Both: ``2 exp(-2 k e^2) = FAIL``."""
    return math.sqrt(math.log(2 / FAIL) / (2 * k))


def _batch(median: np.ndarray, true: np.ndarray, target_every: int = 3) -> NumberPredictions:
    """Predictions of known medians and true values (every third one a target number)."""
    n = len(median)
    m = torch.from_numpy(median)
    pred = ValuePrediction(
        m,
        torch.zeros(n),
        torch.ones(n),
        torch.full((n,), 0.5),
        (0.5,),
        (m - 1).unsqueeze(1),
        (m + 1).unsqueeze(1),
        "identity",
    )
    is_target = torch.arange(n) % target_every == 0
    fields = ["a" if i % 2 else "b" for i in range(n)]
    return NumberPredictions(pred, torch.from_numpy(true), torch.arange(n), is_target, fields)


def _stream(running: NumberMetrics, n: int, seed: int, batch: int = 1000):
    """Add ``n`` numbers (distinct continuous errors) in batches; return every error, every
    target's (predicted, true) pair and the field of every number."""
    rng = np.random.default_rng(seed)
    errs, pairs, fields = [], [], []
    for start in range(0, n, batch):
        size = min(batch, n - start)
        median = rng.normal(size=size)
        true = median + rng.standard_cauchy(size)
        part = _batch(median, true)
        running.add(part)
        errs.append(np.abs(median - true))
        keep = part.is_target.numpy()
        pairs.append(np.stack([median[keep], true[keep]], -1))
        fields += part.fields
    return np.concatenate(errs), np.concatenate(pairs), np.array(fields)


def _median_rank(value: float, values: np.ndarray) -> float:
    """The fraction of ``values`` below ``value``."""
    return float((values < value).mean())


def test_number_metrics_below_the_budget_are_exact():
    """Up to ``kept_values`` numbers a group's median error is numpy's median of all of them,
    the mean numpy's mean, the targets every pair in order, and no key says "sample": the
    result is the one of a budget larger than anything added, to the bit."""
    small = NumberMetrics(exact_numbers=1, sample_size=10**6, kept_values=9000)
    large = NumberMetrics(exact_numbers=1, sample_size=10**6, kept_values=10**9)
    errs, pairs, fields = _stream(small, 9000, seed=1)
    _stream(large, 9000, seed=1)
    got = small.result()
    assert got == large.result()
    assert not [k for k in got if k.endswith("_sample")]
    assert got["all/mdae"] == np.median(errs)
    assert got["all/mae"] == pytest.approx(np.mean(errs), rel=1e-12)
    assert got["field/a/mdae"] == np.median(errs[fields == "a"])
    assert got["target/count"] == pairs.shape[0] == 3006
    assert got["target/mdae"] == np.median(np.abs(pairs[:, 0] - pairs[:, 1]))
    predicted, true = small.targets()
    assert np.array_equal(predicted.numpy(), pairs[:, 0])
    assert np.array_equal(true.numpy(), pairs[:, 1])
    assert small.target_count == 3006


def test_number_metrics_past_the_budget_sample_the_medians():
    """Past ``kept_values`` a group's median error is that of a uniform sample of that many:
    its rank among all the errors is within the Hoeffding tolerance (false-failure rate 1e-6);
    the result says so, the mean and the count stay exact, the targets are a sample of the
    pairs (each a real pair, none twice)."""
    k, n = 2000, 120_000
    running = NumberMetrics(exact_numbers=1, sample_size=500, kept_values=k, seed=5)
    errs, pairs, fields = _stream(running, n, seed=2)
    got = running.result()
    tol = _rank_tolerance(k)  # 0.060
    for group, keep in (
        ("all", np.ones(n, bool)),
        ("target", np.arange(n) % 1000 % 3 == 0),
        ("field/a", fields == "a"),
    ):
        values = errs[keep]
        assert got[f"{group}/count"] == values.size
        assert got[f"{group}/mdae_sample"] == k
        assert abs(_median_rank(got[f"{group}/mdae"], values) - 0.5) <= tol, group
        assert got[f"{group}/mae"] == pytest.approx(values.mean(), rel=1e-12)
        assert got[f"{group}/rank_sample"] == 500
    predicted, true = running.targets()
    assert predicted.numel() == k and running.target_count == pairs.shape[0]
    kept = {(a, b) for a, b in pairs.tolist()}
    sampled = list(zip(predicted.tolist(), true.tolist(), strict=True))
    assert len(set(sampled)) == k and set(sampled) <= kept


def _held_bytes(feed, steps: int) -> list[int]:
    """The bytes allocated (NumPy's and torch's CPU buffers are traced) after each step."""
    tracemalloc.start()
    try:
        out = []
        for i in range(steps):
            feed(i)
            out.append(tracemalloc.get_traced_memory()[0])
        return out
    finally:
        tracemalloc.stop()


def test_number_metrics_memory_stops_growing_past_the_budget():
    """The memory held stops growing once the kept values reach the budget: 40,000 numbers
    more add almost nothing (they added about 1.2 MB when every error was kept)."""
    running = NumberMetrics(exact_numbers=1, kept_values=1000, sample_size=1000)
    rng = np.random.default_rng(0)

    def feed(_: int) -> None:
        for _ in range(10):
            median = rng.normal(size=1000)
            running.add(_batch(median, median + rng.normal(size=1000)))

    held = _held_bytes(feed, 5)  # 10,000 numbers a step: 10 x the budget after the first
    assert running.count == 50_000
    assert held[-1] - held[0] < 64_000, held


def test_uniform_sample_memory_is_bounded_and_exact_below_its_size():
    sample = UniformSample(500, 2, seed=0)
    rows = np.random.default_rng(1).normal(size=(500, 2))
    sample.add(rows[:200])
    sample.add(rows[200:])
    assert not sample.sampled and np.array_equal(sample.values(), rows)  # every row, in order
    held = _held_bytes(lambda i: sample.add(np.ones((1000, 2)) * i), 20)
    assert sample.sampled and sample.offered == 20_500
    assert held[-1] - held[1] < 4_000, held
    assert sample.values().shape == (500, 2)


def _texts(n: int, seed: int = 0) -> list[str]:
    r = random.Random(seed)
    return [
        f"area {r.randint(30, 200)}, rooms {r.randint(1, 6)} -> price {r.randint(90, 600)}."
        for _ in range(n)
    ]


def test_evaluate_model_says_when_its_median_error_is_sampled(monkeypatch):
    """evaluate_model keeps the <NUM> targets' errors up to KEPT_VALUES: below it the exact
    median (no sample key); past it a sample of that many, said under eval/reg_mdae_sample,
    with the mean still that of every error."""
    torch.manual_seed(0)
    model, ntok = CauchyLMForCausalLM.from_base(
        tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True
    )
    model.eval()
    texts = _texts(30)
    monkeypatch.setattr(evaluation, "EXACT_VALUES", 1)  # streamed from the first batch
    exact = evaluation.evaluate_model(model, ntok, texts, batch_size=8)
    assert "eval/reg_mdae_sample" not in exact and exact["eval/num_targets"] == 90
    monkeypatch.setattr(evaluation, "KEPT_VALUES", 31)
    got = evaluation.evaluate_model(model, ntok, texts, batch_size=8)
    assert got["eval/reg_mdae_sample"] == 31
    assert got["eval/reg_mae"] == pytest.approx(exact["eval/reg_mae"], rel=1e-12)
    others = [k for k in exact if not k.startswith("eval/reg_")]
    assert [got[k] for k in others] == [exact[k] for k in others]


def test_learning_check_past_the_budget_names_its_sample_and_the_whole_count(tmp_path, capsys):
    """The learning check of ``evaluate`` reads the kept targets: past the budget a sample,
    named under target/check_sample, while the printed line counts every target."""
    import argparse

    from cauchylin_hf.app.cli import load_causal_model
    from cauchylin_hf.app.inputs import Data
    from cauchylin_hf.app.reports import target_report
    from cauchylin_hf.predict import iter_number_predictions
    from cauchylin_hf.testing import save_tiny_base

    model, ntok = load_causal_model(save_tiny_base(tmp_path, "qwen2", spare_rows=1))
    texts = _texts(40, seed=3)
    args = argparse.Namespace(command="evaluate", batch_size=8, json=False)
    reports = {}
    for kept in (10**6, 10):
        running = NumberMetrics(exact_numbers=1, kept_values=kept)
        for batch in iter_number_predictions(model, ntok, texts, batch_size=8):
            running.add(batch)
        reports[kept] = target_report(
            args, model, ntok, Data(texts, None, None, "t"), 300.0, "texts", None, running
        )
        assert running.target_count == 40
    lines = capsys.readouterr().out.splitlines()
    assert "target/check_sample" not in reports[10**6]
    assert reports[10]["target/check_sample"] == 10
    exact, sampled = [x for x in lines if " on 40 texts: " in x]
    assert "uniform sample" not in exact
    assert sampled.endswith("(the medians and spreads of a uniform sample of 10)"), sampled
