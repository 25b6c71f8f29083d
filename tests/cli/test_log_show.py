"""``stockade log show`` and ``log verify`` of a missing file.

The log is written by real calls through the CLI (real host, real audit chain).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from host.audit.key import PUBLIC_KEY_FILE
from host.audit.log import CHECKPOINT_KIND, AuditLog
from sdk.commands._logshow import _CHECKPOINT
from sdk.commands.log import PUBLIC_KEY_FILE as SHOWN_KEY_FILE
from tests.support.cli import ALICE_ARGS, Workspace, cli_env, echo_workspace, run_cli

INPUT = ("--input", '{"message": "hi"}')


def _calls(ws: Workspace) -> None:
    ok = ws.run("call", "echo.say@1.0.0", *ALICE_ARGS, *INPUT, *ws.host_args)
    assert ok.returncode == 0, ok.stderr
    ws.run("call", "echo.say@1.0.0", "--project", "p", "--subject", "bob", *INPUT, *ws.host_args)
    ws.run("call", "shell.exec@1.0.0", *ALICE_ARGS, "--input", "{}", *ws.host_args)


def test_log_show_prints_one_line_per_call_newest_last(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path)
    _calls(ws)
    proc = ws.run("log", "show", "--state-dir", str(ws.state))
    assert proc.returncode == 0, proc.stderr
    calls = [line.split("  ") for line in proc.stdout.splitlines() if "@" in line]
    assert [(c[1], c[2], c[4], c[5]) for c in calls] == [
        ("p/alice", "echo.say@1.0.0", "ok", "-"),
        ("p/bob", "echo.say@1.0.0", "refused", "POLICY_DENIED"),
        ("p/alice", "shell.exec@1.0.0", "refused", "TOOL_NOT_FOUND"),  # refused before the registry, audited
    ]
    assert calls[0][3] == "read" and calls[0][6].endswith("ms")
    assert calls[0][0].endswith("Z")


def test_log_show_filters_by_tool_principal_since_and_last(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path)
    _calls(ws)
    state = ("--state-dir", str(ws.state))

    def shown(*args: str) -> list[str]:
        proc = ws.run("log", "show", *state, *args)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.splitlines()

    assert len(shown("--tool", "echo.say")) == 2
    assert len(shown("--tool", "echo.say@2.0.0")) == 0
    assert [line.split("  ")[1] for line in shown("--principal", "p/bob")] == ["p/bob"]
    assert len(shown("--principal", "alice")) == 2
    assert len(shown("--since", "1h")) == len(shown())
    assert shown("--since", "2999-01-01T00:00:00Z") == []
    assert len(shown("--tool", "echo.say", "--last", "1")) == 1
    bad = ws.run("log", "show", *state, "--since", "yesterday")
    assert bad.returncode == 2 and "ISO time" in bad.stderr


def test_log_show_json_prints_the_records_themselves(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path)
    _calls(ws)
    proc = ws.run("log", "show", "--state-dir", str(ws.state), "--json", "--tool", "shell.exec")
    [record] = [json.loads(line) for line in proc.stdout.splitlines()]
    assert record["error"]["code"] == "TOOL_NOT_FOUND" and record["subject"] == "alice"
    assert len(record["hash"]) == 64


def test_log_show_follow_prints_records_appended_later(tmp_path: Path) -> None:
    log_path = tmp_path / "audit.log"
    with AuditLog(log_path) as log:
        log.append("call.outcome", {"tool": "a.b", "version": "1.0.0", "project": "p", "subject": "s", "ok": True})
    proc = subprocess.Popen(
        [sys.executable, "-m", "sdk.cli", "log", "show", str(log_path), "--follow"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(),
        stdin=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        assert "a.b@1.0.0" in proc.stdout.readline()
        with AuditLog(log_path) as log:
            log.append("call.outcome", {"tool": "c.d", "version": "2.0.0", "project": "p", "subject": "s",
                                        "ok": False, "error": {"code": "RATE_LIMITED", "message": "x"}})
        later = proc.stdout.readline()  # blocks until the follower prints it
        assert "c.d@2.0.0" in later and "RATE_LIMITED" in later
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_log_show_warns_about_a_line_that_is_not_a_record(tmp_path: Path) -> None:
    log_path = tmp_path / "audit.log"
    log_path.write_text('{"kind": "call.outcome", "tool": "a.b", "ok": true}\nnot json\n')
    proc = run_cli("log", "show", str(log_path), cwd=tmp_path)
    assert proc.returncode == 1
    assert "a.b@?" in proc.stdout and "line 2 is not a JSON record" in proc.stderr


def test_log_commands_on_a_missing_file_say_not_found_never_tampering(tmp_path: Path) -> None:
    for argv in (("log", "verify", "audit.lgo"), ("log", "show", "audit.lgo")):
        proc = run_cli(*argv, cwd=tmp_path)
        assert proc.returncode == 1
        assert proc.stderr.startswith("error: AUDIT_LOG_NOT_FOUND: audit.lgo not found"), proc.stderr
        assert "BROKEN" not in proc.stderr and "investigate" not in proc.stderr
    default = run_cli("log", "show", "--state-dir", str(tmp_path / "state"), cwd=tmp_path)
    assert "AUDIT_LOG_NOT_FOUND" in default.stderr and str(tmp_path / "state" / "audit.log") in default.stderr


def test_log_show_hides_the_logs_own_checkpoints_unless_all(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path)
    _calls(ws)  # each CLI host closes its log with a signed checkpoint
    records = [json.loads(line) for line in (ws.state / "audit.log").read_text().splitlines()]
    assert any(r["kind"] == "audit.checkpoint" for r in records)
    shown = ws.run("log", "show", "--state-dir", str(ws.state)).stdout
    assert "audit.checkpoint" not in shown
    everything = ws.run("log", "show", "--state-dir", str(ws.state), "--all").stdout
    assert "audit.checkpoint" in everything



def test_log_show_folds_one_generations_repeated_acceptance(tmp_path: Path) -> None:
    # Every CLI invocation opens a host, and each recorded lock.accepted: the log doubled.
    ws = echo_workspace(tmp_path)
    _calls(ws)  # three invocations, one generation
    records = [json.loads(line) for line in (ws.state / "audit.log").read_text().splitlines()]
    assert [r["kind"] for r in records].count("lock.accepted") == 3  # all kept in the log itself
    shown = ws.run("log", "show", "--state-dir", str(ws.state)).stdout.splitlines()
    accepted = [line for line in shown if "lock.accepted" in line]
    assert len(accepted) == 1 and "generation 1 (recorded 3 times" in accepted[0]
    as_json = ws.run("log", "show", "--state-dir", str(ws.state), "--json").stdout.splitlines()
    assert sum('"lock.accepted"' in line for line in as_json) == 3  # programs see every record


def test_log_show_names_the_tools_of_an_mcp_drift_record(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    with AuditLog(log) as audit:
        audit.append("mcp.drift", {"source": "files", "drift": [
            {"source": "files", "tool": "read_file", "change": "changed", "fields": ["description"]},
            {"source": "files", "tool": "delete_all", "change": "added", "fields": []},
        ]})  # fmt: skip
    shown = run_cli("log", "show", str(log), cwd=tmp_path).stdout
    assert "files: read_file (changed), delete_all (added)" in shown


def test_log_commands_name_the_audit_key_file_as_the_host_does() -> None:
    assert SHOWN_KEY_FILE == PUBLIC_KEY_FILE and _CHECKPOINT == CHECKPOINT_KIND
