"""A Prometheus text endpoint over the host's OpenTelemetry metrics (``stockade[otel]``).

The metrics are OpenTelemetry instruments (:mod:`host.observe._live`); the OpenTelemetry
Prometheus exporter reads them on each scrape into a registry of its own (not the process's
global one), which ``prometheus_client``'s HTTP server serves at ``/metrics``. Names follow
the exporter's translation: ``stockade.calls`` becomes ``stockade_calls_total``, dots in
label names become underscores, seconds get ``_seconds``.

The endpoint has no authentication: bind it only to a loopback address (``stockade serve
--metrics-port`` refuses any other, as the MCP endpoint refuses one without tokens).

Example::

    endpoint = MetricsEndpoint("127.0.0.1", 9464)
    observe.enable(meter_provider=MeterProvider(metric_readers=[endpoint.reader]))
"""

from __future__ import annotations

import threading
from typing import Any, final

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from prometheus_client import CollectorRegistry, start_http_server

__all__ = ["MetricsEndpoint"]


@final
class MetricsEndpoint:
    """``/metrics`` on ``host:port`` (0: a free port) until :meth:`close`.

    Raises:
        OSError: the address cannot be bound.
    """

    __slots__ = ("_server", "_thread", "host", "reader", "registry")

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.registry = CollectorRegistry(auto_describe=True)
        # No target_info series (the resource: host name, process) and no otel_scope_* labels
        # (every instrument is Stockade's): series carry only the labels host.observe documents.
        self.reader = PrometheusMetricReader(
            disable_target_info=True, scope_info_enabled=False, registry=self.registry
        )
        server: Any
        thread: threading.Thread
        server, thread = start_http_server(port, addr=host, registry=self.registry)
        self._server, self._thread = server, thread

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The scrape URL."""
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
