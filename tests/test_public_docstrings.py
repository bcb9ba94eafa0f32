"""Every public name of both packages carries a docstring with a one-line summary."""

import importlib
import inspect

import pytest

MODULES = [
    "cauchylin",
    "cauchylin.vector",
    "cauchylin.distributions",
    "cauchylin.nn",
    "cauchylin.losses",
    "cauchylin.metrics",
    "cauchylin_hf",
    "cauchylin_hf.config",
    "cauchylin_hf.model",
    "cauchylin_hf.heads_io",
    "cauchylin_hf.verify",
    "cauchylin_hf.tokenizer",
    "cauchylin_hf.numbers",
    "cauchylin_hf.corpus",
    "cauchylin_hf.data",
    "cauchylin_hf.training",
    "cauchylin_hf.generation",
    "cauchylin_hf.cli",
    "cauchylin_hf.demo",
    "cauchylin_hf.testing",
]


def _public_objects(module_name):
    module = importlib.import_module(module_name)
    assert hasattr(module, "__all__"), f"{module_name} has no deliberate public API (__all__)"
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.ismodule(obj) or not (inspect.isclass(obj) or callable(obj)):
            continue
        yield f"{module_name}.{name}", obj
        if inspect.isclass(obj):
            for attr, value in vars(obj).items():
                if not attr.startswith("_") and (callable(value) or isinstance(value, property)):
                    yield f"{module_name}.{name}.{attr}", value


@pytest.mark.parametrize("module_name", MODULES)
def test_public_names_have_a_summary(module_name):
    undocumented = []
    for qualname, obj in _public_objects(module_name):
        doc = inspect.getdoc(obj) or ""
        summary = doc.strip().splitlines()[0] if doc.strip() else ""
        if len(summary) < 10:
            undocumented.append(qualname)
    assert not undocumented, f"public names without a one-line summary: {undocumented}"
