r"""The next-token shift and the training loss of the causal LM (transformers' ``loss_utils``).

:func:`next_token_targets` is the one place where labels are aligned with the positions that
predict them: position ``i`` predicts ``labels[:, i + 1]``; ``target_values`` (aligned with the
input positions, like ``numeric_values``) shift with the labels. Pass labels unshifted
(``labels = input_ids`` with ``-100`` at padding, as
:class:`~cauchylin_hf.data.collator.NumericDataCollator` does), or pre-shifted as transformers'
``shift_labels``. :func:`shifted_causal_loss` applies the shift and the memory-efficient objective
:meth:`cauchylin.nn.Action.loss` (its formula is written out there).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cauchylin import CauchyVector
from cauchylin.losses import CausalLMLoss
from cauchylin.nn import Action

from .batch import IGNORE_INDEX, regression_targets
from .config import CauchyLMConfig

__all__ = [
    "NextTokenTargets",
    "before_numbers",
    "next_token_targets",
    "shifted_causal_loss",
]


@dataclass
class NextTokenTargets:
    """What each position predicts: position ``i`` predicts token ``i + 1`` (see :meth:`forward`).

    Attributes:
        labels: ``[B, L - shift]`` the labels of the predicting positions: ``labels[:, 1:]`` of
            unshifted labels, or pre-shifted labels as given.
        target_values: ``[B, L - shift]`` their regression targets, or None.
        mask: ``[B, L - shift]`` bool, True where the predicting position (and, for unshifted
            labels, the predicted one) is a real token (attention mask 1), or None without an
            attention mask.
        shift: 1 for unshifted labels (the last position predicts nothing), 0 for pre-shifted
            ones (every position predicts its own label).

    Example:
        >>> import torch
        >>> t = next_token_targets(torch.tensor([[5, 6, 7]]), None, torch.tensor([[0, 1, 1]]))
        >>> t.labels.tolist(), t.mask.tolist(), t.positions(torch.tensor([[1, 2, 3]])).tolist()
        ([[6, 7]], [[False, True]], [[1, 2]])
    """

    labels: torch.Tensor
    target_values: torch.Tensor | None
    mask: torch.Tensor | None
    shift: int = 1

    def positions(self, x: torch.Tensor) -> torch.Tensor:
        """The predicting positions of a ``[B, L, ...]`` tensor: ``x[:, :L - shift]``.

        Args:
            x: a per-position tensor aligned with the inputs.

        Returns:
            ``x[:, :-1]`` (or ``x`` for pre-shifted labels), aligned with :attr:`labels`.

        Example:
            >>> import torch
            >>> t = next_token_targets(torch.tensor([[5, 6, 7, 8]]))
            >>> t.positions(torch.arange(4).reshape(1, 4)).tolist()
            [[0, 1, 2]]
        """
        return x[:, : x.shape[1] - self.shift]


def next_token_targets(
    labels: torch.Tensor,
    target_values: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    *,
    pre_shifted: bool = False,
) -> NextTokenTargets:
    """Align labels with the positions that predict them: the one label shift.

    Unshifted labels (the default): position ``i`` predicts ``labels[:, i + 1]`` with regression
    target ``target_values[:, i + 1]``; it counts only where ``attention_mask`` is 1 at both
    ``i`` and ``i + 1`` (left or right padding). Pre-shifted labels (transformers'
    ``shift_labels``): position ``i`` predicts ``labels[:, i]`` with target
    ``target_values[:, i]`` and counts where ``attention_mask[:, i]`` is 1.

    Args:
        labels: ``[B, L]`` labels (``labels = input_ids``, -100 to ignore), unshifted unless
            ``pre_shifted``.
        target_values: ``[B, L]`` regression targets, aligned like ``labels``, or None.
        attention_mask: ``[B, L]`` 1 for tokens, 0 for padding, or None.
        pre_shifted: the labels (and targets) are already aligned with the predicting positions.

    Returns:
        :class:`NextTokenTargets` of shape ``[B, L - 1]`` (``[B, L]`` when ``pre_shifted``).

    Example:
        >>> import torch
        >>> t = next_token_targets(torch.tensor([[5, 6, 7]]), torch.tensor([[0.0, 2.5, 0.0]]))
        >>> t.labels.tolist(), t.target_values.tolist(), t.mask is None
        ([[6, 7]], [[2.5, 0.0]], True)
        >>> next_token_targets(torch.tensor([[6, 7, -100]]), pre_shifted=True).labels.tolist()
        [[6, 7, -100]]
    """
    if pre_shifted:
        mask = None if attention_mask is None else attention_mask != 0
        return NextTokenTargets(labels, target_values, mask, shift=0)
    mask = None
    if attention_mask is not None:
        m = attention_mask != 0
        mask = m[:, 1:] & m[:, :-1]
    targets = target_values[:, 1:] if target_values is not None else None
    return NextTokenTargets(labels[:, 1:], targets, mask)


def before_numbers(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, num_token_id: int
) -> torch.Tensor:
    """The positions that predict a number: position ``i`` where token ``i + 1`` is ``<NUM>``.

    Both positions must be real tokens (``attention_mask`` 1): a number that is a row's first
    token has no position before it.

    Args:
        input_ids: ``[B, L]`` token ids.
        attention_mask: ``[B, L]``, 0 at padding.
        num_token_id: the ``<NUM>`` id.

    Returns:
        ``[B, L]`` bool (the last column is always False).

    Example:
        >>> import torch
        >>> ids = torch.tensor([[7, 3, 8, 3], [3, 8, 3, 0]])
        >>> before_numbers(ids, torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]), 3).long().tolist()
        [[1, 0, 1, 0], [0, 1, 0, 0]]
    """
    real = attention_mask != 0
    out = torch.zeros_like(real)
    out[:, :-1] = (input_ids[:, 1:] == num_token_id) & real[:, 1:] & real[:, :-1]
    return out


def shifted_causal_loss(
    action: Action,
    config: CauchyLMConfig,
    U_all: CauchyVector,
    labels: torch.Tensor,
    target_values: torch.Tensor | None,
    numeric_values: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    *,
    pre_shifted: bool = False,
) -> CausalLMLoss:
    """The training loss of a forward: the next-token shift, then :meth:`cauchylin.nn.Action.loss`.

    The settings come from the model's config: ``num_token_id``, ``alpha``, ``reg_weight`` and
    the training temperature (``config.loss_temperature``).

    Args:
        action: the model's :class:`cauchylin.nn.Action`.
        config: the model's :class:`~cauchylin_hf.config.CauchyLMConfig`.
        U_all: :class:`~cauchylin.CauchyVector` ``[B, L, C]``, ``U`` at every input position.
        labels: ``[B, L]`` labels, unshifted (or pre-shifted with ``pre_shifted``).
        target_values: ``[B, L]`` regression targets aligned like ``labels``, or None
            (``numeric_values`` then, for unshifted labels).
        numeric_values: ``[B, L]`` the inputs' values, or None.
        attention_mask: ``[B, L]`` 1 for tokens, 0 for padding, or None.
        pre_shifted: ``labels`` (and ``target_values``) are transformers' ``shift_labels``.

    Returns:
        :class:`cauchylin.losses.CausalLMLoss` ``(total, cls, reg)``.

    Raises:
        ValueError: labels, targets or mask of another shape than the inputs, or pre-shifted
            labels with ``numeric_values`` but no ``target_values``.

    Example:
        >>> import torch
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> model = CauchyLMForCausalLM.from_base(tiny_base_model(), num_token_id=299)
        >>> ids = torch.tensor([[5, 299, 7]])
        >>> U = model.abduction(model.encode(ids)[0])
        >>> loss = shifted_causal_loss(model.action, model.config, U, ids, None, None, None)
        >>> int(loss.cls.count)  # 0->1 and 1->2
        2
    """
    B, L = U_all.batch_shape
    name = "shift_labels" if pre_shifted else "labels"
    if not isinstance(labels, torch.Tensor) or tuple(labels.shape) != (B, L):
        shape = tuple(labels.shape) if isinstance(labels, torch.Tensor) else type(labels)
        raise ValueError(f"{name} must have the input shape {(B, L)}, got {shape}")
    if pre_shifted and target_values is None and numeric_values is not None:
        # The inputs' values are aligned with the inputs, not with pre-shifted labels, and
        # the value the last position predicts is not among them.
        raise ValueError(
            "with shift_labels, pass target_values shifted the same way (the value of the "
            "token each position predicts); numeric_values cannot serve as targets"
        )
    targets = regression_targets(target_values, numeric_values)
    if targets is not None and tuple(targets.shape) != (B, L):
        raise ValueError(
            f"target_values must have the input shape {(B, L)}, got {tuple(targets.shape)}"
        )
    if attention_mask is not None and tuple(attention_mask.shape) != (B, L):
        raise ValueError(
            f"attention_mask must have shape {(B, L)} in a training forward, got "
            f"{tuple(attention_mask.shape)}"
        )
    shifted = next_token_targets(labels, targets, attention_mask, pre_shifted=pre_shifted)
    U = CauchyVector(
        shifted.positions(U_all.loc), shifted.positions(U_all.scale), validate_args=False
    )
    cfg = config
    # Every loss setting reaches Action.loss here, from the config.
    return action.loss(
        U,
        shifted.labels,
        shifted.target_values,
        num_token_id=cfg.num_token_id,
        attention_mask=shifted.mask,
        alpha=cfg.alpha,
        reg_weight=cfg.reg_weight,
        ignore_index=IGNORE_INDEX,
        temperature=cfg.loss_temperature,
        reg_scale_power=cfg.reg_scale_power,
        reg_context_tokens=cfg.reg_context_tokens,
        reg_scale_cutoff=cfg.reg_scale_cutoff,
        reg_target_weight=cfg.reg_target_weight,
    )
