"""The devices a device-parametrised test runs on: the CPU always, CUDA where a GPU is present.

``DEVICES`` parametrises a test over ``"cpu"`` and ``"cuda"``; the CUDA case carries the ``cuda``
marker (``pytest -m cuda`` selects exactly the GPU cases, as ``scripts/gpu_check.sh`` does) and
is skipped unless :func:`cauchylin.available_device` is a CUDA device -- never on a CUDA build
of torch without a GPU.
"""

from __future__ import annotations

import pytest

from cauchylin import available_device

HAS_CUDA = available_device().type == "cuda"

CUDA = pytest.param(
    "cuda",
    marks=[pytest.mark.cuda, pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")],
    id="cuda",
)

DEVICES = ["cpu", CUDA]
"""``@pytest.mark.parametrize("device", DEVICES)``: the CPU and (where present) a CUDA GPU."""

requires_cuda = [pytest.mark.cuda, pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")]
"""``pytestmark = requires_cuda`` (or each mark as a decorator): a test for the GPU only."""
