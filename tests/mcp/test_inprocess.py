"""The MCP server driven by the SDK's own ``Client``, in process, in both protocol eras.

``mode="legacy"`` speaks the 2025-11-25 handshake era over JSON-RPC streams; ``"auto"``
on an in-process server adopts the 2026-07-28 stateless era. Every call goes through a
real Host: WAT components, lock, policy file, audit log.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp
import pytest
from mcp import types
from mcp.shared.exceptions import MCPError

from host import FilePolicyEngine, Principal
from host.approvals import ApprovalQueue
from host.canonical import canonical_json
from host.mcp.server import APPROVAL_KEY, META_KEY, ServeOptions, StockadeMCP
from tests.mcp.conftest import ALICE, BOB, World
from tests.support.bundles import lock_digest, write_lock
from tests.support.hosts import make_host
from tests.support.wat import http_component

MODES = ["legacy", "auto"]


def run(body: Callable[[], Awaitable[None]]) -> None:
    anyio.run(body)


def accept(approve: bool = True) -> Any:
    async def callback(ctx: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"approve": approve})

    return callback


def meta(result: types.CallToolResult) -> dict[str, Any]:
    assert result.meta is not None
    return dict(result.meta[META_KEY])


def outcomes(world: World, tool: str) -> list[dict[str, Any]]:
    return [r for r in world.records() if r["kind"] == "call.outcome" and r.get("tool") == tool]


# -- tools/list ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_tools_list_hides_denied_tools_and_keeps_manifest_schemas(world: World, mode: str) -> None:
    app = world.app()
    manifest = json.loads((world.root / "bundles" / "echo" / "manifest.json").read_bytes())
    declared = {t["name"]: t for t in manifest["tools"]}

    async def body() -> None:
        async with mcp.Client(app.server, mode=mode) as client:  # type: ignore[arg-type]
            first = await client.list_tools()
            second = await client.list_tools()
        names = [t.name for t in first.tools]
        assert names == ["echo.say", "echo.write", "spin.forever"]  # echo.hidden is denied
        assert names == [t.name for t in second.tools]
        say = first.tools[0]
        assert canonical_json(say.input_schema) == canonical_json(declared["echo.say"]["input_schema"])
        assert canonical_json(say.output_schema) == canonical_json(declared["echo.say"]["output_schema"])
        assert say.annotations is not None and say.annotations.read_only_hint is True
        write = first.tools[1].annotations
        assert write is not None and write.destructive_hint is True and write.read_only_hint is False
        assert write.open_world_hint is False  # the echo package has no http.allow

    run(body)
    app.close()


def test_tools_list_is_per_principal(world: World) -> None:
    engine = FilePolicyEngine(world.state / "policy.json")
    engine.set_role("reader", allow=["tool.call:echo.say", "echo.use"], ask=[])
    engine.grant_role("p", "carol", "reader")
    app = world.app(principal=Principal(project="p", subject="carol"))

    async def body() -> None:
        async with mcp.Client(app.server) as client:
            listed = await client.list_tools()
        assert [t.name for t in listed.tools] == ["echo.say"]

    run(body)
    app.close()


# -- tools/call ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_call_returns_structured_content_text_and_audit_id(world: World, mode: str) -> None:
    app = world.app()

    async def body() -> None:
        async with mcp.Client(app.server, mode=mode) as client:  # type: ignore[arg-type]
            result = await client.call_tool("echo.say", {"message": "hi"})
        assert result.is_error is False
        assert result.structured_content == {"message": "hi"}
        assert isinstance(result.content[0], types.TextContent)
        assert json.loads(result.content[0].text) == {"message": "hi"}
        info = meta(result)
        assert info["code"] is None
        assert info["audit_id"] == outcomes(world, "echo.say")[-1]["hash"]

    run(body)
    app.close()


@pytest.mark.parametrize("mode", MODES)
def test_unknown_tool_is_invalid_params(world: World, mode: str) -> None:
    app = world.app()

    async def body() -> None:
        async with mcp.Client(app.server, mode=mode) as client:  # type: ignore[arg-type]
            with pytest.raises(MCPError) as info:
                await client.call_tool("echo.nope", {})
        assert info.value.error.code == -32602

    run(body)
    app.close()


@pytest.mark.parametrize("mode", MODES)
def test_invalid_input_is_an_error_result_with_code_and_audit(world: World, mode: str) -> None:
    app = world.app()

    async def body() -> None:
        async with mcp.Client(app.server, mode=mode) as client:  # type: ignore[arg-type]
            result = await client.call_tool("echo.say", {"message": 7})
        assert result.is_error is True
        assert isinstance(result.content[0], types.TextContent)
        assert result.content[0].text.startswith("INPUT_INVALID: ")
        assert "what to do:" in result.content[0].text
        info = meta(result)
        assert info["code"] == "INPUT_INVALID"
        assert info["audit_id"] == outcomes(world, "echo.say")[-1]["hash"]

    run(body)
    app.close()


# -- approvals ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode,channel", [("legacy", "elicitation"), ("auto", "input_required")])
def test_approval_accepted_runs_the_call_once(world: World, mode: str, channel: str) -> None:
    app = world.app()
    messages: list[str] = []

    async def elicit(ctx: Any, params: Any) -> types.ElicitResult:
        messages.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    async def body() -> None:
        async with mcp.Client(app.server, mode=mode, elicitation_callback=elicit) as client:  # type: ignore[arg-type]
            result = await client.call_tool("echo.write", {"message": "ship it"})
        assert result.is_error is False and result.structured_content == {"message": "ship it"}
        digest = meta(result)["action_digest"]
        assert len(messages) == 1
        assert digest in messages[0] and "effect: write" in messages[0] and '"ship it"' in messages[0]
        kinds = [(r["kind"], r.get("channel")) for r in world.records() if r["kind"].startswith("approval.")]
        assert kinds == [("approval.requested", channel), ("approval.granted", channel)]
        assert [r.get("ok") for r in outcomes(world, "echo.write")] == [False, True]

    run(body)
    app.close()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("answer", ["decline", "cancel", "accept-false"])
def test_approval_declined_is_approval_denied_and_nothing_runs(world: World, mode: str, answer: str) -> None:
    app = world.app()

    async def elicit(ctx: Any, params: Any) -> types.ElicitResult:
        if answer == "accept-false":
            return types.ElicitResult(action="accept", content={"approve": False})
        return types.ElicitResult(action=answer)  # type: ignore[arg-type]

    async def body() -> None:
        async with mcp.Client(app.server, mode=mode, elicitation_callback=elicit) as client:  # type: ignore[arg-type]
            result = await client.call_tool("echo.write", {"message": "no"})
        assert result.is_error is True and meta(result)["code"] == "APPROVAL_DENIED"
        assert not [r for r in world.records() if r["kind"] == "call.intent"]  # the guest never ran
        assert "approval.denied" in [r["kind"] for r in world.records()]
        (denial,) = [r for r in world.records() if r["kind"] == "approval.denied"]
        assert meta(result)["audit_id"] == denial["hash"]  # it was null although the record exists

    run(body)
    app.close()


def _approval_answer() -> dict[str, types.InputResponse]:
    return {APPROVAL_KEY: types.ElicitResult(action="accept", content={"approve": True})}


def test_replayed_request_state_refused(world: World) -> None:
    app = world.app()

    async def body() -> None:
        async with mcp.Client(app.server, elicitation_callback=accept()) as client:
            first = await client.session.call_tool("echo.write", {"message": "x"}, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult) and first.request_state
            state = first.request_state
            ran = await client.session.call_tool(
                "echo.write", {"message": "x"}, input_responses=_approval_answer(), request_state=state,
            )  # fmt: skip
            replay = await client.session.call_tool(
                "echo.write", {"message": "x"}, input_responses=_approval_answer(), request_state=state,
            )  # fmt: skip
        assert ran.is_error is False
        assert replay.is_error is True and meta(replay)["code"] == "APPROVAL_INVALID"
        assert [r.get("ok") for r in outcomes(world, "echo.write")].count(True) == 1

    run(body)
    app.close()


@pytest.mark.parametrize("tamper", ["other-input", "forged-mac", "other-principal"])
def test_request_state_bound_to_action_and_principal(world: World, tamper: str) -> None:
    alice, bob = world.app(), world.app(principal=BOB)

    async def body() -> None:
        async with mcp.Client(alice.server, elicitation_callback=accept()) as client:
            first = await client.session.call_tool("echo.write", {"message": "x"}, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult) and first.request_state
            state, args, target = first.request_state, {"message": "x"}, alice
            if tamper == "other-input":
                args = {"message": "y"}
            elif tamper == "forged-mac":
                state = state[:-4] + ("AAAA" if not state.endswith("AAAA") else "BBBB")
            else:
                target = bob  # bob's server, bob's principal: alice's state does not transfer
        async with mcp.Client(target.server, elicitation_callback=accept()) as other:
            result = await other.session.call_tool(
                "echo.write", args, input_responses=_approval_answer(), request_state=state
            )
        assert result.is_error is True and meta(result)["code"] == "APPROVAL_INVALID"
        assert not [r for r in world.records() if r["kind"] == "call.intent"]

    run(body)
    alice.close()
    bob.close()


@pytest.mark.parametrize("mode", MODES)
def test_client_without_elicitation_gets_queued_approval(world: World, mode: str) -> None:
    app = world.app()
    queue = ApprovalQueue(world.state)

    async def body() -> None:
        async with mcp.Client(app.server, mode=mode) as client:  # type: ignore[arg-type]
            refused = await client.call_tool("echo.write", {"message": "later"})
            info = meta(refused)
            assert refused.is_error is True and info["code"] == "APPROVAL_REQUIRED"
            (asked,) = [r for r in world.records() if r["kind"] == "approval.requested"]
            assert info["audit_id"] == asked["hash"]  # it was null although the record exists
            pending = queue.entries()
            assert [(e.action_digest, e.status, e.subject) for e in pending] == [
                (info["action_digest"], "pending", "alice")
            ]
            again = await client.call_tool("echo.write", {"message": "later"})
            assert meta(again)["code"] == "APPROVAL_REQUIRED" and len(queue.entries()) == 1
            queue.decide(info["action_digest"], approve=True, by="test")
            ran = await client.call_tool("echo.write", {"message": "later"})
            assert ran.is_error is False and ran.structured_content == {"message": "later"}
            once = await client.call_tool("echo.write", {"message": "later"})
            assert meta(once)["code"] == "APPROVAL_REQUIRED"  # single use: queued afresh
            queue.decide(info["action_digest"], approve=False, by="test")
            denied = await client.call_tool("echo.write", {"message": "later"})
            assert meta(denied)["code"] == "APPROVAL_DENIED"
            denial = [r for r in world.records() if r["kind"] == "approval.denied"][-1]
            assert meta(denied)["audit_id"] == denial["hash"]
        assert [r.get("ok") for r in outcomes(world, "echo.write")].count(True) == 1
        channels = [r["kind"] for r in world.records() if r.get("channel") == "queue"]
        assert channels == [
            "approval.requested",
            "approval.granted",
            "approval.requested",
            "approval.denied",
        ]

    run(body)
    app.close()


def test_queued_approval_does_not_transfer_to_another_principal(world: World) -> None:
    alice, bob = world.app(), world.app(principal=BOB)
    queue = ApprovalQueue(world.state)

    async def body() -> None:
        async with mcp.Client(alice.server) as client:
            digest = meta(await client.call_tool("echo.write", {"message": "m"}))["action_digest"]
        queue.decide(digest, approve=True, by="test")
        async with mcp.Client(bob.server) as client:
            result = await client.call_tool("echo.write", {"message": "m"})
        assert meta(result)["code"] == "APPROVAL_REQUIRED" and meta(result)["action_digest"] != digest
        assert [e.status for e in queue.entries() if e.action_digest == digest] == ["approved"]

    run(body)
    alice.close()
    bob.close()


# -- progress, cancellation, concurrency ------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_progress_reports_each_stage(world: World, mode: str) -> None:
    app = world.app()
    stages: list[str] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        stages.append((message or "").split(":", 1)[0])

    async def body() -> None:
        async with mcp.Client(app.server, mode=mode) as client:  # type: ignore[arg-type]
            await client.call_tool("echo.say", {"message": "p"}, progress_callback=progress)

    run(body)
    assert stages == ["authorized", "sandbox_started", "done"]
    app.close()


async def _start_spin(client: mcp.Client, started: anyio.Event, group: Any) -> None:
    async def progress(value: float, total: float | None, message: str | None) -> None:
        if (message or "").startswith("sandbox_started"):
            started.set()

    async def call() -> None:
        await client.call_tool("spin.forever", {"message": "s"}, progress_callback=progress)

    group.start_soon(call)


@pytest.mark.parametrize("mode", MODES)
def test_cancellation_interrupts_a_spinning_guest(world: World, mode: str) -> None:
    app = world.app()

    async def body() -> None:
        async with mcp.Client(app.server, mode=mode) as client:  # type: ignore[arg-type]
            started = anyio.Event()
            with anyio.fail_after(30):
                async with anyio.create_task_group() as group:
                    await _start_spin(client, started, group)
                    await started.wait()
                    group.cancel_scope.cancel()
                await app.wait_idle()
            after = await client.call_tool("echo.say", {"message": "still serving"})
            assert after.is_error is False

    run(body)
    spun = outcomes(world, "spin.forever")
    assert [r["error"]["code"] for r in spun] == ["CANCELLED"]
    # The guest had about 20 s of fuel and a 60 s deadline: only the interrupt ends it early.
    assert spun[0]["usage"]["duration_us"] < 10_000_000
    app.close()


def test_calls_beyond_max_concurrency_are_busy(world: World) -> None:
    app = world.app(max_concurrency=1)

    async def body() -> None:
        async with mcp.Client(app.server) as client:
            started = anyio.Event()
            with anyio.fail_after(30):
                async with anyio.create_task_group() as group:
                    await _start_spin(client, started, group)
                    await started.wait()
                    busy = await client.call_tool("echo.say", {"message": "b"})
                    group.cancel_scope.cancel()
                await app.wait_idle()
            assert busy.is_error is True and meta(busy)["code"] == "BUSY"
            assert (await client.call_tool("echo.say", {"message": "b"})).is_error is False

    run(body)
    app.close()


# -- lock reload --------------------------------------------------------------------------


def _next_generation(world: World, entries: list[dict[str, Any]], generation: int) -> None:
    previous = lock_digest(world.lock)
    write_lock(world.lock, entries, generation=generation, previous=previous)


def test_lock_reload_sends_list_changed_and_a_refused_lock_keeps_the_generation(world: World) -> None:
    app = world.app()
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ServerNotification) or hasattr(message, "method"):
            if getattr(message, "method", "") == "notifications/tools/list_changed":
                changed.set()

    async def body() -> None:
        async with mcp.Client(app.server, mode="legacy", message_handler=on_message) as client:
            assert "spin.forever" in [t.name for t in (await client.list_tools()).tools]
            _next_generation(world, world.entries[:1], 2)  # drop the spin package
            assert await app.reload() is True
            with anyio.fail_after(10):
                await changed.wait()
            assert [t.name for t in (await client.list_tools()).tools] == ["echo.say", "echo.write"]
            write_lock(world.lock, world.entries, generation=1)  # a rollback: refused
            assert await app.reload() is False
            assert app.host.generation == 2
            assert [t.name for t in (await client.list_tools()).tools] == ["echo.say", "echo.write"]

    run(body)
    app.close()


def test_lock_reload_reaches_a_2026_listen_stream(world: World) -> None:
    app = world.app()

    async def body() -> None:
        async with mcp.Client(app.server) as client:
            async with client.listen(tools_list_changed=True) as subscription:
                _next_generation(world, world.entries[:1], 2)
                assert await app.reload() is True
                with anyio.fail_after(10):
                    event = await subscription.__aiter__().__anext__()
            assert type(event).__name__ == "ToolsListChanged"
            assert [t.name for t in (await client.list_tools()).tools] == ["echo.say", "echo.write"]

    run(body)
    app.close()


def test_stale_request_state_refused_after_reload(world: World) -> None:
    app: StockadeMCP = world.app()

    async def body() -> None:
        async with mcp.Client(app.server, elicitation_callback=accept()) as client:
            first = await client.session.call_tool("echo.write", {"message": "g"}, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult)
            _next_generation(world, world.entries, 2)
            assert await app.reload() is True
            result = await client.session.call_tool(
                "echo.write", {"message": "g"}, input_responses=_approval_answer(),
                request_state=first.request_state,
            )  # fmt: skip
        assert meta(result)["code"] == "APPROVAL_INVALID"

    run(body)
    app.close()


def test_failed_elicitation_is_approval_denied(world: World) -> None:
    app = world.app()

    async def broken(ctx: Any, params: Any) -> types.ErrorData:
        return types.ErrorData(code=-32603, message="the UI crashed")

    async def body() -> None:
        async with mcp.Client(app.server, mode="legacy", elicitation_callback=broken) as client:
            result = await client.call_tool("echo.write", {"message": "x"})
        assert result.is_error is True and meta(result)["code"] == "APPROVAL_DENIED"
        assert not [r for r in world.records() if r["kind"] == "call.intent"]

    run(body)
    app.close()


def test_progress_reports_each_http_request(tmp_path: Any) -> None:
    fixture = make_host(tmp_path, module=http_component())  # echo.say's guest sends one request
    app = StockadeMCP(
        lambda: fixture.host, options=ServeOptions(state_dir=tmp_path / "state", principal=ALICE)
    )
    stages: list[str] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        stages.append(message or "")

    async def body() -> None:
        async with mcp.Client(app.server) as client:
            await client.call_tool("echo.say", {"message": "p"}, progress_callback=progress)

    run(body)
    assert [s.split(":", 1)[0] for s in stages] == ["authorized", "sandbox_started", "http_request", "done"]
    assert "method=POST" in stages[2] and "outcome=denied" in stages[2]  # no http.allow: denied
    app.close()
