"""Per-principal bounds of ``stockade serve`` and refusals that never become internal errors.

One principal must not take the service from the others: the approval queue, the call
slots and the tool list are bounded or answered per principal. Driven in process by the
SDK's own ``Client`` against a real Host (WAT components, lock, policy file, audit log).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import anyio
import mcp
import pytest
from mcp import types
from mcp.shared.exceptions import MCPError

from host.approvals import ApprovalQueue
from host.errors import EgressDenied, StockadeError, all_error_classes
from host.mcp.server import META_KEY
from tests.mcp.conftest import BOB, World


def run(body: Callable[[], Awaitable[None]]) -> None:
    anyio.run(body)


def code(result: types.CallToolResult) -> str | None:
    assert result.meta is not None
    value = result.meta[META_KEY]["code"]
    return value if isinstance(value, str) else None


def test_one_principal_filling_the_approval_queue_leaves_others_served(world: World) -> None:
    alice, bob = world.app(max_pending_per_principal=2), world.app(principal=BOB, max_pending_per_principal=2)
    queue = ApprovalQueue(world.state)

    async def body() -> None:
        async with mcp.Client(alice.server) as client:
            for i in range(2):
                queued = await client.call_tool("echo.write", {"message": f"a{i}"})
                assert code(queued) == "APPROVAL_REQUIRED"
            full = await client.call_tool("echo.write", {"message": "a-over"})
            assert full.is_error is True and code(full) == "APPROVAL_QUEUE_FULL"
            text = full.content[0].text  # type: ignore[union-attr]
            assert "the bound is 2 per principal" in text and "what to do:" in text
            said = await client.call_tool("echo.say", {"message": "reads still run"})
            assert said.is_error is False
        async with mcp.Client(bob.server) as client:
            theirs = await client.call_tool("echo.write", {"message": "b"})
            assert code(theirs) == "APPROVAL_REQUIRED"
        assert sorted(e.subject for e in queue.entries()) == ["alice", "alice", "bob"]

    run(body)
    requested = [r for r in world.records() if r["kind"] == "approval.requested"]
    assert len(requested) == 3  # the refused one was never queued
    alice.close()
    bob.close()


ERRORS = [c for c in all_error_classes() if c is not StockadeError] + [StockadeError]


@pytest.mark.parametrize("error", ERRORS, ids=lambda c: c.code)
@pytest.mark.parametrize("where", ["call", "queue"])
def test_every_stockade_error_on_the_call_path_is_a_result_not_an_internal_error(
    world: World, error: type[StockadeError], where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = world.app()

    def boom(*args: Any, **kwargs: Any) -> Any:
        extra = {"reason": "denied"} if issubclass(error, EgressDenied) else {}
        raise error("forced on the call path", **extra)

    if where == "call":
        monkeypatch.setattr(app.host, "call", boom)
        tool = "echo.say"
    else:
        monkeypatch.setattr(ApprovalQueue, "request", boom)
        tool = "echo.write"  # asks a person; a client without elicitation is queued

    async def body() -> None:
        async with mcp.Client(app.server, mode="legacy") as client:
            result = await client.call_tool(tool, {"message": "m"})
        assert result.is_error is True and code(result) == error.code
        assert result.content[0].text.startswith(f"{error.code}: forced")  # type: ignore[union-attr]

    try:
        run(body)
    except MCPError as exc:  # pragma: no cover - the failure this test exists for
        pytest.fail(f"{error.code} reached the client as a JSON-RPC error: {exc}")
    app.close()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_hidden_tool_answers_exactly_like_an_unknown_one(world: World, mode: str) -> None:
    app = world.app()

    async def body() -> tuple[MCPError, MCPError]:
        async with mcp.Client(app.server, mode=mode) as client:  # type: ignore[arg-type]
            with pytest.raises(MCPError) as hidden:
                await client.call_tool("echo.hidden", {"message": 7})
            with pytest.raises(MCPError) as unknown:
                await client.call_tool("echo.nothing", {"message": 7})
        return hidden.value, unknown.value

    hidden, unknown = anyio.run(body)
    assert (hidden.error.code, hidden.error.message.replace("echo.hidden", "X")) == (
        unknown.error.code,
        unknown.error.message.replace("echo.nothing", "X"),
    )
    assert "POLICY" not in hidden.error.message and "echo.hidden" in hidden.error.message
    denied = [r for r in world.records() if r["kind"] == "call.outcome" and r.get("tool") == "echo.hidden"]
    assert [r["error"]["code"] for r in denied] == ["POLICY_DENIED"]  # the audit keeps the truth
    app.close()


def test_one_principals_waiting_calls_leave_slots_for_others(world: World) -> None:
    alice = world.app(max_concurrency=4, max_calls_per_principal=1)  # bob shares its slots below

    async def body() -> None:
        started = anyio.Event()

        async def progress(value: float, total: float | None, message: str | None) -> None:
            if (message or "").startswith("sandbox_started"):
                started.set()

        async with mcp.Client(alice.server) as client:
            with anyio.fail_after(30):
                async with anyio.create_task_group() as group:
                    group.start_soon(
                        lambda: client.call_tool("spin.forever", {"message": "s"}, progress_callback=progress)
                    )
                    await started.wait()
                    second = await client.call_tool("echo.say", {"message": "a2"})
                    assert second.is_error is True and code(second) == "BUSY"
                    assert "the bound is 1 per principal" in second.content[0].text  # type: ignore[union-attr]
                    with _as(alice, BOB):
                        others = await client.call_tool("echo.say", {"message": "bob"})
                    assert others.is_error is False
                    group.cancel_scope.cancel()
                await alice.wait_idle()

    run(body)
    alice.close()


class _as:
    """Serve the next calls of ``app`` as another fixed principal (one server, two principals)."""

    def __init__(self, app: Any, principal: Any) -> None:
        self._app, self._principal = app, principal

    def __enter__(self) -> None:
        self._saved = self._app.options
        object.__setattr__(self._app, "options", replace(self._saved, principal=self._principal))

    def __exit__(self, *exc: object) -> None:
        object.__setattr__(self._app, "options", self._saved)


def test_one_principal_holding_listen_streams_leaves_others_theirs(world: World) -> None:
    # Attack: one token held 1,000 subscriptions/listen streams open (the SDK's bound,
    # 1,024, was shared by every principal).
    app = world.app(max_streams_per_principal=2)

    async def body() -> None:
        async with mcp.Client(app.server) as client, contextlib.AsyncExitStack() as streams:
            for _ in range(2):
                await streams.enter_async_context(client.listen(tools_list_changed=True))
            with pytest.raises(MCPError, match="the bound is 2 per principal"):
                async with client.listen(tools_list_changed=True):
                    pass
            with _as(app, BOB):
                async with client.listen(tools_list_changed=True):
                    pass  # bob's share is his own
            assert (await client.call_tool("echo.say", {"message": "still"})).is_error is False

    run(body)
    app.close()
