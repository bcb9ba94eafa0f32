r"""``NumericEmbedding``: the token embedding plus a learned direction scaled by the number's size.

``e = base_embed + sign(v) ln(1 + |v|) w_num`` at every position, ``v = 0`` (no change) where there
is no number.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from cauchylin._special import working_dtype
from cauchylin._validation import (
    check_finite,
    is_validating,
    one_of,
    positive_int,
    require_tensor,
)

__all__ = ["W_NUM_INITS", "NumericEmbedding"]

W_NUM_INITS: tuple[str, ...] = ("random_unit", "normal", "zeros")
"""The initialisations of ``w_num`` (see :class:`NumericEmbedding`)."""


class NumericEmbedding(nn.Module):
    r"""Numeric-aware embedding: adds ``phi(v) = sign(v) ln(1 + |v|) w_num`` to the token embedding.

    .. math::

        e_i = \mathrm{base}_i + [x_i = \mathrm{NUM}]\,\delta + \phi(v_i), \qquad
        \phi(v) = \operatorname{sign}(v)\,\ln(1 + |v|)\; w_\mathrm{num}

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
        validate_args: ``None`` (default): check the arguments of every call (their values as
            :func:`cauchylin.set_validate_args` says); ``False``: no checks, for a model that
            checks its inputs once at its own entry and calls this layer with them.
        generator: optional ``torch.Generator`` for the random initialisations.
        device: device of the parameters.
        dtype: dtype of the parameters (default: the global default dtype).

    Attributes:
        w_num: ``nn.Parameter`` of shape ``[H]``.
        num_token_delta: ``nn.Parameter`` of shape ``[H]`` (with ``token_offset=True``).

    Raises:
        ValueError: ``hidden_size < 1`` or an unknown ``init``.

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
    """

    def __init__(
        self,
        hidden_size: int,
        *,
        init: str = "random_unit",
        token_offset: bool = False,
        validate_args: bool | None = None,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.hidden_size = positive_int("hidden_size", hidden_size)
        self.init = str(one_of("init", init, W_NUM_INITS))
        self.validate_args = validate_args
        self.w_num = nn.Parameter(torch.empty(hidden_size, device=device, dtype=dtype))
        self.num_token_delta: nn.Parameter | None = None
        if token_offset:
            self.num_token_delta = nn.Parameter(
                torch.zeros(hidden_size, device=device, dtype=dtype)
            )
        self.reset_parameters(generator=generator)

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """Re-draw ``w_num`` according to ``self.init`` (see the class docstring); ``delta = 0``.

        The random draw is made in float64 on the CPU (so a CPU generator works for any device)
        and normalised there before the cast, so the ``"random_unit"`` norm is 1 to the rounding
        of the parameter dtype.

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
                return
            draw = torch.randn(h, dtype=torch.float64, device="cpu", generator=generator)
            if self.init == "random_unit":
                draw = draw / torch.linalg.vector_norm(draw)
            else:
                draw = draw / math.sqrt(h)
            self.w_num.copy_(draw.to(self.w_num.dtype))

    def encode(self, numeric_values: torch.Tensor) -> torch.Tensor:
        r"""The numeric encoding ``phi(v) = sign(v) ln(1 + |v|) w_num``.

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
        return magnitude.unsqueeze(-1) * self.w_num.to(dtype)

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
            ``"hidden_size=H, init='...'"``.
        """
        offset = ", token_offset=True" if self.num_token_delta is not None else ""
        return f"hidden_size={self.hidden_size}, init={self.init!r}{offset}"
