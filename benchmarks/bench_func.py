"""``torch.func.vmap`` over many small Cauchy distributions: vs the Python loop and vs torch's Cauchy.

``D`` small distributions (``C`` components each, one value each) scored by ``log_prob``, timed
side by side in one process, interleaved over several rounds (the order alternating; each side
times ``--repeat`` calls per round; each ratio is taken within a round, and the median of the
rounds is printed with [min-max]):

=====================  ==========================================================================
``loop``               ``[IndependentCauchy(loc[i], scale[i]).log_prob(x[i]) for i in range(D)]``
``vmap``               ``vmap(lambda l, s, v: IndependentCauchy(l, s).log_prob(v))(loc, scale, x)``
``torch vmap``         the same ``vmap`` over ``Independent(Cauchy(l, s), 1).log_prob(v)``: torch's
                       Cauchy (``validate_args=False`` always: torch's checks branch on a tensor,
                       which ``vmap`` refuses)
``compiled vmap``      ``torch.compile`` of the ``vmap`` (``--backend``, default inductor), checked
                       to agree with the eager ``vmap``
=====================  ==========================================================================

cauchylin's side runs with validation on (the default of both libraries, checked under ``vmap``
on every batch member) and off. The ratios printed: ``loop / vmap`` (target >= 10),
``vmap / torch vmap`` (target <= 1.2), both with validation on and off, and the largest
difference between the compiled and the eager ``vmap`` (they must agree to a few float32 ulp).

Run:
    python benchmarks/bench_func.py                       # D = 1000, C = 8
    python benchmarks/bench_func.py --threads 1 --timer process   # CPU time: a loaded machine
    python benchmarks/bench_func.py --no-gc                        # no garbage collection while timing
    python benchmarks/bench_func.py --device cuda --json func.json --plot func.png
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for folder in (ROOT, HERE):
    if folder not in sys.path:
        sys.path.insert(0, folder)

import torch  # noqa: E402
from _machine import describe, machine_info  # noqa: E402
from torch.distributions import Cauchy, Independent  # noqa: E402
from torch.func import vmap  # noqa: E402

import cauchylin  # noqa: E402
from cauchylin.distributions import IndependentCauchy  # noqa: E402


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _ours(validate: bool) -> Callable[..., torch.Tensor]:
    def log_prob(loc, scale, x):
        return IndependentCauchy(loc, scale, validate_args=validate).log_prob(x)

    return log_prob


def _torch_log_prob(loc, scale, x):
    return Independent(Cauchy(loc, scale, validate_args=False), 1).log_prob(x)


def sides(
    loc: torch.Tensor, scale: torch.Tensor, x: torch.Tensor, backend: str
) -> tuple[dict[str, Callable[[], torch.Tensor]], torch.Tensor, torch.Tensor]:
    """The timed callables, and the compiled and eager ``vmap`` results (for the agreement check)."""
    d = loc.shape[0]
    fns: dict[str, Callable[[], torch.Tensor]] = {}
    for validate in (True, False):
        f = _ours(validate)
        tag = "on" if validate else "off"
        fns[f"loop (validation {tag})"] = lambda f=f: torch.stack(
            [f(loc[i], scale[i], x[i]) for i in range(d)]
        )
        fns[f"vmap (validation {tag})"] = lambda f=f: vmap(f)(loc, scale, x)
    fns["torch vmap"] = lambda: vmap(_torch_log_prob)(loc, scale, x)
    compiled = torch.compile(vmap(_ours(False)), backend=backend, fullgraph=True)
    compiled_out = compiled(loc, scale, x)  # compiles here, outside the timing
    fns["compiled vmap"] = lambda: compiled(loc, scale, x)
    return fns, compiled_out, vmap(_ours(False))(loc, scale, x)


def measure(
    fns: dict[str, Callable[[], torch.Tensor]],
    rounds: int,
    repeat: int,
    device: str,
    clock: Callable[[], float] = time.perf_counter,
    collect: bool = True,
) -> dict[str, list[float]]:
    """Seconds per call of each side in each of ``rounds`` interleaved rounds (by ``clock``);
    ``collect=False`` runs Python's garbage collector before each timed block and keeps it off
    during it (as ``timeit`` does)."""
    names = list(fns)
    per: dict[str, list[float]] = {n: [] for n in names}
    for fn in fns.values():  # warm up (allocator, first-call work)
        fn()
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            _sync(device)
            if not collect:
                gc.collect()
                gc.disable()
            start = clock()
            for _ in range(repeat):
                fns[name]()
            _sync(device)
            per[name].append((clock() - start) / repeat)
            gc.enable()
    return per


def run(args: argparse.Namespace) -> dict:
    g = torch.Generator().manual_seed(0)
    shape = (args.d, args.c)
    loc = torch.randn(shape, generator=g).to(args.device)
    scale = (torch.rand(shape, generator=g) + 0.5).to(args.device)
    x = torch.randn(shape, generator=g).to(args.device)
    fns, compiled_out, eager_out = sides(loc, scale, x, args.backend)
    loop_out = fns["loop (validation on)"]()
    ref = _torch_log_prob(loc.double(), scale.double(), x.double())
    # A few float32 ulp of each summand (C terms of magnitude up to |log p|).
    tol = 8 * args.c * torch.finfo(torch.float32).eps * float(ref.abs().max())
    diffs = {
        "compiled vs eager vmap": float((compiled_out.double() - eager_out.double()).abs().max()),
        "vmap vs loop": float((eager_out.double() - loop_out.double()).abs().max()),
        "vmap vs torch (float64)": float((eager_out.double() - ref).abs().max()),
    }
    agree = all(v <= tol for v in diffs.values())
    clock = time.process_time if args.timer == "process" else time.perf_counter
    per_round = measure(fns, args.rounds, args.repeat, args.device, clock, not args.no_gc)
    pairs = {
        "loop / vmap (validation on)": ("loop (validation on)", "vmap (validation on)"),
        "loop / vmap (validation off)": ("loop (validation off)", "vmap (validation off)"),
        "vmap / torch vmap (validation on)": ("vmap (validation on)", "torch vmap"),
        "vmap / torch vmap (validation off)": ("vmap (validation off)", "torch vmap"),
        "compiled vmap / eager vmap": ("compiled vmap", "vmap (validation off)"),
    }
    # each ratio within a round (both sides measured back to back), then the median of the rounds
    in_round = {
        name: [a / b for a, b in zip(per_round[top], per_round[bottom], strict=True)]
        for name, (top, bottom) in pairs.items()
    }
    return {
        "seconds": {n: statistics.median(t) for n, t in per_round.items()},
        "ratios": {n: statistics.median(r) for n, r in in_round.items()},
        "ratio_ranges": {n: [min(r), max(r)] for n, r in in_round.items()},
        "differences": diffs,
        "tolerance": tol,
        "agree": agree,
    }


def report(out: dict, args: argparse.Namespace) -> None:
    print(f"D = {args.d} distributions of C = {args.c} components, {args.device}")
    print(f"{'side':<28}{'time per call':>16}")
    for name, s in out["seconds"].items():
        print(f"{name:<28}{s * 1e6:>13.1f} us")
    targets = {"loop /": ">= 10", "vmap / torch": "<= 1.2"}
    for name, r in out["ratios"].items():
        target = next((t for k, t in targets.items() if name.startswith(k)), "")
        lo, hi = out["ratio_ranges"][name]
        print(
            f"ratio {name:<36}{r:>8.2f} [{lo:.2f}-{hi:.2f}]  "
            f"{('target ' + target) if target else ''}"
        )
    for name, d in out["differences"].items():
        print(f"max |difference| {name:<28}{d:.3g}  (tolerance {out['tolerance']:.3g})")
    print("compiled and eager agree" if out["agree"] else "MISMATCH beyond the tolerance")


def plot(out: dict, path: str, footnote_text: str) -> None:
    from _plotting import footnote, pyplot, ratio_bars, save

    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 4.2))
    groups = ["validation on", "validation off"]
    r = out["ratios"]
    ratio_bars(
        left,
        groups,
        {"loop / vmap": [r[f"loop / vmap ({g})"] for g in groups]},
        targets={"target >= 10": 10.0},
        ylabel="speed-up of vmap over the Python loop",
    )
    left.set_title("vmap vs the Python loop (higher is better)", fontsize=10)
    ratio_bars(
        right,
        groups,
        {"vmap / torch's Cauchy under vmap": [r[f"vmap / torch vmap ({g})"] for g in groups]},
        targets={"target <= 1.2": 1.2},
        ylabel="time ratio (ours / torch)",
    )
    right.set_title("vs torch's Cauchy under vmap (lower is better)", fontsize=10)
    fig.suptitle("vmap'ed IndependentCauchy.log_prob over small distributions", fontsize=11)
    footnote(fig, footnote_text)
    save(fig, path)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--d", type=int, default=1000, help="number of distributions")
    parser.add_argument("--c", type=int, default=8, help="components per distribution")
    parser.add_argument("--device", default=None, help="default: cauchylin.available_device()")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=20, help="calls per side and round")
    parser.add_argument("--backend", default="inductor", help="torch.compile backend")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (CPU)")
    parser.add_argument(
        "--timer",
        default="wall",
        choices=["wall", "process"],
        help="wall clock, or process CPU time (robust on a loaded machine; CPU only, with "
        "--threads 1)",
    )
    parser.add_argument(
        "--no-gc",
        action="store_true",
        help="Python's garbage collector off while timing (as timeit does); collections then "
        "do not land on whichever side happens to allocate when one is due",
    )
    parser.add_argument("--json", default=None)
    parser.add_argument("--plot", default=None)
    args = parser.parse_args(argv)
    args.device = args.device or str(cauchylin.available_device())
    if args.d < 1 or args.c < 1 or args.rounds < 1 or args.repeat < 1:
        parser.error("--d, --c, --rounds and --repeat must be positive")
    if args.timer == "process" and not args.device.startswith("cpu"):
        parser.error("--timer process measures CPU time: use it with --device cpu")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    print(describe(args.device, with_allocator=False))
    out = run(args)
    report(out, args)
    own = list(sys.argv[1:] if argv is None else argv)
    command = "python benchmarks/bench_func.py " + " ".join(own)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "command": command,
                    "machine": machine_info(args.device),
                    "d": args.d,
                    "c": args.c,
                    "device": args.device,
                    "backend": args.backend,
                    "timer": args.timer,
                    "gc": not args.no_gc,
                    **out,
                },
                f,
                indent=2,
            )
    if args.plot:
        plot(out, args.plot, f"{describe(args.device, with_allocator=False)}.  {command}")
    if not out["agree"]:
        raise SystemExit("the compiled, eager and looped results disagree beyond the tolerance")
    return out


if __name__ == "__main__":
    main()
