"""Checkpoints: full ``save_pretrained``/``from_pretrained`` and heads-only files.

* a saved causal model reloads with identical outputs, also after a training-like perturbation of
  every head tensor (so a re-initialisation would show), through the class and the Auto classes;
* heads missing from a checkpoint get the documented initialisation, the others stay as saved;
* heads-only folders load on top of an unchanged base (folder or object), including the added
  ``<NUM>`` row of a base without spare rows, and are much smaller than the full checkpoint;
* heads refuse a base with other weights (per-tensor SHA-256; the same base in another dtype
  passes), unless ``strict_base=False``; version-1 heads files still load;
* ``save_heads`` is atomic: a failed save leaves the previous heads loadable; broken files give
  errors that name them;
* GPT-2 backbone weights missing from a checkpoint get GPT-2's own initialisation;
* the sizes for Qwen2.5-0.5B's shapes (built on the meta device) are the documented ones.
"""

from __future__ import annotations

import copy
import json
import logging
import math
from pathlib import Path

import pytest
import torch
from cauchylin_hf import CauchyLMConfig, CauchyLMForCausalLM, heads_io
from cauchylin_hf._backbone import head_matrix
from cauchylin_hf.heads_io import HEADS_CONFIG_NAME, HEADS_WEIGHTS_NAME
from cauchylin_hf.testing import save_tiny_base, tiny_base_model
from safetensors.torch import load_file, save_file
from transformers import AutoModel, AutoModelForCausalLM, GPT2LMHeadModel, Qwen2Config

from cauchylin.nn import inverse_softplus

from .conftest import VOCAB

FIELDS = ("loc_S", "scale_S", "loc_Y", "scale_Y", "loc_U", "scale_U")


def perturb(model, seed=0):
    """Move every head tensor (parameters and buffers) away from its initial value."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name in ("numeric_embedding", "abduction", "action"):
            module = getattr(model, name)
            for t in [*module.parameters(), *module.buffers()]:
                if t.is_floating_point():
                    t.add_(0.05 * torch.randn(t.shape, generator=g))


def sample_inputs(num_id):
    ids = torch.tensor([[5, 6, num_id, 8, 9], [10, num_id, 12, 13, 14]])
    values = torch.zeros(ids.shape)
    values[ids == num_id] = torch.tensor([2.5, -40.0])
    return ids, values


def assert_same_outputs(a, b, num_id):
    ids, values = sample_inputs(num_id)
    with torch.no_grad():
        oa, ob = a(ids, numeric_values=values), b(ids, numeric_values=values)
        la = a(ids, numeric_values=values, labels=ids).loss
        lb = b(ids, numeric_values=values, labels=ids).loss
    # Equal weights give equal numbers up to the last bit of a BLAS reduction: a GEMV (loc_Y)
    # may round differently for tensors at different addresses, hence 1e-6 rather than 0.
    for name in FIELDS:
        torch.testing.assert_close(getattr(oa, name), getattr(ob, name), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(la, lb, rtol=1e-6, atol=1e-6)


CASES = {
    "qwen2-tied-spare": ("qwen2", True, 3, {}),
    "gpt2-no-spare": ("gpt2", True, 0, {}),
    "llama-untied-options": (
        "llama",
        False,
        2,
        {"causal_size": 40, "threshold_per_class": True, "learnable_threshold": True},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_full_round_trip_is_exact(case, tiny_tok, tmp_path):
    arch, tied, spare, settings = CASES[case]
    base = tiny_base_model(arch, tie_word_embeddings=tied, vocab_size=VOCAB, spare_rows=spare)
    model = CauchyLMForCausalLM.from_base(base, tiny_tok, **settings)
    perturb(model)
    model.save_pretrained(tmp_path)
    again = CauchyLMForCausalLM.from_pretrained(tmp_path)
    assert not again.training
    for (n1, t1), (n2, t2) in zip(
        model.state_dict().items(), again.state_dict().items(), strict=True
    ):
        assert n1 == n2 and torch.equal(t1, t2), n1
    assert_same_outputs(model, again, model.config.num_token_id)
    assert again.config.num_token_id == model.config.num_token_id == VOCAB
    assert again.config.vocab_size == model.config.vocab_size
    assert again.config.base_model_name_or_path == model.config.base_model_name_or_path


def test_auto_classes_load_the_causal_model(tiny_tok, tmp_path):
    model = CauchyLMForCausalLM.from_base(tiny_base_model("mistral", spare_rows=2), tiny_tok)
    perturb(model)
    model.save_pretrained(tmp_path)
    for auto in (AutoModelForCausalLM, AutoModel):
        again = auto.from_pretrained(tmp_path)
        assert type(again) is CauchyLMForCausalLM
        assert_same_outputs(model, again, VOCAB)


def test_freezing_survives_the_round_trip(tiny_tok, tmp_path):
    for frozen in (True, False):
        base = tiny_base_model("qwen2", spare_rows=3)
        model = CauchyLMForCausalLM.from_base(base, tiny_tok, freeze_backbone=frozen)
        model.save_pretrained(tmp_path / str(frozen))
        again = CauchyLMForCausalLM.from_pretrained(tmp_path / str(frozen))
        assert all(p.requires_grad != frozen for p in again.backbone.parameters())
        assert all(p.requires_grad for p in again.action.parameters())


@pytest.mark.parametrize(
    "dropped",
    [
        ("abduction.",),
        ("action.classifier.",),
        ("action.b_noise", "action.regressor."),
        ("numeric_",),
    ],
    ids=["abduction", "classifier", "noise+regressor", "numeric_embedding"],
)
def test_missing_heads_get_the_documented_init_and_nothing_else_moves(dropped, tiny_tok, tmp_path):
    model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2", spare_rows=3), tiny_tok)
    perturb(model)
    model.save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    state = load_file(weights)
    gone = [k for k in state if k.startswith(dropped)]
    assert gone
    save_file({k: v for k, v in state.items() if k not in gone}, weights, {"format": "pt"})
    again = CauchyLMForCausalLM.from_pretrained(tmp_path)
    new = again.state_dict()
    for name, t in new.items():  # everything that was in the file is exactly as saved
        if name not in gone:
            assert torch.equal(t, model.state_dict()[name]), name
    for name in gone:  # nothing missing is left as uninitialised memory
        assert torch.isfinite(new[name]).all() and not torch.equal(new[name], state[name]), name
    if "abduction." in dropped:
        abd = again.abduction
        assert torch.equal(abd.loc_net.weight, torch.eye(32))
        assert torch.equal(abd.loc_net.bias, torch.zeros(32))
        assert torch.equal(abd.scale_net.weight, torch.zeros(32, 32))
        bias = torch.full((32,), inverse_softplus(again.config.gamma_init))
        torch.testing.assert_close(abd.scale_net.bias, bias, rtol=1e-6, atol=0)
    if "action.classifier." in dropped:  # W_cls = the embedding rows (tied head), b_cls = 0
        emb = again.get_input_embeddings().weight
        expected, _ = head_matrix(emb, None, VOCAB + 3, 32)
        assert torch.equal(again.action.classifier.weight, expected)
        assert torch.equal(again.action.classifier.bias, torch.zeros(VOCAB + 3))
    if "action.b_noise" in dropped:
        assert torch.equal(again.action.b_noise, torch.full((32,), again.config.b_noise_init))
        assert torch.equal(again.action.regressor.bias, torch.zeros(1))
    if "numeric_" in dropped:
        torch.testing.assert_close(again.numeric_embedding.w_num.norm(), torch.tensor(1.0))
        assert torch.equal(again.numeric_embedding.num_token_delta, torch.zeros(32))


def test_heads_only_round_trip_on_the_recorded_base_folder(tmp_path):
    folder = save_tiny_base(tmp_path / "base", "qwen2", spare_rows=3)
    model = CauchyLMForCausalLM.from_base(folder)
    perturb(model)
    sizes = model.save_heads(tmp_path / "heads")
    assert set(sizes) == {HEADS_WEIGHTS_NAME, HEADS_CONFIG_NAME}
    again = CauchyLMForCausalLM.from_heads(tmp_path / "heads")  # base from the recorded path
    assert again.config.base_model_name_or_path == str(folder)
    assert_same_outputs(model, again, model.config.num_token_id)
    model.save_pretrained(tmp_path / "full")
    full = sum(f.stat().st_size for f in (tmp_path / "full").iterdir())
    heads = sum(sizes.values())
    print(
        f"\ntiny Qwen2 (H=32, 2 layers, {model.config.vocab_size} rows): full {full} B, heads {heads} B"
    )
    assert heads < full / 2


def test_heads_only_round_trip_with_an_added_num_row(tiny_tok, tmp_path):
    base = tiny_base_model("gpt2", vocab_size=VOCAB, spare_rows=0)
    reference = tiny_base_model("gpt2", vocab_size=VOCAB, spare_rows=0)  # an unchanged copy
    model = CauchyLMForCausalLM.from_base(base, tiny_tok)
    assert model.config.vocab_size == VOCAB + 1
    perturb(model)
    with torch.no_grad():
        model.get_input_embeddings().weight[VOCAB].add_(1.0)  # the added <NUM> row trained too
    model.save_heads(tmp_path)
    tensors = load_file(tmp_path / HEADS_WEIGHTS_NAME)
    assert tensors["extra_embedding_rows"].shape == (1, 32)
    again = CauchyLMForCausalLM.from_heads(tmp_path, base=reference)
    assert again.get_input_embeddings().weight.shape[0] == VOCAB + 1
    assert_same_outputs(model, again, VOCAB)


def test_heads_only_errors(tiny_tok, tmp_path, caplog):
    model = CauchyLMForCausalLM.from_base(tiny_base_model("llama", spare_rows=2), tiny_tok)
    model.save_heads(tmp_path / "heads")
    with pytest.raises(ValueError, match="does not exist"):
        CauchyLMForCausalLM.from_heads(tmp_path / "missing")
    model.save_pretrained(tmp_path / "full")
    with pytest.raises(ValueError, match="not a heads-only folder"):
        CauchyLMForCausalLM.from_heads(tmp_path / "full", base=tiny_base_model("llama"))
    with pytest.raises(ValueError, match="no base"):
        CauchyLMForCausalLM.from_heads(tmp_path / "heads")  # built from an object: no path
    wider = tiny_base_model("llama", spare_rows=2, hidden_size=64)
    with pytest.raises(ValueError, match="not the one"):
        CauchyLMForCausalLM.from_heads(tmp_path / "heads", base=wider)
    with pytest.raises(ValueError, match="not the one"):
        CauchyLMForCausalLM.from_heads(
            tmp_path / "heads", base=tiny_base_model("qwen2", spare_rows=2)
        )
    other = tiny_base_model("llama", spare_rows=2, seed=1, initializer_range=0.5)
    with pytest.raises(ValueError, match="differs"):
        CauchyLMForCausalLM.from_heads(tmp_path / "heads", base=other)
    with caplog.at_level(logging.WARNING, logger="cauchylin_hf.heads_io"):
        CauchyLMForCausalLM.from_heads(tmp_path / "heads", base=other, strict_base=False)
    assert "differs" in caplog.text


def test_heads_refuse_a_base_that_differs_by_less_than_one_percent(tmp_path, caplog):
    """Two tiny Qwen2 bases of seeds 0 and 1 differ by 0.64% in the norm of all their weights."""
    model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
    perturb(model)
    model.save_heads(tmp_path)
    other = tiny_base_model("qwen2", seed=1)
    norms = [
        math.sqrt(sum(float(p.detach().double().square().sum()) for p in b.model.parameters()))
        for b in (tiny_base_model("qwen2"), other)
    ]
    assert abs(norms[0] - norms[1]) / norms[0] < 0.01  # what a 1% norm check let through
    with pytest.raises(ValueError, match=r"differs.*SHA-256.*strict_base=False"):
        CauchyLMForCausalLM.from_heads(tmp_path, base=other)
    with caplog.at_level(logging.WARNING, logger="cauchylin_hf.heads_io"):
        loaded = CauchyLMForCausalLM.from_heads(tmp_path, base=other, strict_base=False)
    assert "differs" in caplog.text
    for name, t in model.action.state_dict().items():  # the heads themselves are loaded
        assert torch.equal(loaded.action.state_dict()[name], t)
    # One changed weight is enough.
    nudged = tiny_base_model("qwen2")
    with torch.no_grad():
        nudged.model.layers[1].mlp.up_proj.weight[3, 4] += 1e-6
    with pytest.raises(ValueError, match=r"layers\.1\.mlp\.up_proj\.weight"):
        CauchyLMForCausalLM.from_heads(tmp_path, base=nudged)
    assert_same_outputs(model, CauchyLMForCausalLM.from_heads(tmp_path, tiny_base_model()), 299)


def test_heads_accept_the_same_base_in_another_dtype(tmp_path):
    model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
    model.save_heads(tmp_path)
    same = copy.deepcopy(tiny_base_model("qwen2")).to(torch.bfloat16)
    loaded = CauchyLMForCausalLM.from_heads(tmp_path, base=same)
    assert loaded.backbone.dtype == torch.bfloat16
    other = tiny_base_model("qwen2", seed=1).to(torch.bfloat16)
    with pytest.raises(ValueError, match=r"norm .* in bfloat16, saved .* in float32"):
        CauchyLMForCausalLM.from_heads(tmp_path, base=other)


def test_version_1_heads_files_still_load(tmp_path, caplog):
    """A version-1 file (one float64 norm of all backbone weights) loads, at a tighter bound."""
    model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
    perturb(model)
    model.save_heads(tmp_path)
    meta = json.loads((tmp_path / HEADS_CONFIG_NAME).read_text())
    del meta["base_tensors"]
    norm = math.sqrt(
        sum(float(p.detach().double().square().sum()) for p in model.backbone.parameters())
    )
    meta.update(format_version=1, base_fingerprint=norm)
    (tmp_path / HEADS_CONFIG_NAME).write_text(json.dumps(meta))
    with caplog.at_level(logging.WARNING, logger="cauchylin_hf.heads_io"):
        again = CauchyLMForCausalLM.from_heads(tmp_path, tiny_base_model())
    assert "version-1" in caplog.text
    assert_same_outputs(model, again, 299)
    with pytest.raises(ValueError, match="norm of all weights"):
        CauchyLMForCausalLM.from_heads(tmp_path, tiny_base_model(seed=1))


def test_a_failed_save_heads_leaves_the_previous_heads(tmp_path, monkeypatch):
    model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
    perturb(model, seed=0)
    folder = tmp_path / "heads"
    model.save_heads(folder)
    (folder / "README.txt").write_text("mine")
    before = {f.name: f.read_bytes() for f in folder.iterdir()}
    newer = copy.deepcopy(model)
    perturb(newer, seed=1)

    def broken_dumps(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(heads_io.json, "dumps", broken_dumps)
    with pytest.raises(OSError, match="disk full"):
        newer.save_heads(folder)
    monkeypatch.undo()
    assert {f.name: f.read_bytes() for f in folder.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["heads"]  # no staging folder left
    assert_same_outputs(model, CauchyLMForCausalLM.from_heads(folder, tiny_base_model()), 299)
    # A save that succeeds replaces the heads and keeps the other files of the folder.
    newer.save_heads(folder)
    assert (folder / "README.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["heads"]
    assert_same_outputs(newer, CauchyLMForCausalLM.from_heads(folder, tiny_base_model()), 299)


def test_broken_heads_files_give_errors_that_name_them(tmp_path):
    model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
    model.save_heads(tmp_path)
    meta_file, weights_file = tmp_path / HEADS_CONFIG_NAME, tmp_path / HEADS_WEIGHTS_NAME
    good_meta, good_weights = meta_file.read_text(), weights_file.read_bytes()
    meta = json.loads(good_meta)
    cases = {
        "[1, 2]": "holds a JSON list",
        "{broken": "is not valid JSON",
        json.dumps({k: v for k, v in meta.items() if k != "config"}): r"lacks \['config'\]",
        json.dumps({**meta, "format_version": 99}): "not a supported heads file",
        json.dumps({k: v for k, v in meta.items() if k != "base_tensors"}): "base_tensors",
    }
    for text, message in cases.items():
        meta_file.write_text(text)
        with pytest.raises(ValueError, match=message) as info:
            CauchyLMForCausalLM.from_heads(tmp_path, tiny_base_model())
        assert HEADS_CONFIG_NAME in str(info.value)
    meta_file.write_text(good_meta)
    weights_file.write_bytes(good_weights[: len(good_weights) // 2])  # a truncated file
    with pytest.raises(ValueError, match=f"cannot read .*{HEADS_WEIGHTS_NAME}"):
        CauchyLMForCausalLM.from_heads(tmp_path, tiny_base_model())


def test_from_pretrained_config_errors_name_the_file(tmp_path):
    model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
    model.save_pretrained(tmp_path)
    config = tmp_path / "config.json"
    for text, message in (("[1, 2]", "holds a JSON list"), ("{", "is not valid JSON")):
        config.write_text(text)
        with pytest.raises(ValueError, match=message) as info:
            CauchyLMForCausalLM.from_pretrained(tmp_path)
        assert str(config) in str(info.value)


@pytest.mark.parametrize("arch", ["qwen2", "gpt2"])
def test_from_pretrained_of_a_plain_base_points_to_from_base(arch, tmp_path):
    folder = save_tiny_base(tmp_path, arch)
    for load in (CauchyLMForCausalLM.from_pretrained, CauchyLMConfig.from_pretrained):
        with pytest.raises(ValueError, match=rf"model_type '{arch}'.*from_base"):
            load(folder)


def test_missing_gpt2_backbone_weights_get_gpt2s_own_init(tmp_path):
    """GPT-2 draws c_proj with std 0.02 / sqrt(2 n_layer), every other Conv1D with 0.02."""
    kw = {"hidden_size": 128, "intermediate_size": 256, "initializer_range": 0.02}
    model = CauchyLMForCausalLM.from_base(tiny_base_model("gpt2", **kw), num_token_id=299)
    model.save_pretrained(tmp_path / "causal")
    tiny_base_model("gpt2", **kw).save_pretrained(tmp_path / "base")
    dropped = ("c_proj.weight", "c_fc.weight")
    for name in ("causal", "base"):
        weights = tmp_path / name / "model.safetensors"
        state = load_file(weights)
        save_file({k: v for k, v in state.items() if not k.endswith(dropped)}, weights)
    again = CauchyLMForCausalLM.from_pretrained(tmp_path / "causal")
    reference = GPT2LMHeadModel.from_pretrained(tmp_path / "base")  # transformers' own loading
    saved = model.state_dict()
    n_layer = 2
    for name, t in again.backbone.named_parameters():
        if name.endswith(dropped):
            ref = reference.transformer.get_parameter(name)
            std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else 0.02
            # The sample std of n >= 16384 normal draws is within 10% of the true one with
            # probability 1 - 1e-40 (relative standard error 1/sqrt(2n) < 0.6%).
            for drawn in (t, ref):
                assert abs(float(drawn.detach().std()) / std - 1) < 0.1, name
        else:
            assert torch.equal(t, saved[f"backbone.{name}"]), name


def test_qwen2_5_0_5b_sizes_match_the_documented_numbers():
    """Build the model with Qwen2.5-0.5B's shapes on the meta device (no memory) and count."""
    base = Qwen2Config(
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=151936,
        tie_word_embeddings=True,
    )
    with torch.device("meta"):
        model = CauchyLMForCausalLM(CauchyLMConfig(base_config=base, num_token_id=151665))
    state = model.state_dict()
    backbone = sum(t.numel() for n, t in state.items() if n.startswith("backbone."))
    heads = sum(t.numel() for n, t in state.items() if not n.startswith("backbone."))
    w_cls = state["action.classifier.weight"].numel()
    assert backbone == 494_032_768  # Qwen2.5-0.5B's 494 M parameters (tied head counted once)
    assert w_cls == 151936 * 896
    assert math.isclose(w_cls * 4 / 1e6, 544.5, abs_tol=0.05)  # MB, float32
    assert math.isclose(heads * 4 / 1e6, 551.6, abs_tol=0.05)  # the heads-only file
    assert math.isclose((backbone + heads) * 4 / 1e9, 2.53, abs_tol=0.005)  # full, float32
    assert math.isclose((backbone * 2 + heads * 4) / 1e9, 1.54, abs_tol=0.005)  # bf16 backbone


OLD = Path(__file__).parent / "data" / "checkpoint_0.1.0.dev0"


def _reference_outputs(model):
    ref = load_file(str(OLD / "reference.safetensors"))
    with torch.no_grad():
        out = model.eval()(ref["input_ids"], numeric_values=ref["numeric_values"], use_cache=False)
    return ref, out


@pytest.mark.parametrize("how", ["full", "heads"])
def test_checkpoints_of_an_earlier_release_load_and_give_its_outputs(how):
    """Folders written by commit e59a7d1 (see the folder's README) load with today's code."""
    if how == "full":
        model = CauchyLMForCausalLM.from_pretrained(OLD / "full")
    else:
        base = AutoModelForCausalLM.from_pretrained(OLD / "base")
        model = CauchyLMForCausalLM.from_heads(OLD / "heads", base)
    assert float(model.numeric_embedding.num_token_delta.detach().abs().sum()) > 0  # loaded
    ref, out = _reference_outputs(model)
    for name in ("loc_S", "scale_S", "loc_Y", "scale_Y"):
        torch.testing.assert_close(getattr(out, name), ref[name], rtol=1e-5, atol=1e-5)
