"""``predict`` and ``evaluate`` reading several models as one (``--member``) and calibrating on
a file none of them trained on (``--calibration-file``).

The ensemble's numbers are checked against each model's own ``predict --json`` rows (the mean of
their locations and scales, the median ``g^{-1}`` of the mean location, as
:mod:`cauchylin_hf.ensemble` states; its Monte Carlo check is ``test_ensemble.py``), and the
calibrated widths against the split-conformal order statistic computed here in plain Python from
those rows on the calibration table.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from cauchylin_hf.app import cli

from cauchylin.value_space import from_value_space, to_value_space
from tests.cauchylin_hf.test_cli import TEMPLATE, _table

LEVELS = (0.5, 0.8, 0.9, 0.95)  # passed as --levels where the calibration is checked


@pytest.fixture(scope="module")
def members(tmp_path_factory):
    """Two models of one table, seeds 0 and 1, nothing held out of training (``--calibration
    0``); a calibration table and a test table neither trained on."""
    folder = tmp_path_factory.mktemp("members")
    train_csv = _table(folder / "train.csv", 96, seed=0)
    out = {
        "calibration": _table(folder / "calibration.csv", 15, seed=2),
        "test": _table(folder / "test.csv", 12, seed=1),
    }
    threads = torch.get_num_threads()
    try:
        for seed in (0, 1):
            model = folder / f"model{seed}"
            argv = ["train", "--from-config", "qwen2-tiny", "--data", str(train_csv)]
            argv += ["--template", TEMPLATE, "--output-dir", str(model), "--seed", str(seed)]
            argv += ["--max-steps", "40", "--batch-size", "16", "--learning-rate", "5e-3"]
            argv += ["--calibration", "0", "--threads", "1", "--no-progress"]
            assert cli.main(argv) == 0
            out[f"model{seed}"] = model
    finally:
        torch.set_num_threads(threads)
    return out


def _rows(capsys, *argv, notes=None):
    assert cli.main(["predict", *map(str, argv), "--json"]) == 0
    out = capsys.readouterr()
    if notes is not None:
        notes.append(out.err)
    return [json.loads(line) for line in out.out.splitlines()]


def test_the_ensemble_is_the_mean_of_the_members_laws(members, capsys):
    a = _rows(capsys, members["model0"], "--data", members["test"])
    b = _rows(capsys, members["model1"], "--data", members["test"])
    both = _rows(
        capsys, members["model0"], "--member", members["model1"], "--data", members["test"]
    )
    assert len(both) == len(a) == 12
    assert any(abs(x["loc"] - y["loc"]) > 1e-3 for x, y in zip(a, b, strict=True))  # two networks
    for x, y, e in zip(a, b, both, strict=True):
        assert e["prompt"] == x["prompt"] and e["true"] == x["true"]
        assert math.isclose(e["loc"], (x["loc"] + y["loc"]) / 2, rel_tol=1e-6, abs_tol=1e-6)
        assert math.isclose(e["scale"], (x["scale"] + y["scale"]) / 2, rel_tol=1e-6)
        assert math.isclose(e["p_num"], (x["p_num"] + y["p_num"]) / 2, rel_tol=1e-6)
        median = float(
            from_value_space(torch.tensor(e["loc"], dtype=torch.float64), "signed_log1p")
        )
        assert math.isclose(e["median"], median, rel_tol=1e-6)
        # no calibration of its own: the averaged law's Cauchy intervals, marked as such
        assert not any(v for k, v in e.items() if k.startswith("calibrated_"))
        assert e["calibrated_on"] == 0
        lo, hi = e["interval_50"]  # loc -+ tan(pi/4) scale
        t = to_value_space(torch.tensor([lo, hi], dtype=torch.float64), "signed_log1p")
        assert torch.allclose(t, torch.tensor([e["loc"] - e["scale"], e["loc"] + e["scale"]],
                                              dtype=torch.float64), rtol=1e-5, atol=1e-5)  # fmt: skip
    assert cli.main(["predict", str(members["model0"]), "--member", str(members["model1"]),
                     "--data", str(members["test"])]) == 0  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 12 and all("Cauchy intervals (not calibrated)" in line for line in lines)


def _conformal_widths(rows):
    """``q(c)``: the ``ceil((n + 1) c)``-th smallest score ``|t - loc| / scale`` (inf: too few)."""
    scores = sorted(
        abs(float(to_value_space(torch.tensor(r["true"], dtype=torch.float64), "signed_log1p"))
            - r["loc"]) / r["scale"]
        for r in rows
    )  # fmt: skip
    out = {}
    for c in LEVELS:
        k = math.ceil((len(scores) + 1) * c)
        out[c] = scores[k - 1] if k <= len(scores) else math.inf
    return out


def test_a_calibration_file_calibrates_the_ensembles_target_intervals(members, capsys):
    pair = [members["model0"], "--member", members["model1"]]
    # the members' laws at the calibration table's targets, read as evaluate reads a table
    # (whole texts: a readout solved on this barely trained backbone carries the float32
    # rounding of another reading, the prompt cut before the target, into the scores)
    from cauchylin_hf.data import TableTemplate, read_table
    from cauchylin_hf.predict import number_predictions

    texts = TableTemplate(TEMPLATE, "target").texts(read_table(members["calibration"]))
    cal = []
    for m in ("model0", "model1"):
        model, ntok = cli.load_causal_model(members[m])
        p = number_predictions(model, ntok, texts, calibrated=False)
        keep = p.is_target
        cal.append([
            {"true": float(t), "loc": float(lo), "scale": float(sc)}
            for t, lo, sc in zip(p.true[keep], p.prediction.loc[keep], p.prediction.scale[keep],
                                 strict=True)
        ])  # fmt: skip
    assert len(cal[0]) == 15
    averaged = [
        {"true": x["true"], "loc": (x["loc"] + y["loc"]) / 2, "scale": (x["scale"] + y["scale"]) / 2}
        for x, y in zip(*cal, strict=True)
    ]  # fmt: skip
    widths = _conformal_widths(averaged)
    # 15 rows: ceil(16 c) <= 15 up to 90%; 95% needs 16, so it keeps the Cauchy interval
    assert not any(math.isinf(widths[c]) for c in LEVELS[:3]) and math.isinf(widths[0.95])
    notes = []
    rows = _rows(capsys, *pair, "--data", members["test"], "--calibration-file",
                 members["calibration"], "--levels", *LEVELS, notes=notes)  # fmt: skip
    err = notes[0]
    assert "calibrated on the 15 target numbers of calibration.csv" in err
    assert "too few for 95%, which keep the Cauchy intervals" in err
    for e in rows:
        assert e["calibrated_on"] == 15
        for c in LEVELS:
            key = round(100 * c)
            assert e[f"calibrated_{key}"] is not math.isinf(widths[c])
            lo, hi = e[f"interval_{key}"]
            q = widths[c] if not math.isinf(widths[c]) else math.tan(math.pi * c / 2)
            t = to_value_space(torch.tensor([lo, hi], dtype=torch.float64), "signed_log1p")
            expected = torch.tensor([e["loc"] - q * e["scale"], e["loc"] + q * e["scale"]],
                                    dtype=torch.float64)  # fmt: skip
            assert torch.allclose(t, expected, rtol=1e-5, atol=1e-5), (c, t, expected)


def _averaged_medians(members, path, field=None):
    """The ensemble's median and the truth at each target of a table, from the library."""
    from cauchylin_hf.data import TableTemplate, read_table
    from cauchylin_hf.predict import number_predictions

    texts = TableTemplate(TEMPLATE, "target").texts(read_table(path))
    locs, true = [], None
    for m in ("model0", "model1"):
        model, ntok = cli.load_causal_model(members[m])
        p = number_predictions(model, ntok, texts, target_field=field, calibrated=False)
        locs.append(p.prediction.loc[p.is_target])
        true = p.true[p.is_target]
    return from_value_space((locs[0] + locs[1]) / 2, "signed_log1p"), true


def test_evaluate_scores_the_ensembles_numbers(members, capsys):
    argv = ["evaluate", str(members["model0"]), "--member", str(members["model1"])]
    argv += ["--data", str(members["test"]), "--json", "--no-progress"]
    assert cli.main(argv) == 0
    out = capsys.readouterr()
    metrics = json.loads(out.out)
    assert metrics["members"] == 2 and metrics["target/count"] == 12
    assert "the ensemble of 2 models" in out.err and "eval_loss" not in metrics
    median, true = _averaged_medians(members, members["test"])
    errors = sorted((median - true).abs().tolist())
    assert math.isclose(metrics["target/mdae"], (errors[5] + errors[6]) / 2, rel_tol=1e-6)
    assert metrics["target/calibrated_50"] == 0.0  # no file: the averaged law's Cauchy intervals
    # each model alone, beside the ensemble: what evaluate of that model reports
    for k in (0, 1):
        one = ["evaluate", str(members[f"model{k}"]), "--data", str(members["test"]), "--json"]
        assert cli.main([*one, "--no-progress"]) == 0
        own = json.loads(capsys.readouterr().out)["target/mdae"]
        assert math.isclose(metrics[f"member_{k}/target/mdae"], own, rel_tol=1e-6)

    assert cli.main([*argv, "--calibration-file", str(members["calibration"])]) == 0
    calibrated = json.loads(capsys.readouterr().out)
    # evaluate's levels, 50/80/90%: 15 calibration rows are enough for each
    assert all(calibrated[f"target/calibrated_{k}"] == 1.0 for k in (50, 80, 90))
    assert calibrated["target/mdae"] == metrics["target/mdae"]  # the medians do not move


def test_one_model_is_calibrated_on_the_file_in_place_of_its_own(members, capsys):
    argv = ["evaluate", str(members["model0"]), "--data", str(members["test"]), "--json"]
    assert cli.main([*argv, "--no-progress"]) == 0
    own = json.loads(capsys.readouterr().out)
    assert own["target/calibrated_50"] == 0.0  # trained with --calibration 0
    assert cli.main([*argv, "--calibration-file", str(members["calibration"])]) == 0
    out = capsys.readouterr()
    metrics = json.loads(out.out)
    assert metrics["members"] == 1 and metrics["target/calibrated_50"] == 1.0
    assert "the model's target intervals are calibrated on the 15" in out.err
    assert math.isclose(metrics["target/mdae"], own["target/mdae"], rel_tol=1e-6)


def test_members_that_cannot_be_averaged_are_refused(members, tmp_path, capsys):
    import shutil

    other = tmp_path / "other"
    shutil.copytree(members["model1"], other)
    record = json.loads((other / cli.DATA_FORMAT_FILE).read_text())
    record["template"] = "bmi {bmi} age {age} -> progression {target}."
    (other / cli.DATA_FORMAT_FILE).write_text(json.dumps(record))
    base = ["predict", str(members["model0"]), "--data", str(members["test"])]
    cases = [
        (["--member", str(other)], "was trained with template 'bmi {bmi} age {age}"),
        (["--member", str(tmp_path / "none")], "member folder not found"),
        (["--calibration-file", str(members["test"]), "--raw-intervals"],
         "--calibration-file calibrates the intervals that --raw-intervals leaves"),
        (["--calibration-file", str(tmp_path / "none.csv")], "none.csv"),
    ]  # fmt: skip
    for extra, message in cases:
        assert cli.main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    argv = ["evaluate", str(members["model0"]), "--member", str(members["model1"]), "--data",
            str(members["test"]), "--max-length", "16"]  # fmt: skip
    assert cli.main(argv) == 2
    assert "--max-length cuts the texts of the token metrics" in capsys.readouterr().err


def test_the_calibration_applies_to_prompts_of_the_targets_field_only(members, capsys):
    pair = [members["model0"], "--member", members["model1"]]
    target = "age 40 bmi 25.0 -> progression "  # the template's text before the target
    other = "age 40 bmi "  # the next number is a bmi
    rows = _rows(capsys, *pair, "--prompt", target, "--prompt", other,
                 "--calibration-file", members["calibration"])  # fmt: skip
    assert [r["field"] for r in rows] == ["progression", "bmi"]
    assert rows[0]["calibrated_50"] and rows[0]["calibrated_on"] == 15
    assert not rows[1]["calibrated_50"] and rows[1]["calibrated_on"] == 0
