"""A failed PostgreSQL store operation is counted (``stockade.store.errors``) by backend,
operation and error code, scraped from the Prometheus endpoint."""

from __future__ import annotations

import psycopg
import pytest

from host.errors import StoreUnavailable
from host.observe.prometheus import MetricsEndpoint
from host.store.postgres import PostgresStore
from tests.support.approver import APPROVER
from tests.support.otel import metrics_endpoint, scrape

__all__ = ["metrics_endpoint"]


def test_failed_postgres_operation_is_counted_by_operation_and_code(
    pg_dsn: str, metrics_endpoint: MetricsEndpoint
) -> None:
    store = PostgresStore(pg_dsn, approver=APPROVER)
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("DROP TABLE rate_buckets")  # a broken schema: every count fails
        for _ in range(2):
            with pytest.raises(StoreUnavailable, match="count a rate-limited call"):
                store.rate_limits.check_and_consume(("p", "alice"), "t", per_minute=5, per_hour=None)
    finally:
        store.close()
    labels = frozenset({("stockade_store_backend", "postgres"),
                        ("stockade_store_operation", "count a rate-limited call"),
                        ("error_type", "STORE_UNAVAILABLE")})  # fmt: skip
    assert scrape(metrics_endpoint)[("stockade_store_errors_total", labels)] == 2
