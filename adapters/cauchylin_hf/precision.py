"""How many decimals to write: the precision the training data used, per field.

A model predicts a float (``139.1988``) where the data wrote ``139``. :class:`NumberPrecision`
learns, from the training texts, the decimals each *field* was written with (the field of a
number is the words just before it, :func:`~cauchylin_hf.numbers.field_of`; ``"price 4.25"``
has field ``price`` and 2 decimals), and writes a predicted number of that field with as many:
the largest count seen for the field, or the largest over all numbers for a field the data never
had.

A number counts the decimals of its *shortest* spelling that reads back to the same float32
value (the value the model reads), and never more than it was written with: ``12.090000000000``
(a table written by pandas with 12 decimals) counts 2, like ``12.09``; ``0.30000000000000004``
counts 1; ``4.50`` counts 1 (trailing zeros carry no value); ``1.5e-3`` counts 4 (``0.0015``).

The command line saves it next to the model (``data_format.json``) when it trains; the library
reads it back from a model's folder (:meth:`NumberPrecision.of_model`), so
:func:`cauchylin_hf.generation.generate` and the command line write a generated number by the
same rule (the command line's ``--decimals N`` overrides the count; at most
:data:`MAX_DECIMALS`).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .numbers import (
    NumberSpan,
    field_of,
    find_numbers,
    format_number,
    split_numbers_batch,
    to_float32,
)

__all__ = [
    "DATA_FORMAT_FILE",
    "MAX_DECIMALS",
    "NumberPrecision",
    "check_decimals",
    "decimals_of",
    "field_before",
    "needed_decimals",
    "needed_decimals_batch",
]

DATA_FORMAT_FILE = "data_format.json"
"""The file of a model folder that records how its training data wrote numbers (its
``"precision"`` entry: :meth:`NumberPrecision.to_dict`), written by the command line's ``train``."""

MAX_DECIMALS = 50
"""The most decimals a number is written with. A float32 needs at most 46 (its smallest
subnormal, ``1e-45``, spelled ``0.000...0001``); a larger count (a corrupt ``data_format.json``,
``--decimals 1000000000``) is refused rather than written as a string of a billion zeros."""


def _short(value: Any) -> str:
    """``repr(value)``, cut to 40 characters (a corrupt file can hold a huge value)."""
    try:
        text = repr(value)
    except ValueError:  # an int too long for str()
        return f"an int of more than {sys.get_int_max_str_digits()} digits"
    return text if len(text) <= 40 else text[:37] + "..."


def check_decimals(value: Any, name: str) -> int:
    """Check a count of decimals.

    Args:
        value: the count.
        name: what to call it in the error.

    Returns:
        ``value``.

    Raises:
        ValueError: ``value`` is not an int in ``[0, MAX_DECIMALS]`` (the message shows at most
            40 characters of it).

    Example:
        >>> check_decimals(2, "decimals")
        2
        >>> check_decimals(10**9, "decimals")
        Traceback (most recent call last):
        ...
        ValueError: decimals must be an int in [0, 50], got 1000000000
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_DECIMALS:
        raise ValueError(f"{name} must be an int in [0, {MAX_DECIMALS}], got {_short(value)}")
    return value


def decimals_of(spelling: str) -> int:
    """The decimals a number's spelling shows: digits after the point, shifted by the exponent.

    Args:
        spelling: a number as written (``"4.50"``, ``"-3"``, ``"1.5e-3"``).

    Returns:
        ``>= 0``: ``"4.50"`` 2, ``"-3"`` 0, ``"1.5e-3"`` 4, ``"2.5e3"`` 0.

    Raises:
        ValueError: ``spelling`` is not one number.

    Example:
        >>> [decimals_of(s) for s in ("4.50", "-3", "1.5e-3", "2.5e3", ".25")]
        [2, 0, 4, 0, 2]
    """
    spans = find_numbers(spelling)
    if len(spans) != 1 or spans[0].text != spelling:
        raise ValueError(f"spelling must be one number, got {spelling!r}")
    _, fraction, exponent = _parts(spelling)
    return max(0, len(fraction) - exponent)


def _parts(spelling: str) -> tuple[str, str, int]:
    """``(whole digits, fraction digits, exponent)`` of a number's spelling (sign dropped)."""
    mantissa, _, exponent = spelling.lstrip("+-\u2212\u2013").lower().partition("e")
    whole, _, fraction = mantissa.partition(".")
    return whole, fraction, int(exponent) if exponent else 0


def needed_decimals(span: NumberSpan) -> int:
    """The decimals a number of the training text needs: those of its shortest spelling that
    reads back to the same float32, at most as many as it was written with.

    Args:
        span: a number found by :func:`cauchylin_hf.numbers.find_numbers` (its ``text`` and
            float32 ``value``).

    Returns:
        ``min(decimals_of(span.text), decimals_of(format_number(span.value)))``.

    Example:
        >>> from cauchylin_hf.numbers import find_numbers
        >>> [needed_decimals(s) for s in find_numbers("12.090000000000 4.50 0.125 1.5e-3 7")]
        [2, 1, 3, 4, 0]
    """
    return min(decimals_of(span.text), decimals_of(format_number(span.value)))


_CHUNK = 1024  # texts read at once by NumberPrecision.from_texts
_FLT_MIN = 2.0**-126  # the smallest normal float32


def needed_decimals_batch(spellings: Sequence[str], values: Sequence[float]) -> list[int]:
    """:func:`needed_decimals` of many numbers at once.

    The same counts (a test holds the two together), found without writing most numbers out:
    a spelling of at most 6 significant digits is itself the shortest spelling of its float32
    value (float32 tells apart any two such decimals, so no shorter one reads back to it);
    for longer ones NumPy's shortest float32 spelling, computed for the batch, gives the digit
    count, which two reads check (see ``_shortest_decimals``); each spelling is counted once.

    Args:
        spellings: the numbers as written (``NumberSpan.text``).
        values: their float32 values (``NumberSpan.value``).

    Returns:
        The decimals each number needs, in order.

    Raises:
        ValueError: when ``spellings`` and ``values`` differ in length.

    Example:
        >>> needed_decimals_batch(["12.090000000000", "4.50", "1.5e-3", "7"], [12.09, 4.5, 0.0015, 7.0])
        [2, 1, 4, 0]
    """
    if len(spellings) != len(values):
        raise ValueError(f"spellings has {len(spellings)} entries but values {len(values)}")
    counts: dict[str, int] = {}
    slow: dict[str, tuple[float, int]] = {}
    for spelling, value in zip(spellings, values, strict=True):
        if spelling in counts or spelling in slow:
            continue
        written, short = _written_decimals(spelling)
        if short is not None and abs(value) >= _FLT_MIN:
            counts[spelling] = short
        elif written == 0 or value == 0.0:
            counts[spelling] = 0
        else:
            slow[spelling] = (value, written)
    if slow:
        shortest = np.array([v for v, _ in slow.values()], dtype=np.float32).astype(str).tolist()
        for (spelling, (value, written)), guess in zip(slow.items(), shortest, strict=True):
            counts[spelling] = min(written, _shortest_decimals(value, _significant(guess)))
    return [counts[s] for s in spellings]


def _written_decimals(spelling: str) -> tuple[int, int | None]:
    """``(decimals_of(spelling), its decimals without trailing zeros when it has at most 6
    significant digits, else None)``, for a spelling known to be a number."""
    whole, fraction, shift = _parts(spelling)
    written = max(0, len(fraction) - shift)
    if _significant(spelling) > 6:
        return written, None
    kept = fraction.rstrip("0")
    last = len(kept) if kept else len(whole.rstrip("0")) - len(whole)
    return written, max(0, last - shift)


def _significant(spelling: str) -> int:
    """The significant digits of a spelling (at least 1)."""
    whole, fraction, _ = _parts(spelling)
    return max(1, len((whole + fraction).strip("0")))


def _reads_as(spelling: str, value: float) -> bool:
    try:
        return to_float32(float(spelling)) == value
    except ValueError:  # too large for float32
        return False


def _shortest_decimals(value: float, guess: int) -> int:
    """``decimals_of(format_number(value))``, checking a guess of its significant digits.

    ``format_number`` takes the fewest digits ``p`` whose correctly rounded spelling reads back.
    For a value that is not a power of two, the values that read back to it form an interval
    about it that is symmetric, so if ``p`` digits read back, so do ``p + 1`` (their spelling
    is at least as close): ``p = guess`` is right when ``guess`` digits read back and
    ``guess - 1`` do not. Otherwise (or at a power of two) ``format_number`` decides.
    """
    x = abs(value)
    if math.frexp(x)[0] != 0.5 and _reads_as(f"{x:.{guess - 1}e}", x):
        if guess == 1 or not _reads_as(f"{x:.{guess - 2}e}", x):
            _, fraction, exponent = _parts(f"{x:.{guess - 1}e}")
            return max(0, len(fraction.rstrip("0")) - exponent)
    return decimals_of(format_number(x))


def field_before(text: str) -> str:
    """The field of a number that would follow ``text``: the words after its last number.

    The same rule as :func:`cauchylin_hf.predict.number_predictions` (which passes
    :func:`~cauchylin_hf.numbers.field_of` the text since the previous number).

    Args:
        text: everything before the number.

    Returns:
        The field name.

    Example:
        >>> field_before("width 3, height 4, area "), field_before("3 boxes of 12 eggs hold ")
        ('area', 'eggs hold')
    """
    spans = find_numbers(text)
    return field_of(text[spans[-1].end :] if spans else text)


@dataclass
class NumberPrecision:
    """Decimals per field, learned from texts; rounds and writes predicted numbers.

    Attributes:
        decimals: ``{field: decimals}``, the largest count each field was written with.
        default: decimals for a field not in ``decimals`` (None: write the shortest decimal that
            reads back to the float32 value, :func:`cauchylin_hf.numbers.format_number`).

    Example:
        >>> p = NumberPrecision.from_texts(["price 4.25, 3 items", "price 12.000000001, 10 items"])
        >>> p.decimals, p.default  # 12.000000001 is 12 in float32: it needs no decimal
        ({'price': 2, '': 0}, 2)
        >>> p.write(5.0, "price "), p.write(139.1988, "weight ")
        ('5.00', '139.20')
        >>> NumberPrecision({}, None).write(139.1988, "weight ")  # nothing learned
        '139.1988'
    """

    decimals: dict[str, int] = field(default_factory=dict)
    default: int | None = None

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> NumberPrecision:
        """Learn the decimals of every field from texts.

        Args:
            texts: the training texts.

        Returns:
            The precision (each field's count: the largest :func:`needed_decimals` of its
            numbers; ``default``: the largest count over all numbers; None when the texts hold
            no number).

        Raises:
            ValueError: a text that is not a ``str``.

        Example:
            >>> NumberPrecision.from_texts(["a 1.5, b 2", "a 0.25"]).decimals
            {'a': 2, 'b': 0}
        """
        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise ValueError(f"texts[{i}] must be a str, got {type(text).__name__}")
        names: dict[str, str] = {}  # the field of each distinct segment, worked out once
        out: dict[str, int] = {}
        for start in range(0, len(texts), _CHUNK):  # chunks keep the intermediate lists small
            split = split_numbers_batch(texts[start : start + _CHUNK])
            fields = []
            for parts in split:
                for seg in parts.segments[:-1]:
                    name = names.get(seg)
                    if name is None:
                        name = names[seg] = field_of(seg)
                    fields.append(name)
            decimals = needed_decimals_batch(
                [s for parts in split for s in parts.spellings],
                [v for parts in split for v in parts.values],
            )
            for name, d in zip(fields, decimals, strict=True):
                if d > out.get(name, -1):
                    out[name] = d
        return cls(out, max(out.values()) if out else None)

    def decimals_for(self, prefix: str) -> int | None:
        """The decimals of a number that follows ``prefix``.

        Args:
            prefix: the text before the number (its field is :func:`field_before`).

        Returns:
            The field's decimals, else :attr:`default`.

        Example:
            >>> NumberPrecision({"price": 2}, 0).decimals_for("a coat, price ")
            2
        """
        return self.decimals.get(field_before(prefix), self.default)

    def write(self, value: float, prefix: str, decimals: int | None = None) -> str:
        """Write a predicted number with the decimals of its field.

        Args:
            value: the number (finite).
            prefix: the text before it.
            decimals: override the learned decimals (>= 0).

        Returns:
            ``f"{value:.{d}f}"`` (``-0`` written as ``0``), or with no decimals known the
            shortest decimal of the float32 value.

        Raises:
            ValueError: a non-finite value, or ``decimals`` not an int in
                ``[0, MAX_DECIMALS]``.

        Example:
            >>> NumberPrecision({"n": 0}, 0).write(138.6916, "n "), NumberPrecision().write(-0.2, "", 0)
            ('139', '0')
        """
        if not math.isfinite(value):
            raise ValueError(f"value must be finite, got {value!r}")
        if decimals is not None:
            check_decimals(decimals, "decimals")
        d = self.decimals_for(prefix) if decimals is None else int(decimals)
        if d is None:
            return format_number(value)
        text = f"{value:.{d}f}"
        return text[1:] if text.startswith("-") and float(text) == 0.0 else text

    def write_generation(
        self,
        out: Any,
        row: int,
        prompt: str | None,
        tokenizer: Any,
        decimals: int | None = None,
    ) -> tuple[str, str, list[str]]:
        """One generated row as text, its numbers written with the decimals of their fields.

        The prompt's numbers keep their spelling; each generated number is written by
        :meth:`write` with the text before it as its prefix (``+-inf`` as ``inf``/``-inf``).

        Args:
            out: a :class:`~cauchylin_hf.generation.GenerateOutput` (``sequences``,
                ``numeric_values``, ``attention_mask``, ``prompt_length``).
            row: the row of ``out``.
            prompt: that row's prompt text (None for a prompt given as ids: its numbers are
                then written as their float32 values, :func:`~cauchylin_hf.numbers.format_number`).
            tokenizer: the :class:`~cauchylin_hf.tokenizer.NumericTokenizer` of the model.
            decimals: override the learned decimals (>= 0).

        Returns:
            ``(text, continuation, numbers)``: the whole text, the generated part, and the
            generated numbers as written.

        Example:
            >>> import torch
            >>> from types import SimpleNamespace
            >>> from cauchylin_hf.testing import tiny_tokenizer
            >>> from cauchylin_hf.tokenizer import NumericTokenizer
            >>> ntok = NumericTokenizer(tiny_tokenizer())
            >>> prompt = "price 4.50, then price"
            >>> whole = ntok([prompt + " 5.127."], return_tensors="pt")  # as if 5.127 was generated
            >>> n_prompt = ntok([prompt], return_tensors="pt")["input_ids"].shape[1]
            >>> out = SimpleNamespace(sequences=whole["input_ids"], prompt_length=n_prompt,
            ...                       numeric_values=whole["numeric_values"],
            ...                       attention_mask=whole["attention_mask"])
            >>> NumberPrecision.from_texts(["price 4.25"]).write_generation(out, 0, prompt, ntok)
            ('price 4.50, then price 5.13.', ' 5.13.', ['5.13'])
        """
        num = tokenizer.num_token_id
        mask = out.attention_mask[row].bool()
        ids = out.sequences[row][mask].tolist()
        values = out.numeric_values[row][mask].tolist()
        start = int(out.attention_mask[row][: out.prompt_length].sum())  # after left padding
        in_prompt = sum(1 for t in ids[:start] if t == num)
        spellings: list[str | None] = [None] * in_prompt
        if prompt is not None:
            spellings = list(tokenizer(prompt, return_number_texts=True)["number_texts"])
            spellings = spellings[:in_prompt]
        new: list[str] = []
        by_field = decimals is None and (self.decimals or self.default is not None)
        for j in range(start, len(ids)):
            if ids[j] != num:
                continue
            value = float(values[j])
            if math.isfinite(value):
                prefix = ""  # read only where the decimals depend on the field
                if by_field:
                    prefix = tokenizer.decode(
                        ids[:j], values[:j], number_texts=spellings, skip_special_tokens=True
                    )
                spelled = self.write(value, prefix, decimals)
            else:
                spelled = "inf" if value > 0 else "-inf"
            spellings.append(spelled)
            new.append(spelled)
        text = tokenizer.decode(ids, values, number_texts=spellings, skip_special_tokens=True)
        continuation = tokenizer.decode(
            ids[start:], values[start:], number_texts=new, skip_special_tokens=True
        )
        return text, continuation, new

    @classmethod
    def of_model(cls, model: Any) -> NumberPrecision:
        """The precision recorded in the folder a model was loaded from, else an empty one.

        The folder is the model's ``name_or_path`` (set by ``from_pretrained``); its
        :data:`DATA_FORMAT_FILE` holds the precision ``train`` learned. A model without one (a
        base checkpoint, a model built or saved from Python) gets ``NumberPrecision()``, which
        writes the shortest decimal of the float32 value.

        Args:
            model: a model with ``name_or_path`` (a transformers ``PreTrainedModel``).

        Returns:
            The :class:`NumberPrecision`.

        Raises:
            ValueError: a data-format file that cannot be read, or whose precision is invalid
                (the message names the file).

        Example:
            >>> import json, tempfile
            >>> from pathlib import Path
            >>> from types import SimpleNamespace
            >>> folder = Path(tempfile.mkdtemp())
            >>> NumberPrecision.of_model(SimpleNamespace(name_or_path=str(folder)))
            NumberPrecision(decimals={}, default=None)
            >>> record = {"precision": {"decimals": {"apples": 0}, "default": 0}}
            >>> _ = (folder / DATA_FORMAT_FILE).write_text(json.dumps(record))
            >>> NumberPrecision.of_model(SimpleNamespace(name_or_path=str(folder))).write(
            ...     52.256485, "3 boxes hold ")
            '52'
        """
        folder = getattr(model, "name_or_path", None)
        path = Path(folder) / DATA_FORMAT_FILE if isinstance(folder, str) and folder else None
        if path is None or not path.is_file():
            return cls()
        try:
            saved = json.loads(path.read_text(encoding="utf-8")).get("precision")
            return cls() if saved is None else cls.from_dict(saved)
        except (OSError, ValueError, AttributeError, RecursionError) as exc:
            raise ValueError(f"{path}: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (read back with :meth:`from_dict`).

        Returns:
            ``{"decimals": {...}, "default": int | None}``.

        Example:
            >>> NumberPrecision({"a": 1}, 1).to_dict()
            {'decimals': {'a': 1}, 'default': 1}
        """
        return {"decimals": dict(self.decimals), "default": self.default}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NumberPrecision:
        """Read :meth:`to_dict`'s output.

        Args:
            data: ``{"decimals": {field: int}, "default": int | None}``.

        Returns:
            The precision.

        Raises:
            ValueError: a missing key, or a count that is not an int in ``[0, MAX_DECIMALS]``.

        Example:
            >>> NumberPrecision.from_dict({"decimals": {"a": 1}, "default": None}).decimals
            {'a': 1}
        """
        try:
            decimals, default = data["decimals"], data["default"]
        except (KeyError, TypeError) as exc:
            raise ValueError(f"a number precision needs 'decimals' and 'default': {exc}") from None

        if not isinstance(decimals, Mapping):
            raise ValueError(f"'decimals' must be a mapping, got {_short(decimals)}")
        out = {str(k): check_decimals(v, f"decimals[{_short(k)}]") for k, v in decimals.items()}
        return cls(out, None if default is None else check_decimals(default, "default"))
