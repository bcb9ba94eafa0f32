"""The special-function kernels of ``cauchylin._special`` against independent references.

References: mpmath at 60 significant digits (tails, derivatives), scipy.stats.cauchy in float64,
and torch's autograd ``gradcheck`` / ``gradgradcheck`` in float64 for the hand-written
derivatives. The float32 accuracy claims are measured in ulp of the correctly rounded result.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import scipy.stats
import torch
from hypothesis import given
from hypothesis import strategies as st

from cauchylin import _special as S

mpmath.mp.dps = 60
F32_TINY = float(torch.finfo(torch.float32).tiny)


# ------------------------------------------------------------------------------ references


def ulp32(r: float) -> float:
    """Spacing of float32 numbers at the magnitude of ``r`` (subnormal spacing below tiny)."""
    a = abs(r)
    if a < F32_TINY:
        return 2.0**-149
    return 2.0 ** (math.floor(math.log2(a)) - 23)


def ref_log_cdf(d: float, s: float) -> mpmath.mpf:
    """log P(X <= loc + d) for X ~ Cauchy(loc, s), through atan2 (no cancellation)."""
    return mpmath.log(mpmath.atan2(mpmath.mpf(s), -mpmath.mpf(d)) / mpmath.pi)


def ref_log_sf(d: float, s: float) -> mpmath.mpf:
    return mpmath.log(mpmath.atan2(mpmath.mpf(s), mpmath.mpf(d)) / mpmath.pi)


def ref_log_pdf(d: float, s: float) -> mpmath.mpf:
    d, s = mpmath.mpf(d), mpmath.mpf(s)
    return -mpmath.log(mpmath.pi * s) - mpmath.log1p((d / s) ** 2)


def ref_pdf(d: float, s: float) -> mpmath.mpf:
    d, s = mpmath.mpf(d), mpmath.mpf(s)
    return s / (mpmath.pi * (s * s + d * d))


def grid32(lo: float = -30.0, hi: float = 30.0, n: int = 301) -> torch.Tensor:
    """|z| log-spaced from 10**lo to 10**hi, both signs, and 0, as float32."""
    mags = torch.logspace(lo, hi, n, dtype=torch.float64)
    return torch.cat([-mags.flip(0), torch.zeros(1, dtype=torch.float64), mags]).float()


def worst_ulp(values: torch.Tensor, refs: list[mpmath.mpf]) -> float:
    worst = 0.0
    for y, r in zip(values.tolist(), refs, strict=True):
        rf = float(r)
        if rf == 0.0:
            assert y == 0.0
            continue
        worst = max(worst, abs(mpmath.mpf(y) - r) / ulp32(rf))
    return float(worst)


# ------------------------------------------------------------------------------ float32 tails


ULP_BOUND = 4.0


def test_standardised_kernels_are_accurate_to_a_few_ulp_from_1e_minus30_to_1e30():
    z = grid32()
    zs = z.double().tolist()
    one = torch.ones((), dtype=torch.float32)
    lc, ls = S.log_cdf_sf(z, one)
    checks = {
        "log_cdf": (lc, [ref_log_cdf(v, 1.0) for v in zs]),
        "log_sf": (ls, [ref_log_sf(v, 1.0) for v in zs]),
        "log_cdf_single": (S.log_cdf(z, one), [ref_log_cdf(v, 1.0) for v in zs]),
        "log_sf_single": (S.log_sf(z, one), [ref_log_sf(v, 1.0) for v in zs]),
        "ovr_std[0]": (S.ovr_log_probs_std(z)[0], [ref_log_cdf(v, 1.0) for v in zs]),
        "log_pdf": (S.log_pdf(z, one), [ref_log_pdf(v, 1.0) for v in zs]),
        "log_pdf_std": (S.log_pdf_std(z), [ref_log_pdf(v, 1.0) for v in zs]),
    }
    for name, (values, refs) in checks.items():
        assert values.dtype == torch.float32
        assert bool(torch.isfinite(values).all()), name
        err = worst_ulp(values, refs)
        assert err <= ULP_BOUND, f"{name}: worst error {err:.2f} ulp"


@pytest.fixture(params=["cpu_fast", "general"])
def kernel_path(request, monkeypatch):
    """Run a test on the CPU fast paths, and again with them switched off (the code other devices
    run, and the fallback for zeros / overflow)."""
    if request.param == "general":
        monkeypatch.setattr(S, "_cpu_without_zeros", lambda t: False)
        monkeypatch.setattr(S, "_cpu_all_finite", lambda y: False)
    return request.param


def test_every_kernel_path_is_accurate(kernel_path):
    # |z| <= 1e18: s (1 + z^2) does not overflow, so log_pdf stays on its CPU fast path
    z = grid32(-30, 18, 241)
    zs = z.double().tolist()
    one = torch.ones((), dtype=torch.float32)
    lc, ls = S.log_cdf_sf(z, one)
    assert worst_ulp(lc, [ref_log_cdf(v, 1.0) for v in zs]) <= ULP_BOUND
    assert worst_ulp(ls, [ref_log_sf(v, 1.0) for v in zs]) <= ULP_BOUND
    assert worst_ulp(S.log_pdf(z, one), [ref_log_pdf(v, 1.0) for v in zs]) <= ULP_BOUND
    # the exact zeros and infinities on both paths
    d = torch.tensor([-math.inf, -1.0, 0.0, 2.0, math.inf])
    s = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0])
    lc, ls = S.log_cdf_sf(d, s)
    assert lc.tolist() == [-math.inf, -math.inf, 0.0, 0.0, 0.0]
    assert ls.tolist() == [0.0, 0.0, -math.inf, -math.inf, -math.inf]


@pytest.mark.parametrize("scale", [1e-20, 3.7e-4, 2.0, 6.1e3, 1e20])
def test_two_argument_kernels_are_accurate_for_any_scale(scale):
    s32 = torch.tensor(scale, dtype=torch.float32)
    # d = z * s rounded to float32; the reference uses the rounded d and s exactly.
    d = (grid32(-25, 25, 101).double() * float(s32)).float()
    d = d[torch.isfinite(d)]
    ds, sv = d.double().tolist(), float(s32)
    lc, ls = S.log_cdf_sf(d, s32)
    assert worst_ulp(lc, [ref_log_cdf(v, sv) for v in ds]) <= ULP_BOUND
    assert worst_ulp(ls, [ref_log_sf(v, sv) for v in ds]) <= ULP_BOUND
    # log p = -log(pi s (1 + z^2)) is one log of a product: where the result is near 0 (the
    # product near 1) a relative error of a few 2**-24 in the product is many ulp of the result.
    # The natural bound: the density itself to 2**-22 relative, or 4 ulp of log p.
    lp = S.log_pdf(d, s32).tolist()
    for y, v in zip(lp, ds, strict=True):
        r = ref_log_pdf(v, sv)
        assert abs(mpmath.mpf(y) - r) <= ULP_BOUND * ulp32(float(r)) + 2.0**-22, (v, y, r)


def test_log_probabilities_are_never_positive():
    z = torch.cat([grid32(), torch.tensor([math.inf, -math.inf]), torch.randn(2000) * 1e3])
    for s in (torch.tensor(1.0), torch.rand(z.shape) * 10 + 1e-6):
        lc, ls = S.log_cdf_sf(z * s, s)
        assert bool((lc <= 0).all()) and bool((ls <= 0).all())
        assert bool((S.log_cdf(z * s, s) <= 0).all()) and bool((S.log_sf(z * s, s) <= 0).all())


def test_infinite_arguments_and_point_masses_give_exact_limits():
    one = torch.tensor(1.0)
    lc, ls = S.log_cdf_sf(torch.tensor([-math.inf, math.inf]), one)
    assert lc.tolist() == [-math.inf, 0.0] and ls.tolist() == [0.0, -math.inf]
    # s = 0: a point mass at loc; the cdf is the step 1[x >= loc].
    d, zero = torch.tensor([-1.0, 0.0, 2.0]), torch.zeros(3)
    lc, ls = S.log_cdf_sf(d, zero)
    assert lc.tolist() == [-math.inf, 0.0, 0.0]
    assert ls.tolist() == [0.0, -math.inf, -math.inf]
    assert S.cdf(d, zero).tolist() == [0.0, 1.0, 1.0]
    assert S.sf(d, zero).tolist() == [1.0, 0.0, 0.0]
    lp = S.log_pdf(d, zero)
    assert lp[0] == -math.inf and lp[2] == -math.inf and bool(torch.isnan(lp[1]))


def test_icdf_has_exact_infinities_and_the_right_sign_near_one():
    q = torch.tensor([0.0, 1e-30, 0.25, 0.5, 0.75, 1.0 - 2**-24, 1.0], dtype=torch.float32)
    out = S.icdf_std(q)
    assert out[0] == -math.inf and out[-1] == math.inf
    assert bool((out.diff() > 0).all())  # strictly increasing, never the wrong sign
    assert out[3] == 0.0
    # torch's own Cauchy gets q = 1 wrong (a large finite number of the wrong sign):
    assert torch.distributions.Cauchy(0.0, 1.0).icdf(torch.tensor(1.0)) < 0
    q64 = torch.linspace(1e-6, 1 - 1e-6, 2001, dtype=torch.float64)
    np.testing.assert_allclose(
        S.icdf_std(q64).numpy(), scipy.stats.cauchy.ppf(q64.numpy()), rtol=1e-12, atol=1e-12
    )
    assert bool(torch.isnan(S.icdf_std(torch.tensor([-0.1, 1.1]))).all())


def test_float64_kernels_match_scipy():
    rng = np.random.default_rng(0)
    z = np.concatenate([rng.standard_cauchy(5000), np.linspace(-50, 50, 1001)])
    s = rng.uniform(1e-3, 1e3, z.shape)
    d = z * s
    dt, st_ = torch.from_numpy(d), torch.from_numpy(s)
    lc, ls = S.log_cdf_sf(dt, st_)
    ref = scipy.stats.cauchy(0.0, s)
    np.testing.assert_allclose(lc.numpy(), ref.logcdf(d), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(ls.numpy(), ref.logsf(d), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(S.log_pdf(dt, st_).numpy(), ref.logpdf(d), rtol=1e-13)
    np.testing.assert_allclose(S.cdf(dt, st_).numpy(), ref.cdf(d), rtol=1e-13, atol=1e-16)
    np.testing.assert_allclose(S.sf(dt, st_).numpy(), ref.sf(d), rtol=1e-13, atol=1e-16)
    np.testing.assert_allclose(S.cdf_std(torch.from_numpy(z)).numpy(), scipy.stats.cauchy.cdf(z))
    np.testing.assert_allclose(S.sf_std(torch.from_numpy(z)).numpy(), scipy.stats.cauchy.sf(z))


def test_half_precision_inputs_compute_in_float32():
    for dtype in (torch.float16, torch.bfloat16):
        big = float(torch.finfo(dtype).max)
        small = float(torch.finfo(dtype).tiny)
        z = torch.tensor([-big, -1.0, -small, 0.0, small, 1.0, big], dtype=dtype)
        one = torch.ones((), dtype=dtype)
        for fn in (S.log_cdf, S.log_sf, S.log_pdf):
            out = fn(z, one)
            assert out.dtype == torch.float32
            assert bool(torch.isfinite(out).all())
            assert torch.equal(out, fn(z.float(), one.float()))
        out = S.ovr_log_probs_std(z)
        assert out[0].dtype == torch.float32 and bool(torch.isfinite(out[0]).all())
        assert (
            S.cdf_std(z).dtype == torch.float32 and S.icdf_std(z.abs() / big).dtype == torch.float32
        )


def test_log1p_square_matches_mpmath_without_overflow():
    z = grid32(-30, 30, 61)
    out = S.log1p_square(z)
    refs = [mpmath.log1p(mpmath.mpf(v) ** 2) for v in z.double().tolist()]
    assert worst_ulp(out, refs) <= 2.0


# ------------------------------------------------------------------------------ derivatives


def _check_grad(got: torch.Tensor, ref: list[mpmath.mpf], rtol: float, name: str) -> None:
    for g, r in zip(got.tolist(), ref, strict=True):
        rf = float(r)
        assert math.isfinite(g), f"{name}: non-finite gradient {g} (reference {rf})"
        if abs(rf) < 2 * F32_TINY:
            # The true value underflows float32: 0 (or a subnormal of the right size) is right.
            assert abs(g - rf) <= 2 * F32_TINY, f"{name}: {g} vs {rf}"
            continue
        assert math.copysign(1.0, g) == math.copysign(1.0, rf), f"{name}: sign of {g} vs {rf}"
        assert abs(g - rf) <= rtol * abs(rf), f"{name}: {g} vs {rf}"


@pytest.mark.parametrize("scale", [1.0, 1e-12, 4.5e7])
def test_gradients_are_finite_correctly_signed_and_accurate(scale):
    s_val = float(torch.tensor(scale, dtype=torch.float32))
    d = (grid32(-30, 30, 61).double() * s_val).float().requires_grad_()
    s = torch.full_like(d, s_val).requires_grad_()
    ds = d.detach().double().tolist()
    lc, ls = S.log_cdf_sf(d, s)
    g_lc = torch.autograd.grad(lc.sum(), (d, s), retain_graph=True)
    g_ls = torch.autograd.grad(ls.sum(), (d, s))
    lp = S.log_pdf(d, s)
    g_lp = torch.autograd.grad(lp.sum(), (d, s))
    ref_lc_d, ref_lc_s, ref_ls_d, ref_ls_s, ref_lp_d, ref_lp_s = [], [], [], [], [], []
    for v in ds:
        dv, sv = mpmath.mpf(v), mpmath.mpf(s_val)
        p = ref_pdf(v, s_val)
        F = mpmath.atan2(sv, -dv) / mpmath.pi
        G = mpmath.atan2(sv, dv) / mpmath.pi
        # d/dx log F((x - loc)/s) = p / F; d/ds = -(d/s) p / F.
        ref_lc_d.append(p / F)
        ref_lc_s.append(-(dv / sv) * p / F)
        ref_ls_d.append(-p / G)
        ref_ls_s.append((dv / sv) * p / G)
        ref_lp_d.append(-2 * dv / (sv * sv + dv * dv))
        ref_lp_s.append((dv * dv - sv * sv) / (sv * (sv * sv + dv * dv)))
    _check_grad(g_lc[0], ref_lc_d, 2e-5, "dlogcdf/dd")
    _check_grad(g_lc[1], ref_lc_s, 2e-5, "dlogcdf/ds")
    _check_grad(g_ls[0], ref_ls_d, 2e-5, "dlogsf/dd")
    _check_grad(g_ls[1], ref_ls_s, 2e-5, "dlogsf/ds")
    _check_grad(g_lp[0], ref_lp_d, 2e-5, "dlogpdf/dd")
    _check_grad(g_lp[1], ref_lp_s, 2e-5, "dlogpdf/ds")
    assert bool((g_lc[0] >= 0).all()) and bool((g_ls[0] <= 0).all())


def test_gradient_at_zero_is_the_density_ratio_not_zero():
    z = torch.zeros(2, requires_grad=True)
    lc, ls = S.ovr_log_probs_std(z)
    (g,) = torch.autograd.grad(lc.sum() + 2 * ls.sum(), z)
    # d log cdf / dz = p(0) / (1/2) = 2/pi; d log sf / dz = -2/pi.
    torch.testing.assert_close(g, torch.full((2,), 2 / math.pi - 4 / math.pi))


def test_gradcheck_and_double_backward_in_float64():
    g = torch.Generator().manual_seed(0)
    d = (torch.randn(24, generator=g, dtype=torch.float64) * 5).requires_grad_()
    s = (torch.rand(24, generator=g, dtype=torch.float64) + 0.05).requires_grad_()
    s_scalar = torch.tensor(1.7, dtype=torch.float64, requires_grad=True)
    for fn in (S.log_cdf_sf, S.log_cdf, S.log_sf, S.log_pdf):
        assert torch.autograd.gradcheck(fn, (d, s))
        assert torch.autograd.gradcheck(fn, (d, s_scalar))  # broadcast scale: summed gradient
        assert torch.autograd.gradgradcheck(fn, (d, s))
    for fn in (S.ovr_log_probs_std, S.log_cdf_std, S.log_sf_std, S.log_pdf_std):
        assert torch.autograd.gradcheck(fn, (d,))


@given(
    log_d=st.floats(-30, 30),
    log_s=st.floats(-15, 15),
    sign=st.sampled_from([-1.0, 1.0]),
)
def test_gradients_finite_for_any_displacement_and_scale(log_d, log_s, sign):
    d = torch.tensor([sign * 10.0**log_d], requires_grad=True)
    s = torch.tensor([10.0**log_s], requires_grad=True)
    lc, ls = S.log_cdf_sf(d, s)
    lp = S.log_pdf(d, s)
    grads = torch.autograd.grad(lc.sum() + ls.sum() + lp.sum(), (d, s))
    assert all(bool(torch.isfinite(g).all()) for g in grads)
    assert bool(torch.isfinite(lp).all())
    assert float(lc.detach()) <= 0 and float(ls.detach()) <= 0
    if log_d - log_s < 37:
        # The smaller tail ~ 1/(pi |z|) is a normal float32 up to |z| ~ 2.7e37; beyond it
        # underflows and its log degrades to -inf (never NaN, never positive).
        assert bool(torch.isfinite(lc).all() and torch.isfinite(ls).all())
    else:
        assert not bool(torch.isnan(lc).any() or torch.isnan(ls).any())


# ------------------------------------------------------------------------------ row blocks


@pytest.mark.parametrize("which", ["cdf", "sf", "both"])
def test_row_blocks_are_accurate_and_keep_the_gradient(monkeypatch, which):
    """Large CPU inputs are evaluated in row blocks (``BLOCK_ELEMENTS``). With tiny blocks, a
    [37, 50] input (broadcast scale, point masses, infinities and far tails in some blocks only,
    so blocks take different paths) stays within the ulp bound of mpmath, and gradcheck passes
    through the blocked forward."""
    monkeypatch.setattr(S, "BLOCK_ELEMENTS", 64)
    g = torch.Generator().manual_seed(3)
    d = torch.randn(37, 50, generator=g, dtype=torch.float64) * 10.0 ** torch.randint(
        -30, 30, (37, 50), generator=g
    )
    d[5, 7], d[20, 3], d[31, 49] = math.inf, -math.inf, 0.0
    s = torch.rand(50, generator=g, dtype=torch.float64) + 0.1
    s[11] = 0.0  # a point mass in one column
    fn = {"cdf": S.log_cdf, "sf": S.log_sf, "both": S.log_cdf_sf}[which]
    got = fn(d.float(), s.float())
    got = (
        got
        if which == "both"
        else (got if which == "cdf" else None, got if which == "sf" else None)
    )
    refs = {"cdf": ref_log_cdf, "sf": ref_log_sf}
    for values, name in zip(got, ("cdf", "sf"), strict=True):
        if values is None:
            continue
        assert values.shape == (37, 50)
        flat_d, flat_s = d.float().flatten().tolist(), s.float().expand(37, 50).flatten().tolist()
        ref = []
        for x, sc in zip(flat_d, flat_s, strict=True):
            if sc == 0.0:  # point mass: exact 0 / -inf steps (log cdf at d >= +0 is 0)
                upper = x > 0 or (x == 0 and math.copysign(1, x) > 0)
                ref.append(mpmath.mpf(0) if upper == (name == "cdf") else mpmath.mpf("-inf"))
            else:
                ref.append(refs[name](x, sc))
        finite = [i for i, r in enumerate(ref) if mpmath.isfinite(r)]
        assert all(
            values.flatten()[i].item() == float(ref[i])
            for i in range(len(ref))
            if i not in set(finite)
        )
        assert worst_ulp(values.flatten()[finite], [ref[i] for i in finite]) <= ULP_BOUND
    d64 = torch.randn(40, 20, generator=g, dtype=torch.float64).requires_grad_()
    s64 = (torch.rand(20, generator=g, dtype=torch.float64) + 0.5).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: fn(a, b), (d64, s64))
