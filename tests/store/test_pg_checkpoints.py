"""Signed audit checkpoints on PostgreSQL chains: the file log's format and
cadence, verified in place and in an export, against a real server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from host.audit.key import AuditKey
from host.audit.log import CHECKPOINT_KIND, verify
from host.canonical import canonical_json
from host.store.chain import export_chain, verify_chain
from host.store.postgres import PostgresStore


@pytest.fixture
def key() -> AuditKey:
    return AuditKey.generate()


def keys_of(key: AuditKey) -> dict[str, Any]:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey  # noqa: PLC0415

    return {key.key_id: Ed25519PublicKey.from_public_bytes(key.public_bytes)}


def records(store: PostgresStore, chain: str = "project:p") -> list[dict[str, Any]]:
    return [json.loads(line) for line in store.lines(chain)]


def test_checkpoints_follow_the_file_logs_cadence_and_verify_with_the_key(pg_dsn: str, key: AuditKey) -> None:
    with PostgresStore(pg_dsn, signer=key, checkpoint_every=3) as store:
        for n in range(7):
            store.audit.append("call.outcome", {"project": "p", "n": n})
        store.audit.append("call.outcome", {"project": "q", "n": 0})
        with pytest.raises(ValueError, match="written by the log itself"):
            store.audit.append(CHECKPOINT_KIND, {"project": "p"})
    with PostgresStore(pg_dsn) as store:
        p = records(store)
        q = records(store, "project:q")
        report = verify_chain(store, "project:p", keys=keys_of(key))
    checkpoints = [(r["seq"], r["count"], r["reason"]) for r in p if r["kind"] == CHECKPOINT_KIND]
    assert checkpoints == [(4, 3, "records"), (8, 7, "records"), (10, 9, "close")]
    assert [r["kind"] for r in q] == ["call.outcome", CHECKPOINT_KIND]  # closed: every chain written to
    assert (report.ok, report.keys_checked, report.checkpoints, report.closed) == (True, True, 3, True)
    assert report.unsigned_tail == 0


def test_idle_chain_gets_an_interval_checkpoint_from_any_process(pg_dsn: str, key: AuditKey) -> None:
    with PostgresStore(pg_dsn) as writer:  # an unsigning writer left records behind
        writer.audit.append("call.outcome", {"project": "p"})
    with PostgresStore(pg_dsn, signer=key, checkpoint_interval_s=3600) as other:
        assert other.audit.checkpoint_due() == 0  # unsigned, but not for an interval yet
        with psycopg.connect(pg_dsn, autocommit=True) as conn:  # an hour passes
            conn.execute("UPDATE audit_chains SET checkpoint_at = now() - interval '2 hours'")
        assert other.audit.checkpoint_due() == 1
        assert other.audit.checkpoint_due() == 0  # nothing unsigned any more
        (first, checkpoint) = records(other)
    assert (checkpoint["kind"], checkpoint["reason"], checkpoint["head"]) == (CHECKPOINT_KIND, "interval", first["hash"])


def test_record_edited_and_rehashed_before_a_checkpoint_is_detected_in_place(
    pg_dsn: str, key: AuditKey, tmp_path: Path
) -> None:
    with PostgresStore(pg_dsn, signer=key, checkpoint_every=3) as store:
        for n in range(5):
            store.audit.append("call.outcome", {"project": "p", "tool": "t", "ok": True, "n": n})
    _rewrite_and_rehash(pg_dsn, "project:p", seq=2, change={"ok": False})
    with PostgresStore(pg_dsn) as store:
        unkeyed = verify_chain(store, "project:p")
        keyed = verify_chain(store, "project:p", keys=keys_of(key))
        with open(tmp_path / "export.jsonl", "wb") as out:
            export_chain(store, "project:p", out)
    assert unkeyed.ok  # an unkeyed chain cannot tell a re-hashed edit (the reason for checkpoints)
    assert not keyed.ok
    assert keyed.first_broken == 4  # the checkpoint over records 1-3
    assert "signature does not verify" in keyed.reason
    exported = verify(tmp_path / "export.jsonl", keys=keys_of(key))
    assert (exported.ok, exported.first_broken) == (False, 4)


def _rewrite_and_rehash(dsn: str, chain: str, *, seq: int, change: dict[str, Any]) -> None:
    """What someone with write access to the database does: edit one record, recompute
    every later hash and link, and move the head row — all but the signatures."""
    import hashlib  # noqa: PLC0415

    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT seq, line FROM audit_records WHERE chain = %s ORDER BY seq", (chain,)).fetchall()
        prev = None
        for number, line in rows:
            record = json.loads(line)
            if number == seq:
                record.update(change)
            if prev is not None and number > seq:
                record["prev"] = prev
                if record["kind"] == CHECKPOINT_KIND:
                    record["head"] = prev
            if number >= seq:
                record.pop("hash")
                record["hash"] = hashlib.sha256(canonical_json(record)).hexdigest()
                conn.execute("UPDATE audit_records SET hash = %s, line = %s WHERE chain = %s AND seq = %s",
                             (record["hash"], canonical_json(record).decode(), chain, number))
            prev = record["hash"]
        conn.execute("UPDATE audit_chains SET head = %s WHERE chain = %s", (prev, chain))


def records_head(dsn: str, seq: int) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT hash FROM audit_records WHERE chain = 'project:p' AND seq = %s", (seq,)).fetchone()
    return str(row[0])


def _truncate_and_rewind(dsn: str, chain: str, *, keep: int) -> None:
    """What someone with write access to the database does to hide the last records:
    delete them (past a signed checkpoint) and rewind the head row to the record kept."""
    with psycopg.connect(dsn) as conn:
        conn.execute("DELETE FROM audit_records WHERE chain = %s AND seq > %s", (chain, keep))
        (head,) = conn.execute(
            "SELECT hash FROM audit_records WHERE chain = %s AND seq = %s", (chain, keep)
        ).fetchone()
        conn.execute(
            "UPDATE audit_chains SET seq = %s, head = %s, checkpoint_seq = LEAST(checkpoint_seq, %s) "
            "WHERE chain = %s",
            (keep, head, keep, chain),
        )


def test_pg_audit_records_deleted_and_head_rewound_detected_by_the_anchor(
    pg_dsn: str, key: AuditKey, tmp_path: Path
) -> None:
    """Deleting the last records and rewinding the head row (even past a signed
    checkpoint) verified as "chain intact": the database alone cannot tell a shorter
    chain. The newest checkpoint a verification reports, kept outside the database and
    passed back as the expected head, detects it."""
    from tests.support.cli import cli_env, run_cli  # noqa: PLC0415

    with PostgresStore(pg_dsn, signer=key, checkpoint_every=3) as store:
        for n in range(7):
            store.audit.append("call.outcome", {"project": "p", "n": n})
    with PostgresStore(pg_dsn) as store:
        before = verify_chain(store, "project:p", keys=keys_of(key))
    assert before.ok and before.anchor is not None
    anchor = before.anchor  # checkpoints at 4 and 8 (every 3 records), and 10 on close
    assert (anchor.seq, anchor.count, anchor.head) == (10, 9, records_head(pg_dsn, 9))
    assert anchor.key_id == key.key_id
    env = cli_env(STOCKADE_STORE=pg_dsn, STOCKADE_HOME=str(tmp_path / "home"))
    shown = run_cli("log", "verify", "--chain", "project:p", "--json", cwd=tmp_path, env=env)
    assert json.loads(shown.stdout)["newest_checkpoint"]["hash"] == anchor.hash, shown.stderr
    _truncate_and_rewind(pg_dsn, "project:p", keep=5)  # two signed records and the checkpoint gone
    with PostgresStore(pg_dsn) as store:
        blind = verify_chain(store, "project:p", keys=keys_of(key))
        anchored = verify_chain(store, "project:p", keys=keys_of(key), expected_head=anchor.hash)
    assert blind.ok and blind.records == 5  # the limit README states: nothing inside the database shows it
    assert blind.anchor is not None and blind.anchor.seq == 4  # the report names an older checkpoint
    assert not anchored.ok and "is not in the log (truncated or rewritten)" in anchored.reason
    done = run_cli("log", "verify", "--chain", "project:p", "--expected-head", anchor.hash, cwd=tmp_path, env=env)
    assert done.returncode == 1 and "AUDIT_LOG_BROKEN" in done.stderr, done.stdout + done.stderr
