"""Fixtures for MCP-source tests: a real SDK server subprocess, a real pin, lock and Host."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from host import CallRequest, FilePolicyEngine, Host, HostConfig, Principal
from host.formats.manifest import Effect, Risk
from host.formats.mcppin import McpDeclaration
from host.mcpsource.pinning import PinResult, pin_source
from host.secrets.store import SecretsStore
from sdk.review.lockfile import add_mcp
from tests.support.secrets import make_store

SERVER = Path(__file__).with_name("server.py")
ALICE = Principal(project="p", subject="alice")
TOKEN = "tok-5f3a9c1e7d2b4a60"  # staged into the server's env as API_TOKEN
READ = (Effect.READ, Risk.LOW)
REVIEW = {name: READ for name in ("echo", "add", "hang", "big", "leak", "fail", "crash", "garble", "whoami",
                                   "block")}
TOOLS = tuple(f"test.{name}" for name in REVIEW)


def declaration(root: Path, **limits: Any) -> McpDeclaration:
    doc = {
        "format": "stockade.mcp/1",
        "name": "test",
        "version": "1.0.0",
        "transport": {"type": "stdio", "command": sys.executable,
                      "args": [str(SERVER), "--behaviour", str(root / "behaviour.json")]},
        "env": {"LANG": "C.UTF-8"},
        "secrets": [{"secret": "api_token", "env": "API_TOKEN"}],
        "secrets_scope": {"project": "ops", "subject": "mcp-test"},
        "limits": {"call_timeout_ms": 5000, "max_output_bytes": 64 * 1024, "max_concurrent_calls": 4} | limits,
    }
    return McpDeclaration.from_json(json.dumps(doc).encode())


@dataclass
class McpWorld:
    root: Path
    secrets: SecretsStore
    lock: Path
    pinned: PinResult
    hosts: list[Host] = field(default_factory=list)

    @property
    def audit_path(self) -> Path:
        return self.root / "audit.log"

    def behave(self, **behaviour: Any) -> None:
        (self.root / "behaviour.json").write_text(json.dumps(behaviour))

    def open(self) -> Host:
        policy = FilePolicyEngine.initialize(self.root / f"policy-{len(self.hosts)}.json")
        policy.set_role("user", allow=[f"tool.call:{t}" for t in (*TOOLS, "test.exfiltrate")])
        policy.grant_role("p", "alice", "user")
        host = Host.open(self.lock, config=HostConfig(state_dir=self.root / "state"), secrets=self.secrets,
                         policy=policy, audit=self.audit_path)
        self.hosts.append(host)
        return host

    def records(self, kind: str | None = None) -> list[dict[str, Any]]:
        lines = self.audit_path.read_text().splitlines()
        records = [json.loads(line) for line in lines if line]
        return [r for r in records if kind is None or r["kind"] == kind]


def request(tool: str, input: Any = None) -> CallRequest:
    return CallRequest(principal=ALICE, session="s1", tool=tool, version="1.0.0",
                       input={} if input is None else input)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[McpWorld]:
    secrets = make_store(tmp_path)
    secrets.set("ops", "mcp-test", "api_token", TOKEN)
    decl = declaration(tmp_path)
    pinned = pin_source(decl, state_dir=tmp_path / "pin-state", secrets=secrets, review=REVIEW)
    lock = tmp_path / "stockade.lock"
    add_mcp(lock, pinned.pin)
    w = McpWorld(tmp_path, secrets, lock, pinned)
    yield w
    for host in w.hosts:
        host.close()


def offered(host: Host) -> set[str]:
    """The Stockade names of the tools ``host`` offers to a model."""
    return {host.resolve_tool("openai", t["function"]["name"])[0] for t in host.tools("openai")}
