"""``benchmarks/probe_linear_spaces.py``: each fit reads the space it claims to.

A relation linear in raw units is fitted exactly by the raw-space fits and not by the value-space
one; a relation linear in the value space ``t = sign(y) ln(1 + |y|)`` the other way round. The
script's run on a bundled table writes its JSON with a ratio per fit and split.
"""

import json
import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("sklearn")
np = pytest.importorskip("numpy")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import probe_linear_spaces as probe  # noqa: E402

RAW = ("linear regression", "median regression", "Cauchy, raw")


def _split(x, y):
    return x[:160, None], y[:160], x[160:, None], y[160:]


def test_a_raw_linear_relation_is_read_exactly_in_raw_units_only():
    x = np.random.default_rng(0).uniform(1.0, 500.0, 200)
    s = probe.scores(*_split(x, 3.0 * x + 40.0))
    for name in RAW:  # the relation lies in each of these fits' span
        assert s[name] < 1e-6 * 40.0, (name, s[name])
    # ln(1 + 3x + 40) is not linear in ln(1 + x): the value-space fit misses by whole units
    assert s["Cauchy, value space"] > 1.0


def test_a_value_space_linear_relation_is_read_exactly_there():
    x = np.random.default_rng(1).uniform(1.0, 500.0, 200)
    y = np.expm1(0.5 * np.log1p(x) + 1.0)  # t(y) = 0.5 t(x) + 1
    s = probe.scores(*_split(x, y))
    assert s["Cauchy, value space"] < 1e-6 * float(np.median(y))
    assert s["linear regression"] > 100 * s["Cauchy, value space"] + 1e-3


def test_the_script_writes_a_ratio_per_fit_and_split(tmp_path):
    out = tmp_path / "p.json"
    probe.main(["--tables", "diabetes", "--splits", "2", "--json", str(out)])
    (r,) = json.loads(out.read_text())
    assert r["table"] == "diabetes" and r["other_splits"] == 2
    for name in probe.FITS:
        assert len(r["ratios"][name]) == 2
        assert all(math.isfinite(v) and v > 0 for v in r["ratios"][name])
        assert r["grid_split"][name] > 0
    assert (
        min(r["grid_split_ratio"]["linear regression"], r["grid_split_ratio"]["gradient boosting"])
        == 1.0
    )
    with pytest.raises(SystemExit):
        probe.main(["--splits", "-1"])
