"""``stockade tokens`` and ``stockade approvals`` as a person runs them (real subprocesses)."""

from __future__ import annotations

import json

import anyio
import mcp

from host.mcp.tokens import TokenFile
from tests.mcp.conftest import World
from tests.support.cli import run_cli


def test_tokens_add_list_revoke(world: World) -> None:
    state = ("--state-dir", str(world.state))
    added = run_cli("tokens", "add", "--project", "p", "--subject", "alice", "--label", "ci", *state,
                    "--json", cwd=world.root)  # fmt: skip
    assert added.returncode == 0, added.stderr
    info = json.loads(added.stdout)
    assert info["token"].startswith("stk_") and info["expires_at"] - info["created_at"] == 90 * 86400
    tokens = TokenFile(world.state / "tokens.json")
    assert tokens.verify(info["token"]) is not None
    listed = run_cli("tokens", "list", *state, "--json", cwd=world.root)
    assert [e["id"] for e in json.loads(listed.stdout)] == [info["id"]]
    assert (
        info["token"] not in listed.stdout and info["token"] not in (world.state / "tokens.json").read_text()
    )
    revoked = run_cli("tokens", "revoke", info["id"], *state, cwd=world.root)
    assert revoked.returncode == 0, revoked.stderr
    assert tokens.verify(info["token"]) is None
    again = run_cli("tokens", "revoke", info["id"], *state, cwd=world.root)
    assert again.returncode == 1 and "REQUEST_INVALID" in again.stderr


def test_approvals_list_and_approve_from_the_cli(world: World) -> None:
    app = world.app()
    state = ("--state-dir", str(world.state))

    async def call() -> dict[str, object]:
        async with mcp.Client(app.server) as client:
            result = await client.call_tool("echo.write", {"message": "cli"})
        assert result.meta is not None
        return dict(result.meta["dev.stockade/call"])

    first = anyio.run(call)
    assert first["code"] == "APPROVAL_REQUIRED"
    listed = run_cli("approvals", "list", *state, "--json", cwd=world.root)
    entries = json.loads(listed.stdout)
    assert [(e["action_digest"], e["status"], e["summary"]) for e in entries] == [
        (first["action_digest"], "pending", '{"message":"cli"}')
    ]
    approved = run_cli("approvals", "approve", str(first["action_digest"]), *state, cwd=world.root)
    assert approved.returncode == 0, approved.stderr
    assert anyio.run(call)["code"] is None
    unknown = run_cli("approvals", "deny", "0" * 64, *state, cwd=world.root)
    assert unknown.returncode == 1 and "APPROVAL_INVALID" in unknown.stderr
    app.close()
