"""Quality: the causal language model against a plain softmax-CE language model, at equal budget.

For each table, both models get the same Qwen2 backbone (built from a config, nothing downloaded),
the same steps, batch, learning rate, cosine schedule and seed (``cauchylin_hf.app.compare``).
Each is scored on the *target number* (the last number) of every held-out text: MAE, median
absolute error (MdAE), Spearman with the truth, coverage of the causal model's central 50/80/90%
intervals, next-token accuracy on the text tokens that are not numbers, and training time. Beside
them: predicting the training median, and for the scikit-learn tables a linear regression on the
raw features. Then each model again with 10% of the training targets multiplied by 100.

Tables: ``demo`` (the embedded numeric corpus), ``cancer`` (scikit-learn's breast_cancer: seven
"mean" features, target "mean area"), ``diabetes`` (scikit-learn's diabetes, unscaled: ten
features, target progression); 80/20 split with seed 0.

``--ablation`` trains the causal model once per changed default (each set back to its previous
value alone) and prints the effect of each. ``--variants`` adds causal models with other settings.

Run (about 15 minutes on 2 cores with ``--workers 2``)::

    python benchmarks/bench_quality.py --json docs/assets/benchmarks/quality.json \
        --plot docs/assets/benchmarks/quality.png
    python benchmarks/bench_quality.py --ablation --datasets cancer,demo \
        --json docs/assets/benchmarks/quality_ablation.json
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

LEVELS = (0.5, 0.8, 0.9)

# The defaults chosen by this benchmark, and the values they replaced (the ablation sets each
# back alone). Keep in step with CauchyLMConfig's defaults.
ABLATION: dict[str, dict[str, Any]] = {
    "value_space=identity": {"value_space": "identity"},
    "gamma_init=10": {"gamma_init": 10.0},
    "b_noise_init=0.1": {"b_noise_init": 0.1},
    "alpha=0": {"alpha": 0.0},
    "w_num_scale=None (unit w_num)": {"w_num_scale": None},
    "classifier_lr_scale=1": {"classifier_lr_scale": 1.0},
    "threshold=0": {"threshold": 0.0},
}

VARIANTS: dict[str, dict[str, Any]] = {
    "causal": {},
    "causal (classifier_lr_scale=1)": {"classifier_lr_scale": 1.0},
}


def _fmt(x: float) -> str:
    s = repr(float(x))
    return s[:-2] if s.endswith(".0") else s


def load_table(name: str, quick: bool = False) -> tuple[list[str], list[str], Any]:
    """``(train_texts, heldout_texts, (X_train, y_train, X_test, y_test) or None)``."""
    if name == "demo":
        from cauchylin_hf.app.corpus import make_splits

        n_train, n_held = (400, 40) if quick else (4000, 200)
        s = make_splits(n_train, n_held, seed=0)
        return list(s.train), list(s.heldout), None
    from sklearn.datasets import load_breast_cancer, load_diabetes

    if name == "cancer":
        d = load_breast_cancer()
        cols = [0, 1, 2, 4, 5, 6, 7]
        names = [
            "radius",
            "texture",
            "perimeter",
            "smoothness",
            "compactness",
            "concavity",
            "concave points",
        ]
        X, y, target = d.data[:, cols], d.data[:, 3], "area"
    elif name == "diabetes":
        d = load_diabetes(scaled=False)
        # s1..s6 are serum measurements; their names keep digits out of the field names
        names = ["age", "sex", "bmi", "bp", "tc", "ldl", "hdl", "tch", "ltg", "glu"]
        X, y, target = d.data, d.target, "progression"
    else:
        raise SystemExit(f"unknown table {name!r}")
    rows = [
        ", ".join(f"{n} {_fmt(v)}" for n, v in zip(names, x, strict=True))
        + f", {target} {_fmt(t)}."
        for x, t in zip(X, y, strict=True)
    ]
    idx = list(range(len(rows)))
    random.Random(0).shuffle(idx)
    cut = int(0.8 * len(rows))
    tr, te = idx[:cut], idx[cut:]
    if quick:
        tr, te = tr[:120], te[:20]
    data = (X[tr], y[tr], X[te], y[te])
    return [rows[i] for i in tr], [rows[i] for i in te], data


def _job(job: dict[str, Any]) -> dict[str, Any]:
    """One training run in a worker process (one torch thread)."""
    import torch

    torch.set_num_threads(1)
    from cauchylin_hf.app import compare

    train, held, _ = load_table(job["table"], job["quick"])
    if job["corrupt"]:
        train = compare.corrupt_targets(train, fraction=job["corrupt"], factor=100.0, seed=1)
    recipe = compare.Recipe(**job["recipe"]).with_settings(**job["settings"])
    start = time.perf_counter()
    if job["kind"] == "text":
        model, tok, seconds = compare.train_text_baseline(train, recipe)
        pred, parsed = compare.baseline_predictions(
            model, tok, held, fallback=compare.training_median(train)
        )
        true = torch.tensor([compare.split_at_target(t)[1] for t in held], dtype=torch.float64)
        s = compare.score(
            pred,
            true,
            text_accuracy=compare.text_accuracy(model, tok, held, causal=False),
            train_seconds=seconds,
            extra={"parsed": parsed},
        )
    else:
        model, ntok, seconds = compare.train_causal(train, recipe)
        p = compare.causal_predictions(model, ntok, held, LEVELS)
        s = compare.score(
            p["median"],
            p["true"],
            text_accuracy=compare.text_accuracy(model, ntok, held, causal=True),
            train_seconds=seconds,
            lower=p["lower"],
            upper=p["upper"],
            levels=LEVELS,
        )
    out = {k: job[k] for k in ("table", "kind", "name", "corrupt")}
    out.update(
        mae=s.mae,
        mdae=s.mdae,
        spearman=s.spearman,
        coverage={str(k): v for k, v in s.coverage.items()},
        text_accuracy=s.text_accuracy,
        train_seconds=s.train_seconds,
        wall_seconds=time.perf_counter() - start,
        **s.extra,
    )
    print(
        f"  done: {out['table']:9s} {out['name']:34s} corrupt={out['corrupt']} "
        f"MdAE={out['mdae']:.4g} text acc={out['text_accuracy']:.3f}",
        flush=True,
    )
    return out


def reference_rows(table: str, quick: bool) -> list[dict[str, Any]]:
    """Training median and (tables) a linear regression on the raw features."""
    import numpy as np
    import torch
    from cauchylin_hf.app.compare import split_at_target, training_median

    from cauchylin.metrics import rank_correlation

    train, held, data = load_table(table, quick)
    true = np.array([split_at_target(t)[1] for t in held])
    rows = []
    med = training_median(train)
    err = np.abs(true - med)
    rows.append(
        {
            "table": table,
            "kind": "reference",
            "name": "training median",
            "corrupt": 0.0,
            "mae": float(err.mean()),
            "mdae": float(np.median(err)),
            "spearman": math.nan,
            "coverage": {},
            "text_accuracy": math.nan,
            "train_seconds": 0.0,
        }
    )
    if data is not None:
        from sklearn.linear_model import LinearRegression

        Xtr, ytr, Xte, yte = data
        pred = LinearRegression().fit(Xtr, ytr).predict(Xte)
        err = np.abs(pred - yte)
        rows.append(
            {
                "table": table,
                "kind": "reference",
                "name": "linear regression (features)",
                "corrupt": 0.0,
                "mae": float(err.mean()),
                "mdae": float(np.median(err)),
                "spearman": rank_correlation(torch.tensor(pred), torch.tensor(yte)),
                "coverage": {},
                "text_accuracy": math.nan,
                "train_seconds": 0.0,
            }
        )
    return rows


def print_tables(rows: list[dict[str, Any]], tables: list[str], corrupt_share: float) -> None:
    head = (
        f"{'model':36s} {'MAE':>9s} {'MdAE':>9s} {'Spearman':>8s} {'cov50':>6s} "
        f"{'cov80':>6s} {'cov90':>6s} {'text acc':>8s} {'train s':>8s}"
    )
    for table in tables:
        for corrupt in sorted({r["corrupt"] for r in rows if r["table"] == table}):
            sel = [r for r in rows if r["table"] == table and r["corrupt"] == corrupt]
            if not sel:
                continue
            tag = "clean" if not corrupt else f"{corrupt:.0%} of training targets x100"
            print(f"\n== {table} ({tag})\n{head}")
            for r in sel:
                cov = [r["coverage"].get(str(c), math.nan) for c in LEVELS]
                print(
                    f"{r['name']:36s} {r['mae']:9.4g} {r['mdae']:9.4g} {r['spearman']:8.3f} "
                    + " ".join(f"{c:6.2f}" for c in cov)
                    + f" {r['text_accuracy']:8.3f} {r['train_seconds']:8.1f}"
                )

        text = _pick(rows, table, "CE text LM", 0.0)
        if text is None:
            continue
        print(
            f"-- {table}: against the CE text LM (MdAE ratio <= 1 wins; Spearman, text acc. "
            "differences >= 0 win)"
        )
        for r in rows:
            if r["table"] != table or r["corrupt"] or r["kind"] != "causal":
                continue
            line = (
                f"   {r['name']:34s} MdAE ratio {r['mdae'] / text['mdae']:.3f}  "
                f"Spearman {r['spearman'] - text['spearman']:+.3f}  "
                f"text acc {100 * (r['text_accuracy'] - text['text_accuracy']):+.1f} points"
            )
            bad = _pick(rows, table, r["name"], corrupt_share)
            if bad is not None and corrupt_share:
                line += f"  corrupted/clean MdAE {bad['mdae'] / r['mdae']:.3f}"
            print(line)
        bad_text = _pick(rows, table, "CE text LM", corrupt_share)
        if bad_text is not None and corrupt_share:
            print(
                f"   {'CE text LM':34s} corrupted/clean MdAE {bad_text['mdae'] / text['mdae']:.3f}"
                f" (MAE {text['mae']:.4g} -> {bad_text['mae']:.4g})"
            )


def _pick(
    rows: list[dict[str, Any]], table: str, name: str, corrupt: float
) -> dict[str, Any] | None:
    for r in rows:
        if r["table"] == table and r["name"] == name and r["corrupt"] == corrupt:
            return r
    return None


def plot(rows: list[dict[str, Any]], tables: list[str], path: str, machine: str) -> None:
    import _plotting

    plt = _plotting.pyplot()
    names = [n for n in dict.fromkeys(r["name"] for r in rows if r["kind"] != "reference")]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / max(len(names), 1)
    for i, name in enumerate(names):
        ys, ys_bad = [], []
        for table in tables:
            ref = [
                r
                for r in rows
                if r["table"] == table and r["name"] == "CE text LM" and not r["corrupt"]
            ]
            mine = [
                r for r in rows if r["table"] == table and r["name"] == name and not r["corrupt"]
            ]
            bad = [r for r in rows if r["table"] == table and r["name"] == name and r["corrupt"]]
            ys.append(mine[0]["mdae"] / ref[0]["mdae"] if mine and ref else math.nan)
            ys_bad.append(bad[0]["mdae"] / ref[0]["mdae"] if bad and ref else math.nan)
        xs = [j + i * width for j in range(len(tables))]
        axes[0].bar(xs, ys, width, label=name)
        axes[1].bar(xs, ys_bad, width, label=name)
    for ax, title in zip(
        axes, ("clean training data", "10% of training targets x100"), strict=True
    ):
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set_yscale("log")
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(tables))], tables)
        ax.set_ylabel("held-out target MdAE / CE text LM's clean MdAE")
        ax.set_title(title)
    axes[0].legend(fontsize=7)
    _plotting.footnote(fig, machine)
    _plotting.save(fig, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="demo,cancer,diabetes")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--corrupt", type=float, default=0.1, help="share of targets x100 (0: skip)")
    p.add_argument("--variants", default=",".join(VARIANTS), help="causal variants to train")
    p.add_argument("--ablation", action="store_true", help="one run per reverted default")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="toy sizes (smoke test)")
    p.add_argument("--json", default=None)
    p.add_argument("--plot", default=None)
    args = p.parse_args(argv)
    import _machine

    tables = [t for t in args.datasets.split(",") if t]
    for t in tables:
        if t not in ("demo", "cancer", "diabetes"):
            p.error(f"unknown table {t!r}")
    variants = [v for v in args.variants.split(",") if v]
    for v in variants:
        if v not in VARIANTS:
            p.error(f"unknown variant {v!r}; known: {', '.join(VARIANTS)}")
    if args.workers < 1 or args.steps < 1:
        p.error("--workers and --steps must be positive")
    recipe = {"max_steps": args.steps, "seed": args.seed}
    if args.quick:
        recipe.update(hidden_size=16, num_layers=1, num_heads=2, vocab_size=300, batch_size=8)
    jobs = []
    for table in tables:
        common = {"table": table, "quick": args.quick, "recipe": recipe}
        if args.ablation:
            jobs.append(
                {**common, "kind": "causal", "name": "defaults", "settings": {}, "corrupt": 0.0}
            )
            for name, settings in ABLATION.items():
                jobs.append(
                    {**common, "kind": "causal", "name": name, "settings": settings, "corrupt": 0.0}
                )
            continue
        for corrupt in [0.0] + ([args.corrupt] if args.corrupt else []):
            jobs.append(
                {**common, "kind": "text", "name": "CE text LM", "settings": {}, "corrupt": corrupt}
            )
            for v in variants:
                if corrupt and v != "causal":
                    continue
                jobs.append(
                    {
                        **common,
                        "kind": "causal",
                        "name": v,
                        "settings": VARIANTS[v],
                        "corrupt": corrupt,
                    }
                )
    machine = _machine.describe()
    print(
        f"# bench_quality: {len(jobs)} training runs, {args.workers} worker(s), "
        f"{args.steps} steps each\n# {machine}",
        flush=True,
    )
    start = time.perf_counter()
    if args.workers == 1:
        rows = [_job(j) for j in jobs]
    else:
        with mp.get_context("spawn").Pool(args.workers) as pool:
            rows = pool.map(_job, jobs, chunksize=1)
    if not args.ablation:
        for table in tables:
            rows.extend(reference_rows(table, args.quick))
        print_tables(rows, tables, args.corrupt)
    else:
        print("\n== ablation: each default set back alone (held-out target)")
        print(
            f"{'table':9s} {'change':32s} {'MdAE':>9s} {'Spearman':>8s} {'cov50':>6s} "
            f"{'cov90':>6s} {'text acc':>8s}"
        )
        for r in rows:
            print(
                f"{r['table']:9s} {r['name']:32s} {r['mdae']:9.4g} {r['spearman']:8.3f} "
                f"{r['coverage'].get('0.5', math.nan):6.2f} "
                f"{r['coverage'].get('0.9', math.nan):6.2f} {r['text_accuracy']:8.3f}"
            )
    print(f"\n# total wall time {time.perf_counter() - start:.0f} s")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(
                {
                    "machine": _machine.machine_info(),
                    "args": vars(args),
                    "levels": LEVELS,
                    "rows": rows,
                },
                f,
                indent=1,
                default=float,
            )
        os.replace(tmp, args.json)
    if args.plot and not args.ablation:
        plot(rows, tables, args.plot, machine)
    return 0


if __name__ == "__main__":
    sys.exit(main())
