"""``benchmarks/bench_estimators.py`` runs end to end at toy sizes and writes its table, JSON and figure.

Nothing is measured here (the numbers come from running the script by hand, see
``docs/benchmarks.md``); this keeps the script from rotting and checks what a toy run can check:
every model of each task is scored at every level, the ratios are positive numbers, the interval
coverages are shares, and bad flags are refused.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sklearn")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_estimators.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_bench_estimators_toy_run(tmp_path):
    out_json, out_png = tmp_path / "result.json", tmp_path / "figure.png"
    args = ["--datasets", "diabetes,iris", "--seeds", "2", "--levels", "0,0.2"]
    args += ["--max-iter", "3", "--hidden", "8", "--json", str(out_json), "--plot", str(out_png)]
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert out_png.read_bytes()[:8] == PNG_MAGIC
    assert out_png.stat().st_size > 10_000, "the figure is suspiciously small"
    data = json.loads(out_json.read_text())
    tables = data["tables"]
    assert set(tables) == {"diabetes", "iris"}
    diabetes, iris = tables["diabetes"]["summary"], tables["iris"]["summary"]
    assert set(diabetes) == {"causal", "mlp", "mlp_es", "huber", "ridge", "hgb"}
    assert set(iris) == {"causal", "mlp", "mlp_es", "logreg", "hgb"}
    for summary in (diabetes, iris):
        for entry in summary.values():
            assert set(entry) == {"0", "0.2"}
            assert all(
                math.isfinite(e["ratio_to_clean"]) and e["ratio_to_clean"] > 0
                for e in entry.values()
            )
    for level in ("0", "0.2"):
        for key in ("coverage_50", "coverage_90"):
            mean, _ = diabetes["causal"][level][key]
            assert 0.0 <= mean <= 1.0
        assert len(tables["diabetes"]["raw"]["causal"][level]["medae"]) == 2  # one per split
    assert {row["table"] for row in data["goals"]} == {"diabetes"}
    assert "median-error ratio corrupted / clean" in proc.stdout
    assert "goals (regression" in proc.stdout
    # --from-json re-summarises the raw results without fitting: the same summary and goals
    again = tmp_path / "again.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--from-json", str(out_json), "--json", str(again)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    redone = json.loads(again.read_text())
    assert redone["tables"] == data["tables"] and redone["goals"] == data["goals"]


def test_bench_estimators_rejects_bad_flags():
    for flags, message in (
        (["--datasets", "boston"], "--datasets: unknown ['boston']"),
        (["--levels", "0.1,0.2"], "--levels: expected shares in [0, 1) starting with 0"),
    ):
        proc = subprocess.run(
            [sys.executable, str(SCRIPT), *flags], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr


@pytest.mark.slow
def test_bench_estimators_upstream_protocol(tmp_path):
    """``--upstream``: every model scored clean and with 30% of the labels shuffled; least
    squares breaks on the shuffled labels while the robust fits do not."""
    out_json = tmp_path / "upstream.json"
    args = ["--upstream", "--seeds", "1", "--max-iter", "3", "--hidden", "8"]
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--json", str(out_json)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "30% of the training labels shuffled" in proc.stdout
    mae = json.loads(out_json.read_text())["mae"]
    for level in ("clean", "shuffled"):
        assert set(mae[level]) == {"causal", "ols", "huber", "quantile"}
        assert all(len(v) == 1 and math.isfinite(v[0]) and v[0] > 0 for v in mae[level].values())
    assert mae["shuffled"]["ols"][0] > 10 * mae["shuffled"]["huber"][0]
