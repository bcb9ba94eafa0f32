"""The pipeline figure of the docs is drawn by scripts/pipeline_figure.py and committed."""

from __future__ import annotations

import importlib.util
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIGURE = ROOT / "docs" / "assets" / "pipeline.svg"


def _script():
    spec = importlib.util.spec_from_file_location(
        "pipeline_figure", ROOT / "scripts" / "pipeline_figure.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _svg(path: Path) -> ET.Element:
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg"), f"{path} is not an SVG file"
    return root


def test_the_script_draws_the_committed_figure(tmp_path):
    fresh = _svg(_script().draw(tmp_path / "pipeline.svg"))
    committed = _svg(FIGURE)
    assert fresh.get("viewBox") == committed.get("viewBox")
    # the same drawing: as many paths (glyphs, boxes, arrows) within a few for a font change
    count = lambda root: sum(1 for _ in root.iter())  # noqa: E731
    assert abs(count(fresh) - count(committed)) <= 0.05 * count(committed)
    assert "assets/pipeline.svg" in (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")
