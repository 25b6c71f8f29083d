"""An MCP source over Streamable HTTP, reached through the host's egress rules.

A real server (``http_server.py``: the SDK's Streamable HTTP app under uvicorn, real TLS
with a test CA, on loopback) runs as a subprocess; the host reaches it as
``mcp.test.example`` through a resolver port, with ``unsafe_allow_loopback`` (the test
opt-in) and the CA as ``extra_ca_file``. The declared secret travels as an
``Authorization`` header the host injects; the server refuses requests without it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from host import FilePolicyEngine, Host, HostConfig
from host.errors import EgressDenied, StockadeError
from host.formats.mcppin import McpDeclaration
from host.mcpsource.egress import SourceTransport
from host.mcpsource.pinning import PinResult, pin_source
from host.mcpsource.rpc import McpNetwork
from host.secrets.store import SecretsStore
from sdk.review.lockfile import add_mcp
from tests.mcpsource.conftest import REVIEW, TOKEN, TOOLS, offered, request
from tests.mcpsource.fifos import Signal
from tests.support.secrets import make_store
from tests.support.tls import CertAuthority

SERVER = Path(__file__).with_name("http_server.py")
NAME = "mcp.test.example"


def loopback(host: str) -> Sequence[str]:
    if host != NAME:
        raise OSError(f"unknown host {host}")
    return ["127.0.0.1"]


@dataclass
class HttpWorld:
    root: Path
    ca: CertAuthority
    proc: subprocess.Popen[bytes]
    port: int
    secrets: SecretsStore
    lock: Path
    pinned: PinResult | None = None
    hosts: list[Host] = field(default_factory=list)

    @property
    def audit_path(self) -> Path:
        return self.root / "audit.log"

    @property
    def network(self) -> McpNetwork:
        return McpNetwork(loopback, self.ca.ca_file, allow_loopback=True)

    def url(self, path: str = "/mcp") -> str:
        return f"https://{NAME}:{self.port}{path}"

    def behave(self, **behaviour: Any) -> None:
        (self.root / "behaviour.json").write_text(json.dumps(behaviour))

    def declaration(self, *, path: str = "/mcp", **limits: Any) -> McpDeclaration:
        doc = {
            "format": "stockade.mcp/1",
            "name": "test",
            "version": "1.0.0",
            "transport": {"type": "http", "url": self.url(path)},
            "secrets": [{"secret": "api_token", "header": "Authorization", "prefix": "Bearer "}],
            "secrets_scope": {"project": "ops", "subject": "mcp-test"},
            "limits": {"call_timeout_ms": 30000, "max_output_bytes": 64 * 1024, "max_concurrent_calls": 4}
            | limits,
        }
        return McpDeclaration.from_json(json.dumps(doc).encode())

    def pin(self, decl: McpDeclaration | None = None, network: McpNetwork | None = None) -> PinResult:
        self.pinned = pin_source(decl or self.declaration(), state_dir=self.root / "pin-state",
                                 secrets=self.secrets, review=REVIEW, network=network or self.network)
        add_mcp(self.lock, self.pinned.pin)
        return self.pinned

    def open(self, *, allow_loopback: bool = True) -> Host:
        policy = FilePolicyEngine.initialize(self.root / f"policy-{len(self.hosts)}.json")
        policy.set_role("user", allow=[f"tool.call:{t}" for t in TOOLS])
        policy.grant_role("p", "alice", "user")
        config = HostConfig(state_dir=self.root / "state", extra_ca_file=self.ca.ca_file,
                            unsafe_allow_loopback=allow_loopback)
        host = Host.open(self.lock, config=config, secrets=self.secrets, policy=policy,
                         audit=self.audit_path, resolver=loopback)
        self.hosts.append(host)
        return host

    def stop_server(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()  # the server exits when its stdin closes
        self.proc.wait(timeout=30)

    def records(self, kind: str) -> list[dict[str, Any]]:
        lines = self.audit_path.read_text().splitlines()
        return [r for r in (json.loads(line) for line in lines if line) if r["kind"] == kind]


@pytest.fixture
def http_world(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[HttpWorld]:
    """The server answers over SSE; ``@pytest.mark.parametrize("http_world", ["json"], indirect=True)``
    makes it answer plain JSON (``json_response``)."""
    ca = CertAuthority.create(tmp_path / "ca")
    cert, key = ca.issue([NAME])
    mode = ["--json-response"] if getattr(request, "param", "sse") == "json" else []
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "--behaviour", str(tmp_path / "behaviour.json"), "--cert", str(cert),
         "--key", str(key), "--token", TOKEN, "--host", NAME, *mode],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=SERVER.parent,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip().isdigit(), "the test server did not start"
    secrets = make_store(tmp_path)
    secrets.set("ops", "mcp-test", "api_token", TOKEN)
    world = HttpWorld(tmp_path, ca, proc, int(line), secrets, tmp_path / "stockade.lock")
    try:
        yield world
    finally:
        for host in world.hosts:
            host.close()
        world.stop_server()  # closes its stdin even when the server already exited
        proc.stdout.close()


@pytest.mark.parametrize("http_world", ["sse", "json"], indirect=True)
def test_http_source_is_pinned_and_called_through_the_pipeline(http_world: HttpWorld) -> None:
    pinned = http_world.pin()
    assert {t.tool for t in pinned.pin.tools} == set(TOOLS) and not pinned.refused
    host = http_world.open()
    assert offered(host) == set(TOOLS)
    echoed = host.call(request("test.echo", {"message": "over https"}))
    assert echoed.ok, echoed.error
    assert echoed.output == {"text": "over https"}
    added = host.call(request("test.add", {"a": 2, "b": 40}))
    assert added.ok and added.output == {"sum": 42}
    connected = http_world.records("mcp.connected")[-1]
    assert (connected["source"], connected["transport"], connected["pid"]) == ("test", "http", None)
    assert http_world.records("call.outcome")[-1]["ok"] is True


def test_declared_secret_header_reaches_the_server_and_is_scrubbed(http_world: HttpWorld) -> None:
    http_world.pin()  # the server answers 401 to a request without the header: pinning proves it arrived
    host = http_world.open()
    leaked = host.call(request("test.leak"))
    assert leaked.ok, leaked.error
    assert leaked.output == {"text": "the token is Bearer [REDACTED]"}
    assert TOKEN not in http_world.audit_path.read_text()
    for written in [http_world.lock, *http_world.lock.parent.joinpath("mcp").iterdir()]:
        assert TOKEN not in written.read_text()  # never in the lock or the pin: from the store only


def test_missing_credential_is_refused_before_connecting(http_world: HttpWorld) -> None:
    http_world.secrets.delete("ops", "mcp-test", "api_token")
    with pytest.raises(StockadeError) as refused:
        http_world.pin()
    assert refused.value.code == "CREDENTIAL_UNAVAILABLE"


def test_server_refusing_the_credential_gives_http_status(http_world: HttpWorld) -> None:
    http_world.secrets.set("ops", "mcp-test", "api_token", "wrong-token-0123456789")
    with pytest.raises(StockadeError) as refused:
        http_world.pin()
    assert refused.value.code == "MCP_UNAVAILABLE"
    assert refused.value.details["reason"] == "http_status" and refused.value.details["status"] == 401


def test_endpoint_resolving_to_a_private_address_is_refused_ssrf(http_world: HttpWorld) -> None:
    private = McpNetwork(lambda host: ["10.0.0.7"], http_world.ca.ca_file, allow_loopback=True)
    with pytest.raises(EgressDenied) as refused:
        http_world.pin(network=private)
    assert refused.value.code == "EGRESS_DENIED" and refused.value.reason == "blocked_address"


def test_endpoint_resolving_to_loopback_is_refused_without_the_opt_in(http_world: HttpWorld) -> None:
    http_world.pin()
    host = http_world.open(allow_loopback=False)  # a production host: loopback is not public
    assert offered(host) == set()  # not connected: no live list matched the pin
    refused = host.call(request("test.echo", {"message": "x"}))
    assert not refused.ok and refused.error is not None
    assert refused.error.code == "EGRESS_DENIED"
    assert refused.error.details["reason"] == "blocked_address"
    unavailable = http_world.records("mcp.unavailable")[-1]
    assert unavailable["code"] == "EGRESS_DENIED"


def test_redirect_off_the_declared_endpoint_is_refused_by_the_allowlist(http_world: HttpWorld) -> None:
    # /moved answers 307 to /elsewhere/mcp: same origin (the SDK follows it), not the endpoint.
    with pytest.raises(EgressDenied) as refused:
        http_world.pin(http_world.declaration(path="/moved"))
    assert refused.value.code == "EGRESS_DENIED" and refused.value.reason == "path_not_allowed"


def test_request_to_a_host_not_on_the_allowlist_never_leaves(http_world: HttpWorld) -> None:
    faults: list[StockadeError] = []

    async def send() -> None:
        transport = SourceTransport(http_world.url(), network=http_world.network, headers=[("Authorization", "x")],
                                    max_response_bytes=1024, on_fault=faults.append, name="test", timeout_s=5)
        async with httpx2.AsyncClient(transport=transport) as client:
            await client.post(f"https://other.test.example:{http_world.port}/mcp", json={})

    with pytest.raises(EgressDenied) as refused:
        anyio.run(send)
    assert refused.value.code == "EGRESS_DENIED" and refused.value.reason == "host_not_allowed"
    assert [f.code for f in faults] == ["EGRESS_DENIED"]


@pytest.mark.parametrize("http_world", ["sse", "json"], indirect=True)
def test_ten_megabyte_http_answer_is_bounded(http_world: HttpWorld) -> None:
    http_world.pin()
    host = http_world.open()
    result = host.call(request("test.big", {"bytes": 10 * 1024 * 1024}))
    assert not result.ok and result.error is not None
    assert result.error.code == "MCP_UNAVAILABLE"
    assert result.error.details["reason"] == "too_large"
    again = host.call(request("test.echo", {"message": "reconnected"}))
    assert again.ok and again.output == {"text": "reconnected"}


def test_server_down_gives_a_stable_code(http_world: HttpWorld) -> None:
    http_world.pin()
    host = http_world.open()
    assert host.call(request("test.echo", {"message": "up"})).ok
    http_world.stop_server()
    first = host.call(request("test.echo", {"message": "down"}))
    assert not first.ok and first.error is not None
    assert first.error.code == "MCP_UNAVAILABLE"
    assert first.error.details["reason"] in ("unreachable", "crashed")  # crashed: a pooled socket broke
    second = host.call(request("test.echo", {"message": "still down"}))
    assert not second.ok and second.error is not None
    assert second.error.code == "MCP_UNAVAILABLE"
    assert second.error.details["reason"] in ("unreachable", "backoff")


def test_cancelled_http_call_sends_notifications_cancelled(http_world: HttpWorld) -> None:
    started, stopped = Signal(http_world.root / "started"), Signal(http_world.root / "cancelled")
    http_world.behave(started_fifo=str(started.path), cancelled_fifo=str(stopped.path))
    http_world.pin()
    host = http_world.open()
    cancel = threading.Event()
    results: list[Any] = []
    caller = threading.Thread(target=lambda: results.append(host.call(request("test.block"), cancel=cancel)))
    caller.start()
    assert started.wait(), "the server never started the call"
    cancel.set()
    caller.join(timeout=30)
    (result,) = results
    assert not result.ok and result.error.code == "CANCELLED"
    assert stopped.wait(), "the server was never told the call was cancelled"
    assert host.call(request("test.echo", {"message": "same session"})).ok
    assert http_world.records("call.outcome")[-2]["error"]["code"] == "CANCELLED"


def test_hung_http_server_times_out_and_the_session_is_reopened(http_world: HttpWorld) -> None:
    http_world.pin(http_world.declaration(call_timeout_ms=1500))
    host = http_world.open()
    hung = host.call(request("test.hang"))
    assert not hung.ok and hung.error is not None
    assert hung.error.code == "MCP_TIMEOUT"
    again = host.call(request("test.echo", {"message": "new session"}))
    assert again.ok and again.output == {"text": "new session"}
    assert len(http_world.records("mcp.connected")) == 2


@pytest.mark.parametrize("header", ["Host", "content-length", "Mcp-Session-Id", "X Bad", "X-Api-Key\r\nX"])
def test_secret_header_cannot_replace_a_host_owned_header(header: str) -> None:
    doc = {
        "format": "stockade.mcp/1", "name": "test", "version": "1.0.0",
        "transport": {"type": "http", "url": f"https://{NAME}/mcp"},
        "secrets": [{"secret": "api_token", "header": header}],
        "secrets_scope": {"project": "ops", "subject": "mcp-test"},
        "limits": {"call_timeout_ms": 5000, "max_output_bytes": 65536, "max_concurrent_calls": 4},
    }
    with pytest.raises(StockadeError) as refused:
        McpDeclaration.from_json(json.dumps(doc).encode())
    assert refused.value.code == "MANIFEST_INVALID"
    doc["secrets"][0]["header"] = "X-Api-Key"  # an ordinary header name is accepted
    assert McpDeclaration.from_json(json.dumps(doc).encode()).secrets[0].header == "X-Api-Key"
    doc["secrets"].append({"secret": "other", "header": "x-api-key"})  # one header, two secrets
    with pytest.raises(StockadeError):
        McpDeclaration.from_json(json.dumps(doc).encode())


@pytest.mark.parametrize(("url", "reason"), [
    ("https://localhost/mcp", "localhost"),
    ("https://user@mcp.test.example/mcp", "userinfo"),
    ("https://0x7f.0.0.1/mcp", "ip_literal"),
])
def test_endpoint_outside_the_url_rules_is_refused_before_connecting(tmp_path: Path, url: str, reason: str) -> None:
    doc = {
        "format": "stockade.mcp/1", "name": "test", "version": "1.0.0",
        "transport": {"type": "http", "url": url},
        "limits": {"call_timeout_ms": 5000, "max_output_bytes": 65536, "max_concurrent_calls": 4},
    }
    decl = McpDeclaration.from_json(json.dumps(doc).encode())
    with pytest.raises(EgressDenied) as refused:
        pin_source(decl, state_dir=tmp_path, secrets=None, review={},
                   network=McpNetwork(loopback, None, allow_loopback=True))
    assert refused.value.code == "EGRESS_DENIED" and refused.value.reason == reason
    assert "MCP source test" in refused.value.message


def test_http_server_crashing_mid_call_gives_a_stable_code(http_world: HttpWorld) -> None:
    http_world.pin()
    host = http_world.open()
    crashed = host.call(request("test.crash"))  # the server process exits while answering
    assert not crashed.ok and crashed.error is not None
    assert (crashed.error.code, crashed.error.details["reason"]) == ("MCP_UNAVAILABLE", "crashed")
    assert http_world.records("call.outcome")[-1]["error"]["code"] == "MCP_UNAVAILABLE"


def test_http_answer_that_is_not_json_rpc_gives_malformed(http_world: HttpWorld) -> None:
    with pytest.raises(StockadeError) as refused:
        http_world.pin(http_world.declaration(path="/garbled"))
    assert refused.value.code == "MCP_UNAVAILABLE" and refused.value.details["reason"] == "malformed"


def test_certificate_from_an_untrusted_ca_is_refused_mitm(http_world: HttpWorld) -> None:
    untrusted = McpNetwork(loopback, None, allow_loopback=True)  # the system store only
    with pytest.raises(StockadeError) as refused:
        http_world.pin(network=untrusted)
    assert refused.value.code == "MCP_UNAVAILABLE" and refused.value.details["reason"] == "unreachable"
    assert "CERTIFICATE_VERIFY_FAILED" in refused.value.message


def test_secret_that_is_not_a_header_value_is_refused_before_sending(http_world: HttpWorld) -> None:
    http_world.secrets.set("ops", "mcp-test", "api_token", f"{TOKEN}\u2713")  # not Latin-1
    with pytest.raises(StockadeError) as refused:
        http_world.pin()
    assert refused.value.code == "CREDENTIAL_UNAVAILABLE"
    assert TOKEN not in refused.value.message
