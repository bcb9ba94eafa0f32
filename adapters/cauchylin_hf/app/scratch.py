"""A model from nothing: a byte-level BPE tokenizer trained on your texts and a random backbone.

:func:`build_from_config` is what ``cauchylin-lm train --from-config`` runs:

1. :func:`cauchylin_hf.app.corpus.train_corpus_tokenizer` learns a byte-level BPE vocabulary
   from the text between the numbers (``<pad>``, ``<bos>``, ``<eos>``, ``<NUM>`` are special
   tokens; numbers become ``<NUM>``, so digits need no merges);
2. the backbone is built with ``AutoModelForCausalLM.from_config`` from a preset of
   :data:`PRESETS` or a Hugging Face ``config.json`` (its ``model_type`` picks the
   architecture); the vocabulary size and the special token ids come from the tokenizer;
3. :meth:`~cauchylin_hf.model.CauchyLMForCausalLM.from_base` attaches the causal heads with the
   backbone trainable (``freeze_backbone=False``): a random backbone has to learn.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from .presets import PRESETS, backbone_settings

__all__ = ["PRESETS", "backbone_config", "build_from_config"]


def backbone_config(spec: str | os.PathLike[str], tokenizer: Any) -> Any:
    """The backbone config of a preset name or a ``config.json``, sized for a tokenizer.

    Args:
        spec: a name in :data:`PRESETS`, or the path of a Hugging Face ``config.json`` (a file,
            or a folder holding one) with a ``model_type`` (``"qwen2"``, ``"llama"``, ...).
        tokenizer: the (plain) tokenizer: ``vocab_size = len(tokenizer)`` and its pad, bos and
            eos ids go into the config.

    Returns:
        A transformers ``PretrainedConfig``.

    Raises:
        ValueError: an unknown preset, a file that is not a JSON object with a known
            ``model_type``.
        FileNotFoundError: ``spec`` looks like a path but there is no such file.

    Example:
        >>> from cauchylin_hf.app.corpus import train_corpus_tokenizer
        >>> tok = train_corpus_tokenizer(["3 boxes of 12 eggs hold 36 eggs."], vocab_size=300)
        >>> config = backbone_config("qwen2-tiny", tok)
        >>> config.model_type, config.hidden_size, config.vocab_size == len(tok)
        ('qwen2', 64, True)
    """
    from transformers import AutoConfig

    settings = backbone_settings(spec)
    model_type = settings.pop("model_type")
    for key in ("architectures", "auto_map", "transformers_version", "torch_dtype", "dtype"):
        settings.pop(key, None)
    settings.update(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    try:
        return AutoConfig.for_model(model_type, **settings)
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"cannot build a {model_type!r} config: {exc}") from None


def build_from_config(
    spec: str | os.PathLike[str],
    texts: Sequence[str],
    *,
    vocab_size: int = 1024,
    seed: int = 0,
    freeze_backbone: bool = False,
) -> tuple[Any, Any]:
    """Train a tokenizer on ``texts`` and build an untrained causal model of ``spec``.

    Args:
        spec: a name in :data:`PRESETS` or a ``config.json`` (see :func:`backbone_config`).
        texts: the training texts (the tokenizer learns from the text between their numbers).
        vocab_size: the largest vocabulary (a small corpus stops earlier, when every word is
            one token).
        seed: seed of the random weights.
        freeze_backbone: freeze the (random) backbone; default False, it trains.

    Returns:
        ``(model, numeric_tokenizer)``: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM` and
        its :class:`~cauchylin_hf.tokenizer.NumericTokenizer`.

    Raises:
        ValueError: as :func:`backbone_config`, or texts with nothing to learn a vocabulary from.
        FileNotFoundError: a config path that does not exist.

    Example:
        >>> texts = [f"x {i} -> y {2 * i}." for i in range(20)]
        >>> model, ntok = build_from_config("qwen2-tiny", texts, vocab_size=300)
        >>> type(model.backbone).__name__, ntok.num_token_id == model.config.num_token_id
        ('Qwen2Model', True)
        >>> all(p.requires_grad for p in model.backbone.parameters())
        True
    """
    from transformers import AutoModelForCausalLM

    from ..model import CauchyLMForCausalLM
    from ..tokenizer import NumericTokenizer
    from .corpus import train_corpus_tokenizer

    tok = train_corpus_tokenizer(list(texts), vocab_size=vocab_size)
    config = backbone_config(spec, tok)
    ntok = NumericTokenizer(tok)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            base = AutoModelForCausalLM.from_config(config)
        except (ValueError, RuntimeError, TypeError, KeyError) as exc:  # sizes that do not fit
            first = (
                str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            )
            raise ValueError(
                f"--from-config {os.fspath(spec)!r}: cannot build the model: {first}"
            ) from None
        model = CauchyLMForCausalLM.from_base(base, ntok, freeze_backbone=freeze_backbone)
    return model, ntok
