"""Tables as text: a CSV file becomes one sentence per row through a template.

A template is text with ``{column}`` placeholders, e.g. ``"age {age}, bmi {bmi} -> progression
{target}"``. ``{target}`` stands for the target column (the one the model learns to predict); any
other placeholder names a column of the table. A cell is written as it is spelled in the file, so
the model reads the numbers with the precision the table gives them.

The prompt of a row (for :func:`cauchylin_hf.predict.predict_values`) is the row's text up to the
target placeholder: ``"age 59, bmi 32.1 -> progression "``. The target is the number at the
target placeholder; when the template writes it last, it is the last number of each text (what
:func:`cauchylin_hf.predict.number_predictions` takes as the target by default).

Without a template, :meth:`TableTemplate.default` writes every other column as ``name value``,
separated by commas, then ``-> target value.``. Each column is one field of the text, named after
the column (:func:`cauchylin_hf.numbers.field_of` reads it back: the metric group
``field/<name>``). Column names are written as they are, except what cannot be written safely
(:func:`column_labels`, :func:`renamed_columns`): ASCII digits become subscript digits
(``s1`` -> ``s₁``, ``1y`` -> ``₁y``: the number grammar of :mod:`cauchylin_hf.numbers` reads
ASCII digits that follow no letter as numbers, so ``1y 0.5`` would hold two numbers);
punctuation that separates the parts of a text (``, ; : . ! ? ( ) [ ] { } =`` and ``->``)
becomes a space (``Age (years)`` -> ``Age
years``: a comma in a name would make the row ambiguous, and a bracket would cut the field short);
and names that would still read as the same field as another column, or as no field, get the
column's position (``age`` and ``Age`` -> ``age``, ``Age ₃``). In a template of your own, write
the names as you like; :meth:`TableTemplate.literal_numbers` lists numbers in the template's own
text, which the model would read as values (the command line warns about them).

The default template writes ``->`` before the target's name, a break of
:func:`~cauchylin_hf.numbers.field_of`: the target's field is its column's name whatever the
word column before it holds (``fuel heating oil -> price 429.``: ``price``). A column whose
cells hold no number (``heating oil``, ``SI1``) is read as words, a category
(:func:`category_columns`); :meth:`TableTemplate.joined_fields` finds where a template of your
own lets such a column's words join the next number's field.
"""

from __future__ import annotations

import difflib
import math
import re
import string
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from ..numbers import FIELD_BREAK, field_of, find_numbers, is_number, parse_number, to_float32
from .table import Table

__all__ = [
    "MAX_FIELDS",
    "TARGET",
    "TableTemplate",
    "TemplateError",
    "category_columns",
    "check_width",
    "column_labels",
    "holds_number",
    "label_of",
    "not_a_number",
    "renamed_columns",
]

TARGET = "target"
"""The placeholder name that stands for the target column in a template."""

MAX_FIELDS = 10_000
"""The most placeholders a template may write into one text. Each field is at least a word, a
number and a separator (three tokens), so a text of more fields is longer than the context of
the models this library trains; a wider table is written with a ``--template`` that picks the
columns (a table may have any number of columns a template does not name)."""

_SHOWN_UNKNOWN = 10  # unknown placeholders named (and matched to a column) in one message
_SHOWN_COLUMNS = 50  # columns listed in a message

_SUBSCRIPTS = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")
# What a label cannot hold: the punctuation that ends a field (cauchylin_hf.numbers.field_of) and
# separates the parts of a row's text, and line breaks.
_UNSAFE = re.compile(r"(?:->|→|[,;:.!?()\[\]{}=\s])+")
_SEPARATORS = ",'\u00a0\u2009\u202f "  # comma, apostrophe, no-break, thin and narrow spaces
_THOUSANDS = re.compile(rf"[+-]?[0-9]{{1,3}}(?:[{_SEPARATORS}][0-9]{{3}})+(?:\.[0-9]+)?")
_DECIMAL_COMMA = re.compile(r"[+-]?[0-9]+,[0-9]+(?:[eE][+-]?[0-9]+)?")
# 1.234.567,5 and 1 234 567,5: thousands by dots or spaces, then a decimal comma
_EUROPEAN = re.compile(r"[+-]?[0-9]{1,3}(?:[.'\u00a0\u2009\u202f ][0-9]{3})+,[0-9]+")


class TemplateError(ValueError):
    """A template that cannot write a table's rows: malformed, a placeholder that is not a
    column, or the target placeholder missing or repeated.

    The fix is in the template (its message says which placeholder and the columns there are),
    not in the choice of the target column.

    Example:
        >>> try:
        ...     TableTemplate("age {agee} -> y {target}", "y").check(["age", "y"])
        ... except TemplateError as exc:
        ...     print(exc)
        template placeholder {agee} is not a column of the table (did you mean {age}?); write each placeholder as a column's name, or {target} for the target column; columns: ['age', 'y']
    """


def not_a_number(cell: str) -> str | None:
    """Why a table cell cannot be a target number (None when it is one).

    A target cell must be exactly one number of the grammar (:func:`cauchylin_hf.numbers.is_number`)
    that fits float32: otherwise the text would hold no number where the target belongs, or
    several, and a model would learn (or be scored on) another number of the row.

    Args:
        cell: the cell as spelled in the file.

    Returns:
        None for a number, else a short reason (with a hint for thousands separators, decimal
        commas, digits other than 0-9, numbers beyond float32's range either way, dates and
        missing-value markers).

    Example:
        >>> [not_a_number(c) for c in ("151", "-0.03", "1.5e3")]
        [None, None, None]
        >>> not_a_number("12,500")
        "'12,500' has a thousands separator (write 12500; or 12.500 for a decimal comma)"
        >>> not_a_number("12,5")
        "'12,5' has a decimal comma (write 12.5)"
        >>> not_a_number("2e-49")  # float32 reads it as 0
        "'2e-49' is below float32's range (about ±1.4e-45), which the model reads: it would read 0 (rescale the column)"
        >>> not_a_number("n/a")
        "'n/a' is not a number (a missing value? drop the row)"
    """
    shown = repr(cell if len(cell) <= 40 else cell[:37] + "...")
    if is_number(cell):
        if parse_number(cell) == 0 and float(cell.lstrip("+-\u2212\u2013")) != 0:
            return (
                f"{shown} is below float32's range (about ±1.4e-45), which the model reads: it "
                "would read 0 (rescale the column)"
            )
        return None
    if not cell:
        return "the cell is empty"
    if _THOUSANDS.fullmatch(cell):
        plain = re.sub(f"[{_SEPARATORS}]", "", cell)
        comma = cell.count(",") == 1 and "." not in cell  # 12,500 may be 12.5 written 12,500
        decimal = f"; or {cell.replace(',', '.')} for a decimal comma" if comma else ""
        return f"{shown} has a thousands separator (write {plain}{decimal})"
    if _DECIMAL_COMMA.fullmatch(cell):
        return f"{shown} has a decimal comma (write {cell.replace(',', '.')})"
    if _EUROPEAN.fullmatch(cell):
        whole, fraction = cell.rsplit(",", 1)
        plain = re.sub(f"[.{_SEPARATORS}]", "", whole) + "." + fraction
        return f"{shown} has thousands separators and a decimal comma (write {plain})"
    if any(not c.isascii() and unicodedata.category(c) == "Nd" for c in cell):
        return f"{shown} uses digits other than 0-9 (the number grammar reads ASCII digits)"
    try:
        value = float(cell)
    except ValueError:
        value = math.nan
    if math.isinf(value):
        return f"{shown} is infinite"
    try:
        to_float32(value)
    except ValueError:
        return f"{shown} is beyond float32's range (about ±3.4e38), which the model reads"
    if cell.lower() in {"nan", "na", "n/a", "null", "none", "unknown", "?", "-", "missing"}:
        return f"{shown} is not a number (a missing value? drop the row)"
    if len(find_numbers(cell)) > 1:
        return f"{shown} holds several numbers (a date, a range?); a target is one number"
    return f"{shown} is not a number"


def holds_number(cell: str) -> bool:
    """Whether a table cell holds a number of the grammar (``5kg`` does, ``SI1`` does not).

    Args:
        cell: the cell as spelled in the file.

    Returns:
        True when :func:`cauchylin_hf.numbers.find_numbers` finds a number in it.

    Example:
        >>> [holds_number(c) for c in ("151", "5kg", "3.5%", "SI1", "heating oil", "")]
        [True, True, True, False, False, False]
    """
    return bool(find_numbers(cell))


def category_columns(word_rows: dict[str, int], rows: int) -> tuple[list[str], dict[str, int]]:
    """The columns read as categories (words), from how many rows' cells hold no number.

    Args:
        word_rows: for each column, the rows whose cell holds no number (:func:`holds_number`).
        rows: the table's rows.

    Returns:
        ``(categories, partly)``: the columns none of whose cells holds a number, and
        ``{column: rows}`` for the columns where some cells do and some do not.

    Example:
        >>> category_columns({"area": 0, "grade": 200, "fuel": 200, "age": 3}, 200)
        (['grade', 'fuel'], {'age': 3})
    """
    categories = [c for c, n in word_rows.items() if rows and n >= rows]
    partly = {c: n for c, n in word_rows.items() if 0 < n < rows}
    return categories, partly


def label_of(column: str) -> str:
    """How the default template writes a column name, on its own: ASCII digits as subscript
    digits, punctuation that separates the parts of a text as a space.

    :func:`column_labels` adds what a whole table needs (one distinct field per column).

    Args:
        column: the column name.

    Returns:
        The name with ``0-9`` replaced by ``₀-₉`` (never read as a number), each run of
        ``, ; : . ! ? ( ) [ ] { } = ->`` and white space replaced by one space, stripped.

    Example:
        >>> label_of("s1"), label_of("bmi"), label_of("Age (years)"), label_of("log(TG)")
        ('s₁', 'bmi', 'Age years', 'log TG')
    """
    return _UNSAFE.sub(" ", column.translate(_SUBSCRIPTS)).strip()


def column_labels(columns: Sequence[str]) -> dict[str, str]:
    """How the default template writes each column's name: one distinct field per column.

    Each name becomes :func:`label_of` of it. A label whose field
    (:func:`cauchylin_hf.numbers.field_of`: its last three words, in lower case) would be empty
    (a name without letters, such as ``%``) or the same as an earlier column's (``age`` and
    ``Age``; ``log(TG)`` and ``log TG``) gets the column's position in subscript digits
    (``Age ₃``), so that every column is its own field, and so its own metric group.

    Args:
        columns: the table's columns.

    Returns:
        ``{column: label}`` for every column, in order.

    Example:
        >>> column_labels(["age", "Age", "%", "progression 1y"])
        {'age': 'age', 'Age': 'Age ₂', '%': 'column ₃', 'progression 1y': 'progression ₁y'}
    """
    labels: dict[str, str] = {}
    fields: set[str] = set()
    for position, column in enumerate(columns, start=1):
        label = label_of(column)
        field = field_of(f", {label} ")
        if not field or field in fields:
            label = f"{label or 'column'} {str(position).translate(_SUBSCRIPTS)}"
            if not field_of(f", {label} ").strip("₀₁₂₃₄₅₆₇₈₉ "):  # no letters: say "column"
                label = f"column {str(position).translate(_SUBSCRIPTS)}"
        labels[column] = label
        fields.add(field_of(f", {label} "))
    return labels


def renamed_columns(columns: Sequence[str]) -> dict[str, str]:
    """The columns that the default template writes under another name (say so once).

    Args:
        columns: the table's columns.

    Returns:
        ``{column: label}`` for the columns whose label (:func:`column_labels`) differs from the
        name; empty when every name is written as it is.

    Example:
        >>> renamed_columns(["age", "Age (years)", "s1", "y"])
        {'Age (years)': 'Age years', 's1': 's₁'}
    """
    return {c: label for c, label in column_labels(columns).items() if label != c}


@dataclass(frozen=True)
class TableTemplate:
    """A template that writes a table row as text, and the row's target column.

    Attributes:
        template: text with ``{column}`` placeholders; ``{target}`` stands for the target column;
            ``{{`` and ``}}`` are literal braces.
        target: the name of the target column.

    Example:
        >>> tt = TableTemplate("age {age}, bmi {bmi} -> progression {target}.", "y")
        >>> row = {"age": "59", "bmi": "32.1", "y": "151"}
        >>> tt.text(row)
        'age 59, bmi 32.1 -> progression 151.'
        >>> tt.prompt(row)
        'age 59, bmi 32.1 -> progression '

    """

    template: str
    target: str

    @classmethod
    def default(cls, columns: Sequence[str], target: str | None = None) -> TableTemplate:
        """The default template: ``name value`` for every other column, then the target.

        ``"age {age}, s₁ {s1} -> target {target}."``: names as in :func:`column_labels` (one
        field per column), features in the table's order, the target last after ``->``, and a
        full stop (where generation stops).

        Args:
            columns: the table's columns.
            target: the target column (default: a column named ``target``, else the last one).

        Returns:
            The template.

        Raises:
            TemplateError: a table too wide to be one text (:func:`check_width`).
            ValueError: an unknown target, a table with only the target column, or a column name
                with a brace, ``:`` or ``!`` (it cannot be a placeholder).

        Example:
            >>> TableTemplate.default(["age", "s1", "progression"]).template
            'age {age}, s₁ {s1} -> progression {target}.'
        """
        check_width(len(columns), default=True)  # before the labels of every column are made
        cols = list(columns)
        name = _default_target(cols) if target is None else target
        if name not in cols:
            raise ValueError(
                f"target column {name!r} is not in the table; columns: {_column_list(cols)}"
            )
        # A placeholder names its column: braces would end it, ":" and "!" start a format.
        unfit = [c for c in cols if any(ch in c for ch in "{}:!")]
        if unfit:
            raise ValueError(
                f"column names with braces, ':' or '!' cannot be template placeholders: {unfit}; "
                "rename those columns in the file"
            )
        features = [c for c in cols if c != name]
        if not features:
            raise ValueError(f"the table has only the target column {name!r}: nothing to read")
        labels = column_labels(cols)
        parts = ", ".join(f"{labels[c]} {{{c}}}" for c in features)
        return cls(f"{parts} -> {labels[name]} {{{TARGET}}}.", name)

    def _pieces(self) -> list[tuple[str, str | None]]:
        """``(literal text, placeholder or None)`` pairs; raises on a malformed template."""
        try:
            parsed = list(string.Formatter().parse(self.template))
        except ValueError as exc:
            raise TemplateError(f"template {self.template!r} is malformed: {exc}") from None
        out: list[tuple[str, str | None]] = []
        for literal, name, spec, conversion in parsed:
            if name is not None and (spec or conversion):
                raise TemplateError(
                    f"template placeholder {{{name}{'!' + conversion if conversion else ''}"
                    f"{':' + spec if spec else ''}}} has a format; write {{{name}}}: cells are "
                    "written as the table spells them"
                )
            if name == "":
                raise TemplateError("template has an empty placeholder {}: name a column")
            out.append((literal, name))
        return out

    def placeholders(self) -> list[str]:
        """The column names the template reads, in order (``{target}`` as the target column).

        Returns:
            Column names (the target column once for each ``{target}``).

        Raises:
            ValueError: a malformed template (an unmatched brace, a format spec, ``{}``).

        Example:
            >>> TableTemplate("a {x} b {target}", "y").placeholders()
            ['x', 'y']
        """
        return [
            self.target if name == TARGET else name
            for _, name in self._pieces()
            if name is not None
        ]

    def check(self, columns: Sequence[str], *, need_target: bool = True) -> None:
        """Check the template against a table's columns.

        Args:
            columns: the table's columns.
            need_target: the table must hold the target column (training, evaluation; not for
                prompts).

        Raises:
            TemplateError: a malformed template, a placeholder that is not a column, no target
                placeholder or more than one, or more than :data:`MAX_FIELDS` placeholders.
            ValueError: (with ``need_target``) a table without the target column.

        The check takes time linear in the number of columns and placeholders.

        Example:
            >>> TableTemplate("a {x} b {target}", "y").check(["x", "y"])
            >>> TableTemplate("a {z} b {target}", "y").check(["x", "y"])
            Traceback (most recent call last):
            ...
            cauchylin_hf.data.template.TemplateError: template placeholder {z} is not a column of the table; write each placeholder as a column's name, or {target} for the target column; columns: ['x', 'y']
        """
        names = self.placeholders()
        cols = list(columns)
        check_width(len(names))
        known = set(cols)  # a set: a table of many thousand columns is checked in linear time
        unknown = [n for n in dict.fromkeys(names) if n not in known and n != self.target]
        if unknown:
            shown = unknown[:_SHOWN_UNKNOWN]
            more = f" and {len(unknown) - len(shown)} more" if len(unknown) > len(shown) else ""
            listed = ", ".join(f"{{{n}}}" for n in shown) + more
            guesses = [
                f"{{{close[0]}}}"
                for n in shown
                if (close := difflib.get_close_matches(n, cols, n=1, cutoff=0.6))
            ]
            guess = f" (did you mean {', '.join(guesses)}?)" if guesses else ""
            are = "is not a column" if len(unknown) == 1 else "are not columns"
            raise TemplateError(
                f"template placeholder{'s' if len(unknown) > 1 else ''} {listed} {are} of the "
                f"table{guess}; write each placeholder as a column's name, or {{{TARGET}}} for "
                f"the target column; columns: {_column_list(cols)}"
            )
        if names.count(self.target) != 1:
            raise TemplateError(
                f"the template must hold the target ({{{TARGET}}} or {{{self.target}}}) exactly "
                f"once, found {names.count(self.target)} times: {self.template!r}; write "
                f"{{{TARGET}}} once, where the number to predict goes"
            )
        if need_target and self.target not in known:
            raise ValueError(
                f"target column {self.target!r} is not in the table; columns: {_column_list(cols)}"
            )

    def _render(self, row: dict[str, str], *, stop_at_target: bool) -> str:
        out: list[str] = []
        for literal, name in self._pieces():
            out.append(literal)
            if name is None:
                continue
            column = self.target if name == TARGET else name
            if stop_at_target and column == self.target:
                return "".join(out)
            cell = row.get(column)
            if cell is None or cell == "":
                raise ValueError(f"column {column!r} is empty in row {row!r}")
            out.append(cell)
        return "".join(out)

    def text(self, row: dict[str, str]) -> str:
        """The text of one row.

        Args:
            row: ``{column: cell}``.

        Returns:
            The template with every placeholder replaced by its cell.

        Raises:
            ValueError: a cell the template needs is missing or empty, or a malformed template.

        Example:
            >>> TableTemplate("x {x} -> y {target}", "y").text({"x": "2", "y": "4.0"})
            'x 2 -> y 4.0'
        """
        return self._render(row, stop_at_target=False)

    def prompt(self, row: dict[str, str]) -> str:
        """The text of one row up to the target placeholder (the target cell is not needed).

        Args:
            row: ``{column: cell}``.

        Returns:
            The prompt, ending where the target number would start.

        Raises:
            ValueError: a cell before the target is missing or empty, or a malformed template.

        Example:
            >>> TableTemplate("x {x} -> y {target}", "y").prompt({"x": "2"})
            'x 2 -> y '
        """
        return self._render(row, stop_at_target=True)

    def target_is_last(self) -> bool:
        """Whether the target is the last number of every text: no placeholder and no number
        of the template's own text come after it.

        Returns:
            True when the target placeholder is the last one and only words or punctuation
            follow it.

        Raises:
            ValueError: a malformed template.

        Example:
            >>> TableTemplate("x {x} -> y {target}.", "y").target_is_last()
            True
            >>> TableTemplate("y {target} at x {x}", "y").target_is_last()
            False
        """
        pieces = self._pieces()
        names = [self.target if n == TARGET else n for _, n in pieces]
        if self.target not in names:
            return False
        at = names.index(self.target)
        after = pieces[at + 1 :]
        return all(n is None for _, n in after) and not any(
            find_numbers(literal) for literal, _ in after
        )

    def text_before_target(self) -> str:
        """The template's own text between the placeholder before the target and the target.

        Returns:
            The text (its words are the target's field, :func:`~cauchylin_hf.precision.field_of`,
            when the cell before is a number).

        Raises:
            ValueError: a malformed template, or no target placeholder.

        Example:
            >>> TableTemplate("x {x} -> y {target}, at t {t}", "y").text_before_target()
            ' -> y '
        """
        for literal, name in self._pieces():
            if name is not None and (name == TARGET or name == self.target):
                return literal
        raise ValueError(f"the template has no target placeholder: {self.template!r}")

    def joined_fields(self) -> list[tuple[str, str]]:
        """Pairs of columns where the words of the first would join the field of the second.

        The field of a number is the words before it since the last break
        (:func:`~cauchylin_hf.numbers.field_of`). When the template's text between two
        placeholders holds no break (``,`` ``;`` ``->`` ...) and no number, the words of the
        first column's cells (a category such as ``heating oil``) become part of the second
        column's field, which is then split by the first column's value. The default template
        has no such pair.

        Returns:
            ``(column, next column)`` pairs, in the template's order.

        Raises:
            ValueError: a malformed template.

        Example:
            >>> TableTemplate("{fuel} flat costs {target}.", "price").joined_fields()
            [('fuel', 'price')]
            >>> TableTemplate("fuel {fuel} -> price {target}.", "price").joined_fields()
            []
        """
        pieces = self._pieces()
        names = [self.target if n == TARGET else n for _, n in pieces]
        pairs: list[tuple[str, str]] = []
        for i in range(1, len(pieces)):
            first, second, literal = names[i - 1], names[i], pieces[i][0]
            if first is None or second is None:
                continue
            if FIELD_BREAK.search(literal) is None and not find_numbers(literal):
                pairs.append((first, second))
        return pairs

    def literal_numbers(self) -> list[str]:
        """Numbers in the template's own text (outside placeholders), e.g. the ``1`` of ``s1``.

        The model would read them as values, like the cells. Usually a column name with digits
        was meant as a word: write it with subscript digits (:func:`label_of`), without digits,
        or with the digits glued to a letter (``s1``, ``Q3``: words).

        Returns:
            The spellings found, in order.

        Raises:
            ValueError: a malformed template.

        Example:
            >>> TableTemplate("over 65 {old} -> y {target}", "y").literal_numbers()
            ['65']
        """
        return [n.text for literal, _ in self._pieces() for n in find_numbers(literal)]

    def texts(self, table: Table) -> list[str]:
        """The text of every row of a table (checked first with :meth:`check`).

        Args:
            table: the table.

        Returns:
            One text per row.

        Raises:
            ValueError: as :meth:`check`, or an empty cell (the message names its line).

        Example:
            >>> from pathlib import Path
            >>> t = Table(["x", "y"], [{"x": "1", "y": "2"}, {"x": "3", "y": "6"}], Path("t.csv"))
            >>> TableTemplate("x {x} -> y {target}.", "y").texts(t)
            ['x 1 -> y 2.', 'x 3 -> y 6.']
        """
        self.check(table.columns)
        return [self._row(table, i, prompt=False) for i in range(len(table))]

    def target_values(self, table: Table) -> list[float]:
        """The target number of every row, checking that each target cell is one number.

        A target cell that is a word, a missing-value marker (``n/a``, ``NaN``), a date, a
        number with a thousands separator or beyond float32 would leave the text without a
        number where the target belongs (or with several): the model would learn, and be
        scored on, another number of the row. Such a table is refused.

        Args:
            table: the table.

        Returns:
            One float per row (the cell's value, rounded to float32 as the model reads it).

        Raises:
            ValueError: as :meth:`check`, or a target cell that is not a number; the message
                names the column, the first such row (with its line) and how many there are.

        Example:
            >>> from pathlib import Path
            >>> t = Table(["x", "y"], [{"x": "1", "y": "2.5"}, {"x": "3", "y": "n/a"}],
            ...           Path("t.csv"), [2, 3])
            >>> TableTemplate("x {x} -> y {target}.", "y").target_values(Table(
            ...     t.columns, t.rows[:1], t.path))
            [2.5]
            >>> TableTemplate("x {x} -> y {target}.", "y").target_values(t)
            Traceback (most recent call last):
            ...
            ValueError: target column 'y' must hold a number in every row, but t.csv, data row 2 (line 3) does not: 'n/a' is not a number (a missing value? drop the row); 1 of 2 rows are not numbers
        """
        self.check(table.columns)
        cells = [row.get(self.target, "") for row in table.rows]
        reasons = [not_a_number(cell) for cell in cells]
        bad = [i for i, r in enumerate(reasons) if r is not None]
        if bad:
            raise ValueError(
                f"target column {self.target!r} must hold a number in every row, but "
                f"{table.where(bad[0])} does not: {reasons[bad[0]]}; {len(bad)} of "
                f"{len(cells)} rows are not numbers"
            )
        return [parse_number(cell) for cell in cells]

    def prompts(self, table: Table) -> list[str]:
        """The prompt of every row of a table (the target column may be missing).

        Args:
            table: the table.

        Returns:
            One prompt per row.

        Raises:
            ValueError: as :meth:`check` (without the target column), or an empty cell.

        Example:
            >>> from pathlib import Path
            >>> t = Table(["x"], [{"x": "1"}, {"x": "3"}], Path("new.csv"))
            >>> TableTemplate("x {x} -> y {target}.", "y").prompts(t)
            ['x 1 -> y ', 'x 3 -> y ']
        """
        self.check(table.columns, need_target=False)
        return [self._row(table, i, prompt=True) for i in range(len(table))]

    def _row(self, table: Table, i: int, *, prompt: bool) -> str:
        try:
            return self._render(table.rows[i], stop_at_target=prompt)
        except ValueError as exc:
            raise ValueError(f"{table.path}, data row {i + 1}: {exc}") from None


def check_width(fields: int, *, default: bool = False) -> None:
    """Refuse a template that writes more than :data:`MAX_FIELDS` cells into each text.

    Args:
        fields: the template's placeholders (for the default template, the table's columns).
        default: the count is that of the default template (one field per column).

    Raises:
        TemplateError: too many fields (the message says how to pick the columns).

    Example:
        >>> check_width(12)
        >>> check_width(60_001, default=True)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        cauchylin_hf.data.template.TemplateError: a table of 60001 columns is too wide to be written as one text: ...
    """
    if fields <= MAX_FIELDS:
        return
    what = (
        f"a table of {fields} columns is too wide to be written as one text"
        if default
        else f"the template writes {fields} cells into each text"
    )
    raise TemplateError(
        f"{what}: at least {3 * fields} tokens (a word, a number and a separator per field), "
        f"longer than a model's context; a text holds at most {MAX_FIELDS} fields: choose "
        'the columns with --template "name {column}, ... -> target {target}."'
    )


def _column_list(columns: list[str]) -> str:
    """The columns as a message lists them: all of a table of up to 50, else the first 50."""
    if len(columns) <= _SHOWN_COLUMNS:
        return str(columns)
    return f"{columns[:_SHOWN_COLUMNS]} and {len(columns) - _SHOWN_COLUMNS} more"


def _default_target(columns: list[str]) -> str:
    return TARGET if TARGET in columns else columns[-1]
