"""``benchmarks/probe_field_heads.py``: each field's head starts at the shared head, reads what a
solved readout reads, and is trained with the network.

Nothing is measured here (the numbers come from running the script by hand, see
``docs/benchmarks.md``).
"""

import json
import math
import statistics

import pytest
import torch

from .probes import field_texts, load_benchmark, tiny_model

pytest.importorskip("sklearn")


def _probe():
    return load_benchmark("probe_field_heads")


def _loader(ntok, texts):
    from cauchylin_hf.data import NumericDataCollator

    collate = NumericDataCollator(ntok, padding_side="right")
    return torch.utils.data.DataLoader([ntok(t) for t in texts], batch_size=8, collate_fn=collate)


@pytest.mark.parametrize("loc_only", [False, True])
def test_initial_heads_start_at_the_shared_head_with_the_fields_spread(loc_only):
    """A head per field with at least ``MIN_READOUT_COUNT`` numbers; each predicts what the
    shared head predicts (the package's reading path, no readouts solved) with the median
    absolute deviation of its field's targets as its scale; its term at a batch is the mean
    Cauchy NLL under those."""
    from cauchylin_hf.data import NumericDataCollator
    from cauchylin_hf.readouts import MIN_READOUT_COUNT, number_features

    from cauchylin.readout import cauchy_nll

    probe = _probe()
    model, ntok = tiny_model()
    texts = field_texts()
    heads = probe.initial_heads(model, _loader(ntok, texts), loc_only=loc_only)
    f = number_features(model, ntok, texts)
    counts = {c: int((f.codes == c).sum()) for c in set(f.codes.tolist())}
    expected = sorted(c for c, n in counts.items() if n >= MIN_READOUT_COUNT)
    assert len(expected) == 3 and min(counts.values()) < MIN_READOUT_COUNT
    assert heads.codes.tolist() == expected
    rows = heads.rows(f.codes)
    assert bool((rows >= 0).any()) and bool((rows < 0).any())
    known = rows >= 0
    x = f.loc[known].float()
    if not loc_only:
        x = model.action.readouts.features(x, f.numbers[known].float())
    assert heads.weight.shape[1] == x.shape[1]
    w, b = heads.weight[rows[known]], heads.bias[rows[known]]
    loc = ((x * w).sum(-1) + b).detach().double()
    # float32 features summed over 32 + 16 weights against the float64 path
    torch.testing.assert_close(loc, f.loc_y[known].double(), rtol=1e-4, atol=1e-4)
    for row, code in enumerate(expected):
        t = f.targets[f.codes == code].tolist()
        med = statistics.median_low(t)  # torch's median is the lower of a middle pair
        mad = statistics.median_low([abs(v - med) for v in t])
        assert math.exp(float(heads.log_sigma[row].detach())) == pytest.approx(mad, rel=1e-5)
    batch = NumericDataCollator(ntok, padding_side="right")([ntok(t) for t in texts])
    with torch.no_grad():
        hidden, _ = model.encode(
            batch["input_ids"], batch["numeric_values"], batch["attention_mask"]
        )
        term = probe.head_term(
            model,
            heads,
            model.abduction(hidden),
            batch["labels"],
            batch["numeric_values"],
            batch["attention_mask"],
        )
    sigma = heads.log_sigma.detach().exp()[rows[known]].double()
    expected = cauchy_nll(f.targets[known], f.loc_y[known], sigma).mean()
    assert float(term) == pytest.approx(float(expected), rel=1e-4, abs=1e-4)


def test_heads_set_to_the_solved_readouts_give_the_models_own_likelihood():
    """With each head holding its field's solved readout, the term is the mean Cauchy NLL of
    the numbers under the ``loc_Y``/``scale_Y`` of the package's reading path."""
    from cauchylin_hf.data import NumericDataCollator
    from cauchylin_hf.readouts import number_features, solve_readouts

    from cauchylin.readout import cauchy_nll

    probe = _probe()
    model, ntok = tiny_model()
    texts = field_texts()
    solve_readouts(model, ntok, texts)
    table = model.action.readouts
    solved = table.is_solved
    heads = probe.FieldHeads(
        table.codes[solved], table.weight[solved], table.bias[solved], table.noise[solved]
    )
    model.eval()
    batch = NumericDataCollator(ntok, padding_side="right")([ntok(t) for t in texts[:24]])
    with torch.no_grad():
        hidden, _ = model.encode(
            batch["input_ids"], batch["numeric_values"], batch["attention_mask"]
        )
        U = model.abduction(hidden)
        term = probe.head_term(
            model, heads, U, batch["labels"], batch["numeric_values"], batch["attention_mask"]
        )
    f = number_features(model, ntok, texts[:24])
    keep = torch.isin(f.codes, heads.codes)
    assert 0 < int(keep.sum()) < len(f)
    expected = cauchy_nll(f.targets[keep], f.loc_y[keep], f.scale_y[keep]).mean()
    assert float(term) == pytest.approx(float(expected), rel=1e-4, abs=1e-4)


@pytest.mark.slow
def test_the_heads_are_trained_on_the_networks_schedule():
    """In a toy run the heads' parameters move and their learning rate is the network's at
    every step (warm-up and decay)."""
    from cauchylin_hf.app import compare
    from transformers import TrainerCallback

    probe = _probe()
    callback = probe.with_heads()
    seen, start = [], {}

    class Watch(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            start.update({k: v.detach().clone() for k, v in callback.heads.named_parameters()})

        def on_step_end(self, args, state, control, optimizer=None, **kw):
            seen.append([g["lr"] for g in optimizer.param_groups])

    texts = field_texts()
    recipe = compare.Recipe(hidden_size=16, num_layers=1, num_heads=2, max_steps=6, batch_size=8)
    with probe.installed():
        compare.train_causal_run(texts, recipe, callbacks=[callback, Watch()])
    assert callback.heads.codes.numel() == 3
    assert len(seen) == 6 and len({r[0] for r in seen}) > 2  # warm-up and decay
    assert all(r[-1] == r[0] for r in seen)
    for name, param in callback.heads.named_parameters():
        assert not torch.equal(param.detach(), start[name]), name


@pytest.mark.slow
def test_a_toy_run_with_field_heads_differs_from_the_defaults(tmp_path):
    """Both settings give a finite error and the heads change what is trained (a term without
    gradient would leave the two runs equal to every digit)."""
    probe = _probe()
    out = tmp_path / "rows.jsonl"
    assert probe.main(["--quick", "--tables", "barley", "--heads", "0,1", "--json", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["heads"] for r in rows] == [0, 1] and rows[1]["num_heads"] > 0
    assert all(math.isfinite(r["mdae"]) and r["mdae"] >= 0 for r in rows)
    assert rows[0]["mdae"] != rows[1]["mdae"]
    assert "| barley | field heads |" in "\n".join(probe.report(rows))


def test_bad_flags_are_refused(capsys):
    probe = _probe()
    for flags, message in (
        (["--heads", "2"], "--heads must list 0 and/or 1"),
        (["--heads", "x"], "--heads takes integers"),
        (["--seeds", "0,y"], "--seeds takes integers"),
        (["--steps", "0"], "--steps must be at least 1"),
        (["--weight", "0"], "--weight must be a finite number > 0"),
        (["--weight", "inf"], "--weight must be a finite number > 0"),
    ):
        with pytest.raises(SystemExit):
            probe.main(flags)
        assert message in capsys.readouterr().err


def test_the_term_enters_the_loss_with_its_weight():
    """Under ``installed(weight=c)`` the model's training loss is the package's plus
    ``c * reg_weight`` times the heads' term, and only while a callback has registered it."""
    from cauchylin_hf import model as modeling

    probe = _probe()
    model, ntok = tiny_model()
    texts = field_texts()
    heads = probe.initial_heads(model, _loader(ntok, texts))
    batch = next(iter(_loader(ntok, texts)))
    args = (batch["input_ids"], batch["numeric_values"], batch["attention_mask"])
    model.eval()
    with torch.no_grad():
        U = model.abduction(model.encode(*args)[0])
        term = probe.head_term(model, heads, U, batch["labels"], *args[1:])
        loss = (
            model.action,
            model.config,
            U,
            batch["labels"],
            None,
            batch["numeric_values"],
            batch["attention_mask"],
        )
        plain = modeling.shifted_causal_loss(*loss).total
        totals = {}
        for c in (1.0, 0.25):
            with probe.installed(weight=c):
                unregistered = modeling.shifted_causal_loss(*loss).total
                probe.TRAINING[id(model.action)] = (model, heads)
                try:
                    totals[c] = modeling.shifted_causal_loss(*loss).total
                finally:
                    probe.TRAINING.pop(id(model.action))
            assert float(unregistered) == float(plain)
    lam = model.config.reg_weight
    for c, total in totals.items():
        # float32 sums: the difference is good to a few units in the last place of the totals
        tol = 8 * torch.finfo(torch.float32).eps * (abs(float(total)) + abs(float(plain)))
        assert float(total - plain) == pytest.approx(c * lam * float(term), abs=tol)
    assert float(term) > 1e3 * tol
