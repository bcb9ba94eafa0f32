"""Odd input through `cauchylin-lm`: one line naming the file, line, prompt or option, exit 2,
nothing written (half an emoji, a diverging training, a huge temperature or seed, a target
below float32's range).

Every case runs :func:`cauchylin_hf.app.cli.main` on a tiny local base or a model trained one
step from it.
"""

from __future__ import annotations

import csv
import random

import pytest
from cauchylin_hf.app import cli

from .tables import train_argv


@pytest.fixture(scope="module")
def setup(flats_model, tmp_path_factory):
    """The session's one-step model of a flats table and its base; a table of its own as data."""
    data = tmp_path_factory.mktemp("inputs") / "flats.csv"
    r = random.Random(0)
    with data.open("w", newline="") as f:
        table = csv.writer(f)
        table.writerow(["area", "rooms", "price"])
        for _ in range(16):
            area = r.randint(30, 200)
            table.writerow([area, r.randint(1, 6), 3 * area])
    return {"base": flats_model["base"], "data": data, "model": flats_model["model"]}


def _error(argv, capsys) -> str:
    """The one error line of a command that must exit with status 2."""
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"cauchylin-lm {argv[0]}: error: "), err
    return err[0]


def test_half_an_emoji_in_a_jsonl_record_names_the_file_and_line(setup, tmp_path, capsys):
    """`"\\ud83d"` is valid JSON (text cut by UTF-16 units): train and evaluate ended with the
    tokenizer's uncaught TypeError."""
    data = tmp_path / "texts.jsonl"
    data.write_text(
        '{"text": "area 50 -> price 150."}\n{"text": "area 60 -> price 180. \\ud83d"}\n',
        encoding="utf-8",
    )
    out = tmp_path / "out"
    for argv in (
        train_argv(setup["base"], data, out),
        ["evaluate", str(setup["model"]), "--data", str(data), "--threads", "1", "--no-progress"],
    ):
        err = _error(argv, capsys)
        assert f"{data}:2: character 23 is a lone surrogate '\\ud83d'" in err
    assert not out.exists()


@pytest.mark.parametrize("command", ["predict", "generate"])
def test_bytes_that_are_not_utf8_in_a_prompt_name_the_prompt(setup, capsys, command):
    """Invalid bytes in argv reach Python as lone surrogates (U+DCxx): an uncaught TypeError."""
    prompt = b"area \xff 3 -> price ".decode("utf-8", "surrogateescape")
    argv = [command, str(setup["model"]), "--prompt", "area 3 ", "--prompt", prompt]
    err = _error([*argv, "--threads", "1"], capsys)
    assert "--prompt 2: character 6 is a lone surrogate '\\udcff'" in err
    assert "a byte that is not UTF-8 (0xff" in err


def test_a_diverging_training_names_the_weight_and_the_divergence(setup, tmp_path, capsys):
    """--learning-rate 1e308: "loc must be finite, but it holds NaN (shape (8, 28, 32), ...)"."""
    out = tmp_path / "out"
    argv = train_argv(setup["base"], setup["data"], out, "--learning-rate", "1e308")
    argv[argv.index("--max-steps") + 1] = "3"
    err = _error(argv, capsys)
    assert "the model: the weight " in err and "holds NaN or infinite values" in err
    assert "a training that diverged: a learning rate too high" in err
    assert not out.exists()


def test_a_huge_temperature_names_the_temperature(setup, capsys):
    """--temperature 1e39 (--mode sampling): "shift must be finite, but it holds an infinite
    value (shape (1, 32), ...)"."""
    argv = ["generate", str(setup["model"]), "--prompt", "area 3", "--mode", "sampling"]
    err = _error([*argv, "--temperature", "1e39", "--threads", "1"], capsys)
    assert "temperature=1e+39 is too large" in err


@pytest.mark.parametrize("command", ["generate", "evaluate", "train"])
def test_a_seed_beyond_the_generators_range_names_the_option(setup, tmp_path, capsys, command):
    """generate --seed 2**70: "Overflow when unpacking long long"; train: numpy's "Seed must
    be between 0 and 2**32 - 1". The parser refuses it, naming --seed."""
    argv = {
        "generate": ["generate", str(setup["model"]), "--prompt", "x"],
        "evaluate": ["evaluate", str(setup["model"]), "--data", str(setup["data"])],
        "train": train_argv(setup["base"], setup["data"], tmp_path / "out"),
    }[command]
    with pytest.raises(SystemExit) as exit_:
        cli.main([*argv, "--seed", str(2**70)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --seed: expected an integer in [0, 2**32)" in err


def test_a_target_below_float32s_range_is_refused_like_one_beyond_it(setup, tmp_path, capsys):
    """2e-49 read as 0 and was scored against 0 with no note, while 3.5e38 was refused."""
    for cell in ("2e-49", "3.5e38"):
        table = tmp_path / "t.csv"
        rows = f"area,rooms,price\n50,2,150\n60,3,{cell}\n70,3,210\n"
        table.write_text(rows, encoding="utf-8")
        for argv in (
            train_argv(setup["base"], table, tmp_path / "out"),
            ["evaluate", str(setup["model"]), "--data", str(table), "--threads", "1"],
        ):
            err = _error(argv, capsys)
            assert f"target column 'price' must hold a number in every row, but {table}" in err
            assert "data row 2 (line 3)" in err and "float32's range" in err
    assert not (tmp_path / "out").exists()


def test_free_text_numbers_outside_float32_get_a_note(setup, tmp_path, capsys):
    """In a JSONL file 2e-49 reads as 0 and 1e39 stays text (the number grammar), so evaluate
    scored another value than the text's, with no word (found by the hostile round; a table
    refuses such targets)."""
    data = tmp_path / "texts.jsonl"
    data.write_text(
        '{"text": "area 50 -> price 150."}\n{"text": "area 60 -> price 2e-49."}\n'
        '{"text": "area 70 -> price 1e39."}\n',
        encoding="utf-8",
    )
    argv = ["evaluate", str(setup["model"]), "--data", str(data), "--threads", "1"]
    assert cli.main([*argv, "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert f"2 number(s) of {data} lie outside float32's range" in err
    assert "(the first: '2e-49' in text 2)" in err


def test_a_target_field_no_number_has_is_named_with_the_fields_there_are(setup, capsys):
    """evaluate --target-field nosuch exited 0 with every target metric NaN."""
    argv = ["evaluate", str(setup["model"]), "--data", str(setup["data"]), "--threads", "1"]
    err = _error([*argv, "--target-field", "prise"], capsys)
    assert "--target-field 'prise': no number of " in err and "did you mean 'price'?" in err
    assert "its fields: 'area' (16 numbers), 'rooms' (16), 'price' (16)" in err
    assert cli.main([*argv, "--target-field", "price", "--no-progress", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"target/mdae"' in out and '"target/mdae": NaN' not in out


def test_a_damaged_saved_dataset_is_one_line_naming_the_folder(setup, tmp_path, capsys):
    """An edited dataset_info.json ended in an uncaught AttributeError (or pyarrow's message),
    a truncated Arrow file in a message that named no folder."""
    import json

    import datasets

    texts = [f"area {i}, rooms 2 -> price {3 * i}." for i in range(30, 330)]
    broken = {}
    for name in ("info", "features", "arrow"):
        folder = tmp_path / name
        datasets.Dataset.from_dict({"text": texts}).save_to_disk(str(folder))
        broken[name] = folder
    info = json.loads((broken["info"] / "dataset_info.json").read_text())
    (broken["info"] / "dataset_info.json").write_text(json.dumps({**info, "features": "text"}))
    features = {"text": {"dtype": "nosuch", "_type": "Value"}}
    (broken["features"] / "dataset_info.json").write_text(
        json.dumps({**info, "features": features})
    )
    (arrow,) = broken["arrow"].glob("*.arrow")
    arrow.write_bytes(arrow.read_bytes()[: arrow.stat().st_size // 2])
    numbers = tmp_path / "numbers"  # a text column of ints: "texts[0] must be a str, got int"
    datasets.Dataset.from_dict({"text": list(range(40))}).save_to_disk(str(numbers))
    for argv in (
        train_argv(setup["base"], numbers, tmp_path / "out"),
        ["evaluate", str(setup["model"]), "--data", str(numbers), "--threads", "1"],
    ):
        err = _error(argv, capsys)
        assert err.endswith(f"{str(numbers)!r}: its column 'text' holds int64, not texts (strings)")
    for name, folder in broken.items():
        for argv in (
            train_argv(setup["base"], folder, tmp_path / "out"),
            ["evaluate", str(setup["model"]), "--data", str(folder), "--threads", "1"],
        ):
            err = _error(argv, capsys)
            assert f"{str(folder)!r} holds a saved dataset that cannot be read (" in err, name
            assert err.endswith("Save the dataset again (Dataset.save_to_disk)"), name
    assert not (tmp_path / "out").exists()


def test_a_jsonl_record_without_its_text_says_what_the_command_line_reads(tmp_path, capsys):
    """The message named a Python argument (text_field=...) that the command line does not have."""
    from cauchylin_hf.app import cli

    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "3 eggs."}\n{"body": "4 pens."}\n')
    code = cli.main(
        [
            "train",
            "--from-config",
            "qwen2-tiny",
            "--data",
            str(data),
            "--output-dir",
            str(tmp_path / "m"),
            "--max-steps",
            "1",
            "--threads",
            "1",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "d.jsonl:2: the record has no field 'text' (fields: ['body'])" in err
    assert "each record holds its text under 'text', or is a JSON string" in err
    assert "pass text_field" not in err
