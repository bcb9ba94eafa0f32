r"""``Abduction``: the individual representation ``U ~ Cauchy(loc_U, scale_U)`` inferred from features.

``loc_U = W_loc z + b_loc`` and ``scale_U = softplus(W_scale z + b_scale)``, initialised so that
``loc_U = z`` and ``scale_U = gamma_init`` everywhere (:func:`inverse_softplus` gives the bias).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from cauchylin._special import working_dtype
from cauchylin._validation import positive_int
from cauchylin.vector import CauchyVector

__all__ = ["Abduction", "inverse_softplus"]


def inverse_softplus(gamma: float) -> float:
    r"""``softplus^{-1}(gamma) = log(exp(gamma) - 1)``, computed stably in float64.

    Evaluated as ``gamma + log(-expm1(-gamma))``, which neither overflows for large ``gamma``
    (``exp(1e4)`` would) nor cancels for small ones (``exp(1e-6) - 1`` would lose half the
    digits).

    Args:
        gamma: the target value of ``softplus``, finite and ``> 0``.

    Returns:
        ``x`` with ``log(1 + exp(x)) == gamma`` to float64 rounding.

    Raises:
        ValueError: ``gamma`` is not a finite positive number.

    Example:
        >>> from cauchylin.nn import inverse_softplus
        >>> round(inverse_softplus(10.0), 6), round(inverse_softplus(1e-6), 4)
        (9.999955, -13.8155)
    """
    try:
        g = float(gamma)
    except (TypeError, ValueError):
        raise ValueError(f"gamma must be a finite positive number, got {gamma!r}") from None
    if not math.isfinite(g) or g <= 0.0:
        raise ValueError(f"gamma must be a finite positive number, got {gamma!r}")
    return g + math.log(-math.expm1(-g))


def _best_bias(gamma: float, dtype: torch.dtype) -> float:
    """The value of ``dtype`` nearest ``softplus^-1(gamma)`` whose ``softplus`` is closest to gamma.

    ``softplus^-1`` is computed in float64 and rounded to ``dtype``; the few neighbouring
    representable values are then tried with torch's own ``softplus`` in that dtype (the one the
    forward pass uses) and the best is kept. This removes the extra rounding of the bias, so
    ``scale_U`` after initialisation is ``gamma`` to the rounding of ``dtype`` wherever that value
    is reachable. Everything runs on the CPU, so parameters on any device (``meta`` included) can
    be filled with the result.
    """
    x = torch.tensor(inverse_softplus(gamma), dtype=torch.float64, device="cpu")
    work = working_dtype(torch.empty(0, dtype=dtype))
    best = x.to(work)
    if work not in (torch.float32, torch.float64):
        return float(best)
    candidates = [best]
    up = torch.tensor(math.inf, dtype=work, device="cpu")
    down = torch.tensor(-math.inf, dtype=work, device="cpu")
    lo = hi = best
    for _ in range(4):
        lo = torch.nextafter(lo, down)
        hi = torch.nextafter(hi, up)
        candidates += [lo, hi]
    cand = torch.stack(candidates)
    err = (torch.nn.functional.softplus(cand).to(torch.float64) - gamma).abs()
    # Ties go to the first candidate: the correctly rounded inverse.
    return float(cand[int(torch.argmin(err))])


class Abduction(nn.Module):
    r"""Abduction network: infers the individual representation ``U ~ Cauchy(loc_U, scale_U)``.

    .. math::

        \mathrm{loc}_U = W_\mathrm{loc} z + b_\mathrm{loc}, \qquad
        \mathrm{scale}_U = \operatorname{softplus}(W_\mathrm{scale} z + b_\mathrm{scale})

    Initialisation: ``W_loc = I``, ``b_loc = 0``, ``W_scale = 0``,
    ``b_scale = softplus^-1(gamma_init)`` (:func:`inverse_softplus`, stable for any
    ``gamma_init`` from ``1e-6`` to ``1e4`` and beyond). Right after it, ``loc_U == z`` exactly
    (an identity GEMM is exact in IEEE arithmetic) and ``scale_U`` is the same constant
    ``softplus(b_scale) = gamma_init`` (to the parameter dtype's rounding) at every position.

    When ``in_features != causal_size`` the location weight is the rectangular identity
    ``eye(causal_size, in_features)``: the first ``min(C, H)`` coordinates of ``z`` are copied and,
    when ``C > H``, the remaining ``C - H`` coordinates of ``loc_U`` start at 0.

    ``scale_U`` is floored at the smallest normal number of its dtype (``torch.finfo.tiny``) so
    that it stays strictly positive even where ``softplus`` underflows; this changes nothing for
    any value above the floor.

    **Why the default differs from the language model's.** ``gamma_init`` is a width in the
    units of ``z``, which the layer does not know; its default, 10, is the model's structural
    one (a wide, uncommitted ``U`` before training). Where the layer is used the value was
    measured and is passed explicitly: ``gamma_init=0.01`` for the causal language model on a
    pretrained decoder's hidden states (:class:`cauchylin_hf.CauchyLMConfig`; with 10 the
    regression scale starts far above the targets' spread and the head collapses to a constant,
    see the documentation's training page, "Numbers: the defaults and why"), ``gamma_init=1``
    for the scikit-learn estimators on standardised features.

    Args:
        in_features: ``H``, the width of ``z``.
        causal_size: ``C``, the width of ``U``.
        gamma_init: the initial constant scale ``gamma_0`` (default 10.0).
        device: device of the parameters.
        dtype: dtype of the parameters (keep float32 or float64; half-precision inputs are
            computed in float32).

    Attributes:
        loc_net: ``nn.Linear(in_features, causal_size)``.
        scale_net: ``nn.Linear(in_features, causal_size)``.

    Raises:
        ValueError: non-positive sizes, or ``gamma_init`` that is not finite and ``> 0``.

    Example:
        >>> import torch
        >>> from cauchylin.nn import Abduction
        >>> abd = Abduction(4, 4, gamma_init=10.0)
        >>> z = torch.randn(2, 3, 4)
        >>> U = abd(z)
        >>> bool(torch.equal(U.loc, z)), round(U.scale[0, 0, 0].item(), 4)
        (True, 10.0)
    """

    def __init__(
        self,
        in_features: int,
        causal_size: int,
        *,
        gamma_init: float = 10.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        positive_int("in_features", in_features)
        positive_int("causal_size", causal_size)
        inverse_softplus(gamma_init)  # validates gamma_init, raising a ValueError
        self.in_features = in_features
        self.causal_size = causal_size
        self.gamma_init = float(gamma_init)
        self.loc_net = nn.Linear(in_features, causal_size, device=device, dtype=dtype)
        self.scale_net = nn.Linear(in_features, causal_size, device=device, dtype=dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Apply the identity / constant-scale initialisation described in the class docstring.

        ``W_loc = eye(C, H)``, ``b_loc = 0``, ``W_scale = 0`` and ``b_scale`` the value of the
        parameter dtype whose ``softplus`` is nearest ``gamma_init``.

        Example:
            >>> import torch
            >>> from cauchylin.nn import Abduction
            >>> abd = Abduction(3, 3, gamma_init=2.0)
            >>> with torch.no_grad():
            ...     _ = abd.loc_net.weight.add_(1.0)
            >>> abd.reset_parameters()
            >>> U = abd(torch.tensor([[1.0, -2.0, 3.0]]))
            >>> U.loc.tolist(), U.scale.tolist()  # loc_U = z and scale_U = gamma_init again
            ([[1.0, -2.0, 3.0]], [[2.0, 2.0, 2.0]])
        """
        w = self.loc_net.weight
        with torch.no_grad():
            w.copy_(torch.eye(self.causal_size, self.in_features, dtype=w.dtype, device=w.device))
            self.loc_net.bias.zero_()
            self.scale_net.weight.zero_()
            bias = self.scale_net.bias
            bias.fill_(_best_bias(self.gamma_init, bias.dtype))

    def forward(self, z: torch.Tensor) -> CauchyVector:
        """Infer ``U`` from the features.

        Args:
            z: ``[..., H]`` features (any float dtype; ``bfloat16``/``float16`` are cast to the
                layer's dtype, float32 by default, before the linear maps).

        Returns:
            :class:`~cauchylin.CauchyVector` of shape ``[..., C]`` with independent components
            (a leaf), ``loc = W_loc z + b_loc`` and ``scale = softplus(W_scale z + b_scale)``.

        Raises:
            ValueError: ``z`` is not a floating tensor with last dimension ``H``; or (while
                validating) ``z`` produces a non-finite location.

        Example:
            >>> import torch
            >>> from cauchylin.nn import Abduction
            >>> U = Abduction(8, 8, gamma_init=1.0)(torch.randn(2, 8, dtype=torch.bfloat16))
            >>> U.shape, U.dtype, round(U.scale[0, 0].item(), 4)
            (torch.Size([2, 8]), torch.float32, 1.0)
        """
        if not isinstance(z, torch.Tensor) or not z.is_floating_point() or z.ndim < 1:
            raise ValueError("z must be a floating-point tensor of shape [..., in_features]")
        if z.shape[-1] != self.in_features:
            raise ValueError(
                f"z has last dimension {z.shape[-1]}, expected in_features {self.in_features} "
                f"(z shape {tuple(z.shape)})"
            )
        dtype = working_dtype(self.loc_net.weight)
        x = z.to(dtype)

        def lin(layer: nn.Linear) -> torch.Tensor:
            return nn.functional.linear(x, layer.weight.to(dtype), layer.bias.to(dtype))

        loc = lin(self.loc_net)
        scale = nn.functional.softplus(lin(self.scale_net))
        scale = scale.clamp_min(torch.finfo(dtype).tiny)
        return CauchyVector(loc, scale)

    def extra_repr(self) -> str:
        """The settings shown in the module's ``repr``.

        Returns:
            ``"in_features=H, causal_size=C, gamma_init=..."``.
        """
        return (
            f"in_features={self.in_features}, causal_size={self.causal_size}, "
            f"gamma_init={self.gamma_init}"
        )
