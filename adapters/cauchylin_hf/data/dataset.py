"""Encoded examples for the causal language model, held in memory.

:class:`NumericDataset` is a ``torch.utils.data.Dataset`` of encoded examples. Each example is a
dict of 1-D tensors: ``input_ids`` (int64), ``attention_mask`` (int64, all ones) and
``numeric_values`` (float32, the number's value at ``<NUM>`` positions, 0.0 elsewhere), plus
optional ``labels`` / ``target_values`` when the caller supplies them. Build it with
:meth:`NumericDataset.from_texts` or :meth:`NumericDataset.from_jsonl` (a file read by
:func:`cauchylin_hf.data.textfile.read_texts`); :class:`cauchylin_hf.data.collator.NumericDataCollator`
pads a list of them into a batch.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from ..batch import BATCH_FIELDS, MODEL_FIELDS, check_size
from ..tokenizer import NumericTokenizer
from .textfile import read_texts

__all__ = ["NumericDataset", "check_example"]

# Fields a tokenizer may return that the model does not take; an example drops them.
_DROPPED_FIELDS = frozenset({"number_texts", "token_type_ids", "special_tokens_mask", "length"})


def _as_1d(value: Any, dtype: torch.dtype, where: str) -> torch.Tensor:
    """A 1-D tensor of ``dtype`` from a list / tuple / array / tensor (ValueError otherwise)."""
    if isinstance(value, torch.Tensor):
        t = value.detach().to("cpu")
    else:
        try:
            t = torch.as_tensor(value)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(
                f"{where} must be a 1-D sequence of numbers, got {value!r:.80}"
            ) from exc
    if t.dim() != 1:
        raise ValueError(f"{where} must be 1-D, got shape {tuple(t.shape)}")
    if t.numel() and dtype != torch.float32 and (t.is_floating_point() or t.is_complex()):
        raise ValueError(f"{where} must hold integers, got dtype {t.dtype}")
    return t.to(dtype)


def check_example(example: Mapping[str, Any], where: str) -> dict[str, torch.Tensor]:
    """One encoded example checked and made 1-D CPU tensors (what a :class:`NumericDataset`
    holds and what :class:`~cauchylin_hf.data.collator.NumericDataCollator` pads).

    Args:
        example: ``input_ids`` and any of the model's fields (``attention_mask``,
            ``numeric_values``, ``labels``, ``target_values``); fields a tokenizer adds that the
            model does not take are dropped.
        where: the example's name in error messages (``"train[3]"``).

    Returns:
        The fields as tensors, with ``attention_mask`` (ones) and ``numeric_values`` (zeros)
        added where missing.

    Raises:
        ValueError: not a dict, no or empty ``input_ids``, an unknown field, a field of another
            length, floats where ids belong, or a NaN or infinite value.

    Example:
        >>> sorted(check_example({"input_ids": [5, 6]}, "ex"))
        ['attention_mask', 'input_ids', 'numeric_values']
    """
    if not isinstance(example, Mapping):
        raise ValueError(f"{where} must be a dict of fields, got {type(example).__name__}")
    if "input_ids" not in example:
        raise ValueError(f"{where} has no 'input_ids' (fields: {sorted(example)})")
    ids = _as_1d(example["input_ids"], torch.long, f"{where}['input_ids']")
    if ids.numel() == 0:
        raise ValueError(f"{where} has no tokens (empty input_ids)")
    out: dict[str, torch.Tensor] = {"input_ids": ids}
    for key, value in example.items():
        if key == "input_ids" or key in _DROPPED_FIELDS:
            continue
        if key not in MODEL_FIELDS:
            raise ValueError(
                f"{where} has the unknown field {key!r}; known: {sorted(MODEL_FIELDS)}"
            )
        dtype = BATCH_FIELDS[key][0]
        t = _as_1d(value, dtype, f"{where}[{key!r}]")
        if t.numel() != ids.numel():
            raise ValueError(
                f"{where}[{key!r}] has length {t.numel()}, input_ids has {ids.numel()}"
            )
        if dtype == torch.float32 and not bool(torch.isfinite(t).all()):
            raise ValueError(f"{where}[{key!r}] holds a NaN or infinite value")
        out[key] = t
    out.setdefault("attention_mask", torch.ones_like(ids))
    out.setdefault("numeric_values", torch.zeros(ids.numel(), dtype=torch.float32))
    return out


class NumericDataset(Dataset):
    """A map-style dataset of encoded examples for the causal language model.

    Each item is a dict of 1-D CPU tensors of one length ``seq``: ``input_ids`` (int64),
    ``attention_mask`` (int64), ``numeric_values`` (float32) and, when given, ``labels`` (int64)
    and ``target_values`` (float32). :class:`NumericDataCollator` turns a list of items into a
    padded batch.

    Args:
        examples: the examples, each a mapping with ``input_ids`` and optionally
            ``attention_mask`` (default all ones), ``numeric_values`` (default zeros), ``labels``
            and ``target_values``, each a 1-D sequence of the length of ``input_ids``. Fields a
            tokenizer adds that the model does not take (``number_texts``,
            ``token_type_ids``, ``special_tokens_mask``, ``length``) are dropped.
        name: what the examples are called in error messages (e.g. ``"train_texts"``).

    Raises:
        ValueError: when ``examples`` is empty (the message names it), an example has no
            ``input_ids``, an empty ``input_ids``, fields of different lengths, non-integer ids,
            an unknown field, or a non-finite value in ``numeric_values`` / ``target_values``.

    Example:
        >>> ds = NumericDataset([{"input_ids": [1, 5, 3], "numeric_values": [0.0, 0.0, 12.0]}])
        >>> len(ds), ds[0]["attention_mask"].tolist()
        (1, [1, 1, 1])
    """

    def __init__(self, examples: Sequence[Mapping[str, Any]], *, name: str = "examples") -> None:
        if isinstance(examples, (str, bytes, Mapping)) or not isinstance(examples, Sequence):
            raise ValueError(
                f"{name} must be a list of examples (dicts), got {type(examples).__name__}"
            )
        if len(examples) == 0:
            raise ValueError(f"{name} is empty: the dataset needs at least one example")
        self.name = name
        self._examples = [check_example(ex, f"{name}[{i}]") for i, ex in enumerate(examples)]

    @classmethod
    def from_texts(
        cls,
        texts: Iterable[str],
        tokenizer: NumericTokenizer,
        *,
        max_length: int | None = None,
        add_special_tokens: bool = True,
        add_eos: bool = True,
        name: str = "texts",
        chunk_size: int = 1024,
    ) -> NumericDataset:
        """Encode texts with a :class:`~cauchylin_hf.tokenizer.NumericTokenizer`.

        Args:
            texts: the texts (any iterable of ``str``).
            tokenizer: the numeric tokenizer; numbers become ``<NUM>`` with their values in
                ``numeric_values``.
            max_length: cut each example to at most this many tokens (special tokens and the
                appended eos included); None keeps whole texts.
            add_special_tokens: add the wrapped tokenizer's special tokens (e.g. bos).
            add_eos: append the eos token (value 0.0) to every example unless it already ends
                with it, so the model learns where a text stops. Ignored when the tokenizer has
                no eos token.
            name: what the texts are called in error messages.
            chunk_size: texts encoded per tokenizer call.

        Returns:
            The dataset, one example per text.

        Raises:
            ValueError: when ``tokenizer`` is not a ``NumericTokenizer``, ``texts`` is empty
                (named), a text is not a ``str``, a text has no tokens (e.g. ``""``; the message
                gives its index), or ``max_length`` is too small.

        Example:
            >>> from cauchylin_hf.app.corpus import train_corpus_tokenizer
            >>> ntok = NumericTokenizer(train_corpus_tokenizer(vocab_size=300))
            >>> ds = NumericDataset.from_texts(["3 boxes of 12 eggs hold 36 eggs."], ntok)
            >>> ds[0]["numeric_values"][ds[0]["input_ids"] == ntok.num_token_id].tolist()
            [3.0, 12.0, 36.0]
        """
        if not isinstance(tokenizer, NumericTokenizer):
            raise ValueError(
                f"tokenizer must be a cauchylin_hf.tokenizer.NumericTokenizer, got "
                f"{type(tokenizer).__name__}; wrap it: NumericTokenizer(tokenizer)"
            )
        if isinstance(texts, (str, bytes)):
            raise ValueError(f"{name} must be a list of str, not a single {type(texts).__name__}")
        texts = list(texts)
        if not texts:
            raise ValueError(f"{name} is empty: the dataset needs at least one text")
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise ValueError(f"{name}[{i}] must be a str, got {type(t).__name__}")
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
        eos = tokenizer.eos_token_id if add_eos else None
        n_special = len(tokenizer("", add_special_tokens=add_special_tokens)["input_ids"])
        check_size("max_length", max_length)
        if max_length is not None and max_length < n_special + 1 + (eos is not None):
            raise ValueError(
                f"max_length={max_length} leaves no room for a token next to the "
                f"{n_special + (eos is not None)} special tokens"
            )
        budget = None if max_length is None else max_length - (eos is not None)

        examples: list[dict[str, list]] = []
        for start in range(0, len(texts), chunk_size):
            chunk = texts[start : start + chunk_size]
            enc = tokenizer(
                chunk,
                add_special_tokens=add_special_tokens,
                truncation=budget is not None,
                max_length=budget,
                return_attention_mask=False,
            )
            for j, (ids, values) in enumerate(
                zip(enc["input_ids"], enc["numeric_values"], strict=True)
            ):
                if len(ids) <= n_special:
                    text = chunk[j]
                    raise ValueError(
                        f"{name}[{start + j}] has no tokens (text {text[:60]!r}); remove empty "
                        f"texts from the dataset"
                    )
                ids, values = list(ids), list(values)
                if eos is not None and ids[-1] != eos:
                    ids.append(eos)
                    values.append(0.0)
                examples.append({"input_ids": ids, "numeric_values": values})
        return cls(examples, name=name)

    @classmethod
    def from_jsonl(
        cls,
        path: str | os.PathLike[str],
        tokenizer: NumericTokenizer,
        *,
        text_field: str = "text",
        **kwargs: Any,
    ) -> NumericDataset:
        """Read a dataset file with :func:`read_texts` and encode it with :meth:`from_texts`.

        Args:
            path: a JSONL file (one object per line, text in ``text_field``) or a plain text
                file (one example per line).
            tokenizer: the numeric tokenizer.
            text_field: the JSON field holding the text.
            **kwargs: passed to :meth:`from_texts` (``max_length``, ``add_eos``, ...).

        Returns:
            The dataset, one example per record.

        Raises:
            FileNotFoundError: when the file does not exist.
            ValueError: for a malformed line, a missing field, an empty file or a text with no
                tokens (see :func:`read_texts` and :meth:`from_texts`).

        Example:
            >>> import tempfile
            >>> from pathlib import Path
            >>> from cauchylin_hf.testing import tiny_tokenizer
            >>> ntok = NumericTokenizer(tiny_tokenizer(300))
            >>> path = Path(tempfile.mkdtemp()) / "train.jsonl"
            >>> _ = path.write_text('{"text": "3 eggs."}\\n{"text": "12 pens."}\\n')
            >>> ds = NumericDataset.from_jsonl(path, ntok)
            >>> len(ds), ds[1]["numeric_values"][0].item(), ds[1]["input_ids"][-1].item()  # eos 2
            (2, 12.0, 2)
        """
        kwargs.setdefault("name", str(path))
        return cls.from_texts(read_texts(path, text_field=text_field), tokenizer, **kwargs)

    def __len__(self) -> int:
        """The number of examples."""
        return len(self._examples)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        """Example ``index``: a dict of 1-D tensors (see the class docstring)."""
        return dict(self._examples[index])

    def __repr__(self) -> str:
        """The name, the number of examples and the total token count."""
        tokens = sum(ex["input_ids"].numel() for ex in self._examples)
        return f"NumericDataset({self.name!r}, examples={len(self)}, tokens={tokens})"

    @property
    def lengths(self) -> list[int]:
        """The token count of every example (for length-grouped sampling)."""
        return [ex["input_ids"].numel() for ex in self._examples]
