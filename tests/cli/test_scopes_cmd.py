"""``stockade scopes grant|list|show|revoke`` and ``policy explain``'s scope line, as an
operator runs them (real processes, the echo lock, the approver key of the config file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from host.approverkey import ApproverKey
from host.audit.log import AuditLog
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



def test_a_cli_scope_covers_a_host_tool_as_the_host_runs_it(tmp_path: Path) -> None:
    """The CLI builds the registry and bindings as the Host does (package, MCP-source and
    ``[[workspace]]`` host tools): a scope it grants for ``fs.edit_file`` runs an edit."""
    from host import FilePolicyEngine, Host, HostConfig  # noqa: PLC0415
    from host.config import WorkspaceGrant  # noqa: PLC0415
    from host.types import CallRequest, Principal  # noqa: PLC0415
    from tests.support.workspace import FS_PERMISSIONS  # noqa: PLC0415

    ws = echo_workspace(tmp_path, allow=FS_PERMISSIONS)
    (tmp_path / "ws").mkdir()
    target = tmp_path / "ws" / "notes.txt"
    target.write_text("old\n")
    write_approver_config(tmp_path / "home")
    (tmp_path / "stockade.host.toml").write_text(
        'format = "stockade.host/1"\n[host]\nstate_dir = "state"\nlock = "stockade.lock"\n'
        'approver_key = "home/approver.pem"\n[[workspace]]\nroot = "ws"\nproject = "p"\n'
    )
    granted = ws.run("scopes", "grant", "p", "alice", "--tool", "fs.edit_file@1.0.0", "--max-calls", "1",
                     "--for", "10m", "--job", "refactor", "--json")
    assert granted.returncode == 0, granted.stderr
    scope_id = json_out(granted)["scope"]["id"]
    config = HostConfig(state_dir=ws.state, approver_key_file=tmp_path / "home" / "approver.pem",
                        workspaces=(WorkspaceGrant(root=tmp_path / "ws", project="p"),))
    edit = CallRequest(principal=Principal(project="p", subject="alice"), session="job", tool="fs.edit_file",
                       version="1.0.0", input={"path": "notes.txt", "old_text": "old", "new_text": "new"})
    with Host.open(ws.lock, config=config, secrets=None, policy=FilePolicyEngine(ws.state / "policy.json"),
                   audit=ws.state / "audit.log") as host:
        result = host.call(edit, scope=scope_id)
        assert result.ok, result.error
        again = host.call(edit.model_copy(update={"input": {"path": "notes.txt", "old_text": "new",
                                                            "new_text": "newer"}}), scope=scope_id)
    assert target.read_text() == "new\n"
    assert again.error is not None and again.error.details["reason"] == "scope_exhausted"
