r"""Solve a linear Cauchy readout on features: the penalised maximum-likelihood fit, by IRLS.

Given features ``x_i`` (``[n, C]``, e.g. the locations of ``U'`` at the positions that predict a
number) and targets ``t_i`` (``[n]``, in the value space), the readout is

.. math::

    Y_i = w^\top x_i + b + N_i, \qquad N_i \sim \mathrm{Cauchy}(0, \sigma),

that is ``Y_i ~ Cauchy(w.x_i + b, sigma)``. :func:`fit_cauchy_readout` minimises the mean negative
log-likelihood plus a ridge penalty on the weights of the standardised features (``d_j`` the
standard deviation of feature ``j`` over the rows):

.. math::

    J(w, b, \sigma) = \frac1n \sum_i \Big[\log(\pi \sigma)
        + \log\big(1 + (t_i - w^\top x_i - b)^2/\sigma^2\big)\Big] + \lambda \sum_j (d_j w_j)^2 .

**The solve.** A Cauchy variable is a Gaussian whose precision is drawn from a Gamma law (the
Student t with one degree of freedom), so the expectation-maximisation algorithm for the t
distribution applies (iteratively reweighted least squares). With residuals ``r_i``, each
iteration

1. weighs each row by ``u_i = 2 sigma^2 / (sigma^2 + r_i^2)`` (a far-off row counts little: the
   Cauchy likelihood's bounded influence),
2. solves the weighted ridge system
   ``(X^T U X + 2 n lambda sigma^2 P) theta = X^T U t`` for ``theta = (w, b)`` (``P`` penalises
   ``w``, not ``b``), and
3. sets ``sigma^2 = mean_i u_i r_i^2``.

Every step lowers ``J`` (an expectation-conditional-maximisation algorithm), so the iteration
converges to a stationary point; it starts from the ridge (least-squares) solution with ``sigma``
the median absolute residual. ``J`` is not convex (the Cauchy likelihood is not log-concave), so a
stationary point need not be the global minimum; started from least squares it is the one near
the bulk of the data. Each iteration is one ``(C + 1) x (C + 1)`` solve; every fold and every
penalty of the cross-validation run together as one batch.

**Constant columns.** A column whose standard deviation over the rows is at most ``rtol`` times
its largest magnitude is read as constant: it gets weight 0 and the bias takes its value. With
features computed in a lower precision than the solve (a network's float32 hidden states read in
float64), a column that is constant in exact arithmetic varies by a few dozen ulps between batch
positions and devices; standardised to unit spread, that rounding would otherwise be fitted.

**The penalty** ``lambda`` is chosen from a grid by K-fold cross-validation (copies of a row stay
in one fold), by the held-out negative log-likelihood or (``penalty_rule="median_error"``) by the
median of the held-out absolute residuals ``|t_i - w^T x_i - b|``, which for a Cauchy law is its
scale ``sigma`` (the median of ``|Y - loc|``) estimated without the fitted ``sigma``; the readout is
then refitted on every row.

Why a solve and not only gradient descent: a readout shared by every context and trained jointly
with the features can lag far behind what the features hold; solved per context after training,
it reads the features as well as a linear map can (the benchmark page measures both).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from cauchylin._validation import check_finite, positive_int, require_tensor

__all__ = [
    "DEFAULT_PENALTIES",
    "LOCATIONS",
    "PENALTY_RULES",
    "RTOL_ULPS",
    "CauchyReadout",
    "cauchy_nll",
    "constant_columns",
    "fit_cauchy_readout",
    "readout_objective",
]

DEFAULT_PENALTIES: tuple[float, ...] = (1e-6, 1e-4, 1e-2, 1.0)
"""The ridge penalties ``lambda`` (on standardised features) that cross-validation picks from."""

PENALTY_RULES: tuple[str, ...] = ("least", "average", "median_error")
"""What cross-validation makes of the penalties (:func:`fit_cauchy_readout`'s ``penalty_rule``)."""

LOCATIONS: tuple[str, ...] = ("cauchy", "least_squares", "choose")
"""How :func:`fit_cauchy_readout` fits the location ``w.x + b``: the Cauchy maximum-likelihood
fit, the ridge least-squares fit (``sigma`` from its residuals), or the one of the two whose
out-of-fold absolute residuals have the smaller median."""

CV_ROWS_PER_DIMENSION = 20
"""Cross-validation runs while ``n < 20 (d + 1)`` (``d`` the feature dimension after projection);
with more rows the data outweigh every penalty of the grid and the smallest is used."""

MAX_DIMENSION = 256
"""Features with more columns are projected on their leading principal components first."""

RTOL_ULPS = 256
""":func:`fit_cauchy_readout`'s default ``rtol``: this many machine epsilons of the features'
dtype (of float32: ``3.05e-5``, well above the 20-odd ulps by which a network's float32 hidden
states at one prefix vary between batch positions, well below the relative spread of a column
that carries a signal)."""


def constant_columns(features: torch.Tensor, rtol: float | torch.Tensor) -> torch.Tensor:
    """``[C]`` bool: the columns whose standard deviation over the rows is at most ``rtol``
    times their largest magnitude (an exactly constant column always).

    Args:
        features: ``[n, C]``.
        rtol: a float, or ``[C]`` one per column.

    Returns:
        ``[C]`` bool, True where :func:`fit_cauchy_readout` reads the column as constant.

    Example:
        >>> import torch
        >>> x = torch.tensor([[1.0, 5.0, 0.0], [1.0 + 1e-7, 6.0, 0.0]], dtype=torch.float64)
        >>> constant_columns(x, 3e-5).tolist()
        [True, False, True]
    """
    x = features.double()
    tol = torch.as_tensor(rtol, dtype=x.dtype, device=x.device)
    return x.std(0) <= tol * x.abs().amax(0)


_CV_TOL = 1e-6
_SIGMA_FLOOR = 1e-9  # relative to the targets' spread: keeps log(sigma) finite on exact fits


def cauchy_nll(t: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    r"""The Cauchy negative log-density ``log(pi scale) + log1p(((t - loc) / scale)^2)``, elementwise.

    Args:
        t: observed values ``[...]``.
        loc: locations (broadcast with ``t``).
        scale: positive scales (broadcast with ``t``).

    Returns:
        ``[...]`` the negative log-density of each value.

    Example:
        >>> import torch
        >>> from scipy.stats import cauchy
        >>> t, loc, scale = (torch.tensor(v, dtype=torch.float64) for v in (2.0, 0.5, 3.0))
        >>> bool(abs(float(cauchy_nll(t, loc, scale)) + cauchy.logpdf(2.0, loc=0.5, scale=3.0)) < 1e-12)
        True
    """
    z = (t - loc) / scale
    return torch.log(math.pi * scale) + torch.log1p(z * z)


def readout_objective(
    features: torch.Tensor,
    targets: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | float,
    noise: torch.Tensor | float,
    penalty: float = 0.0,
) -> torch.Tensor:
    r"""The objective ``J(w, b, sigma)`` of :func:`fit_cauchy_readout` at a given readout.

    The penalty is on the standardised features' weights, ``lambda sum_j (d_j w_j)^2`` with
    ``d_j`` the standard deviation of feature ``j`` over the rows (a constant feature: 1).

    Args:
        features: ``[n, C]``.
        targets: ``[n]``.
        weight: ``[C]`` ``w`` on the features as given.
        bias: ``b``.
        noise: ``sigma > 0``.
        penalty: ``lambda >= 0``.

    Returns:
        The 0-d objective (float64).

    Example:
        >>> import torch
        >>> x = torch.tensor([[0.0], [1.0], [2.0]], dtype=torch.float64)
        >>> J = readout_objective(x, torch.tensor([1.0, 3.0, 5.0]), torch.tensor([2.0]), 1.0, 1.0)
        >>> abs(float(J) - __import__("math").log(__import__("math").pi)) < 1e-12  # exact fit
        True
    """
    x = features.double()
    t = targets.double()
    w = weight.double()
    sd = x.std(0)
    sd = torch.where(sd > 0, sd, torch.ones_like(sd))
    nll = cauchy_nll(
        t,
        x @ w + torch.as_tensor(bias, dtype=torch.float64),
        torch.as_tensor(noise, dtype=torch.float64),
    )
    return nll.mean() + float(penalty) * ((sd * w) ** 2).sum()


@dataclass(frozen=True)
class CauchyReadout:
    """A solved readout ``Y ~ Cauchy(w.x + b, sigma)`` (see the module docstring).

    Attributes:
        weight: ``[C]`` ``w``, on the features as given (not standardised).
        bias: ``b`` (0-d tensor).
        noise: ``sigma > 0`` (0-d tensor).
        penalty: the ``lambda`` that cross-validation chose (or the one given).
        cv_nll: the mean held-out negative log-likelihood of that ``lambda`` over the folds
            (``nan`` without cross-validation).
        count: the number of rows it was fitted on.
        iterations: the iterations of the final fit.
        cv_nlls: the mean held-out negative log-likelihood of every penalty of the grid, in the
            grid's order (empty without cross-validation).
        location: how ``w`` and ``b`` were fitted (:data:`LOCATIONS`, never ``"choose"``: the
            one chosen).

    Example:
        >>> import torch
        >>> r = CauchyReadout(torch.tensor([2.0, 0.0]), torch.tensor(1.0), torch.tensor(0.5),
        ...                   1e-3, float("nan"), 10, 5)
        >>> loc, scale = r.predict(torch.tensor([[1.0, 5.0], [0.0, 1.0]]))
        >>> loc.tolist(), scale.tolist()
        ([3.0, 1.0], [0.5, 0.5])
    """

    weight: torch.Tensor
    bias: torch.Tensor
    noise: torch.Tensor
    penalty: float
    cv_nll: float
    count: int
    iterations: int
    cv_nlls: tuple[float, ...] = ()
    location: str = "cauchy"

    def predict(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loc_Y, scale_Y)`` of the readout on ``features``.

        Args:
            features: ``[..., C]``.

        Returns:
            ``(w.x + b, sigma)``, each ``[...]``, in the features' dtype.
        """
        w = self.weight.to(features.dtype)
        loc = features @ w + self.bias.to(features.dtype)
        return loc, self.noise.to(features.dtype).expand(loc.shape)


def _irls(
    x1: torch.Tensor,
    t: torch.Tensor,
    rows: torch.Tensor,
    penalty: torch.Tensor,
    sigma_floor: float,
    max_iter: int,
    tol: float,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Batched ECM: ``x1`` ``[n, C+1]`` (standardised features and a column of ones), ``t`` ``[n]``,
    ``rows`` ``[P, n]`` 0/1 (the rows each problem fits), ``penalty`` ``[P]``. Returns
    ``(theta [P, C+1], sigma [P], iterations)``."""
    P = rows.shape[0]
    c1 = x1.shape[1]
    pen = torch.ones(c1, dtype=x1.dtype, device=x1.device)
    pen[-1] = 0.0  # the bias is not penalised
    count = rows.sum(1)  # [P]
    eye = torch.diag_embed(pen.expand(P, c1))

    def solve(weights: torch.Tensor, ridge: torch.Tensor) -> torch.Tensor:
        wx = x1 * weights[..., None]  # [P, n, C+1]
        gram = x1.T @ wx + ridge[:, None, None] * eye
        rhs = (wx * t[:, None]).sum(1)
        theta, info = torch.linalg.solve_ex(gram, rhs)
        singular = info != 0
        if bool(singular.any()):
            # Rows that do not determine every coefficient (a fold or a table of a few distinct
            # rows, with no penalty): the minimum-norm solution, the limit of a vanishing ridge.
            pinv = torch.linalg.pinv(gram[singular], hermitian=True)
            theta[singular] = (pinv @ rhs[singular][..., None])[..., 0]
        return theta

    # Start: ridge least squares with the same lambda; sigma from the median absolute residual.
    theta = solve(rows, count * penalty)
    resid = t - theta @ x1.T  # [P, n]
    big = torch.finfo(x1.dtype).max
    med = torch.where(rows > 0, resid, torch.full_like(resid, math.nan)).nanmedian(1).values
    spread = torch.where(rows > 0, (resid - med[:, None]).abs(), torch.full_like(resid, math.nan))
    sigma2 = spread.nanmedian(1).values.clamp(min=sigma_floor, max=big**0.25) ** 2
    theta[:, -1] += med
    resid = t - theta @ x1.T
    previous = torch.full((P,), math.inf, dtype=x1.dtype, device=x1.device)
    done = 0
    for step in range(1, max_iter + 1):
        done = step
        u = rows * 2.0 * sigma2[:, None] / (sigma2[:, None] + resid * resid)
        theta = solve(u, 2.0 * count * penalty * sigma2)
        resid = t - theta @ x1.T
        # The parameter-expanded step (divide by sum(u), not n): the same fixed point, the
        # Cauchy scale equation sum r^2 / (sigma^2 + r^2) = n / 2, reached in far fewer steps.
        sigma2 = ((u * resid * resid).sum(1) / u.sum(1)).clamp(min=sigma_floor**2)
        nll = (rows * torch.log1p(resid * resid / sigma2[:, None])).sum(1) / count
        nll = nll + 0.5 * torch.log(sigma2)
        w = theta[:, :-1]
        objective = nll + penalty * (w * w).sum(1)
        change = (previous - objective).abs().max()
        previous = objective
        if float(change) <= tol * (1.0 + float(objective.abs().max())):
            break
    return theta, sigma2.sqrt(), done


def _folds(rows: torch.Tensor, k: int, seed: int) -> torch.Tensor:
    """``[k, n]`` 0/1: row ``i`` is held out in fold ``j`` when it is 1 (a seeded shuffle).

    Copies of a row (equal features and target: a text repeated in the data) fall in the same
    fold, so that no fold is scored on rows it was also fitted on.
    """
    _, group = torch.unique(rows.cpu(), dim=0, return_inverse=True)
    groups = int(group.max()) + 1
    order = torch.randperm(groups, generator=torch.Generator().manual_seed(seed))
    fold_of = torch.empty(groups, dtype=torch.long)
    for j in range(k):
        fold_of[order[j::k]] = j
    held = torch.zeros(k, rows.shape[0], dtype=torch.float64)
    held[fold_of[group], torch.arange(rows.shape[0])] = 1.0
    return held


def fit_cauchy_readout(
    features: torch.Tensor,
    targets: torch.Tensor,
    *,
    penalties: Sequence[float] = DEFAULT_PENALTIES,
    folds: int = 5,
    seed: int = 0,
    max_iter: int = 500,
    tol: float = 1e-8,
    max_dimension: int = MAX_DIMENSION,
    penalty_rule: str = "least",
    rtol: float | torch.Tensor | None = None,
    location: str = "cauchy",
) -> CauchyReadout:
    r"""The penalised Cauchy maximum-likelihood readout of ``targets`` on ``features``.

    Minimises ``J`` of the module docstring in float64 by IRLS. With more than one penalty and
    fewer than :data:`CV_ROWS_PER_DIMENSION` ``(d + 1)`` rows, ``lambda`` is chosen by
    ``folds``-fold cross-validation (rows shuffled with ``seed``) of the mean held-out negative
    log-likelihood; with more rows the smallest penalty is used. The readout is then refitted on
    every row. Features with more than ``max_dimension`` columns are first projected (after
    standardising) on their ``max_dimension`` leading principal components, so that each
    iteration solves a system of at most that size; the weight returned is on the original
    features.

    Args:
        features: ``[n, C]`` floating-point features (finite).
        targets: ``[n]`` floating-point targets (finite), in the space the readout predicts.
        penalties: the candidate ``lambda >= 0`` (on standardised features).
        folds: cross-validation folds, at least 2 when there is more than one penalty.
        seed: seed of the fold assignment.
        max_iter: IRLS iterations at most per fit.
        tol: stop when the objective changes by less than ``tol * (1 + |J|)``.
        max_dimension: ``d``, the most feature columns the solve works with.
        penalty_rule: what cross-validation makes of the penalties: ``"least"`` refits the one
            of the least held-out NLL; ``"average"`` refits every one and averages the readouts
            (weights, bias and ``sigma``) with the weights ``exp(-n (cv_j - cv_min))`` of their
            held-out likelihoods (pseudo-Bayesian model averaging): a still linear readout that
            moves smoothly when two penalties' held-out NLLs cross, where ``"least"`` jumps;
            ``"median_error"`` refits the one of the least median held-out absolute residual
            (the location alone is scored: the fold's ``sigma``, fitted on a few rows, is not).
            Without cross-validation every rule gives the one fit.
        rtol: a column whose standard deviation over the rows is at most ``rtol`` times its
            largest magnitude is constant (:func:`constant_columns`): weight 0, the bias takes
            it. A float, or ``[C]`` one per column; default :data:`RTOL_ULPS` machine epsilons
            of ``features``' dtype. Give the precision the features were computed in when it is
            lower than their dtype (float32 hidden states passed in float64).
        location: ``"cauchy"`` (default) fits ``w`` and ``b`` by maximum likelihood as above;
            ``"least_squares"`` by ridge least squares on the standardised features (the IRLS's
            start: the same penalty, the bias then moved by the residuals' median), with
            ``sigma`` the median absolute deviation of its residuals (a Cauchy law's scale);
            ``"choose"`` cross-validates both with every penalty (``folds`` folds, whatever the
            row count) and keeps the pair of the least median out-of-fold absolute residual
            (``penalty_rule`` must then be ``"least"`` or ``"median_error"``, and is the
            latter). On few rows of nearly Gaussian noise the least-squares location varies
            less than the Cauchy one; with gross errors it is the Cauchy one that holds.

    Returns:
        :class:`CauchyReadout` with the weight on the features as given (``penalty`` is the
        one chosen, under ``"average"`` the one of the least held-out NLL; ``cv_nll`` is its
        held-out NLL).

    Raises:
        ValueError: tensors of the wrong kind or shape, fewer rows than ``2 * folds`` (or 2),
            non-finite values, an empty or negative penalty grid, or bad ``folds``,
            ``max_iter`` or ``tol``, or an ``rtol`` that is negative, not finite or of the
            wrong shape.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> x = torch.randn(400, 3, generator=g)
        >>> noise = 0.1 * torch.tan(torch.pi * (torch.rand(400, generator=g) - 0.5))
        >>> t = x @ torch.tensor([1.0, -2.0, 0.0]) + 3.0 + noise
        >>> r = fit_cauchy_readout(x, t)
        >>> [round(v, 1) for v in r.weight.tolist()], round(float(r.bias), 1)
        ([1.0, -2.0, 0.0], 3.0)
        >>> 0.07 < float(r.noise) < 0.13  # the Cauchy scale of the noise, 0.1
        True
    """
    x = require_tensor("features", features, floating=True)
    t = require_tensor("targets", targets, floating=True)
    if x.ndim != 2 or t.ndim != 1 or t.shape[0] != x.shape[0]:
        raise ValueError(
            f"features must be [n, C] and targets [n]; got features {tuple(x.shape)}, targets "
            f"{tuple(t.shape)}"
        )
    folds = positive_int("folds", folds)
    max_iter = positive_int("max_iter", max_iter)
    max_dimension = positive_int("max_dimension", max_dimension)
    if not (isinstance(tol, (int, float)) and math.isfinite(tol) and tol >= 0):
        raise ValueError(f"tol must be a finite number >= 0, got {tol!r}")
    grid = [float(p) for p in penalties]
    if not grid or any(not (math.isfinite(p) and p >= 0) for p in grid):
        raise ValueError(
            f"penalties must be a non-empty list of finite values >= 0, got {penalties!r}"
        )
    if penalty_rule not in PENALTY_RULES:
        raise ValueError(f"penalty_rule must be one of {PENALTY_RULES}, got {penalty_rule!r}")
    if location not in LOCATIONS:
        raise ValueError(f"location must be one of {LOCATIONS}, got {location!r}")
    if location == "choose" and penalty_rule == "average":
        raise ValueError(
            'location="choose" picks one fit: use penalty_rule "least" or "median_error"'
        )
    choose = len(grid) > 1 or location == "choose"
    if choose and folds < 2:
        raise ValueError(f"choosing among {len(grid)} penalties needs folds >= 2, got {folds}")
    n, c = x.shape
    need = 2 * folds if choose else 2
    if n < need:
        raise ValueError(f"fit_cauchy_readout needs at least {need} rows, got {n}")
    x = x.detach().double()
    t = t.detach().double().to(x.device)
    check_finite("features", x)
    check_finite("targets", t)
    if rtol is None:
        rtol = RTOL_ULPS * torch.finfo(features.dtype).eps
    flat = torch.as_tensor(rtol, dtype=torch.float64).detach()
    if (
        flat.shape not in ((), (c,))
        or not bool(torch.isfinite(flat).all())
        or bool((flat < 0).any())
    ):
        raise ValueError(
            f"rtol must be a finite float >= 0 or [{c}] of them, got {tuple(flat.shape)} "
            f"{flat.flatten()[:4].tolist()}"
        )
    varies = ~constant_columns(x, flat.to(x.device))
    mean, sd = x.mean(0), x.std(0)
    sd = torch.where(varies, sd, torch.ones_like(sd))
    xs = ((x - mean) / sd)[:, varies]
    basis = None
    if xs.shape[1] > max_dimension:
        # The leading principal directions: an orthonormal basis, so the penalty is unchanged.
        basis = torch.linalg.svd(xs, full_matrices=False).Vh[:max_dimension].T  # [C, d]
        xs = xs @ basis
    d = xs.shape[1]
    x1 = torch.cat([xs, torch.ones(n, 1, dtype=x.dtype, device=x.device)], 1)
    spread = float((t - t.median()).abs().median()) or float(t.std()) or 1.0
    floor = _SIGMA_FLOOR * spread

    best, cv = min(grid), math.nan
    share: torch.Tensor | None = None  # the averaging weights of the penalties ("average")
    curve: tuple[float, ...] = ()
    estimators = ("cauchy", "least_squares") if location == "choose" else (location,)
    chosen = estimators[0]
    # Copies of a row fall in one fold: with fewer distinct rows than folds, one fold per
    # distinct row (a fold that held out every row would be fitted on none); with one, no choice.
    table = torch.cat([x, t[:, None]], 1)
    k = min(folds, int(torch.unique(table.cpu(), dim=0).shape[0])) if choose else 0
    if k >= 2 and (n < CV_ROWS_PER_DIMENSION * (d + 1) or location == "choose"):
        rule = "median_error" if location == "choose" else penalty_rule
        held = _folds(table, k, seed).to(x.device)  # [k, n]
        rows = (1.0 - held).repeat(len(grid), 1)  # [len(grid) * k, n]: penalty-major
        lam = torch.tensor(grid, dtype=x.dtype, device=x.device).repeat_interleave(k)
        held_all = held.repeat(len(grid), 1)
        best_score = math.inf
        for estimator in estimators:
            # The choice needs the held-out likelihoods to a few digits, not the optimum to tol.
            steps = max_iter if estimator == "cauchy" else 0
            theta, sigma, _ = _irls(x1, t, rows, lam, floor, steps, max(tol, _CV_TOL))
            loc = theta @ x1.T  # [P, n]
            nll = cauchy_nll(t, loc, sigma[:, None])
            per_penalty = (nll * held_all).sum(1).reshape(len(grid), k).sum(1) / n
            score = per_penalty
            if rule == "median_error":
                # each row is held out once: its out-of-fold residual under every penalty
                out_of_fold = ((t - loc) * held_all).reshape(len(grid), k, n).sum(1)
                score = out_of_fold.abs().median(1).values
            # the least score; a tie goes to the larger penalty, then to the earlier estimator
            scores = [(float(v), -p) for v, p in zip(score.tolist(), grid, strict=True)]
            i = scores.index(min(scores))
            if float(score[i]) < best_score:
                best_score, chosen = float(score[i]), estimator
                best, cv = grid[i], float(per_penalty[i])
                curve = tuple(float(v) for v in per_penalty)
                if rule == "average":
                    share = torch.softmax(-n * per_penalty, 0)  # exp(-n (cv_j - cv_min))
    fitted = [best] if share is None else grid
    ones = torch.ones(len(fitted), n, dtype=x.dtype, device=x.device)
    lam = torch.tensor(fitted, dtype=x.dtype, device=x.device)
    steps = max_iter if chosen == "cauchy" else 0
    theta, sigma, iterations = _irls(x1, t, ones, lam, floor, steps, tol)
    if share is not None:  # a weighted mean of linear readouts is a linear readout
        theta, sigma = share[None] @ theta, share[None] @ sigma
    w_std = theta[0, :-1] if basis is None else basis @ theta[0, :-1]
    weight = torch.zeros(c, dtype=x.dtype, device=x.device)
    weight[varies] = w_std / sd[varies]
    bias = theta[0, -1] - (weight * mean).sum()
    return CauchyReadout(
        weight=weight.to(features.dtype),
        bias=bias.to(features.dtype),
        noise=sigma[0].to(features.dtype),
        penalty=best,
        cv_nll=cv,
        count=n,
        iterations=iterations,
        cv_nlls=curve,
        location=chosen,
    )
