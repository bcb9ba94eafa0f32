r"""Per-context readouts of the regression value, and their conformal interval widths.

A language model reads every number through one regression head ``Y = W_reg U' + b_reg``. The
numbers of one *context* (the ``k`` tokens that end at the position predicting the number, coded
by :func:`context_codes`: ``"..., price "`` in a table) often need a readout of their own, and
their intervals a calibration of their own. A :class:`ContextReadouts` table holds, per context,
optionally a **solved readout** (:func:`cauchylin.readout.fit_cauchy_readout`), which replaces
the shared head there,

.. math::

    Y = w_k^\top \mathrm{loc}_{U'} + b_k + N, \qquad N \sim \mathrm{Cauchy}(0, \sigma_k),

so ``loc_Y = w_k . loc_U' + b_k`` and ``scale_Y = sigma_k`` (the readout reads the location of
``U'`` and carries its own noise; the scale of ``U'`` was trained for the class scores, and
adding ``|w_k| . scale_U'`` made held-out likelihoods worse on the benchmark tables), and
optionally **conformal widths** ``q_k(c)`` for the calibrated coverages ``c``
(:mod:`cauchylin.conformal`): the central interval of coverage ``c`` is
``loc_Y ± q_k(c) scale_Y`` instead of the Cauchy ``loc_Y ± tan(pi c / 2) scale_Y``.

A row with code :data:`OTHER` holds the widths of the numbers the shared head reads whose context
has no calibration of its own (pooled: the errors of one head, in units of its own scales).
Positions of any other context keep the shared head and the Cauchy intervals. Everything is
stored in buffers, so a model saves, loads and moves the table with its weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple, TypeVar

import torch
from torch import nn

from cauchylin._validation import positive_int, require_tensor
from cauchylin.levels import CALIBRATION_LEVELS
from cauchylin.readout import RTOL_ULPS, CauchyReadout
from cauchylin.value_space import to_value_space
from cauchylin.vector import CauchyVector

__all__ = [
    "INTEGER_BUFFERS",
    "MAX_CONTEXT_TOKENS",
    "MAX_VOCABULARY",
    "NOT_CALIBRATED",
    "NO_CONTEXT",
    "OTHER",
    "ContextReadouts",
    "ReadoutContext",
    "code_digits",
    "context_codes",
    "earlier_numbers",
]

MAX_CONTEXT_TOKENS = 3
"""The most tokens a context code holds (three 21-bit fields of an int64)."""

OTHER = -1
"""The code of the row that calibrates the numbers of every context without a row of its own."""

NO_CONTEXT = -2
"""The code of a position whose context is not known (the shared head reads its number): no row
has it."""

NOT_CALIBRATED = -1.0
"""The stored width of a level a row has no calibration for (too few rows, or none)."""

INTEGER_BUFFERS: tuple[str, ...] = ("contexts", "counts")
"""The buffers of a :class:`ContextReadouts` that are int64 (token digits and counts: exact
under any cast of the model); the others are floating point."""

_T = TypeVar("_T", bound="ContextReadouts")

_NONE = 0  # the digit of "no token": before the start of a sequence, or padding


_DIGIT_BITS = 21  # a token id + 101 fits in 21 bits for vocabularies of up to 2**21 - 102
_DIGIT_MASK = (1 << _DIGIT_BITS) - 1
MAX_VOCABULARY = (1 << _DIGIT_BITS) - 102
"""The largest vocabulary (``num_classes``) :func:`context_codes` codes exactly."""


def context_codes(
    tokens: torch.Tensor,
    k: int,
    num_classes: int,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """One integer per position naming the ``k`` tokens that end there (``tokens[i-k+1..i]``).

    Each token ``v`` in ``[-101, V)`` (``-100``, an ignored label, included) becomes the digit
    ``v + 101 >= 0``; a position before the start of the sequence, or one whose
    ``attention_mask`` is 0 (padding), is the digit 0, as is the token ``-101``. The code holds
    the ``k`` digits in 21-bit fields, the most recent token in the lowest: equal codes mean
    equal tokens, a left-padded prompt has the codes of the same prompt without padding, and
    :func:`code_digits` gives the digits back. Codes are ``>= 0``.

    Args:
        tokens: ``[..., L]`` integer ids, in ``[-101, num_classes)``.
        k: ``1 <= k <=`` :data:`MAX_CONTEXT_TOKENS`.
        num_classes: ``V``, one more than the largest id (at most :data:`MAX_VOCABULARY`).
        attention_mask: ``[..., L]``, 0 at padding (optional).

    Returns:
        ``[..., L]`` int64 codes.

    Raises:
        ValueError: ``k`` or ``num_classes`` out of range, a non-integer ``tokens``, or a mask
            of another shape.

    Example:
        >>> import torch
        >>> ids = torch.tensor([[7, 8, 9], [0, 8, 9]])
        >>> codes = context_codes(ids, 2, 10, attention_mask=torch.tensor([[1, 1, 1], [0, 1, 1]]))
        >>> bool(codes[0, 2] == codes[1, 2]), bool(codes[0, 1] == codes[1, 1])  # (8, 9); (7, 8)
        (True, False)
        >>> code_digits(codes[0, 2]).tolist()  # none, 8 + 101, 9 + 101
        [0, 109, 110]
    """
    k = positive_int("k", k)
    if k > MAX_CONTEXT_TOKENS:
        raise ValueError(f"k must be at most {MAX_CONTEXT_TOKENS}, got {k}")
    if not 0 < int(num_classes) <= MAX_VOCABULARY:
        raise ValueError(f"num_classes must lie in [1, {MAX_VOCABULARY}], got {num_classes!r}")
    tokens = require_tensor("tokens", tokens, integer=True).long()
    digits = tokens + 101
    if attention_mask is not None:
        if tuple(attention_mask.shape) != tuple(tokens.shape):
            raise ValueError(
                f"attention_mask shape {tuple(attention_mask.shape)} must equal the tokens' "
                f"shape {tuple(tokens.shape)}"
            )
        digits = digits.masked_fill(attention_mask == 0, _NONE)
    code = torch.zeros_like(digits)
    length = tokens.shape[-1]
    for j in range(k - 1, -1, -1):  # oldest token first: the most recent is the lowest field
        shifted = torch.full_like(digits, _NONE)
        if length > j:
            shifted[..., j:] = digits[..., : length - j]
        code = (code << _DIGIT_BITS) | shifted
    return code


def code_digits(codes: torch.Tensor) -> torch.Tensor:
    """The :data:`MAX_CONTEXT_TOKENS` digits of context codes, oldest first (0: no token).

    Args:
        codes: ``[...]`` int64 codes from :func:`context_codes` (``>= 0``).

    Returns:
        ``[..., 3]`` int64 digits (token id + 101).

    Example:
        >>> import torch
        >>> code_digits(context_codes(torch.tensor([4, 5]), 1, 10)).tolist()
        [[0, 0, 105], [0, 0, 106]]
    """
    shifts = [_DIGIT_BITS * (MAX_CONTEXT_TOKENS - 1 - j) for j in range(MAX_CONTEXT_TOKENS)]
    return torch.stack([(codes >> s) & _DIGIT_MASK for s in shifts], -1)


def earlier_numbers(
    values: torch.Tensor,
    is_number: torch.Tensor,
    slots: int,
    value_space: str = "signed_log1p",
) -> torch.Tensor:
    """The ``slots`` most recent numbers at or before every position, in the value space.

    Slot ``j`` of position ``i`` holds ``t = g(y)`` (:func:`cauchylin.value_space.to_value_space`)
    of the ``(j + 1)``-th most recent number among positions ``<= i`` of the same row, and 0
    where the row has fewer numbers so far. In a table written one row per text, the position
    that predicts a column's number sees the row's earlier columns at fixed slots (the previous
    column in slot 0): the extra features of a per-context readout
    (:class:`ContextReadouts` with ``numbers > 0``).

    Args:
        values: ``[..., L]`` the numbers (raw), read where ``is_number``.
        is_number: ``[..., L]`` bool, True at the positions that hold a number (``<NUM>``,
            not padding).
        slots: ``S >= 1``.
        value_space: the value space of the regression (:mod:`cauchylin.value_space`).

    Returns:
        ``[..., L, S]`` values in the dtype of ``values`` (float32 at least).

    Raises:
        ValueError: a bad ``slots`` or shapes that differ.

    Example:
        >>> import torch
        >>> v = torch.tensor([[0.0, 2.0, 0.0, 5.0, 0.0]])
        >>> n = torch.tensor([[False, True, False, True, False]])
        >>> earlier_numbers(v, n, 2, "identity")[0].tolist()
        [[0.0, 0.0], [2.0, 0.0], [2.0, 0.0], [5.0, 2.0], [5.0, 2.0]]
    """
    slots = positive_int("slots", slots)
    values = require_tensor("values", values)
    if tuple(is_number.shape) != tuple(values.shape):
        raise ValueError(
            f"is_number shape {tuple(is_number.shape)} must equal the values' shape "
            f"{tuple(values.shape)}"
        )
    dtype = torch.promote_types(values.dtype, torch.float32)
    if values.dim() == 0 or values.shape[-1] == 0:
        return torch.zeros((*values.shape, slots), dtype=dtype, device=values.device)
    length = values.shape[-1]
    flat_v = values.reshape(-1, length).to(dtype)
    flat_n = is_number.reshape(-1, length).bool()
    count = flat_n.long().cumsum(-1)  # [R, L] numbers so far (1-based index of the last one)
    t = torch.where(flat_n, to_value_space(flat_v, value_space), torch.zeros_like(flat_v))
    # column m (1..M) holds the row's m-th number; column 0 stays 0 ("no number")
    table = torch.zeros(flat_v.shape[0], int(count.max()) + 1, dtype=dtype, device=values.device)
    table.scatter_(1, torch.where(flat_n, count, torch.zeros_like(count)), t)
    which = (count[..., None] - torch.arange(slots, device=values.device)).clamp(min=0)
    out = torch.gather(table[:, None, :].expand(-1, length, -1), 2, which)
    return out.reshape(*values.shape, slots)


def _digits_code(digits: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`code_digits` (a row of -1 digits is :data:`OTHER`)."""
    d = digits.long()
    code = torch.zeros(d.shape[:-1], dtype=torch.long, device=d.device)
    for j in range(MAX_CONTEXT_TOKENS):
        code = (code << _DIGIT_BITS) | d[..., j].clamp(min=0)
    return torch.where((d < 0).all(-1), torch.full_like(code, OTHER), code)


class ReadoutContext(NamedTuple):
    """What the per-context readouts read at some positions besides ``U'``: ``(codes, numbers)``.

    A tuple, so ``codes, numbers = ...`` unpacks it. Built by :meth:`ContextReadouts.context`
    (a model's ``readout_context``) and passed whole to the heads.

    Attributes:
        codes: ``[...]`` int64 the positions' context codes (:func:`context_codes`;
            :data:`NO_CONTEXT` where it is not known).
        numbers: ``[..., S]`` the positions' :func:`earlier_numbers`, or None where the readouts
            read none (``S = 0``).

    Example:
        >>> import torch
        >>> ctx = ReadoutContext(torch.tensor([[4, 5, 6]]), torch.zeros(1, 3, 2))
        >>> picked = ctx.at(torch.tensor([[False, True, True]]))
        >>> picked.codes.tolist(), tuple(picked.numbers.shape)
        ([5, 6], (2, 2))
    """

    codes: torch.Tensor
    numbers: torch.Tensor | None = None

    @classmethod
    def of(
        cls, context: ReadoutContext | torch.Tensor | None, numbers: torch.Tensor | None = None
    ) -> ReadoutContext | None:
        """A context given as a record, or as its codes (and their ``numbers``).

        Args:
            context: a :class:`ReadoutContext`, the codes alone, or None (no context: the
                shared head everywhere; ``numbers`` are then not read).
            numbers: the earlier numbers beside codes given alone.

        Returns:
            The :class:`ReadoutContext`, or None.

        Raises:
            ValueError: ``numbers`` beside a :class:`ReadoutContext` (which carries its own).

        Example:
            >>> import torch
            >>> ReadoutContext.of(torch.tensor([3, 4])).numbers is None
            True
        """
        if isinstance(context, ReadoutContext):
            if numbers is not None:
                raise ValueError(
                    "the numbers travel in the ReadoutContext: do not pass numbers as well"
                )
            return context
        return None if context is None else cls(context, numbers)

    def at(self, index: object) -> ReadoutContext:
        """The context of the positions ``index`` selects (as ``codes[index]``).

        Args:
            index: any index of the codes (a mask, slices, index tensors).

        Returns:
            The selected :class:`ReadoutContext`.
        """
        numbers = None if self.numbers is None else self.numbers[index]  # type: ignore[index]
        return ReadoutContext(self.codes[index], numbers)  # type: ignore[index]


class ContextReadouts(nn.Module):
    """A table of per-context readouts and conformal widths (see the module docstring).

    Built empty (``num_contexts = 0``: every position keeps the shared head) or with room for
    ``num_contexts`` rows, which :meth:`store` fills (a loaded model builds the table with the
    size its checkpoint holds, then loads the buffers). The buffers :data:`INTEGER_BUFFERS` are
    int64, so that no cast of the model (``.to(torch.bfloat16)``, ``.half()``, loading with
    another ``dtype``) rounds them: ``contexts`` ``[K, 3]`` (the digits of each row's code,
    :func:`code_digits`; -1 in every digit for :data:`OTHER`) and ``counts`` ``[K, 2]`` (the
    numbers each row was fitted and calibrated on). The others are floating point and cast like
    any head tensor: ``weight`` ``[K, C + S]``, ``bias``, ``noise`` (0 where the row keeps the
    shared head), ``solved`` (1 or 0) and ``widths`` ``[K, L]`` (:data:`NOT_CALIBRATED` where a
    level has no width). A table saved with floating-point ``contexts`` and ``counts`` (as
    earlier releases did) loads into the integer buffers.

    With ``numbers = S > 0`` a solved readout also reads the row's own numbers: its features at
    a position are :meth:`features`, ``loc_U'`` followed by the ``S`` most recent numbers of the
    text in the value space (:func:`earlier_numbers`), so ``loc_Y = w_k . [loc_U', n] + b_k``:
    a linear regression on the earlier columns inside the readout.

    Args:
        causal_size: ``C``, the size of ``U'``.
        num_contexts: rows of the table.
        levels: the coverages that rows can be calibrated at, each in ``(0, 1)``, increasing.
        numbers: ``S >= 0``, the earlier numbers a solved readout reads beside ``loc_U'``.

    Raises:
        ValueError: a bad size or level.

    Example:
        >>> import torch
        >>> from cauchylin.readout import CauchyReadout
        >>> table = ContextReadouts(2, levels=(0.5, 0.9))
        >>> fit = CauchyReadout(torch.tensor([1.0, 0.0]), torch.tensor(2.0), torch.tensor(0.5),
        ...                     1e-3, float("nan"), 40, 3)
        >>> table.store([5], [fit])
        >>> table.lookup(torch.tensor([5, 6])).tolist()
        [0, -1]
    """

    contexts: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor
    noise: torch.Tensor
    solved: torch.Tensor
    widths: torch.Tensor
    counts: torch.Tensor

    def __init__(
        self,
        causal_size: int,
        num_contexts: int = 0,
        levels: Sequence[float] = CALIBRATION_LEVELS,
        numbers: int = 0,
    ) -> None:
        super().__init__()
        self.causal_size = positive_int("causal_size", causal_size)
        self.numbers = _slots(numbers)
        if isinstance(num_contexts, bool) or not isinstance(num_contexts, int) or num_contexts < 0:
            raise ValueError(f"num_contexts must be an int >= 0, got {num_contexts!r}")
        lv = [float(c) for c in levels]
        if not lv or any(not 0.0 < c < 1.0 for c in lv) or sorted(set(lv)) != lv:
            raise ValueError(f"levels must be increasing coverages in (0, 1), got {levels!r}")
        self.levels: tuple[float, ...] = tuple(lv)
        self._allocate(num_contexts, torch.device("cpu"))

    def _allocate(self, k: int, device: torch.device) -> None:
        c, n_levels = self.causal_size, len(self.levels)
        long = torch.int64
        self.register_buffer(
            "contexts", torch.zeros(k, MAX_CONTEXT_TOKENS, dtype=long, device=device)
        )
        self.register_buffer("weight", torch.zeros(k, c + self.numbers, device=device))
        self.register_buffer("bias", torch.zeros(k, device=device))
        self.register_buffer("noise", torch.zeros(k, device=device))
        self.register_buffer("solved", torch.zeros(k, device=device))
        self.register_buffer("widths", torch.full((k, n_levels), NOT_CALIBRATED, device=device))
        self.register_buffer("counts", torch.zeros(k, 2, dtype=long, device=device))

    def integer_buffers(self) -> None:
        """Make the buffers :data:`INTEGER_BUFFERS` int64 again (rounded) where a loader left
        them floating point (a table saved by an earlier release, loaded by assigning its
        tensors). Every cast of the module calls this first, so none rounds a token digit.

        Example:
            >>> import torch
            >>> table = ContextReadouts(2)
            >>> table.contexts = torch.tensor([[0.0, 0.0, 325.0]])
            >>> table.to(torch.bfloat16).contexts.tolist()
            [[0, 0, 325]]
        """
        for name in INTEGER_BUFFERS:
            value = self._buffers.get(name)
            if value is not None and value.is_floating_point():
                self._buffers[name] = value.round().long()

    def _apply(self: _T, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> _T:
        self.integer_buffers()
        return super()._apply(fn, recurse)

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: object) -> None:
        # Earlier releases stored the integer buffers as floats: round them into int64 (a
        # plain copy would truncate) before the standard load.
        for name in INTEGER_BUFFERS:
            key = prefix + name
            value = state_dict.get(key)
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                state_dict[key] = value.round().long()
        super()._load_from_state_dict(state_dict, prefix, *args)

    @property
    def feature_size(self) -> int:
        """``C + S``: the features a solved readout reads (:meth:`features`)."""
        return self.causal_size + self.numbers

    def feature_rtol(self) -> torch.Tensor:
        """``[C + S]`` the ``rtol`` each readout of the table is solved with
        (:func:`cauchylin.readout.fit_cauchy_readout`): :data:`~cauchylin.readout.RTOL_ULPS`
        float32 epsilons for ``loc_U'`` (a network's features, computed in float32 at most: a
        column constant in exact arithmetic that varies by rounding alone is read as constant)
        and 0 for the earlier numbers (data: constant only when they are).

        Example:
            >>> ContextReadouts(3, numbers=1).feature_rtol().tolist()  # doctest: +ELLIPSIS
            [3.05...e-05, 3.05...e-05, 3.05...e-05, 0.0]
        """
        rtol = torch.zeros(self.feature_size, dtype=torch.float64)
        rtol[: self.causal_size] = RTOL_ULPS * torch.finfo(torch.float32).eps
        return rtol

    def set_numbers(self, numbers: int) -> None:
        """Read ``numbers`` earlier numbers from now on; the table is emptied (solve it again).

        Args:
            numbers: ``S >= 0``.

        Raises:
            ValueError: a negative or non-integer ``numbers``.
        """
        self.numbers = _slots(numbers)
        self._allocate(0, self.weight.device)

    def features(self, loc: torch.Tensor, numbers: torch.Tensor | None) -> torch.Tensor:
        """The features a solved readout reads at each position: ``[loc_U', numbers]``.

        The one definition of a readout's input, used to solve it
        (:func:`cauchylin_hf.readouts.solve_readouts`) and to read it.

        Args:
            loc: ``[..., C]`` ``loc_U'``.
            numbers: ``[..., S]`` the positions' :func:`earlier_numbers` (None when ``S = 0``).

        Returns:
            ``[..., C + S]`` (``loc`` itself when ``S = 0``).

        Raises:
            ValueError: ``numbers`` missing or of the wrong shape while ``S > 0``.
        """
        if self.numbers == 0:
            return loc
        if numbers is None:
            raise ValueError(
                f"the readouts read the {self.numbers} earlier numbers of each position: pass "
                "numbers (earlier_numbers of the sequence, e.g. the model's readout_context)"
            )
        if tuple(numbers.shape) != (*loc.shape[:-1], self.numbers):
            raise ValueError(
                f"numbers must be {(*loc.shape[:-1], self.numbers)}, got {tuple(numbers.shape)}"
            )
        return torch.cat([loc, numbers.to(device=loc.device, dtype=loc.dtype)], -1)

    @property
    def codes(self) -> torch.Tensor:
        """``[K]`` int64 the rows' context codes, increasing (:data:`OTHER` first when present)."""
        return _digits_code(self.contexts)

    @property
    def is_solved(self) -> torch.Tensor:
        """``[K]`` bool: the row has a solved readout."""
        return self.solved > 0.5

    @property
    def num_contexts(self) -> int:
        """The number of rows (0: the table changes nothing)."""
        return int(self.contexts.shape[0])

    def readout(self, row: int) -> CauchyReadout | None:
        """Row ``row``'s solved readout (a copy, to :meth:`store` again), or None where that row
        keeps the shared head. Its ``penalty`` and ``cv_nll`` are not stored (NaN).

        Args:
            row: ``0 <= row < num_contexts``.

        Raises:
            IndexError: a row outside the table.
        """
        if not 0 <= row < self.num_contexts:
            raise IndexError(f"row must be in [0, {self.num_contexts}), got {row}")
        if not bool(self.is_solved[row]):
            return None
        return CauchyReadout(
            self.weight[row].clone(),
            self.bias[row].clone(),
            self.noise[row].clone(),
            math.nan,
            math.nan,
            int(self.counts[row, 0]),
            0,
        )

    def context(
        self,
        tokens: torch.Tensor,
        k: int,
        num_classes: int,
        attention_mask: torch.Tensor | None = None,
        *,
        values: torch.Tensor | None = None,
        num_token_id: int | None = None,
        value_space: str = "signed_log1p",
        cached: bool = False,
        last: bool = False,
    ) -> ReadoutContext:
        """What the table reads at each position of ``tokens`` besides ``U'``: the one rule.

        ``codes`` are :func:`context_codes` of the ``k`` tokens ending at each position;
        ``numbers`` (when :attr:`numbers` ``= S > 0``) the ``S`` most recent numbers at or
        before it in the value space (:func:`earlier_numbers` of ``values`` at the positions
        whose token is ``num_token_id`` and not padding). ``tokens`` must hold the whole
        sequence up to each position, except:

        * ``cached``: ``tokens`` are only the last positions of a sequence whose start is in a
          KV cache. A position's code is known only where its ``k`` tokens are all among them
          (:data:`NO_CONTEXT` before), and when the table reads earlier numbers, which may lie
          before them, no code is known (every code :data:`NO_CONTEXT`, ``numbers`` None).
        * ``last``: only the last position's context (``codes [...]``, ``numbers [..., S]``);
          without earlier numbers only its ``k`` tokens are read.

        Args:
            tokens: ``[..., L]`` token ids.
            k: the tokens of a context (``1 <= k <=`` :data:`MAX_CONTEXT_TOKENS`).
            num_classes: one more than the largest id (the embedding rows).
            attention_mask: ``[..., L]`` (or ``[..., L_past + L]``: its last ``L`` columns are
                read), 0 at padding; optional.
            values: ``[..., L]`` the numbers at the ``num_token_id`` positions (default: zeros).
            num_token_id: the id of the number token (None: no position holds a number).
            value_space: the value space of the numbers (the regression's).
            cached: see above.
            last: see above.

        Returns:
            The :class:`ReadoutContext`.

        Example:
            >>> import torch
            >>> table = ContextReadouts(4, numbers=1)
            >>> ids = torch.tensor([[5, 9, 6, 9, 7]])  # 9: the number token
            >>> ctx = table.context(ids, 2, 10, values=torch.tensor([[0, 1.0, 0, 3.0, 0]]),
            ...                     num_token_id=9, value_space="identity")
            >>> ctx.numbers[0, :, 0].tolist()  # the latest number at or before each position
            [0.0, 1.0, 1.0, 3.0, 3.0]
            >>> table.context(ids, 2, 10, cached=True).codes.tolist()  # numbers in the cache?
            [[-2, -2, -2, -2, -2]]
            >>> ContextReadouts(4).context(ids[:, 3:], 2, 10, cached=True).codes[0, 0].item()
            -2
        """
        mask = attention_mask
        if mask is not None and mask.shape[-1] != tokens.shape[-1]:
            mask = mask[..., -tokens.shape[-1] :]  # [..., L_past + L]: the fed part
        if cached and self.numbers:
            unknown = torch.full(tokens.shape, NO_CONTEXT, dtype=torch.long, device=tokens.device)
            return ReadoutContext(unknown, None)
        if last and not self.numbers:  # a code reads only the last k tokens
            tokens = tokens[..., -k:]
            mask = None if mask is None else mask[..., -k:]
        codes = context_codes(tokens, k, num_classes, mask)
        numbers = None
        if self.numbers:
            if values is None:  # no numbers given
                values = torch.zeros(tokens.shape, device=tokens.device)
            is_number = tokens == (-1 if num_token_id is None else int(num_token_id))
            if mask is not None:
                is_number = is_number & (mask != 0)
            numbers = earlier_numbers(values, is_number, self.numbers, value_space)
        if cached:
            codes[..., : k - 1] = NO_CONTEXT
        if last:
            return ReadoutContext(codes[..., -1], None if numbers is None else numbers[..., -1, :])
        return ReadoutContext(codes, numbers)

    def store(
        self,
        codes: Sequence[int],
        readouts: Sequence[object | None],
        widths: torch.Tensor | None = None,
        calibration_counts: Sequence[int] | None = None,
    ) -> None:
        """Replace the table's rows.

        Args:
            codes: one code per row (:func:`context_codes`, or :data:`OTHER`), distinct.
            readouts: per row a :class:`~cauchylin.readout.CauchyReadout`, or None to keep the
                shared head there.
            widths: ``[K, L]`` conformal widths (NaN, infinite or <= 0: that level is not
                calibrated), or None.
            calibration_counts: per row, the numbers its widths were calibrated on.

        Raises:
            ValueError: lengths that differ, repeated codes, a readout of another size or not
                finite (or a noise <= 0), a solved readout on the :data:`OTHER` row, or widths
                of the wrong shape.
        """
        k = len(codes)
        if len(readouts) != k:
            raise ValueError(f"codes ({k}) and readouts ({len(readouts)}) must have one per row")
        if calibration_counts is not None and len(calibration_counts) != k:
            raise ValueError(
                f"codes ({k}) and calibration_counts ({len(calibration_counts)}) must have one "
                "per row"
            )
        if len(set(int(c) for c in codes)) != k:
            raise ValueError("codes must be distinct")
        order = sorted(range(k), key=lambda i: int(codes[i]))
        self._allocate(k, self.weight.device)
        for row, i in enumerate(order):
            code = int(codes[i])
            if code == OTHER:
                self.contexts[row] = -1
            elif code < 0:
                raise ValueError(f"codes must be >= 0 or OTHER, got {code}")
            else:
                self.contexts[row] = code_digits(torch.tensor(code)).to(self.contexts)
            fit = readouts[i]
            if fit is None:
                continue
            if not isinstance(fit, CauchyReadout) or fit.weight.shape != (self.feature_size,):
                raise ValueError(
                    f"readout {i} must be a CauchyReadout with a weight of {self.feature_size} "
                    "entries"
                )
            if int(codes[i]) == OTHER:
                raise ValueError("the OTHER row only holds widths, not a readout")
            finite = bool(torch.isfinite(fit.weight).all()) and math.isfinite(float(fit.bias))
            if not (finite and math.isfinite(float(fit.noise)) and float(fit.noise) > 0):
                raise ValueError(
                    f"readout {i} must have a finite weight and bias and a finite noise > 0"
                )
            self.weight[row] = fit.weight.to(self.weight)
            self.bias[row] = fit.bias.to(self.bias)
            self.noise[row] = fit.noise.to(self.noise)
            self.solved[row] = 1.0
            self.counts[row, 0] = int(fit.count)
        if widths is not None:
            if tuple(widths.shape) != (k, len(self.levels)):
                raise ValueError(
                    f"widths must be [{k}, {len(self.levels)}], got {tuple(widths.shape)}"
                )
            w = widths.to(self.widths)[order]
            usable = torch.isfinite(w) & (w > 0)
            self.widths.copy_(torch.where(usable, w, torch.full_like(w, NOT_CALIBRATED)))
        if calibration_counts is not None:
            self.counts[:, 1] = torch.tensor([int(calibration_counts[i]) for i in order])

    def lookup(self, codes: torch.Tensor) -> torch.Tensor:
        """The row of each code, -1 where the table has none.

        Args:
            codes: ``[...]`` int64 codes.

        Returns:
            ``[...]`` int64 row indices.
        """
        k = self.num_contexts
        if k == 0:
            return torch.full_like(codes, -1)
        table = self.codes.to(codes.device)
        row = torch.searchsorted(table, codes.contiguous()).clamp(max=k - 1)
        return torch.where(table[row] == codes, row, torch.full_like(row, -1))

    def read(
        self,
        u_prime: CauchyVector,
        weight: torch.Tensor,
        bias: torch.Tensor,
        rows: torch.Tensor,
        numbers: torch.Tensor | None = None,
    ) -> CauchyVector:
        """``Y`` ``[..., 1]``: the solved readout where a row has one, else ``U'.linear(weight, bias)``.

        Exact in the algebra of :class:`~cauchylin.CauchyVector`: one map per position
        (``weight`` of the shared head, or 0 where the solved readout's location, a number, is
        the offset) plus the readout's own noise ``sigma_k N`` (``N ~ Cauchy(0, 1)``, 0 where the
        shared head stays).

        Args:
            u_prime: ``U'`` ``[..., C]``.
            weight: ``[1, C]`` the shared head's ``W_reg``.
            bias: ``[1]`` its ``b_reg``.
            rows: ``[...]`` from :meth:`lookup`.
            numbers: ``[..., S]`` the positions' earlier numbers (:meth:`features`).

        Returns:
            The ``CauchyVector`` ``Y``.
        """
        loc_y, sigma, known = self._solved_at(u_prime.loc, rows, numbers)
        if not bool(known.any()):
            return u_prime.linear(weight, bias)
        dtype = u_prime.dtype
        per_position = torch.where(known[..., None], torch.zeros_like(weight[0]), weight[0])
        offset = torch.where(known, loc_y, torch.zeros_like(loc_y) + bias[0].to(dtype))
        y = u_prime.linear(per_position[..., None, :].to(dtype), offset[..., None].to(dtype))
        unit = CauchyVector(torch.zeros_like(offset[..., None]), torch.ones_like(offset[..., None]))
        return y + unit * sigma[..., None]

    def marginals(
        self,
        loc: torch.Tensor,
        loc_y: torch.Tensor,
        scale_y: torch.Tensor | None,
        rows: torch.Tensor,
        numbers: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(loc_Y, scale_Y)`` with the solved readouts put in where a row has one.

        Args:
            loc: ``[..., C]`` ``loc_U'``.
            loc_y: ``[...]`` the shared head's ``loc_Y``.
            scale_y: ``[...]`` its ``scale_Y``, or None.
            rows: ``[...]`` from :meth:`lookup`.
            numbers: ``[..., S]`` the positions' earlier numbers (:meth:`features`).

        Returns:
            The two tensors (``scale_Y`` None when ``scale_y`` is).
        """
        solved_loc, sigma, known = self._solved_at(loc, rows, numbers)
        out_loc = torch.where(known, solved_loc.to(loc_y.dtype), loc_y)
        out_scale = None
        if scale_y is not None:
            out_scale = torch.where(known, sigma.to(scale_y.dtype), scale_y)
        return out_loc, out_scale

    def _solved_at(
        self, loc: torch.Tensor, rows: torch.Tensor, numbers: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(w_k . features + b_k, sigma_k, known)`` per position (zeros where not ``known``)."""
        if self.num_contexts == 0:
            zero = torch.zeros(rows.shape, dtype=loc.dtype, device=loc.device)
            return zero, zero, torch.zeros(rows.shape, dtype=torch.bool, device=loc.device)
        safe = rows.clamp(min=0)
        known = (rows >= 0) & self.is_solved.to(rows.device)[safe]
        if numbers is None and self.numbers and not bool(known.any()):
            zero = torch.zeros(rows.shape, dtype=loc.dtype, device=loc.device)
            return zero, zero, known  # no solved readout to read: the numbers are not needed
        # At least float32: a readout's weights can be large with terms that cancel, and a
        # half-precision sum of them loses every digit.
        dtype = torch.promote_types(loc.dtype, torch.float32)
        x = self.features(loc.to(dtype), None if numbers is None else numbers.to(dtype))
        w = self.weight.to(device=loc.device, dtype=dtype)[safe]  # [..., C + S]
        value = (w * x).sum(-1) + self.bias.to(device=loc.device, dtype=dtype)[safe]
        value = value.to(loc.dtype)
        sigma = self.noise.to(device=loc.device, dtype=loc.dtype)[safe]
        zero = torch.zeros_like(value)
        return torch.where(known, value, zero), torch.where(known, sigma, zero), known

    def widths_at(self, rows: torch.Tensor, level: float) -> torch.Tensor:
        """The conformal width of each position at ``level`` (NaN where none is calibrated).

        A position whose context has no row (or whose row has no width at that level) takes
        the :data:`OTHER` row's width when there is one, unless its context has a solved
        readout: the pooled widths belong to the numbers the shared head reads.

        Args:
            rows: ``[...]`` from :meth:`lookup`.
            level: a coverage in :attr:`levels`.

        Returns:
            ``[...]`` float64 widths, in units of ``scale_Y``.

        Raises:
            ValueError: ``level`` is not one of :attr:`levels`.
        """
        j = self.level_index(level)
        if j is None:
            raise ValueError(
                f"level {level!r} is not among the calibrated levels {list(self.levels)}"
            )
        if self.num_contexts == 0:
            return torch.full(rows.shape, math.nan, dtype=torch.float64, device=rows.device)
        widths = self.widths[:, j].to(rows.device)
        widths = torch.where(widths > 0, widths, torch.full_like(widths, math.nan))
        own = torch.where(rows >= 0, widths[rows.clamp(min=0)], torch.nan)
        other = self.lookup(torch.tensor([OTHER], device=rows.device))[0]
        if int(other) >= 0:
            pooled = torch.isnan(own) & ~self._solved_rows(rows)
            own = torch.where(pooled, widths[other], own)
        return own

    def _solved_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """``[...]`` bool: the position's context has a solved readout."""
        solved = self.is_solved.to(rows.device)
        return (rows >= 0) & solved[rows.clamp(min=0)]

    def calibrated_on(self, rows: torch.Tensor) -> torch.Tensor:
        """How many numbers the widths of each position were calibrated on (0: none).

        The same rule as :meth:`widths_at`: the position's own row when it has widths, else the
        :data:`OTHER` row's.

        Args:
            rows: ``[...]`` from :meth:`lookup`.

        Returns:
            ``[...]`` int64 counts.
        """
        zero = torch.zeros(rows.shape, dtype=torch.long, device=rows.device)
        if self.num_contexts == 0:
            return zero
        counts = self.counts[:, 1].long().to(rows.device)
        has = (self.widths > 0).any(1).to(rows.device)
        safe = rows.clamp(min=0)
        own = torch.where((rows >= 0) & has[safe], counts[safe], zero)
        other = int(self.lookup(torch.tensor([OTHER], device=rows.device))[0])
        if other >= 0 and bool(has[other]):
            pooled = (own == 0) & ~self._solved_rows(rows)
            own = torch.where(pooled, counts[other], own)
        return own

    def level_index(self, level: float) -> int | None:
        """The index of ``level`` in :attr:`levels` (to 1e-9), or None.

        Args:
            level: a coverage.

        Returns:
            The index, or None.
        """
        for j, c in enumerate(self.levels):
            if math.isclose(c, float(level), abs_tol=1e-9):
                return j
        return None

    def extra_repr(self) -> str:
        """``"contexts=K, solved=S, calibrated=R, levels=[...]"`` (and ``numbers=S`` when > 0)."""
        calibrated = int((self.widths > 0).any(1).sum()) if self.num_contexts else 0
        numbers = f", numbers={self.numbers}" if self.numbers else ""
        return (
            f"contexts={self.num_contexts}, solved={int(self.is_solved.sum())}, "
            f"calibrated={calibrated}, levels={list(self.levels)}{numbers}"
        )


def _slots(numbers: object) -> int:
    """``numbers`` checked: an int >= 0."""
    if isinstance(numbers, bool) or not isinstance(numbers, int) or numbers < 0:
        raise ValueError(f"numbers must be an int >= 0, got {numbers!r}")
    return numbers
