"""Datasets beyond memory: texts kept in Arrow on disk and encoded as they are read.

:class:`~cauchylin_hf.data.NumericDataset` encodes every text before training starts and keeps
every example in memory (about 4 KB a row of a small table): a million rows take minutes and
gigabytes before the first step. The classes here keep only the *texts*, in Arrow on disk (a
Hugging Face ``datasets`` dataset, memory-mapped, or an Arrow file read a batch at a time:
:class:`TextColumn`), and encode a batch of them when the ``DataLoader`` asks for it, with the
same :meth:`NumericDataset.from_texts <cauchylin_hf.data.NumericDataset.from_texts>` call (so the
ids and values are the same):

* :class:`LazyNumericDataset`: a map-style dataset over a :class:`TextColumn` or a
  ``datasets.Dataset`` with a text column. The ``DataLoader``'s sampler picks the rows, so under
  ``torchrun`` each process encodes only the rows of its own shard, and with
  ``dataloader_num_workers=k`` the encoding runs in ``k`` worker processes ahead of the step.
* :class:`IterableNumericDataset`: an ``IterableDataset`` over a ``datasets.IterableDataset`` (a
  streaming one included) or any re-iterable source of texts, encoded in chunks; each
  ``DataLoader`` worker reads only its share.
* :func:`table_texts` writes a CSV table's rows as texts into an Arrow file in one streaming pass
  and returns them as a :class:`TextColumn`.
* :func:`as_numeric_dataset` turns any data argument (texts, a file, a ``datasets`` dataset, an
  encoded dataset) into a dataset for :func:`~cauchylin_hf.training.train`.

Statistics that would need every encoded example use a stated sample or a hash instead:
:meth:`LazyNumericDataset.split_held_out` holds out the texts whose hash falls below a threshold
(copies of a text go to the same side; memory holds the held-out rows only),
:func:`sample_rows` draws the rows the readouts are solved on and :func:`text_sample` the texts
the command line's statistics read (:data:`STATS_ROWS`).

Needs the ``datasets`` package (``pip install 'cauchylin[hf]'``).
"""

from __future__ import annotations

import atexit
import csv
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from .data import NumericDataset, read_texts
from .textfile import check_binary, check_header, field_limit_message, line_text, read_text_file
from .tokenizer import NumericTokenizer

__all__ = [
    "STATS_ROWS",
    "CopiesOfOneText",
    "GrowingColumns",
    "IterableNumericDataset",
    "LazyNumericDataset",
    "TextColumn",
    "UniformSample",
    "as_numeric_dataset",
    "file_texts",
    "load_text_column",
    "sample_rows",
    "table_texts",
    "text_sample",
]

STATS_ROWS = 20_000
"""The most texts a whole-data statistic reads (the command line's tokenizer, target median and
decimals per field): a random sample of a larger dataset, every text of a smaller one."""

_ARROW_BATCH = 8192  # rows per Arrow record batch written or hashed at a time
_BOMS = (
    (b"\xef\xbb\xbf", "utf-8-sig"),
    (b"\xff\xfe\x00\x00", "utf-32"),
    (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xff\xfe", "utf-16"),
    (b"\xfe\xff", "utf-16"),
)


def _datasets() -> Any:
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - the hf extra installs it
        raise ImportError(
            "streamed datasets need the 'datasets' package: pip install 'cauchylin[hf]'"
        ) from exc
    return datasets


def _encode(
    texts: list[str], tokenizer: NumericTokenizer, max_length: int | None, name: str
) -> list[dict[str, torch.Tensor]]:
    """The examples of ``texts``, encoded exactly as :meth:`NumericDataset.from_texts` does."""
    ds = NumericDataset.from_texts(texts, tokenizer, max_length=max_length, name=name)
    return [ds[i] for i in range(len(ds))]


def _check_length(
    examples: list[dict[str, torch.Tensor]], max_tokens: int | None, where: Callable[[int], str]
) -> None:
    if max_tokens is None:
        return
    for j, ex in enumerate(examples):
        n = int(ex["input_ids"].numel())
        if n > max_tokens:
            raise ValueError(
                f"{where(j)} is {n} tokens long, longer than the model's context of "
                f"{max_tokens} positions (max_position_embeddings): cut it (max_length="
                f"{max_tokens}, --max-length {max_tokens}) or shorten it"
            )


class CopiesOfOneText(ValueError):
    """Every training text is a copy of one text: nothing can be held out to calibrate on (a
    held-out copy would be a text training saw). Train on it and calibrate nothing."""

    def __init__(self, count: int) -> None:
        super().__init__(
            f"the {count} training texts are all copies of one text: none can be held out to "
            "calibrate on (a held-out copy is a text training saw), so the model trains on "
            "all of them and its intervals are not calibrated"
        )
        self.count = count


def _text_hash(text: str, seed: int) -> int:
    """A 64-bit hash of a text that depends only on the text and ``seed`` (not on the process)."""
    key = seed.to_bytes(8, "little", signed=True)
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8, key=key)
    return int.from_bytes(digest.digest(), "little")


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
        datasets = _datasets()
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
            b, j = divmod(r, _ARROW_BATCH)
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
        b, j = divmod(int(row), _ARROW_BATCH)
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
            for batch in self.data.iter(batch_size=_ARROW_BATCH):
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


class LazyNumericDataset(Dataset):
    """A map-style dataset of texts kept in Arrow, encoded when they are read.

    Item ``i`` equals ``NumericDataset.from_texts([text_i], tokenizer, max_length=...)[0]``; a
    batch of indices (``__getitems__``, which the ``DataLoader`` calls) is encoded in one
    tokenizer call. Nothing encoded is kept: memory holds the texts being read, not the
    examples.

    Args:
        data: a :class:`TextColumn`, or a ``datasets.Dataset`` with a string column
            ``text_field`` (e.g. from ``datasets.load_dataset("json", data_files=...)``).
        tokenizer: the numeric tokenizer.
        text_field: the dataset's column holding the texts.
        max_length: cut each example to at most this many tokens (as ``from_texts``).
        max_tokens: refuse (ValueError when read) an example longer than this (the model's
            context); None accepts any length.
        name: what the texts are called in error messages.
        where: where a row (0-based) is, for error messages (default ``"<name>, row <n>"``).

    Raises:
        ValueError: ``data`` is neither, has no column ``text_field`` or no rows, or
            ``tokenizer`` is not a ``NumericTokenizer``. Reading an item raises
            ``from_texts``'s errors (a text with no tokens) naming the row.

    Example:
        >>> import datasets
        >>> from cauchylin_hf.testing import tiny_tokenizer
        >>> ntok = NumericTokenizer(tiny_tokenizer(300))
        >>> hf = datasets.Dataset.from_dict({"text": ["3 eggs.", "12 pens."]})
        >>> ds = LazyNumericDataset(hf, ntok)
        >>> len(ds), ds[1]["numeric_values"][ds[1]["input_ids"] == ntok.num_token_id].tolist()
        (2, [12.0])
    """

    def __init__(
        self,
        data: Any,
        tokenizer: NumericTokenizer,
        *,
        text_field: str = "text",
        max_length: int | None = None,
        max_tokens: int | None = None,
        name: str = "texts",
        where: Callable[[int], str] | None = None,
    ) -> None:
        if not isinstance(tokenizer, NumericTokenizer):
            raise ValueError(
                f"tokenizer must be a cauchylin_hf.tokenizer.NumericTokenizer, got "
                f"{type(tokenizer).__name__}; wrap it: NumericTokenizer(tokenizer)"
            )
        if not isinstance(data, TextColumn):
            datasets = _datasets()
            if not isinstance(data, datasets.Dataset):
                raise ValueError(
                    f"data must be a TextColumn or a datasets.Dataset, got {type(data).__name__}"
                )
            if text_field not in data.column_names:
                raise ValueError(
                    f"{name} has no column {text_field!r} (columns: {data.column_names}); pass "
                    "text_field=... to choose another"
                )
            data = TextColumn(data, text_field)
        self.column = data
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.max_tokens = max_tokens
        self.name = name
        self._where = where
        # the rows held: every row of the column but ``_excluded`` (sorted), or ``_indices``
        self._indices: np.ndarray | None = None
        self._excluded: np.ndarray | None = None
        if len(self) == 0:
            raise ValueError(f"{name} is empty: the dataset needs at least one example")

    def __len__(self) -> int:
        """The number of examples."""
        if self._indices is not None:
            return int(self._indices.size)
        skipped = 0 if self._excluded is None else int(self._excluded.size)
        return len(self.column) - skipped

    def _rows(self, indices: Sequence[int]) -> list[int]:
        n = len(self)
        pos = np.asarray([int(i) for i in indices], dtype=np.int64)
        if pos.size and (pos.min() < -n or pos.max() >= n):
            bad = pos[(pos < -n) | (pos >= n)][0]
            raise IndexError(f"index {bad} is out of range for {n} examples")
        pos %= max(n, 1)
        if self._indices is not None:
            return [int(r) for r in self._indices[pos]]
        if self._excluded is None:
            return [int(r) for r in pos]
        # the i-th row kept is i plus the number of excluded rows e_j with e_j - j <= i
        shift = self._excluded - np.arange(self._excluded.size)
        return [int(r) for r in pos + np.searchsorted(shift, pos, side="right")]

    def rows(self, indices: Sequence[int]) -> list[int]:
        """The column's row numbers of some examples (what error messages name, 0-based).

        Args:
            indices: example indices.

        Returns:
            Their rows in the underlying column.

        Raises:
            IndexError: an index out of range.

        Example:
            >>> import datasets
            >>> from cauchylin_hf.testing import tiny_tokenizer
            >>> hf = datasets.Dataset.from_dict({"text": ["3 eggs.", "12 pens."]})
            >>> LazyNumericDataset(hf, NumericTokenizer(tiny_tokenizer(300))).rows([-1])
            [1]
        """
        return self._rows(indices)

    def texts(self, indices: Sequence[int]) -> list[str]:
        """The texts of some examples.

        Args:
            indices: example indices.

        Returns:
            Their texts, in order.

        Raises:
            IndexError: an index out of range.

        Example:
            >>> import datasets
            >>> from cauchylin_hf.testing import tiny_tokenizer
            >>> hf = datasets.Dataset.from_dict({"text": ["3 eggs.", "12 pens."]})
            >>> LazyNumericDataset(hf, NumericTokenizer(tiny_tokenizer(300))).texts([1, 0])
            ['12 pens.', '3 eggs.']
        """
        return self.column.take(self._rows(indices))

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, torch.Tensor]]:
        """Examples ``indices``, encoded in one tokenizer call (the ``DataLoader`` calls this)."""
        rows = self._rows(indices)
        texts = self.column.take(rows)
        bad = [r for r, t in zip(rows, texts, strict=True) if not isinstance(t, str)]
        if bad:
            raise ValueError(f"{self.where(bad[0])}: the text must be a str")
        try:
            examples = _encode(texts, self.tokenizer, self.max_length, self.name)
        except ValueError:
            for r, t in zip(rows, texts, strict=True):  # find the row and name it
                _encode([t], self.tokenizer, self.max_length, f"{self.where(r)}: text")
            raise
        _check_length(examples, self.max_tokens, lambda j: self.where(rows[j]))
        return examples

    def where(self, row: int) -> str:
        """Where a row (0-based) is, for error messages.

        Args:
            row: the row of the underlying column.

        Returns:
            What ``where`` gave the constructor says, else ``"<name>, row <row + 1>"``.

        Example:
            >>> import datasets
            >>> from cauchylin_hf.testing import tiny_tokenizer
            >>> hf = datasets.Dataset.from_dict({"text": ["3 eggs."]})
            >>> LazyNumericDataset(hf, NumericTokenizer(tiny_tokenizer(300)), name="t").where(0)
            't, row 1'
        """
        return self._where(row) if self._where is not None else f"{self.name}, row {row + 1}"

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        """Example ``index``: a dict of 1-D tensors, as :class:`NumericDataset` gives it."""
        return self.__getitems__([index])[0]

    def __repr__(self) -> str:
        """The name and the number of examples."""
        return f"LazyNumericDataset({self.name!r}, examples={len(self)})"

    def split_held_out(
        self, size: int, seed: int = 0
    ) -> tuple[LazyNumericDataset, LazyNumericDataset | None]:
        """Hold out about ``size`` texts, copies of one text together, in one pass of hashes.

        A text is held out when its 64-bit hash (keyed by ``seed``) is below
        ``size / len(self)`` of the hash range: copies of a text share the hash, so they fall
        on the same side, and each distinct text is held out with that probability. The count
        held out is binomial around ``size`` (its standard deviation is about ``sqrt(size)``);
        a held-out text is kept once (its first copy). Of a few distinct texts with many
        copies, none may fall in the hold-out (then none is held out), and were all to fall
        in, the one of the largest hash stays to train on. Memory holds the held-out rows
        only, never a number per row.

        Args:
            size: the number of texts to hold out (about).
            seed: keys the hash.

        Returns:
            ``(the rows to train on, the held-out rows or None when none fell out)``.

        Raises:
            CopiesOfOneText: every row is a copy of one text (none can be held out).
            ValueError: ``size`` negative, or a dataset that is itself a split.

        Example:
            >>> import datasets
            >>> from cauchylin_hf.testing import tiny_tokenizer
            >>> hf = datasets.Dataset.from_dict({"text": [f"x {i} y {2 * i}." for i in range(400)]})
            >>> train, held = LazyNumericDataset(hf, NumericTokenizer(tiny_tokenizer(300))).split_held_out(80)
            >>> len(train) + len(held), 40 < len(held) < 120
            (400, True)
        """
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"size must be an int >= 0, got {size!r}")
        if self._indices is not None or self._excluded is not None:
            raise ValueError("split_held_out splits a whole column, not a split of one")
        n = len(self)
        if size == 0:
            return self, None
        threshold = int(min(size / n, 1.0) * float(2**64 - 1))
        held_rows: list[int] = []
        held_hashes: list[int] = []
        first: dict[int, int] = {}  # hash -> the first row with it, among the held out
        seen: set[int] = set()  # up to two distinct hashes: is every text one text?
        at = 0
        for batch in self.column.batches():
            for j, text in enumerate(batch):
                h = _text_hash(text, seed)
                if len(seen) < 2:
                    seen.add(h)
                if h < threshold:
                    held_rows.append(at + j)
                    held_hashes.append(h)
                    first.setdefault(h, at + j)
            at += len(batch)
        if len(seen) == 1:
            raise CopiesOfOneText(n)
        if len(held_rows) >= n:  # every text fell in: the one of the largest hash trains
            last = max(first)
            del first[last]
            held_rows = [r for r, h in zip(held_rows, held_hashes, strict=True) if h != last]
        train = self._view(excluded=np.asarray(held_rows, dtype=np.int64))
        if not held_rows:
            return train, None
        return train, self._view(indices=np.sort(np.fromiter(first.values(), dtype=np.int64)))

    def split_last(self, size: int) -> tuple[LazyNumericDataset, LazyNumericDataset | None]:
        """Hold out the last ``size`` texts (for texts in time order: the latest).

        Args:
            size: the number of texts to hold out.

        Returns:
            ``(the rows to train on, the last rows or None when size is 0)``.

        Raises:
            ValueError: ``size`` negative or every row, or a dataset that is itself a split.

        Example:
            >>> import datasets
            >>> from cauchylin_hf.testing import tiny_tokenizer
            >>> hf = datasets.Dataset.from_dict({"text": [f"x {i}." for i in range(10)]})
            >>> train, held = LazyNumericDataset(hf, NumericTokenizer(tiny_tokenizer(300))).split_last(3)
            >>> len(train), len(held)
            (7, 3)
        """
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"size must be an int >= 0, got {size!r}")
        if self._indices is not None or self._excluded is not None:
            raise ValueError("split_last splits a whole column, not a split of one")
        n = len(self)
        if size >= n:
            raise ValueError(f"calibration holds out all {n} texts: nothing left to train on")
        if size == 0:
            return self, None
        held = np.arange(n - size, n, dtype=np.int64)
        return self._view(excluded=held), self._view(indices=held)

    def _view(
        self, *, indices: np.ndarray | None = None, excluded: np.ndarray | None = None
    ) -> LazyNumericDataset:
        out = LazyNumericDataset.__new__(LazyNumericDataset)
        out.__dict__.update(self.__dict__)
        out._indices, out._excluded = indices, excluded
        return out


class IterableNumericDataset(IterableDataset):
    """An ``IterableDataset`` of texts encoded in chunks as they stream in.

    Each ``DataLoader`` worker takes every ``k``-th text of ``k`` workers (a
    ``datasets.IterableDataset`` gives each worker whole shards itself), so no text is encoded
    twice. Under ``torchrun`` the ``Trainer`` (through accelerate) reads an iterable dataset in
    the main process and sends every process its batches, so by default the stream is not split
    by process; ``split_by_process=True`` makes each ``torch.distributed`` process read only its
    share (every ``n``-th text, or ``datasets.distributed.split_dataset_by_node``), for a
    training loop of your own that does not shard. The examples equal
    :meth:`NumericDataset.from_texts <cauchylin_hf.data.NumericDataset.from_texts>`'s, in the
    stream's order.

    Args:
        source: a ``datasets.IterableDataset`` (or ``datasets.Dataset``) with a string column
            ``text_field``, or a callable returning a fresh iterator of texts each time (a
            generator function).
        tokenizer: the numeric tokenizer.
        text_field: the column holding the texts (``datasets`` sources).
        max_length: cut each example to at most this many tokens.
        chunk_size: texts encoded per tokenizer call.
        name: what the texts are called in error messages.
        split_by_process: each ``torch.distributed`` process reads only its share.

    Raises:
        ValueError: an unsupported ``source`` or a tokenizer that is not a ``NumericTokenizer``;
            iterating raises ``from_texts``'s errors.

    Example:
        >>> from cauchylin_hf.testing import tiny_tokenizer
        >>> ntok = NumericTokenizer(tiny_tokenizer(300))
        >>> ds = IterableNumericDataset(lambda: iter(["3 eggs.", "12 pens."]), ntok)
        >>> [ex["numeric_values"][ex["input_ids"] == ntok.num_token_id].tolist() for ex in ds]
        [[3.0], [12.0]]
    """

    def __init__(
        self,
        source: Any,
        tokenizer: NumericTokenizer,
        *,
        text_field: str = "text",
        max_length: int | None = None,
        chunk_size: int = 256,
        name: str = "texts",
        split_by_process: bool = False,
    ) -> None:
        datasets = _datasets()
        if not isinstance(tokenizer, NumericTokenizer):
            raise ValueError(
                f"tokenizer must be a cauchylin_hf.tokenizer.NumericTokenizer, got "
                f"{type(tokenizer).__name__}; wrap it: NumericTokenizer(tokenizer)"
            )
        hf = (datasets.Dataset, datasets.IterableDataset)
        if not isinstance(source, hf) and not callable(source):
            raise ValueError(
                "source must be a datasets.IterableDataset, a datasets.Dataset or a callable "
                f"returning an iterator of texts, got {type(source).__name__}"
            )
        if isinstance(source, hf):
            columns = source.column_names
            if columns is not None and text_field not in columns:
                raise ValueError(
                    f"{name} has no column {text_field!r} (columns: {columns}); pass "
                    "text_field=... to choose another"
                )
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
        self.source = source
        self.tokenizer = tokenizer
        self.text_field = text_field
        self.max_length = max_length
        self.chunk_size = chunk_size
        self.name = name
        self.split_by_process = split_by_process

    def _shard(self) -> tuple[int, int, int, int]:
        """``(rank, processes, worker, workers)`` of this reader."""
        rank, world = 0, 1
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        if self.split_by_process and distributed:
            rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        return rank, world, worker, workers

    def _texts(self) -> Iterator[tuple[int, str]]:
        """``(row, text)`` of this reader's share of the stream."""
        datasets = _datasets()
        rank, world, worker, workers = self._shard()
        index, count = rank * workers + worker, world * workers
        if isinstance(self.source, datasets.Dataset):
            rows = range(index, len(self.source), count)
            column = self.source.select_columns([self.text_field])
            for start in range(0, len(rows), _ARROW_BATCH):
                part = list(rows[start : start + _ARROW_BATCH])
                yield from zip(part, column[part][self.text_field], strict=True)
            return
        if isinstance(self.source, datasets.IterableDataset):
            from datasets.distributed import split_dataset_by_node

            # by process here; a datasets.IterableDataset splits its shards among the
            # DataLoader's workers itself
            stream = self.source
            if world > 1:
                stream = split_dataset_by_node(stream, rank=rank, world_size=world)
            for row, record in enumerate(stream):
                yield row, record[self.text_field]
            return
        for row, text in enumerate(self.source()):
            if row % count == index:
                yield row, text

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        """The encoded examples of this reader's share, in stream order."""
        chunk: list[tuple[int, str]] = []
        for item in self._texts():
            chunk.append(item)
            if len(chunk) == self.chunk_size:
                yield from self._encode(chunk)
                chunk = []
        if chunk:
            yield from self._encode(chunk)

    def _encode(self, chunk: list[tuple[int, str]]) -> list[dict[str, torch.Tensor]]:
        texts = [t for _, t in chunk]
        try:
            return _encode(texts, self.tokenizer, self.max_length, self.name)
        except ValueError:
            for row, text in chunk:
                _encode([text], self.tokenizer, self.max_length, f"{self.name}, row {row + 1}")
            raise


class GrowingColumns:
    """One-dimensional NumPy columns of one length, appended a batch at a time.

    Each column's capacity doubles when it is full, so appending ``n`` values costs ``O(n)`` in
    all and the memory is at most twice the values held: what a pass over millions of rows keeps
    of each row (a float, a code) instead of a Python object per row.

    Args:
        **dtypes: each column's name and NumPy dtype.

    Example:
        >>> import numpy as np
        >>> cols = GrowingColumns(x=np.float64, k=np.int32)
        >>> for i in range(3):
        ...     cols.append(x=np.array([0.5, 1.5]) + i, k=np.array([i, i]))
        >>> cols.size, cols["x"].tolist(), cols["k"].dtype.name
        (6, [0.5, 1.5, 1.5, 2.5, 2.5, 3.5], 'int32')
    """

    def __init__(self, **dtypes: Any) -> None:
        self._data = {name: np.empty(1024, dtype=dt) for name, dt in dtypes.items()}
        self.size = 0

    def append(self, **values: np.ndarray) -> None:
        """Append one batch: an array of one length for every column.

        Args:
            **values: each column's new values.
        """
        n = len(next(iter(values.values())))
        need = self.size + n
        for name, v in values.items():
            buf = self._data[name]
            if need > buf.size:
                grown = np.empty(max(need, 2 * buf.size), dtype=buf.dtype)
                grown[: self.size] = buf[: self.size]
                self._data[name] = buf = grown
            buf[self.size : need] = v
        self.size = need

    def __getitem__(self, name: str) -> np.ndarray:
        """The values of a column so far (a view)."""
        return self._data[name][: self.size]


class UniformSample:
    """A uniform random sample without replacement of at most ``size`` rows of a stream.

    Each row gets a random key; the sample is the rows of the ``size`` smallest keys (a
    "bottom-k" sample: every subset of ``size`` rows is equally likely). Rows whose key is above
    the largest kept key are dropped on arrival, so the memory stays at about twice ``size``
    rows. While at most ``size`` rows have arrived the sample holds them all.

    Args:
        size: the sample's size (>= 1).
        width: floats per row.
        seed: seed of the keys.

    Raises:
        ValueError: ``size`` or ``width`` not a positive int.

    Example:
        >>> import numpy as np
        >>> sample = UniformSample(100, 1)
        >>> for start in range(0, 10_000, 1000):
        ...     sample.add(np.arange(start, start + 1000, dtype=float)[:, None])
        >>> rows = sample.values()
        >>> rows.shape, len(set(rows[:, 0].tolist())), bool(3000 < rows.mean() < 7000)
        ((100, 1), 100, True)
    """

    def __init__(self, size: int, width: int, seed: int = 0) -> None:
        for name, value in (("size", size), ("width", width)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.size = size
        self._rng = np.random.default_rng(seed)
        self._keys = np.empty(0)
        self._rows = np.empty((0, width))
        self._limit = np.inf

    def add(self, rows: np.ndarray) -> None:
        """Offer a batch of rows (``[n, width]`` floats).

        Args:
            rows: the rows.
        """
        keys = self._rng.random(len(rows))
        take = keys < self._limit
        self._keys = np.concatenate([self._keys, keys[take]])
        self._rows = np.concatenate([self._rows, rows[take]])
        if self._keys.size >= 2 * self.size:
            self._prune()

    def _prune(self) -> None:
        if self._keys.size > self.size:
            keep = np.argpartition(self._keys, self.size - 1)[: self.size]
            self._keys, self._rows = self._keys[keep], self._rows[keep]
            self._limit = float(self._keys.max())

    def values(self) -> np.ndarray:
        """The sampled rows, ``[min(size, rows offered), width]``."""
        self._prune()
        return self._rows


def sample_rows(n: int, size: int, seed: int = 0) -> list[int] | None:
    """A sorted random sample of ``size`` of ``n`` row numbers, or None when ``n <= size``.

    What the steps that read the model's features on the training rows (the readouts) use on
    a large dataset: their fit needs thousands of rows, not millions.

    Args:
        n: the number of rows.
        size: the sample's size (>= 1).
        seed: the draw's seed.

    Returns:
        The sampled row numbers, sorted, or None (take every row).

    Raises:
        ValueError: ``size`` not a positive int, or ``n`` negative.

    Example:
        >>> sample_rows(10, 20) is None, len(sample_rows(1000, 50))
        (True, 50)
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be a positive int, got {size!r}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n!r}")
    if n <= size:
        return None
    rng = np.random.default_rng(seed)
    return sorted(int(i) for i in rng.choice(n, size=size, replace=False))


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


def _open_text(p: Path) -> Any:
    with p.open("rb") as f:
        head = f.read(16)
    check_binary(head, p)
    encoding = next((name for bom, name in _BOMS if head.startswith(bom)), "utf-8-sig")
    return p.open(encoding=encoding, newline="")


def table_texts(
    path: str | os.PathLike[str],
    render: Callable[[dict[str, str], int], str],
    *,
    delimiter: str = ",",
    on_header: Callable[[list[str]], None] | None = None,
) -> Any:
    """The rows of a CSV table as texts, in a memory-mapped ``datasets.Dataset``, in one pass.

    The file is read row by row (never whole), each row written with ``render`` and appended
    to an Arrow IPC file in a temporary folder (removed when the process exits); memory holds
    one batch of rows at a time. Cells are stripped of surrounding spaces and blank lines skipped,
    as :func:`cauchylin_hf.app.tables.read_table` does.

    Args:
        path: the CSV (UTF-8, or UTF-16/UTF-32 with a byte-order mark).
        render: a row (``{column: cell}``) and its line number to its text (raise to refuse
            the table, e.g. for a target cell that is not a number).
        delimiter: the cell separator.
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
        header: list[str] | None = None
        with _open_text(p) as f:
            reader = csv.reader(f, delimiter=delimiter)
            first = 1  # the line a record starts on (a quoted cell may span lines)
            # the lambda reads "first" as it is when a record fails (late binding on purpose)
            for record in _records(reader, p, lambda: first):  # noqa: B023
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
                        f"{p}, line {start}: {len(cells)} cells, but the header has "
                        f"{len(header)} columns"
                    )
                yield start, render(dict(zip(header, cells, strict=True)), start)
        if header is None:
            raise ValueError(f"{p} is empty: a header row and at least one data row are needed")

    return _arrow_texts(rows(), f"{p} has a header but no data row")


def file_texts(path: str | os.PathLike[str], *, text_field: str = "text") -> TextColumn:
    """The texts of a JSONL or plain-text dataset file, in Arrow on disk, read in one pass.

    The file is read a line at a time (never whole) and each text (as
    :func:`~cauchylin_hf.data.read_texts` reads it: a JSON record's ``text_field`` for
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
        ValueError: as :func:`~cauchylin_hf.data.read_texts` (the message names the file and
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
        with _open_text(p) as f:
            head = f.read(4096).lstrip()
        if head.startswith("["):
            return _arrow_texts(enumerate(read_texts(p, text_field=text_field), start=1), empty)
    jsonl = suffix in (".jsonl", ".ndjson", ".json")

    def lines() -> Iterator[tuple[int, str]]:
        with _open_text(p) as f:
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
            if len(batch) == _ARROW_BATCH:
                writer.write_batch(pa.record_batch([batch, lines], schema=schema))
                batch, lines = [], []
        if batch:
            writer.write_batch(pa.record_batch([batch, lines], schema=schema))
        writer.close()
    if count == 0:
        raise ValueError(empty)
    return TextColumn(out)


def _records(reader: Any, p: Path, line: Callable[[], int]) -> Iterator[list[str]]:
    """The CSV reader's records; bytes that are not text and overlong cells named."""
    while True:
        try:
            record = next(reader)
        except StopIteration:
            return
        except UnicodeDecodeError:
            read_text_file(p)  # raises, naming the line, the encoding and the conversion
            raise
        except csv.Error as exc:
            raise ValueError(field_limit_message(p, line(), exc)) from None
        yield record


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

    datasets = _datasets()
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


def as_numeric_dataset(
    data: Any,
    tokenizer: NumericTokenizer,
    *,
    name: str = "texts",
    max_length: int | None = None,
    max_tokens: int | None = None,
    text_field: str = "text",
    where: Callable[[int], str] | None = None,
) -> Dataset:
    """A dataset for training from any data argument.

    * a :class:`TextColumn`, or a ``datasets.Dataset`` with a text column: a :class:`LazyNumericDataset` (encoded when
      read); one already encoded (an ``input_ids`` column) is returned in torch format;
    * a ``datasets.IterableDataset``: an :class:`IterableNumericDataset`;
    * a torch ``Dataset`` (e.g. a :class:`~cauchylin_hf.data.NumericDataset`): itself, checked
      non-empty when it has a length;
    * a file (a ``pathlib.Path``): read with :func:`~cauchylin_hf.data.read_texts` and encoded;
    * texts: encoded with :meth:`NumericDataset.from_texts
      <cauchylin_hf.data.NumericDataset.from_texts>`.

    Args:
        data: the data.
        tokenizer: the numeric tokenizer.
        name: what the data is called in error messages.
        max_length: cut each example to at most this many tokens.
        max_tokens: a :class:`LazyNumericDataset` refuses (when read) an example longer than
            this (the model's context); None accepts any length.
        text_field: the text column of a ``datasets`` dataset (or JSON field of a file).
        where: where a row is, for a :class:`LazyNumericDataset`'s error messages.

    Returns:
        A torch ``Dataset`` (map-style or iterable) of examples.

    Raises:
        ValueError: empty data, a ``datasets`` dataset without the text column, or what
            encoding raises.
        FileNotFoundError: a file that does not exist.

    Example:
        >>> import datasets
        >>> from cauchylin_hf.testing import tiny_tokenizer
        >>> ntok = NumericTokenizer(tiny_tokenizer(300))
        >>> hf = datasets.Dataset.from_dict({"text": ["3 eggs.", "12 pens."]})
        >>> type(as_numeric_dataset(hf, ntok)).__name__, type(as_numeric_dataset(["3 eggs."], ntok)).__name__
        ('LazyNumericDataset', 'NumericDataset')
    """
    try:
        import datasets
    except ImportError:
        datasets = None
    if isinstance(data, TextColumn):
        return LazyNumericDataset(
            data,
            tokenizer,
            max_length=max_length,
            max_tokens=max_tokens,
            name=name,
            where=where,
        )
    if datasets is not None and isinstance(data, datasets.Dataset):
        if "input_ids" in data.column_names and text_field not in data.column_names:
            if len(data) == 0:
                raise ValueError(f"{name} is empty: the dataset needs at least one example")
            return cast(Dataset, data.with_format("torch"))
        return LazyNumericDataset(
            data,
            tokenizer,
            text_field=text_field,
            max_length=max_length,
            max_tokens=max_tokens,
            name=name,
            where=where,
        )
    if datasets is not None and isinstance(data, datasets.IterableDataset):
        return IterableNumericDataset(
            data, tokenizer, text_field=text_field, max_length=max_length, name=name
        )
    if isinstance(data, Dataset):
        try:
            n = len(data)  # type: ignore[arg-type]
        except TypeError:
            return data  # an IterableDataset: its length is unknown
        if n == 0:
            raise ValueError(f"{name} is empty: the dataset needs at least one example")
        return data
    if isinstance(data, os.PathLike):
        texts = read_texts(data, text_field=text_field)
        return NumericDataset.from_texts(texts, tokenizer, max_length=max_length, name=str(data))
    if not isinstance(data, Iterable):
        raise ValueError(f"{name} must be texts, a file, or a dataset, got {type(data).__name__}")
    return NumericDataset.from_texts(data, tokenizer, max_length=max_length, name=name)
