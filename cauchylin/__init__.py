"""cauchylin: exact Cauchy-vector algebra, Pyro distributions and causal decision heads.

The public API:

* :class:`CauchyVector`, :func:`cat`, :func:`kl_divergence` — the exact algebra;
* :mod:`cauchylin.distributions` — Pyro distributions (``IndependentCauchy``, ``OvR``);
* :mod:`cauchylin.nn` — ``NumericEmbedding``, ``Abduction``, ``Action`` and the inference modes;
* :mod:`cauchylin.losses` — the OvR loss (plain and memory-efficient) and the gated regression;
* :mod:`cauchylin.value_space` — the space in which the regression value is Cauchy, and back;
* :mod:`cauchylin.metrics` — the monitoring metrics (statistics of ``U``, the OvR probability
  sums, rank correlation, interval coverage, the PIT's distance from uniform);
* :func:`set_validate_args`, :func:`validation` — switch argument validation;
  :class:`BroadcastError` — shapes that do not broadcast (a ``ValueError`` and a ``RuntimeError``);
* :func:`available_device` — the device cauchylin picks: an available accelerator, else the CPU.

``import cauchylin`` imports no submodule: each name above is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cauchylin._lazy import lazy_package

if TYPE_CHECKING:
    from cauchylin import (  # noqa: F401  (submodules as attributes)
        distributions,
        losses,
        metrics,
        nn,
        value_space,
    )
    from cauchylin._device import available_device
    from cauchylin._validation import BroadcastError, set_validate_args, validation
    from cauchylin.vector import CauchyVector, cat, kl_divergence

__version__ = "0.1.0.dev0"

__all__ = [
    "BroadcastError",
    "CauchyVector",
    "__version__",
    "available_device",
    "cat",
    "kl_divergence",
    "set_validate_args",
    "validation",
]

# Each name is imported from its submodule on first use, so that a submodule without torch
# (``cauchylin.nn.mode_names``) imports without it.
__getattr__, __dir__ = lazy_package(
    __name__,
    {
        "BroadcastError": "_validation",
        "CauchyVector": "vector",
        "available_device": "_device",
        "cat": "vector",
        "kl_divergence": "vector",
        "set_validate_args": "_validation",
        "validation": "_validation",
    },
    submodules=("distributions", "losses", "metrics", "nn", "value_space"),
)
