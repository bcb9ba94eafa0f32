"""The single-pass decoding heads of ``cauchylin._fused_heads``, both ways.

The fused loop (``torch.compile``, inductor's C++ backend) is compared with an independent float64
reference and with the two matrix products it replaces, with a tolerance from the size of the
summands: a float sum of ``C`` products is within ``gamma_C sum_j |W_kj x_j|`` of the exact sum
(``gamma_C = C eps / (1 - C eps)``), whatever the order of the additions. The switch, the
fallback when compiling fails, and ``Action.step`` with the loop on and off are tested too.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.nn import functional as F

from cauchylin import CauchyVector
from cauchylin import _fused_heads as FH
from cauchylin.nn import Action
from cauchylin.nn.modes import Decoding


def _gamma(c: int, dtype: torch.dtype) -> float:
    eps = torch.finfo(dtype).eps
    return c * eps / (1 - c * eps)


def _bound(weight: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """Error bound of a float dot product (+ bias) against the exact value, per output entry."""
    c = weight.shape[1]
    mags = x.double().abs() @ weight.double().abs().T
    if bias is not None:
        mags = mags + bias.double().abs()
    return (_gamma(c + 1, weight.dtype) * mags).to(weight.dtype)


@pytest.fixture
def fused_on():
    FH.set_fused_heads(True)
    yield
    FH.set_fused_heads(None)


@pytest.mark.slow
@pytest.mark.parametrize(
    "dtype, rows, with_bias, with_scale",
    [
        (torch.float32, 3, True, True),
        (torch.float32, 11, True, True),  # two calls: 8 + 3 rows
        (torch.float64, 2, False, True),
        (torch.float32, 3, True, False),  # compatible mode: loc_S only
    ],
)
def test_fused_heads_match_float64_and_the_two_products(
    fused_on, dtype, rows, with_bias, with_scale
):
    gen = torch.Generator().manual_seed(rows)
    v, c = 257, 37  # C not a multiple of the vector width: the masked tail is exercised
    weight = (torch.randn(v, c, generator=gen) * 3).to(dtype)
    bias = torch.randn(v, generator=gen).to(dtype) if with_bias else None
    loc = (torch.randn(rows, c, generator=gen) * 10).to(dtype)
    scale = torch.rand(rows, c, generator=gen).to(dtype) + 0.01 if with_scale else None
    with torch.no_grad():
        out = FH.head_scores(weight, bias, loc, scale)
    assert out is not None
    loc_s, scale_s = out
    assert loc_s.shape == (rows, v) and loc_s.dtype == dtype
    exact_loc = loc.double() @ weight.double().T + (0 if bias is None else bias.double())
    tol_loc = _bound(weight, loc, bias)
    assert bool(((loc_s.double() - exact_loc).abs() <= tol_loc).all())
    # against the two products the decoding step ran before: both within the bound of the exact sum
    assert bool(((loc_s - F.linear(loc, weight, bias)).abs() <= 2 * tol_loc).all())
    if with_scale:
        assert scale_s is not None and scale_s.shape == (rows, v)
        exact_scale = scale.double() @ weight.double().abs().T
        tol_scale = _bound(weight, scale, None)
        assert bool(((scale_s.double() - exact_scale).abs() <= tol_scale).all())
        assert bool(((scale_s - F.linear(scale, weight.abs())).abs() <= 2 * tol_scale).all())
        assert bool((scale_s > 0).all())
    else:
        assert scale_s is None


@pytest.mark.slow
def test_leading_dimensions_are_kept(fused_on):
    weight, loc = torch.randn(40, 16), torch.randn(1, 3, 16)
    with torch.no_grad():
        loc_s, scale_s = FH.head_scores(weight, None, loc, loc.abs())
    assert loc_s.shape == scale_s.shape == (1, 3, 40)
    torch.testing.assert_close(loc_s, F.linear(loc, weight), rtol=0, atol=1e-5)


def test_the_switch_and_when_the_loop_does_not_apply(monkeypatch):
    weight, loc = torch.randn(40, 16), torch.randn(2, 16)
    with torch.no_grad():
        FH.set_fused_heads(False)
        assert FH.fused_heads_setting() is False
        assert FH.head_scores(weight, None, loc, loc.abs()) is None
        FH.set_fused_heads(None)
        # auto: a head this small is below AUTO_MIN_ELEMENTS
        monkeypatch.delenv("CAUCHYLIN_FUSED_HEADS", raising=False)
        assert FH.fused_heads_setting() is None
        assert FH.head_scores(weight, None, loc, loc.abs()) is None
        monkeypatch.setenv("CAUCHYLIN_FUSED_HEADS", "0")
        assert FH.fused_heads_setting() is False
        monkeypatch.setenv("CAUCHYLIN_FUSED_HEADS", "1")
        assert FH.fused_heads_setting() is True
        # too many rows, a half-precision head, mismatched shapes: the caller's products run
        assert FH.head_scores(weight, None, torch.randn(FH.MAX_FUSED_ROWS + 1, 16)) is None
        assert FH.head_scores(weight.half(), None, loc.half()) is None
        assert FH.head_scores(weight, None, loc, loc[:1].abs()) is None
    # with gradients wanted the loop never runs (it has no backward)
    assert FH.head_scores(weight, None, loc) is None
    monkeypatch.setenv("CAUCHYLIN_FUSED_HEADS", "sometimes")
    with pytest.raises(ValueError, match="CAUCHYLIN_FUSED_HEADS must be 0, 1 or auto"):
        FH.fused_heads_setting()
    with pytest.raises(ValueError, match="enabled must be True, False or None"):
        FH.set_fused_heads("yes")  # type: ignore[arg-type]


def test_a_failing_compiler_falls_back_with_one_warning(monkeypatch, fused_on):
    def broken(*args, **kwargs):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(FH, "_KERNELS", {})
    monkeypatch.setattr(FH, "_FAILED", set())
    monkeypatch.setattr(FH, "_READY", set())
    monkeypatch.setattr(torch, "compile", broken)
    weight, loc = torch.randn(40, 16), torch.randn(2, 16)
    with torch.no_grad():
        with pytest.warns(RuntimeWarning, match="fused decoding heads could not be compiled"):
            assert FH.head_scores(weight, None, loc, loc.abs()) is None
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the same shape does not try (nor warn) again
            assert FH.head_scores(weight, None, loc, loc.abs()) is None


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["standard", "causal", "sampling", "compatible"])
def test_action_step_is_the_same_with_the_loop_on_and_off(monkeypatch, mode):
    monkeypatch.setattr(FH, "_READY", set())  # records the fused calls below
    torch.manual_seed(0)
    act = Action(24, 300, threshold=0.0)
    U = CauchyVector(torch.randn(4, 24), torch.rand(4, 24) + 0.1)
    steps = {}
    for enabled in (False, True):
        FH.set_fused_heads(enabled)
        try:
            decoding = Decoding.make(mode, 1.0, generator=torch.Generator().manual_seed(1))
            steps[enabled] = act.step(U, decoding, return_distributions=True)
        finally:
            FH.set_fused_heads(None)
    assert FH._READY, "the fused loop did not run"
    off, on = steps[False], steps[True]
    W, b = act.classifier.weight.detach(), act.classifier.bias.detach()
    Up = off.U_prime
    assert bool(((on.loc_S - off.loc_S).abs() <= 2 * _bound(W, Up.loc, b)).all())
    assert bool(((on.scale_S - off.scale_S).abs() <= 2 * _bound(W, Up.scale, None)).all())
    # the chosen tokens agree wherever the decision is not a near-tie at rounding level
    assert torch.equal(on.ids, off.ids)


def test_the_kernel_run_eagerly_is_the_two_products():
    """Dynamo disabled or a force_eager stance runs the kernel uncompiled: then it must not form
    [V, C] products per row but run the two matrix products (the same numbers as the fallback)."""
    gen = torch.Generator().manual_seed(4)
    weight, bias = torch.randn(50, 12, generator=gen), torch.randn(50, generator=gen)
    loc, scale = torch.randn(3, 12, generator=gen), torch.rand(3, 12, generator=gen)
    loc_s, scale_s = FH._kernel(weight, bias, loc, scale)
    assert torch.equal(loc_s, F.linear(loc, weight, bias))
    assert torch.equal(scale_s, F.linear(scale, weight.abs()))
    assert FH._kernel(weight, None, loc, None)[1] is None
