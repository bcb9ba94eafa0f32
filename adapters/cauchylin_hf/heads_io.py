"""Heads-only checkpoints: the new layers saved apart from an unchanged base.

A heads-only folder holds two files:

* ``cauchy_heads.safetensors`` — every tensor of ``numeric_embedding`` (``w_num`` and the
  ``<NUM>`` row offset ``num_token_delta``), ``abduction`` and ``action`` (``W_cls``, ``b_cls``,
  the regression head, ``b_noise``, the thresholds), plus ``extra_embedding_rows`` (``[n, H]``)
  when embedding rows were added beyond the base's (a ``<NUM>`` row on a base without spare
  rows);
* ``cauchy_heads_config.json`` — the :class:`~cauchylin_hf.config.CauchyLMConfig` (with the base's
  ``base_model_name_or_path`` and ``base_vocab_size``), the tensor list and a fingerprint of the
  base weights (float64 L2 norm) to warn when the heads are loaded onto another base.

The file names differ from ``config.json``/``model.safetensors`` on purpose: a heads-only folder
is never mistaken for a full checkpoint by ``from_pretrained``.

Size: dominated by ``W_cls`` (``[K, C]`` in the heads' dtype). For Qwen2.5-0.5B (``H = C = 896``,
``K = 151936``, 24 layers) ``W_cls`` alone is 544.5 MB in float32 and the whole heads file 551.6 MB
(137.9 M values), next to 2.53 GB for the full float32 model (494.0 M backbone values + the heads)
or 1.54 GB with a bfloat16 backbone.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file, save_file
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

from ._backbone import grow_embeddings, input_embedding_weight, load_base, split_causal_lm
from .config import CauchyLMConfig

if TYPE_CHECKING:  # pragma: no cover
    from transformers import PreTrainedModel

    from .model import CauchyLMForCausalLM

__all__ = ["HEADS_CONFIG_NAME", "HEADS_WEIGHTS_NAME", "HEAD_MODULES", "load_heads", "save_heads"]

HEAD_MODULES = ("numeric_embedding", "abduction", "action")
"""Names of the new submodules of the model (the ones heads-only files and PEFT's
``modules_to_save`` hold)."""

logger = logging.getLogger(__name__)

HEADS_WEIGHTS_NAME = "cauchy_heads.safetensors"
"""File of the head tensors."""
HEADS_CONFIG_NAME = "cauchy_heads_config.json"
"""File of the heads' config and metadata."""
_FORMAT = "cauchylin-heads"
_FORMAT_VERSION = 1
_EXTRA_ROWS = "extra_embedding_rows"


def _base_fingerprint(model: CauchyLMForCausalLM, rows: int) -> float:
    """float64 L2 norm of the backbone's weights (embedding rows limited to the base's ``rows``)."""
    emb = input_embedding_weight(model)
    total = 0.0
    with torch.no_grad():
        for p in model.backbone.parameters():
            t = p[:rows] if p is emb else p
            total += float(t.detach().double().pow(2).sum())
    return math.sqrt(total)


def _head_state(model: CauchyLMForCausalLM) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = {}
    for name in HEAD_MODULES:
        module = getattr(model, name)
        if hasattr(module, "original_module") or hasattr(module, "modules_to_save"):
            raise ValueError(
                f"{name} is wrapped by PEFT: save the adapter with peft_model.save_pretrained(), "
                "or call merge_and_unload() first"
            )
        for key, value in module.state_dict().items():
            state[f"{name}.{key}"] = value.detach().contiguous().cpu()
    return state


def save_heads(model: CauchyLMForCausalLM, save_directory: str | os.PathLike) -> dict[str, int]:
    """Save the new layers of ``model`` (not the backbone) into ``save_directory``.

    Args:
        model: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM` (not PEFT-wrapped).
        save_directory: the folder to write (created if needed).

    Returns:
        ``{file name: size in bytes}`` of the two files written.

    Raises:
        ValueError: a PEFT-wrapped head, or ``save_directory`` is an existing file.

    Example:
        >>> import tempfile
        >>> from cauchylin_hf import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
        >>> sorted(save_heads(model, tempfile.mkdtemp()))
        ['cauchy_heads.safetensors', 'cauchy_heads_config.json']
    """
    path = Path(os.fspath(save_directory))
    if path.exists() and not path.is_dir():
        raise ValueError(f"save_directory {str(path)!r} is a file, not a folder")
    path.mkdir(parents=True, exist_ok=True)
    cfg = model.config
    if any(p.requires_grad for p in model.backbone.parameters()):
        logger.warning(
            "the backbone is trainable: a heads-only checkpoint does not carry backbone changes"
        )
    state = _head_state(model)
    rows = cfg.base_vocab_size or cfg.vocab_size
    assert rows is not None  # a built model has a base config
    emb = input_embedding_weight(model)
    if emb.shape[0] > rows:
        state[_EXTRA_ROWS] = emb[rows:].detach().contiguous().cpu()
    save_file(state, str(path / HEADS_WEIGHTS_NAME), metadata={"format": "pt"})
    meta = {
        "format": _FORMAT,
        "format_version": _FORMAT_VERSION,
        "base_model_name_or_path": cfg.base_model_name_or_path,
        "base_vocab_size": rows,
        "base_fingerprint": _base_fingerprint(model, rows),
        "tensors": sorted(state),
        "config": cfg.to_dict(),
    }
    (path / HEADS_CONFIG_NAME).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return {name: (path / name).stat().st_size for name in (HEADS_WEIGHTS_NAME, HEADS_CONFIG_NAME)}


def load_heads(
    heads_directory: str | os.PathLike,
    base: str | os.PathLike | PreTrainedModel | None = None,
    *,
    base_kwargs: dict[str, Any] | None = None,
    model_class: type | None = None,
) -> CauchyLMForCausalLM:
    """Load a heads-only folder on top of an unchanged base.

    Args:
        heads_directory: a folder written by :func:`save_heads`.
        base: the base checkpoint folder or loaded causal LM (its decoder is taken over, not
            copied, as in ``from_base``); default the ``base_model_name_or_path`` recorded in
            the folder.
        base_kwargs: extra ``AutoModelForCausalLM.from_pretrained`` arguments for a base folder.
        model_class: the class to build (default :class:`~cauchylin_hf.model.CauchyLMForCausalLM`).

    Returns:
        The model in eval mode; its outputs equal those of the saved model on the same base.

    Raises:
        ValueError: a folder that does not exist or is not a heads-only folder, no base given
            and none recorded, a base of another architecture, hidden size or vocabulary, or
            head tensors that are missing or do not fit.

    Example:
        >>> import tempfile
        >>> from cauchylin_hf import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> base = tiny_base_model("gpt2")
        >>> model = CauchyLMForCausalLM.from_base(base, num_token_id=299)
        >>> folder = tempfile.mkdtemp()
        >>> _ = model.save_heads(folder)
        >>> again = load_heads(folder, base)
        >>> again.config.num_token_id
        299
    """
    # The model class registered for the config (by ``import cauchylin_hf``): this module sits
    # below model.py, which delegates its save_heads / from_heads here.
    cls: Any = model_class or MODEL_FOR_CAUSAL_LM_MAPPING[CauchyLMConfig]
    path = Path(os.fspath(heads_directory))
    if not path.is_dir():
        raise ValueError(f"heads folder {str(path)!r} does not exist")
    meta_file, weights_file = path / HEADS_CONFIG_NAME, path / HEADS_WEIGHTS_NAME
    if not meta_file.is_file() or not weights_file.is_file():
        raise ValueError(
            f"{str(path)!r} is not a heads-only folder (needs {HEADS_CONFIG_NAME} and "
            f"{HEADS_WEIGHTS_NAME}; a full checkpoint loads with from_pretrained)"
        )
    meta = json.loads(meta_file.read_text())
    if meta.get("format") != _FORMAT or meta.get("format_version", 0) > _FORMAT_VERSION:
        raise ValueError(f"{str(meta_file)!r} is not a supported heads file: {meta.get('format')}")
    stored = dict(meta["config"])
    if base is None:
        base = meta.get("base_model_name_or_path")
        if not base:
            raise ValueError("no base given and none recorded in the heads folder: pass base=")
    model_in, base_path = load_base(base, base_kwargs)
    backbone, _, _ = split_causal_lm(model_in)
    saved = CauchyLMConfig.from_dict(stored)
    saved_type = getattr(saved.base_config, "model_type", None)
    rows = input_embedding_weight(backbone).shape[0]
    got = backbone.config
    if (
        got.model_type != saved_type
        or got.hidden_size != saved.hidden_size
        or rows != meta["base_vocab_size"]
    ):
        raise ValueError(
            f"the base ({got.model_type}, hidden {got.hidden_size}, {rows} rows) is not the one "
            f"the heads were saved for ({saved_type}, hidden "
            f"{saved.hidden_size}, {meta['base_vocab_size']} rows)"
        )
    state = load_file(str(weights_file))
    backbone.config = copy.deepcopy(backbone.config)
    vocab = saved.vocab_size
    assert vocab is not None  # the saved config has a base config
    extra = state.pop(_EXTRA_ROWS, None)
    if vocab > rows:
        if extra is None or extra.shape[0] != vocab - rows:
            raise ValueError(f"{HEADS_WEIGHTS_NAME} lacks the {vocab - rows} added embedding rows")
        grow_embeddings(backbone, vocab)
        with torch.no_grad():
            weight = input_embedding_weight(backbone)
            weight[rows:] = extra.to(weight.dtype)
    stored.pop("base_config")
    config = CauchyLMConfig.from_dict({**stored, "base_config": backbone.config.to_dict()})
    config.base_config = backbone.config
    if base_path is not None:
        config.base_model_name_or_path = base_path
    model = cls(config, backbone=backbone)
    device = input_embedding_weight(backbone).device
    missing, unexpected = model.load_state_dict(
        {k: v.to(device) for k, v in state.items()}, strict=False
    )
    head_missing = [k for k in missing if not k.startswith("backbone.")]
    if head_missing or unexpected:
        raise ValueError(
            f"heads file does not fit the model: missing {head_missing[:5]}, unexpected "
            f"{list(unexpected)[:5]}"
        )
    fingerprint = meta.get("base_fingerprint")
    if fingerprint:
        now = _base_fingerprint(model, meta["base_vocab_size"])
        if abs(now - fingerprint) > 1e-2 * max(abs(fingerprint), 1e-12):
            logger.warning(
                "the base weights differ from those the heads were saved with (norm %.6g vs "
                "%.6g): is this the same base checkpoint?",
                now,
                fingerprint,
            )
    gen = getattr(model_in, "generation_config", None)
    if gen is not None:
        model.generation_config = copy.deepcopy(gen)
    model.place_heads()
    model.eval()
    return model
