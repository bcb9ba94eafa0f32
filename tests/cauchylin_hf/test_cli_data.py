"""The command line's data helpers: tables as text, decimals per field, models from a config."""

from __future__ import annotations

import json
import math
import random
import time
from decimal import ROUND_HALF_EVEN, Decimal

import numpy as np
import pytest
from cauchylin_hf.app.scratch import PRESETS, backbone_config, build_from_config
from cauchylin_hf.data.table import Table, is_table_file, read_table
from cauchylin_hf.data.template import TableTemplate, label_of, not_a_number
from cauchylin_hf.numbers import find_numbers, to_float32
from cauchylin_hf.precision import (
    MAX_DECIMALS,
    NumberPrecision,
    decimals_of,
    field_before,
    needed_decimals,
)

# ------------------------------------------------------------------------------------ tables


def test_read_table_handles_bom_blank_lines_spaces_and_tabs(tmp_path):
    f = tmp_path / "t.csv"
    f.write_bytes("\ufeffage, s1 ,target\n\n59, 0.04 ,151\n,,\n48,-0.03,75\n".encode())
    table = read_table(f)
    assert table.columns == ["age", "s1", "target"]
    assert table.rows == [
        {"age": "59", "s1": "0.04", "target": "151"},
        {"age": "48", "s1": "-0.03", "target": "75"},
    ]
    g = tmp_path / "t.tsv"
    g.write_text('a\tb\n1\t"x, y"\n')
    assert read_table(g).rows == [{"a": "1", "b": "x, y"}]
    assert is_table_file(g) and not is_table_file(tmp_path / "t.jsonl")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "is empty"),
        ("a,b\n", "no data row"),
        ("a,a\n1,2\n", "repeats the column names ['a']"),
        ("a,\n1,2\n", "column 2 of the header has no name"),
        ("a,b\n1,2\n3\n", "line 3: 1 cells, but the header has 2 columns"),
        ("a,b\n1,2,3\n", "line 2: 3 cells"),
    ],
)
def test_read_table_errors_name_the_problem(tmp_path, content, message):
    f = tmp_path / "bad.csv"
    f.write_text(content)
    with pytest.raises(ValueError, match=None) as exc:
        read_table(f)
    assert message in str(exc.value)
    with pytest.raises(FileNotFoundError, match="table file not found"):
        read_table(tmp_path / "none.csv")


@pytest.mark.parametrize(
    ("cell", "reason"),
    [
        ("Ford", "'Ford' is not a number"),
        ("n/a", "a missing value"),
        ("NaN", "a missing value"),
        ("unknown", "a missing value"),
        ("1e308", "beyond float32's range"),
        ("-4e38", "beyond float32's range"),
        ("inf", "is infinite"),
        ("\u0663\u0664", "digits other than 0-9"),  # Arabic-Indic 34
        ("\u0969", "digits other than 0-9"),  # Devanagari 3
        ("2020-01-05", "several numbers"),
        ("1,000", "thousands separator (write 1000"),
        ("12,345.5", "thousands separator (write 12345.5)"),
        ("", "empty"),
    ],
)
def test_target_cells_that_are_not_one_number_are_named(tmp_path, cell, reason):
    """Every spelling the issue found scored as another number of the row is refused, with the
    column, the first bad row and its line."""
    f = tmp_path / "t.csv"
    f.write_text(f'x,y\n1,2\n3,4\n5,"{cell}"\n7,8\n', encoding="utf-8")
    table = read_table(f)
    assert table.lines == [2, 3, 4, 5]
    tt = TableTemplate("x {x} -> y {target}.", "y")
    with pytest.raises(ValueError, match=None) as exc:
        tt.target_values(table)
    message = str(exc.value)
    assert "target column 'y'" in message and "data row 3 (line 4)" in message
    assert reason in message and "1 of 4 rows" in message
    assert not_a_number(cell) is not None
    assert tt.target_values(Table(table.columns, table.rows[:2], f)) == [2.0, 4.0]


def test_tables_in_other_encodings_are_decoded_or_named(tmp_path):
    text = "city,price\nZürich,382\nGenève,410\n"
    expected = read_table(_write(tmp_path / "utf8.csv", text.encode("utf-8")))
    for name, data in (
        ("utf16.csv", text.encode("utf-16")),  # with a byte-order mark, as Excel writes it
        ("utf16be.csv", b"\xfe\xff" + text.encode("utf-16-be")),
        ("bom.csv", text.encode("utf-8-sig")),
    ):
        assert read_table(_write(tmp_path / name, data)).rows == expected.rows
    latin = _write(tmp_path / "latin.csv", text.encode("latin-1"))
    with pytest.raises(ValueError, match=None) as exc:
        read_table(latin)
    assert str(latin) in str(exc.value) and "not UTF-8" in str(exc.value)
    assert "line 2" in str(exc.value) and "Latin-1" in str(exc.value)
    bare16 = _write(tmp_path / "bare16.csv", text.encode("utf-16-le"))
    with pytest.raises(ValueError, match="UTF-16 without a byte-order mark"):
        read_table(bare16)


def test_a_cell_over_the_csv_field_limit_is_a_clear_error(tmp_path):
    f = tmp_path / "long.csv"
    f.write_text('x,y\n1,2\n3,"' + "a" * 200_000 + '"\n', encoding="utf-8")
    with pytest.raises(ValueError, match=None) as exc:
        read_table(f)
    message = str(exc.value)
    assert f"{f}, line 3" in message and "unclosed quote" in message and len(message) < 400
    g = tmp_path / "quote.csv"
    g.write_text('x,y\n1,"2\n' + "3,4\n" * 40_000, encoding="utf-8")  # a quote never closed
    with pytest.raises(ValueError, match="line 2"):
        read_table(g)


def _seconds(work, repeats=3):
    """The least wall time of ``repeats`` runs of ``work`` (the least is the least disturbed)."""
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return best


def test_checking_a_wide_header_takes_time_linear_in_its_columns():
    """TableTemplate.check and the header's check were quadratic in the column count (2k/4k/8k
    columns: 0.09/0.37/1.72 s; a 60,001-column table sat over 300 s): four times the columns
    take about four times as long (quadratic: sixteen), checked on the least of three runs."""
    from cauchylin_hf.data.table import check_header

    def work(n):
        columns = [f"c{i}" for i in range(n)] + ["target"]
        tt = TableTemplate("".join(f"c {{c{i}}}, " for i in range(n)) + "{target}", "target")
        return lambda: (check_header(columns, "t.csv"), tt.check(columns))

    small, large = _seconds(work(2_400)), _seconds(work(9_600))
    assert large < 8 * small + 0.05, (small, large)


def test_a_table_too_wide_to_be_a_sentence_is_refused_at_once():
    from cauchylin_hf.data.template import MAX_FIELDS, TemplateError

    columns = [f"c{i}" for i in range(300_000)] + ["target"]
    start = time.perf_counter()
    with pytest.raises(TemplateError) as exc:
        TableTemplate(" ".join(f"{{{c}}}" for c in columns[:-1]) + " {target}", "target").check(
            columns
        )
    assert time.perf_counter() - start < 10
    assert f"a text holds at most {MAX_FIELDS} fields" in str(exc.value)
    assert "choose the columns with --template" in str(exc.value)
    # a template that names a few of its columns reads the same table
    TableTemplate("x {c7} -> y {target}.", "target").check(columns)
    with pytest.raises(TemplateError, match=r"\{c7x\}.* and 299951 more$"):
        TableTemplate("x {c7x} -> y {target}.", "target").check(columns)


def _write(path, data):
    path.write_bytes(data)
    return path


def test_the_default_template_keeps_names_with_digits_as_words():
    """s1 .. s6 (the diabetes table's names): every number found is a cell, in order."""
    r = random.Random(0)
    columns = ["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6", "target"]
    rows = [{c: f"{r.uniform(-100, 100):.{r.randint(0, 4)}f}" for c in columns} for _ in range(50)]
    tt = TableTemplate.default(columns)
    assert tt.target == "target" and tt.literal_numbers() == [] and tt.target_is_last()
    for row, text in zip(rows, tt.texts(Table(columns, rows, None)), strict=True):
        found = [n.value for n in find_numbers(text)]
        assert found == [to_float32(float(row[c])) for c in columns]
    assert label_of("s12") == "s₁₂" and TableTemplate.default(["x", "y"]).target == "y"
    # a user's template with the plain name: the 1 is a number of its own, and it is reported
    assert TableTemplate("s 1 {s1} -> t {target}", "target").literal_numbers() == ["1"]
    assert TableTemplate("s1 {s1} -> t {target}", "target").literal_numbers() == []  # a word


def test_template_prompts_texts_and_their_checks():
    tt = TableTemplate("age {age} bmi {bmi} -> progression {target}.", "y")
    table = Table(["age", "bmi", "y"], [{"age": "59", "bmi": "32.1", "y": "151"}], None)
    assert tt.texts(table) == ["age 59 bmi 32.1 -> progression 151."]
    assert tt.prompts(Table(["age", "bmi"], [{"age": "59", "bmi": "32.1"}], None)) == [
        "age 59 bmi 32.1 -> progression "
    ]
    assert tt.text_before_target() == " -> progression "
    assert TableTemplate("{{x}} {x} -> {y}", "y").text({"x": "1", "y": "2"}) == "{x} 1 -> 2"
    cases = [
        (TableTemplate("a {z} -> {target}", "y"), "placeholder {z} is not a column"),
        (TableTemplate("a {x}", "y"), "exactly once, found 0 times"),
        (TableTemplate("{target} {y}", "y"), "exactly once, found 2 times"),
        (TableTemplate("a {x:.2f} {target}", "y"), "has a format"),
        (TableTemplate("a {} {target}", "y"), "empty placeholder"),
        (TableTemplate("a {x {target}", "y"), "malformed"),
    ]
    for template, message in cases:
        with pytest.raises(ValueError) as exc:
            template.check(["x", "y"])
        assert message in str(exc.value)
    with pytest.raises(ValueError, match="target column 'y' is not in the table"):
        TableTemplate("{x} {target}", "y").check(["x"])
    with pytest.raises(ValueError, match=r"data row 2: column 'x' is empty"):
        TableTemplate("{x} {target}", "y").texts(
            Table(["x", "y"], [{"x": "1", "y": "2"}, {"x": "", "y": "3"}], "t.csv")
        )
    with pytest.raises(ValueError, match="only the target column"):
        TableTemplate.default(["y"])
    assert not TableTemplate("y {target} at x {x}", "y").target_is_last()
    assert not TableTemplate("y {target} in 2024", "y").target_is_last()


# ------------------------------------------------------------------------------ decimals


def test_decimals_of_agrees_with_decimal():
    r = random.Random(0)
    spellings = ["4.50", "-3", ".25", "1.5e-3", "2.5e3", "1E+2", "0.000", "-7.125e1"]
    spellings += [f"{r.uniform(-1e4, 1e4):.{r.randint(0, 6)}f}" for _ in range(200)]
    spellings += [f"{r.uniform(-10, 10):.{r.randint(0, 4)}e}" for _ in range(200)]
    for s in spellings:
        assert decimals_of(s) == max(0, -Decimal(s).as_tuple().exponent), s
    with pytest.raises(ValueError, match="one number"):
        decimals_of("1.2.3")


def test_write_rounds_like_decimal_half_even():
    r = random.Random(1)
    p = NumberPrecision({"x": 2}, 0)
    for _ in range(500):
        v, d = r.uniform(-1e3, 1e3), r.randint(0, 5)
        want = Decimal(v).quantize(Decimal(1).scaleb(-d), rounding=ROUND_HALF_EVEN)
        got = p.write(v, "x ", decimals=d)
        assert Decimal(got) == want and (got.startswith("-") == (want < 0))
    assert p.write(2.675, "x ") == "2.67"  # the float below 2.675, rounded half-even as printed
    assert p.write(-0.4, "y ") == "0"
    with pytest.raises(ValueError, match="finite"):
        p.write(float("nan"), "x ")


def test_precision_learns_each_field_and_round_trips_json():
    texts = ["price 4.25, 3 items, weight 1.25e-1 kg", "price 12.0, 10 items"]
    p = NumberPrecision.from_texts(texts)
    assert p.decimals == {"price": 2, "": 0, "weight": 3} and p.default == 3
    assert NumberPrecision.from_dict(json.loads(json.dumps(p.to_dict()))) == p
    assert NumberPrecision.from_texts(["no numbers"]) == NumberPrecision({}, None)
    for bad, message in (
        ({}, "needs 'decimals'"),
        ({"decimals": [], "default": 0}, "must be a mapping"),
        ({"decimals": {"a": -1}, "default": 0}, "decimals['a']"),
        ({"decimals": {}, "default": 1.5}, "default must be an int"),
        ({"decimals": {"a": 10**9}, "default": 0}, "must be an int in [0, 50], got 1000000000"),
        ({"decimals": {}, "default": 10**5000}, "an int of more than"),
    ):
        with pytest.raises(ValueError, match=None) as exc:
            NumberPrecision.from_dict(bad)
        assert message in str(exc.value) and len(str(exc.value)) < 200


def _shortest_float32_decimals(spelling):
    """The fewest decimals d such that the spelling rounded to d decimals reads back to the same
    float32 (numpy's float32 parse as the reference), capped by the decimals written."""
    written = max(0, -Decimal(spelling).as_tuple().exponent)
    target = np.float32(spelling)
    for d in range(written + 1):
        if np.float32(f"{Decimal(spelling):.{d}f}") == target:
            return d
    return written


def test_decimals_come_from_the_shortest_spelling_that_round_trips():
    """A table written by pandas with 12 decimals predicts with the decimals its values need,
    not 12; checked against numpy's float32 parsing on random cells."""
    r = random.Random(3)
    cells = []
    for _ in range(300):
        value = round(r.uniform(-1e3, 1e3), r.randint(0, 4))
        cells.append(f"{value:.12f}")  # what df.to_csv(float_format="%.12f") writes
        cells.append(repr(value + r.choice([0.0, 1e-13, -1e-13])))  # float64 noise
    for cell in cells:
        (span,) = find_numbers(cell)
        assert needed_decimals(span) == _shortest_float32_decimals(cell), cell
    p = NumberPrecision.from_texts(["price 12.090000000000, area 3.500000000000"])
    assert p.decimals == {"price": 2, "area": 1}
    assert p.write(13.0 + 1 / 3, "price ") == "13.33"


def test_no_spelling_of_a_float32_needs_more_than_max_decimals():
    extremes = np.array([1e-45, 1.1754944e-38, 3.4028235e38, 1.0, 123.456], dtype=np.float32)
    for x in extremes:
        (span,) = find_numbers(np.format_float_positional(x, unique=True, trim="-"))
        assert needed_decimals(span) <= MAX_DECIMALS
    with pytest.raises(ValueError, match=r"\[0, 50\]"):
        NumberPrecision({}, 0).write(1.0, "x ", decimals=MAX_DECIMALS + 1)


def test_field_before_is_the_field_number_predictions_reads():
    """One rule: the field of a number seen from the text before it equals what
    cauchylin_hf.predict assigns to that number in a whole text."""
    from cauchylin_hf.model import CauchyLMForCausalLM
    from cauchylin_hf.predict import number_predictions
    from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer

    model, ntok = CauchyLMForCausalLM.from_base(
        tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True
    )
    texts = ["width 3, height 4, area 12.", "radius 17.99, mean area 1001.2 and 7", "x 1 y 2"]
    out = number_predictions(model, ntok, texts)
    expected = [field_before(t[: s.start]) for t in texts for s in find_numbers(t)]
    assert out.fields == expected


# ------------------------------------------------------------------------- from a config


def test_backbone_config_from_a_json_file(tmp_path):
    from cauchylin_hf.app.corpus import train_corpus_tokenizer

    tok = train_corpus_tokenizer(["a 1 b 2."] * 4, vocab_size=300)
    spec = {"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 1}
    spec |= {"num_attention_heads": 4, "intermediate_size": 64, "vocab_size": 7}
    f = tmp_path / "config.json"
    f.write_text(json.dumps(spec))
    for where in (f, tmp_path):
        config = backbone_config(where, tok)
        assert config.model_type == "llama" and config.hidden_size == 32
        assert config.vocab_size == len(tok) and config.eos_token_id == tok.eos_token_id
    assert set(PRESETS) == {"qwen2-tiny", "qwen2-small"}
    bad = tmp_path / "bad.json"
    for content, message in (
        ("{", "not a JSON file"),
        ("[1]", "JSON object with a 'model_type'"),
        ('{"model_type": "no-such-model"}', "cannot build"),
    ):
        bad.write_text(content)
        with pytest.raises(ValueError) as exc:
            backbone_config(bad, tok)
        assert message in str(exc.value)
    with pytest.raises(ValueError, match="not a preset"):
        backbone_config("qwen3-huge", tok)
    with pytest.raises(FileNotFoundError, match="config file not found"):
        backbone_config(tmp_path / "none.json", tok)


def test_build_from_config_is_seeded_and_trainable():
    texts = [f"x {i} -> y {2 * i}." for i in range(30)]
    a, ntok = build_from_config("qwen2-tiny", texts, vocab_size=300, seed=3)
    b, _ = build_from_config("qwen2-tiny", texts, vocab_size=300, seed=3)
    frozen, _ = build_from_config("qwen2-tiny", texts, vocab_size=300, freeze_backbone=True)
    assert all(
        (p == q).all() for p, q in zip(a.parameters(), b.parameters(), strict=True)
    )  # the same seed, the same weights
    assert all(p.requires_grad for p in a.backbone.parameters())
    assert not any(p.requires_grad for p in frozen.backbone.parameters())
    assert a.config.hidden_size == PRESETS["qwen2-tiny"]["hidden_size"]
    assert ntok.tokenizer.convert_tokens_to_ids("<NUM>") == a.config.num_token_id


# ------------------------------------------- cells and files a user cannot act on without a hint


@pytest.mark.parametrize(
    "cell, reason",
    [
        (
            "2e-49",
            "is below float32's range (about ±1.4e-45), which the model reads: it would read 0",
        ),
        ("-1e-46", "is below float32's range"),
        ("\u22123e-50", "is below float32's range"),
        ("3.5e38", "is beyond float32's range"),
        ("12,5", "has a decimal comma (write 12.5)"),
        ("-0,75", "has a decimal comma (write -0.75)"),
        ("1,5e3", "has a decimal comma (write 1.5e3)"),
        ("12\u00a0500", "has a thousands separator (write 12500)"),
        ("1\u00a0234\u00a0567,5", "has thousands separators and a decimal comma (write 1234567.5)"),
        ("1.234.567,25", "has thousands separators and a decimal comma (write 1234567.25)"),
    ],
)
def test_targets_beyond_float32_either_way_and_local_spellings_are_named(cell, reason):
    """2e-49 read as 0 with no note while 3.5e38 was refused; a decimal comma and a no-break
    space between thousands were "several numbers (a date, a range?)"."""
    assert reason in (not_a_number(cell) or "")
    assert "several numbers" not in (not_a_number(cell) or "")


def test_the_smallest_float32_and_zero_are_still_targets():
    assert [not_a_number(c) for c in ("0", "-0.0", "0e-99", "1.5e-45", "1e-40")] == [None] * 5
    assert to_float32(1.5e-45) > 0  # a subnormal, read as itself


def test_a_utf16_table_without_a_byte_order_mark_is_named(tmp_path):
    """All-ASCII UTF-16 without a BOM: "line 32: 1 cells, but the header has 3 columns" for a
    31-line file."""
    rows = "".join(f"{i},{i + 1},{2 * i}\n" for i in range(30))
    path = _write(tmp_path / "t.csv", ("a,b,target\n" + rows).encode("utf-16-le"))
    with pytest.raises(ValueError, match=None) as info:
        read_table(path)
    assert "holds NUL characters (the first on line 1)" in str(info.value)
    assert "UTF-16 or UTF-32 without a byte-order mark" in str(info.value)
    assert "cells" not in str(info.value)
