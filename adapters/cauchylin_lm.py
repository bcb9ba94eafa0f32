"""The ``cauchylin-lm`` console script: its arguments, parsed before anything heavy is imported.

``cauchylin-lm --help`` and a mistyped option must answer at once, but torch and transformers take
seconds to import (and importing :mod:`cauchylin_hf` registers the model with transformers'
Auto classes, which imports both). This top-level module therefore imports only the standard
library: :func:`main` parses the command line, and only then imports
:mod:`cauchylin_hf.app.cli`, where the commands live, and runs the chosen one.

``generate --mode`` takes its choices from :mod:`cauchylin.nn.mode_names`, a file of strings
that is read without importing the ``cauchylin`` package.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import math
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

__all__ = ["PROG", "SCHEDULERS", "build_parser", "main"]

PROG = "cauchylin-lm"
"""The name of the console script (the start of every message it prints)."""

SCHEDULERS = (
    "linear",
    "cosine",
    "cosine_with_restarts",
    "polynomial",
    "constant",
    "constant_with_warmup",
    "inverse_sqrt",
)
"""Learning-rate schedules of ``train --lr-scheduler`` (transformers' ``lr_scheduler_type``)."""

_COMMANDS_MODULE = "cauchylin_hf.app.cli"


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad option reported in one line (no usage block) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _Modes(Sequence[str]):
    """The inference modes' names, read from :mod:`cauchylin.nn.mode_names` on first use.

    That file imports nothing; it is loaded by its path, without running ``cauchylin``'s package
    ``__init__`` (which imports torch), so listing or checking a mode takes no time.
    """

    def _names(self) -> tuple[str, ...]:
        spec = importlib.util.find_spec("cauchylin")  # finds the package without importing it
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("cauchylin is not installed")
        path = os.path.join(next(iter(spec.submodule_search_locations)), "nn", "mode_names.py")
        file_spec = importlib.util.spec_from_file_location("_cauchylin_mode_names", path)
        assert file_spec is not None and file_spec.loader is not None
        module = importlib.util.module_from_spec(file_spec)
        file_spec.loader.exec_module(module)
        return tuple(module.MODE_NAMES)

    def __getitem__(self, index: Any) -> Any:
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __contains__(self, value: object) -> bool:
        return value in self._names()


def _integer(accept: Callable[[int], bool], expected: str) -> Callable[[str], int]:
    """An argparse ``type`` for an integer that ``accept`` allows; errors say ``expected``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not accept(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


_positive_int = _integer(lambda v: v >= 1, "a positive integer")
_count = _integer(lambda v: v >= 0, "an integer >= 0")
_steps = _integer(lambda v: v == -1 or v >= 1, "-1 or a positive integer")
# numpy's seed range, which the Trainer seeds too (torch's is wider)
_seed = _integer(lambda v: 0 <= v < 2**32, "an integer in [0, 2**32)")


def _real(low: float, high: float, *, closed_low: bool) -> Callable[[str], float]:
    """An argparse ``type`` for a finite number in ``[low, high)`` (or ``(low, high)``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        ok = math.isfinite(value) and (value >= low if closed_low else value > low) and value < high
        if not ok:
            bracket = "[" if closed_low else "("
            raise argparse.ArgumentTypeError(
                f"expected a number in {bracket}{low:g}, {high:g}), got {text!r}"
            )
        return value

    return parse


def _calibration(text: str) -> str | float:
    """An argparse ``type`` for ``--calibration``: ``auto`` or a share in ``[0, 1)``."""
    if text == "auto":
        return text
    try:
        return _real(0.0, 1.0, closed_low=True)(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected auto or a share in [0, 1) (0: no calibration), got {text!r}"
        ) from None


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``cauchylin-lm`` (one subparser per command).

    Building and using it imports no third-party package (``generate``'s mode list aside).

    Returns:
        The parser; ``args.command`` names the command to run (``cauchylin_hf.app.cli.run``).

    Example:
        >>> args = build_parser().parse_args(["generate", "model_dir", "--prompt", "3 eggs",
        ...                                   "--mode", "causal"])
        >>> args.command, args.model, args.prompt, args.mode, args.max_new_tokens
        ('generate', 'model_dir', ['3 eggs'], 'causal', 32)
        >>> args.sentence_stop
        True
        >>> args = build_parser().parse_args(["train", "--from-config", "qwen2-tiny", "--data",
        ...                                   "t.csv", "--warmup-ratio", "0.1"])
        >>> args.model, args.from_config, args.warmup_ratio, args.train_backbone, args.overwrite
        (None, 'qwen2-tiny', 0.1, None, False)
    """
    parser = _Parser(
        prog=PROG,
        description="Causal language models with Cauchy heads on Hugging Face decoders.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    positive = _real(0.0, math.inf, closed_low=False)

    def progress_flag(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--no-progress",
            action="store_true",
            help="hide progress bars (they are shown only when stderr is a terminal)",
        )

    def threads_flag(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--threads",
            type=_positive_int,
            help="torch CPU threads (default: torch's choice, with a note when the machine is "
            "busy)",
        )

    def raw_intervals_flag(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--raw-intervals",
            action="store_true",
            help="the model's Cauchy intervals, not the calibrated ones (default: calibrated "
            "where the model was calibrated for the number's context and the level)",
        )

    def table_flags(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--template",
            help='a CSV row as text, e.g. "age {age}, bmi {bmi} -> progression {target}" '
            "(default: the model's saved template, else every column as 'name value')",
        )
        p.add_argument(
            "--target",
            help="the target column of a table (default: 'target' if there is one, else the "
            "last column); every cell of it must be a number",
        )

    p = sub.add_parser(
        "demo",
        help="train and evaluate the embedded small model on a synthetic numeric corpus",
        description="Build a small Qwen2-architecture model from a config and a synthetic "
        "numeric corpus (no download), train it, evaluate it against two baselines, generate "
        "in every mode and write plots.",
    )
    p.add_argument("--output-dir", default="outputs/demo", help="plots and metrics go here")
    p.add_argument("--quick", action="store_true", help="a shortened demo")
    p.add_argument("--steps", type=_positive_int, help="training steps (default: the preset)")
    p.add_argument("--seed", type=_seed, help="seed (default 0)")
    p.add_argument("--no-plots", action="store_true", help="do not write the figures")
    threads_flag(p)
    progress_flag(p)

    p = sub.add_parser(
        "train",
        help="train a model from a config, or the causal heads on a local checkpoint",
        description="Train on a dataset file (JSONL with a 'text' field, plain text with one "
        "example per line, or a CSV table written as text by --template) and save the model, "
        "its tokenizer and data_format.json to --output-dir (a folder that already holds a "
        "model is replaced only with --overwrite, and only when training succeeded). Either "
        "build a new model with --from-config (a byte-level BPE tokenizer trained on the data, "
        "a random backbone that trains too) or start from a local checkpoint folder (a base "
        "like Qwen2.5-0.5B with its backbone frozen, or a causal model saved by train).",
    )
    p.add_argument(
        "model",
        nargs="?",
        help="base checkpoint folder or a saved causal model (or use --from-config)",
    )
    p.add_argument(
        "--from-config",
        metavar="PRESET|CONFIG",
        help="build a new model: qwen2-tiny, qwen2-small, or a Hugging Face config.json",
    )
    p.add_argument(
        "--data", "--train-file", dest="data", help="training data (.jsonl, .txt, .csv, .tsv)"
    )
    table_flags(p)
    p.add_argument("--eval-file", help="held-out data evaluated after training (same format)")
    p.add_argument("--output-dir", default="cauchylin_output", help="where to save")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a model already in --output-dir (once training succeeded)",
    )
    p.add_argument("--tokenizer", help="tokenizer folder (default: the model folder)")
    p.add_argument(
        "--vocab-size",
        type=_positive_int,
        default=1024,
        help="--from-config: largest tokenizer vocabulary (default 1024)",
    )
    p.add_argument("--max-steps", type=_steps, default=-1, help="optimizer steps (-1: epochs)")
    p.add_argument("--epochs", type=positive, default=1.0, help="epochs when --max-steps is -1")
    p.add_argument("--batch-size", type=_positive_int, default=8)
    p.add_argument("--learning-rate", type=positive, default=1e-3)
    warm = p.add_mutually_exclusive_group()
    warm.add_argument(
        "--warmup-ratio",
        type=_real(0.0, 1.0, closed_low=True),
        help="linear warm-up over this share of the steps (converted to --warmup-steps)",
    )
    warm.add_argument("--warmup-steps", type=_count, help="linear warm-up steps (default 0)")
    p.add_argument(
        "--lr-scheduler", choices=SCHEDULERS, help="learning-rate schedule (default linear)"
    )
    p.add_argument("--max-length", type=_positive_int, help="cut examples to this many tokens")
    p.add_argument("--logging-steps", type=_positive_int, default=10)
    p.add_argument(
        "--save-steps",
        type=_positive_int,
        help="write a checkpoint (a loadable model folder, checkpoint-STEP in --output-dir) "
        "every this many steps (default: none)",
    )
    p.add_argument(
        "--save-total-limit",
        type=_positive_int,
        help="keep only this many checkpoints, the newest (default: all)",
    )
    p.add_argument(
        "--resume-from-checkpoint",
        nargs="?",
        const=True,
        metavar="CHECKPOINT",
        help="continue an interrupted training from its latest checkpoint in --output-dir (or "
        "from CHECKPOINT), with the same command: same optimizer, schedule and data order",
    )
    p.add_argument(
        "--train-backbone",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="train the backbone too (default: yes for --from-config and for a saved model "
        "that trained it, no for a base checkpoint)",
    )
    p.add_argument(
        "--calibration",
        type=_calibration,
        default="auto",
        metavar="auto|SHARE",
        help="hold out this share of the training rows (never trained on) to calibrate the "
        "intervals on; auto: 0.2 (at most 2000 rows) with 100 rows or more, else none; "
        "0: no calibration",
    )
    p.add_argument(
        "--no-readouts",
        action="store_true",
        help="keep the one regression head trained for every number (default: after "
        "training, solve a readout per context, e.g. per table column, where it reads the "
        "numbers better)",
    )
    p.add_argument("--seed", type=_seed, default=0)
    threads_flag(p)
    progress_flag(p)

    p = sub.add_parser(
        "evaluate",
        help="held-out metrics: token accuracy, <NUM> F1, errors of the target numbers, ...",
        description="Evaluate a causal model (or a base with fresh heads) on a dataset file: "
        "the token and <NUM> metrics, and the errors, rank correlation and interval coverage "
        "of the predicted numbers (target/..., all/..., field/<name>/...), with the error of "
        "the training median beside the model's and a warning when the predictions barely "
        "vary.",
    )
    p.add_argument("model", help="a causal model folder (from train) or a base folder")
    p.add_argument("--data", required=True, help="dataset file (.jsonl, .txt, .csv, .tsv)")
    table_flags(p)
    p.add_argument(
        "--target-field",
        help="the field of the target number (the words just before it; default: the last "
        "number of each text)",
    )
    p.add_argument("--tokenizer", help="tokenizer folder (default: the model folder)")
    p.add_argument("--batch-size", type=_positive_int, default=16)
    p.add_argument("--max-length", type=_positive_int)
    p.add_argument("--seed", type=_seed, default=0)
    p.add_argument("--json", action="store_true", help="print the metrics as JSON")
    raw_intervals_flag(p)
    threads_flag(p)
    progress_flag(p)

    p = sub.add_parser(
        "predict",
        help="the next number after each prompt: median, intervals, P(<NUM>)",
        description="Read each prompt and predict the number that comes next: the median, "
        "central intervals (calibrated on rows held out of training where the model was "
        "calibrated, else the exact Cauchy quantiles) and P(<NUM>). A table (--data) gives one "
        "prompt per row: its text up to the target.",
    )
    p.add_argument("model", help="a causal model folder (from train)")
    p.add_argument("--prompt", action="append", help="a prompt (repeatable)")
    p.add_argument("--prompts-file", help="prompts, one per line (or JSONL 'text')")
    p.add_argument("--data", help="a table (.csv, .tsv): one prompt per row")
    table_flags(p)
    p.add_argument(
        "--levels",
        type=_real(0.0, 1.0, closed_low=False),
        nargs="+",
        default=[0.5, 0.9],
        help="coverages of the central intervals (default 0.5 0.9)",
    )
    p.add_argument(
        "--decimals",
        type=_count,
        help="decimals of the printed numbers (default: those of the training data's field)",
    )
    p.add_argument("--tokenizer", help="tokenizer folder (default: the model folder)")
    p.add_argument("--batch-size", type=_positive_int, default=32)
    p.add_argument("--json", action="store_true", help="one JSON object per prompt")
    raw_intervals_flag(p)
    threads_flag(p)
    progress_flag(p)

    p = sub.add_parser(
        "generate",
        help="generate text with numbers in any inference mode",
        description="Continue prompts; a chosen <NUM> is written as the predicted value, with "
        "the decimals the training data used for its field. Generation stops at the end of "
        "the sentence unless --no-sentence-stop.",
    )
    p.add_argument("model", help="a causal model folder (from train) or a base folder")
    p.add_argument("--prompt", action="append", help="a prompt (repeatable)")
    p.add_argument("--prompts-file", help="prompts, one per line (or JSONL 'text')")
    p.add_argument("--tokenizer", help="tokenizer folder (default: the model folder)")
    p.add_argument(
        "--mode",
        choices=_Modes(),
        metavar="MODE",  # an explicit metavar: the choices are not listed when building
        help="inference mode: %(choices)s (default: standard, the training mode)",
    )
    p.add_argument("--temperature", type=_real(0.0, math.inf, closed_low=True), default=1.0)
    p.add_argument("--top-k", type=_positive_int)
    p.add_argument("--top-p", type=float)
    p.add_argument("--max-new-tokens", type=_count, default=32)
    p.add_argument(
        "--sentence-stop",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="stop a row after a token that ends a sentence (., !, ? or a newline; default on)",
    )
    p.add_argument("--stop", action="append", help="stop string (repeatable)")
    p.add_argument(
        "--decimals",
        type=_count,
        help="decimals of generated numbers (default: those of the training data's field)",
    )
    p.add_argument("--seed", type=_seed, default=0)
    p.add_argument("--batch-size", type=_positive_int, default=8)
    p.add_argument("--json", action="store_true", help="one JSON object per prompt")
    threads_flag(p)
    progress_flag(p)

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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``cauchylin-lm``: parse the arguments, then import and run the command.

    Args:
        argv: the arguments (default ``sys.argv[1:]``).

    Returns:
        The exit status: 0 on success, 1 when ``verify`` fails its tolerance, 2 for a user error
        (bad options exit with 2 through argparse), 130 when interrupted (Ctrl-C), 143 when
        terminated (SIGTERM).

    Example:
        >>> import contextlib, io
        >>> err = io.StringIO()
        >>> with contextlib.redirect_stderr(err):
        ...     status = main(["verify", "/no/such/folder"])
        >>> status, err.getvalue().strip()
        (2, "cauchylin-lm verify: error: base folder not found: '/no/such/folder'")
    """
    args = build_parser().parse_args(argv)
    commands = importlib.import_module(_COMMANDS_MODULE)
    return int(commands.run(args))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
