"""A batch ensemble (TabM-mini) of the causal model: k members that share every weight but one vector.

TabM (Gorishniy et al. 2024, "TabM: Advancing Tabular Deep Learning with Parameter-Efficient
Ensembling") trains k members of one network at once: each sees the same batch, each scales its
input by a vector of its own (``x * r_m``, ``r_m`` drawn as random signs and trained), the
loss is the mean of the members' losses, and the prediction is the mean of theirs. Here the
network is the causal model of ``bench_quality.py`` and member ``m`` multiplies the input
embeddings that go to the backbone (the tokens' and the numbers' embeddings, ``[B, L, H]``) by
``r_m`` ``[H]``; the Abduction/Action heads are shared. During training every batch is repeated
k times, member-major, so the package's loss (a mean over positions) is the mean over the
members; the k vectors are trained by the Trainer's optimizer on the network's schedule. After
training each member's readouts are solved on the training rows as ``train`` solves them
(:func:`cauchylin_hf.readouts.solve_readouts`), each member predicts the held-out rows, and the
ensemble is their Cauchy mean in the value space
(:func:`cauchylin_hf.ensemble.average_number_predictions`, as for ensembles of seeds). Its
held-out target's median absolute error is scored as ``bench_quality.py`` does, with each
member's beside it. ``--members 0`` is the package's defaults, run in the same call so that every
ratio is paired by seed (the signs come from a generator of their own: the network's
initialisation and the batches are the defaults'). Run::

    python benchmarks/probe_batch_ensemble.py --tables barley,friedman1 --seeds 0,1,2 --members 0,4 --json FILE
    python benchmarks/probe_batch_ensemble.py --quick      # toy sizes (a smoke run)

``--every-linear`` gives every linear layer of the backbone a member's input and output
vectors as well (TabM's full BatchEnsemble; ``a``, ``c`` start at ones, so the members start
apart by their embeddings' signs alone).

It is a probe, not a setting of the package: the members are forward pre-hooks on the model
(the batch repeated) and on its backbone (the embeddings scaled), added by a Trainer callback.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from _paired_runs import (
    add_to_optimizer,
    common_arguments,
    heldout_mdae,
    integers,
    paired_report,
    run_grid,
    target_mdae,
    trained,
)
from torch import nn


class BatchEnsemble(nn.Module):
    """The members' vectors and the hooks that apply them.

    Member ``m`` multiplies the input embeddings by ``r_m`` ``[H]`` (random signs); with
    ``every_linear``, also each linear layer ``l`` of the backbone, ``y = ((x * a_ml) W^T + b)
    * c_ml``, as TabM's BatchEnsemble layers (``a``, ``c`` start at ones; the shared bias is
    kept). While :attr:`repeating` is set and the model is in training mode, a batch of ``B``
    rows is repeated into ``k * B`` (member ``m`` holds rows ``m * B`` to ``(m + 1) * B``), each
    block scaled by its member's vectors; otherwise every row is :attr:`member`'s.

    Args:
        members: ``k >= 1``.
        hidden: ``H``, the backbone's embedding width.
        seed: the seed of the signs' own generator.
        linears: ``(in, out)`` features of the backbone's linear layers, in
            ``model.backbone.modules()`` order, with ``every_linear`` (else empty).
    """

    def __init__(
        self, members: int, hidden: int, seed: int, linears: list[tuple[int, int]] | None = None
    ) -> None:
        super().__init__()
        if members < 1:
            raise ValueError(f"members must be at least 1, got {members}")
        g = torch.Generator().manual_seed(seed)
        signs = torch.randint(0, 2, (members, hidden), generator=g) * 2 - 1
        self.r = nn.Parameter(signs.float())
        self.a = nn.ParameterList(nn.Parameter(torch.ones(members, i)) for i, _ in linears or ())
        self.c = nn.ParameterList(nn.Parameter(torch.ones(members, o)) for _, o in linears or ())
        self.member = 0
        self.repeating = False
        self.handles: list[Any] = []

    @property
    def members(self) -> int:
        """``k``."""
        return int(self.r.shape[0])

    def attach(self, model: Any) -> None:
        """Hook the members into ``model`` (a ``CauchyLMForCausalLM``) until :meth:`detach`."""
        self.to(next(model.parameters()).device)
        self.handles = [
            model.register_forward_pre_hook(self._repeat, with_kwargs=True),
            model.backbone.register_forward_pre_hook(self._scale_embeddings, with_kwargs=True),
        ]
        layers = linear_layers(model)
        if self.a and len(layers) != len(self.a):
            raise ValueError(f"{len(self.a)} linear adapters for {len(layers)} linear layers")
        for layer, a, c in zip(layers if self.a else [], self.a, self.c, strict=True):
            self.handles.append(layer.register_forward_pre_hook(self._input_scaler(a)))
            self.handles.append(layer.register_forward_hook(self._output_scaler(c)))

    def detach(self) -> None:
        """Remove the hooks: the model is the shared network again."""
        for h in self.handles:
            h.remove()
        self.handles = []

    def scaled(self, x: torch.Tensor, v: torch.Tensor, training: bool) -> torch.Tensor:
        """``x`` ``[rows, ..., d]`` times each row's member's vector of ``v`` ``[k, d]``."""
        v = v.to(x.dtype)
        if not (self.repeating and training):
            return x * v[self.member]
        k = self.members
        if x.shape[0] % k:
            raise ValueError(f"a repeated batch of {x.shape[0]} rows is not {k} members'")
        shape = (k,) + (1,) * (x.dim() - 1) + (v.shape[-1],)
        return (x.unflatten(0, (k, -1)) * v.view(shape)).flatten(0, 1)

    def _repeat(self, module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        if not (self.repeating and module.training):
            return None
        if args:
            raise TypeError("the batch ensemble repeats keyword inputs only (the Trainer's call)")
        ids = kwargs.get("input_ids")
        if ids is None:
            raise TypeError("the batch ensemble needs input_ids")
        rows = ids.shape[0]
        k = self.members
        out = {
            name: x.repeat(k, *([1] * (x.dim() - 1)))
            if isinstance(x, torch.Tensor) and x.dim() > 0 and x.shape[0] == rows
            else x
            for name, x in kwargs.items()
        }
        return args, out

    def _scale_embeddings(self, module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        e = self.scaled(kwargs["inputs_embeds"], self.r, module.training)
        return args, {**kwargs, "inputs_embeds": e}

    def _input_scaler(self, a: torch.Tensor) -> Any:
        def hook(module: Any, args: tuple) -> tuple:
            return (self.scaled(args[0], a, module.training), *args[1:])

        return hook

    def _output_scaler(self, c: torch.Tensor) -> Any:
        def hook(module: Any, args: tuple, out: torch.Tensor) -> torch.Tensor:
            return self.scaled(out, c, module.training)

        return hook


def linear_shapes(model: Any) -> list[tuple[int, int]]:
    """``(in, out)`` features of the backbone's linear layers, in the order
    :meth:`BatchEnsemble.attach` hooks them."""
    return [(m.in_features, m.out_features) for m in linear_layers(model)]


def linear_layers(model: Any) -> list[nn.Linear]:
    """The backbone's linear layers, in ``model.backbone.modules()`` order."""
    return [m for m in model.backbone.modules() if isinstance(m, nn.Linear)]


def with_members(members: int, seed: int, every_linear: bool = False) -> Any:
    """A Trainer callback that attaches a :class:`BatchEnsemble` at the start of training, its
    vectors trained by the Trainer's optimizer on the network's schedule; after training the
    batch is no longer repeated and the hooks stay (member 0) until :meth:`BatchEnsemble.detach`."""
    from transformers import TrainerCallback

    class WithMembers(TrainerCallback):
        ensemble: BatchEnsemble | None = None

        def on_train_begin(
            self, args, state, control, model=None, optimizer=None, lr_scheduler=None, **kw
        ):
            linears = linear_shapes(model) if every_linear else None
            ensemble = BatchEnsemble(members, model.config.hidden_size, seed, linears)
            ensemble.attach(model)
            ensemble.repeating = True
            add_to_optimizer(optimizer, lr_scheduler, list(ensemble.parameters()))
            self.ensemble = ensemble

        def on_train_end(self, args, state, control, **kw):
            if self.ensemble is not None:
                self.ensemble.repeating = False

    return WithMembers()


def member_predictions(
    model: Any, tokenizer: Any, result: Any, ensemble: BatchEnsemble, held: list[str]
) -> list[Any]:
    """Each member's :class:`~cauchylin_hf.predict.NumberPredictions` of the held-out texts,
    its readouts solved on the training rows (``result.readout_data``) first."""
    from cauchylin_hf.predict import number_predictions
    from cauchylin_hf.readouts import solve_readouts

    parts = []
    for m in range(ensemble.members):
        ensemble.member = m
        solve_readouts(model, tokenizer, result.readout_data)
        parts.append(number_predictions(model, tokenizer, held, levels=(0.5,), calibrated=False))
    return parts


def run(
    table: str,
    seed: int,
    steps: int,
    members: int,
    quick: bool = False,
    every_linear: bool = False,
) -> dict:
    """One network trained as a batch ensemble of ``members`` (0: the defaults), scored on the
    held-out targets."""
    from cauchylin_hf.ensemble import average_number_predictions

    callback = with_members(members, seed, every_linear) if members else None
    model, ntok, result, held, seconds = trained(
        table, seed, steps, quick, [] if callback is None else [callback]
    )
    row: dict[str, Any] = {
        "table": table,
        "seed": seed,
        "steps": steps,
        "members": members,
        "every_linear": bool(members and every_linear),
    }
    if callback is None:
        row["mdae"] = heldout_mdae(model, ntok, held)
    else:
        ensemble = callback.ensemble
        assert ensemble is not None
        parts = member_predictions(model, ntok, result, ensemble, held)
        ensemble.detach()
        row["mdae"] = target_mdae(average_number_predictions(parts), held)
        row["member_mdae"] = [target_mdae(p, held) for p in parts]
    row["train_cpu_s"] = seconds
    return row


def setting(row: dict) -> str:
    """A run's setting in words."""
    if not row["members"]:
        return "defaults"
    every = ", every linear" if row.get("every_linear") else ""
    return f"batch ensemble of {row['members']}{every}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common_arguments(p)
    p.add_argument("--members", default="0,4", help="k per run; 0: the defaults")
    p.add_argument(
        "--every-linear", action="store_true", help="adapters on every linear layer (TabM)"
    )
    args = p.parse_args(argv)
    if args.target_only:
        p.error("--target-only has no meaning here (no term is added to the loss)")
    if args.steps < 1:
        p.error(f"--steps must be at least 1, got {args.steps}")
    settings = integers(p, "--members", args.members)
    seeds = integers(p, "--seeds", args.seeds)
    if not settings or any(k < 0 for k in settings):
        p.error(f"--members must list numbers >= 0, got {args.members!r}")
    steps = 4 if args.quick else args.steps
    rows = run_grid(
        args.tables,
        seeds,
        settings,
        lambda table, seed, k: run(table, seed, steps, k, args.quick, args.every_linear),
        args.json,
    )
    print("\n".join(paired_report(rows, setting, "setting")))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
