"""FSDP2 sharding picks an available device: on a CUDA build without a GPU, the CPU (gloo).

``shard_model`` without a mesh builds one over the default process group on the device
:func:`cauchylin.available_device` picks. Before that, it took
``torch.accelerator.current_accelerator()``, which names CUDA on a CUDA build of torch without a
GPU: every FSDP run on such a machine failed ("Found no NVIDIA driver").
"""

from __future__ import annotations

import cauchylin_hf.sharding as sharding
import pytest
import torch
import torch.distributed as dist

from tests.cauchylin.test_device import simulate_cuda_build_without_gpu

VOCAB = 300


@pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()),
    reason="torch.distributed with gloo is not available",
)
def test_shard_model_on_a_cuda_build_without_a_gpu_uses_the_cpu(monkeypatch, make_base):
    from cauchylin_hf.model import CauchyLMForCausalLM

    simulate_cuda_build_without_gpu(monkeypatch)
    seen: list[str] = []
    real = sharding.init_device_mesh

    def spy(device_type, *args, **kwargs):
        seen.append(device_type)
        return real(device_type, *args, **kwargs)

    monkeypatch.setattr(sharding, "init_device_mesh", spy)
    model = CauchyLMForCausalLM.from_base(make_base("qwen2"), num_token_id=VOCAB - 1)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        expected = model(ids).loc_S
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        sharded = sharding.shard_model(model)
        with torch.no_grad():
            got = sharded(ids).loc_S
    finally:
        dist.destroy_process_group()
    assert seen == ["cpu"]
    torch.testing.assert_close(got, expected)
