"""Every error ``CauchyVector`` raises: the type, and a message that names the argument and shapes.

``ValueError`` for bad values and shapes, ``IndexError`` for bad indices, ``NotImplementedError``
where no closed form exists. Validation of values (NaN, inf, non-positive scales) can be switched
off globally, for a block, or per vector; shape checks always run.
"""

from __future__ import annotations

import math

import pytest
import torch

import cauchylin
from cauchylin import CauchyVector, cat, kl_divergence


@pytest.fixture
def u() -> CauchyVector:
    return CauchyVector(torch.zeros(4, 3), torch.ones(4, 3))


# ------------------------------------------------------------------------------ construction


@pytest.mark.parametrize(
    ("loc", "scale", "pattern"),
    [
        (torch.zeros(3), torch.tensor([1.0, 0.0, 1.0]), r"scale must be strictly positive.*\(3,\)"),
        (torch.zeros(3), torch.tensor([1.0, -2.0, 1.0]), r"scale must be strictly positive.*-2\.0"),
        (torch.tensor([0.0, math.nan]), torch.ones(2), r"loc must be finite.*NaN.*\(2,\)"),
        (torch.tensor([math.inf, 0.0]), torch.ones(2), r"loc must be finite.*infinite.*\(2,\)"),
        (torch.zeros(2), torch.tensor([math.nan, 1.0]), r"scale must be finite.*NaN"),
        (torch.zeros(2), torch.tensor([1.0, math.inf]), r"scale must be finite.*infinite"),
        (torch.zeros(3), torch.ones(2), r"do not broadcast: loc \(3,\), scale \(2,\)"),
        (torch.zeros(2, 3), torch.ones(4, 3), r"loc \(2, 3\), scale \(4, 3\)"),
        (torch.tensor(0.0), torch.tensor(1.0), r"at least one dimension.*loc \(\)"),
    ],
)
def test_bad_parameters_raise_value_errors_naming_the_argument(loc, scale, pattern):
    with pytest.raises(ValueError, match=pattern):
        CauchyVector(loc, scale)


def test_validation_can_be_switched_off_per_vector_globally_and_for_a_block():
    bad = (torch.zeros(2), torch.tensor([-1.0, math.nan]))
    CauchyVector(*bad, validate_args=False)  # per vector
    with cauchylin.validation(False):  # for a block
        v = CauchyVector(*bad)
        v.log_cdf(torch.tensor([math.nan, 0.0]))  # x is not checked either
    with pytest.raises(ValueError):
        CauchyVector(*bad)  # the block restored the default
    cauchylin.set_validate_args(False)  # globally
    try:
        CauchyVector(*bad)
        CauchyVector(torch.zeros(2), torch.ones(2)) / 0.0
    finally:
        cauchylin.set_validate_args(True)
    with pytest.raises(ValueError):
        CauchyVector(*bad)
    # a per-vector True overrides a global False
    with cauchylin.validation(False), pytest.raises(ValueError):
        CauchyVector(*bad, validate_args=True)


def test_shape_checks_run_even_without_validation():
    with cauchylin.validation(False):
        with pytest.raises(ValueError, match="do not broadcast"):
            CauchyVector(torch.zeros(3), torch.ones(2))
        v = CauchyVector(torch.zeros(4, 3), torch.ones(4, 3))
        with pytest.raises(ValueError, match="inner dimension"):
            v.linear(torch.ones(2, 5))
        with pytest.raises(ValueError, match=r"x \(5,\)"):
            v.log_prob(torch.zeros(5))


def test_validation_on_means_no_silent_nan():
    """With validation on, every NaN that could enter raises instead of propagating."""
    v = CauchyVector(torch.zeros(2), torch.ones(2))
    nan2 = torch.tensor([0.0, math.nan])
    for method in ("log_prob", "cdf", "sf", "log_cdf", "log_sf"):
        with pytest.raises(ValueError, match=r"x holds NaN.*\(2,\)"):
            getattr(v, method)(nan2)
    for method in ("ovr_prob", "ovr_log_prob"):
        with pytest.raises(ValueError, match="threshold holds NaN"):
            getattr(v, method)(nan2)
    with pytest.raises(ValueError, match="q must lie in"):
        v.icdf(nan2)
    with pytest.raises(ValueError, match="shift must be finite"):
        v + nan2
    with pytest.raises(ValueError, match="factor must be finite"):
        v * nan2
    with pytest.raises(ValueError, match="weight must be finite"):
        v.linear(torch.tensor([[1.0, math.nan]]))
    with pytest.raises(ValueError, match="bias must be finite"):
        v.linear(torch.ones(1, 2), torch.tensor([math.inf]))
    deg = v.linear(torch.ones(1, 2)) - v.linear(torch.ones(1, 2))
    with pytest.raises(ValueError, match="degenerate"):
        deg.log_prob(torch.zeros(1))
    # validation off: the same calls return (documented) NaN or limits instead of raising
    w = CauchyVector(torch.zeros(2), torch.ones(2), validate_args=False)
    assert bool(torch.isnan(w.log_cdf(nan2)[1]))


# ------------------------------------------------------------------------------ linear maps


def test_linear_errors_name_weight_bias_and_shapes(u):
    with pytest.raises(ValueError, match=r"weight must be a tensor of shape \[out, C\].*\(3,\)"):
        u.linear(torch.ones(3))
    with pytest.raises(ValueError, match=r"weight must be a tensor.*list"):
        u.linear([[1.0, 2.0, 3.0]])
    with pytest.raises(
        ValueError, match=r"inner dimension 2 .* C=3 .*weight shape \(5, 2\), vector shape \(4, 3\)"
    ):
        u.linear(torch.ones(5, 2))
    with pytest.raises(ValueError, match=r"bias must have last dimension 5.*\(5, 3\).*bias \(4,\)"):
        u.linear(torch.ones(5, 3), torch.zeros(4))
    with pytest.raises(ValueError, match=r"bias must have last dimension.*bias \(\)"):
        u.linear(torch.ones(5, 3), torch.tensor(0.0))
    with pytest.raises(ValueError, match=r"vector_batch \(4,\), weight_batch \(2,\)"):
        u.linear(torch.ones(2, 5, 3))
    with pytest.raises(ValueError, match=r"bias_batch \(3,\)"):
        u.linear(torch.ones(5, 3), torch.zeros(3, 5))


# ------------------------------------------------------------------------------ arithmetic


def test_arithmetic_errors(u):
    with pytest.raises(ValueError, match=r"3 and 2 components \(shapes \(4, 3\) and \(2,\)\)"):
        u + CauchyVector(torch.zeros(2), torch.ones(2))
    with pytest.raises(ValueError, match=r"do not broadcast: left \(4, 3\), right \(5, 3\)"):
        u + CauchyVector(torch.zeros(5, 3), torch.ones(5, 3))
    with pytest.raises(ValueError, match=r"vector \(4, 3\), shift \(2,\)"):
        u + torch.zeros(2)
    with pytest.raises(ValueError, match=r"shift of shape \(4, 5\) would change the number of"):
        u[..., :1] + torch.zeros(4, 5)
    with pytest.raises(ValueError, match=r"vector \(4, 3\), factor \(5,\)"):
        u * torch.ones(5)
    with pytest.raises(ValueError, match=r"factor of shape \(4, 2\) would change"):
        u[..., :1] * torch.ones(4, 2)
    with pytest.raises(ValueError, match="divisor must be non-zero"):
        u / torch.tensor([1.0, 0.0, 1.0])
    with pytest.raises(NotImplementedError, match="product of two Cauchy vectors"):
        u * u
    with pytest.raises(NotImplementedError, match="ratio of two Cauchy vectors"):
        u / u
    with pytest.raises(NotImplementedError, match="a / X"):
        1.0 / u
    with pytest.raises(TypeError, match="other must be a number or a tensor"):
        u + "1"
    with pytest.raises(TypeError, match="factor must be a number or a tensor"):
        u * "2"


# ------------------------------------------------------------------------------ indexing


def test_indexing_errors_are_index_errors(u):
    with pytest.raises(IndexError, match=r"too many indices .* 2 dimensions"):
        u[0, 0, 0]
    with pytest.raises(
        IndexError, match=r"integer index on the component dimension.*x\[\.\.\., k:k\+1\]"
    ):
        u[..., 1]
    with pytest.raises(IndexError, match=r"integer index on the component dimension"):
        u[0][1]
    with pytest.raises(IndexError, match="out of bounds for dimension 0 with size 4"):
        u[4]
    with pytest.raises(IndexError, match="out of bounds for dimension 0 with size 3"):
        u[..., [0, 3]]
    with pytest.raises(
        IndexError, match=r"boolean mask on the component dimension must have shape \(3,\)"
    ):
        u[..., torch.tensor([True, False])]
    with pytest.raises(IndexError, match="boolean mask may not span"):
        u[torch.ones(4, 3, dtype=torch.bool)]
    with pytest.raises(IndexError, match="cannot insert dimensions after the component"):
        u[..., None]
    with pytest.raises(IndexError, match="1-D list of indices"):
        u[..., torch.tensor([[0, 1]])]
    # what is allowed
    assert u[..., torch.tensor([True, False, True])].shape == (4, 2)
    assert u[None, 1:3, [2, 0]].shape == (1, 2, 2)
    assert u[torch.tensor([True, False, True, True])].shape == (3, 3)


def test_reshape_and_expand_errors(u):
    with pytest.raises(
        ValueError, match=r"reshape keeps the component dimension C=3; got shape \(2, 6\)"
    ):
        u.reshape(2, 6)
    with pytest.raises(ValueError, match=r"cannot reshape batch \(4,\) to \(3,\)"):
        u.reshape(3, 3)
    with pytest.raises(ValueError, match=r"cannot expand a vector of shape \(4, 3\) to \(4, 5\)"):
        u.expand(4, 5)
    with pytest.raises(ValueError, match=r"cannot expand a vector of shape \(4, 3\) to \(5, 3\)"):
        u.expand(5, 3)
    assert u.reshape(2, 2, -1).shape == (2, 2, 3)
    assert u.expand(2, 4, 3).shape == (2, 4, 3)
    assert u[..., :1].expand(4, 7).shape == (4, 7)


def test_cat_errors():
    a = CauchyVector(torch.zeros(4, 3), torch.ones(4, 3))
    with pytest.raises(ValueError, match="non-empty sequence"):
        cat([])
    with pytest.raises(ValueError, match="CauchyVector instances"):
        cat([a, torch.zeros(4, 3)])
    with pytest.raises(ValueError, match=r"same number of dimensions; got \[\(4, 3\), \(3,\)\]"):
        cat([a, CauchyVector(torch.zeros(3), torch.ones(3))])
    with pytest.raises(
        ValueError,
        match=r"broadcastable batch shapes; got vectors of shapes \[\(4, 3\), \(5, 2\)\]",
    ):
        cat([a, CauchyVector(torch.zeros(5, 2), torch.ones(5, 2))])
    with pytest.raises(
        ValueError, match=r"must match except along dim 0; got \[\(4, 3\), \(2, 2\)\]"
    ):
        cat([a, CauchyVector(torch.zeros(2, 2), torch.ones(2, 2))], dim=0)
    with pytest.raises(ValueError, match="dim 2 is out of range for vectors with 2 dimensions"):
        cat([a, a], dim=2)
    with pytest.raises(ValueError, match="dim -3 is out of range"):
        cat([a, a], dim=-3)


# ------------------------------------------------------------------------------ element-wise


def test_elementwise_shape_errors_name_the_argument(u):
    for method in ("log_prob", "cdf", "sf", "log_cdf", "log_sf"):
        with pytest.raises(ValueError, match=r"do not broadcast: x \(5,\), vector \(4, 3\)"):
            getattr(u, method)(torch.zeros(5))
    for method in ("ovr_prob", "ovr_log_prob"):
        with pytest.raises(ValueError, match=r"threshold \(2, 3\), vector \(4, 3\)"):
            getattr(u, method)(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"q \(3, 1\), vector \(4, 3\)"):
        u.icdf(torch.full((3, 1), 0.5))
    with pytest.raises(ValueError, match=r"q must lie in \[0, 1\] \(shape \(3,\)\)"):
        u.icdf(torch.tensor([0.5, 1.5, 0.5]))
    with pytest.raises(ValueError, match=r"q must lie in"):
        u.icdf(-0.1)
    with pytest.raises(TypeError, match="x must be a number or a tensor"):
        u.log_prob("0")


def test_to_distribution_refuses_dependent_vectors_and_builds_independent_ones(u):
    s = u.linear(torch.ones(2, 3))
    with pytest.raises(ValueError, match="needs independent components"):
        s.to_distribution()
    with pytest.raises(ValueError, match="needs independent components"):
        u[0].expand(2, 3).to_distribution()
    with pytest.raises(ValueError, match="needs independent components"):
        u[..., [0, 0]].to_distribution()
    from cauchylin.distributions import IndependentCauchy

    d = (u * 2.0 + 1.0).to_distribution()
    assert isinstance(d, IndependentCauchy)
    torch.testing.assert_close(d.loc, torch.ones(4, 3))
    torch.testing.assert_close(d.scale, torch.full((4, 3), 2.0))
    assert d.event_shape == (3,) and d.batch_shape == (4,)
    x = torch.randn(4, 3)
    torch.testing.assert_close(d.log_prob(x), (u * 2.0 + 1.0).log_prob(x).sum(-1))


def test_kl_divergence_errors(u):
    with pytest.raises(ValueError, match="p and q must be CauchyVector"):
        kl_divergence(u, torch.zeros(4, 3))
    with pytest.raises(ValueError, match=r"do not broadcast: p \(4, 3\), q \(2, 3\)"):
        kl_divergence(u, CauchyVector(torch.zeros(2, 3), torch.ones(2, 3)))


# ------------------------------------------------------------------------------ graph capture


def _embedding_and_inputs():
    from cauchylin.nn import NumericEmbedding  # the layer whose forward validates its input

    emb = NumericEmbedding(4, generator=torch.Generator().manual_seed(0))
    base = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(1))
    values = torch.tensor([[0.0, 1.5, -2.0], [3.0, 0.0, -1e3]])
    return emb, base, values


def test_value_checks_do_not_break_torch_export():
    """check_finite reads tensor data; while exporting it is skipped (shape checks remain)."""
    emb, base, values = _embedding_and_inputs()
    exported = torch.export.export(emb, (base, values))
    torch.testing.assert_close(exported.module()(base, values), emb(base, values))
    # eager calls still validate
    with pytest.raises(ValueError, match="numeric_values must be finite"):
        emb(base, torch.full((2, 3), math.nan))


def test_value_checks_do_not_break_full_graph_compile():
    emb, base, values = _embedding_and_inputs()
    compiled = torch.compile(emb, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(base, values), emb(base, values))

    def scores(loc: torch.Tensor, scale: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        from cauchylin._validation import check_finite, check_positive_finite

        check_finite("loc", loc)
        check_positive_finite("scale", scale)
        return (x - loc) / scale

    args = (torch.zeros(3), torch.ones(3), torch.tensor([0.5, -1.0, 2.0]))
    torch.testing.assert_close(
        torch.compile(scores, fullgraph=True, backend="eager")(*args), scores(*args)
    )


@pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated")  # both categories
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_value_checks_are_skipped_inside_torch_jit_trace():
    """The trace holds no host read of the data: it runs on other inputs like eager does."""
    emb, base, values = _embedding_and_inputs()
    traced = torch.jit.trace(emb, (base, values))
    torch.testing.assert_close(traced(base, 2 * values), emb(base, 2 * values))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), 0.0, -2.0])
@pytest.mark.parametrize("where", [0, 4095, 777 * 4096 + 13, 1024 * 4096 - 1])
def test_one_bad_entry_in_a_large_tensor_is_found(dtype, bad, where):
    """The value checks read large tensors in one vectorised pass: one bad entry, first, last,
    inside a vector block or in the tail of one, must still be found (and named)."""
    loc = torch.zeros(1024, 4096, dtype=dtype)
    scale = torch.ones(1024, 4096, dtype=dtype)
    scale.view(-1)[where] = bad
    with pytest.raises(ValueError, match="scale must be"):
        CauchyVector(loc, scale)
    if bad != bad or abs(bad) == float("inf"):
        loc.view(-1)[where] = bad
        with pytest.raises(ValueError, match="loc must be finite"):
            CauchyVector(loc, torch.ones_like(loc))
    else:  # a finite loc is fine, wherever it is
        loc.view(-1)[where] = bad
        CauchyVector(loc, torch.ones_like(loc))


def test_log_prob_of_a_degenerate_component_in_a_large_vector_is_refused():
    u = CauchyVector(torch.zeros(64, 4096), torch.ones(64, 4096))
    w = torch.ones(3, 4096)
    w[1] = 0.0  # component 1 of u.linear(w) carries no noise: a point mass at b = 0
    v = u.linear(w)
    assert float(v.scale[:, 1].amax()) == 0.0 and float(v.scale[:, 0].amin()) > 0
    with pytest.raises(ValueError, match="degenerate"):
        v.log_prob(torch.zeros(64, 3))
