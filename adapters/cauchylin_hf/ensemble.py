r"""Several trained models read as one: their Cauchy laws averaged in the value space.

Models trained alike from different seeds reach different networks, and on a small table their
held-out errors spread widely from seed to seed. Averaging their predictions removes much of
that spread. For the regression channel the average has an exact law: if member ``k`` predicts
``Y_k ~ Cauchy(loc_k, scale_k)`` in the value space ``t = g(y)``, then

.. math::

    \bar Y = \frac{1}{K} \sum_{k=1}^{K} Y_k \sim \operatorname{Cauchy}\Big(\frac{1}{K}
    \sum_k \mathrm{loc}_k,\ \frac{1}{K} \sum_k \mathrm{scale}_k\Big),

both when the members' noises are independent and when they are one shared standard Cauchy
variable (the Cauchy family is closed under sums, and scales add in both cases). So the
ensemble's median is ``g^{-1}(mean loc_k)``, its Cauchy intervals follow from the averaged law
(:func:`~cauchylin_hf.predict.value_prediction`), and split-conformal widths can be fitted on
that law like on one model's (:func:`cauchylin.conformal.conformal_widths`).

:func:`average_number_predictions` averages the members'
:class:`~cauchylin_hf.predict.NumberPredictions` of the same texts, :func:`average_value_predictions`
their :class:`~cauchylin_hf.predict.ValuePrediction` of the same prompts, and
:func:`ensemble_calibration` fits the averaged law's widths once, for either. The members' own calibrated
widths are not carried over (each was fitted on one member's law, and usually on rows the other
members trained on): without ``calibration`` the ensemble's intervals are the averaged law's
Cauchy intervals, flagged as not calibrated; with the members' predictions on held-out texts
that *none* of them trained on, the target numbers get split-conformal intervals.
The measured effect on the benchmark tables is on the benchmark page ("Ensembles of seeds").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from cauchylin.conformal import conformal_widths
from cauchylin.value_space import to_value_space

from .predict import NumberPredictions, ValuePrediction, value_prediction

__all__ = [
    "EnsembleCalibration",
    "average_number_predictions",
    "average_value_predictions",
    "ensemble_calibration",
]


def _check_same_texts(parts: Sequence[NumberPredictions], name: str) -> None:
    """Raise unless every member predicted the same numbers of the same texts."""
    first = parts[0]
    for k, part in enumerate(parts[1:], start=1):
        p, q = first.prediction, part.prediction
        if p.levels != q.levels or p.value_space != q.value_space:
            raise ValueError(
                f"{name}: every member must predict the same levels in the same value space; "
                f"member 0 has {p.levels}/{p.value_space!r}, member {k} {q.levels}/"
                f"{q.value_space!r}"
            )
        same = (
            part.true.shape == first.true.shape
            and torch.equal(part.text_index, first.text_index)
            and torch.equal(part.is_target, first.is_target)
            and part.fields == first.fields
            and bool(torch.equal(part.true, first.true))
        )
        if not same:
            raise ValueError(
                f"{name}: member {k} predicted other numbers than member 0 (every member's "
                "predictions must come from the same texts, in the same order)"
            )


def _averaged(parts: Sequence[ValuePrediction]) -> tuple[torch.Tensor, ...]:
    """``(loc, scale, p_num)`` of the members' average, float64."""
    loc = torch.stack([p.loc.double() for p in parts]).mean(0)
    scale = torch.stack([p.scale.double() for p in parts]).mean(0)
    p_num = torch.stack([p.p_num.double() for p in parts]).mean(0)
    return loc, scale, p_num


@dataclass(frozen=True)
class EnsembleCalibration:
    """The split-conformal widths of an ensemble's averaged law (:func:`ensemble_calibration`).

    Attributes:
        levels: the coverages the widths are for.
        value_space: the members' value space.
        widths: ``[L]`` float64 widths ``q(c)`` in units of the averaged scale: the calibrated
            interval is ``g^{-1}(mean loc ± q(c) mean scale)``; NaN for a level that needs more
            rows than there are (``ceil((n + 1) c) > n``: it keeps the Cauchy interval).
        count: how many held-out target numbers the widths were fitted on.
        fields: the fields (:func:`~cauchylin_hf.numbers.field_of`) of those target numbers.
    """

    levels: tuple[float, ...]
    value_space: str
    widths: torch.Tensor
    count: int
    fields: frozenset[str]

    def check(self, levels: tuple[float, ...], value_space: str, name: str) -> None:
        """Raise unless the widths are for these levels and this value space."""
        if (self.levels, self.value_space) != (levels, value_space):
            raise ValueError(
                f"{name}: the members' levels and value space, got {self.levels}/"
                f"{self.value_space!r} for {levels}/{value_space!r}"
            )


def ensemble_calibration(calibration: Sequence[NumberPredictions]) -> EnsembleCalibration:
    """The split-conformal widths of the members' averaged law on held-out texts.

    Each member's prediction of the same held-out texts, which *none* of the members was trained
    on: the widths are fitted on the averaged law at their target numbers
    (:func:`cauchylin.conformal.conformal_widths` of the scores ``|t - mean loc| / mean scale``),
    so an interval built from them covers a new text's target with at least the level's
    probability when the texts are exchangeable.

    Args:
        calibration: one :class:`~cauchylin_hf.predict.NumberPredictions` per member, in the
            members' order, all of the same texts, levels and value space.

    Returns:
        An :class:`EnsembleCalibration` for :func:`average_number_predictions` and
        :func:`average_value_predictions`.

    Raises:
        ValueError: no members, members of other texts, levels or value spaces, or texts
            without target numbers.
    """
    if not calibration:
        raise ValueError("calibration: ensemble_calibration needs at least one member")
    _check_same_texts(calibration, "calibration")
    c = calibration[0]
    held = c.is_target
    n = int(held.sum())
    if n == 0:
        raise ValueError("calibration: the held-out texts have no target numbers")
    loc, scale, _ = _averaged([p.prediction for p in calibration])
    space = c.prediction.value_space
    t = c.true.double()[held]
    q = conformal_widths(to_value_space(t, space), loc[held], scale[held], c.prediction.levels)
    # a level with too few rows for it (an infinite width) stays the Cauchy interval, as in the
    # models' own calibration
    q = torch.where(torch.isinf(q), torch.full_like(q, float("nan")), q)
    fields = frozenset(f for f, target in zip(c.fields, held.tolist(), strict=True) if target)
    return EnsembleCalibration(c.prediction.levels, space, q, n, fields)


def _calibrated(
    loc: torch.Tensor,
    scale: torch.Tensor,
    p_num: torch.Tensor,
    first: ValuePrediction,
    calibration: EnsembleCalibration | None,
    rows: torch.Tensor,
) -> ValuePrediction:
    """The averaged law's prediction, ``calibration``'s widths on ``rows``."""
    widths = counts = None
    if calibration is not None:
        q = calibration.widths.reshape(1, -1)
        nan = torch.full_like(q, float("nan"))
        widths = torch.where(rows.reshape(-1, 1), q, nan)
        counts = torch.where(rows, calibration.count, 0).long()
    return value_prediction(loc, scale, p_num, first.levels, first.value_space, widths, counts)


def average_value_predictions(
    members: Sequence[ValuePrediction],
    *,
    calibration: EnsembleCalibration | None = None,
    rows: torch.Tensor | None = None,
) -> ValuePrediction:
    """The ensemble of several models' predictions of the same prompts (the module's formula).

    Args:
        members: one :class:`~cauchylin_hf.predict.ValuePrediction` per model, of the same
            prompts in the same order (e.g. :func:`~cauchylin_hf.predict.predict_values` of
            each), the same levels and value space.
        calibration: optional widths from :func:`ensemble_calibration` (the same levels).
        rows: ``[N]`` bool, the prompts the calibration applies to (those whose next number is
            of the field it was fitted on); default: every prompt.

    Returns:
        The averaged law's :class:`~cauchylin_hf.predict.ValuePrediction`: ``loc``, ``scale``
        and ``p_num`` the members' means, the calibrated intervals on ``rows`` (at the levels
        with widths), the Cauchy ones elsewhere.

    Raises:
        ValueError: no members; members of other sizes, levels or value spaces; a calibration
            of other levels.

    Example:
        >>> import torch
        >>> from cauchylin_hf.predict import value_prediction
        >>> a = value_prediction(torch.tensor([1.0]), torch.tensor([0.2]), torch.tensor([0.9]),
        ...                      (0.5,), "identity")
        >>> b = value_prediction(torch.tensor([3.0]), torch.tensor([0.4]), torch.tensor([0.7]),
        ...                      (0.5,), "identity")
        >>> both = average_value_predictions([a, b])
        >>> both.median.item(), round(both.interval(0.5)[1].item(), 6)  # 2 + tan(pi/4) 0.3
        (2.0, 2.3)
    """
    if not members:
        raise ValueError("members: average_value_predictions needs at least one member")
    first = members[0]
    for k, part in enumerate(members[1:], start=1):
        same = (part.levels, part.value_space, part.loc.shape) == (
            first.levels,
            first.value_space,
            first.loc.shape,
        )
        if not same:
            raise ValueError(
                f"members: member {k} predicted {part.loc.numel()} prompts at {part.levels}/"
                f"{part.value_space!r}, member 0 {first.loc.numel()} at {first.levels}/"
                f"{first.value_space!r}"
            )
    if calibration is not None:
        calibration.check(first.levels, first.value_space, "calibration")
    n = first.loc.numel()
    if rows is None:
        rows = torch.ones(n, dtype=torch.bool)
    elif rows.shape != (n,):
        raise ValueError(f"rows: one bool per prompt, shape ({n},), got {tuple(rows.shape)}")
    loc, scale, p_num = _averaged(members)
    return _calibrated(loc, scale, p_num, first, calibration, rows.bool())


def average_number_predictions(
    members: Sequence[NumberPredictions],
    *,
    calibration: Sequence[NumberPredictions] | EnsembleCalibration | None = None,
) -> NumberPredictions:
    """The ensemble of several models' predictions of the same texts (the module's formula).

    Args:
        members: one :class:`~cauchylin_hf.predict.NumberPredictions` per model, all of the
            same texts in the same order (e.g. :func:`~cauchylin_hf.predict.number_predictions`
            of each model with one tokenizer's reading of the texts), the same levels and value
            space.
        calibration: optional, the same members (in the same order) on held-out texts that no
            member was trained on, or the :func:`ensemble_calibration` of such predictions: the
            split-conformal widths of the averaged law, fitted on their target numbers,
            calibrate the target numbers of the result (a level that needs more rows than there
            are, ``ceil((n + 1) c) > n``, keeps the Cauchy interval). Without it, every
            interval is the averaged law's Cauchy interval (``calibrated`` all False).

    Returns:
        :class:`~cauchylin_hf.predict.NumberPredictions` of the averaged law: ``loc`` and
        ``scale`` the members' means, ``median = g^{-1}(loc)``, ``p_num`` the members' mean,
        ``calibration_count`` the calibration's target count on calibrated rows.

    Raises:
        ValueError: no members; members (or calibration members) of other texts, levels or
            value spaces; a calibration of another member count, or without target numbers.

    Example:
        >>> import torch
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.predict import number_predictions
        >>> from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
        >>> texts = ["a 1, b 2.", "a 5, b 7, c 9."]
        >>> parts = []
        >>> for seed in (0, 1):
        ...     _ = torch.manual_seed(seed)
        ...     model, ntok = CauchyLMForCausalLM.from_base(
        ...         tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True)
        ...     parts.append(number_predictions(model, ntok, texts))
        >>> both = average_number_predictions(parts)
        >>> mean_loc = (parts[0].prediction.loc + parts[1].prediction.loc) / 2
        >>> torch.allclose(both.prediction.loc, mean_loc), both.prediction.calibrated.any().item()
        (True, False)
    """
    if not members:
        raise ValueError("members: average_number_predictions needs at least one member")
    _check_same_texts(members, "members")
    first = members[0]
    if calibration is not None and not isinstance(calibration, EnsembleCalibration):
        if len(calibration) != len(members):
            raise ValueError(
                f"calibration: one prediction per member, in the members' order; got "
                f"{len(calibration)} for {len(members)} members"
            )
        calibration = ensemble_calibration(calibration)
    if calibration is not None:
        p = first.prediction
        calibration.check(p.levels, p.value_space, "calibration")
    loc, scale, p_num = _averaged([p.prediction for p in members])
    return NumberPredictions(
        prediction=_calibrated(loc, scale, p_num, first.prediction, calibration, first.is_target),
        true=first.true,
        text_index=first.text_index,
        is_target=first.is_target,
        fields=list(first.fields),
    )
