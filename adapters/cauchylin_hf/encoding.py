"""The pure steps of encoding one text: its ids and values, and truncation that keeps them aligned.

:class:`~cauchylin_hf.tokenizer.NumericTokenizer` cuts a text at its numbers
(:func:`~cauchylin_hf.numbers.split_numbers_batch`), tokenizes the text segments with the wrapped
tokenizer, and then, per text, calls :func:`assemble_encoding` (segment ids and ``<NUM>`` ids
interleaved, the values aligned) and, when the text is too long, :func:`truncate_encoding` (which
drops the spellings of the numbers it cuts off, so that ``number_texts`` stays one per ``<NUM>``).
Both work on plain lists, with no tokenizer.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["assemble_encoding", "truncate_encoding"]


def assemble_encoding(
    segment_ids: Sequence[Sequence[int]], values: Sequence[float], num_token_id: int
) -> tuple[list[int], list[float]]:
    """Interleave the ids of a text's segments with one ``<NUM>`` id per number.

    Args:
        segment_ids: the ids of each text segment (``len(values) + 1`` of them; an empty
            segment has no ids).
        values: the value of each number, in order.
        num_token_id: the ``<NUM>`` id.

    Returns:
        ``(ids, numeric_values)``: ``segment_ids[0] + [num] + segment_ids[1] + ... +
        segment_ids[-1]``, and a list as long with each number's value at its ``<NUM>`` and
        ``0.0`` elsewhere.

    Raises:
        ValueError: when there is not exactly one more segment than values.

    Example:
        >>> assemble_encoding([[7, 8], [], [9]], [4.5, -1.0], num_token_id=0)
        ([7, 8, 0, 0, 9], [0.0, 0.0, 4.5, -1.0, 0.0])
    """
    if len(segment_ids) != len(values) + 1:
        raise ValueError(
            f"segment_ids must hold one more segment than values, got {len(segment_ids)} and "
            f"{len(values)}"
        )
    ids = list(segment_ids[0])
    out = [0.0] * len(ids)
    for value, segment in zip(values, segment_ids[1:], strict=True):
        ids.append(num_token_id)
        ids += segment
        out.append(value)
        out += [0.0] * len(segment)
    return ids, out


def truncate_encoding(
    ids: Sequence[int],
    values: Sequence[float],
    spellings: Sequence[str],
    budget: int,
    num_token_id: int,
    side: str = "right",
) -> tuple[list[int], list[float], list[str]]:
    """Cut an encoding to ``budget`` positions, keeping one spelling per ``<NUM>`` left.

    Args:
        ids: the ids of one text.
        values: its numeric values (as long as ``ids``).
        spellings: one spelling per ``<NUM>`` in ``ids``, in order.
        budget: the most positions to keep (``>= 0``).
        num_token_id: the ``<NUM>`` id.
        side: ``"right"`` keeps the first ``budget`` positions, ``"left"`` the last.

    Returns:
        ``(ids, values, spellings)`` cut alike: the spellings of the ``<NUM>`` cut off are
        dropped.

    Raises:
        ValueError: a negative ``budget``, an unknown ``side``, ``values`` of another length
            than ``ids``, or as many spellings as ``<NUM>`` ids.

    Example:
        >>> ids, values = [5, 0, 6, 0, 7], [0.0, 1.5, 0.0, 2.5, 0.0]
        >>> truncate_encoding(ids, values, ["1.50", "2.5"], 3, num_token_id=0)
        ([5, 0, 6], [0.0, 1.5, 0.0], ['1.50'])
        >>> truncate_encoding(ids, values, ["1.50", "2.5"], 3, num_token_id=0, side="left")
        ([6, 0, 7], [0.0, 2.5, 0.0], ['2.5'])
    """
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', got {side!r}")
    if len(values) != len(ids):
        raise ValueError(f"values has length {len(values)} but ids has {len(ids)}")
    if len(spellings) != list(ids).count(num_token_id):
        raise ValueError(f"spellings has {len(spellings)} entries for the <NUM> ids in ids")
    if side == "left":
        cut = max(0, len(ids) - budget)
        dropped = list(ids[:cut]).count(num_token_id)
        return list(ids[cut:]), list(values[cut:]), list(spellings[dropped:])
    kept = list(ids[:budget])
    return kept, list(values[:budget]), list(spellings[: kept.count(num_token_id)])
