"""The adapter follows the running transformers release's name of the KV cache.

transformers 5.24 renamed ``past_key_values`` to ``cache`` in every model ``forward``, every
``ModelOutput`` and in what ``generate()`` passes and reads back. The release's own name is read
here off transformers' own Qwen2 decoder (not off :mod:`cauchylin_hf.hf_compat`), so these tests
fail if the output class or ``forward`` stop accepting what the installed release uses.
"""

from __future__ import annotations

import inspect

import pytest
import torch
from cauchylin_hf.model import CauchyLMForCausalLM
from cauchylin_hf.outputs import CauchyLMOutput
from cauchylin_hf.testing import tiny_base_model
from transformers import DynamicCache, Qwen2Model

VOCAB = 300
NUM = VOCAB

RELEASE_CACHE_NAME = (
    "cache" if "cache" in inspect.signature(Qwen2Model.forward).parameters else "past_key_values"
)


@pytest.fixture(scope="module")
def model():
    base = tiny_base_model("qwen2", vocab_size=VOCAB, spare_rows=1)
    return CauchyLMForCausalLM.from_base(base, num_token_id=NUM).eval()


def test_the_output_takes_the_release_cache_name():
    cache = DynamicCache()
    out = CauchyLMOutput(loss=torch.tensor(1.0), **{RELEASE_CACHE_NAME: cache})
    assert out[RELEASE_CACHE_NAME] is cache
    assert out.cache is cache
    # transformers' generate reads the cache back by this key.
    assert RELEASE_CACHE_NAME in out


@pytest.mark.parametrize("name", ["cache", "past_key_values"])
def test_forward_and_encode_accept_both_names(model, name):
    ids = torch.tensor([[5, 6, NUM, 8, 9]])
    values = torch.zeros(ids.shape)
    values[0, 2] = 12.5
    full = model(ids, numeric_values=values)
    first = model(ids[:, :3], numeric_values=values[:, :3], use_cache=True)
    assert first[RELEASE_CACHE_NAME] is first.cache
    assert first.cache.get_seq_length() == 3
    step = model(ids[:, 3:4], numeric_values=values[:, 3:4], use_cache=True, **{name: first.cache})
    torch.testing.assert_close(step.loc_S[:, 0], full.loc_S[:, 3], rtol=1e-5, atol=1e-5)
    hidden, cache = model.encode(ids[:, 4:5], values[:, 4:5], use_cache=True, **{name: step.cache})
    assert cache.get_seq_length() == 5
    torch.testing.assert_close(model.heads(hidden)[1].loc_Y[:, 0], full.loc_Y[:, 4])


def test_both_names_at_once_are_refused(model):
    ids = torch.tensor([[5, 6]])
    with pytest.raises(ValueError, match="cache or as past_key_values, not both"):
        model(ids, cache=DynamicCache(), past_key_values=DynamicCache(), use_cache=True)


def test_transformers_generate_uses_the_cache(model):
    """Compatible mode through transformers' own ``generate``: cached steps equal uncached ones."""
    ids = torch.tensor([[5, 6, NUM, 8], [9, 10, 11, 12]])
    values = torch.zeros(ids.shape)
    values[0, 2] = 4.0
    kw = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": 0, "numeric_values": values}
    cached = model.generate(ids, use_cache=True, return_dict_in_generate=True, **kw)
    uncached = model.generate(ids, use_cache=False, **kw)
    assert torch.equal(cached.sequences, uncached)
    # The cache generate handed back holds every position but the last token's.
    cache = cached[RELEASE_CACHE_NAME]
    assert cache.get_seq_length() == cached.sequences.shape[1] - 1
