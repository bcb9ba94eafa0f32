"""Shared test configuration.

Hypothesis runs derandomised (a fixed sequence of examples) whenever ``CI`` is set, so a CI run
can never flake; locally it explores new examples each run. Statistical tests fix their seeds and
derive tolerances from a stated false-failure rate (see ``tests/stats.py``).
"""

import os

import torch
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=40,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "dev",
    deadline=None,
    max_examples=40,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

# Two cores: keep torch from oversubscribing when pytest-xdist runs two workers.
torch.set_num_threads(1)
