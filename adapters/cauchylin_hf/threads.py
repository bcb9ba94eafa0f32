"""The number of torch CPU threads that fits the cores a shared machine has free.

On a CPU torch starts one thread per core. When other jobs already keep the cores busy, those
threads wait for each other and a training step can take many times longer than with one
thread (measured: a demo of 105 s with one thread took 1958 s with two on two cores at load 7 to
9). :func:`fit_threads` chooses the count the command line and
:func:`~cauchylin_hf.training.train` use when none is given: the cores this process may use
minus the one-minute load average (at least 1), never more than torch would start.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch

from cauchylin._validation import positive_int

__all__ = ["ThreadChoice", "fit_threads", "free_cores"]

_said: set[tuple[int, int]] = set()  # (torch's count, the count chosen) already reported
_kept: list[int] = []  # a count given for the whole process (the command line's --threads)


def free_cores() -> tuple[int, float]:
    """``(cores this process may use, one-minute load average)``: a platform without CPU
    affinity reads as all cores, one without a load average as load 0.

    Returns:
        The number of usable cores and the load average.

    Example:
        >>> cores, load = free_cores()
        >>> cores >= 1 and load >= 0
        True
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = 0.0
    return cores, max(0.0, load)


@dataclass(frozen=True)
class ThreadChoice:
    """What :func:`fit_threads` did: the thread count before and after, and why.

    Attributes:
        before: torch's thread count before the call.
        threads: the count set.
        cores: the cores this process may use.
        load: the one-minute load average.
        lowered: True when the count was lowered to the free cores (no count was asked for).
        first: True the first time this process lowers from ``before`` to ``threads``: the
            moment to say so.
    """

    before: int
    threads: int
    cores: int
    load: float
    lowered: bool
    first: bool

    def sentence(self, how_to_choose: str) -> str:
        """One sentence saying that the count was lowered, ending with how to choose another.

        Args:
            how_to_choose: e.g. ``"--threads N chooses another"``.

        Returns:
            The sentence.

        Example:
            >>> ThreadChoice(2, 1, 2, 1.2, True, True).sentence("--threads N chooses")
            'using 1 torch thread, not 2: only about 1 of 2 cores are free (load 1.2); --threads N chooses'
        """
        plural = "" if self.threads == 1 else "s"
        return (
            f"using {self.threads} torch thread{plural}, not {self.before}: only about "
            f"{self.threads} of {self.cores} cores are free (load {self.load:.1f}); "
            f"{how_to_choose}"
        )


def fit_threads(threads: int | None = None, *, for_process: bool = False) -> ThreadChoice:
    """Set torch's CPU thread count: ``threads`` if given, else no more than the free cores.

    Without ``threads``, the free cores are the usable cores minus the one-minute load average,
    rounded, at least 1 (:func:`free_cores`); torch's count is lowered to that when it is
    higher, and never raised (a count set before, e.g. by ``OMP_NUM_THREADS=1``, stays). A
    count given ``for_process`` (the command line's ``--threads``) is never lowered by a later
    call without one (the trainings a command runs).

    Args:
        threads: the thread count to set (a positive int), or None to fit the free cores.
        for_process: this call decides for the whole process: a ``threads`` given is kept by
            later calls without one, and a None forgets a count kept before.

    Returns:
        A :class:`ThreadChoice`; its ``first`` is True once per process and per change.

    Raises:
        ValueError: if ``threads`` is not a positive int.

    Example:
        >>> import torch
        >>> before = torch.get_num_threads()
        >>> fit_threads(1).threads, torch.get_num_threads()
        (1, 1)
        >>> fit_threads().threads <= 1  # never raised
        True
        >>> torch.set_num_threads(before)
    """
    before = torch.get_num_threads()
    cores, load = free_cores()
    if threads is not None:
        positive_int("threads", threads)
    if for_process:
        _kept[:] = [] if threads is None else [threads]
    if threads is not None:
        torch.set_num_threads(threads)
        return ThreadChoice(before, threads, cores, load, False, False)
    free = max(1, math.floor(cores - load + 0.5))
    if _kept or before <= free:
        return ThreadChoice(before, before, cores, load, False, False)
    torch.set_num_threads(free)
    first = (before, free) not in _said
    _said.add((before, free))
    return ThreadChoice(before, free, cores, load, True, first)
