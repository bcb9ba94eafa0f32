"""`cauchylin-lm train` never loses a model: --overwrite, a failure injected at every write of
the save and of the swap, a signal between the two renames, a full disk, file permissions.

Every case runs the command through :func:`cauchylin_hf.app.cli.main` (what the console script
calls after parsing) on a tiny local base, one training step each.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import signal
import threading
from pathlib import Path

import pytest
from cauchylin_hf import atomic_save
from cauchylin_hf.app import cli
from cauchylin_hf.model import CauchyLMForCausalLM
from cauchylin_hf.testing import save_tiny_base
from cauchylin_hf.tokenizer import NumericTokenizer

from .tables import train_argv


@pytest.fixture(scope="module")
def setup(flats_model):
    """The session's one-step model of the flats table, its base and its data (a test that
    writes to the model works on a copy: :func:`_copy`)."""
    return flats_model


def _digest(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.md5(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _copy(setup, tmp_path) -> Path:
    import shutil

    out = tmp_path / "model"
    shutil.copytree(setup["model"], out)
    return out


def _hidden(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}."))


# ------------------------------------------------------------------------- what train says


def test_train_names_the_target_shows_a_row_and_says_nothing_was_learnt(setup, tmp_path, capsys):
    """Before training: the target column and the first row as text. After one step (the
    heads' initial, near-constant predictions): the error beside the training median's and a
    warning that the predictions barely vary."""
    argv = train_argv(setup["base"], setup["data"], tmp_path / "new")
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    with setup["data"].open() as f:
        first = next(csv.DictReader(f))
    lines = captured.out.splitlines()
    assert "target: column 'price' (median " in lines[1] and "over 24 texts)" in lines[1]
    assert lines[2] == (
        f"row 1 as text: area {first['area']}, rooms {first['rooms']} -> price {first['price']}."
    )
    (line,) = [s for s in lines if s.startswith("price on 24 training texts: ")]
    assert "predicting the training median (" in line
    assert "warning: the predicted price barely varies" in captured.err
    assert "train longer" in captured.err
    record = json.loads((tmp_path / "new" / cli.DATA_FORMAT_FILE).read_text())
    with setup["data"].open() as f:
        prices = sorted(float(r["price"]) for r in csv.DictReader(f))
    assert record["target_median"] == (prices[11] + prices[12]) / 2  # 24 rows: the usual median


def test_a_trained_model_is_replaced_only_with_overwrite(setup, tmp_path, capsys):
    out = _copy(setup, tmp_path)
    before = _digest(out)
    assert cli.main(train_argv(out, setup["data"], out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already holds a trained model; pass --overwrite" in err[0]
    assert _digest(out) == before
    assert cli.main(train_argv(out, setup["data"], out, "--overwrite")) == 0
    assert _digest(out)["model.safetensors"] != before["model.safetensors"]
    assert _hidden(out) == []


def test_every_file_train_writes_gets_the_umask_permissions(setup, tmp_path):
    out = tmp_path / "perm"
    old = os.umask(0o027)
    try:
        assert cli.main(train_argv(setup["base"], setup["data"], out)) == 0
    finally:
        os.umask(old)
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {"model.safetensors", "config.json", cli.DATA_FORMAT_FILE} <= {p.name for p in files}
    modes = {p.name: p.stat().st_mode & 0o777 for p in files}
    assert set(modes.values()) == {0o640}, modes
    assert out.stat().st_mode & 0o777 == 0o750


# ---------------------------------------------------- a failure at every write, and the swap


def _fail_model_save(monkeypatch, error):
    def save(self, folder, *a, **kw):
        Path(folder, "model.safetensors").write_bytes(b"half")
        raise error

    monkeypatch.setattr(CauchyLMForCausalLM, "save_pretrained", save)


def _fail_tokenizer_save(monkeypatch, error):
    def save(self, *a, **kw):
        raise error

    monkeypatch.setattr(NumericTokenizer, "save_pretrained", save)


def _fail_data_format(monkeypatch, error):
    real = Path.write_text

    def write_text(self, *a, **kw):
        if self.name == cli.DATA_FORMAT_FILE:
            real(self, "{", encoding="utf-8")
            raise error
        return real(self, *a, **kw)

    monkeypatch.setattr(Path, "write_text", write_text)


def _fail_permissions(monkeypatch, error):
    def share(folder):
        raise error

    monkeypatch.setattr(atomic_save, "_share", share)


def _fail_exchange(monkeypatch, error):
    """The swap on Linux: one renameat2(RENAME_EXCHANGE) of the new folder and the old."""

    def exchange(a, b):
        raise error

    monkeypatch.setattr(atomic_save, "exchange_folders", exchange)


def _fail_rename(k):
    """The swap where renameat2 is missing: two renames (the old folder aside, the new one in);
    the k-th rename that moves the output folder fails."""

    def inject(monkeypatch, error):
        monkeypatch.setattr(atomic_save, "exchange_folders", lambda a, b: False)
        real, calls = os.replace, []

        def replace(a, b):
            if Path(a).name == "model" or Path(b).name == "model":
                calls.append((a, b))
                if len(calls) == k:
                    raise error
            return real(a, b)

        monkeypatch.setattr(os, "replace", replace)

    return inject


WRITES = {
    "model": _fail_model_save,
    "tokenizer": _fail_tokenizer_save,
    "data_format": _fail_data_format,
    "permissions": _fail_permissions,
    "exchange": _fail_exchange,
    "rename-old-aside": _fail_rename(1),
    "rename-new-in": _fail_rename(2),
}


@pytest.mark.parametrize("error", [KeyboardInterrupt(), OSError(5, "Input/output error")])
@pytest.mark.parametrize("where", sorted(WRITES))
def test_a_failure_at_any_write_keeps_the_old_model_whole(
    setup, tmp_path, capsys, monkeypatch, where, error
):
    """Ctrl-C (or an I/O error) at each write of the save and at each rename of the swap:
    --output-dir still holds the old model, byte for byte, and no hidden folder is left."""
    out = _copy(setup, tmp_path)
    before = _digest(out)
    WRITES[where](monkeypatch, error)
    code = cli.main(train_argv(out, setup["data"], out, "--overwrite"))
    assert code == (130 if isinstance(error, KeyboardInterrupt) else 2)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "interrupted; nothing was saved" in err or "Input/output error" in err
    assert _digest(out) == before
    assert _hidden(out) == []


def test_ctrl_c_between_the_renames_waits_for_the_swap(setup, tmp_path, capsys, monkeypatch):
    """Without renameat2 the swap is two renames. A real SIGINT delivered right after the old
    model was moved aside: the new model is swapped in and the old folder removed first, then
    the command stops (exit 130) saying so."""
    out = _copy(setup, tmp_path)
    before = _digest(out)
    monkeypatch.setattr(atomic_save, "exchange_folders", lambda a, b: False)
    real, calls = os.replace, []

    def replace(a, b):
        real(a, b)
        if Path(a).name == "model" or Path(b).name == "model":
            calls.append(b)
            if len(calls) == 1:
                # to this thread (a process-directed signal may reach another thread of the
                # worker later), handled at the next bytecode
                signal.pthread_kill(threading.get_ident(), signal.SIGINT)

    monkeypatch.setattr(os, "replace", replace)
    # The program's own handler, set here: what an earlier test in this worker process (or a
    # plugin) left on SIGINT must not decide what this test sees.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code = cli.main(train_argv(out, setup["data"], out, "--overwrite"))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert code == 130
    err = capsys.readouterr().err
    assert f"interrupted; the new model was saved to {out} before stopping" in err
    after = _digest(out)
    assert after.keys() == before.keys() and after != before
    assert _hidden(out) == [] and len(calls) == 2


def test_a_full_disk_is_one_line_that_says_so(setup, tmp_path, capsys, monkeypatch):
    """safetensors' SafetensorError is not an OSError; the message says "no space"."""
    from safetensors import SafetensorError

    out = _copy(setup, tmp_path)
    before = _digest(out)
    full = SafetensorError(
        'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space '
        'left on device" })'
    )
    _fail_model_save(monkeypatch, full)
    assert cli.main(train_argv(out, setup["data"], out, "--overwrite")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert re.match(
        r"cauchylin-lm train: error: no space left on the device to save the model", err[0]
    )
    assert "the model already there is unchanged" in err[0]
    assert _digest(out) == before and _hidden(out) == []
    # an OSError with ENOSPC reads the same
    monkeypatch.undo()
    _fail_tokenizer_save(monkeypatch, OSError(28, "No space left on device"))
    assert cli.main(train_argv(out, setup["data"], out, "--overwrite")) == 2
    assert "error: no space left on the device" in capsys.readouterr().err
    assert _digest(out) == before and _hidden(out) == []


def test_folders_left_by_a_killed_run_are_pointed_at(setup, tmp_path, capsys):
    """SIGKILL cannot be cleaned up after: the next run names what it left."""
    out = _copy(setup, tmp_path)
    stale = tmp_path / ".model.abc12345.tmp"
    stale.mkdir()
    moved = tmp_path / ".model.deadbeef.old"
    out.rename(moved)
    assert cli.main(train_argv(setup["base"], setup["data"], out)) == 0
    err = capsys.readouterr().err
    assert f"mv {moved} {out}" in err and str(stale) in err


# ---------------------------------------------------------------- tables a user brings along


def test_a_text_or_na_target_column_is_refused_naming_it(setup, tmp_path, capsys):
    """`--target firm` (a text column) and an `n/a` in a numeric target trained without a word
    before; now one line names the column and the first bad row, and nothing is written."""
    table = tmp_path / "grunfeld.csv"
    table.write_text("firm,invest,value\nGM,317.6,3078.5\nGE,33.1,1170.6\nUS,n/a,2015.8\n")
    cases = [
        (["--target", "firm"], "target column 'firm'", "data row 1 (line 2)", "'GM' is not a"),
        (["--target", "invest"], "target column 'invest'", "data row 3 (line 4)", "'n/a'"),
    ]
    for extra, column, row, reason in cases:
        out = tmp_path / "out"
        assert cli.main(train_argv(setup["base"], table, out, *extra)) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and column in err[0] and row in err[0] and reason in err[0]
        assert not out.exists() and _hidden(out) == []
    # the default target is the last column: numbers everywhere, so it trains
    assert cli.main(train_argv(setup["base"], table, tmp_path / "ok")) == 0
    assert "target: column 'value'" in capsys.readouterr().out


def test_a_table_written_with_12_decimals_predicts_with_the_decimals_its_values_need(
    setup, tmp_path, capsys
):
    """pandas' to_csv(float_format="%.12f"): the prices need 2 decimals, the areas none."""
    rows = [(30 + 7 * i, round(100 + 3.17 * i, 2)) for i in range(16)]
    table = tmp_path / "pandas.csv"
    table.write_text(
        "area,price\n" + "".join(f"{a:.12f},{p:.12f}\n" for a, p in rows), encoding="utf-8"
    )
    out = tmp_path / "out"
    assert cli.main(train_argv(setup["base"], table, out)) == 0
    capsys.readouterr()
    precision = json.loads((out / cli.DATA_FORMAT_FILE).read_text())["precision"]
    assert precision == {"decimals": {"area": 0, "price": 2}, "default": 2}
    assert cli.main(["predict", str(out), "--prompt", "area 75 -> price ", "--json"]) == 0
    text = json.loads(capsys.readouterr().out)["text"]
    assert re.fullmatch(r"-?[0-9]+\.[0-9]{2}", text), text


def test_a_text_longer_than_a_learned_position_context_is_a_clear_error(tmp_path, capsys):
    """GPT-2 has one learned position per token: a longer text was `IndexError: index out of
    range in self`, from train and from evaluate."""
    base = save_tiny_base(tmp_path / "gpt2", "gpt2", spare_rows=2, max_position_embeddings=32)
    capsys.readouterr()  # transformers' own progress bars of that save
    data = tmp_path / "long.csv"
    data.write_text("note,y\nshort,1\n" + "a rather long note " * 8 + ",2\n")
    for argv in (
        train_argv(base, data, tmp_path / "out"),
        ["evaluate", str(base), "--data", str(data), "--no-progress", "--threads", "1"],
    ):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        assert f"{data}, data row 2 (line 3) is" in err[0]
        assert "longer than the model's context of 32 positions" in err[0]
        assert "--max-length 32" in err[0]
    assert not (tmp_path / "out").exists()
    argv = ["predict", str(base), "--prompt", "a rather long note " * 8, "--threads", "1"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "prompts[0] is" in err[0] and "context of 32 positions" in err[0]


# ------------------------------------------------ another program writing to the same folder


def _during_training(monkeypatch, action):
    """Run ``action()`` once, right after the next training's steps (before its save)."""
    import cauchylin_hf.training as training

    real, done = training.train, []

    def train(*a, **kw):
        result = real(*a, **kw)
        if not done:
            done.append(True)
            action()
        return result

    monkeypatch.setattr(training, "train", train)


def _kept_beside(out: Path) -> list[Path]:
    return sorted(out.parent.glob(f"{out.name}.new-*"))


@pytest.mark.parametrize("overwrite", [False, True])
def test_two_trainings_into_one_folder_never_both_save(
    setup, tmp_path, capsys, monkeypatch, overwrite
):
    """A sweep that forgets to vary --output-dir: a second training finishes into the folder
    while the first still runs. The first must not replace it: one "saved", and the first's
    model kept beside, named in its error."""
    out = _copy(setup, tmp_path) if overwrite else tmp_path / "model"
    extra = ["--overwrite"] if overwrite else []
    results = []

    def other_training():
        results.append(
            cli.main(train_argv(setup["base"], setup["data"], out, "--seed", "1", *extra))
        )

    _during_training(monkeypatch, other_training)
    first = cli.main(train_argv(setup["base"], setup["data"], out, *extra))
    captured = capsys.readouterr()
    assert results == [0] and first == 2
    assert captured.out.count("saved the model") == 1
    error = captured.err.strip().splitlines()[-1]
    assert error.startswith("cauchylin-lm train: error: --output-dir ")
    assert "was changed by another program during training" in error
    other = _digest(out)  # the other training's model, whole
    assert CauchyLMForCausalLM.from_pretrained(out) is not None
    (kept,) = _kept_beside(out)
    assert f"the new model was saved to {str(kept)!r} instead" in error
    assert _digest(kept).keys() == other.keys() and _digest(kept) != other
    assert _hidden(out) == []


def test_a_folder_another_program_creates_during_training_is_left_alone(
    setup, tmp_path, capsys, monkeypatch
):
    """`train` refuses a non-empty folder that is not a model at start; one that another
    program makes at the path while it trains was swapped out and its file deleted."""
    out = tmp_path / "model"

    def other_program():
        out.mkdir()
        (out / "theirs.txt").write_text("not yours")

    _during_training(monkeypatch, other_program)
    assert cli.main(train_argv(setup["base"], setup["data"], out)) == 2
    captured = capsys.readouterr()
    assert "saved the model" not in captured.out
    assert "(it was created)" in captured.err
    assert sorted(p.name for p in out.iterdir()) == ["theirs.txt"]
    assert (out / "theirs.txt").read_text() == "not yours"
    (kept,) = _kept_beside(out)
    assert CauchyLMForCausalLM.from_pretrained(kept).config.num_token_id is not None


def test_overwrite_replaces_the_model_and_keeps_what_is_not_the_models(setup, tmp_path, capsys):
    """--overwrite replaced the folder whole, a user's notes and subfolders too (Hugging Face's
    --overwrite_output_dir, which it was said to follow, deletes nothing). Now the model's
    files go (a stale tokenizer file of another kind too) and everything else stays, named
    before training."""
    out = _copy(setup, tmp_path)
    (out / "notes.md").write_text("lr 1e-3 was too high")
    (out / "plots").mkdir()
    (out / "plots" / "loss.png").write_bytes(b"png")
    (out / "vocab.json").write_text("{}")  # a tokenizer file the new save does not write
    before = _digest(out)
    assert cli.main(train_argv(out, setup["data"], out, "--overwrite")) == 0
    after = _digest(out)
    assert after.get("notes.md") == before["notes.md"]
    assert after.get("plots/loss.png") == before["plots/loss.png"]
    assert "vocab.json" not in after
    assert after["model.safetensors"] != before["model.safetensors"]
    assert _hidden(out) == []
    err = capsys.readouterr().err
    assert "--overwrite: the model's files in" in err and "(config.json, data_format.json," in err
    assert "vocab.json) are replaced once the training succeeded" in err
    assert "its 2 other entries (notes.md, plots) are kept" in err


def test_a_table_of_copies_of_one_row_trains_and_says_it_is_not_calibrated(setup, tmp_path, capsys):
    """150 copies of one row: "auto" would hold out 30, but a held-out copy is a row training
    saw; train says so before training (not "30 more held out"), trains, and notes it."""
    data = tmp_path / "same.csv"
    data.write_text("area,rooms,price\n" + "50,2,150\n" * 150)
    assert cli.main(train_argv(setup["base"], data, tmp_path / "new")) == 0
    captured = capsys.readouterr()
    assert "on 150 texts of" in captured.out and "more held out" not in captured.out
    assert "(copies of one text: none can be held out to calibrate on)" in captured.out
    assert "note: the 150 training texts are all copies of one text" in captured.err
