"""Heads-only checkpoints: the file format of the new layers saved apart from an unchanged base.

This module writes and reads the files; building a model from a base and a heads folder is
:func:`cauchylin_hf.attach.from_heads`.

A heads-only folder holds two files:

* ``cauchy_heads.safetensors`` — every tensor of ``numeric_embedding`` (``w_num`` and the
  ``<NUM>`` row offset ``num_token_delta``), ``abduction`` and ``action`` (``W_cls``, ``b_cls``,
  the regression head, ``b_noise``, the thresholds), plus ``extra_embedding_rows`` (``[n, H]``)
  when embedding rows were added beyond the base's (a ``<NUM>`` row on a base without spare
  rows);
* ``cauchy_heads_config.json`` — the :class:`~cauchylin_hf.config.CauchyLMConfig` (with the base's
  ``base_model_name_or_path`` and ``base_vocab_size``), the tensor list and a fingerprint of the
  base weights: for every backbone tensor its dtype, shape, the SHA-256 of its bytes and its
  float64 L2 norm (``base_tensors``).

The file names differ from ``config.json``/``model.safetensors`` on purpose: a heads-only folder
is never mistaken for a full checkpoint by ``from_pretrained``.

**The base check.** Heads only make sense on the base they were trained on.
:func:`base_mismatches` compares the fingerprint of a base with the recorded one, and
:func:`cauchylin_hf.attach.from_heads` refuses a mismatch (``strict_base=False`` turns the
refusal into a warning): a tensor of the same dtype must have the same bytes (SHA-256);
a tensor loaded in another dtype (a float32 base loaded in bfloat16) must have the same norm up
to the rounding of the coarser dtype (relative ``eps`` of that dtype). Files of format version 1
hold only the norm of all backbone weights; they still load, checked against that norm at the
bfloat16 rounding bound (``2**-8`` relative).

**Atomic saves.** :func:`write_heads` writes both files into a new folder next to the target, which
then takes the target's place (other files of an existing target are carried over), so an error or
a crash while writing leaves the previous heads in place, loadable (see
:mod:`cauchylin_hf.atomic_save`).

Size: dominated by ``W_cls`` (``[V, C]`` in the heads' dtype). For Qwen2.5-0.5B (``H = C = 896``,
``V = 151936``, 24 layers) ``W_cls`` alone is 544.5 MB in float32 and the whole heads file 551.6 MB
(137.9 M values), next to 2.53 GB for the full float32 model (494.0 M backbone values + the heads)
or 1.54 GB with a bfloat16 backbone.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from transformers import PreTrainedModel

from cauchylin.nn.readouts import INTEGER_BUFFERS

from ._backbone import input_embedding_weight
from .atomic_save import staged_folder
from .config import read_json_object

__all__ = [
    "HEADS_CONFIG_NAME",
    "HEADS_WEIGHTS_NAME",
    "HEAD_MODULES",
    "HeadsFile",
    "base_fingerprint",
    "base_mismatches",
    "check_head_tensors",
    "head_tensors",
    "read_heads",
    "write_heads",
]

HEAD_MODULES = ("numeric_embedding", "abduction", "action")
"""Names of the new submodules of the model (the ones heads-only files and PEFT's
``modules_to_save`` hold)."""

logger = logging.getLogger(__name__)

HEADS_WEIGHTS_NAME = "cauchy_heads.safetensors"
"""File of the head tensors."""
HEADS_CONFIG_NAME = "cauchy_heads_config.json"
"""File of the heads' config and metadata."""
_FORMAT = "cauchylin-heads"
_FORMAT_VERSION = 2  # 2: per-tensor base fingerprint (base_tensors); 1: one norm (base_fingerprint)
_EXTRA_ROWS = "extra_embedding_rows"
_REQUIRED_KEYS = ("format", "config", "base_vocab_size")
_V1_NORM_TOLERANCE = 2.0**-8  # bfloat16 rounding: the bound of the version-1 norm check
_CHUNK = 1 << 22  # elements per float64 chunk of a norm (no full-size float64 copy)


def _base_tensors(backbone: PreTrainedModel, rows: int) -> dict[str, torch.Tensor]:
    """The backbone's parameters by name (the embedding limited to the base's ``rows``)."""
    emb = input_embedding_weight(backbone)
    return {name: p[:rows] if p is emb else p for name, p in backbone.named_parameters()}


def _norm(t: torch.Tensor) -> float:
    """float64 L2 norm, summed in chunks."""
    flat = t.detach().reshape(-1)
    total = 0.0
    for chunk in flat.split(_CHUNK):
        total += float(chunk.double().square().sum())
    return math.sqrt(total)


def _sha256(t: torch.Tensor) -> str:
    """SHA-256 of a tensor's bytes (in its own dtype, C order)."""
    data = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
    return hashlib.sha256(data.data).hexdigest()


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def base_fingerprint(backbone: PreTrainedModel, rows: int) -> dict[str, dict[str, Any]]:
    """Per-tensor fingerprint of a base decoder: dtype, shape, SHA-256 of the bytes, L2 norm.

    Args:
        backbone: the base decoder (``model.backbone``, or the decoder of a loaded base).
        rows: the base's embedding rows; rows beyond them (an added ``<NUM>`` row, saved with the
            heads) are left out.

    Returns:
        ``{parameter name: {"dtype", "shape", "sha256", "norm"}}``, JSON-serialisable.

    Example:
        >>> from cauchylin_hf._backbone import split_causal_lm
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> backbone = split_causal_lm(tiny_base_model("qwen2"))[0]
        >>> fp = base_fingerprint(backbone, 300)
        >>> fp["embed_tokens.weight"]["shape"], len(fp["embed_tokens.weight"]["sha256"])
        ([300, 32], 64)
        >>> other = split_causal_lm(tiny_base_model("qwen2", seed=1))[0]
        >>> fp == base_fingerprint(other, 300)
        False
    """
    with torch.no_grad():
        return {
            name: {
                "dtype": _dtype_name(t.dtype),
                "shape": list(t.shape),
                "sha256": _sha256(t),
                "norm": _norm(t),
            }
            for name, t in _base_tensors(backbone, rows).items()
        }


def _fingerprint_mismatches(
    recorded: dict[str, Any], backbone: PreTrainedModel, rows: int
) -> list[str]:
    """How the backbone differs from a recorded :func:`base_fingerprint` (empty: the same)."""
    now = _base_tensors(backbone, rows)
    out = [f"{name}: missing from this base" for name in sorted(set(recorded) - set(now))]
    out += [f"{name}: not in the saved base" for name in sorted(set(now) - set(recorded))]
    with torch.no_grad():
        for name in sorted(set(recorded) & set(now)):
            rec, t = recorded[name], now[name]
            if not isinstance(rec, dict) or list(t.shape) != rec.get("shape"):
                saved_shape = rec.get("shape") if isinstance(rec, dict) else None
                out.append(f"{name}: shape {list(t.shape)}, saved {saved_shape}")
            elif _dtype_name(t.dtype) == rec.get("dtype"):
                if _sha256(t) != rec.get("sha256"):
                    out.append(f"{name}: other values (SHA-256 differs)")
            else:
                # Another dtype: equal up to rounding to the coarser one (relative eps / 2 per
                # entry, so the norm moves by at most eps / 2 relative; eps is the bound used).
                saved = getattr(torch, str(rec.get("dtype")), None)
                dtypes = [t.dtype, *([saved] if isinstance(saved, torch.dtype) else [])]
                eps = max(torch.finfo(d).eps for d in dtypes if d.is_floating_point)
                a, b = _norm(t), float(rec.get("norm", math.nan))
                if not abs(a - b) <= eps * max(abs(a), abs(b)) + 1e-30:
                    out.append(
                        f"{name}: norm {a:.9g} in {_dtype_name(t.dtype)}, saved {b:.9g} in "
                        f"{rec.get('dtype')} (beyond the rounding of the coarser dtype)"
                    )
    return out


def check_head_tensors(tensors: dict[str, torch.Tensor], source: str | os.PathLike) -> None:
    """Refuse head tensors that no training can produce: not floating point, or not finite.

    The per-context readouts' integer buffers (``action.readouts.contexts`` and
    ``action.readouts.counts``, :data:`cauchylin.nn.readouts.INTEGER_BUFFERS`) may be stored as
    integers or, as earlier releases saved them, as floats. A checkpoint whose ``W_cls`` was stored as integers, or whose ``b_noise`` or threshold is
    NaN (a corrupt or hand-edited file), would otherwise load cast or as it is and give wrong
    tokens without an error. Both loaders (:func:`read_heads`, ``from_pretrained``) call this.

    Args:
        tensors: ``{name: tensor}`` of head tensors (as stored, before any cast).
        source: the file or folder they came from (named in the error).

    Raises:
        ValueError: a tensor of a non-floating dtype or with a NaN or infinite entry (the
            message names the tensor and ``source``).

    Example:
        >>> import torch
        >>> check_head_tensors({"action.b_noise": torch.full((2,), 0.01)}, "heads")
        >>> check_head_tensors({"action.threshold": torch.tensor(float("nan"))}, "heads")
        Traceback (most recent call last):
        ...
        ValueError: heads: head tensor action.threshold holds NaN or infinite values (a corrupt checkpoint?)
    """
    integer = {f"action.readouts.{b}" for b in INTEGER_BUFFERS}
    for name, t in tensors.items():
        if name in integer and not t.is_floating_point() and not t.is_complex():
            continue
        if not t.is_floating_point():
            raise ValueError(
                f"{os.fspath(source)}: head tensor {name} is stored as {_dtype_name(t.dtype)}; "
                "head tensors are floating point (a corrupt or foreign checkpoint?)"
            )
        if not bool(torch.isfinite(t).all()):
            raise ValueError(
                f"{os.fspath(source)}: head tensor {name} holds NaN or infinite values (a "
                "corrupt checkpoint?)"
            )


def head_tensors(model: PreTrainedModel) -> dict[str, torch.Tensor]:
    """The tensors of the new layers (:data:`HEAD_MODULES`), by state-dict name.

    Args:
        model: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM`.

    Returns:
        ``{"numeric_embedding.w_num": ..., "action.b_noise": ..., ...}`` (the tensors
        themselves, not copies).

    Example:
        >>> from cauchylin_hf import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
        >>> tuple(head_tensors(model)["action.classifier.weight"].shape)
        (300, 32)
    """
    return {
        f"{name}.{key}": value
        for name in HEAD_MODULES
        for key, value in getattr(model, name).state_dict(keep_vars=True).items()
    }


def _head_state(model: PreTrainedModel) -> dict[str, torch.Tensor]:
    for name in HEAD_MODULES:
        module = getattr(model, name)
        if hasattr(module, "original_module") or hasattr(module, "modules_to_save"):
            raise ValueError(
                f"{name} is wrapped by PEFT: save the adapter with peft_model.save_pretrained(), "
                "or call merge_and_unload() first"
            )
    return {k: v.detach().contiguous().cpu() for k, v in head_tensors(model).items()}


def write_heads(model: PreTrainedModel, save_directory: str | os.PathLike) -> dict[str, int]:
    """Save the new layers of ``model`` (not the backbone) into ``save_directory``, atomically.

    Both files are written into a new folder next to ``save_directory``, which then replaces it
    (other files already in ``save_directory`` are kept); on any error the previous contents stay
    as they were (see the module docstring).

    Args:
        model: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM` (not PEFT-wrapped).
        save_directory: the folder to write (created if needed).

    Returns:
        ``{file name: size in bytes}`` of the two files written.

    Raises:
        ValueError: a PEFT-wrapped head, or ``save_directory`` is an existing file.
        OSError: the files cannot be written (nothing in ``save_directory`` changed).

    Example:
        >>> import tempfile
        >>> from cauchylin_hf import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
        >>> sorted(write_heads(model, tempfile.mkdtemp()))
        ['cauchy_heads.safetensors', 'cauchy_heads_config.json']
    """
    path = Path(os.fspath(save_directory))
    if path.exists() and not path.is_dir():
        raise ValueError(f"save_directory {str(path)!r} is a file, not a folder")
    cfg = model.config
    backbone = model.get_decoder()
    if any(p.requires_grad for p in backbone.parameters()):
        logger.warning(
            "the backbone is trainable: a heads-only checkpoint does not carry backbone changes"
        )
    state = _head_state(model)
    rows = cfg.base_vocab_size or cfg.vocab_size
    assert rows is not None  # a built model has a base config
    emb = input_embedding_weight(model)
    if emb.shape[0] > rows:
        state[_EXTRA_ROWS] = emb[rows:].detach().contiguous().cpu()
    meta = {
        "format": _FORMAT,
        "format_version": _FORMAT_VERSION,
        "base_model_name_or_path": cfg.base_model_name_or_path,
        "base_vocab_size": rows,
        "base_tensors": base_fingerprint(backbone, rows),
        "tensors": sorted(state),
        "config": cfg.to_dict(),
    }
    with staged_folder(path) as staging:
        save_file(state, str(staging / HEADS_WEIGHTS_NAME), metadata={"format": "pt"})
        with open(staging / HEADS_CONFIG_NAME, "w", encoding="utf-8") as f:
            f.write(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        sizes = {n: (staging / n).stat().st_size for n in (HEADS_WEIGHTS_NAME, HEADS_CONFIG_NAME)}
    return sizes


@dataclass(frozen=True, eq=False)
class HeadsFile:
    """A heads-only folder as read by :func:`read_heads`: checked, not yet on a model.

    Attributes:
        folder: the folder.
        config: the stored :class:`~cauchylin_hf.config.CauchyLMConfig` as a dict (its
            ``base_config`` a dict too).
        base_model_name_or_path: the base recorded at save time (None when none was).
        base_vocab_size: the base's embedding rows.
        version: the file format version (1 or 2).
        meta: the whole metadata object of ``cauchy_heads_config.json``.
        state: the head tensors by state-dict name (floating point and finite: checked).
        extra_rows: ``[n, H]`` embedding rows added beyond the base's (an added ``<NUM>`` row),
            or None.

    Example:
        >>> import tempfile
        >>> from cauchylin_hf import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> folder = tempfile.mkdtemp()
        >>> _ = CauchyLMForCausalLM.from_base(tiny_base_model(), num_token_id=299).save_heads(folder)
        >>> heads = read_heads(folder)
        >>> heads.version, heads.base_vocab_size, "action.b_noise" in heads.state
        (2, 300, True)
    """

    folder: Path
    config: dict[str, Any]
    base_model_name_or_path: str | None
    base_vocab_size: int
    version: int
    meta: dict[str, Any]
    state: dict[str, torch.Tensor]
    extra_rows: torch.Tensor | None


def read_heads(heads_directory: str | os.PathLike) -> HeadsFile:
    """Read and check a heads-only folder written by :func:`write_heads` (any format version).

    Args:
        heads_directory: the folder.

    Returns:
        :class:`HeadsFile`.

    Raises:
        ValueError: a folder that does not exist or is not a heads-only folder, or a heads file
            that is not valid (the message names it): unknown format or newer version, a
            malformed config, unreadable tensors, head tensors that are not floating point or
            not finite.

    Example:
        >>> read_heads("/no/such/folder")
        Traceback (most recent call last):
        ...
        ValueError: heads folder '/no/such/folder' does not exist
    """
    path = Path(os.fspath(heads_directory))
    if not path.is_dir():
        raise ValueError(f"heads folder {str(path)!r} does not exist")
    meta_file, weights_file = path / HEADS_CONFIG_NAME, path / HEADS_WEIGHTS_NAME
    if not meta_file.is_file() or not weights_file.is_file():
        raise ValueError(
            f"{str(path)!r} is not a heads-only folder (needs {HEADS_CONFIG_NAME} and "
            f"{HEADS_WEIGHTS_NAME}; a full checkpoint loads with from_pretrained)"
        )
    meta = read_json_object(meta_file)
    missing_keys = [key for key in _REQUIRED_KEYS if key not in meta]
    if missing_keys:
        raise ValueError(f"{meta_file} is not a heads config: it lacks {missing_keys}")
    version = meta.get("format_version", 1)
    if meta["format"] != _FORMAT or not isinstance(version, int) or version > _FORMAT_VERSION:
        raise ValueError(
            f"{meta_file} is not a supported heads file (format {meta['format']!r}, version "
            f"{version!r}; this version of cauchylin_hf reads {_FORMAT!r} up to version "
            f"{_FORMAT_VERSION})"
        )
    if not isinstance(meta["config"], dict) or not isinstance(meta["base_vocab_size"], int):
        raise ValueError(f"{meta_file}: 'config' must be an object and 'base_vocab_size' an int")
    stored = dict(meta["config"])
    if not isinstance(stored.get("base_config"), dict):
        raise ValueError(f"{meta_file}: the stored config has no base_config")
    if version >= 2 and not isinstance(meta.get("base_tensors"), dict):
        raise ValueError(f"{meta_file} lacks the base fingerprint 'base_tensors'")
    try:
        state = load_file(str(weights_file))
    except (SafetensorError, OSError) as exc:
        raise ValueError(f"cannot read {weights_file}: {exc}") from exc
    check_head_tensors(state, weights_file)
    extra = state.pop(_EXTRA_ROWS, None)
    name = meta.get("base_model_name_or_path")
    return HeadsFile(
        folder=path,
        config=stored,
        base_model_name_or_path=name if isinstance(name, str) and name else None,
        base_vocab_size=meta["base_vocab_size"],
        version=version,
        meta=meta,
        state=state,
        extra_rows=extra,
    )


def base_mismatches(heads: HeadsFile, backbone: PreTrainedModel, rows: int) -> list[str]:
    """How a base decoder differs from the one the heads were saved with (empty: the same).

    Format version 2 compares every tensor's SHA-256 (or, in another dtype, its norm up to the
    coarser dtype's rounding); version 1 one norm of all weights (bfloat16 rounding bound).

    Args:
        heads: the read heads folder.
        backbone: the base decoder they are about to be loaded on.
        rows: its embedding rows (``heads.base_vocab_size`` when it is the right base).

    Returns:
        One line per difference.

    Example:
        >>> import tempfile
        >>> from cauchylin_hf import CauchyLMForCausalLM
        >>> from cauchylin_hf._backbone import split_causal_lm
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> folder = tempfile.mkdtemp()
        >>> _ = CauchyLMForCausalLM.from_base(tiny_base_model(), num_token_id=299).save_heads(folder)
        >>> other = split_causal_lm(tiny_base_model(seed=1))[0]
        >>> len(base_mismatches(read_heads(folder), other, 300)) > 0
        True
    """
    if heads.version >= 2:
        return _fingerprint_mismatches(heads.meta["base_tensors"], backbone, rows)
    # Version 1: one float64 norm of all backbone weights.
    saved = heads.meta.get("base_fingerprint")
    logger.warning(
        "%s is a version-1 heads file: the base is checked by one weight norm only; save the "
        "heads again to record per-tensor hashes",
        heads.folder / HEADS_CONFIG_NAME,
    )
    if not isinstance(saved, (int, float)) or isinstance(saved, bool):
        return []
    with torch.no_grad():
        now = math.sqrt(sum(_norm(t) ** 2 for t in _base_tensors(backbone, rows).values()))
    if abs(now - saved) <= _V1_NORM_TOLERANCE * max(abs(now), abs(saved)):
        return []
    return [f"norm of all weights {now:.9g}, saved {saved:.9g}"]
