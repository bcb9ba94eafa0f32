"""Tiny base models and tokenizers for tests, docs and demos (no download, seconds on a CPU).

Every factory builds a model with transformers' own classes from a small config (hidden 32,
2 layers), so the code path is the one a real checkpoint takes: :func:`save_tiny_base` writes a
local checkpoint folder (weights + tokenizer) that ``AutoModelForCausalLM.from_pretrained`` and
:meth:`~cauchylin_hf.model.CauchyLMForCausalLM.from_base` read like a downloaded Qwen2.5 folder.

* :func:`tiny_tokenizer` — a byte-level BPE tokenizer with exactly ``vocab_size`` tokens
  (``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2, the 256 bytes, then unused filler tokens); it
  round-trips any text.
* :func:`tiny_base_config` / :func:`tiny_base_model` — Qwen2, Llama, Mistral or GPT-2 style
  decoders with ``vocab_size + spare_rows`` embedding rows (``spare_rows`` > 0 mimics Qwen2.5's
  unused rows beyond the tokenizer).
* :func:`save_tiny_base` — both of the above saved into one folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GPT2Config,
    LlamaConfig,
    MistralConfig,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
)

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_TIED",
    "save_tiny_base",
    "tiny_base_config",
    "tiny_base_model",
    "tiny_tokenizer",
]

ARCHITECTURES = ("qwen2", "llama", "mistral", "gpt2")
"""Architectures the factories build."""

DEFAULT_TIED = {"qwen2": True, "llama": False, "mistral": False, "gpt2": True}
"""Default ``tie_word_embeddings`` per architecture (Qwen2.5-0.5B and GPT-2 tie theirs)."""

_SPECIALS = ("<pad>", "<bos>", "<eos>")


def tiny_tokenizer(
    vocab_size: int = 300, *, model_max_length: int = 512
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with exactly ``vocab_size`` tokens.

    Ids: ``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2, the 256 byte symbols 3..258, then filler tokens
    ``<unused_i>`` up to ``vocab_size`` (never produced by encoding). No merges: every byte is one
    token, so any text round-trips. ``<bos>`` is not added automatically.

    Args:
        vocab_size: total number of tokens, at least 259.
        model_max_length: the tokenizer's ``model_max_length``.

    Returns:
        A ``PreTrainedTokenizerFast`` with pad/bos/eos set, ``padding_side="right"``.

    Raises:
        ValueError: ``vocab_size < 259``.

    Example:
        >>> tok = tiny_tokenizer(300)
        >>> len(tok), tok.decode(tok("3 eggs")["input_ids"])
        (300, '3 eggs')
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    need = len(_SPECIALS) + len(alphabet)
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < need:
        raise ValueError(f"vocab_size must be an int >= {need}, got {vocab_size!r}")
    vocab = {t: i for i, t in enumerate(_SPECIALS)}
    for ch in alphabet:
        vocab[ch] = len(vocab)
    i = 0
    while len(vocab) < vocab_size:
        vocab[f"<unused_{i}>"] = len(vocab)
        i += 1
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        model_max_length=model_max_length,
        padding_side="right",
        clean_up_tokenization_spaces=False,
    )


def tiny_base_config(
    arch: str = "qwen2",
    *,
    vocab_size: int = 300,
    spare_rows: int = 0,
    tie_word_embeddings: bool | None = None,
    hidden_size: int = 32,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    intermediate_size: int = 64,
    max_position_embeddings: int = 256,
    initializer_range: float = 0.2,
) -> PretrainedConfig:
    """The config of a tiny decoder of architecture ``arch``.

    Args:
        arch: ``"qwen2"``, ``"llama"``, ``"mistral"`` or ``"gpt2"``.
        vocab_size: number of tokens of the matching :func:`tiny_tokenizer`.
        spare_rows: extra embedding rows beyond the tokenizer (the config's ``vocab_size`` is
            ``vocab_size + spare_rows``).
        tie_word_embeddings: tie the head to the embedding (default :data:`DEFAULT_TIED`).
        hidden_size: ``H``.
        num_hidden_layers: decoder layers.
        num_attention_heads: attention heads (``hidden_size`` must be a multiple).
        num_key_value_heads: key/value heads (grouped-query attention; ignored by GPT-2).
        intermediate_size: MLP width (GPT-2: ``n_inner``).
        max_position_embeddings: context length.
        initializer_range: std of the random init (0.2 gives logits of order 1, so that
            equality checks are not trivially met by tiny numbers).

    Returns:
        A ``Qwen2Config``, ``LlamaConfig``, ``MistralConfig`` or ``GPT2Config`` with ``pad``/``bos``/
        ``eos`` ids 0/1/2.

    Raises:
        ValueError: an unknown ``arch`` or negative ``spare_rows``.

    Example:
        >>> tiny_base_config("gpt2", spare_rows=3).vocab_size
        303
    """
    if arch not in ARCHITECTURES:
        raise ValueError(f"arch must be one of {ARCHITECTURES}, got {arch!r}")
    if isinstance(spare_rows, bool) or not isinstance(spare_rows, int) or spare_rows < 0:
        raise ValueError(f"spare_rows must be an int >= 0, got {spare_rows!r}")
    tied = DEFAULT_TIED[arch] if tie_word_embeddings is None else bool(tie_word_embeddings)
    rows = vocab_size + spare_rows
    common: dict[str, Any] = {
        "vocab_size": rows,
        "tie_word_embeddings": tied,
        "initializer_range": initializer_range,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    if arch == "gpt2":
        return GPT2Config(
            n_embd=hidden_size,
            n_layer=num_hidden_layers,
            n_head=num_attention_heads,
            n_inner=intermediate_size,
            n_positions=max_position_embeddings,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            **common,
        )
    cls = {"qwen2": Qwen2Config, "llama": LlamaConfig, "mistral": MistralConfig}[arch]
    return cls(
        hidden_size=hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_position_embeddings,
        **common,
    )


def tiny_base_model(
    arch: str = "qwen2",
    *,
    tie_word_embeddings: bool | None = None,
    vocab_size: int = 300,
    spare_rows: int = 0,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    **config_kwargs: Any,
) -> PreTrainedModel:
    """A randomly initialised tiny causal LM (``AutoModelForCausalLM.from_config``), in eval mode.

    Args:
        arch: ``"qwen2"``, ``"llama"``, ``"mistral"`` or ``"gpt2"``.
        tie_word_embeddings: tie head and embedding (default per architecture).
        vocab_size: tokens of the matching :func:`tiny_tokenizer`.
        spare_rows: embedding rows beyond the tokenizer.
        seed: seed of the random weights (the global RNG state is restored afterwards).
        dtype: parameter dtype.
        **config_kwargs: more :func:`tiny_base_config` arguments (``hidden_size``, ...).

    Returns:
        The model, e.g. ``Qwen2ForCausalLM`` with ``vocab_size + spare_rows`` embedding rows.

    Raises:
        ValueError: as :func:`tiny_base_config`.

    Example:
        >>> model = tiny_base_model("llama", spare_rows=4)
        >>> type(model).__name__, model.get_input_embeddings().weight.shape[0]
        ('LlamaForCausalLM', 304)
    """
    config = tiny_base_config(
        arch,
        vocab_size=vocab_size,
        spare_rows=spare_rows,
        tie_word_embeddings=tie_word_embeddings,
        **config_kwargs,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def save_tiny_base(
    folder: str | os.PathLike,
    arch: str = "qwen2",
    *,
    vocab_size: int = 300,
    spare_rows: int = 0,
    with_tokenizer: bool = True,
    **model_kwargs: Any,
) -> Path:
    """Write a tiny checkpoint folder (``config.json``, weights, tokenizer files).

    Args:
        folder: where to write (created if needed).
        arch: architecture (see :func:`tiny_base_model`).
        vocab_size: size of the :func:`tiny_tokenizer` that is saved (the architecture's
            tokenizer class may add a special token when it is loaded back; the model's rows are
            ``len(AutoTokenizer.from_pretrained(folder)) + spare_rows``).
        spare_rows: embedding rows beyond the tokenizer.
        with_tokenizer: also save the tokenizer.
        **model_kwargs: more :func:`tiny_base_model` arguments.

    Returns:
        The folder as a ``Path``.

    Example:
        >>> import tempfile
        >>> from transformers import AutoModelForCausalLM
        >>> path = save_tiny_base(tempfile.mkdtemp(), "mistral")
        >>> type(AutoModelForCausalLM.from_pretrained(path)).__name__
        'MistralForCausalLM'
    """
    path = Path(os.fspath(folder))
    path.mkdir(parents=True, exist_ok=True)
    n = vocab_size
    tok = None
    if with_tokenizer:
        # Load the tokenizer back the way a user does: AutoTokenizer picks the architecture's
        # tokenizer class from config.json, which may add its own special tokens (Qwen2 adds
        # "<|endoftext|>"); the model is then sized to the tokenizer that is really loaded.
        tiny_base_config(arch, vocab_size=vocab_size).save_pretrained(path)
        tiny_tokenizer(vocab_size).save_pretrained(path)
        tok = AutoTokenizer.from_pretrained(path)
        n = len(tok)
    model = tiny_base_model(arch, vocab_size=n, spare_rows=spare_rows, **model_kwargs)
    model.save_pretrained(path)
    if tok is not None:
        tok.save_pretrained(path)
    return path
