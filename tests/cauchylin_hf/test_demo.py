"""The embedded demo, shortened (``cauchylin-lm demo --quick``)."""

from __future__ import annotations

import json
import re

import torch
from cauchylin_hf.app import cli
from cauchylin_hf.app.corpus import make_splits
from cauchylin_hf.app.demo import (
    COUNTERFACTUAL_PAIR,
    MODE_SETTINGS,
    PROMPTS,
    QUICK,
    mean_baseline,
    metrics_table,
)
from cauchylin_hf.numbers import find_numbers
from cauchylin_hf.precision import NumberPrecision, decimals_of


def test_quick_demo_runs_end_to_end(tmp_path, capsys):
    out_dir = tmp_path / "demo"
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        argv = ["demo", "--quick", "--output-dir", str(out_dir), "--threads", "1"]
        assert cli.main([*argv, "--no-progress"]) == 0
        assert torch.get_num_threads() == 1  # --threads, like every other command
    finally:
        torch.set_num_threads(before)
    printed = capsys.readouterr().out
    for mode, _ in MODE_SETTINGS:
        assert f"-- {mode} (" in printed
    assert "<NUM> F1" in printed and "train mean" in printed
    assert "identical in both rows: True" in printed
    # What to trust comes first: each prompt's predicted median with its 50% and 90% intervals.
    trust = printed.split("== what to trust", 1)[1].split("== generation", 1)[0]
    rows = [line.strip() for line in trust.splitlines() if line.startswith("  ")]
    assert len(rows) == len(PROMPTS)
    for row, prompt in zip(rows, PROMPTS, strict=True):
        assert re.fullmatch(
            rf"{re.escape(prompt)} \S+  \|  50% \[\S+, \S+\]  90% \[\S+, \S+\]", row
        )
    # The modes' lines are labelled raw draws; the median of many individual draws follows.
    assert "each line is one raw draw" in printed
    assert "-- individual (temperature=1.0), one raw draw each" in printed
    medians = printed.split("== the median of the first number of", 1)[1].split(
        "== counterfactual"
    )[0]
    rows = [line.strip() for line in medians.splitlines() if line.startswith("  ")]
    assert [row.rsplit(" ", 1)[0] for row in rows] == list(PROMPTS)
    # The counterfactual pair differs in one number, and the predictions are shown beside it.
    cf = printed.split("== counterfactual", 1)[1].split("== files", 1)[0]
    for prompt in COUNTERFACTUAL_PAIR:
        assert f"  {prompt} " in cf and "(this individual's draw)" in cf
    assert "the true change: +4" in cf and cf.count("50% [") == 2
    # Every mode continues every prompt, and the generated numbers are written with no more
    # decimals than the training sentences used (not with float32's digits).
    section = printed.split("== generation", 1)[1].split("== the median of the first", 1)[0]
    lines = [line.strip() for line in section.splitlines() if line.startswith("  ")]
    assert len(lines) == len(MODE_SETTINGS) * len(PROMPTS)
    most = NumberPrecision.from_texts(
        make_splits(QUICK.n_train, QUICK.n_heldout, seed=QUICK.seed).train
    ).default
    assert most is not None
    for line, prompt in zip(lines, PROMPTS * len(MODE_SETTINGS), strict=True):
        assert line.startswith(prompt) and len(line) > len(prompt), line
        for span in find_numbers(line[len(prompt) :]):
            assert decimals_of(span.text) <= most, line
    for name in ("loss_curves.png", "predicted_vs_true.png", "ovr_prob_sums.png", "samples.txt"):
        assert (out_dir / name).stat().st_size > 0
    saved = json.loads((out_dir / "metrics.json").read_text())
    trained, untrained, mean = saved["metrics"], saved["untrained"], saved["mean_baseline"]
    assert trained["eval/loss"] < untrained["eval/loss"]
    assert trained["eval/reg_mdae"] < mean["eval/reg_mdae"]


def test_mean_baseline_and_table():
    base = mean_baseline(["3 and 5"], ["4 and 10"])
    assert base["train_mean"] == 4.0
    assert base["eval/reg_mae"] == 3.0 and base["eval/reg_mdae"] == 3.0
    table = metrics_table({"a": {"eval/num_f1": 0.5}, "b": {}})
    assert "0.5" in table and "—" in table
