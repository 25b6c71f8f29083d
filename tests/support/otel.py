"""The OTel SDK with in-memory exporters, switched on per test (`otel` fixture)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from host import observe


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
