"""Engine settings, deadline arithmetic and the epoch ticker's lifetime."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from host.config import HostConfig
from host.errors import SandboxTimeout
from host.runtime import Runtime, SandboxLimits
from host.runtime.engine import ENGINE_SETTINGS, EPOCH_TICK_MS, deadline_ticks, engine_config_hash
from tests.support import wat


def _tickers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "stockade-epoch-ticker"]


@pytest.mark.parametrize(
    ("timeout_ms", "ticks"),
    [(1, 2), (10, 2), (11, 3), (200, 21), (300_000, 30_001)],
)
def test_deadline_never_shorter_than_timeout(timeout_ms: int, ticks: int) -> None:
    assert deadline_ticks(timeout_ms) == ticks
    assert (deadline_ticks(timeout_ms) - 1) * EPOCH_TICK_MS >= timeout_ms


def test_engine_meters_fuel_and_epochs() -> None:
    assert ENGINE_SETTINGS["consume_fuel"] is True
    assert ENGINE_SETTINGS["epoch_interruption"] is True
    assert ENGINE_SETTINGS["wasm_threads"] is False


def test_engine_config_hash_changes_with_any_setting() -> None:
    base = engine_config_hash()
    assert base == engine_config_hash(dict(ENGINE_SETTINGS))
    for name, value in ENGINE_SETTINGS.items():
        changed = dict(ENGINE_SETTINGS)
        changed[name] = not value if isinstance(value, bool) else f"{value}-other"
        assert engine_config_hash(changed) != base, name


def test_ticker_thread_stops_on_close(tmp_path: Path) -> None:
    before = len(_tickers())
    rt = Runtime(HostConfig(state_dir=tmp_path))
    assert len(_tickers()) == before + 1
    rt.close()
    assert len(_tickers()) == before
    rt.close()  # idempotent


def test_context_manager_closes(tmp_path: Path) -> None:
    before = len(_tickers())
    with Runtime(HostConfig(state_dir=tmp_path)) as rt:
        assert len(_tickers()) == before + 1
    assert len(_tickers()) == before
    with pytest.raises(RuntimeError, match="closed"):
        wat.run_module(rt, wat.echo_component())
    with pytest.raises(RuntimeError, match="closed"):
        rt.load_many([("echo", wat.echo_component(), wat.sha256(wat.echo_component()))])


def _spinning_call(rt: Runtime, timeout_ms: int) -> tuple[threading.Thread, list[BaseException]]:
    """Start a call whose guest loops for ever; return once it is inside the guest.

    Returns the worker thread and the list its exception (if any) is appended to.
    """
    # Asks secret-available (the host learns the guest is running), then loops forever.
    module = wat.guest("(drop (call $secret_available {S:n})) (loop $forever (br $forever)) (unreachable)",
                       host=["secret-available"], strings={"n": "started"})
    loaded = rt.load(module, sha256=wat.sha256(module))
    limits = SandboxLimits(fuel=20_000_000_000, memory_bytes=1 << 20, timeout_ms=timeout_ms, max_log_bytes=10)
    running = threading.Event()
    errors: list[BaseException] = []

    def in_guest(name: str) -> bool:
        running.set()
        return False

    def call() -> None:
        try:
            rt.run(loaded, tool="t", input_json="{}", limits=limits, egress=wat.DenyAllEgress(),
                   secret_available=in_guest)
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=call)
    worker.start()
    assert running.wait(30), "the guest never started"
    return worker, errors


def test_close_interrupts_calls_in_flight(tmp_path: Path) -> None:
    rt = Runtime(HostConfig(state_dir=tmp_path))
    worker, errors = _spinning_call(rt, timeout_ms=300_000)
    rt.close()
    worker.join(timeout=60)  # the call's own limits would keep it for 300 s or 20e9 fuel
    assert not worker.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], SandboxTimeout)


class _CountingEngine:
    """Counts the epoch increments made by one thread (the ticker thread makes others)."""

    def __init__(self, engine: object, thread: threading.Thread) -> None:
        self._engine = engine
        self._thread = thread
        self.increments = 0

    def increment_epoch(self) -> None:
        if threading.current_thread() is self._thread:
            self.increments += 1
        self._engine.increment_epoch()  # type: ignore[attr-defined]  # a wasmtime.Engine


def test_close_without_calls_in_flight_steps_no_epochs(tmp_path: Path) -> None:
    rt = Runtime(HostConfig(state_dir=tmp_path))
    wat.run_module(rt, wat.echo_component())  # a finished call leaves nothing in flight
    counting = _CountingEngine(rt._engine, threading.current_thread())
    rt._engine = counting  # type: ignore[assignment]  # observes close's increments only
    rt.close()
    assert counting.increments == 0


def test_close_steps_only_the_deadline_of_the_longest_call_in_flight(tmp_path: Path) -> None:
    rt = Runtime(HostConfig(state_dir=tmp_path))
    worker, errors = _spinning_call(rt, timeout_ms=60_000)
    counting = _CountingEngine(rt._engine, threading.current_thread())
    rt._engine = counting  # type: ignore[assignment]
    rt.close()
    worker.join(timeout=60)
    assert not worker.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], SandboxTimeout)
    assert counting.increments == deadline_ticks(60_000) + 1  # not the 300 s ceiling's 30,002
