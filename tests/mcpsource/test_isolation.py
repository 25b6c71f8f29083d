"""What a stdio MCP server gets from the host, checked from inside the process (issue 15 item 4)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from tests.mcpsource.conftest import McpWorld, request


def test_server_sees_only_declared_env_private_cwd_own_group_and_limits(world: McpWorld) -> None:
    os.environ["STOCKADE_HOST_ONLY_SECRET"] = "must-not-leak"
    try:
        host = world.open()
        result = host.call(request("test.whoami"))
    finally:
        del os.environ["STOCKADE_HOST_ONLY_SECRET"]
    assert result.ok, result.error
    info = json.loads(result.output["text"])
    assert info["env"] == ["API_TOKEN", "LANG"]
    workdir = world.root / "state" / "mcp" / "test" / "work"
    assert Path(info["cwd"]) == workdir.resolve()
    assert stat.S_IMODE(workdir.stat().st_mode) == 0o700
    assert info["pgid"] == info["pid"] == info["sid"]
    assert info["pgid"] != os.getpgid(0)
    assert (info["nofile"], info["core"]) == (256, 0)


def test_host_descriptors_are_not_inherited(world: McpWorld, tmp_path: Path) -> None:
    sentinel = tmp_path / "host-private.txt"
    sentinel.write_text("host only")
    fd = os.open(sentinel, os.O_RDONLY)
    os.set_inheritable(fd, True)
    try:
        host = world.open()
        pid = host._mcp["test"]._conn.pid  # type: ignore[union-attr]
        targets = [os.readlink(f"/proc/{pid}/fd/{n}") for n in os.listdir(f"/proc/{pid}/fd")]
    finally:
        os.close(fd)
    assert str(sentinel) not in targets
    assert str(world.audit_path) not in targets


def test_server_process_group_is_killed_with_the_host(world: McpWorld) -> None:
    host = world.open()
    pid = host._mcp["test"]._conn.pid  # type: ignore[union-attr]
    host.close()
    assert not Path(f"/proc/{pid}").exists() or _zombie(pid)


def _zombie(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
