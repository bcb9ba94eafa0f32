"""The arguments of ``cauchylin-lm``: every option of every command, declared once, and the parser.

:func:`build_parser` builds the parser from :data:`_FLAGS` (a new option of one command is one
line there). Building and using it imports the standard library only, and
:mod:`cauchylin.nn.mode_names` (strings) when a command lists or checks ``--mode``,
:mod:`cauchylin.levels` (numbers) for ``predict --levels`` and
:mod:`cauchylin_hf.training_options` (dataclasses) for the ``train`` options: the console
script (:func:`cauchylin_lm.main`) parses the command line before torch and transformers are
imported, so ``--help`` and a mistyped option answer at once.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import math
import shutil
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple, NoReturn

__all__ = ["PROG", "build_parser"]

PROG = "cauchylin-lm"
"""The name of the console script (the start of every message it prints)."""


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad option reported in one line (no usage block) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _Read(Sequence[Any]):
    """A tuple of a module that imports nothing (:data:`cauchylin.nn.mode_names.MODE_NAMES`,
    :data:`cauchylin.levels.PRINTED_LEVELS`), imported on first use, so that
    listing or checking the options takes no time; ``str`` spells it as the command line takes
    it (``0.5 0.9``)."""

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(importlib.import_module(self.module), self.name))

    def __getitem__(self, index: Any) -> Any:
        return self._values()[index]

    def __len__(self) -> int:
        return len(self._values())

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values())

    def __contains__(self, value: object) -> bool:
        return value in self._values()

    def __str__(self) -> str:
        return " ".join(str(v) for v in self._values())


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


def _auto_or_share(zero: str) -> Callable[[str], str | float]:
    """An argparse ``type``: ``auto`` or a share in ``[0, 1)`` (``zero`` says what 0 does)."""

    def parse(text: str) -> str | float:
        if text == "auto":
            return text
        try:
            return _real(0.0, 1.0, closed_low=True)(text)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(
                f"expected auto or a share in [0, 1) (0: {zero}), got {text!r}"
            ) from None

    return parse


_calibration = _auto_or_share("no calibration")
_step_choice = _auto_or_share("keep the last step")

_positive = _real(0.0, math.inf, closed_low=False)
_share = _real(0.0, 1.0, closed_low=True)

_COMMANDS: dict[str, tuple[str, str]] = {
    "demo": (
        "train and evaluate the embedded small model on a synthetic numeric corpus",
        "Build a small Qwen2-architecture model from a config and a synthetic numeric corpus (no "
        "download), train it, evaluate it against two baselines, generate in every mode and "
        "write plots.",
    ),
    "train": (
        "train a model from a config, or the causal heads on a local checkpoint",
        "Train on a dataset file (JSONL with a 'text' field, plain text with one example per "
        "line, or a CSV table written as text by --template) and save the model, its tokenizer "
        "and data_format.json to --output-dir (a folder that already holds a model is replaced "
        "only with --overwrite, and only when training succeeded). Either build a new model with "
        "--from-config (a byte-level BPE tokenizer trained on the data, a random backbone that "
        "trains too) or start from a local checkpoint folder (a base like Qwen2.5-0.5B with its "
        "backbone frozen, or a causal model saved by train).",
    ),
    "evaluate": (
        "held-out metrics: token accuracy, <NUM> F1, errors of the target numbers, ...",
        "Evaluate a causal model (or a base with fresh heads) on a dataset file: the token and "
        "<NUM> metrics, and the errors, rank correlation and interval coverage of the predicted "
        "numbers (target/..., all/..., field/<name>/...), with the error of the training median "
        "beside the model's and a warning when the predictions barely vary.",
    ),
    "predict": (
        "the next number after each prompt: median, intervals, P(<NUM>)",
        "Read each prompt and predict the number that comes next: the median, central intervals "
        "(calibrated on rows held out of training where the model was calibrated, else the "
        "exact Cauchy quantiles) and P(<NUM>). A table (--data) gives one prompt per row: its "
        "text up to the target.",
    ),
    "generate": (
        "generate text with numbers in any inference mode",
        "Continue prompts; a chosen <NUM> is written as the predicted value, with the decimals "
        "the training data used for its field. Generation stops at the end of the sentence "
        "unless --no-sentence-stop.",
    ),
    "verify": (
        "check that loc_S equals the base logits right after initialisation",
        "Attach fresh heads to a base checkpoint folder and measure the largest difference "
        "between loc_S and the base model's logits.",
    ),
}
"""``{command: (one-line help, description)}``, in the order ``--help`` lists them."""

_EVERY = "train evaluate predict generate"  # the commands that read a model and data
_CAUSAL = "a causal model folder (from train)"
_TORCH = "demo train evaluate predict generate"  # the commands that run torch


class _Flag(NamedTuple):
    """One option (or positional argument) of the commands named in ``on``; a setting given as
    ``{command: value}`` differs between them."""

    names: tuple[str, ...]
    on: tuple[str, ...]
    settings: dict[str, Any]


def _flag(*names: str, on: str, **settings: Any) -> _Flag:
    return _Flag(names, tuple(on.split()), settings)


_TRAINING_OPTIONS = _Flag((), ("train",), {})
"""Where :func:`build_parser` puts the ``train`` options declared by
:class:`cauchylin_hf.training_options.CauchyOptions` (each declared there once, with its default
and help text)."""

_PARSERS: dict[str, Callable[[str], Any]] = {
    "steps": _steps,
    "positive": _positive,
    "positive_int": _positive_int,
    "count": _count,
    "share": _share,
    "calibration": _calibration,
    "step_choice": _step_choice,
}
"""The parsers a generated option names (:class:`cauchylin_hf.training_options.Flag`)."""


def _training_flags() -> list[_Flag]:
    """The ``train`` options generated from :mod:`cauchylin_hf.training_options`."""
    from .. import training_options  # standard library only

    return [
        _Flag((name,), ("train",), {**settings, **({"type": _PARSERS[kind]} if kind else {})})
        for name, kind, settings in training_options.command_line_flags()
    ]


# Every option of every command, once, in the order --help lists them.
_FLAGS = (
    _flag(
        "model",
        on="train",
        nargs="?",
        help="base checkpoint folder or a saved causal model (or use --from-config)",
    ),
    _flag("model", on="evaluate generate", help=f"{_CAUSAL} or a base folder"),
    _flag("model", on="predict", help=_CAUSAL),
    _flag(
        "--from-config",
        on="train",
        metavar="PRESET|CONFIG",
        help="build a new model: qwen2-tiny, qwen2-small, or a Hugging Face config.json",
    ),
    _flag("--prompt", on="predict generate", action="append", help="a prompt (repeatable)"),
    _flag("--prompts-file", on="predict generate", help="prompts, one per line (or JSONL 'text')"),
    _flag(
        "--data",
        "--train-file",
        on="train",
        dest="data",
        help="training data (.jsonl, .txt, .csv, .tsv)",
    ),
    _flag("--data", on="evaluate", required=True, help="dataset file (.jsonl, .txt, .csv, .tsv)"),
    _flag("--data", on="predict", help="a table (.csv, .tsv): one prompt per row"),
    _flag(
        "--template",
        on="train evaluate predict",
        help='a CSV row as text, e.g. "age {age}, '
        "bmi {bmi} -> progression {target}\" (default: the model's saved template, else every "
        "column as 'name value')",
    ),
    _flag(
        "--target",
        on="train evaluate predict",
        help="the target column of a table (default: "
        "'target' if there is one, else the last column); every cell of it must be a number",
    ),
    _flag("--eval-file", on="train", help="held-out data evaluated after training (same format)"),
    _flag(
        "--output-dir",
        on="demo train",
        default={"demo": "outputs/demo", "train": "cauchylin_output"},
        help={"demo": "plots and metrics go here", "train": "where to save"},
    ),
    _flag("--quick", on="demo", action="store_true", help="a shortened demo"),
    _flag("--steps", on="demo", type=_positive_int, help="training steps (default: the preset)"),
    _flag(
        "--overwrite",
        on="train",
        action="store_true",
        help="replace a model already in --output-dir (once training succeeded)",
    ),
    _flag(
        "--target-field",
        on="evaluate",
        help="the field of the target number (the words just "
        "before it; default: the last number of each text)",
    ),
    _flag(
        "--levels",
        on="predict",
        type=_real(0.0, 1.0, closed_low=False),
        nargs="+",
        default=_Read("cauchylin.levels", "PRINTED_LEVELS"),
        help="coverages of the central intervals (default %(default)s)",
    ),
    _flag(
        "--tokenizer",
        on=f"{_EVERY} verify",
        help={
            **dict.fromkeys(_EVERY.split(), "tokenizer folder (default: the model folder)"),
            "verify": "tokenizer folder (default: the base folder)",
        },
    ),
    _flag(
        "--vocab-size",
        on="train",
        type=_integer(lambda v: v >= 260, "an integer >= 260 (256 bytes and 4 special tokens)"),
        default=1024,
        help="--from-config: largest tokenizer vocabulary (default 1024)",
    ),
    _flag(
        "--target-weight",
        on="train",
        type=_real(0.0, math.inf, closed_low=True),
        metavar="W",
        help="count each text's last number (its target) W times in the regression loss, the "
        "numbers before it once (CauchyLMConfig.reg_target_weight; default: the model's, 1 for "
        "a new one)",
    ),
    _TRAINING_OPTIONS,  # the training options of cauchylin_hf.training_options, generated here
    # an explicit metavar: the choices (read from a file) are not listed when building
    _flag(
        "--mode",
        on="generate",
        choices=_Read("cauchylin.nn.mode_names", "MODE_NAMES"),
        metavar="MODE",
        help="inference mode: %(choices)s (default: standard, the training mode)",
    ),
    _flag("--temperature", on="generate", type=_real(0.0, math.inf, closed_low=True), default=1.0),
    _flag("--top-k", on="generate", type=_positive_int),
    _flag("--top-p", on="generate", type=float),
    _flag("--max-new-tokens", on="generate", type=_count, default=32),
    _flag(
        "--sentence-stop",
        on="generate",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="stop a row after a token that ends a sentence (., !, ? or a newline; default on)",
    ),
    _flag("--stop", on="generate", action="append", help="stop string (repeatable)"),
    _flag(
        "--decimals",
        on="predict generate",
        type=_count,
        help={
            "predict": "decimals of the "
            "printed numbers (default: those of the training data's field)",
            "generate": "decimals of generated numbers (default: those of the training data's field)",
        },
    ),
    _flag("--text", on="verify", action="append", help="a text to read (repeatable)"),
    _flag("--tolerance", on="verify", type=float, default=1e-4),
    _flag(
        "--batch-size",
        on=_EVERY,
        type=_positive_int,
        default={"train": 8, "evaluate": 16, "predict": 32, "generate": 8},
    ),
    _flag(
        "--max-length",
        on="train evaluate",
        type=_positive_int,
        help={"train": "cut examples to this many tokens", "evaluate": None},
    ),
    _flag(
        "--keep-checkpoints",
        on="train",
        action="store_true",
        help="keep the checkpoints once the model is saved (default: removed then)",
    ),
    _flag(
        "--resume-from-checkpoint",
        on="train",
        nargs="?",
        const=True,
        metavar="CHECKPOINT",
        help="continue an interrupted training from its latest checkpoint in --output-dir (or "
        "from CHECKPOINT), with the same command: same optimizer, schedule and data order",
    ),
    _flag(
        "--train-backbone",
        on="train",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="train the backbone too (default: yes for --from-config and for a saved model "
        "that trained it, no for a base checkpoint)",
    ),
    _flag(
        "--seed",
        on="demo train evaluate generate",
        type=_seed,
        default={"demo": None, "train": 0, "evaluate": 0, "generate": 0},
        help={
            "demo": "seed (default 0)",
            "train": None,
            "evaluate": "seed of the samples that the metrics of large data read (default 0)",
            "generate": None,
        },
    ),
    _flag("--no-plots", on="demo", action="store_true", help="do not write the figures"),
    _flag(
        "--json",
        on="evaluate predict generate verify",
        action="store_true",
        help={
            "evaluate": "print the metrics as JSON",
            "predict": "one JSON object per prompt",
            "generate": "one JSON object per prompt",
            "verify": "print the report as JSON",
        },
    ),
    _flag(
        "--raw-intervals",
        on="evaluate predict",
        action="store_true",
        help="the model's Cauchy "
        "intervals, not the calibrated ones (default: calibrated where the model was "
        "calibrated for the number's context and the level)",
    ),
    _flag(
        "--member",
        on="evaluate predict",
        action="append",
        metavar="MODEL",
        help="another causal model folder trained alike (another train --seed), repeatable: "
        "the numbers are the ensemble's, the models' Cauchy laws averaged in the value space; "
        "its intervals are calibrated only with --calibration-file",
    ),
    _flag(
        "--calibration-file",
        on="evaluate predict",
        metavar="FILE",
        help="texts or a table (the model's template) that none of the models trained on: the "
        "target intervals are calibrated on its target numbers, in place of each model's own "
        "calibration (with --member, the only calibration of the ensemble)",
    ),
    _flag("base", on="verify", help="base checkpoint folder"),
    _flag(
        "--threads",
        on=_TORCH,
        type=_positive_int,
        help="torch CPU threads (default: no more than the free cores, the cores minus the "
        "load average; a note when that lowers torch's count)",
    ),
    _flag(
        "--device",
        on="train evaluate predict generate",
        default="auto",
        help="where the model runs: auto (default: a GPU or other accelerator where one is "
        "present, else the CPU), cpu, cuda, cuda:1, ... (train: auto, cpu, or the first "
        "accelerator)",
    ),
    _flag(
        "--dataloader-workers",
        on="train evaluate",
        type=_count,
        default=0,
        help="worker processes that read and encode the batches ahead of the model (the "
        "Trainer's dataloader_num_workers; default 0: the main process)",
    ),
    _flag(
        "--no-progress",
        on=_TORCH,
        action="store_true",
        help="hide progress bars (they are shown only when stderr is a terminal)",
    ),
)


def _add_flag(
    parser: argparse.ArgumentParser, groups: dict[str, Any], flag: _Flag, command: str
) -> None:
    """Add ``flag`` to ``command``'s parser; options with the same ``group`` exclude each other."""
    settings = {
        key: value[command] if isinstance(value, dict) else value
        for key, value in flag.settings.items()
    }
    group = settings.pop("group", None)
    if group is not None:
        if group not in groups:
            groups[group] = parser.add_mutually_exclusive_group()
        parser = groups[group]
    parser.add_argument(*flag.names, **settings)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``cauchylin-lm`` (one subparser per command).

    Building and using it imports no third-party package (``generate``'s mode list aside).

    Returns:
        The parser; ``args.command`` names the command to run (:func:`main` runs it).

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
    # the width each HelpFormatter would read from the terminal, read once (argparse builds a
    # formatter for every option it adds)
    formatter = functools.partial(
        argparse.HelpFormatter, width=shutil.get_terminal_size().columns - 2
    )
    parser = _Parser(
        prog=PROG,
        description="Causal language models with Cauchy heads on Hugging Face decoders.",
        formatter_class=formatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    commands = {
        name: sub.add_parser(name, help=short, description=long, formatter_class=formatter)
        for name, (short, long) in _COMMANDS.items()
    }
    groups: dict[str, dict[str, Any]] = {name: {} for name in commands}
    for flag in (f for g in _FLAGS for f in (_training_flags() if g is _TRAINING_OPTIONS else [g])):
        for command in flag.on:
            _add_flag(commands[command], groups[command], flag, command)
    return parser
