"""What the running transformers release calls things: the one place that knows about versions.

transformers 5.24 renamed the key-value cache from ``past_key_values`` to ``cache`` everywhere at
once: in every ``ModelOutput`` dataclass, in every model ``forward``, in the keyword arguments
``generate()`` passes to a model and in the output field it reads back. Older releases use
``past_key_values``. The adapter follows whichever release is installed, as transformers' own
models do, by reading the name off transformers' own output class
(:data:`CACHE_NAME`) rather than off a version number; its public entry points accept both
spellings (:func:`resolve_cache`). It also holds the switch of transformers' progress bars
(:func:`progress_bars`), which saving and loading a model and training show.

Example:
    >>> CACHE_NAME in ("cache", "past_key_values")
    True
    >>> resolve_cache(None, None), resolve_cache("c", None), resolve_cache(None, "p")
    (None, 'c', 'p')
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import warnings
from collections.abc import Iterator
from typing import Any

from transformers.modeling_outputs import CausalLMOutputWithPast

__all__ = ["CACHE_NAME", "CONFIG_ERRORS", "progress_bars", "resolve_cache", "takes_cache"]


def _cache_field_name() -> str:
    names = {f.name for f in dataclasses.fields(CausalLMOutputWithPast)}
    return "cache" if "cache" in names else "past_key_values"


CACHE_NAME: str = _cache_field_name()
"""The running release's name of the KV cache: ``"cache"`` (transformers >= 5.24) or
``"past_key_values"``. It is the keyword of the decoders' ``forward``, the field of their outputs,
and the key ``generate()`` passes to and reads from a model."""


def _config_errors() -> tuple[type[Exception], ...]:
    try:
        from huggingface_hub.errors import StrictDataclassError
    except ImportError:  # a huggingface_hub without strict dataclasses raises ValueError
        return (ArithmeticError,)
    return (StrictDataclassError, ArithmeticError)


CONFIG_ERRORS: tuple[type[Exception], ...] = _config_errors()
"""What a transformers config, or the model built from it, raises besides ``ValueError`` for a
value that fails its own validation: huggingface_hub's ``StrictDataclassError``
(``num_hidden_layers`` of the wrong type, or not matching ``layer_types``) and
``ArithmeticError`` (a ``hidden_size`` of 0 divides by zero in the rotary embedding). Catch
``(ValueError, *CONFIG_ERRORS)`` around reading one."""


def resolve_cache(cache: Any, past_key_values: Any) -> Any:
    """The cache given under either name (``cache`` or the older ``past_key_values``).

    Args:
        cache: the cache passed as ``cache``, or None.
        past_key_values: the cache passed as ``past_key_values``, or None.

    Returns:
        Whichever is not None (None when both are).

    Raises:
        ValueError: both are given.

    Example:
        >>> resolve_cache("a", "b")
        Traceback (most recent call last):
        ...
        ValueError: pass the cache as cache or as past_key_values, not both
    """
    if cache is not None and past_key_values is not None:
        raise ValueError("pass the cache as cache or as past_key_values, not both")
    return cache if cache is not None else past_key_values


def takes_cache(module: Any) -> bool:
    """Whether ``module.forward`` takes the running release's cache keyword (:data:`CACHE_NAME`).

    Decoders do, except recurrent ones before transformers 5.24, which name their state
    ``cache_params``: the adapter passes no cache to those, and generation runs uncached there.

    Args:
        module: a decoder (``nn.Module``).

    Returns:
        True when ``CACHE_NAME`` is a parameter of its ``forward``.

    Example:
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> takes_cache(tiny_base_model("qwen2").model)
        True
    """
    return CACHE_NAME in inspect.signature(module.forward).parameters


@contextlib.contextmanager
def progress_bars(enabled: bool) -> Iterator[None]:
    """Show or hide transformers' progress bars in a block ("Loading weights", "Writing model
    shards", the Hub's downloads), then restore what was set before.

    ``enabled=True`` changes nothing (bars that were switched off stay off); ``enabled=False``
    switches them off with transformers' own ``disable_progress_bar`` and, at the end, back on
    only if they were on (and the Hub's own switch as it was).

    Args:
        enabled: False hides the bars in the block.

    Yields:
        None.

    Example:
        >>> from transformers.utils import logging as hf_logging
        >>> before = hf_logging.is_progress_bar_enabled()
        >>> with progress_bars(False):
        ...     hf_logging.is_progress_bar_enabled()
        False
        >>> hf_logging.is_progress_bar_enabled() == before
        True
    """
    if enabled:
        yield
        return
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hub_was_off = are_progress_bars_disabled()
    with warnings.catch_warnings():  # HF_HUB_DISABLE_PROGRESS_BARS=0 refuses, with a warning
        warnings.simplefilter("ignore")
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        with warnings.catch_warnings():  # HF_HUB_DISABLE_PROGRESS_BARS=1: the Hub's stay off
            warnings.simplefilter("ignore")
            if was_on:
                hf_logging.enable_progress_bar()  # transformers' and the Hub's
            if hub_was_off:
                disable_progress_bars()
