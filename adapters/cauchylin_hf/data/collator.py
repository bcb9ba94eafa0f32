"""Padding examples into a batch for the model's ``forward`` (and for ``transformers.Trainer``).

:class:`NumericDataCollator` pads a list of examples into ``input_ids``, ``attention_mask``,
``numeric_values``, ``labels`` (= ``input_ids``, -100 at padding) and ``target_values``
(= ``numeric_values``), left or right. Labels are *not* shifted here: the model shifts them (and
the target values with them) inside ``forward``, so ``labels[b, i]`` is the token at position
``i`` and position ``i - 1`` predicts it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..batch import (
    IGNORE_INDEX,
    check_size,
    pad_rows,
    pad_values,
    padded_length,
    regression_targets,
    resolve_pad_token_id,
)
from .dataset import check_example

__all__ = ["NumericDataCollator"]


@dataclass
class NumericDataCollator:
    """Pad examples into a batch for the causal language model (a ``data_collator`` for Trainer).

    Output fields, each ``[batch, seq]``: ``input_ids`` (int64; padding = the pad id),
    ``attention_mask`` (int64; 0 at padding), ``numeric_values`` (float32; 0.0 at padding),
    ``labels`` (int64; the example's ``labels`` if it has them, else ``input_ids``; -100 at padding
    and wherever the example's attention mask is 0) and ``target_values`` (float32; the example's
    ``target_values`` if it has them, else ``numeric_values``; 0.0 at padding). Labels are not
    shifted: the model does that inside ``forward``.

    Args:
        tokenizer: a ``NumericTokenizer`` or HF tokenizer supplying the pad id and padding side
            (optional).
        pad_token_id: the id written at padding; default the tokenizer's pad id, else its eos id,
            else 0. Any valid id works, since padding is masked out of attention and loss.
        padding_side: ``"left"`` or ``"right"``; default the tokenizer's side, else ``"right"``.
            Use ``"left"`` for batched generation, either for training.
        pad_to_multiple_of: round the padded length up to a multiple of this.
        return_labels: add ``labels`` and ``target_values`` (turn off for inference batches).

    Raises:
        ValueError: (on call) for an empty batch, an example without ``input_ids``, fields of
            different lengths, or an unknown field.

    Example:
        >>> collate = NumericDataCollator(pad_token_id=0, padding_side="left")
        >>> batch = collate([{"input_ids": [5, 6, 7]}, {"input_ids": [8, 9], "numeric_values": [0.0, 2.5]}])
        >>> batch["labels"].tolist(), batch["numeric_values"][1].tolist()
        ([[5, 6, 7], [-100, 8, 9]], [0.0, 0.0, 2.5])
    """

    tokenizer: Any = None
    pad_token_id: int | None = None
    padding_side: str | None = None
    pad_to_multiple_of: int | None = None
    return_labels: bool = True

    def __post_init__(self) -> None:
        if self.padding_side not in (None, "left", "right"):
            raise ValueError(
                f"padding_side must be 'left', 'right' or None, got {self.padding_side!r}"
            )
        check_size("pad_to_multiple_of", self.pad_to_multiple_of)

    def _pad_id(self) -> int:
        if self.pad_token_id is not None:
            return int(self.pad_token_id)
        eos = getattr(self.tokenizer, "eos_token_id", None)
        return resolve_pad_token_id(self.tokenizer, eos_token_id=eos)

    def _side(self) -> str:
        if self.padding_side is not None:
            return self.padding_side
        side = getattr(self.tokenizer, "padding_side", None)
        return side if side in ("left", "right") else "right"

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        """Pad ``features`` (a list of examples) into a batch.

        Args:
            features: examples as :class:`NumericDataset` returns them (dicts of 1-D tensors or
                lists); only ``input_ids`` is required.

        Returns:
            A dict of ``[batch, seq]`` tensors: ``input_ids``, ``attention_mask``,
            ``numeric_values`` and (with ``return_labels``) ``labels`` and ``target_values``.

        Raises:
            ValueError: for an empty batch or a malformed example.
        """
        if isinstance(features, Mapping) or not isinstance(features, Sequence) or not features:
            raise ValueError("the collator needs a non-empty list of examples")
        rows = [check_example(f, f"features[{b}]") for b, f in enumerate(features)]
        if self.return_labels:
            for r in rows:
                labels = r.get("labels", r["input_ids"])
                r["labels"] = labels.masked_fill(r["attention_mask"] == 0, IGNORE_INDEX)
                targets = regression_targets(r.get("target_values"), r["numeric_values"])
                assert targets is not None  # numeric_values is always there
                r["target_values"] = targets
        length = padded_length(
            [r["input_ids"].numel() for r in rows], pad_to_multiple_of=self.pad_to_multiple_of
        )
        fields = ["input_ids", "attention_mask", "numeric_values"]
        if self.return_labels:
            fields += ["labels", "target_values"]
        return pad_rows(
            [{key: r[key] for key in fields} for r in rows],
            length,
            side=self._side(),
            pad_values=pad_values(self._pad_id()),
        )
