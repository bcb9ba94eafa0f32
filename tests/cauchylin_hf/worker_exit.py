"""How the torchrun workers of the tests leave: without the interpreter's teardown.

By then the work is done and written and the process group destroyed; a C++ thread destructor of
a library (seen since transformers' Trainer imports datasets and pyarrow) can still call
std::terminate while the interpreter tears down, a SIGABRT of one rank now and then, which would
fail a run whose results are complete. The workers import this module as a sibling file (torchrun
puts the script's folder first on ``sys.path``).
"""

from __future__ import annotations

import os
import sys


def leave(code: int) -> None:
    """Flush the output and end the process with ``code``, skipping the teardown."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
