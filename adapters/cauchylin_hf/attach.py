r"""Attaching the causal heads to a base decoder: from the base itself, or from a heads-only folder.

Both routes run the same sequence (:func:`from_base`, :func:`from_heads`):

1. **The decoder.** Load the base (a folder through ``AutoModelForCausalLM``, or a loaded causal
   LM, taken over rather than copied), split it into its decoder and its language-model head
   (:func:`cauchylin_hf._backbone.split_causal_lm`), and give the decoder its own config object,
   so that resizing never edits the base's.
2. **The ``<NUM>`` row.** When ``<NUM>`` is not a row of the embedding yet, add it (the mean row,
   and the mean head row in the copied head); a heads-only folder carries the rows it added.
3. **The model.** Build the model class on the decoder with a
   :class:`~cauchylin_hf.config.CauchyLMConfig`, then fill the heads: from the base head
   (``W_cls``, ``b_cls``; ``loc_S`` equals the base logits, see
   [Initialisation][initialisation-that-reproduces-the-base-model]) or from the
   heads file (after checking that the base is the one the heads were saved with,
   :func:`cauchylin_hf.heads_io.base_mismatches`).
4. **The finish.** The base's generation config, the heads on the input embedding's device, eval
   mode.

The model class is passed in (:meth:`CauchyLMForCausalLM.from_base
<cauchylin_hf.model.CauchyLMForCausalLM.from_base>` passes its own): this module sits below
:mod:`cauchylin_hf.model` and never imports it.
"""

from __future__ import annotations

import copy
import logging
import math
import os
from typing import Any, cast

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as hf_init
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

from cauchylin.nn import Abduction, Action, NumericEmbedding

from ._backbone import (
    grow_embeddings,
    head_matrix,
    input_embedding_weight,
    load_base,
    load_tokenizer,
    resolve_num_token,
    split_causal_lm,
    warn_logit_postprocessing,
)
from .batch import check_size
from .config import CAUSAL_SETTINGS, CauchyLMConfig
from .heads_io import HEADS_CONFIG_NAME, HEADS_WEIGHTS_NAME, base_mismatches, read_heads
from .tokenizer import NumericTokenizer

__all__ = ["from_base", "from_heads", "init_heads", "resize_rows"]

logger = logging.getLogger(__name__)


def _flagged(t: torch.Tensor) -> bool:
    """True when transformers marked ``t`` as loaded/initialised (``_is_hf_initialized``)."""
    return bool(getattr(t, "_is_hf_initialized", False))


@torch.no_grad()
def init_heads(model: PreTrainedModel, module: nn.Module) -> None:
    """Initialise one head module of ``model`` as documented, leaving loaded tensors alone.

    The model's ``_init_weights`` calls this for every module transformers has not marked as
    loaded. For code outside transformers it skips every module whose *own* parameters are all
    loaded, containers without parameters included, so each head tensor is initialised at the
    module that holds it: the two ``nn.Linear`` of ``abduction`` (identity ``loc_net``,
    constant-scale ``scale_net``: the values of a fresh Abduction), ``classifier`` (``W_cls`` =
    the input embedding rows, a tied base's head, until ``from_base`` copies the real head;
    ``b_cls = 0``) and ``regressor`` (``W_reg ~ N(0, 1/C)``, ``b_reg = 0``) of ``action``,
    ``action`` itself (``b_noise``, thresholds) and ``numeric_embedding`` (a fresh ``w_num``,
    ``delta = 0``). Every write goes through ``transformers.initialization`` (or checks
    ``_is_hf_initialized`` first), so a loaded tensor is never overwritten; the backbone is
    initialised by its own class.

    Args:
        model: the causal model (its ``abduction`` and ``action`` are looked up).
        module: the module transformers asks to initialise.

    Example:
        >>> import torch
        >>> from cauchylin_hf import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> model = CauchyLMForCausalLM.from_base(tiny_base_model(), num_token_id=299)
        >>> with torch.no_grad():
        ...     _ = model.action.regressor.bias.fill_(3.0)
        >>> init_heads(model, model.action.regressor)
        >>> model.action.regressor.bias.item()
        0.0
    """
    abduction = getattr(model, "abduction", None)
    action = getattr(model, "action", None)
    if isinstance(module, NumericEmbedding):
        # A fresh layer's draw, written through transformers' init (a loaded w_num is kept).
        fresh = NumericEmbedding(
            module.hidden_size,
            init=module.init,
            encoding=module.encoding,
            frequencies=1 if module.frequencies is None else module.frequencies.shape[0],
            sigma=module.sigma,
            dtype=torch.float64,
        )
        hf_init.copy_(module.w_num, fresh.w_num.detach().to(module.w_num.device))
        for name in ("frequencies", "periodic_weight"):
            mine, drawn = getattr(module, name), getattr(fresh, name)
            if mine is not None:
                hf_init.copy_(mine, drawn.detach().to(mine.device))
        if module.num_token_delta is not None:
            hf_init.zeros_(module.num_token_delta)
    elif isinstance(module, Abduction):
        _init_abduction_linear(module, module.loc_net)
        _init_abduction_linear(module, module.scale_net)
    elif isinstance(module, Action):
        hf_init.constant_(module.b_noise, module.b_noise_init)
        hf_init.constant_(module.threshold, module.threshold_init)
        _init_classifier(model, module)
        _init_regressor(module)
    elif isinstance(abduction, Abduction) and module in (abduction.loc_net, abduction.scale_net):
        _init_abduction_linear(abduction, module)
    elif isinstance(action, Action) and module is action.classifier:
        _init_classifier(model, action)
    elif isinstance(action, Action) and module is action.regressor:
        _init_regressor(action)


def _init_abduction_linear(abduction: Abduction, linear: nn.Module) -> None:
    ref = Abduction(
        abduction.in_features,
        abduction.causal_size,
        gamma_init=abduction.gamma_init,
        dtype=cast(torch.Tensor, linear.weight).dtype,
    )
    source = ref.loc_net if linear is abduction.loc_net else ref.scale_net
    weight, bias = cast(torch.Tensor, linear.weight), cast(torch.Tensor, linear.bias)
    hf_init.copy_(weight, source.weight.to(weight.device))
    hf_init.copy_(bias, source.bias.to(bias.device))


def _init_classifier(model: PreTrainedModel, action: Action) -> None:
    W = action.classifier.weight
    if not _flagged(W):
        emb = input_embedding_weight(model)
        hf_init.copy_(W, head_matrix(emb, None, W.shape[0], W.shape[1])[0])
    hf_init.zeros_(action.classifier.bias)


def _init_regressor(action: Action) -> None:
    hf_init.zeros_(action.regressor.bias)
    weight = action.regressor.weight
    if _flagged(weight):  # loaded: no draw (the generator's state stays as it was)
        return
    # Drawn on the CPU, as every head's draw is: the same seed gives the same W_reg whichever
    # device the base was loaded on (an in-place draw on a GPU would use the GPU's generator).
    drawn = torch.empty(weight.shape, dtype=weight.dtype).normal_(
        0.0, 1.0 / math.sqrt(action.causal_size)
    )
    hf_init.copy_(weight, drawn.to(weight.device))


def _decoder(
    base: str | os.PathLike | PreTrainedModel, base_kwargs: dict[str, Any] | None
) -> tuple[PreTrainedModel, str | None, PreTrainedModel, torch.Tensor, torch.Tensor | None]:
    """Step 1: ``(base model, its folder or None, decoder, head weight, head bias)``."""
    model_in, base_path = load_base(base, base_kwargs)
    backbone, head_w, head_b = split_causal_lm(model_in)
    # The decoder gets its own config object: resizing must not edit the base's config.
    backbone.config = copy.deepcopy(backbone.config)
    return model_in, base_path, backbone, head_w, head_b


def _finish(model: Any, source: PreTrainedModel) -> Any:
    """Step 4: the base's generation config, the heads beside the embedding, eval mode."""
    gen = getattr(source, "generation_config", None)
    if gen is not None:
        model.generation_config = copy.deepcopy(gen)
    model.place_heads()
    model.eval()
    return model


def from_base(
    model_class: type,
    base: str | os.PathLike | PreTrainedModel,
    tokenizer: Any = None,
    *,
    num_token: str = "<NUM>",
    num_token_id: int | None = None,
    return_tokenizer: bool = False,
    base_kwargs: dict[str, Any] | None = None,
    **settings: Any,
) -> Any:
    """Attach new causal heads to a base, initialised so that ``loc_S`` equals the base logits.

    The arguments and the result are those of :meth:`CauchyLMForCausalLM.from_base
    <cauchylin_hf.model.CauchyLMForCausalLM.from_base>`, which calls this with its own class.

    Args:
        model_class: the model class to build (``CauchyLMForCausalLM`` or a subclass).
        base: a local checkpoint folder or a loaded causal LM (taken over, not copied).
        tokenizer: None (the base folder's, if any), a folder, a tokenizer, a
            :class:`~cauchylin_hf.tokenizer.NumericTokenizer`, or False (none).
        num_token: the ``<NUM>`` token text.
        num_token_id: explicit ``<NUM>`` id (``< rows``: an existing/spare row; ``== rows``: a new
            row).
        return_tokenizer: also return the numeric tokenizer.
        base_kwargs: extra ``from_pretrained`` arguments for a base folder.
        **settings: :class:`~cauchylin_hf.config.CauchyLMConfig` causal settings.

    Returns:
        The model in eval mode, or ``(model, numeric_tokenizer)`` with ``return_tokenizer``.

    Raises:
        ValueError: as :meth:`CauchyLMForCausalLM.from_base
            <cauchylin_hf.model.CauchyLMForCausalLM.from_base>`.

    Example:
        >>> from cauchylin_hf import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> model = from_base(CauchyLMForCausalLM, tiny_base_model("gpt2"), num_token_id=300)
        >>> model.config.vocab_size  # GPT-2 has no spare row: <NUM> was added
        301
    """
    unknown = sorted(set(settings) - CAUSAL_SETTINGS)
    if unknown:
        raise ValueError(f"unknown settings {unknown}; known: {sorted(CAUSAL_SETTINGS)}")
    model_in, base_path, backbone, head_w, head_b = _decoder(base, base_kwargs)
    warn_logit_postprocessing(model_in)
    plain_tok, numeric_tok = load_tokenizer(tokenizer, base_path)
    rows = input_embedding_weight(backbone).shape[0]
    k = resolve_num_token(plain_tok, numeric_tok, rows, num_token, num_token_id)
    if k is not None and k >= rows:
        grow_embeddings(backbone, k + 1, head=model_in.get_output_embeddings())
    if numeric_tok is None and plain_tok is not None:
        numeric_tok = NumericTokenizer(plain_tok, num_token=num_token, num_token_id=k)
    if k is None:
        logger.warning(
            "no tokenizer and no num_token_id: the model has no <NUM> token (the regression "
            "loss is always 0)"
        )
    settings = dict(settings)
    if settings.get("ovr_classes") == "tokenizer" and settings.get("tokenizer_size") is None:
        if numeric_tok is None:
            raise ValueError("ovr_classes='tokenizer' needs a tokenizer (or tokenizer_size)")
        settings["tokenizer_size"] = len(numeric_tok)
    name = base_path or getattr(model_in, "name_or_path", None) or None
    config = CauchyLMConfig(
        base_config=backbone.config,
        base_model_name_or_path=name,
        base_vocab_size=rows,
        num_token=num_token,
        num_token_id=k,
        **settings,
    )
    model = model_class(config, backbone=backbone)
    action = model.action
    w, b = head_matrix(head_w, head_b, action.num_classes, action.causal_size)
    action.copy_base_head(w.to(action.classifier.weight.dtype), b.to(action.classifier.bias.dtype))
    if config.w_num_scale is not None:
        with torch.no_grad():  # |w_num| relative to the token embeddings (see the config)
            row_norm = input_embedding_weight(backbone).detach().float().norm(dim=1).mean()
            w_num = model.numeric_embedding.w_num
            w_num.mul_((config.w_num_scale * row_norm / w_num.float().norm()).to(w_num.dtype))
            periodic = model.numeric_embedding.periodic_weight
            if periodic is not None:  # its term starts at about unit norm, as w_num's
                periodic.mul_((config.w_num_scale * row_norm).to(periodic.dtype))
    _finish(model, model_in)
    return (model, numeric_tok) if return_tokenizer else model


def from_heads(
    heads_directory: str | os.PathLike,
    base: str | os.PathLike | PreTrainedModel | None = None,
    *,
    base_kwargs: dict[str, Any] | None = None,
    model_class: type | None = None,
    strict_base: bool = True,
) -> Any:
    """Load a heads-only folder (:func:`cauchylin_hf.heads_io.write_heads`) on an unchanged base.

    Args:
        heads_directory: the folder.
        base: the base checkpoint folder or loaded causal LM (its decoder is taken over, not
            copied, as in :func:`from_base`); default the ``base_model_name_or_path`` recorded in
            the folder.
        base_kwargs: extra ``AutoModelForCausalLM.from_pretrained`` arguments for a base folder.
        model_class: the class to build (default: the class registered for
            :class:`~cauchylin_hf.config.CauchyLMConfig`, ``CauchyLMForCausalLM``).
        strict_base: refuse a base whose weights differ from the recorded fingerprint (the
            default); ``False`` loads the heads anyway, with a warning.

    Returns:
        The model in eval mode; its outputs equal those of the saved model on the same base.

    Raises:
        ValueError: a folder that is not a valid heads-only folder (see
            :func:`cauchylin_hf.heads_io.read_heads`), no base given and none recorded, a base of
            another architecture, hidden size or vocabulary, a base whose weights differ from
            the saved one's (unless ``strict_base=False``), or head tensors that are missing or
            do not fit.

    Example:
        >>> import tempfile
        >>> from cauchylin_hf import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> base = tiny_base_model("gpt2")
        >>> model = CauchyLMForCausalLM.from_base(base, num_token_id=299)
        >>> folder = tempfile.mkdtemp()
        >>> _ = model.save_heads(folder)
        >>> from_heads(folder, base).config.num_token_id
        299
    """
    cls: Any = model_class or MODEL_FOR_CAUSAL_LM_MAPPING[CauchyLMConfig]
    heads = read_heads(heads_directory)
    meta_file = heads.folder / HEADS_CONFIG_NAME
    if base is None:
        base = heads.base_model_name_or_path
        if base is None:
            raise ValueError("no base given and none recorded in the heads folder: pass base=")
    model_in, base_path, backbone, _, _ = _decoder(base, base_kwargs)
    try:
        saved = CauchyLMConfig.from_dict(heads.config)
    except (TypeError, ValueError, KeyError) as exc:
        raise ValueError(f"{meta_file}: the stored config is not valid: {exc}") from exc
    saved_type = getattr(saved.base_config, "model_type", None)
    rows = input_embedding_weight(backbone).shape[0]
    got = backbone.config
    if (
        got.model_type != saved_type
        or got.hidden_size != saved.hidden_size
        or rows != heads.base_vocab_size
    ):
        raise ValueError(
            f"the base ({got.model_type}, hidden {got.hidden_size}, {rows} rows) is not the one "
            f"the heads were saved for ({saved_type}, hidden {saved.hidden_size}, "
            f"{heads.base_vocab_size} rows)"
        )
    mismatches = base_mismatches(heads, backbone, rows)
    if mismatches:
        listing = "; ".join(mismatches[:5]) + ("; ..." if len(mismatches) > 5 else "")
        message = (
            f"the base differs from the one the heads in {heads.folder} were saved with "
            f"({len(mismatches)} tensor(s): {listing})"
        )
        if strict_base:
            raise ValueError(f"{message}; pass strict_base=False to load them anyway")
        logger.warning("%s; loading anyway (strict_base=False)", message)
    weights_file = heads.folder / HEADS_WEIGHTS_NAME
    vocab = saved.vocab_size
    assert vocab is not None  # the saved config has a base config
    if vocab > rows:
        extra = heads.extra_rows
        if extra is None or extra.shape[0] != vocab - rows:
            raise ValueError(f"{weights_file} lacks the {vocab - rows} added embedding rows")
        grow_embeddings(backbone, vocab)
        with torch.no_grad():
            weight = input_embedding_weight(backbone)
            weight[rows:] = extra.to(weight.dtype)
    stored = {k: v for k, v in heads.config.items() if k != "base_config"}
    config = CauchyLMConfig.from_dict({**stored, "base_config": backbone.config.to_dict()})
    config.base_config = backbone.config
    if base_path is not None:
        config.base_model_name_or_path = base_path
    model = cls(config, backbone=backbone)
    device = input_embedding_weight(backbone).device
    missing, unexpected = model.load_state_dict(
        {k: v.to(device) for k, v in heads.state.items()}, strict=False
    )
    head_missing = [k for k in missing if not k.startswith("backbone.")]
    if config.readout_contexts == 0:
        # Heads saved before the per-context readouts existed: an empty table is what they had.
        head_missing = [k for k in head_missing if not k.startswith("action.readouts.")]
    if head_missing or unexpected:
        raise ValueError(
            f"{weights_file} does not fit the model: missing {head_missing[:5]}, unexpected "
            f"{list(unexpected)[:5]}"
        )
    return _finish(model, model_in)


def resize_rows(
    model: Any,
    new_num_tokens: int | None = None,
    pad_to_multiple_of: int | None = None,
    mean_resizing: bool = True,
) -> nn.Embedding:
    """Resize the model's token embedding, and its OvR classes when ``ovr_classes="all"``.

    New embedding rows and new ``W_cls`` rows are the mean of the existing ones (not a random
    draw, unlike transformers' ``mean_resizing``); new ``b_cls`` entries the mean bias; new
    per-class thresholds the initial threshold. Shrinking drops the last rows. The model's
    ``resize_token_embeddings`` calls this.

    Args:
        model: the causal model.
        new_num_tokens: the new number of rows (None: only ``pad_to_multiple_of``).
        pad_to_multiple_of: round the size up to a multiple of this.
        mean_resizing: new rows = mean rows (True) or transformers' default init (False).

    Returns:
        The new input embedding module.

    Raises:
        ValueError: ``new_num_tokens`` or ``pad_to_multiple_of`` that is not a positive int
            (or None), a size below the ``<NUM>`` id or below ``tokenizer_size``.

    Example:
        >>> from cauchylin_hf import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> model = CauchyLMForCausalLM.from_base(tiny_base_model(), num_token_id=299)
        >>> resize_rows(model, 320).weight.shape[0], model.action.num_classes
        (320, 320)
    """
    check_size("new_num_tokens", new_num_tokens)
    check_size("pad_to_multiple_of", pad_to_multiple_of)
    rows = input_embedding_weight(model).shape[0]
    target = rows if new_num_tokens is None else new_num_tokens
    if pad_to_multiple_of is not None:
        target = -(-target // pad_to_multiple_of) * pad_to_multiple_of
    k = model.config.num_token_id
    if k is not None and target <= k:
        raise ValueError(f"cannot shrink to {target} rows: <NUM> has id {k}")
    size = model.config.tokenizer_size
    if model.config.ovr_classes == "tokenizer" and size is not None and target < size:
        raise ValueError(f"cannot shrink below tokenizer_size={size}")
    grow_embeddings(model.backbone, target, mean_resizing=mean_resizing)
    if model.config.ovr_classes == "all":
        model.action.resize_classes(target)
    return cast(nn.Embedding, model.get_input_embeddings())
