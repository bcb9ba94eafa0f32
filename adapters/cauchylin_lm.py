"""The ``cauchylin-lm`` console script: the command line, checked before anything heavy is imported.

``cauchylin-lm --help`` and a mistyped option must answer at once, but torch and transformers take
seconds to import. :func:`main` therefore parses the command line (:mod:`cauchylin_hf.app.parser`)
and runs the checks that need no model (:mod:`cauchylin_hf.app.checks`) with the standard library
and NumPy only (``import cauchylin_hf`` imports its names on first use), and only then imports
:mod:`cauchylin_hf.app.cli`, where the commands live, and runs the chosen one.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from cauchylin_hf.app.console import execute

__all__ = ["main"]


def _command(args: argparse.Namespace) -> int:
    from cauchylin_hf.app import cli  # the heavy part, once the arguments passed

    return int(cli.run(args))


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``cauchylin-lm``: parse the arguments, check what needs no model, then import and run
    the command (:func:`cauchylin_hf.app.cli.run`).

    The checks of folders and files (:func:`cauchylin_hf.app.checks.preflight`) run before torch
    and transformers are imported, so a missing file or a wrong option answers at once.

    Args:
        argv: the arguments (default ``sys.argv[1:]``).

    Returns:
        The exit status: 0 on success, 1 when ``verify`` fails its tolerance, 2 for a user error
        (bad options exit with 2 through argparse), 130 when interrupted (Ctrl-C), 143 when
        terminated (SIGTERM), 141 when the output pipe closed.

    Example:
        >>> import contextlib, io
        >>> err = io.StringIO()
        >>> with contextlib.redirect_stderr(err):
        ...     status = main(["verify", "/no/such/folder"])
        >>> status, err.getvalue().strip()
        (2, "cauchylin-lm verify: error: base folder not found: '/no/such/folder'")
    """
    return execute(argv, _command)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
