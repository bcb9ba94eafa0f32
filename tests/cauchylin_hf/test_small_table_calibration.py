"""A table under the hold-out threshold (fewer than 100 rows) gets calibrated intervals by
cross-conformal widths; what stays uncalibrated is labelled; a time-ordered split holds out the
last rows."""

from __future__ import annotations

import json
import math

import pytest
import torch
from cauchylin_hf.app import cli
from cauchylin_hf.model import CauchyLMForCausalLM
from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
from cauchylin_hf.training import train
from scipy.stats import betabinom

from cauchylin.conformal import MIN_ROWS_TO_CALIBRATE

from .tables import flats

ROWS, FRESH = 60, 400
LEVELS = (50, 80, 90)
FALSE_FAILURE = 1e-6  # of the coverage test as a whole (split over the levels and both tails)


def _cli(argv):
    threads = torch.get_num_threads()
    try:
        return cli.main(argv)
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    folder = tmp_path_factory.mktemp("small")
    train_csv, fresh_csv = (
        flats(folder / "train.csv", ROWS, 0),
        flats(folder / "fresh.csv", FRESH, 99),
    )
    out = folder / "model"
    argv = ["train", "--from-config", "qwen2-tiny", "--data", str(train_csv), "--output-dir"]
    argv += [str(out), "--max-steps", "150", "--batch-size", "16", "--learning-rate", "3e-3"]
    argv += ["--warmup-ratio", "0.05", "--lr-scheduler", "cosine", "--threads", "1"]
    return {"argv": [*argv, "--no-progress"], "model": out, "fresh": fresh_csv}


def conformal_band(n: int, fresh: int, level: float, alpha: float) -> tuple[int, int]:
    """The central ``1 - alpha`` range of the number of ``fresh`` new rows a conformal interval
    of coverage ``level`` fitted on ``n`` scores covers: the count is beta-binomial
    ``(fresh, k, n + 1 - k)`` with ``k = ceil((n + 1) level)`` (its coverage given the ``n``
    calibration scores is the ``k``-th of ``n`` uniform order statistics). With ``n = 60`` the
    calibration draw alone moves the coverage by about 0.06 at 50%, so a plain binomial band
    of the fresh count would fail a correct calibration far more often than ``alpha``."""
    k = math.ceil((n + 1) * level - 1e-12)
    law = betabinom(fresh, k, n + 1 - k)
    return int(law.ppf(alpha / 2)), int(law.isf(alpha / 2))


def test_a_60_row_table_gets_calibrated_intervals_that_cover_fresh_rows(small, capsys):
    assert ROWS < MIN_ROWS_TO_CALIBRATE  # below the hold-out threshold
    assert _cli(small["argv"]) == 0
    printed = capsys.readouterr().out
    assert f"by cross-conformal widths ({ROWS} folds of the training rows" in printed
    assert "the target's context: among them" in printed
    argv = ["evaluate", str(small["model"]), "--data", str(small["fresh"]), "--json"]
    assert _cli([*argv, "--no-progress"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["target/count"] == FRESH
    for level in LEVELS:
        assert metrics[f"target/calibrated_{level}"] == 1.0
        covered = round(metrics[f"target/coverage_{level}"] * FRESH)
        low, high = conformal_band(ROWS, FRESH, level / 100, FALSE_FAILURE / len(LEVELS))
        assert low <= covered <= high, (level, covered, (low, high))


def test_uncalibrated_intervals_are_labelled(small, capsys):
    argv = ["evaluate", str(small["model"]), "--data", str(small["fresh"]), "--no-progress"]
    assert _cli(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    (target,) = [line for line in lines if line.startswith("target/coverage_50 ")]
    assert "calibrated" not in target  # cross-calibrated: no label
    # without solved readouts the shared head reads every column: no cross-conformal widths
    argv = list(small["argv"])
    argv[argv.index("--output-dir") + 1] += "-shared"
    assert _cli([*argv, "--no-readouts", "--max-steps", "2"]) == 0
    capsys.readouterr()
    model = argv[argv.index("--output-dir") + 1]
    assert _cli(["evaluate", model, "--data", str(small["fresh"]), "--no-progress"]) == 0
    lines = capsys.readouterr().out.splitlines()
    (area,) = [line for line in lines if line.startswith("field/area/coverage_50 ")]
    assert area.endswith("(not calibrated: the model's Cauchy intervals)")
    argv = list(small["argv"])
    argv[argv.index("--output-dir") + 1] += "-none"
    assert _cli([*argv, "--calibration", "0", "--max-steps", "2"]) == 0
    assert "the intervals are not calibrated (no rows held out" in capsys.readouterr().out
    assert _cli([*argv, "--no-readouts", "--max-steps", "2", "--overwrite"]) == 0
    assert "the intervals are not calibrated (no rows held out" in capsys.readouterr().out


def test_the_last_rows_are_held_out_for_time_ordered_data(tmp_path):
    torch.manual_seed(0)
    model, ntok = CauchyLMForCausalLM.from_base(
        tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True
    )
    texts = [f"year {2000 + i}, sales {3 * i + 1}." for i in range(40)]
    common = {"max_steps": 1, "batch_size": 8, "progress": False, "save": False}
    result = train(model, ntok, texts, None, tmp_path, calibration=0.25, **common)
    assert sorted(result.trainer.train_dataset.indices) != list(range(30))  # a random draw
    result = train(
        model, ntok, texts, None, tmp_path, calibration=0.25, calibration_split="last", **common
    )
    assert list(result.trainer.train_dataset.indices) == list(range(30))
    assert result.calibration_size == 10
    with pytest.raises(ValueError, match='calibration_split must be "random" or "last"'):
        train(model, ntok, texts, None, tmp_path, calibration_split="first", **common)
