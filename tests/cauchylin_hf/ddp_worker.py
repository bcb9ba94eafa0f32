"""Training script of the data-parallel test (``tests/cauchylin_hf/test_ddp.py``).

Run by ``torchrun --nproc_per_node 2`` (each rank trains on ``--per-device-batch`` examples per
step, CPU, gloo) or as a plain ``python`` process (one rank with a batch twice as large, i.e. the
same global batch). Both build the same tiny Qwen2 causal language model from a fixed seed, read
the same tokenizer from ``--tokenizer``, train with ``transformers.Trainer`` through
:func:`cauchylin_hf.training.make_trainer` with sequential sampling and log every step. The main
process writes ``--out``: a ``torch.save`` dict with the per-step loss history (``loss``,
``cls_loss``, ``reg_loss``) and the final trainable parameters.

The data is one corpus template (``"eggs"``: ``"<a> boxes of <b> eggs hold <c> eggs."``), so
every example has the same number of tokens and of ``<NUM>`` targets; see the test's docstring
for why the trajectories then agree exactly.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import torch

HIDDEN = 32
SEED = 0
TEMPLATES = ("eggs",)


def build_model(tokenizer: Any, seed: int = SEED) -> torch.nn.Module:
    """The tiny Qwen2 causal language model, identical in every process (seeded)."""
    from cauchylin_hf.model import CauchyLMForCausalLM
    from cauchylin_hf.testing import tiny_base_model

    torch.manual_seed(seed)
    base = tiny_base_model("qwen2", vocab_size=len(tokenizer), hidden_size=HIDDEN, seed=seed)
    torch.manual_seed(seed)
    # classifier_lr_scale=1: the test compares float32 trajectories, and a 10x head learning rate
    # on top of 1e-2 lets Adam turn reduction-order rounding of near-zero gradients into visible
    # parameter differences; what is tested (DDP averages like one process) does not depend on it.
    # reg_scale_power=0: the default regression loss weights each context by the spread of its
    # numbers in the rank's own batch (a batch statistic), so only the plain NLL gradient is the
    # same sum over two half batches as over one whole batch.
    return CauchyLMForCausalLM.from_base(
        base, tokenizer=tokenizer, classifier_lr_scale=1.0, reg_scale_power=0.0
    )


def make_texts(n: int, seed: int = SEED) -> list[str]:
    """``n`` sentences of one template: equal token and ``<NUM>`` counts per example."""
    from cauchylin_hf.app.corpus import generate_sentences

    return generate_sentences(n, seed=seed, templates=list(TEMPLATES))


def run(
    tokenizer_dir: str,
    out: str | None,
    per_device_batch: int,
    steps: int,
    output_dir: str,
    learning_rate: float = 1e-2,
) -> dict[str, Any]:
    """Train and return (and, on the main process, save) the history and final parameters."""
    from cauchylin_hf.data import NumericDataset
    from cauchylin_hf.tokenizer import NumericTokenizer
    from cauchylin_hf.training import make_trainer

    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    ntok = NumericTokenizer.from_pretrained(tokenizer_dir)
    texts = make_texts(steps * per_device_batch * world)
    dataset = NumericDataset.from_texts(texts, ntok, name="ddp_texts")
    lengths = set(dataset.lengths)
    nums = {int((dataset[i]["input_ids"] == ntok.num_token_id).sum()) for i in range(len(dataset))}
    if len(lengths) != 1 or len(nums) != 1:
        raise RuntimeError(f"examples differ in length {lengths} or <NUM> count {nums}")

    model = build_model(ntok)
    trainer = make_trainer(
        model,
        ntok,
        dataset,
        output_dir=output_dir,
        max_steps=steps,
        per_device_train_batch_size=per_device_batch,
        learning_rate=learning_rate,
        lr_scheduler_type="constant",
        logging_steps=1,
        train_sampling_strategy="sequential",
        seed=SEED,
        use_cpu=True,
        disable_tqdm=True,
        log_level="warning",
    )
    trainer.train()
    history = trainer.loss_parts.history
    params = {
        name: p.detach().clone()
        for name, p in trainer.accelerator.unwrap_model(trainer.model).named_parameters()
        if p.requires_grad
    }
    result = {
        "world_size": trainer.args.world_size,
        "history": history,
        "params": params,
    }
    if out is not None and trainer.is_world_process_zero():
        torch.save(result, out)
    return result


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--tokenizer DIR --out FILE --per-device-batch B --steps S --output-dir D``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--per-device-batch", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--learning-rate", type=float, default=1e-2)
    ns = parser.parse_args(argv)
    run(
        ns.tokenizer,
        ns.out,
        ns.per_device_batch,
        ns.steps,
        ns.output_dir,
        learning_rate=ns.learning_rate,
    )
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    from worker_exit import leave

    leave(main())
