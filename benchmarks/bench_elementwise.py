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
    python benchmarks/bench_elementwise.py --device cuda   # larger shapes on a GPU
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
import timeit
from collections.abc import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

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


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument(
        "--n", type=int, default=None, help="rows (tokens) of the element-wise tensors"
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
    args = parser.parse_args(argv)

    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device available")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    big = device == "cuda"
    n = args.n or (4096 if big else 64)
    v = args.v or (32768 if big else 4096)
    c = args.c or (896 if big else 128)
    dtype = getattr(torch, args.dtype)
    g = torch.Generator(device="cpu").manual_seed(0)

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=dtype).to(device)

    loc = rnd(n, v) * 3
    scale = rnd(n, v).abs() + 0.1
    x = loc + scale * rnd(n, v) * 10
    thr = rnd(v)

    cauchylin.set_validate_args(False)  # value checks off on both sides (see the docstring)
    torch.distributions.Distribution.set_default_validate_args(False)
    print(
        f"device {device} ({torch.get_num_threads()} threads)"
        if device == "cpu"
        else f"device {torch.cuda.get_device_name()}"
    )
    print(
        f"element-wise: [{n}, {v}] {args.dtype}; linear: U [{n}, {c}] -> [{n}, {v}]; "
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


if __name__ == "__main__":
    main()
