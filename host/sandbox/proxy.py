"""The host-run forward proxy of a command with ``network = "egress"``.

The sandbox keeps its own, empty network namespace: nothing outside it is routable. The
only way out is this proxy, listening on a Unix socket in a private host directory that
bwrap binds into the sandbox; the launcher (:mod:`host.sandbox.launch`) relays the
sandbox's ``127.0.0.1:3128`` to it, and ``HTTP_PROXY``/``HTTPS_PROXY`` (both cases) point
there, which curl, git, pip, npm and Python's urllib honour. Each connection is one of:

* ``CONNECT host:port`` (https): admitted only when an ``https`` allow entry of the command
  matches the host and port with ``path_prefix = "/"`` (a tunnel hides path and method,
  so a narrower entry cannot be enforced and does not admit it). Then the host is
  resolved once and vetted (:meth:`EgressPolicy.vet`: every address public, DNS answer
  pinned) and the proxy connects to a vetted address and copies bytes. There is no TLS
  interception: the proxy never sees the request inside, so it injects no credential.
* ``METHOD http://host/path`` (plain http): checked with :meth:`EgressPolicy.check`
  (scheme, host, port, path and method), vetted the same way, sent as one request with
  ``Connection: close`` and a ``Content-Length`` body only (a chunked request body is
  refused: what follows it could be a second, unchecked request), and the response
  copied back until the server closes. No credential is injected either: a credential
  in the request would be visible to the process, and anything it runs could read it.

Anything else (a malformed request, an origin-form request, a denied target) gets a
``403``/``400``/``502`` answer and the connection closes. The proxy refuses loopback,
private and link-local addresses (only ``unsafe_allow_loopback``, TEST ONLY, admits
loopback, as for plugin HTTP), so the host's other sockets are never reachable. Limits:
:data:`MAX_CONNECTIONS` per call, ``max_egress_bytes`` in both directions together, and
the call's deadline (the proxy stops with the command). Every connection, admitted or
refused, is a :class:`ConnectionRecord` in the call's outcome record.
"""

from __future__ import annotations

import os
import selectors
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from host.egress.policy import EgressPolicy, EgressTarget, Resolver
from host.egress.urls import normalize_url
from host.errors import EgressDenied

__all__ = ["MAX_CONNECTIONS", "ConnectionRecord", "EgressProxy"]

MAX_CONNECTIONS: Final = 64  # connections per call
MAX_RECORDS: Final = 64  # connection records kept per call (the count is exact)
MAX_HEAD_BYTES: Final = 16384  # bytes of one request head
CONNECT_TIMEOUT_S: Final = 10.0  # s, at most, to connect to a vetted address
_CHUNK: Final = 65536  # bytes
_HOP_HEADERS: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "upgrade",
        "transfer-encoding",
    }
)


@dataclass(slots=True)
class ConnectionRecord:
    """One proxied connection: what was asked, what was decided, how many bytes moved."""

    method: str
    target: str
    outcome: str  # "allowed", "denied", "unreachable", "byte_limit", "invalid"
    reason: str = ""
    address: str = ""
    bytes_out: int = 0  # bytes, process -> server
    bytes_in: int = 0  # bytes, server -> process

    def as_json(self) -> dict[str, object]:
        """The record as JSON data (an element of the outcome record's ``egress``)."""
        data: dict[str, object] = {
            "method": self.method,
            "target": self.target,
            "outcome": self.outcome,
            "bytes_out": self.bytes_out,
            "bytes_in": self.bytes_in,
        }
        if self.reason:
            data["reason"] = self.reason
        if self.address:
            data["address"] = self.address
        return data


class _Refusal(Exception):
    def __init__(self, status: int, outcome: str, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.outcome, self.reason = status, outcome, reason


class EgressProxy:
    """A per-call forward proxy on a Unix socket (see the module docstring).

    Args:
        policy: the command entry's allowlist.
        resolver: the DNS port (``Host.open``'s ``resolver``).
        allow_loopback: ``HostConfig.unsafe_allow_loopback`` (TEST ONLY).
        max_bytes: bytes, both directions of every connection together.
        deadline: ``time.monotonic()`` value after which nothing is relayed.
    """

    def __init__(
        self,
        policy: EgressPolicy,
        resolver: Resolver,
        *,
        allow_loopback: bool,
        max_bytes: int,
        deadline: float,
    ) -> None:
        self._policy = policy
        self._resolver = resolver
        self._allow_loopback = allow_loopback
        self._max_bytes = max_bytes
        self._deadline = deadline
        self._lock = threading.Lock()
        self._used = 0
        self._count = 0
        self._records: list[ConnectionRecord] = []
        self._open: set[socket.socket] = set()
        self._workers: list[threading.Thread] = []
        self._closed = False
        self._dir = Path(tempfile.mkdtemp(prefix="stockade-egress-"))
        os.chmod(self._dir, 0o700)
        self.socket_path = self._dir / "proxy.sock"
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.socket_path))
        self._listener.listen(16)
        self._thread = threading.Thread(target=self._accept, name="stockade-egress-proxy", daemon=True)
        self._thread.start()

    @property
    def records(self) -> list[dict[str, object]]:
        """The connection records so far (at most :data:`MAX_RECORDS`)."""
        with self._lock:
            return [r.as_json() for r in self._records]

    @property
    def connections(self) -> int:
        """How many connections the process opened (admitted or not)."""
        return self._count

    def close(self) -> None:
        """Stop accepting, cut every open connection, wait (1 s at most) for their records,
        remove the socket's directory."""
        with self._lock:
            self._closed = True
            live = list(self._open)
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        for sock in live:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(1.0)
        with self._lock:
            workers = list(self._workers)
        end = time.monotonic() + 1.0
        for worker in workers:  # each ends once its sockets are shut down; then its record is in
            worker.join(max(end - time.monotonic(), 0))
        shutil.rmtree(self._dir, ignore_errors=True)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self._closed:
                    client.close()
                    return
                self._count += 1
                over = self._count > MAX_CONNECTIONS
            if over:
                client.settimeout(0.5)
                try:  # read the head first: closing on unread bytes resets the client's read
                    _read_head(client)
                except (OSError, _Refusal):
                    pass
                self._answer(
                    client, 429, "connection_limit", f"at most {MAX_CONNECTIONS} connections per call"
                )
                client.close()
                continue
            worker = threading.Thread(target=self._serve, args=(client,), daemon=True)
            with self._lock:
                self._workers.append(worker)
            worker.start()

    def _remaining(self) -> float:
        return self._deadline - time.monotonic()

    def _track(self, sock: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._open.add(sock)
            else:
                self._open.discard(sock)

    def _record(self, record: ConnectionRecord) -> None:
        with self._lock:
            if len(self._records) < MAX_RECORDS:
                self._records.append(record)

    def _serve(self, client: socket.socket) -> None:
        self._track(client, add=True)
        record = ConnectionRecord(method="", target="", outcome="invalid")
        upstream: socket.socket | None = None
        try:
            client.settimeout(max(min(self._remaining(), 30.0), 0.001))
            head, rest = _read_head(client)
            method, target, headers = _parse_head(head)
            record.method, record.target = method[:16], target[:300]
            if method == "CONNECT":
                upstream, record.address = self._tunnel(target)
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                first = rest
            else:
                upstream, record.address, first = self._forward(method, target, headers, rest, client)
            self._track(upstream, add=True)
            record.outcome = "allowed"
            self._splice(client, upstream, first, record, half=method != "CONNECT")
        except _Refusal as refusal:
            record.outcome, record.reason = refusal.outcome, refusal.reason
            self._answer(client, refusal.status, refusal.reason, str(refusal))
        except OSError:
            if record.outcome == "invalid":
                record.reason = "client_error"
        finally:
            self._record(record)
            for sock in (client, upstream):
                if sock is not None:
                    self._track(sock, add=False)
                    sock.close()

    def _vet(self, target: EgressTarget) -> tuple[socket.socket, str]:
        try:
            addresses = self._policy.vet(
                target, self._resolver, allow_loopback=self._allow_loopback, deadline=self._deadline
            )
        except EgressDenied as exc:
            status = 502 if exc.code == "EGRESS_UNREACHABLE" else 403
            outcome = "unreachable" if status == 502 else "denied"
            raise _Refusal(status, outcome, str(exc.details.get("reason", "")), exc.message) from None
        for address in addresses:  # only vetted addresses: the DNS answer is pinned
            timeout = min(CONNECT_TIMEOUT_S, self._remaining())
            if timeout <= 0:
                break
            try:
                return socket.create_connection((address, target.port), timeout=timeout), address
            except OSError:
                continue
        raise _Refusal(502, "unreachable", "connect_failed", f"no vetted address of {target.host} answered")

    def _tunnel(self, authority: str) -> tuple[socket.socket, str]:
        try:
            normalized = normalize_url(f"https://{authority}/")
        except EgressDenied as exc:
            raise _Refusal(403, "denied", str(exc.details.get("reason", "")), exc.message) from None
        if (
            normalized.authority() != authority.lower()
            and f"{normalized.authority()}:443" != authority.lower()
        ):
            raise _Refusal(400, "invalid", "invalid_url", "CONNECT takes host:port only")
        rules = [r for r in self._policy.rules if r.pattern.matches(normalized)]
        if not rules:
            raise _Refusal(
                403,
                "denied",
                "host_not_allowed",
                f"https to {normalized.host}:{normalized.port} is not in the command's allow list",
            )
        if not any(r.path_prefix == "/" for r in rules):
            raise _Refusal(
                403,
                "denied",
                "path_not_allowed",
                "a tunnel hides the path: only an entry with path_prefix '/' admits it",
            )
        return self._vet(EgressTarget.from_normalized(normalized))

    def _forward(
        self, method: str, url: str, headers: list[tuple[str, str]], rest: bytes, client: socket.socket
    ) -> tuple[socket.socket, str, bytes]:
        if not url.lower().startswith("http://"):
            raise _Refusal(400, "invalid", "invalid_url", "a proxy request names an absolute http:// URL")
        try:
            target = self._policy.check(method, url)
        except EgressDenied as exc:
            raise _Refusal(403, "denied", str(exc.details.get("reason", "")), exc.message) from None
        names = {name.lower() for name, _ in headers}
        if "transfer-encoding" in names:
            raise _Refusal(411, "invalid", "chunked_body", "send a request body with Content-Length")
        length = 0
        for name, value in headers:
            if name.lower() == "content-length":
                if not value.strip().isdigit():
                    raise _Refusal(400, "invalid", "content_length", "invalid Content-Length")
                length = int(value.strip())
        upstream, address = self._vet(target)
        normalized = target.normalized()
        query = f"?{target.query}" if target.query else ""
        lines = [f"{method} {target.path}{query} HTTP/1.1", f"Host: {normalized.authority()}"]
        lines += [f"{n}: {v}" for n, v in headers if n.lower() not in _HOP_HEADERS and n.lower() != "host"]
        lines.append("Connection: close")
        body = rest[:length]
        while len(body) < length:
            chunk = client.recv(min(_CHUNK, length - len(body)))
            if not chunk:
                break
            body += chunk
        return upstream, address, ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body

    def _splice(
        self,
        client: socket.socket,
        upstream: socket.socket,
        first: bytes,
        record: ConnectionRecord,
        *,
        half: bool,
    ) -> None:
        """Copy bytes both ways (``half``: only server -> process after ``first``)."""
        if first:
            self._charge(len(first), record)
            upstream.sendall(first)
            record.bytes_out += len(first)
        peers = {client: upstream, upstream: client}
        selector = selectors.DefaultSelector()
        selector.register(upstream, selectors.EVENT_READ)
        if not half:
            selector.register(client, selectors.EVENT_READ)
        try:
            while selector.get_map():
                remaining = self._remaining()
                if remaining <= 0:
                    return
                for key, _ in selector.select(min(remaining, 1.0)):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    data = sock.recv(_CHUNK)
                    if not data:
                        selector.unregister(sock)
                        if sock is client or half:
                            _shutdown_write(peers[sock])
                        if sock is upstream:
                            return
                        continue
                    self._charge(len(data), record)
                    peers[sock].sendall(data)
                    if sock is client:
                        record.bytes_out += len(data)
                    else:
                        record.bytes_in += len(data)
        finally:
            selector.close()

    def _charge(self, size: int, record: ConnectionRecord) -> None:
        with self._lock:
            self._used += size
            over = self._used > self._max_bytes
        if over:
            record.outcome, record.reason = (
                "byte_limit",
                f"more than {self._max_bytes} bytes through the proxy",
            )
            raise OSError("egress byte limit")

    @staticmethod
    def _answer(client: socket.socket, status: int, reason: str, message: str) -> None:
        body = f"stockade egress proxy: {message}\n".encode("utf-8", "replace")
        head = (
            f"HTTP/1.1 {status} Refused\r\nX-Stockade-Deny: {reason}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        try:
            client.sendall(head.encode("latin-1", "replace") + body)
        except OSError:
            pass


def _shutdown_write(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _read_head(client: socket.socket) -> tuple[bytes, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD_BYTES:
            raise _Refusal(
                431, "invalid", "head_too_large", f"a request head is at most {MAX_HEAD_BYTES} bytes"
            )
        chunk = client.recv(4096)
        if not chunk:
            raise _Refusal(400, "invalid", "incomplete", "the request head ended early")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    if len(head) > MAX_HEAD_BYTES:
        raise _Refusal(431, "invalid", "head_too_large", f"a request head is at most {MAX_HEAD_BYTES} bytes")
    return head, rest


def _parse_head(head: bytes) -> tuple[str, str, list[tuple[str, str]]]:
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise _Refusal(400, "invalid", "non_ascii", "a request head is ASCII") from None
    line, *header_lines = text.split("\r\n")
    parts = line.split(" ")
    if (
        len(parts) != 3
        or not parts[2].startswith("HTTP/1.")
        or not parts[0].isalpha()
        or not parts[0].isupper()
    ):
        raise _Refusal(400, "invalid", "request_line", "malformed request line")
    headers: list[tuple[str, str]] = []
    for header in header_lines:
        name, colon, value = header.partition(":")
        if not colon or not name or name != name.strip() or any(c in name for c in " \t"):
            raise _Refusal(400, "invalid", "header", "malformed header line")
        if any(ord(c) < 0x20 and c != "\t" for c in value):
            raise _Refusal(400, "invalid", "header", "control character in a header")
        headers.append((name, value.strip()))
    return parts[0], parts[1], headers
