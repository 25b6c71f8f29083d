"""The span tree of a call (host.observe), from the OTel SDK's in-memory exporter.

Real host, real WAT guests, a real loopback HTTP server, a real secrets store: the guest
makes two egress requests (the first redirected), and every exported span is scanned for
the staged secret and for the input.
"""

from __future__ import annotations

import json
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from tests.observe.fetch import API, CANARY, SECRET, api, fetch_host, fetch_url
from tests.support.otel import Otel
from tests.support.servers import LoopbackServer

__all__ = ["api"]

def _tree(spans: list[ReadableSpan]) -> dict[str, list[str]]:
    """Span name → the names of its children, in start order."""
    by_id = {s.context.span_id: s for s in spans}
    tree: dict[str, list[str]] = {s.name: [] for s in spans}
    for s in sorted(spans, key=lambda s: s.start_time or 0):
        if s.parent is not None and s.parent.span_id in by_id:
            tree[by_id[s.parent.span_id].name].append(s.name)
    return tree


def _one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    (found,) = [s for s in spans if s.name == name]
    return found


def _exported_text(spans: list[ReadableSpan]) -> str:
    """Everything a span exporter sends: names, attributes, events, status, resource."""
    return "\n".join(span.to_json() for span in spans)


def test_call_with_two_egress_requests_one_redirected_is_one_span_tree(
    tmp_path: Path, api: LoopbackServer, otel: Otel
) -> None:
    fx = fetch_host(tmp_path, api)
    result = fx.host.call(fx.request("echo.fetch", input={"url": fetch_url(api)}))
    fx.host.close()
    assert result.ok, result.error
    spans = otel.finished()
    tree = _tree(spans)
    assert tree["stockade.call"] == [
        "stockade.prepare", "stockade.rate_limit", "stockade.secrets", "stockade.sandbox",
        "stockade.output", "stockade.audit.append",
    ]
    assert tree["stockade.prepare"] == ["stockade.registry", "stockade.policy", "stockade.tool_policy",
                                        "stockade.input"]
    assert tree["stockade.sandbox"] == ["stockade.egress", "stockade.egress"]
    assert len({s.context.trace_id for s in spans}) == 1
    call = _one(spans, "stockade.call")
    assert call.parent is None
    assert {k: call.attributes[k] for k in ("stockade.tool", "stockade.version", "stockade.effect",
                                            "stockade.risk", "stockade.outcome")} == {
        "stockade.tool": "echo.fetch", "stockade.version": "1.0.0", "stockade.effect": "read",
        "stockade.risk": "low", "stockade.outcome": "ok"}
    assert call.attributes["stockade.action_digest"] == result.action_digest
    assert call.attributes["stockade.audit.record"] == result.audit_id
    assert call.attributes["stockade.fuel_used"] == result.usage.fuel > 0
    first, second = sorted((s for s in spans if s.name == "stockade.egress"), key=lambda s: s.start_time or 0)
    assert first.kind is SpanKind.CLIENT
    assert dict(first.attributes or {}) == {
        "http.request.method": "GET", "server.address": API, "http.response.status_code": 200,
        "stockade.egress.outcome": "ok", "stockade.egress.redirects": 1,
        "stockade.egress.bytes_sent": 0, "stockade.egress.bytes_received": 2,
    }
    assert [(e.name, dict(e.attributes or {})) for e in first.events] == [
        ("stockade.egress.redirect",
         {"server.address": API, "http.request.method": "GET", "http.response.status_code": 302})]
    assert second.attributes["stockade.egress.redirects"] == 0 and not second.events
    # The outcome record names the trace, so a person goes from the record to the trace.
    records = [json.loads(line) for line in fx.audit_path.read_text().splitlines()]
    (outcome,) = [r for r in records if r["kind"] == "call.outcome"]
    assert outcome["trace_id"] == format(call.context.trace_id, "032x")


def test_no_span_carries_the_staged_secret_or_the_input(
    tmp_path: Path, api: LoopbackServer, otel: Otel
) -> None:
    fx = fetch_host(tmp_path, api)
    assert fx.host.call(fx.request("echo.fetch", input={"url": fetch_url(api)})).ok
    fx.host.close()
    assert any("authorization" in h[0].lower() and SECRET in h[1]
               for r in api.requests for h in r.headers)  # the secret really was staged and sent
    text = _exported_text(otel.finished())
    assert SECRET not in text
    assert CANARY not in text and "/v1/go" not in text and "/v1/done" not in text


def test_policy_denied_call_has_no_sandbox_span(tmp_path: Path, api: LoopbackServer, otel: Otel) -> None:
    fx = fetch_host(tmp_path, api, allow=())
    result = fx.host.call(fx.request("echo.fetch", input={"url": fetch_url(api)}))
    fx.host.close()
    assert result.error is not None and result.error.code == "POLICY_DENIED"
    spans = otel.finished()
    names = {s.name for s in spans}
    assert "stockade.sandbox" not in names and "stockade.egress" not in names
    assert "stockade.secrets" not in names
    assert _tree(spans)["stockade.prepare"] == ["stockade.registry", "stockade.policy"]
    policy = _one(spans, "stockade.policy")
    assert policy.status.status_code is StatusCode.ERROR and policy.status.description is None
    assert policy.attributes["error.type"] == "POLICY_DENIED"
    call = _one(spans, "stockade.call")
    assert call.attributes["stockade.outcome"] == "POLICY_DENIED"
    assert call.attributes["error.type"] == "POLICY_DENIED"
    assert call.attributes["stockade.audit.record"] == result.audit_id
    assert api.requests == []
    assert CANARY not in _exported_text(spans)


def test_approval_required_call_then_its_approved_execution(
    tmp_path: Path, api: LoopbackServer, otel: Otel
) -> None:
    fx = fetch_host(tmp_path, api, allow=("tool.call:echo.fetch",), ask=("echo.use",))
    refused = fx.host.call(fx.request("echo.fetch", input={"url": fetch_url(api)}))
    assert refused.error is not None and refused.error.code == "APPROVAL_REQUIRED"
    spans = otel.finished()
    assert "stockade.sandbox" not in {s.name for s in spans}
    assert _one(spans, "stockade.call").attributes["stockade.outcome"] == "APPROVAL_REQUIRED"
    otel.spans.clear()
    plan = fx.host.prepare(fx.request("echo.fetch", input={"url": fetch_url(api)}))
    result = fx.host.execute(plan, fx.host.approve(plan))
    fx.host.close()
    assert result.ok, result.error
    spans = otel.finished()
    tree = _tree(spans)
    execute = _one(spans, "stockade.call")
    assert execute.attributes["stockade.entry"] == "execute"
    assert tree["stockade.call"][:3] == ["stockade.prepare", "stockade.approval", "stockade.rate_limit"]
    assert "stockade.sandbox" in tree["stockade.call"]
    assert CANARY not in _exported_text(spans) and SECRET not in _exported_text(spans)


def test_host_call_continues_the_callers_trace(tmp_path: Path, api: LoopbackServer, otel: Otel) -> None:
    fx = fetch_host(tmp_path, api, allow=())
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    fx.host.call(fx.request("echo.fetch", input={"url": fetch_url(api)}), trace_context={"traceparent": parent})
    fx.host.close()
    call = _one(otel.finished(), "stockade.call")
    assert format(call.context.trace_id, "032x") == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert call.parent is not None and format(call.parent.span_id, "016x") == "00f067aa0ba902b7"
    assert call.parent.is_remote


def test_egress_does_not_forward_the_trace_to_third_parties(
    tmp_path: Path, api: LoopbackServer, otel: Otel
) -> None:
    """Trace ids are metadata about the caller: the host adds no trace header to egress."""
    fx = fetch_host(tmp_path, api)
    parent = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "a=b"}
    assert fx.host.call(fx.request("echo.fetch", input={"url": fetch_url(api)}), trace_context=parent).ok
    fx.host.close()
    assert len(api.requests) == 3  # two requests, the first redirected once
    sent = {name.lower() for r in api.requests for name, _ in r.headers}
    assert not sent & {"traceparent", "tracestate", "baggage"}
    assert "4bf92f3577b34da6a3ce929d0e0e4736" not in repr([r.headers for r in api.requests])


def test_prepare_outside_a_call_makes_no_stray_root_spans(
    tmp_path: Path, api: LoopbackServer, otel: Otel
) -> None:
    """Host.prepare alone (the MCP server's tools/list runs one per tool) records nothing;
    nor do the audit records of opening the lock."""
    fx = fetch_host(tmp_path, api)
    assert fx.host.prepare(fx.request("echo.fetch", input={"url": fetch_url(api)})).status == "ready"
    fx.host.close()
    assert otel.finished() == []
