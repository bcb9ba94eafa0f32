"""``numeric_encoding="periodic"``: the config option builds the periodic numeric embedding, scales it
as ``w_num`` is scaled, and survives full and heads-only checkpoints; the default stays linear."""

from __future__ import annotations

import pytest
import torch
from cauchylin_hf import CauchyLMConfig, CauchyLMForCausalLM
from cauchylin_hf._backbone import input_embedding_weight
from cauchylin_hf.testing import save_tiny_base, tiny_base_model
from safetensors.torch import load_file, save_file

from .test_save_load import assert_same_outputs, perturb

PERIODIC = {"numeric_encoding": "periodic", "numeric_frequencies": 5, "numeric_sigma": 2.0}


def test_the_default_model_has_the_linear_embedding_alone(tiny_tok):
    model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2", spare_rows=3), tiny_tok)
    assert model.config.numeric_encoding == "linear"
    names = [n for n in model.state_dict() if n.startswith("numeric_embedding.")]
    assert sorted(names) == ["numeric_embedding.num_token_delta", "numeric_embedding.w_num"]


def test_from_base_builds_and_scales_the_periodic_embedding(tiny_tok):
    base = tiny_base_model("qwen2", spare_rows=3)
    model = CauchyLMForCausalLM.from_base(base, tiny_tok, **PERIODIC)
    emb = model.numeric_embedding
    assert emb.encoding == "periodic" and emb.sigma == 2.0
    assert emb.frequencies.shape == (5,) and emb.periodic_weight.shape == (32, 10)
    # P is scaled by the same multiple of the rows' mean norm as the unit w_num: the ratio of
    # its entries' root mean square to |w_num| is that of a fresh layer, 1 / sqrt(2 K H)
    rows = input_embedding_weight(model).detach().float().norm(dim=1).mean()
    torch.testing.assert_close(emb.w_num.norm(), 0.25 * rows, rtol=1e-5, atol=0)
    rms = emb.periodic_weight.detach().square().mean().sqrt()
    fresh = 1 / (2 * 5 * 32) ** 0.5
    assert 0.5 < (rms / emb.w_num.norm()).item() / fresh < 2.0  # 320 N(0, s^2) draws
    # the periodic term moves the embedding of a number, not of a text token
    ids = torch.tensor([[5, model.config.num_token_id, 7]])
    values = torch.tensor([[0.0, 12.5, 0.0]])
    with torch.no_grad():
        out = model(ids, numeric_values=values).loc_Y
        emb.periodic_weight.zero_()
        linear = model(ids, numeric_values=values).loc_Y
    assert torch.equal(out[0, 0], linear[0, 0]) and not torch.equal(out[0, 1], linear[0, 1])


def test_periodic_model_round_trips_through_save_pretrained(tiny_tok, tmp_path):
    model = CauchyLMForCausalLM.from_base(
        tiny_base_model("qwen2", spare_rows=3), tiny_tok, **PERIODIC
    )
    perturb(model)
    model.save_pretrained(tmp_path)
    again = CauchyLMForCausalLM.from_pretrained(tmp_path)
    assert again.config.numeric_encoding == "periodic"
    assert again.config.numeric_frequencies == 5 and again.config.numeric_sigma == 2.0
    for (n1, t1), (n2, t2) in zip(
        model.state_dict().items(), again.state_dict().items(), strict=True
    ):
        assert n1 == n2 and torch.equal(t1, t2), n1
    assert_same_outputs(model, again, model.config.num_token_id)


def test_periodic_heads_only_round_trip(tmp_path):
    folder = save_tiny_base(tmp_path / "base", "qwen2", spare_rows=3)
    model = CauchyLMForCausalLM.from_base(folder, **PERIODIC)
    perturb(model)
    model.save_heads(tmp_path / "heads")
    again = CauchyLMForCausalLM.from_heads(tmp_path / "heads")
    assert torch.equal(
        again.numeric_embedding.periodic_weight, model.numeric_embedding.periodic_weight
    )
    assert torch.equal(again.numeric_embedding.frequencies, model.numeric_embedding.frequencies)
    assert_same_outputs(model, again, model.config.num_token_id)


def test_missing_periodic_tensors_get_a_fresh_draw(tiny_tok, tmp_path):
    model = CauchyLMForCausalLM.from_base(
        tiny_base_model("qwen2", spare_rows=3), tiny_tok, **PERIODIC
    )
    perturb(model)
    model.save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    state = load_file(weights)
    gone = ("numeric_embedding.frequencies", "numeric_embedding.periodic_weight")
    save_file({k: v for k, v in state.items() if k not in gone}, weights, {"format": "pt"})
    again = CauchyLMForCausalLM.from_pretrained(tmp_path)
    for name in gone:
        t = again.state_dict()[name]
        assert torch.isfinite(t).all() and not torch.equal(t, state[name]) and t.abs().sum() > 0
    assert torch.equal(again.numeric_embedding.w_num, state["numeric_embedding.w_num"])


@pytest.mark.parametrize(
    ("setting", "value"),
    [("numeric_encoding", "fourier"), ("numeric_frequencies", 0), ("numeric_sigma", -1.0)],
)
def test_bad_periodic_settings_name_the_setting(setting, value):
    with pytest.raises(ValueError, match=setting):
        CauchyLMConfig(**{setting: value})
