"""The abandonable lookup pool under DNS resolution."""

from __future__ import annotations

import threading

import pytest

import host.egress._lookups as lookups
from host.egress._lookups import LookupBusy, LookupPool, LookupTimeout


def test_result_and_error_are_handed_back() -> None:
    pool = LookupPool(2)
    assert pool.run(lambda: ["93.184.216.34"], timeout=5) == ["93.184.216.34"]
    error = OSError("NXDOMAIN")

    def fail() -> list[str]:
        raise error

    with pytest.raises(OSError) as caught:
        pool.run(fail, timeout=5)
    assert caught.value is error


def test_idle_worker_is_reused() -> None:
    pool = LookupPool(4)
    first = pool.run(threading.get_ident, timeout=5)
    assert pool.wait_quiet(5)
    assert pool.run(threading.get_ident, timeout=5) == first


def test_hung_lookup_is_abandoned_and_full_pool_refuses_at_once() -> None:
    pool = LookupPool(1)
    release = threading.Event()
    with pytest.raises(LookupTimeout):
        pool.run(lambda: release.wait(10), timeout=0.01)
    with pytest.raises(LookupBusy):
        pool.run(lambda: "never runs", timeout=5)
    release.set()
    assert pool.wait_quiet(10)
    assert pool.run(lambda: "runs", timeout=5) == "runs"


def test_idle_workers_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lookups, "IDLE_EXIT_S", 0.01)
    pool = LookupPool(1)
    worker: list[threading.Thread] = []
    pool.run(lambda: worker.append(threading.current_thread()), timeout=5)
    worker[0].join(5)
    assert not worker[0].is_alive()
    assert pool.run(lambda: "a new worker", timeout=5) == "a new worker"


def test_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="size"):
        LookupPool(0)
