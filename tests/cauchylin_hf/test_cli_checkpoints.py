"""``cauchylin-lm train --save-steps / --save-total-limit / --resume-from-checkpoint``.

Checkpoints go to ``--output-dir/checkpoint-STEP``: they survive Ctrl-C (which names the last one
and the command that continues), the model's atomic swap at the end keeps them, and a resumed
run logs the losses of an uninterrupted one. The last test walks every option of ``train`` and
checks that what it passes to :func:`cauchylin_hf.training.train` is taken by the installed
transformers.
"""

from __future__ import annotations

import argparse
import json

import pytest
import torch
from cauchylin_hf.app import cli
from cauchylin_hf.model import CauchyLMForCausalLM
from cauchylin_hf.trainer_checkpoints import checkpoint_step, list_checkpoints
from transformers import TrainerCallback

STEPS, STOP = 7, 4  # 24 rows, batch 8: three steps an epoch; Ctrl-C after the checkpoint of 4


@pytest.fixture(autouse=True)
def _threads():
    """--threads 1 sets torch's thread count for the process: put it back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def setup(cli_base, flats_table):
    """The session's tiny base and 24-row flats table."""
    return {"base": cli_base, "data": flats_table}


def _train(setup, out, *extra):
    return [
        "train",
        str(setup["base"]),
        "--data",
        str(setup["data"]),
        "--output-dir",
        str(out),
        "--max-steps",
        str(STEPS),
        "--batch-size",
        "8",
        "--logging-steps",
        "1",
        "--learning-rate",
        "0.01",
        "--threads",
        "1",
        "--no-progress",
        *extra,
    ]


class _CtrlC(TrainerCallback):
    """Ctrl-C right after the checkpoint of step ``k`` was written."""

    def __init__(self, k: int) -> None:
        self.k = k

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.k:
            raise KeyboardInterrupt


def _recording(monkeypatch, histories, interrupt_at=None):
    """Record the loss history of every training the CLI runs (and interrupt one)."""
    import cauchylin_hf.training as training

    real = training.train
    # The heads' random initialisation draws from torch's global generator, which a new
    # process starts from one fixed seed: each command here starts as a new process would.
    torch.manual_seed(0)

    def train(*a, **kw):
        if interrupt_at is not None:
            kw["callbacks"] = [*kw.get("callbacks", ()), _CtrlC(interrupt_at)]
        result = real(*a, **kw)
        histories.append(result.history)
        return result

    monkeypatch.setattr(training, "train", train)


def _losses(history):
    return [(row["step"], row["loss"]) for row in history]


@pytest.fixture(scope="module")
def uninterrupted(setup, tmp_path_factory):
    histories: list = []
    with pytest.MonkeyPatch.context() as mp:
        _recording(mp, histories)
        out = tmp_path_factory.mktemp("full") / "model"
        assert cli.main(_train(setup, out)) == 0
    (history,) = histories
    return _losses(history)


def test_ctrl_c_keeps_the_last_checkpoint_and_resuming_continues_the_run(
    setup, uninterrupted, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "model"
    first: list = []
    _recording(monkeypatch, first, interrupt_at=STOP)
    keep = ("--save-steps", "2", "--save-total-limit", "4", "--keep-checkpoints")
    assert cli.main(_train(setup, out, *keep)) == 130
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (
        f"cauchylin-lm train: interrupted; the model was not saved; its last checkpoint is kept "
        f"in {out / f'checkpoint-{STOP}'}: run the same command with --resume-from-checkpoint "
        "to continue"
    )
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-2", f"checkpoint-{STOP}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no staging folder left

    # and a kill while the next checkpoint was written: its folder cut off before
    # trainer_state.json, an atomic save's hidden folder left beside it
    (out / f"checkpoint-{STOP + 2}").mkdir()
    (out / f"checkpoint-{STOP + 2}" / "config.json").write_text("{}")
    (out / f".checkpoint-{STOP + 2}.0a1b2c3d.tmp").mkdir()

    # the interrupted run logged steps 1..STOP before Ctrl-C: taken from the checkpoint's log
    state = json.loads((out / f"checkpoint-{STOP}" / "trainer_state.json").read_text())
    second: list = []
    _recording(monkeypatch, second)
    argv = _train(setup, out, *keep, "--resume-from-checkpoint")
    assert cli.main(argv) == 0
    assert "saved the model" in capsys.readouterr().out
    logged = [(row["step"], row["loss"]) for row in state["log_history"] if "loss" in row]
    resumed = logged + _losses(second[0])
    assert [s for s, _ in resumed] == [s for s, _ in uninterrupted] == list(range(1, STEPS + 1))
    diff = max(abs(a - b) / abs(b) for (_, a), (_, b) in zip(resumed, uninterrupted, strict=True))
    assert diff <= 1e-5
    assert uninterrupted[-1][1] < uninterrupted[0][1]
    # the model was swapped in beside its checkpoints (every 2 steps and the last), loadable
    steps = [checkpoint_step(p) for p in list_checkpoints(out)]
    assert steps == [2, 4, 6, 7]
    assert CauchyLMForCausalLM.from_pretrained(out).config.num_token_id is not None
    checkpoint = out / "checkpoint-6"
    record = json.loads((checkpoint / cli.DATA_FORMAT_FILE).read_text())
    assert record == json.loads((out / cli.DATA_FORMAT_FILE).read_text())
    predict = ["predict", str(checkpoint), "--data", str(setup["data"]), "--no-progress"]
    assert cli.main(predict) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) >= 24


def test_save_total_limit_and_a_new_run_into_old_checkpoints(setup, tmp_path, capsys):
    out = tmp_path / "model"
    argv = _train(setup, out, "--save-steps", "2", "--save-total-limit", "2", "--keep-checkpoints")
    assert cli.main(argv) == 0
    assert [checkpoint_step(p) for p in list_checkpoints(out)] == [6, 7]
    capsys.readouterr()
    # a new run (not a resume) would mix its checkpoints with these: refused, saying why
    assert cli.main([*argv, "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "holds the checkpoints of an earlier training" in err
    assert "--resume-from-checkpoint" in err


def test_another_programs_write_is_still_caught_beside_the_checkpoints(
    setup, tmp_path, capsys, monkeypatch
):
    """The checkpoints are this training's own entries of --output-dir; a model file that
    another program writes there meanwhile still stops the swap."""
    import cauchylin_hf.training as training

    out, real = tmp_path / "model", training.train

    def train(*a, **kw):
        result = real(*a, **kw)
        (out / "config.json").write_text('{"theirs": true}')
        return result

    monkeypatch.setattr(training, "train", train)
    assert cli.main(_train(setup, out, "--save-steps", "3", "--save-total-limit", "3")) == 2
    err = capsys.readouterr().err
    assert "was changed by another program during training (its entry 'config.json'" in err
    assert (out / "config.json").read_text() == '{"theirs": true}'
    assert [checkpoint_step(p) for p in list_checkpoints(out)] == [3, 6, 7]


def test_resuming_with_no_checkpoint_is_an_error(setup, tmp_path, capsys):
    out = tmp_path / "model"
    assert cli.main(_train(setup, out, "--resume-from-checkpoint")) == 2
    err = capsys.readouterr().err
    assert "no complete checkpoint" in err and str(out) in err
    assert not out.exists()


# ------------------------------------------------------------------------ the CLI and train()

# The options of `train` that do not reach train() as a keyword of their own, with the reason.
# A new option must be added here or reach train(): the walk below fails otherwise.
_CLI_ONLY = {
    "model": "the model folder: loaded by the CLI",
    "from_config": "builds the model: covered by the CLI tests",
    "data": "read and encoded by the CLI",
    "template": "how the CLI writes table rows as text",
    "target": "which column the CLI reports on",
    "output_dir": "the final model's folder: train() gets a staging folder beside it",
    "overwrite": "the CLI's output-folder check",
    "tokenizer": "loaded by the CLI",
    "vocab_size": "--from-config's tokenizer",
    "max_length": "the CLI encodes the texts itself",
    "train_backbone": "a setting of the model, made before training",
    "target_weight": "a setting of the model (its loss), made before training: test_cli.py",
    "threads": "torch's thread count",
    "resume_from_checkpoint": "needs a checkpoint: the resume test above",
    "no_progress": "train(progress=...), but bars show only on a terminal, so not under pytest",
    "keep_checkpoints": "the CLI removes the checkpoints once the model is saved, or not",
}

# A value, other than the default, for every option that reaches train(); a flag alone is [].
_VALUES = {
    "eval_file": None,  # the data file itself
    "max_steps": ["2"],
    "epochs": ["2"],
    "batch_size": ["4"],
    "learning_rate": ["0.02"],
    "warmup_ratio": ["0.5"],
    "warmup_steps": ["1"],
    "lr_scheduler": ["cosine"],
    "logging_steps": ["2"],
    "save_steps": ["1"],
    "save_total_limit": ["1"],
    "fresh_optimizer_state": [],
    "dataloader_workers": ["1"],
    "device": ["cpu"],  # use_cpu=True (auto: None, the Trainer's choice)
    "calibration": ["0.25"],
    "calibration_split": ["last"],
    "step_choice": ["0.3"],
    "no_readouts": [],
    "seed": ["5"],
}


class _Stop(Exception):
    pass


def _train_options() -> list[argparse.Action]:
    parser = cli.build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return [a for a in sub.choices["train"]._actions if not isinstance(a, argparse._HelpAction)]


def test_every_train_option_reaches_train_and_the_running_transformers_takes_it(
    setup, tmp_path, monkeypatch, capsys
):
    """Each option of `cauchylin-lm train` either is the CLI's own (listed with its reason) or
    changes what the CLI passes to train(); train() is then called with exactly those
    arguments, against the installed transformers (the Python API takes what the CLI takes)."""
    import cauchylin_hf.training as training

    real, calls = training.train, []

    def record(*a, **kw):
        calls.append((a, kw))
        raise _Stop

    monkeypatch.setattr(training, "train", record)
    base = [*_train(setup, tmp_path / "m"), "--max-steps", "1"]

    def passed(*extra):
        calls.clear()
        try:
            cli.main([*base, *extra])
        except _Stop:
            pass
        (call,) = calls
        return call

    call, default = passed()
    checked = {}
    for action in _train_options():
        name = action.dest
        assert name in _CLI_ONLY or name in _VALUES, f"--{name}: reach train() or list it"
        if name in _CLI_ONLY:
            continue
        flag = action.option_strings[0] if action.option_strings else None
        if name == "eval_file":
            args, kw = passed(flag, str(setup["data"]))
            assert args[3] is not None  # the encoded held-out data
        else:
            args, kw = passed(flag, *_VALUES[name])
            assert kw != default, f"{flag} changes nothing that train() gets"
        checked[name] = (args, kw)
    assert set(checked) == set(_VALUES)
    # train() with every option's change at once (the two warm-ups apart: they exclude each
    # other), as the CLI passed it
    monkeypatch.setattr(training, "train", real)
    for group in ([n for n in checked if n != "warmup_steps"], ["warmup_steps"]):
        args, merged = checked["eval_file"][0] if "eval_file" in group else call, dict(default)
        for name in group:
            kw = checked[name][1]
            merged.update({k: v for k, v in kw.items() if k not in default or v != default[k]})
            if name == "warmup_ratio":
                del merged["warmup_steps"]
        result = real(*args, **{**merged, "save": False})
        assert result.global_step >= 1, group
