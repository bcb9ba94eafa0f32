"""Tests of ``cauchylin.distributions``: IndependentCauchy, OvR, OvRLabel and their KLs.

References are independent of the implementation: scipy.stats (log-density, entropy),
mpmath at 50 digits (tails, KL by quadrature), torch's float64 Bernoulli (OvR), brute-force
enumeration of all multi-hot patterns (normalisation), finite differences (gradients), and Pyro's
goodness-of-fit helpers / DKW / Hoeffding / exact binomial bounds for sampling (false-failure
rate at most 1e-6 per test, seeded so that CI never flakes).
"""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import pyro
import pyro.poutine as poutine
import pytest
import scipy.stats
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pyro.distributions.testing.gof import auto_goodness_of_fit
from pyro.infer.reparam import LocScaleReparam
from torch.distributions import Bernoulli, kl_divergence

import cauchylin
from cauchylin.distributions import IndependentCauchy, OvR, OvRLabel
from tests.stats import FALSE_FAILURE_RATE, binomial_epsilon, dkw_epsilon, split_delta

mpmath.mp.dps = 50
EPS32 = float(torch.finfo(torch.float32).eps)

# ----------------------------------------------------------------------------------- strategies


def magnitudes(lo: int, hi: int, signed: bool = True) -> st.SearchStrategy[float]:
    """Numbers ``+-m * 10**e`` with ``e`` uniform in ``[lo, hi]``: every order of magnitude."""
    mant = st.floats(1.0, 9.99)
    exp = st.integers(lo, hi)
    sign = st.sampled_from([-1.0, 1.0]) if signed else st.just(1.0)
    return st.builds(lambda m, e, s: s * m * 10.0**e, mant, exp, sign)


def vectors(elem: st.SearchStrategy[float], size: int) -> st.SearchStrategy[list[float]]:
    return st.lists(elem, min_size=size, max_size=size)


# ------------------------------------------------------------------------------ mpmath helpers


def mp_cauchy_logpdf(x: float, loc: float, scale: float) -> mpmath.mpf:
    z = (mpmath.mpf(x) - mpmath.mpf(loc)) / mpmath.mpf(scale)
    return -mpmath.log(mpmath.pi) - mpmath.log(mpmath.mpf(scale)) - mpmath.log1p(z * z)


def mp_ovr_logs(loc: float, scale: float, threshold: float) -> tuple[mpmath.mpf, mpmath.mpf]:
    """``(log p, log(1 - p))`` with ``p = 1/2 + atan((loc - C)/scale)/pi`` at 50 digits."""
    z = (mpmath.mpf(loc) - mpmath.mpf(threshold)) / mpmath.mpf(scale)
    p = mpmath.mpf(1) / 2 + mpmath.atan(z) / mpmath.pi
    q = mpmath.mpf(1) / 2 - mpmath.atan(z) / mpmath.pi
    return mpmath.log(p), mpmath.log(q)


def ref_ovr_probs64(loc: torch.Tensor, scale: torch.Tensor, thr: torch.Tensor) -> torch.Tensor:
    """The textbook formula in float64 (fine for moderate z)."""
    z = (loc.double() - thr.double()) / scale.double()
    return 0.5 + torch.atan(z) / math.pi


# =============================================================================== IndependentCauchy


class TestIndependentCauchyShapes:
    @pytest.mark.parametrize(
        "loc_shape,scale_shape,batch,event",
        [
            ((3,), (3,), (), (3,)),
            ((2, 3), (3,), (2,), (3,)),
            ((1,), (4, 5, 1), (4, 5), (1,)),
            ((4, 1, 2), (5, 2), (4, 5), (2,)),
        ],
    )
    def test_shapes_follow_torch_conventions(self, loc_shape, scale_shape, batch, event):
        d = IndependentCauchy(torch.zeros(loc_shape), torch.ones(scale_shape))
        assert d.batch_shape == batch and d.event_shape == event and d.event_dim == 1
        assert d.rsample().shape == batch + event
        assert d.sample((7,)).shape == (7, *batch, *event)
        x = d.sample((2, 3))
        assert d.log_prob(x).shape == (2, 3, *batch)
        assert d.entropy().shape == batch
        assert d.mean.shape == d.variance.shape == d.mode.shape == batch + event
        assert d.infer_shapes(loc=loc_shape, scale=scale_shape) == (batch, event)

    def test_expand_contract(self):
        d = IndependentCauchy(torch.randn(3), torch.rand(3) + 0.5, validate_args=False)
        e = d.expand([4, 2])
        assert type(e) is IndependentCauchy
        assert e.batch_shape == (4, 2) and e.event_shape == (3,)
        assert e._validate_args is False
        # parameters are views of the originals (no copy), equal to the broadcast values
        assert e.loc.data_ptr() == d.loc.data_ptr() and e.loc.stride()[:2] == (0, 0)
        torch.testing.assert_close(
            e.log_prob(torch.zeros(3)), d.log_prob(torch.zeros(3)).expand(4, 2)
        )
        assert e.sample((5,)).shape == (5, 4, 2, 3)
        assert e.expand([6, 4, 2]).batch_shape == (6, 4, 2)
        with pytest.raises((RuntimeError, ValueError)):
            d.expand([4, 2]).expand([3])  # cannot shrink a batch dimension

    def test_expand_keeps_validation(self):
        e = IndependentCauchy(torch.zeros(2), 1.0, validate_args=True).expand([3])
        with pytest.raises(ValueError, match="value"):
            e.log_prob(torch.tensor([0.0, math.nan]))

    def test_subclass_with_custom_init_must_define_expand(self):
        class Sub(IndependentCauchy):
            def __init__(self, loc, scale):
                super().__init__(loc, scale)

        with pytest.raises(NotImplementedError, match="expand"):
            Sub(torch.zeros(2), torch.ones(2)).expand([3])

    def test_moments_follow_torch_cauchy(self):
        d = IndependentCauchy(torch.tensor([1.0, -2.0]), torch.tensor([0.5, 3.0]))
        assert torch.isnan(d.mean).all()
        assert torch.isinf(d.variance).all() and (d.variance > 0).all()
        torch.testing.assert_close(d.mode, d.loc)
        t = torch.distributions.Cauchy(d.loc, d.scale)
        assert torch.isnan(t.mean).all() and torch.isinf(t.variance).all()

    def test_number_arguments(self):
        d = IndependentCauchy(torch.zeros(3), 2.0)
        assert d.scale.shape == (3,) and d.scale.dtype == torch.float32
        with pytest.raises(ValueError, match="at least one dimension"):
            IndependentCauchy(0.0, 1.0)


class TestIndependentCauchyLogProb:
    @given(
        loc=vectors(magnitudes(-20, 20), 3),
        scale=vectors(magnitudes(-20, 20, signed=False), 3),
        x=vectors(magnitudes(-20, 20), 3),
    )
    def test_matches_scipy_float64(self, loc, scale, x):
        d = IndependentCauchy(
            torch.tensor(loc, dtype=torch.float64), torch.tensor(scale, dtype=torch.float64)
        )
        got = d.log_prob(torch.tensor(x, dtype=torch.float64)).item()
        terms = scipy.stats.cauchy.logpdf(x, loc=loc, scale=scale)
        assert np.isfinite(terms).all()
        assert got == pytest.approx(terms.sum(), rel=0, abs=1e-13 * np.abs(terms).sum())

    @given(
        loc=vectors(magnitudes(-30, 30), 4),
        scale=vectors(magnitudes(-30, 30, signed=False), 4),
        x=vectors(magnitudes(-30, 30), 4),
    )
    def test_float32_tails_match_mpmath(self, loc, scale, x):
        """|x - loc|/scale from 1e-60 to 1e60: no overflow of the standardised value."""
        lt, st_, xt = (torch.tensor(v, dtype=torch.float32) for v in (loc, scale, x))
        got = IndependentCauchy(lt, st_).log_prob(xt).item()
        terms = [
            mp_cauchy_logpdf(float(a), float(b), float(c))
            for a, b, c in zip(xt, lt, st_, strict=True)
        ]
        ref = float(mpmath.fsum(terms))
        # each term: a few ulp of its magnitude (rounding of x - loc, a log, a log1p)
        tol = 8 * EPS32 * float(mpmath.fsum(abs(t) for t in terms))
        assert math.isfinite(got)
        assert abs(got - ref) <= tol

    def test_batch_broadcast_against_scipy(self):
        g = torch.Generator().manual_seed(0)
        loc = torch.randn(4, 1, 3, generator=g, dtype=torch.float64)
        scale = torch.rand(5, 3, generator=g, dtype=torch.float64) + 0.1
        x = torch.randn(2, 1, 5, 3, generator=g, dtype=torch.float64) * 10
        got = IndependentCauchy(loc, scale).log_prob(x)
        ref = scipy.stats.cauchy.logpdf(x.numpy(), loc=loc.numpy(), scale=scale.numpy()).sum(-1)
        assert got.shape == (2, 4, 5)
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-13)

    def test_gradients_match_finite_differences(self):
        g = torch.Generator().manual_seed(1)
        loc = torch.randn(2, 3, generator=g, dtype=torch.float64, requires_grad=True)
        scale = (torch.rand(2, 3, generator=g, dtype=torch.float64) + 0.2).requires_grad_()
        x = (torch.randn(2, 3, generator=g, dtype=torch.float64) * 3).requires_grad_()
        assert torch.autograd.gradcheck(
            lambda a, b, c: IndependentCauchy(a, b).log_prob(c), (loc, scale, x)
        )

    @pytest.mark.parametrize("d", [1e-30, 1.0, 1e10, 1e30, 3e38])
    def test_float32_gradients_finite_and_correct(self, d):
        loc = torch.tensor([0.0], requires_grad=True)
        scale = torch.tensor([1.0], requires_grad=True)
        IndependentCauchy(loc, scale).log_prob(torch.tensor([d])).backward()
        dm, gs = mpmath.mpf(d), mpmath.mpf(1)
        ref_loc = float(2 * dm / (gs**2 + dm**2))
        ref_scale = float(-1 / gs + 2 * dm**2 / (gs * (gs**2 + dm**2)))
        assert loc.grad.item() == pytest.approx(ref_loc, rel=1e-5, abs=1e-30)
        assert scale.grad.item() == pytest.approx(ref_scale, rel=1e-5, abs=1e-6)

    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
    def test_half_precision(self, dtype):
        loc = torch.tensor([0.0, 100.0, -3.0], dtype=dtype)
        scale = torch.tensor([1e-3, 2.0, 50.0], dtype=dtype)
        x = torch.tensor([60000.0, -60000.0, 0.0], dtype=dtype)
        d = IndependentCauchy(loc, scale)
        lp = d.log_prob(x)
        assert lp.dtype == torch.float32 and torch.isfinite(lp)
        ref = scipy.stats.cauchy.logpdf(
            x.double().numpy(), loc.double().numpy(), scale.double().numpy()
        )
        assert lp.item() == pytest.approx(ref.sum(), rel=1e-5)
        torch.manual_seed(0)
        s = d.rsample((20000,))
        assert s.dtype == dtype and torch.isfinite(s).all()

    def test_entropy_matches_scipy(self):
        scale = torch.tensor([[1e-3, 1.0, 7.5], [2.0, 3.0, 1e4]], dtype=torch.float64)
        d = IndependentCauchy(torch.zeros(3, dtype=torch.float64), scale)
        ref = scipy.stats.cauchy.entropy(scale=scale.numpy()).sum(-1)
        np.testing.assert_allclose(d.entropy().numpy(), ref, rtol=1e-13)


class TestIndependentCauchyCdf:
    def test_joint_cdf_is_the_product_of_the_marginal_cdfs(self):
        """P(X_1 <= x_1, ..., X_C <= x_C) = prod_c cdf_c(x_c) (independence), against scipy."""
        g = torch.Generator().manual_seed(1)
        loc = torch.randn(4, 5, generator=g, dtype=torch.float64)
        scale = torch.rand(4, 5, generator=g, dtype=torch.float64) + 0.1
        x = torch.randn(3, 4, 5, generator=g, dtype=torch.float64) * 3
        got = IndependentCauchy(loc, scale).cdf(x)
        ref = scipy.stats.cauchy.cdf(x.numpy(), loc=loc.numpy(), scale=scale.numpy()).prod(-1)
        assert got.shape == (3, 4)
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-13, atol=0)

    def test_joint_cdf_keeps_relative_accuracy_in_the_far_tail(self):
        """40 components each with cdf ~3e-9: the product 1e-340-ish in float64 is not 0 early
        (log space), and float32 gives the correctly rounded 0 or subnormal, never NaN."""
        loc, scale = torch.zeros(40, dtype=torch.float64), torch.ones(40, dtype=torch.float64)
        x = torch.full((40,), -1e8, dtype=torch.float64)
        got = IndependentCauchy(loc, scale).cdf(x).item()
        ref = mpmath.fprod([mpmath.atan2(1, mpmath.mpf(1e8)) / mpmath.pi] * 40)
        assert got == 0.0 or abs(got - float(ref)) <= 1e-12 * float(ref)
        x = torch.full((8,), -1e8, dtype=torch.float64)
        got = IndependentCauchy(loc[:8], scale[:8]).cdf(x).item()
        ref = mpmath.fprod([mpmath.atan2(1, mpmath.mpf(1e8)) / mpmath.pi] * 8)
        assert abs(got - float(ref)) <= 1e-13 * float(ref)
        f32 = IndependentCauchy(torch.zeros(40), torch.ones(40)).cdf(torch.full((40,), -1e8))
        assert f32.item() == 0.0

    def test_cdf_gradient_and_validation(self):
        loc = torch.zeros(3, requires_grad=True)
        d = IndependentCauchy(loc, torch.ones(3), validate_args=True)
        (g,) = torch.autograd.grad(d.cdf(torch.tensor([0.0, 1.0, math.inf])), (loc,))
        # d/dloc prod cdf = -pdf_c * prod_{k != c} cdf_k; the infinite component gives 0 there
        ref = [-(1 / math.pi) * 0.75, -(1 / (2 * math.pi)) * 0.5, 0.0]
        torch.testing.assert_close(g, torch.tensor(ref))
        with pytest.raises(ValueError, match="support"):
            d.cdf(torch.tensor([0.0, math.nan, 1.0]))

    def test_icdf_is_refused_with_a_message(self):
        with pytest.raises(NotImplementedError, match="per-component quantiles"):
            IndependentCauchy(torch.zeros(2), torch.ones(2)).icdf(torch.tensor([0.5, 0.5]))


class TestIndependentCauchySampling:
    def test_goodness_of_fit_1d_and_2d(self):
        """Pyro's GOF helpers: sample() and log_prob() agree (p-value > 1e-6).

        The helpers' power is uneven (their chi^2 p-value saturates at 1.0 for gross misfits), so
        the DKW tests below carry the power; this one checks sample/log_prob consistency.
        """
        torch.manual_seed(0)
        for loc, scale in [([0.3], [2.0]), ([1.0, -4.0], [0.5, 3.0])]:
            d = IndependentCauchy(
                torch.tensor(loc, dtype=torch.float64), torch.tensor(scale, dtype=torch.float64)
            )
            x = d.sample((20000,))
            assert auto_goodness_of_fit(x, d.log_prob(x).exp()) > FALSE_FAILURE_RATE

    def test_dkw_per_component_and_on_the_sum(self):
        """Marginal CDFs (per component) and the sum of components (which tests independence:
        a sum of independent Cauchy laws is Cauchy(sum loc, sum scale)) against scipy."""
        torch.manual_seed(1)
        loc = torch.tensor([1e6, -2.0, 0.0], dtype=torch.float64)
        scale = torch.tensor([1e-3, 5.0, 1.0], dtype=torch.float64)
        n = 50000
        x = IndependentCauchy(loc, scale).sample((n,))
        eps = dkw_epsilon(n, split_delta(4))
        for c in range(3):
            xs = np.sort(x[:, c].numpy())
            cdf = scipy.stats.cauchy.cdf(xs, loc=loc[c].item(), scale=scale[c].item())
            ecdf_hi = np.arange(1, n + 1) / n
            assert max(np.abs(ecdf_hi - cdf).max(), np.abs(ecdf_hi - 1 / n - cdf).max()) <= eps
        s = np.sort(x.sum(-1).numpy())
        cdf = scipy.stats.cauchy.cdf(s, loc=loc.sum().item(), scale=scale.sum().item())
        ecdf_hi = np.arange(1, n + 1) / n
        assert max(np.abs(ecdf_hi - cdf).max(), np.abs(ecdf_hi - 1 / n - cdf).max()) <= eps

    def test_rsample_is_reparameterised_and_finite(self):
        torch.manual_seed(2)
        loc = torch.tensor([0.5, -1.0], requires_grad=True)
        scale = torch.tensor([2.0, 0.1], requires_grad=True)
        x = IndependentCauchy(loc, scale).rsample((200000,))
        assert torch.isfinite(x).all()
        eps = ((x - loc) / scale).detach()
        (gl, gs) = torch.autograd.grad(x.sum(), (loc, scale))
        torch.testing.assert_close(gl, torch.full((2,), 200000.0))
        torch.testing.assert_close(gs, eps.sum(0), rtol=1e-4, atol=1e-2)
        assert not IndependentCauchy(loc, scale).sample().requires_grad


class TestIndependentCauchyValidation:
    @pytest.mark.parametrize(
        "loc,scale,name",
        [
            ([0.0, 0.0], [1.0, 0.0], "scale"),
            ([0.0, 0.0], [1.0, -2.0], "scale"),
            ([0.0, 0.0], [1.0, math.nan], "scale"),
            ([0.0, 0.0], [1.0, math.inf], "scale"),
            ([0.0, math.nan], [1.0, 1.0], "loc"),
            ([0.0, -math.inf], [1.0, 1.0], "loc"),
        ],
    )
    def test_bad_parameters(self, loc, scale, name):
        with pytest.raises(ValueError, match=name):
            IndependentCauchy(torch.tensor(loc), torch.tensor(scale), validate_args=True)
        IndependentCauchy(torch.tensor(loc), torch.tensor(scale), validate_args=False)  # no check

    def test_bad_values(self):
        d = IndependentCauchy(torch.zeros(3), torch.ones(3), validate_args=True)
        with pytest.raises(ValueError, match="value"):
            d.log_prob(torch.tensor([0.0, math.nan, 1.0]))
        with pytest.raises(ValueError, match="event_shape"):
            d.log_prob(torch.zeros(4))
        with pytest.raises(ValueError, match="broadcastable"):
            IndependentCauchy(torch.zeros(2, 3), 1.0, validate_args=True).log_prob(
                torch.zeros(5, 3)
            )

    def test_shape_mismatch_names_arguments(self):
        with pytest.raises(ValueError, match=r"loc \(2, 3\).*scale \(4,\)"):
            IndependentCauchy(torch.zeros(2, 3), torch.ones(4))

    def test_pyro_global_validation_switch(self):
        try:
            pyro.enable_validation(False)
            IndependentCauchy(torch.zeros(2), -torch.ones(2))  # no error
        finally:
            pyro.enable_validation(True)
        with pytest.raises(ValueError, match="scale"):
            IndependentCauchy(torch.zeros(2), -torch.ones(2))

    def test_cauchylin_global_validation_switch(self):
        with cauchylin.validation(False):
            IndependentCauchy(torch.zeros(2), -torch.ones(2))  # no error
            OvR(torch.zeros(2), -torch.ones(2))
            with pytest.raises(ValueError, match="scale"):  # explicit True wins
                IndependentCauchy(torch.zeros(2), -torch.ones(2), validate_args=True)
        with pytest.raises(ValueError, match="scale"):
            OvR(torch.zeros(2), -torch.ones(2))


class TestCauchyVectorInterop:
    def test_independent_vector_to_distribution(self):
        u = cauchylin.CauchyVector(torch.tensor([[1.0, 2.0]]), torch.tensor([0.5, 3.0]))
        d = u.to_distribution()
        assert isinstance(d, IndependentCauchy)
        assert d.batch_shape == (1,) and d.event_shape == (2,)
        torch.testing.assert_close(d.loc, u.loc)
        torch.testing.assert_close(d.scale, u.scale)
        x = torch.tensor([0.3, -7.0])
        torch.testing.assert_close(d.log_prob(x), u.log_prob(x).sum(-1))
        assert isinstance(IndependentCauchy.from_vector(u + 1.0), IndependentCauchy)

    @pytest.mark.parametrize(
        "make",
        [
            lambda u: u.linear(torch.tensor([[1.0, 1.0], [1.0, -1.0]])),  # mixing map
            lambda u: u[..., [0, 0]],  # repeated component
            lambda u: u.expand(3, 2),  # broadcast of one source over the batch
        ],
    )
    def test_dependent_vector_refused(self, make):
        u = cauchylin.CauchyVector(torch.zeros(2), torch.ones(2))
        with pytest.raises(ValueError, match="independent"):
            make(u).to_distribution()
        with pytest.raises(ValueError, match="independent"):
            IndependentCauchy.from_vector(make(u))


class TestLocScaleReparam:
    def test_decentered_site_and_law(self):
        """poutine.reparam + LocScaleReparam builds ``IndependentCauchy(loc=..., scale=...)`` and the
        reparameterised site keeps the law of x (DKW on the samples of x)."""
        loc = torch.tensor([3.0, -1.0], dtype=torch.float64)
        scale = torch.tensor([0.5, 4.0], dtype=torch.float64)

        def model():
            return pyro.sample("x", IndependentCauchy(loc, scale))

        config = {"x": LocScaleReparam(centered=0.25)}
        tr = poutine.trace(poutine.reparam(model, config=config)).get_trace()
        dec = tr.nodes["x_decentered"]["fn"]
        assert isinstance(dec, IndependentCauchy) and dec.event_shape == (2,)
        torch.testing.assert_close(dec.loc, loc * 0.25)
        torch.testing.assert_close(dec.scale, scale**0.25)
        assert torch.isfinite(tr.log_prob_sum())

        pyro.set_rng_seed(3)
        n = 20000
        vmodel = pyro.plate("draws", n, dim=-1)(model)
        x = poutine.reparam(vmodel, config=config)()
        assert x.shape == (n, 2)
        eps = dkw_epsilon(n, split_delta(2))
        for c in range(2):
            xs = np.sort(x[:, c].numpy())
            cdf = scipy.stats.cauchy.cdf(xs, loc=loc[c].item(), scale=scale[c].item())
            e = np.arange(1, n + 1) / n
            assert max(np.abs(e - cdf).max(), np.abs(e - 1 / n - cdf).max()) <= eps

    def test_learned_centering_in_svi(self):
        pyro.clear_param_store()
        pyro.set_rng_seed(0)

        def model():
            return pyro.sample("x", IndependentCauchy(torch.zeros(3), torch.ones(3)))

        rmodel = poutine.reparam(model, config={"x": LocScaleReparam()})
        guide = pyro.infer.autoguide.AutoNormal(rmodel)
        svi = pyro.infer.SVI(rmodel, guide, pyro.optim.Adam({"lr": 0.01}), pyro.infer.Trace_ELBO())
        for _ in range(3):
            assert math.isfinite(svi.step())
        assert pyro.get_param_store()["x_centered"].shape == (3,)


# ========================================================================================= OvR


class TestOvRShapes:
    @pytest.mark.parametrize(
        "loc_shape,thr_shape,batch,event",
        [((5,), (), (), (5,)), ((2, 5), (5,), (2,), (5,)), ((3, 1, 4), (2, 4), (3, 2), (4,))],
    )
    def test_shapes(self, loc_shape, thr_shape, batch, event):
        d = OvR(torch.randn(loc_shape), 1.0, torch.zeros(thr_shape))
        assert d.batch_shape == batch and d.event_shape == event
        s = d.sample((6,))
        assert s.shape == (6, *batch, *event) and s.dtype == torch.float32
        assert set(s.unique().tolist()) <= {0.0, 1.0}
        assert d.log_prob(s).shape == (6, *batch)
        assert d.log_prob_index(torch.zeros((6, *batch), dtype=torch.long)).shape == (6, *batch)
        assert d.probs.shape == d.logits.shape == d.mean.shape == d.variance.shape == batch + event
        assert d.entropy().shape == batch
        assert not d.has_rsample
        assert d.infer_shapes(loc=loc_shape, scale=(), threshold=thr_shape) == (batch, event)

    def test_expand(self):
        d = OvR(torch.randn(4), torch.rand(4) + 0.5, 0.3, validate_args=False)
        e = d.expand([2, 3])
        assert type(e) is OvR and e.batch_shape == (2, 3) and e._validate_args is False
        assert e.threshold.shape == (2, 3, 4)
        v = torch.tensor([1.0, 0.0, 1.0, 0.0])
        torch.testing.assert_close(e.log_prob(v), d.log_prob(v).expand(2, 3))
        assert e.sample((5,)).shape == (5, 2, 3, 4)
        lab = d.label_distribution().expand([2, 3])
        assert type(lab) is OvRLabel and lab.batch_shape == (2, 3) and lab.sample().shape == (2, 3)


class TestOvRLogProb:
    @given(
        z=vectors(st.floats(-1e3, 1e3), 5),
        scale=vectors(magnitudes(-3, 3, signed=False), 5),
        thr=st.floats(-100, 100),
        bits=vectors(st.sampled_from([0.0, 1.0]), 5),
    )
    def test_matches_float64_bernoulli(self, z, scale, thr, bits):
        scale_t = torch.tensor(scale, dtype=torch.float64)
        loc = thr + torch.tensor(z, dtype=torch.float64) * scale_t
        thr_t = torch.tensor(thr, dtype=torch.float64)
        v = torch.tensor(bits, dtype=torch.float64)
        ref = Bernoulli(probs=ref_ovr_probs64(loc, scale_t, thr_t)).log_prob(v).sum(-1)
        got64 = OvR(loc, scale_t, thr_t).log_prob(v)
        torch.testing.assert_close(got64, ref, rtol=1e-10, atol=1e-12)
        # float32: parameters rounded to float32, the reference on the same rounded values
        l32, s32, t32 = loc.float(), scale_t.float(), thr_t.float()
        ref32 = Bernoulli(probs=ref_ovr_probs64(l32, s32, t32)).log_prob(v).sum(-1)
        got32 = OvR(l32, s32, t32).log_prob(v.float())
        assert got32.dtype == torch.float32
        torch.testing.assert_close(got32.double(), ref32, rtol=2e-5, atol=1e-6)

    @given(
        exps=vectors(st.integers(-30, 30), 4),
        signs=vectors(st.sampled_from([-1.0, 1.0]), 4),
        bits=vectors(st.sampled_from([0.0, 1.0]), 4),
    )
    def test_float32_extremes_match_mpmath(self, exps, signs, bits):
        """|z| from 1e-30 to 1e30 in float32: every term within a few ulp (no log(p + eps))."""
        loc = torch.tensor(
            [s * 10.0**e for s, e in zip(signs, exps, strict=True)], dtype=torch.float32
        )
        d = OvR(loc, torch.ones(4), 0.0)
        v = torch.tensor(bits)
        got = d.log_prob(v).item()
        terms = []
        for li, b in zip(loc.tolist(), bits, strict=True):
            lp, lq = mp_ovr_logs(li, 1.0, 0.0)
            terms.append(lp if b == 1.0 else lq)
        ref = float(mpmath.fsum(terms))
        assert math.isfinite(got) and got <= 0
        assert abs(got - ref) <= 16 * EPS32 * float(mpmath.fsum(abs(t) for t in terms)) + 1e-44
        # the logits are finite and accurate too
        lp_ref = [mp_ovr_logs(li, 1.0, 0.0) for li in loc.tolist()]
        logit_ref = torch.tensor([float(a - b) for a, b in lp_ref], dtype=torch.float64)
        torch.testing.assert_close(d.logits.double(), logit_ref, rtol=16 * EPS32, atol=1e-38)

    @pytest.mark.parametrize("z", [-1e30, -1e10, -30.0, 0.0, 1e-20, 30.0, 1e10, 1e30])
    def test_float32_gradients_finite_and_signed(self, z):
        loc = torch.tensor([z], requires_grad=True)
        d = OvR(loc, torch.ones(1), 0.0)
        (g1,) = torch.autograd.grad(d.log_prob(torch.ones(1)), loc)
        (g0,) = torch.autograd.grad(d.log_prob(torch.zeros(1)), loc)
        zm = mpmath.mpf(z)
        pdf = 1 / (mpmath.pi * (1 + zm * zm))
        lp, lq = mp_ovr_logs(z, 1.0, 0.0)
        ref1, ref0 = float(pdf / mpmath.exp(lp)), float(-pdf / mpmath.exp(lq))
        tiny = torch.finfo(torch.float32).tiny
        for g, ref in ((g1.item(), ref1), (g0.item(), ref0)):
            assert math.isfinite(g)
            if abs(ref) >= tiny:  # representable: correct sign and a few ulp
                assert math.copysign(1.0, g) == math.copysign(1.0, ref)
                assert g == pytest.approx(ref, rel=1e-5)
            else:  # the true gradient underflows float32: zero or a subnormal of the right size
                assert abs(g) <= 2 * tiny

    def test_gradcheck_float64(self):
        g = torch.Generator().manual_seed(4)
        loc = torch.randn(2, 4, generator=g, dtype=torch.float64, requires_grad=True)
        scale = (torch.rand(4, generator=g, dtype=torch.float64) + 0.3).requires_grad_()
        thr = torch.randn(4, generator=g, dtype=torch.float64, requires_grad=True)
        v = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.0]], dtype=torch.float64)
        y = torch.tensor([3, 0])
        assert torch.autograd.gradcheck(lambda a, b, c: OvR(a, b, c).log_prob(v), (loc, scale, thr))
        assert torch.autograd.gradcheck(
            lambda a, b, c: OvR(a, b, c).log_prob_index(y), (loc, scale, thr)
        )

    def test_normalised_over_all_patterns(self):
        """sum over the 2^V multi-hot patterns of exp(log_prob) is exactly 1."""
        d = OvR(
            torch.tensor([[2.0, -1.0, 0.3, 5.0], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float64),
            0.7,
            0.1,
        )
        patterns = torch.tensor(list(itertools.product([0.0, 1.0], repeat=4)), dtype=torch.float64)
        total = d.log_prob(patterns.unsqueeze(1)).exp().sum(0)
        torch.testing.assert_close(total, torch.ones(2, dtype=torch.float64), rtol=1e-14, atol=0)

    @given(
        loc=vectors(magnitudes(-30, 30), 6),
        scale=magnitudes(-2, 2, signed=False),
        thr=vectors(st.floats(-10, 10), 6),
        y=st.integers(0, 5),
    )
    def test_log_prob_index_equals_one_hot(self, loc, scale, thr, y):
        d = OvR(torch.tensor([loc, loc[::-1]]), scale, torch.tensor(thr))
        idx = torch.tensor([y, 5 - y])
        one_hot = torch.nn.functional.one_hot(idx, 6).float()
        lp, lq = d.log_probs()
        # float32 identity: the cancellation of log(1 - p_y) costs an ulp of sum_k |log(1 - p_k)|
        tol = 8 * EPS32 * (lq.abs().sum(-1) + lp.abs().amax(-1)) + 1e-30
        assert (d.log_prob_index(idx) - d.log_prob(one_hot)).abs().le(tol).all()

    def test_log_prob_index_broadcasts_sample_dims(self):
        d = OvR(torch.randn(3, 5), 1.0)
        y = torch.randint(0, 5, (4, 3))
        got = d.log_prob_index(y)
        ref = d.log_prob(torch.nn.functional.one_hot(y, 5).float())
        assert got.shape == (4, 3)
        torch.testing.assert_close(got, ref)
        assert d.log_prob_index(torch.tensor(2)).shape == (3,)

    def test_probs_logits_entropy_against_reference(self):
        loc = torch.tensor([3.0, -0.2, 0.0, 40.0], dtype=torch.float64)
        scale = torch.tensor([1.0, 0.1, 2.0, 3.0], dtype=torch.float64)
        thr = torch.tensor(0.5, dtype=torch.float64)
        d = OvR(loc, scale, thr)
        p = ref_ovr_probs64(loc, scale, thr)
        torch.testing.assert_close(d.probs, p)
        torch.testing.assert_close(d.logits, torch.log(p) - torch.log1p(-p))
        torch.testing.assert_close(d.mean, p)
        torch.testing.assert_close(d.variance, p * (1 - p))
        torch.testing.assert_close(d.entropy(), Bernoulli(probs=p).entropy().sum(-1))
        torch.testing.assert_close(d.mode, (p > 0.5).double())

    def test_half_precision(self):
        for dtype in (torch.float16, torch.bfloat16):
            d = OvR(
                torch.tensor([60000.0, -3.0, 0.0], dtype=dtype),
                torch.tensor(1e-3, dtype=dtype),
                0.0,
            )
            lp = d.log_prob(torch.tensor([0.0, 1.0, 1.0], dtype=dtype))
            assert lp.dtype == torch.float32 and torch.isfinite(lp)
            ref = sum(
                float(t)
                for t in (
                    mp_ovr_logs(float(d.loc[0]), float(d.scale[0]), 0.0)[1],
                    mp_ovr_logs(float(d.loc[1]), float(d.scale[1]), 0.0)[0],
                    mp_ovr_logs(0.0, 1.0, 0.0)[0],
                )
            )
            assert lp.item() == pytest.approx(ref, rel=1e-5)
            assert torch.isfinite(d.logits).all()


class TestOvRSampling:
    def test_frequencies_hoeffding(self):
        torch.manual_seed(5)
        loc = torch.tensor([-5.0, -1.0, 0.0, 0.3, 2.0, 40.0])
        d = OvR(loc, 1.0, 0.0)
        n = 200000
        s = d.sample((n,))
        p = ref_ovr_probs64(loc, torch.ones(6), torch.zeros(6))
        eps = binomial_epsilon(n, split_delta(6))
        assert (s.double().mean(0) - p).abs().max().item() <= eps

    def test_rare_outcomes_exact_binomial(self):
        """Both tails near p = 0 and p = 1: an exact binomial test per class (two-sided p-value
        above 1e-6/4) — a float32 uniform compared with p would lose these rates."""
        torch.manual_seed(6)
        loc = torch.tensor([-3e4, 3e4, -1e3, 1e3], dtype=torch.float64)
        p = ref_ovr_probs64(loc, torch.ones(4), torch.zeros(4)).numpy()
        n = 2_000_000
        fires = OvR(loc.float(), 1.0, 0.0).sample((n,)).sum(0).long().tolist()
        for k, (count, pk) in enumerate(zip(fires, p, strict=True)):
            assert scipy.stats.binomtest(count, n, pk).pvalue > split_delta(4), k

    def test_joint_independence(self):
        """Pairs of classes fire independently: each of the 4 joint cells vs p_i p_j (Hoeffding)."""
        torch.manual_seed(7)
        loc = torch.tensor([0.5, -0.5])
        n = 200000
        s = OvR(loc, 1.0, 0.0).sample((n,))
        p = ref_ovr_probs64(loc, torch.ones(2), torch.zeros(2))
        eps = binomial_epsilon(n, split_delta(4))
        for a, b in itertools.product([0.0, 1.0], repeat=2):
            freq = ((s[:, 0] == a) & (s[:, 1] == b)).double().mean()
            pa = p[0] if a else 1 - p[0]
            pb = p[1] if b else 1 - p[1]
            assert abs(freq - pa * pb) <= eps


class TestOvRValidation:
    @pytest.mark.parametrize(
        "kw,name",
        [
            ({"scale": torch.tensor([1.0, 0.0])}, "scale"),
            ({"scale": torch.tensor([1.0, -1.0])}, "scale"),
            ({"scale": torch.tensor([1.0, math.inf])}, "scale"),
            ({"loc": torch.tensor([math.nan, 0.0])}, "loc"),
            ({"loc": torch.tensor([math.inf, 0.0])}, "loc"),
            ({"threshold": torch.tensor([0.0, math.nan])}, "threshold"),
            ({"threshold": torch.tensor([0.0, -math.inf])}, "threshold"),
        ],
    )
    def test_bad_parameters(self, kw, name):
        args = {"loc": torch.zeros(2), "scale": torch.ones(2), "threshold": torch.zeros(2)}
        args.update(kw)
        with pytest.raises(ValueError, match=name):
            OvR(**args, validate_args=True)
        with pytest.raises(ValueError, match=name):
            OvRLabel(**args, validate_args=True)

    def test_bad_values_and_indices(self):
        d = OvR(torch.zeros(2, 3), 1.0, validate_args=True)
        with pytest.raises(ValueError, match="value"):
            d.log_prob(torch.tensor([1.0, 0.5, 0.0]))
        with pytest.raises(ValueError, match="value"):
            d.log_prob(torch.tensor([1.0, 2.0, 0.0]))
        with pytest.raises(ValueError, match="event_shape"):
            d.log_prob(torch.zeros(4))
        with pytest.raises(ValueError, match="index"):
            d.log_prob_index(torch.tensor([0, 3]))
        with pytest.raises(ValueError, match="index"):
            d.log_prob_index(torch.tensor([-1, 0]))
        with pytest.raises(ValueError, match="index"):
            d.log_prob_index(torch.tensor([0.0, 1.0]))
        with pytest.raises(ValueError, match=r"index \(2,\).*batch_shape \(5,\)"):
            OvR(torch.zeros(5, 3), 1.0).log_prob_index(torch.tensor([0, 1]))
        with pytest.raises(ValueError, match="value"):
            d.label_distribution().log_prob(torch.tensor([0.5, 1.0]))
        with pytest.raises(ValueError, match=r"loc \(2, 3\).*threshold \(4,\)"):
            OvR(torch.zeros(2, 3), 1.0, torch.zeros(4))

    def test_validation_off_skips_checks(self):
        d = OvR(torch.zeros(3), 1.0, validate_args=False)
        assert torch.isfinite(d.log_prob(torch.tensor([0.5, 0.5, 0.5])))


class TestOvRLabel:
    def test_log_prob_and_total_mass(self):
        loc = torch.tensor([[1.0, -0.5, 2.0, 0.0], [-3.0, -3.0, -3.0, -3.0]], dtype=torch.float64)
        d = OvRLabel(loc, 0.8, torch.tensor([0.0, 0.5, 1.0, -0.2], dtype=torch.float64))
        assert d.batch_shape == (2,) and d.event_shape == () and d.num_classes == 4
        assert OvRLabel.infer_shapes(loc=(2, 4), scale=(), threshold=(4,)) == ((2,), ())
        y = torch.arange(4).unsqueeze(-1)  # [4, 1] -> broadcast against batch (2,)
        lp = d.log_prob(y)
        assert lp.shape == (4, 2)
        torch.testing.assert_close(lp, d.ovr.log_prob_index(y))
        # mass over the labels = P(exactly one class fires), from the float64 textbook formula
        p = ref_ovr_probs64(d.loc, d.scale, d.threshold)
        one = torch.log1p(-p).sum(-1).exp() * (p / (1 - p)).sum(-1)
        torch.testing.assert_close(lp.exp().sum(0), one)
        assert (one < 1).all()
        assert d.support.check(torch.tensor([0, 3])).all() and not d.support.check(torch.tensor(4))
        with pytest.raises(NotImplementedError):
            d.entropy()

    def test_sample_is_conditional_on_one_firing(self):
        """Sample frequencies vs P(y | exactly one fires) = p_y/(1-p_y) / sum_k p_k/(1-p_k)."""
        torch.manual_seed(8)
        loc = torch.tensor([1.0, -0.5, 2.0, 0.0])
        d = OvRLabel(loc, 1.0, 0.0)
        n = 100000
        y = d.sample((n,))
        assert y.shape == (n,) and y.dtype == torch.long
        p = ref_ovr_probs64(loc, torch.ones(4), torch.zeros(4))
        w = p / (1 - p)
        eps = binomial_epsilon(n, split_delta(4))
        freq = torch.bincount(y, minlength=4).double() / n
        assert (freq - w / w.sum()).abs().max().item() <= eps
        assert OvRLabel(torch.zeros(2, 3, 5), 1.0).sample((7,)).shape == (7, 2, 3)

    def test_accepts_integer_valued_float_labels(self):
        d = OvRLabel(torch.zeros(2, 3), 1.0)
        torch.testing.assert_close(
            d.log_prob(torch.tensor([1.0, 2.0])), d.log_prob(torch.tensor([1, 2]))
        )


# ========================================================================================== KL


def mp_cauchy_kl(m1: float, g1: float, m2: float, g2: float) -> mpmath.mpf:
    """KL(p || q) = E_p[log p - log q] by quadrature over theta, x = m1 + g1 tan(theta)."""
    m1, g1, m2, g2 = (mpmath.mpf(v) for v in (m1, g1, m2, g2))

    def integrand(theta):
        t = mpmath.tan(theta)
        # log p(x) = -log(pi g1) - log(1 + t^2); log q(x) = -log(pi g2) - log(1 + ((x - m2)/g2)^2)
        w = (m1 - m2 + g1 * t) / g2
        return (mpmath.log(g2 / g1) - mpmath.log1p(t * t) + mpmath.log1p(w * w)) / mpmath.pi

    with mpmath.workdps(20):  # 20 digits is plenty for a 1e-8 comparison, and 10x faster than 50
        mid = mpmath.atan((m2 - m1) / g1)
        return mpmath.quad(integrand, [-mpmath.pi / 2, mid, mpmath.pi / 2])


class TestKL:
    @settings(max_examples=20)  # each example is a 20-digit quadrature (~0.1 s)
    @given(
        d=st.floats(-1e3, 1e3),
        log_ratio=st.floats(-6, 6),
        shift=magnitudes(-3, 3),
        base=magnitudes(-3, 3, signed=False),
    )
    def test_cauchy_kl_matches_quadrature(self, d, log_ratio, shift, base):
        m1, g1 = shift, base
        m2, g2 = shift + d * base, base * math.exp(log_ratio)
        p = IndependentCauchy(
            torch.tensor([m1, 0.0], dtype=torch.float64),
            torch.tensor([g1, 1.0], dtype=torch.float64),
        )
        q = IndependentCauchy(
            torch.tensor([m2, 0.0], dtype=torch.float64),
            torch.tensor([g2, 1.0], dtype=torch.float64),
        )
        got = kl_divergence(p, q).item()
        ref = float(mp_cauchy_kl(m1, g1, m2, g2))
        assert got >= 0
        assert got == pytest.approx(ref, rel=1e-8, abs=1e-12)

    def test_cauchy_kl_batch_and_monte_carlo(self):
        """Batched KL (shape = broadcast batch) vs a Monte Carlo estimate of E_p[log p - log q];
        the log ratio is bounded (|log p - log q| <= B), so Hoeffding gives the tolerance."""
        p = IndependentCauchy(torch.tensor([[0.0, 1.0], [2.0, -1.0]]), torch.tensor([1.0, 2.0]))
        q = IndependentCauchy(torch.tensor([0.5, 0.0]), torch.tensor([[3.0, 1.0]]))
        kl = kl_divergence(p, q)
        assert kl.shape == (2,)
        torch.manual_seed(9)
        n = 400000
        x = p.sample((n,)).double()
        p64 = IndependentCauchy(p.loc.double(), p.scale.double())
        q64 = IndependentCauchy(q.loc.double(), q.scale.double())
        r = p64.log_prob(x) - q64.log_prob(x)
        # bound on |log p/q| per component: |log(g2/g1)| + log(max over x of the ratio of (1+w^2)/(1+t^2))
        # taken conservatively from the sample range plus a margin; Hoeffding over [lo, hi]
        lo, hi = r.min(0).values - 1.0, r.max(0).values + 1.0
        eps = (hi - lo) * math.sqrt(math.log(2 / split_delta(2)) / (2 * n))
        assert ((r.mean(0) - kl.double()).abs() <= eps).all()
        assert kl_divergence(p, p).abs().max() == 0

    def test_cauchy_kl_gradients(self):
        """Finite differences, including p == q in one component (KL is smooth there)."""
        m1 = torch.tensor([0.3, 0.0, 5.0], dtype=torch.float64, requires_grad=True)
        g1 = torch.tensor([1.0, 2.0, 1e-3], dtype=torch.float64, requires_grad=True)
        m2 = torch.tensor([-1.0, 0.0, 0.0], dtype=torch.float64, requires_grad=True)
        g2 = torch.tensor([0.5, 2.0, 1e3], dtype=torch.float64, requires_grad=True)

        def kl(a, b, c, d):
            return kl_divergence(IndependentCauchy(a, b), IndependentCauchy(c, d))

        assert torch.autograd.gradcheck(kl, (m1, g1, m2, g2))
        grads = torch.autograd.grad(kl(m1, g1, m2, g2), (m1, g1))
        assert all(torch.isfinite(g).all() for g in grads)
        assert grads[0][1] == 0 and grads[1][1] == 0  # the minimum at p == q

    def test_cauchy_kl_event_shape_mismatch(self):
        with pytest.raises(ValueError, match="event shape"):
            kl_divergence(
                IndependentCauchy(torch.zeros(2), 1.0), IndependentCauchy(torch.zeros(3), 1.0)
            )

    def test_cauchy_kl_float32_extremes(self):
        p = IndependentCauchy(torch.tensor([0.0, 1e30]), torch.tensor([1e-30, 1.0]))
        q = IndependentCauchy(torch.tensor([1e30, 0.0]), torch.tensor([1e30, 1e-30]))
        got = kl_divergence(p, q).item()
        ref = mpmath.mpf(0)
        for c in range(2):  # the closed form at 50 digits on the float32-rounded parameters
            m1, g1, m2, g2 = (mpmath.mpf(t[c].item()) for t in (p.loc, p.scale, q.loc, q.scale))
            ref += mpmath.log(((g1 + g2) ** 2 + (m1 - m2) ** 2) / (4 * g1 * g2))
        assert math.isfinite(got)
        assert got == pytest.approx(float(ref), rel=1e-5)

    @given(
        z1=vectors(st.floats(-50, 50), 3),
        z2=vectors(st.floats(-50, 50), 3),
    )
    def test_ovr_kl_matches_bernoulli(self, z1, z2):
        l1, l2 = torch.tensor(z1, dtype=torch.float64), torch.tensor(z2, dtype=torch.float64)
        p, q = OvR(l1, 1.0, 0.0), OvR(l2, 1.0, 0.0)
        one = torch.ones(3, dtype=torch.float64)
        zero = torch.zeros(3, dtype=torch.float64)
        ref = kl_divergence(
            Bernoulli(probs=ref_ovr_probs64(l1, one, zero)),
            Bernoulli(probs=ref_ovr_probs64(l2, one, zero)),
        ).sum(-1)
        got = kl_divergence(p, q)
        assert got >= 0
        torch.testing.assert_close(got, ref, rtol=1e-7, atol=1e-12)

    def test_ovr_kl_float32_extremes_vs_mpmath(self):
        l1 = torch.tensor([1e30, -1e30, 1e10, 0.0])
        l2 = torch.tensor([-1e30, -1e20, 1e5, 1e-20])
        got = kl_divergence(OvR(l1, 1.0, 0.0), OvR(l2, 1.0, 0.0)).item()
        ref = mpmath.mpf(0)
        for a, b in zip(l1.tolist(), l2.tolist(), strict=True):
            lp1, lq1 = mp_ovr_logs(a, 1.0, 0.0)
            lp2, lq2 = mp_ovr_logs(b, 1.0, 0.0)
            ref += mpmath.exp(lp1) * (lp1 - lp2) + mpmath.exp(lq1) * (lq1 - lq2)
        assert math.isfinite(got)
        assert got == pytest.approx(float(ref), rel=1e-5)
        assert kl_divergence(OvR(l1, 1.0, 0.0), OvR(l1, 1.0, 0.0)).item() == 0


def test_docstring_examples_run():
    """The ``>>>`` examples in the module's docstrings are correct."""
    import doctest

    import cauchylin.distributions as module

    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted >= 20


@pytest.mark.parametrize(
    "build",
    [
        lambda: IndependentCauchy(torch.zeros(3, 2), torch.ones(2, 2)),
        lambda: OvR(torch.zeros(3, 2), torch.ones(2, 2), 0.0),
        lambda: OvR(torch.zeros(3, 2), torch.ones(3, 2), torch.zeros(4)),
    ],
)
def test_parameters_that_do_not_broadcast_raise_what_torch_raises(build):
    """torch's own distributions raise RuntimeError here; ours raise an error that is both."""
    with pytest.raises(RuntimeError) as torch_error:
        torch.distributions.Cauchy(torch.zeros(3, 2), torch.ones(2, 2))
    assert type(torch_error.value) is RuntimeError
    with pytest.raises(RuntimeError, match="do not broadcast"):
        build()
    with pytest.raises(ValueError, match="do not broadcast"):
        build()
    with pytest.raises(cauchylin.BroadcastError):
        build()
