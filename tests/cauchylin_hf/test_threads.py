"""The torch thread count chosen from the free cores (command line and ``train``)."""

from __future__ import annotations

import logging
import os

import pytest
import torch
from cauchylin_hf import threads
from cauchylin_hf.model import CauchyLMForCausalLM
from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
from cauchylin_hf.threads import fit_threads, free_cores
from cauchylin_hf.training import train
from transformers import TrainerCallback


@pytest.fixture
def machine(monkeypatch):
    """Sets the cores and load average ``fit_threads`` sees; torch's count is restored after."""
    monkeypatch.setattr(threads, "_said", set())
    monkeypatch.setattr(threads, "_kept", [])
    before = torch.get_num_threads()

    def set_machine(cores: int, load: float, torch_threads: int) -> None:
        monkeypatch.setattr(threads, "free_cores", lambda: (cores, load))
        torch.set_num_threads(torch_threads)

    yield set_machine
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("cores", "load", "torch_threads", "chosen"),
    [
        (2, 0.3, 2, 2),  # idle: torch's count stays
        (2, 0.9, 2, 1),  # about one core busy
        (2, 8.7, 2, 1),  # far more load than cores: at least 1
        (16, 3.2, 16, 13),
        (16, 3.2, 4, 4),  # never raised (OMP_NUM_THREADS, an earlier set_num_threads)
    ],
)
def test_threads_fit_the_free_cores(machine, cores, load, torch_threads, chosen):
    machine(cores, load, torch_threads)
    choice = fit_threads()
    assert (choice.threads, torch.get_num_threads()) == (chosen, chosen)
    assert choice.lowered == choice.first == (chosen < torch_threads)


def test_a_given_count_wins_and_a_lowering_is_said_once(machine):
    machine(2, 8.7, 2)
    assert fit_threads(2).threads == 2 and torch.get_num_threads() == 2
    assert not fit_threads(2).first
    assert fit_threads().first
    torch.set_num_threads(2)
    again = fit_threads()
    assert again.lowered and not again.first and torch.get_num_threads() == 1
    with pytest.raises(ValueError, match="threads"):
        fit_threads(0)


def test_free_cores_reads_affinity_or_cpu_count_and_the_load(monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (1.5, 0.0, 0.0))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert free_cores() == (3, 1.5)
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 5)

    def no_load():
        raise OSError("no load average here")

    monkeypatch.setattr(os, "getloadavg", no_load)
    assert free_cores() == (5, 0.0)


class _Threads(TrainerCallback):
    def __init__(self) -> None:
        self.seen: set[int] = set()

    def on_step_end(self, args, state, control, **kwargs):
        self.seen.add(torch.get_num_threads())


def _train(tmp_path, **kwargs):
    torch.manual_seed(0)
    model, ntok = CauchyLMForCausalLM.from_base(
        tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True
    )
    spy = _Threads()
    texts = ["3 boxes of 12 eggs hold 36 eggs.", "2 boxes of 6 eggs hold 12 eggs."] * 4
    train(
        model, ntok, texts, None, tmp_path, max_steps=2, batch_size=4, progress=False,
        save=False, calibration=None, callbacks=[spy], **kwargs,
    )  # fmt: skip
    return spy.seen


def test_train_uses_the_free_cores_says_so_once_and_restores(machine, tmp_path, caplog):
    machine(2, 1.2, 2)
    with caplog.at_level(logging.WARNING, logger="cauchylin_hf.training"):
        assert _train(tmp_path) == {1}
        assert torch.get_num_threads() == 2  # restored
        assert _train(tmp_path) == {1}
    said = [r.getMessage() for r in caplog.records if "torch thread" in r.getMessage()]
    assert said == [
        "using 1 torch thread, not 2: only about 1 of 2 cores are free (load 1.2); "
        "train(threads=N) chooses another number"
    ]
    assert _train(tmp_path, threads=2) == {2}


def test_a_count_given_for_the_process_is_kept_by_the_trainings_it_runs(machine, tmp_path):
    """``--threads 2`` on a busy machine: the command's trainings keep 2 threads."""
    machine(2, 8.7, 1)
    assert fit_threads(2, for_process=True).threads == 2
    assert _train(tmp_path) == {2}
    assert fit_threads(None, for_process=True).threads == 1  # the next command fits again
    torch.set_num_threads(2)
    assert _train(tmp_path) == {1}
