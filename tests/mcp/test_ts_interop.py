"""Interoperability with a second implementation: the TypeScript SDK client over stdio.

``@modelcontextprotocol/sdk`` is pinned in package.json (installed by ``npm ci``); the
script ``ts_client.mjs`` lists tools, calls one, calls one that needs approval (answered
through its elicitation handler) and an unknown one.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from host.mcp.server import META_KEY
from tests.mcp.conftest import World
from tests.support.cli import REPO, cli_env

SCRIPT = Path(__file__).with_name("ts_client.mjs")


def test_typescript_sdk_client_lists_calls_and_approves(world: World) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    sdk = REPO / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json"
    assert sdk.exists(), "run `npm ci` (package.json pins @modelcontextprotocol/sdk)"
    server = [
        sys.executable, "-m", "sdk.cli", "serve", "--lock", str(world.lock), "--state-dir", str(world.state),
        "--project", "p", "--subject", "alice",
    ]  # fmt: skip
    proc = subprocess.run(
        [node, str(SCRIPT), json.dumps(server)],
        capture_output=True, text=True, timeout=180, env=cli_env(), cwd=REPO, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [t["name"] for t in out["tools"]] == ["echo.say", "echo.write", "spin.forever"]
    assert out["tools"][0]["annotations"]["readOnlyHint"] is True
    assert out["say"]["structuredContent"] == {"message": "from typescript"}
    assert out["write"]["structuredContent"] == {"message": "approved in ts"}
    assert out["write"]["_meta"][META_KEY]["code"] is None
    assert len(out["elicited"]) == 1 and "echo.write@1.0.0" in out["elicited"][0]
    assert out["unknown"] == -32602
