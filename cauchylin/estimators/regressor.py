r"""``CausalRegressor``: a scikit-learn regressor with a Cauchy predictive distribution.

The network is ``x -> MLP -> Abduction -> Action`` (see :mod:`cauchylin.nn`); the prediction for
a row is the regression value

.. math::

    Y = W_\mathrm{reg} U' + b_\mathrm{reg} \sim
    \mathrm{Cauchy}(\mathrm{loc}_Y, \mathrm{scale}_Y),

in closed form. It is trained by minimising the Cauchy negative log-likelihood
(:func:`cauchylin.losses.gated_regression_loss` with every row a target)

.. math::

    \mathcal{L} = \frac1N \sum_i \Big[\log(\pi\,\mathrm{scale}_{Y,i})
        + \log\Big(1 + \Big(\frac{y_i - \mathrm{loc}_{Y,i}}{\mathrm{scale}_{Y,i}}\Big)^2\Big)\Big]

in the standard mode on standardised targets ``(y - median(y)) / s`` with
``s = IQR(y) / 1.349`` (the standard deviation for normal data, but not moved by a minority of
wild targets; the standard deviation, then 1, when the IQR is 0). A target far from the
prediction adds only ``2 log |residual|`` to the loss, and its gradient decays as
``1 / residual``, which is why outlying labels barely move the fit. ``predict`` returns
``loc_Y``, the median of the predictive distribution, in the units of ``y``.

**Calibrated intervals.** No Cauchy law is right at 50% and 90% at once for light-tailed errors
(:mod:`cauchylin.conformal`). With ``calibration="auto"`` (the default) ``fit`` holds out a fifth
of the rows (from 100 rows on; :func:`cauchylin.conformal.calibration_holdout`), trains on the
rest, and fits a normalised split-conformal regressor (crepes' ``ConformalRegressor``, with the
residuals ``|y - loc_Y|`` and the difficulty ``scale_Y``) on the held-out rows;
:meth:`CausalRegressor.predict_interval` then gives ``loc_Y ± q(c) scale_Y``, which covers a new
row with probability at least ``c``. The estimator is also a plain scikit-learn regressor, so
MAPIE's conformal wrappers take it as they take any other.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.base import RegressorMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import validate_data
from torch import nn

from cauchylin import losses
from cauchylin._validation import finite_number
from cauchylin.conformal import calibration_holdout
from cauchylin.estimators._base import (
    CausalEstimatorBase,
    check_representable,
    column_mean_std,
)
from cauchylin.vector import CauchyVector

__all__ = ["CausalRegressor"]


def _robust_centre_scale(y: np.ndarray) -> tuple[float, float]:
    """``(median, IQR / 1.349)``, with the standard deviation then 1 as fallbacks for the scale."""
    centre = float(np.median(y))
    q25, q75 = np.percentile(y, [25.0, 75.0])
    scale = float(q75 / 1.349 - q25 / 1.349)  # divided first: q75 - q25 may overflow
    if not scale > 0:
        scale = float(column_mean_std(y[:, None])[1][0])
    if not (scale > 0 and np.isfinite(scale)):
        scale = 1.0
    return centre, scale


def _cauchy_nll(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = module(x, "standard", 1.0)
    every_row = torch.ones_like(y, dtype=torch.bool)
    return losses.gated_regression_loss(out.loc_Y, out.scale_Y, y, every_row).mean


class CausalRegressor(RegressorMixin, CausalEstimatorBase):
    r"""Regressor ``x -> MLP -> Abduction -> Action`` fitted by Cauchy maximum likelihood.

    The prediction of a row is ``Y = W_reg U' + b_reg ~ Cauchy(loc_Y, scale_Y)``; ``predict``
    returns its median ``loc_Y``, :meth:`predict_distribution` the whole law (a
    :class:`~cauchylin.CauchyVector`), :meth:`predict_interval` the central interval of coverage
    ``c``: calibrated on rows held out of training (``loc_Y +- q(c) scale_Y``) when the fit held
    some out, else the Cauchy ``loc_Y +- scale_Y tan(pi c / 2)``. The model, its loss and its
    standardisation are described in the :mod:`module docstring <cauchylin.estimators.regressor>`;
    the inference modes in :mod:`cauchylin.nn` and on the documentation's modes page.

    Args:
        hidden_layer_sizes: widths of the hidden layers of the feature MLP (an int for one layer;
            ``()`` for none, a linear location model). The default, one layer of 32, suits
            tables of a few hundred to a few thousand rows.
        causal_size: ``C``, the width of ``U`` (``None``: the last hidden width).
        activation: ``"relu"``, ``"tanh"``, ``"gelu"`` or ``"silu"``.
        gamma_init: initial ``scale_U`` of the abduction (in standardised target units the
            initial ``scale_Y`` is about ``0.8 sqrt(C) (gamma_init + b_noise_init)``).
        b_noise_init: initial exogenous noise ``b_noise`` (``>= 0``).
        learning_rate: Adam's step size.
        alpha: L2 penalty on the weight matrices (Adam's ``weight_decay``).
        batch_size: rows per optimisation step.
        max_iter: maximal number of epochs.
        early_stopping: hold out ``validation_fraction`` of the rows, stop when their loss stops
            improving and keep the best weights (with too few rows, fewer than 2 on either side,
            the training loss is monitored instead).
        validation_fraction: share of rows held out, in ``(0, 1)``.
        n_iter_no_change: epochs without an improvement of ``tol`` that stop training.
        tol: minimal decrease of the monitored mean loss that counts as an improvement.
        mode: default inference mode of the predict methods (a name of
            :data:`cauchylin.nn.MODES`).
        temperature: default temperature ``T >= 0`` of the predict methods.
        dtype: ``"float32"`` or ``"float64"``, the dtype of the parameters and of training.
            Predictions are computed in float64 either way (on a copy of the network), so that
            a row's prediction does not depend on the rows predicted with it.
        device: torch device of the network (``"cpu"``, ``"cuda"``, ...).
        random_state: ``None``, an int or a ``numpy.random.RandomState``: seeds the weights, the
            calibration and validation splits and the row order.
        calibration: ``"auto"`` (hold out a fifth of the rows, at most 2000, from 100 rows on),
            a share in ``[0, 1)`` of the rows to hold out, or None (no calibration): the rows
            the conformal intervals are fitted on, never trained on (needs the ``crepes``
            package, in the ``sklearn`` extra).
        verbose: show a tqdm progress bar of the epochs.

    Attributes:
        module_: the fitted :class:`torch.nn.Module` (``features``, ``abduction``, ``action``).
        n_features_in_: number of input columns.
        n_iter_: epochs run.
        best_epoch_: epoch whose weights were kept.
        loss_curve_: mean training loss per epoch (standardised units).
        validation_loss_curve_: mean validation loss per epoch, or ``None``.
        x_mean_: column means used to standardise ``X``.
        x_scale_: column standard deviations (1 for constant columns).
        y_centre_: median of the training targets.
        y_scale_: ``IQR / 1.349`` of the training targets (see above for the fallbacks).
        conformal_: the fitted ``crepes.ConformalRegressor`` of the calibration rows, or None.
        calibration_size_: the number of rows held out to calibrate on (0: none).
        calibration_rows_: their indices in the ``X`` given to :meth:`fit` (sorted).

    Raises:
        ValueError: from :meth:`fit`, a bad setting (the message names it) or bad data.

    Example:
        >>> import numpy as np
        >>> from cauchylin.estimators import CausalRegressor
        >>> rng = np.random.default_rng(0)
        >>> X = rng.normal(size=(200, 2))
        >>> y = 3 * X[:, 0] - X[:, 1] + 0.1 * rng.standard_cauchy(200)
        >>> reg = CausalRegressor((), learning_rate=0.01, random_state=0).fit(X, y)
        >>> bool(np.median(np.abs(reg.predict(X) - (3 * X[:, 0] - X[:, 1]))) < 0.2)
        True
        >>> lower, upper = reg.predict_interval(X[:3], coverage=0.9)
        >>> bool((lower < upper).all())
        True
    """

    def __init__(
        self,
        hidden_layer_sizes: Any = (32,),
        *,
        causal_size: int | None = None,
        activation: str = "relu",
        gamma_init: float = 1.0,
        b_noise_init: float = 0.1,
        learning_rate: float = 1e-3,
        alpha: float = 1e-4,
        batch_size: int = 32,
        max_iter: int = 500,
        early_stopping: bool = True,
        validation_fraction: float = 0.1,
        n_iter_no_change: int = 20,
        tol: float = 1e-4,
        mode: str = "standard",
        temperature: float = 1.0,
        dtype: str = "float32",
        device: str = "cpu",
        random_state: Any = None,
        verbose: bool = False,
        calibration: Any = "auto",
    ) -> None:
        self.hidden_layer_sizes = hidden_layer_sizes
        self.causal_size = causal_size
        self.activation = activation
        self.gamma_init = gamma_init
        self.b_noise_init = b_noise_init
        self.learning_rate = learning_rate
        self.alpha = alpha
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.mode = mode
        self.temperature = temperature
        self.dtype = dtype
        self.device = device
        self.random_state = random_state
        self.verbose = verbose
        self.calibration = calibration

    def fit(self, X: Any, y: Any) -> CausalRegressor:
        """Fit the network to ``(X, y)`` by Cauchy maximum likelihood (see the class docstring).

        Args:
            X: array-like ``[n_samples, n_features]`` of finite numbers.
            y: array-like ``[n_samples]`` of finite numbers.

        Returns:
            ``self``, fitted.

        Raises:
            ValueError: a bad setting, NaN/inf or complex data, an empty ``X``, mismatched
                lengths, or a 2-D ``y`` with more than one column.
            FloatingPointError: the loss diverged (lower ``learning_rate``).

        Example:
            >>> import numpy as np
            >>> from cauchylin.estimators import CausalRegressor
            >>> X = np.linspace(-1, 1, 50)[:, None]
            >>> reg = CausalRegressor((8,), learning_rate=0.03, random_state=0)
            >>> reg = reg.fit(X, 2 * X[:, 0])
            >>> reg.n_features_in_, reg.best_epoch_ <= reg.n_iter_ == len(reg.loss_curve_)
            (1, True)
        """
        X, y = validate_data(self, X, y, y_numeric=True, dtype=[np.float64, np.float32])
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        held = calibration_holdout(y.shape[0], self.calibration)
        fit_rows, cal_rows = np.arange(y.shape[0]), np.arange(0)
        if held:
            seed = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
            order = np.random.default_rng(seed).permutation(y.shape[0])
            fit_rows, cal_rows = np.sort(order[held:]), np.sort(order[:held])
        self.y_centre_, self.y_scale_ = _robust_centre_scale(y[fit_rows])
        with np.errstate(over="ignore"):
            targets = (y[fit_rows] - self.y_centre_) / self.y_scale_
        check_representable("y", "standardised values", targets, self._torch_dtype())
        self._fit_network(
            X[fit_rows],
            targets,
            self._torch_dtype(),
            1,
            _cauchy_nll,
            threshold=0.0,
            stratify=False,
        )
        self.calibration_size_ = int(held)
        self.calibration_rows_ = cal_rows
        self.conformal_ = None
        if held:
            from crepes import ConformalRegressor

            d = self.predict_distribution(X[cal_rows])
            loc, scale = d.loc.cpu().numpy(), d.scale.cpu().numpy()
            self.conformal_ = ConformalRegressor().fit(
                residuals=np.abs(y[cal_rows] - loc), sigmas=scale
            )
        return self

    def predict_distribution(
        self,
        X: Any,
        *,
        mode: str | None = None,
        temperature: float | None = None,
        generator: torch.Generator | None = None,
        eps_seed: torch.Tensor | None = None,
        eps_noise: torch.Tensor | None = None,
    ) -> CauchyVector:
        r"""The predictive law of each row: ``Y_i ~ Cauchy(loc_Y_i, scale_Y_i)`` in ``y``'s units.

        The rows are independent given ``X``, so the result is a float64
        :class:`~cauchylin.CauchyVector` of shape ``[n_samples]`` with independent components:
        ``.loc`` is the prediction, ``.icdf(q)`` the ``q``-quantile of every row,
        ``.log_prob(y)`` the log-densities, ``.to_distribution()`` the Pyro
        :class:`~cauchylin.distributions.IndependentCauchy`.

        Args:
            X: array-like ``[n_samples, n_features]``.
            mode: inference mode (default: the ``mode`` setting). ``causal`` drops the exogenous
                noise (a narrower law, same median); the sampling modes shift the median by a
                drawn noise or individual.
            temperature: ``T >= 0`` (default: the ``temperature`` setting).
            generator: ``torch.Generator`` of the random modes (default: one seeded at fit, so
                that repeated calls agree).
            eps_seed: fixed ``[C]`` draw of ``shared_individual`` (default: drawn once from
                ``generator`` and shared by all rows).
            eps_noise: fixed ``[C]`` draw of ``shared_noise`` (default: as ``eps_seed``).

        Returns:
            :class:`~cauchylin.CauchyVector` ``[n_samples]``, float64.

        Raises:
            sklearn.exceptions.NotFittedError: before :meth:`fit`.
            ValueError: a bad ``X`` (wrong width, NaN), mode or temperature.

        Example:
            >>> import numpy as np
            >>> from cauchylin.estimators import CausalRegressor
            >>> X = np.linspace(-1, 1, 40)[:, None]
            >>> reg = CausalRegressor((8,), learning_rate=0.03, random_state=0).fit(X, X[:, 0])
            >>> d = reg.predict_distribution(X[:2])
            >>> d.shape, bool(np.allclose(d.loc.numpy(), reg.predict(X[:2])))
            (torch.Size([2]), True)
            >>> bool((d.icdf(0.25) < d.icdf(0.75)).all())
            True
        """
        out = self._output(X, mode, temperature, generator, eps_seed, eps_noise)
        loc = out.loc_Y.to(torch.float64) * self.y_scale_ + self.y_centre_
        scale = out.scale_Y.to(torch.float64) * self.y_scale_
        return CauchyVector(loc, scale)

    def predict(
        self,
        X: Any,
        *,
        mode: str | None = None,
        temperature: float | None = None,
        generator: torch.Generator | None = None,
        eps_seed: torch.Tensor | None = None,
        eps_noise: torch.Tensor | None = None,
    ) -> np.ndarray:
        """The predictive median ``loc_Y`` of each row, in ``y``'s units.

        Args:
            X: array-like ``[n_samples, n_features]``.
            mode: inference mode (see :meth:`predict_distribution`).
            temperature: ``T >= 0``.
            generator: ``torch.Generator`` of the random modes.
            eps_seed: fixed draw of ``shared_individual``.
            eps_noise: fixed draw of ``shared_noise``.

        Returns:
            ``numpy.ndarray`` ``[n_samples]``, float64.

        Raises:
            sklearn.exceptions.NotFittedError: before :meth:`fit`.
            ValueError: as :meth:`predict_distribution`.

        Example:
            >>> import numpy as np
            >>> from cauchylin.estimators import CausalRegressor
            >>> X = np.linspace(-1, 1, 40)[:, None]
            >>> reg = CausalRegressor((8,), learning_rate=0.03, random_state=0).fit(X, X[:, 0])
            >>> reg.predict(X[:3]).shape
            (3,)
        """
        d = self.predict_distribution(
            X,
            mode=mode,
            temperature=temperature,
            generator=generator,
            eps_seed=eps_seed,
            eps_noise=eps_noise,
        )
        return d.loc.cpu().numpy()

    def predict_interval(
        self,
        X: Any,
        coverage: float = 0.9,
        *,
        mode: str | None = None,
        temperature: float | None = None,
        calibrated: bool = True,
    ) -> tuple[np.ndarray, np.ndarray]:
        r"""Central predictive interval of each row, of probability ``coverage``.

        Calibrated (the default, when :meth:`fit` held rows out and the mode and temperature are
        the estimator's settings the calibration was made with): ``loc_Y -+ q(c) scale_Y`` with
        ``q(c)`` the split-conformal quantile of the held-out rows' ``|y - loc_Y| / scale_Y``
        (crepes' normalised ``ConformalRegressor``), which covers a new row with probability at
        least ``c``; a coverage too high for the held-out count (``ceil((n + 1) c) > n``) has no
        finite calibrated width and gets the Cauchy interval. Otherwise the ``(1 -+ c)/2``
        quantiles of ``Cauchy(loc_Y, scale_Y)``: ``loc_Y -+ scale_Y tan(pi c / 2)`` (``+-scale_Y``
        at 0.5, ``+-6.31 scale_Y`` at 0.9).

        Args:
            X: array-like ``[n_samples, n_features]``.
            coverage: probability inside the interval, in ``(0, 1)``.
            mode: inference mode (see :meth:`predict_distribution`).
            temperature: ``T >= 0``.
            calibrated: use the calibration when there is one (False: the Cauchy interval).

        Returns:
            ``(lower, upper)``, two float64 arrays ``[n_samples]``.

        Raises:
            sklearn.exceptions.NotFittedError: before :meth:`fit`.
            ValueError: ``coverage`` outside ``(0, 1)``, or as :meth:`predict_distribution`.

        Example:
            >>> import numpy as np
            >>> from cauchylin.estimators import CausalRegressor
            >>> X = np.linspace(-1, 1, 40)[:, None]
            >>> reg = CausalRegressor((8,), learning_rate=0.03, random_state=0).fit(X, X[:, 0])
            >>> lower, upper = reg.predict_interval(X[:2], coverage=0.5)
            >>> d = reg.predict_distribution(X[:2])
            >>> bool(np.allclose(upper - lower, 2 * d.scale.numpy()))  # +-scale_Y at 50 %
            True
        """
        c = finite_number("coverage", coverage)
        if not 0.0 < c < 1.0:
            raise ValueError(f"coverage must lie in (0, 1), got {coverage!r}")
        d = self.predict_distribution(X, mode=mode, temperature=temperature)
        same = mode in (None, self.mode) and temperature in (None, self.temperature)
        conformal = getattr(self, "conformal_", None)
        if calibrated and same and conformal is not None:
            import warnings

            with warnings.catch_warnings():  # crepes warns before giving infinite bounds
                warnings.simplefilter("ignore", UserWarning)
                bounds = conformal.predict_int(
                    y_hat=d.loc.cpu().numpy(), sigmas=d.scale.cpu().numpy(), confidence=c
                )
            if bool(np.isfinite(bounds).all()):
                return bounds[:, 0].astype(np.float64), bounds[:, 1].astype(np.float64)
        tail = (1.0 - c) / 2.0
        lower = d.icdf(torch.tensor(tail, dtype=torch.float64))
        upper = d.icdf(torch.tensor(1.0 - tail, dtype=torch.float64))
        return lower.cpu().numpy(), upper.cpu().numpy()
