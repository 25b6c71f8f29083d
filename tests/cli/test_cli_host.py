"""``stockade tools`` and ``stockade call``: the host pipeline from the command line.

Attacks defended: a call that skips policy, a call needing approval that runs without
one because nobody was there to ask, a refusal that is not audited.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from host.audit.log import verify
from tests.support.cli import ALICE_ARGS, echo_workspace, json_out, run_cli_tty
from tests.support.hosts import echo_tool

SAY = ("call", "echo.say@1.0.0", "--input", '{"message": "hi"}')


@pytest.mark.parametrize(
    ("fmt", "name_path"),
    [("openai", ("function", "name")), ("anthropic", ("name",)), ("mcp", ("name",))],
    ids=["openai", "anthropic", "mcp"],
)
def test_tools_prints_model_schemas_in_each_format(tmp_path: Path, fmt: str, name_path: tuple[str, ...]) -> None:
    ws = echo_workspace(tmp_path)
    proc = ws.run("tools", "--format", fmt, *ws.host_args)
    assert proc.returncode == 0, proc.stderr
    [schema] = json_out(proc)
    node = schema
    for key in name_path:
        node = node[key]
    assert node == ("echo.say" if fmt == "mcp" else "echo__say")
    key = {"openai": None, "anthropic": "input_schema", "mcp": "inputSchema"}[fmt]
    params = schema["function"]["parameters"] if key is None else schema[key]
    assert params["required"] == ["message"]


def test_call_echo_prints_output_and_audits(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path)
    proc = ws.run(*SAY, *ALICE_ARGS, *ws.host_args)
    assert proc.returncode == 0, proc.stderr
    assert json_out(proc) == {"message": "hi"}
    whole = ws.run(*SAY, *ALICE_ARGS, *ws.host_args, "--json")
    result = json_out(whole)
    assert result["ok"] is True and result["output"] == {"message": "hi"}
    assert len(result["audit_id"]) == 64 and len(result["action_digest"]) == 64
    report = verify(ws.state / "audit.log", expected_head=result["audit_id"])
    assert report.ok and report.closed  # the outcome record, then the close checkpoint


def test_call_refused_by_policy_exits_1_and_is_audited(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path, allow=["echo.use"])  # no tool.call:echo.say
    proc = ws.run(*SAY, *ALICE_ARGS, *ws.host_args)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: POLICY_DENIED")
    assert "what to do:" in proc.stderr
    assert proc.stdout == ""
    log = (ws.state / "audit.log").read_text()
    assert '"code":"POLICY_DENIED"' in log


def test_call_by_unknown_principal_denied(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path)
    proc = ws.run(*SAY, "--project", "p", "--subject", "mallory", *ws.host_args, "--json")
    assert proc.returncode == 1
    assert json_out(proc)["error"]["code"] == "POLICY_DENIED"


def test_call_with_invalid_input_refused(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path)
    proc = ws.run("call", "echo.say@1.0.0", "--input", '{"message": 5}', *ALICE_ARGS, *ws.host_args)
    assert proc.returncode == 1 and proc.stderr.startswith("error: INPUT_INVALID")


def test_call_of_unknown_version_refused(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path)
    proc = ws.run("call", "echo.say@9.9.9", *ALICE_ARGS, *ws.host_args)
    assert proc.returncode == 1 and proc.stderr.startswith("error: TOOL_NOT_FOUND")


def _write_workspace(tmp_path: Path):  # type: ignore[no-untyped-def]
    return echo_workspace(tmp_path, tools=[echo_tool(effect="write")])  # write: ask by default


def test_call_needing_approval_without_terminal_refused(tmp_path: Path) -> None:
    ws = _write_workspace(tmp_path)
    proc = ws.run(*SAY, *ALICE_ARGS, *ws.host_args)
    assert proc.returncode == 1
    assert "error: APPROVAL_REQUIRED" in proc.stderr and "--approve" in proc.stderr
    assert "action digest" in proc.stderr  # the preview was shown
    assert proc.stdout == ""
    assert '"call.intent"' not in (ws.state / "audit.log").read_text()  # nothing ran


def test_call_with_approve_flag_runs(tmp_path: Path) -> None:
    ws = _write_workspace(tmp_path)
    proc = ws.run(*SAY, *ALICE_ARGS, *ws.host_args, "--approve", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json_out(proc)
    assert result["ok"] is True and result["output"] == {"message": "hi"}
    assert result["action_digest"] in proc.stderr  # the preview names what was approved
    assert '"call.intent"' in (ws.state / "audit.log").read_text()


@pytest.mark.parametrize(("answer", "rc"), [("y\n", 0), ("n\n", 1), ("\n", 1)], ids=["yes", "no", "default-no"])
def test_interactive_approval_prompt(tmp_path: Path, answer: str, rc: int) -> None:
    ws = _write_workspace(tmp_path)
    proc = run_cli_tty(*SAY, *ALICE_ARGS, *ws.host_args, cwd=ws.root, answer=answer)
    assert proc.returncode == rc, (proc.stdout, proc.stderr)
    assert "Approve this call? [y/N]" in proc.stderr
    for field in ("echo.say@1.0.0", "echo@1.0.0, lock generation 1", "write", "low", "echo.use"):
        assert field in proc.stderr
    if rc == 0:
        assert json_out(proc) == {"message": "hi"}
    else:
        assert "error: APPROVAL_REQUIRED" in proc.stderr


def test_call_with_missing_policy_file_fails_closed(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path)
    (ws.state / "policy.json").unlink()
    proc = ws.run(*SAY, *ALICE_ARGS, *ws.host_args)
    assert proc.returncode == 1 and proc.stderr.startswith("error: POLICY_UNAVAILABLE")


def test_call_with_tampered_lock_refused_before_running(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path)
    (ws.bundle / "module.wasm").write_bytes((ws.bundle / "module.wasm").read_bytes() + b"\x00")
    proc = ws.run(*SAY, *ALICE_ARGS, *ws.host_args)
    assert proc.returncode == 1 and proc.stderr.startswith("error: DIGEST_MISMATCH")
