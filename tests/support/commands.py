"""A real Host serving ``exec.run`` over declared commands, for the sandbox tests.

``make_exec_host(tmp_path, commands)`` writes an empty lock, a policy granting ``alice`` in
project ``p`` ``exec.run`` (still *ask* by the class default of ``execute``) and opens a
Host whose config grants ``tmp_path / "ws"`` to project ``p`` and declares ``commands``.
``run`` prepares, approves (as a person would) and executes one call.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from host import CallRequest, CallResult, Host, HostConfig, Principal
from host.config import CommandEntry, WorkspaceGrant
from host.egress.policy import Resolver
from host.policy.engine import FilePolicyEngine
from host.secrets.store import SecretsStore
from host.types import InvocationPlan
from tests.support.bundles import write_lock
from tests.support.hosts import write_policy

ALICE = Principal(project="p", subject="alice")
EXEC_PERMISSIONS = ("tool.call:exec.run", "exec.run")


@dataclass
class ExecHost:
    host: Host
    root: Path
    ws: Path
    audit_path: Path

    def request(self, **input: Any) -> CallRequest:
        return CallRequest(principal=ALICE, session="s1", tool="exec.run", version="1.0.0", input=input)

    def prepare(self, **input: Any) -> InvocationPlan:
        return self.host.prepare(self.request(**input))

    def run(self, *argv: str, cancel: threading.Event | None = None, **input: Any) -> CallResult:
        plan = self.prepare(argv=list(argv), **input)
        return self.host.execute(plan, self.host.approve(plan), cancel=cancel)


def make_exec_host(
    tmp: Path,
    commands: Sequence[CommandEntry],
    *,
    grant: dict[str, Any] | None = None,
    secrets: SecretsStore | None = None,
    resolver: Resolver | None = None,
    **config: Any,
) -> ExecHost:
    ws = tmp / "ws"
    ws.mkdir(exist_ok=True)
    lock, policy_file = tmp / "stockade.lock", tmp / "policy.json"
    if lock.exists():  # a second Host over the same directory (a changed configuration)
        policy = FilePolicyEngine(policy_file)
    else:
        write_lock(lock, [])
        policy = write_policy(policy_file, allow=EXEC_PERMISSIONS)
    host_config = HostConfig(
        state_dir=tmp / "state", workspaces=(WorkspaceGrant(root=ws, project="p", **(grant or {})),),
        commands=tuple(commands), **config,
    )  # fmt: skip
    audit = tmp / "audit.log"
    host = Host.open(lock, config=host_config, secrets=secrets, policy=policy, audit=audit, resolver=resolver)
    return ExecHost(host, tmp, ws, audit)
