"""Resuming ``cauchylin-lm train``: what is refused before any model work, and what a run says.

* a checkpoint with a damaged or missing file is refused in one line that names the checkpoint,
  the file and what to do (no traceback), before torch is imported;
* a resume with other data, another model or another trained set of parameters says what
  differs, before the tokenizer is trained or the model built;
* a new training into a folder with an earlier training's checkpoints, and a resume with none,
  are refused in under a second without importing torch;
* a resumed run says from which checkpoint and step; the checkpoints go once the model is
  saved (kept with ``--keep-checkpoints``), and carry the umask's permissions;
* a file-size limit hit while a checkpoint is written is one line, like a full disk.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cauchylin_hf.app import cli
from cauchylin_hf.testing import save_tiny_base
from cauchylin_hf.trainer_checkpoints import (
    is_checkpoint_folder_name,
    last_checkpoint,
    list_checkpoints,
    remove_checkpoints,
    rotate_checkpoints,
)

from .tables import flats

ROOT = Path(__file__).resolve().parents[2]
STEPS = 4


@pytest.fixture(autouse=True)
def _threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _train(base, data, out, *extra):
    return [
        "train",
        str(base),
        "--data",
        str(data),
        "--output-dir",
        str(out),
        "--max-steps",
        str(STEPS),
        "--batch-size",
        "8",
        "--learning-rate",
        "0.01",
        "--threads",
        "1",
        "--no-progress",
        *extra,
    ]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished CLI training that kept its checkpoints (steps 2 and 4), and its command."""
    folder = tmp_path_factory.mktemp("resume")
    base = save_tiny_base(folder / "base", "qwen2", spare_rows=2)
    data = flats(folder / "flats.csv", 24, seed=0)
    out = folder / "model"
    argv = _train(base, data, out, "--save-steps", "2", "--keep-checkpoints")
    assert cli.main(argv) == 0
    return {"base": base, "data": data, "out": out, "folder": folder}


def _interrupted(run, tmp_path, step=STEPS):
    """A folder holding the checkpoint of ``step`` alone, as a stopped training leaves it."""
    out = tmp_path / "model"
    out.mkdir()
    shutil.copytree(run["out"] / f"checkpoint-{step}", out / f"checkpoint-{step}")
    return out


def _resume(run, out, base=None, data=None):
    """The command that resumes the training of ``run`` in ``out``, two steps further."""
    base, data = base or run["base"], data or run["data"]
    return _train(
        base, data, out, "--save-steps", "2", "--resume-from-checkpoint", "--max-steps", "6"
    )


def _error(argv, capsys) -> str:
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err
    assert "training " not in captured.out  # refused before the header
    return lines[0]


# ----------------------------------------------------------------------- the checkpoint's files


def test_the_checkpoints_keep_the_umask_permissions_and_the_run_keeps_them(run):
    mask = os.umask(0)
    os.umask(mask)
    assert [p.name for p in list_checkpoints(run["out"])] == ["checkpoint-2", "checkpoint-4"]
    for checkpoint in list_checkpoints(run["out"]):
        for path in checkpoint.iterdir():
            assert path.stat().st_mode & 0o777 == 0o666 & ~mask, path


@pytest.mark.parametrize("missing", ["scheduler.pt", "rng_state.pth"])
def test_a_missing_optimizer_state_is_refused_unless_accepted(run, tmp_path, capsys, missing):
    out = _interrupted(run, tmp_path)
    (out / f"checkpoint-{STEPS}" / missing).unlink()
    argv = _resume(run, out)
    line = _error(argv, capsys)
    assert f"checkpoint-{STEPS}' holds no {missing}" in line
    assert "--fresh-optimizer-state" in line
    assert cli.main([*argv, "--fresh-optimizer-state"]) == 0  # accepted: it resumes
    assert f"resumed from checkpoint-{STEPS}" in capsys.readouterr().out


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _random(path: Path) -> None:
    path.write_bytes(os.urandom(max(64, path.stat().st_size)))


_DAMAGES = {"truncated": _truncate, "emptied": lambda p: p.write_bytes(b""), "random": _random}


@pytest.mark.parametrize("damage", sorted(_DAMAGES))
@pytest.mark.parametrize(
    "name",
    [
        "optimizer.pt",
        "scheduler.pt",
        "rng_state.pth",
        "model.safetensors",
        "trainer_state.json",
        "config.json",
        "tokenizer.json",
    ],
)
def test_a_damaged_checkpoint_file_is_named_in_one_line(run, tmp_path, capsys, name, damage):
    out = _interrupted(run, tmp_path)
    _DAMAGES[damage](out / f"checkpoint-{STEPS}" / name)
    argv = _resume(run, out)
    line = _error(argv, capsys)
    assert f"checkpoint '{out / f'checkpoint-{STEPS}'}'" in line
    assert name in line
    assert "resume from an earlier checkpoint" in line
    assert "could not save" not in line


def test_weights_damaged_inside_their_data_are_refused_not_resumed(run, tmp_path, capsys):
    """safetensors keeps no checksum: a NaN written into the data (bit rot, a bad copy) is
    found by reading the weights, and the resume refused, not trained on."""
    from safetensors.torch import load_file, save_file

    out = _interrupted(run, tmp_path)
    (out / f"checkpoint-{STEPS}" / "weights_sha256.json").unlink()  # as an older release wrote
    path = out / f"checkpoint-{STEPS}" / "model.safetensors"
    tensors = load_file(path)
    name = next(n for n, t in tensors.items() if t.is_floating_point() and "lm_head" not in n)
    tensors[name].view(-1)[0] = float("nan")
    save_file(tensors, path, metadata={"format": "pt"})
    argv = _resume(run, out)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert f"model.safetensors holds NaN or infinite values in {name}" in err


def test_weights_with_bytes_changed_inside_their_data_are_refused(run, tmp_path, capsys):
    """A few bytes of the tensors' data changed (the values stay finite): the checkpoint's
    recorded SHA-256 finds it."""
    out = _interrupted(run, tmp_path)
    path = out / f"checkpoint-{STEPS}" / "model.safetensors"
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 2] = bytes(b ^ 0x01 for b in data[middle : middle + 2])
    path.write_bytes(bytes(data))
    line = _error(_resume(run, out), capsys)
    assert "model.safetensors is damaged (its SHA-256 is not the one recorded" in line


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        ({"global_step": "4"}, "'global_step' must be an integer"),
        ({"global_step": 3}, "says step 3, but the folder's name says step 4"),
        ({"log_history": {"loss": 1}}, "'log_history' must be a list"),
        ({"epoch": "one"}, "'epoch' must be a finite number"),
        ({"train_batch_size": None, "max_steps": [4]}, "'max_steps' must be a finite number"),
    ],
)
def test_a_hand_edited_trainer_state_is_named(run, tmp_path, capsys, edit, expected):
    out = _interrupted(run, tmp_path)
    path = out / f"checkpoint-{STEPS}" / "trainer_state.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **edit}))
    argv = _resume(run, out)
    line = _error(argv, capsys)
    assert "trainer_state.json" in line and expected in line


def test_a_trainer_state_with_a_key_the_trainer_does_not_know_is_named(run, tmp_path, capsys):
    out = _interrupted(run, tmp_path)
    path = out / f"checkpoint-{STEPS}" / "trainer_state.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "my_note": 1}))
    argv = _resume(run, out)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert "trainer_state.json is not a state the Trainer reads" in err and "my_note" in err


def test_checkpoint_names_take_ascii_digits_only(tmp_path):
    assert not is_checkpoint_folder_name("checkpoint-١٢")
    for name in ("checkpoint-8", "checkpoint-١٢"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "trainer_state.json").write_text("{}")
    assert last_checkpoint(tmp_path).name == "checkpoint-8"


def test_removing_checkpoints_unlinks_a_link_and_keeps_what_is_not_a_checkpoint(tmp_path):
    elsewhere = tmp_path / "elsewhere" / "checkpoint-4"
    elsewhere.mkdir(parents=True)
    (elsewhere / "trainer_state.json").write_text("{}")
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint-4").symlink_to(elsewhere)
    for name in ("checkpoint-2", "checkpoint-6", "checkpoint-notes", "checkpoint-١٢"):
        (run / name).mkdir()
        (run / name / "trainer_state.json").write_text("{}")
    assert [p.name for p in rotate_checkpoints(run, 1)] == ["checkpoint-2", "checkpoint-4"]
    assert (elsewhere / "trainer_state.json").is_file()  # the link went, not its target
    assert [p.name for p in remove_checkpoints(run)] == ["checkpoint-6"]
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint-notes", "checkpoint-١٢"]


def test_a_resume_past_max_steps_says_nothing_is_left(run, tmp_path, capsys):
    out = _interrupted(run, tmp_path)
    argv = _resume(run, out)
    line = _error([*argv, "--max-steps", "3"], capsys)
    assert "is at step 4 and --max-steps is 3: nothing is left to train" in line


# ---------------------------------------------------------------- another run's checkpoint


def test_a_resume_with_other_data_says_so_before_any_work(run, tmp_path, capsys):
    out = _interrupted(run, tmp_path)
    other = flats(tmp_path / "other.csv", 24, seed=1)
    argv = _resume(run, out, data=other)
    line = _error(argv, capsys)
    assert "belongs to another training: the data (--data)" in line


def test_a_resume_with_another_base_or_backbone_setting_says_what_differs(run, tmp_path, capsys):
    out = _interrupted(run, tmp_path)
    wider = save_tiny_base(tmp_path / "wider", "qwen2", spare_rows=2, hidden_size=64)
    argv = _resume(run, out, base=wider)
    assert "the model (MODEL's config.json, or --from-config)" in _error(argv, capsys)
    argv = _resume(run, out)
    line = _error([*argv, "--train-backbone"], capsys)
    assert "the backbone trained (--train-backbone): false then, true now" in line


def test_a_resume_with_another_learning_rate_or_seed_says_what_differs(run, tmp_path, capsys):
    """The resumed optimizer and schedule keep the run's learning rate (a new one was ignored
    without a word), and another seed draws other batches than the resume skips."""
    out = _interrupted(run, tmp_path)
    argv = _resume(run, out)
    line = _error([*argv, "--learning-rate", "0.5"], capsys)
    assert "--learning-rate:" in line and "0.5 now" in line
    line = _error([*argv, "--seed", "7"], capsys)
    assert "--seed:" in line and "7 now" in line
    # another weight of the target is another loss (the run gave none: null then)
    line = _error([*argv, "--target-weight", "4"], capsys)
    assert "--target-weight: null then, 4.0 now" in line


# ------------------------------------------------------------------- refusals before torch


def _probe(argv: list[str]) -> tuple[int, str, bool, float]:
    """``main(argv)`` in a fresh interpreter: status, stderr, torch imported, seconds."""
    code = (
        "import sys, time\nfrom cauchylin_lm import main\n"
        f"start = time.perf_counter()\nstatus = main({argv!r})\n"
        "took = time.perf_counter() - start\n"
        "print(status, 'torch' in sys.modules, took)\n"
    )
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "adapters"), str(ROOT)])
    best = None
    for _ in range(3):  # the first may pay for a cold file cache
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
        )
        status, torch_seen, took = done.stdout.split()
        if best is None or float(took) < best[3]:
            best = (int(status), done.stderr, torch_seen == "True", float(took))
    assert best is not None
    return best


def test_old_checkpoints_and_a_resume_with_none_are_refused_before_torch(run, tmp_path):
    out = _interrupted(run, tmp_path)
    for extra in (("--save-steps", "2"), ()):  # with or without checkpoints of its own
        status, err, torch_seen, took = _probe(_train(run["base"], run["data"], out, *extra))
        assert status == 2 and not torch_seen and took < 1.0, (err, took)
        assert "holds the checkpoints of an earlier training (checkpoint-4)" in err
    empty = tmp_path / "empty"
    argv = _train(run["base"], run["data"], empty, "--resume-from-checkpoint")
    status, err, torch_seen, took = _probe(argv)
    assert status == 2 and not torch_seen and took < 1.0, (err, took)
    assert "--resume-from-checkpoint: no complete checkpoint" in err
    status, err, torch_seen, took = _probe([*argv, ""])  # a name left empty
    assert status == 2 and not torch_seen and took < 1.0, (err, took)
    assert "--resume-from-checkpoint: an empty name" in err


# --------------------------------------------------------------- what a resumed run says


def test_a_resumed_run_says_from_which_step_and_the_checkpoints_go_once_saved(
    run, tmp_path, capsys
):
    out = _interrupted(run, tmp_path, step=2)
    argv = _resume(run, out)
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert f"resumed from checkpoint-2 in {out} (step 2)" in printed.splitlines()[0]
    assert "a new" not in printed
    assert "removed its 2 checkpoints, now that the model is saved" in printed
    assert list_checkpoints(out) == [] and not [p for p in out.iterdir() if "checkpoint" in p.name]


# ------------------------------------------------------------------- a file-size limit

_CODE = "import sys; from cauchylin_lm import main; sys.exit(main(sys.argv[1:]))"


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "adapters"), str(ROOT)])
    return env


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A new model (its backbone trains: an optimizer state twice the weights) trained by the
    console script with a checkpoint every step and --save-total-limit 1."""
    folder = tmp_path_factory.mktemp("scratch")
    data = flats(folder / "flats.csv", 24, seed=0)
    argv = ["train", "--from-config", "qwen2-tiny", "--vocab-size", "300", "--data", str(data)]
    argv += ["--max-steps", "2", "--save-steps", "1", "--threads", "1", "--no-progress"]
    out = folder / "model"
    done = subprocess.run(
        [sys.executable, "-c", _CODE, *argv, "--output-dir", str(out), "--save-total-limit", "1"],
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return {"argv": argv, "done": done, "weights": (out / "model.safetensors").stat().st_size}


def test_a_save_total_limit_run_prints_nothing_of_transformers_rotation(scratch):
    """The older checkpoint goes by step (not by mtime, which transformers doubts aloud)."""
    assert "mtime" not in scratch["done"].stderr, scratch["done"].stderr


def test_a_file_size_limit_during_a_checkpoint_is_one_line(scratch, tmp_path):
    """``ulimit -f`` between the size of the weights and that of the optimizer state: the
    checkpoint's optimizer.pt is cut by the limit (torch.save's stream writer fails)."""
    limit = int(1.5 * scratch["weights"])

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    out = tmp_path / "model"
    done = subprocess.run(
        [sys.executable, "-c", _CODE, *scratch["argv"], "--output-dir", str(out)],
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=limited,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = [x for x in done.stderr.splitlines() if "error:" in x]
    assert "reached the file-size limit (ulimit -f" in line and "never resumed" in line
    assert list_checkpoints(out) == []  # the cut checkpoint is never one to resume from
