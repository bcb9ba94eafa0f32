"""``import cauchylin_hf`` imports neither torch nor transformers, and the Auto classes still know
the model.

Each check runs in a fresh interpreter (``sys.modules`` of this one holds both libraries already):

* ``import cauchylin_hf`` loads no torch and no transformers; afterwards ``AutoConfig``,
  ``AutoModelForCausalLM`` and ``AutoModel`` load a saved causal model as its classes, whether
  transformers' Auto classes were imported after the package or before it;
* a submodule named like a public function (``cauchylin_hf.verify``) does not replace the
  function on the package when it is imported;
* the console script's path before torch (``--help``, a mistyped option, the checks that need no
  model) imports neither torch nor transformers, and every module of the project it loads is
  loaded once, under its own name (the same file under two names would run twice).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cauchylin_hf import CauchyLMForCausalLM
from cauchylin_hf.testing import tiny_base_model

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"cauchylin": ROOT / "cauchylin", "cauchylin_hf": ROOT / "adapters" / "cauchylin_hf"}


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


def test_a_submodule_does_not_replace_the_function_of_its_name_and_is_an_attribute():
    code = """
        import cauchylin_hf.verify as first  # the submodule imported before the name is read
        import sys

        import cauchylin_hf

        module = sys.modules["cauchylin_hf.verify"]
        assert cauchylin_hf.verify is module.verify, cauchylin_hf.verify
        assert first is module.verify  # `import a.b as c` reads the package's attribute
        from cauchylin_hf import verify, VerifyReport

        assert verify is module.verify and VerifyReport is module.VerifyReport
        import cauchylin

        # a submodule is an attribute once read, as when the __init__ imported it
        assert cauchylin.nn.modes.MODES is sys.modules["cauchylin.nn.modes"].MODES
        assert cauchylin_hf.heads_io is sys.modules["cauchylin_hf.heads_io"]
        assert not hasattr(cauchylin, "no_such_name")
        print("ok")
    """
    assert _python(code) == "ok\n"


_BEFORE_TORCH = """
    import contextlib, io, json, os, sys

    from cauchylin_lm import main

    runs = []
    for argv in json.loads(sys.argv[1]):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                status = main(argv)
            except SystemExit as exc:
                status = exc.code
        runs.append([status, err.getvalue()])
    heavy = sorted({"torch", "transformers"} & set(sys.modules))
    import cauchylin_hf.app.checks  # what the command imports next, once the checks passed

    names = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path:
            names.setdefault(os.path.realpath(path), []).append(name)
    print(json.dumps({"runs": runs, "heavy": heavy, "names": names}))
"""


def _module_name(path: Path) -> str | None:
    """The dotted name of a file of the packages (None outside them)."""
    for package, folder in PACKAGES.items():
        if path.is_relative_to(folder.resolve()):
            parts = list(path.relative_to(folder.resolve()).with_suffix("").parts)
            return ".".join(
                [package, *parts[:-1]] if parts[-1] == "__init__" else [package, *parts]
            )
    return None


def test_the_checks_before_torch_load_each_module_once_under_its_name(tmp_path):
    argvs = [
        ["--help"],
        ["generate", "--help"],  # lists the inference modes
        ["generate", "model", "--prompt", "x", "--mode", "nonsense"],
        ["train", "--from-config", "qwen2-tiny", "--data", "t.csv", "--max-steps", "0"],
        ["train", "--from-config", "qwen2-tiny", "--data", str(tmp_path / "missing.csv")],
        ["predict", str(tmp_path / "no_model"), "--prompt", "x"],
    ]
    found = json.loads(_python(_BEFORE_TORCH, args=(json.dumps(argvs),)))
    statuses = [status for status, _ in found["runs"]]
    assert statuses == [0, 0, 2, 2, 2, 2], found["runs"]
    assert "dataset file not found" in found["runs"][4][1]  # the checks ran
    assert "model folder not found" in found["runs"][5][1]
    assert found["heavy"] == [], f"the checks before torch imported {found['heavy']}"
    loaded = 0
    for path, names in found["names"].items():
        expected = _module_name(Path(path))
        if expected is not None:
            loaded += 1
            assert names == [expected], f"{path} is loaded as {names}"
    assert loaded >= 8  # the checks and the modules they import were seen


def test_a_module_imported_while_the_auto_classes_are_watched_keeps_its_loaders_answers():
    # until transformers' Auto modules are imported, the modules of the package and of
    # transformers are imported through a watching loader: what tools ask of a loader
    # (runpy's get_code for ``python -m``, inspect's source, is_package) must still be answered
    out = _python(
        """
        import importlib.util, inspect, sys
        import cauchylin_hf
        assert "transformers.models.auto.modeling_auto" not in sys.modules
        spec = importlib.util.find_spec("cauchylin_hf.numbers")
        assert spec.loader.get_code("cauchylin_hf.numbers") is not None
        assert spec.loader.is_package("cauchylin_hf.numbers") is False
        import cauchylin_hf.numbers as numbers
        print(len(inspect.getsource(numbers)) > 0)
        """
    )
    assert out.split() == ["True"]
    proc = subprocess.run(
        [sys.executable, "-m", "cauchylin_hf.app.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stdout.startswith("usage: cauchylin-lm"), proc.stderr[
        -2000:
    ]
