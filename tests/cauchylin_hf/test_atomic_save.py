"""Saving over a saved model is atomic: a failure at any write, or a kill, leaves one whole model.

Each test saves model A, then tries to save model B over it while a write fails (every write
point in turn: each file opened for writing, the weights file, each rename) or while the process
is killed; the folder must then load, and hold A (a failure) or A or B (a kill), never a mix of
one's config and the other's weights.
"""

from __future__ import annotations

import builtins
import errno
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch
import transformers.modeling_utils
from cauchylin_hf import atomic_save, heads_io
from cauchylin_hf.model import CauchyLMForCausalLM
from cauchylin_hf.testing import tiny_base_model

NUM = 299


def make_model(threshold: float) -> CauchyLMForCausalLM:
    """A model whose config (threshold) and weights (b_noise) both say which one it is."""
    model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=NUM)
    model.config.threshold = threshold
    with torch.no_grad():
        model.action.b_noise.fill_(threshold)
        model.action.threshold.fill_(threshold)
    return model


def identity(folder: Path) -> float:
    """Which model the folder holds; fails if its config and weights disagree."""
    loaded = CauchyLMForCausalLM.from_pretrained(folder)
    from_config = float(loaded.config.threshold)
    from_weights = float(loaded.action.b_noise.detach()[0])
    assert from_config == from_weights, f"config says {from_config}, weights {from_weights}"
    return from_config


class WriteFailures:
    """Counts the write points of a save and fails the ``fail_at``-th one (ENOSPC)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail_at: int | None) -> None:
        self.count = 0
        self.fail_at = fail_at
        real_open, real_replace = builtins.open, os.replace
        real_save = transformers.modeling_utils.safe_save_file
        real_heads_save = heads_io.save_file
        real_exchange = atomic_save.exchange_folders

        def point(what: str) -> None:
            self.count += 1
            if self.count == self.fail_at:
                raise OSError(errno.ENOSPC, f"No space left on device (injected at {what})")

        def fake_open(file, mode="r", *args, **kwargs):
            if any(c in mode for c in "wax+"):
                point(f"open {file}")
            return real_open(file, mode, *args, **kwargs)

        def fake_replace(src, dst, *args, **kwargs):
            point(f"replace {dst}")
            return real_replace(src, dst, *args, **kwargs)

        def fake_save(*args, **kwargs):
            point("safetensors")
            return real_save(*args, **kwargs)

        def fake_heads_save(*args, **kwargs):
            point("safetensors")
            return real_heads_save(*args, **kwargs)

        def fake_exchange(a, b):
            point("exchange")
            return real_exchange(a, b)

        monkeypatch.setattr(builtins, "open", fake_open)
        monkeypatch.setattr(os, "replace", fake_replace)
        monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", fake_save)
        monkeypatch.setattr(heads_io, "save_file", fake_heads_save)
        monkeypatch.setattr(atomic_save, "exchange_folders", fake_exchange)


def write_points(monkeypatch, save) -> int:
    with monkeypatch.context() as m:
        counter = WriteFailures(m, fail_at=None)
        save()
    return counter.count


def test_a_failure_at_any_write_of_save_pretrained_keeps_the_old_model(tmp_path, monkeypatch):
    folder = tmp_path / "model"
    old, new = make_model(0.25), make_model(0.5)
    old.save_pretrained(folder)
    (folder / "notes.txt").write_text("kept")
    n = write_points(monkeypatch, lambda: new.save_pretrained(tmp_path / "probe"))
    assert n >= 4  # config, generation config, weights, the swap
    for k in range(1, n + 1):
        with monkeypatch.context() as m:
            WriteFailures(m, fail_at=k)
            with pytest.raises(OSError, match="No space left"):
                new.save_pretrained(folder)
        assert identity(folder) == 0.25, f"write point {k}"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "probe"], k
    new.save_pretrained(folder)
    assert identity(folder) == 0.5
    assert (folder / "notes.txt").read_text() == "kept"  # other files carried over


def test_a_failure_at_any_write_of_save_heads_keeps_the_old_heads(tmp_path, monkeypatch):
    folder = tmp_path / "heads"
    old, new = make_model(0.25), make_model(0.5)
    old.save_heads(folder)
    n = write_points(monkeypatch, lambda: new.save_heads(tmp_path / "probe"))
    assert n >= 3
    for k in range(1, n + 1):
        with monkeypatch.context() as m:
            WriteFailures(m, fail_at=k)
            with pytest.raises(OSError, match="No space left"):
                new.save_heads(folder)
        again = CauchyLMForCausalLM.from_heads(folder, tiny_base_model("qwen2"))
        assert float(again.action.b_noise.detach()[0]) == 0.25, f"write point {k}"


def test_a_save_over_a_sharded_save_drops_the_stale_shards(tmp_path):
    folder = tmp_path / "model"
    make_model(0.25).save_pretrained(folder, max_shard_size="20KB")
    assert (folder / "model.safetensors.index.json").exists()
    make_model(0.5).save_pretrained(folder)
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
    ]
    assert identity(folder) == 0.5


def test_the_two_rename_fallback_restores_the_old_folder(tmp_path, monkeypatch):
    """Without an atomic exchange the swap is two renames; a failed second one is undone."""
    folder = tmp_path / "model"
    make_model(0.25).save_pretrained(folder)
    monkeypatch.setattr(atomic_save, "exchange_folders", lambda a, b: False)
    real_replace = os.replace
    calls = []

    def second_fails(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(errno.EIO, "Input/output error (injected)")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", second_fails)
    with pytest.raises(OSError, match="injected"):
        make_model(0.5).save_pretrained(folder)
    monkeypatch.setattr(os, "replace", real_replace)
    assert identity(folder) == 0.25
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


# A process that builds the two models once, then for each line on stdin forks a saver that
# writes them over the folder in turn until it is killed, and prints the saver's pid.
SAVER = textwrap.dedent(
    """
    import os, sys, torch
    from cauchylin_hf.model import CauchyLMForCausalLM
    from cauchylin_hf.testing import tiny_base_model

    torch.set_num_threads(1)
    models = []
    for t in (0.25, 0.5):
        m = CauchyLMForCausalLM.from_base(
            tiny_base_model("qwen2", vocab_size=4000, hidden_size=64), num_token_id=3999
        )
        m.config.threshold = t
        with torch.no_grad():
            m.action.b_noise.fill_(t)
        models.append(m)
    print("ready", flush=True)
    for _ in sys.stdin:
        pid = os.fork()
        if pid == 0:
            i = 0
            while True:
                models[i % 2].save_pretrained(sys.argv[1])
                i += 1
        print(pid, flush=True)
        os.waitpid(pid, 0)
        print("done", flush=True)
    """
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the saver forks")
def test_killed_while_saving_leaves_a_whole_model(tmp_path):
    folder = tmp_path / "model"
    make_model(0.25).save_pretrained(folder)
    script = tmp_path / "saver.py"
    script.write_text(SAVER)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == b"ready"
        rounds = [(sig, delay) for sig in (signal.SIGKILL, signal.SIGTERM) for delay in DELAYS]
        for sig, delay in rounds:
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
            saver = int(proc.stdout.readline())
            time.sleep(delay)
            os.kill(saver, sig)
            assert proc.stdout.readline().strip() == b"done"
            assert identity(folder) in (0.25, 0.5), (sig, delay)
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
        proc.stdout.close()


DELAYS = (0.01, 0.05, 0.11, 0.17, 0.23, 0.31)


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="needs signal masks")
def test_a_signal_during_the_two_rename_fallback_arrives_after_the_old_copy_is_gone(
    tmp_path, monkeypatch
):
    """SIGINT during the swap is held; when it arrives the new model is in place, no .old left."""
    folder = tmp_path / "model"
    make_model(0.25).save_pretrained(folder)
    monkeypatch.setattr(atomic_save, "exchange_folders", lambda a, b: False)
    real_replace = os.replace
    calls = []

    def interrupted(src, dst):
        calls.append(dst)
        if len(calls) == 1:
            # to this thread, so that it arrives here, between the two renames (a signal sent to
            # the process may be taken by any of torch's threads, and reach Python later)
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", interrupted)
    # The program's own handler, set here: what an earlier test in this worker process (or a
    # plugin) left on SIGINT must not decide what this test sees.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            make_model(0.5).save_pretrained(folder)
    finally:
        signal.signal(signal.SIGINT, previous)
    monkeypatch.setattr(os, "replace", real_replace)
    assert identity(folder) == 0.5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


# ------------------------------------------- the folder changed by another program meanwhile

EXCHANGES = {
    "exchange": lambda monkeypatch: None,
    "two renames": lambda monkeypatch: monkeypatch.setattr(
        atomic_save, "exchange_folders", lambda a, b: False
    ),
}


def _tree(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): p.read_text()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _kept(target: Path) -> Path:
    (kept,) = sorted(target.parent.glob(f"{target.name}.new-*"))
    return kept


def _save(target: Path, body, **kwargs) -> BaseException | None:
    """``staged_folder(target)`` with ``body(staging)`` in the block; the error it raised."""
    try:
        with atomic_save.staged_folder(target, **kwargs) as staging:
            body(staging)
    except OSError as exc:
        return exc
    return None


def _changed(err: BaseException | None, reason: str) -> None:
    assert type(err).__name__ == "FolderChangedError", err
    assert reason in str(err) and err.kept in str(err)  # type: ignore[union-attr]


@pytest.mark.parametrize("swap", sorted(EXCHANGES))
def test_a_folder_created_meanwhile_is_left_alone(tmp_path, monkeypatch, swap):
    """It did not exist when the save began; another program made it, with a file, before the
    swap: that folder stays, and the new contents are kept beside it."""
    EXCHANGES[swap](monkeypatch)
    target = tmp_path / "out"

    def body(staging):
        (staging / "config.json").write_text("mine")
        target.mkdir()
        (target / "config.json").write_text("theirs")

    err = _save(target, body)
    assert _tree(target) == {"config.json": "theirs"}
    _changed(err, "it was created")
    assert _tree(_kept(target)) == {"config.json": "mine"}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("swap", sorted(EXCHANGES))
def test_a_save_that_finished_meanwhile_is_not_replaced(tmp_path, monkeypatch, swap):
    """Two saves into one folder at once: the one that swaps second finds another folder in
    its place and keeps its contents beside it (never two successes for one folder)."""
    EXCHANGES[swap](monkeypatch)
    target = tmp_path / "out"
    assert _save(target, lambda s: (s / "config.json").write_text("first")) is None
    results = []

    def body(staging):
        (staging / "config.json").write_text("mine")
        results.append(_save(target, lambda s: (s / "config.json").write_text("theirs")))

    err = _save(target, body)
    assert results == [None]
    assert _tree(target) == {"config.json": "theirs"}
    _changed(err, "another folder took its place")
    assert _tree(_kept(target)) == {"config.json": "mine"}


@pytest.mark.parametrize("swap", sorted(EXCHANGES))
def test_an_entry_written_meanwhile_is_not_replaced_and_one_added_is_kept(
    tmp_path, monkeypatch, swap
):
    EXCHANGES[swap](monkeypatch)
    target = tmp_path / "out"
    assert _save(target, lambda s: (s / "config.json").write_text("v1")) is None

    def edited(staging):  # an entry the new contents replace, rewritten by someone else
        (staging / "config.json").write_text("v2")
        (target / "config.json").unlink()
        (target / "config.json").write_text("edited by hand")

    err = _save(target, edited)
    assert _tree(target) == {"config.json": "edited by hand"}
    _changed(err, "its entry 'config.json' was written")
    shutil.rmtree(_kept(target))

    def added(staging):  # an entry the new contents do not have: kept, in the new folder
        (staging / "config.json").write_text("v3")
        (target / "notes.md").write_text("added meanwhile")

    assert _save(target, added) is None
    assert _tree(target) == {"config.json": "v3", "notes.md": "added meanwhile"}

    def stale(staging):  # a stale entry that appeared meanwhile is someone else's
        (staging / "config.json").write_text("v4")
        (target / "model.bin").write_text("theirs")

    err = _save(target, stale, stale=lambda name: name.endswith(".bin"))
    assert _tree(target) == {
        "config.json": "v3",
        "model.bin": "theirs",
        "notes.md": "added meanwhile",
    }
    _changed(err, "its entry 'model.bin' was written")


def test_a_folder_removed_meanwhile_gets_the_new_contents_beside_it(tmp_path):
    target = tmp_path / "out"
    target.mkdir()

    def body(staging):
        (staging / "config.json").write_text("mine")
        target.rmdir()

    err = _save(target, body)
    _changed(err, "it was removed")
    assert not target.exists() and _tree(_kept(target)) == {"config.json": "mine"}


# ------------------------------------------------- replace_folder: a program's output folder


def test_replace_folder_gives_the_umask_permissions_to_private_files(tmp_path):
    """Writers such as tempfile create private files (0600); the folder that replaces the
    target carries the umask's permissions instead, a folder within it too."""
    import tempfile

    target = tmp_path / "out"
    old = os.umask(0o027)
    try:
        with atomic_save.replace_folder(target) as staging:
            fd, name = tempfile.mkstemp(dir=staging)
            os.close(fd)
            os.rename(name, staging / "weights.bin")
            (staging / "sub").mkdir(mode=0o700)
    finally:
        os.umask(old)
    assert (target / "weights.bin").stat().st_mode & 0o777 == 0o640
    assert (target / "sub").stat().st_mode & 0o777 == 0o750
    assert target.stat().st_mode & 0o777 == 0o750


def test_replace_folder_names_what_a_killed_run_left(tmp_path):
    """A staging folder and an `.old` folder (killed between the two renames, the target
    missing): the notes name both, with the command that puts the old folder back."""
    target = tmp_path / "out"
    staged = tmp_path / ".out.1a2b3c4d.tmp"
    staged.mkdir()
    old = tmp_path / ".out.deadbeef.old"
    old.mkdir()
    notes: list[str] = []
    with atomic_save.replace_folder(target, note=notes.append) as staging:
        (staging / "a.txt").write_text("new")
    assert len(notes) == 2
    assert f"mv {old} {target}" in notes[0]
    assert str(staged) in notes[1] and "delete them" in notes[1]
    assert atomic_save.leftovers(tmp_path / "other") == []


def test_replace_folder_refuses_a_parent_it_cannot_write(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    parent = tmp_path / "ro"
    parent.mkdir(mode=0o500)
    try:
        with pytest.raises(OSError, match="cannot write next to"):
            with atomic_save.replace_folder(parent / "out"):
                pass
    finally:
        parent.chmod(0o700)


def test_replace_folder_holds_a_signal_until_the_swap_is_done_and_says_so(tmp_path, monkeypatch):
    """SIGINT between the two renames of the fallback swap: held until the old folder is gone,
    then raised as the program's KeyboardInterrupt, saying the new contents were saved."""
    target = tmp_path / "out"
    target.mkdir()
    (target / "a.txt").write_text("old")
    monkeypatch.setattr(atomic_save, "exchange_folders", lambda a, b: False)
    real_replace, calls = os.replace, []

    def interrupted(src, dst):
        calls.append(dst)
        real_replace(src, dst)
        if len(calls) == 1:
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)

    monkeypatch.setattr(os, "replace", interrupted)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt) as caught:
            with atomic_save.replace_folder(target, contents="the new model") as staging:
                (staging / "a.txt").write_text("new")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert str(caught.value) == f"the new model was saved to {target} before stopping"
    assert (target / "a.txt").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
