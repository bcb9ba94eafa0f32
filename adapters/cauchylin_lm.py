"""The ``cauchylin-lm`` console script: its arguments, parsed before anything heavy is imported.

``cauchylin-lm --help`` and a mistyped option must answer at once, but torch and transformers take
seconds to import. This top-level module therefore imports only the standard library: :func:`main`
parses the command line, runs the checks that need no model (:mod:`cauchylin_hf.app.checks`:
the standard library and NumPy, neither torch nor transformers, since ``import cauchylin_hf``
imports its names on first use), and only then imports :mod:`cauchylin_hf.app.cli`, where the
commands live, and runs the chosen one.

``generate --mode`` takes its choices from :mod:`cauchylin.nn.mode_names`, a file of strings
that imports nothing else.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from cauchylin_hf.app.parser import PROG, SCHEDULERS, build_parser

__all__ = ["PROG", "SCHEDULERS", "build_parser", "main"]


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that the same cleanup runs (a KeyboardInterrupt subclass:
    code that cleans up after Ctrl-C cleans up after it too)."""


def _terminate(signum: int, frame: Any) -> None:
    raise _Terminated()


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
    args = build_parser().parse_args(argv)
    try:
        previous = signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread
        previous = None
    try:
        from cauchylin_hf.app.checks import preflight  # imports neither torch nor transformers

        preflight(args)
        from cauchylin_hf.app import cli  # the heavy part, once the arguments passed

        return int(cli.run(args))
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


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
