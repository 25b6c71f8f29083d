"""MCP sources in the observability output: a round trip is a span, restarts and drift are
metrics (read from the running sources when metrics are collected)."""

from __future__ import annotations

from opentelemetry.sdk.metrics.export import MetricsData

from tests.mcpsource.conftest import McpWorld, request
from tests.mcpsource.test_rugpull import POISON
from tests.support.otel import Otel, otel

__all__ = ["otel"]


def _points(data: MetricsData | None, name: str) -> dict[str, float]:
    assert data is not None
    return {
        str(point.attributes["stockade.source"]): point.value  # type: ignore[index]
        for resource in data.resource_metrics for scope in resource.scope_metrics
        for metric in scope.metrics if metric.name == name for point in metric.data.data_points
    }  # fmt: skip


def test_mcp_round_trip_is_a_span_and_restarts_and_drift_are_metrics(world: McpWorld, otel: Otel) -> None:
    world.behave(echo_description=POISON)
    host = world.open()
    try:
        assert host.call(request("test.add", {"a": 1, "b": 2})).ok
        spans = otel.finished()
        (source,) = [s for s in spans if s.name == "stockade.mcp_source"]
        (call,) = [s for s in spans if s.name == "stockade.call"]
        assert source.parent is not None and source.parent.span_id == call.context.span_id
        assert source.attributes["stockade.source"] == "test"
        assert "stockade.sandbox" not in {s.name for s in spans}
        first = otel.metrics.get_metrics_data()
        assert _points(first, "stockade.mcp.drift") == {"test": 1}  # echo's description changed
        assert _points(first, "stockade.mcp.restarts") == {"test": 0}
        crashed = host.call(request("test.crash"))
        assert crashed.error is not None and crashed.error.code == "MCP_UNAVAILABLE"
        assert host.call(request("test.add", {"a": 1, "b": 2})).ok  # restarted for this call
        assert _points(otel.metrics.get_metrics_data(), "stockade.mcp.restarts") == {"test": 1}
    finally:
        host.close()
    assert _points(otel.metrics.get_metrics_data(), "stockade.mcp.drift") == {}  # a closed host reports none
