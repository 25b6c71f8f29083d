"""An external MCP server, pinned and called through Host's pipeline.

Every test drives the real SDK server in ``server.py`` as a subprocess over stdio.
"""

from __future__ import annotations

import json
import os
import time

from host.audit.log import verify
from host.mcpsource.pinning import pin_source, pin_tools
from sdk.review.lockfile import add_mcp
from tests.mcpsource.conftest import REVIEW, TOKEN, TOOLS, McpWorld, declaration, offered, request


def test_pinned_tools_are_offered_and_callable(world: McpWorld) -> None:
    assert {t.tool for t in world.pinned.pin.tools} >= {"test.echo", "test.add"}
    host = world.open()
    assert offered(host) == set(TOOLS)
    result = host.call(request("test.echo", {"message": "hello"}))
    assert result.ok, result.error
    assert result.output == {"text": "hello"}
    structured = host.call(request("test.add", {"a": 2, "b": 40}))
    assert structured.ok and structured.output == {"sum": 42}
    outcome = world.records("call.outcome")[-1]
    assert outcome["tool"] == "test.add" and outcome["ok"] is True


def test_input_outside_pinned_schema_never_reaches_the_server(world: McpWorld) -> None:
    host = world.open()
    result = host.call(request("test.echo", {"message": "x" * 101}))
    assert not result.ok and result.error is not None
    assert result.error.code == "INPUT_INVALID"


def test_unreviewed_tool_is_pinned_external_high(world: McpWorld) -> None:
    live = [{"name": "echo", "description": "d", "inputSchema": {
        "type": "object", "additionalProperties": False, "properties": {}, "required": []}}]
    result = pin_tools(world.pinned.pin.source, live, review={})
    (tool,) = result.pin.tools
    assert (tool.effect.value, tool.risk.value) == ("external", "high")


def test_secret_echoed_by_server_is_scrubbed_from_output_and_audit(world: McpWorld) -> None:
    host = world.open()
    leaked = host.call(request("test.leak"))
    assert leaked.ok
    assert TOKEN not in json.dumps(leaked.output)
    assert leaked.output["text"].startswith("the token is ")
    failed = host.call(request("test.fail"))
    assert not failed.ok and failed.error is not None
    assert failed.error.code == "TOOL_FAILED"
    assert "refused with token" in failed.error.message and TOKEN not in failed.error.message
    assert TOKEN not in world.audit_path.read_text()


def test_hung_server_times_out_and_is_restarted(world: McpWorld) -> None:
    decl = declaration(world.root, call_timeout_ms=1500)
    pinned = pin_source(decl, state_dir=world.root / "s2", secrets=world.secrets, review=REVIEW)
    add_mcp(world.lock, pinned.pin)
    host = world.open()
    source = host._mcp["test"]
    first_pid = source._conn.pid  # type: ignore[union-attr]
    hung = host.call(request("test.hang"))
    assert not hung.ok and hung.error is not None
    assert hung.error.code == "MCP_TIMEOUT"
    again = host.call(request("test.echo", {"message": "back"}))
    assert again.ok and again.output == {"text": "back"}
    assert source._conn.pid != first_pid  # type: ignore[union-attr]
    assert not _alive(first_pid)
    assert world.records("call.outcome")[-2]["error"]["code"] == "MCP_TIMEOUT"


def test_ten_megabyte_answer_is_bounded(world: McpWorld) -> None:
    host = world.open()
    result = host.call(request("test.big", {"bytes": 10 * 1024 * 1024}))
    assert not result.ok and result.error is not None
    assert result.error.code == "MCP_UNAVAILABLE"
    assert result.error.details["reason"] == "too_large"
    assert host.call(request("test.echo", {"message": "ok"})).ok


def test_answer_under_both_budgets_passes_whole(world: McpWorld) -> None:
    host = world.open()
    result = host.call(request("test.big", {"bytes": 60 * 1024}))
    assert result.ok  # under both the source's 64 KiB and the host's 256 KiB budget
    assert len(result.output["text"]) == 60 * 1024


def test_crash_mid_call_gives_stable_code_and_audit_intact(world: McpWorld) -> None:
    host = world.open()
    crashed = host.call(request("test.crash"))
    assert not crashed.ok and crashed.error is not None
    assert crashed.error.code == "MCP_UNAVAILABLE"
    assert crashed.error.details["reason"] == "crashed"
    assert world.records("call.outcome")[-1]["error"]["code"] == "MCP_UNAVAILABLE"
    assert host.call(request("test.echo", {"message": "after"})).ok
    verify(world.audit_path)


def test_malformed_json_rpc_gives_stable_code(world: McpWorld) -> None:
    host = world.open()
    result = host.call(request("test.garble"))
    assert not result.ok and result.error is not None
    assert result.error.code == "MCP_UNAVAILABLE"
    assert result.error.details["reason"] == "malformed"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_stdio_line_nested_20000_deep_fails_the_call_at_once_as_malformed(world: McpWorld) -> None:
    # Under the size limit, but deep enough to blow json's recursion in the reader thread:
    # without the bounded parser the call waited for its 5 s timeout (MCP_TIMEOUT).
    world.behave(garble_depth=20_000)
    host = world.open()
    started = time.monotonic()
    result = host.call(request("test.garble"))
    elapsed = time.monotonic() - started
    assert not result.ok and result.error is not None
    assert (result.error.code, result.error.details["reason"]) == ("MCP_UNAVAILABLE", "malformed")
    assert elapsed < 3.0
    assert host.call(request("test.echo", {"message": "after"})).ok  # restarted


def test_nan_in_structured_answer_is_output_invalid_not_input_invalid(world: McpWorld) -> None:
    world.behave(add_nan=True)
    host = world.open()
    result = host.call(request("test.add", {"a": 1, "b": 2}))
    assert not result.ok and result.error is not None
    assert result.error.code == "OUTPUT_INVALID", result.error
    assert world.records("call.outcome")[-1]["error"]["code"] == "OUTPUT_INVALID"
