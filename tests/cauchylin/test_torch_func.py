"""torch.func and torch.compile over the public core, checked against torch's own results.

The matrix: every operation below x {vmap, grad, jacrev/jacfwd, jvp, compile(fullgraph=True)} x
validation {on, off} x {float32, bfloat16}. The references are torch's, never a copy of our
formula:

* ``vmap``: ``torch.func.vmap(f)`` over a batch of 3 equals the Python loop ``[f(x_i)]``;
* ``grad``: ``torch.func.grad`` of the summed output equals ``torch.autograd.grad`` (reverse mode
  through the eager call), and ``vmap(grad)`` (per-sample gradients) the loop of them;
* ``jac``: ``torch.func.jacfwd`` (forward mode: the ``jvp`` rules) equals ``jacrev`` (reverse
  mode: the ``backward`` rules);
* ``jvp``: ``torch.func.jvp`` with a random tangent equals the ``jacrev`` Jacobian applied to it;
* ``compile``: ``torch.compile(f, fullgraph=True)`` (Dynamo; the "eager" backend, so the test
  checks the capture without paying inductor's compile time) equals the eager call.

Validation "on" means ``validate_args=True`` for every object and loss (and the global switch on);
under the transforms the value checks then read the values underneath the wrappers
(``cauchylin._validation.host_values``): :func:`test_vmap_with_validation_raises_on_a_bad_member`
shows they still refuse a bad value in one member of a batch, as the loop does.

Tolerances: each operation's outputs come from at most a few float32 operations per element,
summed over at most ``TERMS`` elements; two evaluations of the same formula (fast and functional
kernel paths, or two orders of summation) differ by a few float32 ulp per term, so both are
compared with ``rtol = 16 * TERMS * eps(float32)``, plus one ``eps`` of each side that is half
precision (one rounding of a bfloat16 result or Jacobian), relative to each entry and, as an
absolute tolerance, to the reference's largest magnitude. The ``jvp`` check bounds the rounding of
a bfloat16 Jacobian entry by entry (``eps(bf16) |J| |t|``).
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from torch.func import functional_call, grad, jacfwd, jacrev, jvp, vmap

import cauchylin
from cauchylin import CauchyVector, losses
from cauchylin.distributions import IndependentCauchy, OvR, OvRLabel
from cauchylin.nn import Abduction, Action, NumericEmbedding

# torch's Dynamo instantiates torch.autograd.Function itself for every custom Function it traces
# and warns about that (torch 2.13 and later); nothing of ours instantiates one.
pytestmark = pytest.mark.filterwarnings("ignore:.*should not be instantiated:DeprecationWarning")

B, C, V, N = 3, 4, 5, 6  # vmap batch, components, classes, loss rows
TERMS = 2 * V * C  # the most terms any output here sums (a GEMM of C into a loss over V)


@dataclass(frozen=True)
class Op:
    """One public operation as a function of tensors: ``fn(validate, *args) -> tensor``."""

    name: str
    make: Callable[[torch.dtype, torch.Generator], tuple[torch.Tensor, ...]]
    fn: Callable[..., torch.Tensor]
    diff: tuple[int, ...]  # the arguments to differentiate (floating ones)
    bad: int | None = None  # the argument a value check refuses a NaN in (default diff[0])


def _pos(shape, dtype, g):
    return (torch.rand(shape, generator=g) + 0.5).to(dtype)


def _real(shape, dtype, g):
    return torch.randn(shape, generator=g).to(dtype)


def _loc_scale(dtype, g, shape=(C,)):
    return _real(shape, dtype, g), _pos(shape, dtype, g)


def _cv(v, loc, scale):
    return CauchyVector(loc, scale, validate_args=v)


def _flat(*parts):
    return torch.cat([p.reshape(-1).float() for p in parts])


# ------------------------------------------------------------------------------ CauchyVector


def _with_x(dtype, g):
    return (*_loc_scale(dtype, g), _real((C,), dtype, g))


def _with_w(dtype, g):
    return (*_loc_scale(dtype, g), _real((V, C), dtype, g), _real((V,), dtype, g))


def _two(dtype, g):
    return (*_loc_scale(dtype, g), *_loc_scale(dtype, g))


def _q(dtype, g):
    return (*_loc_scale(dtype, g), (torch.rand(C, generator=g) * 0.9 + 0.05).to(dtype))


def op_linear(v, loc, scale, w, b):
    s = _cv(v, loc, scale).linear(w, b)
    return _flat(s.loc, s.scale)


def op_linear_log_prob(v, loc, scale, w, b):
    return _cv(v, loc, scale).linear(w).log_prob(b)


def op_add_sub(v, l1, s1, l2, s2):
    u, w = _cv(v, l1, s1), _cv(v, l2, s2)
    r = (u + w) - 2.0 * u + (w - l1) / 3.0
    return _flat(r.loc, r.scale)


def op_mul_neg(v, loc, scale, x):
    r = -(x * _cv(v, loc, scale))
    return _flat(r.loc, r.scale)


def op_view(v, loc, scale, x):
    u = _cv(v, loc, scale)
    e = u.expand(3, C)[1:, [1, 0, 3]].reshape(2, 1, 3)[:, 0]  # [2, 3], shared variables
    r = cauchylin.cat([e, u[..., :3].expand(1, 3), e[:1] - e[1:]], dim=0)  # [4, 3]
    d = e.detach().to(torch.float64).log_prob(x[:3].double())
    return _flat(r.loc, r.scale, cauchylin.cat([u, e[0]], dim=-1).scale, d)


def op_log_prob(v, loc, scale, x):
    return _cv(v, loc, scale).log_prob(x)


def op_cdf_sf(v, loc, scale, x):
    u = _cv(v, loc, scale)
    return _flat(u.cdf(x), u.sf(x))


def op_log_cdf_sf(v, loc, scale, x):
    u = _cv(v, loc, scale)
    return _flat(u.log_cdf(x), u.log_sf(x))


def op_icdf(v, loc, scale, q):
    return _cv(v, loc, scale).icdf(q)


def op_entropy(v, loc, scale, x):
    return _cv(v, loc, scale).entropy() + 0 * x


def op_ovr(v, loc, scale, x):
    u = _cv(v, loc, scale)
    log_p, log_q = u.ovr_log_prob(x)
    return _flat(u.ovr_prob(x), log_p, log_q)


def op_kl(v, l1, s1, l2, s2):
    return cauchylin.kl_divergence(_cv(v, l1, s1), _cv(v, l2, s2))


# ----------------------------------------------------------------------------- distributions


def _value01(dtype, g):
    return (*_loc_scale(dtype, g), (torch.rand(C, generator=g) > 0.5).to(dtype))


def _label(dtype, g):
    return (*_loc_scale(dtype, g), torch.randint(0, C, (), generator=g))


def op_dist_log_prob(v, loc, scale, x):
    d = IndependentCauchy(loc, scale, validate_args=v)
    return torch.stack([d.log_prob(x), d.cdf(x), d.entropy()])


def op_dist_kl(v, l1, s1, l2, s2):
    p = IndependentCauchy(l1, s1, validate_args=v)
    q = IndependentCauchy(l2, s2, validate_args=v)
    return torch.distributions.kl_divergence(p, q)


def op_ovr_dist(v, loc, scale, value):
    d = OvR(loc, scale, threshold=0.25, validate_args=v)
    return _flat(d.log_prob(value), d.entropy(), d.probs, d.logits, d.variance)


def op_ovr_label(v, loc, scale, label):
    d = OvRLabel(loc, scale, threshold=-0.25, validate_args=v)
    o = OvR(loc, scale, threshold=-0.25, validate_args=v)
    return torch.stack([d.log_prob(label), o.log_prob_index(label)])


def op_ovr_kl(v, l1, s1, l2, s2):
    return torch.distributions.kl_divergence(
        OvR(l1, s1, validate_args=v), OvR(l2, s2, validate_args=v)
    )


# ------------------------------------------------------------------------------------ losses


def _scores(dtype, g):
    labels = torch.randint(0, V, (N,), generator=g)
    labels[1] = -100  # one position that does not count
    mask = torch.ones(N, dtype=torch.long)
    mask[3] = 0
    return (_real((N, V), dtype, g), _pos((N, V), dtype, g), labels, mask)


def _fused(dtype, g):
    labels = torch.randint(0, V, (N,), generator=g)
    labels[2] = -100
    return (
        _real((N, C), dtype, g),
        _pos((N, C), dtype, g),
        _real((V, C), dtype, g),
        _real((V,), dtype, g),
        labels,
    )


def _reg(dtype, g):
    num = torch.rand(N, generator=g) > 0.4
    num[0] = True
    return (
        _real((N,), dtype, g),
        _pos((N,), dtype, g),
        _real((N,), dtype, g),
        num,
        -_pos((N,), dtype, g),
    )


def op_ovr_bce(v, loc, scale, labels, mask):
    out = losses.ovr_bce(loc, scale, labels, 0.1, attention_mask=mask, validate_args=v)
    return _flat(out.mean, out.per_position)


def op_ovr_bce_fused(v, loc_u, scale_u, w, b, labels):
    out = losses.ovr_bce_fused(loc_u, scale_u, w, b, -0.2, labels, validate_args=v)
    return _flat(out.mean, out.per_position)


def op_gated_regression(v, loc, scale, y, num, log_p):
    reg = losses.gated_regression_loss(loc, scale, y, num, log_p, alpha=0.3, validate_args=v)
    cls = losses.OvRLoss(loc.sum(), loc, torch.tensor(N))
    return _flat(losses.causal_lm_loss(cls, reg, reg_weight=0.5).total, reg.per_position)


# ------------------------------------------------------------------------------------ layers

_LAYER_SEED = 7


_LAYERS: dict[torch.dtype, tuple[NumericEmbedding, Abduction, Action]] = {}


def _layers(dtype: torch.dtype) -> tuple[NumericEmbedding, Abduction, Action]:
    if dtype in _LAYERS:
        return _LAYERS[dtype]
    torch.manual_seed(_LAYER_SEED)
    emb = NumericEmbedding(C, generator=torch.Generator().manual_seed(_LAYER_SEED))
    abd = Abduction(C, C, gamma_init=1.0)
    act = Action(C, V, threshold=0.1, b_noise_init=0.2)
    with torch.no_grad():  # away from the identity initialisation: a real map
        for p in abd.parameters():
            p.add_(0.1 * torch.randn_like(p))
    _LAYERS[dtype] = (emb.to(dtype), abd.to(dtype), act.to(dtype))
    return _LAYERS[dtype]


def _layer_input(dtype, g):
    _layers(dtype)  # built here, outside any transform (their initialisation draws numbers)
    labels = torch.randint(0, V, (2,), generator=g)
    return (_real((2, C), dtype, g), _real((2,), dtype, g) * 10, labels)


def op_layers(v, z, values, labels):
    emb, abd, act = _LAYERS[z.dtype]  # (built by _layer_input, outside the transforms)
    for m in (emb,):
        m.validate_args = v
    with cauchylin.validation(v):
        h = emb(z, values)
        U = abd(h)
        out = act(U, "standard")
        loss = act.loss(U, labels, values, num_token_id=V - 1, alpha=0.5)
    return _flat(out.loc_S, out.scale_S, out.loc_Y, loss.total)


OPS = [
    Op("vector.linear", _with_w, op_linear, (0, 1, 2, 3)),
    Op("vector.linear.log_prob", _with_w, op_linear_log_prob, (0, 1, 2)),
    Op("vector.add_sub_shift_div", _two, op_add_sub, (0, 1, 2, 3)),
    Op("vector.mul_neg", _with_x, op_mul_neg, (0, 1, 2)),
    Op("vector.views_cat_to_detach", _with_x, op_view, (0, 1, 2)),
    Op("vector.log_prob", _with_x, op_log_prob, (0, 1, 2)),
    Op("vector.cdf_sf", _with_x, op_cdf_sf, (0, 1, 2)),
    Op("vector.log_cdf_log_sf", _with_x, op_log_cdf_sf, (0, 1, 2)),
    Op("vector.icdf", _q, op_icdf, (0, 1, 2)),
    Op("vector.entropy", _with_x, op_entropy, (1, 2)),
    Op("vector.ovr", _with_x, op_ovr, (0, 1, 2)),
    Op("vector.kl_divergence", _two, op_kl, (0, 1, 2, 3)),
    Op("IndependentCauchy", _with_x, op_dist_log_prob, (0, 1, 2)),
    Op("IndependentCauchy.kl", _two, op_dist_kl, (0, 1, 2, 3)),
    Op("OvR", _value01, op_ovr_dist, (0, 1)),
    Op("OvRLabel", _label, op_ovr_label, (0, 1)),
    Op("OvR.kl", _two, op_ovr_kl, (0, 1, 2, 3)),
    Op("ovr_bce", _scores, op_ovr_bce, (0, 1)),
    Op("ovr_bce_fused", _fused, op_ovr_bce_fused, (0, 1, 2, 3)),
    Op("gated_regression+causal_lm_loss", _reg, op_gated_regression, (0, 1, 4), bad=1),
    Op("nn.layers+Action.loss", _layer_input, op_layers, (0, 1)),
]
DTYPES = [torch.float32, torch.bfloat16]
VALIDATE = [True, False]


def _args(op: Op, dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, ...]:
    return op.make(dtype, torch.Generator().manual_seed(seed))


def _batched(op: Op, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    members = [_args(op, dtype, seed) for seed in range(B)]
    return tuple(torch.stack(parts) for parts in zip(*members, strict=True))


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    """Within a few float32 ulp per summed term, plus one rounding of each side that is half
    precision, relative to each entry and to the reference's largest magnitude (a half-precision
    intermediate is rounded relative to its own size, which may exceed the entry's)."""
    slack = 16 * TERMS * torch.finfo(torch.float32).eps
    rtol = slack + sum(
        torch.finfo(t.dtype).eps for t in (got, want) if t.dtype in (torch.bfloat16, torch.float16)
    )
    scale = float(want.detach().float().abs().max()) if want.numel() else 1.0
    torch.testing.assert_close(
        got.float(), want.float(), rtol=rtol, atol=rtol * max(scale, 1.0), equal_nan=True
    )


@pytest.fixture(autouse=True)
def _global_validation(request):
    """The global switch follows the case's validation (so the layers' objects validate too)."""
    callspec = getattr(request.node, "callspec", None)
    validate = callspec.params.get("validate", True) if callspec is not None else True
    with cauchylin.validation(validate):
        yield


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "bf16"])
@pytest.mark.parametrize("validate", VALIDATE, ids=["validate", "novalidate"])
@pytest.mark.parametrize("op", OPS, ids=[op.name for op in OPS])
def test_vmap_equals_the_python_loop(op, validate, dtype):
    f = functools.partial(op.fn, validate)
    batch = _batched(op, dtype)
    got = vmap(f)(*batch)
    want = torch.stack([f(*(a[i] for a in batch)) for i in range(B)])
    _close(got, want)


def _summed(
    f: Callable[..., torch.Tensor], diff: tuple[int, ...], args
) -> Callable[..., torch.Tensor]:
    """``f`` as a function of its differentiated arguments only, summed to a scalar."""

    def g(*xs):
        full = list(args)
        for i, x in zip(diff, xs, strict=True):
            full[i] = x
        return f(*full).sum()

    return g


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "bf16"])
@pytest.mark.parametrize("validate", VALIDATE, ids=["validate", "novalidate"])
@pytest.mark.parametrize("op", OPS, ids=[op.name for op in OPS])
def test_grad_equals_autograd_and_per_sample_grads_the_loop(op, validate, dtype):
    f = functools.partial(op.fn, validate)
    args = _args(op, dtype)
    primals = [args[i] for i in op.diff]
    argnums = tuple(range(len(primals)))
    got = grad(_summed(f, op.diff, args), argnums=argnums)(*primals)
    leaves = [p.detach().clone().requires_grad_() for p in primals]
    want = torch.autograd.grad(_summed(f, op.diff, args)(*leaves), leaves)
    for a, b in zip(got, want, strict=True):
        _close(a, b)
    # per-sample gradients: vmap(grad) over a batch equals the loop of grads
    batch = _batched(op, dtype)

    def per_sample(*member):
        return grad(_summed(f, op.diff, member), argnums=argnums)(*(member[i] for i in op.diff))

    got_b = vmap(per_sample)(*batch)
    for k in range(len(primals)):
        loop = torch.stack([per_sample(*(a[i] for a in batch))[k] for i in range(B)])
        _close(got_b[k], loop)


def _jac_fn(f, diff, args):
    def g(*xs):
        full = list(args)
        for i, x in zip(diff, xs, strict=True):
            full[i] = x
        return f(*full)

    return g


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "bf16"])
@pytest.mark.parametrize("validate", VALIDATE, ids=["validate", "novalidate"])
@pytest.mark.parametrize("op", OPS, ids=[op.name for op in OPS])
def test_jacfwd_equals_jacrev_and_jvp_the_jacobian(op, validate, dtype):
    f = functools.partial(op.fn, validate)
    args = _args(op, dtype)
    primals = tuple(args[i] for i in op.diff)
    argnums = tuple(range(len(primals)))
    g = _jac_fn(f, op.diff, args)
    fwd = jacfwd(g, argnums=argnums)(*primals)
    rev = jacrev(g, argnums=argnums)(*primals)
    for a, b in zip(fwd, rev, strict=True):
        _close(a, b)
    gen = torch.Generator().manual_seed(1)
    tangents = tuple(torch.randn(p.shape, generator=gen).to(p.dtype) for p in primals)
    out, t_out = jvp(g, primals, tangents)
    # J t from jacrev's Jacobian; each entry of a bfloat16 Jacobian (the input's dtype) is
    # rounded once, so the sum is off by at most eps(bf16) |J| |t| (float32: a few ulp per term)
    want = torch.zeros(out.numel())
    bound = torch.zeros(out.numel())
    for J, t in zip(rev, tangents, strict=True):
        flat_J = J.detach().float().reshape(out.numel(), -1)
        want += flat_J @ t.float().reshape(-1)
        bound += flat_J.abs() @ t.float().abs().reshape(-1) * torch.finfo(J.dtype).eps
    slack = 16 * TERMS * torch.finfo(torch.float32).eps * max(1.0, float(want.abs().max()))
    diff = (t_out.detach().float().reshape(-1) - want).abs()
    assert bool((diff <= bound + slack).all()), (diff, bound)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "bf16"])
@pytest.mark.parametrize("validate", VALIDATE, ids=["validate", "novalidate"])
@pytest.mark.parametrize("op", OPS, ids=[op.name for op in OPS])
def test_compile_fullgraph_equals_eager(op, validate, dtype):
    torch._dynamo.reset()  # each case traces afresh (no recompile limit across the matrix)
    f = functools.partial(op.fn, validate)
    args = _args(op, dtype)
    got = torch.compile(f, fullgraph=True, backend="eager")(*args)
    _close(got, f(*args))


# ----------------------------------------------------------------------- functional_call


class _Heads(torch.nn.Module):
    """Abduction then Action: the forward's scores, or the training loss (``labels`` given)."""

    def __init__(self) -> None:
        super().__init__()
        self.abd = Abduction(C, C, gamma_init=1.0)
        self.act = Action(C, V, threshold=0.1, b_noise_init=0.2)

    def forward(self, z, labels=None, values=None):
        U = self.abd(z)
        if labels is None:
            out = self.act(U)
            return torch.stack([out.loc_S, out.scale_S])
        return self.act.loss(U, labels, values, num_token_id=V - 1).total


@pytest.mark.parametrize("validate", VALIDATE, ids=["validate", "novalidate"])
def test_functional_call_vmaps_an_ensemble_of_layers(validate):
    """Model ensembles: ``vmap`` of ``functional_call`` over stacked parameters equals the loop,
    and ``vmap(grad)`` of the training loss the loop of ``torch.autograd.grad``."""
    torch.manual_seed(0)
    model = _Heads()
    g = torch.Generator().manual_seed(3)
    z = torch.randn(2, C, generator=g)
    labels = torch.tensor([1, V - 1])
    values = torch.tensor([0.0, 2.5])
    params = {
        k: torch.stack([p.detach() * (1 + 0.1 * i) + 0.01 * i for i in range(B)])
        for k, p in model.named_parameters()
    }

    def scores(p):
        return functional_call(model, p, (z,))

    def loss(p):
        return functional_call(model, p, (z, labels, values))

    got = vmap(scores)(params)
    got_g = vmap(grad(loss))(params)
    for i in range(B):
        member = {k: v[i].clone().requires_grad_() for k, v in params.items()}
        _close(got[i], scores(member))
        want_g = torch.autograd.grad(loss(member), list(member.values()))
        for k, w in zip(member, want_g, strict=True):
            _close(got_g[k][i], w)


# ------------------------------------------------------------- validation under the transforms


def _nan_in_member(t: torch.Tensor, member: int) -> torch.Tensor:
    t = t.clone()
    t[member].view(-1)[0] = math.nan
    return t


@pytest.mark.parametrize(
    "op", [op for op in OPS if op.name != "nn.layers+Action.loss"], ids=lambda o: o.name
)
def test_vmap_with_validation_raises_on_a_bad_member(op):
    """A NaN in one member of the batch raises the ValueError the loop raises at that member."""
    f = functools.partial(op.fn, True)
    batch = list(_batched(op, torch.float32))
    bad = op.diff[0] if op.bad is None else op.bad
    batch[bad] = _nan_in_member(batch[bad], B - 1)
    with pytest.raises(ValueError) as loop_error:
        for i in range(B):
            f(*(a[i] for a in batch))
    with pytest.raises(ValueError) as vmap_error:
        vmap(f)(*batch)
    assert type(vmap_error.value) is type(loop_error.value)


def test_vmap_without_validation_passes_nan_through():
    """Validation off: the same NaN is not refused under vmap; it only reaches its own member."""
    op = next(o for o in OPS if o.name == "vector.log_prob")
    f = functools.partial(op.fn, False)
    with cauchylin.validation(False):
        batch = list(_batched(op, torch.float32))
        batch[2] = _nan_in_member(batch[2], 1)
        out = vmap(f)(*batch)
    assert torch.isnan(out[1]).any() and not torch.isnan(out[0]).any()
    assert not torch.isnan(out[2]).any()


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("loc", math.nan),
        ("loc", math.inf),
        ("loc", -math.inf),
        ("scale", math.nan),
        ("scale", math.inf),
        ("scale", 0.0),
        ("scale", -1.0),
        ("value", math.nan),
    ],
)
@pytest.mark.parametrize("member", [0, B - 1])
def test_vmap_validation_screens_every_bound_of_every_parameter(name, bad, member):
    """The one-read screen under vmap: each bad bound in any member raises, naming the argument;
    the extremes that are still valid (a denormal scale, an infinite value) pass."""
    g = torch.Generator().manual_seed(0)
    args = {
        "loc": torch.randn(B, C, generator=g),
        "scale": torch.rand(B, C, generator=g) + 0.5,
        "value": torch.randn(B, C, generator=g),
    }

    def log_prob(loc, scale, value):
        return IndependentCauchy(loc, scale, validate_args=True).log_prob(value)

    edge = {k: v.clone() for k, v in args.items()}
    edge["scale"][member, 1] = 1e-45  # the smallest positive float32
    edge["value"][member, 2] = -math.inf
    out = vmap(log_prob)(edge["loc"], edge["scale"], edge["value"])
    assert out.shape == (B,) and not torch.isnan(out).any()
    args[name][member, 1] = bad
    with pytest.raises(ValueError, match=name):
        vmap(log_prob)(args["loc"], args["scale"], args["value"])


def test_vmap_validation_reads_the_value_once_and_still_refuses_nan(monkeypatch):
    """Under vmap the value's support is proven by the density's own finiteness read: a clean
    batch reads the value no second time, a NaN (or an overflowing displacement) makes the
    value check run, which refuses the NaN and lets the overflow through."""
    from cauchylin import distributions as dist_module

    g = torch.Generator().manual_seed(0)
    loc, scale, value = (torch.randn(B, C, generator=g) for _ in range(3))
    scale = scale.abs() + 0.5
    calls = []
    real_check = dist_module._validate_value_support

    def counting(d, v):
        calls.append(v.shape)
        return real_check(d, v)

    monkeypatch.setattr(dist_module, "_validate_value_support", counting)

    def log_prob(loc, scale, value):
        return IndependentCauchy(loc, scale, validate_args=True).log_prob(value)

    out = vmap(log_prob)(loc, scale, value)
    assert calls == [] and torch.equal(
        out, torch.stack([log_prob(*a) for a in zip(loc, scale, value, strict=True)])
    )
    huge = value.clone()
    huge[1, 0] = 3e38  # finite, but s + d^2/s overflows: the value is read, and passes
    out = vmap(log_prob)(loc, scale, huge)
    assert len(calls) == 1 and torch.isfinite(out).all()
    bad = value.clone()
    bad[B - 1, 2] = math.nan
    with pytest.raises(ValueError, match="value"):
        vmap(log_prob)(loc, scale, bad)
    assert len(calls) == 2


def test_vmap_validation_screen_lets_huge_finite_parameters_through():
    """The parameter screen sums a ``real`` parameter: a sum that overflows (every value finite)
    falls back to the exact checks, which pass; an infinity among them is refused."""
    loc = torch.full((B, C), 3e38)
    scale = torch.full((B, C), 3e38)
    value = torch.zeros(B, C)

    def log_prob(loc, scale, value):
        return IndependentCauchy(loc, scale, validate_args=True).log_prob(value)

    out = vmap(log_prob)(loc, scale, value)
    assert torch.isfinite(out).all()
    loc[B - 1, C - 1] = math.inf
    with pytest.raises(ValueError, match="loc"):
        vmap(log_prob)(loc, scale, value)


# ------------------------------------------- the parameter screen at construction (one read)

_HOST_READS = {"item", "tolist", "__bool__", "__float__", "__int__", "numpy"}


class _HostReads(torch.overrides.TorchFunctionMode):
    """Counts the host reads of tensor values (``.item()``, ``bool(t)``, ...) made inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in _HOST_READS:
            self.reads.append(name)
        return func(*args, **(kwargs or {}))


def _params(cls: type, n: int = B) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    params = {"loc": torch.randn(n, C, generator=g), "scale": torch.rand(n, C, generator=g) + 0.5}
    if cls is OvR:
        params["threshold"] = torch.randn(n, C, generator=g)
    return params


def _construct(cls: type, where: str, params: dict[str, torch.Tensor], reads=None) -> None:
    """Build ``cls(**params, validate_args=True)`` eagerly (the whole batch) or under ``vmap``
    (one member per call); ``reads`` (a :class:`_HostReads`) is entered around the constructor."""

    def build(*values):
        with reads if reads is not None else contextlib.nullcontext():
            cls(**dict(zip(params, values, strict=True)), validate_args=True)
        return values[0]

    if where == "vmap":
        vmap(build)(*params.values())
    else:
        build(*params.values())


@pytest.mark.parametrize("where", ["eager", "vmap"])
@pytest.mark.parametrize("cls", [IndependentCauchy, OvR], ids=lambda c: c.__name__)
def test_the_parameter_screen_reads_the_host_once(cls, where):
    """Valid parameters of one shape pass the construction's checks with a single host read (one
    reduction over all of them), eagerly and under vmap: each read costs a dispatch under vmap,
    and a synchronisation on a device."""
    reads = _HostReads()
    _construct(cls, where, _params(cls), reads)
    assert reads.reads == ["item"]


_BAD = {
    "loc": [math.nan, math.inf, -math.inf],
    "threshold": [math.nan, math.inf, -math.inf],
    "scale": [math.nan, math.inf, -math.inf, 0.0, -0.0, -1.0, -1e-45],
}


@pytest.mark.parametrize("where", ["eager", "vmap"])
@pytest.mark.parametrize(
    ("cls", "name", "bad"),
    [
        (cls, name, bad)
        for cls in (IndependentCauchy, OvR)
        for name, bads in _BAD.items()
        if name != "threshold" or cls is OvR
        for bad in bads
    ],
    ids=str,
)
def test_the_parameter_screen_refuses_what_the_checks_one_by_one_refuse(
    monkeypatch, cls, where, name, bad
):
    """Every bad value of every parameter, in any member, still raises, with the message of the
    checks one by one (the screen switched off), which names the parameter."""
    from cauchylin import distributions as dist_module

    for member in (0, B - 1):
        params = _params(cls)
        params[name][member, 1] = bad
        with pytest.raises(ValueError, match=name) as screened:
            _construct(cls, where, params)
        with monkeypatch.context() as m:
            m.setattr(dist_module, "_extremes_pass", lambda values, kinds: False)
            with pytest.raises(ValueError) as one_by_one:
                _construct(cls, where, params)
        assert str(screened.value) == str(one_by_one.value)


@pytest.mark.parametrize("where", ["eager", "vmap"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("cls", [IndependentCauchy, OvR], ids=lambda c: c.__name__)
def test_the_parameter_screen_passes_the_extreme_valid_values(cls, dtype, where):
    """The largest finite parameters of either sign and the smallest positive scale pass the
    screen in every floating dtype (nothing in it overflows), with its single read."""
    info = torch.finfo(dtype)
    params = {k: v.to(dtype) for k, v in _params(cls).items()}
    params["loc"][0] = info.max
    params["loc"][1] = -info.max
    params["scale"][0] = info.max
    params["scale"][1] = info.smallest_normal / 2 ** (info.bits // 4)  # a subnormal
    assert 0 < float(params["scale"][1].min()) < info.smallest_normal
    if cls is OvR:
        params["threshold"][1] = info.max
    reads = _HostReads()
    _construct(cls, where, params, reads)
    assert reads.reads == ["item"]
