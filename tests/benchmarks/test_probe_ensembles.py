"""``benchmarks/probe_ensembles.py``: ensembles of saved runs, combined as the docstring says.

The Cauchy mean is checked against Monte Carlo (the sample median of averaged Cauchy draws), the
grouping and the scores against a direct computation on a synthetic file, and the script against
a toy ``bench_quality.py --save-predictions`` run.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

np = pytest.importorskip("numpy")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import probe_ensembles as probe  # noqa: E402
from bench_quality import SHARED  # noqa: E402

from cauchylin.value_space import SIGNED_LOG1P, from_value_space  # noqa: E402


def test_the_cauchy_mean_is_the_median_of_the_averaged_members():
    # (Y_1 + Y_2 + Y_3) / 3 of independent Cauchy draws in t-space; its sample median, mapped
    # back, against the combined median. The sample median of n draws of a Cauchy(loc, s) law
    # has standard deviation pi s / (2 sqrt(n)); 6 of them: a false failure below 1e-8.
    locs = [[1.0, -2.0], [2.5, 0.0], [0.5, 4.0]]
    scales = [[0.3, 1.0], [0.1, 2.0], [0.5, 0.5]]
    members = [
        {
            "loc": lo,
            "true": [0.0, 0.0],
            "scale": sc,
            "median": from_value_space(torch.tensor(lo), SIGNED_LOG1P).tolist(),
        }
        for lo, sc in zip(locs, scales, strict=True)
    ]
    got = probe.combine(members, "Cauchy mean", SIGNED_LOG1P)
    n = 400_000
    gen = torch.Generator().manual_seed(0)
    draws = (
        sum(
            torch.distributions.Cauchy(
                torch.tensor(lo, dtype=torch.float64), torch.tensor(sc, dtype=torch.float64)
            ).icdf(torch.rand(n, 2, generator=gen, dtype=torch.float64).clamp(1e-12, 1 - 1e-12))
            for lo, sc in zip(locs, scales, strict=True)
        )
        / 3
    )
    t_median = draws.median(0).values
    s = torch.tensor(scales, dtype=torch.float64).mean(0)
    tol = 6 * math.pi * s / (2 * math.sqrt(n))
    t_got = torch.tensor([math.copysign(math.log1p(abs(v)), v) for v in got], dtype=torch.float64)
    assert torch.all((t_got - t_median).abs() < tol), (t_got, t_median, tol)
    # the median of the medians is the middle member's, in the value space
    mid = probe.combine(members, "median of medians", SIGNED_LOG1P)
    ref = np.median(np.array([m["median"] for m in members]), axis=0)
    assert np.allclose(mid, ref)
    with pytest.raises(ValueError, match="rule"):
        probe.combine(members, "mean", SIGNED_LOG1P)


def _rows():
    true = [10.0, 20.0, 30.0, 40.0, 50.0]
    rows = []
    rng = np.random.default_rng(3)
    for seed in range(7):  # seven runs: two groups of three, the seventh left out
        med = (np.array(true) + rng.normal(0, 5, 5)).tolist()
        loc = [math.copysign(math.log1p(abs(v)), v) for v in med]
        rows.append(
            {
                "table": "t",
                "kind": "causal",
                "name": "causal",
                "steps": 1000,
                "seed": seed,
                "corrupt": 0.0,
                "train_seconds": 1.0,
                "mdae": float(np.median(np.abs(np.array(med) - true))),
                "predictions": {"median": med, "loc": loc, "scale": [0.1] * 5, "true": true},
            }
        )
    rows.append({"table": "t", "kind": "reference", "name": "linear regression (features)",
                 "steps": 0, "seed": 0, "corrupt": 0.0, "mdae": 2.0})  # fmt: skip
    return rows, true


def test_groups_of_consecutive_seeds_are_scored_against_their_truth(tmp_path, capsys):
    rows, true = _rows()
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"rows": rows}))
    out = tmp_path / "e.json"
    assert probe.main(["--json", str(path), "--members", "3", "--out", str(out)]) == 0
    got = json.loads(out.read_text())["ensembles"]
    assert [e["seeds"] for e in got] == [[0, 1, 2], [3, 4, 5]]
    for e in got:
        meds = np.array([rows[s]["predictions"]["median"] for s in e["seeds"]])
        t_mean = np.mean(np.sign(meds) * np.log1p(np.abs(meds)), axis=0)
        pred = np.sign(t_mean) * np.expm1(np.abs(t_mean))
        assert e["Cauchy mean"] == pytest.approx(float(np.median(np.abs(pred - true))))
        assert e["median of medians"] == pytest.approx(
            float(np.median(np.abs(np.median(meds, axis=0) - true)))
        )
        assert e["best_reference"] == 2.0 and e["train_seconds"] == 3.0
    assert "| t |" in capsys.readouterr().out
    # runs on corrupted targets are their own ensembles, chosen by --corrupt
    dirty = [{**r, "corrupt": 0.1, "mdae": 99.0} for r in rows[:3]]
    for r in dirty:
        r["predictions"] = {**r["predictions"], "loc": [v + 1.0 for v in r["predictions"]["loc"]]}
    path.write_text(json.dumps({"rows": rows + dirty}))
    assert probe.main(["--json", str(path), "--out", str(out)]) == 0
    assert [e["seeds"] for e in json.loads(out.read_text())["ensembles"]] == [[0, 1, 2], [3, 4, 5]]
    assert probe.main(["--json", str(path), "--corrupt", "0.1", "--out", str(out)]) == 0
    (e,) = json.loads(out.read_text())["ensembles"]
    assert e["member_mdae"] == [99.0] * 3 and e["Cauchy mean"] > got[0]["Cauchy mean"]
    empty = tmp_path / "empty.json"
    empty.write_text(
        json.dumps({"rows": [{k: v for k, v in rows[0].items() if k != "predictions"}]})
    )
    with pytest.raises(SystemExit):
        probe.main(["--json", str(empty)])


def test_ensembles_calibrated_on_the_shared_hold_out_cover_as_computed_directly(tmp_path, capsys):
    # three members' laws on a shared hold-out of 30 rows and on 200 held-out rows; the
    # expected coverage: the ceil((n + 1) c)-th smallest score |t - mean loc| / mean scale of the
    # hold-out, then the share of held-out rows within that many mean scales of the mean loc
    rng = np.random.default_rng(5)

    def law(n):
        centre = rng.normal(3.0, 1.0, n)
        true_t = centre + 0.4 * rng.standard_cauchy(n)
        locs = [centre + rng.normal(0, 0.05, n) for _ in range(3)]
        scales = [np.full(n, 0.1 + 0.05 * k) for k in range(3)]
        return true_t, locs, scales

    cal_t, cal_locs, cal_scales = law(30)
    held_t, held_locs, held_scales = law(200)
    to_y = lambda t: (np.sign(t) * np.expm1(np.abs(t))).tolist()  # noqa: E731
    rows = []
    for k in range(3):
        rows.append({
            "table": "t", "kind": "causal", "name": "shared", "steps": 1000, "seed": k,
            "corrupt": 0.0, "train_seconds": 1.0, "mdae": 1.0,
            "coverage": {"0.5": 0.5, "0.8": 0.8, "0.9": 0.9, "0.95": 0.95},
            "predictions": {"median": to_y(held_locs[k]), "loc": held_locs[k].tolist(),
                            "scale": held_scales[k].tolist(), "true": to_y(held_t)},
            "calibration_predictions": {"loc": cal_locs[k].tolist(),
                                        "scale": cal_scales[k].tolist(), "true": to_y(cal_t)},
        })  # fmt: skip
    path, out = tmp_path / "m.json", tmp_path / "e.json"
    path.write_text(json.dumps({"rows": rows}))
    argv = ["--json", str(path), "--name", "shared", "--calibrated", "--out", str(out)]
    assert probe.main(argv) == 0
    (got,) = json.loads(out.read_text())["coverage"]
    cal_loc, cal_scale = np.mean(cal_locs, 0), np.mean(cal_scales, 0)
    held_loc, held_scale = np.mean(held_locs, 0), np.mean(held_scales, 0)
    y_cal = np.array(to_y(cal_t))
    scores = np.sort(np.abs(np.sign(y_cal) * np.log1p(np.abs(y_cal)) - cal_loc) / cal_scale)
    y_held = np.array(to_y(held_t))
    t_held = np.sign(y_held) * np.log1p(np.abs(y_held))
    for c in probe.COVERAGE_LEVELS:
        k = math.ceil(31 * c)  # 30 rows: every level has a finite width (k <= 30)
        inside = np.abs(t_held - held_loc) <= scores[k - 1] * held_scale
        assert got[str(c)] == pytest.approx(float(inside.mean()), abs=1 / 200 + 1e-12), c
        assert got[f"calibrated_{c}"] == 1.0
    assert got["calibration_rows"] == 30 and got["count"] == 200
    assert "Coverage of ensembles of 3 calibrated" in capsys.readouterr().out
    # members calibrated on other rows are not one ensemble's calibration
    rows[1]["calibration_predictions"]["true"] = to_y(cal_t[::-1])
    path.write_text(json.dumps({"rows": rows}))
    with pytest.raises(SystemExit, match="calibrated on other rows"):
        probe.main(argv)


@pytest.mark.slow
def test_a_toy_grid_saves_predictions_the_probe_reads(tmp_path):
    members = tmp_path / "m.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_quality.py"), "--quick",
           "--tables", "cancer", "--models", "causal,mse", "--steps", "2", "--seeds", "0,1",
           "--corrupt", "0.1", "--save-predictions", "--json", str(members),
           "--variants", SHARED]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(members.read_text())["rows"]
    assert {r["corrupt"] for r in rows if r["kind"] == "causal"} == {0.0, 0.1}
    for r in rows:
        if r["kind"] == "reference":
            assert "predictions" not in r
            continue
        p = r["predictions"]
        err = np.median(np.abs(np.array(p["median"]) - np.array(p["true"])))
        assert err == pytest.approx(r["mdae"])  # the saved medians are the scored ones
        if r["kind"] == "causal":
            back = from_value_space(torch.tensor(p["loc"], dtype=torch.float64), SIGNED_LOG1P)
            assert np.allclose(back.numpy(), p["median"], rtol=1e-6)
            assert min(p["scale"]) > 0
    out = tmp_path / "e.json"
    with pytest.raises(SystemExit):  # no run of the default 1000 steps in the file
        probe.main(["--json", str(members), "--members", "2"])
    assert (
        probe.main(["--json", str(members), "--members", "2", "--steps", "2", "--out", str(out)])
        == 0
    )
    (e,) = json.loads(out.read_text())["ensembles"]
    assert e["seeds"] == [0, 1] and e["Cauchy mean"] >= 0
    args = ["--json", str(members), "--members", "2", "--steps", "2", "--corrupt", "0.1"]
    assert probe.main([*args, "--out", str(out)]) == 0
    (dirty,) = json.loads(out.read_text())["ensembles"]
    assert dirty["seeds"] == [0, 1] and dirty["member_mdae"] != e["member_mdae"]
    # the shared hold-out: the same rows at both seeds, a fifth of the training rows, none
    # of them held out for scoring; the default runs keep none
    shared = [r for r in rows if r["name"] == SHARED and not r["corrupt"]]
    held = [r["calibration_predictions"]["true"] for r in shared]
    assert len(shared) == 2 and held[0] == held[1] and len(held[0]) == 24  # 120 rows (--quick)
    assert not any("calibration_predictions" in r for r in rows if r["name"] == "causal")
    argv = ["--json", str(members), "--members", "2", "--steps", "2", "--name", SHARED]
    assert probe.main([*argv, "--calibrated", "--out", str(out)]) == 0
    (cov,) = json.loads(out.read_text())["coverage"]
    assert cov["calibration_rows"] == 24 and 0.0 <= cov["0.5"] <= 1.0
