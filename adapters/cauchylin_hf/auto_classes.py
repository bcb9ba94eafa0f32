"""The model in transformers' Auto classes, registered when those are imported.

:mod:`cauchylin_hf.config` registers :class:`~cauchylin_hf.CauchyLMConfig` with ``AutoConfig``, and
:mod:`cauchylin_hf.model` registers :class:`~cauchylin_hf.CauchyLMForCausalLM` with
``AutoModelForCausalLM`` and ``AutoModel``, where each class is defined. ``import cauchylin_hf``
imports neither module (both import torch and transformers); :func:`register_on_import` has them
imported with the Auto class that needs them: at once where transformers already imported it,
else as soon as the import that brought it in has finished (the modules of ours and of
transformers under way at that moment included). Either way ``AutoModelForCausalLM.from_pretrained``
knows ``model_type="cauchy_lm"`` in a program that imported :mod:`cauchylin_hf`, whichever of
the two it imported first.

Standard library only.
"""

from __future__ import annotations

import importlib
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # plain classes below: the import system only calls their methods
    from collections.abc import Sequence
    from importlib.abc import Loader
    from importlib.machinery import ModuleSpec
    from types import ModuleType

__all__ = ["AFTER", "register_on_import"]

AFTER = {
    "transformers.models.auto.configuration_auto": "cauchylin_hf.config",
    "transformers.models.auto.modeling_auto": "cauchylin_hf.model",
}
"""``{transformers' module of Auto classes: the module of ours that registers with them}``."""

_WATCHED = ("cauchylin_hf.", "transformers.")
"""The modules whose import can be under way when an Auto module is imported: ours are imported
only once none of these is (a module of ours imported while one that it imports is half-run
would fail)."""


class _Follow:
    """A module's own loader, followed by the imports of ours that became due."""

    def __init__(self, loader: Loader, watch: _Watch) -> None:
        self._loader = loader
        self._watch = watch

    def __getattr__(self, name: str) -> object:
        # everything else the import system or a tool asks of a loader (``get_code`` for
        # ``python -m``, ``get_source``, ``is_package``, ``get_resource_reader``, ...) is the
        # module's own loader's answer
        return getattr(self._loader, name)

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # the module keeps its own loader, as if this one had never been there
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        with self._watch.running:
            self._watch.active += 1
        try:
            self._loader.exec_module(module)
        finally:
            with self._watch.running:
                self._watch.active -= 1
        self._watch.flush()


class _Watch:
    """A finder that finds nothing itself: the specs of our modules and of transformers', found
    by the other finders, get a loader that counts the imports under way; once none is, the
    modules of ours whose Auto module was imported are imported. It leaves ``sys.meta_path``
    when all of them were."""

    def __init__(self, pending: dict[str, str]) -> None:
        self.pending = pending
        self.active = 0
        self.running = threading.Lock()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if not fullname.startswith(_WATCHED):
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = None if finder is self or find is None else find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and spec.has_location:
            spec.loader = _Follow(spec.loader, self)
        return spec

    def flush(self) -> None:
        if self.active:
            return
        for watched, ours in list(self.pending.items()):
            if watched in sys.modules and self.pending.pop(watched, None) is not None:
                importlib.import_module(ours)
        if not self.pending and self in sys.meta_path:
            sys.meta_path.remove(self)


def register_on_import() -> None:
    """Have the Auto classes know the model: import the modules of ours that register with the
    Auto classes already imported, and watch for the import of the others.

    Running it again watches nothing twice.

    Example:
        >>> import cauchylin_hf  # runs it
        >>> from transformers import CONFIG_MAPPING
        >>> CONFIG_MAPPING["cauchy_lm"].__name__
        'CauchyLMConfig'
    """
    pending = {}
    for watched, ours in AFTER.items():
        if watched in sys.modules:
            importlib.import_module(ours)
        else:
            pending[watched] = ours
    if pending and not any(isinstance(finder, _Watch) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Watch(pending))
