"""Rate-limit windows and session grants of the PostgreSQL store (see
:mod:`host.store.postgres` for the whole backend).

- :class:`PgRateLimits`: the sliding windows of :mod:`host.ratelimit` (same buckets, same
  retry-after) in ``rate_buckets``, read and counted in one transaction under a per-key
  advisory lock, on the database's clock. Commits do not wait for the WAL flush
  (``synchronous_commit = off``): a server crash may forget the last milliseconds of
  counts, never an audit record.
- :class:`PgGrants`: rows of ``session_grants`` with an end and an optional count, judged
  on the database's clock; a use is one conditional ``UPDATE``, a clear one ``DELETE``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from typing import Final

from host.errors import RateLimited
from host.policy.grants import DEFAULT_GRANT_TTL_S, _check_key, check_grant_bounds
from host.ratelimit import _BUCKETS, _HOUR, _MINUTE, _check_limit, _retry_after, _Window
from host.store._pg import Conn, Database, committing

__all__ = ["PgGrants", "PgRateLimits"]

_SWEEP_EVERY: Final = 1024  # rate-limit consumptions between sweeps of expired buckets


class PgRateLimits:
    """The windows of :mod:`host.ratelimit`, kept in ``rate_buckets`` (module docstring)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._calls = 0
        self._lock = threading.Lock()

    def check_and_consume(
        self, principal_key: tuple[str, str], tool: str, *, per_minute: int | None, per_hour: int | None
    ) -> None:
        """Admit and count one call in one transaction, or refuse it counting nothing.

        Raises:
            RateLimited: a window is full (``details["retry_after_s"]``).
            StoreUnavailable: the windows could not be read or written.
            ValueError: a limit that is not a positive int or None.
        """
        _check_limit("per_minute", per_minute)
        _check_limit("per_hour", per_hour)
        if per_minute is None and per_hour is None:
            return
        key = json.dumps([principal_key[0], principal_key[1], tool], separators=(",", ":"))
        limits = {"m": per_minute, "h": per_hour}
        with self._lock:
            self._calls += 1
            sweep = self._calls % _SWEEP_EVERY == 0

        def op(conn: Conn) -> None:
            with committing(conn):
                self._consume(conn, key, tool, limits, sweep=sweep)

        self._db.run(op, what="count a rate-limited call", idempotent=False)

    @staticmethod
    def _consume(conn: Conn, key: str, tool: str, limits: Mapping[str, int | None], *, sweep: bool) -> None:
        # Counters, not the audit trail: the commit does not wait for the WAL flush. A
        # server crash can forget the last few milliseconds of counts (never a record).
        conn.execute("SET LOCAL synchronous_commit = off")
        row = conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0)), "
            "extract(epoch FROM clock_timestamp())::float8",
            (key,),
        ).fetchone()
        now = float(row[1]) if row else time.time()
        windows: dict[str, _Window] = {"m": _MINUTE, "h": _HOUR}
        current = {w: int(now // windows[w].width_s) for w in windows}
        buckets: dict[str, dict[int, int]] = {"m": {}, "h": {}}
        for win, bucket, count in conn.execute(
            "SELECT win, bucket, count FROM rate_buckets WHERE key = %s "
            "AND ((win = 'm' AND bucket >= %s) OR (win = 'h' AND bucket >= %s))",
            (key, current["m"] - _BUCKETS, current["h"] - _BUCKETS),
        ):
            buckets[str(win)][int(bucket)] = int(count)
        refusals = [
            (_retry_after(buckets[w], limit, windows[w], now), windows[w], limit)
            for w, limit in limits.items()
            if limit is not None and sum(buckets[w].values()) >= limit
        ]
        if refusals:
            retry, window, limit = max(refusals, key=lambda r: r[0])
            raise RateLimited(
                f"{tool} may be called {limit} times per {window.name}; retry in {retry:.3f} s",
                retry_after_s=retry, window=window.name, limit=limit, tool=tool,
            )
        for win, wanted in limits.items():
            if wanted is not None:
                conn.execute(
                    "INSERT INTO rate_buckets (key, win, bucket, count) VALUES (%s, %s, %s, 1) "
                    "ON CONFLICT (key, win, bucket) DO UPDATE SET count = rate_buckets.count + 1",
                    (key, win, current[win]),
                )
        oldest = (current["m"] - _BUCKETS, current["h"] - _BUCKETS)
        if sweep:
            conn.execute(
                "DELETE FROM rate_buckets WHERE (win = 'm' AND bucket < %s) OR (win = 'h' AND bucket < %s)",
                oldest,
            )
        else:
            conn.execute(
                "DELETE FROM rate_buckets WHERE key = %s "
                "AND ((win = 'm' AND bucket < %s) OR (win = 'h' AND bucket < %s))",
                (key, *oldest),
            )


class PgGrants:
    """Session grants as rows of ``session_grants``; they discharge *ask* only. Ends and
    counts are judged on the database's clock; a use is one conditional ``UPDATE``."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def grant(
        self,
        principal_key: tuple[str, str],
        session: str,
        tool: str,
        *,
        ttl_s: float = DEFAULT_GRANT_TTL_S,
        max_calls: int | None = None,
    ) -> None:
        """Record "always" for ``tool`` in ``session`` of ``principal_key`` for ``ttl_s``
        seconds and at most ``max_calls`` calls (a new grant replaces the old one).

        Raises:
            StoreUnavailable: the grant could not be recorded.
            TypeError: an empty or non-string part.
            ValueError: an unbounded ``ttl_s`` or a bad ``max_calls``.
        """
        _check_key(principal_key, session, tool)
        check_grant_bounds(ttl_s, max_calls)

        def op(conn: Conn) -> None:
            with committing(conn):
                conn.execute(
                    "INSERT INTO session_grants (project, subject, session, tool, expires_at, max_calls) "
                    "VALUES (%s, %s, %s, %s, now() + make_interval(secs => %s), %s) "
                    "ON CONFLICT (project, subject, session, tool) DO UPDATE SET granted_at = now(), "
                    "expires_at = EXCLUDED.expires_at, max_calls = EXCLUDED.max_calls, used = 0",
                    (*principal_key, session, tool, float(ttl_s), max_calls),
                )

        self._db.run(op, what="record a session grant", idempotent=True)

    def discharges(self, principal_key: tuple[str, str], session: str, tool: str) -> bool:
        """Whether a live grant (unexpired, calls left) exists for exactly this principal,
        session and tool.

        Raises:
            StoreUnavailable: the grants could not be read.
            TypeError: an empty or non-string part.
        """
        _check_key(principal_key, session, tool)

        def op(conn: Conn) -> bool:
            row = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM session_grants WHERE project = %s AND subject = %s "
                "AND session = %s AND tool = %s AND now() < expires_at "
                "AND (max_calls IS NULL OR used < max_calls))",
                (*principal_key, session, tool),
            ).fetchone()
            return bool(row and row[0] is True)

        return self._db.run(op, what="read session grants", idempotent=True)

    def consume(self, principal_key: tuple[str, str], session: str, tool: str) -> int | None:
        """Count one use, fleet-wide (see :meth:`host.policy.grants.SessionGrants.consume`).

        Raises:
            StoreUnavailable: the grant could not be counted.
            TypeError: an empty or non-string part.
        """
        _check_key(principal_key, session, tool)

        def op(conn: Conn) -> int | None:
            with committing(conn):
                row = conn.execute(
                    "UPDATE session_grants SET used = used + 1 WHERE project = %s AND subject = %s "
                    "AND session = %s AND tool = %s AND now() < expires_at "
                    "AND (max_calls IS NULL OR used < max_calls) RETURNING max_calls - used",
                    (*principal_key, session, tool),
                ).fetchone()
            if row is None:
                return -1
            return None if row[0] is None else int(row[0])

        return self._db.run(op, what="count a session grant", idempotent=False)

    def revoke(self, principal_key: tuple[str, str], session: str, tool: str) -> bool:
        """End one grant for every process; whether there was one.

        Raises:
            StoreUnavailable: the grant could not be removed.
            TypeError: an empty or non-string part.
        """
        _check_key(principal_key, session, tool)

        def op(conn: Conn) -> bool:
            with committing(conn):
                return conn.execute(
                    "DELETE FROM session_grants WHERE project = %s AND subject = %s AND session = %s "
                    "AND tool = %s RETURNING tool",
                    (*principal_key, session, tool),
                ).fetchone() is not None

        return self._db.run(op, what="revoke a session grant", idempotent=True)

    def clear_grants(
        self, session: str | None = None, *, principal_key: tuple[str, str] | None = None
    ) -> int:
        """Forget grants (one session, one principal, both, or all) for every process.

        Returns:
            How many (principal, session) entries were removed.

        Raises:
            StoreUnavailable: the grants could not be cleared.
        """
        project, subject = principal_key if principal_key is not None else (None, None)

        def op(conn: Conn) -> int:
            with committing(conn):
                row = conn.execute(
                    "WITH gone AS (DELETE FROM session_grants WHERE (%(s)s::text IS NULL OR session = %(s)s) "
                    "AND (%(p)s::text IS NULL OR (project = %(p)s AND subject = %(u)s)) "
                    "RETURNING project, subject, session) "
                    "SELECT count(*) FROM (SELECT DISTINCT project, subject, session FROM gone) AS pairs",
                    {"s": session, "p": project, "u": subject},
                ).fetchone()
            return int(row[0]) if row else 0

        return self._db.run(op, what="clear session grants", idempotent=True)
