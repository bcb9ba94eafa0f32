"""Streamed training data (:mod:`cauchylin_hf.data.streaming`, :mod:`cauchylin_hf.data.table_stream`).

The streamed path must give exactly the examples of the in-memory one
(:meth:`NumericDataset.from_texts`): same ids, same numeric values, same texts from a table, same
decimals learned from them. ``train()`` must accept a ``datasets.Dataset`` and a
``datasets.IterableDataset``; the held-out split by hash must keep copies of a text together.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

datasets = pytest.importorskip("datasets")

from cauchylin_hf.data.arrow import TextColumn, text_sample  # noqa: E402
from cauchylin_hf.data.dataset import NumericDataset  # noqa: E402
from cauchylin_hf.data.streaming import (  # noqa: E402
    IterableNumericDataset,
    LazyNumericDataset,
    as_numeric_dataset,
)
from cauchylin_hf.data.table import read_table  # noqa: E402
from cauchylin_hf.data.table_stream import stream_table_texts  # noqa: E402
from cauchylin_hf.data.template import TableTemplate  # noqa: E402
from cauchylin_hf.precision import NumberPrecision  # noqa: E402
from cauchylin_hf.tokenizer import NumericTokenizer  # noqa: E402


def _texts(n: int, seed: int = 0) -> list[str]:
    """Rows of a numeric table as text, with decimals, signs and exponents of varied length."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        area = rng.randint(30, 250)
        price = round(rng.uniform(-50, 900), rng.randint(0, 3))
        tiny = f"{rng.uniform(1, 9):.2f}e-{rng.randint(1, 9)}"
        out.append(f"area {area}, rooms {rng.randint(1, 8)}, k {tiny} -> price {price}.")
    return out


@pytest.fixture(scope="module")
def ntok():
    from cauchylin_hf.testing import tiny_tokenizer

    return NumericTokenizer(tiny_tokenizer(300))


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert sorted(a) == sorted(b)
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("max_length", [None, 9])
def test_lazy_dataset_encodes_as_numeric_dataset(ntok, max_length):
    texts = _texts(300)
    eager = NumericDataset.from_texts(texts, ntok, max_length=max_length)
    lazy = LazyNumericDataset(
        datasets.Dataset.from_dict({"text": texts}), ntok, max_length=max_length
    )
    assert len(lazy) == len(eager)
    order = torch.randperm(len(texts), generator=torch.Generator().manual_seed(0)).tolist()
    for start in range(0, len(order), 37):  # batches of random rows, as a shuffled sampler
        rows = order[start : start + 37]
        for i, ex in zip(rows, lazy.__getitems__(rows), strict=True):
            _same(ex, eager[i])
    _same(lazy[-1], eager[len(texts) - 1])
    with pytest.raises(IndexError):
        lazy[len(texts)]


def test_iterable_dataset_encodes_as_numeric_dataset_in_workers(ntok):
    texts = _texts(200, seed=1)
    eager = NumericDataset.from_texts(texts, ntok)
    stream = datasets.Dataset.from_dict({"text": texts}).to_iterable_dataset(num_shards=4)
    ds = as_numeric_dataset(stream, ntok)
    assert isinstance(ds, IterableNumericDataset)
    got = list(ds)
    assert len(got) == len(texts)
    for i, ex in enumerate(got):
        _same(ex, eager[i])
    # two DataLoader workers: each encodes its share, together every text exactly once
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    keys = sorted(tuple(ex["input_ids"].tolist() + ex["numeric_values"].tolist()) for ex in loader)
    want = sorted(
        tuple(eager[i]["input_ids"].tolist() + eager[i]["numeric_values"].tolist())
        for i in range(len(eager))
    )
    assert keys == want


def test_iterable_dataset_from_a_generator_is_sharded_by_worker(ntok):
    texts = _texts(50, seed=2)
    ds = IterableNumericDataset(lambda: iter(texts), ntok, chunk_size=7)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    got = sorted(tuple(ex["numeric_values"].tolist()) for ex in loader)
    eager = NumericDataset.from_texts(texts, ntok)
    assert got == sorted(tuple(eager[i]["numeric_values"].tolist()) for i in range(len(texts)))


def test_streamed_table_gives_the_texts_and_decimals_of_read_table(tmp_path):
    rows = [f"{a},{b},{c}" for a, b, c in zip(range(40), _decimals(40), range(40, 80), strict=True)]
    body = "\n".join(rows[:10]) + "\n\n" + "\n".join(f" {r} " for r in rows[10:]) + "\n"
    path = tmp_path / "t.csv"
    path.write_bytes(("area,price,age\n" + body).encode("utf-8-sig"))
    streamed, _ = stream_table_texts(path, lambda cols: TableTemplate.default(cols, "price"))
    column = streamed.texts
    table = read_table(path)
    want = TableTemplate.default(table.columns, "price").texts(table)
    assert [streamed.where(i) for i in range(40)] == [table.where(i) for i in range(40)]
    assert list(column) == want and len(column) == 40
    assert column[3] == want[3] and column[5:9] == want[5:9]
    assert NumberPrecision.from_texts(column) == NumberPrecision.from_texts(want)


def _decimals(n: int) -> list[str]:
    rng = random.Random(3)
    return [f"{rng.uniform(0, 100):.{rng.randint(0, 4)}f}" for _ in range(n)]


def test_streamed_table_refuses_what_read_table_refuses(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("x,y\n1,2\n3,n/a\n4,oops\n")
    with pytest.raises(ValueError) as streamed:
        stream_table_texts(path, TableTemplate.default)
    table = read_table(path)
    with pytest.raises(ValueError) as eager:
        TableTemplate.default(table.columns).target_values(table)
    assert str(streamed.value) == str(eager.value)
    path.write_text("x,y\n1,2\n3,4,5\n")
    with pytest.raises(ValueError, match="line 3: 3 cells, but the header has 2"):
        stream_table_texts(path, TableTemplate.default)
    path.write_text("x,y\n")
    with pytest.raises(ValueError, match="no data row"):
        stream_table_texts(path, TableTemplate.default)


def test_split_held_out_keeps_copies_together(ntok):
    n, size = 4000, 400
    distinct = _texts(n // 2, seed=4)
    texts = distinct + distinct[::-1]  # every text twice, far apart
    lazy = LazyNumericDataset(datasets.Dataset.from_dict({"text": texts}), ntok)
    train, held = lazy.split_held_out(size, seed=0)
    train_texts = set(train.texts(range(len(train))))
    held_texts = held.texts(range(len(held)))
    assert not train_texts & set(held_texts)  # a copy of a held-out text is never trained on
    assert len(set(held_texts)) == len(held_texts)  # each held-out text once
    assert len(train) + 2 * len(held) == n
    # each distinct text is held out with probability size / n: the count is binomial; 5.3
    # standard deviations bound it with a false-failure rate below 1e-6 (normal approximation)
    p = size / n
    mean, sd = (n // 2) * p, math.sqrt((n // 2) * p * (1 - p))
    assert abs(len(held) - mean) <= 5.3 * sd
    again, _ = lazy.split_held_out(size, seed=0)
    assert again.texts(range(len(again))) == train.texts(range(len(train)))
    other, _ = lazy.split_held_out(size, seed=1)
    assert other.texts(range(len(other))) != train.texts(range(len(train)))


def test_text_column_and_sample():
    texts = [f"x {i}." for i in range(50)]
    column = TextColumn(datasets.Dataset.from_dict({"text": texts}))
    assert list(column) == texts and column[-1] == texts[-1] and column[::7] == texts[::7]
    sample = text_sample(column, 10, seed=0)
    assert len(sample) == 10 and len(set(sample)) == 10 and set(sample) <= set(texts)
    assert [texts.index(t) for t in sample] == sorted(texts.index(t) for t in sample)
    assert text_sample(column, 50) == texts and text_sample(texts, 100) == texts


def test_lazy_dataset_refuses_bad_input(ntok):
    with pytest.raises(ValueError, match="no column 'text'"):
        LazyNumericDataset(datasets.Dataset.from_dict({"body": ["1 a."]}), ntok)
    with pytest.raises(ValueError, match="is empty"):
        LazyNumericDataset(datasets.Dataset.from_dict({"text": []}), ntok)
    lazy = LazyNumericDataset(
        datasets.Dataset.from_dict({"text": ["3 eggs.", ""]}), ntok, name="rows"
    )
    with pytest.raises(ValueError, match="rows, row 2"):
        lazy.__getitems__([0, 1])
    long = LazyNumericDataset(
        datasets.Dataset.from_dict({"text": ["3 eggs and 4 pens and 5 cups."]}), ntok, max_tokens=4
    )
    with pytest.raises(
        ValueError, match=r"row 1 is \d+ tokens long, longer than the model.s context"
    ):
        long[0]


@pytest.mark.parametrize("kind", ["dataset", "iterable"])
def test_train_accepts_hf_datasets(tmp_path, kind):
    from cauchylin_hf.model import CauchyLMForCausalLM
    from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
    from cauchylin_hf.training import train

    torch.manual_seed(0)
    model, ntok = CauchyLMForCausalLM.from_base(
        tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True
    )
    texts = _texts(160, seed=5)
    data = datasets.Dataset.from_dict({"text": texts})
    if kind == "iterable":
        data = data.to_iterable_dataset(num_shards=2)
    result = train(
        model,
        ntok,
        data,
        datasets.Dataset.from_dict({"text": _texts(16, seed=6)}),
        tmp_path,
        max_steps=3,
        batch_size=8,
        logging_steps=1,
        progress=False,
        save=False,
        calibration="auto" if kind == "dataset" else None,
    )
    assert result.global_step == 3
    assert all(math.isfinite(v) for v in result.series("loss"))
    assert math.isfinite(result.metrics["eval/loss"])
    assert result.readouts is not None
    if kind == "dataset":  # 160 rows: auto holds out a fifth, by hash
        assert result.calibration is not None and 0 < result.calibration_size < 160


@pytest.mark.slow
@pytest.mark.skipif(
    not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
    reason="torch.distributed with gloo is not available",
)
def test_torchrun_each_process_encodes_its_half(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    from cauchylin_hf.testing import tiny_tokenizer

    tok_dir = tmp_path / "tokenizer"
    NumericTokenizer(tiny_tokenizer(300)).save_pretrained(tok_dir)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR"):
        env.pop(key, None)
    env.pop("MASTER_PORT", None)
    env.pop("ACCELERATE_USE_CPU", None)
    rows = 64
    worker = Path(__file__).with_name("streaming_ddp_worker.py")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone"]
    cmd += [str(worker), "--tokenizer", str(tok_dir), "--rows", str(rows), "--out", str(tmp_path)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr[-6000:]
    read = [[int(x) for x in (tmp_path / f"rank{r}.txt").read_text().split()] for r in (0, 1)]
    assert len(read[0]) == len(read[1]) == rows // 2  # each process encoded half of the rows
    assert not set(read[0]) & set(read[1])  # no row twice
    assert sorted(read[0] + read[1]) == list(range(rows))  # together, every row once


def test_streamed_table_writes_odd_column_names_as_the_template_does(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("price.usd,1990,s 1,a[0],y\n2.5,7,3,4,10.25\n1,2,3,4,5\n")
    template = "p {price.usd} y {1990} s {s 1} a {a[0]} {{braces}} -> {target}."
    column = stream_table_texts(path, lambda cols: TableTemplate(template, "y"))[0].texts
    table = read_table(path)
    assert list(column) == TableTemplate(template, "y").texts(table)
    assert column[0] == "p 2.5 y 7 s 3 a 4 {braces} -> 10.25."
    path.write_text("x,y\n1,2\n,3\n")
    with pytest.raises(ValueError, match=r"data row 2: column 'x' is empty"):
        stream_table_texts(path, TableTemplate.default)


def test_lazy_views_map_indices_to_the_rows_they_hold(ntok):
    texts = _texts(500, seed=7)
    lazy = LazyNumericDataset(datasets.Dataset.from_dict({"text": texts}), ntok)
    train, held = lazy.split_held_out(60, seed=3)
    held_rows = set(held.rows(range(len(held))))
    kept = [r for r in range(len(texts)) if r not in held_rows]  # no copies in these texts
    assert train.rows(range(len(train))) == kept
    assert train.texts([0, -1]) == [texts[kept[0]], texts[kept[-1]]]
    for i in (0, 17, len(kept) - 1):
        _same(train[i], NumericDataset.from_texts([texts[kept[i]]], ntok)[0])


def test_text_column_from_an_arrow_file_reads_in_workers(tmp_path, ntok):
    path = tmp_path / "t.csv"
    rows = 20_000  # more than one Arrow batch
    path.write_text("x,y\n" + "".join(f"{i},{i % 97}.5\n" for i in range(rows)))
    column = stream_table_texts(path, TableTemplate.default)[0].texts
    assert column.path is not None and len(column) == rows
    for i in (0, 8191, 8192, rows - 1):  # across the batch boundary
        assert column[i] == f"x {i} -> y {i % 97}.5."
    assert column.take([19_999, 3, 8192]) == [column[-1], column[3], column[8192]]
    lazy = as_numeric_dataset(column, ntok)
    loader = torch.utils.data.DataLoader(lazy, batch_size=500, num_workers=2, collate_fn=_plain)
    got = [ex for batch in loader for ex in batch]
    assert len(got) == rows
    for i in (0, 8191, 8192, rows - 1):
        want = NumericDataset.from_texts([column[i]], ntok)[0]
        assert got[i] == (want["input_ids"].tolist(), want["numeric_values"].tolist())


def _plain(batch: list[dict[str, torch.Tensor]]) -> list[tuple[list, list]]:
    """Examples as lists (a worker passing thousands of tensors runs out of file handles)."""
    return [(ex["input_ids"].tolist(), ex["numeric_values"].tolist()) for ex in batch]


def test_cli_trains_on_a_saved_datasets_folder(tmp_path, capsys):
    from cauchylin_hf.app import cli

    folder = tmp_path / "ds"
    datasets.Dataset.from_dict({"text": _texts(120, seed=8)}).save_to_disk(folder)
    out = tmp_path / "model"
    args = ["train", "--from-config", "qwen2-tiny", "--data", str(folder), "--output-dir"]
    args += [str(out), "--max-steps", "2", "--batch-size", "8", "--threads", "1"]
    threads = torch.get_num_threads()
    try:
        assert cli.main([*args, "--no-progress"]) == 0
    finally:
        torch.set_num_threads(threads)
    printed = capsys.readouterr().out
    assert f"on 96 texts of {folder}" in printed
    assert "held-out rows never trained on" in printed
    assert (out / "config.json").is_file() and (out / "data_format.json").is_file()
    with pytest.raises(ValueError, match=r"not a saved datasets\.Dataset"):
        from cauchylin_hf.data.arrow import load_text_column

        load_text_column(tmp_path)


def test_cli_streams_a_large_table_and_names_a_row_too_long(tmp_path, capsys, monkeypatch):
    from cauchylin_hf.app import cli
    from cauchylin_hf.data import arrow
    from cauchylin_hf.testing import save_tiny_base

    monkeypatch.setattr(arrow, "STATS_ROWS", 8)  # above it, the table is encoded as read
    base = save_tiny_base(tmp_path / "gpt2", "gpt2", spare_rows=2, max_position_embeddings=32)
    data = tmp_path / "long.csv"
    rows = "".join(f"note {i},{i}\n" for i in range(40))
    data.write_text("note,y\n" + rows + "\n" + "a rather long note " * 8 + ",2\n")
    capsys.readouterr()
    args = ["train", str(base), "--data", str(data), "--output-dir", str(tmp_path / "out")]
    args += ["--epochs", "1", "--batch-size", "41", "--threads", "1", "--no-progress"]
    threads = torch.get_num_threads()
    try:
        assert cli.main(args) == 2
    finally:
        torch.set_num_threads(threads)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"{data}, data row 41 (line 43) is" in err
    assert "of 41 texts are" not in err  # found when read, not by encoding every row first
    assert "longer than the model's context of 32 positions" in err and "--max-length 32" in err
    assert not (tmp_path / "out").exists()


def test_iterable_split_by_process_reads_only_its_share(ntok, monkeypatch):
    texts = _texts(30, seed=9)
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda: 1)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda: 2)
    eager = NumericDataset.from_texts(texts, ntok)
    mine = list(IterableNumericDataset(lambda: iter(texts), ntok, split_by_process=True))
    assert len(mine) == 15
    for k, ex in enumerate(mine):  # rank 1 of 2: the odd rows
        _same(ex, eager[2 * k + 1])
    # the default reads the whole stream (the Trainer dispatches batches from the main process)
    assert len(list(IterableNumericDataset(lambda: iter(texts), ntok))) == 30
    stream = datasets.Dataset.from_dict({"text": texts}).to_iterable_dataset(num_shards=2)
    hf = list(IterableNumericDataset(stream, ntok, split_by_process=True))
    assert len(hf) == 15


def test_a_table_of_copies_of_one_text_cannot_be_split_for_any_seed(ntok):
    """25,000 copies of one text: before, 4 seeds of 40 held out every copy (an error) and
    the other 36 none, while 2000 were announced. Now: one clear refusal, every seed."""
    lazy = LazyNumericDataset(datasets.Dataset.from_dict({"text": ["a 1, b 2."] * 25_000}), ntok)
    for seed in range(40):
        with pytest.raises(ValueError, match="the 25000 training texts are all copies"):
            lazy.split_held_out(2000, seed=seed)


def test_a_few_distinct_texts_that_all_fall_in_keep_one_to_train_on(ntok):
    texts = ["a 1, b 2.", "a 3, b 4.", "a 5, b 6."] * 1000
    lazy = LazyNumericDataset(datasets.Dataset.from_dict({"text": texts}), ntok)
    for seed in range(5):  # a threshold of all but 1 / 3000 of the hashes: all three fall in
        train, held = lazy.split_held_out(len(texts) - 1, seed=seed)
        assert held is not None and len(held) == 2 and len(train) == 1000
        trained = set(train.texts(range(len(train))))
        assert len(trained) == 1 and not trained & set(held.texts(range(2)))


def test_a_streamed_table_without_rows_names_what_is_missing(tmp_path):
    from cauchylin_hf.data.arrow import table_texts

    empty, header_only = tmp_path / "empty.csv", tmp_path / "header.csv"
    empty.write_text("\n \n")
    header_only.write_text("x,y\n\n")
    with pytest.raises(ValueError, match="is empty: a header row and at least one data row"):
        table_texts(empty, lambda row, line: "")
    with pytest.raises(ValueError, match="has a header but no data row"):
        table_texts(header_only, lambda row, line: "")
