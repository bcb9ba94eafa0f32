"""The value space of the regression head: maps, exact quantiles, and their use in Action."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from cauchylin import CauchyVector
from cauchylin.nn import Action
from cauchylin.value_space import (
    VALUE_SPACES,
    from_value_space,
    to_value_space,
    value_quantiles,
)
from tests.stats import dkw_epsilon, split_delta

Y = [-1e30, -12345.678, -1.0, -1e-7, -0.0, 0.0, 1e-30, 0.5, 3.0, 1e6, 3.0e38]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_maps_match_numpy_and_invert(dtype):
    y = torch.tensor(Y, dtype=dtype)
    t = to_value_space(y, "signed_log1p")
    ref = np.sign(np.array(Y)) * np.log1p(np.abs(np.array(Y)))
    eps = torch.finfo(dtype).eps
    assert torch.allclose(t.double(), torch.tensor(ref), rtol=4 * eps, atol=0)
    back = from_value_space(t, "signed_log1p")
    assert torch.allclose(back.double(), y.double(), rtol=64 * eps, atol=1e-300)
    assert t.dtype == dtype and back.dtype == dtype
    assert torch.equal(to_value_space(y, "identity"), y)


def test_half_and_int_inputs_compute_in_float32():
    assert (
        to_value_space(torch.tensor([3], dtype=torch.int64), "signed_log1p").dtype == torch.float32
    )
    t = to_value_space(torch.tensor([60000.0], dtype=torch.float16), "signed_log1p")
    assert t.dtype == torch.float32 and abs(t.item() - math.log1p(60000.0)) < 1e-5


def test_out_of_range_gives_infinity_not_nan():
    t = torch.tensor([-200.0, -math.inf, 89.0, math.inf])
    out = from_value_space(t, "signed_log1p")
    assert out.tolist() == [-math.inf, -math.inf, math.inf, math.inf]


def test_unknown_space_is_refused_by_name():
    with pytest.raises(ValueError, match="value_space"):
        to_value_space(torch.zeros(1), "log")
    with pytest.raises(ValueError, match="value_space"):
        Action(3, 4, value_space="log")
    with pytest.raises(ValueError, match="q must lie"):
        value_quantiles(torch.zeros(1), torch.ones(1), 1.5, "identity")


@pytest.mark.parametrize("space", VALUE_SPACES)
def test_quantiles_agree_with_monte_carlo(space):
    """The mapped Cauchy quantiles are the quantiles of g^{-1}(t) for t drawn by scipy."""
    loc, scale, n = 2.5, 0.7, 200_000
    t = stats.cauchy(loc, scale).rvs(size=n, random_state=np.random.default_rng(0))
    with np.errstate(over="ignore"):  # far tails overflow to inf, as g^{-1} does
        y = np.sort(np.sign(t) * np.expm1(np.abs(t)) if space == "signed_log1p" else t)
    qs = [0.05, 0.25, 0.5, 0.75, 0.95]
    eps = dkw_epsilon(n, split_delta(1))  # one sup-norm bound covers every quantile
    for q in qs:
        x = value_quantiles(
            torch.tensor(loc, dtype=torch.float64),
            torch.tensor(scale, dtype=torch.float64),
            q,
            space,
        ).item()
        ecdf = np.searchsorted(y, x, side="right") / n
        assert abs(ecdf - q) <= eps, (q, ecdf)
    lo, hi = (value_quantiles(torch.tensor(loc), torch.tensor(scale), q, space) for q in (0.0, 1.0))
    assert lo.item() == -math.inf and hi.item() == math.inf


def test_action_loss_regresses_in_the_value_space():
    """Same weights: the log1p Action's regression term equals the identity Action's on g(y)."""
    torch.manual_seed(0)
    a = Action(6, 9, threshold=0.0, value_space="signed_log1p")
    b = Action(6, 9, threshold=0.0)
    b.load_state_dict(a.state_dict())
    U = CauchyVector(torch.randn(2, 4, 6), torch.rand(2, 4, 6) + 0.1)
    labels = torch.tensor([[8, 1, 8, 2], [0, 8, 3, -100]])
    values = torch.tensor([[250.0, 0.0, -3.5, 0.0], [0.0, 1e4, 0.0, 0.0]])
    t = torch.from_numpy(np.sign(values.numpy()) * np.log1p(np.abs(values.numpy())))
    la = a.loss(U, labels, values, num_token_id=8, alpha=1.0)
    lb = b.loss(U, labels, t.float(), num_token_id=8, alpha=1.0)
    torch.testing.assert_close(la.reg.mean, lb.reg.mean)
    torch.testing.assert_close(la.cls.mean, lb.cls.mean)


def test_step_and_output_report_numbers_in_their_units():
    torch.manual_seed(1)
    act = Action(4, 5, threshold=0.0, value_space="signed_log1p")
    with torch.no_grad():
        act.classifier.weight.fill_(1e-3)
        act.classifier.bias.copy_(torch.tensor([-5.0, -5.0, -5.0, -5.0, 5.0]))  # <NUM> = 4 wins
        act.regressor.weight.fill_(0.1)  # loc_U = 0 below: loc_Y = b_reg, scale_Y = 0.4
        act.regressor.bias.fill_(math.log1p(41.0))
    U = CauchyVector(torch.zeros(3, 4), torch.ones(3, 4))
    step = act.step(U, "causal", num_token_id=4)
    assert step.ids.tolist() == [4, 4, 4]
    torch.testing.assert_close(step.values, torch.full((3,), 41.0))
    out = act(U, "causal")
    torch.testing.assert_close(out.value_median(), torch.full((3,), 41.0))
    lo, hi = out.value_quantile(0.25), out.value_quantile(0.75)  # g^{-1}(log 42 -+ 0.4) - ...
    torch.testing.assert_close(lo, torch.full((3,), 42.0 * math.exp(-0.4) - 1.0))
    torch.testing.assert_close(hi, torch.full((3,), 42.0 * math.exp(0.4) - 1.0))
