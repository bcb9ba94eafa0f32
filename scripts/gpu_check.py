"""The GPU check: the suite's CUDA cases and the benchmarks on one CUDA device, in one run.

Run by ``scripts/gpu_check.sh`` (which makes the fresh environment), or directly::

    python scripts/gpu_check.py --out gpu_check            # on a machine with a CUDA GPU
    python scripts/gpu_check.py --dry-run --out /tmp/x     # anywhere: the plumbing at toy sizes

It does two things and writes ``gpu_check.json`` and ``gpu_check.md`` (one table) to ``--out``:

1. **Tests**: ``pytest -m cuda`` over the device-parametrised tests -- the numerics, the losses,
   the fused OvR loss, the layers, the model's forward, generate and training step, single-GPU
   FSDP2 -- each of which compares the CUDA result with the CPU's or an independent reference.
2. **Benchmarks**, in float32 and bfloat16, each timed side by side in this process (interleaved
   rounds, CUDA-synchronised, the median of the rounds), printed as ratios:

   * ``ovr_loss``: one training step (forward + backward) of the memory-efficient OvR loss
     (``ovr_bce_fused``) against a softmax head's cross-entropy (``F.cross_entropy`` of the
     logits ``z W^T + b``), against Liger's fused linear cross-entropy where ``liger-kernel``
     imports, and against the *two-GEMM floor*: the two forward products ``loc_U W^T`` and
     ``scale_U |W|^T`` and the four backward products every OvR head must run, with no
     element-wise work;
   * ``decode``: tokens per second of ``cauchylin_hf`` generation (standard and compatible
     modes) against the base model's Hugging Face ``generate`` (greedy), same weights;
   * ``train_step``: one training step of the whole causal model against the base model's
     (forward + backward, backbone unfrozen);
   * ``elementwise``: ``CauchyVector`` log_prob, cdf, log_cdf and icdf against
     ``torch.distributions.Cauchy``, and ``vmap``'ed ``IndependentCauchy.log_prob`` over 1000
     small distributions against torch's Cauchy under ``vmap``.

3. **The command line**: the README's table recipe (``cauchylin-lm train`` from nothing on the
   flats table, then ``predict`` and ``evaluate`` of the saved model), which trains on the GPU
   and reads the numbers there at the end of training; its exit status and seconds.

Without a CUDA device it says so and, with ``--dry-run``, runs all of it on the CPU at toy sizes
(the tests only collected, not run): that checks the plumbing -- every benchmark runs, the JSON
and the table are written -- and is what the test suite runs. Numbers from a dry run mean
nothing and are marked so in both files.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for folder in (ROOT, ROOT / "adapters"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import cauchylin  # noqa: E402

# The test files that hold device-parametrised cases (the ``cuda`` marker selects them).
TEST_PATHS = ("tests/cauchylin", "tests/cauchylin_hf")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}

# Sizes: a Qwen2.5-0.5B-shaped head and model on the GPU; toy sizes for the dry run.
FULL = {
    "ovr": dict(n=4096, c=896, v=151936),
    "model": dict(
        vocab_size=151936,
        hidden_size=896,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        intermediate_size=4864,
    ),
    "decode": dict(batch=8, prompt=64, new=64),
    "train": dict(batch=8, seq=512),
    "elementwise": dict(n=4096, v=32768),
    "vmap": dict(d=1000, c=8),
    "rounds": 5,
}
TOY = {
    "ovr": dict(n=64, c=16, v=512),
    "model": dict(
        vocab_size=512,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
    ),
    "decode": dict(batch=2, prompt=4, new=3),
    "train": dict(batch=2, seq=8),
    "elementwise": dict(n=8, v=64),
    "vmap": dict(d=20, c=4),
    "rounds": 1,
}


def say(text: str) -> None:
    print(f"[gpu_check] {text}", flush=True)


# ------------------------------------------------------------------------------------ timing


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(
    fns: dict[str, Callable[[], object]], rounds: int, device: torch.device, repeat: int = 3
) -> dict[str, float]:
    """Median seconds per call of each side over ``rounds`` interleaved rounds (after one
    warm-up call each); the order alternates between rounds."""
    for fn in fns.values():
        fn()
    names = list(fns)
    per: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            _sync(device)
            start = time.perf_counter()
            for _ in range(repeat):
                fns[name]()
            _sync(device)
            per[name].append((time.perf_counter() - start) / repeat)
    return {n: statistics.median(ts) for n, ts in per.items()}


# ------------------------------------------------------------------------------- benchmarks


def bench_ovr_loss(device: torch.device, dtype: torch.dtype, size: dict) -> dict:
    """OvR training step vs softmax CE, Liger's fused CE and the two-GEMM floor."""
    from cauchylin.losses import ovr_bce_fused

    n, c, v = size["ovr"]["n"], size["ovr"]["c"], size["ovr"]["v"]
    g = torch.Generator(device="cpu").manual_seed(0)

    def leaf(*shape: int, positive: bool = False) -> torch.Tensor:
        t = torch.randn(*shape, generator=g)
        t = t.abs() + 0.5 if positive else t
        return t.to(device=device, dtype=dtype).requires_grad_()

    loc_u, scale_u = leaf(n, c), leaf(n, c, positive=True)
    weight = (torch.randn(v, c, generator=g) / c**0.5).to(device, dtype).requires_grad_()
    bias = torch.zeros(v, device=device, dtype=dtype, requires_grad=True)
    labels = torch.randint(0, v, (n,), generator=g).to(device)
    params = (loc_u, scale_u, weight, bias)

    def zero() -> None:
        for p in params:
            p.grad = None

    def ours() -> None:
        zero()
        ovr_bce_fused(
            loc_u, scale_u, weight, bias, 0.0, labels, validate_args=False
        ).mean.backward()

    def softmax_ce() -> None:
        zero()
        F.cross_entropy(F.linear(loc_u, weight, bias).float(), labels).backward()

    def floor() -> None:
        # The products any OvR head runs: two forward GEMMs and four backward ones, no
        # element-wise work (the incoming gradients are the outputs themselves).
        with torch.no_grad():
            abs_w = weight.abs()
            loc_s = loc_u @ weight.T
            scale_s = scale_u @ abs_w.T
            _ = loc_s @ weight, scale_s @ abs_w, loc_s.T @ loc_u, scale_s.T @ scale_u

    fns: dict[str, Callable[[], object]] = {
        "ovr (fused)": ours,
        "softmax CE": softmax_ce,
        "two-GEMM floor": floor,
    }
    liger_note = None
    try:
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

        liger = LigerFusedLinearCrossEntropyLoss()

        def liger_ce() -> None:
            zero()
            liger(weight, loc_u, labels, bias).backward()

        if device.type == "cuda":
            fns["Liger fused CE"] = liger_ce
        else:
            liger_note = "liger-kernel needs a CUDA device (Triton)"
    except Exception as exc:  # not installed, or it does not import with this torch
        liger_note = f"liger-kernel unavailable: {type(exc).__name__}: {str(exc)[:120]}"
    seconds = timed(fns, size["rounds"], device)
    ratios = {
        "ovr / softmax CE": seconds["ovr (fused)"] / seconds["softmax CE"],
        "ovr / two-GEMM floor": seconds["ovr (fused)"] / seconds["two-GEMM floor"],
    }
    if "Liger fused CE" in seconds:
        ratios["ovr / Liger fused CE"] = seconds["ovr (fused)"] / seconds["Liger fused CE"]
    return {"shape": size["ovr"], "seconds": seconds, "ratios": ratios, "note": liger_note}


def _models(
    device: torch.device, dtype: torch.dtype, size: dict
) -> tuple[torch.nn.Module, torch.nn.Module]:
    from cauchylin_hf.model import CauchyLMForCausalLM
    from transformers import AutoModelForCausalLM, Qwen2Config

    cfg = Qwen2Config(
        **size["model"],
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_config(cfg).to(device=device, dtype=dtype).eval()
    model = CauchyLMForCausalLM.from_base(base, num_token_id=cfg.vocab_size - 1)
    return base, model.to(device=device).eval()


def bench_decode(
    device: torch.device,
    dtype: torch.dtype,
    size: dict,
    built: tuple[torch.nn.Module, torch.nn.Module],
) -> dict:
    """Tokens per second: our generate (standard, compatible) vs the base's greedy generate."""
    from cauchylin_hf.generation import generate

    base, model = built
    batch, prompt, new = size["decode"]["batch"], size["decode"]["prompt"], size["decode"]["new"]
    vocab = size["model"]["vocab_size"]
    ids = torch.randint(3, vocab - 1, (batch, prompt), generator=torch.Generator().manual_seed(0))
    ids = ids.to(device)
    mask = torch.ones_like(ids)

    def run_base() -> None:
        with torch.no_grad():
            base.generate(
                ids,
                attention_mask=mask,
                do_sample=False,
                max_new_tokens=new,
                min_new_tokens=new,
                pad_token_id=0,
            )

    def run(mode: str) -> Callable[[], object]:
        return lambda: generate(
            model, ids, attention_mask=mask, mode=mode, max_new_tokens=new, eos_token_id=[], seed=0
        )

    seconds = timed(
        {"base generate": run_base, "standard": run("standard"), "compatible": run("compatible")},
        size["rounds"],
        device,
        repeat=1,
    )
    tokens = batch * new
    tok_s = {k: tokens / s for k, s in seconds.items()}
    return {
        "shape": size["decode"],
        "tokens_per_s": tok_s,
        "ratios": {
            "standard / base (throughput)": tok_s["standard"] / tok_s["base generate"],
            "compatible / base (throughput)": tok_s["compatible"] / tok_s["base generate"],
        },
    }


def bench_train_step(
    device: torch.device,
    dtype: torch.dtype,
    size: dict,
    built: tuple[torch.nn.Module, torch.nn.Module],
) -> dict:
    """One training step (forward + backward, backbone unfrozen) of both models, same tokens."""
    base, model = built
    batch, seq = size["train"]["batch"], size["train"]["seq"]
    vocab = size["model"]["vocab_size"]
    ids = torch.randint(3, vocab - 1, (batch, seq), generator=torch.Generator().manual_seed(1))
    ids = ids.to(device)
    frozen = [q for q in (*base.parameters(), *model.parameters()) if not q.requires_grad]
    for q in frozen:
        q.requires_grad_(True)
    base.train()
    model.train()

    def step(net: torch.nn.Module) -> Callable[[], object]:
        def run() -> None:
            net.zero_grad(set_to_none=True)
            net(ids, labels=ids).loss.backward()

        return run

    try:
        seconds = timed({"base": step(base), "ours": step(model)}, size["rounds"], device, repeat=1)
    finally:
        base.zero_grad(set_to_none=True)
        model.zero_grad(set_to_none=True)
        base.eval()
        model.eval()
        for q in frozen:
            q.requires_grad_(False)
    return {
        "shape": size["train"],
        "seconds": seconds,
        "ratios": {"ours / base (time)": seconds["ours"] / seconds["base"]},
    }


def bench_elementwise(device: torch.device, dtype: torch.dtype, size: dict) -> dict:
    """CauchyVector's element-wise marginals vs torch's Cauchy; vmap over small distributions."""
    from torch.distributions import Cauchy, Independent
    from torch.func import vmap

    from cauchylin.distributions import IndependentCauchy

    n, v = size["elementwise"]["n"], size["elementwise"]["v"]
    g = torch.Generator().manual_seed(2)
    loc = torch.randn(n, v, generator=g).to(device, dtype)
    scale = (torch.rand(n, v, generator=g) + 0.5).to(device, dtype)
    x = torch.randn(n, v, generator=g).to(device, dtype)
    q = torch.rand(n, v, generator=g).to(device, dtype)
    ours = {
        "log_prob": lambda: cauchylin.CauchyVector(loc, scale, validate_args=False).log_prob(x),
        "cdf": lambda: cauchylin.CauchyVector(loc, scale, validate_args=False).cdf(x),
        "log_cdf": lambda: cauchylin.CauchyVector(loc, scale, validate_args=False).log_cdf(x),
        "icdf": lambda: cauchylin.CauchyVector(loc, scale, validate_args=False).icdf(q),
    }
    theirs = {
        "log_prob": lambda: Cauchy(loc, scale, validate_args=False).log_prob(x),
        "cdf": lambda: Cauchy(loc, scale, validate_args=False).cdf(x),
        "log_cdf": lambda: Cauchy(loc, scale, validate_args=False).cdf(x).log(),
        "icdf": lambda: Cauchy(loc, scale, validate_args=False).icdf(q),
    }
    fns = {f"{k} ours": f for k, f in ours.items()} | {f"{k} torch": f for k, f in theirs.items()}
    d, c = size["vmap"]["d"], size["vmap"]["c"]
    small = [t.reshape(-1)[: d * c].reshape(d, c) for t in (loc, scale, x)]

    def ours_vmap() -> object:
        return vmap(lambda a, b, y: IndependentCauchy(a, b).log_prob(y))(*small)

    def torch_vmap() -> object:
        return vmap(lambda a, b, y: Independent(Cauchy(a, b, validate_args=False), 1).log_prob(y))(
            *small
        )

    fns |= {"vmap log_prob ours (validation on)": ours_vmap, "vmap log_prob torch": torch_vmap}
    seconds = timed(fns, size["rounds"], device)
    ratios = {f"{k} ours / torch": seconds[f"{k} ours"] / seconds[f"{k} torch"] for k in ours}
    ratios["vmap log_prob ours / torch"] = (
        seconds["vmap log_prob ours (validation on)"] / seconds["vmap log_prob torch"]
    )
    return {"shape": {"n": n, "v": v, "vmap": size["vmap"]}, "seconds": seconds, "ratios": ratios}


# ------------------------------------------------------------------------------------ tests


def _checkout_env() -> dict[str, str]:
    """This environment with the checkout on ``PYTHONPATH``: an interpreter without cauchylin
    installed runs the subprocesses on this checkout."""
    path = os.pathsep.join(
        p for p in (str(ROOT), str(ROOT / "adapters"), os.environ.get("PYTHONPATH")) if p
    )
    return {**os.environ, "PYTHONPATH": path}


def run_tests(dry_run: bool, log: Path) -> dict:
    """``pytest -m cuda`` (collection only in a dry run); its summary line and exit status."""
    cmd = [sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider"]
    # every case, not -x: device time is scarce, and one run should show all that fails
    cmd += ["--collect-only"] if dry_run else ["-rs"]
    cmd += list(TEST_PATHS)
    say(("collecting" if dry_run else "running") + " the CUDA cases: " + " ".join(cmd[1:]))
    start = time.perf_counter()
    with log.open("w") as f:
        env = {**_checkout_env(), "CI": "true"}
        code = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    summary = lines[-1].strip(" =") if lines else ""
    say(f"pytest exit {code} in {time.perf_counter() - start:.0f} s: {summary}")
    return {"exit": code, "summary": summary, "seconds": time.perf_counter() - start}


# ----------------------------------------------------------------------------- command line


def _flats_table(path: Path, rows: int = 500) -> None:
    """The README's table: 500 flats whose price is about 3 per square metre."""
    import csv
    import random

    rng = random.Random(0)
    with path.open("w", newline="") as f:
        table = csv.writer(f)
        table.writerow(["area", "rooms", "price"])
        for _ in range(rows):
            area = rng.randint(30, 200)
            rooms = max(1, min(6, round(area / 35 + rng.uniform(-1, 1))))
            table.writerow([area, rooms, round(3 * area + rng.uniform(-10, 10))])


def run_cli(dry_run: bool, log: Path) -> dict:
    """The README's recipe through ``cauchylin-lm`` (train, predict, evaluate): each command's
    exit status and seconds, the first failure's last lines, the output in ``log``."""
    import tempfile

    steps = "2" if dry_run else "300"
    with tempfile.TemporaryDirectory(prefix="gpu_check_cli_") as folder:
        return _cli_commands(Path(folder), steps, log)


def _cli_commands(work: Path, steps: str, log: Path) -> dict:
    """:func:`run_cli`'s commands in the folder ``work`` (removed afterwards)."""
    _flats_table(work / "flats.csv")
    cli = [sys.executable, "-m", "cauchylin_hf.app.cli"]
    model = str(work / "flat-model")
    commands = {
        "train": [
            "train", "--from-config", "qwen2-tiny", "--data", "flats.csv", "--output-dir",
            model, "--max-steps", steps, "--batch-size", "32", "--learning-rate", "3e-3",
            "--warmup-ratio", "0.05", "--lr-scheduler", "cosine", "--no-progress",
        ],
        "predict": ["predict", model, "--prompt", "area 120, rooms 3 -> price "],
        "evaluate": ["evaluate", model, "--data", "flats.csv", "--json", "--no-progress"],
    }  # fmt: skip
    env = _checkout_env()
    result: dict = {"commands": {}}
    with log.open("w") as f:
        for name, args in commands.items():
            say(f"cauchylin-lm {name} ...")
            start = time.perf_counter()
            proc = subprocess.run(cli + args, cwd=work, env=env, capture_output=True, text=True)
            seconds = time.perf_counter() - start
            f.write(f"$ cauchylin-lm {' '.join(args)}\n{proc.stdout}{proc.stderr}\n")
            result["commands"][name] = {"exit": proc.returncode, "seconds": seconds}
            say(f"  exit {proc.returncode} in {seconds:.0f} s")
            if proc.returncode != 0:
                tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
                result["error"] = f"{name}: " + " / ".join(tail)[:400]
                say(f"  FAILED: {result['error']}")
                break
    return result


# ---------------------------------------------------------------------------------- reports


def markdown(result: dict) -> str:
    """The one table of the run (every ratio), with the device and the test summary above it."""
    head = [
        f"# GPU check: {result['device_name']}",
        "",
        "**DRY RUN on the CPU at toy sizes: the numbers below mean nothing.**"
        if result["dry_run"]
        else "",
        "**Below the declared floors: " + "; ".join(result["below_floors"]) + ".**"
        if result.get("below_floors")
        else "",
        f"torch {result['torch']}, CUDA {result['cuda']}, Python {result['python']}; "
        f"tests (`pytest -m cuda`): {result['tests']['summary']} (exit {result['tests']['exit']})",
        "command line (the README recipe): "
        + (
            ", ".join(
                f"{k} exit {v['exit']} ({v['seconds']:.0f} s)"
                for k, v in result["cli"].get("commands", {}).items()
            )
            or "skipped"
        )
        + (f"; FAILED {result['cli']['error']}" if result["cli"].get("error") else ""),
        "",
        "| benchmark | dtype | ratio | value |",
        "|---|---|---|---|",
    ]
    rows = []
    for dtype, per in result["benchmarks"].items():
        for name, bench in per.items():
            for ratio, value in bench.get("ratios", {}).items():
                rows.append(f"| {name} | {dtype} | {ratio} | {value:.3f} |")
            if bench.get("error"):
                rows.append(f"| {name} | {dtype} | failed | {bench['error']} |")
            if bench.get("note"):
                rows.append(f"| {name} | {dtype} | note | {bench['note']} |")
    return "\n".join([line for line in head if line is not None] + rows) + "\n"


# What the check needs beside the GPU: the declared floors of pyproject.toml that matter here.
NEEDS = {"torch": (2, 13), "transformers": (5, 23), "pyro-ppl": (1, 9)}


def missing_requirements() -> list[str]:
    """The packages this interpreter lacks, or has below the floors of ``NEEDS``."""
    from importlib import metadata

    problems = []
    for name, floor in NEEDS.items():
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            problems.append(f"{name} is not installed (needs >= {'.'.join(map(str, floor))})")
            continue
        parts = tuple(int(p) for p in version.split("+")[0].split(".")[:2] if p.isdigit())
        if parts < floor:
            problems.append(f"{name} {version} is below {'.'.join(map(str, floor))}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu_check", help="folder of gpu_check.json and .md")
    parser.add_argument(
        "--dry-run", action="store_true", help="no CUDA needed: the plumbing at toy sizes"
    )
    parser.add_argument("--skip-tests", action="store_true", help="benchmarks only")
    parser.add_argument(
        "--only",
        default=None,
        help="comma list of ovr_loss,decode,train_step,elementwise,cli",
    )
    parser.add_argument(
        "--below-floors",
        action="store_true",
        help="run on an interpreter below the declared floors (a GPU image that cannot install "
        "newer ones); the shortfall is written at the top of both files",
    )
    args = parser.parse_args(argv)
    device = cauchylin.available_device()
    if device.type != "cuda" and not args.dry_run:
        say(
            f"no CUDA device here (cauchylin.available_device() is {device}; torch "
            f"{torch.__version__}, CUDA build {torch.version.cuda}): nothing to measure. "
            "Run with --dry-run to check the plumbing."
        )
        return 2
    problems = missing_requirements()
    below = [p for p in problems if "below" in p] if args.below_floors else []
    if [p for p in problems if p not in below]:
        say("this interpreter cannot run cauchylin: " + "; ".join(problems))
        if any("below" in p for p in problems):
            say("(--below-floors runs anyway and says so in the results)")
        return 2
    if below:
        say("BELOW THE DECLARED FLOORS, as asked: " + "; ".join(below))
    if args.dry_run:
        device = torch.device("cpu")
        say("DRY RUN: the plumbing on the CPU at toy sizes (numbers mean nothing)")
    size = TOY if args.dry_run else FULL
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    result: dict = {
        "dry_run": args.dry_run,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "tests": {"summary": "skipped", "exit": None},
        "cli": {},
        "below_floors": below,
        "benchmarks": {},
    }
    if not args.skip_tests:
        result["tests"] = run_tests(args.dry_run, out / "pytest.log")
    wanted = set((args.only or "ovr_loss,decode,train_step,elementwise,cli").split(","))
    if "cli" in wanted:
        result["cli"] = run_cli(args.dry_run, out / "cli.log")
    for tag, dtype in DTYPES.items():
        per: dict[str, dict] = {}
        built = None
        for name in ("ovr_loss", "decode", "train_step", "elementwise"):
            if name not in wanted:
                continue
            say(f"{name} ({tag}) ...")
            try:
                if name in ("decode", "train_step") and built is None:
                    built = _models(device, dtype, size)
                if name == "ovr_loss":
                    per[name] = bench_ovr_loss(device, dtype, size)
                elif name == "decode":
                    per[name] = bench_decode(device, dtype, size, built)
                elif name == "train_step":
                    per[name] = bench_train_step(device, dtype, size, built)
                else:
                    per[name] = bench_elementwise(device, dtype, size)
            except Exception as exc:  # one failed benchmark must not hide the others
                per[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            for ratio, value in per[name].get("ratios", {}).items():
                say(f"  {ratio}: {value:.3f}")
            if per[name].get("error"):
                say(f"  FAILED: {per[name]['error']}")
        del built
        if device.type == "cuda":
            torch.cuda.empty_cache()
        result["benchmarks"][tag] = per
    result["seconds"] = time.perf_counter() - start
    (out / "gpu_check.json").write_text(json.dumps(result, indent=2))
    (out / "gpu_check.md").write_text(markdown(result))
    say(f"wrote {out / 'gpu_check.json'} and {out / 'gpu_check.md'} in {result['seconds']:.0f} s")
    failed = [
        f"{tag}/{name}"
        for tag, per in result["benchmarks"].items()
        for name, bench in per.items()
        if bench.get("error")
    ]
    tests_failed = result["tests"]["exit"] not in (None, 0)
    failed += ["command line"] if result["cli"].get("error") else []
    if failed or tests_failed:
        say("FAILED: " + ", ".join(failed + (["tests"] if tests_failed else [])))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
