r"""The features ``z`` of a causal model and its individual ``U = Abduction(z)``.

What :meth:`~cauchylin_hf.model.CauchyLMForCausalLM.encode`,
:meth:`~cauchylin_hf.model.CauchyLMForCausalLM.encode_checked` and ``forward`` run below their
doors: the inputs travel as one :class:`EncoderInputs` record, :func:`check_inputs` checks them
once (a generation loop checks its prompt itself and skips it), and :func:`features` adds the
numeric embedding ``sign(v) ln(1 + |v|) w_num`` (and the ``<NUM>`` offset) to the token
embeddings and runs the backbone on them: its last hidden state, moved to the heads, is ``z``
(the base logits are never formed). :func:`individual` is ``U = Abduction(z)``, whose non-finite
result is reported with its cause.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from cauchylin import CauchyVector
from cauchylin._validation import check_finite, is_validating, require_tensor

from ._backbone import cached_positions, check_finite_weights, input_embedding_weight, token_inputs
from .batch import check_token_ids
from .hf_compat import CACHE_NAME

__all__ = ["EncoderInputs", "check_inputs", "features", "individual"]


class EncoderInputs(NamedTuple):
    """The inputs of one pass through the backbone (those of ``encode``, given once).

    Attributes:
        input_ids: ``[B, L]`` token ids, or None with ``inputs_embeds``.
        numeric_values: ``[B, L]`` values at ``<NUM>`` positions (0 elsewhere), or None.
        attention_mask: ``[B, L_past + L]`` 1 for tokens, 0 for padding, or None.
        cache: the backbone's KV cache, or None.
        use_cache: return the updated cache (None: the backbone's default).
        position_ids: ``[B, L]`` positions, or None (the backbone's default).
        inputs_embeds: ``[B, L, H]`` base embeddings instead of ``input_ids``, or None.

    Example:
        >>> import torch
        >>> EncoderInputs(torch.tensor([[5, 6]]), use_cache=False).use_cache
        False
    """

    input_ids: torch.Tensor | None
    numeric_values: torch.Tensor | None = None
    attention_mask: torch.Tensor | None = None
    cache: Any = None
    use_cache: bool | None = None
    position_ids: torch.Tensor | None = None
    inputs_embeds: torch.Tensor | None = None


def check_inputs(model: Any, inputs: EncoderInputs) -> None:
    """Refuse inputs the backbone cannot read, in one line each.

    Args:
        model: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM`.
        inputs: the :class:`EncoderInputs`.

    Raises:
        ValueError: neither or both of ``input_ids``/``inputs_embeds``, ids that are not
            ``[batch, seq]`` or lie outside the embedding rows, ``numeric_values`` of another
            shape (or, while validating, not finite), or more positions (cache included) than
            a base with learned position embeddings has.

    Example:
        >>> import torch
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
        >>> check_inputs(model, EncoderInputs(torch.tensor([[5, 6]]), torch.zeros(1, 3)))
        Traceback (most recent call last):
        ...
        ValueError: numeric_values shape (1, 3) must equal the input shape (1, 2)
    """
    input_ids, numeric_values, inputs_embeds = (
        inputs.input_ids,
        inputs.numeric_values,
        inputs.inputs_embeds,
    )
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("pass exactly one of input_ids or inputs_embeds")
    if inputs_embeds is None:
        assert input_ids is not None
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be [batch, seq], got {tuple(input_ids.shape)}")
        if is_validating():  # else an IndexError (a device assert on a GPU) names nothing
            check_token_ids(input_ids, int(input_embedding_weight(model).shape[0]))
        positions = tuple(input_ids.shape)
    else:
        positions = tuple(inputs_embeds.shape[:-1])
    limit = model.position_limit
    if limit is not None and not torch.compiler.is_compiling():
        cache = inputs.cache
        past = int(cache.get_seq_length()) if hasattr(cache, "get_seq_length") else 0
        if past + positions[1] > limit:
            raise ValueError(
                f"the sequence has {past + positions[1]} positions"
                f"{f' ({past} in the cache)' if past else ''}, more than the {limit} learned "
                "positions of the base (its max_position_embeddings): shorten the input"
            )
    if numeric_values is not None:
        if tuple(require_tensor("numeric_values", numeric_values).shape) != positions:
            raise ValueError(
                f"numeric_values shape {tuple(numeric_values.shape)} must equal the input "
                f"shape {positions}"
            )
        if is_validating() and numeric_values.is_floating_point():
            check_finite("numeric_values", numeric_values)


def features(
    model: Any, inputs: EncoderInputs, *, checked: bool = False, **kwargs: Any
) -> tuple[torch.Tensor, Any]:
    """The backbone on the numeric embeddings: ``(z [B, L, H] on the heads, the backbone output)``.

    Args:
        model: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM`.
        inputs: the :class:`EncoderInputs` (checked by :func:`check_inputs`, or by the caller).
        checked: the caller has checked the values (the embedding does not check them again).
        **kwargs: passed to the backbone (``output_hidden_states``, ...).

    Returns:
        ``(hidden in the heads' device and dtype, the backbone's output)``.

    Example:
        >>> import torch
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
        >>> hidden, out = features(model, EncoderInputs(torch.tensor([[5, 6]]), use_cache=False))
        >>> tuple(hidden.shape)
        (1, 2, 32)
    """
    input_ids, numeric_values = inputs.input_ids, inputs.numeric_values
    attention_mask, cache = inputs.attention_mask, inputs.cache
    inputs_embeds = inputs.inputs_embeds
    if inputs_embeds is None:
        inputs_embeds = model.get_input_embeddings()(input_ids)
    positions = tuple(inputs_embeds.shape[:-1])
    if numeric_values is None:
        # Zeros change nothing (phi(0) = 0 exactly) but keep w_num in every graph, so that
        # DDP/FSDP never meet an unused trainable parameter.
        numeric_values = torch.zeros(positions, device=inputs_embeds.device)
    mask = None
    if input_ids is not None and model.config.num_token_id is not None:
        mask = input_ids == model.config.num_token_id
    embeds = model.numeric_embedding(
        inputs_embeds, numeric_values, mask, validate_args=False if checked else None
    )
    kwargs.pop("num_items_in_batch", None)
    kwargs[CACHE_NAME] = cache
    if cache is not None and attention_mask is not None and cached_positions(cache) is None:
        # A recurrent state (Mamba) keeps no past positions: mask the fed ones only.
        attention_mask = attention_mask[:, -positions[1] :]
    for name, value in token_inputs(model.backbone, input_ids).items():
        kwargs.setdefault(name, value)  # per-layer token embeddings (Gemma 3n, Gemma 4)
    out = model.backbone(
        inputs_embeds=embeds,
        attention_mask=attention_mask,
        position_ids=inputs.position_ids,
        use_cache=inputs.use_cache,
        **kwargs,
    )
    hidden = out[0] if isinstance(out, tuple) else out.last_hidden_state
    # The heads sit with the input embedding; with a device map the last layer may not.
    weight = model.abduction.loc_net.weight
    return hidden.to(device=weight.device, dtype=weight.dtype), out


def individual(model: Any, hidden: torch.Tensor) -> CauchyVector:
    """``U = Abduction(z)`` on the heads' device.

    A non-finite ``U`` (Abduction's check) is reported with its cause: the first weight that is
    NaN or infinite (a training that diverged, a corrupt checkpoint), or, when every weight is
    finite, the decoder's activations.

    Args:
        model: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM`.
        hidden: ``[..., H]`` features.

    Returns:
        ``U`` ``[..., C]``.

    Raises:
        ValueError: a non-finite ``U``, with its cause.

    Example:
        >>> import torch
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
        >>> tuple(individual(model, torch.zeros(2, 32)).scale.shape)
        (2, 32)
        >>> individual(model, torch.full((1, 32), float("nan")))
        Traceback (most recent call last):
        ...
        ValueError: the decoder's hidden state holds NaN or infinite values although every weight is finite: ...
    """
    try:
        return model.abduction(hidden.to(model.abduction.loc_net.weight.device))
    except ValueError:  # on this error path only: what made U non-finite?
        check_finite_weights(model.named_parameters(), "the model")
        if not bool(hidden.isfinite().all()):
            name, value = max(
                ((n, float(p.detach().abs().max())) for n, p in model.named_parameters()),
                key=lambda item: item[1],
            )
            raise ValueError(
                "the decoder's hidden state holds NaN or infinite values although every "
                f"weight is finite: its activations overflowed (the largest weight, {name}, "
                f"reaches {value:.3g}: a training that diverged, a learning rate too high?)"
            ) from None
        raise
