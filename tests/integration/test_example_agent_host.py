"""The example host app (examples/agent-host) replays a model's proposals through a real Host.

Real bundle, lock, policy file, audit log and wasmtime; the module is the WAT echo
component. The script runs in a subprocess exactly as the example's README shows.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from host.audit.log import verify
from tests.support.cli import REPO, cli_env, echo_workspace
from tests.support.hosts import echo_tool

SCRIPT = REPO / "examples" / "agent-host" / "agent_host.py"
PREPARE = REPO / "examples" / "agent-host" / "prepare.py"

TRANSCRIPT = [
    {"id": "read", "name": "echo__say", "arguments": json.dumps({"message": "hi"})},
    {"id": "write", "name": "echo__note", "arguments": {"message": "remember this"}},
    {"id": "extra-argument", "name": "echo__say", "arguments": {"message": "hi", "url": "https://evil.example/"}},
    {"id": "not-an-object", "name": "echo__say", "arguments": "[1, 2]"},
    {"id": "unoffered-tool", "name": "shell__exec", "arguments": {"command": "id"}},
    {"id": "dotted-name", "name": "echo.say", "arguments": {"message": "hi"}},
    {"id": "versioned-name", "name": "echo__say__v1_0_0", "arguments": {"message": "hi"}},
]


def run_host(root: Path, *args: str, transcript: Any = TRANSCRIPT) -> subprocess.CompletedProcess[str]:
    path = root / "transcript.json"
    if not path.exists():
        path.write_text(json.dumps(transcript) if not isinstance(transcript, str) else transcript)
    argv = [sys.executable, str(SCRIPT), "--lock", str(root / "stockade.lock"), "--state-dir", str(root / "state"),
            "--transcript", str(path), "--principal", "p/alice", *args]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120, env=cli_env(),
                          stdin=subprocess.DEVNULL, check=False)


def answers(proc: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    assert proc.returncode == 0, proc.stderr
    return {a["id"]: a for a in (json.loads(line) for line in proc.stdout.splitlines())}


def workspace(root: Path) -> Path:
    tools = [echo_tool(), echo_tool(name="echo.note", effect="write", description="Remember the message.")]
    echo_workspace(root, tools=tools, allow=("tool.call:echo.say", "tool.call:echo.note", "echo.use"))
    return root


@pytest.fixture(scope="module")
def approved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Any]]]:
    root = workspace(tmp_path_factory.mktemp("agent-host-yes"))
    return root, answers(run_host(root, "--approve", "yes"))


def test_allowed_read_answered_with_output(approved: tuple[Path, dict[str, dict[str, Any]]]) -> None:
    assert approved[1]["read"] == {"id": "read", "name": "echo__say", "tool": "echo.say@1.0.0", "ok": True,
                                   "output": {"message": "hi"}}


def test_write_runs_only_after_approval(approved: tuple[Path, dict[str, dict[str, Any]]]) -> None:
    root, by_id = approved
    assert by_id["write"]["ok"] is True and by_id["write"]["output"] == {"message": "remember this"}
    records = [json.loads(line) for line in (root / "state" / "audit.log").read_text().splitlines()]
    note = [r for r in records if r.get("tool") == "echo.note"]
    # first refused for want of approval, then the intent and the outcome of the approved run
    assert [(r["kind"], r.get("ok"), r.get("error", {}).get("code")) for r in note] == [
        ("call.outcome", False, "APPROVAL_REQUIRED"), ("call.intent", None, None), ("call.outcome", True, None)]
    assert verify(root / "state" / "audit.log").ok


@pytest.mark.parametrize(
    ("proposal", "code"),
    [
        ("extra-argument", "INPUT_INVALID"),
        ("not-an-object", "REQUEST_INVALID"),
        ("unoffered-tool", "TOOL_NOT_FOUND"),
        ("dotted-name", "TOOL_NOT_FOUND"),
        ("versioned-name", "TOOL_NOT_FOUND"),
    ],
    ids=["extra-argument-smuggled", "arguments-not-an-object", "tool-never-offered", "name-not-as-offered",
         "version-suffix-not-offered"],
)
def test_model_proposal_outside_what_was_offered_refused(
    approved: tuple[Path, dict[str, dict[str, Any]]], proposal: str, code: str
) -> None:
    answer = approved[1][proposal]
    assert answer["ok"] is False and answer["error"]["code"] == code


def test_declined_write_never_runs(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    proc = run_host(root, "--approve", "no", transcript=TRANSCRIPT[:2])
    by_id = answers(proc)
    assert by_id["read"]["ok"] is True
    assert by_id["write"]["declined"] is True
    assert by_id["write"]["error"]["code"] == "APPROVAL_REQUIRED"
    assert "approval needed: echo.note@1.0.0 (write, risk low)" in proc.stderr
    records = [json.loads(line) for line in (root / "state" / "audit.log").read_text().splitlines()]
    assert not [r for r in records if r["kind"] == "call.intent"]  # the guest never started
    assert not [r for r in records if r.get("tool") == "echo.note" and r.get("ok")]


def test_approval_prompt_without_terminal_declines(tmp_path: Path) -> None:
    # --approve ask with standard input at EOF: no person answered, so nothing runs.
    root = workspace(tmp_path)
    by_id = answers(run_host(root, transcript=TRANSCRIPT[1:2]))
    assert by_id["write"]["declined"] is True and by_id["write"]["error"]["code"] == "APPROVAL_REQUIRED"


@pytest.mark.parametrize(
    "transcript",
    ['{"name": "echo__say"}', "[{\"id\": 1}]", "not json", "[" * 10 + "]" * 10],
    ids=["not-a-list", "proposal-without-name", "not-json", "nested-lists"],
)
def test_malformed_transcript_refused(tmp_path: Path, transcript: str) -> None:
    root = workspace(tmp_path)
    proc = run_host(root, transcript=transcript)
    assert proc.returncode == 2 and proc.stdout == ""
    assert not (root / "state" / "audit.log").exists()  # refused before a host was opened


def test_oversized_transcript_refused(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    huge = json.dumps([{"name": "echo__say", "arguments": {"message": "x" * 1024}}] * 1100)
    proc = run_host(root, transcript=huge)
    assert proc.returncode == 2 and "larger than" in proc.stderr


@pytest.mark.slow
def test_readme_flow_with_jsonkit(tmp_path: Path) -> None:
    # The two commands of examples/agent-host/README.md, with tmp_path for /tmp/agent-host.
    work = tmp_path / "agent-host"
    prepared = subprocess.run([sys.executable, str(PREPARE), str(work)], cwd=REPO, capture_output=True, text=True,
                              timeout=600, env=cli_env(), check=False)
    assert prepared.returncode == 0, prepared.stderr
    argv = [sys.executable, str(SCRIPT), "--lock", str(work / "stockade.lock"), "--state-dir", str(work / "state"),
            "--transcript", str(REPO / "examples" / "agent-host" / "transcript.json"), "--approve", "yes"]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600, env=cli_env(),
                          stdin=subprocess.DEVNULL, check=False)
    by_id = answers(proc)
    assert by_id["call_1"]["output"] == {"json": '"open"', "type": "string"}
    assert by_id["call_2"]["ok"] is True and "approval needed: jsonkit.transform@1.0.0" in proc.stderr
    assert by_id["call_3"]["error"]["code"] == "INPUT_INVALID"
    assert by_id["call_4"]["error"]["code"] == "TOOL_NOT_FOUND"
    assert verify(work / "state" / "audit.log").ok
