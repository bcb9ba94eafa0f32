"""Per-context readouts and calibrated intervals: the solve, the calibration, every path that reads
them (predict, the teacher-forced pass, forward, generate), saving and loading, train()."""

from __future__ import annotations

import copy
import dataclasses
import math
import random
import tempfile

import pytest
import torch
from cauchylin_hf.generation import generate
from cauchylin_hf.model import CauchyLMForCausalLM
from cauchylin_hf.predict import number_metrics, number_predictions, predict_values
from cauchylin_hf.readouts import calibrate, number_features, solve_readouts
from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
from cauchylin_hf.tokenizer import NumericTokenizer
from cauchylin_hf.training import train
from scipy.stats import beta, cauchy

from cauchylin.conformal import calibration_holdout, conformal_widths
from cauchylin.nn.readouts import OTHER, code_digits
from cauchylin.readout import cauchy_nll, fit_cauchy_readout
from cauchylin.value_space import to_value_space
from tests.stats import FALSE_FAILURE_RATE, split_delta


def _texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        w = rng.randint(2, 60)
        out.append(f"width {w}, area {2 * w + rng.randint(-3, 3)}.")
    return out


@pytest.fixture()
def small() -> tuple[CauchyLMForCausalLM, NumericTokenizer]:
    torch.manual_seed(0)
    # the readouts of the hidden state alone (test_readout_numbers.py: with earlier numbers)
    model, ntok = CauchyLMForCausalLM.from_base(
        tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True, readout_numbers=0
    )
    return model, ntok


def _area_code(model: CauchyLMForCausalLM, ntok: NumericTokenizer) -> int:
    enc = ntok(["width 5, area "], return_tensors="pt")
    return int(model.context_codes(enc["input_ids"], enc["attention_mask"])[0, -1])


def test_the_solved_readout_is_the_cauchy_mle_on_the_contexts_features(small) -> None:
    model, ntok = small
    texts = _texts(80, seed=0)
    shared = number_features(model, ntok, texts)
    report = solve_readouts(model, ntok, texts)
    assert report.numbers == 160 and len(report.contexts) == 2  # "width " and "area "
    code = _area_code(model, ntok)
    rows = (shared.codes == code).nonzero().flatten()
    assert rows.numel() == 80
    expect = fit_cauchy_readout(shared.loc[rows], shared.targets[rows])  # the same solve
    table = model.action.readouts
    row = int(table.lookup(torch.tensor([code]))[0])
    entry = next(c for c in report.contexts if c["code"] == code)
    # every readout that solves replaces the shared head, whatever the head's NLL on the
    # numbers it was trained on
    assert all(c["kept"] for c in report.contexts)
    assert bool(table.is_solved[row])
    torch.testing.assert_close(table.weight[row].double(), expect.weight.double())
    assert math.isclose(float(table.noise[row]), float(expect.noise), rel_tol=1e-5)
    # the shared head's NLL reported is that of the numbers as the model read them before
    t = shared.targets[rows]
    nll = float(cauchy_nll(t, shared.loc_y[rows], shared.scale_y[rows]).mean())
    assert math.isclose(entry["shared_nll"], nll, rel_tol=1e-9)


def test_a_solved_context_reads_its_numbers_better_on_new_texts(small) -> None:
    """Trained for a few steps, the shared head has not learnt 'area = 2 width'; the readout
    solved on the training texts reads it off the features on held-out texts."""
    model, ntok = small
    train_texts, held = _texts(200, seed=1), _texts(60, seed=2)
    train(
        model,
        ntok,
        train_texts,
        None,
        tempfile.mkdtemp(),
        max_steps=30,
        batch_size=16,
        learning_rate=3e-3,
        progress=False,
        save=False,
        evaluate=False,
        readouts=False,
        calibration=None,
    )
    before = number_metrics(number_predictions(model, ntok, held))["target/mdae"]
    solve_readouts(model, ntok, train_texts)
    after = number_metrics(number_predictions(model, ntok, held))["target/mdae"]
    assert after < 0.5 * before, (before, after)


def test_every_path_reads_the_same_readout(small) -> None:
    # float64 throughout: a readout solved on an untrained backbone has large weights, which
    # carry float32's rounding of other batch shapes into the third digit (it is within the
    # prediction's own scale there); in float64 every path agrees to rounding
    model, ntok = small
    model = model.double()
    solve_readouts(model, ntok, _texts(80, seed=3))
    assert model.action.readouts.num_contexts > 0 and bool(model.action.readouts.is_solved.any())
    prompts = ["width 7, area ", "width 40, area ", "width 3, area "]
    pv = predict_values(model, ntok, prompts)
    # the teacher-forced pass over whole texts reads each target at the same position
    full = number_predictions(model, ntok, [p + "1." for p in prompts])
    tol = 1e-9 * float(pv.scale.min())
    torch.testing.assert_close(full.prediction.loc[full.is_target], pv.loc, rtol=0, atol=tol)
    # forward without a cache reads the codes off the ids
    enc = ntok(prompts, padding=True, return_tensors="pt")
    out = model(**enc)
    last = enc["attention_mask"].sum(1) - 1
    loc = out.loc_Y[torch.arange(3), last].double()
    torch.testing.assert_close(loc, pv.loc, rtol=0, atol=tol)
    # and without the codes the shared head answers, which differs
    _, shared = model.heads(model.encode(**enc, use_cache=False)[0])
    assert not torch.allclose(shared.loc_Y[torch.arange(3), last].double(), pv.loc, atol=1e-3)
    # generate writes the solved readout's number when it writes a number first
    ntok_left = NumericTokenizer(ntok.tokenizer, padding_side="left")
    gen = generate(model, prompts, tokenizer=ntok_left, mode="causal", max_new_tokens=1)
    pv_causal = predict_values(model, ntok, prompts, mode="causal", temperature=0.0)
    wrote = gen.sequences[:, -1] == model.config.num_token_id
    written = gen.numeric_values[:, -1].double()
    atol = tol * float(pv_causal.median.abs().max())  # the median is e^loc: relative error
    torch.testing.assert_close(written[wrote], pv_causal.median[wrote], rtol=0, atol=atol)


def test_calibrate_fits_the_conformal_widths_of_each_context(small) -> None:
    """The widths are split-conformal quantiles of the normalised errors that the prediction
    API reports for the same numbers (two paths: number_features and number_predictions)."""
    model, ntok = small
    held = _texts(40, seed=4)
    report = calibrate(model, ntok, held)
    assert sorted(c["count"] for c in report.contexts) == [40, 40]
    raw = number_predictions(model, ntok, held, calibrated=False)
    table = model.action.readouts
    for field in ("area", "width"):
        keep = torch.tensor([f == field for f in raw.fields])
        t = to_value_space(raw.true[keep], model.config.value_space)
        p = raw.prediction
        expect = conformal_widths(t, p.loc[keep], p.scale[keep], report.levels)
        enc = ntok([f"width 3, {field} " if field == "area" else "width "], return_tensors="pt")
        code = model.context_codes(enc["input_ids"], enc["attention_mask"])[0, -1]
        row = table.lookup(code[None])
        assert int(row[0]) >= 0
        for j, c in enumerate(report.levels):
            w = float(table.widths_at(row, c)[0])
            if math.isinf(float(expect[j])):  # 40 rows: 0.99 needs 99
                assert math.isnan(w)
            else:
                assert math.isclose(w, float(expect[j]), rel_tol=1e-5)


def test_numbers_of_other_contexts_share_the_pooled_widths(small) -> None:
    model, ntok = small
    rng = random.Random(5)
    # three contexts of 15 numbers each: below min_count alone, 45 together in the pooled row
    held = [
        f"{thing} {rng.randint(1, 90)}." for thing in ("box", "crate", "tray") for _ in range(15)
    ]
    report = calibrate(model, ntok, held, min_count=20)
    (row,) = report.contexts
    assert row["code"] == OTHER and row["count"] == 45
    pred = predict_values(model, ntok, ["bag "], levels=(0.5,))  # a context never seen
    assert bool(pred.calibrated.all()) and int(pred.calibration_count[0]) == 45


def test_calibrated_intervals_cover_new_exchangeable_rows(small) -> None:
    """Whatever the model, conformal widths fitted on n rows cover a new exchangeable row with
    probability in [c, c + 1/(n + 1)]. Given one calibration draw, the coverage is a
    Beta(k, n + 1 - k) draw (k = ceil((n + 1) c)); m new rows estimate it to a binomial error.
    The band holds both at a false-failure rate of 1e-6 for the test."""
    model, ntok = small
    n, m = 99, 400
    calibrate(model, ntok, _texts(n, seed=6))
    levels = (0.5, 0.9)
    pred = number_predictions(model, ntok, _texts(m, seed=7), levels=levels)
    keep = pred.is_target  # the "area" numbers: calibrated on n of their own
    delta = split_delta(2 * 2 * len(levels), FALSE_FAILURE_RATE)
    for j, c in enumerate(levels):
        assert bool(pred.prediction.calibrated[keep, j].all())
        lo, hi = pred.prediction.lower[keep, j], pred.prediction.upper[keep, j]
        covered = float(((lo <= pred.true[keep]) & (pred.true[keep] <= hi)).double().mean())
        k = math.ceil((n + 1) * c)
        sampling = math.sqrt(math.log(2 / delta) / (2 * m))  # Hoeffding on the m new rows
        low = beta.ppf(delta, k, n + 1 - k) - sampling
        high = beta.isf(delta, k, n + 1 - k) + sampling
        assert low <= covered <= high, (c, covered, low, high)


def test_the_table_saves_and_loads_with_the_model(tmp_path) -> None:
    torch.manual_seed(0)
    model, ntok = CauchyLMForCausalLM.from_base(
        tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True
    )
    solve_readouts(model, ntok, _texts(80, seed=8))
    calibrate(model, ntok, _texts(40, seed=9))
    prompts = ["width 9, area ", "width 33, area "]
    before = predict_values(model, ntok, prompts)
    model.save_pretrained(tmp_path / "full")
    loaded = CauchyLMForCausalLM.from_pretrained(tmp_path / "full")
    after = predict_values(loaded, ntok, prompts)
    torch.testing.assert_close(after.loc, before.loc)
    torch.testing.assert_close(after.lower, before.lower)
    assert bool(after.calibrated.all())
    model.save_heads(tmp_path / "heads")
    heads = CauchyLMForCausalLM.from_heads(tmp_path / "heads", base=tiny_base_model("qwen2"))
    torch.testing.assert_close(predict_values(heads, ntok, prompts).upper, before.upper)
    bf16 = CauchyLMForCausalLM.from_pretrained(tmp_path / "full", dtype=torch.bfloat16)
    assert bf16.action.readouts.weight.dtype == torch.float32  # the heads stay float32
    torch.testing.assert_close(bf16.action.readouts.codes, model.action.readouts.codes)


def test_raw_intervals_on_request(small) -> None:
    model, ntok = small
    calibrate(model, ntok, _texts(40, seed=10))
    cal = predict_values(model, ntok, ["width 5, area "], levels=(0.5, 0.75))
    raw = predict_values(model, ntok, ["width 5, area "], levels=(0.5, 0.75), calibrated=False)
    assert cal.calibrated.tolist() == [[True, False]]  # 0.75 is not a calibrated level
    assert not bool(raw.calibrated.any())
    torch.testing.assert_close(cal.lower[:, 1], raw.lower[:, 1])
    half = (raw.loc + raw.scale * math.tan(math.pi * 0.25)).double()  # Cauchy: loc + scale
    torch.testing.assert_close(torch.log1p(raw.upper[:, 0].double()), half)


def test_train_holds_out_the_calibration_rows(small) -> None:
    model, ntok = small
    texts = [f"width {w}, area {2 * w + w % 3}." for w in range(1, 121)]  # 120 distinct
    result = train(
        model,
        ntok,
        texts,
        None,
        tempfile.mkdtemp(),
        max_steps=2,
        batch_size=8,
        progress=False,
        save=False,
        evaluate=False,
    )
    assert result.calibration_size == calibration_holdout(120, "auto") == 24
    assert result.readouts is not None and result.calibration is not None
    assert {c["count"] for c in result.calibration.contexts} == {24}
    assert calibration_holdout(99, "auto") == 0 and calibration_holdout(99, 0.5) == 50
    with pytest.raises(ValueError, match="calibration"):
        calibration_holdout(10, 0.99)
    with pytest.raises(ValueError, match="calibration"):
        calibration_holdout(10, "half")


def test_copies_of_a_text_stay_on_one_side_of_the_calibration_split(small) -> None:
    """A corpus with repeats: no text is both trained on and calibrated on (a copy that training
    saw is read better than a new text, and would make the intervals too narrow), and a
    held-out text counts once."""
    model, ntok = small
    rng = random.Random(12)
    distinct = _texts(60, seed=13)
    texts = [rng.choice(distinct) for _ in range(150)]  # many copies
    result = train(
        model,
        ntok,
        texts,
        None,
        tempfile.mkdtemp(),
        max_steps=1,
        batch_size=8,
        progress=False,
        save=False,
        evaluate=False,
        readouts=False,
    )
    fit = result.trainer.train_dataset
    assert result.calibration is not None
    kept = {texts[i] for i in fit.indices}
    held = set(texts) - kept
    assert held and not (held & kept)
    # each held-out text is calibrated on once, its copies left out of training
    assert result.calibration_size == len(held) and sum(t in held for t in texts) >= 30
    assert len(fit) == sum(t in kept for t in texts)


def test_the_pool_holds_only_the_shared_heads_numbers(small) -> None:
    """A context with a solved readout but too few calibration numbers of its own keeps its
    readout's Cauchy intervals: the pooled widths are fitted on the shared head's errors, in
    units of its scales, and would not fit a readout's (far smaller) scale."""
    model, ntok = small
    solve_readouts(model, ntok, _texts(80, seed=14))  # "width " and "area " get readouts
    table = model.action.readouts
    assert int(table.is_solved.sum()) >= 1
    rng = random.Random(15)
    held = [
        f"{thing} {rng.randint(1, 90)}." for thing in ("box", "crate", "tray") for _ in range(15)
    ]
    held += _texts(5, seed=16)  # 5 numbers of each solved context: below min_count
    report = calibrate(model, ntok, held, min_count=20)
    (row,) = report.contexts
    assert (
        row["code"] == OTHER
        and row["count"]
        == 45 + sum(1 for c in ("width", "area") if not _is_solved(model, ntok, c)) * 5
    )
    for field in ("width", "area"):
        prompt = "width 4, area " if field == "area" else "width "
        pred = predict_values(model, ntok, [prompt], levels=(0.5,))
        assert bool(pred.calibrated.all()) == (not _is_solved(model, ntok, field))


def _is_solved(model: CauchyLMForCausalLM, ntok: NumericTokenizer, field: str) -> bool:
    prompt = "width 4, area " if field == "area" else "width "
    enc = ntok([prompt], return_tensors="pt")
    code = model.context_codes(enc["input_ids"], enc["attention_mask"])[0, -1]
    row = model.action.readouts.lookup(code[None])
    return bool(row[0] >= 0 and model.action.readouts.is_solved[row[0]])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_reads_the_solved_readouts(tmp_path, dtype: torch.dtype) -> None:
    """A model cast to (or loaded in) half precision predicts what it predicts in float32, to
    the rounding of that dtype, through the same solved readout: the context's token ids
    (``"größe "`` ends in id 256, whose digit 357 bfloat16 rounds to 356) must survive."""
    torch.manual_seed(0)
    model, ntok = CauchyLMForCausalLM.from_base(
        tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True
    )
    rng = random.Random(11)
    texts = [f"width {rng.randint(2, 60)}, größe {1000 + rng.randint(-2, 2)}." for _ in range(80)]
    solve_readouts(model, ntok, texts)
    prompts = ["width 7, größe ", "width 40, größe "]
    enc = ntok(prompts, padding=True, return_tensors="pt")
    codes = model.context_codes(enc["input_ids"], enc["attention_mask"])
    last = codes[torch.arange(2), enc["attention_mask"].sum(1) - 1]
    table = model.action.readouts
    rows = table.lookup(last)
    assert bool(table.is_solved[rows].all())  # the prompts' context has a solved readout
    digits = code_digits(last).float()
    assert not torch.equal(digits.to(torch.bfloat16).float(), digits)  # a digit bf16 rounds
    full = predict_values(model, ntok, prompts)
    # the rounding bound of w . loc + b: a few eps of the sum of the magnitudes it adds
    feats = number_features(model, ntok, [p + "1000." for p in prompts])
    at = feats.codes == last[0]
    read = feats.features(table)[at]  # loc_U' and the earlier numbers the readout reads
    magnitude = (table.weight[rows].double().abs() * read.abs()).sum(-1)
    tol = 4 * torch.finfo(dtype).eps * (magnitude + table.bias[rows].double().abs())
    model.save_pretrained(tmp_path)
    casts = {
        "to": lambda: copy.deepcopy(model).to(dtype),
        "method": lambda: (
            copy.deepcopy(model).half()
            if dtype == torch.float16
            else copy.deepcopy(model).bfloat16()
        ),
        "from_pretrained": lambda: CauchyLMForCausalLM.from_pretrained(tmp_path, dtype=dtype),
    }
    for how, cast in casts.items():
        half = cast()
        got = predict_values(half, ntok, prompts)
        assert bool(((got.loc - full.loc).abs() <= tol).all()), (how, got.loc, full.loc, tol)
        # the readout's own noise is the scale (the shared head's is another)
        noise = table.noise[rows].double()
        assert bool(((got.scale - noise).abs() <= torch.finfo(dtype).eps * noise).all()), how
        assert half.action.readouts.codes.tolist() == table.codes.tolist(), how


def test_intervals_of_targets_at_float32s_limits_stay_in_its_range() -> None:
    """Targets at +-3.4e38, calibrated: the widths in the value space are large, and their
    inverse overflows float32 (``-3.9e115`` at 90% before): every end lies in float32's range
    and every interval holds its median, calibrated or not, prompt or teacher-forced."""
    torch.manual_seed(0)
    model, ntok = CauchyLMForCausalLM.from_base(
        tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True
    )
    rng = random.Random(0)
    texts = [f"row {i}, price {rng.choice(['3.4e38', '-3.4e38'])}." for i in range(60)]
    solve_readouts(model, ntok, texts)
    calibrate(model, ntok, texts)
    largest = torch.finfo(torch.float32).max
    levels = (0.5, 0.9, 0.99)
    preds = [
        predict_values(model, ntok, ["row 3, price ", "row 9, price "], levels=levels),
        predict_values(model, ntok, ["row 3, price "], levels=levels, calibrated=False),
        number_predictions(model, ntok, texts[:5], levels=levels).prediction,
    ]
    assert bool(preds[0].calibrated[:, 1].all())  # the 90% interval is a calibrated one
    for p in preds:
        for t in (p.median, p.lower, p.upper):
            assert bool((t.abs() <= largest).all()), t
        assert bool((p.lower <= p.median[:, None]).all() and (p.median[:, None] <= p.upper).all())


def test_a_table_of_two_rows_repeated_trains_and_keeps_its_model(small, tmp_path) -> None:
    """Two distinct rows, each 60 times: the readout solve failed with a singular matrix
    after training and the trained model was lost; now training ends and saves."""
    model, ntok = small
    texts = ["area 50, price 150.", "area 80, price 240."] * 60
    result = train(
        model,
        ntok,
        texts,
        None,
        tmp_path,
        max_steps=2,
        batch_size=8,
        progress=False,
        evaluate=False,
        calibration=None,
    )
    assert result.readouts is not None and len(result.readouts.contexts) == 2
    assert (tmp_path / "config.json").is_file()
    pred = predict_values(CauchyLMForCausalLM.from_pretrained(tmp_path), ntok, ["area 50, price "])
    assert bool(torch.isfinite(pred.median).all())


def test_a_readout_that_cannot_be_solved_leaves_the_shared_head_with_a_note(
    small, tmp_path, monkeypatch
) -> None:
    import cauchylin_hf.readouts as readouts

    def singular(*args, **kwargs):
        raise torch.linalg.LinAlgError("the input matrix is singular")

    model, ntok = small
    monkeypatch.setattr(readouts, "fit_cauchy_readout", singular)
    result = train(
        model,
        ntok,
        _texts(60, seed=12),
        None,
        tmp_path,
        max_steps=2,
        batch_size=8,
        progress=False,
        evaluate=False,
        calibration=None,
    )
    report = result.readouts
    assert report is not None and report.kept == 0 and len(report.unsolved) == 2
    assert "could not be solved (the input matrix is singular)" in report.unsolved[0]["note"]
    assert model.action.readouts.num_contexts == 0  # the shared head everywhere
    assert (tmp_path / "model.safetensors").is_file()


@pytest.mark.parametrize("rows", [150, 25_000])
def test_copies_of_one_text_train_uncalibrated_with_a_note(small, tmp_path, rows) -> None:
    """Every training text the same: none can be held out (a held-out copy is a text training
    saw); the model trains on them all and says why it is not calibrated. 150 rows are
    grouped in memory (an error before); 25,000 from a ``datasets.Dataset`` are held out by
    hash (an error for some seeds, nothing held out and nothing said for the others)."""
    datasets = pytest.importorskip("datasets")
    model, ntok = small
    texts = ["area 50, price 150."] * rows
    data = texts if rows < 1000 else datasets.Dataset.from_dict({"text": texts})
    for seed in (0, 1):
        result = train(
            model,
            ntok,
            data,
            None,
            tmp_path,
            max_steps=1,
            batch_size=8,
            progress=False,
            save=False,
            evaluate=False,
            readouts=False,
            calibration="auto",
            seed=seed,
        )
        assert result.global_step == 1 and result.calibration is None
        note = getattr(result, "calibration_note", "")
        assert f"the {rows} training texts are all copies of one text" in note


def test_a_solve_that_fails_keeps_the_models_readouts_and_calibration(small) -> None:
    """A bad call (an empty dataset, a batch size of 0) used to empty the table before it
    failed: the model silently lost its readouts and calibration."""
    model, ntok = small
    solve_readouts(model, ntok, _texts(80, seed=13))
    calibrate(model, ntok, _texts(40, seed=14))
    prompts = ["width 9, area ", "width 33, area "]
    before = predict_values(model, ntok, prompts)
    assert bool(before.calibrated.all())
    for data, batch_size in (([], 32), (_texts(40, seed=15), 0)):
        with pytest.raises(ValueError, match=r"empty|batch_size"):
            solve_readouts(model, ntok, data, batch_size=batch_size)
        after = predict_values(model, ntok, prompts)
        assert bool(after.calibrated.all()) and torch.equal(after.upper, before.upper)


def test_an_empty_prompt_is_refused_naming_it(small) -> None:
    model, ntok = small
    with pytest.raises(ValueError, match=r"prompt 2 of 2 has no tokens \(''\)"):
        predict_values(model, ntok, ["width 3, area ", ""])


def test_a_readout_replaces_the_shared_head_whatever_its_training_nll(small, monkeypatch) -> None:
    """The shared head's NLL on the numbers it was trained on decides nothing: even where it
    reads as perfect (-inf here), every readout that solves is kept."""
    import cauchylin_hf.readouts as readouts

    model, ntok = small
    monkeypatch.setattr(readouts, "cauchy_nll", lambda t, loc, scale: torch.full_like(t, -math.inf))
    report = solve_readouts(model, ntok, _texts(80, seed=0))
    assert [c["shared_nll"] for c in report.contexts] == [-math.inf, -math.inf]
    assert report.kept == 2 and model.action.readouts.num_contexts == 2
    assert bool(model.action.readouts.is_solved.all())


def test_a_context_of_one_prefix_reads_no_rounding(monkeypatch) -> None:
    """Every text begins ``width <NUM>``: the first number's features are one vector in exact
    arithmetic. Another device's kernels (or more CPU threads) round them differently from row
    to row by a few dozen float32 ulps, simulated here on the features the solve reads. The
    solved readout of that context is its bias (weight 0: the Cauchy fit of the widths alone),
    with the rounding as without it, and the other context's readout moves by no more than
    the rounding (before, the rounding was fitted with weights of 1e5 that changed with it: a
    model on a GPU and on a CPU disagreed)."""
    import cauchylin_hf.readouts as readouts

    rng = random.Random(0)
    texts = [f"width {w}, area {2 * w + rng.randint(-3, 3)}." for w in range(2, 82)]
    torch.manual_seed(0)
    model, ntok = CauchyLMForCausalLM.from_base(
        tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True, readout_numbers=0
    )
    exact = readouts.number_features

    def rounded(seed: int):
        def read(*args, **kwargs):
            f = exact(*args, **kwargs)
            g = torch.Generator().manual_seed(seed)
            ulps = 20 * torch.finfo(torch.float32).eps * torch.randn(f.loc.shape, generator=g)
            return dataclasses.replace(f, loc=f.loc * (1 + ulps.double()))

        return read

    tables, reads = [], []
    for seed in (None, 0, 1):
        if seed is not None:
            monkeypatch.setattr(readouts, "number_features", rounded(seed))
        solve_readouts(model, ntok, texts, penalties=(1e-2,))
        tables.append(copy.deepcopy(model.action.readouts))
        reads.append(exact(model, ntok, texts))  # every number read with the readouts solved
    first = exact(model, ntok, texts)
    widths = first.targets[first.codes == int(first.codes[0])]  # the first numbers: the widths
    row = int(tables[0].lookup(first.codes[:1]))
    # a bias-only readout is the Cauchy maximum-likelihood fit of the widths (value space)
    loc, scale = cauchy.fit(widths.numpy())
    for table in tables:
        assert table.num_contexts == 2
        assert bool((table.weight[row] == 0).all())
        assert abs(float(table.bias[row]) - loc) < 1e-3 * scale
        assert abs(float(table.noise[row]) - scale) < 1e-3 * scale
    spread = float(first.targets.std())
    for read in reads[1:]:  # the predictions (the weights of collinear features may move)
        for name in ("loc_y", "scale_y"):
            a, b = getattr(read, name), getattr(reads[0], name)
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3 * spread)


def test_the_location_asked_for_is_solved_and_refitted_by_cross_calibration(small, monkeypatch):
    """``solve_readouts(location=...)``: each context's readout is ``fit_cauchy_readout`` of
    that location on its features (the report names it), and ``cross_calibrate`` refits every
    fold with the location the context was solved with."""
    import cauchylin_hf.readouts as readouts

    model, ntok = small
    rng = random.Random(3)
    texts = [f"width {w}, area {2 * w + rng.randint(-3, 3)}." for w in range(2, 62)]
    report = solve_readouts(model, ntok, texts, location="least_squares", penalties=(1e-2,))
    assert {c["location"] for c in report.contexts if c["kept"]} == {"least_squares"}
    feats = number_features(model, ntok, texts)
    code = _area_code(model, ntok)
    rows = feats.codes == code
    table = model.action.readouts
    want = fit_cauchy_readout(
        feats.features(table)[rows],
        feats.targets[rows],
        penalties=(1e-2,),
        location="least_squares",
        rtol=table.feature_rtol(),
    )
    row = int(table.lookup(torch.tensor([code])))
    torch.testing.assert_close(table.weight[row], want.weight.float(), rtol=1e-4, atol=1e-5)
    seen = []
    real = readouts.fit_cauchy_readout

    def spy(*args, **kwargs):
        seen.append(kwargs.get("location"))
        return real(*args, **kwargs)

    monkeypatch.setattr(readouts, "fit_cauchy_readout", spy)
    readouts.cross_calibrate(model, ntok, texts, report, folds=5, min_count=5)
    assert seen and set(seen) == {"least_squares"}
