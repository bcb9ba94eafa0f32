"""What the two estimators share: settings, checks, standardisation, the fit and the forward pass.

The inputs are standardised column by column with the training mean and standard deviation
(a constant column is only centred), so the network sees features of unit scale whatever their
units. The network, the split into training and validation rows and the row order of every
epoch are drawn from one seed taken from ``random_state``, so two fits with the same integer
``random_state`` give the same model.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import numbers
import warnings
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from cauchylin._validation import finite_number, one_of, positive_int
from cauchylin.estimators._mlp import ACTIVATIONS, CausalMLP
from cauchylin.estimators._training import LossFn, train
from cauchylin.nn import MODES, ActionOutput
from cauchylin.nn.modes import MODE_TABLE

__all__ = ["CausalEstimatorBase", "check_representable", "column_mean_std"]

_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def column_mean_std(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column means and standard deviations, without overflow for entries near the float limit.

    Each column is divided by its largest magnitude first (squares of 1e300 overflow float64;
    squares of numbers at most 1 do not), and the statistics are scaled back.

    Args:
        X: ``[n, d]`` finite float64 array.

    Returns:
        ``(mean [d], std [d])`` (population standard deviation, as ``numpy.std``).

    Example:
        >>> import numpy as np
        >>> mean, std = column_mean_std(np.array([[1e300], [3e300]]))
        >>> bool(np.isclose(mean[0], 2e300)), bool(np.isclose(std[0], 1e300))  # np.std: inf
        (True, True)
    """
    size = np.max(np.abs(X), axis=0) if X.shape[0] else np.ones(X.shape[1])
    size = np.where(size > 0, size, 1.0)
    scaled = X / size
    return scaled.mean(axis=0) * size, scaled.std(axis=0) * size


def check_representable(name: str, what: str, values: np.ndarray, dtype: torch.dtype) -> None:
    """Refuse values that the training dtype cannot hold (or that overflowed float64 already).

    Args:
        name: the user's argument (``"X"``, ``"y"``), named in the error.
        what: what ``values`` are (``"standardised features"``).
        values: the array about to become a tensor of ``dtype``.
        dtype: the training dtype.

    Raises:
        ValueError: an entry is NaN, infinite or beyond ``torch.finfo(dtype).max``.

    Example:
        >>> import numpy as np, torch
        >>> check_representable("y", "values", np.array([1e300]), torch.float32)
        Traceback (most recent call last):
        ...
        ValueError: y is out of range: its values reach 1e+300, beyond what torch.float32 holds (3.4e+38) (use dtype='float64'); rescale y
    """
    limit = torch.finfo(dtype).max
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(values) & (np.abs(values) <= limit)
    if not bool(np.all(ok)):
        worst = float(np.nanmax(np.abs(np.where(np.isnan(values), 0.0, values))))
        hint = " (use dtype='float64')" if dtype != torch.float64 else ""
        raise ValueError(
            f"{name} is out of range: its {what} reach {worst:.3g}, beyond what {dtype} holds "
            f"({limit:.3g}){hint}; rescale {name}"
        )


class CausalEstimatorBase(BaseEstimator):
    """The shared machinery of :class:`~cauchylin.estimators.CausalRegressor` and
    :class:`~cauchylin.estimators.CausalClassifier` (not an estimator on its own).

    Subclasses define ``__init__`` (every setting stored as given), the loss and the output.

    Example:
        >>> from cauchylin.estimators import CausalClassifier, CausalRegressor
        >>> from cauchylin.estimators._base import CausalEstimatorBase
        >>> [issubclass(c, CausalEstimatorBase) for c in (CausalRegressor, CausalClassifier)]
        [True, True]
    """

    # ------------------------------------------------------------------ settings
    def _hidden_sizes(self) -> tuple[int, ...]:
        sizes = self.hidden_layer_sizes
        if isinstance(sizes, numbers.Integral) and not isinstance(sizes, bool):
            sizes = (sizes,)
        try:
            sizes = tuple(sizes)
        except TypeError:
            raise ValueError(
                f"hidden_layer_sizes must be a sequence of positive ints, got {sizes!r}"
            ) from None
        return tuple(positive_int("hidden_layer_sizes", s) for s in sizes)

    def _check_settings(self) -> None:
        """Raise a ``ValueError`` naming the first bad setting."""
        self._hidden_sizes()
        if self.causal_size is not None:
            positive_int("causal_size", self.causal_size)
        one_of("activation", self.activation, sorted(ACTIVATIONS))
        finite_number("gamma_init", self.gamma_init, minimum=0, exclusive=True)
        finite_number("b_noise_init", self.b_noise_init, minimum=0)
        finite_number("learning_rate", self.learning_rate, minimum=0, exclusive=True)
        finite_number("alpha", self.alpha, minimum=0)
        positive_int("batch_size", self.batch_size)
        positive_int("max_iter", self.max_iter)
        positive_int("n_iter_no_change", self.n_iter_no_change)
        finite_number("tol", self.tol, minimum=0)
        if not isinstance(self.early_stopping, bool | np.bool_):
            raise ValueError(f"early_stopping must be a bool, got {self.early_stopping!r}")
        fraction = finite_number(
            "validation_fraction", self.validation_fraction, minimum=0, exclusive=True
        )
        if fraction >= 1:
            raise ValueError(
                f"validation_fraction must lie in (0, 1), got {self.validation_fraction!r}"
            )
        self._check_mode(self.mode, self.temperature)
        self._torch_dtype()

    @staticmethod
    def _check_mode(mode: Any, temperature: Any) -> None:
        one_of("mode", mode, MODES)
        finite_number("temperature", temperature, minimum=0)

    def _torch_dtype(self) -> torch.dtype:
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be 'float32' or 'float64', got {self.dtype!r}")
        return _DTYPES[self.dtype]

    # ------------------------------------------------------------------ data
    def _standardise(self, X: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
        with np.errstate(over="ignore", invalid="ignore"):
            z = (X - self.x_mean_) / self.x_scale_
        check_representable("X", "standardised features", z, dtype)
        # torch.tensor copies, so read-only (memory-mapped) inputs are fine.
        return torch.tensor(z, dtype=dtype, device=self.device)

    def _split(
        self, n: int, y: np.ndarray, stratify: bool, seed: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Row indices ``(train, validation)``; no validation rows when there are too few."""
        rows = np.arange(n)
        n_val = math.ceil(self.validation_fraction * n)
        if not self.early_stopping or n_val < 2 or n - n_val < 2:
            return rows, rows[:0]
        strata = None
        if stratify:
            _, counts = np.unique(y, return_counts=True)
            if counts.min() >= 2 and n_val >= counts.size and n - n_val >= counts.size:
                strata = y
        train_rows, val_rows = train_test_split(
            rows, test_size=n_val, random_state=seed, stratify=strata
        )
        return np.sort(train_rows), np.sort(val_rows)

    # ------------------------------------------------------------------ fit
    def _fit_network(
        self,
        X: np.ndarray,
        targets: np.ndarray,
        target_dtype: torch.dtype,
        num_classes: int,
        loss_fn: LossFn,
        *,
        threshold: float,
        stratify: bool,
    ) -> None:
        """Standardise ``X``, split, build the network from the seed and train it."""
        self._check_settings()
        seed = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        self.x_mean_, scale = column_mean_std(X)
        self.x_scale_ = np.where(scale > 0, scale, 1.0)
        train_rows, val_rows = self._split(X.shape[0], targets, stratify, seed)
        x = self._standardise(X, self._torch_dtype())
        y = torch.as_tensor(targets, device=self.device).to(target_dtype)
        generator = torch.Generator().manual_seed(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.module_ = CausalMLP(
                X.shape[1],
                self._hidden_sizes(),
                num_classes,
                causal_size=self.causal_size,
                activation=self.activation,
                gamma_init=self.gamma_init,
                b_noise_init=self.b_noise_init,
                threshold=threshold,
                dtype=self._torch_dtype(),
            ).to(self.device)
        has_val = val_rows.size > 0
        result = train(
            self.module_,
            loss_fn,
            x[train_rows],
            y[train_rows],
            x_val=x[val_rows] if has_val else None,
            y_val=y[val_rows] if has_val else None,
            learning_rate=self.learning_rate,
            weight_decay=self.alpha,
            batch_size=self.batch_size,
            max_iter=self.max_iter,
            n_iter_no_change=self.n_iter_no_change,
            tol=self.tol,
            generator=generator,
            verbose=self.verbose,
            desc=type(self).__name__,
        )
        self.n_iter_ = result.n_iter
        self.best_epoch_ = result.best_epoch
        self.loss_curve_ = result.loss_curve
        self.validation_loss_curve_ = result.validation_losses if has_val else None
        self._predict_seed = seed
        if not result.converged:
            warnings.warn(
                f"{type(self).__name__}: max_iter={self.max_iter} epochs reached before the "
                f"monitored loss stopped improving; raise max_iter",
                ConvergenceWarning,
                stacklevel=3,
            )

    # ------------------------------------------------------------------ predict
    def _output(
        self,
        X: Any,
        mode: str | None,
        temperature: float | None,
        generator: torch.Generator | None,
        eps_seed: torch.Tensor | None,
        eps_noise: torch.Tensor | None,
    ) -> ActionOutput:
        """The network's :class:`~cauchylin.nn.ActionOutput` on ``X`` in a mode (no gradients).

        ``mode``/``temperature`` default to the estimator's settings. The random modes draw from
        ``generator``, by default a fresh generator seeded at fit time (so repeated calls give
        the same draws); the shared modes draw one ``eps_seed``/``eps_noise`` of shape ``[C]``
        from it unless one is given, i.e. one individual (or one noise) for all rows.
        """
        check_is_fitted(self, "module_")
        mode = self.mode if mode is None else mode
        temperature = self.temperature if temperature is None else temperature
        self._check_mode(mode, temperature)
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        # Predictions run in float64 whatever the training dtype (MPS has no float64): a float32
        # matrix product may round a row differently depending on how many rows come with it, a
        # float64 one only at the 1e-16 level, so a row's prediction does not depend on the batch.
        dtype = torch.float32 if torch.device(self.device).type == "mps" else torch.float64
        module = self.module_
        if module.action.classifier.weight.dtype != dtype:
            module = copy.deepcopy(module).to(dtype)
        x = self._standardise(X, dtype)
        if generator is None:
            generator = torch.Generator(device=x.device).manual_seed(self._predict_seed)
        # A shared mode (the table's ``draw``) needs one draw for all rows unless one is given.
        draw = MODE_TABLE[mode].draw
        given = {"eps_seed": eps_seed, "eps_noise": eps_noise}
        if draw is not None and given[draw.name] is None:
            c = module.action.causal_size
            given[draw.name] = draw.sample((c,), generator=generator, device=x.device, dtype=dtype)
        eps_seed, eps_noise = given["eps_seed"], given["eps_noise"]
        with torch.no_grad():
            out = module(
                x,
                mode,
                float(temperature),
                generator=generator,
                eps_seed=eps_seed,
                eps_noise=eps_noise,
            )
        # The marginals of S and Y are computed lazily, on first use: detach them from the
        # parameters so that whatever the caller reads carries no gradient.
        return dataclasses.replace(
            out,
            S=None if out.S is None else out.S.detach(),
            Y=out.Y.detach(),
            threshold=out.threshold.detach(),
            U_prime=None if out.U_prime is None else out.U_prime.detach(),
        )

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.non_deterministic = False
        return tags
