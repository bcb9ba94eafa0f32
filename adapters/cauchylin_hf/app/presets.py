"""The backbones of ``train --from-config``: the presets, and the settings of a ``config.json``.

Standard library only: the console script checks ``--from-config`` before torch and
transformers are imported (:func:`cauchylin_hf.app.checks.preflight`), and
:func:`cauchylin_hf.app.scratch.backbone_config` builds the config from the same settings.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["PRESETS", "backbone_settings"]

PRESETS: dict[str, dict[str, Any]] = {
    "qwen2-tiny": {
        "model_type": "qwen2",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 192,
        "max_position_embeddings": 512,
        "tie_word_embeddings": True,
    },
    "qwen2-small": {
        "model_type": "qwen2",
        "hidden_size": 128,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 384,
        "max_position_embeddings": 512,
        "tie_word_embeddings": True,
    },
}
"""Backbone presets of ``--from-config``: ``qwen2-tiny`` (H = 64, 2 layers; seconds per hundred
steps on a CPU) and ``qwen2-small`` (H = 128, 4 layers; the size of the full demo)."""


def backbone_settings(spec: str | os.PathLike[str]) -> dict[str, Any]:
    """The settings of a preset name or of a Hugging Face ``config.json``.

    Args:
        spec: a name in :data:`PRESETS`, or the path of a ``config.json`` (a file, or a folder
            holding one) with a ``model_type`` (``"qwen2"``, ``"llama"``, ...).

    Returns:
        A new dict of the settings, ``model_type`` among them.

    Raises:
        ValueError: an unknown preset, a file that is not a JSON object with a ``model_type``,
            or a size (``hidden_size``, ``num_hidden_layers``, ...) that is not a positive
            integer.
        FileNotFoundError: ``spec`` looks like a path but there is no such file.

    Example:
        >>> backbone_settings("qwen2-tiny")["hidden_size"]
        64
        >>> backbone_settings("qwen3-huge")
        Traceback (most recent call last):
        ...
        ValueError: --from-config 'qwen3-huge': not a preset (qwen2-tiny, qwen2-small) and not a config.json file
    """
    name = os.fspath(spec)
    if name in PRESETS:
        return dict(PRESETS[name])
    path = Path(name)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        if path.suffix != ".json" and os.sep not in name:
            raise ValueError(
                f"--from-config {name!r}: not a preset ({', '.join(PRESETS)}) and not a "
                "config.json file"
            )
        raise FileNotFoundError(f"config file not found: {str(path)!r}")
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not a JSON file: {exc}") from None
    except RecursionError:
        raise ValueError(f"{path} is not a JSON file: nested too deeply to parse") from None
    if not isinstance(settings, dict) or not isinstance(settings.get("model_type"), str):
        raise ValueError(f"{path} must be a JSON object with a 'model_type' (e.g. \"qwen2\")")
    for key in _SIZES:
        value = settings.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ValueError(f"{path}: {key!r} must be a positive integer, got {value!r:.40}")
    for whole, part in (
        ("hidden_size", "num_attention_heads"),
        ("num_attention_heads", "num_key_value_heads"),
    ):
        if whole == "hidden_size" and "head_dim" in settings:
            continue  # heads of their own size
        if whole in settings and part in settings and settings[whole] % settings[part]:
            raise ValueError(
                f"{path}: {whole!r} ({settings[whole]}) must be a multiple of {part!r} "
                f"({settings[part]})"
            )
    return settings


_SIZES = (  # the sizes of a decoder's config, each a positive integer where it is set
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "max_position_embeddings",
    "head_dim",
)
