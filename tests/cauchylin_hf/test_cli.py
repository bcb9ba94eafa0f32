"""The ``cauchylin-lm`` command line on a tiny local checkpoint folder."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from cauchylin_hf.app import cli
from cauchylin_hf.testing import save_tiny_base

COMMANDS = ("demo", "train", "evaluate", "generate", "verify")


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    return save_tiny_base(tmp_path_factory.mktemp("base"), "qwen2", spare_rows=2)


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


def test_the_old_module_paths_still_work():
    """cli, demo and corpus moved to cauchylin_hf.app; the old paths re-export them."""
    from cauchylin_hf import corpus as old_corpus
    from cauchylin_hf import demo as old_demo
    from cauchylin_hf.app import corpus, demo

    assert old_corpus.make_splits is corpus.make_splits
    assert old_demo.run_demo is demo.run_demo
    run = subprocess.run(
        [sys.executable, "-m", "cauchylin_hf.cli", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0
    assert all(c in run.stdout for c in COMMANDS)


def test_train_saves_a_causal_model(trained, capsys):
    assert (trained / "config.json").is_file()
    assert json.loads((trained / "config.json").read_text())["model_type"] == "cauchy_lm"


def test_evaluate_json(trained, data, capsys):
    code = cli.main(
        ["evaluate", str(trained), "--data", str(data["eval"]), "--json", "--no-progress"]
    )
    assert code == 0
    metrics = json.loads(capsys.readouterr().out)
    assert {"eval/num_f1", "eval/reg_mdae", "eval/accuracy"} <= set(metrics)


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


def test_verify_passes_on_the_base(base_dir, capsys):
    assert cli.main(["verify", str(base_dir), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["max_abs_diff"] <= 1e-4


def test_clear_errors(base_dir, data, tmp_path, capsys):
    cases = [
        (["verify", str(tmp_path / "missing")], "not found"),
        (["evaluate", str(tmp_path / "missing"), "--data", str(data["eval"])], "not found"),
        (["evaluate", str(base_dir), "--data", str(tmp_path / "none.jsonl")], "not found"),
        (["evaluate", str(base_dir), "--data", str(data["empty"])], "empty"),
        (["generate", str(base_dir)], "no prompt"),
    ]
    for argv, message in cases:
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.splitlines()[-1]
        assert err.startswith(f"cauchylin-lm {argv[0]}: error:") and message in err
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
