"""examples/mcp-agent/agent.py runs an agent session over MCP against a real stockade serve."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.mcp.conftest import World
from tests.support.cli import REPO, cli_env

SCRIPT = REPO / "examples" / "mcp-agent" / "agent.py"


@pytest.mark.parametrize(
    "mode,answer,code", [("legacy", "yes", None), ("auto", "yes", None), ("legacy", "no", "APPROVAL_DENIED")]
)
def test_example_agent_session_with_approval(world: World, mode: str, answer: str, code: str | None) -> None:
    session = world.root / "session.json"
    session.write_text(json.dumps([
        {"tool": "echo.say", "arguments": {"message": "hello"}},
        {"tool": "echo.write", "arguments": {"message": "needs a person"}},
        {"tool": "shell.exec", "arguments": {}},
    ]))  # fmt: skip
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--lock", str(world.lock), "--state-dir", str(world.state),
         "--principal", "p/alice", "--script", str(session), "--approve", answer, "--mode", mode],
        capture_output=True, text=True, timeout=180, env=cli_env(), cwd=REPO, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    assert lines[0]["tools"] == ["echo.say", "echo.write", "spin.forever"]
    assert lines[1]["ok"] is True and lines[1]["result"] == {"message": "hello"}
    assert lines[2]["code"] == code and lines[2]["ok"] is (code is None)
    assert lines[3] == {"tool": "shell.exec", "ok": False, "code": -32602}
    assert "action digest:" in proc.stderr  # the preview the person saw
