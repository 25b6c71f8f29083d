"""``stockade serve`` serves ``exec.run`` when the configuration declares commands: it is
listed with its schema and a call asks for approval with the command's preview."""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import mcp
import pytest

from host import Host, HostConfig
from host.config import CommandEntry, WorkspaceGrant
from host.mcp.server import ServeOptions, StockadeMCP
from host.policy.engine import FilePolicyEngine
from tests.mcp.conftest import ALICE
from tests.support.bundles import write_lock
from tests.support.hosts import write_policy

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def test_serve_lists_exec_run_and_asks_before_running(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    lock = write_lock(tmp_path / "stockade.lock", [])
    state = tmp_path / "state"
    state.mkdir()
    write_policy(state / "policy.json", allow=("tool.call:exec.run", "exec.run"))
    config = HostConfig(
        state_dir=state, workspaces=(WorkspaceGrant(root=tmp_path / "ws", project="p"),),
        commands=(CommandEntry(name="python3", path=Path("/usr/bin/python3")),),
    )  # fmt: skip

    def opener() -> Host:
        policy = FilePolicyEngine(state / "policy.json")
        return Host.open(lock, config=config, secrets=None, policy=policy, audit=tmp_path / "audit.log")

    app = StockadeMCP(opener, options=ServeOptions(state_dir=state, principal=ALICE))

    async def session() -> tuple[list[str], dict[str, object]]:
        async with mcp.Client(app.server) as client:
            tools = await client.list_tools()
            result = await client.call_tool("exec.run", {"argv": ["python3", "-c", "print(1)"]})
        assert result.meta is not None
        return [t.name for t in tools.tools], dict(result.meta["dev.stockade/call"])

    try:
        names, meta = anyio.run(session)
    finally:
        app.close()
    assert names == ["exec.run"]  # the policy grants only it
    assert meta["code"] == "APPROVAL_REQUIRED"
