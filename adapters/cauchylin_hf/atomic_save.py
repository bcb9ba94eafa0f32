"""Saving a folder atomically: the new contents appear whole, or the old ones stay.

Every writer of the adapter that saves a folder (:meth:`CauchyLMForCausalLM.save_pretrained
<cauchylin_hf.model.CauchyLMForCausalLM.save_pretrained>`, :func:`cauchylin_hf.heads_io.write_heads`)
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

The folder is checked again at the swap against what the caller saw (:func:`folder_state`, by
default when the block started): if another program created it meanwhile, put another folder in
its place, or wrote an entry that the new contents would replace, nothing of it is touched and
the new contents are kept beside it, under a name :class:`FolderChangedError` gives. So two
programs saving into one folder at once never both succeed, and neither deletes what the other
wrote. Entries that another program adds without clashing (a note beside a model) are kept.

A program that replaces its output folder (``cauchylin-lm train``) uses :func:`replace_folder`:
the same swap, with the new files given the umask's permissions, SIGINT and SIGTERM held from the
end of the block until the old contents are gone, and the folders a killed run left beside the
target named first (:func:`leftovers`).

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
from typing import Any, NamedTuple

__all__ = [
    "FolderChangedError",
    "FolderState",
    "exchange_folders",
    "folder_state",
    "leftovers",
    "replace_folder",
    "share_with_umask",
    "staged_folder",
]

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


class FolderState(NamedTuple):
    """What a folder was when a program decided to replace it (:func:`folder_state`).

    Attributes:
        identity: ``(st_dev, st_ino)`` of the folder, or None when there was none.
        entries: ``{name: (st_ino, st_size, st_mtime_ns)}`` of its entries (not followed).

    Example:
        >>> FolderState(None, {}).identity is None
        True
    """

    identity: tuple[int, int] | None
    entries: dict[str, tuple[int, int, int]]


def _entry_key(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _entries(folder: Path) -> dict[str, tuple[int, int, int]]:
    out = {}
    for entry in os.scandir(folder):
        try:
            out[entry.name] = _entry_key(entry.stat(follow_symlinks=False))
        except FileNotFoundError:  # removed while listed
            continue
    return out


def folder_state(path: str | os.PathLike) -> FolderState:
    """The state of a folder now: whether it exists, which folder it is, and its entries.

    Pass it to :func:`staged_folder` as ``seen`` when the decision to replace the folder was
    taken earlier than the block starts (a training that checks its output folder before it
    runs): the swap then refuses a folder that changed since.

    Args:
        path: the folder (a symbolic link is followed; a missing folder is a state too).

    Returns:
        The :class:`FolderState`.

    Raises:
        ValueError: ``path`` is an existing file.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> root = Path(tempfile.mkdtemp())
        >>> folder_state(root / "new").identity is None
        True
        >>> _ = (root / "a.txt").write_text("x")
        >>> sorted(folder_state(root).entries)
        ['a.txt']
    """
    target = Path(os.fspath(path))
    try:
        st = target.stat()
    except FileNotFoundError:
        return FolderState(None, {})
    if not target.is_dir():
        raise ValueError(f"{str(target)!r} is a file, not a folder")
    return FolderState((st.st_dev, st.st_ino), _entries(target))


class FolderChangedError(FileExistsError):
    """The folder to replace changed since it was seen; the new contents were kept beside it.

    Args:
        path: the folder that was left as it is.
        reason: what changed (``"it was created"``, ``"another folder took its place"``, ...).
        kept: where the new contents are now (a new folder beside ``path``).

    Example:
        >>> err = FolderChangedError("out", "it was created", "out.new-1a2b3c")
        >>> err.kept, isinstance(err, OSError)
        ('out.new-1a2b3c', True)
    """

    def __init__(self, path: str | os.PathLike, reason: str, kept: str | os.PathLike) -> None:
        self.path, self.reason, self.kept = os.fspath(path), reason, os.fspath(kept)
        super().__init__(
            errno.EEXIST,
            f"{self.path!r} was changed by another program while the new contents were written "
            f"({reason}); it was left as it is, and the new contents were saved to "
            f"{self.kept!r} instead",
        )

    def __str__(self) -> str:
        return str(self.strerror)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.reason, self.kept))


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
def _signals_held(done: str | None = None) -> Iterator[None]:
    """Hold SIGINT and SIGTERM back: they are recorded in the block and delivered after it.

    Python runs signal handlers in the main thread whichever thread the system delivers a
    signal to (torch's worker threads included), so the handlers are swapped rather than the
    thread's signal mask. Outside the main thread (where handlers cannot be set) nothing is held.
    When the block succeeded, the ``KeyboardInterrupt`` (or subclass) that the program's handler
    raises for a held signal carries ``done`` as its message (what was finished before stopping).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {
        sig: signal.signal(sig, lambda signum, frame: caught.append(signum)) for sig in held
    }
    finished = False
    try:
        yield
        finished = True
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in dict.fromkeys(caught):
            try:
                signal.raise_signal(signum)  # now, to the handler the program had
            except KeyboardInterrupt as exc:
                if finished and done is not None:
                    exc.args = (done,)
                raise


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


def _carry_over(
    path: Path, staging: Path, stale: Callable[[str], bool]
) -> dict[str, tuple[int, int, int]]:
    """Entries of ``path`` that ``staging`` lacks and that are not ``stale``, and its mode;
    returns what each carried entry was when it was carried."""
    carried = {}
    for entry in path.iterdir():
        target = staging / entry.name
        if target.exists() or target.is_symlink() or stale(entry.name):
            continue
        try:
            carried[entry.name] = _entry_key(entry.lstat())
        except FileNotFoundError:  # removed while listed
            continue
        if entry.is_symlink():
            os.symlink(os.readlink(entry), target)
        elif entry.is_dir():
            shutil.copytree(entry, target, symlinks=True, copy_function=_link_or_copy)
        else:
            _link_or_copy(str(entry), str(target))
    shutil.copymode(path, staging)
    return carried


def _replaced(new: Path, name: str, stale: Callable[[str], bool]) -> bool:
    """Whether the entry ``name`` of the old folder goes with it (the new folder has one of
    that name, or it is stale)."""
    return (new / name).exists() or (new / name).is_symlink() or stale(name)


def _clash(
    old: Path,
    new: Path,
    seen: FolderState,
    carried: dict[str, tuple[int, int, int]],
    stale: Callable[[str], bool],
) -> str | None:
    """Why the folder ``old`` (just swapped out of the target's place) must not be discarded:
    it is not the folder the caller saw, or an entry that goes with it is not as the caller saw
    it (another program wrote it). None when it may go."""
    st = old.stat()
    if (st.st_dev, st.st_ino) != seen.identity:
        return "another folder took its place"
    for name, key in _entries(old).items():
        if name in carried:  # linked into the new folder: kept, unless it changed since
            if key != carried[name]:
                return f"its entry {name!r} changed"
        elif _replaced(new, name, stale) and seen.entries.get(name) != key:
            return f"its entry {name!r} was written"
    return None


def _adopt(old: Path, new: Path, stale: Callable[[str], bool]) -> None:
    """Entries that appeared in the old folder after the carry-over: moved into the new one."""
    for entry in old.iterdir():
        if not _replaced(new, entry.name, stale):
            os.replace(entry, new / entry.name)


def _keep_beside(new: Path, path: Path) -> Path:
    """Move the folder ``new`` to a fresh visible name beside ``path``: ``<name>.new-<random>``."""
    while True:
        kept = path.parent / f"{path.name}.new-{secrets.token_hex(3)}"
        if not (kept.exists() or kept.is_symlink()):
            os.replace(new, kept)
            return kept


def _swap_in(
    staging: Path,
    path: Path,
    seen: FolderState,
    carried: dict[str, tuple[int, int, int]],
    stale: Callable[[str], bool],
) -> None:
    """Put the folder ``staging`` at ``path``, if ``path`` is still what ``seen`` says (see the
    module docstring)."""
    if not (path.exists() or path.is_symlink()):
        if seen.identity is not None:
            raise FolderChangedError(path, "it was removed", _keep_beside(staging, path))
        try:
            os.replace(staging, path)  # a folder made meanwhile is replaced only when empty
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                raise
            raise FolderChangedError(path, "it was created", _keep_beside(staging, path)) from None
        return
    if seen.identity is None:
        raise FolderChangedError(path, "it was created", _keep_beside(staging, path))
    with _signals_held():  # a signal must not leave another program's folder in ours
        if exchange_folders(staging, path):
            # ``staging`` holds what was at ``path``; checked where no one else can swap it.
            problem = _clash(staging, path, seen, carried, stale)
            if problem is not None:
                exchange_folders(staging, path)  # back: the other program's folder in its place
                raise FolderChangedError(path, problem, _keep_beside(staging, path))
            _adopt(staging, path, stale)
            # Still held: a signal that came during the swap arrives after the old copy is gone.
            shutil.rmtree(staging, ignore_errors=True)  # the old contents
            return
        old = _new_sibling(path, "old")
        os.rmdir(old)
        os.replace(path, old)
        try:
            problem = _clash(old, staging, seen, carried, stale)
            if problem is not None:
                raise FolderChangedError(path, problem, _keep_beside(staging, path))
            os.replace(staging, path)
        except BaseException:
            os.replace(old, path)
            raise
        _adopt(old, path, stale)
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def staged_folder(
    path: str | os.PathLike,
    *,
    stale: Callable[[str], bool] | None = None,
    seen: FolderState | None = None,
) -> Iterator[Path]:
    """A new folder to write into that takes ``path``'s place when the block succeeds.

    Args:
        path: the folder to (re)write; created with its parents if needed. A symbolic link is
            followed (the folder it points to is replaced).
        stale: ``stale(name) -> bool`` for entries of an existing ``path`` that must not be
            carried over when the new save did not write them (default: carry every one).
        seen: the state of ``path`` that the caller agreed to replace (:func:`folder_state`,
            taken when it checked the folder); default: its state when the block starts.

    Yields:
        The staging folder (empty, beside ``path``).

    Raises:
        ValueError: ``path`` is an existing file.
        FolderChangedError: ``path`` changed since ``seen`` (another program created it, put
            another folder in its place, or wrote an entry the new contents replace): it is
            left as it is, and the new contents are kept beside it (``kept``).
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
    target, seen, stale = _plan(path, stale, seen)
    staging = _new_sibling(target, "tmp")
    try:
        yield staging
        _finish(staging, target, seen, stale)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _plan(
    path: str | os.PathLike, stale: Callable[[str], bool] | None, seen: FolderState | None
) -> tuple[Path, FolderState, Callable[[str], bool]]:
    """The folder to replace (a link followed), its state to check at the swap, ``stale``."""
    target = Path(os.fspath(path))
    if target.exists() and not target.is_dir():
        raise ValueError(f"{str(target)!r} is a file, not a folder")
    if target.is_symlink():
        target = target.resolve()
    if seen is None:
        seen = folder_state(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    return target, seen, stale or (lambda name: False)


def _finish(staging: Path, target: Path, seen: FolderState, stale: Callable[[str], bool]) -> None:
    """Carry the kept entries over and swap ``staging`` in (see the module docstring)."""
    carried = _carry_over(target, staging, stale) if target.is_dir() else {}
    _swap_in(staging, target, seen, carried, stale)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def share_with_umask(folder: str | os.PathLike) -> None:
    """Give every file and folder under ``folder`` (and itself) the permissions the umask gives
    new ones: temporary files, e.g. ``safetensors``' or ``tempfile``'s, are created private,
    and a file renamed into place keeps that.

    Args:
        folder: the folder.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> folder = Path(tempfile.mkdtemp())
        >>> (folder / "w.bin").touch(mode=0o600)
        >>> share_with_umask(folder)
        >>> (folder / "w.bin").stat().st_mode & 0o777 == 0o666 & ~_umask()
        True
    """
    root = Path(os.fspath(folder))
    mask = _umask()
    root.chmod(0o777 & ~mask)
    for path in root.rglob("*"):
        if path.is_symlink():
            continue
        path.chmod((0o777 if path.is_dir() else 0o666) & ~mask)


_share = share_with_umask  # what replace_folder calls


def leftovers(path: str | os.PathLike) -> list[str]:
    """Sentences on the hidden folders a killed program (SIGKILL, a power cut) left beside
    ``path``: the ``.<name>.<random>.tmp`` folders of an unfinished save, and an ``.old`` one
    that holds the previous contents when ``path`` itself is missing (killed between the two
    renames of the swap), with the command that puts it back.

    Args:
        path: the folder a program is about to replace.

    Returns:
        One sentence per finding (none when nothing was left).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> root = Path(tempfile.mkdtemp())
        >>> leftovers(root / "model")
        []
        >>> (root / ".model.1a2b3c4d.tmp").mkdir()
        >>> print(leftovers(root / "model")[0])  # doctest: +ELLIPSIS
        1 hidden folder(s) next to '.../model' were left by a run that was killed: ...
    """
    out = Path(os.fspath(path))
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        return []
    staged = sorted(parent.glob(f".{out.name}.*.tmp"))  # the names of _new_sibling
    old = sorted(parent.glob(f".{out.name}.*.old"))
    found = []
    if old and not out.exists():
        found.append(
            f"{str(out)!r} is missing but {str(old[-1])!r} holds what it held (a run was killed "
            f"while swapping the new contents in): mv {old[-1]} {out} to get it back"
        )
    left = staged + (old if out.exists() else [])
    if left:
        found.append(
            f"{len(left)} hidden folder(s) next to {str(out)!r} were left by a run that was "
            f"killed: {', '.join(str(x) for x in left)}; delete them once no other program "
            "writes there"
        )
    return found


@contextlib.contextmanager
def replace_folder(
    path: str | os.PathLike,
    *,
    stale: Callable[[str], bool] | None = None,
    seen: FolderState | None = None,
    note: Callable[[str], None] | None = None,
    contents: str = "the new folder",
) -> Iterator[Path]:
    """:func:`staged_folder` for a program's output folder, as a command-line tool needs it.

    On top of :func:`staged_folder`:

    * before anything is written, ``note`` gets each of the :func:`leftovers` beside ``path``;
    * every file and folder written gets the permissions the umask gives new files (the
      staging folder and some writers' temporary files are private);
    * from the end of the block until the old contents are gone, SIGINT and SIGTERM are held;
      a held one then reaches the program's handler, and the ``KeyboardInterrupt`` it raises
      says ``"<contents> was saved to <path> before stopping"``. A signal inside the block
      stops it as usual: the staging folder is removed and ``path`` is left as it was.

    Args:
        path: the folder to (re)write, as for :func:`staged_folder`.
        stale: entries of the old folder that must not be carried over.
        seen: the state of ``path`` that the caller agreed to replace (:func:`folder_state`).
        note: where the sentences on leftovers go (default: standard error).
        contents: what the folder holds, in the message of a held interrupt.

    Yields:
        The staging folder.

    Raises:
        OSError: the staging folder cannot be made beside ``path`` (the message says so), or
            the swap failed (``path`` unchanged).
        FolderChangedError: ``path`` changed since ``seen``; the new contents are kept beside it.
        ValueError: ``path`` is an existing file.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> target = Path(tempfile.mkdtemp()) / "out"
        >>> with replace_folder(target) as staging:
        ...     _ = (staging / "a.json").write_text("{}")
        >>> (target / "a.json").stat().st_mode & 0o777 == 0o666 & ~_umask()
        True
    """
    target, seen, stale = _plan(path, stale, seen)
    for sentence in leftovers(target):
        (note or (lambda text: print(text, file=sys.stderr)))(sentence)
    try:
        staging = _new_sibling(target, "tmp")
    except OSError as exc:
        raise OSError(f"cannot write next to {str(target)!r}: {exc}") from None
    try:
        yield staging
        _share(staging)
        with _signals_held(f"{contents} was saved to {path} before stopping"):
            _finish(staging, target, seen, stale)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
