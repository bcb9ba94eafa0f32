"""The benchmark scripts run end to end at toy sizes and write their tables, JSON and figures.

They are not timed here (performance claims come from running the scripts by hand, see
``benchmarks/README.md``); this only keeps them from rotting, and checks what a toy run can
check: the memory-efficient OvR loss equals the plain one, and every ratio is a positive number.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _run(script: str, *args: str, tmp_path: Path) -> tuple[dict, str]:
    out_json, out_png = tmp_path / "result.json", tmp_path / "figure.png"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / script),
            *args,
            "--json",
            str(out_json),
            "--plot",
            str(out_png),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert out_png.read_bytes()[:8] == PNG_MAGIC, "the figure is not a PNG"
    assert out_png.stat().st_size > 10_000, "the figure is suspiciously small"
    return json.loads(out_json.read_text()), proc.stdout


def _positive(x: float) -> bool:
    return math.isfinite(x) and x > 0


@pytest.mark.slow
def test_bench_elementwise_both_allocators(tmp_path):
    data, stdout = _run(
        "bench_elementwise.py",
        *("--shapes", "4x64", "--c", "8", "--rounds", "1", "--min-run-time", "0.0001"),
        *("--threads", "1", "--timer", "process"),
        tmp_path=tmp_path,
    )
    ops = {"log_prob", "cdf", "log_cdf", "ovr_log_prob", "icdf", "linear"}
    assert set(data["results"]) == {"glibc", "keep"}
    for alloc, per_shape in data["results"].items():
        assert ("keeps freed memory" in per_shape["machine"]["allocator"]) == (alloc == "keep")
        assert per_shape["machine"]["threads"] == 1 and per_shape["machine"]["cpu"]
        for validation in ("on", "off"):
            per_op = per_shape["4x64"][validation]
            assert set(per_op) == ops
            assert all(_positive(r["median"]) for r in per_op.values())
            assert all(r["min"] <= r["median"] <= r["max"] for r in per_op.values())
    assert "worst median ratio" in stdout and "glibc, keeps freed memory" in stdout


@pytest.mark.slow
def test_bench_ovr_loss_heads_agree(tmp_path):
    data, stdout = _run(
        "bench_ovr_loss.py",
        *("--n", "16", "--c", "8", "--v", "256", "--repeats", "1"),
        tmp_path=tmp_path,
    )
    results = data["results"]
    assert set(results) == {"plain", "fused", "compiled", "ce", "lce", "lce_compiled"}
    # The same inputs give the same OvR loss on both paths (float32 sums over 256 classes).
    assert results["fused"]["loss"] == pytest.approx(results["plain"]["loss"], rel=1e-5)
    assert results["compiled"]["loss"] == pytest.approx(results["plain"]["loss"], rel=1e-5)
    # torch's fused cross-entropy, eager and compiled, is the softmax head's loss
    for variant in ("lce", "lce_compiled"):
        assert results[variant]["loss"] == pytest.approx(results["ce"]["loss"], rel=1e-5)
    assert all(_positive(r["median"]) for r in results.values())
    assert all(
        results[v]["peak_extra"] >= results[v]["grad_bytes"] > 0 for v in ("plain", "fused", "ce")
    )
    assert "time fused / plain" in stdout and "time fused / lce" in stdout
    assert {name for name, *_ in data["checks"]} >= {
        "peak extra fused / lce",
        "time compiled / lce_compiled",
    }


@pytest.mark.slow
def test_bench_ovr_loss_says_when_torch_lacks_linear_cross_entropy(tmp_path):
    """On a torch without linear_cross_entropy (before 2.15) its rows say so; the rest runs."""
    script = ROOT / "benchmarks" / "bench_ovr_loss.py"
    code = (
        "import runpy, sys, torch.nn.functional as F\n"
        "del F.linear_cross_entropy\n"
        f"sys.argv = [{str(script)!r}, '--n', '8', '--c', '8', '--v', '64', '--repeats', '1',"
        " '--variants', 'fused,ce,lce', '--json', 'out.json']\n"
        f"runpy.run_path({str(script)!r}, run_name='__main__')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    data = json.loads((tmp_path / "out.json").read_text())
    assert set(data["results"]) == {"fused", "ce"}
    assert "linear_cross_entropy: torch >= 2.15" in data["absent"]["lce"]
    assert "lce          absent in torch" in proc.stdout


@pytest.mark.slow
def test_bench_generate_every_mode(tmp_path):
    from cauchylin.nn import MODES

    data, stdout = _run(
        "bench_generate.py",
        *("--shapes", "tiny", "--batch", "2", "--prompt-len", "4", "--new-tokens", "3"),
        *("--rounds", "1", "--modes", "all", "--threads", "1", "--timer", "process"),
        *("--train", "2x8", "--heads"),
        tmp_path=tmp_path,
    )
    run = data["results"]["tiny b2"]
    assert set(run) == {"base", *MODES}
    assert all(_positive(r["median"]) for r in run.values())
    assert all(r["min"] <= r["median"] <= r["max"] for r in run.values())
    assert data["machine"]["threads"] == 1 and data["machine"]["cpu"]
    assert _positive(data["training"]["tiny"]["median"]) and "training step" in stdout
    step = data["heads"]["tiny b2"]
    assert set(step) == {
        "base lm_head + argmax",
        "standard, fused heads",
        "standard, two GEMMs",
        "compatible, fused head",
    }
    assert all(_positive(r["ms"]) for r in step.values())
    assert "ours compatible" in stdout and "torch thread(s)" in stdout and "malloc" in stdout


@pytest.mark.parametrize(
    "script, flags, message",
    [
        ("bench_generate.py", ("--shapes", "huge"), "--shapes: unknown ['huge']"),
        ("bench_elementwise.py", ("--shapes", "12"), "--shapes: expected NxV items"),
        ("bench_elementwise.py", ("--allocators", "tcmalloc"), "--allocators: choose from"),
    ],
)
def test_bench_scripts_reject_bad_flags(tmp_path, script, flags, message):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *flags],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and message in proc.stderr


@pytest.mark.slow
def test_probe_adam_memory_reads_the_optimizers_own_state(tmp_path):
    """Both beta2 runs are measured; at step 1 AdamW's bias-corrected step is |g| / (|g| + eps).

    After one step ``m_hat = g`` and ``v_hat = g**2`` exactly, so the step in units of the
    learning rate is at most 1 for every parameter, whatever the gradient; a probe that read the
    wrong moments or forgot the bias correction would print other numbers.
    """
    pytest.importorskip("sklearn")
    data, stdout = _run(
        "probe_adam_memory.py",
        "--quick",
        "--steps",
        "12",
        "--beta2",
        "0.999,0.5",
        tmp_path=tmp_path,
    )
    assert [run["beta2"] for run in data["runs"]] == [0.999, 0.5]
    for run in data["runs"]:
        assert [r["step"] for r in run["rows"]] == [1, 10]
        for r in run["rows"]:
            assert all(math.isfinite(r[k]) for k in ("cls", "reg", "g_cls", "g_reg"))
            assert r["g_cls"] > 0 and r["g_reg"] > 0
            assert 0 < r["adam_step"] <= 1 + 1e-6 if r["step"] == 1 else r["adam_step"] > 0
        assert math.isfinite(run["mdae"]) and run["mdae"] >= 0
    # the first step does not depend on beta2 (bias correction), the tenth does
    first = [run["rows"][0]["adam_step"] for run in data["runs"]]
    assert first[0] == pytest.approx(first[1], rel=1e-5)
    assert "adam_beta2=0.5" in stdout


@pytest.mark.slow
def test_bench_func_vmap_against_the_loop_and_torch(tmp_path):
    data, stdout = _run(
        "bench_func.py",
        *("--d", "40", "--c", "4", "--rounds", "1", "--repeat", "1", "--backend", "eager"),
        "--no-gc",
        tmp_path=tmp_path,
    )
    assert data["agree"] and "compiled and eager agree" in stdout
    assert data["gc"] is False  # --no-gc: the collector off while timing
    assert set(data["ratios"]) == {
        "loop / vmap (validation on)",
        "loop / vmap (validation off)",
        "vmap / torch vmap (validation on)",
        "vmap / torch vmap (validation off)",
        "compiled vmap / eager vmap",
    }
    assert all(_positive(r) for r in data["ratios"].values())
    assert max(data["differences"].values()) <= data["tolerance"]


@pytest.mark.slow
def test_bench_encoding_old_and_new_agree(tmp_path):
    """The encoding benchmark runs both sides (here the same revision) and compares them."""
    data, stdout = _run("bench_encoding.py", *("--rows", "300", "--old", "HEAD"), tmp_path=tmp_path)
    assert [r["stage"] for r in data["table"]] == [
        "numbers",
        "decimals",
        "tokenizer",
        "total",
        "rust floor",
    ]
    assert all(_positive(r["ratio"]) and _positive(r["new_s"]) for r in data["table"])
    assert "rows/s" in stdout


@pytest.mark.slow
def test_bench_data_scaling_toy(tmp_path):
    data, stdout = _run(
        "bench_data_scaling.py",
        *("--rows", "300", "--steps", "2", "--encode-rows", "200"),
        tmp_path=tmp_path,
    )
    (run,) = data["runs"]
    assert run["rows"] == 300 and 0 < run["first_step_s"] <= run["total_s"]
    assert _positive(run["peak_rss_mb"]) and _positive(run["step_s"])
    rates = data["encoding"]
    assert _positive(rates["lazy_rows_per_s"]) and _positive(rates["eager_rows_per_s"])
    assert "rows/s" in stdout


@pytest.mark.slow
def test_bench_data_scaling_evaluate_rows(tmp_path):
    data, stdout = _run(
        "bench_data_scaling.py",
        *("--rows", "200", "--steps", "2", "--no-encoding"),
        *("--evaluate-jsonl-rows", "120", "--evaluate-rows", "120"),
        *("--evaluate-batch-size", "32"),
        tmp_path=tmp_path,
    )
    csv_run, jsonl_run = data["evaluate"]  # by size, the table before the JSONL file
    assert (csv_run["kind"], jsonl_run["kind"]) == ("csv", "jsonl")
    for run in (csv_run, jsonl_run):
        assert run["rows"] == 120 and _positive(run["rows_per_s"]) and _positive(run["peak_rss_mb"])
        assert run["metrics"]["eval/positions"] > 0 and run["metrics"]["target/count"] == 120
        assert run["train_rows_per_s"] == data["encoding"]["step_rows_per_s"]
        assert run["peak_ratio"] == 1.0  # each peak beside the smallest run's of its kind
        assert _positive(run["cpu_s"]) and run["cpu_s"] < 10 * run["total_s"]
        # the resident memory sampled as it ran: [seconds, VmRSS MB, VmHWM MB], the first at
        # the start, none above the peak ru_maxrss gives
        assert run["memory"] and run["memory"][0][0] < 1.0
        assert all(rss <= hwm <= run["peak_rss_mb"] + 1 for _, rss, hwm in run["memory"])
    assert _positive(data["runs"][0]["cpu_s"])
    # the same texts, from a table and from JSONL: the same held-out metrics
    assert jsonl_run["metrics"]["eval/loss"] == pytest.approx(csv_run["metrics"]["eval/loss"])
    assert "evaluate csv 120 rows: peak RSS" in stdout and "smallest csv run's" in stdout


@pytest.mark.slow
def test_probe_readout_rules_keeps_what_each_rule_names(tmp_path):
    """The old rule keeps exactly the contexts whose cross-validated NLL beat the shared head's;
    the toy run scores all four rules."""
    pytest.importorskip("sklearn")
    import random

    import torch
    from cauchylin_hf.model import CauchyLMForCausalLM
    from cauchylin_hf.readouts import solve_readouts
    from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import probe_readout_rules as probe

    torch.manual_seed(0)
    model, ntok = CauchyLMForCausalLM.from_base(
        tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True
    )
    rng = random.Random(0)
    texts = [f"width {rng.randint(2, 60)}, area {rng.randint(100, 160)}." for _ in range(80)]
    report = solve_readouts(model, ntok, texts)
    assert model.action.readouts.num_contexts == len(report.contexts) == 2  # every one kept
    report.contexts[1]["shared_nll"] = -math.inf  # the shared head "better" on the second
    probe._keep_if_better(model, report)
    better = {c["code"] for c in report.contexts if c["solved_nll"] < c["shared_nll"]}
    table = model.action.readouts
    assert set(table.codes.tolist()) == better == {report.contexts[0]["code"]}
    row = probe.run("wine", 0, 3, quick=True)
    assert all(math.isfinite(row[name]) and row[name] >= 0 for name, _, _ in probe.RULES)


@pytest.mark.slow
def test_probe_readout_steadiness_reads_the_chosen_penalty_as_the_same_penalty_fixed(tmp_path):
    """At every probed step the readout of the penalty cross-validation chose reads the
    held-out rows exactly as that penalty held fixed (the refit on every row is the same)."""
    out = tmp_path / "steady.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "probe_readout_steadiness.py"),
            *("--quick", "--tables", "wine", "--json", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["step"] for r in rows] == [10, 15, 20]
    for row in rows:
        chosen = row["penalty chosen"]
        assert chosen in (1e-6, 1e-4, 1e-2, 1.0)
        assert row["mdae chosen"] == row[f"mdae {chosen:g}"]
        assert all(_positive(v) for k, v in row.items() if k.startswith("mdae"))
    assert "median step-to-step change" in proc.stdout
