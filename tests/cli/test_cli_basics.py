"""CLI basics (items 8 and 9): start-up imports, global options anywhere,
JSON usage errors, --version, completion, help text, pass-through after ``--``.

Start-up time is measured by ``tests/benchmarks/bench_cli_startup.py`` (no timing
assertions here); these tests pin its cause instead: the modules a light command imports.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sdk.commands import COMMANDS
from tests.support.cli import REPO, cli_env, echo_workspace, json_out, run_cli

HEAVY = ("wasmtime", "httpx2", "httpcore2", "pydantic", "rich", "cryptography")


def imported_modules(*args: str, cwd: Path) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "sdk.cli", *args],
        cwd=cwd, capture_output=True, text=True, env=cli_env(), timeout=60, check=False,
        stdin=subprocess.DEVNULL,
    )
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    assert names, proc.stderr
    return names


@pytest.mark.parametrize(
    "argv",
    [("--help",), ("--version",), ("log", "show", "audit.log"), ("log", "--help"), ("no-such", "--json")],
    ids=["help", "version", "log-show", "log-help", "usage-error"],
)
def test_light_commands_import_no_heavy_module(tmp_path: Path, argv: tuple[str, ...]) -> None:
    (tmp_path / "audit.log").write_bytes(b"")
    names = imported_modules(*argv, cwd=tmp_path)
    heavy = sorted(name for name in names if name.split(".")[0] in HEAVY)
    assert heavy == [], f"stockade {' '.join(argv)} imported {heavy[:10]}"


def test_top_level_help_lists_every_registered_command(tmp_path: Path) -> None:
    proc = run_cli("--help", cwd=tmp_path)
    assert proc.returncode == 0
    listed = {line.split()[0] for line in proc.stdout.splitlines() if line.startswith("    ") and line.split()}
    assert {command.name for command in COMMANDS} <= listed
    modules = {  # every command module (one with a register(sub)) is in the registry
        path.stem for path in (REPO / "sdk" / "commands").glob("*.py")
        if not path.stem.startswith("_") and "\ndef register(sub" in path.read_text()
    }
    assert modules == {command.import_path.rsplit(".", 1)[1] for command in COMMANDS}


@pytest.mark.parametrize("command", [c.name for c in COMMANDS])
def test_help_has_no_raw_rest_markup(tmp_path: Path, command: str) -> None:
    proc = run_cli(command, "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "``" not in proc.stdout and ":class:" not in proc.stdout and ":func:" not in proc.stdout


def test_version_prints_package_wasmtime_and_python(tmp_path: Path) -> None:
    proc = run_cli("--version", cwd=tmp_path)
    assert proc.returncode == 0
    assert proc.stdout.startswith("stockade 0.") and "wasmtime 50." in proc.stdout
    info = json_out(run_cli("log", "--version", "--json", cwd=tmp_path))
    assert set(info) == {"stockade", "wasmtime", "python"}


def test_json_and_debug_are_accepted_after_the_subcommand(tmp_path: Path) -> None:
    proc = run_cli("lock", "verify", "--lock", "missing.lock", "--debug", cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" in proc.stderr
    first = run_cli("--json", "lock", "verify", "--lock", "missing.lock", cwd=tmp_path)
    last = run_cli("lock", "verify", "--lock", "missing.lock", "--json", cwd=tmp_path)
    assert json_out(first)["error"]["code"] == json_out(last)["error"]["code"] == "LOCK_INVALID"
    ws = echo_workspace(tmp_path / "ws")
    tools = ws.run("--json", "tools", *ws.host_args)  # a command without its own --json
    assert tools.returncode == 0, tools.stderr


@pytest.mark.parametrize(
    "argv",
    [("no-such-command", "--json"), ("--json", "keygen"), ("call", "echo.say", "--json"), ("--json", "--config"),
     ("--json",)],
    ids=["unknown-command", "missing-option", "bad-tool", "config-without-value", "no-command"],
)
def test_usage_errors_under_json_are_json(tmp_path: Path, argv: tuple[str, ...]) -> None:
    proc = run_cli(*argv, cwd=tmp_path)
    assert proc.returncode == 2
    report = json_out(proc)
    assert report["ok"] is False and report["error"]["code"] == "USAGE" and report["error"]["message"]
    assert proc.stderr == ""


def test_usage_error_without_json_is_text_on_stderr(tmp_path: Path) -> None:
    proc = run_cli("keygen", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("usage: stockade keygen") and "--out" in proc.stderr


def test_arguments_after_double_dash_reach_only_pass_through_commands(tmp_path: Path) -> None:
    proc = run_cli("keygen", "--out", "k.pem", "--", "-k", "x", cwd=tmp_path)
    assert proc.returncode == 2 and "takes no arguments after --" in proc.stderr
    assert not (tmp_path / "k.pem").exists()
    test = run_cli("test", "--", "-k", "only_this", cwd=tmp_path)  # before: "-k" was taken as DIR
    assert test.returncode == 1 and "PROJECT_NOT_FOUND: no stockade.toml in ." in test.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")
def test_bash_completion_completes_commands_actions_and_options(tmp_path: Path) -> None:
    script = tmp_path / "stockade.bash"
    script.write_text(run_cli("completion", "bash", cwd=tmp_path).stdout)

    def complete(*words: str) -> set[str]:
        body = (
            f"source {script}; COMP_WORDS=(stockade {' '.join(words)}); "
            f"COMP_CWORD={len(words)}; _stockade; printf '%s\\n' \"${{COMPREPLY[@]}}\""
        )
        out = subprocess.run(["bash", "-c", body], capture_output=True, text=True, check=True, cwd=tmp_path)
        return set(out.stdout.split())

    assert {"init", "call", "policy", "log", "completion"} <= complete("''")
    assert complete("lo") == {"lock", "log"}
    assert complete("policy", "''") >= {"explain", "grant-tool", "show", "--json"}
    assert "--follow" in complete("--json", "log", "show", "--")


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_completion_scripts_name_every_command(tmp_path: Path, shell: str) -> None:
    proc = run_cli("completion", shell, cwd=tmp_path)
    assert proc.returncode == 0
    for command in COMMANDS:
        assert command.name in proc.stdout
    if shell == "fish":
        assert "complete -c stockade -n '__fish_seen_subcommand_from log' -a show" in proc.stdout
    else:
        assert proc.stdout.startswith("#compdef stockade")


def test_completion_of_unknown_shell_is_a_usage_error(tmp_path: Path) -> None:
    proc = run_cli("completion", "powershell", cwd=tmp_path)
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


def test_json_output_of_help_free_commands_is_one_document(tmp_path: Path) -> None:
    proc = run_cli("--json", "--version", cwd=tmp_path)
    assert json.loads(proc.stdout)["stockade"]


@pytest.mark.slow
def test_test_passes_arguments_after_double_dash_to_pytest(tmp_path: Path) -> None:
    env = cli_env(XDG_CACHE_HOME=str(REPO / ".stockade-cache"))  # the shared build cache
    assert run_cli("new", "rt-python", cwd=tmp_path, env=env).returncode == 0
    project = tmp_path / "rt-python"
    proc = run_cli("test", "--", "-k", "greet", "-q", cwd=project, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "deselected" in proc.stdout and " -k greet -q" in proc.stderr  # the command shown


@pytest.mark.parametrize(
    "argv",
    [
        ("--version", "--json"),
        ("inspect", "--json", "no-such.lock"),
        ("lock", "--no-such-option"),
        ("completion", "bash"),
    ],
    ids=["version-json", "failed-json", "usage-error", "completion"],
)
def test_in_process_runner_matches_the_console_script(tmp_path: Path, argv: tuple[str, ...]) -> None:
    # Most CLI tests call sdk.cli.main in process (tests/support/cli.py): what they see must
    # be what a user's `python -m sdk.cli` prints and exits with.
    inside = run_cli(*argv, cwd=tmp_path)
    child = run_cli(*argv, cwd=tmp_path, subprocess=True)
    assert inside.args == ["stockade", *argv] and child.args[:3] == [sys.executable, "-m", "sdk.cli"]
    assert (inside.returncode, inside.stdout, inside.stderr) == (child.returncode, child.stdout, child.stderr)
