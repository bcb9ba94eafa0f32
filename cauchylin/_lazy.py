"""Packages whose public names are imported on first use (PEP 562).

``import cauchylin`` or ``import cauchylin_hf`` runs only the package's ``__init__``, which
imports no submodule: each public name is imported from its submodule when it is first read
(``cauchylin_hf.CauchyLMConfig``, ``from cauchylin import CauchyVector``). A submodule that
needs no torch (``cauchylin.nn.mode_names``, the console script's checks) is therefore imported
under its own name, without torch, transformers or Pyro; the type checker reads the names from
the ``if TYPE_CHECKING:`` imports of each ``__init__``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import Any

__all__ = ["lazy_package"]


class _LazyPackage(ModuleType):
    """A package whose public names stay what it exports: importing a submodule that has the
    name of an exported function (``cauchylin_hf.verify``) does not bind the submodule there."""

    def __setattr__(self, name: str, value: Any) -> None:
        if (
            isinstance(value, ModuleType)
            and value.__name__ == f"{self.__name__}.{name}"
            and name in self.__dict__.get("__lazy_attributes__", ())
        ):
            return  # the import system binding the submodule; the name is read from it
        super().__setattr__(name, value)


def lazy_package(
    name: str, attributes: Mapping[str, str], submodules: Iterable[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of package ``name``.

    Args:
        name: the package (its ``__name__``).
        attributes: ``{public name: submodule}``: the name is read from that submodule (relative
            to the package) when first used, then kept in the package.
        submodules: submodules that are public names themselves (``cauchylin.losses``), listed
            by ``dir()``; every submodule is imported when first read as an attribute.

    Returns:
        ``(__getattr__, __dir__)``, to be bound to those names in the package's ``__init__``;
        an unknown name raises :class:`AttributeError` as for any module.

    Example:
        >>> import cauchylin
        >>> cauchylin.CauchyVector.__module__
        'cauchylin.vector'
    """
    package = sys.modules[name]
    modules = tuple(submodules)
    package.__dict__["__lazy_attributes__"] = frozenset(attributes)
    package.__class__ = _LazyPackage

    def __getattr__(attr: str) -> Any:
        source = attributes.get(attr)
        if source is not None:
            value = getattr(importlib.import_module(f"{name}.{source}"), attr)
            package.__dict__[attr] = value
            return value
        if not attr.startswith("__"):
            # a submodule is an attribute of its package once imported, as with an eager
            # ``__init__`` (``cauchylin.nn.modes`` after ``import cauchylin``)
            try:
                return importlib.import_module(f"{name}.{attr}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{name}.{attr}":
                    raise
        raise AttributeError(f"module {name!r} has no attribute {attr!r}")

    def __dir__() -> list[str]:
        return sorted(set(package.__dict__) | set(attributes) | set(modules))

    return __getattr__, __dir__
