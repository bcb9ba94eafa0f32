"""Checkpoints and settings files from elsewhere: refused with the file named, never loaded wrong."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from cauchylin_hf import CauchyLMConfig
from cauchylin_hf.app import cli
from cauchylin_hf.app.cli import load_causal_model
from cauchylin_hf.data import read_texts
from cauchylin_hf.heads_io import HEADS_WEIGHTS_NAME
from cauchylin_hf.model import CauchyLMForCausalLM
from cauchylin_hf.testing import save_tiny_base, tiny_base_config, tiny_base_model, tiny_tokenizer
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


@pytest.mark.parametrize("encoding", ["utf-16-le", "latin-1"])  # utf-16 without its BOM
def test_a_data_file_that_is_not_utf8_names_the_file(tmp_path, encoding):
    path = tmp_path / "table.txt"
    path.write_bytes("prix 3 € ou 4 ¤ à Noël\n".encode(encoding, errors="replace"))
    with pytest.raises(ValueError, match=r"table\.txt is not UTF-8 text: byte 0x.. at line 1"):
        read_texts(path)


def test_a_data_file_nested_too_deeply_names_the_file(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text("[" * 200_000 + "]" * 200_000 + "\n")
    with pytest.raises(ValueError, match=r"deep\.jsonl:1: the JSON is nested too deeply"):
        read_texts(path)


# ----------------------------------------- a config that is not the one saved with the weights


@pytest.fixture(scope="module")
def causal_folder(tmp_path_factory):
    """A saved causal model (heads on a tiny Qwen2 base) and the base folder."""
    root = tmp_path_factory.mktemp("configs")
    base = save_tiny_base(root / "base", "qwen2", spare_rows=2)
    model, ntok = load_causal_model(base)
    model.save_pretrained(root / "causal")
    ntok.save_pretrained(root / "causal")
    return root / "causal", base


def _copy_with(folder, tmp_path, edit):
    out = tmp_path / folder.name
    shutil.copytree(folder, out)
    edit(out)
    return out


def _cli_error(argv, capsys) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("cauchylin-lm "), err
    return err[-1]


RUNAWAY = textwrap.dedent(
    """
    import resource, sys, time
    from cauchylin_hf.app import cli
    import torch, transformers  # noqa: F401  (imported before the limit is set)
    # The limit counts from what the libraries already map: a CUDA build of torch reserves
    # gigabytes of address space at import, on a machine with or without a GPU.
    with open("/proc/self/status") as f:
        mapped = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    limit = mapped + int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    start = time.monotonic()
    status = cli.main(["predict", sys.argv[1], "--prompt", "x ", "--threads", "1"])
    print(f"status {status} seconds {time.monotonic() - start:.1f}")
    """
)


@pytest.mark.skipif(
    not hasattr(os, "fork") or not os.path.exists("/proc/self/status"),
    reason="RLIMIT_AS is POSIX; the mapped size is read from Linux's /proc",
)
def test_a_model_type_edited_to_the_bases_is_refused_at_once_not_built(causal_folder, tmp_path):
    """`"model_type": "qwen2"` in a causal model's config.json: the causal config has no
    top-level sizes, so transformers built its default Qwen2 (about 12B parameters, 10.7 GB
    resident a minute in). With 3 GiB of address space beyond what the imported libraries map
    (a tiny model needs far less) it must be refused in seconds, by name, without
    allocating."""

    def edit(folder):
        config = json.loads((folder / "config.json").read_text())
        config["model_type"] = "qwen2"
        (folder / "config.json").write_text(json.dumps(config))

    folder = _copy_with(causal_folder[0], tmp_path, edit)
    script = tmp_path / "runaway.py"
    script.write_text(RUNAWAY)
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(script), str(folder), str(3 * 2**30)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    elapsed = time.monotonic() - start
    err = proc.stderr.strip().splitlines()[-1]
    assert "allocate" not in err, err
    assert "its config.json describes a qwen2 model of" in err, err
    assert "the config does not belong to these weights" in err
    assert '"model_type" must be "cauchy_lm"' in err
    assert "status 2 " in proc.stdout and elapsed < 120, (proc.stdout, elapsed)


def test_a_causal_folder_with_its_bases_config_is_refused_not_random(
    causal_folder, tmp_path, capsys
):
    """The base's config.json in a causal folder: every base weight missing, initialised at
    random, and predict printed numbers with exit status 0. The reverse (a causal config over
    the base's weights) lost the heads the same way."""
    causal, base = causal_folder
    folder = _copy_with(causal, tmp_path, lambda f: shutil.copy(base / "config.json", f))
    argv = ["predict", str(folder), "--prompt", "x ", "--threads", "1"]
    err = _cli_error(argv, capsys)
    assert "weights of the qwen2 model its config.json describes are not in its weights" in err
    assert "would be random numbers" in err and "not its base's" in err
    with pytest.raises(ValueError, match="would be random numbers"):
        CauchyLMForCausalLM.from_base(str(folder))
    reverse = tmp_path / "reverse"
    shutil.copytree(causal, reverse)
    shutil.copy(base / "model.safetensors", reverse / "model.safetensors")
    err = _cli_error(["predict", str(reverse), "--prompt", "x ", "--threads", "1"], capsys)
    assert "weights of the cauchy_lm model its config.json describes are not in its" in err
    assert "not the ones saved with this config.json" in err


@pytest.mark.parametrize(
    "key, value",
    [
        ("num_hidden_layers", -1),
        ("num_hidden_layers", "two"),
        ("num_hidden_layers", 2.5),
        ("hidden_size", 0),
    ],
)
def test_a_config_that_fails_its_own_validation_is_one_line(
    causal_folder, tmp_path, capsys, key, value
):
    """An edited base_config.num_hidden_layers raised huggingface_hub's
    StrictDataclass...Error (not a ValueError) through every handler; a hidden_size of 0 a
    ZeroDivisionError from the rotary embedding."""

    def edit(folder):
        config = json.loads((folder / "config.json").read_text())
        config["base_config"][key] = value
        (folder / "config.json").write_text(json.dumps(config))

    folder = _copy_with(causal_folder[0], tmp_path, edit)
    err = _cli_error(["predict", str(folder), "--prompt", "x ", "--threads", "1"], capsys)
    assert f"could not load {str(folder)!r}" in err
    assert "config.json is not a valid config" in err


def test_a_tokenizer_json_that_its_library_cannot_build_is_one_line(
    causal_folder, tmp_path, capsys
):
    """A vocabulary without the token a merge makes: the tokenizers library raises a bare
    Exception ("Token `ar` out of vocabulary"), which escaped as a traceback."""

    def edit(folder):
        spec = json.loads((folder / "tokenizer.json").read_text())
        spec["model"]["merges"] = [["a", "r"]]
        spec["model"]["vocab"].pop("ar", None)
        (folder / "tokenizer.json").write_text(json.dumps(spec))

    folder = _copy_with(causal_folder[0], tmp_path, edit)
    err = _cli_error(["predict", str(folder), "--prompt", "x ", "--threads", "1"], capsys)
    assert f"could not load the tokenizer in {str(folder)!r}" in err
    assert "out of vocabulary" in err
    with pytest.raises(ValueError, match="could not load the tokenizer in"):
        NumericTokenizer.from_pretrained(folder)


def test_nan_weights_in_a_checkpoint_are_refused_naming_the_folder_and_weight(
    causal_folder, tmp_path
):
    """A NaN in the backbone's weights loaded, and every command then failed with "loc must be
    finite" (an internal tensor), naming no file."""
    causal, base = causal_folder

    def poison(name):
        def edit(folder):
            state = load_file(str(folder / "model.safetensors"))
            key = next(k for k in state if k.endswith(name))
            state[key][0, 0] = float("nan")
            save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})

        return edit

    folder = _copy_with(causal, tmp_path, poison("mlp.up_proj.weight"))
    with pytest.raises(ValueError, match=rf"{folder}: the weight backbone\.layers\.0\.mlp\.up"):
        CauchyLMForCausalLM.from_pretrained(folder)
    bad_base = _copy_with(base, tmp_path / "b", poison("mlp.up_proj.weight"))
    with pytest.raises(ValueError, match=rf"{bad_base}: the weight model\.layers\.0\.mlp\.up"):
        CauchyLMForCausalLM.from_base(str(bad_base))


@pytest.mark.parametrize("damage", ["missing", "emptied"])
def test_a_tokenizer_that_encodes_text_to_nothing_is_refused(
    causal_folder, tmp_path, capsys, damage
):
    """Without tokenizer.json (or with an empty vocabulary) transformers builds a tokenizer of
    the special tokens alone from tokenizer_config.json: every prompt encoded to nothing and
    predict printed numbers with exit status 0 (found by the hostile round)."""

    def edit(folder):
        if damage == "missing":
            (folder / "tokenizer.json").unlink()
        else:
            spec = json.loads((folder / "tokenizer.json").read_text())
            spec["model"]["vocab"], spec["model"]["merges"] = {}, []
            (folder / "tokenizer.json").write_text(json.dumps(spec))

    folder = _copy_with(causal_folder[0], tmp_path, edit)
    err = _cli_error(["predict", str(folder), "--prompt", "x ", "--threads", "1"], capsys)
    assert f"the tokenizer in {str(folder)!r} encodes text to nothing" in err


def test_a_lowered_layer_count_is_refused_not_a_shallower_model(causal_folder, tmp_path, capsys):
    """num_hidden_layers 2 -> 1 in a config: transformers dropped the second layer's weights
    with only its load report, and predict answered with a one-layer model (found by the
    hostile round)."""
    causal, base = causal_folder

    def fewer(nested):
        def edit(folder):
            config = json.loads((folder / "config.json").read_text())
            inner = config["base_config"] if nested else config
            inner["num_hidden_layers"], inner["layer_types"] = 1, ["full_attention"]
            (folder / "config.json").write_text(json.dumps(config))

        return edit

    for source, nested, name in ((causal, True, "backbone"), (base, False, "model")):
        folder = _copy_with(source, tmp_path / name, fewer(nested))
        err = _cli_error(["predict", str(folder), "--prompt", "x ", "--threads", "1"], capsys)
        assert "weights that the" in err and "has no place for" in err
        assert f"(e.g. '{name}.layers.1." in err


def test_weights_beside_the_model_and_old_buffers_still_load(tmp_path):
    """Not every unexpected tensor is a sign of a wrong config: another task's head beside the
    decoder (a value head) and a buffer an older release saved are transformers' to report."""
    folder = save_tiny_base(tmp_path / "base", "gpt2", spare_rows=2)
    state = load_file(str(folder / "model.safetensors"))
    state["v_head.summary.weight"] = torch.ones(1, 32)
    state["transformer.h.0.attn.masked_bias"] = torch.tensor(-1e4)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    model = CauchyLMForCausalLM.from_base(str(folder))
    assert model.config.num_token_id is not None
