"""Readouts that read the text's earlier numbers beside the final hidden state
(``config.readout_numbers``): the solve, training, saving, and every path that reads them."""

from __future__ import annotations

import math
import random
import tempfile

import pytest
import torch
from cauchylin_hf.generation import generate
from cauchylin_hf.model import CauchyLMForCausalLM
from cauchylin_hf.predict import number_metrics, number_predictions, predict_values
from cauchylin_hf.readouts import number_features, solve_readouts
from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
from cauchylin_hf.tokenizer import NumericTokenizer
from cauchylin_hf.training import train

from cauchylin.readout import fit_cauchy_readout


def _model(numbers: int) -> tuple[CauchyLMForCausalLM, NumericTokenizer]:
    torch.manual_seed(0)
    return CauchyLMForCausalLM.from_base(
        tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True, readout_numbers=numbers
    )


def _widths(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(2, 60) for _ in range(n)]


def _area_texts(widths: list[int]) -> list[str]:
    return [f"width {w}, area {2 * w + w % 5}." for w in widths]


def _area_code(model: CauchyLMForCausalLM, ntok: NumericTokenizer) -> int:
    enc = ntok(["width 5, area "], return_tensors="pt")
    return int(model.context_codes(enc["input_ids"], enc["attention_mask"])[0, -1])


def test_the_solve_reads_the_hidden_state_and_the_earlier_numbers() -> None:
    """The readout of a context is fit_cauchy_readout on [loc_U', the earlier numbers in the
    value space], the numbers written out here from the texts themselves."""
    model, ntok = _model(3)
    widths = _widths(80, seed=0)
    texts = _area_texts(widths)
    shared = number_features(model, ntok, texts)  # before any readout: loc_U' of the shared head
    report = solve_readouts(model, ntok, texts)
    code = _area_code(model, ntok)
    rows = (shared.codes == code).nonzero().flatten()
    assert rows.numel() == 80
    # the area's position has one earlier number, the width: slot 0 = ln(1 + w), the others 0
    # (the model reads the numbers in float32, as it reads the hidden state)
    earlier = torch.zeros(80, 3, dtype=torch.float64)
    earlier[:, 0] = torch.log1p(torch.tensor(widths, dtype=torch.float32)).double()
    x = torch.cat([shared.loc[rows], earlier], 1)
    expect = fit_cauchy_readout(x, shared.targets[rows])
    table = model.action.readouts
    row = int(table.lookup(torch.tensor([code]))[0])
    entry = next(c for c in report.contexts if c["code"] == code)
    assert entry["kept"] and bool(table.is_solved[row])
    assert tuple(table.weight.shape[1:]) == (32 + 3,)
    torch.testing.assert_close(table.weight[row].double(), expect.weight.double())
    assert math.isclose(float(table.bias[row]), float(expect.bias), rel_tol=1e-5, abs_tol=1e-6)
    assert math.isclose(float(table.noise[row]), float(expect.noise), rel_tol=1e-5)
    assert math.isclose(entry["solved_nll"], expect.cv_nll, rel_tol=1e-9)


def _linear_table(n: int, seed: int) -> list[str]:
    """``c`` is an exact linear function of ``a`` and ``b`` in the value space; three other
    columns lie between them and ``c``."""
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        a, b, d, e, f = (round(rng.uniform(1, 200), 1) for _ in range(5))
        c = round(math.expm1(0.7 * math.log1p(a) + 0.4 * math.log1p(b) - 0.5), 4)
        texts.append(f"a {a}, b {b}, d {d}, e {e}, f {f}, c {c}.")
    return texts


def _trained_mdae(numbers: int) -> float:
    model, ntok = _model(numbers)
    train(
        model,
        ntok,
        _linear_table(240, seed=1),
        None,
        tempfile.mkdtemp(),
        max_steps=10,
        batch_size=16,
        learning_rate=3e-3,
        progress=False,
        save=False,
        evaluate=False,
    )
    held = _linear_table(60, seed=2)
    return number_metrics(number_predictions(model, ntok, held))["target/mdae"]


def test_a_target_linear_in_two_earlier_numbers_is_read_almost_exactly() -> None:
    """After 10 steps the hidden state holds the target poorly; the readout that reads the row's
    own five earlier numbers finds the law (the targets, 5-60 in size, are written to 4
    decimals: a rounding error of at most 5e-5)."""
    with_numbers = _trained_mdae(5)
    without = _trained_mdae(0)
    assert with_numbers < 2e-4, with_numbers
    assert without > 1e-2, without  # measured: 3.8e-5 against 0.096


def test_the_table_with_numbers_saves_and_loads(tmp_path) -> None:
    model, ntok = _model(2)
    solve_readouts(model, ntok, _area_texts(_widths(80, seed=3)))
    prompts = ["width 9, area ", "width 33, area "]
    before = predict_values(model, ntok, prompts)
    model.save_pretrained(tmp_path / "full")
    loaded = CauchyLMForCausalLM.from_pretrained(tmp_path / "full")
    assert loaded.config.readout_numbers == 2 and loaded.action.readouts.numbers == 2
    torch.testing.assert_close(loaded.action.readouts.weight, model.action.readouts.weight)
    torch.testing.assert_close(predict_values(loaded, ntok, prompts).loc, before.loc)
    model.save_heads(tmp_path / "heads")
    heads = CauchyLMForCausalLM.from_heads(tmp_path / "heads", base=tiny_base_model("qwen2"))
    torch.testing.assert_close(predict_values(heads, ntok, prompts).loc, before.loc)


def test_every_path_reads_the_same_value_with_numbers() -> None:
    model, ntok = _model(2)
    model = model.double()  # see test_readouts: every path agrees to float64 rounding
    solve_readouts(model, ntok, _area_texts(_widths(80, seed=4)))
    table = model.action.readouts
    code = _area_code(model, ntok)
    row = int(table.lookup(torch.tensor([code]))[0])
    assert bool(table.is_solved[row]) and float(table.weight[row, 32]) != 0.0
    prompts = ["width 7, area ", "width 40, area ", "width 3, area "]
    pv = predict_values(model, ntok, prompts)
    tol = 1e-9 * float(pv.scale.min())
    # the width's weight moves the prediction: the same hidden state with other numbers
    enc = ntok(prompts, padding=True, return_tensors="pt")
    last = enc["attention_mask"].sum(1) - 1
    hidden = model.encode(**enc, use_cache=False)[0][torch.arange(3), last]
    codes, numbers = model.readout_context(**enc)
    assert numbers is not None
    at = numbers[torch.arange(3), last]
    torch.testing.assert_close(
        at[:, 0].double(), torch.log1p(torch.tensor([7.0, 40.0, 3.0])).double()
    )
    _, zero = model.heads(
        hidden, context=codes[torch.arange(3), last], numbers=torch.zeros_like(at)
    )
    shift = (pv.loc - zero.loc_Y.double()).abs()
    expected_shift = (float(table.weight[row, 32]) * at[:, 0].double()).abs()
    torch.testing.assert_close(shift, expected_shift, rtol=1e-6, atol=tol)
    # teacher-forced prediction over whole texts
    full = number_predictions(model, ntok, [p + "1." for p in prompts])
    torch.testing.assert_close(full.prediction.loc[full.is_target], pv.loc, rtol=0, atol=tol)
    # forward without a cache reads the context off the ids and values
    out = model(**enc)
    torch.testing.assert_close(out.loc_Y[torch.arange(3), last].double(), pv.loc, rtol=0, atol=tol)
    # forward given the context explicitly (what a caller with a KV cache passes)
    out = model(**enc, context=model.readout_context(**enc))
    torch.testing.assert_close(out.loc_Y[torch.arange(3), last].double(), pv.loc, rtol=0, atol=tol)
    with pytest.raises(ValueError, match="numbers"):
        model.heads(hidden, context=codes[torch.arange(3), last])
    # generate writes the solved readout's number (<NUM> made the certain next token)
    with torch.no_grad():
        model.action.classifier.bias[int(model.config.num_token_id)] = 1e4
    ntok_left = NumericTokenizer(ntok.tokenizer, padding_side="left")
    gen = generate(model, prompts, tokenizer=ntok_left, mode="causal", max_new_tokens=1)
    pv_causal = predict_values(model, ntok, prompts, mode="causal", temperature=0.0)
    wrote = gen.sequences[:, -1] == model.config.num_token_id
    written = gen.numeric_values[:, -1].double()
    assert bool(wrote.all())
    # the values a generation writes are float32: equal to 2 ulp
    torch.testing.assert_close(written, pv_causal.median, rtol=2.5e-7, atol=0)


def test_cross_calibration_refits_on_what_the_readouts_read(monkeypatch) -> None:
    """The out-of-fold readouts of a small table's calibration read the earlier numbers too:
    its widths are those of the predictor that is used."""
    import cauchylin_hf.readouts as readouts
    from cauchylin_hf.readouts import cross_calibrate

    model, ntok = _model(3)
    texts = _area_texts(_widths(60, seed=4))
    solved = solve_readouts(model, ntok, texts)
    widths = []
    real = readouts.fit_cauchy_readout

    def spy(x, *a, **kw):
        widths.append(x.shape[-1])
        return real(x, *a, **kw)

    monkeypatch.setattr(readouts, "fit_cauchy_readout", spy)
    report = cross_calibrate(model, ntok, texts, solved, folds=5)
    assert report.contexts and widths
    assert set(widths) == {32 + 3}  # loc_U' and the three earlier-number slots
