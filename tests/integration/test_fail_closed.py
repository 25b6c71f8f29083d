"""Host paths that must fail closed, each with its code.

Real hosts over hand-written components, real audit logs and lock state; a port is
replaced only where the failure cannot be produced for real (a tool-policy store that
crashes, an audit log whose outcome write fails after the guest ran).
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from host import Host, HostConfig
from host.audit.log import AuditLog, verify
from host.errors import AuditUnavailable, LockRollback
from host.policy.toolpolicy import Resolution, ToolMode, ToolPolicyStore
from tests.support.bundles import lock_digest, lock_entry, write_lock
from tests.support.hosts import HostFixture, echo_tool, make_host, write_policy

WRITE_TOOL = echo_tool(name="echo.write", effect="write", risk="medium", permissions=["echo.write"])


def _records(path: Path) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in records if r["kind"] != "audit.checkpoint"]


class _GuestCounter:
    """Counts guest starts by wrapping the host's runtime."""

    def __init__(self, host: Host) -> None:
        self.starts = 0
        original = host._runtime.run

        def counting(*args: Any, **kwargs: Any) -> Any:
            self.starts += 1
            return original(*args, **kwargs)

        host._runtime.run = counting  # type: ignore[method-assign]


# -- tool policy ------------------------------------------------------------------------


class _BrokenToolPolicy(ToolPolicyStore):
    def __init__(self, root: Path, error: Exception) -> None:
        super().__init__(root, admin_dir=None)
        self.error = error

    def resolve(self, account: str, workspace: str, **kwargs: Any) -> ToolMode:
        raise self.error

    def resolve_detail(self, account: str, workspace: str, **kwargs: Any) -> Resolution:
        raise self.error  # what the pipeline asks (resolve with its reasons)


@pytest.mark.parametrize(
    "error", [OSError(5, "Input/output error"), KeyError("mode"), RuntimeError("bug")],
    ids=["os-error", "key-error", "runtime-error"],
)
def test_tool_policy_store_crash_is_policy_unavailable(tmp_path: Path, error: Exception) -> None:
    fx = make_host(tmp_path, tool_policy=_BrokenToolPolicy(tmp_path / "tool-policy", error))
    counter = _GuestCounter(fx.host)
    with fx.host:
        result = fx.host.call(fx.request())
    assert result.error is not None and result.error.code == "POLICY_UNAVAILABLE"
    assert result.error.message == f"tool policy failed: {type(error).__name__}"
    assert counter.starts == 0
    (outcome,) = [r for r in _records(fx.audit_path) if r["kind"] == "call.outcome"]
    assert outcome["ok"] is False and outcome["error"]["code"] == "POLICY_UNAVAILABLE"


# -- a plan from an older lock generation ------------------------------------------------


def test_plan_prepared_on_an_older_generation_refused(tmp_path: Path) -> None:
    first = make_host(tmp_path)
    plan = first.host.prepare(first.request())
    first.host.close()
    # Generation 2: the same bundle, chained to generation 1.
    entry = lock_entry(tmp_path, tmp_path / "bundles" / "echo")
    lock = write_lock(tmp_path / "next.lock", [entry], generation=2, previous=lock_digest(first.lock_path))
    second = Host.open(lock, config=HostConfig(state_dir=tmp_path / "state"), secrets=None,
                       policy=first.policy, audit=tmp_path / "audit2.log")
    counter = _GuestCounter(second)
    with second:
        assert second.registry.get("echo.say", "1.0.0").binding.generation == 2
        result = second.execute(plan)
        fresh = second.prepare(first.request())
    assert result.error is not None and result.error.code == "APPROVAL_REQUIRED"
    assert result.error.message == "the action changed since it was prepared; prepare it again"
    assert counter.starts == 0
    assert fresh.action_digest != plan.action_digest


# -- the outcome record fails after the guest ran ----------------------------------------


class _FailingOutcomeLog(AuditLog):
    def append(self, kind: str, payload: Any, *, durable: bool | None = None) -> str:
        if kind == "call.outcome" and payload.get("ok") is True:
            raise AuditUnavailable("disk full")
        return super().append(kind, payload, durable=durable)


def test_outcome_record_failure_after_a_successful_run_is_not_a_success(tmp_path: Path) -> None:
    log = _FailingOutcomeLog(tmp_path / "audit.log")
    fx = make_host(tmp_path, tools=[WRITE_TOOL], allow=("tool.call:echo.write", "echo.write"), audit=log)
    counter = _GuestCounter(fx.host)
    with fx.host:
        fx.host.grants.grant(fx.request().principal.key, "s1", "echo.write")
        result = fx.host.call(fx.request(tool="echo.write"))
    log.close()
    assert counter.starts == 1  # the guest ran ...
    assert not result.ok and result.output is None  # ... but its output is not released
    assert result.error is not None and result.error.code == "AUDIT_UNAVAILABLE"
    assert result.audit_id is None
    kinds = [r["kind"] for r in _records(fx.audit_path)]
    assert kinds == ["lock.accepted", "session_grant.granted", "call.intent"]  # the intent stays as the evidence


# -- Host.open failing after the runtime started -----------------------------------------


def _tickers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "stockade-epoch-ticker"]


def test_open_failing_after_the_runtime_started_leaks_nothing(tmp_path: Path) -> None:
    first = make_host(tmp_path)
    entry = lock_entry(tmp_path, tmp_path / "bundles" / "echo")
    newer = write_lock(tmp_path / "next.lock", [entry], generation=2, previous=lock_digest(first.lock_path))
    first.host.close()
    config = HostConfig(state_dir=tmp_path / "state")
    policy = write_policy(tmp_path / "policy2.json", allow=("tool.call:echo.say", "echo.use"))
    Host.open(newer, config=config, secrets=None, policy=policy, audit=tmp_path / "audit.log").close()
    before = _tickers()
    audit_before = (tmp_path / "audit.log").read_bytes()
    # Generation 1 again: verified and compiled (the runtime and its ticker started),
    # then refused by the accepted state.
    with pytest.raises(LockRollback) as info:
        Host.open(first.lock_path, config=config, secrets=None, policy=policy, audit=tmp_path / "audit.log")
    assert info.value.code == "LOCK_ROLLBACK"
    assert _tickers() == before  # the ticker of the refused open was stopped and joined
    assert (tmp_path / "audit.log").read_bytes() == audit_before
    # The audit writer was released: the log opens again, and its chain verifies.
    reopened = AuditLog(tmp_path / "audit.log")
    reopened.append("test.reopened", {"after": "refused open"})
    reopened.close()
    assert verify(tmp_path / "audit.log").ok


# -- unsafe_allow_loopback ---------------------------------------------------------------


def test_unsafe_allow_loopback_is_warned_and_audited(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="stockade.config"):
        config = HostConfig(state_dir=tmp_path / "state", unsafe_allow_loopback=True)
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "unsafe_allow_loopback is on: plugins may reach 127.0.0.0/8 and ::1. Use it only in tests."
    ]
    fx = make_host(tmp_path, config=config)
    fx.host.close()
    (accepted,) = [r for r in _records(fx.audit_path) if r["kind"] == "lock.accepted"]
    assert accepted["unsafe_allow_loopback"] is True


def test_default_config_neither_warns_nor_records_loopback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="stockade.config"):
        fx: HostFixture = make_host(tmp_path)
    fx.host.close()
    assert not [r for r in caplog.records if "unsafe_allow_loopback" in r.getMessage()]
    (accepted,) = [r for r in _records(fx.audit_path) if r["kind"] == "lock.accepted"]
    assert accepted["unsafe_allow_loopback"] is False
