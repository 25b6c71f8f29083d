"""Observability options of ``stockade serve``: OTLP export, the Prometheus endpoint, logs.

- Traces and metrics go to an OpenTelemetry collector over OTLP/HTTP when the standard
  environment names one (``OTEL_EXPORTER_OTLP_ENDPOINT``, or the per-signal
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``); every other ``OTEL_*`` setting of the exporter
  (headers, timeout, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``) is read by the
  OpenTelemetry SDK itself.
- ``--metrics-port N`` serves the same metrics as Prometheus text at
  ``http://--metrics-host:N/metrics`` (0 picks a free port; the URL is printed on stderr).
  The endpoint has no authentication, so, as the MCP endpoint without tokens, it binds
  only to a loopback address.
- ``--log-format json``: stderr log lines as JSON objects with the trace id
  (:mod:`host.observe.logs`), repeated messages rate-limited.

Neither needs the ``otel`` extra until it is asked for; without it a request for either
fails with OTEL_UNAVAILABLE before the server starts.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any, Final

from host import observe
from sdk.commands._common import UsageFailed

__all__ = ["add_observe_options", "observability"]

OTLP_ENDPOINTS: Final = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def add_observe_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--metrics-port``, ``--metrics-host`` and ``--log-format``."""
    group = parser.add_argument_group("observability (the otel extra: pip install 'stockade[otel]')")
    group.add_argument(
        "--metrics-port", type=int, default=None, metavar="N",
        help="serve Prometheus metrics at /metrics on this port (0: any free port; default: none)",
    )  # fmt: skip
    group.add_argument(
        "--log-format", choices=("text", "json"), default="text",
        help="stderr log lines: text, or one JSON object per line with the trace id (default: text)",
    )  # fmt: skip
    group.add_argument(
        "--metrics-host", default="127.0.0.1", metavar="ADDR",
        help="the metrics endpoint's address, loopback only (default: 127.0.0.1)",
    )  # fmt: skip


@contextlib.contextmanager
def observability(args: argparse.Namespace, env: Any = os.environ) -> Iterator[None]:
    """Turn :mod:`host.observe` on for the server's lifetime, if asked to; flush on exit.

    Raises:
        UsageFailed: METRICS_BIND (a non-loopback ``--metrics-host``), OTEL_UNAVAILABLE
            (the extra is missing).
    """
    if args.log_format == "json":
        _json_logs()
    otlp = any(env.get(name) for name in OTLP_ENDPOINTS)
    if args.metrics_port is None and not otlp:
        yield
        return
    if args.metrics_port is not None:
        _check_metrics_bind(args.metrics_host)
    try:
        parts = _sdk()
    except ImportError as exc:
        raise UsageFailed(
            "OTEL_UNAVAILABLE", f"metrics and traces need the optional extra: {exc}",
            hint="pip install 'stockade[otel]'",
        ) from None  # fmt: skip
    with contextlib.ExitStack() as stack:
        readers: list[Any] = []
        if args.metrics_port is not None:
            try:
                endpoint = parts["MetricsEndpoint"](args.metrics_host, args.metrics_port)
            except OSError as exc:
                raise UsageFailed(
                    "METRICS_BIND", f"cannot serve metrics on {args.metrics_host}:{args.metrics_port}: {exc}",
                    hint="choose a free --metrics-port (0 picks one)",
                ) from None  # fmt: skip
            stack.callback(endpoint.close)
            readers.append(endpoint.reader)
            print(f"stockade serve: metrics on {endpoint.url}", file=sys.stderr, flush=True)
        named = {} if env.get("OTEL_SERVICE_NAME") else {"service.name": "stockade"}
        resource = parts["Resource"].create(named)
        tracer_provider = parts["TracerProvider"](resource=resource)
        if otlp:
            tracer_provider.add_span_processor(parts["BatchSpanProcessor"](parts["OTLPSpanExporter"]()))
            readers.append(parts["PeriodicExportingMetricReader"](parts["OTLPMetricExporter"]()))
            # Global as well, so the MCP SDK's own server spans are exported with Stockade's.
            parts["set_tracer_provider"](tracer_provider)
        # No exemplars: the Prometheus text format drops them, and offering each measurement
        # to a reservoir is a third of what recording one costs.
        meter_provider = parts["MeterProvider"](
            metric_readers=readers, resource=resource, exemplar_filter=parts["AlwaysOffExemplarFilter"]()
        )
        stack.callback(tracer_provider.shutdown)  # flushes the batch of spans not yet sent
        stack.callback(meter_provider.shutdown)
        observe.enable(tracer_provider=tracer_provider, meter_provider=meter_provider)
        stack.callback(observe.disable)
        yield


def _json_logs() -> None:
    """One JSON object per stderr line, repeated messages rate-limited (the root logger's
    handler; serve's own text set-up then finds it configured and adds none)."""
    from host.mcp.limits import RateLimitedLog
    from host.observe.logs import JsonFormatter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RateLimitedLog())
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)


def _check_metrics_bind(host: str) -> None:
    from host.mcp.transport import is_loopback

    if not is_loopback(host):
        raise UsageFailed(
            "METRICS_BIND",
            f"refusing to serve metrics on {host!r}: the endpoint has no authentication, and tool "
            "names, error rates and egress hosts are for the operator only",
            hint="bind to 127.0.0.1 and let a local agent (an OpenTelemetry collector, a Prometheus "
            "agent) or an authenticating reverse proxy scrape it; or export with OTLP",
        )


def _sdk() -> dict[str, Any]:
    """The OpenTelemetry SDK pieces serve uses (ImportError without the otel extra)."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace import set_tracer_provider

    from host.observe.prometheus import MetricsEndpoint

    return {
        "OTLPMetricExporter": OTLPMetricExporter, "OTLPSpanExporter": OTLPSpanExporter,
        "MeterProvider": MeterProvider, "AlwaysOffExemplarFilter": AlwaysOffExemplarFilter,
        "PeriodicExportingMetricReader": PeriodicExportingMetricReader,
        "Resource": Resource, "TracerProvider": TracerProvider, "BatchSpanProcessor": BatchSpanProcessor,
        "set_tracer_provider": set_tracer_provider, "MetricsEndpoint": MetricsEndpoint,
    }  # fmt: skip
