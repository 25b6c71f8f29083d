"""Cancelling an in-flight call to a stdio MCP source, and its concurrency cap (BUSY).

The server's ``block`` tool signals through FIFOs when it starts and when the client
cancels it, so the tests know the call is in flight without sleeping.
"""

from __future__ import annotations

import threading
from typing import Any

from host import CallResult, Host
from host.mcpsource.pinning import pin_source
from sdk.review.lockfile import add_mcp
from tests.mcpsource.conftest import REVIEW, McpWorld, declaration, request
from tests.mcpsource.fifos import Signal


def _blocking(world: McpWorld, **limits: Any) -> tuple[Signal, Signal]:
    started, stopped = Signal(world.root / "started"), Signal(world.root / "cancelled")
    world.behave(started_fifo=str(started.path), cancelled_fifo=str(stopped.path))
    # A long call timeout: on a loaded machine the call must end by cancellation, not by timeout.
    decl = declaration(world.root, **({"call_timeout_ms": 120_000} | limits))
    pinned = pin_source(decl, state_dir=world.root / "s2", secrets=world.secrets, review=REVIEW)
    add_mcp(world.lock, pinned.pin)
    return started, stopped


def _call_in_thread(host: Host, tool: str, cancel: threading.Event) -> tuple[threading.Thread, list[CallResult]]:
    results: list[CallResult] = []
    thread = threading.Thread(target=lambda: results.append(host.call(request(tool), cancel=cancel)))
    thread.start()
    return thread, results


def test_cancelled_call_sends_notifications_cancelled_and_keeps_the_server(world: McpWorld) -> None:
    started, stopped = _blocking(world)
    host = world.open()
    pid = host._mcp["test"]._conn.pid  # type: ignore[union-attr]
    cancel = threading.Event()
    thread, results = _call_in_thread(host, "test.block", cancel)
    assert started.wait(), "the server never started the call"
    cancel.set()
    thread.join(timeout=30)
    (result,) = results
    assert not result.ok and result.error is not None and result.error.code == "CANCELLED"
    assert stopped.wait(), "the server was never told the call was cancelled"
    assert host._mcp["test"]._conn.pid == pid  # type: ignore[union-attr]  # not killed: cancelled
    assert host.call(request("test.echo", {"message": "after"})).ok
    assert world.records("call.outcome")[-2]["error"]["code"] == "CANCELLED"


def test_call_over_max_concurrent_calls_is_busy(world: McpWorld) -> None:
    started, stopped = _blocking(world, max_concurrent_calls=1)
    host = world.open()
    cancel = threading.Event()
    thread, results = _call_in_thread(host, "test.block", cancel)
    assert started.wait(), "the server never started the call"
    busy = host.call(request("test.echo", {"message": "second"}))  # the cap is 1: refused, not queued
    assert not busy.ok and busy.error is not None
    assert busy.error.code == "BUSY"
    assert busy.error.details == {"source": "test", "max_concurrent_calls": 1}
    assert "max_concurrent_calls" in busy.error.hint
    cancel.set()
    thread.join(timeout=30)
    assert [r.error.code for r in results if r.error is not None] == ["CANCELLED"]
    assert stopped.wait()
    assert host.call(request("test.echo", {"message": "slot free"})).ok
    codes = [r.get("error", {}).get("code") for r in world.records("call.outcome")]
    assert codes[-3:] == ["BUSY", "CANCELLED", None]
