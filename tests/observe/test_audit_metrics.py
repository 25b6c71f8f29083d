"""The audit log's group commit in the metrics: records per fsync, fsync latency, failures."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path
from typing import Any

import pytest

import host.audit.log as audit_mod
from host.audit.log import AuditLog
from host.errors import AuditUnavailable
from tests.support.otel import Otel, otel

__all__ = ["otel"]


def _metric(otel: Otel, name: str) -> list[Any]:
    data = otel.metrics.get_metrics_data()
    assert data is not None
    return [point for resource in data.resource_metrics for scope in resource.scope_metrics
            for metric in scope.metrics if metric.name == name for point in metric.data.data_points]


def test_group_commit_batches_sum_to_the_records_appended(tmp_path: Path, otel: Otel,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    fsyncs: list[int] = []
    real = os.fsync
    monkeypatch.setattr(audit_mod.os, "fsync", lambda fd: (fsyncs.append(fd), real(fd))[1])
    log = AuditLog(tmp_path / "audit.log")  # durability full: every append waits for an fsync
    threads = [threading.Thread(target=lambda: [log.append("t", {"n": i}) for i in range(25)]) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    (batches,) = _metric(otel, "stockade.audit.batch.records")
    (latency,) = _metric(otel, "stockade.audit.fsync.duration")
    assert batches.sum == 100  # every record made durable by exactly one fsync
    assert batches.count == latency.count == len(fsyncs) <= 100
    assert latency.sum > 0
    log.close()


def test_failed_fsync_is_counted(tmp_path: Path, otel: Otel, monkeypatch: pytest.MonkeyPatch) -> None:
    with AuditLog(tmp_path / "audit.log") as log:
        log.append("a", {})

        def broken(fd: int) -> None:
            raise OSError(errno.EIO, "EIO")

        monkeypatch.setattr(audit_mod.os, "fsync", broken)
        with pytest.raises(AuditUnavailable):
            log.append("b", {})
        monkeypatch.undo()
        (failures,) = _metric(otel, "stockade.audit.fsync.failures")
        assert failures.value == 1
        (batches,) = _metric(otel, "stockade.audit.batch.records")
        assert batches.sum == 1  # only the record that was made durable
