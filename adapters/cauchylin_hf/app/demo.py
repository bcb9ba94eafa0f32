r"""The embedded demo: a small Qwen2-architecture causal language model learns a numeric corpus.

No download and no network: everything is built locally.

1. **Data.** :func:`cauchylin_hf.app.corpus.make_splits` generates sentences with prices,
   quantities, measurements and simple relations between numbers, and a disjoint held-out split;
   :func:`~cauchylin_hf.app.corpus.train_corpus_tokenizer` trains a byte-level BPE tokenizer on it
   (``<NUM>`` is a special token), wrapped in a
   :class:`~cauchylin_hf.tokenizer.NumericTokenizer`.
2. **Model.** A ``Qwen2ForCausalLM`` built from a config (:data:`FULL` / :data:`QUICK`, random
   weights: nothing is pretrained) gets the causal heads with
   :meth:`~cauchylin_hf.model.CauchyLMForCausalLM.from_base`; since the backbone knows nothing,
   the whole model trains (``freeze_backbone=False``, no LoRA).
3. **Training** with :func:`cauchylin_hf.training.train` (the HF ``Trainer``, a tqdm progress
   bar), loss ``L_cls + L_reg`` in standard mode at ``T = 1``.
4. **Evaluation** on the held-out sentences: token accuracy, ``<NUM>`` precision/recall/F1,
   regression errors and distribution statistics (:func:`~cauchylin_hf.evaluation.evaluate_model`) in a table next to two baselines, the same
   model before training and "predict the training mean" for every number.
5. **Prediction and generation.** First what to trust: each prompt's next number as the model
   predicts it (:func:`~cauchylin_hf.predict.predict_values`: the median with its 50% and 90%
   intervals). Then :func:`cauchylin_hf.generation.generate` from the same prompts in every
   mode, each line one raw draw (the individual modes draw from a Cauchy, whose tail gives a
   far-off number now and then), with the median of many individual draws beside them; and one
   counterfactual: the same typical individual (one ``eps_seed``) on two prompts that differ in
   one number.
6. **Plots** in ``output_dir``: ``loss_curves.png``, ``predicted_vs_true.png``,
   ``ovr_prob_sums.png``; plus ``metrics.json`` and ``samples.txt``.

Run it with ``cauchylin-lm demo`` (``--quick`` for a shortened run) or :func:`run_demo`.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TextIO

import torch

from cauchylin.levels import PRINTED_LEVELS, REPORTED_LEVELS
from cauchylin.nn import modes
from cauchylin.value_space import from_value_space

from ..precision import NumberPrecision
from .compare import Recipe
from .reports import write_value

__all__ = [
    "FULL",
    "QUICK",
    "DemoSettings",
    "compare_with_text_model",
    "comparison_table",
    "run_demo",
    "with_overrides",
]


@dataclass(frozen=True)
class DemoSettings:
    """Sizes of the demo run.

    Attributes:
        n_train: training sentences.
        n_heldout: held-out sentences.
        vocab_size: largest tokenizer vocabulary.
        hidden_size: ``H`` of the Qwen2 backbone.
        num_layers: decoder layers.
        num_heads: attention heads (key/value heads: half of them).
        max_steps: optimizer steps.
        batch_size: sentences per step.
        learning_rate: peak learning rate (cosine decay after a short warm-up).
        max_new_tokens: tokens generated per prompt.
        seed: seed of the corpus, the weights, the data order and the draws.

    Example:
        >>> QUICK.max_steps, FULL.max_steps, DemoSettings().hidden_size
        (300, 1000, 64)
        >>> small = with_overrides(QUICK, max_steps=10, seed=None)  # None keeps a field
        >>> small.max_steps, small.seed, small.n_train
        (10, 0, 1500)
        >>> FULL.recipe().max_steps, FULL.recipe().hidden_size  # the budget both models get
        (1000, 64)
    """

    n_train: int = 4000
    n_heldout: int = 200
    vocab_size: int = 512
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    max_steps: int = 1000
    batch_size: int = 32
    learning_rate: float = 3e-3
    max_new_tokens: int = 24
    seed: int = 0

    def recipe(self) -> Recipe:
        """The backbone and training budget, shared by the causal model and the text baseline.

        Returns:
            A :class:`~cauchylin_hf.app.compare.Recipe`.

        Example:
            >>> QUICK.recipe().max_steps == QUICK.max_steps
            True
        """
        return Recipe(
            hidden_size=self.hidden_size,
            num_layers=self.num_layers,
            num_heads=self.num_heads,
            vocab_size=self.vocab_size,
            max_steps=self.max_steps,
            batch_size=self.batch_size,
            learning_rate=self.learning_rate,
            seed=self.seed,
        )


FULL = DemoSettings()
"""The default demo: the quality benchmark's recipe (about 3 minutes on 2 CPU cores)."""

QUICK = DemoSettings(
    n_train=1500,
    n_heldout=100,
    vocab_size=400,
    max_steps=300,
    max_new_tokens=12,
)
"""The shortened demo (``--quick``; about a minute)."""

DRAWS = 25
"""Individual draws per prompt whose median the demo shows beside the raw draws."""

PROMPTS = (
    "3 boxes of 12 eggs hold",
    "The average of 18 and 74 is",
    "Ann had 47 pears and bought 5 more, so Ann now has",
    "The price rose from",
)
"""Prompts of the generation part."""

MODE_SETTINGS: tuple[tuple[str, dict[str, Any]], ...] = (
    (modes.CAUSAL, {"temperature": 0.0}),
    (modes.STANDARD, {"temperature": 1.0}),
    (modes.SAMPLING, {"temperature": 1.0}),
    (modes.COMPATIBLE, {"temperature": 0.7, "top_k": 20}),
    (modes.INDIVIDUAL, {"temperature": 1.0}),
    (modes.SHARED_INDIVIDUAL, {"temperature": 1.0}),
    (modes.SHARED_NOISE, {"temperature": 1.0}),
)
"""The modes shown and their sampling settings."""

TABLE_ROWS = (
    ("token accuracy", "eval/accuracy"),
    ("<NUM> precision", "eval/num_precision"),
    ("<NUM> recall", "eval/num_recall"),
    ("<NUM> F1", "eval/num_f1"),
    ("regression MAE", "eval/reg_mae"),
    ("regression median abs. error", "eval/reg_mdae"),
    ("held-out loss", "eval/loss"),
    ("median loc_U", "dist/U_loc_median"),
    ("median scale_U", "dist/U_scale_median"),
    ("median OvR prob. sum (standard)", "dist/ovr_prob_sum_median_standard"),
    ("median OvR prob. sum (causal sampling)", "dist/ovr_prob_sum_median_causal"),
)
"""(label, metric key) rows of the printed table."""


def build_model(settings: DemoSettings, train_texts: list[str]) -> tuple[Any, Any]:
    """The demo's tokenizer and untrained model.

    Args:
        settings: sizes.
        train_texts: texts the tokenizer is trained on.

    Returns:
        ``(model, numeric_tokenizer)``: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM` on a
        randomly initialised ``Qwen2ForCausalLM`` (whole model trainable) and its
        :class:`~cauchylin_hf.tokenizer.NumericTokenizer`.
    """
    from ..model import CauchyLMForCausalLM
    from ..tokenizer import NumericTokenizer
    from .corpus import train_corpus_tokenizer

    recipe = settings.recipe()
    tok = train_corpus_tokenizer(train_texts, vocab_size=recipe.vocab_size)
    ntok = NumericTokenizer(tok)
    base = recipe.backbone(tok)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        model = CauchyLMForCausalLM.from_base(base, ntok, freeze_backbone=False)
    return model, ntok


def mean_baseline(train_texts: list[str], heldout_texts: list[str]) -> dict[str, float]:
    """Regression errors of predicting the training mean for every held-out number.

    Args:
        train_texts: training sentences (the mean is over all their numbers).
        heldout_texts: held-out sentences.

    Returns:
        ``{"eval/reg_mae", "eval/reg_mdae", "train_mean"}``.
    """
    from ..numbers import find_numbers

    train_values = [n.value for t in train_texts for n in find_numbers(t)]
    mean = sum(train_values) / len(train_values)
    errors = [abs(n.value - mean) for t in heldout_texts for n in find_numbers(t)]
    return {
        "eval/reg_mae": sum(errors) / len(errors),
        "eval/reg_mdae": statistics.median(errors),
        "train_mean": mean,
    }


@torch.no_grad()
def heldout_predictions(
    model: Any, ntok: Any, texts: list[str], *, seed: int = 0, batch_size: int = 32
) -> dict[str, torch.Tensor]:
    """Per-position predictions on held-out texts for the plots.

    Args:
        model: the causal model.
        ntok: its numeric tokenizer.
        texts: held-out sentences.
        seed: seed of the causal-sampling draws.
        batch_size: sentences per forward pass.

    Returns:
        ``{"pred": [N], "true": [N]}`` regression predictions and true values at the positions
        whose next token is ``<NUM>``, and ``{"sum_standard", "sum_individual"}`` ``[M]`` OvR
        probability sums at every real position.
    """
    from cauchylin import CauchyVector
    from cauchylin.metrics import ovr_prob_sums

    num = model.config.num_token_id
    gen = torch.Generator().manual_seed(seed)
    keep: dict[str, list[torch.Tensor]] = {
        k: [] for k in ("pred", "true", "sum_standard", "sum_individual")
    }
    model.eval()
    for start in range(0, len(texts), batch_size):
        enc = ntok(texts[start : start + batch_size], padding=True, return_tensors="pt")
        out = model(enc["input_ids"], enc["numeric_values"], enc["attention_mask"])
        mask = enc["attention_mask"].bool()
        pair = mask[:, :-1] & mask[:, 1:]
        at_num = pair & (enc["input_ids"][:, 1:] == num)
        median = from_value_space(out.loc_Y[:, :-1][at_num], model.config.value_space)
        keep["pred"].append(median.float())
        keep["true"].append(enc["numeric_values"][:, 1:][at_num].float())
        U = CauchyVector(out.loc_U[mask], out.scale_U[mask])
        keep["sum_standard"].append(ovr_prob_sums(model.action, U, mode=modes.STANDARD).float())
        keep["sum_individual"].append(
            ovr_prob_sums(model.action, U, mode=modes.INDIVIDUAL, generator=gen).float()
        )
    return {k: torch.cat(v) for k, v in keep.items()}


def _save_figure(fig: Any, path: Path) -> Path:
    """Lay out, write (100 dpi) and close one figure; returns its path."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_plots(
    output_dir: Path, history: list[dict[str, float]], preds: dict[str, torch.Tensor]
) -> list[Path]:
    """Write the three figures.

    Args:
        output_dir: the folder.
        history: :attr:`cauchylin_hf.training.TrainResult.history`.
        preds: :func:`heldout_predictions`.

    Returns:
        The paths written.
    """
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    paths = []
    fig, ax = plt.subplots(figsize=(6, 4))
    steps = [row["step"] for row in history]
    for key, label in (
        ("loss", "total"),
        ("cls_loss", "OvR classification"),
        ("reg_loss", "regression NLL"),
    ):
        ys = [row.get(key, math.nan) for row in history]
        ax.plot(steps, ys, marker="o", ms=3, label=label)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_title("Training loss")
    ax.legend()
    paths.append(_save_figure(fig, output_dir / "loss_curves.png"))

    fig, ax = plt.subplots(figsize=(5, 5))
    true, pred = preds["true"].numpy(), preds["pred"].numpy()
    ax.scatter(true, pred, s=8, alpha=0.6)
    if true.size:
        lo, hi = float(min(true.min(), pred.min())), float(max(true.max(), pred.max()))
        ax.plot([lo, hi], [lo, hi], color="grey", lw=1, ls="--", label="y = x")
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_xlabel("true number")
    ax.set_ylabel("predicted number (median)")
    ax.set_title("Held-out numbers: predicted vs true")
    ax.legend()
    paths.append(_save_figure(fig, output_dir / "predicted_vs_true.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label in (("sum_standard", "standard"), ("sum_individual", "causal sampling")):
        x = preds[key].clamp(1e-3, 1e3).log10().numpy()
        ax.hist(x, bins=40, alpha=0.6, label=label)
    ax.axvline(0.0, color="grey", ls="--", lw=1)
    ax.set_xlabel("log10 sum_k P_k per position")
    ax.set_ylabel("positions")
    ax.set_title("OvR probability sums (held-out)")
    ax.legend()
    paths.append(_save_figure(fig, output_dir / "ovr_prob_sums.png"))
    return paths


def _fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.4g}"


def metrics_table(columns: dict[str, dict[str, float]]) -> str:
    """The metrics table (rows :data:`TABLE_ROWS`, one column per model).

    Args:
        columns: column title -> metrics dict (a missing key prints ``—``).

    Returns:
        The table as text.
    """
    width = max(len(label) for label, _ in TABLE_ROWS) + 2
    titles = list(columns)
    col = max(12, *(len(t) + 2 for t in titles))
    lines = ["metric".ljust(width) + "".join(t.rjust(col) for t in titles)]
    lines.append("-" * len(lines[0]))
    for label, key in TABLE_ROWS:
        cells = "".join(_fmt(columns[t].get(key)).rjust(col) for t in titles)
        lines.append(label.ljust(width) + cells)
    return "\n".join(lines)


COMPARISON_ROWS = (
    ("MAE", "mae"),
    ("median abs. error", "mdae"),
    ("Spearman with the truth", "spearman"),
    *(
        (f"{round(100 * c)}% interval coverage", f"coverage_{round(100 * c)}")
        for c in REPORTED_LEVELS
    ),
    ("text-token accuracy", "text_accuracy"),
    ("training seconds", "train_seconds"),
)
"""(label, key) rows of the comparison table."""


def compare_with_text_model(
    model: Any,
    ntok: Any,
    train_texts: list[str],
    heldout_texts: list[str],
    settings: DemoSettings,
    say: Any = print,
) -> dict[str, dict[str, float]]:
    """The target number of each held-out sentence: the causal model, a plain LM, the median.

    The plain language model is :func:`~cauchylin_hf.app.compare.train_text_baseline` on the
    same sentences with :meth:`DemoSettings.recipe` (same backbone, steps, batch, schedule and
    seed; numbers written as digits), read back from its greedy continuation.

    Args:
        model: the trained causal model.
        ntok: its numeric tokenizer.
        train_texts: the training sentences (for the baseline and the training median).
        heldout_texts: the held-out sentences.
        settings: the demo's sizes.
        say: where progress lines go.

    Returns:
        ``{"causal LM": {...}, "CE text LM": {...}, "training median": {...}}``, each with the
        keys of :data:`COMPARISON_ROWS` (``nan`` where a score does not apply).

    Example:
        >>> tiny = DemoSettings(n_train=16, n_heldout=4, vocab_size=300, hidden_size=16,
        ...                     num_layers=1, num_heads=2, max_steps=2, batch_size=8)
        >>> from cauchylin_hf.app.corpus import make_splits
        >>> splits = make_splits(16, 4, seed=0)
        >>> model, ntok = build_model(tiny, splits.train)
        >>> rows = compare_with_text_model(model, ntok, splits.train, splits.heldout, tiny,
        ...                                say=lambda *a: None)
        >>> sorted(rows), 0.0 <= rows["causal LM"]["coverage_90"] <= 1.0
        (['CE text LM', 'causal LM', 'training median'], True)
    """
    from . import compare

    say("== the target number (the last number of each held-out sentence) against a plain LM")
    say(
        f"training the plain softmax-CE language model on the same sentences with the same "
        f"budget ({settings.max_steps} steps of {settings.batch_size}, digits as tokens) ..."
    )
    text_model, text_tok, text_seconds = compare.train_text_baseline(train_texts, settings.recipe())
    mine = compare.causal_predictions(model, ntok, heldout_texts, REPORTED_LEVELS)
    true = mine["true"]
    median = compare.training_median(train_texts)
    text_pred, _ = compare.baseline_predictions(
        text_model, text_tok, heldout_texts, fallback=median
    )
    rows = {
        "causal LM": compare.score(
            mine["median"],
            true,
            text_accuracy=compare.text_accuracy(model, ntok, heldout_texts, causal=True),
            train_seconds=math.nan,
            lower=mine["lower"],
            upper=mine["upper"],
            levels=REPORTED_LEVELS,
        ),
        "CE text LM": compare.score(
            text_pred,
            true,
            text_accuracy=compare.text_accuracy(text_model, text_tok, heldout_texts, causal=False),
            train_seconds=text_seconds,
        ),
        "training median": compare.score(
            torch.full_like(true, median), true, text_accuracy=math.nan, train_seconds=0.0
        ),
    }
    out: dict[str, dict[str, float]] = {}
    for name, sc in rows.items():
        flat = {k: getattr(sc, k) for k in ("mae", "mdae", "spearman", "text_accuracy")}
        flat["train_seconds"] = sc.train_seconds
        for c in REPORTED_LEVELS:
            flat[f"coverage_{round(100 * c)}"] = sc.coverage.get(c, math.nan)
        out[name] = flat
    j = len(REPORTED_LEVELS) // 2  # the middle level
    say(
        f"examples (truth | causal LM median [{round(100 * REPORTED_LEVELS[j])}% interval] | plain LM):"
    )
    lo, hi = mine["lower"][:, j], mine["upper"][:, j]
    for i in range(min(5, len(heldout_texts))):
        prompt, _ = compare.split_at_target(heldout_texts[i])
        say(
            f"  {prompt.strip()[-48:]:>48s} -> {float(true[i]):g} | {float(mine['median'][i]):.4g} "
            f"[{float(lo[i]):.4g}, {float(hi[i]):.4g}] | {float(text_pred[i]):g}"
        )
    return out


def comparison_table(columns: dict[str, dict[str, float]]) -> str:
    """The comparison table (rows :data:`COMPARISON_ROWS`, one column per model).

    Args:
        columns: from :func:`compare_with_text_model`.

    Returns:
        The table as text.

    Example:
        >>> table = comparison_table({"a": {"mae": 1.0, "mdae": 0.5}})
        >>> [line.split()[-1] for line in table.splitlines()[2:5]]  # missing scores print —
        ['1', '0.5', '—']
    """
    width = max(len(label) for label, _ in COMPARISON_ROWS) + 2
    titles = list(columns)
    col = max(12, *(len(t) + 2 for t in titles))
    lines = ["held-out target number".ljust(width) + "".join(t.rjust(col) for t in titles)]
    lines.append("-" * len(lines[0]))
    for label, key in COMPARISON_ROWS:
        cells = "".join(_fmt(columns[t].get(key)).rjust(col) for t in titles)
        lines.append(label.ljust(width) + cells)
    return "\n".join(lines)


def run_demo(
    output_dir: str | os.PathLike[str] = "outputs/demo",
    *,
    quick: bool = False,
    settings: DemoSettings | None = None,
    progress: bool = True,
    plots: bool = True,
    stream: TextIO | None = None,
) -> dict[str, Any]:
    """Run the whole demo (see the module docstring) and return its numbers.

    Args:
        output_dir: folder for the plots, ``metrics.json`` and ``samples.txt`` (created).
        quick: use :data:`QUICK` instead of :data:`FULL`.
        settings: explicit sizes (overrides ``quick``).
        progress: show progress bars.
        plots: write the figures.
        stream: where to print (default ``sys.stdout``).

    Returns:
        ``{"metrics", "untrained", "mean_baseline", "comparison", "predictions",
        "generations", "draw_medians", "counterfactual", "files", "seconds", "settings"}``.

    Example:
        ``run_demo("outputs/demo", quick=True)`` is the ``--quick`` run; a tiny one in a second:

        >>> import io, tempfile
        >>> tiny = DemoSettings(n_train=32, n_heldout=8, vocab_size=300, hidden_size=16,
        ...                     num_layers=1, num_heads=2, max_steps=2, batch_size=8,
        ...                     max_new_tokens=2)
        >>> log = io.StringIO()
        >>> summary = run_demo(tempfile.mkdtemp(), settings=tiny, progress=False, plots=False,
        ...                    stream=log)
        >>> list(summary["generations"]) == [mode for mode, _ in MODE_SETTINGS]
        True
        >>> [Path(f).name for f in summary["files"]], summary["settings"]["max_steps"]
        (['metrics.json', 'samples.txt'], 2)
        >>> summary["metrics"]["eval/loss"] < summary["untrained"]["eval/loss"]  # 2 steps help
        True
        >>> log.getvalue().splitlines()[0]
        '== cauchylin demo: a causal language model learns numbers in text'
    """
    from .corpus import make_splits

    out = stream or sys.stdout
    s = settings or (QUICK if quick else FULL)
    start = time.perf_counter()
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)

    def say(text: str = "") -> None:
        print(text, file=out, flush=True)

    say("== cauchylin demo: a causal language model learns numbers in text")
    splits = make_splits(s.n_train, s.n_heldout, seed=s.seed)
    model, ntok, result = _train_model(s, splits, folder, progress, say)
    metrics = dict(result.metrics or {})
    untrained = dict(result.initial_metrics or {})
    baseline = mean_baseline(splits.train, splits.heldout)
    say("== held-out metrics")
    say(
        metrics_table(
            {
                "trained": metrics,
                "untrained": untrained,
                f"train mean ({baseline['train_mean']:.4g})": baseline,
            }
        )
    )
    say("")

    comparison = compare_with_text_model(model, ntok, splits.train, splits.heldout, s, say)
    comparison["causal LM"]["train_seconds"] = float(result.train_runtime)
    say(comparison_table(comparison))
    say("")

    # Generated numbers are written with the decimals their field had in the training text.
    precision = NumberPrecision.from_texts(splits.train)
    predictions = _predictions(model, ntok, precision, say)
    generations = _generate_in_every_mode(model, ntok, s, precision, say)
    draw_medians = _median_of_draws(model, ntok, s, precision, say)
    counterfactual = _counterfactual(model, ntok, s, precision, say)

    files: list[str] = []
    if plots:
        preds = heldout_predictions(model, ntok, splits.heldout, seed=s.seed)
        files = [str(p) for p in write_plots(folder, result.history, preds)]
    summary: dict[str, Any] = {
        "metrics": metrics,
        "untrained": untrained,
        "mean_baseline": baseline,
        "comparison": comparison,
        "predictions": predictions,
        "generations": generations,
        "draw_medians": draw_medians,
        "counterfactual": counterfactual,
        "files": files,
        "seconds": time.perf_counter() - start,
        "settings": asdict(s),
    }
    files += _write_results(folder, summary)
    summary["files"] = files
    say("== files")
    for f in files:
        say(f"  {f}")
    causal_row, text_row = comparison["causal LM"], comparison["CE text LM"]
    say(
        f"held-out target number: median abs. error {causal_row['mdae']:.4g} (plain CE language "
        f"model {text_row['mdae']:.4g}, training median "
        f"{comparison['training median']['mdae']:.4g}); 50% interval coverage "
        f"{causal_row['coverage_50']:.2f}; text-token accuracy "
        f"{causal_row['text_accuracy']:.3f} (plain CE {text_row['text_accuracy']:.3f})"
    )
    say(f"demo finished in {summary['seconds']:.1f} s")
    return summary


def _train_model(
    s: DemoSettings, splits: Any, folder: Path, progress: bool, say: Callable[[str], None]
) -> tuple[Any, Any, Any]:
    """The demo's first section: the corpus, the model built on it, and its training."""
    from ..training import train

    say(f"corpus: {len(splits.train)} training / {len(splits.heldout)} held-out sentences, e.g.")
    for text in splits.train[:3]:
        say(f"  {text}")
    model, ntok = build_model(s, splits.train)
    n_params = sum(p.numel() for p in model.parameters())
    say(
        f"model: Qwen2 backbone from a config (H={s.hidden_size}, {s.num_layers} layers, "
        f"{len(ntok)} tokens, <NUM> id {ntok.num_token_id}) + Abduction/Action heads, "
        f"{n_params / 1e6:.2f}M parameters, all trained"
    )
    say(f"training: {s.max_steps} steps of {s.batch_size} sentences")
    result = train(
        model,
        ntok,
        splits.train,
        splits.heldout,
        folder / "trainer",
        max_steps=s.max_steps,
        batch_size=s.batch_size,
        learning_rate=s.learning_rate,
        logging_steps=max(1, s.max_steps // 20),
        seed=s.seed,
        progress=progress,
        save=False,
        eval_before=True,
        warmup_steps=max(1, s.max_steps // 20),
        lr_scheduler_type="cosine",
    )
    say(f"trained in {result.train_runtime:.1f} s")
    say("")
    return model, ntok, result


def _predicted(
    model: Any, ntok: Any, prompts: list[str], precision: NumberPrecision
) -> list[dict[str, Any]]:
    """Each prompt's next number as predicted: the median and its intervals, as
    ``cauchylin-lm predict`` prints them by default (:data:`cauchylin.levels.PRINTED_LEVELS`)."""
    from ..predict import predict_values

    pred = predict_values(model, ntok, [p + " " for p in prompts], levels=PRINTED_LEVELS)
    rows = []
    for i, prompt in enumerate(prompts):
        values = [pred.median[i]]
        for j in range(len(pred.levels)):
            values += [pred.lower[i, j], pred.upper[i, j]]
        w = [write_value(precision, float(v), prompt + " ", None) for v in values]
        intervals = "  ".join(
            f"{round(100 * c)}% [{w[1 + 2 * j]}, {w[2 + 2 * j]}]" for j, c in enumerate(pred.levels)
        )
        line = f"{prompt} {w[0]}  |  {intervals}"
        rows.append({"prompt": prompt, "median": float(pred.median[i]), "line": line})
    return rows


def _predictions(
    model: Any, ntok: Any, precision: NumberPrecision, say: Callable[[str], None]
) -> list[dict[str, Any]]:
    """What to trust: each prompt's next number, its median and intervals (by default those of
    :data:`cauchylin.levels.PRINTED_LEVELS`: 50% and 90%)."""
    shown = " and ".join(f"{round(100 * c)}%" for c in PRINTED_LEVELS)
    say(f"== what to trust: each prompt's next number, the median with its {shown} intervals")
    model.eval()
    rows = _predicted(model, ntok, list(PROMPTS), precision)
    for row in rows:
        say(f"  {row['line']}")
    say("")
    return rows


def _first_generated_number(text: str, prompt: str) -> float | None:
    """The first number written after ``prompt`` in ``text`` (None: the draw wrote none)."""
    from ..numbers import find_numbers

    spans = find_numbers(text[len(prompt) :])
    return float(spans[0].value) if spans else None


def _generate_in_every_mode(
    model: Any, ntok: Any, s: DemoSettings, precision: NumberPrecision, say: Callable[[str], None]
) -> dict[str, list[str]]:
    """The same prompts continued in every inference mode (:data:`MODE_SETTINGS`), by mode,
    each a raw draw; for the individual mode also the median of :data:`DRAWS` draws."""
    from ..generation import generate

    generations: dict[str, list[str]] = {}
    say(
        f"== generation from the same prompts in every mode (seed {s.seed}): each line is one "
        "raw draw; the individual modes draw an individual from a Cauchy, whose tail gives a "
        "far-off number now and then (trust the median and intervals above)"
    )
    model.eval()
    for mode, kw in MODE_SETTINGS:
        g = generate(
            model,
            list(PROMPTS),
            tokenizer=ntok,
            mode=mode,
            max_new_tokens=s.max_new_tokens,
            seed=s.seed,
            **kw,
        )
        generations[mode] = [
            precision.write_generation(g, i, prompt, ntok)[0] for i, prompt in enumerate(PROMPTS)
        ]
        draws = "" if mode == modes.CAUSAL else ", one raw draw each"
        say(f"-- {mode} ({', '.join(f'{k}={v}' for k, v in kw.items())}){draws}")
        for text in generations[mode]:
            say(f"  {text}")
    say("")
    return generations


def _median_of_draws(
    model: Any, ntok: Any, s: DemoSettings, precision: NumberPrecision, say: Callable[[str], None]
) -> list[str]:
    """Per prompt, the median of the first generated number over :data:`DRAWS` individual
    draws, written with its field's decimals (``-`` where no draw wrote a number)."""
    from ..generation import generate

    prompts = [p for p in PROMPTS for _ in range(DRAWS)]
    g = generate(
        model,
        prompts,
        tokenizer=ntok,
        mode=modes.INDIVIDUAL,
        max_new_tokens=s.max_new_tokens,
        seed=s.seed,
        temperature=1.0,
    )
    out = []
    for k, prompt in enumerate(PROMPTS):
        values = [
            _first_generated_number(precision.write_generation(g, i, prompt, ntok)[0], prompt)
            for i in range(k * DRAWS, (k + 1) * DRAWS)
        ]
        found = [v for v in values if v is not None and math.isfinite(v)]
        out.append(
            write_value(precision, statistics.median(found), prompt + " ", None) if found else "-"
        )
    say(
        f"== the median of the first number of {DRAWS} {modes.INDIVIDUAL} draws per prompt "
        "(close to the predicted median where the draws are well behaved):"
    )
    for prompt, median in zip(PROMPTS, out, strict=True):
        say(f"  {prompt} {median}")
    say("")
    return out


COUNTERFACTUAL_PAIR = (
    "Ann had 47 pears and bought 5 more, so Ann now has",
    "Ann had 47 pears and bought 9 more, so Ann now has",
)
"""Two prompts that differ in one number (4 more pears bought): the counterfactual pair."""


def _counterfactual(
    model: Any, ntok: Any, s: DemoSettings, precision: NumberPrecision, say: Callable[[str], None]
) -> dict[str, Any]:
    """One typical shared individual (one ``eps_seed`` from the central half of its law) on two
    prompts that differ in one number: its two texts, and the predicted medians beside them."""
    from ..generation import generate

    say(
        "== counterfactual: one individual (the same eps_seed) on two prompts that differ in one "
        "number (4 more pears bought)"
    )
    # A typical individual: eps_seed, the quantile that selects it, in the central half
    # [0.25, 0.75] (an individual from the tails writes far-off numbers, as the raw draws show).
    generator = torch.Generator().manual_seed(s.seed + 1)
    eps = 0.25 + 0.5 * torch.rand(
        (model.action.causal_size,), generator=generator, dtype=torch.float64
    )
    pair = list(COUNTERFACTUAL_PAIR)
    cf = generate(
        model,
        pair,
        tokenizer=ntok,
        mode=modes.SHARED_INDIVIDUAL,
        eps_seed=eps,
        max_new_tokens=s.max_new_tokens,
    )
    assert cf.eps_seed is not None  # a shared_individual run returns its draw
    same = bool(torch.equal(cf.eps_seed[0], cf.eps_seed[1]))
    say(
        f"eps_seed[:4] = {[round(x, 4) for x in eps[:4].tolist()]}, a typical individual "
        f"(each in [0.25, 0.75]; identical in both rows: {same})"
    )
    cf_texts = [precision.write_generation(cf, i, prompt, ntok)[0] for i, prompt in enumerate(pair)]
    for text in cf_texts:
        say(f"  {text}  (this individual's draw)")
    predicted = _predicted(model, ntok, pair, precision)
    first = [_first_generated_number(t, p) for t, p in zip(cf_texts, pair, strict=True)]
    medians = [row["median"] for row in predicted]
    change = f"{first[1] - first[0]:+.4g}" if first[0] is not None and first[1] is not None else "-"
    say(
        f"the individual's number changes by {change} and the predicted median by "
        f"{medians[1] - medians[0]:+.4g} when 4 more pears are bought (the true change: +4); "
        "the predictions:"
    )
    for row in predicted:
        say(f"  {row['line']}")
    say("")
    return {
        "eps_seed_head": eps[:4].tolist(),
        "texts": cf_texts,
        "predictions": [row["line"] for row in predicted],
    }


def _write_results(folder: Path, summary: dict[str, Any]) -> list[str]:
    """Write ``metrics.json`` and ``samples.txt`` into ``folder``; return their paths."""
    (folder / "metrics.json").write_text(
        json.dumps(
            {
                k: summary[k]
                for k in ("comparison", "metrics", "untrained", "mean_baseline", "settings")
            },
            indent=2,
        )
    )
    with (folder / "samples.txt").open("w", encoding="utf-8") as fh:
        for mode, texts in summary["generations"].items():
            fh.write(f"[{mode}]\n" + "".join(f"{t}\n" for t in texts))
        fh.write("[counterfactual shared_individual]\n")
        fh.write("".join(f"{t}\n" for t in summary["counterfactual"]["texts"]))
    return [str(folder / "metrics.json"), str(folder / "samples.txt")]


def with_overrides(settings: DemoSettings, **overrides: Any) -> DemoSettings:
    """``settings`` with the non-None ``overrides`` applied.

    Args:
        settings: the base sizes.
        **overrides: :class:`DemoSettings` fields; None leaves a field as it is.

    Returns:
        The new settings.

    Example:
        >>> with_overrides(QUICK, max_steps=7, seed=None).max_steps
        7
    """
    return replace(settings, **{k: v for k, v in overrides.items() if v is not None})
