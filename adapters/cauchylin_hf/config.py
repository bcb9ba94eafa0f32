"""``CauchyLMConfig``: the configuration of a causal language model built on a Hugging Face decoder.

The config holds two things:

* the **base decoder's config** (``base_config``, any config that ``AutoModel.from_config`` turns
  into a decoder: Qwen2, Llama, Mistral, GPT-2, ...), kept as a nested config object and written
  into ``config.json`` as a plain dict, plus where the base came from
  (``base_model_name_or_path``, used by heads-only checkpoints);
* the **causal settings** of the heads: the causal size, the initial Abduction scale ``gamma_init``, the exogenous noise ``b_noise_init``, the OvR thresholds,
  the regression gate ``alpha`` and weight ``reg_weight`` (lambda), the class set of the OvR sum,
  the ``<NUM>`` token, the training mode and temperature, backbone freezing, the ``w_num`` init
  and the dtype the heads compute in.

Everything that is derived from the base (hidden size, number of embedding rows) is read from
``base_config`` through read-only properties, so the two can never disagree.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, ClassVar, Final, cast

import torch
from transformers import AutoConfig, PreTrainedConfig
from transformers.configuration_utils import SubConfigSpec

from cauchylin._validation import finite_number, flag, integer, one_of
from cauchylin.levels import CALIBRATION_LEVELS
from cauchylin.nn.embedding import NUMERIC_ENCODINGS, W_NUM_INITS
from cauchylin.nn.modes import CAUSAL, STANDARD
from cauchylin.nn.readouts import MAX_CONTEXT_TOKENS
from cauchylin.value_space import VALUE_SPACES

__all__ = [
    "BASE_ATTRIBUTES",
    "CAUSAL_SETTINGS",
    "HEAD_DTYPES",
    "OVR_CLASS_SETS",
    "TRAINING_MODES",
    "W_NUM_INITS",
    "CauchyLMConfig",
    "read_json_object",
]

BASE_ATTRIBUTES = (
    "hidden_size",
    "vocab_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
)
"""Sizes a :class:`CauchyLMConfig` reads from its ``base_config``, so that tools that size caches
or check inputs from the top-level config find them; setting one on the config sets it on the
``base_config`` (the two never disagree). They are not constructor arguments."""

OVR_CLASS_SETS = ("all", "tokenizer")
"""Values of ``ovr_classes``: every embedding row, or the tokenizer's tokens plus ``<NUM>``."""

TRAINING_MODES = (STANDARD, CAUSAL)
"""Values of ``training_mode``: the standard mode at ``temperature``, or the causal mode."""


HEAD_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
"""Names accepted by ``head_dtype`` and the torch dtypes they stand for."""


def read_json_object(path: str | os.PathLike) -> dict[str, Any]:
    """Read a JSON file that must hold one object, with errors that name the file.

    Args:
        path: the file (``config.json``, a heads or tokenizer settings file).

    Returns:
        The object as a ``dict``.

    Raises:
        ValueError: the file cannot be read, is not UTF-8 JSON, is nested too deeply for Python's
            parser, or holds something other than an object (a list, a string, ...); the
            message names the file.

    Example:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp(), "config.json")
        >>> _ = path.write_text("[1, 2]")
        >>> read_json_object(path)
        Traceback (most recent call last):
        ...
        ValueError: .../config.json holds a JSON list, not an object: is it the right file?
    """
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name} is not valid JSON: {exc}") from exc
    except RecursionError:
        raise ValueError(f"{name} is nested too deeply to be a settings file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {name}: {exc}") from exc
    if not isinstance(data, dict):
        kinds: dict[type, str] = {list: "list", str: "string"}
        kind = kinds.get(type(data), type(data).__name__)
        raise ValueError(f"{name} holds a JSON {kind}, not an object: is it the right file?")
    return data


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _keep_python(value: Any, checked: float) -> Any:
    """``value`` itself if it is a Python number, else (a NumPy number) the checked float."""
    return value if isinstance(value, (int, float)) else checked


# (name, bounds) of the real-valued and integer settings, checked by cauchylin._validation.
_REAL_SETTINGS: Final[tuple[tuple[str, dict[str, Any]], ...]] = (
    ("gamma_init", {"minimum": 0.0, "exclusive": True}),
    ("b_noise_init", {}),
    ("threshold", {}),
    ("alpha", {"minimum": 0.0, "maximum": 1.0}),
    ("reg_weight", {"minimum": 0.0}),
    ("reg_scale_power", {"minimum": 0.0}),
    ("reg_scale_cutoff", {"minimum": 0.0, "exclusive": True}),
    ("reg_target_weight", {"minimum": 0.0}),
    ("temperature", {"minimum": 0.0}),
    ("classifier_lr_scale", {"minimum": 0.0, "exclusive": True}),
    ("w_num_scale", {"minimum": 0.0, "exclusive": True}),
    ("numeric_sigma", {"minimum": 0.0, "exclusive": True}),
)
_INT_SETTINGS: Final[tuple[tuple[str, dict[str, Any]], ...]] = (
    ("reg_context_tokens", {"minimum": 0, "maximum": 3}),
    ("readout_context_tokens", {"minimum": 1, "maximum": MAX_CONTEXT_TOKENS}),
    ("readout_contexts", {"minimum": 0}),
    ("readout_numbers", {"minimum": 0}),
    ("causal_size", {"minimum": 1}),
    ("tokenizer_size", {"minimum": 1}),
    ("base_vocab_size", {"minimum": 1}),
    ("num_token_id", {"minimum": 0}),
    ("numeric_frequencies", {"minimum": 1}),
)
# Settings that may also be None (a default chosen elsewhere).
_OPTIONAL = (
    "w_num_scale",
    "reg_scale_cutoff",
    "causal_size",
    "tokenizer_size",
    "base_vocab_size",
    "num_token_id",
)
_CHOICES: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (
    ("ovr_classes", OVR_CLASS_SETS),
    ("training_mode", TRAINING_MODES),
    ("w_num_init", tuple(W_NUM_INITS)),
    ("numeric_encoding", tuple(NUMERIC_ENCODINGS)),
    ("value_space", tuple(VALUE_SPACES)),
    ("head_dtype", tuple(HEAD_DTYPES)),
)


class CauchyLMConfig(PreTrainedConfig):
    """Configuration of :class:`~cauchylin_hf.model.CauchyLMForCausalLM`.

    Args:
        base_config: the base decoder's config (a ``PretrainedConfig`` or its ``to_dict()``; a
            dict must carry ``model_type``). Required to build a model; ``None`` only for an empty
            config object.
        base_model_name_or_path: where the base weights live (a local folder or a Hub name);
            recorded by :meth:`~cauchylin_hf.model.CauchyLMForCausalLM.from_base` and used by
            heads-only loading.
        base_vocab_size: number of embedding rows of the unchanged base (before a ``<NUM>`` row
            was added by resizing); set by ``from_base``. Defaults to the base config's
            ``vocab_size``.
        causal_size: C, the size of the individual representation U; ``None`` means
            ``hidden_size`` (C = H, the only setting where the init is exact).
        gamma_init: initial Abduction scale gamma_0 > 0 (scale_U = gamma_0 at init; default 0.01:
            with 10, the regression scale ``|W_reg| (scale_U + |b_noise|)`` starts far above the
            targets' spread and training shrinks ``W_reg`` instead of fitting; see the Training
            page's ablation).
        b_noise_init: initial value of every component of the exogenous noise b_noise (default
            0.01, for the same reason).
        threshold: initial OvR threshold tau_k (finite; default 0, so that ``P_k > 1/2`` exactly
            when ``loc_S > 0``: at 100 every ``P_k`` of a logit-sized ``loc_S`` stays far below
            1/2 and decisions are made through ``scale_S``).
        threshold_per_class: one threshold per class instead of one shared scalar.
        learnable_threshold: make the thresholds a trainable parameter (else a fixed buffer).
        alpha: gate floor of the regression loss, in [0, 1] (default 1: no gate; with 0 the
            gate ``P_<NUM>`` also switches the regression off where ``P_<NUM>`` is small)
            (gate = num_mask * (alpha + (1 - alpha) P_<NUM>)).
        reg_weight: lambda >= 0 in ``L = L_cls + lambda * L_reg``.
        reg_scale_power: beta >= 0 of the regression loss (default 0, the plain NLL's
            gradient); with ``beta > 0`` the location's gradient at each ``<NUM>`` target is
            multiplied by ``d^beta`` over its batch mean, ``d`` the
            spread of the numbers in its context, so that numbers whose context fixes them to a
            small spread do not outweigh the others by ``1 / d``; the loss value and the scale's
            gradient stay the Cauchy NLL's (:func:`cauchylin.losses.gated_regression_loss`, and
            the Training page's "Numbers in every context", which measures why it is not the
            default).
        reg_context_tokens: the tokens before a number that key its context, 0 to 3 (default
            2: in a table's text, the field's name): ``d`` is the median absolute deviation of
            the batch's numbers with the same key (when at least 3 are there), else the model's
            own ``scale_Y``; with 0 the model's ``scale_Y`` stands for ``d`` everywhere. The
            same keys name the contexts of ``reg_scale_cutoff``.
        reg_scale_cutoff: ``k > 0`` (default 20), or None: targets more than ``k`` scales from
            their location that are also outliers of their context in the batch, by residual
            or (with ``reg_context_tokens``) by a magnitude far above the context's targets
            (without context keys: by residual among the batch's numbers) pass no gradient to
            the scale, so that far outliers (gross errors in the training targets) do not push
            it up (the NLL's gradient in ``log scale_Y`` tends to -1 however far a target is);
            the loss value and the location's gradient are the NLL's
            (:func:`cauchylin.losses.gated_regression_loss`; None: the plain NLL's gradient).
        reg_target_weight: ``w >= 0`` (default 1): the weight of each text's last number (its
            target: a table's target column) in the regression term, against 1 for the numbers
            before it (:func:`cauchylin.losses.last_number_weights`); the Training page's
            "The target's weight" measures it on the benchmark tables.
        ovr_classes: ``"all"`` (every embedding row is an OvR class) or
            ``"tokenizer"`` (classes ``0 .. tokenizer_size - 1``: the tokenizer's tokens plus
            ``<NUM>``; spare rows are never predicted).
        tokenizer_size: number of ids the tokenizer (with ``<NUM>``) uses; required when
            ``ovr_classes="tokenizer"``.
        num_token: the ``<NUM>`` token's text.
        num_token_id: the ``<NUM>`` id, or ``None`` for a model without numeric input (the
            regression loss is then always 0).
        training_mode: ``"standard"`` (the standard mode at ``temperature``) or
            ``"causal"`` (T = 0) for the training loss.
        temperature: T >= 0 of the training loss and the default temperature of ``forward``.
        freeze_backbone: freeze the base decoder's parameters (default True): only the new
            layers train.
        w_num_init: ``w_num``'s initialisation: ``"random_unit"`` (a random unit direction),
            ``"normal"`` (``N(0, 1/H)`` entries) or ``"zeros"`` (see
            :class:`cauchylin.nn.NumericEmbedding`).
        w_num_scale: the norm of ``w_num`` at :meth:`~cauchylin_hf.model.CauchyLMForCausalLM.from_base`,
            as a multiple of the mean norm of the input embedding rows (default 0.25), so that a
            number shifts the ``<NUM>`` embedding by about a quarter of a token embedding per unit
            of ``ln(1 + |v|)`` and survives the backbone's first normalisation; ``None`` keeps
            the unit norm of ``w_num_init``. The periodic map ``P`` of
            ``numeric_encoding="periodic"`` is scaled by the same multiple of the embedding rows'
            norm.
        numeric_encoding: how a number enters the network (:class:`cauchylin.nn.NumericEmbedding`):
            ``"linear"`` (default: ``sign(v) ln(1 + |v|)`` times the direction ``w_num``) or
            ``"periodic"`` (that, plus a trainable linear map of ``numeric_frequencies`` sines
            and cosines of ``sign(v) ln(1 + |v|)`` at trainable frequencies).
        numeric_frequencies: ``K``, the frequencies of ``numeric_encoding="periodic"``
            (default 16).
        numeric_sigma: the standard deviation of the initial frequencies of
            ``numeric_encoding="periodic"``, per unit of ``sign(v) ln(1 + |v|)`` (default 1).
        classifier_lr_scale: learning-rate multiplier of the classification head (``W_cls``,
            ``b_cls``, learnable thresholds) in :func:`~cauchylin_hf.training.make_trainer` and
            :meth:`~cauchylin_hf.model.CauchyLMForCausalLM.parameter_groups` (default 10, measured:
            with 1 the text is poorly predicted within a normal budget).
        value_space: the space in which the regression value is Cauchy:
            ``"signed_log1p"`` (default: ``t = sign(y) ln(1 + |y|)``, the scale on which the
            numeric embedding reads numbers) or ``"identity"`` (raw numbers); see
            :mod:`cauchylin.value_space` and the measured comparison on the Training page.
        head_dtype: dtype of the heads and of the hidden states they read: ``"float32"``
            (default), ``"float64"``, ``"bfloat16"`` or ``"float16"``.
        readout_context_tokens: ``k`` in 1..3, the tokens ending at a position that name the
            context of the number it predicts (default 3: ``"-> price "`` is the tokens
            ``->``, `` price``, `` ``), the key of the per-context readouts and calibration
            (:mod:`cauchylin_hf.readouts`).
        readout_contexts: rows of the per-context readout table (set by
            :func:`~cauchylin_hf.readouts.solve_readouts` and
            :func:`~cauchylin_hf.readouts.calibrate`; 0: none). Not a setting to choose.
        readout_numbers: how many of the text's earlier numbers (the most recent first, in the
            value space) a solved readout reads beside the final hidden state (0: none, the
            hidden state alone); in a table written one row per text, the row's earlier
            columns: a linear regression on them inside the readout
            (:func:`cauchylin.nn.readouts.earlier_numbers`). Default 16.
        calibration_levels: the central-interval coverages the table can calibrate (default
            :data:`cauchylin.levels.CALIBRATION_LEVELS`).
        tie_word_embeddings: False (the default; leave it): ``W_cls`` is a copy of the base head
            that trains on its own, and the model has no output embedding to tie
            (``get_output_embeddings()`` is None).
        **kwargs: the usual ``PretrainedConfig`` arguments.

    Raises:
        ValueError: for a setting outside its domain (named in the message).

    Example:
        >>> from transformers import Qwen2Config
        >>> base = Qwen2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        ...                    num_key_value_heads=2, intermediate_size=64, vocab_size=300)
        >>> cfg = CauchyLMConfig(base_config=base, num_token_id=299)
        >>> cfg.hidden_size, cfg.causal_hidden_size, cfg.num_classes
        (32, 32, 300)
    """

    model_type = "cauchy_lm"
    sub_configs_defaults: ClassVar[dict[str, SubConfigSpec]] = {
        "base_config": SubConfigSpec(config_class=AutoConfig, model_type="qwen2", optional=True),
    }

    base_config: dict | PreTrainedConfig | None = None
    base_model_name_or_path: str | None = None
    base_vocab_size: int | None = None
    causal_size: int | None = None
    gamma_init: float = 0.01
    b_noise_init: float = 0.01
    threshold: float = 0.0
    threshold_per_class: bool = False
    learnable_threshold: bool = False
    alpha: float = 1.0
    reg_weight: float = 1.0
    reg_scale_power: float = 0.0
    reg_context_tokens: int = 2
    reg_scale_cutoff: float | None = 20.0
    reg_target_weight: float = 1.0
    ovr_classes: str = "all"
    tokenizer_size: int | None = None
    num_token: str = "<NUM>"
    num_token_id: int | None = None
    training_mode: str = STANDARD
    temperature: float = 1.0
    freeze_backbone: bool = True
    w_num_init: str = "random_unit"
    value_space: str = "signed_log1p"
    w_num_scale: float | None = 0.25
    numeric_encoding: str = "linear"
    numeric_frequencies: int = 16
    numeric_sigma: float = 1.0
    classifier_lr_scale: float = 10.0
    head_dtype: str = "float32"
    readout_context_tokens: int = 3
    readout_contexts: int = 0
    readout_numbers: int = 16
    calibration_levels: tuple[float, ...] | list[float] = CALIBRATION_LEVELS
    # The heads are never tied to the embeddings (W_cls is a copy that trains on its own).
    tie_word_embeddings: bool = False

    def __post_init__(self, **kwargs: Any) -> None:
        other_type = kwargs.get("model_type")
        if other_type is not None and other_type != self.model_type:
            # A base decoder's own config.json (from_pretrained on a plain checkpoint).
            raise ValueError(
                f"a config of model_type {other_type!r}, not {self.model_type!r}: a plain base "
                "checkpoint? Build the causal model on it with "
                "CauchyLMForCausalLM.from_base(<its folder>)"
            )
        forwarded = sorted(set(kwargs) & set(BASE_ATTRIBUTES))
        if forwarded:
            raise ValueError(
                f"{forwarded} are read from base_config and cannot be set on a CauchyLMConfig; "
                "set them on the base decoder's config"
            )
        if isinstance(self.base_config, dict) and "model_type" not in self.base_config:
            raise ValueError(
                "base_config must carry 'model_type' (use base_model.config.to_dict()), got keys "
                f"{sorted(self.base_config)[:8]}"
            )
        if self.base_config is not None and not isinstance(
            self.base_config, (dict, PreTrainedConfig)
        ):
            raise ValueError(
                f"base_config must be a PretrainedConfig, a dict or None, got "
                f"{type(self.base_config).__name__}"
            )
        # PretrainedConfig sets the attention implementation of every sub-config to this
        # config's (None unless attn_implementation is given): keep the base's own choice.
        base_impl = None
        if isinstance(self.base_config, PreTrainedConfig) and "attn_implementation" not in kwargs:
            base_impl = self.base_config._attn_implementation
        super().__post_init__(**kwargs)
        if base_impl is not None:
            cast(PreTrainedConfig, self.base_config)._attn_implementation = base_impl
        self._validate_settings()

    @classmethod
    def _dict_from_json_file(cls, json_file: str | os.PathLike) -> dict[str, Any]:
        """``config.json`` as a dict; a broken or non-object file raises a ValueError naming it."""
        return cast(dict[str, Any], cls._decode_special_floats(read_json_object(json_file)))

    # ------------------------------------------------------------------ validation

    def _validate_settings(self) -> None:
        # A NumPy number passes the checks and is stored as the Python number it equals, so the
        # config still saves as JSON.
        for name, bounds in _REAL_SETTINGS:
            value = getattr(self, name)
            if value is None and name in _OPTIONAL:
                continue
            checked = finite_number(name, value, **bounds)
            if not isinstance(value, (int, float)):
                setattr(self, name, checked)
        for name, int_bounds in _INT_SETTINGS:
            value = getattr(self, name)
            if value is None and name in _OPTIONAL:
                continue
            checked_int = integer(name, value, **int_bounds)
            if not isinstance(value, int):
                setattr(self, name, checked_int)
        for name in ("threshold_per_class", "learnable_threshold", "freeze_backbone"):
            flag(name, getattr(self, name))
        for name, allowed in _CHOICES:
            one_of(name, getattr(self, name), allowed)
        levels = self.calibration_levels
        if (
            not isinstance(levels, (list, tuple))
            or not levels
            or not all(_is_real(c) and 0 < c < 1 for c in levels)
            or list(levels) != sorted(set(levels))
        ):
            raise ValueError(
                f"calibration_levels must be increasing coverages in (0, 1), got {levels!r}"
            )
        self.calibration_levels = tuple(float(c) for c in levels)
        if not isinstance(self.num_token, str) or not self.num_token:
            raise ValueError(f"num_token must be a non-empty str, got {self.num_token!r}")
        k = self.num_token_id
        if self.ovr_classes == "tokenizer" and self.tokenizer_size is None:
            raise ValueError("ovr_classes='tokenizer' needs tokenizer_size (len of the tokenizer)")
        if self.base_config is None:
            return
        rows = self.vocab_size
        if rows is None:
            raise ValueError(
                f"base_config ({getattr(self.base_config, 'model_type', None)}) has no vocab_size: "
                "not a text decoder"
            )
        if k is not None and k >= rows:
            raise ValueError(
                f"num_token_id={k} is outside the embedding matrix ({rows} rows); resize the "
                "embeddings first (CauchyLMForCausalLM.from_base does this)"
            )
        size = self.tokenizer_size
        if self.ovr_classes == "tokenizer" and size is not None:
            if size > rows:
                raise ValueError(
                    f"tokenizer_size={self.tokenizer_size} exceeds the {rows} embedding rows"
                )
            if k is not None and k >= size:
                raise ValueError(
                    f"num_token_id={k} is not among the tokenizer_size={self.tokenizer_size} "
                    "OvR classes"
                )

    # ------------------------------------------------------------------ derived values

    @property
    def hidden_size(self) -> int | None:
        """H, the base decoder's hidden size (None without a base config)."""
        return self._from_base("hidden_size")

    @hidden_size.setter
    def hidden_size(self, value: int | None) -> None:
        self._to_base("hidden_size", value)

    @property
    def vocab_size(self) -> int | None:
        """Number of embedding rows of the backbone (the base's, plus any added ``<NUM>`` row)."""
        return self._from_base("vocab_size")

    @vocab_size.setter
    def vocab_size(self, value: int | None) -> None:
        self._to_base("vocab_size", value)

    @property
    def num_hidden_layers(self) -> int | None:
        """Number of decoder layers of the base (for tools that size caches from the config)."""
        return self._from_base("num_hidden_layers")

    @num_hidden_layers.setter
    def num_hidden_layers(self, value: int | None) -> None:
        self._to_base("num_hidden_layers", value)

    @property
    def num_attention_heads(self) -> int | None:
        """Attention heads of the base (GPT-2's ``n_head``), for cache and generation tools."""
        return self._from_base("num_attention_heads")

    @num_attention_heads.setter
    def num_attention_heads(self, value: int | None) -> None:
        self._to_base("num_attention_heads", value)

    @property
    def num_key_value_heads(self) -> int | None:
        """Key/value heads of the base (grouped-query attention), or None where it has none."""
        return self._from_base("num_key_value_heads")

    @num_key_value_heads.setter
    def num_key_value_heads(self, value: int | None) -> None:
        self._to_base("num_key_value_heads", value)

    @property
    def head_dim(self) -> int | None:
        """Size of one attention head when the base sets it (else None: ``H / heads``)."""
        return self._from_base("head_dim")

    @head_dim.setter
    def head_dim(self, value: int | None) -> None:
        self._to_base("head_dim", value)

    @property
    def max_position_embeddings(self) -> int | None:
        """Context length of the base (GPT-2's ``n_positions``)."""
        return self._from_base("max_position_embeddings")

    @max_position_embeddings.setter
    def max_position_embeddings(self, value: int | None) -> None:
        self._to_base("max_position_embeddings", value)

    def _from_base(self, name: str) -> Any:
        """``base_config.<name>`` (None without a base config or without that attribute)."""
        if self.base_config is None:
            return None
        return getattr(self.base_config, name, None)

    def _to_base(self, name: str, value: Any) -> None:
        """Set ``base_config.<name>``: the sizes are the base decoder's, this config shows them."""
        if not isinstance(self.base_config, PreTrainedConfig):
            raise ValueError(
                f"{name} is read from base_config, and this config has no base_config object to "
                "set it on"
            )
        setattr(self.base_config, name, value)

    @property
    def causal_hidden_size(self) -> int | None:
        """C: ``causal_size``, or H when it is None."""
        return self.causal_size if self.causal_size is not None else self.hidden_size

    @property
    def num_classes(self) -> int | None:
        """Number of OvR classes: ``vocab_size`` (``"all"``) or ``tokenizer_size``."""
        if self.ovr_classes == "tokenizer":
            return self.tokenizer_size
        return self.vocab_size

    @property
    def torch_head_dtype(self) -> torch.dtype:
        """``head_dtype`` as a ``torch.dtype``."""
        return HEAD_DTYPES[self.head_dtype]

    @property
    def loss_temperature(self) -> float:
        """Temperature of the training loss: 0 in ``"causal"`` mode, else ``temperature``."""
        return 0.0 if self.training_mode == CAUSAL else float(self.temperature)

    def get_text_config(self, decoder: bool | None = None, encoder: bool | None = None) -> Any:
        """The base decoder's config: generation, caches and resizing read the text model there.

        Args:
            decoder: accepted for ``PretrainedConfig`` compatibility; ignored (the base is a
                decoder).
            encoder: accepted for compatibility; ignored.

        Returns:
            ``base_config``, or ``self`` when no base config is set.

        Example:
            >>> from cauchylin_hf.testing import tiny_base_config
            >>> base = tiny_base_config("llama")
            >>> CauchyLMConfig(base_config=base).get_text_config() is base
            True
            >>> empty = CauchyLMConfig()
            >>> empty.get_text_config() is empty
            True
        """
        return self.base_config if self.base_config is not None else self


# Fields that from_base fills from the base and the tokenizer; every other field declared above
# is a causal setting (a new field becomes one without further changes).
_BASE_FIELDS = frozenset(
    {
        "base_config",
        "base_model_name_or_path",
        "base_vocab_size",
        "num_token",
        "num_token_id",
        "tie_word_embeddings",
    }
)

# Fields that training fills (the size of the solved readout table): state, not settings.
_STATE_FIELDS = frozenset({"readout_contexts"})

CAUSAL_SETTINGS: frozenset[str] = frozenset(
    f.name
    for f in dataclasses.fields(CauchyLMConfig)
    if f.name in vars(CauchyLMConfig).get("__annotations__", {})
    and f.name not in _BASE_FIELDS | _STATE_FIELDS
)
"""The settings of the heads that ``CauchyLMForCausalLM.from_base(base, **settings)`` accepts:
every field of :class:`CauchyLMConfig` except those taken from the base and the tokenizer."""

# ``AutoConfig.from_pretrained`` reads a saved ``model_type="cauchy_lm"`` as this class
# (:mod:`cauchylin_hf.auto_classes` has this module imported with ``AutoConfig``).
AutoConfig.register(CauchyLMConfig.model_type, CauchyLMConfig, exist_ok=True)
