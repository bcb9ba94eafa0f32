"""``benchmarks/probe_corruption.py``: the clean readouts see the clean targets, and a run scores
what it says.

Nothing is measured here (the numbers come from running the script by hand, see
``docs/benchmarks.md``).
"""

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("sklearn")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "probe_corruption.py"


def _probe():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        spec = importlib.util.spec_from_file_location("probe_corruption", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        from bench_quality import load_table
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return module, load_table


@pytest.mark.slow
def test_the_clean_readouts_read_every_corrupted_target_back_at_its_clean_value():
    """On a network trained on corrupted texts, the rows its readouts are solved on are given
    back their clean targets: every changed target was 100 times a clean one, every target is
    then a clean one, and asking for the corrupted targets changes nothing."""
    probe, load_table = _probe()
    from cauchylin_hf.app import compare

    train, _, _ = load_table("friedman1", True)
    corrupted = compare.corrupt_targets(train, fraction=probe.FRACTION, factor=probe.FACTOR)
    targets = probe._targets_by_row(train, corrupted)
    tiny = compare.Recipe(
        hidden_size=16, num_layers=1, num_heads=2, vocab_size=300, max_steps=1, batch_size=4
    )
    model, _, result = compare.train_causal_run(corrupted, tiny)
    num = model.config.num_token_id

    def last(data):
        return torch.stack([ex["numeric_values"][ex["input_ids"] == num][-1] for ex in data])

    before = last(result.readout_data)
    clean = last(probe._with_targets(result.readout_data, num, targets, 0))
    same = last(probe._with_targets(result.readout_data, num, targets, 1))
    assert torch.equal(same, before)
    changed = clean != before
    # 10% of about 100 readout rows: at least one is corrupted (seed 1 of corrupt_targets)
    assert 0 < int(changed.sum()) < len(before) // 3
    torch.testing.assert_close(before[changed], 100 * clean[changed], rtol=1e-6, atol=0)
    clean_values = torch.tensor([v[0] for v in targets.values()], dtype=torch.float32)
    assert all(bool((clean_values == v).any()) for v in clean)


@pytest.mark.slow
def test_probe_corruption_toy_run(tmp_path):
    """Every table and seed is trained clean and corrupted, each network scored under its
    variants; an ensemble of one network reads as that network (its median is the value of its
    location); the report has a line per table."""
    probe, _ = _probe()
    out = tmp_path / "probe.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--tables", "friedman1", "--seeds", "0,1",
         "--members", "2", "--variant", "causal (no scale cutoff)", "--json", str(out)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    rows = json.loads(out.read_text())["rows"]
    assert sorted((r["seed"], r["corrupt"]) for r in rows) == [
        (0, False), (0, True), (1, False), (1, True)
    ]  # fmt: skip
    for row in rows:
        assert row["variant"] == "causal (no scale cutoff)"
        names = {"own least", "own average"} | ({"clean readouts"} if row["corrupt"] else set())
        assert set(row["mdae"]) == names
        assert all(math.isfinite(v) and v > 0 for v in row["mdae"].values())
        for name in names:
            assert probe.ensemble_mdae([row], name) == pytest.approx(row["mdae"][name], rel=1e-6)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("| friedman1 |")]
    assert len(lines) == 1 and lines[0].count("|") == 14 and "| x100 |" in lines[0]
    assert " to " in lines[0]  # the cost's bootstrap interval


def test_cost_interval_of_constant_runs_is_their_cost():
    """Runs that do not scatter leave the bootstrap nothing to resample: the interval is the
    point, and it is the corrupted runs' median over the clean runs' (not the inverse)."""
    probe, _ = _probe()
    low, high = probe.cost_interval([2.0] * 5, [3.0] * 5)
    assert low == pytest.approx(0.5, abs=1e-12) and high == pytest.approx(0.5, abs=1e-12)
    # one seed has nothing to resample (scipy refuses it): no interval
    assert all(math.isnan(v) for v in probe.cost_interval([2.0], [3.0]))


def test_probe_refuses_an_unknown_variant(capsys):
    """``--variant`` names one of bench_quality's causal variants, checked before any run."""
    probe, _ = _probe()
    with pytest.raises(SystemExit):
        probe.main(["--quick", "--variant", "causal (no such setting)"])
    assert "--variant must be one of" in capsys.readouterr().err


def test_cost_interval_covers_the_true_cost_at_about_its_level():
    """Monte Carlo: 300 pairs of ten-seed samples from lognormal laws whose medians differ by a
    factor 1.3 (true cost +30%); the 90% interval covers +30% in C of them. C is
    Binomial(300, p) with p the interval's true coverage; percentile intervals of a median at ten
    draws may cover somewhat less than asked, so the bound is for p >= 0.80 with a false-failure
    rate below 1e-6 (4.9 standard deviations): 0.80 * 300 - 4.9 * sqrt(300 * 0.8 * 0.2) = 206.
    An interval twice too narrow (a 63% interval: 196 of these 300) or centred on the inverse
    ratio falls below it. (Measured: 268.)"""
    import numpy as np

    probe, _ = _probe()
    rng = np.random.default_rng(12345)
    covered = 0
    for _ in range(300):
        clean = rng.lognormal(0.0, 0.5, size=10)
        bad = 1.3 * rng.lognormal(0.0, 0.5, size=10)
        low, high = probe.cost_interval(list(clean), list(bad), resamples=2000)
        covered += low <= 0.3 <= high
    assert 206 <= covered


def test_paired_test_reads_each_seed_against_its_own_clean_run():
    """Every seed's corrupted run 1.5 times its clean run: the median ratio is 1.5 and the
    signed-rank p is the exact two-sided 2 / 2^10 of ten ratios on one side; ratios that
    alternate 1.2 and 1/1.2 tilt neither way (p = 1 up to the ranks of equal ratios)."""
    probe, _ = _probe()
    clean = [0.5, 0.4, 0.37, 0.93, 0.56, 0.97, 0.58, 0.4, 0.88, 0.41]
    ratio, p = probe.paired_test(clean, [1.5 * v for v in clean])
    assert ratio == pytest.approx(1.5, rel=1e-12) and p == pytest.approx(2 / 2**10, rel=1e-9)
    ratio, p = probe.paired_test(
        clean, [v * (1.2 if i % 2 else 1 / 1.2) for i, v in enumerate(clean)]
    )
    assert ratio == pytest.approx(1.0, abs=0.1) and p > 0.5
    # identical runs (a factor of 1): no tilt and no NaN (scipy has no ranks to test there)
    assert probe.paired_test(clean, list(clean)) == (1.0, 1.0)
