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
        monkeypatch.setattr(S, "_cpu_all_normal", lambda t: False)
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


# ------------------------------------------------------------------------------ quantile


def ref_quantile(q: float) -> mpmath.mpf:
    """tan(pi (q - 1/2)) of the exact float q, at 60 digits."""
    return mpmath.tan(mpmath.pi * (mpmath.mpf(q) - mpmath.mpf(1) / 2))


def quantile_grid32() -> torch.Tensor:
    """q from 1e-40 (subnormal) to 1/2 and its mirror 1 - q in float32, the quartiles' neighbours,
    and uniform draws."""
    tails = torch.logspace(-40, math.log10(0.5), 400, dtype=torch.float64).float()
    near = torch.tensor([0.25, 0.75], dtype=torch.float32)
    near = torch.cat([near, torch.nextafter(near, near + 1), torch.nextafter(near, near - 1)])
    draws = torch.rand(300, generator=torch.Generator().manual_seed(7))
    return torch.cat([tails, 1.0 - tails, near, draws])


@pytest.fixture(params=["blocked", "whole", "general"])
def quantile_path(request, monkeypatch):
    """The CPU kernel in row blocks, evaluated whole, and the functional path (gradients, graph
    capture, other devices)."""
    if request.param == "blocked":
        monkeypatch.setattr(S, "BLOCK_ELEMENTS", 64)
    if request.param == "general":
        monkeypatch.setattr(S, "_quantile_fast_ok", lambda q, scale: False)
    return request.param


def test_icdf_is_within_3_ulp_of_mpmath_on_every_path(quantile_path):
    """Float32 against mpmath, q normal; 2.0 ulp measured (tan is within 1 ulp in Sleef)."""
    q = quantile_grid32()
    q2 = q[: (q.numel() // 16) * 16].reshape(-1, 16)  # 2-D, many rows: several blocks
    z = S.icdf_std(q2).flatten()
    refs = [ref_quantile(v) for v in q2.flatten().tolist()]
    flat = q2.flatten().tolist()
    top = float(torch.finfo(torch.float32).max)
    finite = [i for i, r in enumerate(refs) if abs(float(r)) < top]
    normal = [i for i in finite if flat[i] >= F32_TINY]
    assert len(normal) > 700
    assert worst_ulp(z[normal], [refs[i] for i in normal]) <= 3.0
    # a subnormal q (9.4e-40 < q < 1.2e-38, quantiles beyond -2.7e37) loses relative precision
    # in pi q: at most the subnormal spacing 2**-149 relative to q, plus the 3 ulp
    for i in set(finite) - set(normal):
        rel = abs(mpmath.mpf(z[i].item()) / refs[i] - 1)
        assert rel <= 2.0**-149 / flat[i] + 3 * 2.0**-23, (flat[i], rel)
    # beyond float32's range (q below ~1e-39 or within 6e-8 of 1) the quantile is an infinity
    for i in set(range(len(refs))) - set(finite):
        assert z[i].item() == math.copysign(math.inf, float(refs[i]))


def test_icdf_with_location_and_scale_matches_mpmath_and_broadcasts(quantile_path):
    g = torch.Generator().manual_seed(11)
    q = torch.rand(40, 1, generator=g)
    loc = torch.randn(7, generator=g) * 100
    scale = torch.rand(7, generator=g) * 10 + 1e-3
    out = S.icdf(q, loc, scale)
    assert out.shape == (40, 7) and out.dtype == torch.float32
    eps = float(torch.finfo(torch.float32).eps)
    for i in range(40):
        for j in range(7):
            z = ref_quantile(q[i, 0].item())
            ref = mpmath.mpf(loc[j].item()) + mpmath.mpf(scale[j].item()) * z
            tol = 4 * eps * (abs(loc[j].item()) + abs(float(mpmath.mpf(scale[j].item()) * z)))
            assert abs(mpmath.mpf(out[i, j].item()) - ref) <= tol, (i, j)


def test_icdf_edges_on_every_path(quantile_path):
    q = torch.tensor([-0.0, 0.0, 0.5, 1.0, 0.25, 0.75])
    assert S.icdf_std(q).tolist() == [-math.inf, -math.inf, 0.0, math.inf, -1.0, 1.0]
    # a point mass (scale 0) keeps its infinities at 0 and 1 and is loc inside
    out = S.icdf(torch.tensor([0.0, 0.3, 1.0]), torch.tensor(2.0), torch.tensor(0.0))
    assert out.tolist() == [-math.inf, 2.0, math.inf]
    # outside [0, 1] and NaN: NaN, on every path (the fast path hands these to the general one)
    bad = S.icdf(torch.tensor([-0.1, 1.1, math.nan]), torch.zeros(3), torch.ones(3))
    assert bool(torch.isnan(bad).all())
    assert S.icdf_std(torch.tensor([])).shape == (0,)
    with pytest.raises(ValueError, match="both loc and scale"):
        S.icdf(q, torch.zeros(1))


def test_icdf_fast_path_is_the_functional_formula_bit_for_bit(monkeypatch):
    monkeypatch.setattr(S, "BLOCK_ELEMENTS", 256)
    g = torch.Generator().manual_seed(5)
    q = torch.rand(300, 33, generator=g)
    loc, scale = torch.randn(33, generator=g), torch.rand(33, generator=g) + 0.1
    fast = S.icdf(q, loc, scale)
    general = torch.addcmul(loc, scale, S._quantile_general(q))
    assert torch.equal(fast, general)
    assert torch.equal(S.icdf_std(q.double()), S._quantile_general(q.double()))


def test_icdf_gradients_are_the_derivatives():
    """d/dq = pi scale (1 + z^2), d/dloc = 1, d/dscale = z; gradcheck in float64."""
    g = torch.Generator().manual_seed(9)
    q = (torch.rand(6, 4, generator=g, dtype=torch.float64) * 0.98 + 0.01).requires_grad_()
    loc = torch.randn(4, generator=g, dtype=torch.float64).requires_grad_()
    scale = (torch.rand(4, generator=g, dtype=torch.float64) + 0.5).requires_grad_()
    assert torch.autograd.gradcheck(S.icdf, (q, loc, scale))
    out = S.icdf(q, loc, scale)
    gq, gl, gs = torch.autograd.grad(out.sum(), (q, loc, scale))
    for (i, j), value in zip([(0, 0), (5, 3)], [gq[0, 0], gq[5, 3]], strict=True):
        z = ref_quantile(q[i, j].item())
        ref = mpmath.pi * mpmath.mpf(scale[j].item()) * (1 + z * z)
        assert abs(mpmath.mpf(value.item()) - ref) <= 1e-12 * abs(ref)
    torch.testing.assert_close(gl, torch.full((4,), 6.0, dtype=torch.float64))
    torch.testing.assert_close(gs, S.icdf_std(q.detach()).sum(0))


# ------------------------------------------------------------------------------ limits at +-inf


def test_icdf_of_negative_zero_is_minus_infinity():
    """-0.0 is the probability 0: the quantile is -inf (1/tan(-0) would flip the sign)."""
    q = torch.tensor([-0.0, 0.0, 1.0], dtype=torch.float32)
    assert S.icdf_std(q).tolist() == [-math.inf, -math.inf, math.inf]
    assert S.icdf_std(q.double()).tolist() == [-math.inf, -math.inf, math.inf]


@pytest.mark.parametrize(
    ("name", "x", "value", "grad_d", "grad_s"),
    [
        # value and the limits of the partial derivatives as |d| -> inf (s = 2)
        ("log_cdf", math.inf, 0.0, 0.0, 0.0),
        ("log_sf", -math.inf, 0.0, 0.0, 0.0),
        ("log_cdf", -math.inf, -math.inf, 0.0, 0.5),  # log cdf ~ log s - log|d| - log pi
        ("log_sf", math.inf, -math.inf, 0.0, 0.5),
        ("cdf", math.inf, 1.0, 0.0, 0.0),
        ("cdf", -math.inf, 0.0, 0.0, 0.0),
        ("sf", math.inf, 0.0, 0.0, 0.0),
        ("sf", -math.inf, 1.0, 0.0, 0.0),
        ("log_pdf", math.inf, -math.inf, 0.0, 0.5),  # d/ds [log s - 2 log|d|] = 1/s
        ("log_pdf", -math.inf, -math.inf, 0.0, 0.5),
    ],
)
def test_gradients_at_infinite_displacement_are_the_limits(name, x, value, grad_d, grad_s):
    fn = getattr(S, name)
    for dtype in (torch.float32, torch.float64):
        d = torch.tensor([x], dtype=dtype, requires_grad=True)
        s = torch.tensor([2.0], dtype=dtype, requires_grad=True)
        y = fn(d, s)
        assert y.item() == value
        gd, gs = torch.autograd.grad(y.sum(), (d, s))
        assert (gd.item(), gs.item()) == (grad_d, grad_s), (name, x, dtype)
    # the pair, and the standardised OvR pair used by the losses and OvR
    d = torch.tensor([math.inf, -math.inf], requires_grad=True)
    s = torch.tensor([2.0, 2.0], requires_grad=True)
    lc, ls = S.log_cdf_sf(d, s)
    gd, gs = torch.autograd.grad(lc.sum() + ls.sum(), (d, s))
    assert gd.tolist() == [0.0, 0.0] and gs.tolist() == [0.5, 0.5]
    z = torch.tensor([math.inf, -math.inf], requires_grad=True)
    lp, lq = S.ovr_log_probs_std(z)
    (gz,) = torch.autograd.grad(lp.sum() + lq.sum(), (z,))
    assert gz.tolist() == [0.0, 0.0]


def test_cdf_gradients_match_mpmath_in_the_tails():
    """The hand-written cdf/sf derivatives: p and -d/(pi h^2), against mpmath, float32."""
    d = grid32(-20, 30, 51)
    s = torch.tensor(1.5)
    for fn, sign in ((S.cdf, 1), (S.sf, -1)):
        dd = d.clone().requires_grad_()
        ss = s.clone().requires_grad_()
        gd, gs = torch.autograd.grad(fn(dd, ss).sum(), (dd, ss), allow_unused=False)
        gd_ref = [sign * ref_pdf(v, 1.5) for v in d.double().tolist()]
        _check_grad(gd, gd_ref, 1e-6, fn.__name__)
        gs_ref = sum(
            -sign * mpmath.mpf(v) / (mpmath.pi * (mpmath.mpf(1.5) ** 2 + mpmath.mpf(v) ** 2))
            for v in d.double().tolist()
        )
        assert abs(float(gs) - float(gs_ref)) <= 1e-6 * float(
            sum(abs(mpmath.mpf(v)) / (mpmath.pi * (2.25 + mpmath.mpf(v) ** 2)) for v in d.tolist())
        )


# ------------------------------------------------------------------------------ subnormal tails


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_log_tails_stay_finite_and_exact_where_the_tail_is_subnormal(kernel_path, dtype):
    """t = atan2(s, |d|)/pi below the smallest normal: log t = log s - log|d| - log pi.

    float32: s = 1.4e-45 (the smallest subnormal), d = 1 gives log sf = -104.42 (the tail itself
    is 4.5e-46, below every float32); before, such tails underflowed to -inf.
    """
    info = torch.finfo(dtype)
    smallest = float(torch.tensor(info.tiny, dtype=dtype) * info.eps)  # smallest subnormal
    scales = [smallest, 1e-40 if dtype == torch.float32 else 1e-310, 1e-30, 1.0]
    ds = [1.0, 1e10, 1e30, float(info.max)]
    cases = [(d, s) for d in ds for s in scales]
    d = torch.tensor([c[0] for c in cases], dtype=dtype)
    s = torch.tensor([c[1] for c in cases], dtype=dtype)
    d_, s_ = d.double().tolist(), s.double().tolist()
    ref_sf = [ref_log_sf(a, b) for a, b in zip(d_, s_, strict=True)]
    ref_cdf = [ref_log_cdf(-a, b) for a, b in zip(d_, s_, strict=True)]
    tol_ulps = 4.0
    for values, refs in (
        (S.log_sf(d, s), ref_sf),
        (S.log_cdf(-d, s), ref_cdf),
        (S.log_cdf_sf(d, s)[1], ref_sf),
        (S.log_cdf_sf(-d, s)[0], ref_cdf),
    ):
        assert bool(torch.isfinite(values).all())
        for y, r in zip(values.tolist(), refs, strict=True):
            # |log t| is large here (>= 40): a few ulp of the result
            assert abs(mpmath.mpf(y) - r) <= tol_ulps * abs(float(r)) * float(info.eps), (y, r)
    if dtype == torch.float32:
        one = torch.tensor(1.0)
        assert abs(S.log_sf(one, torch.tensor(1e-45)).item() - (-104.4237)) < 1e-3
    # s = 0 (a point mass) and an infinite displacement still give an exact -inf
    zero = torch.zeros((), dtype=dtype)
    assert S.log_sf(torch.tensor([1.0, 0.0], dtype=dtype), zero).tolist() == [-math.inf] * 2
    assert S.log_sf(torch.tensor([math.inf], dtype=dtype), one_like(dtype)).item() == -math.inf


def one_like(dtype: torch.dtype) -> torch.Tensor:
    return torch.ones((), dtype=dtype)


def test_subnormal_tail_gradients_are_the_limits():
    """d log t / d|d| = -1/|d| and d log t / ds = 1/s where t is subnormal (float64 reference)."""
    d = torch.tensor([1e30, 1e38], requires_grad=True)
    s = torch.tensor([1e-12, 1e-2], requires_grad=True)
    gd, gs = torch.autograd.grad(S.log_sf(d, s).sum(), (d, s))
    torch.testing.assert_close(gd, -1.0 / d.detach(), rtol=1e-6, atol=0)
    torch.testing.assert_close(gs, 1.0 / s.detach(), rtol=1e-6, atol=0)


# ------------------------------------------------------------------------------ Cauchy KL


def mp_kl(m1: float, g1: float, m2: float, g2: float) -> mpmath.mpf:
    """KL(C(m1, g1) || C(m2, g2)) from the closed form at 60 digits (inputs taken exactly)."""
    m1, g1, m2, g2 = (mpmath.mpf(v) for v in (m1, g1, m2, g2))
    return mpmath.log(((g1 + g2) ** 2 + (m1 - m2) ** 2) / (4 * g1 * g2))


KL_CASES = [
    (1e30, 1e-15, 0.0, 1e-15),  # the overflow case: 205.846 in float32
    (0.0, 1e-15, 1e30, 1e-15),
    (0.0, 1.0, 0.0, 1.0 + 2.0**-20),  # nearly equal laws: KL ~ 2**-42 / 4
    (1e-7, 1.0, 0.0, 1.0),
    (3.0, 1e-30, -2.0, 1e30),  # scales 60 decades apart
    (0.0, 1e38, 0.0, 1e-38),
    (-1e38, 1.0, 1e38, 1.0),
    (0.5, 2.0, -0.25, 0.125),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", KL_CASES)
def test_cauchy_kl_is_accurate_at_the_extremes(case, dtype):
    args = [torch.tensor(v, dtype=dtype) for v in case]
    got = S.cauchy_kl(*args)
    ref = mp_kl(*[a.item() for a in args])  # the rounded inputs, exactly
    assert got.dtype == dtype and math.isfinite(got.item())
    eps = float(torch.finfo(dtype).eps)
    assert abs(mpmath.mpf(got.item()) - ref) <= 4 * eps * abs(ref) + 1e-300, (got.item(), ref)


def test_cauchy_kl_overflow_case_in_float32():
    one_e30, g = torch.tensor(1e30), torch.tensor(1e-15)
    got = S.cauchy_kl(one_e30, g, torch.tensor(0.0), g)
    assert abs(got.item() - 205.84636) < 1e-3


def mp_kl_grad(m1: float, g1: float, m2: float, g2: float) -> list[mpmath.mpf]:
    """The four partial derivatives by mpmath's numerical differentiation of the closed form."""
    x = [mpmath.mpf(v) for v in (m1, g1, m2, g2)]
    out = []
    for i in range(4):

        def f(t: mpmath.mpf, i: int = i) -> mpmath.mpf:
            y = list(x)
            y[i] = t
            return mp_kl(*y)

        out.append(mpmath.diff(f, x[i]))
    return out


@pytest.mark.parametrize(
    "point",
    [
        (0.0, 1.0, 0.0, 1.0),  # p == q: every derivative is exactly 0
        (2.5, 1e-15, 2.5, 1e-15),
        (-1e20, 3e10, -1e20, 3e10),
        (1.0, 2.0, -0.5, 0.5),
        (1e30, 1e-15, 0.0, 1e-15),
        (0.0, 1e-3, 0.0, 1e3),
    ],
)
def test_cauchy_kl_gradients_match_the_derivative(point):
    leaves = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in point]
    grads = torch.autograd.grad(S.cauchy_kl(*leaves), leaves)
    refs = mp_kl_grad(*point)
    for g, r in zip(grads, refs, strict=True):
        assert math.isfinite(g.item())
        assert abs(mpmath.mpf(g.item()) - r) <= 1e-12 * abs(r) + 1e-300, (point, g.item(), r)
    if point[:2] == point[2:]:
        assert all(g.item() == 0.0 for g in grads)
    # float32 at p == q: zero, not NaN (hypot's 0/0)
    leaves32 = [torch.tensor(v, dtype=torch.float32, requires_grad=True) for v in point]
    grads32 = torch.autograd.grad(S.cauchy_kl(*leaves32), leaves32)
    assert all(math.isfinite(g.item()) for g in grads32)


def test_cauchy_kl_gradcheck_and_broadcasting():
    gen = torch.Generator().manual_seed(0)
    m1 = torch.randn(3, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    g1 = (torch.rand(3, 4, generator=gen, dtype=torch.float64) + 0.2).requires_grad_()
    m2 = torch.randn(4, generator=gen, dtype=torch.float64, requires_grad=True)
    g2 = (torch.rand(1, generator=gen, dtype=torch.float64) + 0.2).requires_grad_()
    assert torch.autograd.gradcheck(S.cauchy_kl, (m1, g1, m2, g2))
    assert torch.autograd.gradgradcheck(S.cauchy_kl, (m1, g1, m2, g2))
    assert S.cauchy_kl(m1, g1, m2, g2).shape == (3, 4)


# ------------------------------------------------------------------------------ tracing


@pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated")  # both categories
def test_traced_kernels_are_the_same_graph_with_and_without_gradients():
    """torch.jit.trace (with its check) of every Function-backed kernel; values and gradients
    of the traced function equal eager ones, for inputs that do and do not need gradients."""
    gen = torch.Generator().manual_seed(1)
    d = torch.randn(5, 3, generator=gen) * 10
    s = torch.rand(3, generator=gen) + 0.1
    kernels = {
        "log_cdf_sf": lambda d, s: S.log_cdf_sf(d, s),
        "log_cdf": S.log_cdf,
        "log_sf": S.log_sf,
        "cdf": S.cdf,
        "sf": S.sf,
        "log_pdf": S.log_pdf,
        "kl": lambda d, s: S.cauchy_kl(d, s, d.flip(0), s.flip(0)),
    }
    for name, fn in kernels.items():
        for grad in (False, True):
            dd, ss = d.clone().requires_grad_(grad), s.clone().requires_grad_(grad)
            traced = torch.jit.trace(fn, (dd, ss), check_trace=True)
            other_d = (torch.randn(5, 3, generator=gen) * 1e3).requires_grad_()
            other_s = (torch.rand(3, generator=gen) + 0.5).requires_grad_()
            out_t, out_e = traced(other_d, other_s), fn(other_d, other_s)
            out_t = out_t if isinstance(out_t, tuple) else (out_t,)
            out_e = out_e if isinstance(out_e, tuple) else (out_e,)
            for a, b in zip(out_t, out_e, strict=True):
                torch.testing.assert_close(a, b, rtol=0, atol=0)
            g_t = torch.autograd.grad(sum(o.sum() for o in out_t), (other_d, other_s))
            g_e = torch.autograd.grad(sum(o.sum() for o in out_e), (other_d, other_s))
            for a, b in zip(g_t, g_e, strict=True):
                torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)


# torch's Dynamo warns about its own handling of every custom autograd.Function (torch 2.13)
@pytest.mark.filterwarnings("ignore:.*should not be instantiated:DeprecationWarning")
def test_compiled_kernels_have_no_graph_break():
    """torch.compile(fullgraph=True): no host read of tensor values inside the kernels."""
    d = torch.tensor([-1e30, -1.0, 0.0, 2.0, 1e38])
    s = torch.tensor(1.0)

    def f(d, s):
        lc, ls = S.log_cdf_sf(d, s)
        q = S.cdf(d, s)
        kl = S.cauchy_kl(d, s, 0.5 * d, s)
        return lc + ls + S.log_pdf(d, s) + q + kl + S.icdf(q.clamp(0.1, 0.9), d, s)

    compiled = torch.compile(f, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(d, s), f(d, s), rtol=0, atol=0)


@given(
    st.lists(st.integers(0, 3), max_size=4),
    st.lists(st.integers(0, 3), max_size=4),
    st.lists(st.integers(0, 3), max_size=2),
)
def test_fast_broadcast_shape_is_torchs_rule(a, b, c):
    """The kernels' broadcast helper against torch.broadcast_shapes (result or RuntimeError)."""
    try:
        expected = torch.broadcast_shapes(a, b, c)
    except RuntimeError:
        with pytest.raises(RuntimeError, match="do not broadcast"):
            S._broadcast_shape(a, b, c)
        return
    assert S._broadcast_shape(a, b, c) == expected


def test_log_pdf_finite_says_when_its_read_proved_the_inputs_finite():
    """``log_pdf_finite``: the value of ``log_pdf`` and ``True`` only when every displacement and
    scale was read to be finite; NaN, infinities, a zero scale or a wanted gradient say False."""
    from cauchylin._special import log_pdf, log_pdf_finite

    d = torch.tensor([0.0, -2.5, 1e10])
    s = torch.tensor([1.0, 0.5, 3.0])
    out, finite = log_pdf_finite(d, s)
    assert finite and torch.equal(out, log_pdf(d, s))
    for bad_d, bad_s in [
        (math.nan, 1.0),
        (math.inf, 1.0),
        (-math.inf, 1.0),
        (1.0, math.inf),
        (1.0, math.nan),
        (1.0, 0.0),
        (3e38, 1.0),
    ]:
        dd, ss = d.clone(), s.clone()
        dd[1], ss[1] = bad_d, bad_s
        out, finite = log_pdf_finite(dd, ss)
        assert not finite, (bad_d, bad_s)
        torch.testing.assert_close(out, log_pdf(dd, ss), rtol=0, atol=0, equal_nan=True)
    out, finite = log_pdf_finite(d.clone().requires_grad_(), s)
    assert not finite and torch.equal(out.detach(), log_pdf(d, s))
