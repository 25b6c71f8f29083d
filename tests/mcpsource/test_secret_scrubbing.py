"""Secrets given to an MCP source never leave it unscrubbed (the third review's item 2).

A hostile server quotes the secret it was given in an ``initialize`` error, in a
``tools/list`` error, in the answer of a call that restarted it (after it failed its first
start at ``Host.open``), and after the secret was rotated. Every text that leaves the
source — answers, JSON-RPC errors, ``mcp.*`` audit records, pinning — passes one
redactor built from the values staged from the store at every call and every connection
attempt. Each case runs over stdio and over Streamable HTTP.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from host.errors import McpUnavailable
from host.mcpsource.pinning import pin_source
from tests.mcpsource import test_http
from tests.mcpsource.conftest import REVIEW, TOKEN, McpWorld, declaration, request
from tests.mcpsource.test_http import HttpWorld

http_world = test_http.http_world  # the real TLS server fixture of test_http.py
ROTATED = "tok-rotated-0c4e8b1f9a2d"


def forms(value: str) -> list[str]:
    return [value, base64.b64encode(value.encode()).decode(), value.encode().hex()]


def assert_scrubbed(text: str, *values: str) -> None:
    for value in values:
        for form in forms(value):
            assert form not in text, f"{form!r} leaked"


World = McpWorld | HttpWorld


@pytest.fixture(params=["stdio", "http"])
def either(request: pytest.FixtureRequest, tmp_path: Path) -> World:
    """The stdio world (pinned by its fixture) or the HTTP world, pinned here."""
    if request.param == "stdio":
        world: McpWorld = request.getfixturevalue("world")
        return world
    http: HttpWorld = request.getfixturevalue("http_world")
    http.pin()
    return http


def _call(world: World, tool: str) -> Any:
    host = world.hosts[-1] if world.hosts else world.open()
    return host.call(request(tool))


@pytest.mark.parametrize("method", ["initialize", "tools/list"])
def test_rpc_error_quoting_the_secret_is_scrubbed_from_the_call_and_mcp_unavailable(
    either: World, method: str
) -> None:
    either.behave(rpc_error={"method": method, "message": "refused credential {token}"})
    result = _call(either, "test.leak")  # Host.open failed to connect; the call retries
    assert not result.ok and result.error is not None
    assert result.error.code == "MCP_UNAVAILABLE"
    assert "[REDACTED]" in result.error.message
    assert_scrubbed(result.error.message + str(result.error.details), TOKEN)
    unavailable = either.records("mcp.unavailable")
    assert unavailable and "[REDACTED]" in unavailable[0]["message"]
    assert_scrubbed(either.audit_path.read_text(), TOKEN)


def test_restart_inside_a_call_after_a_failed_first_start_scrubs_the_answer(either: World) -> None:
    either.behave(fail_first_start=str(either.root / "started-once"), leak_forms=True)
    host = either.open()
    assert either.records("mcp.unavailable")  # the first start failed at Host.open
    result = host.call(request("test.leak"))
    assert result.ok, result.error
    assert result.output["text"].count("[REDACTED]") == 3  # plain, base64, hex
    assert_scrubbed(str(result.output), TOKEN)
    assert_scrubbed(either.audit_path.read_text(), TOKEN)


def test_secret_rotated_between_two_calls_is_scrubbed_old_and_new(either: World) -> None:
    either.behave(leak_forms=True, tokens=[TOKEN, ROTATED])
    host = either.open()
    first = host.call(request("test.leak"))
    assert first.ok and first.output["text"].count("[REDACTED]") == 3
    either.secrets.set("ops", "mcp-test", "api_token", ROTATED)
    # The running server still holds the old value: it is scrubbed too.
    assert_scrubbed(str(host.call(request("test.leak")).output), TOKEN, ROTATED)
    # Make the source reconnect: a stdio server exits; the HTTP server stops taking the old token.
    if isinstance(either, McpWorld):
        assert host.call(request("test.crash")).error is not None
    else:
        either.behave(leak_forms=True, tokens=[ROTATED])
        assert host.call(request("test.leak")).error is not None
    rotated = host.call(request("test.leak"))  # a restart inside this call hands out ROTATED
    assert rotated.ok, rotated.error
    assert rotated.output["text"].count("[REDACTED]") == 3
    assert_scrubbed(str(rotated.output), TOKEN, ROTATED)
    assert_scrubbed(either.audit_path.read_text(), TOKEN, ROTATED)


def test_pinning_a_server_quoting_its_secret_scrubs_the_error_and_refuses_the_tool(world: McpWorld) -> None:
    world.behave(rpc_error={"method": "initialize", "message": "refused credential {token}"})
    decl = declaration(world.root)
    with pytest.raises(McpUnavailable) as refused:
        pin_source(decl, state_dir=world.root / "pin-2", secrets=world.secrets, review=REVIEW)
    assert "[REDACTED]" in refused.value.message
    assert_scrubbed(refused.value.message + str(refused.value.details), TOKEN)
    world.behave(leak_in_description=True)  # the secret in a tool description
    result = pin_source(decl, state_dir=world.root / "pin-3", secrets=world.secrets, review=REVIEW)
    assert "echo" not in {t.name for t in result.pin.tools}
    assert ("echo", ("its definition holds a secret the server was given",)) in {
        (r.name, r.reasons) for r in result.refused
    }
    assert_scrubbed(str(result), TOKEN)
