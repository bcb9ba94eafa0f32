"""``cauchylin_hf.ensemble``: the members' average has the law the module states.

Checked against Monte Carlo with torch's own Cauchy sampler: the average of the members' draws
(independent, or through one shared standard Cauchy variable) falls below the ensemble's median
and inside each of its intervals as often as the levels say; split-conformal widths fitted on
held-out rows cover fresh rows of a law three times wider than the members say. Tolerances:
Hoeffding / DKW at the suite's false-failure rate, split over the checks of each test.
"""

import math

import pytest
import torch
from cauchylin_hf.ensemble import average_number_predictions
from cauchylin_hf.predict import NumberPredictions, value_prediction

from cauchylin.value_space import from_value_space, to_value_space
from tests.stats import binomial_epsilon, dkw_epsilon, split_delta

LEVELS = (0.5, 0.8, 0.9, 0.95)


def _member(loc, scale, true, *, space="signed_log1p", levels=LEVELS, targets=None, widths=None):
    loc = torch.as_tensor(loc, dtype=torch.float64)
    n = loc.numel()
    pred = value_prediction(
        loc, torch.as_tensor(scale, dtype=torch.float64), torch.full((n,), 0.9), levels, space,
        widths,
    )  # fmt: skip
    is_target = torch.ones(n, dtype=torch.bool) if targets is None else targets
    return NumberPredictions(
        prediction=pred,
        true=torch.as_tensor(true, dtype=torch.float64),
        text_index=torch.arange(n),
        is_target=is_target,
        fields=["y"] * n,
    )


@pytest.mark.parametrize("space", ["identity", "signed_log1p"])
@pytest.mark.parametrize("shared", [False, True])
def test_the_average_of_the_members_draws_has_the_ensembles_law(space, shared):
    locs = torch.tensor([[0.5, -3.0, 6.0], [1.5, -1.0, 5.0], [4.0, 0.0, 6.5]], dtype=torch.float64)
    scales = torch.tensor([[0.2, 1.0, 0.05], [0.6, 0.5, 0.1], [0.1, 2.0, 0.3]], dtype=torch.float64)
    members = [_member(lo, sc, [0.0] * 3, space=space) for lo, sc in zip(locs, scales, strict=True)]
    ens = average_number_predictions(members).prediction
    assert torch.allclose(ens.loc, locs.mean(0)) and torch.allclose(ens.scale, scales.mean(0))
    assert not bool(ens.calibrated.any())

    n = 200_000
    gen = torch.Generator().manual_seed(7 + shared)
    u = torch.rand(1 if shared else 3, n, 3, generator=gen, dtype=torch.float64)
    z = torch.tan(math.pi * (u.clamp(1e-15, 1 - 1e-15) - 0.5))  # standard Cauchy draws
    t = (locs[:, None, :] + scales[:, None, :] * z).mean(0)  # [n, 3] the members' average
    y = from_value_space(t, space)
    checks = 3 * (1 + len(LEVELS))
    eps = binomial_epsilon(n, split_delta(checks))
    assert ((y < ens.median).double().mean(0) - 0.5).abs().max() < eps
    for j, c in enumerate(LEVELS):
        inside = (y >= ens.lower[:, j]) & (y <= ens.upper[:, j])
        assert (inside.double().mean(0) - c).abs().max() < eps, (c, inside.double().mean(0))


def test_held_out_rows_calibrate_the_target_numbers_only():
    # texts of two numbers, the second their target; the members say scale 0.2 around their
    # mean loc, the truth is three times as wide: the Cauchy 50% interval covers
    # 2/pi atan(1/3) = 0.205, the calibrated one the level
    gen = torch.Generator().manual_seed(3)

    def rows(n):
        centre = torch.randn(n, generator=gen, dtype=torch.float64) * 3
        u = torch.rand(n, generator=gen, dtype=torch.float64).clamp(1e-15, 1 - 1e-15)
        noise = 0.6 * torch.tan(math.pi * (u - 0.5))
        true_t = centre + noise
        targets = torch.arange(n) % 2 == 1
        parts = [
            _member(centre + shift, torch.full((n,), 0.2 + shift), from_value_space(true_t, "signed_log1p"), targets=targets)
            for shift in (-0.1, 0.0, 0.1)
        ]  # fmt: skip
        return parts, true_t, targets

    cal, _, _ = rows(4000)
    test, true_t, targets = rows(40000)
    ens = average_number_predictions(test, calibration=cal).prediction
    assert torch.equal(ens.calibrated, targets.reshape(-1, 1).expand(-1, len(LEVELS)))
    assert ens.calibration_count.tolist() == torch.where(targets, 2000, 0).tolist()
    raw = average_number_predictions(test).prediction
    assert not bool(raw.calibrated.any())
    # coverage given the calibration rows: within DKW of the level on the 2000 calibration
    # targets, plus Hoeffding on the 20000 test targets
    checks = 2 * len(LEVELS)
    eps = dkw_epsilon(2000, split_delta(checks)) + binomial_epsilon(20000, split_delta(checks))
    y = from_value_space(true_t, "signed_log1p")[targets]
    for j, c in enumerate(LEVELS):
        inside = (y >= ens.lower[targets, j]) & (y <= ens.upper[targets, j])
        assert abs(float(inside.double().mean()) - c) < eps, c
        raw_in = (y >= raw.lower[targets, j]) & (y <= raw.upper[targets, j])
        assert float(raw_in.double().mean()) < c - eps  # the members' law alone is too narrow
    # the other numbers keep the averaged law's Cauchy intervals
    assert torch.equal(ens.lower[~targets], raw.lower[~targets])


def test_one_member_is_its_own_law_without_its_calibration():
    calibrated = _member([1.0, 2.0], [0.5, 0.1], [3.0, 4.0], widths=torch.full((2, 4), 2.0))
    assert bool(calibrated.prediction.calibrated.all())
    one = average_number_predictions([calibrated]).prediction
    assert torch.equal(one.loc, calibrated.prediction.loc)
    assert torch.equal(one.median, calibrated.prediction.median)
    assert not bool(one.calibrated.any())  # a member's widths are not the ensemble's
    t = to_value_space(one.upper[:, 0], "signed_log1p")
    assert torch.allclose(t, one.loc + one.scale)  # the Cauchy 50% interval: loc ± scale


def test_members_of_other_texts_levels_or_counts_are_refused():
    a = _member([1.0, 2.0], [0.5, 0.1], [3.0, 4.0])
    with pytest.raises(ValueError, match=r"members: .*at least one"):
        average_number_predictions([])
    with pytest.raises(ValueError, match="members: member 1 predicted other numbers"):
        average_number_predictions([a, _member([1.0, 2.0], [0.5, 0.1], [3.0, 5.0])])
    with pytest.raises(ValueError, match="members: every member must predict the same levels"):
        average_number_predictions([a, _member([1.0, 2.0], [0.5, 0.1], [3.0, 4.0], levels=(0.5,))])
    with pytest.raises(ValueError, match="calibration: one prediction per member"):
        average_number_predictions([a, a], calibration=[a])
    none = _member([1.0], [0.5], [3.0], targets=torch.tensor([False]))
    with pytest.raises(ValueError, match="calibration: the held-out texts have no target"):
        average_number_predictions([a], calibration=[none])
    # three calibration rows: ceil(4 c) <= 3 only for c = 0.5 (of 0.5, 0.8, 0.9, 0.95)
    few = average_number_predictions([a], calibration=[_member([1.0] * 3, [0.5] * 3, [3.0] * 3)])
    assert few.prediction.calibrated.tolist() == [[True, False, False, False]] * 2
    other = _member([1.0], [0.5], [3.0], space="identity")
    with pytest.raises(ValueError, match="calibration: the members' levels and value space"):
        average_number_predictions([a], calibration=[other])


def test_prompts_average_like_texts_and_take_the_calibration_where_asked():
    from cauchylin_hf.ensemble import average_value_predictions, ensemble_calibration

    gen = torch.Generator().manual_seed(11)
    locs = torch.randn(3, 6, generator=gen, dtype=torch.float64)
    scales = torch.rand(3, 6, generator=gen, dtype=torch.float64) + 0.1
    true = torch.randn(6, generator=gen, dtype=torch.float64)
    members = [_member(lo, sc, true) for lo, sc in zip(locs, scales, strict=True)]
    cal = [_member(lo + 0.3, sc, true) for lo, sc in zip(locs, scales, strict=True)]
    calibration = ensemble_calibration(cal)
    assert calibration.count == 6 and calibration.fields == frozenset({"y"})
    texts = average_number_predictions(members, calibration=cal).prediction
    rows = torch.tensor([True, False, True, True, False, True])
    prompts = average_value_predictions(
        [m.prediction for m in members], calibration=calibration, rows=rows
    )
    assert torch.allclose(prompts.loc, locs.mean(0)) and torch.allclose(
        prompts.scale, scales.mean(0)
    )
    assert torch.equal(prompts.calibrated, rows.reshape(-1, 1) & texts.calibrated)
    assert torch.allclose(prompts.lower[rows], texts.lower[rows])  # the same widths where asked
    raw = average_number_predictions(members).prediction
    assert torch.allclose(prompts.lower[~rows], raw.lower[~rows])  # the Cauchy ones elsewhere
    assert prompts.calibration_count.tolist() == torch.where(rows, 6, 0).tolist()
    with pytest.raises(ValueError, match="rows: one bool per prompt"):
        average_value_predictions([m.prediction for m in members], rows=rows[:3])
    with pytest.raises(ValueError, match="members: member 1 predicted 2 prompts"):
        average_value_predictions(
            [members[0].prediction, _member([1.0, 2.0], [1.0, 1.0], [0.0, 0.0]).prediction]
        )
    with pytest.raises(ValueError, match="calibration: the members' levels"):
        one = _member([1.0], [1.0], [0.0], levels=(0.5,)).prediction
        average_value_predictions([one], calibration=calibration)
