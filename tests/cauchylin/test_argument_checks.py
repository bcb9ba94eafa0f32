"""The scalar argument checks of ``cauchylin._validation``: what each accepts, refuses and says."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import cauchylin
from cauchylin._validation import broadcast_shapes_or_raise, finite_number, flag, integer


@pytest.mark.parametrize(
    ("value", "bounds"),
    [
        (0, {"minimum": 0}),
        (3, {"minimum": 0, "maximum": 3}),
        (-5, {}),
        (np.int64(7), {"minimum": 1}),
        (10**30, {"minimum": 1}),
    ],
)
def test_integer_accepts_ints_within_the_bounds(value, bounds):
    out = integer("n", value, **bounds)
    assert type(out) is int and out == int(value)


@pytest.mark.parametrize(
    ("value", "bounds", "message"),
    [
        (True, {}, "n must be an int, got True"),
        (2.0, {"minimum": 0}, "n must be an int >= 0, got 2.0"),
        ("3", {"minimum": 0}, "n must be an int >= 0, got '3'"),
        (-1, {"minimum": 0}, "n must be an int >= 0, got -1"),
        (4, {"minimum": 0, "maximum": 3}, r"n must be an int in \[0, 3\], got 4"),
        (9, {"maximum": 8}, "n must be an int <= 8, got 9"),
        (None, {"minimum": 1}, "n must be an int >= 1, got None"),
    ],
)
def test_integer_names_the_argument_and_its_bounds(value, bounds, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        integer("n", value, **bounds)


def test_finite_number_upper_bound_is_inclusive():
    assert finite_number("alpha", 1, minimum=0, maximum=1) == 1.0
    assert finite_number("alpha", np.float32(0.5), maximum=1) == 0.5
    for bad in (1.0000001, math.inf, math.nan, True):
        with pytest.raises(ValueError, match=r"^alpha must be a finite number in \[0, 1\]"):
            finite_number("alpha", bad, minimum=0, maximum=1)
    with pytest.raises(ValueError, match=r"^x must be a finite number in \(0, 1\], got 0$"):
        finite_number("x", 0, minimum=0, exclusive=True, maximum=1)
    with pytest.raises(ValueError, match=r"^x must be a finite number <= 2, got 3$"):
        finite_number("x", 3, maximum=2)


@pytest.mark.parametrize("bad", [0, 1, "yes", None, np.bool_(True)])
def test_flag_accepts_only_python_bools(bad):
    assert flag("f", True) is True and flag("f", False) is False
    with pytest.raises(ValueError, match=r"^f must be a bool, got "):
        flag("f", bad)


# ------------------------------------------------------------------------ broadcast_shapes_or_raise

_SIZES = st.sampled_from([0, 1, 1, 2, 3])
_SHAPE = st.lists(_SIZES, max_size=4).map(tuple)


@settings(max_examples=400, deadline=None)
@given(shapes=st.lists(_SHAPE, min_size=1, max_size=4), as_size=st.booleans())
def test_broadcast_shapes_or_raise_agrees_with_torch(shapes, as_size):
    """The plain-int path gives torch.broadcast_shapes' result, and raises exactly where it does."""
    shapes = [torch.Size(s) if as_size else s for s in shapes]
    named = {f"x{i}": s for i, s in enumerate(shapes)}
    try:
        want = torch.broadcast_shapes(*shapes)
    except RuntimeError:
        with pytest.raises(cauchylin.BroadcastError, match="shapes do not broadcast: x0"):
            broadcast_shapes_or_raise(**named)
        return
    got = broadcast_shapes_or_raise(**named)
    assert type(got) is torch.Size and got == want


def test_broadcast_shapes_or_raise_leaves_other_sizes_to_torch():
    assert broadcast_shapes_or_raise(a=[2, 1], b=torch.Size([3, 1, 4])) == torch.Size([3, 2, 4])
    with pytest.raises(ValueError, match="negative"):  # torch's own error, as before
        broadcast_shapes_or_raise(a=(-1,), b=(2,))
