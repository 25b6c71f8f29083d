"""Calls from many threads at once never share state or cross results."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from wasmtime.component import _types as wasmtime_component_types

from host.config import HostConfig
from host.egress.port import HttpFailure, HttpRequest, HttpResponse
from host.errors import SandboxFuelExhausted, SandboxTrap
from host.runtime import Runtime, SandboxLimits
from host.runtime._compat import _ThreadLocalSet
from tests.support import wat

THREADS = 8
CALLS = 40


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    runtime = Runtime(HostConfig(state_dir=tmp_path_factory.mktemp("state")))
    yield runtime
    runtime.close()


@pytest.fixture
def busy_switching() -> Iterator[None]:
    """Switch threads as often as CPython allows, to shake out races."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(previous)


def _hammer(worker: Callable[[int], None]) -> list[BaseException]:
    errors: list[BaseException] = []
    barrier = threading.Barrier(THREADS)

    def run(k: int) -> None:
        barrier.wait()
        try:
            worker(k)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_results_never_cross_between_threads(rt: Runtime, busy_switching: None) -> None:
    loaded = rt.load(wat.echo_component(), sha256=wat.sha256(wat.echo_component()))

    def worker(k: int) -> None:
        for i in range(CALLS):
            text = f"thread-{k}-call-{i}-" + "x" * (k * 100 + i)
            result = rt.run(loaded, tool="t", input_json=text, limits=wat.DEFAULT_LIMITS,
                            egress=wat.DenyAllEgress(), secret_available=lambda n: False)
            assert result.output == text

    assert _hammer(worker) == []


def test_logs_and_secrets_never_cross_between_threads(rt: Runtime, busy_switching: None) -> None:
    logging = rt.load(wat.logging_component(), sha256=wat.sha256(wat.logging_component()))
    secret = rt.load(wat.secret_component(), sha256=wat.sha256(wat.secret_component()))

    def worker(k: int) -> None:
        mine = f"secret-of-{k}"
        for i in range(CALLS):
            if i % 2:
                result = rt.run(secret, tool="t", input_json=mine if k % 2 else f"secret-of-{k + 1}",
                                limits=wat.DEFAULT_LIMITS, egress=wat.DenyAllEgress(),
                                secret_available=lambda name: name == mine)
                assert result.output == ("true" if k % 2 else "false")
            else:
                result = rt.run(logging, tool="t", input_json="{}", limits=wat.DEFAULT_LIMITS,
                                egress=wat.DenyAllEgress(), secret_available=lambda n: False)
                assert len(result.log) == 4

    assert _hammer(worker) == []


class _EchoEgress:
    """Ok for most URLs, a failure for URLs ending in 0: mixes both result cases."""

    def send(self, request: HttpRequest) -> HttpResponse | HttpFailure:
        if request.url.endswith("0"):
            return HttpFailure("denied", request.url)
        return HttpResponse(200, (("x", "y"),), request.url.encode())


class _SwitchingCache:
    """Wraps wasmtime-py's ``case_test_cache`` and makes the calling thread give up the GIL
    inside ``_lower``'s clear/add/iterate window, so a cache shared between threads is
    caught at once (under the GIL alone the race is too narrow to observe, see
    host.runtime._compat). The pause forces a thread switch; nothing waits on it.
    ``time.sleep(0)`` is not enough: on Python 3.10 the releasing thread takes the GIL
    straight back."""

    PAUSE_S = 0.0001

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def clear(self) -> None:
        self.inner.clear()
        time.sleep(self.PAUSE_S)

    def add(self, item: type) -> None:
        self.inner.add(item)
        time.sleep(self.PAUSE_S)

    def __iter__(self) -> Iterator[type]:
        time.sleep(self.PAUSE_S)
        return iter(list(self.inner))

    def __len__(self) -> int:
        return len(self.inner)

    def __contains__(self, item: object) -> bool:
        return item in self.inner


def _lower_http_results_from_threads(rt: Runtime) -> list[BaseException]:
    loaded = rt.load(wat.http_component(), sha256=wat.sha256(wat.http_component()))

    def worker(k: int) -> None:
        for i in range(CALLS):
            url = f"https://x/{k}/{i}"
            result = rt.run(loaded, tool="t", input_json=url, limits=wat.DEFAULT_LIMITS,
                            egress=_EchoEgress(), secret_available=lambda n: False)
            assert result.output == (f"err:0:{url}" if url.endswith("0") else f"ok:200:{url}")

    return _hammer(worker)


def test_concurrent_http_results_lowered_correctly(rt: Runtime, busy_switching: None) -> None:
    assert _lower_http_results_from_threads(rt) == []


def test_concurrent_http_results_lowered_correctly_with_a_widened_race_window(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The repaired (per-thread) cache, with thread switches forced inside _lower's window.
    cache = wasmtime_component_types.case_test_cache
    monkeypatch.setattr(wasmtime_component_types, "case_test_cache", _SwitchingCache(cache))
    assert _lower_http_results_from_threads(rt) == []


def test_widened_race_window_catches_a_cache_shared_between_threads(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The control for the test above: without host.runtime._compat's repair (a plain,
    # module-global set, as wasmtime-py 50 ships it), the same calls fail.
    monkeypatch.setattr(wasmtime_component_types, "case_test_cache", _SwitchingCache(set()))
    errors = _lower_http_results_from_threads(rt)
    assert errors, "the shared cache went unnoticed: this stress test cannot detect the race"
    assert all(isinstance(e, (ValueError, AssertionError, SandboxTrap)) for e in errors), errors


def _check_per_thread(cache: Any) -> list[BaseException]:
    """Every thread clears ``cache``, then (after all cleared) adds its own class, then
    (after all added) reads it back: a shared set holds both classes for every reader."""
    cleared, filled = threading.Barrier(THREADS), threading.Barrier(THREADS)

    def fill(k: int) -> None:
        cache.clear()
        cleared.wait(timeout=30)
        cache.add(int if k % 2 else str)
        filled.wait(timeout=30)
        assert set(cache) == ({int} if k % 2 else {str}), f"thread {k} saw {set(cache)}"

    return _hammer(fill)


def test_wasmtime_variant_lowering_cache_is_per_thread() -> None:
    # The repair of host.runtime._compat is installed (see its docstring for the race).
    assert isinstance(wasmtime_component_types.case_test_cache, _ThreadLocalSet)
    assert _check_per_thread(wasmtime_component_types.case_test_cache) == []


def test_per_thread_check_fails_for_a_shared_set() -> None:
    errors = _check_per_thread(set())
    assert len(errors) == THREADS and all(isinstance(e, AssertionError) for e in errors)


def test_runaway_call_does_not_block_others(rt: Runtime) -> None:
    loop = rt.load(wat.loop_component(), sha256=wat.sha256(wat.loop_component()))
    echo = rt.load(wat.echo_component(), sha256=wat.sha256(wat.echo_component()))
    done = threading.Event()
    errors: list[BaseException] = []

    def runaway() -> None:
        try:
            rt.run(loop, tool="t", input_json="{}",
                   limits=SandboxLimits(fuel=500_000_000, memory_bytes=1 << 20, timeout_ms=20_000,
                                        max_log_bytes=10),
                   egress=wat.DenyAllEgress(), secret_available=lambda n: False)
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    worker = threading.Thread(target=runaway)
    worker.start()
    # While the loop burns fuel without the GIL, this thread keeps making calls.
    finished_first = 0
    for i in range(50):
        assert rt.run(echo, tool="t", input_json=str(i), limits=wat.DEFAULT_LIMITS,
                      egress=wat.DenyAllEgress(), secret_available=lambda n: False).output == str(i)
        finished_first += not done.is_set()
    worker.join()
    assert finished_first > 0
    assert len(errors) == 1 and isinstance(errors[0], SandboxFuelExhausted)
