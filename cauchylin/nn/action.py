r"""``Action``: the decision input of a mode, then the linear class-score and regression heads.

``S = W_cls U' + b_cls`` (``[..., V]``) and ``Y = W_reg U' + b_reg`` (``[..., 1]``) in closed form,
``U'`` the decision input of the inference mode (the rules are in :mod:`cauchylin.nn.modes`), and
the one-vs-rest probabilities ``P_k = P(S_k > tau_k)``. :meth:`Action.forward` returns the
distributions (:class:`ActionOutput`), :meth:`Action.step` one generation step (:class:`ActionStep`)
and :meth:`Action.loss` the training objective.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from cauchylin import losses
from cauchylin._fused_heads import head_scores
from cauchylin._special import working_dtype
from cauchylin._validation import finite_number, integer, positive_int
from cauchylin.levels import CALIBRATION_LEVELS
from cauchylin.nn.modes import (
    STANDARD,
    Decoding,
    InferenceMode,
    check_temperature,
    get_mode,
)
from cauchylin.nn.readouts import (
    MAX_CONTEXT_TOKENS,
    ContextReadouts,
    context_codes,
)
from cauchylin.value_space import (
    IDENTITY,
    check_value_space,
    from_value_space,
    to_value_space,
    value_quantiles,
)
from cauchylin.vector import CauchyVector

__all__ = ["Action", "ActionOutput", "ActionStep"]

_F32_MAX = float(torch.finfo(torch.float32).max)

# Per Action module: the detached heads in the compute dtype and |W_cls| of Action.step, each
# reused while its weight is unchanged (see Action._cached).
_STEP_CACHE: weakref.WeakKeyDictionary[nn.Module, dict[str, tuple[Any, torch.Tensor]]] = (
    weakref.WeakKeyDictionary()
)


@dataclass
class ActionOutput:
    r"""The decision distributions returned by :meth:`Action.forward`.

    Attributes:
        S: class scores, :class:`~cauchylin.CauchyVector` ``[..., V]`` (``None`` only when a
            caller builds an output without the classification head).
        Y: regression value, :class:`~cauchylin.CauchyVector` ``[..., 1]``.
        threshold: the OvR thresholds ``tau`` (``[]`` or ``[V]``) used by the probabilities.
        mode: the mode that ran (see :func:`~cauchylin.nn.effective_mode`).
        temperature: the temperature ``T`` it ran with (the softmax temperature in compatible
            mode).
        U_prime: the decision input ``U'`` (``[..., C]``), e.g. to read the drawn individual.
        value_space: the space ``t = g(y)`` in which ``Y`` is Cauchy (see
            :mod:`cauchylin.value_space`); :meth:`value_median` and :meth:`value_quantile` map
            back to the numbers' units.

    The method examples below read one output built by hand: three classes with
    ``loc_S = (1, 0, -1)``, ``scale_S = 1`` and threshold 0, so ``z = (1, 0, -1)`` and
    ``P = 1/2 + atan(z)/pi = (0.75, 0.5, 0.25)``:

    Example:
        >>> import torch
        >>> from cauchylin import CauchyVector
        >>> from cauchylin.nn import Action, ActionOutput
        >>> out = Action(3, 5, threshold=0.0)(CauchyVector(torch.zeros(2, 3), torch.ones(2, 3)))
        >>> out.loc_S.shape, out.loc_Y.shape, round(out.normalised_ovr_probs()[0].sum().item(), 4)
        (torch.Size([2, 5]), torch.Size([2]), 1.0)
        >>> S = CauchyVector(torch.tensor([[1.0, 0.0, -1.0]]), torch.ones(1, 3))
        >>> out = ActionOutput(S, Y=S[..., :1], threshold=torch.tensor(0.0))  # as in the methods
        >>> out.ovr_probs()
        tensor([[0.7500, 0.5000, 0.2500]])
    """

    S: CauchyVector | None
    Y: CauchyVector
    threshold: torch.Tensor
    mode: str = STANDARD
    temperature: float = 1.0
    U_prime: CauchyVector | None = None
    value_space: str = IDENTITY

    def _scores(self) -> CauchyVector:
        if self.S is None:
            raise ValueError("this ActionOutput carries no class scores S")
        return self.S

    @property
    def loc_S(self) -> torch.Tensor:
        """``[..., V]`` locations of the class scores: ``W_cls loc_U' + b_cls``."""
        return self._scores().loc

    @property
    def scale_S(self) -> torch.Tensor:
        """``[..., V]`` scales of the class scores: ``|W_cls| scale_U'``."""
        return self._scores().scale

    @property
    def logits(self) -> torch.Tensor:
        """``loc_S``, the logits of the compatible mode (equal to a copied base head's logits)."""
        return self.loc_S

    @property
    def loc_Y(self) -> torch.Tensor:
        """``[...]`` location of the regression value (the regression prediction)."""
        return self.Y.loc[..., 0]

    @property
    def scale_Y(self) -> torch.Tensor:
        """``[...]`` scale of the regression value."""
        return self.Y.scale[..., 0]

    def value_median(self) -> torch.Tensor:
        """``[...]`` the median of the predicted number, ``g^{-1}(loc_Y)`` in its own units.

        Returns:
            float32 (float64 for float64 heads) tensor of the batch shape.

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> from cauchylin.nn import ActionOutput
            >>> Y = CauchyVector(torch.tensor([[2.0]]), torch.tensor([[0.1]]))
            >>> out = ActionOutput(None, Y, torch.tensor(0.0), value_space="signed_log1p")
            >>> out.value_median()  # e^2 - 1
            tensor([6.3891])
        """
        return from_value_space(self.loc_Y, self.value_space)

    def value_quantile(self, q: torch.Tensor | float) -> torch.Tensor:
        """Quantiles of the predicted number, exact: ``g^{-1}(loc_Y + scale_Y tan(pi (q - 1/2)))``.

        Args:
            q: probabilities in ``[0, 1]`` (a float or a tensor broadcastable with ``loc_Y``).

        Returns:
            The quantiles in the numbers' units.

        Raises:
            ValueError: ``q`` outside ``[0, 1]``.

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> from cauchylin.nn import ActionOutput
            >>> Y = CauchyVector(torch.tensor([[3.0]]), torch.tensor([[2.0]]))
            >>> out = ActionOutput(None, Y, torch.tensor(0.0))  # identity value space
            >>> out.value_quantile(0.25), out.value_quantile(0.75)  # loc -+ scale
            (tensor([1.]), tensor([5.]))
        """
        return value_quantiles(self.loc_Y, self.scale_Y, q, self.value_space)

    def ovr_log_probs(self) -> tuple[torch.Tensor, torch.Tensor]:
        r"""``(log P_k, log(1 - P_k))``, ``[..., V]`` each, with ``P_k = P(S_k > tau_k)``.

        ``P_k = 1/2 + atan((loc_S_k - tau_k)/scale_S_k)/pi``, evaluated in log space (accurate in
        float32 for standardised arguments up to ``1e30``).

        Returns:
            Two tensors of shape ``[..., V]``, both ``<= 0`` (float32 for half precision).

        Raises:
            ValueError: the output carries no class scores (``S`` is ``None``).

        Example:
            >>> S = CauchyVector(torch.tensor([[1.0, 0.0, -1.0]]), torch.ones(1, 3))
            >>> log_p, log_1mp = ActionOutput(S, S[..., :1], torch.tensor(0.0)).ovr_log_probs()
            >>> log_p.exp(), log_1mp.exp()  # P = 1/2 + atan(z)/pi at z = 1, 0, -1
            (tensor([[0.7500, 0.5000, 0.2500]]), tensor([[0.2500, 0.5000, 0.7500]]))
        """
        return self._scores().ovr_log_prob(self.threshold)

    def ovr_probs(self) -> torch.Tensor:
        """``[..., V]`` one-vs-rest probabilities ``P_k = P(S_k > tau_k)``.

        ``P_k = 1/2 + atan((loc_S_k - tau_k)/scale_S_k)/pi``; the classes are not normalised (their
        sum is any number in ``(0, V)``).

        Returns:
            Probabilities in ``[0, 1]``, shape ``[..., V]``.

        Raises:
            ValueError: the output carries no class scores (``S`` is ``None``).

        Example:
            >>> S = CauchyVector(torch.tensor([[1.0, 0.0, -1.0]]), torch.ones(1, 3))
            >>> ActionOutput(S, S[..., :1], torch.tensor(0.0)).ovr_probs()
            tensor([[0.7500, 0.5000, 0.2500]])
        """
        return self._scores().ovr_prob(self.threshold)

    def normalised_ovr_probs(self) -> torch.Tensor:
        r"""``[..., V]`` the OvR probabilities normalised to a distribution: ``P_k / sum_j P_j``.

        Computed as ``exp(log P_k - logsumexp_j log P_j)``, so it stays exact when every
        ``P_k`` is tiny; an alternative to the softmax of ``loc_S``.

        Returns:
            ``[..., V]`` probabilities that sum to 1 over the last dimension.

        Raises:
            ValueError: the output carries no class scores (``S`` is ``None``).

        Example:
            >>> S = CauchyVector(torch.tensor([[1.0, 0.0, -1.0]]), torch.ones(1, 3))
            >>> ActionOutput(S, S[..., :1], torch.tensor(0.0)).normalised_ovr_probs()  # P / 1.5
            tensor([[0.5000, 0.3333, 0.1667]])
        """
        log_p = self.ovr_log_probs()[0]
        return torch.softmax(log_p, dim=-1)

    def predict(self) -> torch.Tensor:
        """``LongTensor [...]``: the chosen token ids.

        ``argmax_k P_k`` (as ``argmax_k log P_k``) in every non-compatible mode; ``argmax_k loc_S``
        (greedy) in compatible mode. With per-class thresholds the two can differ.

        Returns:
            ``LongTensor`` of shape ``[...]`` (``S`` without its class dimension).

        Raises:
            ValueError: the output carries no class scores (``S`` is ``None``) or an unknown
                ``mode``.

        Example:
            >>> S = CauchyVector(torch.tensor([[1.0, 0.0, -1.0]]), torch.ones(1, 3))
            >>> C = torch.tensor([2.0, -2.0, 0.0])  # class 1: z = 2, the largest P
            >>> Y = S[..., :1]
            >>> ActionOutput(S, Y, C).predict(), ActionOutput(S, Y, C, mode="compatible").predict()
            (tensor([1]), tensor([0]))
        """
        if get_mode(self.mode).samples_logits:
            return self.loc_S.argmax(dim=-1)
        return self.ovr_log_probs()[0].argmax(dim=-1)

    def next_token(
        self,
        *,
        top_k: int | None = None,
        top_p: float | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """``LongTensor [...]``: the next token of a generation step in this output's mode.

        The mode's token rule (:meth:`~cauchylin.nn.modes.InferenceMode.choose`, the one
        :meth:`Action.step` uses): compatible mode samples ``softmax(loc_S / T)`` with
        ``top_k``/``top_p`` (greedy at ``T = 0``); the other modes take ``argmax_k P_k`` on the
        standardised scores ``(loc_S_k - tau_k) / scale_S_k`` (their randomness, if any, was drawn
        when ``U'`` was formed) and ignore the arguments.

        Args:
            top_k: compatible mode only: keep the ``k`` largest logits (``None``: all).
            top_p: compatible mode only: nucleus mass in ``(0, 1]`` (``None``: no filtering).
            generator: compatible mode only: optional ``torch.Generator`` for the draw.

        Returns:
            ``LongTensor`` of shape ``[...]``.

        Raises:
            ValueError: the output carries no class scores, or (compatible mode) a bad ``top_k``
                or ``top_p`` (see :func:`~cauchylin.nn.sample_compatible`).

        Example:
            >>> S = CauchyVector(torch.tensor([[1.0, 3.0, -1.0]]), torch.ones(1, 3))
            >>> out = ActionOutput(S, S[..., :1], torch.tensor(0.0), mode="compatible")
            >>> out.next_token(top_k=1, generator=torch.Generator().manual_seed(0))  # only id 1 kept
            tensor([1])
            >>> ActionOutput(S, S[..., :1], torch.tensor(0.0)).next_token()  # standard: argmax P
            tensor([1])
        """
        spec = get_mode(self.mode)
        return spec.choose(
            self.loc_S,
            None if spec.samples_logits else self.scale_S,
            self.threshold,
            self.temperature,
            top_k=top_k,
            top_p=top_p,
            generator=generator,
        )


@dataclass
class ActionStep:
    """One generation step of :meth:`Action.step`: the next tokens, their values, the scores.

    Attributes:
        ids: ``LongTensor [...]`` the next token of every row, by the mode's token rule.
        values: ``[...]`` float32 numeric value of each next token: the median number
            ``g^{-1}(loc_Y)`` of the value space (clamped to the float32 range, NaN read as 0)
            where the token is ``<NUM>``, else 0.
        loc_S: ``[..., V]`` class-score locations ``W_cls loc_U' + b_cls``.
        scale_S: ``[..., V]`` class-score scales ``|W_cls| scale_U'``; None when the mode's rule
            does not read them and ``return_distributions`` is off.
        loc_Y: ``[...]`` regression location ``W_reg loc_U' + b_reg`` (in the value space).
        scale_Y: ``[...]`` regression scale ``|W_reg| scale_U'`` (with ``return_distributions``,
            else None).
        U_prime: the decision input ``U'``.
        mode: the mode that ran (see :func:`~cauchylin.nn.effective_mode`).

    Example:
        >>> import torch
        >>> from cauchylin import CauchyVector
        >>> from cauchylin.nn import Action
        >>> step = Action(3, 5, threshold=0.0).step(CauchyVector(torch.zeros(2, 3), torch.ones(2, 3)))
        >>> step.ids.shape, step.loc_S.shape, step.mode
        (torch.Size([2]), torch.Size([2, 5]), 'standard')
    """

    ids: torch.Tensor
    values: torch.Tensor
    loc_S: torch.Tensor
    scale_S: torch.Tensor | None
    loc_Y: torch.Tensor
    scale_Y: torch.Tensor | None
    U_prime: CauchyVector
    mode: str


def _previous_tokens(labels: torch.Tensor) -> torch.Tensor:
    """The input tokens of a loss's positions: the label at ``i - 1`` (none before the start)."""
    prev = torch.full_like(labels, -101)  # the "no token" digit of context_codes
    prev[..., 1:] = labels[..., :-1]
    return prev


class Action(nn.Module):
    r"""Action network: exogenous noise, then linear classification and regression heads.

    .. math::

        S = W_\mathrm{cls} U' + b_\mathrm{cls} \in \mathbb{R}^V, \qquad
        Y = W_\mathrm{reg} U' + b_\mathrm{reg}, \qquad
        P_k = P(S_k > \tau_k) = \tfrac12 + \tfrac1\pi \arctan\frac{\mathrm{loc}_{S_k} - \tau_k}
        {\mathrm{scale}_{S_k}}

    where the decision input ``U'`` depends on the inference mode (see
    :mod:`cauchylin.nn.modes`; the formulas: the documentation's [Inference modes][inference-modes-page]
    page). Each marginal of ``S`` is a single GEMM (``scale_S = scale_U' @ |W_cls|.T``).

    Initialisation: ``W_cls`` the default ``nn.Linear`` init (copy a base
    head with :meth:`copy_base_head`), ``b_cls = 0``, ``W_reg ~ N(0, 1/C)`` (std ``1/sqrt(C)``),
    ``b_reg = 0``, ``b_noise = b_noise_init`` in every component, thresholds ``= threshold``.

    **Why these defaults differ from the language model's.** The layer knows nothing of the
    scale of its input, so its defaults are the model's structural ones (``threshold=100``:
    a class is chosen only with strong evidence; ``b_noise_init=0.1``; ``value_space="identity"``:
    targets as given). Where the layer is used, the right values were measured and are passed
    explicitly: the causal language model on a pretrained decoder
    (:class:`cauchylin_hf.CauchyLMConfig`: ``threshold=0``, so that ``P_k > 1/2`` exactly where
    the copied base logit ``loc_S`` is positive; ``b_noise_init=0.01``;
    ``value_space="signed_log1p"`` for numbers spread over orders of magnitude;
    ``readout_numbers=16``: the solved readouts read a table row's earlier columns; the
    measurements are on the documentation's training page,
    "Numbers: the defaults and why") and the
    scikit-learn estimators on standardised features (``threshold=0``, ``b_noise_init=0.1``).
    Building your own model, start from one of those and pass the values.

    Args:
        causal_size: ``C``.
        num_classes: ``V``, the number of rows of the classification head.
        threshold: initial OvR threshold ``tau_k`` (default 100.0).
        threshold_per_class: one threshold per class (shape ``[V]``) instead of a scalar (``[]``).
        learnable_threshold: the thresholds are an ``nn.Parameter`` (else a buffer).
        b_noise_init: the constant initial value of ``b_noise`` (default 0.1).
        value_space: the space ``t = g(y)`` in which the regression value ``Y`` is Cauchy:
            ``"identity"`` (default) or ``"signed_log1p"`` (``t = sign(y) ln(1 + |y|)``, the
            scale on which :class:`~cauchylin.nn.NumericEmbedding` reads numbers); see
            :mod:`cauchylin.value_space`. :meth:`loss` maps the targets into it, :meth:`step`
            and :class:`ActionOutput` map predictions back.
        readout_contexts: rows of the per-context readout table :attr:`readouts` (0: none;
            a loaded model builds it with the size its checkpoint holds).
        calibration_levels: the coverages that table can calibrate.
        readout_numbers: the earlier numbers of the text a solved readout reads beside
            ``loc_U'`` (0: none; :class:`~cauchylin.nn.readouts.ContextReadouts`).
        device: device of the parameters.
        dtype: dtype of the parameters. Half-precision parameters are computed in float32: the
            heads are cast on every call (a copy of ``W_cls``; keep float32 master weights for
            speed), and the fused loss reads them tile by tile.

    Attributes:
        classifier: ``nn.Linear(C, V)``; ``weight`` is ``W_cls [V, C]``, ``bias`` is ``b_cls [V]``.
        regressor: ``nn.Linear(C, 1)``.
        b_noise: ``nn.Parameter [C]``.
        threshold: ``[]`` or ``[V]``, a parameter or a buffer.
        readouts: :class:`~cauchylin.nn.readouts.ContextReadouts`, the per-context readouts of
            ``Y`` solved after training and their conformal widths; :meth:`forward` and
            :meth:`step` use them where they are given the positions' ``context`` codes (the
            training loss :meth:`loss` always uses the shared head ``W_reg``).

    Raises:
        ValueError: non-positive sizes or non-finite initial values.

    Example:
        >>> import torch
        >>> from cauchylin import CauchyVector
        >>> from cauchylin.nn import Action
        >>> act = Action(4, 10, threshold=0.0)
        >>> U = CauchyVector(torch.randn(2, 3, 4), torch.ones(2, 3, 4))
        >>> out = act(U)  # standard mode
        >>> out.loc_S.shape, out.loc_Y.shape, out.predict().shape
        (torch.Size([2, 3, 10]), torch.Size([2, 3]), torch.Size([2, 3]))
    """

    threshold: torch.Tensor

    def __init__(
        self,
        causal_size: int,
        num_classes: int,
        *,
        threshold: float = 100.0,
        threshold_per_class: bool = False,
        learnable_threshold: bool = False,
        b_noise_init: float = 0.1,
        value_space: str = IDENTITY,
        readout_contexts: int = 0,
        calibration_levels: tuple[float, ...] = CALIBRATION_LEVELS,
        readout_numbers: int = 0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.value_space = check_value_space(value_space)
        positive_int("causal_size", causal_size)
        positive_int("num_classes", num_classes)
        finite_number("threshold", threshold)
        finite_number("b_noise_init", b_noise_init)
        self.causal_size = causal_size
        self.num_classes = num_classes
        self.threshold_init = float(threshold)
        self.b_noise_init = float(b_noise_init)
        self.threshold_per_class = bool(threshold_per_class)
        self.learnable_threshold = bool(learnable_threshold)
        self.classifier = nn.Linear(causal_size, num_classes, device=device, dtype=dtype)
        self.regressor = nn.Linear(causal_size, 1, device=device, dtype=dtype)
        self.b_noise = nn.Parameter(torch.empty(causal_size, device=device, dtype=dtype))
        shape = (num_classes,) if threshold_per_class else ()
        thr = torch.empty(shape, device=device, dtype=self.b_noise.dtype)
        if learnable_threshold:
            self.threshold = nn.Parameter(thr)
        else:
            self.register_buffer("threshold", thr)
        self.readouts = ContextReadouts(
            causal_size, readout_contexts, calibration_levels, numbers=readout_numbers
        )
        if device is not None:
            self.readouts.to(device)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialise as in the class docstring (keeps the default ``nn.Linear`` ``W_cls``).

        ``W_cls`` is re-drawn by ``nn.Linear.reset_parameters`` (from the global torch RNG),
        ``b_cls = 0``, ``W_reg ~ N(0, 1/C)``, ``b_reg = 0``, ``b_noise = b_noise_init`` and the
        thresholds ``= threshold``.

        Example:
            >>> import torch
            >>> from cauchylin.nn import Action
            >>> act = Action(2, 3, threshold=1.0, b_noise_init=0.5)
            >>> with torch.no_grad():
            ...     _ = act.b_noise.mul_(10.0)
            ...     _ = act.threshold.fill_(7.0)
            >>> act.reset_parameters()
            >>> act.b_noise.detach(), act.threshold, act.classifier.bias.detach()
            (tensor([0.5000, 0.5000]), tensor(1.), tensor([0., 0., 0.]))
        """
        with torch.no_grad():
            self.classifier.reset_parameters()
            self.classifier.bias.zero_()
            self.regressor.weight.normal_(0.0, 1.0 / math.sqrt(self.causal_size))
            self.regressor.bias.zero_()
            self.b_noise.fill_(self.b_noise_init)
            self.threshold.fill_(self.threshold_init)

    def copy_base_head(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        """Copy a base language-model head into the classifier.

        ``W_cls <- weight`` and ``b_cls <- bias`` (0 when the base head has none, as in Qwen), so
        that ``loc_S`` equals the base model's logits on the same features.

        Args:
            weight: ``[V, C]`` base head weight (e.g. ``lm_head.weight``; tied embeddings work).
            bias: ``[V]`` or ``None``.

        Raises:
            ValueError: the shapes differ from the classifier's.

        Example:
            >>> import torch
            >>> from cauchylin.nn import Abduction, Action
            >>> lm_head = torch.nn.Linear(4, 7, bias=False)
            >>> act = Action(4, 7)
            >>> act.copy_base_head(lm_head.weight)
            >>> z = torch.randn(3, 4)
            >>> bool(torch.equal(act(Abduction(4, 4)(z)).logits, lm_head(z)))
            True
        """
        w = self.classifier.weight
        if tuple(weight.shape) != tuple(w.shape):
            raise ValueError(
                f"weight must have shape {tuple(w.shape)} ([V, C]), got {tuple(weight.shape)}"
            )
        if bias is not None and tuple(bias.shape) != (self.num_classes,):
            raise ValueError(f"bias must have shape ({self.num_classes},), got {tuple(bias.shape)}")
        with torch.no_grad():
            w.copy_(weight)
            if bias is None:
                self.classifier.bias.zero_()
            else:
                self.classifier.bias.copy_(bias)

    @torch.no_grad()
    def resize_classes(self, num_classes: int) -> None:
        """Change the number of classes ``V`` in place, keeping the first ``min(V, V_new)`` rows.

        New rows of ``W_cls`` are the mean row, new entries of ``b_cls`` the mean bias and new
        per-class thresholds the initial threshold; shrinking drops the last rows. The classifier
        is a new ``nn.Linear`` (``requires_grad`` kept), so an optimizer built before must be
        rebuilt.

        Args:
            num_classes: the new ``V >= 1``.

        Raises:
            ValueError: ``num_classes`` is not a positive int.

        Example:
            >>> import torch
            >>> from cauchylin.nn import Action
            >>> act = Action(2, 3, threshold=5.0, threshold_per_class=True)
            >>> act.resize_classes(5)
            >>> act.num_classes, tuple(act.classifier.weight.shape), act.threshold.tolist()
            (5, (5, 2), [5.0, 5.0, 5.0, 5.0, 5.0])
            >>> bool(torch.equal(act.classifier.weight[4], act.classifier.weight[:3].mean(0)))
            True
        """
        positive_int("num_classes", num_classes)
        old = self.classifier
        n = old.weight.shape[0]
        if num_classes == n:
            return
        new = nn.Linear(
            old.in_features, num_classes, dtype=old.weight.dtype, device=old.weight.device
        )
        r = min(n, num_classes)
        new.weight[:r] = old.weight[:r]
        new.bias[:r] = old.bias[:r]
        if num_classes > n:
            new.weight[n:] = old.weight.mean(0)
            new.bias[n:] = old.bias.mean()
        new.weight.requires_grad_(old.weight.requires_grad)
        new.bias.requires_grad_(old.bias.requires_grad)
        self.classifier = new
        self.num_classes = num_classes
        if self.threshold.ndim == 1:
            thr = torch.full((num_classes,), self.threshold_init, dtype=self.threshold.dtype)
            thr = thr.to(self.threshold.device)
            thr[:r] = self.threshold[:r]
            if isinstance(self.threshold, nn.Parameter):
                self.threshold = nn.Parameter(thr, requires_grad=self.threshold.requires_grad)
            else:
                self.threshold = thr

    # ---------------------------------------------------------------------------- modes
    def _check_input(self, U: CauchyVector) -> CauchyVector:
        if not isinstance(U, CauchyVector):
            raise ValueError(f"U must be a CauchyVector, got {type(U).__name__}")
        if U.event_size != self.causal_size:
            raise ValueError(
                f"U has {U.event_size} components, expected causal_size {self.causal_size} "
                f"(U shape {tuple(U.shape)})"
            )
        dtype = self.compute_dtype
        return U if U.dtype == dtype else U.to(dtype)

    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype the heads compute in: the parameters' dtype, float32 for half precision."""
        return working_dtype(self.classifier.weight)

    def _heads(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``W_cls, b_cls, W_reg, b_reg`` in the compute dtype (a no-op unless half precision)."""
        dtype = self.compute_dtype
        return (
            self.classifier.weight.to(dtype),
            self.classifier.bias.to(dtype),
            self.regressor.weight.to(dtype),
            self.regressor.bias.to(dtype),
        )

    def _cached(self, name: str, weight: torch.Tensor, dtype: torch.dtype, absolute: bool) -> Any:
        """``weight`` (or ``|weight|``) detached in ``dtype``, kept while the weight is unchanged.

        The key is the tensor's identity, storage, in-place version, shape, device and dtype, so
        an optimizer step, ``load_state_dict``, ``.to()`` or :meth:`resize_classes` recomputes it.
        The cache lives outside the module (a weak mapping), so copies and pickles never carry it.
        """
        key: tuple[Any, ...] = (id(weight), weight.data_ptr(), weight._version, weight.shape)
        key = (*key, weight.device, dtype, absolute)
        cache = _STEP_CACHE.setdefault(self, {})
        hit = cache.get(name)
        if hit is not None and hit[0] == key:
            return hit[1]
        value = weight.detach().to(dtype)
        if absolute:
            value = value.abs()
        cache[name] = (key, value)
        return value

    def _decoding(
        self,
        U: CauchyVector,
        mode: str | InferenceMode | Decoding,
        temperature: float | None,
        options: dict[str, Any],
    ) -> Decoding:
        """The checked :class:`~cauchylin.nn.modes.Decoding` of a call: given, or built once."""
        if isinstance(mode, Decoding):
            given = sorted(k for k, v in options.items() if v is not None)
            if temperature is not None or given:
                listed = ", ".join(["temperature"] * (temperature is not None) + given)
                raise ValueError(
                    f"with a Decoding, its options travel in it: do not pass {listed} as well"
                )
            return mode
        t = 1.0 if temperature is None else temperature
        return Decoding.make(mode, t, shape=U.shape, **options)

    def decision_input(
        self,
        U: CauchyVector,
        mode: str | InferenceMode | Decoding = STANDARD,
        temperature: float | None = None,
        *,
        generator: torch.Generator | None = None,
        eps_seed: torch.Tensor | None = None,
        eps_noise: torch.Tensor | None = None,
    ) -> CauchyVector:
        r"""The decision input ``U'`` of a mode (before the linear heads).

        The rule of every mode (with temperature ``T`` and noise ``|b_noise|``) is written out
        on the documentation's [Inference modes][inference-modes-page] page and coded once, in
        :data:`~cauchylin.nn.modes.MODE_TABLE`; every mode but ``compatible`` is ``causal`` at
        ``T = 0``.

        Args:
            U: :class:`~cauchylin.CauchyVector` ``[..., C]`` (e.g. the
                :class:`~cauchylin.nn.Abduction` output).
            mode: one of :data:`~cauchylin.nn.MODES` (or its
                :class:`~cauchylin.nn.InferenceMode`), or a checked
                :class:`~cauchylin.nn.modes.Decoding` that carries every option below.
            temperature: ``T >= 0`` (default 1).
            generator: ``torch.Generator`` of the random modes.
            eps_seed: ``shared_individual``'s fixed draw (see
                :meth:`~cauchylin.nn.modes.Decoding.make`).
            eps_noise: ``shared_noise``'s fixed draw (likewise).

        Returns:
            :class:`~cauchylin.CauchyVector` ``U'`` of ``U``'s shape.

        Raises:
            ValueError: ``U`` of the wrong size, bad options (see
                :meth:`~cauchylin.nn.modes.Decoding.make`), or options given beside a
                ``Decoding``.

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> from cauchylin.nn import Action
            >>> act = Action(3, 5, b_noise_init=0.5)
            >>> U = CauchyVector(torch.zeros(2, 3), torch.ones(2, 3))
            >>> act.decision_input(U, "standard", temperature=2.0).scale[0].tolist()  # 1 + 2 * 0.5
            [2.0, 2.0, 2.0]
            >>> act.decision_input(U, "sampling", temperature=0.0) is U  # T = 0: causal
            True
            >>> eps = torch.full((3,), 0.75)  # tan(pi (0.75 - 1/2)) = 1
            >>> Up = act.decision_input(U, "shared_individual", eps_seed=eps)
            >>> Up.loc[0].tolist(), Up.scale[0].tolist()  # u = loc_U + T scale_U * 1; scale |b_noise|
            ([1.0, 1.0, 1.0], [0.5, 0.5, 0.5])
        """
        U = self._check_input(U)
        options = {"generator": generator, "eps_seed": eps_seed, "eps_noise": eps_noise}
        decoding = self._decoding(U, mode, temperature, options)
        return decoding.decision_input(U, self.b_noise.abs())

    def forward(
        self,
        U: CauchyVector,
        mode: str | InferenceMode | Decoding = STANDARD,
        temperature: float | None = None,
        *,
        generator: torch.Generator | None = None,
        eps_seed: torch.Tensor | None = None,
        eps_noise: torch.Tensor | None = None,
        context: torch.Tensor | None = None,
        numbers: torch.Tensor | None = None,
    ) -> ActionOutput:
        r"""Class scores and regression value of a mode: ``S = W_cls U' + b_cls``, ``Y = W_reg U' + b_reg``.

        ``U'`` is :meth:`decision_input` (same arguments). ``S`` and ``Y`` are exact
        :class:`~cauchylin.CauchyVector` images; their marginals cost one GEMM each for ``loc``
        and ``scale`` and are computed on first use.

        Args:
            U: :class:`~cauchylin.CauchyVector` ``[..., C]`` (e.g. the
                :class:`~cauchylin.nn.Abduction` output).
            mode: one of :data:`~cauchylin.nn.MODES` (default ``"standard"``), or a
                :class:`~cauchylin.nn.modes.Decoding`.
            temperature: ``T >= 0`` (default 1); 0 turns every non-compatible mode into
                ``causal``.
            generator: ``torch.Generator`` of the random modes.
            eps_seed: ``shared_individual``'s fixed draw.
            eps_noise: ``shared_noise``'s fixed draw.
            context: ``[...]`` int64 context codes of the positions
                (:func:`~cauchylin.nn.readouts.context_codes`): where :attr:`readouts` has a
                solved readout for one, ``Y`` is that readout's; None (default) keeps ``W_reg``
                everywhere.
            numbers: ``[..., S]`` the positions' earlier numbers
                (:func:`~cauchylin.nn.readouts.earlier_numbers`), needed where the table's
                readouts read them (``readouts.numbers > 0``).

        Returns:
            :class:`ActionOutput` with ``S [..., V]``, ``Y [..., 1]``, the thresholds, the mode
            that ran and ``U'``.

        Raises:
            ValueError: as :meth:`decision_input`.

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> from cauchylin.nn import Action, draw_eps_seed
            >>> act = Action(3, 5)
            >>> U = CauchyVector(torch.zeros(2, 3), torch.ones(2, 3))
            >>> eps = draw_eps_seed((3,), generator=torch.Generator().manual_seed(0))
            >>> out = act(U, "shared_individual", eps_seed=eps)
            >>> out.mode, out.loc_S.shape
            ('shared_individual', torch.Size([2, 5]))
        """
        U = self._check_input(U)
        options = {"generator": generator, "eps_seed": eps_seed, "eps_noise": eps_noise}
        decoding = self._decoding(U, mode, temperature, options)
        u_prime = decoding.decision_input(U, self.b_noise.abs())
        W, b, w_reg, b_reg = self._heads()
        if context is not None and self.readouts.num_contexts:
            Y = self.readouts.read(u_prime, w_reg, b_reg, self._rows(context, U), numbers)
        else:
            Y = u_prime.linear(w_reg, b_reg)
        return ActionOutput(
            S=u_prime.linear(W, b),
            Y=Y,
            threshold=self.threshold,
            mode=decoding.runs.name,
            temperature=decoding.temperature,
            U_prime=u_prime,
            value_space=self.value_space,
        )

    @torch.no_grad()
    def step(
        self,
        U: CauchyVector,
        decoding: Decoding | str | InferenceMode = STANDARD,
        *,
        num_token_id: int | None = None,
        return_distributions: bool = False,
        context: torch.Tensor | None = None,
        numbers: torch.Tensor | None = None,
    ) -> ActionStep:
        """One generation step: the mode's next token and its numeric value, without gradients.

        ``U'`` is :meth:`decision_input`; then ``loc_S = W_cls loc_U' + b_cls``,
        ``loc_Y = W_reg loc_U' + b_reg`` and, when the mode's token rule reads it (every mode but
        ``compatible``) or ``return_distributions`` is set, ``scale_S = |W_cls| scale_U'``. The
        next token is the mode's rule (:meth:`~cauchylin.nn.modes.InferenceMode.choose`, the same
        as :meth:`ActionOutput.next_token`). On the CPU, ``loc_S`` and ``scale_S`` come from one
        pass over ``W_cls`` (a compiled loop that forms ``|W_cls|`` in registers; switch:
        ``CAUCHYLIN_FUSED_HEADS`` = ``1``/``0``/``auto``, ``auto`` fusing heads of at least 2**22
        weights; it falls back to the two products below when it cannot be compiled). Otherwise
        ``|W_cls|`` (and, for half-precision heads, the float32 copies of the heads) are computed
        once and reused while the weights are unchanged, so a decoding loop pays one GEMM per head
        and step and nothing else over the vocabulary. A loop passes one
        :class:`~cauchylin.nn.modes.Decoding`, checked once before its first step: it carries
        every decoding option (temperature, generator, ``top_k``/``top_p``, a shared mode's
        draw), which this method takes from it alone.

        Args:
            U: :class:`~cauchylin.CauchyVector` ``[..., C]`` (one position per row).
            decoding: the checked :class:`~cauchylin.nn.modes.Decoding`
                (:meth:`~cauchylin.nn.modes.Decoding.make`), or a mode's name (or its
                :class:`~cauchylin.nn.InferenceMode`) to run at ``T = 1`` without options.
            num_token_id: id of ``<NUM>``: where it is chosen, ``values`` holds ``loc_Y``.
            return_distributions: also compute ``scale_S`` and ``scale_Y`` for every mode.
            context: ``[...]`` int64 context codes of the positions, as in :meth:`forward`.
            numbers: ``[..., S]`` their earlier numbers, as in :meth:`forward`.

        Returns:
            :class:`ActionStep`.

        Raises:
            ValueError: ``U`` of the wrong size, or a mode name that needs options (a shared
                mode's draw: pass a :class:`~cauchylin.nn.modes.Decoding`).

        Example:
            >>> import torch
            >>> from cauchylin import CauchyVector
            >>> from cauchylin.nn import Action
            >>> from cauchylin.nn.modes import Decoding
            >>> act = Action(3, 5, threshold=0.0)
            >>> U = CauchyVector(torch.randn(2, 3), torch.ones(2, 3))
            >>> step = act.step(U, "causal", num_token_id=4)
            >>> bool(torch.equal(step.ids, act(U, "causal").next_token()))  # the same rule
            True
            >>> bool((step.values[step.ids != 4] == 0).all())  # values only at <NUM>
            True
            >>> greedy = Decoding.make("compatible", 0.0)  # the options travel in the record
            >>> bool(torch.equal(act.step(U, greedy).ids, act(U, greedy).loc_S.argmax(-1)))
            True
        """
        U = self._check_input(U)
        decoding = self._decoding(U, decoding, None, {})
        Up = decoding.decision_input(U, self.b_noise.abs())
        dtype = self.compute_dtype
        W = self._cached("W", self.classifier.weight, dtype, absolute=False)
        b = self._cached("b", self.classifier.bias, dtype, absolute=False)
        W_reg = self._cached("W_reg", self.regressor.weight, dtype, absolute=False)
        b_reg = self._cached("b_reg", self.regressor.bias, dtype, absolute=False)
        need_scale = return_distributions or not decoding.runs.samples_logits
        if Up.is_independent:
            # one pass over W_cls for loc_S and scale_S where the fused loop applies
            fused = head_scores(W, b, Up.loc, Up.scale if need_scale else None)
            if fused is not None:
                loc_S, scale_S = fused
            else:
                loc_S = F.linear(Up.loc, W, b)
                scale_S = None
                if need_scale:
                    W_abs = self._cached("W_abs", self.classifier.weight, dtype, absolute=True)
                    scale_S = F.linear(Up.scale, W_abs)
            loc_Y = F.linear(Up.loc, W_reg, b_reg)[..., 0]
            scale_Y = None
            if return_distributions:
                scale_Y = F.linear(Up.scale, W_reg.abs())[..., 0]
        else:  # dependent components: the exact marginals of the linear images
            S, Y = Up.linear(W, b), Up.linear(W_reg, b_reg)
            loc_S, loc_Y = S.loc, Y.loc[..., 0]
            scale_S = S.scale if need_scale else None
            scale_Y = Y.scale[..., 0] if return_distributions else None
        if context is not None and self.readouts.num_contexts:
            rows = self._rows(context, U)
            loc_Y, scale_Y = self.readouts.marginals(Up.loc, loc_Y, scale_Y, rows, numbers)
        ids = decoding.choose(loc_S, scale_S, self.threshold)
        values = torch.zeros(ids.shape, dtype=torch.float32, device=ids.device)
        if num_token_id is not None:
            y = from_value_space(loc_Y.float(), self.value_space)
            y = torch.nan_to_num(y, nan=0.0, posinf=_F32_MAX, neginf=-_F32_MAX)
            values = torch.where(ids == num_token_id, y, values)
        return ActionStep(
            ids=ids,
            values=values,
            loc_S=loc_S,
            scale_S=scale_S,
            loc_Y=loc_Y,
            scale_Y=scale_Y,
            U_prime=Up,
            mode=decoding.runs.name,
        )

    def _rows(self, context: torch.Tensor, U: CauchyVector) -> torch.Tensor:
        """The readout-table row of each position's context code (checked against ``U``)."""
        if not isinstance(context, torch.Tensor) or context.is_floating_point():
            raise ValueError(
                f"context must be an integer tensor of codes, got {getattr(context, 'dtype', type(context).__name__)}"
            )
        if tuple(context.shape) != tuple(U.batch_shape):
            raise ValueError(
                f"context shape {tuple(context.shape)} must equal U's batch shape "
                f"{tuple(U.batch_shape)}"
            )
        return self.readouts.lookup(context.long())

    # ---------------------------------------------------------------------------- training
    def loss(
        self,
        U: CauchyVector,
        labels: torch.Tensor,
        target_values: torch.Tensor | None = None,
        *,
        num_token_id: int | None = None,
        attention_mask: torch.Tensor | None = None,
        alpha: float = 0.0,
        reg_weight: float = 1.0,
        ignore_index: int = -100,
        temperature: float = 1.0,
        chunk_size: int | tuple[int, int] | None = None,
        reg_scale_power: float = 0.0,
        reg_context_tokens: int = 0,
        reg_scale_cutoff: float | None = None,
        reg_target_weight: float = 1.0,
    ) -> losses.CausalLMLoss:
        r"""The training objective in standard mode, without any ``[N, V]`` tensor.

        With ``U'_i ~ Cauchy(loc_U_i, scale_U_i + T |b_noise|)``, ``S = W_cls U' + b_cls``,
        ``Y = W_reg U' + b_reg`` and ``P_ik = 1/2 + atan((loc_S_ik - tau_k) / scale_S_ik) / pi``,
        summed over the ``N`` counted positions ``i``:

        .. math::

            L = \underbrace{\frac{1}{N}\sum_i -\sum_k \big[y_{ik}\log P_{ik}
                + (1 - y_{ik})\log(1 - P_{ik})\big]}_{\texttt{cls}}
              + \lambda\,\underbrace{\frac{\sum_i w_i\,g_i\,\mathrm{NLL}_i}{\sum_i m_i}}_{\texttt{reg}}

        with ``y_ik`` the one-hot label, ``m_i = 1`` where the label is ``<NUM>``, ``w_i``
        ``reg_target_weight`` at the last ``<NUM>`` label of each sequence and 1 elsewhere, the gate
        ``g_i = m_i (alpha + (1 - alpha) P_i,<NUM>)``, the Cauchy NLL of the target value ``v_i``
        in the value space ``t_i = g(v_i)`` (:mod:`cauchylin.value_space`)
        ``NLL_i = log(pi scale_Y_i) + log(1 + ((t_i - loc_Y_i) / scale_Y_i)^2)`` and
        ``lambda = reg_weight`` (the derivation: the documentation page "The causal decision
        model", ``docs/concepts.md``, sections "The OvR classification loss" to "The total loss").
        It is computed as:

        * classification: :func:`cauchylin.losses.ovr_bce_fused` on ``loc_U`` and the total scale
          ``scale_U + T|b_noise|`` with ``W_cls, b_cls`` and the thresholds (gradients reach
          ``b_noise`` and the thresholds through autograd); a ``U`` whose components are not
          independent (after a mixing linear map) takes the exact plain path instead;
        * ``P_<NUM>`` from the single class column ``S[..., num:num+1]`` (one GEMV);
        * regression: :func:`cauchylin.losses.gated_regression_loss` on ``Y`` with
          ``num_mask = (labels == num_token_id) & counted``, ``scale_power=reg_scale_power`` and,
          when ``reg_context_tokens = k > 0``, the context of each position keyed by the ``k``
          tokens before it (read from ``labels``: the input at ``i`` is the label at ``i - 1``
          along the last dimension). With ``beta = reg_scale_power > 0`` the location's gradient
          at each ``<NUM>`` target is multiplied by ``d_i^beta`` over its batch mean, ``d_i`` the
          spread of its context's targets in the batch (the model's detached ``scale_Y_i`` where
          the context is rare), so that contexts whose numbers have a small spread do not
          outweigh the others; the loss value and the scale's gradient are the plain NLL's.
          With ``reg_scale_cutoff = k``, targets more than ``k`` scales from their location that
          are outliers of their context (by residual, or with ``reg_context_tokens`` by a
          magnitude far above the context's targets; the call's residuals with
          ``reg_context_tokens = 0``) pass no gradient to ``scale_Y``: far outliers do not
          inflate the scale. With ``reg_target_weight = w``, the NLL of the last ``<NUM>`` target
          of each sequence (along the last dimension: a text's target number) counts ``w``
          times (:func:`cauchylin.losses.last_number_weights`); the others count once.
          Without ``num_token_id`` or ``target_values`` the regression term is exactly 0.

        Args:
            U: :class:`~cauchylin.CauchyVector` ``[..., C]``, the Abduction output.
            labels: ``[...]`` next-token ids, ``ignore_index`` where nothing is predicted.
            target_values: ``[...]`` the true numbers (read at ``<NUM>`` targets only).
            num_token_id: id of ``<NUM>``.
            attention_mask: optional ``[...]``; 0 marks padding.
            alpha: gate floor in ``[0, 1]`` (0: gate by ``P_<NUM>``; 1: no gating).
            reg_weight: ``lambda``.
            ignore_index: label of positions that do not count.
            temperature: noise temperature ``T`` of the standard mode (1 by default).
            chunk_size: tiles of the fused OvR path (see :func:`cauchylin.losses.ovr_bce_fused`).
            reg_scale_power: ``beta >= 0`` of the regression's context-scaled location gradient
                (0: the plain NLL's gradient).
            reg_context_tokens: ``k`` in ``0..3``, the tokens before a number that key its
                context (0: the model's own scale stands for every context's spread).
            reg_scale_cutoff: ``k > 0`` or None: the regression loss's ``scale_cutoff``
                (:func:`cauchylin.losses.gated_regression_loss`).
            reg_target_weight: ``w >= 0``, the weight of each sequence's last ``<NUM>`` target
                in the regression term (1: every number alike).

        Returns:
            :class:`cauchylin.losses.CausalLMLoss` ``(total, cls, reg)``.

        Raises:
            ValueError: shape mismatches, labels out of range, bad ``alpha`` or
                ``reg_scale_power`` or ``reg_scale_cutoff`` (from :mod:`cauchylin.losses`), a
                negative or non-finite ``reg_target_weight``,
                ``reg_context_tokens``
                outside ``0..3``, or a bad ``U``/temperature.

        Example:
            >>> import torch
            >>> from cauchylin.nn import Abduction, Action
            >>> abd, act = Abduction(8, 8, gamma_init=1.0), Action(8, 20, threshold=0.0)
            >>> U = abd(torch.randn(2, 5, 8))
            >>> labels = torch.tensor([[3, 19, 4, 19, -100], [1, 2, 19, 0, 5]])  # 19 = <NUM>
            >>> values = torch.tensor([[0.0, 12.5, 0.0, -3.0, 0.0], [0.0, 0.0, 7.0, 0.0, 0.0]])
            >>> out = act.loss(U, labels, values, num_token_id=19)
            >>> out.total.backward()
            >>> int(out.cls.count), int(out.reg.count), act.b_noise.grad.shape
            (9, 3, torch.Size([8]))
        """
        t = check_temperature(temperature)
        integer("reg_context_tokens", reg_context_tokens, minimum=0, maximum=MAX_CONTEXT_TOKENS)
        target_weight = finite_number("reg_target_weight", reg_target_weight, minimum=0.0)
        U = self._check_input(U)
        if not isinstance(labels, torch.Tensor):
            raise ValueError(f"labels must be a torch.Tensor, got {type(labels).__name__}")
        if tuple(labels.shape) != tuple(U.batch_shape):
            raise ValueError(
                f"labels shape {tuple(labels.shape)} must equal U's batch shape "
                f"{tuple(U.batch_shape)}"
            )
        u_prime = self.decision_input(U, STANDARD, t)
        cls = self._classification_loss(
            U, u_prime, t, labels, ignore_index, attention_mask, chunk_size
        )
        _, _, w_reg, b_reg = self._heads()
        Y = u_prime.linear(w_reg, b_reg)
        loc_Y, scale_Y = Y.loc[..., 0], Y.scale[..., 0]
        counted = labels != ignore_index
        if attention_mask is not None:
            counted = counted & (attention_mask != 0)
        num_mask, targets, log_p_num = self._regression_targets(
            U.dtype, u_prime, labels, counted, loc_Y, target_values, num_token_id, alpha
        )
        context = None
        if reg_context_tokens:
            context = context_codes(_previous_tokens(labels), reg_context_tokens, self.num_classes)
        weights = None
        if target_weight != 1.0:
            weights = losses.last_number_weights(num_mask, target_weight)
        reg = losses.gated_regression_loss(
            loc_Y,
            scale_Y,
            targets,
            num_mask,
            log_p_num,
            alpha=alpha,
            scale_power=reg_scale_power,
            context=context,
            scale_cutoff=reg_scale_cutoff,
            weights=weights,
        )
        return losses.causal_lm_loss(cls, reg, reg_weight=reg_weight)

    def _classification_loss(
        self,
        U: CauchyVector,
        u_prime: CauchyVector,
        t: float,
        labels: torch.Tensor,
        ignore_index: int,
        attention_mask: torch.Tensor | None,
        chunk_size: int | tuple[int, int] | None,
    ) -> losses.OvRLoss:
        """The OvR loss of the class scores of ``u_prime``: through the fused kernel when ``U``'s
        components are independent (no ``[..., V]`` tensor is kept), else exactly from ``S``."""
        W, b = self.classifier.weight, self.classifier.bias  # the fused path reads half tiles
        if U.is_independent:
            total_scale = U.scale + t * self.b_noise.abs().to(U.dtype)
            return losses.ovr_bce_fused(
                U.loc,
                total_scale,
                W,
                b,
                self.threshold,
                labels,
                ignore_index=ignore_index,
                attention_mask=attention_mask,
                chunk_size=chunk_size,
            )
        S = u_prime.linear(W.to(U.dtype), b.to(U.dtype))
        return losses.ovr_bce(
            S.loc,
            S.scale,
            labels,
            self.threshold,
            ignore_index=ignore_index,
            attention_mask=attention_mask,
        )

    def _regression_targets(
        self,
        dtype: torch.dtype,
        u_prime: CauchyVector,
        labels: torch.Tensor,
        counted: torch.Tensor,
        loc_Y: torch.Tensor,
        target_values: torch.Tensor | None,
        num_token_id: int | None,
        alpha: float,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """``(num_mask, targets, log_p_num)`` of the gated regression loss: the counted ``<NUM>``
        positions, their targets in the value space (0 elsewhere), and ``log P(<NUM>)`` of the
        gate (None when ``alpha = 1`` leaves the gate out, or without ``<NUM>`` targets);
        ``dtype`` is the one of ``U``, in which the ``<NUM>`` row is read."""
        if num_token_id is None or target_values is None:
            return torch.zeros_like(counted), torch.zeros_like(loc_Y), None
        if not 0 <= int(num_token_id) < self.num_classes:
            raise ValueError(
                f"num_token_id must lie in [0, {self.num_classes}), got {num_token_id!r}"
            )
        num_mask = counted & (labels == num_token_id)
        if not isinstance(target_values, torch.Tensor):
            raise ValueError(
                f"target_values must be a torch.Tensor, got {type(target_values).__name__}"
            )
        if tuple(target_values.shape) != tuple(labels.shape):
            raise ValueError(
                f"target_values shape {tuple(target_values.shape)} must equal the labels "
                f"shape {tuple(labels.shape)}"
            )
        targets = to_value_space(target_values.to(loc_Y.device), self.value_space)
        targets = torch.where(num_mask, targets.to(loc_Y.dtype), torch.zeros_like(loc_Y))
        log_p_num = None
        if float(alpha) < 1.0:
            k = int(num_token_id)
            W, b = self.classifier.weight, self.classifier.bias
            s_num = u_prime.linear(W[k : k + 1].to(dtype), b[k : k + 1].to(dtype))
            thr = self.threshold if self.threshold.ndim == 0 else self.threshold[k : k + 1]
            log_p_num = s_num.ovr_log_prob(thr)[0][..., 0]
        return num_mask, targets, log_p_num

    def extra_repr(self) -> str:
        """The settings shown in the module's ``repr``.

        Returns:
            ``"causal_size=C, num_classes=V, threshold=... (scalar|per class, fixed|learnable),
            b_noise_init=..., value_space=..."``.
        """
        kind = "learnable" if self.learnable_threshold else "fixed"
        per = "per class" if self.threshold_per_class else "scalar"
        return (
            f"causal_size={self.causal_size}, num_classes={self.num_classes}, "
            f"threshold={self.threshold_init} ({per}, {kind}), b_noise_init={self.b_noise_init}, "
            f"value_space={self.value_space}"
        )
