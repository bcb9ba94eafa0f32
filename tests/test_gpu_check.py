"""The GPU check's dry run: without a CUDA GPU, ``scripts/gpu_check.sh`` says so and runs its own
plumbing at toy sizes on the CPU -- every benchmark, the collection of the ``cuda`` test cases,
the README recipe through the command line (two training steps), the JSON and the markdown
table -- so the script cannot rot between GPU runs.

Its numbers are not checked (toy sizes on a busy CPU mean nothing), only that each is a positive
finite ratio, that the ``cuda`` cases exist, and that both files say it was a dry run.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = {"ovr_loss", "decode", "train_step", "elementwise"}


def _gpu_here() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0


def test_gpu_check_dry_run(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable}
    if _gpu_here():  # the real check belongs to a GPU session, not to the suite
        cmd = [sys.executable, "scripts/gpu_check.py", "--dry-run", "--out", str(out)]
    else:
        cmd = ["bash", "scripts/gpu_check.sh", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    if cmd[0] == "bash":
        assert "no CUDA GPU on this machine" in proc.stdout
    assert "DRY RUN" in proc.stdout
    result = json.loads((out / "gpu_check.json").read_text())
    assert result["dry_run"] is True and result["device_name"] == "CPU"
    # the CUDA cases of the suite exist (collected; a dry run does not run them)
    assert result["tests"]["exit"] == 0
    collected = int(result["tests"]["summary"].split("/")[0])
    assert collected >= 20, result["tests"]["summary"]
    # the README recipe through the command line: train, predict and evaluate all ran
    commands = result["cli"]["commands"]
    assert list(commands) == ["train", "predict", "evaluate"] and "error" not in result["cli"]
    assert all(c["exit"] == 0 for c in commands.values()), commands
    assert set(result["benchmarks"]) == {"fp32", "bf16"}
    for per in result["benchmarks"].values():
        assert set(per) == BENCHMARKS
        for name, bench in per.items():
            assert "error" not in bench, (name, bench)
            assert bench["ratios"], name
            for value in bench["ratios"].values():
                assert math.isfinite(value) and value > 0
    table = (out / "gpu_check.md").read_text()
    assert "DRY RUN" in table
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    n_ratios = sum(len(b["ratios"]) for per in result["benchmarks"].values() for b in per.values())
    assert len([r for r in rows if r.split("|")[3].strip() not in ("ratio", "note")]) == n_ratios


def test_below_the_floors_is_refused_unless_asked_and_then_written_down(tmp_path, monkeypatch):
    """An interpreter below a declared floor is refused; ``--below-floors`` runs it and both files
    say which floor it is below (a GPU image whose torch cannot be upgraded there)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import gpu_check

    monkeypatch.setattr(gpu_check, "NEEDS", {**gpu_check.NEEDS, "torch": (99, 0)})
    base = ["--dry-run", "--skip-tests", "--only", "elementwise", "--out", str(tmp_path)]
    assert gpu_check.main(base) == 2
    assert not (tmp_path / "gpu_check.json").exists()
    assert gpu_check.main([*base, "--below-floors"]) == 0
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    assert len(result["below_floors"]) == 1 and "below 99.0" in result["below_floors"][0]
    assert "Below the declared floors: torch" in (tmp_path / "gpu_check.md").read_text()
    monkeypatch.setattr(gpu_check, "NEEDS", {**gpu_check.NEEDS, "no-such-package": (1, 0)})
    assert gpu_check.main([*base, "--below-floors"]) == 2  # missing is not "below"
