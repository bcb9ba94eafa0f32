"""The step budget chosen on rows held out of training (:mod:`cauchylin_hf.step_choice`): which
rows are held out, what a step's score is, and that the second run is a run on every row stopped at the
chosen step."""

from __future__ import annotations

import random

import datasets
import pytest
import torch
from cauchylin_hf import step_choice
from cauchylin_hf.app import parser as cli_parser
from cauchylin_hf.data.streaming import LazyNumericDataset
from cauchylin_hf.holdout import example_key
from cauchylin_hf.model import CauchyLMForCausalLM
from cauchylin_hf.predict import number_metrics, number_predictions
from cauchylin_hf.readouts import solve_readouts
from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
from cauchylin_hf.tokenizer import NumericTokenizer
from cauchylin_hf.trainer import CauchyTrainer
from cauchylin_hf.training_args import CauchyTrainingArguments
from safetensors.torch import save_file
from transformers import PrinterCallback, TrainerCallback


def _texts(n: int, seed: int) -> list[str]:
    """Distinct rows of two fields whose last number follows the first."""
    rng = random.Random(seed)
    return [f"width {a} area {3 * a + rng.randint(0, 9)}" for a in rng.sample(range(1, 5000), n)]


def _model():
    torch.manual_seed(0)
    base = tiny_base_model("qwen2", seed=0)
    return CauchyLMForCausalLM.from_base(base, tiny_tokenizer(), return_tokenizer=True)


def _trainer(tmp_path, texts, shift: float = 0.0, **options) -> CauchyTrainer:
    model, ntok = _model()
    with torch.no_grad():  # a model that starts elsewhere
        for p in model.parameters():
            p.add_(shift)
    settings = {"max_steps": 10, "learning_rate": 1e-2, "seed": 3, "step_choice": "auto"}
    settings.update(options)
    args = CauchyTrainingArguments(
        str(tmp_path), per_device_train_batch_size=8, disable_tqdm=True, **settings
    )
    trainer = CauchyTrainer(model, args=args, train_dataset=texts, processing_class=ntok)
    trainer.remove_callback(PrinterCallback)
    return trainer


def _keys(ds) -> set:
    return {example_key(ds[i]) for i in range(len(ds))}


def test_the_validation_rows_are_neither_trained_nor_calibrated_on(tmp_path):
    trainer = _trainer(tmp_path, _texts(200, 1))  # "auto": 40 calibrated on, 24 of 160 to choose
    train, valid, calib = (
        trainer.train_dataset,
        trainer.validation_dataset,
        trainer.calibration_dataset,
    )
    assert (len(train), len(valid), len(calib)) == (136, 24, 40)
    assert step_choice.validation_size(160, "auto") == 24
    assert not _keys(train) & _keys(valid)
    assert not _keys(valid) & _keys(calib)
    assert not _keys(train) & _keys(calib)
    trainer.train()
    # the readouts read the validation rows too: the network never trained on them
    assert _keys(trainer.readout_data) == _keys(train) | _keys(valid)
    assert sorted(trainer.step_choice.choice.scores) == list(range(1, 11))


def _recorded_run(tmp_path, texts):
    """A run without the choice, and its trainable parameters after every step."""
    plain = _trainer(tmp_path, texts, step_choice=None)

    class Record(TrainerCallback):
        def __init__(self):
            self.params = {}

        def on_step_end(self, args, state, control, **kwargs):
            self.params[state.global_step] = {
                n: p.detach().clone() for n, p in plain.model.named_parameters()
            }

    record = Record()
    plain.add_callback(record)
    plain.train()
    return plain, record.params


@pytest.mark.parametrize("best", [6, 10])
def test_the_second_run_is_a_run_on_every_row_stopped_at_the_chosen_step(
    tmp_path, monkeypatch, best
):
    """Same start, seed, schedule and rows as a run without the choice: its network at the
    chosen step, parameter for parameter (the validation rows trained on too)."""
    texts = _texts(200, 1)
    plain, steps = _recorded_run(tmp_path / "plain", texts)
    trainer = _trainer(tmp_path / "choice", texts)
    scripted = {k: 2.0 + abs(k - best) for k in range(1, 11)}
    scripted[3] = scripted[best]  # a tie with an earlier step keeps the later one
    monkeypatch.setattr(
        trainer.step_choice,
        "score",
        lambda: step_choice.Score(scripted[trainer.state.global_step], 0.0),
    )
    out = trainer.train()
    assert trainer.step_choice.choice.scores == scripted
    assert trainer.step_choice.choice.chosen == best
    assert out.global_step == best and trainer.choosing_history[-1]["step"] == 10
    assert _keys(trainer.train_dataset) == _keys(plain.train_dataset)  # 136 + 24 rows
    assert len(trainer.train_dataset) == 160 and len(trainer.readout_data) == 160
    kept = dict(trainer.model.named_parameters())
    for name, value in steps[best].items():
        assert torch.equal(kept[name], value), name
    if best < 10:
        assert any(not torch.equal(kept[n], v) for n, v in steps[10].items())
    sentence = trainer.step_choice.choice.sentence()
    assert sentence.startswith(f"trained again on every row for {best} of 10 steps: the latest")


def test_a_step_is_scored_by_the_median_error_of_the_last_numbers_in_their_units(tmp_path):
    """The score against predict.py's own target errors, with the readouts solved alike."""
    texts = _texts(200, 1)
    trainer = _trainer(tmp_path, texts, max_steps=3)
    trainer.train()
    model, ntok = trainer.model, trainer.numeric_tokenizer
    model.double()  # both paths in float64: in float32 they differ by the batches' padding
    score, spread = trainer.step_choice.score()
    # the same readouts, solved again, and the validation rows read by number_predictions
    solve_readouts(model, ntok, trainer.step_choice.train_rows, seed=3)
    valid = trainer.validation_dataset
    by_key = {example_key(e): t for e, t in zip(_encoded(ntok, texts), texts, strict=True)}
    held = [by_key[example_key(valid[i])] for i in range(len(valid))]
    metrics = number_metrics(number_predictions(model, ntok, held))
    assert metrics["target/count"] == len(valid) == 24
    assert score == pytest.approx(metrics["target/mdae"], rel=1e-9)
    assert score > 0 and spread > 0


def _encoded(ntok, texts):
    from cauchylin_hf.data import NumericDataset

    ds = NumericDataset.from_texts(texts, ntok)
    return [ds[i] for i in range(len(ds))]


@pytest.mark.parametrize(
    ("options", "why"),
    [
        ({"readouts": False}, "no readouts"),
        ({"step_choice": None}, "off"),
        ({"step_choice": CauchyTrainingArguments("x").step_choice}, "train()'s default"),
        ({"step_choice": 0.0}, "0"),
    ],
)
def test_nothing_is_held_out_to_choose_on_when_asked_not_to(tmp_path, options, why):
    trainer = _trainer(tmp_path, _texts(200, 1), **options)
    assert trainer.validation_dataset is None and trainer.step_choice is None, why
    assert len(trainer.train_dataset) == 160


def test_a_small_table_keeps_every_row_to_train_on():
    # 40 rows: 15% is 6 rows, below the 8 a choice needs
    assert step_choice.validation_size(40, "auto") == 0
    assert step_choice.validation_size(60, "auto") == 9


@pytest.mark.parametrize("bad", ["best", 1.0, -0.1, True])
def test_a_bad_step_choice_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match="step_choice"):
        step_choice.validation_share(100, bad)


def test_the_command_line_refuses_a_bad_step_choice(capsys):
    with pytest.raises(SystemExit):
        cli_parser.build_parser().parse_args(
            ["train", "--data", "x.csv", "--output-dir", "o", "--step-choice", "2"]
        )
    assert "--step-choice: expected auto or a share in [0, 1) (0: keep the last step)" in (
        capsys.readouterr().err
    )


def test_a_sample_of_a_split_of_a_column_is_held_out_once():
    hf = datasets.Dataset.from_dict({"text": [f"x {i} y {2 * i}." for i in range(300)]})
    whole = LazyNumericDataset(hf, NumericTokenizer(tiny_tokenizer(300)))
    train, calib = whole.split_held_out(60, seed=0)
    kept, valid = train.split_sample(30, seed=1)
    rows = lambda ds: set(ds.rows(range(len(ds))))  # noqa: E731
    assert len(valid) == 30 and len(kept) == len(train) - 30
    assert rows(kept) | rows(valid) == rows(train)
    assert not rows(kept) & rows(valid) and not rows(valid) & rows(calib)
    # the examples are the rows' own
    assert example_key(valid[0]) == example_key(whole[valid.rows([0])[0]])
    with pytest.raises(ValueError, match="leaves none to train on"):
        train.split_sample(len(train))
    with pytest.raises(ValueError, match="split_sample splits"):
        calib.split_sample(1)


def test_a_resumed_run_trains_the_network_an_uninterrupted_run_trains(tmp_path, monkeypatch):
    """The best step (3) comes before the checkpoint the run resumes from (5): the checkpoint
    carries the scores so far and the parameters the run started from (the resumed run is
    given a model that started elsewhere, as one built afresh may)."""
    scripted = {1: 5.0, 2: 4.0, 3: 1.0, 4: 3.0, 5: 2.5, 6: 2.0, 7: 3.0, 8: 4.0, 9: 9.0, 10: 6.0}
    texts = _texts(200, 1)

    def run(folder, resume=None, moved=False):
        shift = 0.01 if moved else 0.0
        trainer = _trainer(folder, texts, shift, save_steps=5, resume_from_checkpoint=resume)
        monkeypatch.setattr(
            trainer.step_choice,
            "score",
            lambda: step_choice.Score(scripted[trainer.state.global_step], 0.2),
        )
        trainer.train()
        return trainer

    whole = run(tmp_path / "whole")
    resumed = run(tmp_path / "cut", resume=None)
    resumed = run(tmp_path / "cut", resume=str(tmp_path / "cut" / "checkpoint-5"), moved=True)
    assert resumed.resumed_step == 5
    assert whole.step_choice.choice.chosen == resumed.step_choice.choice.chosen == 3
    assert resumed.step_choice.choice.scores == scripted
    a, b = dict(whole.model.named_parameters()), dict(resumed.model.named_parameters())
    for name, value in a.items():
        assert torch.equal(value, b[name]), name


def test_a_checkpoint_of_other_parameters_is_refused(tmp_path):
    trainer = _trainer(tmp_path, _texts(200, 1), save_steps=5)
    trainer.train()
    folder = tmp_path / "checkpoint-5"
    other = {"not.a.parameter": torch.zeros(2)}
    save_file(other, str(folder / step_choice.CHOICE_WEIGHTS_FILE))
    with pytest.raises(ValueError, match="starting values of other trainable parameters"):
        trainer.step_choice.resume_from(folder)


def test_the_command_line_chooses_the_step_when_asked(tmp_path, capsys):
    from cauchylin_hf.app import cli

    rows = _texts(120, 4)
    table = tmp_path / "t.csv"
    table.write_text(
        "width,area\n" + "".join(f"{r.split()[1]},{r.split()[3]}\n" for r in rows), "utf-8"
    )
    threads = torch.get_num_threads()
    printed = {}
    try:
        for choice in ([], ["--step-choice", "auto"]):
            argv = ["train", "--from-config", "qwen2-tiny", "--data", str(table), "--output-dir"]
            argv += [str(tmp_path / str(len(choice))), "--max-steps", "2", "--threads", "1"]
            assert cli.main([*argv, *choice, "--no-progress"]) == 0
            printed[bool(choice)] = capsys.readouterr().out
    finally:
        torch.set_num_threads(threads)
    # 120 rows: 24 held out to calibrate on; asked, 14 of the other 96 to choose the step on
    assert "on 96 texts of" in printed[False] and "to choose" not in printed[False]
    again = "trained again on every row for "
    assert not any(line.startswith(again) for line in printed[False].splitlines())
    line = (
        f"on 96 texts of {table} (24 more held out to calibrate the intervals on; a first run "
        "holds 14 of them out to choose its steps on)"
    )
    assert line in printed[True]
    (kept,) = [line for line in printed[True].splitlines() if line.startswith(again)]
    assert "of 2 steps: the latest of 2 scored steps within a standard error of the best" in kept
    assert "the last numbers of the 14 rows held out (median absolute error" in kept


def test_the_latest_step_within_a_standard_error_of_the_best_is_kept():
    """The one-standard-error rule, read towards more training: step 6 (1.4) is within the
    best's 1.0 + 0.5; step 7 (1.6) is not; a later, better step moves the band with it."""
    choice = step_choice.StepChoice()
    for step, score in ((1, 3.0), (2, 1.0), (3, 2.0), (6, 1.4), (7, 1.6)):
        choice.add(step, step_choice.Score(score, 0.5))
    assert (choice.best(), choice.chosen) == (2, 6)
    choice.add(8, step_choice.Score(0.2, 0.1))  # a new best: 1.4 is far outside its band
    choice.add(9, step_choice.Score(0.35, 0.1))
    assert (choice.best(), choice.chosen) == (8, 8)
    choice.add(10, step_choice.Score(float("nan"), float("nan")))  # nothing read: never kept
    assert choice.chosen == 8


@pytest.mark.parametrize("n", [15, 57])
def test_the_spread_is_the_standard_error_of_the_median(n):
    """Against Monte Carlo: 4000 samples of n exponential errors. The relative standard error
    of the sampled standard deviation is 1/sqrt(2 * 4000) = 1.1%; 6% is 5.3 of them, a
    false-failure rate below 1e-6."""
    g = torch.Generator().manual_seed(n)
    x = torch.empty(4000, n, dtype=torch.float64).exponential_(1.0, generator=g)
    medians = x.quantile(0.5, dim=1)
    spreads = torch.tensor([step_choice.median_and_spread(row).spread for row in x])
    assert float(spreads.mean() / medians.std()) == pytest.approx(1.0, abs=0.06)
    assert step_choice.median_and_spread(x[0]).mdae == pytest.approx(float(medians[0]))
