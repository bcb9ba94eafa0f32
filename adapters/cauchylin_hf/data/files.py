"""What a data path holds, and its texts: the one reading that the command line and
:func:`~cauchylin_hf.training.train` share.

A data path is a folder saved with ``datasets.Dataset.save_to_disk`` (its text column, memory
mapped), a table (``.csv``, or tab-separated ``.tsv``: each row written as a text by a template,
:class:`~cauchylin_hf.data.template.TableTemplate.default` unless one is given), or a file of
texts (JSON lines or plain lines, :func:`~cauchylin_hf.data.textfile.read_texts`; one larger
than :data:`STREAM_BYTES` is read a line at a time into Arrow on disk). A table is read row by
row into Arrow whatever its size (:func:`~cauchylin_hf.data.table_stream.stream_table_texts`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from .arrow import file_texts, load_text_column
from .table import is_table_file
from .table_stream import StreamedTable, stream_table_texts
from .template import TableTemplate
from .textfile import read_texts

__all__ = [
    "DATASET_FOLDER",
    "STREAM_BYTES",
    "TABLE",
    "TEXTS",
    "PathTexts",
    "data_kind",
    "read_path_texts",
]

STREAM_BYTES = 1024 * 1024
"""A JSONL or text file larger than this is read a line at a time into Arrow on disk
(:func:`~cauchylin_hf.data.arrow.file_texts`) and encoded as it is read, as a table is; a smaller
one is read into memory."""

DATASET_FOLDER = "dataset folder"
TABLE = "table"
TEXTS = "texts"


def data_kind(path: str | os.PathLike[str]) -> str:
    """What a data path holds, by what it is: a folder, a table's suffix, or else texts.

    Args:
        path: the path (it need not exist: a missing file is texts, refused when read).

    Returns:
        :data:`DATASET_FOLDER` (a folder: a saved ``datasets.Dataset``), :data:`TABLE`
        (``.csv``/``.tsv``, any case) or :data:`TEXTS`.

    Example:
        >>> data_kind("flats.CSV"), data_kind("train.jsonl")
        ('table', 'texts')
    """
    if Path(path).is_dir():
        return DATASET_FOLDER
    return TABLE if is_table_file(path) else TEXTS


class PathTexts(NamedTuple):
    """The texts of a data path, and for a table the table and its template.

    Attributes:
        texts: the texts: a list, or a :class:`~cauchylin_hf.data.arrow.TextColumn` (Arrow on
            disk) for a table, a saved dataset or a large file.
        table: the :class:`~cauchylin_hf.data.table_stream.StreamedTable` (None but for a table).
        template: the template its rows were written with (None but for a table).

    Example:
        >>> PathTexts(["3 eggs."]).table is None
        True
    """

    texts: Sequence[str]
    table: StreamedTable | None = None
    template: TableTemplate | None = None


def read_path_texts(
    path: str | os.PathLike[str],
    *,
    template_for: Callable[[list[str]], TableTemplate] | None = None,
    text_field: str = "text",
) -> PathTexts:
    """The texts of a data path, read as :func:`data_kind` says it holds them.

    Args:
        path: a saved ``datasets`` folder, a table, or a file of texts.
        template_for: a table's template for its header's columns (default:
            :meth:`TableTemplate.default <cauchylin_hf.data.template.TableTemplate.default>`,
            one field per column, the target a column named ``target`` or else the last).
        text_field: the text column of a saved dataset, or the JSON field of a JSONL file.

    Returns:
        The :class:`PathTexts`.

    Raises:
        FileNotFoundError: no such file.
        ValueError: what the reader of that kind refuses (the message names the file, and the
            line or row where it can): a file that is not text, a malformed line, a table whose
            template does not fit or whose target cells are not numbers, an unreadable or empty
            dataset.

    Example:
        >>> import tempfile
        >>> table = Path(tempfile.mkdtemp()) / "t.csv"
        >>> _ = table.write_text("age,target\\n59,151\\n48,75\\n")
        >>> list(read_path_texts(table).texts)
        ['age 59 -> target 151.', 'age 48 -> target 75.']
    """
    kind = data_kind(path)
    if kind == DATASET_FOLDER:
        return PathTexts(load_text_column(path, text_field))
    if kind == TABLE:
        table, template = stream_table_texts(path, template_for or TableTemplate.default)
        return PathTexts(table.texts, table, template)
    p = Path(path)
    if p.is_file() and p.stat().st_size > STREAM_BYTES:  # a line at a time into Arrow on disk
        return PathTexts(file_texts(p, text_field=text_field))
    return PathTexts(read_texts(p, text_field=text_field))
