"""Bounded reads of untrusted files (host/_files.py, issue 9.7 and 9.8).

Attacks: a lock, manifest, key or policy path that is a directory used to raise a raw
IsADirectoryError and leak one file descriptor per attempt (a long-running host that
retries could run out of descriptors); a FIFO used to block the reader for ever.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from host import FilePolicyEngine
from host._files import open_regular, read_regular
from host.config import HostConfig
from host.errors import LockInvalid, PolicyUnavailable, StockadeError
from host.trust.lock import TrustedKeys, load_lock
from sdk.bundle import read_bundle
from sdk.commands._common import CommandFailed
from sdk.commands.sign import read_key
from sdk.review.lockfile import read_lock

ATTEMPTS = 1000


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _lock(directory: Path) -> None:
    load_lock(directory, config=HostConfig(state_dir=directory.parent / "state"), trusted_keys=None)


def _manifest(directory: Path) -> None:
    read_bundle(directory.parent)  # ``directory`` is named manifest.json


def _policy(directory: Path) -> None:
    FilePolicyEngine(directory).fence()


READERS: dict[str, tuple[Callable[[Path], object], type[Exception], str]] = {
    "lock": (_lock, LockInvalid, "LOCK_INVALID"),
    "lock-for-editing": (read_lock, LockInvalid, "LOCK_INVALID"),
    "manifest": (_manifest, LockInvalid, "LOCK_INVALID"),
    "trusted-keys": (TrustedKeys.load, LockInvalid, "LOCK_INVALID"),
    "private-key": (read_key, CommandFailed, "KEY_UNREADABLE"),
    "policy": (_policy, PolicyUnavailable, "POLICY_UNAVAILABLE"),
}


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors through /proc")
@pytest.mark.parametrize("what", sorted(READERS))
def test_directory_in_place_of_a_file_refused_without_leaking_descriptors(tmp_path: Path, what: str) -> None:
    reader, error, code = READERS[what]
    directory = tmp_path / "bundle" / "manifest.json"
    directory.mkdir(parents=True)
    reader_fds = _open_fds()
    for _ in range(ATTEMPTS):
        with pytest.raises(error) as caught:
            reader(directory)
        assert caught.value.code == code  # type: ignore[attr-defined]
    assert _open_fds() == reader_fds


def test_directory_refused_with_callers_error_class(tmp_path: Path) -> None:
    with pytest.raises(LockInvalid, match="is not a regular file") as caught:
        read_regular(tmp_path, 100, what="lock file", error=LockInvalid)
    assert caught.value.details["path"] == str(tmp_path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_fifo_refused_at_once_instead_of_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "stockade.lock"
    os.mkfifo(fifo)
    before = _open_fds()
    with pytest.raises(LockInvalid, match="is not a regular file"):
        read_regular(fifo, 100, what="lock file", error=LockInvalid)  # no writer: would block
    with pytest.raises(StockadeError, match="is not a regular file"):
        open_regular(fifo, None, what="audit log", error=LockInvalid)
    assert _open_fds() == before


def test_open_regular_checks_size_and_returns_an_open_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    with open_regular(path, 10, what="f", error=LockInvalid) as handle:
        assert handle.read() == b"x" * 10
    with pytest.raises(LockInvalid, match="over the limit of 9"):
        open_regular(path, 9, what="f", error=LockInvalid)
