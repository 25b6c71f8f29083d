"""PostgreSQL-only behaviour of the store: sharing between stores, migrations, the DSN's
password, per-project chains, concurrent appends and generation notices.

Several :class:`PostgresStore` objects on one database stand for several processes here
(each has its own pool); ``test_fleet.py`` repeats the key properties with real processes.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import psycopg
import pytest

from host.audit.log import verify
from host.errors import ApprovalInvalid, LockRollback, RateLimited, StoreUnavailable
from host.store import open_postgres
from host.store.chain import export_chain, pick_chain, verify_chain
from host.store.migrations import SCHEMA_VERSION, migrate
from host.store.postgres import PostgresStore
from host.types import InvocationPlan
from tests.store.test_contract import Locks, plans  # noqa: F401 - the module-scoped plans fixture
from tests.support.approver import APPROVER
from tests.support.hosts import ALICE
from tests.support.postgres import Cluster


def export(store: PostgresStore, chain: str, path: Path) -> Path:
    path.write_text("".join(line + "\n" for line in store.lines(chain)))
    return path


def test_two_stores_share_approvals_grants_limits_and_generations(
    pg_dsn: str, plans: dict[str, InvocationPlan], tmp_path: Path  # noqa: F811
) -> None:
    with PostgresStore(pg_dsn, approver=APPROVER) as a, PostgresStore(pg_dsn, approver=APPROVER) as b:
        approval = a.approvals.issue(plans["s1"])
        b.approvals.redeem(plans["s1"], approval)
        with pytest.raises(ApprovalInvalid):
            a.approvals.redeem(plans["s1"], approval)
        a.grants.grant(ALICE.key, "s1", "echo.say")
        assert b.grants.discharges(ALICE.key, "s1", "echo.say") is True
        assert b.grants.clear_grants("s1") == 1
        assert a.grants.discharges(ALICE.key, "s1", "echo.say") is False
        a.rate_limits.check_and_consume(ALICE.key, "echo.say", per_minute=1, per_hour=None)
        with pytest.raises(RateLimited):
            b.rate_limits.check_and_consume(ALICE.key, "echo.say", per_minute=1, per_hour=None)
        gen1, gen2 = Locks(tmp_path).chain(2)
        a.locks.accept(gen2)
        with pytest.raises(LockRollback):
            b.locks.accept(gen1)
        assert b.locks.current_generation() == 2


def test_redeemed_approval_is_on_the_chain_in_the_same_transaction(
    pg_dsn: str, plans: dict[str, InvocationPlan], tmp_path: Path  # noqa: F811
) -> None:
    with PostgresStore(pg_dsn, approver=APPROVER) as store:
        approval = store.approvals.issue(plans["s1"])
        store.approvals.redeem(plans["s1"], approval)
        lines = list(store.lines("project:p"))
    assert len(lines) == 1
    assert '"kind":"approval.redeemed"' in lines[0] and approval.nonce in lines[0]
    assert verify(export_lines(lines, tmp_path)).ok


def export_lines(lines: list[str], tmp_path: Path) -> Path:
    path = tmp_path / "audit.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_one_chain_per_project_and_a_host_chain(pg_dsn: str, tmp_path: Path) -> None:
    with PostgresStore(pg_dsn) as store:
        store.audit.append("lock.accepted", {"generation": 1})
        for project in ("p", "q", "p"):
            store.audit.append("call.outcome", {"project": project, "ok": True})
        chains = {name: seq for name, seq, _ in store.chains()}
        assert chains == {"host": 1, "project:p": 2, "project:q": 1}
        for name in chains:
            assert verify(export(store, name, tmp_path / f"{name}.jsonl")).ok
    with PostgresStore(pg_dsn, chain_scope="single") as single:
        single.audit.append("call.outcome", {"project": "p"})
        assert ("all", 1) in [(name, seq) for name, seq, _ in single.chains()]


def test_concurrent_appends_never_fork_the_chain(pg_dsn: str, tmp_path: Path) -> None:
    ids: list[str] = []
    guard = threading.Lock()
    with PostgresStore(pg_dsn) as a, PostgresStore(pg_dsn) as b:

        def writer(store: PostgresStore, n: int) -> None:
            for i in range(40):
                audit_id = store.audit.append("call.outcome", {"project": "p", "writer": n, "i": i})
                with guard:
                    ids.append(audit_id)

        threads = [threading.Thread(target=writer, args=((a, b)[n % 2], n)) for n in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        path = export(a, "project:p", tmp_path / "audit.jsonl")
    report = verify(path)
    assert report.ok and report.records == 240
    assert sorted(ids) == sorted(line.split('"hash":"')[1][:64] for line in path.read_text().splitlines())


# -- migrations ----------------------------------------------------------------------------


def test_unmigrated_database_refused_with_the_command_to_run(pg_cluster: Cluster) -> None:
    dsn = pg_cluster.create_database("unmigrated")
    with pytest.raises(StoreUnavailable) as caught:
        PostgresStore(dsn)
    assert caught.value.code == "STORE_UNAVAILABLE"
    assert "schema is version 0" in caught.value.message
    assert "stockade store migrate" in caught.value.hint


def test_newer_schema_refused_by_hosts_and_by_migrate(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE stockade_schema SET version = %s", (SCHEMA_VERSION + 1,))
        with pytest.raises(StoreUnavailable, match="newer than this Stockade"):
            migrate(conn)
        assert conn.execute("SELECT version FROM stockade_schema").fetchone() == (SCHEMA_VERSION + 1,)
    with pytest.raises(StoreUnavailable, match="newer than this Stockade") as caught:
        PostgresStore(pg_dsn)
    assert caught.value.details["schema_version"] == SCHEMA_VERSION + 1


def test_migrate_twice_is_a_no_op(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert migrate(conn) == (SCHEMA_VERSION, SCHEMA_VERSION)


# -- the DSN's password ----------------------------------------------------------------------


def test_dsn_password_never_in_errors_logs_or_repr(
    pg_cluster: Cluster, pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "hunter2-" + "x" * 12
    bad = pg_dsn.replace(pg_cluster.password, wrong)
    with pytest.raises(StoreUnavailable) as caught:
        PostgresStore(bad, timeout_s=2.0)
    text = str(caught.value.to_dict())
    assert wrong not in text and "********" in text
    assert "password authentication failed" in text
    with PostgresStore(pg_dsn) as store:
        assert pg_cluster.password not in repr(store)
        assert "********" in repr(store)
    assert wrong not in caplog.text and pg_cluster.password not in caplog.text


def test_malformed_dsn_is_not_echoed(pg_cluster: Cluster) -> None:
    secret = "s3cret pass"
    with pytest.raises(StoreUnavailable) as caught:
        open_postgres(f"postgresql://u:{secret}@[bad/db")
    assert "s3cret" not in str(caught.value.to_dict())
    assert "malformed" in caught.value.message


# -- lock generations: notice of a newer one -----------------------------------------------------


def test_newer_generation_is_noticed_through_notify(pg_dsn: str, tmp_path: Path) -> None:
    gen1, gen2 = Locks(tmp_path).chain(2)
    seen: list[int | None] = []
    with PostgresStore(pg_dsn) as a, PostgresStore(pg_dsn) as b:
        a.locks.accept(gen1)
        assert b.locks.wait_newer(1, timeout_s=0.2) is None
        started = threading.Event()

        def wait() -> None:
            started.set()
            seen.append(b.locks.wait_newer(1, timeout_s=30))

        waiter = threading.Thread(target=wait)
        waiter.start()
        started.wait()
        a.locks.accept(gen2)
        waiter.join()
    assert seen == [2]


# -- export and in-place verification ------------------------------------------------------------


def test_exported_chain_verifies_as_an_audit_log_file(pg_dsn: str, tmp_path: Path) -> None:
    with PostgresStore(pg_dsn) as store:
        ids = [store.audit.append("call.outcome", {"project": "p", "n": n}) for n in range(3)]
        assert pick_chain(store, None) == "project:p"
        with open(tmp_path / "audit.jsonl", "wb") as out:
            assert export_chain(store, "project:p", out) == 3
        assert verify_chain(store, "project:p", expected_head=ids[-1]).ok
    assert verify(tmp_path / "audit.jsonl", expected_head=ids[-1]).ok


def test_tail_records_deleted_in_the_database_detected_by_in_place_verify(pg_dsn: str) -> None:
    with PostgresStore(pg_dsn) as store:
        for n in range(4):
            store.audit.append("call.outcome", {"project": "p", "n": n})
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM audit_records WHERE chain = 'project:p' AND seq >= 3")
        report = verify_chain(store, "project:p")
    assert not report.ok and report.records == 2
    assert "records were removed or rewritten" in report.reason


def test_record_edited_in_the_database_detected_by_in_place_verify(pg_dsn: str) -> None:
    with PostgresStore(pg_dsn) as store:
        for n in range(3):
            store.audit.append("call.outcome", {"project": "p", "n": n})
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("UPDATE audit_records SET line = replace(line, '\"n\":1', '\"n\":9') WHERE seq = 2")
        report = verify_chain(store, "project:p")
    assert not report.ok and report.first_broken == 2


def test_several_chains_need_a_name(pg_dsn: str) -> None:
    with PostgresStore(pg_dsn) as store:
        store.audit.append("call.outcome", {"project": "p"})
        store.audit.append("call.outcome", {"project": "q"})
        with pytest.raises(StoreUnavailable, match="several audit chains") as caught:
            pick_chain(store, None)
        assert "project:p" in caught.value.hint
        with pytest.raises(StoreUnavailable, match="no audit chain"):
            pick_chain(store, "project:zz")
