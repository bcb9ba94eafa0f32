"""cauchylin_hf: turn any Hugging Face decoder into a causal language model with numbers.

The model: one-vs-rest Cauchy decisions over the tokens plus a Cauchy regression channel for the
numbers in the text (the formulas: the documentation page "The causal decision model",
``docs/concepts.md``).

Once the package is imported, ``AutoConfig``/``AutoModelForCausalLM``/``AutoModel.from_pretrained``
load saved causal models (``model_type="cauchy_lm"``): the classes are registered with transformers'
Auto classes when those are imported, before ``import cauchylin_hf`` or after it.

``import cauchylin_hf`` itself imports neither torch nor transformers: each public name is imported
from its submodule on first use, so the modules that need neither (the console script's checks,
:mod:`cauchylin_hf.app.checks`) import without them. The public API:

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

from typing import TYPE_CHECKING

from cauchylin._lazy import lazy_package

from .auto_classes import register_on_import

if TYPE_CHECKING:
    from .config import CauchyLMConfig
    from .data import NumericDataCollator, NumericDataset
    from .model import CauchyLMForCausalLM
    from .outputs import CauchyLMOutput
    from .tokenizer import NumericTokenizer
    from .verify import VerifyReport, verify

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

# ``cauchylin_hf.verify`` is the function; the submodule of that name stays importable as
# ``import cauchylin_hf.verify`` / ``from cauchylin_hf.verify import ...``.
__getattr__, __dir__ = lazy_package(
    __name__,
    {
        "CauchyLMConfig": "config",
        "CauchyLMForCausalLM": "model",
        "CauchyLMOutput": "outputs",
        "NumericTokenizer": "tokenizer",
        "NumericDataset": "data",
        "NumericDataCollator": "data",
        "VerifyReport": "verify",
        "verify": "verify",
    },
)

register_on_import()
