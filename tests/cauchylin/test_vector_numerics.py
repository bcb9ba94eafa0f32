"""Element-wise numerics of ``CauchyVector`` against independent references.

* mpmath (60 digits): float32 accuracy in ulp of log_cdf, log_sf, ovr_log_prob and log_prob for
  ``|x - loc| / scale`` from 1e-30 to 1e30, both signs; gradients against mpmath derivatives.
* scipy.stats.cauchy in float64: logpdf, cdf, sf, logcdf, logsf, ppf, entropy.
* torch.distributions.Cauchy where it is right (moderate arguments).
* Pyro's goodness-of-fit helpers on ``rsample`` output.
* ``kl_divergence`` against numerical integration (scipy.integrate.quad).
* The cost of the vocabulary head: no ``[..., V, C]`` tensor is ever built.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import scipy.integrate
import scipy.stats
import torch
from hypothesis import given
from hypothesis import strategies as st
from pyro.distributions.testing.gof import auto_goodness_of_fit, unif01_goodness_of_fit
from torch.utils._python_dispatch import TorchDispatchMode

import cauchylin
from cauchylin import CauchyVector, kl_divergence
from tests.stats import FALSE_FAILURE_RATE

mpmath.mp.dps = 60
F32_TINY = float(torch.finfo(torch.float32).tiny)
ULP_BOUND = 4.0


def ulp32(r: float) -> float:
    a = abs(r)
    if a < F32_TINY:
        return 2.0**-149
    return 2.0 ** (math.floor(math.log2(a)) - 23)


def z_grid(n: int = 301) -> list[float]:
    """|z| log-spaced over [1e-30, 1e30], both signs, and 0 (as float32 values)."""
    mags = torch.logspace(-30, 30, n, dtype=torch.float64).float().double().tolist()
    return [-m for m in reversed(mags)] + [0.0] + mags


def mp_log_cdf(x: float, loc: float, scale: float) -> mpmath.mpf:
    d = mpmath.mpf(x) - mpmath.mpf(loc)
    return mpmath.log(mpmath.atan2(mpmath.mpf(scale), -d) / mpmath.pi)


def mp_log_sf(x: float, loc: float, scale: float) -> mpmath.mpf:
    d = mpmath.mpf(x) - mpmath.mpf(loc)
    return mpmath.log(mpmath.atan2(mpmath.mpf(scale), d) / mpmath.pi)


def mp_log_pdf(x: float, loc: float, scale: float) -> mpmath.mpf:
    d, s = mpmath.mpf(x) - mpmath.mpf(loc), mpmath.mpf(scale)
    return -mpmath.log(mpmath.pi * s) - mpmath.log1p((d / s) ** 2)


def ulp_errors(values: torch.Tensor, refs: list[mpmath.mpf]) -> list[float]:
    out = []
    for y, r in zip(values.tolist(), refs, strict=True):
        rf = float(r)
        if rf == 0.0:
            out.append(0.0 if y == 0.0 else math.inf)
        else:
            out.append(float(abs(mpmath.mpf(y) - r) / ulp32(rf)))
    return out


def measure_worst_ulp(loc: float = 0.0, scale: float = 1.0, n: int = 301) -> dict[str, float]:
    """Worst float32 error in ulp of each element-wise log function over the ``z`` grid.

    ``x = loc + z * scale`` is rounded to float32 and the reference is computed from that
    float32 ``x`` (and the float32 ``loc``, ``scale``) exactly.
    """
    loc32 = float(torch.tensor(loc, dtype=torch.float32))
    scale32 = float(torch.tensor(scale, dtype=torch.float32))
    x = torch.tensor([loc32 + z * scale32 for z in z_grid(n)], dtype=torch.float32)
    x = x[torch.isfinite(x)]
    xs = x.double().tolist()
    u = CauchyVector(torch.full_like(x, loc32), torch.full_like(x, scale32))
    log_p, log_1mp = u.ovr_log_prob(x)
    refs_cdf = [mp_log_cdf(v, loc32, scale32) for v in xs]
    refs_sf = [mp_log_sf(v, loc32, scale32) for v in xs]
    refs_pdf = [mp_log_pdf(v, loc32, scale32) for v in xs]
    return {
        "log_cdf": max(ulp_errors(u.log_cdf(x), refs_cdf)),
        "log_sf": max(ulp_errors(u.log_sf(x), refs_sf)),
        "ovr_log_prob[log P]": max(ulp_errors(log_p, refs_sf)),
        "ovr_log_prob[log 1-P]": max(ulp_errors(log_1mp, refs_cdf)),
        "log_prob": max(ulp_errors(u.log_prob(x), refs_pdf)),
    }


# ------------------------------------------------------------------------------ float32 tails


def test_float32_log_functions_are_accurate_to_a_few_ulp_from_1e_minus30_to_1e30():
    worst = measure_worst_ulp(0.0, 1.0)
    for name, err in worst.items():
        assert err <= ULP_BOUND, f"{name}: {err:.2f} ulp"


@pytest.mark.parametrize(("loc", "scale"), [(3.25, 1.0), (-1e-3, 2.0**-10), (0.0, 7.5e4)])
def test_float32_tails_with_other_locations_and_scales(loc, scale):
    # scale and loc exact in binary; x - loc may round, which the reference sees exactly.
    worst = measure_worst_ulp(loc, scale, n=101)
    for name in ("log_cdf", "log_sf", "ovr_log_prob[log P]", "ovr_log_prob[log 1-P]"):
        assert worst[name] <= ULP_BOUND, f"{name}: {worst[name]:.2f} ulp"


def test_log_probabilities_are_never_positive_and_ovr_pair_is_consistent():
    g = torch.Generator().manual_seed(3)
    loc = torch.randn(64, 8, generator=g) * 10.0 ** torch.randint(-6, 7, (64, 8), generator=g)
    scale = torch.rand(64, 8, generator=g) * 10.0 ** torch.randint(-6, 7, (64, 8), generator=g)
    x = torch.randn(64, 8, generator=g) * 10.0 ** torch.randint(-30, 31, (64, 8), generator=g)
    u = CauchyVector(loc, scale + 1e-30)
    log_p, log_1mp = u.ovr_log_prob(x)
    for t in (u.log_cdf(x), u.log_sf(x), log_p, log_1mp):
        assert bool((t <= 0).all())
    # P + (1 - P) = 1 in probability space
    total = torch.logaddexp(log_p.double(), log_1mp.double()).exp()
    torch.testing.assert_close(total, torch.ones_like(total), rtol=0, atol=1e-6)
    torch.testing.assert_close(log_p, u.log_sf(x))
    torch.testing.assert_close(log_1mp, u.log_cdf(x))
    torch.testing.assert_close(u.ovr_prob(x), u.sf(x))


@given(
    loc=st.floats(-1e30, 1e30),
    log_scale=st.floats(-30, 30),
    x=st.floats(-1e30, 1e30) | st.sampled_from([math.inf, -math.inf]),
)
def test_log_probabilities_are_never_positive_property(loc, log_scale, x):
    u = CauchyVector(torch.tensor([loc]), torch.tensor([10.0**log_scale]))
    xs = torch.tensor([x])
    log_p, log_1mp = u.ovr_log_prob(xs)
    for t in (u.log_cdf(xs), u.log_sf(xs), log_p, log_1mp):
        assert float(t) <= 0.0 and not math.isnan(float(t))
    assert 0.0 <= float(u.cdf(xs)) <= 1.0 and 0.0 <= float(u.sf(xs)) <= 1.0


def test_icdf_gives_exact_infinities_where_torch_gets_the_sign_wrong():
    u = CauchyVector(torch.tensor([0.0, -3.0, 1e6]), torch.tensor([1.0, 1e-3, 50.0]))
    lo = u.icdf(torch.zeros(3))
    hi = u.icdf(torch.ones(3))
    assert lo.tolist() == [-math.inf] * 3 and hi.tolist() == [math.inf] * 3
    assert u.icdf(0.5).tolist() == [0.0, -3.0, 1e6]
    torch_hi = torch.distributions.Cauchy(u.loc, u.scale).icdf(torch.ones(3))
    assert not bool(torch.isinf(torch_hi).all())  # torch: a finite number, sign wrong for some
    # a point mass (scale 0) keeps exact infinities too
    w = CauchyVector(torch.zeros(2), torch.ones(2))
    deg = w.linear(torch.ones(1, 2)) - w.linear(torch.ones(1, 2))
    assert deg.icdf(torch.tensor([0.0])).item() == -math.inf
    assert deg.icdf(torch.tensor([0.3])).item() == 0.0


# ------------------------------------------------------------------------------ gradients


def test_gradients_through_the_vector_are_finite_and_match_mpmath():
    zs = z_grid(61)
    x = torch.tensor(zs, dtype=torch.float32)
    loc = torch.zeros_like(x, requires_grad=True)
    scale = torch.ones_like(x, requires_grad=True)
    xg = x.clone().requires_grad_()
    u = CauchyVector(loc, scale)
    lc = u.log_cdf(xg)
    g_x, g_loc, g_scale = torch.autograd.grad(lc.sum(), (xg, loc, scale))
    log_p = u.ovr_log_prob(xg)[0]
    t_x, t_loc = torch.autograd.grad(log_p.sum(), (xg, loc))
    for i, z in enumerate(zs):
        zm = mpmath.mpf(z)
        p = 1 / (mpmath.pi * (1 + zm * zm))
        F = mpmath.atan2(1, -zm) / mpmath.pi
        G = mpmath.atan2(1, zm) / mpmath.pi
        for got, ref in (
            (g_x[i], p / F),
            (g_loc[i], -p / F),
            (g_scale[i], -zm * p / F),
            (t_x[i], -p / G),  # d log P(X > x) / dx
            (t_loc[i], p / G),
        ):
            got, rf = float(got), float(ref)
            assert math.isfinite(got)
            if abs(rf) < 2 * F32_TINY:
                assert abs(got) <= 2 * F32_TINY  # the true value underflows float32
            else:
                assert got * rf > 0, (z, got, rf)
                assert abs(got - rf) <= 2e-5 * abs(rf), (z, got, rf)
    lp = u.log_prob(xg)
    grads = torch.autograd.grad(lp.sum(), (xg, loc, scale))
    assert all(bool(torch.isfinite(g).all()) for g in grads)
    torch.testing.assert_close(grads[0], -grads[1])


def test_half_precision_vectors_compute_in_float32_with_finite_results():
    for dtype in (torch.float16, torch.bfloat16):
        big = float(torch.finfo(dtype).max)
        loc = torch.tensor([0.0, 1.0, -2.0, 100.0], dtype=dtype)
        scale = torch.tensor([1.0, 1e-3, 10.0, 2.0**-14], dtype=dtype)
        u = CauchyVector(loc, scale)
        assert u.dtype == dtype
        ref = CauchyVector(loc.float(), scale.float())
        # The largest finite values of each dtype; for bfloat16 (float32's range) keep
        # |x - loc| / scale inside float32's range, where every result is finite.
        top = min(big, 1e30)
        for x in (torch.zeros(4, dtype=dtype), torch.full((4,), top, dtype=dtype), -top + loc * 0):
            for name in ("log_prob", "log_cdf", "log_sf", "cdf", "sf"):
                out = getattr(u, name)(x)
                assert out.dtype == torch.float32, name
                assert bool(torch.isfinite(out).all()), name
                torch.testing.assert_close(out, getattr(ref, name)(x.float()))
            log_p, log_1mp = u.ovr_log_prob(x)
            assert log_p.dtype == torch.float32 and bool(torch.isfinite(log_p).all())
            assert bool(torch.isfinite(log_1mp).all())
        assert u.entropy().dtype == torch.float32
        assert u.icdf(torch.tensor(0.25, dtype=dtype)).dtype == torch.float32
        s = u.linear(torch.ones(2, 4, dtype=dtype))
        assert bool(torch.isfinite(s.log_cdf(torch.zeros(2, dtype=dtype))).all())


# ------------------------------------------------------------------------------ float64 references


def test_float64_elementwise_matches_scipy():
    rng = np.random.default_rng(1)
    loc = rng.normal(size=(50, 7)) * 10.0 ** rng.integers(-3, 4, size=(50, 7))
    scale = rng.uniform(0.1, 1.0, size=(50, 7)) * 10.0 ** rng.integers(-3, 4, size=(50, 7))
    x = loc + scale * rng.standard_cauchy(size=(50, 7))
    q = rng.uniform(1e-6, 1 - 1e-6, size=(50, 7))
    u = CauchyVector(torch.from_numpy(loc), torch.from_numpy(scale))
    xt, qt = torch.from_numpy(x), torch.from_numpy(q)
    ref = scipy.stats.cauchy(loc, scale)
    np.testing.assert_allclose(u.log_prob(xt).numpy(), ref.logpdf(x), rtol=1e-12)
    np.testing.assert_allclose(u.cdf(xt).numpy(), ref.cdf(x), rtol=1e-12)
    np.testing.assert_allclose(u.sf(xt).numpy(), ref.sf(x), rtol=1e-12)
    np.testing.assert_allclose(u.log_cdf(xt).numpy(), ref.logcdf(x), rtol=1e-12)
    np.testing.assert_allclose(u.log_sf(xt).numpy(), ref.logsf(x), rtol=1e-12)
    np.testing.assert_allclose(u.icdf(qt).numpy(), ref.ppf(q), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(u.entropy().numpy(), ref.entropy(), rtol=1e-14)
    np.testing.assert_allclose(u.ovr_prob(xt).numpy(), ref.sf(x), rtol=1e-12)
    log_p, log_1mp = u.ovr_log_prob(xt)
    np.testing.assert_allclose(log_p.numpy(), ref.logsf(x), rtol=1e-12)
    np.testing.assert_allclose(log_1mp.numpy(), ref.logcdf(x), rtol=1e-12)
    # marginals of a linear image against scipy with the closed-form parameters
    w = rng.normal(size=(3, 7))
    s = u.linear(torch.from_numpy(w))
    ref_s = scipy.stats.cauchy(loc @ w.T, scale @ np.abs(w).T)
    y = rng.normal(size=(50, 3)) * 10
    np.testing.assert_allclose(s.log_cdf(torch.from_numpy(y)).numpy(), ref_s.logcdf(y), rtol=1e-11)


def test_float32_matches_torch_cauchy_where_torch_is_right():
    g = torch.Generator().manual_seed(2)
    loc = torch.randn(200, generator=g) * 3
    scale = torch.rand(200, generator=g) + 0.2
    x = loc + scale * torch.randn(200, generator=g) * 3  # |z| moderate: torch is accurate here
    u = CauchyVector(loc, scale)
    ref = torch.distributions.Cauchy(loc, scale)
    torch.testing.assert_close(u.log_prob(x), ref.log_prob(x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(u.cdf(x), ref.cdf(x), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(u.log_cdf(x), ref.cdf(x).log(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(u.entropy(), ref.entropy())
    q = torch.rand(200, generator=g) * 0.9 + 0.05
    torch.testing.assert_close(u.icdf(q), ref.icdf(q), rtol=1e-4, atol=1e-4)


def test_point_mass_components_have_step_cdfs_and_refuse_a_density():
    u = CauchyVector(torch.tensor([1.0, -2.0]), torch.tensor([1.0, 3.0]))
    w = torch.tensor([[1.0, 2.0]])
    deg = u.linear(w) - u.linear(w) + 5.0  # exactly the constant 5
    assert deg.scale.item() == 0.0 and deg.loc.item() == 5.0
    x = torch.tensor([[4.0], [5.0], [6.0]])
    assert deg.cdf(x).flatten().tolist() == [0.0, 1.0, 1.0]
    assert deg.log_cdf(x).flatten().tolist() == [-math.inf, 0.0, 0.0]
    assert deg.log_sf(x).flatten().tolist() == [0.0, -math.inf, -math.inf]
    assert bool((deg.rsample((10,)) == 5.0).all())
    with pytest.raises(ValueError, match="degenerate"):
        deg.log_prob(x)
    with cauchylin.validation(False):
        lp = deg.log_prob(x).flatten()
    assert lp[0] == -math.inf and lp[2] == -math.inf and bool(torch.isnan(lp[1]))


# ------------------------------------------------------------------------------ sampling


def test_rsample_passes_pyro_goodness_of_fit():
    g = torch.Generator().manual_seed(11)
    loc = torch.tensor([2.0, -1.0, 1e3], dtype=torch.float64)
    u = CauchyVector(loc, torch.tensor([0.5, 3.0, 1e-2], dtype=torch.float64))
    x = u.rsample((20000,), generator=g).detach()
    for j in range(3):
        uj = u[..., j : j + 1]
        # the probability integral transform of exact samples is Uniform(0, 1)
        assert unif01_goodness_of_fit(uj.cdf(x[:, j : j + 1]).flatten()) > FALSE_FAILURE_RATE / 6
        probs = uj.log_prob(x[:, j : j + 1]).exp().flatten()
        assert auto_goodness_of_fit(x[:, j], probs) > FALSE_FAILURE_RATE / 6


def test_rsample_of_a_dependent_pair_passes_pyro_goodness_of_fit_on_joint_statistics():
    """s = W u: S_1 - S_2 and S_1 + 2 S_2 are Cauchy with scales |w_1 -/+ ...| scale by definition.

    A sampler that treated the components as independent (same marginals) fails the same test.
    """
    g = torch.Generator().manual_seed(12)
    loc = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    scale = torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64)
    w = torch.tensor([[1.0, 1.0, -2.0], [1.0, -0.5, -1.0]], dtype=torch.float64)
    s = CauchyVector(loc, scale).linear(w)
    indep = CauchyVector(s.loc, s.scale)  # same marginals, wrong joint law
    x = s.rsample((20000,), generator=g)
    y = indep.rsample((20000,), generator=g)
    for coef in (torch.tensor([1.0, -1.0]), torch.tensor([1.0, 2.0])):
        c = coef.double()
        row = c @ w  # the statistic c . S = (c W) u: Cauchy(c W loc, |c W| scale) by definition
        law = scipy.stats.cauchy(float(row @ loc), float(row.abs() @ scale))
        p_good = unif01_goodness_of_fit(torch.from_numpy(law.cdf((x @ c).numpy())))
        p_bad = unif01_goodness_of_fit(torch.from_numpy(law.cdf((y @ c).numpy())))
        assert p_good > FALSE_FAILURE_RATE / 4
        assert p_bad < 1e-6


def test_rsample_is_reparameterised_with_the_map_as_jacobian():
    loc = torch.tensor([0.3, -0.2, 1.5], dtype=torch.float64, requires_grad=True)
    scale = torch.tensor([1.0, 0.5, 2.0], dtype=torch.float64, requires_grad=True)
    w = torch.tensor([[1.0, -2.0, 0.0], [0.5, 0.5, 3.0]], dtype=torch.float64)
    s = CauchyVector(loc, scale).linear(w, torch.tensor([1.0, 2.0], dtype=torch.float64))
    g = torch.Generator().manual_seed(0)
    x = s.rsample(generator=g)
    g = torch.Generator().manual_seed(0)
    eps = CauchyVector(torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64))
    eps = eps.rsample(generator=g)  # the same standard draws (same generator state)
    torch.testing.assert_close(x, w @ (loc + scale * eps) + torch.tensor([1.0, 2.0]).double())
    for j in range(2):
        d_loc, d_scale = torch.autograd.grad(x[j], (loc, scale), retain_graph=True)
        torch.testing.assert_close(d_loc, w[j])  # d sample / d loc = the map
        torch.testing.assert_close(d_scale, w[j] * eps)


def test_generator_makes_samples_reproducible():
    u = CauchyVector(torch.randn(4, 3), torch.rand(4, 3) + 0.1)
    s = u.linear(torch.randn(5, 3)) + u[..., :1].expand(4, 5) * 0.5
    a = s.rsample((7,), generator=torch.Generator().manual_seed(5))
    b = s.rsample((7,), generator=torch.Generator().manual_seed(5))
    c = s.rsample((7,), generator=torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.shape == (7, 4, 5)
    with torch.no_grad():
        torch.manual_seed(1)
        d = s.sample((2,))
        torch.manual_seed(1)
        e = s.sample((2,))
    assert torch.equal(d, e) and not d.requires_grad


# ------------------------------------------------------------------------------ KL divergence


@pytest.mark.parametrize(
    ("m1", "g1", "m2", "g2"),
    [(0.0, 1.0, 0.0, 1.0), (0.0, 1.0, 2.0, 1.0), (1.0, 0.5, -1.0, 3.0), (5.0, 2.0, 4.0, 0.1)],
)
def test_kl_divergence_matches_numerical_integration(m1, g1, m2, g2):
    p = scipy.stats.cauchy(m1, g1)
    q = scipy.stats.cauchy(m2, g2)

    def integrand(t: float) -> float:
        # x = m1 + g1 tan(t): integrate over t in (-pi/2, pi/2) against the law of p
        x = m1 + g1 * math.tan(t)
        return (p.logpdf(x) - q.logpdf(x)) / math.pi

    ref, _ = scipy.integrate.quad(integrand, -math.pi / 2, math.pi / 2, limit=200, epsabs=1e-12)
    P = CauchyVector(torch.tensor([m1], dtype=torch.float64), torch.tensor([g1]).double())
    Q = CauchyVector(torch.tensor([m2], dtype=torch.float64), torch.tensor([g2]).double())
    kl = kl_divergence(P, Q)
    assert kl.item() == pytest.approx(ref, rel=1e-7, abs=1e-10)
    if (m1, g1) == (m2, g2):
        assert kl.item() == 0.0


@given(
    m1=st.floats(-1e6, 1e6),
    m2=st.floats(-1e6, 1e6),
    lg1=st.floats(-6, 6),
    lg2=st.floats(-6, 6),
)
def test_kl_divergence_is_nonnegative_symmetric_and_zero_only_for_equal_laws(m1, m2, lg1, lg2):
    P = CauchyVector(torch.tensor([m1]), torch.tensor([10.0**lg1]))
    Q = CauchyVector(torch.tensor([m2]), torch.tensor([10.0**lg2]))
    kl = kl_divergence(P, Q).item()
    assert kl >= 0.0 and math.isfinite(kl)
    assert kl == pytest.approx(kl_divergence(Q, P).item(), rel=1e-5, abs=1e-30)
    assert kl_divergence(P, P).item() == 0.0


def mp_kl(m1: float, g1: float, m2: float, g2: float) -> mpmath.mpf:
    m1, g1, m2, g2 = (mpmath.mpf(v) for v in (m1, g1, m2, g2))
    return mpmath.log(((g1 + g2) ** 2 + (m1 - m2) ** 2) / (4 * g1 * g2))


def test_kl_divergence_does_not_overflow_in_float32_and_agrees_with_the_pyro_kl():
    """p = (1e30, 1e-15), q = (0, 1e-15): r = 5e44 overflows float32, the KL is 205.846."""
    loc = torch.tensor([1e30, 0.0, 3.0, 0.0])
    scale = torch.tensor([1e-15, 1e-30, 1.0, 1e38])
    loc_q = torch.tensor([0.0, 0.0, 3.0 + 2.0**-21, 0.0])
    scale_q = torch.tensor([1e-15, 1e30, 1.0, 1e-38])
    P, Q = CauchyVector(loc, scale), CauchyVector(loc_q, scale_q)
    kl = kl_divergence(P, Q)
    params = zip(loc.tolist(), scale.tolist(), loc_q.tolist(), scale_q.tolist(), strict=True)
    refs = [mp_kl(*v) for v in params]
    for got, ref in zip(kl.tolist(), refs, strict=True):
        assert math.isfinite(got)
        assert abs(mpmath.mpf(got) - ref) <= 4 * 2.0**-23 * abs(ref), (got, ref)
    assert abs(kl[0].item() - 205.84636) < 1e-3
    # the registered Pyro KL is the same kernel: equal to the last bit
    pyro_kl = torch.distributions.kl_divergence(P.to_distribution(), Q.to_distribution())
    assert torch.equal(pyro_kl, kl.sum(-1))


def test_kl_divergence_gradients_at_p_equal_q_are_zero_not_nan():
    """A posterior initialised at its prior: every gradient is exactly 0 (was NaN via hypot)."""
    for dtype in (torch.float32, torch.float64):
        loc = torch.tensor([0.0, 2.5, -1e20], dtype=dtype, requires_grad=True)
        scale = torch.tensor([1.0, 1e-15, 3e10], dtype=dtype, requires_grad=True)
        prior = CauchyVector(loc.detach().clone(), scale.detach().clone())
        kl = kl_divergence(CauchyVector(loc, scale), prior).sum()
        g_loc, g_scale = torch.autograd.grad(kl, (loc, scale))
        assert g_loc.tolist() == [0.0] * 3 and g_scale.tolist() == [0.0] * 3


def test_kl_divergence_gradients_match_the_analytic_derivative():
    """dKL/dm1 = 2 dm / D, dKL/dg1 = 2 (g1 + g2) / D - 1/g1 with D = (g1 + g2)^2 + dm^2 (mpmath)."""
    m1 = torch.tensor([0.3, 1e3, -2.0], dtype=torch.float64, requires_grad=True)
    g1 = torch.tensor([1.0, 1e-3, 7.0], dtype=torch.float64, requires_grad=True)
    m2, g2 = [0.0, 1e3 + 1.0, 5.0], [2.0, 1.0, 7.0]
    kl = kl_divergence(CauchyVector(m1, g1), CauchyVector(torch.tensor(m2).double(), g2)).sum()
    gm, gg = torch.autograd.grad(kl, (m1, g1))
    for i in range(3):
        a, b, c, d = (mpmath.mpf(v) for v in (m1[i].item(), g1[i].item(), m2[i], g2[i]))
        D = (b + d) ** 2 + (a - c) ** 2
        assert gm[i].item() == pytest.approx(float(2 * (a - c) / D), rel=1e-12)
        assert gg[i].item() == pytest.approx(float(2 * (b + d) / D - 1 / b), rel=1e-12, abs=1e-15)


# ------------------------------------------------------------------------------ limits at +-inf


def test_gradients_at_infinite_arguments_are_finite_limits():
    """log_cdf(+inf), log_sf(-inf), cdf(+inf), ovr_log_prob(+inf), log_prob(inf): the values were
    right but the gradients NaN; they are the limits (0 in loc; 0 or 1/scale in scale)."""
    inf = math.inf
    cases = {
        "log_cdf": (lambda u: u.log_cdf(inf), 0.0, 0.0, 0.0),
        "log_sf": (lambda u: u.log_sf(-inf), 0.0, 0.0, 0.0),
        "cdf": (lambda u: u.cdf(inf), 1.0, 0.0, 0.0),
        "sf": (lambda u: u.sf(inf), 0.0, 0.0, 0.0),
        "ovr_log_prob": (lambda u: u.ovr_log_prob(inf)[0], -inf, 0.0, 0.5),
        "ovr_log_prob[1]": (lambda u: u.ovr_log_prob(inf)[1], 0.0, 0.0, 0.0),
        "ovr_prob": (lambda u: u.ovr_prob(-inf), 1.0, 0.0, 0.0),
        "log_prob": (lambda u: u.log_prob(inf), -inf, 0.0, 0.5),  # d/ds log s = 1/s, s = 2
    }
    for name, (fn, value, g_loc, g_scale) in cases.items():
        loc = torch.tensor([1.0], requires_grad=True)
        scale = torch.tensor([2.0], requires_grad=True)
        y = fn(CauchyVector(loc, scale))
        assert y.item() == value, name
        gl, gs = torch.autograd.grad(y.sum(), (loc, scale))
        assert (gl.item(), gs.item()) == (g_loc, g_scale), name


def test_icdf_of_negative_zero_is_minus_infinity():
    u = CauchyVector(torch.zeros(3), torch.ones(3))
    assert u.icdf(torch.tensor([-0.0, 0.0, 1.0])).tolist() == [-math.inf, -math.inf, math.inf]


# ------------------------------------------------------------------------------ cost of the head


class _LargestTensor(TorchDispatchMode):
    """Records the largest tensor produced by any aten op (autograd included)."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0
        self.op = ""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor) and t.numel() > self.largest:
                self.largest, self.op = t.numel(), str(func)
        return out


def test_vocabulary_head_never_materialises_a_per_token_map():
    N, C, V = 64, 32, 4096
    g = torch.Generator().manual_seed(0)
    loc_U = torch.randn(N, C, generator=g, requires_grad=True)
    scale_U = (torch.rand(N, C, generator=g) + 0.1).requires_grad_()
    W = torch.randn(V, C, generator=g, requires_grad=True)
    b = torch.randn(V, generator=g)
    noise = torch.rand(C, generator=g) * 0.1
    budget = N * V  # the output itself; a per-token map would be N * V * C
    with _LargestTensor() as probe:
        U = CauchyVector(loc_U, scale_U, validate_args=False)
        U_prime = U + CauchyVector(torch.zeros(C), noise, validate_args=False)
        S = U_prime.linear(W, b)
        log_p, log_1mp = S.ovr_log_prob(0.0)
        (log_p.sum() + log_1mp.sum()).backward()
        x = S.rsample(generator=torch.Generator().manual_seed(1))
        k = S[..., 7:8]
        _ = k.loc, k.scale, S.log_prob(x.detach()), S.cdf(0.0)
    assert probe.largest <= budget, f"{probe.op} produced {probe.largest} elements"
    assert S.loc.shape == (N, V)
