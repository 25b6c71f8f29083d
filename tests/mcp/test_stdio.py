"""A real ``stockade serve`` subprocess over stdio, driven by the SDK client in both eras."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp
import pytest
from mcp import StdioServerParameters, types
from mcp.shared.exceptions import MCPError

from host.mcp.server import META_KEY
from tests.mcp.conftest import World
from tests.support.bundles import lock_digest, write_lock
from tests.support.cli import cli_env, run_cli


def serve_args(world: World, *extra: str) -> list[str]:
    return [
        "-m", "sdk.cli", "serve", "--lock", str(world.lock), "--state-dir", str(world.state),
        "--project", "p", "--subject", "alice", *extra,
    ]  # fmt: skip


def params(world: World, *extra: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=serve_args(world, *extra), env=cli_env(), cwd=str(world.root)
    )


def served_records(world: World) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (world.state / "audit.log").read_text().splitlines()]


async def approve(ctx: Any, p: Any) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"approve": True})


@pytest.mark.parametrize("mode,channel", [("legacy", "elicitation"), ("auto", "input_required")])
def test_stdio_subprocess_lists_calls_and_approves(world: World, mode: str, channel: str) -> None:
    async def body() -> None:
        async with mcp.Client(params(world), mode=mode, elicitation_callback=approve) as client:  # type: ignore[arg-type]
            tools = await client.list_tools()
            said = await client.call_tool("echo.say", {"message": "over stdio"})
            wrote = await client.call_tool("echo.write", {"message": "approved"})
            bad = await client.call_tool("echo.say", {})
        assert [t.name for t in tools.tools] == ["echo.say", "echo.write", "spin.forever"]
        assert said.structured_content == {"message": "over stdio"}
        assert wrote.is_error is False and wrote.structured_content == {"message": "approved"}
        assert bad.is_error is True and bad.meta is not None and bad.meta[META_KEY]["code"] == "INPUT_INVALID"

    anyio.run(body)
    kinds = [
        (r["kind"], r.get("channel")) for r in served_records(world) if r["kind"].startswith("approval.")
    ]
    assert kinds == [("approval.requested", channel), ("approval.granted", channel)]


def test_stdio_cancellation_stops_the_guest_and_the_server_keeps_serving(world: World) -> None:
    async def body() -> None:
        async with mcp.Client(params(world), mode="legacy") as client:
            started = anyio.Event()

            async def progress(value: float, total: float | None, message: str | None) -> None:
                if (message or "").startswith("sandbox_started"):
                    started.set()

            with anyio.fail_after(60):
                async with anyio.create_task_group() as group:

                    async def spin() -> None:
                        await client.call_tool("spin.forever", {"message": "s"}, progress_callback=progress)

                    group.start_soon(spin)
                    await started.wait()
                    group.cancel_scope.cancel()  # the client sends notifications/cancelled
                after = await client.call_tool("echo.say", {"message": "alive"})
            assert after.structured_content == {"message": "alive"}

    anyio.run(body)  # leaving the client closes stdin: the server drains and exits
    spun = [
        r for r in served_records(world) if r["kind"] == "call.outcome" and r.get("tool") == "spin.forever"
    ]
    assert [r["error"]["code"] for r in spun] == ["CANCELLED"]
    assert spun[0]["usage"]["duration_us"] < 10_000_000  # ~20 s of fuel, 60 s deadline otherwise


def test_sighup_reloads_the_lock_and_notifies_list_changed(world: World) -> None:
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if getattr(message, "method", "") == "notifications/tools/list_changed":
            changed.set()

    async def body() -> None:
        async with mcp.Client(params(world), mode="legacy", message_handler=on_message) as client:
            before = [t.name for t in (await client.list_tools()).tools]
            write_lock(world.lock, world.entries[:1], generation=2, previous=lock_digest(world.lock))
            server = _server_pid(world)
            os.kill(server, signal.SIGHUP)
            with anyio.fail_after(30):
                await changed.wait()
            after = [t.name for t in (await client.list_tools()).tools]
        assert before == ["echo.say", "echo.write", "spin.forever"]
        assert after == ["echo.say", "echo.write"]

    anyio.run(body)


def _server_pid(world: World) -> int:
    """The pid of the `stockade serve` child serving this world's state dir (from /proc)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in args and str(world.state).encode() in args:
            return int(entry.name)
    raise AssertionError("no stockade serve process found")


def test_eof_on_stdin_ends_the_server_cleanly(world: World) -> None:
    proc = subprocess.run(
        [sys.executable, *serve_args(world)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        env=cli_env(),
        cwd=world.root,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""  # stdout carries only MCP, and nothing was asked


def test_serve_without_principal_is_a_usage_error(world: World) -> None:
    proc = run_cli("serve", "--lock", str(world.lock), "--state-dir", str(world.state), cwd=world.root)
    assert proc.returncode == 2
    assert "PRINCIPAL_REQUIRED" in proc.stderr


def test_http_on_a_public_address_without_tokens_refused(world: World) -> None:
    proc = run_cli(
        "serve", "--transport", "http", "--host", "0.0.0.0", "--port", "0",
        "--lock", str(world.lock), "--state-dir", str(world.state), "--project", "p", "--subject", "alice",
        cwd=world.root,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "without authentication" in proc.stderr


def test_serve_honours_the_config_files_managed_cap(world: World) -> None:
    # Regression (serve_ignored_admin_policy_dir): serve built its own HostConfig and
    # dropped the config file's admin_policy_dir, so a tool the administrator disabled
    # stayed callable through MCP while `stockade call` refused it.
    admin = world.root / "admin"
    admin.mkdir()
    (admin / "cap.json").write_text(json.dumps(
        {"format": "stockade.toolcap/1", "rules": [{"selector": {"tool": "echo.say"}, "max": "disabled"}]}
    ))  # fmt: skip
    config = world.root / "stockade.host.toml"
    config.write_text(f'format = "stockade.host/1"\n\n[host]\nadmin_policy_dir = "{admin}"\n')

    async def body() -> tuple[list[str], Any]:
        server = StdioServerParameters(
            command=sys.executable, args=["-m", "sdk.cli", "--config", str(config), *serve_args(world)[2:]],
            env=cli_env(), cwd=str(world.root),
        )  # fmt: skip
        async with mcp.Client(server) as client:  # type: ignore[arg-type]
            tools = await client.list_tools()
            with pytest.raises(MCPError) as said:  # hidden: answered like an unknown tool
                await client.call_tool("echo.say", {"message": "capped"})
        return [t.name for t in tools.tools], said.value

    names, said = anyio.run(body)
    assert "echo.say" not in names and "echo.write" in names
    assert said.error.message == "Unknown tool: echo.say"
    denied = [r for r in served_records(world) if r["kind"] == "call.outcome" and r.get("tool") == "echo.say"]
    assert [r["error"]["code"] for r in denied] == ["POLICY_DENIED"]
    assert not any(r["kind"] == "call.outcome" and r.get("tool") == "echo.say" and r.get("ok")
                   for r in served_records(world))
