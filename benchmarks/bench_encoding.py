"""Encoding speed: N rows of a 4-column table through the tokenizer and the decimals, old vs new.

The table is ``area,rooms,age,price`` (area with one decimal, price with two, rooms and age
integers), one sentence per row through the default table template
(``area 84.3, rooms 3, age 41 -> price 1234.56.``), encoded as the command line's training does:
``NumberPrecision.from_texts`` (the decimals per field) and the ``NumericTokenizer`` over chunks of
1024 texts (``NumericDataset.from_texts``'s chunk). The tokenizer is the demo's byte-level BPE
(:func:`cauchylin_hf.app.corpus.train_corpus_tokenizer`), trained once and loaded by both sides.

"old" is the package as of ``--old`` (default ``76dca92``, before the batched encoding), taken
from git with ``git archive`` into a temporary folder; "new" is this checkout. Each side runs in
its own fresh process, the sides interleaved over ``--rounds``; the ratio is old time / new time
within a round, reported as the median with [min-max]. Stages timed on each side:

* ``numbers``: finding the numbers and their values (``find_numbers`` per text on the old side,
  ``split_numbers_batch`` per chunk of 1024 texts on the new side);
* ``decimals``: ``NumberPrecision.from_texts``;
* ``tokenizer``: ``NumericTokenizer.__call__`` (numbers, segments, the wrapped tokenizer, assembly);
* ``total``: decimals + tokenizer (what training spends);
* ``rust floor``: the wrapped tokenizer's own batch encoder on the whole texts, no numbers (the
  lower bound of any encoding).

    python benchmarks/bench_encoding.py --rows 200000 --rounds 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ["area", "rooms", "age", "price"]
CHUNK = 1024


def make_texts(rows: int, seed: int) -> list[str]:
    """The table's rows as sentences of the default template."""
    import random

    from cauchylin_hf.data import TableTemplate

    rng = random.Random(seed)
    template = TableTemplate.default(COLUMNS)
    return [
        template.text(
            {
                "area": f"{rng.uniform(20, 300):.1f}",
                "rooms": str(rng.randint(1, 8)),
                "age": str(rng.randint(0, 120)),
                "price": f"{rng.uniform(5e4, 2e6):.2f}",
            }
        )
        for _ in range(rows)
    ]


def _worker(texts_path: str, tokenizer_dir: str, out_path: str) -> None:
    """Time the stages in this process, with whichever ``cauchylin_hf`` is on the path."""
    from cauchylin_hf import numbers

    try:  # the library's home of the decimals; before, the command line's
        from cauchylin_hf.precision import NumberPrecision
    except ImportError:
        from cauchylin_hf.app.precision import NumberPrecision
    from cauchylin_hf.tokenizer import NumericTokenizer
    from transformers import AutoTokenizer

    texts = json.loads(Path(texts_path).read_text())
    hf = AutoTokenizer.from_pretrained(tokenizer_dir)
    ntok = NumericTokenizer(hf)
    times: dict[str, float] = {}

    t0 = time.perf_counter()
    batch_finder = getattr(numbers, "split_numbers_batch", None)
    if batch_finder is not None:
        n_numbers = sum(
            len(parts.spellings)
            for start in range(0, len(texts), CHUNK)
            for parts in batch_finder(texts[start : start + CHUNK])
        )
    else:
        n_numbers = sum(len(numbers.find_numbers(t)) for t in texts)
    times["numbers"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    precision = NumberPrecision.from_texts(texts)
    times["decimals"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    n_tokens = 0
    for start in range(0, len(texts), CHUNK):
        enc = ntok(texts[start : start + CHUNK], return_attention_mask=False)
        n_tokens += sum(len(ids) for ids in enc["input_ids"])
    times["tokenizer"] = time.perf_counter() - t0
    times["total"] = times["decimals"] + times["tokenizer"]

    backend = hf.backend_tokenizer
    t0 = time.perf_counter()
    for start in range(0, len(texts), CHUNK):
        backend.encode_batch(texts[start : start + CHUNK], add_special_tokens=False)
    times["rust floor"] = time.perf_counter() - t0
    Path(out_path).write_text(
        json.dumps(
            {
                "times": times,
                "numbers": n_numbers,
                "tokens": n_tokens,
                "decimals": precision.to_dict(),
            }
        )
    )


def _run_side(tree: Path, texts_path: str, tokenizer_dir: str, tmp: str) -> dict:
    out = os.path.join(tmp, f"out_{time.monotonic_ns()}.json")
    env = {
        **os.environ,
        "PYTHONPATH": f"{tree / 'adapters'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    code = (
        f"import sys; sys.path.insert(0, {str(tree / 'adapters')!r}); "
        f"sys.path.insert(1, {str(ROOT / 'benchmarks')!r}); "
        "import bench_encoding as b; b._worker(*sys.argv[1:])"
    )
    subprocess.run(
        [sys.executable, "-c", code, texts_path, tokenizer_dir, out], check=True, env=env
    )
    return json.loads(Path(out).read_text())


def _old_tree(rev: str, tmp: str) -> Path:
    dest = Path(tmp) / "old"
    dest.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "adapters"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark; print the table; return the raw numbers."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--old", default="76dca92", help="git revision of the old code")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the raw numbers here")
    parser.add_argument("--plot", help="draw old vs new rows/s per stage (PNG)")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(ROOT / "adapters"))
    sys.path.insert(1, str(ROOT / "benchmarks"))
    from _machine import describe, machine_info
    from cauchylin_hf.app.corpus import train_corpus_tokenizer

    print(describe())
    print(f"{args.rows} rows of {','.join(COLUMNS)}; old = {args.old}, new = this checkout")
    results: dict[str, list[dict]] = {"old": [], "new": []}
    with tempfile.TemporaryDirectory() as tmp:
        texts_path = os.path.join(tmp, "texts.json")
        Path(texts_path).write_text(json.dumps(make_texts(args.rows, args.seed)))
        tokenizer_dir = os.path.join(tmp, "tokenizer")
        train_corpus_tokenizer().save_pretrained(tokenizer_dir)
        old = _old_tree(args.old, tmp)
        for _ in range(args.rounds):
            results["old"].append(_run_side(old, texts_path, tokenizer_dir, tmp))
            results["new"].append(_run_side(ROOT, texts_path, tokenizer_dir, tmp))
    for key in ("numbers", "tokens", "decimals"):
        if results["old"][0][key] != results["new"][0][key]:
            raise SystemExit(f"old and new disagree on {key}: the encodings differ")
    stages = list(results["new"][0]["times"])
    table = []
    print(f"\n{'stage':<12}{'old rows/s':>14}{'new rows/s':>14}{'old s':>9}{'new s':>9}  ratio")
    for stage in stages:
        olds = [r["times"][stage] for r in results["old"]]
        news = [r["times"][stage] for r in results["new"]]
        ratios = [o / n for o, n in zip(olds, news, strict=True)]
        row = {
            "stage": stage,
            "old_s": statistics.median(olds),
            "new_s": statistics.median(news),
            "ratio": statistics.median(ratios),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
        }
        table.append(row)
        print(
            f"{stage:<12}{args.rows / row['old_s']:>14,.0f}{args.rows / row['new_s']:>14,.0f}"
            f"{row['old_s']:>9.2f}{row['new_s']:>9.2f}  {row['ratio']:.2f}x "
            f"[{row['ratio_min']:.2f}-{row['ratio_max']:.2f}]"
        )
    data = {"machine": machine_info(), "rows": args.rows, "old": args.old, "table": table}
    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=2))
    if args.plot:
        from _plotting import pyplot, save

        plt = pyplot()
        fig, ax = plt.subplots(figsize=(7, 3.5))
        xs = range(len(table))
        ax.bar([x - 0.2 for x in xs], [args.rows / r["old_s"] for r in table], 0.4, label="old")
        ax.bar([x + 0.2 for x in xs], [args.rows / r["new_s"] for r in table], 0.4, label="new")
        ax.set_xticks(list(xs), [r["stage"] for r in table])
        ax.set_ylabel("rows / s")
        ax.set_yscale("log")
        ax.legend()
        ax.set_title(f"encoding {args.rows} table rows: old ({args.old}) vs new")
        save(fig, args.plot)
    return data


if __name__ == "__main__":
    main()
