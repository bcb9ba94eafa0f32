"""``CauchyLMForCausalLM.forward``: outputs, the next-token shift, padding, modes, cache, training.

The loss is checked against an independent float64 reference built from the materialised
distributions (``return_distributions=True``): the OvR binary cross-entropy summed over the
classes and the gated Cauchy regression NLL, with the shift written out by hand.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from cauchylin_hf import CauchyLMForCausalLM, CauchyLMOutput
from cauchylin_hf.testing import tiny_base_model

from cauchylin.nn.modes import Decoding
from cauchylin.nn.readouts import NO_CONTEXT, ReadoutContext
from cauchylin.readout import CauchyReadout

from .conftest import VOCAB

NUM = VOCAB  # the <NUM> id of models built with the tiny tokenizer and spare rows


@pytest.fixture
def model(make_base, tiny_tok):
    torch.manual_seed(0)
    m = CauchyLMForCausalLM.from_base(make_base("qwen2", spare_rows=3), tiny_tok)
    return m


def numeric_batch():
    """``(ids, values, mask)``: right-padded, with <NUM> tokens (and their values) inside."""
    ids = torch.tensor(
        [
            [5, 17, NUM, 40, 41, NUM, 9, 12, 13, 2],
            [7, NUM, 33, 34, NUM, NUM, 60, 0, 0, 0],
        ]
    )
    values = torch.zeros(ids.shape)
    values[ids == NUM] = torch.tensor([3.5, -120.0, 0.25, 7.0, 1e4])
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    return ids, values, mask


def reference_loss(
    out,
    ids,
    labels,
    targets,
    mask,
    num_id,
    alpha=0.0,
    reg_weight=1.0,
    thr=100.0,
    log1p=False,
    target_weight=1.0,
):
    """float64 OvR + gated regression loss from materialised distributions, shifted by hand;
    ``target_weight`` multiplies the NLL of each row's last counted <NUM> label."""
    loc_S, scale_S = out.loc_S.double(), out.scale_S.double()
    z = (loc_S - thr) / scale_S
    P = 0.5 + torch.atan(z) / math.pi
    B, S = ids.shape
    cls_terms, reg_terms, n_cls, n_num = [], [], 0, 0
    for b in range(B):
        counted = [
            i
            for i in range(S - 1)
            if int(labels[b, i + 1]) == num_id and mask[b, i] and mask[b, i + 1]
        ]
        for i in range(S - 1):
            y = int(labels[b, i + 1])
            if y == -100 or not (mask[b, i] and mask[b, i + 1]):
                continue
            n_cls += 1
            p = P[b, i]
            cls_terms.append(-torch.log1p(-p).sum() + torch.log1p(-p[y]) - torch.log(p[y]))
            if y == num_id:
                n_num += 1
                loc, scale = out.loc_Y[b, i].double(), out.scale_Y[b, i].double()
                v = float(targets[b, i + 1])
                t = math.copysign(math.log1p(abs(v)), v) if log1p else v
                r = (t - loc) / scale
                nll = torch.log(math.pi * scale) + torch.log1p(r * r)
                gate = alpha + (1 - alpha) * p[num_id]
                weight = target_weight if i == counted[-1] else 1.0
                reg_terms.append(weight * gate * nll)
    cls = torch.stack(cls_terms).sum() / n_cls
    reg = torch.stack(reg_terms).sum() / n_num if n_num else torch.tensor(0.0, dtype=torch.float64)
    return cls, reg, cls + reg_weight * reg, n_cls, n_num


def perturb_heads(model, scale=0.05, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name in ("numeric_embedding", "abduction", "action"):
            for p in getattr(model, name).parameters():
                p.add_(scale * torch.randn(p.shape, generator=g))


# ------------------------------------------------------------------ outputs


def test_inference_output_fields_and_shapes(model):
    ids, values, mask = numeric_batch()
    out = model(ids, numeric_values=values, attention_mask=mask)
    assert isinstance(out, CauchyLMOutput) and out.loss is None and out.cls_loss is None
    K, C = model.config.num_classes, model.config.causal_hidden_size
    for name, shape in [
        ("loc_S", (2, 10, K)),
        ("scale_S", (2, 10, K)),
        ("loc_Y", (2, 10)),
        ("scale_Y", (2, 10)),
        ("loc_U", (2, 10, C)),
        ("scale_U", (2, 10, C)),
    ]:
        assert tuple(out[name].shape) == shape, name
    assert out.logits is out.loc_S
    assert (out.scale_S > 0).all() and (out.scale_Y > 0).all() and (out.scale_U > 0).all()
    tup = model(ids, numeric_values=values, attention_mask=mask, return_dict=False)
    assert isinstance(tup, tuple) and torch.equal(tup[0], out.logits)


def test_training_output_keeps_class_scores_unless_asked(model):
    ids, values, mask = numeric_batch()
    out = model(ids, numeric_values=values, attention_mask=mask, labels=ids)
    assert out.loss.shape == () and out.cls_loss.shape == () and out.reg_loss.shape == ()
    for name in ("logits", "loc_S", "scale_S", "loc_Y", "scale_Y"):
        assert getattr(out, name) is None, name
    assert out.loc_U.shape == (2, 10, 32) and out.scale_U.shape == (2, 10, 32)
    full = model(
        ids, numeric_values=values, attention_mask=mask, labels=ids, return_distributions=True
    )
    plain = model(ids, numeric_values=values, attention_mask=mask)
    torch.testing.assert_close(full.loss, out.loss)
    for name in ("loc_S", "scale_S", "loc_Y", "scale_Y", "loc_U", "scale_U"):
        torch.testing.assert_close(full[name], plain[name])


def test_training_forward_never_saves_an_N_by_V_tensor(make_base, tiny_tok):
    """The memory-efficient path: no tensor of N x V elements is kept for the backward pass."""
    model = CauchyLMForCausalLM.from_base(make_base(spare_rows=3), tiny_tok)
    model.train()
    ids = torch.randint(3, VOCAB, (2, 40), generator=torch.Generator().manual_seed(0))
    N, V = ids.numel(), model.config.num_classes
    sizes = []

    def pack(t):
        sizes.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(ids, labels=ids)
    out.loss.backward()
    assert max(sizes) < (N - 2) * V, f"a saved tensor has {max(sizes)} >= N*V elements"
    assert model.action.classifier.weight.grad is not None


# ------------------------------------------------------------------ the loss and the shift


@pytest.mark.parametrize("value_space", ["identity", "signed_log1p"])
@pytest.mark.parametrize(
    ("alpha", "reg_weight", "target_weight"), [(0.0, 1.0, 1.0), (0.3, 2.5, 1.0), (0.3, 2.5, 4.0)]
)
def test_loss_matches_a_shifted_float64_reference(
    make_base, tiny_tok, alpha, reg_weight, target_weight, value_space
):
    torch.manual_seed(0)
    model = CauchyLMForCausalLM.from_base(
        make_base(spare_rows=3),
        tiny_tok,
        alpha=alpha,
        reg_weight=reg_weight,
        reg_target_weight=target_weight,
        threshold=2.0,
        value_space=value_space,
    )
    perturb_heads(model)  # make P_<NUM> and the regression head non-trivial
    ids, values, mask = numeric_batch()
    labels = ids.masked_fill(mask == 0, -100)
    out = model(
        ids, numeric_values=values, attention_mask=mask, labels=labels, return_distributions=True
    )
    cls, reg, total, n_cls, n_num = reference_loss(
        out,
        ids,
        labels,
        values,
        mask,
        NUM,
        alpha=alpha,
        reg_weight=reg_weight,
        thr=2.0,
        log1p=value_space == "signed_log1p",
        target_weight=target_weight,
    )
    assert int(out.cls_count) == n_cls == 15 and int(out.reg_count) == n_num == 5
    torch.testing.assert_close(out.cls_loss.double(), cls, rtol=2e-5, atol=1e-5)
    torch.testing.assert_close(out.reg_loss.double(), reg, rtol=2e-5, atol=1e-5)
    torch.testing.assert_close(out.loss.double(), total, rtol=2e-5, atol=1e-5)


def test_target_values_shift_with_the_labels(model):
    perturb_heads(model)
    ids, values, mask = numeric_batch()
    base = model(ids, numeric_values=values, attention_mask=mask, labels=ids)
    same = model(ids, numeric_values=values, attention_mask=mask, labels=ids, target_values=values)
    torch.testing.assert_close(base.loss, same.loss)  # default targets = numeric_values
    other = values.clone()
    other[0, 0] = 99.0  # position 0 is never a target (nothing predicts it)
    other[0, 3] = 99.0  # not a <NUM> target
    unchanged = model(
        ids, numeric_values=values, attention_mask=mask, labels=ids, target_values=other
    )
    torch.testing.assert_close(unchanged.loss, base.loss)
    other[0, 2] = 99.0  # the <NUM> at position 2 is the target of position 1
    changed = model(
        ids, numeric_values=values, attention_mask=mask, labels=ids, target_values=other
    )
    assert not torch.allclose(changed.reg_loss, base.reg_loss)
    torch.testing.assert_close(changed.cls_loss, base.cls_loss)


def test_padding_and_ignore_index_do_not_count(model):
    perturb_heads(model)
    ids, values, mask = numeric_batch()
    labels = ids.masked_fill(mask == 0, -100)
    out = model(ids, numeric_values=values, attention_mask=mask, labels=labels)
    # Whatever sits at the padded positions does not matter.
    ids2, values2, labels2 = ids.clone(), values.clone(), labels.clone()
    ids2[1, 7:] = torch.tensor([NUM, 44, 45])
    values2[1, 7:] = 5.0
    labels2[1, 7:] = torch.tensor([NUM, 44, 45])  # masked by attention_mask anyway
    out2 = model(ids2, numeric_values=values2, attention_mask=mask, labels=labels2)
    torch.testing.assert_close(out2.loss, out.loss)
    assert int(out2.cls_count) == int(out.cls_count)
    # ignore_index drops exactly the positions whose next label is -100.
    labels3 = labels.clone()
    labels3[0, 4] = -100
    out3 = model(ids, numeric_values=values, attention_mask=mask, labels=labels3)
    assert int(out3.cls_count) == int(out.cls_count) - 1


def test_left_and_right_padding_give_the_same_loss(model):
    perturb_heads(model)
    seqs = [[5, 17, NUM, 40, 41, 9], [7, NUM, 33]]
    vals = [[0, 0, 2.5, 0, 0, 0], [0, -3.0, 0]]
    L = max(map(len, seqs))
    outs = {}
    for side in ("left", "right"):
        ids = torch.zeros(2, L, dtype=torch.long)
        values = torch.zeros(2, L)
        mask = torch.zeros(2, L, dtype=torch.long)
        for b, (s, v) in enumerate(zip(seqs, vals, strict=True)):
            sl = slice(L - len(s), L) if side == "left" else slice(0, len(s))
            ids[b, sl], values[b, sl], mask[b, sl] = torch.tensor(s), torch.tensor(v), 1
        pos = (mask.cumsum(-1) - 1).clamp_min(0)
        labels = ids.masked_fill(mask == 0, -100)
        outs[side] = model(
            ids, numeric_values=values, attention_mask=mask, labels=labels, position_ids=pos
        )
    torch.testing.assert_close(outs["left"].loss, outs["right"].loss, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(outs["left"].reg_loss, outs["right"].reg_loss, rtol=1e-5, atol=1e-5)
    assert int(outs["left"].cls_count) == int(outs["right"].cls_count) == 7


def test_numeric_values_and_the_num_offset_act_only_where_they_should(model):
    ids = torch.tensor([[5, NUM, 7, 8]])
    zero = model(ids, numeric_values=torch.zeros(1, 4))
    none = model(ids)
    torch.testing.assert_close(zero.loc_S, none.loc_S, rtol=0, atol=0)
    shifted = model(ids, numeric_values=torch.tensor([[0.0, 42.0, 0.0, 0.0]]))
    assert torch.equal(shifted.loc_S[:, 0], none.loc_S[:, 0])  # causal: before the number
    assert not torch.allclose(shifted.loc_S[:, 1:], none.loc_S[:, 1:])
    with torch.no_grad():
        model.numeric_embedding.num_token_delta.fill_(0.5)
    moved = model(ids)
    assert torch.equal(moved.loc_S[:, 0], none.loc_S[:, 0])
    assert not torch.allclose(moved.loc_S[:, 1], none.loc_S[:, 1])


# ------------------------------------------------------------------ modes, positions, cache


def test_logits_to_keep(model):
    ids, values, mask = numeric_batch()
    full = model(ids, numeric_values=values, attention_mask=mask)
    last = model(ids, numeric_values=values, attention_mask=mask, logits_to_keep=1)
    assert last.loc_S.shape == (2, 1, model.config.num_classes)
    torch.testing.assert_close(last.loc_S, full.loc_S[:, -1:])
    torch.testing.assert_close(last.loc_U, full.loc_U[:, -1:])
    picked = model(
        ids, attention_mask=mask, numeric_values=values, logits_to_keep=torch.tensor([0, 3])
    )
    torch.testing.assert_close(picked.scale_S, full.scale_S[:, [0, 3]])


def test_modes_and_temperature(model):
    ids = torch.tensor([[5, 6, 7]])
    std = model(ids)
    causal = model(ids, mode="causal")
    torch.testing.assert_close(causal.loc_S, std.loc_S)
    assert (causal.scale_S < std.scale_S).all()  # no |b_noise| term
    torch.testing.assert_close(model(ids, temperature=0.0).scale_S, causal.scale_S)
    draws = [
        model(ids, mode=Decoding.make("sampling", generator=torch.Generator().manual_seed(3)))
        for _ in range(2)
    ]
    assert torch.equal(draws[0].loc_S, draws[1].loc_S)
    assert not torch.equal(draws[0].loc_S, std.loc_S)
    with pytest.raises(ValueError, match="mode"):
        model(ids, mode="greedy")


def test_decoding_options_travel_in_their_records(model):
    """A generator or a fixed draw is a Decoding's, the earlier numbers a ReadoutContext's:
    given loose to forward they are refused in one line (the backbone would drop them)."""
    ids = torch.tensor([[5, 6, 7]])
    for name, record in [
        ("generator", "Decoding"),
        ("eps_seed", "Decoding"),
        ("eps_noise", "Decoding"),
        ("context_numbers", "readout_context"),
    ]:
        with pytest.raises(ValueError, match=f"forward got {name}: .*{record}"):
            model(ids, **{name: torch.zeros(1)})
    with pytest.raises(
        ValueError, match=r"reads a fixed draw \(eps_seed\) that travels in a Decoding"
    ):
        model(ids, mode="shared_individual")
    # the shared mode with its draw in the record: the draw moves every position's U'
    eps = torch.full((model.config.causal_hidden_size,), 0.75)
    shared = model(
        ids, mode=Decoding.make("shared_individual", 1.0, shape=(1, 3, 32), eps_seed=eps)
    )
    causal = model(ids, mode="causal")
    assert not torch.allclose(shared.loc_S, causal.loc_S)
    with pytest.raises(ValueError, match="do not pass temperature as well"):
        model(ids, mode=Decoding.make("causal"), temperature=0.5)


def test_kv_cache_steps_match_the_full_forward(model):
    ids = torch.tensor([[5, 6, NUM, 8, 9], [10, 11, 12, 13, 14]])
    values = torch.zeros(ids.shape)
    values[0, 2] = 12.5
    full = model(ids, numeric_values=values)
    first = model(ids[:, :3], numeric_values=values[:, :3], use_cache=True)
    assert first.past_key_values is not None
    cache = first.past_key_values
    for t in (3, 4):
        step = model(
            ids[:, t : t + 1],
            numeric_values=values[:, t : t + 1],
            past_key_values=cache,
            use_cache=True,
        )
        cache = step.past_key_values
        torch.testing.assert_close(step.loc_S[:, 0], full.loc_S[:, t], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(step.loc_Y[:, 0], full.loc_Y[:, t], rtol=1e-5, atol=1e-5)


def test_hf_generate_reproduces_the_base_greedy_tokens(tiny_tok):
    """Compatible mode (``logits = loc_S``) through transformers' generate: the base's choices."""
    base = tiny_base_model("gpt2", vocab_size=VOCAB, spare_rows=2)
    model = CauchyLMForCausalLM.from_base(base, tiny_tok)
    ids = torch.tensor([[5, 6, 7, 8]])
    kw = {"max_new_tokens": 5, "do_sample": False, "pad_token_id": 0}
    assert torch.equal(model.generate(ids, **kw), base.generate(ids, **kw))


def _greedy_by_hand(model, ids, values, steps):
    """Greedy on loc_S from full forwards (no cache); generated positions get value 0."""
    for _ in range(steps):
        padded = torch.cat(
            [values, values.new_zeros(ids.shape[0], ids.shape[1] - values.shape[1])], 1
        )
        with torch.no_grad():
            loc_S = model(ids, numeric_values=padded).loc_S
        ids = torch.cat([ids, loc_S[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids


@pytest.mark.parametrize("use_cache", [True, False])
def test_hf_generate_takes_the_prompts_numbers(use_cache):
    """transformers' generate with ``numeric_values`` for the prompt: the values reach the model
    at every step (cached or not), and they matter."""
    base = tiny_base_model("qwen2", vocab_size=VOCAB)
    model = CauchyLMForCausalLM.from_base(base, num_token_id=VOCAB - 1).eval()
    with torch.no_grad():  # make the number visible to the head at this tiny size
        model.numeric_embedding.w_num.mul_(50.0)
    num = VOCAB - 1
    ids = torch.tensor([[5, num, 7, 8], [9, 10, num, 11]])
    kw = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": 0, "use_cache": use_cache}
    outs = {}
    for v in (-3.0, 40.0):
        values = torch.tensor([[0.0, v, 0.0, 0.0], [0.0, 0.0, v, 0.0]])
        got = model.generate(ids, numeric_values=values, **kw)
        assert torch.equal(got, _greedy_by_hand(model, ids, values, 6))
        outs[v] = got
    assert not torch.equal(outs[-3.0], outs[40.0]), "the prompt's numbers did not reach the model"


def test_hf_generate_rejects_misshapen_numeric_values():
    base = tiny_base_model("qwen2", vocab_size=VOCAB)
    model = CauchyLMForCausalLM.from_base(base, num_token_id=VOCAB - 1).eval()
    ids = torch.tensor([[5, 6, 7]])
    with pytest.raises(ValueError, match="numeric_values shape"):
        model.generate(ids, numeric_values=torch.zeros(1, 5), max_new_tokens=2, pad_token_id=0)


# ------------------------------------------------------------------ training


def test_frozen_backbone_trains_only_the_heads(model):
    assert all(not p.requires_grad for p in model.backbone.parameters())
    heads = [p for n, p in model.named_parameters() if not n.startswith("backbone.")]
    assert heads and all(p.requires_grad for p in heads)
    ids, values, mask = numeric_batch()
    model.train()
    model(ids, numeric_values=values, attention_mask=mask, labels=ids).loss.backward()
    assert all(p.grad is None for p in model.backbone.parameters())
    delta = model.numeric_embedding.num_token_delta
    assert delta.grad is not None and delta.grad.abs().sum() > 0  # the <NUM> row learns
    assert model.numeric_embedding.w_num.grad.abs().sum() > 0
    assert model.action.b_noise.grad.abs().sum() > 0
    model.set_backbone_trainable(True)
    assert all(p.requires_grad for p in model.backbone.parameters())


def test_unfrozen_backbone_gets_gradients(make_base, tiny_tok):
    model = CauchyLMForCausalLM.from_base(make_base(), tiny_tok, freeze_backbone=False)
    ids, values, mask = numeric_batch()
    model(ids, numeric_values=values, attention_mask=mask, labels=ids).loss.backward()
    assert model.get_input_embeddings().weight.grad is not None


def test_a_few_steps_lower_both_loss_parts(make_base, tiny_tok):
    torch.manual_seed(0)
    model = CauchyLMForCausalLM.from_base(make_base(), tiny_tok, threshold=5.0)
    model.train()
    ids, values, mask = numeric_batch()
    labels = ids.masked_fill(mask == 0, -100)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=3e-2)
    history = []
    for _ in range(15):
        out = model(ids, numeric_values=values, attention_mask=mask, labels=labels)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        history.append((out.cls_loss.item(), out.reg_loss.item()))
    assert history[-1][0] < history[0][0] and history[-1][1] < history[0][1]


@pytest.mark.parametrize("frozen", [True, False], ids=["frozen", "unfrozen"])
def test_gradient_checkpointing_gives_the_same_loss_and_grads(make_base, tiny_tok, frozen):
    def run(checkpointing):
        torch.manual_seed(0)
        model = CauchyLMForCausalLM.from_base(
            make_base("llama", tied=False), tiny_tok, freeze_backbone=frozen
        )
        model.train()
        if checkpointing:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)  # deprecated alias in v5
                model.gradient_checkpointing_enable()
            assert model.backbone.is_activation_checkpointing
        ids, values, mask = numeric_batch()
        out = model(ids, numeric_values=values, attention_mask=mask, labels=ids)
        out.loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return out.loss.detach(), grads

    loss0, g0 = run(False)
    loss1, g1 = run(True)
    torch.testing.assert_close(loss1, loss0)
    assert g0.keys() == g1.keys()
    assert any(n.startswith("backbone.") for n in g0) == (not frozen)
    for name in g0:
        torch.testing.assert_close(g1[name], g0[name], rtol=1e-5, atol=1e-6)


def test_resize_token_embeddings_grows_the_classes_too(model):
    old_rows = model.config.vocab_size
    W = model.action.classifier.weight.detach().clone()
    model.resize_token_embeddings(old_rows + 2)
    assert model.get_input_embeddings().weight.shape[0] == old_rows + 2
    assert model.config.vocab_size == model.config.num_classes == old_rows + 2
    assert model.action.classifier.weight.shape[0] == old_rows + 2
    torch.testing.assert_close(model.action.classifier.weight[old_rows], W.mean(0))
    ids = torch.tensor([[old_rows + 1, 5]])
    assert model(ids).loc_S.shape == (1, 2, old_rows + 2)
    with pytest.raises(ValueError, match="NUM"):
        model.resize_token_embeddings(NUM)


# ------------------------------------------------------------------ errors and dtypes


def test_bad_inputs_raise_value_errors(model):
    ids = torch.tensor([[5, 6, 7]])
    with pytest.raises(ValueError, match="numeric_values"):
        model(ids, numeric_values=torch.zeros(1, 4))
    with pytest.raises(ValueError, match="labels"):
        model(ids, labels=torch.tensor([[5, 6]]))
    with pytest.raises(ValueError, match="exactly one"):
        model()
    with pytest.raises(ValueError, match="labels"):
        model(ids, labels=torch.tensor([[5, 6, 999]]))  # not an OvR class


def test_bfloat16_backbone_with_float32_heads(tiny_tok, tmp_path):
    base = tiny_base_model("qwen2", vocab_size=VOCAB, spare_rows=3, dtype=torch.bfloat16)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        logits = base(ids).logits
    model = CauchyLMForCausalLM.from_base(base, tiny_tok)
    assert model.backbone.dtype == torch.bfloat16 and model.head_dtype == torch.float32
    out = model(ids)
    assert out.loc_S.dtype == torch.float32
    # The base rounds its logits to bfloat16; loc_S is the float32 product of the same features.
    torch.testing.assert_close(
        out.loc_S[..., : logits.shape[-1]], logits.float(), rtol=2e-2, atol=5e-2
    )
    model.save_pretrained(tmp_path)
    again = CauchyLMForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16)
    assert again.backbone.dtype == torch.bfloat16
    assert again.action.classifier.weight.dtype == torch.float32
    torch.testing.assert_close(again(ids).loc_S, out.loc_S)


@pytest.mark.parametrize("frozen", [True, False], ids=["frozen", "unfrozen"])
def test_no_trainable_parameter_goes_unused(make_base, tiny_tok, frozen):
    """What DDP (find_unused_parameters=False), FSDP and DeepSpeed need: every trainable tensor
    gets a gradient from the loss, even from a batch without numbers or <NUM> tokens."""
    model = CauchyLMForCausalLM.from_base(
        make_base("llama", tied=False), tiny_tok, freeze_backbone=frozen, learnable_threshold=True
    )
    assert model._no_split_modules == {"LlamaDecoderLayer"}
    assert not any("lm_head" in n for n, _ in model.named_parameters())
    model.train()
    ids = torch.tensor([[5, 6, 7, 8, 9]])  # no numeric_values, no <NUM>
    model(ids, labels=ids).loss.backward()
    unused = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not unused, unused


def test_ids_past_the_embedding_are_named_in_the_forward():
    """The forward raised the embedding's IndexError (generate named such ids)."""
    model = CauchyLMForCausalLM.from_base(
        tiny_base_model("qwen2", vocab_size=VOCAB), num_token_id=5
    )
    for bad in (VOCAB, 10**6, -1):
        ids = torch.tensor([[5, 7, bad]])
        with pytest.raises(ValueError, match=rf"input_ids holds ids outside the model's {VOCAB} "):
            model(ids)
        with pytest.raises(ValueError, match=r"outside the model's"):
            model(ids, labels=torch.tensor([[5, 7, 8]]))


def test_a_diverged_weight_is_named_when_the_forward_meets_it():
    """A training with --learning-rate 1e308 stopped with "loc must be finite, but it holds
    NaN (shape (8, 28, 32) ...)", naming neither a weight nor the divergence."""
    ids = torch.tensor([[5, 7, 9]])
    for where in ("backbone", "heads"):
        model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=5)
        with torch.no_grad():
            if where == "backbone":
                model.backbone.layers[1].mlp.up_proj.weight.fill_(float("inf"))
                name = r"backbone\.layers\.1\.mlp\.up_proj\.weight"
            else:
                model.abduction.loc_net.weight[0, 0] = float("nan")
                name = r"abduction\.loc_net\.weight"
        for labels in (None, ids):
            with pytest.raises(ValueError, match=rf"the model: the weight {name} holds NaN") as e:
                model(ids, labels=labels)
            assert "a training that diverged: a learning rate too high" in str(e.value)


def test_activations_that_overflow_with_finite_weights_name_the_largest_weight():
    """--learning-rate 1e30 on a trainable backbone leaves finite but huge weights: the message
    said the activations overflowed, naming no weight and no divergence."""
    model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=5)
    with torch.no_grad():
        model.backbone.layers[0].mlp.up_proj.weight.fill_(1e30)
        model.backbone.layers[0].mlp.gate_proj.weight.fill_(1e30)
    with pytest.raises(ValueError, match="its activations overflowed") as e:
        model(torch.tensor([[5, 7, 9]]))
    assert "the largest weight, backbone.layers.0.mlp." in str(e.value)
    assert "a training that diverged" in str(e.value)


def test_after_a_cache_readouts_read_the_context_they_are_given(model):
    """With a KV cache forward sees only the fed ids: a position whose ``k`` tokens were not all
    fed keeps the shared head, and the context of the whole sequence, at the fed positions,
    gives it its readout, as in the forward of the whole sequence."""
    ids = torch.tensor([[5, 6, NUM, 8, 9]])
    values = torch.zeros(ids.shape)
    values[0, 2] = 12.5
    whole = model.readout_context(ids, values)
    # a readout reads loc_U' and the earlier numbers (the weight on those: 0)
    weight = torch.cat(
        [torch.ones(model.config.causal_hidden_size), torch.zeros(model.config.readout_numbers)]
    )
    fit = CauchyReadout(weight, torch.tensor(100.0), torch.tensor(2.0), 0.0, math.nan, 50, 1)
    model.action.readouts.store([int(whole.codes[0, 3]), int(whole.codes[0, 4])], [fit, fit])
    full = model(ids, numeric_values=values)
    unknown = ReadoutContext(torch.full(ids.shape, NO_CONTEXT))
    shared = model(ids, numeric_values=values, context=unknown)
    assert not torch.allclose(full.loc_Y[:, 3:], shared.loc_Y[:, 3:])  # the readouts read there
    torch.testing.assert_close(full.scale_Y[:, 3:], torch.full((1, 2), 2.0))

    def step(context=None):
        first = model(ids[:, :3], numeric_values=values[:, :3], use_cache=True)
        return model(
            ids[:, 3:],
            numeric_values=values[:, 3:],
            cache=first.cache,
            use_cache=True,
            context=context,
        )

    tol = {"rtol": 1e-5, "atol": 1e-5}
    torch.testing.assert_close(step().loc_Y, shared.loc_Y[:, 3:], **tol)  # k = 3 > 2 fed ids
    given = step(whole.at((slice(None), slice(3, None))))
    torch.testing.assert_close(given.loc_Y, full.loc_Y[:, 3:], **tol)
    torch.testing.assert_close(given.scale_Y, full.scale_Y[:, 3:], **tol)


def test_reg_scale_cutoff_reaches_the_loss_from_the_config(make_base, tiny_tok):
    """``CauchyLMConfig.reg_scale_cutoff``: the same loss and the same gradient where only the
    location reads a parameter (``b_reg``); the scale's parameters (``b_noise``) get another
    gradient when a target is far both by its scale and among the batch's residuals (here the
    value 1e12 among values near 1), and the default's when it lies within the cutoff's scales."""
    ids, values, mask = numeric_batch()
    values[ids == NUM] = torch.tensor([3.5, -2.0, 0.25, 7.0, 1e12])
    labels = ids.masked_fill(mask == 0, -100)

    def run(**settings):
        torch.manual_seed(0)
        m = CauchyLMForCausalLM.from_base(
            make_base(spare_rows=3), tiny_tok, value_space="signed_log1p", **settings
        )
        perturb_heads(m)
        out = m(
            ids, numeric_values=values, attention_mask=mask, labels=labels,
            return_distributions=True,
        )  # fmt: skip
        out.reg_loss.backward()  # b_noise reads the regression through scale_Y alone here
        return out, m.action.regressor.bias.grad.clone(), m.action.b_noise.grad.clone()

    from cauchylin.value_space import to_value_space

    plain, bias_grad, noise_grad = run(reg_scale_cutoff=None, reg_context_tokens=0)
    at = labels[:, 1:] == NUM
    t = to_value_space(values[:, 1:], "signed_log1p")  # the model's value space
    residual = (t - plain.loc_Y[:, :-1])[at].abs().detach().double()
    z = residual / plain.scale_Y[:, :-1][at].detach().double()
    outlier = residual > 3.5 / 0.6745 * residual.median()
    assert int(outlier.sum()) == 1  # the 1e12 target, and no other
    k = float(z[outlier])
    within, within_bias, within_noise = run(reg_scale_cutoff=k * 2, reg_context_tokens=0)  # kept
    cut, cut_bias, cut_noise = run(reg_scale_cutoff=k / 2, reg_context_tokens=0)  # cut
    for out, bias in ((within, within_bias), (cut, cut_bias)):
        assert torch.equal(out.loss, plain.loss)
        torch.testing.assert_close(bias, bias_grad, rtol=1e-6, atol=1e-9)
    assert torch.equal(within_noise, noise_grad)
    assert not torch.allclose(cut_noise, noise_grad, rtol=1e-3, atol=1e-9)
    # with context keys: each of these targets has a context of its own (fewer than 3 of a
    # key), so the batch's median stands and the same target is cut
    keyed, _, keyed_noise = run(reg_scale_cutoff=k / 2, reg_context_tokens=2)
    assert torch.equal(keyed.loss, plain.loss) and torch.equal(keyed_noise, cut_noise)
    # the defaults (k = 20, two context tokens) cut it exactly when it lies beyond 20 scales
    default, _, default_noise = run()
    assert torch.equal(default.loss, plain.loss)
    assert torch.equal(default_noise, cut_noise if k > 20.0 else noise_grad), k
