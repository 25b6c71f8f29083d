"""``stockade serve --scope ID``: an unattended job over stdio with the official SDK
client. A covered write runs without an elicitation; an uncovered one is refused at once
(nobody is asked, nothing is queued); a missing scope stops the server at start."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp
from mcp import StdioServerParameters, types

from host.canonical import canonical_json, sha256_hex
from host.mcp.server import META_KEY
from tests.mcp.conftest import World
from tests.support.approver import write_approver_config
from tests.support.cli import cli_env, json_out, run_cli


def _serve(world: World, scope: str) -> StdioServerParameters:
    args = ["-m", "sdk.cli", "serve", "--lock", str(world.lock), "--state-dir", str(world.state),
            "--project", "p", "--subject", "alice", "--scope", scope]
    return StdioServerParameters(command=sys.executable, args=args, env=cli_env(), cwd=str(world.root))


def _grant(world: World, *extra: str) -> str:
    write_approver_config(world.root / "home")
    (world.root / "stockade.host.toml").write_text(
        'format = "stockade.host/1"\n\n[host]\napprover_key = "home/approver.pem"\n', encoding="utf-8"
    )
    (world.root / "stockade.host.toml").chmod(0o600)
    granted = run_cli("scopes", "grant", "p", "alice", "--tool", "echo.write@1.0.0", "--for", "1h",
                      "--job", "nightly", "--json", "--lock", str(world.lock), "--state-dir", str(world.state),
                      *extra, cwd=world.root)
    assert granted.returncode == 0, granted.stderr
    return str(json_out(granted)["scope"]["id"])


def test_a_covered_write_runs_without_elicitation_and_an_uncovered_one_is_refused_at_once(world: World) -> None:
    covered = sha256_hex(canonical_json({"message": "covered"}))
    scope = _grant(world, "--max-calls", "2", "--input", covered)
    asked: list[Any] = []

    async def never(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"approve": True})

    async def body() -> tuple[Any, Any, float]:
        async with mcp.Client(_serve(world, scope), mode="legacy", elicitation_callback=never) as client:  # type: ignore[arg-type]
            ran = await client.call_tool("echo.write", {"message": "covered"})
            started = anyio.current_time()
            refused = await client.call_tool("echo.write", {"message": "not covered"})
            return ran, refused, anyio.current_time() - started

    ran, refused, took = anyio.run(body)
    assert asked == []  # no elicitation, either way
    assert ran.is_error is False and ran.structured_content == {"message": "covered"}
    assert refused.is_error is True and refused.meta is not None
    error = refused.meta[META_KEY]
    assert error["code"] == "APPROVAL_REQUIRED" and error["reason"] == "not_in_scope"
    assert took < 10  # refused at once, never held open for a person
    assert not (world.state / "approvals.json").exists()  # nothing queued
    records = [json.loads(line) for line in (world.state / "audit.log").read_text().splitlines()]
    outcomes = [r for r in records if r["kind"] == "call.outcome" and r.get("ok")]
    assert [r["discharged_by"] for r in outcomes] == [f"scope:{scope}"]
    assert [r["kind"] for r in records if r["kind"].startswith("scope.")] == ["scope.issued", "scope.redeemed"]
    assert not [r for r in records if r["kind"].startswith("approval.")]


def test_serve_with_a_scope_nobody_granted_refuses_to_start(world: World, tmp_path: Path) -> None:
    _grant(world, "--max-calls", "1")
    started = run_cli("serve", "--lock", str(world.lock), "--state-dir", str(world.state), "--project", "p",
                      "--subject", "alice", "--scope", "scope_" + "0" * 32, cwd=world.root, stdin="")
    assert started.returncode == 1 and "SCOPE_INVALID" in started.stderr
