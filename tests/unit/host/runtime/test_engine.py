"""Engine settings, deadline arithmetic and the epoch ticker's lifetime."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest
import wasmtime

import host.runtime.engine as engine_module
from host.config import HostConfig
from host.errors import ConfigInvalid, SandboxFuelExhausted, SandboxTimeout
from host.runtime import Runtime, SandboxLimits
from host.runtime.engine import (
    COMPILER_ENV,
    ENGINE_SETTINGS,
    EPOCH_TICK_MS,
    build_engine,
    deadline_ticks,
    engine_config_hash,
    selected_compiler,
)
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


# -- the compiler: Cranelift by default, Winch when STOCKADE_COMPILER says so ------------


def test_compiler_is_cranelift_unless_the_environment_names_winch() -> None:
    assert selected_compiler({}) == "cranelift"
    assert selected_compiler({COMPILER_ENV: ""}) == "cranelift"
    assert selected_compiler({COMPILER_ENV: "winch"}) == "winch"
    assert selected_compiler({COMPILER_ENV: "cranelift"}) == "cranelift"


@pytest.mark.parametrize("value", ["Winch", "llvm", "auto", "winch "])
def test_unknown_compiler_refuses_to_build_an_engine(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    with pytest.raises(ConfigInvalid, match="names no compiler") as caught:
        selected_compiler({COMPILER_ENV: value})
    assert "cranelift (the default) or winch" in caught.value.hint
    monkeypatch.setenv(COMPILER_ENV, value)
    with pytest.raises(ConfigInvalid):
        build_engine()


def test_unknown_compiler_refuses_to_open_a_runtime(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(COMPILER_ENV, "llvm")
    before = len(_tickers())
    with pytest.raises(ConfigInvalid):
        Runtime(HostConfig(state_dir=tmp_path))
    assert len(_tickers()) == before


def test_compiler_is_part_of_the_artifact_key() -> None:
    assert engine_config_hash(compiler="winch") != engine_config_hash(compiler="cranelift")
    assert engine_config_hash(compiler="winch") == engine_config_hash(dict(ENGINE_SETTINGS), "winch")


def test_winch_is_a_different_compiler_not_a_relabelled_cranelift() -> None:
    module = "(module (func (export \"f\") (param i32) (result i32) (i32.mul (local.get 0) (i32.const 7))))"
    compiled = {c: wasmtime.Module(build_engine(c), module).serialize() for c in ("cranelift", "winch")}
    assert compiled["cranelift"] != compiled["winch"]
    assert wasmtime.Module(build_engine("cranelift"), module).serialize() == compiled["cranelift"]


@pytest.mark.parametrize("compiler", ["cranelift", "winch"])
def test_both_compilers_enforce_the_deadline_and_fuel(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, compiler: str
) -> None:
    monkeypatch.setenv(COMPILER_ENV, compiler)
    spin = wat.loop_component()
    base = SandboxLimits(fuel=20_000_000_000, memory_bytes=1 << 20, timeout_ms=50, max_log_bytes=10)
    with Runtime(HostConfig(state_dir=tmp_path)) as rt:
        with pytest.raises(SandboxTimeout):
            wat.run_module(rt, spin, limits=base)
        with pytest.raises(SandboxFuelExhausted):
            wat.run_module(rt, spin, limits=dataclasses.replace(base, fuel=100_000, timeout_ms=30_000))


def test_winch_through_unrecognised_bindings_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(engine_module._bindings, "wasmtime_config_strategy_set")
    with pytest.raises(ConfigInvalid, match="not known to select Winch"):
        build_engine("winch")
    assert isinstance(build_engine("cranelift"), wasmtime.Engine)


def test_winch_refused_when_the_strategy_setter_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_module.inspect, "getsource", lambda _obj: "def strategy(self, s): ...")
    with pytest.raises(ConfigInvalid, match="not known to select Winch"):
        build_engine("winch")


@pytest.mark.cranelift
def test_the_cranelift_marker_selects_cranelift_for_the_test() -> None:
    assert selected_compiler() == "cranelift"
