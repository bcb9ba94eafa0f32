"""NumericEmbedding: phi(v) = sign(v) ln(1 + |v|) w_num, initialisation options, validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import cauchylin
from cauchylin.nn import NumericEmbedding
from tests.stats import FALSE_FAILURE_RATE


def test_random_unit_init_is_a_unit_vector_and_reproducible():
    for h in (1, 7, 896):
        emb = NumericEmbedding(h, generator=torch.Generator().manual_seed(h))
        assert emb.w_num.shape == (h,)
        assert isinstance(emb.w_num, torch.nn.Parameter)
        assert abs(torch.linalg.vector_norm(emb.w_num.double()).item() - 1.0) < 1e-6
    a = NumericEmbedding(16, generator=torch.Generator().manual_seed(0))
    b = NumericEmbedding(16, generator=torch.Generator().manual_seed(0))
    c = NumericEmbedding(16, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a.w_num, b.w_num) and not torch.equal(a.w_num, c.w_num)


def test_random_unit_direction_is_isotropic():
    """The direction of a normalised Gaussian: each coordinate has mean 0 and E[w_1^2] = 1/H."""
    h, reps = 8, 4000
    g = torch.Generator().manual_seed(3)
    first = torch.stack(
        [NumericEmbedding(h, generator=g).w_num.detach()[0] for _ in range(reps)]
    ).double()
    # w_1^2 lies in [0, 1]: Hoeffding on its mean; w_1 in [-1, 1]: Hoeffding on its mean
    eps = math.sqrt(math.log(4 / FALSE_FAILURE_RATE) / (2 * reps))
    assert abs(first.square().mean().item() - 1 / h) <= eps
    assert abs(first.mean().item()) <= 2 * eps


def test_normal_and_zeros_init():
    h = 4096
    emb = NumericEmbedding(h, init="normal", generator=torch.Generator().manual_seed(0))
    w = emb.w_num.detach().double()
    # sum of h squares of N(0, 1/h): mean 1, sd sqrt(2/h) ~ 0.022; 8 sd is far beyond 1e-6
    assert abs(w.square().sum().item() - 1.0) < 8 * math.sqrt(2 / h)
    assert abs(w.mean().item()) < 8 / h
    zeros = NumericEmbedding(5, init="zeros")
    assert torch.equal(zeros.w_num, torch.zeros(5))
    with pytest.raises(ValueError, match="init"):
        NumericEmbedding(5, init="xavier")
    with pytest.raises(ValueError, match="hidden_size"):
        NumericEmbedding(0)


def test_encode_matches_an_independent_numpy_formula():
    emb = NumericEmbedding(6, generator=torch.Generator().manual_seed(0))
    v = torch.tensor([[0.0, 99.9, -1.0, 1e-8], [-1e30, 3.0e38, 0.5, -0.0]])
    phi = emb.encode(v).detach().double().numpy()
    w = emb.w_num.detach().double().numpy()
    vn = v.double().numpy()
    expected = (np.sign(vn) * np.log1p(np.abs(vn)))[..., None] * w
    np.testing.assert_allclose(phi, expected, rtol=2e-6, atol=0)
    assert phi.shape == (2, 4, 6)


def test_phi_of_zero_is_exactly_zero_and_base_is_untouched():
    emb = NumericEmbedding(8, generator=torch.Generator().manual_seed(1))
    base = torch.randn(3, 5, 8)
    values = torch.zeros(3, 5)
    values[1, 2] = 99.9
    values[2, 4] = -0.0
    out = emb(base, values)
    assert bool((emb.encode(torch.tensor([0.0, -0.0])) == 0).all())
    mask = values != 0
    assert torch.equal(out[~mask], base[~mask])  # bit for bit
    np.testing.assert_allclose(
        (out[1, 2] - base[1, 2]).detach().numpy(),
        (math.log1p(99.9) * emb.w_num).detach().numpy(),
        rtol=1e-5,
        atol=1e-6,
    )


@given(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, width=32))
def test_phi_is_odd_and_monotone_in_the_direction(v: float):
    emb = NumericEmbedding(4, generator=torch.Generator().manual_seed(2))
    w = emb.w_num.detach()
    t = torch.tensor([v, -v])
    phi = emb.encode(t).detach()
    assert torch.equal(phi[0], -phi[1])
    proj = (phi[0] * w).sum().item()  # = sign(v) ln(1+|v|) since |w| = 1
    assert math.isclose(proj, math.copysign(math.log1p(abs(v)), v), rel_tol=1e-5, abs_tol=1e-6)


def test_non_finite_values_raise_naming_numeric_values():
    emb = NumericEmbedding(3)
    base = torch.zeros(2, 3)
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError, match="numeric_values"):
            emb(base, torch.tensor([1.0, bad]))
        with pytest.raises(ValueError, match="numeric_values"):
            emb.encode(torch.tensor([bad]))
    with cauchylin.validation(False):  # validation can be switched off for speed
        emb.encode(torch.tensor([math.nan]))
    with pytest.raises(ValueError, match="numeric_values"):
        emb(base, torch.zeros(3))  # wrong shape
    with pytest.raises(ValueError, match="numeric_values"):
        emb(base, [0.0, 1.0])
    with pytest.raises(ValueError, match="hidden_size"):
        emb(torch.zeros(2, 4), torch.zeros(2))


def test_dtypes_integer_values_and_broadcasting():
    emb = NumericEmbedding(4, generator=torch.Generator().manual_seed(0))
    base = torch.randn(2, 3, 4).to(torch.bfloat16)
    values = torch.tensor([[0, 5, -2], [1, 0, 0]])  # integer numbers are accepted
    out = emb(base, values)
    assert out.dtype == torch.bfloat16 and out.shape == base.shape
    reference = (base.float() + emb.encode(values.float())).to(torch.bfloat16)
    assert torch.equal(out, reference)  # one rounding, from float32
    assert torch.equal(out[values == 0], base[values == 0])
    # values of shape [S] broadcast over a [B, S, H] batch
    out2 = emb(base.float(), torch.tensor([0.0, 1.0, 2.0]))
    assert out2.shape == (2, 3, 4)
    # float64 stays float64
    assert emb.encode(torch.tensor([1.0], dtype=torch.float64)).dtype == torch.float64


def test_gradient_reaches_w_num():
    emb = NumericEmbedding(3, generator=torch.Generator().manual_seed(0))
    values = torch.tensor([0.0, 2.0, -5.0])
    out = emb(torch.zeros(3, 3), values).sum()
    out.backward()
    expected = float(math.log1p(2.0) - math.log1p(5.0))
    np.testing.assert_allclose(emb.w_num.grad.numpy(), np.full(3, expected), rtol=1e-6)


# ---------------------------------------------------------------- encoding="periodic"


def test_periodic_encode_matches_an_independent_numpy_formula():
    """phi(v) = t w_num + P [sin(2 pi c t), cos(2 pi c t) - 1], t = sign(v) ln(1 + |v|)."""
    emb = NumericEmbedding(
        6,
        encoding="periodic",
        frequencies=3,
        sigma=2.0,
        generator=torch.Generator().manual_seed(0),
        dtype=torch.float64,
    )
    v = torch.tensor([[0.0, 99.9, -1.0, 1e-8], [-1e5, 37.5, 0.5, -0.0]], dtype=torch.float64)
    phi = emb.encode(v).detach().numpy()
    w = emb.w_num.detach().numpy()
    c = emb.frequencies.detach().numpy()
    P = emb.periodic_weight.detach().numpy()
    assert P.shape == (6, 6) and c.shape == (3,)
    expected = np.zeros((2, 4, 6))
    for i in range(2):
        for j in range(4):
            t = math.copysign(math.log1p(abs(float(v[i, j]))), float(v[i, j]))
            f = [math.sin(2 * math.pi * ck * t) for ck in c]
            f += [math.cos(2 * math.pi * ck * t) - 1 for ck in c]
            expected[i, j] = t * w + P @ np.array(f)
    np.testing.assert_allclose(phi, expected, rtol=1e-12, atol=1e-12)
    assert np.all(phi[0, 0] == 0) and np.all(phi[1, 3] == 0)  # phi(0) = phi(-0) = 0 exactly


def test_periodic_init_draws_the_documented_scales():
    """c ~ N(0, sigma^2) and P's entries ~ N(0, 1 / (2 K H)): sample variances within 6.5 sd."""
    h, k, sigma = 64, 4000, 3.0
    emb = NumericEmbedding(
        h,
        encoding="periodic",
        frequencies=k,
        sigma=sigma,
        generator=torch.Generator().manual_seed(5),
    )
    c = emb.frequencies.detach().double()
    P = emb.periodic_weight.detach().double()
    # the sample variance of n normal draws over its expectation has sd sqrt(2 / n); beyond 6.5 sd
    # a chi-square tail is below 1e-7 for these n (two checks: < 1e-6 together)
    assert abs(c.square().mean().item() / sigma**2 - 1) < 6.5 * math.sqrt(2 / k)
    n = P.numel()
    assert abs(P.square().mean().item() * (2 * k * h) - 1) < 6.5 * math.sqrt(2 / n)
    # the same generator seed gives the same draws; w_num is drawn first, as for "linear"
    again = NumericEmbedding(
        h,
        encoding="periodic",
        frequencies=k,
        sigma=sigma,
        generator=torch.Generator().manual_seed(5),
    )
    linear = NumericEmbedding(h, generator=torch.Generator().manual_seed(5))
    assert torch.equal(again.periodic_weight, emb.periodic_weight)
    assert torch.equal(linear.w_num, emb.w_num)


def test_periodic_zero_is_exact_and_gradients_reach_the_frequencies():
    emb = NumericEmbedding(5, encoding="periodic", frequencies=4, token_offset=True)
    base = torch.randn(2, 3, 5)
    values = torch.tensor([[0.0, 3.0, 0.0], [-0.0, 0.0, -250.0]])
    out = emb(base, values, torch.zeros(2, 3, dtype=torch.bool))
    assert torch.equal(out[values == 0], base[values == 0])  # bit for bit
    out.sum().backward()
    for p in (emb.w_num, emb.frequencies, emb.periodic_weight):
        assert p.grad is not None and bool(p.grad.abs().sum() > 0)
    assert "encoding='periodic', frequencies=4, sigma=1.0" in repr(emb)


def test_linear_encoding_holds_no_periodic_parameters():
    emb = NumericEmbedding(4, encoding="linear", generator=torch.Generator().manual_seed(0))
    assert emb.frequencies is None and emb.periodic_weight is None
    assert [n for n, _ in emb.named_parameters()] == ["w_num"]
    assert torch.equal(
        emb.w_num, NumericEmbedding(4, generator=torch.Generator().manual_seed(0)).w_num
    )


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"encoding": "fourier"}, "encoding"),
        ({"encoding": "periodic", "frequencies": 0}, "frequencies"),
        ({"encoding": "periodic", "sigma": 0.0}, "sigma"),
        ({"encoding": "periodic", "sigma": math.inf}, "sigma"),
    ],
)
def test_periodic_settings_are_checked(kwargs, name):
    with pytest.raises(ValueError, match=name):
        NumericEmbedding(4, **kwargs)
