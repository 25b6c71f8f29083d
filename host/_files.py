"""File primitives for host state and untrusted files: one implementation each.

Private to ``host``; ``sdk`` and other outside callers use the public re-exports in
:mod:`host.files`.

Invariants:

- **Bounded regular-file reads** (:func:`read_bounded`, :func:`open_regular`,
  :func:`read_regular`) open non-blocking (a FIFO opens at once instead of waiting for
  a writer), check the type with ``fstat`` on the open descriptor (a swap between check
  and read is harmless), refuse FIFOs, devices, sockets and directories, never read more
  than the bound plus one byte, and close the descriptor on every refusal.
  With ``nofollow=True`` a symlink in the last path component is refused (``O_NOFOLLOW``).
- **Atomic write** (:func:`atomic_write`): temp file in the same directory, fsync,
  ``os.replace``, fsync of the directory: a crash leaves the old or the new content,
  never a torn file (CONTRIBUTING.md principle 8).
- **Exclusive create** (:func:`create_exclusive`): the content is written and fsynced in
  a temp file first, then hard-linked into place, so ``path`` never exists half-written
  and an existing file (even a dangling symlink) is never replaced.
- **Directory swap** (:func:`replace_dir`): a complete staging directory renamed into
  place, the old one moved aside first and removed after the parent is fsynced.
- **Trust files** (``trusted=True`` on the reads, :func:`check_trusted`): a file that
  decides what the host trusts or allows (policy, trusted keys, tokens, the host config
  file) and the state directory are refused when another user could change them, as
  OpenSSH refuses such key files: group- or world-writable, owned by another user (root
  excepted), or in a directory others may write without the sticky bit.
- **Interprocess lock** (:func:`interprocess_lock`, :func:`open_lock`): an exclusive
  ``flock`` on a lock file; closing the descriptor releases it. Without ``fcntl``
  (non-POSIX) locking is a no-op and callers are single-process.

Example::

    with interprocess_lock(path.with_name(path.name + ".lock")):
        data = read_regular(path, 1 << 20, what="approvals file", error=ApprovalInvalid)
        atomic_write(path, edit(data))
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import BinaryIO

from host.errors import StockadeError

_fcntl: ModuleType | None
try:
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - non-POSIX platforms
    _fcntl = None

LOCKING: bool = _fcntl is not None
"""True where :func:`lock_exclusive` really locks (POSIX ``flock``); callers that must
not run unserialized refuse to start when it is False."""

__all__ = [
    "LOCKING",
    "FileTooLarge",
    "LockHeld",
    "NotRegularFile",
    "UnsafePermissions",
    "atomic_write",
    "check_trusted",
    "create_exclusive",
    "fsync_dir",
    "interprocess_lock",
    "lock_exclusive",
    "open_lock",
    "open_regular",
    "read_bounded",
    "read_regular",
    "replace_dir",
]

_CHUNK = 65536


class FileTooLarge(OSError):
    """A file is larger than the caller's bound (its content is unusable, not unreadable)."""


class NotRegularFile(OSError):
    """A path names a directory, FIFO, device or socket where a regular file belongs."""


class UnsafePermissions(PermissionError):
    """A trust file or directory another user could change (see :func:`check_trusted`)."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(errno.EPERM, message)
        self.message = message
        self.hint = hint


def _others_may_change(info: os.stat_result) -> str | None:
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o022:
        who = "group and others" if mode & 0o022 == 0o022 else "group" if mode & 0o020 else "others"
        return f"is writable by {who} (mode {mode:04o})"
    if hasattr(os, "geteuid") and info.st_uid not in (os.geteuid(), 0):
        return f"is owned by another user (uid {info.st_uid})"
    return None


def check_trusted(path: Path, info: os.stat_result | None = None, *, what: str) -> None:
    """Refuse ``path`` (a file or directory) when another user could change it.

    Refused: group- or world-writable; owned by a user other than this one or root; a
    file in a directory that is group- or world-writable without the sticky bit (such a
    directory lets others replace the file), or that another user owns.

    Args:
        path: the trust file or directory.
        info: its ``fstat`` when already open (checked instead of a new ``stat``).
        what: its name for the message (``"policy file"``).

    Raises:
        UnsafePermissions: with the ``chmod``/``chown`` to run as its hint.
    """
    info = os.stat(path) if info is None else info
    problem = _others_may_change(info)
    if problem is not None:
        raise UnsafePermissions(
            f"the {what} {str(path)[:300]} {problem}: another user could change what Stockade "
            "trusts; refused",
            f"Run `chmod go-w {path}` (and `chown` it to this user) if its content is yours.",
        )
    if stat.S_ISDIR(info.st_mode):
        return
    parent = Path(os.path.abspath(path)).parent
    pinfo = os.stat(parent)
    pmode = stat.S_IMODE(pinfo.st_mode)
    owner_problem = hasattr(os, "geteuid") and pinfo.st_uid not in (os.geteuid(), 0)
    if (pmode & 0o022 and not pmode & stat.S_ISVTX) or owner_problem:
        raise UnsafePermissions(
            f"the {what} {str(path)[:300]} is in {str(parent)[:300]}, which another user can change "
            f"(mode {pmode:04o}, uid {pinfo.st_uid}): they could replace the file; refused",
            f"Run `chmod go-w {parent}`, or keep the {what} in a directory only you can write.",
        )


class LockHeld(BlockingIOError):
    """A non-blocking lock request found the lock held by another descriptor or process."""


# -- bounded reads ------------------------------------------------------------------------


def _open_fd(path: Path, *, nofollow: bool) -> tuple[int, os.stat_result]:
    """Open ``path`` read-only and non-blocking; refuse anything but a regular file.

    Raises:
        OSError: cannot be opened (``FileNotFoundError``; ``ELOOP`` for a refused symlink).
        NotRegularFile: not a regular file; the descriptor is closed.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if nofollow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(errno.EINVAL, f"{path} is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def _read_fd(fd: int, limit: int, path: Path) -> bytes:
    """Read at most ``limit`` bytes from ``fd``; :class:`FileTooLarge` past it."""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, min(_CHUNK, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > limit:
            raise FileTooLarge(errno.EFBIG, f"{path} is larger than {limit} bytes")
        chunks.append(chunk)


def read_bounded(path: Path, max_bytes: int, *, nofollow: bool = False) -> tuple[bytes, os.stat_result]:
    """Read a whole regular file of at most ``max_bytes`` bytes (the ``OSError`` face).

    Args:
        path: the file.
        max_bytes: the largest size accepted, in bytes.
        nofollow: refuse a symlink in the last component (``ELOOP``).

    Raises:
        FileNotFoundError: the file does not exist.
        NotRegularFile: a directory, FIFO, device or socket (never blocks on a FIFO).
        FileTooLarge: the file holds more than ``max_bytes`` bytes (read at most one more).
        OSError: any other open or read failure. No descriptor stays open.

    Returns:
        The bytes and the ``fstat`` of the descriptor they were read from.
    """
    fd, info = _open_fd(path, nofollow=nofollow)
    try:
        return _read_fd(fd, max_bytes, path), info
    finally:
        os.close(fd)


def _refusal(exc: OSError, what: str, shown: str, *, nofollow: bool) -> str:
    if isinstance(exc, NotRegularFile):
        return f"{what} {shown!r} is not a regular file"
    if nofollow and exc.errno == errno.ELOOP:
        return f"cannot open {what} {shown!r}: it is a symlink (refused)"
    return f"cannot open {what} {shown!r}: {exc.strerror or exc}"


def read_private(
    path: Path,
    limit: int,
    *,
    what: str,
    error: type[StockadeError],
    raw_missing: bool = False,
) -> bytes:
    """Read a private key file: regular, not a symlink, mode 0600 or stricter, owned by
    this user (the one check of the master, audit and approver keys).

    Args:
        path: the key file.
        limit: the most bytes the caller accepts; one more is read so it can tell.
        what: a name for messages (``"the audit key"``).
        error: the StockadeError class to raise.
        raw_missing: as :func:`open_regular`.

    Raises:
        StockadeError: of class ``error``, as :func:`open_regular`, or readable by group
            or others, or owned by another user.
    """
    with open_regular(path, None, what=what, error=error, nofollow=True, raw_missing=raw_missing) as handle:
        info = os.fstat(handle.fileno())
        if info.st_mode & 0o077:
            raise error(
                f"{what} {path} is accessible by group or others (mode {stat.S_IMODE(info.st_mode):04o})",
                hint=f"Run `chmod 600 {path}`.",
            )
        if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
            raise error(f"{what} {path} is owned by another user")
        return handle.read(limit + 1)


def open_regular(
    path: Path,
    limit: int | None,
    *,
    what: str,
    error: type[StockadeError],
    nofollow: bool = False,
    raw_missing: bool = False,
    trusted: bool = False,
) -> BinaryIO:
    """Open a regular file for reading without ever blocking on it or leaking its descriptor.

    Args:
        path: the file.
        limit: the most bytes accepted (checked against the size at open), or ``None``.
        what: a name for messages (``"manifest.json"``).
        error: the StockadeError class to raise.
        nofollow: refuse a symlink in the last component.
        raw_missing: let a missing file raise the builtin ``FileNotFoundError`` (for
            callers that create the file or treat "absent" as a state) instead of ``error``.
        trusted: a trust file: refuse it when another user could change it (:func:`check_trusted`).

    Raises:
        StockadeError: of class ``error``: missing, a refused symlink, unreadable, not
            regular (directory, FIFO, device), too large, or (``trusted``) changeable by
            another user. No descriptor stays open.
        FileNotFoundError: only with ``raw_missing=True``.

    Returns:
        An open binary file; the caller closes it (``with``).
    """
    shown = str(path)[:300]
    try:
        fd, info = _open_fd(path, nofollow=nofollow)
    except FileNotFoundError:
        if raw_missing:
            raise
        raise error(f"cannot open {what} {shown!r}: No such file or directory", path=shown) from None
    except OSError as exc:
        raise error(_refusal(exc, what, shown, nofollow=nofollow), path=shown) from None
    if limit is not None and info.st_size > limit:
        os.close(fd)
        raise error(f"{what} is {info.st_size} bytes, over the limit of {limit}", path=shown)
    if trusted:
        try:
            check_trusted(path, info, what=what)
        except UnsafePermissions as exc:
            os.close(fd)
            raise error(exc.message, hint=exc.hint, path=shown) from None
    return os.fdopen(fd, "rb")


def read_regular(
    path: Path,
    limit: int,
    *,
    what: str,
    error: type[StockadeError],
    nofollow: bool = False,
    raw_missing: bool = False,
    trusted: bool = False,
) -> bytes:
    """Read a regular file of at most ``limit`` bytes, once (the StockadeError face).

    Args:
        path: the file.
        limit: the most bytes accepted.
        what: a name for messages (``"manifest.json"``).
        error: the StockadeError class to raise.
        nofollow: refuse a symlink in the last component.
        raw_missing: let a missing file raise the builtin ``FileNotFoundError``.
        trusted: a trust file: refuse it when another user could change it (:func:`check_trusted`).

    Raises:
        StockadeError: of class ``error``: missing, a refused symlink, unreadable, not
            regular (a directory, FIFO or device), too large, or (``trusted``) changeable
            by another user. No descriptor stays open.
        FileNotFoundError: only with ``raw_missing=True``.

    Returns:
        The bytes.
    """
    shown = str(path)[:300]
    opened = open_regular(
        path, limit, what=what, error=error, nofollow=nofollow, raw_missing=raw_missing, trusted=trusted
    )
    with opened as handle:
        try:
            return _read_fd(handle.fileno(), limit, path)
        except FileTooLarge:
            raise error(f"{what} grew past the limit of {limit} bytes while reading", path=shown) from None
        except OSError as exc:
            raise error(f"cannot read {what} {shown!r}: {exc.strerror}", path=shown) from None


# -- writes -------------------------------------------------------------------------------


def _write_temp(path: Path, data: bytes, mode: int) -> str:
    """Write ``data`` to a new, fsynced temp file beside ``path`` and return its name.

    ``mkstemp`` creates it with ``O_EXCL`` (and ``O_NOFOLLOW`` where the platform has it);
    on failure it is removed and the error propagates.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def atomic_write(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` atomically and durably.

    Temp file in the same directory, write, flush, fsync, ``os.replace``, fsync the
    directory: a crash leaves either the old or the new file, never a torn one.

    Args:
        path: the file to create or replace (a symlink at ``path`` is replaced, not followed).
        data: the new content.
        mode: the new file's permission bits.

    Raises:
        OSError: the write failed; ``path`` is unchanged and the temp file removed.
    """
    tmp = _write_temp(path, data, mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def create_exclusive(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Create ``path`` holding ``data``; never replace anything already there.

    The content is written to a new temp file beside ``path`` (``O_EXCL``), fsynced,
    then hard-linked to ``path`` (the link fails if anything, even a dangling
    symlink, is there) and the directory fsynced. So ``path`` either does not exist or
    holds all of ``data``: a concurrent reader never sees a half-written file.

    Args:
        path: the file to create.
        data: its content.
        mode: its permission bits.

    Raises:
        FileExistsError: something is already at ``path``; it is unchanged.
        OSError: the file cannot be written; nothing is left behind.
    """
    tmp = _write_temp(path, data, mode)
    try:
        os.link(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    fsync_dir(path.parent)


def replace_dir(staging: Path, destination: Path) -> None:
    """Swap a fully written directory into place with renames, then fsync the parent.

    An existing ``destination`` (even a symlink) is first renamed into a fresh temp
    directory beside it, ``staging`` is renamed to ``destination``, the parent directory
    is fsynced and the old copy removed. Nothing is ever half-written under
    ``destination``: between the two renames it is briefly absent, never mixed.

    Args:
        staging: the complete new directory, on the same file system (beside
            ``destination``); the caller has written and, where it matters, fsynced it.
        destination: where it goes.

    Raises:
        OSError: a rename failed; ``staging`` is left for the caller to remove.
    """
    parent = destination.parent
    old: Path | None = None
    if os.path.lexists(destination):
        old = Path(tempfile.mkdtemp(dir=parent, prefix=f".{destination.name[:16]}.", suffix=".old"))
        os.replace(destination, old / "previous")
    os.replace(staging, destination)
    fsync_dir(parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def fsync_dir(directory: Path) -> None:
    """fsync a directory so a rename or a new file in it survives a crash (best effort:
    not every platform can fsync a directory)."""
    with contextlib.suppress(OSError):
        dir_fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


# -- interprocess locks -------------------------------------------------------------------


def lock_exclusive(fd: int, *, blocking: bool = True) -> None:
    """Take an exclusive ``flock`` on an open descriptor (a no-op without ``fcntl``).

    Args:
        fd: the descriptor; closing it (or every duplicate) releases the lock.
        blocking: wait for the lock; when False, refuse at once if it is held.

    Raises:
        LockHeld: ``blocking=False`` and another descriptor holds the lock.
        OSError: the lock cannot be taken.
    """
    if _fcntl is None:  # pragma: no cover - non-POSIX platforms: one process assumed
        return
    try:
        _fcntl.flock(fd, _fcntl.LOCK_EX | (0 if blocking else _fcntl.LOCK_NB))
    except OSError as exc:
        if not blocking and exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
            raise LockHeld(exc.errno, "the lock is held by another process") from None
        raise


def open_lock(path: Path, *, blocking: bool = True, nofollow: bool = False) -> int:
    """Open (creating, mode 0600) the lock file ``path`` and lock it exclusively.

    Args:
        path: the lock file (its content is never read or written).
        blocking: wait for the lock (see :func:`lock_exclusive`).
        nofollow: refuse a symlink at ``path``.

    Raises:
        LockHeld: ``blocking=False`` and the lock is held; no descriptor stays open.
        OSError: the lock file cannot be opened or locked; no descriptor stays open.

    Returns:
        The descriptor holding the lock; ``os.close`` releases it.
    """
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
    if nofollow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o600)
    try:
        lock_exclusive(fd, blocking=blocking)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def interprocess_lock(path: Path, *, nofollow: bool = False) -> Iterator[None]:
    """Hold an exclusive, blocking ``flock`` on the lock file ``path`` for the block.

    Serializes read-modify-write edits between processes (and between threads that
    each enter the block: every entry opens its own descriptor).

    Args:
        path: the lock file, created 0600 if missing.
        nofollow: refuse a symlink at ``path``.

    Raises:
        OSError: the lock file cannot be opened or locked.
    """
    fd = open_lock(path, nofollow=nofollow)
    try:
        yield
    finally:
        os.close(fd)
