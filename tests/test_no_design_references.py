"""The project's text stands on its own: no references to the internal design documents.

Users never see the design documents the project started from, so neither the library, the
docs, the tests, the benchmarks nor the examples may point at them ("seed 002", "SPEC §4",
"§2.5", their folder, or untranslated Chinese text copied from them). Formulas belong in the
docs (``docs/concepts.md``), which the code cites instead.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ["cauchylin", "adapters", "docs", "tests", "benchmarks", "examples", "scripts"]
TOP_FILES = ["README.md", "CONTRIBUTING.md", "mkdocs.yml", "pyproject.toml"]
SUFFIXES = {".py", ".md", ".yml", ".yaml", ".toml", ".sh", ".txt", ".cfg"}

PATTERNS = {
    "a design document by number": re.compile(r"(?i)\bseed(?:\s+doc(?:ument)?)?\s*0\d\d\b"),
    "the internal spec": re.compile(r"\bSPEC(?:\.md)?\b"),
    "a section number": re.compile(r"§\d"),
    "the design folder": re.compile(r"shared/(?:seeds|evidence)|\.\./shared\b"),
    "Chinese text": re.compile(r"[\u4e00-\u9fff]"),
}


# Files that legitimately hold a pattern, and which one: the tokenizer tests feed it
# multilingual text on purpose.
ALLOWED = {"tests/cauchylin_hf/test_tokenizer.py": {"Chinese text"}}


def offending_lines(text: str, allowed: frozenset[str] = frozenset()) -> list[tuple[int, str, str]]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for what, pattern in PATTERNS.items():
            if what not in allowed and pattern.search(line):
                found.append((number, what, line.strip()))
    return found


def project_files() -> list[Path]:
    files = [ROOT / name for name in TOP_FILES if (ROOT / name).exists()]
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and path.suffix in SUFFIXES and path.resolve() != Path(__file__):
                files.append(path)
    return files


@pytest.mark.parametrize(
    "sample",
    [
        "the loss of seed 000 (sec. 2)",
        "Seed 002 initialisation",
        "follows SPEC §4.",
        "as 000 §2.5 says",
        "see ../shared/seeds/000.txt",
        "因果语言模型",
    ],
)
def test_the_check_finds_each_kind_of_reference(sample):
    assert offending_lines(sample), sample


@pytest.mark.parametrize(
    "sample",
    ["seed=0", "torch.manual_seed(2)", "num_token='§'", "costs § 5", "specified", "_SPECIALS"],
)
def test_the_check_leaves_ordinary_text_alone(sample):
    assert not offending_lines(sample), sample


def test_no_file_refers_to_the_design_documents():
    files = project_files()
    assert len(files) > 100  # the walk saw the project
    bad = [
        f"{path.relative_to(ROOT)}:{number}: {what}: {line}"
        for path in files
        for number, what, line in offending_lines(
            path.read_text(encoding="utf-8", errors="replace"),
            frozenset(ALLOWED.get(path.relative_to(ROOT).as_posix(), ())),
        )
    ]
    assert not bad, "references to the design documents:\n" + "\n".join(bad)
