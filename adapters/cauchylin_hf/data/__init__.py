"""Reading data: files of texts, tables, Arrow on disk, encoded datasets and the collator.

One module an idea, bottom to top (the first four use the standard library only, so the command
line's checks read data files before torch is imported; ``arrow`` needs ``datasets``, the rest
torch):

* :mod:`~cauchylin_hf.data.textfile`: a data file's bytes decoded (UTF-8, or UTF-16/UTF-32 with
  a byte-order mark; compressed and binary files named), and its texts: plain lines or JSON
  lines (:func:`read_texts`);
* :mod:`~cauchylin_hf.data.table`: the table reader: a CSV/TSV file's header and rows of cells
  (:func:`read_table`; one loop, :func:`~cauchylin_hf.data.table.table_rows`, reads every table);
* :mod:`~cauchylin_hf.data.template`: a table's rows written as texts through a template
  (:class:`TableTemplate`), and what a target cell must be;
* :mod:`~cauchylin_hf.data.sampling`: samples and NumPy columns of a pass over many rows;
* :mod:`~cauchylin_hf.data.arrow`: texts kept in Arrow on disk (:class:`TextColumn`), written
  from a file, a table or a saved dataset in one pass;
* :mod:`~cauchylin_hf.data.table_stream`: a table's rows checked and written as texts to Arrow;
* :mod:`~cauchylin_hf.data.files`: what a data path holds and its texts, as both the command
  line and :func:`~cauchylin_hf.training.train` read it (:func:`read_path_texts`);
* :mod:`~cauchylin_hf.data.dataset`, :mod:`~cauchylin_hf.data.collator`: encoded examples in
  memory (:class:`NumericDataset`) and the padding collator (:class:`NumericDataCollator`);
* :mod:`~cauchylin_hf.data.streaming`: datasets encoded as they are read
  (:class:`LazyNumericDataset`, :class:`IterableNumericDataset`, :func:`as_numeric_dataset`).

The names below are imported from their module on first use, so importing this package
imports nothing else.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the submodule that defines it, imported on first attribute access
_HOMES = {
    "IGNORE_INDEX": "collator",
    "NumericDataCollator": "collator",
    "NumericDataset": "dataset",
    "read_texts": "textfile",
    "read_text_file": "textfile",
    "line_text": "textfile",
    "Table": "table",
    "read_table": "table",
    "TableTemplate": "template",
    "TextColumn": "arrow",
    "file_texts": "arrow",
    "load_text_column": "arrow",
    "read_path_texts": "files",
    "LazyNumericDataset": "streaming",
    "IterableNumericDataset": "streaming",
    "as_numeric_dataset": "streaming",
}

__all__ = [
    "IGNORE_INDEX",
    "IterableNumericDataset",
    "LazyNumericDataset",
    "NumericDataCollator",
    "NumericDataset",
    "Table",
    "TableTemplate",
    "TextColumn",
    "as_numeric_dataset",
    "file_texts",
    "line_text",
    "load_text_column",
    "read_path_texts",
    "read_table",
    "read_text_file",
    "read_texts",
]


def __getattr__(name: str) -> Any:
    """Import a name of :data:`__all__` from its submodule on first use (PEP 562)."""
    if name in _HOMES:
        value = getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
