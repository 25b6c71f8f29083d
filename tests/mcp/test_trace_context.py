"""``stockade serve`` continues the trace of an MCP client (W3C trace context in ``_meta``).

The official SDK client injects ``traceparent`` into a request's ``_meta`` from its current
span (SEP-414) on the JSON-RPC path (the 2025-11-25 era here); a client of either era may
send it explicitly; over Streamable HTTP a ``traceparent`` header counts when ``_meta``
has none. The spans land in the OTel SDK's in-memory exporter
(tests/support/otel.py).
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import anyio
import httpx2
import mcp
import pytest
import uvicorn
from mcp.client.streamable_http import streamable_http_client
from opentelemetry.propagate import inject
from opentelemetry.sdk.trace import ReadableSpan

from host.mcp.transport import http_app
from tests.mcp.conftest import World
from tests.support.otel import Otel, otel

__all__ = ["otel"]

MODES = ["legacy", "auto"]


def _served(otel: Otel) -> tuple[ReadableSpan, ReadableSpan]:
    spans = otel.finished()
    (served,) = [s for s in spans if s.name == "stockade.mcp.tools_call"]
    (call,) = [s for s in spans if s.name == "stockade.call"]
    assert call.parent is not None and call.parent.span_id == served.context.span_id
    return served, call


def test_serve_continues_the_trace_the_sdk_client_injects(world: World, otel: Otel) -> None:
    app = world.app()
    agent = otel.tracer_provider.get_tracer("agent")
    seen: dict[str, int] = {}

    async def body() -> None:
        async with mcp.Client(app.server, mode="legacy") as client:
            with agent.start_as_current_span("agent.turn") as turn:
                seen["trace"] = turn.get_span_context().trace_id
                result = await client.call_tool("echo.say", {"message": "hi"})
        assert result.is_error is False

    anyio.run(body)
    app.close()
    served, call = _served(otel)
    assert served.context.trace_id == call.context.trace_id == seen["trace"]
    assert served.parent is not None and served.parent.is_remote  # from _meta, not this process's context
    (outcome,) = [r for r in world.records() if r["kind"] == "call.outcome"]
    assert outcome["trace_id"] == format(seen["trace"], "032x")


@pytest.mark.parametrize("mode", MODES)
def test_serve_continues_a_traceparent_in_meta_in_both_eras(world: World, otel: Otel, mode: str) -> None:
    app = world.app()
    with otel.tracer_provider.get_tracer("agent").start_as_current_span("agent.turn") as turn:
        carrier: dict[str, Any] = {}
        inject(carrier)
        sent = turn.get_span_context()
    carrier["tracestate"] = "vendor=opaque"

    async def body() -> None:  # outside the agent's span: only _meta can carry the trace
        async with mcp.Client(app.server, mode=mode) as client:  # type: ignore[arg-type]
            result = await client.call_tool("echo.say", {"message": "hi"}, meta=carrier)  # type: ignore[arg-type]
        assert result.is_error is False

    anyio.run(body)
    app.close()
    served, call = _served(otel)
    assert served.context.trace_id == call.context.trace_id == sent.trace_id
    assert served.parent is not None and served.parent.span_id == sent.span_id and served.parent.is_remote
    assert served.context.trace_state.get("vendor") == "opaque"


def test_serve_starts_a_new_trace_for_a_malformed_traceparent(world: World, otel: Otel) -> None:
    app = world.app()

    async def body() -> None:
        async with mcp.Client(app.server, mode="legacy") as client:
            meta: Any = {"traceparent": "00-not-a-trace-01"}
            assert (await client.call_tool("echo.say", {"message": "hi"}, meta=meta)).is_error is False

    anyio.run(body)
    app.close()
    served, _ = _served(otel)
    assert served.parent is None


class _InProcessHttp:
    """The Streamable HTTP app of ``stockade serve`` on a loopback port, in this process
    (so its spans reach the in-memory exporter): uvicorn in a thread."""

    def __init__(self, world: World) -> None:
        self.app = world.app()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        asgi = http_app(self.app, host="127.0.0.1", port=self.port, verifier=None)
        self._server = uvicorn.Server(uvicorn.Config(asgi, log_level="warning", lifespan="on"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    def __enter__(self) -> str:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        return f"http://127.0.0.1:{self.port}/mcp"

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)
        self._sock.close()
        self.app.close()


def test_serve_over_http_continues_a_traceparent_header(world: World, otel: Otel) -> None:
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with _InProcessHttp(world) as url:

        async def body() -> None:
            async with httpx2.AsyncClient(headers={"traceparent": parent}) as http:
                transport = streamable_http_client(url, http_client=http)
                async with mcp.Client(transport, mode="legacy") as client:  # no current span: no _meta
                    assert (await client.call_tool("echo.say", {"message": "hi"})).is_error is False

        anyio.run(body)
    served, call = _served(otel)
    assert format(served.context.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"
    assert served.parent is not None and format(served.parent.span_id, "016x") == "b7ad6b7169203331"
    assert call.context.trace_id == served.context.trace_id


def test_tools_list_makes_no_spans_of_its_own(world: World, otel: Otel) -> None:
    app = world.app()

    async def body() -> None:
        async with mcp.Client(app.server, mode="legacy") as client:
            assert (await client.list_tools()).tools

    anyio.run(body)
    app.close()
    assert [s.name for s in otel.finished() if s.name.startswith("stockade.")] == []
