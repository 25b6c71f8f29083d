"""Bounds of ``stockade serve --transport http``: one client must not take the service.

- **connections**: at most :attr:`HttpLimits.max_connections` open at once (clamped below
  the process's ``RLIMIT_NOFILE`` with room for the host's own files), so the process
  never runs out of file descriptors; at the cap a new connection replaces the one that
  has waited longest without a request being served, and is closed only when every
  connection is serving one;
- **request deadline**: a request's head *and* body must arrive within
  :attr:`HttpLimits.request_timeout_s` of its first byte (or of the connection, for one
  that sends nothing) — a half-open (slowloris) connection is closed at the deadline. A
  response may then stream for as long as it needs (SSE);
- **sessions**: Streamable HTTP sessions are bounded per principal and in total, and an
  idle one expires after :attr:`HttpLimits.session_idle_s`; a principal over its bound
  gets HTTP 429 whose JSON-RPC error names the bound, and nobody else is affected;
- **logs**: accept failures, deadline closures and protocol warnings are rate limited —
  one line per :data:`LOG_INTERVAL_S` per message with the count suppressed meanwhile,
  tracebacks dropped — so a flood cannot fill the disk through stderr.

Example::

    limits = HttpLimits(max_sessions_per_principal=4)
    config = uvicorn.Config(app, http=bounded_protocol(limits.clamped()))
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, replace
from typing import Any, Final

import h11
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = [
    "ACCEPT_BACKLOG",
    "LOG_INTERVAL_S", "HttpLimits", "RateLimitedLog", "SessionBounds", "bounded_protocol"]

_log = logging.getLogger("stockade.mcp")
LOG_INTERVAL_S: Final = 10.0  # s between two lines of one rate-limited message
FD_HEADROOM: Final = 64  # file descriptors kept for the host's own files (audit, state, lock)
ACCEPT_BACKLOG: Final = 64  # the listen backlog, and so the most connections accepted in one burst
_SESSION_HEADER: Final = b"mcp-session-id"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """Bounds of the HTTP transport (each a CLI flag of ``stockade serve``).

    Args:
        max_connections: connections open at once; one more is closed at accept.
        request_timeout_s: s for a request's head and body to arrive.
        max_sessions: Streamable HTTP sessions open at once, all principals.
        max_sessions_per_principal: sessions one principal may hold open.
        session_idle_s: s after which a session with no request in flight expires.
    """

    max_connections: int = 256
    request_timeout_s: float = 10.0
    max_sessions: int = 256
    max_sessions_per_principal: int = 8
    session_idle_s: float = 300.0

    def __post_init__(self) -> None:
        for name in ("max_connections", "max_sessions", "max_sessions_per_principal"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        for name in ("request_timeout_s", "session_idle_s"):
            value = getattr(self, name)
            if not (0 < value < 86400):
                raise ValueError(f"{name} must be between 0 and 86400 seconds")

    def clamped(self) -> HttpLimits:
        """These limits with ``max_connections`` below ``RLIMIT_NOFILE``, less the file
        descriptors already open, two accept bursts (:data:`ACCEPT_BACKLOG`: asyncio accepts
        that many before any connection is seen, and each may evict one) and :data:`FD_HEADROOM`."""
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return self
        allowed = max(1, soft - _open_fds() - 2 * ACCEPT_BACKLOG - FD_HEADROOM)  # a burst, and its evictions
        if self.max_connections <= allowed:
            return self
        _log.warning(
            "RLIMIT_NOFILE is %d: serving at most %d connections (asked for %d)",
            soft, allowed, self.max_connections,
        )  # fmt: skip
        return replace(self, max_connections=allowed)


def _open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:  # not Linux: assume a small interpreter
        return 32


class RateLimitedLog(logging.Filter):
    """A logging filter: each message at most once per interval, with the count it stood for.

    Tracebacks are dropped (a flood of identical accept failures is one line, not
    megabytes). Attach it to the loggers a network peer can make speak: ``asyncio``,
    ``uvicorn.error`` and ``stockade.mcp``.
    """

    def __init__(
        self, interval_s: float = LOG_INTERVAL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self._interval = interval_s
        self._clock = clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        key = f"{record.name}:{record.msg}"
        now = self._clock()
        with self._lock:
            if now - self._last.get(key, -self._interval) < self._interval:
                self._held[key] = self._held.get(key, 0) + 1
                return False
            self._last[key] = now
            held = self._held.pop(key, 0)
        if len(self._last) > 1024:  # messages keyed by arguments cannot grow it for ever
            with self._lock:
                self._last.clear()
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        if held:
            record.msg = f"{record.getMessage()} (and {held} more like it in the last {self._interval:g} s)"
            record.args = None
        return True


class _Open:
    """The connections of one server (event-loop thread only)."""

    def __init__(self) -> None:
        self.protocols: set[Any] = set()


def bounded_protocol(limits: HttpLimits) -> type[H11Protocol]:
    """uvicorn's h11 protocol with the connection cap and the request deadline of ``limits``.

    At the cap, a new connection takes the place of the connection that has waited longest
    without a request being served — first among those never served (half-open, slowloris),
    then among idle keep-alive ones; only when every connection is serving a request is the
    new one closed. So a flood of half-open
    connections evicts itself, and a client that sends its request at once is served.
    """
    open_ = _Open()

    class BoundedH11Protocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _waiting_since = 0.0
        _served = False  # a response was completed on this connection

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if len(open_.protocols) >= limits.max_connections and not self._evict_one():
                _log.warning("connection refused: all %d connections serve requests", limits.max_connections)
                transport.abort()
                return
            open_.protocols.add(self)
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if getattr(self, "transport", None) is None:  # uvicorn types it never-None
                return  # refused at the cap: uvicorn never saw it
            open_.protocols.discard(self)
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._deadline is None and self.conn.their_state is h11.IDLE:
                self._arm()  # the first byte of a new request on a kept-alive connection
            super().data_received(data)
            if not self._waiting():
                self._disarm()  # the request is in: its response may stream for as long as it needs

        def on_response_complete(self) -> None:
            self._served = True
            self._waiting_since = self.loop.time()  # idle keep-alive: evictable again
            super().on_response_complete()

        def _waiting(self) -> bool:
            return self.conn.their_state is h11.IDLE or self.conn.their_state is h11.SEND_BODY

        def _evict_one(self) -> bool:
            idle = [p for p in open_.protocols if p._waiting() and not p.transport.is_closing()]
            if not idle:
                return False
            # Connections that never had a request served go first (a half-open flood
            # evicts itself), then idle keep-alive ones; the longest waiting of each first.
            oldest = min(idle, key=lambda p: (p._served, p._waiting_since))
            _log.warning("connection closed at the cap: it sent no complete request")
            oldest.transport.abort()
            open_.protocols.discard(oldest)  # its connection_lost comes later, on the loop
            oldest._disarm()
            return True

        def _arm(self) -> None:
            self._disarm()
            self._waiting_since = self.loop.time()
            self._deadline = self.loop.call_later(limits.request_timeout_s, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            if self._waiting() and not self.transport.is_closing():
                _log.warning("connection closed: no complete request within %g s", limits.request_timeout_s)
                self.transport.abort()

    return BoundedH11Protocol


class SessionBounds:
    """Wraps the SDK session manager's ASGI app: sessions bounded per principal.

    A request without ``Mcp-Session-Id`` on the handshake era opens a session; its
    principal (the bearer token's project and subject, or the fixed principal) may hold
    :attr:`HttpLimits.max_sessions_per_principal` of them. Sessions are tracked by the id
    the response carries and forgotten once the SDK no longer knows them (ended, expired).
    The total bound and the idle expiry are the SDK's own (``max_sessions``,
    ``session_idle_timeout``).

    Args:
        inner: the SDK's ASGI app (``StreamableHTTPSessionManager.asgi_app``).
        live: the ids of the sessions the SDK currently serves.
        limits: the bounds.
        fixed: the principal key of a server without tokens.
    """

    def __init__(
        self,
        inner: Asgi,
        live: Callable[[], Any],
        limits: HttpLimits,
        fixed: tuple[str, str] | None,
    ) -> None:
        self._inner = inner
        self._live = live
        self._limits = limits
        self._fixed = fixed
        self._owner: dict[str, tuple[str, str]] = {}  # session id -> principal key
        self._opening: dict[tuple[str, str], int] = {}  # opening requests in flight

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key = self._principal(scope)
        if scope.get("type") != "http" or key is None or not _opens_session(scope):
            await self._inner(scope, receive, send)
            return
        bound = self._limits.max_sessions_per_principal
        if self._held(key) >= bound:
            _log.warning("session refused: a principal holds its %d sessions", bound)
            await _refuse(send, bound, self._limits.session_idle_s)
            return
        self._opening[key] = self._opening.get(key, 0) + 1

        async def record(message: Message) -> None:
            if message["type"] == "http.response.start" and message.get("status", 500) < 400:
                for name, value in message.get("headers", ()):
                    if name.lower() == _SESSION_HEADER:
                        self._owner[value.decode("latin-1")] = key
            await send(message)

        try:
            await self._inner(scope, receive, record)
        finally:
            self._opening[key] -= 1
            if not self._opening[key]:
                del self._opening[key]

    def _held(self, key: tuple[str, str]) -> int:
        live = self._live()
        for gone in [sid for sid in self._owner if sid not in live]:
            del self._owner[gone]
        return sum(1 for owner in self._owner.values() if owner == key) + self._opening.get(key, 0)

    def _principal(self, scope: Scope) -> tuple[str, str] | None:
        user = scope.get("user")
        token = getattr(user, "access_token", None)
        if token is None:
            return self._fixed
        claims = getattr(token, "claims", None) or {}
        return (str(claims.get("project")), str(getattr(token, "subject", None)))


def _opens_session(scope: Scope) -> bool:
    if scope.get("method") != "POST":
        return False
    headers = dict(scope.get("headers") or ())
    if _SESSION_HEADER in headers:
        return False
    version = headers.get(b"mcp-protocol-version")
    # The 2026-07-28 era is stateless (no session table); only the handshake era opens one
    # (the SDK routes exactly the same way).
    return version is None or version.decode("latin-1") in HANDSHAKE_PROTOCOL_VERSIONS


async def _refuse(send: Send, bound: int, idle_s: float) -> None:
    message = (
        f"BUSY: this principal already holds {bound} open sessions (the bound is {bound} per "
        f"principal); end one (HTTP DELETE) or let it expire after {idle_s:g} s idle"
    )
    body = ('{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"' + message + '"}}').encode()
    await send({
        "type": "http.response.start", "status": 429,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
    })  # fmt: skip
    await send({"type": "http.response.body", "body": body})
