"""The citation metadata are well formed and agree with the package and the docs."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

import cauchylin

ROOT = Path(__file__).resolve().parents[2]


def test_citation_cff_is_complete_and_in_step_with_the_package():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    # the keys CFF 1.2.0 requires, and the ones a software citation needs
    assert cff["cff-version"] == "1.2.0"
    assert {"message", "title", "authors", "version", "license", "type"} <= set(cff)
    assert cff["type"] == "software" and all(
        "name" in a or "family-names" in a for a in cff["authors"]
    )
    assert str(cff["version"]) == cauchylin.__version__
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert f'license = {{ text = "{cff["license"]}" }}' in pyproject
    assert "Apache License" in (ROOT / "LICENSE").read_text(encoding="utf-8")[:200]
    # the BibTeX entry on the home page names the same version, licence and address
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    entry = re.search(r"@software\{cauchylin,(.*?)\n\}", index, re.S)
    assert entry is not None
    assert f"version = {{{cauchylin.__version__}}}" in entry.group(1)
    assert f"license = {{{cff['license']}}}" in entry.group(1)
    assert f"url     = {{{cff['repository-code']}}}" in entry.group(1)
