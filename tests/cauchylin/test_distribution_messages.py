"""A parameter that fails its constraint gets a message of one line: the parameter, its shape,
how many values fail and the first of them, never a dump of the tensor (torch prints the whole
tensor: a 150-row batch of scales took 150 lines)."""

from __future__ import annotations

import pytest
import torch

from cauchylin import CauchyVector
from cauchylin.distributions import IndependentCauchy, OvR


@pytest.mark.parametrize("cls", [OvR, IndependentCauchy])
def test_a_bad_scale_is_named_with_its_shape_and_count(cls) -> None:
    scale = torch.ones(150, 3)
    scale[7, 1] = 0.0
    scale[20:30] = -1.0  # 30 more
    args = (0.0,) if cls is OvR else ()
    with pytest.raises(ValueError) as exc:
        cls(torch.zeros(150, 3), scale, *args, validate_args=True)
    message = str(exc.value)
    assert "\n" not in message and len(message) < 400, message
    assert "parameter scale (Tensor of shape (150, 3))" in message
    assert "31 of 450 values do not" in message
    assert "at index (7, 1), is 0.0" in message
    assert "tensor(" not in message


def test_the_pyro_guide_classifier_without_noise_fails_in_one_line() -> None:
    """S = W U + b with W = 0 (where Pyro's AutoNormal starts) has scale 0 everywhere."""
    u = CauchyVector(torch.zeros(150, 2), torch.full((150, 2), 0.3))
    s = u.linear(torch.zeros(3, 2), torch.zeros(3))
    with pytest.raises(ValueError) as exc:
        OvR.from_vector(s, threshold=0.0, validate_args=True)
    message = str(exc.value)
    assert "\n" not in message and "450 of 450 values do not" in message
    assert "(Tensor of shape (150, 3))" in message
    noisy = s + CauchyVector(torch.zeros(150, 3), torch.full((150, 3), 0.1))
    assert bool((OvR.from_vector(noisy, threshold=0.0, validate_args=True).scale > 0).all())


def test_valid_parameters_and_validation_off_are_unchanged() -> None:
    OvR(torch.zeros(4, 2), torch.zeros(4, 2), 0.0, validate_args=False)  # not checked
    d = OvR(torch.zeros(4, 2), torch.ones(4, 2), 0.0, validate_args=True)
    assert d._validate_args and d.batch_shape == (4,) and d.event_shape == (2,)
    loc = torch.zeros(4, 2)
    loc[3, 1] = float("nan")
    with pytest.raises(ValueError, match=r"parameter loc .* 1 of 8 values do not"):
        OvR(loc, torch.ones(4, 2), 0.0, validate_args=True)
