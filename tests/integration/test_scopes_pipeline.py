"""Scopes in the call pipeline: they discharge *ask* only, never deny, disabled or the
hard floor; a rebuilt package is not covered; every outcome record says what let it run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from host.approverkey import ApproverKey
from host.call.host import Host
from host.config import HostConfig
from host.formats.scope import SignedScope
from host.policy.toolpolicy import ToolMode, ToolSelector
from tests.support.approver import write_approver_config
from tests.support.bundles import lock_digest, lock_entry, write_bundle, write_lock
from tests.support.hosts import HostFixture, echo_manifest, echo_tool, make_host
from tests.support.wat import echo_component

WRITE = echo_tool(name="echo.write", effect="write", risk="medium", permissions=["echo.write"])
CRITICAL = echo_tool(name="echo.wipe", effect="write", risk="critical", permissions=["echo.write"])
PERMS = ("tool.call:echo.write", "tool.call:echo.wipe", "echo.write")


def config(root: Path, **overrides: object) -> HostConfig:
    pem = root / "home" / "approver.pem"
    if not pem.exists():
        write_approver_config(root / "home")
    return HostConfig(state_dir=root / "state", approver_key_file=pem, **overrides)  # type: ignore[arg-type]


@pytest.fixture
def fx(tmp_path: Path) -> HostFixture:
    return make_host(tmp_path, tools=[WRITE, CRITICAL], allow=PERMS, config=config(tmp_path))


def key(root: Path) -> ApproverKey:
    return ApproverKey.load(root / "home" / "approver.pem")


def grant(fx: HostFixture, tool: str = "echo.write", max_calls: int = 2, **kwargs: object) -> SignedScope:
    return fx.host.issue_scope(
        key=key(fx.root), project="p", subject="alice", tools=[(tool, "1.0.0", max_calls, None)],
        job="nightly", issued_by="operator", for_s=3600, **kwargs,  # type: ignore[arg-type]
    )


def records(fx: HostFixture, kind: str) -> list[dict[str, object]]:
    return [r for r in map(json.loads, fx.audit_path.read_text().splitlines()) if r["kind"] == kind]


def test_a_covered_ask_runs_and_its_outcome_says_the_scope_discharged_it(fx: HostFixture) -> None:
    signed = grant(fx)
    with fx.host:
        result = fx.host.call(fx.request(tool="echo.write"), scope=signed.scope.id)
        assert result.ok, result.error
        plain = fx.host.call(fx.request(tool="echo.write"))
    assert plain.error is not None and plain.error.code == "APPROVAL_REQUIRED"
    (outcome,) = [r for r in records(fx, "call.outcome") if r["ok"]]
    assert outcome["discharged_by"] == f"scope:{signed.scope.id}"
    (redeemed,) = records(fx, "scope.redeemed")
    assert redeemed["remaining"] == 1 and redeemed["action_digest"] == result.action_digest


def test_an_uncovered_tool_is_refused_at_once_as_not_in_scope(fx: HostFixture) -> None:
    signed = grant(fx)
    with fx.host:
        result = fx.host.call(fx.request(tool="echo.write", version="1.0.0", session="s9",
                                         input={"message": "x"}), scope="scope_" + "0" * 32)
        other = fx.host.call(fx.request(tool="echo.wipe"), scope=signed.scope.id)
    assert result.error is not None and result.error.details["reason"] == "not_in_scope"
    assert other.error is not None and other.error.details["reason"] == "not_in_scope"


def test_a_scope_never_discharges_deny(fx: HostFixture) -> None:
    signed = grant(fx)
    fx.policy.revoke_role("p", "alice", "user")
    with fx.host:
        result = fx.host.call(fx.request(tool="echo.write"), scope=signed.scope.id)
        assert result.error is not None and result.error.code == "POLICY_DENIED"
        assert fx.host.store.scopes.get(signed.scope.id).used_total == 0


def test_a_scope_never_discharges_disabled(fx: HostFixture, tmp_path: Path) -> None:
    signed = grant(fx)
    fx.host._tool_policy.set("alice", "p", ToolSelector("echo.write"), ToolMode.DISABLED)
    with fx.host:
        result = fx.host.call(fx.request(tool="echo.write"), scope=signed.scope.id)
        assert result.error is not None and result.error.code == "POLICY_DENIED"
        assert fx.host.store.scopes.get(signed.scope.id).used_total == 0


def test_a_critical_tool_still_asks_under_a_scope_and_a_session_grant(fx: HostFixture) -> None:
    signed = grant(fx, tool="echo.wipe")
    with fx.host:
        fx.host.grants.grant(("p", "alice"), "s1", "echo.wipe")
        result = fx.host.call(fx.request(tool="echo.wipe"), scope=signed.scope.id)
        assert result.error is not None and result.error.code == "APPROVAL_REQUIRED"
        assert result.error.details["reason"] == "not_in_scope" and result.error.details["floor"] is True
        assert fx.host.store.scopes.get(signed.scope.id).used_total == 0


def test_a_managed_cap_ask_always_selector_is_never_discharged(tmp_path: Path) -> None:
    admin = tmp_path / "admin"
    admin.mkdir()
    (admin / "cap.json").write_text(json.dumps({"format": "stockade.toolcap/1", "rules": [
        {"selector": {"tool": "echo.write"}, "max": "allow", "ask_always": True}]}))
    fx = make_host(tmp_path, tools=[WRITE, CRITICAL], allow=PERMS, config=config(tmp_path, admin_policy_dir=admin))
    signed = grant(fx)
    with fx.host:
        fx.host.grants.grant(("p", "alice"), "s1", "echo.write")
        result = fx.host.call(fx.request(tool="echo.write"), scope=signed.scope.id)
    assert result.error is not None and result.error.details.get("floor") is True


def test_a_rebuilt_package_in_a_new_generation_is_not_in_scope(tmp_path: Path) -> None:
    fx = make_host(tmp_path, tools=[WRITE, CRITICAL], allow=PERMS, config=config(tmp_path))
    signed = grant(fx, max_calls=5)
    fx.host.close()

    def reopen(generation: int, description: str) -> Host:
        manifest = echo_manifest([WRITE, CRITICAL], echo_component(),
                                 package={"name": "echo", "version": "1.0.0", "description": description,
                                          "homepage": None})
        bundle = write_bundle(tmp_path / "bundles" / f"echo{generation}", manifest, echo_component())
        previous = lock_digest(fx.lock_path)
        write_lock(fx.lock_path, [lock_entry(tmp_path, bundle)], generation=generation, previous=previous)
        return Host.open(fx.lock_path, config=config(tmp_path), secrets=None, policy=fx.policy,
                         audit=tmp_path / "audit.log")

    same = reopen(2, "Echo.")  # a new generation that changed nothing about the tool
    with same:
        assert same.call(fx.request(tool="echo.write"), scope=signed.scope.id).ok
    rebuilt = reopen(3, "Echo, rebuilt.")  # the manifest (so the package) changed
    with rebuilt:
        result = rebuilt.call(fx.request(tool="echo.write"), scope=signed.scope.id)
    assert result.error is not None and result.error.details["reason"] == "not_in_scope"


def test_outcome_records_say_policy_session_grant_or_approval(fx: HostFixture) -> None:
    with fx.host:
        plan = fx.host.prepare(fx.request(tool="echo.write"))
        assert fx.host.execute(plan, fx.host.approve(plan)).ok
        fx.host.grants.grant(("p", "alice"), "s1", "echo.write")
        assert fx.host.call(fx.request(tool="echo.write")).ok
    discharged = [r["discharged_by"] for r in records(fx, "call.outcome") if r["ok"]]
    assert discharged == [f"approval:{plan.action_digest}", "session_grant"]


def test_scopes_cannot_be_issued_for_an_unknown_tool(fx: HostFixture) -> None:
    from host.errors import ScopeInvalid  # noqa: PLC0415

    with fx.host, pytest.raises(ScopeInvalid) as caught:
        grant(fx, tool="echo.nope")
    assert caught.value.code == "SCOPE_INVALID" and "echo.nope" in caught.value.message
