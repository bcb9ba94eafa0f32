"""The training loop of the estimators: mini-batch Adam with early stopping.

One epoch visits the training rows once in a random order (``torch.randperm`` with the
estimator's generator), in mini-batches. After each epoch the monitored loss is the mean loss on
the validation rows when there are any (early stopping), else the mean training loss of the
epoch. Training stops once the monitored loss has not fallen below ``best - tol`` for
``n_iter_no_change`` epochs in a row, or after ``max_iter`` epochs; with a validation split the
weights of the best validation epoch are restored.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

__all__ = ["LossFn", "TrainResult", "train"]

LossFn = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class TrainResult:
    """What :func:`train` did.

    Attributes:
        n_iter: epochs run.
        loss_curve: mean training loss of each epoch.
        validation_losses: mean validation loss after each epoch (empty without validation rows).
        best_epoch: 1-based epoch whose weights were kept (the last one without validation rows).
        converged: training stopped by the ``n_iter_no_change`` rule before ``max_iter``.

    Example:
        >>> from cauchylin.estimators._training import TrainResult
        >>> TrainResult(n_iter=3, loss_curve=[1.0, 0.5, 0.4], best_epoch=3).converged
        False
    """

    n_iter: int = 0
    loss_curve: list[float] = field(default_factory=list)
    validation_losses: list[float] = field(default_factory=list)
    best_epoch: int = 0
    converged: bool = False


def _param_groups(module: nn.Module, weight_decay: float) -> list[dict]:
    """L2 penalty on the weight matrices only (not on biases, ``b_noise`` or thresholds)."""
    decay: list[nn.Parameter] = []
    plain: list[nn.Parameter] = []
    for name, p in module.named_parameters():
        (decay if name.endswith("weight") and p.ndim == 2 else plain).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": plain, "weight_decay": 0.0}]


def _progress(max_iter: int, verbose: bool, desc: str):  # noqa: ANN202
    if not verbose:
        return range(max_iter), None
    try:
        from tqdm.auto import tqdm
    except ImportError as exc:  # pragma: no cover - tqdm ships with the [sklearn] extra
        raise ImportError(
            "verbose=True draws a tqdm progress bar: pip install 'cauchylin[sklearn]' (or tqdm)"
        ) from exc
    bar = tqdm(range(max_iter), desc=desc, unit="epoch", leave=False)
    return bar, bar


def train(
    module: nn.Module,
    loss_fn: LossFn,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    x_val: torch.Tensor | None,
    y_val: torch.Tensor | None,
    learning_rate: float,
    weight_decay: float,
    batch_size: int,
    max_iter: int,
    n_iter_no_change: int,
    tol: float,
    generator: torch.Generator,
    verbose: bool = False,
    desc: str = "fit",
) -> TrainResult:
    """Fit ``module`` in place by mini-batch Adam on ``loss_fn``, with early stopping.

    Args:
        module: the network (its parameters are updated in place).
        loss_fn: ``loss_fn(module, x_batch, y_batch)`` -> scalar mean loss of the batch.
        x: ``[N, D]`` training inputs.
        y: ``[N]`` training targets.
        x_val: validation inputs, or ``None`` to monitor the training loss.
        y_val: validation targets (with ``x_val``).
        learning_rate: Adam's step size.
        weight_decay: L2 penalty on the weight matrices.
        batch_size: rows per step (``min(batch_size, N)``).
        max_iter: maximal number of epochs.
        n_iter_no_change: epochs without an improvement of ``tol`` that stop training.
        tol: minimal decrease of the monitored loss that counts as an improvement.
        generator: CPU ``torch.Generator`` of the row order.
        verbose: draw a tqdm progress bar.
        desc: the bar's label.

    Returns:
        :class:`TrainResult`.

    Raises:
        FloatingPointError: the loss became NaN or infinite (e.g. a learning rate far too large).

    Example:
        >>> import torch
        >>> from cauchylin.estimators._training import train
        >>> _ = torch.manual_seed(0)
        >>> net = torch.nn.Linear(1, 1)
        >>> mse = lambda m, x, y: ((m(x)[:, 0] - y) ** 2).mean()
        >>> x = torch.linspace(-1, 1, 32)[:, None]
        >>> result = train(net, mse, x, 2 * x[:, 0], x_val=None, y_val=None, learning_rate=0.05,
        ...                weight_decay=0.0, batch_size=8, max_iter=500, n_iter_no_change=5,
        ...                tol=1e-8, generator=torch.Generator().manual_seed(0))
        >>> result.converged, result.loss_curve[-1] < result.loss_curve[0] / 100
        (True, True)
    """
    optimizer = torch.optim.Adam(_param_groups(module, weight_decay), lr=learning_rate)
    n = x.shape[0]
    batch = max(1, min(batch_size, n))
    validate = x_val is not None and y_val is not None and x_val.shape[0] > 0
    result = TrainResult()
    best = math.inf
    best_state = None
    stale = 0
    epochs, bar = _progress(max_iter, verbose, desc)
    module.train()
    for epoch in epochs:
        order = torch.randperm(n, generator=generator).to(x.device)
        total = 0.0
        for start in range(0, n, batch):
            rows = order[start : start + batch]
            loss = loss_fn(module, x[rows], y[rows])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * rows.shape[0]
        train_loss = total / n
        if not math.isfinite(train_loss):
            raise FloatingPointError(
                f"the training loss became {train_loss} in epoch {epoch + 1}; lower learning_rate"
            )
        result.loss_curve.append(train_loss)
        monitored = train_loss
        if validate:
            with torch.no_grad():
                monitored = float(loss_fn(module, x_val, y_val))  # type: ignore[arg-type]
            result.validation_losses.append(monitored)
        result.n_iter = epoch + 1
        if monitored < best - tol:
            best, stale, result.best_epoch = monitored, 0, epoch + 1
            if validate:
                best_state = copy.deepcopy(module.state_dict())
        else:
            stale += 1
        if bar is not None:
            bar.set_postfix(loss=f"{train_loss:.4f}", monitored=f"{monitored:.4f}")
        if stale >= n_iter_no_change:
            result.converged = True
            break
    if bar is not None:
        bar.close()
    if best_state is not None:
        module.load_state_dict(best_state)
    else:
        result.best_epoch = result.n_iter
    module.eval()
    return result
