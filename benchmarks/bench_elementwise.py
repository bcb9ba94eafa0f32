"""Element-wise kernels and linear marginals of ``CauchyVector`` against plain torch, side by side.

Each line times a ``cauchylin`` operation and its plain-torch baseline on the same tensors, in
one process, interleaved over several rounds (``torch.utils.benchmark.Timer.blocked_autorange``
per side and round, the order alternating), and prints ``ratio = cauchylin / baseline``: the
median of the per-round ratios with [min-max]; lower is better, the target is <= 1.2:

==================  ==========================================================================
``log_prob``        ``CauchyVector(loc, scale).log_prob(x)`` vs
                    ``torch.distributions.Cauchy(loc, scale).log_prob(x)``
``cdf``             ``CauchyVector(loc, scale).cdf(x)`` vs ``Cauchy(loc, scale).cdf(x)``
``log_cdf``         ``CauchyVector(loc, scale).log_cdf(x)`` vs ``Cauchy(loc, scale).cdf(x).log()``
``ovr_log_prob``    ``CauchyVector(loc, scale).ovr_log_prob(thr)`` (``log P``, ``log(1 - P)``) vs
                    ``c = Cauchy(loc, scale).cdf(thr); (log(1 - c), log(c))``
``icdf``            ``CauchyVector(loc, scale).icdf(q)`` vs ``Cauchy(loc, scale).icdf(q)``
``linear``          ``U.linear(W, b)`` then ``.loc`` and ``.scale`` vs the two matmuls it needs,
                    ``loc @ W.T + b`` and ``scale @ W.abs().T``
==================  ==========================================================================

Both sides build their object inside the timed statement (``CauchyVector`` / ``Cauchy``), with
argument-value validation on for both (``--validate on``, the default of both libraries: it
checks ``loc``, ``scale`` and the argument) or off for both. The baselines are less accurate:
torch's ``log(cdf)`` is ``-inf`` or ``0`` far in the tails and its ``icdf(1)`` a finite number of
the wrong sign, where cauchylin is exact to a few ulp, so the ratios are the price of exactness.

The C allocator changes CPU ratios: glibc's default returns every freed multi-megabyte tensor to
the operating system and page-faults the next one in again, which costs the side that allocates
more fresh tensors (usually torch's chain of operations). ``--allocators glibc,keep`` measures
each setting in its own subprocess: ``glibc`` (the default settings) and ``keep`` (glibc told to
keep freed memory for reuse, ``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` set to
4 GiB, which is what jemalloc, tcmalloc and the CUDA caching allocator do), printed side by side.
The header states the CPU, the allocator and the thread count.

Run:
    python benchmarks/bench_elementwise.py                  # [1024, 4096] and [64, 151936]
    python benchmarks/bench_elementwise.py --threads 1 --timer process --rounds 9
    python benchmarks/bench_elementwise.py --shapes 16x4096,256x4096 --validate off
    python benchmarks/bench_elementwise.py --sweep-n 16,64,256,1024 --v 4096
    python benchmarks/bench_elementwise.py --json elementwise.json --plot elementwise.png
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for folder in (ROOT, HERE):
    if folder not in sys.path:
        sys.path.insert(0, folder)

import torch  # noqa: E402
from _machine import KEEP_FREED_MEMORY, describe, machine_info  # noqa: E402
from torch.utils.benchmark import Timer  # noqa: E402

import cauchylin  # noqa: E402
from cauchylin import CauchyVector  # noqa: E402

TARGET = 1.2
OPS = ("log_prob", "cdf", "log_cdf", "ovr_log_prob", "icdf", "linear")
ALLOCATORS = {
    "glibc": "glibc default",
    "keep": "glibc, keeps freed memory",
}


def _time(fn: Callable[[], object], min_run_time: float, device: str, clock) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    t = Timer("fn()", globals={"fn": fn}, timer=clock).blocked_autorange(min_run_time=min_run_time)
    if device == "cuda":
        torch.cuda.synchronize()
    return t.median


def compare(
    name: str,
    ours: Callable[[], object],
    base: Callable[[], object],
    args: argparse.Namespace,
) -> dict[str, float]:
    """Interleaved rounds of both sides; the per-round ratios' median, min and max."""
    clock = time.process_time if args.timer == "process" else timeit.default_timer
    for _ in range(2):  # warm-up (allocator, kernels, lazy init)
        ours()
        base()
    t_ours, t_base, ratios = [], [], []
    for r in range(args.rounds):
        if r % 2 == 0:
            a = _time(ours, args.min_run_time, args.device, clock)
            b = _time(base, args.min_run_time, args.device, clock)
        else:
            b = _time(base, args.min_run_time, args.device, clock)
            a = _time(ours, args.min_run_time, args.device, clock)
        t_ours.append(a)
        t_base.append(b)
        ratios.append(a / b)
    return {
        "ours": statistics.median(t_ours),
        "base": statistics.median(t_base),
        "median": statistics.median(ratios),
        "min": min(ratios),
        "max": max(ratios),
    }


def measure(n: int, v: int, c: int, validate: bool, args: argparse.Namespace) -> dict[str, dict]:
    """Time every operation at one shape; returns ``{operation: compare(...)}``."""
    device = args.device
    dtype = getattr(torch, args.dtype)
    g = torch.Generator(device="cpu").manual_seed(0)

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=dtype).to(device)

    loc = rnd(n, v) * 3
    scale = rnd(n, v).abs() + 0.1
    x = loc + scale * rnd(n, v) * 10
    thr = rnd(v)
    q = torch.rand(n, v, generator=g, dtype=dtype).to(device)
    cauchylin.set_validate_args(validate)
    torch.distributions.Distribution.set_default_validate_args(validate)
    Cauchy = torch.distributions.Cauchy

    def torch_ovr() -> tuple[torch.Tensor, torch.Tensor]:
        cdf = Cauchy(loc, scale).cdf(thr)
        return torch.log(1 - cdf), torch.log(cdf)

    loc_u = rnd(n, c)
    scale_u = rnd(n, c).abs() + 0.1
    w = rnd(v, c) / math.sqrt(c)
    b = rnd(v)

    def ours_linear() -> tuple[torch.Tensor, torch.Tensor]:
        s = CauchyVector(loc_u, scale_u).linear(w, b)
        return s.loc, s.scale

    def base_linear() -> tuple[torch.Tensor, torch.Tensor]:
        return loc_u @ w.T + b, scale_u @ w.abs().T

    pairs = {
        "log_prob": (
            lambda: CauchyVector(loc, scale).log_prob(x),
            lambda: Cauchy(loc, scale).log_prob(x),
        ),
        "cdf": (lambda: CauchyVector(loc, scale).cdf(x), lambda: Cauchy(loc, scale).cdf(x)),
        "log_cdf": (
            lambda: CauchyVector(loc, scale).log_cdf(x),
            lambda: Cauchy(loc, scale).cdf(x).log(),
        ),
        "ovr_log_prob": (lambda: CauchyVector(loc, scale).ovr_log_prob(thr), torch_ovr),
        "icdf": (lambda: CauchyVector(loc, scale).icdf(q), lambda: Cauchy(loc, scale).icdf(q)),
        "linear": (ours_linear, base_linear),
    }
    results = {}
    for name in args.ops:
        results[name] = compare(name, *pairs[name], args)
    return results


def _shape_key(n: int, v: int) -> str:
    return f"{n}x{v}"


def run_child(args: argparse.Namespace) -> dict:
    """Measure every shape and validation setting in this process (one allocator)."""
    results: dict[str, dict[str, dict]] = {}
    for n, v in args.shape_list:
        for validate in args.validate_list:
            key = "on" if validate else "off"
            results.setdefault(_shape_key(n, v), {})[key] = measure(n, v, args.c, validate, args)
            print(f"  measured [{n}, {v}] validation {key}", file=sys.stderr, flush=True)
    return {"machine": machine_info(args.device), "machine_line": describe(args.device), **results}


def _child_env(allocator: str) -> dict[str, str]:
    env = {k: val for k, val in os.environ.items() if not k.startswith("MALLOC_")}
    if allocator == "keep":
        env.update(KEEP_FREED_MEMORY)
    return env


def _fmt(r: dict[str, float]) -> str:
    flag = "ok" if r["median"] <= TARGET else "ABOVE"
    return f"{r['median']:5.2f} [{r['min']:.2f}-{r['max']:.2f}] {flag:<5}"


def report(per_alloc: dict[str, dict], args: argparse.Namespace) -> None:
    allocs = list(per_alloc)
    print(
        f"\nratio = cauchylin / torch, median of {args.rounds} interleaved rounds [min-max], "
        f"{args.dtype}, target <= {TARGET}; times are medians (ms)"
    )
    for alloc in allocs:
        print(f"  {alloc:<6}: {per_alloc[alloc]['machine_line']}")
    for n, v in args.shape_list:
        for validate in args.validate_list:
            key = "on" if validate else "off"
            print(f"\n[{n}, {v}], validation {key} on both sides (linear: U [{n}, {args.c}])")
            head = "".join(f"{ALLOCATORS[a]:>40}" for a in allocs)
            print(f"{'operation':<14}{head}")
            for op in args.ops:
                cells = []
                for a in allocs:
                    r = per_alloc[a][_shape_key(n, v)][key][op]
                    cells.append(
                        f"{_fmt(r)} {r['ours'] * 1e3:6.1f}/{r['base'] * 1e3:6.1f}".rjust(40)
                    )
                print(f"{op:<14}{''.join(cells)}")
    worst = max(
        per_alloc[a][_shape_key(n, v)]["on" if val else "off"][op]["median"]
        for a in allocs
        for n, v in args.shape_list
        for val in args.validate_list
        for op in args.ops
    )
    print(f"\nworst median ratio {worst:.2f} (target <= {TARGET})")


def plot(per_alloc: dict[str, dict], args: argparse.Namespace, footnote_text: str, path: str):
    """One panel per (validation, shape): median ratio per operation, one bar per allocator."""
    from _plotting import footnote, pyplot, ratio_bars, save

    plt = pyplot()
    rows, cols = len(args.validate_list), len(args.shape_list)
    fig, axes = plt.subplots(rows, cols, figsize=(6.2 * cols, 3.8 * rows), squeeze=False)
    for i, validate in enumerate(args.validate_list):
        key = "on" if validate else "off"
        for j, (n, v) in enumerate(args.shape_list):
            ax = axes[i][j]
            series = {
                ALLOCATORS[a]: [
                    per_alloc[a][_shape_key(n, v)][key][op]["median"] for op in args.ops
                ]
                for a in per_alloc
            }
            ratio_bars(ax, list(args.ops), series, {f"target {TARGET}": TARGET})
            ax.set_title(f"[{n}, {v}], validation {key}: cauchylin / torch", fontsize=10)
            ax.tick_params(axis="x", labelsize=8)
    footnote(fig, footnote_text)
    return save(fig, path)


def _parse_shapes(text: str, parser: argparse.ArgumentParser) -> list[tuple[int, int]]:
    shapes = []
    for item in text.split(","):
        item = item.strip().lower()
        if not item:
            continue
        try:
            n, v = (int(x) for x in item.split("x"))
        except ValueError:
            parser.error(f"--shapes: expected NxV items like 1024x4096, got {item!r}")
        if n < 1 or v < 1:
            parser.error(f"--shapes: sizes must be positive, got {item!r}")
        shapes.append((n, v))
    if not shapes:
        parser.error("--shapes: give at least one NxV")
    return shapes


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument(
        "--shapes",
        default=None,
        help="comma list of NxV element-wise shapes (default 1024x4096,64x151936; "
        "4096x32768 on cuda)",
    )
    parser.add_argument(
        "--sweep-n",
        default=None,
        help="comma list of row counts N, each measured at [N, --v] (instead of --shapes)",
    )
    parser.add_argument("--v", type=int, default=4096, help="columns V of --sweep-n")
    parser.add_argument("--c", type=int, default=None, help="input size of the linear map")
    parser.add_argument("--ops", default=",".join(OPS), help=f"comma list from {list(OPS)}")
    parser.add_argument("--validate", default="on,off", help="on, off or on,off (both sides)")
    parser.add_argument(
        "--allocators",
        default="glibc,keep",
        help="comma list of glibc (default settings) and keep (keeps freed memory); "
        "each runs in its own subprocess",
    )
    parser.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds")
    parser.add_argument("--min-run-time", type=float, default=0.05, help="seconds per block")
    parser.add_argument(
        "--timer",
        default="wall",
        choices=["wall", "process"],
        help="wall clock, or process CPU time (robust on a loaded machine; use with --threads 1)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (CPU)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--json", default=None, help="also write the results to this file")
    parser.add_argument("--plot", default=None, help="also draw the results to this PNG file")
    parser.add_argument("--child-json", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.device == "cuda" and cauchylin.available_device().type != "cuda":
        parser.error("--device cuda: no CUDA device available")
    big = args.device == "cuda"
    if args.sweep_n:
        if args.shapes:
            parser.error("give --shapes or --sweep-n, not both")
        sizes = [n.strip() for n in args.sweep_n.split(",") if n.strip()]
        args.shapes = ",".join(f"{n}x{args.v}" for n in sizes) or "x"
    args.shape_list = _parse_shapes(
        args.shapes or ("4096x32768" if big else "1024x4096,64x151936"), parser
    )
    args.c = args.c or (896 if big else 128)
    args.ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    if not args.ops or any(o not in OPS for o in args.ops):
        parser.error(f"--ops: choose from {list(OPS)}, got {args.ops}")
    vals = [s.strip() for s in args.validate.split(",") if s.strip()]
    if not vals or any(s not in ("on", "off") for s in vals):
        parser.error(f"--validate: expected on, off or on,off, got {args.validate!r}")
    args.validate_list = [s == "on" for s in vals]
    allocs = [a.strip() for a in args.allocators.split(",") if a.strip()]
    if not allocs or any(a not in ALLOCATORS for a in allocs):
        parser.error(f"--allocators: choose from {list(ALLOCATORS)}, got {args.allocators!r}")
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    if args.child_json:  # one allocator, in this process
        out = run_child(args)
        with open(args.child_json, "w") as f:
            json.dump(out, f)
        return out

    own = list(sys.argv[1:] if argv is None else argv)
    print(describe(args.device, with_allocator=False))
    per_alloc: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for alloc in allocs:
            path = os.path.join(tmp, f"{alloc}.json")
            print(f"measuring with {ALLOCATORS[alloc]} (subprocess) ...", flush=True)
            proc = subprocess.run(
                [sys.executable, os.path.abspath(__file__), *own, "--child-json", path],
                env=_child_env(alloc),
                text=True,
                capture_output=True,
            )
            if proc.returncode != 0:
                sys.stderr.write(proc.stdout + proc.stderr)
                raise SystemExit(f"the {alloc} measurement failed (exit {proc.returncode})")
            with open(path) as f:
                per_alloc[alloc] = json.load(f)
    report(per_alloc, args)
    command = "python benchmarks/bench_elementwise.py " + " ".join(own)
    machine = (
        describe(args.device, with_allocator=False)
        + ", allocators: "
        + ", ".join(ALLOCATORS[a] for a in allocs)
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "command": command,
                    "machine": machine_info(args.device),
                    "dtype": args.dtype,
                    "c": args.c,
                    "timer": args.timer,
                    "rounds": args.rounds,
                    "results": {a: per_alloc[a] for a in allocs},
                },
                f,
                indent=2,
            )
    if args.plot:
        plot(per_alloc, args, f"{machine}.  {command}", args.plot)
    return per_alloc


if __name__ == "__main__":
    main()
