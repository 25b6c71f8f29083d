"""DNS inside the deadline (docs/design.md §12): a slow resolver cannot hold a call.

The resolver is a port; here it is deliberately slow (it blocks until the test releases
it, at most 8 s). Before the fix, resolution ran outside every deadline: a request with a
300 ms timeout and a sandbox call with a 1 s deadline both waited for the resolver.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from host.config import HostConfig
from host.egress.port import HttpFailure
from host.runtime import Runtime
from host.runtime.sandbox import SandboxLimits
from tests.support import wat
from tests.support.egress_session import FakeResolver, allow, get, make_session
from tests.support.servers import LoopbackServer, ServerSet, echo

API = "api.tracker.example"
HOLD_S = 8.0  # how long the slow resolver would block if nobody released it


class SlowResolver:
    """Answers 127.0.0.1 only when released (or after HOLD_S); records every call."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def __call__(self, host: str) -> list[str]:
        self.calls += 1
        self.release.wait(HOLD_S)
        return ["127.0.0.1"]


@pytest.fixture
def servers() -> Iterator[ServerSet]:
    group = ServerSet()
    yield group
    group.stop_all()


@pytest.fixture
def api(servers: ServerSet) -> LoopbackServer:
    return servers.new(routes={"/v1/echo": echo()})


@pytest.fixture
def slow() -> Iterator[SlowResolver]:
    resolver = SlowResolver()
    yield resolver
    resolver.release.set()  # let the abandoned worker thread finish


@pytest.mark.parametrize(
    ("guest_ms", "call_s", "manifest_ms"),
    [(300, 30.0, 30_000), (None, 0.3, 30_000), (None, 30.0, 300)],
    ids=["guest-timeout", "call-deadline", "manifest-timeout"],
)
def test_slow_resolver_cannot_hold_request_past_its_deadline(
    api: LoopbackServer, slow: SlowResolver, guest_ms: int | None, call_s: float, manifest_ms: int
) -> None:
    started = time.monotonic()
    with make_session(allow=[allow(API, api.port)], resolver=slow,  # type: ignore[arg-type]
                      call_timeout_s=call_s, timeout_ms=manifest_ms) as session:
        result = session.send(get(api.url("/v1/echo", host=API), timeout_ms=guest_ms))
    elapsed = time.monotonic() - started
    assert result == HttpFailure("timeout", f"{API} did not resolve before the deadline")
    assert elapsed < 2.0  # the resolver alone would take 8 s
    assert slow.calls == 1
    (record,) = session.usage.requests
    assert (record.outcome, record.host, record.status) == ("timeout:dns_timeout", API, None)
    assert api.requests == []


def test_slow_resolver_cannot_hold_a_sandbox_call_past_its_deadline(
    api: LoopbackServer, slow: SlowResolver, tmp_path: Path
) -> None:
    # A real component calls http-request; the call's deadline is 1 s, the guest asks 1234 ms.
    runtime = Runtime(HostConfig(state_dir=tmp_path / "state"))
    limits = SandboxLimits(fuel=50_000_000, memory_bytes=8 << 20, timeout_ms=1000, max_log_bytes=4096)
    try:
        started = time.monotonic()
        with make_session(allow=[allow(API, api.port, methods=["POST"])], resolver=slow,  # type: ignore[arg-type]
                          call_timeout_s=1.0) as session:
            result = wat.run_module(runtime, wat.http_component(), input_json=api.url("/v1/echo", host=API),
                                    limits=limits, egress=session)
        elapsed = time.monotonic() - started
    finally:
        runtime.close()
    assert result.output == "err:4:"  # http-error case 4 = timeout
    assert elapsed < 2.0
    assert [r.outcome for r in session.usage.requests] == ["timeout:dns_timeout"]


def test_unresolvable_name_is_unreachable_not_denied(api: LoopbackServer) -> None:
    with make_session(allow=[allow(API, api.port)], resolver=FakeResolver({})) as session:
        result = session.send(get(api.url("/v1/echo", host=API)))
    assert result == HttpFailure("network", f"could not resolve {API}")
    assert session.usage.requests[0].outcome == "network:dns_failure"


def test_resolver_answering_nothing_is_unreachable(api: LoopbackServer) -> None:
    with make_session(allow=[allow(API, api.port)], resolver=FakeResolver({API: []})) as session:
        result = session.send(get(api.url("/v1/echo", host=API)))
    assert isinstance(result, HttpFailure) and result.kind == "network"
    assert session.usage.requests[0].outcome == "network:dns_failure"
