"""The PostgreSQL backend: many host processes behave as one (docs/design.md §12).

Install with ``pip install 'stockade[postgres]'`` (psycopg 3 + psycopg-pool); create or
upgrade the schema with ``stockade store migrate --store postgresql://…`` before hosts
start (:mod:`host.store.migrations`).

How each promise holds across processes and machines:

- **Audit** (:class:`PgAuditChain`): one chain per project by default (``chain_scope=
  "project"``; records without a project go to the ``host`` chain), or one chain for
  everything (``"single"``). An append is one transaction: ``SELECT … FOR UPDATE`` on the
  chain's head row, insert the record with its predecessor's hash, update the head,
  commit (PostgreSQL's commit is durable, like the ``full`` mode of the file log). Writers
  of one chain queue on its head row, so the chain never forks; writers of different
  projects never wait for each other. Records are the exact canonical JSON lines of
  :mod:`host.audit.log`, so an export verifies with ``stockade log verify``; with a
  ``signer``, chains carry the file log's signed checkpoints at its cadence.
- **Approvals** (:class:`PgApprovals`): the database is outside the trust boundary for
  approvals. An approval is a ``stockade/approval@1`` statement signed by an approver key
  the database never holds (:mod:`host.approverkey`); every redeeming host verifies it
  against its trusted approver public keys first, so a row inserted or edited in the
  database approves nothing. Issuing signs and inserts a row; redeeming inserts the nonce
  into ``approval_nonces`` (primary key, ``ON CONFLICT DO NOTHING RETURNING``: a re-armed
  row finds its nonce already redeemed) and runs ``UPDATE … SET consumed_at = now() WHERE …
  AND consumed_at IS NULL AND expires_at > now() RETURNING`` in the same transaction as
  its ``approval.redeemed`` audit record, so exactly one process wins and the win is on
  the chain. Without an approver key (to issue) or trusted approver keys (to redeem) it
  fails closed with APPROVER_KEY_MISSING; it never falls back to trusting rows.
- **Rate limits** (:class:`PgRateLimits`): the sliding windows of :mod:`host.ratelimit`
  (same buckets, same retry-after), read and counted in one transaction under a
  per-key advisory lock, on the database's clock (one reference time for the fleet).
  Their commits do not wait for the WAL flush (``synchronous_commit = off``): a server
  crash may forget the last few milliseconds of counts, never an audit record.
- **Session grants** (:class:`PgGrants`): rows; a clear is one ``DELETE`` seen by all.
- **Lock generations** (:class:`PgLockGenerations`): one state row per scope, locked
  ``FOR UPDATE``; the rules are :class:`host.trust.lock.LockState`'s own (rollback, fork,
  downgrade), applied to the row's document; an accept sends ``NOTIFY`` so other
  processes learn of a newer generation (:meth:`PgLockGenerations.listen`, used by
  :mod:`host.store.watch`; :meth:`PgLockGenerations.wait_newer` blocks for one).
- **Pending approvals** (:class:`~host.store.pending.PgPendingApprovals`): the queue of
  :class:`host.approvals.ApprovalQueue` as rows, decided and redeemed once fleet-wide.
- **Scopes** (:class:`~host.store.pgscopes.PgScopes`): signed scopes as rows, each
  redemption one conditional ``UPDATE … RETURNING`` on the database's clock with its
  audit record in the same transaction.

Failures: the audit sink raises AUDIT_UNAVAILABLE, every other port STORE_UNAVAILABLE;
retries follow :mod:`host.store._pg`. The DSN's password never appears in an error, a log
line, ``repr`` or a record.

Example::

    store = PostgresStore("postgresql://stockade:…@db.internal/stockade")
    with Host.open("stockade.lock", config=config, secrets=None, policy=policy, store=store) as host:
        host.call(request)
"""

from __future__ import annotations

import json
import logging
import math
import secrets
import select
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import psycopg

from host.approvals import approval_binds, reference_time
from host.approverkey import ApproverKey, sign_approval, trusted_with, verify_approval
from host.audit.key import AuditKey
from host.audit.log import (
    CHECKPOINT_KIND,
    GENESIS,
    check_append_args,
    checkpoint_payload,
    checkpoint_reason,
    encode_for_append,
)
from host.errors import ApprovalInvalid, ApproverKeyMissing, AuditUnavailable, StockadeError, StoreUnavailable
from host.signing import TrustedKeys
from host.store._pg import PROBE_INTERVAL_S, Conn, Database, committing
from host.store.local import overrides_of
from host.store.migrations import check_version
from host.store.pending import PgPendingApprovals, record_approval
from host.store.pgcounters import PgGrants, PgRateLimits
from host.store.pgscopes import PgScopes
from host.store.port import StoreLifecycle
from host.trust.lock import LoadedLock, LockState
from host.types import Approval, InvocationPlan

__all__ = [
    "HOST_CHAIN",
    "PgApprovals",
    "PgAuditChain",
    "PgGenerationListener",
    "PgGrants",
    "PgLockGenerations",
    "PgRateLimits",
    "PostgresStore",
    "chain_of",
]

HOST_CHAIN: Final = "host"  # the chain of records that belong to no project (lock.accepted)
SINGLE_CHAIN: Final = "all"  # the one chain when chain_scope="single"
NOTIFY_CHANNEL: Final = "stockade_lock_generation"

_log = logging.getLogger("stockade.store")

ChainScope = Literal["project", "single"]


def chain_of(payload: Mapping[str, object], scope: ChainScope) -> str:
    """The chain a record belongs to: ``project:<name>``, ``host`` or ``all``."""
    if scope == "single":
        return SINGLE_CHAIN
    project = payload.get("project")
    return f"project:{project}" if isinstance(project, str) and project else HOST_CHAIN


class PgAuditChain:
    """The audit sink of a :class:`PostgresStore` (see the module docstring).

    Signed checkpoints (with a ``signer``) follow :class:`host.audit.log.AuditLog`, per
    chain and fleet-wide: the chain's head row counts the records since its last
    checkpoint (``checkpoint_seq``) and when that was written (``checkpoint_at``, the
    database's clock). In the transaction of the append that makes ``checkpoint_every``
    unsigned records, or the first one ``checkpoint_interval_s`` after the last
    checkpoint, an ``audit.checkpoint`` record signed over the new head follows (reason
    ``records`` / ``interval``); a background thread checkpoints idle chains whose
    unsigned records are older than the interval (any process may: the head row's lock
    lets one of them write it); :meth:`close` checkpoints the chains this process wrote
    to (``close``). The record is byte for byte the file log's, so ``stockade log
    verify --key`` checks it in place and in an export.

    Args:
        db: the store's connection pool.
        scope: ``"project"`` (one chain per project) or ``"single"``.
        clock: wall-clock seconds for the ``time`` field.
        signer: the key that signs checkpoints (``None``: no checkpoints).
        checkpoint_every: records between two checkpoints of a chain (at most).
        checkpoint_interval_s: seconds after which a chain's unsigned records get one.
        approver: the approver private key (hosts that approve in-band, ``stockade
            approvals approve``); its public key is trusted as well.
        trusted_approver_keys: the approver public keys approvals are verified against.
    """

    def __init__(
        self,
        db: Database,
        *,
        scope: ChainScope,
        clock: Any = time.time,
        signer: AuditKey | None = None,
        checkpoint_every: int = 1000,
        checkpoint_interval_s: float = 60.0,
        approver: ApproverKey | None = None,
        trusted_approver_keys: TrustedKeys | None = None,
    ) -> None:
        if checkpoint_every <= 0 or not checkpoint_interval_s > 0:
            raise ValueError("checkpoint_every and checkpoint_interval_s must be positive")
        self._db = db
        self.scope: ChainScope = scope
        self._clock = clock
        self._signer = signer
        self._every = checkpoint_every
        self._interval_s = float(checkpoint_interval_s)
        self._closed = False
        self._touched: set[str] = set()  # chains this process appended to (close checkpoints)
        self._touched_guard = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if signer is not None:
            self._thread = threading.Thread(target=self._tick, name="stockade-pg-checkpoint", daemon=True)
            self._thread.start()

    def append(self, kind: str, payload: Mapping[str, object], *, durable: bool | None = None) -> str:
        """Append one record to its chain in one transaction; return its hash.

        Every append is durable when it returns (PostgreSQL's commit), so ``durable`` is
        accepted for the :class:`~host.store.port.AuditSink` contract and changes nothing.

        Raises:
            AuditUnavailable: not committed (database down, record too large, closed).
            ValueError: an empty kind, the checkpoint kind or a reserved payload key.
        """
        check_append_args(kind, payload)
        if self._closed:
            raise AuditUnavailable("the audit chain is closed")
        chain = chain_of(payload, self.scope)

        def op(conn: Conn) -> str:
            with committing(conn):
                return self.append_in(conn, chain, kind, payload)

        return self._db.run(op, what="append to the audit chain", idempotent=False, error=AuditUnavailable)

    def chain_for(self, payload: Mapping[str, object]) -> str:
        """The chain a record with ``payload`` goes to (:func:`chain_of` in this scope)."""
        return chain_of(payload, self.scope)

    def append_in(self, conn: Conn, chain: str, kind: str, payload: Mapping[str, object]) -> str:
        """Append inside the caller's open transaction (the caller commits); a checkpoint
        follows in the same transaction when one is due."""
        head = self._lock_head(conn, chain)
        digest = self._insert(conn, chain, head, kind, payload, stamp=self._stamp())
        self._checkpoint_in(conn, chain, _Head(head.seq + 1, digest, head.signed, head.stale), closing=False)
        if self._signer is not None and chain not in self._touched:
            with self._touched_guard:
                self._touched.add(chain)
        return digest

    def checkpoint_due(self, *, closing: bool = False) -> int:
        """Checkpoint the chains that are due: unsigned records older than the interval
        (any chain), or, ``closing``, unsigned records in a chain this process wrote to.
        Returns how many checkpoints were written.

        Raises:
            AuditUnavailable: the database could not be read or written.
        """
        if self._signer is None:
            return 0
        if closing:
            with self._touched_guard:
                chains = sorted(self._touched)
        else:
            chains = self._db.run(self._stale_chains, what="find chains due for a checkpoint",
                                  idempotent=True, error=AuditUnavailable)

        written = 0
        for chain in chains:

            def op(conn: Conn, chain: str = chain) -> bool:
                with committing(conn):
                    return self._checkpoint_in(conn, chain, self._lock_head(conn, chain), closing=closing)

            written += self._db.run(
                op, what="write an audit checkpoint", idempotent=False, error=AuditUnavailable
            )
        return written

    def _stale_chains(self, conn: Conn) -> list[str]:
        rows = conn.execute(
            "SELECT chain FROM audit_chains WHERE seq > checkpoint_seq "
            "AND now() - checkpoint_at >= make_interval(secs => %s) ORDER BY chain",
            (self._interval_s,),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def _lock_head(self, conn: Conn, chain: str) -> _Head:
        query = (
            "SELECT seq, head, checkpoint_seq, now() - checkpoint_at >= make_interval(secs => %s) "
            "FROM audit_chains WHERE chain = %s FOR UPDATE"
        )
        row = conn.execute(query, (self._interval_s, chain)).fetchone()
        if row is None:  # the chain's first record: create its head row (racing writers wait here)
            conn.execute(
                "INSERT INTO audit_chains (chain, seq, head) VALUES (%s, 0, %s) ON CONFLICT DO NOTHING",
                (chain, GENESIS),
            )
            row = conn.execute(query, (self._interval_s, chain)).fetchone()
        if row is None:  # pragma: no cover - inserted just above
            raise AuditUnavailable(f"audit chain {chain!r} has no head row")
        return _Head(int(row[0]), str(row[1]), int(row[2]), bool(row[3]))

    def _insert(
        self, conn: Conn, chain: str, after: _Head, kind: str, payload: Mapping[str, object], *, stamp: int
    ) -> str:
        """Insert a record after ``after`` (the locked head) and move the head; return its hash."""
        seq = after.seq + 1
        record: dict[str, Any] = {**payload, "seq": seq, "time": stamp, "prev": after.head, "kind": kind}
        line, digest = encode_for_append(record)
        conn.execute(
            "INSERT INTO audit_records (chain, seq, hash, line) VALUES (%s, %s, %s, %s)",
            (chain, seq, digest, line[:-1].decode("utf-8")),
        )
        conn.execute("UPDATE audit_chains SET seq = %s, head = %s WHERE chain = %s", (seq, digest, chain))
        return digest

    def _checkpoint_in(self, conn: Conn, chain: str, head: _Head, *, closing: bool) -> bool:
        """Append a signed checkpoint over ``head`` if one is due; True if written."""
        unsigned = head.seq - head.signed
        reason = checkpoint_reason(unsigned, every=self._every, stale=head.stale, closing=closing)
        if self._signer is None or reason is None:
            return False
        stamp = self._stamp()
        payload = checkpoint_payload(self._signer, head=head.head, count=head.seq, time=stamp, reason=reason)
        self._insert(conn, chain, head, CHECKPOINT_KIND, payload, stamp=stamp)
        conn.execute(
            "UPDATE audit_chains SET checkpoint_seq = %s, checkpoint_at = now() WHERE chain = %s",
            (head.seq + 1, chain),
        )
        return True

    def _stamp(self) -> int:
        return int(self._clock() * 1000)

    def _tick(self) -> None:
        """The checkpoint thread: every interval, sign the chains left idle and unsigned."""
        while not self._stop.wait(self._interval_s):
            try:
                self.checkpoint_due()
            except StockadeError as exc:
                _log.error("cannot write audit checkpoints: %s", exc.message)

    def close(self) -> None:
        """Write the close checkpoints of the chains this process wrote to, then refuse
        further appends (the pool belongs to the store). Idempotent."""
        if self._closed:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            self.checkpoint_due(closing=True)
        except StockadeError as exc:
            _log.error("cannot write the close audit checkpoints: %s", exc.message)
        self._closed = True


@dataclass(frozen=True, slots=True)
class _Head:
    """A chain's head row: last ``seq`` and ``head`` hash, ``signed`` (the ``seq`` of the
    last checkpoint) and whether that checkpoint is older than the interval."""

    seq: int
    head: str
    signed: int
    stale: bool


class PgApprovals:
    """Single-use approvals signed by an approver key (see the module docstring).

    Args:
        db: the store's pool.
        audit: the chain ``approval.redeemed`` records go to.
        approver: the approver private key, for hosts that approve in-band; ``None``:
            :meth:`issue` fails closed (APPROVER_KEY_MISSING).
        trusted: the approver public keys redemptions are checked against; ``None``:
            :meth:`redeem` fails closed (APPROVER_KEY_MISSING).
    """

    def __init__(
        self, db: Database, audit: PgAuditChain, *, approver: ApproverKey | None, trusted: TrustedKeys | None
    ) -> None:
        self._db = db
        self._audit = audit
        self._approver = approver
        self._trusted = trusted_with(trusted, approver)

    def issue(self, plan: InvocationPlan, *, ttl_s: float = 300.0, now: float | None = None) -> Approval:
        """Sign, record and return an approval of ``plan`` valid for ``ttl_s`` seconds.

        Raises:
            ApproverKeyMissing: this host holds no approver key.
            ValueError: ``ttl_s`` is not a positive, finite number, or ``now`` is not finite.
            StoreUnavailable: the approval could not be recorded.
        """
        if self._approver is None:
            raise ApproverKeyMissing(
                f"{plan.tool} needs a person's approval, and this host holds no approver key "
                "to sign one on the shared store",
                hint="Set `approver_key` in the [host] table of stockade.host.toml (a "
                "`stockade keygen` key, mode 0600), or approve from the queue with "
                "`stockade approvals approve` on a machine that holds it.",
            )
        fields = approval_fields(plan, ttl_s=ttl_s, now=now)
        approval = sign_approval(self._approver, fields)
        self._db.run(
            lambda conn: record_approval(conn, approval), what="record an approval", idempotent=False
        )
        return approval

    def redeem(self, plan: InvocationPlan, approval: Approval, *, now: float | None = None) -> None:
        """Verify ``approval``'s signature and consume it for ``plan`` once, fleet-wide.

        Raises:
            ApproverKeyMissing: no trusted approver public key is configured.
            ApprovalInvalid: unsigned or badly signed, for another action, principal or
                session, expired, already used or its nonce already redeemed (one opaque error).
            AuditUnavailable: the consumption and its record could not be committed
                (then the approval was not consumed).
        """
        if self._trusted is None or len(self._trusted) == 0:
            raise ApproverKeyMissing(
                "approvals on the shared store are signed by an approver key, and this host "
                "trusts none: it cannot redeem one",
                hint="Set `trusted_approver_keys` (a stockade.keys/1 file of approver public "
                "keys) in the [host] table of stockade.host.toml.",
            )
        verify_approval(self._trusted, approval)
        if not approval_binds(plan, approval, reference_time(now)):
            raise ApprovalInvalid("the approval is not valid for this action")
        record = {
            "action_digest": approval.action_digest,
            "project": approval.project,
            "subject": approval.subject,
            "session": approval.session,
            "nonce": approval.nonce,
            "approver_key_id": approval.key_id,
        }
        chain = chain_of(record, self._audit.scope)

        def op(conn: Conn) -> None:
            with committing(conn):
                # The nonce table, not the row's consumed_at, is what refuses a replay: a
                # re-armed row (consumed_at = NULL) still finds its nonce here.
                fresh = conn.execute(
                    "INSERT INTO approval_nonces (nonce, expires_at) VALUES (%s, to_timestamp(%s)) "
                    "ON CONFLICT DO NOTHING RETURNING nonce",
                    (approval.nonce, approval.expires_at),
                ).fetchone()
                won = fresh is not None and conn.execute(
                    "UPDATE approvals SET consumed_at = now() WHERE nonce = %s AND mac = %s "
                    "AND action_digest = %s AND project = %s AND subject = %s AND session = %s "
                    "AND consumed_at IS NULL AND expires_at > now() RETURNING nonce",
                    (approval.nonce, approval.signature, approval.action_digest, approval.project,
                     approval.subject, approval.session),
                ).fetchone() is not None
                if not won:
                    raise ApprovalInvalid("the approval is not valid for this action")
                self._audit.append_in(conn, chain, "approval.redeemed", record)

        self._db.run(op, what="redeem an approval", idempotent=False, error=AuditUnavailable)


def approval_fields(plan: InvocationPlan, *, ttl_s: float, now: float | None) -> dict[str, Any]:
    """The six fields an approval of ``plan`` binds, with a fresh nonce.

    Raises:
        ValueError: ``ttl_s`` is not a positive, finite number, or ``now`` is not finite.
    """
    finite = not isinstance(ttl_s, bool) and isinstance(ttl_s, (int, float)) and math.isfinite(ttl_s)
    if not finite or ttl_s <= 0:
        raise ValueError("ttl_s must be a positive, finite number of seconds")
    principal = plan.request.principal
    return {
        "action_digest": plan.action_digest, "project": principal.project, "subject": principal.subject,
        "session": plan.request.session, "expires_at": reference_time(now) + ttl_s,
        "nonce": secrets.token_hex(16),
    }


class PgLockGenerations:
    """The accepted lock state of a scope as one row (see the module docstring).

    The row holds the same document as ``lock-state.json``. :meth:`accept` locks the row,
    materializes the document in a private temp dir and lets :class:`host.trust.lock.LockState`
    judge the offered lock there — the file backend's rules, unchanged, are the only
    rules — then writes the result back in the same transaction.
    """

    def __init__(self, db: Database, dsn: str, *, scope: str) -> None:
        self._db = db
        self._dsn = dsn
        self.scope = scope

    def accept(self, lock: LoadedLock, *, unsafe_accept_rollback: bool = False) -> tuple[str, ...]:
        """Accept a verified lock for every process of the scope; return what was overridden.

        Raises:
            LockRollback: older generation, fork or downgrade; the row is unchanged.
            LockInvalid: the stored state is corrupt.
            StoreUnavailable: the row could not be read or written.
        """

        def op(conn: Conn) -> tuple[str, ...]:
            with committing(conn):
                conn.execute(
                    "INSERT INTO lock_state (scope, generation, state) VALUES (%s, NULL, '') "
                    "ON CONFLICT DO NOTHING",
                    (self.scope,),
                )
                row = conn.execute(
                    "SELECT state FROM lock_state WHERE scope = %s FOR UPDATE", (self.scope,)
                ).fetchone()
                before = str(row[0]) if row else ""
                result, after = _judge_in_private_dir(before, lock, unsafe=unsafe_accept_rollback)
                if after != before:
                    generation = json.loads(after)["generation"]
                    conn.execute(
                        "UPDATE lock_state SET state = %s, generation = %s, updated_at = now() "
                        "WHERE scope = %s",
                        (after, generation, self.scope),
                    )
                    conn.execute("SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, f"{self.scope}:{generation}"))
                return result

        return self._db.run(op, what="accept a lock generation", idempotent=False)

    def current_generation(self) -> int | None:
        """The highest generation accepted in this scope (polling; None before the first).

        Raises:
            StoreUnavailable: the row could not be read.
        """

        def op(conn: Conn) -> int | None:
            row = conn.execute("SELECT generation FROM lock_state WHERE scope = %s", (self.scope,)).fetchone()
            return None if row is None or row[0] is None else int(row[0])

        return self._db.run(op, what="read the accepted lock generation", idempotent=True)

    def wait_newer(self, than: int | None, *, timeout_s: float) -> int | None:
        """Block until a generation newer than ``than`` is accepted anywhere (LISTEN/NOTIFY).

        Returns:
            The newer generation, or None when ``timeout_s`` passed without one.

        Raises:
            StoreUnavailable: the database could not be reached.
        """
        deadline = time.monotonic() + timeout_s
        listener = self.listen()
        try:
            while True:
                current = self.current_generation()
                if current is not None and (than is None or current > than):
                    return current
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                ready, _, _ = select.select([listener.fileno()], [], [], left)
                if ready:
                    listener.drain()
        finally:
            listener.close()

    def listen(self) -> PgGenerationListener:
        """Subscribe to accept notices on a dedicated connection (for
        :class:`host.store.watch.GenerationWatcher`).

        Raises:
            StoreUnavailable: the database could not be reached.
        """
        return PgGenerationListener(self._dsn, describe=self._db.describe)


class PgGenerationListener:
    """A ``LISTEN`` connection of its own (outside the pool) whose socket a watcher selects on.

    Raises:
        StoreUnavailable: the database could not be reached (password never included).
    """

    def __init__(
        self, dsn: str, *, describe: Callable[[BaseException], str], connect_timeout_s: int = 5
    ) -> None:
        self._describe = describe
        try:
            self._conn = psycopg.connect(dsn, autocommit=True, connect_timeout=connect_timeout_s)
        except psycopg.Error as exc:
            raise StoreUnavailable(f"cannot listen for lock generations: {describe(exc)}") from None
        try:
            self._conn.execute(f"LISTEN {NOTIFY_CHANNEL}".encode())
        except psycopg.Error as exc:
            self._conn.close()
            raise StoreUnavailable(f"cannot listen for lock generations: {describe(exc)}") from None

    def fileno(self) -> int:
        """The connection's socket (readable when a notice may have arrived)."""
        return self._conn.fileno()

    def drain(self) -> int:
        """Consume the notices received so far; return how many.

        Raises:
            StoreUnavailable: the connection was lost.
        """
        try:
            return sum(1 for _ in self._conn.notifies(timeout=0))
        except psycopg.Error as exc:
            raise StoreUnavailable(f"lost the lock generation listener: {self._describe(exc)}") from None

    def close(self) -> None:
        """Close the connection. Idempotent."""
        self._conn.close()


def _judge_in_private_dir(state: str, lock: LoadedLock, *, unsafe: bool) -> tuple[tuple[str, ...], str]:
    """Run :meth:`LockState.accept` on ``state`` in a private temp dir; return
    (overridden findings, the new state document)."""
    with tempfile.TemporaryDirectory(prefix="stockade-lockstate-") as tmp:
        judge = LockState(Path(tmp))
        if state:
            judge.path.write_text(state, encoding="utf-8")
        result = overrides_of(judge, lock, unsafe_accept_rollback=unsafe)
        return result, judge.path.read_text(encoding="utf-8")


class PostgresStore(StoreLifecycle):
    """The PostgreSQL backend (see the module docstring).

    Args:
        dsn: a libpq URL (``postgresql://user:password@host/db``) or key=value string.
        chain_scope: ``"project"`` (default: one audit chain per project) or ``"single"``.
        lock_scope: the name of the fleet whose lock generations move together.
        pool_size: most connections this process opens.
        timeout_s: seconds to wait for a connection before failing closed.
        probe_interval_s: while the server is unreachable, seconds between reconnection
            probes; calls in between fail at once (0: every call probes).
        signer: the host's audit key (:meth:`host.audit.key.AuditKey.load_or_create`):
            audit chains get signed checkpoints (:class:`PgAuditChain`); ``None``: none.
        checkpoint_every: records between two checkpoints of a chain (at most).
        checkpoint_interval_s: seconds after which a chain's unsigned records get one.
        approver: the approver private key (hosts that approve in-band, ``stockade
            approvals approve``); its public key is trusted as well.
        trusted_approver_keys: the approver public keys approvals are verified against.

    Raises:
        StoreUnavailable: malformed DSN, unreachable server, or a schema that is not
            exactly this Stockade's (run ``stockade store migrate``).
    """

    kind: Final = "postgres"

    def __init__(
        self,
        dsn: str,
        *,
        chain_scope: ChainScope = "project",
        lock_scope: str = "default",
        pool_size: int = 8,
        timeout_s: float = 5.0,
        probe_interval_s: float = PROBE_INTERVAL_S,
        signer: AuditKey | None = None,
        checkpoint_every: int = 1000,
        checkpoint_interval_s: float = 60.0,
        approver: ApproverKey | None = None,
        trusted_approver_keys: TrustedKeys | None = None,
    ) -> None:
        if chain_scope not in ("project", "single"):
            raise ValueError(f"chain_scope must be 'project' or 'single', not {chain_scope!r}")
        self._db = Database(dsn, pool_size=pool_size, timeout_s=timeout_s, probe_interval_s=probe_interval_s)
        try:
            self._db.run(check_version, what="read the schema version", idempotent=True)
        except BaseException:
            self._db.close()
            raise
        self.audit = PgAuditChain(
            self._db, scope=chain_scope, signer=signer,
            checkpoint_every=checkpoint_every, checkpoint_interval_s=checkpoint_interval_s,
        )
        self.approvals = PgApprovals(self._db, self.audit, approver=approver, trusted=trusted_approver_keys)
        self.rate_limits = PgRateLimits(self._db)
        self.grants = PgGrants(self._db)
        self.locks = PgLockGenerations(self._db, dsn, scope=lock_scope)
        self.pending = PgPendingApprovals(self._db, approver=approver, trusted=trusted_approver_keys)
        self.scopes = PgScopes(self._db, self.audit, trusted=trusted_with(trusted_approver_keys, approver))

    @property
    def database(self) -> Database:
        """The connection pool (for export and verification)."""
        return self._db

    def chains(self) -> list[tuple[str, int, str]]:
        """Every chain as (name, seq, head).

        Raises:
            StoreUnavailable: the database could not be read.
        """

        def op(conn: Conn) -> list[tuple[str, int, str]]:
            rows = conn.execute("SELECT chain, seq, head FROM audit_chains ORDER BY chain").fetchall()
            return [(str(r[0]), int(r[1]), str(r[2])) for r in rows]

        return self._db.run(op, what="list audit chains", idempotent=True)

    def lines(self, chain: str, *, batch: int = 1000) -> Iterator[str]:
        """The records of ``chain`` in order, each its exact canonical JSON line.

        Raises:
            StoreUnavailable: the database could not be read.
        """
        after = 0
        while True:
            def op(conn: Conn, after: int = after) -> list[tuple[int, str]]:
                return [
                    (int(r[0]), str(r[1]))
                    for r in conn.execute(
                        "SELECT seq, line FROM audit_records WHERE chain = %s AND seq > %s "
                        "ORDER BY seq LIMIT %s",
                        (chain, after, batch),
                    )
                ]

            rows = self._db.run(op, what="read the audit chain", idempotent=True)
            if not rows:
                return
            for seq, line in rows:
                yield line
                after = seq

    def close(self) -> None:
        """Close the pool. Idempotent."""
        self.audit.close()
        self._db.close()

    def __repr__(self) -> str:
        return f"PostgresStore({self._db.display!r})"
