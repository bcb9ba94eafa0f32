r"""``CauchyLMForCausalLM``: any Hugging Face decoder turned into a causal language model.

Four submodules with fixed names (the pipeline: [The causal decision
model][the-pipeline-at-a-glance]):

* ``backbone`` — the base decoder *without* its language-model head (whatever ``AutoModel``
  builds from the base config); its last hidden state is ``z``. The base logits are never
  computed and ``lm_head`` is not kept, so no parameter goes unused (FSDP needs that).
* ``numeric_embedding`` — :class:`cauchylin.nn.NumericEmbedding` with the trainable ``<NUM>``
  offset, which trains while the backbone is frozen (the default) or LoRA-wrapped.
* ``abduction`` — :class:`cauchylin.nn.Abduction`: ``U ~ Cauchy(loc_U, scale_U)`` from ``z``.
* ``action`` — :class:`cauchylin.nn.Action`: class scores ``S`` over the OvR classes and the
  regression value ``Y``; its ``loss`` is the memory-efficient training objective.

Building a model (from a base or a heads folder, the ``<NUM>`` row, the initialisation that makes
``loc_S`` equal the base logits) is :mod:`cauchylin_hf.attach`, its files
:mod:`cauchylin_hf.save_and_load`, the loss and the one next-token shift :mod:`cauchylin_hf.loss`
(as transformers keeps its losses in ``loss_utils``)."""

from __future__ import annotations

import os
from typing import Any, cast

import torch
from torch import nn
from transformers import AutoModel, AutoModelForCausalLM, PreTrainedConfig, PreTrainedModel
from transformers.modeling_utils import slice_logits_to_keep
from transformers.models.auto.modeling_auto import MODEL_MAPPING
from transformers.utils.generic import can_return_tuple

from cauchylin import CauchyVector
from cauchylin.nn import ActionOutput, ActionStep
from cauchylin.nn.modes import STANDARD, Decoding, InferenceMode, get_mode
from cauchylin.nn.readouts import ReadoutContext

from . import attach
from ._backbone import input_embedding_weight, learned_position_limit, split_causal_lm
from .config import CauchyLMConfig
from .features import EncoderInputs, check_inputs, features, individual
from .generation import NumericGenerationMixin
from .heads import build_heads
from .heads_io import HEAD_MODULES
from .hf_compat import CACHE_NAME, resolve_cache
from .loss import shifted_causal_loss
from .outputs import CauchyLMOutput, distribution_fields, loss_fields
from .readout_context import ReadoutContextMixin, forward_context
from .save_and_load import CheckpointMixin
from .tokenizer import NumericTokenizer

__all__ = [
    "HEAD_MODULES",
    "CauchyLMForCausalLM",
    "split_causal_lm",
]


# ============================================================================================
# The model
# ============================================================================================


class CauchyLMForCausalLM(CheckpointMixin, ReadoutContextMixin, NumericGenerationMixin):
    r"""A Hugging Face decoder with the Abduction/Action heads of the causal language model.

    Build one with :meth:`from_base` (a local checkpoint folder or a loaded causal LM), reload a
    saved one with :meth:`from_pretrained`, or load heads-only files on an unchanged base with
    :meth:`from_heads`. Features ``z = backbone(e)`` of the numeric-aware embedding ``e``, then
    ``U = Abduction(z)`` and ``S``, ``Y`` from ``Action``; ``from_base`` initialises them so that
    ``loc_S`` equals the base logits.

    Args:
        config: :class:`~cauchylin_hf.config.CauchyLMConfig` (with ``base_config``).
        backbone: optional already-built decoder to use as ``backbone`` (shared, not copied;
            used by :meth:`from_base`). Default: ``AutoModel.from_config(config.base_config)``.

    Attributes:
        backbone: the base decoder without its head.
        numeric_embedding: :class:`cauchylin.nn.NumericEmbedding` with the ``<NUM>`` offset.
        abduction: :class:`cauchylin.nn.Abduction` (``H -> C``).
        action: :class:`cauchylin.nn.Action` (``C -> V`` classes and the regression value).

    Raises:
        ValueError: a config without ``base_config``, or a ``backbone`` that does not match it.

    Example:
        >>> import torch
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> base = tiny_base_model("qwen2")
        >>> model = CauchyLMForCausalLM.from_base(base, num_token_id=299)
        >>> ids = torch.tensor([[5, 6, 7]])
        >>> out = model(ids)
        >>> bool((out.loc_S - base(ids).logits).abs().max() < 1e-4)
        True
    """

    config_class = CauchyLMConfig
    config: CauchyLMConfig
    base_model_prefix = "backbone"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    # transformers declares this an instance attribute, hence no ClassVar.
    _skip_keys_device_placement: set[str] | list[str] | None = [CACHE_NAME]  # noqa: RUF012
    # The loss is a per-batch mean (OvR mean over counted positions, regression mean over <NUM>
    # targets): the Trainer scales it for gradient accumulation and passes no num_items_in_batch.
    accepts_loss_kwargs = False
    # torch.export (strict or not) and torch.compile(fullgraph=True) capture the inference forward
    # in the deterministic modes (causal, standard, compatible); the sampling modes draw with a
    # generator and the training forward's fused loss break the graph, which compile handles
    # (tests/cauchylin_hf/test_hf_contract.py).
    _can_compile_fullgraph = True

    def __init__(self, config: CauchyLMConfig, backbone: PreTrainedModel | None = None) -> None:
        if not isinstance(config, CauchyLMConfig):
            raise ValueError(f"config must be a CauchyLMConfig, got {type(config).__name__}")
        if config.base_config is None:
            raise ValueError(
                "config.base_config is None: build the model with CauchyLMForCausalLM.from_base("
                "base) or give the config the base decoder's config"
            )
        super().__init__(config)
        base_config = cast(PreTrainedConfig, config.base_config)  # a config object after init
        injected = backbone is not None
        if backbone is None:
            backbone_cls: Any = MODEL_MAPPING.get(type(base_config), None)
            if backbone_cls is None:
                raise ValueError(
                    f"AutoModel has no decoder class for base model_type {base_config.model_type!r}"
                )
            backbone = backbone_cls._from_config(base_config)
        else:
            self._check_backbone(backbone, config)
            # The injected decoder is loaded: keep transformers' init from touching it.
            for t in [*backbone.parameters(), *backbone.buffers()]:
                setattr(t, "_is_hf_initialized", True)  # noqa: B010 (an attribute of tensors)
            for m in backbone.modules():
                setattr(m, "_is_hf_initialized", True)  # noqa: B010
        self.backbone = backbone
        self._position_limit = learned_position_limit(backbone)
        # One config object for the backbone and config.base_config (resizing updates both).
        self.config.base_config = backbone.config
        if backbone.config._attn_implementation is None:
            backbone.config._attn_implementation = self.config._attn_implementation
        self.numeric_embedding, self.abduction, self.action = build_heads(config)
        if injected:
            # Beside the injected decoder's embedding before the init below reads it: a base
            # loaded on a GPU gets its heads initialised there, not on the CPU.
            self.place_heads()
        if config.readout_contexts == 0:
            # Checkpoints saved before the per-context readouts existed hold no table: an empty
            # one is what they had (a table that config.json says is there must load).
            self._keys_to_ignore_on_load_missing = [r"action\.readouts\."]
        self._no_split_modules = list(getattr(backbone, "_no_split_modules", None) or [])
        if config.torch_head_dtype == torch.float32:
            # Loading with dtype=bfloat16/float16 keeps the heads in float32.
            self._keep_in_fp32_modules_strict = list(HEAD_MODULES)
        self.post_init()
        self.set_backbone_trainable(not config.freeze_backbone)

    @staticmethod
    def _check_backbone(backbone: Any, config: CauchyLMConfig) -> None:
        if not isinstance(backbone, PreTrainedModel):
            raise ValueError(f"backbone must be a PreTrainedModel, got {type(backbone).__name__}")
        rows = input_embedding_weight(backbone).shape[0]
        if backbone.config.hidden_size != config.hidden_size or rows != config.vocab_size:
            raise ValueError(
                f"backbone (hidden {backbone.config.hidden_size}, {rows} embedding rows) does not "
                f"match the config (hidden {config.hidden_size}, {config.vocab_size} rows)"
            )

    # ------------------------------------------------------------------ transformers plumbing

    def get_input_embeddings(self) -> nn.Module:
        """The backbone's token embedding.

        Returns:
            The embedding module (weight ``[vocab_size, H]``).
        """
        return self.backbone.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        """Replace the backbone's token embedding.

        Args:
            value: the new embedding module (weight ``[rows, H]``); ``config.vocab_size`` and the
                OvR classes are not changed (use :meth:`resize_token_embeddings` for that).
        """
        self.backbone.set_input_embeddings(value)

    def get_output_embeddings(self) -> None:
        """None: there is no softmax head to tie (``action.classifier`` is ``W_cls``, untied)."""
        return None

    def get_decoder(self) -> PreTrainedModel:
        """The backbone.

        Returns:
            ``self.backbone``, the base decoder without its head.
        """
        return self.backbone

    def set_decoder(self, decoder: PreTrainedModel) -> None:
        """Replace the backbone (no checks).

        Args:
            decoder: the new decoder; it must yield ``[B, L, H]`` hidden states of the same ``H``.
        """
        self.backbone = decoder
        self._position_limit = learned_position_limit(decoder)

    @torch.no_grad()
    def initialize_weights(self) -> None:
        """Initialise every tensor not yet loaded: the backbone by its own class, then the heads.

        transformers treats a model class defined outside its package as custom code and then
        skips every module that owns no parameter of its own (GPT-2's attention and MLP blocks,
        whose ``_init_weights`` scales ``c_proj`` by ``1/sqrt(2 n_layer)``). The backbone is
        transformers' own class, so it is initialised first as it is on its own (its
        ``initialize_weights``; loaded tensors are kept), and :meth:`_init_weights` then fills
        the heads.
        """
        backbone = self._modules.get("backbone")
        if isinstance(backbone, PreTrainedModel):
            backbone.initialize_weights()
        super().initialize_weights()

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """The documented initialisation of the heads, for weights not yet loaded.

        transformers calls this at construction and, after ``from_pretrained``, for the modules
        whose weights were missing from the checkpoint; see :func:`cauchylin_hf.attach.init_heads`.
        """
        attach.init_heads(self, module)

    def place_heads(self) -> None:
        """Move the heads to the device of the input embedding (where ``encode`` feeds them).

        Only the heads move, so a backbone spread over devices (``device_map``) stays as it is.

        Example:
            >>> from cauchylin_hf.testing import tiny_base_model
            >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
            >>> model.place_heads()
            >>> emb = model.get_input_embeddings().weight
            >>> {p.device for p in model.action.parameters()} == {emb.device}
            True
        """
        device = input_embedding_weight(self).device
        for name in HEAD_MODULES:
            getattr(self, name).to(device)

    def classification_head_parameters(self) -> list[nn.Parameter]:
        """The parameters that train at ``config.classifier_lr_scale`` times the learning rate.

        ``W_cls`` and ``b_cls`` (``action.classifier``) and the thresholds when they are learnable.

        Returns:
            The parameters (trainable or not).

        Example:
            >>> from cauchylin_hf.testing import tiny_base_model
            >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
            >>> [tuple(p.shape) for p in model.classification_head_parameters()]
            [(300, 32), (300,)]
        """
        params = list(self.action.classifier.parameters())
        if isinstance(self.action.threshold, nn.Parameter):
            params.append(self.action.threshold)
        return params

    def parameter_groups(self, learning_rate: float) -> list[dict[str, Any]]:
        """Optimizer parameter groups: the classification head at ``classifier_lr_scale`` times the rate.

        The head is :meth:`classification_head_parameters`; every other trainable parameter gets
        ``learning_rate``. Pass the result to any ``torch.optim`` optimizer
        (:func:`~cauchylin_hf.training.make_trainer` splits the Trainer's own groups the same way).

        Args:
            learning_rate: the base learning rate.

        Returns:
            ``[{"params": [...], "lr": learning_rate}, {"params": [...], "lr": scaled}]`` with
            only trainable parameters (an empty group is left out).

        Example:
            >>> import torch
            >>> from cauchylin_hf.testing import tiny_base_model
            >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
            >>> groups = model.parameter_groups(1e-3)
            >>> [(len(g["params"]), g["lr"]) for g in groups]  # heads; W_cls and b_cls at 10x
            [(9, 0.001), (2, 0.01)]
            >>> opt = torch.optim.AdamW(groups)
        """
        head_ids = {id(p) for p in self.classification_head_parameters()}
        trainable = [p for p in self.parameters() if p.requires_grad]
        groups = [
            {"params": [p for p in trainable if id(p) not in head_ids], "lr": float(learning_rate)},
            {
                "params": [p for p in trainable if id(p) in head_ids],
                "lr": float(learning_rate) * self.config.classifier_lr_scale,
            },
        ]
        return [g for g in groups if g["params"]]

    def set_backbone_trainable(self, trainable: bool) -> None:
        """Freeze (``False``) or unfreeze (``True``) every backbone parameter.

        The heads (including ``numeric_embedding.num_token_delta``) are not touched.

        Args:
            trainable: the new ``requires_grad`` of the backbone's parameters.

        Example:
            >>> from cauchylin_hf.testing import tiny_base_model
            >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
            >>> any(p.requires_grad for p in model.backbone.parameters())  # frozen by default
            False
            >>> model.set_backbone_trainable(True)
            >>> all(p.requires_grad for p in model.backbone.parameters())
            True
            >>> model.numeric_embedding.num_token_delta.requires_grad  # heads: unchanged
            True
        """
        self.backbone.requires_grad_(bool(trainable))

    # ------------------------------------------------------------------ properties

    @property
    def num_token_id(self) -> int | None:
        """The ``<NUM>`` id (``config.num_token_id``)."""
        return self.config.num_token_id

    @property
    def vocab_size(self) -> int:
        """Rows of the input embedding (``config.vocab_size``, updated by resizing)."""
        return int(input_embedding_weight(self).shape[0])

    @property
    def head_dtype(self) -> torch.dtype:
        """dtype the heads actually hold (normally ``config.head_dtype``)."""
        return self.abduction.loc_net.weight.dtype

    @property
    def position_limit(self) -> int | None:
        """Positions of a base with learned position embeddings (GPT-2), None for RoPE/ALiBi bases.

        A sequence (cache included) longer than this is refused by :meth:`forward` and
        :func:`~cauchylin_hf.generation.generate`; see
        :func:`cauchylin_hf._backbone.learned_position_limit`.
        """
        return self._position_limit

    # ------------------------------------------------------------------ building

    @classmethod
    def from_base(
        cls,
        base: str | os.PathLike | PreTrainedModel,
        tokenizer: Any = None,
        *,
        num_token: str = "<NUM>",
        num_token_id: int | None = None,
        return_tokenizer: bool = False,
        base_kwargs: dict[str, Any] | None = None,
        **settings: Any,
    ) -> CauchyLMForCausalLM | tuple[CauchyLMForCausalLM, NumericTokenizer | None]:
        r"""Attach the causal heads to a base causal LM, initialised so that ``loc_S`` = base logits.

        The steps are those of :mod:`cauchylin_hf.attach`: the base's decoder as ``backbone``, the
        ``<NUM>`` id (explicit ``num_token_id``; the tokenizer's ``num_token`` if it has one; else
        the first spare row ``len(tokenizer)``; a new mean row when it is not a row yet), the
        heads (Abduction the identity, ``W_cls`` the base head).

        A base passed as an object is taken over, not copied: training the causal model changes
        it, and an added ``<NUM>`` row resizes its input embeddings. Pass ``copy.deepcopy(base)``
        to keep it untouched.

        Args:
            base: a local checkpoint folder (what ``AutoModelForCausalLM.from_pretrained``
                reads, e.g. ``"/models/Qwen2.5-0.5B"``) or a loaded causal LM.
            tokenizer: ``None`` (load the tokenizer from the base folder when it has one), a
                folder, a ``PreTrainedTokenizerBase``, a
                :class:`~cauchylin_hf.tokenizer.NumericTokenizer`, or ``False`` (none). Never
                modified.
            num_token: the ``<NUM>`` token text.
            num_token_id: explicit ``<NUM>`` id (``< rows``: an existing/spare row; ``== rows``:
                a new row). Without it and without a tokenizer the model has no ``<NUM>`` (the
                regression loss is 0).
            return_tokenizer: also return the numeric tokenizer (or None without a tokenizer).
            base_kwargs: extra arguments of ``from_pretrained`` for a folder (``dtype``,
                ``attn_implementation``, ...).
            **settings: :class:`~cauchylin_hf.config.CauchyLMConfig` causal settings
                (``gamma_init``, ``b_noise_init``, ``threshold``, ``ovr_classes``, ...).

        Returns:
            The model in eval mode, or ``(model, numeric_tokenizer)`` with
            ``return_tokenizer=True``.

        Raises:
            ValueError: a folder that does not exist or does not hold a causal LM, a model that
                is not a decoder-only causal LM, an unknown setting, a bad ``num_token_id``, or
                ``ovr_classes="tokenizer"`` without a tokenizer.

        Example:
            >>> from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
            >>> tok = tiny_tokenizer(300)
            >>> base = tiny_base_model("llama", vocab_size=300, spare_rows=4)
            >>> model, ntok = CauchyLMForCausalLM.from_base(base, tok, return_tokenizer=True)
            >>> model.config.num_token_id, ntok.num_token_id, model.config.vocab_size
            (300, 300, 304)
        """
        return attach.from_base(
            cls,
            base,
            tokenizer,
            num_token=num_token,
            num_token_id=num_token_id,
            return_tokenizer=return_tokenizer,
            base_kwargs=base_kwargs,
            **settings,
        )

    # ------------------------------------------------------------------ resizing

    def resize_token_embeddings(
        self,
        new_num_tokens: int | None = None,
        pad_to_multiple_of: int | None = None,
        mean_resizing: bool = True,
    ) -> nn.Embedding:
        """Resize the backbone's token embedding (and the OvR classes when ``ovr_classes="all"``).

        New embedding rows and new ``W_cls`` rows are the mean of the existing ones (not a random
        draw, unlike transformers' ``mean_resizing``); new ``b_cls`` entries the mean bias; new
        per-class thresholds the initial threshold. Shrinking drops the last rows.

        Args:
            new_num_tokens: the new number of rows (None: only ``pad_to_multiple_of``).
            pad_to_multiple_of: round the size up to a multiple of this.
            mean_resizing: new rows = mean rows (True) or transformers' default init (False).

        Returns:
            The new input embedding module.

        Raises:
            ValueError: ``new_num_tokens`` or ``pad_to_multiple_of`` that is not a positive int
                (or None), a size below the ``<NUM>`` id or below ``tokenizer_size``.
        """
        return attach.resize_rows(self, new_num_tokens, pad_to_multiple_of, mean_resizing)

    # ------------------------------------------------------------------ forward pass

    def encode(
        self,
        input_ids: torch.LongTensor | None = None,
        numeric_values: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: Any = None,
        use_cache: bool | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        *,
        past_key_values: Any = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, Any]:
        """The features ``z``: numeric-aware embeddings through the backbone, last hidden state.

        The numeric embedding of ``input_ids`` (or ``inputs_embeds``) goes to the backbone as
        ``inputs_embeds``; the output is its last hidden state (the base logits are never formed;
        :mod:`cauchylin_hf.features`).

        Args:
            input_ids: ``[B, L]`` token ids.
            numeric_values: ``[B, L]`` values at ``<NUM>`` positions (0 elsewhere), or None.
            attention_mask: ``[B, L_past + L]`` 1 for tokens, 0 for padding.
            cache: the backbone's KV cache.
            use_cache: return the updated cache.
            position_ids: ``[B, L]`` positions (the backbone's default when None).
            inputs_embeds: ``[B, L, H]`` base embeddings instead of ``input_ids`` (the ``<NUM>``
                offset then needs ``input_ids`` and is skipped).
            past_key_values: the cache under its name before transformers 5.24 (give one of
                ``cache`` and ``past_key_values``).
            **kwargs: passed to the backbone (e.g. ``output_hidden_states``).

        Returns:
            ``(hidden [B, L, H] in the heads' dtype, the updated cache or None)``.

        Raises:
            ValueError: neither or both of ``input_ids``/``inputs_embeds``, both ``cache`` and
                ``past_key_values``, ids outside the embedding rows, ``numeric_values`` of
                another shape, or more positions than a base with learned position embeddings
                has.

        Example:
            >>> import torch
            >>> from cauchylin_hf.testing import tiny_base_model
            >>> base = tiny_base_model("qwen2")
            >>> model = CauchyLMForCausalLM.from_base(base, num_token_id=299)
            >>> ids = torch.tensor([[5, 299, 7]])
            >>> hidden, cache = model.encode(ids, torch.tensor([[0.0, 2.5, 0.0]]), use_cache=False)
            >>> tuple(hidden.shape), cache is None
            ((1, 3, 32), True)
            >>> z = base.model(ids).last_hidden_state  # the base decoder on the same ids
            >>> bool(torch.equal(model.encode(ids, use_cache=False)[0], z))  # values 0: z exactly
            True
            >>> bool(torch.equal(hidden[:, 0], z[:, 0]))  # a value only changes later positions
            True
        """
        inputs = EncoderInputs(
            input_ids,
            numeric_values,
            attention_mask,
            resolve_cache(cache, past_key_values),
            use_cache,
            position_ids,
            inputs_embeds,
        )
        check_inputs(self, inputs)
        hidden, out = features(self, inputs, **kwargs)
        return hidden, getattr(out, CACHE_NAME, None)

    def encode_checked(
        self,
        input_ids: torch.Tensor,
        numeric_values: torch.Tensor,
        attention_mask: torch.Tensor,
        cache: Any = None,
        use_cache: bool = True,
        position_ids: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Any]:
        """:meth:`encode` of inputs the caller has already checked, without checking them again.

        A generation loop checks its prompt once (ids inside the embedding rows, finite values,
        lengths within the base's positions) and feeds back only ids and values the heads made;
        this runs the same computation as :meth:`encode` without repeating those checks at
        every token.

        Args:
            input_ids: ``[B, L]`` token ids inside the embedding rows.
            numeric_values: ``[B, L]`` finite values (0 off ``<NUM>``).
            attention_mask: ``[B, L_past + L]``.
            cache: the backbone's cache (None at the first step).
            use_cache: return the updated cache.
            position_ids: ``[B, L]`` positions.

        Returns:
            ``(hidden [B, L, H], the updated cache or None)``, as :meth:`encode`.

        Example:
            >>> import torch
            >>> from cauchylin_hf.testing import tiny_base_model
            >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
            >>> ids, values = torch.tensor([[5, 299, 7]]), torch.tensor([[0.0, 2.5, 0.0]])
            >>> mask = torch.ones_like(ids)
            >>> a = model.encode_checked(ids, values, mask, use_cache=False)[0]
            >>> bool(torch.equal(a, model.encode(ids, values, mask, use_cache=False)[0]))
            True
        """
        inputs = EncoderInputs(
            input_ids, numeric_values, attention_mask, cache, use_cache, position_ids
        )
        hidden, out = features(self, inputs, checked=True)
        return hidden, getattr(out, CACHE_NAME, None)

    def heads(
        self,
        hidden: torch.Tensor,
        mode: str | InferenceMode | Decoding = STANDARD,
        temperature: float | None = None,
        *,
        context: ReadoutContext | torch.Tensor | None = None,
        numbers: torch.Tensor | None = None,
    ) -> tuple[CauchyVector, ActionOutput]:
        """Abduction and Action on features: the decision distributions of a mode.

        ``U = Abduction(z)``, then :meth:`cauchylin.nn.Action.forward`: the mode's decision input
        ``U'``, ``S = W_cls U' + b_cls`` and ``Y = W_reg U' + b_reg``. A generation loop takes its
        step with :meth:`step` instead.

        Args:
            hidden: ``[..., H]`` features from :meth:`encode`.
            mode: an inference mode of :data:`cauchylin.nn.MODES`, or a checked
                :class:`cauchylin.nn.modes.Decoding` (:meth:`~cauchylin.nn.modes.Decoding.make`),
                which carries every decoding option: the temperature, the ``generator`` of the
                random modes, a shared mode's fixed draw (``eps_seed``, ``eps_noise``).
            temperature: ``T >= 0`` of a mode given by name (default ``config.temperature``).
            context: the positions' :class:`~cauchylin.nn.readouts.ReadoutContext`
                (:meth:`readout_context`), or their ``[...]`` context codes alone
                (:meth:`context_codes`): where the model has a solved readout for a context,
                ``Y`` is that readout's (:mod:`cauchylin_hf.readouts`); None keeps the shared
                ``W_reg`` everywhere.
            numbers: ``[..., S]`` the positions' earlier numbers beside codes given alone
                (readouts solved with ``config.readout_numbers > 0`` read them).

        Returns:
            ``(U, action_output)``: ``U`` ``[..., C]`` and the
            :class:`cauchylin.nn.ActionOutput` (``loc_S``, ``scale_S``, ``predict()``, ...).

        Raises:
            ValueError: bad options (see :meth:`cauchylin.nn.modes.Decoding.make`), a shared mode
                given by name (its draw travels in a ``Decoding``), a temperature beside a
                ``Decoding``, or ``numbers`` beside a ``ReadoutContext``.

        Example:
            >>> import torch
            >>> from cauchylin_hf.testing import tiny_base_model
            >>> base = tiny_base_model("qwen2")
            >>> model = CauchyLMForCausalLM.from_base(base, num_token_id=299)
            >>> ids = torch.tensor([[5, 6, 7]])
            >>> U, act = model.heads(model.encode(ids)[0], "causal")
            >>> tuple(U.loc.shape), tuple(act.loc_S.shape), tuple(act.loc_Y.shape)
            ((1, 3, 32), (1, 3, 300), (1, 3))
            >>> bool((act.loc_S - base(ids).logits).abs().max() < 1e-4)  # init: loc_S = logits
            True
            >>> round(U.scale.mean().item(), 4)  # scale_U = gamma_init
            0.01
        """
        U = individual(self, hidden)
        decoding = self._decoding(mode, temperature, U.shape)
        codes, numbers = ReadoutContext.of(context, numbers) or (None, None)
        return U, self.action(U, decoding, context=codes, numbers=numbers)

    def step(
        self,
        hidden: torch.Tensor,
        decoding: Decoding | str | InferenceMode = STANDARD,
        *,
        return_distributions: bool = False,
        context: ReadoutContext | torch.Tensor | None = None,
        numbers: torch.Tensor | None = None,
    ) -> tuple[CauchyVector, ActionStep]:
        """One generation step on features: the next token and its value, in a mode.

        ``U`` as in :meth:`heads`, then :meth:`cauchylin.nn.Action.step` (the token and, where
        ``<NUM>`` is chosen, ``loc_Y`` as its value): the seam of generation loops
        (:func:`cauchylin_hf.generation.generate` passes one checked
        :class:`cauchylin.nn.modes.Decoding`).

        Args:
            hidden: ``[B, H]`` features of the last position (from :meth:`encode`).
            decoding: the checked :class:`cauchylin.nn.modes.Decoding` that carries every
                decoding option (temperature, generator, ``top_k``/``top_p``, a shared mode's
                draw; :meth:`cauchylin.nn.modes.Decoding.make`), or a mode's name (or its
                record) to run at ``config.temperature`` without options.
            return_distributions: also compute ``scale_S`` and ``scale_Y``.
            context: the positions' readout context (as in :meth:`heads`; codes ``[B]``).
            numbers: ``[B, S]`` their earlier numbers beside codes given alone.

        Returns:
            ``(U, step)``: ``U`` ``[B, C]`` and the :class:`cauchylin.nn.ActionStep` (``ids``,
            ``values``, ``loc_S``, ...).

        Raises:
            ValueError: an unknown mode, or a mode name that needs options (a shared mode's
                draw: pass a :class:`cauchylin.nn.modes.Decoding`).

        Example:
            >>> import torch
            >>> from cauchylin.nn.modes import Decoding
            >>> from cauchylin_hf.testing import tiny_base_model
            >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
            >>> hidden = model.encode(torch.tensor([[5, 6, 7]]))[0][:, -1]
            >>> U, step = model.step(hidden, "causal")
            >>> bool(torch.equal(step.ids, model.heads(hidden, "causal")[1].next_token()))
            True
            >>> noise = torch.zeros(1, 32)  # shared_noise with a zero draw: the causal choice
            >>> d = Decoding.make("shared_noise", 1.0, shape=(1, 32), eps_noise=noise)
            >>> bool(torch.equal(model.step(hidden, d)[1].ids, step.ids))
            True
        """
        U = individual(self, hidden)
        codes, numbers = ReadoutContext.of(context, numbers) or (None, None)
        out = self.action.step(
            U,
            self._decoding(decoding, None, U.shape),
            num_token_id=self.config.num_token_id,
            return_distributions=return_distributions,
            context=codes,
            numbers=numbers,
        )
        return U, out

    def _decoding(
        self, mode: str | InferenceMode | Decoding, temperature: float | None, shape: Any
    ) -> Decoding:
        """The checked :class:`~cauchylin.nn.modes.Decoding` of a call, resolved once: the
        given one, or the mode's at ``temperature`` (default ``config.temperature``) for ``U``
        of ``shape``."""
        if isinstance(mode, Decoding):
            if temperature is not None:
                raise ValueError(
                    "with a Decoding, its options travel in it: do not pass temperature as well"
                )
            return mode
        spec = get_mode(mode)
        if spec.draw is not None:
            raise ValueError(
                f"mode {spec.name!r} reads a fixed draw ({spec.draw.name}) that travels in a "
                f"Decoding: pass mode=Decoding.make({spec.name!r}, temperature, "
                f"shape={tuple(shape)}, {spec.draw.name}=...) (cauchylin.nn.modes.Decoding)"
            )
        t = self.config.temperature if temperature is None else temperature
        return Decoding.make(spec, t, shape=shape)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        numeric_values: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        target_values: torch.Tensor | None = None,
        cache: Any = None,
        use_cache: bool | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        mode: str | InferenceMode | Decoding | None = None,
        temperature: float | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        return_distributions: bool | None = None,
        context: ReadoutContext | torch.Tensor | None = None,
        **kwargs: Any,
    ) -> CauchyLMOutput:
        r"""Distributions of the next token and value at every position, and the training loss.

        **Labels and the loss.** ``labels`` and ``target_values`` are aligned with the input
        positions (unshifted; ``labels = input_ids`` with ``-100`` at padding) or pre-shifted as
        transformers' ``shift_labels``; :func:`cauchylin_hf.loss.shifted_causal_loss` shifts them
        (position ``i`` predicts ``labels[:, i + 1]``) and computes ``cls_loss + lambda *
        reg_loss``, :meth:`cauchylin.nn.Action.loss` with the config's settings
        ([The total loss][the-total-loss]). No ``[N, V]`` tensor is formed: the
        class-score fields of the output stay None unless ``return_distributions=True``.

        Args:
            input_ids: ``[B, L]`` token ids (``<NUM>`` where numbers were).
            numeric_values: ``[B, L]`` float values at ``<NUM>`` positions, 0 elsewhere.
            attention_mask: ``[B, L_past + L]`` 1 for tokens, 0 for padding.
            labels: ``[B, L]`` unshifted target ids, ``-100`` to ignore.
            target_values: ``[B, L]`` unshifted regression targets (default ``numeric_values``).
            cache: the backbone's KV cache (``past_key_values``, its name before transformers
                5.24, is accepted too; give one of them).
            use_cache: return the cache (default: False with labels, else the base's default).
            position_ids: ``[B, L]`` positions.
            inputs_embeds: ``[B, L, H]`` base embeddings instead of ``input_ids``.
            mode: inference mode of the returned distributions (default ``"standard"``), or a
                :class:`cauchylin.nn.modes.Decoding` that carries the temperature, the
                ``generator`` of the random modes and a shared mode's fixed draw
                (``Decoding.make("sampling", 1.0, generator=g)``).
            temperature: ``T`` of a mode given by name (default ``config.temperature``).
            logits_to_keep: compute the distributions only for the last ``k`` positions (``0``:
                all) or for the given position indices, as in transformers.
            return_distributions: with labels, also return the class scores (``[B, L, V]``).
            context: the fed positions' :class:`~cauchylin.nn.readouts.ReadoutContext` (or
                its codes alone) for the per-context readouts of ``loc_Y``/``scale_Y``, read
                off the whole sequence: :meth:`readout_context`, with a cache ``.at((slice(None),
                slice(-L, None)))`` of it. Default: read off ``input_ids`` and
                ``numeric_values`` (with a cache only positions whose ``k`` tokens were all fed
                have a code, and none where the readouts read earlier numbers).
            **kwargs: ``return_dict`` (a :class:`CauchyLMOutput`, the default, or its tuple);
                ``shift_labels``, ``[B, L]`` labels already aligned with the predicting
                positions (transformers' convention), used instead of ``labels`` with
                ``target_values`` pre-shifted too; the rest goes to the backbone
                (``output_hidden_states``, ``output_attentions``).

        Returns:
            :class:`CauchyLMOutput` (or its tuple).

        Raises:
            ValueError: bad shapes, ``input_ids`` outside the embedding rows, labels outside
                the OvR classes, an unknown mode, both ``cache`` and ``past_key_values``, more
                positions than a base with learned position embeddings has, ``shift_labels``
                with ``numeric_values`` but without (pre-shifted) ``target_values``, a
                non-finite ``U`` (the message names the first NaN or infinite weight: a training
                that diverged), or an option that travels in a record (``generator``,
                ``eps_seed``, ``eps_noise`` in a ``Decoding``; ``context_numbers`` in a
                ``ReadoutContext``).

        Example:
            >>> import torch
            >>> from cauchylin_hf.testing import tiny_base_model
            >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
            >>> ids = torch.tensor([[5, 299, 7]])
            >>> vals = torch.tensor([[0.0, 3.5, 0.0]])
            >>> out = model(ids, numeric_values=vals, labels=ids)
            >>> out.loss.shape, out.loc_S is None, tuple(out.loc_U.shape)
            (torch.Size([]), True, (1, 3, 32))
        """
        _refuse_moved_options(kwargs)
        shift_labels = kwargs.pop("shift_labels", None)
        cache = resolve_cache(cache, kwargs.pop("past_key_values", None))
        loss_labels = labels if shift_labels is None else shift_labels
        if loss_labels is not None and use_cache is None:
            use_cache = False
        inputs = EncoderInputs(
            input_ids, numeric_values, attention_mask, cache, use_cache, position_ids, inputs_embeds
        )
        check_inputs(self, inputs)
        hidden, bb = features(self, inputs, **kwargs)
        fields: dict[str, Any] = {}
        want_dists = loss_labels is None or bool(return_distributions)
        if loss_labels is not None:
            U_all = individual(self, hidden)
            loss = shifted_causal_loss(
                self.action,
                self.config,
                U_all,
                loss_labels,
                target_values,
                numeric_values,
                attention_mask,
                pre_shifted=shift_labels is not None,
            )
            fields.update(loss_fields(loss, None if want_dists else U_all))
        if want_dists:
            if context is None:
                context = forward_context(self, input_ids, numeric_values, attention_mask, cache)
            fields.update(self._distributions(hidden, logits_to_keep, mode, temperature, context))
        # Built once, so that the tuple form follows the field order (loss, ..., logits, ...).
        fields[CACHE_NAME] = getattr(bb, CACHE_NAME, None)
        return CauchyLMOutput(
            **fields,
            hidden_states=getattr(bb, "hidden_states", None),
            attentions=getattr(bb, "attentions", None),
        )

    def _distributions(
        self,
        hidden: torch.Tensor,
        logits_to_keep: int | torch.Tensor,
        mode: str | InferenceMode | Decoding | None,
        temperature: float | None,
        context: ReadoutContext | torch.Tensor | None,
    ) -> dict[str, Any]:
        """The distributions of the kept positions (``logits_to_keep``) in the mode, resolved
        once into a ``Decoding``, as output fields; ``context`` is that of every position."""
        keep = _positions_to_keep(logits_to_keep)
        kept = slice_logits_to_keep(hidden, keep)
        context = ReadoutContext.of(context)
        if context is not None:
            codes, numbers = context
            context = ReadoutContext(
                slice_logits_to_keep(codes[..., None], keep)[..., 0],
                None if numbers is None else slice_logits_to_keep(numbers, keep),
            )
        shape = (*kept.shape[:-1], self.action.causal_size)
        decoding = self._decoding(mode or STANDARD, temperature, shape)
        U, act = self.heads(kept, decoding, context=context)
        return distribution_fields(U, act)


# ============================================================================================
# Helpers
# ============================================================================================

_MOVED_OPTIONS = {
    "generator": "the decoding options travel in a Decoding: "
    "mode=Decoding.make(mode, temperature, generator=...) (cauchylin.nn.modes.Decoding)",
    "eps_seed": "a shared mode's fixed draw travels in a Decoding: "
    "mode=Decoding.make(mode, temperature, shape=..., eps_seed=...) (cauchylin.nn.modes.Decoding)",
    "eps_noise": "a shared mode's fixed draw travels in a Decoding: "
    "mode=Decoding.make(mode, temperature, shape=..., eps_noise=...) (cauchylin.nn.modes.Decoding)",
    "context_numbers": "the earlier numbers travel with the codes: "
    "context=model.readout_context(input_ids, numeric_values, attention_mask)",
}


def _refuse_moved_options(kwargs: dict[str, Any]) -> None:
    """One line for an option ``forward`` takes inside a record (else the backbone would get
    it, and might ignore it)."""
    for name, where in _MOVED_OPTIONS.items():
        if name in kwargs:
            raise ValueError(f"forward got {name}: {where}")


def _positions_to_keep(logits_to_keep: int | torch.Tensor) -> int | torch.Tensor:
    """``logits_to_keep`` checked: index tensors as given, a count as an int ``>= 0``."""
    if isinstance(logits_to_keep, torch.Tensor):
        return logits_to_keep
    k = int(logits_to_keep)
    if k < 0:
        raise ValueError(f"logits_to_keep must be >= 0, got {k}")
    return k


# ``AutoModelForCausalLM``/``AutoModel.from_pretrained`` load a saved causal model as this class
# (:mod:`cauchylin_hf.auto_classes` has this module imported with those Auto classes).
AutoModelForCausalLM.register(CauchyLMConfig, CauchyLMForCausalLM, exist_ok=True)
AutoModel.register(CauchyLMConfig, CauchyLMForCausalLM, exist_ok=True)
