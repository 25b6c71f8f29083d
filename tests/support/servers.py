"""Real loopback HTTP and HTTPS servers for tests, each in its own threads.

A :class:`LoopbackServer` listens on a loopback address (``127.0.0.1`` by default, any
``127.x.y.z`` or ``::1`` works), speaks HTTP/1.1 with keep-alive, and records every
request it receives in :attr:`LoopbackServer.requests` (method, target, headers in
order and case as received, body). Routes map a path (without query) to a handler
``handler(exchange)``; unknown paths get 404. Ready-made handlers:

- :func:`echo` — 200 with a JSON document of what was received;
- :func:`respond` — a fixed status, headers and body (with Content-Length);
- :func:`redirect` — a 3xx with ``Location``;
- :func:`chunked` — a chunked body without Content-Length, optionally holding after N
  bytes until the client hangs up (``notes["<name>.finished"]`` says whether the whole
  body was written, ``notes["<name>.client_gone"]`` whether the client hung up first, ``<name>.done`` once
  the handler returned: use :meth:`LoopbackServer.wait_note`);
- :func:`trickle` — a body (or the head itself) written a few bytes at a time, slowly.

Handlers may write anything through :class:`Exchange` (``respond``, ``start``,
``write``, ``write_chunk``, ``finish``, or raw bytes with ``raw``). TLS: pass an
``ssl.SSLContext`` (see :mod:`tests.support.tls`); a failed handshake is counted in
:attr:`LoopbackServer.tls_failures`, not printed.

Example::

    with LoopbackServer(routes={"/v1/echo": echo()}) as server:
        httpx2.get(server.url("/v1/echo"))
        server.requests[0].headers
"""

from __future__ import annotations

import json
import select
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from types import TracebackType
from typing import Any

__all__ = [
    "Exchange",
    "Handler",
    "LoopbackServer",
    "Received",
    "ServerSet",
    "chunked",
    "echo",
    "redirect",
    "respond",
    "trickle",
]


@dataclass(frozen=True)
class Received:
    """One request as the server received it."""

    method: str
    target: str  # path and query, exactly as on the request line
    headers: tuple[tuple[str, str], ...]
    body: bytes
    server_address: str  # the address the server listens on (which pinned IP was used)

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    @property
    def query(self) -> str:
        return self.target.split("?", 1)[1] if "?" in self.target else ""

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), or None."""
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None

    def header_names(self) -> set[str]:
        return {key.lower() for key, _ in self.headers}


class Exchange:
    """A handler's view of one request/response exchange."""

    def __init__(self, handler: _RequestHandler, request: Received) -> None:
        self._handler = handler
        self.request = request
        self.server: LoopbackServer = handler.server.owner  # type: ignore[attr-defined]
        self._chunked = False

    @property
    def notes(self) -> dict[str, Any]:
        return self.server.notes

    def raw(self, data: bytes) -> None:
        """Write bytes to the socket as they are (raises OSError once the client is gone)."""
        self._handler.wfile.write(data)
        self._handler.wfile.flush()

    def start(
        self,
        status: int,
        headers: Iterable[tuple[str, str]] = (),
        *,
        chunked: bool = False,
        body: bytes = b"",
    ) -> None:
        """Send the status line and headers (add ``Transfer-Encoding: chunked`` if asked),
        followed by ``body`` in the same write."""
        lines = [f"HTTP/1.1 {status} {_reason(status)}\r\n"]
        lines += [f"{name}: {value}\r\n" for name, value in headers]
        if chunked:
            lines.append("Transfer-Encoding: chunked\r\n")
        lines.append("\r\n")
        self._chunked = chunked
        self.raw("".join(lines).encode("latin-1") + body)

    def write(self, data: bytes) -> None:
        """Write body bytes (chunk-framed when the response is chunked)."""
        if self._chunked:
            self.write_chunk(data)
        else:
            self.raw(data)

    def write_chunk(self, data: bytes) -> None:
        if data:
            self.raw(f"{len(data):x}\r\n".encode("ascii") + data + b"\r\n")

    def finish(self) -> None:
        """End a chunked body."""
        if self._chunked:
            self.raw(b"0\r\n\r\n")

    def respond(
        self, status: int, body: bytes = b"", headers: Iterable[tuple[str, str]] = ()
    ) -> None:
        """A complete response with Content-Length."""
        all_headers = [*headers, ("Content-Length", str(len(body)))]
        self.start(status, all_headers, body=b"" if self.request.method == "HEAD" else body)

    def close_connection(self) -> None:
        self._handler.close_connection = True

    def client_gone(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the client to close the connection; True if it did."""
        sock = self._handler.connection
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            readable, _, _ = select.select([sock], [], [], 0.05)
            if not readable:
                continue
            try:
                data = sock.recv(65536, socket.MSG_PEEK) if not isinstance(sock, ssl.SSLSocket) else sock.recv(1)
            except (OSError, ssl.SSLError):
                return True
            if not data:
                return True
            if not isinstance(sock, ssl.SSLSocket):
                sock.recv(len(data))  # discard anything else the client sent
        return False


Handler = Callable[[Exchange], None]


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Status"


def echo(status: int = 200, extra_headers: Iterable[tuple[str, str]] = ()) -> Handler:
    """Reply with JSON ``{"method", "target", "headers": [[name, value]...], "body"}``."""
    extra = tuple(extra_headers)

    def handler(ex: Exchange) -> None:
        document = {
            "method": ex.request.method,
            "target": ex.request.target,
            "headers": [list(pair) for pair in ex.request.headers],
            "body": ex.request.body.decode("utf-8", "replace"),
        }
        body = json.dumps(document).encode("utf-8")
        ex.respond(status, body, [("Content-Type", "application/json"), *extra])

    return handler


def respond(status: int = 200, body: bytes = b"", headers: Iterable[tuple[str, str]] = ()) -> Handler:
    """Reply with a fixed response."""
    fixed = tuple(headers)

    def handler(ex: Exchange) -> None:
        ex.respond(status, body, fixed)

    return handler


def redirect(location: str | Callable[[Exchange], str], status: int = 302) -> Handler:
    """Reply ``status`` with ``Location: location`` (a string, or computed per request)."""

    def handler(ex: Exchange) -> None:
        target = location(ex) if callable(location) else location
        ex.respond(status, b"", [("Location", target)])

    return handler


def chunked(
    total: int,
    chunk: int = 64 * 1024,
    *,
    name: str = "chunked",
    hold_after: int | None = None,
    hold_s: float = 5.0,
) -> Handler:
    """A chunked body of ``total`` bytes of ``b"x"`` with no Content-Length.

    With ``hold_after``, the server stops after writing that many bytes and waits up to
    ``hold_s`` for the client to hang up before trying to write the rest: a client that
    enforces its limit while streaming hangs up first (``notes[name + ".client_gone"]``).
    """

    def handler(ex: Exchange) -> None:
        ex.notes[f"{name}.finished"] = False
        ex.notes[f"{name}.client_gone"] = False
        written = 0
        ex.start(200, [("Content-Type", "application/octet-stream")], chunked=True)
        piece = b"x" * chunk
        held = False
        try:
            while written < total:
                if hold_after is not None and not held and written >= hold_after:
                    held = True
                    ex.notes[f"{name}.client_gone"] = ex.client_gone(hold_s)
                size = min(chunk, total - written)
                ex.write_chunk(piece[:size])
                written += size
                ex.notes[f"{name}.written"] = written
            ex.finish()
            ex.notes[f"{name}.finished"] = True
        except OSError:
            ex.close_connection()
        finally:
            ex.notes[f"{name}.done"] = True

    return handler


def trickle(
    body: bytes, *, interval: float = 0.05, step: int = 1, head: bool = False, status: int = 200
) -> Handler:
    """Write ``body`` ``step`` bytes every ``interval`` s (Content-Length declared).

    With ``head=True`` the status line and headers themselves are trickled.
    """

    def handler(ex: Exchange) -> None:
        head_bytes = (
            f"HTTP/1.1 {status} {_reason(status)}\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode("ascii")
        try:
            if head:
                data = head_bytes + body
            else:
                ex.raw(head_bytes)
                data = body
            for index in range(0, len(data), step):
                ex.raw(data[index : index + step])
                time.sleep(interval)
        except OSError:
            ex.close_connection()

    return handler


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 15  # s: an idle keep-alive connection is dropped after this

    def setup(self) -> None:
        owner: LoopbackServer = self.server.owner  # type: ignore[attr-defined]
        owner._track(self.request)
        # No Nagle: a head and a body written separately must not wait for delayed ACKs.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if owner.tls is not None:
            self.request.settimeout(5)
            try:
                self.request = owner.tls.wrap_socket(self.request, server_side=True)
            except (OSError, ssl.SSLError):
                owner._tls_failed()
                raise
            owner._track(self.request)
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length", "0") or "0")
        return self.rfile.read(length) if length else b""

    def _dispatch(self) -> None:
        owner: LoopbackServer = self.server.owner  # type: ignore[attr-defined]
        received = Received(
            method=self.command,
            target=self.path,
            headers=tuple((k, v) for k, v in self.headers.items()),
            body=self._read_body(),
            server_address=owner.host,
        )
        owner._received(received)
        handler = owner.routes.get(received.path)
        exchange = Exchange(self, received)
        if handler is None:
            exchange.respond(404, b"no such route")
            return
        handler(exchange)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _dispatch


class _Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.owner._errors += 1  # type: ignore[attr-defined]


class _Server6(_Server):
    address_family = socket.AF_INET6


class LoopbackServer:
    """A threaded HTTP/1.1 server on a loopback address (HTTPS when ``tls`` is given).

    Args:
        host: the loopback address to listen on.
        tls: a server-side ``ssl.SSLContext``, or None for plain HTTP.
        routes: path -> handler.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        tls: ssl.SSLContext | None = None,
        routes: Mapping[str, Handler] | None = None,
        port: int = 0,
    ) -> None:
        self.host = host
        self.tls = tls
        self.routes: dict[str, Handler] = dict(routes or {})
        self.notes: dict[str, Any] = {}
        self.tls_failures = 0
        self._errors = 0
        self._lock = threading.Lock()
        self._requests: list[Received] = []
        self._sockets: set[socket.socket] = set()
        cls = _Server6 if ":" in host else _Server
        self._server = cls((host, port), _RequestHandler, bind_and_activate=True)
        self._server.owner = self  # type: ignore[attr-defined]
        self.port: int = self._server.server_address[1]
        self._thread: threading.Thread | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    def url(self, path: str = "/", *, host: str | None = None) -> str:
        """``scheme://host:port/path``; ``host`` defaults to the listening address."""
        name = host or (f"[{self.host}]" if ":" in self.host else self.host)
        return f"{self.scheme}://{name}:{self.port}{path}"

    def wait_note(self, key: str, timeout: float = 10.0) -> Any:
        """Wait until a handler has set ``notes[key]``; return it (None on timeout)."""
        end = time.monotonic() + timeout
        while key not in self.notes and time.monotonic() < end:
            time.sleep(0.01)
        return self.notes.get(key)

    def route(self, path: str, handler: Handler) -> None:
        self.routes[path] = handler

    @property
    def requests(self) -> list[Received]:
        with self._lock:
            return list(self._requests)

    def _received(self, received: Received) -> None:
        with self._lock:
            self._requests.append(received)

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.add(sock)

    def _tls_failed(self) -> None:
        with self._lock:
            self.tls_failures += 1

    def start(self) -> LoopbackServer:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            sockets, self._sockets = list(self._sockets), set()
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@dataclass
class Counter:
    """A thread-safe counter for handlers that need one."""

    value: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def bump(self) -> int:
        with self.lock:
            self.value += 1
            return self.value


class ServerSet:
    """Starts servers on demand and stops them all at the end (for a pytest fixture)."""

    def __init__(self) -> None:
        self._servers: list[LoopbackServer] = []

    def new(self, **kwargs: Any) -> LoopbackServer:
        server = LoopbackServer(**kwargs).start()
        self._servers.append(server)
        return server

    def stop_all(self) -> None:
        for server in self._servers:
            server.stop()
        self._servers.clear()
