"""Element-wise kernels and linear marginals of ``CauchyVector`` against plain torch, side by side.

Each line times a ``cauchylin`` operation and its plain-torch baseline on the same tensors, in
one process, interleaved over several rounds (``torch.utils.benchmark.Timer.blocked_autorange``),
and prints ``ratio = cauchylin / baseline`` (ratio of the fastest blocks of each side, and the
median of the per-round ratios; lower is better, the target is <= 1.2):

==================  ==========================================================================
``log_prob``        ``CauchyVector(loc, scale).log_prob(x)`` vs
                    ``torch.distributions.Cauchy(loc, scale).log_prob(x)``
``log_cdf``         ``CauchyVector(loc, scale).log_cdf(x)`` vs ``Cauchy(loc, scale).cdf(x).log()``
``ovr_log_prob``    ``CauchyVector(loc, scale).ovr_log_prob(thr)`` (``log P``, ``log(1 - P)``) vs
                    ``c = Cauchy(loc, scale).cdf(thr); (log(1 - c), log(c))``
``linear``          ``U.linear(W, b)`` then ``.loc`` and ``.scale`` vs the two matmuls it needs,
                    ``loc @ W.T + b`` and ``scale @ W.abs().T``
==================  ==========================================================================

Both sides build their object inside the timed statement (``CauchyVector`` / ``Cauchy``), and
argument-*value* validation is off on both sides (it synchronises with the device and is not
part of the kernels; shape checks still run). The baselines are not equally accurate: torch's
``log(cdf)`` loses everything in the tails (``-inf`` or ``0`` where cauchylin is exact to a few
ulp), so the comparison is "the price of exactness".

Run:
    python benchmarks/bench_elementwise.py                 # CPU, shapes for a 2-core machine
    python benchmarks/bench_elementwise.py --sweep-n 16,64,256,1024 --plot elementwise.png
    python benchmarks/bench_elementwise.py --device cuda   # larger shapes on a GPU
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import timeit
from collections.abc import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for folder in (ROOT, os.path.dirname(os.path.abspath(__file__))):
    if folder not in sys.path:
        sys.path.insert(0, folder)

import torch  # noqa: E402
from torch.utils.benchmark import Timer  # noqa: E402

import cauchylin  # noqa: E402
from cauchylin import CauchyVector  # noqa: E402

TARGET = 1.2


def _time(fn: Callable[[], object], min_run_time: float, device: str, timer: str) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    clock = time.process_time if timer == "process" else timeit.default_timer
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
    """Interleaved short blocks of both sides; the ratio of the least disturbed blocks (min) and
    the median of the per-round ratios."""
    for _ in range(3):  # warm-up (allocator, kernels, lazy init)
        ours()
        base()
    t_ours, t_base, ratios = [], [], []
    for r in range(args.rounds):
        # alternate the order so that neither side always runs first in a round
        if r % 2 == 0:
            a = _time(ours, args.min_run_time, args.device, args.timer)
            b = _time(base, args.min_run_time, args.device, args.timer)
        else:
            b = _time(base, args.min_run_time, args.device, args.timer)
            a = _time(ours, args.min_run_time, args.device, args.timer)
        t_ours.append(a)
        t_base.append(b)
        ratios.append(a / b)
    ratio_min = min(t_ours) / min(t_base)
    ratio_med = statistics.median(ratios)
    flag = "ok" if ratio_min <= TARGET else f"above {TARGET}"
    print(
        f"{name:<13s} cauchylin {min(t_ours) * 1e6:9.1f} us  baseline {min(t_base) * 1e6:9.1f} us"
        f"  ratio {ratio_min:5.2f}  (median of rounds {ratio_med:4.2f})  {flag}"
    )
    return {"ours": min(t_ours), "base": min(t_base), "ratio": ratio_min, "median": ratio_med}


def measure(n: int, v: int, c: int, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Time the four operations at one size; returns ``{operation: compare(...)}``."""
    device = args.device
    dtype = getattr(torch, args.dtype)
    g = torch.Generator(device="cpu").manual_seed(0)

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=dtype).to(device)

    loc = rnd(n, v) * 3
    scale = rnd(n, v).abs() + 0.1
    x = loc + scale * rnd(n, v) * 10
    thr = rnd(v)
    print(
        f"\nelement-wise: [{n}, {v}] {args.dtype}; linear: U [{n}, {c}] -> [{n}, {v}]; "
        "value validation off on both sides; ratio = cauchylin / baseline"
    )
    Cauchy = torch.distributions.Cauchy
    results = {}
    results["log_prob"] = compare(
        "log_prob",
        lambda: CauchyVector(loc, scale).log_prob(x),
        lambda: Cauchy(loc, scale).log_prob(x),
        args,
    )
    results["log_cdf"] = compare(
        "log_cdf",
        lambda: CauchyVector(loc, scale).log_cdf(x),
        lambda: Cauchy(loc, scale).cdf(x).log(),
        args,
    )

    def torch_ovr() -> tuple[torch.Tensor, torch.Tensor]:
        cdf = Cauchy(loc, scale).cdf(thr)
        return torch.log(1 - cdf), torch.log(cdf)

    results["ovr_log_prob"] = compare(
        "ovr_log_prob",
        lambda: CauchyVector(loc, scale).ovr_log_prob(thr),
        torch_ovr,
        args,
    )

    loc_u = rnd(n, c)
    scale_u = rnd(n, c).abs() + 0.1
    w = rnd(v, c) / math.sqrt(c)
    b = rnd(v)

    def ours_linear() -> tuple[torch.Tensor, torch.Tensor]:
        s = CauchyVector(loc_u, scale_u).linear(w, b)
        return s.loc, s.scale

    def base_linear() -> tuple[torch.Tensor, torch.Tensor]:
        return loc_u @ w.T + b, scale_u @ w.abs().T

    results["linear"] = compare("linear", ours_linear, base_linear, args)
    worst = max(r["ratio"] for r in results.values())
    print(f"worst ratio {worst:.2f} (target <= {TARGET}; ratios of the least disturbed blocks)")
    return results


def plot(sweep: dict[int, dict[str, dict[str, float]]], v: int, machine: str, path: str) -> str:
    """Left: times at the largest size, cauchylin beside torch. Right: ratio against rows."""
    from _plotting import BASE, OURS, footnote, pyplot, ratio_bars, save
    from _plotting import TARGET as TARGET_COLOUR

    plt = pyplot()
    sizes = sorted(sweep)
    ops = list(sweep[sizes[-1]])
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    largest = sweep[sizes[-1]]
    xs = range(len(ops))
    left.bar(
        [x - 0.2 for x in xs],
        [largest[o]["ours"] * 1e3 for o in ops],
        0.4,
        label="cauchylin",
        color=OURS,
    )
    left.bar(
        [x + 0.2 for x in xs],
        [largest[o]["base"] * 1e3 for o in ops],
        0.4,
        label="plain torch",
        color=BASE,
    )
    left.set_xticks(list(xs))
    left.set_xticklabels(ops)
    left.set_ylabel("time per call (ms)")
    left.set_title(f"Time per call, inputs [{sizes[-1]}, {v}]")
    left.legend(fontsize=8)
    if len(sizes) > 1:
        for op, marker in zip(ops, "osD^", strict=False):
            right.plot(sizes, [sweep[n][op]["ratio"] for n in sizes], marker=marker, label=op)
        right.axhline(1.0, color="black", lw=0.8)
        right.axhline(TARGET, color=TARGET_COLOUR, lw=1, ls="--", label=f"target {TARGET}")
        right.set_xscale("log", base=2)
        right.set_xticks(sizes)
        right.set_xticklabels([str(n) for n in sizes])
        right.set_xlabel(f"rows N (inputs [N, {v}])")
        right.set_ylabel("ratio cauchylin / torch")
        right.set_ylim(0, max(1.5, *(sweep[n][o]["ratio"] for n in sizes for o in ops)) * 1.1)
        right.legend(fontsize=8)
        right.set_title("Ratio against the input size (lower is better)")
    else:
        ratio_bars(
            right, ops, {"ratio": [largest[o]["ratio"] for o in ops]}, {f"target {TARGET}": TARGET}
        )
        right.set_title("Ratio cauchylin / torch (lower is better)")
    footnote(fig, machine)
    return save(fig, path)


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument(
        "--n", type=int, default=None, help="rows (tokens) of the element-wise tensors"
    )
    parser.add_argument(
        "--sweep-n",
        default=None,
        help="comma list of row counts to measure one after another (e.g. 16,64,256,1024); "
        "overrides --n",
    )
    parser.add_argument("--v", type=int, default=None, help="columns (classes)")
    parser.add_argument("--c", type=int, default=None, help="input size of the linear map")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved timing rounds")
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
    args = parser.parse_args(argv)

    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device available")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    big = device == "cuda"
    if args.sweep_n:
        try:
            sizes = [int(s) for s in args.sweep_n.split(",") if s.strip()]
        except ValueError:
            parser.error(f"--sweep-n: expected comma-separated integers, got {args.sweep_n!r}")
        if not sizes or min(sizes) < 1:
            parser.error(f"--sweep-n: expected positive integers, got {args.sweep_n!r}")
    else:
        sizes = [args.n or (4096 if big else 64)]
    v = args.v or (32768 if big else 4096)
    c = args.c or (896 if big else 128)

    cauchylin.set_validate_args(False)  # value checks off on both sides (see the docstring)
    torch.distributions.Distribution.set_default_validate_args(False)
    machine = (
        f"CPU, {torch.get_num_threads()} threads"
        if device == "cpu"
        else torch.cuda.get_device_name()
    )
    print(f"device {device} ({machine}), torch {torch.__version__}")
    sweep = {n: measure(n, v, c, args) for n in sizes}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"device": machine, "v": v, "c": c, "dtype": args.dtype, "results": sweep},
                f,
                indent=2,
            )
    if args.plot:
        command = "python benchmarks/bench_elementwise.py " + " ".join(
            sys.argv[1:] if argv is None else argv
        )
        plot(sweep, v, f"{machine}, torch {torch.__version__}, {args.dtype}.  {command}", args.plot)
    return sweep[sizes[-1]]


if __name__ == "__main__":
    main()
