"""The number grammar: recognition decisions, parsing, formatting and canonical stability."""

import itertools
import math
import re
import warnings

import numpy as np
import pytest
from cauchylin_hf.numbers import (
    NumberSpan,
    find_numbers,
    format_number,
    is_number,
    parse_number,
    split_numbers,
    split_numbers_batch,
    to_float32,
)
from hypothesis import given
from hypothesis import strategies as st


def np_float32(x: float) -> float:
    """Reference float32 rounding (NumPy, independent of the struct-based implementation)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(np.float32(x))


def same_float(a: float, b: float) -> bool:
    """Equal, including the sign of zero."""
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def values(text):
    return [s.value for s in find_numbers(text)]


def texts(text):
    return [s.text for s in find_numbers(text)]


# ---------------------------------------------------------------- documented decisions


GRAMMAR_CASES = [
    ("3 boxes of 12 eggs", ["3", "12"]),
    ("-3", ["-3"]),
    ("+3", ["+3"]),
    ("x = -3", ["-3"]),
    ("(-3)", ["-3"]),
    ("2*-3", ["2", "-3"]),
    ("x-3", ["3"]),  # hyphen / operator after a letter
    ("3-4", ["3", "4"]),  # a range: two positive numbers
    ("(a)-3", ["3"]),
    ("--3", ["3"]),  # a sign after a sign is text
    ("-+3", ["3"]),
    ("1,234", ["1", "234"]),  # thousands separators are text
    ("2024-01-05", ["2024", "01", "05"]),  # dates: three integers
    ("1.2.3", []),  # versions stay text
    ("192.168.0.1", []),
    ("v1.2.3 and 4", ["4"]),
    ("1e5.3", []),  # malformed runs stay text
    ("1e2e3", []),
    ("4.5e1", ["4.5e1"]),
    ("1E+3", ["1E+3"]),
    ("1e-3", ["1e-3"]),
    ("3e", ["3"]),
    ("3eggs", ["3"]),
    ("1e+", ["1"]),
    (".5", [".5"]),
    ("-.5", ["-.5"]),
    ("a.5", ["5"]),
    ("..5", ["5"]),
    ("1e-.5", ["1", "5"]),  # no leading dot after e-: keeps canonical spelling stable
    ("3.", ["3"]),  # a trailing dot is text
    ("I have 3.", ["3"]),
    ("H2O", []),  # digits glued to a letter are part of the word
    ("Qwen2.5", []),
    ("grade SI1, VS2, I1", []),
    ("B12 Q3 x1 a1.5 a1e5 é3 ²3 s₁2", []),
    ("5kg 3eggs 3.5% 2x", ["5", "3", "3.5", "2"]),  # a number with a unit stays a number
    ("x_1 ٣3", ["1", "3"]),  # "_" and a decimal digit are no letters
    ("١٢٣ ３ ²", []),  # Unicode digits stay text
    ("inf nan Infinity NaN", []),
    ("1e39 -1e39 1e309", []),  # too large for float32: text
    ("9" * 40, []),
    ("3.4028235e38", ["3.4028235e38"]),  # float32 max is fine
    ("0x1F", ["0"]),  # no hex: decimal digits only (x1F is a word)
    ("1_000", ["1", "000"]),
    ("", []),
    ("x = \u22125", ["\u22125"]),  # the minus sign U+2212 is a minus
    ("\u20133 C", ["\u20133"]),  # so is the en dash U+2013 where a sign may stand
    ("pages 10\u201320", ["10", "20"]),  # an en-dash range: two positive numbers
    ("a\u22123", ["3"]),
    ("\u2212-3", ["3"]),  # a sign after a sign is text
    ("-\u20133", ["3"]),
    ("(\u2212.5)", ["\u2212.5"]),
    ("1e\u22125", ["1", "5"]),  # the exponent's sign is ASCII only
]


@pytest.mark.parametrize(("text", "expected"), GRAMMAR_CASES)
def test_grammar_decisions(text, expected):
    assert texts(text) == expected


def test_values_and_spans():
    spans = find_numbers("up -4.50 to 1e-3!")
    assert spans == [NumberSpan(3, 8, "-4.50", -4.5), NumberSpan(12, 16, "1e-3", np_float32(1e-3))]
    assert [v for _, _, _, v in spans] == [-4.5, np_float32(0.001)]


def test_dates_values_and_signs():
    assert values("2024-01-05") == [2024.0, 1.0, 5.0]
    assert values("3-4") == [3.0, 4.0]
    assert values("from -3 to -4") == [-3.0, -4.0]
    assert values("x-3") == [3.0]


def test_unicode_minus_signs():
    assert values("x = \u22125 and \u20132.5") == [-5.0, -2.5]
    assert values("from 3\u20134") == [3.0, 4.0]
    assert parse_number("\u22124.5") == parse_number("\u20134.5") == -4.5
    assert is_number("\u22121e3") and not is_number("\u2212\u22121")
    assert canonical("x = \u22125") == "x = -5"


def test_underflow_and_negative_zero():
    (v,) = values("-1e-50")
    assert v == 0.0 and math.copysign(1.0, v) == -1.0
    assert values("1e-45") == [np_float32(1e-45)] and values("1e-45")[0] > 0  # subnormal
    (z,) = values("-0")
    assert math.copysign(1.0, z) == -1.0


def test_never_nonfinite():
    text = "nan inf -inf 1e39 1e309 -1e400 3.5e38 " + "9" * 400
    assert find_numbers(text) == []


def test_split_numbers():
    segments, numbers = split_numbers("up 0.50 today")
    assert segments == ["up ", " today"]
    assert [n.text for n in numbers] == ["0.50"]
    segments, numbers = split_numbers("12")
    assert segments == ["", ""] and numbers[0].value == 12.0


# ---------------------------------------------------------------- parse / format


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (3.0, "3"),
        (4.5, "4.5"),
        (0.1, "0.1"),
        (0.001, "0.001"),
        (1e-5, "0.00001"),
        (1e-6, "1e-06"),
        (-3.0, "-3"),
        (1.5e20, "1.5e+20"),
        (1e15, "1000000000000000"),
        (1e16, "1e+16"),
        (16777216.0, "16777216"),
        (0.0, "0"),
        (-0.0, "-0"),
        (3.4028234663852886e38, "3.4028235e+38"),
        (1.4e-45, "1e-45"),
        (123456.789, "123456.79"),
    ],
)
def test_format_examples(value, text):
    assert format_number(value) == text


def test_parse_examples():
    assert parse_number("4.50") == 4.5
    assert parse_number("-2e3") == -2000.0
    assert parse_number(".5") == 0.5
    assert parse_number("+7") == 7.0
    assert parse_number("0.1") == np_float32(0.1) != 0.1


@pytest.mark.parametrize(
    "bad", ["1.2.3", "1e39", "1e309", "abc", "", " 3", "3 ", "1,234", "٣", "inf"]
)
def test_parse_rejects(bad):
    with pytest.raises(ValueError, match="text"):
        parse_number(bad)


def test_is_number():
    assert is_number("-4.5e3") and is_number(".5") and is_number("007")
    assert not is_number("1.2.3") and not is_number("1e39") and not is_number(" 3")
    assert not is_number("3-4") and not is_number("")


def test_bad_input_errors():
    with pytest.raises(ValueError, match="text"):
        find_numbers(b"3")
    with pytest.raises(ValueError, match="text"):
        split_numbers(3)
    with pytest.raises(ValueError, match="text"):
        parse_number(3.0)
    for bad in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ValueError, match="value"):
            format_number(bad)
    with pytest.raises(ValueError, match="value"):
        format_number(1e39)
    with pytest.raises(ValueError, match="value"):
        format_number("abc")
    with pytest.raises(ValueError, match="float32"):
        to_float32(1e39)


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_format_round_trips_float32(x):
    s = format_number(x)
    assert is_number(s)
    assert same_float(parse_number(s), x)
    # shortest: as many significant digits as NumPy's shortest unique float32 repr (Dragon4)
    ref = np.format_float_scientific(np.float32(x), unique=True, trim="-")
    ref_digits = ref.split("e")[0].lstrip("-").replace(".", "")
    mine = s.lstrip("-")
    mine_digits = (mine.split("e")[0].replace(".", "").lstrip("0") or "0").rstrip("0") or "0"
    assert len(mine_digits) == len(ref_digits.rstrip("0") or "0")
    # positional for moderate magnitudes, scientific otherwise
    exp10 = int(ref.split("e")[1])
    assert ("e" in s) == (x != 0 and not -5 <= exp10 < 16)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_format_rounds_float64_to_float32(x):
    f32 = np_float32(x)
    if not math.isfinite(f32):
        with pytest.raises(ValueError):
            format_number(x)
    else:
        assert same_float(parse_number(format_number(x)), f32)


# ---------------------------------------------------------------- property tests: recognition

DIGITS = st.text(alphabet="0123456789", min_size=1, max_size=12)


@st.composite
def number_strings(draw, allow_overflow=False):
    """A number of the grammar, drawn part by part (sign, mantissa, exponent)."""
    sign = draw(st.sampled_from(["", "", "-", "+"]))
    kind = draw(st.sampled_from(["int", "dec", "lead"]))
    if kind == "int":
        mantissa = draw(DIGITS)
    elif kind == "dec":
        mantissa = draw(DIGITS) + "." + draw(DIGITS)
    else:
        mantissa = "." + draw(DIGITS)
    exponent = ""
    if draw(st.booleans()):
        exponent = draw(st.sampled_from("eE")) + draw(st.sampled_from(["", "+", "-"]))
        exponent += draw(st.text(alphabet="0123456789", min_size=1, max_size=3))
    s = sign + mantissa + exponent
    if not allow_overflow and not math.isfinite(np_float32(float(s))):
        s = (
            sign + mantissa
        )  # without the exponent (mantissa alone may still overflow: 12 digits do not)
    return s


# Text without ASCII digits: any numbers in the spliced text are exactly the spliced ones.
NO_DIGIT_TEXT = st.text(max_size=12).map(lambda s: re.sub("[0-9]", "", s))
BEFORE = st.sampled_from([" ", "\n", "(", "=", ": ", "/", "\t", "*", "$"])
AFTER = st.sampled_from(["", " ", ".", ",", ")", "e", "E", "-", "\n", "%", "x", "é", "٣"])


@given(
    st.lists(st.tuples(NO_DIGIT_TEXT, BEFORE, number_strings(), AFTER), max_size=5), NO_DIGIT_TEXT
)
def test_spliced_numbers_are_found_exactly(parts, tail):
    text = ""
    expected = []
    for chunk, before, number, after in parts:
        text += chunk + before
        expected.append((len(text), number))
        text += number + after
    text += tail
    spans = find_numbers(text)
    assert [(s.start, s.text) for s in spans] == expected
    for s in spans:
        assert s.end == s.start + len(s.text)
        assert same_float(s.value, np_float32(float(s.text)))
        assert math.isfinite(s.value)


@given(st.lists(st.tuples(NO_DIGIT_TEXT, BEFORE, number_strings(allow_overflow=True)), max_size=4))
def test_overflowing_numbers_stay_text(parts):
    text = "".join(c + b + n for c, b, n in parts)
    expected = [n for _, _, n in parts if math.isfinite(np_float32(float(n)))]
    assert texts(text) == expected


@given(
    st.lists(st.tuples(NO_DIGIT_TEXT, BEFORE, st.sampled_from("\u2212\u2013"), number_strings()))
)
def test_unicode_minus_reads_as_minus(parts):
    """A U+2212 or U+2013 where a sign may stand gives the value that ``-`` gives there."""
    unicode = "".join(c + b + m + n.lstrip("+-") for c, b, m, n in parts)
    ascii_ = "".join(c + b + "-" + n.lstrip("+-") for c, b, _, n in parts)
    found, expected = find_numbers(unicode), find_numbers(ascii_)
    assert [(s.start, s.end) for s in found] == [(s.start, s.end) for s in expected]
    assert all(same_float(a.value, b.value) for a, b in zip(found, expected, strict=True))
    assert len(found) == len(parts) and all(s.value <= 0 for s in found)


LETTERS = st.characters(categories=["Lu", "Ll", "Lt", "Lm", "Lo"])
WORD_START = st.text(alphabet=" ,;(=/\n", max_size=2)


@given(
    st.lists(
        st.tuples(
            WORD_START,
            st.text(LETTERS, min_size=1, max_size=4),
            number_strings().filter(lambda n: n.lstrip("+-")[0].isdigit()),  # "a.5" is "a." 5
            AFTER,
        ),
        min_size=1,
        max_size=4,
    )
)
def test_digits_glued_to_a_letter_stay_part_of_the_word(parts):
    """A word with digits glued to it (``SI1``, ``B12``, ``Q3.5``) holds no number, whatever
    follows; the same number after a space is found."""
    glued = "".join(w + letters + n.lstrip("+-") + a for w, letters, n, a in parts)
    assert find_numbers(glued) == [], glued
    apart = "".join(w + letters + " " + n + a for w, letters, n, a in parts)
    assert [s.text for s in find_numbers(apart)] == [n for _, _, n, _ in parts], apart
    check_batch_agrees([glued, apart])


UNITS = st.text(LETTERS | st.sampled_from("%$°/"), min_size=1, max_size=4).filter(
    lambda u: u[0] not in "eE"
)


@given(st.lists(st.tuples(BEFORE, number_strings(), UNITS), min_size=1, max_size=4))
def test_a_number_with_a_unit_stays_a_number(parts):
    """Letters after a number (``5kg``, ``3.5%``) leave it a number, with its value."""
    text = "".join(b + n + u for b, n, u in parts)
    found = find_numbers(text)
    assert [s.text for s in found] == [n for _, n, _ in parts], text
    assert all(
        same_float(s.value, np_float32(float(n))) for s, (_, n, _) in zip(found, parts, strict=True)
    )
    check_batch_agrees([text])


def canonical(text):
    """The text with every number rewritten by format_number."""
    segments, numbers = split_numbers(text)
    out = segments[0]
    for n, seg in zip(numbers, segments[1:], strict=True):
        out += format_number(n.value) + seg
    return out


def check_invariants_and_stability(text):
    segments, numbers = split_numbers(text)
    rebuilt = segments[0] + "".join(n.text + s for n, s in zip(numbers, segments[1:], strict=True))
    assert rebuilt == text
    assert all(a.end <= b.start for a, b in itertools.pairwise(numbers))
    for n in numbers:
        assert text[n.start : n.end] == n.text and is_number(n.text)
        ascii_sign = re.sub("^[\u2212\u2013]", "-", n.text)
        assert same_float(n.value, np_float32(float(ascii_sign))) and math.isfinite(n.value)
    again = find_numbers(canonical(text))
    assert len(again) == len(numbers)
    for a, b in zip(numbers, again, strict=True):
        assert same_float(a.value, b.value)


@given(
    st.lists(st.tuples(st.text(max_size=10), number_strings()), max_size=5), st.text(max_size=10)
)
def test_arbitrary_splice_invariants_and_canonical_stability(parts, tail):
    check_invariants_and_stability("".join(c + n for c, n in parts) + tail)


@given(st.text(alphabet="0123456789..eE++--\u2212\u2013_a )x,٣ ", max_size=40))
def test_canonical_stability_on_adversarial_alphabet(text):
    check_invariants_and_stability(text)


@pytest.mark.parametrize("text", ["6e-.80", "5E+.4", "8E7 8,0e+.79E.", "-+3", "x-0.50", "1e20.5"])
def test_canonical_stability_regressions(text):
    check_invariants_and_stability(text)


# ---------------------------------------------------------------- the batched splitter


def check_batch_agrees(texts):
    """``split_numbers_batch`` gives, text by text, what ``find_numbers`` finds (the definition)."""
    batch = split_numbers_batch(texts)
    assert len(batch) == len(texts)
    for text, got in zip(texts, batch, strict=True):
        segments, numbers = split_numbers(text)
        assert got.segments == segments, text
        assert got.spellings == [n.text for n in numbers], text
        assert len(got.values) == len(numbers)
        assert all(same_float(a, n.value) for a, n in zip(got.values, numbers, strict=True)), text


# Characters at which the grammar decides something: signs, dots, exponents, blockers, a Unicode
# letter and digit, the separators the batch must not confuse with text.
ADVERSARIAL = "0123456789..eE++--\u2212\u2013_a )]}(x,٣é\n\t "


@given(st.lists(st.text(alphabet=ADVERSARIAL, max_size=30), min_size=1, max_size=6))
def test_batch_split_agrees_with_find_numbers_on_adversarial_text(texts):
    check_batch_agrees(texts)


@given(
    st.lists(
        st.lists(
            st.tuples(st.text(max_size=6), number_strings(allow_overflow=True), AFTER), max_size=4
        ).map(lambda parts: "".join(c + n + a for c, n, a in parts)),
        min_size=1,
        max_size=5,
    )
)
def test_batch_split_agrees_with_find_numbers_on_spliced_numbers(texts):
    """Every spelling the grammar reads (signs, leading dots, exponents, overflow) in any text."""
    check_batch_agrees(texts)


@pytest.mark.parametrize("text", [t for t, _ in GRAMMAR_CASES])
def test_batch_split_agrees_on_the_documented_decisions(text):
    check_batch_agrees([text, text + " " + text, ""])


def test_batch_split_refuses_a_non_string():
    with pytest.raises(ValueError, match=r"texts\[1\] must be a str"):
        split_numbers_batch(["3", 4])
