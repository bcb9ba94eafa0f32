"""The checks of ``cauchylin-lm``'s arguments, folders and files that need no model.

Everything here reads only folders, ``config.json``/``data_format.json`` and data files: this
module and the ones it imports (:mod:`cauchylin_hf.data.table`, :mod:`cauchylin_hf.data.template`,
:mod:`cauchylin_hf.data.textfile`, :mod:`cauchylin_hf.numbers`, :mod:`cauchylin_hf.precision`,
:mod:`cauchylin_hf.atomic_save`, ...) use the standard library and NumPy (``numbers``,
``precision``), neither torch nor transformers.
The console script (:func:`cauchylin_lm.main`) runs :func:`preflight` before torch and
transformers are imported, so a missing file, a file that is not UTF-8, a wrong ``--target`` or
an ``--output-dir`` that already holds a model answers at once; the commands
(:mod:`cauchylin_hf.app.cli`) use the same functions when they read the data for real.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import stat
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..atomic_save import FolderState, folder_state
from ..data.table import Table, is_table_file, read_columns, read_table
from ..data.template import TableTemplate, TemplateError, check_width, renamed_columns
from ..data.textfile import read_texts
from ..numbers import number_fields
from ..precision import DATA_FORMAT_FILE
from ..trainer_checkpoints import is_checkpoint_entry
from .parser import PROG
from .presets import backbone_settings
from .resume import check_checkpoints

__all__ = [
    "CliError",
    "check_dataset_folder",
    "check_output_dir",
    "check_output_path",
    "check_target_field",
    "check_template_needs_table",
    "data_format",
    "data_path",
    "is_causal_folder",
    "model_folder",
    "note",
    "preflight",
    "read_table_data",
    "saved_median",
    "table_template",
    "warn",
]


_FIELD_SAMPLE = 20_000  # texts whose fields a --target-field is looked up in

WHOLE_TABLE_CHECK_BYTES = 2**20
"""The largest table whose every cell is checked before torch is imported; a larger one is
checked by its header first and cell by cell as training streams it."""


class CliError(ValueError):
    """A user error: printed as one line ``cauchylin-lm COMMAND: error: ...``, exit status 2.

    Example:
        >>> isinstance(CliError("no prompt"), ValueError)
        True
    """


def note(args: argparse.Namespace, message: str) -> None:
    """Print ``cauchylin-lm COMMAND: note: message`` to standard error.

    Args:
        args: the parsed arguments (``args.command`` names the command).
        message: the note.

    Example:
        >>> import contextlib, io
        >>> err = io.StringIO()
        >>> with contextlib.redirect_stderr(err):
        ...     note(argparse.Namespace(command="train"), "hello")
        >>> err.getvalue()
        'cauchylin-lm train: note: hello\\n'
    """
    print(f"{PROG} {args.command}: note: {message}", file=sys.stderr)


def warn(args: argparse.Namespace, message: str) -> None:
    """Print ``cauchylin-lm COMMAND: warning: message`` to standard error.

    Args:
        args: the parsed arguments (``args.command`` names the command).
        message: the warning.

    Example:
        >>> import contextlib, io
        >>> err = io.StringIO()
        >>> with contextlib.redirect_stderr(err):
        ...     warn(argparse.Namespace(command="evaluate"), "flat")
        >>> err.getvalue()
        'cauchylin-lm evaluate: warning: flat\\n'
    """
    print(f"{PROG} {args.command}: warning: {message}", file=sys.stderr)


def is_causal_folder(path: str | os.PathLike[str]) -> bool:
    """Whether a folder holds a model saved by ``train`` (``model_type`` ``cauchy_lm``).

    Args:
        path: the folder.

    Returns:
        True when its ``config.json`` is a JSON object with ``"model_type": "cauchy_lm"``.

    Example:
        >>> is_causal_folder("/no/such/folder")
        False
    """
    config = Path(path) / "config.json"
    if not config.is_file():
        return False
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("model_type") == "cauchy_lm"


def model_folder(path: str, what: str = "model", *, hint: str = "") -> Path:
    """The folder a ``MODEL`` (or ``BASE``) argument names, refused when it is not a folder.

    Args:
        path: the argument.
        what: its name in the message (``model``, ``base``, ``tokenizer``).
        hint: what to do instead, added to the message when ``path`` is a file.

    Returns:
        The folder.

    Raises:
        CliError: nothing is there, or a file is (a data file given as ``MODEL``).

    Example:
        >>> model_folder("/no/such/model")
        Traceback (most recent call last):
        ...
        cauchylin_hf.app.checks.CliError: model folder not found: '/no/such/model'
    """
    folder = Path(path)
    if folder.is_dir():
        return folder
    if folder.exists():
        raise CliError(
            f"{path!r} is a file, not a {what} folder: {what.upper()} is a folder (a local "
            f"checkpoint or a model saved by train){hint}"
        )
    raise CliError(f"{what} folder not found: {path!r}")


def data_path(path: str) -> Path:
    """A data file argument, refused when there is no such file.

    Args:
        path: the argument.

    Returns:
        The file.

    Raises:
        CliError: no file is there.

    Example:
        >>> data_path("/no/such.csv")
        Traceback (most recent call last):
        ...
        cauchylin_hf.app.checks.CliError: dataset file not found: '/no/such.csv'
    """
    p = Path(path)
    if not p.is_file():
        raise CliError(_not_a_file(path))
    return p


def _not_a_file(path: str) -> str:
    """Why a data argument is not a regular file: missing, a folder, a pipe, a device."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        if os.path.islink(path):
            return f"{path!r} is a link to {os.readlink(path)!r}, which does not exist"
        return f"dataset file not found: {path!r}"
    if stat.S_ISDIR(mode):
        return f"{path!r} is a folder, not a dataset file"
    if stat.S_ISFIFO(mode):
        return (
            f"{path!r} is a pipe (as <(...) and mkfifo make), not a file: the data is read "
            "more than once (checked first, then read for real), and a pipe gives it only "
            "once; write it to a file first (e.g. zcat data.csv.gz > data.csv)"
        )
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return f"{path!r} is a device, not a dataset file"
    return f"{path!r} is not a regular file (a socket?): pass a dataset file"


def data_format(folder: str | os.PathLike[str] | None) -> dict[str, Any]:
    """The ``data_format.json`` of a model folder (empty for none, or a folder without one).

    Args:
        folder: the model folder, or None (a model built from a config).

    Returns:
        The recorded template, target, decimals and training median.

    Raises:
        CliError: the file cannot be read or does not hold a JSON object.

    Example:
        >>> data_format(None)
        {}
    """
    if folder is None:
        return {}
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


def saved_median(folder: str | os.PathLike[str]) -> float | None:
    """The training targets' median recorded by ``train`` (None for a folder without one).

    Args:
        folder: the model folder.

    Returns:
        The median, or None.

    Raises:
        CliError: the recorded value is not a finite number.

    Example:
        >>> saved_median("/no/such/model") is None
        True
    """
    value = data_format(folder).get("target_median")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise CliError(
            f"{Path(folder) / DATA_FORMAT_FILE}: 'target_median' must be a finite number, got "
            f"{str(value)[:40]!r}"
        )
    return float(value)


def table_template(
    args: argparse.Namespace,
    columns: list[str],
    saved: dict[str, Any],
    *,
    say: Callable[[argparse.Namespace, str], None] | None = note,
) -> TableTemplate:
    """The template of a table with these columns: ``--template``, else the model's saved one,
    else the default (one field per column; the names it writes differently are said once).

    Args:
        args: the parsed arguments (``--template``, ``--target``).
        columns: the table's column names.
        saved: the model's ``data_format.json`` (:func:`data_format`).
        say: where notes go (None: nowhere).

    Returns:
        The :class:`~cauchylin_hf.data.template.TableTemplate`.

    Raises:
        TemplateError: the default template of a table too wide to be one text
            (:func:`~cauchylin_hf.data.template.check_width`), or a template that does not fit
            the columns.

    Example:
        >>> args = argparse.Namespace(command="train", template=None, target="age")
        >>> table_template(args, ["age", "price"], {}).template
        'price {price} -> age {target}.'
    """
    target = getattr(args, "target", None) or saved.get("target")
    template = getattr(args, "template", None) or saved.get("template")
    if template is None:
        check_width(len(columns), default=True)  # before the labels of every column are made
        tt = TableTemplate.default(columns, target)
        renamed = renamed_columns(columns)
        if renamed and say is not None:  # a model's saved template is not announced again
            listed = ", ".join(f"{c!r} as {label!r}" for c, label in renamed.items())
            say(
                args,
                f"the text writes some column names differently (one field per column): {listed}",
            )
    else:
        if target is None:
            target = "target" if "target" in columns else columns[-1]
        tt = TableTemplate(template, target)
        numbers = tt.literal_numbers()
        if numbers and getattr(args, "template", None) and say is not None:
            say(
                args,
                f"the template's own text holds the numbers {numbers}; the model reads them as "
                "values (write a column name like s1 as s₁, or without digits)",
            )
    return tt


def read_table_data(
    args: argparse.Namespace,
    path: Path,
    saved: dict[str, Any],
    *,
    prompts: bool,
    say: Callable[[argparse.Namespace, str], None] | None = note,
) -> tuple[TableTemplate, Table]:
    """A table and its template: ``--template``, else the model's saved one, else the default.

    For the texts of a table (training, evaluation; not ``prompts``) every target cell must be
    a number.

    Args:
        args: the parsed arguments (``--template``, ``--target``).
        path: the table file.
        saved: the model's ``data_format.json`` (:func:`data_format`).
        prompts: the table gives prompts (its target column may be missing).
        say: where the note on numbers in the template's own text goes (None: nowhere).

    Returns:
        ``(template, table)``.

    Raises:
        CliError: a target column that is missing or holds a cell that is not a number.
        ValueError: a table or template that cannot be read (the message names the file).

    Example:
        >>> import tempfile
        >>> table = Path(tempfile.mkdtemp()) / "t.csv"
        >>> _ = table.write_text("age,price\\n59,151\\n48,n/a\\n")
        >>> args = argparse.Namespace(command="train", template=None, target="age")
        >>> read_table_data(args, table, {}, prompts=False)[0].template
        'price {price} -> age {target}.'
        >>> read_table_data(argparse.Namespace(command="train", template=None, target=None),
        ...                 table, {}, prompts=False)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        cauchylin_hf.app.checks.CliError: ...'n/a'...; pick the target with --target COLUMN
    """
    table = read_table(path)
    tt = table_template(args, table.columns, saved, say=say)
    if prompts:
        tt.check(table.columns, need_target=False)
    else:
        try:
            tt.target_values(table)
        except ValueError as exc:
            bad_target = not isinstance(exc, TemplateError) and not getattr(args, "target", None)
            hint = "; pick the target with --target COLUMN" if bad_target else ""
            raise CliError(f"{exc}{hint}") from None
    return tt, table


def check_output_dir(args: argparse.Namespace) -> FolderState:
    """The state of ``--output-dir`` (checked again at the swap), refused when it is a file, a
    non-empty folder that is not a model, or a model without ``--overwrite``.

    Args:
        args: the parsed arguments of ``train``.

    Returns:
        The folder's :class:`~cauchylin_hf.atomic_save.FolderState`.

    Raises:
        CliError: the folder must not be replaced.

    Example:
        >>> import tempfile
        >>> folder = tempfile.mkdtemp()
        >>> _ = (Path(folder) / "notes.txt").write_text("mine")
        >>> check_output_dir(argparse.Namespace(output_dir=folder, overwrite=True))
        ... # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        cauchylin_hf.app.checks.CliError: --output-dir '...' is a non-empty folder that does not hold a cauchylin model; choose a new folder
    """
    path, out = args.output_dir, Path(args.output_dir)
    if out.exists() and not out.is_dir():
        raise CliError(f"--output-dir {path!r} is a file, not a folder")
    seen = folder_state(out)
    # a folder of checkpoints alone (a training stopped before its end) holds no model yet
    if not any(not is_checkpoint_entry(name) for name in seen.entries):
        return seen
    if not is_causal_folder(out):
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
    return seen


_NEW_MODEL = (
    "; to build a new model from a config, pass --from-config PRESET|config.json and the data "
    "with --data FILE"
)


def _check_train(args: argparse.Namespace) -> None:
    if (args.model is None) == (args.from_config is None):
        raise CliError("pass a MODEL folder or --from-config PRESET|config.json (one of them)")
    if args.data is None:
        raise CliError("no training data: pass --data FILE (.jsonl, .txt, .csv)")
    if args.from_config is not None and args.tokenizer is not None:
        raise CliError("--from-config trains its own tokenizer: leave out --tokenizer")
    _check_from_config(args)
    check_output_path(args.output_dir)
    check_output_dir(args)


def _check_from_config(args: argparse.Namespace) -> None:
    """``--from-config`` names a preset or a readable ``config.json`` with a ``model_type``."""
    if args.from_config is None:
        return
    try:
        backbone_settings(args.from_config)
    except (ValueError, OSError) as exc:
        message = str(exc)
        raise CliError(
            message if message.startswith("--from-config") else f"--from-config: {message}"
        ) from None


def check_output_path(path: str) -> None:
    """Refuse an ``--output-dir`` that training could not save to, before it trains: a name
    that is not UTF-8 (bytes a file system gives back as lone surrogates), or a place where no
    folder can be made (the nearest existing folder above is not writable, or is a file).

    Args:
        path: the ``--output-dir`` argument.

    Raises:
        CliError: the model could not be saved there (the message says why).

    Example:
        >>> check_output_path("/proc/cauchylin_out")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        cauchylin_hf.app.checks.CliError: --output-dir '/proc/cauchylin_out' cannot be written: ...
    """
    if not path:
        raise CliError("--output-dir is empty: name the folder to save the model to")
    full = os.path.abspath(path)
    try:
        full.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = full[exc.start]
        byte = f"byte 0x{ord(bad) - 0xDC00:02x}" if 0xDC80 <= ord(bad) <= 0xDCFF else repr(bad)
        raise CliError(
            f"--output-dir {path!r}: its path is not UTF-8 ({byte}), and a model folder's files "
            "are written with UTF-8 names: choose a name in UTF-8"
        ) from None
    above = Path(full)
    while not above.exists() and above.parent != above:
        above = above.parent
    target = Path(full) if Path(full).is_dir() else above
    if target == Path(full) and not target.is_dir():
        return  # a file where the folder goes: check_output_dir says so
    if not target.is_dir():
        raise CliError(
            f"--output-dir {path!r} cannot be made: {str(target)!r} is a file, not a folder"
        )
    # the new model is written next to the folder (then swapped in), or into it when it exists
    for folder in dict.fromkeys(
        [target, Path(full).parent if Path(full).parent.exists() else above]
    ):
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".cauchylin-check-", dir=folder))
        except OSError as exc:
            raise CliError(
                f"--output-dir {path!r} cannot be written: making a folder in {str(folder)!r} "
                f"failed ({exc.strerror or exc}); choose a folder you can write to"
            ) from None


def check_dataset_folder(path: str) -> None:
    """Check the files of a folder written by ``datasets.Dataset.save_to_disk`` that need no
    ``datasets``: ``state.json`` names Arrow files that are there, ``dataset_info.json`` (if
    any) is a JSON object. (Loading it checks the rest: the Arrow files and the features.)

    Args:
        path: the ``--data`` folder.

    Raises:
        CliError: one line naming the folder and what is wrong with it.

    Example:
        >>> import tempfile
        >>> check_dataset_folder(tempfile.mkdtemp())  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        cauchylin_hf.app.checks.CliError: --data '...' is a folder but not a dataset saved by datasets.Dataset.save_to_disk (no state.json)
    """
    folder = Path(path)
    state = folder / "state.json"
    if (folder / "dataset_dict.json").is_file():
        splits = sorted(p.name for p in folder.iterdir() if (p / "state.json").is_file())
        raise CliError(
            f"--data {path!r} holds a DatasetDict (splits {splits}): pass the folder of one "
            f"split (e.g. {str(folder / splits[0]) if splits else path + '/train'!r})"
        )
    if not state.is_file():
        raise CliError(
            f"--data {path!r} is a folder but not a dataset saved by "
            "datasets.Dataset.save_to_disk (no state.json)"
        )
    redo = "save the dataset again (Dataset.save_to_disk)"
    records = {}
    for name in ("state.json", "dataset_info.json"):
        file = folder / name
        if name != "state.json" and not file.is_file():
            continue
        try:
            records[name] = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:
            first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            raise CliError(
                f"--data {path!r}: its {name} cannot be read ({first}): a file cut short or "
                f"edited by hand? S{redo[1:]}"
            ) from None
        if not isinstance(records[name], dict):
            raise CliError(f"--data {path!r}: its {name} does not hold a JSON object; {redo}")
    files = records["state.json"].get("_data_files")
    if not isinstance(files, list) or not all(
        isinstance(f, dict) and isinstance(f.get("filename"), str) for f in files
    ):
        raise CliError(
            f"--data {path!r}: its state.json does not list the dataset's Arrow files "
            f"(_data_files); {redo}"
        )
    if not files:
        raise CliError(f"--data {path!r} holds an empty dataset (no Arrow file): no texts")
    for f in files:
        if not (folder / f["filename"]).is_file():
            raise CliError(
                f"--data {path!r}: the Arrow file {f['filename']!r} that its state.json lists "
                f"is missing; {redo}"
            )


def _check_file(args: argparse.Namespace, path: str, saved: dict[str, Any], table: bool) -> None:
    """A data file exists and is text; a table's template and target (for ``--data``) fit it."""
    prompts = args.command == "predict"
    if table and not prompts and Path(path).is_dir():  # a datasets folder, read as it trains
        check_dataset_folder(path)
        return
    p = data_path(path)
    if table and is_table_file(p) and not prompts and p.stat().st_size > WHOLE_TABLE_CHECK_BYTES:
        # a large table is streamed when it is read: its header here, its cells then
        columns = read_columns(p)
        table_template(args, columns, saved, say=None).check(columns)
    elif table and is_table_file(p):
        read_table_data(args, p, saved, prompts=prompts, say=None)
    else:
        if not is_table_file(p):
            check_template_needs_table(args, path)
        texts = read_texts(p)  # JSON lines and texts too, not only the encoding
        if table and not is_table_file(p):  # --data of evaluate: its --target-field
            check_target_field(args, argparse.Namespace(texts=texts, path=path))


def check_target_field(args: argparse.Namespace, data: Any) -> None:
    """Refuse a ``--target-field`` that no number of the data has (a typo would score nothing:
    every target metric NaN), naming the fields there are.

    Args:
        args: the parsed arguments (``--target-field``, ``--seed``).
        data: the texts (anything with ``texts`` and ``path``, e.g.
            :class:`~cauchylin_hf.app.inputs.Data`; a large dataset is checked on a sample).

    Raises:
        CliError: no number of the texts has that field.

    Example:
        >>> args = argparse.Namespace(command="evaluate", target_field="prise", seed=0)
        >>> from types import SimpleNamespace
        >>> check_target_field(args, SimpleNamespace(texts=["price 3, area 12."], path="t.txt"))
        Traceback (most recent call last):
        ...
        cauchylin_hf.app.checks.CliError: --target-field 'prise': no number of t.txt has that field (the words just before a number; did you mean 'price'?); its fields: 'price' (1 numbers), 'area' (1); pass one of them, or leave out --target-field to score the last number of each text
    """
    field = getattr(args, "target_field", None)
    if field is None:
        return
    texts = data.texts
    if len(texts) > _FIELD_SAMPLE:  # a large dataset: an even spread of its texts
        texts = [texts[k * len(texts) // _FIELD_SAMPLE] for k in range(_FIELD_SAMPLE)]
    counts = Counter(f for text in texts for f in number_fields(text))
    if counts[field]:
        return
    close = difflib.get_close_matches(field, [f for f in counts if f], n=1)
    guess = f"; did you mean {close[0]!r}?" if close else ""
    named = [(f, n) for f, n in counts.most_common() if f][:12]
    listed = ", ".join(
        f"{f!r} ({n} numbers)" if i == 0 else f"{f!r} ({n})" for i, (f, n) in enumerate(named)
    )
    more = f" and {len(counts) - len(named)} more" if len(counts) > len(named) else ""
    fields = f"its fields: {listed}{more}" if named else "its numbers have no words before them"
    raise CliError(
        f"--target-field {field!r}: no number of {data.path} has that field (the words just "
        f"before a number{guess}); {fields}; pass one of them, or leave out --target-field to "
        "score the last number of each text"
    )


def _check_eval_table(args: argparse.Namespace, saved: dict[str, Any]) -> None:
    """An ``--eval-file`` table has the columns the training table's template reads."""
    data, held = getattr(args, "data", None), getattr(args, "eval_file", None)
    if data is None or held is None or not (is_table_file(data) and is_table_file(held)):
        return
    if not (Path(data).is_file() and Path(held).is_file()):
        return
    tt = table_template(args, read_columns(Path(data)), saved, say=None)
    try:
        tt.check(read_columns(Path(held)))
    except ValueError as exc:
        raise CliError(
            f"--eval-file {held!r} does not fit the template of the training data: {exc}"
        ) from None


def check_template_needs_table(args: argparse.Namespace, path: str) -> None:
    """Refuse ``--template`` for a data file that is not a table.

    Args:
        args: the parsed arguments (``--template``).
        path: the data file (not a ``.csv`` or ``.tsv``).

    Raises:
        CliError: ``--template`` was given.

    Example:
        >>> check_template_needs_table(argparse.Namespace(template="{x} {target}"), "t.txt")
        Traceback (most recent call last):
        ...
        cauchylin_hf.app.checks.CliError: --template needs a table (.csv or .tsv file), got 't.txt'
    """
    if getattr(args, "template", None):
        raise CliError(f"--template needs a table (.csv or .tsv file), got {path!r}")


def _check_members(args: argparse.Namespace, saved: dict[str, Any]) -> None:
    """``--member`` folders exist; ``--calibration-file`` is a data file that fits the
    template, and is not asked to calibrate intervals that ``--raw-intervals`` leaves out."""
    for path in getattr(args, "member", None) or []:
        model_folder(path, "member")
    path = getattr(args, "calibration_file", None)
    if getattr(args, "max_length", None) is not None and (path or getattr(args, "member", None)):
        raise CliError(
            "--max-length cuts the texts of the token metrics, which evaluate leaves out with "
            "--member or --calibration-file (their numbers are read whole): drop --max-length"
        )
    if path is None:
        return
    if getattr(args, "raw_intervals", False):
        raise CliError(
            "--calibration-file calibrates the intervals that --raw-intervals leaves "
            "uncalibrated: pass one of them"
        )
    p = data_path(path)
    if is_table_file(p):
        read_table_data(args, p, saved, prompts=False, say=None)  # every target a number
    else:
        check_template_needs_table(args, path)


def preflight(args: argparse.Namespace) -> None:
    """Every check of a command that needs no model, in the order the command runs them.

    Args:
        args: from :func:`cauchylin_hf.app.parser.build_parser`.

    Raises:
        CliError: the first problem found (:class:`ValueError` and :class:`OSError` from a
            file that cannot be read).

    Example:
        >>> from cauchylin_hf.app.parser import build_parser
        >>> preflight(build_parser().parse_args(["predict", "/no/model", "--prompt", "x"]))
        Traceback (most recent call last):
        ...
        cauchylin_hf.app.checks.CliError: model folder not found: '/no/model'
    """
    if args.command == "train":
        _check_train(args)
    model = getattr(args, "model", None)
    saved = data_format(model)
    for name in ("data", "eval_file", "prompts_file"):
        path = getattr(args, name, None)
        if path is not None:
            _check_file(args, path, saved, table=name == "data")
    _check_eval_table(args, saved)
    if model is not None:
        model_folder(model, hint=_NEW_MODEL if args.command == "train" else "")
    _check_members(args, saved)
    if args.command == "verify":
        model_folder(args.base, "base")
    if getattr(args, "tokenizer", None) is not None:
        model_folder(args.tokenizer, "tokenizer")
    if args.command == "train":
        check_checkpoints(args)  # a resume that cannot go on, old checkpoints: refused now
