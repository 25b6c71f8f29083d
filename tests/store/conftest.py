"""Fixtures for the state-store tests: both backends, and a real PostgreSQL server.

``pg_cluster`` (session scope) runs one throw-away cluster per test process — under
pytest-xdist that is one per worker, so workers never share a server or a database.
``pg_dsn`` gives each test a fresh, migrated database on it. Without PostgreSQL server
binaries (or psycopg) the database tests skip with a loud reason, unless
``STOCKADE_REQUIRE_POSTGRES=1`` (CI), where they fail instead.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from host.audit.log import AuditLog
from host.store import LocalStore, StateStore
from tests.support.approver import APPROVER
from tests.support.postgres import REQUIRE_ENV, Cluster, find_bin_dir

# Read once at import: the autouse clean_environ fixture scrubs STOCKADE_* for each test.
REQUIRE_POSTGRES = os.environ.get(REQUIRE_ENV) == "1"
_names = itertools.count(1)


def _unavailable(reason: str) -> None:
    message = f"PostgreSQL store tests NOT RUN: {reason}"
    if REQUIRE_POSTGRES:
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """A running cluster for this test process (skips or fails loudly when unavailable)."""
    try:
        import psycopg  # noqa: F401, PLC0415
        import psycopg_pool  # noqa: F401, PLC0415
    except ImportError:
        _unavailable("psycopg / psycopg-pool are not installed (pip install 'stockade[postgres]')")
    if find_bin_dir() is None:
        _unavailable("PostgreSQL server binaries (initdb, pg_ctl) are not installed (apt-get install postgresql)")
    cluster = Cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_dsn(pg_cluster: Cluster) -> str:
    """A fresh, migrated database for one test."""
    import psycopg  # noqa: PLC0415

    from host.store.migrations import migrate  # noqa: PLC0415

    dsn = pg_cluster.create_database(f"t{os.getpid()}_{next(_names)}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)
    return dsn


def open_local(root: Path) -> LocalStore:
    root.mkdir(parents=True, exist_ok=True)
    return LocalStore(root / "state", audit=AuditLog(root / "audit.log"), owns_audit=True)


@pytest.fixture(params=["local", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, object]]:
    """(kind, opener): ``opener()`` opens one more store on the same shared state."""
    if request.param == "local":
        yield "local", lambda: open_local(tmp_path)
    else:
        dsn = request.getfixturevalue("pg_dsn")
        from host.store.postgres import PostgresStore  # noqa: PLC0415

        yield "postgres", lambda: PostgresStore(dsn, approver=APPROVER)


@pytest.fixture
def store(backend: tuple[str, object]) -> Iterator[StateStore]:
    """One store of each backend."""
    _, opener = backend
    opened: StateStore = opener()  # type: ignore[operator]
    try:
        yield opened
    finally:
        opened.close()
