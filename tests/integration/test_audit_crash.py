"""kill -9 of a host in a loop of calls: what the audit log promises after a crash.

A real subprocess opens a real Host (WAT echo component, real policy, real audit log on
disk) and calls a read tool and a write tool in turn, printing each returned audit id.
The test kills it with SIGKILL after 40 calls returned, then checks:

- every call that returned has its outcome record in the log (``full``: it was on disk
  before the call returned; ``flush``: it was written to the OS, which a process crash
  cannot lose);
- the chain verifies (with the audit key) and the report names the unsigned tail after the
  last checkpoint instead of claiming a clean close;
- a torn last line (a crash of the machine mid-write, simulated by appending half a
  record) is reported by ``verify`` and ``stockade log verify`` and refuses a reopen: it is
  never silently dropped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from host.audit.key import PUBLIC_KEY_FILE, load_public_keys
from host.audit.log import AuditLog, verify
from host.errors import AuditUnavailable
from tests.support.cli import cli_env, run_cli
from tests.support.plugins import REPO_ROOT

CALLS_BEFORE_KILL = 40

CHILD = """
import sys
from pathlib import Path
from host import HostConfig
from tests.support.hosts import ALICE, echo_tool, make_host

root, mode = Path(sys.argv[1]), sys.argv[2]
tools = [echo_tool(), echo_tool(name="echo.write", effect="write", risk="medium", permissions=["echo.write"])]
fx = make_host(
    root, tools=tools, allow=("tool.call:echo.say", "echo.use", "tool.call:echo.write", "echo.write"),
    config=HostConfig(state_dir=root / "state", audit_durability=mode, audit_checkpoint_every=7),
)
fx.host.grants.grant(ALICE.key, "s1", "echo.write")
requests = [fx.request(), fx.request(tool="echo.write")]
n = 0
while True:
    result = fx.host.call(requests[n % 2])
    assert result.ok, result.error
    print(result.audit_id, flush=True)
    n += 1
"""


def run_until_killed(root: Path, mode: str) -> list[str]:
    env = {**cli_env(), "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root), mode],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    returned: list[str] = []
    try:
        assert proc.stdout is not None
        while len(returned) < CALLS_BEFORE_KILL:
            line = proc.stdout.readline()
            if not line:
                raise AssertionError(f"the child died: {proc.stderr.read() if proc.stderr else ''}")
            returned.append(line.strip())
        os.kill(proc.pid, signal.SIGKILL)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    return returned + rest.split()  # ids printed before the kill landed returned too


@pytest.mark.parametrize("mode", ["full", "flush"])
def test_kill_9_in_a_loop_of_calls_loses_no_returned_record(tmp_path: Path, mode: str) -> None:
    returned = run_until_killed(tmp_path, mode)
    log = tmp_path / "audit.log"
    records = [json.loads(line) for line in log.read_bytes().splitlines()]
    outcomes = {r["hash"] for r in records if r["kind"] == "call.outcome"}
    assert set(returned) <= outcomes  # every call that returned is on record
    intents = [r for r in records if r["kind"] == "call.intent"]
    assert len(intents) >= len(returned) // 2  # every write call's intent came first
    keys = load_public_keys([tmp_path / "state" / PUBLIC_KEY_FILE])
    report = verify(log, keys=keys)
    assert report.ok, report.reason
    assert report.checkpoints >= 1 and not report.closed  # a crash, not a clean close: reported


@pytest.mark.parametrize("mode", ["full", "flush"])
def test_torn_last_line_after_a_crash_is_reported_never_dropped(tmp_path: Path, mode: str) -> None:
    run_until_killed(tmp_path, mode)
    log = tmp_path / "audit.log"
    intact = verify(log)
    whole = log.read_bytes()
    last = whole.splitlines(keepends=True)[-1]
    log.write_bytes(whole + last[: len(last) // 2])  # the machine died mid-write
    report = verify(log)
    assert not report.ok and report.first_broken == intact.records + 1
    assert "torn write" in report.reason and report.records == intact.records
    with pytest.raises(AuditUnavailable, match="incomplete"):
        AuditLog(log)  # a host will not write after it until an operator looked
    proc = run_cli("log", "verify", str(log), cwd=tmp_path)
    assert proc.returncode == 1
    assert f"AUDIT_LOG_BROKEN: record {intact.records + 1}" in proc.stderr and "torn write" in proc.stderr
