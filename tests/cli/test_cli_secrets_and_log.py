"""``stockade secrets`` and ``stockade log verify``.

Attacks defended: a secret value leaking to the terminal, argv or an error message; a
store opened without a key; an audit log edited or truncated after the fact.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from tests.support.cli import ALICE_ARGS, cli_env, echo_workspace, json_out, run_cli

VALUE = "s3cr3t-Value-42-xyz"


def _init(root: Path) -> Path:
    state = root / "state"
    proc = run_cli("secrets", "init-key", "--state-dir", str(state), cwd=root)
    assert proc.returncode == 0, proc.stderr
    return state


def test_secret_set_list_delete_never_shows_the_value(tmp_path: Path) -> None:
    state = _init(tmp_path)
    common = ("--project", "p", "--subject", "alice", "--state-dir", str(state))
    outputs = []
    proc = run_cli("secrets", "set", "tracker_token", *common, cwd=tmp_path, stdin=VALUE + "\n")
    assert proc.returncode == 0, proc.stderr
    outputs.append(proc)
    listed = run_cli("secrets", "list", *common, "--json", cwd=tmp_path)
    assert [row["name"] for row in json_out(listed)] == ["tracker_token"]
    outputs.append(listed)
    outputs.append(run_cli("secrets", "list", *common, cwd=tmp_path))
    assert "tracker_token" in outputs[-1].stdout
    deleted = run_cli("secrets", "delete", "tracker_token", *common, cwd=tmp_path)
    assert deleted.returncode == 0
    again = run_cli("secrets", "delete", "tracker_token", *common, cwd=tmp_path)
    assert again.returncode == 1 and "no secret named tracker_token" in again.stdout
    outputs += [deleted, again]
    for out in outputs:
        assert VALUE not in out.stdout + out.stderr
    assert VALUE.encode() not in (state / "secrets.json").read_bytes()


def test_secret_stored_with_env_master_key_is_usable(tmp_path: Path) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    env = cli_env(STOCKADE_MASTER_KEY=key)
    common = ("--project", "p", "--subject", "alice", "--state-dir", str(tmp_path / "state"))
    assert run_cli("secrets", "set", "tok", *common, cwd=tmp_path, stdin=VALUE, env=env).returncode == 0
    proc = run_cli("secrets", "list", *common, "--json", cwd=tmp_path, env=env)
    assert [row["name"] for row in json_out(proc)] == ["tok"]
    wrong = run_cli("secrets", "list", *common, cwd=tmp_path,
                    env=cli_env(STOCKADE_MASTER_KEY=base64.b64encode(os.urandom(32)).decode()))
    assert wrong.returncode == 1 and "error: SECRETS_UNAVAILABLE" in wrong.stderr


@pytest.mark.parametrize(
    ("value", "needle"),
    [("abc1234", "at least 8 characters"), ("tab\tinside-value", "control characters"), ("", "empty secret")],
    ids=["too-short", "control-character", "empty"],
)
def test_bad_secret_value_refused_as_usage_without_echo(tmp_path: Path, value: str, needle: str) -> None:
    state = _init(tmp_path)
    proc = run_cli("secrets", "set", "tok", *ALICE_ARGS, "--state-dir", str(state), cwd=tmp_path, stdin=value)
    assert proc.returncode == 2
    assert needle in proc.stderr and "what to do:" in proc.stderr
    if value:
        assert value not in proc.stdout + proc.stderr
    assert not (state / "secrets.json").exists()


def test_bad_secret_name_is_a_usage_error(tmp_path: Path) -> None:
    state = _init(tmp_path)
    proc = run_cli("secrets", "set", "Bad-Name", *ALICE_ARGS, "--state-dir", str(state), cwd=tmp_path, stdin=VALUE)
    assert proc.returncode == 2 and "secret name" in proc.stderr
    assert VALUE not in proc.stderr


def test_secrets_without_master_key_refused(tmp_path: Path) -> None:
    proc = run_cli("secrets", "set", "tok", *ALICE_ARGS, "--state-dir", str(tmp_path / "s"), cwd=tmp_path,
                   stdin=VALUE)
    assert proc.returncode == 1
    assert "error: SECRETS_UNAVAILABLE" in proc.stderr and "stockade secrets init-key" in proc.stderr


def test_init_key_refuses_to_replace_a_master_key(tmp_path: Path) -> None:
    state = _init(tmp_path)
    before = (state / "master.key").read_bytes()
    proc = run_cli("secrets", "init-key", "--state-dir", str(state), cwd=tmp_path)
    assert proc.returncode == 1 and "error: KEY_EXISTS" in proc.stderr
    assert (state / "master.key").read_bytes() == before


def _audited_workspace(tmp_path: Path) -> tuple[Path, str]:
    ws = echo_workspace(tmp_path)
    proc = ws.run("call", "echo.say@1.0.0", "--input", '{"message": "hi"}', *ALICE_ARGS, *ws.host_args, "--json")
    assert proc.returncode == 0, proc.stderr
    return ws.state / "audit.log", json_out(proc)["audit_id"]


def test_log_verify_of_an_intact_log(tmp_path: Path) -> None:
    log, head = _audited_workspace(tmp_path)
    proc = run_cli("log", "verify", str(log), "--expected-head", head, "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json_out(proc)
    assert report["ok"] is True and report["closed"] is True and report["records"] >= 3
    text = run_cli("log", "verify", str(log), cwd=tmp_path)
    assert text.returncode == 0 and text.stdout.startswith("ok:")


def test_log_verify_detects_an_edited_record(tmp_path: Path) -> None:
    log, _ = _audited_workspace(tmp_path)
    lines = log.read_text().splitlines(keepends=True)
    record = json.loads(lines[0])
    record["generation"] = 99  # rewrite history, keep the old hash
    lines[0] = json.dumps(record, separators=(",", ":"), sort_keys=True) + "\n"
    log.write_text("".join(lines))
    proc = run_cli("log", "verify", str(log), "--json", cwd=tmp_path)
    assert proc.returncode == 1
    report = json_out(proc)
    assert report["ok"] is False and report["first_broken"] == 1
    text = run_cli("log", "verify", str(log), cwd=tmp_path)
    assert text.returncode == 1 and "error: AUDIT_LOG_BROKEN: record 1" in text.stderr


def test_log_verify_detects_truncation_with_expected_head(tmp_path: Path) -> None:
    log, head = _audited_workspace(tmp_path)
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:-2]))  # drop the outcome and close checkpoint: still a valid chain
    assert run_cli("log", "verify", str(log), cwd=tmp_path).returncode == 0
    proc = run_cli("log", "verify", str(log), "--expected-head", head, cwd=tmp_path)
    assert proc.returncode == 1 and "not in the log" in proc.stderr


def test_log_verify_checks_signed_checkpoints_and_reports_an_unsigned_tail(tmp_path: Path) -> None:
    log, _ = _audited_workspace(tmp_path)
    proc = run_cli("log", "verify", str(log), "--strict", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "checkpoints verified" in proc.stdout and "closed cleanly" in proc.stdout  # key found next to the log
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:-1]))  # cut the close checkpoint off
    proc = run_cli("log", "verify", str(log), "--json", cwd=tmp_path)
    report = json_out(proc)
    assert proc.returncode == 0 and report["keys_checked"] is True
    assert report["closed"] is False and report["unsigned_tail"] >= 1
    strict = run_cli("log", "verify", str(log), "--strict", cwd=tmp_path)
    assert strict.returncode == 1 and "AUDIT_LOG_UNSIGNED" in strict.stderr
    assert "no record is covered by a signature" in strict.stdout


def test_log_verify_without_a_key_says_rehashing_is_not_detected(tmp_path: Path) -> None:
    log, _ = _audited_workspace(tmp_path)
    copy = tmp_path / "elsewhere" / "audit.log"
    copy.parent.mkdir()
    copy.write_bytes(log.read_bytes())
    env_home = tmp_path / "empty-home"
    proc = run_cli("log", "verify", str(copy), "--state-dir", str(env_home), cwd=tmp_path)
    assert proc.returncode == 0
    assert "no audit public key found" in proc.stdout and "NOT detected" in proc.stdout
    keyed = run_cli("log", "verify", str(copy), "--key", str(log.parent / "audit-key.pub"), cwd=tmp_path)
    assert keyed.returncode == 0 and "checkpoints verified" in keyed.stdout
