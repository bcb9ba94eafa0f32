"""Every error that ``docs/cli.md`` documents, once each: its exit status and its one line.

The errors that need no model (a missing file or folder, a data file given as MODEL, a file that
is not UTF-8, a wrong ``--target``, an ``--output-dir`` that is a file or holds a model, a bad
option) run as the console script in a subprocess, which reports whether torch or transformers
were imported: they must not be, so these errors answer at once (they took 13-22 s on a busy
machine when everything was imported first). The errors that need a model run in this process on
a tiny local base.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cauchylin_hf.app import cli
from cauchylin_hf.app.checks import CliError
from cauchylin_hf.model import CauchyLMForCausalLM

import cauchylin

ROOT = Path(__file__).resolve().parents[2]
ERROR = re.compile(r"^cauchylin-lm (\w+): error: (.+)$")


def _probe(argv: list[str], cwd: Path) -> tuple[int, str, list[str]]:
    """Run the console script's entry point on ``argv`` in a fresh interpreter: its exit
    status, its standard error, and which heavy packages it imported."""
    code = (
        "import json, sys\n"
        "from cauchylin_lm import main\n"
        "try:\n    status = main(json.loads(sys.argv[1]))\n"
        "except SystemExit as exc:\n    status = exc.code\n"
        "heavy = ('torch', 'transformers', 'safetensors')\n"
        "print(json.dumps([status, [m for m in heavy if m in sys.modules]]))\n"
    )
    env = dict(os.environ, OMP_NUM_THREADS="1")
    paths = [str(ROOT / "adapters"), str(ROOT), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    run = subprocess.run(
        [sys.executable, "-c", code, json.dumps(argv)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    status, heavy = json.loads(run.stdout.strip().splitlines()[-1])
    return status, run.stderr, heavy


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("errors")
    table = folder / "diab.csv"
    table.write_text("age,bmi,target\n59,32.1,151\n48,21.6,75\n72,30.5,141\n")
    latin = folder / "latin.txt"
    latin.write_bytes("caf\xe9 costs 3 euros.\n".encode("latin-1"))
    utf16 = folder / "wide.txt"
    utf16.write_bytes("3 eggs.\n".encode("utf-16-le"))
    words = folder / "firms.csv"
    words.write_text("firm,invest\nGM,317.6\nGE,33.1\n")
    model = folder / "trained"  # what check_output_dir takes for a saved model
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "cauchy_lm"}))
    a_file = folder / "out.txt"
    a_file.write_text("")
    big = folder / "big.csv"  # over WHOLE_TABLE_CHECK_BYTES: checked by its header first
    big.write_text("age,bmi,target\n" + "59,32.1,151\n" * 100_000)
    not_dataset = folder / "plain_folder"
    not_dataset.mkdir()
    wide = folder / "wide.csv"  # a small table of 60,001 columns: every cell checked up front
    wide.write_text(",".join(f"c{i}" for i in range(60_000)) + ",target\n" + "1," * 60_000 + "2\n")
    wider = folder / "wider.csv"  # over 1 MiB: checked by its header of 300,001 columns
    wider.write_text(
        ",".join(f"c{i}" for i in range(300_000)) + ",target\n" + "1," * 300_000 + "2\n"
    )
    rows = "age,bmi,target\n59,32.1,151\n48,21.6,75\n"
    (folder / "diab.csv.gz").write_bytes(gzip.compress(rows.encode()))
    (folder / "diab.xlsx").write_bytes(b"PK\x03\x04" + bytes(60))  # a ZIP archive's start
    (folder / "diab.parquet").write_bytes(b"PAR1" + bytes(60) + b"PAR1")
    (folder / "be.csv").write_bytes(rows.encode("utf-16-be"))
    long_header = folder / "long_header.csv"  # over 1 MiB, a header cell over csv's limit
    long_header.write_text('"' + "a" * 140_000 + '",target\n' + "1,2\n" * 250_000)
    (folder / "bad.jsonl").write_text('{"text": "a 1"}\n{"text": "b 2"}\n{text: 3}\n')
    (folder / "blank.txt").write_text("\n \n")
    (folder / "prices.jsonl").write_text('{"text": "area 50 -> price 150."}\n')
    (folder / "semi.csv").write_text("age;bmi;target\n59;32.1;151\n")
    (folder / "negative.json").write_text('{"model_type": "qwen2", "hidden_size": -5}')
    (folder / "heads.json").write_text(
        '{"model_type": "qwen2", "hidden_size": 30, "num_attention_heads": 4}'
    )
    saved = folder / "saved_template"  # a model folder's record of its table template
    saved.mkdir()
    (saved / "data_format.json").write_text(
        '{"template": "age {age} -> y {target}", "target": "y"}'
    )
    (folder / "splits" / "train").mkdir(parents=True)  # what DatasetDict.save_to_disk writes
    (folder / "splits" / "dataset_dict.json").write_text('{"splits": ["train"]}')
    (folder / "splits" / "train" / "state.json").write_text('{"_data_files": []}')
    os.symlink(folder / "gone.csv", folder / "dangling.csv")
    for name, state in (  # folders written by save_to_disk, then broken
        ("ds_empty", {"_data_files": []}),  # what an empty dataset's save writes
        ("ds_cut", '{"_data_files": [{"filename": "data-00000-of-0'),
    ):
        (folder / name).mkdir()
        (folder / name / "state.json").write_text(
            state if isinstance(state, str) else json.dumps(state)
        )
    if hasattr(os, "mkfifo"):
        os.mkfifo(folder / "pipe.csv")
    return {
        "wide": wide,
        "wider": wider,
        "big": big,
        "not_dataset": not_dataset,
        "folder": folder,
        "table": table,
        "latin": latin,
        "utf16": utf16,
        "words": words,
        "model": model,
        "a_file": a_file,
    }


def _no_model_cases(f):
    """``(argv, status, command, message pattern)`` of the errors that need no model."""
    new = ["train", "--from-config", "qwen2-tiny", "--data"]
    out = str(f["folder"] / "new_out")
    table, folder = str(f["table"]), str(f["folder"])
    return [
        # the five of the issue: a missing data file, a wrong --target, an existing
        # --output-dir, a missing model folder, a Latin-1 file
        (["evaluate", folder, "--data", "nope.jsonl"], 2, "evaluate",
         r"dataset file not found: 'nope\.jsonl'"),
        ([*new, table, "--target", "bpm", "--output-dir", out], 2, "train",
         r"target column 'bpm' is not in the table; columns: \['age', 'bmi', 'target'\]"),
        ([*new, table, "--output-dir", str(f["model"])], 2, "train",
         r"--output-dir '.*trained' already holds a trained model; pass --overwrite"),
        (["predict", "no-such-model", "--prompt", "x "], 2, "predict",
         r"model folder not found: 'no-such-model'"),
        (["evaluate", folder, "--data", str(f["latin"])], 2, "evaluate",
         r"latin\.txt is not UTF-8 text: byte 0xe9 at line 1 \(it may be Latin-1 or "
         r"Windows-1252\); save it as UTF-8 \(e\.g\. iconv -f latin1 -t utf-8"),
        # a data file given as MODEL
        (["train", table, "--data", table, "--output-dir", out], 2, "train",
         r"'.*diab\.csv' is a file, not a model folder: MODEL is a folder .*pass "
         r"--from-config PRESET\|config\.json"),
        (["predict", table, "--prompt", "x "], 2, "predict",
         r"^'.*diab\.csv' is a file, not a model folder: MODEL is a folder \(a local checkpoint "
         r"or a model saved by train\)$"),
        (["evaluate", folder, "--data", str(f["utf16"])], 2, "evaluate",
         r"wide\.txt holds NUL characters \(the first on line 1\): it looks like UTF-16"),
        ([*new, str(f["words"]), "--target", "firm", "--output-dir", out], 2, "train",
         r"target column 'firm'.*'GM' is not a"),
        ([*new, table, "--output-dir", str(f["a_file"])], 2, "train",
         r"--output-dir '.*out\.txt' is a file, not a folder"),
        ([*new, table, "--output-dir", folder], 2, "train",
         r"is a non-empty folder that does not hold a cauchylin model; choose a new folder"),
        (["verify", "no-base"], 2, "verify", r"base folder not found: 'no-base'"),
        # a table too large to check cell by cell up front, and a folder that is no dataset
        ([*new, str(f["big"]), "--target", "bpm", "--output-dir", out], 2, "train",
         r"target column 'bpm' is not in the table"),
        ([*new, str(f["not_dataset"]), "--output-dir", out], 2, "train",
         r"--data '.*plain_folder' is a folder but not a dataset saved by "
         r"datasets\.Dataset\.save_to_disk"),
        # tables too wide to be one text (the checks were quadratic: over 300 s)
        ([*new, str(f["wide"]), "--output-dir", out], 2, "train",
         r"a table of 60001 columns is too wide to be written as one text: .*choose the columns "
         r"with --template"),
        ([*new, str(f["wider"]), "--output-dir", out], 2, "train",
         r"a table of 300001 columns is too wide to be written as one text"),
        # an unknown preset (refused after 6.4 s, once torch was imported), an output folder
        # that training could not save to (found only after training)
        (["train", "--from-config", "qwen3-huge", "--data", table, "--output-dir", out], 2,
         "train", r"--from-config 'qwen3-huge': not a preset \(qwen2-tiny, qwen2-small\) and "
         r"not a config\.json file"),
        ([*new, table, "--output-dir", out + "\udcff"], 2, "train",
         r"--output-dir '.*new_out\\udcff': its path is not UTF-8 \(byte 0xff\), and a model "
         r"folder's files are written with UTF-8 names: choose a name in UTF-8"),
        ([*new, table, "--output-dir", str(f["a_file"] / "sub")], 2, "train",
         r"--output-dir '.*out\.txt/sub' cannot be made: '.*out\.txt' is a file, not a folder"),
        *([([*new, table, "--output-dir", "/proc/cauchylin_out"], 2, "train",
            r"--output-dir '/proc/cauchylin_out' cannot be written: making a folder in '/proc' "
            r"failed \(.+\); choose a folder you can write to")]
          if Path("/proc/self").is_dir() else []),
        # files that are not what the message said ("dataset file not found", "iconv -f latin1")
        *([([*new, str(f["folder"] / "pipe.csv"), "--output-dir", out], 2, "train",
            r"'.*pipe\.csv' is a pipe \(as <\(\.\.\.\) and mkfifo make\), not a file: the data "
            r"is read more than once .*write it to a file first")] if hasattr(os, "mkfifo") else []),
        *([([*new, "/dev/zero", "--output-dir", out], 2, "train",
            r"^'/dev/zero' is a device, not a dataset file$")] if Path("/dev/zero").exists() else []),
        ([*new, folder + "/diab.csv.gz", "--output-dir", out], 2, "train",
         r"diab\.csv\.gz is gzip-compressed, not a text file: decompress it first \(gunzip -k "),
        ([*new, folder + "/diab.xlsx", "--output-dir", out], 2, "train",
         r"diab\.xlsx is a ZIP archive \(an Excel \.xlsx .*save it as CSV"),
        ([*new, folder + "/diab.parquet", "--output-dir", out], 2, "train",
         r"diab\.parquet is a Parquet file, not a text file: write it as CSV"),
        ([*new, folder + "/be.csv", "--output-dir", out], 2, "train",
         r"be\.csv holds NUL characters .*iconv -f utf-16be -t utf-8"),
        ([*new, folder + "/long_header.csv", "--output-dir", out], 2, "train",
         r"long_header\.csv, line 1: field larger than field limit .*unclosed quote"),
        # JSON lines and texts are read before torch too (they were found after 15 s)
        ([*new, folder + "/bad.jsonl", "--output-dir", out], 2, "train",
         r"bad\.jsonl:3: not valid JSON \(Expecting property name enclosed in double quotes\)$"),
        (["evaluate", folder, "--data", folder + "/blank.txt"], 2, "evaluate",
         r"dataset file '.*blank\.txt' is empty: it holds no texts$"),
        ([*new, folder + "/semi.csv", "--output-dir", out], 2, "train",
         r"semi\.csv: the header is one column, 'age;bmi;target': its cells look separated by "
         r"semicolons; save the table as CSV with commas$"),
        ([*new, folder + "/blank.txt", "--template", "x {x} {target}"], 2, "train",
         r"^--template needs a table \(\.csv or \.tsv file\), got '.*blank\.txt'$"),
        ([*new, folder + "/splits", "--output-dir", out], 2, "train",
         r"^--data '.*splits' holds a DatasetDict \(splits \['train'\]\): pass the folder of "
         r"one split \(e\.g\. '.*splits/train'\)$"),
        ([*new, folder + "/dangling.csv", "--output-dir", out], 2, "train",
         r"^'.*dangling\.csv' is a link to '.*gone\.csv', which does not exist$"),
        ([*new, table, "--eval-file", str(f["words"]), "--output-dir", out], 2, "train",
         r"^--eval-file '.*firms\.csv' does not fit the template of the training data: template "
         r"placeholders \{age\}, \{bmi\} are not columns of the table"),
        ([*new, table, "--output-dir", ""], 2, "train",
         r"^--output-dir is empty: name the folder to save the model to$"),
        # config sizes that fail in torch (a traceback), a vocabulary below the byte alphabet
        # (refused after 20 s), prompts of a table without the template's columns (after 25 s)
        (["train", "--from-config", folder + "/negative.json", "--data", table], 2, "train",
         r"^--from-config: .*negative\.json: 'hidden_size' must be a positive integer, got -5$"),
        (["train", "--from-config", folder + "/heads.json", "--data", table], 2, "train",
         r"'hidden_size' \(30\) must be a multiple of 'num_attention_heads' \(4\)$"),
        ([*new, table, "--vocab-size", "10"], 2, None,
         r"argument --vocab-size: expected an integer >= 260 \(256 bytes and 4 special tokens\)"),
        (["predict", folder + "/saved_template", "--data", str(f["words"])], 2, "predict",
         r"^template placeholder \{age\} is not a column of the table;"),
        # a --target-field no number has (exit 0 with every target metric NaN)
        (["evaluate", folder, "--data", folder + "/prices.jsonl", "--target-field", "prise"], 2,
         "evaluate", r"^--target-field 'prise': no number of .*prices\.jsonl has that field \(the "
         r"words just before a number; did you mean 'price'\?\); its fields: 'area' \(1 numbers\), "
         r"'price' \(1\); pass one of them"),
        # broken datasets folders (an IndexError; a JSON message naming no folder)
        ([*new, folder + "/ds_empty", "--output-dir", out], 2, "train",
         r"^--data '.*ds_empty' holds an empty dataset \(no Arrow file\): no texts$"),
        (["evaluate", folder, "--data", folder + "/ds_cut"], 2, "evaluate",
         r"^--data '.*ds_cut': its state\.json cannot be read \(Unterminated string .*\): a file "
         r"cut short or edited by hand\? Save the dataset again \(Dataset\.save_to_disk\)$"),
        ([*new, table, "--epochs", "0"], 2, None, r"argument --epochs: expected a number in "
         r"\(0, inf\), got '0' \(see cauchylin-lm train --help\)"),
    ]  # fmt: skip


def test_errors_that_need_no_model_answer_before_torch_is_imported(files):
    for argv, status, command, pattern in _no_model_cases(files):
        code, err, heavy = _probe(argv, files["folder"])
        assert code == status, (argv, err)
        assert heavy == [], (argv, heavy)
        lines = err.strip().splitlines()
        assert len(lines) == 1, (argv, err)
        if command is None:  # argparse's own line
            assert re.search(pattern, lines[0]), (argv, lines[0])
            continue
        match = ERROR.match(lines[0])
        assert match and match.group(1) == command, (argv, lines[0])
        assert re.search(pattern, match.group(2)), (argv, lines[0])
    assert not (files["folder"] / "new_out").exists()  # nothing was written


# ------------------------------------------------------------ errors that need a model


@pytest.fixture(scope="module")
def base(cli_base):
    """The session's tiny base (a test that changes it works on a copy)."""
    return cli_base


def _one_error(capsys, argv: list[str], status: int = 2) -> str:
    assert cli.main(argv) == status
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines, argv
    return lines[-1]


def test_a_folder_that_holds_no_causal_lm_is_one_line(base, tmp_path, capsys):
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "config.json").write_text("{not json")
    line = _one_error(capsys, ["predict", str(junk), "--prompt", "x "])
    assert line.startswith(f"cauchylin-lm predict: error: could not load {str(junk)!r}")
    assert "a local decoder-only causal LM checkpoint is needed" in line


def test_a_truncated_checkpoint_is_one_line(base, tmp_path, capsys):
    import shutil

    cut = tmp_path / "cut"
    shutil.copytree(base, cut)
    weights = cut / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    line = _one_error(capsys, ["predict", str(cut), "--prompt", "x "])
    assert line.startswith(f"cauchylin-lm predict: error: could not load {str(cut)!r}")


def test_an_empty_dataset_is_one_line(base, tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    line = _one_error(capsys, ["evaluate", str(base), "--data", str(empty)])
    assert line == (
        f"cauchylin-lm evaluate: error: dataset file {str(empty)!r} is empty: it holds no texts"
    )


def test_a_lone_surrogate_in_jsonl_names_the_line(base, tmp_path, capsys):
    data = tmp_path / "cut.jsonl"
    data.write_text('{"text": "3 eggs"}\n{"text": "4 \\ud83d pens"}\n')
    line = _one_error(capsys, ["evaluate", str(base), "--data", str(data)])
    assert line.startswith("cauchylin-lm evaluate: error: ")
    assert f"{data}:2" in line and "surrogate" in line


def test_a_text_longer_than_the_context_is_one_line(base, tmp_path, capsys):
    config = json.loads((base / "config.json").read_text())
    data = tmp_path / "long.txt"
    data.write_text("3 eggs " * config["max_position_embeddings"] + "\n")
    line = _one_error(capsys, ["evaluate", str(base), "--data", str(data)])
    assert re.match(
        rf"cauchylin-lm evaluate: error: {re.escape(str(data))}, text 1 is \d+ tokens long, "
        rf"longer than the model's context of {config['max_position_embeddings']} positions",
        line,
    )
    assert f"pass --max-length {config['max_position_embeddings']}" in line


def test_too_many_decimals_in_data_format_is_one_line(base, tmp_path, capsys):
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(base, folder)
    record = {"precision": {"decimals": {"price": 60}, "default": None}}
    (folder / cli.DATA_FORMAT_FILE).write_text(json.dumps(record))
    line = _one_error(capsys, ["generate", str(folder), "--prompt", "price "])
    assert line.startswith(f"cauchylin-lm generate: error: {folder / cli.DATA_FORMAT_FILE}: ")
    assert "60" in line


def test_verify_above_its_tolerance_exits_with_1(base, capsys):
    assert cli.main(["verify", str(base), "--tolerance", "-1"]) == 1
    assert "error" not in capsys.readouterr().err


def _train(base, data, out):
    return ["train", str(base), "--data", str(data), "--output-dir", str(out), "--max-steps", "1"]


def test_a_full_disk_and_ctrl_c_leave_nothing_written(base, files, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"

    def full(self, folder, *a, **kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(CauchyLMForCausalLM, "save_pretrained", full)
    line = _one_error(capsys, _train(base, files["table"], out))
    assert line.startswith(
        f"cauchylin-lm train: error: no space left on the device to save the model to {str(out)!r}"
    )
    assert line.endswith("nothing was written: free some space and train again")

    def interrupted(self, folder, *a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(CauchyLMForCausalLM, "save_pretrained", interrupted)
    line = _one_error(capsys, _train(base, files["table"], out), status=130)
    assert line == "cauchylin-lm train: interrupted; nothing was saved"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("device", ["nonsense", "cuda:7"])
def test_a_device_that_cannot_be_used_is_one_line(base, capsys, device):
    """``--device`` names what torch cannot parse or cannot use here (a CPU-only build's or an
    absent GPU) in one line, with what ``auto`` would pick."""
    if device.startswith("cuda") and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    line = _one_error(capsys, ["predict", str(base), "--prompt", "x ", "--device", device])
    assert line.startswith(f"cauchylin-lm predict: error: --device {device!r} cannot be used")
    assert "'auto' picks" in line


def test_train_runs_where_device_says(base, files, tmp_path, capsys, monkeypatch):
    """``train --device cpu`` asks the Trainer for the CPU (``use_cpu=True``: it trains there
    even where a GPU is present), ``auto`` (the default) leaves the choice to the Trainer, and a
    device torch cannot use here is one line before anything trains."""
    from cauchylin_hf import training

    seen = []
    real = training.train

    def spy(*args, **kwargs):
        seen.append(kwargs["use_cpu"])
        return real(*args, **kwargs)

    monkeypatch.setattr(training, "train", spy)
    argv = _train(base, files["table"], tmp_path / "out")
    assert cli.main([*argv, "--device", "cpu"]) == 0
    assert cli.main([*argv, "--overwrite"]) == 0
    assert seen == [True, None]
    if torch.cuda.device_count() <= 7:
        line = _one_error(
            capsys, [*_train(base, files["table"], tmp_path / "o2"), "--device", "cuda:7"]
        )
        assert line.startswith("cauchylin-lm train: error: --device 'cuda:7' cannot be used")
        assert not (tmp_path / "o2").exists() and seen == [True, None]


def test_train_refuses_an_accelerator_the_trainer_does_not_train_on(monkeypatch):
    """The Trainer trains on the CPU or on the first accelerator: ``--device`` naming that one
    (by type, index 0 or none) gives ``use_cpu=False``; a second one is refused with the way to
    make it the first."""
    from cauchylin_hf.app import inputs

    monkeypatch.setattr(cauchylin, "available_device", lambda: torch.device("cuda", 0))
    monkeypatch.setattr(inputs, "_device", torch.device)  # as if every CUDA device were present
    assert inputs.training_on_cpu("auto") is None
    assert inputs.training_on_cpu("cpu") is True
    assert inputs.training_on_cpu("cuda") is False
    assert inputs.training_on_cpu("cuda:0") is False
    for name in ("cuda:1", "mps"):
        with pytest.raises(CliError, match=r"CUDA_VISIBLE_DEVICES=1") as info:
            inputs.training_on_cpu(name)
        assert str(info.value).startswith(f"--device {name!r}: train runs on the CPU")


def test_the_model_runs_where_device_says(base, capsys, monkeypatch):
    """``--device cpu`` puts the model on the CPU; ``auto`` (the default) asks
    ``cauchylin.available_device()``, every command that reads a model alike."""
    from cauchylin_hf.app import inputs

    seen = []
    real = inputs.load_causal_model

    def spy(*args, **kwargs):
        model, ntok = real(*args, **kwargs)
        seen.append((kwargs.get("device"), next(model.parameters()).device.type))
        return model, ntok

    monkeypatch.setattr(cli, "load_causal_model", spy)
    assert cli.main(["predict", str(base), "--prompt", "x ", "--device", "cpu"]) == 0
    assert cli.main(["predict", str(base), "--prompt", "x "]) == 0
    want = cauchylin.available_device().type
    assert seen == [("cpu", "cpu"), ("auto", want)]
