"""The pending-approval queue behind the store port (the file queue is
:class:`host.approvals.ApprovalQueue`).

:class:`PgPendingApprovals` keeps the contract of :class:`~host.approvals.ApprovalQueue`
— ``request``, ``entries``, ``decide``, ``redeem`` with the same models and the same
errors — in the ``pending_approvals`` table, so an action queued by one MCP server is
listed and decided from any machine (``stockade approvals --store …``) and redeemed once
by whichever server sees the retry. Each method is one transaction; ``decide`` and
``redeem`` lock the rows they read (``FOR UPDATE`` / ``DELETE … RETURNING``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

from host.approvals import (
    DEFAULT_TTL_S,
    MAX_PENDING_PER_PRINCIPAL,
    MAX_SUMMARY_CHARS,
    PendingApproval,
    Redemption,
    check_pending_bounds,
)
from host.errors import ApprovalInvalid

if TYPE_CHECKING:
    from host.plan import InvocationPlan
    from host.store._pg import Conn, Database

__all__ = ["PendingApprovalPort", "PgPendingApprovals"]


class PendingApprovalPort(Protocol):
    """The queue of actions waiting for a person (the contract of ``ApprovalQueue``)."""

    def request(
        self,
        plan: InvocationPlan,
        *,
        summary: str,
        max_per_principal: int = MAX_PENDING_PER_PRINCIPAL,
        full_input: str | None = None,
    ) -> PendingApproval:
        """Queue ``plan`` (or return the live entry already queued); refuse past the
        principal's share or the total (``ApprovalQueueFull``). ``full_input`` is kept
        for ``stockade approvals show`` where the backend can (the file queue)."""
        ...

    def entries(self) -> list[PendingApproval]:
        """Every live entry, oldest first."""
        ...

    def decide(
        self, digest: str, *, approve: bool, by: str, project: str | None = None, subject: str | None = None
    ) -> PendingApproval:
        """Approve or deny the one pending entry of ``digest`` (and principal)."""
        ...

    def redeem(self, digest: str, *, project: str, subject: str) -> tuple[Redemption, PendingApproval | None]:
        """Consume the decision for this digest and principal, once."""
        ...


class PgPendingApprovals:
    """The queue in PostgreSQL (see the module docstring).

    Args:
        db: the store's connection pool.
        ttl_s: how long an entry lives after it was queued.
        clock: the time source of ``requested_at`` / ``expires_at`` (Unix seconds).
    """

    def __init__(self, db: Database, *, ttl_s: float = DEFAULT_TTL_S, clock: Any = time.time) -> None:
        if ttl_s <= 0:
            raise ValueError("ttl_s must be positive")
        self._db = db
        self._ttl = ttl_s
        self._clock = clock

    def request(
        self,
        plan: InvocationPlan,
        *,
        summary: str,
        max_per_principal: int = MAX_PENDING_PER_PRINCIPAL,
        full_input: str | None = None,
    ) -> PendingApproval:
        """Queue ``plan`` for a person's decision, or return the live entry already queued.

        ``full_input`` is not kept on PostgreSQL (``stockade approvals show`` then shows
        the summary and says so).

        Raises:
            ApprovalQueueFull: the principal holds ``max_per_principal`` live entries, or
                the queue (fleet-wide) holds ``MAX_PENDING``.
            StoreUnavailable: the database failed.
        """
        principal = plan.request.principal
        now = self._clock()
        preview = plan.preview
        entry = PendingApproval(
            action_digest=plan.action_digest, project=principal.project, subject=principal.subject,
            tool=plan.tool, version=plan.version, generation=preview.generation, effect=preview.effect,
            risk=preview.risk, hosts=preview.hosts, secrets=preview.secrets,
            summary=summary[:MAX_SUMMARY_CHARS], requested_at=now, expires_at=now + self._ttl,
        )

        def op(conn: Conn) -> PendingApproval:
            with conn.transaction():
                conn.execute("LOCK TABLE pending_approvals IN SHARE ROW EXCLUSIVE MODE")
                conn.execute("DELETE FROM pending_approvals WHERE expires_at <= %s", (now,))
                row = conn.execute(
                    "SELECT entry FROM pending_approvals WHERE action_digest = %s AND project = %s "
                    "AND subject = %s", (entry.action_digest, entry.project, entry.subject),
                ).fetchone()
                if row is not None:
                    return PendingApproval.model_validate_json(str(row[0]))
                counts = conn.execute(
                    "SELECT count(*) FILTER (WHERE project = %s AND subject = %s), count(*) "
                    "FROM pending_approvals", (entry.project, entry.subject),
                ).fetchone()
                mine, total = (int(counts[0]), int(counts[1])) if counts is not None else (0, 0)
                check_pending_bounds(mine, total, max_per_principal=max_per_principal)
                _insert(conn, entry)
                return entry

        return self._db.run(op, what="queue an approval", idempotent=False)

    def entries(self) -> list[PendingApproval]:
        """Every live (unexpired) entry, oldest first.

        Raises:
            StoreUnavailable: the database failed.
        """

        def op(conn: Conn) -> list[PendingApproval]:
            rows = conn.execute(
                "SELECT entry FROM pending_approvals WHERE expires_at > %s "
                "ORDER BY requested_at, action_digest",
                (self._clock(),),
            ).fetchall()
            return [PendingApproval.model_validate_json(str(r[0])) for r in rows]

        return self._db.run(op, what="list pending approvals", idempotent=True)

    def decide(
        self, digest: str, *, approve: bool, by: str, project: str | None = None, subject: str | None = None
    ) -> PendingApproval:
        """Approve or deny the pending entry of ``digest`` (optionally naming its principal).

        Raises:
            ApprovalInvalid: no single pending, unexpired entry matches.
            StoreUnavailable: the database failed.
        """

        def op(conn: Conn) -> PendingApproval:
            with conn.transaction():
                rows = conn.execute(
                    "SELECT entry FROM pending_approvals WHERE action_digest = %s AND status = 'pending' "
                    "AND expires_at > %s AND (%s::text IS NULL OR project = %s) "
                    "AND (%s::text IS NULL OR subject = %s) FOR UPDATE",
                    (digest, self._clock(), project, project, subject, subject),
                ).fetchall()
                if len(rows) != 1:
                    raise ApprovalInvalid(
                        f"no pending approval with digest {digest[:64]!r}"
                        + ("" if not rows else " for exactly one principal; name --project and --subject"),
                        hint="List pending approvals with `stockade approvals list`; they expire.",
                    )
                entry = PendingApproval.model_validate_json(str(rows[0][0])).model_copy(update={
                    "status": "approved" if approve else "denied",
                    "decided_at": self._clock(),
                    "decided_by": by[:256],
                })
                conn.execute(
                    "UPDATE pending_approvals SET entry = %s, status = %s WHERE action_digest = %s "
                    "AND project = %s AND subject = %s",
                    (entry.model_dump_json(), entry.status, digest, entry.project, entry.subject),
                )
                return entry

        return self._db.run(op, what="decide a pending approval", idempotent=False)

    def redeem(self, digest: str, *, project: str, subject: str) -> tuple[Redemption, PendingApproval | None]:
        """Consume the decision for this digest and principal, once (fleet-wide).

        Raises:
            StoreUnavailable: the database failed.
        """

        def op(conn: Conn) -> tuple[Redemption, PendingApproval | None]:
            now = self._clock()
            gone = conn.execute(
                "DELETE FROM pending_approvals WHERE action_digest = %s AND project = %s AND subject = %s "
                "AND status <> 'pending' AND expires_at > %s RETURNING entry",
                (digest, project, subject, now),
            ).fetchone()
            if gone is not None:
                entry = PendingApproval.model_validate_json(str(gone[0]))
                return ("approved" if entry.status == "approved" else "denied"), entry
            row = conn.execute(
                "SELECT entry FROM pending_approvals WHERE action_digest = %s AND project = %s "
                "AND subject = %s AND expires_at > %s",
                (digest, project, subject, now),
            ).fetchone()
            if row is None:
                return "absent", None
            return "pending", PendingApproval.model_validate_json(str(row[0]))

        return self._db.run(op, what="redeem a pending approval", idempotent=False)


def _insert(conn: Conn, entry: PendingApproval) -> None:
    conn.execute(
        "INSERT INTO pending_approvals (action_digest, project, subject, entry, status, requested_at, "
        "expires_at) VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (entry.action_digest, entry.project, entry.subject, entry.model_dump_json(), entry.status,
         entry.requested_at, entry.expires_at),
    )
