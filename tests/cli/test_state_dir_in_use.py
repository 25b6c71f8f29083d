"""``stockade call`` while ``stockade serve`` holds the same local state dir.

It answered ``AUDIT_UNAVAILABLE … Free disk space or fix permissions``; the manual promises
``STORE_UNAVAILABLE`` for a second host process on one local state dir, with the way to
share state (the PostgreSQL store). A real server subprocess; a real second process.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.support.cli import cli_env, echo_workspace

ALICE = ("--project", "p", "--subject", "alice")


def test_call_beside_a_running_server_says_the_state_dir_is_in_use(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path)
    with subprocess.Popen(
        [sys.executable, "-m", "sdk.cli", "serve", *ws.host_args, *ALICE], cwd=ws.root, env=cli_env(),
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    ) as server:  # fmt: skip
        try:
            assert server.stderr is not None
            deadline = time.monotonic() + 120
            for line in server.stderr:  # serving once it says ready
                if "ready" in line or time.monotonic() > deadline:
                    break
            proc = ws.run("call", "echo.say@1.0.0", "--input", '{"message": "hi"}', *ws.host_args, *ALICE)
        finally:
            server.terminate()
            server.wait(timeout=30)
    assert proc.returncode == 1, proc.stderr
    assert "STORE_UNAVAILABLE" in proc.stderr and "in use by another host process" in proc.stderr
    assert "postgresql" in proc.stderr.lower() and "Free disk space" not in proc.stderr
    after = ws.run("call", "echo.say@1.0.0", "--input", '{"message": "hi"}', *ws.host_args, *ALICE)
    assert after.returncode == 0, after.stderr  # the state dir is free again once the server ends



def test_second_serve_on_one_local_state_dir_refused_and_pointed_at_postgres(tmp_path: Path) -> None:
    """Scaling ``stockade serve`` out by starting a second process on the same local
    state dir would split rate limits, grants and the audit chain: it is refused before
    it serves anything, and the message names the store that does scale (PostgreSQL)."""
    from host.audit.log import AuditLog  # noqa: PLC0415 - the first host process's own store
    from host.store.local import LocalStore  # noqa: PLC0415

    ws = echo_workspace(tmp_path)
    with LocalStore(ws.state, audit=AuditLog(ws.state / "audit.log"), owns_audit=True):
        proc = subprocess.run(
            [sys.executable, "-m", "sdk.cli", "serve", *ws.host_args, *ALICE], cwd=ws.root, env=cli_env(),
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "STORE_UNAVAILABLE" in proc.stderr and "in use by another host process" in proc.stderr
    assert "--store postgresql://" in proc.stderr and "docs/operators.md" in proc.stderr
    assert "ready" not in proc.stderr  # it never started serving
