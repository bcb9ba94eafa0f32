"""The number grammar of ``cauchylin_hf``: find numbers in text, parse them, format them back.

A *number* is an ASCII decimal literal with an optional sign, fraction and exponent::

    number   := [sign] mantissa [exponent]
    sign     := "+" | minus            (only where a sign may stand, see below)
    minus    := "-" | "\u2212" | "\u2013"   (hyphen-minus, minus sign, en dash)
    mantissa := digits ["." digits] | "." digits
    exponent := ("e" | "E") ["+" | "-"] digits
    digits   := one or more of 0-9     (ASCII only)

Text is scanned left to right for maximal *numeric runs*: ASCII digits joined by ``.digits`` and
``e[+-]digits`` continuations (``1.2.3`` and ``1e5.3`` are one run each). A run is a number when it
is exactly one mantissa plus an optional exponent; every other run stays text. In detail:

* **Words.** A run glued to a letter before it is part of the word: ``SI1``, ``VS2``, ``B12``,
  ``Q3``, ``H2O``, ``x1``, ``Qwen2.5`` and ``a1.5`` hold no number. A *letter* here is any Unicode
  word character that is neither a decimal digit nor ``_`` (``é``, ``²`` and ``₁`` count). Letters
  *after* a number do not change it: ``5kg``, ``3eggs`` and ``3.5%`` are numbers with a unit.
* **Sign.** A ``+`` or a minus directly before a run is the number's sign only when the character
  before the sign is not a letter, digit, ``_``, ``.``, ``+``, a minus, ``)``, ``]`` or ``}`` (any
  Unicode letter or digit counts). So ``-3`` and ``x = -3`` are negative, while ``x-3``, ``3-4``,
  ``(a)-3`` and ``--3`` contain a positive ``3``: the ``-`` is a hyphen or an operator, kept as text.
  The minus sign U+2212 (``\u22123``, typeset text) and the en dash U+2013 (``\u20133``, a common
  stand-in for it) are minus signs by the same rule, so a range written with an en dash,
  ``3\u20134``, is still ``3``, ``\u2013``, ``4``. The spelling keeps the character;
  :func:`format_number` writes ``-``. The exponent's sign is ASCII only.
* **Leading dot.** ``.5`` is 0.5 when the dot is not preceded by a letter, digit, ``_``, ``.``
  or ``e+`` / ``e-``; in ``v.5`` the number is ``5``. A trailing dot is text: ``3.`` is ``3`` then
  ``.``.
* **Thousands separators** are not part of numbers: ``1,234`` is ``1``, ``,``, ``234``.
* **Ranges and dates**: ``3-4`` is ``3``, ``-``, ``4``; ``2024-01-05`` is ``2024``, ``-``, ``01``,
  ``-``, ``05`` (values 2024, 1, 5).
* **Versions and addresses** (a run with two or more dots, e.g. ``1.2.3``, ``192.168.0.1``) and
  other malformed runs (``1e5.3``, ``1e2e3``) stay text as a whole.
* **Unicode digits** (Arabic-Indic ``٣``, fullwidth ``３``, superscripts ...) are never part of a
  number; they stay text.
* **Range.** A number's value is ``float32(float(spelling))`` (parse to the nearest float64,
  then round to the nearest float32). A number whose float32 value would overflow (``1e39``,
  ``1e309``, a 40-digit integer) stays text, so a value is never ``inf`` or ``nan``; the words
  ``inf`` and ``nan`` are letters and never numbers. Tiny numbers round to a subnormal or zero
  (``-1e-50`` is ``-0.0``).

:func:`format_number` writes a value back as the shortest decimal that parses to the same float32.
The grammar is built so that replacing every number of a text by :func:`format_number` of its value
and scanning again finds the same numbers with the same values (``canonical stability``; it is a
property test).
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

__all__ = [
    "FIELD_BREAK",
    "NumberSpan",
    "SplitText",
    "field_of",
    "find_numbers",
    "format_number",
    "is_number",
    "number_fields",
    "out_of_float32_range",
    "parse_number",
    "split_numbers",
    "split_numbers_batch",
    "to_float32",
]

# A maximal numeric run starting at a digit. The optional leading dot and the sign are decided in
# Python because they depend on the characters before the run.
_RUN = re.compile(r"[0-9]+(?:\.[0-9]+|[eE][+-]?[0-9]+)*")
# A run that is one number (without sign).
_NUMBER_BODY = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_SIGNED_NUMBER = re.compile(
    r"[+\-\u2212\u2013]?(?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
)

# The same grammar as one pattern, for batches (``split_numbers_batch``): the decisions that
# ``find_numbers`` takes in Python after each run are lookarounds here, so that one C-level
# ``split`` per text finds every number. ``\w`` is ``str.isalnum`` plus ``_``, as in ``_blocks``.
_EXP = r"(?:[eE][+-]?[0-9]+)?"
_BATCH_NUMBER = re.compile(
    # The first character is a sign, a dot or a digit (so the search skips every other character
    # fast); lookbehinds that include it then check what stands before it.
    r"([+\-\u2212\u2013.0-9]"
    # a sign where one may stand, then a number with or without a leading dot
    r"(?:(?<=[+\-\u2212\u2013])(?<![\w.)\]}+\-\u2212\u2013].)"
    rf"(?:\.[0-9]+{_EXP}|[0-9]+(?:\.[0-9]+)?{_EXP})"
    # a leading dot that is no run's continuation and not after "e+" or "e-"
    rf"|(?<=\.)(?<![\w.]\.)(?<![eE][+-]\.)[0-9]+{_EXP}"
    # a digit that starts a run (no digit, "digit.", "digitE", "digitE+" before it) and has no
    # leading dot that applies, and is not glued to a letter before it ("SI1")
    r"|(?<=[0-9])(?<![0-9].)(?<![0-9][.eE].)(?<![0-9][eE][+-].)(?<![^\W\d_].)"
    r"(?:(?<!\..)|(?<=[\w.]\..)|(?<=[eE][+-]\..))"
    rf"[0-9]*(?:\.[0-9]+)?{_EXP})"
    # where its run ends
    r"(?![0-9]|\.[0-9]|[eE][+-]?[0-9]))"
)
_TO_ASCII_MINUS = str.maketrans("\u2212\u2013", "--")

_MINUS_SIGNS = "-\u2212\u2013"  # hyphen-minus, minus sign, en dash
_SIGNS = "+" + _MINUS_SIGNS
_SIGN_BLOCKERS = frozenset("_.)]}" + _SIGNS)
_DOT_BLOCKERS = frozenset("_.")
# A run after one of these characters is part of a word ("SI1", "B12"): a letter, in the sense of
# a word character that is neither a decimal digit nor "_" (the same class as the lookbehind of
# ``_BATCH_NUMBER``, and the first character of a field's word in ``field_of``).
_LETTER = re.compile(r"[^\W\d_]")


class NumberSpan(NamedTuple):
    """One number found in a text.

    Attributes:
        start: index of the first character (the sign, when there is one) in the text.
        end: index one past the last character, so ``text[start:end] == spelling``.
        text: the number's spelling in the text, e.g. ``"-4.50"``.
        value: ``float32(float(text))`` as a Python float (finite).

    Example:
        >>> text = "it costs -4.50 now"
        >>> span = find_numbers(text)[0]
        >>> span
        NumberSpan(start=9, end=14, text='-4.50', value=-4.5)
        >>> text[span.start : span.end] == span.text
        True
    """

    start: int
    end: int
    text: str
    value: float


def to_float32(value: float) -> float:
    """Round a value to the nearest float32 and return it as a Python float.

    Args:
        value: a real number (``int``, ``float``, a NumPy or 0-d torch scalar).

    Returns:
        The nearest float32, as a Python ``float``; ``nan`` and ``inf`` pass through.

    Raises:
        ValueError: when ``value`` is finite but too large for float32 (``|value| > 3.4028235e38``
            after rounding), or is not a real number.

    Example:
        >>> to_float32(0.1)
        0.10000000149011612
    """
    try:
        x = float(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"value must be a real number, got {value!r}") from exc
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError as exc:
        raise ValueError(f"value {x!r} is too large for float32") from exc


def _blocks(text: str, index: int, blockers: frozenset[str]) -> bool:
    """Whether the character at ``index`` (may be -1: start of text) blocks a sign / leading dot."""
    if index < 0:
        return False
    c = text[index]
    return c.isalnum() or c in blockers


def _value_or_none(spelling: str) -> float | None:
    if spelling[:1] in _MINUS_SIGNS:
        spelling = "-" + spelling[1:]
    x = float(spelling)  # with an ASCII sign, the grammar is a subset of Python's float syntax
    if math.isinf(x):
        return None
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return None


def find_numbers(text: str) -> list[NumberSpan]:
    """Find the numbers of a text, left to right (grammar in the module docstring).

    Args:
        text: any Unicode string.

    Returns:
        The numbers as :class:`NumberSpan`, in order and non-overlapping.

    Raises:
        ValueError: when ``text`` is not a ``str``.

    Example:
        >>> [s.value for s in find_numbers("3 boxes of 12 eggs, x-1, t = -4.5e1, v1.2.3")]
        [3.0, 12.0, 1.0, -45.0]
        >>> [s.text for s in find_numbers("grade SI1, B12 5kg, 3.5%")]
        ['5', '3.5']
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    spans: list[NumberSpan] = []
    for m in _RUN.finditer(text):
        start, end = m.start(), m.end()
        if start >= 1 and _LETTER.match(text[start - 1]):
            continue  # glued to a letter: part of a word ("SI1", "B12")
        if (
            start >= 1
            and text[start - 1] == "."
            and not _blocks(text, start - 2, _DOT_BLOCKERS)
            and not (start >= 3 and text[start - 2] in "+-" and text[start - 3] in "eE")
        ):
            start -= 1  # a leading dot (".5"), but not in "1e-.5", where "0.5" would join "1e-"
        body = text[start:end]
        if _NUMBER_BODY.fullmatch(body) is None:
            continue  # a version, an address or a malformed run: text
        if (
            start >= 1
            and text[start - 1] in _SIGNS
            and not _blocks(text, start - 2, _SIGN_BLOCKERS)
        ):
            start -= 1
        spelling = text[start:end]
        value = _value_or_none(spelling)
        if value is None:
            continue  # too large for float32: text
        spans.append(NumberSpan(start, end, spelling, value))
    return spans


def out_of_float32_range(text: str) -> list[str]:
    """Spellings in a text that have a number's form but that float32 cannot hold.

    Too large ones (``1e39``) stay text (see the module docstring), too small ones (``2e-49``)
    read as 0: either way the model reads another value than the text says.

    Args:
        text: any Unicode string.

    Returns:
        The spellings (without sign), in order; empty when every number fits.

    Raises:
        ValueError: when ``text`` is not a ``str``.

    Example:
        >>> out_of_float32_range("a 1e39, b 2e-49, c 1e-40, d 0.0, e 3.5")
        ['1e39', '2e-49']
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    found = []
    for m in _RUN.finditer(text):
        body = m.group()
        if _NUMBER_BODY.fullmatch(body) is None:
            continue
        x = float(body)
        if _value_or_none(body) is None or (x != 0 and _value_or_none(body) == 0):
            found.append(body)
    return found


def split_numbers(text: str) -> tuple[list[str], list[NumberSpan]]:
    """Split a text into the text segments between numbers and the numbers.

    Args:
        text: any Unicode string.

    Returns:
        ``(segments, numbers)`` with ``len(segments) == len(numbers) + 1``; segments may be empty,
        and ``segments[0] + numbers[0].text + segments[1] + ... + segments[-1] == text``.

    Raises:
        ValueError: when ``text`` is not a ``str``.

    Example:
        >>> segments, numbers = split_numbers("up 0.50 today")
        >>> segments, [n.text for n in numbers]
        (['up ', ' today'], ['0.50'])
    """
    numbers = find_numbers(text)
    segments: list[str] = []
    pos = 0
    for span in numbers:
        segments.append(text[pos : span.start])
        pos = span.end
    segments.append(text[pos:])
    return segments, numbers


class SplitText(NamedTuple):
    """A text cut at its numbers: what :func:`split_numbers_batch` gives per text.

    Attributes:
        segments: the text between the numbers, ``len(spellings) + 1`` of them (may be empty).
        spellings: the numbers as written, in order (``NumberSpan.text``).
        values: their float32 values as Python floats (``NumberSpan.value``).

    Example:
        >>> split_numbers_batch(["up -4.50 today"])[0]
        SplitText(segments=['up ', ' today'], spellings=['-4.50'], values=[-4.5])
    """

    segments: list[str]
    spellings: list[str]
    values: list[float]


def split_numbers_batch(texts: Sequence[str]) -> list[SplitText]:
    """Split many texts at their numbers at once: :func:`split_numbers` for a batch.

    The same numbers as :func:`find_numbers` finds in each text (it stays the readable
    definition; a property test holds the two together), found by one regex call per text, with
    the values parsed and rounded to float32 for the whole batch in NumPy.

    Args:
        texts: the texts (each a ``str``).

    Returns:
        One :class:`SplitText` per text: ``segments[0] + spellings[0] + segments[1] + ...
        + segments[-1]`` is the text.

    Raises:
        ValueError: when an element of ``texts`` is not a ``str``.

    Example:
        >>> [s.values for s in split_numbers_batch(["3 boxes of 12 eggs", "x-1, t = -4.5e1"])]
        [[3.0, 12.0], [1.0, -45.0]]
    """
    parts: list[list[str]] = []
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"texts[{i}] must be a str, got {type(text).__name__}")
        parts.append(_BATCH_NUMBER.split(text))
    spellings = [p for pieces in parts for p in pieces[1::2]]
    joined = "\n".join(spellings)
    if not joined.isascii():  # float() reads only the ASCII minus
        spellings_ascii = joined.translate(_TO_ASCII_MINUS).split("\n")
    else:
        spellings_ascii = spellings
    with np.errstate(over="ignore"):  # a float32 overflow is a number that stays text
        values32 = np.array(list(map(float, spellings_ascii)), dtype=np.float64).astype(np.float32)
    finite = np.isfinite(values32)
    values = values32.astype(np.float64).tolist()
    overflow = not finite.all()
    out: list[SplitText] = []
    k = 0
    for pieces in parts:
        n = len(pieces) // 2
        if overflow and not finite[k : k + n].all():
            pieces, kept = _as_text(pieces, finite[k : k + n].tolist()), values[k : k + n]
            vals = [v for v, ok in zip(kept, finite[k : k + n].tolist(), strict=True) if ok]
        else:
            vals = values[k : k + n]
        out.append(SplitText(pieces[::2], pieces[1::2], vals))
        k += n
    return out


def _as_text(pieces: list[str], keep: list[bool]) -> list[str]:
    """``[segment, number, segment, ...]`` with the numbers not kept joined into the text."""
    out = [pieces[0]]
    for j, ok in enumerate(keep):
        if ok:
            out += [pieces[2 * j + 1], pieces[2 * j + 2]]
        else:
            out[-1] += pieces[2 * j + 1] + pieces[2 * j + 2]
    return out


def is_number(text: str) -> bool:
    """Whether a whole string is exactly one number of the grammar (in an empty context).

    Args:
        text: the candidate spelling, e.g. ``"-4.5e3"``.

    Returns:
        True when :func:`find_numbers` finds one number spanning all of ``text``.

    Raises:
        ValueError: when ``text`` is not a ``str``.

    Example:
        >>> is_number("-4.5e3"), is_number("1.2.3"), is_number("1e39"), is_number(" 3")
        (True, False, False, False)
    """
    spans = find_numbers(text)
    return len(spans) == 1 and spans[0].start == 0 and spans[0].end == len(text)


def parse_number(text: str) -> float:
    """Parse one number of the grammar to its float32 value.

    Args:
        text: exactly one number, e.g. ``"4.50"``, ``"-1e-3"``, ``".5"``; no surrounding space.

    Returns:
        ``float32(float(text))`` as a Python float.

    Raises:
        ValueError: when ``text`` is not a ``str``, is not one number of the grammar, or is too
            large for float32.

    Example:
        >>> parse_number("4.50"), parse_number("-2e3")
        (4.5, -2000.0)
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    if _SIGNED_NUMBER.fullmatch(text) is None:
        raise ValueError(f"text {text!r} is not a number of the grammar (see cauchylin_hf.numbers)")
    value = _value_or_none(text)
    if value is None:
        raise ValueError(f"text {text!r} is too large for float32; such numbers stay text")
    return value


def _shortest_digits(x: float) -> tuple[str, int]:
    """Shortest significant digits ``d`` and exponent ``e`` with float32(d[0].d[1:] * 10**e) == x."""
    for precision in range(1, 18):
        s = f"{x:.{precision - 1}e}"
        if _value_or_none(s) == x:  # None when a short candidate rounds past float32's max
            break
    mantissa, exp = s.split("e")
    digits = mantissa.replace(".", "").rstrip("0") or "0"
    return digits, int(exp)


def format_number(value: float) -> str:
    """Write a value as the shortest decimal that parses back to the same float32.

    The value is first rounded to float32. The format: an optional ``-``, then positional notation
    for decimal exponents -5 <= e < 16 (``3``, ``4.5``, ``0.001``, ``1000000``), else scientific
    notation with a signed, at least two-digit exponent (``1.5e+20``, ``1e-06``). No ``+`` sign, no
    trailing zeros, no trailing dot; ``-0.0`` is written ``-0``. The result is always a number of
    the grammar and ``parse_number(format_number(v)) == to_float32(v)``.

    Args:
        value: a finite real number (Python, NumPy or 0-d torch scalar).

    Returns:
        The spelling, e.g. ``"4.5"``.

    Raises:
        ValueError: when ``value`` is nan, infinite, not a real number, or too large for float32.

    Example:
        >>> format_number(4.5), format_number(0.1), format_number(-3.0), format_number(1.5e20)
        ('4.5', '0.1', '-3', '1.5e+20')
    """
    x = to_float32(value)
    if not math.isfinite(x):
        raise ValueError(f"value must be finite to be written as a number, got {x!r}")
    sign = "-" if math.copysign(1.0, x) < 0 else ""
    x = abs(x)
    if x == 0.0:
        return sign + "0"
    digits, exp = _shortest_digits(x)
    if -5 <= exp < 16:
        if exp >= 0:
            if len(digits) <= exp + 1:
                body = digits + "0" * (exp + 1 - len(digits))
            else:
                body = digits[: exp + 1] + "." + digits[exp + 1 :]
        else:
            body = "0." + "0" * (-exp - 1) + digits
    else:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        body = f"{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    return sign + body


# What ends the words of a field: punctuation that separates the parts of a text, and an arrow
# (``->``, ``→``: what a table's default template writes before the target's name).
FIELD_BREAK = re.compile(r"->|→|[,;:.!?()\[\]{}=\n\t]")
"""The breaks that end the words of a field (:func:`field_of`)."""
# A word of a field: a letter, then letters and the digits glued to them ("si1", "q3").
_FIELD_WORD = re.compile(r"[^\W\d_][^\W_]*")


def field_of(prefix: str) -> str:
    """The field a number belongs to: the words just before it, after the last break.

    ``"radius 17.99, mean area "`` gives ``"mean area"`` (at most the last three words); a number
    with no words before it since the last break gets ``""``. A break is punctuation that
    separates the parts of a text or an arrow (:data:`FIELD_BREAK`): in a table's row
    ``"fuel heating oil -> price 429."`` the target's field is ``"price"``, whatever the word
    column before it holds. A word keeps the digits glued to it (``"Q3 revenue "`` gives
    ``"q3 revenue"``), as the number grammar does.

    Args:
        prefix: the text before the number (from the previous number or the start).

    Returns:
        The field name (lower-case words joined by single spaces).

    Example:
        >>> field_of("radius 17.99, mean area "), field_of("3 boxes of "), field_of(", ")
        ('mean area', 'boxes of', '')
        >>> field_of(", fuel heating oil -> price "), field_of("grade SI1, Q3 revenue ")
        ('price', 'q3 revenue')
    """
    tail = FIELD_BREAK.split(prefix)[-1]
    words = _FIELD_WORD.findall(tail.lower())
    return " ".join(words[-3:])


def number_fields(text: str, spans: Sequence[NumberSpan] | None = None) -> list[str]:
    """The field of each number of a text (:func:`field_of` of the text since the number before).

    Args:
        text: the text.
        spans: its numbers (default: :func:`find_numbers` of it).

    Returns:
        One field per number, in order.

    Example:
        >>> number_fields("width 5, area 25, 2 rooms.")
        ['width', 'area', '']
    """
    spans = find_numbers(text) if spans is None else spans
    return [field_of(text[(spans[k - 1].end if k else 0) : s.start]) for k, s in enumerate(spans)]
