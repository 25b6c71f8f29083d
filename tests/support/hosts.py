"""Build a real Host from hand-written WAT components for gateway tests.

``make_host(tmp_path, tools=[...], module=echo_component())`` writes a bundle, a lock,
a policy file granting ``alice`` in project ``p`` a role, and opens a Host with a real
audit log. Every piece is real (files, lock verification, wasmtime); only the module is
a small hand-written component.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from host import CallRequest, FilePolicyEngine, Host, HostConfig, Principal
from host.audit.log import AuditLog
from tests.support.bundles import lock_entry, make_manifest, make_tool, write_bundle, write_lock
from tests.support.wat import echo_component

ECHO_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"message": {"type": "string", "maxLength": 100}},
    "required": ["message"],
}

ALICE = Principal(project="p", subject="alice")


def echo_tool(**overrides: Any) -> dict[str, Any]:
    """A tool of package ``echo`` whose guest returns its input."""
    fields: dict[str, Any] = {
        "name": "echo.say",
        "version": "1.0.0",
        "description": "Return the message.",
        "input_schema": ECHO_SCHEMA,
        "output_schema": ECHO_SCHEMA,
        "effect": "read",
        "risk": "low",
        "permissions": ["echo.use"],
        "timeout_s": 5,
        "sensitive_params": [],
        "rate_limit": None,
    }
    fields.update(overrides)
    return make_tool(**fields)


def echo_manifest(tools: Sequence[dict[str, Any]], module: bytes, **overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "package": {"name": "echo", "version": "1.0.0", "description": "Echo.", "homepage": None},
        "limits": {
            "fuel": 50_000_000,
            "memory_bytes": 16 << 20,
            "timeout_ms": 5_000,
            "max_http_requests": 4,
            "max_log_bytes": 4096,
        },
        "http": {
            "allow": [],
            "credentials": [],
            "max_request_bytes": 1024,
            "max_response_bytes": 1024,
            "timeout_ms": 1000,
        },
        "tools": list(tools),
    }
    fields.update(overrides)
    return make_manifest(module_bytes=module, **fields)


@dataclass
class HostFixture:
    host: Host
    root: Path
    policy: FilePolicyEngine
    audit_path: Path
    lock_path: Path

    def request(self, tool: str = "echo.say", input: Any = None, **overrides: Any) -> CallRequest:
        fields: dict[str, Any] = {
            "principal": ALICE,
            "session": "s1",
            "tool": tool,
            "version": "1.0.0",
            "input": {"message": "hi"} if input is None else input,
        }
        fields.update(overrides)
        return CallRequest(**fields)


def write_policy(path: Path, *, allow: Sequence[str] = (), ask: Sequence[str] = ()) -> FilePolicyEngine:
    engine = FilePolicyEngine.initialize(path)
    engine.set_role("user", allow=list(allow), ask=list(ask))
    engine.grant_role("p", "alice", "user")
    return engine


def make_host(
    root: Path,
    *,
    tools: Sequence[dict[str, Any]] | None = None,
    module: bytes | None = None,
    allow: Sequence[str] = ("tool.call:echo.say", "echo.use"),
    ask: Sequence[str] = (),
    manifest_overrides: dict[str, Any] | None = None,
    audit: AuditLog | Path | None = None,
    **open_kwargs: Any,
) -> HostFixture:
    module = echo_component() if module is None else module
    manifest = echo_manifest(tools or [echo_tool()], module, **(manifest_overrides or {}))
    bundle = write_bundle(root / "bundles" / "echo", manifest, module)
    lock = write_lock(root / "stockade.lock", [lock_entry(root, bundle)])
    policy = write_policy(root / "policy.json", allow=allow, ask=ask)
    audit_path = root / "audit.log"
    open_kwargs.setdefault("config", HostConfig(state_dir=root / "state"))
    open_kwargs.setdefault("secrets", None)
    host = Host.open(lock, policy=policy, audit=audit or audit_path, **open_kwargs)
    return HostFixture(host, root, policy, audit_path, lock)
