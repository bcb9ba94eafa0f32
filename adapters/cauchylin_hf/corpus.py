"""The old import path of :mod:`cauchylin_hf.app.corpus`."""

from .app.corpus import (
    TEMPLATES,
    CorpusSplits,
    generate_sentences,
    make_splits,
    train_corpus_tokenizer,
)

__all__ = [
    "TEMPLATES",
    "CorpusSplits",
    "generate_sentences",
    "make_splits",
    "train_corpus_tokenizer",
]
