"""What a benchmark ran on: the CPU model, the memory allocator, the thread count, the versions.

Every script prints :func:`describe` in its header and stores :func:`machine_info` in its JSON, so
a number can be compared with one taken elsewhere (a ratio measured on a 2-core AMD EPYC VM with
glibc's allocator need not hold on a 56-core Xeon with jemalloc).
"""

from __future__ import annotations

import os
import platform

import torch

# glibc settings that keep freed memory in the heap for reuse instead of returning it to the
# operating system (which makes the next large tensor page-fault in again): the behaviour of
# jemalloc, tcmalloc and the CUDA caching allocator.
KEEP_FREED_MEMORY = {
    "MALLOC_MMAP_THRESHOLD_": "4294967296",
    "MALLOC_TRIM_THRESHOLD_": "4294967296",
}


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (``platform.processor()`` elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_count() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def allocator() -> str:
    """The C allocator in use: a preloaded jemalloc/tcmalloc, or glibc with its ``MALLOC_*`` settings."""
    preload = os.environ.get("LD_PRELOAD", "")
    for name in ("jemalloc", "tcmalloc", "mimalloc"):
        if name in preload:
            return f"{name} (LD_PRELOAD)"
    tuned = [f"{k}={os.environ[k]}" for k in sorted(os.environ) if k.startswith("MALLOC_")]
    if tuned:
        return "glibc malloc, keeps freed memory (" + " ".join(tuned) + ")"
    return "glibc malloc (default settings: large freed blocks go back to the OS)"


def machine_info(device: str = "cpu") -> dict[str, object]:
    """The description stored in every script's JSON."""
    info: dict[str, object] = {
        "cpu": cpu_model(),
        "cpus": cpu_count(),
        "threads": torch.get_num_threads(),
        "allocator": allocator(),
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "python": platform.python_version(),
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def describe(device: str = "cpu", with_allocator: bool = True) -> str:
    """One line for a script's header and its figures' footnotes."""
    i = machine_info(device)
    where = f"GPU {i['gpu']}, " if "gpu" in i else ""
    alloc = f"{i['allocator']}, " if with_allocator else ""
    return (
        f"{where}CPU {i['cpu']} ({i['cpus']} visible, {i['cpu_capability']}), "
        f"{i['threads']} torch thread(s), {alloc}torch {i['torch']}"
    )
