"""The database stops in the middle of a run: the store fails closed, loses nothing
committed, and works again after a restart.

Runs on its own cluster (module scope) so stopping it never disturbs other tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from host.audit import verify
from host.errors import AuditUnavailable, RateLimited, StoreUnavailable
from host.store.migrations import migrate
from host.store.postgres import PostgresStore
from tests.store.conftest import _unavailable
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
    with PostgresStore(dsn, timeout_s=1.0) as store:
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
