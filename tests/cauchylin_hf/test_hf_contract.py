"""The transformers contract of ``CauchyLMForCausalLM`` (what transformers' own model tests check).

* ``torch.export.export`` of the inference forward, and ``torch.compile`` of the inference and
  training forwards, give the eager outputs; ``_can_compile_fullgraph`` says truthfully whether
  a full-graph compile works;
* ``generate(inputs_embeds=...)`` gives the base model's own greedy continuation, and takes the
  prompt's ``numeric_values`` as ``generate(input_ids)`` does;
* ``shift_labels`` (pre-shifted labels) is used by the loss;
* ``resize_token_embeddings`` refuses what transformers refuses; ``model.vocab_size`` exists;
* the top-level config forwards the sizes that cache and generation tools read, as the base's own
  config gives them.
"""

from __future__ import annotations

import pytest
import torch
from cauchylin_hf import CauchyLMConfig, CauchyLMForCausalLM
from cauchylin_hf.config import BASE_ATTRIBUTES
from cauchylin_hf.testing import tiny_base_config, tiny_base_model
from transformers import DynamicCache

from .conftest import VOCAB

NUM = VOCAB - 1
FIELDS = ("loc_S", "scale_S", "loc_Y", "scale_Y", "loc_U", "scale_U")


@pytest.fixture
def model():
    m = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2", vocab_size=VOCAB), num_token_id=NUM)
    with torch.no_grad():  # heads away from their init, numbers visible to the heads
        g = torch.Generator().manual_seed(0)
        for p in m.action.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
        m.numeric_embedding.w_num.mul_(50.0)
    return m.eval()


def inputs():
    ids = torch.tensor([[5, NUM, 7, 8, 9], [10, 11, NUM, 12, 13]])
    values = torch.zeros(ids.shape)
    values[ids == NUM] = torch.tensor([2.5, -40.0])
    return ids, values


def assert_same_fields(got, expected, names=FIELDS, tol=1e-5):
    for name in names:
        torch.testing.assert_close(getattr(got, name), getattr(expected, name), rtol=tol, atol=tol)


# ----------------------------------------------------------------------------- export, compile


# Strict export warns about a side effect inside transformers' own output-capturing context (a
# module global it sets while the decoder runs), not about anything of ours: pyproject.toml's
# filterwarnings ignores exactly that source.
@pytest.mark.parametrize("strict", [False, True])
def test_torch_export_of_the_inference_forward(model, strict):
    ids, values = inputs()
    kwargs = {"numeric_values": values, "use_cache": False}
    program = torch.export.export(model, (ids,), kwargs, strict=strict)
    with torch.no_grad():
        expected = model(ids, **kwargs)
        got = program.module()(ids, **kwargs)
        # The exported program is a graph, not a replay: other inputs give their own outputs.
        other = values * 3.0
        got_other = program.module()(ids, numeric_values=other, use_cache=False)
        expected_other = model(ids, numeric_values=other, use_cache=False)
    assert_same_fields(got, expected)
    assert_same_fields(got_other, expected_other)
    assert not torch.allclose(expected_other.loc_Y, expected.loc_Y)


def test_can_compile_fullgraph_is_declared_truthfully(model):
    """``_can_compile_fullgraph`` is True exactly when the forward compiles without a graph break.

    (It was False while :class:`cauchylin.CauchyVector` keyed its sources with ``object()``,
    which Dynamo cannot trace.)
    """
    ids, values = inputs()
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    try:
        with torch.no_grad():
            got = compiled(ids, numeric_values=values, use_cache=False)
        works = True
    except torch._dynamo.exc.Unsupported as exc:
        works = False
        reason = str(exc)
    finally:
        torch._dynamo.reset()
    assert CauchyLMForCausalLM._can_compile_fullgraph is works, None if works else reason[:400]
    if works:
        with torch.no_grad():
            assert_same_fields(got, model(ids, numeric_values=values, use_cache=False))


# Two warnings that Dynamo itself triggers while tracing (and means to record, not raise): it probes
# ``hasattr(t, "grad")`` on the non-leaf tensors it resumes with after a graph break, and it
# instantiates the autograd Function of the fused loss to trace its ``apply``.
@pytest.mark.filterwarnings("default:The .grad attribute of a Tensor that is not a leaf")
@pytest.mark.filterwarnings("default:.*should not be instantiated:DeprecationWarning")
def test_torch_compile_of_the_inference_and_training_forward(model):
    ids, values = inputs()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="eager")
    try:
        with torch.no_grad():
            got = compiled(ids, numeric_values=values, use_cache=False)
            expected = model(ids, numeric_values=values, use_cache=False)
        assert_same_fields(got, expected)
        model.train()
        out = compiled(ids, numeric_values=values, labels=ids)
        out.loss.backward()
        grad = model.action.b_noise.grad.clone()
        model.zero_grad()
        ref = model(ids, numeric_values=values, labels=ids)
        ref.loss.backward()
    finally:
        torch._dynamo.reset()
    torch.testing.assert_close(out.loss, ref.loss, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(grad, model.action.b_noise.grad, rtol=1e-5, atol=1e-7)


# ----------------------------------------------------------------------------- generate


def test_generate_with_inputs_embeds():
    base = tiny_base_model("qwen2", vocab_size=VOCAB)
    model = CauchyLMForCausalLM.from_base(
        tiny_base_model("qwen2", vocab_size=VOCAB), num_token_id=NUM
    )
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    embeds = model.get_input_embeddings()(ids).detach()
    kw = {"max_new_tokens": 5, "do_sample": False, "pad_token_id": 0}
    # Compatible mode at init: logits = loc_S = the base's logits, so the base's own tokens.
    expected = base.generate(inputs_embeds=embeds, **kw)
    assert torch.equal(model.generate(inputs_embeds=embeds, **kw), expected)
    # The prompt's numbers are fed with the embeddings as with the ids.
    with torch.no_grad():
        model.numeric_embedding.w_num.mul_(50.0)
    values = torch.tensor([[0.0, 3.0, 0.0, 0.0], [0.0, 0.0, -20.0, 0.0]])
    from_ids = model.generate(ids, numeric_values=values, **kw)[:, ids.shape[1] :]
    from_embeds = model.generate(inputs_embeds=embeds, numeric_values=values, **kw)
    assert torch.equal(from_embeds, from_ids)
    assert not torch.equal(from_ids, model.generate(ids, **kw)[:, ids.shape[1] :])


# ----------------------------------------------------------------------------- shift_labels


def test_shift_labels_are_used_by_the_loss(model):
    ids, values = inputs()
    mask = torch.ones_like(ids)
    mask[1, -1] = 0  # right padding
    labels = ids.masked_fill(mask == 0, -100)
    ignore = torch.full((2, 1), -100)
    shift = torch.cat([labels[:, 1:], ignore], dim=1)  # transformers' pre-shifted labels
    shift_values = torch.cat([values[:, 1:], torch.zeros(2, 1)], dim=1)
    kw = {"attention_mask": mask, "numeric_values": values}
    plain = model(ids, labels=labels, **kw)
    pre = model(ids, shift_labels=shift, target_values=shift_values, **kw)
    for name in ("loss", "cls_loss", "reg_loss", "cls_count", "reg_count"):
        torch.testing.assert_close(getattr(pre, name), getattr(plain, name))
    assert int(pre.reg_count) == 2 and pre.loc_S is None
    # shift_labels win over labels, and other shift_labels give another loss.
    other = torch.roll(shift, 1, dims=1)
    other[:, 0] = -100
    alone = model(ids, shift_labels=other, target_values=shift_values, **kw)
    both = model(ids, labels=labels, shift_labels=other, target_values=shift_values, **kw)
    torch.testing.assert_close(both.loss, alone.loss)
    assert not torch.allclose(alone.loss, plain.loss)
    # Pre-shifted labels may use the last position (labels from the next chunk).
    last = shift.clone()
    last[0, -1] = 42
    assert int(model(ids, shift_labels=last, target_values=shift_values, **kw).cls_count) == 8
    with pytest.raises(ValueError, match="target_values shifted"):
        model(ids, shift_labels=shift, **kw)
    with pytest.raises(ValueError, match="shift_labels must have the input shape"):
        model(ids, shift_labels=shift[:, 1:], target_values=shift_values, **kw)


# ----------------------------------------------------------------------------- sizes


def test_resize_token_embeddings_refuses_what_transformers_refuses(model):
    base = tiny_base_model("qwen2", vocab_size=VOCAB)
    with pytest.raises(ValueError):  # transformers' own refusal of a fractional multiple
        base.resize_token_embeddings(VOCAB + 2, pad_to_multiple_of=1.3)
    for kw in (
        {"pad_to_multiple_of": 1.3},
        {"pad_to_multiple_of": 0},
        {"pad_to_multiple_of": True},
        {"new_num_tokens": 310.0},
        {"new_num_tokens": -3},
    ):
        name = next(iter(kw))
        with pytest.raises(ValueError, match=name):
            model.resize_token_embeddings(**{"new_num_tokens": VOCAB + 2, **kw})
    assert model.vocab_size == VOCAB
    model.resize_token_embeddings(VOCAB + 1, pad_to_multiple_of=8)
    base.resize_token_embeddings(VOCAB + 1, pad_to_multiple_of=8)
    assert model.vocab_size == model.config.vocab_size == base.vocab_size == 304


@pytest.mark.parametrize("arch", ["qwen2", "llama", "gpt2"])
def test_the_config_forwards_the_bases_sizes(arch):
    base = tiny_base_config(arch, num_attention_heads=8, num_key_value_heads=2)
    config = CauchyLMConfig(base_config=base)
    for name in BASE_ATTRIBUTES:
        assert getattr(config, name) == getattr(base, name, None), name
    assert config.num_attention_heads == 8  # GPT-2 spells it n_head
    # A cache sized from the top-level config.
    model = CauchyLMForCausalLM(config).eval()
    ids = torch.tensor([[5, 6, 7]])
    out = model(ids, past_key_values=DynamicCache(config=model.config), use_cache=True)
    assert out.past_key_values.get_seq_length() == 3


@pytest.mark.parametrize("mode", ["causal", "standard", "compatible"])
def test_full_graph_compile_of_the_deterministic_modes(model, mode):
    """``torch.compile(fullgraph=True)`` of the inference forward gives the eager outputs."""
    ids, values = inputs()
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    try:
        with torch.no_grad():
            got = compiled(ids, numeric_values=values, use_cache=False, mode=mode)
            expected = model(ids, numeric_values=values, use_cache=False, mode=mode)
    finally:
        torch._dynamo.reset()
    assert_same_fields(got, expected)
