"""What the tests of the training probes share: loading a script of ``benchmarks/`` as a module,
a tiny causal model, and a small table of three fields and a rare fourth."""

import importlib
import random
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """Import ``benchmarks/<name>.py`` (the folder is on ``sys.path`` only while it imports)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))


def field_texts() -> list[str]:
    """60 rows of ``width, span, area`` (each field 60 numbers) and, in every twelfth, a rare
    ``note`` field (5 numbers: fewer than a readout or a field head needs)."""
    rng = random.Random(0)
    texts = []
    for i in range(60):
        w = rng.randint(2, 60)
        rare = f"note {rng.randint(1, 9)}, " if i % 12 == 0 else ""
        texts.append(f"{rare}width {w}, span {rng.randint(1, 9)}, area {w * rng.randint(2, 4)}.")
    return texts


def tiny_model():
    """``(model, numeric tokenizer)``: the package's tiny qwen2 causal model, initialised from
    seed 0 (the same weights at every call)."""
    import torch
    from cauchylin_hf.model import CauchyLMForCausalLM
    from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer

    torch.manual_seed(0)
    return CauchyLMForCausalLM.from_base(
        tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True
    )
