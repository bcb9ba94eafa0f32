"""Samples of a pass over rows too many to keep: NumPy only.

:class:`UniformSample` keeps a uniform sample of a stream's rows (every row while they fit);
:func:`sample_rows` draws the row numbers the readouts are solved on (and the texts a statistic
reads, :func:`cauchylin_hf.data.arrow.text_sample`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["UniformSample", "sample_rows"]


class UniformSample:
    """A uniform random sample without replacement of at most ``size`` rows of a stream.

    Each row gets a random key; the sample is the rows of the ``size`` smallest keys (a
    "bottom-k" sample: every subset of ``size`` rows is equally likely). Rows whose key is above
    the largest kept key are dropped on arrival, so the memory stays at most twice ``size``
    rows, however many arrive. While at most ``size`` rows have arrived the sample holds them
    all (:attr:`sampled` is False): a statistic of the sample is then the exact one.

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
        self.offered = 0
        """The rows offered so far: the sample holds them all while ``offered <= size``."""
        self._rng = np.random.default_rng(seed)
        # kept keys and rows fill buffers that double up to ``2 * size`` rows, then are pruned
        # back to ``size`` in place: a batch costs its own rows, not a copy of the sample
        self._keys = np.empty(min(size, 1024))
        self._rows = np.empty((min(size, 1024), width))
        self._n = 0
        self._limit = np.inf

    @property
    def sampled(self) -> bool:
        """Whether rows were left out (more than ``size`` offered): the sample is an estimate.

        Example:
            >>> sample = UniformSample(3, 1)
            >>> sample.add(np.zeros((3, 1)))
            >>> sample.sampled, (sample.add(np.zeros((1, 1))), sample.sampled)[1]
            (False, True)
        """
        return self.offered > self.size

    def add(self, rows: np.ndarray) -> None:
        """Offer a batch of rows (``[n, width]`` floats).

        Args:
            rows: the rows.

        Example:
            >>> sample = UniformSample(2, 1)
            >>> sample.add(np.arange(5.0)[:, None])
            >>> sample.values().shape
            (2, 1)
        """
        self.offered += len(rows)
        keys = self._rng.random(len(rows))
        take = keys < self._limit
        keys, rows = keys[take], rows[take]
        k = int(keys.size)
        if k == 0:
            return
        if self._n + k > self._keys.size:
            self._grow(self._n + k)
        self._keys[self._n : self._n + k] = keys
        self._rows[self._n : self._n + k] = rows
        self._n += k
        if self._n >= 2 * self.size:
            self._prune()

    def _grow(self, need: int) -> None:
        cap = max(need, min(2 * self._keys.size, 2 * self.size))
        keys, rows = np.empty(cap), np.empty((cap, self._rows.shape[1]))
        keys[: self._n], rows[: self._n] = self._keys[: self._n], self._rows[: self._n]
        self._keys, self._rows = keys, rows

    def _prune(self) -> None:
        if self._n > self.size:
            keep = np.argpartition(self._keys[: self._n], self.size - 1)[: self.size]
            keys, rows = self._keys[keep], self._rows[keep]
            self._keys[: self.size], self._rows[: self.size] = keys, rows
            self._n = self.size
            self._limit = float(keys.max())

    def values(self) -> np.ndarray:
        """The sampled rows: while ``offered <= size``, every row in the order offered.

        Returns:
            ``[min(size, rows offered), width]`` floats (a view, valid until the next
            :meth:`add`).

        Example:
            >>> sample = UniformSample(5, 2)
            >>> sample.add(np.zeros((3, 2)))
            >>> sample.values().shape
            (3, 2)
        """
        self._prune()
        return self._rows[: self._n]


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
