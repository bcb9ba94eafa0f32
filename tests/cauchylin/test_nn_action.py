"""Action: initialisation, the closed-form outputs, ActionOutput helpers and the training loss.

The loss is compared with a literal float64 computation written here from the formulas of the
docs (docs/concepts.md, "The total loss": one-hot BCE summed over classes, Cauchy NLL gated by
P_<NUM>), gradients included.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats as sps

from cauchylin import CauchyVector
from cauchylin.nn import Abduction, Action, ActionOutput, sample_compatible


def randomised_action(
    C: int = 5,
    V: int = 9,
    *,
    seed: int = 0,
    per_class: bool = True,
    learnable: bool = True,
) -> Action:
    g = torch.Generator().manual_seed(seed)
    act = Action(C, V, threshold=0.0, threshold_per_class=per_class, learnable_threshold=learnable)
    with torch.no_grad():
        act.classifier.weight.copy_(torch.randn(V, C, generator=g))
        act.classifier.bias.copy_(torch.randn(V, generator=g))
        act.regressor.weight.copy_(torch.randn(1, C, generator=g))
        act.regressor.bias.copy_(torch.randn(1, generator=g))
        act.b_noise.copy_(torch.randn(C, generator=g))
        act.threshold.copy_(torch.randn(act.threshold.shape, generator=g))
    return act


def random_U(shape: tuple[int, ...], seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    loc = (torch.randn(shape, generator=g) * 2).requires_grad_()
    scale = (torch.rand(shape, generator=g) + 0.2).requires_grad_()
    return loc, scale


# ------------------------------------------------------------------------------- initialisation


def test_initialisation_facts():
    act = Action(6, 11)
    assert torch.equal(act.b_noise, torch.full((6,), 0.1))
    assert isinstance(act.b_noise, torch.nn.Parameter)
    assert torch.equal(act.classifier.bias, torch.zeros(11))
    assert torch.equal(act.regressor.bias, torch.zeros(1))
    assert act.classifier.weight.shape == (11, 6) and act.regressor.weight.shape == (1, 6)
    assert act.threshold.shape == () and float(act.threshold) == 100.0
    assert "threshold" in dict(act.named_buffers())
    assert "threshold" not in dict(act.named_parameters())
    per = Action(6, 11, threshold=7.5, threshold_per_class=True, learnable_threshold=True)
    assert per.threshold.shape == (11,) and bool((per.threshold == 7.5).all())
    assert isinstance(per.threshold, torch.nn.Parameter)
    assert "threshold" in per.state_dict()
    assert torch.equal(Action(3, 4, b_noise_init=-0.3).b_noise, torch.full((3,), -0.3))


def test_regression_head_has_xavier_scale():
    C = 4096
    torch.manual_seed(0)
    w = Action(C, 2).regressor.weight.detach().double()
    # sum of C squares of N(0, 1/C): mean 1, sd sqrt(2/C) ~ 0.022
    assert abs(w.square().sum().item() - 1.0) < 8 * math.sqrt(2 / C)


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="causal_size"):
        Action(0, 3)
    with pytest.raises(ValueError, match="num_classes"):
        Action(3, 0)
    with pytest.raises(ValueError, match="threshold"):
        Action(3, 3, threshold=math.nan)
    with pytest.raises(ValueError, match="b_noise_init"):
        Action(3, 3, b_noise_init=math.inf)


@pytest.mark.parametrize("with_bias", [False, True])
def test_copied_base_head_gives_the_base_logits(with_bias: bool):
    """Identity Abduction + W_cls = lm_head.weight  =>  loc_S == base logits (docs/concepts.md,
    "Initialisation that reproduces the base model")."""
    H, V = 16, 40
    torch.manual_seed(0)
    base = torch.nn.Linear(H, V, bias=with_bias)
    abd, act = Abduction(H, H), Action(H, V)
    act.copy_base_head(base.weight, base.bias if with_bias else None)
    z = torch.randn(3, 7, H) * 4
    logits = base(z)
    U = abd(z)
    for mode in ("standard", "causal", "compatible"):
        out = act(U, mode)
        if with_bias:
            torch.testing.assert_close(out.loc_S, logits, rtol=1e-6, atol=1e-5)
        else:
            assert torch.equal(out.loc_S, logits)
    # compatible-mode softmax equals the base model's distribution
    torch.testing.assert_close(
        torch.softmax(act(U, "compatible").logits, -1), torch.softmax(logits, -1)
    )
    with pytest.raises(ValueError, match="weight"):
        act.copy_base_head(torch.zeros(V, H + 1))


# ---------------------------------------------------------------------------------- ActionOutput


def test_standard_outputs_against_literal_formulas():
    T = 0.7
    act = randomised_action()
    loc, scale = random_U((2, 3, 5))
    out = act(CauchyVector(loc, scale), "standard", T)
    W = act.classifier.weight.detach().double().numpy()
    b = act.classifier.bias.detach().double().numpy()
    wr = act.regressor.weight.detach().double().numpy()[0]
    br = float(act.regressor.bias.detach())
    nb = np.abs(act.b_noise.detach().double().numpy())
    ln, sn = loc.detach().double().numpy(), scale.detach().double().numpy()
    np.testing.assert_allclose(out.loc_S.detach().numpy(), ln @ W.T + b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.scale_S.detach().numpy(), (sn + T * nb) @ np.abs(W).T, rtol=1e-5)
    np.testing.assert_allclose(out.loc_Y.detach().numpy(), ln @ wr + br, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.scale_Y.detach().numpy(), (sn + T * nb) @ np.abs(wr), rtol=1e-5)
    assert out.loc_Y.shape == (2, 3) and out.logits is not None
    # OvR probabilities against scipy: P_k = P(S_k > C_k)
    thr = act.threshold.detach().double().numpy()
    p_ref = sps.cauchy.sf(thr, loc=out.loc_S.detach().double(), scale=out.scale_S.detach().double())
    np.testing.assert_allclose(out.ovr_probs().detach().numpy(), p_ref, rtol=1e-5)
    log_p, log_q = out.ovr_log_probs()
    np.testing.assert_allclose(log_p.detach().numpy(), np.log(p_ref), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(log_q.detach().numpy(), np.log1p(-p_ref), rtol=1e-5, atol=1e-6)
    # normalised OvR distribution and the argmax decision
    norm = out.normalised_ovr_probs().detach().numpy()
    np.testing.assert_allclose(norm, p_ref / p_ref.sum(-1, keepdims=True), rtol=1e-5)
    assert torch.equal(out.predict(), torch.as_tensor(p_ref.argmax(-1)))
    assert torch.equal(out.next_token(), out.predict())


def test_normalised_probabilities_survive_tiny_probabilities():
    act = randomised_action(per_class=False)
    with torch.no_grad():
        act.threshold.fill_(
            1e25
        )  # every P_k ~ 1e-25: a direct ratio would still work, check NaN-free
    loc, scale = random_U((4, 5))
    out = act(CauchyVector(loc, scale))
    norm = out.normalised_ovr_probs().detach().double()
    assert bool(torch.isfinite(norm).all())
    torch.testing.assert_close(norm.sum(-1), torch.ones(4, dtype=torch.float64))
    # P_k ~ scale_S_k / (pi (C - loc_S_k)) here: the ratio is the ratio of those
    approx = out.scale_S.detach().double() / (1e25 - out.loc_S.detach().double())
    torch.testing.assert_close(norm, approx / approx.sum(-1, keepdim=True), rtol=1e-5, atol=0)
    # argmax P_k decisions still separate the classes
    assert torch.equal(out.predict(), approx.argmax(-1))


def test_compatible_next_token_uses_softmax_sampling():
    act = randomised_action()
    loc, scale = random_U((6, 5))
    out = act(CauchyVector(loc, scale), "compatible", 0.8)
    a = out.next_token(top_k=3, generator=torch.Generator().manual_seed(0))
    b = sample_compatible(
        out.logits, temperature=0.8, top_k=3, generator=torch.Generator().manual_seed(0)
    )
    assert torch.equal(a, b)


def test_action_output_without_scores():
    Y = CauchyVector(torch.zeros(2, 1), torch.ones(2, 1))
    out = ActionOutput(S=None, Y=Y, threshold=torch.tensor(0.0))
    assert out.loc_Y.shape == (2,)
    with pytest.raises(ValueError, match="S"):
        _ = out.loc_S


# ------------------------------------------------------------------------------------------ loss


def literal_loss(
    act: Action,
    loc: torch.Tensor,
    scale: torch.Tensor,
    labels: torch.Tensor,
    targets: torch.Tensor,
    *,
    num_token_id: int | None,
    attention_mask: torch.Tensor | None,
    alpha: float,
    reg_weight: float,
    T: float,
    ignore_index: int = -100,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The total loss of docs/concepts.md written out in float64 with a one-hot tensor; returns
    (total, leaves)."""
    leaves = {
        "W": act.classifier.weight.detach().double().requires_grad_(),
        "b": act.classifier.bias.detach().double().requires_grad_(),
        "Wr": act.regressor.weight.detach().double().requires_grad_(),
        "br": act.regressor.bias.detach().double().requires_grad_(),
        "noise": act.b_noise.detach().double().requires_grad_(),
        "thr": act.threshold.detach().double().requires_grad_(),
        "loc": loc.detach().double().requires_grad_(),
        "scale": scale.detach().double().requires_grad_(),
    }
    L = leaves
    V = L["W"].shape[0]
    total_scale = L["scale"] + T * L["noise"].abs()
    loc_S = L["loc"] @ L["W"].T + L["b"]
    scale_S = total_scale @ L["W"].abs().T
    P = 0.5 + torch.atan((loc_S - L["thr"]) / scale_S) / math.pi
    counted = labels != ignore_index
    if attention_mask is not None:
        counted = counted & (attention_mask != 0)
    y = torch.nn.functional.one_hot(labels.clamp(min=0), V).double()
    bce = -(y * torch.log(P) + (1 - y) * torch.log(1 - P)).sum(-1)
    cls = (bce * counted).sum() / counted.sum().clamp(min=1)
    loc_Y = L["loc"] @ L["Wr"][0] + L["br"][0]
    scale_Y = total_scale @ L["Wr"][0].abs()
    if num_token_id is None:
        return cls, leaves
    m = counted & (labels == num_token_id)
    safe_t = torch.where(m, targets.double(), torch.zeros_like(loc_Y))
    nll = torch.log(math.pi * scale_Y) + torch.log1p(((safe_t - loc_Y) / scale_Y) ** 2)
    gate = alpha + (1 - alpha) * P[..., num_token_id]
    reg = (torch.where(m, gate * nll, torch.zeros_like(nll))).sum() / max(int(m.sum()), 1)
    return cls + reg_weight * reg, leaves


CASES = [
    # (alpha, reg_weight, T, with_mask, per_class, learnable, chunk_size)
    (0.0, 1.0, 1.0, False, True, True, None),
    (0.3, 2.5, 0.6, True, True, True, (2, 3)),
    (1.0, 0.5, 1.0, True, False, True, 4),
    (0.0, 1.0, 1.3, True, False, False, (1, 2)),
]


@pytest.mark.parametrize(
    ("alpha", "reg_weight", "T", "with_mask", "per_class", "learnable", "chunk"), CASES
)
def test_loss_equals_the_literal_path_with_gradients(
    alpha, reg_weight, T, with_mask, per_class, learnable, chunk
):
    C, V, num = 5, 9, 4
    act = randomised_action(C, V, per_class=per_class, learnable=learnable)
    loc, scale = random_U((3, 6, C))
    g = torch.Generator().manual_seed(5)
    labels = torch.randint(0, V, (3, 6), generator=g)
    labels[0, :3] = num
    labels[1, 2] = num
    labels[2, 5] = -100
    labels[1, 0] = -100
    targets = torch.randn(3, 6, generator=g) * 10
    targets[labels != num] = math.nan  # never read outside <NUM> targets
    mask = None
    if with_mask:
        mask = torch.ones(3, 6, dtype=torch.long)
        mask[2, :2] = 0
        mask[0, 1] = 0  # also masks a <NUM> target
    out = act.loss(
        CauchyVector(loc, scale),
        labels,
        targets,
        num_token_id=num,
        attention_mask=mask,
        alpha=alpha,
        reg_weight=reg_weight,
        temperature=T,
        chunk_size=chunk,
    )
    ref, leaves = literal_loss(
        act,
        loc,
        scale,
        labels,
        targets,
        num_token_id=num,
        attention_mask=mask,
        alpha=alpha,
        reg_weight=reg_weight,
        T=T,
    )
    torch.testing.assert_close(out.total.double(), ref.detach(), rtol=2e-5, atol=1e-5)
    torch.testing.assert_close(out.cls.mean + reg_weight * out.reg.mean, out.total)
    expected_num = int(((labels == num) & (mask != 0 if mask is not None else True)).sum())
    assert int(out.reg.count) == expected_num
    params = {
        "W": act.classifier.weight,
        "b": act.classifier.bias,
        "Wr": act.regressor.weight,
        "br": act.regressor.bias,
        "noise": act.b_noise,
        "loc": loc,
        "scale": scale,
    }
    if learnable:
        params["thr"] = act.threshold
    got = torch.autograd.grad(out.total, list(params.values()))
    want = torch.autograd.grad(ref, [leaves[k] for k in params])
    for name, g_got, g_want in zip(params, got, want, strict=True):
        torch.testing.assert_close(
            g_got.double(), g_want, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}"
        )


def test_loss_regression_is_exactly_zero_without_num_targets():
    act = randomised_action()
    loc, scale = random_U((2, 4, 5))
    labels = torch.tensor([[0, 1, 2, 3], [5, 6, 7, -100]])  # no <NUM> (id 4)
    targets = torch.full((2, 4), math.nan)
    for kwargs in (
        {"num_token_id": 4},
        {"num_token_id": None},
        {"num_token_id": 4, "alpha": 1.0},
    ):
        out = act.loss(CauchyVector(loc, scale), labels, targets, **kwargs)
        assert out.reg.mean.item() == 0.0 and int(out.reg.count) == 0
        assert torch.equal(out.total, out.cls.mean)
        gw, gb = torch.autograd.grad(out.total, [act.regressor.weight, act.regressor.bias])
        assert torch.equal(gw, torch.zeros_like(gw)) and torch.equal(gb, torch.zeros_like(gb))
    out = act.loss(CauchyVector(loc, scale), labels)  # no target values at all
    assert out.reg.mean.item() == 0.0


def test_loss_never_builds_the_vocabulary_scores(monkeypatch: pytest.MonkeyPatch):
    """The fused path only maps U through single class columns, never through all of W_cls."""
    V = 50
    act = randomised_action(5, V)
    original = CauchyVector.linear

    def guarded(self: CauchyVector, weight: torch.Tensor, bias: torch.Tensor | None = None):
        assert weight.shape[-2] < V, "a [N, V] score tensor was requested"
        return original(self, weight, bias)

    monkeypatch.setattr(CauchyVector, "linear", guarded)
    loc, scale = random_U((2, 3, 5))
    labels = torch.tensor([[4, 1, 2], [4, 0, 3]])
    out = act.loss(CauchyVector(loc, scale), labels, torch.randn(2, 3), num_token_id=4)
    out.total.backward()
    assert act.b_noise.grad is not None and act.threshold.grad is not None


def test_loss_with_a_dependent_U_takes_the_exact_plain_path():
    act = randomised_action()
    base_loc, base_scale = random_U((2, 3, 5))
    M = torch.randn(5, 5, generator=torch.Generator().manual_seed(3))
    U = CauchyVector(base_loc, base_scale).linear(M)
    assert not U.is_independent
    labels = torch.tensor([[4, 1, 2], [4, 0, 3]])
    targets = torch.randn(2, 3)
    out = act.loss(U, labels, targets, num_token_id=4)
    # exact scores of a dependent U: S = (W M) base + noise terms; build them literally
    W, b = act.classifier.weight, act.classifier.bias
    nb = act.b_noise.abs()
    loc_S = U.loc @ W.T + b
    scale_S = base_scale @ (W @ M).abs().T + nb @ W.abs().T
    from cauchylin import losses

    cls = losses.ovr_bce(loc_S, scale_S, labels, act.threshold)
    torch.testing.assert_close(out.cls.mean, cls.mean)


def test_loss_argument_errors():
    act = randomised_action()
    loc, scale = random_U((2, 3, 5))
    U = CauchyVector(loc, scale)
    with pytest.raises(ValueError, match="labels"):
        act.loss(U, torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="num_token_id"):
        act.loss(U, torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3), num_token_id=99)
    with pytest.raises(ValueError, match="alpha"):
        act.loss(U, torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3), num_token_id=1, alpha=2)


def test_half_precision_parameters_compute_in_float32():
    act = randomised_action()
    half = randomised_action()
    half.to(torch.bfloat16)
    loc, scale = random_U((2, 3, 5))
    U = CauchyVector(loc.detach(), scale.detach())
    out = half(U)
    assert out.loc_S.dtype == torch.float32 and bool(torch.isfinite(out.scale_S).all())
    # the same as a float32 layer holding the bf16-rounded weights
    with torch.no_grad():
        for p32, p16 in zip(act.parameters(), half.parameters(), strict=True):
            p32.copy_(p16.float())
    ref = act(U)
    torch.testing.assert_close(out.loc_S, ref.loc_S)
    torch.testing.assert_close(out.scale_S, ref.scale_S)
    labels = torch.tensor([[4, 1, 2], [4, 0, 3]])
    loss = half.loss(U, labels, torch.randn(2, 3), num_token_id=4)
    ref_loss = act.loss(U, labels, torch.randn(2, 3), num_token_id=4)
    torch.testing.assert_close(loss.cls.mean, ref_loss.cls.mean, rtol=1e-5, atol=1e-5)
    loss.total.backward()
    assert half.b_noise.grad is not None and half.b_noise.grad.dtype == torch.bfloat16


def test_loss_target_values_shape_is_checked():
    act = randomised_action()
    loc, scale = random_U((2, 3, 5))
    with pytest.raises(ValueError, match="target_values"):
        act.loss(
            CauchyVector(loc, scale),
            torch.zeros(2, 3, dtype=torch.long),
            torch.zeros(3),
            num_token_id=1,
        )


def test_docstring_examples_of_the_layers_run():
    import doctest

    from cauchylin.nn import abduction, action, embedding, modes

    attempted = 0
    for module in (embedding, abduction, modes, action):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
        assert result.failed == 0, module.__name__
        attempted += result.attempted
    assert attempted > 20
