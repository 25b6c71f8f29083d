"""Atomic, durable file replacement and creation beneath a directory fd.

:func:`atomic_replace` writes a temp file beside the target (``O_EXCL``, mode kept),
fsyncs it, re-checks that the target still holds the expected bytes and the same inode,
renames over it and fsyncs the directory. :func:`atomic_create` does the same for a name
that must not exist yet, with ``link`` (which never replaces) instead of ``rename``. A crash
leaves the old file (or no file) and a temp file that :func:`sweep_temp_files` removes.
"""

from __future__ import annotations

import os
import secrets as _random
import stat
from collections.abc import Callable
from typing import Final

from host.canonical import sha256_hex
from host.errors import InputInvalid, PolicyDenied
from host.tools.base import stale

__all__ = ["TEMP_PREFIX", "atomic_create", "atomic_replace", "sweep_temp_files"]

TEMP_PREFIX: Final = ".stockade-edit."
"""Name prefix of a write's temp file (``.stockade-edit.<pid>.<random>.tmp``)."""


def _write_temp(dir_fd: int, data: bytes, mode: int) -> str:
    """A new, fsynced temp file in ``dir_fd`` holding ``data`` with ``mode``; its name."""
    temp = f"{TEMP_PREFIX}{os.getpid()}.{_random.token_hex(8)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    out = os.open(temp, flags, 0o600, dir_fd=dir_fd)
    try:
        os.fchmod(out, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(out, view) :]
        os.fsync(out)
    except BaseException:
        os.close(out)
        _unlink(dir_fd, temp)
        raise
    os.close(out)
    return temp


def _unlink(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def atomic_create(dir_fd: int, name: str, data: bytes, *, mode: int = 0o644) -> None:
    """Create ``name`` in ``dir_fd`` holding ``data``; never replaces an existing entry.

    Raises:
        InputInvalid: ``reason: "exists"`` (a file, directory or symlink has that name).
    """
    temp = _write_temp(dir_fd, data, mode)
    try:
        os.link(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except FileExistsError as exc:
        raise InputInvalid(
            f"{name!r} already exists; fs.write_file only creates new files", pointer="/path", reason="exists"
        ) from exc
    finally:
        _unlink(dir_fd, temp)
    os.fsync(dir_fd)


def atomic_replace(
    dir_fd: int,
    name: str,
    data: bytes,
    *,
    expect_sha256: str,
    max_bytes: int,
    tool: str,
    before_rename: Callable[[], None] | None = None,
) -> None:
    """Replace ``name`` in the directory ``dir_fd`` with ``data``, atomically and durably.

    The current file is re-read through ``O_NOFOLLOW`` (at most ``max_bytes``); if its
    sha256 is not ``expect_sha256`` (or it has another link), nothing is written. Just
    before the rename, the target must still be the same inode, size and mtime.

    Raises:
        ApprovalInvalid: ``stale`` (the file changed). PolicyDenied: not a plain file.
    """
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            raise PolicyDenied(f"{name!r} is no longer a plain file", reason="not_regular")
        current = os.read(fd, max_bytes + 1) if info.st_size <= max_bytes else b""
    finally:
        os.close(fd)
    if len(current) > max_bytes or sha256_hex(current) != expect_sha256:
        raise stale(tool)
    temp = _write_temp(dir_fd, data, stat.S_IMODE(info.st_mode))
    try:
        if before_rename is not None:
            before_rename()
        now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        same = (now.st_ino, now.st_dev, now.st_mtime_ns, now.st_size)
        if same != (info.st_ino, info.st_dev, info.st_mtime_ns, info.st_size):
            raise stale(tool)
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        _unlink(dir_fd, temp)
        raise
    os.fsync(dir_fd)


def sweep_temp_files(dir_fd: int) -> int:
    """Remove edit temp files left in ``dir_fd`` by processes that no longer run
    (a crash between temp write and rename). Returns how many were removed."""
    removed = 0
    with os.scandir(dir_fd) as found:
        names = [e.name for e in found]
    for name in names:
        if not (name.startswith(TEMP_PREFIX) and name.endswith(".tmp")):
            continue
        pid_text = name[len(TEMP_PREFIX) :].split(".", 1)[0]
        if pid_text.isdigit() and int(pid_text) != os.getpid() and _alive(int(pid_text)):
            continue
        if pid_text.isdigit() and int(pid_text) == os.getpid():
            continue
        try:
            os.unlink(name, dir_fd=dir_fd)
            removed += 1
        except FileNotFoundError:
            pass
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
