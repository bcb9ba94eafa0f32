"""Datasets beyond memory: texts kept in Arrow on disk, encoded as they are read.

:class:`~cauchylin_hf.data.dataset.NumericDataset` encodes every text before training starts and
keeps every example in memory (about 4 KB a row of a small table): a million rows take minutes
and gigabytes before the first step. The classes here read texts kept in Arrow on disk (a
:class:`~cauchylin_hf.data.arrow.TextColumn`: a Hugging Face ``datasets`` column, memory-mapped,
or an Arrow file read a batch at a time) and encode a batch of them when the ``DataLoader`` asks
for it, with the same :meth:`NumericDataset.from_texts
<cauchylin_hf.data.dataset.NumericDataset.from_texts>` call (so the ids and values are the same):

* :class:`LazyNumericDataset`: a map-style dataset over a ``TextColumn`` or a
  ``datasets.Dataset`` with a text column. The ``DataLoader``'s sampler picks the rows, so under
  ``torchrun`` each process encodes only the rows of its own shard, and with
  ``dataloader_num_workers=k`` the encoding runs in ``k`` worker processes ahead of the step.
* :class:`IterableNumericDataset`: an ``IterableDataset`` over a ``datasets.IterableDataset`` (a
  streaming one included) or any re-iterable source of texts, encoded in chunks; each
  ``DataLoader`` worker reads only its share.
* :func:`as_numeric_dataset` turns any data argument (texts, a file, a ``datasets`` dataset, an
  encoded dataset) into a dataset for :func:`~cauchylin_hf.training.train`.

Statistics that would need every encoded example use a stated sample or a hash instead:
:meth:`LazyNumericDataset.split_held_out` holds out the texts whose hash falls below a threshold
(copies of a text go to the same side; memory holds the held-out rows only).

Needs the ``datasets`` package (``pip install 'cauchylin[hf]'``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, cast

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from ..tokenizer import NumericTokenizer
from .arrow import ARROW_BATCH, STATS_ROWS, TextColumn, require_datasets
from .dataset import NumericDataset
from .files import read_path_texts

__all__ = [
    "CopiesOfOneText",
    "IterableNumericDataset",
    "LazyNumericDataset",
    "as_numeric_dataset",
]


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
    held-out copy would be a text training saw). Train on it and calibrate nothing.

    Args:
        count: the number of training texts.

    Example:
        >>> CopiesOfOneText(3).count
        3
    """

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
            datasets = require_datasets()
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

    def split_sample(
        self, size: int, seed: int = 0
    ) -> tuple[LazyNumericDataset, LazyNumericDataset | None]:
        """Hold out a seeded random sample of ``size`` of these rows (of a whole column, or of
        the rows to train on of a split).

        Unlike :meth:`split_held_out`, copies of one text may fall on both sides: the rows held
        out here choose a training step (:mod:`cauchylin_hf.step_choice`), they are not
        calibrated on. Memory holds the sampled rows and the split's own, never a number per
        row.

        Args:
            size: the number of rows to hold out.
            seed: seeds the draw.

        Returns:
            ``(the rows to train on, the sampled rows or None when size is 0)``.

        Raises:
            ValueError: ``size`` negative or every row, or a dataset that holds given rows
                (``indices``: a held-out side).

        Example:
            >>> import datasets
            >>> from cauchylin_hf.testing import tiny_tokenizer
            >>> hf = datasets.Dataset.from_dict({"text": [f"x {i}." for i in range(10)]})
            >>> whole = LazyNumericDataset(hf, NumericTokenizer(tiny_tokenizer(300)))
            >>> train, held = whole.split_last(3)[0].split_sample(2)
            >>> len(train), len(held), sorted(set(train.rows(range(5))) | set(held.rows(range(2))))
            (5, 2, [0, 1, 2, 3, 4, 5, 6])
        """
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"size must be an int >= 0, got {size!r}")
        if self._indices is not None:
            raise ValueError("split_sample splits a column or the rows to train on of a split")
        n = len(self)
        if size >= n:
            raise ValueError(f"holding out {size} of {n} texts leaves none to train on")
        if size == 0:
            return self, None
        positions = np.random.default_rng(seed).choice(n, size=size, replace=False)
        held = np.sort(np.asarray(self._rows(positions.tolist()), dtype=np.int64))
        excluded = held if self._excluded is None else np.union1d(self._excluded, held)
        return self._view(excluded=excluded), self._view(indices=held)

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
    :meth:`NumericDataset.from_texts <cauchylin_hf.data.dataset.NumericDataset.from_texts>`'s, in the
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
        datasets = require_datasets()
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
        datasets = require_datasets()
        rank, world, worker, workers = self._shard()
        index, count = rank * workers + worker, world * workers
        if isinstance(self.source, datasets.Dataset):
            rows = range(index, len(self.source), count)
            column = self.source.select_columns([self.text_field])
            for start in range(0, len(rows), ARROW_BATCH):
                part = list(rows[start : start + ARROW_BATCH])
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
    * a torch ``Dataset`` (e.g. a :class:`~cauchylin_hf.data.dataset.NumericDataset`): itself, checked
      non-empty when it has a length;
    * a path (a ``pathlib.Path``): read as the command line reads ``--data``
      (:func:`~cauchylin_hf.data.files.read_path_texts`: a table's rows written by the default
      template, a file's texts, a saved dataset's column), encoded in memory, or as read
      (a :class:`LazyNumericDataset`) above :data:`~cauchylin_hf.data.arrow.STATS_ROWS` texts
      kept in Arrow;
    * texts: encoded with :meth:`NumericDataset.from_texts
      <cauchylin_hf.data.dataset.NumericDataset.from_texts>`.

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
        read = read_path_texts(data, text_field=text_field)
        if isinstance(read.texts, TextColumn) and len(read.texts) > STATS_ROWS:
            return LazyNumericDataset(
                read.texts,
                tokenizer,
                max_length=max_length,
                max_tokens=max_tokens,
                name=str(data),
                where=where or (read.table.where if read.table is not None else None),
            )
        texts = list(read.texts)
        return NumericDataset.from_texts(texts, tokenizer, max_length=max_length, name=str(data))
    if not isinstance(data, Iterable):
        raise ValueError(f"{name} must be texts, a file, or a dataset, got {type(data).__name__}")
    return NumericDataset.from_texts(data, tokenizer, max_length=max_length, name=name)
