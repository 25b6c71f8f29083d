"""What an approval and a call are bound to, in process: expiry instant, session, every permission.

Plans are built by :func:`host.call.prepare.prepare` itself over a real :class:`FrozenRegistry`,
a real :class:`FilePolicyEngine` file, a real :class:`ToolPolicyStore` and
:class:`SessionGrants` (no Host, no guest): each test pins one comparison whose mutation
would otherwise survive the suite.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from host import Principal
from host.approvals import ApprovalAuthority, approval_binds
from host.call.prepare import prepare
from host.errors import ApprovalInvalid, PolicyDenied
from host.formats.manifest import PackageManifest
from host.policy.engine import FilePolicyEngine
from host.policy.grants import SessionGrants
from host.policy.toolpolicy import ToolPolicyStore
from host.trust.registry import Binding, FrozenRegistry
from host.types import CallRequest, InvocationPlan
from tests.support.bundles import make_manifest, make_tool, manifest_bytes

TOOL = "tracker.list-issues"
DECLARED = ["issues.read", "issues.labels"]
NOW = 1_700_000_000.0
TTL_S = 300.0
MICROSECOND = 1e-6
ALICE = Principal(project="acme", subject="alice")


@dataclass
class World:
    registry: FrozenRegistry
    engine: FilePolicyEngine
    tool_policy: ToolPolicyStore
    grants: SessionGrants

    def allow(self, *permissions: str) -> None:
        self.engine.set_role("agent", allow=permissions)

    def prepare(self, session: str = "session-a", **overrides: Any) -> InvocationPlan:
        fields: dict[str, Any] = {
            "principal": ALICE,
            "session": session,
            "tool": TOOL,
            "version": "1.2.0",
            "input": {"repo": "widgets"},
        }
        fields.update(overrides)
        return prepare(
            CallRequest(**fields),
            registry=self.registry,
            engine=self.engine,
            tool_policy=self.tool_policy,
            grants=self.grants,
            max_input_bytes=65536,
            now=NOW,
        )


@pytest.fixture
def world(tmp_path: Path) -> World:
    manifest = PackageManifest.from_json(manifest_bytes(make_manifest(tools=[make_tool(permissions=DECLARED)])))
    binding = Binding("tracker", "1.2.0", 1, "1" * 64, "2" * 64)
    engine = FilePolicyEngine.initialize(tmp_path / "policy.json")
    engine.set_role("agent", allow=[f"tool.call:{TOOL}", *DECLARED])
    engine.grant_role("acme", "alice", "agent")
    return World(
        FrozenRegistry.from_packages([(manifest, binding)]),
        engine,
        ToolPolicyStore(tmp_path / "tool-policy", admin_dir=None),
        SessionGrants(),
    )


def test_the_plan_under_test_is_ready_with_every_permission_granted(world: World) -> None:
    plan = world.prepare()
    assert plan.status == "ready"
    assert plan.preview.permissions == (f"tool.call:{TOOL}", *DECLARED)


# -- an approval is refused at exactly its expiry instant --------------------------------


def test_authority_refuses_an_approval_at_exactly_its_expiry_and_accepts_it_a_microsecond_before(
    world: World,
) -> None:
    authority = ApprovalAuthority()
    plan = world.prepare()
    approval = authority.issue(plan, ttl_s=TTL_S, now=NOW)
    expiry = approval.expires_at
    assert expiry == NOW + TTL_S and expiry - MICROSECOND < expiry
    for late in (expiry, expiry + MICROSECOND):
        with pytest.raises(ApprovalInvalid) as refused:
            authority.redeem(plan, approval, now=late)
        assert refused.value.code == "APPROVAL_INVALID"
    authority.redeem(plan, approval, now=expiry - MICROSECOND)  # not used up by the refusals
    with pytest.raises(ApprovalInvalid):
        authority.redeem(plan, approval, now=expiry - MICROSECOND)  # single use


def test_approval_binds_is_false_at_exactly_the_expiry_and_true_a_microsecond_before(world: World) -> None:
    plan = world.prepare()
    approval = ApprovalAuthority().issue(plan, ttl_s=TTL_S, now=NOW)
    expiry = approval.expires_at
    assert approval_binds(plan, approval, expiry - MICROSECOND) is True
    assert approval_binds(plan, approval, expiry) is False
    assert approval_binds(plan, approval, expiry + MICROSECOND) is False


# -- every declared permission is checked, and an approval holds in its session only ----


@pytest.mark.parametrize(
    "missing",
    [["issues.read"], ["issues.labels"], DECLARED],
    ids=["first-declared", "last-declared", "every-declared"],
)
def test_principal_lacking_a_declared_permission_is_denied_although_the_tool_call_is_granted(
    world: World, missing: list[str]
) -> None:
    world.allow(f"tool.call:{TOOL}", *(p for p in DECLARED if p not in missing))
    with pytest.raises(PolicyDenied) as denied:
        world.prepare()
    assert denied.value.code == "POLICY_DENIED"
    assert denied.value.details["permissions"] == missing
    assert denied.value.details["permission"] == missing[0]
    world.allow(f"tool.call:{TOOL}", *DECLARED)
    assert world.prepare().status == "ready"  # the same call, with everything granted


def test_tool_call_permission_alone_is_checked_too(world: World) -> None:
    world.allow(*DECLARED)
    with pytest.raises(PolicyDenied) as denied:
        world.prepare()
    assert denied.value.details["permissions"] == [f"tool.call:{TOOL}"]


def test_authority_refuses_an_approval_issued_for_another_session(world: World) -> None:
    authority = ApprovalAuthority()
    plan_a, plan_b = world.prepare("session-a"), world.prepare("session-b")
    assert plan_a.action_digest == plan_b.action_digest  # the digest does not bind the session
    approval = authority.issue(plan_a, now=NOW)
    assert approval.session == "session-a"
    with pytest.raises(ApprovalInvalid) as refused:
        authority.redeem(plan_b, approval, now=NOW + 1)
    assert refused.value.code == "APPROVAL_INVALID"
    authority.redeem(plan_a, approval, now=NOW + 1)  # valid in its own session, once


def test_approval_binds_is_false_for_another_session(world: World) -> None:
    plan_a, plan_b = world.prepare("session-a"), world.prepare("session-b")
    approval = ApprovalAuthority().issue(plan_a, now=NOW)
    assert approval_binds(plan_a, approval, NOW + 1) is True
    assert approval_binds(plan_b, approval, NOW + 1) is False
