"""Trace context out: an egress request carries ``traceparent``/``tracestate`` only where
its allow entry opts in (``propagate_trace``), and then the host's, never the guest's.

Attack defended: a third party learning the host's trace ids (metadata linking its request
to everything else the call did) without the author and the reviewer choosing it, and a
plugin forging a trace context that passes for the host's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry import trace

from host import observe
from tests.observe.fetch import API, api, fetch_host, fetch_url
from tests.support.egress_session import FakeResolver, allow, get, make_session
from tests.support.otel import Otel
from tests.support.servers import LoopbackServer, respond

__all__ = ["api"]

FORGED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TRACE_HEADERS = ("traceparent", "tracestate")


def _traceparent(context: trace.SpanContext) -> str:
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def _sent(server: LoopbackServer) -> list[dict[str, str | None]]:
    return [{name: r.header(name) for name in TRACE_HEADERS} for r in server.requests]


def test_trace_context_stays_home_without_the_opt_in(tmp_path: Path, api: LoopbackServer, otel: Otel) -> None:
    fx = fetch_host(tmp_path, api)
    result = fx.host.call(fx.request("echo.fetch", input={"url": fetch_url(api)}))
    fx.host.close()
    assert result.ok, result.error
    assert len(api.requests) == 3  # a redirected request (two hops) and a second one
    assert _sent(api) == [{"traceparent": None, "tracestate": None}] * 3
    assert any(s.name == "stockade.egress" for s in otel.finished())  # recorded, just not sent


def test_opted_in_entry_sends_each_requests_egress_span_context(
    tmp_path: Path, api: LoopbackServer, otel: Otel
) -> None:
    fx = fetch_host(tmp_path, api, propagate_trace=True)
    result = fx.host.call(fx.request("echo.fetch", input={"url": fetch_url(api)}))
    fx.host.close()
    assert result.ok, result.error
    egress = sorted((s for s in otel.finished() if s.name == "stockade.egress"), key=lambda s: s.start_time or 0)
    expected = [_traceparent(s.context) for s in egress]
    # The redirect hop is the same guest request: the same span, re-decided per hop (same entry).
    assert [r["traceparent"] for r in _sent(api)] == [expected[0], expected[0], expected[1]]
    assert all(r["tracestate"] is None for r in _sent(api))  # none set: none invented


@pytest.mark.parametrize("opt_in", [False, True], ids=["default", "opted-in"])
def test_guest_forged_traceparent_never_reaches_the_server(opt_in: bool, otel: Otel) -> None:
    with LoopbackServer(routes={"/": respond(200, b"{}")}) as server:
        entry = {**allow(API, server.port), "propagate_trace": opt_in}
        session = make_session(allow=[entry], resolver=FakeResolver({API: ["127.0.0.1"]}))
        forged = [("TraceParent", FORGED), ("tracestate", "evil=1"), ("Accept", "application/json")]
        with observe.span("stockade.call") as call:
            response = session.send(get(f"http://{API}:{server.port}/", forged))
            context = trace.get_current_span().get_span_context()
        session.close()
        assert call.live and getattr(response, "status", None) == 200, response
        (received,) = server.requests
    assert received.header("accept") == "application/json"  # the rest of the guest's headers go
    assert [k for k, _ in received.headers if k.lower() in TRACE_HEADERS] == (["traceparent"] if opt_in else [])
    assert received.header("traceparent") == (
        _traceparent(context) if opt_in else None
    )
    assert received.header("tracestate") is None


def test_opted_in_entry_sends_nothing_with_tracing_off() -> None:
    with LoopbackServer(routes={"/": respond(200, b"{}")}) as server:
        entry = {**allow(API, server.port), "propagate_trace": True}
        session = make_session(allow=[entry], resolver=FakeResolver({API: ["127.0.0.1"]}))
        response = session.send(get(f"http://{API}:{server.port}/", [("traceparent", FORGED)]))
        session.close()
        (received,) = server.requests
    assert getattr(response, "status", None) == 200, response
    assert received.header("traceparent") is None
