"""Column names in the default template: one field per column, named after the column.

A table's column names are written into every row's text, and the words before each number are
its field (:func:`cauchylin_hf.numbers.field_of`), the metric group ``field/<name>`` of
``evaluate``. Names with digits, brackets, commas, or names that differ only in case must still
give one field per column; what had to change is listed once (``renamed_columns``).
"""

from __future__ import annotations

import random

import pytest
import torch
from cauchylin_hf.data.table import Table
from cauchylin_hf.data.template import TableTemplate
from cauchylin_hf.numbers import find_numbers, to_float32
from cauchylin_hf.precision import field_before
from cauchylin_hf.predict import NumberPredictions, ValuePrediction, number_metrics

# The names (scikit-learn's diabetes with readable headers), and harder ones.
COLUMNS = [
    "Age (years)",
    "log(TG)",
    "BMI (kg/m2)",
    "a, b",
    "BMI",
    "bmi",
    "%",
    "s1",
    "progression 1y",
]


def _table(columns: list[str], n: int = 20) -> Table:
    r = random.Random(0)
    rows = [{c: f"{r.uniform(-100, 100):.{r.randint(0, 3)}f}" for c in columns} for _ in range(n)]
    return Table(columns, rows, None)


def test_every_column_is_one_field_named_after_it() -> None:
    table = _table(COLUMNS)
    tt = TableTemplate.default(COLUMNS)
    assert tt.target == "progression 1y" and tt.target_is_last() and not tt.literal_numbers()
    for row, text in zip(table.rows, tt.texts(table), strict=True):
        spans = find_numbers(text)
        # one number per cell, in order: no name adds or splits a number
        assert [s.value for s in spans] == [to_float32(float(row[c])) for c in COLUMNS], text
        fields = [field_before(text[: s.start]) for s in spans]
        assert len(set(fields)) == len(COLUMNS) and all(fields), (text, fields)
        # a comma in a name would make one more part of the row than there are features
        assert text.split(" -> ")[0].count(", ") == len(COLUMNS) - 2
    fields = dict(zip(COLUMNS, [field_before(p) for p in _prefixes(tt, table)], strict=True))
    assert fields["Age (years)"] == "age years"
    assert fields["log(TG)"] == "log tg"
    assert fields["BMI (kg/m2)"] == "bmi kg m₂"
    assert fields["a, b"] == "a b"
    assert fields["progression 1y"] == "progression ₁y"
    assert fields["s1"] == "s₁"
    assert fields["BMI"] == "bmi" and fields["bmi"] == "bmi ₆"  # case alone: the position added


def _prefixes(tt: TableTemplate, table: Table) -> list[str]:
    text = tt.texts(table)[0]
    return [text[: s.start] for s in find_numbers(text)]


def test_each_column_gets_its_own_metric_group() -> None:
    """``number_metrics`` groups the numbers by field: one group per column, none unnamed."""
    table = _table(COLUMNS, n=3)
    texts = TableTemplate.default(COLUMNS).texts(table)
    fields = [field_before(t[: s.start]) for t in texts for s in find_numbers(t)]
    n = len(fields)
    pred = ValuePrediction(
        torch.zeros(n), torch.zeros(n), torch.ones(n), torch.ones(n), (0.5,),
        -torch.ones(n, 1), torch.ones(n, 1), "identity",
    )  # fmt: skip
    is_target = torch.tensor([k % len(COLUMNS) == len(COLUMNS) - 1 for k in range(n)])
    metrics = number_metrics(
        NumberPredictions(pred, torch.zeros(n), torch.zeros(n), is_target, fields)
    )
    groups = {k.rsplit("/", 1)[0] for k in metrics if k.startswith("field/")}
    assert len(groups) == len(COLUMNS) and "field/(none)" not in groups
    assert all(metrics[f"{g}/count"] == 3 for g in groups)


def test_renamed_columns_are_said_once() -> None:
    from cauchylin_hf.data.template import column_labels, label_of, renamed_columns

    renamed = renamed_columns(COLUMNS)
    assert renamed == {
        "Age (years)": "Age years",
        "log(TG)": "log TG",
        "BMI (kg/m2)": "BMI kg/m₂",
        "a, b": "a b",
        "bmi": "bmi ₆",
        "%": "column ₇",
        "s1": "s₁",
        "progression 1y": "progression ₁y",
    }
    labels = column_labels(COLUMNS)
    assert all(labels[c] == c for c in COLUMNS if c not in renamed)
    assert renamed_columns(["age", "bmi", "price"]) == {}
    assert label_of("a\tb\nc") == "a b c"


def test_names_that_cannot_be_placeholders_are_refused_with_the_names() -> None:
    with pytest.raises(ValueError, match=r"':' or '!' cannot be template placeholders: \['a:b'\]"):
        TableTemplate.default(["a:b", "y"])


def test_a_bad_placeholder_is_a_template_error_that_says_how_to_fix_the_template() -> None:
    """The fix of a bad placeholder is in the template, not in ``--target``: the error is a
    ``TemplateError`` (the command line adds no ``--target`` hint to it) naming the placeholder,
    the closest column and the columns."""
    from cauchylin_hf.data.template import TemplateError

    columns = ["age", "bmi", "price"]
    with pytest.raises(TemplateError) as exc:
        TableTemplate("age {agee}, bmi {bmi} -> price {target}.", "price").check(columns)
    message = str(exc.value)
    assert "{agee} is not a column" in message and "did you mean {age}?" in message
    assert "{target} for the target column" in message and "--target" not in message
    with pytest.raises(TemplateError, match=r"write \{target\} once, where the number"):
        TableTemplate("age {age} -> price {price} or {target}", "price").check(columns)
    for malformed in ("age {age -> {target}", "age {age:.1f} -> {target}", "{} {target}"):
        with pytest.raises(TemplateError):
            TableTemplate(malformed, "price").check(columns)
    # a missing target column is not a template error: --target is the fix there
    with pytest.raises(ValueError) as missing:
        TableTemplate("age {age} -> {target}", "cost").check(columns)
    assert not isinstance(missing.value, TemplateError)


def _awkward_table(path, rows: int = 40):
    rng = random.Random(0)
    lines = ["Age (years),log(TG),BMI,bmi,y"]
    for _ in range(rows):
        lines.append(",".join(str(rng.randint(1, 90)) for _ in range(5)))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_command_line_says_once_which_column_names_it_writes_differently(tmp_path, capsys):
    """`train` on a table with awkward names: the note on renamed columns comes once (the table
    is read by the checks before torch and again for training), then training runs."""
    from cauchylin_hf.app import cli

    data = _awkward_table(tmp_path / "t.csv")
    argv = ["train", "--from-config", "qwen2-tiny", "--data", str(data), "--max-steps", "1"]
    argv += ["--output-dir", str(tmp_path / "out"), "--threads", "1", "--no-progress"]
    argv += ["--calibration", "0", "--no-readouts"]
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if "writes some column names differently" in line]
    assert len(notes) == 1, err
    assert "'BMI' as" in notes[0] or "'bmi' as" in notes[0]


def test_a_bad_placeholder_on_the_command_line_does_not_advise_target(tmp_path, capsys):
    """The placeholder is the problem, not the target column: no `--target` hint."""
    from cauchylin_hf.app import cli

    data = _awkward_table(tmp_path / "t.csv")
    argv = ["train", "--from-config", "qwen2-tiny", "--data", str(data)]
    argv += ["--template", "a {z} -> {target}", "--output-dir", str(tmp_path / "out")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "{z}" in err[0], err
    assert "--target" not in err[0]
