"""What the commands of ``cauchylin-lm`` read: data files, tables, prompts, and their lengths.

The checks that need no model are in :mod:`cauchylin_hf.app.checks` (they run before torch is
imported); these functions read the data for real, and check it against the loaded model's
context.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple, cast

from ..data.files import DATASET_FOLDER, TABLE, TEXTS, data_kind, read_path_texts
from ..data.template import TemplateError, not_a_number
from ..precision import DATA_FORMAT_FILE
from .checks import (
    CliError,
    check_template_needs_table,
    data_format,
    data_path,
    is_causal_folder,
    model_folder,
    note,
    read_table_data,
    table_template,
)

__all__ = [
    "Data",
    "check_prompt_lengths",
    "context_length",
    "encode",
    "load_causal_model",
    "load_precision",
    "read_data",
    "read_prompts",
    "table_truth",
    "training_on_cpu",
]


class Data(NamedTuple):
    """Texts read from a data file (or a table's prompts), with the table and its template.

    Attributes:
        texts: the texts (a table's rows written by the template, or its prompts).
        template: the :class:`~cauchylin_hf.data.template.TableTemplate`, or None for free text.
        table: the :class:`~cauchylin_hf.data.table.Table`, or None for free text.
        path: the file, as given.

    Example:
        >>> Data(["3 eggs."], None, None, "t.txt").where(0)
        't.txt, text 1'
    """

    texts: Sequence[str]  # a list, or a TextColumn (Arrow on disk) for a table or a dataset
    template: Any  # TableTemplate | None
    table: Any  # Table | None
    path: str

    def where(self, i: int) -> str:
        """Where text ``i`` comes from (a table's row and line, or the text's number).

        Args:
            i: the index of a text.

        Returns:
            A place a user can find.

        Example:
            >>> Data(["a 1", "b 2"], None, None, "t.txt").where(1)
            't.txt, text 2'
        """
        if self.table is not None:
            return cast(str, self.table.where(i))
        line = getattr(self.texts, "line", None)  # a file read into Arrow records each line
        if callable(line) and line(i) is not None:
            return f"{self.path}, line {line(i)}"
        return f"{self.path}, text {i + 1}"


def read_data(
    args: argparse.Namespace, path: str, saved: dict[str, Any], *, prompts: bool = False
) -> Data:
    """The texts of a data file (or, with ``prompts``, the prompts of a table).

    Args:
        args: the parsed arguments (``--template``, ``--target``, the command for notes).
        path: the file.
        saved: the model's ``data_format.json`` (:func:`~cauchylin_hf.app.checks.data_format`).
        prompts: read a table's rows up to the target.

    Returns:
        The :class:`Data`.

    Raises:
        CliError: no such file, ``--template`` for a file that is not a table, or a target
            column that is not numeric.
        ValueError: a file that cannot be read (the message names it).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> table = Path(tempfile.mkdtemp()) / "t.csv"
        >>> _ = table.write_text("age,target\\n59,151\\n48,75\\n")
        >>> args = argparse.Namespace(command="train", template=None, target=None)
        >>> list(read_data(args, str(table), {}).texts)  # streamed into Arrow on disk
        ['age 59 -> target 151.', 'age 48 -> target 75.']
    """
    kind = data_kind(path)
    p: str | Path = path  # a saved datasets folder (train, evaluate) is read as it trains
    if prompts or kind != DATASET_FOLDER:
        p = data_path(path)
    if prompts and kind == TABLE:  # a table's prompts: its rows held, the target may be missing
        tt, table = read_table_data(args, Path(p), saved, prompts=True)
        return Data(tt.prompts(table), tt, table, path)
    if kind == TEXTS:
        check_template_needs_table(args, path)
    try:  # a table or a large file is kept in Arrow on disk, never all in memory
        read = read_path_texts(p, template_for=lambda columns: table_template(args, columns, saved))
    except ValueError as exc:
        bad_target = not isinstance(exc, TemplateError) and str(exc).startswith("target column")
        if kind != TABLE or not bad_target or getattr(args, "target", None):
            raise
        raise CliError(f"{exc}; pick the target with --target COLUMN") from None
    if isinstance(read.texts, list):
        _note_float32_misses(args, read.texts, path)
    return Data(read.texts, read.template, read.table, path)


def _note_float32_misses(args: argparse.Namespace, texts: list[str], path: str) -> None:
    """A note on numbers of free text that float32 cannot hold (a table refuses such targets)."""
    from ..numbers import out_of_float32_range

    misses = [(i, s) for i, text in enumerate(texts) for s in out_of_float32_range(text)]
    if misses:
        i, spelling = misses[0]
        note(
            args,
            f"{len(misses)} number(s) of {path} lie outside float32's range, which the model "
            f"reads (the first: {spelling!r} in text {i + 1}): one too large stays text, one "
            "too small reads as 0; rescale them if they matter",
        )


def read_prompts(args: argparse.Namespace, saved: dict[str, Any]) -> tuple[list[str], Data | None]:
    """The prompts of ``--prompt``, ``--prompts-file`` and (``predict``) ``--data TABLE``.

    Args:
        args: the parsed arguments of ``predict`` or ``generate``.
        saved: the model's ``data_format.json``.

    Returns:
        ``(prompts, table)``: the table's :class:`Data` (its prompts come last), or None.

    Raises:
        CliError: no prompt at all, ``--data`` that is not a table, ``--template`` without it.
        ValueError: a prompt that is not text, or a file that cannot be read.

    Example:
        >>> args = argparse.Namespace(command="generate", prompt=["3 eggs"], prompts_file=None)
        >>> read_prompts(args, {})
        (['3 eggs'], None)
    """
    from ..data.textfile import check_text, read_texts

    prompts = list(args.prompt or [])
    for i, prompt in enumerate(prompts):  # bytes that are not UTF-8 arrive as lone surrogates
        check_text(prompt, f"--prompt {i + 1}")
    table: Data | None = None
    if getattr(args, "prompts_file", None):
        prompts += read_texts(data_path(args.prompts_file))
    if getattr(args, "data", None):
        table = read_data(args, args.data, saved, prompts=True)
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


def table_truth(data: Data) -> list[float | None]:
    """The target cells of a table of prompts, as numbers (None where missing or not a number).

    Args:
        data: prompts read from a table.

    Returns:
        One value per prompt.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> table = Path(tempfile.mkdtemp()) / "t.csv"
        >>> _ = table.write_text("age,target\\n59,151\\n48,n/a\\n")
        >>> args = argparse.Namespace(command="predict", template=None, target=None)
        >>> table_truth(read_data(args, str(table), {}, prompts=True))
        [151.0, None]
    """
    from ..numbers import parse_number

    if data.table is None or data.template.target not in data.table.columns:
        return [None] * len(data.texts)
    cells = [row.get(data.template.target, "") for row in data.table.rows]
    return [parse_number(c) if not_a_number(c) is None else None for c in cells]


def context_length(model: Any) -> int | None:
    """The longest sequence the model's positions allow (``max_position_embeddings``).

    Args:
        model: a model with a ``config``.

    Returns:
        The length, or None when the config sets none.

    Example:
        >>> from types import SimpleNamespace
        >>> context_length(SimpleNamespace(config=SimpleNamespace(max_position_embeddings=64)))
        64
    """
    value = getattr(model.config, "max_position_embeddings", None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def encode(model: Any, ntok: Any, data: Data, max_length: int | None) -> Any:
    """The dataset of ``data``'s texts, refused when a text is longer than the model's context
    (a learned-position base such as GPT-2 would fail with an ``IndexError``).

    Args:
        model: the model.
        ntok: its numeric tokenizer.
        data: the texts.
        max_length: ``--max-length`` (texts are cut to it), or None.

    Returns:
        The :class:`~cauchylin_hf.data.dataset.NumericDataset`.

    Raises:
        CliError: a text longer than the context (naming it and ``--max-length``).

    Example:
        >>> from cauchylin_hf.testing import tiny_tokenizer
        >>> from cauchylin_hf.tokenizer import NumericTokenizer
        >>> from types import SimpleNamespace
        >>> ntok = NumericTokenizer(tiny_tokenizer(300), num_token="<NUM>")
        >>> model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=4))
        >>> encode(model, ntok, Data(["3 eggs and 4 pens and more words"], None, None, "t"), None)
        Traceback (most recent call last):
        ...
        cauchylin_hf.app.checks.CliError: t, text 1 is ...
    """
    from ..data.arrow import STATS_ROWS, TextColumn
    from ..data.dataset import NumericDataset
    from ..data.streaming import as_numeric_dataset

    context = context_length(model)
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


def check_prompt_lengths(model: Any, ntok: Any, prompts: list[str]) -> None:
    """Refuse a prompt longer than the model's context before the first batch, by the library's
    rule (:func:`~cauchylin_hf.generation.check_prompt_lengths`), over every prompt (so that its
    index counts them all).

    Args:
        model: the model.
        ntok: its numeric tokenizer.
        prompts: the prompts.

    Raises:
        ValueError: a prompt that leaves no position for the token after it.

    Example:
        >>> from cauchylin_hf.testing import tiny_tokenizer
        >>> from cauchylin_hf.tokenizer import NumericTokenizer
        >>> from types import SimpleNamespace
        >>> ntok = NumericTokenizer(tiny_tokenizer(300), num_token="<NUM>")
        >>> model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=64))
        >>> check_prompt_lengths(model, ntok, ["3 eggs"])
    """
    from ..generation import check_prompt_lengths as library_rule

    library_rule(model, [len(ids) for ids in ntok(prompts)["input_ids"]])


def load_causal_model(
    path: str | os.PathLike[str],
    *,
    tokenizer: str | None = None,
    device: str | None = None,
    **settings: Any,
) -> tuple[Any, Any]:
    """Load a causal model and its numeric tokenizer from a local folder.

    A folder saved by ``train`` (``config.json`` with ``model_type="cauchy_lm"``) is loaded with
    ``CauchyLMForCausalLM.from_pretrained`` and ``NumericTokenizer.from_pretrained``; any other
    checkpoint folder is taken as a base decoder and gets fresh heads with
    ``CauchyLMForCausalLM.from_base`` (``loc_S`` then equals the base logits).

    Args:
        path: the folder.
        tokenizer: a tokenizer folder (default: the one in ``path``).
        device: where to put the model: ``"auto"`` (:func:`cauchylin.available_device`, an
            accelerator where one is present), a device name such as ``"cpu"`` or ``"cuda:1"``,
            or None (where loading puts it: the CPU).
        **settings: ``from_base`` settings for a base folder (e.g. ``freeze_backbone``).

    Returns:
        ``(model, numeric_tokenizer)``.

    Raises:
        CliError: the folder does not exist, has no tokenizer, does not hold a decoder-only
            causal LM, or its files cannot be read (a truncated ``model.safetensors``, a broken
            ``config.json``); a device that torch does not know or cannot use.

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

    folder = model_folder(str(path))
    if tokenizer is not None:
        model_folder(tokenizer, "tokenizer")
    try:
        if is_causal_folder(folder):
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
    if device is not None:
        model = model.to(_device(device))
    return model, ntok


def _device(name: str) -> Any:
    """The ``torch.device`` of a ``--device`` value, checked (one line naming it otherwise)."""
    import torch

    from cauchylin import available_device

    if name == "auto":
        return available_device()
    try:
        device = torch.device(name)
        torch.empty(0, device=device)  # a device that is named right but absent fails here
    except (RuntimeError, AssertionError) as exc:  # (AssertionError: a CPU-only build's CUDA)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CliError(
            f"--device {name!r} cannot be used here ({first}); 'auto' picks {available_device()}"
        ) from exc
    return device


def training_on_cpu(name: str) -> bool | None:
    """The Trainer's ``use_cpu`` for ``train --device``.

    Args:
        name: the ``--device`` value: ``auto``, ``cpu``, or a torch device name.

    Returns:
        None for ``auto`` (the Trainer's own choice: a GPU or other accelerator where one is
        present), True for ``cpu``, False for the accelerator the Trainer would pick
        (``cuda``, ``cuda:0``, ``mps``, ... where present).

    Example:
        >>> training_on_cpu("auto") is None, training_on_cpu("cpu")
        (True, True)

    Raises:
        CliError: a device torch cannot use here, or one the Trainer does not train on (a
            second GPU: make it the first with ``CUDA_VISIBLE_DEVICES``).
    """
    if name == "auto":
        return None
    device = _device(name)
    if device.type == "cpu":
        return True
    from cauchylin import available_device

    first = available_device()
    if device.type != first.type or (device.index or 0) != (first.index or 0):
        raise CliError(
            f"--device {name!r}: train runs on the CPU or on the accelerator the Trainer picks "
            f"({first}); for another GPU, make it the first: CUDA_VISIBLE_DEVICES=1 "
            "cauchylin-lm train ... --device cuda"
        )
    return False


def load_precision(folder: str | os.PathLike[str]) -> Any:
    """The decimals of each field of a model's training data, from its ``data_format.json``.

    Args:
        folder: the model folder.

    Returns:
        The :class:`~cauchylin_hf.precision.NumberPrecision` (empty for a folder without one).

    Raises:
        CliError: the recorded decimals cannot be read.

    Example:
        >>> load_precision("/no/such/model").to_dict()
        {'decimals': {}, 'default': None}
    """
    from ..precision import NumberPrecision

    saved = data_format(folder).get("precision")
    if saved is None:
        return NumberPrecision()
    try:
        return NumberPrecision.from_dict(saved)
    except ValueError as exc:
        raise CliError(f"{Path(folder) / DATA_FORMAT_FILE}: {exc}") from None
