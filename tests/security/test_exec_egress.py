"""``exec.run`` with ``network = "egress"``: only the entry's allow list, through the host's proxy.

Each test runs a real command (Debian's ``curl`` or ``python3``) in real bubblewrap through
the real Host against a real loopback server (HTTPS with a test CA, or plain HTTP). The
name ``api.test.example`` reaches it only through an explicit test resolver that maps it
to ``127.0.0.1`` plus ``unsafe_allow_loopback`` (TEST ONLY), as the plugin egress tests do;
without that setting the same answer is a private address and is refused. What is checked:
the proxy admits exactly what the allow list says (tunnel and plain http), refuses other
hosts, private answers, narrower tunnel entries and bytes beyond the cap, audits every
connection, and nothing reaches the network around it.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from host.config import CommandEntry
from host.errors import ConfigInvalid
from host.formats.hostfile import load_host_file
from tests.support.commands import ExecHost, make_exec_host
from tests.support.egress_session import FakeResolver
from tests.support.servers import LoopbackServer, respond
from tests.support.tls import CertAuthority

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")

NAME = "api.test.example"
CURL = Path("/usr/bin/curl")
BODY = b"hello from the allowed host\n"


def _allow(port: int, *, scheme: str = "https", prefix: str = "/", methods: tuple[str, ...] = ("GET",)) -> dict[str, Any]:
    return {"scheme": scheme, "host": NAME, "port": port, "path_prefix": prefix, "methods": list(methods)}


def _entry(name: str, path: Path, allow: list[dict[str, Any]], **extra: Any) -> CommandEntry:
    return CommandEntry(name=name, path=path, network="egress", allow=tuple(allow), max_timeout_ms=10_000, **extra)


def _outcome(ex: ExecHost) -> dict[str, Any]:
    records = [json.loads(line) for line in ex.audit_path.read_text().splitlines()]
    outcome: dict[str, Any] = [r for r in records if r["kind"] == "call.outcome"][-1]["outcome"]
    return outcome


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LoopbackServer, CertAuthority]]:
    ca = CertAuthority.create(tmp_path_factory.mktemp("ca"))
    routes = {"/v1/hello": respond(200, BODY), "/big": respond(200, b"x" * 20_000)}
    with LoopbackServer(tls=ca.server_context([NAME]), routes=routes) as server:
        yield server, ca


@pytest.fixture(scope="module")
def http_server() -> Iterator[LoopbackServer]:
    with LoopbackServer(routes={"/v1/hello": respond(200, BODY), "/admin": respond(200, b"admin")}) as server:
        yield server


def _curl_host(tmp_path: Path, tls: tuple[LoopbackServer, CertAuthority], allow: list[dict[str, Any]],
               **config: Any) -> ExecHost:  # fmt: skip
    _, ca = tls
    extra = {k: config.pop(k) for k in ("max_egress_bytes",) if k in config}
    ex = make_exec_host(tmp_path, [_entry("curl", CURL, allow, **extra)],
                        resolver=FakeResolver({NAME: ["127.0.0.1"]}), **config)  # fmt: skip
    shutil.copy(ca.ca_file, ex.ws / "ca.pem")
    return ex


def _curl(ex: ExecHost, url: str) -> dict[str, Any]:
    result = ex.run("curl", "-sS", "--max-time", "8", "--cacert", "/workspace/ca.pem", url)
    assert result.ok, result.error
    assert isinstance(result.output, dict)
    return result.output


def test_curl_https_tunnel_reaches_allowed_host_and_is_audited(tmp_path: Path, tls_server: Any) -> None:
    server, _ = tls_server
    ex = _curl_host(tmp_path, tls_server, [_allow(server.port)], unsafe_allow_loopback=True)
    try:
        out = _curl(ex, f"https://{NAME}:{server.port}/v1/hello")
    finally:
        ex.host.close()
    assert out["exit_code"] == 0, out["stderr"]
    assert out["stdout"] == BODY.decode()
    (record,) = _outcome(ex)["egress"]
    assert record["method"] == "CONNECT" and record["target"] == f"{NAME}:{server.port}"
    assert record["outcome"] == "allowed" and record["address"] == "127.0.0.1"
    assert record["bytes_in"] > len(BODY) and record["bytes_out"] > 0  # TLS, never decrypted


def test_denied_host_refused_by_proxy(tmp_path: Path, tls_server: Any) -> None:
    server, _ = tls_server
    resolver = FakeResolver({NAME: ["127.0.0.1"], "evil.test.example": ["127.0.0.1"]})
    ex = make_exec_host(tmp_path, [_entry("curl", CURL, [_allow(server.port)])], resolver=resolver,
                        unsafe_allow_loopback=True)  # fmt: skip
    try:
        result = ex.run("curl", "-sS", "--max-time", "8", f"https://evil.test.example:{server.port}/v1/hello")
    finally:
        ex.host.close()
    assert result.ok and result.output["exit_code"] != 0
    assert "403" in result.output["stderr"]
    (record,) = _outcome(ex)["egress"]
    assert record["outcome"] == "denied" and record["reason"] == "host_not_allowed"
    assert resolver.calls == []  # refused before any DNS


def test_private_address_answer_refused_without_loopback_opt_in(tmp_path: Path, tls_server: Any) -> None:
    server, _ = tls_server
    ex = _curl_host(tmp_path, tls_server, [_allow(server.port)])  # no unsafe_allow_loopback
    try:
        out = _curl(ex, f"https://{NAME}:{server.port}/v1/hello")
    finally:
        ex.host.close()
    assert out["exit_code"] != 0 and "403" in out["stderr"]
    (record,) = _outcome(ex)["egress"]
    assert record["outcome"] == "denied" and record["reason"] == "blocked_address"


def test_private_ip_literal_refused(tmp_path: Path, tls_server: Any) -> None:
    allow = [{"scheme": "https", "host": "10.0.0.7", "port": 443, "path_prefix": "/", "methods": ["GET"]}]
    ex = _curl_host(tmp_path, tls_server, allow, unsafe_allow_loopback=True)
    try:
        out = _curl(ex, "https://10.0.0.7/")
    finally:
        ex.host.close()
    assert out["exit_code"] != 0
    (record,) = _outcome(ex)["egress"]
    assert record["reason"] == "blocked_address"


def test_tunnel_refused_when_entry_allows_only_a_path_prefix(tmp_path: Path, tls_server: Any) -> None:
    server, _ = tls_server
    ex = _curl_host(tmp_path, tls_server, [_allow(server.port, prefix="/v1")], unsafe_allow_loopback=True)
    try:
        out = _curl(ex, f"https://{NAME}:{server.port}/v1/hello")
    finally:
        ex.host.close()
    assert out["exit_code"] != 0
    (record,) = _outcome(ex)["egress"]
    assert record["reason"] == "path_not_allowed"  # a tunnel hides the path: not enforceable


def test_bytes_beyond_max_egress_bytes_cut(tmp_path: Path, tls_server: Any) -> None:
    server, _ = tls_server
    ex = _curl_host(tmp_path, tls_server, [_allow(server.port)], unsafe_allow_loopback=True, max_egress_bytes=8192)
    try:
        out = _curl(ex, f"https://{NAME}:{server.port}/big")
    finally:
        ex.host.close()
    assert out["exit_code"] != 0 and "x" * 9000 not in out["stdout"]
    (record,) = _outcome(ex)["egress"]
    assert record["outcome"] == "byte_limit"
    assert record["bytes_in"] + record["bytes_out"] <= 8192


_URLLIB = """
import sys, urllib.request, urllib.error
for url in sys.argv[1:]:
    try:
        with urllib.request.urlopen(url, timeout=8) as r:
            print(r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        print(e.code, e.headers.get("X-Stockade-Deny"))
"""


def test_plain_http_checked_by_path_and_method_no_credentials_added(tmp_path: Path, http_server: Any) -> None:
    allow = [_allow(http_server.port, scheme="http", prefix="/v1")]
    ex = make_exec_host(tmp_path, [_entry("python3", Path("/usr/bin/python3"), allow)],
                        resolver=FakeResolver({NAME: ["127.0.0.1"]}), unsafe_allow_loopback=True)  # fmt: skip
    base = f"http://{NAME}:{http_server.port}"
    try:
        result = ex.run("python3", "-c", _URLLIB, f"{base}/v1/hello", f"{base}/admin")
    finally:
        ex.host.close()
    assert result.ok and result.output["exit_code"] == 0, result.output["stderr"]
    assert result.output["stdout"].splitlines() == [f"200 {BODY.decode().strip()}", "", "403 path_not_allowed"]
    allowed, denied = _outcome(ex)["egress"]
    assert allowed["outcome"] == "allowed" and allowed["method"] == "GET"
    assert denied["reason"] == "path_not_allowed"
    sent = [r for r in http_server.requests if r.target == "/v1/hello"][-1]
    names = {name.lower() for name, _ in sent.headers}
    assert "authorization" not in names and "proxy-authorization" not in names
    assert dict((n.lower(), v) for n, v in sent.headers)["connection"] == "close"


_DIRECT = """
import socket, sys
port = int(sys.argv[1])
for family, addr in ((socket.AF_INET, ("127.0.0.1", port)), (socket.AF_INET, ("93.184.216.34", 80))):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(addr)
        print("connected", addr)
    except OSError as e:
        print(type(e).__name__, e.errno)
try:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM).bind(("127.0.0.1", 8080))
    print("bound")
except OSError as e:
    print("bind", e.errno)
try:
    socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    print("inet6 socket")
except OSError as e:
    print("inet6", e.errno)
"""


def test_direct_connect_around_proxy_fails(tmp_path: Path, http_server: Any) -> None:
    allow = [_allow(http_server.port, scheme="http")]
    ex = make_exec_host(tmp_path, [_entry("python3", Path("/usr/bin/python3"), allow)],
                        resolver=FakeResolver({NAME: ["127.0.0.1"]}), unsafe_allow_loopback=True)  # fmt: skip
    try:
        result = ex.run("python3", "-c", _DIRECT, str(http_server.port))
    finally:
        ex.host.close()
    lines = result.output["stdout"].splitlines()
    assert not any(line.startswith("connected") for line in lines), lines
    assert lines[0] == "PermissionError 13"  # Landlock: TCP connect only to the relay's port
    assert lines[1] == "PermissionError 13"
    assert lines[2] == "bind 13"  # Landlock: no TCP bind
    assert lines[3] == "inet6 1"  # seccomp: AF_INET6 refused with EPERM
    assert not [r for r in http_server.requests if r.target == "/"]
    assert "egress" in _outcome(ex) and _outcome(ex)["egress"] == []


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"network": "egress"}, "at least one allow entry"),
        ({"allow": ({"scheme": "https", "host": NAME, "path_prefix": "/", "methods": ["GET"]},)}, "needs network"),
        ({"network": "egress", "allow": ({"scheme": "https", "host": NAME, "path_prefix": "/", "methods": ["GET"],
                                          "extra": 1},)}, "allow[0]"),
        ({"env": {"HTTPS_PROXY": "http://elsewhere"}}, "set by the sandbox"),
    ],
)  # fmt: skip
def test_egress_entry_refused_at_load(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        CommandEntry(name="c", path=CURL, **fields)


BAD_ALLOW = ({"scheme": "ftp", "host": NAME, "path_prefix": "/", "methods": ["GET"]},)


def test_allow_grammar_refused_when_host_file_loads(tmp_path: Path) -> None:
    config = tmp_path / "h.host.toml"
    config.write_text('format = "stockade.host/1"\n[[workspace]]\nroot = "ws"\nproject = "p"\n'
                      '[[command]]\nname = "curl"\npath = "/usr/bin/curl"\nnetwork = "egress"\n'
                      'allow = [{ scheme = "ftp", host = "x.example", path_prefix = "/", methods = ["GET"] }]\n')  # fmt: skip
    config.chmod(0o600)
    with pytest.raises(ConfigInvalid) as caught:
        load_host_file(config)
    assert "scheme" in str(caught.value.details)


def test_allow_grammar_refused_when_host_opens(tmp_path: Path) -> None:
    with pytest.raises(ConfigInvalid, match="curl"):
        make_exec_host(tmp_path, [CommandEntry(name="curl", path=CURL, network="egress", allow=BAD_ALLOW)])
