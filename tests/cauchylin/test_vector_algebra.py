"""The algebra of ``CauchyVector`` against Monte Carlo samples drawn from the *definition*.

Every check draws the independent sources with a plain independent sampler
(``scipy.stats.cauchy.rvs``) and applies the literal arithmetic (matrices, sums, indexing) in
plain torch, never through the code under test. The claimed marginals ``(loc, scale)`` are then
compared with the empirical CDF of each entry by the DKW inequality, and functions of two entries
(differences, sums, joint exceedances) catch dependence errors that per-entry checks cannot see.

Tolerances come from ``tests/stats.py`` at a false-failure rate of at most 1e-6 per test: the
budget is split (union bound) over every check of every Hypothesis example. Seeds are fixed and
Hypothesis is derandomised under CI.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
import scipy.stats
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cauchylin import CauchyVector, cat
from tests.stats import binomial_epsilon, dkw_epsilon, split_delta

N_MC = 20000
DTYPE = torch.float64


# ------------------------------------------------------------------------------ statistics


def ks_against_law(samples: np.ndarray, loc: float, scale: float, magnitude: float = 0.0) -> float:
    """sup_x |F_n(x) - F(x)| for F = Cauchy(loc, scale) (a step at ``loc`` when scale is 0).

    The claimed CDF is evaluated with a slack of ``1e-9 (|x| + |loc| + scale + magnitude)`` in
    ``x`` (both directions): it absorbs the float64 rounding of the literal arithmetic (of the
    order of 1e-16 times the magnitude of what was added up) and changes nothing else.
    """
    x = np.sort(samples)
    n = x.size
    slack = 1e-9 * (np.abs(x) + abs(loc) + scale + magnitude) + 1e-300

    def cdf(v: np.ndarray) -> np.ndarray:
        if scale == 0.0:
            return (v >= loc).astype(float)
        return scipy.stats.cauchy.cdf(v, loc=loc, scale=scale)

    upper = np.arange(1, n + 1) / n - cdf(x + slack)  # F_n(x) above F
    lower = cdf(x - slack) - np.arange(0, n) / n  # F below F_n(x-)
    return float(max(upper.max(), lower.max(), 0.0))


def ks_two_sample(a: np.ndarray, b: np.ndarray, magnitude: float = 0.0) -> float:
    """sup_x of the gap between two empirical CDFs, with the same rounding slack as above:
    ``max(F_a(x) - F_b(x + d), F_b(x) - F_a(x + d))`` with ``d = 1e-9 (|x| + magnitude)``."""
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    d = 1e-9 * (np.abs(grid) + magnitude) + 1e-300

    def ecdf(sorted_: np.ndarray, v: np.ndarray) -> np.ndarray:
        return np.searchsorted(sorted_, v, side="right") / sorted_.size

    gap = np.maximum(ecdf(a, grid) - ecdf(b, grid + d), ecdf(b, grid) - ecdf(a, grid + d))
    return float(max(gap.max(), 0.0))


def cauchy_rvs(
    loc: np.ndarray, scale: np.ndarray, n: int, rng: np.random.Generator
) -> torch.Tensor:
    """Independent Cauchy draws ``[n, *loc.shape]`` from scipy (the definition of a leaf)."""
    out = scipy.stats.cauchy.rvs(loc=loc, scale=scale, size=(n, *loc.shape), random_state=rng)
    return torch.from_numpy(np.asarray(out, dtype=np.float64))


# ------------------------------------------------------------------------------ programs


@dataclass
class Node:
    """A vector under test and its literal samples from the definition, ``[N_MC, *shape]``."""

    cv: CauchyVector
    x: torch.Tensor
    magnitude: float = 0.0  # typical size of what was added up: the scale of float64 rounding

    @property
    def shape(self) -> torch.Size:
        return self.cv.shape


def leaf(shape: tuple[int, ...], rng: np.random.Generator, spread: float = 3.0) -> Node:
    """A leaf whose locations and scales span ``10**-spread .. 10**spread``."""
    loc = rng.choice([-1.0, 1.0], size=shape) * 10.0 ** rng.uniform(-spread, spread, size=shape)
    loc = np.where(rng.random(shape) < 0.2, 0.0, loc)
    scale = 10.0 ** rng.uniform(-spread, spread, size=shape)
    cv = CauchyVector(torch.from_numpy(loc), torch.from_numpy(scale))
    x = cauchy_rvs(loc, scale, N_MC, rng)
    return Node(cv, x, float(np.abs(loc).max() + scale.max()))


def weight(
    out: int, inp: int, rng: np.random.Generator, batch: tuple[int, ...] = ()
) -> torch.Tensor:
    """A weight with zeros, negative entries, many magnitudes and (often) shared columns."""
    shape = (*batch, out, inp)
    w = rng.choice([-1.0, 1.0], size=shape) * 10.0 ** rng.uniform(-2, 2, size=shape)
    w = np.where(rng.random(shape) < 0.25, 0.0, w)
    if inp > 1 and rng.random() < 0.6:  # a shared column: two inputs feed the same rows
        i, j = rng.choice(inp, size=2, replace=False)
        w[..., :, j] = w[..., :, i] * rng.choice([1.0, -1.0, 0.5])
    return torch.from_numpy(w)


OPS = (
    "linear",
    "linear_batched",
    "add_self",
    "add_pool",
    "add_leaf",
    "sub_pool",
    "neg",
    "mul_scalar",
    "mul_tensor",
    "div",
    "shift",
    "index_batch",
    "slice_batch",
    "repeat_batch",
    "slice_comp",
    "list_comp",
    "cat_comp",
    "cat_batch",
    "reshape",
    "expand",
    "to_detach",
)
MAX_ENTRIES = 24


def apply_op(op: str, a: Node, pool: list[Node], rng: np.random.Generator) -> Node | None:
    """Apply ``op`` to the vector and, literally, to its definition samples (None: not applicable)."""
    batch, C = tuple(a.shape[:-1]), a.shape[-1]
    x = a.x
    if op in ("linear", "linear_batched"):
        out = int(rng.integers(1, 5))
        if op == "linear_batched":
            if not batch:
                return None
            w = weight(out, C, rng, batch=batch[-1:])
            y = (x.unsqueeze(-2) * w).sum(-1)  # [n, *batch, out]
        else:
            w = weight(out, C, rng)
            y = x @ w.T
        bias = None
        if rng.random() < 0.5:
            bias = torch.from_numpy(rng.normal(size=out) * 10.0 ** rng.uniform(-2, 2))
            y = y + bias
        mag = a.magnitude * float(w.abs().sum(-1).max())
        mag += 0.0 if bias is None else float(bias.abs().max())
        return Node(a.cv.linear(w, bias), y, mag)
    if op == "add_self":
        return Node(a.cv + a.cv, x + x, 2 * a.magnitude)
    if op in ("add_pool", "sub_pool"):
        same = [b for b in pool if b.shape == a.shape]
        b = same[int(rng.integers(len(same)))]
        if op == "add_pool":
            return Node(a.cv + b.cv, x + b.x, a.magnitude + b.magnitude)
        return Node(a.cv - b.cv, x - b.x, a.magnitude + b.magnitude)
    if op == "add_leaf":
        b = leaf((C,) if rng.random() < 0.5 else tuple(a.shape), rng)
        bx = b.x.reshape(N_MC, *([1] * (len(a.shape) - len(b.shape))), *b.shape)
        return Node(a.cv + b.cv, x + bx, a.magnitude + b.magnitude)
    if op == "neg":
        return Node(-a.cv, -x, a.magnitude)
    if op == "mul_scalar":
        f = float(rng.choice([-1.0, 1.0]) * 10.0 ** rng.uniform(-2, 2))
        return Node(f * a.cv if rng.random() < 0.5 else a.cv * f, x * f, a.magnitude * abs(f))
    if op == "mul_tensor":
        shape = (C,) if rng.random() < 0.5 else tuple(a.shape)
        f = rng.choice([-1.0, 1.0], size=shape) * 10.0 ** rng.uniform(-2, 2, size=shape)
        f = torch.from_numpy(np.where(rng.random(shape) < 0.15, 0.0, f))
        return Node(a.cv * f, x * f, a.magnitude * float(f.abs().max()))
    if op == "div":
        f = float(rng.choice([-1.0, 1.0]) * 10.0 ** rng.uniform(-2, 2))
        return Node(a.cv / f, x / f, a.magnitude / abs(f))
    if op == "shift":
        t = torch.from_numpy(rng.normal(size=(C,)) * 10.0 ** rng.uniform(-2, 3))
        mag = a.magnitude + float(t.abs().max())
        return Node(a.cv + t if rng.random() < 0.5 else t + a.cv, x + t, mag)
    if op == "index_batch":
        if not batch:
            return None
        i = int(rng.integers(-batch[0], batch[0]))
        return Node(a.cv[i], x[:, i], a.magnitude)
    if op == "slice_batch":
        if not batch or batch[0] < 2:
            return None
        return Node(a.cv[1:], x[:, 1:], a.magnitude)
    if op == "repeat_batch":
        if not batch:
            return None
        idx = [int(v) for v in rng.integers(0, batch[0], size=3)]
        return Node(a.cv[idx], x[:, idx], a.magnitude)
    if op == "slice_comp":
        if C < 2:
            return None
        lo = int(rng.integers(0, C - 1))
        return Node(a.cv[..., lo:], x[..., lo:], a.magnitude)
    if op == "list_comp":
        idx = [int(v) for v in rng.integers(0, C, size=int(rng.integers(1, 4)))]
        return Node(a.cv[..., idx], x[..., idx], a.magnitude)
    if op == "cat_comp":
        cands = [b for b in pool if b.shape[:-1] == a.shape[:-1]]
        b = cands[int(rng.integers(len(cands)))]
        mag = max(a.magnitude, b.magnitude)
        return Node(cat([a.cv, b.cv]), torch.cat([x, b.x], dim=-1), mag)
    if op == "cat_batch":
        if not batch:
            return None
        cands = [b for b in pool if b.shape[1:] == a.shape[1:] and len(b.shape) == len(a.shape)]
        b = cands[int(rng.integers(len(cands)))]
        mag = max(a.magnitude, b.magnitude)
        return Node(cat([a.cv, b.cv], dim=0), torch.cat([x, b.x], dim=1), mag)
    if op == "reshape":
        numel = math.prod(batch)
        if numel < 2:
            return None
        new = (numel,) if len(batch) != 1 else ((2, numel // 2) if numel % 2 == 0 else (numel, 1))
        return Node(a.cv.reshape(*new, C), x.reshape(N_MC, *new, C), a.magnitude)
    if op == "expand":
        y = x.unsqueeze(1).expand(N_MC, 2, *a.shape)
        return Node(a.cv.expand(2, *a.shape), y, a.magnitude)
    if op == "to_detach":
        return Node(a.cv.to(DTYPE).detach(), x, a.magnitude)
    raise AssertionError(op)


def run_program(ops: list[str], seed: int, shape: tuple[int, ...]) -> list[Node]:
    rng = np.random.default_rng(seed)
    pool = [leaf(shape, rng)]
    if rng.random() < 0.5:
        pool.append(leaf(shape, rng))
    current = pool[-1]
    for op in ops:
        new = apply_op(op, current, pool, rng)
        if new is None or math.prod(new.shape) > MAX_ENTRIES:
            continue
        pool.append(new)
        current = new
    return pool


# ------------------------------------------------------------------------------ the checks

MAX_EXAMPLES = settings().max_examples
# per example: <= MAX_ENTRIES marginal checks of definition samples, as many of rsample output,
# and 4 pairs x 3 joint checks
CHECKS_PER_EXAMPLE = 2 * MAX_ENTRIES + 12
DELTA = split_delta(MAX_EXAMPLES * CHECKS_PER_EXAMPLE)


def entry(cv: CauchyVector, flat: int) -> CauchyVector:
    """The entry at flat position ``flat`` as a one-component vector (through the code's indexing)."""
    pos = np.unravel_index(flat, tuple(cv.shape))
    return cv[tuple(int(p) for p in pos[:-1])][..., int(pos[-1]) : int(pos[-1]) + 1]


def check_node(node: Node, rng: np.random.Generator) -> None:
    cv = node.cv
    n_entries = math.prod(cv.shape)
    eps = dkw_epsilon(N_MC, DELTA)
    loc = cv.loc.detach().reshape(-1).numpy()
    scale = cv.scale.detach().reshape(-1).numpy()
    assert np.all(scale >= 0) and np.all(np.isfinite(loc)) and np.all(np.isfinite(scale))
    x_def = node.x.reshape(N_MC, -1).numpy()
    gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
    x_code = cv.rsample((N_MC,), generator=gen).detach().reshape(N_MC, -1).numpy()
    m = node.magnitude
    for j in range(n_entries):
        stat = ks_against_law(x_def[:, j], loc[j], scale[j], m)
        assert stat <= eps, f"entry {j}: definition samples vs claimed marginal, KS {stat:.4f}"
        stat = ks_against_law(x_code[:, j], loc[j], scale[j], m)
        assert stat <= eps, f"entry {j}: rsample vs claimed marginal, KS {stat:.4f}"
    if n_entries < 2:
        return
    for _ in range(4):
        j, k = (int(v) for v in rng.choice(n_entries, size=2, replace=False))
        # 1) the law the code claims for the difference of two entries (its own algebra)
        diff = entry(cv, j) - entry(cv, k)
        stat = ks_against_law(x_def[:, j] - x_def[:, k], float(diff.loc), float(diff.scale), m)
        assert stat <= eps, f"entries {j}-{k}: definition vs claimed law of the difference"
        # 2) rsample's joint law against the definition (two-sample), on two statistics
        for stat_fn in (np.subtract, np.add):
            stat = ks_two_sample(
                stat_fn(x_def[:, j], x_def[:, k]), stat_fn(x_code[:, j], x_code[:, k]), m
            )
            assert stat <= 2 * eps, f"entries {j},{k}: rsample joint law, KS {stat:.4f}"


shapes = st.sampled_from([(1,), (3,), (4,), (2, 3), (3, 2), (2, 2, 2), (1, 2, 3)])


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    ops=st.lists(st.sampled_from(OPS), min_size=1, max_size=5),
    seed=st.integers(0, 2**32 - 1),
    shape=shapes,
)
def test_chains_of_operations_match_the_definition(ops, seed, shape):
    pool = run_program(ops, seed, shape)
    rng = np.random.default_rng(seed + 1)
    check_node(pool[-1], rng)


# ------------------------------------------------------------------------------ named properties


def _leaf(loc, scale) -> CauchyVector:
    return CauchyVector(torch.tensor(loc, dtype=DTYPE), torch.tensor(scale, dtype=DTYPE))


def _rvs(u: CauchyVector, rng: np.random.Generator) -> torch.Tensor:
    return cauchy_rvs(u.loc.numpy(), u.scale.numpy(), N_MC, rng)


def test_sum_of_two_images_of_one_vector_is_the_image_of_the_summed_weight_not_the_independent_sum():
    rng = np.random.default_rng(0)
    u = _leaf([0.5, -1.0, 2.0], [1.0, 2.0, 0.5])
    w1 = torch.tensor([[1.0, 2.0, -1.0], [0.5, 0.0, 3.0]], dtype=DTYPE)
    w2 = torch.tensor([[-0.5, -2.0, 2.0], [0.5, 1.0, -3.0]], dtype=DTYPE)
    lhs = u.linear(w1) + u.linear(w2)
    rhs = u.linear(w1 + w2)
    torch.testing.assert_close(lhs.loc, rhs.loc)
    torch.testing.assert_close(lhs.scale, rhs.scale)
    independent_rule = u.linear(w1).scale + u.linear(w2).scale
    assert bool((independent_rule >= 2 * lhs.scale).all())
    # Monte Carlo from the definition: W1 u + W2 u with one draw of u
    x = _rvs(u, rng)
    y = x @ w1.T + x @ w2.T
    delta = split_delta(2 * 2 + 2 * 2)
    eps = dkw_epsilon(N_MC, delta)
    sample = lhs.rsample((N_MC,), generator=torch.Generator().manual_seed(1))
    for j in range(2):
        assert ks_against_law(y[:, j].numpy(), float(lhs.loc[j]), float(lhs.scale[j])) <= eps
        assert ks_against_law(sample[:, j].numpy(), float(lhs.loc[j]), float(lhs.scale[j])) <= eps
        # the independent-sum rule is rejected by the same test: the test has power
        wrong = ks_against_law(y[:, j].numpy(), float(lhs.loc[j]), float(independent_rule[j]))
        assert wrong > 3 * eps


def test_composition_has_marginal_scales_abs_of_the_product():
    rng = np.random.default_rng(1)
    u = _leaf([0.0, 1.0, -2.0], [1.0, 0.1, 10.0])
    w1 = torch.tensor([[1.0, -1.0, 0.5], [2.0, 1.0, 0.0], [0.0, 3.0, -1.0]], dtype=DTYPE)
    w2 = torch.tensor([[1.0, 1.0, 0.0], [1.0, -2.0, 1.0]], dtype=DTYPE)
    s2 = u.linear(w1).linear(w2)
    torch.testing.assert_close(s2.scale, (w2 @ w1).abs() @ u.scale)
    assert not torch.allclose(s2.scale, w2.abs() @ w1.abs() @ u.scale)
    x = _rvs(u, rng) @ w1.T @ w2.T
    eps = dkw_epsilon(N_MC, split_delta(2))
    for j in range(2):
        assert ks_against_law(x[:, j].numpy(), float(s2.loc[j]), float(s2.scale[j])) <= eps


def test_joint_law_catches_dependence_errors_that_marginals_cannot_see():
    """S = W u with shared columns. The product of the marginals (an independence assumption)
    passes every per-component test, and fails these joint tests; rsample passes them."""
    rng = np.random.default_rng(2)
    u = _leaf([0.5, -1.0, 2.0, 0.0], [1.0, 2.0, 0.5, 3.0])
    w = torch.tensor([[1.0, 1.0, 0.0, -1.0], [1.0, 1.0, 2.0, -1.0]], dtype=DTYPE)
    s = u.linear(w)
    mutant = CauchyVector(s.loc, s.scale)  # right marginals, wrong joint law
    x_def = (_rvs(u, rng) @ w.T).numpy()
    gen = torch.Generator().manual_seed(3)
    x_code = s.rsample((N_MC,), generator=gen).numpy()
    x_mut = mutant.rsample((N_MC,), generator=gen).numpy()
    delta = split_delta(2 + 2 + 2 * 2)
    eps = dkw_epsilon(N_MC, delta)
    # marginals: both pass (per-component tests cannot tell them apart)
    for j in range(2):
        assert ks_two_sample(x_def[:, j], x_mut[:, j]) <= 2 * eps
    # S_1 - S_2 = (w_1 - w_2) u: Cauchy with scale |w_1 - w_2| scale by definition
    diff_scale = float((w[0] - w[1]).abs() @ u.scale)
    diff_loc = float((w[0] - w[1]) @ u.loc)
    assert ks_against_law(x_def[:, 0] - x_def[:, 1], diff_loc, diff_scale) <= eps
    assert ks_against_law(x_code[:, 0] - x_code[:, 1], diff_loc, diff_scale) <= eps
    assert ks_against_law(x_mut[:, 0] - x_mut[:, 1], diff_loc, diff_scale) > 3 * eps
    # P(S_1 > a, S_2 > b): Hoeffding on the joint exceedance
    a, b = float(s.loc[0]), float(s.loc[1]) + float(s.scale[1])
    h = binomial_epsilon(N_MC, delta)
    p_def = np.mean((x_def[:, 0] > a) & (x_def[:, 1] > b))
    p_code = np.mean((x_code[:, 0] > a) & (x_code[:, 1] > b))
    p_mut = np.mean((x_mut[:, 0] > a) & (x_mut[:, 1] > b))
    assert abs(p_def - p_code) <= 2 * h
    assert abs(p_def - p_mut) > 2 * h


def test_expand_shares_randomness():
    u = _leaf([0.0, 1.0, 2.0], [1.0, 2.0, 3.0])
    e = u.expand(4, 3)
    x = e.rsample((5,), generator=torch.Generator().manual_seed(0))
    assert bool((x == x[:, :1]).all())
    assert (e[0] - e[3]).scale.abs().max().item() == 0.0
    assert not e.is_independent
    one = u[..., 1:2].expand(2, 3)  # a single component broadcast to three
    y = one.rsample((4,), generator=torch.Generator().manual_seed(0))
    assert bool((y == y[..., :1]).all())


def test_indexing_keeps_track_of_sources():
    rng = np.random.default_rng(4)
    u = _leaf([[0.0, 1.0], [2.0, -1.0], [5.0, 0.5]], [[1.0, 2.0], [0.5, 3.0], [1e-2, 1e2]])
    twice = u[0] + u[0]
    torch.testing.assert_close(twice.scale, 2 * u.scale[0])
    torch.testing.assert_close(twice.loc, 2 * u.loc[0])
    gen = lambda: torch.Generator().manual_seed(7)  # noqa: E731
    torch.testing.assert_close(
        twice.rsample((3,), generator=gen()), 2 * u[0].rsample((3,), generator=gen())
    )
    diff = u[0] - u[1]
    torch.testing.assert_close(diff.scale, u.scale[0] + u.scale[1])
    x = _rvs(u, rng)
    eps = dkw_epsilon(N_MC, split_delta(4))
    for c in range(2):
        assert (
            ks_against_law(
                (x[:, 0, c] - x[:, 1, c]).numpy(), float(diff.loc[c]), float(diff.scale[c])
            )
            <= eps
        )
        assert (
            ks_against_law((2 * x[:, 0, c]).numpy(), float(twice.loc[c]), float(twice.scale[c]))
            <= eps
        )
    assert (u[0] - u[0]).scale.abs().max().item() == 0.0
    assert (u[-1] - u[2]).scale.abs().max().item() == 0.0


def test_cat_of_a_vector_with_itself_has_identical_halves():
    u = _leaf([0.0, 1.0, 2.0], [1.0, 2.0, 3.0])
    s = u.linear(torch.tensor([[1.0, -1.0, 0.0], [0.5, 0.5, 0.5]], dtype=DTYPE))
    both = cat([s, s])
    x = both.rsample((6,), generator=torch.Generator().manual_seed(0))
    assert torch.equal(x[..., :2], x[..., 2:])
    assert (both[..., :2] - both[..., 2:]).scale.abs().max().item() == 0.0
    rows = cat([u.expand(2, 3), u.expand(1, 3)], dim=0)
    y = rows.rsample((3,), generator=torch.Generator().manual_seed(1))
    assert bool((y == y[:, :1]).all())


def test_dtype_moves_and_detach_keep_dependence():
    u = CauchyVector(torch.tensor([0.5, -1.0, 2.0]), torch.tensor([1.0, 2.0, 0.5]))
    w = torch.tensor([[1.0, 1.0, 0.0], [1.0, -1.0, 2.0]])
    s = u.linear(w)
    s64 = s.to(torch.float64)
    assert s64.dtype == torch.float64 and s64.loc.dtype == torch.float64
    torch.testing.assert_close(s64.scale, s.scale.double())
    # the components stay dependent, and the moved vector is the *same* random variable
    torch.testing.assert_close(
        (s64[..., :1] - s64[..., 1:]).scale, (s[..., :1] - s[..., 1:]).scale.double()
    )
    assert (s64 - s).scale.abs().max().item() == 0.0
    assert (s.detach() - s).scale.abs().max().item() == 0.0
    gen = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    a = s.rsample((4,), generator=gen())
    b = s64.rsample((4,), generator=gen())
    c = s.detach().rsample((4,), generator=gen())
    torch.testing.assert_close(a.double(), b, rtol=1e-6, atol=1e-5)
    assert torch.equal(a, c)
    joint = cat([s, s.detach()]).rsample((5,), generator=gen())
    assert torch.equal(joint[..., :2], joint[..., 2:])
    # gradients: detach cuts them, the original keeps them
    loc = torch.zeros(3, requires_grad=True)
    v = CauchyVector(loc, torch.ones(3)).linear(w)
    assert not v.detach().loc.requires_grad and v.loc.requires_grad


@pytest.mark.parametrize("batch", [(3,), (2, 3)])
def test_batched_weights(batch):
    rng = np.random.default_rng(5)
    u = leaf((*batch, 4), rng, spread=1.0)
    w = weight(2, 4, rng, batch=batch)
    s = u.cv.linear(w)
    assert s.shape == (*batch, 2)
    for idx in np.ndindex(*batch):
        torch.testing.assert_close(s.scale[idx], w[idx].abs() @ u.cv.scale[idx])
        torch.testing.assert_close(s.loc[idx], w[idx] @ u.cv.loc[idx])
    x = (u.x.unsqueeze(-2) * w).sum(-1).reshape(N_MC, -1).numpy()
    flat_loc, flat_scale = s.loc.reshape(-1), s.scale.reshape(-1)
    eps = dkw_epsilon(N_MC, split_delta(x.shape[1]))
    for j in range(x.shape[1]):
        assert ks_against_law(x[:, j], float(flat_loc[j]), float(flat_scale[j])) <= eps
    # a weight batch that broadcasts over the vector's batch
    w2 = weight(3, 4, rng, batch=(1,) * len(batch))
    torch.testing.assert_close(u.cv.linear(w2).scale, u.cv.linear(w2.reshape(3, 4)).scale)


def test_scalar_and_tensor_arithmetic_closed_forms():
    u = _leaf([[1.0, -2.0], [0.5, 3.0]], [[1.0, 2.0], [0.25, 4.0]])
    a = torch.tensor([-2.0, 0.5], dtype=DTYPE)
    torch.testing.assert_close((a * u).loc, a * u.loc)
    torch.testing.assert_close((u * a).scale, a.abs() * u.scale)
    torch.testing.assert_close((-u).loc, -u.loc)
    torch.testing.assert_close((-u).scale, u.scale)
    torch.testing.assert_close((u / -4.0).scale, u.scale / 4)
    torch.testing.assert_close((3.0 - u).loc, 3.0 - u.loc)
    torch.testing.assert_close((u + torch.ones(2, 2, dtype=DTYPE)).loc, u.loc + 1)
    v = _leaf([0.0, 1.0], [2.0, 2.0])
    torch.testing.assert_close((u - v).scale, u.scale + v.scale)  # independent vectors
    torch.testing.assert_close((u + v).loc, u.loc + v.loc)
    # v broadcasts over u's rows: one entry of v feeds two entries of the sum
    assert not (u + v).is_independent
    w = _leaf([[0.0, 1.0], [2.0, 3.0]], [[1.0, 1.0], [1.0, 1.0]])
    assert (u + w).is_independent and (u - 2.0 * u).is_independent and (u * a + 1.0).is_independent
    assert torch.equal((u * 0.0).scale, torch.zeros(2, 2, dtype=DTYPE))


def test_marginal_algebra_property_examples_with_plain_reference():
    """Closed forms of a longer chain against a literal per-source computation (no sampling)."""
    g = torch.Generator().manual_seed(9)
    loc = torch.randn(5, 3, generator=g, dtype=DTYPE)
    scale = torch.rand(5, 3, generator=g, dtype=DTYPE) + 0.1
    u = CauchyVector(loc, scale)
    w1 = torch.randn(4, 3, generator=g, dtype=DTYPE)
    w2 = torch.randn(2, 4, generator=g, dtype=DTYPE)
    noise = CauchyVector(torch.zeros(4, dtype=DTYPE), torch.full((4,), 0.3, dtype=DTYPE))
    y = (u.linear(w1) + noise).linear(w2) - u[..., 1:2].expand(5, 2) * 2.0
    # literal: y = w2 (w1 u + n) - 2 [u_1, u_1]; per source u: coefficient matrix per entry
    coef_u = w2 @ w1 - 2.0 * torch.tensor([[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]], dtype=DTYPE)
    expected_scale = scale @ coef_u.abs().T + (w2.abs() @ torch.full((4,), 0.3, dtype=DTYPE))
    torch.testing.assert_close(y.scale, expected_scale)
    torch.testing.assert_close(y.loc, loc @ coef_u.T)


@pytest.mark.parametrize(
    ("vec_dtype", "w_dtype", "bias_dtype"),
    [
        (torch.float32, torch.float64, None),
        (torch.float64, torch.float32, None),
        (torch.float32, torch.bfloat16, None),
        (torch.bfloat16, torch.float32, None),
        (torch.float16, torch.bfloat16, None),
        (torch.float32, torch.int64, None),
        (torch.float64, torch.int32, torch.float32),
        (torch.float32, torch.bool, torch.float64),
    ],
)
def test_linear_promotes_dtypes_like_tensor_arithmetic(vec_dtype, w_dtype, bias_dtype):
    """A weight (or bias) of another dtype promotes like ``+`` and ``cat`` (torch.promote_types):
    the marginals and draws come out in that dtype, against a float64 reference."""
    gen = torch.Generator().manual_seed(0)
    loc = torch.randn(4, 3, generator=gen).to(vec_dtype)
    scale = (torch.rand(4, 3, generator=gen) + 0.5).to(vec_dtype)
    w = (torch.randn(2, 3, generator=gen) * 3).round().to(w_dtype)
    b = None if bias_dtype is None else torch.randn(2, generator=gen).to(bias_dtype)
    expected = torch.promote_types(vec_dtype, w_dtype)
    if b is not None:
        expected = torch.promote_types(expected, b.dtype)
    u = CauchyVector(loc, scale)
    y = u.linear(w, b)
    assert y.dtype == expected and y.loc.dtype == expected and y.scale.dtype == expected
    assert y.rsample((5,), generator=gen).dtype == expected
    ref_loc = loc.double() @ w.double().T + (0.0 if b is None else b.double())
    ref_scale = scale.double() @ w.double().abs().T
    tol = {"rtol": 2e-2, "atol": 2e-2} if torch.finfo(expected).bits < 32 else {}
    torch.testing.assert_close(y.loc.double(), ref_loc, **tol, check_dtype=False)
    torch.testing.assert_close(y.scale.double(), ref_scale, **tol, check_dtype=False)
    # the cast vector keeps its sources: the image minus the same image in the vector's own dtype
    # is 0 up to the rounding of the narrower copy (independent sources would give 2 * scale)
    same = u.linear(w.to(vec_dtype) if w.is_floating_point() else w)
    diff = (y - same).scale.double()
    eps = max(torch.finfo(t).eps for t in (vec_dtype, w_dtype) if t.is_floating_point)
    bound = 4 * eps * ref_scale
    assert bool((diff <= bound).all()), (diff, bound)


def test_linear_refuses_a_complex_weight_naming_the_dtypes():
    u = CauchyVector(torch.zeros(3), torch.ones(3))
    with pytest.raises(ValueError, match=r"weight must be a real tensor.*complex64.*float32"):
        u.linear(torch.ones(2, 3, dtype=torch.complex64))
    with pytest.raises(ValueError, match=r"bias must be a real tensor.*complex128"):
        u.linear(torch.ones(2, 3), torch.zeros(2, dtype=torch.complex128))
