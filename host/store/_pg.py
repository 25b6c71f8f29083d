"""Connections to the store's PostgreSQL database: a pool, fail-closed error mapping and a
DSN whose password never reaches a log, an error or an audit record.

Every database error becomes a :class:`~host.errors.StockadeError` at this boundary
(CONTRIBUTING.md principle 3): the caller chooses which (AUDIT_UNAVAILABLE for an audit append,
STORE_UNAVAILABLE otherwise). Messages are built from the error's class and its first
line with the password cut out, never from the DSN.

Retries: :meth:`Database.run` retries a lost connection once, on a fresh connection.
Operations run in explicit transactions, so a connection lost *before* the commit was
sent left nothing behind (the server rolls the transaction back) and is always retried.
Once a commit may have been sent the operation raises :class:`WriteStarted`: its outcome
is unknown, and it runs again only when the caller declared it idempotent (reads,
``ON CONFLICT DO NOTHING`` inserts, deletes) — never an audit append, an approval
redemption or a rate-limit consumption.

Outages: once an operation failed for want of a connection, calls fail at once (the same
error, naming the cause) instead of each waiting a whole ``timeout_s``; one caller per
:data:`PROBE_INTERVAL_S` tries a direct connection, and when it works the pool's dead
connections are replaced and calls go through again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Final, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool, PoolTimeout

from host import observe
from host.errors import StockadeError, StoreUnavailable

__all__ = ["MASK", "Conn", "Database", "DsnError", "WriteStarted", "committing", "redact_dsn"]

MASK: Final = "********"
DEFAULT_POOL_SIZE: Final = 8  # connections per process
DEFAULT_TIMEOUT_S: Final = 5.0  # s to get a connection (connect, or wait for a free one)
PROBE_INTERVAL_S: Final = 0.25  # s between connection probes while the server is unreachable
_MAX_DETAIL_CHARS: Final = 300  # characters of a driver message kept in our error

_log = logging.getLogger("stockade.store")

T = TypeVar("T")
Conn = psycopg.Connection[tuple[Any, ...]]


class DsnError(Exception):
    """The DSN could not be parsed (its text is deliberately not repeated)."""


class WriteStarted(Exception):
    """Raised by an operation (wrapping the driver error) once it has sent a write, so
    :meth:`Database.run` knows the outcome is unknown and must not retry."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__("a write was sent before the failure")
        self.cause = cause


def _parse(dsn: str) -> dict[str, object]:
    try:
        return dict(conninfo_to_dict(dsn))
    except psycopg.Error:
        # psycopg's message quotes the offending part of the DSN, which may be the password.
        raise DsnError("the store DSN is malformed (not repeated here: it may hold a password)") from None


def redact_dsn(dsn: str) -> str:
    """``dsn`` with its password (if any) replaced by ``********``, as key=value pairs.

    Raises:
        DsnError: the DSN is malformed.
    """
    params = _parse(dsn)
    if params.get("password"):
        params["password"] = MASK
    return make_conninfo("", **params)  # type: ignore[arg-type]  # values are the parsed strings


class Database:
    """A connection pool on one DSN (connections in autocommit; transactions explicit).

    Args:
        dsn: a libpq URL or key=value string.
        pool_size: most connections this process opens.
        timeout_s: seconds to wait for a connection before failing closed.
        probe_interval_s: while the server is unreachable, seconds between connection
            probes (calls in between fail at once); 0 probes on every call.

    Raises:
        StoreUnavailable: the DSN is malformed or the server cannot be reached.
    """

    def __init__(
        self,
        dsn: str,
        *,
        pool_size: int = DEFAULT_POOL_SIZE,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        probe_interval_s: float = PROBE_INTERVAL_S,
    ) -> None:
        try:
            params = _parse(dsn)
        except DsnError as exc:
            raise StoreUnavailable(str(exc)) from None
        secret = params.get("password")
        self._password = secret if isinstance(secret, str) and secret else None
        self.display = redact_dsn(dsn)
        self._dsn = dsn  # private: never printed (self.display is the redacted form)
        self._timeout_s = timeout_s
        self._probe_interval_s = probe_interval_s
        self._down_until = 0.0  # monotonic s; non-zero while the server is unreachable
        self._down_reason = ""
        self._probe_lock = threading.Lock()
        self._pool = ConnectionPool(
            dsn,
            min_size=1,
            max_size=pool_size,
            open=False,
            timeout=timeout_s,
            reconnect_timeout=timeout_s * 2,
            kwargs={"autocommit": True, "connect_timeout": max(1, round(timeout_s))},
            name="stockade-store",
        )
        try:
            # One direct connection first: its error names the cause (refused, bad password),
            # where the pool's own would only say that it timed out.
            psycopg.connect(dsn, connect_timeout=max(1, round(timeout_s))).close()
            self._pool.open(wait=True, timeout=timeout_s)
        except Exception as exc:  # psycopg.Error or PoolTimeout: the server is not usable
            self._pool.close()
            raise StoreUnavailable(
                f"cannot connect to the store database {self.display}: {self.describe(exc)}"
            ) from None

    def describe(self, exc: BaseException) -> str:
        """A one-line description of a driver error with the password cut out."""
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        if self._password:
            text = text.replace(self._password, MASK)
        return f"{type(exc).__name__}: {text[:_MAX_DETAIL_CHARS]}" if text else type(exc).__name__

    def run(
        self,
        op: Callable[[psycopg.Connection[tuple[object, ...]]], T],
        *,
        what: str,
        idempotent: bool,
        error: type[StockadeError] = StoreUnavailable,
    ) -> T:
        """Run ``op`` on a pooled connection; map driver errors to ``error``.

        Args:
            op: the operation; raise :class:`WriteStarted` around a driver error that came
                after a write was sent.
            what: what the operation does, for the error message ("append to the audit chain").
            idempotent: the whole operation may run twice with the same effect.
            error: the StockadeError class raised when the database fails.

        Raises:
            ``error``: the database failed (after at most one retry, see the module docs).
            StockadeError: whatever ``op`` raises itself (ApprovalInvalid, RateLimited, ...).
        """
        if self._down_until:
            self._probe(what, error)
        for attempt in (1, 2):
            try:
                with self._pool.connection() as conn:
                    return op(conn)
            except WriteStarted as exc:
                # A commit may have been sent: only an idempotent operation may run again.
                cause: psycopg.Error | BaseException = exc.cause
                again = idempotent and isinstance(cause, psycopg.Error) and _retryable(cause)
            except psycopg.Error as exc:
                cause, again = exc, _retryable(exc)
            if attempt == 2 or not again:
                break
            _log.warning("store: %s failed (%s); retrying once", what, self.describe(cause))
            self._pool.check()
        if isinstance(cause, psycopg.OperationalError):
            self._down_reason = self.describe(cause)
            self._down_until = time.monotonic() + self._probe_interval_s
        observe.store_error("postgres", what, error.code)
        raise error(f"the store database failed to {what}: {self.describe(cause)}") from None


    def _probe(self, what: str, error: type[StockadeError]) -> None:
        """While the server is unreachable: fail at once, except one caller per
        :data:`PROBE_INTERVAL_S`, who tries one direct connection; when it works, the
        pool is checked (dead connections replaced) and calls go through again."""
        with self._probe_lock:
            now = time.monotonic()
            if not self._down_until:
                return
            if now < self._down_until and self._probe_interval_s > 0:
                observe.store_error("postgres", what, error.code)
                raise error(f"the store database failed to {what}: unreachable ({self._down_reason})")
            self._down_until = now + self._probe_interval_s  # others fail fast during this probe
        try:
            psycopg.connect(self._dsn, connect_timeout=max(1, round(self._timeout_s))).close()
        except psycopg.Error as exc:
            self._down_reason = self.describe(exc)
            observe.store_error("postgres", what, error.code)
            raise error(f"the store database failed to {what}: unreachable ({self._down_reason})") from None
        self._down_until = 0.0
        self._pool.check()

    def close(self) -> None:
        """Close every connection. Idempotent."""
        self._pool.close()


def _retryable(exc: psycopg.Error) -> bool:
    """Whether one more attempt on a fresh connection may succeed.

    A connection error (a pooled connection found closed by a server restart) may;
    a pool timeout will not (the pool already spent the whole timeout connecting), nor
    will any other error (a missing table, a constraint).
    """
    return isinstance(exc, psycopg.OperationalError) and not isinstance(exc, PoolTimeout)


class committing:
    """``with conn.transaction()`` whose commit failure is marked :class:`WriteStarted`
    (the commit may have reached the server: its outcome is unknown)."""

    def __init__(self, conn: Conn) -> None:
        self._tx = conn.transaction()

    def __enter__(self) -> None:
        self._tx.__enter__()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is not None:
            self._tx.__exit__(exc_type, exc, tb)
            return
        try:
            self._tx.__exit__(None, None, None)
        except psycopg.Error as commit_error:
            raise WriteStarted(commit_error) from commit_error
