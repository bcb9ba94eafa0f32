"""The output of :meth:`CauchyLMForCausalLM.forward <cauchylin_hf.model.CauchyLMForCausalLM.forward>`.

transformers keeps its output dataclasses apart from the models (``modeling_outputs``); this is
the causal model's. Its cache field is named as the running transformers release names it (see
:mod:`cauchylin_hf.hf_compat`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from transformers.utils import ModelOutput

from .hf_compat import CACHE_NAME

__all__ = ["CauchyLMOutput", "distribution_fields", "loss_fields"]


@dataclass
class CauchyLMOutput(ModelOutput):
    """Output of :meth:`CauchyLMForCausalLM.forward <cauchylin_hf.model.CauchyLMForCausalLM.forward>`.

    Distribution fields cover the positions kept by ``logits_to_keep`` (all by default), in the
    heads' dtype. In a training forward (``labels`` given) the class-score fields ``logits``,
    ``loc_S``, ``scale_S``, ``loc_Y``, ``scale_Y`` are ``None`` unless ``return_distributions=True``:
    the loss never materialises ``[N, V]`` tensors.

    Attributes:
        loss: scalar ``L = L_cls + reg_weight * L_reg`` (only when ``labels`` are given; formula
            in :meth:`cauchylin.nn.Action.loss`).
        cls_loss: scalar ``L_cls``, the OvR binary cross-entropy summed over classes, averaged
            over counted positions.
        reg_loss: scalar ``L_reg``, the gated Cauchy NLL of the ``<NUM>`` targets (0 when there
            is none).
        cls_count: number of positions the OvR loss counted (int64 scalar).
        reg_count: number of ``<NUM>`` targets (int64 scalar).
        logits: ``[B, L', V]`` = ``loc_S`` (for tools that expect logits; ``V`` = OvR classes).
        loc_S: ``[B, L', V]`` class-score locations.
        scale_S: ``[B, L', V]`` class-score scales (of the requested mode).
        loc_Y: ``[B, L']`` regression-value location (the regression prediction).
        scale_Y: ``[B, L']`` regression-value scale.
        loc_U: ``[B, L', C]`` location of the individual representation U.
        scale_U: ``[B, L', C]`` scale of U.
        cache: the backbone's KV cache (when ``use_cache``). Under transformers before 5.24 the
            field is named ``past_key_values``, as that release's outputs name it (see
            :data:`cauchylin_hf.hf_compat.CACHE_NAME`), and ``out.cache`` reads it.
        hidden_states: the backbone's hidden states (``output_hidden_states=True``).
        attentions: the backbone's attentions (``output_attentions=True``).

    Example:
        >>> import torch
        >>> from cauchylin_hf import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
        >>> ids = torch.tensor([[5, 6, 7]])
        >>> out = model(ids)
        >>> tuple(out.loc_S.shape), tuple(out.loc_Y.shape), out.logits is out.loc_S, out.loss
        ((1, 3, 300), (1, 3), True, None)
        >>> out.cache.get_seq_length()  # the KV cache, whatever the release calls it
        3
        >>> out = model(ids, labels=ids)
        >>> out.logits is None, out.cls_count.item()  # 2 counted positions: 0->1 and 1->2
        (True, 2)
        >>> bool(torch.allclose(out.loss, out.cls_loss + model.config.reg_weight * out.reg_loss))
        True
    """

    loss: torch.Tensor | None = None
    cls_loss: torch.Tensor | None = None
    reg_loss: torch.Tensor | None = None
    cls_count: torch.Tensor | None = None
    reg_count: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    loc_S: torch.Tensor | None = None
    scale_S: torch.Tensor | None = None
    loc_Y: torch.Tensor | None = None
    scale_Y: torch.Tensor | None = None
    loc_U: torch.Tensor | None = None
    scale_U: torch.Tensor | None = None
    cache: Any = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


if CACHE_NAME != "cache":
    # Before transformers 5.24 a model output names its cache ``past_key_values``, and that is the
    # key ``generate`` reads back: the same fields with that one renamed, plus ``out.cache``.
    CauchyLMOutput = dataclasses.make_dataclass(  # type: ignore[misc,assignment]  # per release
        "CauchyLMOutput",
        [
            (CACHE_NAME if f.name == "cache" else f.name, f.type, dataclasses.field(default=None))
            for f in dataclasses.fields(CauchyLMOutput)
        ],
        bases=(ModelOutput,),
        namespace={
            "__doc__": CauchyLMOutput.__doc__,
            "__module__": __name__,
            "cache": property(lambda self: getattr(self, CACHE_NAME)),
        },
    )


def loss_fields(loss: Any, U: Any = None) -> dict[str, Any]:
    """The fields of :class:`CauchyLMOutput` a training loss fills (and ``U``'s, when given).

    Args:
        loss: the :class:`cauchylin.losses.CausalLMLoss` ``(total, cls, reg)`` of
            :func:`cauchylin_hf.loss.shifted_causal_loss`.
        U: the :class:`~cauchylin.CauchyVector` ``U`` of every position, kept where no
            distributions are returned, or None.

    Returns:
        ``{"loss": ..., "cls_loss": ..., "reg_loss": ..., "cls_count": ..., "reg_count": ...}``
        (and ``loc_U``, ``scale_U``).

    Example:
        >>> import torch
        >>> from cauchylin.losses import CausalLMLoss, OvRLoss, RegLoss
        >>> cls = OvRLoss(torch.tensor(2.0), torch.tensor([2.0, 0.0]), torch.tensor(1))
        >>> reg = RegLoss(torch.tensor(0.5), torch.tensor([0.0, 0.5]), torch.tensor(1))
        >>> fields = loss_fields(CausalLMLoss(torch.tensor(2.05), cls, reg))
        >>> fields["loss"], fields["cls_loss"], sorted(fields)
        (tensor(2.0500), tensor(2.), ['cls_count', 'cls_loss', 'loss', 'reg_count', 'reg_loss'])
    """
    fields: dict[str, Any] = {
        "loss": loss.total,
        "cls_loss": loss.cls.mean,
        "reg_loss": loss.reg.mean,
        "cls_count": loss.cls.count,
        "reg_count": loss.reg.count,
    }
    if U is not None:
        fields.update(loc_U=U.loc, scale_U=U.scale)
    return fields


def distribution_fields(U: Any, act: Any) -> dict[str, Any]:
    """The fields of :class:`CauchyLMOutput` the distributions of a mode fill.

    Args:
        U: the :class:`~cauchylin.CauchyVector` ``U`` of the kept positions.
        act: their :class:`cauchylin.nn.ActionOutput`.

    Returns:
        ``logits`` (``= loc_S``), ``loc_S``, ``scale_S``, ``loc_Y``, ``scale_Y``, ``loc_U``,
        ``scale_U``.

    Example:
        >>> import torch
        >>> from cauchylin import CauchyVector
        >>> from cauchylin.nn import Action
        >>> U = CauchyVector(torch.zeros(2, 3), torch.ones(2, 3))
        >>> fields = distribution_fields(U, Action(3, 5)(U))
        >>> fields["logits"] is fields["loc_S"], tuple(fields["scale_S"].shape)
        (True, (2, 5))
    """
    return {
        "logits": act.loc_S,
        "loc_S": act.loc_S,
        "scale_S": act.scale_S,
        "loc_Y": act.loc_Y,
        "scale_Y": act.scale_Y,
        "loc_U": U.loc,
        "scale_U": U.scale,
    }
