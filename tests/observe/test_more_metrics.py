"""The metrics of the ready-instance pools and of state-store failures, scraped from the
Prometheus endpoint and parsed with ``prometheus_client``'s parser."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from host import observe
from host.audit.log import AuditLog
from host.config import HostConfig
from host.egress.port import DenyAllEgress
from host.errors import StoreUnavailable
from host.observe.prometheus import MetricsEndpoint
from host.runtime import Runtime, SandboxLimits
from host.runtime import ready as ready_module
from host.store import LocalStore
from host.store.local import LOCK_FILE
from tests.observe.fetch import API, api, fetch_host, fetch_url
from tests.support import wat
from tests.support.otel import Samples, metrics_endpoint, scrape
from tests.support.servers import LoopbackServer

__all__ = ["api", "metrics_endpoint"]

LIMITS = SandboxLimits(fuel=50_000_000, memory_bytes=16 << 20, timeout_ms=2_000, max_log_bytes=4096)


def _ready(samples: Samples) -> float:
    return samples[("stockade_sandbox_ready_instances", frozenset())]


def test_ready_instances_gauge_counts_what_the_pools_hold_now(
    tmp_path: Path, metrics_endpoint: MetricsEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ready_module, "POOL_THRESHOLD_S", 0.0)  # WAT instantiates too fast to pool
    assert _ready(scrape(metrics_endpoint)) == 0
    module = wat.counter_component()
    with Runtime(HostConfig(state_dir=tmp_path / "state", ready_instances=3)) as rt:
        loaded = rt.load(module, sha256=wat.sha256(module), name="wat")
        for _ in range(ready_module.SAMPLES):  # judged on demand, then pooled and filled
            rt.run(loaded, tool="t", input_json="{}", limits=LIMITS, egress=DenyAllEgress(),
                   secret_available=lambda _name: False)  # fmt: skip
        deadline = time.monotonic() + 10
        while rt._ready.ready_total() < 3:
            assert time.monotonic() < deadline, "the pool was never filled"
            time.sleep(0.005)
        assert _ready(scrape(metrics_endpoint)) == 3
    assert _ready(scrape(metrics_endpoint)) == 0  # closed: drained


def test_a_store_refused_for_a_held_state_dir_is_a_counted_store_error(
    tmp_path: Path, metrics_endpoint: MetricsEndpoint
) -> None:
    state = tmp_path / "state"
    LocalStore(state, audit=AuditLog(tmp_path / "audit.log"), owns_audit=True).close()
    # Another process holding the state dir's lock: a flock on its own open file (within
    # one process the store shares its lock, so a second LocalStore would not do).
    fd = os.open(state / LOCK_FILE, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(StoreUnavailable, match="in use by another host process"):
            LocalStore(state, audit=AuditLog(tmp_path / "audit2.log"), owns_audit=True)
    finally:
        os.close(fd)
    labels = frozenset({("stockade_store_backend", "local"), ("stockade_store_operation", "open the store"),
                        ("error_type", "STORE_UNAVAILABLE")})  # fmt: skip
    assert scrape(metrics_endpoint)[("stockade_store_errors_total", labels)] == 1


def test_a_sampled_out_call_makes_no_span_and_is_still_measured(tmp_path: Path, api: LoopbackServer) -> None:
    exporter = InMemorySpanExporter()
    tracer = TracerProvider(sampler=ALWAYS_OFF)
    tracer.add_span_processor(SimpleSpanProcessor(exporter))
    served = MetricsEndpoint("127.0.0.1", 0)
    meters = MeterProvider(metric_readers=[served.reader])
    observe.enable(tracer_provider=tracer, meter_provider=meters)
    try:
        fx = fetch_host(tmp_path, api)
        result = fx.host.call(fx.request("echo.fetch", input={"url": fetch_url(api)}))
        fx.host.close()
        samples = scrape(served)
    finally:
        observe.disable()
        meters.shutdown()
        tracer.shutdown()
        served.close()
    assert result.ok, result.error
    assert exporter.get_finished_spans() == ()
    assert samples[("stockade_calls_total", frozenset({("stockade_tool", "echo.fetch"),
                                                       ("stockade_outcome", "ok")}))] == 1  # fmt: skip
    assert samples[("stockade_sandbox_fuel_sum", frozenset({("stockade_tool", "echo.fetch")}))] == result.usage.fuel
    assert samples[("stockade_egress_requests_total", frozenset({("server_address", API),
                                                                 ("stockade_egress_outcome", "ok")}))] == 2  # fmt: skip
    for stage in ("prepare", "rate_limit", "secrets", "sandbox", "egress", "output", "audit.append"):
        key = ("stockade_stage_duration_seconds_count", frozenset({("stockade_stage", f"stockade.{stage}")}))
        assert samples[key] == (2 if stage == "egress" else 1), stage
