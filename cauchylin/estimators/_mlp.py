r"""The network inside the estimators: a feature MLP, then :class:`~cauchylin.nn.Abduction`, then
:class:`~cauchylin.nn.Action`.

.. math::

    z = \mathrm{MLP}(x), \qquad
    U \sim \mathrm{Cauchy}(W_\mathrm{loc} z + b_\mathrm{loc},\
        \operatorname{softplus}(W_\mathrm{scale} z + b_\mathrm{scale})), \qquad
    S = W_\mathrm{cls} U' + b_\mathrm{cls}, \quad Y = W_\mathrm{reg} U' + b_\mathrm{reg}

where ``U'`` is the decision input of the inference mode (see :mod:`cauchylin.nn`). The MLP is a
stack of ``Linear`` + activation layers; with no hidden layer ``z = x`` and the location of ``U``
is a linear function of the input.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from cauchylin._validation import one_of
from cauchylin.nn import Abduction, Action, ActionOutput
from cauchylin.vector import CauchyVector

__all__ = ["ACTIVATIONS", "CausalMLP"]

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
}
"""The hidden-layer activations by name."""


class CausalMLP(nn.Module):
    """``x -> MLP -> Abduction -> Action``: a small network with the causal decision heads.

    Args:
        in_features: width of the input ``x``.
        hidden_layer_sizes: widths of the hidden layers (empty: no hidden layer, ``z = x``).
        num_classes: ``V``, rows of the classification head (1 for a regressor, whose class head
            is then unused).
        causal_size: ``C``, width of ``U`` (``None``: the width of ``z``).
        activation: a key of :data:`ACTIVATIONS`.
        gamma_init: initial ``scale_U`` of the abduction.
        b_noise_init: initial exogenous noise ``b_noise`` of the action.
        threshold: the OvR threshold ``tau_k`` of the class scores.
        dtype: parameter dtype.

    Raises:
        ValueError: an unknown activation or a non-positive width (and the layers' own checks).

    Example:
        >>> import torch
        >>> from cauchylin.estimators._mlp import CausalMLP
        >>> net = CausalMLP(3, (8,), num_classes=2, gamma_init=1.0, threshold=0.0)
        >>> out = net(torch.randn(5, 3))  # standard mode
        >>> out.loc_S.shape, out.loc_Y.shape
        (torch.Size([5, 2]), torch.Size([5]))
    """

    def __init__(
        self,
        in_features: int,
        hidden_layer_sizes: Sequence[int],
        num_classes: int,
        *,
        causal_size: int | None = None,
        activation: str = "relu",
        gamma_init: float = 1.0,
        b_noise_init: float = 0.1,
        threshold: float = 0.0,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        one_of("activation", activation, sorted(ACTIVATIONS))
        layers: list[nn.Module] = []
        width = in_features
        for size in hidden_layer_sizes:
            if not isinstance(size, int) or size < 1:
                raise ValueError(f"hidden_layer_sizes must hold positive ints, got {size!r}")
            layers += [nn.Linear(width, size, dtype=dtype), ACTIVATIONS[activation]()]
            width = size
        self.features = nn.Sequential(*layers)
        c = width if causal_size is None else causal_size
        self.abduction = Abduction(width, c, gamma_init=gamma_init, dtype=dtype)
        self.action = Action(
            c, num_classes, threshold=threshold, b_noise_init=b_noise_init, dtype=dtype
        )

    def abduct(self, x: torch.Tensor) -> CauchyVector:
        """The individual representation ``U = Abduction(MLP(x))``.

        Args:
            x: ``[N, in_features]``.

        Returns:
            :class:`~cauchylin.CauchyVector` ``[N, C]`` with independent components.

        Example:
            >>> import torch
            >>> from cauchylin.estimators._mlp import CausalMLP
            >>> CausalMLP(3, (8,), num_classes=1).abduct(torch.randn(5, 3)).shape
            torch.Size([5, 8])
        """
        return self.abduction(self.features(x))

    def forward(
        self,
        x: torch.Tensor,
        mode: str = "standard",
        temperature: float = 1.0,
        *,
        generator: torch.Generator | None = None,
        eps_seed: torch.Tensor | None = None,
        eps_noise: torch.Tensor | None = None,
    ) -> ActionOutput:
        """The decision distributions of a mode for a batch of inputs.

        Args:
            x: ``[N, in_features]``.
            mode: an inference mode of :data:`cauchylin.nn.MODES`.
            temperature: ``T >= 0``.
            generator: optional ``torch.Generator`` for the random modes.
            eps_seed: the fixed draw of ``shared_individual``.
            eps_noise: the fixed draw of ``shared_noise``.

        Returns:
            :class:`cauchylin.nn.ActionOutput` with ``S [N, V]`` and ``Y [N, 1]``.
        """
        U = self.abduct(x)
        return self.action(
            U, mode, temperature, generator=generator, eps_seed=eps_seed, eps_noise=eps_noise
        )
