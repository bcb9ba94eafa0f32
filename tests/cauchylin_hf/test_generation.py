"""Generation: KV cache, every mode, numbers fed back and written, left padding, stopping, draws."""

from __future__ import annotations

import copy
import doctest
import math

import pytest
import torch
from cauchylin_hf import generation
from cauchylin_hf.batch import resolve_pad_token_id
from cauchylin_hf.generation import generate, position_ids_from_mask
from cauchylin_hf.model import CauchyLMForCausalLM
from cauchylin_hf.numbers import format_number
from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
from cauchylin_hf.tokenizer import NumericTokenizer

from cauchylin.nn import MODES
from cauchylin.value_space import from_value_space

VOCAB = 300
NUM = VOCAB  # the first spare row
ARCHS = ["qwen2", "llama", "gpt2"]


def make_model(arch: str = "qwen2", seed: int = 0) -> CauchyLMForCausalLM:
    base = tiny_base_model(arch, vocab_size=VOCAB, spare_rows=1, seed=seed)
    torch.manual_seed(seed)  # the heads' random init: the same model whatever ran before
    return CauchyLMForCausalLM.from_base(base, num_token_id=NUM)


@pytest.fixture(scope="module")
def models():
    return {arch: make_model(arch) for arch in ARCHS}


@pytest.fixture(scope="module")
def ntok():
    return NumericTokenizer(tiny_tokenizer(VOCAB), num_token_id=NUM)


def prompts(batch: int = 3, length: int = 6, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (batch, length), generator=g)
    ids[:, 2] = NUM
    values = torch.zeros(batch, length)
    values[:, 2] = torch.tensor([1.5, -20.0, 300.0])[:batch]
    return ids, values


def left_pad(rows, values):
    """Left-pad a list of 1-D id tensors (and their values) into a batch."""
    n = max(r.numel() for r in rows)
    ids = torch.zeros(len(rows), n, dtype=torch.long)
    vals = torch.zeros(len(rows), n)
    mask = torch.zeros(len(rows), n, dtype=torch.long)
    for i, (r, v) in enumerate(zip(rows, values, strict=True)):
        ids[i, n - r.numel() :] = r
        vals[i, n - r.numel() :] = v
        mask[i, n - r.numel() :] = 1
    return ids, vals, mask


def test_docstring_examples():
    result = doctest.testmod(generation, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


def test_position_ids_from_mask():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert position_ids_from_mask(mask)[:, 2:].tolist() == [[0, 1, 2], [2, 3, 4]]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("mode", ["standard", "sampling", "compatible"])
def test_cached_equals_uncached(models, arch, mode):
    model = models[arch]
    ids, values = prompts()
    kw = dict(mode=mode, max_new_tokens=8, eos_token_id=[], seed=3)
    a = generate(model, ids, values, use_cache=True, **kw)
    b = generate(model, ids, values, use_cache=False, **kw)
    assert torch.equal(a.sequences, b.sequences)
    torch.testing.assert_close(a.numeric_values, b.numeric_values, rtol=1e-4, atol=1e-4)
    assert a.new_tokens.shape == (3, 8)


def test_cache_runs_one_token_per_step(models, monkeypatch):
    """One prefill, then one token per step, through the inner encode that trusts its inputs
    (the prompt was checked once): the public, checking ``encode`` is not re-entered."""
    model = models["qwen2"]
    lengths, public = [], []
    encode = model.encode_checked

    def spy(input_ids=None, *args, **kwargs):
        lengths.append(input_ids.shape[1])
        return encode(input_ids, *args, **kwargs)

    monkeypatch.setattr(model, "encode_checked", spy)
    monkeypatch.setattr(model, "encode", lambda *a, **k: public.append(1))
    ids, values = prompts(length=6)
    generate(model, ids, values, max_new_tokens=5, eos_token_id=[])
    assert lengths == [6, 1, 1, 1, 1] and not public


@pytest.mark.parametrize("mode", ["causal", "standard"])
def test_step_distributions_match_model_forward(models, mode):
    model = models["llama"]
    ids, values = prompts()
    out = generate(
        model, ids, values, mode=mode, max_new_tokens=3, eos_token_id=[], return_distributions=True
    )
    for step in range(3):
        n = ids.shape[1] + step
        ref = model(out.sequences[:, :n], out.numeric_values[:, :n], mode=mode)
        torch.testing.assert_close(out.steps["loc_S"][:, step], ref.loc_S[:, -1])
        torch.testing.assert_close(out.steps["scale_S"][:, step], ref.scale_S[:, -1])
        torch.testing.assert_close(out.steps["loc_Y"][:, step], ref.loc_Y[:, -1])
        _, act = model.heads(
            model.encode(out.sequences[:, :n], out.numeric_values[:, :n])[0][:, -1], mode
        )
        assert torch.equal(out.sequences[:, n], act.predict())


def test_num_token_value_fed_back_and_written(ntok):
    model = make_model("qwen2")
    with torch.no_grad():
        model.action.classifier.bias[NUM] = 1e4  # <NUM> wins every step
    out = generate(
        model,
        "3 eggs and",
        tokenizer=ntok,
        mode="causal",
        max_new_tokens=3,
        eos_token_id=[],
        return_distributions=True,
    )
    assert out.new_tokens.tolist() == [[NUM] * 3]
    # the number written is the median of the value space: g^{-1}(loc_Y)
    expected = from_value_space(out.steps["loc_Y"].float(), model.config.value_space)
    torch.testing.assert_close(out.new_values, expected)
    # adjacent numbers are written apart, so that the text reads back as the same numbers
    assert out.new_texts == [" ".join(format_number(v) for v in out.new_values[0].tolist())]
    assert out.texts[0].startswith("3 eggs and")
    # the fed-back values are what the uncached run sees too
    again = generate(
        model, "3 eggs and", tokenizer=ntok, mode="causal", max_new_tokens=3, use_cache=False
    )
    torch.testing.assert_close(again.new_values, out.new_values, rtol=1e-5, atol=1e-5)
    # values change the next step: zero them and the next loc_Y differs
    ids = out.sequences[:, :-1]
    vals = out.numeric_values[:, :-1].clone()
    vals[:, -1] += 100.0
    moved = generate(model, ids, vals, mode="causal", max_new_tokens=1, return_distributions=True)
    assert not torch.allclose(moved.steps["loc_Y"][:, 0], out.steps["loc_Y"][:, -1])


@pytest.mark.parametrize("arch", ARCHS)
def test_left_padding_gives_same_continuation(models, arch):
    model = models[arch]
    g = torch.Generator().manual_seed(5)
    rows = [torch.randint(3, VOCAB, (n,), generator=g) for n in (7, 3, 5)]
    rows[0][1] = NUM
    vals = [torch.zeros(r.numel()) for r in rows]
    vals[0][1] = 42.0
    ids, values, mask = left_pad(rows, vals)
    batched = generate(model, ids, values, mask, mode="causal", max_new_tokens=6, eos_token_id=[])
    assert batched.attention_mask[:, : ids.shape[1]].equal(mask)
    for i, (r, v) in enumerate(zip(rows, vals, strict=True)):
        single = generate(model, r[None], v[None], mode="causal", max_new_tokens=6, eos_token_id=[])
        assert torch.equal(batched.new_tokens[i], single.new_tokens[0])
        torch.testing.assert_close(batched.new_values[i], single.new_values[0])


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_reproducible_with_seed(models, mode):
    model = models["qwen2"]
    ids, values = prompts()
    kw = dict(mode=mode, max_new_tokens=6, eos_token_id=[], temperature=0.9, top_k=50)
    a = generate(model, ids, values, seed=11, **kw)
    b = generate(model, ids, values, seed=11, **kw)
    assert torch.equal(a.sequences, b.sequences)
    assert torch.equal(a.numeric_values, b.numeric_values)
    assert a.new_tokens.shape == (3, 6) and a.finished.tolist() == [False] * 3


def test_sampling_seeds_differ(models):
    model = models["qwen2"]
    with torch.no_grad():
        model.action.b_noise.fill_(50.0)  # so that the draws move the argmax
    try:
        ids, values = prompts()
        a = generate(model, ids, values, mode="sampling", max_new_tokens=8, seed=1, eos_token_id=[])
        b = generate(model, ids, values, mode="sampling", max_new_tokens=8, seed=2, eos_token_id=[])
        assert not torch.equal(a.sequences, b.sequences)
    finally:
        with torch.no_grad():
            model.action.b_noise.fill_(model.action.b_noise_init)


def test_shared_individual_draw_is_shared_and_kept(models):
    model = models["gpt2"]
    C = model.action.causal_size
    ids, values = prompts(batch=2)
    eps = torch.rand(C, dtype=torch.float64).clamp(0.01, 0.99)
    out = generate(
        model,
        ids,
        values,
        mode="shared_individual",
        eps_seed=eps,
        max_new_tokens=4,
        eos_token_id=[],
        return_distributions=True,
    )
    assert torch.equal(out.eps_seed[0], out.eps_seed[1])
    assert torch.equal(out.eps_seed[0], eps)
    q = torch.tan(math.pi * (eps - 0.5)).float()
    expect = out.steps["loc_U"] + out.steps["scale_U"] * q  # every step, the same individual
    torch.testing.assert_close(out.steps["loc_U_prime"], expect, rtol=1e-4, atol=1e-3)
    # replaying the draw on one prompt alone gives that row's continuation
    alone = generate(
        model,
        ids[1:],
        values[1:],
        mode="shared_individual",
        eps_seed=eps,
        max_new_tokens=4,
        eos_token_id=[],
    )
    assert torch.equal(alone.new_tokens[0], out.new_tokens[1])
    a = generate(model, ids, values, mode="shared_individual", seed=1, max_new_tokens=1)
    b = generate(model, ids, values, mode="shared_individual", seed=2, max_new_tokens=1)
    assert not torch.equal(a.eps_seed, b.eps_seed)
    assert not torch.equal(a.eps_seed[0], a.eps_seed[1])  # drawn once per sequence


def test_shared_noise_draw_is_shared_and_kept(models):
    model = models["qwen2"]
    C = model.action.causal_size
    ids, values = prompts(batch=2)
    eps = torch.randn(C)
    out = generate(
        model,
        ids,
        values,
        mode="shared_noise",
        eps_noise=eps,
        max_new_tokens=4,
        eos_token_id=[],
        return_distributions=True,
    )
    assert torch.equal(out.eps_noise[0], out.eps_noise[1])
    noise = model.action.b_noise.detach().abs()
    torch.testing.assert_close(out.steps["loc_U_prime"], out.steps["loc_U"] + noise * eps)
    a = generate(model, ids, values, mode="shared_noise", seed=1, max_new_tokens=1)
    b = generate(model, ids, values, mode="shared_noise", seed=2, max_new_tokens=1)
    assert not torch.equal(a.eps_noise, b.eps_noise)


def test_per_row_eos_does_not_stop_the_others(models):
    model = models["qwen2"]
    for seed in range(20):  # a prompt whose row 0 makes a token no other row makes
        ids, values = prompts(seed=seed)
        free = generate(model, ids, values, mode="causal", max_new_tokens=6, eos_token_id=[])
        own = [t for t in free.new_tokens[0, :5].tolist() if t not in free.new_tokens[1:]]
        if own:
            break
    eos = own[0]
    out = generate(
        model, ids, values, mode="causal", max_new_tokens=6, eos_token_id=eos, tokenizer=None
    )
    first = int((free.new_tokens[0] == eos).nonzero()[0])
    assert out.finished.tolist() == [True, False, False]
    assert out.new_tokens.shape == (3, 6)
    assert torch.equal(out.new_tokens[1:], free.new_tokens[1:])
    pad = resolve_pad_token_id(
        None, model.generation_config, model.config, model.config.base_config, eos_token_id=[eos]
    )
    assert pad == 0  # the base config's pad id
    assert (out.new_tokens[0, first + 1 :] == pad).all()
    assert (out.attention_mask[0, ids.shape[1] + first + 1 :] == 0).all()


def test_stop_strings_and_all_finished(models, ntok):
    model = models["llama"]
    free = generate(
        model, ["ab", "cd"], tokenizer=ntok, mode="causal", max_new_tokens=8, eos_token_id=[]
    )
    text = free.new_texts[0]
    stop = text[2:4] if len(text) >= 4 else text
    out = generate(
        model,
        ["ab", "cd"],
        tokenizer=ntok,
        mode="causal",
        max_new_tokens=8,
        eos_token_id=[],
        stop_strings=stop,
    )
    assert out.finished[0]
    assert stop in out.new_texts[0] and len(out.new_texts[0]) <= len(text)
    both = generate(
        model,
        ["ab", "ab"],
        tokenizer=ntok,
        mode="causal",
        max_new_tokens=8,
        eos_token_id=[],
        stop_strings=[stop],
    )
    assert both.finished.all() and both.new_tokens.shape[1] < 8


def test_errors(models, ntok):
    model = models["qwen2"]
    ids, _ = prompts()
    with pytest.raises(ValueError, match="unknown mode"):
        generate(model, ids, mode="greedy")
    with pytest.raises(ValueError, match="tokenizer"):
        generate(model, ids, stop_strings="x")
    with pytest.raises(ValueError, match="tokenizer"):
        generate(model, "text prompt")
    with pytest.raises(ValueError, match="eps_seed"):
        generate(model, ids, mode="shared_individual", eps_seed=torch.full((3,), 0.5))
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(model, ids, max_new_tokens=-1)
    with pytest.raises(ValueError, match="top_k"):
        generate(model, ids, mode="compatible", top_k=0)
    with pytest.raises(ValueError, match="seed or generator"):
        generate(model, ids, seed=1, generator=torch.Generator())


def test_out_of_vocabulary_ids_are_refused_by_name(models):
    model = models["qwen2"]
    rows = VOCAB + 1
    for bad in (rows, rows + 50, -1):
        ids = torch.tensor([[5, bad, 7]])
        with pytest.raises(ValueError, match=rf"outside the model's {rows} embedding rows.*{bad}"):
            generate(model, ids, max_new_tokens=1, eos_token_id=[])
    assert generate(model, torch.tensor([[5, rows - 1]]), max_new_tokens=1).sequences.shape[1] == 3


def test_right_padded_prompts_are_refused(models, caplog):
    """A right-padded row would take its first decision at a pad position."""
    model = models["qwen2"]
    rows = [torch.tensor([5, 6, 7, 8]), torch.tensor([9, 10])]
    ids, values, left = left_pad(rows, [torch.zeros(4), torch.zeros(2)])
    right = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    right_ids = torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0]])
    with pytest.raises(ValueError, match=r"ends in padding in rows \[1\].*on the left"):
        generate(model, right_ids, attention_mask=right, max_new_tokens=2, eos_token_id=[])
    out = generate(model, ids, values, left, mode="causal", max_new_tokens=2, eos_token_id=[])
    alone = generate(model, rows[1][None], mode="causal", max_new_tokens=2, eos_token_id=[])
    assert torch.equal(out.new_tokens[1], alone.new_tokens[0])
    # Without a mask, a pad id at the end only draws transformers' warning.
    with caplog.at_level("WARNING", logger="cauchylin_hf.generation"):
        generate(model, right_ids, mode="causal", max_new_tokens=1, eos_token_id=[])
    assert "right-padding was detected" in caplog.text


def test_generation_takes_its_decisions_from_the_mode_table(models, monkeypatch):
    """One change to a mode's record changes generation: the token choice has no other path."""
    from dataclasses import replace

    from cauchylin.nn import modes

    model = copy.deepcopy(models["qwen2"])
    with torch.no_grad():  # noise of uneven size: standard and causal decide differently
        model.action.b_noise.copy_(torch.rand(32, generator=torch.Generator().manual_seed(0)) * 50)
    ids, values = prompts(seed=1)

    def run(mode, **kw):
        kw.setdefault("temperature", 1.0)
        out = generate(model, ids, values, mode=mode, max_new_tokens=6, eos_token_id=[], **kw)
        return out.sequences

    causal, standard = run("causal"), run("standard")
    compatible = run("compatible", seed=3)
    assert not torch.equal(causal, standard)  # the patches below are visible
    assert not torch.equal(causal, compatible)
    table = modes.MODE_TABLE
    original = table["causal"]
    # the decision rule: causal forming U' by the standard rule generates what standard does
    monkeypatch.setitem(table, "causal", replace(original, rule=table["standard"].rule))
    assert torch.equal(run("causal"), standard)
    # the token rule: causal sampling softmax(loc_S / T) generates what compatible does (the
    # compatible mode's U' differs only in its scale, which softmax(loc_S / T) never reads)
    monkeypatch.setitem(table, "causal", replace(original, samples_logits=True))
    assert torch.equal(run("causal", seed=3), compatible)
    monkeypatch.setitem(table, "causal", original)
    assert torch.equal(run("causal"), causal)


def test_generation_past_a_learned_position_context_is_refused_up_front():
    """GPT-2 has no position beyond its table: an IndexError deep inside, before the fix."""
    model = make_model("gpt2")
    limit = model.config.max_position_embeddings
    assert model.position_limit == limit
    ids = torch.randint(3, VOCAB, (1, limit - 4))
    out = generate(model, ids, max_new_tokens=4, eos_token_id=[], mode="causal")
    assert out.sequences.shape[1] == limit
    with pytest.raises(ValueError, match=r"max_new_tokens=5 .* at most 4 new tokens"):
        generate(model, ids, max_new_tokens=5, eos_token_id=[])
    with pytest.raises(ValueError, match="learned positions"):
        model(torch.randint(3, VOCAB, (1, limit + 1)))


def test_generation_past_a_rope_context_warns_like_transformers(models, caplog):
    model = models["qwen2"]
    context = model.config.max_position_embeddings
    ids = torch.randint(3, VOCAB, (1, context - 2))
    with caplog.at_level("WARNING", logger="cauchylin_hf.generation"):
        out = generate(model, ids, max_new_tokens=4, eos_token_id=[], mode="causal")
    assert out.sequences.shape[1] == context + 2
    assert f"beyond the base's context of {context}" in caplog.text


def test_a_generation_longer_than_memory_is_refused_up_front(models):
    with pytest.raises(ValueError, match=r"max_new_tokens=1000000000000: .* GiB .* at most about"):
        generate(models["qwen2"], torch.tensor([[5, 6, 7]]), max_new_tokens=10**12)


# ------------------------------------------------------- refused once, before the first step


@pytest.mark.parametrize("name", ["threshold", "b_noise"])
def test_nan_heads_are_refused_once_before_the_first_step(ntok, monkeypatch, name):
    """A training that diverged leaves NaN heads in memory (loading refuses them): generate
    chose token 0 at every step."""
    model = make_model()
    with torch.no_grad():
        getattr(model.action, name).fill_(float("nan"))
    steps = []
    real = CauchyLMForCausalLM.step
    monkeypatch.setattr(
        CauchyLMForCausalLM, "step", lambda *a, **k: steps.append(1) or real(*a, **k)
    )
    for mode in ("causal", "standard", "sampling"):
        with pytest.raises(ValueError, match=rf"the weight action\.{name} holds NaN or inf"):
            generate(model, "area 3", tokenizer=ntok, mode=mode, max_new_tokens=5, seed=0)
    assert steps == []


def test_a_temperature_whose_noise_scale_overflows_names_the_temperature(models, ntok):
    """T = 1e39 failed at the first step with "shift must be finite" (an internal tensor)."""
    model = models["qwen2"]
    largest = float(model.action.b_noise.detach().abs().max())
    refused = r"temperature=\S+ is too large: T and the noise scales it multiplies"
    for t in (1e39, 3.4e38 / largest * 2):
        with pytest.raises(ValueError, match=refused):
            generate(model, "3 eggs", tokenizer=ntok, mode="sampling", temperature=t, seed=0)
    # the causal mode and the compatible mode's softmax temperature never scale the noise
    for mode in ("causal", "compatible"):
        out = generate(model, "3 eggs", tokenizer=ntok, mode=mode, temperature=1e39, seed=0)
        assert out.sequences.shape[0] == 1
    # T |b_noise| fits, but scale_S = |W_cls| (scale_U + T |b_noise|) would not
    wide = make_model()
    with torch.no_grad():
        wide.action.classifier.weight.mul_(1e6)
    with torch.no_grad():
        spread = float((wide.action.classifier.weight.abs() @ wide.action.b_noise.abs()).max())
    t = 3.4e38 / spread * 4
    assert t * largest < 3.4e38
    with pytest.raises(ValueError, match=refused):
        generate(wide, "3 eggs", tokenizer=ntok, mode="standard", temperature=t, seed=0)
    ok = generate(
        wide,
        "3 eggs",
        tokenizer=ntok,
        mode="standard",
        temperature=t / 16,
        seed=0,
        return_distributions=True,
        max_new_tokens=2,
    )
    assert bool(ok.steps["scale_S"].isfinite().all())


@pytest.mark.parametrize("seed", [2**64, 2**70, -1, 1.5, "1", True])
def test_a_seed_outside_a_generators_range_names_the_seed(models, ntok, seed):
    """2**70 was "Overflow when unpacking long long"."""
    with pytest.raises(ValueError, match=r"seed must be an int in \[0, 2\*\*64\)"):
        generate(models["qwen2"], "3 eggs", tokenizer=ntok, seed=seed, max_new_tokens=2)
    out = generate(models["qwen2"], "3 eggs", tokenizer=ntok, seed=2**64 - 1, max_new_tokens=2)
    assert out.sequences.shape[0] == 1


@pytest.mark.parametrize("top_p", ["0.9", b"0.9", True])
def test_a_top_p_that_is_not_a_number_is_refused_before_the_loop(models, ntok, top_p):
    """top_p="0.9" passed the check (float("0.9") works) and failed later with a TypeError."""
    with pytest.raises(ValueError, match=r"top_p must be None or a number in \(0, 1\]"):
        generate(models["qwen2"], "3 eggs", tokenizer=ntok, mode="compatible", top_p=top_p)


# ------------------------------------------------------------------- the prompt-batch step


def test_prepare_prompts_pads_text_on_the_left_and_checks_once(models, ntok):
    model = models["qwen2"]
    batch = generation.prepare_prompts(model, ["ab 2.5", "abcd"], tokenizer=ntok)
    enc = [ntok(t) for t in ("ab 2.5", "abcd")]
    n = [len(e["input_ids"]) for e in enc]
    L = max(n)
    assert batch.input_ids.shape == (2, L) and batch.lengths.tolist() == n
    for row, e in enumerate(enc):  # each row: its own encoding, left-padded
        assert batch.input_ids[row, L - n[row] :].tolist() == e["input_ids"]
        assert batch.numeric_values[row, L - n[row] :].tolist() == e["numeric_values"]
        assert batch.attention_mask[row].tolist() == [0] * (L - n[row]) + [1] * n[row]
    assert 2.5 in batch.numeric_values[0].tolist() and batch.mask_given
    ids = torch.tensor([5, 6, 7])  # one id row: a batch of one, values 0, mask 1
    one = generation.prepare_prompts(model, ids)
    assert one.input_ids.tolist() == [[5, 6, 7]] and not one.mask_given
    assert one.numeric_values.tolist() == [[0.0] * 3] and one.attention_mask.tolist() == [[1] * 3]
    bad = torch.tensor([[0.0, float("nan"), 0.0]])  # checked here: the loop trusts the values
    with pytest.raises(ValueError, match="numeric_values"):
        generation.prepare_prompts(model, ids[None], bad)
    with pytest.raises(ValueError, match="pad prompts on the left"):
        generation.prepare_prompts(model, ids[None], attention_mask=torch.tensor([[1, 1, 0]]))
    with pytest.raises(ValueError, match="at least one token"):
        generation.prepare_prompts(model, ids[None], attention_mask=torch.tensor([[0, 0, 0]]))
    with pytest.raises(ValueError, match="must have the shape of input_ids"):
        generation.prepare_prompts(model, ids[None], torch.zeros(1, 4))


def test_a_prompt_as_long_as_the_context_is_refused_by_name(models, ntok):
    """One rule for every reader of a prompt's next token: before, generate on a RoPE base only
    warned (and ran past the context) where predict refused."""
    from cauchylin_hf.predict import predict_values

    model = models["qwen2"]  # RoPE: a continuation past the context only warns
    context = model.config.max_position_embeddings
    ids = torch.randint(3, VOCAB, (3, context))
    mask = torch.ones_like(ids)
    mask[0, :-3] = 0  # row 0: 3 tokens; rows 1 and 2 fill the context
    with pytest.raises(ValueError) as err:
        generate(model, ids, attention_mask=mask, max_new_tokens=1, eos_token_id=[])
    assert str(err.value).startswith(
        f"prompts[1] is {context} tokens long: the model's context of {context} positions"
    )
    assert "2 of 3 prompts" in str(err.value)
    out = generate(model, ids[:, 1:], attention_mask=mask[:, 1:], max_new_tokens=1, eos_token_id=[])
    assert out.sequences.shape == (3, context)  # one token shorter: room for one more
    long = " ".join(["7 eggs"] * context)
    with pytest.raises(ValueError, match=r"prompts\[1\] is \d+ tokens long: the model's context"):
        generate(model, ["3 eggs", long], tokenizer=ntok, max_new_tokens=1)
    with pytest.raises(ValueError, match=r"prompts\[1\] is \d+ tokens long: the model's context"):
        predict_values(model, ntok, ["3 eggs", long], batch_size=1)
