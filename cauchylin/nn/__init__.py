r"""Model-agnostic layers of the causal decision model: embedding, Abduction, Action, modes.

The forward pass, for any feature tensor ``z`` of shape ``[..., H]``:

* :class:`NumericEmbedding` (:mod:`cauchylin.nn.embedding`) —
  ``e = base_embed + sign(v) ln(1 + |v|) w_num``;
* :class:`Abduction` (:mod:`cauchylin.nn.abduction`) —
  ``U ~ Cauchy(W_loc z + b_loc, softplus(W_scale z + b_scale))``, a
  :class:`~cauchylin.CauchyVector` of shape ``[..., C]``;
* :class:`Action` (:mod:`cauchylin.nn.action`) — the decision input ``U'`` of the chosen inference
  mode, the class scores ``S = W_cls U' + b_cls`` (``[..., V]``) and the regression value
  ``Y = W_reg U' + b_reg`` (``[..., 1]``), all in closed form;
* the inference modes (:mod:`cauchylin.nn.modes`): one record per mode (its decision input, its
  draws, its next-token rule), :data:`MODES`, :func:`effective_mode`, the draws and the
  compatible mode's sampler.

Every name is importable from ``cauchylin.nn`` as well as from its submodule; ``cauchylin.nn``
imports a submodule when one of its names is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cauchylin._lazy import lazy_package

if TYPE_CHECKING:
    from cauchylin.nn.abduction import Abduction, inverse_softplus
    from cauchylin.nn.action import Action, ActionOutput, ActionStep
    from cauchylin.nn.embedding import NumericEmbedding
    from cauchylin.nn.modes import (
        MODES,
        InferenceMode,
        draw_eps_noise,
        draw_eps_seed,
        effective_mode,
        sample_compatible,
    )

__all__ = [
    "MODES",
    "Abduction",
    "Action",
    "ActionOutput",
    "ActionStep",
    "InferenceMode",
    "NumericEmbedding",
    "draw_eps_noise",
    "draw_eps_seed",
    "effective_mode",
    "inverse_softplus",
    "sample_compatible",
]

__getattr__, __dir__ = lazy_package(
    __name__,
    {
        "Abduction": "abduction",
        "inverse_softplus": "abduction",
        "Action": "action",
        "ActionOutput": "action",
        "ActionStep": "action",
        "NumericEmbedding": "embedding",
        **dict.fromkeys(
            (
                "MODES",
                "InferenceMode",
                "draw_eps_noise",
                "draw_eps_seed",
                "effective_mode",
                "sample_compatible",
            ),
            "modes",
        ),
    },
)
