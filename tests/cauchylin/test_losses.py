"""Losses: OvR BCE against independent references, counting rules, gated regression, total."""

from __future__ import annotations

import math

import mpmath
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from cauchylin.losses import (
    CausalLMLoss,
    OvRLoss,
    RegLoss,
    causal_lm_loss,
    context_weights,
    gated_regression_loss,
    last_number_weights,
    ovr_bce,
    ovr_bce_fused,
)

mpmath.mp.dps = 50


# --------------------------------------------------------------------------------------------
# independent references
# --------------------------------------------------------------------------------------------


def _mp_P(z: float) -> mpmath.mpf:
    return mpmath.mpf(1) / 2 + mpmath.atan(mpmath.mpf(z)) / mpmath.pi


def _mp_bce_row(loc_row, scale_row, thr_row, label) -> float:
    """-sum_k [y log P + (1 - y) log(1 - P)] with the one-hot y, in 50-digit arithmetic."""
    total = mpmath.mpf(0)
    for k, (m, s, c) in enumerate(zip(loc_row, scale_row, thr_row, strict=True)):
        z = (mpmath.mpf(m) - mpmath.mpf(c)) / mpmath.mpf(s)
        p = _mp_P(z)
        total -= mpmath.log(p) if k == label else mpmath.log(1 - p)
    return float(total)


def _mp_dL_dz(z: float, is_label: bool) -> float:
    """d/dz of -log P (label) or -log(1 - P) (other classes), P = 1/2 + atan(z)/pi."""
    zz = mpmath.mpf(z)
    pdf = 1 / (mpmath.pi * (1 + zz**2))
    p = _mp_P(zz)
    return float(-pdf / p if is_label else pdf / (1 - p))


def _random_case(gen, shape, V, dtype=torch.float64, spread=3.0):
    loc = torch.randn(*shape, V, generator=gen, dtype=dtype) * spread
    scale = torch.rand(*shape, V, generator=gen, dtype=dtype) * 2 + 0.1
    labels = torch.randint(0, V, shape, generator=gen)
    return loc, scale, labels


# --------------------------------------------------------------------------------------------
# ovr_bce: values
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("per_class", [False, True])
def test_ovr_bce_matches_mpmath(per_class):
    gen = torch.Generator().manual_seed(1)
    V = 7
    loc, scale, labels = _random_case(gen, (2, 3), V)
    thr = torch.randn(V, generator=gen, dtype=torch.float64) if per_class else 0.7
    out = ovr_bce(loc, scale, labels, thr)
    thr_row = thr.tolist() if per_class else [thr] * V
    ref = torch.tensor(
        [
            [
                _mp_bce_row(loc[b, s].tolist(), scale[b, s].tolist(), thr_row, int(labels[b, s]))
                for s in range(3)
            ]
            for b in range(2)
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(out.per_position, ref, rtol=1e-13, atol=0)
    torch.testing.assert_close(out.mean, ref.mean(), rtol=1e-13, atol=0)
    assert int(out.count) == 6


def test_ovr_bce_matches_torch_binary_cross_entropy_values_and_grads():
    gen = torch.Generator().manual_seed(2)
    V = 11
    loc, scale, labels = _random_case(gen, (4, 5), V, spread=1.5)
    thr = torch.randn(V, generator=gen, dtype=torch.float64)
    loc.requires_grad_()
    scale.requires_grad_()
    thr.requires_grad_()
    ours = ovr_bce(loc, scale, labels, thr)
    g_ours = torch.autograd.grad(ours.mean, (loc, scale, thr))

    P = 0.5 + torch.atan((loc - thr) / scale) / math.pi
    onehot = F.one_hot(labels, V).to(torch.float64)
    ref_rows = F.binary_cross_entropy(P, onehot, reduction="none").sum(-1)
    g_ref = torch.autograd.grad(ref_rows.mean(), (loc, scale, thr))
    torch.testing.assert_close(ours.per_position, ref_rows, rtol=1e-12, atol=1e-12)
    for a, b in zip(g_ours, g_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_ovr_bce_gradcheck_float64():
    gen = torch.Generator().manual_seed(3)
    loc, scale, labels = _random_case(gen, (3,), 5)
    thr = torch.randn(5, generator=gen, dtype=torch.float64)
    args = [t.clone().requires_grad_() for t in (loc, scale, thr)]
    assert torch.autograd.gradcheck(
        lambda a, b, c: ovr_bce(a, b, labels, c).per_position, args, eps=1e-6, atol=1e-7
    )


@pytest.mark.parametrize("z", [-1e30, -1e10, -3.0, 0.0, 2.5, 1e10, 1e30])
def test_ovr_bce_extreme_z_float32_matches_mpmath(z):
    """(loc - C)/scale from -1e30 to 1e30: finite losses equal to mpmath, finite signed grads."""
    V = 4
    # Row 0: the label sits at the extreme z; row 1: another class does.
    loc = torch.tensor([[z, 0.0, -1.0, 1.0], [0.5, z, z, -0.5]], dtype=torch.float32)
    scale = torch.ones_like(loc)
    labels = torch.tensor([0, 3])
    loc.requires_grad_()
    scale.requires_grad_()
    out = ovr_bce(loc, scale, labels, 0.0)
    ref = [
        _mp_bce_row(loc[i].tolist(), scale[i].tolist(), [0.0] * V, int(labels[i])) for i in range(2)
    ]
    assert torch.isfinite(out.per_position).all()
    torch.testing.assert_close(
        out.per_position, torch.tensor(ref, dtype=torch.float32), rtol=2e-6, atol=1e-30
    )
    g_loc, g_scale = torch.autograd.grad(out.per_position.sum(), (loc, scale))
    assert torch.isfinite(g_loc).all() and torch.isfinite(g_scale).all()
    for i in range(2):
        for k in range(V):
            zk = float(loc[i, k].detach())
            ref_g = _mp_dL_dz(zk, k == int(labels[i]))
            got = float(g_loc[i, k])
            # correct sign always (0 allowed only where the true value underflows float32)
            assert got * ref_g >= 0 and (got != 0 or abs(ref_g) < 1e-37)
            if abs(ref_g) > 1e-37:
                assert got == pytest.approx(ref_g, rel=1e-5)
            # d/dscale = -z dL/dz at scale 1
            if abs(ref_g * zk) > 1e-37:
                assert float(g_scale[i, k]) == pytest.approx(-zk * ref_g, rel=1e-5)


# --------------------------------------------------------------------------------------------
# ovr_bce: counting rules
# --------------------------------------------------------------------------------------------


def test_ignore_index_and_attention_mask_and_mean():
    gen = torch.Generator().manual_seed(4)
    V = 6
    loc, scale, labels = _random_case(gen, (2, 4), V)
    labels[0, 1] = -100
    mask = torch.ones(2, 4, dtype=torch.long)
    mask[1, 3] = 0
    full = ovr_bce(loc, scale, labels.clamp(min=0), 0.0).per_position
    out = ovr_bce(loc, scale, labels, 0.0, attention_mask=mask)
    counted = (labels != -100) & (mask != 0)
    assert int(out.count) == 6
    torch.testing.assert_close(out.per_position, torch.where(counted, full, 0.0))
    torch.testing.assert_close(out.mean, full[counted].mean())


def test_custom_ignore_index():
    gen = torch.Generator().manual_seed(5)
    loc, scale, labels = _random_case(gen, (5,), 4)
    labels[2] = 3
    out = ovr_bce(loc, scale, labels, 0.0, ignore_index=3)
    assert int(out.count) == int((labels != 3).sum())
    assert (out.per_position[labels == 3] == 0).all()


@pytest.mark.parametrize("fused", [False, True])
def test_nan_at_uncounted_positions_does_not_leak(fused):
    gen = torch.Generator().manual_seed(6)
    C, V = 3, 5
    loc_U = torch.randn(4, C, generator=gen, dtype=torch.float64)
    scale_U = torch.rand(4, C, generator=gen, dtype=torch.float64) + 0.5
    W = torch.randn(V, C, generator=gen, dtype=torch.float64)
    loc_U[1] = float("nan")
    scale_U[2] = float("nan")
    labels = torch.tensor([0, 1, 2, 3])
    mask = torch.tensor([1, 0, 0, 1])
    loc_U.requires_grad_()
    scale_U.requires_grad_()
    if fused:
        out = ovr_bce_fused(loc_U, scale_U, W, None, 0.0, labels, attention_mask=mask)
    else:
        out = ovr_bce(loc_U @ W.T, scale_U @ W.abs().T, labels, 0.0, attention_mask=mask)
    assert torch.isfinite(out.mean) and torch.isfinite(out.per_position).all()
    g1, g2 = torch.autograd.grad(out.mean, (loc_U, scale_U))
    assert torch.isfinite(g1).all() and torch.isfinite(g2).all()
    assert (g1[1:3] == 0).all() and (g2[1:3] == 0).all()


@pytest.mark.parametrize("fused", [False, True])
def test_all_ignored_batch_is_zero_with_zero_grads(fused):
    C, V = 3, 5
    loc_U = torch.randn(2, 3, C, requires_grad=True)
    scale_U = (torch.rand(2, 3, C) + 0.5).requires_grad_()
    W = torch.randn(V, C, requires_grad=True)
    thr = torch.zeros(V, requires_grad=True)
    labels = torch.full((2, 3), -100)
    if fused:
        out = ovr_bce_fused(loc_U, scale_U, W, None, thr, labels)
    else:
        out = ovr_bce(loc_U @ W.T, scale_U @ W.abs().T, labels, thr)
    assert int(out.count) == 0
    assert out.mean.item() == 0.0
    assert (out.per_position == 0).all() and out.per_position.shape == (2, 3)
    out.mean.backward()
    for t in (loc_U, scale_U, W, thr):
        assert t.grad is None or (t.grad == 0).all()


# --------------------------------------------------------------------------------------------
# ovr_bce: argument validation and dtypes
# --------------------------------------------------------------------------------------------


def test_ovr_bce_rejects_bad_arguments():
    loc, scale = torch.zeros(2, 3, 5), torch.ones(2, 3, 5)
    labels = torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="scale_S shape"):
        ovr_bce(loc, torch.ones(2, 3, 4), labels, 0.0)
    with pytest.raises(ValueError, match="labels shape"):
        ovr_bce(loc, scale, torch.zeros(2, 4, dtype=torch.long), 0.0)
    with pytest.raises(ValueError, match="attention_mask shape"):
        ovr_bce(loc, scale, labels, 0.0, attention_mask=torch.ones(3, 2))
    with pytest.raises(ValueError, match=r"threshold .*\(5,\).*\(4,\)"):
        ovr_bce(loc, scale, labels, torch.zeros(4))
    with pytest.raises(ValueError, match="threshold"):
        ovr_bce(loc, scale, labels, torch.zeros(1, 5))
    with pytest.raises(ValueError, match=r"labels .*\[0, 5\).*found 5"):
        ovr_bce(loc, scale, torch.full((2, 3), 5), 0.0)
    with pytest.raises(ValueError, match="found -1"):
        ovr_bce(loc, scale, torch.full((2, 3), -1), 0.0)
    with pytest.raises(ValueError, match="integer"):
        ovr_bce(loc, scale, labels.float(), 0.0)
    bad = scale.clone()
    bad[1, 2, 0] = 0.0
    with pytest.raises(ValueError, match="scale_S"):
        ovr_bce(loc, bad, labels, 0.0, validate_args=True)
    ovr_bce(loc, bad, labels, 0.0, validate_args=False)  # no check when switched off
    nan_loc = loc.clone()
    nan_loc[0, 0, 1] = float("nan")
    with pytest.raises(ValueError, match="loc_S"):
        ovr_bce(nan_loc, scale, labels, 0.0, validate_args=True)
    # a bad value at an ignored position is not inspected
    ok_labels = labels.clone()
    ok_labels[1, 2] = -100
    assert torch.isfinite(ovr_bce(loc, bad, ok_labels, 0.0, validate_args=True).mean)


def test_ovr_bce_threshold_forms_agree():
    gen = torch.Generator().manual_seed(7)
    loc, scale, labels = _random_case(gen, (6,), 4)
    a = ovr_bce(loc, scale, labels, 0.25).per_position
    b = ovr_bce(loc, scale, labels, torch.tensor(0.25, dtype=torch.float64)).per_position
    c = ovr_bce(loc, scale, labels, torch.full((4,), 0.25, dtype=torch.float64)).per_position
    d = ovr_bce(loc - 0.25, scale, labels, 0.0).per_position
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(a, c)
    torch.testing.assert_close(a, d)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_ovr_bce_half_precision_computes_in_float32(dtype):
    gen = torch.Generator().manual_seed(8)
    loc, scale, labels = _random_case(gen, (3, 2), 9, dtype=torch.float32)
    lo, sc = loc.to(dtype), scale.to(dtype)
    out = ovr_bce(lo, sc, labels, 0.5)
    ref = ovr_bce(lo.float(), sc.float(), labels, 0.5)
    assert out.mean.dtype == torch.float32
    torch.testing.assert_close(out.per_position, ref.per_position)
    # extreme half-precision inputs stay finite
    big = torch.full((1, 9), 6.0e4, dtype=torch.float16)
    tiny = torch.full((1, 9), 6.0e-5, dtype=torch.float16)
    assert torch.isfinite(ovr_bce(big, tiny, torch.tensor([0]), 0.0).mean)


def test_result_types():
    out = ovr_bce(torch.zeros(2, 3), torch.ones(2, 3), torch.tensor([0, 1]), 0.0)
    assert isinstance(out, OvRLoss) and out.count.dtype == torch.long
    mean, per_position, count = out
    assert mean.shape == () and per_position.shape == (2,) and count.shape == ()


# --------------------------------------------------------------------------------------------
# gated regression
# --------------------------------------------------------------------------------------------


def _mp_cauchy_nll(y: float, m: float, s: float) -> float:
    yy, mm, ss = mpmath.mpf(y), mpmath.mpf(m), mpmath.mpf(s)
    return float(mpmath.log(mpmath.pi * ss) + mpmath.log(1 + ((yy - mm) / ss) ** 2))


@pytest.mark.parametrize("alpha", [0.0, 0.3, 1.0])
def test_gated_regression_matches_mpmath_and_gate(alpha):
    gen = torch.Generator().manual_seed(9)
    shape = (3, 4)
    loc = torch.randn(shape, generator=gen, dtype=torch.float64) * 5
    scale = torch.rand(shape, generator=gen, dtype=torch.float64) * 3 + 0.05
    y = torch.randn(shape, generator=gen, dtype=torch.float64) * 10
    mask = torch.rand(shape, generator=gen) < 0.5
    mask[0, 0] = True
    p_num = torch.rand(shape, generator=gen, dtype=torch.float64) * 0.98 + 0.01
    out = gated_regression_loss(loc, scale, y, mask, p_num.log(), alpha=alpha)
    expected = torch.zeros(shape, dtype=torch.float64)
    for idx in zip(*torch.nonzero(mask, as_tuple=True), strict=True):
        i, j = int(idx[0]), int(idx[1])
        gate = alpha + (1 - alpha) * float(p_num[i, j])
        expected[i, j] = gate * _mp_cauchy_nll(float(y[i, j]), float(loc[i, j]), float(scale[i, j]))
    torch.testing.assert_close(out.per_position, expected, rtol=1e-12, atol=1e-14)
    assert int(out.count) == int(mask.sum())
    torch.testing.assert_close(out.mean, expected.sum() / mask.sum(), rtol=1e-12, atol=0)


def test_gated_regression_nll_matches_torch_cauchy_and_extremes():
    loc = torch.tensor([0.0, 1.0, -3.0, 0.0, 0.0], dtype=torch.float32)
    scale = torch.tensor([1.0, 0.5, 2.0, 1e-20, 1.0], dtype=torch.float32)
    y = torch.tensor([0.3, -2.0, 4.0, 1e10, 3e38], dtype=torch.float32)
    mask = torch.ones(5, dtype=torch.bool)
    out = gated_regression_loss(loc, scale, y, mask)  # no log_p_num: ungated
    ref = -torch.distributions.Cauchy(loc[:3].double(), scale[:3].double()).log_prob(y[:3].double())
    torch.testing.assert_close(out.per_position[:3].double(), ref, rtol=1e-6, atol=1e-6)
    # (y - loc)/scale = 1e30 and ~3e38: no overflow, matches mpmath
    for i in (3, 4):
        mp = _mp_cauchy_nll(float(y[i]), float(loc[i]), float(scale[i]))
        assert float(out.per_position[i]) == pytest.approx(mp, rel=1e-6)


def test_gated_regression_gradcheck_float64():
    gen = torch.Generator().manual_seed(10)
    loc = torch.randn(6, generator=gen, dtype=torch.float64)
    scale = torch.rand(6, generator=gen, dtype=torch.float64) + 0.2
    lp = -torch.rand(6, generator=gen, dtype=torch.float64) - 0.1
    y = torch.randn(6, generator=gen, dtype=torch.float64)
    mask = torch.tensor([1, 0, 1, 1, 0, 1])
    args = [t.clone().requires_grad_() for t in (loc, scale, lp)]
    assert torch.autograd.gradcheck(
        lambda a, b, c: gated_regression_loss(a, b, y, mask, c, alpha=0.3).mean, args
    )


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_gated_regression_no_num_targets_is_exactly_zero(alpha):
    loc = torch.randn(2, 3, requires_grad=True)
    scale = (torch.rand(2, 3) + 0.1).requires_grad_()
    lp = (-torch.rand(2, 3)).requires_grad_()
    y = torch.full((2, 3), float("nan"))
    out = gated_regression_loss(loc, scale, y, torch.zeros(2, 3, dtype=torch.bool), lp, alpha=alpha)
    assert out.mean.item() == 0.0 and int(out.count) == 0
    out.mean.backward()
    for t in (loc, scale):
        assert t.grad is not None and (t.grad == 0).all()
    # alpha = 1 does not read P_num at all: no gradient (None) is the same as a zero one
    assert (lp.grad is None and alpha == 1.0) or (lp.grad == 0).all()


def test_gated_regression_nan_targets_at_masked_positions_do_not_leak():
    loc = torch.randn(4, requires_grad=True)
    scale = (torch.rand(4) + 0.1).requires_grad_()
    lp = torch.tensor([-0.1, float("-inf"), -0.5, float("nan")], requires_grad=True)
    y = torch.tensor([1.0, float("nan"), -2.0, float("inf")])
    mask = torch.tensor([True, False, True, False])
    out = gated_regression_loss(loc, scale, y, mask, lp, alpha=0.2)
    assert torch.isfinite(out.mean) and torch.isfinite(out.per_position).all()
    out.mean.backward()
    for t in (loc, scale, lp):
        assert torch.isfinite(t.grad).all()
        assert (t.grad[~mask] == 0).all()
    assert (loc.grad[mask] != 0).all()


def test_gated_regression_rejects_bad_arguments():
    z, o = torch.zeros(3), torch.ones(3)
    m = torch.ones(3, dtype=torch.bool)
    with pytest.raises(ValueError, match="scale_Y shape"):
        gated_regression_loss(z, torch.ones(4), z, m)
    with pytest.raises(ValueError, match="num_mask shape"):
        gated_regression_loss(z, o, z, torch.ones(2, dtype=torch.bool))
    with pytest.raises(ValueError, match="log_p_num shape"):
        gated_regression_loss(z, o, z, m, torch.zeros(2))
    with pytest.raises(ValueError, match="alpha"):
        gated_regression_loss(z, o, z, m, alpha=1.5)
    with pytest.raises(ValueError, match="scale_Y"):
        gated_regression_loss(z, torch.tensor([1.0, -1.0, 1.0]), z, m, validate_args=True)


def _nll_reference(loc, scale, y, mask, gate):
    """Per-position gated Cauchy NLL in float64 from scipy's log-density, by hand."""
    import numpy as np
    from scipy.stats import cauchy

    loc, scale, y = (np.asarray(t.detach(), dtype=np.float64) for t in (loc, scale, y))
    m = np.asarray(mask, dtype=bool)
    per = np.zeros_like(loc)
    per[m] = -np.asarray(gate)[m] * cauchy.logpdf(y[m], loc=loc[m], scale=scale[m])
    return per


def _mad_reference(values, keys, mask, scale, min_count, beta):
    """The context weights by hand: numpy medians per key, the scale for rare keys."""
    import numpy as np

    v, k, s = (np.asarray(t, dtype=np.float64) for t in (values, keys, scale))
    m = np.asarray(mask, dtype=bool)
    d = np.ones_like(v)
    for idx in zip(*np.nonzero(m), strict=True):
        same = m & (k == k[idx])
        mad = np.median(np.abs(v[same] - np.median(v[same])))
        d[idx] = mad if same.sum() >= min_count and mad > 0 else s[idx]
    w = np.ones_like(v)
    w[m] = d[m] ** beta / np.mean(d[m] ** beta)
    return w


def _central_differences(f, base, which, h):
    """``d f / d base[which]`` by central differences, one element at a time (numpy arrays)."""
    import numpy as np

    fd = np.zeros(base[which].shape)
    for idx in np.ndindex(*base[which].shape):
        args = [t.copy() for t in base]
        args[which][idx] += h
        up = f(*args)
        args[which][idx] -= 2 * h
        fd[idx] = (up - f(*args)) / (2 * h)
    return fd


@pytest.mark.parametrize("beta", [0.0, 1.0, 2.0])
@pytest.mark.parametrize("with_context", [False, True])
def test_context_scaled_regression_value_and_gradients_match_references(beta, with_context):
    """The value is scipy's NLL; d/d loc is w times the NLL's (central differences with the
    weights frozen); d/d scale and d/d log_p_num are the plain NLL's."""
    import numpy as np
    from scipy.stats import cauchy

    gen = torch.Generator().manual_seed(22)
    shape = (3, 6)
    loc = torch.randn(shape, generator=gen, dtype=torch.float64)
    scale = torch.exp(torch.randn(shape, generator=gen, dtype=torch.float64))
    y = loc + scale * torch.randn(shape, generator=gen, dtype=torch.float64) * 2
    mask = torch.rand(shape, generator=gen) < 0.7
    keys = torch.randint(0, 3, shape, generator=gen)
    p_num = torch.rand(shape, generator=gen, dtype=torch.float64) * 0.9 + 0.05
    a, b = loc.clone().requires_grad_(), scale.clone().requires_grad_()
    lp = p_num.log().requires_grad_()
    ctx = keys if with_context else None
    out = gated_regression_loss(a, b, y, mask, lp, alpha=0.25, scale_power=beta, context=ctx)
    gate = (0.25 + 0.75 * p_num).numpy()
    per = _nll_reference(loc, scale, y, mask, gate)
    torch.testing.assert_close(out.per_position, torch.from_numpy(per), rtol=1e-12, atol=1e-14)
    out.mean.backward()
    w = _mad_reference(
        y, keys if with_context else torch.arange(18).reshape(shape), mask, scale, 3, beta
    )
    m, yy, n = mask.numpy(), y.numpy(), int(mask.sum())

    def f(lc, sc, lpn):
        g = 0.25 + 0.75 * np.exp(lpn)
        return float(-(g[m] * cauchy.logpdf(yy[m], loc=lc[m], scale=sc[m])).sum() / n)

    h = 1e-6
    base = [loc.numpy(), scale.numpy(), p_num.log().numpy()]
    for which, grad, factor in ((0, a.grad, w), (1, b.grad, 1.0), (2, lp.grad, 1.0)):
        fd = _central_differences(f, base, which, h)
        np.testing.assert_allclose(grad.numpy(), factor * fd, rtol=1e-6, atol=1e-9)


def test_context_weights_match_numpy_medians_and_average_one():
    gen = torch.Generator().manual_seed(24)
    y = torch.randn(40, generator=gen) * torch.tensor([0.01, 1.0, 30.0, 5.0]).repeat(10)
    keys = torch.arange(4).repeat(10)
    keys[-3:] = torch.tensor([7, 8, 8])  # a key seen once and one seen twice: the scale
    mask = torch.rand(40, generator=gen) < 0.8
    scale = torch.rand(40, generator=gen) + 0.1
    for beta in (1.0, 2.0):
        w = context_weights(y, scale, mask, beta, keys, min_context_count=3)
        ref = _mad_reference(y, keys, mask, scale, 3, beta)
        np_w = torch.from_numpy(ref).to(w.dtype)
        torch.testing.assert_close(w, np_w, rtol=2e-5, atol=0)
        assert float(w[mask].mean()) == pytest.approx(1.0, rel=1e-5)
        assert (w[~mask] == 1).all() and not w.requires_grad


def test_context_weights_without_context_are_the_scale_powers():
    scale = torch.tensor([1e-30, 1e-29, 1e-28, 5.0])  # s^2 underflows float32: log space
    mask = torch.tensor([True, True, True, False])
    w = context_weights(torch.zeros(4), scale, mask, 2.0)
    expected = torch.tensor([1.0, 100.0, 10000.0]) / (10101.0 / 3)
    torch.testing.assert_close(w[:3], expected, rtol=1e-5, atol=0)
    assert w[3] == 1.0


@pytest.mark.parametrize(
    "settings",
    [
        {"scale_power": 0.0, "context": torch.zeros(3, 4, dtype=torch.long)},
        {"scale_cutoff": 1e6},  # beyond every residual
        {"scale_cutoff": 1e6, "context": torch.arange(12).reshape(3, 4) % 2},
    ],
)
def test_settings_that_change_nothing_are_the_plain_nll_bit_for_bit(settings):
    gen = torch.Generator().manual_seed(23)
    loc, y = torch.randn(3, 4, generator=gen), torch.randn(3, 4, generator=gen)
    scale = torch.rand(3, 4, generator=gen) + 0.1
    mask = torch.rand(3, 4, generator=gen) < 0.7
    grads = []
    for kw in ({}, settings):
        a, b = loc.clone().requires_grad_(), scale.clone().requires_grad_()
        out = gated_regression_loss(a, b, y, mask, alpha=1.0, **kw)
        out.mean.backward()
        grads.append((out.per_position, a.grad, b.grad))
    for one, other in zip(*grads, strict=True):
        assert torch.equal(one, other)


def test_context_scaled_regression_empty_and_bad_arguments():
    loc = torch.randn(2, 3, requires_grad=True)
    none = torch.zeros(2, 3, dtype=torch.bool)
    out = gated_regression_loss(
        loc,
        torch.ones(2, 3),
        torch.zeros(2, 3),
        none,
        scale_power=2,
        context=torch.zeros(2, 3).long(),
    )
    assert out.mean.item() == 0.0
    out.mean.backward()
    assert (loc.grad == 0).all()
    z, o, m = torch.zeros(3), torch.ones(3), torch.ones(3, dtype=torch.bool)
    for bad in (-1.0, float("nan"), float("inf"), "two"):
        with pytest.raises(ValueError, match="scale_power"):
            gated_regression_loss(z, o, z, m, scale_power=bad)
    with pytest.raises(ValueError, match="context must be an integer"):
        gated_regression_loss(z, o, z, m, scale_power=2, context=torch.zeros(3))
    with pytest.raises(ValueError, match="context shape"):
        gated_regression_loss(z, o, z, m, scale_power=2, context=torch.zeros(4).long())
    with pytest.raises(ValueError, match="min_context_count"):
        gated_regression_loss(z, o, z, m, scale_power=2, min_context_count=1)


# --------------------------------------------------------------------------------------------
# total
# --------------------------------------------------------------------------------------------


def test_causal_lm_loss_combines_parts():
    loc = torch.zeros(2, 3, requires_grad=True)
    cls = ovr_bce(loc, torch.ones(2, 3), torch.tensor([0, 2]), 0.0)
    reg_loc = torch.zeros(2, requires_grad=True)
    reg = gated_regression_loss(reg_loc, torch.ones(2), torch.ones(2), torch.tensor([True, False]))
    out = causal_lm_loss(cls, reg, reg_weight=0.5)
    assert isinstance(out, CausalLMLoss) and isinstance(out.reg, RegLoss)
    expected = 3 * math.log(2) + 0.5 * (math.log(math.pi) + math.log(2))
    assert out.total.item() == pytest.approx(expected, rel=1e-6)
    assert out.cls is cls and out.reg is reg
    out.total.backward()
    assert loc.grad is not None and reg_loc.grad is not None
    with pytest.raises(ValueError, match="cls"):
        causal_lm_loss(reg, reg)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ lenient inputs


def _ovr_inputs(n: int = 3, v: int = 4):
    gen = torch.Generator().manual_seed(0)
    loc = torch.randn(n, v, generator=gen)
    scale = torch.rand(n, v, generator=gen) + 0.5
    labels = torch.randint(0, v, (n,), generator=gen)
    return loc, scale, labels


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("bad", [float("nan"), 0.5, 2.0, -1.0])
def test_attention_mask_must_be_zero_or_one(fused, bad):
    """A NaN (NaN != 0 is true), 0.5 or 2 would silently count as an attended position."""
    loc, scale, labels = _ovr_inputs()
    mask = torch.tensor([1.0, bad, 0.0])

    def call(m):
        if fused:
            return ovr_bce_fused(loc, scale, torch.eye(4), None, 0.0, labels, attention_mask=m)
        return ovr_bce(loc, scale, labels, 0.0, attention_mask=m)

    with pytest.raises(ValueError, match=r"attention_mask must hold only 0 and 1"):
        call(mask)
    # 0/1 in any dtype, and bool, are accepted and agree
    ref = call(torch.tensor([True, True, False]))
    for m in (
        torch.tensor([1, 1, 0]),
        torch.tensor([1.0, 1.0, 0.0]),
        torch.tensor([1, 1, 0.0]).half(),
    ):
        torch.testing.assert_close(call(m).per_position, ref.per_position)
    assert int(ref.count) == 2


def test_num_mask_must_be_zero_or_one():
    loc, scale, y = torch.zeros(3), torch.ones(3), torch.zeros(3)
    for bad in (0.5, float("nan"), 3.0):
        with pytest.raises(ValueError, match=r"num_mask must hold only 0 and 1"):
            gated_regression_loss(loc, scale, y, torch.tensor([1.0, bad, 0.0]))
    out = gated_regression_loss(loc, scale, y, torch.tensor([1.0, 1.0, 0.0]))
    assert int(out.count) == 2
    with_bool = gated_regression_loss(loc, scale, y, torch.tensor([True, True, False]))
    torch.testing.assert_close(out.per_position, with_bool.per_position)


@pytest.mark.parametrize("bad", [float("nan"), -0.5, float("inf"), -float("inf"), "a", None])
def test_causal_lm_loss_refuses_a_bad_reg_weight(bad):
    cls = OvRLoss(torch.tensor(2.0), torch.zeros(3), torch.tensor(3))
    reg = RegLoss(torch.tensor(0.5), torch.zeros(3), torch.tensor(1))
    with pytest.raises(ValueError, match="reg_weight"):
        causal_lm_loss(cls, reg, reg_weight=bad)
    assert causal_lm_loss(cls, reg, reg_weight=0).total.item() == 2.0


def test_zero_classes_and_zero_features_are_clear_errors():
    labels = torch.zeros(3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"loc_S has V = 0 classes"):
        ovr_bce(torch.zeros(3, 0), torch.ones(3, 0), labels, 0.0)
    with pytest.raises(ValueError, match=r"loc_S has V = 0 classes"):
        ovr_bce(torch.zeros(3, 0), torch.ones(3, 0), torch.full((3,), -100), 0.0)
    with pytest.raises(ValueError, match=r"weight has V = 0 classes"):
        ovr_bce_fused(torch.zeros(3, 2), torch.ones(3, 2), torch.zeros(0, 2), None, 0.0, labels)
    with pytest.raises(ValueError, match=r"loc_U has C = 0 features"):
        ovr_bce_fused(torch.zeros(3, 0), torch.ones(3, 0), torch.zeros(4, 0), None, 0.0, labels)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("batch", [(0,), (2, 0), (0, 5)])
def test_empty_batches_give_empty_results_and_zero_gradients(fused, batch):
    """No position at all: per_position has the batch shape, mean 0, count 0, zero gradients."""
    C, V = 3, 4
    loc_U = torch.zeros(*batch, C, requires_grad=True)
    scale_U = torch.ones(*batch, C, requires_grad=True)
    W = torch.randn(V, C, generator=torch.Generator().manual_seed(0)).requires_grad_()
    labels = torch.zeros(batch, dtype=torch.long)
    if fused:
        out = ovr_bce_fused(loc_U, scale_U, W, None, 0.0, labels, chunk_size=10**9)
    else:
        out = ovr_bce(loc_U @ W.T, scale_U @ W.abs().T, labels, 0.0)
    assert out.per_position.shape == batch and int(out.count) == 0 and out.mean.item() == 0.0
    grads = torch.autograd.grad(out.mean, (loc_U, scale_U, W), allow_unused=True)
    for g in grads:
        assert g is None or not bool(g.any())
    for settings in ({}, {"scale_cutoff": 20.0}, {"scale_cutoff": 20.0, "context": labels}):
        reg = gated_regression_loss(
            torch.zeros(batch),
            torch.ones(batch),
            torch.zeros(batch),
            torch.zeros(batch),
            **settings,
        )
        assert reg.per_position.shape == batch and int(reg.count) == 0 and reg.mean.item() == 0.0


# Iglewicz and Hoaglin's outlier bound on |r| / median |r| (a modified z-score above 3.5)
OUTLIER_MEDIANS = 3.5 / 0.6745


@pytest.mark.parametrize("cutoff", [0.5, 3.0, 20.0])
def test_scale_cutoff_keeps_the_value_and_cuts_only_the_far_scale_gradients(cutoff):
    """With ``scale_cutoff=k``: the value is scipy's NLL; d/d loc and d/d log_p_num are the
    NLL's (central differences); d/d scale is 0 where the absolute residual exceeds both k
    scales and 3.5 / 0.6745 times numpy's median absolute residual of the <NUM> positions, and
    the NLL's everywhere else."""
    import numpy as np
    from scipy.stats import cauchy

    gen = torch.Generator().manual_seed(31)
    shape = (4, 5)
    loc = torch.randn(shape, generator=gen, dtype=torch.float64)
    scale = torch.exp(torch.randn(shape, generator=gen, dtype=torch.float64))
    # residuals from 0.01 to 100 (times a scale near 1): some within every cutoff, some beyond
    z = torch.logspace(-2, 2, 20, dtype=torch.float64)[torch.randperm(20, generator=gen)]
    z = z * torch.where(torch.rand(20, generator=gen) < 0.5, -1.0, 1.0)
    y = loc + scale * z.reshape(shape)
    mask = torch.rand(shape, generator=gen) < 0.8
    p_num = torch.rand(shape, generator=gen, dtype=torch.float64) * 0.9 + 0.05
    a, b = loc.clone().requires_grad_(), scale.clone().requires_grad_()
    lp = p_num.log().requires_grad_()
    out = gated_regression_loss(a, b, y, mask, lp, alpha=0.25, scale_cutoff=cutoff)
    gate = (0.25 + 0.75 * p_num).numpy()
    per = _nll_reference(loc, scale, y, mask, gate)
    torch.testing.assert_close(out.per_position, torch.from_numpy(per), rtol=1e-12, atol=1e-14)
    out.mean.backward()
    m, yy, n = mask.numpy(), y.numpy(), int(mask.sum())

    def f(lc, sc, lpn):
        g = 0.25 + 0.75 * np.exp(lpn)
        return float(-(g[m] * cauchy.logpdf(yy[m], loc=lc[m], scale=sc[m])).sum() / n)

    residual = np.abs(yy - loc.numpy())
    by_scale = residual > cutoff * scale.numpy()
    by_median = residual > OUTLIER_MEDIANS * np.median(residual[m])
    far = by_scale & by_median
    # both kinds among the <NUM> positions, and a position that one condition alone would cut
    assert far[m].any() and (~far[m]).any() and (by_scale != by_median)[m].any()
    h = 1e-6
    base = [loc.numpy(), scale.numpy(), p_num.log().numpy()]
    for which, grad, keep in ((0, a.grad, 1.0), (1, b.grad, ~far), (2, lp.grad, 1.0)):
        fd = _central_differences(f, base, which, h)
        np.testing.assert_allclose(grad.numpy(), keep * fd, rtol=1e-6, atol=1e-9)


def test_scale_cutoff_needs_both_the_scale_and_the_residuals():
    """A scale far below every residual (a model at its start) cuts only the gross outlier,
    which is far among the residuals too; a scale wide enough to hold it cuts nothing."""
    y = torch.tensor([1.0, -2.0, 1.5, -1.0, 2.5, 300.0])
    m = torch.ones(6, dtype=torch.bool)
    for start, cut in ((1e-3, [5]), (100.0, [])):
        scale = torch.full((6,), start, requires_grad=True)
        out = gated_regression_loss(torch.zeros(6), scale, y, m, alpha=1.0, scale_cutoff=20.0)
        out.mean.backward()
        assert (scale.grad == 0).nonzero().flatten().tolist() == cut
    # an empty call: no <NUM> position, nothing far, exactly zero
    out = gated_regression_loss(torch.zeros(6), scale, y, ~m, scale_cutoff=20.0)
    assert out.mean.item() == 0.0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_scale_cutoff_on_half_precision_inputs_cuts_what_float32_cuts(dtype):
    """Half-precision inputs are read in float32 inside: the same far position loses its scale
    gradient, and every other gradient stays finite and nonzero."""
    y = torch.tensor([1.0, -2.0, 1.5, -1.0, 2.5, 300.0], dtype=dtype)
    scale = torch.full((6,), 1e-3, dtype=dtype, requires_grad=True)
    m = torch.ones(6, dtype=torch.bool)
    out = gated_regression_loss(
        torch.zeros(6, dtype=dtype), scale, y, m, alpha=1.0, scale_cutoff=20.0
    )
    out.mean.backward()
    assert out.mean.dtype == torch.float32
    assert bool(torch.isfinite(scale.grad).all())
    assert (scale.grad == 0).nonzero().flatten().tolist() == [5]


def test_scale_cutoff_reads_each_context_against_its_own_residuals():
    """With ``context``: 40 among residuals near 1.5 is an outlier (it is not among the call's,
    median 70); in a context of fewer than ``min_context_count`` the call's median stands."""
    y = torch.tensor([1.0, -2.0, 1.5, -1.0, 40.0, 100.0, -200.0, 150.0, -120.0, 180.0])
    key = torch.tensor([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    m = torch.ones(10, dtype=torch.bool)

    def cut(**kw):
        scale = torch.full((10,), 1e-3, requires_grad=True)
        gated_regression_loss(
            torch.zeros(10), scale, y, m, alpha=1.0, scale_cutoff=20.0, **kw
        ).mean.backward()
        return (scale.grad == 0).nonzero().flatten().tolist()

    assert cut() == []
    assert cut(context=key) == [4]
    assert cut(context=key, min_context_count=6) == []


def test_scale_cutoff_finds_an_inflated_target_among_its_context_before_the_residuals_do():
    """Locations far from every target (a model at its start), so no residual stands out among
    its context's residuals. Context 0: 8 among 0.9-1.2 (median 1.05, median deviation 0.1) is
    larger in magnitude by 69 deviations and is cut, with context keys only; 0.05 lies 10
    deviations below and is kept (small values of a field are legitimate in the value space).
    Context 1, a field of one repeated value and one other: no spread, nothing cut."""
    y = torch.tensor([1.0, 1.2, 0.9, 1.1, 8.0, 0.05, 1.0, 1.0, 1.0, 1.0, 2.0])
    key = torch.tensor([0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    m = torch.ones(11, dtype=torch.bool)
    loc = torch.tensor([5.0] * 6 + [-3.0] * 5)

    def cut(start, **kw):
        scale = torch.full((11,), start, requires_grad=True)
        gated_regression_loss(loc, scale, y, m, alpha=1.0, scale_cutoff=20.0, **kw).mean.backward()
        return (scale.grad == 0).nonzero().flatten().tolist()

    assert cut(1e-3) == []
    assert cut(1e-3, context=key) == [4]
    assert cut(1.0, context=key) == []  # within 20 scales: kept
    assert cut(1e-3, context=key, min_context_count=7) == []  # too few of a key: no target test


def test_scale_cutoff_refuses_bad_values_and_works_under_torch_func():
    z, o, m = torch.zeros(3), torch.ones(3), torch.ones(3, dtype=torch.bool)
    for bad in (0.0, -1.0, float("nan"), float("inf"), "two", True):
        with pytest.raises(ValueError, match="scale_cutoff"):
            gated_regression_loss(z, o, z, m, scale_cutoff=bad)
    # residuals 0.5, 40, 1.5 and 3, 0.2, 80, 12 in unit scales: beyond 10 scales and beyond
    # 3.5 / 0.6745 median residuals are 40 (median 1.5) and 80 (median 3); 12 is not
    y = torch.tensor([[0.5, 40.0, -1.5], [3.0, -0.2, 80.0], [3.0, -12.0, 2.5]])

    def cut(scale, target):
        return gated_regression_loss(
            torch.zeros(3), scale, target, m, alpha=1.0, scale_cutoff=10.0
        ).mean

    grads = torch.func.vmap(torch.func.grad(cut), in_dims=(None, 0))(torch.ones(3), y)
    for row, target in zip(grads, y, strict=True):
        s = torch.ones(3, requires_grad=True)
        cut(s, target).backward()
        torch.testing.assert_close(row, s.grad, rtol=1e-6, atol=0)
        r = target.abs()
        far = (r > 10) & (r > OUTLIER_MEDIANS * r.median())
        assert bool((row[far] == 0).all()) and bool((row[~far] != 0).all())
    assert [bool((row == 0).any()) for row in grads] == [True, True, False]


# --------------------------------------------------------------------------------------------
# the context-scaled regression through Action.loss
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 3])
def test_action_loss_keys_contexts_by_the_tokens_before_each_number(k):
    """Action.loss with reg_context_tokens=k equals gated_regression_loss given contexts built
    by hand from the k inputs before each position (the labels at i-1 .. i-k of its row)."""
    from cauchylin import CauchyVector
    from cauchylin.nn import Action
    from cauchylin.value_space import to_value_space

    torch.manual_seed(0)
    C, V, num = 6, 11, 10
    act = Action(C, V, threshold=0.0, value_space="signed_log1p").double()
    # rows of "a b <NUM> c <NUM>" patterns: contexts repeat across rows
    labels = torch.tensor(
        [[1, 2, num, 3, num, 4, num], [1, 2, num, 5, num, 4, num], [1, 2, num, 3, num, 6, num]] * 2
    )
    targets = torch.rand(labels.shape, dtype=torch.float64) * 100
    loc = torch.randn(*labels.shape, C, dtype=torch.float64, requires_grad=True)
    scale = torch.rand(*labels.shape, C, dtype=torch.float64) + 0.05
    U = CauchyVector(loc, scale)
    out = act.loss(
        U, labels, targets, num_token_id=num, alpha=1.0, reg_scale_power=2.0, reg_context_tokens=k
    )
    (g_loc,) = torch.autograd.grad(out.reg.mean, loc)

    names: dict[tuple[int, ...], int] = {}
    hand = torch.zeros(labels.shape, dtype=torch.long)
    for r in range(labels.shape[0]):
        for i in range(labels.shape[1]):
            before = tuple(int(labels[r, i - j]) if i - j >= 0 else -1 for j in range(1, k + 1))
            hand[r, i] = names.setdefault(before, len(names))
    loc2 = loc.detach().clone().requires_grad_()
    Y = act(CauchyVector(loc2, scale), "standard").Y
    mask = labels == num
    t = to_value_space(targets, "signed_log1p")
    ref = gated_regression_loss(
        Y.loc[..., 0], Y.scale[..., 0], t, mask, scale_power=2.0, context=hand
    )
    torch.testing.assert_close(out.reg.mean, ref.mean, rtol=1e-12, atol=0)
    (g_ref,) = torch.autograd.grad(ref.mean, loc2)
    torch.testing.assert_close(g_loc, g_ref, rtol=1e-10, atol=1e-14)
    # the contexts matter: with k >= 1 the weights differ from those of the model's scale alone
    plain = act.loss(U, labels, targets, num_token_id=num, alpha=1.0, reg_scale_power=2.0)
    (g_plain,) = torch.autograd.grad(plain.reg.mean, loc)
    assert not torch.allclose(g_plain, g_loc)


def test_action_loss_refuses_bad_context_settings():
    from cauchylin import CauchyVector
    from cauchylin.nn import Action

    act = Action(4, 6)
    U = CauchyVector(torch.zeros(2, 3, 4), torch.ones(2, 3, 4))
    labels = torch.tensor([[5, 1, 5], [2, 5, 0]])
    for bad in (-1, 4, 1.5, True):
        with pytest.raises(ValueError, match="reg_context_tokens"):
            act.loss(U, labels, torch.ones(2, 3), num_token_id=5, reg_context_tokens=bad)
    with pytest.raises(ValueError, match="scale_power"):
        act.loss(U, labels, torch.ones(2, 3), num_token_id=5, reg_scale_power=-2.0)


# --------------------------------------------------------------------------------------------
# the target's weight: each sequence's last number weighed apart
# --------------------------------------------------------------------------------------------


@hypothesis_settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.lists(st.booleans(), min_size=5, max_size=5), min_size=1, max_size=6),
    weight=st.floats(0.0, 50.0, allow_nan=False),
)
def test_last_number_weights_weigh_the_last_number_of_each_row(rows, weight):
    mask = torch.tensor(rows)
    out = last_number_weights(mask, weight)
    assert out.dtype == torch.float32 and out.shape == mask.shape
    for r, row in enumerate(rows):
        last = max((i for i, m in enumerate(row) if m), default=None)
        for i in range(len(row)):
            assert float(out[r, i]) == pytest.approx(weight if i == last else 1.0, rel=1e-6)


def test_last_number_weights_refuse_bad_arguments():
    for bad in (-1.0, math.nan, math.inf, "2"):
        with pytest.raises(ValueError, match="weight"):
            last_number_weights(torch.ones(2, 3, dtype=torch.bool), bad)
    with pytest.raises(ValueError, match="num_mask"):
        last_number_weights(torch.tensor(True), 2.0)
    with pytest.raises(ValueError, match="num_mask"):
        last_number_weights([[True]], 2.0)  # type: ignore[arg-type]


def test_weighted_regression_matches_mpmath_and_passes_no_gradient_to_the_weights():
    """``sum_i w_i gate_i NLL_i / sum_i m_i`` against mpmath, position by position; the
    gradient of ``loc`` is ``w_i`` times the unweighted one; NaN weights off the mask do not
    leak."""
    gen = torch.Generator().manual_seed(12)
    shape = (3, 5)
    loc = torch.randn(shape, generator=gen, dtype=torch.float64, requires_grad=True)
    scale = torch.rand(shape, generator=gen, dtype=torch.float64) + 0.1
    y = torch.randn(shape, generator=gen, dtype=torch.float64) * 4
    mask = torch.rand(shape, generator=gen) < 0.6
    mask[:, -1] = True
    w = torch.rand(shape, generator=gen, dtype=torch.float64) * 3
    w_given = torch.where(mask, w, torch.full_like(w, math.nan)).requires_grad_()
    out = gated_regression_loss(loc, scale, y, mask, alpha=1.0, weights=w_given)
    expected = torch.zeros(shape, dtype=torch.float64)
    for i, j in zip(*torch.nonzero(mask, as_tuple=True), strict=True):
        nll = _mp_cauchy_nll(float(y[i, j]), float(loc.detach()[i, j]), float(scale[i, j]))
        expected[i, j] = float(w[i, j]) * nll
    torch.testing.assert_close(out.per_position, expected, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(out.mean, expected.sum() / mask.sum(), rtol=1e-12, atol=0)
    (g,) = torch.autograd.grad(out.mean, loc)
    plain = gated_regression_loss(loc, scale, y, mask, alpha=1.0)
    (g_plain,) = torch.autograd.grad(plain.mean, loc)
    torch.testing.assert_close(g, torch.where(mask, w, 0.0) * g_plain, rtol=1e-12, atol=1e-15)
    assert w_given.grad is None and torch.isfinite(g).all()


def test_weighted_regression_refuses_bad_weights():
    loc, scale, y = torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(2, 3)
    mask = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="weights shape"):
        gated_regression_loss(loc, scale, y, mask, weights=torch.ones(3))
    with pytest.raises(ValueError, match="weights"):
        gated_regression_loss(loc, scale, y, mask, weights=torch.ones(2, 3, dtype=torch.long))
    for bad in (-1.0, math.nan, math.inf):
        w = torch.ones(2, 3)
        w[1, 2] = bad
        with pytest.raises(ValueError, match="weights"):
            gated_regression_loss(loc, scale, y, mask, weights=w, validate_args=True)


def test_action_loss_weighs_each_rows_last_number():
    """Action.loss with reg_target_weight=w equals gated_regression_loss given by hand the
    weight w at each row's last <NUM> label (rows of different lengths, one without a number)."""
    from cauchylin import CauchyVector
    from cauchylin.nn import Action
    from cauchylin.value_space import to_value_space

    torch.manual_seed(1)
    C, V, num = 6, 11, 10
    act = Action(C, V, threshold=0.0, value_space="signed_log1p").double()
    labels = torch.tensor(
        [[1, num, 2, num, 3, num], [1, num, 2, num, -100, -100], [1, 2, 3, 4, 5, 6]]
    )
    targets = torch.rand(labels.shape, dtype=torch.float64) * 100
    loc = torch.randn(*labels.shape, C, dtype=torch.float64, requires_grad=True)
    scale = torch.rand(*labels.shape, C, dtype=torch.float64) + 0.05
    U = CauchyVector(loc, scale)
    out = act.loss(U, labels, targets, num_token_id=num, alpha=1.0, reg_target_weight=4.0)
    Y = act(CauchyVector(loc.detach(), scale), "standard").Y
    mask = labels == num
    hand = torch.ones(labels.shape, dtype=torch.float64)
    hand[0, 5] = hand[1, 3] = 4.0  # the last <NUM> label of each row
    t = to_value_space(targets, "signed_log1p")
    ref = gated_regression_loss(Y.loc[..., 0], Y.scale[..., 0], t, mask, weights=hand)
    torch.testing.assert_close(out.reg.mean, ref.mean, rtol=1e-12, atol=0)
    plain = act.loss(U, labels, targets, num_token_id=num, alpha=1.0)
    assert not torch.allclose(out.reg.mean, plain.reg.mean)
    with pytest.raises(ValueError, match="reg_target_weight"):
        act.loss(U, labels, targets, num_token_id=num, reg_target_weight=-1.0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_weighted_regression_on_half_precision_inputs_computes_in_float32(dtype):
    """Half-precision locations, scales and targets with float32 weights: the float32 loss of
    the same (rounded) values, not one rounded to the half type."""
    gen = torch.Generator().manual_seed(13)
    loc = (torch.randn(4, 6, generator=gen) * 3).to(dtype)
    scale = (torch.rand(4, 6, generator=gen) + 0.1).to(dtype)
    y = (torch.randn(4, 6, generator=gen) * 5).to(dtype)
    mask = torch.rand(4, 6, generator=gen) < 0.7
    w = last_number_weights(mask, 4.0)
    out = gated_regression_loss(loc, scale, y, mask, weights=w)
    ref = gated_regression_loss(loc.float(), scale.float(), y.float(), mask, weights=w)
    assert out.mean.dtype == torch.float32
    torch.testing.assert_close(out.per_position, ref.per_position, rtol=0, atol=0)
    torch.testing.assert_close(out.mean, ref.mean, rtol=0, atol=0)
