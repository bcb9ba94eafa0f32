"""The batch layout: the per-position fields, their dtypes and padding values, one padder.

Every per-position field the package pads is in :data:`BATCH_FIELDS` with its dtype and padding
value; :func:`pad_rows` is the one padder (used by
:meth:`~cauchylin_hf.tokenizer.NumericTokenizer.pad` and
:class:`~cauchylin_hf.data.collator.NumericDataCollator`); :func:`resolve_pad_token_id` is the one rule
for the id written at padding (used by the collator and by generation).

A model batch holds ``[batch, seq]`` tensors:

================== ========= ===================================================================
field              dtype     padding
================== ========= ===================================================================
``input_ids``      int64     the pad id (masked out of attention and loss, so any valid id)
``attention_mask`` int64     0
``numeric_values`` float32   0.0 (the value of each ``<NUM>``, 0.0 at every other position)
``labels``         int64     :data:`IGNORE_INDEX` (-100)
``target_values``  float32   0.0 (the regression targets; ``numeric_values`` by default)
================== ========= ===================================================================
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from cauchylin._validation import positive_int

__all__ = [
    "BATCH_FIELDS",
    "IGNORE_INDEX",
    "MODEL_FIELDS",
    "check_size",
    "check_token_ids",
    "field_dtype",
    "pad_rows",
    "pad_values",
    "padded_length",
    "regression_targets",
    "resolve_pad_token_id",
]

IGNORE_INDEX = -100
"""Label value of positions that do not count in the loss (padding)."""

BATCH_FIELDS: dict[str, tuple[torch.dtype, int | float | None]] = {
    "input_ids": (torch.long, None),  # None: padded with the pad id
    "attention_mask": (torch.long, 0),
    "numeric_values": (torch.float32, 0.0),
    "labels": (torch.long, IGNORE_INDEX),
    "target_values": (torch.float32, 0.0),
    # Fields a Hugging Face tokenizer may return; padded, but the model does not take them.
    "token_type_ids": (torch.long, 0),
    "special_tokens_mask": (torch.long, 1),
}
"""Per-position field -> ``(dtype, padding value)``; ``input_ids`` is padded with the pad id."""

MODEL_FIELDS = frozenset(
    {"input_ids", "attention_mask", "numeric_values", "labels", "target_values"}
)
"""The per-position fields the model's ``forward`` takes."""


def pad_values(pad_token_id: int | None) -> dict[str, int | float | None]:
    """The padding value of every field of :data:`BATCH_FIELDS`, ``input_ids`` with ``pad_token_id``.

    Args:
        pad_token_id: the id written at padded ``input_ids`` positions (None: no pad token).

    Returns:
        ``{field: padding value}``.

    Example:
        >>> pad_values(0)["labels"], pad_values(0)["input_ids"]
        (-100, 0)
    """
    values = {key: value for key, (_, value) in BATCH_FIELDS.items()}
    values["input_ids"] = pad_token_id
    return values


def field_dtype(name: str, pad_value: int | float | None = None) -> torch.dtype:
    """The dtype of a per-position field: the table's, else float32 for a float padding value.

    Args:
        name: the field name.
        pad_value: the padding value given for a field outside :data:`BATCH_FIELDS`.

    Returns:
        ``torch.float32`` or ``torch.long``.

    Example:
        >>> field_dtype("numeric_values"), field_dtype("labels"), field_dtype("weights", 0.0)
        (torch.float32, torch.int64, torch.float32)
    """
    if name in BATCH_FIELDS and BATCH_FIELDS[name][0] == torch.float32:
        return torch.float32
    return torch.float32 if isinstance(pad_value, float) else torch.long


def check_token_ids(input_ids: torch.Tensor, rows: int) -> None:
    """Refuse token ids outside a model's embedding rows ``[0, rows)``.

    The embedding lookup would fail with an ``IndexError`` (on a CPU) or a device-side assert
    (on a GPU) that names neither the ids nor the vocabulary.

    Args:
        input_ids: ``[B, L]`` (or any shape) integer ids.
        rows: the number of rows of the model's input embedding.

    Raises:
        ValueError: an id below 0 or at least ``rows`` (the message lists up to five of them).

    Example:
        >>> import torch
        >>> check_token_ids(torch.tensor([[5, 299]]), 300)  # fine: returns None
        >>> check_token_ids(torch.tensor([[5, 300]]), 300)
        Traceback (most recent call last):
        ...
        ValueError: input_ids holds ids outside the model's 300 embedding rows ([300]): was the text encoded with another tokenizer?
    """
    if input_ids.numel() == 0:
        return
    if int(input_ids.min()) >= 0 and int(input_ids.max()) < rows:
        return
    outside = (input_ids < 0) | (input_ids >= rows)
    raise ValueError(
        f"input_ids holds ids outside the model's {rows} embedding rows "
        f"({sorted(set(input_ids[outside].tolist()))[:5]}): was the text encoded with another "
        "tokenizer?"
    )


def check_size(name: str, value: Any) -> int | None:
    """A length or size option: ``None`` or a positive int (``max_length``, ``pad_to_multiple_of``).

    Args:
        name: the argument's name, for the message.
        value: the value given.

    Returns:
        ``value`` (an int, or None).

    Raises:
        ValueError: ``value`` is not None and not a positive int (a bool, a float, a string, 0 or
            a negative number); the message names the argument.

    Example:
        >>> check_size("max_length", 8), check_size("pad_to_multiple_of", None)
        (8, None)
        >>> check_size("pad_to_multiple_of", 2.5)
        Traceback (most recent call last):
        ...
        ValueError: pad_to_multiple_of must be a positive int, got 2.5
    """
    if value is None:
        return None
    return positive_int(name, value)


def padded_length(
    lengths: Sequence[int], *, max_length: int | None = None, pad_to_multiple_of: int | None = None
) -> int:
    """The padded length: the longest row (at least ``max_length``), rounded up to a multiple.

    Args:
        lengths: the row lengths (non-empty).
        max_length: pad to at least this length (``padding="max_length"``).
        pad_to_multiple_of: round the length up to a multiple of this.

    Returns:
        The length of the padded batch.

    Raises:
        ValueError: ``max_length`` or ``pad_to_multiple_of`` is not a positive int or None.

    Example:
        >>> padded_length([3, 5], pad_to_multiple_of=4), padded_length([3], max_length=6)
        (8, 6)
    """
    check_size("max_length", max_length)
    check_size("pad_to_multiple_of", pad_to_multiple_of)
    target = max(lengths)
    if max_length is not None:
        target = max(target, max_length)
    if pad_to_multiple_of is not None:
        target = -(-target // pad_to_multiple_of) * pad_to_multiple_of
    return target


def pad_rows(
    rows: Sequence[Mapping[str, torch.Tensor]],
    length: int,
    *,
    side: str,
    pad_values: Mapping[str, int | float | None],
    dtypes: Mapping[str, torch.dtype] | None = None,
) -> dict[str, torch.Tensor]:
    """Pad rows of 1-D tensors (one row per example, equal lengths within a row) to ``length``.

    Args:
        rows: the examples; every row has the fields of ``rows[0]``.
        length: the padded length (at least each row's length).
        side: ``"left"`` (padding first, for generation) or ``"right"``.
        pad_values: the padding value of every field (None, "no pad id", is written as 0: only
            valid when no row of that field is padded).
        dtypes: the dtype of every field (default :func:`field_dtype`).

    Returns:
        ``{field: [batch, length] tensor}``.

    Example:
        >>> import torch
        >>> rows = [{"input_ids": torch.tensor([5, 6])}, {"input_ids": torch.tensor([7])}]
        >>> pad_rows(rows, 3, side="left", pad_values={"input_ids": 0})["input_ids"].tolist()
        [[0, 5, 6], [0, 0, 7]]
    """
    left = side == "left"
    out: dict[str, torch.Tensor] = {}
    for key in rows[0]:
        value = pad_values[key]
        dtype = dtypes[key] if dtypes is not None and key in dtypes else field_dtype(key, value)
        value = 0 if value is None else value
        padded = torch.full((len(rows), length), value, dtype=dtype)
        for b, row in enumerate(rows):
            seq = row[key]
            n = seq.shape[0]
            if left:
                padded[b, length - n :] = seq
            else:
                padded[b, :n] = seq
        out[key] = padded
    return out


def _as_id(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def resolve_pad_token_id(*sources: Any, eos_token_id: int | Sequence[int] | None = None) -> int:
    """The id written at padding: the first source's ``pad_token_id``, else the eos id, else 0.

    Any valid id works, since padding is masked out of attention and loss.

    Args:
        *sources: objects with an optional ``pad_token_id`` attribute (a tokenizer, a generation
            config, a model config), in order of preference; ``None`` entries are skipped.
        eos_token_id: the eos id (or ids: the first is used) when no source has a pad id.

    Returns:
        The pad id.

    Example:
        >>> from types import SimpleNamespace
        >>> resolve_pad_token_id(SimpleNamespace(pad_token_id=None), SimpleNamespace(pad_token_id=3))
        3
        >>> resolve_pad_token_id(None, eos_token_id=[2, 7]), resolve_pad_token_id()
        (2, 0)
    """
    for source in sources:
        found = _as_id(getattr(source, "pad_token_id", None)) if source is not None else None
        if found is not None:
            return found
    eos = eos_token_id
    if eos is not None and not isinstance(eos, int):
        eos = next(iter(eos), None)
    found = _as_id(eos)
    return 0 if found is None else found


def regression_targets(
    target_values: torch.Tensor | None, numeric_values: torch.Tensor | None
) -> torch.Tensor | None:
    """The regression targets: ``target_values``, by default the inputs' ``numeric_values``.

    Aligned with the input positions (unshifted), so the target of the ``<NUM>`` at position
    ``i`` is its own value, read when position ``i - 1`` predicts it.

    Args:
        target_values: explicit targets, or None.
        numeric_values: the inputs' values, or None.

    Returns:
        ``target_values`` when given, else ``numeric_values``.

    Example:
        >>> import torch
        >>> regression_targets(None, torch.tensor([0.0, 2.5])).tolist()
        [0.0, 2.5]
    """
    return target_values if target_values is not None else numeric_values
