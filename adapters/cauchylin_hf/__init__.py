"""cauchylin_hf: turn any Hugging Face decoder into a causal language model with numbers.

The model: one-vs-rest Cauchy decisions over the tokens plus a Cauchy regression channel for the
numbers in the text (the formulas: the documentation page "The causal decision model",
``docs/concepts.md``).

Importing the package registers the model with the Auto classes (``model_type="cauchy_lm"``), so
``AutoConfig``/``AutoModelForCausalLM``/``AutoModel.from_pretrained`` load saved causal models.

The public API (names from other submodules load on first use):

* :class:`CauchyLMConfig`, :class:`CauchyLMForCausalLM`, :class:`CauchyLMOutput` — the model;
  ``CauchyLMForCausalLM.from_base(path_or_model, tokenizer)`` attaches the heads to a base,
  ``model.save_heads(folder)``/``CauchyLMForCausalLM.from_heads(folder)`` keep only the new
  layers;
* :func:`verify`, :class:`VerifyReport` — the initialisation-equivalence report;
* :class:`NumericTokenizer` — numbers become ``<NUM>`` plus ``numeric_values``;
* :class:`NumericDataset`, :class:`NumericDataCollator` — training data;
* :mod:`cauchylin_hf.testing` — tiny base models for tests and demos.
"""

from __future__ import annotations

import importlib
from typing import Any

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from .config import CauchyLMConfig
from .model import CauchyLMForCausalLM
from .outputs import CauchyLMOutput

# After this import the package attribute ``verify`` is the function (the submodule stays
# importable as ``cauchylin_hf.verify`` through ``sys.modules``).
from .verify import VerifyReport, verify

AutoConfig.register(CauchyLMConfig.model_type, CauchyLMConfig, exist_ok=True)
AutoModelForCausalLM.register(CauchyLMConfig, CauchyLMForCausalLM, exist_ok=True)
AutoModel.register(CauchyLMConfig, CauchyLMForCausalLM, exist_ok=True)

# name -> submodule, imported on first attribute access (keeps `import cauchylin_hf` light and
# independent of modules that are optional or still growing).
_LAZY = {
    "NumericTokenizer": "tokenizer",
    "NumericDataset": "data",
    "NumericDataCollator": "data",
}

__all__ = [
    "CauchyLMConfig",
    "CauchyLMForCausalLM",
    "CauchyLMOutput",
    "NumericDataCollator",
    "NumericDataset",
    "NumericTokenizer",
    "VerifyReport",
    "verify",
]


def __getattr__(name: str) -> Any:
    """Import lazily exported names (PEP 562)."""
    if name in _LAZY:
        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
