"""``scripts/run.sh``: what each command installs and runs, its parts and how to skip them.

Everything here runs ``run.sh`` with ``--dry-run`` (it prints the parts and their commands and
runs nothing), after checking that the script knows that option: a run.sh without it would
install and run for real.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN_SH = ROOT / "scripts" / "run.sh"
README = ROOT / "README.md"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(RUN_SH), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHON": "python3"},
        check=False,
    )


@pytest.fixture(scope="module")
def usage() -> str:
    proc = _run("--help")
    text = proc.stdout + proc.stderr
    assert "--dry-run" in text, f"run.sh has no --dry-run: not running it\n{text}"
    return text


def _parts(usage: str) -> list[str]:
    """The part names that ``--help`` lists under test (two-space indented ``name  what``)."""
    block = usage.split("test  ", 1)[1].split("--dry-run  ", 1)[0]
    return re.findall(r"^ {8}([a-z]+) {2,}\S", block, re.M)


def _installs(out: str) -> list[set[str]]:
    """The extras of every ``pip install -e .[...]`` that a dry run prints."""
    found = []
    for line in out.splitlines():
        if "pip install" not in line:
            continue
        words = shlex.split(line)
        if "-e" in words:
            spec = words[words.index("-e") + 1]
            match = re.fullmatch(r"\.\[(.*)\]", spec)
            assert match, f"an editable install without extras: {line!r}"
            found.append(set(match.group(1).split(",")))
    return found


def test_demo_installs_only_what_the_demo_needs(usage: str) -> None:
    proc = _run("demo", "--dry-run", "--quick")
    assert proc.returncode == 0, proc.stderr
    assert _installs(proc.stdout) == [{"hf"}], proc.stdout
    last = shlex.split(proc.stdout.strip().splitlines()[-1])
    assert last[1:] == ["-m", "cauchylin_hf.app.cli", "demo", "--quick"], proc.stdout


def test_test_installs_the_tooling_and_runs_every_part_in_order(usage: str) -> None:
    proc = _run("test", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert _installs(proc.stdout) == [{"hf", "dev", "docs"}], proc.stdout
    announced = re.findall(r"^== .* \[([a-z]+)\]$", proc.stdout, re.M)
    assert announced == _parts(usage)
    assert announced[-1] == "compat" and "numerics" in announced


def test_skip_leaves_out_the_named_parts_and_refuses_unknown_ones(usage: str) -> None:
    proc = _run("test", "--dry-run", "--skip", "compat,wheel", "--skip=docs")
    assert proc.returncode == 0, proc.stderr
    announced = re.findall(r"^== .* \[([a-z]+)\]$", proc.stdout, re.M)
    assert announced == [p for p in _parts(usage) if p not in {"compat", "wheel", "docs"}]
    assert "check_wheel.sh" not in proc.stdout and "python3 scripts/compat.py\n" not in proc.stdout
    for name in ("compat", "wheel", "docs"):
        assert f"skipped (--skip {name})" in proc.stdout
    bad = _run("test", "--dry-run", "--skip", "compat,lint")
    assert bad.returncode == 2 and "'lint'" in bad.stderr and "numerics" in bad.stderr
    assert _run("demo", "--dry-run", "--skip", "compat").returncode == 2


def test_pytest_arguments_narrow_the_run_and_skip_compat(usage: str) -> None:
    proc = _run("test", "--dry-run", "tests/cauchylin", "-x")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"pytest -n 2 --dist loadfile -q tests/cauchylin -x$", proc.stdout, re.M)
    assert "compat" not in re.findall(r"^== .* \[([a-z]+)\]$", proc.stdout, re.M)
    assert "== compat: skipped (pytest arguments given" in proc.stdout


def test_readme_lists_the_parts_with_their_times_and_how_to_skip(usage: str) -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("## The two repository commands", 1)[1].split("\n## ", 1)[0]
    # a row: the part, what it runs, then one or more time columns
    rows = re.findall(r"^\| `([a-z]+)` \|[^|\n]+((?:\|[^|\n]*)+)\|$", section, re.M)
    assert [name for name, _ in rows] == _parts(usage)
    for name, times in rows:
        assert re.search(r"\d+ s", times), f"the README gives no time for {name}"
    assert "--skip" in section and "--dry-run" in section
    assert "2 CPU cores" in section
