"""Transports of ``stockade serve``: stdio and Streamable HTTP, plus lock reload triggers.

- stdio: stdout carries only MCP (the SDK points fd 1 at stderr while serving, so stray
  output cannot corrupt the stream); EOF on stdin ends the server cleanly.
- HTTP: with a tokens file every request must carry ``Authorization: Bearer stk_…``
  (401 otherwise); without one, the server runs as one fixed principal and only on a
  loopback address — :func:`check_bind` refuses anything else at start-up. Host and
  Origin headers are checked (403) against loopback names, plus the bound host and any
  origins the operator allows.
- reload: SIGHUP, or a change of the lock file's (mtime, size, inode) seen by a
  once-a-second poll, calls :meth:`StockadeMCP.reload`.

Example::

    anyio.run(serve_stdio, app, Path("stockade.lock"))
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import anyio
import uvicorn
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette

from host.mcp.limits import ACCEPT_BACKLOG, HttpLimits, RateLimitedLog, SessionBounds, bounded_protocol
from host.mcp.server import StockadeMCP
from host.mcp.tokens import TokenFile

__all__ = ["StockadeTokenVerifier", "check_bind", "http_app", "serve_http", "serve_stdio"]

_log = logging.getLogger("stockade.mcp")
LOCK_POLL_S: Final = 1.0  # s between lock-file checks
_LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]")
DEFAULT_LIMITS: Final = HttpLimits()


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) names only this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, *, authenticated: bool) -> None:
    """Refuse to serve HTTP on a non-loopback address without authentication.

    Raises:
        ValueError: the address is not loopback and no tokens (or OAuth) are configured.
    """
    if not authenticated and not is_loopback(host):
        raise ValueError(
            f"refusing to serve on {host!r} without authentication: anyone who can reach it "
            "could call tools as the configured principal; pass --tokens-file FILE "
            "(see `stockade tokens add`) or bind to 127.0.0.1"
        )


class StockadeTokenVerifier:
    """The SDK's ``TokenVerifier`` over a ``stockade.tokens/1`` file."""

    def __init__(self, tokens: TokenFile) -> None:
        self._tokens = tokens

    async def verify_token(self, token: str) -> AccessToken | None:
        """The principal of a valid token as an AccessToken; ``None`` (HTTP 401) otherwise."""
        entry = self._tokens.verify(token)
        if entry is None:
            return None
        return AccessToken(
            token="stk_" + entry.id,  # never keep the secret part around
            client_id=f"stockade-token:{entry.id}",
            scopes=[],
            expires_at=entry.expires_at,
            subject=entry.subject,
            claims={"project": entry.project},
        )


def http_app(
    app: StockadeMCP,
    *,
    host: str,
    port: int,
    verifier: TokenVerifier | None,
    issuer: str | None = None,
    allowed_origins: Sequence[str] = (),
    limits: HttpLimits = DEFAULT_LIMITS,
) -> Starlette:
    """The Starlette app serving MCP at ``/mcp`` (Streamable HTTP).

    Args:
        app: the server.
        host: the bound address (for Host/Origin checks and resource metadata).
        port: the bound port.
        verifier: checks bearer tokens (:class:`StockadeTokenVerifier` over a tokens
            file, or :class:`host.mcp.oauth.JwtVerifier`); ``None``: no authentication,
            the fixed principal, loopback only.
        issuer: the OAuth issuer named in the protected-resource metadata; ``None`` (stockade
            tokens): no metadata is published.
        allowed_origins: extra accepted ``Origin`` values.
        limits: sessions per principal and in total, idle expiry (:mod:`host.mcp.limits`).

    Raises:
        ValueError: see :func:`check_bind`; or no principal at all (neither a verifier
            nor a fixed principal).
    """
    check_bind(host, authenticated=verifier is not None)
    if verifier is None and app.options.principal is None:
        raise ValueError("an HTTP server without tokens needs a fixed principal (--project/--subject)")
    shown = f"[{host}]" if ":" in host else host
    hosts = [f"{name}:*" for name in _LOOPBACK_NAMES] + [f"{shown}:*"]
    origins = [f"http://{name}:*" for name in _LOOPBACK_NAMES] + [f"http://{shown}:*", *allowed_origins]
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )
    kwargs: dict[str, Any] = {
        "transport_security": security,
        "host": host,
        "max_sessions": limits.max_sessions,
        "session_idle_timeout": limits.session_idle_s,
    }
    if verifier is not None:
        base = f"http://{shown}:{port}"
        # Protected-resource metadata (RFC 9728) only names a real authorization server: for
        # stockade tokens there is none, and metadata naming this server sends OAuth-capable
        # clients into an interactive login against a 404.
        resource = f"{base}/mcp" if issuer is not None else None
        kwargs["auth"] = AuthSettings(issuer_url=issuer or base, resource_server_url=resource)
        kwargs["token_verifier"] = verifier
    starlette = app.server.streamable_http_app(**kwargs)
    manager = app.server.session_manager
    fixed = app.options.principal.key if verifier is None and app.options.principal is not None else None
    # The SDK's route calls the manager's asgi_app: sessions are admitted through the bound.
    manager.asgi_app = SessionBounds(  # type: ignore[assignment]  # any ASGI app fits the SDK's slot
        manager.asgi_app, lambda: manager._server_instances, limits, fixed
    )
    return starlette


async def serve_stdio(app: StockadeMCP, lock: Path) -> None:
    """Serve MCP on stdin/stdout until stdin reaches EOF; reload the lock on SIGHUP or change."""
    options = app.server.create_initialization_options(NotificationOptions(tools_changed=True))
    async with stdio_server() as (read, write), anyio.create_task_group() as group:
        group.start_soon(_reload_on_signal, app)
        group.start_soon(_reload_on_change, app, lock)
        await app.server.run(read, write, options)
        group.cancel_scope.cancel()


async def serve_http(
    app: StockadeMCP,
    lock: Path,
    *,
    host: str,
    port: int,
    verifier: TokenVerifier | None,
    issuer: str | None = None,
    allowed_origins: Sequence[str] = (),
    limits: HttpLimits = DEFAULT_LIMITS,
) -> None:
    """Serve Streamable HTTP on ``host:port`` (0 picks a free port; the URL goes to stderr).

    Connections, request deadlines, sessions and log volume are bounded by ``limits``
    (:mod:`host.mcp.limits`).
    """
    limits = limits.clamped()
    _rate_limit_logs()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    # Listen before the URL is printed: uvicorn only listens once its startup has run, and
    # a client that read the URL in between was refused ("All connection attempts failed"
    # in a loaded CI). Connections that arrive before uvicorn accepts wait in the backlog.
    sock.listen(ACCEPT_BACKLOG)
    bound = sock.getsockname()[1]
    asgi = http_app(
        app, host=host, port=bound, verifier=verifier, issuer=issuer, allowed_origins=allowed_origins,
        limits=limits,
    )  # fmt: skip
    config = uvicorn.Config(
        asgi, log_level="warning", lifespan="on", timeout_graceful_shutdown=2,
        http=bounded_protocol(limits), timeout_keep_alive=5, backlog=ACCEPT_BACKLOG,
    )  # fmt: skip
    server = uvicorn.Server(config)
    shown = f"[{host}]" if ":" in host else host
    print(f"stockade serve: listening on http://{shown}:{bound}/mcp", file=sys.stderr, flush=True)
    async with anyio.create_task_group() as group:
        group.start_soon(_reload_on_signal, app)
        group.start_soon(_reload_on_change, app, lock)
        await server.serve(sockets=[sock])
        group.cancel_scope.cancel()


def _rate_limit_logs() -> None:
    """One line per interval per message on every handler of the root logger (a handler's
    filter sees the records of every logger that propagates to it: asyncio's accept
    failures, uvicorn's protocol warnings, the SDK's and Stockade's own)."""
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.StreamHandler(sys.stderr))
    limiter = RateLimitedLog()
    for handler in root.handlers:
        if not any(isinstance(f, RateLimitedLog) for f in handler.filters):
            handler.addFilter(limiter)


async def _reload_on_signal(app: StockadeMCP) -> None:
    if not hasattr(signal, "SIGHUP"):  # pragma: no cover - non-POSIX platforms
        return
    with contextlib.suppress(ValueError):  # not the main thread: no signal handling
        with anyio.open_signal_receiver(signal.SIGHUP) as signals:
            async for _ in signals:
                _log.warning("SIGHUP: reloading the lock")
                await app.reload()


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_mtime_ns, info.st_size, info.st_ino)


async def _reload_on_change(app: StockadeMCP, lock: Path) -> None:
    last = _stamp(lock)
    while True:
        await anyio.sleep(LOCK_POLL_S)
        current = _stamp(lock)
        if current is not None and current != last:
            last = current
            _log.warning("the lock file changed: reloading")
            await app.reload()
