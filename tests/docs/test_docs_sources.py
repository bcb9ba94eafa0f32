"""The documentation's sources hold no control characters.

A backslash sequence of LaTeX written in a string that Python (or an editor) interprets turns
into a control character: ``\\text`` into a TAB and ``ext``, ``\\rvert`` into a carriage return
and ``vert``, ``\\frac`` into a form feed. The page then shows "W_ xtreg". This test reads every
Markdown page, stylesheet and script of ``docs/`` (the vendored KaTeX aside), ``mkdocs.yml``, the
README, and every docstring of the packages (the API reference renders them), and fails on any
character below U+0020 other than the newline, and on DEL. (TAB is refused too: no source needs
it, and it is what ``\\t`` of ``\\text`` becomes.)
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]")
NAMES = {"\t": "TAB", "\r": "CR", "\f": "FF", "\b": "BS", "\v": "VT", "\a": "BEL", "\x00": "NUL"}


def _describe(text: str, where: str) -> list[str]:
    found = []
    for match in CONTROL.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        char = match.group()
        name = NAMES.get(char, f"U+{ord(char):04X}")
        start = text.rfind("\n", 0, match.start()) + 1
        context = text[start : match.end() + 20].split("\n")[0]
        found.append(f"{where}:{line}: {name} in {context!r}")
    return found


def source_files() -> list[Path]:
    """The documentation sources: pages, stylesheets, own scripts, the site config, README."""
    docs = ROOT / "docs"
    files = [p for p in docs.rglob("*") if p.suffix in {".md", ".css", ".js", ".yml", ".yaml"}]
    files = [p for p in files if "katex" not in p.relative_to(docs).parts]
    return sorted([*files, ROOT / "mkdocs.yml", ROOT / "README.md"])


def docstrings(path: Path) -> list[tuple[int, str]]:
    """``(line, text)`` of every docstring of a Python file, attribute docstrings included
    (a string statement anywhere: the API reference renders those too)."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    return [
        (node.lineno, node.value.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    ]


def control_characters(text: str, where: str) -> list[str]:
    """Each control character of ``text`` as ``where:line: NAME in '...'``."""
    return _describe(text, where)


def test_the_check_finds_what_python_makes_of_latex() -> None:
    """It can fail: the two cases the issue found ("\\text" and "\\rvert" in a plain string)."""
    page = "$W_\text{reg}$ and $\\lvert W\rvert$\n"  # on purpose not raw: a TAB and a CR
    found = control_characters(page, "page.md")
    assert [f.split(": ")[1].split(" ")[0] for f in found] == ["TAB", "CR"]
    assert all(f.startswith("page.md:1:") for f in found)
    assert control_characters(r"$W_\text{reg}$ and $\lvert W\rvert$" + "\n", "ok.md") == []
    planted = ast.parse('def f():\n    """Returns $\\frac{a}{b}$."""\n')
    (doc,) = [n.value.value for n in ast.walk(planted) if isinstance(n, ast.Expr)]
    assert "FF" in control_characters(doc, "f")[0]


def test_no_control_characters_in_the_documentation_sources() -> None:
    problems = []
    for path in source_files():
        rel = path.relative_to(ROOT).as_posix()
        # bytes, decoded: reading as text would turn a lone CR into a newline
        problems += control_characters(path.read_bytes().decode("utf-8"), rel)
    assert not problems, "control characters in the docs:\n" + "\n".join(problems)


def test_no_control_characters_in_docstrings() -> None:
    problems = []
    for package in (ROOT / "cauchylin", ROOT / "adapters"):
        for path in sorted(package.rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for line, text in docstrings(path):
                problems += control_characters(text, f"{rel}:{line} (docstring)")
    assert not problems, "control characters in docstrings:\n" + "\n".join(problems)


# A figure drawn wider than this many pixels (a row of many panels) is unreadable when the text
# column scales it down; the page marks it ``{ .figure-wide }`` so it keeps a readable size and
# scrolls sideways (docs/stylesheets/extra.css), a click opening it alone.
WIDE_FIGURE_PX = 2000
FIGURE = re.compile(r"!\[[^\]]*\]\((assets/[^)]+\.png)\)")


def _png_width(path: Path) -> int:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return int.from_bytes(head[16:20], "big")


def test_wide_figures_keep_a_readable_size():
    pages = sorted((ROOT / "docs").glob("*.md"))
    seen, unmarked = 0, []
    for page in pages:
        lines = page.read_text("utf-8").splitlines()
        for i, line in enumerate(lines):
            for match in FIGURE.finditer(line):
                seen += 1
                if _png_width(ROOT / "docs" / match.group(1)) <= WIDE_FIGURE_PX:
                    continue
                after = lines[i + 1].strip() if i + 1 < len(lines) else ""
                if after != "{ .figure-wide }":
                    unmarked.append(f"{page.name}:{i + 1}: {match.group(1)}")
    assert seen, "no figure found: the pattern no longer matches the pages"
    assert not unmarked, "wide figures without { .figure-wide } under them:\n" + "\n".join(unmarked)
    css = (ROOT / "docs" / "stylesheets" / "extra.css").read_text("utf-8")
    assert ".figure-wide" in css, "extra.css lost the rule that keeps wide figures readable"


def test_the_installation_page_checks_torch_once_numpy_is_there():
    """torch imported before NumPy is installed warns "Failed to initialize NumPy": the page's
    torch check comes after the step that installs cauchylin (which brings NumPy)."""
    text = (ROOT / "docs" / "installation.md").read_text(encoding="utf-8")
    check = text.index('python -c "import torch')
    install = text.index('pip install -e ".[hf]"')
    assert install < check, "the torch check runs before NumPy is installed"
