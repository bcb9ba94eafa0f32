"""CauchyLMConfig: defaults, derived sizes, validation, serialisation and Auto-class registration."""

from __future__ import annotations

import math

import pytest
import torch
from cauchylin_hf import CauchyLMConfig, CauchyLMForCausalLM
from cauchylin_hf.testing import tiny_base_config
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, GPT2Config


def make(**kw) -> CauchyLMConfig:
    return CauchyLMConfig(base_config=tiny_base_config("qwen2", vocab_size=300), **kw)


def test_defaults_follow_the_spec():
    cfg = make()
    assert cfg.model_type == "cauchy_lm"
    assert (cfg.gamma_init, cfg.b_noise_init, cfg.threshold) == (0.01, 0.01, 0.0)
    assert (cfg.threshold_per_class, cfg.learnable_threshold) == (False, False)
    assert (cfg.alpha, cfg.reg_weight) == (1.0, 1.0)
    assert (cfg.w_num_scale, cfg.classifier_lr_scale, cfg.value_space) == (
        0.25,
        10.0,
        "signed_log1p",
    )
    assert (cfg.ovr_classes, cfg.training_mode, cfg.temperature) == ("all", "standard", 1.0)
    assert cfg.freeze_backbone is True
    assert (cfg.w_num_init, cfg.head_dtype, cfg.num_token) == ("random_unit", "float32", "<NUM>")
    assert cfg.tie_word_embeddings is False


def test_derived_sizes_come_from_the_base_config():
    cfg = make(num_token_id=299)
    assert (cfg.hidden_size, cfg.vocab_size, cfg.num_hidden_layers) == (32, 300, 2)
    assert cfg.causal_hidden_size == 32  # causal_size None -> C = H
    assert cfg.num_classes == 300  # ovr_classes="all": every embedding row
    assert make(causal_size=48).causal_hidden_size == 48
    restricted = make(ovr_classes="tokenizer", tokenizer_size=290, num_token_id=289)
    assert restricted.num_classes == 290
    assert cfg.torch_head_dtype is torch.float32
    assert make(head_dtype="bfloat16").torch_head_dtype is torch.bfloat16
    assert make(training_mode="causal").loss_temperature == 0.0
    assert make(temperature=0.5).loss_temperature == 0.5


def test_gpt2_hidden_size_is_read_through_its_attribute_map():
    cfg = CauchyLMConfig(base_config=tiny_base_config("gpt2"))
    assert isinstance(cfg.base_config, GPT2Config)
    assert cfg.hidden_size == 32 and cfg.causal_hidden_size == 32


def test_text_config_is_the_base_config():
    cfg = make()
    assert cfg.get_text_config() is cfg.base_config
    assert cfg.get_text_config(decoder=True) is cfg.base_config
    empty = CauchyLMConfig()
    assert empty.base_config is None and empty.get_text_config() is empty
    assert empty.hidden_size is None and empty.num_classes is None


def test_round_trip_through_json_and_autoconfig(tmp_path):
    cfg = make(
        num_token_id=299,
        gamma_init=3.0,
        threshold=7.5,
        threshold_per_class=True,
        learnable_threshold=True,
        alpha=0.25,
        reg_weight=2.0,
        base_model_name_or_path="/models/qwen",
        base_vocab_size=300,
    )
    cfg.save_pretrained(tmp_path)
    again = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(again, CauchyLMConfig)
    assert type(again.base_config) is type(cfg.base_config)
    for name in (
        "num_token_id",
        "gamma_init",
        "threshold",
        "threshold_per_class",
        "learnable_threshold",
        "alpha",
        "reg_weight",
        "base_model_name_or_path",
        "base_vocab_size",
        "hidden_size",
        "vocab_size",
    ):
        assert getattr(again, name) == getattr(cfg, name), name
    assert again.base_config.to_dict() == cfg.base_config.to_dict()


def test_base_config_may_be_given_as_a_dict():
    base = tiny_base_config("llama")
    cfg = CauchyLMConfig(base_config=base.to_dict())
    assert type(cfg.base_config) is type(base) and cfg.hidden_size == 32


def test_auto_classes_are_registered():
    cfg = make(num_token_id=299)
    assert isinstance(AutoConfig.for_model("cauchy_lm"), CauchyLMConfig)
    assert type(AutoModelForCausalLM.from_config(cfg)) is CauchyLMForCausalLM
    assert type(AutoModel.from_config(cfg)) is CauchyLMForCausalLM


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"gamma_init": 0.0}, "gamma_init"),
        ({"gamma_init": math.inf}, "gamma_init"),
        ({"gamma_init": "10"}, "gamma_init"),
        ({"b_noise_init": math.nan}, "b_noise_init"),
        ({"threshold": math.inf}, "threshold"),
        ({"alpha": 1.5}, "alpha"),
        ({"alpha": -0.1}, "alpha"),
        ({"reg_weight": -1.0}, "reg_weight"),
        ({"reg_scale_cutoff": 0.0}, "reg_scale_cutoff"),
        ({"reg_scale_cutoff": math.nan}, "reg_scale_cutoff"),
        ({"reg_target_weight": -1.0}, "reg_target_weight"),
        ({"reg_target_weight": math.inf}, "reg_target_weight"),
        ({"temperature": -1.0}, "temperature"),
        ({"causal_size": 0}, "causal_size"),
        ({"causal_size": 2.5}, "causal_size"),
        ({"ovr_classes": "some"}, "ovr_classes"),
        ({"ovr_classes": "tokenizer"}, "tokenizer_size"),
        ({"ovr_classes": "tokenizer", "tokenizer_size": 400}, "tokenizer_size"),
        ({"ovr_classes": "tokenizer", "tokenizer_size": 200, "num_token_id": 250}, "num_token_id"),
        ({"training_mode": "sampling"}, "training_mode"),
        ({"w_num_init": "ones"}, "w_num_init"),
        ({"head_dtype": "int8"}, "head_dtype"),
        ({"num_token": ""}, "num_token"),
        ({"num_token_id": -1}, "num_token_id"),
        ({"num_token_id": 300}, "num_token_id"),  # beyond the 300 embedding rows
        ({"freeze_backbone": "yes"}, "freeze_backbone"),
    ],
)
def test_bad_settings_raise_value_errors_naming_them(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make(**kwargs)


def test_a_base_config_dict_needs_a_model_type():
    with pytest.raises(ValueError, match="model_type"):
        CauchyLMConfig(base_config={"hidden_size": 32})


def test_a_model_needs_a_base_config():
    with pytest.raises(ValueError, match="base_config"):
        CauchyLMForCausalLM(CauchyLMConfig())


def test_the_layers_say_why_their_defaults_differ_from_the_language_models():
    """Each layer default that CauchyLMConfig overrides is named, with the config's value, in the
    layer's docstring, and the docstring points to the page with the measurements."""
    import inspect

    from cauchylin.nn import Abduction, Action

    config = CauchyLMConfig()
    checked = 0
    for layer in (Action, Abduction):
        doc = inspect.getdoc(layer)
        assert "Numbers: the defaults and why" in doc
        for name, param in inspect.signature(layer.__init__).parameters.items():
            if param.default is inspect.Parameter.empty or not hasattr(config, name):
                continue
            ours = getattr(config, name)
            if ours == param.default:
                continue
            shown = repr(ours) if isinstance(ours, str) else f"{ours:g}"
            assert f"{name}={shown}".replace("'", '"') in doc, (layer.__name__, name, shown)
            checked += 1
    assert checked >= 4  # threshold, b_noise_init, value_space, gamma_init


def test_numpy_numbers_are_checked_and_stored_as_python_numbers():
    import json

    import numpy as np

    cfg = make(gamma_init=np.float32(2.5), readout_contexts=np.int64(3), num_token_id=np.int64(7))
    assert type(cfg.gamma_init) is float and cfg.gamma_init == 2.5
    assert type(cfg.readout_contexts) is int and type(cfg.num_token_id) is int
    assert json.loads(cfg.to_json_string())["gamma_init"] == 2.5  # the config still saves
    with pytest.raises(ValueError, match="readout_contexts"):
        make(readout_contexts=np.int64(-1))
    with pytest.raises(ValueError, match="alpha"):
        make(alpha=np.float64(1.5))
