"""``benchmarks/probe_batch_ensemble.py``: k members of one network, each scaling the input
embeddings by its own vector, trained on one repeated batch and averaged after.

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
    return load_benchmark("probe_batch_ensemble")


def _batch(ntok, texts):
    from cauchylin_hf.data import NumericDataCollator

    return NumericDataCollator(ntok, padding_side="right")([ntok(t) for t in texts])


@pytest.mark.parametrize("every_linear", [False, True])
def test_the_repeated_batch_trains_the_mean_of_the_members(every_linear):
    """The training loss of the repeated batch is the mean of the members' losses on the batch,
    each member's computed alone (its embeddings times its own ``r_m``, and with
    ``every_linear`` each linear layer's input and output times its ``a_ml``, ``c_ml``, here
    drawn away from their initial ones); its gradient is the mean of theirs. The members
    differ."""
    probe = _probe()
    model, ntok = tiny_model()
    batch = _batch(ntok, field_texts()[:6])
    linears = probe.linear_shapes(model) if every_linear else None
    ensemble = probe.BatchEnsemble(3, model.config.hidden_size, seed=0, linears=linears)
    assert len(ensemble.a) == (14 if every_linear else 0)  # 7 linears in each of 2 layers
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for v in [*ensemble.a, *ensemble.c]:
            v.copy_(torch.rand(v.shape, generator=g) + 0.5)
    ensemble.attach(model)
    model.train()
    ensemble.repeating = True
    joint = model(**batch).loss
    params = list(ensemble.parameters())
    g_joint = torch.autograd.grad(joint, params)
    joint = joint.detach()
    ensemble.repeating = False
    alone, g_alone = [], [torch.zeros_like(v) for v in params]
    for m in range(3):
        ensemble.member = m
        loss = model(**batch).loss
        for total, g in zip(g_alone, torch.autograd.grad(loss, params), strict=True):
            total += g / 3
        alone.append(loss.detach())
    assert len({round(x.item(), 6) for x in alone}) == 3
    mean = torch.stack(alone).mean()
    # float32 sums over a few hundred positions: a relative error near 1e-6 each
    assert torch.allclose(joint, mean, rtol=1e-5, atol=0)
    for a, b in zip(g_joint, g_alone, strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6 * float(b.abs().max()))
    ensemble.detach()
    ensemble.member = 2  # detached: the member no longer matters
    assert torch.equal(model(**batch).loss.detach(), _plain_loss(batch))


def _plain_loss(batch):
    model, _ = tiny_model()
    model.train()
    return model(**batch).loss.detach()


def test_members_of_unit_vectors_are_the_plain_network_with_its_readouts():
    """With every ``r_m = 1`` each member's readouts, solved again on the training rows, predict
    the held-out texts as the same network without hooks does after ``solve_readouts``."""
    from cauchylin_hf.predict import number_predictions
    from cauchylin_hf.readouts import solve_readouts

    probe = _probe()
    texts = field_texts()
    train, held = texts[:48], texts[48:]
    model, ntok = tiny_model()
    model.eval()
    result = type("Result", (), {"readout_data": train})()
    ensemble = probe.BatchEnsemble(2, model.config.hidden_size, seed=0)
    with torch.no_grad():
        ensemble.r.fill_(1.0)
    ensemble.attach(model)
    parts = probe.member_predictions(model, ntok, result, ensemble, held)
    ensemble.detach()
    solve_readouts(model, ntok, train)
    plain = number_predictions(model, ntok, held, levels=(0.5,), calibrated=False)
    assert model.action.readouts.codes.numel() == 3  # the three fields have readouts
    for part in parts:
        torch.testing.assert_close(part.prediction.loc, plain.prediction.loc)
        assert math.isclose(probe.target_mdae(part, held), probe.target_mdae(plain, held))


def test_the_vectors_are_trained_on_the_networks_schedule():
    """In a toy run ``r`` moves, its learning rate is the network's at every step (warm-up and
    decay), and after training the batch is no longer repeated."""
    from cauchylin_hf.app import compare
    from transformers import TrainerCallback

    probe = _probe()
    callback = probe.with_members(3, seed=0)
    seen, start = [], []

    class Watch(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            start.append(callback.ensemble.r.detach().clone())

        def on_step_end(self, args, state, control, optimizer=None, **kw):
            seen.append([g["lr"] for g in optimizer.param_groups])

    recipe = compare.Recipe(hidden_size=16, num_layers=1, num_heads=2, max_steps=6, batch_size=8)
    compare.train_causal_run(field_texts(), recipe, callbacks=[callback, Watch()])
    ensemble = callback.ensemble
    assert ensemble.r.shape == (3, 16) and set(start[0].unique().tolist()) == {-1.0, 1.0}
    assert len(seen) == 6 and len({r[0] for r in seen}) > 2
    assert all(r[-1] == r[0] for r in seen)
    assert not torch.equal(ensemble.r.detach(), start[0])
    assert not ensemble.repeating


@pytest.mark.slow
def test_a_toy_run_scores_the_ensemble_and_each_member(tmp_path):
    """A toy run gives a finite error for the ensemble and for each of its members, which
    differ (the defaults' path, ``--members 0``, is the other probes' toy runs')."""
    probe = _probe()
    out = tmp_path / "rows.jsonl"
    flags = ["--quick", "--tables", "barley", "--members", "2", "--json", str(out)]
    assert probe.main(flags) == 0
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["members"] == 2 and len(row["member_mdae"]) == 2
    assert all(math.isfinite(x) and x >= 0 for x in [row["mdae"], *row["member_mdae"]])
    assert len(set(row["member_mdae"])) == 2


def test_bad_inputs_are_refused(capsys):
    probe = _probe()
    for flags, message in (
        (["--members", "-1"], "--members must list numbers >= 0"),
        (["--members", "x"], "--members takes integers"),
        (["--steps", "0"], "--steps must be at least 1"),
        (["--target-only"], "--target-only has no meaning here"),
    ):
        with pytest.raises(SystemExit):
            probe.main(flags)
        assert message in capsys.readouterr().err
    with pytest.raises(ValueError, match="members must be at least 1"):
        probe.BatchEnsemble(0, 8, seed=0)
    model, _ = tiny_model()
    with pytest.raises(ValueError, match="1 linear adapters for 14 linear layers"):
        probe.BatchEnsemble(2, 32, seed=0, linears=[(32, 32)]).attach(model)
