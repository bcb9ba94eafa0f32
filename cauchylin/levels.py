"""The coverages of central intervals that are calibrated and shown by default: numbers only,
importable without torch.

The one place where the default levels are written. Three sets, for three uses:

* :data:`CALIBRATION_LEVELS`, the coverages a training calibrates (split-conformal widths are
  stored for these only; :class:`cauchylin.nn.readouts.ContextReadouts`);
* :data:`REPORTED_LEVELS`, the intervals that ``evaluate`` scores and that the adapter's
  prediction functions return by default (``cauchylin_hf.predict``);
* :data:`PRINTED_LEVELS`, the intervals ``cauchylin-lm predict`` prints on each prompt's line
  by default (``--levels``): two, so that the line stays readable; ``--levels`` and the
  ``--json`` records give any others.

Every level shown by default is one a training calibrates: a level outside
:data:`CALIBRATION_LEVELS` gets the exact Cauchy interval only. This file imports nothing, so
that the command line reads its defaults before it loads torch.

Example:
    >>> set(REPORTED_LEVELS) <= set(CALIBRATION_LEVELS), PRINTED_LEVELS
    (True, (0.5, 0.9))
"""

__all__ = ["CALIBRATION_LEVELS", "PRINTED_LEVELS", "REPORTED_LEVELS"]

CALIBRATION_LEVELS: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)
"""The coverages a table calibrates by default."""

REPORTED_LEVELS: tuple[float, ...] = (0.5, 0.8, 0.9)
"""Coverages of the central intervals that predictions and metrics report by default."""

PRINTED_LEVELS: tuple[float, ...] = (0.5, 0.9)
"""Coverages of the central intervals ``cauchylin-lm predict`` prints by default."""
