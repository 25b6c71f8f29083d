"""The approval preview shows the whole action digest, whatever the width."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import ALICE_ARGS, cli_env, echo_workspace, json_out, run_cli_tty
from tests.support.hosts import echo_tool, make_host

SAY = ("call", "echo.say@1.0.0", "--input", '{"message": "hi"}')


def test_cli_preview_in_a_narrow_terminal_shows_the_full_action_digest(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path, tools=[echo_tool(effect="write")])
    proc = run_cli_tty(*SAY, *ALICE_ARGS, *ws.host_args, "--json", cwd=ws.root, answer="y\n",
                       env=cli_env(COLUMNS="60"))
    assert proc.returncode == 0, proc.stderr
    digest = json_out(proc)["action_digest"]
    assert f"action digest   {digest}" in proc.stderr.splitlines()
    assert "…" not in proc.stderr


def test_library_preview_text_holds_the_full_digest_one_field_per_line(tmp_path: Path) -> None:
    fixture = make_host(tmp_path, tools=[echo_tool(effect="write")], allow=("tool.call:echo.say", "echo.use"))
    with fixture.host as host:
        plan = host.prepare(fixture.request())
    assert plan.status == "approval_required"
    text = str(plan.preview)
    assert f"action digest   {plan.action_digest}" in text.splitlines()
    assert "tool            echo.say@1.0.0" in text.splitlines()
    assert len(plan.action_digest) == 64
