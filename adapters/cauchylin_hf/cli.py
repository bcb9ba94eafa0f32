"""The old import path of :mod:`cauchylin_hf.app.cli` (kept for ``python -m cauchylin_hf.cli``)."""

import sys

from .app.cli import build_parser, load_causal_model, main

__all__ = ["build_parser", "load_causal_model", "main"]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
