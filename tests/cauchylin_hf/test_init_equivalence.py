"""The initialisation: right after ``from_base`` the causal model reproduces its base.

For every architecture, tied and untied, with and without spare embedding rows, ``loc_S`` equals
the base model's own forward logits (float32, max abs difference <= 1e-4, in fact 0 or ~1e-8),
``loc_U`` equals the base's last hidden state, ``scale_U`` is gamma_0, and the ``<NUM>`` token
follows the rules of docs/concepts.md ("Initialisation that reproduces the base model").
"""

from __future__ import annotations

import copy

import pytest
import torch
from cauchylin_hf import CauchyLMForCausalLM
from cauchylin_hf.testing import tiny_base_model
from cauchylin_hf.tokenizer import NumericTokenizer
from torch import nn

from .conftest import ARCH_CASES, ARCH_IDS, VOCAB

TOL = 1e-4


def base_logits_and_hidden(base, ids, mask):
    with torch.no_grad():
        out = base(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    return out.logits.float(), out.hidden_states[-1].float()


@pytest.mark.parametrize("spare_rows", [3, 0], ids=["spare", "no-spare"])
@pytest.mark.parametrize(("arch", "tied"), ARCH_CASES, ids=ARCH_IDS)
def test_loc_S_equals_the_base_logits(arch, tied, spare_rows, tiny_tok, batch):
    base = tiny_base_model(arch, tie_word_embeddings=tied, vocab_size=VOCAB, spare_rows=spare_rows)
    ids, mask = batch
    logits, hidden = base_logits_and_hidden(base, ids, mask)
    model = CauchyLMForCausalLM.from_base(base, tiny_tok)
    with torch.no_grad():
        out = model(ids, attention_mask=mask)
    rows = VOCAB + spare_rows
    V = logits.shape[-1]
    assert out.loc_S.dtype == torch.float32
    assert out.logits is out.loc_S
    valid = mask.bool()
    diff = (out.loc_S[..., :V] - logits).abs()[valid].max().item()
    assert diff <= TOL, f"{arch} tied={tied}: max |loc_S - logits| = {diff:.3e}"
    # Abduction is the identity on the base's last hidden state, scale_U = gamma_0.
    assert torch.equal(out.loc_U[valid], hidden[valid])
    gamma = model.config.gamma_init
    assert torch.allclose(out.scale_U, torch.full_like(out.scale_U, gamma), rtol=1e-5, atol=0)
    # Compatible-mode greedy choices agree everywhere.
    assert torch.equal(out.loc_S[..., :V].argmax(-1)[valid], logits.argmax(-1)[valid])
    # <NUM>: the first spare row when there is one, else a new row.
    assert model.config.num_token_id == VOCAB
    assert model.config.base_vocab_size == rows
    assert model.config.vocab_size == max(rows, VOCAB + 1)
    assert out.loc_S.shape[-1] == model.config.num_classes == model.config.vocab_size


@pytest.mark.parametrize(("arch", "tied"), ARCH_CASES, ids=ARCH_IDS)
def test_head_and_embedding_rows_are_inherited(arch, tied, tiny_tok):
    base = tiny_base_model(arch, tie_word_embeddings=tied, vocab_size=VOCAB, spare_rows=2)
    head = base.get_output_embeddings().weight.detach().clone()
    emb = base.get_input_embeddings().weight.detach().clone()
    model = CauchyLMForCausalLM.from_base(base, tiny_tok)
    W = model.action.classifier.weight
    live = (head != 0).any(dim=1)  # all-zero rows get a 1e-9 fill (tested below)
    assert torch.equal(W[live], head[live])
    assert torch.equal(model.action.classifier.bias, torch.zeros(VOCAB + 2))
    k = model.config.num_token_id
    assert k == VOCAB  # the first spare row ...
    assert torch.equal(model.get_input_embeddings().weight[k], emb[k])  # ... keeps its embedding
    assert torch.equal(W[k], head[k])  # ... and its head row
    # The backbone is the base's own decoder (shared, not copied), attention unchanged.
    assert model.backbone is base.base_model
    assert model.backbone.config._attn_implementation == base.config._attn_implementation


def test_a_new_num_row_is_the_mean_row(tiny_tok):
    base = tiny_base_model("llama", tie_word_embeddings=False, vocab_size=VOCAB, spare_rows=0)
    head = base.get_output_embeddings().weight.detach().clone()
    emb = base.get_input_embeddings().weight.detach().clone()
    model, ntok = CauchyLMForCausalLM.from_base(base, tiny_tok, return_tokenizer=True)
    assert model.config.num_token_id == VOCAB == ntok.num_token_id
    new_emb = model.get_input_embeddings().weight
    assert new_emb.shape == (VOCAB + 1, 32)
    assert torch.equal(new_emb[:VOCAB], emb)
    torch.testing.assert_close(new_emb[VOCAB], emb.mean(0))
    torch.testing.assert_close(model.action.classifier.weight[VOCAB], head.mean(0))
    assert model.config.base_config.vocab_size == VOCAB + 1
    assert base.config.vocab_size == VOCAB  # the base's config object is not edited
    assert len(tiny_tok) == VOCAB  # nor is the tokenizer


def test_num_token_in_the_vocabulary_is_used(make_base):
    from cauchylin_hf.testing import tiny_tokenizer

    tok = tiny_tokenizer(VOCAB)
    tok.add_tokens(["<NUM>"], special_tokens=True)  # id 300 = a spare row of the base
    model = CauchyLMForCausalLM.from_base(make_base(spare_rows=3), tok)
    assert model.config.num_token_id == tok.convert_tokens_to_ids("<NUM>") == 300


def test_explicit_num_token_id_and_numeric_tokenizer(make_base, tiny_tok):
    model = CauchyLMForCausalLM.from_base(make_base(spare_rows=3), num_token_id=302)
    assert model.config.num_token_id == 302 and model.config.vocab_size == 303
    ntok = NumericTokenizer(tiny_tok, num_token_id=301)
    model, again = CauchyLMForCausalLM.from_base(make_base(), ntok, return_tokenizer=True)
    assert model.config.num_token_id == 301 and again is ntok
    with pytest.raises(ValueError, match="num_token_id"):
        CauchyLMForCausalLM.from_base(make_base(spare_rows=3), num_token_id=305)


def test_without_tokenizer_or_id_there_is_no_num_token(make_base, caplog):
    model = CauchyLMForCausalLM.from_base(make_base(), tokenizer=False)
    assert model.config.num_token_id is None
    ids = torch.tensor([[5, 6, 7]])
    out = model(ids, labels=ids)
    assert out.reg_loss.item() == 0.0 and torch.isfinite(out.loss)


def test_ovr_classes_restricted_to_the_tokenizer(make_base, tiny_tok, batch):
    base = make_base("qwen2", spare_rows=5)
    ids, mask = batch
    logits, _ = base_logits_and_hidden(base, ids, mask)
    model = CauchyLMForCausalLM.from_base(base, tiny_tok, ovr_classes="tokenizer")
    assert model.config.tokenizer_size == VOCAB + 1 == model.config.num_classes
    out = model(ids, attention_mask=mask)
    assert out.loc_S.shape[-1] == VOCAB + 1
    diff = (out.loc_S - logits[..., : VOCAB + 1]).abs()[mask.bool()].max()
    assert diff <= TOL
    with pytest.raises(ValueError, match="tokenizer"):
        CauchyLMForCausalLM.from_base(make_base(), ovr_classes="tokenizer", num_token_id=300)


def test_causal_size_above_hidden_keeps_the_init_exact(make_base, tiny_tok, batch):
    base = make_base("mistral", tied=False)
    ids, mask = batch
    logits, _ = base_logits_and_hidden(base, ids, mask)
    model = CauchyLMForCausalLM.from_base(base, tiny_tok, causal_size=40)
    out = model(ids, attention_mask=mask)
    assert out.loc_U.shape[-1] == 40
    assert (out.loc_S[..., : logits.shape[-1]] - logits).abs()[mask.bool()].max() <= TOL
    smaller = CauchyLMForCausalLM.from_base(make_base(), tiny_tok, causal_size=16)
    assert smaller(ids).loc_S.shape == (2, 10, VOCAB + 3)  # builds; not exact by design


def test_zero_head_rows_keep_a_positive_scale(tiny_tok):
    # Qwen2's random init zeroes the padding embedding row; tied, that is a zero head row.
    base = tiny_base_model("qwen2", tie_word_embeddings=True, vocab_size=VOCAB, spare_rows=1)
    assert (base.get_output_embeddings().weight[0] == 0).all()
    model = CauchyLMForCausalLM.from_base(base, tiny_tok)
    assert (model.action.classifier.weight[0] == 1e-9).all()
    ids = torch.tensor([[5, 6, 7, 8]])
    out = model(ids, labels=ids, return_distributions=True)
    assert (out.scale_S > 0).all() and torch.isfinite(out.loss)


def test_a_head_bias_is_copied(tiny_tok, batch):
    base = tiny_base_model("llama", tie_word_embeddings=False, vocab_size=VOCAB, spare_rows=2)
    old = base.lm_head
    base.lm_head = nn.Linear(old.in_features, old.out_features, bias=True)
    with torch.no_grad():
        base.lm_head.weight.copy_(old.weight)
        base.lm_head.bias.normal_()
    ids, mask = batch
    logits, _ = base_logits_and_hidden(base, ids, mask)
    model = CauchyLMForCausalLM.from_base(base, tiny_tok)
    assert torch.equal(model.action.classifier.bias, base.lm_head.bias)
    assert (model(ids, attention_mask=mask).loc_S - logits).abs()[mask.bool()].max() <= TOL


def test_from_a_local_checkpoint_folder(qwen_folder, batch):
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(qwen_folder)
    ids, mask = batch
    logits, _ = base_logits_and_hidden(base, ids, mask)
    model, ntok = CauchyLMForCausalLM.from_base(qwen_folder, return_tokenizer=True)
    eager = CauchyLMForCausalLM.from_base(qwen_folder, base_kwargs={"attn_implementation": "eager"})
    assert eager.backbone.config._attn_implementation == "eager"
    assert isinstance(ntok, NumericTokenizer)  # the folder's tokenizer was found
    assert model.config.num_token_id == len(ntok.tokenizer)  # first spare row
    assert model.config.base_model_name_or_path == str(qwen_folder)
    assert not model.training
    out = model(ids, attention_mask=mask)
    assert (out.loc_S[..., : logits.shape[-1]] - logits).abs()[mask.bool()].max() <= TOL


def test_bad_bases_raise_value_errors(tmp_path, make_base, tiny_tok):
    missing = tmp_path / "no" / "such" / "folder"
    with pytest.raises(ValueError, match="does not exist"):
        CauchyLMForCausalLM.from_base(str(missing))
    tiny_tok.save_pretrained(tmp_path / "only_tokenizer")
    with pytest.raises(ValueError, match="AutoModelForCausalLM"):
        CauchyLMForCausalLM.from_base(tmp_path / "only_tokenizer")
    base = make_base()
    with pytest.raises(ValueError, match="language-model head"):
        CauchyLMForCausalLM.from_base(base.base_model)  # a bare decoder (Qwen2Model)
    with pytest.raises(ValueError, match="PreTrainedModel"):
        CauchyLMForCausalLM.from_base(nn.Linear(2, 2))
    model = CauchyLMForCausalLM.from_base(copy.deepcopy(base), tiny_tok)
    with pytest.raises(ValueError, match="already a causal model"):
        CauchyLMForCausalLM.from_base(model)
    with pytest.raises(ValueError, match="unknown settings"):
        CauchyLMForCausalLM.from_base(base, tiny_tok, gama_init=3.0)
    with pytest.raises(ValueError, match="does not exist"):
        CauchyLMForCausalLM.from_base(base, str(tmp_path / "x" / "y" / "tok"))
