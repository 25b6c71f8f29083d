"""Ready instances (host.runtime.ready): every call still gets a fresh, never-used instance.

WAT guests instantiate in tens of µs, under the pooling threshold, so these tests lower
the threshold to pool them; the real componentize-py plugin is pooled as it is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from host.config import HostConfig
from host.egress.port import DenyAllEgress
from host.errors import CallCancelled, SandboxFuelExhausted, SandboxTimeout
from host.runtime import LoadedComponent, Runtime, SandboxLimits
from host.runtime import ready as ready_module
from tests.support import wat
from tests.support.plugins import SHARED_ARTIFACTS_DIR, build_test_plugin

LIMITS = SandboxLimits(fuel=50_000_000, memory_bytes=16 << 20, timeout_ms=2_000, max_log_bytes=4096)


def _runtime(tmp_path: Path, depth: int = 2, **config: object) -> Runtime:
    return Runtime(HostConfig(state_dir=tmp_path / "state", ready_instances=depth, **config))  # type: ignore[arg-type]


@pytest.fixture
def pooled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ready_module, "POOL_THRESHOLD_S", 0.0)


def _load(rt: Runtime, module: bytes) -> LoadedComponent:
    return rt.load(module, sha256=wat.sha256(module), name="wat")


def _run(rt: Runtime, loaded: LoadedComponent, limits: SandboxLimits = LIMITS, **kwargs: object) -> str:
    return rt.run(
        loaded, tool="t", input_json="{}", limits=limits, egress=DenyAllEgress(),
        secret_available=lambda _name: False, **kwargs,  # type: ignore[arg-type]
    ).output  # fmt: skip


def _wait_ready(rt: Runtime, loaded: LoadedComponent, limits: SandboxLimits, count: int) -> None:
    deadline = time.monotonic() + 10
    while rt._ready.ready_count((loaded.sha256, limits)) < count:
        assert time.monotonic() < deadline, "the pool was never refilled"
        time.sleep(0.005)


def test_counter_is_one_on_every_call_from_a_ready_instance(tmp_path: Path, pooled: None) -> None:
    with _runtime(tmp_path) as rt:
        loaded = _load(rt, wat.counter_component())
        assert [_run(rt, loaded) for _ in range(ready_module.SAMPLES)] == ["1"] * 3  # on demand; then pooled
        outputs = []
        for _ in range(50):
            _wait_ready(rt, loaded, LIMITS, 1)
            outputs.append(_run(rt, loaded))
        assert outputs == ["1"] * 50
        assert rt._ready.taken >= 50


def test_fuel_consumed_is_the_same_ready_or_on_demand(tmp_path: Path, pooled: None) -> None:
    module = wat.counter_component()
    with _runtime(tmp_path / "a", depth=0) as plain:
        loaded = _load(plain, module)
        on_demand = plain.run(loaded, tool="t", input_json="{}", limits=LIMITS, egress=DenyAllEgress(),
                              secret_available=lambda _n: False).usage.fuel_consumed
    with _runtime(tmp_path / "b") as rt:
        loaded = _load(rt, module)
        for _ in range(ready_module.SAMPLES):
            _run(rt, loaded)
        _wait_ready(rt, loaded, LIMITS, 1)
        taken = rt._ready.taken
        ready = rt.run(loaded, tool="t", input_json="{}", limits=LIMITS, egress=DenyAllEgress(),
                       secret_available=lambda _n: False).usage.fuel_consumed
        assert rt._ready.taken == taken + 1
    assert ready == on_demand


def test_fuel_and_deadline_hold_on_a_ready_instance(tmp_path: Path, pooled: None) -> None:
    module = wat.loop_component()
    fuel_limited = SandboxLimits(fuel=2_000_000, memory_bytes=16 << 20, timeout_ms=5_000, max_log_bytes=4096)
    time_limited = SandboxLimits(fuel=20_000_000_000, memory_bytes=16 << 20, timeout_ms=200, max_log_bytes=4096)
    with _runtime(tmp_path) as rt:
        loaded = _load(rt, module)
        for limits, error in ((fuel_limited, SandboxFuelExhausted), (time_limited, SandboxTimeout)):
            for _ in range(ready_module.SAMPLES):
                with pytest.raises(error):
                    _run(rt, loaded, limits)
            _wait_ready(rt, loaded, limits, 1)
            taken = rt._ready.taken
            started = time.monotonic()
            with pytest.raises(error):
                _run(rt, loaded, limits)
            assert rt._ready.taken == taken + 1
            assert time.monotonic() - started < 3


def test_a_start_function_that_loops_is_stopped_and_never_pooled(tmp_path: Path, pooled: None) -> None:
    limits = SandboxLimits(fuel=20_000_000_000, memory_bytes=16 << 20, timeout_ms=200, max_log_bytes=4096)
    with _runtime(tmp_path) as rt:
        loaded = _load(rt, wat.start_loop_component())
        for _ in range(3):
            with pytest.raises(SandboxTimeout):
                _run(rt, loaded, limits)
        assert rt._ready.ready_count((loaded.sha256, limits)) == 0
        assert rt._ready.created == 0


def test_output_reaches_the_call_that_ran_not_the_instantiation(tmp_path: Path, pooled: None) -> None:
    module = wat.stream_component("hello from the call\n")
    with _runtime(tmp_path) as rt:
        loaded = _load(rt, module)
        for _ in range(ready_module.SAMPLES):
            first = rt.run(loaded, tool="t", input_json="{}", limits=LIMITS, egress=DenyAllEgress(),
                           secret_available=lambda _n: False)
        _wait_ready(rt, loaded, LIMITS, 2)
        second = rt.run(loaded, tool="t", input_json="{}", limits=LIMITS, egress=DenyAllEgress(),
                        secret_available=lambda _n: False)
        assert [line.text for line in second.log] == [line.text for line in first.log] == ["hello from the call"]


def test_close_drains_the_pools_and_joins_the_thread(tmp_path: Path, pooled: None) -> None:
    rt = _runtime(tmp_path)
    loaded = _load(rt, wat.counter_component())
    for _ in range(ready_module.SAMPLES):
        _run(rt, loaded)
    _wait_ready(rt, loaded, LIMITS, 2)
    rt.close()
    assert rt._ready.ready_count((loaded.sha256, LIMITS)) == 0
    assert not [t for t in threading.enumerate() if t.name == "stockade-ready-instances"]


def test_depth_zero_never_pools(tmp_path: Path, pooled: None) -> None:
    with _runtime(tmp_path, depth=0) as rt:
        loaded = _load(rt, wat.counter_component())
        assert [_run(rt, loaded) for _ in range(5)] == ["1"] * 5
        assert (rt._ready.created, rt._ready.taken) == (0, 0)


def test_small_components_are_not_pooled_at_the_default_threshold(tmp_path: Path) -> None:
    with _runtime(tmp_path) as rt:
        loaded = _load(rt, wat.counter_component())
        for _ in range(5):
            _run(rt, loaded)
        assert rt._ready.created == 0
        assert rt._ready.ready_count((loaded.sha256, LIMITS)) == 0


@pytest.mark.slow
def test_javascript_component_is_not_pooled_it_instantiates_fast(tmp_path: Path) -> None:
    build = build_test_plugin("echo_js")
    config = HostConfig(state_dir=tmp_path / "state", artifact_cache_dir=SHARED_ARTIFACTS_DIR)
    limits = SandboxLimits(fuel=2_000_000_000, memory_bytes=128 << 20, timeout_ms=10_000, max_log_bytes=65_536)
    with Runtime(config) as rt:
        loaded = rt.load(build.module_path.read_bytes(), sha256=build.module_sha256, name="echo_js")
        seen: list[float] = []
        observe = rt._ready.observe

        def recording(key: object, component: object, instantiate_s: float) -> None:
            seen.append(instantiate_s)
            observe(key, component, instantiate_s)  # type: ignore[arg-type]

        rt._ready.observe = recording  # type: ignore[method-assign]
        for _ in range(8):
            rt.run(loaded, tool="echojs.echo", input_json="{}", limits=limits, egress=DenyAllEgress(),
                   secret_available=lambda _n: False)
        # The decision, not the machine's speed, is under test: a loaded machine can make
        # the JS component slow to instantiate, and then it is pooled like any slow one.
        fast = min(seen[: ready_module.SAMPLES]) < ready_module.POOL_THRESHOLD_S
        if fast:
            assert rt._ready.created == 0
            assert len(seen) == 8  # judged once, then every call still instantiates on demand
        else:
            assert rt._ready.created > 0


@pytest.mark.parametrize("depth", [-1, 17, True, 1.5])
def test_ready_instances_setting_is_validated(tmp_path: Path, depth: object) -> None:
    with pytest.raises(ValueError, match="ready_instances"):
        HostConfig(state_dir=tmp_path, ready_instances=depth)  # type: ignore[arg-type]


# -- a real componentize-py plugin --------------------------------------------------------


@pytest.fixture(scope="module")
def python_runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Runtime, LoadedComponent]]:
    build = build_test_plugin("echo_py")
    config = HostConfig(state_dir=tmp_path_factory.mktemp("ready"), artifact_cache_dir=SHARED_ARTIFACTS_DIR)
    with Runtime(config) as rt:
        [loaded] = rt.load_many([("echo_py", build.module_path.read_bytes(), build.module_sha256)])
        yield rt, loaded


@pytest.mark.slow
def test_python_counter_is_one_across_1000_calls_on_two_threads(
    python_runtime: tuple[Runtime, LoadedComponent],
) -> None:
    rt, loaded = python_runtime
    limits = SandboxLimits(fuel=2_000_000_000, memory_bytes=128 << 20, timeout_ms=10_000, max_log_bytes=65_536)
    outputs: list[str] = []
    lock = threading.Lock()

    def calls(count: int) -> None:
        for _ in range(count):
            out = rt.run(loaded, tool="echo.counter", input_json="{}", limits=limits, egress=DenyAllEgress(),
                         secret_available=lambda _n: False).output
            with lock:
                outputs.append(out)

    threads = [threading.Thread(target=calls, args=(500,)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outputs == ["1"] * 1000
    assert rt._ready.taken > 0  # the Python component is pooled at the default threshold



def test_cancel_stops_a_ready_instance(tmp_path: Path, pooled: None) -> None:
    limits = SandboxLimits(fuel=20_000_000_000, memory_bytes=16 << 20, timeout_ms=5_000, max_log_bytes=4096)
    with _runtime(tmp_path) as rt:
        loaded = _load(rt, wat.loop_component())
        for attempt in range(ready_module.SAMPLES + 1):  # on demand first, then from the pool
            if attempt == ready_module.SAMPLES:
                _wait_ready(rt, loaded, limits, 1)
            cancel = threading.Event()
            threading.Timer(0.1, cancel.set).start()
            taken = rt._ready.taken
            started = time.monotonic()
            with pytest.raises(CallCancelled):
                _run(rt, loaded, limits, interrupt=cancel)
            assert time.monotonic() - started < 2
        assert rt._ready.taken == taken + 1


def _pool(rt: Runtime, loaded: LoadedComponent, limits: SandboxLimits) -> None:
    for _ in range(ready_module.SAMPLES):
        _run(rt, loaded, limits)
    _wait_ready(rt, loaded, limits, 1)


def test_at_most_max_keys_pools_the_least_recently_used_dropped(tmp_path: Path, pooled: None) -> None:
    limits = [
        SandboxLimits(fuel=50_000_000 + i, memory_bytes=16 << 20, timeout_ms=2_000, max_log_bytes=4096)
        for i in range(ready_module.MAX_KEYS + 1)
    ]
    with _runtime(tmp_path, depth=1) as rt:
        loaded = _load(rt, wat.counter_component())
        for each in limits:
            _pool(rt, loaded, each)
        kept = [i for i, each in enumerate(limits) if (loaded.sha256, each) in rt._ready._pools]
        assert kept == list(range(1, ready_module.MAX_KEYS + 1))  # the first (oldest) key went


def test_a_key_idle_past_idle_s_is_drained(tmp_path: Path, pooled: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ready_module, "IDLE_S", 0.2)
    with _runtime(tmp_path) as rt:
        loaded = _load(rt, wat.counter_component())
        _pool(rt, loaded, LIMITS)
        deadline = time.monotonic() + 5
        while (loaded.sha256, LIMITS) in rt._ready._pools:
            assert time.monotonic() < deadline, "an idle key was never drained"
            time.sleep(0.05)
        assert rt._ready.ready_count((loaded.sha256, LIMITS)) == 0
