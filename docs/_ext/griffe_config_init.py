"""Griffe extension: give ``PreTrainedConfig`` subclasses the ``__init__`` their fields make.

transformers turns every ``PreTrainedConfig`` subclass into a dataclass when the class is created,
so ``CauchyLMConfig`` writes no ``__init__``: its settings are annotated class attributes. Read
statically, griffe sees no signature, so the reference page would list every documented argument
as unknown and "required". This extension writes the signature the class really has: its own
fields as keyword-only parameters, with their annotations and the defaults of the imported class
(so a default given by a constant, e.g. ``STANDARD``, shows its value), then ``**kwargs`` for the
``PreTrainedConfig`` arguments it inherits.

Loaded by ``mkdocs.yml`` (``plugins.mkdocstrings.handlers.python.options.extensions``);
excluded from the built site.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

import griffe

_CONFIG_BASES = ("PreTrainedConfig", "PretrainedConfig")


def _is_config(cls: griffe.Class) -> bool:
    return any(str(base).split(".")[-1] in _CONFIG_BASES for base in cls.bases)


def _runtime_fields(cls: griffe.Class) -> dict[str, Any]:
    """``{field: default}`` of the fields the imported class declares itself."""
    module = importlib.import_module(cls.module.path)
    runtime = getattr(module, cls.name)
    own = vars(runtime).get("__annotations__", {})
    return {
        f.name: f.default
        for f in dataclasses.fields(runtime)
        if f.name in own and f.default is not dataclasses.MISSING
    }


class ConfigInit(griffe.Extension):
    """Add the dataclass ``__init__`` of configuration classes (see the module docstring)."""

    def on_class_members(self, *, cls: griffe.Class, **kwargs: Any) -> None:
        """Write ``cls.__init__`` from its fields when it is a config class without one."""
        if "__init__" in cls.members or not _is_config(cls):
            return
        defaults = _runtime_fields(cls)
        parameters = [
            griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword),
            *(
                griffe.Parameter(
                    name,
                    annotation=cls.members[name].annotation,
                    kind=griffe.ParameterKind.keyword_only,
                    default=repr(default),
                )
                for name, default in defaults.items()
                if name in cls.members
            ),
            griffe.Parameter("kwargs", annotation="Any", kind=griffe.ParameterKind.var_keyword),
        ]
        init = griffe.Function(
            "__init__",
            lineno=cls.lineno,
            endlineno=cls.lineno,
            parent=cls,
            parameters=griffe.Parameters(*parameters),
            returns="None",
        )
        cls.set_member("__init__", init)
