"""Every inference mode of ``Action`` against Monte Carlo from its definition.

For each mode the test writes the mode's generative definition literally — draw the individual
``u`` and the exogenous noise with an independent sampler (``torch.distributions.Cauchy``, which
uses ``Tensor.cauchy_``, not the library's sampler), form ``s = (u + noise) @ W.T + b`` in float64
— and compares the empirical law of every class score ``s_k`` (and of the regression value) with
the layer's closed form: a Kolmogorov-Smirnov distance against ``Cauchy(loc_S_k, scale_S_k)``
bounded by DKW, and the frequency of the one-vs-rest event ``s_k > C_k`` against ``P_k`` bounded
by Hoeffding. Tolerances give a false-failure rate of at most 1e-6 per test (union bound), with
fixed seeds. Each law check also asserts that the same samples *reject* the natural wrong
formulas (noise forgotten, temperature forgotten, noise in the wrong place), so the tests
demonstrably have the power to fail.

For the modes that draw (sampling, individual, shared), the draw itself is checked to follow its
law, and the decision distribution is checked conditionally on the draw.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats as sps

from cauchylin import CauchyVector
from cauchylin.nn import (
    MODES,
    Action,
    draw_eps_noise,
    draw_eps_seed,
    effective_mode,
    sample_compatible,
)
from tests.devices import HAS_CUDA
from tests.stats import FALSE_FAILURE_RATE, binomial_epsilon, dkw_epsilon, split_delta

C, V = 3, 4
N_MC = 40_000


# ------------------------------------------------------------------------------------------ setup


def make_action(*, seed: int = 0) -> Action:
    """A small Action with mixed-sign weights, noise comparable to scale_U and per-class thresholds."""
    g = torch.Generator().manual_seed(seed)
    act = Action(C, V, threshold=0.0, threshold_per_class=True)
    with torch.no_grad():
        act.classifier.weight.copy_(torch.randn(V, C, generator=g))
        act.classifier.bias.copy_(torch.randn(V, generator=g))
        act.regressor.weight.copy_(torch.randn(1, C, generator=g))
        act.regressor.bias.copy_(torch.randn(1, generator=g))
        # mixed signs: only |b_noise| may matter
        act.b_noise.copy_(torch.tensor([0.8, -1.2, 0.5]))
        act.threshold.copy_(torch.tensor([0.5, -1.0, 1.5, 0.0]))
    return act


def make_U() -> CauchyVector:
    loc = torch.tensor([[0.3, -0.7, 1.1], [-1.5, 0.4, 0.2]])
    scale = torch.tensor([[0.6, 0.9, 0.4], [1.3, 0.5, 0.7]])
    return CauchyVector(loc, scale)


def heads(act: Action) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """W [V+1, C], b [V+1] (classes then the regression value), thresholds [V] in float64."""
    W = torch.cat([act.classifier.weight, act.regressor.weight]).detach().double().numpy()
    b = torch.cat([act.classifier.bias, act.regressor.bias]).detach().double().numpy()
    thr = act.threshold.detach().double().expand(V).numpy()
    return W, b, thr


def cauchy_draws(loc: np.ndarray, scale: np.ndarray, n: int, seed: int) -> np.ndarray:
    """``n`` independent draws of Cauchy(loc, scale) (any shape) with torch.distributions."""
    torch.manual_seed(seed)
    dist = torch.distributions.Cauchy(
        torch.as_tensor(loc, dtype=torch.float64), torch.as_tensor(scale, dtype=torch.float64)
    )
    return dist.sample((n,)).numpy()


def ks_distance(samples: np.ndarray, loc: float, scale: float) -> float:
    """sup_x |F_n(x) - F(x)| for the Cauchy(loc, scale) cdf (scipy)."""
    x = np.sort(samples)
    n = x.size
    F = sps.cauchy.cdf(x, loc=loc, scale=scale)
    return float(max((np.arange(1, n + 1) / n - F).max(), (F - np.arange(n) / n).max()))


def ks_uniform(samples: np.ndarray) -> float:
    x = np.sort(samples)
    n = x.size
    return float(max((np.arange(1, n + 1) / n - x).max(), (x - np.arange(n) / n).max()))


def check_law(
    s: np.ndarray,
    out,  # ActionOutput
    index: tuple[int, ...],
    thr: np.ndarray,
    delta: float,
    wrong_scales: list[np.ndarray] | None = None,
    wrong_locs: list[np.ndarray] | None = None,
) -> None:
    """``s``: [n, V+1] literal draws of (S, Y) at batch position ``index``.

    Checks the law of each column against the layer's (loc, scale) and each OvR frequency against
    the layer's P_k; each wrong (loc, scale) alternative must be rejected by at least one column.
    """
    n = s.shape[0]
    loc = torch.cat([out.loc_S[index], out.loc_Y[index].reshape(1)]).detach().double().numpy()
    scale = torch.cat([out.scale_S[index], out.scale_Y[index].reshape(1)]).detach().double().numpy()
    probs = out.ovr_probs()[index].detach().double().numpy()
    eps_ks = dkw_epsilon(n, delta)
    eps_p = binomial_epsilon(n, delta)
    for k in range(V + 1):
        d = ks_distance(s[:, k], loc[k], scale[k])
        assert d <= eps_ks, f"column {k}: KS {d:.4f} > {eps_ks:.4f}"
    for k in range(V):
        freq = float((s[:, k] > thr[k]).mean())
        assert abs(freq - probs[k]) <= eps_p, f"class {k}: freq {freq:.4f} vs P {probs[k]:.4f}"
    # Power: the same samples reject every wrong formula offered.
    alternatives = [(loc, ws) for ws in (wrong_scales or [])]
    alternatives += [(wl, scale) for wl in (wrong_locs or [])]
    for alt_loc, alt_scale in alternatives:
        worst = max(ks_distance(s[:, k], alt_loc[k], alt_scale[k]) for k in range(V + 1))
        assert worst > 3 * eps_ks, f"the test would not detect a wrong formula (KS {worst:.4f})"


def n_checks(positions: int = 1) -> float:
    # per position: V+1 KS checks and V OvR checks
    return split_delta(positions * (2 * V + 1))


# ------------------------------------------------------------------------------------------ modes


def test_causal_mode_matches_monte_carlo():
    act, U = make_action(), make_U()
    W, b, thr = heads(act)
    out = act(U, "causal")
    assert out.mode == "causal"
    loc_U, scale_U = U.loc.detach().double().numpy(), U.scale.detach().double().numpy()
    delta = n_checks(2)
    for i in range(2):
        u = cauchy_draws(loc_U[i], scale_U[i], N_MC, seed=10 + i)
        s = u @ W.T + b  # U' = U: no noise at all
        noisy_scale = (scale_U[i] + np.abs(act.b_noise.detach().double().numpy())) @ np.abs(W).T
        check_law(s, out, (i,), thr, delta, wrong_scales=[noisy_scale])


def test_standard_mode_matches_monte_carlo():
    T = 1.7
    act, U = make_action(), make_U()
    W, b, thr = heads(act)
    out = act(U, "standard", T)
    assert out.mode == "standard"
    loc_U, scale_U = U.loc.detach().double().numpy(), U.scale.detach().double().numpy()
    nb = np.abs(act.b_noise.detach().double().numpy())
    delta = n_checks(2)
    for i in range(2):
        u = cauchy_draws(loc_U[i], scale_U[i], N_MC, seed=20 + i)
        noise = cauchy_draws(np.zeros(C), T * nb, N_MC, seed=30 + i)
        s = (u + noise) @ W.T + b
        check_law(
            s,
            out,
            (i,),
            thr,
            delta,
            wrong_scales=[
                scale_U[i] @ np.abs(W).T,  # noise forgotten
                (scale_U[i] + nb) @ np.abs(W).T,  # temperature forgotten
                np.abs(scale_U[i] @ W.T + T * nb @ W.T),  # |.| outside the sum
            ],
        )


def test_standard_mode_is_the_default_and_matches_an_explicit_sum_of_vectors():
    act, U = make_action(), make_U()
    default = act(U)
    explicit = act(U, "standard", 1.0)
    assert default.mode == "standard"
    torch.testing.assert_close(default.loc_S, explicit.loc_S, rtol=0, atol=0)
    torch.testing.assert_close(default.scale_S, explicit.scale_S, rtol=0, atol=0)


def test_sampling_mode_draw_follows_cauchy_and_scales_with_temperature():
    T = 2.5
    act = make_action()
    n = N_MC
    loc = torch.full((n, C), 0.25)
    U = CauchyVector(loc, torch.full((n, C), 0.5))
    g = torch.Generator().manual_seed(7)
    Up = act.decision_input(U, "sampling", T, generator=g)
    nb = act.b_noise.detach().abs()
    eps = ((Up.loc - loc) / (T * nb)).detach().double().numpy()
    # the scale is untouched in sampling mode
    torch.testing.assert_close(Up.scale, U.scale, rtol=0, atol=0)
    delta = split_delta(2 * C)
    for j in range(C):
        d = ks_distance(eps[:, j], 0.0, 1.0)
        assert d <= dkw_epsilon(n, delta)
        # power: a forgotten temperature would make the recovered eps Cauchy(0, 1/T)
        assert ks_distance(eps[:, j], 0.0, 1.0 / T) > 3 * dkw_epsilon(n, delta)
    # positions and components are independent draws: pairs (j, j') show no dependence
    # (the fraction of concordant signs is 1/2 for independent symmetric draws)
    concordant = float((np.sign(eps[:, 0]) == np.sign(eps[:, 1])).mean())
    assert abs(concordant - 0.5) <= binomial_epsilon(n, delta)


def test_sampling_mode_conditional_law_given_the_draw():
    T = 1.4
    act, U = make_action(), make_U()
    W, b, thr = heads(act)
    out = act(U, "sampling", T, generator=torch.Generator().manual_seed(11))
    assert out.mode == "sampling"
    # The documented draw: eps = draw_eps_noise(U.shape, generator=...) with the same seed.
    eps = (
        draw_eps_noise(U.shape, generator=torch.Generator().manual_seed(11))
        .detach()
        .double()
        .numpy()
    )
    loc_U, scale_U = U.loc.detach().double().numpy(), U.scale.detach().double().numpy()
    nb = np.abs(act.b_noise.detach().double().numpy())
    delta = n_checks(2)
    for i in range(2):
        u = cauchy_draws(loc_U[i], scale_U[i], N_MC, seed=40 + i)
        s = (u + T * nb * eps[i]) @ W.T + b
        check_law(
            s,
            out,
            (i,),
            thr,
            delta,
            wrong_scales=[(scale_U[i] + T * nb) @ np.abs(W).T],  # noise also in the scale
            wrong_locs=[
                np.concatenate([loc_U[i] @ W.T[:, :V], loc_U[i] @ W.T[:, V:]]) + b  # no shift
            ],
        )


def test_sampling_mode_generator_reproducibility():
    act, U = make_action(), make_U()

    def run(seed: int) -> torch.Tensor:
        return act(U, "sampling", 1.0, generator=torch.Generator().manual_seed(seed)).loc_S

    assert torch.equal(run(5), run(5))
    assert not torch.equal(run(5), run(6))
    # without a generator the global RNG is used
    torch.manual_seed(3)
    a = act(U, "sampling").loc_S
    torch.manual_seed(3)
    assert torch.equal(a, act(U, "sampling").loc_S)


def test_compatible_mode_logits_and_scales():
    act, U = make_action(), make_U()
    out = act(U, "compatible", 0.5)
    std = act(U, "standard", 1.0)
    assert out.mode == "compatible"
    assert torch.equal(out.logits, std.loc_S)
    assert torch.equal(out.logits, act(U, "causal").loc_S)
    # S is computed as in standard mode (training noise, T = 1); T is the softmax temperature
    assert torch.equal(out.scale_S, std.scale_S)
    # literal: loc_S = W loc_U + b
    W, b, _ = heads(act)
    expected = U.loc.detach().double().numpy() @ W[:V].T + b[:V]
    np.testing.assert_allclose(out.logits.detach().double().numpy(), expected, rtol=1e-6)
    assert torch.equal(out.predict(), out.logits.argmax(-1))
    # compatible mode at T = 0 stays compatible (greedy decoding), it is not the causal mode
    assert effective_mode("compatible", 0.0) == "compatible"
    assert torch.equal(
        act(U, "compatible", 0.0).next_token(), out.logits.argmax(-1)
    )  # greedy at T = 0


def test_individual_mode_draw_follows_cauchy_with_temperature_scale():
    T = 1.3
    act = make_action()
    n = N_MC
    loc = torch.tensor([0.2, -3.0, 5.0]).expand(n, C)
    scale = torch.tensor([0.5, 2.0, 0.1]).expand(n, C)
    U = CauchyVector(loc, scale)
    Up = act.decision_input(U, "individual", T, generator=torch.Generator().manual_seed(8))
    u = Up.loc.detach().double().numpy()
    # U' = Cauchy(u, |b_noise|): its scale is the exogenous noise only
    torch.testing.assert_close(Up.scale, act.b_noise.detach().abs().expand(n, C))
    delta = split_delta(2 * C)
    for j in range(C):
        d = ks_distance(u[:, j], float(loc[0, j]), T * float(scale[0, j]))
        assert d <= dkw_epsilon(n, delta)
        # power: without the temperature the draw would be Cauchy(loc, scale)
        assert ks_distance(u[:, j], float(loc[0, j]), float(scale[0, j])) > 3 * dkw_epsilon(
            n, delta
        )


def test_individual_mode_conditional_law_given_the_individual():
    act, U = make_action(), make_U()
    W, b, thr = heads(act)
    out = act(U, "individual", 1.0, generator=torch.Generator().manual_seed(9))
    assert out.mode == "individual"
    u = out.U_prime.loc.detach().double().numpy()  # the drawn individual, one per position
    nb = np.abs(act.b_noise.detach().double().numpy())
    scale_U = U.scale.detach().double().numpy()
    delta = n_checks(2)
    for i in range(2):
        noise = cauchy_draws(np.zeros(C), nb, N_MC, seed=50 + i)
        s = (u[i] + noise) @ W.T + b
        check_law(
            s,
            out,
            (i,),
            thr,
            delta,
            wrong_scales=[(scale_U[i] + nb) @ np.abs(W).T],  # the individual's spread kept
        )


def test_individual_mode_two_stage_law():
    """E_u[P_k(u)] over many individual-mode draws equals P(s_k > C_k) of the two-stage process."""
    T = 0.8
    act = make_action()
    W, b, thr = heads(act)
    m = 20_000
    loc0 = torch.tensor([0.3, -0.7, 1.1])
    scale0 = torch.tensor([0.6, 0.9, 0.4])
    U = CauchyVector(loc0.expand(m, C), scale0.expand(m, C))
    out = act(U, "individual", T, generator=torch.Generator().manual_seed(12))
    mean_p = out.ovr_probs().double().mean(0).detach().numpy()
    # literal: u ~ Cauchy(loc, T scale), then noise ~ Cauchy(0, |b_noise|)
    u = cauchy_draws(
        loc0.detach().double().numpy(), T * scale0.detach().double().numpy(), N_MC, seed=60
    )
    noise = cauchy_draws(np.zeros(C), np.abs(act.b_noise.detach().double().numpy()), N_MC, seed=61)
    s = (u + noise) @ W.T + b
    delta = split_delta(2 * V)
    for k in range(V):
        freq = float((s[:, k] > thr[k]).mean())
        tol = binomial_epsilon(N_MC, delta) + binomial_epsilon(m, delta)
        assert abs(freq - mean_p[k]) <= tol


def test_individual_mode_respects_the_joint_law_of_a_dependent_U():
    """After a mixing map two components may be the same variable: the drawn u must agree."""
    act = make_action()
    base = CauchyVector(torch.tensor([[0.5, -0.2, 1.0]]), torch.tensor([[1.0, 0.3, 2.0]]))
    M = torch.tensor([[1.0, 2.0, 0.0], [1.0, 2.0, 0.0], [0.0, 0.0, 1.0]])  # rows 0 and 1 equal
    U = base.linear(M)
    assert not U.is_independent
    for seed in range(5):
        Up = act.decision_input(U, "individual", 1.0, generator=torch.Generator().manual_seed(seed))
        u = Up.loc[0]
        assert torch.allclose(u[0], u[1])


def test_shared_individual_formula_and_reuse_on_two_inputs():
    T = 0.6
    act = make_action()
    eps = draw_eps_seed((C,), generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    U_a = make_U()
    U_b = CauchyVector(torch.tensor([[4.0, -2.0, 0.0]]), torch.tensor([[0.1, 3.0, 1.0]]))
    out_a = act(U_a, "shared_individual", T, eps_seed=eps)
    out_b = act(U_b, "shared_individual", T, eps_seed=eps)
    assert out_a.mode == "shared_individual"
    q = np.tan(np.pi * (eps.numpy() - 0.5))  # numpy, independent of the library
    for U, out in ((U_a, out_a), (U_b, out_b)):
        expected = U.loc.detach().double().numpy() + T * U.scale.detach().double().numpy() * q
        np.testing.assert_allclose(
            out.U_prime.loc.detach().double().numpy(), expected, rtol=1e-5, atol=1e-6
        )
        torch.testing.assert_close(out.U_prime.scale, act.b_noise.detach().abs().expand(U.shape))
        # the same individual: the same standardised position in each posterior
        z = (out.U_prime.loc - U.loc) / (T * U.scale)
        np.testing.assert_allclose(
            z.detach().double().numpy(), np.broadcast_to(q, z.shape), rtol=1e-4
        )
    # replaying gives the same result bit for bit
    assert torch.equal(act(U_a, "shared_individual", T, eps_seed=eps).loc_S, out_a.loc_S)


def test_shared_individual_conditional_law_given_eps_seed():
    act, U = make_action(), make_U()
    W, b, thr = heads(act)
    eps = torch.tensor([0.9, 0.2, 0.55])
    out = act(U, "shared_individual", eps_seed=eps)
    u = U.loc.detach().double().numpy() + U.scale.detach().double().numpy() * np.tan(
        np.pi * (eps.detach().double().numpy() - 0.5)
    )
    nb = np.abs(act.b_noise.detach().double().numpy())
    scale_U = U.scale.detach().double().numpy()
    delta = n_checks(2)
    for i in range(2):
        noise = cauchy_draws(np.zeros(C), nb, N_MC, seed=70 + i)
        s = (u[i] + noise) @ W.T + b
        check_law(s, out, (i,), thr, delta, wrong_scales=[(scale_U[i] + nb) @ np.abs(W).T])


def test_shared_individual_with_random_eps_seed_draws_the_posterior():
    """eps_seed ~ U(0,1) (draw_eps_seed) makes u_t ~ Cauchy(loc_U, T scale_U)."""
    T = 1.5
    act = make_action()
    n = N_MC
    eps = draw_eps_seed((n, C), generator=torch.Generator().manual_seed(13))
    loc = torch.tensor([1.0, -1.0, 0.0])
    scale = torch.tensor([0.5, 1.0, 2.0])
    U = CauchyVector(loc.expand(n, C), scale.expand(n, C))
    u = act.decision_input(U, "shared_individual", T, eps_seed=eps).loc.detach().double().numpy()
    delta = split_delta(2 * C)
    for j in range(C):
        assert ks_uniform(eps[:, j].detach().double().numpy()) <= dkw_epsilon(n, delta)
        assert ks_distance(u[:, j], float(loc[j]), T * float(scale[j])) <= dkw_epsilon(n, delta)


def test_shared_noise_formula_reuse_and_conditional_law():
    T = 1.4
    act, U = make_action(), make_U()
    W, b, thr = heads(act)
    eps = torch.tensor([[-0.7, 2.5, 0.1]])  # [1, C] broadcasts over positions
    out = act(U, "shared_noise", T, eps_noise=eps)
    assert out.mode == "shared_noise"
    nb = np.abs(act.b_noise.detach().double().numpy())
    shift = T * nb * eps.detach().double().numpy()[0]
    loc_U, scale_U = U.loc.detach().double().numpy(), U.scale.detach().double().numpy()
    np.testing.assert_allclose(out.U_prime.loc.detach().double().numpy(), loc_U + shift, rtol=1e-6)
    torch.testing.assert_close(out.U_prime.scale, U.scale)
    # reuse on another input: the same systematic shift
    U_b = CauchyVector(torch.tensor([[9.0, 8.0, 7.0]]), torch.tensor([[1.0, 1.0, 1.0]]))
    out_b = act(U_b, "shared_noise", T, eps_noise=eps)
    np.testing.assert_allclose(
        (out_b.U_prime.loc - U_b.loc).detach().double().numpy()[0], shift, rtol=1e-5, atol=1e-6
    )
    delta = n_checks(2)
    for i in range(2):
        u = cauchy_draws(loc_U[i], scale_U[i], N_MC, seed=80 + i)
        s = (u + shift) @ W.T + b
        check_law(
            s,
            out,
            (i,),
            thr,
            delta,
            wrong_scales=[(scale_U[i] + T * nb) @ np.abs(W).T],
            wrong_locs=[np.concatenate([(loc_U[i] + shift / T) @ W.T[:, :V], [0.0]]) + b],
        )


# ------------------------------------------------------------------------------ mode selection


@pytest.mark.parametrize("mode", [m for m in MODES if m != "compatible"])
def test_temperature_zero_is_the_causal_mode(mode: str):
    act, U = make_action(), make_U()
    kwargs = {}
    if mode == "shared_individual":
        kwargs["eps_seed"] = torch.full((C,), 0.3)
    if mode == "shared_noise":
        kwargs["eps_noise"] = torch.ones(C)
    out = act(U, mode, 0.0, generator=torch.Generator().manual_seed(0), **kwargs)
    causal = act(U, "causal")
    assert out.mode == "causal"
    assert torch.equal(out.loc_S, causal.loc_S)
    assert torch.equal(out.scale_S, causal.scale_S)
    assert torch.equal(out.loc_Y, causal.loc_Y)


def test_unknown_mode_and_bad_temperature():
    act, U = make_action(), make_U()
    with pytest.raises(ValueError, match="shared_noise"):  # the message lists the modes
        act(U, "greedy")
    with pytest.raises(ValueError, match="temperature"):
        act(U, "standard", -1.0)
    with pytest.raises(ValueError, match="temperature"):
        act(U, "standard", float("nan"))
    with pytest.raises(ValueError, match="components"):
        act(CauchyVector(torch.zeros(2, C + 1), torch.ones(2, C + 1)))


@pytest.mark.parametrize(
    ("mode", "name"), [("shared_individual", "eps_seed"), ("shared_noise", "eps_noise")]
)
def test_shared_modes_require_a_well_shaped_draw(mode: str, name: str):
    act, U = make_action(), make_U()  # U: [2, C]
    for T in (1.0, 0.0):
        with pytest.raises(ValueError, match=name):
            act(U, mode, T)
    good = torch.full((C,), 0.4)
    for bad in (torch.full((C + 1,), 0.4), torch.full((5, C), 0.4), torch.full((2, 2, C), 0.4)):
        with pytest.raises(ValueError, match=name):
            act(U, mode, **{name: bad})
    with pytest.raises(ValueError, match=name):
        act(U, mode, **{name: [0.4] * C})
    act(U, mode, **{name: good})  # [C]
    act(U, mode, **{name: good.expand(2, C)})  # U's own shape
    U3 = CauchyVector(torch.zeros(2, 5, C), torch.ones(2, 5, C))
    act(U3, mode, **{name: torch.full((2, 1, C), 0.4)})  # one draw per sequence


def test_shared_draw_values_are_validated():
    act, U = make_action(), make_U()
    for bad in (0.0, 1.0, -0.1, float("nan")):
        eps = torch.tensor([0.5, bad, 0.5])
        with pytest.raises(ValueError, match="eps_seed"):
            act(U, "shared_individual", eps_seed=eps)
    with pytest.raises(ValueError, match="eps_noise"):
        act(U, "shared_noise", eps_noise=torch.tensor([0.0, math.inf, 1.0]))


def test_decoding_for_rows_builds_the_shared_draw_once_per_row():
    """The draw of a sequence-level mode: the given one, [C] in every row or [B, C] as it is,
    else one fresh draw per row from the generator; eps_seed held in float64."""
    from cauchylin.nn.modes import Decoding

    eps = torch.tensor([0.2, 0.5, 0.9])
    d = Decoding.for_rows("shared_individual", rows=2, size=C, eps_seed=eps)
    assert d.draw.shape == (2, C) and d.draw.dtype == torch.float64
    assert torch.equal(d.draws["eps_seed"], eps.double().expand(2, C))
    own = torch.randn(2, C)
    d = Decoding.for_rows("shared_noise", rows=2, size=C, eps_noise=own, dtype=torch.float64)
    assert torch.equal(d.draw, own.double()) and list(d.draws) == ["eps_noise"]
    for bad in (torch.full((1, C), 0.5), torch.full((3, C), 0.5), torch.full((C + 1,), 0.5)):
        with pytest.raises(ValueError, match="eps_seed has shape"):
            Decoding.for_rows("shared_individual", rows=2, size=C, eps_seed=bad)
    with pytest.raises(ValueError, match="eps_seed must lie in the open interval"):
        Decoding.for_rows("shared_individual", rows=2, size=C, eps_seed=torch.ones(C))
    # fresh: from the generator, one draw per row, reproducible
    first = Decoding.for_rows(
        "shared_individual", rows=2, size=C, generator=torch.Generator().manual_seed(5)
    ).draw
    again = draw_eps_seed((2, C), generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    assert torch.equal(first, again) and not torch.equal(first[0], first[1])
    noise = Decoding.for_rows("shared_noise", 0.0, rows=4, size=C, dtype=torch.bfloat16)
    assert noise.draw.shape == (4, C) and noise.draw.dtype == torch.bfloat16
    assert noise.runs.name == "causal"  # T = 0: drawn all the same, so a loop can replay it
    plain = Decoding.for_rows("sampling", rows=2, size=C)
    assert plain.draw is None and plain.draws == {}


# ---------------------------------------------------------------------------------------- draws


def test_draw_eps_seed_is_uniform_on_the_open_interval():
    n = N_MC
    eps = draw_eps_seed((n,), generator=torch.Generator().manual_seed(1))
    assert eps.dtype == torch.get_default_dtype()
    assert bool(((eps > 0) & (eps < 1)).all())
    assert ks_uniform(eps.detach().double().numpy()) <= dkw_epsilon(n, FALSE_FAILURE_RATE)
    same = draw_eps_seed((n,), generator=torch.Generator().manual_seed(1))
    assert torch.equal(eps, same)
    # the clamp keeps even float16 strictly inside (0, 1)
    half = draw_eps_seed((10_000,), generator=torch.Generator().manual_seed(2), dtype=torch.float16)
    assert bool(((half > 0) & (half < 1)).all())
    assert torch.isfinite(torch.tan(math.pi * (half.double() - 0.5))).all()


def test_draw_eps_noise_is_standard_cauchy():
    n = N_MC
    eps = draw_eps_noise((n,), generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    assert eps.dtype == torch.float64 and bool(torch.isfinite(eps).all())
    delta = split_delta(2)
    assert ks_distance(eps.numpy(), 0.0, 1.0) <= dkw_epsilon(n, delta)
    assert ks_distance(eps.numpy(), 0.0, 1.3) > 3 * dkw_epsilon(n, delta)  # power


# ------------------------------------------------------------------------- compatible sampling


def _expected_filtered(logits: np.ndarray, T: float, top_k: int | None, top_p: float | None):
    """Reference top-k / top-p distribution, written independently with numpy loops."""
    p = np.exp((logits - logits.max()) / T)
    p = p / p.sum()
    keep = np.ones_like(p, dtype=bool)
    if top_k is not None:
        kth = np.sort(logits)[::-1][min(top_k, len(logits)) - 1]
        keep &= logits >= kth
    q = np.where(keep, p, 0.0)
    q = q / q.sum()
    if top_p is not None:
        order = np.argsort(-q, kind="stable")
        mass = 0.0
        kept = np.zeros_like(keep)
        for idx in order:
            if mass >= top_p:
                break
            kept[idx] = True
            mass += q[idx]
        q = np.where(kept, q, 0.0)
        q = q / q.sum()
    return q


@pytest.mark.parametrize(
    ("T", "top_k", "top_p"), [(1.0, None, None), (0.7, 3, None), (1.3, None, 0.8), (2.0, 4, 0.6)]
)
def test_sample_compatible_frequencies(T: float, top_k, top_p):
    logits = torch.tensor([1.0, 2.5, -0.5, 0.3, 2.0, 1.2])
    n = 30_000
    ids = sample_compatible(
        logits.expand(n, -1),
        temperature=T,
        top_k=top_k,
        top_p=top_p,
        generator=torch.Generator().manual_seed(3),
    )
    assert ids.shape == (n,) and ids.dtype == torch.long
    expected = _expected_filtered(logits.detach().double().numpy(), T, top_k, top_p)
    freq = np.bincount(ids.numpy(), minlength=logits.numel()) / n
    eps = binomial_epsilon(n, split_delta(logits.numel()))
    np.testing.assert_array_less(np.abs(freq - expected), eps)
    assert set(np.flatnonzero(freq)) <= set(np.flatnonzero(expected))


def test_sample_compatible_greedy_shapes_and_errors():
    logits = torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(0))
    assert torch.equal(sample_compatible(logits, temperature=0.0), logits.argmax(-1))
    ids = sample_compatible(logits, generator=torch.Generator().manual_seed(1))
    assert ids.shape == (2, 3)
    again = sample_compatible(logits, generator=torch.Generator().manual_seed(1))
    assert torch.equal(ids, again)
    for kwargs in ({"temperature": -1.0}, {"top_k": 0}, {"top_p": 0.0}, {"top_p": 1.5}):
        with pytest.raises(ValueError):
            sample_compatible(logits, **kwargs)


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_every_mode_runs_on_cuda_and_matches_the_cpu():
    dev = torch.device("cuda")
    act_cpu, U_cpu = make_action(), make_U()
    act = make_action().to(dev)
    U = CauchyVector(U_cpu.loc.to(dev), U_cpu.scale.to(dev))
    draws = {
        "eps_seed": draw_eps_seed((C,), generator=torch.Generator(dev).manual_seed(0), device=dev),
        "eps_noise": draw_eps_noise(
            (C,), generator=torch.Generator(dev).manual_seed(1), device=dev
        ),
    }
    for mode in MODES:
        out = act(U, mode, 0.9, generator=torch.Generator(dev).manual_seed(2), **draws)
        assert out.loc_S.device.type == "cuda" and bool(torch.isfinite(out.scale_S).all())
        out.next_token(generator=torch.Generator(dev).manual_seed(3))
    for mode in ("causal", "standard", "compatible", "shared_individual", "shared_noise"):
        kw = {k: v.cpu() for k, v in draws.items()}
        ref = act_cpu(U_cpu, mode, 0.9, **kw)
        got = act(U, mode, 0.9, **draws)
        torch.testing.assert_close(got.loc_S.cpu(), ref.loc_S, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(got.scale_S.cpu(), ref.scale_S, rtol=1e-4, atol=1e-4)
    labels = torch.tensor([[1, 3], [3, 0]])
    targets = torch.randn(2, 2)
    U2_cpu = CauchyVector(torch.randn(2, 2, C), torch.rand(2, 2, C) + 0.1)
    U2 = CauchyVector(U2_cpu.loc.to(dev), U2_cpu.scale.to(dev))
    got = act.loss(U2, labels.to(dev), targets.to(dev), num_token_id=3)
    ref = act_cpu.loss(U2_cpu, labels, targets, num_token_id=3)
    torch.testing.assert_close(got.total.cpu(), ref.total, rtol=1e-4, atol=1e-4)
