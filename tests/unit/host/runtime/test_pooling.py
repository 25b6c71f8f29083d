"""The pooling allocator (host.runtime.engine): reused slots are clean, a full pool never
fails a call, and the allocator falls back to on-demand allocation when it cannot be had."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from wasmtime import _bindings

from host.config import HostConfig
from host.egress.port import DenyAllEgress
from host.errors import CallCancelled
from host.runtime import LoadedComponent, Runtime, SandboxLimits
from host.runtime import engine as engine_module
from tests.support import wat

LIMITS = SandboxLimits(fuel=50_000_000, memory_bytes=8 << 20, timeout_ms=5_000, max_log_bytes=4096)
_MARK = 7777


def _runtime(tmp_path: Path, slots: int) -> Runtime:
    return Runtime(HostConfig(state_dir=tmp_path / "state", pool_instances=slots, ready_instances=0))


def _load(rt: Runtime, module: bytes) -> LoadedComponent:
    return rt.load(module, sha256=wat.sha256(module), name="wat")


def _run(rt: Runtime, loaded: LoadedComponent, **kwargs: object) -> str:
    return rt.run(
        loaded, tool="t", input_json="{}", limits=LIMITS, egress=DenyAllEgress(),
        secret_available=lambda _name: False, **kwargs,  # type: ignore[arg-type]
    ).output  # fmt: skip


def _snooping_guest() -> bytes:
    """Reports what a previous tenant of its slot left, then leaves markers itself.

    Reads a word in the part of memory wasmtime zeroes in place (under 1 MiB), one in the
    part it decommits (1.5 MiB), and the memory's size in pages; then writes a marker at
    both places, grows the memory by 16 pages and writes a marker in the grown part.
    """
    return wat.guest(
        f"""
        (call $emit_u32 (i32.load (i32.const 200000)))
        (call $emit {{S:sep}})
        (call $emit_u32 (i32.load (i32.const 1600000)))
        (call $emit {{S:sep}})
        (call $emit_u32 (memory.size))
        (i32.store (i32.const 200000) (i32.const {_MARK}))
        (i32.store (i32.const 1600000) (i32.const {_MARK}))
        (drop (memory.grow (i32.const 16)))
        (i32.store (i32.const 2200000) (i32.const {_MARK}))
        (call $done)""",
        strings={"sep": ","},
        pages=32,
    )


def test_reused_pool_slot_never_shows_the_previous_calls_memory(tmp_path: Path) -> None:
    # One slot: every call necessarily gets the memory slot the previous call wrote into.
    with _runtime(tmp_path, slots=1) as rt:
        assert rt.pool is not None and rt.pool.instances == 1
        loaded = _load(rt, _snooping_guest())
        outputs = {_run(rt, loaded) for _ in range(50)}
        assert outputs == {"0,0,32"}
        assert rt.overflow_calls == 0  # every call ran in the pool's one slot


def test_full_pool_runs_the_call_on_demand_instead_of_failing(tmp_path: Path) -> None:
    with _runtime(tmp_path, slots=1) as rt:
        echo = _load(rt, wat.echo_component())
        spin = _load(rt, wat.loop_component())
        stop = threading.Event()
        failures: list[BaseException] = []

        def hold_the_slot() -> None:
            try:
                rt.run(
                    spin, tool="t", input_json="{}", egress=DenyAllEgress(), interrupt=stop,
                    limits=SandboxLimits(fuel=20_000_000_000, memory_bytes=8 << 20, timeout_ms=20_000, max_log_bytes=64),
                    secret_available=lambda _name: False,
                )  # fmt: skip
            except BaseException as exc:  # the test inspects it
                failures.append(exc)

        holder = threading.Thread(target=hold_the_slot)
        holder.start()
        try:
            deadline = time.monotonic() + 10
            while rt._slots is None or rt._slots.in_use < 1:
                assert not failures, failures
                assert time.monotonic() < deadline, "the spinning call never took the slot"
                time.sleep(0.002)
            assert _run(rt, echo) == "{}"  # the pool is full: ran on the on-demand engine
            assert rt.overflow_calls == 1
        finally:
            stop.set()
            holder.join()
        assert len(failures) == 1 and isinstance(failures[0], CallCancelled)
        assert _run(rt, echo) == "{}"  # the cancelled call's slot came back
        assert rt.overflow_calls == 1
        assert rt._slots is not None and rt._slots.in_use == 0


def test_component_larger_than_a_slot_runs_on_demand_under_its_limits(tmp_path: Path) -> None:
    # Two memories do not fit a slot (one memory each); the on-demand engine still holds
    # the aggregate memory limit.
    with _runtime(tmp_path, slots=4) as rt:
        bomb = _load(rt, wat.aggregate_memory_bomb_component())
        total = int(_run(rt, bomb)) * 65536
        assert 4 << 20 < total <= LIMITS.memory_bytes  # both grew, their sum within the limit
        assert rt.overflow_calls == 1


def test_pool_instances_zero_allocates_on_demand(tmp_path: Path) -> None:
    with _runtime(tmp_path, slots=0) as rt:
        assert rt.pool is None
        assert _run(rt, _load(rt, wat.echo_component())) == "{}"
        assert rt.overflow_calls == 0


@pytest.mark.parametrize("slots", [-1, 1025, True, 2.0])
def test_pool_instances_setting_is_validated(tmp_path: Path, slots: object) -> None:
    with pytest.raises(ValueError, match="pool_instances"):
        HostConfig(state_dir=tmp_path, pool_instances=slots)  # type: ignore[arg-type]


def test_unrecognized_pooling_bindings_fall_back_to_on_demand(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A wasmtime whose setter takes another type is not configured through it.
    monkeypatch.setattr(_bindings, "_wasmtime_pooling_allocation_config_max_memory_size_set", len)
    assert "max_memory_size" in (engine_module.pooling_unavailable() or "")
    with _runtime(tmp_path, slots=8) as rt:
        assert rt.pool is None
        assert _run(rt, _load(rt, wat.echo_component())) == "{}"


def test_memory_ceiling_above_the_reservation_falls_back(tmp_path: Path) -> None:
    # wasmtime would abort the process on this configuration; it must never reach it.
    pool = engine_module.pool_sizes(8, 8 << 30)
    assert pool is not None
    _engine, used = engine_module.build_pooled_engine("cranelift", pool)
    assert used is None


_MANY_ENGINES = """
import sys
from host.runtime.engine import build_pooled_engine, pool_sizes
engines, pooled = [], 0
for _ in range(int(sys.argv[1])):
    engine, used = build_pooled_engine("cranelift", pool_sizes(64, 256 << 20))
    engines.append(engine)
    pooled += used is not None
print(pooled)
"""


def test_regression_33rd_live_pooled_engine_aborted_the_process() -> None:
    # Each pooled engine once cost 2,000 memory maps (wasmtime's default 1,000 async fiber
    # stacks with their guard pages): with vm.max_map_count at 65,530 the 33rd live engine
    # made wasmtime panic inside wasm_engine_new_with_config and the process abort (a CI
    # worker died of it). 300 live engines: the first ones pooled, the rest on demand once
    # the address space is half reserved, and the process lives.
    done = subprocess.run(
        [sys.executable, "-c", _MANY_ENGINES, "300"],
        check=False, capture_output=True, text=True, timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    pooled = int(done.stdout)
    assert 100 < pooled < 300  # pooled until half the 128 TiB was reserved, then on demand


_CYCLIC_ENGINES = """
import gc
from host.runtime.engine import build_pooled_engine, pool_sizes
gc.disable()  # only the crowded pool's own collection may free them
pooled = 0
for _ in range(400):
    engine, used = build_pooled_engine("cranelift", pool_sizes(64, 256 << 20))
    cycle = [engine]
    cycle.append(cycle)  # dropped, but only the cycle collector can free it
    pooled += used is not None
print(pooled)
"""


def test_engines_of_dropped_hosts_in_cycles_are_collected_before_the_pool_is_refused() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _CYCLIC_ENGINES], check=False, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout) == 400


def test_pool_refused_when_the_map_count_is_near_its_ceiling() -> None:
    pool = engine_module.pool_sizes(8, 256 << 20)
    assert pool is not None
    crowded = engine_module.ProcessMaps(mapped_bytes=1 << 30, maps=62_000, max_maps=65_530)
    assert "vm.max_map_count" in (engine_module._pool_refused(pool, crowded) or "")
    roomy = engine_module.ProcessMaps(mapped_bytes=1 << 30, maps=2_000, max_maps=65_530)
    assert engine_module._pool_refused(pool, roomy) is None


def test_pool_refused_when_half_the_address_space_is_mapped() -> None:
    pool = engine_module.pool_sizes(64, 256 << 20)
    assert pool is not None
    full = engine_module.ProcessMaps(mapped_bytes=(1 << 46) - (100 << 30), maps=500, max_maps=65_530)
    assert "address space" in (engine_module._pool_refused(pool, full) or "")
    unknown = engine_module.ProcessMaps(mapped_bytes=None, maps=None, max_maps=None)
    assert engine_module._pool_refused(pool, unknown) is None


def test_pooled_engine_reserves_no_async_stacks() -> None:
    # The measured cost of one pooled engine: a handful of maps, not 2,000.
    pool = engine_module.pool_sizes(64, 256 << 20)
    assert pool is not None
    before = engine_module.process_maps().maps
    engine, used = engine_module.build_pooled_engine("cranelift", pool)
    after = engine_module.process_maps().maps
    assert used is not None and before is not None and after is not None
    assert after - before < 50
    del engine
