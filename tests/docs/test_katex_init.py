"""The math of the site renders on a page's own load, not only on mkdocs-material's event.

``docs/javascripts/katex-init.js`` turns the ``.arithmatex`` elements into KaTeX. A page opened
from disk (``site/index.html`` under ``file://``) gets no event from mkdocs-material's instant
navigation, so a hook that listens only to ``document$`` leaves raw LaTeX there. Each test runs
the hook in Node with a small stand-in for the page (elements, ``document.readyState``, the
``DOMContentLoaded`` listeners, an optional ``document$``) and a ``katex`` that records what it
is asked to render. No browser is needed; without Node the tests are skipped (say so).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "docs" / "javascripts" / "katex-init.js"
NODE = shutil.which("node") or shutil.which("nodejs")

# The page stand-in: ``setup`` picks the scenario, the hook runs, ``after`` plays the events;
# the script prints what KaTeX was asked to render, in order, as JSON.
_HARNESS = r"""
const vm = require("vm");
const fs = require("fs");
const [hookPath, scenario] = [process.argv[1], JSON.parse(process.argv[2])];  // node -e: no script path
const rendered = [];
function element(tag, text) {
  return { tagName: tag, textContent: text, dataset: {}, title: "",
           classList: { add() {} } };
}
let elements = scenario.elements.map(([tag, text]) => element(tag, text));
const listeners = {};
const document = {
  readyState: scenario.readyState,
  addEventListener(name, fn) { (listeners[name] = listeners[name] || []).push(fn); },
  querySelectorAll(sel) {
    if (sel !== ".arithmatex") throw new Error("unexpected selector " + sel);
    return elements;
  },
};
const subscribers = [];
const context = {
  document,
  console,
  katex: { render(tex, el, opts) { rendered.push([tex, opts.displayMode]); } },
};
if (scenario.material) {
  context.document$ = { subscribe(fn) { subscribers.push(fn); } };
}
vm.createContext(context);
vm.runInContext(fs.readFileSync(hookPath, "utf8"), context);
for (const event of scenario.after) {
  if (event === "DOMContentLoaded") {
    document.readyState = "interactive";
    (listeners.DOMContentLoaded || []).forEach((fn) => fn());
  } else if (event === "document$") {
    subscribers.forEach((fn) => fn(document));
  } else if (event === "navigate") {
    elements = [element("SPAN", "\\(z_2\\)")];  // instant navigation swapped the content
    subscribers.forEach((fn) => fn(document));
  }
}
process.stdout.write(JSON.stringify(rendered));
"""

_PAGE = [["SPAN", "\\(x^2\\)"], ["DIV", "\\[\\frac{1}{2}\\]"]]
_RENDERED = [["x^2", False], ["\\frac{1}{2}", True]]


def _run(scenario: dict[str, object]) -> list[list[object]]:
    if NODE is None:
        pytest.skip("Node.js is not installed: the KaTeX hook cannot be run here")
    proc = subprocess.run(
        [NODE, "-e", _HARNESS, "--", str(HOOK), json.dumps(scenario)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_math_renders_from_disk_where_material_never_fires() -> None:
    """file://: mkdocs-material's bundle is there (``document$`` exists) but never emits."""
    scenario = {"readyState": "loading", "material": True, "elements": _PAGE}
    assert _run({**scenario, "after": ["DOMContentLoaded"]}) == _RENDERED


def test_math_renders_when_the_hook_loads_after_the_page() -> None:
    """A script that runs after DOMContentLoaded (deferred, injected) renders at once."""
    scenario = {"readyState": "complete", "material": False, "elements": _PAGE, "after": []}
    assert _run(scenario) == _RENDERED


def test_instant_navigation_renders_new_pages_and_each_formula_once() -> None:
    """Served: both triggers fire for the first page (rendered once), then a page switch."""
    scenario = {
        "readyState": "loading",
        "material": True,
        "elements": _PAGE,
        "after": ["DOMContentLoaded", "document$", "navigate"],
    }
    assert _run(scenario) == [*_RENDERED, ["z_2", False]]
