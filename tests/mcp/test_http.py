"""``stockade serve --transport http``: a real server on a loopback port, bearer tokens, Origin."""

from __future__ import annotations

import contextlib
import json
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp
import pytest
import uvicorn
from mcp.client.streamable_http import streamable_http_client

from host import FilePolicyEngine
from host.mcp import transport
from host.mcp.tokens import TokenFile
from tests.mcp.conftest import World
from tests.support.cli import cli_env

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@dataclass
class Served:
    url: str
    tokens: TokenFile
    proc: subprocess.Popen[str]
    lines: queue.Queue[str]
    stderr: list[str]

    def wait_for_line(self, text: str, timeout: float = 60) -> str:
        """Block until the server writes a stderr line containing ``text``."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            if text in line:
                return line


_LOWER_NOFILE = (
    "import os, resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, ({nofile}, {nofile})); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


def _empty_tokens_file(path: Path) -> None:
    """A tokens file with no token, as `stockade tokens revoke` leaves it."""
    if not path.exists():
        tokens = TokenFile(path)
        tokens.revoke(tokens.add(project="p", subject="nobody", ttl_s=60)[1].id)


@contextlib.contextmanager
def http_server(
    world: World, *extra: str, tokens: TokenFile | None = None, nofile: int | None = None
) -> Iterator[Served]:
    """A `stockade serve --transport http` subprocess on a free loopback port; stops on exit.

    ``nofile`` lowers the server's ``RLIMIT_NOFILE`` (soft and hard) before it starts.
    """
    if "--tokens" in extra:  # serve refuses a missing tokens file: start with one holding none
        _empty_tokens_file(Path(extra[extra.index("--tokens") + 1]))
    launcher: list[str] = [sys.executable]
    if nofile is not None:  # lower the limit in the child, then exec the server (no preexec_fn)
        launcher += ["-c", _LOWER_NOFILE.format(nofile=int(nofile))]
    args = [
        *launcher, "-m", "sdk.cli", "serve", "--transport", "http", "--port", "0",
        "--lock", str(world.lock), "--state-dir", str(world.state), *extra,
    ]  # fmt: skip
    proc = subprocess.Popen(
        args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, env=cli_env(), cwd=world.root,
    )  # fmt: skip
    stderr: list[str] = []
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in proc.stderr or ():
            stderr.append(line)
            lines.put(line)

    drain = threading.Thread(target=pump, daemon=True)
    try:
        assert proc.stderr is not None
        url = ""
        for line in proc.stderr:  # the server prints its URL once it listens
            stderr.append(line)
            if "listening on " in line:
                url = line.split("listening on ", 1)[1].strip()
                break
        assert url.startswith("http://127.0.0.1:"), "".join(stderr)
        drain.start()  # keep reading so the server never blocks on a full pipe
        yield Served(url, tokens or TokenFile(world.state / "tokens.json"), proc, lines, stderr)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if drain.is_alive():
            drain.join(timeout=30)
        if proc.stderr is not None:
            proc.stderr.close()


def grant_carol_reader(world: World) -> None:
    engine = FilePolicyEngine(world.state / "policy.json")
    engine.set_role("reader", allow=["tool.call:echo.say", "echo.use"], ask=[])
    engine.grant_role("p", "carol", "reader")


@pytest.fixture
def served(world: World) -> Iterator[Served]:
    grant_carol_reader(world)
    tokens = TokenFile(world.state / "tokens.json")
    with http_server(world, "--tokens", str(tokens.path), tokens=tokens) as server:
        yield server


def post(served: Served, **headers: str) -> httpx2.Response:
    return httpx2.post(served.url, json=INITIALIZE, headers=HEADERS | headers, timeout=30)


def test_request_without_token_is_401(served: Served) -> None:
    assert post(served).status_code == 401


def test_request_with_unknown_or_malformed_token_is_401(served: Served) -> None:
    token, _ = served.tokens.add(project="p", subject="alice", ttl_s=3600)
    forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    assert post(served, Authorization=f"Bearer {forged}").status_code == 401
    assert post(served, Authorization="Bearer stk_nothing").status_code == 401


def test_expired_token_is_401(served: Served) -> None:
    past = TokenFile(served.tokens.path, clock=lambda: time.time() - 7200)
    token, _ = past.add(project="p", subject="alice", ttl_s=3600)
    assert post(served, Authorization=f"Bearer {token}").status_code == 401


def test_revoked_token_is_401_on_the_next_request(served: Served) -> None:
    token, entry = served.tokens.add(project="p", subject="alice", ttl_s=3600)
    assert post(served, Authorization=f"Bearer {token}").status_code == 200
    served.tokens.revoke(entry.id)
    assert post(served, Authorization=f"Bearer {token}").status_code == 401


def test_cross_origin_request_is_403_even_with_a_valid_token(served: Served) -> None:
    token, _ = served.tokens.add(project="p", subject="alice", ttl_s=3600)
    response = post(served, Authorization=f"Bearer {token}", Origin="http://evil.example")
    assert response.status_code == 403


def test_dns_rebinding_host_header_is_refused(served: Served) -> None:
    token, _ = served.tokens.add(project="p", subject="alice", ttl_s=3600)
    response = post(served, Authorization=f"Bearer {token}", Host="evil.example")
    assert response.status_code in (403, 421)


async def _tools(served: Served, token: str, call: bool = False) -> tuple[list[str], Any]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
        async with mcp.Client(streamable_http_client(served.url, http_client=http), mode="legacy") as client:
            names = [t.name for t in (await client.list_tools()).tools]
            result = await client.call_tool("echo.say", {"message": "over http"}) if call else None
    return names, result


def test_valid_token_gets_its_principals_tool_list(served: Served) -> None:
    alice, _ = served.tokens.add(project="p", subject="alice", ttl_s=3600)
    carol, _ = served.tokens.add(project="p", subject="carol", ttl_s=3600)

    async def body() -> None:
        names, said = await _tools(served, alice, call=True)
        assert names == ["echo.say", "echo.write", "spin.forever"]
        assert said is not None and said.structured_content == {"message": "over http"}
        names, _ = await _tools(served, carol)
        assert names == ["echo.say"]

    anyio.run(body)


def test_tokens_file_keeps_only_salted_hashes(served: Served) -> None:
    token, entry = served.tokens.add(project="p", subject="alice", ttl_s=3600)
    stored = served.tokens.path.read_text()
    secret = token.rsplit("_", 1)[1]
    assert secret not in stored and entry.sha256 in stored and entry.salt in stored
    assert served.tokens.verify(token) == entry


def test_closing_the_http_stream_cancels_the_running_guest(served: Served, world: World) -> None:
    token, _ = served.tokens.add(project="p", subject="alice", ttl_s=3600)
    auth = HEADERS | {"Authorization": f"Bearer {token}"}
    with httpx2.Client(timeout=60) as http:
        opened = http.post(served.url, json=INITIALIZE, headers=auth)
        session = auth | {
            "mcp-session-id": opened.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-11-25",
        }
        http.post(served.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
        call = {
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "spin.forever", "arguments": {"message": "s"}, "_meta": {"progressToken": "t"}},
        }  # fmt: skip
        with http.stream("POST", served.url, json=call, headers=session) as response:
            for line in response.iter_lines():
                if "sandbox_started" in line:
                    break  # the guest is spinning: hang up
    served.wait_for_line("the HTTP client disconnected")
    served.proc.terminate()
    served.proc.wait(timeout=30)
    records = [json.loads(x) for x in (world.state / "audit.log").read_text().splitlines()]
    spun = [r for r in records if r["kind"] == "call.outcome" and r.get("tool") == "spin.forever"]
    assert [r["error"]["code"] for r in spun] == ["CANCELLED"]
    assert spun[0]["usage"]["duration_us"] < 10_000_000  # about 20 s of fuel otherwise


def test_token_principal_is_never_replaced_by_a_configured_one(world: World) -> None:
    grant_carol_reader(world)
    tokens = TokenFile(world.state / "tokens.json")
    carol, _ = tokens.add(project="p", subject="carol", ttl_s=3600)
    with http_server(world, "--tokens", str(tokens.path), "--project", "p", "--subject", "alice") as server:
        names, _ = anyio.run(_tools, server, carol)
    assert names == ["echo.say"]  # carol's list, not alice's


def test_regression_url_printed_before_the_socket_listened(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # serve printed its URL after bind() but before uvicorn's startup called listen(): a
    # client that read the URL in that window was refused (a flaky "All connection
    # attempts failed" in a loaded CI). The socket must accept from the moment it is shown.
    connected: list[bool] = []

    async def serve(self: object, sockets: list[socket.socket]) -> None:
        port = sockets[0].getsockname()[1]
        assert f"listening on http://127.0.0.1:{port}/mcp" in capsys.readouterr().err
        probe = socket.socket()
        try:
            probe.settimeout(5)
            connected.append(probe.connect_ex(("127.0.0.1", port)) == 0)
        finally:
            probe.close()
            sockets[0].close()

    async def idle(*_args: object) -> None:
        return None

    monkeypatch.setattr(transport, "http_app", lambda *a, **k: object())
    monkeypatch.setattr(uvicorn.Server, "serve", serve)
    monkeypatch.setattr(transport, "_reload_on_signal", idle)
    monkeypatch.setattr(transport, "_reload_on_change", idle)
    monkeypatch.setattr(transport, "_rate_limit_logs", lambda: None)  # would filter pytest's own handlers
    anyio.run(lambda: transport.serve_http(object(), Path("lock"), host="127.0.0.1", port=0, verifier=None))  # type: ignore[arg-type]
    assert connected == [True]
