"""The ``cauchylin-lm`` command line: ``demo``, ``train``, ``evaluate``, ``predict``, ``generate``,
``verify``.

Run ``cauchylin-lm --help`` (or ``python -m cauchylin_hf.app.cli --help``) and ``cauchylin-lm
COMMAND --help``. Every command works offline on local folders and files:

* ``demo`` — the embedded demo (:mod:`cauchylin_hf.app.demo`), no arguments needed.
* ``train --from-config qwen2-tiny --data F`` — a model from nothing: a byte-level BPE tokenizer
  trained on the data and a random backbone (:mod:`cauchylin_hf.app.scratch`), trained whole;
  ``train MODEL --data F`` attaches the causal heads to a local base checkpoint (e.g. a
  downloaded Qwen2.5-0.5B folder; backbone frozen by default) or continues a saved causal model.
  Data: JSONL with a ``"text"`` field, plain text (one example per line) or a CSV table written
  as text by a template (:mod:`cauchylin_hf.app.tables`). The model, its tokenizer and
  ``data_format.json`` (the template and the decimals of each field,
  :mod:`cauchylin_hf.app.precision`) are written to a temporary folder that replaces
  ``--output-dir`` only once everything succeeded.
* ``evaluate MODEL --data F`` — the held-out metrics (token accuracy, ``<NUM>`` F1, regression
  errors; :func:`cauchylin_hf.training.evaluate_model`) and the errors of the predicted target
  numbers (:func:`cauchylin_hf.predict.number_metrics`).
* ``predict MODEL --prompt TEXT`` (or ``--data table.csv``) — the next number after each prompt:
  median, central intervals and ``P(<NUM>)`` (:func:`cauchylin_hf.predict.predict_values`).
* ``generate MODEL --prompt TEXT`` — text with numbers, in any inference mode; numbers written
  with the decimals of the training data, generation stopped at the end of the sentence.
* ``verify BASE`` — the initialisation-equivalence report (``loc_S`` equals the base logits).

Errors a user can fix (a missing folder or file, a model without a decoder, an empty dataset, a
bad option, an unreadable checkpoint) print one ``cauchylin-lm COMMAND: error: ...`` line and exit
with status 2; nothing is written then.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn, cast

__all__ = ["DATA_FORMAT_FILE", "SCHEDULERS", "build_parser", "load_causal_model", "main"]

PROG = "cauchylin-lm"

DATA_FORMAT_FILE = "data_format.json"
"""The file ``train`` writes next to the model: the table template and target column (or None)
and the decimals of each field (:class:`~cauchylin_hf.app.precision.NumberPrecision`)."""

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

_SENTENCE_ENDS = (".", "!", "?")


class CliError(Exception):
    """A user error: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad option reported in one line (no usage block) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


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
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CliError(f"{path} cannot be read: {exc}") from None
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


# --------------------------------------------------------------------------------------------
# Data: text files, JSONL, and CSV tables through a template


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
) -> tuple[list[str], Any]:
    """Texts (or, with ``prompts``, the prompts of a table) and the table template (or None)."""
    from ..data import read_texts
    from .tables import is_table_file, read_table

    p = _data_path(path)
    if is_table_file(p):
        table = read_table(p)
        tt = _table_template(args, table, saved)
        return (tt.prompts(table) if prompts else tt.texts(table)), tt
    if getattr(args, "template", None):
        raise CliError(f"--template needs a table (.csv or .tsv file), got {path!r}")
    return read_texts(p), None


def _table_targets(path: str, tt: Any) -> list[float | None] | None:
    """The target cells of a table, as numbers (None where a cell is missing or not a number)."""
    from ..numbers import is_number, parse_number
    from .tables import read_table

    table = read_table(_data_path(path))
    if tt is None or tt.target not in table.columns:
        return None
    cells = [row.get(tt.target, "") for row in table.rows]
    return [parse_number(c) if is_number(c) else None for c in cells]


# --------------------------------------------------------------------------------------------
# Threads, messages, the output folder


def _note(args: argparse.Namespace, message: str) -> None:
    print(f"{PROG} {args.command}: note: {message}", file=sys.stderr)


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


def _check_output_dir(path: str) -> Path:
    """The output folder: refused when it is a file, or a non-empty folder that is not a model."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise CliError(f"--output-dir {path!r} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()) and not _is_causal_folder(out):
        raise CliError(
            f"--output-dir {path!r} is a non-empty folder that does not hold a cauchylin model; "
            "choose a new folder (a saved model is replaced only after training succeeded)"
        )
    return out


@contextmanager
def _staging(dest: Path) -> Iterator[Path]:
    """A temporary folder next to ``dest`` that replaces it when the block succeeds.

    On any error (or Ctrl-C) the temporary folder is removed and ``dest`` is left as it was.
    An existing ``dest`` is moved aside, the new folder moved in (``os.replace``, atomic on one
    file system), then the old one removed.
    """
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)  # mkdtemp's 0700 would make the saved model private
    except OSError as exc:
        raise CliError(f"cannot write next to {str(dest)!r}: {exc}") from None
    try:
        yield tmp
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old-{uuid.uuid4().hex[:8]}")
            os.replace(dest, old)
            try:
                os.replace(tmp, dest)
            except OSError:
                os.replace(old, dest)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


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


def _number_metrics(
    model: Any, ntok: Any, texts: list[str], target_field: str | None, batch_size: int
) -> dict[str, float]:
    from ..predict import number_metrics, number_predictions

    preds = number_predictions(model, ntok, texts, target_field=target_field, batch_size=batch_size)
    return number_metrics(preds)


def _write(precision: Any, value: float, prefix: str, decimals: int | None) -> str:
    if not math.isfinite(value):
        return "inf" if value > 0 else "-inf"
    return cast(str, precision.write(value, prefix, decimals))


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


def _warmup_steps(args: argparse.Namespace, n_texts: int) -> int:
    """``--warmup-steps``, or ``ceil(--warmup-ratio * total steps)`` (single process)."""
    if args.warmup_ratio is None:
        return int(args.warmup_steps or 0)
    if args.max_steps > 0:
        total = args.max_steps
    else:
        total = math.ceil(args.epochs * math.ceil(n_texts / args.batch_size))
    return math.ceil(args.warmup_ratio * total)


def cmd_train(args: argparse.Namespace) -> int:
    """``train``: a model from a config or a checkpoint, trained on a dataset file, saved."""
    from ..training import train
    from .precision import NumberPrecision

    if (args.model is None) == (args.from_config is None):
        raise CliError("pass a MODEL folder or --from-config PRESET|config.json (one of them)")
    if args.data is None:
        raise CliError("no training data: pass --data FILE (.jsonl, .txt, .csv)")
    if args.from_config is not None and args.tokenizer is not None:
        raise CliError("--from-config trains its own tokenizer: leave out --tokenizer")
    out = _check_output_dir(args.output_dir)
    saved = _data_format(args.model) if args.model is not None else {}
    train_texts, tt = _read_data(args, args.data, saved)
    eval_texts = None
    if args.eval_file:
        eval_texts, _ = _read_data(args, args.eval_file, _format_record(tt, None))
    _set_threads(args)

    if args.from_config is not None:
        from .scratch import build_from_config

        model, ntok = build_from_config(
            args.from_config,
            train_texts,
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
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    backbone = "frozen" if model.config.freeze_backbone else "trainable"
    print(
        f"training {n_train / 1e6:.3f}M parameters of {what} (backbone {backbone}) on "
        f"{len(train_texts)} texts of {args.data}",
        flush=True,
    )
    extra: dict[str, Any] = {"warmup_steps": _warmup_steps(args, len(train_texts))}
    if args.lr_scheduler is not None:
        extra["lr_scheduler_type"] = args.lr_scheduler
    precision = NumberPrecision.from_texts(train_texts)
    with _staging(out) as staging:
        result = train(
            model,
            ntok,
            train_texts,
            eval_texts,
            staging,
            max_steps=args.max_steps,
            num_train_epochs=args.epochs,
            batch_size=args.batch_size,
            learning_rate=args.learning_rate,
            max_length=args.max_length,
            logging_steps=args.logging_steps,
            seed=args.seed,
            progress=not args.no_progress,
            **extra,
        )
        if result.global_step < 1:
            raise CliError("training took no step: raise --epochs or --max-steps")
        record = _format_record(tt, precision)
        text = json.dumps(record, indent=2, ensure_ascii=False) + "\n"
        (staging / DATA_FORMAT_FILE).write_text(text, encoding="utf-8")
        metrics = dict(result.metrics or {})
        if eval_texts:
            field = _target_field(tt, args)
            metrics.update(_number_metrics(model, ntok, eval_texts, field, args.batch_size))
    print(f"saved the model, its tokenizer and {DATA_FORMAT_FILE} to {out}")
    if metrics:
        _print_metrics(metrics)
    return 0


def _format_record(tt: Any, precision: Any) -> dict[str, Any]:
    return {
        "template": None if tt is None else tt.template,
        "target": None if tt is None else tt.target,
        "precision": None if precision is None else precision.to_dict(),
    }


def cmd_evaluate(args: argparse.Namespace) -> int:
    """``evaluate``: held-out metrics and target-number errors of a model on a dataset file."""
    from ..training import evaluate_model

    saved = _data_format(args.model)
    texts, tt = _read_data(args, args.data, saved)
    _set_threads(args)
    model, ntok = load_causal_model(args.model, tokenizer=args.tokenizer)
    metrics = evaluate_model(
        model,
        ntok,
        texts,
        batch_size=args.batch_size,
        max_length=args.max_length,
        seed=args.seed,
        progress=not args.no_progress,
    )
    if model.config.num_token_id is not None:
        field = _target_field(tt, args)
        metrics.update(_number_metrics(model, ntok, texts, field, args.batch_size))
    if args.json:
        print(json.dumps(metrics, indent=2))
    else:
        _print_metrics(metrics)
    return 0


def _prompts(args: argparse.Namespace, saved: dict[str, Any]) -> tuple[list[str], Any]:
    from ..data import read_texts

    prompts = list(args.prompt or [])
    tt = None
    if getattr(args, "prompts_file", None):
        prompts += read_texts(_data_path(args.prompts_file))
    if getattr(args, "data", None):
        table_prompts, tt = _read_data(args, args.data, saved, prompts=True)
        if tt is None:
            raise CliError(f"--data must be a table (.csv or .tsv), got {args.data!r}")
        prompts += table_prompts
    elif getattr(args, "template", None):
        raise CliError("--template needs --data TABLE")
    if not prompts:
        raise CliError(
            "no prompt: pass --prompt TEXT (repeatable), --prompts-file FILE"
            + (" or --data TABLE" if hasattr(args, "data") else "")
        )
    return prompts, tt


def cmd_predict(args: argparse.Namespace) -> int:
    """``predict``: the next number after each prompt, with intervals and ``P(<NUM>)``."""
    from ..predict import predict_values
    from .precision import field_before

    saved = _data_format(args.model)
    prompts, tt = _prompts(args, saved)
    truth = _table_targets(args.data, tt) if tt is not None else None
    _set_threads(args)
    model, ntok = load_causal_model(args.model, tokenizer=args.tokenizer)
    if model.config.num_token_id is None:
        raise CliError("the model has no <NUM> token: it cannot predict numbers")
    precision = _precision(args.model)
    pred = predict_values(model, ntok, prompts, levels=args.levels, batch_size=args.batch_size)
    rows = pred.rows()
    for i, (prompt, row) in enumerate(zip(prompts, rows, strict=True)):
        text = _write(precision, float(pred.median[i]), prompt, args.decimals)
        intervals = {
            c: (
                _write(precision, float(pred.lower[i, j]), prompt, args.decimals),
                _write(precision, float(pred.upper[i, j]), prompt, args.decimals),
            )
            for j, c in enumerate(pred.levels)
        }
        if args.json:
            record: dict[str, Any] = {"prompt": prompt, "text": text, **row}
            record["field"] = field_before(prompt)
            if truth is not None:  # the table's prompts come last
                k = i - (len(prompts) - len(truth))
                record["true"] = truth[k] if k >= 0 else None
            print(json.dumps(record, ensure_ascii=False))
            continue
        parts = [f"{round(100 * c)}% [{lo}, {hi}]" for c, (lo, hi) in intervals.items()]
        line = f"{prompt}{text}  |  " + "  ".join(parts) + f"  P(<NUM>) {row['p_num']:.3f}"
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

    from ..generation import generate

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
    for start in tqdm(batches, desc="generate", disable=args.no_progress or len(batches) < 2):
        chunk = prompts[start : start + args.batch_size]
        out = generate(
            model,
            chunk,
            tokenizer=ntok,
            mode=args.mode,
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
# Parser


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


def _real(low: float, high: float, *, closed_low: bool) -> Any:
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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``cauchylin-lm`` (one subparser per command).

    Returns:
        The parser; ``args.func(args)`` runs the parsed command.

    Example:
        >>> args = build_parser().parse_args(["generate", "model_dir", "--prompt", "3 eggs",
        ...                                   "--mode", "causal"])
        >>> args.command, args.model, args.prompt, args.mode, args.max_new_tokens
        ('generate', 'model_dir', ['3 eggs'], 'causal', 32)
        >>> args.func.__name__, args.sentence_stop
        ('cmd_generate', True)
        >>> args = build_parser().parse_args(["train", "--from-config", "qwen2-tiny", "--data",
        ...                                   "t.csv", "--warmup-ratio", "0.1"])
        >>> args.model, args.from_config, args.warmup_ratio, args.train_backbone
        (None, 'qwen2-tiny', 0.1, None)
    """
    from cauchylin.nn.modes import MODES, STANDARD

    parser = _Parser(
        prog=PROG,
        description="Causal language models with Cauchy heads on Hugging Face decoders.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    positive = _real(0.0, math.inf, closed_low=False)

    def progress_flag(p: argparse.ArgumentParser) -> None:
        p.add_argument("--no-progress", action="store_true", help="hide progress bars")

    def threads_flag(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--threads",
            type=_positive_int,
            help="torch CPU threads (default: torch's choice, with a note when the machine is "
            "busy)",
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
            "last column)",
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
    p.add_argument("--seed", type=int, help="seed (default 0)")
    p.add_argument("--no-plots", action="store_true", help="do not write the figures")
    progress_flag(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser(
        "train",
        help="train a model from a config, or the causal heads on a local checkpoint",
        description="Train on a dataset file (JSONL with a 'text' field, plain text with one "
        "example per line, or a CSV table written as text by --template) and save the model, "
        "its tokenizer and data_format.json to --output-dir (replaced only when training "
        "succeeded). Either build a new model with --from-config (a byte-level BPE tokenizer "
        "trained on the data, a random backbone that trains too) or start from a local "
        "checkpoint folder (a base like Qwen2.5-0.5B with its backbone frozen, or a causal "
        "model saved by train).",
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
        "--train-backbone",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="train the backbone too (default: yes for --from-config and for a saved model "
        "that trained it, no for a base checkpoint)",
    )
    p.add_argument("--seed", type=int, default=0)
    threads_flag(p)
    progress_flag(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser(
        "evaluate",
        help="held-out metrics: token accuracy, <NUM> F1, errors of the target numbers, ...",
        description="Evaluate a causal model (or a base with fresh heads) on a dataset file: "
        "the token and <NUM> metrics, and the errors, rank correlation and interval coverage "
        "of the predicted numbers (target/..., all/..., field/<name>/...).",
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
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the metrics as JSON")
    threads_flag(p)
    progress_flag(p)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser(
        "predict",
        help="the next number after each prompt: median, intervals, P(<NUM>)",
        description="Read each prompt and predict the number that comes next: the median, "
        "central intervals (exact Cauchy quantiles) and P(<NUM>). A table (--data) gives one "
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
    threads_flag(p)
    progress_flag(p)
    p.set_defaults(func=cmd_predict)

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
    p.add_argument("--mode", choices=MODES, default=STANDARD)
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
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=_positive_int, default=8)
    p.add_argument("--json", action="store_true", help="one JSON object per prompt")
    threads_flag(p)
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
        The exit status: 0 on success, 1 when ``verify`` fails its tolerance, 2 for a user error
        (bad options exit with 2 through argparse), 130 when interrupted.

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
    if getattr(args, "no_progress", False) or not sys.stderr.isatty():
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # the "Loading weights" bars
    try:
        return int(args.func(args))
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
    except KeyboardInterrupt:
        print(f"{PROG} {args.command}: interrupted; nothing was saved", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
