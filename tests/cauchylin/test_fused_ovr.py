"""The memory-efficient OvR path equals the plain one (loss and every gradient) without [N, V]."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from cauchylin.losses import ovr_bce, ovr_bce_fused
from tests.devices import DEVICES


def _inputs(N, C, V, dtype, device="cpu", seed=0, per_class=False, with_bias=True):
    gen = torch.Generator().manual_seed(seed)

    def leaf(t):
        return t.to(device=device, dtype=dtype).requires_grad_()

    inp = {
        "loc_U": leaf(torch.randn(N, C, generator=gen) * 2),
        "s": leaf(torch.rand(N, C, generator=gen) + 0.2),
        "b_noise": leaf(torch.randn(C, generator=gen) * 0.3),
        "W": leaf(torch.randn(V, C, generator=gen)),
        "b": leaf(torch.randn(V, generator=gen)) if with_bias else None,
        "thr": leaf(torch.randn(V, generator=gen) if per_class else torch.tensor(0.3)),
    }
    labels = torch.randint(0, V, (N,), generator=gen)
    # labels on tile edges: first and last class, and a few multiples of common tile sizes
    for i, lab in enumerate([0, V - 1, min(V - 1, 4), min(V - 1, 8), min(V - 1, 16)]):
        if i < N:
            labels[i] = lab
    return inp, labels.to(device)


def _both(inp, labels, chunk, **kw):
    """(fused, plain) losses built from the same leaves; scale = s + |b_noise| (standard mode)."""
    fused = ovr_bce_fused(
        inp["loc_U"],
        inp["s"] + inp["b_noise"].abs(),
        inp["W"],
        inp["b"],
        inp["thr"],
        labels,
        chunk_size=chunk,
        **kw,
    )
    # a separate graph, so that each side can be differentiated on its own
    loc_S = inp["loc_U"] @ inp["W"].T
    if inp["b"] is not None:
        loc_S = loc_S + inp["b"]
    scale_S = (inp["s"] + inp["b_noise"].abs()) @ inp["W"].abs().T
    plain = ovr_bce(loc_S, scale_S, labels, inp["thr"], **kw)
    return fused, plain


def _leaves(inp):
    return [t for t in inp.values() if t is not None]


def _assert_grads_close(a, b, rtol, atol_scale):
    for ga, gb in zip(a, b, strict=True):
        atol = atol_scale * max(float(gb.abs().max()), 1e-30)
        torch.testing.assert_close(ga, gb, rtol=rtol, atol=atol)


CHUNKS = [None, 5, 16, (7, 5), (8, 16), (1, 1), (64, 1000)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("per_class", [False, True])
@pytest.mark.parametrize("chunk", CHUNKS)
def test_fused_equals_plain_float32(device, per_class, chunk):
    N, C, V = 21, 6, 48  # 21 % 7 == 0 but 21 % 8 != 0; 48 % 16 == 0 but 48 % 5 != 0
    inp, labels = _inputs(N, C, V, torch.float32, device, per_class=per_class)
    fused, plain = _both(inp, labels, chunk)
    torch.testing.assert_close(fused.mean, plain.mean, rtol=2e-6, atol=0)
    torch.testing.assert_close(fused.per_position, plain.per_position, rtol=2e-6, atol=1e-5)
    assert int(fused.count) == int(plain.count) == N
    gf = torch.autograd.grad(fused.mean, _leaves(inp))
    gp = torch.autograd.grad(plain.mean, _leaves(inp))
    _assert_grads_close(gf, gp, rtol=1e-5, atol_scale=1e-6)


@pytest.mark.parametrize("per_class", [False, True])
@pytest.mark.parametrize("chunk", [None, 5, (7, 5), (4, 48)])
def test_fused_equals_plain_float64(per_class, chunk):
    inp, labels = _inputs(21, 6, 48, torch.float64, per_class=per_class, seed=1)
    fused, plain = _both(inp, labels, chunk)
    torch.testing.assert_close(fused.per_position, plain.per_position, rtol=1e-12, atol=1e-12)
    gf = torch.autograd.grad(fused.mean, _leaves(inp))
    gp = torch.autograd.grad(plain.mean, _leaves(inp))
    _assert_grads_close(gf, gp, rtol=1e-11, atol_scale=1e-13)


@given(
    n=st.integers(1, 12),
    c=st.integers(1, 5),
    v=st.integers(1, 40),
    rc=st.integers(1, 15),
    vc=st.integers(1, 50),
    per_class=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_fused_equals_plain_any_shape_and_tiling(n, c, v, rc, vc, per_class, seed):
    inp, labels = _inputs(n, c, v, torch.float64, seed=seed, per_class=per_class)
    labels[torch.rand(n, generator=torch.Generator().manual_seed(seed)) < 0.25] = -100
    fused, plain = _both(inp, labels, (rc, vc))
    assert int(fused.count) == int(plain.count)
    torch.testing.assert_close(fused.per_position, plain.per_position, rtol=1e-12, atol=1e-12)
    gf = torch.autograd.grad(fused.mean, _leaves(inp), allow_unused=True)
    gp = torch.autograd.grad(plain.mean, _leaves(inp), allow_unused=True)
    for a, b in zip(gf, gp, strict=True):
        if a is None or b is None:  # nothing counted: no gradient on one side, zero on the other
            assert int(plain.count) == 0 and (a is None or (a == 0).all())
            continue
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12 * max(float(b.abs().max()), 1.0))


def test_fused_per_position_backward_recomputes_exactly():
    """d(sum_i w_i L_i) takes the recomputing backward; mixing it with the mean works too."""
    inp, labels = _inputs(13, 5, 30, torch.float64, per_class=True, seed=2)
    w = torch.randn(13, dtype=torch.float64)
    fused, plain = _both(inp, labels, (4, 7))
    gf = torch.autograd.grad((fused.per_position * w).sum() + 2.5 * fused.mean, _leaves(inp))
    gp = torch.autograd.grad((plain.per_position * w).sum() + 2.5 * plain.mean, _leaves(inp))
    _assert_grads_close(gf, gp, rtol=1e-11, atol_scale=1e-13)


def test_fused_second_backward_and_scaled_mean():
    inp, labels = _inputs(9, 4, 20, torch.float64, seed=3)
    fused, plain = _both(inp, labels, (4, 6))
    loss_f, loss_p = 3.0 * fused.mean, 3.0 * plain.mean
    g1 = torch.autograd.grad(loss_f, _leaves(inp), retain_graph=True)
    g2 = torch.autograd.grad(loss_f, _leaves(inp))  # eager grads consumed: recomputed
    gp = torch.autograd.grad(loss_p, _leaves(inp))
    _assert_grads_close(g1, gp, rtol=1e-11, atol_scale=1e-13)
    _assert_grads_close(g2, gp, rtol=1e-11, atol_scale=1e-13)


def test_fused_gradcheck_float64():
    """Finite differences against the hand-written backward, for both outputs."""
    gen = torch.Generator().manual_seed(4)
    N, C, V = 5, 3, 9
    x = torch.randn(N, C, generator=gen, dtype=torch.float64)
    s = torch.rand(N, C, generator=gen, dtype=torch.float64) + 0.3
    W = torch.randn(V, C, generator=gen, dtype=torch.float64)
    b = torch.randn(V, generator=gen, dtype=torch.float64)
    thr = torch.randn(V, generator=gen, dtype=torch.float64)
    labels = torch.tensor([0, 8, 3, 3, 5])
    args = [t.clone().requires_grad_() for t in (x, s, W, b, thr)]

    def f(x, s, W, b, thr):
        out = ovr_bce_fused(x, s, W, b, thr, labels, chunk_size=(2, 4))
        return out.mean, out.per_position

    assert torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-7)


def test_fused_eager_and_deferred_agree():
    inp, labels = _inputs(11, 4, 25, torch.float32, seed=5, per_class=True)

    def run(eager):
        scale = inp["s"] + inp["b_noise"].abs()
        args = (inp["loc_U"], scale, inp["W"], inp["b"], inp["thr"], labels)
        return ovr_bce_fused(*args, chunk_size=(4, 6), eager_grad=eager)

    a, b = run(True), run(False)
    ga = torch.autograd.grad(a.mean, _leaves(inp))
    gb = torch.autograd.grad(b.mean, _leaves(inp))
    for x, y in zip(ga, gb, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-6, atol=1e-7)


def test_fused_no_bias_python_threshold_and_no_grad():
    inp, labels = _inputs(10, 4, 17, torch.float32, seed=6, with_bias=False)
    inp["thr"] = -0.4
    fused, plain = _both(inp, labels, (3, 4))
    torch.testing.assert_close(fused.per_position, plain.per_position, rtol=2e-6, atol=1e-5)
    with torch.no_grad():
        out = ovr_bce_fused(inp["loc_U"], inp["s"], inp["W"], None, -0.4, labels)
    assert not out.mean.requires_grad


def test_fused_no_gradient_work_under_no_grad():
    inp, labels = _inputs(4, 64, 256, torch.float32, seed=11)
    probe = _LargestTensor()
    with torch.no_grad(), probe:
        ovr_bce_fused(inp["loc_U"], inp["s"], inp["W"], inp["b"], 0.0, labels, chunk_size=(4, 16))
    # parameters require grad, but under no_grad nothing of the weight's size is created
    assert probe.largest < inp["W"].numel()
    probe = _LargestTensor()
    with probe:
        ovr_bce_fused(inp["loc_U"], inp["s"], inp["W"], inp["b"], 0.0, labels, chunk_size=(4, 16))
    assert probe.largest >= inp["W"].numel()  # the eager weight gradient (the probe works)


def test_fused_batch_shape_mask_and_ignore():
    gen = torch.Generator().manual_seed(7)
    B, S, C, V = 2, 5, 4, 19
    loc_U = torch.randn(B, S, C, generator=gen, requires_grad=True)
    scale_U = (torch.rand(B, S, C, generator=gen) + 0.5).requires_grad_()
    W = torch.randn(V, C, generator=gen, requires_grad=True)
    labels = torch.randint(0, V, (B, S), generator=gen)
    labels[0, 0] = -100
    mask = torch.ones(B, S, dtype=torch.long)
    mask[1, 4] = 0
    f = ovr_bce_fused(loc_U, scale_U, W, None, 0.0, labels, attention_mask=mask, chunk_size=(3, 4))
    p = ovr_bce(loc_U @ W.T, scale_U @ W.abs().T, labels, 0.0, attention_mask=mask)
    assert int(f.count) == int(p.count) == 8
    torch.testing.assert_close(f.per_position, p.per_position, rtol=2e-6, atol=1e-5)
    gf = torch.autograd.grad(f.mean, (loc_U, scale_U, W))
    gp = torch.autograd.grad(p.mean, (loc_U, scale_U, W))
    _assert_grads_close(gf, gp, rtol=1e-5, atol_scale=1e-6)
    assert (gf[0][0, 0] == 0).all() and (gf[0][1, 4] == 0).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_half_precision_computes_in_float32(dtype):
    """Half inputs: the fused path equals the plain path run in float32 on the same values."""
    inp, labels = _inputs(12, 8, 40, dtype, seed=8, per_class=True)
    fused = ovr_bce_fused(
        inp["loc_U"],
        inp["s"] + inp["b_noise"].abs(),
        inp["W"],
        inp["b"],
        inp["thr"],
        labels,
        chunk_size=(5, 16),
    )
    assert fused.mean.dtype == torch.float32
    gf = torch.autograd.grad(fused.mean, _leaves(inp))
    f = {k: v.float() for k, v in inp.items()}  # differentiable casts of the same half leaves
    plain = ovr_bce(
        f["loc_U"] @ f["W"].T + f["b"],
        (inp["s"] + inp["b_noise"].abs()).float() @ f["W"].abs().T,
        labels,
        f["thr"],
    )
    torch.testing.assert_close(fused.per_position, plain.per_position, rtol=2e-6, atol=1e-5)
    gp = torch.autograd.grad(plain.mean, _leaves(inp))
    for a, b, leaf in zip(gf, gp, _leaves(inp), strict=True):
        assert a.dtype == leaf.dtype and torch.isfinite(a.float()).all()
        # the float32 gradients agree; what is left is the final rounding to the half dtype
        torch.testing.assert_close(a, b.to(dtype))


def _summand_sizes(x, s, w, labels, threshold):
    """Per-entry sums of |chain-rule terms| of the gradients of the plain loss, in float64.

    With ``g = dL/dloc_S`` and ``h = dL/dscale_S`` (``loc_S = x W^T``, ``scale_S = s |W|^T``):
    ``dL/dx = g W``, ``dL/ds = h |W|`` and ``dL/dW = g^T x + sign(W) (h^T s)``. A float32 result
    can differ from the exact one by a few ulp of the *summands* (the BLAS may sum them in any
    order, with or without FMA), so the tolerance of an entry is proportional to
    ``|g| |W|``, ``|h| |W|`` and ``|g|^T |x| + |h|^T |s|``, not to the entry itself.
    """
    x, s, w = (t.detach().double() for t in (x, s, w))
    loc_S = (x @ w.T).requires_grad_()
    scale_S = (s @ w.abs().T).requires_grad_()
    g, h = torch.autograd.grad(ovr_bce(loc_S, scale_S, labels, threshold).mean, (loc_S, scale_S))
    g, h = g.abs(), h.abs()
    return g @ w.abs(), h @ w.abs(), g.T @ x.abs() + h.T @ s.abs()


@pytest.mark.parametrize("z", [-1e30, -1e10, 0.0, 1e10, 1e30])
def test_fused_extreme_z_float32(z):
    """One feature, W = 1: z_ik = loc_U_i exactly; values and gradients match a float64 reference.

    At ``|z| = 1e10`` the weight gradient ``g x - g z s`` is a difference of two O(1) terms whose
    exact value is 0 (``z`` does not depend on a positive ``W``); MKL's AVX2/AVX-512 kernels
    return ~3e-8 there and the SSE kernels 0, both within a few ulp of the summands.
    """
    V = 6
    loc_U = torch.tensor([[z], [0.5], [z]], requires_grad=True)
    scale_U = torch.ones(3, 1, requires_grad=True)
    W = torch.ones(V, 1, requires_grad=True)
    labels = torch.tensor([0, 3, 5])
    f = ovr_bce_fused(loc_U, scale_U, W, None, 0.0, labels, chunk_size=(2, 4))
    p = ovr_bce(loc_U @ W.T, scale_U @ W.abs().T, labels, 0.0)
    assert torch.isfinite(f.per_position).all()
    torch.testing.assert_close(f.per_position, p.per_position, rtol=2e-6, atol=1e-6)
    leaves = (loc_U, scale_U, W)
    ref = torch.autograd.grad(
        ovr_bce(
            loc_U.double() @ W.double().T, scale_U.double() @ W.double().abs().T, labels, 0.0
        ).mean,
        leaves,
    )
    sizes = _summand_sizes(loc_U, scale_U, W, labels, 0.0)
    for side in (f, p):
        grads = torch.autograd.grad(side.mean, leaves)
        for a, b, size in zip(grads, ref, sizes, strict=True):
            assert torch.isfinite(a).all()
            # 64 float32 ulp of the summands: far below any size a sign error would have
            tol = 64 * torch.finfo(torch.float32).eps * size + 1e-37
            assert ((a.double() - b).abs() <= tol).all(), (a, b, tol)
            # where the exact gradient is clearly non-zero, its sign is right
            clear = b.abs() > tol
            assert (torch.sign(a.double())[clear] == torch.sign(b)[clear]).all()


class _LargestTensor(TorchDispatchMode):
    """Records the largest number of elements of any new tensor an aten op returns.

    Outputs that alias an input (views, ``detach``, ``out=`` results) are not new memory and are
    skipped.
    """

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = torch.utils._pytree.tree_leaves((args, kwargs))
        seen = {t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor)}
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in seen:
                self.largest = max(self.largest, t.numel())
        return out


def test_fused_never_holds_an_N_by_V_tensor():
    N, C, V = 64, 4, 2048  # N * V = 131072; W is only V * C = 8192
    inp, labels = _inputs(N, C, V, torch.float32, seed=9, per_class=True)
    scale_U = inp["s"] + inp["b_noise"].abs()
    probe = _LargestTensor()
    with probe:
        out = ovr_bce_fused(
            inp["loc_U"], scale_U, inp["W"], inp["b"], inp["thr"], labels, chunk_size=(16, 128)
        )
        (out.per_position.sum() + out.mean).backward()  # both backward paths
    assert probe.largest <= 5 * 16 * 128 < N * V // 4  # the five tile buffers
    # the plain path does materialise it (the probe works)
    probe = _LargestTensor()
    with probe:
        ovr_bce(inp["loc_U"] @ inp["W"].T, scale_U @ inp["W"].abs().T, labels, inp["thr"])
    assert probe.largest >= N * V


def test_fused_rejects_bad_arguments():
    x, s = torch.zeros(2, 3, 4), torch.ones(2, 3, 4)
    W, b = torch.ones(10, 4), torch.zeros(10)
    lab = torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="scale_U shape"):
        ovr_bce_fused(x, torch.ones(2, 3, 5), W, b, 0.0, lab)
    with pytest.raises(ValueError, match=r"weight .*C = 4.*\(10, 3\)"):
        ovr_bce_fused(x, s, torch.ones(10, 3), b, 0.0, lab)
    with pytest.raises(ValueError, match=r"bias .*\(10,\).*\(9,\)"):
        ovr_bce_fused(x, s, W, torch.zeros(9), 0.0, lab)
    with pytest.raises(ValueError, match="threshold"):
        ovr_bce_fused(x, s, W, b, torch.zeros(3), lab)
    with pytest.raises(ValueError, match="labels shape"):
        ovr_bce_fused(x, s, W, b, 0.0, torch.zeros(3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="found 10"):
        ovr_bce_fused(x, s, W, b, 0.0, torch.full((2, 3), 10))
    with pytest.raises(ValueError, match="chunk_size"):
        ovr_bce_fused(x, s, W, b, 0.0, lab, chunk_size=0)
    with pytest.raises(ValueError, match="chunk_size"):
        ovr_bce_fused(x, s, W, b, 0.0, lab, chunk_size=(2, 0))
    bad = s.clone()
    bad[0, 1, 2] = -1.0
    with pytest.raises(ValueError, match="scale_U"):
        ovr_bce_fused(x, bad, W, b, 0.0, lab, validate_args=True)
    W_nan = W.clone()
    W_nan[3, 1] = float("nan")
    with pytest.raises(ValueError, match="weight"):
        ovr_bce_fused(x, s, W_nan, b, 0.0, lab, validate_args=True)


def test_fused_refuses_an_all_zero_weight_row_like_the_plain_path():
    """A zero head row makes scale_S = 0 for its class: both paths raise instead of a silent NaN."""
    gen = torch.Generator().manual_seed(3)
    weight = torch.randn(6, 8, generator=gen)
    weight[2] = 0.0
    loc_U = torch.randn(4, 8, generator=gen)
    scale_U = torch.rand(4, 8, generator=gen) + 0.1
    labels = torch.tensor([0, 1, 3, 4])
    with pytest.raises(ValueError, match="scale_S"):
        ovr_bce(loc_U @ weight.T, scale_U @ weight.abs().T, labels, 100.0)
    with pytest.raises(ValueError, match=r"all-zero row.*\[2\]"):
        ovr_bce_fused(loc_U, scale_U, weight, torch.zeros(6), 100.0, labels)


class _RefuseLargeAllocations(TorchDispatchMode):
    """Fails *before* any factory op allocates more than ``limit`` elements (no real 80 GB)."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.ops.aten.empty.memory_format, torch.ops.aten.empty_strided.default):
            numel = 1
            for n in args[0]:
                numel *= int(n)
            self.largest = max(self.largest, numel)
            assert numel <= self.limit, f"{func} of {numel} elements (limit {self.limit})"
        return func(*args, **kwargs)


@pytest.mark.parametrize("chunk", [10**9, (10**9, 10**9), (10**6, 3)])
def test_fused_tiles_are_clamped_to_the_data(chunk):
    """chunk_size=10**9 used to allocate 5 tile buffers of 1024 x 10**9 floats (80 GB)."""
    N, C, V = 6, 3, 11
    inp, labels = _inputs(N, C, V, torch.float32, seed=12)
    scale_U = inp["s"] + inp["b_noise"].abs()
    guard = _RefuseLargeAllocations(limit=5 * N * V)
    with guard:
        fused = ovr_bce_fused(
            inp["loc_U"], scale_U, inp["W"], inp["b"], inp["thr"], labels, chunk_size=chunk
        )
        g = torch.autograd.grad(fused.mean, _leaves(inp))
    scale_U = inp["s"] + inp["b_noise"].abs()  # a separate graph for the plain side
    plain = ovr_bce(
        inp["loc_U"] @ inp["W"].T + inp["b"], scale_U @ inp["W"].abs().T, labels, inp["thr"]
    )
    torch.testing.assert_close(fused.per_position, plain.per_position, rtol=2e-6, atol=1e-5)
    _assert_grads_close(
        g, torch.autograd.grad(plain.mean, _leaves(inp)), rtol=1e-5, atol_scale=1e-6
    )
    assert guard.largest >= N * V // 3  # the guard saw the tile buffers
