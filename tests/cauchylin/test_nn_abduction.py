"""Abduction: identity initialisation, a stable softplus^-1, and the forward formulas."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from cauchylin import CauchyVector
from cauchylin.nn import Abduction, inverse_softplus

mpmath.mp.dps = 50

GAMMAS = [1e-6, 3e-5, 1e-3, 0.05, 0.5, 1.0, 2.0, 10.0, 37.0, 100.0, 1e3, 1e4]


def mp_softplus(x: float) -> mpmath.mpf:
    return mpmath.log1p(mpmath.exp(mpmath.mpf(x)))


def mp_inverse_softplus(g: float) -> mpmath.mpf:
    return mpmath.log(mpmath.expm1(mpmath.mpf(g)))


@pytest.mark.parametrize("gamma", GAMMAS)
def test_inverse_softplus_against_mpmath(gamma: float):
    x = inverse_softplus(gamma)
    exact = mp_inverse_softplus(gamma)
    assert abs(mpmath.mpf(x) - exact) <= 4 * 2.0**-52 * max(abs(exact), 1)
    # naive formulas fail at the ends of the range; ours does not
    assert math.isfinite(x)


@pytest.mark.parametrize("gamma", GAMMAS)
def test_initial_scale_is_gamma_to_float32_rounding(gamma: float):
    abd = Abduction(6, 6, gamma_init=gamma)
    b = abd.scale_net.bias.detach()
    assert b.dtype == torch.float32 and bool((b == b[0]).all())
    b0 = float(b[0])
    # the stored bias is the float32 value nearest the exact inverse, or one of its neighbours
    exact_b = float(mp_inverse_softplus(gamma))
    ulp_b = float(np.spacing(np.float32(abs(exact_b))))
    assert abs(b0 - exact_b) <= 4.5 * ulp_b
    # softplus of the stored bias (mpmath) equals gamma up to the float32 rounding of b,
    # amplified by the conditioning d log softplus / d x = sigmoid(x) / softplus(x)
    cond = float(mpmath.mpf(1) / (1 + mpmath.exp(-b0)) / mp_softplus(b0))
    rel_true = abs(float(mp_softplus(b0)) - gamma) / gamma
    assert rel_true <= cond * 4.5 * ulp_b + 1e-12
    # and the forward pass (torch's float32 softplus) returns gamma to float32 rounding
    z = torch.randn(4, 3, 6, generator=torch.Generator().manual_seed(0)) * 100
    scale = abd(z).scale.detach()
    assert bool((scale == scale.flatten()[0]).all())  # the same constant at every input
    rel = abs(float(scale.flatten()[0]) - gamma) / gamma
    assert rel <= max(cond * 0.5 * ulp_b, 2.0**-24) + 4 * 2.0**-24


def test_initial_location_is_the_features_exactly():
    g = torch.Generator().manual_seed(1)
    for shape, dtype in (
        ((5, 8), torch.float32),
        ((2, 3, 8), torch.float32),
        ((4, 8), torch.float64),
    ):
        abd = Abduction(8, 8, dtype=dtype)
        z = torch.randn(shape, generator=g, dtype=dtype) * 1e3
        z[..., 0] = 1e-30  # tiny and signed values survive too
        z[..., 1] = -0.0
        U = abd(z)
        assert isinstance(U, CauchyVector)
        assert U.is_independent
        assert torch.equal(U.loc, z)
        assert U.loc.dtype == dtype
        assert torch.allclose(U.scale, torch.full_like(z, 10.0))
    assert torch.equal(abd.scale_net.weight, torch.zeros(8, 8, dtype=torch.float64))
    assert torch.equal(abd.loc_net.bias, torch.zeros(8, dtype=torch.float64))


@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False, width=32), min_size=4, max_size=4))
def test_initial_location_is_exact_for_any_input(values: list[float]):
    abd = Abduction(4, 4, gamma_init=2.0)
    z = torch.tensor(values)
    U = abd(z)
    assert torch.equal(U.loc, z)
    assert bool((U.scale == U.scale[0]).all())


def test_rectangular_identity_when_sizes_differ():
    z = torch.randn(3, 5, generator=torch.Generator().manual_seed(0))
    wide = Abduction(5, 8)  # C > H: z copied, the extra coordinates start at 0
    U = wide(z)
    assert torch.equal(U.loc[:, :5], z) and torch.equal(U.loc[:, 5:], torch.zeros(3, 3))
    narrow = Abduction(5, 3)  # C < H: the first C coordinates
    assert torch.equal(narrow(z).loc, z[:, :3])
    assert torch.equal(narrow.loc_net.weight, torch.eye(3, 5))


def test_forward_formula_after_training_like_updates():
    g = torch.Generator().manual_seed(2)
    abd = Abduction(4, 3, gamma_init=1.0)
    with torch.no_grad():
        for p in abd.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    z = torch.randn(6, 4, generator=g) * 30  # drives the softplus argument far both ways
    U = abd(z)
    zn = z.double().numpy()
    Wl, bl = (
        abd.loc_net.weight.detach().double().numpy(),
        abd.loc_net.bias.detach().double().numpy(),
    )
    Ws = abd.scale_net.weight.detach().double().numpy()
    bs = abd.scale_net.bias.detach().double().numpy()
    np.testing.assert_allclose(U.loc.detach().numpy(), zn @ Wl.T + bl, rtol=1e-5, atol=1e-4)
    pre = zn @ Ws.T + bs
    expected_scale = np.maximum(np.logaddexp(0.0, pre), np.finfo(np.float32).tiny)
    np.testing.assert_allclose(U.scale.detach().numpy(), expected_scale, rtol=1e-4, atol=0)
    assert bool((U.scale > 0).all())


def test_scale_stays_positive_where_softplus_underflows():
    abd = Abduction(1, 1, gamma_init=1.0)
    with torch.no_grad():
        abd.scale_net.weight.fill_(1.0)
    U = abd(torch.tensor([[-1e4]]))  # softplus(-1e4) underflows to 0 in float32
    assert float(U.scale.detach()) == torch.finfo(torch.float32).tiny


def test_half_precision_input_is_computed_in_float32():
    abd = Abduction(4, 4, gamma_init=3.0)
    with torch.no_grad():
        abd.scale_net.weight.normal_(generator=torch.Generator().manual_seed(0))
    z = torch.randn(2, 4, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    U = abd(z)
    assert U.dtype == torch.float32
    ref = abd(z.float())
    assert torch.equal(U.loc, ref.loc) and torch.equal(U.scale, ref.scale)
    assert torch.equal(U.loc, z.float())


def test_gradients_flow_to_both_networks():
    abd = Abduction(3, 3)
    z = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    U = abd(z)
    (U.loc.sum() + U.scale.sum()).backward()
    for p in abd.parameters():
        assert p.grad is not None and bool(torch.isfinite(p.grad).all())
    # d scale / d b_scale = sigmoid(b_scale) at initialisation
    b = abd.scale_net.bias.detach()
    torch.testing.assert_close(abd.scale_net.bias.grad, 5 * torch.sigmoid(b))


def test_bad_arguments():
    for g in (0.0, -1.0, math.nan, math.inf, "ten"):
        with pytest.raises(ValueError, match="gamma"):
            Abduction(2, 2, gamma_init=g)
        with pytest.raises(ValueError, match="gamma"):
            inverse_softplus(g)
    with pytest.raises(ValueError, match="in_features"):
        Abduction(0, 2)
    abd = Abduction(3, 3)
    with pytest.raises(ValueError, match="in_features"):
        abd(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="z"):
        abd(torch.zeros(2, 3, dtype=torch.long))


def test_layers_can_be_built_on_the_meta_device():
    """from_pretrained-style construction: nothing in the initialisation reads a value back."""
    from cauchylin.nn import Action, NumericEmbedding

    with torch.device("meta"):
        layers = [Abduction(4, 4), Action(4, 10), NumericEmbedding(4)]
    for layer in layers:
        assert all(p.device.type == "meta" for p in layer.parameters())
    # and the CPU initialisation is unchanged by the CPU-side computation of the bias
    assert torch.equal(Abduction(4, 4).scale_net.bias, Abduction(4, 4).scale_net.bias)
