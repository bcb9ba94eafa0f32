"""``cauchylin_hf.app.compare.Recipe``: the shared budget's schedule reaches the training run."""

import math

import pytest
from cauchylin_hf.app import compare

TINY = {"hidden_size": 16, "num_layers": 1, "num_heads": 2, "vocab_size": 300, "batch_size": 4}
TEXTS = [f"x {i}, y {2 * i}." for i in range(1, 9)]


def _logged_learning_rates(recipe):
    _, _, result = compare.train_causal_run(TEXTS, recipe)
    return {int(row["step"]): row["learning_rate"] for row in result.history}


def test_the_schedule_of_the_recipe_is_the_one_the_run_follows():
    """The rate of step ``k`` of 20 (one warm-up step; transformers logs the rate the step
    used): cosine ``peak (1 + cos(pi (k - 2) / 19)) / 2``; warmup_stable_decay holds the peak
    until its last 4 steps, then ``peak (1 + cos(pi (k - 17) / 4)) / 2``."""
    peak = 0.01
    cosine = _logged_learning_rates(compare.Recipe(max_steps=20, learning_rate=peak, **TINY))
    wsd = _logged_learning_rates(
        compare.Recipe(max_steps=20, learning_rate=peak, lr_scheduler="warmup_stable_decay", **TINY)
    )
    assert sorted(cosine) == sorted(wsd) == [10, 20]
    for k in (10, 20):
        assert cosine[k] == pytest.approx(
            peak * (1 + math.cos(math.pi * (k - 2) / 19)) / 2, rel=1e-6
        )
    assert wsd[10] == pytest.approx(peak, rel=1e-6)
    assert wsd[20] == pytest.approx(peak * (1 + math.cos(math.pi * 3 / 4)) / 2, rel=1e-6)


def test_an_unknown_schedule_is_refused_by_name():
    with pytest.raises(ValueError, match="lr_scheduler must be one of cosine, warmup_stable_decay"):
        compare.Recipe(lr_scheduler="linear")
