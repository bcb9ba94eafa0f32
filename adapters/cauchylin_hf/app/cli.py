"""The ``cauchylin-lm`` command line: ``demo``, ``train``, ``evaluate``, ``generate``, ``verify``.

Run ``cauchylin-lm --help`` (or ``python -m cauchylin_hf.app.cli --help``) and ``cauchylin-lm
COMMAND --help``. Every command works offline on local folders:

* ``demo`` — the embedded demo (:mod:`cauchylin_hf.app.demo`), no arguments needed.
* ``train BASE --train-file F`` — attach the causal heads to a local base checkpoint (e.g. a
  downloaded Qwen2.5-0.5B folder) or continue training a saved causal model, train on a text or
  JSONL file, save model and tokenizer to ``--output-dir``.
* ``evaluate MODEL --data F`` — the held-out metrics (token accuracy, ``<NUM>`` F1, regression
  errors; :func:`cauchylin.metrics.compute_metrics`).
* ``generate MODEL --prompt TEXT`` — text with numbers, in any inference mode.
* ``verify BASE`` — the initialisation-equivalence report (``loc_S`` equals the base logits).

Errors a user can fix (a missing folder or file, a model without a decoder, an empty dataset, a
bad option) print one ``cauchylin-lm COMMAND: error: ...`` line and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

__all__ = ["build_parser", "load_causal_model", "main"]

PROG = "cauchylin-lm"


class CliError(Exception):
    """A user error: printed as one line, exit status 2."""


# --------------------------------------------------------------------------------------------
# Loading


def _is_causal_folder(path: Path) -> bool:
    config = path / "config.json"
    if not config.is_file():
        return False
    try:
        return json.loads(config.read_text()).get("model_type") == "cauchy_lm"
    except (OSError, ValueError):
        return False


def load_causal_model(
    path: str | os.PathLike[str], *, tokenizer: str | None = None, **settings: Any
) -> tuple[Any, Any]:
    """Load a causal model and its numeric tokenizer from a local folder.

    A folder saved by ``train`` (``config.json`` with ``model_type="cauchy_lm"``) is loaded with
    ``CauchyLMForCausalLM.from_pretrained`` and ``NumericTokenizer.from_pretrained``; any other
    checkpoint folder is taken as a base decoder and gets fresh heads with
    ``CauchyLMForCausalLM.from_base`` (``loc_S`` then equals the base logits).

    Args:
        path: the folder.
        tokenizer: a tokenizer folder (default: the one in ``path``).
        **settings: ``from_base`` settings for a base folder (e.g. ``freeze_backbone``).

    Returns:
        ``(model, numeric_tokenizer)``.

    Raises:
        CliError: the folder does not exist, has no tokenizer, or does not hold a decoder-only
            causal LM.

    Example:
        >>> import tempfile, torch
        >>> from cauchylin_hf.testing import save_tiny_base
        >>> folder = save_tiny_base(tempfile.mkdtemp(), "qwen2", spare_rows=3)
        >>> model, ntok = load_causal_model(folder)  # a base folder: fresh heads
        >>> ntok.num_token_id, model.config.vocab_size  # <NUM> is the first spare row
        (301, 304)
        >>> model.save_pretrained(folder / "causal")
        >>> _ = ntok.save_pretrained(folder / "causal")
        >>> again, _ = load_causal_model(folder / "causal")  # a saved causal model
        >>> type(again).__name__, again.config.num_token_id
        ('CauchyLMForCausalLM', 301)
        >>> bool(torch.equal(again.action.classifier.weight, model.action.classifier.weight))
        True
    """
    from ..model import CauchyLMForCausalLM
    from ..tokenizer import NumericTokenizer

    folder = Path(path)
    if not folder.is_dir():
        raise CliError(f"model folder not found: {str(folder)!r}")
    if tokenizer is not None and not Path(tokenizer).is_dir():
        raise CliError(f"tokenizer folder not found: {tokenizer!r}")
    try:
        if _is_causal_folder(folder):
            model = CauchyLMForCausalLM.from_pretrained(folder)
            ntok = NumericTokenizer.from_pretrained(tokenizer or folder)
            if ntok.num_token_id != model.config.num_token_id:
                ntok = NumericTokenizer(
                    ntok.tokenizer, num_token=ntok.num_token, num_token_id=model.config.num_token_id
                )
        else:
            built = CauchyLMForCausalLM.from_base(
                str(folder), tokenizer, return_tokenizer=True, **settings
            )
            model, loaded = cast(tuple[CauchyLMForCausalLM, NumericTokenizer | None], built)
            if loaded is None:
                raise CliError(f"{str(folder)!r} has no tokenizer; pass --tokenizer FOLDER")
            ntok = loaded
    except (OSError, ValueError, KeyError) as exc:
        raise CliError(
            f"could not load {str(folder)!r} (a local decoder-only causal LM checkpoint is "
            f"needed): {exc}"
        ) from exc
    model.eval()
    return model, ntok


def _data_path(path: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise CliError(f"dataset file not found: {path!r}")
    return p


def _texts(path: str) -> list[str]:
    """The texts of a dataset file, checked before any model is loaded."""
    from ..data import read_texts

    return read_texts(_data_path(path))


# --------------------------------------------------------------------------------------------
# Commands


def cmd_demo(args: argparse.Namespace) -> int:
    """``demo``: run :func:`cauchylin_hf.app.demo.run_demo`."""
    from .demo import FULL, QUICK, run_demo, with_overrides

    settings = with_overrides(QUICK if args.quick else FULL, max_steps=args.steps, seed=args.seed)
    run_demo(
        args.output_dir,
        settings=settings,
        progress=not args.no_progress,
        plots=not args.no_plots,
    )
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    """``train``: heads (or the whole model) trained on a dataset file, saved."""
    from ..training import train

    train_texts = _texts(args.train_file)
    eval_texts = _texts(args.eval_file) if args.eval_file else None
    model, ntok = load_causal_model(args.model, tokenizer=args.tokenizer)
    model.set_backbone_trainable(bool(args.train_backbone))
    model.config.freeze_backbone = not args.train_backbone
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(
        f"training {n_train / 1e6:.3f}M parameters on {len(train_texts)} texts of "
        f"{args.train_file}",
        flush=True,
    )
    result = train(
        model,
        ntok,
        train_texts,
        eval_texts,
        args.output_dir,
        max_steps=args.max_steps,
        num_train_epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        max_length=args.max_length,
        logging_steps=args.logging_steps,
        seed=args.seed,
        progress=not args.no_progress,
    )
    print(f"saved the model and the tokenizer to {result.output_dir}")
    if result.metrics:
        _print_metrics(result.metrics)
    return 0


def _print_metrics(metrics: dict[str, float]) -> None:
    width = max(len(k) for k in metrics)
    for key in sorted(metrics):
        print(f"{key.ljust(width)}  {metrics[key]:.6g}")


def cmd_evaluate(args: argparse.Namespace) -> int:
    """``evaluate``: held-out metrics of a model on a dataset file."""
    from ..training import evaluate_model

    data = _texts(args.data)
    model, ntok = load_causal_model(args.model, tokenizer=args.tokenizer)
    metrics = evaluate_model(
        model,
        ntok,
        data,
        batch_size=args.batch_size,
        max_length=args.max_length,
        seed=args.seed,
        progress=not args.no_progress,
    )
    if args.json:
        print(json.dumps(metrics, indent=2))
    else:
        _print_metrics(metrics)
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    """``generate``: continuations of prompts with numbers written in."""
    from ..generation import generate

    prompts = list(args.prompt or [])
    if args.prompts_file:
        prompts += _texts(args.prompts_file)
    if not prompts:
        raise CliError("no prompt: pass --prompt TEXT (repeatable) or --prompts-file FILE")
    model, ntok = load_causal_model(args.model, tokenizer=args.tokenizer)
    results = []
    from tqdm.auto import tqdm

    batches = range(0, len(prompts), args.batch_size)
    for start in tqdm(batches, desc="generate", disable=args.no_progress or len(batches) < 2):
        out = generate(
            model,
            prompts[start : start + args.batch_size],
            tokenizer=ntok,
            mode=args.mode,
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
            max_new_tokens=args.max_new_tokens,
            stop_strings=args.stop,
            seed=args.seed,
        )
        for i, text in enumerate(out.texts or []):
            results.append(
                {
                    "prompt": prompts[start + i],
                    "text": text,
                    "continuation": (out.new_texts or [""])[i],
                    "numbers": [
                        v
                        for t, v in zip(
                            out.new_tokens[i].tolist(), out.new_values[i].tolist(), strict=True
                        )
                        if t == model.config.num_token_id
                    ],
                }
            )
    for r in results:
        print(json.dumps(r) if args.json else r["text"])
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """``verify``: ``loc_S`` of freshly attached heads vs the base logits."""
    from ..verify import verify

    folder = Path(args.base)
    if not folder.is_dir():
        raise CliError(f"base folder not found: {args.base!r}")
    if args.tokenizer is not None and not Path(args.tokenizer).is_dir():
        raise CliError(f"tokenizer folder not found: {args.tokenizer!r}")
    try:
        report = verify(
            str(folder), tokenizer=args.tokenizer, texts=args.text or None, tolerance=args.tolerance
        )
    except (OSError, ValueError) as exc:
        raise CliError(str(exc)) from exc
    print(json.dumps(report.to_dict(), indent=2, default=str) if args.json else str(report))
    return 0 if report.passed else 1


# --------------------------------------------------------------------------------------------
# Parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``cauchylin-lm`` (one subparser per command).

    Returns:
        The parser; ``args.func(args)`` runs the parsed command.

    Example:
        >>> args = build_parser().parse_args(["generate", "model_dir", "--prompt", "3 eggs",
        ...                                   "--mode", "causal"])
        >>> args.command, args.model, args.prompt, args.mode, args.max_new_tokens
        ('generate', 'model_dir', ['3 eggs'], 'causal', 32)
        >>> args.func.__name__
        'cmd_generate'
    """
    from cauchylin.nn.modes import MODES, STANDARD

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Causal language models with Cauchy heads on Hugging Face decoders.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def progress_flag(p: argparse.ArgumentParser) -> None:
        p.add_argument("--no-progress", action="store_true", help="hide progress bars")

    p = sub.add_parser(
        "demo",
        help="train and evaluate the embedded small model on a synthetic numeric corpus",
        description="Build a small Qwen2-architecture model from a config and a synthetic "
        "numeric corpus (no download), train it, evaluate it against two baselines, generate "
        "in every mode and write plots.",
    )
    p.add_argument("--output-dir", default="outputs/demo", help="plots and metrics go here")
    p.add_argument("--quick", action="store_true", help="a shortened demo (under a minute)")
    p.add_argument("--steps", type=_positive_int, help="training steps (default: the preset)")
    p.add_argument("--seed", type=int, help="seed (default 0)")
    p.add_argument("--no-plots", action="store_true", help="do not write the figures")
    progress_flag(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser(
        "train",
        help="train the causal heads on a local checkpoint and a dataset file",
        description="Attach the causal heads to a local base checkpoint folder (or load a "
        "saved causal model), train on a dataset file (JSONL with a 'text' field, or plain "
        "text with one example per line) and save the model and tokenizer.",
    )
    p.add_argument("model", help="base checkpoint folder (e.g. Qwen2.5-0.5B) or a causal model")
    p.add_argument("--train-file", required=True, help="training data (.jsonl or text)")
    p.add_argument("--eval-file", help="held-out data evaluated after training")
    p.add_argument("--output-dir", default="cauchylin_output", help="where to save")
    p.add_argument("--tokenizer", help="tokenizer folder (default: the model folder)")
    p.add_argument("--max-steps", type=int, default=-1, help="optimizer steps (-1: epochs)")
    p.add_argument("--epochs", type=float, default=1.0, help="epochs when --max-steps is -1")
    p.add_argument("--batch-size", type=_positive_int, default=8)
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--max-length", type=_positive_int, help="cut examples to this many tokens")
    p.add_argument("--logging-steps", type=_positive_int, default=10)
    p.add_argument(
        "--train-backbone", action="store_true", help="train the backbone too (default: frozen)"
    )
    p.add_argument("--seed", type=int, default=0)
    progress_flag(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser(
        "evaluate",
        help="held-out metrics (token accuracy, <NUM> F1, regression errors, ...)",
        description="Evaluate a causal model (or a base with fresh heads) on a dataset file.",
    )
    p.add_argument("model", help="a causal model folder (from train) or a base folder")
    p.add_argument("--data", required=True, help="dataset file (.jsonl or text)")
    p.add_argument("--tokenizer", help="tokenizer folder (default: the model folder)")
    p.add_argument("--batch-size", type=_positive_int, default=16)
    p.add_argument("--max-length", type=_positive_int)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the metrics as JSON")
    progress_flag(p)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser(
        "generate",
        help="generate text with numbers in any inference mode",
        description="Continue prompts; chosen <NUM> tokens are written as the predicted value.",
    )
    p.add_argument("model", help="a causal model folder (from train) or a base folder")
    p.add_argument("--prompt", action="append", help="a prompt (repeatable)")
    p.add_argument("--prompts-file", help="prompts, one per line (or JSONL 'text')")
    p.add_argument("--tokenizer", help="tokenizer folder (default: the model folder)")
    p.add_argument("--mode", choices=MODES, default=STANDARD)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=_positive_int)
    p.add_argument("--top-p", type=float)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--stop", action="append", help="stop string (repeatable)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=_positive_int, default=8)
    p.add_argument("--json", action="store_true", help="one JSON object per prompt")
    progress_flag(p)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser(
        "verify",
        help="check that loc_S equals the base logits right after initialisation",
        description="Attach fresh heads to a base checkpoint folder and measure the largest "
        "difference between loc_S and the base model's logits.",
    )
    p.add_argument("base", help="base checkpoint folder")
    p.add_argument("--tokenizer", help="tokenizer folder (default: the base folder)")
    p.add_argument("--text", action="append", help="a text to read (repeatable)")
    p.add_argument("--tolerance", type=float, default=1e-4)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_verify)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``cauchylin-lm``.

    Args:
        argv: the arguments (default ``sys.argv[1:]``).

    Returns:
        The exit status: 0 on success, 1 when ``verify`` fails its tolerance, 2 for a user error.

    Example:
        >>> import contextlib, io
        >>> err = io.StringIO()
        >>> with contextlib.redirect_stderr(err):
        ...     status = main(["verify", "/no/such/folder"])
        >>> status, err.getvalue().strip()
        (2, "cauchylin-lm verify: error: base folder not found: '/no/such/folder'")
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except CliError as exc:
        print(f"{PROG} {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as exc:
        print(f"{PROG} {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
