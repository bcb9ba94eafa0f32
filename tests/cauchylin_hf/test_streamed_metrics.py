"""Evaluation that streams: the streamed metrics against the in-memory computation of the same
predictions, the batches of number_predictions against the whole, and files read line by line."""

from __future__ import annotations

import argparse
import json
import math
import random

import numpy as np
import pytest
import torch
from cauchylin_hf import evaluation
from cauchylin_hf.app import inputs
from cauchylin_hf.data import NumericDataCollator, NumericDataset, files, read_texts
from cauchylin_hf.data.arrow import TextColumn, file_texts
from cauchylin_hf.data.sampling import UniformSample
from cauchylin_hf.model import CauchyLMForCausalLM
from cauchylin_hf.predict import (
    NumberMetrics,
    NumberPredictions,
    ValuePrediction,
    concat_number_predictions,
    iter_number_predictions,
    number_metrics,
    number_predictions,
    spearman_undefined,
)
from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer

# means and standard deviations: running sums in another order than one torch reduction
REL = 1e-12


def _texts(n: int, seed: int = 0) -> list[str]:
    r = random.Random(seed)
    return [
        f"area {r.randint(30, 200)}, rooms {r.randint(1, 6)} -> price {r.randint(90, 600)}."
        for _ in range(n)
    ]


@pytest.fixture(scope="module")
def model_and_tokenizer():
    torch.manual_seed(0)
    model, ntok = CauchyLMForCausalLM.from_base(
        tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True
    )
    # thirty steps on the texts: predictions that vary (<NUM> predicted at some positions)
    texts = _texts(40)
    data = NumericDataset.from_texts(texts, ntok)
    batch = NumericDataCollator(ntok, padding_side="right")([data[i] for i in range(len(data))])
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(30):
        opt.zero_grad()
        model(**batch).loss.backward()
        opt.step()
    model.eval()
    return model, ntok


def _same(got: dict[str, float], ref: dict[str, float], approx: set[str]) -> None:
    assert list(got) == list(ref)
    for key, want in ref.items():
        if math.isnan(want):
            assert math.isnan(got[key]), key
        elif key in approx:
            assert got[key] == pytest.approx(want, rel=REL, abs=1e-300), key
        else:
            assert got[key] == want, key


def test_evaluate_streamed_equals_in_memory(model_and_tokenizer, monkeypatch):
    model, ntok = model_and_tokenizer
    texts = _texts(40)
    ref = evaluation.evaluate_model(model, ntok, texts, batch_size=8)
    # the metrics must not be degenerate for the comparison to mean something
    assert 0.0 < ref["eval/accuracy"] < 1.0 and 0.0 < ref["eval/num_precision"] < 1.0
    monkeypatch.setattr(evaluation, "EXACT_VALUES", 1)  # streamed from the first batch
    monkeypatch.setattr(evaluation, "SAMPLE_VALUES", 10**9)  # a "sample" of every value
    got = evaluation.evaluate_model(model, ntok, iter_dataset(texts, ntok), batch_size=8)
    means = {f"dist/U_{u}_{s}" for u in ("loc", "scale") for s in ("mean", "std")}
    _same(got, ref, means)


def iter_dataset(texts: list[str], ntok):
    """The texts as a streamed dataset (an IterableDataset: no length, read once)."""
    from cauchylin_hf.data.streaming import IterableNumericDataset

    return IterableNumericDataset(lambda: iter(texts), ntok)


def test_evaluate_streams_with_workers(model_and_tokenizer):
    model, ntok = model_and_tokenizer
    texts = _texts(12)
    ref = evaluation.evaluate_model(model, ntok, texts, batch_size=4)
    got = evaluation.evaluate_model(model, ntok, texts, batch_size=4, num_workers=2)
    _same(got, ref, set())
    with pytest.raises(ValueError, match="num_workers"):
        evaluation.evaluate_model(model, ntok, texts, num_workers=-1)


def test_number_metrics_streamed_equals_in_memory(model_and_tokenizer):
    model, ntok = model_and_tokenizer
    texts = _texts(60, seed=1)
    whole = number_predictions(model, ntok, texts, batch_size=7)
    batches = list(iter_number_predictions(model, ntok, iter(texts), batch_size=7))
    # the batches are the whole, cut: same rows, text indices counted over all texts
    joined = concat_number_predictions(batches)
    assert torch.equal(joined.prediction.median, whole.prediction.median)
    assert torch.equal(joined.text_index, whole.text_index) and joined.fields == whole.fields
    assert int(whole.text_index.max()) == 59
    ref = number_metrics(whole)
    held = NumberMetrics()
    streamed = NumberMetrics(exact_numbers=1, sample_size=10**6)
    for batch in batches:
        held.add(batch)
        streamed.add(batch)
    _same(held.result(), ref, set())
    running_means = {k for k in ref if k.split("/")[-1] in ("p_num", "log_score")}
    running_means |= {k for k in ref if "/interval_score_" in k}
    _same(streamed.result(), ref, running_means)
    predicted, true = streamed.targets()
    keep = whole.is_target
    assert torch.equal(predicted, whole.prediction.median[keep])
    assert torch.equal(true, whole.true[keep])


def test_number_metrics_sample_past_the_limit(model_and_tokenizer):
    """Past the limit, spearman and pit_ks read a sample; the other metrics stay exact."""
    model, ntok = model_and_tokenizer
    texts = _texts(80, seed=2)
    whole = number_predictions(model, ntok, texts, batch_size=16)
    ref = number_metrics(whole)
    running = NumberMetrics(exact_numbers=50)
    for batch in iter_number_predictions(model, ntok, texts, batch_size=16):
        running.add(batch)
    got = running.result()
    for key in ("all/count", "all/mae", "all/mdae", "all/coverage_50", "target/mdae"):
        assert got[key] == pytest.approx(ref[key], rel=REL), key
    assert got["all/spearman"] != ref["all/spearman"]  # 50 of 240 numbers
    assert -1.0 <= got["all/spearman"] <= 1.0 and 0.0 <= got["all/pit_ks"] <= 1.0


def test_uniform_sample_is_a_uniform_subset():
    sample = UniformSample(1000, 1, seed=3)
    for start in range(0, 10_000, 777):
        sample.add(np.arange(start, min(start + 777, 10_000), dtype=float)[:, None])
    rows = sample.values()[:, 0]
    assert rows.shape == (1000,) and len(set(rows.tolist())) == 1000
    # mean of 1000 of 0..9999 drawn without replacement: sd 86.6; 5.5 sd: P(fail) < 1e-7
    assert abs(rows.mean() - 4999.5) < 5.5 * 86.6
    small = UniformSample(50, 2)
    small.add(np.ones((20, 2)))
    assert small.values().shape == (20, 2)  # fewer rows than the size: all of them


def test_file_texts_equal_read_texts(tmp_path):
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text('{"text": "3 eggs."}\n\n"12 pens."\r\n{"text": "a 1, b 2."}\n')
    plain = tmp_path / "d.txt"
    plain.write_text("3 eggs.\n\nb 2.\n", encoding="utf-16")
    for path in (jsonl, plain):
        column = file_texts(path)
        assert isinstance(column, TextColumn) and list(column) == read_texts(path)
    assert file_texts(jsonl).line(2) == 4
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok 1."}\n{"text": 3}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: field 'text' must be a string"):
        file_texts(bad)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(ValueError, match="holds no texts"):
        file_texts(empty)


def test_cli_reads_a_large_file_a_line_at_a_time(tmp_path, monkeypatch):
    path = tmp_path / "d.jsonl"
    texts = _texts(30)
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    args = argparse.Namespace(command="evaluate", template=None, target=None)
    assert list(inputs.read_data(args, str(path), {}).texts) == texts  # small: in memory
    monkeypatch.setattr(files, "STREAM_BYTES", 100)
    data = inputs.read_data(args, str(path), {})
    assert isinstance(data.texts, TextColumn) and list(data.texts) == texts
    assert data.where(4) == f"{path}, line 5"


def _saved_model_and_jsonl(tmp_path):
    """A saved causal model (a base folder would get fresh random heads at each load) and a
    JSONL file of 24 texts."""
    from cauchylin_hf.testing import save_tiny_base

    model, ntok = inputs.load_causal_model(save_tiny_base(tmp_path / "b", "qwen2", spare_rows=2))
    base = tmp_path / "causal"
    model.save_pretrained(base)
    ntok.save_pretrained(base)
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in _texts(24)))
    return base, path


def test_cli_evaluate_streams_a_large_jsonl_to_the_same_metrics(tmp_path, monkeypatch, capsys):
    """A JSONL file read a line at a time (as one over STREAM_BYTES is) evaluates as in memory."""
    from cauchylin_hf.app import cli

    base, path = _saved_model_and_jsonl(tmp_path)
    argv = ["evaluate", str(base), "--data", str(path), "--json", "--no-progress"]
    argv += ["--batch-size", "5"]
    assert cli.main(argv) == 0
    in_memory = json.loads(capsys.readouterr().out)
    monkeypatch.setattr(files, "STREAM_BYTES", 0)
    assert cli.main([*argv, "--dataloader-workers", "1"]) == 0
    streamed = json.loads(capsys.readouterr().out)
    assert in_memory["target/count"] == 24 and in_memory["all/count"] == 72
    assert streamed == in_memory


def test_streamed_nan_reasons_equal_the_in_memory_ones():
    """Why a group's rank correlation is undefined reads the same streamed as held."""
    n = 8
    median = torch.tensor([4.0] * 4 + [1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    p = ValuePrediction(
        median,
        torch.zeros(n),
        torch.ones(n),
        torch.ones(n),
        (0.5,),
        (median - 1).unsqueeze(1),
        (median + 1).unsqueeze(1),
        "identity",
    )
    true = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 5.0, 5.0, 5.0], dtype=torch.float64)
    fields = ["flat"] * 4 + ["same"] * 4
    batch = NumberPredictions(p, true, torch.arange(n), torch.zeros(n, dtype=torch.bool), fields)
    held, streamed = NumberMetrics(), NumberMetrics(exact_numbers=1, sample_size=10**6)
    for _ in range(2):
        held.add(batch)
        streamed.add(batch)
    whole = concat_number_predictions([batch, batch])
    expected = spearman_undefined(whole)
    assert expected["field/flat"] == "the model predicts one value for all its 8 numbers"
    assert expected["field/same"] == "its 8 true values are all equal"
    assert expected["target"] == "not seen" and "all" not in expected
    assert held.undefined() == expected
    assert streamed.undefined() == expected


def test_evaluate_reads_the_numbers_in_its_own_pass(model_and_tokenizer):
    """evaluate_model with a NumberReader: the number metrics of number_predictions, from the
    same forward passes, and its own metrics unchanged."""
    from cauchylin_hf.predict import NumberReader

    model, ntok = model_and_tokenizer
    texts = _texts(30, seed=2)
    ref_numbers = number_metrics(number_predictions(model, ntok, texts, batch_size=8))
    ref = evaluation.evaluate_model(model, ntok, texts, batch_size=8)
    assert 0.0 < ref_numbers["all/p_num"] < 1.0  # not degenerate
    running = NumberMetrics()
    reader = NumberReader(model, texts=iter(texts), sink=running.add)
    got = evaluation.evaluate_model(model, ntok, texts, batch_size=8, numbers=reader)
    _same(got, ref, set())
    assert running.count == 90 and reader.start == 30
    # float32 heads of other batch shapes (number_predictions pads its own batches): the same
    # numbers to float32's rounding, the same nan
    got_numbers = running.result()
    assert list(got_numbers) == list(ref_numbers)
    for key, want in ref_numbers.items():
        assert got_numbers[key] == pytest.approx(want, rel=1e-5, abs=1e-6, nan_ok=True), key
    # a misspelt target field is named after the last batch, as iter_number_predictions does
    reader = NumberReader(model, target_field="prise", texts=texts, sink=running.add)
    with pytest.raises(ValueError, match="did you mean 'price'"):
        evaluation.evaluate_model(model, ntok, texts, batch_size=8, numbers=reader)
    # texts that are not the rows: named, never scored against the wrong text
    reader = NumberReader(model, texts=texts[:20], sink=running.add)
    with pytest.raises(ValueError, match="texts ran out after 20"):
        evaluation.evaluate_model(model, ntok, texts, batch_size=8, numbers=reader)
    reader = NumberReader(model, texts=[*texts, "one more 3."], sink=running.add)
    with pytest.raises(ValueError, match="more texts than the 30 rows"):
        evaluation.evaluate_model(model, ntok, texts, batch_size=8, numbers=reader)
    # two workers each streaming a share of an iterable dataset: not the texts' order
    reader = NumberReader(model, texts=texts, sink=running.add)
    with pytest.raises(ValueError, match="num_workers <= 1"):
        evaluation.evaluate_model(
            model, ntok, iter_dataset(texts, ntok), batch_size=8, numbers=reader, num_workers=2
        )


def test_cli_evaluate_runs_the_model_once_per_batch(tmp_path, monkeypatch, capsys):
    """evaluate reads each row once: one forward pass per batch gives the token metrics and
    the number predictions (it used to encode and run every batch a second time)."""
    from cauchylin_hf import model as model_module
    from cauchylin_hf.app import cli

    base, path = _saved_model_and_jsonl(tmp_path)
    calls = []
    real = model_module.CauchyLMForCausalLM.forward

    def counted(self, *args, **kwargs):
        calls.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(model_module.CauchyLMForCausalLM, "forward", counted)
    argv = ["evaluate", str(base), "--data", str(path), "--json", "--no-progress"]
    assert cli.main([*argv, "--batch-size", "5"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["target/count"] == 24 and metrics["all/count"] == 72
    assert len(calls) == 5  # 24 rows in batches of 5


@pytest.mark.parametrize("n", [1, 2, 3, 10, 101, 1000])
def test_exact_median_is_the_sorted_median_to_the_bit(n):
    """The streamed number metrics' median absolute errors read a partitioned copy, not a sorted
    one: the same float as cauchylin.metrics.quantiles (ties and an even count included)."""
    from cauchylin_hf.predict import exact_median

    from cauchylin.metrics import quantiles

    rng = np.random.default_rng(n)
    for values in (rng.standard_cauchy(n), rng.integers(0, 3, n).astype(np.float64) / 3):
        before = values.copy()
        assert exact_median(values) == quantiles(torch.from_numpy(values), (0.5,))[0]
        assert np.array_equal(values, before)  # the caller's array is left as it was
