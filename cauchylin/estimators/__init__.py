"""scikit-learn estimators with the causal heads: ``CausalRegressor`` and ``CausalClassifier``.

Both are ``x -> MLP -> Abduction -> Action`` networks (:mod:`cauchylin.nn`) behind the
scikit-learn estimator contract (``fit``, ``predict``, ``score``, ``get_params``/``set_params``;
they work in pipelines, ``GridSearchCV`` and ``pickle``), with closed-form Cauchy predictive
distributions (``predict_distribution``). This subpackage needs scikit-learn, the optional
extra ``pip install 'cauchylin[sklearn]'``; ``import cauchylin`` itself never imports it.

Example:
    >>> import numpy as np
    >>> from cauchylin.estimators import CausalClassifier, CausalRegressor
    >>> X = np.linspace(-1, 1, 60)[:, None]
    >>> reg = CausalRegressor((8,), learning_rate=0.03, random_state=0).fit(X, 2 * X[:, 0])
    >>> reg.predict_distribution(X[:2]).shape
    torch.Size([2])
"""

try:
    import sklearn  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(
        "cauchylin.estimators needs scikit-learn, which is not installed; install the optional "
        "extra with  pip install 'cauchylin[sklearn]'"
    ) from exc

from cauchylin.estimators.classifier import CausalClassifier
from cauchylin.estimators.regressor import CausalRegressor

__all__ = ["CausalClassifier", "CausalRegressor"]
