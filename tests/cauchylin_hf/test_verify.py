"""``verify``: the init-equivalence report over every architecture, tied and untied.

Asserted: the exactness (max |loc_S - base logits| <= 1e-4 in float32, every compatible-mode
greedy choice agrees). Only measured (checked for sanity, printed with ``-s``): the standard-mode
OvR agreement, the initial OvR loss next to the base cross-entropy, and the spread of P_k.
"""

from __future__ import annotations

import math

import pytest
import torch
from cauchylin_hf import CauchyLMConfig, CauchyLMForCausalLM, VerifyReport, verify
from cauchylin_hf.testing import tiny_base_model

from .conftest import ARCH_CASES, ARCH_IDS, VOCAB


def check_sane(report: VerifyReport) -> None:
    assert report.positions > 0 and report.loss_positions > 0
    for name in ("ovr_loss", "base_cross_entropy", "median_p_sum", "mean_scale_U"):
        assert math.isfinite(getattr(report, name)), name
    for name in ("ovr_agreement", "frac_p_within_001", "frac_p_within_01"):
        assert 0.0 <= getattr(report, name) <= 1.0, name
    assert report.frac_p_within_001 <= report.frac_p_within_01
    q = list(report.p_quantiles.values())
    assert q == sorted(q) and 0.0 <= q[0] and q[-1] <= 1.0
    assert report.mean_scale_U == pytest.approx(CauchyLMConfig().gamma_init)  # scale_U = gamma_0


@pytest.mark.parametrize(("arch", "tied"), ARCH_CASES, ids=ARCH_IDS)
def test_verify_every_architecture(arch, tied, tiny_tok):
    base = tiny_base_model(arch, tie_word_embeddings=tied, vocab_size=VOCAB, spare_rows=3)
    report = verify(base, tokenizer=tiny_tok)
    print(f"\n{report}")
    assert report.passed
    assert report.max_abs_diff <= 1e-4 and report.greedy_agreement == 1.0
    assert report.architecture == type(base).__name__ and report.tied_embeddings is tied
    assert report.num_token_id == VOCAB and report.base_vocab_size == VOCAB + 3
    check_sane(report)
    text = str(report)
    for line in ("max |loc_S - base logits|", "OvR argmax agreement", "initial OvR loss"):
        assert line in text
    assert report.to_dict()["passed"] is True


def test_verify_a_local_folder_and_an_explicit_model(qwen_folder):
    report = verify(qwen_folder)  # model and tokenizer from the folder
    assert report.passed and report.architecture == "Qwen2ForCausalLM"
    model = CauchyLMForCausalLM.from_base(qwen_folder)
    with torch.no_grad():
        model.action.classifier.weight.add_(0.01)  # no longer the base's head
    bad = verify(qwen_folder, model)
    assert not bad.passed and bad.max_abs_diff > 1e-4


def test_verify_without_tokenizer_reads_random_ids(make_base):
    report = verify(make_base("gpt2"), tokenizer=False)
    assert report.passed and report.positions == 4 * 32
    assert report.num_token_id is None
    check_sane(report)


def test_verify_explicit_ids_and_texts(make_base, tiny_tok):
    base = make_base("llama", tied=False)
    ids = torch.tensor([[5, 6, 7, 8, 0], [9, 10, 11, 0, 0]])
    mask = (ids != 0).long()
    report = verify(base, tokenizer=tiny_tok, input_ids=ids, attention_mask=mask)
    assert report.positions == 7 and report.loss_positions == 5
    report = verify(base, tokenizer=tiny_tok, texts=["3 eggs and 4 boxes", "x = 12.5"])
    assert report.passed
    with pytest.raises(ValueError, match="fewer than 2 tokens"):
        verify(base, tokenizer=tiny_tok, texts=["a"])


def test_verify_bad_arguments(make_base, tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        verify(str(tmp_path / "missing" / "base" / "folder"))
    with pytest.raises(ValueError, match="CauchyLMForCausalLM"):
        verify(make_base(), causal_model=make_base())
    wide = CauchyLMForCausalLM.from_base(make_base(hidden_size=64), num_token_id=VOCAB)
    with pytest.raises(ValueError, match="not built on this base"):
        verify(make_base(), causal_model=wide, tokenizer=False)
