"""Restart with backoff of a failing MCP server (clock injected; no sleeps)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from host.audit.log import AuditLog
from host.canonical import sha256_hex
from host.config import DEFAULT_CEILINGS
from host.errors import McpUnavailable
from host.formats.mcppin import McpDeclaration, McpLockEntry, McpPin, PinnedSource, pinned_manifest
from host.mcpsource.source import McpSource


def _source(tmp_path: Path, clock: list[float]) -> McpSource:
    decl = McpDeclaration.from_json(json.dumps({
        "format": "stockade.mcp/1", "name": "gone", "version": "1.0.0",
        "transport": {"type": "stdio", "command": str(tmp_path / "no-such-server")},
        "limits": {"call_timeout_ms": 1000, "max_output_bytes": 4096, "max_concurrent_calls": 1},
    }).encode())
    pin = McpPin(format="stockade.mcp-pin/1", source=decl, tools=())
    digest = sha256_hex(pin.to_json())
    entry = McpLockEntry(name="gone", version="1.0.0", pin="mcp/gone.json", pin_sha256=digest)
    pinned = PinnedSource(entry=entry, pin=pin, manifest=pinned_manifest(decl, (), digest, ceilings=DEFAULT_CEILINGS))
    return McpSource(pinned, state_dir=tmp_path, secrets=None, audit=AuditLog(tmp_path / "audit.log"),
                     clock=lambda: clock[0])


def _reason(source: McpSource) -> str:
    with pytest.raises(McpUnavailable) as caught:
        source.call("gone.x", {}, timeout_s=1)
    return str(caught.value.details["reason"])


def test_crash_looping_server_is_restarted_with_exponential_backoff(tmp_path: Path) -> None:
    clock = [100.0]
    source = _source(tmp_path, clock)
    source.connect()  # first failure, recorded, never raised
    assert _reason(source) == "start_failed"  # immediate retry after one failure
    assert _reason(source) == "backoff"  # second failure: wait 0.5 s
    clock[0] += 0.5
    assert _reason(source) == "start_failed"
    clock[0] += 0.5
    assert _reason(source) == "backoff"  # third failure: wait 1 s
    clock[0] += 0.5
    assert _reason(source) == "start_failed"
    records = [json.loads(line) for line in (tmp_path / "audit.log").read_text().splitlines()]
    assert records[0]["kind"] == "mcp.unavailable"
    source.close()
