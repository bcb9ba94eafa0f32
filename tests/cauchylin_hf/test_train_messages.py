"""What ``train`` and ``evaluate`` say: why fewer rows were calibrated on than held out, and why
a group's rank correlation is undefined."""

from __future__ import annotations

import csv
import random

import torch
from cauchylin_hf.app import cli


def test_fewer_rows_calibrated_on_than_held_out_says_why(tmp_path, capsys):
    r = random.Random(0)
    rows = []
    for _ in range(120):
        area = r.randint(30, 200)
        rows.append([area, r.randint(1, 6), round(3 * area + r.uniform(-10, 10))])
    table = tmp_path / "copies.csv"
    with table.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["area", "rooms", "price"])
        w.writerows(rows + rows[:40])  # 40 rows twice: a copy is calibrated on once
    argv = ["train", "--from-config", "qwen2-tiny", "--data", str(table), "--output-dir"]
    argv += [str(tmp_path / "m"), "--max-steps", "2", "--threads", "1", "--no-progress"]
    threads = torch.get_num_threads()
    try:
        assert cli.main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert "(32 more held out to calibrate the intervals on)" in out
    (line,) = [x for x in out.splitlines() if x.startswith("calibrated the intervals")]
    assert "held-out rows never trained on (32 asked for: rows are held out by a hash" in line
    assert "copies of a text count once" in line
