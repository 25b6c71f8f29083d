"""A real Stockade world for MCP tests: WAT components, a lock, a policy file, a state dir.

Packages:
- ``echo`` (echo component): ``echo.say`` (read, allowed), ``echo.write`` (write: policy
  asks a person), ``echo.hidden`` (read, never granted: denied, so not listed);
- ``spin`` (a guest that loops for ever, with fuel and deadline far away):
  ``spin.forever`` (read, allowed) — only cancellation stops it quickly.

The policy file lives at ``<state>/policy.json`` so ``stockade serve --state-dir`` reads
the same policy as the in-process server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from host import FilePolicyEngine, Host, HostConfig, Principal
from host.audit.log import AuditLog
from host.mcp.server import ServeOptions, StockadeMCP
from host.policy.toolpolicy import ToolPolicyStore
from tests.support.bundles import lock_entry, write_bundle, write_lock
from tests.support.hosts import ECHO_SCHEMA, echo_manifest, echo_tool
from tests.support.wat import echo_component, loop_component

ALICE = Principal(project="p", subject="alice")
BOB = Principal(project="p", subject="bob")

SPIN_FUEL = 20_000_000_000  # the host ceiling: about 20 s of spinning
SPIN_TIMEOUT_MS = 60_000

ALLOW = (
    "tool.call:echo.say",
    "echo.use",
    "tool.call:echo.write",
    "echo.write",
    "tool.call:spin.forever",
    "spin.use",
)


def spin_manifest(module: bytes) -> dict[str, Any]:
    tool = echo_tool(
        name="spin.forever", description="Loop for ever.", permissions=["spin.use"], timeout_s=60
    )
    manifest = echo_manifest([tool], module)
    manifest["package"] = {"name": "spin", "version": "1.0.0", "description": "Spin.", "homepage": None}
    manifest["limits"] = dict(manifest["limits"], fuel=SPIN_FUEL, timeout_ms=SPIN_TIMEOUT_MS)
    return manifest


@dataclass
class World:
    root: Path
    lock: Path
    state: Path
    audit: AuditLog
    entries: list[dict[str, Any]] = field(default_factory=list)
    generation: int = 1

    def open_host(self) -> Host:
        return Host.open(
            self.lock,
            config=HostConfig(state_dir=self.state),
            secrets=None,
            policy=FilePolicyEngine(self.state / "policy.json"),
            audit=self.audit,
            tool_policy=ToolPolicyStore(self.state / "tool-policy", admin_dir=None),
        )

    def app(self, principal: Principal | None = ALICE, **options: Any) -> StockadeMCP:
        return StockadeMCP(
            self.open_host, options=ServeOptions(state_dir=self.state, principal=principal, **options)
        )

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (self.root / "audit.log").read_text().splitlines()]


def build_world(root: Path, *, with_spin: bool = True) -> World:
    module = echo_component()
    tools = [
        echo_tool(),
        echo_tool(name="echo.write", effect="write", risk="medium", permissions=["echo.write"]),
        echo_tool(name="echo.hidden", permissions=["echo.hidden"]),
    ]
    echo = write_bundle(root / "bundles" / "echo", echo_manifest(tools, module), module)
    entries = [lock_entry(root, echo)]
    if with_spin:
        spin_module = loop_component()
        spin = write_bundle(root / "bundles" / "spin", spin_manifest(spin_module), spin_module)
        entries.append(lock_entry(root, spin))
    lock = write_lock(root / "stockade.lock", entries)
    state = root / "state"
    state.mkdir(mode=0o700)
    engine = FilePolicyEngine.initialize(state / "policy.json")
    engine.set_role("user", allow=list(ALLOW), ask=[])
    engine.grant_role("p", "alice", "user")
    engine.grant_role("p", "bob", "user")
    return World(root, lock, state, AuditLog(root / "audit.log"), entries)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = build_world(tmp_path)
    yield w
    w.audit.close()


__all__ = ["ALICE", "BOB", "ECHO_SCHEMA", "World", "build_world"]
