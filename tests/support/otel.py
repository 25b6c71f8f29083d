"""The OTel SDK with in-memory exporters, switched on per test (`otel` fixture), and the
Prometheus endpoint over the SDK's metrics (`metrics_endpoint` fixture, :func:`scrape`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx2
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from host import observe
from host.observe.prometheus import MetricsEndpoint

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@dataclass
class Otel:
    """What the SDK exported while observability was on."""

    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())


@pytest.fixture
def otel() -> Iterator[Otel]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    observe.enable(tracer_provider=tracer_provider, meter_provider=meter_provider)
    try:
        yield Otel(exporter, reader, tracer_provider, meter_provider)
    finally:
        observe.disable()
        tracer_provider.shutdown()
        meter_provider.shutdown()


@pytest.fixture
def metrics_endpoint() -> Iterator[MetricsEndpoint]:
    """Observability on, its metrics served at a loopback ``/metrics`` (no span exporter)."""
    served = MetricsEndpoint("127.0.0.1", 0)
    meters = MeterProvider(metric_readers=[served.reader])
    tracer = TracerProvider()
    observe.enable(tracer_provider=tracer, meter_provider=meters)
    try:
        yield served
    finally:
        observe.disable()
        meters.shutdown()
        tracer.shutdown()
        served.close()


def scrape(endpoint: MetricsEndpoint) -> Samples:
    """GET ``/metrics`` and parse it with ``prometheus_client``'s parser: sample (name,
    labels) → value."""
    response = httpx2.get(endpoint.url, timeout=10)
    assert response.status_code == 200
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }
