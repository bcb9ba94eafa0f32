"""The names of the inference modes: strings only, importable without torch.

The one place where the names are spelled. :mod:`cauchylin.nn.modes` gives each its record
(:data:`cauchylin.nn.modes.MODE_TABLE`), in the order of :data:`MODE_NAMES`; the formulas are on
the documentation's [Inference modes][inference-modes-page] page. This file imports nothing, so that a
command line can list and check the names before it loads torch.

Example:
    >>> MODE_NAMES[:2]
    ('causal', 'standard')
"""

__all__ = [
    "CAUSAL",
    "COMPATIBLE",
    "INDIVIDUAL",
    "MODE_NAMES",
    "SAMPLING",
    "SHARED_INDIVIDUAL",
    "SHARED_NOISE",
    "STANDARD",
]

CAUSAL = "causal"
"""Name of the causal mode: no exogenous noise."""
STANDARD = "standard"
"""Name of the standard mode, the training mode: the noise widens ``U'``."""
SAMPLING = "sampling"
"""Name of the sampling mode: one noise draw per step shifts ``U'``."""
COMPATIBLE = "compatible"
"""Name of the compatible mode: ``loc_S`` as logits, tokens sampled from their softmax."""
INDIVIDUAL = "individual"
"""Name of the individual mode: one individual drawn per step."""
SHARED_INDIVIDUAL = "shared_individual"
"""Name of the shared-individual mode: one individual (``eps_seed``) for a whole sequence."""
SHARED_NOISE = "shared_noise"
"""Name of the shared-noise mode: one noise draw (``eps_noise``) for a whole sequence."""

MODE_NAMES: tuple[str, ...] = (
    CAUSAL,
    STANDARD,
    SAMPLING,
    COMPATIBLE,
    INDIVIDUAL,
    SHARED_INDIVIDUAL,
    SHARED_NOISE,
)
"""Every mode's name, in the order of :data:`cauchylin.nn.MODES`."""
