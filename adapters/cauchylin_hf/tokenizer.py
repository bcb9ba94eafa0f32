"""``NumericTokenizer``: wrap any Hugging Face tokenizer so numbers become ``<NUM>`` plus a value.

Encoding splits each text around the numbers of :mod:`cauchylin_hf.numbers`, tokenizes the text
segments with the wrapped tokenizer (no special tokens inside the text, so BPE merges never cross a
number boundary), puts the ``<NUM>`` id where each number was, and returns ``numeric_values``
aligned with ``input_ids`` (the number's float32 value at ``<NUM>`` positions, 0.0 elsewhere).
Decoding reverses it: the segments are decoded with the wrapped tokenizer and each ``<NUM>`` is
written back, either with the number's original spelling (``number_texts``) or with
:func:`~cauchylin_hf.numbers.format_number` of its value.

Round trip: ``decode(ids, values, number_texts=texts, skip_special_tokens=True) == text`` for every
text, provided the wrapped tokenizer round-trips its own text segments (``tok.decode(tok(seg,
add_special_tokens=False).input_ids) == seg``): true for byte-level BPE tokenizers without a
normalizer (GPT-2 style, the corpus tokenizer of :mod:`cauchylin_hf.app.corpus`); Qwen2's tokenizer
NFC-normalizes, so there it holds for NFC text; SentencePiece tokenizers that add a prefix space
do not round-trip whitespace.

Numbers that would touch: a sequence that no text encodes to, such as two adjacent ``<NUM>``
(generation may produce one), would decode to ``-0.250.35``, which reads back as other numbers.
Decoding therefore puts a space on each side of a number where its neighbour would merge with it or
change its sign (between two numbers, ``4`` or ``-4`` after a letter, ``3`` before ``e5``): encoding the
decoded text again finds the same numbers with the same values, in order
(``-0.25 0.35``). A number that reads back as it stands gets no space, so the round trips above are
unchanged.

Special strings written in the text: a literal ``num_token`` (``"<NUM>"``) is cut into ``"<"`` and
``"NUM>"`` before the wrapped tokenizer sees it, so it stays text and round-trips. Other special
tokens of the wrapped tokenizer written in the text (``"<|endoftext|>"``) become their ids, as with
the wrapped tokenizer itself; ``skip_special_tokens=True`` then drops them, so for such text the
exact round trip is ``decode(..., skip_special_tokens=False)`` of an encoding made with
``add_special_tokens=False``.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, cast

import torch
from transformers import AddedToken, AutoTokenizer, BatchEncoding, PreTrainedTokenizerBase

from .batch import check_size, field_dtype, pad_rows, padded_length
from .batch import pad_values as batch_pad_values
from .config import read_json_object
from .data.textfile import check_text
from .encoding import assemble_encoding, truncate_encoding
from .numbers import (
    SplitText,
    find_numbers,
    format_number,
    is_number,
    parse_number,
    split_numbers_batch,
)

__all__ = ["NUMERIC_TOKENIZER_CONFIG", "NumericTokenizer", "check_text", "load_tokenizer_folder"]

NUMERIC_TOKENIZER_CONFIG = "numeric_tokenizer_config.json"
"""File name of the wrapper's settings written by :meth:`NumericTokenizer.save_pretrained`."""

_NO_LIMIT = int(1e12)  # model_max_length above this means "no limit" (HF's VERY_LARGE_INTEGER)
_ID_LIMIT = 2**32  # ids are unsigned 32-bit in the tokenizers library
_SURROGATE = re.compile("[\ud800-\udfff]")  # a lone surrogate (check_text names it)


def load_tokenizer_folder(path: str | os.PathLike, **kwargs: Any) -> PreTrainedTokenizerBase:
    """``AutoTokenizer.from_pretrained`` on a local folder, its failures as one ``ValueError``.

    The tokenizers library raises a bare ``Exception`` for a ``tokenizer.json`` it cannot
    build (a vocabulary that lost the tokens its merges make, a hand-edited file), which would
    otherwise escape every handler as a traceback.

    Args:
        path: the folder.
        **kwargs: passed to ``AutoTokenizer.from_pretrained``.

    Returns:
        The tokenizer.

    Raises:
        ValueError: the folder's tokenizer files cannot be read (the message names the folder
            and the library's reason), or the tokenizer they make encodes text to nothing (a
            missing or emptied ``tokenizer.json`` leaves only the special tokens).

    Example:
        >>> import tempfile
        >>> from cauchylin_hf.testing import tiny_tokenizer
        >>> folder = tempfile.mkdtemp()
        >>> _ = tiny_tokenizer(300).save_pretrained(folder)
        >>> len(load_tokenizer_folder(folder))
        300
    """
    try:
        tokenizer = cast(PreTrainedTokenizerBase, AutoTokenizer.from_pretrained(path, **kwargs))
    except Exception as exc:  # tokenizers raises a bare Exception; every cause is the files'
        lines = str(exc).strip().splitlines()
        reason = lines[-1].strip() if lines else type(exc).__name__
        raise ValueError(
            f"could not load the tokenizer in {os.fspath(path)!r} (its tokenizer.json or "
            f"tokenizer_config.json, damaged or edited?): {reason}"
        ) from exc
    # A tokenizer.json that is missing or lost its vocabulary still loads, from
    # tokenizer_config.json alone, with only the special tokens: every text would vanish.
    if not tokenizer("the", add_special_tokens=False)["input_ids"]:
        raise ValueError(
            f"the tokenizer in {os.fspath(path)!r} encodes text to nothing (its vocabulary holds "
            f"{len(tokenizer)} tokens: a tokenizer.json missing or emptied?)"
        )
    return tokenizer


def _to_int_list(ids: Any, name: str) -> list[int]:
    """A 1-D sequence of ids as a list of Python ints (ValueError naming ``name`` otherwise)."""
    if isinstance(ids, torch.Tensor):
        if ids.dim() != 1:
            raise ValueError(f"{name} must be 1-D, got shape {tuple(ids.shape)}")
        if ids.is_floating_point() or ids.is_complex():
            raise ValueError(f"{name} must hold integers, got dtype {ids.dtype}")
        return ids.tolist()
    if hasattr(ids, "tolist") and hasattr(ids, "ndim"):  # numpy
        if ids.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {tuple(ids.shape)}")
        ids = ids.tolist()
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise ValueError(f"{name} must be a 1-D sequence of ints, got {type(ids).__name__}")
    out = []
    for i, x in enumerate(ids):
        if isinstance(x, bool) or not isinstance(x, int):
            if hasattr(x, "__index__") and not isinstance(x, bool):
                x = int(x.__index__())
            else:
                raise ValueError(f"{name}[{i}] must be an int, got {type(x).__name__}")
        out.append(x)
    return out


def _to_float_list(values: Any, name: str) -> list[float]:
    """A 1-D sequence of reals as a list of Python floats (ValueError naming ``name`` otherwise)."""
    if isinstance(values, torch.Tensor):
        if values.dim() != 1:
            raise ValueError(f"{name} must be 1-D, got shape {tuple(values.shape)}")
        return values.double().tolist()
    if hasattr(values, "tolist") and hasattr(values, "ndim"):
        if values.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {tuple(values.shape)}")
        values = values.tolist()
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ValueError(f"{name} must be a 1-D sequence of numbers, got {type(values).__name__}")
    out = []
    for i, v in enumerate(values):
        try:
            out.append(float(v))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name}[{i}] must be a real number, got {v!r}") from exc
    return out


_CONTEXT = 4  # characters before a number that decide its sign and leading dot (3 suffice)
_LOOKAHEAD = 16  # characters after it that can merge with it (3 suffice)


def _reads_back(left: str, spelling: str, right: str, value: float) -> bool:
    """Whether ``spelling`` between ``left`` and ``right`` scans as one number of ``value``."""
    start, end = len(left), len(left) + len(spelling)
    return any(
        s.start == start and s.end == end and s.value == value
        for s in find_numbers(left + spelling + right)
    )


def _join_numbers(pieces: list[tuple[str, bool]]) -> str:
    """Concatenate decoded pieces ``(text, is a number)``, keeping every number readable.

    A number next to another (two adjacent ``<NUM>``), or next to text it would merge with
    (``4`` after a letter is part of the word; ``-4`` after a letter reads as a hyphen and
    ``4``; ``3`` before ``e5`` reads as ``3e5``),
    gets a space on the side that needs one, so that encoding the text again finds the same
    numbers with the same values. Numbers that read back as they are get no space.
    """
    kept: list[tuple[str, bool]] = []
    for text, number in pieces:
        if not text:
            continue
        if number and kept and kept[-1][1]:
            kept.append((" ", False))  # two numbers never touch
        kept.append((text, number))
    out: list[str] = []
    tail = ""
    for i, (text, number) in enumerate(kept):
        if number and is_number(text):
            value = parse_number(text)
            right = kept[i + 1][0][:_LOOKAHEAD] if i + 1 < len(kept) else ""
            for before, after in (("", ""), (" ", ""), ("", " "), (" ", " ")):
                if _reads_back(tail + before, text, after + right, value):
                    break
            text = before + text + after
        out.append(text)
        tail = (tail + text)[-_CONTEXT:]
    return "".join(out)


def _batch_of_texts(text: Any) -> tuple[list[str], bool]:
    """``(texts, single)``: a ``str`` or a non-empty list/tuple of ``str``, each checked."""
    if isinstance(text, str):
        check_text(text, "text")
        return [text], True
    if not isinstance(text, (list, tuple)):
        raise ValueError(f"text must be a str or a list of str, got {type(text).__name__}")
    if not text:
        raise ValueError("text must be a str or a non-empty list of str, got an empty list")
    for i, t in enumerate(text):
        if not isinstance(t, str):
            raise ValueError(f"text[{i}] must be a str, got {type(t).__name__}")
    if _SURROGATE.search("".join(text)) is not None:  # rare: find the text to name it
        for i, t in enumerate(text):
            check_text(t, f"text[{i}] (text {i + 1})")
    return list(text), False


def _feature_row(feature: Mapping[str, Any], b: int, fill: Mapping[str, Any]) -> dict[str, list]:
    """One example for :meth:`NumericTokenizer.pad`: each field a checked list of its dtype."""
    if "input_ids" not in feature:
        raise ValueError(f"features[{b}] has no 'input_ids'")
    ids = _to_int_list(feature["input_ids"], f"features[{b}]['input_ids']")
    row: dict[str, list] = {}
    seq: list[Any]
    for key, value in feature.items():
        if key == "number_texts":
            row[key] = list(value)
            continue
        if key not in fill:
            raise ValueError(
                f"features[{b}] has the field {key!r} with no padding value; "
                f"pass pad_values={{{key!r}: ...}}"
            )
        if field_dtype(key, fill[key]).is_floating_point:
            seq = _to_float_list(value, f"features[{b}][{key!r}]")
        else:
            seq = _to_int_list(value, f"features[{b}][{key!r}]")
        if len(seq) != len(ids):
            raise ValueError(f"features[{b}][{key!r}] has length {len(seq)}, input_ids {len(ids)}")
        row[key] = seq
    row.setdefault("attention_mask", [1] * len(ids))
    return row


def _decode_inputs(
    input_ids: Any, numeric_values: Any, attention_mask: Any
) -> tuple[list[int], list[float] | None]:
    """:meth:`NumericTokenizer.decode`'s ids and values as checked lists, padding dropped."""
    ids = _to_int_list(input_ids, "input_ids")
    for i, t in enumerate(ids):
        if not 0 <= t < _ID_LIMIT:
            raise ValueError(
                f"input_ids[{i}] = {t} is not a token id (ids lie in [0, {_ID_LIMIT}))"
            )
    values: list[float] | None = None
    if numeric_values is not None:
        values = _to_float_list(numeric_values, "numeric_values")
        if len(values) != len(ids):
            raise ValueError(
                f"numeric_values has length {len(values)} but input_ids has {len(ids)}"
            )
    if attention_mask is not None:
        mask = _to_int_list(attention_mask, "attention_mask")
        if len(mask) != len(ids):
            raise ValueError(f"attention_mask has length {len(mask)} but input_ids has {len(ids)}")
        keep = [i for i, m in enumerate(mask) if m]
        ids = [ids[i] for i in keep]
        if values is not None:
            values = [values[i] for i in keep]
    return ids, values


def _check_return_tensors(return_tensors: Any) -> None:
    """``return_tensors`` of ``__call__`` and ``pad``: None, ``"pt"`` or ``"np"``."""
    if return_tensors not in (None, "pt", "np"):
        raise ValueError(f"return_tensors must be None, 'pt' or 'np', got {return_tensors!r}")


def _examples(features: Any) -> Sequence[Any]:
    """:meth:`NumericTokenizer.pad`'s examples as a list: a dict of columns gives its rows."""
    if isinstance(features, Mapping):
        keys = list(features)
        n = len(features[keys[0]]) if keys else 0
        features = [{key: features[key][i] for key in keys} for i in range(n)]
    if not isinstance(features, Sequence) or len(features) == 0:
        raise ValueError("features must be a non-empty list of examples")
    return features


def _padding_length(padding: Any, max_length: int | None) -> int | None:
    """The length ``padding`` pads at least to: ``max_length`` for ``"max_length"``, None (the
    longest row) for ``True``/``"longest"``."""
    if padding is True or padding == "longest":
        return None
    if padding == "max_length":
        if max_length is None:
            raise ValueError("padding='max_length' needs max_length")
        return max_length
    raise ValueError(f"padding must be True, 'longest' or 'max_length', got {padding!r}")


def _fields(rows: list[dict[str, list]]) -> list[str]:
    """The field names of the first example, which every example must have."""
    keys = list(rows[0])
    for b, row in enumerate(rows):
        if list(row) != keys and set(row) != set(keys):
            raise ValueError(f"features[{b}] has fields {sorted(row)}, features[0] {keys}")
    return keys


def _padded(
    rows: list[dict[str, list]],
    keys: list[str],
    fill: Mapping[str, Any],
    length: int,
    side: str,
    return_tensors: str | None,
) -> dict[str, Any]:
    """The examples' fields padded to ``length`` on ``side``, as ``return_tensors`` asks
    (``number_texts`` passed through as a list per example)."""
    fields = [key for key in keys if key != "number_texts"]
    # Float fields stay float64 until the output type is known, so lists keep exact values.
    dtypes = {key: field_dtype(key, fill[key]) for key in fields}
    wide = {k: torch.float64 if d.is_floating_point else torch.long for k, d in dtypes.items()}
    padded = pad_rows(
        [{key: torch.tensor(row[key], dtype=wide[key]) for key in fields} for row in rows],
        length,
        side=side,
        pad_values={key: fill[key] for key in fields},
        dtypes=wide,
    )
    out: dict[str, Any] = {}
    for key in keys:
        if key == "number_texts":
            out[key] = [row[key] for row in rows]
        elif return_tensors is None:
            out[key] = padded[key].tolist()
        elif return_tensors == "pt":
            out[key] = padded[key].to(dtypes[key])
        else:
            out[key] = padded[key].to(dtypes[key]).numpy()
    return out


def _check_number_texts(number_texts: Any, count: int) -> None:
    """``decode``'s ``number_texts``: None, or a list of one entry per ``<NUM>`` position."""
    if number_texts is None:
        return
    if isinstance(number_texts, str) or not isinstance(number_texts, Sequence):
        raise ValueError(
            f"number_texts must be a list of str or None, got {type(number_texts).__name__}"
        )
    if len(number_texts) != count:
        raise ValueError(
            f"number_texts has {len(number_texts)} entries but input_ids has "
            f"{count} <NUM> positions"
        )


def _number_piece(
    n: int,
    pos: int,
    number_texts: Sequence[str | None] | None,
    values: list[float] | None,
    placeholder: str,
) -> tuple[str, bool]:
    """The text of the ``n``-th ``<NUM>`` (at ``pos``) and whether it is a number: its spelling,
    else its value formatted, else ``placeholder``."""
    spelling = number_texts[n] if number_texts is not None else None
    if spelling is not None:
        if not isinstance(spelling, str):
            raise ValueError(
                f"number_texts[{n}] must be a str or None, got {type(spelling).__name__}"
            )
        return spelling, True
    if values is not None:
        v = values[pos]
        if not math.isfinite(v):
            raise ValueError(
                f"numeric_values holds {v} at the <NUM> position {pos}; a number must be "
                f"finite to be written into text"
            )
        return format_number(v), True
    if number_texts is not None:
        raise ValueError(f"number_texts[{n}] is None and no numeric_values were given to format it")
    return placeholder, False


def _decode_plan(
    ids: list[int],
    values: list[float] | None,
    number_texts: Sequence[str | None] | None,
    num_token_id: int,
    placeholder: str,
) -> tuple[list[tuple[str | None, bool]], list[list[int]]]:
    """``(pieces, segments)`` of a sequence to decode: the runs of ids between ``<NUM>``
    positions (to decode with the wrapped tokenizer) and, in order, the pieces of the text
    ``(text, is a number)``, where a None text stands for the next decoded segment."""
    positions = [i for i, t in enumerate(ids) if t == num_token_id]
    _check_number_texts(number_texts, len(positions))
    pieces: list[tuple[str | None, bool]] = []
    segments: list[list[int]] = []
    start = 0
    for n, pos in enumerate([*positions, len(ids)]):
        if pos > start:
            segments.append(ids[start:pos])
            pieces.append((None, False))
        if pos == len(ids):
            break
        pieces.append(_number_piece(n, pos, number_texts, values, placeholder))
        start = pos + 1
    return pieces, segments


def _rows(x: Any, name: str) -> list[Any]:
    """Split a 2-D tensor / array / sequence of sequences into its rows."""
    if isinstance(x, torch.Tensor) or (hasattr(x, "ndim") and hasattr(x, "shape")):
        if x.ndim != 2:
            raise ValueError(f"{name} must be 2-D [batch, seq], got shape {tuple(x.shape)}")
        return list(x)
    if isinstance(x, (str, bytes)) or not isinstance(x, Sequence):
        raise ValueError(f"{name} must be a batch of sequences, got {type(x).__name__}")
    return list(x)


class NumericTokenizer:
    """Wrap a Hugging Face tokenizer so each number becomes ``<NUM>`` with its value alongside.

    The ``<NUM>`` id policy:

    * ``num_token_id=None`` (default): if ``num_token`` is in the wrapped tokenizer's vocabulary its
      id is used; otherwise ``num_token`` is added to the wrapped tokenizer as a special token (the
      tokenizer object is modified; ``num_token_added`` is then True and the model must grow its
      embeddings to ``len(self)``).
    * ``num_token_id=k`` given explicitly (e.g. the first spare embedding row of a Qwen model,
      ``k >= len(tokenizer)``): ``<NUM>`` maps to ``k`` without touching the wrapped tokenizer; the
      wrapper inserts and recognises ``k`` itself, the wrapped tokenizer never sees it. ``k`` must
      not be the id of another token.

    Args:
        tokenizer: any ``PreTrainedTokenizerBase`` (fast or slow).
        num_token: the token string of ``<NUM>``; written in decoded text only when no values are
            given.
        num_token_id: explicit id for ``<NUM>``, or None for the policy above.
        padding_side: ``"left"`` or ``"right"``; None follows ``tokenizer.padding_side`` (read at
            each call).

    Raises:
        ValueError: for a tokenizer of the wrong type, an empty ``num_token``, a negative
            ``num_token_id``, an id that belongs to another token, or a bad ``padding_side``.

    Example:
        >>> from cauchylin_hf.testing import tiny_tokenizer
        >>> ntok = NumericTokenizer(tiny_tokenizer(300))  # <NUM> is added as id 300
        >>> ntok.num_token_id, ntok.num_token_added, len(ntok)
        (300, True, 301)
        >>> enc = ntok(["3 boxes of 12 eggs", "-4.5 C"], padding=True, return_tensors="pt")
        >>> tuple(enc["input_ids"].shape), enc["numeric_values"].dtype
        ((2, 17), torch.float32)
        >>> enc["attention_mask"].sum(1).tolist(), enc["numeric_values"][1, :3].tolist()
        ([17, 3], [-4.5, 0.0, 0.0])
        >>> ntok.batch_decode(enc["input_ids"], enc["numeric_values"], skip_special_tokens=True)
        ['3 boxes of 12 eggs', '-4.5 C']

        An explicit id (e.g. a spare embedding row) leaves the wrapped tokenizer unchanged:

        >>> spare = NumericTokenizer(tiny_tokenizer(300), num_token_id=305)
        >>> spare.num_token_added, len(spare.tokenizer), len(spare), spare("7 m")["input_ids"][0]
        (False, 300, 306, 305)
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        num_token: str = "<NUM>",
        num_token_id: int | None = None,
        *,
        padding_side: str | None = None,
    ) -> None:
        if not isinstance(tokenizer, PreTrainedTokenizerBase):
            raise ValueError(
                f"tokenizer must be a transformers PreTrainedTokenizerBase, "
                f"got {type(tokenizer).__name__}"
            )
        if not isinstance(num_token, str) or not num_token:
            raise ValueError(f"num_token must be a non-empty str, got {num_token!r}")
        self.tokenizer = tokenizer
        self.num_token = num_token
        self.padding_side = padding_side
        self.num_token_added = False
        vocab = tokenizer.get_vocab()
        if num_token_id is None:
            if num_token in vocab:
                num_token_id = vocab[num_token]
            else:
                tokenizer.add_tokens(
                    [AddedToken(num_token, special=True, normalized=False)], special_tokens=True
                )
                num_token_id = cast(int, tokenizer.convert_tokens_to_ids(num_token))
                self.num_token_added = True
        else:
            if isinstance(num_token_id, bool) or not isinstance(num_token_id, int):
                raise ValueError(f"num_token_id must be an int or None, got {num_token_id!r}")
            if num_token_id < 0:
                raise ValueError(f"num_token_id must be >= 0, got {num_token_id}")
            if num_token in vocab and vocab[num_token] != num_token_id:
                raise ValueError(
                    f"num_token_id={num_token_id} but the tokenizer already maps {num_token!r} to "
                    f"{vocab[num_token]}"
                )
        self.num_token_id: int = int(num_token_id)
        self._check_num_id()

    # ------------------------------------------------------------------ properties

    @property
    def padding_side(self) -> str:
        """``"left"`` or ``"right"``: the wrapper's setting, else the wrapped tokenizer's."""
        return str(self._padding_side or getattr(self.tokenizer, "padding_side", "right"))

    @padding_side.setter
    def padding_side(self, side: str | None) -> None:
        if side not in (None, "left", "right"):
            raise ValueError(f"padding_side must be 'left', 'right' or None, got {side!r}")
        self._padding_side = side

    @property
    def pad_token_id(self) -> int | None:
        """The wrapped tokenizer's pad id (None when it has no pad token)."""
        return self.tokenizer.pad_token_id

    @property
    def bos_token_id(self) -> int | None:
        """The wrapped tokenizer's bos id (None when it has none)."""
        return self.tokenizer.bos_token_id

    @property
    def eos_token_id(self) -> int | None:
        """The wrapped tokenizer's eos id (None when it has none)."""
        return self.tokenizer.eos_token_id

    def __len__(self) -> int:
        """Ids the model must embed: ``max(len(tokenizer), num_token_id + 1)``."""
        return max(len(self.tokenizer), self.num_token_id + 1)

    def __repr__(self) -> str:
        """Short description with the wrapped tokenizer's class and the ``<NUM>`` id."""
        return (
            f"NumericTokenizer({type(self.tokenizer).__name__}, num_token={self.num_token!r}, "
            f"num_token_id={self.num_token_id}, padding_side={self.padding_side!r})"
        )

    def _check_num_id(self) -> None:
        k = self.num_token_id
        if k < len(self.tokenizer):
            token = self.tokenizer.convert_ids_to_tokens(k)
            if token != self.num_token:
                raise ValueError(
                    f"num_token_id={k} is the id of the token {token!r} in the wrapped tokenizer, "
                    f"not of {self.num_token!r}; pass num_token={token!r} to use that token as "
                    f"<NUM>, or an id >= len(tokenizer)={len(self.tokenizer)}"
                )

    def _special_affixes(self) -> tuple[list[int], list[int]]:
        """The ids the wrapped tokenizer puts before and after a text with special tokens on."""
        tok = self.tokenizer
        probe = "a"
        plain = tok(probe, add_special_tokens=False, verbose=False)["input_ids"]
        full = tok(probe, add_special_tokens=True, verbose=False)["input_ids"]
        n = len(plain)
        for i in range(len(full) - n + 1):
            if full[i : i + n] == plain:
                return list(full[:i]), list(full[i + n :])
        return list(tok("", add_special_tokens=True, verbose=False)["input_ids"]), []

    def _pieces(self, segment: str) -> list[str]:
        """Cut a literal ``num_token`` in a text segment so the wrapped tokenizer reads it as text.

        When the wrapped tokenizer knows ``num_token`` as a token, ``"<NUM>"`` written in the text
        would become the ``<NUM>`` id; it is tokenized as ``"<"`` and ``"NUM>"`` instead (like
        ``split_special_tokens``), so it stays text and round-trips.
        """
        token = self.num_token
        if len(token) < 2 or token not in segment or self.num_token_id >= len(self.tokenizer):
            return [segment]
        parts = segment.split(token)
        out = [parts[0]]
        for part in parts[1:]:
            out += [token[:1], token[1:], part]
        return [p for p in out if p]

    # ------------------------------------------------------------------ encoding

    def __call__(
        self,
        text: str | Sequence[str],
        *,
        add_special_tokens: bool = True,
        padding: bool | str = False,
        truncation: bool | str | None = None,
        max_length: int | None = None,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_tensors: str | None = None,
        return_attention_mask: bool = True,
        return_number_texts: bool = False,
    ) -> BatchEncoding:
        """Tokenize one text or a batch, numbers replaced by ``<NUM>`` and their values kept.

        Args:
            text: a ``str`` or a non-empty list/tuple of ``str``.
            add_special_tokens: add the wrapped tokenizer's special tokens (e.g. bos) at the
                sequence ends, as it would for the whole text.
            padding: ``False``/``"do_not_pad"``, ``True``/``"longest"``, or ``"max_length"``.
            truncation: truthy (``True``, ``"longest_first"``, ``"only_first"``) cuts each
                sequence to ``max_length`` (default: the wrapped tokenizer's ``model_max_length``)
                including its special tokens, on the wrapped tokenizer's ``truncation_side``.
            max_length: the length for truncation and ``padding="max_length"``.
            pad_to_multiple_of: with padding, round padded lengths up to a multiple of this.
            padding_side: ``"left"``/``"right"``; default :attr:`padding_side`.
            return_tensors: None (Python lists), ``"pt"`` (torch) or ``"np"`` (NumPy).
            return_attention_mask: include ``attention_mask``.
            return_number_texts: include ``number_texts``: the original spelling of each number
                that made it into ``input_ids``, in order (a list per text; never a tensor). Pass
                it to :meth:`decode` for an exact round trip; leave it off when the encoding goes
                to a model as ``**kwargs``.

        Returns:
            A ``BatchEncoding`` with ``input_ids`` (int64 ``[batch, seq]`` for ``"pt"``),
            ``numeric_values`` (float32, same shape, the value at each ``<NUM>``, 0.0 elsewhere and
            at padding), ``attention_mask`` and optionally ``number_texts``. A single ``str`` with
            ``return_tensors=None`` gives flat lists; with tensors a batch dimension of 1.

        Raises:
            ValueError: for text that is not a str or list of str, an unknown padding or
                return_tensors option, padding without a pad token, ``padding="max_length"``
                without ``max_length``, a ``max_length`` or ``pad_to_multiple_of`` that is not a
                positive int, a ``max_length`` too small for the special tokens, ragged
                sequences with tensors and no padding, a text with a lone surrogate
                (:func:`check_text`), or text that the wrapped tokenizer maps to the ``<NUM>`` id (a literal ``num_token`` in the text is not such text: it is
                cut so that it stays text, see the module docstring).

        Example:
            >>> from cauchylin_hf.testing import tiny_tokenizer
            >>> ntok = NumericTokenizer(tiny_tokenizer(300))
            >>> enc = ntok("The price rose from 4.50 to 5.00 dollars", return_number_texts=True)
            >>> enc["number_texts"], [v for v in enc["numeric_values"] if v != 0.0]
            (['4.50', '5.00'], [4.5, 5.0])
            >>> enc["input_ids"].count(ntok.num_token_id), len(enc["input_ids"])  # 32 bytes of text
            (2, 34)
        """
        texts, single = _batch_of_texts(text)
        _check_return_tensors(return_tensors)
        check_size("max_length", max_length)
        check_size("pad_to_multiple_of", pad_to_multiple_of)
        self._check_num_id()
        # 1. cut every text at its numbers; tokenize all segments in one call
        split = split_numbers_batch(texts)
        segment_ids = self._segment_ids(split, texts)
        # 2. per text: ids and values interleaved, truncated, special tokens at the ends
        prefix, suffix = self._special_affixes() if add_special_tokens else ([], [])
        max_length, budget = self._budget(truncation, max_length, len(prefix) + len(suffix))
        columns = self._assemble(split, segment_ids, prefix, suffix, budget)
        spellings = columns.pop("number_texts")
        if return_attention_mask:
            columns["attention_mask"] = [[1] * len(ids) for ids in columns["input_ids"]]
        if return_number_texts:
            columns["number_texts"] = spellings
        # 3. pad and convert
        return self._output(
            columns,
            single,
            padding=padding,
            max_length=max_length,
            pad_to_multiple_of=pad_to_multiple_of,
            padding_side=padding_side,
            return_tensors=return_tensors,
        )

    def _assemble(
        self,
        split: list[SplitText],
        segment_ids: list[list[list[int]]],
        prefix: list[int],
        suffix: list[int],
        budget: int | None,
    ) -> dict[str, list]:
        """Each text's ids, values and number texts (:mod:`cauchylin_hf.encoding`), cut to
        ``budget`` positions (None: uncut) and set between the special tokens."""
        side = getattr(self.tokenizer, "truncation_side", "right")
        k = self.num_token_id
        columns: dict[str, list] = {"input_ids": [], "numeric_values": [], "number_texts": []}
        zeros_before, zeros_after = [0.0] * len(prefix), [0.0] * len(suffix)
        for parts, ids_of in zip(split, segment_ids, strict=True):
            ids, values = assemble_encoding(ids_of, parts.values, k)
            spellings = parts.spellings
            if budget is not None and len(ids) > budget:
                ids, values, spellings = truncate_encoding(ids, values, spellings, budget, k, side)
            if prefix or suffix:
                ids, values = prefix + ids + suffix, zeros_before + values + zeros_after
            columns["input_ids"].append(ids)
            columns["numeric_values"].append(values)
            columns["number_texts"].append(spellings)
        return columns

    def _segment_ids(self, split: list[SplitText], texts: list[str]) -> list[list[list[int]]]:
        """The ids of every text segment (``[]`` for an empty one).

        Each distinct segment is tokenized once, all in one call: segments are tokenized apart
        from their neighbours, so a segment's ids do not depend on where it stands (the text
        between a table's numbers is the same in every row).
        """
        unique = list(dict.fromkeys(seg for parts in split for seg in parts.segments if seg))
        token = self.num_token
        if len(token) >= 2 and self.num_token_id < len(self.tokenizer) and token in "".join(texts):
            pieces = [self._pieces(seg) for seg in unique]
            piece_ids = iter(self._encode_plain([p for ps in pieces for p in ps]))
            flat = [[t for _ in ps for t in next(piece_ids)] for ps in pieces]
        else:
            flat = self._encode_plain(unique)
        k = self.num_token_id
        ids_of = dict(zip(unique, flat, strict=True))
        if any(k in ids for ids in flat):
            for source, parts in zip(texts, split, strict=True):
                if any(k in ids_of[seg] for seg in parts.segments if seg):
                    raise ValueError(
                        f"text contains text the wrapped tokenizer maps to the <NUM> id {k} "
                        f"({self.num_token!r}): {source[:80]!r}; choose another num_token"
                    )
        empty: list[int] = []
        return [[ids_of[seg] if seg else empty for seg in parts.segments] for parts in split]

    def _encode_plain(self, texts: list[str]) -> list[list[int]]:
        """The wrapped tokenizer's ids of each text, without special tokens.

        A fast tokenizer's Rust encoder is called directly when the Hugging Face call would
        only switch off truncation and padding that are already off: its per-text conversion to
        Python dicts costs more than the encoding.
        """
        if not texts:
            return []
        tok = self.tokenizer
        backend = getattr(tok, "backend_tokenizer", None) if tok.is_fast else None
        if (
            backend is not None
            and backend.truncation is None
            and backend.padding is None
            and backend.encode_special_tokens == bool(getattr(tok, "split_special_tokens", False))
        ):
            return [e.ids for e in backend.encode_batch_fast(texts, add_special_tokens=False)]
        return cast(
            "list[list[int]]", tok(texts, add_special_tokens=False, verbose=False)["input_ids"]
        )

    def _budget(
        self, truncation: bool | str | None, max_length: int | None, n_special: int
    ) -> tuple[int | None, int | None]:
        """``(max_length, budget)``: the length truncation cuts to (by default the wrapped
        tokenizer's ``model_max_length``) and the positions it leaves the text (None: no cut)."""
        if not truncation or truncation == "do_not_truncate":
            return max_length, None
        if max_length is None:
            model_max = getattr(self.tokenizer, "model_max_length", None)
            max_length = model_max if model_max is not None and model_max < _NO_LIMIT else None
        if max_length is None:
            return None, None
        if max_length < n_special:
            raise ValueError(
                f"max_length={max_length} is shorter than the {n_special} special tokens the "
                f"wrapped tokenizer adds"
            )
        return max_length, max_length - n_special

    def _output(
        self,
        columns: dict[str, list],
        single: bool,
        *,
        padding: bool | str,
        max_length: int | None,
        pad_to_multiple_of: int | None,
        padding_side: str | None,
        return_tensors: str | None,
    ) -> BatchEncoding:
        """The encoding's columns padded and converted as ``__call__``'s arguments ask."""
        if padding is False or padding == "do_not_pad" or padding is None:
            if return_tensors is not None and len(set(map(len, columns["input_ids"]))) > 1:
                raise ValueError(
                    "sequences have different lengths: pass padding=True to return tensors"
                )
            if return_tensors is None:
                return BatchEncoding({k: v[0] for k, v in columns.items()} if single else columns)
            padding = True  # equal lengths: padding is a no-op that builds the tensors
        with_mask = "attention_mask" in columns
        enc = self.pad(
            columns,
            padding=padding,
            max_length=max_length,
            pad_to_multiple_of=pad_to_multiple_of,
            padding_side=padding_side,
            return_tensors=return_tensors,
        )
        if not with_mask:
            del enc["attention_mask"]
        if single and return_tensors is None:
            enc = BatchEncoding({key: v[0] for key, v in enc.items()})
        return enc

    def pad(
        self,
        features: Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Any]],
        *,
        padding: bool | str = True,
        max_length: int | None = None,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_tensors: str | None = "pt",
        pad_values: Mapping[str, float | int] | None = None,
    ) -> BatchEncoding:
        """Pad already-tokenized examples to one length (a data collator for the HF Trainer).

        Per-position fields are padded as :data:`cauchylin_hf.batch.BATCH_FIELDS` says
        (``input_ids`` with the pad id, ``attention_mask`` 0, ``numeric_values`` 0.0, ``labels``
        -100, ``target_values`` 0.0; override or extend with ``pad_values``). ``number_texts`` is passed through as a list. A missing
        ``attention_mask`` is created.

        Args:
            features: a list of examples (dicts of per-position lists / 1-D tensors) or a dict of
                lists of them.
            padding: ``True``/``"longest"`` or ``"max_length"``.
            max_length: the target length for ``"max_length"``.
            pad_to_multiple_of: round the padded length up to a multiple of this.
            padding_side: ``"left"``/``"right"``; default :attr:`padding_side`.
            return_tensors: ``"pt"`` (default), ``"np"`` or None (lists).
            pad_values: extra or overriding padding values per field name.

        Returns:
            A ``BatchEncoding`` of ``[batch, seq]`` fields (int64, or float32 for
            ``numeric_values`` / ``target_values`` and any field padded with a float).

        Raises:
            ValueError: for an empty batch, fields of mismatched length within an example, an
                unknown per-position field, no pad token, bad ``padding`` / ``padding_side`` /
                ``return_tensors``, ``"max_length"`` without ``max_length``, or a ``max_length`` /
                ``pad_to_multiple_of`` that is not a positive int.

        Example:
            >>> from cauchylin_hf.testing import tiny_tokenizer
            >>> ntok = NumericTokenizer(tiny_tokenizer(300))
            >>> batch = ntok.pad([ntok("3 eggs"), ntok("12 eggs and 4 more")])
            >>> tuple(batch["numeric_values"].shape), batch["attention_mask"].sum(1).tolist()
            ((2, 17), [6, 17])
            >>> bool((batch["input_ids"][0, 6:] == ntok.pad_token_id).all())
            True
            >>> batch["numeric_values"][0, :2].tolist(), batch["numeric_values"][1, 11].item()
            ([3.0, 0.0], 4.0)
        """
        examples = _examples(features)
        check_size("max_length", max_length)
        check_size("pad_to_multiple_of", pad_to_multiple_of)
        side = padding_side or self.padding_side
        if side not in ("left", "right"):
            raise ValueError(f"padding_side must be 'left' or 'right', got {side!r}")
        _check_return_tensors(return_tensors)
        at_least = _padding_length(padding, max_length)
        fill = {**batch_pad_values(self.pad_token_id), **(pad_values or {})}
        rows = [_feature_row(feature, b, fill) for b, feature in enumerate(examples)]
        keys = _fields(rows)
        lengths = [len(r["input_ids"]) for r in rows]
        target = padded_length(lengths, max_length=at_least, pad_to_multiple_of=pad_to_multiple_of)
        if target > min(lengths) and fill["input_ids"] is None:
            raise ValueError(
                "padding needs a pad token but the wrapped tokenizer has none; set e.g. "
                "tokenizer.pad_token = tokenizer.eos_token"
            )
        return BatchEncoding(_padded(rows, keys, fill, target, side, return_tensors))

    # ------------------------------------------------------------------ decoding

    def decode(
        self,
        input_ids: Any,
        numeric_values: Any = None,
        *,
        number_texts: Sequence[str | None] | None = None,
        attention_mask: Any = None,
        skip_special_tokens: bool = False,
        **kwargs: Any,
    ) -> str:
        """Decode one sequence, writing each ``<NUM>`` back as a number.

        Each ``<NUM>`` position becomes, in order of preference: its entry of ``number_texts``
        (when given and not None), :func:`~cauchylin_hf.numbers.format_number` of its value in
        ``numeric_values``, or — with neither — the ``num_token`` string (dropped when
        ``skip_special_tokens``). The other ids are decoded with the wrapped tokenizer, run by run
        between ``<NUM>`` positions, with ``clean_up_tokenization_spaces=False`` unless given. A
        number that would merge with its neighbour (another number, or text that would change
        it) is set off by a space, so that the text reads back as the same numbers (see the
        module docstring).

        Args:
            input_ids: ``[seq]`` ids (list, 1-D tensor or array).
            numeric_values: ``[seq]`` values aligned with ``input_ids``, or None.
            number_texts: one entry per ``<NUM>`` position (after ``attention_mask`` is applied),
                a spelling or None (use the value).
            attention_mask: ``[seq]``; positions with 0 (padding) are dropped first.
            skip_special_tokens: drop the wrapped tokenizer's special tokens (bos, eos, pad).
            **kwargs: passed to the wrapped tokenizer's ``decode``.

        Returns:
            The text.

        Raises:
            ValueError: for non-integer or non-1-D ``input_ids`` (use :meth:`batch_decode` for a
                batch), a negative id, ``numeric_values`` / ``attention_mask`` of another length, a
                ``number_texts`` whose length differs from the number of ``<NUM>`` positions, or a
                nan/inf value at a ``<NUM>`` position that has no spelling.

        Example:
            >>> from cauchylin_hf.testing import tiny_tokenizer
            >>> ntok = NumericTokenizer(tiny_tokenizer(300))
            >>> enc = ntok("4.50 eggs", return_number_texts=True)
            >>> ntok.decode(enc["input_ids"], enc["numeric_values"])
            '4.5 eggs'
            >>> ntok.decode(enc["input_ids"], number_texts=enc["number_texts"])
            '4.50 eggs'
            >>> ntok.decode(enc["input_ids"])
            '<NUM> eggs'
        """
        ids, values = _decode_inputs(input_ids, numeric_values, attention_mask)
        placeholder = "" if skip_special_tokens else self.num_token
        pieces, segments = _decode_plan(ids, values, number_texts, self.num_token_id, placeholder)
        kwargs.setdefault("clean_up_tokenization_spaces", False)
        decoded = (
            self.tokenizer.batch_decode(segments, skip_special_tokens=skip_special_tokens, **kwargs)
            if segments
            else []
        )
        it = iter(decoded)
        return _join_numbers([(next(it) if t is None else t, num) for t, num in pieces])

    def batch_decode(
        self,
        sequences: Any,
        numeric_values: Any = None,
        *,
        number_texts: Sequence[Sequence[str | None] | None] | None = None,
        attention_mask: Any = None,
        skip_special_tokens: bool = False,
        **kwargs: Any,
    ) -> list[str]:
        """Decode a batch; each row as in :meth:`decode`.

        Args:
            sequences: ``[batch, seq]`` ids (2-D tensor / array, or a list of id lists).
            numeric_values: ``[batch, seq]`` values, or None.
            number_texts: one list (or None) per row, as ``decode``'s ``number_texts``.
            attention_mask: ``[batch, seq]``, or None.
            skip_special_tokens: drop the wrapped tokenizer's special tokens.
            **kwargs: passed to the wrapped tokenizer's ``decode``.

        Returns:
            One text per row.

        Raises:
            ValueError: when a batch argument has another number of rows than ``sequences``, or
                for any error of :meth:`decode` in a row.

        Example:
            >>> from cauchylin_hf.testing import tiny_tokenizer
            >>> ntok = NumericTokenizer(tiny_tokenizer(300))
            >>> enc = ntok(["3 eggs", "-4.5 C"], padding=True, return_tensors="pt")
            >>> ntok.batch_decode(enc["input_ids"], enc["numeric_values"],
            ...                   attention_mask=enc["attention_mask"])
            ['3 eggs', '-4.5 C']
        """
        rows = _rows(sequences, "sequences")
        others = {}
        for name, arg in (
            ("numeric_values", numeric_values),
            ("number_texts", number_texts),
            ("attention_mask", attention_mask),
        ):
            if arg is None:
                others[name] = [None] * len(rows)
                continue
            arg_rows = _rows(arg, name) if name != "number_texts" else list(arg)
            if len(arg_rows) != len(rows):
                raise ValueError(f"{name} has {len(arg_rows)} rows but sequences has {len(rows)}")
            others[name] = arg_rows
        return [
            self.decode(
                row,
                others["numeric_values"][b],
                number_texts=others["number_texts"][b],
                attention_mask=others["attention_mask"][b],
                skip_special_tokens=skip_special_tokens,
                **kwargs,
            )
            for b, row in enumerate(rows)
        ]

    # ------------------------------------------------------------------ save / load

    def save_pretrained(self, save_directory: str | os.PathLike) -> tuple[str, ...]:
        """Save the wrapped tokenizer and the wrapper's settings to a folder.

        Args:
            save_directory: the folder (created if missing).

        Returns:
            The paths of the written files.

        Raises:
            ValueError: when ``save_directory`` is an existing file.

        Example:
            >>> import os, tempfile
            >>> from cauchylin_hf.testing import tiny_tokenizer
            >>> ntok = NumericTokenizer(tiny_tokenizer(300))
            >>> files = ntok.save_pretrained(tempfile.mkdtemp())
            >>> os.path.basename(files[-1])
            'numeric_tokenizer_config.json'
        """
        if os.path.isfile(save_directory):
            raise ValueError(f"save_directory must be a folder, got the file {save_directory!r}")
        os.makedirs(save_directory, exist_ok=True)
        files = tuple(str(p) for p in self.tokenizer.save_pretrained(save_directory))
        path = os.path.join(save_directory, NUMERIC_TOKENIZER_CONFIG)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "num_token": self.num_token,
                    "num_token_id": self.num_token_id,
                    "padding_side": self._padding_side,
                },
                f,
                indent=2,
            )
        return (*files, path)

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike,
        **kwargs: Any,
    ) -> NumericTokenizer:
        """Load a wrapper saved with :meth:`save_pretrained` (or wrap any local tokenizer folder).

        Args:
            path: a local folder with a tokenizer (and optionally the wrapper's settings file).
            **kwargs: passed to ``AutoTokenizer.from_pretrained``.

        Returns:
            The ``NumericTokenizer``; without a settings file, the default ``<NUM>`` policy.

        Raises:
            ValueError: when ``path`` is not an existing folder, its tokenizer files cannot be
                read, or its settings file is not a JSON object of valid settings (the message
                names the file).

        Example:
            >>> import tempfile
            >>> from cauchylin_hf.testing import tiny_tokenizer
            >>> folder = tempfile.mkdtemp()
            >>> _ = NumericTokenizer(tiny_tokenizer(300), padding_side="left").save_pretrained(folder)
            >>> ntok = NumericTokenizer.from_pretrained(folder)
            >>> ntok.num_token_id, ntok.padding_side, ntok("4.5 C")["numeric_values"]
            (300, 'left', [4.5, 0.0, 0.0])
        """
        if not os.path.isdir(path):
            raise ValueError(f"path must be an existing tokenizer folder, got {str(path)!r}")
        tokenizer = load_tokenizer_folder(path, **kwargs)
        settings: dict[str, Any] = {}
        config = os.path.join(path, NUMERIC_TOKENIZER_CONFIG)
        if os.path.isfile(config):
            settings = read_json_object(config)
        try:
            return cls(
                tokenizer,
                num_token=settings.get("num_token", "<NUM>"),
                num_token_id=settings.get("num_token_id"),
                padding_side=settings.get("padding_side"),
            )
        except ValueError as exc:
            if not settings:
                raise
            raise ValueError(f"{config}: {exc}") from exc
