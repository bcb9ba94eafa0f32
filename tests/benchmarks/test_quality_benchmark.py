"""``benchmarks/bench_quality.py`` runs end to end at toy sizes and writes its tables, JSON and figure.

Nothing is measured here (the numbers come from running the script by hand, see
``docs/benchmarks.md``); this keeps the script from rotting and checks what a toy run can check:
every model of every table is scored, errors are non-negative, coverages are shares, the reference
rows are there, and bad flags are refused.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sklearn")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_quality.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(*args):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
def test_bench_quality_toy_run(tmp_path):
    out_json, out_png = tmp_path / "q.json", tmp_path / "q.png"
    proc = run(
        "--quick",
        "--steps",
        "3",
        "--workers",
        "1",
        "--datasets",
        "demo,cancer",
        "--json",
        str(out_json),
        "--plot",
        str(out_png),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out_json.read_text())["rows"]
    names = {(r["table"], r["name"], r["corrupt"]) for r in rows}
    for table in ("demo", "cancer"):
        for name in ("CE text LM", "causal", "causal (classifier_lr_scale=1)", "training median"):
            assert (table, name, 0.0) in names
        assert (table, "causal", 0.1) in names and (table, "CE text LM", 0.1) in names
    assert ("cancer", "linear regression (features)", 0.0) in names
    for r in rows:
        assert r["mae"] >= 0 and r["mdae"] >= 0
        for c in r["coverage"].values():
            assert 0.0 <= c <= 1.0
        if r["kind"] != "reference":
            assert 0.0 <= r["text_accuracy"] <= 1.0 and not math.isnan(r["text_accuracy"])
    assert out_png.read_bytes()[:8] == PNG_MAGIC
    assert "MdAE ratio" in proc.stdout and "corrupted/clean MdAE" in proc.stdout


def test_bench_quality_refuses_bad_flags():
    for args in (["--datasets", "mnist"], ["--variants", "nope"], ["--steps", "0"]):
        proc = run(*args)
        assert proc.returncode == 2 and "error" in proc.stderr, args
