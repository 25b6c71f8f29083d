"""An agent edits a workspace file through the MCP server (official SDK client): the person
is asked with the exact diff, in the elicitation message (2025-11-25 era, ``legacy``) and in
``input_required`` (2026-07-28 era, ``auto``); the file is written only after the yes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import mcp
import pytest
from mcp import types

from host import FilePolicyEngine, Host, HostConfig
from host.config import WorkspaceGrant
from host.mcp.server import ServeOptions, StockadeMCP
from tests.support.bundles import write_lock
from tests.support.hosts import write_policy
from tests.support.workspace import ALICE, FS_PERMISSIONS


def _app(tmp_path: Path) -> tuple[StockadeMCP, Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "app.py").write_text("DEBUG = True\n")
    state = tmp_path / "state"
    state.mkdir()
    lock = write_lock(tmp_path / "stockade.lock", [])
    write_policy(state / "policy.json", allow=FS_PERMISSIONS)
    config = HostConfig(state_dir=state, workspaces=(WorkspaceGrant(root=ws, project="p"),))

    def open_host() -> Host:
        return Host.open(lock, config=config, secrets=None, policy=FilePolicyEngine(state / "policy.json"),
                         audit=tmp_path / "audit.log")  # fmt: skip

    return StockadeMCP(open_host, options=ServeOptions(state_dir=state, principal=ALICE)), ws


@pytest.mark.parametrize(
    "mode", ["legacy", "auto"], ids=["elicitation_2025_11_25", "input_required_2026_07_28"]
)
@pytest.mark.parametrize("approve", [True, False], ids=["approved", "declined"])
def test_edit_asks_with_the_diff_before_writing(tmp_path: Path, mode: str, approve: bool) -> None:
    app, ws = _app(tmp_path)
    messages: list[str] = []

    async def elicit(ctx: Any, params: Any) -> types.ElicitResult:
        messages.append(params.message)
        assert (ws / "app.py").read_text() == "DEBUG = True\n"  # nothing written while asking
        return types.ElicitResult(action="accept", content={"approve": approve})

    async def body() -> None:
        async with mcp.Client(app.server, mode=mode, elicitation_callback=elicit) as client:  # type: ignore[arg-type]
            result = await client.call_tool(
                "fs.edit_file", {"path": "app.py", "old_text": "True", "new_text": "False"}
            )
        assert len(messages) == 1
        assert "--- a/app.py\n+++ b/app.py" in messages[0]
        assert "-DEBUG = True" in messages[0] and "+DEBUG = False" in messages[0]
        assert result.is_error is (not approve)

    try:
        anyio.run(body)
    finally:
        app.close()
    assert (ws / "app.py").read_text() == ("DEBUG = False\n" if approve else "DEBUG = True\n")
