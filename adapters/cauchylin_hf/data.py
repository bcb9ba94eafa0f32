"""Training data for the causal language model: encoded examples and a padding collator.

* :func:`read_texts` reads a dataset file: JSONL (one JSON object per line, the text in a named
  field) or plain text (one example per non-empty line); :func:`read_text_file` decodes a data
  file (UTF-8, or UTF-16/UTF-32 with a byte-order mark) for it and for tables.
* :class:`NumericDataset` is a ``torch.utils.data.Dataset`` of encoded examples. Each example is a
  dict of 1-D tensors: ``input_ids`` (int64), ``attention_mask`` (int64, all ones) and
  ``numeric_values`` (float32, the number's value at ``<NUM>`` positions, 0.0 elsewhere), plus
  optional ``labels`` / ``target_values`` when the caller supplies them. Build it with
  :meth:`NumericDataset.from_texts` or :meth:`NumericDataset.from_jsonl`.
* :class:`NumericDataCollator` pads a list of examples into a batch for the model's ``forward`` (and
  for ``transformers.Trainer``): ``input_ids``, ``attention_mask``, ``numeric_values``, ``labels``
  (= ``input_ids``, -100 at padding) and ``target_values`` (= ``numeric_values``), left or right.

Labels are *not* shifted here: the model shifts them (and the target values with them) inside
``forward``, so ``labels[b, i]`` is the token at position ``i`` and position ``i - 1`` predicts it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import Dataset

from .batch import (
    BATCH_FIELDS,
    IGNORE_INDEX,
    MODEL_FIELDS,
    check_size,
    pad_rows,
    pad_values,
    padded_length,
    regression_targets,
    resolve_pad_token_id,
)
from .textfile import line_text, read_text_file, read_texts
from .tokenizer import NumericTokenizer

__all__ = [
    "IGNORE_INDEX",
    "NumericDataCollator",
    "NumericDataset",
    "line_text",
    "read_text_file",
    "read_texts",
]

# Fields a tokenizer may return that the model does not take; the collator drops them.
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
        self._examples = [self._check(ex, f"{name}[{i}]") for i, ex in enumerate(examples)]

    @staticmethod
    def _check(example: Mapping[str, Any], where: str) -> dict[str, torch.Tensor]:
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


@dataclass
class NumericDataCollator:
    """Pad examples into a batch for the causal language model (a ``data_collator`` for Trainer).

    Output fields, each ``[batch, seq]``: ``input_ids`` (int64; padding = the pad id),
    ``attention_mask`` (int64; 0 at padding), ``numeric_values`` (float32; 0.0 at padding),
    ``labels`` (int64; the example's ``labels`` if it has them, else ``input_ids``; -100 at padding
    and wherever the example's attention mask is 0) and ``target_values`` (float32; the example's
    ``target_values`` if it has them, else ``numeric_values``; 0.0 at padding). Labels are not
    shifted: the model does that inside ``forward``.

    Args:
        tokenizer: a ``NumericTokenizer`` or HF tokenizer supplying the pad id and padding side
            (optional).
        pad_token_id: the id written at padding; default the tokenizer's pad id, else its eos id,
            else 0. Any valid id works, since padding is masked out of attention and loss.
        padding_side: ``"left"`` or ``"right"``; default the tokenizer's side, else ``"right"``.
            Use ``"left"`` for batched generation, either for training.
        pad_to_multiple_of: round the padded length up to a multiple of this.
        return_labels: add ``labels`` and ``target_values`` (turn off for inference batches).

    Raises:
        ValueError: (on call) for an empty batch, an example without ``input_ids``, fields of
            different lengths, or an unknown field.

    Example:
        >>> collate = NumericDataCollator(pad_token_id=0, padding_side="left")
        >>> batch = collate([{"input_ids": [5, 6, 7]}, {"input_ids": [8, 9], "numeric_values": [0.0, 2.5]}])
        >>> batch["labels"].tolist(), batch["numeric_values"][1].tolist()
        ([[5, 6, 7], [-100, 8, 9]], [0.0, 0.0, 2.5])
    """

    tokenizer: Any = None
    pad_token_id: int | None = None
    padding_side: str | None = None
    pad_to_multiple_of: int | None = None
    return_labels: bool = True

    def __post_init__(self) -> None:
        if self.padding_side not in (None, "left", "right"):
            raise ValueError(
                f"padding_side must be 'left', 'right' or None, got {self.padding_side!r}"
            )
        check_size("pad_to_multiple_of", self.pad_to_multiple_of)

    def _pad_id(self) -> int:
        if self.pad_token_id is not None:
            return int(self.pad_token_id)
        eos = getattr(self.tokenizer, "eos_token_id", None)
        return resolve_pad_token_id(self.tokenizer, eos_token_id=eos)

    def _side(self) -> str:
        if self.padding_side is not None:
            return self.padding_side
        side = getattr(self.tokenizer, "padding_side", None)
        return side if side in ("left", "right") else "right"

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        """Pad ``features`` (a list of examples) into a batch.

        Args:
            features: examples as :class:`NumericDataset` returns them (dicts of 1-D tensors or
                lists); only ``input_ids`` is required.

        Returns:
            A dict of ``[batch, seq]`` tensors: ``input_ids``, ``attention_mask``,
            ``numeric_values`` and (with ``return_labels``) ``labels`` and ``target_values``.

        Raises:
            ValueError: for an empty batch or a malformed example.
        """
        if isinstance(features, Mapping) or not isinstance(features, Sequence) or not features:
            raise ValueError("the collator needs a non-empty list of examples")
        rows = [NumericDataset._check(f, f"features[{b}]") for b, f in enumerate(features)]
        if self.return_labels:
            for r in rows:
                labels = r.get("labels", r["input_ids"])
                r["labels"] = labels.masked_fill(r["attention_mask"] == 0, IGNORE_INDEX)
                targets = regression_targets(r.get("target_values"), r["numeric_values"])
                assert targets is not None  # numeric_values is always there
                r["target_values"] = targets
        length = padded_length(
            [r["input_ids"].numel() for r in rows], pad_to_multiple_of=self.pad_to_multiple_of
        )
        fields = ["input_ids", "attention_mask", "numeric_values"]
        if self.return_labels:
            fields += ["labels", "target_values"]
        return pad_rows(
            [{key: r[key] for key in fields} for r in rows],
            length,
            side=self._side(),
            pad_values=pad_values(self._pad_id()),
        )
