r"""The readout context of a model's positions: what its per-context readouts read besides ``U'``.

:meth:`cauchylin.nn.readouts.ContextReadouts.context` holds the rule (the codes of the ``k``
tokens ending at each position, the earlier numbers, what a cache leaves unknown);
:func:`readout_context` gives it the model's ``k`` (``config.readout_context_tokens``), embedding
rows, ``<NUM>`` id and value space. Every path that reads a number takes its context from here:
``forward`` (:func:`forward_context`), ``generate`` (the last position), the teacher-forced and
prompt predictions, the solve and the calibration (through
:meth:`~cauchylin_hf.model.CauchyLMForCausalLM.readout_context`).
"""

from __future__ import annotations

from typing import Any

import torch

from cauchylin.nn.readouts import ReadoutContext, context_codes

from ._backbone import input_embedding_weight

__all__ = ["ReadoutContextMixin", "forward_context", "readout_context"]


def readout_context(
    model: Any,
    input_ids: torch.Tensor,
    numeric_values: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    *,
    cached: bool = False,
    last: bool = False,
) -> ReadoutContext:
    """The :class:`~cauchylin.nn.readouts.ReadoutContext` of ``input_ids`` with the model's settings.

    Args:
        model: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM`.
        input_ids: ``[..., L]`` token ids (the whole sequence up to each position, unless
            ``cached``).
        numeric_values: ``[..., L]`` the numbers at the ``<NUM>`` positions (default zeros).
        attention_mask: ``[..., L]`` (or ``[..., L_past + L]``), 0 at padding (optional).
        cached: ``input_ids`` follow a KV cache (see
            :meth:`cauchylin.nn.readouts.ContextReadouts.context`).
        last: the last position's context only.

    Returns:
        The :class:`~cauchylin.nn.readouts.ReadoutContext`.

    Example:
        >>> import torch
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> model = CauchyLMForCausalLM.from_base(tiny_base_model(), num_token_id=299)
        >>> ids = torch.tensor([[5, 6, 7, 8]])
        >>> last = readout_context(model, ids, last=True)
        >>> bool(last.codes[0] == readout_context(model, ids).codes[0, -1])
        True
        >>> tuple(last.numbers.shape)  # the 16 earlier numbers a readout reads (none here: 0)
        (1, 16)
    """
    config = model.config
    return model.action.readouts.context(
        input_ids,
        int(config.readout_context_tokens),
        int(input_embedding_weight(model).shape[0]),
        attention_mask,
        values=numeric_values,
        num_token_id=config.num_token_id,
        value_space=config.value_space,
        cached=cached,
        last=last,
    )


def forward_context(
    model: Any,
    input_ids: torch.Tensor | None,
    numeric_values: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    cache: Any,
) -> ReadoutContext | None:
    """The readout context ``forward`` reads off its inputs when it is given none.

    None where the model has no per-context readouts or only ``inputs_embeds`` came. With a
    cache only the fed ids are known: a position's code is then known only where all its ``k``
    tokens were fed, and none when the readouts read earlier numbers (pass ``forward`` the
    context of the whole sequence to use the readouts there).

    Args:
        model: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM`.
        input_ids: ``[B, L]`` the fed ids, or None.
        numeric_values: ``[B, L]`` their values, or None (zeros).
        attention_mask: ``[B, L_past + L]``, or None.
        cache: the cache the ids follow, or None.

    Returns:
        The context, or None.

    Example:
        >>> import torch
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> model = CauchyLMForCausalLM.from_base(tiny_base_model(), num_token_id=299)
        >>> forward_context(model, torch.tensor([[5, 6]]), None, None, None) is None  # no table
        True
    """
    if input_ids is None or model.action.readouts.num_contexts == 0:
        return None
    return readout_context(
        model, input_ids, numeric_values, attention_mask, cached=cache is not None
    )


class ReadoutContextMixin:
    """The readout context of a model's positions, as methods (mixed into the causal model).

    Example:
        >>> import torch
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> model = CauchyLMForCausalLM.from_base(tiny_base_model(), num_token_id=299)
        >>> codes, numbers = model.readout_context(torch.tensor([[5, 6, 7]]), torch.zeros(1, 3))
        >>> bool(torch.equal(codes, model.context_codes(torch.tensor([[5, 6, 7]]))))
        True
        >>> tuple(numbers.shape)  # [..., L, S]: config.readout_numbers = 16 by default
        (1, 3, 16)
    """

    def context_codes(
        self: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The context code of every position: its last ``config.readout_context_tokens`` tokens.

        The key of the per-context readouts and calibration (:mod:`cauchylin_hf.readouts`):
        :func:`cauchylin.nn.readouts.context_codes` of the ids with this model's ``k`` and
        embedding rows; padding (``attention_mask`` 0) and the start of a row count as "no
        token", so a left-padded prompt has the codes of the same prompt alone.

        Args:
            input_ids: ``[..., L]`` token ids (the whole sequence up to each position).
            attention_mask: ``[..., L]``, 0 at padding (optional).

        Returns:
            ``[..., L]`` int64 codes.

        Example:
            >>> import torch
            >>> from cauchylin_hf.model import CauchyLMForCausalLM
            >>> from cauchylin_hf.testing import tiny_base_model
            >>> model = CauchyLMForCausalLM.from_base(tiny_base_model(), num_token_id=299)
            >>> codes = model.context_codes(torch.tensor([[0, 5, 6, 7], [5, 6, 7, 8]]),
            ...                             torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]]))
            >>> bool(codes[0, 3] == codes[1, 2])  # the tokens 5, 6, 7 end both positions
            True
        """
        rows = int(input_embedding_weight(self).shape[0])
        k = int(self.config.readout_context_tokens)
        return context_codes(input_ids, k, rows, attention_mask)

    def readout_context(
        self: Any,
        input_ids: torch.Tensor,
        numeric_values: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> ReadoutContext:
        """What the per-context readouts read at every position, besides ``U'``: ``(codes, numbers)``.

        ``codes`` are :meth:`context_codes`; ``numbers`` ``[..., L, S]`` the ``S`` most recent
        numbers at or before each position in the value space
        (:func:`cauchylin.nn.readouts.earlier_numbers`; None when ``S = 0``), ``S`` the number
        the readout table reads (``config.readout_numbers`` when it was solved). Every path
        that reads a number (teacher-forced and prompt prediction, ``forward``, ``generate``,
        the solve and the calibration) takes them from the same rule
        (:meth:`cauchylin.nn.readouts.ContextReadouts.context`).

        Args:
            input_ids: ``[..., L]`` token ids (the whole sequence up to each position).
            numeric_values: ``[..., L]`` the numbers at the ``<NUM>`` positions (needed when
                ``S > 0``).
            attention_mask: ``[..., L]``, 0 at padding (optional).

        Returns:
            The :class:`~cauchylin.nn.readouts.ReadoutContext` ``(codes, numbers)``, which
            ``forward`` and :meth:`heads` take as their ``context``.

        Raises:
            ValueError: ``S > 0`` without ``numeric_values``.

        Example:
            >>> import torch
            >>> from cauchylin_hf.model import CauchyLMForCausalLM
            >>> from cauchylin_hf.testing import tiny_base_model
            >>> model = CauchyLMForCausalLM.from_base(
            ...     tiny_base_model(), num_token_id=299, readout_numbers=2)
            >>> ids = torch.tensor([[5, 299, 6, 299, 7]])
            >>> codes, numbers = model.readout_context(ids, torch.tensor([[0, 1.0, 0, 3.0, 0]]))
            >>> [[round(v, 3) for v in row] for row in numbers[0].tolist()]  # ln(1 + y)
            [[0.0, 0.0], [0.693, 0.0], [0.693, 0.0], [1.386, 0.693], [1.386, 0.693]]
        """
        slots = self.action.readouts.numbers
        if slots and numeric_values is None:
            raise ValueError(
                f"numeric_values are needed: the readouts read the {slots} earlier numbers of "
                "each position (config.readout_numbers)"
            )
        return readout_context(self, input_ids, numeric_values, attention_mask)
