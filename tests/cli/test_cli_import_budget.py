"""The import budget of the commands people run most: ``call`` and ``inspect``.

Start-up time is measured by ``tests/benchmarks/bench_cli_startup.py`` (no timing
assertions here). These tests pin its cause: a list of modules each command must NOT
import for a lock whose package declares no network and which pins no MCP source —
httpx2 and the egress transport load with the first egress session, asyncio only for
``Host.acall`` and ``serve``, the MCP client stack (bubblewrap, seccomp, stdio) only for a
lock with sources, the host tools only for a host with workspaces, rich's console only
when there is a terminal to draw on, and wasmtime not at all for ``inspect --no-imports``.
A module that slips back into one of these paths fails here with the chain to look at
(``python -X importtime``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import ALICE_ARGS, REPO, cli_env, echo_workspace

NO_NETWORK = ("httpx2", "httpcore2", "ssl", "host.egress.transport")
NO_MCP = ("host.mcpsource.source", "host.mcpsource.stdio", "host.sandbox", "pyseccomp")
NO_HOST_TOOLS = ("host.tools.exec", "host.tools.fs")
NO_ASYNC = ("asyncio",)


def run_imports(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``stockade ARGS`` under ``-X importtime``: the process and every module it imported."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "sdk.cli", *args],
        cwd=cwd, capture_output=True, text=True, env=cli_env(), timeout=120, check=False,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    names = {
        line.rsplit("|", 1)[1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    return proc, names


def forbidden(names: set[str], banned: tuple[str, ...]) -> list[str]:
    """The imported modules that are, or are under, one of ``banned``."""
    return sorted(n for n in names if any(n == b or n.startswith(b + ".") for b in banned))


def test_call_of_a_tool_without_network_imports_no_egress_async_mcp_or_rich(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path)
    proc, names = run_imports(
        "call", "echo.say@1.0.0", "--input", '{"message": "hi"}', *ALICE_ARGS, *ws.host_args, cwd=ws.root
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert '"hi"' in proc.stdout  # the call really ran: the budget is the real path's
    assert "wasmtime" in names  # the list is read (a broken parse would pass every check)
    banned = NO_NETWORK + NO_MCP + NO_HOST_TOOLS + NO_ASYNC + ("rich",)
    assert forbidden(names, banned) == []


@pytest.mark.parametrize(
    ("flags", "extra"), [((), ()), (("--no-imports",), ("wasmtime", "host.runtime.runtime"))],
    ids=["with-imports", "no-imports"],
)  # fmt: skip
def test_inspect_of_a_lock_without_sources_imports_no_egress_async_mcp_or_host(
    tmp_path: Path, flags: tuple[str, ...], extra: tuple[str, ...]
) -> None:
    ws = echo_workspace(tmp_path)
    proc, names = run_imports("inspect", *flags, str(ws.lock), cwd=ws.root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "echo.say" in proc.stdout
    banned = NO_NETWORK + NO_MCP + NO_HOST_TOOLS + NO_ASYNC + ("host.call.host", *extra)
    assert forbidden(names, banned) == []


@pytest.mark.parametrize(
    ("module", "banned"),
    [
        ("host.runtime", ("wasmtime",)),
        ("host.egress.session", ("httpx2", "httpcore2")),
        ("host.mcpsource.hosting", ("host.mcpsource.source", "host.sandbox", "wasmtime")),
        ("host.tools", ("host.tools.exec", "host.sandbox")),
        ("host.call.host", ("asyncio", "httpx2", "host.mcpsource.source")),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_package_imports_defer_what_only_some_hosts_use(module: str, banned: tuple[str, ...]) -> None:
    code = f"import sys, {module}; print('\\n'.join(sys.modules))"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, env=cli_env(),
        timeout=60, check=True,
    )  # fmt: skip
    assert forbidden(set(proc.stdout.split()), banned) == []
