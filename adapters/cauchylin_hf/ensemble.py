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
:class:`~cauchylin_hf.predict.NumberPredictions` of the same texts. The members' own calibrated
widths are not carried over (each was fitted on one member's law, and usually on rows the other
members trained on): without ``calibration`` the ensemble's intervals are the averaged law's
Cauchy intervals, flagged as not calibrated; with the members' predictions on held-out texts
that *none* of them trained on, the target numbers get split-conformal intervals.
The measured effect on the benchmark tables is on the benchmark page ("Ensembles of seeds").
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from cauchylin.conformal import conformal_widths
from cauchylin.value_space import to_value_space

from .predict import NumberPredictions, value_prediction

__all__ = ["average_number_predictions"]


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


def _averaged(parts: Sequence[NumberPredictions]) -> tuple[torch.Tensor, ...]:
    """``(loc, scale, p_num)`` of the members' average, float64."""
    loc = torch.stack([p.prediction.loc.double() for p in parts]).mean(0)
    scale = torch.stack([p.prediction.scale.double() for p in parts]).mean(0)
    p_num = torch.stack([p.prediction.p_num.double() for p in parts]).mean(0)
    return loc, scale, p_num


def average_number_predictions(
    members: Sequence[NumberPredictions],
    *,
    calibration: Sequence[NumberPredictions] | None = None,
) -> NumberPredictions:
    """The ensemble of several models' predictions of the same texts (the module's formula).

    Args:
        members: one :class:`~cauchylin_hf.predict.NumberPredictions` per model, all of the
            same texts in the same order (e.g. :func:`~cauchylin_hf.predict.number_predictions`
            of each model with one tokenizer's reading of the texts), the same levels and value
            space.
        calibration: optional, the same members (in the same order) on held-out texts that no
            member was trained on: the split-conformal widths of the averaged law, fitted on
            their target numbers, calibrate the target numbers of the result (a level that
            needs more rows than there are, ``ceil((n + 1) c) > n``, keeps the Cauchy interval).
            Without it, every interval is the averaged law's Cauchy interval (``calibrated``
            all False).

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
    levels, space = first.prediction.levels, first.prediction.value_space
    loc, scale, p_num = _averaged(members)
    widths = counts = None
    if calibration is not None:
        if len(calibration) != len(members):
            raise ValueError(
                f"calibration: one prediction per member, in the members' order; got "
                f"{len(calibration)} for {len(members)} members"
            )
        _check_same_texts(calibration, "calibration")
        c = calibration[0]
        if (c.prediction.levels, c.prediction.value_space) != (levels, space):
            raise ValueError(
                "calibration: the members' levels and value space, got "
                f"{c.prediction.levels}/{c.prediction.value_space!r} for {levels}/{space!r}"
            )
        held = c.is_target
        n = int(held.sum())
        if n == 0:
            raise ValueError("calibration: the held-out texts have no target numbers")
        c_loc, c_scale, _ = _averaged(calibration)
        t = c.true.double()[held]
        q = conformal_widths(to_value_space(t, space), c_loc[held], c_scale[held], levels)
        # a level with too few rows for it (an infinite width) stays the Cauchy interval, as
        # in the models' own calibration
        q = torch.where(torch.isinf(q), torch.full_like(q, float("nan")), q)
        rows = first.is_target.reshape(-1, 1)
        widths = torch.where(rows, q.reshape(1, -1), torch.full_like(q, float("nan")))
        counts = torch.where(first.is_target, n, 0).long()
    return NumberPredictions(
        prediction=value_prediction(loc, scale, p_num, levels, space, widths, counts),
        true=first.true,
        text_index=first.text_index,
        is_target=first.is_target,
        fields=list(first.fields),
    )
