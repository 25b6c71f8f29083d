"""File helpers shared by the policy stores: bounded reads cached by stat (the primitives
themselves, re-exported here, live in :mod:`host._files`).

Invariants:

- :class:`CachedFile` never serves stale bytes. It trusts a cached read only when the
  file's identity and times (device, inode, size, mtime, ctime) are unchanged *and* the
  file's ctime is older than the moment of that read by more than
  :data:`RACY_MARGIN_NS`. A file changed within that margin is re-read on every call
  (git's "racily clean" rule): a coarse file-system clock can give two writes in the same
  tick identical times, and a revoke must be visible to the very next decision.
- :func:`atomic_write` writes a temporary file in
  the same directory, fsyncs it, renames it over the target with ``os.replace`` and
  fsyncs the directory, so a reader sees the old or the new content, never a mix.
- :func:`read_bounded` opens non-blocking and refuses anything but a regular file, so a
  FIFO or device planted where a policy file belongs cannot hang the host.
- :func:`interprocess_lock` on :func:`sidecar_lock` serializes read-modify-write edits
  between processes with ``fcntl.flock`` on a ``.lock`` file beside the edited one.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from host._files import FileTooLarge, atomic_write, check_trusted, interprocess_lock, read_bounded

__all__ = [
    "RACY_MARGIN_NS",
    "CachedFile",
    "FileTooLarge",
    "atomic_write",
    "interprocess_lock",
    "read_bounded",
    "sidecar_lock",
]

RACY_MARGIN_NS = 2_000_000_000
"""ns; a file whose ctime is this close to (or after) our last read is re-read every time."""

T = TypeVar("T")

_StatKey = tuple[int, int, int, int, int]


def _stat_key(st: os.stat_result) -> _StatKey:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


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
        trusted: refuse the file (:class:`~host._files.UnsafePermissions`, an OSError)
            when another user could change it (:func:`~host._files.check_trusted`).
    """

    def __init__(
        self, path: Path, parse: Callable[[bytes], T], *, max_bytes: int, trusted: bool = False
    ) -> None:
        self.path = path
        self._trusted = trusted
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
        if self._trusted:
            check_trusted(self.path, fst, what="policy file")
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


def sidecar_lock(path: Path) -> Path:
    """The lock file that serializes edits of ``path``: ``<path>.lock`` beside it."""
    return path.with_name(path.name + ".lock")
