"""The operator's path from a signed bundle to a first call (items 1 and 2).

Every hint is tested the way a person uses it: the command it suggests is run exactly as
printed (parsed from between the backticks), and the refusal it answered goes away.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from host.policy.toolpolicy import ToolPolicyStore, ToolSelector
from tests.support.bundles import write_bundle
from tests.support.cli import ALICE_ARGS, Workspace, cli_env, echo_workspace, json_out, run_cli
from tests.support.hosts import echo_manifest, echo_tool
from tests.support.wat import echo_component

INPUT = ("--input", '{"message": "hi"}')


def suggested(proc: subprocess.CompletedProcess[str]) -> list[list[str]]:
    """The ``stockade ...`` commands a refusal's hint suggests, as argv lists (without 'stockade')."""
    hint = proc.stderr.split("what to do:", 1)[1]
    commands = re.findall(r"`(stockade [^`]+)`", hint)
    assert commands, proc.stderr
    return [shlex.split(command)[1:] for command in commands]


def signed_workspace(root: Path, *, credentials: list[dict[str, object]] | None = None) -> Path:
    """An echo bundle, a signing key, a trusted keys file and a lock signed with the CLI."""
    http = {
        "allow": [{"scheme": "https", "host": "api.echo.example", "port": None, "path_prefix": "/v1",
                   "methods": ["GET"]}],
        "credentials": credentials or [],
        "max_request_bytes": 1024, "max_response_bytes": 1024, "timeout_ms": 1000,
    }
    module = echo_component()
    write_bundle(root / "bundles" / "echo", echo_manifest([echo_tool()], module, http=http), module)
    for argv in (
        ("keygen", "--out", "signing.pem", "--keys-file", "trusted-keys.json"),
        ("lock", "add", "bundles/echo", "--key", "signing.pem"),
    ):
        proc = run_cli(*argv, cwd=root)
        assert proc.returncode == 0, proc.stderr
    return root


def test_init_writes_config_policy_and_key_and_its_next_commands_reach_a_first_call(tmp_path: Path) -> None:
    root = signed_workspace(tmp_path)
    proc = run_cli("init", "--trusted-keys", "trusted-keys.json", "--project", "p", "--subject", "alice",
                   cwd=root)
    assert proc.returncode == 0, proc.stderr
    config = (root / "stockade.host.toml").read_text()
    assert 'trusted_keys = "trusted-keys.json"' in config and "require_signatures = true" in config
    assert (root / ".stockade" / "policy.json").is_file()
    assert (root / ".stockade" / "master.key").stat().st_mode & 0o777 == 0o600
    steps = [line.strip() for line in proc.stdout.split("next:", 1)[1].splitlines() if line.strip()]
    assert steps[0] == "stockade lock verify"
    assert steps[1] == "stockade policy grant-tool p alice echo.say@1.0.0 --role agent"
    assert steps[-1] == """stockade call echo.say@1.0.0 --project p --subject alice --input '{"message": "example"}'"""
    for step in steps:  # as written: no --trusted-keys, --state-dir or --lock needed
        done = run_cli(*shlex.split(step)[1:], cwd=root)
        assert done.returncode == 0, (step, done.stderr)
    assert json.loads(done.stdout) == {"message": "example"}  # the first call went through
    again = run_cli("init", cwd=root)
    assert again.returncode == 1 and "CONFIG_EXISTS" in again.stderr


def test_config_file_named_by_env_is_read_by_every_host_command(tmp_path: Path) -> None:
    root = signed_workspace(tmp_path)
    elsewhere = tmp_path / "ops" / "host.toml"
    env = cli_env(STOCKADE_CONFIG=str(elsewhere))
    made = run_cli("init", "--trusted-keys", str(root / "trusted-keys.json"), "--lock", "stockade.lock",
                   cwd=root, env=env)
    assert made.returncode == 0, made.stderr
    assert elsewhere.is_file()
    work = tmp_path / "somewhere-else"
    work.mkdir()
    assert run_cli("lock", "verify", cwd=work, env=env).returncode == 0
    grant = run_cli("policy", "grant-tool", "p", "alice", "echo.say@1.0.0", "--role", "agent", cwd=work, env=env)
    assert grant.returncode == 0, grant.stderr
    call = run_cli("call", "echo.say@1.0.0", *ALICE_ARGS, *INPUT, cwd=work, env=env)
    assert call.returncode == 0, call.stderr
    shown = run_cli("log", "show", cwd=work, env=env)
    assert "p/alice  echo.say@1.0.0  read  ok" in shown.stdout


def test_config_file_requiring_signatures_refuses_an_unsigned_lock(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path)
    (tmp_path / "stockade.host.toml").write_text(
        'format = "stockade.host/1"\n[host]\nstate_dir = "state"\nrequire_signatures = true\n'
    )
    proc = run_cli("call", "echo.say@1.0.0", *ALICE_ARGS, *INPUT, cwd=ws.root)
    assert proc.returncode == 1
    assert "SIGNATURE_INVALID" in proc.stderr


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('format = "stockade.host/1"\n[host]\nstate_dirr = "x"\n', "host.state_dirr: unknown key"),
        ('format = "stockade.host/2"\n', "format: must be 'stockade.host/1'"),
        ('format = "stockade.host/1"\n[host]\nrequire_signatures = "yes"\n', "must be true or false"),
        ('format = "stockade.host/1"\n[host]\nstore = "mysql://x"\n', "postgresql://"),
        ("format = \n", "not valid TOML"),
    ],
    ids=["typo-key", "unknown-format", "string-bool", "bad-store", "not-toml"],
)
def test_invalid_config_file_is_refused_not_ignored(tmp_path: Path, text: str, needle: str) -> None:
    ws = echo_workspace(tmp_path)
    (tmp_path / "stockade.host.toml").write_text(text)
    proc = run_cli("tools", cwd=ws.root)
    assert proc.returncode == 1
    assert "error: CONFIG_INVALID" in proc.stderr and needle in proc.stderr


def test_missing_config_named_on_the_command_line_is_refused(tmp_path: Path) -> None:
    proc = run_cli("tools", "--config", "nope.toml", cwd=tmp_path)
    assert proc.returncode == 1
    assert "CONFIG_INVALID: host config file not found" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_command_line_options_win_over_the_config_file(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path)
    (tmp_path / "stockade.host.toml").write_text(
        'format = "stockade.host/1"\n[host]\nstate_dir = "not-this-one"\nlock = "missing.lock"\n'
    )
    proc = run_cli("call", "echo.say@1.0.0", *ALICE_ARGS, *INPUT, *ws.host_args, cwd=ws.root)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "not-this-one").exists()


# --------------------------------------------------------------------------- hints


def test_policy_unavailable_names_the_file_and_its_command_fixes_it(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path)
    (ws.state / "policy.json").unlink()
    proc = ws.run("call", "echo.say@1.0.0", *ALICE_ARGS, *INPUT, *ws.host_args)
    assert proc.returncode == 1 and "POLICY_UNAVAILABLE" in proc.stderr
    assert str(ws.state / "policy.json") in proc.stderr
    [command] = suggested(proc)
    assert command[:2] == ["policy", "init"]
    assert ws.run(*command).returncode == 0
    after = ws.run("call", "echo.say@1.0.0", *ALICE_ARGS, *INPUT, *ws.host_args)
    assert "POLICY_UNAVAILABLE" not in after.stderr


def test_policy_denied_lists_every_missing_permission_and_its_command_fixes_it(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path, allow=())
    proc = ws.run("call", "echo.say@1.0.0", *ALICE_ARGS, *INPUT, *ws.host_args)
    assert proc.returncode == 1
    assert "POLICY_DENIED: policy denies 'tool.call:echo.say', 'echo.use'" in proc.stderr
    as_json = ws.run("call", "echo.say@1.0.0", *ALICE_ARGS, *INPUT, *ws.host_args, "--json")
    assert json_out(as_json)["error"]["details"]["permissions"] == ["tool.call:echo.say", "echo.use"]
    [command] = suggested(proc)
    assert command[:2] == ["policy", "grant-tool"]
    fixed = ws.run(*command)
    assert fixed.returncode == 0, fixed.stderr
    after = ws.run("call", "echo.say@1.0.0", *ALICE_ARGS, *INPUT, *ws.host_args)
    assert after.returncode == 0, after.stderr


def test_credential_unavailable_names_principal_and_secret_and_its_commands_fix_it(tmp_path: Path) -> None:
    root = signed_workspace(tmp_path, credentials=[
        {"secret": "echo_token", "location": {"type": "bearer"}, "hosts": ["api.echo.example"],
         "path_prefixes": ["/v1"], "optional": False},
    ])
    ws = Workspace(root=root, lock=root / "stockade.lock", state=root / "state", bundle=root / "bundles" / "echo")
    keys = ("--trusted-keys", "trusted-keys.json")
    assert ws.run("policy", "init", "--state-dir", "state").returncode == 0
    assert ws.run("policy", "grant-tool", "p", "alice", "echo.say@1.0.0", "--role", "agent", *keys,
                  "--state-dir", "state").returncode == 0
    proc = ws.run("call", "echo.say@1.0.0", *ALICE_ARGS, *INPUT, *ws.host_args, *keys)
    assert proc.returncode == 1
    assert "CREDENTIAL_UNAVAILABLE: secret 'echo_token'" in proc.stderr and "'alice' in 'p'" in proc.stderr
    commands = suggested(proc)
    assert [c[:2] for c in commands] == [["secrets", "init-key"], ["secrets", "set"]]
    for command in commands:
        done = ws.run(*command, stdin="a-token-value-123\n")
        assert done.returncode == 0, (command, done.stderr)
    after = ws.run("call", "echo.say@1.0.0", *ALICE_ARGS, *INPUT, *ws.host_args, *keys)
    assert after.returncode == 0, after.stderr


def test_signed_lock_without_trusted_keys_says_the_signer_is_not_trusted(tmp_path: Path) -> None:
    root = signed_workspace(tmp_path)
    proc = run_cli("lock", "verify", cwd=root)
    assert proc.returncode == 1 and "SIGNATURE_INVALID" in proc.stderr
    assert "which is not trusted here" in proc.stderr and "--trusted-keys" in proc.stderr
    assert "Sign the bundle" not in proc.stderr
    fixed = run_cli("lock", "verify", "--trusted-keys", "trusted-keys.json", cwd=root)
    assert fixed.returncode == 0, fixed.stderr


def test_policy_explain_shows_each_layer_and_the_fix(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path, allow=("tool.call:echo.say",))
    proc = ws.run("policy", "explain", "p", "alice", "echo.say@1.0.0", *ws.host_args)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("decision: DENY")
    assert "allow            tool.call:echo.say  (via user)" in proc.stdout
    assert "deny             echo.use  (no role grants it)" in proc.stdout
    assert "3 user tool policy: allow  (class default for read)" in proc.stdout
    assert "policy version 2, role-binding version 2" in proc.stdout
    report = json_out(ws.run("policy", "explain", "p", "alice", "echo.say@1.0.0", *ws.host_args, "--json"))
    assert report["missing"] == ["echo.use"]
    assert ws.run(*shlex.split(report["fix"])[1:]).returncode == 0
    allowed = ws.run("policy", "explain", "p", "alice", "echo.say@1.0.0", *ws.host_args)
    assert allowed.returncode == 0 and allowed.stdout.startswith("decision: ALLOW")


def test_policy_explain_of_a_write_tool_needs_approval_exit_3(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path, tools=[echo_tool(effect="write")])
    proc = ws.run("policy", "explain", "p", "alice", "echo.say@1.0.0", *ws.host_args)
    assert proc.returncode == 3, proc.stderr
    assert "3 user tool policy: ask  (class default for write)" in proc.stdout


def test_policy_explain_shows_a_rebind_and_its_fix_re_binds(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path, tools=[echo_tool(effect="write")])
    store = ToolPolicyStore(ws.state / "tool-policy", admin_dir=None)
    store.root.mkdir(parents=True, exist_ok=True)
    store.path_for("alice", "p").write_text(json.dumps({  # a /1 file: its allow is unbound
        "format": "stockade.toolpolicy/1", "partition": {"account": "alice", "workspace": "p"},
        "rules": [{"selector": {"tool": "echo.say"}, "mode": "allow"}],
    }))
    proc = ws.run("policy", "explain", "p", "alice", "echo.say@1.0.0", *ws.host_args)
    assert proc.returncode == 3, proc.stderr
    assert "allow recorded for binding (none: unbound), current binding " in proc.stdout
    assert "-> ask (rebind)" in proc.stdout
    report = json_out(ws.run("policy", "explain", "p", "alice", "echo.say@1.0.0", *ws.host_args, "--json"))
    rebind = report["user_tool_policy"]["rebind"]
    assert rebind["recorded"] is None and re.fullmatch(r"[0-9a-f]{64}", rebind["current"])
    fixed = ws.run(*shlex.split(rebind["fix"])[1:], "--json")
    assert fixed.returncode == 0, fixed.stderr
    assert json_out(fixed)["tool_policy"] == {"tool": "echo.say", "mode": "allow", "recorded": None,
                                              "binding": rebind["current"]}
    document = json.loads(store.path_for("alice", "p").read_text())
    assert document["format"] == "stockade.toolpolicy/2"
    assert document["rules"] == [{"selector": {"tool": "echo.say"}, "mode": "allow",
                                  "bound": {"echo.say": rebind["current"]}}]
    allowed = ws.run("policy", "explain", "p", "alice", "echo.say@1.0.0", *ws.host_args)
    assert allowed.returncode == 0 and allowed.stdout.startswith("decision: ALLOW"), allowed.stdout


def test_grant_tool_with_ask_needs_approval_and_names_only_declared_permissions(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path, allow=())
    proc = ws.run("policy", "grant-tool", "p", "bob", "echo.say@1.0.0", "--role", "asker", "--ask",
                  *ws.host_args, "--json")
    assert json_out(proc)["ask"] == ["tool.call:echo.say", "echo.use"]
    document = json.loads((ws.state / "policy.json").read_text())
    assert document["roles"]["asker"] == {"allow": [], "ask": ["echo.use", "tool.call:echo.say"]}
    assert document["bindings"]["p"]["bob"] == ["asker"]
    missing = ws.run("policy", "grant-tool", "p", "bob", "echo.nope@1.0.0", "--role", "x", *ws.host_args)
    assert missing.returncode == 1 and "TOOL_NOT_FOUND" in missing.stderr and "echo.say@1.0.0" in missing.stderr


def test_policy_show_prints_one_permission_per_line(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path, allow=("tool.call:echo.say", "echo.use"), ask=("echo.write",))
    proc = ws.run("policy", "show", "--state-dir", str(ws.state))
    assert proc.returncode == 0, proc.stderr
    assert "\\u000a" not in proc.stdout
    lines = proc.stdout.splitlines()
    assert "  allow  tool.call:echo.say" in lines and "  allow  echo.use" in lines
    assert "  ask    echo.write" in lines and "  bound  alice in p" in lines


def test_tool_not_found_hint_lists_the_tools_of_the_same_lock_as_written(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path)
    proc = ws.run("call", "echo.sya@1.0.0", *ALICE_ARGS, *INPUT, *ws.host_args)
    assert proc.returncode == 1 and "TOOL_NOT_FOUND" in proc.stderr
    [command] = suggested(proc)
    listed = ws.run(*command)
    assert listed.returncode == 0, listed.stderr
    assert "echo__say" in listed.stdout or "echo.say" in listed.stdout


def test_policy_missing_hint_runs_as_written(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path)
    (ws.state / "policy.json").unlink()
    proc = ws.run("policy", "grant-tool", "p", "alice", "echo.say@1.0.0", "--role", "agent", *ws.host_args)
    assert proc.returncode == 1 and "POLICY_MISSING" in proc.stderr
    [command] = suggested(proc)
    assert ws.run(*command).returncode == 0
    again = ws.run("policy", "grant-tool", "p", "alice", "echo.say@1.0.0", "--role", "agent", *ws.host_args)
    assert again.returncode == 0, again.stderr


def test_init_with_a_missing_keys_file_writes_nothing(tmp_path: Path) -> None:
    proc = run_cli("init", "--trusted-keys", "nope.json", cwd=tmp_path)
    assert proc.returncode == 1 and "KEYS_NOT_FOUND" in proc.stderr
    assert not (tmp_path / "stockade.host.toml").exists() and not (tmp_path / ".stockade").exists()


def test_init_on_a_lock_it_cannot_verify_says_why_instead_of_guessing(tmp_path: Path) -> None:
    root = signed_workspace(tmp_path)
    proc = run_cli("init", "--allow-unsigned", cwd=root)  # no trusted keys: the signed lock does not verify
    assert proc.returncode == 0, proc.stderr
    steps = proc.stdout.split("next:", 1)[1]
    assert "stockade lock verify   # the lock does not verify yet: SIGNATURE_INVALID" in steps


def _unsigned_workspace(root: Path) -> Path:
    module = echo_component()
    write_bundle(root / "bundles" / "echo", echo_manifest([echo_tool()], module), module)
    for argv in (
        ("keygen", "--out", "signing.pem", "--keys-file", "trusted-keys.json"),
        ("lock", "add", "bundles/echo"),  # unsigned
    ):
        proc = run_cli(*argv, cwd=root)
        assert proc.returncode == 0, proc.stderr
    return root


@pytest.mark.parametrize("waived", [False, True], ids=["keys-require-signatures", "allow-unsigned"])
def test_config_with_trusted_keys_refuses_an_unsigned_lock_unless_init_allowed_it(
    tmp_path: Path, waived: bool
) -> None:
    root = _unsigned_workspace(tmp_path)
    flags = ["--allow-unsigned"] if waived else []
    assert run_cli("init", "--trusted-keys", "trusted-keys.json", *flags, cwd=root).returncode == 0
    config = (root / "stockade.host.toml").read_text()
    assert ("unsafe_allow_unsigned = true" in config) is waived
    proc = run_cli("lock", "verify", "--json", cwd=root)  # keys (and the waiver) from the config file
    if waived:
        assert proc.returncode == 0, proc.stderr
        assert "unsafe_allow_unsigned is on" in proc.stderr
    else:
        assert proc.returncode == 1
        assert json_out(proc)["error"]["details"]["reason"] == "unsigned"


def test_policy_denied_host_tool_is_granted_by_its_suggested_command(tmp_path: Path) -> None:
    # Regression: `policy grant-tool` looked for the tool only in the lock's packages and
    # MCP sources, so the command the refusal of an fs.* call suggests answered TOOL_NOT_FOUND.
    ws = echo_workspace(tmp_path, allow=())
    files = tmp_path / "ws"
    files.mkdir()
    (files / "notes.txt").write_text("one\ntwo\n")
    (tmp_path / "stockade.host.toml").write_text(
        'format = "stockade.host/1"\n[host]\nstate_dir = "state"\nlock = "stockade.lock"\n'
        '[[workspace]]\nroot = "ws"\nproject = "p"\nsubjects = ["alice"]\n'
    )
    read = ("call", "fs.read_file@1.0.0", *ALICE_ARGS, "--input", '{"path": "notes.txt"}')
    proc = ws.run(*read)
    assert proc.returncode == 1 and "POLICY_DENIED" in proc.stderr, proc.stderr
    [command] = suggested(proc)
    assert command[:4] == ["policy", "grant-tool", "p", "alice"] and "fs.read_file@1.0.0" in command
    fixed = ws.run(*command, "--json")
    assert fixed.returncode == 0, fixed.stderr
    assert "tool.call:fs.read_file" in json_out(fixed)["allow"]
    after = ws.run(*read, "--json")
    assert after.returncode == 0, after.stderr
    assert "two" in json.dumps(json_out(after))


def test_grant_tool_binds_a_host_tool_allow_to_the_binding_the_host_runs(tmp_path: Path) -> None:
    # The allow holds only while its recorded binding is the running one (else the call
    # asks: a rebind); an edit that runs without asking proves the CLI bound the Host's.
    ws = echo_workspace(tmp_path)
    (tmp_path / "ws").mkdir()
    target = tmp_path / "ws" / "notes.txt"
    target.write_text("old\n")
    (tmp_path / "stockade.host.toml").write_text(
        'format = "stockade.host/1"\n[host]\nstate_dir = "state"\nlock = "stockade.lock"\n'
        '[[workspace]]\nroot = "ws"\nproject = "p"\n'
    )
    edit = ("call", "fs.edit_file@1.0.0", *ALICE_ARGS, "--input",
            '{"path": "notes.txt", "old_text": "old", "new_text": "new"}')
    granted = ws.run("policy", "grant-tool", "p", "alice", "fs.edit_file@1.0.0", "--role", "editor", "--json")
    assert granted.returncode == 0, granted.stderr
    asked = ws.run(*edit)  # a write: the class default asks, and no allow is recorded
    assert asked.returncode != 0 and "APPROVAL_REQUIRED" in asked.stderr, asked.stderr
    assert target.read_text() == "old\n"
    allowed = ws.run("policy", "grant-tool", "p", "alice", "fs.edit_file@1.0.0", "--role", "editor",
                     "--allow", "--json")
    assert allowed.returncode == 0, allowed.stderr
    binding = json_out(allowed)["tool_policy"]["binding"]
    stored = ToolPolicyStore(ws.state / "tool-policy", admin_dir=None).load("alice", "p")
    assert stored.recorded(ToolSelector("fs.edit_file"), "fs.edit_file") == binding
    ran = ws.run(*edit)
    assert ran.returncode == 0, ran.stderr
    assert target.read_text() == "new\n"
    missing = ws.run("policy", "grant-tool", "p", "alice", "fs.nope@1.0.0", "--role", "editor")
    assert missing.returncode == 1 and "TOOL_NOT_FOUND" in missing.stderr
    assert "fs.read_file@1.0.0" in missing.stderr  # the hint lists the host tools too
