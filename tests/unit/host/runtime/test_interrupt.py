"""Cancelling one running call: its store is interrupted, other calls are untouched."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from host.config import HostConfig
from host.egress.port import DenyAllEgress
from host.errors import CallCancelled, SandboxTimeout
from host.runtime import Runtime, SandboxLimits
from tests.support.wat import echo_component, loop_component, sha256

SPIN = SandboxLimits(fuel=20_000_000_000, memory_bytes=8 << 20, timeout_ms=60_000, max_log_bytes=4096)


def test_interrupt_stops_a_spinning_guest_and_spares_other_calls(tmp_path: Path) -> None:
    with Runtime(HostConfig(state_dir=tmp_path)) as runtime:
        spin = runtime.load(loop_component(), sha256=sha256(loop_component()), name="spin")
        echo = runtime.load(echo_component(), sha256=sha256(echo_component()), name="echo")
        cancel, failures = threading.Event(), []

        def run() -> None:
            try:
                runtime.run(spin, tool="t", input_json="{}", limits=SPIN, egress=DenyAllEgress(),
                            secret_available=lambda n: False, interrupt=cancel)  # fmt: skip
            except BaseException as exc:
                failures.append(exc)

        worker = threading.Thread(target=run)
        worker.start()
        other = runtime.run(echo, tool="t", input_json='{"a":1}', limits=SPIN, egress=DenyAllEgress(),
                            secret_available=lambda n: False, interrupt=threading.Event())  # fmt: skip
        cancel.set()
        worker.join(timeout=30)
        assert not worker.is_alive()
        assert other.output == '{"a":1}'
        assert len(failures) == 1 and isinstance(failures[0], CallCancelled)
        assert failures[0].code == "CANCELLED"
        assert failures[0].details["usage"]["wall_ms"] < 30_000


def test_deadline_still_applies_with_an_interrupt_event(tmp_path: Path) -> None:
    limits = SandboxLimits(fuel=20_000_000_000, memory_bytes=8 << 20, timeout_ms=100, max_log_bytes=4096)
    with Runtime(HostConfig(state_dir=tmp_path)) as runtime:
        spin = runtime.load(loop_component(), sha256=sha256(loop_component()), name="spin")
        with pytest.raises(SandboxTimeout):
            runtime.run(spin, tool="t", input_json="{}", limits=limits, egress=DenyAllEgress(),
                        secret_available=lambda n: False, interrupt=threading.Event())  # fmt: skip
