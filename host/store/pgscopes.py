"""Scopes on the PostgreSQL store: counted exactly across a fleet (see :mod:`host.scopes`).

Tables (schema version 5, :mod:`host.store.migrations`): ``scopes`` (one row per scope:
the signed ``stockade.scope/1`` document as issued, ``used_total``, ``revoked_at``) and
``scope_uses`` (``used`` per scope and ``tool@version``).

The database is outside the trust boundary for what a scope allows: every redemption
verifies the row's document against the host's trusted approver public keys
(:func:`host.scopes.check_cover`), and the bounds the database enforces are the signed
document's, passed as parameters, never its own columns. A redemption is one
transaction, on the database's clock:

1. ``SELECT … FOR UPDATE`` of the scope row (redemptions of one scope queue here);
2. ``UPDATE scopes SET used_total = used_total + 1 WHERE id = … AND revoked_at IS NULL
   AND used_total < <signed max_calls_total> AND now() < <signed not_after> RETURNING``;
3. ``INSERT INTO scope_uses … ON CONFLICT DO UPDATE SET used = used + 1 WHERE used <
   <signed max_calls> RETURNING`` (no row: exhausted, and step 2 is rolled back);
4. the ``scope.redeemed`` record (and ``scope.exhausted`` for the last call) appended to
   the audit chain in the same transaction.

What a database writer can still do: delete rows or reset counters (a denial of service,
or more calls of a genuinely signed scope within its signed end; every use is on the
chain as ``scope.redeemed``); it cannot widen a scope, extend its end, add a tool, or
mint one.
"""

from __future__ import annotations

import json
from typing import Any

from host.errors import ApprovalRequired, AuditUnavailable, ScopeInvalid
from host.formats.scope import SignedScope
from host.scopes import (
    Redeemed,
    ScopeState,
    ScopeUse,
    TrustedSource,
    check_cover,
    issued_record,
    refusal,
    resolve_trusted,
    unknown_scope,
    use_record,
)
from host.store._pg import Conn, Database, committing

__all__ = ["PgScopes"]


class PgScopes:
    """The scope port of a :class:`~host.store.postgres.PostgresStore` (module docstring).

    Args:
        db: the store's pool.
        audit: the store's audit chain (``append_in`` inside a transaction).
        trusted: the approver public keys redemptions verify against.
    """

    def __init__(self, db: Database, audit: Any, *, trusted: TrustedSource) -> None:
        self._db = db
        self._audit = audit
        self._trusted = trusted

    def _append(self, conn: Conn, kind: str, payload: dict[str, Any]) -> None:
        self._audit.append_in(conn, self._audit.chain_for(payload), kind, payload)

    def add(self, signed: SignedScope) -> None:
        """See :meth:`host.scopes.ScopePort.add` (the row and ``scope.issued`` commit together)."""
        scope = signed.scope

        def op(conn: Conn) -> None:
            with committing(conn):
                inserted = conn.execute(
                    "INSERT INTO scopes (id, project, subject, doc, not_after) "
                    "VALUES (%s, %s, %s, %s, to_timestamp(%s)) ON CONFLICT DO NOTHING RETURNING id",
                    (
                        scope.id,
                        scope.principal.project,
                        scope.principal.subject,
                        signed.model_dump_json(),
                        scope.not_after,
                    ),
                ).fetchone()
                if inserted is None:
                    raise ScopeInvalid(f"a scope with id {scope.id} exists")
                self._append(conn, "scope.issued", issued_record(signed))

        self._db.run(op, what="record a scope", idempotent=False)

    def redeem(self, use: ScopeUse) -> Redeemed:
        """See :meth:`host.scopes.ScopePort.redeem` (module docstring: one transaction)."""
        keys = resolve_trusted(self._trusted)

        def op(conn: Conn) -> Redeemed | ApprovalRequired:
            with committing(conn):
                row = conn.execute(
                    "SELECT doc, revoked_at IS NOT NULL, expired_recorded FROM scopes "
                    "WHERE id = %s FOR UPDATE",
                    (use.scope_id,),
                ).fetchone()
                if row is None:
                    return refusal("not_in_scope", use.scope_id, use.tool)
                try:
                    signed = SignedScope.from_json(str(row[0]))
                except Exception:  # a row that is not a scope covers nothing
                    return refusal("not_in_scope", use.scope_id, use.tool)
                if check_cover(signed, use, keys) is not None:
                    return refusal("not_in_scope", use.scope_id, use.tool)
                scope = signed.scope
                entry = scope.tool_entry(use.tool, use.version)
                assert entry is not None, "check_cover found it"
                if row[1]:
                    return refusal("scope_revoked", scope.id, use.tool)
                total = conn.execute(
                    "UPDATE scopes SET used_total = used_total + 1 WHERE id = %s AND revoked_at IS NULL "
                    "AND used_total < %s AND now() < to_timestamp(%s) RETURNING used_total",
                    (scope.id, scope.max_calls_total, scope.not_after),
                ).fetchone()
                if total is None:
                    ended = conn.execute("SELECT now() >= to_timestamp(%s)", (scope.not_after,)).fetchone()
                    if ended is not None and ended[0]:
                        if not row[2]:  # the first refusal after the end is recorded
                            conn.execute(
                                "UPDATE scopes SET expired_recorded = true WHERE id = %s", (scope.id,)
                            )
                            self._append(conn, "scope.expired", use_record(signed, use))
                        return refusal("scope_expired", scope.id, use.tool)
                    return refusal("scope_exhausted", scope.id, use.tool)
                used = conn.execute(
                    "INSERT INTO scope_uses (scope_id, tool, used) VALUES (%s, %s, 1) "
                    "ON CONFLICT (scope_id, tool) DO UPDATE SET used = scope_uses.used + 1 "
                    "WHERE scope_uses.used < %s RETURNING used",
                    (scope.id, entry.key, entry.max_calls),
                ).fetchone()
                if used is None:  # this tool's bound: undo the total's count with the transaction
                    raise refusal("scope_exhausted", scope.id, use.tool)
                total_left = scope.max_calls_total - int(total[0])
                left = Redeemed(scope.id, min(entry.max_calls - int(used[0]), total_left), total_left)
                self._append(
                    conn,
                    "scope.redeemed",
                    use_record(signed, use, remaining=left.remaining, remaining_total=left.remaining_total),
                )
                if left.remaining == 0:
                    self._append(
                        conn,
                        "scope.exhausted",
                        use_record(signed, use, remaining=0, remaining_total=left.remaining_total),
                    )
                return left

        outcome = self._db.run(op, what="redeem a scope", idempotent=False, error=AuditUnavailable)
        if isinstance(outcome, ApprovalRequired):
            raise outcome
        return outcome

    def revoke(self, scope_id: str, *, by: str) -> ScopeState:
        """See :meth:`host.scopes.ScopePort.revoke` (seen by every process at its next call)."""

        def op(conn: Conn) -> None:
            with committing(conn):
                row = conn.execute(
                    "UPDATE scopes SET revoked_at = now(), revoked_by = %s "
                    "WHERE id = %s AND revoked_at IS NULL RETURNING project, subject, used_total, doc",
                    (by[:256], scope_id),
                ).fetchone()
                if row is not None:
                    job = SignedScope.from_json(str(row[3])).scope.job
                    self._append(
                        conn,
                        "scope.revoked",
                        {
                            "scope": scope_id,
                            "project": str(row[0]),
                            "subject": str(row[1]),
                            "job": job,
                            "revoked_by": by[:256],
                            "used_total": int(row[2]),
                        },
                    )

        self._db.run(op, what="revoke a scope", idempotent=True)
        return self.get(scope_id)

    def get(self, scope_id: str) -> ScopeState:
        """See :meth:`host.scopes.ScopePort.get`."""
        states = self._select(scope_id)
        if not states:
            raise unknown_scope(scope_id)
        return states[0]

    def entries(self) -> list[ScopeState]:
        """See :meth:`host.scopes.ScopePort.entries`."""
        return self._select(None)

    def _select(self, scope_id: str | None) -> list[ScopeState]:
        def op(conn: Conn) -> list[ScopeState]:
            rows = conn.execute(
                "SELECT s.doc, s.used_total, extract(epoch FROM s.revoked_at)::float8, s.revoked_by, "
                "COALESCE((SELECT json_object_agg(u.tool, u.used) FROM scope_uses u "
                "WHERE u.scope_id = s.id), '{}'::json)::text FROM scopes s "
                "WHERE %(id)s::text IS NULL OR s.id = %(id)s ORDER BY s.issued_at, s.id",
                {"id": scope_id},
            ).fetchall()
            return [
                ScopeState(
                    SignedScope.from_json(str(r[0])),
                    {str(k): int(v) for k, v in json.loads(str(r[4])).items()},
                    int(r[1]),
                    None if r[2] is None else float(r[2]),
                    None if r[3] is None else str(r[3]),
                )
                for r in rows
            ]

        return self._db.run(op, what="read scopes", idempotent=True)
