"""The batched encoding gives what the per-text encoding gave: ids, values, number texts, decimals.

``data/encoding_reference.json`` was written by ``data/make_encoding_reference.py`` on the per-text
code of commit 76dca92 (before the numbers, the segments and the decimals were handled in batches):
tricky spellings, demo sentences and table rows, through six tokenizers (byte-level BPE with and
without merges, special tokens before and after, an NFC normalizer, an explicit ``<NUM>`` id
beyond the vocabulary) with and without special tokens and truncated on either side.

The file was written again when digits glued to a letter became part of the word (``H2O``,
``Qwen2.5``, ``0x1F``, ``é3`` hold no number since): the entries of those four texts (their ids,
numbers and the fields of the decimals) changed, and every other entry is the per-text one.
"""

import json
from pathlib import Path

import pytest
from cauchylin_hf.numbers import find_numbers, split_numbers, split_numbers_batch
from cauchylin_hf.precision import NumberPrecision, needed_decimals, needed_decimals_batch
from hypothesis import assume, given
from hypothesis import strategies as st

from .data.make_encoding_reference import encode, fingerprint, tokenizers
from .test_numbers import AFTER, number_strings, same_float

REFERENCE = json.loads((Path(__file__).parent / "data" / "encoding_reference.json").read_text())
NTOKS = tokenizers()


@pytest.mark.parametrize("name", sorted(REFERENCE["encodings"]))
@pytest.mark.parametrize("setting", sorted(REFERENCE["settings"]))
def test_encodings_equal_the_per_text_reference(name, setting):
    ntok = NTOKS[name]
    assert fingerprint(ntok) == REFERENCE["fingerprints"][name], "the test tokenizer changed"
    got = encode(ntok, REFERENCE["texts"], REFERENCE["settings"][setting])
    want = REFERENCE["encodings"][name][setting]
    for key in ("input_ids", "numeric_values", "number_texts"):
        for i, (a, b) in enumerate(zip(got[key], want[key], strict=True)):
            assert a == b, (key, REFERENCE["texts"][i])


def test_single_texts_equal_the_batch():
    ntok = NTOKS["corpus"]
    batch = ntok(REFERENCE["texts"], return_number_texts=True)
    for i, text in enumerate(REFERENCE["texts"][:40]):
        one = ntok(text, return_number_texts=True)
        assert {k: one[k] for k in one} == {k: batch[k][i] for k in batch}


def test_numbers_and_decimals_equal_the_reference():
    texts = [*REFERENCE["texts"], " ".join(REFERENCE["decimal_spellings"])]
    split = split_numbers_batch(texts)
    spellings = [s for parts in split for s in parts.spellings]
    values = [v for parts in split for v in parts.values]
    assert [[s, v] for s, v in zip(spellings, values, strict=True)] == [
        [s, v] for s, v, _ in REFERENCE["numbers"]
    ]
    assert needed_decimals_batch(spellings, values) == [d for _, _, d in REFERENCE["numbers"]]
    assert NumberPrecision.from_texts(REFERENCE["texts"]).to_dict() == REFERENCE["precision"]


def test_batched_decimals_equal_the_one_number_rule():
    """The batch (with its shortcuts) and ``needed_decimals`` agree number by number."""
    text = " ".join(REFERENCE["decimal_spellings"])
    spans = find_numbers(text)
    got = needed_decimals_batch([s.text for s in spans], [s.value for s in spans])
    assert got == [needed_decimals(s) for s in spans]


@pytest.mark.parametrize("name", ["corpus", "gpt2", "bos_eos", "qwen2", "tiny_spare"])
@given(
    st.lists(
        st.lists(st.tuples(st.text(max_size=8), number_strings(allow_overflow=True), AFTER)).map(
            lambda parts: "".join(c + n + a for c, n, a in parts)
        ),
        min_size=1,
        max_size=6,
    )
)
def test_batch_encoding_is_the_wrapped_tokenizer_between_the_numbers(name, texts):
    """Any batch: between the ``<NUM>`` ids stand the wrapped tokenizer's own ids of each text
    segment (its Hugging Face call, one segment at a time), at the ``<NUM>`` ids the values and
    spellings ``find_numbers`` reads."""
    ntok = NTOKS[name]
    # (special strings written in the text are the module docstring's case, tested apart)
    specials = [ntok.num_token, *ntok.tokenizer.all_special_tokens]
    texts = [t for t in texts if not any(s in t for s in specials)]
    assume(texts)
    enc = ntok(texts, add_special_tokens=False, return_number_texts=True)
    for text, ids, values, spellings in zip(
        texts, enc["input_ids"], enc["numeric_values"], enc["number_texts"], strict=True
    ):
        segments, numbers = split_numbers(text)
        want_ids: list[int] = []
        want_values: list[float] = []
        for j, segment in enumerate(segments):
            if segment:
                piece = ntok.tokenizer(segment, add_special_tokens=False)["input_ids"]
                want_ids += piece
                want_values += [0.0] * len(piece)
            if j < len(numbers):
                want_ids.append(ntok.num_token_id)
                want_values.append(numbers[j].value)
        assert ids == want_ids and spellings == [n.text for n in numbers]
        assert all(same_float(a, b) for a, b in zip(values, want_values, strict=True))
