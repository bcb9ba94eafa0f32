"""The one place that decides on which device cauchylin, its adapter, scripts and tests run.

An *available* accelerator, else the CPU. A CUDA build of torch on a machine without a GPU (the
build ``pip install torch`` gives by default, also on CPU machines) *names* CUDA as its
accelerator: ``torch.accelerator.current_accelerator()`` is ``device('cuda')`` there, and a
process group, a device mesh or a tensor put on it fails ("Found no NVIDIA driver"). Only
``check_available=True`` (or ``torch.cuda.is_available()``) says whether the device can be used.
"""

from __future__ import annotations

import torch

__all__ = ["available_device"]


def available_device() -> torch.device:
    """The accelerator that can be used now (CUDA, ROCm, MPS, XPU, ...), else the CPU.

    ``torch.accelerator.current_accelerator(check_available=True)``: the build's accelerator
    only when a device of it is present and usable. A CUDA build of torch without a GPU gives
    the CPU (``current_accelerator()`` without the check would name CUDA). Every place of
    cauchylin that picks a device asks this function; pass a device explicitly to override it.

    Returns:
        The device type (no index; the current device of that type), e.g. ``device('cuda')``
        or ``device('cpu')``.

    Example:
        >>> import torch, cauchylin
        >>> cauchylin.available_device().type in ("cpu", "cuda", "mps", "xpu", "hpu", "mtia")
        True
        >>> cauchylin.available_device() == torch.device("cpu") or torch.accelerator.is_available()
        True
    """
    accelerator = getattr(torch, "accelerator", None)
    current = getattr(accelerator, "current_accelerator", None)
    if accelerator is not None and current is not None:
        try:
            device = current(check_available=True)
        except TypeError:  # pragma: no cover - a torch whose function has no check_available
            device = current() if accelerator.is_available() else None
        return device if device is not None else torch.device("cpu")
    # pragma: no cover - a torch without torch.accelerator
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
