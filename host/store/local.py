"""The embedded default backend: files under the state dir and process memory.

:class:`LocalStore` is exactly what a host kept before the store port existed, wired
behind it, so its behaviour and speed do not change:

- audit: the :class:`host.audit.log.AuditLog` file (one ``flock``-ed writer per file);
- approvals: :class:`host.approvals.ApprovalAuthority` (a per-process MAC key; approvals do
  not survive a restart and are not valid in another process);
- rate limits: :class:`host.ratelimit.RateLimiter` (process memory);
- session grants: :class:`host.policy.grants.SessionGrants` (process memory);
- lock generations: :class:`host.trust.lock.LockState` (``lock-state.json``, ``flock``-ed);
- pending approvals: :class:`host.approvals.ApprovalQueue` (``approvals.json``, ``flock``-ed);
- scopes: :class:`host.scopes.LocalScopes` (``scopes.json``, ``flock``-ed: CLI commands
  grant and revoke there while a host redeems).

Sharing: the approvals, rate limits and grants of a local store live in one process, so
two host processes on one state dir would each count and grant on their own. A local
store therefore holds an exclusive ``flock`` on ``state_dir/store.lock`` while it is
open; a store on the same state dir in another process is refused with
STORE_UNAVAILABLE naming the postgres store — never silently split in two. Within one
process the lock is shared (counted), so a host reloading its lock (the MCP server opens
the new generation's Host before closing the old one) keeps working, exactly as before
the store port. CLI commands that only read or queue (``stockade approvals``,
``log verify``) do not open a store.

Example::

    with LocalStore(state_dir, audit=AuditLog(state_dir / "audit.log")) as store:
        store.rate_limits.check_and_consume(("p", "alice"), "t", per_minute=10, per_hour=None)
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final, cast

from host import observe
from host._files import LockHeld, open_lock
from host.approvals import ApprovalAuthority, ApprovalQueue
from host.audit.log import AuditLog
from host.errors import StoreUnavailable
from host.policy.grants import SessionGrants
from host.ratelimit import RateLimiter
from host.scopes import LocalScopes, TrustedSource
from host.store.port import StoreLifecycle
from host.trust.lock import LoadedLock, LockState

__all__ = ["LOCK_FILE", "LocalLockGenerations", "LocalStore", "check_state_dir_free", "overrides_of"]

LOCK_FILE: Final = "store.lock"


def overrides_of(state: LockState, lock: LoadedLock, *, unsafe_accept_rollback: bool) -> tuple[str, ...]:
    """Run ``state.accept`` and return the overridden findings it reports (``()`` if none).

    ``LockState.accept`` returns the overridden reasons in versions that report them and
    ``None`` in earlier ones; both are normalized to a tuple.
    """
    accept = cast(Callable[..., object], state.accept)
    outcome = accept(lock, unsafe_accept_rollback=unsafe_accept_rollback)
    return tuple(str(item) for item in outcome) if isinstance(outcome, tuple) else ()


class LocalLockGenerations:
    """:class:`host.trust.lock.LockState` behind the lock-generation port."""

    __slots__ = ("_state",)

    def __init__(self, state_dir: Path) -> None:
        self._state = LockState(state_dir)

    def accept(self, lock: LoadedLock, *, unsafe_accept_rollback: bool = False) -> tuple[str, ...]:
        """See :meth:`host.trust.lock.LockState.accept`; returns what was overridden (if anything)."""
        return overrides_of(self._state, lock, unsafe_accept_rollback=unsafe_accept_rollback)

    def current_generation(self) -> int | None:
        """The generation in ``lock-state.json`` (None before the first accept)."""
        current = self._state.current()
        return None if current is None else current.generation


class LocalStore(StoreLifecycle):
    """One host process's state under ``state_dir`` (see the module docstring).

    Args:
        state_dir: the host's state directory (created with mode 0700 if missing).
        audit: the audit log this store appends to; closed by :meth:`close` only when
            ``owns_audit``.
        owns_audit: close ``audit`` with the store (also when this constructor raises).
        trusted_approver_keys: the approver public keys scopes are verified against (or
            a loader of them, called at the first redemption); ``None``: a scope is never
            redeemed (APPROVER_KEY_MISSING).

    Raises:
        StoreUnavailable: another local store holds this state dir, or its lock file
            cannot be opened.
    """

    kind: Final = "local"

    def __init__(
        self, state_dir: Path, *, audit: AuditLog, owns_audit: bool = False,
        trusted_approver_keys: TrustedSource = None,
    ) -> None:
        self.state_dir = Path(state_dir)
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._held: Path | None = _hold(self.state_dir / LOCK_FILE)
        except BaseException:
            if owns_audit:
                audit.close()  # a refused store must not keep the audit file's lock
            raise
        self.audit = audit
        self.approvals = ApprovalAuthority()
        self.rate_limits = RateLimiter()
        self.grants = SessionGrants()
        self.locks = LocalLockGenerations(self.state_dir)
        self.pending = ApprovalQueue(self.state_dir)
        self.scopes = LocalScopes(self.state_dir, audit=audit, trusted=trusted_approver_keys)
        self._owns_audit = owns_audit

    def close(self) -> None:
        """Release the state-dir lock (and the audit log if owned). Idempotent."""
        held, self._held = self._held, None
        if held is not None:
            _release(held)
            if self._owns_audit:
                self.audit.close()

    def __repr__(self) -> str:
        return f"LocalStore({str(self.state_dir)!r})"


def check_state_dir_free(state_dir: Path) -> None:
    """Refuse a state dir whose lock another process holds (a running ``stockade serve``).

    For a caller that found another resource of the state dir taken (its audit log) and
    must say why: the refusal is the one a second :class:`LocalStore` gets.

    Raises:
        StoreUnavailable: another process holds ``state_dir``'s lock.
    """
    path = Path(state_dir) / LOCK_FILE
    if path.exists():
        _release(_hold(path))


_HELD: dict[Path, tuple[int, int]] = {}  # lock file -> (descriptor, stores using it)
_HELD_GUARD = threading.Lock()


def _hold(path: Path) -> Path:
    """Take (or share, within this process) the state dir's lock; return its key."""
    key = path.resolve()
    with _HELD_GUARD:
        held = _HELD.get(key)
        if held is not None:
            _HELD[key] = (held[0], held[1] + 1)
            return key
        _HELD[key] = (_lock(key), 1)
        return key


def _release(key: Path) -> None:
    with _HELD_GUARD:
        fd, count = _HELD[key]
        if count > 1:
            _HELD[key] = (fd, count - 1)
            return
        del _HELD[key]
    os.close(fd)


def _lock(path: Path) -> int:
    """Open and exclusively ``flock`` ``path``; the descriptor keeps the lock."""
    try:
        return open_lock(path, blocking=False)
    except LockHeld:
        observe.store_error("local", "open the store", StoreUnavailable.code)
        raise StoreUnavailable(
            f"the state dir {str(path.parent)!r} is in use by another host process",
            hint=(
                "A local store serves one host process. Give each process its own state dir, "
                "or share state through PostgreSQL: --store postgresql://… (docs/operators.md)."
            ),
        ) from None
    except OSError as exc:
        observe.store_error("local", "open the store", StoreUnavailable.code)
        why = exc.strerror or exc
        raise StoreUnavailable(f"cannot lock the state dir lock {str(path)!r}: {why}") from None
