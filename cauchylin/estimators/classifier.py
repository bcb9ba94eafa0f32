r"""``CausalClassifier``: a scikit-learn classifier with one-vs-rest Cauchy decisions.

The network is ``x -> MLP -> Abduction -> Action`` (see :mod:`cauchylin.nn`). Class ``k`` has the
score ``S_k = W_cls,k U' + b_cls,k ~ Cauchy(loc_S_k, scale_S_k)`` and fires when it exceeds the
threshold ``tau_k``, with probability

.. math::

    P_k = P(S_k > \tau_k) = \frac12 + \frac1\pi \arctan\frac{\mathrm{loc}_{S_k} - \tau_k}
        {\mathrm{scale}_{S_k}}.

Training minimises the one-vs-rest binary cross-entropy in the standard mode
(:meth:`cauchylin.nn.Action.loss`, i.e. :func:`cauchylin.losses.ovr_bce_fused`)

.. math::

    \mathcal{L} = -\frac1N \sum_i \sum_k
        \big[y_{ik} \log P_{ik} + (1 - y_{ik}) \log(1 - P_{ik})\big].

``predict`` returns the class of largest ``P_k`` (in the ``compatible`` mode: of largest
``loc_S``), ``predict_proba`` the normalised ``P_k / sum_j P_j`` (in the ``compatible`` mode:
``softmax(loc_S / T)``), so that its argmax is always the prediction.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.base import ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import validate_data
from torch import nn

from cauchylin._validation import finite_number
from cauchylin.estimators._base import CausalEstimatorBase
from cauchylin.estimators._mlp import CausalMLP
from cauchylin.vector import CauchyVector

__all__ = ["CausalClassifier"]


def _ovr_loss(module: nn.Module, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    assert isinstance(module, CausalMLP)
    return module.action.loss(module.abduct(x), labels).total


class CausalClassifier(ClassifierMixin, CausalEstimatorBase):
    r"""Classifier ``x -> MLP -> Abduction -> Action`` with one-vs-rest Cauchy decisions.

    Each class ``k`` fires with probability ``P_k = P(S_k > tau_k)`` (see the
    :mod:`module docstring <cauchylin.estimators.classifier>`); the model is trained with the
    one-vs-rest loss, predicts ``argmax_k P_k``, and :meth:`predict_distribution` returns the
    class scores ``S`` as a :class:`~cauchylin.CauchyVector`. The inference modes are those of
    :mod:`cauchylin.nn`.

    Args:
        hidden_layer_sizes: widths of the hidden layers of the feature MLP (an int for one layer;
            ``()`` for none). The default, one layer of 32, suits tables of a few hundred to a
            few thousand rows.
        threshold: the OvR threshold ``tau_k`` of every class (a fixed scalar).
        causal_size: ``C``, the width of ``U`` (``None``: the last hidden width).
        activation: ``"relu"``, ``"tanh"``, ``"gelu"`` or ``"silu"``.
        gamma_init: initial ``scale_U`` of the abduction.
        b_noise_init: initial exogenous noise ``b_noise`` (``>= 0``).
        learning_rate: Adam's step size.
        alpha: L2 penalty on the weight matrices (Adam's ``weight_decay``).
        batch_size: rows per optimisation step.
        max_iter: maximal number of epochs.
        early_stopping: hold out ``validation_fraction`` of the rows (stratified when every class
            has two rows), stop when their loss stops improving and keep the best weights.
        validation_fraction: share of rows held out, in ``(0, 1)``.
        n_iter_no_change: epochs without an improvement of ``tol`` that stop training.
        tol: minimal decrease of the monitored mean loss that counts as an improvement. The
            default, ``1e-3``, is ten times the regressor's: where the classes are separable the
            one-vs-rest loss keeps falling towards 0 without a minimum, about like ``1/epoch``
            as the margins grow (Adam's step size does not shrink with the gradient), and with ``1e-4`` it still fell by more than that every 20 epochs after 500 epochs
            on scikit-learn's wine data (3 of 8 train/test splits hit ``max_iter`` and warned)
            while no test prediction changed: over 8 splits each of wine, iris and breast
            cancer, ``1e-3`` gave the same test accuracy in fewer epochs, without a warning.
        mode: default inference mode of the predict methods.
        temperature: default temperature ``T >= 0`` of the predict methods.
        dtype: ``"float32"`` or ``"float64"``, the dtype of the parameters and of training.
            Predictions are computed in float64 either way (on a copy of the network), so that
            a row's prediction does not depend on the rows predicted with it.
        device: torch device of the network.
        random_state: ``None``, an int or a ``numpy.random.RandomState``: seeds the weights, the
            validation split and the row order.
        verbose: show a tqdm progress bar of the epochs.

    Attributes:
        classes_: the sorted class labels.
        module_: the fitted :class:`torch.nn.Module`.
        n_features_in_: number of input columns.
        n_iter_: epochs run.
        best_epoch_: epoch whose weights were kept.
        loss_curve_: mean training loss per epoch.
        validation_loss_curve_: mean validation loss per epoch, or ``None``.
        x_mean_: column means used to standardise ``X``.
        x_scale_: column standard deviations (1 for constant columns).

    Raises:
        ValueError: from :meth:`fit`, a bad setting (the message names it) or bad data.

    Example:
        >>> import numpy as np
        >>> from cauchylin.estimators import CausalClassifier
        >>> rng = np.random.default_rng(0)
        >>> X = rng.normal(size=(150, 2))
        >>> y = np.where(X[:, 0] + X[:, 1] > 0, "yes", "no")
        >>> clf = CausalClassifier((16,), learning_rate=0.01, random_state=0).fit(X, y)
        >>> clf.classes_.tolist(), bool(clf.score(X, y) > 0.9)
        (['no', 'yes'], True)
        >>> clf.predict_proba(X[:2]).sum(axis=1).round(6).tolist()
        [1.0, 1.0]
    """

    def __init__(
        self,
        hidden_layer_sizes: Any = (32,),
        *,
        threshold: float = 0.0,
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
        tol: float = 1e-3,
        mode: str = "standard",
        temperature: float = 1.0,
        dtype: str = "float32",
        device: str = "cpu",
        random_state: Any = None,
        verbose: bool = False,
    ) -> None:
        self.hidden_layer_sizes = hidden_layer_sizes
        self.threshold = threshold
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

    def fit(self, X: Any, y: Any) -> CausalClassifier:
        """Fit the network to ``(X, y)`` with the one-vs-rest loss (see the class docstring).

        Args:
            X: array-like ``[n_samples, n_features]`` of finite numbers.
            y: array-like ``[n_samples]`` of class labels (any sortable values, e.g. ints or
                strings), at least two distinct ones.

        Returns:
            ``self``, fitted.

        Raises:
            ValueError: a bad setting, NaN/inf or complex data, an empty ``X``, mismatched
                lengths, continuous or multi-output targets, or only one class.
            FloatingPointError: the loss diverged (lower ``learning_rate``).

        Example:
            >>> import numpy as np
            >>> from cauchylin.estimators import CausalClassifier
            >>> X = np.array([[0.0], [0.1], [0.9], [1.0]] * 5)
            >>> clf = CausalClassifier((4,), learning_rate=0.05, tol=1e-3, random_state=0)
            >>> clf.fit(X, [0, 0, 1, 1] * 5).classes_, clf.n_features_in_
            (array([0, 1]), 1)
        """
        X, y = validate_data(self, X, y, dtype=[np.float64, np.float32])
        check_classification_targets(y)
        self.classes_, labels = np.unique(y, return_inverse=True)
        if self.classes_.size < 2:
            raise ValueError(
                f"CausalClassifier needs samples of at least 2 classes in y, but the data "
                f"contain only one class: {self.classes_[0]!r}"
            )
        finite_number("threshold", self.threshold)
        self._fit_network(
            np.asarray(X, dtype=np.float64),
            labels.reshape(-1),
            torch.long,
            int(self.classes_.size),
            _ovr_loss,
            threshold=float(self.threshold),
            stratify=True,
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
        r"""The class scores ``S = W_cls U' + b_cls`` of each row, ``[n_samples, n_classes]``.

        A :class:`~cauchylin.CauchyVector` with the exact joint law of the scores (they share
        the sources of ``U'``, so its components are dependent within a row); column ``k`` is
        ``classes_[k]``. ``.loc`` and ``.scale`` are the marginals, ``.ovr_prob(threshold)`` the
        probabilities ``P_k``, ``.icdf(q)`` the quantiles of every score.

        Args:
            X: array-like ``[n_samples, n_features]``.
            mode: inference mode (default: the ``mode`` setting).
            temperature: ``T >= 0`` (default: the ``temperature`` setting).
            generator: ``torch.Generator`` of the random modes (default: one seeded at fit).
            eps_seed: fixed ``[C]`` draw of ``shared_individual`` (default: drawn once).
            eps_noise: fixed ``[C]`` draw of ``shared_noise`` (default: drawn once).

        Returns:
            :class:`~cauchylin.CauchyVector` ``[n_samples, n_classes]``, float64.

        Raises:
            sklearn.exceptions.NotFittedError: before :meth:`fit`.
            ValueError: a bad ``X``, mode or temperature.

        Example:
            >>> import numpy as np
            >>> from cauchylin.estimators import CausalClassifier
            >>> X = np.array([[0.0], [0.1], [0.9], [1.0]] * 5)
            >>> clf = CausalClassifier((4,), learning_rate=0.05, tol=1e-3, random_state=0)
            >>> clf = clf.fit(X, [0, 0, 1, 1] * 5)
            >>> S = clf.predict_distribution(X[:2])
            >>> S.shape, bool(np.allclose(S.ovr_prob(0.0).numpy(), clf.predict_ovr_proba(X[:2])))
            (torch.Size([2, 2]), True)
        """
        out = self._output(X, mode, temperature, generator, eps_seed, eps_noise)
        assert out.S is not None
        return out.S.detach()

    def predict_ovr_proba(
        self,
        X: Any,
        *,
        mode: str | None = None,
        temperature: float | None = None,
        generator: torch.Generator | None = None,
    ) -> np.ndarray:
        """The one-vs-rest probabilities ``P_k = P(S_k > tau_k)``, not normalised.

        Each entry is the probability that class ``k`` fires on its own; a row sums to any
        number in ``(0, n_classes)`` (a small sum: no class is confident, a large one: several
        are).

        Args:
            X: array-like ``[n_samples, n_features]``.
            mode: inference mode (default: the ``mode`` setting).
            temperature: ``T >= 0``.
            generator: ``torch.Generator`` of the random modes.

        Returns:
            ``numpy.ndarray`` ``[n_samples, n_classes]``, float64.

        Raises:
            sklearn.exceptions.NotFittedError: before :meth:`fit`.
            ValueError: a bad ``X``, mode or temperature.

        Example:
            >>> import numpy as np
            >>> from cauchylin.estimators import CausalClassifier
            >>> X = np.array([[0.0], [0.1], [0.9], [1.0]] * 5)
            >>> clf = CausalClassifier((4,), learning_rate=0.05, tol=1e-3, random_state=0)
            >>> clf = clf.fit(X, [0, 0, 1, 1] * 5)
            >>> P = clf.predict_ovr_proba(X[:2])
            >>> P.shape, bool(((P > 0) & (P < 1)).all())
            ((2, 2), True)
        """
        out = self._output(X, mode, temperature, generator, None, None)
        return out.ovr_probs().to(torch.float64).cpu().numpy()

    def predict_proba(
        self,
        X: Any,
        *,
        mode: str | None = None,
        temperature: float | None = None,
        generator: torch.Generator | None = None,
        eps_seed: torch.Tensor | None = None,
        eps_noise: torch.Tensor | None = None,
    ) -> np.ndarray:
        r"""Class probabilities: ``P_k / sum_j P_j`` (``softmax(loc_S / T)`` in compatible mode).

        Args:
            X: array-like ``[n_samples, n_features]``.
            mode: inference mode (default: the ``mode`` setting).
            temperature: ``T >= 0`` (in compatible mode the softmax temperature; ``T = 0`` puts
                all mass on the largest ``loc_S``).
            generator: ``torch.Generator`` of the random modes.
            eps_seed: fixed draw of ``shared_individual``.
            eps_noise: fixed draw of ``shared_noise``.

        Returns:
            ``numpy.ndarray`` ``[n_samples, n_classes]``, float64, rows summing to 1; column
            ``k`` is ``classes_[k]``.

        Raises:
            sklearn.exceptions.NotFittedError: before :meth:`fit`.
            ValueError: a bad ``X``, mode or temperature.

        Example:
            >>> import numpy as np
            >>> from cauchylin.estimators import CausalClassifier
            >>> X = np.array([[0.0], [0.1], [0.9], [1.0]] * 5)
            >>> clf = CausalClassifier((4,), learning_rate=0.05, tol=1e-3, random_state=0)
            >>> clf = clf.fit(X, [0, 0, 1, 1] * 5)
            >>> p = clf.predict_proba(X[:2])
            >>> p.shape, p.sum(axis=1).round(6).tolist()
            ((2, 2), [1.0, 1.0])
        """
        out = self._output(X, mode, temperature, generator, eps_seed, eps_noise)
        if out.mode == "compatible":
            if out.temperature == 0.0:
                probs = torch.nn.functional.one_hot(out.predict(), out.loc_S.shape[-1])
            else:
                probs = torch.softmax(out.loc_S.to(torch.float64) / out.temperature, dim=-1)
        else:
            probs = out.normalised_ovr_probs()
        probs = probs.to(torch.float64)
        return (probs / probs.sum(dim=-1, keepdim=True)).cpu().numpy()

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
        """The predicted class of each row: ``classes_[argmax_k P_k]`` (``argmax loc_S`` in
        compatible mode).

        Args:
            X: array-like ``[n_samples, n_features]``.
            mode: inference mode (default: the ``mode`` setting).
            temperature: ``T >= 0``.
            generator: ``torch.Generator`` of the random modes.
            eps_seed: fixed draw of ``shared_individual``.
            eps_noise: fixed draw of ``shared_noise``.

        Returns:
            ``numpy.ndarray`` ``[n_samples]`` of labels from ``classes_``.

        Raises:
            sklearn.exceptions.NotFittedError: before :meth:`fit`.
            ValueError: a bad ``X``, mode or temperature.

        Example:
            >>> import numpy as np
            >>> from cauchylin.estimators import CausalClassifier
            >>> X = np.array([[0.0], [0.1], [0.9], [1.0]] * 5)
            >>> y = ["a", "a", "b", "b"] * 5
            >>> clf = CausalClassifier((4,), learning_rate=0.05, tol=1e-3, random_state=0).fit(X, y)
            >>> clf.predict(X[:4]).tolist()
            ['a', 'a', 'b', 'b']
        """
        out = self._output(X, mode, temperature, generator, eps_seed, eps_noise)
        return self.classes_[out.predict().cpu().numpy()]
