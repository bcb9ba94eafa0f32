"""Saving a folder atomically: the new contents appear whole, or the old ones stay.

Every writer of the adapter that saves a folder (:meth:`CauchyLMForCausalLM.save_pretrained
<cauchylin_hf.model.CauchyLMForCausalLM.save_pretrained>`, :func:`cauchylin_hf.heads_io.save_heads`)
goes through :func:`staged_folder`: the files are written into a new hidden folder beside the
target, ``.<name>.<random>.tmp``; only when every write succeeded does that folder take the
target's place, so an error, a full disk, Ctrl-C, SIGTERM or SIGKILL while writing leaves the
previous contents as they were, loadable.

Taking the place of an existing folder is one system call on Linux, ``renameat2`` with
``RENAME_EXCHANGE`` (the two folders swap names atomically; the old contents then go). Where
that is not available (another system, a file system without it) it is two renames, the old
folder put back if the second fails, with SIGINT and SIGTERM held back until the old copy is
removed; only SIGKILL or a power cut in that instant can leave the old contents in the hidden
``.<name>.<random>.old`` folder beside the target.

Entries of the existing folder that the new save does not write (a tokenizer saved beside a
model, say) are carried over into the new folder first, as hard links where the file system
allows; a caller can name stale entries that must not be carried over (weights shards of an
earlier save).

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> target = Path(tempfile.mkdtemp()) / "model"
    >>> with staged_folder(target) as staging:
    ...     _ = (staging / "weights.txt").write_text("v1")
    >>> (target / "weights.txt").read_text()
    'v1'
    >>> try:
    ...     with staged_folder(target) as staging:
    ...         _ = (staging / "weights.txt").write_text("v2 (half")
    ...         raise OSError("No space left on device")
    ... except OSError:
    ...     pass
    >>> (target / "weights.txt").read_text(), sorted(p.name for p in target.parent.iterdir())
    ('v1', ['model'])
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import secrets
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["exchange_folders", "staged_folder"]

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _renameat2() -> Callable[..., int] | None:
    """libc's ``renameat2`` (Linux, glibc >= 2.28), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_RENAMEAT2 = _renameat2()


def exchange_folders(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Swap the names of two existing folders in one atomic step, where the system can.

    Args:
        a: a folder.
        b: another folder on the same file system.

    Returns:
        True when the two were swapped; False when this system or file system has no atomic
        exchange (nothing changed then).

    Raises:
        OSError: the exchange was refused for another reason (a missing folder, permissions).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> root = Path(tempfile.mkdtemp())
        >>> (root / "a").mkdir(); (root / "b").mkdir(); _ = (root / "a" / "x").write_text("")
        >>> if exchange_folders(root / "a", root / "b"):
        ...     assert (root / "b" / "x").exists() and not (root / "a" / "x").exists()
    """
    if _RENAMEAT2 is None:
        return False
    if _RENAMEAT2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), os.fspath(a), None, os.fspath(b))


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back: they are recorded in the block and delivered after it.

    Python runs signal handlers in the main thread whichever thread the system delivers a
    signal to (torch's worker threads included), so the handlers are swapped rather than the
    thread's signal mask. Outside the main thread (where handlers cannot be set) nothing is held.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {
        sig: signal.signal(sig, lambda signum, frame: caught.append(signum)) for sig in held
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in dict.fromkeys(caught):
            signal.raise_signal(signum)  # now, to the handler the program had


def _new_sibling(path: Path, kind: str) -> Path:
    """A new empty folder ``.<name>.<random>.<kind>`` beside ``path`` (mode from the umask)."""
    while True:
        candidate = path.parent / f".{path.name}.{secrets.token_hex(4)}.{kind}"
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate


def _link_or_copy(src: str, dst: str) -> str:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def _carry_over(path: Path, staging: Path, stale: Callable[[str], bool]) -> None:
    """Entries of ``path`` that ``staging`` lacks and that are not ``stale``, and its mode."""
    for entry in path.iterdir():
        target = staging / entry.name
        if target.exists() or target.is_symlink() or stale(entry.name):
            continue
        if entry.is_symlink():
            os.symlink(os.readlink(entry), target)
        elif entry.is_dir():
            shutil.copytree(entry, target, symlinks=True, copy_function=_link_or_copy)
        else:
            _link_or_copy(str(entry), str(target))
    shutil.copymode(path, staging)


def _swap_in(staging: Path, path: Path) -> None:
    """Put the folder ``staging`` at ``path`` (see the module docstring)."""
    if not path.exists():
        os.replace(staging, path)
        return
    if exchange_folders(staging, path):
        shutil.rmtree(staging, ignore_errors=True)  # it holds the old contents now
        return
    old = _new_sibling(path, "old")
    os.rmdir(old)
    with _signals_held():
        os.replace(path, old)
        try:
            os.replace(staging, path)
        except BaseException:
            os.replace(old, path)
            raise
        # Still held: a signal that came during the swap arrives after the old copy is gone.
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def staged_folder(
    path: str | os.PathLike, *, stale: Callable[[str], bool] | None = None
) -> Iterator[Path]:
    """A new folder to write into that takes ``path``'s place when the block succeeds.

    Args:
        path: the folder to (re)write; created with its parents if needed. A symbolic link is
            followed (the folder it points to is replaced).
        stale: ``stale(name) -> bool`` for entries of an existing ``path`` that must not be
            carried over when the new save did not write them (default: carry every one).

    Yields:
        The staging folder (empty, beside ``path``).

    Raises:
        ValueError: ``path`` is an existing file.
        OSError: the staging folder cannot be made or swapped in (``path`` unchanged).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> target = Path(tempfile.mkdtemp()) / "out"
        >>> with staged_folder(target) as staging:
        ...     _ = (staging / "a.json").write_text("{}")
        >>> sorted(p.name for p in target.iterdir())
        ['a.json']
    """
    target = Path(os.fspath(path))
    if target.exists() and not target.is_dir():
        raise ValueError(f"{str(target)!r} is a file, not a folder")
    if target.is_symlink():
        target = target.resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = _new_sibling(target, "tmp")
    try:
        yield staging
        if target.exists():
            _carry_over(target, staging, stale or (lambda name: False))
        _swap_in(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
