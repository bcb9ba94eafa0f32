"""Texts kept in Arrow on disk: a file, a table or a saved dataset read once, in one pass.

:class:`TextColumn` is a sequence of ``str`` over a ``datasets.Dataset`` column (memory-mapped)
or an Arrow IPC file read a record batch at a time; :func:`file_texts` writes the texts of a
JSONL or plain-text file into such a file, :func:`table_texts` the rows of a CSV table (read by
:func:`cauchylin_hf.data.table.table_rows`) written as texts, and :func:`load_text_column` opens
a ``save_to_disk`` folder. Memory holds one batch of rows, whatever the size of the data.
:func:`text_sample` draws the texts a whole-data statistic reads (:data:`STATS_ROWS`).

Needs the ``datasets`` package (``pip install 'cauchylin[hf]'``); not torch.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .sampling import sample_rows
from .table import table_rows
from .textfile import JSONL_SUFFIXES, line_text, open_text, read_text_file, read_texts

__all__ = [
    "ARROW_BATCH",
    "STATS_ROWS",
    "TextColumn",
    "file_texts",
    "load_text_column",
    "require_datasets",
    "table_texts",
    "text_sample",
]

STATS_ROWS = 20_000
"""The most texts a whole-data statistic reads (the command line's tokenizer, target median and
decimals per field): a random sample of a larger dataset, every text of a smaller one."""

ARROW_BATCH = 8192
"""Rows per Arrow record batch written, read or hashed at a time."""


def require_datasets() -> Any:
    """The ``datasets`` module, imported.

    Returns:
        The module.

    Raises:
        ImportError: ``datasets`` is not installed (the message says how to install it).

    Example:
        >>> require_datasets().__name__
        'datasets'
    """
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - the hf extra installs it
        raise ImportError(
            "streamed datasets need the 'datasets' package: pip install 'cauchylin[hf]'"
        ) from exc
    return datasets


class TextColumn(Sequence[str]):
    """Texts kept in Arrow, as a sequence of ``str``: a ``datasets.Dataset`` column or a file.

    Two stores: a ``datasets.Dataset`` column (memory-mapped by ``datasets``), or an Arrow IPC
    file of a string column ``"text"`` and an integer column ``"line"`` (each row's line in the
    file it was read from) written in batches of 8192 rows (what
    :func:`table_texts` writes), which is read a record batch at a time with plain reads, not
    mapped: a pass over ten million rows then holds one batch, where a mapped file would count
    every page it touched in the process's resident memory. Indexing and slicing read only the
    rows asked for; iterating reads them in order. Training encodes it as it reads
    (:func:`as_numeric_dataset` gives a :class:`LazyNumericDataset`); code written for a list of
    texts runs on it unchanged.

    Args:
        data: a ``datasets.Dataset``, or the path of an Arrow IPC file written as above.
        text_field: the dataset's column of texts.

    Raises:
        ValueError: ``data`` is neither, or the dataset has no column ``text_field``.

    Example:
        >>> import datasets
        >>> texts = TextColumn(datasets.Dataset.from_dict({"text": ["a 1.", "b 2.", "c 3."]}))
        >>> len(texts), texts[1], texts[-2:], list(texts)[0]
        (3, 'b 2.', ['b 2.', 'c 3.'], 'a 1.')
    """

    def __init__(self, data: Any, text_field: str = "text") -> None:
        datasets = require_datasets()
        self.text_field = text_field
        self._cached: tuple[int, Any] | None = None
        self._reader: Any = None
        if isinstance(data, (str, os.PathLike)):
            self.data: Any = None
            self.path: str | None = os.fspath(data)
            self._length = sum(self._file().get_batch(i).num_rows for i in range(self._batches()))
            return
        if not isinstance(data, datasets.Dataset):
            raise ValueError(
                f"data must be a datasets.Dataset or an Arrow file, got {type(data).__name__}"
            )
        if text_field not in data.column_names:
            raise ValueError(f"the dataset has no column {text_field!r}: {data.column_names}")
        self.data = data.select_columns([text_field])
        self.path = None
        self._length = len(data)

    def _file(self) -> Any:
        if self._reader is None:
            import pyarrow as pa

            self._reader = pa.ipc.open_file(pa.OSFile(self.path, "rb"))
        return self._reader

    def _batches(self) -> int:
        return int(self._file().num_record_batches)

    def __getstate__(self) -> dict[str, Any]:
        """What a ``DataLoader`` worker gets: the file's path, not its open reader."""
        return {**self.__dict__, "_reader": None, "_cached": None}

    def __len__(self) -> int:
        """The number of texts."""
        return self._length

    def take(self, rows: Sequence[int]) -> list[str]:
        """The texts of some rows (0-based, in range), in the order given.

        Args:
            rows: row numbers.

        Returns:
            Their texts.

        Example:
            >>> import datasets
            >>> TextColumn(datasets.Dataset.from_dict({"text": ["a", "b", "c"]})).take([2, 0])
            ['c', 'a']
        """
        rows = [int(r) for r in rows]
        if not rows:
            return []
        if self.data is not None:
            return list(self.data[rows][self.text_field])
        out = []
        for r in rows:
            b, j = divmod(r, ARROW_BATCH)
            if self._cached is None or self._cached[0] != b:
                self._cached = (b, self._file().get_batch(b).column(0))
            out.append(self._cached[1][j].as_py())
        return out

    def line(self, row: int) -> int | None:
        """The file's line a row was read from (None for a ``datasets`` column).

        Args:
            row: the row (0-based).

        Returns:
            The line number (1-based), as :func:`table_texts` recorded it.

        Example:
            >>> import datasets
            >>> TextColumn(datasets.Dataset.from_dict({"text": ["a"]})).line(0) is None
            True
        """
        if self.data is not None:
            return None
        b, j = divmod(int(row), ARROW_BATCH)
        return int(self._file().get_batch(b).column(1)[j].as_py())

    def __getitem__(self, index: Any) -> Any:
        """Text ``index`` (a ``str``), or a list of texts for a slice."""
        if isinstance(index, slice):
            return self.take(range(*index.indices(len(self))))
        n = len(self)
        i = int(index)
        if not -n <= i < n:
            raise IndexError(f"text index {i} is out of range for {n} texts")
        return self.take([i % n])[0]

    def batches(self) -> Iterator[list[str]]:
        """The texts in order, a batch of rows at a time.

        Returns:
            An iterator of lists of texts.

        Example:
            >>> import datasets
            >>> [len(b) for b in TextColumn(datasets.Dataset.from_dict({"text": ["a"] * 3})).batches()]
            [3]
        """
        if self.data is not None:
            for batch in self.data.iter(batch_size=ARROW_BATCH):
                yield list(batch[self.text_field])
            return
        for b in range(self._batches()):
            yield self._file().get_batch(b).column(0).to_pylist()

    def __iter__(self) -> Iterator[str]:
        """The texts in order, read a batch of rows at a time."""
        for batch in self.batches():
            yield from batch

    def sample(self, size: int, seed: int = 0) -> list[str]:
        """A random sample of the texts (all of them, in order, when there are at most ``size``).

        Args:
            size: the sample's size (>= 1).
            seed: the draw's seed.

        Returns:
            The sampled texts, in row order.

        Raises:
            ValueError: ``size`` not a positive int.

        Example:
            >>> import datasets
            >>> texts = TextColumn(datasets.Dataset.from_dict({"text": [f"{i}." for i in range(9)]}))
            >>> len(texts.sample(4)), texts.sample(20) == list(texts)
            (4, True)
        """
        rows = sample_rows(len(self), size, seed)
        return list(self) if rows is None else self.take(rows)


def text_sample(texts: Sequence[str], size: int, seed: int = 0) -> list[str]:
    """A random sample of ``size`` texts in their order, or all of them when there are fewer.

    Args:
        texts: the texts (a list, a :class:`TextColumn`, any sequence).
        size: the sample's size (>= 1).
        seed: the draw's seed.

    Returns:
        The texts, a list.

    Raises:
        ValueError: ``size`` not a positive int.

    Example:
        >>> text_sample(["a", "b", "c"], 5), len(text_sample([str(i) for i in range(100)], 10))
        (['a', 'b', 'c'], 10)
    """
    if isinstance(texts, TextColumn):
        return texts.sample(size, seed)
    rows = sample_rows(len(texts), size, seed)
    return list(texts) if rows is None else [texts[i] for i in rows]


_TEMP_DIRS: list[str] = []


def _scratch_dir() -> Path:
    """A folder for this process's Arrow files, removed when the process exits."""
    if not _TEMP_DIRS:
        path = tempfile.mkdtemp(prefix="cauchylin_arrow_")
        _TEMP_DIRS.append(path)
        atexit.register(shutil.rmtree, path, True)
    return Path(_TEMP_DIRS[0])


def table_texts(
    path: str | os.PathLike[str],
    render: Callable[[dict[str, str], int], str],
    *,
    delimiter: str | None = None,
    on_header: Callable[[list[str]], None] | None = None,
) -> TextColumn:
    """The rows of a CSV table as texts, in a memory-mapped ``datasets.Dataset``, in one pass.

    The file is read row by row (never whole), each row written with ``render`` and appended
    to an Arrow IPC file in a temporary folder (removed when the process exits); memory holds
    one batch of rows at a time. Cells are stripped of surrounding spaces and blank lines skipped,
    as :func:`cauchylin_hf.data.table.read_table` does (one loop reads both,
    :func:`~cauchylin_hf.data.table.table_rows`).

    Args:
        path: the CSV (UTF-8, or UTF-16/UTF-32 with a byte-order mark).
        render: a row (``{column: cell}``) and its line number to its text (raise to refuse
            the table, e.g. for a target cell that is not a number).
        delimiter: the cell separator (default: by the suffix,
            :func:`~cauchylin_hf.data.table.delimiter_of`).
        on_header: called with the header's column names before the first row.

    Returns:
        A :class:`TextColumn` of the texts (an Arrow file read a batch at a time), one per data
        row.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: no header or no data row, an empty or repeated column name, a row with
            more or fewer cells than the header (the message names the line), or what
            ``render`` raises.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> f = Path(tempfile.mkdtemp()) / "t.csv"
        >>> _ = f.write_text("x,y\\n1,2.50\\n3,6\\n")
        >>> list(table_texts(f, lambda row, line: f"x {row['x']} -> y {row['y']}."))
        ['x 1 -> y 2.50.', 'x 3 -> y 6.']
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"table file not found: {str(p)!r}")

    def rows() -> Iterator[tuple[int, str]]:
        with open_text(p) as f:
            for line, row in table_rows(f, p, delimiter=delimiter, on_header=on_header):
                yield line, render(row, line)

    return _arrow_texts(rows(), f"{p} has a header but no data row")


def file_texts(path: str | os.PathLike[str], *, text_field: str = "text") -> TextColumn:
    """The texts of a JSONL or plain-text dataset file, in Arrow on disk, read in one pass.

    The file is read a line at a time (never whole) and each text (as
    :func:`~cauchylin_hf.data.textfile.read_texts` reads it: a JSON record's ``text_field`` for
    ``.jsonl`` / ``.ndjson`` / ``.json``, the line itself otherwise; blank lines skipped) appended
    to an Arrow IPC file in a temporary folder (removed when the process exits), with its line
    number; memory holds one batch of 8192 texts. A ``.json`` file holding one JSON array is
    read whole (an array cannot be read a record at a time).

    Args:
        path: the file (UTF-8, or UTF-16/UTF-32 with a byte-order mark).
        text_field: the JSON field holding the text.

    Returns:
        A :class:`TextColumn` of the texts, in file order.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: as :func:`~cauchylin_hf.data.textfile.read_texts` (the message names the file and
            line), or a file without texts.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> f = Path(tempfile.mkdtemp()) / "t.jsonl"
        >>> _ = f.write_text('{"text": "3 eggs."}\\n\\n"12 pens."\\n')
        >>> texts = file_texts(f)
        >>> list(texts), texts.line(1)
        (['3 eggs.', '12 pens.'], 3)
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"dataset file not found: {str(p)!r}")
    suffix = p.suffix.lower()
    empty = f"dataset file {str(p)!r} is empty: it holds no texts"
    if suffix == ".json":
        with open_text(p) as f:
            head = f.read(4096).lstrip()
        if head.startswith("["):
            return _arrow_texts(enumerate(read_texts(p, text_field=text_field), start=1), empty)
    jsonl = suffix in JSONL_SUFFIXES

    def lines() -> Iterator[tuple[int, str]]:
        with open_text(p) as f:
            lineno = 0
            while True:
                try:
                    line = f.readline()
                except UnicodeDecodeError:
                    read_text_file(p)  # raises, naming the line, the encoding and the conversion
                    raise
                if not line:
                    return
                lineno += 1
                where = f"{p}:{lineno}"
                text = line_text(line, jsonl=jsonl, text_field=text_field, where=where)
                if text is not None:
                    yield lineno, text

    return _arrow_texts(lines(), empty)


def _arrow_texts(texts: Iterable[tuple[int, str]], empty: str) -> TextColumn:
    """``(line, text)`` pairs written to an Arrow file a batch at a time, as a TextColumn;
    ``empty`` is the error when there are none."""
    import pyarrow as pa

    out = Path(tempfile.mkstemp(suffix=".arrow", dir=_scratch_dir())[1])
    schema = pa.schema([("text", pa.string()), ("line", pa.int64())])
    batch: list[str] = []
    lines: list[int] = []
    count = 0
    with pa.OSFile(str(out), "wb") as sink:
        writer = pa.ipc.new_file(sink, schema)
        for line, text in texts:
            batch.append(text)
            lines.append(line)
            count += 1
            if len(batch) == ARROW_BATCH:
                writer.write_batch(pa.record_batch([batch, lines], schema=schema))
                batch, lines = [], []
        if batch:
            writer.write_batch(pa.record_batch([batch, lines], schema=schema))
        writer.close()
    if count == 0:
        raise ValueError(empty)
    return TextColumn(out)


def load_text_column(path: str | os.PathLike[str], text_field: str = "text") -> TextColumn:
    """The texts of a dataset saved with ``datasets.Dataset.save_to_disk``, memory-mapped.

    Args:
        path: the folder.
        text_field: the column holding the texts.

    Returns:
        A :class:`TextColumn` over it.

    Raises:
        ValueError: the folder holds no saved ``datasets.Dataset`` (a ``DatasetDict`` names
            its splits: save one split), one that cannot be read (a truncated Arrow file, an
            edited ``dataset_info.json``) or that is empty, or it has no column ``text_field``.

    Example:
        >>> import datasets, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> datasets.Dataset.from_dict({"text": ["3 eggs.", "12 pens."]}).save_to_disk(folder)
        >>> list(load_text_column(folder))
        ['3 eggs.', '12 pens.']
    """
    import pyarrow as pa

    datasets = require_datasets()
    try:
        data = datasets.load_from_disk(os.fspath(path))
    except FileNotFoundError as exc:
        raise ValueError(
            f"{os.fspath(path)!r} is a folder but not a saved datasets.Dataset ({exc})"
        ) from None
    except (OSError, ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
        raise ValueError(_unreadable_dataset(path, exc)) from None
    except pa.ArrowException as exc:  # pragma: no cover (pyarrow's errors are mostly the above)
        raise ValueError(_unreadable_dataset(path, exc)) from None
    if not isinstance(data, datasets.Dataset):
        raise ValueError(
            f"{os.fspath(path)!r} holds a {type(data).__name__} (splits {list(data)}): pass the "
            "folder of one split (save it with dataset_dict[split].save_to_disk(folder))"
        )
    if text_field not in data.column_names:
        raise ValueError(
            f"{os.fspath(path)!r} has no column {text_field!r} (columns: {data.column_names})"
        )
    kind = getattr(data.features[text_field], "dtype", None)
    if kind not in ("string", "large_string"):
        raise ValueError(
            f"{os.fspath(path)!r}: its column {text_field!r} holds {kind or 'lists or records'}, "
            "not texts (strings)"
        )
    if len(data) == 0:
        raise ValueError(f"{os.fspath(path)!r} holds an empty dataset: no texts")
    try:  # the ends of the column: a damaged Arrow file fails here, not in the training
        data[0], data[len(data) - 1]
    except (OSError, ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
        raise ValueError(_unreadable_dataset(path, exc)) from None
    return TextColumn(data, text_field)


def _unreadable_dataset(path: str | os.PathLike[str], exc: BaseException) -> str:
    """One line for a saved dataset that ``datasets`` cannot load (a truncated Arrow file, an
    edited ``dataset_info.json``)."""
    first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    return (
        f"{os.fspath(path)!r} holds a saved dataset that cannot be read ({first}): a file cut "
        "short or edited by hand? Save the dataset again (Dataset.save_to_disk)"
    )
