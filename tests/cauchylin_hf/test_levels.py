"""The default interval levels: written once (:mod:`cauchylin.levels`), read by every default.

The calibration grid, the levels the predictions and metrics report and the levels the command
line prints were three literals in three files; a level shown by default that the training
does not calibrate would be shown uncalibrated only.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from cauchylin_hf import predict
from cauchylin_hf.app import parser as cli_parser
from cauchylin_hf.config import CauchyLMConfig

from cauchylin import levels
from cauchylin.nn.action import Action
from cauchylin.nn.readouts import ContextReadouts

ROOT = Path(__file__).resolve().parents[2]
SETS = {
    name: tuple(getattr(levels, name))
    for name in ("CALIBRATION_LEVELS", "REPORTED_LEVELS", "PRINTED_LEVELS")
}


def test_every_level_shown_by_default_is_calibrated():
    calibrated = set(levels.CALIBRATION_LEVELS)
    for name, values in SETS.items():
        assert all(0.0 < c < 1.0 for c in values), name
        assert list(values) == sorted(set(values)), name
        assert set(values) <= calibrated, f"{name}: {sorted(set(values) - calibrated)}"


def test_the_defaults_are_the_ones_of_the_levels_module():
    """Each default is the object :mod:`cauchylin.levels` holds, not an equal copy."""
    assert ContextReadouts(4).levels == levels.CALIBRATION_LEVELS
    assert tuple(CauchyLMConfig().calibration_levels) == levels.CALIBRATION_LEVELS
    for cls, name in (
        (ContextReadouts, "levels"),
        (Action, "calibration_levels"),
        (CauchyLMConfig, "calibration_levels"),
    ):
        default = inspect.signature(cls).parameters[name].default
        assert default is levels.CALIBRATION_LEVELS, cls.__name__
    for function in (
        predict.predict_values,
        predict.number_predictions,
        predict.iter_number_predictions,
    ):
        default = inspect.signature(function).parameters["levels"].default
        assert default is levels.REPORTED_LEVELS, function.__name__
    args = cli_parser.build_parser().parse_args(["predict", "m", "--prompt", "x"])
    assert tuple(args.levels) == levels.PRINTED_LEVELS


def _literal_level_sets(path: Path) -> list[str]:
    """Tuples and lists of number literals in ``path`` equal to one of the level sets."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Tuple | ast.List) or len(node.elts) < 2:
            continue
        if not all(
            isinstance(e, ast.Constant) and type(e.value) in (int, float) for e in node.elts
        ):
            continue
        values = tuple(float(e.value) for e in node.elts)  # type: ignore[attr-defined]
        found += [
            f"{path.relative_to(ROOT)}:{node.lineno} {name}"
            for name, v in SETS.items()
            if values == v
        ]
    return found


def test_no_other_file_writes_a_level_set_again():
    files = [
        *sorted((ROOT / "cauchylin").rglob("*.py")),
        *sorted((ROOT / "adapters").rglob("*.py")),
    ]
    home = ROOT / "cauchylin" / "levels.py"
    # the scan finds each set where it is written (so it would find a copy)
    assert sorted(hit.split()[-1] for hit in _literal_level_sets(home)) == sorted(SETS)
    copies = [hit for path in files if path != home for hit in _literal_level_sets(path)]
    assert copies == []
