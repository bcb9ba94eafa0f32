"""A data path read once for every door (:mod:`cauchylin_hf.data.files`): ``train()`` given a
table's path trains on the texts the command line writes for it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("datasets")

from cauchylin_hf.app import cli
from cauchylin_hf.data.dataset import NumericDataset
from cauchylin_hf.data.files import DATASET_FOLDER, TABLE, TEXTS, data_kind
from cauchylin_hf.model import CauchyLMForCausalLM
from cauchylin_hf.testing import save_tiny_base
from cauchylin_hf.training import train

# A header, a UTF-8 byte-order mark, a blank line, a quoted cell with the separator in it,
# spaces around cells and a column name with a digit (written s₁ by the default template).
ROWS = [("59", "a, b", "0.04", "151"), ("48", "c", "-0.03", "75"), ("72", "d", "0.01", "141")]


def _table(folder: Path, suffix: str) -> Path:
    sep = "\t" if suffix == ".tsv" else ","
    lines = [sep.join(["age", "note", "s1", "target"])]
    lines += [sep.join([age, f'"{note}"', f" {s1} ", y]) for age, note, s1, y in ROWS]
    lines.insert(2, "")
    path = folder / f"t{suffix}"
    path.write_bytes(("\ufeff" + "\n".join(lines) + "\n").encode("utf-8"))
    return path


def _spy_texts(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """The texts of the first encoding of each name (the data file's path)."""
    seen: dict[str, list[str]] = {}
    original = NumericDataset.from_texts.__func__  # type: ignore[attr-defined]

    def from_texts(cls, texts, tokenizer, **kwargs):
        texts = list(texts)
        seen.setdefault(str(kwargs.get("name")), texts)
        return original(cls, texts, tokenizer, **kwargs)

    monkeypatch.setattr(NumericDataset, "from_texts", classmethod(from_texts))
    return seen


@pytest.mark.parametrize("suffix", [".csv", ".tsv"])
def test_train_reads_a_table_path_as_the_command_line_does(tmp_path, monkeypatch, suffix):
    base = save_tiny_base(tmp_path / "base", "qwen2", spare_rows=2)
    table = _table(tmp_path, suffix)
    seen = _spy_texts(monkeypatch)
    threads = torch.get_num_threads()
    try:
        args = ["train", str(base), "--data", str(table), "--output-dir", str(tmp_path / "cli")]
        args += ["--epochs", "1", "--threads", "1", "--no-progress", "--seed", "0"]
        assert cli.main(args) == 0
        cli_texts = seen.pop(str(table))
        model, ntok = CauchyLMForCausalLM.from_base(str(base), return_tokenizer=True)
        train(model, ntok, table, output_dir=tmp_path / "py", max_steps=1)
    finally:
        torch.set_num_threads(threads)
    assert seen[str(table)] == cli_texts
    assert cli_texts[0] == "age 59, note a, b, s₁ 0.04 -> target 151."
    assert len(cli_texts) == len(ROWS)  # the header is no text


def test_data_kind_names_what_a_path_holds(tmp_path):
    assert [data_kind(tmp_path), data_kind("x.TSV"), data_kind("x.csv")] == [
        DATASET_FOLDER,
        TABLE,
        TABLE,
    ]
    assert [data_kind("x.jsonl"), data_kind("x.txt"), data_kind(tmp_path / "none")] == [TEXTS] * 3


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32", "utf-8-sig"])
def test_a_header_is_decoded_by_its_byte_order_mark_as_the_rows_are(tmp_path, encoding):
    """The header read alone (the command line's check of a large table) and the whole table
    go through one decoder, so a UTF-16 table's columns are read, not refused."""
    from cauchylin_hf.data.table import read_columns, read_table

    path = tmp_path / "t.tsv"
    path.write_bytes("âge\tprix\n59\t151\n".encode(encoding))
    assert read_columns(path) == read_table(path).columns == ["âge", "prix"]
