r"""Autoregressive generation with the KV cache, in every inference mode, numbers written back.

:func:`generate` is a documented loop of our own, not HF's ``GenerationMixin.generate``: the next
token is chosen by the mode's token rule (``argmax_k P_k`` of the OvR probabilities, or
``softmax(loc_S / T)`` in compatible mode), and a chosen ``<NUM>`` carries a value, the regression
prediction ``loc_Y``, that becomes that position's numeric value for every later step.

One step, for a batch of ``B`` rows:

1. **Features.** The first step runs the whole (left-padded) prompt once (the prefill) with
   ``use_cache=True``; every later step runs only the token chosen last, with the cache
   (the KV cache), so a new token costs one incremental forward. ``position_ids`` are
   computed from the attention mask (``cumsum(mask) - 1``), so a left-padded prompt gives the
   same continuation as the same prompt unpadded. The input of a step is the token's embedding
   plus ``sign(v) ln(1 + |v|) w_num`` for its numeric value ``v`` (0 except at ``<NUM>``).
2. **Heads and choice.** :meth:`CauchyLMForCausalLM.step <cauchylin_hf.model.CauchyLMForCausalLM.step>`
   on the last position: ``U = Abduction(z_t)``, then :meth:`cauchylin.nn.Action.step`, the
   same code path as the layer's own outputs: the mode's decision input ``U'`` (its rule in
   :data:`cauchylin.nn.modes.MODE_TABLE`; the modes are described on the
   [Inference modes][inference-modes-page] page), the exact marginals ``loc_S = W_cls loc_U' + b_cls``,
   ``scale_S = |W_cls| scale_U'`` (``|W_cls|`` cached while the weights are unchanged) and
   ``loc_Y = W_reg loc_U' + b_reg``, and the mode's token rule: compatible mode samples
   ``softmax(loc_S / T)`` with ``top_k`` / ``top_p`` (greedy at ``T = 0``); every other mode
   takes ``argmax_k P_k`` with ``P_k = 1/2 + atan((loc_S_k - tau_k) / scale_S_k) / pi``, as the
   argmax of the standardised score ``(loc_S_k - tau_k) / scale_S_k``.
3. **Numbers.** When the choice is ``<NUM>`` (``config.num_token_id``) the row's new numeric value
   is ``loc_Y`` (rounded to float32), else 0. The decoded text writes it with the decimals its
   field had in the training data where the model's folder records them
   (:class:`cauchylin_hf.precision.NumberPrecision`, as the command line writes it), else as
   :func:`cauchylin_hf.numbers.format_number`, the shortest decimal that reads back to the same
   float32: ``4.5``, ``1000000``, ``1.5e+20``.
4. **Stopping.** A row stops after ``eos_token_id`` or after its decoded continuation contains a
   stop string; later positions of a stopped row hold the pad id (value 0, attention mask 0 in
   the output) while the other rows go on. The loop ends when every row stopped or after
   ``max_new_tokens``.

Sequence-level modes: ``shared_individual`` uses one ``eps_seed ~ Uniform(0, 1)^C`` per row and
``shared_noise`` one ``eps_noise ~ Cauchy(0, I)^C`` per row, drawn once before the first step (or
given) and reused at every step; :class:`GenerationOutput` returns the draw, so it can be replayed
on other prompts (a counterfactual: the same individual in another context).
"""

from __future__ import annotations

import logging
import operator
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from transformers import GenerationMixin

from cauchylin._validation import check_finite, is_validating
from cauchylin.nn.modes import STANDARD, Decoding
from cauchylin.nn.readouts import ReadoutContext

from ._backbone import cached_positions, check_finite_weights, whole_tensor
from .batch import check_token_ids, resolve_pad_token_id
from .heads_io import head_tensors
from .hf_compat import CACHE_NAME, takes_cache
from .precision import NumberPrecision
from .readout_context import readout_context
from .tokenizer import NumericTokenizer

__all__ = [
    "GenerationOutput",
    "NumericGenerationMixin",
    "PromptBatch",
    "check_length",
    "check_prompt_lengths",
    "generate",
    "position_ids_from_mask",
    "prepare_prompts",
]

logger = logging.getLogger(__name__)

_STEP_FIELDS = ("loc_S", "scale_S", "loc_Y", "scale_Y", "loc_U", "scale_U", "loc_U_prime")


@dataclass
class GenerationOutput:
    """What :func:`generate` returns.

    Attributes:
        sequences: ``[B, L + N]`` the (left-padded) prompt followed by the ``N`` generated ids;
            positions after a row stopped hold the pad id.
        numeric_values: ``[B, L + N]`` float32 values aligned with ``sequences`` (the prompt's
            values, then ``loc_Y`` at every generated ``<NUM>``, 0 elsewhere).
        attention_mask: ``[B, L + N]`` 1 for real tokens, 0 for padding (left padding of the
            prompt and the pad ids after a row stopped).
        prompt_length: ``L``.
        finished: ``[B]`` bool: the row stopped at EOS or a stop string (False: it ran out of
            ``max_new_tokens``).
        texts: per row, the decoded prompt and continuation with numbers written in (special
            tokens skipped), or None without a tokenizer: a text prompt's numbers keep their
            spelling; a generated number is written by the precision recorded in the model's
            folder (:meth:`cauchylin_hf.precision.NumberPrecision.of_model`: the decimals its
            field had in the training data), else as the shortest decimal of its float32
            value, the rule of the command line's ``generate``.
        new_texts: per row, the decoded continuation only (numbers written alike), or None
            without a tokenizer.
        eps_seed: ``[B, C]`` the draw of ``shared_individual`` (else None).
        eps_noise: ``[B, C]`` the draw of ``shared_noise`` (else None).
        steps: with ``return_distributions=True``, per-step parameters stacked over the steps:
            ``loc_S``/``scale_S`` ``[B, N, V]``, ``loc_Y``/``scale_Y`` ``[B, N]``,
            ``loc_U``/``scale_U``/``loc_U_prime`` ``[B, N, C]`` (``scale_S`` of the mode's ``U'``;
            in compatible mode that of the standard mode at ``T = 1``); else empty.

    Example:
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
        >>> model, ntok = CauchyLMForCausalLM.from_base(
        ...     tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True)
        >>> out = generate(model, ["3 eggs", "x = -4.5"], tokenizer=ntok, mode="causal",
        ...                max_new_tokens=3, eos_token_id=[], return_distributions=True)
        >>> out.prompt_length, tuple(out.sequences.shape), tuple(out.new_tokens.shape)
        (6, (2, 9), (2, 3))
        >>> out.attention_mask[1].tolist()  # "x = " + <NUM>: 5 ids, left-padded by 1
        [0, 1, 1, 1, 1, 1, 1, 1, 1]
        >>> out.finished.tolist(), tuple(out.steps["loc_S"].shape), out.eps_seed is None
        ([False, False], (2, 3, 301), True)
        >>> out.texts[1].startswith("x = -4.5"), len(out.new_texts)
        (True, 2)
    """

    sequences: torch.Tensor
    numeric_values: torch.Tensor
    attention_mask: torch.Tensor
    prompt_length: int
    finished: torch.Tensor
    texts: list[str] | None = None
    new_texts: list[str] | None = None
    eps_seed: torch.Tensor | None = None
    eps_noise: torch.Tensor | None = None
    steps: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def new_tokens(self) -> torch.Tensor:
        """``[B, N]`` the generated ids (pad ids after a row stopped)."""
        return self.sequences[:, self.prompt_length :]

    @property
    def new_values(self) -> torch.Tensor:
        """``[B, N]`` the numeric values of the generated positions."""
        return self.numeric_values[:, self.prompt_length :]


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that ignore left padding: ``cumsum(mask) - 1``, 1 at padded positions.

    Args:
        attention_mask: ``[B, L]`` 1 for tokens, 0 for padding.

    Returns:
        ``LongTensor [B, L]``.

    Example:
        >>> import torch
        >>> position_ids_from_mask(torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])).tolist()
        [[1, 1, 0, 1], [0, 1, 2, 3]]
    """
    pos = attention_mask.long().cumsum(-1) - 1
    return pos.masked_fill(attention_mask == 0, 1)


def _as_ids(x: Any, name: str) -> torch.Tensor:
    t = torch.as_tensor(x)
    if t.ndim == 1:
        t = t.unsqueeze(0)
    if t.ndim != 2 or t.shape[1] == 0 or t.dtype.is_floating_point or t.dtype == torch.bool:
        raise ValueError(f"{name} must be integer ids of shape [batch, seq], seq >= 1")
    return t.long()


def _eos_ids(model: Any, tokenizer: Any, eos_token_id: Any) -> list[int]:
    if eos_token_id is None:
        gen = getattr(model, "generation_config", None)
        eos_token_id = getattr(gen, "eos_token_id", None)
        if eos_token_id is None and tokenizer is not None:
            eos_token_id = getattr(tokenizer, "eos_token_id", None)
    if eos_token_id is None:
        return []
    if isinstance(eos_token_id, int):
        return [eos_token_id]
    return [int(e) for e in eos_token_id]


def _numeric_tokenizer(tokenizer: Any, model: Any) -> Any:
    if tokenizer is None or isinstance(tokenizer, NumericTokenizer):
        return tokenizer
    k = model.config.num_token_id
    return NumericTokenizer(tokenizer, num_token_id=k)


def _memory_bytes(device: torch.device) -> int | None:
    """Total memory of the device the model runs on (None where it cannot be read)."""
    try:
        if device.type == "cuda":
            return int(torch.cuda.get_device_properties(device).total_memory)
        if device.type == "cpu":
            return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError, RuntimeError):
        pass
    return None


def check_length(
    model: Any, batch: int, prompt_length: int, max_new_tokens: int, use_cache: bool = True
) -> None:
    """Refuse a generation that cannot run to ``max_new_tokens``; warn past the trained context.

    * A base with learned position embeddings (GPT-2; ``model.position_limit``) has no position
      beyond its table: a prompt plus ``max_new_tokens`` beyond it is refused up front.
    * A rotary (RoPE) base runs past ``config.max_position_embeddings`` with degrading quality:
      a warning, as transformers' ``generate`` gives.
    * A request whose token buffers and KV cache
      (``layers x 2 x kv_heads x head_dim x rows x tokens`` values) cannot fit in the device's
      memory is refused up front, rather than running until the machine runs out.

    Args:
        model: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM`.
        batch: rows ``B``.
        prompt_length: tokens of the longest prompt (its attention mask's sum).
        max_new_tokens: the requested new tokens.
        use_cache: whether a KV cache is kept.

    Raises:
        ValueError: ``max_new_tokens`` not an int ``>= 0``, beyond a learned-position base's
            context, or beyond the device's memory (the message names ``max_new_tokens`` and
            what fits).

    Example:
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("gpt2"), num_token_id=299)
        >>> check_length(model, 1, 200, 56)  # 256 positions: fits
        >>> check_length(model, 1, 200, 57)
        Traceback (most recent call last):
        ...
        ValueError: max_new_tokens=57 after a prompt of 200 tokens needs 257 positions; the base has 256 learned positions (max_position_embeddings): ask for at most 56 new tokens
    """
    if (
        isinstance(max_new_tokens, bool)
        or not isinstance(max_new_tokens, int)
        or max_new_tokens < 0
    ):
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    total = prompt_length + max_new_tokens
    limit = model.position_limit
    if limit is not None and total > limit:
        room = limit - prompt_length
        advice = f"ask for at most {room} new tokens" if room > 0 else "shorten the prompt"
        raise ValueError(
            f"max_new_tokens={max_new_tokens} after a prompt of {prompt_length} tokens needs "
            f"{total} positions; the base has {limit} learned positions "
            f"(max_position_embeddings): {advice}"
        )
    context = getattr(model.config, "max_position_embeddings", None)
    if limit is None and isinstance(context, int) and total > context:
        logger.warning(
            "generating up to %d positions, beyond the base's context of %d "
            "(max_position_embeddings): depending on the model, expect degraded text",
            total,
            context,
        )
    cfg = model.config
    layers, heads = cfg.num_hidden_layers, cfg.num_key_value_heads or cfg.num_attention_heads
    try:
        head_dim = cfg.head_dim or (
            cfg.hidden_size // cfg.num_attention_heads if cfg.num_attention_heads else None
        )
    except RuntimeError:  # a per-layer config (Gemma 4) has no global head_dim: no estimate
        head_dim = None
    itemsize = next(model.backbone.parameters()).element_size()
    per_token = 28  # sequences (int64), values (float32), two masks (int64)
    if use_cache and layers and heads and head_dim:
        per_token += 2 * layers * heads * head_dim * itemsize
    needed = batch * total * per_token
    device = next(model.parameters()).device
    available = _memory_bytes(device)
    if available is not None and needed > available:
        fits = max(available // (batch * per_token) - prompt_length, 0)
        raise ValueError(
            f"max_new_tokens={max_new_tokens}: {batch} row(s) of up to {total} tokens need about "
            f"{needed / 2**30:.3g} GiB of token buffers and KV cache, more than the "
            f"{available / 2**30:.3g} GiB of this {device.type} device; ask for at most about "
            f"{fits} new tokens"
        )


def _check_heads(model: Any, decoding: Decoding) -> None:
    """Refuse heads that are NaN or infinite (a training that diverged: they would pick token 0
    at every step), and a temperature whose noise scale ``T |b_noise|`` overflows the heads'
    dtype (it would surface as an internal tensor being infinite at the first step)."""
    check_finite_weights(head_tensors(model).items(), "the model")
    if decoding.runs.name == "causal" or not decoding.runs.temperature_scales_noise:
        return
    action = model.action
    t = decoding.temperature
    with torch.no_grad():  # whole_tensor: every process of a sharded generation runs this
        noise = whole_tensor(action.b_noise.detach()).abs().float()
        # the scales T |b_noise| reaches: U's, and S's and Y's through |W_cls| and |W_reg|
        spread = [noise.max()] + [
            (whole_tensor(layer.weight.detach()).abs().float() @ noise).max()
            for layer in (action.classifier, action.regressor)
        ]
        largest = float(torch.stack(spread).max())
    limit = torch.finfo(action.compute_dtype).max
    highest = limit / max(largest, 1.0)  # T itself is a number of that dtype too
    if t > highest:
        raise ValueError(
            f"temperature={t:g} is too large: T and the noise scales it multiplies (up to "
            f"{largest:.3g} T here, through |b_noise| and the heads) must fit "
            f"{str(action.compute_dtype).removeprefix('torch.')}, so T <= {highest:.3g}"
        )


def _all_finished(finished: torch.Tensor, synced: bool) -> bool:
    """Every row done: here, or (``synced``) in every process of the distributed group."""
    done = bool(finished.all())
    if not synced or not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return done
    # One all-reduce per step: the loop stops only when no process has a row left.
    left = torch.tensor([0 if done else 1], device=finished.device)
    torch.distributed.all_reduce(left, op=torch.distributed.ReduceOp.MAX)
    return int(left.item()) == 0


def check_prompt_lengths(model: Any, lengths: Sequence[int], *, first_index: int = 0) -> None:
    """Refuse a prompt that leaves no position for the token after it.

    The rule of every reader of a prompt's next token (:func:`generate`,
    :func:`cauchylin_hf.predict.predict_values`, the command line's ``predict`` and
    ``generate``): a prompt of ``n`` tokens needs ``n + 1`` positions, so with a context of
    ``max_position_embeddings`` positions it must hold fewer tokens than that. A base without
    ``max_position_embeddings`` (a recurrent decoder) has no such limit.

    Args:
        model: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM`.
        lengths: the tokens of each prompt (padding not counted).
        first_index: the index of ``lengths[0]`` among all prompts (a batch of a longer
            stream checked as it is read).

    Raises:
        ValueError: naming the first prompt that is too long (its index from 0), its length,
            the context, and how many prompts are that long.

    Example:
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("gpt2"), num_token_id=299)
        >>> check_prompt_lengths(model, [12, 255])  # 256 positions: room for one more token
        >>> check_prompt_lengths(model, [12, 256, 300])
        Traceback (most recent call last):
        ...
        ValueError: prompts[1] is 256 tokens long: the model's context of 256 positions (max_position_embeddings) leaves no room for the token after it; 2 of 3 prompts are that long: shorten them
    """
    context = getattr(model.config, "max_position_embeddings", None)
    if isinstance(context, bool) or not isinstance(context, int) or context <= 0:
        return
    over = [i for i, n in enumerate(lengths) if n >= context]
    if over:
        i = over[0]
        among = (
            f"{len(lengths)} prompts" if first_index == 0 else f"the {len(lengths)} read with it"
        )
        raise ValueError(
            f"prompts[{first_index + i}] is {lengths[i]} tokens long: the model's context of "
            f"{context} positions (max_position_embeddings) leaves no room for the token after "
            f"it; {len(over)} of {among} are that long: shorten them"
        )


@dataclass
class PromptBatch:
    """Prompts ready to generate from: left-padded, checked once, on the model's device.

    Attributes:
        input_ids: ``[B, L]`` ids inside the model's embedding rows.
        numeric_values: ``[B, L]`` float32 values (finite; 0 off ``<NUM>``).
        attention_mask: ``[B, L]`` int64, 1 for tokens, 0 for the left padding.
        mask_given: whether the mask came with the prompts (given, or from the tokenizer)
            rather than defaulting to ones.
        texts: the prompt texts, when the prompts came as text (their numbers' spellings are
            kept in the decoded output), else None.

    Example:
        >>> import torch
        >>> batch = PromptBatch(torch.tensor([[0, 5]]), torch.zeros(1, 2), torch.tensor([[0, 1]]))
        >>> batch.lengths.tolist()
        [1]
    """

    input_ids: torch.Tensor
    numeric_values: torch.Tensor
    attention_mask: torch.Tensor
    mask_given: bool = True
    texts: list[str] | None = None

    @property
    def lengths(self) -> torch.Tensor:
        """``[B]`` the tokens of each prompt (padding not counted)."""
        return self.attention_mask.sum(-1)


def _tensor_prompts(
    input_ids: Any, numeric_values: Any, attention_mask: Any, tokenizer: Any, device: torch.device
) -> PromptBatch:
    """The prompts as tensors on ``device``: text encoded with left padding, defaults filled."""
    if isinstance(input_ids, str) or (
        isinstance(input_ids, Sequence) and input_ids and isinstance(input_ids[0], str)
    ):
        if tokenizer is None:
            raise ValueError("text prompts need a tokenizer")
        if numeric_values is not None or attention_mask is not None:
            raise ValueError("text prompts carry their own numeric_values and attention_mask")
        texts = cast(list[str], [input_ids] if isinstance(input_ids, str) else list(input_ids))
        enc = tokenizer(texts, padding=True, padding_side="left", return_tensors="pt")
        batch = _tensor_prompts(
            enc["input_ids"], enc["numeric_values"], enc["attention_mask"], None, device
        )
        batch.texts = texts
        return batch
    ids = _as_ids(input_ids, "input_ids").to(device)
    B, L = ids.shape
    values = (
        torch.zeros(B, L, dtype=torch.float32, device=device)
        if numeric_values is None
        else torch.as_tensor(numeric_values, dtype=torch.float32, device=device).reshape(B, -1)
    )
    mask = (
        torch.ones(B, L, dtype=torch.long, device=device)
        if attention_mask is None
        else torch.as_tensor(attention_mask, device=device).long().reshape(B, -1)
    )
    return PromptBatch(ids, values, mask, mask_given=attention_mask is not None)


def prepare_prompts(
    model: Any,
    input_ids: torch.Tensor | Sequence[int] | str | Sequence[str],
    numeric_values: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    *,
    tokenizer: Any = None,
) -> PromptBatch:
    """The prompt batch of :func:`generate`: encoded, on the model's device, checked once.

    Text prompts are encoded with left padding (numbers as ``<NUM>`` with their values); id
    prompts get zeros as values and ones as mask by default. Everything the generation loop
    then trusts is checked here, once: the shapes, ids inside the embedding rows, finite values,
    no empty prompt, no right padding, and room for the next token
    (:func:`check_prompt_lengths`).

    Args:
        model: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM`.
        input_ids: ``[B, L]`` (or ``[L]``) prompt ids, left-padded; or, with a ``tokenizer``,
            a prompt text or a list of texts.
        numeric_values: ``[B, L]`` values of the ``<NUM>`` positions (default zeros).
        attention_mask: ``[B, L]`` 1 for tokens, 0 for left padding (default ones).
        tokenizer: a :class:`~cauchylin_hf.tokenizer.NumericTokenizer`, for text prompts.

    Returns:
        The :class:`PromptBatch`.

    Raises:
        ValueError: text prompts without a tokenizer or with their own values or mask, ids
            that are not integers ``[B, L]``, values or a mask of another shape, a prompt
            without any token, ids outside the embedding rows, non-finite values, a
            right-padded prompt, or a prompt as long as the model's context.

    Example:
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
        >>> model, ntok = CauchyLMForCausalLM.from_base(
        ...     tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True)
        >>> batch = prepare_prompts(model, ["3 eggs", "x = -4.5"], tokenizer=ntok)
        >>> batch.attention_mask[1].tolist(), batch.lengths.tolist()
        ([0, 1, 1, 1, 1, 1], [6, 5])
        >>> float(batch.numeric_values[1, -1])  # "-4.5" is one <NUM> with its value
        -4.5
    """
    device = next(model.parameters()).device
    batch = _tensor_prompts(input_ids, numeric_values, attention_mask, tokenizer, device)
    ids, values, mask = batch.input_ids, batch.numeric_values, batch.attention_mask
    if values.shape != ids.shape or mask.shape != ids.shape:
        raise ValueError(
            f"numeric_values {tuple(values.shape)} and attention_mask {tuple(mask.shape)} must "
            f"have the shape of input_ids {tuple(ids.shape)}"
        )
    if bool((mask.sum(-1) == 0).any()):
        raise ValueError("every prompt needs at least one token with attention_mask 1")
    check_token_ids(ids, int(model.get_input_embeddings().weight.shape[0]))
    if is_validating():
        check_finite("numeric_values", values)
    right_padded = (mask[:, -1] == 0).nonzero().flatten().tolist()
    if right_padded:
        raise ValueError(
            f"attention_mask ends in padding in rows {right_padded[:5]}: generation continues "
            "each row from its last position, so pad prompts on the left "
            "(NumericTokenizer(..., padding_side='left'))"
        )
    check_prompt_lengths(model, batch.lengths.tolist())
    return batch


def _generator(
    seed: int | None, generator: torch.Generator | None, device: torch.device
) -> torch.Generator | None:
    """The generator of every random draw: the given one, or a fresh one from ``seed``."""
    if seed is not None and generator is not None:
        raise ValueError("pass seed or generator, not both")
    if seed is None:
        return generator
    try:
        value = None if isinstance(seed, bool) else operator.index(seed)  # np.int64 too
    except TypeError:
        value = None
    if value is None or not 0 <= value < 2**64:
        raise ValueError(f"seed must be an int in [0, 2**64) (a torch.Generator's), got {seed!r}")
    return torch.Generator(device=device).manual_seed(value)


def _stop_strings(stop_strings: str | Sequence[str] | None, tokenizer: Any) -> list[str]:
    """The non-empty stop strings, as a list (they need a tokenizer to read the text)."""
    given = [stop_strings] if isinstance(stop_strings, str) else list(stop_strings or [])
    stops = [s for s in given if s]
    if stops and tokenizer is None:
        raise ValueError("stop_strings need a tokenizer to decode the continuation")
    return stops


def _stop_ids(
    model: Any, tokenizer: Any, eos_token_id: Any, batch: PromptBatch
) -> tuple[torch.Tensor, int]:
    """``(eos ids, pad id)``; warns, as transformers does, of a likely right-padded batch."""
    eos = _eos_ids(model, tokenizer, eos_token_id)
    gen_config = getattr(model, "generation_config", None)
    base_config = getattr(model.config, "base_config", None)
    pad = resolve_pad_token_id(tokenizer, gen_config, model.config, base_config, eos_token_id=eos)
    ids = batch.input_ids
    if not batch.mask_given and ids.shape[0] > 1 and bool((ids[:, -1] == pad).any()):
        # transformers' check: without a mask, a pad id at the end looks like right padding.
        logger.warning(
            "right-padding was detected (a prompt ends in the pad id %d and no attention_mask "
            "was given): generation continues each row from its last position; pad prompts "
            "on the left and pass their attention_mask",
            pad,
        )
    return torch.tensor(eos, dtype=torch.long, device=ids.device), pad


class _Rows:
    """The growing sequences of a generation: ids, values, masks, finished rows, records."""

    def __init__(self, batch: PromptBatch, keep_steps: bool) -> None:
        self.ids, self.values, self.prompts = batch.input_ids, batch.numeric_values, batch.texts
        self.mask = batch.attention_mask  # what the model attends to
        self.out_mask = batch.attention_mask.clone()  # 0 also after a row stopped
        self.prompt_length = batch.input_ids.shape[1]
        self.finished = torch.zeros(self.ids.shape[0], dtype=torch.bool, device=self.ids.device)
        self.records: dict[str, list[torch.Tensor]] | None = (
            {k: [] for k in _STEP_FIELDS} if keep_steps else None
        )
        self.own_end: int | None = None  # the length at which every row of this process was done

    def features(self, model: Any, past: Any, use_cache: bool) -> tuple[torch.Tensor, Any]:
        """The last position's features: the whole sequence (first step, or no cache kept),
        else only the newest token against the cache."""
        # A backbone that gives back no transformers cache (RWKV keeps its own state, OpenAI
        # GPT none) runs the whole sequence at every step, as use_cache=False does.
        if use_cache and past is not None:
            pos = position_ids_from_mask(self.mask)[:, -1:]
            ids, values = self.ids[:, -1:], self.values[:, -1:]
            hidden, past = model.encode_checked(ids, values, self.mask, past, True, pos)
        else:
            pos = position_ids_from_mask(self.mask)
            hidden, past = model.encode_checked(
                self.ids, self.values, self.mask, None, use_cache, pos
            )
        return hidden[:, -1], past

    def context(self, model: Any) -> ReadoutContext | None:
        """The last position's readout context, where the model has per-context readouts."""
        if not model.action.readouts.num_contexts:
            return None
        return readout_context(model, self.ids, self.values, self.mask, last=True)

    def advance(self, model: Any, decoding: Decoding, past: Any, use_cache: bool, pad: int) -> Any:
        """One step of every row: the next token and its value appended; returns the cache."""
        hidden, past = self.features(model, past, use_cache)
        U, step = model.step(
            hidden,
            decoding,
            return_distributions=self.records is not None,
            context=self.context(model),
        )
        self.append(U, step, pad)
        return past

    def append(self, U: Any, step: Any, pad: int) -> None:
        """Add the step's token and value (pad and 0 in stopped rows); keep its parameters."""
        if self.records is not None:
            for name, value in (
                ("loc_S", step.loc_S),
                ("scale_S", step.scale_S),
                ("loc_Y", step.loc_Y),
                ("scale_Y", step.scale_Y),
                ("loc_U", U.loc),
                ("scale_U", U.scale),
                ("loc_U_prime", step.U_prime.loc),
            ):
                self.records[name].append(value)
        nxt = step.ids.masked_fill(self.finished, pad)
        value = step.values.masked_fill(self.finished, 0.0)
        self.ids = torch.cat([self.ids, nxt[:, None]], dim=1)
        self.values = torch.cat([self.values, value[:, None]], dim=1)
        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], dim=1)
        self.out_mask = torch.cat([self.out_mask, (~self.finished).long()[:, None]], dim=1)

    def stop(self, eos: torch.Tensor, stops: list[str], tokenizer: Any) -> None:
        """Mark the rows that just made an eos id or whose continuation holds a stop string."""
        if eos.numel():
            self.finished |= torch.isin(self.ids[:, -1], eos)
        L = self.prompt_length
        for r in (~self.finished).nonzero().flatten().tolist() if stops else []:
            text = tokenizer.decode(
                self.ids[r, L:], self.values[r, L:], attention_mask=self.out_mask[r, L:]
            )
            self.finished[r] = any(s in text for s in stops)
        if self.own_end is None and bool(self.finished.all()):
            self.own_end = self.ids.shape[1]

    def output(self, model: Any, tokenizer: Any, decoding: Decoding) -> GenerationOutput:
        """The :class:`GenerationOutput`, without the steps run only to keep other processes
        company (``synced_gpus``); the texts written by the model's number precision."""
        end, L = self.own_end or self.ids.shape[1], self.prompt_length
        steps: dict[str, torch.Tensor] = {}
        if self.records is not None and end > L:
            steps = {k: torch.stack(v[: end - L], dim=1) for k, v in self.records.items()}
        out = GenerationOutput(
            sequences=self.ids[:, :end],
            numeric_values=self.values[:, :end],
            attention_mask=self.out_mask[:, :end],
            prompt_length=L,
            finished=self.finished,
            eps_seed=decoding.draws.get("eps_seed"),
            eps_noise=decoding.draws.get("eps_noise"),
            steps=steps,
        )
        if tokenizer is not None:  # the command line's rule: one home, NumberPrecision
            precision = NumberPrecision.of_model(model)
            written = [
                precision.write_generation(
                    out, r, self.prompts[r] if self.prompts else None, tokenizer
                )
                for r in range(out.sequences.shape[0])
            ]
            out.texts, out.new_texts = [w[0] for w in written], [w[1] for w in written]
        return out


@torch.no_grad()
def generate(
    model: Any,
    input_ids: torch.Tensor | Sequence[int] | str | Sequence[str],
    numeric_values: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    *,
    mode: str = STANDARD,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    max_new_tokens: int = 32,
    eos_token_id: int | Sequence[int] | None = None,
    stop_strings: str | Sequence[str] | None = None,
    tokenizer: Any = None,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    eps_seed: torch.Tensor | None = None,
    eps_noise: torch.Tensor | None = None,
    use_cache: bool = True,
    return_distributions: bool = False,
    synced_gpus: bool = False,
) -> GenerationOutput:
    r"""Generate a continuation of each prompt, with numbers (see the module docstring).

    Args:
        model: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM` (put in eval mode for the call).
        input_ids: ``[B, L]`` prompt ids, left-padded (a ``[L]`` row is one prompt; right
            padding is refused); or, with a ``tokenizer``, a prompt text or a list of texts
            (encoded with left padding, numbers as ``<NUM>`` with their values).
        numeric_values: ``[B, L]`` values of the prompt's ``<NUM>`` positions (0 elsewhere);
            default zeros.
        attention_mask: ``[B, L]`` 1 for tokens, 0 for (left) padding; default ones.
        mode: one of :data:`cauchylin.nn.MODES`: ``causal``, ``standard``, ``sampling``,
            ``compatible``, ``individual``, ``shared_individual``, ``shared_noise``.
        temperature: ``T >= 0`` (0: every mode but compatible is causal; compatible is greedy).
        top_k: compatible mode: keep the ``k`` largest logits.
        top_p: compatible mode: nucleus filtering.
        max_new_tokens: at most this many new tokens per row (>= 0).
        eos_token_id: id or ids that stop a row (default: the model's ``generation_config``,
            else the tokenizer's eos; none: rows stop only at ``max_new_tokens``).
        stop_strings: a string or strings; a row stops once its decoded continuation contains
            one (the text keeps it). Needs ``tokenizer``.
        tokenizer: a :class:`~cauchylin_hf.tokenizer.NumericTokenizer` (a plain HF tokenizer is
            wrapped with the model's ``<NUM>`` id) for text prompts, stop strings and the decoded
            texts.
        seed: seed of a fresh ``torch.Generator`` for every random draw (reproducible runs).
        generator: the ``torch.Generator`` to draw from (instead of ``seed``).
        eps_seed: ``shared_individual``: the draw, ``[C]`` (the same individual in every row) or
            ``[B, C]``, entries in ``(0, 1)``; default drawn once per row.
        eps_noise: ``shared_noise``: the draw, ``[C]`` or ``[B, C]``; default drawn once per row.
        use_cache: run one incremental forward per new token (True) or the whole sequence at
            every step (False; same result, slower; for checking).
        return_distributions: also return the per-step distribution parameters (``steps``).
        synced_gpus: keep stepping until every process of the ``torch.distributed`` group has
            finished (a sharded model gathers its parameters at every step, a collective that
            every process must join; transformers' option of the same name). A process whose
            rows are done runs the extra steps on padding and returns what it had.

    Returns:
        :class:`GenerationOutput`.

    Raises:
        ValueError: bad options (mode, temperature, ``top_k``, ``top_p``, ``max_new_tokens``,
            both ``seed`` and ``generator``, a ``seed`` outside ``[0, 2**64)``, a draw of the
            wrong shape, stop strings without a tokenizer), bad prompts
            (:func:`prepare_prompts`: a prompt as long as the model's context among them), head
            weights that are NaN or infinite (a training that diverged), a temperature whose
            noise scale ``T |b_noise|`` overflows the heads' dtype, or a length that cannot run
            (:func:`check_length`: past a learned-position base's context or the device's
            memory; past a RoPE base's context only warns). Without a mask, a pad id at the end
            of a prompt only logs a warning, as in transformers.

    Example:
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
        >>> out = generate(model, torch.tensor([[5, 299, 7]]), torch.tensor([[0.0, 2.5, 0.0]]),
        ...                mode="causal", max_new_tokens=4, eos_token_id=[])
        >>> tuple(out.sequences.shape), tuple(out.new_values.shape)
        ((1, 7), (1, 4))
    """
    # The doors: every option and the prompts checked once; the loop below trusts them.
    device = next(model.parameters()).device
    generator = _generator(seed, generator, device)
    tokenizer = _numeric_tokenizer(tokenizer, model)
    stops = _stop_strings(stop_strings, tokenizer)
    batch = prepare_prompts(model, input_ids, numeric_values, attention_mask, tokenizer=tokenizer)
    rows = batch.input_ids.shape[0]
    check_length(model, rows, int(batch.lengths.max()), max_new_tokens, use_cache)
    action = model.action
    decoding = Decoding.for_rows(
        mode,
        temperature,
        rows=rows,
        size=action.causal_size,
        top_k=top_k,
        top_p=top_p,
        generator=generator,
        eps_seed=eps_seed,
        eps_noise=eps_noise,
        device=device,
        dtype=action.compute_dtype,
    )
    _check_heads(model, decoding)
    eos_ids, pad = _stop_ids(model, tokenizer, eos_token_id, batch)

    # The loop: one token per row and step, its value fed back at the next step.
    state, past, was_training = _Rows(batch, return_distributions), None, model.training
    model.eval()
    try:
        for _ in range(max_new_tokens):
            past = state.advance(model, decoding, past, use_cache, pad)
            state.stop(eos_ids, stops, tokenizer)
            if _all_finished(state.finished, synced_gpus):
                break
    finally:
        model.train(was_training)
    return state.output(model, tokenizer, decoding)


class NumericGenerationMixin(GenerationMixin):
    """transformers' ``generate`` with the prompt's numbers (mixed into the causal model).

    transformers' own loop decodes in the compatible mode (``loc_S`` as logits) and knows nothing
    of ``loc_Y``; :func:`generate` is the loop of every mode, with numbers fed back.

    Example:
        >>> import torch
        >>> from cauchylin_hf import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> model = CauchyLMForCausalLM.from_base(tiny_base_model(), num_token_id=299).eval()
        >>> ids = torch.tensor([[5, 299, 7]])
        >>> out = model.generate(ids, numeric_values=torch.tensor([[0.0, 2.5, 0.0]]),
        ...                      max_new_tokens=3, do_sample=False, pad_token_id=0)
        >>> tuple(out.shape)
        (1, 6)
    """

    def _prepare_cache_for_generation(
        self, generation_config: Any, *args: Any, **kwargs: Any
    ) -> Any:
        """transformers' hook that gives ``generate`` its cache; uncached where none fits.

        A backbone that does not take the release's cache keyword (a recurrent decoder before
        transformers 5.24, whose state is ``cache_params``) is given no cache and this call of
        ``generate`` runs uncached (``use_cache`` off in its own copy of the generation config):
        the default cache would be built from the base's config, of recurrent layers only, which
        ``generate`` cannot read a length off, and with ``use_cache`` on it would feed one token
        a step to a model that keeps no state. Uncached decoding gives the same tokens.
        """
        if not takes_cache(cast(Any, self).backbone):
            generation_config.use_cache = False
            return None
        # Typed as Any: the hook's annotated self differs between transformers releases.
        parent: Any = super()
        return parent._prepare_cache_for_generation(generation_config, *args, **kwargs)

    def prepare_inputs_for_generation(
        self,
        input_ids: torch.LongTensor,
        *args: Any,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Inputs of one step of transformers' ``generate`` (compatible mode), with the prompt's numbers.

        ``generate`` keeps the ``numeric_values`` given for the prompt (``[B, P]``) while the
        sequence grows to ``P + t`` positions and, with a KV cache, only the last ones are fed.
        This pads the values with zeros for the generated positions and slices them like the fed
        inputs. A prompt given as ``inputs_embeds`` (``generate(inputs_embeds=...)``) is fed at
        the first step; its ``<NUM>`` offset is not added, since that needs the ids. A generated
        ``<NUM>`` is fed back with value 0, since transformers' loop knows nothing of
        ``loc_Y``; :func:`cauchylin_hf.generation.generate` feeds back the predicted number.

        Args:
            input_ids: ``[B, P + t]`` the prompt and the tokens generated so far (``[B, t]``, the
                generated tokens only, when the prompt came as ``inputs_embeds``).
            *args: transformers' further positional arguments (passed on).
            inputs_embeds: ``[B, P, H]`` the prompt's base embeddings, or None (a named
                argument: ``generate`` accepts ``inputs_embeds`` only from models that name it).
            **kwargs: the model kwargs of ``generate`` (``numeric_values`` ``[B, P]``, the cache,
                ...).

        Returns:
            The keyword arguments of the model's ``forward`` for this step.

        Raises:
            ValueError: if ``numeric_values`` is not ``[B, P]`` with ``P`` at most the sequence
                length.

        Example:
            >>> import torch
            >>> from cauchylin_hf import CauchyLMForCausalLM
            >>> from cauchylin_hf.testing import tiny_base_model
            >>> model = CauchyLMForCausalLM.from_base(tiny_base_model(), num_token_id=299).eval()
            >>> step = model.prepare_inputs_for_generation(
            ...     torch.tensor([[5, 299, 7, 11, 12]]), numeric_values=torch.tensor([[0.0, 2.5, 0.0]])
            ... )
            >>> step["numeric_values"]
            tensor([[0.0000, 2.5000, 0.0000, 0.0000, 0.0000]])
        """
        numeric_values = kwargs.pop("numeric_values", None)
        # Typed as Any: GenerationMixin's annotations of self and of the cache argument differ
        # between transformers releases, and this passes everything on unchanged.
        parent: Any = super()
        model_inputs: dict[str, Any] = parent.prepare_inputs_for_generation(
            input_ids, *args, inputs_embeds=inputs_embeds, **kwargs
        )
        if numeric_values is None:
            return model_inputs
        if not isinstance(numeric_values, torch.Tensor) or numeric_values.dim() != 2:
            raise ValueError(
                "numeric_values must be a [batch, prompt length] tensor, got "
                f"{getattr(numeric_values, 'shape', type(numeric_values).__name__)}"
            )
        step_ids = model_inputs.get("input_ids")
        fed_inputs = step_ids if step_ids is not None else model_inputs["inputs_embeds"]
        B, fed = fed_inputs.shape[:2]
        # The whole sequence so far: the cached positions plus the fed ones (the ids alone miss
        # a prompt given as inputs_embeds).
        cache: Any = model_inputs.get(CACHE_NAME)
        seen = cached_positions(cache)
        if seen is None:  # a recurrent state (Mamba) keeps no positions: the ids hold them all
            seen = input_ids.shape[1] - fed
        total = seen + fed
        if numeric_values.shape[0] != B or numeric_values.shape[1] > total:
            raise ValueError(
                f"numeric_values shape {tuple(numeric_values.shape)} does not fit the inputs: "
                f"expected [{B}, at most {total}] (the prompt's length)"
            )
        # Only the fed positions: the prompt's values that fall among them, zeros after them
        # (with a KV cache that is one zero per step, not a copy of the whole prompt).
        known = numeric_values[:, total - fed :]
        if known.shape[1] < fed:
            known = torch.cat([known, known.new_zeros(B, fed - known.shape[1])], dim=1)
        model_inputs["numeric_values"] = known
        return model_inputs
