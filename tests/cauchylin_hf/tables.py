"""Small CSV tables the command-line tests train on."""

from __future__ import annotations

import csv
import random
from pathlib import Path


def flats(path: Path, n: int, seed: int) -> Path:
    """Write ``n`` rows of ``area,rooms,price`` (price about 3 x area) to ``path``."""
    r = random.Random(seed)
    with path.open("w", newline="") as f:
        table = csv.writer(f)
        table.writerow(["area", "rooms", "price"])
        for _ in range(n):
            area = r.randint(30, 200)
            table.writerow([area, r.randint(1, 6), round(3 * area + r.uniform(-10, 10))])
    return path


def train_argv(source: Path, data: Path, out: Path, *extra: str) -> list[str]:
    """``cauchylin-lm train`` arguments: one step of batch 8 on one thread, from ``source``."""
    return [
        "train",
        str(source),
        "--data",
        str(data),
        "--output-dir",
        str(out),
        "--max-steps",
        "1",
        "--batch-size",
        "8",
        "--threads",
        "1",
        "--no-progress",
        *extra,
    ]
