"""A server started after ``lock verify`` or ``init`` starts warm, and says what it compiles.

Cold ``stockade serve`` compiled every package before answering ``initialize`` without a
word for 31-42 s (MCP Inspector gives up after 15 s). Each test uses a fresh per-user cache
(``$STOCKADE_CACHE_DIR``); the echo component compiles in milliseconds, the code path is
the one a Python plugin takes.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import cli_env, echo_workspace, run_cli


def _env(tmp_path: Path) -> dict[str, str]:
    return cli_env(STOCKADE_CACHE_DIR=str(tmp_path / "cache"), STOCKADE_HOME=str(tmp_path / "home"))


def _serve_once(root: Path, env: dict[str, str], *host: str) -> str:
    """Start ``stockade serve`` on stdio with stdin at EOF: it opens the host, then ends."""
    proc = run_cli("serve", *host, "--project", "p", "--subject", "alice", cwd=root, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def test_cold_serve_prints_a_line_per_package_it_compiles(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path)
    cold = _serve_once(ws.root, _env(tmp_path), *ws.host_args)
    assert "stockade serve: compiling package echo (1 of 1;" in cold
    warm = _serve_once(ws.root, _env(tmp_path), *ws.host_args)
    assert "compiling package echo" not in warm
    assert "stockade serve: package echo loaded from the artifact cache (1 of 1)" in warm


def test_lock_verify_compiles_into_the_cache_serve_uses(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path)
    env = _env(tmp_path)
    verified = run_cli("lock", "verify", "--lock", str(ws.lock), cwd=ws.root, env=env)
    assert verified.returncode == 0, verified.stderr
    assert "compiling package echo (1 of 1;" in verified.stderr and "compiled package echo in" in verified.stderr
    again = run_cli("lock", "verify", "--lock", str(ws.lock), cwd=ws.root, env=env)
    assert "compiling" not in again.stderr  # already there: no line, no work
    served = _serve_once(ws.root, env, *ws.host_args)
    assert "compiling package echo" not in served and "loaded from the artifact cache" in served


def test_init_compiles_into_the_cache_serve_uses(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path)
    env = _env(tmp_path)
    init = run_cli("init", "--state-dir", "state2", cwd=ws.root, env=env)
    assert init.returncode == 0, init.stderr
    assert "compiling package echo" in init.stderr
    (ws.root / "state2" / "policy.json").write_bytes((ws.state / "policy.json").read_bytes())
    served = _serve_once(ws.root, env)  # the config init wrote: no --lock, no --state-dir
    assert "compiling package echo" not in served and "loaded from the artifact cache" in served


def test_lock_add_says_it_compiles_a_new_component(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path)
    (ws.root / "stockade.lock").unlink()
    added = run_cli("lock", "add", "bundles/echo", cwd=ws.root, env=_env(tmp_path))
    assert added.returncode == 0, added.stderr
    assert "compiling package echo (1 of 1;" in added.stderr
    served = _serve_once(ws.root, _env(tmp_path), *ws.host_args)
    assert "compiling package echo" not in served

