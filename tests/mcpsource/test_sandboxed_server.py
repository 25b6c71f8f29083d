"""A stdio MCP server under ``transport.sandbox = "bwrap"``: the hostile server of
``hostile_stdio.py`` cannot read a host file outside its grant, cannot open a socket to a
loopback listener the test starts, and its double-forked grandchild dies with the host
(closed, and SIGKILLed). The native mode is unchanged (its bindings too)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from host.errors import McpUnavailable
from host.formats.mcppin import McpDeclaration, StdioTransport, isolation_text
from host.mcpsource.source import start_server
from tests.support.cli import cli_env

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
SERVER = Path(__file__).with_name("hostile_stdio.py")
MARKER = b"sleep\x0097.41"


def declaration(sandbox: str = "bwrap") -> McpDeclaration:
    transport: dict[str, Any] = {"type": "stdio", "command": "/usr/bin/python3", "args": [str(SERVER)]}
    if sandbox == "bwrap":
        transport |= {"sandbox": "bwrap", "read_paths": [str(SERVER.parent)]}
    doc = {"format": "stockade.mcp/1", "name": "hostile", "version": "1.0.0", "transport": transport,
           "limits": {"call_timeout_ms": 5000, "max_output_bytes": 65536, "max_concurrent_calls": 1}}  # fmt: skip
    return McpDeclaration.from_json(json.dumps(doc).encode())


def _sleepers() -> list[int]:
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if MARKER in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(int(entry))
        except OSError:
            continue
    return found


def _wait_sleepers(seconds: float) -> list[int]:
    """The grandchild, once it has exec'd ``sleep`` (the probe returns before that)."""
    deadline = time.monotonic() + seconds
    while not (found := _sleepers()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return found


def _wait_no_sleepers(seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := _sleepers()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _probe(conn: Any, secret: Path, port: int) -> dict[str, Any]:
    result = conn.request("tools/call", {"name": "probe", "arguments": {"secret_path": str(secret), "port": port}},
                          timeout_s=10)  # fmt: skip
    return dict(json.loads(result["content"][0]["text"]))


def test_sandboxed_server_cannot_read_outside_grant_or_connect_and_grandchild_dies(
    tmp_path: Path, listener: socket.socket
) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("TOP SECRET")
    conn, _ = start_server(declaration(), state_dir=tmp_path / "state", secrets=None)
    try:
        found = _probe(conn, secret, listener.getsockname()[1])
        assert _wait_sleepers(3)  # the double-forked grandchild runs, inside the sandbox
    finally:
        conn.close()
    assert found == {"read": "FileNotFoundError", "connect": "Operation not permitted", "home": False}
    with pytest.raises(TimeoutError):
        listener.accept()
    assert _wait_no_sleepers(5) == []


_HOST = """
import json, sys
from pathlib import Path
from host.mcpsource.source import start_server
from tests.mcpsource.test_sandboxed_server import declaration
conn, _ = start_server(declaration(), state_dir=Path(sys.argv[1]), secrets=None)
conn.request("tools/call", {"name": "probe", "arguments": {"secret_path": "/nonexistent", "port": 9}}, timeout_s=10)
print("ready", flush=True)
sys.stdin.read()  # until the test kills this host
"""


def test_sandboxed_server_grandchild_dies_with_sigkilled_host(tmp_path: Path) -> None:
    with subprocess.Popen([sys.executable, "-c", _HOST, str(tmp_path / "state")], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, env=cli_env(), cwd=Path(__file__).parents[2]) as host:  # fmt: skip
        assert host.stdout is not None
        assert host.stdout.readline().strip() == b"ready"
        assert _wait_sleepers(3)  # the grandchild runs, inside the sandbox
        host.send_signal(signal.SIGKILL)  # no atexit, no close: only the kernel can help
        host.wait(timeout=30)
    assert _wait_no_sleepers(10) == []


def test_native_transport_binding_unchanged_and_read_paths_need_bwrap() -> None:
    native = declaration("native").transport
    assert isinstance(native, StdioTransport)
    assert set(native.identity()) == {"type", "command", "args", "cwd"}  # pins before sandbox= keep bindings
    assert declaration().transport.identity()["sandbox"] == "bwrap"  # type: ignore[union-attr]
    assert "bubblewrap sandbox: no network" in isolation_text(declaration())
    assert isolation_text(declaration("native")).startswith("a native process, not a sandbox")
    with pytest.raises(ValueError, match="read_paths need"):
        StdioTransport(type="stdio", command="/usr/bin/python3", read_paths=("/opt",))


def test_sandboxed_server_without_bwrap_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(McpUnavailable) as caught:
        start_server(declaration(), state_dir=tmp_path / "state", secrets=None)
    assert caught.value.details["reason"] == "sandbox_unavailable"


MODULES = (Path(__file__).resolve().parents[2] / "node_modules" / "@modelcontextprotocol").resolve()


@pytest.mark.skipif(
    shutil.which("node") is None or not (MODULES / "server-filesystem").is_dir(),
    reason="needs node and `npm ci` (package.json devDependencies)",
)
def test_real_filesystem_server_allowed_everything_still_reads_only_its_binds(tmp_path: Path) -> None:
    # The official server is told it may serve "/": inside the sandbox "/" holds only the
    # system directories, its read_paths and its working directory.
    files, outside = tmp_path / "files", tmp_path / "outside"
    files.mkdir()
    outside.mkdir()
    (files / "hello.txt").write_text("granted\n")
    (outside / "secret.txt").write_text("TOP SECRET\n")
    node = str(Path(shutil.which("node") or "/usr/bin/node").resolve())
    doc = {
        "format": "stockade.mcp/1", "name": "filesystem", "version": "1.0.0",
        "transport": {"type": "stdio", "command": node, "sandbox": "bwrap",
                      "args": [str(MODULES / "server-filesystem" / "dist" / "index.js"), "/"],
                      "read_paths": [str(MODULES.parent), str(files)]},
        "limits": {"call_timeout_ms": 20_000, "max_output_bytes": 1 << 20, "max_concurrent_calls": 1,
                   "startup_timeout_ms": 60_000},
    }  # fmt: skip
    conn, _ = start_server(McpDeclaration.from_json(json.dumps(doc).encode()), state_dir=tmp_path / "state",
                           secrets=None)  # fmt: skip
    try:
        granted = conn.request("tools/call", {"name": "read_text_file", "arguments": {"path": str(files / "hello.txt")}},
                               timeout_s=20)  # fmt: skip
        refused = conn.request("tools/call", {"name": "read_text_file",
                                              "arguments": {"path": str(outside / "secret.txt")}}, timeout_s=20)  # fmt: skip
    finally:
        conn.close()
    assert granted["content"][0]["text"] == "granted\n"
    assert refused.get("isError") is True and "TOP SECRET" not in json.dumps(refused)
    assert "ENOENT" in json.dumps(refused) or "no such file" in json.dumps(refused).lower()
