"""``stockade policy``: an operator builds the policy file without writing Python."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from host.formats.hostfile import render_host_file
from host.policy.engine import FilePolicyEngine, Verdict
from host.types import Principal
from tests.support.cli import echo_workspace


def stockade(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sdk.cli", *args], check=False, capture_output=True, text=True, timeout=60
    )


def test_policy_round_trip_grants_exactly_what_was_written(tmp_path: Path) -> None:
    state = ["--state-dir", str(tmp_path)]
    assert stockade("policy", "init", *state).returncode == 0
    assert stockade("policy", "init", *state).returncode == 1  # never overwritten
    done = stockade("policy", "role", "agent", "--allow", "tool.call:t.read", "--ask", "tool.call:t.write", *state)
    assert done.returncode == 0, done.stderr
    assert stockade("policy", "grant", "p", "alice", "agent", *state).returncode == 0
    engine = FilePolicyEngine(tmp_path / "policy.json")
    alice = Principal(project="p", subject="alice")
    assert engine.authorize(alice, "p", "tool.call:t.read").verdict is Verdict.ALLOW
    assert engine.authorize(alice, "p", "tool.call:t.write").verdict is Verdict.REQUIRE_APPROVAL
    assert engine.authorize(alice, "p", "tool.call:*").verdict is Verdict.DENY
    shown = stockade("policy", "show", "--json", *state)
    assert json.loads(shown.stdout)["bindings"] == {"p": {"alice": ["agent"]}}
    revoked = stockade("policy", "revoke", "p", "alice", "agent", "--json", *state)
    assert json.loads(revoked.stdout)["role_binding_version"] >= 2
    assert engine.authorize(alice, "p", "tool.call:t.read").verdict is Verdict.DENY


def test_policy_edit_without_file_fails_with_a_hint(tmp_path: Path) -> None:
    result = stockade("policy", "grant", "p", "alice", "agent", "--state-dir", str(tmp_path))
    assert result.returncode == 1
    assert "POLICY_MISSING" in result.stderr and "policy init" in result.stderr


def test_grant_of_unknown_role_refused(tmp_path: Path) -> None:
    stockade("policy", "init", "--state-dir", str(tmp_path))
    result = stockade("policy", "grant", "p", "alice", "nosuchrole", "--state-dir", str(tmp_path))
    assert result.returncode == 1
    assert "POLICY" in result.stderr


def test_explain_under_a_host_file_without_a_managed_dir_says_none(tmp_path: Path) -> None:
    # A host config file without admin_policy_dir printed "2 managed cap: allow  (None)".
    ws = echo_workspace(tmp_path)
    (ws.root / "stockade.host.toml").write_text(
        render_host_file(state_dir="state", lock="stockade.lock", trusted_keys=None, require_signatures=False)
    )
    proc = ws.run("policy", "explain", "p", "alice", "echo.say@1.0.0")
    assert proc.returncode == 0, proc.stderr
    assert "2 managed cap: allow  (none)" in proc.stdout and "None" not in proc.stdout
    shown = ws.run("policy", "explain", "p", "alice", "echo.say@1.0.0", "--json")
    assert json.loads(shown.stdout)["managed_cap"]["dir"] is None
