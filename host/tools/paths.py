"""Workspace path grammar and race-free resolution beneath a root directory fd.

Two steps, always in this order:

1. :func:`~host.formats.relpath.parse_path` checks the *grammar* of a path the model sent, before any
   filesystem call: relative, UTF-8, at most :data:`MAX_PATH_BYTES` bytes, components of at
   most :data:`MAX_COMPONENT_BYTES` bytes, no NUL or other control character, no absolute
   path, no ``..`` component. ``.`` components and empty components are dropped; ``.`` (or
   a path of only ``.``) names the root. ``..notes.txt`` is an ordinary name. A violation
   is ``INPUT_INVALID`` with the JSON pointer of the field.
2. :class:`Workspace` opens what the path names *relative to the root fd* held since the
   workspace was opened: ``openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`` where the
   kernel has it (Linux ≥ 5.6), else a component walk with ``O_NOFOLLOW`` that refuses
   every symlink. There is never a check-then-open with ``realpath``: the kernel resolves
   the path and refuses an escape during the same open, so a symlink swapped in between a
   check and the open cannot win.

Choices (documented in docs/workspace.md):

- reads follow symlinks that stay beneath the root; an outward one is ``path_escape``;
- writes never traverse a symlink (``RESOLVE_NO_SYMLINKS`` for the directory, ``O_NOFOLLOW``
  for the final component): the protected-path check is then a sound lexical check;
- hard links (``st_nlink > 1``) are refused for reads and writes: a hard link to a file
  outside the root is indistinguishable from the inside, and the kernel cannot tell;
- FIFOs, sockets and devices are refused after an ``O_NONBLOCK`` open (never blocking).

Every refusal of a resolved path is ``POLICY_DENIED`` with ``details["reason"]`` one of
``path_escape``, ``symlink``, ``hard_link``, ``not_regular``, ``protected``, ``denied``;
a missing file is ``INPUT_INVALID`` with ``reason: "not_found"``.
"""

from __future__ import annotations

import ctypes
import errno
import fnmatch
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from host.errors import InputInvalid, PolicyDenied, ToolFailed
from host.formats.relpath import MAX_COMPONENT_BYTES, MAX_PATH_BYTES, RelPath, parse_path

__all__ = [
    "MAX_COMPONENT_BYTES",
    "MAX_PATH_BYTES",
    "RelPath",
    "Workspace",
    "has_openat2",
    "parse_path",
]

_SYS_OPENAT2: Final = 437  # the same number on every Linux architecture (unified table)
_RESOLVE_NO_MAGICLINKS: Final = 0x02
_RESOLVE_NO_SYMLINKS: Final = 0x04
_RESOLVE_BENEATH: Final = 0x08


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_OPENAT2_STATE: list[bool] = []


def has_openat2() -> bool:
    """Whether the kernel offers ``openat2`` (probed once)."""
    if not _OPENAT2_STATE:
        fd = _openat2_raw(-100, ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, _RESOLVE_BENEATH)
        ok = fd >= 0 or ctypes.get_errno() != errno.ENOSYS
        if fd >= 0:
            os.close(fd)
        _OPENAT2_STATE.append(ok)
    return _OPENAT2_STATE[0]


def _openat2_raw(dirfd: int, path: str, flags: int, resolve: int) -> int:
    how = _OpenHow(flags, 0, resolve)
    return int(_libc.syscall(_SYS_OPENAT2, dirfd, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how)))


def _refused(rel: RelPath, reason: str, message: str) -> PolicyDenied:
    return PolicyDenied(
        f"path {rel.text!r} {message}",
        reason=reason,
        path=rel.text,
        hint="Only regular files beneath the workspace root are reachable (docs/workspace.md).",
    )


class Workspace:
    """A workspace root granted by the operator, held as a directory fd.

    Args:
        root: the directory (opened once, here; later renames of the path do not matter).
        protected: relative paths (and everything beneath them) refused for writes.
        deny: glob patterns (``fnmatch``, matched against the relative path and each of
            its parent directories) refused for reads and writes and hidden from listings.

    Raises:
        ToolFailed: the root cannot be opened as a directory (``reason: "root_unavailable"``).
    """

    __slots__ = ("_force_walk", "deny", "fd", "protected", "root")

    def __init__(self, root: Path, *, protected: Sequence[str], deny: Sequence[str]) -> None:
        self.root = Path(root)
        try:
            self.fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise ToolFailed(
                f"workspace root {str(root)!r} cannot be opened: {exc.strerror}", reason="root_unavailable"
            ) from exc
        self.protected = tuple(protected)
        self.deny = tuple(deny)
        self._force_walk = False  # tests: exercise the O_NOFOLLOW component walk

    def close(self) -> None:
        """Close the root fd (idempotent)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    # -- policy on relative paths ------------------------------------------------------

    def is_denied(self, text: str) -> bool:
        """Whether the operator's deny list matches ``text`` or one of its parents."""
        if not self.deny or text == ".":
            return False
        parts = text.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        return any(fnmatch.fnmatchcase(p, pattern) for p in prefixes for pattern in self.deny)

    def is_protected(self, text: str) -> bool:
        """Whether ``text`` lies at or beneath a protected path (writes only)."""
        return any(text == p or text.startswith(p + "/") for p in self.protected)

    def check_read(self, rel: RelPath) -> None:
        """Raises PolicyDenied (``denied``) for a path on the deny list."""
        if self.is_denied(rel.text):
            raise _refused(rel, "denied", "is on the operator's deny list")

    def check_write(self, rel: RelPath) -> None:
        """Raises PolicyDenied (``denied``/``protected``) for a path writes may not touch."""
        self.check_read(rel)
        if not rel.parts or self.is_protected(rel.text):
            raise _refused(rel, "protected", "is protected (.git, Stockade state, lock, keys, audit log)")

    # -- opening -----------------------------------------------------------------------

    def open_dir(self, rel: RelPath, *, follow: bool) -> int:
        """Open the directory ``rel`` beneath the root (``follow``: symlinks beneath the
        root allowed, as for reads; else none). The caller closes the fd.

        Raises:
            PolicyDenied: ``path_escape`` or ``symlink``; InputInvalid: ``not_found``.
        """
        return self._open(rel, os.O_RDONLY | os.O_DIRECTORY, follow=follow)

    def open_file(self, rel: RelPath, *, follow: bool) -> tuple[int, os.stat_result]:
        """Open the regular file ``rel`` read-only; returns the fd and its ``fstat``.

        Raises:
            PolicyDenied: ``path_escape``, ``symlink``, ``hard_link``, ``not_regular``.
            InputInvalid: ``not_found``.
        """
        if not rel.parts:
            raise _refused(rel, "not_regular", "is the workspace root, not a file")
        # O_PATH first: a FIFO or device is identified by fstat without ever being opened
        # (no blocking, no driver side effect); the regular file is then reopened through
        # its own fd, which names the same inode (no second path resolution).
        handle = self._open(rel, os.O_PATH, follow=follow)
        try:
            info = os.fstat(handle)
            if stat.S_ISLNK(info.st_mode):
                raise _refused(rel, "symlink", "is a symlink, which this operation does not follow")
            if not stat.S_ISREG(info.st_mode):
                raise _refused(
                    rel, "not_regular", "is not a regular file (directory, FIFO, socket or device)"
                )
            if info.st_nlink > 1:
                raise _refused(
                    rel, "hard_link", "has more than one hard link (it may be a file outside the root)"
                )
            if follow:
                self._check_resolved(handle, rel)
            fd = os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
        finally:
            os.close(handle)
        return fd, info

    def _check_resolved(self, fd: int, rel: RelPath) -> None:
        """After following symlinks beneath the root, the deny list applies to where the
        path led too (a symlink must not be a way around it)."""
        if not self.deny:
            return
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            root = os.readlink(f"/proc/self/fd/{self.fd}")
        except OSError as exc:  # pragma: no cover - /proc is mounted on every supported host
            raise _refused(rel, "denied", "cannot be checked against the deny list") from exc
        inner = os.path.relpath(target, root)
        if inner.startswith("..") or self.is_denied(inner):
            raise _refused(rel, "denied", "leads to a path on the operator's deny list")

    def _open(self, rel: RelPath, flags: int, *, follow: bool) -> int:
        flags |= os.O_CLOEXEC
        if self.fd < 0:
            raise RuntimeError("this workspace is closed")
        if has_openat2() and not self._force_walk:
            resolve = _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS
            if not follow:
                resolve |= _RESOLVE_NO_SYMLINKS
            fd = _openat2_raw(self.fd, rel.text, flags, resolve)
            if fd < 0:
                raise self._translate(rel, ctypes.get_errno())
            return fd
        return self._walk(rel, flags)

    def _walk(self, rel: RelPath, flags: int) -> int:
        """Component walk with ``O_NOFOLLOW`` from the root fd: every symlink refused."""
        current = os.dup(self.fd)
        try:
            for index, part in enumerate(rel.parts):
                last = index == len(rel.parts) - 1
                want = (
                    flags | os.O_NOFOLLOW
                    if last
                    else os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
                )
                try:
                    nxt = os.open(part, want, dir_fd=current)
                except OSError as exc:
                    code = exc.errno or 0
                    if code == errno.ENOTDIR and not last:
                        try:
                            if stat.S_ISLNK(os.stat(part, dir_fd=current, follow_symlinks=False).st_mode):
                                code = errno.ELOOP
                        except OSError:
                            pass
                    raise self._translate(rel, code) from exc
                os.close(current)
                current = nxt
            if not rel.parts:
                nxt = os.open(".", flags, dir_fd=current)
                os.close(current)
                current = nxt
            return current
        except BaseException:
            os.close(current)
            raise

    @staticmethod
    def _translate(rel: RelPath, code: int) -> Exception:
        if code == errno.EXDEV:
            return _refused(rel, "path_escape", "leads outside the workspace root")
        if code == errno.ELOOP:
            return _refused(rel, "symlink", "goes through a symlink, which this operation does not follow")
        if code in (errno.ENOENT,):
            return InputInvalid(
                f"no file or directory {rel.text!r} in the workspace",
                pointer="/path",
                reason="not_found",
                path=rel.text,
            )
        if code == errno.ENOTDIR:
            return InputInvalid(
                f"{rel.text!r}: a component is not a directory",
                pointer="/path",
                reason="not_found",
                path=rel.text,
            )
        if code in (errno.ENXIO, errno.ENODEV):
            return _refused(rel, "not_regular", "is a socket or device")
        if code in (errno.EACCES, errno.EPERM):
            return _refused(rel, "denied", "is not readable by the host")
        return ToolFailed(f"cannot open {rel.text!r}: {os.strerror(code)}", reason="io_error", path=rel.text)
