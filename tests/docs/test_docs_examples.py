"""The documentation cannot rot: its Python examples run, its pages are reachable, it works offline.

* Every fenced code block whose language is ``python`` (or ``py``) in ``docs/**/*.md`` is one test,
  with the id ``<page>:<line>`` (the line of the opening fence). An info string with options, e.g.
  ```` ```python title="train.py" ````, still counts. Blocks of one page run in order in one shared
  namespace, as a reader would run them; running a single block's test first runs the blocks
  before it. Tracebacks point at the Markdown file and line.
* Inside a Python block, a snippet line ``--8<-- "examples/docs/<name>.py"`` is replaced by that
  file, as ``pymdownx.snippets`` does when the site is built. Files in ``examples/docs/`` that no
  page includes run as tests of their own.
* A block that is illustrative and cannot run is opted out with an HTML comment on the line(s)
  just before its fence (blank lines in between are allowed)::

      <!-- docs-test: skip: needs a downloaded Qwen checkpoint -->

  It is reported as skipped with that reason (``pytest -ra`` lists it); use it sparingly.
* Each page runs in its own temporary working directory, so examples may write files.
* **Printed output is compared.** A block followed (blank lines apart) by a ``text`` block titled
  ``Output``, e.g. ```` ```text title="Output" ````, must print exactly that (trailing spaces and
  blank lines at the ends aside): every word and every number, counts included. Where some
  numbers are measured by a training run, whose last digits depend on the CPU's kernels and
  thread count, a comment just above the output block names those numbers and their relative
  tolerance::

      <!-- docs-test: output rtol=0.05 measured="error ~;" "price ~ |" "[~, ~]" -->

  Each quoted pattern is a piece of the shown output in which ``~`` stands for a measured number
  (a run of spaces matches any run of spaces, ``*`` any word characters such as ``_50``). Only
  the numbers at a ``~`` may differ, by ``rtol`` relative to the larger of the two; every other
  number (a row count, a step, a level, an input echoed back) must match exactly, as must the
  text. A pattern that matches nothing in its block, ``rtol`` without ``measured`` or
  ``measured`` without ``rtol`` is an error of the page.

* **Updating the shown output.** When a change to the library changes what a page prints,
  ``python tests/docs/test_docs_examples.py docs/quickstart.md`` runs the page's blocks in order
  and prints each block's output; with ``--write`` it also writes them into the page's
  ``Output`` blocks (the marks stay; a measured pattern that no longer matches is reported).
  Run it with one thread (``OMP_NUM_THREADS=1``), as the tests do. It works on ``README.md``
  too.
* **Shell blocks run where asked.** A ``bash`` (or ``console``, ``shell``, ``sh``) block marked
  ``<!-- docs-test: run -->`` runs with ``bash -euo pipefail`` in the page's directory, the
  current Python's scripts first on ``PATH`` (``cauchylin-lm``), ``OMP_NUM_THREADS=1``; its
  standard output is compared like a Python block's. Other shell blocks are not run.
* Site checks: every page in ``docs/`` is in the ``nav`` of ``mkdocs.yml`` and every nav entry
  exists; the built site (``mkdocs build --strict``) loads no script, stylesheet, font or image
  from the network, and every relative ``url(...)`` in its CSS (the bundled KaTeX fonts) resolves.
"""

from __future__ import annotations

import contextlib
import fnmatch
import io
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, ClassVar

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXAMPLES = ROOT / "examples" / "docs"
MKDOCS_YML = ROOT / "mkdocs.yml"

PYTHON_LANGS = {"python", "py", "python3"}
SHELL_LANGS = {"bash", "console", "shell", "sh"}
FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*)$")
SKIP_MARK = re.compile(r"<!--\s*docs-test:\s*skip\b:?\s*(?P<reason>.*?)\s*-->")
RUN_MARK = re.compile(r"<!--\s*docs-test:\s*run\s*-->")
OUTPUT_MARK = re.compile(
    r"<!--\s*docs-test:\s*output\s+rtol=(?P<rtol>[0-9.eE+-]+)"
    r"(?:\s+measured=(?P<measured>(?:\s*\"[^\"]+\")+))?\s*-->"
)
ANY_OUTPUT_MARK = re.compile(r"<!--\s*docs-test:\s*output\b")
OUTPUT_TITLE = re.compile(r"""^text\b.*\btitle=(["'])Output\1""")
NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
SNIPPET = re.compile(
    r"^(?P<indent>[ \t]*)(?P<mark>-{1,}8<-{1,})[ \t]+(?P<q>[\"']?)(?P<path>[^\"']+)(?P=q)[ \t]*$"
)


# --------------------------------------------------------------------------------------------
# Collection


@dataclass
class Block:
    """One runnable unit: a fenced Python block of a page, or a standalone example file."""

    page: str  # path relative to the repository root, e.g. "docs/concepts.md"
    line: int  # 1-based line of the opening fence (1 for a standalone file)
    code: str
    skip_reason: str | None = None
    includes: list[str] = field(default_factory=list)
    shell: bool = False  # a marked shell block, run with bash
    expected: str | None = None  # the output block that follows, if any
    rtol: float = 0.0  # relative tolerance of the measured numbers in ``expected``
    measured: tuple[str, ...] = ()  # patterns of the measured numbers (``~`` marks one)
    output_lines: tuple[int, int] | None = None  # 0-based: the Output body's first line, its end
    output_indent: str = ""  # the Output fence's indentation

    @property
    def test_id(self) -> str:
        name = self.page.removeprefix("docs/")
        return f"{name}:{self.line}"


def _language(info: str) -> str:
    info = info.strip()
    if info.startswith("{"):  # ``` {.python title="x"}
        match = re.search(r"\.([\w+-]+)", info)
        return match.group(1).lower() if match else ""
    return info.split(None, 1)[0].lower() if info else ""


def _expand_snippets(code: str, where: str) -> tuple[str, list[str]]:
    """Replace ``--8<-- "file"`` lines by the file's text, like pymdownx.snippets does."""
    out: list[str] = []
    included: list[str] = []
    for line in code.splitlines():
        match = SNIPPET.match(line)
        if not match:
            out.append(line)
            continue
        path = match.group("path").strip()
        target = ROOT / path
        if not target.is_file():
            raise FileNotFoundError(f"{where}: snippet {path!r} not found (relative to {ROOT})")
        included.append(path)
        text = target.read_text(encoding="utf-8")
        out.extend(match.group("indent") + t for t in text.splitlines())
    return "\n".join(out) + "\n", included


def _normal(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.strip("\n").splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return lines


def measured_spans(line: str, measured: tuple[str, ...]) -> set[tuple[int, int]]:
    """The spans of the numbers of ``line`` (as :data:`NUMBER` finds them) that a pattern of
    ``measured`` marks with ``~``: those starting where a ``~`` of a match starts (``"price ~."``
    marks ``224.`` in ``price 224.``)."""
    starts = {
        match.start(g)
        for pattern in measured
        for match in _measured_regex(pattern).finditer(line)
        for g in range(1, len(match.groups()) + 1)
    }
    return {m.span() for m in NUMBER.finditer(line) if m.start() in starts}


def _measured_regex(pattern: str) -> re.Pattern[str]:
    """``~`` a number (captured), a run of spaces any run of spaces, ``*`` word characters."""
    parts = []
    for piece in re.split(r"(~|\s+|\*)", pattern):
        if piece == "~":
            parts.append(f"({NUMBER.pattern})")
        elif piece == "*":
            parts.append(r"\w*")
        elif piece and piece.isspace():
            parts.append(r"\s+")
        else:
            parts.append(re.escape(piece))
    return re.compile("".join(parts))


def _output_mark(above: str, expected: str, where: str) -> tuple[float, tuple[str, ...]]:
    """``(rtol, measured patterns)`` of the comment above an Output block (``(0, ())``: none)."""
    if not ANY_OUTPUT_MARK.search(above):
        return 0.0, ()
    mark = OUTPUT_MARK.search(above)
    if mark is None or mark.group("measured") is None:
        raise ValueError(
            f"{where}: an output mark reads <!-- docs-test: output rtol=R "
            f'measured="pattern ~" ... -->, naming the measured numbers with ~ (got {above.strip()!r})'
        )
    measured = tuple(re.findall(r'"([^"]+)"', mark.group("measured")))
    lines = _normal(expected)
    for pattern in measured:
        if "~" not in pattern:
            raise ValueError(f"{where}: the measured pattern {pattern!r} marks no number with ~")
        if not any(measured_spans(line, (pattern,)) for line in lines):
            raise ValueError(f"{where}: the measured pattern {pattern!r} matches nothing shown")
    return float(mark.group("rtol")), measured


def parse_markdown(path: Path) -> list[Block]:
    """The runnable blocks of one Markdown file, in order, each with its expected output."""
    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    last: Block | None = None  # the runnable block an output block may follow
    last_end = -1  # the line after that block's closing fence
    i = 0
    while i < len(lines):
        match = FENCE_OPEN.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, info = match.group("indent"), match.group("fence"), match.group("info")
        start = i
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        if j == len(lines):
            raise ValueError(f"{rel}:{start + 1}: code fence is never closed")
        body = lines[i + 1 : j]
        i = j + 1
        # Remove the fence's own indentation (blocks inside tabs, admonitions, lists).
        body = [b[len(indent) :] if b.startswith(indent) else b.lstrip() for b in body]
        # Markers: an HTML comment on the nearest non-blank line above the fence.
        k = start - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        above = lines[k] if k >= 0 else ""
        if OUTPUT_TITLE.match(info.strip()):
            between = lines[last_end:start]
            if last is None or any(t.strip() and not ANY_OUTPUT_MARK.search(t) for t in between):
                raise ValueError(
                    f"{rel}:{start + 1}: an Output block must follow a runnable block "
                    "(a python block, or a shell block marked <!-- docs-test: run -->)"
                )
            last.expected = "\n".join(body)
            last.output_lines, last.output_indent = (start + 1, j), indent
            last.rtol, last.measured = _output_mark(above, last.expected, f"{rel}:{start + 1}")
            last = None
            continue
        language = _language(info)
        shell = language in SHELL_LANGS and bool(RUN_MARK.search(above))
        if language not in PYTHON_LANGS and not shell:
            last = None
            continue
        code = textwrap.dedent("\n".join(body))
        included: list[str] = []
        if not shell:
            code, included = _expand_snippets(code, f"{rel}:{start + 1}")
        skip = SKIP_MARK.search(above)
        reason = None
        if skip:
            reason = skip.group("reason") or "marked <!-- docs-test: skip -->"
        last = Block(rel, start + 1, code, reason, included, shell=shell)
        last_end = i
        blocks.append(last)
    return blocks


def collect() -> dict[str, list[Block]]:
    """Blocks per page (pages in sorted order), plus standalone example files."""
    pages: dict[str, list[Block]] = {}
    included: set[str] = set()
    for md in sorted(DOCS.rglob("*.md")):
        blocks = parse_markdown(md)
        for b in blocks:
            included.update(b.includes)
        if blocks:
            pages[md.relative_to(ROOT).as_posix()] = blocks
    if EXAMPLES.is_dir():
        for py in sorted(EXAMPLES.glob("*.py")):
            rel = py.relative_to(ROOT).as_posix()
            if rel not in included:
                pages[rel] = [Block(rel, 1, py.read_text(encoding="utf-8"))]
    return pages


PAGES = collect()
ALL_BLOCKS = [(page, n) for page, blocks in PAGES.items() for n in range(len(blocks))]


# --------------------------------------------------------------------------------------------
# Execution: one namespace and one working directory per page, blocks in order


@dataclass
class PageState:
    namespace: dict[str, Any]
    workdir: Path
    done: int = 0  # number of blocks executed (or skipped) so far
    failed_at: str | None = None


_STATE: dict[str, PageState] = {}


def _run_shell(block: Block, state: PageState) -> str:
    env = {
        **os.environ,
        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
        "OMP_NUM_THREADS": "1",
        "NO_COLOR": "1",
    }
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.code],
        cwd=state.workdir,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"{block.test_id}: the shell block exited with {proc.returncode}\n"
            f"--- stdout\n{proc.stdout}--- stderr\n{proc.stderr}"
        )
    return proc.stdout


def _run_block(block: Block, state: PageState) -> None:
    if block.shell:
        out = _run_shell(block, state)
    else:
        # Leading newlines make tracebacks report the Markdown file's own line numbers.
        offset = block.line if block.page.endswith(".md") else 0
        source = "\n" * offset + block.code
        code = compile(source, str(ROOT / block.page), "exec")
        old_cwd = os.getcwd()
        os.chdir(state.workdir)
        buffer = io.StringIO()
        try:
            if block.expected is None:
                exec(code, state.namespace)
            else:
                with contextlib.redirect_stdout(buffer):
                    exec(code, state.namespace)
        finally:
            os.chdir(old_cwd)
        out = buffer.getvalue()
    if block.expected is not None:
        problem = compare_output(out, block.expected, block.rtol, block.measured)
        if problem:
            raise AssertionError(f"{block.test_id}: the printed output differs: {problem}")


def compare_output(
    actual: str, expected: str, rtol: float = 0.0, measured: tuple[str, ...] = ()
) -> str | None:
    """None when ``actual`` prints ``expected``; else what differs (for the failure message).

    Lines are compared after removing trailing spaces and blank lines at both ends. The text
    between the numbers must be equal, and so must every number, except those that a pattern of
    ``measured`` marks with ``~`` in ``expected`` (see :func:`measured_spans`): these may differ by
    ``rtol`` relative to the larger of the two (``1e-12`` absolute at least).
    """
    got, want = _normal(actual), _normal(expected)
    if len(got) != len(want):
        return f"{len(got)} lines printed, {len(want)} expected\n--- printed\n{actual}"
    for n, (g, w) in enumerate(zip(got, want, strict=True), 1):
        if g == w:
            continue
        if rtol > 0 and NUMBER.split(g) == NUMBER.split(w):
            spans = measured_spans(w, measured)
            printed = NUMBER.findall(g)
            shown = list(NUMBER.finditer(w))
            if len(printed) == len(shown) and all(
                x == y.group()
                or (
                    y.span() in spans
                    and abs(float(x) - float(y.group()))
                    <= max(rtol * max(abs(float(x)), abs(float(y.group()))), 1e-12)
                )
                for x, y in zip(printed, shown, strict=True)
            ):
                continue
        return f"line {n}\n  printed:  {g!r}\n  expected: {w!r}\n--- printed\n{actual}"
    return None


def _page_state(page: str, tmp_path_factory: pytest.TempPathFactory) -> PageState:
    if page not in _STATE:
        import torch

        torch.manual_seed(0)
        workdir = tmp_path_factory.mktemp(re.sub(r"\W+", "_", page))
        _STATE[page] = PageState({"__name__": "__docs_example__"}, workdir)
    return _STATE[page]


@pytest.mark.parametrize(
    ("page", "index"),
    ALL_BLOCKS,
    ids=[PAGES[p][n].test_id for p, n in ALL_BLOCKS],
)
def test_docs_example(page: str, index: int, tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ.setdefault("MPLBACKEND", "Agg")
    blocks = PAGES[page]
    state = _page_state(page, tmp_path_factory)
    # Run the blocks before this one first (they normally ran as their own tests already).
    while state.done < index:
        earlier = blocks[state.done]
        state.done += 1
        if earlier.skip_reason is not None or state.failed_at is not None:
            continue
        try:
            _run_block(earlier, state)
        except BaseException:
            state.failed_at = earlier.test_id
            raise
    block = blocks[index]
    if state.done == index:
        state.done += 1
    if block.skip_reason is not None:
        pytest.skip(f"{block.test_id}: {block.skip_reason}")
    if state.failed_at is not None:
        pytest.fail(f"an earlier example on this page failed ({state.failed_at})", pytrace=False)
    try:
        _run_block(block, state)
    except BaseException:
        state.failed_at = block.test_id
        raise


def test_docs_examples_were_found() -> None:
    """Guards the collector itself: the concepts page has runnable examples."""
    assert "docs/concepts.md" in PAGES, "no Python examples collected from docs/concepts.md"
    assert all(b.code.strip() for blocks in PAGES.values() for b in blocks)


def test_collector_handles_info_strings_skips_and_indentation(tmp_path: Path) -> None:
    md = tmp_path / "page.md"
    text = textwrap.dedent(
        """\
        # t
        ```python title="a.py"
        x = 1
        ```

        <!-- docs-test: skip: illustrative -->

        ```py
        raise SystemExit
        ```
        ```bash
        echo no
        ```
        === "Tab"

            ```python
            y = x + 1
            ```
        """
    )
    md.write_text(text, encoding="utf-8")
    blocks = parse_markdown(md)
    assert [(b.line, b.code.strip(), b.skip_reason) for b in blocks] == [
        (2, "x = 1", None),
        (8, "raise SystemExit", "illustrative"),
        (16, "y = x + 1", None),
    ]


def test_output_blocks_attach_to_the_block_before_and_shell_blocks_run_when_marked(
    tmp_path: Path,
) -> None:
    md = tmp_path / "page.md"
    md.write_text(
        textwrap.dedent(
            """\
            ```python
            print(2 + 2)
            ```

            ```text title="Output"
            4
            ```
            <!-- docs-test: run -->
            ```bash
            echo hi 3
            ```
            <!-- docs-test: output rtol=0.1 measured="hi ~" -->
            ```text title="Output"
            hi 3
            ```
            ```bash
            echo not run
            ```
            """
        ),
        encoding="utf-8",
    )
    blocks = parse_markdown(md)
    assert [(b.line, b.shell, b.expected, b.rtol, b.measured) for b in blocks] == [
        (1, False, "4", 0.0, ()),
        (9, True, "hi 3", 0.1, ("hi ~",)),
    ]
    orphan = tmp_path / "orphan.md"
    orphan.write_text('```python\nx = 1\n```\ntext between\n```text title="Output"\n1\n```\n')
    with pytest.raises(ValueError, match="must follow a runnable block"):
        parse_markdown(orphan)
    state = PageState({}, tmp_path)
    _run_block(blocks[0], state)
    _run_block(blocks[1], state)
    wrong = Block("docs/x.md", 1, "print(5)", expected="4")
    with pytest.raises(AssertionError, match="expected: '4'"):
        _run_block(wrong, state)


ERROR = "median absolute error ~;"


@pytest.mark.parametrize(
    ("printed", "expected", "rtol", "measured", "same"),
    [
        ("a 1.00 b\n", "a 1.00 b", 0.0, (), True),
        ("a 1.01 b", "a 1.00 b", 0.0, (), False),
        ("a 1.01 b", "a 1.00 b", 0.02, ("a ~",), True),
        ("a 1.03 b", "a 1.00 b", 0.02, ("a ~",), False),
        ("a 1.01 c", "a 1.00 b", 0.02, ("a ~",), False),  # the words must match
        ("price 226.  ", "price 230.", 0.02, ("price ~",), True),
        ("price 226.", "price 224.", 0.02, ("price ~.",), True),  # the pattern's "." too
        ("price 236.", "price 224.", 0.02, ("price ~.",), False),
        ("-5 and 3", "5 and 3", 0.5, ("~ and",), False),  # a sign is part of the number
        ("x\ny", "x", 0.0, (), False),
        ("\nx\n\n", "x", 0.0, (), True),
        # A number no pattern marks is a count: exact, whatever the tolerance.
        ("calibrated on 96 rows", "calibrated on 100 rows", 0.35, ("error ~",), False),
        ("3 of 3 contexts", "2 of 3 contexts", 0.5, (ERROR,), False),
        ("1.01 and 1.00", "1.00 and 1.00", 0.02, ("~ and",), True),
        ("1.00 and 1.01", "1.00 and 1.00", 0.02, ("~ and",), False),  # only the first
        # The measured number beside exact ones on one line.
        (
            "on 96 rows: median absolute error 4.4; median (343.5)",
            "on 96 rows: median absolute error 4.6; median (343.5)",
            0.1,
            (ERROR,),
            True,
        ),
        (
            "on 96 rows: median absolute error 4.4; median (340.5)",
            "on 96 rows: median absolute error 4.6; median (343.5)",
            0.1,
            (ERROR,),
            False,
        ),
        # Spaces match any run of spaces, * any word characters.
        ("coverage_90      0.86", "coverage_90      0.84", 0.05, ("coverage_* ~",), True),
        ("count            51", "count            50", 0.05, ("coverage_* ~",), False),
    ],
)
def test_compare_output(
    printed: str, expected: str, rtol: float, measured: tuple[str, ...], same: bool
) -> None:
    assert (compare_output(printed, expected, rtol, measured) is None) == same


@pytest.mark.parametrize(
    ("mark", "problem"),
    [
        ("<!-- docs-test: output rtol=0.1 -->", "naming the measured numbers"),
        ('<!-- docs-test: output measured="a ~" -->', "naming the measured numbers"),
        ('<!-- docs-test: output rtol=0.1 measured="b ~" -->', "matches nothing shown"),
        ('<!-- docs-test: output rtol=0.1 measured="a 1" -->', "marks no number"),
    ],
)
def test_an_output_mark_must_name_measured_numbers_that_exist(
    tmp_path: Path, mark: str, problem: str
) -> None:
    md = tmp_path / "page.md"
    md.write_text(f'```python\nprint("a 1")\n```\n{mark}\n```text title="Output"\na 1\n```\n')
    with pytest.raises(ValueError, match=problem):
        parse_markdown(md)
    md.write_text(
        '```python\nprint("a 1 b 2")\n```\n'
        '<!-- docs-test: output rtol=0.1 measured="a ~" "b ~" -->\n'
        '```text title="Output"\na 1 b 2\n```\n'
    )
    assert parse_markdown(md)[0].measured == ("a ~", "b ~")


# --------------------------------------------------------------------------------------------
# Site checks


class _IgnoreTagsLoader:
    """A yaml SafeLoader that accepts mkdocs' ``!!python/name:`` and ``!ENV`` tags."""

    @staticmethod
    def load(text: str) -> dict[str, Any]:
        import yaml

        class Loader(yaml.SafeLoader):
            pass

        def _any(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> None:
            return None

        Loader.add_multi_constructor("tag:yaml.org,2002:python/", _any)
        Loader.add_multi_constructor("!", _any)
        return yaml.load(text, Loader=Loader)


def _nav_pages(nav: Any) -> list[str]:
    out: list[str] = []
    if isinstance(nav, str):
        if not re.match(r"^[a-z]+://", nav):
            out.append(nav)
    elif isinstance(nav, list):
        for item in nav:
            out.extend(_nav_pages(item))
    elif isinstance(nav, dict):
        for value in nav.values():
            out.extend(_nav_pages(value))
    return out


def test_every_page_is_in_the_nav() -> None:
    config = _IgnoreTagsLoader.load(MKDOCS_YML.read_text(encoding="utf-8"))
    nav = _nav_pages(config.get("nav", []))
    docs_dir = ROOT / config.get("docs_dir", "docs")
    not_in_nav = [p for p in str(config.get("not_in_nav", "")).splitlines() if p.strip()]
    pages = sorted(p.relative_to(docs_dir).as_posix() for p in docs_dir.rglob("*.md"))
    missing = [
        p
        for p in pages
        if p not in nav
        and not any(
            fnmatch.fnmatch("/" + p, pat.strip()) or fnmatch.fnmatch(p, pat.strip())
            for pat in not_in_nav
        )
    ]
    assert not missing, f"pages in docs/ that the nav of mkdocs.yml does not list: {missing}"
    dangling = [p for p in nav if not (docs_dir / p).is_file()]
    assert not dangling, f"nav entries with no file in docs/: {dangling}"
    assert len(nav) == len(set(nav)), "a page is listed twice in the nav"


class _AssetCollector(HTMLParser):
    """Collects the URLs a page loads: scripts, stylesheets and other linked resources, images."""

    LINK_RELS: ClassVar[frozenset[str]] = frozenset(
        {
            "stylesheet",
            "preload",
            "modulepreload",
            "preconnect",
            "dns-prefetch",
            "prefetch",
            "icon",
            "manifest",
        }
    )

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[tuple[str, str]] = []
        self.inline_css: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "script" and a.get("src"):
            self.urls.append(("script", a["src"]))
        elif tag == "link" and set(a.get("rel", "").lower().split()) & self.LINK_RELS:
            self.urls.append((f"link rel={a.get('rel')}", a.get("href", "")))
        elif tag in {"img", "iframe", "source", "audio", "video"} and a.get("src"):
            self.urls.append((tag, a["src"]))
        elif tag == "style":
            self._in_style = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "style":
            self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.inline_css.append(data)


REMOTE = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)
CSS_URL = re.compile(r"url\(\s*(['\"]?)(?P<url>[^'\")]+)\1\s*\)")
CSS_IMPORT = re.compile(r"@import\s+(['\"])(?P<url>[^'\"]+)\1")


def _css_urls(css: str) -> list[str]:
    return [m.group("url").strip() for m in CSS_URL.finditer(css)] + [
        m.group("url").strip() for m in CSS_IMPORT.finditer(css)
    ]


@pytest.fixture(scope="module")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
    except ImportError as exc:  # the docs extra is not installed: say so, loudly
        pytest.skip(f"the site checks need the docs extra (pip install -e '.[docs]'): {exc}")
    site = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        # No -q: it lowers the log level, and warnings below it are not counted by --strict.
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    return site


def test_built_site_needs_no_network(built_site: Path) -> None:
    problems: list[str] = []
    html_files = sorted(built_site.rglob("*.html"))
    assert html_files, "the build produced no HTML"
    for html in html_files:
        parser = _AssetCollector()
        parser.feed(html.read_text(encoding="utf-8"))
        rel = html.relative_to(built_site).as_posix()
        for kind, url in parser.urls:
            if REMOTE.match(url):
                problems.append(f"{rel}: {kind} loads {url}")
        for css in parser.inline_css:
            problems += [
                f"{rel}: inline style loads {u}" for u in _css_urls(css) if REMOTE.match(u)
            ]
    for css_file in sorted(built_site.rglob("*.css")):
        rel = css_file.relative_to(built_site).as_posix()
        for url in _css_urls(css_file.read_text(encoding="utf-8")):
            if url.startswith(("data:", "#")):
                continue
            if REMOTE.match(url):
                problems.append(f"{rel}: url({url}) is remote")
                continue
            target = (css_file.parent / url.split("#", 1)[0].split("?", 1)[0]).resolve()
            if not target.is_file():
                problems.append(f"{rel}: url({url}) does not resolve to a file in the site")
    assert not problems, "the built site is not self-contained:\n" + "\n".join(problems)


def test_math_is_bundled_and_rendered_by_arithmatex(built_site: Path) -> None:
    page = (built_site / "concepts.html").read_text(encoding="utf-8")
    assert 'class="arithmatex"' in page, "arithmatex (generic mode) produced no math elements"
    assert "javascripts/katex/katex.min.js" in page and "javascripts/katex-init.js" in page
    fonts = list((built_site / "javascripts" / "katex" / "fonts").glob("*.woff2"))
    assert len(fonts) >= 10, "the KaTeX woff2 fonts are not in the site"


def _screenshot_script() -> Any:
    """``scripts/docs_screenshot.py`` as a module: its Chromium command line is the one home."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "docs_screenshot", ROOT / "scripts" / "docs_screenshot.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_site_works_opened_from_disk(built_site: Path, tmp_path: Path) -> None:
    """Opened from disk (file://, no server) in headless Chromium: an internal link of the home
    page reaches its page (not a folder listing), and search answers from the inlined index."""
    import shutil
    from urllib.parse import urljoin

    shots = _screenshot_script()
    binary = next(
        (
            shutil.which(n)
            for n in ("chromium", "chromium-browser", "google-chrome")
            if shutil.which(n)
        ),
        None,
    )
    if binary is None:
        pytest.skip(
            "Chromium is not installed (Debian: apt-get install chromium): the file:// check needs a real browser"
        )

    def rendered(url: str, name: str) -> str:
        cmd = [*shots.chromium_args(binary, tmp_path / name, 1280, 900, False), "--dump-dom", url]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
        assert proc.returncode == 0, f"chromium failed on {url}:\n{proc.stderr[-2000:]}"
        return proc.stdout

    home = (built_site / "index.html").as_uri()
    links = re.findall(r'<a\b[^>]*\bhref="([^"#?:]*quickstart[^"#?]*)"', rendered(home, "home"))
    assert links, "the home page links no quickstart page"
    target = urljoin(home, links[0])
    page = rendered(target, "link")
    assert "Index of" not in page, f"{links[0]!r} from the home page opens a folder listing"
    assert 'class="md-content"' in page and ">Quickstart<" in page, f"{target} is not the page"
    search = rendered(target + "?q=calibrated", "search")
    assert 'class="md-search"' in search, "the page has no search box"
    assert "md-search-result__item" in search, "search found nothing from file://"


class _TextOutsideMath(HTMLParser):
    """The text of a page outside math (``.arithmatex``), code, scripts and styles."""

    HIDING: ClassVar[frozenset[str]] = frozenset(
        {"code", "pre", "kbd", "samp", "script", "style", "textarea"}
    )
    VOID: ClassVar[frozenset[str]] = frozenset(
        {
            "area",
            "base",
            "br",
            "col",
            "embed",
            "hr",
            "img",
            "input",
            "link",
            "meta",
            "source",
            "track",
            "wbr",
        }
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self._open: list[tuple[str, bool]] = []  # (tag, hides its text)
        self.texts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.VOID:
            return
        classes = (dict(attrs).get("class") or "").split()
        self._open.append((tag, tag in self.HIDING or "arithmatex" in classes))

    def handle_endtag(self, tag: str) -> None:
        # close up to the matching tag (HTML lets <p>, <li>, ... close implicitly)
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i][0] == tag:
                del self._open[i:]
                return

    def handle_data(self, data: str) -> None:
        if not any(hides for _, hides in self._open):
            self.texts.append(data)


# A TeX control word (\frac, \text{...}), a control symbol used in math (\, \| \{ ...), or a
# math delimiter (\( \[): in text that KaTeX never sees, they show raw on the page.
RAW_LATEX = re.compile(r"\\(?:[A-Za-z]{2,}|[()\[\]{}|,;!])")


def latex_outside_math(html: str) -> list[str]:
    """Snippets of raw LaTeX in a page's text outside math, code, scripts and styles."""
    parser = _TextOutsideMath()
    parser.feed(html)
    found = []
    for text in parser.texts:
        for match in RAW_LATEX.finditer(text):
            found.append(" ".join(text[max(0, match.start() - 30) : match.end() + 30].split()))
    return found


def test_the_latex_check_finds_raw_latex_and_only_there() -> None:
    """The checker can fail: a formula broken out of its $...$ (the list-item case), and not
    math, code or a script."""
    broken = "<ul><li>low: $P_k = \\tfrac12 + \\arctan\\frac{a</li><li>C_k}{b}$ with</li></ul>"
    assert len(latex_outside_math(broken)) == 3
    fine = (
        '<p>as <span class="arithmatex">\\(P_k = \\tfrac12\\)</span> says</p>'
        '<div class="arithmatex">\\[\\frac{a}{b}\\]</div><p>see <code>\\text{x}</code></p>'
        "<pre><code>s = r'\\frac'</code></pre><script>x = '\\alpha'</script><p>C:\\ 3 \\ 4</p>"
    )
    assert latex_outside_math(fine) == []


def test_no_latex_outside_math_in_the_built_site(built_site: Path) -> None:
    """Every formula reaches KaTeX: none is broken by Markdown into text (a line starting with
    '- ' inside $...$ becomes a list item, and the LaTeX shows raw)."""
    problems = []
    for html in sorted(built_site.rglob("*.html")):
        rel = html.relative_to(built_site).as_posix()
        problems += [f"{rel}: {snippet}" for snippet in latex_outside_math(html.read_text("utf-8"))]
    assert not problems, "raw LaTeX outside math on the site:\n" + "\n".join(problems)


def _print_page_outputs(page: str, write: bool = False) -> None:  # pragma: no cover
    """Run one page's blocks in order and print what each prints; ``write``: into the page's
    Output blocks too (a maintainer's tool: ``__main__`` below)."""
    import tempfile

    import torch

    torch.manual_seed(0)
    state = PageState({"__name__": "__docs_example__"}, Path(tempfile.mkdtemp()))
    path = (Path.cwd() / page).resolve()
    printed: list[tuple[Block, str]] = []
    for block in parse_markdown(path):
        if block.skip_reason is not None:
            continue
        expected, block.expected = block.expected, None
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            if block.shell:
                print(_run_shell(block, state), end="")
            else:
                _run_block(block, state)
        rtol = f", rtol {block.rtol:g}" if block.rtol else ""
        shown = "compared" if expected is not None else "not shown"
        print(f"--- {block.test_id} ({shown}{rtol})\n{buffer.getvalue()}", end="", flush=True)
        if expected is not None:
            printed.append((block, buffer.getvalue()))
    if not write:
        return
    lines = path.read_text(encoding="utf-8").split("\n")
    for block, out in reversed(printed):  # from the bottom: earlier line numbers stay valid
        assert block.output_lines is not None
        first, end = block.output_lines
        lines[first:end] = [(block.output_indent + t).rstrip() for t in _normal(out)]
    path.write_text("\n".join(lines), encoding="utf-8")
    parse_markdown(path)  # raises if a measured pattern no longer matches what is shown
    print(f"--- wrote {len(printed)} Output blocks into {page}")


if __name__ == "__main__":  # pragma: no cover
    _print_page_outputs(sys.argv[1], write="--write" in sys.argv[2:])
