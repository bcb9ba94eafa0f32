"""Training losses of the causal decision heads (the formulas: ``docs/concepts.md``).

* :func:`ovr_bce` — the one-vs-rest binary cross-entropy of Cauchy class scores, summed over the
  vocabulary, in log space (no ``log(p + eps)``), without a one-hot tensor.
* :func:`ovr_bce_fused` — the same loss straight from the Abduction output and the Action
  weights, chunked so that no ``[N, V]`` tensor is ever held (forward and backward).
* :func:`gated_regression_loss` — the Cauchy negative log-likelihood of the regression value,
  gated by the probability of ``<NUM>``, with an optional context-scaled location gradient
  (:func:`context_weights`).
* :func:`causal_lm_loss` — ``L_cls_mean + lambda * L_reg_eff``.

The one-vs-rest probability of class ``k`` at position ``i`` is
``P_ik = P(S_ik > tau_k) = 1/2 + atan(z_ik)/pi`` with ``z_ik = (loc_S[i, k] - tau_k) / scale_S[i, k]``.
Per position

    L_i = -sum_k [y_ik log P_ik + (1 - y_ik) log(1 - P_ik)]
        = -sum_k log(1 - P_ik) + (log(1 - P_iy) - log P_iy),

where ``y`` is the label; the second form needs one entry per position at the label instead of a
one-hot tensor. It is evaluated as ``-sum_k l_ik`` with ``l_ik = log(1 - P_ik)`` except
``l_iy = log P_iy`` (one scatter per row), which is the same sum without the floating-point
cancellation of ``-log(1 - P_iy) + log(1 - P_iy)`` when the label is confidently right.
``log P`` and ``log(1 - P)`` come from :func:`cauchylin._special.ovr_log_probs_std`, accurate to
an ulp for ``|z|`` up to ``1e30`` and beyond, with finite derivatives.

Half-precision inputs (``float16``, ``bfloat16``) are computed in ``float32`` and the losses are
returned in ``float32``; ``float64`` inputs give ``float64`` losses.

In eager execution the OvR losses gather the counted positions (a data-dependent number of rows)
and :func:`ovr_bce_fused` runs its chunked kernel. Under a ``torch.func`` transform (``vmap``,
``grad``, ``jacrev``, ``jacfwd``, ``jvp``) and while a graph is captured (``torch.compile``,
``torch.export``) neither can run -- a gather of a data-dependent size has no fixed shape, and the
kernel reads the labels on the host and writes into tile buffers -- so the same losses are
computed with fixed shapes: every row is evaluated on a stand-in (label 0, the threshold as
location, scale 1) where it does not count, and masked out of the sum (``torch.where``: no value
and no gradient leaks from a position that does not count). :func:`ovr_bce_fused` then forms
``loc_S``/``scale_S`` (``[N, V]``) like :func:`ovr_bce`. The value checks and the label range check
read the values underneath a transform's wrappers
(:func:`cauchylin._validation.host_values`) and are skipped while a graph is captured.
"""

from __future__ import annotations

import math
from typing import Final, NamedTuple

import torch

from cauchylin._fused_ovr import default_chunks, fused_ovr_rows
from cauchylin._special import LOG_PI, log1p_square, ovr_log_probs_std, working_dtype
from cauchylin._validation import (
    check_binary_mask,
    check_finite,
    check_positive_finite,
    finite_number,
    host_values,
    integer,
    is_tracing,
    is_validating,
    transforms_active,
)

__all__ = [
    "CausalLMLoss",
    "OvRLoss",
    "RegLoss",
    "causal_lm_loss",
    "context_weights",
    "gated_regression_loss",
    "last_number_weights",
    "ovr_bce",
    "ovr_bce_fused",
]


class OvRLoss(NamedTuple):
    """Result of :func:`ovr_bce` / :func:`ovr_bce_fused`: the one-vs-rest loss and its parts.

    ``L_i = -sum_k [y_ik log P_ik + (1 - y_ik) log(1 - P_ik)]`` per counted position ``i``.

    Attributes:
        mean: scalar, ``sum(per_position) / count`` (``0.0`` when ``count == 0``).
        per_position: ``[...]`` (the labels' shape), ``L_i`` at counted positions, ``0`` elsewhere.
        count: scalar ``int64`` tensor, the number of counted positions.

    Example:
        >>> import torch
        >>> from cauchylin.losses import ovr_bce
        >>> loc, scale = torch.zeros(2, 2), torch.ones(2, 2)  # every P = 1/2
        >>> out = ovr_bce(loc, scale, torch.tensor([1, -100]), threshold=0.0)
        >>> out.per_position  # 2 log 2 at the counted position, 0 at the ignored one
        tensor([1.3863, 0.0000])
        >>> mean, per_position, count = out  # a NamedTuple
        >>> mean, count
        (tensor(1.3863), tensor(1))
    """

    mean: torch.Tensor
    per_position: torch.Tensor
    count: torch.Tensor  # type: ignore[assignment]  # (a field; shadows tuple.count)


class RegLoss(NamedTuple):
    """Result of :func:`gated_regression_loss`: the gated Cauchy NLL and its parts.

    ``L_nll_i = log(pi scale_Y_i) + log(1 + ((y_i - loc_Y_i)/scale_Y_i)^2)``, weighted by the gate
    ``alpha + (1 - alpha) P_num_i`` at ``<NUM>`` positions.

    Attributes:
        mean: scalar, ``sum(per_position) / count`` (exactly ``0.0`` when ``count == 0``).
        per_position: ``[...]``, ``gate_i * L_nll_i`` (``0`` where ``num_mask`` is 0).
        count: scalar ``int64`` tensor, the number of ``<NUM>`` targets.

    Example:
        >>> import math, torch
        >>> from cauchylin.losses import gated_regression_loss
        >>> loc, scale, y = torch.zeros(2), torch.ones(2), torch.zeros(2)
        >>> mask, log_p_num = torch.tensor([True, False]), torch.full((2,), math.log(0.5))
        >>> out = gated_regression_loss(loc, scale, y, mask, log_p_num)  # alpha = 0: gate = P_num
        >>> out.per_position  # 0.5 * log(pi) at the <NUM> target, 0 elsewhere
        tensor([0.5724, 0.0000])
        >>> out.mean, out.count
        (tensor(0.5724), tensor(1))
    """

    mean: torch.Tensor
    per_position: torch.Tensor
    count: torch.Tensor  # type: ignore[assignment]  # (a field; shadows tuple.count)


class CausalLMLoss(NamedTuple):
    """Result of :func:`causal_lm_loss`: ``total = cls.mean + reg_weight * reg.mean`` and parts.

    Attributes:
        total: scalar, the training objective ``L = L_cls_mean + lambda * L_reg_eff`` (call
            ``backward()`` on it).
        cls: the :class:`OvRLoss` it was built from.
        reg: the :class:`RegLoss` it was built from.

    Example:
        >>> import torch
        >>> from cauchylin.losses import OvRLoss, RegLoss, causal_lm_loss
        >>> cls = OvRLoss(torch.tensor(2.0), torch.tensor([2.0, 0.0]), torch.tensor(1))
        >>> reg = RegLoss(torch.tensor(0.5), torch.tensor([0.0, 0.5]), torch.tensor(1))
        >>> loss = causal_lm_loss(cls, reg, reg_weight=0.1)
        >>> loss.total  # 2.0 + 0.1 * 0.5
        tensor(2.0500)
        >>> loss.cls is cls, loss.reg.count
        (True, tensor(1))
    """

    total: torch.Tensor
    cls: OvRLoss
    reg: RegLoss


# --------------------------------------------------------------------------------------------
# argument handling
# --------------------------------------------------------------------------------------------


def _shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(t.shape)


def _require_tensor(name: str, t: object) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return t


def _require_float(name: str, t: torch.Tensor) -> None:
    if not t.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")


def _counted_positions(
    labels: torch.Tensor,
    attention_mask: torch.Tensor | None,
    ignore_index: int,
    batch_shape: tuple[int, ...],
    batch_name: str,
    validate: bool,
) -> torch.Tensor:
    """Flat boolean mask of the positions that count (label kept and attention on).

    When validating, ``attention_mask`` must hold only 0/1 (a NaN would count as "on").
    """
    _require_tensor("labels", labels)
    if labels.dtype == torch.bool or labels.is_floating_point() or labels.is_complex():
        raise ValueError(f"labels must be an integer tensor, got dtype {labels.dtype}")
    if _shape(labels) != batch_shape:
        raise ValueError(
            f"labels shape {_shape(labels)} must equal {batch_name} without its last "
            f"dimension, {batch_shape}"
        )
    counted = labels != ignore_index
    if attention_mask is not None:
        _require_tensor("attention_mask", attention_mask)
        if _shape(attention_mask) != batch_shape:
            raise ValueError(
                f"attention_mask shape {_shape(attention_mask)} must equal the labels shape "
                f"{batch_shape}"
            )
        if validate:
            check_binary_mask("attention_mask", attention_mask)
        counted = counted & (attention_mask != 0)
    return counted.reshape(-1)


def _static_shapes() -> bool:
    """Whether the losses must keep fixed shapes (no gather of the counted rows, no fused
    kernel): under a ``torch.func`` transform or while a graph is captured."""
    return is_tracing() or transforms_active()


def _check_label_range(
    labels: torch.Tensor, num_classes: int, counted: torch.Tensor | None = None
) -> None:
    """Refuse a label outside ``[0, V)`` (at a counted position when ``counted`` is given)."""
    if labels.numel() == 0:
        return
    bad = (labels < 0) | (labels >= num_classes)
    if counted is not None:
        bad = bad & counted
    # The offending labels themselves, 0 elsewhere (0 is a valid label, so never offending); one
    # tensor read underneath a torch.func transform, whatever its batch layout there.
    offending = host_values(torch.where(bad, labels, torch.zeros_like(labels)))
    if offending is None:
        return  # (a graph capture: nothing to read)
    if bool((offending != 0).any()):
        value = int(offending[offending != 0][0])
        raise ValueError(
            f"labels must lie in [0, {num_classes}) or equal ignore_index at counted positions; "
            f"found {value} (labels shape {_shape(labels)})"
        )


def _threshold_tensor(
    threshold: torch.Tensor | float, num_classes: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    if isinstance(threshold, torch.Tensor):
        if threshold.dim() != 0 and _shape(threshold) != (num_classes,):
            raise ValueError(
                f"threshold must be a scalar (shape ()) or have shape ({num_classes},) "
                f"(one per class), got shape {_shape(threshold)}"
            )
        if not threshold.is_floating_point():
            threshold = threshold.to(torch.get_default_dtype())
        return threshold.to(device=device, dtype=dtype)
    if isinstance(threshold, (int, float)) and not isinstance(threshold, bool):
        return torch.tensor(float(threshold), dtype=dtype, device=device)
    raise ValueError(f"threshold must be a float or a tensor, got {type(threshold).__name__}")


def _screen_finite(name: str, t: torch.Tensor, *, positive: bool = False) -> None:
    """Value check that needs one reduction pass and no tensor of ``t``'s size.

    ``aminmax`` propagates NaN, so finite extremes mean every entry is finite; only when the
    screen fails does the precise (allocating) check run to produce the message.
    """
    values = host_values(t) if t.numel() > 0 else None
    if values is None:
        return
    lo, hi = torch.aminmax(values)
    ok = torch.isfinite(lo) & torch.isfinite(hi)
    if positive:
        ok = ok & (lo > 0)
    if not bool(ok):
        if positive:
            check_positive_finite(name, t.detach())
        else:
            check_finite(name, t.detach())


def _any_zero_row(weight: torch.Tensor) -> bool | None:
    """Whether some row of ``weight`` is all zero (over every member of a ``torch.func`` batch);
    ``None`` while a graph is captured."""
    row_min, row_max = torch.aminmax(weight, dim=-1)
    values = host_values((row_min == 0) & (row_max == 0))
    return None if values is None else bool(values.any())


def _scatter_rows(
    rows: torch.Tensor, index: torch.Tensor | None, shape: tuple[int, ...]
) -> torch.Tensor:
    """Per-position tensor of ``shape`` holding ``rows`` at ``index`` (flat) and 0 elsewhere."""
    if index is None:
        return rows.reshape(shape)
    total = 1
    for d in shape:
        total *= d
    out = rows.new_zeros(total)
    return out.index_put((index,), rows).reshape(shape)


def _require_classes(name: str, v: int, shape: tuple[int, ...]) -> None:
    if v < 1:
        raise ValueError(
            f"{name} has V = {v} classes (shape {shape}); the one-vs-rest loss needs at least one"
        )


def _mean(rows: torch.Tensor, n: int) -> torch.Tensor:
    # sum() of an empty tensor is 0 and keeps the graph, so an all-ignored batch gives 0.0
    # with zero gradients instead of 0/0.
    return rows.sum() / max(n, 1)


def _ovr_rows_static(
    loc: torch.Tensor,
    scale: torch.Tensor,
    lab: torch.Tensor,
    counted: torch.Tensor,
    thr: torch.Tensor,
    dt: torch.dtype,
    validate: bool,
    names: tuple[str, str],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The OvR loss of ``[N, V]`` scores with fixed shapes: ``(mean, rows [N], count)``.

    Rows that do not count are evaluated on a stand-in (label 0, ``loc = threshold``,
    ``scale = 1``) and set to 0; the label's ``log(1 - P)`` is swapped for ``log P`` with a
    ``scatter`` (functional, no in-place write into a batched tensor).
    """
    keep = counted.unsqueeze(-1)
    _check_label_range(lab, loc.shape[-1], counted)
    if validate:
        zero = torch.zeros((), dtype=loc.dtype, device=loc.device)
        one = torch.ones((), dtype=scale.dtype, device=scale.device)
        _screen_finite(names[0], torch.where(keep, loc, zero))
        _screen_finite(names[1], torch.where(keep, scale, one), positive=True)
        _screen_finite("threshold", thr)
    safe_lab = torch.where(counted, lab, torch.zeros_like(lab)).to(torch.long).unsqueeze(-1)
    z = torch.where(
        keep, (loc.to(dt) - thr) / scale.to(dt), torch.zeros((), dtype=dt, device=loc.device)
    )
    log_p, log_1mp = ovr_log_probs_std(z)
    terms = log_1mp.scatter(-1, safe_lab, log_p.gather(-1, safe_lab))
    rows = torch.where(counted, -terms.sum(-1), torch.zeros((), dtype=dt, device=loc.device))
    count = counted.sum()
    return rows.sum() / count.clamp_min(1).to(dt), rows, count


# --------------------------------------------------------------------------------------------
# one-vs-rest classification loss
# --------------------------------------------------------------------------------------------


def ovr_bce(
    loc_S: torch.Tensor,
    scale_S: torch.Tensor,
    labels: torch.Tensor,
    threshold: torch.Tensor | float,
    *,
    ignore_index: int = -100,
    attention_mask: torch.Tensor | None = None,
    validate_args: bool | None = None,
) -> OvRLoss:
    """One-vs-rest binary cross-entropy of Cauchy class scores, summed over classes.

    With ``z_ik = (loc_S[i, k] - tau_k) / scale_S[i, k]`` and ``P_ik = 1/2 + atan(z_ik)/pi``::

        L_i = -sum_k log(1 - P_ik) + (log(1 - P_iy) - log P_iy),   y = labels[i],

    which equals ``-sum_k [y_ik log P_ik + (1 - y_ik) log(1 - P_ik)]`` for the one-hot ``y_ik``
    (never built: the label's ``log(1 - P)`` entry is swapped for ``log P`` by one scatter per
    row, which also avoids cancellation). Both logarithms are evaluated in log space, accurate
    to an ulp for ``|z|`` up to ``1e30`` and beyond, with finite, correctly signed gradients.
    Positions whose label is ``ignore_index`` or whose ``attention_mask`` is 0 do not count: their
    ``per_position`` entry is 0 and they receive zero gradient (only counted rows are gathered,
    so even NaN there cannot leak). ``mean`` averages over counted positions; an all-ignored
    batch gives ``mean == 0.0`` and ``count == 0`` (no NaN, zero gradients).

    Args:
        loc_S: ``[..., V]`` location of the class scores.
        scale_S: ``[..., V]`` scale of the class scores (``> 0``).
        labels: ``[...]`` integer labels in ``[0, V)`` or ``ignore_index``.
        threshold: the OvR thresholds ``tau``: a float, a scalar tensor or a ``[V]`` tensor
            (gradients flow into tensors that require them).
        ignore_index: label value of positions that do not count.
        attention_mask: optional ``[...]`` of 0/1 (or bool); positions where it is 0 do not
            count.
        validate_args: check values (positive finite scales, finite locations, a 0/1
            ``attention_mask``); ``None`` follows :func:`cauchylin.set_validate_args`. Shape
            checks and the label range always run.

    Returns:
        :class:`OvRLoss` ``(mean, per_position [...], count)``; losses are ``float32`` for
        half-precision and ``float32`` inputs, ``float64`` for ``float64`` inputs.

    Raises:
        ValueError: mismatched shapes, ``V = 0`` classes, a threshold that is neither ``()`` nor
            ``[V]``, a label outside ``[0, V)`` at a counted position, or (when validating) a
            non-positive or non-finite scale / non-finite location at a counted position, or an
            ``attention_mask`` holding values other than 0/1 (NaN included).

    Example:
        >>> import torch
        >>> loc, scale = torch.zeros(2, 3, 5), torch.ones(2, 3, 5)
        >>> labels = torch.tensor([[0, 1, -100], [4, 2, 3]])
        >>> out = ovr_bce(loc, scale, labels, threshold=0.0)
        >>> int(out.count), round(out.mean.item(), 4)   # every P = 1/2: 5 log 2 per position
        (5, 3.4657)
    """
    _require_tensor("loc_S", loc_S)
    _require_tensor("scale_S", scale_S)
    _require_float("loc_S", loc_S)
    _require_float("scale_S", scale_S)
    if loc_S.dim() < 1:
        raise ValueError(f"loc_S must have a class dimension [..., V], got shape {_shape(loc_S)}")
    if _shape(scale_S) != _shape(loc_S):
        raise ValueError(f"scale_S shape {_shape(scale_S)} must equal loc_S shape {_shape(loc_S)}")
    V = loc_S.shape[-1]
    _require_classes("loc_S", V, _shape(loc_S))
    batch_shape = _shape(loc_S)[:-1]
    validate = is_validating(validate_args)
    counted = _counted_positions(
        labels, attention_mask, ignore_index, batch_shape, "loc_S", validate
    )
    dt = working_dtype(loc_S, scale_S, threshold if isinstance(threshold, torch.Tensor) else loc_S)
    thr = _threshold_tensor(threshold, V, dt, loc_S.device)

    flat_labels = labels.reshape(-1)
    rows_total = counted.shape[0]
    loc = loc_S.reshape(rows_total, V)
    scale = scale_S.reshape(rows_total, V)
    lab = flat_labels
    if _static_shapes():
        mean, rows, count = _ovr_rows_static(
            loc, scale, lab, counted, thr, dt, validate, ("loc_S", "scale_S")
        )
        return OvRLoss(mean, rows.reshape(batch_shape), count)
    all_counted = bool(counted.all())
    index = None if all_counted else counted.nonzero().squeeze(1)
    if index is not None:
        loc, scale, lab = loc[index], scale[index], lab[index]
    _check_label_range(lab, V)
    if validate:
        _screen_finite("loc_S", loc)
        _screen_finite("scale_S", scale, positive=True)
        _screen_finite("threshold", thr)
    n = lab.shape[0]

    z = (loc.to(dt) - thr) / scale.to(dt)
    log_p, log_1mp = ovr_log_probs_std(z)
    # -sum_k log(1 - P_k) + (log(1 - P_y) - log P_y): the label's entry of log(1 - P) is swapped
    # for log P in place (one scatter per row, no one-hot), so the two log(1 - P_y) terms never
    # have to cancel in floating point.
    at_label = (torch.arange(n, device=lab.device), lab.to(torch.long))
    log_1mp.index_put_(at_label, log_p[at_label])
    rows = -log_1mp.sum(-1)
    per_position = _scatter_rows(rows, index, batch_shape)
    count = torch.tensor(n, dtype=torch.long, device=loc_S.device)
    return OvRLoss(_mean(rows, n), per_position, count)


def _parse_chunks(
    chunk_size: int | tuple[int, int] | None, n: int, v: int, device: torch.device
) -> tuple[int, int]:
    """``(tokens per tile, classes per tile)``, clamped to ``[1, n]`` and ``[1, v]``.

    A tile never exceeds the data: ``chunk_size=10**9`` gives tiles of ``N x V`` at most, not
    buffers of a billion columns.
    """
    rc, vc = default_chunks(max(n, 1), v, device)

    def clamp(r: int, c: int) -> tuple[int, int]:
        return max(1, min(r, n)), max(1, min(c, v))

    if chunk_size is None:
        return clamp(rc, vc)
    if isinstance(chunk_size, int) and not isinstance(chunk_size, bool):
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive int, got {chunk_size}")
        return clamp(rc, chunk_size)
    if (
        isinstance(chunk_size, (tuple, list))
        and len(chunk_size) == 2
        and all(isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in chunk_size)
    ):
        return clamp(int(chunk_size[0]), int(chunk_size[1]))
    raise ValueError(
        "chunk_size must be None, a positive int (classes per chunk) or a pair "
        f"(tokens per chunk, classes per chunk) of positive ints, got {chunk_size!r}"
    )


def ovr_bce_fused(
    loc_U: torch.Tensor,
    scale_U: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    threshold: torch.Tensor | float,
    labels: torch.Tensor,
    *,
    ignore_index: int = -100,
    attention_mask: torch.Tensor | None = None,
    chunk_size: int | tuple[int, int] | None = None,
    validate_args: bool | None = None,
    eager_grad: bool = True,
) -> OvRLoss:
    """:func:`ovr_bce` of the linear map of ``U``, without ever holding an ``[N, V]`` tensor.

    The class scores are the closed-form image of ``U ~ Cauchy(loc_U, scale_U)`` under
    ``nn.Linear``-style ``weight``/``bias``::

        loc_S = loc_U @ weight.T + bias,    scale_S = scale_U @ |weight|.T,

    and the loss is exactly that of :func:`ovr_bce` on them (same ``L_i`` formula, same
    counting rules). Instead of materialising ``loc_S``/``scale_S``, the counted rows are
    gathered and the vocabulary is swept in tiles of ``token_chunk x vocab_chunk``: the outer
    loop runs over class tiles (``|W|`` formed once per tile), the inner over token tiles, and
    the per-element work (``z``, ``log(1 - P)``, ``dL/dz``) is fused into preallocated tile
    buffers. Peak extra memory is a few tiles plus the gradients themselves (``[V, C]`` for the
    weight). Gradients flow to ``loc_U``, ``scale_U``, ``weight``, ``bias`` and ``threshold``
    (scalar or per class); in standard mode pass the *total* scale ``scale_U + |b_noise|`` so that
    autograd carries the gradient on to ``b_noise``.

    When gradients are required the forward pass computes them for ``mean`` right away (the
    backward pass then only rescales). Differentiating ``per_position`` (or walking the graph a
    second time with ``retain_graph``) is supported too: the backward pass then recomputes the
    tiles with the incoming per-position weights (two extra GEMMs per tile). Double backward is
    not supported.

    Args:
        loc_U: ``[..., C]`` location of the individual representation.
        scale_U: ``[..., C]`` total scale (``> 0``).
        weight: ``[V, C]`` classification weight (any float dtype; half precision is read
            tile by tile in ``float32``).
        bias: ``[V]`` or ``None``.
        threshold: a float, a scalar tensor or a ``[V]`` tensor.
        labels: ``[...]`` integer labels in ``[0, V)`` or ``ignore_index``.
        ignore_index: label value of positions that do not count.
        attention_mask: optional ``[...]`` of 0/1 (or bool); positions where it is 0 do not
            count.
        chunk_size: ``None`` (tiles of about 2**20 elements on CPU), an int (classes per tile)
            or a pair ``(tokens per tile, classes per tile)``; tiles are clamped to the counted
            positions and ``V``.
        validate_args: value checks as in :func:`ovr_bce` (on ``loc_U``, ``scale_U``, ``weight``,
            ``bias``, ``threshold``, ``attention_mask``); ``None`` follows the global setting.
        eager_grad: compute the gradients of ``mean`` in the forward pass (default). ``False``
            defers all gradient work to the backward pass (two extra GEMMs per tile).

    Returns:
        :class:`OvRLoss` ``(mean, per_position [...], count)``, equal to :func:`ovr_bce` on the
        materialised scores to float32 rounding.

    Raises:
        ValueError: mismatched shapes (``scale_U`` vs ``loc_U``, ``weight`` vs ``C``, ``bias`` vs
            ``V``, labels), ``C = 0`` or ``V = 0``, a bad threshold shape or ``chunk_size``, a
            label outside ``[0, V)`` at a counted position, or (when validating) non-positive /
            non-finite scales, non-finite parameters or an ``attention_mask`` other than 0/1.

    Example:
        >>> import torch
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> loc_U, scale_U = torch.randn(2, 4, 8), torch.rand(2, 4, 8) + 0.5
        >>> W, b = torch.randn(50, 8), torch.zeros(50)
        >>> labels = torch.randint(0, 50, (2, 4))
        >>> fused = ovr_bce_fused(loc_U, scale_U, W, b, 1.0, labels, chunk_size=(3, 16))
        >>> plain = ovr_bce(loc_U @ W.T + b, scale_U @ W.abs().T, labels, 1.0)
        >>> bool(torch.allclose(fused.mean, plain.mean))
        True
    """
    C, V = _fused_shapes(loc_U, scale_U, weight, bias)
    batch_shape = _shape(loc_U)[:-1]
    validate = is_validating(validate_args)
    counted = _counted_positions(
        labels, attention_mask, ignore_index, batch_shape, "loc_U", validate
    )
    dt = working_dtype(loc_U, scale_U, weight)
    device = loc_U.device
    thr = _threshold_tensor(threshold, V, dt, device)

    rows_total = counted.shape[0]
    x = loc_U.reshape(rows_total, C)
    s = scale_U.reshape(rows_total, C)
    lab = labels.reshape(-1)
    if _static_shapes():
        # The chunked kernel cannot run here (see the module docstring): the scores themselves.
        mean, rows, count = _fused_static(x, s, weight, bias, lab, counted, thr, dt, validate)
        return OvRLoss(mean, rows.reshape(batch_shape), count)
    all_counted = bool(counted.all())
    index = None if all_counted else counted.nonzero().squeeze(1)
    if index is not None:
        x, s, lab = x[index], s[index], lab[index]
    _check_label_range(lab, V)
    if validate:
        _screen_finite("loc_U", x)
        _screen_finite("scale_U", s, positive=True)
        _screen_finite("weight", weight)
        # A zero row gives scale_S = |W_k| . scale_U = 0 for class k: a point mass whose OvR
        # probability is a step, which the plain path refuses as a non-positive scale_S.
        row_min, row_max = torch.aminmax(weight, dim=-1)  # no weight-sized temporary
        zero_rows = ((row_min == 0) & (row_max == 0)).nonzero().flatten()
        if zero_rows.numel():
            raise ValueError(
                f"weight has {zero_rows.numel()} all-zero row(s) (first: {zero_rows[:5].tolist()}; "
                f"weight shape {_shape(weight)}): those classes would have scale_S = 0"
            )
        if bias is not None:
            _screen_finite("bias", bias)
        _screen_finite("threshold", thr)
    n = lab.shape[0]
    chunks = _parse_chunks(chunk_size, n, V, device)

    b = None if bias is None else bias.to(dt)
    mean, rows = fused_ovr_rows(
        x.to(dt).contiguous(),
        s.to(dt).contiguous(),
        weight if weight.is_contiguous() else weight.contiguous(),
        b,
        thr,
        lab.to(torch.long),
        chunks,
        eager=eager_grad,
    )
    per_position = _scatter_rows(rows, index, batch_shape)
    count = torch.tensor(n, dtype=torch.long, device=device)
    return OvRLoss(mean, per_position, count)


def _fused_shapes(
    loc_U: torch.Tensor, scale_U: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> tuple[int, int]:
    """``(C, V)`` after checking the types and shapes of the fused loss's tensors."""
    for name, t in (("loc_U", loc_U), ("scale_U", scale_U), ("weight", weight)):
        _require_tensor(name, t)
        _require_float(name, t)
    if loc_U.dim() < 1:
        raise ValueError(f"loc_U must have a feature dimension [..., C], got shape {_shape(loc_U)}")
    if _shape(scale_U) != _shape(loc_U):
        raise ValueError(f"scale_U shape {_shape(scale_U)} must equal loc_U shape {_shape(loc_U)}")
    C = loc_U.shape[-1]
    if C < 1:
        raise ValueError(
            f"loc_U has C = 0 features (shape {_shape(loc_U)}): every class would have "
            "scale_S = |W_k| . scale_U = 0"
        )
    if weight.dim() != 2 or weight.shape[1] != C:
        raise ValueError(
            f"weight must have shape [V, C] with C = {C} (the last dimension of loc_U "
            f"{_shape(loc_U)}), got shape {_shape(weight)}"
        )
    V = weight.shape[0]
    _require_classes("weight", V, _shape(weight))
    if bias is not None:
        _require_tensor("bias", bias)
        _require_float("bias", bias)
        if _shape(bias) != (V,):
            raise ValueError(
                f"bias must have shape ({V},) to match weight {_shape(weight)}, "
                f"got shape {_shape(bias)}"
            )
    return C, V


def _fused_static(
    x: torch.Tensor,
    s: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    lab: torch.Tensor,
    counted: torch.Tensor,
    thr: torch.Tensor,
    dt: torch.dtype,
    validate: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fused loss where the chunked kernel cannot run (static shapes): the rows' scores
    ``loc_S``, ``scale_S`` formed in full, then the plain rows; ``(mean, rows, count)``."""
    if validate:
        _screen_finite("weight", weight)
        if bias is not None:
            _screen_finite("bias", bias)
        zero_row = _any_zero_row(weight)
        if zero_row is not None and zero_row:
            raise ValueError(
                f"weight has an all-zero row (weight shape {_shape(weight)}): that class "
                "would have scale_S = 0"
            )
    w = weight.to(dt)
    loc_S = torch.nn.functional.linear(x.to(dt), w, None if bias is None else bias.to(dt))
    scale_S = torch.nn.functional.linear(s.to(dt), w.abs())
    return _ovr_rows_static(loc_S, scale_S, lab, counted, thr, dt, validate, ("loc_U", "scale_U"))


# --------------------------------------------------------------------------------------------
# gated regression loss and the total
# --------------------------------------------------------------------------------------------


def gated_regression_loss(
    loc_Y: torch.Tensor,
    scale_Y: torch.Tensor,
    target_values: torch.Tensor,
    num_mask: torch.Tensor,
    log_p_num: torch.Tensor | None = None,
    *,
    alpha: float = 0.0,
    scale_power: float = 0.0,
    context: torch.Tensor | None = None,
    min_context_count: int = 3,
    scale_cutoff: float | None = None,
    weights: torch.Tensor | None = None,
    validate_args: bool | None = None,
) -> RegLoss:
    """Cauchy negative log-likelihood of the regression value, gated by ``P(<NUM>)``.

    Per position::

        L_nll_i = log(pi scale_Y_i) + log(1 + ((y_i - loc_Y_i) / scale_Y_i)^2)
        gate_i  = num_mask_i * (alpha + (1 - alpha) * P_num_i),   P_num_i = exp(log_p_num_i)
        L_reg_eff = sum_i w_i * gate_i * L_nll_i / sum_i num_mask_i

    with ``w_i = 1`` unless ``weights`` are given (e.g. :func:`last_number_weights`, which
    weighs each sequence's target number apart from the numbers before it).

    ``log(1 + r^2)`` is evaluated without overflow (:func:`cauchylin._special.log1p_square`).
    Gradients flow into ``loc_Y``, ``scale_Y`` and ``log_p_num`` (the gate is part of the loss,
    see ``docs/concepts.md``). With no ``<NUM>`` target the result is exactly ``0.0`` with zero
    gradients. Positions with ``num_mask == 0`` are replaced before any arithmetic, so their
    ``target_values`` (and ``log_p_num``) may hold anything, NaN included, without leaking into
    the loss or the gradients.

    **Context-scaled location gradient** (``scale_power = beta > 0``). The NLL's gradient with
    respect to ``loc_Y_i`` is ``-2 (y_i - loc_Y_i) / (s_i^2 + (y_i - loc_Y_i)^2)``: ``1/s``
    times a bounded function of the standardised residual, so numbers whose context fixes them
    to a small spread pull on the shared network ``1/s`` times harder than the others, whatever
    they carry. With ``beta > 0`` that gradient (and only it) is multiplied by::

        w_i = d_i^beta / mean_{j: num_mask_j} d_j^beta

    where ``d_i`` is the spread of the context of position ``i``: the median absolute deviation
    of the batch's targets that share its ``context`` key (for a Cauchy law the median absolute
    deviation is its scale) when at least ``min_context_count`` of them are in the batch, else
    the model's own detached ``scale_Y_i`` (also used for every position when ``context`` is
    None). ``beta = 2`` puts every context on the same footing: ``w_i`` times the gradient is
    the residual itself while it is small against the scale, a squared error in the value space
    (the Fisher-scaled step of a Cauchy location). The loss *value* and the gradients with
    respect to ``scale_Y`` and ``log_p_num`` are the plain NLL's: the weights are constants of
    the step that only precondition the location, so ``loc_Y`` and ``scale_Y`` stay the model's
    Cauchy parameters, fitted to the same likelihood, and its intervals keep their meaning.

    **Scale cutoff** (``scale_cutoff = k``). The NLL's gradient with respect to ``log scale_Y_i``
    is ``1 - 2 z_i^2 / (1 + z_i^2)``, ``z_i = (y_i - loc_Y_i) / scale_Y_i``: it tends to ``-1``
    as ``|z_i|`` grows, so each far outlier pushes the scale up with the same force however far
    it is (the location's gradient, by contrast, fades as one over the residual). With ``k``, a
    position more than ``k`` scales from its location that is also an outlier of its context::

        |r_i| > k * scale_Y_i   and   ( |r_i| > c * median_{j ~ i} |r_j|
                                        or |y_i| - |m_i| > c * median_{j ~ i} |y_j - m_i| ),

    ``r_i = y_i - loc_Y_i``, ``m_i = median_{j ~ i} y_j``, passes no gradient to ``scale_Y``;
    the loss value and every other gradient stay the NLL's. ``j ~ i`` runs over the ``<NUM>``
    positions with ``i``'s ``context`` key when at least ``min_context_count`` of them are in
    the call; otherwise the residuals' median is the call's (all ``<NUM>`` positions) and the
    targets' test does not apply (without a key, a batch's numbers mix fields); a context whose
    targets have no spread (the median deviation 0) has no targets' test either. Medians of an
    even count are the mean of the middle two; everything is computed without gradient.
    ``c = 3.5 / 0.6745`` is Iglewicz and Hoaglin's outlier bound (a modified z-score above 3.5).
    The scale's condition alone would also hold a scale that starts small below the numbers'
    spread (early in training nearly every number is many scales away); the outlier conditions
    alone are blind to the model's scale. The targets' test finds a gross error from the first
    step, before the locations reach the bulk of its context (until then every residual is
    large); it looks only upward in magnitude, because in the value space
    ``sign(v) log(1 + |v|)`` a field's small values stretch far below its median while an
    inflated number (a slipped decimal point, a wrong unit) lies far above it.

    Args:
        loc_Y: ``[...]`` location of the regression value.
        scale_Y: ``[...]`` its scale (``> 0`` at ``<NUM>`` positions).
        target_values: ``[...]`` true values (read only where ``num_mask`` is set).
        num_mask: ``[...]`` bool or 0/1: the next token is ``<NUM>`` (combine with the
            attention mask before calling); other values (0.5, NaN) are refused when validating.
        log_p_num: ``[...]`` ``log P_<NUM>`` from the classification head, or ``None`` for an
            ungated loss (gate = ``num_mask``, as with ``alpha = 1``).
        alpha: gate floor in ``[0, 1]``: 0 gates fully by ``P_num``, 1 ignores it.
        scale_power: ``beta >= 0`` of the context-scaled location gradient (0: the plain NLL's
            gradient).
        context: optional ``[...]`` integer keys: positions with equal keys share a context
            (e.g. the tokens before the number); None: every position is its own context.
        min_context_count: the fewest ``<NUM>`` targets of one key in the batch whose spread is
            estimated from them (>= 2).
        scale_cutoff: ``k > 0``: positions more than ``k`` scales from their location that
            are outliers of their context (above) pass no gradient to ``scale_Y``; None
            (default): every position does (the plain NLL's).
        weights: optional ``[...]`` constant weights ``w_i >= 0`` of the positions' NLLs (no
            gradient flows into them; read only where ``num_mask`` is set); None: all 1.
        validate_args: value checks (``num_mask`` 0/1, scales positive and finite, targets
            finite at ``<NUM>`` positions, ``log_p_num <= 0``); ``None`` follows the global
            setting.

    Returns:
        :class:`RegLoss` ``(mean, per_position [...], count)``, in the working dtype
        (``float32`` for half precision).

    Raises:
        ValueError: mismatched shapes, ``alpha`` outside ``[0, 1]`` (or NaN), a negative or
            non-finite ``scale_power``, a ``context`` that is not an integer tensor of
            ``loc_Y``'s shape, ``min_context_count < 2``, a ``scale_cutoff`` that is not a
            positive finite number (or None), ``weights`` of another shape, or (when
            validating) a ``num_mask`` other than 0/1, bad values at ``<NUM>`` positions or
            weights there that are negative or not finite.

    Example:
        >>> import torch
        >>> loc, scale = torch.zeros(4), torch.ones(4)
        >>> y = torch.tensor([0.0, float("nan"), 1.0, 0.0])
        >>> mask = torch.tensor([True, False, True, False])
        >>> out = gated_regression_loss(loc, scale, y, mask, alpha=1.0)
        >>> int(out.count), round(out.mean.item(), 4)   # (log pi + (log pi + log 2)) / 2
        (2, 1.4913)
        >>> # context-scaled: the same value, the location's gradient times s^2 / mean(s^2)
        >>> loc = torch.zeros(4, requires_grad=True)
        >>> scale = torch.tensor([1.0, 1.0, 3.0, 1.0])
        >>> out = gated_regression_loss(loc, scale, y, mask, alpha=1.0, scale_power=2.0)
        >>> out.mean.backward()
        >>> plain = torch.autograd.functional.jacobian(
        ...     lambda m: gated_regression_loss(m, scale, y, mask, alpha=1.0).mean, torch.zeros(4))
        >>> round((loc.grad[2] / plain[2]).item(), 4)  # weights 2 s^2 / (1 + 9): 0.2 and 1.8
        1.8
    """
    _check_regression_tensors(loc_Y, scale_Y, target_values, num_mask, log_p_num, context)
    if weights is not None:
        _require_tensor("weights", weights)
        _require_float("weights", weights)
        if _shape(weights) != _shape(loc_Y):
            raise ValueError(
                f"weights shape {_shape(weights)} must equal loc_Y shape {_shape(loc_Y)}"
            )
    alpha = float(alpha)
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    beta = _scale_power(scale_power)
    integer("min_context_count", min_context_count, minimum=2)
    if scale_cutoff is not None:
        scale_cutoff = finite_number("scale_cutoff", scale_cutoff, minimum=0.0, exclusive=True)
    if is_validating(validate_args):
        check_binary_mask("num_mask", num_mask)

    dt = working_dtype(loc_Y, scale_Y, target_values)
    m = num_mask != 0
    count = m.sum()
    loc = loc_Y.to(dt)
    scale = scale_Y.to(dt)
    # Masked-out positions get y = loc_Y and scale 1: a finite, gradient-free stand-in.
    safe_scale = torch.where(m, scale, torch.ones_like(scale))
    safe_y = torch.where(m, target_values.to(dt), loc.detach())
    if is_validating(validate_args):
        check_positive_finite("scale_Y", safe_scale)
        check_finite("target_values", safe_y)
    if beta != 0.0:
        w = context_weights(safe_y, safe_scale, m, beta, context, min_context_count)
        # the same value as loc; its gradient is w times the NLL's
        loc = loc.detach() + w * (loc - loc.detach())
    if scale_cutoff is not None:
        far = _far_residuals(
            safe_y, loc.detach(), safe_scale.detach(), m, scale_cutoff, context, min_context_count
        )
        # the same value as the scale; no gradient from the far positions
        safe_scale = torch.where(far, safe_scale.detach(), safe_scale)
    nll = LOG_PI + torch.log(safe_scale) + log1p_square((safe_y - loc) / safe_scale)
    gate = _gate(m, log_p_num, alpha, dt, is_validating(validate_args))
    if weights is not None:
        w_nll = torch.where(m, weights.detach().to(dt), torch.ones((), dtype=dt, device=m.device))
        if is_validating(validate_args):
            check_finite("weights", w_nll)
            negative = host_values(w_nll < 0)
            if negative is not None and bool(negative.any()):
                raise ValueError(
                    f"weights must be >= 0 at <NUM> positions (shape {_shape(weights)})"
                )
        gate = gate * w_nll
    per_position = torch.where(m, gate * nll, torch.zeros((), dtype=dt, device=loc.device))
    # (a tensor division, no host read of the count: the same value, also under torch.func)
    mean = per_position.sum() / count.clamp_min(1).to(dt)
    return RegLoss(mean, per_position, count.to(torch.long))


def last_number_weights(num_mask: torch.Tensor, weight: float) -> torch.Tensor:
    """Weights for :func:`gated_regression_loss`: ``weight`` at the last ``<NUM>`` target of
    each sequence (the last ``num_mask`` position along the last dimension), 1 elsewhere.

    A text's last number is its target (a table row written as text ends with the target
    column, and evaluation reads the last number of each text), so ``weight > 1`` puts that
    number's likelihood ahead of the numbers before it, which the network reads as inputs. A
    sequence cut short by truncation has its last *kept* number weighed.

    Args:
        num_mask: ``[..., L]`` bool or 0/1, the ``<NUM>`` targets.
        weight: a finite number ``>= 0``.

    Returns:
        ``[..., L]`` float32 weights.

    Raises:
        ValueError: a ``num_mask`` that is not a tensor with a sequence dimension, or a
            negative or non-finite ``weight``.

    Example:
        >>> import torch
        >>> mask = torch.tensor([[0, 1, 0, 1, 0], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]])
        >>> last_number_weights(mask, 4.0).tolist()
        [[1.0, 1.0, 1.0, 4.0, 1.0], [4.0, 1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0, 1.0]]
    """
    _require_tensor("num_mask", num_mask)
    if num_mask.ndim < 1:
        raise ValueError(f"num_mask must have a sequence dimension, got shape {_shape(num_mask)}")
    w = finite_number("weight", weight, minimum=0.0)
    m = num_mask != 0
    position = torch.arange(m.shape[-1], device=m.device).expand(m.shape)
    last = torch.where(m, position, torch.full_like(position, -1)).amax(-1, keepdim=True)
    return torch.where(m & (position == last), w, 1.0).to(torch.float32)


def _check_regression_tensors(
    loc_Y: torch.Tensor,
    scale_Y: torch.Tensor,
    target_values: torch.Tensor,
    num_mask: torch.Tensor,
    log_p_num: torch.Tensor | None,
    context: torch.Tensor | None,
) -> None:
    """The types and shapes of the regression loss's tensors: all of ``loc_Y``'s shape."""
    for name, t in (("loc_Y", loc_Y), ("scale_Y", scale_Y), ("target_values", target_values)):
        _require_tensor(name, t)
        _require_float(name, t)
    _require_tensor("num_mask", num_mask)
    shape = _shape(loc_Y)
    named = {"scale_Y": scale_Y, "target_values": target_values, "num_mask": num_mask}
    if log_p_num is not None:
        _require_tensor("log_p_num", log_p_num)
        _require_float("log_p_num", log_p_num)
        named["log_p_num"] = log_p_num
    if context is not None:
        _require_tensor("context", context)
        if context.is_floating_point() or context.is_complex() or context.dtype == torch.bool:
            raise ValueError(f"context must be an integer tensor, got dtype {context.dtype}")
        named["context"] = context
    for name, t in named.items():
        if _shape(t) != shape:
            raise ValueError(f"{name} shape {_shape(t)} must equal loc_Y shape {shape}")


def _gate(
    m: torch.Tensor, log_p_num: torch.Tensor | None, alpha: float, dt: torch.dtype, validate: bool
) -> torch.Tensor:
    """The weight of each position's NLL: ``alpha + (1 - alpha) P(<NUM>)`` at ``<NUM>`` targets
    (1 without ``log_p_num`` or with ``alpha = 1``), 0 elsewhere."""
    if log_p_num is None or alpha == 1.0:
        return m.to(dt)
    safe_lp = torch.where(m, log_p_num.to(dt), torch.zeros((), dtype=dt, device=m.device))
    if validate:
        check_finite("log_p_num", safe_lp)
        positive = host_values(safe_lp > 0)
        if positive is not None and bool(positive.any()):
            raise ValueError(
                f"log_p_num must be <= 0 (a log-probability) at <NUM> positions "
                f"(shape {_shape(log_p_num)})"
            )
    return m.to(dt) * (alpha + (1.0 - alpha) * torch.exp(safe_lp))


def _scale_power(scale_power: float) -> float:
    try:
        beta = float(scale_power)
    except (TypeError, ValueError):
        raise ValueError(f"scale_power must be a number, got {scale_power!r}") from None
    if not (math.isfinite(beta) and beta >= 0.0):
        raise ValueError(f"scale_power must be a finite number >= 0, got {scale_power!r}")
    return beta


def _group_medians(keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per element: the median of ``values`` over the elements with its key, and that count.

    One stable sort by value, then by key, groups each key's values in order; the median of a
    group of ``n`` is the mean of its elements ``(n - 1) // 2`` and ``n // 2``.
    """
    by_value = torch.argsort(values, stable=True)
    order = by_value[torch.argsort(keys[by_value], stable=True)]
    _, inverse, counts = torch.unique(keys, return_inverse=True, return_counts=True)
    starts = torch.cumsum(counts, 0) - counts
    sorted_values = values[order]
    lo = sorted_values[starts + (counts - 1) // 2]
    hi = sorted_values[starts + counts // 2]
    return ((lo + hi) / 2)[inverse], counts[inverse]


def _group_spreads(
    keys: torch.Tensor, values: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per element: the median of ``values`` over its key, their median absolute deviation from
    it, and the key's count (:func:`_group_medians` twice)."""
    centre, counts = _group_medians(keys, values)
    mad, _ = _group_medians(keys, (values - centre).abs())
    return centre, mad, counts


# Iglewicz and Hoaglin's bound on the modified z-score 0.6745 |r| / median |r|.
_OUTLIER_MEDIANS: Final = 3.5 / 0.6745


def _far_residuals(
    target_values: torch.Tensor,
    loc_Y: torch.Tensor,
    scale_Y: torch.Tensor,
    num_mask: torch.Tensor,
    cutoff: float,
    context: torch.Tensor | None,
    min_context_count: int,
) -> torch.Tensor:
    """The ``<NUM>`` positions of :func:`gated_regression_loss`'s scale cutoff (all detached)."""
    residual = (target_values - loc_Y).abs()
    # The median of the call's <NUM> residuals by one sort (no host read, so torch.func maps
    # it). The other positions and one more sort last as inf: with no <NUM> position (or an
    # empty call) the median is inf and nothing is far.
    inf = torch.full((1,), math.inf, dtype=residual.dtype, device=residual.device)
    ordered = torch.cat([torch.where(num_mask, residual, inf).reshape(-1), inf]).sort().values
    n = num_mask.sum().reshape(1)
    middle = torch.cat([(n - 1).clamp_min(0) // 2, n // 2])
    typical = ordered.gather(0, middle).mean() * torch.ones_like(residual)
    outlier = residual > _OUTLIER_MEDIANS * typical
    if context is not None:
        keys, y = context[num_mask], target_values[num_mask]
        own, counts = _group_medians(keys, residual[num_mask])
        enough = counts >= min_context_count
        local = torch.where(enough, own, typical[num_mask])
        # Early in training every residual of a context is large and a gross error does not
        # stand out among them; among the context's targets it does from the first step. Only
        # upward in magnitude: in the value space sign(v) log(1 + |v|) a field's small values
        # stretch far below its median (legitimately), while an inflated number lies far above.
        centre, spread, _ = _group_spreads(keys, y)
        inflated = enough & (spread > 0) & (y.abs() - centre.abs() > _OUTLIER_MEDIANS * spread)
        odd = inflated | (residual[num_mask] > _OUTLIER_MEDIANS * local)
        outlier = outlier.masked_scatter(num_mask, odd)
    return num_mask & (residual > cutoff * scale_Y) & outlier


def context_weights(
    target_values: torch.Tensor,
    scale_Y: torch.Tensor,
    num_mask: torch.Tensor,
    scale_power: float,
    context: torch.Tensor | None = None,
    min_context_count: int = 3,
) -> torch.Tensor:
    """The weights ``w_i = d_i^beta / mean_j d_j^beta`` of :func:`gated_regression_loss`.

    ``d_i`` is the median absolute deviation of the ``<NUM>`` targets that share position
    ``i``'s ``context`` key, when at least ``min_context_count`` of them are in the batch, else
    ``scale_Y_i`` (detached). The mean runs over the ``num_mask`` positions, so the weights
    there average 1; elsewhere they are 1. Formed in log space (``d^beta`` may underflow).

    Args:
        target_values: ``[...]`` the targets (read where ``num_mask`` is set).
        scale_Y: ``[...]`` the model's scales (positive where ``num_mask`` is set).
        num_mask: ``[...]`` bool, the ``<NUM>`` targets.
        scale_power: ``beta >= 0``.
        context: optional ``[...]`` integer keys.
        min_context_count: the fewest targets of a key whose spread is estimated from them.

    Returns:
        ``[...]`` detached weights in the dtype of ``scale_Y``.

    Example:
        >>> import torch
        >>> y = torch.tensor([1.0, 3.0, 5.0, 100.0, 100.1, 99.9, 7.0])
        >>> key = torch.tensor([0, 0, 0, 1, 1, 1, 2])
        >>> scale = torch.full((7,), 0.5)
        >>> w = context_weights(y, scale, torch.ones(7, dtype=torch.bool), 2.0, key)
        >>> [round(v, 4) for v in w.tolist()]  # spreads 2, 0.1 and (alone) the scale 0.5
        [2.2801, 2.2801, 2.2801, 0.0057, 0.0057, 0.0057, 0.1425]
    """
    m = num_mask != 0
    scale = scale_Y.detach()
    spread = torch.where(m, scale, torch.ones_like(scale))
    n = int(m.sum())
    if n == 0:
        return torch.ones_like(scale)
    if context is not None:
        keys = context[m]
        t = target_values.detach().to(scale.dtype)[m]
        _, mad, counts = _group_spreads(keys, t)
        own = spread[m]
        # a context of one repeated value has no spread: keep the model's scale there too
        use = (counts >= min_context_count) & (mad > 0)
        spread = spread.masked_scatter(m, torch.where(use, mad, own))
    log_w = float(scale_power) * torch.log(spread)
    floor = torch.tensor(-math.inf, dtype=log_w.dtype, device=log_w.device)
    log_mean = torch.logsumexp(torch.where(m, log_w, floor).reshape(-1), 0) - math.log(n)
    return torch.where(m, torch.exp(log_w - log_mean), torch.ones_like(log_w))


def causal_lm_loss(cls: OvRLoss, reg: RegLoss, *, reg_weight: float = 1.0) -> CausalLMLoss:
    """The training objective ``L = L_cls_mean + lambda * L_reg_eff`` (see ``docs/concepts.md``).

    Args:
        cls: the classification loss (:func:`ovr_bce` or :func:`ovr_bce_fused`).
        reg: the gated regression loss (:func:`gated_regression_loss`).
        reg_weight: ``lambda >= 0``, the weight of the regression term (a finite number).

    Returns:
        :class:`CausalLMLoss` ``(total, cls, reg)``.

    Raises:
        ValueError: if ``cls``/``reg`` are not the loss tuples, or ``reg_weight`` is negative,
            NaN or infinite.

    Example:
        >>> import torch
        >>> c = OvRLoss(torch.tensor(2.0), torch.zeros(3), torch.tensor(3))
        >>> r = RegLoss(torch.tensor(0.5), torch.zeros(3), torch.tensor(1))
        >>> causal_lm_loss(c, r, reg_weight=2.0).total.item()
        3.0
    """
    if not isinstance(cls, OvRLoss):
        raise ValueError(f"cls must be an OvRLoss, got {type(cls).__name__}")
    if not isinstance(reg, RegLoss):
        raise ValueError(f"reg must be a RegLoss, got {type(reg).__name__}")
    try:
        weight = float(reg_weight)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"reg_weight must be a number, got {reg_weight!r}") from None
    if not (math.isfinite(weight) and weight >= 0.0):
        raise ValueError(f"reg_weight must be a finite number >= 0, got {weight}")
    total = cls.mean + weight * reg.mean
    return CausalLMLoss(total, cls, reg)
