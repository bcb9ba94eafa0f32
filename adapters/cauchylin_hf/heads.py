"""The head modules a :class:`~cauchylin_hf.config.CauchyLMConfig` describes, built empty.

The three heads of the causal model, in the config's sizes and head dtype: the numeric embedding
(with the ``<NUM>`` offset), Abduction and Action (with room for the per-context readouts the
config records). Their values come from :func:`cauchylin_hf.attach.init_heads` or a checkpoint.
"""

from __future__ import annotations

import torch

from cauchylin.nn import Abduction, Action, NumericEmbedding

from .config import CauchyLMConfig

__all__ = ["build_heads"]


def build_heads(config: CauchyLMConfig) -> tuple[NumericEmbedding, Abduction, Action]:
    """``(numeric_embedding, abduction, action)`` of the config's sizes, on the default device.

    On the meta device (``from_pretrained`` builds there) Abduction is built on the CPU and then
    moved: its init computes its bias value with ``.item()``, which a meta tensor cannot give.

    Args:
        config: a config with its base's sizes (``hidden_size``, ``causal_hidden_size``,
            ``num_classes``).

    Returns:
        The three modules.

    Example:
        >>> from cauchylin_hf.config import CauchyLMConfig
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> config = CauchyLMConfig(base_config=tiny_base_model("qwen2").config)
        >>> embedding, abduction, action = build_heads(config)
        >>> action.causal_size, action.num_classes
        (32, 300)
    """
    H, C, V = config.hidden_size, config.causal_hidden_size, config.num_classes
    assert H is not None and C is not None and V is not None  # set by the base config
    dtype = config.torch_head_dtype
    # The model checks numeric_values once in encode; the layer trusts them.
    embedding = NumericEmbedding(
        H,
        init=config.w_num_init,
        token_offset=True,
        encoding=config.numeric_encoding,
        frequencies=config.numeric_frequencies,
        sigma=config.numeric_sigma,
        validate_args=False,
        dtype=dtype,
    )
    if torch.get_default_device().type == "meta":
        with torch.device("cpu"):
            abduction = Abduction(H, C, gamma_init=config.gamma_init, dtype=dtype)
        abduction.to("meta")
    else:
        abduction = Abduction(H, C, gamma_init=config.gamma_init, dtype=dtype)
    action = Action(
        C,
        V,
        threshold=config.threshold,
        threshold_per_class=config.threshold_per_class,
        learnable_threshold=config.learnable_threshold,
        b_noise_init=config.b_noise_init,
        value_space=config.value_space,
        readout_contexts=config.readout_contexts,
        calibration_levels=tuple(config.calibration_levels),
        readout_numbers=int(getattr(config, "readout_numbers", 0)),
        dtype=dtype,
    )
    return embedding, abduction, action
