"""NumericTokenizer: round trips, values, batching, padding, truncation, ids policy, errors."""

import math
import unicodedata

import numpy as np
import pytest
import torch
from cauchylin_hf.app.corpus import make_splits, train_corpus_tokenizer
from cauchylin_hf.numbers import find_numbers
from cauchylin_hf.tokenizer import NUMERIC_TOKENIZER_CONFIG, NumericTokenizer
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import GPT2TokenizerFast, PreTrainedTokenizerFast, Qwen2Tokenizer

from .test_numbers import AFTER, BEFORE, NO_DIGIT_TEXT, np_float32, number_strings, same_float

_TRAIN_TEXT = [
    *make_splits(300, 0, seed=3).train,
    "def f(x):\n    return x ** 2  # squares\n\tTabs\r\n",
    "Grüße aus Köln — naïve café, 東京タワー, Привет мир, مرحبا, 🙂🚀",
    "The quick brown fox jumps over the lazy dog. THE END!!! ??? ... $$$ %%%",
]
_JSON: dict[str, str] = {}


def _byte_level_json(name):
    """Train (once) a small byte-level BPE on mixed text; return its JSON for fresh copies."""
    if name not in _JSON:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        specials = ["<|endoftext|>"] if name == "gpt2" else ["<s>", "</s>", "<pad>"]
        trainer = trainers.BpeTrainer(
            vocab_size=400,
            special_tokens=specials,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tok.train_from_iterator(_TRAIN_TEXT, trainer=trainer)
        if name == "bos_eos":
            tok.post_processor = processors.TemplateProcessing(
                single="<s> $A </s>",
                special_tokens=[("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))],
            )
        _JSON[name] = tok.to_str()
    return _JSON[name]


def gpt2_style():
    """A GPT-2-style tokenizer: byte-level BPE, no special tokens added, no pad token."""
    t = Tokenizer.from_str(_byte_level_json("gpt2"))
    return GPT2TokenizerFast(
        tokenizer_object=t,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )


def bos_eos_style():
    """A tokenizer whose template adds <s> before and </s> after the text."""
    t = Tokenizer.from_str(_byte_level_json("bos_eos"))
    return PreTrainedTokenizerFast(
        tokenizer_object=t,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        clean_up_tokenization_spaces=False,
    )


def qwen2_style():
    """Qwen2's tokenizer class (byte-level BPE with an NFC normalizer) on a byte-only vocabulary."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    return Qwen2Tokenizer(vocab={c: i for i, c in enumerate(alphabet)}, merges=[])


def corpus_style(num_token="<NUM>"):
    return train_corpus_tokenizer(vocab_size=512, num_token=num_token)


# Shared wrappers for the property tests (Hypothesis cannot use function-scoped fixtures).
NTOKS = {
    "corpus": NumericTokenizer(corpus_style()),
    "gpt2": NumericTokenizer(gpt2_style()),
    "bos_eos": NumericTokenizer(bos_eos_style()),
    "qwen2": NumericTokenizer(qwen2_style()),
}


def num_positions(ntok, ids):
    return [i for i, t in enumerate(ids) if t == ntok.num_token_id]


def has_special_strings(ntok, text):
    """The text spells a special token of the tokenizer (its named ones or an added special one)."""
    added = [
        t.content
        for t in ntok.tokenizer.added_tokens_decoder.values()
        if t.special and t.content != ntok.num_token  # a literal <NUM> stays text
    ]
    return any(t in text for t in [*ntok.tokenizer.all_special_tokens, *added])


def check_encoding(ntok, text, expected_texts):
    """Encode; check values, alignment, exact and canonical round trips."""
    # without special tokens on either side the round trip holds for every text (even one that
    # spells "<bos>" or "<NUM>")
    raw = ntok(text, add_special_tokens=False, return_number_texts=True)
    assert (
        ntok.decode(raw["input_ids"], raw["numeric_values"], number_texts=raw["number_texts"])
        == text
    )
    if has_special_strings(ntok, text):
        return
    enc = ntok(text, return_number_texts=True)
    ids, vals = enc["input_ids"], enc["numeric_values"]
    assert len(ids) == len(vals) == len(enc["attention_mask"])
    pos = num_positions(ntok, ids)
    assert enc["number_texts"] == expected_texts
    assert len(pos) == len(expected_texts)
    for i, s in zip(pos, expected_texts, strict=True):
        assert same_float(vals[i], np_float32(float(s)))
        assert math.isfinite(vals[i])
    assert all(v == 0.0 for i, v in enumerate(vals) if i not in set(pos))
    # exact text round trip with the original spellings
    assert (
        ntok.decode(ids, vals, number_texts=enc["number_texts"], skip_special_tokens=True) == text
    )
    # values only: canonical spelling; encoding it again gives the same ids and values
    canonical = ntok.decode(ids, vals, skip_special_tokens=True)
    again = ntok(canonical)
    assert again["input_ids"] == ids
    assert all(same_float(a, b) for a, b in zip(again["numeric_values"], vals, strict=True))
    # the float32 tensor carries exactly these values
    t = ntok(text, return_tensors="pt")
    assert t["numeric_values"].dtype == torch.float32
    assert t["numeric_values"][0].tolist() == vals


@pytest.mark.parametrize("name", ["corpus", "gpt2", "bos_eos"])
@given(
    parts=st.lists(st.tuples(NO_DIGIT_TEXT, BEFORE, number_strings(), AFTER), max_size=5),
    tail=NO_DIGIT_TEXT,
)
def test_round_trip_spliced_numbers(name, parts, tail):
    text = "".join(c + b + n + a for c, b, n, a in parts) + tail
    check_encoding(NTOKS[name], text, [n for _, _, n, _ in parts])


@pytest.mark.parametrize("name", ["corpus", "gpt2"])
@given(
    parts=st.lists(st.tuples(st.text(max_size=12), number_strings()), max_size=5), tail=st.text()
)
def test_round_trip_arbitrary_unicode(name, parts, tail):
    text = "".join(c + n for c, n in parts) + tail
    check_encoding(NTOKS[name], text, [s.text for s in find_numbers(text)])


@given(
    parts=st.lists(st.tuples(st.text(max_size=12), number_strings()), max_size=5), tail=st.text()
)
def test_round_trip_qwen2_tokenizer_on_nfc_text(parts, tail):
    """Qwen2's tokenizer NFC-normalizes: the round trip holds for NFC text (documented)."""
    text = unicodedata.normalize("NFC", "".join(c + n for c, n in parts) + tail)
    check_encoding(NTOKS["qwen2"], text, [s.text for s in find_numbers(text)])


def test_qwen2_tokenizer_normalizes_non_nfc_text():
    ntok = NTOKS["qwen2"]
    enc = ntok("e\u0301 3", return_number_texts=True)
    out = ntok.decode(enc["input_ids"], enc["numeric_values"], number_texts=enc["number_texts"])
    assert out == "\u00e9 3" != "e\u0301 3"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "3",
        "   ",
        "3 boxes of 12 eggs hold 36 eggs.",
        "The price rose from 4.50 to 5.00 dollars, up 0.50.",
        "x-3, 3-4, 2024-01-05, v1.2.3, 1,234.5, -0.0, .5e-3, 1E+10\n\t",
        "nan inf -inf 1e39 1e309 -1e400 Infinity",
        "١٢٣ ３ mixed 7٣ 東京 5🙂6",
        "abc12def  -7\r\n",
        "<bos>spelled <NUM> 3<NUM> <|endoftext|> <s>4</s><pad>",
    ],
)
def test_round_trip_examples(text):
    for ntok in NTOKS.values():
        check_encoding(ntok, text, [s.text for s in find_numbers(text)])


def test_nonfinite_and_huge_stay_text():
    ntok = NTOKS["corpus"]
    enc = ntok("nan inf 1e39 1e309 -1e400 3.5e38", return_tensors="pt")
    assert ntok.num_token_id not in enc["input_ids"][0].tolist()
    assert torch.isfinite(enc["numeric_values"]).all()
    assert (enc["numeric_values"] == 0).all()


def test_segments_are_tokenized_separately():
    """BPE merges never cross a number: ids are the wrapped ids of each segment around <NUM>."""
    tok = gpt2_style()
    ntok = NumericTokenizer(tok)
    text = "abc 12def -7.5e1xyz"
    expected = (
        tok("abc ", add_special_tokens=False)["input_ids"]
        + [ntok.num_token_id]
        + tok("def ", add_special_tokens=False)["input_ids"]
        + [ntok.num_token_id]
        + tok("xyz", add_special_tokens=False)["input_ids"]
    )
    enc = ntok(text)
    assert enc["input_ids"] == expected
    at = [i for i, t in enumerate(expected) if t == ntok.num_token_id]
    assert [enc["numeric_values"][i] for i in at] == [12.0, -75.0]


# ---------------------------------------------------------------- special tokens


def test_special_tokens_at_sequence_ends_only():
    tok = bos_eos_style()
    ntok = NumericTokenizer(tok)
    bos, eos = tok.convert_tokens_to_ids("<s>"), tok.convert_tokens_to_ids("</s>")
    ids = ntok("a 1 b 2 c")["input_ids"]
    assert ids[0] == bos and ids[-1] == eos
    assert ids.count(bos) == 1 and ids.count(eos) == 1
    plain = ntok("a 1 b 2 c", add_special_tokens=False)["input_ids"]
    assert plain == ids[1:-1]
    assert ntok.decode(ids, ntok("a 1 b 2 c")["numeric_values"]) == "<s>a 1 b 2 c</s>"


def test_corpus_tokenizer_prepends_bos():
    ntok = NumericTokenizer(corpus_style())
    enc = ntok("3 eggs")
    assert enc["input_ids"][0] == ntok.bos_token_id
    assert enc["input_ids"][1] == ntok.num_token_id and enc["numeric_values"][1] == 3.0


# ---------------------------------------------------------------- <NUM> id policy


def test_num_token_found_in_vocab():
    tok = corpus_style()
    n = len(tok)
    ntok = NumericTokenizer(tok)
    assert not ntok.num_token_added
    assert ntok.num_token_id == tok.convert_tokens_to_ids("<NUM>") == 3
    assert len(tok) == n == len(ntok)


def test_num_token_added_when_missing():
    tok = gpt2_style()
    n = len(tok)
    ntok = NumericTokenizer(tok)
    assert ntok.num_token_added
    assert len(tok) == n + 1 == len(ntok)
    assert ntok.num_token_id == n
    assert tok.convert_ids_to_tokens(n) == "<NUM>"
    # a literal "<NUM>" in the text stays text (it is not the <NUM> id) and round-trips
    enc = ntok("the literal <NUM> token and 5<NUM>6<NUM>", return_number_texts=True)
    assert enc["input_ids"].count(n) == 2 and enc["number_texts"] == ["5", "6"]
    out = ntok.decode(enc["input_ids"], enc["numeric_values"], number_texts=enc["number_texts"])
    assert out == "the literal <NUM> token and 5<NUM>6<NUM>"
    # a one-character num_token cannot be cut: text that maps to its id is an error
    one = NumericTokenizer(gpt2_style(), num_token="§")
    with pytest.raises(ValueError, match="num_token"):
        one("costs § 5")


def test_explicit_num_token_id_beyond_vocab():
    tok = corpus_style(num_token=None)
    n = len(tok)
    ntok = NumericTokenizer(tok, num_token_id=n + 5)
    assert len(tok) == n  # the wrapped tokenizer is untouched
    assert len(ntok) == n + 6
    text = "up 0.50 from <NUM> 4"
    enc = ntok(text, return_number_texts=True)
    assert enc["input_ids"].count(n + 5) == 2
    assert max(t for t in enc["input_ids"] if t != n + 5) < n
    # the literal "<NUM>" is ordinary text for this tokenizer and round-trips
    out = ntok.decode(enc["input_ids"], enc["numeric_values"], skip_special_tokens=True)
    assert out == "up 0.5 from <NUM> 4"
    # without values, <NUM> is written as its token string, or dropped with skip_special_tokens
    assert (
        ntok.decode(enc["input_ids"], skip_special_tokens=False) == "<bos>up <NUM> from <NUM> <NUM>"
    )
    assert ntok.decode(enc["input_ids"], skip_special_tokens=True) == "up  from <NUM> "


def test_explicit_num_token_id_conflicts():
    tok = corpus_style(num_token=None)
    with pytest.raises(ValueError, match="num_token_id"):
        NumericTokenizer(tok, num_token_id=10)  # the id of another token
    tok = corpus_style()
    with pytest.raises(ValueError, match="num_token_id"):
        NumericTokenizer(tok, num_token_id=len(tok) + 3)  # tokenizer already maps <NUM> to 3
    assert NumericTokenizer(tok, num_token_id=3).num_token_id == 3
    # an existing token chosen as <NUM> by name (e.g. a reserved token)
    ntok = NumericTokenizer(tok, num_token="<eos>", num_token_id=2)
    assert ntok("5")["input_ids"] == [1, 2]


def test_constructor_errors():
    with pytest.raises(ValueError, match="tokenizer"):
        NumericTokenizer("gpt2")
    with pytest.raises(ValueError, match="num_token"):
        NumericTokenizer(corpus_style(), num_token="")
    with pytest.raises(ValueError, match="num_token_id"):
        NumericTokenizer(corpus_style(None), num_token_id=-1)
    with pytest.raises(ValueError, match="num_token_id"):
        NumericTokenizer(corpus_style(None), num_token_id=2.0)
    with pytest.raises(ValueError, match="padding_side"):
        NumericTokenizer(corpus_style(), padding_side="middle")


# ---------------------------------------------------------------- batching and padding

BATCH = ["3 boxes of 12 eggs hold 36 eggs.", "-4.5 C", "no numbers here at all, none", "7"]


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("how", ["tokenizer", "wrapper", "argument"])
def test_padding_sides(side, how):
    tok = corpus_style()
    other = "left" if side == "right" else "right"
    tok.padding_side = side if how == "tokenizer" else other
    ntok = NumericTokenizer(tok, padding_side=side if how == "wrapper" else None)
    if how == "argument":
        enc = ntok(BATCH, padding=True, return_tensors="pt", padding_side=side)
    else:
        assert ntok.padding_side == side
        enc = ntok(BATCH, padding=True, return_tensors="pt")
    singles = [ntok(t) for t in BATCH]
    width = max(len(s["input_ids"]) for s in singles)
    assert enc["input_ids"].shape == enc["numeric_values"].shape == (len(BATCH), width)
    assert enc["input_ids"].dtype == torch.long and enc["numeric_values"].dtype == torch.float32
    for b, single in enumerate(singles):
        n = len(single["input_ids"])
        sl = slice(width - n, width) if side == "left" else slice(0, n)
        assert enc["input_ids"][b, sl].tolist() == single["input_ids"]
        assert enc["numeric_values"][b, sl].tolist() == single["numeric_values"]
        mask = enc["attention_mask"][b]
        assert mask.sum().item() == n and mask[sl].all()
        pad = mask == 0
        assert (enc["input_ids"][b][pad] == tok.pad_token_id).all()
        assert (enc["numeric_values"][b][pad] == 0).all()
    texts = ntok.batch_decode(
        enc["input_ids"], enc["numeric_values"], attention_mask=enc["attention_mask"]
    )
    assert texts == ["<bos>" + t for t in ["3 boxes of 12 eggs hold 36 eggs.", *BATCH[1:]]]


def test_batch_exact_round_trip_with_number_texts():
    ntok = NTOKS["corpus"]
    batch = ["up 0.50 and 1.0e2", "x", "007 agents"]
    enc = ntok(batch, padding=True, return_tensors="pt", return_number_texts=True)
    assert enc["number_texts"] == [["0.50", "1.0e2"], [], ["007"]]
    out = ntok.batch_decode(
        enc["input_ids"],
        enc["numeric_values"],
        number_texts=enc["number_texts"],
        skip_special_tokens=True,
    )
    assert out == batch
    canonical = ntok.batch_decode(enc["input_ids"], enc["numeric_values"], skip_special_tokens=True)
    assert canonical == ["up 0.5 and 100", "x", "7 agents"]
    # None entries fall back to the value
    mixed = ntok.decode(enc["input_ids"][0], enc["numeric_values"][0], number_texts=[None, "1.0e2"])
    assert mixed.endswith("up 0.5 and 1.0e2")


def test_pad_to_multiple_and_max_length_and_numpy():
    ntok = NTOKS["corpus"]
    enc = ntok(BATCH, padding=True, pad_to_multiple_of=8, return_tensors="np")
    assert isinstance(enc["input_ids"], np.ndarray) and enc["input_ids"].dtype == np.int64
    assert enc["numeric_values"].dtype == np.float32
    assert enc["input_ids"].shape[1] % 8 == 0
    enc = ntok(BATCH, padding="max_length", max_length=40, return_tensors="pt")
    assert enc["input_ids"].shape == (4, 40)
    single = ntok("5 eggs", return_tensors="pt")
    assert single["input_ids"].shape == (1, 3) and single["numeric_values"][0, 1] == 5.0
    no_mask = ntok(BATCH, padding=True, return_attention_mask=False, return_tensors="pt")
    assert set(no_mask) == {"input_ids", "numeric_values"}
    lists = ntok(BATCH)
    assert [len(x) for x in lists["input_ids"]] == [len(ntok(t)["input_ids"]) for t in BATCH]


def test_pad_as_collator():
    ntok = NTOKS["corpus"]
    feats = []
    for t in ["3 eggs", "12 eggs and 4 more"]:
        f = dict(ntok(t))
        f["labels"] = list(f["input_ids"])
        f["target_values"] = list(f["numeric_values"])
        feats.append(f)
    batch = ntok.pad(feats, padding_side="right")
    n0 = len(feats[0]["input_ids"])
    assert batch["labels"][0, n0:].eq(-100).all()
    assert batch["target_values"][0, n0:].eq(0).all()
    assert batch["target_values"].dtype == torch.float32 and batch["labels"].dtype == torch.long
    assert batch["input_ids"][1].tolist() == feats[1]["input_ids"]
    left = ntok.pad(feats, padding_side="left")
    assert left["labels"][0, : left["labels"].shape[1] - n0].eq(-100).all()
    # a dict of lists works too
    as_dict = ntok.pad({k: [f[k] for f in feats] for k in feats[0]})
    assert torch.equal(as_dict["input_ids"], batch["input_ids"])
    with pytest.raises(ValueError, match="mystery"):
        ntok.pad([{**feats[0], "mystery": [0] * n0}])
    with pytest.raises(ValueError, match="labels"):
        ntok.pad([{**feats[0], "labels": [1]}])
    with pytest.raises(ValueError, match="features"):
        ntok.pad([])
    assert (
        ntok.pad([{**feats[0], "mystery": [7] * n0}], pad_values={"mystery": 7})["mystery"]
        .eq(7)
        .all()
    )


# ---------------------------------------------------------------- truncation


@pytest.mark.parametrize("side", ["right", "left"])
def test_truncation(side):
    tok = bos_eos_style()
    tok.truncation_side = side
    ntok = NumericTokenizer(tok)
    text = "1 a 2 b 3 c 4 d 5 e 6 f 7 g 8"
    full = ntok(text, return_number_texts=True)
    enc = ntok(text, truncation=True, max_length=9, return_number_texts=True)
    ids, vals, spellings = enc["input_ids"], enc["numeric_values"], enc["number_texts"]
    assert len(ids) == 9 and ids[0] == tok.bos_token_id and ids[-1] == tok.eos_token_id
    content = full["input_ids"][1:-1]
    kept = content[:7] if side == "right" else content[-7:]
    assert ids[1:-1] == kept
    pos = num_positions(ntok, ids)
    assert len(pos) == len(spellings) > 0
    assert [vals[i] for i in pos] == [float(s) for s in spellings]
    expected = (
        full["number_texts"][: len(pos)] if side == "right" else full["number_texts"][-len(pos) :]
    )
    assert spellings == expected
    out = ntok.decode(ids, vals, number_texts=spellings, skip_special_tokens=True)
    assert out in text
    with pytest.raises(ValueError, match="max_length"):
        ntok(text, truncation=True, max_length=1)
    # no truncation without the flag
    assert len(ntok(text, max_length=9)["input_ids"]) == len(full["input_ids"])


def test_truncation_default_model_max_length():
    tok = corpus_style()
    tok.model_max_length = 5
    ntok = NumericTokenizer(tok)
    assert len(ntok("1 2 3 4 5 6 7", truncation=True)["input_ids"]) == 5


# ---------------------------------------------------------------- errors


def test_encode_errors():
    ntok = NTOKS["corpus"]
    with pytest.raises(ValueError, match="text"):
        ntok(3)
    with pytest.raises(ValueError, match="text"):
        ntok([])
    with pytest.raises(ValueError, match=r"text\[1\]"):
        ntok(["a", 3])
    with pytest.raises(ValueError, match="return_tensors"):
        ntok("a", return_tensors="tf")
    with pytest.raises(ValueError, match="padding"):
        ntok(["a", "a b c"], return_tensors="pt")
    with pytest.raises(ValueError, match="max_length"):
        ntok(["a"], padding="max_length")
    with pytest.raises(ValueError, match="padding"):
        ntok(["a"], padding="sideways")
    with pytest.raises(ValueError, match="max_length"):
        ntok("a", truncation=True, max_length=0)
    nopad = NTOKS["gpt2"]
    assert nopad.pad_token_id is None
    with pytest.raises(ValueError, match="pad token"):
        nopad(["a", "a b c d"], padding=True)
    # equal lengths need no pad token
    assert nopad(["a", "a"], padding=True, return_tensors="pt")["input_ids"].shape[0] == 2


def test_decode_errors():
    ntok = NTOKS["corpus"]
    k = ntok.num_token_id
    with pytest.raises(ValueError, match="numeric_values"):
        ntok.decode([k, 17], [1.0])
    with pytest.raises(ValueError, match="input_ids"):
        ntok.decode([[k, 17]], [[1.0, 0.0]])
    with pytest.raises(ValueError, match="input_ids"):
        ntok.decode(torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="input_ids"):
        ntok.decode("abc")
    with pytest.raises(ValueError, match="number_texts"):
        ntok.decode([k, 17, k], [1.0, 0.0, 2.0], number_texts=["1"])
    with pytest.raises(ValueError, match="numeric_values"):
        ntok.decode([k, 17], [float("nan"), 0.0])
    with pytest.raises(ValueError, match="numeric_values"):
        ntok.decode([k, 17], [float("inf"), 0.0])
    with pytest.raises(ValueError, match="attention_mask"):
        ntok.decode([k, 17], [1.0, 0.0], attention_mask=[1])
    with pytest.raises(ValueError, match="number_texts"):
        ntok.decode([k], number_texts=[None])
    with pytest.raises(ValueError, match="numeric_values"):
        ntok.batch_decode([[k], [k]], [[1.0]])
    with pytest.raises(ValueError, match="sequences"):
        ntok.batch_decode(torch.tensor([k, 17]))
    # a nan at a non-<NUM> position is ignored; values are written from float32 tensors exactly
    assert ntok.decode([k, 17], torch.tensor([0.1, float("nan")])).startswith("0.1")


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"truncation": True, "max_length": 2.5}, "max_length"),
        ({"truncation": True, "max_length": "8"}, "max_length"),
        ({"padding": "max_length", "max_length": -3}, "max_length"),
        ({"padding": True, "pad_to_multiple_of": 0}, "pad_to_multiple_of"),
        ({"padding": True, "pad_to_multiple_of": -4}, "pad_to_multiple_of"),
        ({"padding": True, "pad_to_multiple_of": 2.5}, "pad_to_multiple_of"),
        ({"padding": True, "pad_to_multiple_of": "a"}, "pad_to_multiple_of"),
        ({"padding": True, "pad_to_multiple_of": True}, "pad_to_multiple_of"),
    ],
)
def test_bad_lengths_are_refused_by_name(kwargs, name):
    ntok = NTOKS["corpus"]
    with pytest.raises(ValueError, match=rf"^{name} must be a positive int"):
        ntok(["1 a", "2 bb"], **kwargs)
    padding = {"padding": "max_length"} if kwargs.get("padding") == "max_length" else {}
    option = {key: v for key, v in kwargs.items() if key in ("max_length", "pad_to_multiple_of")}
    with pytest.raises(ValueError, match=rf"^{name} must be a positive int"):
        ntok.pad([ntok("1 a"), ntok("2 bb")], **padding, **option)


def test_decode_refuses_ids_that_are_not_token_ids():
    ntok = NTOKS["corpus"]
    for bad in (-1, 2**32, -(2**40)):
        with pytest.raises(ValueError, match=rf"input_ids\[1\] = {bad} is not a token id"):
            ntok.decode([5, bad])
        with pytest.raises(ValueError, match="is not a token id"):
            ntok.batch_decode(torch.tensor([[5, bad]]))


def test_adjacent_numbers_decode_apart():
    """Two adjacent <NUM> (as generation may write them) decode to text that reads back."""
    ntok = NTOKS["corpus"]
    k = ntok.num_token_id
    text = ntok.decode([k, k, k], [-0.25, 0.35, 0.35])
    assert text == "-0.25 0.35 0.35"
    assert [s.value for s in find_numbers(text)] == [-0.25, np_float32(0.35), np_float32(0.35)]
    letters = ntok("x", add_special_tokens=False)["input_ids"]
    e5 = ntok("e", add_special_tokens=False)["input_ids"]
    assert ntok.decode([*letters, k], [0.0] * len(letters) + [-4.0]) == "x -4"  # not "x-4" = 4
    assert ntok.decode([k, *e5, k], [3.0, *[0.0] * len(e5), 5.0]) == "3e 5"  # not 3e5
    assert ntok.decode([k, *letters], [3.0] + [0.0] * len(letters)) == "3x"  # no space needed
    # a skipped special token between two numbers does not glue them
    eos = ntok.eos_token_id
    assert ntok.decode([k, eos, k], [1.0, 0.0, 2.0], skip_special_tokens=True) == "1 2"


# Text pieces without ASCII digits (so without numbers of their own) and float32 numbers, in any
# order: adjacent numbers included.
PIECES = st.lists(
    st.one_of(
        NO_DIGIT_TEXT.filter(bool),
        st.floats(width=32, allow_nan=False, allow_infinity=False),
    ),
    max_size=8,
)


@pytest.mark.parametrize("name", ["corpus", "gpt2"])
@given(pieces=PIECES)
def test_decoded_numbers_read_back_in_order(name, pieces):
    """For any sequence of ``<NUM>`` and text ids: encoding the decoded text finds the same
    numbers (float32 values, in order), and decoding that encoding gives the same text."""
    ntok = NTOKS[name]
    k = ntok.num_token_id
    ids: list[int] = []
    vals: list[float] = []
    numbers = []
    for piece in pieces:
        if isinstance(piece, float):
            ids.append(k)
            vals.append(piece)
            numbers.append(np_float32(piece))
        else:
            piece_ids = ntok(piece, add_special_tokens=False)["input_ids"]
            ids += piece_ids
            vals += [0.0] * len(piece_ids)
    text = ntok.decode(ids, vals)
    enc = ntok(text, add_special_tokens=False)
    found = [v for t, v in zip(enc["input_ids"], enc["numeric_values"], strict=True) if t == k]
    assert len(found) == len(numbers)
    assert all(same_float(a, b) for a, b in zip(found, numbers, strict=True))
    assert ntok.decode(enc["input_ids"], enc["numeric_values"]) == text


# ---------------------------------------------------------------- save / load


def test_save_and_load(tmp_path):
    ntok = NumericTokenizer(gpt2_style(), padding_side="left")
    files = ntok.save_pretrained(tmp_path / "tok")
    assert any(f.endswith(NUMERIC_TOKENIZER_CONFIG) for f in files)
    loaded = NumericTokenizer.from_pretrained(tmp_path / "tok")
    assert loaded.num_token_id == ntok.num_token_id and not loaded.num_token_added
    assert loaded.padding_side == "left"
    text = "Grüße: 3 boxes of -12.5e1 eggs"
    assert loaded(text)["input_ids"] == ntok(text)["input_ids"]
    assert loaded(text)["numeric_values"] == ntok(text)["numeric_values"]

    tok = corpus_style(num_token=None)
    explicit = NumericTokenizer(tok, num_token_id=len(tok) + 2)
    explicit.save_pretrained(tmp_path / "explicit")
    again = NumericTokenizer.from_pretrained(tmp_path / "explicit")
    assert again.num_token_id == len(tok) + 2 and len(again.tokenizer) == len(tok)
    assert again("4.5 kg")["input_ids"] == explicit("4.5 kg")["input_ids"]

    with pytest.raises(ValueError, match="path"):
        NumericTokenizer.from_pretrained(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="save_directory"):
        ntok.save_pretrained(tmp_path / "file")


def test_a_broken_settings_file_is_named(tmp_path):
    NumericTokenizer(gpt2_style()).save_pretrained(tmp_path)
    settings = tmp_path / NUMERIC_TOKENIZER_CONFIG
    for text, message in (
        ("[1, 2]", "holds a JSON list"),
        ('{"num_token": ', "is not valid JSON"),
        ('{"padding_side": "middle"}', "padding_side"),
    ):
        settings.write_text(text)
        with pytest.raises(ValueError, match=message) as info:
            NumericTokenizer.from_pretrained(tmp_path)
        assert NUMERIC_TOKENIZER_CONFIG in str(info.value)


@pytest.mark.parametrize("text", ["price \ud83d", "\udcff 3", "a\udfffb"])
def test_a_lone_surrogate_is_a_value_error_naming_the_text(text):
    """The tokenizers library raised a TypeError ("TextEncodeInput must be ...") on it."""
    ntok = NumericTokenizer(gpt2_style())
    with pytest.raises(ValueError, match=r"text: character \d+ is a lone surrogate"):
        ntok(text)
    with pytest.raises(ValueError, match=r"text\[1\] \(text 2\): character \d+ is a lone"):
        ntok(["fine 3", text])
