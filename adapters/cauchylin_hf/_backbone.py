"""The base decoder: loading a base and its tokenizer, splitting off its head, the ``<NUM>`` row.

Used by :mod:`cauchylin_hf.model` (``from_base``, resizing), :mod:`cauchylin_hf.heads_io` (loading
heads onto a base) and :mod:`cauchylin_hf.verify`; it imports none of them.

* :func:`load_base` / :func:`load_tokenizer`: a checkpoint folder or a loaded object; a folder
  whose config does not describe its weights, whose weights were not all found, or that holds
  NaN or infinite weights (:func:`check_finite_weights`) is refused;
* :func:`split_causal_lm`: the decoder and the language-model head of a causal LM (the
  architecture check: the decoder must be what ``AutoModel`` builds from its config, the head a
  linear map of its last hidden state), with a linear logit scale (:data:`LOGIT_SCALE`) folded
  into the head;
* :func:`resolve_num_token`: the ``<NUM>`` id (explicit, in the vocabulary, or the first spare
  embedding row ``len(tokenizer)``);
* :func:`grow_embeddings` and :func:`head_matrix`: an added ``<NUM>`` row (the mean row) in the
  embedding and in the copied head.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import os
import struct
from collections.abc import Iterable
from typing import Any, cast

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.models.auto.modeling_auto import MODEL_MAPPING

from cauchylin._validation import integer

from .config import CauchyLMConfig
from .hf_compat import CONFIG_ERRORS
from .tokenizer import NumericTokenizer, load_tokenizer_folder

__all__ = [
    "LOGIT_POSTPROCESSING",
    "LOGIT_SCALE",
    "ZERO_ROW_FILL",
    "cached_positions",
    "check_finite_weights",
    "check_loaded_weights",
    "grow_embeddings",
    "head_matrix",
    "input_embedding_weight",
    "learned_position_limit",
    "load_base",
    "load_tokenizer",
    "logit_scale",
    "resolve_num_token",
    "split_causal_lm",
    "token_inputs",
    "warn_logit_postprocessing",
    "whole_tensor",
]

logger = logging.getLogger(__name__)

_LOAD_ERRORS: tuple[type[Exception], ...] = (OSError, ValueError, KeyError, *CONFIG_ERRORS)

LOGIT_POSTPROCESSING = ("final_logit_softcapping", "logits_soft_cap", "output_logit_soft_cap")
"""Config attributes of bases that soft-cap their logits after the head,
``logits = c tanh(W z / c)`` (Gemma 2-4, VaultGemma, RecurrentGemma, xLSTM, NanoChat, ...): the cap
is not linear in ``z``, so ``loc_S = W z`` equals the logits before the cap, not after (the
greedy choices agree: ``tanh`` is increasing). :func:`warn_logit_postprocessing` logs it."""

LOGIT_SCALE: dict[str, tuple[str, bool]] = {
    "cohere": ("logit_scale", True),
    "cohere2": ("logit_scale", True),
    "cohere2_moe": ("logit_scale", True),
    "cohere_compass_text": ("logit_scale", True),
    "falcon_h1": ("lm_head_multiplier", True),
    "hyperclovax": ("logits_scaling", True),
    "granite": ("logits_scaling", False),
    "granite_swa": ("logits_scaling", False),
    "granitemoe": ("logits_scaling", False),
    "granitemoe_swa": ("logits_scaling", False),
    "granitemoehybrid": ("logits_scaling", False),
    "granitemoeshared": ("logits_scaling", False),
    "minicpm3": ("logits_scaling", False),
    "inkling_text": ("logits_mup_width_multiplier", False),
}
"""Bases that scale their logits by a constant after the head, by ``model_type``:
``(config attribute s, multiplied)``, the logits being ``s W z`` (multiplied) or ``W z / s``.
The same attribute name means either (Granite divides by ``logits_scaling``, HyperCLOVA X
multiplies), hence one entry per model type. :func:`split_causal_lm` folds the factor into the
head it returns, so ``loc_S`` equals these logits exactly."""

ZERO_ROW_FILL = 1e-9
"""Entries given to an all-zero head row so that its ``scale_S`` is positive (see
:func:`head_matrix`)."""


def input_embedding_weight(model: PreTrainedModel) -> torch.Tensor:
    """The input embedding matrix ``[rows, H]`` of a model or decoder.

    Args:
        model: a ``PreTrainedModel`` (``get_input_embeddings()`` gives an embedding module).

    Returns:
        Its ``weight`` (the parameter itself, not a copy).

    Example:
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> tuple(input_embedding_weight(tiny_base_model("qwen2")).shape)
        (300, 32)
    """
    return cast(torch.Tensor, model.get_input_embeddings().weight)


def warn_logit_postprocessing(model: PreTrainedModel) -> None:
    """Log a warning when the base soft-caps its logits (see :data:`LOGIT_POSTPROCESSING`).

    Args:
        model: the base causal LM.
    """
    for attr in LOGIT_POSTPROCESSING:
        if getattr(model.config, attr, None) not in (None, 0, 0.0):
            logger.warning(
                "%s soft-caps its logits (%s=%s): loc_S equals them before the cap, not after "
                "(the greedy choices agree)",
                type(model).__name__,
                attr,
                getattr(model.config, attr),
            )


def logit_scale(config: Any) -> float:
    """The constant a base multiplies its logits by after the head (1.0 for most bases).

    Args:
        config: the base causal LM's config.

    Returns:
        ``s`` for the bases of :data:`LOGIT_SCALE` that multiply by ``s``, ``1 / s`` for those
        that divide, else 1.0.

    Raises:
        ValueError: a scale attribute that is not a finite non-zero number.

    Example:
        >>> from transformers import GraniteConfig
        >>> logit_scale(GraniteConfig(logits_scaling=8.0))  # Granite divides its logits by it
        0.125
    """
    entry = LOGIT_SCALE.get(str(getattr(config, "model_type", "")))
    if entry is None:
        return 1.0
    attr, multiplied = entry
    value = getattr(config, attr, None)
    if value is None:
        return 1.0
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (math.isfinite(value) and value != 0)
    ):
        raise ValueError(f"{attr}={value!r} of the base config is not a finite non-zero number")
    return float(value) if multiplied else 1.0 / float(value)


def _decoder_of(model: PreTrainedModel) -> Any:
    """The decoder of a causal LM: ``model.base_model``, or (when a class's ``base_model_prefix``
    names no attribute, e.g. Llama 4's text model) its one child that is a ``PreTrainedModel``."""
    backbone = model.base_model
    if backbone is not model:
        return backbone
    found = [child for child in model.children() if isinstance(child, PreTrainedModel)]
    return found[0] if len(found) == 1 else model


def _prediction_head_layers(model: torch.nn.Module, head: torch.nn.Module) -> list[str]:
    """The other layers of the module that holds the output layer (BERT's ``cls.predictions``:
    ``transform``; RoBERTa's ``lm_head``: ``dense``, ``layer_norm``): empty when the output layer
    is not nested in such a prediction head."""
    name = next((n for n, m in model.named_modules() if m is head), "")
    if "." not in name:
        return []
    parent = model.get_submodule(name.rsplit(".", 1)[0])
    return [
        n
        for n, child in parent.named_children()
        if child is not head and any(True for _ in child.parameters())
    ]


def split_causal_lm(model: Any) -> tuple[PreTrainedModel, torch.Tensor, torch.Tensor | None]:
    """Split a loaded causal LM into its decoder and its head weights.

    Args:
        model: a ``PreTrainedModel`` loaded with ``AutoModelForCausalLM`` (e.g.
            ``Qwen2ForCausalLM``, ``GPT2LMHeadModel``).

    Returns:
        ``(backbone, head_weight [V, H], head_bias [V] or None)``: the decoder module (shared,
        not copied) and the language-model head's parameters; for a base that scales its logits
        by a constant ``s`` (:func:`logit_scale`) the head times ``s``, a copy, so that
        ``head_weight @ z + head_bias`` is the base's logits.

    Raises:
        ValueError: ``model`` is not a ``PreTrainedModel``, is an encoder-decoder, has no
            language-model head, no separate decoder, a decoder that ``AutoModel`` cannot
            rebuild from its config, a composite (multimodal) config, or a head that is not a
            linear map of the decoder's last hidden state (a prediction head with a transform
            before the output layer, a projection to another width).

    Example:
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> backbone, w, b = split_causal_lm(tiny_base_model("gpt2"))
        >>> type(backbone).__name__, tuple(w.shape), b is None
        ('GPT2Model', (300, 32), True)
    """
    name = type(model).__name__
    if isinstance(getattr(model, "config", None), CauchyLMConfig):
        raise ValueError(f"{name} is already a causal model; pass its base model")
    if not isinstance(model, PreTrainedModel):
        raise ValueError(f"base must be a transformers PreTrainedModel, got {name}")
    if getattr(model.config, "is_encoder_decoder", False):
        raise ValueError(f"{name} is an encoder-decoder model; a decoder-only causal LM is needed")
    head = model.get_output_embeddings()
    backbone = cast(PreTrainedModel, _decoder_of(model))
    if head is None or backbone is model:
        raise ValueError(
            f"{name} has no language-model head and separate decoder: load the base with "
            "AutoModelForCausalLM (e.g. Qwen2ForCausalLM, not Qwen2Model)"
        )
    hidden = getattr(backbone.config, "hidden_size", None)
    if not isinstance(hidden, int):
        raise ValueError(
            f"{name}'s decoder {type(backbone).__name__} has a composite config "
            f"({type(backbone.config).__name__}: the decoder's sizes are in its sub-configs, as "
            "in a multimodal model): not supported; load a text decoder alone"
        )
    weight = getattr(head, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.ndim != 2 or weight.shape[1] != hidden:
        shape = tuple(weight.shape) if isinstance(weight, torch.Tensor) else None
        raise ValueError(
            f"{name}'s output head is not a [vocab, {hidden}] linear map of the decoder's "
            f"hidden state (its weight: {shape})"
        )
    transform = _prediction_head_layers(model, head)
    if transform:
        raise ValueError(
            f"{name}'s output layer sits in a prediction head with other layers ({transform}): "
            "its logits are not a linear map of the decoder's last hidden state, which loc_S is"
        )
    bias = getattr(head, "bias", None)
    expected = MODEL_MAPPING.get(type(backbone.config), None)
    if expected is not type(backbone):
        raise ValueError(
            f"{name}'s decoder {type(backbone).__name__} is not what AutoModel builds from its "
            f"config ({type(backbone.config).__name__}); this architecture is not supported"
        )
    if backbone.get_input_embeddings() is None:
        raise ValueError(f"{name}'s decoder has no input embeddings")
    b = bias if isinstance(bias, torch.Tensor) else None
    scale = logit_scale(model.config)
    if scale != 1.0:
        with torch.no_grad():
            weight = weight.detach() * scale
            b = None if b is None else b.detach() * scale
    return backbone, weight, b


def cached_positions(cache: Any) -> int | None:
    """The number of positions a decoder's cache holds; None for a recurrent state.

    An attention cache (``DynamicCache`` of key/value layers) holds one entry per past position,
    and the attention mask of the next step covers them. A purely recurrent cache (Mamba,
    FalconMamba: a convolution and an SSM state, whose ``get_seq_length`` raises, or a cache
    class without it) holds none: there the mask of a step covers only the positions fed.

    Args:
        cache: the cache a decoder gave back (or None).

    Returns:
        ``cache.get_seq_length()``, 0 for None, or None when the cache tracks no positions.

    Example:
        >>> from transformers import DynamicCache
        >>> cached_positions(None), cached_positions(DynamicCache())
        (0, 0)
        >>> cached_positions(object()) is None  # a state without positions
        True
    """
    if cache is None:
        return 0
    get = getattr(cache, "get_seq_length", None)
    if get is None:
        return None
    try:
        return int(get())
    except ValueError:  # transformers: "can only be called on Attention layers"
        return None


def token_inputs(backbone: Any, input_ids: torch.Tensor | None) -> dict[str, Any]:
    """Decoder inputs computed from the token ids besides their embeddings.

    The adapter feeds the decoder ``inputs_embeds`` (the token embeddings plus the numbers'
    offsets). Gemma 3n and Gemma 4 also add a per-layer embedding of each token
    (``get_per_layer_inputs``): from ``inputs_embeds`` alone Gemma 3n leaves it out and Gemma 4
    recovers the ids by an exact match of the embedding, which a ``<NUM>`` value breaks. Such a
    decoder gets ``per_layer_inputs`` from the ids themselves, as its own ``input_ids`` path
    computes them.

    Args:
        backbone: the decoder.
        input_ids: ``[B, L]`` the token ids fed (None: only embeddings are known).

    Returns:
        ``{"per_layer_inputs": ...}`` for a decoder with per-layer embeddings, else ``{}``.

    Example:
        >>> import torch
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> token_inputs(tiny_base_model("qwen2").base_model, torch.tensor([[5, 6]]))
        {}
    """
    get = getattr(backbone, "get_per_layer_inputs", None)
    per_layer = getattr(getattr(backbone, "config", None), "hidden_size_per_layer_input", None)
    if input_ids is None or get is None or not per_layer:
        return {}
    # Gemma 4 before transformers 5.24 takes (input_ids, inputs_embeds), both required.
    if "inputs_embeds" in inspect.signature(get).parameters:
        return {"per_layer_inputs": get(input_ids, None)}
    return {"per_layer_inputs": get(input_ids)}


def _looks_like_path(s: str) -> bool:
    """True for strings that can only be a filesystem path (not a Hub name like ``org/model``)."""
    if os.path.isabs(s) or s.startswith((".", "~")) or s.count("/") > 1:
        return True
    return os.sep != "/" and os.sep in s


def check_finite_weights(tensors: Iterable[tuple[str, torch.Tensor]], source: str) -> None:
    """Refuse weights with a NaN or infinite entry, naming the first such tensor.

    Such weights make every output NaN (or every generated token the same), and the error would
    otherwise surface later, as an internal tensor being non-finite.

    Args:
        tensors: ``(name, tensor)`` pairs (e.g. ``model.named_parameters()``); tensors that are
            not floating point, or on the meta device (offloaded), are skipped; a sharded one
            is gathered (:func:`whole_tensor`, a collective).
        source: what they belong to (a folder, "the model"), named in the error.

    Raises:
        ValueError: a tensor holds NaN or an infinite value.

    Example:
        >>> import torch
        >>> check_finite_weights([("w", torch.ones(3))], "the model")  # fine: returns None
        >>> check_finite_weights([("b_noise", torch.tensor([float("nan")]))], "the model")
        Traceback (most recent call last):
        ...
        ValueError: the model: the weight b_noise holds NaN or infinite values (a training that diverged: a learning rate too high; or a corrupt checkpoint)
    """
    bad = [
        name for name, t in tensors if t.is_floating_point() and not t.is_meta and not _finite(t)
    ]
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise ValueError(
            f"{source}: the weight {bad[0]} holds NaN or infinite values{more} (a training that "
            "diverged: a learning rate too high; or a corrupt checkpoint)"
        )


def whole_tensor(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a sharded parameter (a ``DTensor``), else the tensor itself.

    Gathering a shard is a collective: every process of the mesh must call it at the same
    point, as every process of a sharded generation checks the heads at its start.

    Args:
        t: a tensor or a ``DTensor``.

    Returns:
        ``t.full_tensor()`` for a ``DTensor``, else ``t``.

    Example:
        >>> import torch
        >>> whole_tensor(torch.ones(2)).tolist()
        [1.0, 1.0]
    """
    full = getattr(t, "full_tensor", None)
    return cast(torch.Tensor, full()) if callable(full) else t


def _finite(t: torch.Tensor) -> bool:
    """``isfinite(t).all()`` in slices (no boolean copy of a whole embedding at once)."""
    flat = whole_tensor(t.detach()).reshape(-1)
    step = 1 << 24
    return all(bool(torch.isfinite(flat[i : i + step]).all()) for i in range(0, flat.numel(), step))


def _stored_sizes(folder: str) -> dict[str, int] | None:
    """``{tensor name: number of values}`` of a folder's safetensors weights, read from the file
    headers alone; None without safetensors weights, or with a header that cannot be read (the
    loader then names that)."""
    index = os.path.join(folder, "model.safetensors.index.json")
    try:
        if os.path.isfile(index):
            with open(index, encoding="utf-8") as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        elif os.path.isfile(os.path.join(folder, "model.safetensors")):
            files = ["model.safetensors"]
        else:
            return None
        sizes: dict[str, int] = {}
        for name in files:
            with open(os.path.join(folder, name), "rb") as fh:
                (length,) = struct.unpack("<Q", fh.read(8))
                if length > 100_000_000:
                    return None
                header = json.loads(fh.read(length))
            for key, entry in header.items():
                if key != "__metadata__":
                    sizes[key] = math.prod(int(n) for n in entry["shape"])
        return sizes
    except (OSError, ValueError, KeyError, TypeError, AttributeError, struct.error):
        return None


def _cauchylin_hint(path: str, names: Iterable[str], model_type: str) -> str:
    """A hint when a folder's config and weights are a cauchylin model's and a base's, mixed."""
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError, RecursionError):
        raw = None
    ours = any(n.startswith(("backbone.", "action.", "abduction.")) for n in names)
    if model_type == "cauchy_lm":
        return (
            ""
            if ours
            else "; these are not a cauchylin model's weights (no backbone.* or action.* "
            "tensors): the weights files are not the ones saved with this config.json"
        )
    if isinstance(raw, dict) and "base_config" in raw:
        return (
            '; its config.json holds a "base_config", as a cauchylin model\'s does: its '
            '"model_type" must be "cauchy_lm"'
        )
    if ours:
        return (
            "; the weights are a cauchylin model's (backbone.*, action.*): its config.json must "
            "be the one saved with them (model_type cauchy_lm), not its base's"
        )
    return ""


def check_loaded_weights(
    path: str,
    model: PreTrainedModel,
    info: dict[str, Any],
    stored: Iterable[str] | None = None,
    *,
    partial: bool = False,
) -> None:
    """Refuse a model loaded from a folder whose weights files do not fit its config.

    transformers initialises a weight that is missing from the files at random, drops one that
    the model has no place for, and only logs its load report: a folder whose ``config.json``
    was replaced by another model's (a cauchylin model's by its base's, or the reverse) would
    load as random numbers, and one whose layer count was lowered would silently lose layers.
    A weight the model has no place for is refused when it falls inside the model's own
    modules (``model.layers.5...`` for a model of 2 layers); one beside them (another task's
    head, a buffer of an older release) is left to transformers' report.

    Args:
        path: the folder (named in the error).
        model: the loaded model.
        info: transformers' loading info (``from_pretrained(..., output_loading_info=True)``).
        stored: the tensor names the files hold (for the message), when known.
        partial: accept some missing weights (they get the model's documented initialisation,
            as transformers gives them) and refuse only when none of the model's parameters
            was found: files that are not this model's at all.

    Raises:
        ValueError: a weight is missing (with ``partial``: every parameter is), or the files
            hold a weight inside the model's modules that it has no place for; the message
            names one, and a name the files hold.

    Example:
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> check_loaded_weights("base", tiny_base_model(), {"missing_keys": set()})  # fine
        >>> check_loaded_weights("base", tiny_base_model(), {"missing_keys": {"lm_head.weight"}})
        Traceback (most recent call last):
        ...
        ValueError: base: 1 weights of the qwen2 model its config.json describes are not in its weights files (e.g. 'lm_head.weight'), and would be random numbers
    """
    extra = sorted(k for k in info.get("unexpected_keys") or [] if _inside(model, k))
    if extra:
        raise ValueError(
            f"{path}: its weights files hold {len(extra)} weights that the "
            f"{model.config.model_type} model its config.json describes has no place for (e.g. "
            f"{extra[0]!r}), which would be dropped: the config does not describe these weights "
            "(a layer count or another size edited?)"
        )
    missing = sorted(info.get("missing_keys") or [])
    if not missing:
        return
    if partial and any(name not in missing for name, _ in model.named_parameters()):
        return
    found = sorted(info.get("unexpected_keys") or stored or [])
    other = f"; the files hold other names (e.g. {found[0]!r})" if found else ""
    raise ValueError(
        f"{path}: {len(missing)} weights of the {model.config.model_type} model its config.json "
        f"describes are not in its weights files (e.g. {missing[0]!r}), and would be random "
        f"numbers{other}{_cauchylin_hint(path, found, model.config.model_type)}"
    )


def _inside(model: torch.nn.Module, key: str) -> bool:
    """Whether an unexpected weight name points inside the model's own modules: at least two of
    its components name modules of the model (``model.layers`` of ``model.layers.5.mlp...``),
    with or without the ``base_model_prefix``."""
    if not key.endswith(".weight"):
        return False  # a buffer of another release (masked_bias, inv_freq)
    prefix = getattr(model, "base_model_prefix", "")
    for name in (key, f"{prefix}.{key}") if prefix else (key,):
        module, depth = model, 0
        for part in name.split(".")[:-1]:
            child = module._modules.get(part)
            if child is None:
                break
            module, depth = child, depth + 1
        if depth >= 2:
            return True
    return False


def _check_config_fits_weights(path: str, kwargs: dict[str, Any]) -> dict[str, int] | None:
    """Refuse, before anything is built, a folder whose ``config.json`` describes a model far
    larger than its weights files hold (a config edited by hand or written by another tool):
    transformers would build that model, with random weights, however large (a ``qwen2`` config
    without sizes is its 12B-parameter default). The model is laid out on the meta device
    (no memory) to count its parameters. Returns the stored sizes (None when unknown)."""
    sizes = _stored_sizes(path)
    if not sizes:
        return sizes
    remote = bool(kwargs.get("trust_remote_code", False))
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=remote)
    except _LOAD_ERRORS:
        return sizes  # the loader below names what is wrong with the config
    if getattr(config, "quantization_config", None) is not None:
        return sizes  # packed weights: their sizes are not the parameters'
    try:
        with torch.device("meta"):
            layout = AutoModelForCausalLM.from_config(config, trust_remote_code=remote)
    except Exception:  # a config transformers cannot build: the loader below says why
        return sizes
    expected = sum(p.numel() for p in layout.parameters())
    stored = sum(sizes.values())
    if expected > 2 * stored:
        raise ValueError(
            f"{path}: its config.json describes a {config.model_type} model of {expected:,} "
            f"parameters, but its weights hold {stored:,} values: the config does not belong "
            "to these weights (edited by hand, or written by another tool?), and loading would "
            f"build that model with random weights{_cauchylin_hint(path, sizes, config.model_type)}"
        )
    return sizes


def load_base(
    base: str | os.PathLike | PreTrainedModel, base_kwargs: dict[str, Any] | None
) -> tuple[PreTrainedModel, str | None]:
    """Load the base causal LM (a folder) or take it as it is (an object).

    A folder is checked before and after loading: its ``config.json`` must describe the model
    its weights files hold (a config far larger than the weights is refused before anything is
    built), every weight of that model must be in the files (transformers would initialise a
    missing one at random), and no weight may be NaN or infinite.

    Args:
        base: a checkpoint folder (read with ``AutoModelForCausalLM.from_pretrained``) or a
            loaded ``PreTrainedModel``.
        base_kwargs: extra ``from_pretrained`` arguments (folders only).

    Returns:
        ``(model, path)``: the causal LM and the folder (or Hub name) it came from, None for an
        object.

    Raises:
        ValueError: a folder that does not exist or does not hold a causal LM, a config that
            does not describe the weights (or fails its own validation), weights missing from
            the files or not finite, ``base_kwargs`` with an object, or another type.
    """
    if isinstance(base, (str, os.PathLike)):
        path = os.fspath(base)
        if not os.path.isdir(path) and _looks_like_path(path):
            raise ValueError(f"base checkpoint folder {path!r} does not exist")
        kwargs = {k: v for k, v in (base_kwargs or {}).items() if k != "output_loading_info"}
        sizes = _check_config_fits_weights(path, kwargs) if os.path.isdir(path) else None
        try:
            loaded = AutoModelForCausalLM.from_pretrained(path, output_loading_info=True, **kwargs)
        except _LOAD_ERRORS as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ValueError(
                f"could not load {path!r} with AutoModelForCausalLM (a decoder-only causal LM "
                f"checkpoint is needed): {first}"
            ) from exc
        model, info = cast(tuple[PreTrainedModel, dict[str, Any]], loaded)
        check_loaded_weights(path, model, info, sizes)
        check_finite_weights(model.named_parameters(), path)
        return model, path
    if isinstance(base, PreTrainedModel):
        if base_kwargs:
            raise ValueError("base_kwargs only apply when base is a checkpoint folder")
        return base, None
    raise ValueError(
        f"base must be a checkpoint folder or a PreTrainedModel, got {type(base).__name__}"
    )


def load_tokenizer(
    tokenizer: Any,
    base_path: str | None,
) -> tuple[PreTrainedTokenizerBase | None, NumericTokenizer | None]:
    """Resolve the ``tokenizer`` argument of ``from_base`` to (plain tokenizer, numeric one).

    Args:
        tokenizer: None (the base folder's tokenizer, if it has one), False (none), a folder, a
            ``PreTrainedTokenizerBase`` or a :class:`~cauchylin_hf.tokenizer.NumericTokenizer`.
        base_path: the base's folder (for ``tokenizer=None``).

    Returns:
        ``(plain tokenizer or None, numeric tokenizer or None)``.

    Raises:
        ValueError: a folder that does not exist or holds no tokenizer, or another type.
    """
    if tokenizer is False:
        return None, None
    if isinstance(tokenizer, NumericTokenizer):
        return tokenizer.tokenizer, tokenizer
    if isinstance(tokenizer, PreTrainedTokenizerBase):
        return tokenizer, None
    if isinstance(tokenizer, (str, os.PathLike)):
        path = os.fspath(tokenizer)
        if not os.path.isdir(path) and _looks_like_path(path):
            raise ValueError(f"tokenizer folder {path!r} does not exist")
        try:
            return load_tokenizer_folder(path), None
        except (OSError, TypeError) as exc:
            raise ValueError(f"could not load a tokenizer from {path!r}: {exc}") from exc
    if tokenizer is None:
        if base_path is None or not os.path.isdir(base_path):
            return None, None
        files = os.listdir(base_path)
        if not any(f.startswith(("tokenizer", "vocab", "spiece")) for f in files):
            return None, None
        try:
            return load_tokenizer_folder(base_path), None
        except (OSError, ValueError, TypeError) as exc:
            logger.warning("no usable tokenizer in %s (%s); continuing without one", base_path, exc)
            return None, None
    raise ValueError(
        "tokenizer must be None, False, a folder, a PreTrainedTokenizerBase or a NumericTokenizer, "
        f"got {type(tokenizer).__name__}"
    )


def resolve_num_token(
    tokenizer: PreTrainedTokenizerBase | None,
    numeric: NumericTokenizer | None,
    rows: int,
    num_token: str,
    num_token_id: int | None,
) -> int | None:
    """The ``<NUM>`` id: explicit, the numeric tokenizer's, in the vocabulary, or the first spare row.

    Args:
        tokenizer: the plain tokenizer, or None.
        numeric: the numeric tokenizer, or None.
        rows: the embedding rows of the base.
        num_token: the ``<NUM>`` text.
        num_token_id: an explicit id, or None.

    Returns:
        The id (``len(tokenizer)`` is the first spare row), or None without a tokenizer or id.

    Raises:
        ValueError: a bad explicit id, or one that leaves a gap after the embedding rows.
    """
    if num_token_id is not None:
        num_token_id = integer("num_token_id", num_token_id, minimum=0)
        if num_token_id > rows:
            raise ValueError(
                f"num_token_id={num_token_id} leaves a gap after the {rows} embedding rows; use an "
                f"id < {rows} (a spare row) or {rows} (a new row)"
            )
        return num_token_id
    if numeric is not None:
        return numeric.num_token_id
    if tokenizer is None:
        return None
    vocab = tokenizer.get_vocab()
    if num_token in vocab:
        return int(vocab[num_token])
    return len(tokenizer)


def head_matrix(
    weight: torch.Tensor, bias: torch.Tensor | None, rows: int, cols: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[rows, cols]`` copy of a ``[V, H]`` head (extra rows: the mean row; extra columns: 0).

    An extra row is the ``<NUM>`` row of a base without a spare one. An all-zero row (e.g. a
    zeroed padding embedding of a tied head) is filled with a tiny constant so that its class gets
    a positive ``scale_S``.

    Args:
        weight: ``[V, H]`` the base head (or embedding) weight.
        bias: ``[V]`` the base head's bias, or None (0).
        rows: the rows of the copy (``V``, the OvR classes).
        cols: the columns of the copy (``C``).

    Returns:
        ``(W [rows, cols], b [rows])`` in float32.

    Example:
        >>> import torch
        >>> W, b = head_matrix(torch.tensor([[1.0, 2.0], [3.0, 4.0]]), None, 3, 2)
        >>> W.tolist(), b.tolist()  # the added row is the mean row
        ([[1.0, 2.0], [3.0, 4.0], [2.0, 3.0]], [0.0, 0.0, 0.0])
    """
    w = weight.detach()
    out = torch.zeros(rows, cols, dtype=torch.float32, device=w.device)
    r, c = min(rows, w.shape[0]), min(cols, w.shape[1])
    out[:r, :c] = w[:r, :c].float()
    b = torch.zeros(rows, dtype=torch.float32, device=w.device)
    if bias is not None:
        # A tied head grows with the embedding, its bias does not (BERT-style decoders): the
        # rows beyond the bias get its mean, like added rows.
        rb = min(rows, bias.shape[0])
        b[:rb] = bias.detach()[:rb].float()
        b[rb:] = bias.detach().float().mean()
    if rows > w.shape[0]:
        out[r:, :c] = w[:, :c].float().mean(0)
    # An all-zero row (e.g. a zeroed padding embedding of a tied head) would give the class
    # a zero scale_S, a degenerate Cauchy score; ZERO_ROW_FILL keeps scale_S > 0 and moves
    # loc_S by at most ZERO_ROW_FILL * ||z||_1 (1e-6 for ||z||_1 = 1000).
    out[(out == 0).all(dim=1)] = ZERO_ROW_FILL
    return out, b


@torch.no_grad()
def grow_embeddings(
    backbone: PreTrainedModel,
    rows: int,
    mean_resizing: bool = True,
    head: torch.nn.Module | None = None,
) -> None:
    """Resize ``backbone``'s input embedding to ``rows`` in place (new rows: the mean row).

    Also sets ``backbone.config.vocab_size``. Shrinking drops the last rows. transformers resizes
    the embedding's weight in place, so a head tied to it (``head``) changes with it; a bias of
    that head gets its mean for the new rows (else the base's own forward would fail on a weight
    and a bias of different lengths, as with CTRL, XLNet or BertGeneration).

    Args:
        backbone: the decoder.
        rows: the new number of rows.
        mean_resizing: new rows = the mean row (True) or transformers' default init (False).
        head: the base's output layer, whose bias follows a tied weight (None: no such head).
    """
    old = input_embedding_weight(backbone)
    n = old.shape[0]
    if rows == n:
        return
    mean = old.detach().float().mean(0)
    backbone.resize_token_embeddings(rows, mean_resizing=False)
    new = input_embedding_weight(backbone)
    if rows > n and mean_resizing:
        new[n:] = mean.to(new.dtype)
    backbone.config.vocab_size = rows
    weight, bias = getattr(head, "weight", None), getattr(head, "bias", None)
    if isinstance(weight, torch.Tensor) and isinstance(bias, torch.nn.Parameter):
        m = bias.shape[0]
        if weight.shape[0] > m:
            extra = bias.detach().mean().expand(weight.shape[0] - m)
            head.bias = torch.nn.Parameter(  # type: ignore[union-attr]
                torch.cat([bias.detach(), extra]), requires_grad=bias.requires_grad
            )
        elif weight.shape[0] < m:
            head.bias = torch.nn.Parameter(  # type: ignore[union-attr]
                bias.detach()[: weight.shape[0]].clone(), requires_grad=bias.requires_grad
            )


def learned_position_limit(backbone: PreTrainedModel) -> int | None:
    """The number of positions of a base with learned absolute position embeddings, else None.

    A base that looks positions up in a trained table (GPT-2's ``wpe``, OPT's
    ``embed_positions``) has no embedding for a position beyond it: a longer sequence is an
    ``IndexError`` deep inside the decoder. Rotary (RoPE) and ALiBi bases have no such table; they
    run past ``max_position_embeddings``, with quality that degrades (a warning, not an error).

    Args:
        backbone: the decoder.

    Returns:
        ``config.max_position_embeddings`` (else the table's size) when the decoder holds an
        ``nn.Embedding`` of positions, else None.

    Example:
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> learned_position_limit(tiny_base_model("gpt2").base_model)  # n_positions
        256
        >>> learned_position_limit(tiny_base_model("qwen2").base_model) is None  # RoPE
        True
    """
    for name, module in backbone.named_modules():
        leaf = name.rsplit(".", 1)[-1].lower()
        if isinstance(module, torch.nn.Embedding) and ("position" in leaf or leaf == "wpe"):
            limit = getattr(backbone.config, "max_position_embeddings", None)
            return int(limit) if isinstance(limit, int) else int(module.num_embeddings)
    return None
