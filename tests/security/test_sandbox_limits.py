"""Hostile guests against the per-call limits (docs/design.md §8): fuel, deadline, memory, tables,
stack, traps, log floods. Every limit is crossed; every error carries usage."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from host.config import HostConfig
from host.errors import (
    InputInvalid,
    SandboxFuelExhausted,
    SandboxMemory,
    SandboxTimeout,
    SandboxTrap,
    StockadeError,
    ToolFailed,
)
from host.runtime import Runtime, SandboxLimits
from host.runtime.sandbox import TABLE_HEADROOM
from tests.support import wat

# The production compiler: every limit here is also held under Winch (the rest of the suite).
pytestmark = pytest.mark.cranelift

MiB = 1 << 20
PAGE = 65536


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    runtime = Runtime(HostConfig(state_dir=tmp_path_factory.mktemp("state")))
    yield runtime
    runtime.close()


def limits(**overrides: int) -> SandboxLimits:
    values = {"fuel": 50_000_000, "memory_bytes": 8 * MiB, "timeout_ms": 5_000, "max_log_bytes": 4096}
    values.update(overrides)
    return SandboxLimits(**values)


def _pages_in_log(exc: StockadeError) -> int:
    texts = " ".join(line["text"] for line in exc.details["log"])
    match = re.search(r"pages=(\d+)", texts)
    assert match, texts
    return int(match.group(1))


def test_infinite_loop_stopped_by_fuel(rt: Runtime) -> None:
    with pytest.raises(SandboxFuelExhausted, match="used all of its 1000000 fuel") as info:
        wat.run_module(rt, wat.loop_component(), limits=limits(fuel=1_000_000))
    assert info.value.code == "SANDBOX_FUEL_EXHAUSTED"
    usage = info.value.details["usage"]
    assert usage["fuel_consumed"] == 1_000_000
    assert usage["wall_ms"] > 0


def test_infinite_loop_with_huge_fuel_stopped_by_deadline(rt: Runtime) -> None:
    ceiling_fuel = HostConfig(state_dir=Path(".")).ceilings.fuel
    with pytest.raises(SandboxTimeout, match="ran past its 200 ms deadline") as info:
        wat.run_module(rt, wat.loop_component(), limits=limits(fuel=ceiling_fuel, timeout_ms=200))
    assert info.value.code == "SANDBOX_TIMEOUT"
    wall = info.value.details["usage"]["wall_ms"]
    # Deadline = 21 ticks of 10 ms: never early, and not far late on a busy machine.
    assert 200 <= wall < 5_000


def test_loop_in_start_function_stopped_during_instantiation(rt: Runtime) -> None:
    with pytest.raises(SandboxFuelExhausted):
        wat.run_module(rt, wat.start_loop_component(), limits=limits(fuel=1_000_000))


def test_memory_grow_bomb_reported_as_sandbox_memory(rt: Runtime) -> None:
    with pytest.raises(SandboxMemory, match="8388608-byte memory limit") as info:
        wat.run_module(rt, wat.memory_bomb_component(report_oom=True))
    assert info.value.code == "SANDBOX_MEMORY"
    assert _pages_in_log(info.value) * PAGE <= 8 * MiB


def test_silent_memory_bomb_contained_within_limit(rt: Runtime) -> None:
    # No allocator message: the host cannot tell a refused grow from any other trap,
    # but the limit held either way (documented in host.runtime.sandbox).
    with pytest.raises(SandboxTrap) as info:
        wat.run_module(rt, wat.memory_bomb_component(report_oom=False), limits=limits(memory_bytes=4 * MiB))
    pages = _pages_in_log(info.value)
    assert 4 * MiB - 16 * PAGE < pages * PAGE <= 4 * MiB


def test_memory_limit_aggregated_over_all_memories(rt: Runtime) -> None:
    result = wat.run_module(rt, wat.aggregate_memory_bomb_component(), limits=limits(memory_bytes=8 * MiB))
    total = int(result.output) * PAGE
    assert total <= 8 * MiB  # per-memory limits alone would have allowed 16 MiB
    assert total > 4 * MiB  # both memories grew


def test_initial_memory_larger_than_limit_refused(rt: Runtime) -> None:
    big = wat.guest("(call $done)", pages=64)  # 4 MiB initial memory
    with pytest.raises(SandboxMemory, match="exceeds memory limits"):
        wat.run_module(rt, big, limits=limits(memory_bytes=1 * MiB))


def test_table_grow_bomb_stops_at_headroom(rt: Runtime) -> None:
    result = wat.run_module(rt, wat.table_bomb_component(step=1000))
    assert int(result.output) == 1 + TABLE_HEADROOM


def test_deep_recursion_is_a_trap_not_a_crash(rt: Runtime) -> None:
    with pytest.raises(SandboxTrap, match="call stack exhausted") as info:
        wat.run_module(rt, wat.recursion_component(), limits=limits(fuel=10_000_000_000))
    assert type(info.value) is SandboxTrap
    # The host is fine afterwards.
    assert wat.run_module(rt, wat.echo_component(), input_json="after").output == "after"


@pytest.mark.parametrize("status", [0, 1], ids=["exit-ok", "exit-err"])
def test_guest_exit_ends_the_call_not_the_host(rt: Runtime, status: int) -> None:
    with pytest.raises(SandboxTrap, match=f"exited with status {status}"):
        wat.run_module(rt, wat.exit_component(status))
    assert wat.run_module(rt, wat.echo_component(), input_json="alive").output == "alive"


def test_unreachable_is_sandbox_trap(rt: Runtime) -> None:
    with pytest.raises(SandboxTrap, match="unreachable") as info:
        wat.run_module(rt, wat.unreachable_component())
    assert info.value.code == "SANDBOX_TRAP"


def test_trap_text_flood_capped_at_ceiling(rt: Runtime) -> None:
    # The backtrace repeats guest-chosen function names: a 5 000-character name makes the
    # raw trap text about 100 KB.
    name = "n" * 5000
    module = wat.guest(
        f"(drop (call ${name} (i32.const 0))) (call $done)",
        funcs=f"(func ${name} (param i32) (result i32) (i32.add (call ${name} (local.get 0)) (i32.const 1)))",
    )
    with pytest.raises(SandboxTrap) as info:
        wat.run_module(rt, module, limits=limits(fuel=10_000_000_000))
    trap = info.value.details["trap"]
    assert len(trap.encode()) <= 4096
    assert trap.startswith("wasm trap: call stack exhausted")
    assert trap.endswith("…[truncated]")
    assert len(info.value.message) <= 4096


def test_trap_text_scrubbed(rt: Runtime) -> None:
    with pytest.raises(SandboxTrap) as info:
        wat.run_module(rt, wat.recursion_component(), limits=limits(fuel=10_000_000_000),
                       scrub=lambda s: s.replace("deep", "[REDACTED]"))
    assert "deep" not in info.value.message
    assert "deep" not in info.value.details["trap"]
    assert "[REDACTED]" in info.value.details["trap"]


@pytest.mark.parametrize(
    ("tag", "error"), [(0, InputInvalid), (1, ToolFailed)], ids=["invalid-input", "failed"]
)
def test_tool_error_text_scrubbed(rt: Runtime, tag: int, error: type[StockadeError]) -> None:
    with pytest.raises(error) as info:
        wat.run_module(rt, wat.tool_error_component(tag), input_json="token=s3cr3t",
                       scrub=lambda s: s.replace("s3cr3t", "[REDACTED]"))
    assert "s3cr3t" not in info.value.message
    assert "[REDACTED]" in info.value.message


def test_log_flood_truncated_with_marker(rt: Runtime) -> None:
    result = wat.run_module(rt, wat.log_flood_component(lines=1000), limits=limits(max_log_bytes=10_000))
    assert result.output == "flooded"
    assert result.usage.log_bytes == 10_000
    assert result.usage.log_truncated
    assert sum(len(line.text.encode()) for line in result.log if line.source == "log") == 10_000
    marker = result.log[-1]
    assert (marker.source, marker.level) == ("host", "warn")
    assert "log truncated: 1014000 bytes over the 10000-byte limit dropped" in marker.text


def test_stdout_flood_of_10_mib_capped(rt: Runtime) -> None:
    chunk = ("y" * 63 + "\n") * 64  # 4096 bytes, 64 lines
    result = wat.run_module(rt, wat.stream_component(chunk, writes=2560), limits=limits(max_log_bytes=65_536))
    assert result.output == "written"
    assert (result.usage.log_bytes, result.usage.log_truncated) == (65_536, True)
    assert all(line.text == "y" * 63 for line in result.log[:-1])
    assert "10420224 bytes over the 65536-byte limit dropped" in result.log[-1].text


def test_allocator_failure_on_stderr_then_abort_is_sandbox_memory(rt: Runtime) -> None:
    # What an uncaught MemoryError in a CPython guest looks like: a traceback on stderr,
    # then an abort (trap).
    module = wat.stream_component("Traceback (most recent call last):\nMemoryError\n", stream="stderr",
                                  then_trap=True)
    with pytest.raises(SandboxMemory) as info:
        wat.run_module(rt, module)
    assert info.value.details["log"][-1] == {"source": "stderr", "level": "warn", "text": "MemoryError"}


def test_log_secret_scrubbed(rt: Runtime) -> None:
    result = wat.run_module(rt, wat.logging_component(), scrub=lambda s: s.replace("warn", "[REDACTED]"))
    assert [line.text for line in result.log] == ["debug line", "info line", "[REDACTED] line", "error line"]


@pytest.mark.parametrize(
    "field", ["fuel", "memory_bytes", "timeout_ms", "max_log_bytes"], ids=lambda f: f"over-ceiling-{f}"
)
def test_limits_over_host_ceiling_refused(rt: Runtime, field: str) -> None:
    ceilings = HostConfig(state_dir=Path(".")).ceilings
    with pytest.raises(ValueError, match=f"limits.{field}="):
        wat.run_module(rt, wat.echo_component(), limits=limits(**{field: getattr(ceilings, field) + 1}))


@pytest.mark.parametrize(
    ("module", "error", "fuel"),
    [
        (wat.loop_component, SandboxFuelExhausted, 1_000_000),
        (wat.unreachable_component, SandboxTrap, 1_000_000),
        (lambda: wat.memory_bomb_component(report_oom=True), SandboxMemory, 1_000_000),
        (lambda: wat.tool_error_component(1), ToolFailed, 1_000_000),
        (lambda: wat.tool_error_component(0), InputInvalid, 1_000_000),
    ],
    ids=["fuel", "trap", "memory", "failed", "invalid-input"],
)
def test_usage_attached_to_every_failure(rt: Runtime, module, error, fuel: int) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error) as info:
        wat.run_module(rt, module(), limits=limits(fuel=fuel))
    usage = info.value.details["usage"]
    assert set(usage) == {"fuel_consumed", "wall_ms", "log_bytes", "log_truncated"}
    assert 0 < usage["fuel_consumed"] <= fuel
    assert usage["wall_ms"] > 0
    assert isinstance(info.value.details["log"], list)
