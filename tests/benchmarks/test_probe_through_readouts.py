"""``benchmarks/probe_through_readouts.py``: the added term is the readouts' own likelihood, and
it reaches the network.

Nothing is measured here (the numbers come from running the script by hand, see
``docs/benchmarks.md``).
"""

import json
import math

import pytest
import torch

from .probes import field_texts, load_benchmark, tiny_model

pytest.importorskip("sklearn")


def _probe():
    return load_benchmark("probe_through_readouts")


def _solved_model():
    from cauchylin_hf.readouts import solve_readouts

    model, ntok = tiny_model()
    texts = field_texts()  # the rare field keeps the shared head
    solve_readouts(model, ntok, texts)
    codes = set(
        model.context_codes(torch.tensor([ntok("note 1, width 2, span 3, area 4.")["input_ids"]]))[
            0
        ].tolist()
    )
    assert model.action.readouts.num_contexts == 3
    assert len(codes & set(model.action.readouts.codes.tolist())) == 3
    return model, ntok, texts


@pytest.mark.parametrize("target_only", [False, True])
def test_the_term_is_the_mean_nll_of_the_models_own_readout_predictions(target_only):
    """The term at a teacher-forced batch equals the mean Cauchy NLL of each number under the
    ``loc_Y``/``scale_Y`` that the package's own reading path gives it
    (:func:`cauchylin_hf.readouts.number_features`, the solved readouts put in), over every
    number, or over each text's last number."""
    from cauchylin_hf.data import NumericDataCollator
    from cauchylin_hf.readouts import number_features

    from cauchylin.readout import cauchy_nll

    probe = _probe()
    model, ntok, texts = _solved_model()
    model.eval()
    batch = NumericDataCollator(ntok, padding_side="right")([ntok(t) for t in texts[:24]])
    with torch.no_grad():
        hidden, _ = model.encode(
            batch["input_ids"], batch["numeric_values"], batch["attention_mask"]
        )
        U = model.abduction(hidden)
        term = probe.readout_term(
            model, U, batch["labels"], batch["numeric_values"], batch["attention_mask"], target_only
        )
    f = number_features(model, ntok, texts[:24])
    keep = torch.isin(f.codes, model.action.readouts.codes)
    assert 0 < int(keep.sum()) < len(f)  # the rare field's numbers are left out
    if target_only:
        keep &= torch.tensor(
            [bool(i == len(f) - 1 or f.text_index[i + 1] != f.text_index[i]) for i in range(len(f))]
        )
    expected = cauchy_nll(f.targets[keep], f.loc_y[keep], f.scale_y[keep]).mean()
    # float32 features summed over 32 + 16 readout weights against a float64 reference
    assert float(term) == pytest.approx(float(expected), rel=1e-4, abs=1e-4)


def test_no_solved_readout_no_term():
    probe = _probe()
    model, ntok = tiny_model()
    enc = ntok("width 3, area 9.")
    ids = torch.tensor([enc["input_ids"]])
    vals = torch.tensor([enc["numeric_values"]], dtype=torch.float32)
    U = model.abduction(model.encode(ids, vals)[0])
    assert probe.readout_term(model, U, ids, vals, torch.ones_like(ids)) is None


@pytest.mark.slow
def test_a_toy_run_trained_through_the_readouts_differs_from_the_defaults(tmp_path):
    """At toy sizes both settings give a finite error, and solving every second step changes
    what is trained (a term without gradient would leave the two runs equal to every digit)."""
    probe = _probe()
    out = tmp_path / "rows.jsonl"
    assert probe.main(["--quick", "--tables", "barley", "--every", "0,2", "--json", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["every"] for r in rows] == [0, 2]
    assert all(math.isfinite(r["mdae"]) and r["mdae"] >= 0 for r in rows)
    assert rows[0]["mdae"] != rows[1]["mdae"]
    assert "| barley | 2 |" in "\n".join(probe.report(rows))


def test_bad_flags_are_refused(capsys):
    probe = _probe()
    for flags, message in (
        (["--every", "-1"], "--every must list steps >= 0"),
        (["--every", "x"], "--every takes integers"),
        (["--steps", "0"], "--steps must be at least 1"),
    ):
        with pytest.raises(SystemExit):
            probe.main(flags)
        assert message in capsys.readouterr().err
