"""The state-store port: every piece of host state that many processes must agree on
(docs/design.md §12 "State-store port").

A :class:`StateStore` is a bundle of narrow ports (CONTRIBUTING.md principle 2), one per kind of state
the call pipeline keeps. The gateway holds each of them and never knows which backend is
behind it:

- :class:`AuditSink` — append a record to a hash chain, return its hash (§6 steps 9, 11);
- :class:`ApprovalPort` — issue an approval; redeem it at most once (§6 step 6);
- :class:`RateLimitPort` — check-and-consume the per (principal, tool) windows (§6 step 7);
- :class:`GrantPort` — session grants: grant, check, clear (§6 step 4);
- :class:`LockGenerationPort` — accept a lock generation: monotonic, forks and
  downgrades refused exactly as :class:`host.trust.lock.LockState` refuses them (§4, §12);
- :class:`~host.store.pending.PendingApprovalPort` — the queue of actions waiting for a
  person (the contract of :class:`host.approvals.ApprovalQueue`);
- :class:`~host.scopes.ScopePort` — scopes granted ahead of time: each use counted once,
  fleet-wide, never past a signed bound, with its audit record.

Contract every backend keeps (``tests/store/test_contract.py`` runs both):

- the audit chain format is the one of :mod:`host.audit.log`, byte for byte, so an exported
  chain verifies with ``stockade log verify``; appends to one chain never fork it;
- an approval is redeemed once, whatever the number of processes racing for it; every
  failure is the one opaque APPROVAL_INVALID (CONTRIBUTING.md principle 12);
- a rate-limit refusal counts nothing; a window never admits more than its limit;
- a grant only ever answers for the exact (project, subject), session and tool, until
  its end and while it has calls left;
- a lower lock generation than the highest one accepted is LOCK_ROLLBACK;
- a backend that cannot reach its state fails closed: AUDIT_UNAVAILABLE from the audit
  sink, STORE_UNAVAILABLE from the others; nothing is retried unless it is idempotent.

Backends: :class:`host.store.local.LocalStore` (files under the state dir and process
memory; one host process per state dir) and :class:`host.store.postgres.PostgresStore`
(PostgreSQL through psycopg 3; any number of processes).
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Mapping

    from host.scopes import ScopePort
    from host.store.pending import PendingApprovalPort
    from host.trust.lock import LoadedLock
    from host.types import Approval, InvocationPlan

__all__ = [
    "ApprovalPort",
    "AuditSink",
    "GrantPort",
    "LockGenerationPort",
    "RateLimitPort",
    "StateStore",
    "StoreLifecycle",
]

_S = TypeVar("_S", bound="StoreLifecycle")


@runtime_checkable
class AuditSink(Protocol):
    """Appends records to a hash chain (the contract of :meth:`host.audit.log.AuditLog.append`)."""

    def append(self, kind: str, payload: Mapping[str, object], *, durable: bool | None = None) -> str:
        """Append one record and return its hash; ``durable=True`` waits for the disk
        whatever the sink's durability mode (intent records before a guest starts).

        Raises:
            AuditUnavailable: the record could not be committed; nothing was added.
            ValueError: an empty kind or a reserved payload key (caller misuse).
        """
        ...

    def close(self) -> None:
        """Release what the sink holds; later appends raise AuditUnavailable."""
        ...


class ApprovalPort(Protocol):
    """Issues approvals bound to one action and redeems each at most once."""

    def issue(self, plan: InvocationPlan, *, ttl_s: float = 300.0, now: float | None = None) -> Approval:
        """Approve ``plan`` for its principal and session for ``ttl_s`` seconds.

        Raises:
            StoreUnavailable: the approval could not be recorded.
        """
        ...

    def redeem(self, plan: InvocationPlan, approval: Approval, *, now: float | None = None) -> None:
        """Check ``approval`` against ``plan`` and consume it (once, fleet-wide).

        Raises:
            ApprovalInvalid: forged, for another action, principal or session, expired or
                already used — one opaque error for every case.
            StoreUnavailable, AuditUnavailable: the store could not decide (fail closed).
        """
        ...


class RateLimitPort(Protocol):
    """Per (principal, tool) minute and hour windows (the contract of :mod:`host.ratelimit`)."""

    def check_and_consume(
        self, principal_key: tuple[str, str], tool: str, *, per_minute: int | None, per_hour: int | None
    ) -> None:
        """Admit and count one call, or refuse it counting nothing.

        Raises:
            RateLimited: a window is full (``details["retry_after_s"]``).
            StoreUnavailable: the windows could not be read or written (fail closed).
            ValueError: a limit that is not a positive int or None.
        """
        ...


class GrantPort(Protocol):
    """"Always for this session" grants (the contract of :class:`host.policy.grants.SessionGrants`)."""

    def grant(
        self, principal_key: tuple[str, str], session: str, tool: str, *, ttl_s: float = ...,
        max_calls: int | None = None,
    ) -> None:
        """Record a grant for exactly this principal, session and tool, ending ``ttl_s``
        seconds from now (default 8 h), for at most ``max_calls`` calls (``None``: no count).

        Raises:
            StoreUnavailable: the grant could not be recorded.
            TypeError: an empty or non-string part.
            ValueError: an unbounded ``ttl_s`` or a bad ``max_calls``.
        """
        ...

    def consume(self, principal_key: tuple[str, str], session: str, tool: str) -> int | None:
        """Count one use of a live grant at once for every process; the calls left
        (``None``: no count; ``-1``: no live grant, nothing counted).

        Raises:
            StoreUnavailable: the use could not be counted.
        """
        ...

    def revoke(self, principal_key: tuple[str, str], session: str, tool: str) -> bool:
        """End one grant for every process; whether there was one.

        Raises:
            StoreUnavailable: the grant could not be removed.
        """
        ...

    def discharges(self, principal_key: tuple[str, str], session: str, tool: str) -> bool:
        """Whether a grant exists for exactly this principal, session and tool.

        Raises:
            StoreUnavailable: the grants could not be read (fail closed: nobody is granted).
            TypeError: an empty or non-string part.
        """
        ...

    def clear_grants(
        self, session: str | None = None, *, principal_key: tuple[str, str] | None = None
    ) -> int:
        """Forget grants of one session, one principal, both, or all; return how many
        (principal, session) entries were removed.

        Raises:
            StoreUnavailable: the grants could not be cleared.
        """
        ...


class LockGenerationPort(Protocol):
    """The highest accepted lock generation, moving forward only."""

    def accept(self, lock: LoadedLock, *, unsafe_accept_rollback: bool = False) -> tuple[str, ...]:
        """Accept a verified lock (the rules of :meth:`host.trust.lock.LockState.accept`);
        return what ``unsafe_accept_rollback`` overrode (``()`` when nothing was).

        Raises:
            LockRollback: older generation, fork or package downgrade; nothing recorded.
            LockInvalid: the recorded state is corrupt.
            StoreUnavailable: the state could not be read or written.
        """
        ...

    def current_generation(self) -> int | None:
        """The highest accepted generation, ``None`` before the first accept.

        Raises:
            LockInvalid: the recorded state is corrupt.
            StoreUnavailable: the state could not be read.
        """
        ...


class StateStore(Protocol):
    """A backend: one object per port, plus its name and lifecycle."""

    @property
    def kind(self) -> str:
        """``"local"`` or ``"postgres"``."""
        ...

    @property
    def audit(self) -> AuditSink:
        """The audit chain(s)."""
        ...

    @property
    def approvals(self) -> ApprovalPort:
        """Single-use approvals."""
        ...

    @property
    def rate_limits(self) -> RateLimitPort:
        """Per (principal, tool) windows."""
        ...

    @property
    def grants(self) -> GrantPort:
        """Session grants."""
        ...

    @property
    def locks(self) -> LockGenerationPort:
        """Accepted lock generations."""
        ...

    @property
    def pending(self) -> PendingApprovalPort:
        """The queue of actions waiting for a person (``stockade approvals``, MCP)."""
        ...

    @property
    def scopes(self) -> ScopePort:
        """Scopes a person granted ahead of time to unattended jobs (``stockade scopes``)."""
        ...

    def close(self) -> None:
        """Release connections, locks and files. Idempotent."""
        ...


class StoreLifecycle:
    """``with store:`` closes the store on exit (a base for the backends)."""

    def close(self) -> None:
        """Release what the store holds. Idempotent."""
        raise NotImplementedError

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
