"""Checkpoints of ``train`` and resuming from them (the Trainer's own machinery).

A run interrupted at step ``k`` and resumed from its checkpoint must log the losses of the run
that was never interrupted: the optimizer's moments, the schedule, the RNG states and the data
position all come back. The runs cross an epoch boundary (12 texts, batch 4: 3 steps an epoch)
so the data order of a later epoch is checked too, and train the backbone (the heads' and the
backbone's optimizer states both matter).
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import torch
from cauchylin_hf.model import CauchyLMForCausalLM
from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
from cauchylin_hf.tokenizer import NumericTokenizer
from cauchylin_hf.trainer_checkpoints import (
    CheckpointError,
    checkpoint_step,
    last_checkpoint,
    list_checkpoints,
    resolve_resume_checkpoint,
)
from cauchylin_hf.training import make_training_arguments, train
from transformers import TrainerCallback

STEPS = 10
STOP = 6  # the interruption: after the checkpoint of step 6
# float32 steps taken in the same order give the same numbers; a resume that lost any state
# (see the control) is off by far more
RTOL = 1e-5


def _texts() -> list[str]:
    r = random.Random(0)
    pairs = [(r.randint(1, 9), r.randint(1, 20)) for _ in range(12)]
    return [f"{a} boxes of {b} eggs hold {a * b} eggs." for a, b in pairs]


def _model() -> tuple[CauchyLMForCausalLM, NumericTokenizer]:
    torch.manual_seed(0)
    base = tiny_base_model("qwen2", seed=0)
    return CauchyLMForCausalLM.from_base(
        base, tiny_tokenizer(), return_tokenizer=True, freeze_backbone=False
    )


class _StopAt(TrainerCallback):
    """Stops the training after step ``k`` (as Ctrl-C would, once its checkpoint is written)."""

    def __init__(self, k: int) -> None:
        self.k = k

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.k:
            control.should_training_stop = True


def _run(folder, **kw):
    model, ntok = _model()
    options = dict(
        max_steps=STEPS,
        batch_size=4,
        logging_steps=1,
        learning_rate=1e-2,
        warmup_ratio=0.2,
        seed=3,
        progress=False,
        save=False,
        evaluate=False,
        readouts=False,
        calibration=None,
    )
    texts = kw.pop("train_texts", None) or _texts()
    return train(model, ntok, texts, output_dir=folder, **{**options, **kw})


def _max_rel_diff(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b)
    return max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The uninterrupted run, and the one interrupted at STOP and resumed (checkpoints every
    2 steps)."""
    full = _run(tmp_path_factory.mktemp("full"))
    folder = tmp_path_factory.mktemp("interrupted")
    first = _run(folder, save_steps=2, callbacks=[_StopAt(STOP)])
    kept = tmp_path_factory.mktemp("kept") / "checkpoint"
    shutil.copytree(folder / f"checkpoint-{STOP}", kept)  # before the resumed run goes on
    second = _run(folder, save_steps=2, resume_from_checkpoint=True)
    return {"full": full, "first": first, "second": second, "folder": folder, "kept": kept}


def test_a_resumed_run_logs_the_losses_of_an_uninterrupted_one(runs):
    full, first, second = runs["full"], runs["first"], runs["second"]
    assert [r["step"] for r in first.history] == list(range(1, STOP + 1))
    assert [r["step"] for r in second.history] == list(range(STOP + 1, STEPS + 1))
    assert second.global_step == STEPS
    for key in ("loss", "cls_loss", "reg_loss", "learning_rate", "grad_norm"):
        joined = first.series(key) + second.series(key)
        assert _max_rel_diff(full.series(key), joined) <= RTOL, key
    # the losses moved: equal curves are not two flat lines
    assert full.series("loss")[-1] < 0.5 * full.series("loss")[0]


@pytest.mark.parametrize("missing", ["optimizer.pt", "scheduler.pt"])
def test_a_checkpoint_without_its_optimizer_state_is_refused_naming_the_file(
    runs, tmp_path, missing
):
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copytree(runs["kept"], folder / f"checkpoint-{STOP}")
    (folder / f"checkpoint-{STOP}" / missing).unlink()
    with pytest.raises(CheckpointError) as caught:
        _run(folder, save_steps=2, resume_from_checkpoint=True)
    message = str(caught.value)
    assert f"checkpoint-{STOP}' holds no {missing}" in message
    assert "fresh_optimizer_state=True" in message and "\n" not in message


def test_resuming_without_the_optimizer_state_would_be_caught(runs, tmp_path):
    """The control: the same resume from a checkpoint whose optimizer and scheduler files were
    deleted (the weights alone), accepted with fresh_optimizer_state=True, logs other losses,
    so the equality above is not trivial."""
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copytree(runs["kept"], folder / f"checkpoint-{STOP}")
    for name in ("optimizer.pt", "scheduler.pt"):
        (folder / f"checkpoint-{STOP}" / name).unlink()
    resumed = _run(folder, save_steps=2, resume_from_checkpoint=True, fresh_optimizer_state=True)
    assert [r["step"] for r in resumed.history] == list(range(STOP + 1, STEPS + 1))
    assert _max_rel_diff(runs["second"].series("loss"), resumed.series("loss")) > 1e-3


def test_a_checkpoint_is_a_model_folder_that_loads_and_predicts(runs):
    """The checkpoint of step STOP holds the weights the interrupted run had at its end, its
    tokenizer, and loads with the library's own loaders."""
    from cauchylin_hf.predict import predict_values

    kept, model = runs["kept"], runs["first"].model
    loaded = CauchyLMForCausalLM.from_pretrained(kept).eval()
    ntok = NumericTokenizer.from_pretrained(kept)
    assert ntok.num_token_id == loaded.config.num_token_id == model.config.num_token_id
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        want, got = model.eval()(ids), loaded(ids)
    for name in ("loc_S", "loc_Y", "scale_Y"):
        torch.testing.assert_close(getattr(got, name), getattr(want, name), rtol=0, atol=0)
    prompts = ["3 boxes of 7 eggs hold ", "9 boxes of 2 eggs hold "]
    got_pred, want_pred = (
        predict_values(loaded, ntok, prompts),
        predict_values(model, ntok, prompts),
    )
    assert torch.isfinite(got_pred.median).all()
    torch.testing.assert_close(got_pred.median, want_pred.median, rtol=0, atol=0)
    state = json.loads((kept / "trainer_state.json").read_text())
    assert state["global_step"] == STOP


def test_save_total_limit_keeps_the_newest(tmp_path):
    kept = _run(tmp_path / "two", max_steps=8, save_steps=2, save_total_limit=2)
    every = _run(tmp_path / "all", max_steps=8, save_steps=2)
    assert kept.global_step == every.global_step == 8
    assert [checkpoint_step(p) for p in list_checkpoints(tmp_path / "two")] == [6, 8]
    assert [checkpoint_step(p) for p in list_checkpoints(tmp_path / "all")] == [2, 4, 6, 8]
    assert last_checkpoint(tmp_path / "two") == tmp_path / "two" / "checkpoint-8"


def test_the_final_model_is_saved_beside_the_checkpoints(tmp_path):
    result = _run(tmp_path / "out", max_steps=4, save_steps=2, save=True)
    names = {p.name for p in (tmp_path / "out").iterdir()}
    assert {"checkpoint-2", "checkpoint-4", "model.safetensors", "config.json"} <= names
    again = CauchyLMForCausalLM.from_pretrained(tmp_path / "out")
    ids = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        torch.testing.assert_close(again(ids).loc_S, result.model.eval()(ids).loc_S)


def test_a_cut_off_checkpoint_is_not_resumed_from(tmp_path):
    """A checkpoint folder without trainer_state.json (the Trainer writes it last) was cut off
    by Ctrl-C or a kill: the latest complete one is taken."""
    for step, complete in ((4, True), (6, False)):
        (tmp_path / f"checkpoint-{step}").mkdir()
        if complete:
            (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    assert resolve_resume_checkpoint(True, tmp_path) == str(tmp_path / "checkpoint-4")
    with pytest.raises(ValueError, match=r"holds no trainer_state\.json"):
        resolve_resume_checkpoint(tmp_path / "checkpoint-6", tmp_path)


def test_resuming_with_no_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"no complete checkpoint .* to resume from"):
        _run(tmp_path, resume_from_checkpoint=True)
    with pytest.raises(ValueError, match="does not exist"):
        _run(tmp_path, resume_from_checkpoint=tmp_path / "checkpoint-3")
    with pytest.raises(ValueError, match="save_steps must be a positive int"):
        _run(tmp_path, save_steps=0)


def test_warmup_ratio_is_the_share_of_the_steps_in_the_running_transformers():
    """``warmup_ratio`` (the CLI's --warmup-ratio) reaches the Trainer in whatever field the
    installed release has; the warm-up it gives is ceil(ratio * steps), 1 included."""
    for ratio, steps, want in ((0.05, 200, 10), (0.25, 10, 3), (1.0, 7, 7), (0.0, 9, 0)):
        args = make_training_arguments("out", warmup_ratio=ratio, max_steps=steps)
        assert args.get_warmup_steps(steps) == want, ratio
    with pytest.raises(ValueError, match="warmup_ratio must be a number in"):
        make_training_arguments("out", warmup_ratio=1.5)


def _rows(n: int) -> list[str]:
    return [f"width {w}, area {2 * w + w % 3}." for w in range(1, n + 1)]


def test_a_resume_that_would_calibrate_on_trained_rows_is_refused(tmp_path):
    """The texts held out to calibrate on are the run's: a resume with another seed or more
    rows would hold out others, which the run trained on before its checkpoint."""
    texts = _rows(120)  # 120 distinct texts: "auto" holds out 24
    options = dict(save_steps=2, max_steps=4, calibration="auto", readouts=False)
    first = _run(tmp_path, **options, callbacks=[_StopAt(2)], train_texts=texts)
    assert first.global_step == 2 and first.calibration_size == 24
    for changed in ({"seed": 4}, {"train_texts": _rows(150)}):
        with pytest.raises(ValueError, match="texts the run trained on would be calibrated on"):
            _run(
                tmp_path,
                **options,
                **{"train_texts": texts, **changed},
                resume_from_checkpoint=True,
            )
    assert [checkpoint_step(p) for p in list_checkpoints(tmp_path)] == [2]  # nothing trained
    record = tmp_path / "checkpoint-2" / "calibration_holdout.json"
    kept = record.read_bytes()
    for damaged in ("{oops", None):  # a damaged record, or a folder in its place
        record.unlink()
        if damaged is None:
            record.mkdir()
        else:
            record.write_text(damaged)
        # the checkpoint's own check (every JSON file read whole) or the record's reader
        with pytest.raises(
            ValueError,
            match=r"calibration_holdout\.json (is not valid JSON|cannot be read)|calibration texts cannot",
        ):
            _run(tmp_path, **options, train_texts=texts, resume_from_checkpoint=True)
    record.rmdir()
    record.write_bytes(kept)
    # without a hold-out it would train on the 24 held-out texts too: other training rows
    with pytest.raises(ValueError, match="train_rows: 96 then, 120 now"):
        _run(
            tmp_path,
            **{**options, "calibration": None},
            train_texts=texts,
            seed=4,
            resume_from_checkpoint=tmp_path / "checkpoint-2",
        )
    # with the run's seed and rows it resumes
    second = _run(tmp_path, **options, train_texts=texts, resume_from_checkpoint=True)
    assert second.global_step == 4 and second.calibration_size == 24
    from cauchylin_hf.training import HOLDOUT_FILE  # (the record, after the behaviour)

    record = json.loads((tmp_path / "checkpoint-2" / HOLDOUT_FILE).read_text())
    assert record["held_out"] == 24 and record["rows"] == 120 and record["seed"] == 3


def _resume_from_kept(runs, tmp_path, model, ntok, **kw):
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copytree(runs["kept"], folder / f"checkpoint-{STOP}")
    options = dict(max_steps=STEPS, batch_size=4, progress=False, save=False)
    options.update(evaluate=False, readouts=False, calibration=None)
    return folder, lambda: train(
        model,
        ntok,
        _texts(),
        output_dir=folder,
        save_steps=2,
        resume_from_checkpoint=True,
        **{**options, **kw},
    )


def test_a_resume_into_a_model_of_another_size_says_what_differs(runs, tmp_path, monkeypatch):
    """Refused before the texts are encoded, not a size-mismatch traceback after it."""
    import cauchylin_hf.trainer as trainer

    torch.manual_seed(0)
    base = tiny_base_model("qwen2", seed=0, hidden_size=64)
    model, ntok = CauchyLMForCausalLM.from_base(
        base, tiny_tokenizer(), return_tokenizer=True, freeze_backbone=False
    )
    encoded = []
    monkeypatch.setattr(trainer, "as_numeric_dataset", lambda *a, **k: encoded.append(a))
    _, resume = _resume_from_kept(runs, tmp_path, model, ntok)
    with pytest.raises(CheckpointError, match="holds the weights of another model") as caught:
        resume()
    assert "in the checkpoint" in str(caught.value) and "here" in str(caught.value)
    assert encoded == []


def test_a_resume_with_another_set_of_trained_parameters_says_so(runs, tmp_path):
    model, ntok = _model()
    model.set_backbone_trainable(False)  # the checkpoint's run trained the backbone
    _, resume = _resume_from_kept(runs, tmp_path, model, ntok)
    with pytest.raises(CheckpointError, match=r"the model trains \d+ now"):
        resume()


def test_a_resume_with_other_training_rows_says_so(runs, tmp_path):
    model, ntok = _model()
    folder, _ = _resume_from_kept(runs, tmp_path, model, ntok)
    with pytest.raises(CheckpointError, match="train_rows: 12 then, 8 now"):
        train(
            model,
            ntok,
            _texts()[:8],
            output_dir=folder,
            max_steps=STEPS,
            batch_size=4,
            save_steps=2,
            resume_from_checkpoint=True,
            progress=False,
            save=False,
            evaluate=False,
            readouts=False,
            calibration=None,
        )


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"batch_size": 2}, "batch_size: 4 then, 2 now"),
        ({"gradient_accumulation_steps": 2}, "gradient_accumulation_steps: 1 then, 2 now"),
        ({"texts": [t.replace("eggs", "cups") for t in _texts()]}, "train_texts: "),
    ],
)
def test_a_resume_with_other_batches_or_texts_of_the_same_count_says_so(
    runs, tmp_path, change, expected
):
    model, ntok = _model()
    folder, _ = _resume_from_kept(runs, tmp_path, model, ntok)
    options = dict(max_steps=STEPS, batch_size=4, save_steps=2, resume_from_checkpoint=True)
    options.update(progress=False, save=False, evaluate=False, readouts=False, calibration=None)
    texts = change.pop("texts", _texts())
    with pytest.raises(CheckpointError, match=expected):
        train(model, ntok, texts, output_dir=folder, **{**options, **change})


@pytest.mark.parametrize("name", ["config.json", "model.safetensors", "optimizer.pt"])
def test_checkpoint_files_cannot_replace_the_checkpoints_own(tmp_path, name):
    with pytest.raises(ValueError, match="is a file the checkpoint itself is made of"):
        _run(tmp_path / "run", save_steps=2, checkpoint_files={name: "{}"})


@pytest.mark.parametrize("name", ["/tmp/outside.json", "../outside.json", "a/b.json", ""])
def test_checkpoint_files_are_plain_names_written_inside_the_checkpoint(tmp_path, name):
    with pytest.raises(ValueError, match="is not a plain file name"):
        _run(tmp_path / "run", save_steps=2, checkpoint_files={name: "{}"})
    assert not (tmp_path / "outside.json").exists() and not (tmp_path / "run").exists()


def test_a_kill_while_the_tokenizer_is_written_leaves_no_file_cut_off(tmp_path):
    """The Trainer wrote trainer_state.json before the callback runs: a kill while the callback
    writes must not leave a cut-off tokenizer.json in a checkpoint that counts as complete."""
    from cauchylin_hf.training import CheckpointFilesCallback, make_training_arguments
    from transformers import TrainerControl, TrainerState

    class Killed:
        def save_pretrained(self, folder):
            (Path(folder) / "tokenizer.json").write_text('{"model": {"vocab"')
            raise KeyboardInterrupt

    (tmp_path / "checkpoint-3").mkdir()
    (tmp_path / "checkpoint-3" / "trainer_state.json").write_text('{"global_step": 3}')
    callback = CheckpointFilesCallback(Killed(), {"data_format.json": "{}"})
    with pytest.raises(KeyboardInterrupt):
        callback.on_save(
            make_training_arguments(tmp_path), TrainerState(global_step=3), TrainerControl()
        )
    assert not (tmp_path / "checkpoint-3" / "tokenizer.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-3"]


def test_a_checkpoint_without_the_holdout_record_resumes_with_a_warning(tmp_path, caplog):
    """A checkpoint of an earlier release has no record of the hold-out: say it is unchecked."""
    from cauchylin_hf.training import HOLDOUT_FILE

    texts = _rows(120)
    options = dict(save_steps=2, max_steps=4, calibration="auto", readouts=False)
    _run(tmp_path, **options, callbacks=[_StopAt(2)], train_texts=texts)
    (tmp_path / "checkpoint-2" / HOLDOUT_FILE).unlink()
    with caplog.at_level("WARNING", logger="cauchylin_hf.training"):
        done = _run(tmp_path, **options, train_texts=texts, resume_from_checkpoint=True)
    assert done.global_step == 4
    assert any(
        HOLDOUT_FILE in r.getMessage() and "cannot be checked" in r.getMessage()
        for r in caplog.records
    )
