"""A failing guest's log and traceback: kept, scrubbed, shown to authors only.

WAT guests that write a traceback entry (``[stockade:traceback]`` then text, as both guest
SDKs do) holding a staged secret's value, then fail. The real gateway, secrets store and
redactor run.
"""

from __future__ import annotations

from pathlib import Path

from host import HostConfig
from tests.support import wat
from tests.support.hosts import make_host
from tests.support.secrets import make_store

SECRET = "s3cr3t-value-that-must-not-leak"
TRACE = f"[stockade:traceback]\nTraceback (most recent call last):\nKeyError: '{SECRET}'"


def _failing_guest() -> bytes:
    return wat.guest(
        "(call $log (i32.const 1) {S:info}) (call $log (i32.const 3) {S:tb}) (call $err (i32.const 1) {S:msg})",
        host=["log"],
        strings={"info": "about to fail", "tb": TRACE, "msg": "KeyError"},
    )


def _host(root: Path, *, debug: bool):  # type: ignore[no-untyped-def]
    store = make_store(root)
    store.set("p", "alice", "api_token", SECRET)
    http = {
        "allow": [{"scheme": "https", "host": "api.example.com", "port": None, "path_prefix": "/v1", "methods": ["GET"]}],
        "credentials": [{"secret": "api_token", "location": {"type": "bearer"}, "hosts": ["api.example.com"],
                         "path_prefixes": ["/v1"], "optional": False}],
        "max_request_bytes": 1024, "max_response_bytes": 1024, "timeout_ms": 1000,
    }  # fmt: skip
    return make_host(
        root, module=_failing_guest(), manifest_overrides={"http": http}, secrets=store,
        config=HostConfig(state_dir=root / "state", debug_guest_errors=debug),
    )  # fmt: skip


def test_debug_host_returns_the_guest_traceback_scrubbed_of_staged_secrets(tmp_path: Path) -> None:
    fixture = _host(tmp_path, debug=True)
    with fixture.host as host:
        result = host.call(fixture.request())
    assert result.error is not None and result.error.code == "TOOL_FAILED"
    trace = result.error.details["guest_traceback"]
    assert trace.startswith("Traceback (most recent call last):") and "KeyError: '[REDACTED]'" in trace
    assert SECRET not in trace and SECRET not in result.log
    assert "about to fail" in result.log  # the log survives the failure


def test_production_host_keeps_the_scrubbed_log_but_no_traceback_in_the_error(tmp_path: Path) -> None:
    fixture = _host(tmp_path, debug=False)
    with fixture.host as host:
        result = host.call(fixture.request())
    assert result.error is not None and result.error.code == "TOOL_FAILED"
    assert "guest_traceback" not in result.error.details
    assert "about to fail" in result.log and SECRET not in result.log
    assert SECRET not in fixture.audit_path.read_text()
