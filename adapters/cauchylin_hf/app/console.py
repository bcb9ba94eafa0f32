"""One run of ``cauchylin-lm``: parse, check what needs no model, run the command, and turn what
went wrong into one line and an exit status.

Both doors of the command line call :func:`execute`: the console script
(:func:`cauchylin_lm.main`), which imports the commands (:mod:`cauchylin_hf.app.cli`) only once
the checks passed, and :func:`cauchylin_hf.app.cli.main` (``python -m cauchylin_hf.app.cli``),
which has them imported already. This module and the parser (:mod:`cauchylin_hf.app.parser`)
import the standard library only; the checks (:mod:`cauchylin_hf.app.checks`), imported once the
arguments are parsed, the standard library and NumPy; neither imports torch or transformers.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .parser import PROG, build_parser

__all__ = ["execute"]


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that the same cleanup runs (a KeyboardInterrupt subclass:
    code that cleans up after Ctrl-C cleans up after it too)."""


def _terminate(signum: int, frame: Any) -> None:
    raise _Terminated()


def execute(argv: Sequence[str] | None, command: Callable[[argparse.Namespace], int]) -> int:
    """Run ``cauchylin-lm`` with ``argv``: parse the arguments, run the checks that need no model
    (:func:`cauchylin_hf.app.checks.preflight`), then ``command(args)``.

    A user error (a :class:`ValueError` or :class:`OSError`: the checks' ``CliError`` is a
    ``ValueError``) is printed as one line, ``cauchylin-lm COMMAND: error: ...``; Ctrl-C and
    SIGTERM as one line that says what was saved.

    Args:
        argv: the arguments (``None``: ``sys.argv[1:]``).
        command: runs the parsed and checked command and returns its exit status
            (:func:`cauchylin_hf.app.cli.run`, or a function that imports it first).

    Returns:
        The exit status: ``command``'s, 2 for a user error (bad options exit with 2 through
        argparse), 130 when interrupted (Ctrl-C), 143 when terminated (SIGTERM), 141 when the
        output pipe closed.

    Example:
        >>> import contextlib, io
        >>> err = io.StringIO()
        >>> with contextlib.redirect_stderr(err):
        ...     status = execute(["verify", "/no/such/folder"], command=lambda args: 0)
        >>> status, err.getvalue().strip()
        (2, "cauchylin-lm verify: error: base folder not found: '/no/such/folder'")
    """
    args = build_parser().parse_args(argv)
    from .checks import preflight  # NumPy too: imported once parsed, so --help answers sooner

    try:
        previous = signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread
        previous = None
    try:
        preflight(args)
        return int(command(args))
    except BrokenPipeError:  # the output went to a pipe that closed (| head)
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return 141
    except (ValueError, OSError) as exc:  # checks.CliError is a ValueError
        message = str(exc).strip().replace("\n", " ") or type(exc).__name__
        print(f"{PROG} {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, _Terminated)
        what = "terminated (SIGTERM)" if terminated else "interrupted"
        print(f"{PROG} {args.command}: {what}; {str(exc) or 'nothing was saved'}", file=sys.stderr)
        return 143 if terminated else 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
