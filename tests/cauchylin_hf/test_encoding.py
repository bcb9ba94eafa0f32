"""The pure steps of encoding, on plain lists: assembly and truncation keep numbers aligned."""

import pytest
from cauchylin_hf.encoding import assemble_encoding, truncate_encoding
from hypothesis import given
from hypothesis import strategies as st

NUM = 0
SEGMENT = st.lists(st.integers(1, 50), max_size=5)  # text ids never equal <NUM>
VALUES = st.floats(allow_nan=False, allow_infinity=False, width=32)


@st.composite
def texts(draw):
    values = draw(st.lists(VALUES, max_size=6))
    segments = draw(st.lists(SEGMENT, min_size=len(values) + 1, max_size=len(values) + 1))
    return segments, values


@given(texts())
def test_assembly_interleaves_segments_and_numbers(text):
    segments, values = text
    ids, out = assemble_encoding(segments, values, NUM)
    assert len(ids) == len(out) == sum(map(len, segments)) + len(values)
    # Reading the ids back: cutting at <NUM> gives the segments, the values sit at the <NUM>s.
    pieces, current = [], []
    for t in ids:
        if t == NUM:
            pieces.append(current)
            current = []
        else:
            current.append(t)
    pieces.append(current)
    assert pieces == segments
    assert [v for t, v in zip(ids, out, strict=True) if t == NUM] == values
    assert all(v == 0.0 for t, v in zip(ids, out, strict=True) if t != NUM)


@given(texts(), st.integers(0, 40), st.sampled_from(["left", "right"]))
def test_truncation_keeps_one_spelling_per_number(text, budget, side):
    segments, values = text
    ids, out = assemble_encoding(segments, values, NUM)
    spellings = [f"n{i}" for i in range(len(values))]  # which number is which
    cut_ids, cut_values, cut_spellings = truncate_encoding(ids, out, spellings, budget, NUM, side)
    keep = min(budget, len(ids))
    window = slice(0, keep) if side == "right" else slice(len(ids) - keep, len(ids))
    assert cut_ids == ids[window] and cut_values == out[window]
    # The spellings kept are those of the <NUM>s kept, in order.
    positions = [i for i, t in enumerate(ids) if t == NUM]
    kept = [spellings[n] for n, i in enumerate(positions) if window.start <= i < window.stop]
    assert cut_spellings == kept
    assert len(cut_spellings) == cut_ids.count(NUM)


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="one more segment"):
        assemble_encoding([[1]], [2.0], NUM)
    with pytest.raises(ValueError, match="budget"):
        truncate_encoding([1], [0.0], [], -1, NUM)
    with pytest.raises(ValueError, match="side"):
        truncate_encoding([1], [0.0], [], 1, NUM, side="middle")
    with pytest.raises(ValueError, match="values has length"):
        truncate_encoding([1], [], [], 1, NUM)
    with pytest.raises(ValueError, match="spellings"):
        truncate_encoding([NUM], [1.0], [], 1, NUM)
