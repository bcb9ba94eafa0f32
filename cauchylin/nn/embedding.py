r"""``NumericEmbedding``: the token embedding plus a learned direction scaled by the number's size.

``e = base_embed + sign(v) ln(1 + |v|) w_num`` at every position, ``v = 0`` (no change) where there
is no number; with ``encoding="periodic"`` also a linear map of periodic features of
``sign(v) ln(1 + |v|)`` (trainable frequencies).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from cauchylin._special import working_dtype
from cauchylin._validation import (
    check_finite,
    finite_number,
    is_validating,
    one_of,
    positive_int,
    require_tensor,
)

__all__ = ["NUMERIC_ENCODINGS", "W_NUM_INITS", "NumericEmbedding"]

W_NUM_INITS: tuple[str, ...] = ("random_unit", "normal", "zeros")
"""The initialisations of ``w_num`` (see :class:`NumericEmbedding`)."""

NUMERIC_ENCODINGS: tuple[str, ...] = ("linear", "periodic")
"""The encodings of a number (see :class:`NumericEmbedding`): ``"linear"``, the single direction
``w_num``, or ``"periodic"``, that direction plus a linear map of periodic features."""


class NumericEmbedding(nn.Module):
    r"""Numeric-aware embedding: adds ``phi(v) = sign(v) ln(1 + |v|) w_num`` to the token embedding.

    .. math::

        e_i = \mathrm{base}_i + [x_i = \mathrm{NUM}]\,\delta + \phi(v_i), \qquad
        \phi(v) = \operatorname{sign}(v)\,\ln(1 + |v|)\; w_\mathrm{num}

    With ``encoding="periodic"`` the encoding also holds ``K`` periodic features of
    ``t = sign(v) ln(1 + |v|)`` (the periodic embeddings of Gorishniy, Rubachev and Babenko, "On
    Embeddings for Numerical Features in Tabular Deep Learning", 2022), mapped to ``H`` by a
    trainable ``P`` (``periodic_weight``, ``[H, 2K]``) with trainable frequencies ``c``
    (``frequencies``, ``[K]``):

    .. math::

        \phi(v) = t\,w_\mathrm{num} + P\,\big[\sin(2\pi c_k t),\;
        \cos(2\pi c_k t) - 1\big]_{k=1..K}, \qquad t = \operatorname{sign}(v)\,\ln(1 + |v|)

    (the ``K`` sines first, then the ``K`` cosines). The cosines are shifted by 1 so that
    ``phi(0) = 0`` holds here too; the constant the shift removes is the same for every number,
    the ``<NUM>`` embedding's to learn. ``c_k ~ N(0, sigma^2)``; ``P``'s entries are
    ``N(0, 1 / (2 K H))``, so that ``|P f|`` is about 1 for features ``f`` of random phase,
    the norm of a ``"random_unit"`` ``w_num``. ``sigma`` is in units of ``1 / t``: a frequency
    ``c`` separates numbers whose ``t`` differ by about ``1 / (4 c)`` (``t`` moves by 0.1 between
    10 and 11, by 0.01 between 100 and 101).

    Non-numeric positions carry ``v = 0``, and ``phi(0)`` is exactly the zero vector, so there
    ``e`` equals the base embedding bit for bit. With ``token_offset=True`` the layer also holds
    ``delta`` (``num_token_delta``, ``[H]``, initially 0), added where ``num_token_mask`` marks
    the ``<NUM>`` token: the ``<NUM>`` embedding then learns even when the embedding matrix it
    comes from is frozen (a frozen or LoRA-wrapped backbone).

    Args:
        hidden_size: ``H``, the embedding width.
        init: initial ``w_num``: ``"random_unit"`` (default; a standard normal direction scaled to
            unit Euclidean norm), ``"normal"`` (entries ``N(0, 1/H)``, i.e. std ``1/sqrt(H)``) or
            ``"zeros"``.
        token_offset: also hold the trainable ``<NUM>`` offset ``delta``.
        encoding: ``"linear"`` (default: ``w_num`` alone) or ``"periodic"`` (also ``P`` and
            ``c``, above).
        frequencies: ``K``, the number of frequencies of ``"periodic"`` (default 16).
        sigma: the standard deviation of the initial frequencies of ``"periodic"`` (default 1).
        validate_args: ``None`` (default): check the arguments of every call (their values as
            :func:`cauchylin.set_validate_args` says); ``False``: no checks, for a model that
            checks its inputs once at its own entry and calls this layer with them.
        generator: optional ``torch.Generator`` for the random initialisations.
        device: device of the parameters.
        dtype: dtype of the parameters (default: the global default dtype).

    Attributes:
        w_num: ``nn.Parameter`` of shape ``[H]``.
        num_token_delta: ``nn.Parameter`` of shape ``[H]`` (with ``token_offset=True``).
        frequencies: ``nn.Parameter`` ``c`` of shape ``[K]`` (``"periodic"``; else None).
        periodic_weight: ``nn.Parameter`` ``P`` of shape ``[H, 2K]`` (``"periodic"``; else None).

    Raises:
        ValueError: ``hidden_size < 1``, an unknown ``init`` or ``encoding``, ``frequencies < 1``
            or ``sigma`` not positive and finite.

    Example:
        >>> import torch
        >>> from cauchylin.nn import NumericEmbedding
        >>> emb = NumericEmbedding(4, generator=torch.Generator().manual_seed(0))
        >>> base = torch.zeros(1, 3, 4)
        >>> out = emb(base, torch.tensor([[0.0, 99.9, -1.0]]))
        >>> bool((out[0, 0] == 0).all()), round(out[0, 1].norm().item(), 4)  # ln(100.9)
        (True, 4.6141)
        >>> emb = NumericEmbedding(4, init="zeros", token_offset=True)
        >>> mask = torch.tensor([[False, True, False]])
        >>> bool(torch.equal(emb(base, torch.zeros(1, 3), mask), base))  # delta starts at 0
        True
        >>> emb = NumericEmbedding(4, encoding="periodic", frequencies=3)
        >>> emb.frequencies.shape, emb.periodic_weight.shape, bool((emb.encode(torch.tensor(0.0)) == 0).all())
        (torch.Size([3]), torch.Size([4, 6]), True)
    """

    def __init__(
        self,
        hidden_size: int,
        *,
        init: str = "random_unit",
        token_offset: bool = False,
        encoding: str = "linear",
        frequencies: int = 16,
        sigma: float = 1.0,
        validate_args: bool | None = None,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.hidden_size = positive_int("hidden_size", hidden_size)
        self.init = str(one_of("init", init, W_NUM_INITS))
        self.encoding = str(one_of("encoding", encoding, NUMERIC_ENCODINGS))
        self.sigma = finite_number("sigma", sigma, minimum=0.0, exclusive=True)
        self.validate_args = validate_args
        self.w_num = nn.Parameter(torch.empty(hidden_size, device=device, dtype=dtype))
        self.num_token_delta: nn.Parameter | None = None
        if token_offset:
            self.num_token_delta = nn.Parameter(
                torch.zeros(hidden_size, device=device, dtype=dtype)
            )
        self.frequencies: nn.Parameter | None = None
        self.periodic_weight: nn.Parameter | None = None
        if self.encoding == "periodic":
            k = positive_int("frequencies", frequencies)
            self.frequencies = nn.Parameter(torch.empty(k, device=device, dtype=dtype))
            self.periodic_weight = nn.Parameter(
                torch.empty(hidden_size, 2 * k, device=device, dtype=dtype)
            )
        self.reset_parameters(generator=generator)

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """Re-draw ``w_num`` according to ``self.init`` (see the class docstring); ``delta = 0``.

        The random draw is made in float64 on the CPU (so a CPU generator works for any device)
        and normalised there before the cast, so the ``"random_unit"`` norm is 1 to the rounding
        of the parameter dtype. With ``"periodic"``, ``c`` and then ``P`` are drawn after
        ``w_num`` (as the class docstring says; also with ``init="zeros"``).

        Args:
            generator: optional CPU ``torch.Generator`` for the draw (ignored by ``"zeros"``).

        Example:
            >>> import torch
            >>> from cauchylin.nn import NumericEmbedding
            >>> emb = NumericEmbedding(8)
            >>> emb.reset_parameters(torch.Generator().manual_seed(3))
            >>> first = emb.w_num.detach().clone()
            >>> emb.reset_parameters(torch.Generator().manual_seed(3))
            >>> bool(torch.equal(emb.w_num, first)), round(first.norm().item(), 5)  # unit norm
            (True, 1.0)
        """
        h = self.hidden_size
        with torch.no_grad():
            if self.num_token_delta is not None:
                self.num_token_delta.zero_()
            if self.init == "zeros":
                self.w_num.zero_()
            else:
                draw = torch.randn(h, dtype=torch.float64, device="cpu", generator=generator)
                if self.init == "random_unit":
                    draw = draw / torch.linalg.vector_norm(draw)
                else:
                    draw = draw / math.sqrt(h)
                self.w_num.copy_(draw.to(self.w_num.dtype))
            if self.frequencies is not None and self.periodic_weight is not None:
                k = self.frequencies.shape[0]
                c = torch.randn(k, dtype=torch.float64, device="cpu", generator=generator)
                self.frequencies.copy_((c * self.sigma).to(self.frequencies.dtype))
                p = torch.randn(h, 2 * k, dtype=torch.float64, device="cpu", generator=generator)
                scaled = p / math.sqrt(2 * k * h)
                self.periodic_weight.copy_(scaled.to(self.periodic_weight.dtype))

    def encode(self, numeric_values: torch.Tensor) -> torch.Tensor:
        r"""The numeric encoding ``phi(v) = sign(v) ln(1 + |v|) w_num`` (plus the periodic term).

        Computed in ``float32`` (``float64`` when ``w_num`` or the values are ``float64``) with
        ``log1p``; ``phi(0)`` is exactly zero (``sign(0) = 0``). Integer values are accepted.

        Args:
            numeric_values: ``[...]`` the value at each position (0 where there is no number).

        Returns:
            ``[..., H]`` in the compute dtype (``float32`` unless ``float64`` is involved).

        Raises:
            ValueError: ``numeric_values`` is not a tensor, or (while validating, see
                :func:`cauchylin.set_validate_args`) holds NaN or an infinity.

        Example:
            >>> import torch
            >>> from cauchylin.nn import NumericEmbedding
            >>> emb = NumericEmbedding(2, init="zeros")
            >>> with torch.no_grad():
            ...     _ = emb.w_num.copy_(torch.tensor([1.0, -1.0]))
            >>> emb.encode(torch.tensor([0.0, -3.0]))
            tensor([[ 0.0000, -0.0000],
                    [-1.3863,  1.3863]], grad_fn=<MulBackward0>)
        """
        if self.validate_args is not False:
            self._check_values(require_tensor("numeric_values", numeric_values))
        return self._phi(numeric_values)

    def _check_values(self, numeric_values: torch.Tensor) -> None:
        if is_validating(self.validate_args) and (
            numeric_values.is_floating_point() or numeric_values.is_complex()
        ):
            check_finite("numeric_values", numeric_values)

    def _phi(self, numeric_values: torch.Tensor) -> torch.Tensor:
        dtype = torch.promote_types(working_dtype(self.w_num), working_dtype(numeric_values))
        v = numeric_values.to(device=self.w_num.device, dtype=dtype)
        magnitude = torch.sign(v) * torch.log1p(v.abs())
        out = magnitude.unsqueeze(-1) * self.w_num.to(dtype)
        if self.frequencies is None or self.periodic_weight is None:
            return out
        angle = (2 * math.pi) * magnitude.unsqueeze(-1) * self.frequencies.to(v.device, dtype)
        features = torch.cat([torch.sin(angle), torch.cos(angle) - 1], dim=-1)
        return out + features @ self.periodic_weight.to(v.device, dtype).T

    def forward(
        self,
        base_embeds: torch.Tensor,
        numeric_values: torch.Tensor,
        num_token_mask: torch.Tensor | None = None,
        *,
        validate_args: bool | None = None,
    ) -> torch.Tensor:
        """The enhanced embedding ``base_embeds (+ delta at <NUM>) + phi(numeric_values)``.

        The offset and the encoding are each added in the compute dtype and rounded once to
        ``base_embeds``' dtype; where ``numeric_values`` is 0 (and no ``<NUM>`` is marked) the
        output equals ``base_embeds`` exactly.

        Args:
            base_embeds: ``[..., H]`` token embeddings.
            numeric_values: ``[...]`` (``base_embeds`` without its last dimension, or
                broadcastable to it).
            num_token_mask: ``[...]`` bool, True at ``<NUM>`` positions (``base_embeds`` without
                its last dimension), or None; needs ``token_offset=True``.
            validate_args: check the inputs (None: the layer's ``validate_args``; False skips
                the checks for inputs the caller already checked, e.g. a generation loop's).

        Returns:
            ``[..., H]`` with ``base_embeds``' dtype and shape.

        Raises:
            ValueError: the last dimension of ``base_embeds`` is not ``H``, ``numeric_values`` does
                not broadcast to ``base_embeds.shape[:-1]``, ``num_token_mask`` of another shape or
                without ``token_offset``, or non-finite values (see :meth:`encode`). Nothing is
                checked with ``validate_args=False``.

        Example:
            >>> import torch
            >>> from cauchylin.nn import NumericEmbedding
            >>> emb = NumericEmbedding(3, generator=torch.Generator().manual_seed(0))
            >>> base = torch.randn(2, 4, 3, dtype=torch.bfloat16)
            >>> out = emb(base, torch.tensor([[0.0, 1.5, 0.0, 0.0], [0.0, 0.0, 0.0, -2e3]]))
            >>> out.dtype, bool(torch.equal(out[0, 0], base[0, 0]))
            (torch.bfloat16, True)
        """
        if (self.validate_args if validate_args is None else validate_args) is not False:
            self._check_forward(base_embeds, numeric_values, num_token_mask)
        out = base_embeds
        if num_token_mask is not None and self.num_token_delta is not None:
            delta = (
                num_token_mask.unsqueeze(-1).to(self.num_token_delta.dtype) * self.num_token_delta
            )
            dtype = torch.promote_types(delta.dtype, out.dtype)
            out = (out.to(dtype) + delta.to(dtype)).to(base_embeds.dtype)
        phi = self._phi(numeric_values)
        dtype = torch.promote_types(phi.dtype, out.dtype)
        return (out.to(dtype) + phi).to(base_embeds.dtype)

    def _check_forward(
        self,
        base_embeds: torch.Tensor,
        numeric_values: torch.Tensor,
        num_token_mask: torch.Tensor | None,
    ) -> None:
        if not isinstance(base_embeds, torch.Tensor) or base_embeds.ndim < 1:
            raise ValueError("base_embeds must be a tensor of shape [..., H]")
        if base_embeds.shape[-1] != self.hidden_size:
            raise ValueError(
                f"base_embeds has last dimension {base_embeds.shape[-1]}, expected hidden_size "
                f"{self.hidden_size} (base_embeds shape {tuple(base_embeds.shape)})"
            )
        require_tensor("numeric_values", numeric_values)
        batch = base_embeds.shape[:-1]
        try:
            ok = torch.broadcast_shapes(numeric_values.shape, batch) == batch
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(
                f"numeric_values shape {tuple(numeric_values.shape)} must match (or broadcast to) "
                f"base_embeds without its last dimension, {tuple(batch)}"
            )
        if num_token_mask is not None:
            if self.num_token_delta is None:
                raise ValueError("num_token_mask needs a NumericEmbedding with token_offset=True")
            if tuple(require_tensor("num_token_mask", num_token_mask).shape) != tuple(batch):
                raise ValueError(
                    f"num_token_mask shape {tuple(num_token_mask.shape)} must equal base_embeds "
                    f"without its last dimension, {tuple(batch)}"
                )
        self._check_values(numeric_values)

    def extra_repr(self) -> str:
        """The settings shown in the module's ``repr``.

        Returns:
            ``"hidden_size=H, init='...'"`` (and the periodic settings).
        """
        offset = ", token_offset=True" if self.num_token_delta is not None else ""
        periodic = ""
        if self.frequencies is not None:
            k = self.frequencies.shape[0]
            periodic = f", encoding='periodic', frequencies={k}, sigma={self.sigma}"
        return f"hidden_size={self.hidden_size}, init={self.init!r}{offset}{periodic}"
