"""``CauchyTrainer`` with ``CauchyTrainingArguments`` is the whole of ``train()``: the same data and
options give the same model (weights, readouts, calibration tables) by either door."""

from __future__ import annotations

import random

import torch
from cauchylin_hf.model import CauchyLMForCausalLM
from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
from cauchylin_hf.trainer import CauchyTrainer
from cauchylin_hf.training import train
from cauchylin_hf.training_args import CauchyTrainingArguments
from transformers import PrinterCallback


def _texts(n: int, seed: int) -> list[str]:
    """Rows of two fields whose numbers follow the row's first number (readouts per field)."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a = rng.randint(1, 900)
        rows.append(f"width {a} area {3 * a + rng.randint(0, 9)} cost {a * 0.5 + 1:.1f}")
    return rows


def _model():
    torch.manual_seed(0)  # the random part of the heads' initialisation
    base = tiny_base_model("qwen2", seed=0)
    return CauchyLMForCausalLM.from_base(base, tiny_tokenizer(), return_tokenizer=True)


def test_the_trainer_and_train_give_the_same_model(tmp_path):
    texts, held = _texts(200, 1), _texts(8, 2)  # 200 rows: "auto" holds 40 out to calibrate on
    settings = {"max_steps": 4, "logging_steps": 2, "learning_rate": 1e-2, "seed": 3}

    model_a, ntok_a = _model()
    result = train(
        model_a, ntok_a, texts, held, tmp_path / "a", batch_size=8, progress=False,
        save=False, **settings,
    )  # fmt: skip

    model_b, ntok_b = _model()
    args = CauchyTrainingArguments(
        str(tmp_path / "b"), per_device_train_batch_size=8, per_device_eval_batch_size=8,
        disable_tqdm=True, **settings,
    )  # fmt: skip
    trainer = CauchyTrainer(
        model_b, args=args, train_dataset=texts, eval_dataset=held, processing_class=ntok_b
    )
    trainer.remove_callback(PrinterCallback)
    out = trainer.train()

    assert out.global_step == result.global_step == 4
    assert result.calibration_size == len(trainer.calibration_dataset) > 0  # held out
    # the readouts were solved and the intervals calibrated, by both doors alike
    assert result.readouts is not None and result.readouts.kept > 0
    assert result.calibration is not None and result.calibration.contexts
    assert trainer.readouts == result.readouts
    assert trainer.calibration == result.calibration
    state_a, state_b = model_a.state_dict(), model_b.state_dict()
    assert state_a.keys() == state_b.keys()
    for name, tensor in state_a.items():
        assert torch.equal(tensor, state_b[name]), name
    assert [row["loss"] for row in trainer.loss_parts.history] == result.series("loss")
    # the trainer saves a model folder that loads, tokenizer included
    trainer.save_model(str(tmp_path / "saved"))
    loaded = CauchyLMForCausalLM.from_pretrained(tmp_path / "saved")
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, state_b[name]), name
    assert (tmp_path / "saved" / "tokenizer.json").is_file()
