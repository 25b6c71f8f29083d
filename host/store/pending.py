"""The pending-approval queue behind the store port (the file queue is
:class:`host.approvals.ApprovalQueue`).

:class:`PgPendingApprovals` keeps the contract of :class:`~host.approvals.ApprovalQueue`
— ``request``, ``entries``, ``decide``, ``redeem`` with the same models and the same
errors — in the ``pending_approvals`` table, so an action queued by one MCP server is
listed and decided from any machine (``stockade approvals --store …``) and redeemed once
by whichever server sees the retry. Each method is one transaction; ``decide`` and
``redeem`` lock the rows they read (``FOR UPDATE`` / ``DELETE … RETURNING``).

A row's ``status`` proves nothing (the database is outside the trust boundary for
approvals, :mod:`host.approverkey`): approving signs a ``stockade/approval@1`` approval
with the approver key of whoever decides and stores it in the entry (and its row in
``approvals``); :meth:`PgPendingApprovals.redeem` answers ``"approved"`` only for an
entry whose approval verifies against the trusted approver keys and names this digest
and principal, and the retried call then redeems that very approval (nonce, single use).
An entry edited to ``approved`` without one is refused (APPROVAL_INVALID).
"""

from __future__ import annotations

import secrets
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
from host.approverkey import ApproverKey, sign_approval, trusted_with, verify_approval
from host.errors import ApprovalInvalid, ApproverKeyMissing

if TYPE_CHECKING:
    from host.signing import TrustedKeys
    from host.store._pg import Conn, Database
    from host.types import Approval, InvocationPlan

__all__ = ["PendingApprovalPort", "PgPendingApprovals", "record_approval"]


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
        approver: the approver private key that signs approve decisions (``None``: an
            approve decision fails closed with APPROVER_KEY_MISSING; deny still works).
        trusted: the approver public keys an approved entry is verified against.
    """

    def __init__(
        self,
        db: Database,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        clock: Any = time.time,
        approver: ApproverKey | None = None,
        trusted: TrustedKeys | None = None,
    ) -> None:
        if ttl_s <= 0:
            raise ValueError("ttl_s must be positive")
        self._approver = approver
        self._trusted = trusted_with(trusted, approver)
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
            session=plan.request.session,
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

        Approving signs the entry's approval with this store's approver key.

        Raises:
            ApproverKeyMissing: ``approve`` and no approver key is configured.
            ApprovalInvalid: no single pending, unexpired entry matches (or one queued
                without a session, before approvals were signed: queue it again).
            StoreUnavailable: the database failed.
        """
        if approve and self._approver is None:
            raise ApproverKeyMissing(
                "approving on the shared store signs the decision with an approver key, "
                "and none is configured here",
                hint="Set `approver_key` in the [host] table of stockade.host.toml on the "
                "machine you approve from (a `stockade keygen` key, mode 0600).",
            )

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
                if approve:
                    entry = self._signed(conn, entry)
                conn.execute(
                    "UPDATE pending_approvals SET entry = %s, status = %s WHERE action_digest = %s "
                    "AND project = %s AND subject = %s",
                    (entry.model_dump_json(), entry.status, digest, entry.project, entry.subject),
                )
                return entry

        return self._db.run(op, what="decide a pending approval", idempotent=False)

    def _signed(self, conn: Conn, entry: PendingApproval) -> PendingApproval:
        """``entry`` with its approver-signed approval, whose row is inserted in ``conn``."""
        if self._approver is None or entry.session is None:
            raise ApprovalInvalid(
                f"the queued action {entry.action_digest[:64]} has no session to bind an approval to",
                hint="It was queued before approvals were signed; let the call be queued again.",
            )
        approval = sign_approval(self._approver, {
            "action_digest": entry.action_digest, "project": entry.project, "subject": entry.subject,
            "session": entry.session, "expires_at": entry.expires_at, "nonce": secrets.token_hex(16),
        })
        record_approval(conn, approval)
        return entry.model_copy(update={"approval": approval})

    def _check_signed(self, entry: PendingApproval, digest: str, project: str, subject: str) -> None:
        """Refuse an approved entry whose approval is missing, unsigned or for another action."""
        if self._trusted is None or len(self._trusted) == 0:
            raise ApproverKeyMissing(
                "a queued approval on the shared store is signed by an approver key, and this "
                "host trusts none: it cannot redeem one",
                hint="Set `trusted_approver_keys` (a stockade.keys/1 file of approver public "
                "keys) in the [host] table of stockade.host.toml.",
            )
        approval = entry.approval
        if approval is None:
            raise ApprovalInvalid("the approval is not valid for this action")
        verify_approval(self._trusted, approval)
        if (approval.action_digest, approval.project, approval.subject) != (digest, project, subject):
            raise ApprovalInvalid("the approval is not valid for this action")

    def redeem(self, digest: str, *, project: str, subject: str) -> tuple[Redemption, PendingApproval | None]:
        """Consume the decision for this digest and principal, once (fleet-wide).

        An ``"approved"`` entry carries the approver-signed approval the call redeems.

        Raises:
            ApprovalInvalid: an entry marked approved whose approval is missing or does
                not verify (the row was edited in the database).
            ApproverKeyMissing: no trusted approver public key is configured.
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
                if entry.status != "approved":
                    return "denied", entry
                self._check_signed(entry, digest, project, subject)
                return "approved", entry
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


def record_approval(conn: Conn, approval: Approval) -> None:
    """Insert ``approval``'s row (the ``mac`` column holds its signature) and drop day-old rows.

    (``host.store._pg`` loads psycopg, which a local-store host never needs: imported here.)
    """
    from host.store._pg import committing  # noqa: PLC0415 - keeps psycopg off the local path

    with committing(conn):
        conn.execute(
            "INSERT INTO approvals (nonce, action_digest, project, subject, session, mac, "
            "expires_at) VALUES (%s, %s, %s, %s, %s, %s, to_timestamp(%s))",
            (approval.nonce, approval.action_digest, approval.project, approval.subject,
             approval.session, approval.signature, approval.expires_at),
        )
        conn.execute("DELETE FROM approvals WHERE expires_at < now() - interval '1 day'")
        conn.execute("DELETE FROM approval_nonces WHERE expires_at < now() - interval '1 day'")
