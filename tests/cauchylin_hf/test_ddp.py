"""Data-parallel training: ``torchrun --nproc_per_node 2`` on CPU equals one process.

Two runs of ``ddp_worker.py`` train the same tiny Qwen2 causal language model (seeded init, no
dropout, one thread per process) with ``transformers.Trainer`` on the same data:

* **data parallel**: ``python -m torch.distributed.run --nproc_per_node 2`` (gloo backend,
  ``use_cpu=True``), ``per_device_train_batch_size=b``;
* **one process**: the worker's ``run`` in the test process, ``per_device_train_batch_size=2b``.

Why the two trajectories must agree to float32 rounding:

* **Same global batch.** Sampling is sequential (``train_sampling_strategy="sequential"``, no
  shuffling). Accelerate shards the batch sampler so that at step k rank 0 gets batch 2k and rank 1
  batch 2k+1 of size b: together exactly the examples ``[2kb, 2kb + 2b)`` that the single process
  gets as its k-th batch of size 2b.
* **Same loss average.** The model's loss is a mean over counted positions (``cls_loss``) and a
  sum over ``<NUM>`` targets divided by their number (``reg_loss``), per rank. DDP averages the
  gradients of the per-rank means, which equals the gradient of the global mean only when every
  rank counts the same number of positions and targets. The data therefore comes from one corpus
  template (``"<a> boxes of <b> eggs hold <c> eggs."``): every example has the same token count and
  the same number of ``<NUM>`` tokens (the worker checks this), so both ranks count the same.
  With texts of unequal length the two runs would differ by design, not by a bug.
* **Same logging.** ``LossPartsCallback`` averages the loss parts of the ranks (all-reduce) just as
  the Trainer averages ``loss``.

What differs is the order of float32 sums (two half batches plus an all-reduce instead of one
batch), so the comparison uses a float32 tolerance (rtol 1e-5) on every logged step, and on the
final trainable parameters per tensor in norm: ``||p_ddp - p_one|| <= 1e-5 ||p_one||``. Not
element by element: AdamW divides each coordinate's step by that coordinate's own running
gradient size, so a coordinate whose gradient is at the rounding level can move differently by up
to the learning rate per step (seen: one of 9600 entries off by 1.1e-6, relative 1e-4, under
MKL's AVX-512 kernels), which measures Adam's normalisation, not data parallelism. A real DDP
error (a rank's half of the batch missing or taken twice, gradients not all-reduced) changes the
gradient's direction and moves the coordinates by up to the learning rate, 1e-2 here, per step;
the measured gap is about 4e-7 of the parameters' norm.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
import torch

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("ddp_worker.py")
STEPS = 8
PER_DEVICE = 4
TIMEOUT_S = 240


def _env() -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    # Never let a surrounding launcher's variables leak into the runs.
    for key in (
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    ):
        env.pop(key, None)
    env.pop("ACCELERATE_USE_CPU", None)
    return env


def _load_worker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cauchylin_ddp_worker", WORKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(cmd: list[str], cwd: Path) -> None:
    proc = subprocess.run(
        cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    if proc.returncode != 0:
        pytest.fail(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
        )


@pytest.mark.skipif(
    not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
    reason="torch.distributed with gloo is not available",
)
def test_torchrun_two_processes_match_one_process(tmp_path):
    from cauchylin_hf.app.corpus import train_corpus_tokenizer
    from cauchylin_hf.tokenizer import NumericTokenizer

    tok_dir = tmp_path / "tokenizer"
    NumericTokenizer(train_corpus_tokenizer(vocab_size=300)).save_pretrained(tok_dir)
    common = ["--tokenizer", str(tok_dir), "--steps", str(STEPS)]

    start = time.perf_counter()
    _run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            # torchrun picks and holds a free port itself: no race with another test's run.
            "--standalone",
            str(WORKER),
            *common,
            "--per-device-batch",
            str(PER_DEVICE),
            "--out",
            str(tmp_path / "ddp.pt"),
            "--output-dir",
            str(tmp_path / "ddp_run"),
        ],
        tmp_path,
    )
    ddp_s = time.perf_counter() - start
    # The one-process run needs no launcher: run the worker's function in this process (same
    # code, saves a Python start-up and the imports).
    single = _load_worker().run(
        str(tok_dir), None, 2 * PER_DEVICE, STEPS, str(tmp_path / "single_run")
    )
    ddp = torch.load(tmp_path / "ddp.pt", weights_only=False)
    assert ddp["world_size"] == 2 and single["world_size"] == 1

    steps = [row["step"] for row in single["history"]]
    assert steps == list(range(1, STEPS + 1))
    assert [row["step"] for row in ddp["history"]] == steps
    diffs = {}
    for key in ("loss", "cls_loss", "reg_loss"):
        a = torch.tensor([row[key] for row in single["history"]], dtype=torch.float64)
        b = torch.tensor([row[key] for row in ddp["history"]], dtype=torch.float64)
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=lambda m, k=key: f"{k}: {m}")
        diffs[key] = (
            f"abs {float((a - b).abs().max()):.2e}, rel {float(((a - b) / a).abs().max()):.2e}"
        )
    # training happened: the trajectory moves
    assert single["history"][-1]["loss"] < single["history"][0]["loss"]

    assert single["params"].keys() == ddp["params"].keys() and single["params"]
    param_diff = 0.0
    for name, p in single["params"].items():
        q = ddp["params"][name]
        assert q.shape == p.shape and q.dtype == p.dtype, name
        diff = float(torch.linalg.vector_norm((q - p).double()))
        size = float(torch.linalg.vector_norm(p.double()))
        assert diff <= 1e-5 * size, f"{name}: ||p_ddp - p_one|| = {diff:.3e} > 1e-5 x {size:.3e}"
        param_diff = max(param_diff, diff / size)
    print(
        f"\nDDP run {ddp_s:.1f} s; max |diff| per logged series {diffs}; params (rel. norm) {param_diff:.2e}"
    )
