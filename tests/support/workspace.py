"""A real Host with a workspace root and no packages, for the ``fs.*`` host tool tests.

``make_fs_host(tmp_path)`` writes an empty lock, a policy granting ``alice`` in project
``p`` the ``fs.*`` tools (``fs.read`` and ``fs.write``; the edit is still *ask* by the
class defaults) and opens a Host whose config grants ``tmp_path / "ws"`` to project ``p``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from host import CallRequest, CallResult, Host, HostConfig, Principal
from host.config import WorkspaceGrant
from host.types import InvocationPlan
from tests.support.bundles import write_lock
from tests.support.hosts import write_policy

ALICE = Principal(project="p", subject="alice")
FS_PERMISSIONS = (
    "tool.call:fs.read_file", "tool.call:fs.edit_file", "tool.call:fs.write_file", "tool.call:fs.list",
    "tool.call:fs.search", "fs.read", "fs.write",
)  # fmt: skip


@dataclass
class FsHost:
    host: Host
    root: Path
    ws: Path
    audit_path: Path
    extra: dict[str, Any] = field(default_factory=dict)

    def request(self, tool: str, **input: Any) -> CallRequest:
        return CallRequest(principal=ALICE, session="s1", tool=tool, version="1.0.0", input=input)

    def read(self, **input: Any) -> CallResult:
        return self.host.call(self.request("fs.read_file", **input))

    def prepare_edit(self, **input: Any) -> InvocationPlan:
        return self.host.prepare(self.request("fs.edit_file", **input))

    def edit(self, **input: Any) -> CallResult:
        """Prepare, approve (as a person would) and execute one edit."""
        plan = self.prepare_edit(**input)
        return self.host.execute(plan, self.host.approve(plan))


def make_fs_host(tmp: Path, **grant: Any) -> FsHost:
    ws = tmp / "ws"
    ws.mkdir(exist_ok=True)
    lock = write_lock(tmp / "stockade.lock", [])
    policy = write_policy(tmp / "policy.json", allow=FS_PERMISSIONS)
    config = HostConfig(state_dir=tmp / "state", workspaces=(WorkspaceGrant(root=ws, project="p", **grant),))
    audit = tmp / "audit.log"
    host = Host.open(lock, config=config, secrets=None, policy=policy, audit=audit)
    return FsHost(host, tmp, ws, audit)
