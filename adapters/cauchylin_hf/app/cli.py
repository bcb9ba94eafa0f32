"""The commands of ``cauchylin-lm``: ``demo``, ``train``, ``evaluate``, ``predict``, ``generate``,
``verify`` (the page "Command line", ``docs/cli.md``, describes each).

The console script is :func:`cauchylin_lm.main` (here :func:`main` runs the same in a process that
has the commands imported; also ``python -m cauchylin_hf.app.cli``): it parses the arguments
(:func:`cauchylin_hf.app.parser.build_parser`) and runs the checks that need no model
(:func:`cauchylin_hf.app.checks.preflight`) before torch and transformers are imported, then calls
:func:`run`, and turns errors into one line and an exit status
(:func:`cauchylin_hf.app.console.execute`). Each command here is a short function over library
calls: reading the data (:mod:`cauchylin_hf.app.inputs`), the model (:func:`load_causal_model`),
training and prediction (:mod:`cauchylin_hf.training`, :mod:`cauchylin_hf.predict`,
:mod:`cauchylin_hf.generation`), and what it prints (:mod:`cauchylin_hf.app.reports`). ``train``
writes into :func:`cauchylin_hf.atomic_save.replace_folder`, which replaces ``--output-dir`` only
once everything succeeded.
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..precision import DATA_FORMAT_FILE
from .checks import (
    CliError,
    check_output_dir,
    check_target_field,
    data_format,
    is_causal_folder,
    model_folder,
    note,
    saved_median,
)
from .console import execute
from .inputs import (
    Data,
    check_prompt_lengths,
    encode,
    load_causal_model,
    load_precision,
    read_data,
    read_prompts,
    table_truth,
    training_on_cpu,
)
from .members import (
    calibrate,
    evaluate_members,
    load_members,
    predict_members,
    reads_members,
)
from .parser import build_parser
from .reports import (
    describe,
    explain,
    format_record,
    print_metrics,
    report_readouts,
    shorten,
    target_context,
    target_field,
    target_report,
    write_value,
)

__all__ = [
    "COMMANDS",
    "DATA_FORMAT_FILE",
    "build_parser",
    "load_causal_model",
    "main",
    "run",
]

_SENTENCE_ENDS = (".", "!", "?")
# the per-prompt fields of predict_values' result (what a re-read prompt replaces)
_PREDICTION_FIELDS = "median loc scale p_num lower upper calibrated calibration_count".split()
_CHECK_TEXTS = 256  # training texts the learning check reads when there is no --eval-file


# --------------------------------------------------------------------------------------------
# Threads and progress


def _check_decimals(args: argparse.Namespace) -> None:
    from ..precision import check_decimals

    if args.decimals is not None:
        check_decimals(args.decimals, "--decimals")


def _progress(args: argparse.Namespace) -> bool:
    """Progress bars: only on a terminal (a log file or a pipe gets none), never with
    ``--no-progress``."""
    return not getattr(args, "no_progress", False) and sys.stderr.isatty()


def _set_threads(args: argparse.Namespace) -> None:
    """``--threads N``: ``torch.set_num_threads(N)``; without it, no more threads than the free
    cores (:func:`~cauchylin_hf.threads.fit_threads`), with a note the first time it lowers them."""
    from ..threads import fit_threads

    choice = fit_threads(getattr(args, "threads", None), for_process=True)
    if choice.first:
        note(args, choice.sentence("--threads N chooses another number"))


def _is_model_entry(name: str) -> bool:
    """``stale`` of :func:`~cauchylin_hf.atomic_save.replace_folder`: the files of the old model
    (weights, configs, tokenizer, ``data_format.json``) go; every other entry is kept."""
    from ..save_and_load import is_checkpoint_file

    return name == DATA_FORMAT_FILE or is_checkpoint_file(name)


def _listed(names: list[str], shown: int = 12) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _note_overwrite(args: argparse.Namespace, entries: dict[str, Any]) -> None:
    """With ``--overwrite``, a folder with entries that are not the model's gets a note naming
    what is replaced and what is kept (a folder of the model's files alone needs no word)."""
    replaced = sorted(name for name in entries if _is_model_entry(name))
    kept = sorted(name for name in entries if not _is_model_entry(name))
    if kept:
        note(
            args,
            f"--overwrite: the model's files in {args.output_dir!r} ({_listed(replaced)}) are "
            f"replaced once the training succeeded; its {len(kept)} other entries "
            f"({_listed(kept)}) are kept",
        )


_TOO_LARGE = (errno.EFBIG,) + ((errno.EDQUOT,) if hasattr(errno, "EDQUOT") else ())


# how the writers report a write the system stopped: OSError's errno aside, safetensors' (Rust)
# and torch.save's stream writer's messages (the latter name no cause)
_LIMIT_SIGNS: tuple[str, ...] = ("No space left", "os error 28", "StorageFull", "code: 28")
_LIMIT_SIGNS += ("File too large", "os error 27", "FileTooLarge", "code: 27", "Disk quota")
_WRITER_SIGNS = ("file write failed", "inline_container.cc", "iostream error")


def _is_write_limit(exc: BaseException) -> bool:
    """A write stopped by a full disk, a file-size limit (``ulimit -f``) or a quota, as the
    writers report it: an ``OSError``, safetensors' error, torch.save's stream writer's."""
    text = str(exc)
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, *_TOO_LARGE):
        return True
    return any(s in text for s in _LIMIT_SIGNS + _WRITER_SIGNS)


def _file_size_limit() -> int | None:
    """The file-size limit of this process (``ulimit -f``, bytes), or None for none."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def _save_failure(out: Path, exc: BaseException, existed: bool) -> str:
    """One line for a failed save: a full disk or a file-size limit says so."""
    text = str(exc).strip()
    first = text.splitlines()[0][:300] if text else type(exc).__name__
    kept = "the model already there is unchanged" if existed else "nothing was written"
    if not _is_write_limit(exc):
        return f"could not save the model to {str(out)!r}: {first}; {kept}"
    limit = _file_size_limit()
    if limit is not None and not (isinstance(exc, OSError) and exc.errno == errno.ENOSPC):
        return (
            f"a file reached the file-size limit (ulimit -f: {limit} bytes) while saving to "
            f"{str(out)!r} ({first}); "
            f"{'the model already there is unchanged' if existed else 'no model was saved'}, "
            "and a checkpoint cut off by it is never resumed "
            "from: raise the limit (ulimit -f unlimited) and train again"
        )
    return (
        f"no space left on the device to save the model to {str(out)!r} ({first}); {kept}: "
        "free some space and train again"
    )


# --------------------------------------------------------------------------------------------
# Commands


def cmd_demo(args: argparse.Namespace) -> int:
    """``demo``: run :func:`cauchylin_hf.app.demo.run_demo`."""
    from .demo import FULL, QUICK, run_demo, with_overrides

    settings = with_overrides(QUICK if args.quick else FULL, max_steps=args.steps, seed=args.seed)
    _set_threads(args)
    run_demo(args.output_dir, settings=settings, progress=_progress(args), plots=not args.no_plots)
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


def _model_to_train(args: argparse.Namespace, sample: Sequence[str]) -> tuple[Any, Any, str]:
    """``(model, tokenizer, what it is)``: built by ``--from-config``, or loaded from MODEL with
    its backbone trainable as ``--train-backbone`` (default: as a saved model had it; a base's
    stays frozen)."""
    if args.from_config is not None:
        from .scratch import build_from_config

        model, ntok = build_from_config(
            args.from_config,
            sample,
            vocab_size=args.vocab_size,
            seed=args.seed,
            freeze_backbone=args.train_backbone is False,
        )
        _set_target_weight(model, args)
        return model, ntok, f"a new {args.from_config} model (tokenizer of {len(ntok)} tokens)"
    model, ntok = load_causal_model(args.model, tokenizer=args.tokenizer)
    trainable = args.train_backbone
    if trainable is None:
        trainable = is_causal_folder(args.model) and not model.config.freeze_backbone
    model.set_backbone_trainable(bool(trainable))
    model.config.freeze_backbone = not trainable
    _set_target_weight(model, args)
    return model, ntok, str(args.model)


def _set_target_weight(model: Any, args: argparse.Namespace) -> None:
    """``--target-weight``: the model's ``reg_target_weight`` (kept in its saved config)."""
    if args.target_weight is not None:
        model.config.reg_target_weight = float(args.target_weight)


def _train_settings(args: argparse.Namespace, n_texts: int) -> dict[str, Any]:
    """The keyword arguments of :func:`cauchylin_hf.training.train` from the options: those
    declared by :mod:`cauchylin_hf.training_options` (the warm-up given as steps), and the
    options ``train`` shares with other commands."""
    from ..training_options import flag_values

    settings = flag_values(args)
    settings.pop("warmup_ratio", None)  # converted to steps here
    settings.update(
        batch_size=args.batch_size,
        seed=args.seed,
        progress=_progress(args),
        warmup_steps=_warmup_steps(args, n_texts),
        dataloader_num_workers=args.dataloader_workers,
        use_cpu=training_on_cpu(args.device),
    )
    return settings


def _checkpoint_folder(args: argparse.Namespace, out: Path, seen: Any) -> Any:
    """The output folder's state: with ``--save-steps`` the checkpoints go into
    ``--output-dir`` itself (where Ctrl-C and a kill leave them), made now so that they are
    this run's own entries at the swap (a new run over old checkpoints was refused by the
    checks, :func:`cauchylin_hf.app.resume.check_checkpoints`)."""
    from ..atomic_save import folder_state

    if args.save_steps is not None and not out.exists():
        out.mkdir(parents=True)
        seen = folder_state(out)
    return seen


def _checkpoint_files(args: argparse.Namespace, text: str) -> dict[str, str]:
    """The files every checkpoint gets beside the model: ``data_format.json``, and the record
    of the command that a resume is compared with (with ``--save-steps``)."""
    from ..trainer_checkpoints import RUN_FILE
    from .resume import run_record

    files = {DATA_FORMAT_FILE: text}
    if args.save_steps is not None:
        files[RUN_FILE] = json.dumps(run_record(args), indent=2, ensure_ascii=False) + "\n"
    return files


def _drop_checkpoints(args: argparse.Namespace, out: Path) -> None:
    """Once the model is saved its checkpoints have served: removed, and said so (kept with
    ``--keep-checkpoints``)."""
    from ..trainer_checkpoints import list_checkpoints, remove_checkpoints

    if args.keep_checkpoints:
        kept = list_checkpoints(out)
        if kept:
            print(f"kept its {_count(len(kept))} ({_listed([p.name for p in kept])})")
        return
    removed = [p for p in remove_checkpoints(out) if not p.name.startswith(".")]
    if removed:
        print(
            f"removed its {_count(len(removed))}, now that the model is saved "
            "(--keep-checkpoints keeps them)"
        )


def _count(n: int) -> str:
    return "checkpoint" if n == 1 else f"{n} checkpoints"


def _train_and_save(
    args: argparse.Namespace,
    model: Any,
    ntok: Any,
    data: Data,
    held: Data | None,
    median: float | None,
    seen: Any,
    resume: str | None,
    held_out: int = 0,
    field: str | None = None,
) -> dict[str, float]:
    """Train into a staging folder that replaces ``--output-dir`` once everything succeeded;
    the metrics of the training and of the learning check."""
    from safetensors import SafetensorError

    from ..atomic_save import FolderChangedError, replace_folder
    from ..data.arrow import STATS_ROWS, text_sample
    from ..precision import NumberPrecision
    from ..trainer_checkpoints import last_checkpoint
    from ..training import train

    train_ds = encode(model, ntok, data, args.max_length)
    eval_ds = encode(model, ntok, held, args.max_length) if held is not None else None
    out, existed = Path(args.output_dir), Path(args.output_dir).exists()
    say: Callable[[str], None] = lambda text: note(args, text)  # noqa: E731
    sample = text_sample(data.texts, STATS_ROWS, seed=args.seed)  # the decimals of each field
    record = format_record(data.template, NumberPrecision.from_texts(sample), median)
    text = json.dumps(record, indent=2, ensure_ascii=False) + "\n"
    seen = _checkpoint_folder(args, out, seen)
    try:
        with replace_folder(
            out, stale=_is_model_entry, seen=seen, note=say, contents="the new model"
        ) as staging:
            result = train(
                model,
                ntok,
                train_ds,
                eval_ds,
                staging,
                resume_from_checkpoint=resume,
                checkpoint_dir=out if args.save_steps or resume else None,
                checkpoint_files=_checkpoint_files(args, text),
                **_train_settings(args, len(data.texts)),
            )
            if result.global_step < 1:
                raise CliError("training took no step: raise --epochs or --max-steps")
            target_code = None
            if model.config.num_token_id is not None and len(data.texts):
                target_code = target_context(model, ntok, data.texts[0], field)
            report_readouts(result, held_out, target_code)
            if result.step_choice is not None and result.step_choice.chosen is not None:
                print(result.step_choice.sentence(), flush=True)
            unsolved = result.readouts.unsolved if result.readouts is not None else []
            if unsolved:
                more = f" (and {len(unsolved) - 1} more contexts)" if len(unsolved) > 1 else ""
                say(f"one context's {unsolved[0]['note']}{more}: it keeps the shared head")
            if result.calibration_note:
                say(result.calibration_note)
            (staging / DATA_FORMAT_FILE).write_text(text, encoding="utf-8")
            metrics = dict(result.metrics or {})
            if median is not None and model.config.num_token_id is not None:
                if held is not None:
                    checked, where = held, "held-out texts"
                else:  # no held-out data: the check still tells a flat model apart
                    n = min(len(data.texts), _CHECK_TEXTS)
                    checked, where = data._replace(texts=data.texts[:n]), "training texts"
                metrics.update(target_report(args, model, ntok, checked, median, where))
    except KeyboardInterrupt as exc:
        last = last_checkpoint(out) if not exc.args else None  # not one raised after the swap
        if last is not None:
            exc.args = (
                f"the model was not saved; its last checkpoint is kept in {last}: run the same "
                "command with --resume-from-checkpoint to continue",
            )
        raise
    except FolderChangedError as exc:
        raise CliError(
            f"--output-dir {str(out)!r} was changed by another program during training "
            f"({exc.reason}); it was left as it is, and the new model was saved to "
            f"{exc.kept!r} instead"
        ) from None
    except SafetensorError as exc:
        raise CliError(_save_failure(out, exc, existed)) from None
    except (OSError, RuntimeError) as exc:  # RuntimeError: torch.save's stream writer
        if not _is_write_limit(exc):
            raise
        raise CliError(_save_failure(out, exc, existed)) from None
    return metrics


def cmd_train(args: argparse.Namespace) -> int:
    """``train``: a model from a config or a checkpoint, trained on a dataset file, saved."""
    import torch

    from cauchylin.conformal import calibration_holdout
    from cauchylin.metrics import quantiles

    from ..data.arrow import STATS_ROWS, TextColumn, text_sample
    from ..predict import target_numbers
    from ..step_choice import validation_size
    from ..trainer_checkpoints import resolve_resume_checkpoint
    from .resume import resumed_from

    seen = check_output_dir(args)  # checked again at the swap
    # checked before torch was imported (cauchylin_hf.app.resume.check_checkpoints)
    resume = resolve_resume_checkpoint(args.resume_from_checkpoint, Path(args.output_dir))
    if args.overwrite:
        _note_overwrite(args, seen.entries)
    data = read_data(args, args.data, data_format(args.model))
    held = None
    if args.eval_file:
        held = read_data(args, args.eval_file, format_record(data.template, None, None))
    _set_threads(args)
    # the tokenizer and the target's median read a sample of a large table (the whole of a small)
    sample = text_sample(data.texts, STATS_ROWS, seed=args.seed)
    model, ntok, what = _model_to_train(args, sample)
    if resume is not None:
        model_name = f"the {args.from_config} model" if args.from_config else str(args.model)
        what = f"{model_name} resumed from {resumed_from(resume)}"
    try:
        held_out = calibration_holdout(len(data.texts), args.calibration)
    except ValueError as exc:
        raise CliError(f"--calibration {args.calibration}: {exc}") from None
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    backbone = "frozen" if model.config.freeze_backbone else "trainable"
    # a large table is held out by a hash of each text: about that many (copies together)
    about = "about " if isinstance(data.texts, TextColumn) and len(data.texts) > STATS_ROWS else ""
    calibrating = (
        f" ({about}{held_out} more held out to calibrate the intervals on)" if held_out else ""
    )
    if held_out and len(set(sample)) == 1:  # (the whole table, or a sample of a large one)
        held_out, calibrating = 0, " (copies of one text: none can be held out to calibrate on)"
    choosing = 0
    if not args.no_readouts and model.config.num_token_id is not None and len(set(sample)) > 1:
        choosing = validation_size(len(data.texts) - held_out, args.step_choice)
    if choosing:  # the second run trains on them too
        first = f"a first run holds {choosing} of them out to choose its steps on"
        calibrating = f"{calibrating[:-1]}; {first})" if calibrating else f" ({first})"
    print(
        f"training {n_train / 1e6:.3f}M parameters of {what} (backbone {backbone}) on "
        f"{len(data.texts) - held_out} texts of {args.data}{calibrating}",
        flush=True,
    )
    field = target_field(data.template, args)
    targets = target_numbers(sample, target_field=field)
    describe(data, field, targets)
    median = quantiles(torch.tensor(targets, dtype=torch.float64), (0.5,))[0] if targets else None
    metrics = _train_and_save(args, model, ntok, data, held, median, seen, resume, held_out, field)
    print(f"saved the model, its tokenizer and {DATA_FORMAT_FILE} to {args.output_dir}")
    _drop_checkpoints(args, Path(args.output_dir))
    if metrics and held is not None:
        print_metrics(metrics)
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    """``evaluate``: held-out metrics and target-number errors of a model (or of several read as
    one, ``--member``) on a dataset file."""
    median = saved_median(args.model)
    data = read_data(args, args.data, data_format(args.model))
    check_target_field(args, data)
    _set_threads(args)
    undefined: dict[str, str] = {}  # why a rank correlation is nan, for the note
    if reads_members(args):
        metrics = _members_metrics(args, data, median, undefined)
    else:
        metrics = _model_metrics(args, data, median, undefined)
    if args.json:
        print(json.dumps(metrics, indent=2))
    else:
        print_metrics(metrics)
    explain(args, metrics, undefined)
    return 0


def _model_metrics(
    args: argparse.Namespace, data: Data, median: float | None, undefined: dict[str, str]
) -> dict[str, float]:
    """``evaluate`` of one model: the token metrics, and its numbers' in the same pass."""
    from ..evaluation import evaluate_model
    from ..predict import NumberMetrics, NumberReader

    model, ntok = load_causal_model(args.model, tokenizer=args.tokenizer, device=args.device)
    dataset = encode(model, ntok, data, args.max_length)
    running, reader = None, None
    if model.config.num_token_id is not None and args.max_length is None:
        # one pass: the number predictions come from the metrics' forward passes
        running = NumberMetrics(seed=args.seed)  # the seed of the samples of large data
        reader = NumberReader(
            model,
            target_field=target_field(data.template, args),
            calibrated=not getattr(args, "raw_intervals", False),
            texts=data.texts,
            sink=running.add,
        )
    metrics = evaluate_model(
        model,
        ntok,
        dataset,
        batch_size=args.batch_size,
        max_length=args.max_length,
        seed=args.seed,
        progress=_progress(args),
        num_workers=args.dataloader_workers,
        numbers=reader,
    )
    if model.config.num_token_id is not None:
        metrics.update(target_report(args, model, ntok, data, median, "texts", undefined, running))
    return metrics


def _members_metrics(
    args: argparse.Namespace, data: Data, median: float | None, undefined: dict[str, str]
) -> dict[str, float]:
    """``evaluate`` with ``--member`` or ``--calibration-file``: the numbers of the models'
    averaged law (no token metrics), and each model's own target error beside them."""
    models = load_members(args)
    model, ntok = models[0]
    running, alone = evaluate_members(args, models, data.texts, target_field(data.template, args))
    metrics: dict[str, float] = {"members": float(len(models))}
    if alone:
        each = " / ".join(f"{v:.4g}" for v in alone)
        note(
            args,
            f"the numbers are those of the ensemble of {len(models)} models (their Cauchy laws "
            f"averaged); the models alone: target median absolute error {each}; the token "
            "metrics are each model's own: evaluate one model for them",
        )
        metrics.update({f"member_{k}/target/mdae": v for k, v in enumerate(alone)})
    metrics.update(target_report(args, model, ntok, data, median, "texts", undefined, running))
    return metrics


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
        for name in _PREDICTION_FIELDS:
            getattr(pred, name)[i] = getattr(spaced, name)[j]
        prefixes[i] = prompts[i] + " "
        fixed.append((i, float(spaced.p_num[j])))
    if fixed:
        i, p = fixed[0]
        more = f" (and {len(fixed) - 1} more prompts)" if len(fixed) > 1 else ""
        note(
            args,
            f"prompt {i + 1}, {shorten(prompts[i], 60)!r}, ends without the space the model "
            f"expects before a number{more}: read as {shorten(prompts[i] + ' ', 60)!r}, as "
            f"generate writes it (P(<NUM>) {p:.3f} after the space); end a prompt where the "
            "number starts",
        )
    return prefixes


def _prediction_line(args: argparse.Namespace, pred: Any, i: int, texts: list[str]) -> str:
    """One prompt's prediction as text: the number, its intervals (``*`` where not calibrated)
    and ``P(<NUM>)``; ``texts`` holds the written median and interval ends."""
    calibrated = pred.calibrated[i]
    parts = [
        f"{round(100 * c)}% [{texts[1 + 2 * j]}, {texts[2 + 2 * j]}]"
        + ("" if bool(calibrated[j]) else "*")
        for j, c in enumerate(pred.levels)
    ]
    if bool(calibrated.all()):
        how = f"calibrated on {int(pred.calibration_count[i])} rows"
    elif bool(calibrated.any()):
        how = "* Cauchy, not calibrated"
    else:
        how = "Cauchy intervals (not calibrated)"
    return f"{texts[0]}  |  " + "  ".join(parts) + f"  ({how})  P(<NUM>) {pred.p_num[i]:.3f}"


def cmd_predict(args: argparse.Namespace) -> int:
    """``predict``: the next number after each prompt, with intervals and ``P(<NUM>)`` (of one
    model, or of several read as one with ``--member``)."""
    from ..precision import field_before
    from ..predict import predict_values

    _check_decimals(args)
    prompts, table = read_prompts(args, data_format(args.model))
    truth = table_truth(table) if table is not None else None
    _set_threads(args)
    models = load_members(args) if reads_members(args) else None
    model, ntok = (
        models[0]
        if models
        else load_causal_model(args.model, tokenizer=args.tokenizer, device=args.device)
    )
    if model.config.num_token_id is None:
        raise CliError("the model has no <NUM> token: it cannot predict numbers")
    precision = load_precision(args.model)
    calibration = calibrate(args, models, args.levels) if models else None
    pred = predict_values(
        model,
        ntok,
        prompts,
        levels=args.levels,
        batch_size=args.batch_size,
        calibrated=not args.raw_intervals,
    )
    prefixes = _read_on(args, model, ntok, prompts, pred)
    if models:  # the prompts as the first model reads them (a space added where it expects one)
        pred = predict_members(args, models, prefixes, pred, calibration)
    for i, (prefix, row) in enumerate(zip(prefixes, pred.rows(), strict=True)):
        values = [float(pred.median[i])]
        for j in range(len(pred.levels)):
            values += [float(pred.lower[i, j]), float(pred.upper[i, j])]
        texts = [write_value(precision, v, prefix, args.decimals) for v in values]
        if not args.json:
            print(prefix + _prediction_line(args, pred, i, texts))
            continue
        record: dict[str, Any] = {"prompt": prompts[i], "text": texts[0], **row}
        record["field"] = field_before(prefix)
        if truth is not None:  # the table's prompts come last
            k = i - (len(prompts) - len(truth))
            record["true"] = truth[k] if k >= 0 else None
        print(json.dumps(record, ensure_ascii=False))
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
    prompts, _ = read_prompts(args, data_format(args.model))
    _set_threads(args)
    model, ntok = load_causal_model(args.model, tokenizer=args.tokenizer, device=args.device)
    precision = load_precision(args.model)
    check_prompt_lengths(model, ntok, prompts)
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
            numbers = [float(n) for n in numbers]
            results.append(
                {"prompt": prompt, "text": text, "continuation": continuation, "numbers": numbers}
            )
    for r in results:
        print(json.dumps(r, ensure_ascii=False) if args.json else r["text"])
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """``verify``: ``loc_S`` of freshly attached heads vs the base logits."""
    from ..verify import verify

    folder = model_folder(args.base, "base")
    if args.tokenizer is not None:
        model_folder(args.tokenizer, "tokenizer")
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
"""The function of each command (``args.command`` of :func:`cauchylin_hf.app.parser.build_parser`)."""


def run(args: argparse.Namespace) -> int:
    """Run a parsed ``cauchylin-lm`` command (:func:`main` checks its arguments first and turns
    its errors into one line and an exit status).

    Args:
        args: from :func:`cauchylin_hf.app.parser.build_parser`, checked by
            :func:`cauchylin_hf.app.checks.preflight`.

    Returns:
        The command's exit status: 0 on success, 1 when ``verify`` fails its tolerance.

    Raises:
        KeyError: ``args.command`` is not a command.
        CliError: a user error (the one line :func:`main` prints); :class:`ValueError` and
            :class:`OSError` from the libraries are user errors too.

    Example:
        >>> args = build_parser().parse_args(["predict", "/no/such/model", "--prompt", "x "])
        >>> run(args)
        Traceback (most recent call last):
        ...
        cauchylin_hf.app.checks.CliError: model folder not found: '/no/such/model'
    """
    command = COMMANDS[args.command]
    if not _progress(args):
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # the "Loading weights" bars
    return int(command(args))


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``cauchylin-lm`` in this process, the commands imported: what the console script
    (:func:`cauchylin_lm.main`) does, through the same :func:`cauchylin_hf.app.console.execute`.

    Args:
        argv: the arguments (default ``sys.argv[1:]``).

    Returns:
        The exit status, as :func:`cauchylin_lm.main` returns it.

    Example:
        >>> main(["verify", "/no/such/folder"])
        2
    """
    return execute(argv, run)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
