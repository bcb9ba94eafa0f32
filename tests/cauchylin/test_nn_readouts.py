"""The per-context readout table: codes, lookup, the exact law of Y it builds, widths, errors."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from cauchylin import CauchyVector, cat
from cauchylin.nn import Action
from cauchylin.nn.modes import Decoding
from cauchylin.nn.readouts import (
    MAX_CONTEXT_TOKENS,
    NO_CONTEXT,
    OTHER,
    ContextReadouts,
    ReadoutContext,
    code_digits,
    context_codes,
    earlier_numbers,
)
from cauchylin.readout import CauchyReadout
from tests.stats import FALSE_FAILURE_RATE, dkw_epsilon, split_delta


def _fit(weight: list[float], bias: float, noise: float) -> CauchyReadout:
    return CauchyReadout(
        torch.tensor(weight), torch.tensor(bias), torch.tensor(noise), 0.0, math.nan, 50, 1
    )


@given(
    st.lists(st.integers(-101, 999), min_size=1, max_size=12),
    st.integers(1, MAX_CONTEXT_TOKENS),
)
def test_equal_codes_are_equal_windows_of_tokens(tokens: list[int], k: int) -> None:
    ids = torch.tensor(tokens)
    codes = context_codes(ids, k, 1000)
    padded = [-101] * k + tokens  # "no token" before the start
    windows = [tuple(padded[i + 1 : i + k + 1]) for i in range(len(tokens))]
    for i in range(len(tokens)):
        digits = code_digits(codes[i]).tolist()[MAX_CONTEXT_TOKENS - k :]
        assert digits == [v + 101 for v in windows[i]]
        for j in range(len(tokens)):
            assert bool(codes[i] == codes[j]) == (windows[i] == windows[j])


def test_padding_is_no_token() -> None:
    ids = torch.tensor([[0, 0, 5, 6], [5, 6, 0, 0]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 0, 0]])
    codes = context_codes(ids, 3, 10, mask)
    assert int(codes[0, 3]) == int(codes[1, 1])  # left padding: the prompt alone
    with pytest.raises(ValueError, match="k must be at most"):
        context_codes(ids, 4, 10)
    with pytest.raises(ValueError, match="num_classes"):
        context_codes(ids, 2, 2**21)


def test_y_is_exact_where_a_row_has_a_readout_and_the_shared_head_elsewhere() -> None:
    """Marginals against the definition, and the joint law of (S, Y) by Monte Carlo: Y is
    independent of U' where the solved readout reads loc_U' only, and a map of U' elsewhere."""
    torch.manual_seed(0)
    act = Action(3, 4, threshold=0.0, b_noise_init=0.2)
    fit = _fit([1.0, -2.0, 0.5], 0.3, 0.4)
    act.readouts.store([7], [fit])
    U = CauchyVector(torch.randn(2, 3), torch.rand(2, 3) + 0.1)
    context = torch.tensor([7, 8])
    with torch.no_grad():
        out = act(U, "standard", 1.0, context=context)
    up = act.decision_input(U, "standard", 1.0)
    shared = act(U, "standard", 1.0)
    assert torch.allclose(out.loc_Y[0], up.loc[0] @ fit.weight + 0.3)
    assert torch.allclose(out.scale_Y[0], torch.tensor(0.4))
    assert torch.allclose(out.loc_Y[1], shared.loc_Y[1]) and torch.allclose(
        out.scale_Y[1], shared.scale_Y[1]
    )
    n = 40_000
    with torch.no_grad():  # one joint draw of (S_0, Y): both read the same draw of U'
        joint = cat([out.S[..., :1], out.Y], -1).rsample(
            (n,), generator=torch.Generator().manual_seed(1)
        )
    s_draws, draws = joint[..., 0], joint[..., 1]
    eps = dkw_epsilon(n, split_delta(4, FALSE_FAILURE_RATE))
    # the marginal law of Y at the solved position: Cauchy(loc, 0.4), by its CDF
    z = (draws[:, 0] - out.loc_Y[0]) / 0.4
    for q in (-2.0, -0.5, 0.0, 1.0):
        empirical = float((z <= q).double().mean())
        assert abs(empirical - (0.5 + math.atan(q) / math.pi)) < eps

    # dependence, by the rank correlation of the joint draws: where the solved readout reads
    # loc_U' only, Y is independent of S; where the shared head stays, both map one U'
    def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
        ra, rb = a.argsort().argsort().double(), b.argsort().argsort().double()
        return float(torch.corrcoef(torch.stack([ra, rb]))[0, 1])

    # under independence sqrt(n) * rho is about standard normal: |z| < 5.5 at 4e-8
    assert abs(spearman(draws[:, 0], s_draws[:, 0])) < 5.5 / math.sqrt(n)
    assert abs(spearman(draws[:, 1], s_draws[:, 1])) > 10 / math.sqrt(n)


def test_step_and_forward_agree() -> None:
    torch.manual_seed(1)
    act = Action(3, 5, threshold=0.0)
    act.readouts.store([2, 9], [_fit([0.5, 0.5, 0.5], -1.0, 0.1), None])
    U = CauchyVector(torch.randn(4, 3), torch.rand(4, 3) + 0.1)
    context = torch.tensor([2, 9, 3, 2])
    for mode in ("causal", "standard", "sampling"):
        g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
        out = act(U, mode, 1.0, context=context, generator=g1)
        decoding = Decoding.make(mode, 1.0, generator=g2)
        step = act.step(U, decoding, context=context, return_distributions=True)
        torch.testing.assert_close(step.loc_Y, out.loc_Y)
        torch.testing.assert_close(step.scale_Y, out.scale_Y)


def test_widths_fall_back_to_the_pooled_row() -> None:
    table = ContextReadouts(2, levels=(0.5, 0.9))
    widths = torch.tensor([[0.8, math.inf], [0.7, 2.0]], dtype=torch.float64)
    table.store([5, OTHER], [None, None], widths, [30, 60])
    rows = table.lookup(torch.tensor([5, 6]))
    assert table.widths_at(rows, 0.5).tolist() == pytest.approx([0.8, 0.7])  # float32
    # 5 has no finite width at 0.9 (too few rows): the pooled row's
    assert table.widths_at(rows, 0.9).tolist() == [2.0, 2.0]
    assert table.calibrated_on(rows).tolist() == [30, 60]
    with pytest.raises(ValueError, match="not among the calibrated levels"):
        table.widths_at(rows, 0.8)


@pytest.mark.parametrize(
    ("codes", "readouts", "match"),
    [
        ([1, 1], [None, None], "distinct"),
        ([1], [None, None], "one per row"),
        ([OTHER], [_fit([1.0, 1.0], 0.0, 1.0)], "OTHER row"),
        ([3], [_fit([1.0, 1.0, 1.0], 0.0, 1.0)], "weight of 2"),
        ([-5], [None], "codes must be"),
    ],
)
def test_bad_tables_are_refused(codes: list[int], readouts: list, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ContextReadouts(2).store(codes, readouts)


def test_the_digits_and_counts_are_integers_and_the_rest_floating_point_and_finite() -> None:
    table = ContextReadouts(2, levels=(0.5,))
    table.store([OTHER, 4], [None, _fit([1.0, 2.0], 0.0, 0.5)], torch.tensor([[1.0], [math.nan]]))
    for name, t in table.state_dict().items():
        if name in _INTEGER:
            assert t.dtype == torch.int64, name
        else:
            assert t.is_floating_point() and bool(torch.isfinite(t).all()), name
    assert table.codes.tolist() == [OTHER, 4]


# token ids of a large vocabulary, whose digits (id + 101) bfloat16 and float16 round
_INTEGER = ("contexts", "counts")
_LARGE_IDS = (150_000, 70_001, 5_001)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_a_cast_of_the_table_keeps_every_context_code(dtype: torch.dtype) -> None:
    ids = torch.tensor([_LARGE_IDS, (7, 3_001, 325)])
    codes = context_codes(ids, 3, 200_000)[:, -1].tolist()
    table = ContextReadouts(2, levels=(0.5,))
    table.store(codes, [_fit([1.0, 2.0], 3.0, 0.5), None], calibration_counts=[1001, 2049])
    for cast in (table.to(dtype), table.to(dtype=dtype), table.half(), table.bfloat16()):
        assert cast.codes.tolist() == sorted(codes)
        assert sorted(cast.lookup(torch.tensor(codes)).tolist()) == [0, 1]
        assert sorted(cast.counts[:, 1].tolist()) == [1001, 2049]


def test_a_table_saved_with_float_digits_loads_exactly() -> None:
    """Earlier releases stored the digits and counts as floats (exact in float32)."""
    code = int(context_codes(torch.tensor([(*_LARGE_IDS[1:], 325)]), 3, 200_000)[0, -1])
    table = ContextReadouts(2, levels=(0.5,))
    table.store([code], [_fit([1.0, 2.0], 3.0, 0.5)], calibration_counts=[1001])
    old = {k: (v.float() if k in _INTEGER else v) for k, v in table.state_dict().items()}
    loaded = ContextReadouts(2, 1, levels=(0.5,))
    loaded.load_state_dict(old)
    assert loaded.contexts.dtype == torch.int64 and loaded.codes.tolist() == [code]
    assert loaded.counts.tolist() == [[50, 1001]]
    # a loader that assigns the float tensors as they are: a cast keeps them exact
    assigned = ContextReadouts(2, 1, levels=(0.5,))
    assigned.load_state_dict(old)
    assigned.contexts, assigned.counts = old["contexts"], old["counts"]
    assert assigned.to(torch.bfloat16).codes.tolist() == [code]


def test_a_readout_that_is_not_finite_or_counts_of_another_length_are_refused() -> None:
    table = ContextReadouts(2, levels=(0.5,))
    for bad in (
        _fit([math.nan, 1.0], 0.0, 0.5),
        _fit([1.0, 1.0], math.inf, 0.5),
        _fit([1.0, 1.0], 0.0, 0.0),
    ):
        with pytest.raises(ValueError, match="finite weight and bias and a finite noise > 0"):
            table.store([5], [bad])
    with pytest.raises(ValueError, match="calibration_counts"):
        table.store([1, 2], [None, None], torch.ones(2, 1), [3])


# ----------------------------------------------------------------------------- the context rule

NUM_ID = 9


def _sequence() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two left-padded rows with numbers (id 9): ids, values, mask."""
    ids = torch.tensor([[0, 0, 5, 9, 6, 9, 7, 8], [5, 9, 6, 7, 9, 9, 8, 5]])
    values = torch.zeros(ids.shape)
    values[ids == NUM_ID] = torch.tensor([2.0, 5.0, 1.0, 3.0, 7.0])
    values[0, 0] = 4.0  # a value under padding: never read as a number
    mask = torch.ones_like(ids)
    mask[0, :2] = 0
    return ids, values, mask


@pytest.mark.parametrize("slots", [0, 2])
def test_context_of_a_whole_sequence_is_its_codes_and_earlier_numbers(slots: int) -> None:
    ids, values, mask = _sequence()
    table = ContextReadouts(4, numbers=slots)
    ctx = table.context(
        ids, 3, 10, mask, values=values, num_token_id=NUM_ID, value_space="identity"
    )
    assert isinstance(ctx, ReadoutContext)
    assert torch.equal(ctx.codes, context_codes(ids, 3, 10, mask))
    if slots == 0:
        assert ctx.numbers is None
        return
    assert ctx.numbers is not None
    # the latest numbers at or before each position, read off the rows by hand
    assert ctx.numbers[0, :, 0].tolist() == [0, 0, 0, 2, 2, 5, 5, 5]
    assert ctx.numbers[0, :, 1].tolist() == [0, 0, 0, 0, 0, 2, 2, 2]
    assert ctx.numbers[1, :, 0].tolist() == [0, 1, 1, 1, 3, 7, 7, 7]
    assert ctx.numbers[1, -1, 1].item() == 3
    is_number = (ids == NUM_ID) & (mask != 0)
    assert torch.equal(ctx.numbers, earlier_numbers(values, is_number, slots, "identity"))


@pytest.mark.parametrize("slots", [0, 2])
def test_the_last_position_alone_is_that_of_the_whole_sequence(slots: int) -> None:
    ids, values, mask = _sequence()
    table = ContextReadouts(4, numbers=slots)
    kw = {"values": values, "num_token_id": NUM_ID, "value_space": "signed_log1p"}
    whole = table.context(ids, 2, 10, mask, **kw)
    last = table.context(ids, 2, 10, mask, last=True, **kw)
    assert torch.equal(last.codes, whole.codes[:, -1])
    if slots:
        assert last.numbers is not None and whole.numbers is not None
        assert torch.equal(last.numbers, whole.numbers[:, -1])
    else:
        assert last.numbers is None


@pytest.mark.parametrize("fed", [1, 2, 4])
def test_after_a_cache_a_code_is_known_only_where_its_tokens_were_fed(fed: int) -> None:
    ids, values, mask = _sequence()
    k = 3
    whole = ContextReadouts(4).context(ids, k, 10, mask)
    step = ContextReadouts(4).context(ids[:, -fed:], k, 10, mask, cached=True)  # the full mask
    known = torch.arange(fed) >= k - 1
    assert torch.equal(step.codes[:, known], whole.codes[:, -fed:][:, known])
    assert bool((step.codes[:, ~known] == NO_CONTEXT).all())
    assert step.numbers is None
    # readouts that read earlier numbers: those may lie in the cache, so no code is known
    reading = ContextReadouts(4, numbers=1).context(
        ids[:, -fed:], k, 10, mask, values=values[:, -fed:], num_token_id=NUM_ID, cached=True
    )
    assert bool((reading.codes == NO_CONTEXT).all()) and reading.numbers is None
    # no row of any table holds the unknown code: the shared head reads those positions
    table = ContextReadouts(4)
    table.store([int(whole.codes[0, -1])], [_fit([1.0, 0.0, 0.0, 0.0], 0.0, 1.0)])
    assert table.lookup(torch.tensor([NO_CONTEXT])).item() == -1


def test_a_context_record_and_loose_numbers_are_refused_together() -> None:
    ctx = ReadoutContext(torch.tensor([1, 2]), torch.zeros(2, 1))
    assert ReadoutContext.of(ctx) is ctx
    assert ReadoutContext.of(None, torch.zeros(2, 1)) is None
    loose = ReadoutContext.of(torch.tensor([1, 2]), torch.zeros(2, 1))
    assert loose is not None and loose.numbers is not None
    with pytest.raises(ValueError, match="numbers travel in the ReadoutContext"):
        ReadoutContext.of(ctx, torch.zeros(2, 1))


def test_a_stored_readout_reads_back_for_storing_again() -> None:
    """``readout(row)`` gives what ``store`` was given (the shared head's rows: None), so a table
    can be stored again with some of its rows."""
    table = ContextReadouts(2)
    fit = _fit([1.5, -2.0], 0.25, 0.5)
    table.store([9, 4], [fit, None], calibration_counts=[40, 0])
    rows = {int(code): i for i, code in enumerate(table.codes.tolist())}
    back = table.readout(rows[9])
    assert back is not None and table.readout(rows[4]) is None
    assert torch.equal(back.weight, fit.weight.to(back.weight.dtype))
    assert float(back.bias) == 0.25 and float(back.noise) == 0.5
    table.store([9], [back])
    again = table.readout(0)
    assert table.codes.tolist() == [9] and again is not None
    assert torch.equal(again.weight, back.weight)
    with pytest.raises(IndexError, match="row must be in"):
        table.readout(1)
