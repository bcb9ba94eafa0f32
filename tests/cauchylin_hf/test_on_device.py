"""The causal model on every device: forward, generate, a training step and single-process FSDP2.

Each case runs on ``device`` (``tests.devices.DEVICES``: the CPU always; the CUDA case carries
the ``cuda`` marker that ``scripts/gpu_check.sh`` selects and is skipped without a GPU) and is
compared with the same model in float64 on the CPU: the outputs, the loss and every gradient of
a training step (the float64 CPU forward is itself checked against independent references in
``test_model_forward.py``). Greedy generation (the ``causal`` mode at temperature 0, no draw) must
give the same tokens on the device as on the CPU, except where two classes tie to rounding.

Tolerances: a float32 forward of the tiny model accumulates a few float32 ulp per term of its
matrix products (hidden size 32, 2 layers, softmax attention over 10 positions), far below
``TOL = 1e-3`` relative to the largest magnitude (about 1e4 ulp), and bfloat16 is not used here:
the model's dtype is the base's (float32).
"""

from __future__ import annotations

import copy
import random

import pytest
import torch
import torch.distributed as dist
from cauchylin_hf import CauchyLMForCausalLM
from cauchylin_hf.evaluation import evaluate_model
from cauchylin_hf.generation import generate
from cauchylin_hf.predict import (
    NumberMetrics,
    NumberReader,
    number_predictions,
    predict_values,
)
from cauchylin_hf.readouts import calibrate, number_features, solve_readouts
from cauchylin_hf.sharding import shard_model
from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer

from tests.devices import DEVICES

from .conftest import VOCAB

NUM = VOCAB
TOL = 1e-3


@pytest.fixture
def pair(make_base, tiny_tok):
    """``(model in float64 on the CPU, a float32 copy)``: the same weights."""
    torch.manual_seed(0)
    model = CauchyLMForCausalLM.from_base(make_base("qwen2", spare_rows=3), tiny_tok)
    return copy.deepcopy(model).double(), model


def _batch():
    ids = torch.tensor([[5, 17, NUM, 40, 41, NUM, 9, 12], [7, NUM, 33, 34, 60, 61, 62, 63]])
    values = torch.zeros(ids.shape)
    values[ids == NUM] = torch.tensor([3.5, -120.0, 0.25])
    return ids, values, torch.ones_like(ids)


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    scale = max(1.0, float(want.detach().abs().max()))
    torch.testing.assert_close(
        got.detach().double().cpu(), want.detach().double().cpu(), rtol=TOL, atol=TOL * scale
    )


@pytest.mark.parametrize("device", DEVICES)
def test_forward_and_training_step_match_float64_on_the_cpu(pair, device):
    ref, model = pair
    model = model.to(device)
    ids, values, mask = _batch()
    for net in (ref, model):
        net.backbone.requires_grad_(True)  # the whole model trains in this step
        net.train()
    out = model(
        ids.to(device),
        numeric_values=values.to(device),
        attention_mask=mask.to(device),
        labels=ids.to(device),
        return_distributions=True,
    )
    want = ref(
        ids,
        numeric_values=values.double(),
        attention_mask=mask,
        labels=ids,
        return_distributions=True,
    )
    for name in ("loc_S", "scale_S", "loc_Y", "scale_Y", "loss", "cls_loss", "reg_loss"):
        _close(getattr(out, name), getattr(want, name))
    out.loss.backward()
    want.loss.backward()
    grads = dict(ref.named_parameters())
    for name, p in model.named_parameters():
        if p.grad is None:
            assert grads[name].grad is None, name
            continue
        _close(p.grad, grads[name].grad)


@pytest.mark.parametrize("device", DEVICES)
def test_heads_attached_to_a_base_already_on_the_device(make_base, tiny_tok, device):
    """``from_base`` of a decoder loaded on the device (as ``device_map="cuda"`` leaves it) puts
    every head there and initialises them as it does on the CPU: the same parameters, and the
    same forward as attaching on the CPU and moving the model after."""
    torch.manual_seed(0)
    base = make_base("qwen2", spare_rows=3)
    moved_base = copy.deepcopy(base).to(device)
    torch.manual_seed(1)
    want = CauchyLMForCausalLM.from_base(base, tiny_tok).to(device)
    torch.manual_seed(1)
    got = CauchyLMForCausalLM.from_base(moved_base, tiny_tok)
    mine = dict(got.named_parameters())
    for name, p in want.named_parameters():
        assert mine[name].device == p.device, name
        _close(mine[name], p.cpu())
    ids, values, mask = (t.to(device) for t in _batch())
    out = got(ids, numeric_values=values, attention_mask=mask, labels=ids)
    ref = want(ids, numeric_values=values, attention_mask=mask, labels=ids)
    _close(out.loss, ref.loss.cpu())


@pytest.mark.parametrize("device", DEVICES)
def test_readouts_calibration_and_predictions_on_the_device_match_the_cpu(device):
    """``solve_readouts``, ``calibrate`` and ``predict_values`` of a model on the device give the
    CPU's readout predictions, widths and predictions (the features in float32 on each device,
    the solve in float64 on the features' device; the context whose rows share one prefix is
    read as its bias on both, whatever each device's rounding)."""
    rng = random.Random(0)
    texts = [f"width {w}, area {2 * w + rng.randint(-3, 3)}." for w in range(2, 82)]
    held = [f"width {w}, area {2 * w + rng.randint(-3, 3)}." for w in range(3, 83, 2)]
    torch.manual_seed(0)
    ref, ntok = CauchyLMForCausalLM.from_base(
        tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True, readout_numbers=0
    )
    model = copy.deepcopy(ref).to(device)
    for net in (ref, model):
        # one penalty: a cross-validated choice between two nearly tied penalties could go
        # either way with float32 features from different kernels, and is not what is checked
        solve_readouts(net, ntok, texts, penalties=(1e-2,))
        calibrate(net, ntok, held)
    want, got = ref.action.readouts, model.action.readouts
    assert torch.equal(got.codes.cpu(), want.codes) and want.num_contexts == 2
    # What the readouts predict, not their weights: the features are collinear, and a
    # rounding-level difference between the devices' features moves weights along the
    # directions the rows do not determine (each context's predictions stay).
    mine, theirs = (number_features(m, ntok, texts + held) for m in (model, ref))
    for name in ("loc_y", "scale_y"):
        _close(getattr(mine, name), getattr(theirs, name))
    for name in ("noise", "widths"):
        a, b = getattr(got, name).cpu(), getattr(want, name)
        assert torch.equal(a.isnan(), b.isnan()), name  # the same levels calibrated
        _close(a.nan_to_num(), b.nan_to_num())
    prompts = ["width 7, area ", "width 40, area ", "width "]
    p, q = (predict_values(m, ntok, prompts, levels=(0.5, 0.9)) for m in (model, ref))
    assert torch.equal(p.calibrated.cpu(), q.calibrated) and bool(q.calibrated.all())
    for name in ("median", "loc", "scale", "lower", "upper"):
        _close(getattr(p, name), getattr(q, name))
    # every number of some texts, read batch by batch and in evaluate's one pass: CPU results
    # (a model on a GPU once failed here, reading its inputs on the CPU)
    a, b = (number_predictions(m, ntok, held, levels=(0.5, 0.9)) for m in (model, ref))
    assert a.prediction.median.device.type == "cpu" and torch.equal(a.is_target, b.is_target)
    for name in ("median", "lower", "upper"):
        _close(getattr(a.prediction, name), getattr(b.prediction, name))
    results = []
    for net in (model, ref):
        sink = NumberMetrics()
        reader = NumberReader(net, texts=held, target_field="area", sink=sink.add)
        evaluate_model(net, ntok, held, numbers=reader)
        results.append(sink.result())
    # errors of predictions that agree to TOL of the numbers' size agree to that much (a
    # coverage could flip with a number at an interval's end: not compared)
    size = max(abs(float(v)) for v in b.true)
    for key in ("target/mae", "target/mdae", "all/mae", "all/mdae"):
        got, want = results[0][key], results[1][key]
        assert abs(got - want) <= TOL * size, (key, got, want)


@pytest.mark.parametrize("device", DEVICES)
def test_greedy_generation_matches_the_cpu(pair, device):
    ref, model = pair
    model = model.to(device).eval()
    ref.eval()
    ids, values, mask = _batch()
    kw = dict(mode="causal", max_new_tokens=6, eos_token_id=[], seed=0)
    got = generate(model, ids.to(device), values.to(device), mask.to(device), **kw)
    want = generate(ref, ids, values.double(), mask, **kw)
    assert got.new_tokens.device.type == torch.device(device).type
    assert torch.equal(got.new_tokens.cpu(), want.new_tokens)
    _close(got.new_values, want.new_values)


@pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()),
    reason="torch.distributed with gloo is not available",
)
@pytest.mark.parametrize("device", DEVICES)
def test_fsdp2_in_one_process_matches_the_unsharded_model(pair, device):
    """FSDP2 over one process (gloo on the CPU, NCCL on a GPU): the forward, the loss and the
    gradients equal the unsharded model's."""
    _, model = pair
    model = model.float().to(device)
    plain = copy.deepcopy(model)
    ids, values, mask = _batch()
    batch = dict(
        input_ids=ids.to(device),
        numeric_values=values.to(device),
        attention_mask=mask.to(device),
        labels=ids.to(device),
        return_distributions=True,
    )
    backend = "nccl" if torch.device(device).type == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        sharded = shard_model(model)
        out = sharded(**batch)
        out.loss.backward()
        grads = {
            name: p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
            for name, p in sharded.named_parameters()
            if p.grad is not None
        }
    finally:
        dist.destroy_process_group()
    want = plain(**batch)
    want.loss.backward()
    _close(out.loss, want.loss)
    _close(out.loc_S, want.loc_S)
    expected = {name: p.grad for name, p in plain.named_parameters() if p.grad is not None}
    assert grads.keys() == expected.keys()
    for name, g in grads.items():
        _close(g, expected[name])
