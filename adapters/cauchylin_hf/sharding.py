r"""Sharded training of :class:`~cauchylin_hf.model.CauchyLMForCausalLM` with FSDP2.

FSDP2 (``torch.distributed.fsdp.fully_shard``) splits every parameter along its first dimension
across the processes of a mesh (a ``DTensor`` with placement ``Shard(0)``), gathers one *unit*
of parameters just before that unit computes and frees it after. :func:`shard_model` chooses the
units for the causal language model:

* **one unit per decoder layer**: the modules whose class name is in the backbone's
  ``_no_split_modules`` (``Qwen2DecoderLayer``, ``LlamaDecoderLayer``, ``GPT2Block``, ...; the
  model copies the list from its backbone), the rule transformers and accelerate use;
* **one unit per head module**, ``numeric_embedding``, ``abduction`` and ``action``
  (:data:`~cauchylin_hf.heads_io.HEAD_MODULES`), each with a mixed-precision policy of its own
  that keeps the heads in their dtype (float32 by default);
* **the root unit**, the rest: the token embedding, the final norm (and GPT-2's position
  embedding), gathered for the whole step as FSDP2 does for every root.

Why the heads are not left in the root unit (where an automatic wrapping by
``_no_split_modules`` puts them, since ``action.classifier`` is not
``get_output_embeddings()``):

* **dtype.** FSDP2 gathers one unit in one dtype and refuses a unit whose trainable parameters
  differ (``AssertionError: FSDP expects uniform original parameter dtype but got
  {torch.bfloat16, torch.float32}``), and a mixed-precision policy on the root would cast the
  float32 heads to bfloat16 for every product. Units of their own compute the heads in float32
  next to a bfloat16 backbone.
* **memory.** ``W_cls`` is ``[V, C]``: 136 M values for Qwen2.5-0.5B, more than a quarter of the
  model. In the root unit it stays gathered from the first layer's forward to the end of the
  backward; in its own unit it is gathered for the heads' forward and backward only.
* **three units, not one group.** ``numeric_embedding`` runs before the first decoder layer and
  ``abduction``/``action`` after the last; one group of the three would keep ``W_cls`` gathered
  through the whole backbone as well. ``numeric_embedding`` holds two ``[H]`` vectors, so its
  gather costs one small message.
* **calls that are not ``forward``.** FSDP2 gathers a unit in its ``forward`` hooks. The training
  loss is ``action.loss`` and a generation step ``action.step``; :func:`shard_model` registers
  both (and the root's ``encode``, which :func:`cauchylin_hf.generation.generate` calls) with
  ``torch.distributed.fsdp.register_fsdp_forward_method`` (see :data:`FORWARD_METHODS`).

``abduction`` and ``action`` keep their parameters gathered after the forward
(``reshard_after_forward=False``): they are the last units of the forward and the first of the
backward, so freeing them would mean gathering them again at once.

**Mixed precision.** Two set-ups work: a model loaded in bfloat16 (the backbone in bfloat16, the
heads in float32 through the model's ``_keep_in_fp32_modules_strict``), sharded as it is; or a
float32 model with ``mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16,
reduce_dtype=torch.float32)``: the backbone's units gather and compute in bfloat16 and reduce
their gradients in float32, the optimizer steps the float32 shards, and the heads compute in
float32. The root unit never casts the model's inputs (``cast_forward_inputs=False``): FSDP2
would otherwise round ``numeric_values`` and ``target_values`` to bfloat16 (8 significant bits:
12.37 becomes 12.375) before the regression loss sees them.

**Checkpoints.** :func:`full_state_dict` gathers the full (unsharded) state dict on rank 0, and
:func:`save_full_checkpoint` writes it as an ordinary ``save_pretrained`` folder that
:meth:`CauchyLMForCausalLM.from_pretrained <cauchylin_hf.model.CauchyLMForCausalLM.from_pretrained>`
reads in one process; to resume sharded, load it on every rank and call :func:`shard_model`
again. The optimizer's state is not part of it.

Commands, the launcher and what was measured: the documentation page "Scaling out"
(``docs/scaling.md``).

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

FORWARD_METHODS: dict[str, tuple[str, ...]] = {"": ("encode",), "action": ("loss", "step")}
"""Methods other than ``forward`` that gather their unit's parameters, by module name (``""``:
the model): the training loss (``action.loss``), a generation step (``action.step``) and the
features (``encode``) are called directly, not through ``forward``."""

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
            the current accelerator (the CPU without one). A 2-D mesh gives HSDP.
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
        device = torch.accelerator.current_accelerator() or torch.device("cpu")
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
