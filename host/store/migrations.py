"""Versioned schema of the PostgreSQL store (``stockade store migrate``).

:data:`MIGRATIONS` is an append-only list: migration *n* takes the schema from version
*n - 1* to *n*, and a shipped migration is never edited (a fix is a new migration). The
applied version is the one row of ``stockade_schema``.

- :func:`migrate` applies every pending migration, each in its own transaction, under a
  transaction-level advisory lock so two operators (or two hosts' start-up scripts) racing
  to migrate apply each step once. It refuses a database whose schema is *newer* than this
  Stockade knows (a rolled-back deploy must not write into a schema it does not understand).
- :func:`check_version` is what :class:`~host.store.postgres.PostgresStore` runs when it
  opens: anything but exactly :data:`SCHEMA_VERSION` fails closed (STORE_UNAVAILABLE) with
  the command to run. Hosts never migrate on their own.

Tables (version 1): ``audit_chains`` (one head row per chain: ``seq``, ``head``),
``audit_records`` (``chain``, ``seq``, ``hash``, ``line`` — the exact canonical JSON line
of :mod:`host.audit.log`), ``approvals`` (single-use, ``consumed_at``), ``rate_buckets``
(sliding-window counters), ``session_grants``, ``lock_state`` (the accepted-lock state
document per scope). Version 2: ``pending_approvals`` (the queue of actions waiting for
a person, one row per action digest and principal). Version 3: ``audit_chains`` gains
``checkpoint_seq`` and ``checkpoint_at`` (the chain's last signed checkpoint: its ``seq``
and when it was written, on the database's clock). Version 4: ``approval_nonces`` (the
nonce of every redeemed approval, primary key, kept a day past its expiry): approvals are
signed by an approver key (:mod:`host.approverkey`), and a row re-armed in ``approvals``
is refused because its nonce is already here; ``approvals.mac`` now holds the approver's
Ed25519 signature. Version 5: ``scopes`` and ``scope_uses`` (:mod:`host.store.pgscopes`); ``session_grants``
gains ``expires_at`` (grants given before get 8 hours), ``max_calls`` and ``used``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from host.errors import StoreUnavailable

if TYPE_CHECKING:
    import psycopg

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "check_version", "migrate", "migrate_database", "schema_version"]

_LOCK_KEY: Final = 0x5370_6B61_6465  # advisory lock id for migrations ("Stockade")

MIGRATIONS: Final[tuple[str, ...]] = (
    # 1: the first schema.
    """
    CREATE TABLE audit_chains (
        chain text PRIMARY KEY,
        seq bigint NOT NULL CHECK (seq >= 0),
        head text NOT NULL
    );
    CREATE TABLE audit_records (
        chain text NOT NULL REFERENCES audit_chains (chain),
        seq bigint NOT NULL CHECK (seq >= 1),
        hash text NOT NULL,
        line text NOT NULL,
        PRIMARY KEY (chain, seq)
    );
    CREATE TABLE approvals (
        nonce text PRIMARY KEY,
        action_digest text NOT NULL,
        project text NOT NULL,
        subject text NOT NULL,
        session text NOT NULL,
        mac text NOT NULL,
        issued_at timestamptz NOT NULL DEFAULT now(),
        expires_at timestamptz NOT NULL,
        consumed_at timestamptz
    );
    CREATE INDEX approvals_expires_at ON approvals (expires_at);
    CREATE TABLE rate_buckets (
        key text NOT NULL,
        win char(1) NOT NULL CHECK (win IN ('m', 'h')),
        bucket bigint NOT NULL,
        count integer NOT NULL CHECK (count > 0),
        PRIMARY KEY (key, win, bucket)
    );
    CREATE TABLE session_grants (
        project text NOT NULL,
        subject text NOT NULL,
        session text NOT NULL,
        tool text NOT NULL,
        granted_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (project, subject, session, tool)
    );
    CREATE INDEX session_grants_session ON session_grants (session);
    CREATE TABLE lock_state (
        scope text PRIMARY KEY,
        generation bigint,
        state text NOT NULL,
        updated_at timestamptz NOT NULL DEFAULT now()
    );
    """,
    # 2: the pending-approval queue (host.store.pending).
    """
    CREATE TABLE pending_approvals (
        action_digest text NOT NULL,
        project text NOT NULL,
        subject text NOT NULL,
        entry text NOT NULL,
        status text NOT NULL CHECK (status IN ('pending', 'approved', 'denied')),
        requested_at double precision NOT NULL,
        expires_at double precision NOT NULL,
        PRIMARY KEY (action_digest, project, subject)
    );
    """,
    # 3: signed audit checkpoints per chain (host.store.postgres.PgAuditChain).
    """
    ALTER TABLE audit_chains
        ADD COLUMN checkpoint_seq bigint NOT NULL DEFAULT 0 CHECK (checkpoint_seq >= 0),
        ADD COLUMN checkpoint_at timestamptz NOT NULL DEFAULT now();
    """,
    # 4: redeemed approval nonces (host.store.postgres.PgApprovals): approvals are signed
    # statements; a re-armed row is refused because its nonce is recorded here. Approvals
    # issued before (MAC rows) can no longer be redeemed: drop them.
    """
    CREATE TABLE approval_nonces (
        nonce text PRIMARY KEY,
        redeemed_at timestamptz NOT NULL DEFAULT now(),
        expires_at timestamptz NOT NULL
    );
    CREATE INDEX approval_nonces_expires_at ON approval_nonces (expires_at);
    DELETE FROM approvals;
    """,
    # 5: scopes a person grants ahead of time (host.store.pgscopes): the signed document
    # and its counters; the bounds enforced are the signed document's.
    """
    CREATE TABLE scopes (
        id text PRIMARY KEY,
        project text NOT NULL,
        subject text NOT NULL,
        doc text NOT NULL,
        issued_at timestamptz NOT NULL DEFAULT now(),
        not_after timestamptz NOT NULL,
        used_total integer NOT NULL DEFAULT 0 CHECK (used_total >= 0),
        revoked_at timestamptz,
        revoked_by text,
        expired_recorded boolean NOT NULL DEFAULT false
    );
    CREATE INDEX scopes_principal ON scopes (project, subject);
    CREATE TABLE scope_uses (
        scope_id text NOT NULL REFERENCES scopes (id) ON DELETE CASCADE,
        tool text NOT NULL,
        used integer NOT NULL CHECK (used >= 0),
        PRIMARY KEY (scope_id, tool)
    );
    ALTER TABLE session_grants
        ADD COLUMN expires_at timestamptz NOT NULL DEFAULT now() + interval '8 hours',
        ADD COLUMN max_calls integer CHECK (max_calls IS NULL OR max_calls >= 1),
        ADD COLUMN used integer NOT NULL DEFAULT 0 CHECK (used >= 0);
    """,
)

SCHEMA_VERSION: Final = len(MIGRATIONS)


def schema_version(conn: psycopg.Connection[tuple[object, ...]]) -> int:
    """The applied schema version (0 for a database never migrated)."""
    exists = conn.execute("SELECT to_regclass('stockade_schema') IS NOT NULL").fetchone()
    if not exists or not exists[0]:
        return 0
    row = conn.execute("SELECT version FROM stockade_schema").fetchone()
    return int(row[0]) if row else 0  # type: ignore[call-overload]  # an integer column


def _refuse_newer(version: int) -> None:
    if version > SCHEMA_VERSION:
        raise StoreUnavailable(
            f"the store's schema is version {version}, newer than this Stockade knows ({SCHEMA_VERSION})",
            hint="Upgrade Stockade on this machine; never run an older Stockade against a newer store.",
            schema_version=version,
            supported_version=SCHEMA_VERSION,
        )


def check_version(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """Fail closed unless the schema is exactly :data:`SCHEMA_VERSION`.

    Raises:
        StoreUnavailable: not migrated, behind, or newer than this Stockade.
    """
    version = schema_version(conn)
    _refuse_newer(version)
    if version < SCHEMA_VERSION:
        raise StoreUnavailable(
            f"the store's schema is version {version}; this Stockade needs {SCHEMA_VERSION}",
            hint="Run `stockade store migrate --store <dsn>` once, then start the hosts.",
            schema_version=version,
            supported_version=SCHEMA_VERSION,
        )


def migrate(conn: psycopg.Connection[tuple[object, ...]]) -> tuple[int, int]:
    """Apply every pending migration (each in one transaction) and return (from, to).

    ``conn`` must be in autocommit mode (each step opens its own transaction).

    Raises:
        StoreUnavailable: the schema is newer than this Stockade knows.
        psycopg.Error: a statement failed (the failing step is rolled back).
    """
    start = -1
    for step in range(1, SCHEMA_VERSION + 1):
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            conn.execute("CREATE TABLE IF NOT EXISTS stockade_schema (version integer NOT NULL)")
            version = schema_version(conn)
            if start < 0:
                start = version
            _refuse_newer(version)
            if version >= step:
                continue
            conn.execute(MIGRATIONS[step - 1].encode())
            if version == 0:
                conn.execute("INSERT INTO stockade_schema (version) VALUES (%s)", (step,))
            else:
                conn.execute("UPDATE stockade_schema SET version = %s", (step,))
    start = max(start, 0)
    return start, max(start, SCHEMA_VERSION)


def migrate_database(dsn: str) -> tuple[int, int, str]:
    """Open ``dsn`` (one connection), :func:`migrate` it and close it.

    The public path for the CLI's ``store migrate`` (``sdk`` never imports
    ``host.store._pg``).

    Raises:
        ImportError: psycopg 3 is not installed (``stockade[postgres]``).
        StoreUnavailable: the database is unreachable or its schema is newer than this
            Stockade knows.

    Returns:
        (schema version before, after, the DSN as shown without its password).
    """
    from host.store._pg import Database  # noqa: PLC0415 - optional dependency (psycopg)

    db = Database(dsn, pool_size=1)
    try:
        before, after = db.run(migrate, what="migrate the schema", idempotent=False)
    finally:
        db.close()
    return before, after, db.display
