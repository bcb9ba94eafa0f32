r"""Sharded training of :class:`~cauchylin_hf.model.CauchyLMForCausalLM` with FSDP2.

FSDP2 (``torch.distributed.fsdp.fully_shard``) splits every parameter along its first dimension
across the processes of a mesh (a ``DTensor`` with placement ``Shard(0)``) and gathers one
*unit* of parameters just before that unit computes. :func:`shard_model` makes these units:

* one per **decoder layer**: the modules whose class name is in the backbone's
  ``_no_split_modules`` (``Qwen2DecoderLayer``, ``GPT2Block``, ...), found by
  :func:`decoder_layers`;
* one per **head module**, ``numeric_embedding``, ``abduction`` and ``action``
  (:data:`~cauchylin_hf.heads_io.HEAD_MODULES`), each in its own dtype (float32 by default), with
  ``action.loss``, ``action.step`` and the model's ``encode`` registered as forward methods
  (:data:`FORWARD_METHODS`);
* the **root**: the token embedding and the final norm. It never casts the model's inputs, so
  ``numeric_values`` and ``target_values`` reach the heads unrounded under a bfloat16 policy.

Why the heads get units of their own (FSDP2 refuses a unit of bfloat16 and float32 trainable
parameters; ``W_cls`` is the largest tensor of a small model), the mixed-precision set-ups, the
launch commands, the pitfalls and what the tests measured:
[Scaling out][sharded-training-with-fsdp2].

:func:`full_state_dict` gathers the whole state dict on rank 0 and :func:`save_full_checkpoint`
writes it as an ordinary ``save_pretrained`` folder, which
:meth:`CauchyLMForCausalLM.from_pretrained <cauchylin_hf.model.CauchyLMForCausalLM.from_pretrained>`
reads in one process.

Example:
    >>> import torch, torch.distributed as dist
    >>> from cauchylin_hf.model import CauchyLMForCausalLM
    >>> from cauchylin_hf.testing import tiny_base_model
    >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
    >>> sorted(shard_units(shard_model(model)))  # "" is the root unit
    ['', 'abduction', 'action', 'backbone.layers.0', 'backbone.layers.1', 'numeric_embedding']
    >>> dist.destroy_process_group()
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import (
    FSDPModule,
    MixedPrecisionPolicy,
    fully_shard,
    register_fsdp_forward_method,
)

from cauchylin import available_device

from .heads_io import HEAD_MODULES
from .model import CauchyLMForCausalLM

__all__ = [
    "FORWARD_METHODS",
    "decoder_layers",
    "full_state_dict",
    "save_full_checkpoint",
    "shard_model",
    "shard_units",
]

FORWARD_METHODS: dict[str, tuple[str, ...]] = {
    "": ("encode", "encode_checked"),
    "action": ("loss", "step"),
}
"""Methods other than ``forward`` that gather their unit's parameters, by module name (``""``:
the model): the training loss (``action.loss``), a generation step (``action.step``) and the
features (``encode``, and ``encode_checked`` in the generation loop) are called directly, not
through ``forward``."""

# Units whose parameters stay gathered between their forward and their backward: the heads run
# last in the forward and first in the backward.
_KEEP_GATHERED = ("abduction", "action")


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The decoder layers of a model: its modules whose class name is in ``_no_split_modules``.

    Args:
        model: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM` (or any transformers model).

    Returns:
        The modules, in ``named_modules()`` order (empty when the model names none).

    Example:
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("gpt2"), num_token_id=299)
        >>> sorted(model._no_split_modules), [type(m).__name__ for m in decoder_layers(model)]
        (['GPT2Block'], ['GPT2Block', 'GPT2Block'])
    """
    names = set(getattr(model, "_no_split_modules", None) or ())
    return [m for m in model.modules() if m is not model and type(m).__name__ in names]


def shard_model(
    model: CauchyLMForCausalLM,
    *,
    mesh: DeviceMesh | None = None,
    mp_policy: MixedPrecisionPolicy | None = None,
    reshard_after_forward: bool | int = True,
) -> CauchyLMForCausalLM:
    """Shard the model with FSDP2, in place: decoder layers, heads and root as units of their own.

    The units and why: see the module docstring. Call it on every process after
    ``torch.distributed.init_process_group`` (``torchrun`` sets the environment), with the same
    model on every process (checked: one sum per tensor is compared across the processes),
    build the optimizer from the sharded parameters afterwards, before any forward, and train
    with ``model(**batch).loss``. After a forward without a backward (evaluation, generation)
    the units that keep their parameters gathered (the root, ``abduction``, ``action``) hold the
    gathered tensors until their next backward; an optimizer built then would step copies.

    Args:
        model: the :class:`~cauchylin_hf.model.CauchyLMForCausalLM` (not yet sharded).
        mesh: the 1-D device mesh to shard over; default every process of the default group on
            :func:`cauchylin.available_device` (an accelerator only when one is present: the
            CPU for a CUDA build of torch on a machine without a GPU). A 2-D mesh gives HSDP.
        mp_policy: FSDP2's ``MixedPrecisionPolicy`` of the decoder layers and the root (the root
            never casts the inputs); default none. The heads keep their own dtype.
        reshard_after_forward: free the decoder layers' (and ``numeric_embedding``'s) gathered
            parameters after their forward (``True``), keep them (``False``) or reshard to a
            smaller group (an ``int``), as in ``fully_shard``. ``abduction`` and ``action`` keep
            theirs until their backward.

    Returns:
        The same model object, now an ``FSDPModule`` whose parameters are ``DTensor`` shards.

    Raises:
        ValueError: ``model`` is not a ``CauchyLMForCausalLM``, is already sharded, names no
            decoder layer in ``_no_split_modules``, or differs between the processes (FSDP,
            unlike DDP, does not copy rank 0's parameters: seed every process alike).
        RuntimeError: no ``mesh`` and no initialised default process group.

    Example:
        >>> import torch, torch.distributed as dist
        >>> from torch.distributed.fsdp import MixedPrecisionPolicy
        >>> from torch.distributed.tensor import DTensor
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
        >>> ids = torch.tensor([[5, 6, 7]])
        >>> with torch.no_grad():
        ...     before = model(ids).loc_S
        >>> policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        >>> model = shard_model(model, mp_policy=policy)
        >>> isinstance(model.action.classifier.weight, DTensor)
        True
        >>> with torch.no_grad():
        ...     after = model(ids).loc_S  # a bfloat16 backbone, float32 heads
        >>> after.dtype, bool((after - before).abs().max() < 0.1 * before.abs().max())
        (torch.float32, True)
        >>> dist.destroy_process_group()
    """
    if not isinstance(model, CauchyLMForCausalLM):
        raise ValueError(f"model must be a CauchyLMForCausalLM, got {type(model).__name__}")
    if any(isinstance(m, FSDPModule) for m in model.modules()):
        raise ValueError("model is already sharded (it holds an FSDPModule)")
    layers = decoder_layers(model)
    if not layers:
        raise ValueError(
            f"model names no decoder layer: _no_split_modules = "
            f"{getattr(model, '_no_split_modules', None)!r} matches none of its modules"
        )
    if mesh is None:
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                "no mesh and no default process group: call "
                "torch.distributed.init_process_group() first (torchrun sets its environment)"
            )
        # an accelerator only when one is present: a CUDA build on a CPU machine shards on the CPU
        device = available_device()
        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    _check_replicas(model, mesh)
    policy = mp_policy if mp_policy is not None else MixedPrecisionPolicy()
    for layer in layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard_after_forward)
    for name in HEAD_MODULES:
        keep = name in _KEEP_GATHERED
        fully_shard(
            getattr(model, name),
            mesh=mesh,
            mp_policy=MixedPrecisionPolicy(),
            reshard_after_forward=False if keep else reshard_after_forward,
        )
    root_policy = dataclasses.replace(policy, cast_forward_inputs=False)
    fully_shard(model, mesh=mesh, mp_policy=root_policy)
    for name, methods in FORWARD_METHODS.items():
        module = model.get_submodule(name)
        for method in methods:
            register_fsdp_forward_method(module, method)
    return model


def _check_replicas(model: nn.Module, mesh: DeviceMesh) -> None:
    """Refuse a model that differs between the processes (one sum per tensor, compared)."""
    params = list(model.parameters())
    if any(p.is_meta for p in params):  # nothing to compare yet (filled after sharding)
        return
    sums = torch.stack([p.detach().double().nansum().cpu() for p in params])
    both = torch.stack([sums, -sums]).to(mesh.device_type)
    for dim in range(mesh.ndim):
        dist.all_reduce(both, op=dist.ReduceOp.MAX, group=mesh.get_group(dim))
    both = both.cpu()
    names = [name for name, _ in model.named_parameters()]
    # both[0] is the largest sum over the processes, -both[1] the smallest.
    differ = [
        name
        for name, hi, lo, own in zip(names, both[0], both[1], sums, strict=True)
        if not (hi == own and -lo == own)
    ]
    if differ:
        raise ValueError(
            f"model differs between the processes ({len(differ)} tensors, e.g. {differ[0]}): "
            "FSDP shards each process's own copy, so build the same model everywhere (load the "
            "same checkpoint and call torch.manual_seed with the same seed before from_base, "
            "whose new heads draw random values)"
        )


def shard_units(model: nn.Module) -> dict[str, list[str]]:
    """The FSDP units of a sharded model and the parameters each gathers.

    A parameter belongs to the unit of its nearest ancestor that is an ``FSDPModule``.

    Args:
        model: a model sharded with ``fully_shard`` (e.g. by :func:`shard_model`).

    Returns:
        ``{unit module name: [parameter names]}``, ``""`` for the root unit, in module order.

    Raises:
        ValueError: ``model`` is not sharded (it is not an ``FSDPModule``).

    Example:
        >>> import torch.distributed as dist
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
        >>> units = shard_units(shard_model(model))
        >>> units[""]  # the heads are not in the root unit
        ['backbone.embed_tokens.weight', 'backbone.norm.weight']
        >>> units["action"][:3]
        ['action.b_noise', 'action.classifier.weight', 'action.classifier.bias']
        >>> dist.destroy_process_group()
    """
    if not isinstance(model, FSDPModule):
        raise ValueError(f"model is not sharded: {type(model).__name__} is not an FSDPModule")
    units = [name for name, m in model.named_modules() if isinstance(m, FSDPModule)]
    found: dict[str, list[str]] = {name: [] for name in units}
    for pname, _ in model.named_parameters():
        owner = max(
            (u for u in units if u == "" or pname.startswith(u + ".")),
            key=len,
        )
        found[owner].append(pname)
    return found


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The full (unsharded) state dict of a sharded model, on rank 0's CPU.

    A collective call: every process must make it. The shards are gathered one tensor at a time
    and moved to the CPU (``torch.distributed.checkpoint.state_dict.get_model_state_dict`` with
    ``full_state_dict=True, cpu_offload=True``), so only rank 0 holds the whole model, in its
    saved dtypes.

    Args:
        model: a model sharded with ``fully_shard`` (an unsharded model also works).

    Returns:
        ``{name: tensor}`` on rank 0 (plain CPU tensors); an empty dict on the other ranks.

    Example:
        >>> import torch, torch.distributed as dist
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
        >>> w = model.action.classifier.weight.detach().clone()
        >>> state = full_state_dict(shard_model(model))
        >>> type(state["action.classifier.weight"]).__name__, bool(torch.equal(state["action.classifier.weight"], w))
        ('Tensor', True)
        >>> dist.destroy_process_group()
    """
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    # Every value is a tensor: a model's state dict holds nothing else.
    return cast(dict[str, torch.Tensor], get_model_state_dict(model, options=options))


def save_full_checkpoint(
    model: CauchyLMForCausalLM, save_directory: str | os.PathLike, **kwargs: Any
) -> Path:
    """Save a sharded model as one ordinary checkpoint folder that ``from_pretrained`` reads.

    A collective call: every process gathers its shards (:func:`full_state_dict`), rank 0 writes
    ``config.json``, the generation config and the weights with ``save_pretrained`` (atomically:
    the folder holds the old checkpoint or the new one), and every process waits until the
    folder is complete. The weights keep their dtypes (a bfloat16 backbone, float32 heads). The
    optimizer's state is not saved.

    Args:
        model: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM`, sharded (or not).
        save_directory: the folder to write (created if needed).
        **kwargs: more ``save_pretrained`` arguments (``max_shard_size``, ...).

    Returns:
        The folder as a ``Path``.

    Raises:
        ValueError: ``model`` is not a ``CauchyLMForCausalLM`` or ``kwargs`` carries a
            ``state_dict`` (the gathered one is written).

    Example:
        >>> import tempfile, torch, torch.distributed as dist
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
        >>> ids = torch.tensor([[5, 6, 7]])
        >>> with torch.no_grad():
        ...     expected = model(ids).loc_S
        >>> folder = save_full_checkpoint(shard_model(model), tempfile.mkdtemp())
        >>> dist.destroy_process_group()
        >>> again = CauchyLMForCausalLM.from_pretrained(folder)  # one process, no FSDP
        >>> again.config.architectures, bool(torch.equal(again(ids).loc_S, expected))
        (['CauchyLMForCausalLM'], True)
    """
    if not isinstance(model, CauchyLMForCausalLM):
        raise ValueError(f"model must be a CauchyLMForCausalLM, got {type(model).__name__}")
    if "state_dict" in kwargs:
        raise ValueError("state_dict: the gathered full state dict is written; do not pass one")
    state = full_state_dict(model)
    distributed = dist.is_available() and dist.is_initialized()
    if not distributed or dist.get_rank() == 0:
        model.save_pretrained(save_directory, state_dict=state, **kwargs)
    if distributed:
        dist.barrier()
    return Path(os.fspath(save_directory))
