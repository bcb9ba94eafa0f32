"""Checkpoints and settings files from elsewhere: refused with the file named, never loaded wrong."""

from __future__ import annotations

import json
import time

import pytest
import torch
from cauchylin_hf import CauchyLMConfig
from cauchylin_hf.data import read_texts
from cauchylin_hf.heads_io import HEADS_WEIGHTS_NAME
from cauchylin_hf.model import CauchyLMForCausalLM
from cauchylin_hf.testing import tiny_base_config, tiny_base_model, tiny_tokenizer
from cauchylin_hf.tokenizer import NumericTokenizer
from safetensors.torch import load_file, save_file
from transformers import DynamicCache

NUM = 299


@pytest.fixture
def model():
    return CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=NUM)


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
def test_a_heads_file_with_integer_or_bool_w_cls_is_refused(model, tmp_path, dtype):
    model.save_heads(tmp_path)
    state = load_file(str(tmp_path / HEADS_WEIGHTS_NAME))
    w = state["action.classifier.weight"]
    state["action.classifier.weight"] = (w > 0).to(dtype)
    save_file(state, str(tmp_path / HEADS_WEIGHTS_NAME))
    with pytest.raises(ValueError, match=r"action\.classifier\.weight is stored as (int64|bool)"):
        CauchyLMForCausalLM.from_heads(tmp_path, tiny_base_model("qwen2"))


@pytest.mark.parametrize("name", ["action.threshold", "action.b_noise", "abduction.loc_net.bias"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_head_tensors_are_refused_by_both_loaders(model, tmp_path, name, bad):
    with torch.no_grad():
        dict(model.named_buffers()).get(name, dict(model.named_parameters()).get(name)).fill_(bad)
    model.save_pretrained(tmp_path / "full")
    with pytest.raises(ValueError, match=rf"{name} holds NaN or infinite values"):
        CauchyLMForCausalLM.from_pretrained(tmp_path / "full")
    model.save_heads(tmp_path / "heads")
    with pytest.raises(ValueError, match=rf"{name} holds NaN or infinite values"):
        CauchyLMForCausalLM.from_heads(tmp_path / "heads", tiny_base_model("qwen2"))


@pytest.mark.parametrize("name", ["flat-modle", "./flat-modle", "runs/a/b", "/no/such/folder"])
def test_a_local_name_that_is_no_folder_fails_at_once(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    start = time.monotonic()
    with pytest.raises(FileNotFoundError, match=f"no model folder '{name}'"):
        CauchyLMForCausalLM.from_pretrained(name)
    assert time.monotonic() - start < 5.0  # no Hub retries (they took 56 s offline)


def test_a_path_object_that_is_no_folder_fails_at_once(tmp_path):
    with pytest.raises(FileNotFoundError, match="no model folder"):
        CauchyLMForCausalLM.from_pretrained(tmp_path / "typo")


@pytest.mark.parametrize(
    ("name", "value"),
    [("max_position_embeddings", 77), ("num_key_value_heads", 1), ("head_dim", 16)],
)
def test_the_base_sizes_can_be_set_on_the_config(name, value):
    """Setting a forwarded size sets it on the base config (transformers' own tests do this)."""
    config = CauchyLMConfig(base_config=tiny_base_config("qwen2"))
    assert getattr(config, name) != value
    setattr(config, name, value)
    assert getattr(config, name) == value
    assert getattr(config.base_config, name) == value
    again = CauchyLMConfig.from_dict(config.to_dict())
    assert getattr(again, name) == value


def test_a_larger_context_set_on_the_config_is_used():
    config = CauchyLMConfig(base_config=tiny_base_config("qwen2"))
    config.max_position_embeddings = 4096
    model = CauchyLMForCausalLM(config).eval()
    out = model(torch.tensor([[5, 6, 7]]), cache=DynamicCache(config=model.config), use_cache=True)
    assert out.cache.get_seq_length() == 3
    assert model.backbone.config.max_position_embeddings == 4096


def test_a_size_cannot_be_set_without_a_base_config():
    with pytest.raises(ValueError, match="no base_config"):
        CauchyLMConfig().max_position_embeddings = 10


def test_a_tokenizer_settings_file_nested_too_deeply_names_the_file(tmp_path):
    NumericTokenizer(tiny_tokenizer(300)).save_pretrained(tmp_path)
    settings = tmp_path / "numeric_tokenizer_config.json"
    settings.write_text('{"a": ' + "[" * 200_000 + "]" * 200_000 + "}")
    with pytest.raises(ValueError, match=r"numeric_tokenizer_config\.json is nested too deeply"):
        NumericTokenizer.from_pretrained(tmp_path)


def test_a_settings_file_that_is_not_an_object_names_the_file(tmp_path):
    NumericTokenizer(tiny_tokenizer(300)).save_pretrained(tmp_path)
    (tmp_path / "numeric_tokenizer_config.json").write_text(json.dumps([1, 2]))
    with pytest.raises(ValueError, match=r"numeric_tokenizer_config\.json holds a JSON list"):
        NumericTokenizer.from_pretrained(tmp_path)


@pytest.mark.parametrize("encoding", ["utf-16", "latin-1"])
def test_a_data_file_that_is_not_utf8_names_the_file(tmp_path, encoding):
    path = tmp_path / "table.txt"
    path.write_bytes("prix 3 € ou 4 ¤ à Noël\n".encode(encoding, errors="replace"))
    with pytest.raises(ValueError, match=r"table\.txt is not UTF-8 text"):
        read_texts(path)


def test_a_data_file_nested_too_deeply_names_the_file(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text("[" * 200_000 + "]" * 200_000 + "\n")
    with pytest.raises(ValueError, match=r"deep\.jsonl:1: the JSON is nested too deeply"):
        read_texts(path)
