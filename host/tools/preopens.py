"""Plugins read the workspace through read-only preopens (a manifest's ``workspace.read``).

A package may declare directories of the workspace its tools read
(``workspace.read = ["docs", "src"]``, :class:`~host.formats.manifest.WorkspaceAccess`).
For each call, :func:`open_plugin_reads` opens each declared directory beneath the root
the operator granted to the *calling principal* and hands it to the sandbox as a
read-only WASI preopen at ``/workspace/<path>`` (``/workspace`` for ``.``). The root
comes only from the host configuration; a principal without a grant gets no preopen.

How a directory is opened: with the same race-free resolution as the ``fs.*`` tools
(:meth:`~host.tools.paths.Workspace.open_dir`: ``openat2(RESOLVE_BENEATH)``, symlinks
beneath the root followed, an outward one refused), then given to wasmtime as
``/proc/self/fd/<fd>``, so wasmtime opens exactly that inode and never resolves the
path again. Inside the preopen wasmtime's own capability-based resolution refuses
``..``, absolute paths and symlinks leading out, and ``fs_mutable=False`` refuses every
change (create, write, rename, remove, link).

A declared directory is **withheld** (the call runs without it, and the audit record
says which and why) when:

- ``no_workspace``: the principal has no workspace grant;
- ``not_found`` / ``path_escape`` / ``not_directory``: it does not exist beneath the
  root, leads outside it, or is not a directory;
- ``denied``: the operator's deny list matches it, a parent, or *could match something
  beneath it*. A preopen cannot hide single entries, so any deny pattern whose literal
  start (before its first ``*``, ``?`` or ``[``) is compatible with the directory's own
  path withholds it; ``*.env`` therefore withholds every directory. Sound and cheap,
  never a tree walk;
- ``protected``: a Stockade file (state directory, lock, audit log) lies at or beneath
  it, or it lies beneath one.

Documented limit: a **hard link** inside a declared directory to a file outside the root
is readable through the preopen (the kernel cannot tell it from the inside; the ``fs.*``
tools refuse ``st_nlink > 1``, a WASI preopen cannot). Checking would mean walking the
tree on every call, so the host does not; an operator who cannot rule such links out
should not grant the root.

FIFOs: a guest opening a FIFO for reading blocks inside wasmtime's ``open`` until a
writer appears, and a blocked read waits for data; neither returns to wasm, so the
epoch deadline cannot stop it (measured: the call hung past its deadline until the
process was killed). :func:`unblock_fifos_after` bounds it: once a call with preopens
is past its deadline plus :data:`FIFO_GRACE_S`, the host walks the declared
directories (at most :data:`FIFO_SCAN_ENTRIES` entries) and, for every FIFO it finds,
opens it for writing without blocking (which succeeds only if a reader waits), writes
one newline and closes it. The guest's ``open`` or ``read`` returns, the guest runs
wasm again and the epoch deadline ends the call as ``SANDBOX_TIMEOUT``. The walk
costs nothing on a call that ends in time.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from host.errors import InputInvalid, PolicyDenied, ToolFailed
from host.formats.relpath import parse_path
from host.runtime.sandbox import Preopen
from host.tools.paths import Workspace

__all__ = [
    "FIFO_GRACE_S",
    "FIFO_SCAN_ENTRIES",
    "GUEST_ROOT",
    "PluginReads",
    "guest_path",
    "open_plugin_reads",
    "unblock_fifos_after",
]

GUEST_ROOT: Final = "/workspace"
"""Where a plugin sees the workspace: ``/workspace/docs`` for a declared ``docs``."""

_GLOB_CHARS: Final = "*?["
FIFO_GRACE_S: Final = 0.5  # seconds past a call's deadline before its FIFOs are unblocked
FIFO_SCAN_ENTRIES: Final = 100_000  # entries walked per unblocking pass, over all preopens


def guest_path(declared: str) -> str:
    """The guest path of a declared directory (``.`` is :data:`GUEST_ROOT` itself)."""
    return GUEST_ROOT if declared == "." else f"{GUEST_ROOT}/{declared}"


@dataclass(slots=True)
class PluginReads:
    """The preopens of one call, and what was withheld. Close it after the call.

    Attributes:
        preopens: the read-only preopens (their fds are owned here).
        withheld: ``(declared path, reason)`` for every declared directory not given.
    """

    preopens: list[Preopen] = field(default_factory=list)
    withheld: list[tuple[str, str]] = field(default_factory=list)

    def close(self) -> None:
        """Close every fd (idempotent)."""
        while self.preopens:
            os.close(self.preopens.pop().fd)

    def record(self) -> dict[str, Any]:
        """The audit fields: the guest paths given and the declared paths withheld."""
        return {
            "read_only": [p.guest_path for p in self.preopens],
            "withheld": [{"path": path, "reason": reason} for path, reason in self.withheld],
        }


def open_plugin_reads(
    workspace: Workspace | None, declared: Sequence[str], *, internal: Sequence[str]
) -> PluginReads:
    """Open each declared directory beneath ``workspace`` for one call.

    Args:
        workspace: the principal's workspace, or None when it has no grant.
        declared: the manifest's ``workspace.read`` entries (already in normal form).
        internal: Stockade's own files inside the root, as relative paths.

    Returns:
        The preopens and what was withheld (never raises for a withheld path).
    """
    reads = PluginReads()
    if workspace is None:
        reads.withheld = [(path, "no_workspace") for path in declared]
        return reads
    try:
        for path in declared:
            reason = _policy_reason(workspace, path, internal)
            if reason is None:
                reason = _open_into(reads, workspace, path, internal)
            if reason is not None:
                reads.withheld.append((path, reason))
    except BaseException:
        reads.close()
        raise
    return reads


def _open_into(reads: PluginReads, workspace: Workspace, path: str, internal: Sequence[str]) -> str | None:
    """Open ``path`` and append its preopen; the withholding reason if it cannot be given."""
    try:
        fd = workspace.open_dir(parse_path(path), follow=True)
    except PolicyDenied as exc:
        return str(exc.details.get("reason", "denied"))
    except InputInvalid:
        return "not_found"
    except ToolFailed:
        return "not_directory"
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):  # pragma: no cover - O_DIRECTORY refuses first
            raise _Withheld("not_directory")
        resolved = _inner(workspace, fd)  # where symlinks beneath the root led
        if resolved is None:
            raise _Withheld("path_escape")
        if resolved != path and (reason := _policy_reason(workspace, resolved, internal)) is not None:
            raise _Withheld(reason)
    except _Withheld as withheld:
        os.close(fd)
        return withheld.reason
    except BaseException:
        os.close(fd)
        raise
    reads.preopens.append(Preopen(fd=fd, guest_path=guest_path(path)))
    return None


class _Withheld(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _inner(workspace: Workspace, fd: int) -> str | None:
    """The path of ``fd`` relative to the root, or None when it is not beneath it."""
    target = os.readlink(f"/proc/self/fd/{fd}")
    root = os.readlink(f"/proc/self/fd/{workspace.fd}")
    inner = os.path.relpath(target, root)
    if inner == ".." or inner.startswith("../"):
        return None
    return inner


def _policy_reason(workspace: Workspace, path: str, internal: Sequence[str]) -> str | None:
    if workspace.is_denied(path) or any(_may_reach(pattern, path) for pattern in workspace.deny):
        return "denied"
    if any(_overlaps(path, own) for own in internal):
        return "protected"
    return None


def _may_reach(pattern: str, directory: str) -> bool:
    """Whether ``pattern`` could match a path at or beneath ``directory`` (conservative)."""
    if directory == ".":
        return True
    cut = min((i for i, ch in enumerate(pattern) if ch in _GLOB_CHARS), default=len(pattern))
    literal, beneath = pattern[:cut], directory + "/"
    if cut == len(pattern):  # no glob: the pattern is one exact path
        return pattern == directory or pattern.startswith(beneath) or beneath.startswith(pattern + "/")
    return literal.startswith(beneath) or beneath.startswith(literal)


def _overlaps(path: str, own: str) -> bool:
    return path in (".", own) or own.startswith(path + "/") or path.startswith(own + "/")


def unblock_fifos_after(reads: PluginReads, deadline_s: float) -> contextlib.AbstractContextManager[None]:
    """Around a plugin call with preopens: unblock a guest stuck on a FIFO past its deadline.

    Args:
        reads: the call's preopens (without any: a no-op, no thread; most plugin calls).
        deadline_s: seconds; the call's deadline from now.
    """
    if not reads.preopens:
        return contextlib.nullcontext()
    return _unblocking(reads, deadline_s)


@contextlib.contextmanager
def _unblocking(reads: PluginReads, deadline_s: float) -> Iterator[None]:
    done = threading.Event()
    fds = [p.fd for p in reads.preopens]

    def watch() -> None:
        if done.wait(deadline_s + FIFO_GRACE_S):
            return
        while not done.is_set():
            for fd in fds:
                _poke_fifos(fd)
            done.wait(FIFO_GRACE_S)

    watcher = threading.Thread(target=watch, name="stockade-fifo-unblock", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


def _poke_fifos(root_fd: int) -> None:
    """Write one newline to every FIFO beneath ``root_fd`` that has a reader waiting."""
    budget = FIFO_SCAN_ENTRIES
    try:
        stack = [os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=root_fd)]
    except OSError:
        return
    try:
        while stack and budget > 0:
            current = stack.pop()
            try:
                with os.scandir(current) as entries:
                    for entry in entries:
                        budget -= 1
                        if budget < 0:
                            break
                        _poke_entry(current, entry, stack)
            except OSError:
                pass
            finally:
                os.close(current)
    finally:
        for fd in stack:
            os.close(fd)


def _poke_entry(parent: int, entry: os.DirEntry[str], stack: list[int]) -> None:
    try:
        mode = entry.stat(follow_symlinks=False).st_mode
        if stat.S_ISDIR(mode):
            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            stack.append(os.open(entry.name, flags, dir_fd=parent))
        elif stat.S_ISFIFO(mode):
            flags = os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(entry.name, flags, dir_fd=parent)
            try:
                os.write(fd, b"\n")
            finally:
                os.close(fd)
    except OSError as exc:
        if exc.errno not in (errno.ENXIO, errno.EAGAIN, errno.ENOENT, errno.EACCES, errno.ELOOP, errno.EPIPE):
            raise
