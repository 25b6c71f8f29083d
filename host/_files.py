"""Bounded reads of untrusted files and atomic writes of host state (STYLE §8, §9).

Private helpers; not part of the public API.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO

from host.errors import StockadeError

__all__ = ["atomic_write", "fsync_dir", "open_regular", "read_regular"]


def open_regular(path: Path, limit: int | None, *, what: str, error: type[StockadeError]) -> BinaryIO:
    """Open a regular file for reading without ever blocking on it or leaking its descriptor.

    The file is opened non-blocking (a FIFO opens at once instead of waiting for a
    writer) and checked with ``fstat`` on the open descriptor, so a swap between check
    and read is harmless. FIFOs, devices, sockets and directories are refused. On any
    refusal the descriptor is closed before the error propagates (issue 9.7: a directory
    used to leak one descriptor per attempt).

    Args:
        path: the file.
        limit: the most bytes accepted (checked against the size at open), or ``None``.
        what: a name for messages (``"manifest.json"``).
        error: the StockadeError class to raise.

    Raises:
        StockadeError: of class ``error``: missing, unreadable, not regular, or too large.

    Returns:
        An open binary file; the caller closes it (``with``).
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    shown = str(path)[:300]
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise error(f"cannot open {what} {shown!r}: {exc.strerror}", path=shown) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{what} {shown!r} is not a regular file", path=shown)
        if limit is not None and info.st_size > limit:
            raise error(f"{what} is {info.st_size} bytes, over the limit of {limit}", path=shown)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    return handle


def read_regular(path: Path, limit: int, *, what: str, error: type[StockadeError]) -> bytes:
    """Read a regular file of at most ``limit`` bytes, once (see :func:`open_regular`).

    Args:
        path: the file.
        limit: the most bytes accepted.
        what: a name for messages (``"manifest.json"``).
        error: the StockadeError class to raise.

    Raises:
        StockadeError: of class ``error``: missing, unreadable, not regular (a directory,
            FIFO or device), or too large. No descriptor stays open.

    Returns:
        The bytes.
    """
    shown = str(path)[:300]
    with open_regular(path, limit, what=what, error=error) as handle:
        try:
            data = handle.read(limit + 1)
        except OSError as exc:
            raise error(f"cannot read {what} {shown!r}: {exc.strerror}", path=shown) from None
    if len(data) > limit:
        raise error(f"{what} grew past the limit of {limit} bytes while reading", path=shown)
    return data


def atomic_write(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` atomically and durably.

    Temp file in the same directory, write, flush, fsync, ``os.replace``, fsync the
    directory: a crash leaves either the old or the new file, never a torn one.

    Raises:
        OSError: the write failed; ``path`` is unchanged and the temp file removed.
    """
    directory = path.parent
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


def fsync_dir(directory: Path) -> None:
    """fsync a directory so a rename or a new file in it survives a crash (best effort:
    not every platform can fsync a directory)."""
    with contextlib.suppress(OSError):
        dir_fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
