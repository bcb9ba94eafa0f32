"""A table too large for memory: its rows written as texts into memory-mapped Arrow, in one pass.

:func:`cauchylin_hf.data.table.read_table` keeps every row as a dict of cells (about 1 KB a row of
a small table); :func:`stream_table_texts` reads the file row by row instead, checks every target
cell (:func:`~cauchylin_hf.data.template.not_a_number`), writes each row with its template
(:meth:`~cauchylin_hf.data.template.TableTemplate.text`) and keeps the texts in an Arrow file that
the operating system maps in as it is read (:func:`cauchylin_hf.data.arrow.table_texts`). The
texts come back as a :class:`~cauchylin_hf.data.arrow.TextColumn`, a sequence of ``str`` that
training encodes as it reads (:class:`~cauchylin_hf.data.streaming.LazyNumericDataset`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from .arrow import TextColumn, table_texts
from .template import TARGET, TableTemplate, holds_number, not_a_number

__all__ = ["StreamedTable", "stream_table_texts"]

_CACHED_CELLS = 1 << 16  # distinct target cells remembered at a time
_WORD_ROWS = 10_000  # the first rows whose feature cells are checked for numbers


class StreamedTable(NamedTuple):
    """A table read by :func:`stream_table_texts`: its columns and where each row came from.

    Attributes:
        columns: the header's column names.
        texts: the rows' texts.
        path: the file.
        word_rows: for each column the template writes (the target aside), how many of the
            first ``word_sample`` rows' cells hold no number
            (:func:`~cauchylin_hf.data.template.category_columns` reads it; None when not counted).
        word_sample: the rows ``word_rows`` counted (the first 10,000 at most).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> f = Path(tempfile.mkdtemp()) / "t.csv"
        >>> _ = f.write_text("x,y\\n\\n1,2\\n")
        >>> table, _ = stream_table_texts(f, TableTemplate.default)
        >>> table.columns, table.where(0).endswith("t.csv, data row 1 (line 3)")
        (['x', 'y'], True)
    """

    columns: list[str]
    texts: TextColumn
    path: Path
    word_rows: dict[str, int] | None = None
    word_sample: int = 0

    def where(self, i: int) -> str:
        """Where data row ``i`` (0-based) is, as :meth:`cauchylin_hf.data.table.Table.where` says.

        Args:
            i: the row.

        Returns:
            ``"<path>, data row <i + 1> (line <n>)"``.

        Example:
            >>> import tempfile
            >>> from pathlib import Path
            >>> f = Path(tempfile.mkdtemp()) / "t.csv"
            >>> _ = f.write_text("x,y\\n1,2\\n")
            >>> stream_table_texts(f, TableTemplate.default)[0].where(0).endswith("row 1 (line 2)")
            True
        """
        return f"{self.path}, data row {i + 1} (line {self.texts.line(i)})"

    def __len__(self) -> int:
        """The number of data rows."""
        return len(self.texts)


def stream_table_texts(
    path: str | os.PathLike[str],
    template_for: Callable[[list[str]], TableTemplate],
) -> tuple[StreamedTable, TableTemplate]:
    """The texts of a table's rows, written by its template, checked and stored in one pass.

    Args:
        path: the table (``.csv``; ``.tsv`` is tab-separated), with a header row.
        template_for: the template for the header's columns (e.g. ``TableTemplate.default``).

    Returns:
        ``(the table, whose texts are one per data row, the template)``.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: what :func:`cauchylin_hf.data.table.read_table` refuses (no header or data
            row, a row with the wrong number of cells, ...), a template that does not fit the
            columns, an empty cell the template needs, or target cells that are not numbers
            (the message names the first one, its row and line, and how many there are).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> f = Path(tempfile.mkdtemp()) / "t.csv"
        >>> _ = f.write_text("x,y\\n1,2.50\\n3,6\\n")
        >>> table, tt = stream_table_texts(f, TableTemplate.default)
        >>> list(table.texts), tt.target
        (['x 1 -> y 2.50.', 'x 3 -> y 6.'], 'y')
    """
    p = Path(path)
    state: dict[str, Any] = {"rows": 0, "bad": 0, "first": None}
    # A column repeats its cells (a price of one decimal has a few thousand spellings in a
    # million rows): each distinct target cell is checked once.
    reasons: dict[str, str | None] = {}
    numbered: dict[str, bool] = {}  # whether a feature cell holds a number, by its spelling

    def on_header(columns: list[str]) -> None:
        tt = template_for(columns)
        tt.check(columns)
        state["template"] = tt
        state["columns"] = list(columns)
        state["needed"] = list(dict.fromkeys(tt.placeholders()))
        state["words"] = dict.fromkeys((c for c in state["needed"] if c != tt.target), 0)
        # str.format_map reads "a.b", "a[0]" and "7" as attribute, item and position
        state["fast"] = not any(set(n) & set(".[]") or n.isdigit() for n in state["needed"])

    def render(row: dict[str, str], line: int) -> str:
        tt: TableTemplate = state["template"]
        state["rows"] += 1
        cell = row.get(tt.target, "")
        if cell not in reasons:
            if len(reasons) >= _CACHED_CELLS:
                reasons.clear()
            reasons[cell] = not_a_number(cell)
        reason = reasons[cell]
        if reason is not None:
            state["bad"] += 1
            if state["first"] is None:
                state["first"] = (state["rows"], line, reason)
        words: dict[str, int] = state["words"] if state["rows"] <= _WORD_ROWS else {}
        for c in words:
            text = row.get(c) or ""
            has = numbered.get(text)
            if has is None:
                if len(numbered) >= _CACHED_CELLS:
                    numbered.clear()
                has = numbered[text] = holds_number(text)
            if not has:
                words[c] += 1
        if state["fast"] and all(row.get(c) for c in state["needed"]):
            # str.format_map writes what TableTemplate.text writes when every cell it needs is
            # there (its placeholders carry no format): about 4x faster than parsing the
            # template again for each row
            return tt.template.format_map({**row, TARGET: row[tt.target]})
        try:
            return tt.text(row)  # raises, naming the empty cell
        except ValueError as exc:
            raise ValueError(f"{p}, data row {state['rows']}: {exc}") from None

    column = table_texts(p, render, on_header=on_header)
    tt = state["template"]
    if state["bad"]:
        i, line, reason = state["first"]
        raise ValueError(
            f"target column {tt.target!r} must hold a number in every row, but {p}, data row "
            f"{i} (line {line}) does not: {reason}; {state['bad']} of {state['rows']} rows are "
            "not numbers"
        )
    sample = min(state["rows"], _WORD_ROWS)
    return StreamedTable(state["columns"], column, p, state["words"], sample), tt
