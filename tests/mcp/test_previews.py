"""What a person reads before approving: escaped everywhere, and the whole input on demand.

Attack: an input holding U+202E RIGHT-TO-LEFT OVERRIDE (and friends) reached the person
raw in elicitation messages, so the text they approved could read differently from what
runs; and the preview cut left no way to see the whole input.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp
import pytest
from mcp import types

from host.approvals import ApprovalQueue
from host.mcp.server import META_KEY
from tests.mcp.conftest import World
from tests.support.cli import cli_env, run_cli

RLO = "\u202e"
HOSTILE = f"pay {RLO}txt.exe\u2066 \x1b[2J" + "x" * 60  # under the schema's 100 characters
BIDI = ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\x1b"]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_elicitation_preview_escapes_bidi_controls(world: World, mode: str) -> None:
    app = world.app()
    messages: list[str] = []

    async def ask(ctx: Any, params: Any) -> types.ElicitResult:
        messages.append(params.message)
        return types.ElicitResult(action="decline")

    async def body() -> None:
        async with mcp.Client(app.server, mode=mode, elicitation_callback=ask) as client:  # type: ignore[arg-type]
            await client.call_tool("echo.write", {"message": HOSTILE})

    anyio.run(body)
    assert len(messages) == 1
    assert not any(c in messages[0] for c in BIDI)
    assert "\\u202e" in messages[0] and "\\u2066" in messages[0] and "\\u001b" in messages[0]
    app.close()


def test_queued_preview_is_escaped_and_show_prints_the_whole_input(world: World) -> None:
    app = world.app()
    long_hostile = RLO * 100  # escaped, 600 characters: past the 512-character preview cut

    async def body() -> str:
        async with mcp.Client(app.server, mode="legacy") as client:
            result = await client.call_tool("echo.write", {"message": long_hostile})
        assert result.meta is not None and result.meta[META_KEY]["code"] == "APPROVAL_REQUIRED"
        return str(result.meta[META_KEY]["action_digest"])

    digest = anyio.run(body)
    (entry,) = ApprovalQueue(world.state).entries()
    assert RLO not in entry.summary and "characters in all]" in entry.summary
    shown = run_cli("approvals", "show", digest, "--state-dir", str(world.state), cwd=world.root)
    assert shown.returncode == 0, shown.stderr
    assert RLO not in shown.stdout
    assert '{"message":"' + "\\u202e" * 100 + '"}' in shown.stdout  # the whole input, escaped
    assert "action digest: " + digest in shown.stdout
    listed = run_cli("approvals", "list", "--state-dir", str(world.state), cwd=world.root)
    assert RLO not in listed.stdout
    app.close()


def test_list_shows_the_whole_digest_at_80_columns(world: World) -> None:
    # The table cut the digest at 80 columns: nothing left to copy into `approvals approve`.
    app = world.app()

    async def body() -> str:
        async with mcp.Client(app.server, mode="legacy") as client:
            result = await client.call_tool("echo.write", {"message": "queued"})
        assert result.meta is not None
        return str(result.meta[META_KEY]["action_digest"])

    digest = anyio.run(body)
    app.close()
    listed = run_cli("approvals", "list", "--state-dir", str(world.state), cwd=world.root,
                     env=cli_env(COLUMNS="80"))
    assert listed.returncode == 0, listed.stderr
    assert f"stockade approvals approve {digest}" in listed.stdout.splitlines()[-1]


def test_show_of_an_unknown_digest_refused(world: World) -> None:
    shown = run_cli("approvals", "show", "0" * 64, "--state-dir", str(world.state), cwd=world.root)
    assert shown.returncode == 1 and "no queued approval" in shown.stderr
