"""LoRA through PEFT: adapters on the backbone, the new heads trained and saved with them."""

from __future__ import annotations

import pytest
import torch
from cauchylin_hf import CauchyLMForCausalLM
from cauchylin_hf.model import HEAD_MODULES
from cauchylin_hf.testing import tiny_base_model
from peft import LoraConfig, PeftModel, get_peft_model

from .conftest import VOCAB

NUM = VOCAB
TARGETS = {"qwen2": ["q_proj", "v_proj"], "gpt2": ["c_attn"]}


def causal_model(arch, tok):
    base = tiny_base_model(arch, vocab_size=VOCAB, spare_rows=3, seed=0)
    torch.manual_seed(0)
    return CauchyLMForCausalLM.from_base(base, tok)


def batch():
    ids = torch.tensor([[5, 17, NUM, 40, 41, NUM, 9], [7, NUM, 33, 34, NUM, 60, 61]])
    values = torch.zeros(ids.shape)
    values[ids == NUM] = torch.tensor([3.5, -12.0, 0.25, 7.0])
    return ids, values


@pytest.mark.parametrize("task_type", [None, "CAUSAL_LM"])
@pytest.mark.parametrize("arch", ["qwen2", "gpt2"])
def test_lora_trains_adapters_and_heads_and_round_trips(arch, task_type, tiny_tok, tmp_path):
    model = causal_model(arch, tiny_tok)
    config = LoraConfig(
        r=4,
        lora_alpha=8,
        lora_dropout=0.0,
        target_modules=TARGETS[arch],
        modules_to_save=list(HEAD_MODULES),
        task_type=task_type,
    )
    peft_model = get_peft_model(model, config)
    trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert any("lora_A" in n for n in trainable) and any("lora_B" in n for n in trainable)
    for head in HEAD_MODULES:
        assert any(f"{head}.modules_to_save" in n for n in trainable), head
    assert all("lora_" in n or "modules_to_save" in n for n in trainable)

    ids, values = batch()
    originals = {
        n: p.detach().clone() for n, p in peft_model.named_parameters() if "original_module" in n
    }
    peft_model.train()
    opt = torch.optim.Adam([p for p in peft_model.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    for _ in range(8):
        out = peft_model(input_ids=ids, numeric_values=values, labels=ids)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        losses.append(out.loss.item())
    assert losses[-1] < losses[0]
    lora_b = [p for n, p in peft_model.named_parameters() if "lora_B" in n]
    assert all(p.abs().sum() > 0 for p in lora_b)  # the adapters moved (B starts at 0)
    for n, p in peft_model.named_parameters():  # the frozen originals of the heads did not
        if n in originals:
            assert torch.equal(p, originals[n]), n

    peft_model.eval()
    with torch.no_grad():
        expected = peft_model(input_ids=ids, numeric_values=values)
        no_values = peft_model(input_ids=ids)
    assert not torch.allclose(expected.loc_S, no_values.loc_S)  # numeric_values reached forward
    peft_model.save_pretrained(tmp_path)
    fresh = causal_model(arch, tiny_tok)
    loaded = PeftModel.from_pretrained(fresh, tmp_path)
    loaded.eval()
    with torch.no_grad():
        got = loaded(input_ids=ids, numeric_values=values)
    for name in ("loc_S", "scale_S", "loc_Y", "scale_Y"):
        torch.testing.assert_close(
            getattr(got, name), getattr(expected, name), rtol=1e-5, atol=1e-5
        )


def test_merged_lora_model_is_a_plain_causal_model(tiny_tok, tmp_path):
    model = causal_model("qwen2", tiny_tok)
    config = LoraConfig(r=4, target_modules=TARGETS["qwen2"], modules_to_save=list(HEAD_MODULES))
    peft_model = get_peft_model(model, config)
    with torch.no_grad():
        for n, p in peft_model.named_parameters():
            if "lora_B" in n or "modules_to_save" in n:
                p.add_(0.01 * torch.randn_like(p))
    ids, values = batch()
    peft_model.eval()
    with torch.no_grad():
        expected = peft_model(input_ids=ids, numeric_values=values).loc_S
    with pytest.raises(ValueError, match="PEFT"):
        peft_model.get_base_model().save_heads(tmp_path / "wrapped")
    merged = peft_model.merge_and_unload()
    assert type(merged) is CauchyLMForCausalLM
    torch.testing.assert_close(merged(ids, numeric_values=values).loc_S, expected)
    merged.save_pretrained(tmp_path / "merged")
    again = CauchyLMForCausalLM.from_pretrained(tmp_path / "merged")
    torch.testing.assert_close(again(ids, numeric_values=values).loc_S, expected)


def test_lora_with_gradient_checkpointing_gives_the_same_grads(tiny_tok):
    def run(checkpointing):
        model = causal_model("qwen2", tiny_tok)
        config = LoraConfig(
            r=4, init_lora_weights=False, target_modules=TARGETS["qwen2"],
            modules_to_save=list(HEAD_MODULES),
        )  # fmt: skip
        torch.manual_seed(1)
        peft_model = get_peft_model(model, config)
        peft_model.train()
        if checkpointing:
            peft_model.get_base_model().activation_checkpointing_enable()
        ids, values = batch()
        out = peft_model(input_ids=ids, numeric_values=values, labels=ids)
        out.loss.backward()
        return out.loss.detach(), {
            n: p.grad.clone() for n, p in peft_model.named_parameters() if p.grad is not None
        }

    loss0, g0 = run(False)
    loss1, g1 = run(True)
    torch.testing.assert_close(loss1, loss0)
    assert g0.keys() == g1.keys() and any("lora_A" in n for n in g0)
    for name in g0:
        torch.testing.assert_close(g1[name], g0[name], rtol=1e-5, atol=1e-6)
