"""The checks before a training resumes from a checkpoint: refused before any work when it would
fail or go wrong after the work began."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import torch
from torch import nn

from .holdout import trainable_count
from .tokenizer import NumericTokenizer
from .trainer_checkpoints import (
    OPTIMIZER_FILES,
    TRAINER_STATE_FILE,
    CheckpointError,
    check_checkpoint,
)

__all__ = ["check_resume", "inner_model"]


def inner_model(model: nn.Module) -> nn.Module:
    """The model a PEFT wrapper wraps (the model itself otherwise)."""
    base = getattr(model, "get_base_model", None)  # PEFT
    return cast(nn.Module, base()) if callable(base) else model


def _weight_differences(model: nn.Module, checkpoint: Path) -> tuple[list[str], list[str]]:
    """Where the checkpoint's ``model.safetensors`` does not fit ``model`` (its tensors that the
    model lacks, and the shapes that differ), and its parameters that hold a NaN or an infinity
    (a file damaged inside its data: safetensors keeps no checksum)."""
    from safetensors import safe_open

    path = checkpoint / "model.safetensors"
    inner = inner_model(model)
    own = {name: tuple(t.shape) for name, t in inner.state_dict().items()}
    if not path.is_file() or not own:
        return [], []
    parameters = {name for name, _ in inner.named_parameters()}
    found, broken = [], []
    with safe_open(str(path), framework="pt") as f:
        for name in f.keys():
            shape = tuple(f.get_slice(name).get_shape())
            if name not in own:
                found.append(f"{name}: in the checkpoint, not in the model")
            elif own[name] != shape:
                found.append(f"{name}: {list(shape)} in the checkpoint, {list(own[name])} here")
            elif name in parameters:
                tensor = f.get_tensor(name)
                if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                    broken.append(name)
    return found, broken


def check_resume(
    model: nn.Module,
    tokenizer: NumericTokenizer,
    resume: str,
    fresh_optimizer_state: bool,
    accept: str,
) -> int:
    """Refuse a resume that would fail or go wrong after the work began: a damaged checkpoint,
    weights of another size or model, another tokenizer, another set of trained parameters.
    Returns the checkpoint's step."""
    from transformers import TrainerState as _State

    check_checkpoint(resume, fresh_optimizer_state=fresh_optimizer_state, accept=accept)
    folder = Path(resume)
    where = f"checkpoint {resume!r}"
    try:
        step = int(_State.load_from_json(str(folder / TRAINER_STATE_FILE)).global_step)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise CheckpointError(
            f"{where}: {TRAINER_STATE_FILE} is not a state the Trainer reads "
            f"({str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__}); resume "
            "from another checkpoint (name its folder)"
        ) from None
    differ, broken = _weight_differences(model, folder)
    if broken:
        more = f" and {len(broken) - 1} more" if len(broken) > 1 else ""
        raise CheckpointError(
            f"{where}: model.safetensors holds NaN or infinite values in {broken[0]}{more} (a "
            "damaged file, or a training that diverged before it was written); resume from an "
            "earlier checkpoint (name its folder)"
        )
    if differ:
        more = f" and {len(differ) - 2} more" if len(differ) > 2 else ""
        raise CheckpointError(
            f"{where} holds the weights of another model ({'; '.join(differ[:2])}{more}): "
            "resume with the model (base, size, config) the training started with"
        )
    if (folder / "tokenizer.json").is_file():
        saved = NumericTokenizer.from_pretrained(folder)
        if saved.tokenizer.get_vocab() != tokenizer.tokenizer.get_vocab():
            sizes = (
                f"{len(saved)} tokens, {len(tokenizer)} now"
                if len(saved) != len(tokenizer)
                else f"{len(saved)} tokens both, not the same ones"
            )
            raise CheckpointError(
                f"{where} was trained with another tokenizer ({sizes}): resume with the "
                "tokenizer (and, for a tokenizer trained on the data, the data) the training "
                "started with"
            )
    optimizer = folder / OPTIMIZER_FILES[0]
    if optimizer.is_file():
        try:
            state = torch.load(optimizer, map_location="cpu", weights_only=True, mmap=True)
            groups = state["param_groups"]
            saved_count = sum(len(group["params"]) for group in groups)
        except Exception as exc:  # a damaged archive's pickle: anything torch.load raises
            raise CheckpointError(
                f"{where}: {OPTIMIZER_FILES[0]} cannot be read "
                f"({str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__}); resume "
                f"from another checkpoint, or delete the file and pass {accept}"
            ) from None
        count = trainable_count(model)
        if saved_count != count:
            raise CheckpointError(
                f"{where}: its optimizer state is for {saved_count} trained parameter tensors, "
                f"the model trains {count} now (was the backbone trained then and frozen now, or "
                "the other way round?): resume with the same trainable parameters"
            )
    return step
