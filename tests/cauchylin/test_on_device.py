"""The numerics, the losses and the layers on every device: the CPU always, CUDA where present.

Each case runs on ``device`` (``tests.devices.DEVICES``: the CUDA case carries the ``cuda``
marker that ``scripts/gpu_check.sh`` selects, and is skipped without a GPU) in float32 and with
bfloat16 inputs, and is checked against an independent float64 reference: scipy's Cauchy law for
the kernels and the losses, and the float64 CPU evaluation for the layers (whose maps are
matrix products; the layers' formulas are checked against references in their own tests). On
the GPU the kernels take their general (non-CPU) paths, so these are the tests of those paths.

Tolerances: every kernel is exact to a few float32 ulp of its result (the module docstring of
``cauchylin._special``), so the kernels are compared at ``rtol = 64 eps(float32)`` with the
inputs as rounded to the tested dtype given to scipy too; sums over ``V`` terms (the losses) and
matrix products over ``C`` terms at ``64 eps * terms``.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from scipy import stats as sps

from cauchylin import _special as S
from cauchylin.losses import gated_regression_loss, ovr_bce, ovr_bce_fused
from cauchylin.nn import Abduction, Action, NumericEmbedding
from tests.devices import DEVICES

EPS = torch.finfo(torch.float32).eps
DTYPES = [torch.float32, torch.bfloat16]
DTYPE_IDS = ["f32", "bf16"]


def _inputs(dtype, device, n=64, seed=0):
    """Displacements from 0 to 1e30 (both signs) and scales from 1e-3 to 1e3."""
    g = torch.Generator().manual_seed(seed)
    mag = torch.pow(10.0, torch.empty(n).uniform_(-3, 30, generator=g))
    d = mag * torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
    s = torch.pow(10.0, torch.empty(n).uniform_(-3, 3, generator=g))
    d, s = d.to(dtype), s.to(dtype)
    return d.to(device), s.to(device), d.double().numpy(), s.double().numpy()


def _check(got: torch.Tensor, want: np.ndarray, atol: float = 0.0) -> None:
    got64 = got.detach().double().cpu().numpy()
    np.testing.assert_allclose(got64, want, rtol=64 * EPS, atol=atol)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("device", DEVICES)
def test_kernels_match_scipy(device, dtype):
    d, s, dn, sn = _inputs(dtype, device)
    law = sps.cauchy(loc=0.0, scale=sn)
    _check(S.log_pdf(d, s), law.logpdf(dn))
    _check(S.cdf(d, s), law.cdf(dn), atol=1e-300)
    _check(S.sf(d, s), law.sf(dn), atol=1e-300)
    lc, ls = S.log_cdf_sf(d, s)
    # scipy's log cdf is log(cdf): 0 where cdf rounds to 1 (the true value is -t, below 1e-30)
    _check(lc, law.logcdf(dn), atol=1e-30)
    _check(ls, law.logsf(dn), atol=1e-30)
    q = torch.linspace(0.001, 0.999, 64, dtype=torch.float64).to(dtype)
    _check(
        S.icdf(q.to(device), torch.zeros((), dtype=dtype, device=device), s),
        law.ppf(q.double().numpy()),
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("device", DEVICES)
def test_kl_and_gradients_match_their_references(device, dtype):
    d, s, dn, sn = _inputs(dtype, device, seed=1)
    m2 = (d / 3).to(dtype)
    g2 = (s * 2).to(dtype)
    kl = S.cauchy_kl(d, s, m2, g2)
    m2n, g2n = m2.double().cpu().numpy(), g2.double().cpu().numpy()
    # the definition, in float64: log(((g1 + g2)^2 + (m1 - m2)^2) / (4 g1 g2)), by logs
    want = (
        np.logaddexp(2 * np.log(sn + g2n), 2 * np.log(np.abs(dn - m2n) + 1e-300))
        - np.log(4.0)
        - np.log(sn)
        - np.log(g2n)
    )
    _check(kl, want, atol=1e-6)
    # gradients of log_pdf on the device against the closed form -2 d / (s^2 + d^2) and
    # (d^2 - s^2) / (s (s^2 + d^2)), by ratios in float64 (no overflow)
    dd = d.float().clone().requires_grad_()
    ss = s.float().clone().requires_grad_()
    S.log_pdf(dd, ss).sum().backward()
    h = np.hypot(dn, sn)
    u, v = dn / h, sn / h
    _check(dd.grad, -2 * u / h)
    _check(ss.grad, (u - v) * (u + v) / sn)


def _ovr_reference(loc, scale, labels, thr):
    """-sum_k log(1 - P_k) + log(1 - P_y) - log P_y with P = P(S > thr), scipy in float64."""
    log_p = sps.cauchy.logsf(thr, loc=loc, scale=scale)
    log_q = sps.cauchy.logcdf(thr, loc=loc, scale=scale)
    rows = np.arange(len(labels))
    return -log_q.sum(-1) + log_q[rows, labels] - log_p[rows, labels]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("device", DEVICES)
def test_losses_match_scipy(device, dtype):
    g = torch.Generator().manual_seed(3)
    n, c, v = 12, 8, 40
    loc_u = (torch.randn(n, c, generator=g) * 2).to(dtype)
    scale_u = (torch.rand(n, c, generator=g) + 0.3).to(dtype)
    w = (torch.randn(v, c, generator=g) / math.sqrt(c)).to(dtype)
    b = (torch.randn(v, generator=g) * 0.1).to(dtype)
    labels = torch.randint(0, v, (n,), generator=g)
    labels[3] = -100
    counted = (labels != -100).numpy()
    # the scores in float64 from the rounded inputs (the reference of both OvR paths)
    loc_s = loc_u.double().numpy() @ w.double().numpy().T + b.double().numpy()
    scale_s = scale_u.double().numpy() @ np.abs(w.double().numpy()).T
    want = _ovr_reference(loc_s[counted], scale_s[counted], labels.numpy()[counted], 0.25)
    terms = v * c
    on = {k: t.to(device) for k, t in dict(loc_u=loc_u, scale_u=scale_u, w=w, b=b).items()}
    lab = labels.to(device)
    plain = ovr_bce(
        torch.as_tensor(loc_s, device=device).to(dtype),
        torch.as_tensor(scale_s, device=device).to(dtype),
        lab,
        0.25,
    )
    fused = ovr_bce_fused(on["loc_u"], on["scale_u"], on["w"], on["b"], 0.25, lab)
    # the plain loss receives the scores rounded to dtype; compare it at that dtype's rounding
    rounded = _ovr_reference(
        torch.as_tensor(loc_s).to(dtype).double().numpy()[counted],
        torch.as_tensor(scale_s).to(dtype).double().numpy()[counted],
        labels.numpy()[counted],
        0.25,
    )
    rows_plain = plain.per_position.detach().double().cpu().numpy()[counted]
    rows_fused = fused.per_position.detach().double().cpu().numpy()[counted]
    np.testing.assert_allclose(rows_plain, rounded, rtol=64 * EPS * v)
    np.testing.assert_allclose(rows_fused, want, rtol=64 * EPS * terms)
    # the gated regression: gate * (log(pi s) + log1p(((y - loc)/s)^2)), mean over <NUM> targets
    loc_y, s_y = loc_u[:, 0].float(), scale_u[:, 1].float()
    y = torch.randn(n, generator=g)
    num = torch.arange(n) % 3 == 0
    log_p_num = -torch.rand(n, generator=g)
    reg = gated_regression_loss(
        loc_y.to(device),
        s_y.to(device),
        y.to(device),
        num.to(device),
        log_p_num.to(device),
        alpha=0.2,
    )
    ln, sn, yn = loc_y.double().numpy(), s_y.double().numpy(), y.double().numpy()
    nll = np.log(np.pi * sn) + np.log1p(((yn - ln) / sn) ** 2)
    gate = 0.2 + 0.8 * np.exp(log_p_num.double().numpy())
    m = num.numpy()
    np.testing.assert_allclose(float(reg.mean), (gate * nll)[m].sum() / m.sum(), rtol=64 * EPS * n)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("device", DEVICES)
def test_layers_on_the_device_match_float64_on_the_cpu(device, dtype):
    torch.manual_seed(0)
    h, c, v = 16, 8, 50
    layers = torch.nn.ModuleList(
        [NumericEmbedding(h), Abduction(h, c, gamma_init=1.0), Action(c, v, threshold=0.1)]
    )
    with torch.no_grad():
        for p in layers.parameters():
            p.add_(0.05 * torch.randn_like(p))
    ref = [m.double() for m in copy.deepcopy(layers)]
    here = [m.to(device=device, dtype=dtype) for m in layers]
    g = torch.Generator().manual_seed(1)
    z = torch.randn(2, 5, h, generator=g).to(dtype)
    values = torch.randn(2, 5, generator=g) * 100
    labels = torch.randint(0, v, (2, 5), generator=g)

    def run(mods, z, values, labels):
        emb, abd, act = mods
        U = abd(emb(z, values))
        out = act(U, "standard")
        loss = act.loss(U, labels, values, num_token_id=v - 1)
        return out.loc_S, out.scale_S, out.loc_Y, loss.total

    got = run(here, z.to(device), values.to(device), labels.to(device))
    want = run(ref, z.double(), values.double(), labels)
    # (bfloat16 layers round their parameters, inputs and outputs: one rounding each way)
    rtol = 64 * EPS * c * h + (3 * torch.finfo(dtype).eps if dtype != torch.float32 else 0.0)
    for a, b in zip(got, want, strict=True):
        scale = float(b.detach().abs().max())
        np.testing.assert_allclose(
            a.detach().double().cpu().numpy(), b.detach().numpy(), rtol=rtol, atol=rtol * scale
        )
