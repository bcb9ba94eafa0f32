"""The commands of ``cauchylin-lm``: ``demo``, ``train``, ``evaluate``, ``predict``, ``generate``,
``verify``.

The console script is :func:`cauchylin_lm.main`: it parses the arguments
(:func:`cauchylin_lm.build_parser`, re-exported here) without importing torch or transformers,
then calls :func:`run`. Run ``cauchylin-lm --help`` (or ``python -m cauchylin_hf.app.cli
--help``) and ``cauchylin-lm COMMAND --help``. Every command works offline on local folders and
files:

* ``demo`` — the embedded demo (:mod:`cauchylin_hf.app.demo`), no arguments needed.
* ``train --from-config qwen2-tiny --data F`` — a model from nothing: a byte-level BPE tokenizer
  trained on the data and a random backbone (:mod:`cauchylin_hf.app.scratch`), trained whole;
  ``train MODEL --data F`` attaches the causal heads to a local base checkpoint (e.g. a
  downloaded Qwen2.5-0.5B folder; backbone frozen by default) or continues a saved causal model.
  Data: JSONL with a ``"text"`` field, plain text (one example per line) or a CSV table written
  as text by a template (:mod:`cauchylin_hf.app.tables`; every cell of its target column must be
  a number). Before training it prints the target and the first text; after training, the
  target's median absolute error beside that of the training median, with a warning when the
  predictions barely vary (:func:`cauchylin_hf.predict.learning_check`). The model, its
  tokenizer and ``data_format.json`` (the template, the decimals of each field,
  :mod:`cauchylin_hf.app.precision`, and the training targets' median) are written to a
  temporary folder that replaces ``--output-dir`` only once everything succeeded; a folder that
  already holds a model is replaced only with ``--overwrite``.
* ``evaluate MODEL --data F`` — the held-out metrics (token accuracy, ``<NUM>`` F1, regression
  errors; :func:`cauchylin_hf.training.evaluate_model`), the errors of the predicted target
  numbers (:func:`cauchylin_hf.predict.number_metrics`) and the same learning check.
* ``predict MODEL --prompt TEXT`` (or ``--data table.csv``) — the next number after each prompt:
  median, central intervals and ``P(<NUM>)`` (:func:`cauchylin_hf.predict.predict_values`). A
  prompt that ends without the space the model expects before a number is read with it (a note
  says so), as ``generate`` would write it.
* ``generate MODEL --prompt TEXT`` — text with numbers, in any inference mode; numbers written
  with the decimals of the training data, generation stopped at the end of the sentence.
* ``verify BASE`` — the initialisation-equivalence report (``loc_S`` equals the base logits).

Errors a user can fix (a missing folder or file, a model without a decoder, an empty dataset, a
bad option, an unreadable checkpoint, a table whose target is not numeric, a text longer than
the model's context, a full disk) print one ``cauchylin-lm COMMAND: error: ...`` line and exit
with status 2; nothing is written then. Ctrl-C (exit status 130) and SIGTERM (143) clean up the
same way. Progress bars are shown only when standard error is a terminal. Every file ``train``
writes gets the permissions the umask gives new files.
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple, cast

from cauchylin_lm import PROG, SCHEDULERS, build_parser

__all__ = [
    "DATA_FORMAT_FILE",
    "SCHEDULERS",
    "build_parser",
    "load_causal_model",
    "main",
    "run",
]

DATA_FORMAT_FILE = "data_format.json"
"""The file ``train`` writes next to the model: the table template and target column (or None),
the decimals of each field (:class:`~cauchylin_hf.app.precision.NumberPrecision`) and the median
of the training targets (the baseline of ``evaluate``)."""

_SENTENCE_ENDS = (".", "!", "?")
_CHECK_TEXTS = 256  # training texts the learning check reads when there is no --eval-file


class CliError(Exception):
    """A user error: printed as one line, exit status 2."""


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that the same cleanup runs (a KeyboardInterrupt subclass:
    code that cleans up after Ctrl-C cleans up after it too)."""


# --------------------------------------------------------------------------------------------
# Loading


def _is_causal_folder(path: Path) -> bool:
    config = path / "config.json"
    if not config.is_file():
        return False
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("model_type") == "cauchy_lm"


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
        CliError: the folder does not exist, has no tokenizer, does not hold a decoder-only
            causal LM, or its files cannot be read (a truncated ``model.safetensors``, a broken
            ``config.json``).

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
    from safetensors import SafetensorError

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
    except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CliError(
            f"could not load {str(folder)!r} (a local decoder-only causal LM checkpoint is "
            f"needed): {first}"
        ) from exc
    model.eval()
    return model, ntok


def _data_format(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``data_format.json`` of a model folder (empty for a folder without one)."""
    path = Path(folder) / DATA_FORMAT_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: JSON, UTF-8, huge ints
        message = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise CliError(f"{path} cannot be read: {message}") from None
    if not isinstance(data, dict):
        raise CliError(f"{path} must hold a JSON object")
    return data


def _precision(folder: str | os.PathLike[str]) -> Any:
    from .precision import NumberPrecision

    saved = _data_format(folder).get("precision")
    if saved is None:
        return NumberPrecision()
    try:
        return NumberPrecision.from_dict(saved)
    except ValueError as exc:
        raise CliError(f"{Path(folder) / DATA_FORMAT_FILE}: {exc}") from None


def _saved_median(folder: str | os.PathLike[str]) -> float | None:
    """The training targets' median recorded by ``train`` (None for a folder without one)."""
    value = _data_format(folder).get("target_median")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise CliError(
            f"{Path(folder) / DATA_FORMAT_FILE}: 'target_median' must be a finite number, got "
            f"{str(value)[:40]!r}"
        )
    return float(value)


# --------------------------------------------------------------------------------------------
# Data: text files, JSONL, and CSV tables through a template


class _Data(NamedTuple):
    """Texts read from a data file (or a table's prompts), with the table and its template."""

    texts: Sequence[str]  # a list, or a TextColumn (Arrow on disk) for a table or a dataset
    template: Any  # TableTemplate | None
    table: Any  # Table | None
    path: str

    def where(self, i: int) -> str:
        """Where text ``i`` comes from (a table's row and line, or the text's number)."""
        if self.table is not None:
            return cast(str, self.table.where(i))
        return f"{self.path}, text {i + 1}"


def _data_path(path: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise CliError(f"dataset file not found: {path!r}")
    return p


def _table_template(args: argparse.Namespace, table: Any, saved: dict[str, Any]) -> Any:
    """The template of a table: ``--template``, else the model's saved one, else the default."""
    from .tables import TableTemplate

    target = getattr(args, "target", None) or saved.get("target")
    template = getattr(args, "template", None) or saved.get("template")
    if template is None:
        return TableTemplate.default(table.columns, target)
    if target is None:
        target = "target" if "target" in table.columns else table.columns[-1]
    tt = TableTemplate(template, target)
    numbers = tt.literal_numbers()
    if numbers and getattr(args, "template", None):  # noted once, when the template is given
        _note(
            args,
            f"the template's own text holds the numbers {numbers}; the model reads them as "
            "values (write a column name like s1 as s₁, or without digits)",
        )
    return tt


def _read_data(
    args: argparse.Namespace, path: str, saved: dict[str, Any], *, prompts: bool = False
) -> _Data:
    """Texts (or, with ``prompts``, the prompts of a table), with the table and its template.

    For texts of a table (training, evaluation), every target cell must be a number.
    """
    from ..data import read_texts
    from ..streaming import load_text_column
    from .tables import is_table_file, read_table

    if Path(path).is_dir() and not prompts:  # a datasets folder (save_to_disk): read as it trains
        return _Data(load_text_column(path), None, None, path)
    p = _data_path(path)
    if is_table_file(p) and not prompts:  # texts to train or evaluate on: streamed, not held
        return _stream_table(args, p, saved, path)
    if is_table_file(p):
        table = read_table(p)
        tt = _table_template(args, table, saved)
        if prompts:
            return _Data(tt.prompts(table), tt, table, path)
        try:
            tt.target_values(table)
        except ValueError as exc:
            hint = "" if getattr(args, "target", None) else "; pick the target with --target COLUMN"
            raise CliError(f"{exc}{hint}") from None
        return _Data(tt.texts(table), tt, table, path)
    if getattr(args, "template", None):
        raise CliError(f"--template needs a table (.csv or .tsv file), got {path!r}")
    texts = read_texts(p)
    _note_float32_misses(args, texts, path)
    return _Data(texts, None, None, path)


def _stream_table(args: argparse.Namespace, p: Path, saved: dict[str, Any], path: str) -> _Data:
    """The texts of a table, checked and kept in Arrow on disk (never all in memory)."""
    from .table_stream import stream_table_texts
    from .tables import Table

    try:
        table, tt = stream_table_texts(
            p, lambda cols: _table_template(args, Table(cols, [], p), saved)
        )
    except ValueError as exc:
        if not str(exc).startswith("target column") or getattr(args, "target", None):
            raise
        raise CliError(f"{exc}; pick the target with --target COLUMN") from None
    return _Data(table.texts, tt, table, path)


def _note_float32_misses(args: argparse.Namespace, texts: list[str], path: str) -> None:
    """A note on numbers of free text that float32 cannot hold (a table refuses such targets)."""
    from ..numbers import out_of_float32_range

    misses = [(i, s) for i, text in enumerate(texts) for s in out_of_float32_range(text)]
    if misses:
        i, spelling = misses[0]
        _note(
            args,
            f"{len(misses)} number(s) of {path} lie outside float32's range, which the model "
            f"reads (the first: {spelling!r} in text {i + 1}): one too large stays text, one "
            "too small reads as 0; rescale them if they matter",
        )


def _table_truth(data: _Data) -> list[float | None]:
    """The target cells of a table of prompts, as numbers (None where missing or not a number)."""
    from ..numbers import parse_number
    from .tables import not_a_number

    if data.table is None or data.template.target not in data.table.columns:
        return [None] * len(data.texts)
    cells = [row.get(data.template.target, "") for row in data.table.rows]
    return [parse_number(c) if not_a_number(c) is None else None for c in cells]


def _context_length(model: Any) -> int | None:
    """The longest sequence the model's positions allow (``max_position_embeddings``)."""
    value = getattr(model.config, "max_position_embeddings", None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _encode(model: Any, ntok: Any, data: _Data, max_length: int | None) -> Any:
    """The dataset of ``data``'s texts, refused when a text is longer than the model's context
    (a learned-position base such as GPT-2 would fail with an ``IndexError``)."""
    from ..data import NumericDataset
    from ..streaming import STATS_ROWS, TextColumn, as_numeric_dataset

    context = _context_length(model)
    if isinstance(data.texts, TextColumn) and len(data.texts) > STATS_ROWS:
        # encoded as training reads it: a text too long is refused when it is read
        return as_numeric_dataset(
            data.texts,
            ntok,
            name=data.path,
            max_length=max_length,
            max_tokens=context,
            where=data.where,
        )
    dataset = NumericDataset.from_texts(data.texts, ntok, max_length=max_length, name=data.path)
    if context is None:
        return dataset
    lengths = [int(dataset[i]["input_ids"].numel()) for i in range(len(dataset))]
    over = [i for i, n in enumerate(lengths) if n > context]
    if over:
        i = over[0]
        raise CliError(
            f"{data.where(i)} is {lengths[i]} tokens long, longer than the model's context of "
            f"{context} positions (max_position_embeddings); {len(over)} of {len(lengths)} "
            f"texts are: pass --max-length {context} to cut them, or shorten them"
        )
    return dataset


# --------------------------------------------------------------------------------------------
# Threads, progress, messages


def _note(args: argparse.Namespace, message: str) -> None:
    print(f"{PROG} {args.command}: note: {message}", file=sys.stderr)


def _warn(args: argparse.Namespace, message: str) -> None:
    print(f"{PROG} {args.command}: warning: {message}", file=sys.stderr)


def _progress(args: argparse.Namespace) -> bool:
    """Progress bars: only on a terminal (a log file or a pipe gets none), never with
    ``--no-progress``."""
    return not getattr(args, "no_progress", False) and sys.stderr.isatty()


def _free_cores() -> tuple[int, float]:
    """``(cores this process may use, 1-minute load average)``."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = 0.0
    return cores, load


def _set_threads(args: argparse.Namespace) -> None:
    """``--threads N``: ``torch.set_num_threads(N)``; without it, a note when the machine is busy."""
    import torch

    threads = getattr(args, "threads", None)
    if threads is not None:
        torch.set_num_threads(threads)
        return
    cores, load = _free_cores()
    free = max(1, math.floor(cores - load + 0.5))
    if torch.get_num_threads() > free:
        _note(
            args,
            f"torch uses {torch.get_num_threads()} threads but only about {free} of {cores} "
            f"cores are free (load {load:.1f}); on a busy machine each step can be many times "
            f"slower: pass --threads {free}",
        )


def _shorten(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------------------------
# The output folder: checked first, written to a temporary folder, swapped in at the end


def _check_output_dir(args: argparse.Namespace) -> tuple[Path, Any]:
    """The output folder and its state (checked again at the swap): refused when it is a file,
    a non-empty folder that is not a model, or a model without ``--overwrite``. With
    ``--overwrite``, a folder with entries that are not the model's gets a note naming what is
    replaced and what is kept."""
    from ..atomic_save import folder_state

    path, out = args.output_dir, Path(args.output_dir)
    if out.exists() and not out.is_dir():
        raise CliError(f"--output-dir {path!r} is a file, not a folder")
    seen = folder_state(out)
    if seen.entries:
        if not _is_causal_folder(out):
            raise CliError(
                f"--output-dir {path!r} is a non-empty folder that does not hold a cauchylin "
                "model; choose a new folder"
            )
        if not args.overwrite:
            raise CliError(
                f"--output-dir {path!r} already holds a trained model; pass --overwrite to "
                "replace it (it is replaced only once the new training succeeded), or choose "
                "another folder"
            )
        replaced = sorted(name for name in seen.entries if _is_model_entry(name))
        kept = sorted(name for name in seen.entries if not _is_model_entry(name))
        if kept:  # a folder of the model's files alone needs no word
            _note(
                args,
                f"--overwrite: the model's files in {path!r} ({_listed(replaced)}) are "
                f"replaced once the training succeeded; its {len(kept)} other entries "
                f"({_listed(kept)}) are kept",
            )
    return out, seen


def _listed(names: list[str], shown: int = 12) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _note_leftovers(args: argparse.Namespace, out: Path) -> None:
    """Point at the hidden folders a killed run (SIGKILL, power loss) left next to ``out``."""
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        return
    staged = sorted(parent.glob(f".{out.name}.*.tmp"))  # staged_folder's names
    old = sorted(parent.glob(f".{out.name}.*.old"))
    if old and not out.exists():
        _note(
            args,
            f"{str(out)!r} is missing but {str(old[-1])!r} holds the model it had (a run was "
            f"killed while swapping the new model in): mv {old[-1]} {out} to get it back",
        )
    leftovers = staged + (old if out.exists() else [])
    if leftovers:
        _note(
            args,
            f"{len(leftovers)} hidden folder(s) next to {str(out)!r} were left by a run that "
            f"was killed: {', '.join(str(x) for x in leftovers)}; delete them once no other "
            "training writes there",
        )


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _share(folder: Path) -> None:
    """Give every file and folder under ``folder`` the permissions the umask gives new ones
    (temporary files, e.g. of an atomic save, are created private)."""
    mask = _umask()
    folder.chmod(0o777 & ~mask)
    for path in folder.rglob("*"):
        if path.is_symlink():
            continue
        path.chmod((0o777 if path.is_dir() else 0o666) & ~mask)


@contextmanager
def _signals_deferred() -> Iterator[list[int]]:
    """Hold Ctrl-C and SIGTERM while the block runs; the signals that arrived are listed."""
    received: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        received.append(signum)

    previous: dict[signal.Signals, Any] = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, hold)
    except ValueError:  # not the main thread: signals reach the main thread only
        pass
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _is_model_entry(name: str) -> bool:
    """``stale`` of :func:`~cauchylin_hf.atomic_save.staged_folder`: the files of the old model
    (weights, configs, tokenizer, ``data_format.json``) go; every other entry is kept."""
    from ..checkpoint import is_checkpoint_file

    return name == DATA_FORMAT_FILE or is_checkpoint_file(name)


@contextmanager
def _staging(dest: Path, seen: Any) -> Iterator[Path]:
    """A hidden folder beside ``dest`` that replaces it when the block succeeds
    (:func:`cauchylin_hf.atomic_save.staged_folder`: the old model's files go, other entries
    stay; ``dest`` must still be as ``seen``, else the new model is kept beside it).

    On any error, Ctrl-C or SIGTERM the hidden folder is removed and ``dest`` is left as it was.
    Before the swap the new files get the umask's permissions; a Ctrl-C or SIGTERM that arrives
    during the swap is held until the swap (and the removal of the old folder) is done, then
    raised, saying that the new model was saved.
    """
    from ..atomic_save import FolderChangedError, staged_folder

    folder = staged_folder(dest, stale=_is_model_entry, seen=seen)
    try:
        staging = folder.__enter__()
    except OSError as exc:
        raise CliError(f"cannot write next to {str(dest)!r}: {exc}") from None
    try:
        yield staging
        _share(staging)
    except BaseException:
        if not folder.__exit__(*sys.exc_info()):  # removes the hidden folder
            raise
        return
    with _signals_deferred() as received:
        try:
            folder.__exit__(None, None, None)
        except FolderChangedError as exc:
            raise CliError(
                f"--output-dir {str(dest)!r} was changed by another program during training "
                f"({exc.reason}); it was left as it is, and the new model was saved to "
                f"{exc.kept!r} instead"
            ) from None
    if received:
        stop = _Terminated if signal.SIGTERM in received else KeyboardInterrupt
        raise stop(f"the new model was saved to {dest} before stopping")


def _save_failure(out: Path, exc: BaseException, existed: bool) -> str:
    """One line for a failed save: a full disk says so."""
    text = str(exc).strip()
    first = text.splitlines()[0][:300] if text else type(exc).__name__
    kept = "the model already there is unchanged" if existed else "nothing was written"
    full = (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or any(
        s in text for s in ("No space left", "os error 28", "StorageFull", "code: 28")
    )
    if full:
        return (
            f"no space left on the device to save the model to {str(out)!r} ({first}); {kept}: "
            "free some space and train again"
        )
    return f"could not save the model to {str(out)!r}: {first}; {kept}"


# --------------------------------------------------------------------------------------------
# Metrics and numbers


def _print_metrics(metrics: dict[str, float]) -> None:
    width = max(len(k) for k in metrics)
    for key in sorted(metrics):
        print(f"{key.ljust(width)}  {metrics[key]:.6g}")


def _target_field(tt: Any, args: argparse.Namespace) -> str | None:
    """The target field of :func:`~cauchylin_hf.predict.number_predictions` (None: the last
    number of each text): ``--target-field``, else, when a template writes something after the
    target, the field of the template's text just before the target."""
    from ..predict import field_of

    given = getattr(args, "target_field", None)
    if given is not None or tt is None or tt.target_is_last():
        return cast(str | None, given)
    return field_of(tt.text_before_target())


def _target_name(data: _Data, field: str | None) -> str:
    if data.template is not None:
        return f"column {data.template.target!r}"
    return f"the last {field!r} number of each text" if field else "the last number of each text"


def _target_report(
    args: argparse.Namespace,
    model: Any,
    ntok: Any,
    data: _Data,
    field: str | None,
    baseline: float | None,
    where: str,
) -> dict[str, float]:
    """The number metrics of ``data`` and the learning check: the target's median absolute
    error beside the baseline's (one line), warnings when nothing was learnt."""
    from ..predict import learning_check, number_metrics, number_predictions

    preds = number_predictions(
        model,
        ntok,
        data.texts,
        target_field=field,
        batch_size=args.batch_size,
        calibrated=not getattr(args, "raw_intervals", False),
    )
    metrics = number_metrics(preds)
    keep = preds.is_target
    if not bool(keep.any()):
        return metrics
    predicted, true = preds.prediction.median[keep], preds.true[keep]
    if not bool(predicted.isfinite().all()):
        return metrics
    guess = "the training median"
    if baseline is None:  # a model folder from elsewhere: the evaluated targets' own median
        from cauchylin.metrics import quantiles

        baseline = quantiles(true, (0.5,))[0]
        guess = "their own median (the model folder records no training median)"
    check = learning_check(predicted, true, baseline)
    metrics["target/mdae_baseline"] = check.baseline_mdae
    metrics["target/spread_ratio"] = check.spread_ratio
    name = data.template.target if data.template is not None else "target"
    print(
        f"{name} on {check.count} {where}: median absolute error {check.mdae:.4g}; predicting "
        f"{guess} ({check.baseline:.4g}) for every row: {check.baseline_mdae:.4g}",
        file=sys.stderr if getattr(args, "json", False) else sys.stdout,
    )
    for message in check.warnings(name):
        _warn(args, message)
    return metrics


def _explain(args: argparse.Namespace, metrics: dict[str, float]) -> None:
    """Notes on what can look like a fault: ``nan`` values and a negative loss."""
    nan = sorted(k for k, v in metrics.items() if isinstance(v, float) and math.isnan(v))
    if nan:
        shown = ", ".join(nan[:3]) + (f" and {len(nan) - 3} more" if len(nan) > 3 else "")
        _note(
            args,
            f"nan ({shown}) marks a value undefined for its group, not a failure: a rank "
            "correlation (spearman) needs at least two numbers whose predictions and true "
            "values are not all equal (a field seen once has none)",
        )
    loss = metrics.get("eval/loss")
    if loss is not None and loss < 0:
        _note(
            args,
            "eval/loss is negative, which is fine: eval/loss = eval/cls_loss + reg_weight * "
            "eval/reg_loss, and eval/reg_loss is the Cauchy negative log-density of the "
            "numbers, log(pi scale_Y) + log(1 + z^2), below 0 when the predicted scale is "
            "under 1/pi (sharp predictions)",
        )


def _write(precision: Any, value: float, prefix: str, decimals: int | None) -> str:
    if not math.isfinite(value):
        return "inf" if value > 0 else "-inf"
    return cast(str, precision.write(value, prefix, decimals))


def _check_decimals(args: argparse.Namespace) -> None:
    from .precision import check_decimals

    if args.decimals is not None:
        check_decimals(args.decimals, "--decimals")


# --------------------------------------------------------------------------------------------
# Commands


def cmd_demo(args: argparse.Namespace) -> int:
    """``demo``: run :func:`cauchylin_hf.app.demo.run_demo`."""
    from .demo import FULL, QUICK, run_demo, with_overrides

    settings = with_overrides(QUICK if args.quick else FULL, max_steps=args.steps, seed=args.seed)
    _set_threads(args)
    run_demo(
        args.output_dir,
        settings=settings,
        progress=_progress(args),
        plots=not args.no_plots,
    )
    return 0


def _warmup_steps(args: argparse.Namespace, n_texts: int) -> int:
    """``--warmup-steps``, or ``ceil(--warmup-ratio * total steps)`` (single process)."""
    if args.warmup_ratio is None:
        return int(args.warmup_steps or 0)
    if args.max_steps > 0:
        total = args.max_steps
    else:
        total = math.ceil(args.epochs * math.ceil(n_texts / args.batch_size))
    return math.ceil(args.warmup_ratio * total)


def _describe(data: _Data, field: str | None, targets: list[float]) -> None:
    """Before training: which number is the target, and how the first row reads as text."""
    from cauchylin.metrics import quantiles

    from ..streaming import STATS_ROWS

    median = f"median {quantiles(_tensor(targets), (0.5,))[0]:.6g} over " if targets else "none in "
    of = f"a sample of {len(targets)} of " if len(data.texts) > STATS_ROWS else ""
    print(f"target: {_target_name(data, field)} ({median}{of}{len(data.texts)} texts)")
    first = "row 1 as text" if data.table is not None else "text 1"
    print(f"{first}: {_shorten(data.texts[0])}", flush=True)


def _tensor(values: Sequence[float]) -> Any:
    import torch

    return torch.tensor(values, dtype=torch.float64)


def _report_readouts(result: Any) -> None:
    """One line on the solved readouts and one on the calibration, after training."""
    solved = result.readouts
    if solved is not None and solved.contexts:
        print(
            f"read the numbers of {solved.kept} of {len(solved.contexts)} contexts with a "
            "readout solved on the training rows (where it reads them better than the shared "
            "head)",
            flush=True,
        )
    cal = result.calibration
    if cal is not None:
        rows = max((int(c["count"]) for c in cal.contexts), default=0)
        if rows:
            levels = f"{round(100 * cal.levels[0])}% to {round(100 * cal.levels[-1])}%"
            print(
                f"calibrated the intervals ({len(cal.levels)} levels, {levels}) on "
                f"{result.calibration_size} held-out rows never trained on",
                flush=True,
            )
        else:
            print(
                f"the {result.calibration_size} held-out rows hold too few numbers of any one "
                "context to calibrate on: the intervals are the model's Cauchy ones",
                flush=True,
            )


def cmd_train(args: argparse.Namespace) -> int:
    """``train``: a model from a config or a checkpoint, trained on a dataset file, saved."""
    from safetensors import SafetensorError

    from cauchylin.conformal import calibration_holdout
    from cauchylin.metrics import quantiles

    from ..predict import target_numbers
    from ..streaming import STATS_ROWS, text_sample
    from ..training import train
    from .precision import NumberPrecision

    if (args.model is None) == (args.from_config is None):
        raise CliError("pass a MODEL folder or --from-config PRESET|config.json (one of them)")
    if args.data is None:
        raise CliError("no training data: pass --data FILE (.jsonl, .txt, .csv)")
    if args.from_config is not None and args.tokenizer is not None:
        raise CliError("--from-config trains its own tokenizer: leave out --tokenizer")
    out, seen = _check_output_dir(args)
    _note_leftovers(args, out)
    saved = _data_format(args.model) if args.model is not None else {}
    data = _read_data(args, args.data, saved)
    held: _Data | None = None
    if args.eval_file:
        held = _read_data(args, args.eval_file, _format_record(data.template, None, None))
    _set_threads(args)

    sample = text_sample(data.texts, STATS_ROWS, seed=args.seed)  # tokenizer, median, decimals
    if args.from_config is not None:
        from .scratch import build_from_config

        model, ntok = build_from_config(
            args.from_config,
            sample,
            vocab_size=args.vocab_size,
            seed=args.seed,
            freeze_backbone=args.train_backbone is False,
        )
        what = f"a new {args.from_config} model (tokenizer of {len(ntok)} tokens)"
    else:
        model, ntok = load_causal_model(args.model, tokenizer=args.tokenizer)
        trainable = args.train_backbone
        if trainable is None:  # a saved causal model keeps its setting; a base stays frozen
            trainable = _is_causal_folder(Path(args.model)) and not model.config.freeze_backbone
        model.set_backbone_trainable(bool(trainable))
        model.config.freeze_backbone = not trainable
        what = str(args.model)
    train_ds = _encode(model, ntok, data, args.max_length)
    eval_ds = _encode(model, ntok, held, args.max_length) if held is not None else None
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    backbone = "frozen" if model.config.freeze_backbone else "trainable"
    try:
        held_out = calibration_holdout(len(data.texts), args.calibration)
    except ValueError as exc:
        raise CliError(f"--calibration {args.calibration}: {exc}") from None
    calibrating = f" ({held_out} more held out to calibrate the intervals on)" if held_out else ""
    print(
        f"training {n_train / 1e6:.3f}M parameters of {what} (backbone {backbone}) on "
        f"{len(data.texts) - held_out} texts of {args.data}{calibrating}",
        flush=True,
    )
    field = _target_field(data.template, args)
    targets = target_numbers(sample, target_field=field)
    _describe(data, field, targets)
    median = quantiles(_tensor(targets), (0.5,))[0] if targets else None
    extra: dict[str, Any] = {"warmup_steps": _warmup_steps(args, len(data.texts))}
    if args.lr_scheduler is not None:
        extra["lr_scheduler_type"] = args.lr_scheduler
    precision = NumberPrecision.from_texts(sample)
    existed = out.exists()
    try:
        with _staging(out, seen) as staging:
            result = train(
                model,
                ntok,
                train_ds,
                eval_ds,
                staging,
                max_steps=args.max_steps,
                num_train_epochs=args.epochs,
                batch_size=args.batch_size,
                learning_rate=args.learning_rate,
                logging_steps=args.logging_steps,
                seed=args.seed,
                progress=_progress(args),
                readouts=not args.no_readouts,
                calibration=args.calibration,
                **extra,
            )
            if result.global_step < 1:
                raise CliError("training took no step: raise --epochs or --max-steps")
            _report_readouts(result)
            record = _format_record(data.template, precision, median)
            text = json.dumps(record, indent=2, ensure_ascii=False) + "\n"
            (staging / DATA_FORMAT_FILE).write_text(text, encoding="utf-8")
            metrics = dict(result.metrics or {})
            if median is not None and model.config.num_token_id is not None:
                if held is not None:
                    checked, where = held, "held-out texts"
                else:  # no held-out data: the check still tells a flat model apart
                    n = min(len(data.texts), _CHECK_TEXTS)
                    checked, where = data._replace(texts=data.texts[:n]), "training texts"
                field_held = _target_field(checked.template, args)
                metrics.update(
                    _target_report(args, model, ntok, checked, field_held, median, where)
                )
    except SafetensorError as exc:
        raise CliError(_save_failure(out, exc, existed)) from None
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        raise CliError(_save_failure(out, exc, existed)) from None
    print(f"saved the model, its tokenizer and {DATA_FORMAT_FILE} to {out}")
    if metrics and held is not None:
        _print_metrics(metrics)
    return 0


def _format_record(tt: Any, precision: Any, median: float | None) -> dict[str, Any]:
    return {
        "template": None if tt is None else tt.template,
        "target": None if tt is None else tt.target,
        "precision": None if precision is None else precision.to_dict(),
        "target_median": median,
    }


def cmd_evaluate(args: argparse.Namespace) -> int:
    """``evaluate``: held-out metrics and target-number errors of a model on a dataset file."""
    from ..training import evaluate_model

    saved = _data_format(args.model)
    median = _saved_median(args.model)
    data = _read_data(args, args.data, saved)
    _set_threads(args)
    model, ntok = load_causal_model(args.model, tokenizer=args.tokenizer)
    dataset = _encode(model, ntok, data, args.max_length)
    metrics = evaluate_model(
        model,
        ntok,
        dataset,
        batch_size=args.batch_size,
        max_length=args.max_length,
        seed=args.seed,
        progress=_progress(args),
    )
    if model.config.num_token_id is not None:
        field = _target_field(data.template, args)
        metrics.update(_target_report(args, model, ntok, data, field, median, "texts"))
    if args.json:
        print(json.dumps(metrics, indent=2))
    else:
        _print_metrics(metrics)
    _explain(args, metrics)
    return 0


def _prompts(args: argparse.Namespace, saved: dict[str, Any]) -> tuple[list[str], _Data | None]:
    from ..data import read_texts
    from ..tokenizer import check_text

    prompts = list(args.prompt or [])
    for i, prompt in enumerate(prompts):  # bytes that are not UTF-8 arrive as lone surrogates
        check_text(prompt, f"--prompt {i + 1}")
    table: _Data | None = None
    if getattr(args, "prompts_file", None):
        prompts += read_texts(_data_path(args.prompts_file))
    if getattr(args, "data", None):
        table = _read_data(args, args.data, saved, prompts=True)
        if table.template is None:
            raise CliError(f"--data must be a table (.csv or .tsv), got {args.data!r}")
        prompts += table.texts
    elif getattr(args, "template", None):
        raise CliError("--template needs --data TABLE")
    if not prompts:
        raise CliError(
            "no prompt: pass --prompt TEXT (repeatable), --prompts-file FILE"
            + (" or --data TABLE" if hasattr(args, "data") else "")
        )
    return prompts, table


def _read_on(
    args: argparse.Namespace, model: Any, ntok: Any, prompts: list[str], pred: Any
) -> list[str]:
    """The prefix each number is read after: a prompt that ends without a separator where the
    model expects one before a number (``"... -> price"``) is read with a space added, as
    ``generate`` would write it; ``pred`` is updated in place."""
    from ..predict import predict_values

    prefixes = list(prompts)
    doubtful = [
        i
        for i, text in enumerate(prompts)
        if text and not text[-1].isspace() and float(pred.p_num[i]) < 0.5
    ]
    if not doubtful:
        return prefixes
    spaced = predict_values(
        model,
        ntok,
        [prompts[i] + " " for i in doubtful],
        levels=pred.levels,
        batch_size=args.batch_size,
        calibrated=not args.raw_intervals,
    )
    fixed = []
    for j, i in enumerate(doubtful):
        if float(spaced.p_num[j]) <= float(pred.p_num[i]):
            continue
        for name in (
            "median",
            "loc",
            "scale",
            "p_num",
            "lower",
            "upper",
            "calibrated",
            "calibration_count",
        ):
            getattr(pred, name)[i] = getattr(spaced, name)[j]
        prefixes[i] = prompts[i] + " "
        fixed.append((i, float(spaced.p_num[j])))
    if fixed:
        i, p = fixed[0]
        more = f" (and {len(fixed) - 1} more prompts)" if len(fixed) > 1 else ""
        _note(
            args,
            f"prompt {i + 1}, {_shorten(prompts[i], 60)!r}, ends without the space the model "
            f"expects before a number{more}: read as {_shorten(prompts[i] + ' ', 60)!r}, as "
            f"generate writes it (P(<NUM>) {p:.3f} after the space); end a prompt where the "
            "number starts",
        )
    return prefixes


def _check_prompt_lengths(model: Any, ntok: Any, prompts: list[str]) -> None:
    """Refuse a prompt longer than the model's context (the number after it has no position)."""
    context = _context_length(model)
    if context is None:
        return
    lengths = [len(ids) for ids in ntok(prompts)["input_ids"]]
    over = [i for i, n in enumerate(lengths) if n >= context]
    if over:
        i = over[0]
        raise CliError(
            f"prompt {i + 1} is {lengths[i]} tokens long: the model's context of {context} "
            f"positions (max_position_embeddings) leaves no room for the number after it; "
            f"{len(over)} of {len(prompts)} prompts are that long: shorten them"
        )


def cmd_predict(args: argparse.Namespace) -> int:
    """``predict``: the next number after each prompt, with intervals and ``P(<NUM>)``."""
    from ..predict import predict_values
    from .precision import field_before

    _check_decimals(args)
    saved = _data_format(args.model)
    prompts, table = _prompts(args, saved)
    truth = _table_truth(table) if table is not None else None
    _set_threads(args)
    model, ntok = load_causal_model(args.model, tokenizer=args.tokenizer)
    if model.config.num_token_id is None:
        raise CliError("the model has no <NUM> token: it cannot predict numbers")
    precision = _precision(args.model)
    _check_prompt_lengths(model, ntok, prompts)
    pred = predict_values(
        model,
        ntok,
        prompts,
        levels=args.levels,
        batch_size=args.batch_size,
        calibrated=not args.raw_intervals,
    )
    prefixes = _read_on(args, model, ntok, prompts, pred)
    rows = pred.rows()
    for i, (prefix, row) in enumerate(zip(prefixes, rows, strict=True)):
        text = _write(precision, float(pred.median[i]), prefix, args.decimals)
        intervals = {
            c: (
                _write(precision, float(pred.lower[i, j]), prefix, args.decimals),
                _write(precision, float(pred.upper[i, j]), prefix, args.decimals),
            )
            for j, c in enumerate(pred.levels)
        }
        if args.json:
            record: dict[str, Any] = {"prompt": prompts[i], "text": text, **row}
            record["field"] = field_before(prefix)
            if truth is not None:  # the table's prompts come last
                k = i - (len(prompts) - len(truth))
                record["true"] = truth[k] if k >= 0 else None
            print(json.dumps(record, ensure_ascii=False))
            continue
        assert pred.calibrated is not None and pred.calibration_count is not None
        calibrated = pred.calibrated[i]
        parts = [
            f"{round(100 * c)}% [{lo}, {hi}]" + ("" if bool(calibrated[j]) else "*")
            for j, (c, (lo, hi)) in enumerate(intervals.items())
        ]
        if bool(calibrated.all()):
            note = f"calibrated on {int(pred.calibration_count[i])} rows"
        elif bool(calibrated.any()):
            note = "* Cauchy, not calibrated"
        else:
            note = "Cauchy intervals (not calibrated)"
        line = (
            f"{prefix}{text}  |  " + "  ".join(parts) + f"  ({note})  P(<NUM>) {row['p_num']:.3f}"
        )
        print(line)
    return 0


def _sentence_end_ids(ntok: Any) -> list[int]:
    """Ids of the tokens whose text ends a sentence (``.``, ``!``, ``?`` at the end, or a
    newline); special tokens and ``<NUM>`` excluded."""
    tok = ntok.tokenizer
    special = set(tok.all_special_ids) | {ntok.num_token_id}
    ids = [i for i in range(len(tok)) if i not in special]
    texts = tok.batch_decode([[i] for i in ids], clean_up_tokenization_spaces=False)
    return [
        i
        for i, t in zip(ids, texts, strict=True)
        if "\n" in t or t.rstrip(" ").endswith(_SENTENCE_ENDS)
    ]


def _eos_ids(model: Any, ntok: Any) -> list[int]:
    out: list[int] = []
    for source in (getattr(model.generation_config, "eos_token_id", None), ntok.eos_token_id):
        for i in source if isinstance(source, (list, tuple)) else [source]:
            if isinstance(i, int) and i not in out:
                out.append(i)
    return out


def cmd_generate(args: argparse.Namespace) -> int:
    """``generate``: continuations of prompts with numbers written in."""
    from tqdm.auto import tqdm

    from cauchylin.nn.modes import STANDARD

    from ..generation import generate

    _check_decimals(args)
    saved = _data_format(args.model)
    prompts, _ = _prompts(args, saved)
    _set_threads(args)
    model, ntok = load_causal_model(args.model, tokenizer=args.tokenizer)
    precision = _precision(args.model)
    eos = _eos_ids(model, ntok)
    if args.sentence_stop:
        eos += [i for i in _sentence_end_ids(ntok) if i not in eos]
    results = []
    batches = range(0, len(prompts), args.batch_size)
    for start in tqdm(batches, desc="generate", disable=not _progress(args) or len(batches) < 2):
        chunk = prompts[start : start + args.batch_size]
        out = generate(
            model,
            chunk,
            tokenizer=ntok,
            mode=args.mode or STANDARD,
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
            max_new_tokens=args.max_new_tokens,
            eos_token_id=eos,
            stop_strings=args.stop,
            seed=args.seed,
        )
        for i, prompt in enumerate(chunk):
            text, continuation, numbers = precision.write_generation(
                out, i, prompt, ntok, args.decimals
            )
            results.append(
                {
                    "prompt": prompt,
                    "text": text,
                    "continuation": continuation,
                    "numbers": [float(n) for n in numbers],
                }
            )
    for r in results:
        print(json.dumps(r, ensure_ascii=False) if args.json else r["text"])
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
# Running a command


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "demo": cmd_demo,
    "train": cmd_train,
    "evaluate": cmd_evaluate,
    "predict": cmd_predict,
    "generate": cmd_generate,
    "verify": cmd_verify,
}
"""The function of each command (``args.command`` of :func:`cauchylin_lm.build_parser`)."""


def _terminate(signum: int, frame: Any) -> None:
    raise _Terminated()


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises :class:`_Terminated` while the block runs (in the main thread)."""
    try:
        previous = signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread
        previous = None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def run(args: argparse.Namespace) -> int:
    """Run a parsed ``cauchylin-lm`` command and turn user errors into one line.

    Args:
        args: from :func:`cauchylin_lm.build_parser` (``args.command`` picks the command).

    Returns:
        The exit status: 0 on success, 1 when ``verify`` fails its tolerance, 2 for a user error,
        130 when interrupted (Ctrl-C), 143 when terminated (SIGTERM), 141 when the output pipe
        closed.

    Raises:
        KeyError: ``args.command`` is not a command.

    Example:
        >>> import contextlib, io
        >>> args = build_parser().parse_args(["predict", "/no/such/model", "--prompt", "x "])
        >>> err = io.StringIO()
        >>> with contextlib.redirect_stderr(err):
        ...     status = run(args)
        >>> status, err.getvalue().strip()
        (2, "cauchylin-lm predict: error: model folder not found: '/no/such/model'")
    """
    command = COMMANDS[args.command]
    if not _progress(args):
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # the "Loading weights" bars
    try:
        with _sigterm_as_interrupt():
            return int(command(args))
    except BrokenPipeError:  # the output went to a pipe that closed (| head)
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return 141
    except (CliError, ValueError, OSError) as exc:
        message = str(exc).strip().replace("\n", " ") or type(exc).__name__
        print(f"{PROG} {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, _Terminated)
        what = "terminated (SIGTERM)" if terminated else "interrupted"
        print(f"{PROG} {args.command}: {what}; {str(exc) or 'nothing was saved'}", file=sys.stderr)
        return 143 if terminated else 130


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``cauchylin-lm`` (the same as the console script, :func:`cauchylin_lm.main`).

    Args:
        argv: the arguments (default ``sys.argv[1:]``).

    Returns:
        The exit status of :func:`run` (argparse exits with 2 on a bad option).

    Example:
        >>> import contextlib, io
        >>> err = io.StringIO()
        >>> with contextlib.redirect_stderr(err):
        ...     status = main(["verify", "/no/such/folder"])
        >>> status, err.getvalue().strip()
        (2, "cauchylin-lm verify: error: base folder not found: '/no/such/folder'")
    """
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
