"""Working Pyro examples with ``cauchylin.distributions``, run as tests.

1. SVI with an ``AutoNormal`` guide recovers ``loc`` and ``log scale`` of a Cauchy likelihood.
2. A Bayesian OvR classifier (linear scores, Normal priors, ``OvRLabel`` likelihood) fitted with
   SVI classifies held-out data almost as well as the Bayes-optimal rule.
3. ``Predictive``, ``poutine.trace``, vectorised ELBO particles and ``TraceMeanField_ELBO`` (the
   registered analytic KL) work with both distributions.

Seeds are fixed (data from a private ``torch.Generator``, inference from ``pyro.set_rng_seed``),
so every run is the same computation; tolerances are justified in each test.
"""

from __future__ import annotations

import math

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import pytest
import scipy.stats
import torch
from pyro.infer import SVI, Predictive, Trace_ELBO, TraceMeanField_ELBO
from pyro.infer.autoguide import AutoNormal
from torch.distributions import kl_divergence

from cauchylin.distributions import IndependentCauchy, OvR, OvRLabel

# Two-sided normal quantile for a false-failure rate of 1e-6 split over 4 parameters:
# Phi^-1(1 - 1e-6 / 8) = 5.16.
Z_4_PARAMS = 5.16


@pytest.fixture(autouse=True)
def _fresh_pyro():
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    yield
    pyro.clear_param_store()


# ------------------------------------------------------------------------------ 1. Cauchy SVI


def cauchy_model(
    x: torch.Tensor | None = None, size: tuple[int, int] | None = None
) -> torch.Tensor:
    """Unknown per-component location and log-scale; i.i.d. Cauchy observations ``x`` ``[N, C]``.

    Called with ``x=None, size=(N, C)`` it simulates (prior or posterior predictive).
    """
    n, c = x.shape if x is not None else size
    loc = pyro.sample("loc", dist.Normal(0.0, 10.0).expand([c]).to_event(1))
    log_scale = pyro.sample("log_scale", dist.Normal(0.0, 3.0).expand([c]).to_event(1))
    with pyro.plate("data", n):
        return pyro.sample("x", IndependentCauchy(loc, log_scale.exp()), obs=x)


def fit_cauchy(x: torch.Tensor, steps: int = 500) -> AutoNormal:
    guide = AutoNormal(cauchy_model, init_scale=0.05)
    optim = pyro.optim.ClippedAdam({"lr": 0.05, "lrd": 0.02 ** (1 / steps)})
    svi = SVI(cauchy_model, guide, optim, Trace_ELBO())
    for _ in range(steps):
        loss = svi.step(x)
    assert math.isfinite(loss)
    return guide


def test_svi_recovers_cauchy_parameters():
    """Recovered (posterior median) loc and log scale vs the truth and vs the scipy MLE.

    Fisher information of one Cauchy observation is 1/(2 scale^2) for loc and 1/2 for log scale,
    so the MLE (and, under these weak priors, the posterior median) has standard deviation
    ``sd_loc = scale sqrt(2/N)`` and ``sd_log_scale = sqrt(2/N)`` (0.032 for N = 2000).

    * truth: within ``5.16 sd`` (false-failure rate 1e-6 over the 4 parameters) plus 0.5 sd of
      optimisation slack;
    * scipy's MLE on the same data (an independent optimiser): within 0.5 sd — the posterior
      median differs from the MLE by O(1/N) and by the residual optimisation error;
    * the guide's posterior sd within a factor 2 of the asymptotic sd.
    """
    n = 2000
    true_loc = torch.tensor([1.5, -3.0])
    true_scale = torch.tensor([0.5, 2.0])
    gen = torch.Generator().manual_seed(1234)
    eps = torch.tan(math.pi * (torch.rand(n, 2, generator=gen, dtype=torch.float64) - 0.5))
    x = (true_loc + true_scale * eps).float()

    guide = fit_cauchy(x)
    median = guide.median(x)
    loc_hat, log_scale_hat = median["loc"].detach(), median["log_scale"].detach()
    print(
        f"Cauchy SVI: loc {loc_hat.tolist()} (true {true_loc.tolist()}), "
        f"scale {log_scale_hat.exp().tolist()} (true {true_scale.tolist()})"
    )
    sd_loc = true_scale * math.sqrt(2 / n)
    sd_log_scale = torch.full((2,), math.sqrt(2 / n))

    assert ((loc_hat - true_loc).abs() <= (Z_4_PARAMS + 0.5) * sd_loc).all(), loc_hat
    assert ((log_scale_hat - true_scale.log()).abs() <= (Z_4_PARAMS + 0.5) * sd_log_scale).all()

    mle = [scipy.stats.cauchy.fit(x[:, c].double().numpy()) for c in range(2)]
    mle_loc = torch.tensor([m[0] for m in mle], dtype=torch.float32)
    mle_log_scale = torch.tensor([math.log(m[1]) for m in mle], dtype=torch.float32)
    assert ((loc_hat - mle_loc).abs() <= 0.5 * sd_loc).all(), (loc_hat, mle_loc)
    assert ((log_scale_hat - mle_log_scale).abs() <= 0.5 * sd_log_scale).all()

    lo, hi = guide.quantiles([0.1587, 0.8413], x)["loc"]
    post_sd = (hi - lo).detach() / 2
    assert ((post_sd / sd_loc > 0.5) & (post_sd / sd_loc < 2.0)).all(), post_sd


# -------------------------------------------------------------------------- 2. OvR classifier

NUM_CLASSES = 4
ANGLES = torch.arange(NUM_CLASSES) * 2 * math.pi / NUM_CLASSES
CENTERS = 2.5 * torch.stack([ANGLES.cos(), ANGLES.sin()], dim=-1)  # [K, 2]


def blobs(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` points: label uniform over K, feature ``N(center_label, I)`` in 2-D."""
    y = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
    return CENTERS[y] + torch.randn(n, 2, generator=gen), y


def ovr_classifier(x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
    """Linear Cauchy scores ``S_k ~ Cauchy(x . w_k + b_k, 1)``; class k fires when ``S_k > 0``.

    The label is scored with ``OvRLabel`` (no one-hot tensor): its log-likelihood is the OvR
    log-probability of "only class y fires", i.e. minus the OvR binary cross-entropy.
    """
    w = pyro.sample("w", dist.Normal(0.0, 3.0).expand([NUM_CLASSES, 2]).to_event(2))
    b = pyro.sample("b", dist.Normal(0.0, 3.0).expand([NUM_CLASSES]).to_event(1))
    loc = x @ w.transpose(-1, -2) + b.unsqueeze(-2)
    with pyro.plate("data", x.shape[0]):
        return pyro.sample("y", OvRLabel(loc, 1.0, 0.0), obs=y)


def ovr_classifier_one_hot(x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
    """The same model with the multi-hot ``OvR`` likelihood and a one-hot observation."""
    w = pyro.sample("w", dist.Normal(0.0, 3.0).expand([NUM_CLASSES, 2]).to_event(2))
    b = pyro.sample("b", dist.Normal(0.0, 3.0).expand([NUM_CLASSES]).to_event(1))
    loc = x @ w.transpose(-1, -2) + b.unsqueeze(-2)
    obs = None if y is None else torch.nn.functional.one_hot(y, NUM_CLASSES).float()
    with pyro.plate("data", x.shape[0]):
        return pyro.sample("y", OvR(loc, 1.0, 0.0), obs=obs)


def test_bayesian_ovr_classifier():
    """Held-out accuracy of the posterior-averaged OvR probabilities.

    Chance is 1/4. The Bayes-optimal rule (nearest centre; about 0.91 here) bounds any classifier;
    a linear OvR model can represent it (the regions are cones of linear scores), so the fitted
    model must reach >= 0.8 and lie within 0.04 of the Bayes rule on the same 2000 test points
    (a binomial sd of accuracy there is 0.006).
    """
    gen = torch.Generator().manual_seed(7)
    x_train, y_train = blobs(400, gen)
    x_test, y_test = blobs(2000, gen)

    guide = AutoNormal(ovr_classifier)
    svi = SVI(ovr_classifier, guide, pyro.optim.Adam({"lr": 0.05}), Trace_ELBO())
    for _ in range(300):
        loss = svi.step(x_train, y_train)
    assert math.isfinite(loss)

    post = Predictive(ovr_classifier, guide=guide, num_samples=200, return_sites=["w", "b"])(x_test)
    loc = x_test @ post["w"].transpose(-1, -2) + post["b"].unsqueeze(-2)  # [S, N, K]
    probs = OvR(loc, 1.0, 0.0).probs.mean(0)  # posterior predictive P(class k fires)
    accuracy = (probs.argmax(-1) == y_test).float().mean().item()
    bayes = ((x_test[:, None] - CENTERS).square().sum(-1).argmin(-1) == y_test).float().mean()
    print(f"OvR classifier: held-out accuracy {accuracy:.3f}, Bayes rule {bayes.item():.3f}")
    assert accuracy >= 0.8
    assert accuracy >= bayes.item() - 0.04

    # the label and one-hot forms are the same likelihood (up to float32 rounding)
    tr_label = poutine.trace(poutine.condition(ovr_classifier, post_sample(post))).get_trace(
        x_train, y_train
    )
    tr_hot = poutine.trace(poutine.condition(ovr_classifier_one_hot, post_sample(post))).get_trace(
        x_train, y_train
    )
    torch.testing.assert_close(tr_label.log_prob_sum(), tr_hot.log_prob_sum(), rtol=1e-5, atol=1e-3)


def post_sample(post: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The first posterior draw of every latent site."""
    return {k: v[0] for k, v in post.items()}


# ------------------------------------------------------------- 3. Predictive, trace, particles


def test_predictive_and_trace_cauchy():
    x = IndependentCauchy(torch.tensor([0.5, -1.0]), torch.tensor([1.0, 2.0])).sample((50,))
    guide = AutoNormal(cauchy_model)
    guide(x)  # initialise the guide's parameters

    # posterior predictive: latent draws from the guide, the data site simulated
    out = Predictive(cauchy_model, guide=guide, num_samples=7)(None, (50, 2))
    # sites outside the plate get a singleton plate dimension (max_plate_nesting = 1)
    assert out["loc"].shape == out["log_scale"].shape == (7, 1, 2)
    assert out["x"].shape == (7, 50, 2) and torch.isfinite(out["x"]).all()
    # prior predictive
    prior = Predictive(cauchy_model, num_samples=7)(None, (50, 2))
    assert prior["x"].shape == (7, 50, 2) and torch.isfinite(prior["x"]).all()

    tr = poutine.trace(cauchy_model).get_trace(x)
    tr.compute_log_prob()
    site = tr.nodes["x"]
    assert isinstance(site["fn"], IndependentCauchy)
    assert site["fn"].batch_shape == (50,) and site["fn"].event_shape == (2,)
    assert site["log_prob"].shape == (50,)
    assert torch.isfinite(tr.log_prob_sum())

    # vectorised particles expand the distribution over a particle plate
    elbo = Trace_ELBO(num_particles=4, vectorize_particles=True, max_plate_nesting=1)
    assert math.isfinite(elbo.loss(cauchy_model, guide, x))


def test_predictive_and_trace_ovr():
    gen = torch.Generator().manual_seed(3)
    x, y = blobs(30, gen)
    for model, label_shape in ((ovr_classifier, (30,)), (ovr_classifier_one_hot, (30, 4))):
        pyro.clear_param_store()
        guide = AutoNormal(model)
        guide(x, y)
        out = Predictive(model, guide=guide, num_samples=5)(x)
        assert out["y"].shape == (5, *label_shape)
        if model is ovr_classifier:
            assert out["y"].dtype == torch.long and ((out["y"] >= 0) & (out["y"] < 4)).all()
        else:
            assert set(out["y"].unique().tolist()) <= {0.0, 1.0}

        tr = poutine.trace(model).get_trace(x, y)
        tr.compute_log_prob()
        assert tr.nodes["y"]["log_prob"].shape == (30,)
        assert torch.isfinite(tr.log_prob_sum())
        elbo = Trace_ELBO(num_particles=3, vectorize_particles=True, max_plate_nesting=1)
        assert math.isfinite(elbo.loss(model, guide, x, y))


def test_mean_field_elbo_uses_registered_kl():
    """With no observations, TraceMeanField_ELBO's loss is exactly KL(q || p) through the
    registered closed form: deterministic (no Monte Carlo noise) and equal to kl_divergence."""
    prior = IndependentCauchy(torch.zeros(3), torch.ones(3))

    def model():
        pyro.sample("z", prior)

    def guide():
        m = pyro.param("m", torch.tensor([0.5, -2.0, 0.0]))
        s = pyro.param("s", torch.tensor([1.0, 0.3, 4.0]), constraint=dist.constraints.positive)
        pyro.sample("z", IndependentCauchy(m, s))

    elbo = TraceMeanField_ELBO()
    pyro.set_rng_seed(1)
    loss1 = elbo.loss(model, guide)
    pyro.set_rng_seed(2)
    loss2 = elbo.loss(model, guide)
    q = IndependentCauchy(pyro.param("m"), pyro.param("s"))
    assert loss1 == loss2
    assert loss1 == pytest.approx(kl_divergence(q, prior).item(), rel=1e-6)

    # and it trains: SVI drives the guide to the prior (KL -> 0)
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 0.05}), elbo)
    for _ in range(300):
        last = svi.step()
    assert last < 0.02 * loss1
