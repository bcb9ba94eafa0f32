"""The ``cauchylin-lm`` command line on tiny local checkpoint folders and a small CSV table."""

from __future__ import annotations

import csv
import json
import math
import random
import re
import subprocess
import sys

import pytest
import torch
from cauchylin_hf.app import cli
from cauchylin_hf.model import CauchyLMForCausalLM
from cauchylin_hf.numbers import find_numbers

COMMANDS = ("demo", "train", "evaluate", "predict", "generate", "verify")


@pytest.fixture(scope="module")
def base_dir(cli_base):
    """The session's tiny base (a test that changes it works on a copy)."""
    return cli_base


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    texts = [f"{i} boxes of {i + 2} eggs hold {i * (i + 2)} eggs." for i in range(1, 13)]
    jsonl = folder / "train.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    txt = folder / "eval.txt"
    txt.write_text("\n".join(texts[:4]) + "\n")
    empty = folder / "empty.jsonl"
    empty.write_text("\n")
    return {"train": jsonl, "eval": txt, "empty": empty}


@pytest.fixture(scope="module")
def trained(base_dir, data, tmp_path_factory):
    out = tmp_path_factory.mktemp("trained")
    code = cli.main(
        [
            "train",
            str(base_dir),
            "--train-file",
            str(data["train"]),
            "--eval-file",
            str(data["eval"]),
            "--output-dir",
            str(out),
            "--max-steps",
            "3",
            "--batch-size",
            "4",
            "--no-progress",
        ]
    )
    assert code == 0
    return out


def _table(path, n, seed):
    """A diabetes-like table: progression = 2 age + 3 bmi (integers); s1 has 3 decimals."""
    r = random.Random(seed)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["age", "s1", "bmi", "target"])
        for _ in range(n):
            age, bmi = r.randint(20, 80), round(r.uniform(18, 40), 1)
            w.writerow([age, f"{r.uniform(-0.1, 0.1):.3f}", bmi, round(2 * age + 3 * bmi)])
    return path


TEMPLATE = "age {age} bmi {bmi} -> progression {target}."


@pytest.fixture(scope="module")
def table_model(tmp_path_factory):
    """`train --from-config qwen2-tiny --data table.csv --template ...` on a table made here."""
    folder = tmp_path_factory.mktemp("table")
    train_csv = _table(folder / "table.csv", 96, seed=0)
    test_csv = _table(folder / "test.csv", 12, seed=1)
    out = folder / "model"
    argv = [
        "train",
        "--from-config",
        "qwen2-tiny",
        "--data",
        str(train_csv),
        "--template",
        TEMPLATE,
        "--eval-file",
        str(test_csv),
        "--output-dir",
        str(out),
        "--max-steps",
        "120",
        "--batch-size",
        "16",
        "--learning-rate",
        "5e-3",
        "--warmup-ratio",
        "0.1",
        "--lr-scheduler",
        "cosine",
        "--threads",
        "1",
        "--no-progress",
    ]
    threads = torch.get_num_threads()
    try:
        assert cli.main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    return {"model": out, "train": train_csv, "test": test_csv, "argv": argv}


@pytest.fixture(scope="module")
def shared_head_model(table_model, tmp_path_factory):
    """The same training with --no-readouts: the one regression head, whose predictions do not
    move with the batch a prompt is read in (a readout solved on this barely trained backbone
    reads feature differences of about 1e-4 and carries float32 rounding into the printed
    digits: the report rules below are tested apart from that)."""
    out = tmp_path_factory.mktemp("shared") / "model"
    argv = list(table_model["argv"])
    argv[argv.index("--output-dir") + 1] = str(out)
    threads = torch.get_num_threads()
    try:
        assert cli.main([*argv, "--no-readouts"]) == 0
    finally:
        torch.set_num_threads(threads)
    return {**table_model, "model": out}


# ------------------------------------------------------------------------------------- basics


def test_help_of_every_command(capsys):
    for command in COMMANDS:
        with pytest.raises(SystemExit) as exc:
            cli.main([command, "--help"])
        assert exc.value.code == 0
        assert command in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main([])


def test_module_entry_point_runs():
    run = subprocess.run(
        [sys.executable, "-m", "cauchylin_hf.app.cli", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0
    assert all(c in run.stdout for c in COMMANDS)


def test_train_saves_a_causal_model(trained, capsys):
    assert (trained / "config.json").is_file()
    assert json.loads((trained / "config.json").read_text())["model_type"] == "cauchy_lm"
    record = json.loads((trained / cli.DATA_FORMAT_FILE).read_text())
    assert record["template"] is None and record["precision"]["default"] == 0


def test_evaluate_json(trained, data, capsys):
    code = cli.main(
        ["evaluate", str(trained), "--data", str(data["eval"]), "--json", "--no-progress"]
    )
    assert code == 0
    metrics = json.loads(capsys.readouterr().out)
    assert {"eval/num_f1", "eval/reg_mdae", "eval/accuracy", "target/mae"} <= set(metrics)
    # the proper scores of the predictions, per level where they are per level
    scores = {"target/log_score", "target/pit_ks", "all/log_score"}
    scores |= {f"target/{k}_{c}" for k in ("interval_score", "calibrated") for c in (50, 80, 90)}
    assert scores <= set(metrics)
    assert 0.0 <= metrics["target/pit_ks"] <= 1.0 and metrics["target/interval_score_90"] >= 0
    assert metrics["target/count"] == 4  # one target number per text


def test_generate_json(trained, capsys):
    code = cli.main(
        [
            "generate",
            str(trained),
            "--prompt",
            "3 boxes of",
            "--prompt",
            "7 eggs",
            "--mode",
            "shared_individual",
            "--max-new-tokens",
            "4",
            "--json",
        ]
    )
    assert code == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["prompt"] for r in rows] == ["3 boxes of", "7 eggs"]
    assert all(r["text"].startswith(r["prompt"]) for r in rows)


def test_generate_on_a_base_folder(base_dir, capsys):
    code = cli.main(["generate", str(base_dir), "--prompt", "hi", "--max-new-tokens", "2"])
    assert code == 0
    assert capsys.readouterr().out.startswith("hi")


def test_a_prompt_as_long_as_the_context_exits_2_in_predict_and_generate(base_dir, capsys):
    """One rule (the library's): before, generate warned and exited 0 where predict exited 2.
    The index counts every prompt, also past the first batch."""
    long = " ".join(["7 eggs"] * 256)  # the tiny Qwen2 (RoPE) has 256 positions
    for command in ("generate", "predict"):
        argv = [command, str(base_dir), "--prompt", "3 eggs", "--prompt", long]
        assert cli.main([*argv, "--batch-size", "1", "--no-progress"]) == 2
        captured = capsys.readouterr()
        (line,) = captured.err.strip().splitlines()
        assert re.fullmatch(
            rf"cauchylin-lm {command}: error: prompts\[1\] is \d+ tokens long: the model's "
            r"context of 256 positions \(max_position_embeddings\) leaves no room for the token "
            r"after it; 1 of 2 prompts are that long: shorten them",
            line,
        ), line
        assert captured.out == ""  # refused before the first batch: nothing written


def test_verify_passes_on_the_base(base_dir, capsys):
    assert cli.main(["verify", str(base_dir), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["max_abs_diff"] <= 1e-4


# ------------------------------------------------------------ a table, from nothing, end to end


def test_train_from_config_on_a_table_then_predict(table_model, capsys):
    model_dir = table_model["model"]
    record = json.loads((model_dir / cli.DATA_FORMAT_FILE).read_text())
    assert record["template"] == TEMPLATE and record["target"] == "target"
    # decimals per field, as the table wrote them: bmi 1, the integer progression 0
    assert record["precision"]["decimals"] == {"age": 0, "bmi": 1, "progression": 0}

    assert cli.main(["predict", str(model_dir), "--data", str(table_model["test"]), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    with table_model["test"].open() as f:
        table = list(csv.DictReader(f))
    assert len(rows) == len(table)
    for row, cells in zip(rows, table, strict=True):
        assert row["prompt"] == f"age {cells['age']} bmi {cells['bmi']} -> progression "
        assert row["true"] == float(cells["target"]) and row["field"] == "progression"
        assert row["interval_50"][0] <= row["median"] <= row["interval_50"][1]
        assert row["interval_90"][0] <= row["interval_50"][0]
        assert row["interval_50"][1] <= row["interval_90"][1]
        assert row["text"] == str(round(row["median"]))  # integers, like the training data
    # trained: a number comes next, and the predictions rank with the truth (the model has
    # seen 96 rows; predicting one constant would give no ranking at all)
    assert min(r["p_num"] for r in rows) > 0.5
    median = sorted(r["median"] for r in rows)[len(rows) // 2]
    assert not all(r["median"] == median for r in rows)

    assert cli.main(["predict", str(model_dir), "--prompt", rows[0]["prompt"]]) == 0
    line = capsys.readouterr().out.strip()
    # alone, the prompt's median differs from its batched one only by float32 rounding (a
    # batch of one runs other GEMM shapes), which a readout solved on this barely trained
    # backbone carries into the printed digits: less than the prediction's own uncertainty,
    # inside its 50% interval (the integer printed: +-0.5)
    alone = re.match(re.escape(rows[0]["prompt"]) + r"(\S+)  \|  50% \[", line)
    assert alone is not None, line
    lo, hi = rows[0]["interval_50"]
    assert lo - 0.5 <= float(alone.group(1)) <= hi + 0.5
    assert "90% [" in line and "P(<NUM>)" in line


def test_a_random_backbone_trains_by_default(table_model):
    """--from-config: the backbone is trainable; its weights moved away from the seeded init."""
    from cauchylin_hf.app.scratch import build_from_config
    from cauchylin_hf.data import TableTemplate, read_table

    trained = CauchyLMForCausalLM.from_pretrained(table_model["model"])
    assert trained.config.freeze_backbone is False
    texts = TableTemplate(TEMPLATE, "target").texts(read_table(table_model["train"]))
    init, _ = build_from_config("qwen2-tiny", texts, seed=0)  # the same seeded init
    moved = [
        name
        for (name, p), (_, q) in zip(
            init.backbone.named_parameters(), trained.backbone.named_parameters(), strict=True
        )
        if not torch.equal(p, q)
    ]
    assert len(moved) == len(list(init.backbone.parameters()))


def test_evaluate_a_table_reports_the_target_metrics(table_model, capsys):
    argv = ["evaluate", str(table_model["model"]), "--data", str(table_model["test"]), "--json"]
    assert cli.main([*argv, "--no-progress"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["target/count"] == 12  # one target per row
    assert metrics["field/progression/count"] == 12 and metrics["field/bmi/count"] == 12
    assert math.isclose(metrics["target/mae"], metrics["field/progression/mae"])
    # the same numbers as cauchylin_hf.predict on the rendered rows
    from cauchylin_hf.data import TableTemplate, read_table
    from cauchylin_hf.predict import number_metrics, number_predictions

    model, ntok = cli.load_causal_model(table_model["model"])
    texts = TableTemplate(TEMPLATE, "target").texts(read_table(table_model["test"]))
    expected = number_metrics(number_predictions(model, ntok, texts))
    assert math.isclose(metrics["target/mdae"], expected["target/mdae"], rel_tol=1e-9)


def test_evaluate_samples_large_data_with_its_seed(table_model, capsys, monkeypatch):
    """``evaluate --seed`` seeds the samples that the number metrics of large data read (a
    data set past the exact count is scored on seeded samples; here every metric object the
    command builds is recorded)."""
    import cauchylin_hf.predict

    seeds = []

    class Recorded(cauchylin_hf.predict.NumberMetrics):
        def __init__(self, **kwargs):
            seeds.append(kwargs.get("seed", 0))
            super().__init__(**kwargs)

    monkeypatch.setattr(cauchylin_hf.predict, "NumberMetrics", Recorded)
    argv = ["evaluate", str(table_model["model"]), "--data", str(table_model["test"]), "--json"]
    assert cli.main([*argv, "--no-progress", "--seed", "7"]) == 0
    assert json.loads(capsys.readouterr().out)["target/count"] == 12
    assert seeds and set(seeds) == {7}


def test_training_arguments_reach_the_trainer(table_model):
    """--warmup-ratio becomes warmup_steps as transformers counts them; the scheduler is set."""
    from transformers import TrainingArguments

    args = torch.load(table_model["model"] / "training_args.bin", weights_only=False)
    assert args.lr_scheduler_type.value == "cosine"
    assert args.max_steps == 120 and math.isclose(args.learning_rate, 5e-3)
    reference = TrainingArguments("unused", warmup_steps=0.1, report_to="none")
    assert args.warmup_steps == reference.get_warmup_steps(120) == 12


@pytest.mark.parametrize(
    ("max_steps", "epochs", "n", "batch"), [(-1, 2.0, 30, 8), (-1, 0.5, 100, 16), (37, 1.0, 5, 4)]
)
def test_warmup_ratio_counts_steps_like_transformers(max_steps, epochs, n, batch):
    from transformers import TrainingArguments

    head = ["train", "--from-config", "qwen2-tiny", "--warmup-ratio", "0.3"]
    tail = ["--max-steps", str(max_steps), "--epochs", str(epochs), "--batch-size", str(batch)]
    args = cli.build_parser().parse_args([*head, *tail])
    total = max_steps if max_steps > 0 else math.ceil(epochs * math.ceil(n / batch))
    reference = TrainingArguments("unused", warmup_steps=0.3, report_to="none")
    assert cli._warmup_steps(args, n) == reference.get_warmup_steps(total)


def test_generate_from_the_table_model_stops_at_the_sentence_end(table_model, capsys):
    prompt = "age 50 bmi 30.0 -> progression"
    argv = ["generate", str(table_model["model"]), "--prompt", prompt, "--mode", "causal", "--json"]
    assert cli.main(argv) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["text"].startswith(prompt)
    numbers = find_numbers(row["continuation"])
    assert len(numbers) == 1 and "." not in numbers[0].text  # the integer field
    assert row["continuation"].rstrip().endswith(".")


# ----------------------------------------------------- numbers written with the data's decimals


@pytest.fixture(scope="module")
def forced(base_dir, tmp_path_factory):
    """A model that always writes <NUM> (or always '.') with median 138.6916."""
    from cauchylin_hf.tokenizer import NumericTokenizer

    model, ntok = cli.load_causal_model(base_dir)
    assert isinstance(ntok, NumericTokenizer)
    out = {}
    for name, token in (
        ("num", ntok.num_token_id),
        ("dot", ntok.tokenizer.convert_tokens_to_ids(".")),
    ):
        with torch.no_grad():
            model.action.classifier.bias.zero_()
            model.action.classifier.bias[token] = 1e4
            model.action.regressor.weight.zero_()
            model.action.regressor.bias.fill_(math.log1p(138.6916))  # signed_log1p value space
        folder = tmp_path_factory.mktemp(name)
        model.save_pretrained(folder)
        ntok.save_pretrained(folder)
        out[name] = folder
    return out


def _generate(folder, capsys, *extra):
    argv = ["generate", str(folder), "--prompt", "3 boxes of 12 eggs hold", "--mode", "causal"]
    assert cli.main([*argv, "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_generated_numbers_use_the_decimals_of_their_field(forced, capsys):
    from cauchylin_hf.precision import NumberPrecision

    folder = forced["num"]
    raw = _generate(folder, capsys, "--max-new-tokens", "1")
    (number,) = find_numbers(raw["continuation"])
    assert abs(number.value - 138.6916) < 1e-3  # no data_format.json: the float32 value as it is
    precision = NumberPrecision.from_texts(["3 boxes of 12 eggs hold 36 eggs.", "price 4.25"])
    record = {"template": None, "target": None, "precision": precision.to_dict()}
    (folder / cli.DATA_FORMAT_FILE).write_text(json.dumps(record))
    try:
        row = _generate(folder, capsys, "--max-new-tokens", "1")
        # "hold139" would be one word: the number gets a space to read back as a number
        assert row["text"] == "3 boxes of 12 eggs hold 139" and row["numbers"] == [139.0]
        row = _generate(folder, capsys, "--max-new-tokens", "1", "--decimals", "2")
        assert row["continuation"].strip() == "138.69"
        # a field the data never had gets the largest count (2, from the prices)
        argv = ["generate", str(folder), "--prompt", "weight", "--mode", "causal", "--json"]
        assert cli.main([*argv, "--max-new-tokens", "1"]) == 0
        assert json.loads(capsys.readouterr().out)["continuation"].strip() == "138.69"
        # two numbers in a row stay two numbers (the second one's field is "", which the
        # training texts wrote with 0 decimals: the leading "3")
        row = _generate(folder, capsys, "--max-new-tokens", "2")
        assert [n.value for n in find_numbers(row["continuation"])] == [139.0, 139.0]
    finally:
        (folder / cli.DATA_FORMAT_FILE).unlink()


def test_python_generate_writes_numbers_as_the_command_line_does(forced, capsys):
    """One rule (the library's NumberPrecision, read from the model's folder): before, Python's
    generate wrote 138.6916 where the command line wrote 139 on the same model and prompt."""
    from cauchylin_hf.generation import generate
    from cauchylin_hf.precision import NumberPrecision
    from cauchylin_hf.tokenizer import NumericTokenizer

    folder = forced["num"]
    prompt = "price 4.50, 3 boxes of 12 eggs hold"  # 4.50: the prompt keeps its spelling
    precision = NumberPrecision.from_texts(["3 boxes of 12 eggs hold 36 eggs.", "price 4.25"])
    record = {"template": None, "target": None, "precision": precision.to_dict()}
    try:
        for with_format in (False, True):
            if with_format:
                (folder / cli.DATA_FORMAT_FILE).write_text(json.dumps(record))
            model = CauchyLMForCausalLM.from_pretrained(folder)
            ntok = NumericTokenizer.from_pretrained(folder)
            argv = ["generate", str(folder), "--prompt", prompt, "--mode", "causal", "--json"]
            assert cli.main([*argv, "--max-new-tokens", "2"]) == 0
            row = json.loads(capsys.readouterr().out)
            out = generate(model, [prompt], tokenizer=ntok, mode="causal", max_new_tokens=2)
            assert (out.texts[0], out.new_texts[0]) == (row["text"], row["continuation"])
            numbers = [n.value for n in find_numbers(out.new_texts[0])]
            expected = 139.0 if with_format else pytest.approx(138.6916, abs=1e-3)
            assert numbers == [expected, expected] and "4.50" in out.texts[0]
    finally:
        (folder / cli.DATA_FORMAT_FILE).unlink(missing_ok=True)


def test_generation_stops_at_the_sentence_end_by_default(forced, capsys):
    row = _generate(forced["dot"], capsys, "--max-new-tokens", "6")
    assert row["continuation"] == "."
    row = _generate(forced["dot"], capsys, "--max-new-tokens", "6", "--no-sentence-stop")
    assert row["continuation"] == "......"


# ----------------------------------------------------------------------------------- threads


def test_threads_option_sets_torch_threads(trained, data, capsys):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        argv = ["evaluate", str(trained), "--data", str(data["eval"]), "--threads", "1"]
        assert cli.main([*argv, "--no-progress"]) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert "thread" not in capsys.readouterr().err


def test_a_busy_machine_gets_fewer_threads_and_one_note(trained, data, capsys, monkeypatch):
    from cauchylin_hf import threads

    monkeypatch.setattr(threads, "free_cores", lambda: (2, 1.2))  # 2 cores, about one busy
    monkeypatch.setattr(threads, "_said", set())
    monkeypatch.setattr(threads, "_kept", [])
    before = torch.get_num_threads()
    argv = ["evaluate", str(trained), "--data", str(data["eval"]), "--no-progress"]
    try:
        for _ in range(2):
            torch.set_num_threads(2)
            assert cli.main(argv) == 0
            assert torch.get_num_threads() == 1  # lowered, not only a note
    finally:
        torch.set_num_threads(before)
    err = capsys.readouterr().err
    sentence = "note: using 1 torch thread, not 2: only about 1 of 2 cores are free (load 1.2)"
    assert err.count(sentence) == 1, err  # said once
    assert "--threads N chooses another number" in err


def test_an_idle_machine_keeps_its_threads_and_says_nothing(trained, data, capsys, monkeypatch):
    from cauchylin_hf import threads

    monkeypatch.setattr(threads, "free_cores", lambda: (2, 0.3))
    monkeypatch.setattr(threads, "_said", set())
    monkeypatch.setattr(threads, "_kept", [])
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        argv = ["evaluate", str(trained), "--data", str(data["eval"]), "--no-progress"]
        assert cli.main(argv) == 0
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert "thread" not in capsys.readouterr().err


# ----------------------------------------------------------------------------- clear errors


def test_clear_errors(base_dir, data, tmp_path, capsys):
    cases = [
        (["verify", str(tmp_path / "missing")], "not found"),
        (["evaluate", str(tmp_path / "missing"), "--data", str(data["eval"])], "not found"),
        (["evaluate", str(base_dir), "--data", str(tmp_path / "none.jsonl")], "not found"),
        (["evaluate", str(base_dir), "--data", str(data["empty"])], "empty"),
        (["generate", str(base_dir)], "no prompt"),
        (["predict", str(base_dir)], "no prompt"),
        (["train", "--data", str(data["train"])], "pass a MODEL folder or --from-config"),
        (["train", "--from-config", "gpt9", "--data", str(data["train"])], "not a preset"),
        (
            ["train", str(base_dir), "--data", str(data["train"]), "--template", "x {x}"],
            "--template needs a table",
        ),
    ]
    for argv, message in cases:
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1
        assert err[0].startswith(f"cauchylin-lm {argv[0]}: error:") and message in err[0]
    # a folder whose model is not a decoder-only causal LM (an encoder-decoder)
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(
        vocab_size=64,
        d_model=16,
        d_kv=4,
        d_ff=16,
        num_layers=1,
        num_heads=2,
        decoder_start_token_id=0,
    )
    T5ForConditionalGeneration(config).save_pretrained(tmp_path / "enc")
    assert cli.main(["train", str(tmp_path / "enc"), "--train-file", str(data["train"])]) == 2
    assert "train: error: could not load" in capsys.readouterr().err


def _snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--epochs", "0", "expected a number in (0, inf), got '0'"),
        ("--epochs", "nan", "expected a number in (0, inf), got 'nan'"),
        ("--epochs", "-1", "expected a number in (0, inf)"),
        ("--max-steps", "0", "expected -1 or a positive integer, got '0'"),
        ("--learning-rate", "inf", "expected a number in (0, inf)"),
        ("--warmup-ratio", "1.5", "expected a number in [0, 1)"),
    ],
)
def test_bad_numbers_are_one_line_errors_and_keep_the_model(
    trained, data, capsys, option, value, message
):
    before = _snapshot(trained)
    argv = ["train", str(trained), "--data", str(data["train"]), "--output-dir", str(trained)]
    with pytest.raises(SystemExit) as exc:
        cli.main([*argv, option, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("cauchylin-lm train: error: argument")
    assert message in err[0]
    assert _snapshot(trained) == before


def test_a_truncated_checkpoint_is_a_one_line_error(trained, data, tmp_path, capsys):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(trained, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    for argv in (
        ["evaluate", str(broken), "--data", str(data["eval"])],
        ["predict", str(broken), "--prompt", "3 boxes of 12 eggs hold "],
        [
            "train",
            str(broken),
            "--data",
            str(data["train"]),
            "--output-dir",
            str(broken),
            "--overwrite",
        ],
    ):
        assert cli.main([*argv, "--no-progress"]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and f"error: could not load '{broken}'" in err[0]
    assert weights.stat().st_size == (trained / "model.safetensors").stat().st_size // 2


def test_an_output_dir_that_is_a_file_or_a_foreign_folder_is_refused(
    trained, data, tmp_path, capsys
):
    afile = tmp_path / "notes.txt"
    afile.write_text("mine")
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "cat.jpg").write_bytes(b"jpg")
    for out, message in (
        (afile, "is a file, not a folder"),
        (foreign, "does not hold a cauchylin"),
    ):
        argv = ["train", str(trained), "--data", str(data["train"]), "--output-dir", str(out)]
        assert cli.main([*argv, "--no-progress"]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and message in err[0]
    assert afile.read_text() == "mine" and [p.name for p in foreign.iterdir()] == ["cat.jpg"]


@pytest.mark.parametrize("error", [ValueError("training data is odd"), KeyboardInterrupt()])
def test_a_failed_training_leaves_the_saved_model_alone(
    trained, data, tmp_path, capsys, monkeypatch, error
):
    """The new model goes to a temporary folder that replaces the old one only on success."""
    import shutil

    from cauchylin_hf import training

    out = tmp_path / "model"
    shutil.copytree(trained, out)
    before = _snapshot(out)

    def failing_train(model, ntok, texts, eval_texts, output_dir, **kw):
        (output_dir / "half-written.bin").write_bytes(b"x")  # it dies while writing
        raise error

    monkeypatch.setattr(training, "train", failing_train)
    argv = [
        "train",
        str(out),
        "--data",
        str(data["train"]),
        "--output-dir",
        str(out),
        "--overwrite",
    ]
    code = cli.main([*argv, "--no-progress"])
    assert code == (130 if isinstance(error, KeyboardInterrupt) else 2)
    err = capsys.readouterr().err.splitlines()[-1]
    assert "odd" in err or "nothing was saved" in err
    assert _snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temporary folder left


def test_a_successful_training_replaces_the_model(trained, data, tmp_path, capsys):
    import shutil

    out = tmp_path / "model"
    shutil.copytree(trained, out)
    out.chmod(0o750)  # the user's choice for the folder
    (out / "stray.txt").write_text("an old file the new model does not write")
    before = (out / "model.safetensors").read_bytes()
    argv = [
        "train",
        str(out),
        "--data",
        str(data["train"]),
        "--output-dir",
        str(out),
        "--overwrite",
    ]
    assert cli.main([*argv, "--max-steps", "2", "--batch-size", "4", "--no-progress"]) == 0
    assert (out / "model.safetensors").read_bytes() != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    # the new model replaces the model's files; a file that is not the model's is kept
    assert (out / "stray.txt").read_text() == "an old file the new model does not write"
    assert (out.stat().st_mode & 0o777) == 0o750  # the folder keeps its permissions


def test_a_template_with_numbers_in_its_text_gets_a_note(table_model, capsys):
    argv = ["evaluate", str(table_model["model"]), "--data", str(table_model["test"])]
    template = "age {age} serum 1 {s1} -> progression {target}."
    assert cli.main([*argv, "--template", template, "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "note: the template's own text holds the numbers ['1']" in err
    assert cli.main([*argv, "--no-progress"]) == 0  # the saved template has none
    assert "the template's own text" not in capsys.readouterr().err


# ------------------------------------------- what a newcomer runs into (predict, evaluate, ...)


def test_predict_reads_a_prompt_without_its_space_as_generate_does(
    shared_head_model, table_model, capsys
):
    """`predict --prompt "... -> progression"` (no trailing space) gives the number generate
    writes after that prompt, says why, and the interval and P(<NUM>) of that number. (On the
    model with the shared head: generate's cached steps and predict's one pass round
    differently in float32, which a readout solved on this barely trained backbone carries into
    the printed digit; with the readouts the generated number is inside predict's 50%
    interval, checked last.)"""
    folder = str(shared_head_model["model"])
    prompt = "age 50 bmi 30.0 -> progression"
    argv = ["generate", folder, "--prompt", prompt, "--mode", "causal", "--json"]
    assert cli.main(argv) == 0
    generated = json.loads(capsys.readouterr().out)
    assert generated["continuation"].startswith(" ")  # generate writes the space first
    (number,) = find_numbers(generated["continuation"])
    assert cli.main(["predict", folder, "--prompt", prompt]) == 0
    captured = capsys.readouterr()
    line = captured.out.strip()
    assert line.startswith(f"{prompt} {number.text}  |  50% [")
    assert f"read as '{prompt} '" in captured.err and "ends without the space" in captured.err
    assert float(line.rsplit("P(<NUM>)", 1)[1]) > 0.5
    # with the space typed, the same line and no note
    assert cli.main(["predict", folder, "--prompt", prompt + " "]) == 0
    again = capsys.readouterr()
    assert again.out.strip() == line and "without the space" not in again.err
    # the default model, with its readouts
    folder = str(table_model["model"])
    argv = ["generate", folder, "--prompt", prompt, "--mode", "causal", "--json"]
    assert cli.main(argv) == 0
    (number,) = find_numbers(json.loads(capsys.readouterr().out)["continuation"])
    assert cli.main(["predict", folder, "--prompt", prompt, "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    lo, hi = row["interval_50"]
    assert lo - 0.5 <= number.value <= hi + 0.5  # the integer written: +-0.5


def test_evaluate_mdae_is_the_usual_median_of_the_per_row_errors(shared_head_model, capsys):
    """12 test rows (an even count): target/mdae is numpy's median of |prediction - truth|
    over the rows, the predictions taken from `predict --data --json`."""
    import numpy as np

    folder, test = str(shared_head_model["model"]), str(shared_head_model["test"])
    assert cli.main(["predict", folder, "--data", test, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    errors = np.abs(np.array([r["median"] for r in rows]) - np.array([r["true"] for r in rows]))
    assert len(errors) % 2 == 0 and np.median(errors) != np.sort(errors)[len(errors) // 2 - 1]
    assert cli.main(["evaluate", folder, "--data", test, "--json", "--no-progress"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert math.isclose(metrics["target/mdae"], float(np.median(errors)), rel_tol=1e-5)
    with shared_head_model["train"].open() as f:
        train_targets = [float(r["target"]) for r in csv.DictReader(f)]
    baseline = np.median(np.abs(np.median(train_targets) - np.array([r["true"] for r in rows])))
    assert math.isclose(metrics["target/mdae_baseline"], float(baseline), rel_tol=1e-6)


def test_evaluate_reports_the_training_median_and_warns_as_learning_check_says(
    shared_head_model, capsys
):
    """The error line and the warnings agree with cauchylin_hf.predict.learning_check computed
    from `predict --data --json` and the training table (whether or not this short training
    learnt the target: at 120 steps it usually has not, the plateau docs/training.md explains)."""
    import numpy as np
    from cauchylin_hf.predict import learning_check

    folder, test = str(shared_head_model["model"]), str(shared_head_model["test"])
    assert cli.main(["predict", folder, "--data", test, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    with shared_head_model["train"].open() as f:
        median = float(np.median([float(r["target"]) for r in csv.DictReader(f)]))
    check = learning_check([r["median"] for r in rows], [r["true"] for r in rows], median)
    assert cli.main(["evaluate", folder, "--data", test, "--no-progress"]) == 0
    captured = capsys.readouterr()
    (line,) = [s for s in captured.out.splitlines() if s.startswith("target on 12 texts")]
    assert f"median absolute error {check.mdae:.4g};" in line
    assert f"training median ({median:.4g}) for every row: {check.baseline_mdae:.4g}" in line
    assert ("barely varies" in captured.err) == check.flat
    assert ("is not below that of predicting the training median" in captured.err) == (
        not check.beats_baseline
    )
    (ratio,) = re.findall(r"^target/spread_ratio\s+(\S+)$", captured.out, re.M)
    # predict's JSON rounds each median to 7 digits: 1e-4 of the targets' spread at most
    assert math.isclose(float(ratio), check.spread_ratio, rel_tol=1e-3, abs_tol=1e-4)


@pytest.mark.parametrize(
    ("cell", "reason"),
    [
        ("severe", "is not a number"),
        ("NaN", "a missing value"),
        ("1e308", "beyond float32's range"),
        ("\u0661\u0665\u0661", "digits other than 0-9"),
        ("2021-03-04", "several numbers"),
        ("1,000", "thousands separator"),
    ],
)
def test_evaluate_refuses_target_cells_that_are_not_numbers(
    table_model, tmp_path, capsys, cell, reason
):
    """Before, evaluate scored such rows against another number of the row (the bmi, the day of
    a date, the 000 of 1,000) and exited 0."""
    lines = table_model["test"].read_text().splitlines()
    lines[5] = lines[5].rsplit(",", 1)[0] + f',"{cell}"'
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    argv = ["evaluate", str(table_model["model"]), "--data", str(bad), "--no-progress"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error: target column 'target' must hold a number" in err[0]
    assert "data row 5 (line 6)" in err[0] and reason in err[0]


def test_tables_in_utf16_evaluate_like_utf8_and_latin1_is_named(table_model, tmp_path, capsys):
    folder, test = str(table_model["model"]), table_model["test"]
    assert cli.main(["evaluate", folder, "--data", str(test), "--json", "--no-progress"]) == 0
    expected = json.loads(capsys.readouterr().out)
    utf16 = tmp_path / "test16.csv"
    utf16.write_bytes(test.read_text().encode("utf-16"))
    assert cli.main(["evaluate", folder, "--data", str(utf16), "--json", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out) == expected
    latin = tmp_path / "latin.csv"
    latin.write_bytes(test.read_text().replace("age,", "\xe2ge,", 1).encode("latin-1"))
    assert cli.main(["evaluate", folder, "--data", str(latin), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert str(latin) in err and "is not UTF-8" in err and "codec" not in err
    big = tmp_path / "big.csv"
    big.write_text(test.read_text() + '50,0.01,30.0,"' + "9" * 200_000 + '"\n')
    assert cli.main(["evaluate", folder, "--data", str(big), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{big}, line 14" in err and "field larger than field limit" in err and len(err) < 500


def test_a_huge_decimals_count_in_data_format_is_refused_at_once(table_model, tmp_path, capsys):
    """decimals 10**9 (or an int too long for Python to print) in data_format.json: a short
    error naming the file, not a 1 GB number string."""
    import shutil
    import time

    folder = tmp_path / "model"
    shutil.copytree(table_model["model"], folder)
    text = (folder / cli.DATA_FORMAT_FILE).read_text()
    saved = json.loads(text)["precision"]["decimals"]["progression"]
    needle = f'"progression": {saved}'
    assert needle in text
    prompt = "age 50 bmi 30.0 -> progression "
    for value in ("1000000000", "1" + "0" * 5000):
        (folder / cli.DATA_FORMAT_FILE).write_text(text.replace(needle, f'"progression": {value}'))
        start = time.perf_counter()
        assert cli.main(["predict", str(folder), "--prompt", prompt]) == 2
        err = capsys.readouterr().err.strip()
        assert time.perf_counter() - start < 30
        assert str(folder / cli.DATA_FORMAT_FILE) in err and len(err) < 400
    argv = ["predict", str(table_model["model"]), "--prompt", prompt, "--decimals", "1000000000"]
    assert cli.main(argv) == 2
    assert "--decimals must be an int in [0, 50]" in capsys.readouterr().err


def test_nan_and_a_negative_loss_are_explained(table_model, capsys, monkeypatch):
    from cauchylin_hf import evaluation

    real = evaluation.evaluate_model

    def sharp(*a, **kw):  # what a sharp model reports: a negative regression log-density
        metrics = real(*a, **kw)
        metrics["eval/loss"] = -1.25
        return metrics

    monkeypatch.setattr(evaluation, "evaluate_model", sharp)
    one = table_model["test"].read_text().splitlines()[:2]  # one row: no rank correlation
    path = table_model["test"].with_name("one.csv")
    path.write_text("\n".join(one) + "\n")
    argv = ["evaluate", str(table_model["model"]), "--data", str(path), "--no-progress"]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert re.search(r"^target/spearman\s+nan$", captured.out, re.M)
    assert "note: nan (" in captured.err and "not a failure" in captured.err
    assert "eval/loss is negative, which is fine" in captured.err


def test_the_nan_note_says_what_happened_to_each_group(table_model, capsys, monkeypatch):
    """A field seen many times whose predictions are all equal is not 'seen once'."""
    import dataclasses

    from cauchylin_hf import predict

    real = predict.NumberReader.add

    def flat(*a, **kw):  # a model that predicts one value for every number
        preds = real(*a, **kw)
        if preds is None:
            return preds
        median = torch.full_like(preds.prediction.median, 7.0)
        return dataclasses.replace(
            preds, prediction=dataclasses.replace(preds.prediction, median=median)
        )

    # every number prediction of evaluate, in one pass or two, is a NumberReader's
    monkeypatch.setattr(predict.NumberReader, "add", flat)
    n = len(table_model["test"].read_text().splitlines()) - 1  # rows under the header
    argv = ["evaluate", str(table_model["model"]), "--data", str(table_model["test"])]
    assert cli.main([*argv, "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert re.search(r"^target/spearman\s+nan$", captured.out, re.M)
    note = next(line for line in captured.err.splitlines() if "note: nan (" in line)
    assert f"target: the model predicts one value for all its {n} numbers" in note
    assert "seen once" not in note
    monkeypatch.setattr(predict.NumberReader, "add", real)
    one = table_model["test"].read_text().splitlines()[:2]  # one row: seen once
    path = table_model["test"].with_name("one.csv")
    path.write_text("\n".join(one) + "\n")
    assert cli.main(["evaluate", str(table_model["model"]), "--data", str(path)]) == 0
    note = next(line for line in capsys.readouterr().err.splitlines() if "note: nan (" in line)
    assert "target: seen once" in note


def test_a_model_folder_without_a_training_median_compares_with_the_targets_own(
    table_model, tmp_path, capsys
):
    """A folder trained elsewhere (no target_median in data_format.json): the baseline is the
    median of the evaluated targets themselves, and the line says so."""
    import shutil

    import numpy as np

    folder = tmp_path / "model"
    shutil.copytree(table_model["model"], folder)
    record = json.loads((folder / cli.DATA_FORMAT_FILE).read_text())
    del record["target_median"]
    (folder / cli.DATA_FORMAT_FILE).write_text(json.dumps(record))
    argv = ["evaluate", str(folder), "--data", str(table_model["test"]), "--no-progress"]
    assert cli.main([*argv, "--json"]) == 0
    captured = capsys.readouterr()
    assert "predicting their own median (the model folder records no training median)" in (
        captured.err
    )
    with table_model["test"].open() as f:
        true = np.array([float(r["target"]) for r in csv.DictReader(f)], dtype=np.float32)
    expected = np.median(np.abs(np.median(true.astype(float)) - true.astype(float)))
    assert math.isclose(json.loads(captured.out)["target/mdae_baseline"], expected, rel_tol=1e-9)


# ------------------------------------------------------------------------ --target-weight


def test_target_weight_is_the_saved_models_loss_setting(table_model, tmp_path, capsys):
    """--target-weight sets CauchyLMConfig.reg_target_weight of a new model and of a loaded one
    (saved with it); without the flag a loaded model keeps its own; a bad value names the flag."""
    short = ["--max-steps", "2", "--batch-size", "8", "--threads", "1", "--no-progress"]
    first = tmp_path / "first"
    argv = ["train", "--from-config", "qwen2-tiny", "--data", str(table_model["train"])]
    argv += ["--template", TEMPLATE, "--output-dir", str(first), "--target-weight", "4", *short]
    assert cli.main(argv) == 0
    assert json.loads((first / "config.json").read_text())["reg_target_weight"] == 4.0
    assert CauchyLMForCausalLM.from_pretrained(first).config.reg_target_weight == 4.0
    again = tmp_path / "again"
    argv = ["train", str(first), "--data", str(table_model["train"]), "--output-dir", str(again)]
    assert cli.main([*argv, *short]) == 0
    assert json.loads((again / "config.json").read_text())["reg_target_weight"] == 4.0
    other = tmp_path / "other"
    argv[-1] = str(other)
    assert cli.main([*argv, "--target-weight", "1.5", *short]) == 0
    assert json.loads((other / "config.json").read_text())["reg_target_weight"] == 1.5
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        cli.main([*argv, "--target-weight", "-1"])
    assert exc.value.code == 2
    assert "--target-weight" in capsys.readouterr().err
