"""Transformers' progress bars: hidden by ``train(progress=False)``, ``save_pretrained`` and
``from_pretrained`` (unless ``progress=True`` asks), and the global switch restored after."""

from __future__ import annotations

import pytest
from cauchylin_hf import CauchyLMForCausalLM
from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
from cauchylin_hf.training import train
from transformers.utils import logging as hf_logging

BARS = ("Writing model shards", "Loading weights", "it/s]")


@pytest.fixture
def bars_on():
    """transformers' bars switched on (the default), and back as they were after the test."""
    was = hf_logging.is_progress_bar_enabled()
    hf_logging.enable_progress_bar()
    yield
    if not was:
        hf_logging.disable_progress_bar()


def _shown(text: str) -> list[str]:
    return [bar for bar in BARS if bar in text]


def test_save_and_load_show_no_bar_unless_asked(bars_on, tmp_path, capfd):
    model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
    model.save_pretrained(tmp_path / "m")
    CauchyLMForCausalLM.from_pretrained(tmp_path / "m")
    assert _shown(capfd.readouterr().err) == []
    assert hf_logging.is_progress_bar_enabled()  # restored
    # asked for, they are shown: the capture above would have seen them
    model.save_pretrained(tmp_path / "m", progress=True)
    CauchyLMForCausalLM.from_pretrained(tmp_path / "m", progress=True)
    assert _shown(capfd.readouterr().err)[:2] == ["Writing model shards", "Loading weights"]


def test_train_without_progress_prints_no_bar(bars_on, tmp_path, capfd):
    model, ntok = CauchyLMForCausalLM.from_base(
        tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True
    )
    texts = ["3 boxes of 12 eggs hold 36 eggs."] * 4
    train(model, ntok, texts, None, tmp_path / "out", max_steps=2, batch_size=2, progress=False)
    assert capfd.readouterr().err == ""
    assert hf_logging.is_progress_bar_enabled()
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_bars_switched_off_by_the_user_stay_off(tmp_path, capfd):
    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
        model.save_pretrained(tmp_path / "m", progress=True)
        assert not hf_logging.is_progress_bar_enabled()
        assert _shown(capfd.readouterr().err) == []
    finally:
        if was:
            hf_logging.enable_progress_bar()
