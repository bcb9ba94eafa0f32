"""The synthetic numeric corpus and its byte-level BPE tokenizer."""

import math
import time

import pytest
from cauchylin_hf.app.corpus import (
    TEMPLATES,
    CorpusSplits,
    generate_sentences,
    make_splits,
    train_corpus_tokenizer,
)
from cauchylin_hf.numbers import find_numbers
from cauchylin_hf.tokenizer import NumericTokenizer
from hypothesis import given
from hypothesis import strategies as st
from transformers import PreTrainedTokenizerFast

# ---------------------------------------------------------------- sentences


def test_deterministic_under_seed():
    a = generate_sentences(300, seed=7)
    assert a == generate_sentences(300, seed=7)
    assert a != generate_sentences(300, seed=8)
    assert generate_sentences(100, seed=7) == a[:100]
    assert len(set(a)) > 250  # varied, not a handful of repeats
    assert generate_sentences(0) == []


def test_every_template_is_used_and_well_formed():
    for name, make in TEMPLATES.items():
        sentences = generate_sentences(50, seed=1, templates=[name])
        assert len(sentences) == 50
        for s in sentences:
            assert s.endswith(".") and (s[0].isupper() or s[0].isdigit()), (name, s)
            numbers = find_numbers(s)
            assert numbers, (name, s)
            assert all(math.isfinite(n.value) for n in numbers)
            assert "  " not in s
        assert callable(make)


def _close(a, b):
    return abs(a - b) <= 1e-3 * max(1.0, abs(a), abs(b))


# relation each template states between its numbers (values in order of appearance)
RELATIONS = {
    "eggs": lambda v: _close(v[0] * v[1], v[2]),
    "price_change": lambda v: _close(abs(v[1] - v[0]), v[2]),
    "buy_more": lambda v: _close(v[0] + v[1], v[2]),
    "give_away": lambda v: _close(v[0] - v[1], v[2]),
    "area": lambda v: _close(v[0] * v[1], v[2]),
    "conversion": lambda v: (
        _close(v[1] / v[0], 1000) or _close(v[1] / v[0], 60) or _close(v[1] / v[0], 100)
    ),
    "temperature": lambda v: _close(v[1] - v[0], v[2]),
    "speed": lambda v: _close(v[0] * v[2], v[1]),
    "average": lambda v: _close((v[0] + v[1]) / 2, v[2]),
    "discount": lambda v: _close(v[0] * (100 - v[1]) / 100, v[2]),
    "unit_price": lambda v: _close(v[0] * v[2], v[1]),
    "total": lambda v: _close(v[0] + v[1], v[2]),
    "measurement": lambda v: all(x > 0 for x in v),
}


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_relations_hold(name):
    assert set(RELATIONS) == set(TEMPLATES)
    for s in generate_sentences(200, seed=2, templates=[name]):
        v = [n.value for n in find_numbers(s)]
        assert RELATIONS[name](v), s


def test_examples_from_the_brief_shape():
    eggs = generate_sentences(5, seed=0, templates=["eggs"])
    assert all(" boxes of " in s and s.endswith(" eggs.") for s in eggs)
    prices = generate_sentences(20, seed=0, templates=["price_change"])
    assert all(s.startswith("The price ") and " dollars, " in s for s in prices)
    # prices are written with two decimals, e.g. 5.00
    assert all(len(n.text.split(".")[1]) == 2 for s in prices for n in find_numbers(s))
    temps = generate_sentences(300, seed=0, templates=["temperature"])
    assert any(n.value < 0 for s in temps for n in find_numbers(s))  # negative numbers occur


def test_splits_disjoint_and_deterministic():
    splits = make_splits(500, 100, seed=4)
    assert isinstance(splits, CorpusSplits)
    assert len(splits.train) == 500 and len(splits.heldout) == 100
    assert len(set(splits.heldout)) == 100
    assert not set(splits.train) & set(splits.heldout)
    assert splits == make_splits(500, 100, seed=4)
    assert splits != make_splits(500, 100, seed=5)
    assert make_splits(10, 0).heldout == []


def test_corpus_errors():
    with pytest.raises(ValueError, match="n"):
        generate_sentences(-1)
    with pytest.raises(ValueError, match="templates"):
        generate_sentences(3, templates=["nope"])
    with pytest.raises(ValueError, match="templates"):
        generate_sentences(3, templates="eggs")
    with pytest.raises(ValueError, match="n_train"):
        make_splits(0, 10)
    with pytest.raises(ValueError, match="n_heldout"):
        make_splits(10, -1)
    with pytest.raises(ValueError, match="n_heldout"):
        make_splits(10, 100, templates=["speed"])  # only 42 distinct speed sentences


# ---------------------------------------------------------------- tokenizer


@pytest.fixture(scope="module")
def corpus_tokenizer():
    return train_corpus_tokenizer(vocab_size=1024)


def test_tokenizer_trains_fast_and_small():
    texts = make_splits(5000, 0, seed=0).train
    start = time.perf_counter()
    tok = train_corpus_tokenizer(texts, vocab_size=2048)
    assert time.perf_counter() - start < 5.0
    assert isinstance(tok, PreTrainedTokenizerFast)
    assert 256 + 4 < len(tok) <= 2048
    small = train_corpus_tokenizer(texts, vocab_size=300)
    assert len(small) == 300


def test_tokenizer_special_tokens(corpus_tokenizer):
    tok = corpus_tokenizer
    assert tok.convert_ids_to_tokens([0, 1, 2, 3]) == ["<pad>", "<bos>", "<eos>", "<NUM>"]
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    ids = tok("3 boxes")["input_ids"]
    assert ids[0] == 1 and 2 not in ids
    assert tok("3 boxes", add_special_tokens=False)["input_ids"] == ids[1:]
    assert tok.padding_side == "right"
    no_num = train_corpus_tokenizer(vocab_size=512, num_token=None)
    assert "<NUM>" not in no_num.get_vocab()


def test_tokenizer_is_deterministic():
    texts = make_splits(400, 0, seed=9).train
    a = train_corpus_tokenizer(texts, vocab_size=600)
    b = train_corpus_tokenizer(texts, vocab_size=600)
    assert a.get_vocab() == b.get_vocab()
    assert a(texts[:20])["input_ids"] == b(texts[:20])["input_ids"]


def test_words_of_the_corpus_are_compact(corpus_tokenizer):
    """Merges are learned from the text between numbers: frequent words become single tokens."""
    ntok = NumericTokenizer(corpus_tokenizer)
    heldout = make_splits(2000, 200, seed=0).heldout
    enc = ntok(heldout, add_special_tokens=False)
    chars = sum(len(s) for s in heldout)
    tokens = sum(len(x) for x in enc["input_ids"])
    assert chars / tokens > 3.0  # far better than bytes
    assert "Ġeggs" in corpus_tokenizer.get_vocab()
    # no merge learned over digits: digits stay single bytes
    assert all(not (len(t) > 1 and t.isdigit()) for t in corpus_tokenizer.get_vocab())


def test_heldout_round_trip(corpus_tokenizer):
    ntok = NumericTokenizer(corpus_tokenizer)
    heldout = make_splits(2000, 200, seed=0).heldout
    enc = ntok(heldout, padding=True, return_tensors="pt", return_number_texts=True)
    out = ntok.batch_decode(
        enc["input_ids"],
        enc["numeric_values"],
        number_texts=enc["number_texts"],
        skip_special_tokens=True,
    )
    assert out == heldout
    counts = (enc["input_ids"] == ntok.num_token_id).sum(1).tolist()
    assert counts == [len(find_numbers(s)) for s in heldout]


@given(st.text())
def test_tokenizer_round_trips_any_text(text):
    tok = _SHARED_TOKENIZER
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text  # exact, even for text that spells "<bos>"
    if not any(t in text for t in [*tok.all_special_tokens, "<NUM>"]):
        assert tok.decode(tok(text)["input_ids"], skip_special_tokens=True) == text


def test_tokenizer_errors():
    with pytest.raises(ValueError, match="vocab_size"):
        train_corpus_tokenizer(vocab_size=100)
    with pytest.raises(ValueError, match="vocab_size"):
        train_corpus_tokenizer(vocab_size=512.0)
    with pytest.raises(ValueError, match="texts"):
        train_corpus_tokenizer([])
    with pytest.raises(ValueError, match="texts"):
        train_corpus_tokenizer(["12", "3.5"])  # numbers only: nothing to learn
    with pytest.raises(ValueError, match=r"texts\[1\]"):
        train_corpus_tokenizer(["ok", 3])


_SHARED_TOKENIZER = train_corpus_tokenizer(vocab_size=512)


def test_a_very_long_word_trains_in_time_linear_in_its_length():
    """One 3 MB word in a JSONL file kept `train --from-config` in tokenizer training for over
    329 s and 535 MB, growing (BPE training is quadratic in the length of a word): four times
    the length now takes about four times as long (quadratic: sixteen), on the least of three
    runs; the word still round-trips."""
    import random

    r = random.Random(0)
    base = [f"x {i} -> y {2 * i}, the cat sat on the mat." for i in range(40)]
    words = {n: "".join(r.choice("abcdefghij") for _ in range(n)) for n in (30_000, 120_000)}

    def seconds(word):
        best = math.inf
        for _ in range(3):
            start = time.perf_counter()
            tok = train_corpus_tokenizer([*base, f"x 3 -> {word} 6."], vocab_size=400)
            best = min(best, time.perf_counter() - start)
        return best, tok

    (short, _), (long, tok) = seconds(words[30_000]), seconds(words[120_000])
    assert long < 8 * short + 0.1, (short, long)
    ids = tok(words[120_000], add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == words[120_000]
