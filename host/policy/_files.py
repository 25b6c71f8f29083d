"""File helpers shared by the policy stores: bounded reads cached by stat, atomic writes.

Invariants:

- :class:`CachedFile` never serves stale bytes. It trusts a cached read only when the
  file's identity and times (device, inode, size, mtime, ctime) are unchanged *and* the
  file's ctime is older than the moment of that read by more than
  :data:`RACY_MARGIN_NS`. A file changed within that margin is re-read on every call
  (git's "racily clean" rule): a coarse file-system clock can give two writes in the same
  tick identical times, and a revoke must be visible to the very next decision.
- :func:`atomic_write` (re-exported from :mod:`host._files`) writes a temporary file in
  the same directory, fsyncs it, renames it over the target with ``os.replace`` and
  fsyncs the directory, so a reader sees the old or the new content, never a mix.
- :func:`read_bounded` opens non-blocking and refuses anything but a regular file, so a
  FIFO or device planted where a policy file belongs cannot hang the host.
- :func:`interprocess_lock` serializes read-modify-write edits between processes with
  ``fcntl.flock`` on a sidecar ``.lock`` file (where ``fcntl`` exists).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Generic, TypeVar

from host._files import atomic_write

_fcntl: ModuleType | None
try:
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - non-POSIX platforms
    _fcntl = None

__all__ = [
    "RACY_MARGIN_NS",
    "CachedFile",
    "FileTooLarge",
    "atomic_write",
    "interprocess_lock",
    "read_bounded",
]

RACY_MARGIN_NS = 2_000_000_000
"""ns; a file whose ctime is this close to (or after) our last read is re-read every time."""

T = TypeVar("T")

_StatKey = tuple[int, int, int, int, int]


class FileTooLarge(OSError):
    """A file is larger than the caller's bound (its content is unusable, not unreadable)."""


def _stat_key(st: os.stat_result) -> _StatKey:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def read_bounded(path: Path, max_bytes: int) -> tuple[bytes, os.stat_result]:
    """Read a whole regular file of at most ``max_bytes`` bytes.

    Args:
        path: the file.
        max_bytes: the largest size accepted, in bytes.

    Raises:
        OSError: the file cannot be opened or read, is not a regular file
            (``IsADirectoryError``).
        FileTooLarge: the file is larger than ``max_bytes``.

    Returns:
        The bytes and the ``fstat`` of the descriptor they were read from.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise IsADirectoryError(f"{path} is not a regular file")
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            total += len(chunk)
            if total > max_bytes:
                raise FileTooLarge(errno.EFBIG, f"{path} is larger than {max_bytes} bytes")
            chunks.append(chunk)
        return b"".join(chunks), st
    finally:
        os.close(fd)


@dataclass(slots=True)
class _Entry(Generic[T]):
    key: _StatKey
    stable: bool
    data: bytes
    value: T


class CachedFile(Generic[T]):
    """A file parsed once per content, re-validated by ``stat`` on every access.

    Args:
        path: the file.
        parse: turns the bytes into a value; exceptions propagate to the caller and
            nothing is cached.
        max_bytes: the largest file accepted, in bytes.
    """

    def __init__(self, path: Path, parse: Callable[[bytes], T], *, max_bytes: int) -> None:
        self.path = path
        self._parse = parse
        self._max_bytes = max_bytes
        self._entry: _Entry[T] | None = None
        self._lock = threading.Lock()

    def get(self) -> T | None:
        """The parsed current content, or ``None`` if the file does not exist.

        Raises:
            OSError: the file exists but cannot be read (or is too large).
            Exception: whatever ``parse`` raises for bad content.

        Returns:
            The parsed value of the file's current bytes.
        """
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        entry = self._entry
        if entry is not None and entry.stable and entry.key == _stat_key(st):
            return entry.value
        read_at = time.time_ns()
        try:
            data, fst = read_bounded(self.path, self._max_bytes)
        except FileNotFoundError:
            return None
        key = _stat_key(fst)
        stable = fst.st_ctime_ns < read_at - RACY_MARGIN_NS
        with self._lock:
            entry = self._entry
            if entry is not None and entry.data == data:
                self._entry = _Entry(key, stable, data, entry.value)
                return entry.value
        value = self._parse(data)
        with self._lock:
            self._entry = _Entry(key, stable, data, value)
        return value

    def invalidate(self) -> None:
        """Forget the cached content; the next :meth:`get` reads the file."""
        with self._lock:
            self._entry = None


@contextlib.contextmanager
def interprocess_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``<path>.lock`` (no-op where ``fcntl`` is missing).

    Args:
        path: the file being edited; the lock file sits next to it.

    Raises:
        OSError: the lock file cannot be created.
    """
    if _fcntl is None:  # pragma: no cover - non-POSIX platforms
        yield
        return
    lock_path = path.with_name(path.name + ".lock")
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        _fcntl.flock(fd, _fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
