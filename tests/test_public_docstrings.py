"""Every public name of both packages carries a complete docstring, and its examples run.

"Public" means a name in a module's ``__all__``, and the public methods and properties that a
public class defines itself. The docstrings follow the Google style that mkdocstrings renders:

* a one-line summary (every public name);
* ``Args:`` naming every parameter (functions, methods, and a class's ``__init__``; a NamedTuple
  or dataclass lists the fields it declares under ``Attributes:`` or ``Args:``);
* ``Returns:`` (or ``Yields:``) for a function or method that returns a value;
* ``Raises:`` naming every exception class that the function raises itself, and present
  whenever it calls one of the project's argument checks (``check_*``, ``_require_*``);
* ``Example:`` with runnable ``>>>`` lines, for every name in ``__all__`` and every public method
  that is new API. A method that overrides a framework method (a torch ``Module``, a Pyro
  ``Distribution``, a transformers ``PreTrainedModel``/``TrainerCallback``) keeps that
  framework's documented contract and is shown in its class's example instead.

The formula, where there is one, is checked by review, not here. Every ``>>>`` example in the
packages runs as a doctest below, so the examples cannot rot.
"""

from __future__ import annotations

import ast
import dataclasses
import doctest
import importlib
import inspect
import re
import textwrap
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

MODULES = [
    "cauchylin",
    "cauchylin.vector",
    "cauchylin.distributions",
    "cauchylin.nn",
    "cauchylin.nn.embedding",
    "cauchylin.nn.abduction",
    "cauchylin.nn.mode_names",
    "cauchylin.nn.modes",
    "cauchylin.nn.action",
    "cauchylin.losses",
    "cauchylin.metrics",
    "cauchylin.value_space",
    "cauchylin.estimators",
    "cauchylin.estimators.regressor",
    "cauchylin.estimators.classifier",
    "cauchylin_hf",
    "cauchylin_hf.config",
    "cauchylin_hf.model",
    "cauchylin_hf.features",
    "cauchylin_hf.heads",
    "cauchylin_hf.readout_context",
    "cauchylin_hf.outputs",
    "cauchylin_hf.loss",
    "cauchylin_hf.heads_io",
    "cauchylin_hf.attach",
    "cauchylin_hf.save_and_load",
    "cauchylin_hf.verify",
    "cauchylin_hf.tokenizer",
    "cauchylin_hf.numbers",
    "cauchylin_hf.encoding",
    "cauchylin_hf.batch",
    "cauchylin_hf.data.textfile",
    "cauchylin_hf.data.table",
    "cauchylin_hf.data.template",
    "cauchylin_hf.data.sampling",
    "cauchylin_hf.data.arrow",
    "cauchylin_hf.data.table_stream",
    "cauchylin_hf.data.files",
    "cauchylin_hf.data.dataset",
    "cauchylin_hf.data.collator",
    "cauchylin_hf.data.streaming",
    "cauchylin_hf.training",
    "cauchylin_hf.evaluation",
    "cauchylin_hf.generation",
    "cauchylin_hf.testing",
    "cauchylin_hf.predict",
    "cauchylin_hf.precision",
    "cauchylin_hf.atomic_save",
    "cauchylin_hf.hf_compat",
    "cauchylin_hf.auto_classes",
    "cauchylin_hf.sharding",
    "cauchylin_hf.app.checks",
    "cauchylin_hf.app.inputs",
    "cauchylin_hf.app.reports",
    "cauchylin_hf.app.cli",
    "cauchylin_hf.app.demo",
    "cauchylin_hf.app.corpus",
    "cauchylin_hf.app.compare",
    "cauchylin_hf.app.scratch",
    "cauchylin_hf.app.parser",
    "cauchylin_hf.app.console",
    "cauchylin_lm",
]

SECTION = re.compile(r"^(\w[\w ]*):\s*$", re.M)
IGNORED_PARAMETERS = {"self", "cls"}


def _public_objects(module_name):
    """Yield ``(qualified name, object, owner class or None)`` for the module's public names."""
    module = importlib.import_module(module_name)
    assert hasattr(module, "__all__"), f"{module_name} has no deliberate public API (__all__)"
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.ismodule(obj) or not (inspect.isclass(obj) or callable(obj)):
            continue
        # Re-exports are checked in the module that defines them.
        defined_in = getattr(obj, "__module__", module_name)
        if defined_in != module_name and defined_in in MODULES:
            continue
        yield f"{module_name}.{name}", obj, None
        if inspect.isclass(obj):
            for attr, value in vars(obj).items():
                if attr.startswith("_"):
                    continue
                if isinstance(value, (staticmethod, classmethod)):
                    value = value.__func__
                if inspect.isclass(value):
                    continue  # class attributes such as ``config_class`` are documented where defined
                if callable(value) or isinstance(value, property):
                    yield f"{module_name}.{name}.{attr}", value, obj


def _all_public():
    return [item for module_name in MODULES for item in _public_objects(module_name)]


def _sections(doc: str) -> dict[str, str]:
    """Split a Google-style docstring into ``{section title: body}``."""
    found = {}
    matches = list(SECTION.finditer(doc))
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(doc)
        found[match.group(1)] = doc[match.end() : end]
    return found


def _function_of(obj):
    if isinstance(obj, property):
        return obj.fget
    return obj


def _function_ast(func):
    try:
        source = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError):
        return None
    tree = ast.parse(source)
    node = tree.body[0]
    return node if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def _own_nodes(func_node):
    """The nodes of a function body, not descending into nested functions or classes."""
    stack = list(func_node.body)
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
            ):
                stack.append(child)


def _returns_value(func_node) -> bool:
    for node in _own_nodes(func_node):
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if isinstance(node, ast.Return) and node.value is not None:
            if not (isinstance(node.value, ast.Constant) and node.value.value is None):
                return True
    return False


def _raised_names(func_node) -> set[str]:
    names = set()
    for node in _own_nodes(func_node):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id[:1].isupper():
                names.add(exc.id)
            elif isinstance(exc, ast.Attribute):
                names.add(exc.attr)
    return names


VALIDATOR = re.compile(r"^_?(check|require|validate)_")


def _calls_validator(func_node) -> bool:
    """Whether the function calls one of the project's argument checks (``check_*``,
    ``_require_*``, ...), which raise ``ValueError``/``TypeError`` naming the argument."""
    for node in _own_nodes(func_node):
        if isinstance(node, ast.Call):
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else getattr(fn, "attr", "")
            if VALIDATOR.match(name):
                return True
    return False


def _parameters(func) -> list[str]:
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return []
    return [
        name
        for name, parameter in signature.parameters.items()
        if name not in IGNORED_PARAMETERS
        and not name.startswith("_")
        and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
    ]


def _is_record(cls) -> bool:
    """A NamedTuple or dataclass: its fields are documented as ``Attributes:``."""
    return dataclasses.is_dataclass(cls) or (issubclass(cls, tuple) and hasattr(cls, "_fields"))


def _record_fields(cls) -> list[str]:
    """The fields the record declares itself (inherited ones are documented by the base)."""
    if dataclasses.is_dataclass(cls):
        own = vars(cls).get("__annotations__", {})
        return [f.name for f in dataclasses.fields(cls) if f.name in own]
    return list(cls._fields)


def _overrides_framework(owner, attr: str) -> bool:
    """Whether ``owner.attr`` overrides a method of a base class outside this project."""
    for base in owner.__mro__[1:]:
        module = getattr(base, "__module__", "") or ""
        if attr in vars(base) and not module.startswith(("cauchylin", "tests")):
            return True
    return False


def _mentions(section: str, name: str) -> bool:
    return re.search(rf"(^|\s|`){re.escape(name)}(\b|`)", section) is not None


def _problems(qualname, obj, owner) -> list[str]:
    doc = inspect.getdoc(obj) or ""
    summary = doc.strip().splitlines()[0] if doc.strip() else ""
    if len(summary) < 10:
        return [f"{qualname}: no one-line summary"]
    sections = _sections(doc)
    problems = []
    is_class = inspect.isclass(obj)

    if is_class and _is_record(obj):
        documented = sections.get("Attributes", "") + sections.get("Args", "")
        missing = [f for f in _record_fields(obj) if not _mentions(documented, f)]
        if missing:
            problems.append(f"{qualname}: fields missing from Attributes: {missing}")
        node = _function_ast(obj.__init__) if "__init__" in vars(obj) else None
        if node is not None:
            missing = sorted(
                n for n in _raised_names(node) if not _mentions(sections.get("Raises", ""), n)
            )
            if missing:
                problems.append(f"{qualname}: raises {missing} without saying so under Raises")
    elif not isinstance(obj, property):
        func = obj.__init__ if is_class else obj
        if not is_class or "__init__" in vars(obj):
            params = _parameters(func)
            documented = sections.get("Args", "")
            missing = [p for p in params if not _mentions(documented, p)]
            if missing:
                problems.append(f"{qualname}: parameters missing from Args: {missing}")
        node = _function_ast(func) if (not is_class or "__init__" in vars(obj)) else None
        if node is not None:
            if (
                not is_class
                and _returns_value(node)
                and not ({"Returns", "Yields"} & set(sections))
            ):
                problems.append(f"{qualname}: returns a value but has no Returns section")
            raised = _raised_names(node)
            documented = sections.get("Raises", "")
            missing = sorted(name for name in raised if not _mentions(documented, name))
            if missing:
                problems.append(f"{qualname}: raises {missing} without saying so under Raises")
            if _calls_validator(node) and "Raises" not in sections:
                problems.append(f"{qualname}: checks its arguments but has no Raises section")

    needs_example = owner is None or (
        not isinstance(obj, property)
        and not _overrides_framework(owner, qualname.rsplit(".", 1)[1])
    )
    if needs_example and "Example" not in sections and "Examples" not in sections:
        problems.append(f"{qualname}: no Example section")
    return problems


@pytest.mark.parametrize("module_name", MODULES)
def test_public_names_have_complete_docstrings(module_name):
    problems = []
    for qualname, obj, owner in _public_objects(module_name):
        problems.extend(_problems(qualname, obj, owner))
    assert not problems, "incomplete docstrings:\n" + "\n".join(problems)


def test_the_checker_catches_missing_parts():
    """The checker itself fails a docstring that leaves each part out."""

    def bare(x, y):
        """Add two numbers together."""
        if x is None:
            raise ValueError("x is None")
        return x + y

    found = _problems("bare", bare, None)
    assert any("parameters missing from Args: ['x', 'y']" in p for p in found)
    assert any("no Returns section" in p for p in found)
    assert any("['ValueError']" in p for p in found)
    assert any("no Example section" in p for p in found)

    def complete(x, y):
        """Add two numbers together.

        Args:
            x: the first.
            y: the second.

        Returns:
            ``x + y``.

        Raises:
            ValueError: if ``x`` is None.

        Example:
            >>> complete(1, 2)
            3
        """
        if x is None:
            raise ValueError("x is None")
        return x + y

    assert _problems("complete", complete, None) == []

    def checked(x):
        """Return ``x`` after checking it.

        Args:
            x: a tensor.

        Returns:
            ``x``.

        Example:
            >>> checked(1)
            1
        """
        _require_positive(x)  # noqa: F821 (never called; only its source is read)
        return x

    assert _problems("checked", checked, None) == [
        "checked: checks its arguments but has no Raises section"
    ]


def _defining_modules() -> list[str]:
    """MODULES plus the private modules whose names they re-export (e.g. ``cauchylin._validation``):
    a doctest belongs to the module that defines the object."""
    found = set(MODULES)
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            defined_in = getattr(getattr(module, name), "__module__", None)
            if defined_in and defined_in.split(".")[0] in {"cauchylin", "cauchylin_hf"}:
                found.add(defined_in)
    return sorted(found)


@pytest.mark.parametrize("module_name", _defining_modules())
def test_docstring_examples_run(module_name):
    module = importlib.import_module(module_name)
    torch.manual_seed(0)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(module, module_name):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, (
        f"{result.failed} of {result.attempted} examples failed in {module_name}"
    )


# --------------------------------------------------------------------------------------------
# Links to the documentation

# A Markdown link whose target is a path (``](../modes.md)``, ``](concepts.md#x)``): it resolves
# only from a page at the right depth of the site, and nowhere in ``help()``. Docstrings link to
# the site's headings instead (``[Inference modes][inference-modes-page]``, resolved by
# mkdocs-autorefs wherever the docstring is rendered) or to a full ``https://`` address.
RELATIVE_LINK = re.compile(r"\]\((?!https?://|mailto:)[^)\s]+\)")
PACKAGE_FILES = [
    *sorted((ROOT / "cauchylin").rglob("*.py")),
    *sorted((ROOT / "adapters").rglob("*.py")),
]


def _docstrings(source: str):
    """``(line, docstring)`` for the module, every class and every function of ``source``."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield getattr(node, "lineno", 1), doc


def _relative_links(source: str) -> list[str]:
    return [
        f"line {line}: {match}"
        for line, doc in _docstrings(source)
        for match in RELATIVE_LINK.findall(doc)
    ]


def test_no_docstring_links_the_docs_by_a_relative_path():
    assert len(PACKAGE_FILES) > 40  # both packages were found
    found = [
        f"{path.relative_to(ROOT)} {hit}"
        for path in PACKAGE_FILES
        for hit in _relative_links(path.read_text(encoding="utf-8"))
    ]
    assert not found, "relative documentation links in docstrings:\n" + "\n".join(found)


def test_the_link_checker_finds_relative_links():
    source = textwrap.dedent(
        '''
        """See the [modes](../modes.md) page."""

        class A:
            """See [the loss](concepts.md#the-total-loss), [site][the-total-loss]."""

            def f(self):
                """[torch](https://pytorch.org/docs) and [a mail](mailto:x@y.z) are fine."""
        '''
    )
    assert _relative_links(source) == [
        "line 1: ](../modes.md)",
        "line 4: ](concepts.md#the-total-loss)",
    ]
