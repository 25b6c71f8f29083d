"""``stockade scopes grant|list|show|revoke`` and ``policy explain``'s scope line, as an
operator runs them (real processes, the echo lock, the approver key of the config file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from host.approverkey import ApproverKey
from host.audit import AuditLog
from host.errors import ApprovalRequired
from host.scopes import ScopeUse
from host.signing import TrustedKeys
from host.store import LocalStore
from tests.support.approver import write_approver_config
from tests.support.cli import echo_workspace, json_out
from tests.support.hosts import echo_tool

WRITE = echo_tool(name="echo.write", effect="write", risk="medium", permissions=["echo.write"])
PERMS = ("tool.call:echo.write", "echo.write")


def test_an_operator_grants_lists_shows_and_revokes_a_scope(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path, tools=[WRITE], allow=PERMS)
    pem = write_approver_config(tmp_path)
    granted = ws.run("scopes", "grant", "p", "alice", "--tool", "echo.write@1.0.0", "--max-calls", "2",
                     "--for", "2h", "--job", "nightly", "--json", *ws.host_args)
    assert granted.returncode == 0, granted.stderr
    signed = json_out(granted)
    scope_id = signed["scope"]["id"]
    assert signed["scope"]["tools"][0]["max_calls"] == 2 and signed["scope"]["issued_by"].startswith("cli:")
    assert signed["scope"]["not_after"] - signed["scope"]["issued_at"] == 7200

    listed = json_out(ws.run("scopes", "list", "--json", *ws.host_args))
    assert [(s["scope"]["id"], s["status"], s["used_total"]) for s in listed] == [(scope_id, "active", 0)]

    explained = ws.run("policy", "explain", "p", "alice", "echo.write@1.0.0", *ws.host_args)
    assert f"5 scope {scope_id} (job nightly): active, 2 call(s) left" in explained.stdout, explained.stdout

    revoked = ws.run("scopes", "revoke", scope_id, *ws.host_args)
    assert revoked.returncode == 0 and f"{scope_id}: revoked" in revoked.stdout
    shown = json_out(ws.run("scopes", "show", scope_id, "--json", *ws.host_args))
    assert shown["status"] == "revoked" and shown["revoked_by"].startswith("cli:")

    key = ApproverKey.load(pem)
    trusted = TrustedKeys({key.key_id: key.public_bytes})
    kinds = [json.loads(line)["kind"] for line in (ws.state / "audit.log").read_text().splitlines()]
    assert kinds.count("scope.issued") == 1 and kinds.count("scope.revoked") == 1
    with LocalStore(ws.state, audit=AuditLog(tmp_path / "h.log"), owns_audit=True,
                    trusted_approver_keys=trusted) as store:
        state = store.scopes.get(scope_id)
        assert state.signed.key_id == key.key_id
        use = ScopeUse(scope_id=scope_id, project="p", subject="alice", session="s1", tool="echo.write",
                       version="1.0.0", identity=state.signed.scope.tools[0].identity,
                       input_sha256="0" * 64, action_digest="0" * 64)
        with pytest.raises(ApprovalRequired) as caught:
            store.scopes.redeem(use)
        assert caught.value.details["reason"] == "scope_revoked"


def test_a_grant_that_would_never_end_or_names_an_unknown_tool_is_refused(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path, tools=[WRITE], allow=PERMS)
    write_approver_config(tmp_path)
    base = ("scopes", "grant", "p", "alice", "--job", "nightly", *ws.host_args)
    too_long = ws.run(*base, "--tool", "echo.write@1.0.0", "--max-calls", "1", "--for", "25h")
    assert too_long.returncode == 1 and "SCOPE_INVALID" in too_long.stderr
    zero = ws.run(*base, "--tool", "echo.write@1.0.0", "--max-calls", "0", "--for", "1h")
    assert zero.returncode == 1 and "SCOPE_INVALID" in zero.stderr
    unknown = ws.run(*base, "--tool", "echo.nope@1.0.0", "--max-calls", "1", "--for", "1h")
    assert unknown.returncode == 1 and "SCOPE_INVALID" in unknown.stderr and "echo.nope" in unknown.stderr
    inf = ws.run(*base, "--tool", "echo.write@1.0.0", "--max-calls", "1", "--for", "inf")
    assert inf.returncode == 2
    assert json_out(ws.run("scopes", "list", "--json", *ws.host_args)) == []


def test_a_grant_without_an_approver_key_is_refused(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path, tools=[WRITE], allow=PERMS)
    refused = ws.run("scopes", "grant", "p", "alice", "--tool", "echo.write@1.0.0", "--max-calls", "1",
                     "--for", "1h", "--job", "nightly", *ws.host_args)
    assert refused.returncode == 1 and "APPROVER_KEY_MISSING" in refused.stderr

