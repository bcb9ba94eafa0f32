"""One contract, checked the same way for every distribution cauchylin ships.

The checks follow what torch (``test/distributions/test_distributions.py``) and Pyro
(``tests/distributions``) apply to their own distributions: shapes (batch, event, sample,
``infer_shapes``), ``expand`` (new and existing dimensions, ``expand_by``, the generic
``TorchDistribution.expand``, ``_get_checked_instance`` for subclasses), sampling (``has_rsample``,
support membership, empty sample shapes), ``arg_constraints`` (they hold, with torch's
event-dimension conventions), validation messages (bad parameters name the parameter, values
outside the support get torch's ``_validate_sample`` message), pickling, ``Independent`` /
``mask`` / ``to_event``, KL dispatch, ``torch.jit.trace``, and Pyro's ``poutine.trace``,
``Predictive``, SVI (``Trace_ELBO``, ``TraceMeanField_ELBO``) and ``TraceEnum_ELBO`` with an
enumerated discrete parent.

A new distribution joins by adding one :class:`Case` to ``CASES``.
"""

from __future__ import annotations

import copy
import math
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field

import pyro
import pyro.distributions as pdist
import pytest
import torch
from pyro.distributions.torch_distribution import TorchDistribution
from pyro.infer import (
    SVI,
    Predictive,
    Trace_ELBO,
    TraceEnum_ELBO,
    TraceMeanField_ELBO,
    config_enumerate,
)
from torch.distributions import Cauchy, Independent, constraints, kl_divergence

from cauchylin.distributions import IndependentCauchy, OvR, OvRLabel

Params = dict[str, torch.Tensor]


@dataclass
class Case:
    """How to build one distribution and what its contract looks like."""

    name: str
    cls: type[TorchDistribution]
    size: int  # C (components) or V (classes): the trailing dimension of every parameter
    event_shape: tuple[int, ...]
    params: Callable[[tuple[int, ...], torch.Generator], Params]
    # (parameter overrides, the name the ValueError must mention)
    bad_params: list[tuple[dict[str, torch.Tensor], str]] = field(default_factory=list)
    bad_values: list[torch.Tensor] = field(default_factory=list)  # outside the support
    value_dtype: torch.dtype = torch.float32
    has_rsample: bool = False
    is_discrete: bool = False
    kl_with_itself: bool = True

    def make(self, batch: tuple[int, ...] = (), seed: int = 0, **kw: object) -> TorchDistribution:
        gen = torch.Generator().manual_seed(seed)
        return self.cls(**self.params(batch, gen), **kw)


def _cauchy_params(batch: tuple[int, ...], gen: torch.Generator) -> Params:
    return {
        "loc": torch.randn(*batch, 3, generator=gen),
        "scale": torch.rand(*batch, 3, generator=gen) + 0.5,
    }


def _ovr_params(batch: tuple[int, ...], gen: torch.Generator) -> Params:
    return {
        "loc": torch.randn(*batch, 4, generator=gen) * 2,
        "scale": torch.rand(*batch, 4, generator=gen) + 0.5,
        "threshold": torch.randn(4, generator=gen),
    }


_OVR_BAD = [
    ({"scale": torch.tensor([1.0, 0.0, 1.0, 1.0])}, "scale"),
    ({"scale": torch.tensor([1.0, -2.0, 1.0, 1.0])}, "scale"),
    ({"loc": torch.tensor([0.0, math.nan, 0.0, 0.0])}, "loc"),
    ({"loc": torch.tensor([0.0, math.inf, 0.0, 0.0])}, "loc"),
    ({"threshold": torch.tensor([0.0, 0.0, math.nan, 0.0])}, "threshold"),
    ({"threshold": torch.tensor([0.0, 0.0, -math.inf, 0.0])}, "threshold"),
    ({"scale": torch.tensor([1.0, 1.0, math.inf, 1.0])}, "scale"),
]

CASES = [
    Case(
        name="IndependentCauchy",
        cls=IndependentCauchy,
        size=3,
        event_shape=(3,),
        params=_cauchy_params,
        bad_params=[
            ({"scale": torch.tensor([1.0, 0.0, 1.0])}, "scale"),
            ({"scale": torch.tensor([1.0, -1.0, 1.0])}, "scale"),
            ({"scale": torch.tensor([1.0, math.inf, 1.0])}, "scale"),
            ({"scale": torch.tensor([math.nan, 1.0, 1.0])}, "scale"),
            ({"loc": torch.tensor([0.0, math.nan, 0.0])}, "loc"),
            ({"loc": torch.tensor([0.0, -math.inf, 0.0])}, "loc"),
        ],
        bad_values=[torch.tensor([0.0, math.nan, 1.0])],
        has_rsample=True,
    ),
    Case(
        name="OvR",
        cls=OvR,
        size=4,
        event_shape=(4,),
        params=_ovr_params,
        bad_params=_OVR_BAD,
        bad_values=[
            torch.tensor([0.0, 0.5, 1.0, 0.0]),
            torch.tensor([0.0, 2.0, 1.0, 0.0]),
            torch.tensor([-1.0, 0.0, 1.0, 0.0]),
        ],
        is_discrete=True,
    ),
    Case(
        name="OvRLabel",
        cls=OvRLabel,
        size=4,
        event_shape=(),
        params=_ovr_params,
        bad_params=_OVR_BAD,
        bad_values=[torch.tensor(4), torch.tensor(-1), torch.tensor(0.5), torch.tensor(math.nan)],
        value_dtype=torch.long,
        is_discrete=True,
        kl_with_itself=False,  # log_prob is not a normalised law over labels
    ),
]
BATCHES = [(), (1,), (2, 3)]


@pytest.fixture(params=CASES, ids=[c.name for c in CASES])
def case(request: pytest.FixtureRequest) -> Case:
    return request.param


def _log_prob_shape(d: TorchDistribution, value_shape: torch.Size) -> torch.Size:
    n_event = len(d.event_shape)
    full = torch.broadcast_shapes(value_shape, d.batch_shape + d.event_shape)
    return full[: len(full) - n_event]


def _check_sample_shapes(small: TorchDistribution, large: TorchDistribution) -> None:
    """Pyro's check: an expanded distribution scores like the small one, broadcast."""
    x = small.sample()
    torch.testing.assert_close(small.log_prob(x).expand(large.batch_shape), large.log_prob(x))
    x = large.sample()
    torch.testing.assert_close(small.log_prob(x), large.log_prob(x))


# ------------------------------------------------------------------------------------ shapes


@pytest.mark.parametrize("batch", BATCHES)
def test_batch_event_and_parameter_shapes(case: Case, batch: tuple[int, ...]):
    d = case.make(batch)
    assert d.batch_shape == batch and d.event_shape == case.event_shape
    assert d.event_dim == len(case.event_shape)
    assert d.shape() == torch.Size(batch + case.event_shape)
    for name in case.cls.arg_constraints:
        assert getattr(d, name).shape == (*batch, case.size), name
    shapes = {k: tuple(v.shape) for k, v in case.params(batch, torch.Generator()).items()}
    assert case.cls.infer_shapes(**shapes) == (torch.Size(batch), torch.Size(case.event_shape))


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("sample_shape", [(), (0,), (5,), (2, 3)])
def test_sample_shapes_support_and_log_prob_shape(case, batch, sample_shape):
    d = case.make(batch, validate_args=True)
    x = d.sample(sample_shape)
    assert x.shape == torch.Size(sample_shape) + d.batch_shape + d.event_shape
    assert x.dtype == case.value_dtype and not x.requires_grad
    if x.numel():  # (torch's independent constraints cannot check an empty tensor)
        assert bool(d.support.check(x).all())
    lp = d.log_prob(x)
    assert lp.shape == torch.Size(sample_shape) + d.batch_shape
    assert bool(torch.isfinite(lp).all())
    assert lp.shape == _log_prob_shape(d, x.shape)


def test_sample_of_an_unbatched_distribution_outside_a_plate(case):
    """The bare ``sample()`` (no batch, no sample shape) that crashed for OvRLabel."""
    d = case.make(())
    x = d.sample()
    assert x.shape == case.event_shape
    assert pyro.poutine.trace(lambda: pyro.sample("x", d)).get_trace().nodes["x"][
        "value"
    ].shape == (case.event_shape)


def test_rsample_follows_has_rsample(case):
    assert case.cls.has_rsample is case.has_rsample
    params = {k: v.requires_grad_() for k, v in case.params((2,), torch.Generator()).items()}
    d = case.cls(**params)
    if case.has_rsample:
        x = d.rsample((4,))
        assert x.requires_grad and x.shape == (4, 2, *case.event_shape)
        grads = torch.autograd.grad(x.sum(), list(params.values()))
        assert all(bool(torch.isfinite(g).all()) for g in grads)
    else:
        with pytest.raises(NotImplementedError):
            d.rsample()
    assert not d.sample().requires_grad


def test_support_attributes(case):
    d = case.make((2,))
    assert d.support.event_dim == d.event_dim
    assert d.support.is_discrete is case.is_discrete
    assert not case.cls.has_enumerate_support


def test_log_prob_value_shape_errors(case):
    d = case.make((2, 3), validate_args=True)
    non_broadcastable = torch.ones((3, 3, *case.event_shape), dtype=case.value_dtype)
    with pytest.raises(ValueError):
        d.log_prob(non_broadcastable)
    if case.event_shape:
        wrong_event = torch.zeros((2, 3, case.event_shape[0] + 1))
        with pytest.raises(ValueError):
            d.log_prob(wrong_event)


# ------------------------------------------------------------------------------------ expand


@pytest.mark.parametrize("sample_shape", [(), (2,), (2, 3)])
@pytest.mark.parametrize("shape_type", [torch.Size, tuple, list])
@pytest.mark.parametrize("default", [False, True])
def test_expand_new_dimensions(case, sample_shape, shape_type, default):
    for batch in BATCHES:
        small = case.make(batch)
        target = shape_type(sample_shape + batch)
        large = TorchDistribution.expand(small, target) if default else small.expand(target)
        assert large.batch_shape == sample_shape + batch
        assert large.event_shape == small.event_shape
        _check_sample_shapes(small, large)
        by = small.expand_by(shape_type(sample_shape))
        assert by.batch_shape == sample_shape + batch
        _check_sample_shapes(small, by)


@pytest.mark.parametrize("default", [False, True])
def test_expand_an_existing_dimension_and_subsequent_expands(case, default):
    small = case.make((1, 3))
    expand = (
        (lambda d, s: TorchDistribution.expand(d, s)) if default else (lambda d, s: d.expand(s))
    )
    large = expand(small, (5, 3))
    assert large.batch_shape == (5, 3)
    _check_sample_shapes(small, large)
    d = small
    for shape in [(2, 1, 3), (2, 5, 3)]:
        d = expand(d, shape)
        assert d.batch_shape == shape
        _check_sample_shapes(small, d)


@pytest.mark.parametrize(
    ("initial", "proposed"), [((2, 1), (4, 3)), ((2, 4), (2, 2, 1)), ((1, 2, 1), (2, 1))]
)
def test_expand_errors(case, initial, proposed):
    large = case.make(()).expand(initial)
    with pytest.raises((RuntimeError, ValueError)):
        large.expand(proposed)


def test_expand_is_a_view_keeps_validation_and_checks_subclasses(case):
    d = case.make((3,), validate_args=True)
    e = d.expand((2, 3))
    assert type(e) is case.cls and e._validate_args is True
    for name in case.cls.arg_constraints:
        assert getattr(e, name).untyped_storage().data_ptr() == (
            getattr(d, name).untyped_storage().data_ptr()
        ), f"{name} was copied"
    # torch's _get_checked_instance: a subclass without its own __init__ expands to itself ...
    plain_subclass = type("Plain", (case.cls,), {})
    sub = plain_subclass(**case.params((3,), torch.Generator()))
    assert type(sub.expand((2, 3))) is plain_subclass
    # ... and one with a custom __init__ must override expand
    custom = type(
        "Custom",
        (case.cls,),
        {"__init__": lambda self, **kw: case.cls.__init__(self, **kw)},
    )
    with pytest.raises(NotImplementedError):
        custom(**case.params((3,), torch.Generator())).expand((2, 3))


# ------------------------------------------------------------------------------------ constraints


@pytest.mark.parametrize("batch", BATCHES)
def test_arg_constraints_hold_with_torch_event_dim_conventions(case, batch):
    d = case.make(batch)
    for name, constraint in case.cls.arg_constraints.items():
        # every parameter carries the trailing C/V dimension: torch declares such parameters
        # with event_dim 1 (real_vector, independent(positive, 1)), so check() is per batch entry
        assert constraint.event_dim == 1, name
        ok = constraint.check(getattr(d, name))
        assert ok.shape == batch and bool(ok.all()), name
    case.make(batch, validate_args=True)  # torch's own constructor check passes


def test_bad_parameters_raise_value_errors_naming_the_parameter(case):
    for overrides, name in case.bad_params:
        params = case.params((), torch.Generator())
        params.update(overrides)
        with pytest.raises(ValueError, match=name):
            case.cls(**params, validate_args=True)
        case.cls(**params, validate_args=False)  # switched off: accepted unchecked
    with pytest.raises(ValueError, match="loc"):  # shapes never broadcast: always checked
        params = case.params((), torch.Generator())
        params["loc"] = torch.zeros(case.size + 1)
        case.cls(**params, validate_args=False)


def test_values_outside_the_support_get_torchs_message(case):
    d = case.make((), validate_args=True)
    for value in case.bad_values:
        with pytest.raises(ValueError, match="to be within the support"):
            d.log_prob(value)


def test_validation_follows_pyro_and_cauchylin_switches(case):
    params = case.params((), torch.Generator())
    overrides, name = case.bad_params[0]
    params.update(overrides)
    with pyro.validation_enabled(True), pytest.raises(ValueError, match=name):
        case.cls(**params)
    with pyro.validation_enabled(False):
        case.cls(**params)
    import cauchylin

    with pyro.validation_enabled(True), cauchylin.validation(False):
        case.cls(**params)


# ------------------------------------------------------------------------------------ round trips


def test_pickle_and_deepcopy_round_trip(case):
    d = case.make((2,), validate_args=True)
    x = d.sample((3,))
    for e in (pickle.loads(pickle.dumps(d)), copy.deepcopy(d)):
        assert type(e) is type(d)
        assert e.batch_shape == d.batch_shape and e.event_shape == d.event_shape
        assert e._validate_args == d._validate_args
        for name in case.cls.arg_constraints:
            assert torch.equal(getattr(e, name), getattr(d, name))
        torch.testing.assert_close(e.log_prob(x), d.log_prob(x), rtol=0, atol=0)


def test_independent_mask_and_to_event(case):
    d = case.make((2, 3))
    x = d.sample((4,))
    ind = Independent(d, 1)
    assert ind.batch_shape == (2,) and ind.event_shape == (3, *case.event_shape)
    torch.testing.assert_close(ind.log_prob(x), d.log_prob(x).sum(-1))
    te = d.to_event(1)
    assert te.batch_shape == (2,) and te.event_shape == (3, *case.event_shape)
    torch.testing.assert_close(te.log_prob(x), ind.log_prob(x))
    mask = torch.tensor([[True, False, True], [False, False, True]])
    masked = d.mask(mask)
    lp = masked.log_prob(x)
    torch.testing.assert_close(lp, torch.where(mask, d.log_prob(x), torch.zeros(())))


# ------------------------------------------------------------------------------------ KL


def test_kl_dispatch(case):
    p, q = case.make((2,), seed=1), case.make((2,), seed=2)
    if not case.kl_with_itself:
        with pytest.raises(NotImplementedError):
            kl_divergence(p, q)
        return
    kl = kl_divergence(p, q)
    assert kl.shape == (2,) and bool((kl > 0).all())
    assert kl_divergence(p, p).abs().max().item() <= 1e-6
    # expanded and Independent-wrapped distributions dispatch too
    torch.testing.assert_close(
        kl_divergence(p.expand((3, 2)), q.expand((3, 2))), kl.expand(3, 2), rtol=0, atol=0
    )
    torch.testing.assert_close(kl_divergence(p.to_event(1), q.to_event(1)), kl.sum())


def test_kl_between_independent_cauchy_and_torch_independent_cauchy():
    """Both directions, against torch's KL(Independent(Cauchy, 1) || Independent(Cauchy, 1))."""
    gen = torch.Generator().manual_seed(3)
    loc1, loc2 = torch.randn(2, 5, generator=gen), torch.randn(5, generator=gen)
    s1, s2 = torch.rand(2, 5, generator=gen) + 0.1, torch.rand(5, generator=gen) + 0.1
    ours_p, ours_q = IndependentCauchy(loc1, s1), IndependentCauchy(loc2, s2)
    torch_p, torch_q = Independent(Cauchy(loc1, s1), 1), Independent(Cauchy(loc2, s2), 1)
    ref = kl_divergence(torch_p, torch_q)  # torch's own Cauchy KL, summed by Independent
    torch.testing.assert_close(kl_divergence(ours_p, torch_q), ref)
    torch.testing.assert_close(kl_divergence(torch_p, ours_q), ref)
    torch.testing.assert_close(kl_divergence(ours_p, ours_q), ref)
    # Pyro's Independent (a subclass) dispatches too
    pyro_q = pdist.Cauchy(loc2, s2).to_event(1)
    torch.testing.assert_close(kl_divergence(ours_p, pyro_q), ref)
    with pytest.raises(NotImplementedError, match="Independent\\(Normal, 1\\)"):
        kl_divergence(ours_p, Independent(torch.distributions.Normal(loc2, s2), 1))
    with pytest.raises(NotImplementedError, match="Independent\\(Cauchy, 2\\)"):
        kl_divergence(
            IndependentCauchy(loc1.reshape(10), s1.reshape(10)), Independent(Cauchy(loc1, s1), 2)
        )
    with pytest.raises(ValueError, match="event shape"):
        kl_divergence(ours_p, Independent(Cauchy(torch.zeros(4), torch.ones(4)), 1))


# ------------------------------------------------------------------------------------ jit.trace


def _traceable_outputs(case: Case) -> dict[str, Callable[..., torch.Tensor]]:
    """``what -> f(distribution, value)``; ``value`` is a traced input (a sample drawn outside:
    ``torch.no_grad`` inside ``sample`` is not recorded by a trace, as for torch's own laws)."""
    outputs: dict[str, Callable[..., torch.Tensor]] = {
        "log_prob": lambda d, x: d.log_prob(x),
        "sample": lambda d, x: d.sample((3,)),
    }
    if case.has_rsample:
        outputs["rsample"] = lambda d, x: d.rsample((3,))
    if case.cls is IndependentCauchy:
        outputs["cdf"] = lambda d, x: d.cdf(x)
    if case.cls is not OvRLabel:  # OvRLabel has no mean/variance/entropy (not normalised)
        outputs.update(
            mean=lambda d, x: d.mean,
            variance=lambda d, x: d.variance,
            entropy=lambda d, x: d.entropy(),
        )
    return outputs


@pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated")  # both categories
@pytest.mark.parametrize("requires_grad", [False, True])
def test_jit_trace(case, requires_grad):
    """torch's TestJit recipe: trace a function of the parameters and a value (validation off
    inside, as torch does), check the trace, and compare it with eager on new inputs (same
    seed), values and gradients."""
    names = list(case.params((), torch.Generator()))

    def inputs(seed: int) -> list[torch.Tensor]:
        params = case.params((2,), torch.Generator().manual_seed(seed))
        torch.manual_seed(seed)
        value = case.cls(**params).sample((2,))
        return [p.requires_grad_(requires_grad) for p in params.values()] + [value]

    for what, out in _traceable_outputs(case).items():

        def f(*args: torch.Tensor, out=out) -> torch.Tensor:
            params = dict(zip(names, args[:-1], strict=True))
            return out(case.cls(**params, validate_args=False), args[-1])

        args = inputs(0)
        torch.manual_seed(0)
        traced = torch.jit.trace(f, tuple(args), check_trace=what not in ("sample", "rsample"))
        new = inputs(1)
        torch.manual_seed(5)
        got = traced(*new)
        torch.manual_seed(5)
        ref = f(*new)
        torch.testing.assert_close(got, ref, equal_nan=True, msg=f"{case.name}.{what}")
        if requires_grad and ref.requires_grad:
            params = new[:-1]
            g_t = torch.autograd.grad(got.sum(), params, allow_unused=True)
            torch.manual_seed(5)
            g_e = torch.autograd.grad(f(*new).sum(), params, allow_unused=True)
            for a, b in zip(g_t, g_e, strict=True):
                assert (a is None) == (b is None)
                if a is not None:
                    torch.testing.assert_close(a, b, msg=f"{case.name}.{what} gradient")


# ------------------------------------------------------------------------------------ Pyro


def test_poutine_trace_in_a_plate_and_predictive(case):
    """A batch-free distribution inside a plate is expanded by Pyro; log_prob has the plate
    shape; Predictive draws samples of shape [num_samples, N, *event]."""
    d = case.make(())
    N = 5

    def model(obs: torch.Tensor | None = None) -> None:
        with pyro.plate("data", N):
            pyro.sample("y", d, obs=obs)

    tr = pyro.poutine.trace(model).get_trace()
    tr.compute_log_prob()
    site = tr.nodes["y"]
    assert site["value"].shape == (N, *case.event_shape)
    assert site["fn"].batch_shape == (N,)
    torch.testing.assert_close(site["log_prob"], d.log_prob(site["value"]))
    obs = d.sample((N,))
    tr = pyro.poutine.trace(model).get_trace(obs)
    torch.testing.assert_close(tr.log_prob_sum(), d.log_prob(obs).sum())
    samples = Predictive(model, num_samples=7)()["y"]
    assert samples.shape == (7, N, *case.event_shape)
    assert bool(d.support.check(samples).all())


def test_svi_fits_an_observed_site(case):
    """Maximum likelihood through SVI: the learnable loc moves towards the data's parameters."""
    pyro.clear_param_store()
    torch.manual_seed(0)
    truth = case.make((), seed=4)
    data = truth.sample((400,))
    others = {
        k: v for k, v in case.params((), torch.Generator().manual_seed(4)).items() if k != "loc"
    }

    def model(obs: torch.Tensor) -> None:
        loc = pyro.param("loc", torch.zeros(case.size))
        with pyro.plate("data", obs.shape[0]):
            pyro.sample("y", case.cls(loc=loc, **others), obs=obs)

    svi = SVI(model, lambda obs: None, pyro.optim.Adam({"lr": 0.1}), Trace_ELBO())
    first = svi.step(data)
    for _ in range(150):
        last = svi.step(data)
    assert math.isfinite(first) and last < first
    fitted = pyro.param("loc").detach()
    # the fitted loc explains the data at least as well as the truth, up to sampling noise
    fit_nll = -case.cls(loc=fitted, **others).log_prob(data).mean()
    true_nll = -truth.log_prob(data).mean()
    assert fit_nll <= true_nll + 0.01


def test_svi_with_a_latent_independent_cauchy_uses_the_registered_kl():
    """TraceMeanField_ELBO of a model with only z ~ p and a guide z ~ q is exactly KL(q || p)."""
    pyro.clear_param_store()
    prior = IndependentCauchy(torch.zeros(3), torch.ones(3))

    def model() -> None:
        pyro.sample("z", prior)

    def guide() -> None:
        loc = pyro.param("q_loc", torch.tensor([0.5, -1.0, 2.0]))
        scale = pyro.param(
            "q_scale", torch.tensor([0.3, 1.0, 2.0]), constraint=constraints.positive
        )
        pyro.sample("z", IndependentCauchy(loc, scale))

    loss = TraceMeanField_ELBO().differentiable_loss(model, guide)
    q = IndependentCauchy(pyro.param("q_loc"), pyro.param("q_scale"))
    torch.testing.assert_close(loss, kl_divergence(q, prior))
    # SVI with the reparameterised Trace_ELBO pulls q towards p
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 0.05}), Trace_ELBO(num_particles=8))
    torch.manual_seed(0)
    for _ in range(200):
        svi.step()
    q = IndependentCauchy(pyro.param("q_loc").detach(), pyro.param("q_scale").detach())
    assert kl_divergence(q, prior).item() < 0.5 * loss.item()


def test_trace_enum_elbo_with_an_enumerated_parent(case):
    """A two-component mixture: TraceEnum_ELBO sums the enumerated z exactly; the observed
    site broadcasts its batch [K, 1] against the plate [N]. Reference: the sum by hand."""
    pyro.clear_param_store()
    K, N = 2, 6
    weights = torch.tensor([0.3, 0.7])
    comps = [case.make((), seed=10 + k) for k in range(K)]
    stacked = {
        name: torch.stack([getattr(c, name) for c in comps]) for name in case.cls.arg_constraints
    }
    data = comps[1].sample((N,))

    @config_enumerate
    def model() -> None:
        z = pyro.sample("z", pdist.Categorical(weights))
        with pyro.plate("data", N):
            params = {name: v[z] for name, v in stacked.items()}
            pyro.sample("y", case.cls(**params), obs=data)

    loss = TraceEnum_ELBO(max_plate_nesting=1).loss(model, lambda: None)
    per_z = torch.stack([c.log_prob(data).sum() for c in comps])  # [K]
    ref = -torch.logsumexp(weights.log() + per_z, 0)
    assert loss == pytest.approx(ref.item(), rel=1e-6)
