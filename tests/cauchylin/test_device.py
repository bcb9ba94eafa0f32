"""The device cauchylin picks: an *available* accelerator, else the CPU.

A CUDA build of torch on a machine without a GPU (what ``pip install torch`` installs by default,
also on CPU machines) names CUDA as its accelerator; ``torch.accelerator.current_accelerator()``
returns ``device('cuda')`` there and only ``check_available=True`` says it cannot be used. The
simulation below reproduces exactly that answer on any machine.
"""

from __future__ import annotations

import pytest
import torch

import cauchylin


def simulate_cuda_build_without_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch as a CUDA build answers on a machine without a GPU (measured on torch 2.15.0+cu132):
    ``current_accelerator()`` is ``device('cuda')``, ``current_accelerator(check_available=True)``
    is ``None``, and nothing is available."""

    def current_accelerator(check_available: bool = False) -> torch.device | None:
        return None if check_available else torch.device("cuda")

    monkeypatch.setattr(torch.accelerator, "current_accelerator", current_accelerator)
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


def test_a_cuda_build_without_a_gpu_never_selects_cuda(monkeypatch):
    simulate_cuda_build_without_gpu(monkeypatch)
    assert torch.accelerator.current_accelerator() == torch.device("cuda")  # the trap
    assert cauchylin.available_device() == torch.device("cpu")


def test_an_available_accelerator_is_selected(monkeypatch):
    monkeypatch.setattr(
        torch.accelerator, "current_accelerator", lambda check_available=False: torch.device("cuda")
    )
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    assert cauchylin.available_device() == torch.device("cuda")


def test_the_real_torch_of_this_environment():
    """Unpatched: CUDA exactly when torch can use a GPU here (a CUDA build without one: CPU)."""
    device = cauchylin.available_device()
    assert (device.type == "cuda") == torch.cuda.is_available()
    if not torch.accelerator.is_available():
        assert device == torch.device("cpu")
