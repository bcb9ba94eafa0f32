"""A number's field in a table is its column's, whatever the word columns before it hold; codes
with digits (``SI1``) are words, and ``train`` says which columns it reads as categories."""

from __future__ import annotations

import csv
import json
import random

import pytest
import torch
from cauchylin_hf.app import cli
from cauchylin_hf.data.template import TableTemplate
from cauchylin_hf.numbers import field_of

FUELS = ("heating gas", "heating oil", "district heat")
GRADES = ("SI1", "VS2", "I1", "VVS1")


def _flats(path, n, seed):
    """``area, grade, fuel, price``: two word columns (grade holds codes with digits) just
    before the target."""
    r = random.Random(seed)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["area", "grade", "fuel", "price"])
        for _ in range(n):
            area, fuel = r.randint(30, 200), r.choice(FUELS)
            extra = 50 * FUELS.index(fuel)
            w.writerow([area, r.choice(GRADES), fuel, round(3 * area + extra + r.uniform(-9, 9))])
    return path


def _cli(argv):
    threads = torch.get_num_threads()
    try:
        return cli.main(argv)
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fields")
    train_csv, test_csv = _flats(folder / "train.csv", 40, 0), _flats(folder / "test.csv", 12, 1)
    out = folder / "model"
    argv = ["train", "--from-config", "qwen2-tiny", "--data", str(train_csv)]
    argv += ["--output-dir", str(out), "--max-steps", "3", "--batch-size", "8", "--threads", "1"]
    return {"argv": [*argv, "--no-progress"], "model": out, "test": test_csv}


def test_the_target_after_a_word_column_has_one_field(trained, capsys):
    assert _cli(trained["argv"]) == 0
    printed = capsys.readouterr().out
    assert "columns read as categories (words, no number): grade, fuel\n" in printed
    decimals = json.loads((trained["model"] / "data_format.json").read_text())["precision"]
    assert sorted(decimals["decimals"]) == ["area", "price"]  # no "heating oil price", "grade si"
    argv = ["evaluate", str(trained["model"]), "--data", str(trained["test"]), "--json"]
    assert _cli([*argv, "--no-progress"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    fields = {key.split("/")[1] for key in metrics if key.startswith("field/")}
    assert fields == {"area", "price"}
    assert metrics["field/price/count"] == 12 == metrics["target/count"]


def test_category_codes_read_as_words():
    tt = TableTemplate.default(["carat", "clarity", "price"])
    text = tt.text({"carat": "0.3", "clarity": "VS2", "price": "4.25"})
    assert text == "carat 0.3, clarity VS2 -> price 4.25."
    assert field_of("carat 0.3, clarity VS2 -> price ") == "price"


def test_a_template_that_joins_a_word_column_to_the_next_field_gets_a_note(trained, capsys):
    argv = list(trained["argv"])
    argv[argv.index("--output-dir") + 1] += "-joined"
    template = "{area} m², {fuel} flat costs {target}."
    assert _cli([*argv, "--template", template]) == 0
    printed = capsys.readouterr().out
    assert "columns read as categories (words, no number): fuel\n" in printed
    assert "the words of column 'fuel' join the field of column 'price'" in printed
