"""The metrics of the ready-instance pools and of state-store failures, scraped from the
Prometheus endpoint and parsed with ``prometheus_client``'s parser."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

import pytest

from host.audit import AuditLog
from host.config import HostConfig
from host.egress.port import DenyAllEgress
from host.errors import StoreUnavailable
from host.observe.prometheus import MetricsEndpoint
from host.runtime import Runtime, SandboxLimits
from host.runtime import ready as ready_module
from host.store import LocalStore
from host.store.local import LOCK_FILE
from tests.support import wat
from tests.support.otel import Samples, metrics_endpoint, scrape

__all__ = ["metrics_endpoint"]

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
