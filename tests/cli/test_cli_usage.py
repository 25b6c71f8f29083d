"""Every owned subcommand answers --help with exit 0; malformed command lines exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import run_cli

HELP_COMMANDS = [
    ("keygen",),
    ("sign",),
    ("inspect",),
    ("lock",),
    ("lock", "add"),
    ("lock", "remove"),
    ("lock", "sign"),
    ("lock", "verify"),
    ("diff",),
    ("tools",),
    ("call",),
    ("secrets",),
    ("secrets", "init-key"),
    ("secrets", "set"),
    ("secrets", "list"),
    ("secrets", "delete"),
    ("log",),
    ("log", "verify"),
]


def test_top_level_help_lists_commands_and_exit_codes(tmp_path: Path) -> None:
    proc = run_cli("--help", cwd=tmp_path)
    assert proc.returncode == 0
    for name in ("keygen", "sign", "inspect", "lock", "diff", "tools", "call", "secrets", "log"):
        assert name in proc.stdout
    assert "3 diff found an escalation" in proc.stdout


@pytest.mark.parametrize("command", HELP_COMMANDS, ids=" ".join)
def test_help_of_each_subcommand_exits_0(tmp_path: Path, command: tuple[str, ...]) -> None:
    proc = run_cli(*command, "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "usage: stockade " + " ".join(command) in proc.stdout


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        ((), "usage"),
        (("no-such-command",), "invalid choice"),
        (("keygen",), "--out"),
        (("sign", "bundle"), "--key"),
        (("diff", "only-one.lock"), "NEW_LOCK"),
        (("lock",), "ACTION"),
        (("call", "echo.say", "--project", "p", "--subject", "a"), "TOOL@VERSION"),
        (("call", "echo.say@1.0.0", "--project", "p", "--subject", "a", "--input", "{bad"), "not strict JSON"),
        (("call", "echo.say@1.0.0", "--project", "p", "--subject", "a", "--input", "[1]"), "JSON object"),
        (("call", "echo.say@1.0.0", "--input", "{}"), "--project"),
        (("tools", "--format", "gemini"), "invalid choice"),
        (("log", "verify", "audit.log", "--expected-head", "xyz"), "64 lowercase hex"),
        (("secrets", "set", "tok"), "--project"),
    ],
    ids=[
        "no-command", "unknown-command", "keygen-without-out", "sign-without-key", "diff-one-lock",
        "lock-without-action", "call-without-version", "call-bad-json", "call-input-not-object",
        "call-without-principal", "tools-unknown-format", "log-bad-head", "secrets-without-scope",
    ],
)
def test_malformed_command_line_exits_2(tmp_path: Path, argv: tuple[str, ...], needle: str) -> None:
    proc = run_cli(*argv, cwd=tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert needle in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


def test_error_prints_code_and_hint_never_a_traceback(tmp_path: Path) -> None:
    proc = run_cli("lock", "verify", "--lock", "missing.lock", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: LOCK_INVALID: cannot open lock")
    assert "what to do:" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_debug_flag_shows_the_traceback(tmp_path: Path) -> None:
    proc = run_cli("--debug", "lock", "verify", "--lock", "missing.lock", cwd=tmp_path)
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "LOCK_INVALID" in proc.stderr


def test_json_error_is_machine_readable(tmp_path: Path) -> None:
    proc = run_cli("lock", "verify", "--lock", "missing.lock", "--json", cwd=tmp_path)
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert report["ok"] is False and report["error"]["code"] == "LOCK_INVALID"
