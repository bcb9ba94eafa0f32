"""The table reader: a CSV (or tab-separated) file's header and rows of cells, as spelled.

A table's cells are separated by a comma, or by a tab in a ``.tsv`` file (:func:`delimiter_of`);
its first non-blank record is the header (:func:`check_header`); every record after it is a row
of as many cells (stripped of surrounding spaces), blank ones skipped. One loop reads every
table this way (:func:`table_rows`), whether it is held in memory (:func:`read_table`) or
written to Arrow a batch at a time (:func:`cauchylin_hf.data.arrow.table_texts`). The bytes are
decoded by :mod:`cauchylin_hf.data.textfile`. Standard library only (the command line's checks
read tables before torch is imported).
"""

from __future__ import annotations

import csv
import io
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from .textfile import open_text, read_text_file

__all__ = [
    "TABLE_SUFFIXES",
    "Table",
    "check_header",
    "delimiter_of",
    "field_limit_message",
    "is_table_file",
    "read_columns",
    "read_table",
    "table_rows",
]

TABLE_SUFFIXES = {".csv": ",", ".tsv": "\t"}
"""The suffixes of table files and the cell separator of each."""


def delimiter_of(path: str | os.PathLike[str]) -> str:
    """The cell separator of a table file, by its suffix: a tab for ``.tsv``, else a comma.

    Args:
        path: the file name.

    Returns:
        ``"\\t"`` or ``","``.

    Example:
        >>> delimiter_of("t.TSV"), delimiter_of("t.csv")
        ('\\t', ',')
    """
    return TABLE_SUFFIXES.get(Path(path).suffix.lower(), ",")


class Table(NamedTuple):
    """The cells of a CSV file, as spelled in the file.

    Attributes:
        columns: the header's column names, in order.
        rows: one ``{column: cell}`` dict per data row (cells stripped of surrounding spaces).
        path: the file it was read from.
        lines: the file's line number of each data row (None when the rows were not read from
            a file).

    Example:
        >>> t = Table(["x", "y"], [{"x": "1", "y": "2.50"}], Path("t.csv"))
        >>> t.columns, t.rows[0]["y"], len(t), t.where(0)
        (['x', 'y'], '2.50', 1, 't.csv, data row 1')
    """

    columns: list[str]
    rows: list[dict[str, str]]
    path: Path | None
    lines: list[int] | None = None

    def where(self, i: int) -> str:
        """Where data row ``i`` (0-based) is: the file, the row number and its line.

        Args:
            i: the row's index in :attr:`rows`.

        Returns:
            ``"<path>, data row <i + 1> (line <n>)"`` (no line when :attr:`lines` is None).

        Example:
            >>> Table(["x"], [{"x": "1"}], Path("t.csv"), [3]).where(0)
            't.csv, data row 1 (line 3)'
        """
        line = f" (line {self.lines[i]})" if self.lines is not None else ""
        return f"{self.path}, data row {i + 1}{line}"

    def __len__(self) -> int:
        """The number of data rows."""
        return len(self.rows)


def is_table_file(path: str | os.PathLike[str]) -> bool:
    """Whether a data file is a table by its suffix (``.csv``; ``.tsv`` is tab-separated).

    Args:
        path: the file name.

    Returns:
        True for ``.csv`` and ``.tsv`` (any case).

    Example:
        >>> is_table_file("data/diabetes.CSV"), is_table_file("train.jsonl")
        (True, False)
    """
    return Path(path).suffix.lower() in TABLE_SUFFIXES


def check_header(cells: list[str], path: str | os.PathLike[str]) -> list[str]:
    """Check a table's header row: every column named, no name twice.

    Args:
        cells: the header's cells (stripped).
        path: the table, for the message.

    Returns:
        ``cells``.

    Raises:
        ValueError: a column without a name, a repeated name, or one column whose name holds
            ``;``, a tab or ``|`` (a table separated by them; the message names the file).

    Example:
        >>> check_header(["age", "bmi"], "t.csv")
        ['age', 'bmi']
        >>> check_header(["age", "age"], "t.csv")
        Traceback (most recent call last):
        ...
        ValueError: t.csv: the header repeats the column names ['age']
    """
    if len(cells) == 1:  # one column: often a file separated by something else than expected
        for separator, name in ((";", "semicolons"), ("\t", "tabs"), ("|", "bars")):
            if separator in cells[0]:
                fix = "as a .tsv file" if separator == "\t" else "as CSV with commas"
                raise ValueError(
                    f"{path}: the header is one column, {cells[0][:60]!r}: its cells look "
                    f"separated by {name}; save the table {fix}"
                )
    bad = [i for i, name in enumerate(cells) if not name]
    if bad:
        raise ValueError(f"{path}: column {bad[0] + 1} of the header has no name")
    counts = Counter(cells)  # linear in the columns (a header may have many thousand)
    repeated = sorted(n for n, k in counts.items() if k > 1)
    if repeated:
        raise ValueError(f"{path}: the header repeats the column names {repeated}")
    return cells


def field_limit_message(path: str | os.PathLike[str], line: int, exc: Exception) -> str:
    """The message of a table cell longer than the ``csv`` module's limit.

    Args:
        path: the table.
        line: the line where the record with that cell starts.
        exc: the ``csv.Error``.

    Returns:
        One line naming the file, the line and the limit, and what it usually is.

    Example:
        >>> field_limit_message("t.csv", 1, ValueError("field larger than field limit"))
        ... # doctest: +ELLIPSIS
        't.csv, line 1: field larger than field limit (... characters); a cell that long is usually an unclosed quote (") that swallows the lines after it'
    """
    import csv

    return (
        f"{path}, line {line}: {exc} ({csv.field_size_limit()} characters); a cell that long "
        'is usually an unclosed quote (") that swallows the lines after it'
    )


def table_rows(
    lines: Iterable[str],
    path: str | os.PathLike[str],
    *,
    delimiter: str | None = None,
    on_header: Callable[[list[str]], None] | None = None,
) -> Iterator[tuple[int, dict[str, str]]]:
    """The rows of a table, one ``(line, {column: cell})`` pair at a time.

    Cells are stripped of surrounding spaces; blank records are skipped; the first record is
    the header (:func:`check_header`); each row has as many cells as the header.

    Args:
        lines: the table's text a line at a time, opened with ``newline=""`` (a file from
            :func:`~cauchylin_hf.data.textfile.open_text`, or ``io.StringIO(text, newline="")``).
        path: the file, for messages (and its separator, :func:`delimiter_of`).
        delimiter: the cell separator (default: by the suffix of ``path``).
        on_header: called with the header's column names before the first row.

    Yields:
        The line each row starts on (a quoted cell may span lines) and the row.

    Raises:
        ValueError: no header or no data row, an empty or repeated column name, a row with
            more or fewer cells than the header, a cell longer than the ``csv`` module's limit,
            or bytes that are not text (:func:`~cauchylin_hf.data.textfile.read_text_file`);
            each message names the file, and the line where it can.

    Example:
        >>> list(table_rows(io.StringIO("x,y\\n\\n1, 2\\n", newline=""), "t.csv"))
        [(3, {'x': '1', 'y': '2'})]
    """
    p = Path(path)
    reader = csv.reader(lines, delimiter=delimiter or delimiter_of(p))
    header: list[str] | None = None
    rows = 0
    first = 1  # the line a record starts on (a quoted cell may span lines)
    while True:
        try:
            record = next(reader)
        except StopIteration:
            break
        except UnicodeDecodeError:
            read_text_file(p)  # raises, naming the line, the encoding and the conversion
            raise
        except csv.Error as exc:
            raise ValueError(field_limit_message(p, first, exc)) from None
        start, first = first, reader.line_num + 1
        if not any(cell.strip() for cell in record):
            continue
        cells = [cell.strip() for cell in record]
        if header is None:
            header = check_header(cells, p)
            if on_header is not None:
                on_header(header)
            continue
        if len(cells) != len(header):
            raise ValueError(
                f"{p}, line {start}: {len(cells)} cells, but the header has {len(header)} columns"
            )
        rows += 1
        yield start, dict(zip(header, cells, strict=True))
    if header is None:
        raise ValueError(f"{p} is empty: a header row and at least one data row are needed")
    if not rows:
        raise ValueError(f"{p} has a header but no data row")


def read_columns(path: str | os.PathLike[str]) -> list[str]:
    """The column names of a table, read from its header row alone (a large table's cells are
    checked as it is streamed, :mod:`cauchylin_hf.data.table_stream`).

    Args:
        path: a ``.csv`` or ``.tsv`` file.

    Returns:
        The names in the header row (empty for an empty file).

    Raises:
        UnicodeDecodeError: a header that is not text of the encoding its byte-order mark
            names (UTF-8 without one).
        ValueError: a file that is not text (:func:`~cauchylin_hf.data.textfile.check_binary`), or a
            header cell longer than the ``csv`` module's limit.

    Example:
        >>> import tempfile
        >>> table = Path(tempfile.mkdtemp()) / "t.tsv"
        >>> _ = table.write_text("age\\tprice\\n59\\t151\\n")
        >>> read_columns(table)
        ['age', 'price']
    """
    p = Path(path)
    try:
        with open_text(p) as f:
            return next(csv.reader(f, delimiter=delimiter_of(p)), [])
    except csv.Error as exc:
        raise ValueError(field_limit_message(p, 1, exc)) from None


def read_table(path: str | os.PathLike[str]) -> Table:
    """Read a CSV (or, by its ``.tsv`` suffix, tab-separated) file with a header row.

    The file is UTF-8, or UTF-16/UTF-32 with a byte-order mark; a UTF-8 byte-order mark is
    ignored. Empty lines are skipped.

    Args:
        path: the file.

    Returns:
        The :class:`Table` (with the line number of each data row).

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: no header or no data row, an empty or repeated column name, a row with
            more or fewer cells than the header, a cell longer than the ``csv`` module's field
            limit (often an unclosed quote), or bytes that are not text
            (:func:`~cauchylin_hf.data.textfile.read_text_file`: not UTF-8, or UTF-16 without a
            byte-order mark); each message names the file, and the line where it can.

    Example:
        >>> import pathlib, tempfile
        >>> f = pathlib.Path(tempfile.mkdtemp()) / "t.csv"
        >>> _ = f.write_text("age,s1,target\\n59, 0.04 ,151\\n48,-0.03,75\\n")
        >>> t = read_table(f)
        >>> t.columns, t.rows[0], t.lines
        (['age', 's1', 'target'], {'age': '59', 's1': '0.04', 'target': '151'}, [2, 3])
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"table file not found: {str(p)!r}")
    header: list[str] = []
    text = io.StringIO(read_text_file(p), newline="")
    rows = list(table_rows(text, p, on_header=header.extend))
    return Table(header, [row for _, row in rows], p, [line for line, _ in rows])
