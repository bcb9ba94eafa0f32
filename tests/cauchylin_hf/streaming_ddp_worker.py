"""Training script of the streamed data-parallel test (``test_streaming.py``).

Run by ``torchrun --nproc_per_node 2`` (CPU, gloo): each rank trains one epoch with
:func:`cauchylin_hf.training.train` on a :class:`~cauchylin_hf.data.streaming.LazyNumericDataset` over a
``datasets.Dataset`` of ``--rows`` texts, and writes the rows it encoded to ``--out``
(``rank<r>.txt``, one row number per line).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--tokenizer DIR --rows N --out DIR``."""
    import datasets
    from cauchylin_hf.data.streaming import LazyNumericDataset
    from cauchylin_hf.model import CauchyLMForCausalLM
    from cauchylin_hf.testing import tiny_base_model
    from cauchylin_hf.tokenizer import NumericTokenizer
    from cauchylin_hf.training import train

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--out", required=True)
    ns = parser.parse_args(argv)
    torch.set_num_threads(1)
    ntok = NumericTokenizer.from_pretrained(ns.tokenizer)
    encoded: list[int] = []

    class Recording(LazyNumericDataset):
        def __getitems__(self, indices):  # type: ignore[no-untyped-def]
            encoded.extend(int(i) for i in indices)
            return super().__getitems__(indices)

    texts = [f"x {i} -> y {2 * i + 1}." for i in range(ns.rows)]
    data = Recording(datasets.Dataset.from_dict({"text": texts}), ntok)
    torch.manual_seed(0)
    base = tiny_base_model("qwen2", vocab_size=len(ntok), hidden_size=32, seed=0)
    model = CauchyLMForCausalLM.from_base(base, tokenizer=ntok)
    train(
        model,
        ntok,
        data,
        output_dir=str(Path(ns.out) / "run"),
        num_train_epochs=1,
        batch_size=4,
        progress=False,
        save=False,
        evaluate=False,
        readouts=False,
        calibration=None,
        use_cpu=True,
    )
    rank = int(os.environ.get("RANK", "0"))
    (Path(ns.out) / f"rank{rank}.txt").write_text("".join(f"{i}\n" for i in encoded))
    if torch.distributed.is_initialized():  # leave together: no rank exits inside a collective
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    from worker_exit import leave

    leave(main())
