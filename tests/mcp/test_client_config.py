"""``stockade serve --print-client-config``, and the refusals that replace a silent empty server.

The printed entry is launched the way a desktop client launches it: its command and args
only, the SDK's minimal inherited environment with a PATH that lacks the virtualenv, from
another working directory, driven by the official SDK client.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import mcp
import pytest
from mcp import StdioServerParameters

from host.formats.hostfile import render_host_file
from tests.mcp.conftest import World
from tests.support.bundles import write_lock
from tests.support.cli import REPO, cli_env, run_cli

ALICE = ("--project", "p", "--subject", "alice")


def _host_file(world: World) -> None:
    text = render_host_file(state_dir="state", lock="stockade.lock", trusted_keys=None, require_signatures=False)
    (world.root / "stockade.host.toml").write_text(text)


def _printed(world: World, *extra: str) -> dict[str, object]:
    proc = run_cli("serve", "--print-client-config", *ALICE, *extra, cwd=world.root)
    assert proc.returncode == 0, proc.stderr
    assert "paste this into" in proc.stderr
    printed: dict[str, object] = json.loads(proc.stdout)
    return printed


def test_printed_entry_serves_from_another_directory_with_a_desktop_environment(world: World, tmp_path: Path) -> None:
    _host_file(world)
    entry = _printed(world)["mcpServers"]["stockade"]  # type: ignore[index]
    assert Path(entry["command"]).is_absolute()
    config = entry["args"][entry["args"].index("--config") + 1]
    assert config == str(world.root / "stockade.host.toml")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # PYTHONPATH only makes the command import this checkout; PATH is a desktop app's.
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "STOCKADE_HOME": str(tmp_path / "no-home")}
    params = StdioServerParameters(command=entry["command"], args=entry["args"], env=env, cwd=str(elsewhere))

    async def body() -> None:
        async with mcp.Client(params) as client:
            tools = await client.list_tools()
            said = await client.call_tool("echo.say", {"message": "from a desktop"})
        assert "echo.say" in [t.name for t in tools.tools]
        assert said.structured_content == {"message": "from a desktop"}

    anyio.run(body)


@pytest.mark.parametrize(("client", "key"), [("vscode", "servers"), ("cursor", "mcpServers")])
def test_printed_entry_in_each_clients_shape(world: World, client: str, key: str) -> None:
    _host_file(world)
    printed = _printed(world, "--client", client)
    entry = printed[key]["stockade"]  # type: ignore[index]
    assert entry["args"][:2] == ["serve", "--config"] or entry["args"][2:4] == ["serve", "--config"]
    assert entry["args"][-4:] == list(ALICE)
    assert (entry.get("type") == "stdio") is (client == "vscode")


def test_printed_entry_makes_given_paths_absolute(world: World) -> None:
    proc = run_cli("serve", "--print-client-config", "--lock", "stockade.lock", "--state-dir", "state", *ALICE,
                   cwd=world.root, env=cli_env(STOCKADE_HOME=str(world.root / "no-home")))
    assert proc.returncode == 0, proc.stderr
    args = json.loads(proc.stdout)["mcpServers"]["stockade"]["args"]
    assert args[args.index("--lock") + 1] == str(world.root / "stockade.lock")
    assert args[args.index("--state-dir") + 1] == str(world.root / "state")


def test_serve_without_a_config_file_or_lock_refused_with_exit_2(tmp_path: Path) -> None:
    env = cli_env(STOCKADE_HOME=str(tmp_path / "home"))
    env.pop("STOCKADE_CONFIG", None)
    for extra in ((), ("--print-client-config",)):
        proc = run_cli("serve", *extra, *ALICE, cwd=tmp_path, env=env)
        assert proc.returncode == 2 and "CONFIG_NOT_FOUND" in proc.stderr, proc.stderr
        assert "--config" in proc.stderr and proc.stdout == ""


def test_serve_refuses_a_principal_granted_no_tool_with_exit_2(world: World) -> None:
    proc = run_cli("serve", "--lock", str(world.lock), "--state-dir", str(world.state),
                   "--project", "p", "--subject", "nobody", cwd=world.root)
    assert proc.returncode == 2 and "NO_TOOLS_SERVED" in proc.stderr, proc.stderr
    assert "grants p nobody none of the lock's" in proc.stderr and "stockade policy grant-tool p nobody" in proc.stderr
    assert proc.stdout == ""  # no MCP was spoken


def test_serve_refuses_a_lock_without_tools_with_exit_2(world: World) -> None:
    empty = write_lock(world.root / "empty.lock", [])
    proc = run_cli("serve", "--lock", str(empty), "--state-dir", str(world.state), *ALICE, cwd=world.root)
    assert proc.returncode == 2 and "NO_TOOLS_SERVED" in proc.stderr and "has no tools" in proc.stderr, proc.stderr

