"""``import cauchylin_hf`` imports neither torch nor transformers, and the Auto classes still know
the model.

Each check runs in a fresh interpreter (``sys.modules`` of this one holds both libraries already):

* ``import cauchylin_hf`` loads no torch and no transformers; afterwards ``AutoConfig``,
  ``AutoModelForCausalLM`` and ``AutoModel`` load a saved causal model as its classes, whether
  transformers' Auto classes were imported after the package or before it;
* a submodule named like a public function (``cauchylin_hf.verify``) does not replace the
  function on the package when it is imported.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from cauchylin_hf import CauchyLMForCausalLM
from cauchylin_hf.testing import tiny_base_model


def _python(*parts: str, args: tuple[str, ...] = ()) -> str:
    """Run the code of ``parts`` (each dedented) in a fresh interpreter; its output."""
    code = "".join(textwrap.dedent(part) for part in parts)
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def saved_model(tiny_tok, tmp_path_factory):
    folder = tmp_path_factory.mktemp("causal")
    CauchyLMForCausalLM.from_base(tiny_base_model("qwen2", spare_rows=2), tiny_tok).save_pretrained(
        folder
    )
    return folder


_LOADS = """
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path)
    assert type(config) is cauchylin_hf.CauchyLMConfig, type(config)
    for auto in (AutoModelForCausalLM, AutoModel):
        model = auto.from_pretrained(path)
        assert type(model) is cauchylin_hf.CauchyLMForCausalLM, (auto, type(model))
    print("loaded")
"""


def test_the_package_imports_without_torch_and_registers_when_transformers_is_imported(
    saved_model,
):
    first = """
        import sys

        path = sys.argv[1]
        import cauchylin_hf

        heavy = sorted({"torch", "transformers", "numpy"} & set(sys.modules))
        assert not heavy, f"import cauchylin_hf imported {heavy}"
    """
    assert _python(first, _LOADS, args=(str(saved_model),)) == "loaded\n"


def test_auto_classes_imported_first_still_load_the_model(saved_model):
    first = """
        import sys

        path = sys.argv[1]
        from transformers import AutoModelForCausalLM  # before the package
        import cauchylin_hf
    """
    assert _python(first, _LOADS, args=(str(saved_model),)) == "loaded\n"


def test_a_submodule_does_not_replace_the_function_of_its_name():
    code = """
        import cauchylin_hf.verify as first  # the submodule imported before the name is read
        import sys

        import cauchylin_hf

        module = sys.modules["cauchylin_hf.verify"]
        assert cauchylin_hf.verify is module.verify, cauchylin_hf.verify
        assert first is module.verify  # `import a.b as c` reads the package's attribute
        from cauchylin_hf import verify, VerifyReport

        assert verify is module.verify and VerifyReport is module.VerifyReport
        print("ok")
    """
    assert _python(code) == "ok\n"
