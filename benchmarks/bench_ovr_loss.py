"""Time and peak memory of the OvR loss against softmax cross-entropy heads, torch's fused one included.

One training step (forward + backward, gradients to every input) of heads of the same shape
(N counted tokens, C features, V classes):

* ``plain``  — materialise ``loc_S = loc_U @ W.T + b`` and ``scale_S = (scale_U + |b_noise|) @
  |W|.T`` (``[N, V]`` each) and call :func:`cauchylin.losses.ovr_bce`;
* ``fused``  — :func:`cauchylin.losses.ovr_bce_fused` on the same inputs (never ``[N, V]``);
* ``compiled`` — the ``plain`` step under ``torch.compile`` (Inductor may fuse the ``[N, V]``
  work);
* ``ce``     — a standard softmax head, ``F.cross_entropy(z @ W.T, labels)``;
* ``lce``    — torch's fused linear cross-entropy, ``F.linear_cross_entropy(z, W, labels,
  options=nn.LinearCrossEntropyOptions())`` (chunked over tokens: ``[N, V]`` never exists);
* ``lce_compiled`` — ``F.linear_cross_entropy(z, W, labels)`` (its reference path) under
  ``torch.compile``.

``linear_cross_entropy`` first shipped in torch 2.15: on an older torch the two ``lce`` rows say
so and are skipped (every other row still runs).

Every variant runs in a fresh ``spawn`` process. Peak extra memory is the peak minus what the
process holds once its inputs exist: on CUDA ``max_memory_allocated`` minus the allocated bytes
before the step; on CPU the resident-set high-water mark (``VmHWM``, reset through
``/proc/self/clear_refs`` right before the step; ``ru_maxrss`` where that is unavailable) minus
the resident set before the step. The memory step is the first full-size step of the process
(after a tiny warm-up that initialises the BLAS and autograd), so no freed-but-cached memory hides
in the baseline. Gradient buffers (``[V, C]`` for the weight, which every head must return) are
part of the peak; the table also shows the peak net of them.

Times are wall-clock seconds of one step after warm-up steps; the table shows the minimum (the
least disturbed run) and the median, and the minimum process CPU time (all threads; on a shared
machine it is far less sensitive to other processes than the wall clock). Target ratios use the
minimum wall-clock time; the CPU-time ratios are printed beside them.

Run:
    python benchmarks/bench_ovr_loss.py                  # N=256, C=256, V=32768 (2-core CPU)
    python benchmarks/bench_ovr_loss.py --qwen           # N=1024, C=896, V=151936
    python benchmarks/bench_ovr_loss.py --qwen --n 256   # the same head, fewer tokens
    python benchmarks/bench_ovr_loss.py --plot ovr_loss.png --json ovr_loss.json
    python benchmarks/bench_ovr_loss.py --device cuda --qwen
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for folder in (ROOT, os.path.dirname(os.path.abspath(__file__))):
    if folder not in sys.path:
        sys.path.insert(0, folder)

VARIANTS = ("plain", "fused", "compiled", "ce", "lce", "lce_compiled")
OVR = ("plain", "fused", "compiled")
TORCH_FUSED = ("lce", "lce_compiled")  # torch.nn.functional.linear_cross_entropy (torch >= 2.15)
MIB = 1024.0 * 1024.0


# --------------------------------------------------------------------------------------------
# memory probes
# --------------------------------------------------------------------------------------------


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _hwm_bytes(reset_ok: bool) -> int:
    if reset_ok:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# --------------------------------------------------------------------------------------------
# the three heads
# --------------------------------------------------------------------------------------------


def _make_inputs(cfg, n, c, v, device):
    import torch

    g = torch.Generator().manual_seed(cfg["seed"])
    dt = getattr(torch, cfg["dtype"])

    def leaf(t):
        return t.to(device=device, dtype=dt).requires_grad_()

    inp = {
        "loc_U": leaf(torch.randn(n, c, generator=g)),
        "scale_U": leaf(torch.rand(n, c, generator=g) + 0.5),
        "b_noise": leaf(torch.full((c,), 0.1)),
        "W": leaf(torch.randn(v, c, generator=g) / c**0.5),
        "b": leaf(torch.zeros(v)),
        "labels": torch.randint(0, v, (n,), generator=g).to(device),
    }
    if cfg["learnable_threshold"]:
        inp["threshold"] = leaf(torch.zeros(v))
    else:
        inp["threshold"] = 0.0
    return inp


def _step(variant, inp, cfg):
    import torch
    import torch.nn.functional as F

    from cauchylin.losses import ovr_bce, ovr_bce_fused

    validate = cfg["validate"]
    if variant == "plain":
        loc_S = torch.addmm(inp["b"], inp["loc_U"], inp["W"].t())
        scale_S = (inp["scale_U"] + inp["b_noise"].abs()) @ inp["W"].abs().t()
        loss = ovr_bce(loc_S, scale_S, inp["labels"], inp["threshold"], validate_args=validate).mean
        del loc_S, scale_S
    elif variant == "fused":
        chunk = tuple(cfg["chunk"]) if cfg["chunk"] else None
        loss = ovr_bce_fused(
            inp["loc_U"],
            inp["scale_U"] + inp["b_noise"].abs(),
            inp["W"],
            inp["b"],
            inp["threshold"],
            inp["labels"],
            chunk_size=chunk,
            validate_args=validate,
        ).mean
    elif variant == "compiled":
        loss = _compiled("plain", validate)(
            inp["loc_U"],
            inp["scale_U"],
            inp["b_noise"],
            inp["W"],
            inp["b"],
            inp["threshold"],
            inp["labels"],
        )
    elif variant == "ce":
        loss = F.cross_entropy(inp["loc_U"] @ inp["W"].t(), inp["labels"])
    elif variant == "lce":
        options = torch.nn.LinearCrossEntropyOptions()
        loss = F.linear_cross_entropy(inp["loc_U"], inp["W"], inp["labels"], options=options)
    elif variant == "lce_compiled":
        loss = _compiled("lce", validate)(inp["loc_U"], inp["W"], inp["labels"])
    else:
        raise ValueError(variant)
    loss.backward()
    return float(loss.detach())


_COMPILED: dict = {}


def _compiled(kind, validate):
    """The compiled step of a kind (compiled once per process, shapes marked dynamic so that
    the warm-up's tiny shapes and the measured ones share one graph)."""
    import torch
    import torch.nn.functional as F

    from cauchylin.losses import ovr_bce

    if kind not in _COMPILED:
        if kind == "plain":

            def step(loc_U, scale_U, b_noise, W, b, threshold, labels):
                loc_S = torch.addmm(b, loc_U, W.t())
                scale_S = (scale_U + b_noise.abs()) @ W.abs().t()
                return ovr_bce(loc_S, scale_S, labels, threshold, validate_args=validate).mean

        else:

            def step(loc_U, W, labels):
                return F.linear_cross_entropy(loc_U, W, labels)

        _COMPILED[kind] = torch.compile(step, dynamic=True)
    return _COMPILED[kind]


def available(variant):
    """None when the installed torch has what ``variant`` needs, else why not."""
    import torch
    import torch.nn.functional as F

    if variant in TORCH_FUSED and not hasattr(F, "linear_cross_entropy"):
        return f"absent in torch {torch.__version__} (linear_cross_entropy: torch >= 2.15)"
    return None


def _clear_grads(inp):
    for t in inp.values():
        if hasattr(t, "grad"):
            t.grad = None


def _grad_bytes(inp):
    total = 0
    for t in inp.values():
        if getattr(t, "grad", None) is not None:
            total += t.grad.numel() * t.grad.element_size()
    return total


def _sync(device):
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _worker(variant, cfg, measure_memory, queue):
    try:
        import torch

        if cfg["threads"]:
            torch.set_num_threads(cfg["threads"])
        device = cfg["device"]
        # Tiny warm-up: BLAS, OpenMP pools and autograd initialise outside the measured step.
        tiny = _make_inputs(cfg, 8, 16, 64, device)
        _step(variant, tiny, cfg)
        del tiny
        inp = _make_inputs(cfg, cfg["n"], cfg["c"], cfg["v"], device)
        if variant in ("compiled", "lce_compiled"):  # compile for these shapes outside the probe
            _step(variant, inp, cfg)
            _clear_grads(inp)
        _sync(device)
        out = {"variant": variant, "threads": torch.get_num_threads()}
        if measure_memory:
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
                base = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                out["loss"] = _step(variant, inp, cfg)
                _sync(device)
                peak = torch.cuda.max_memory_allocated()
                out["probe"] = "cuda max_memory_allocated"
            else:
                base = _rss_bytes()
                ok = _reset_hwm()
                out["loss"] = _step(variant, inp, cfg)
                peak = _hwm_bytes(ok)
                out["probe"] = "VmHWM" if ok else "ru_maxrss"
            out["peak_extra"] = peak - base
            out["grad_bytes"] = _grad_bytes(inp)
            _clear_grads(inp)
        times, cpu = [], []
        for i in range(cfg["warmup"] + cfg["repeats"]):
            _clear_grads(inp)
            _sync(device)
            t0, c0 = time.perf_counter(), time.process_time()
            _step(variant, inp, cfg)
            _sync(device)
            if i >= cfg["warmup"]:
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
        out["times"] = times
        out["cpu"] = cpu
        queue.put(out)
    except BaseException as exc:  # report, never hang the parent
        queue.put({"variant": variant, "error": repr(exc)})


def _run_variant(variant, cfg, measure_memory):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_worker, args=(variant, cfg, measure_memory, q))
    p.start()
    res = q.get()
    p.join()
    if "error" in res:
        raise RuntimeError(f"{variant} failed: {res['error']}")
    return res


# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------


def main(argv=None):
    import torch
    from _machine import describe, machine_info

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=None, help="tokens, all counted (default 256)")
    ap.add_argument("--c", type=int, default=256, help="causal size C")
    ap.add_argument("--v", type=int, default=32768, help="classes V")
    ap.add_argument(
        "--qwen",
        action="store_true",
        help="Qwen2.5-0.5B head: C=896, V=151936 (N=1024 unless --n says otherwise)",
    )
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:i]")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument(
        "--variants", default=",".join(VARIANTS), help="comma list of " + ",".join(VARIANTS)
    )
    ap.add_argument("--repeats", type=int, default=None, help="timed steps per round")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps before timing")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds (fresh processes)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    ap.add_argument("--chunk", type=int, nargs=2, metavar=("TOKENS", "CLASSES"), default=None)
    ap.add_argument("--learnable-threshold", action="store_true", help="per-class thresholds")
    ap.add_argument("--validate", action="store_true", help="value checks on (default off)")
    ap.add_argument("--no-memory", action="store_true", help="skip the memory step")
    ap.add_argument("--json", default=None, help="also write the results to this file")
    ap.add_argument("--plot", default=None, help="also draw the results to this PNG file")
    args = ap.parse_args(argv)
    if args.qwen:
        args.c, args.v = 896, 151936
        args.n = 1024 if args.n is None else args.n
    elif args.n is None:
        args.n = 256
    if args.repeats is None:
        args.repeats = 3 if args.qwen else 5
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for v in variants:
        if v not in VARIANTS:
            ap.error(f"unknown variant {v!r}; choose from {VARIANTS}")
    cfg = {
        "n": args.n,
        "c": args.c,
        "v": args.v,
        "device": args.device,
        "dtype": args.dtype,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "threads": args.threads,
        "chunk": args.chunk,
        "learnable_threshold": args.learnable_threshold,
        "validate": args.validate,
        "seed": 0,
    }
    thr_kind = "per-class learnable" if args.learnable_threshold else "scalar fixed"
    if args.threads > 0:
        torch.set_num_threads(args.threads)  # the workers set the same count
    machine = describe(args.device)
    print(machine)
    print(
        f"OvR loss benchmark: N={args.n} C={args.c} V={args.v} device={args.device} "
        f"dtype={args.dtype} threshold={thr_kind} validate={args.validate} cpus={os.cpu_count()}"
    )
    absent = {v: why for v in variants if (why := available(v)) is not None}
    for v, why in absent.items():
        print(f"  {v}: {why}")
    results = {v: {"times": [], "cpu": []} for v in variants if v not in absent}
    for r in range(args.rounds):
        for v in results:
            res = _run_variant(v, cfg, measure_memory=(r == 0 and not args.no_memory))
            results[v]["times"] += res["times"]
            results[v].setdefault("round_medians", []).append(statistics.median(res["times"]))
            results[v]["cpu"] += res["cpu"]
            for k in ("peak_extra", "grad_bytes", "loss", "probe", "threads"):
                if k in res:
                    results[v][k] = res[k]
            print(f"  round {r + 1}: {v:<5} times " + " ".join(f"{t:.3f}" for t in res["times"]))

    header = (
        f"{'variant':<13}{'min s':>9}{'median s':>10}{'cpu s':>9}{'peak extra MiB':>16}"
        f"{'grads MiB':>11}{'peak-grads MiB':>16}{'loss':>14}"
    )
    print()
    print(header)
    print("-" * len(header))
    for v in variants:
        if v in absent:
            print(f"{v:<13}{absent[v]}")
            continue
        r = results[v]
        r["min"] = min(r["times"])
        r["median"] = statistics.median(r["times"])
        r["cpu_min"] = min(r["cpu"])
        pe = r.get("peak_extra")
        gb = r.get("grad_bytes")
        mem = f"{pe / MIB:16.1f}{gb / MIB:11.1f}{(pe - gb) / MIB:16.1f}" if pe is not None else ""
        loss = f"{r['loss']:14.6g}" if "loss" in r else ""
        print(f"{v:<13}{r['min']:9.3f}{r['median']:10.3f}{r['cpu_min']:9.3f}{mem}{loss}")
    print()

    def ratio(a, b, key):
        den = results[b][key]
        return results[a][key] / den if den > 0 else float("nan")  # a toy peak may read 0

    checks = []
    if "fused" in results and "plain" in results:
        t = ratio("fused", "plain", "min")
        checks.append(("time fused / plain", t, 1.3, t <= 1.3))
        if "peak_extra" in results["fused"]:
            m = ratio("fused", "plain", "peak_extra")
            checks.append(("peak extra fused / plain", m, 1 / 20, m <= 1 / 20))
            fp = results["fused"]["peak_extra"] - results["fused"]["grad_bytes"]
            pp = results["plain"]["peak_extra"] - results["plain"]["grad_bytes"]
            checks.append(("  same, net of gradient buffers", fp / pp, 1 / 20, fp / pp <= 1 / 20))
    if "fused" in results and "ce" in results:
        t = ratio("fused", "ce", "min")
        checks.append(("time fused / softmax CE", t, 2.3, t <= 2.3))
    if "plain" in results and "ce" in results:
        t = ratio("plain", "ce", "min")
        checks.append(("time plain / softmax CE", t, None, None))
    # against torch's own fused cross-entropy: eager with eager, compiled with compiled
    for a, b in (("fused", "lce"), ("compiled", "lce_compiled"), ("fused", "lce_compiled")):
        if a in results and b in results:
            t = ratio(a, b, "min")
            checks.append((f"time {a} / {b}", t, 2.2, t <= 2.2))
            if "peak_extra" in results[a] and "peak_extra" in results[b]:
                m = ratio(a, b, "peak_extra")
                checks.append((f"peak extra {a} / {b}", m, 1.1, m <= 1.1))
    # Process CPU time (all threads): insensitive to other processes on a shared machine, a
    # fair proxy of the wall-clock ratio on a quiet one (exact with --threads 1).
    cpu_pairs = (("fused", "plain"), ("fused", "ce"), ("fused", "lce"), ("fused", "lce_compiled"))
    for a, b in (*cpu_pairs, ("compiled", "lce_compiled")):
        if a in results and b in results:
            checks.append((f"cpu time {a} / {b}", ratio(a, b, "cpu_min"), None, None))
    for name, val, target, ok in checks:
        tgt = "" if target is None else f"  target <= {target:.4g}  {'met' if ok else 'MISSED'}"
        print(f"{name:<34}{val:9.4f}{tgt}")
    per_round = {}
    if args.rounds > 1:  # the ratio within each round (interleaved), median [min-max]
        for a, b in (("fused", "plain"), ("fused", "ce"), ("plain", "ce"), ("fused", "lce")):
            if a in results and b in results:
                rs = [
                    x / y
                    for x, y in zip(
                        results[a]["round_medians"], results[b]["round_medians"], strict=True
                    )
                ]
                per_round[f"{a}/{b}"] = rs
                print(
                    f"time {a} / {b} per round: median {statistics.median(rs):.3f} "
                    f"[{min(rs):.3f}-{max(rs):.3f}] over {len(rs)} rounds"
                )
    command = "python benchmarks/bench_ovr_loss.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "config": cfg,
                    "machine": machine_info(args.device),
                    "command": command,
                    "results": results,
                    "checks": checks,
                    "per_round_ratios": per_round,
                    "absent": absent,
                    "torch": torch.__version__,
                },
                f,
                indent=2,
            )
    if args.plot:
        plot(results, cfg, f"{machine}.  {command}", args.plot)
    return results


LABELS = {
    "plain": "plain\n([N, V] tensors)",
    "fused": "memory-efficient\n(ovr_bce_fused)",
    "compiled": "plain,\ntorch.compile",
    "ce": "softmax CE\n(baseline)",
    "lce": "torch fused CE\n(chunked)",
    "lce_compiled": "torch fused CE,\ntorch.compile",
}


def plot(results, cfg, command, path):
    """Left: median step time per head. Right: peak extra memory, split into gradient buffers
    and working memory (log scale)."""
    from _plotting import BASE, OURS, footnote, label_bar, pyplot, save

    plt = pyplot()
    variants = list(results)
    colours = [
        BASE if v in ("ce", *TORCH_FUSED) else OURS if v == "fused" else "#c5cae9" for v in variants
    ]
    labels = [LABELS.get(v, v) for v in variants]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4))
    medians = [results[v]["median"] for v in variants]
    bars = left.bar(labels, medians, color=colours)
    for bar, value in zip(bars, medians, strict=True):
        label_bar(left, bar.get_x() + bar.get_width() / 2, value, f"{value:.3g} s", fontsize=9)
    left.set_ylabel("median step time (s)")
    left.set_title("One training step (forward + backward)")
    left.set_ylim(0, max(medians) * 1.18)
    if all("peak_extra" in results[v] for v in variants):
        grads = [results[v]["grad_bytes"] / MIB for v in variants]
        work = [
            max(results[v]["peak_extra"] - results[v]["grad_bytes"], 0.0) / MIB for v in variants
        ]
        right.bar(
            labels,
            grads,
            color="#e0e0e0",
            edgecolor="#757575",
            hatch="//",
            label="gradient buffers (every head)",
        )
        right.bar(labels, work, bottom=grads, color=colours, label="working memory")
        for i, (g, w) in enumerate(zip(grads, work, strict=True)):
            label_bar(
                right, i, g + w, f"{g + w:,.0f} MiB" if g + w >= 10 else f"{g + w:.2f} MiB", 9
            )
        right.set_ylabel("peak extra memory (MiB)")
        right.set_title("Peak memory of the step")
        right.set_ylim(0, max(g + w for g, w in zip(grads, work, strict=True)) * 1.18)
        right.legend(fontsize=8, loc="upper right")
    else:
        right.axis("off")
        right.text(0.5, 0.5, "memory not measured (--no-memory)", ha="center", va="center")
    shape = f"N={cfg['n']}, C={cfg['c']}, V={cfg['v']}, {cfg['dtype']}, {cfg['device']}"
    fig.suptitle(f"OvR loss heads, {shape}", fontsize=11)
    footnote(fig, command)
    return save(fig, path)


if __name__ == "__main__":
    main()
