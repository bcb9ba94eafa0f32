"""Griffe extension: render the reST bits of Google-style docstrings as Markdown for the site.

The library's docstrings are read by ``help()`` as well as by mkdocstrings, and use a few reST
conventions. Before mkdocstrings renders a docstring, this extension rewrites:

* ``.. math::`` blocks into ``$$ ... $$`` display math and ``:math:`x``` into ``$x$``
  (typeset by arithmatex + KaTeX like the rest of the site);
* ``:class:`~pkg.mod.Name``` and the other Python roles into code spans (``Name``);
* an ``Example:`` section header into ``Examples:``, the header griffe parses into code blocks
  (under ``Example:`` the ``>>>`` lines would be read as nested Markdown quotes).

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
