"""``benchmarks/bench_quality.py`` runs end to end at toy sizes and writes its tables, JSON and figure.

Nothing is measured here (the numbers come from running the script by hand, see
``docs/benchmarks.md``); this keeps the script from rotting and checks what a toy run can check:
every model of every table, budget, seed and start is scored (both readings of the text models),
errors are non-negative, coverages are shares, the reference rows are there, the targets are
summarised, a rerun with ``--resume`` trains nothing, and bad flags are refused.
"""

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sklearn")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_quality.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
HAS_NTL = importlib.util.find_spec("ntloss") is not None


def run(*args):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=900
    )


@pytest.mark.slow
def test_bench_quality_toy_run(tmp_path):
    out_json, out_png = tmp_path / "q.json", tmp_path / "q.png"
    models = "causal,text,mse" + (",ntl" if HAS_NTL else "")
    args = [
        "--quick",
        "--steps",
        "3,4",
        "--seeds",
        "0,1",
        "--tables",
        "demo,cancer",
        "--models",
        models,
        "--variants",
        "causal (context-scaled gradient)",
        "--corrupt",
        "0.1",
        "--pretrained",
        "--pretrain-steps",
        "2",
        "--json",
        str(out_json),
        "--plot",
        str(out_png),
    ]
    proc = run(*args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out_json.read_text())["rows"]
    have = {(r["table"], r["name"], r["steps"], r["seed"], r["corrupt"], r["start"]) for r in rows}
    names = ["causal", "causal (context-scaled gradient)", "MSE head", "CE text LM"]
    names += ["CE text LM, median of 32 samples"]
    if HAS_NTL:
        names += ["CE + NTL", "CE + NTL, median of 32 samples"]
    for table in ("demo", "cancer"):
        for steps in (3, 4):
            for seed in (0, 1):
                for name in names:
                    assert (table, name, steps, seed, 0.0, "scratch") in have, (table, name)
        for seed in (0, 1):  # corrupted targets and the CE-pretrained start: the 1000-step
            # budget when it is run, else the first one
            assert (table, "causal", 3, seed, 0.1, "scratch") in have
            assert (table, "causal (context-scaled gradient)", 3, seed, 0.1, "scratch") in have
            assert (table, "CE text LM", 3, seed, 0.1, "scratch") in have
    for seed in (0, 1):  # the pretraining text is the demo corpus: not fine-tuned on itself
        assert ("cancer", "causal", 3, seed, 0.0, "pretrained") in have
        assert ("cancer", "CE text LM", 3, seed, 0.0, "pretrained") in have
        assert ("demo", "causal", 3, seed, 0.0, "pretrained") not in have
    assert ("cancer", "linear regression (features)", 0, 0, 0.0, "scratch") in have
    assert ("demo", "training median", 0, 0, 0.0, "scratch") in have
    for r in rows:
        assert r["mae"] >= 0 and r["mdae"] >= 0
        assert math.isnan(r["spread"]) or r["spread"] >= 0
        for c in r["coverage"].values():
            assert 0.0 <= c <= 1.0
        if r["kind"] in ("causal", "text", "ntl"):
            assert 0.0 <= r["text_accuracy"] <= 1.0
        every = {"0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7", "0.8", "0.9", "0.95", "0.99"}
        if r["name"].endswith("samples"):
            assert set(r["coverage"]) == every and 0.0 <= r["parsed"] <= 1.0
            assert set(r["interval_score"]) == every
        if r["kind"] == "causal":  # calibrated and raw intervals, proper scores, the ceiling
            assert set(r["coverage"]) == set(r["coverage_raw"]) == every
            assert all(v >= 0 for v in r["interval_score"].values())
            assert 0.0 <= r["pit_ks"] <= 1.0 and math.isfinite(r["log_score"])
            assert r["ridge_mdae"] >= 0 and r["shared_head_mdae"] >= 0
    names = {r["name"] for r in rows if r["table"] == "cancer" and r["kind"] == "reference"}
    for ref in ("linear regression", "gradient boosting", "Huber regression"):
        assert f"{ref} (features)" in names
    if importlib.util.find_spec("mapie") is not None:  # the coverage references
        conformal = [r for r in rows if r["name"].endswith("cross-conformal intervals")]
        assert conformal and all(set(r["coverage"]) == every for r in conformal)
    assert out_png.read_bytes()[:8] == PNG_MAGIC
    assert "targets of the causal model" in proc.stdout
    report = run("--json", str(out_json), "--report", "--reliability", str(tmp_path / "r.png"))
    assert report.returncode == 0, report.stderr[-3000:]
    assert "| cancer |" in report.stdout
    # no 1000-step run to pool: said, not printed as NaN
    assert "pooled coverage: no clean causal run of 1000 steps to pool" in report.stdout
    assert "nan" not in report.stdout.split("== targets")[1]
    assert (tmp_path / "r.png").read_bytes()[:8] == PNG_MAGIC
    again = run(*args, "--resume")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "0 training runs to do" in again.stdout
    assert len(json.loads(out_json.read_text())["rows"]) == len(rows)
    # a resumed run that names fewer tables keeps the others' rows and their references
    narrow = [a if a != "demo,cancer" else "cancer" for a in args]
    third = run(*narrow, "--resume")
    assert third.returncode == 0, third.stderr[-3000:]
    kept = json.loads(out_json.read_text())["rows"]
    assert {(r["table"], r["name"]) for r in kept} == {(r["table"], r["name"]) for r in rows}


def test_bench_quality_refuses_bad_flags(capsys):
    """Each bad flag is refused by argparse's error (exit 2), before anything trains: in-process,
    so the fifteen refusals do not each pay for a fresh interpreter importing torch."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_quality

    for args in (
        ["--tables", "mnist"],
        ["--models", "gpt"],
        ["--variants", "nope"],
        ["--steps", "0"],
        ["--steps", "ten"],
        ["--seeds", ""],
        ["--corrupt", "2"],
        ["--resume"],
        ["--periodic", "0"],
        ["--periodic", "one"],
        ["--periodic", "1", "--periodic-frequencies", "0"],
        ["--learning-rate", "0"],
        ["--learning-rate", "nan"],
        ["--batch-size", "0"],
        ["--lr-scheduler", "linear"],
        ["--tables", "wine@0"],
        ["--tables", "wine@x"],
        ["--tables", "sunspots@1"],
        ["--tables", "demo@2"],
    ):
        with pytest.raises(SystemExit) as exit_info:
            bench_quality.main(list(args))
        assert exit_info.value.code == 2, args
        assert "error" in capsys.readouterr().err, args


@pytest.mark.slow
def test_bench_quality_trains_with_the_learning_rate_and_batch_asked_for(tmp_path):
    """The shared budget's flags reach the training (one thread: a run is deterministic, so a
    flag that were dropped would give the same network, bit for bit), are recorded, and a grid
    that ran with other ones is not resumed into."""
    base = ["--quick", "--steps", "3", "--seeds", "0", "--tables", "cancer", "--models", "causal"]
    first, second, third = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    other = ["--learning-rate", "0.05", "--lr-scheduler", "warmup_stable_decay"]
    for path, flags in ((first, []), (second, other), (third, ["--batch-size", "4"])):
        proc = run(*base, *flags, "--json", str(path))
        assert proc.returncode == 0, proc.stderr[-3000:]
    a, b, c = (json.loads(p.read_text()) for p in (first, second, third))
    # --quick's default batch is the toy's (8); --batch-size overrides it there too
    assert (a["args"]["learning_rate"], a["args"]["batch_size"]) == (3e-3, 8)
    assert (b["args"]["learning_rate"], b["args"]["lr_scheduler"]) == (0.05, other[-1])
    assert (a["args"]["lr_scheduler"], c["args"]["batch_size"]) == ("cosine", 4)

    def causal(payload):
        (row,) = [r for r in payload["rows"] if r["name"] == "causal"]
        return row

    assert causal(a)["mdae"] != causal(b)["mdae"]
    assert causal(a)["mdae"] != causal(c)["mdae"]
    refused = run(*base, "--learning-rate", "0.05", "--json", str(first), "--resume")
    assert refused.returncode == 2
    assert "--learning-rate 0.003, not 0.05" in refused.stderr


def test_bench_quality_prints_the_learning_curve_of_a_json(tmp_path):
    """``--report --curve`` reads the runs of a file (nothing trained): per table and model the
    median MdAE over the seeds at each budget, beside the better scikit-learn estimator."""

    def row(name, steps, seed, mdae, kind="causal"):
        return {
            "table": "wine",
            "kind": kind,
            "name": name,
            "steps": steps,
            "seed": seed,
            "corrupt": 0.0,
            "start": "scratch",
            "mdae": mdae,
        }

    rows = [
        row("causal", 5, 0, 0.9),
        row("causal", 100, 0, 0.5),
        row("causal", 100, 1, 0.3),
        row("causal", 100, 2, 0.4),
        row("linear regression (features)", 0, 0, 0.17, kind="reference"),
        row("gradient boosting (features)", 0, 0, 0.2, kind="reference"),
    ]
    path = tmp_path / "rows.json"
    path.write_text(json.dumps({"rows": rows}))
    proc = run("--json", str(path), "--report", "--curve")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| table | model | 5 steps | 100 steps | best of LR / HGB |" in proc.stdout
    assert "| wine | causal | 0.9 | 0.4 (3) | 0.17 |" in proc.stdout


def test_bench_quality_trains_the_periodic_embedding_and_pairs_it(tmp_path):
    """``--periodic`` trains a causal model with ``numeric_encoding="periodic"`` beside the
    defaults on the same seed; ``--report --paired`` sets the two side by side per seed."""
    path = tmp_path / "p.json"
    args = ["--quick", "--steps", "2", "--tables", "engel", "--models", "causal"]
    proc = run(*args, "--periodic", "3", "--periodic-frequencies", "4", "--json", str(path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    name = "causal (periodic, K=4, sigma=3)"
    rows = {r["name"]: r for r in json.loads(path.read_text())["rows"] if r["kind"] == "causal"}
    assert set(rows) == {"causal", name}
    assert rows[name]["mdae"] != rows["causal"]["mdae"]  # another network, not a copy
    report = run("--json", str(path), "--report", "--paired", name)
    assert report.returncode == 0, report.stderr[-3000:]
    ratio = rows[name]["mdae"] / rows["causal"]["mdae"]
    a, b = rows["causal"]["mdae"], rows[name]["mdae"]
    line = f"| engel | 2 | {a:.4g} | {b:.4g} | {ratio:.3f} ({ratio:.3f}) |"
    assert line in report.stdout, report.stdout


# vega_datasets reads its files with an argument pandas 3 deprecates (not ours to change)
@pytest.mark.filterwarnings("ignore:The 'convert_dates' keyword:DeprecationWarning")
@pytest.mark.parametrize("table", ["penguins", "cars", "barley", "iris", "weather", "modechoice"])
def test_bench_quality_word_tables_agree_with_their_columns(table):
    """Each word table's texts and its scikit-learn columns describe the same rows (the target a
    text ends with is the row's ``y``), every row's target is one field however its word columns
    read, and the word columns are one-hot in ``X``."""
    pytest.importorskip("statsmodels")
    pytest.importorskip("vega_datasets")
    pytest.importorskip("palmerpenguins")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_quality
    from cauchylin_hf.numbers import find_numbers, number_fields

    train, held, (X, y, X_test, y_test) = bench_quality.load_table(table)
    assert len(train) == len(X) == len(y) > 0 and len(held) == len(X_test) == len(y_test) > 0
    for texts, targets in ((train, y), (held, y_test)):
        for text, target in zip(texts, targets, strict=True):
            assert find_numbers(text)[-1].value == pytest.approx(float(target), rel=1e-6), text
    assert len({number_fields(t)[-1] for t in [*train, *held]}) == 1
    # one-hot columns: 0/1 with exactly one 1 per word column, so every row's 0/1 columns sum to
    # the same count, the number of word columns
    binary = [j for j in range(X.shape[1]) if set(X[:, j].tolist()) <= {0.0, 1.0}]
    sums = {float(X[i, binary].sum()) for i in range(len(X))}
    assert len(sums) == 1 and min(sums) >= 1, sums


def test_bench_quality_splits_a_table_again_by_its_seed():
    """``wine@S`` holds the rows of ``wine``, split 80/20 by another shuffle: the same rows and
    sizes, another held-out part, the same one for the same seed, and texts that still match
    their columns."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_quality
    from cauchylin_hf.numbers import find_numbers

    base = bench_quality.load_table("wine")
    again = bench_quality.load_table("wine@2")
    assert bench_quality.load_table("wine@2")[1] == again[1]
    assert sorted(base[0] + base[1]) == sorted(again[0] + again[1])
    assert (len(base[0]), len(base[1])) == (len(again[0]), len(again[1]))
    assert set(again[1]) != set(base[1])
    _, y, _, y_test = again[2]
    for texts, targets in ((again[0], y), (again[1], y_test)):
        for text, target in zip(texts, targets, strict=True):
            assert find_numbers(text)[-1].value == pytest.approx(float(target), rel=1e-6), text
    assert bench_quality.table_split("engel@12") == ("engel", 12)
    assert bench_quality.table_split("engel") == ("engel", 0)


def test_bench_quality_reports_a_table_over_its_splits():
    """``--report --splits``: each split's causal MdAE (the median over its seeds) over the better
    of linear regression and gradient boosting on that split, in split order, and their median."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_quality

    def causal(table, seed, mdae, **kw):
        row = {"table": table, "kind": "causal", "name": "causal", "steps": 1000, "seed": seed}
        return {**row, "corrupt": 0.0, "start": "scratch", "mdae": mdae, **kw}

    def ref(table, name, mdae):
        return {"table": table, "kind": "reference", "name": f"{name} (features)", "mdae": mdae}

    rows = [
        causal("wine@2", 0, 3.0),
        causal("wine", 0, 1.0),
        causal("wine", 1, 5.0),
        causal("wine", 2, 2.0),  # split 0: the median of 1, 5, 2 is 2
        causal("wine", 0, 9.0, steps=300),  # another budget: not read
        causal("wine", 0, 9.0, corrupt=0.1),  # corrupted: not read
        ref("wine", "linear regression", 4.0),
        ref("wine", "gradient boosting", 2.5),  # 2 / 2.5 = 0.80
        ref("wine@2", "linear regression", 2.0),  # 3 / 2 = 1.50
        ref("wine@2", "gradient boosting", 6.0),
        causal("wine@5", 0, 1.0),  # no baselines on this split: not shown
    ]
    table = bench_quality.split_table(rows, ["wine"])
    assert "| wine | 0, 2 | 0.80 / 1.50 | 1.15 | 1 of 2 | 1 of 2 |" in table, table


def test_bench_quality_unseen_tables_are_tables_of_the_grid():
    """The tables kept apart to check the defaults on are tables the script can run."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_quality

    assert set(bench_quality.UNSEEN_TABLES) <= set(bench_quality.TABLES)
    assert set(bench_quality.WORD_TABLES) <= set(bench_quality.TABLES)


def test_bench_quality_solves_the_readouts_again_as_asked(tmp_path):
    """``--resolve-penalties`` and ``--resolve-location`` add a row per run, the same network's
    readouts solved again: with the default grid again, the held-out errors of the defaults'
    own row to every digit (the re-solve reads the same rows the same way)."""
    from cauchylin.readout import DEFAULT_PENALTIES

    grid = ",".join(repr(p) for p in DEFAULT_PENALTIES)
    out = tmp_path / "r.json"
    args = ["--quick", "--steps", "3", "--seeds", "0", "--tables", "cancer", "--models", "causal"]
    proc = run(*args, "--resolve-penalties", grid, "--resolve-location", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {r["name"]: r for r in json.loads(out.read_text())["rows"]}
    again = [n for n in rows if n.startswith("causal [penalties ")]
    assert len(again) == 1 and rows[again[0]]["mdae"] == rows["causal"]["mdae"]
    located = rows["causal [location: Cauchy or least squares, by median error]"]
    assert math.isfinite(located["mdae"]) and located["count"] == rows["causal"]["count"]
