"""Chunked one-vs-rest Cauchy loss that never holds an ``[N, V]`` tensor.

The kernel behind :func:`cauchylin.losses.ovr_bce_fused`. For counted rows ``x = loc_U``,
``s = scale_U`` (``[N, C]``), an ``nn.Linear``-style weight ``W`` (``[V, C]``), a bias ``b`` and
thresholds ``c`` it computes, per row ``i``,

    L_i = -sum_{k != y} log sf(z_ik) - log cdf(z_iy),
    z_ik = (x_i . W_k + b_k - c_k) / (s_i . |W_k|),

where ``sf(z) = 1/2 - atan(z)/pi = 1 - P``, ``cdf = P`` and ``y = y_i`` is the label. The label's
entry of a tile is overwritten with ``log cdf`` before the row sum: one scatter per row, no one-hot
tensor, and no cancellation as in ``-sum_k log sf + (log sf - log cdf)`` at ``y``. The work runs
in tiles of ``token_chunk x vocab_chunk``. The outer loop runs over vocabulary tiles so that
``|W_k|`` and ``b_k - c_k`` are formed once per tile; the inner loop runs over token tiles. Every tile reuses
the same preallocated buffers, so peak extra memory is a few tiles plus the gradient outputs.

Per element the work is fused into one pass over the tile (``t = atan2(1, |z|)/pi`` is the smaller
tail, ``P = [z > 0]``):

* ``log sf(z) = log t`` when ``z > 0`` and ``log1p(-t)`` otherwise (accurate to an ulp for every
  ``z``, as in :mod:`cauchylin._special`);
* ``d/dz [-log sf(z)] = p(z)/sf(z) = 1 / (pi sf(z) (1 + z**2))`` evaluated as
  ``1 / (u + (u z) z)`` with ``u = pi sf(z) = atan2(1, z)``, which neither overflows nor loses its
  sign for ``|z|`` up to the float32 range;
* the label entry is patched afterwards on ``N`` gathered scalars:
  ``d/dz [-log cdf(z)] = -1 / (u' + (u' z) z)`` with ``u' = atan2(1, -z)``.

With ``g = dL/dz`` the chain rule gives ``dL/dloc_S = g / scale_S`` and
``dL/dscale_S = -g z / scale_S``; the four backward GEMMs are ``g/scale_S @ W``,
``-(g z/scale_S) @ |W|``, ``(g/scale_S)^T @ x`` and ``(-(g z/scale_S))^T @ s * sign(W)``.

When gradients are wanted the forward pass computes them at once for the loss *mean* (so no GEMM
is recomputed; the backward pass only rescales them by the incoming gradient). If the per-position
losses themselves are differentiated, or the graph is walked a second time, the backward pass
recomputes the tiles with the incoming per-row weights instead: same numbers, two more GEMMs.

The kernel is for eager execution only: it groups the rows by the labels on the host and writes
into preallocated tile buffers, which neither ``torch.func.vmap`` nor a graph capture can do, and
it computes the gradients in the forward (it reads ``needs_input_grad`` there, which a
``setup_context``-style ``Function`` cannot). So its ``Function`` keeps the classic style without
a vmap rule, and :func:`cauchylin.losses.ovr_bce_fused` never calls it under a ``torch.func``
transform or while a graph is captured: there it evaluates the same loss from ``loc_S`` and
``scale_S`` with fixed shapes (see :mod:`cauchylin.losses`).
"""

from __future__ import annotations

import math

import torch

from cauchylin._special import ovr_log_probs_std

__all__ = ["default_chunks", "fused_ovr_rows"]

_INV_PI = 1.0 / math.pi
# Elements per tile. Six float32 buffers of this many entries (24 MiB) stay inside a 32 MiB L3
# cache, the GEMMs that fill them run near peak, and a Qwen-sized vocabulary needs only ~150
# tiles (each elementwise op is a parallel region; fewer regions suffer less on a busy machine).
_TILE_ELEMS = 1 << 20
_MAX_TOKEN_CHUNK = 1024
_MIN_VOCAB_CHUNK = 256


def default_chunks(n: int, v: int, device: torch.device) -> tuple[int, int]:
    """``(token_chunk, vocab_chunk)`` used when the caller gives none.

    CPU: tiles of about 2**20 elements (4 MiB in float32 per buffer). CUDA: 2**22 elements
    (16 MiB per buffer), large enough for the GEMMs and the kernel launches to stay efficient.
    """
    elems = _TILE_ELEMS if device.type == "cpu" else 1 << 22
    rc = max(1, min(n, _MAX_TOKEN_CHUNK if device.type == "cpu" else 4096))
    vc = max(_MIN_VOCAB_CHUNK, elems // rc)
    return rc, max(1, min(v, vc))


class _Sweep:
    """One pass over all tiles: the per-row losses and, optionally, the gradients.

    ``w`` (``[N]`` or ``None``) are the per-row weights of the gradient (``dOut/dL_i``); with
    ``w is None`` only the losses are computed.
    """

    def __init__(
        self,
        x: torch.Tensor,
        s: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        threshold: torch.Tensor,
        labels: torch.Tensor,
        chunks: tuple[int, int],
    ) -> None:
        self.x, self.s, self.weight, self.bias, self.threshold = x, s, weight, bias, threshold
        self.labels = labels
        self.rc, self.vc = chunks
        self.dt = x.dtype
        self.device = x.device
        n, v = x.shape[0], weight.shape[0]
        # Rows grouped by the vocabulary tile that holds their label: one host sync, up front.
        order = torch.argsort(labels)
        sorted_labels = labels[order]
        edges = torch.arange(0, v + self.vc, self.vc, device=labels.device).clamp_(max=v)
        bounds = torch.searchsorted(sorted_labels, edges).tolist()
        self.label_groups = []
        for j in range(len(bounds) - 1):
            rows = order[bounds[j] : bounds[j + 1]]
            self.label_groups.append((rows, labels[rows] - j * self.vc))
        self.n, self.v = n, v

    def run(
        self,
        w: torch.Tensor | None,
        need: tuple[bool, bool, bool, bool, bool],
        want_loss: bool,
    ) -> tuple[torch.Tensor | None, list[torch.Tensor | None]]:
        """Returns ``(loss_rows, [g_x, g_s, g_weight, g_bias_col, g_threshold])``.

        ``need`` flags which of ``x, s, weight, bias, threshold`` need a gradient; ``g_bias_col``
        is ``sum_i dOut/dloc_S[i, k]`` (the bias gradient; the threshold gradient is its negative).
        """
        x, s, weight = self.x, self.s, self.weight
        dt, dev = self.dt, self.device
        n, v, C = self.n, self.v, x.shape[1]
        rc, vc = self.rc, self.vc
        grads = w is not None and any(need)
        need_x, need_s, need_w, need_b, need_c = need
        loss = torch.zeros(n, dtype=dt, device=dev) if want_loss else None
        gx = torch.zeros_like(x) if grads and need_x else None
        gs = torch.zeros_like(s) if grads and need_s else None
        gw = torch.empty(weight.shape, dtype=weight.dtype, device=dev) if grads and need_w else None
        gcol = torch.zeros(v, dtype=dt, device=dev) if grads and (need_b or need_c) else None
        if n == 0:
            if gw is not None:
                gw.zero_()
            g_c = None
            if gcol is not None and need_c:
                g_c = gcol.sum() if self.threshold.dim() == 0 else gcol
            return loss, [gx, gs, gw, gcol if need_b else None, g_c]

        tile = rc * vc
        # Five tile buffers: z, scale_S, the small tail, and two scratch buffers.
        bufs = torch.empty(5, tile, dtype=dt, device=dev)
        flat_z, flat_s, flat_v, flat_g, flat_e = bufs.unbind(0)
        # |W| of the current class tile (reused for sign(W) once the tile is done), a cast copy of
        # a half-precision weight tile, and the accumulator of the |W| part of its gradient.
        abuf = torch.empty(vc * C, dtype=dt, device=dev)
        cast = weight.dtype != dt
        wcast = torch.empty(vc * C, dtype=dt, device=dev) if cast else None
        if gw is not None:
            wbuf = torch.empty(2 if cast else 1, vc * C, dtype=dt, device=dev)
        one = torch.ones((), dtype=dt, device=dev)
        pi = torch.full((), math.pi, dtype=dt, device=dev)
        w_col = w.to(dt).unsqueeze(1) if grads and w is not None else None
        thr = self.threshold

        for j, v0 in enumerate(range(0, v, vc)):
            v1 = min(v, v0 + vc)
            vv = v1 - v0
            if wcast is not None:  # (a cast copy exactly when the weight's dtype differs)
                w_v = wcast[: vv * C].view(vv, C).copy_(weight[v0:v1])
            else:
                w_v = weight[v0:v1]
            a_v = torch.abs(w_v, out=abuf[: vv * C].view(vv, C))
            if thr.dim() == 0:
                beff = -thr.expand(vv) if self.bias is None else self.bias[v0:v1] - thr
            else:
                beff = -thr[v0:v1] if self.bias is None else self.bias[v0:v1] - thr[v0:v1]
            if gw is not None:
                # the plain part accumulates straight into the gradient when dtypes agree
                gwl = (wbuf[1, : vv * C].view(vv, C) if cast else gw[v0:v1]).zero_()
                gws = wbuf[0, : vv * C].view(vv, C).zero_()
            lab_rows, lab_cols = self.label_groups[j]
            for r0 in range(0, n, rc):
                r1 = min(n, r0 + rc)
                nn = r1 - r0
                m = nn * vv
                z = flat_z[:m].view(nn, vv)
                sc = flat_s[:m].view(nn, vv)
                tv = flat_v[:m].view(nn, vv)
                tg = flat_g[:m].view(nn, vv)
                te = flat_e[:m].view(nn, vv)
                x_c, s_c = x[r0:r1], s[r0:r1]
                torch.addmm(beff, x_c, w_v.t(), out=z)  # loc_S - threshold
                torch.mm(s_c, a_v.t(), out=sc)  # scale_S
                z.div_(sc)
                torch.abs(z, out=tv)
                torch.atan2(one, tv, out=tv)  # pi * t, t = the smaller tail
                torch.gt(z, 0, out=te)  # 1.0 where z > 0 (sf is the small side) else 0.0
                rows_g = None
                if lab_rows.numel():  # (may select nothing: empty index ops, no host sync)
                    if r0 == 0 and r1 == n:
                        rows_g, cc = lab_rows, lab_cols
                    else:
                        sel = (lab_rows >= r0) & (lab_rows < r1)
                        rows_g, cc = lab_rows[sel], lab_cols[sel]
                    rr = rows_g - r0
                    z_l, s_l = z[rr, cc], sc[rr, cc]
                if grads:
                    assert w_col is not None
                    # u = pi sf(z) = atan2(1, z): the small tail where z > 0, pi minus it
                    # elsewhere; a 0/1 lerp selects exactly (`end` at weight 1, `start` at 0).
                    torch.sub(pi, tv, out=tg)
                    torch.lerp(tg, tv, te, out=tg)
                    torch.mul(tg, z, out=te)  # (the mask is rebuilt below when needed)
                    torch.addcmul(tg, te, z, out=tg)  # pi sf (1 + z^2) without overflow
                    torch.div(w_col[r0:r1], tg, out=tg)  # g = w p / sf
                    tg.div_(sc)  # dOut/dloc_S
                    if rows_g is not None:
                        # At the label the derivative is -p/cdf = -1 / (u' + (u' z) z) with
                        # u' = atan2(1, -z).
                        u = torch.atan2(torch.ones_like(z_l), -z_l)
                        g_l = -w_col[rows_g, 0] / torch.addcmul(u, u * z_l, z_l)
                        tg.index_put_((rr, cc), g_l / s_l)
                    torch.mul(tg, z, out=sc)  # -dOut/dscale_S
                    if gx is not None:
                        gx[r0:r1].addmm_(tg, w_v)
                    if gs is not None:
                        gs[r0:r1].addmm_(sc, a_v, alpha=-1.0)
                    if gw is not None:
                        gwl.addmm_(tg.t(), x_c)
                        gws.addmm_(sc.t(), s_c, alpha=-1.0)
                    if gcol is not None:
                        gcol[v0:v1] += tg.sum(0)
                    if want_loss:
                        torch.gt(z, 0, out=te)
                if want_loss:
                    assert loss is not None
                    # sum_k log sf(z_k): log t where z > 0, log1p(-t) elsewhere (z's buffer is
                    # free from here on and takes log t).
                    torch.mul(tv, _INV_PI, out=tg)
                    torch.log(tg, out=z)
                    tg.neg_().log1p_()
                    torch.lerp(tg, z, te, out=tg)
                    if rows_g is not None:
                        # The label's term is log P, swapped in place: no cancellation between
                        # -log(1 - P_y) and +log(1 - P_y) when the label is confidently right.
                        tg.index_put_((rr, cc), ovr_log_probs_std(z_l)[0])
                    loss[r0:r1] -= tg.sum(1)
            if gw is not None:
                gwl.addcmul_(gws, torch.sign(w_v, out=a_v))  # d|W|/dW = sign(W)
                if cast:
                    gw[v0:v1].copy_(gwl)

        g_c = None
        if gcol is not None and need_c:
            g_c = -gcol.sum() if thr.dim() == 0 else -gcol
        g_b = gcol if need_b else None
        return loss, [gx, gs, gw, g_b, g_c]


class _FusedOvR(torch.autograd.Function):
    """Autograd wrapper: outputs ``(mean, per_row)``; see the module docstring."""

    @staticmethod
    def forward(
        ctx,  # noqa: ANN001
        x: torch.Tensor,
        s: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        threshold: torch.Tensor,
        labels: torch.Tensor,
        chunks: tuple[int, int],
        eager: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.set_materialize_grads(False)
        sweep = _Sweep(x, s, weight, bias, threshold, labels, chunks)
        ctx.save_for_backward(x, s, weight, bias, threshold, labels)
        ctx.chunks = chunks
        n = x.shape[0]
        need = (
            ctx.needs_input_grad[0],
            ctx.needs_input_grad[1],
            ctx.needs_input_grad[2],
            bias is not None and ctx.needs_input_grad[3],
            ctx.needs_input_grad[4],
        )
        ctx.need = need
        ctx.n = n
        ctx.eager_grads = None
        if eager and any(need) and n > 0:
            w = torch.full((n,), 1.0 / n, dtype=x.dtype, device=x.device)
            loss, g = sweep.run(w, need, want_loss=True)
            ctx.eager_grads = g
        else:
            loss, _ = sweep.run(None, need, want_loss=True)
        assert loss is not None  # (want_loss=True)
        mean = loss.sum() / max(n, 1)
        return mean, loss

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(
        ctx,  # noqa: ANN001
        grad_mean: torch.Tensor | None,
        grad_rows: torch.Tensor | None,
    ):
        n = ctx.n
        g = ctx.eager_grads
        ctx.eager_grads = None  # consumed: a second walk of the graph recomputes
        if (grad_mean is None and grad_rows is None) or n == 0:
            return (None,) * 8
        x, s, weight, bias, threshold, labels = ctx.saved_tensors
        if g is not None and grad_rows is None:
            assert grad_mean is not None  # (not both None, see above)
            # The eager gradients belong to the mean; rescale them by the incoming gradient (a
            # host-side check skips the pass in the usual case `loss.backward()` on CPU).
            skip = grad_mean.device.type == "cpu" and bool(grad_mean == 1)
            if not skip:
                for t in g:
                    if t is not None:
                        t.mul_(grad_mean.to(t.dtype))
        else:
            w = torch.zeros(n, dtype=x.dtype, device=x.device)
            if grad_rows is not None:
                w += grad_rows
            if grad_mean is not None:
                w += grad_mean / n
            sweep = _Sweep(x, s, weight, bias, threshold, labels, ctx.chunks)
            _, g = sweep.run(w, ctx.need, want_loss=False)
        gx, gs, gw, gb, gc = g
        return gx, gs, gw, gb, gc, None, None, None


def fused_ovr_rows(
    x: torch.Tensor,
    s: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    threshold: torch.Tensor,
    labels: torch.Tensor,
    chunks: tuple[int, int],
    *,
    eager: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mean, per_row)`` OvR loss of counted rows, differentiable in every tensor argument.

    ``x``, ``s``: ``[N, C]`` in the working dtype, contiguous; ``weight``: ``[V, C]`` (any float
    dtype, cast per tile); ``bias``: ``[V]`` or ``None``; ``threshold``: ``[]`` or ``[V]`` in the
    working dtype; ``labels``: ``[N]`` long in ``[0, V)``.
    """
    # Inside `forward` grad mode is always off and `needs_input_grad` ignores it, so the caller's
    # grad mode decides here whether the eager gradients are worth computing (not under no_grad).
    eager = eager and torch.is_grad_enabled()
    return _FusedOvR.apply(x, s, weight, bias, threshold, labels, chunks, eager)
