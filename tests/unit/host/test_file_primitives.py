"""The one home of the file primitives (host/_files.py).

Attacks and failures: a symlink planted where a key or secrets file belongs (followed, it
would read or expose another file); a FIFO planted there (opened blocking, it hangs the
host for ever); a file larger than its bound (memory); a crash or disk error in the
middle of a write (a torn state file); a second process editing the same file at the
same time (a lost update).
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

import host.files
from host._files import (
    FileTooLarge,
    LockHeld,
    NotRegularFile,
    atomic_write,
    create_exclusive,
    interprocess_lock,
    open_lock,
    read_bounded,
    read_regular,
    replace_dir,
)
from host.errors import LockInvalid, SecretsUnavailable

REPO = Path(__file__).resolve().parents[3]


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# -- bounded reads ------------------------------------------------------------------------


def test_symlink_followed_by_default_refused_with_nofollow(tmp_path: Path) -> None:
    target = tmp_path / "real"
    target.write_bytes(b"secret")
    link = tmp_path / "link"
    link.symlink_to(target)
    assert read_regular(link, 100, what="key", error=LockInvalid) == b"secret"
    with pytest.raises(SecretsUnavailable, match="it is a symlink") as caught:
        read_regular(link, 100, what="key", error=SecretsUnavailable, nofollow=True)
    assert caught.value.code == "SECRETS_UNAVAILABLE"
    with pytest.raises(OSError) as raw:
        read_bounded(link, 100, nofollow=True)
    assert raw.value.errno == errno.ELOOP


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
@pytest.mark.parametrize("nofollow", [False, True], ids=["follow", "nofollow"])
def test_planted_fifo_refused_without_blocking(tmp_path: Path, nofollow: bool) -> None:
    fifo = tmp_path / "secrets.json"
    os.mkfifo(fifo)  # no writer ever opens it: a blocking open would hang this test
    before = _open_fds()
    with pytest.raises(NotRegularFile):
        read_bounded(fifo, 100, nofollow=nofollow)
    with pytest.raises(SecretsUnavailable, match="is not a regular file"):
        read_regular(fifo, 100, what="secrets file", error=SecretsUnavailable, nofollow=nofollow)
    assert _open_fds() == before


def test_file_over_its_bound_refused_at_one_byte_past(tmp_path: Path) -> None:
    path = tmp_path / "policy.json"
    path.write_bytes(b"x" * 1000)
    data, info = read_bounded(path, 1000)
    assert data == b"x" * 1000 and info.st_size == 1000
    before = _open_fds()
    with pytest.raises(FileTooLarge, match="larger than 999 bytes"):
        read_bounded(path, 999)
    with pytest.raises(LockInvalid, match="over the limit of 999") as caught:
        read_regular(path, 999, what="lock", error=LockInvalid)
    assert caught.value.code == "LOCK_INVALID"
    assert _open_fds() == before


def test_missing_file_raises_callers_error_or_raw_when_asked(tmp_path: Path) -> None:
    absent = tmp_path / "absent"
    with pytest.raises(LockInvalid, match="cannot open lock") as caught:
        read_regular(absent, 10, what="lock", error=LockInvalid)
    assert caught.value.details["path"] == str(absent)
    with pytest.raises(FileNotFoundError):
        read_regular(absent, 10, what="lock", error=LockInvalid, raw_missing=True)


# -- writes -------------------------------------------------------------------------------


def _leftovers(directory: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name not in keep)


def test_atomic_write_replaces_content_and_sets_mode(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(b"old")
    atomic_write(path, b"new", mode=0o640)
    assert path.read_bytes() == b"new"
    assert path.stat().st_mode & 0o777 == 0o640
    assert _leftovers(tmp_path, {"state.json"}) == []


def test_torn_write_leaves_old_content_when_fsync_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A disk error cannot be provoked on tmpfs; fsync is the step a full or failing disk breaks.
    path = tmp_path / "lock-state.json"
    path.write_bytes(b'{"generation": 7}')

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="Input/output error"):
        atomic_write(path, b'{"generation": 8}')
    monkeypatch.undo()
    assert path.read_bytes() == b'{"generation": 7}'
    assert _leftovers(tmp_path, {"lock-state.json"}) == []


def test_create_exclusive_never_replaces_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "master.key"
    create_exclusive(path, b"first")
    assert path.read_bytes() == b"first"
    assert path.stat().st_mode & 0o777 == 0o600
    with pytest.raises(FileExistsError):
        create_exclusive(path, b"second")
    assert path.read_bytes() == b"first"
    assert _leftovers(tmp_path, {"master.key"}) == []


def test_create_exclusive_refuses_a_dangling_symlink_instead_of_writing_through_it(tmp_path: Path) -> None:
    victim = tmp_path / "elsewhere" / "victim"
    victim.parent.mkdir()
    link = tmp_path / "audit-key"
    link.symlink_to(victim)
    with pytest.raises(FileExistsError):
        create_exclusive(link, b"seed")
    assert not victim.exists()
    assert link.is_symlink()
    assert _leftovers(tmp_path, {"audit-key", "elsewhere"}) == []


def test_replace_dir_swaps_a_whole_directory_and_leaves_no_old_copy(tmp_path: Path) -> None:
    destination = tmp_path / "bundle"
    destination.mkdir()
    (destination / "module.wasm").write_bytes(b"old")
    (destination / "stale.txt").write_bytes(b"only in the old copy")
    staging = tmp_path / ".bundle.partial"
    staging.mkdir()
    (staging / "module.wasm").write_bytes(b"new")
    replace_dir(staging, destination)
    assert sorted(p.name for p in destination.iterdir()) == ["module.wasm"]
    assert (destination / "module.wasm").read_bytes() == b"new"
    assert _leftovers(tmp_path, {"bundle"}) == []


def test_replace_dir_moves_a_planted_symlink_aside_without_touching_its_target(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_bytes(b"x")
    destination = tmp_path / "toolchain"
    destination.symlink_to(victim)
    staging = tmp_path / "work"
    staging.mkdir()
    replace_dir(staging, destination)
    assert destination.is_dir() and not destination.is_symlink()
    assert (victim / "keep").read_bytes() == b"x"


# -- interprocess locks -------------------------------------------------------------------

_HOLDER = """
import sys
from pathlib import Path
from host._files import interprocess_lock
with interprocess_lock(Path(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.readline()
"""

_PROBE = """
import sys
from pathlib import Path
from host._files import LockHeld, open_lock
try:
    open_lock(Path(sys.argv[1]), blocking=False)
except LockHeld:
    print("refused")
else:
    print("acquired")
"""


def _python(code: str, lock: Path, *, stdin: int | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", code, str(lock)], env=env, text=True, stdin=stdin, stdout=subprocess.PIPE
    )


def test_lock_held_by_another_process_excludes_this_one(tmp_path: Path) -> None:
    lock = tmp_path / "approvals.lock"
    holder = _python(_HOLDER, lock, stdin=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdin is not None
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(LockHeld):
            open_lock(lock, blocking=False)
    finally:
        holder.communicate("\n", timeout=30)
        assert holder.returncode == 0
    fd = open_lock(lock, blocking=False)  # released when the holder exited
    os.close(fd)


def test_lock_held_here_excludes_a_second_process(tmp_path: Path) -> None:
    lock = tmp_path / "secrets.json.lock"
    with interprocess_lock(lock):
        probe = _python(_PROBE, lock)
        out, _ = probe.communicate(timeout=30)
        assert out == "refused\n"
    probe = _python(_PROBE, lock)
    out, _ = probe.communicate(timeout=30)
    assert out == "acquired\n"


def test_lock_file_symlink_refused_with_nofollow(tmp_path: Path) -> None:
    target = tmp_path / "target"
    link = tmp_path / "secrets.json.lock"
    link.symlink_to(target)
    with pytest.raises(OSError), interprocess_lock(link, nofollow=True):
        pass
    assert not target.exists()


def test_public_module_reexports_the_same_primitives() -> None:
    assert host.files.read_regular is read_regular
    assert host.files.atomic_write is atomic_write
    assert host.files.create_exclusive is create_exclusive
    assert host.files.interprocess_lock is interprocess_lock
    assert sorted(host.files.__all__) == host.files.__all__
