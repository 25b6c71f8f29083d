"""What a stdio MCP server gets from the host, checked from inside the process."""

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


_HOST_SCRIPT = """
import sys
from pathlib import Path
from host.mcpsource.source import start_server
from tests.mcpsource.conftest import declaration
root = Path(sys.argv[1])
decl = declaration(root).model_copy(update={"secrets": (), "secrets_scope": None})
conn, _ = start_server(decl, state_dir=root / "state", secrets=None)
print(conn.pid, flush=True)
sys.stdin.read()  # until the test kills this host
"""


def test_server_dies_when_the_host_is_sigkilled(tmp_path: Path) -> None:
    import select  # noqa: PLC0415
    import signal  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    from tests.support.cli import cli_env  # noqa: PLC0415

    decl_root = tmp_path
    (decl_root / "behaviour.json").write_text('{"linger": true}')  # survives EOF on stdin
    with subprocess.Popen([sys.executable, "-c", _HOST_SCRIPT, str(decl_root)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, env=cli_env(), cwd=Path(__file__).parents[2]) as host:
        assert host.stdout is not None
        server_pid = int(host.stdout.readline())
        pidfd = os.pidfd_open(server_pid)
        try:
            host.send_signal(signal.SIGKILL)  # no atexit, no Host.close: only the kernel can help
            host.wait(timeout=30)
            ready, _, _ = select.select([pidfd], [], [], 20)  # readable when the server has exited
            assert ready == [pidfd]
        finally:
            os.close(pidfd)
