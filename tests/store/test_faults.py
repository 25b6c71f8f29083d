"""The database stops in the middle of a run: the store fails closed, loses nothing
committed, and works again after a restart.

Runs on its own cluster (module scope) so stopping it never disturbs other tests.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from host.audit.log import verify
from host.errors import AuditUnavailable, RateLimited, StoreUnavailable
from host.store.migrations import migrate
from host.store.postgres import PostgresStore
from tests.store.conftest import _unavailable
from tests.support.fleet import Worker, make_repo
from tests.support.hosts import ALICE
from tests.support.postgres import Cluster, find_bin_dir


@pytest.fixture(scope="module")
def own_cluster() -> Iterator[Cluster]:
    if find_bin_dir() is None:
        _unavailable("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    cluster = Cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_database_stopped_mid_run_fails_closed_and_loses_no_committed_record(
    own_cluster: Cluster, tmp_path: Path
) -> None:
    dsn = own_cluster.create_database("faults")
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)
    committed: list[str] = []
    with PostgresStore(dsn, timeout_s=1.0, probe_interval_s=0) as store:
        for n in range(20):
            committed.append(store.audit.append("call.outcome", {"project": "p", "n": n}))
        store.grants.grant(ALICE.key, "s1", "echo.say")
        own_cluster.pg_stop()
        try:
            with pytest.raises(AuditUnavailable) as caught:
                store.audit.append("call.intent", {"project": "p", "n": 20})
            assert caught.value.code == "AUDIT_UNAVAILABLE"
            assert own_cluster.password not in str(caught.value.to_dict())
            with pytest.raises(StoreUnavailable):
                store.grants.discharges(ALICE.key, "s1", "echo.say")
            with pytest.raises(StoreUnavailable):
                store.rate_limits.check_and_consume(ALICE.key, "echo.say", per_minute=5, per_hour=None)
        finally:
            own_cluster.pg_start()
        # Pooled connections died with the server: the first use after the restart retries
        # on a fresh connection (nothing had been sent), so these succeed.
        committed.append(store.audit.append("call.outcome", {"project": "p", "n": 21}))
        assert store.grants.discharges(ALICE.key, "s1", "echo.say") is True
        store.rate_limits.check_and_consume(ALICE.key, "echo.say", per_minute=1, per_hour=None)
        with pytest.raises(RateLimited):
            store.rate_limits.check_and_consume(ALICE.key, "echo.say", per_minute=1, per_hour=None)
        path = tmp_path / "audit.jsonl"
        path.write_text("".join(line + "\n" for line in store.lines("project:p")))
    report = verify(path, expected_head=committed[-1])
    assert report.ok and report.records == 21
    text = path.read_text()
    assert all(audit_id in text for audit_id in committed)
    assert '"n":20' not in text  # the refused append left nothing behind


def test_database_stopped_under_running_host_processes_nothing_runs_unaudited(
    own_cluster: Cluster, tmp_path: Path
) -> None:
    dsn = own_cluster.create_database("fleetfaults")
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)
    repo = make_repo(tmp_path / "repo")
    workers = [Worker(repo, dsn, f"w{i}", store_timeout_s=1.0, probe_s=0) for i in range(2)]
    try:
        for worker in workers:
            assert worker.ask("open", lock="gen1.lock")["ok"] is True
        before = [w.ask("calls", n=10, tool="echo.write", session="s1") for w in workers]
        # Mid-run: one worker is in the middle of a batch when the server stops.
        workers[0].send("calls", n=300, tool="echo.write", session="s1")
        own_cluster.pg_stop()
        try:
            during = [workers[1].ask("calls", n=3, tool="echo.write", session="s1"), workers[0].answer()]
        finally:
            own_cluster.pg_start()
        after = [w.ask("calls", n=10, tool="echo.write", session="s1") for w in workers]
    finally:
        for worker in workers:
            worker.close()
    assert during[0]["codes"] == {"AUDIT_UNAVAILABLE": 3}  # no intent record: the guest never started
    batch = Counter(during[1]["codes"])
    assert set(batch) <= {"OK", "AUDIT_UNAVAILABLE", "RAN_AUDIT_UNAVAILABLE"} and batch["AUDIT_UNAVAILABLE"] > 0
    assert all(a["codes"] == {"OK": 10} for a in before + after)
    with PostgresStore(dsn) as store:
        path = tmp_path / "audit.jsonl"
        path.write_text("".join(line + "\n" for line in store.lines("project:p")))
    report = verify(path)
    assert report.ok, report.reason
    records = [json.loads(line) for line in path.read_text().splitlines()]
    on_chain = {r["hash"] for r in records}
    returned = {i for a in before + during + after for i in a["ids"]}
    assert returned <= on_chain  # no committed record was lost
    intents = sum(1 for r in records if r["kind"] == "call.intent")
    ran = sum(a["codes"].get("OK", 0) for a in before + during + after) + batch["RAN_AUDIT_UNAVAILABLE"]
    # Every guest that started had its intent on the chain first. (An intent whose commit
    # reply was lost is on the chain with no guest run: hence >=, bounded by the refusals.)
    assert ran <= intents <= ran + batch["AUDIT_UNAVAILABLE"]


def test_following_host_survives_a_database_restart_and_reloads_afterwards(
    own_cluster: Cluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import logging  # noqa: PLC0415
    import shutil  # noqa: PLC0415

    from tests.store.test_reload import WAIT_S, open_host  # noqa: PLC0415
    from tests.store.test_reload import make_repo as make_two_generations  # noqa: PLC0415

    dsn = own_cluster.create_database("follow")
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)
    repo = make_two_generations(tmp_path / "repo")
    b_lock = repo.root / "b.lock"
    shutil.copyfile(repo.gen1, b_lock)
    caplog.set_level(logging.ERROR, logger="stockade.reload")
    with PostgresStore(dsn, timeout_s=1.0, probe_interval_s=0) as store_b:
        with open_host(repo, b_lock, store_b, "b") as b:
            follower = b.follow_generations(poll_s=0.05)
            own_cluster.pg_stop()
            try:
                assert follower.watcher.wait_checks(3, timeout_s=WAIT_S)  # failing, not dead
            finally:
                own_cluster.pg_start()
            assert follower.watcher.thread.is_alive()
            shutil.copyfile(repo.gen2, b_lock)
            with PostgresStore(dsn) as store_a, open_host(repo, repo.gen2, store_a, "a"):
                assert [e.ok for e in follower.wait(1, timeout_s=WAIT_S)] == [True]
            assert b.generation == 2
        assert not follower.thread.is_alive()
    failures = [r.getMessage() for r in caplog.records if "cannot read the accepted" in r.getMessage()]
    assert len(failures) == 1  # logged once per outage, not once per poll
