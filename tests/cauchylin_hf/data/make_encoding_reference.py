"""Write ``encoding_reference.json``: what the tokenizer and the decimals gave before batching.

Run from the repository root at the revision whose behaviour is the reference (it was written by
commit 76dca92's per-text code, before the encoding was batched)::

    PYTHONPATH=adapters:. python tests/cauchylin_hf/data/make_encoding_reference.py

``tests/cauchylin_hf/test_encoding_reference.py`` encodes the same texts with the same tokenizers
and checks every id, value, number text and decimal count against the file.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from cauchylin_hf.app.corpus import generate_sentences
from cauchylin_hf.numbers import find_numbers
from cauchylin_hf.precision import NumberPrecision, needed_decimals
from cauchylin_hf.testing import tiny_tokenizer
from cauchylin_hf.tokenizer import NumericTokenizer

OUT = Path(__file__).with_name("encoding_reference.json")

TRICKY = [
    "3 boxes of 12 eggs",
    "-3",
    "+3",
    "x = -3",
    "(-3)",
    "2*-3",
    "x-3",
    "3-4",
    "(a)-3",
    "--3",
    "-+3",
    "1,234",
    "2024-01-05",
    "1.2.3",
    "192.168.0.1",
    "v1.2.3 and 4",
    "1e5.3",
    "1e2e3",
    "4.5e1",
    "1E+3",
    "1e-3",
    "3e",
    "3eggs",
    "1e+",
    ".5",
    "-.5",
    "a.5",
    "..5",
    "1e-.5",
    "3.",
    "I have 3.",
    "H2O",
    "Qwen2.5",
    "١٢٣ ３ ²",
    "inf nan Infinity NaN",
    "1e39 -1e39 1e309",
    "9" * 40,
    "3.4028235e38",
    "3.4028236e38",
    "0x1F",
    "1_000",
    "x = \u22125",
    "\u20133 C",
    "pages 10\u201320",
    "a\u22123",
    "\u2212-3",
    "-\u20133",
    "(\u2212.5)",
    "1e\u22125",
    "-1e-50",
    "1e-45",
    "7e-46",
    "-0",
    "-0.0",
    "+.5",
    ",.5",
    "e+.5",
    "x.5.3",
    " .5.3 ",
    "a .5e3",
    "00012.500",
    "0.30000000000000004",
    "12.090000000000",
    "1234567.89",
    "16777217",
    "3 . 5",
    "...5",
    "5...",
    "\t-4.5e+1\n",
    "<NUM> 3 <NUM>",
    "a<NUM>4",
    "price: $-1,234.50!",
    "]-3 }-3 )-3 _-3 .-3 +-3",
    "\u00e9-3 \u00e93 3\u00e9",
    "\U0001f642-2.5\U0001f680",
    "temperature \u22124.5 \u00b0C, range 3\u20134 km, 1.5e-3 s",
    "1e+05 1E-05 1e0 0e0 .0e-0",
    "1.5e",
    "2.5e+",
    "3.0e-x",
    "",
    " ",
    "no numbers here",
]


def table_texts(rows: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(rows):
        area = f"{rng.uniform(-50, 300):.{rng.randint(0, 3)}f}"
        price = rng.choice(
            [f"{rng.uniform(5e4, 2e6):.2f}", f"{rng.uniform(1, 9):.3e}", f"{rng.random():.12f}"]
        )
        out.append(
            f"area {area}, rooms {rng.randint(1, 8)}, age {rng.randint(0, 120)} -> price {price}."
        )
    return out


def decimal_spellings(n: int, seed: int) -> list[str]:
    """Numbers with many digits, exponents, powers of two, subnormals: the decimals' hard cases."""
    rng = random.Random(seed)
    out = ["0.5", "0.25", "1024", "0.125", "2", "0.0009765625", "1.1754944e-38", "1e-40"]
    for _ in range(n):
        kind = rng.randrange(6)
        if kind == 0:
            out.append(f"{rng.uniform(0, 1e7):.{rng.randint(0, 12)}f}")
        elif kind == 1:
            out.append(f"{rng.uniform(1, 10):.{rng.randint(0, 9)}e}".replace("e+00", ""))
        elif kind == 2:
            out.append(f"{rng.uniform(1, 10):.{rng.randint(0, 9)}f}e{rng.randint(-45, 38)}")
        elif kind == 3:
            out.append(repr(2.0 ** rng.randint(-149, 127)))
        elif kind == 4:
            out.append(repr(rng.random()))
        else:
            out.append(f"-{rng.randint(0, 10**9)}.{rng.randint(0, 10**6):06d}")
    return out


def tokenizers() -> dict[str, NumericTokenizer]:
    from tests.cauchylin_hf.test_tokenizer import NTOKS

    return {
        **NTOKS,
        "tiny": NumericTokenizer(tiny_tokenizer(300, model_max_length=24)),
        "tiny_spare": NumericTokenizer(tiny_tokenizer(300), num_token_id=310),
    }


SETTINGS = {
    "plain": {"add_special_tokens": True},
    "no_special": {"add_special_tokens": False},
    "right_12": {"truncation": True, "max_length": 12},
    "left_12": {"truncation": True, "max_length": 12, "truncation_side": "left"},
}


def corpus() -> list[str]:
    return TRICKY + generate_sentences(50, seed=5) + table_texts(50, seed=7)


def fingerprint(ntok: NumericTokenizer) -> str:
    return hashlib.sha256(ntok.tokenizer.backend_tokenizer.to_str().encode()).hexdigest()


def encode(ntok: NumericTokenizer, texts: list[str], setting: dict) -> dict:
    setting = dict(setting)
    side = setting.pop("truncation_side", "right")
    before = ntok.tokenizer.truncation_side
    ntok.tokenizer.truncation_side = side
    try:
        enc = ntok(texts, return_number_texts=True, **setting)
    finally:
        ntok.tokenizer.truncation_side = before
    return {k: enc[k] for k in ("input_ids", "numeric_values", "number_texts")}


def main() -> None:
    texts = corpus()
    spellings = decimal_spellings(2000, seed=11)
    numbers = [s for t in [*texts, " ".join(spellings)] for s in find_numbers(t)]
    data = {
        "texts": texts,
        "decimal_spellings": spellings,
        "numbers": [[s.text, s.value, needed_decimals(s)] for s in numbers],
        "precision": NumberPrecision.from_texts(texts).to_dict(),
        "settings": SETTINGS,
        "encodings": {},
        "fingerprints": {},
    }
    for name, ntok in tokenizers().items():
        data["fingerprints"][name] = fingerprint(ntok)
        data["encodings"][name] = {k: encode(ntok, texts, s) for k, s in SETTINGS.items()}
    OUT.write_text(json.dumps(data, ensure_ascii=True, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
