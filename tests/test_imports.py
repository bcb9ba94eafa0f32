"""The import graph of the whole tree: no cycle, no private name used across modules.

A small ``ast`` walk over every ``.py`` file of ``cauchylin/`` and ``adapters/cauchylin_hf/``, and
the console script ``adapters/cauchylin_lm.py`` (the top-level module ``cauchylin_lm``):

* an edge ``a -> b`` for every import of module ``b`` by module ``a``, at module level or inside
  a function (a function-level import still runs ``b`` while ``a`` is in use);
  ``from pkg import name`` is an edge to the submodule ``pkg.name`` when there is one, else to
  ``pkg`` itself (its ``__init__`` defines or re-exports ``name``). Imports under
  ``if TYPE_CHECKING:`` never run and are left out;
* no cycle may exist in that graph (a package ``__init__`` importing its submodules included);
* no module imports a private name (``_name``) from another module of the packages, or reads
  one as an attribute of an imported module (``module._name``). Private *modules*
  (``cauchylin._special``) may be imported; their public names may be used;
* no module imports a name that the other module does not export: where a module of the
  packages declares ``__all__``, ``from module import name`` and ``module.name`` use only names
  it lists (a public name left out of ``__all__`` is an implementation detail, not API).

The checker itself is tested on planted cycles and private imports, so it can fail.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"cauchylin": ROOT / "cauchylin", "cauchylin_hf": ROOT / "adapters" / "cauchylin_hf"}
SCRIPTS = {"cauchylin_lm": ROOT / "adapters" / "cauchylin_lm.py"}
"""Top-level modules outside the packages (the console script), read like the packages' modules."""


@dataclass
class ImportGraph:
    """Edges between the packages' modules and the private names used across them."""

    edges: dict[str, set[str]] = field(default_factory=dict)
    private: list[str] = field(default_factory=list)
    unexported: list[str] = field(default_factory=list)


def _exports(tree: ast.Module) -> set[str] | None:
    """The names a module lists in a literal ``__all__``, or None without one."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return set(ast.literal_eval(node.value))
    return None


def module_files() -> dict[str, Path]:
    """``{dotted module name: file}`` for every module of both packages and the console script."""
    found = dict(SCRIPTS)
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.AST):
    """Every node that can run, skipping the bodies of ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name of ``from <level dots><target> import ...`` written in ``module``."""
    if level == 0:
        return target or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


def analyse(sources: dict[str, tuple[str, bool]]) -> ImportGraph:
    """The import graph of ``{module: (source text, is a package __init__)}``."""
    known = set(sources)
    graph = ImportGraph(edges={name: set() for name in sources})
    trees = {module: ast.parse(text) for module, (text, _) in sources.items()}
    exports = {module: _exports(tree) for module, tree in trees.items()}

    def unexported(name: str, source: str) -> bool:
        listed = exports.get(source)
        return listed is not None and not name.startswith("_") and name not in listed

    for module, (_, is_package) in sources.items():
        tree = trees[module]
        aliases: dict[str, str] = {}  # local name -> project module it is bound to
        nodes = list(_runtime_nodes(tree))
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    prefixes = [".".join(parts[: i + 1]) for i in range(len(parts))]
                    hits = [p for p in prefixes if p in known]
                    if hits:
                        graph.edges[module].add(hits[-1])
                        aliases[alias.asname or parts[0]] = hits[-1] if alias.asname else parts[0]
            elif isinstance(node, ast.ImportFrom):
                source = _resolve(module, is_package, node.level, node.module)
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    if sub in known:
                        graph.edges[module].add(sub)
                        aliases[alias.asname or alias.name] = sub
                    elif source in known:
                        graph.edges[module].add(source)
                        if alias.name.startswith("_") and not alias.name.startswith("__"):
                            graph.private.append(
                                f"{module}:{node.lineno} imports {alias.name} from {source}"
                            )
                        elif source != module and unexported(alias.name, source):
                            graph.unexported.append(
                                f"{module}:{node.lineno} imports {alias.name}, which {source} "
                                "does not export"
                            )
        for node in nodes:
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and f"{aliases[node.value.id]}.{node.attr}" not in known
                and aliases[node.value.id] != module
            ):
                graph.private.append(
                    f"{module}:{node.lineno} reads {node.attr} of {aliases[node.value.id]}"
                )
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and aliases[node.value.id] != module
                and f"{aliases[node.value.id]}.{node.attr}" not in known
                and unexported(node.attr, aliases[node.value.id])
            ):
                graph.unexported.append(
                    f"{module}:{node.lineno} reads {node.attr}, which "
                    f"{aliases[node.value.id]} does not export"
                )
        graph.edges[module].discard(module)
    graph.private.sort()
    graph.unexported.sort()
    return graph


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def project_graph() -> ImportGraph:
    files = module_files()
    return analyse(
        {
            name: (path.read_text(encoding="utf-8"), path.name == "__init__.py")
            for name, path in files.items()
        }
    )


# --------------------------------------------------------------------------------------------
# The packages


def test_the_walk_sees_both_packages_and_the_console_script():
    graph = project_graph()
    assert {"cauchylin.nn.action", "cauchylin_hf.model", "cauchylin_hf.app.cli"} <= set(graph.edges)
    assert "cauchylin_hf.app.cli" in graph.edges["cauchylin_lm"]  # imported inside main
    assert "cauchylin.nn.modes" in graph.edges["cauchylin.nn.action"]
    assert "cauchylin_hf.heads_io" in graph.edges["cauchylin_hf.model"]


def test_no_import_cycle():
    found = cycles(project_graph().edges)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_private_name_crosses_a_module():
    private = project_graph().private
    assert not private, "private names used across modules:\n" + "\n".join(private)


def test_no_module_uses_a_name_another_does_not_export():
    unexported = project_graph().unexported
    assert not unexported, "names used that their module does not export:\n" + "\n".join(unexported)


def test_the_core_never_imports_the_adapter_or_optional_libraries():
    files = module_files()
    for name, path in files.items():
        if not name.startswith("cauchylin."):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in _runtime_nodes(tree):
            if isinstance(node, ast.Import):
                roots = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                roots = [node.module.split(".")[0]]
            else:
                continue
            assert not {"cauchylin_hf", "transformers"} & set(roots), f"{name}:{node.lineno}"


# --------------------------------------------------------------------------------------------
# The checker can fail


def _planted(**modules: str) -> dict[str, tuple[str, bool]]:
    return {
        name.replace("__", "."): (textwrap.dedent(text), name.endswith("pkg"))
        for name, text in modules.items()
    }


def test_the_checker_finds_a_function_level_cycle():
    graph = analyse(
        _planted(
            pkg="",
            pkg__a="from pkg.b import f\n",
            pkg__b="def f():\n    from pkg import a\n    return a\n",
            pkg__c="from pkg import a\n",
        )
    )
    assert cycles(graph.edges) == [["pkg.a", "pkg.b"]]


def test_the_checker_finds_a_cycle_through_a_package_init():
    graph = analyse(_planted(pkg="from .a import X\n", pkg__a="from pkg import Y\nX = Y\n"))
    assert cycles(graph.edges) == [["pkg", "pkg.a"]]


def test_the_checker_ignores_type_checking_imports():
    graph = analyse(
        _planted(
            pkg="",
            pkg__a="from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n",
            pkg__b="from pkg.a import A\n",
        )
    )
    assert cycles(graph.edges) == []


def test_the_checker_finds_private_names():
    graph = analyse(
        _planted(
            pkg="",
            pkg___impl="def public():\n    pass\n\ndef _hidden():\n    pass\n",
            pkg__a="from pkg._impl import public, _hidden\n",
            pkg__b="from pkg import _impl\n_impl.public()\n_impl._hidden()\n",
            pkg__c="from ._impl import public\n",
        )
    )
    assert graph.private == [
        "pkg.a:1 imports _hidden from pkg._impl",
        "pkg.b:3 reads _hidden of pkg._impl",
    ]


def test_the_checker_finds_names_a_module_does_not_export():
    graph = analyse(
        _planted(
            pkg="",
            pkg__modes='__all__ = ["CAUSAL"]\nCAUSAL = 1\nhelper = 2\n',
            pkg__free="helper = 3\n",
            pkg__a="from pkg.modes import CAUSAL, helper\nfrom pkg.free import helper as h\n",
            pkg__b="from pkg import modes\nmodes.CAUSAL\nmodes.helper\n",
        )
    )
    assert graph.unexported == [
        "pkg.a:1 imports helper, which pkg.modes does not export",
        "pkg.b:3 reads helper, which pkg.modes does not export",
    ]
