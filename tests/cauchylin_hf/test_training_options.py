"""Each training option is declared once (``cauchylin_hf.training_options.CauchyOptions``): the
command line's ``train`` options, the fields of ``CauchyTrainingArguments`` and the parameters of
``train()`` are read from it or agree with it, by name and default."""

from __future__ import annotations

import dataclasses
import inspect

from cauchylin_hf.app import cli
from cauchylin_hf.app import parser as cli_parser
from cauchylin_hf.training import train
from cauchylin_hf.training_args import CauchyTrainingArguments
from cauchylin_hf.training_options import CauchyOptions
from transformers import TrainingArguments

OPTIONS = {f.name: f for f in dataclasses.fields(CauchyOptions)}
ARGUMENTS = {f.name: f for f in dataclasses.fields(CauchyTrainingArguments)}
# train()'s parameters that are not options: what it reads, writes and adds around the trainer
WRAPPER = {
    "model", "tokenizer", "train_texts", "eval_texts", "output_dir", "checkpoint_dir",
    "batch_size", "progress", "save", "evaluate", "eval_before", "callbacks",
    "training_args",
}  # fmt: skip


def _default(f: dataclasses.Field) -> object:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _train_actions() -> dict[str, object]:
    parser = cli_parser.build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    actions = [a for a in commands["train"]._actions if a.option_strings]
    names = [name for a in actions for name in a.option_strings]
    assert len(names) == len(set(names))
    return {name: a for a in actions for name in a.option_strings}


def test_every_flag_of_an_option_is_generated_from_its_declaration():
    actions = _train_actions()
    flagged = {name: f for name, f in OPTIONS.items() if "flag" in f.metadata}
    assert {"max_steps", "learning_rate", "calibration", "readouts"} <= set(flagged)
    for name, f in flagged.items():
        flag = f.metadata["flag"]
        action = actions[flag.name]
        assert action.dest == flag.dest
        own = dict(flag.settings)
        if flag.negate:  # a switch that turns the option off
            assert (action.default, action.const) == (False, True) and _default(f) is True
        else:
            assert action.default == own.get("default", _default(f)), name
        if "help" not in own:
            assert action.help == f.metadata["help"], name


def test_no_train_option_is_declared_in_the_console_script_too():
    generated = {f.metadata["flag"].name for f in OPTIONS.values() if "flag" in f.metadata}
    written = {name for flag in cli_parser._FLAGS if "train" in flag.on for name in flag.names}
    assert generated and not generated & written
    # and the options the command line gives are read from the declaration
    args = cli_parser.build_parser().parse_args(["train", "m", "--data", "t.txt"])
    settings = cli._train_settings(args, 10)
    assert set(settings) <= set(inspect.signature(train).parameters) | set(ARGUMENTS)
    for name in ("max_steps", "num_train_epochs", "learning_rate", "calibration", "readouts"):
        assert settings[name] == _default(OPTIONS[name]), name


def test_the_arguments_class_inherits_the_options_without_declaring_them_again():
    own = set(vars(CauchyTrainingArguments).get("__annotations__", {}))
    assert not own & set(OPTIONS)
    for name, f in OPTIONS.items():
        assert _default(ARGUMENTS[name]) == _default(f), name
    assert set(ARGUMENTS) == set(OPTIONS) | {f.name for f in dataclasses.fields(TrainingArguments)}


def test_the_parameters_of_train_agree_with_the_declarations():
    parameters = inspect.signature(train).parameters
    unknown = [p for p in parameters if p not in OPTIONS and p not in ARGUMENTS]
    assert set(unknown) == WRAPPER - {"output_dir"}  # output_dir: a field too, another meaning
    for name, p in parameters.items():
        if name in OPTIONS:
            assert p.default == _default(OPTIONS[name]), name
        elif name in ARGUMENTS and name != "output_dir":
            assert p.default == _default(ARGUMENTS[name]), name
    # batch_size is the Trainer's per-device batch, progress its tqdm switch
    assert parameters["batch_size"].default == _default(ARGUMENTS["per_device_train_batch_size"])
