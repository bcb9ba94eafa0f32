"""The adapter on a handful of decoder families, checked against transformers' own models.

The quick part of ``scripts/architecture_sweep.py`` (which runs every model type of the installed
transformers' causal-LM mapping): for each family a tiny random base built from its config class
(``tiny_base_model``, every parameter perturbed so that no zero-initialised path hides) gets the
heads with a new ``<NUM>`` row, and

* ``loc_S`` equals the base's own logits (computed by transformers after ``from_base``);
* generation with the cache gives the tokens, ``loc_S`` and ``loc_Y`` of the uncached loop;
* one training step gives a finite loss whose gradients reach the heads and move them.

The families cover what the sweep found to need care: a linear logit scale folded into the head
(Cohere multiplies, Granite divides, HyperCLOVA X multiplies by the attribute Granite divides by),
a tied head with a bias (CTRL), a decoder not at ``base_model`` (Llama 4), a recurrent state
(Mamba), per-layer token embeddings (Gemma 4), hybrid linear attention (Qwen3-Next) and latent
attention with experts (DeepSeek-V3). Bases that cannot be reproduced are refused by name.
"""

from __future__ import annotations

import logging

import pytest
import torch
from cauchylin_hf._backbone import logit_scale, split_causal_lm
from cauchylin_hf.generation import generate
from cauchylin_hf.model import CauchyLMForCausalLM
from cauchylin_hf.testing import ARCHITECTURES, tiny_base_config, tiny_base_model

VOCAB = 300
NUM = VOCAB  # a new embedding row: from_base grows the embedding
NOISE = 0.02

FAMILIES = (
    *ARCHITECTURES,
    "phi3",
    "olmo",
    "falcon",
    "gptj",
    "gpt_neox",
    "cohere",
    "granite",
    "hyperclovax",
    "ctrl",
    "llama4_text",
    "mamba",
    "gemma4_text",
    "qwen3_next",
    "deepseek_v3",
)

TOL = 1e-4
"""Absolute tolerance of float32 comparisons: the logits are sums of H = 32 products of order 1,
whose rounding is ~1e-6; a missed logit scale, a skipped path or a stale cache moves them by
0.05 and more (measured)."""


def build(arch: str) -> tuple[torch.nn.Module, CauchyLMForCausalLM]:
    base = tiny_base_model(arch, vocab_size=VOCAB, perturb=NOISE)
    return base, CauchyLMForCausalLM.from_base(base, num_token_id=NUM)


def prompts() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (2, 6), generator=g)
    values = torch.zeros(2, 6)
    ids[:, 2] = NUM
    values[:, 2] = torch.tensor([1.5, -20.0])
    return ids, values


@pytest.mark.parametrize("arch", FAMILIES)
def test_loc_S_equals_the_base_logits(arch):
    base, model = build(arch)
    ids = torch.randint(0, VOCAB, (3, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = base(ids).logits.float()  # after from_base: the base still runs
        loc_S = model(ids).loc_S.float()
    assert logits.abs().max() > 100 * TOL  # logits far above the tolerance
    torch.testing.assert_close(loc_S[..., :VOCAB], logits[..., :VOCAB], rtol=0, atol=TOL)


@pytest.mark.parametrize("arch", FAMILIES)
def test_cached_generation_equals_the_uncached_loop(arch):
    _, model = build(arch)
    ids, values = prompts()
    for mode, temperature in (("standard", 1.0), ("compatible", 0.0)):
        kw = dict(mode=mode, temperature=temperature, max_new_tokens=6, eos_token_id=[])
        cached = generate(model, ids, values, use_cache=True, return_distributions=True, **kw)
        plain = generate(model, ids, values, use_cache=False, return_distributions=True, **kw)
        assert torch.equal(cached.sequences, plain.sequences), mode
        for name in ("loc_S", "loc_Y"):
            torch.testing.assert_close(cached.steps[name], plain.steps[name], rtol=TOL, atol=TOL)
        torch.testing.assert_close(cached.numeric_values, plain.numeric_values)


@pytest.mark.parametrize("arch", FAMILIES)
def test_one_training_step_reaches_the_heads(arch):
    _, model = build(arch)
    ids, values = prompts()
    model.train()
    out = model(ids, values, labels=ids)
    assert torch.isfinite(out.loss)
    out.loss.backward()
    heads = {
        "W_cls": model.action.classifier.weight,
        "W_reg": model.action.regressor.weight,
        "Abduction": model.abduction.loc_net.weight,
    }
    for name, p in heads.items():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.any(), name
    before = {name: p.detach().clone() for name, p in heads.items()}
    torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-2).step()
    assert all(not torch.equal(p, before[name]) for name, p in heads.items())


@pytest.mark.parametrize(
    ("arch", "attr", "value", "expected"),
    [
        ("granite", "logits_scaling", 4.0, 0.25),  # logits / s
        ("hyperclovax", "logits_scaling", 0.5, 0.5),  # logits * s
        ("cohere", "logit_scale", 0.0625, 0.0625),  # logits * s
        ("llama", "logits_scaling", 4.0, 1.0),  # not a scaled family
    ],
)
def test_logit_scale_follows_each_familys_convention(arch, attr, value, expected):
    config = tiny_base_config(arch)
    setattr(config, attr, value)
    assert logit_scale(config) == expected


def test_a_zero_logit_scale_is_refused_by_name():
    config = tiny_base_config("granite")
    config.logits_scaling = 0.0
    with pytest.raises(ValueError, match="logits_scaling"):
        logit_scale(config)


@pytest.mark.parametrize("arch", ["gemma2", "gemma3n_text"])  # Gemma 3n: per-layer inputs too
def test_soft_capped_logits_equal_loc_S_before_the_cap(arch, caplog):
    base = tiny_base_model(arch, vocab_size=VOCAB, perturb=NOISE)
    cap = base.config.final_logit_softcapping
    assert cap
    with caplog.at_level(logging.WARNING, logger="cauchylin_hf"):
        model = CauchyLMForCausalLM.from_base(base, num_token_id=NUM)
    assert "final_logit_softcapping" in caplog.text
    ids = torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        capped = base(ids).logits[..., :VOCAB]
        # transformers' own logits before the cap (c tanh(x / c) = x within rounding at c = 1e9)
        base.config.final_logit_softcapping = 1e9
        uncapped = base(ids).logits[..., :VOCAB]
        loc_S = model(ids).loc_S[..., :VOCAB]
    torch.testing.assert_close(loc_S, uncapped, rtol=0, atol=TOL)
    assert (loc_S - capped).abs().max() > 100 * TOL  # the cap is not reproduced ...
    assert torch.equal(loc_S.argmax(-1), capped.argmax(-1))  # ... but the greedy choice is


@pytest.mark.parametrize(
    ("arch", "message"),
    [
        ("bert", "prediction head with other layers"),  # transform + decoder
        ("roberta", "prediction head with other layers"),  # dense + layer_norm + decoder
        ("electra", "linear map of the decoder's hidden state"),  # head reads embedding_size
        ("fuyu", "composite config"),  # multimodal
        ("emu3", "not what AutoModel builds"),  # AutoModel would build the multimodal model
    ],
)
def test_bases_that_cannot_be_reproduced_are_refused_by_name(arch, message):
    base = tiny_base_model(arch, vocab_size=VOCAB)
    with pytest.raises(ValueError, match=message):
        split_causal_lm(base)


def test_a_recurrent_state_is_fed_the_mask_of_the_new_positions_only():
    # Mamba multiplies its input by the attention mask: the mask of the whole sequence broadcast
    # against the one new position corrupted the state from the second cached step on (loc_S
    # off by about 2 before the fix).
    _, model = build("mamba")
    ids, values = prompts()
    more = torch.randint(3, VOCAB, (2, 3), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        out = model(ids, values, torch.ones(2, 6), use_cache=True)
        if out.cache is None:  # transformers < 5.24 names Mamba's cache cache_params
            pytest.skip("this transformers release gives the adapter no Mamba cache")
        for t in range(3):
            mask = torch.ones(2, 7 + t)
            out = model(more[:, t : t + 1], None, mask, cache=out.cache, use_cache=True)
        whole = model(torch.cat([ids, more], 1), torch.cat([values, torch.zeros(2, 3)], 1))
    torch.testing.assert_close(out.loc_S[:, -1], whole.loc_S[:, -1], rtol=TOL, atol=TOL)


def test_an_unknown_model_type_is_refused_by_name():
    with pytest.raises(ValueError, match="arch must be one of"):
        tiny_base_config("not_a_model")


def test_transformers_generate_runs_on_a_recurrent_state():
    # GenerationMixin.generate with numeric_values: the fed values are placed by the positions
    # seen so far, which a recurrent cache does not count (before the fix: ValueError from
    # get_seq_length).
    _, model = build("mamba")
    ids, values = prompts()
    kw = dict(max_new_tokens=4, do_sample=False, numeric_values=values, pad_token_id=0)
    cached = model.generate(ids, attention_mask=torch.ones_like(ids), use_cache=True, **kw)
    plain = model.generate(ids, attention_mask=torch.ones_like(ids), use_cache=False, **kw)
    assert cached.shape == (2, 10) and torch.equal(cached, plain)
