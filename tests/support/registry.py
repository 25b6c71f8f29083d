"""A real OCI registry (CNCF distribution, Debian package ``docker-registry``) for tests,
and a loopback fault-injecting proxy to put in front of it.

    with RegistryServer.start(tmp_path) as registry:          # plain HTTP on 127.0.0.1
        registry.address                                        # "127.0.0.1:PORT"
        registry.blob_file("sha256:...")                        # its filesystem storage
    with RegistryServer.start(tmp_path, tls=ca) as registry:   # HTTPS, certificate from the test CA
    with FaultProxy(registry.address) as proxy:                 # "127.0.0.1:PORT2" forwards
        proxy.fail("/blobs/", status=500); proxy.hang("/blobs/")

The registry's configuration is generated (JSON is YAML): loopback address, a temporary
filesystem storage root, optional TLS and htpasswd auth. :meth:`RegistryServer.start`
waits until ``/v2/`` answers and :meth:`stop` terminates the process, so nothing outlives
the fixture. When the binary is missing, :func:`registry_binary` returns ``None`` and
the fixtures fail (``STOCKADE_REQUIRE_REGISTRY=1``, as in CI) or skip with the reason.
"""

from __future__ import annotations

import json
import secrets
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx2

from tests.support.tls import CertAuthority

__all__ = ["FaultProxy", "RegistryServer", "registry_binary"]

_STARTUP_S = 30.0


def registry_binary() -> str | None:
    """The ``docker-registry`` executable, or ``None`` when it is not installed."""
    return shutil.which("docker-registry") or (
        "/usr/bin/docker-registry" if Path("/usr/bin/docker-registry").exists() else None
    )


def _die_with_parent() -> list[str]:
    """A command prefix that gives the registry SIGTERM when the test process dies, however
    it dies (util-linux ``setpriv --pdeathsig``; nothing where it is missing)."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM"] if setpriv else []


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RegistryServer:
    """One running ``docker-registry serve`` process."""

    process: subprocess.Popen[bytes]
    address: str
    root: Path
    scheme: str
    ca_file: Path | None = None
    log: Path | None = None

    @classmethod
    def start(
        cls,
        directory: Path,
        *,
        tls: CertAuthority | None = None,
        htpasswd: str | None = None,
        auth: dict[str, Any] | None = None,
    ) -> RegistryServer:
        """Start a registry; ``htpasswd`` (file text) or ``auth`` (the config's ``auth``
        section, e.g. ``{"token": {...}}``) turn authentication on."""
        binary = registry_binary()
        if binary is None:
            raise RuntimeError("docker-registry is not installed (apt-get install -y docker-registry)")
        directory.mkdir(parents=True, exist_ok=True)
        root = directory / "storage"
        root.mkdir(exist_ok=True)
        last_error = ""
        for _ in range(3):  # a free port can be taken between probe and bind: try again
            address = f"127.0.0.1:{_free_port()}"
            config: dict[str, Any] = {
                "version": "0.1",
                "log": {"level": "warn", "accesslog": {"disabled": True}},
                "storage": {"filesystem": {"rootdirectory": str(root)}, "delete": {"enabled": True}},
                "http": {"addr": address, "secret": secrets.token_hex(16)},
            }
            if tls is not None:
                cert, key = tls.issue(["127.0.0.1"])
                config["http"]["tls"] = {"certificate": str(cert), "key": str(key)}
            if htpasswd is not None:
                (directory / "htpasswd").write_text(htpasswd)
                config["auth"] = {"htpasswd": {"realm": "stockade-test", "path": str(directory / "htpasswd")}}
            if auth is not None:
                config["auth"] = auth
            (directory / "config.json").write_text(json.dumps(config))
            log = directory / "registry.log"
            with open(log, "wb") as sink:
                process = subprocess.Popen(
                    [*_die_with_parent(), binary, "serve", str(directory / "config.json")],
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            server = cls(
                process, address, root, "https" if tls else "http", tls.ca_file if tls else None, log
            )
            try:
                ready = server._wait_ready()
            except BaseException:
                server.stop()
                raise
            if ready:
                return server
            server.stop()
            last_error = log.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"docker-registry did not start:\n{last_error}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + _STARTUP_S
        verify: Any = ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file else False
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                status = httpx2.get(
                    f"{self.scheme}://{self.address}/v2/", verify=verify, timeout=1
                ).status_code
                if status in (200, 401):
                    return True
            except httpx2.HTTPError:
                pass
            time.sleep(0.05)  # readiness poll of a starting process, not synchronization of a test
        return False

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def blob_file(self, digest: str) -> Path:
        """Where the filesystem driver keeps a blob's bytes."""
        hexdigest = digest.removeprefix("sha256:")
        return self.root / "docker/registry/v2/blobs/sha256" / hexdigest[:2] / hexdigest / "data"

    def __enter__(self) -> RegistryServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class _Rule:
    match: str
    method: str | None
    action: str  # "status", "hang", "body"
    status: int = 500
    body: bytes = b""
    times: int | None = None


@dataclass
class FaultProxy:
    """A loopback HTTP proxy to a registry that can answer 500, hang, or serve other bytes
    for requests whose path contains a given string; ``after`` runs a callback after a
    matching request was answered by the registry and before that answer is relayed (so
    it happens strictly between that request and the client's next one). ``hits`` lists
    every request as ``"METHOD PATH"``."""

    upstream: str
    upstream_scheme: str = "http"
    upstream_ca: Path | None = None
    rules: list[_Rule] = field(default_factory=list)
    after_hooks: list[tuple[str, Callable[[], None]]] = field(default_factory=list)
    hits: list[str] = field(default_factory=list)
    released: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        proxy = self
        self._client = httpx2.Client(
            base_url=f"{self.upstream_scheme}://{self.upstream}",
            verify=ssl.create_default_context(cafile=str(self.upstream_ca)) if self.upstream_ca else False,
            timeout=30,
        )

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _any(self) -> None:
                proxy._handle(self)

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.address = f"127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def fail(
        self, match: str, *, status: int = 500, method: str | None = None, times: int | None = None
    ) -> None:
        self.rules.append(_Rule(match, method, "status", status=status, times=times))

    def hang(self, match: str, *, method: str | None = None) -> None:
        self.rules.append(_Rule(match, method, "hang"))

    def serve(self, match: str, body: bytes, *, method: str | None = None) -> None:
        self.rules.append(_Rule(match, method, "body", status=200, body=body))

    def after(self, match: str, hook: Callable[[], None]) -> None:
        self.after_hooks.append((match, hook))

    def _rule_for(self, method: str, path: str) -> _Rule | None:
        for rule in self.rules:
            if rule.match in path and (rule.method is None or rule.method == method):
                if rule.times is not None:
                    if rule.times == 0:
                        continue
                    rule.times -= 1
                return rule
        return None

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        method, path = handler.command, handler.path
        self.hits.append(f"{method} {path}")
        length = int(handler.headers.get("content-length") or 0)
        body = handler.rfile.read(length) if length else b""
        rule = self._rule_for(method, path)
        if rule is not None and rule.action == "hang":
            self.released.wait(60)  # until the client gives up (its timeout) or the proxy stops
            handler.close_connection = True
            return
        if rule is not None and rule.action == "status":
            payload = b'{"errors":[{"code":"UNKNOWN","message":"injected"}]}'
            self._reply(handler, rule.status, {"content-type": "application/json"}, payload)
            return
        if rule is not None and rule.action == "body":
            headers = {"content-type": "application/vnd.oci.image.manifest.v1+json"}
            self._reply(handler, 200, headers, rule.body if method != "HEAD" else b"")
            return
        headers = {
            k: v
            for k, v in handler.headers.items()
            if k.lower() not in ("host", "connection", "content-length", "transfer-encoding")
        }
        headers["host"] = self.address  # absolute Locations then point back at the proxy
        upstream = self._client.request(method, path, headers=headers, content=body)
        out = {
            k: v
            for k, v in upstream.headers.items()
            if k.lower() not in ("connection", "content-length", "transfer-encoding", "content-encoding")
        }
        for match, hook in self.after_hooks:  # after the registry answered, before the client sees it
            if match in path:
                hook()
        self._reply(handler, upstream.status_code, out, upstream.content, head=method == "HEAD")

    @staticmethod
    def _reply(
        handler: BaseHTTPRequestHandler,
        status: int,
        headers: dict[str, str],
        body: bytes,
        *,
        head: bool = False,
    ) -> None:
        handler.send_response(status)
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if not head:
            handler.wfile.write(body)

    def close(self) -> None:
        self.released.set()
        self._server.shutdown()
        self._server.server_close()
        self._client.close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
