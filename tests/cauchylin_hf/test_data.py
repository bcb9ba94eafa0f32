"""cauchylin_hf.data: dataset files, encoded examples and the padding collator."""

from __future__ import annotations

import json

import pytest
import torch
from cauchylin_hf.app.corpus import train_corpus_tokenizer
from cauchylin_hf.data import IGNORE_INDEX, NumericDataCollator, NumericDataset, read_texts
from cauchylin_hf.tokenizer import NumericTokenizer


@pytest.fixture(scope="module")
def ntok() -> NumericTokenizer:
    return NumericTokenizer(train_corpus_tokenizer(vocab_size=300))


# ------------------------------------------------------------------ read_texts


def test_read_texts_jsonl_and_plain_text(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text(
        json.dumps({"text": "3 eggs.", "id": 1}) + "\n\n" + json.dumps({"text": "4 pens."}) + "\n",
        encoding="utf-8",
    )
    assert read_texts(p) == ["3 eggs.", "4 pens."]
    q = tmp_path / "d.jsonl"
    q.write_text(json.dumps({"body": "x 1"}) + "\n", encoding="utf-8")
    assert read_texts(q, text_field="body") == ["x 1"]
    j = tmp_path / "d.json"  # a JSON array of records or strings
    j.write_text(json.dumps([{"text": "a 1"}, "b 2"]), encoding="utf-8")
    assert read_texts(j) == ["a 1", "b 2"]
    j.write_text(json.dumps({"text": "c 3"}) + "\n", encoding="utf-8")  # .json holding JSONL
    assert read_texts(j) == ["c 3"]
    t = tmp_path / "d.txt"
    t.write_text("first 1\n\nsecond 2.5\r\n", encoding="utf-8")
    assert read_texts(t) == ["first 1", "second 2.5"]


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ('{"text": "a"}\n{"txt": "b"}\n', r"d\.jsonl:2: the record has no field 'text'"),
        ('{"text": 3}\n', r"field 'text' must be a string"),
        ("[1, 2]\n", r"d\.jsonl:1: expected a JSON object, got list"),
        ('{"text": "a"\n', r"d\.jsonl:1: not valid JSON"),
        ("\n  \n", r"is empty"),
    ],
)
def test_read_texts_errors_name_file_line_and_field(tmp_path, content, match):
    p = tmp_path / "d.jsonl"
    p.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=match):
        read_texts(p)


def test_read_texts_json_array_errors(tmp_path):
    p = tmp_path / "d.json"
    p.write_text(json.dumps([{"text": "a"}, {"body": "b"}]), encoding="utf-8")
    with pytest.raises(ValueError, match=r"d\.json\[1\]: the record has no field 'text'"):
        read_texts(p)
    p.write_text("[]", encoding="utf-8")
    with pytest.raises(ValueError, match="is empty"):
        read_texts(p)
    p.write_text('[{"text": "a"},', encoding="utf-8")
    with pytest.raises(ValueError, match="not valid JSON"):
        read_texts(p)


def test_read_texts_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.jsonl"):
        read_texts(tmp_path / "nope.jsonl")


# ------------------------------------------------------------------ NumericDataset


def test_from_texts_encodes_numbers_and_appends_eos(ntok):
    ds = NumericDataset.from_texts(["3 boxes of 12 eggs hold 36 eggs.", "The price is 4.50."], ntok)
    assert len(ds) == 2
    ex = ds[0]
    assert set(ex) == {"input_ids", "attention_mask", "numeric_values"}
    assert ex["input_ids"].dtype == torch.long and ex["numeric_values"].dtype == torch.float32
    at_num = ex["input_ids"] == ntok.num_token_id
    assert ex["numeric_values"][at_num].tolist() == [3.0, 12.0, 36.0]
    assert (ex["numeric_values"][~at_num] == 0).all()
    assert ex["input_ids"][0] == ntok.bos_token_id
    assert ex["input_ids"][-1] == ntok.eos_token_id and ex["numeric_values"][-1] == 0
    assert (ex["attention_mask"] == 1).all()
    assert ds[1]["numeric_values"].max().item() == pytest.approx(4.5)
    no_eos = NumericDataset.from_texts(["3 boxes of 12 eggs hold 36 eggs."], ntok, add_eos=False)
    assert no_eos[0]["input_ids"][-1] != ntok.eos_token_id
    assert no_eos.lengths[0] == ds.lengths[0] - 1
    assert "examples=2" in repr(ds)


def test_from_texts_max_length_counts_specials_and_eos(ntok):
    text = "1 2 3 4 5 6 7 8 9 10 11 12"
    ds = NumericDataset.from_texts([text], ntok, max_length=6)
    ids = ds[0]["input_ids"]
    assert ids.numel() == 6
    assert ids[0] == ntok.bos_token_id and ids[-1] == ntok.eos_token_id
    assert ds[0]["numeric_values"][1].item() == 1.0
    with pytest.raises(ValueError, match="max_length=2"):
        NumericDataset.from_texts([text], ntok, max_length=2)


def test_from_texts_errors(ntok):
    with pytest.raises(ValueError, match="train_texts is empty"):
        NumericDataset.from_texts([], ntok, name="train_texts")
    with pytest.raises(ValueError, match=r"texts\[1\] has no tokens"):
        NumericDataset.from_texts(["3 eggs", ""], ntok)
    with pytest.raises(ValueError, match=r"texts\[0\] must be a str"):
        NumericDataset.from_texts([3], ntok)
    with pytest.raises(ValueError, match="not a single str"):
        NumericDataset.from_texts("3 eggs", ntok)
    with pytest.raises(ValueError, match="NumericTokenizer"):
        NumericDataset.from_texts(["3 eggs"], ntok.tokenizer)


def test_from_jsonl(tmp_path, ntok):
    p = tmp_path / "train.jsonl"
    p.write_text("".join(json.dumps({"text": f"{i} eggs."}) + "\n" for i in range(5)))
    ds = NumericDataset.from_jsonl(p, ntok)
    assert len(ds) == 5
    assert [float(ds[i]["numeric_values"].max()) for i in range(5)] == [0.0, 1.0, 2.0, 3.0, 4.0]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty"):
        NumericDataset.from_jsonl(empty, ntok)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"content": "1 egg"}) + "\n")
    with pytest.raises(ValueError, match="no field 'text'"):
        NumericDataset.from_jsonl(bad, ntok)


def test_dataset_from_examples_validates():
    ds = NumericDataset(
        [{"input_ids": [1, 2, 3], "labels": [1, -100, 3], "number_texts": ["x"]}], name="mine"
    )
    assert set(ds[0]) == {"input_ids", "attention_mask", "numeric_values", "labels"}
    with pytest.raises(ValueError, match="mine is empty"):
        NumericDataset([], name="mine")
    with pytest.raises(ValueError, match="no 'input_ids'"):
        NumericDataset([{"numeric_values": [1.0]}])
    with pytest.raises(ValueError, match="has no tokens"):
        NumericDataset([{"input_ids": []}])
    with pytest.raises(ValueError, match=r"\['numeric_values'\] has length 1, input_ids has 2"):
        NumericDataset([{"input_ids": [1, 2], "numeric_values": [1.0]}])
    with pytest.raises(ValueError, match="unknown field 'pixel_values'"):
        NumericDataset([{"input_ids": [1, 2], "pixel_values": [1, 2]}])
    with pytest.raises(ValueError, match="must hold integers"):
        NumericDataset([{"input_ids": [1.5, 2.0]}])
    with pytest.raises(ValueError, match="NaN or infinite"):
        NumericDataset([{"input_ids": [1, 2], "numeric_values": [0.0, float("nan")]}])


# ------------------------------------------------------------------ collator


def _examples():
    return [
        {"input_ids": [5, 6, 7, 8], "numeric_values": [0.0, 2.0, 0.0, 0.0]},
        {"input_ids": [9, 10], "numeric_values": [0.0, -1.5]},
    ]


def test_collator_right_padding():
    batch = NumericDataCollator(pad_token_id=0)(_examples())
    assert set(batch) == {
        "input_ids",
        "attention_mask",
        "numeric_values",
        "labels",
        "target_values",
    }
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8], [9, 10, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert batch["labels"].tolist() == [[5, 6, 7, 8], [9, 10, IGNORE_INDEX, IGNORE_INDEX]]
    assert batch["numeric_values"].tolist() == [[0, 2, 0, 0], [0, -1.5, 0, 0]]
    assert torch.equal(batch["target_values"], batch["numeric_values"])
    assert batch["numeric_values"].dtype == torch.float32 and batch["labels"].dtype == torch.long


def test_collator_left_padding_and_multiple_of():
    batch = NumericDataCollator(pad_token_id=1, padding_side="left", pad_to_multiple_of=3)(
        _examples()
    )
    assert batch["input_ids"].tolist() == [[1, 1, 5, 6, 7, 8], [1, 1, 1, 1, 9, 10]]
    assert batch["labels"].tolist() == [[-100, -100, 5, 6, 7, 8], [-100] * 4 + [9, 10]]
    assert batch["numeric_values"][1].tolist() == [0, 0, 0, 0, 0, -1.5]
    assert batch["attention_mask"].sum(1).tolist() == [4, 2]


def test_collator_uses_tokenizer_defaults(ntok):
    ntok_left = NumericTokenizer(ntok.tokenizer, padding_side="left")
    batch = NumericDataCollator(ntok_left)(_examples())
    assert batch["input_ids"][1, 0] == ntok.pad_token_id
    assert batch["attention_mask"][1].tolist() == [0, 0, 1, 1]
    # the collator's own setting wins over the tokenizer's
    batch = NumericDataCollator(ntok_left, padding_side="right")(_examples())
    assert batch["attention_mask"][1].tolist() == [1, 1, 0, 0]


def test_collator_keeps_given_labels_and_targets():
    examples = [
        {
            "input_ids": [5, 6, 7],
            "labels": [-100, 6, 7],
            "numeric_values": [0.0, 3.0, 0.0],
            "target_values": [0.0, 4.0, 0.0],
            "attention_mask": [1, 1, 0],
        },
        {"input_ids": [9]},
    ]
    batch = NumericDataCollator(pad_token_id=0)(examples)
    assert batch["labels"].tolist() == [[-100, 6, -100], [9, -100, -100]]  # mask 0 -> -100
    assert batch["target_values"][0].tolist() == [0.0, 4.0, 0.0]
    assert batch["numeric_values"][0].tolist() == [0.0, 3.0, 0.0]


def test_collator_without_labels_and_errors():
    batch = NumericDataCollator(pad_token_id=0, return_labels=False)(_examples())
    assert set(batch) == {"input_ids", "attention_mask", "numeric_values"}
    collate = NumericDataCollator(pad_token_id=0)
    with pytest.raises(ValueError, match="non-empty list"):
        collate([])
    with pytest.raises(ValueError, match=r"features\[1\] has no 'input_ids'"):
        collate([{"input_ids": [1]}, {"labels": [1]}])
    with pytest.raises(ValueError, match="padding_side"):
        NumericDataCollator(padding_side="middle")
    with pytest.raises(ValueError, match="pad_to_multiple_of"):
        NumericDataCollator(pad_to_multiple_of=0)


def test_collator_pad_id_fallbacks(ntok):
    assert NumericDataCollator()._pad_id() == 0
    assert NumericDataCollator(ntok)._pad_id() == ntok.pad_token_id

    class EosOnly:
        pad_token_id = None
        eos_token_id = 7

    assert NumericDataCollator(EosOnly())._pad_id() == 7


def test_dataloader_round_trip(ntok):
    texts = ["3 boxes of 12 eggs hold 36 eggs.", "Ann had 4 pens.", "It is -2.5 degrees."]
    ds = NumericDataset.from_texts(texts, ntok)
    loader = torch.utils.data.DataLoader(ds, batch_size=3, collate_fn=NumericDataCollator(ntok))
    batch = next(iter(loader))
    assert batch["input_ids"].shape == (3, max(ds.lengths))
    decoded = ntok.batch_decode(
        batch["input_ids"],
        batch["numeric_values"],
        attention_mask=batch["attention_mask"],
        skip_special_tokens=True,
    )
    assert decoded == texts


# ------------------------------------------- byte-order marks, half emoji, UTF-16 without a BOM


@pytest.mark.parametrize("name", ["d.txt", "d.jsonl"])
def test_a_utf8_byte_order_mark_is_dropped_as_the_csv_reader_drops_it(tmp_path, name):
    """A .txt kept U+FEFF at the start of text 1; a .jsonl was "not valid JSON" on line 1."""
    line = json.dumps({"text": "3 eggs."}) if name.endswith(".jsonl") else "3 eggs."
    path = tmp_path / name
    path.write_bytes(f"{line}\n{line}\n".encode("utf-8-sig"))
    assert read_texts(path) == ["3 eggs.", "3 eggs."]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32"])
def test_utf16_and_utf32_with_a_byte_order_mark_read_like_utf8(tmp_path, encoding):
    text = '{"text": "Zürich 382."}\n{"text": "Genève 410."}\n'
    path = tmp_path / "d.jsonl"
    path.write_bytes(text.encode(encoding))
    assert read_texts(path) == ["Zürich 382.", "Genève 410."]


def test_utf16_without_a_byte_order_mark_is_named_not_read_as_nul_text(tmp_path):
    """All-ASCII UTF-16 without a BOM is valid UTF-8 with a NUL after every letter: a .txt was
    trained on as such text, a .jsonl was "not valid JSON"."""
    for name in ("d.txt", "d.jsonl"):
        path = tmp_path / name
        line = json.dumps({"text": "3 eggs."}) if name.endswith(".jsonl") else "3 eggs."
        path.write_bytes(f"{line}\n{line}\n".encode("utf-16-le"))
        with pytest.raises(ValueError, match=None) as info:
            read_texts(path)
        message = str(info.value)
        assert f"{path} holds NUL characters (the first on line 1)" in message
        assert "UTF-16 or UTF-32 without a byte-order mark" in message
        assert "iconv -f utf-16le -t utf-8" in message


def test_short_utf16_text_without_a_byte_order_mark_is_named_as_such(tmp_path):
    """A few non-ASCII letters in UTF-16: the hint said Latin-1 (it counted 20 NULs)."""
    path = tmp_path / "d.txt"
    path.write_bytes("Zürich 3 €\n".encode("utf-16-le"))
    with pytest.raises(ValueError, match="it looks like UTF-16 without a byte-order mark"):
        read_texts(path)


@pytest.mark.parametrize(
    "record", ['{"text": "price 3 \\ud83d"}', '"\\udce9t\\u00e9"', '{"text": "\\ude00 x"}']
)
def test_a_lone_surrogate_in_a_jsonl_record_names_the_file_and_line(tmp_path, record):
    """Valid JSON, but half an emoji: train/evaluate/predict/generate ended with the
    tokenizer's TypeError."""
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "fine 1."}\n\n' + record + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{path}:3: character \d+ is a lone surrogate"):
        read_texts(path)
    whole = tmp_path / "ok.jsonl"
    whole.write_text('{"text": "3 \\ud83e\\udd5a eggs"}\n', encoding="utf-8")  # a whole emoji
    assert read_texts(whole) == ["3 \U0001f95a eggs"]
