"""Tokens per second of ``cauchylin_hf.generation.generate`` in every mode vs the base's ``generate``.

Both sides use the same weights (the causal model is built with ``from_base`` on the base, so its
backbone is the base's decoder and ``W_cls`` its head), the KV cache, one batch of prompts and a
fixed number of new tokens (no EOS). The base runs HF ``generate`` greedily
(``do_sample=False``); our loop runs each mode of SPEC §3. Printed side by side with the ratio
ours / base (targets: standard >= 0.75x, compatible >= 0.95x).

Models (random weights from a config, no download):

* ``small``: a Qwen2 config with H=256, 4 layers, 8192 tokens;
* ``qwen2.5-0.5b`` (``--qwen``): the Qwen2.5-0.5B shape (H=896, 24 layers, 14 heads / 2 KV heads,
  MLP 4864, 151936 rows, tied embeddings).

Usage::

    python benchmarks/bench_generate.py              # small model
    python benchmarks/bench_generate.py --qwen       # small and Qwen2.5-0.5B-shaped
    python benchmarks/bench_generate.py --batch 4 --new-tokens 32 --repeats 3
    python benchmarks/bench_generate.py --qwen --plot generate.png --json generate.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for _plotting

from cauchylin_hf.generation import generate
from cauchylin_hf.model import CauchyLMForCausalLM
from transformers import AutoModelForCausalLM, Qwen2Config

from cauchylin.nn import MODES

SHAPES = {
    "tiny": dict(  # for the smoke test of this script, not for numbers
        vocab_size=512,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
    ),
    "small": dict(
        vocab_size=8192,
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        intermediate_size=1024,
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


def build(shape: str):
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


def timed(fn, repeats: int) -> float:
    fn()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bench(
    shape: str, batch: int, prompt_len: int, new_tokens: int, repeats: int
) -> dict[str, float]:
    """Tokens per second of the base and of every mode; returns ``{"base": tok/s, mode: ratio}``."""
    base, model = build(shape)
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

    t_base = timed(run_base, repeats)
    base_tps = n_tokens / t_base
    print(
        f"\n[{shape}] batch {batch}, prompt {prompt_len}, {new_tokens} new tokens, "
        f"{torch.get_num_threads()} threads, best of {repeats}"
    )
    print(f"{'generator':<28}{'tokens/s':>12}{'ratio':>9}")
    print(f"{'base HF generate (greedy)':<28}{base_tps:>12.1f}{1.0:>9.2f}")
    result = {"base": base_tps}
    for mode in MODES:
        kw = MODE_KW.get(mode, dict(temperature=1.0))

        def run_ours(mode=mode, kw=kw):
            out = generate(
                model,
                ids,
                attention_mask=mask,
                mode=mode,
                max_new_tokens=new_tokens,
                eos_token_id=[],
                seed=0,
                **kw,
            )
            assert out.new_tokens.shape[1] == new_tokens

        t = timed(run_ours, repeats)
        tps = n_tokens / t
        label = f"ours {mode}" + (" (T=0)" if mode == "compatible" else "")
        print(f"{label:<28}{tps:>12.1f}{tps / base_tps:>9.2f}")
        result[mode] = tps / base_tps
    return result


TARGETS = {"standard": 0.75, "compatible": 0.95}


def plot(results: dict[str, dict[str, float]], command: str, path: str) -> str:
    """Grouped bars: the ratio ours / base per mode, one bar per model, targets marked."""
    from _plotting import TARGET, footnote, pyplot, ratio_bars, save

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(11, 4.4))
    series = {
        f"{shape} (base {r['base']:.1f} tok/s)": [r[m] for m in MODES]
        for shape, r in results.items()
    }
    ratio_bars(ax, list(MODES), series, ylabel="tokens/s, ours / base HF generate")
    for n, (mode, target) in enumerate(TARGETS.items()):
        i = list(MODES).index(mode)
        label = "targets: " + ", ".join(f"{m} >= {t}" for m, t in TARGETS.items())
        ax.hlines(
            target, i - 0.45, i + 0.45, color=TARGET, lw=2, ls="--", label=label if n == 0 else None
        )
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(
        f"Generation speed per mode, relative to the base model ({torch.get_num_threads()} CPU threads)"
        if not torch.cuda.is_available()
        else "Generation speed per mode, relative to the base model"
    )
    footnote(fig, command)
    return save(fig, path)


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--qwen", action="store_true", help="also the Qwen2.5-0.5B-shaped model")
    p.add_argument(
        "--shapes",
        default=None,
        help=f"comma list of model shapes from {sorted(SHAPES)} (overrides --qwen)",
    )
    p.add_argument("--json", default=None, help="also write the results to this file")
    p.add_argument("--plot", default=None, help="also draw the results to this PNG file")
    p.add_argument(
        "--from-json",
        default=None,
        metavar="PATH",
        help="measure nothing: redraw --plot from the results a previous --json run wrote",
    )
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    if args.from_json:
        if not args.plot:
            p.error("--from-json needs --plot")
        with open(args.from_json) as f:
            saved = json.load(f)
        plot(saved["results"], saved.get("command", "bench_generate.py"), args.plot)
        return saved["results"]
    if args.shapes:
        shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
        unknown = [s for s in shapes if s not in SHAPES]
        if unknown or not shapes:
            p.error(f"--shapes: unknown {unknown}; choose from {sorted(SHAPES)}")
    else:
        shapes = ["small", "qwen2.5-0.5b"] if args.qwen else ["small"]
    results = {
        shape: bench(shape, args.batch, args.prompt_len, args.new_tokens, args.repeats)
        for shape in shapes
    }
    command = "python benchmarks/bench_generate.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"threads": torch.get_num_threads(), "command": command, "results": results},
                f,
                indent=2,
            )
    if args.plot:
        plot(results, command, args.plot)
    return results


if __name__ == "__main__":
    main()
