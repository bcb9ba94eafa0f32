"""The decimals of each field, for the command line: :mod:`cauchylin_hf.precision`.

The rule lives in the library (the Python :func:`~cauchylin_hf.generation.generate` writes a
generated number by it too); this module only gives the command line its names.
"""

from __future__ import annotations

from ..precision import (
    MAX_DECIMALS,
    NumberPrecision,
    check_decimals,
    decimals_of,
    field_before,
    needed_decimals,
)

__all__ = [
    "MAX_DECIMALS",
    "NumberPrecision",
    "check_decimals",
    "decimals_of",
    "field_before",
    "needed_decimals",
]
