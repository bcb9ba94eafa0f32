"""Tokens per second of ``cauchylin_hf.generation.generate`` per mode against the base's ``generate``.

Both sides use the same weights (the causal model is built with ``from_base`` on the base, so its
backbone is the base's decoder and ``W_cls`` its head), the KV cache, one batch of prompts and a
fixed number of new tokens (no EOS). The base runs Hugging Face ``generate`` greedily
(``do_sample=False``); our loop runs each requested mode. One process, interleaved rounds: every
round times the base and then each mode (the order alternates between rounds), and the ratio
ours / base is taken within the round; the table shows the median of the rounds' ratios with
[min-max]. Targets: standard >= 0.75, compatible >= 0.95.

Per step our loop runs the backbone, Abduction at the last position, the mode's decision input
``U'`` and its heads: ``loc_S = W_cls loc_U' + b_cls`` and (every mode but compatible)
``scale_S = |W_cls| scale_U'``, computed in one pass over ``W_cls`` by the fused heads of
``cauchylin._fused_heads`` (``--no-fused``: two matrix products with a cached ``|W_cls|``).

Models (random weights from a Qwen2 config, tied embeddings, no download):

* ``v32k``: H=256, 4 layers, 8/2 heads, MLP 1024, 32000 tokens;
* ``v152k``: H=512, 8 layers, 8/2 heads, MLP 2048, 151936 tokens (Qwen2.5's vocabulary);
* ``qwen2.5-0.5b``: H=896, 24 layers, 14/2 heads, MLP 4864, 151936 tokens;
* ``tiny``: for the smoke test of this script, not for numbers.

Usage::

    python benchmarks/bench_generate.py                            # v32k and v152k, batch 1 and 8
    python benchmarks/bench_generate.py --shapes v32k,v152k,qwen2.5-0.5b --batch 1,8
    python benchmarks/bench_generate.py --modes all --rounds 3     # every mode
    python benchmarks/bench_generate.py --json generate.json --plot generate.png
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for _plotting, _machine

from _machine import describe, machine_info

from cauchylin.nn import MODES
from cauchylin.nn.modes import Decoding

SHAPES = {
    "tiny": dict(
        vocab_size=512,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
    ),
    "v32k": dict(
        vocab_size=32000,
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        intermediate_size=1024,
    ),
    "v152k": dict(
        vocab_size=151936,
        hidden_size=512,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=2,
        intermediate_size=2048,
    ),
    "qwen2.5-0.5b": dict(
        vocab_size=151936,
        hidden_size=896,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        intermediate_size=4864,
    ),
}

MODE_KW = {
    "causal": dict(temperature=0.0),
    "compatible": dict(temperature=0.0),  # greedy, like the base
}
TARGETS = {"standard": 0.75, "compatible": 0.95}


def build(shape: str):
    from cauchylin_hf.model import CauchyLMForCausalLM
    from transformers import AutoModelForCausalLM, Qwen2Config

    cfg = Qwen2Config(
        **SHAPES[shape],
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_config(cfg).eval()
    # <NUM>: a spare id inside the vocabulary (no resize, so the weights stay shared)
    model = CauchyLMForCausalLM.from_base(base, num_token_id=cfg.vocab_size - 1).eval()
    return base, model


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def bench(
    shape: str,
    batch: int,
    prompt_len: int,
    new_tokens: int,
    rounds: int,
    modes: list[str],
    built=None,
    clock=time.perf_counter,
) -> dict[str, dict[str, float]]:
    """Interleaved rounds of the base and every mode at one shape and batch size.

    Returns:
        ``{"base": {tok/s summary}, mode: {ratio summary, "tok_s": median tok/s}}``.
    """
    base, model = built or build(shape)
    vocab = SHAPES[shape]["vocab_size"]
    ids = torch.randint(
        3, vocab - 1, (batch, prompt_len), generator=torch.Generator().manual_seed(0)
    )
    mask = torch.ones_like(ids)
    n_tokens = batch * new_tokens

    def run_base():
        with torch.no_grad():
            out = base.generate(
                ids,
                attention_mask=mask,
                do_sample=False,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                use_cache=True,
                pad_token_id=0,
            )
        assert out.shape[1] == prompt_len + new_tokens

    from cauchylin_hf.generation import generate

    def run_mode(mode: str):
        out = generate(
            model,
            ids,
            attention_mask=mask,
            mode=mode,
            max_new_tokens=new_tokens,
            eos_token_id=[],
            seed=0,
            **MODE_KW.get(mode, dict(temperature=1.0)),
        )
        assert out.new_tokens.shape[1] == new_tokens

    runners = {"base": run_base, **{m: (lambda m=m: run_mode(m)) for m in modes}}
    for fn in runners.values():  # warm-up: lazy init, the fused heads' compilation
        fn()
    times: dict[str, list[float]] = {name: [] for name in runners}
    order = list(runners)
    for r in range(rounds):
        for name in order if r % 2 == 0 else order[::-1]:
            start = clock()
            runners[name]()
            times[name].append(clock() - start)
    base_tps = [n_tokens / t for t in times["base"]]
    result: dict[str, dict[str, float]] = {"base": _summary(base_tps)}
    print(
        f"\n[{shape}] batch {batch}, prompt {prompt_len}, {new_tokens} new tokens, "
        f"{rounds} interleaved rounds; ratio = ours / base within a round"
    )
    print(f"{'generator':<28}{'tokens/s (median)':>18}  {'ratio median [min-max]':>24}")
    print(f"{'base HF generate (greedy)':<28}{statistics.median(base_tps):>18.1f}")
    for mode in modes:
        ratios = [tb / tm for tm, tb in zip(times[mode], times["base"], strict=True)]
        summary = _summary(ratios)
        summary["tok_s"] = statistics.median(n_tokens / t for t in times[mode])
        result[mode] = summary
        label = f"ours {mode}" + (" (T=0)" if mode == "compatible" else "")
        target = TARGETS.get(mode)
        flag = "" if target is None else ("  ok" if summary["median"] >= target else "  below")
        print(
            f"{label:<28}{summary['tok_s']:>18.1f}  {summary['median']:>8.2f} "
            f"[{summary['min']:.2f}-{summary['max']:.2f}]{flag}"
        )
    return result


def bench_heads(
    shape: str, batch: int, rounds: int, built, clock=time.perf_counter
) -> dict[str, dict[str, float]]:
    """The decision step alone, per call: the base's ``lm_head`` + argmax against
    ``Action.step`` (standard with the fused heads and with two matrix products, compatible with
    the fused heads), interleaved rounds. Returns ``{variant: ratio summary and ms}``."""
    from cauchylin import CauchyVector

    base, model = built
    action = model.action
    head = base.get_output_embeddings()
    gen = torch.Generator().manual_seed(2)
    hidden = torch.randn(batch, head.weight.shape[1], generator=gen)
    c = action.causal_size
    U = CauchyVector(
        torch.randn(batch, c, generator=gen), torch.rand(batch, c, generator=gen) + 0.1
    )

    def with_fused(setting: str, mode: str):
        def run():
            os.environ["CAUCHYLIN_FUSED_HEADS"] = setting
            action.step(U, Decoding.make(mode, 0.0))

        return run

    variants = {
        "base lm_head + argmax": lambda: head(hidden).argmax(-1),
        "standard, fused heads": with_fused("1", "standard"),
        "standard, two GEMMs": with_fused("0", "standard"),
        "compatible, fused head": with_fused("1", "compatible"),
    }
    previous = os.environ.get("CAUCHYLIN_FUSED_HEADS")
    try:
        with torch.no_grad():
            for fn in variants.values():  # warm-up: compiles the fused loops
                fn()
            times: dict[str, list[float]] = {k: [] for k in variants}
            order = list(variants)
            for r in range(max(rounds, 3)):
                for name in order if r % 2 == 0 else order[::-1]:
                    start = clock()
                    for _ in range(5):
                        variants[name]()
                    times[name].append((clock() - start) / 5)
    finally:
        if previous is None:
            os.environ.pop("CAUCHYLIN_FUSED_HEADS", None)
        else:
            os.environ["CAUCHYLIN_FUSED_HEADS"] = previous
    base_t = times["base lm_head + argmax"]
    out = {}
    print(f"[{shape}] decision step alone, batch {batch}: ms per call, ratio base / variant")
    for name, ts in times.items():
        ratios = [b / t for b, t in zip(base_t, ts, strict=True)]
        out[name] = {**_summary(ratios), "ms": statistics.median(ts) * 1e3}
        print(
            f"  {name:<26}{out[name]['ms']:9.2f} ms  {out[name]['median']:5.2f} "
            f"[{out[name]['min']:.2f}-{out[name]['max']:.2f}]"
        )
    return out


def bench_train(
    shape: str, batch: int, seq_len: int, rounds: int, built, clock=time.perf_counter
) -> dict[str, float]:
    """One training step (forward + backward, backbone unfrozen, no optimizer) of the base's
    softmax cross-entropy against the causal model's loss (``model(ids, labels=ids)``), same
    tokens; interleaved rounds. Returns the per-round ratio base time / our time (throughput)."""
    base, model = built
    vocab = SHAPES[shape]["vocab_size"]
    ids = torch.randint(3, vocab - 1, (batch, seq_len), generator=torch.Generator().manual_seed(1))

    def step(net) -> None:
        net.zero_grad(set_to_none=True)
        net(ids, labels=ids).loss.backward()

    frozen = [q for q in (*base.parameters(), *model.parameters()) if not q.requires_grad]
    for q in frozen:  # backbone unfrozen (from_base freezes it); shared with the base
        q.requires_grad_(True)
    base.train()
    model.train()
    try:
        for net in (base, model):  # warm-up
            step(net)
        t_base, t_ours = [], []
        for r in range(rounds):
            for net, times in ((base, t_base), (model, t_ours))[:: 1 if r % 2 == 0 else -1]:
                start = clock()
                step(net)
                times.append(clock() - start)
    finally:
        base.zero_grad(set_to_none=True)
        model.zero_grad(set_to_none=True)
        base.eval()
        model.eval()
        for q in frozen:
            q.requires_grad_(False)
    ratios = [b / o for b, o in zip(t_base, t_ours, strict=True)]
    out = _summary(ratios)
    out["base_s"] = statistics.median(t_base)
    out["ours_s"] = statistics.median(t_ours)
    print(
        f"[{shape}] training step, batch {batch} x {seq_len} tokens: base {out['base_s']:.3f} s, "
        f"ours {out['ours_s']:.3f} s; throughput ours / base {out['median']:.2f} "
        f"[{out['min']:.2f}-{out['max']:.2f}]"
    )
    return out


def plot(results: dict[str, dict[str, dict[str, float]]], footnote_text: str, path: str) -> str:
    """Ratio ours / base per mode, one bar per (shape, batch), median with [min-max] whiskers."""
    from _plotting import TARGET, footnote, pyplot, ratio_bars, save

    plt = pyplot()
    runs = list(results)
    modes = [m for m in next(iter(results.values())) if m != "base"]
    fig, ax = plt.subplots(figsize=(12, 4.6))
    series = {
        f"{run} (base {results[run]['base']['median']:.1f} tok/s)": [
            results[run][m]["median"] for m in modes
        ]
        for run in runs
    }
    ratio_bars(ax, modes, series, ylabel="tokens/s, ours / base HF generate")
    width = 0.8 / max(len(runs), 1)
    for i, run in enumerate(runs):
        xs = [g + (i - (len(runs) - 1) / 2) * width for g in range(len(modes))]
        lo = [results[run][m]["median"] - results[run][m]["min"] for m in modes]
        hi = [results[run][m]["max"] - results[run][m]["median"] for m in modes]
        meds = [results[run][m]["median"] for m in modes]
        ax.errorbar(xs, meds, yerr=[lo, hi], fmt="none", ecolor="black", lw=0.8, capsize=2)
    first = True
    for mode, target in TARGETS.items():
        if mode in modes:
            i = modes.index(mode)
            ax.hlines(
                target,
                i - 0.45,
                i + 0.45,
                color=TARGET,
                lw=2,
                ls="--",
                label="targets: " + ", ".join(f"{m} >= {t}" for m, t in TARGETS.items())
                if first
                else None,
            )
            first = False
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title("Generation speed per mode relative to the base model (median of rounds)")
    footnote(fig, footnote_text)
    return save(fig, path)


def main(argv: list[str] | None = None) -> dict[str, dict[str, dict[str, float]]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--shapes",
        default="v32k,v152k",
        help=f"comma list of model shapes from {sorted(SHAPES)}",
    )
    p.add_argument("--batch", default="1,8", help="comma list of batch sizes")
    p.add_argument(
        "--modes",
        default="standard,compatible",
        help=f"comma list of modes from {list(MODES)}, or 'all'",
    )
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument(
        "--timer",
        default="wall",
        choices=["wall", "process"],
        help="wall clock, or process CPU time (robust on a shared machine; use with --threads 1)",
    )
    p.add_argument(
        "--no-fused", action="store_true", help="two matrix products instead of the fused heads"
    )
    p.add_argument(
        "--heads",
        action="store_true",
        help="also time the decision step alone (lm_head + argmax vs Action.step) per batch",
    )
    p.add_argument(
        "--skip-generation", action="store_true", help="no generation runs (with --heads/--train)"
    )
    p.add_argument(
        "--train",
        default=None,
        metavar="BxL",
        help="also time one training step (forward + backward) of B sequences of L tokens",
    )
    p.add_argument("--json", default=None, help="also write the results to this file")
    p.add_argument("--plot", default=None, help="also draw the results to this PNG file")
    p.add_argument(
        "--from-json",
        default=None,
        metavar="PATH",
        help="measure nothing: redraw --plot from the results a previous --json run wrote",
    )
    args = p.parse_args(argv)
    if args.from_json:
        if not args.plot:
            p.error("--from-json needs --plot")
        with open(args.from_json) as f:
            saved = json.load(f)
        plot(saved["results"], saved.get("footnote", saved.get("command", "")), args.plot)
        return saved["results"]
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown or not shapes:
        p.error(f"--shapes: unknown {unknown}; choose from {sorted(SHAPES)}")
    modes = (
        list(MODES)
        if args.modes.strip() == "all"
        else [m.strip() for m in args.modes.split(",") if m.strip()]
    )
    bad_modes = [m for m in modes if m not in MODES]
    if bad_modes or not modes:
        p.error(f"--modes: unknown {bad_modes}; choose from {list(MODES)} or 'all'")
    try:
        batches = [int(b) for b in args.batch.split(",") if b.strip()]
    except ValueError:
        p.error(f"--batch: expected comma-separated integers, got {args.batch!r}")
    if not batches or min(batches) < 1:
        p.error(f"--batch: expected positive integers, got {args.batch!r}")
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.no_fused:
        os.environ["CAUCHYLIN_FUSED_HEADS"] = "0"  # read by cauchylin at every step
    machine = describe()
    print(machine)
    print(f"heads: {'two matrix products' if args.no_fused else 'fused (one pass over W_cls)'}")
    print(f"timer: {'process CPU time' if args.timer == 'process' else 'wall clock'}")
    clock = time.process_time if args.timer == "process" else time.perf_counter
    train = None
    if args.train:
        try:
            train = tuple(int(x) for x in args.train.lower().split("x"))
            assert len(train) == 2 and min(train) >= 2
        except (ValueError, AssertionError):
            p.error(f"--train: expected BxL with L >= 2, like 4x128, got {args.train!r}")
    if args.skip_generation and not (args.heads or args.train):
        p.error("--skip-generation needs --heads or --train")
    if args.skip_generation and args.plot:
        p.error("--plot draws the generation runs: not with --skip-generation")
    results = {}
    training = {}
    heads = {}
    for shape in shapes:
        built = build(shape)
        for batch in batches:
            if not args.skip_generation:
                results[f"{shape} b{batch}"] = bench(
                    shape, batch, args.prompt_len, args.new_tokens, args.rounds, modes, built, clock
                )
            if args.heads:
                heads[f"{shape} b{batch}"] = bench_heads(shape, batch, args.rounds, built, clock)
        if train is not None:
            training[shape] = bench_train(shape, *train, args.rounds, built, clock)
        del built
    command = "python benchmarks/bench_generate.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    footnote_text = f"{machine}.  {command}"
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "machine": machine_info(),
                    "command": command,
                    "footnote": footnote_text,
                    "fused_heads": not args.no_fused,
                    "timer": args.timer,
                    "results": results,
                    "training": training,
                    "heads": heads,
                },
                f,
                indent=2,
            )
    if args.plot:
        plot(results, footnote_text, args.plot)
    return results


if __name__ == "__main__":
    main()
