"""Griffe extension: render the reST bits of Google-style docstrings as Markdown for the site.

The library's docstrings are read by ``help()`` as well as by mkdocstrings, and use a few reST
conventions. Before mkdocstrings renders a docstring, this extension rewrites:

* ``.. math::`` blocks into ``$$ ... $$`` display math and ``:math:`x``` into ``$x$``
  (typeset by arithmatex + KaTeX like the rest of the site);
* ``:class:`~pkg.mod.Name``` and the other Python roles into code spans (``Name``);
* an ``Example:`` section header into ``Examples:``, the header griffe parses into code blocks
  (under ``Example:`` the ``>>>`` lines would be read as nested Markdown quotes);
* reST "simple tables" (columns framed by ``===== =====`` rules) into Markdown tables;
* a paragraph ending in ``::`` (a reST literal-block marker) into one ending in ``:``.

The docstrings themselves are left unchanged. Loaded by ``mkdocs.yml``
(``plugins.mkdocstrings.handlers.python.options.extensions``); excluded from the built site.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|obj|exc|data|const|func|ref):`~?([^`]+)`")
_MATH_ROLE = re.compile(r":math:`([^`]+)`")
_MATH_DIRECTIVE = re.compile(r"^(?P<indent>[ \t]*)\.\. math::[ \t]*(?P<rest>.*)$")
_EXAMPLE_HEADER = re.compile(r"^(?P<indent>[ \t]*)Example:[ \t]*$")
_TABLE_RULE = re.compile(r"^(?P<indent>[ \t]*)=+(?: +=+)+[ \t]*$")
_LITERAL_MARK = re.compile(r"(?<=\S)[ \t]*::[ \t]*$")


def _table(lines: list[str], start: int) -> tuple[list[str], int] | None:
    """Convert the reST simple table starting at ``lines[start]``; return it and the next index."""
    rule = lines[start]
    indent = _TABLE_RULE.match(rule).group("indent")  # type: ignore[union-attr]
    spans = [(m.start(), m.end()) for m in re.finditer(r"=+", rule)]
    rows: list[list[str]] = []
    rules = 1
    i = start + 1
    while i < len(lines) and rules < 3:
        line = lines[i]
        if line.strip() == rule.strip():
            rules += 1
            i += 1
            continue
        if not line.strip():
            return None  # not a simple table we understand: leave the text alone
        cells = []
        for n, (a, _) in enumerate(spans):
            b = spans[n + 1][0] if n + 1 < len(spans) else len(line)
            cells.append(line[a:b].strip())
        if rows and not cells[0] and rules == 2:  # continuation line of the previous row
            rows[-1] = [f"{old} {new}".strip() for old, new in zip(rows[-1], cells, strict=True)]
        else:
            rows.append(cells)
        i += 1
    if rules < 3 or len(rows) < 2:
        return None
    out = [indent + "| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    out.insert(1, indent + "|" + "---|" * len(spans))
    return ["", *out, ""], i


def _role_text(match: re.Match[str]) -> str:
    target = match.group(1)
    if "<" in target and target.endswith(">"):  # :class:`text <target>`
        target = target[: target.index("<")].strip()
    elif match.group(0).split("`", 1)[1].startswith("~"):
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


def convert(text: str) -> str:
    """The Markdown version of a docstring written with the reST conventions above."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        directive = _MATH_DIRECTIVE.match(line)
        if directive:
            indent = directive.group("indent")
            body = [directive.group("rest")] if directive.group("rest").strip() else []
            i += 1
            # The directive's content: following lines indented deeper (or blank).
            while i < len(lines) and (
                not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > len(indent)
            ):
                body.append(lines[i].strip())
                i += 1
            while body and not body[-1]:
                body.pop()
            tex = "\n".join(b for b in body if b)
            out += [f"{indent}$$", *(f"{indent}{t}" for t in tex.splitlines()), f"{indent}$$", ""]
            continue
        if _TABLE_RULE.match(line):
            converted = _table(lines, i)
            if converted is not None:
                table, i = converted
                out += table
                continue
        if _LITERAL_MARK.search(line):
            following = next((x for x in lines[i + 1 :] if x.strip()), "")
            if len(following) - len(following.lstrip()) > len(line) - len(line.lstrip()):
                line = _LITERAL_MARK.sub(":", line)
        header = _EXAMPLE_HEADER.match(line)
        if header:
            line = f"{header.group('indent')}Examples:"
        line = _MATH_ROLE.sub(lambda m: f"${m.group(1)}$", line)
        line = _ROLE.sub(_role_text, line)
        out.append(line)
        i += 1
    return "\n".join(out)


class RstCompat(griffe.Extension):
    """Rewrite every docstring with :func:`convert` as soon as its object is loaded."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Convert ``obj``'s docstring in place (the source files are not touched)."""
        if obj.docstring is not None:
            obj.docstring.value = convert(obj.docstring.value)
