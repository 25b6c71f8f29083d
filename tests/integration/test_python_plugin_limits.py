"""The hostile Python plugin against the per-call limits, under Cranelift (the production
compiler): memory, fuel, the epoch deadline and a sleep past it, on a real componentize-py
component. The plugin's other tests (contract, containment) are in test_python_plugin.py,
under the suite's Winch; a separate module so ``--dist loadscope`` can run the two on
different workers, and so only the hostile plugin pays a Cranelift compile.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from host.egress.port import DenyAllEgress
from host.errors import SandboxFuelExhausted, SandboxMemory, SandboxTimeout
from host.runtime import LoadedComponent, Runtime, SandboxLimits, SandboxResult
from tests.support.plugins import build_test_plugin, shared_runtime_config

pytestmark = [pytest.mark.slow, pytest.mark.cranelift]

LIMITS = SandboxLimits(fuel=2_000_000_000, memory_bytes=256 << 20, timeout_ms=10_000, max_log_bytes=65_536)
MiB = 1 << 20


@pytest.fixture(scope="module")
def runtime() -> Iterator[Runtime]:
    with Runtime(shared_runtime_config()) as rt:
        yield rt


@pytest.fixture(scope="module")
def plugins(runtime: Runtime) -> dict[str, LoadedComponent]:
    build = build_test_plugin("hostile_py")
    module = build.module_path.read_bytes()
    return {"hostile_py": runtime.load(module, sha256=build.module_sha256, name="hostile_py")}


def _run(runtime: Runtime, component: LoadedComponent, tool: str, value: object, *,
         limits: SandboxLimits = LIMITS) -> SandboxResult:  # fmt: skip
    return runtime.run(
        component,
        tool=tool,
        input_json=json.dumps(value),
        limits=limits,
        egress=DenyAllEgress(),
        secret_available=lambda name: False,
    )


def _output(result: SandboxResult) -> object:
    return json.loads(result.output)


def test_gigabyte_allocation_contained_and_host_still_serves(
    runtime: Runtime, plugins: dict[str, LoadedComponent]
) -> None:
    with pytest.raises(SandboxMemory) as info:
        _run(runtime, plugins["hostile_py"], "hostile.alloc", {"bytes": 1 << 30})
    assert info.value.code == "SANDBOX_MEMORY"
    assert _output(_run(runtime, plugins["hostile_py"], "hostile.alloc", {"bytes": MiB})) == MiB


@pytest.mark.parametrize(
    ("limits", "error"),
    [
        (
            SandboxLimits(fuel=50_000_000, memory_bytes=256 << 20, timeout_ms=10_000, max_log_bytes=1024),
            SandboxFuelExhausted,
        ),
        (
            SandboxLimits(fuel=20_000_000_000, memory_bytes=256 << 20, timeout_ms=300, max_log_bytes=1024),
            SandboxTimeout,
        ),
    ],
    ids=["fuel", "deadline"],
)
def test_endless_loop_stopped(
    runtime: Runtime, plugins: dict[str, LoadedComponent], limits: SandboxLimits, error: type[Exception]
) -> None:
    with pytest.raises(error):
        _run(runtime, plugins["hostile_py"], "hostile.spin", {}, limits=limits)


def test_time_sleep_past_the_deadline_answers_timeout(
    runtime: Runtime, plugins: dict[str, LoadedComponent]
) -> None:
    # time.sleep blocks in wasi:io/poll on a monotonic-clock pollable, a host function
    # where epoch interruption never fires: the host's clock wakes it by the
    # deadline. The bound is generous: long before the 30 s sleep would end.
    limits = SandboxLimits(fuel=LIMITS.fuel, memory_bytes=LIMITS.memory_bytes, timeout_ms=1_000, max_log_bytes=1024)
    started = time.monotonic()
    with pytest.raises(SandboxTimeout, match="past its 1000 ms deadline"):
        _run(runtime, plugins["hostile_py"], "hostile.sleep", {"seconds": 30}, limits=limits)
    assert time.monotonic() - started < 15
    assert _output(_run(runtime, plugins["hostile_py"], "hostile.sleep", {"seconds": 0})) == "slept"
