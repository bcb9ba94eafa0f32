"""Training script of the sharded-training test (``tests/cauchylin_hf/test_fsdp.py``).

Run by ``torchrun --nproc_per_node 2`` (CPU, gloo): every rank builds the same tiny Qwen2 causal
language model (seeded, backbone trainable), shards it with
:func:`cauchylin_hf.sharding.shard_model` and trains it with AdamW on its half of each global
batch. Three precisions, one after the other in the same processes:

* ``float32``: everything in float32;
* ``bfloat16``: the base loaded in bfloat16, the heads in float32 (the model's default
  ``head_dtype``);
* ``mixed``: a float32 model with ``MixedPrecisionPolicy(param_dtype=bfloat16,
  reduce_dtype=float32)`` on the backbone.

:func:`train` is also the one-process reference (``world=1``, no sharding; for ``mixed`` it
computes what that policy computes: the backbone's parameters rounded to bfloat16 for the
forward and backward, float32 gradients and optimizer step on float32 parameters).

Rank 0 writes ``--out`` (``torch.save``): per precision the per-step losses (the mean of the
ranks' losses), the final full state dict, the sharding of every parameter on every rank, the
dtypes the units computed in and the FSDP units; for ``float32`` also generations before and
after training on every rank, and the loss of a model reloaded from the saved checkpoint and
sharded again; the error of the naive wrapping (the whole model as one unit) of a bfloat16
backbone with float32 heads; the error of sharding models that differ between the ranks; the
warnings raised. Checkpoints go to ``--checkpoints/<precision>``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import warnings
from collections.abc import Iterator
from typing import Any

import torch

HIDDEN = 32
SEED = 0
VOCAB = 300
TEMPLATES = ("eggs",)
PRECISIONS = ("float32", "bfloat16", "mixed")
SAME_PROMPTS = ["3 boxes of 12 eggs hold", "7 boxes of 4 eggs"]
"""Every rank generates these (the usual eos stop)."""
RANK_PROMPTS = ["2 boxes of 6 eggs hold", "11 boxes of 20 eggs hold"]
"""Rank r generates ``RANK_PROMPTS[r]`` alone (every rank runs the same number of steps)."""
NEW_TOKENS = 6
EOS_BY_RANK = [[0], list(range(3, 300))]
"""End-of-sequence ids per rank: rank 1 stops at its first token, rank 0 (practically) never."""
LEARNING_RATE = 1e-2


def make_tokenizer() -> Any:
    """The numeric tokenizer over the tiny byte-level tokenizer (301 ids with ``<NUM>``)."""
    from cauchylin_hf.testing import tiny_tokenizer
    from cauchylin_hf.tokenizer import NumericTokenizer

    return NumericTokenizer(tiny_tokenizer(VOCAB))


def build_model(tokenizer: Any, precision: str) -> Any:
    """The tiny model, identical in every process (seeded), backbone trainable."""
    from cauchylin_hf.model import CauchyLMForCausalLM
    from cauchylin_hf.testing import tiny_base_model

    dtype = torch.bfloat16 if precision == "bfloat16" else torch.float32
    base = tiny_base_model(
        "qwen2", vocab_size=len(tokenizer), hidden_size=HIDDEN, seed=SEED, dtype=dtype
    )
    torch.manual_seed(SEED)
    # classifier_lr_scale=1 and reg_scale_power=0 for the reasons given in ddp_worker.py (float32
    # trajectories compared; per-rank batch statistics in the default regression loss).
    return CauchyLMForCausalLM.from_base(
        base, tokenizer, freeze_backbone=False, classifier_lr_scale=1.0, reg_scale_power=0.0
    )


def make_batches(tokenizer: Any, steps: int, global_batch: int) -> list[dict[str, torch.Tensor]]:
    """``steps`` global batches of one corpus template (equal token and ``<NUM>`` counts)."""
    from cauchylin_hf.app.corpus import generate_sentences
    from cauchylin_hf.data import NumericDataCollator, NumericDataset

    texts = generate_sentences(steps * global_batch, seed=SEED, templates=list(TEMPLATES))
    data = NumericDataset.from_texts(texts, tokenizer, name="fsdp_texts")
    nums = {int((data[i]["input_ids"] == tokenizer.num_token_id).sum()) for i in range(len(data))}
    if len(set(data.lengths)) != 1 or len(nums) != 1:
        raise RuntimeError(f"examples differ in length {set(data.lengths)} or <NUM> count {nums}")
    collate = NumericDataCollator(tokenizer)
    return [
        collate([data[i] for i in range(k * global_batch, (k + 1) * global_batch)])
        for k in range(steps)
    ]


def rank_part(batch: dict[str, torch.Tensor], rank: int, world: int) -> dict[str, torch.Tensor]:
    """Rank ``rank``'s consecutive share of a global batch."""
    b = next(iter(batch.values())).shape[0] // world
    return {k: v[rank * b : (rank + 1) * b] for k, v in batch.items()}


@contextlib.contextmanager
def bf16_backbone(model: Any) -> Iterator[None]:
    """What ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)`` computes.

    The backbone's parameters are rounded to bfloat16 for the forward and backward; their
    gradients come back as float32 on the float32 parameters, which the optimizer steps.
    """
    params = list(model.backbone.parameters())
    masters = [p.data for p in params]
    for p in params:
        p.data = p.data.to(torch.bfloat16)
    try:
        yield
    finally:
        for p, master in zip(params, masters, strict=True):
            grad, p.grad = p.grad, None
            p.data = master
            if grad is not None:
                p.grad = grad.to(torch.float32)


def make_optimizer(model: Any, name: str, learning_rate: float = LEARNING_RATE) -> Any:
    """The optimizer, built from the (sharded) parameters before any forward.

    After a forward without a backward, the units that keep their parameters gathered (the
    root, ``abduction``, ``action``) hold the gathered tensors, not the shards; an optimizer
    built then would step copies that the next gather overwrites.
    """
    groups = model.parameter_groups(learning_rate)
    if name == "sgd":
        return torch.optim.SGD(groups)
    return torch.optim.AdamW(groups)


def full_gradients(model: Any) -> dict[str, torch.Tensor]:
    """The parameters' gradients, whole (a sharded gradient is gathered: a collective call)."""
    from torch.distributed.tensor import DTensor

    return {
        name: (p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad).detach().clone()
        for name, p in model.named_parameters()
        if p.grad is not None
    }


def train(
    model: Any,
    batches: list[dict[str, torch.Tensor]],
    optimizer: Any,
    *,
    rank: int = 0,
    world: int = 1,
    emulate_mixed: bool = False,
) -> tuple[list[dict[str, float]], dict[str, torch.Tensor]]:
    """Steps on rank ``rank``'s share of every batch.

    Returns:
        The per-step losses (averaged over the ranks) and the first step's gradients (averaged
        over the ranks by FSDP, whole).
    """
    import torch.distributed as dist

    history = []
    first_grads: dict[str, torch.Tensor] = {}
    model.train()
    for step, batch in enumerate(batches, 1):
        context = bf16_backbone(model) if emulate_mixed else contextlib.nullcontext()
        with context:
            out = model(**rank_part(batch, rank, world))
            out.loss.backward()
        if step == 1:
            first_grads = full_gradients(model)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        parts = torch.stack([out.loss, out.cls_loss, out.reg_loss]).detach().double()
        if dist.is_initialized() and world > 1:
            dist.all_reduce(parts)
            parts /= world
        loss, cls_loss, reg_loss = (float(x) for x in parts)
        history.append({"step": step, "loss": loss, "cls_loss": cls_loss, "reg_loss": reg_loss})
    model.eval()
    return history, first_grads


def generations(model: Any, tokenizer: Any, rank: int, world: int) -> dict[str, Any]:
    """This rank's generations: shared prompts, its own prompt, transformers' ``generate``."""
    import torch.distributed as dist
    from cauchylin_hf.generation import generate

    synced = dist.is_initialized() and world > 1
    same = generate(model, SAME_PROMPTS, tokenizer=tokenizer, mode="causal", max_new_tokens=6)
    # Different prompts per rank: eos off, so that every rank runs NEW_TOKENS steps (each step
    # gathers every unit, a collective that all ranks must join).
    own = generate(
        model,
        RANK_PROMPTS[rank],
        tokenizer=tokenizer,
        mode="causal",
        max_new_tokens=NEW_TOKENS,
        eos_token_id=[],
    )
    # Different prompts, eos on: each rank finishes at its own step, synced_gpus keeps the
    # others stepping (in one process, without a group, it changes nothing).
    stops = generate(
        model,
        RANK_PROMPTS[rank],
        tokenizer=tokenizer,
        mode="causal",
        max_new_tokens=NEW_TOKENS,
        eos_token_id=EOS_BY_RANK[rank],
        synced_gpus=synced,
    )
    enc = tokenizer([RANK_PROMPTS[rank]], return_tensors="pt")
    with torch.no_grad():
        hf = model.generate(
            input_ids=enc["input_ids"],
            numeric_values=enc["numeric_values"],
            attention_mask=enc["attention_mask"],
            max_new_tokens=NEW_TOKENS,
            do_sample=False,
            synced_gpus=synced,
        )
    return {
        "same": (same.sequences, same.numeric_values),
        "own": (own.sequences, own.numeric_values),
        "stops": (stops.sequences, stops.numeric_values),
        "hf": hf,
    }


def _dtype_probe(model: Any) -> tuple[dict[str, torch.dtype], list[Any]]:
    """Record the dtype of a decoder layer's, the heads' weights and the values while computing."""
    seen: dict[str, torch.dtype] = {}

    def record(key: str, get: Any) -> Any:
        def hook(module: Any, args: Any, *output: Any) -> None:  # None: changes nothing
            seen.setdefault(key, get(module, args))

        return hook

    handles = [
        model.backbone.layers[0].self_attn.q_proj.register_forward_hook(
            record("layer", lambda m, a: m.weight.dtype)
        ),
        model.abduction.register_forward_hook(
            record("abduction", lambda m, a: m.loc_net.weight.dtype)
        ),
        model.numeric_embedding.register_forward_pre_hook(
            record("numeric_values", lambda m, a: a[1].dtype)
        ),
    ]
    return seen, handles


def _sharding(model: Any) -> list[tuple[str, tuple[int, ...], tuple[int, ...], str, int]]:
    """``(name, global shape, local shape, placements, mesh size)`` of every parameter."""
    from torch.distributed.tensor import DTensor

    rows = []
    for name, p in model.named_parameters():
        if isinstance(p, DTensor):
            local = tuple(p.to_local().shape)
            rows.append((name, tuple(p.shape), local, str(p.placements), p.device_mesh.size()))
        else:
            rows.append((name, tuple(p.shape), tuple(p.shape), type(p).__name__, 1))
    return rows


def naive_wrapping_error(tokenizer: Any, batch: dict[str, torch.Tensor], rank: int) -> str:
    """The error of ``fully_shard(model)`` alone on a bfloat16 backbone with float32 heads."""
    from torch.distributed.fsdp import fully_shard

    model = build_model(tokenizer, "bfloat16")
    fully_shard(model)
    try:
        model(**rank_part(batch, rank, 2)).loss.backward()
    except AssertionError as err:  # raised on every rank before any collective
        return f"{type(err).__name__}: {err}"
    return "no error"


def differing_replicas_error(tokenizer: Any, rank: int) -> str:
    """The error of :func:`shard_model` on models built with a different seed on each rank."""
    from cauchylin_hf.model import CauchyLMForCausalLM
    from cauchylin_hf.sharding import shard_model
    from cauchylin_hf.testing import tiny_base_model

    base = tiny_base_model("qwen2", vocab_size=len(tokenizer), hidden_size=HIDDEN, seed=SEED)
    torch.manual_seed(rank)  # the new heads' random values differ between the ranks
    model = CauchyLMForCausalLM.from_base(base, tokenizer, freeze_backbone=False)
    try:
        shard_model(model)
    except ValueError as err:  # raised on every rank after the comparison
        return str(err)
    return "no error"


def run_sharded(
    tokenizer: Any,
    batches: list[dict[str, torch.Tensor]],
    precision: str,
    checkpoints: str,
    optimizer_name: str,
) -> dict[str, Any]:
    """One precision on this process's rank: shard, train, gather, save."""
    import torch.distributed as dist
    from cauchylin_hf.model import CauchyLMForCausalLM
    from cauchylin_hf.sharding import (
        full_state_dict,
        save_full_checkpoint,
        shard_model,
        shard_units,
    )
    from torch.distributed.fsdp import MixedPrecisionPolicy

    rank, world = dist.get_rank(), dist.get_world_size()
    model = build_model(tokenizer, precision)
    policy = None
    if precision == "mixed":
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    shard_model(model, mp_policy=policy)
    optimizer = make_optimizer(model, optimizer_name)
    result: dict[str, Any] = {"units": shard_units(model)}
    shards: list[Any] = [None] * world
    dist.all_gather_object(shards, _sharding(model))
    result["sharding"] = shards
    if precision == "float32":
        result["before"] = generations(model, tokenizer, rank, world)
    seen, handles = _dtype_probe(model)
    result["history"], result["first_grads"] = train(
        model, batches, optimizer, rank=rank, world=world
    )
    for h in handles:
        h.remove()
    result["compute_dtypes"] = seen
    result["params"] = full_state_dict(model)
    folder = os.path.join(checkpoints, precision)
    save_full_checkpoint(model, folder)
    if precision == "float32":
        result["after"] = generations(model, tokenizer, rank, world)
        # Resume: every rank loads the saved folder, shards it again; the same loss.
        again = shard_model(CauchyLMForCausalLM.from_pretrained(folder))
        part = rank_part(batches[0], rank, world)
        with torch.no_grad():
            result["resumed_loss"] = (float(model(**part).loss), float(again(**part).loss))
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, {k: result.pop(k) for k in ("before", "after") if k in result})
    result["generations"] = gathered
    return result


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--out FILE --checkpoints DIR --steps S --per-device-batch B``."""
    import torch.distributed as dist

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--checkpoints", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--per-device-batch", type=int, required=True)
    parser.add_argument("--optimizer", choices=("adamw", "sgd"), default="adamw")
    ns = parser.parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    tokenizer = make_tokenizer()
    batches = make_batches(tokenizer, ns.steps, ns.per_device_batch * world)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = {
            p: run_sharded(tokenizer, batches, p, ns.checkpoints, ns.optimizer) for p in PRECISIONS
        }
        naive = naive_wrapping_error(tokenizer, batches[0], rank)
        differing = differing_replicas_error(tokenizer, rank)
    if rank == 0:
        torch.save(
            {
                "world_size": world,
                "results": results,
                "naive_wrapping_error": naive,
                "differing_replicas_error": differing,
                "warnings": sorted({f"{w.category.__name__}: {w.message}" for w in caught}),
            },
            ns.out,
        )
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    from worker_exit import leave

    leave(main())
