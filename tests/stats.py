"""Tolerances for statistical tests, derived from a stated false-failure rate.

Every Monte Carlo comparison in the suite uses one of these bounds, so that a correct
implementation fails a test with probability at most ``FALSE_FAILURE_RATE`` (per test, with a
union bound over everything the test checks).
"""

from __future__ import annotations

import math

FALSE_FAILURE_RATE = 1e-6


def dkw_epsilon(n: int, delta: float = FALSE_FAILURE_RATE) -> float:
    """Dvoretzky-Kiefer-Wolfowitz: P(sup_x |F_n(x) - F(x)| > eps) <= 2 exp(-2 n eps^2) = delta."""
    return math.sqrt(math.log(2.0 / delta) / (2.0 * n))


def binomial_epsilon(n: int, delta: float = FALSE_FAILURE_RATE) -> float:
    """Hoeffding for a mean of n Bernoulli draws: P(|p_hat - p| > eps) <= 2 exp(-2 n eps^2)."""
    return math.sqrt(math.log(2.0 / delta) / (2.0 * n))


def split_delta(count: int, delta: float = FALSE_FAILURE_RATE) -> float:
    """Per-check failure budget when a test makes ``count`` checks (union bound)."""
    return delta / max(count, 1)
