"""The pending-approval queue: single use, principal-bound, expiring, locked, fail closed."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from host.approvals import MAX_PENDING, MAX_PENDING_PER_PRINCIPAL, ApprovalQueue
from host.errors import ApprovalInvalid, ApprovalQueueFull
from tests.support.hosts import HostFixture, echo_tool, make_host

WRITE = echo_tool(name="echo.write", effect="write", risk="medium", permissions=["echo.write"])


@pytest.fixture
def fx(tmp_path: Path) -> Any:
    fixture = make_host(tmp_path, tools=[WRITE], allow=("tool.call:echo.write", "echo.write"))
    yield fixture
    fixture.host.close()


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def plan_for(fx: HostFixture, message: str = "m", subject: str = "alice") -> Any:
    request = fx.request(tool="echo.write", input={"message": message})
    if subject != "alice":
        request = request.model_copy(
            update={"principal": request.principal.model_copy(update={"subject": subject})}
        )
    return fx.host.prepare(request)


def test_approved_entry_is_redeemed_once(fx: HostFixture, tmp_path: Path) -> None:
    queue = ApprovalQueue(tmp_path / "q")
    plan = plan_for(fx)
    entry = queue.request(plan, summary='{"message":"m"}')
    assert entry.status == "pending" and entry.tool == "echo.write" and entry.effect == "write"
    assert queue.redeem(plan.action_digest, project="p", subject="alice") == ("pending", entry)
    queue.decide(plan.action_digest, approve=True, by="test")
    status, decided = queue.redeem(plan.action_digest, project="p", subject="alice")
    assert status == "approved" and decided is not None and decided.decided_by == "test"
    assert queue.redeem(plan.action_digest, project="p", subject="alice") == ("absent", None)


def test_approval_redeemed_by_another_principal_refused(fx: HostFixture, tmp_path: Path) -> None:
    queue = ApprovalQueue(tmp_path / "q")
    plan = plan_for(fx)
    queue.request(plan, summary="")
    queue.decide(plan.action_digest, approve=True, by="test")
    assert queue.redeem(plan.action_digest, project="p", subject="mallory") == ("absent", None)
    assert queue.redeem(plan.action_digest, project="other", subject="alice") == ("absent", None)
    with pytest.raises(ApprovalInvalid):
        queue.decide(plan.action_digest, approve=True, by="test", subject="mallory")


def test_expired_entry_is_never_redeemed(fx: HostFixture, tmp_path: Path) -> None:
    clock = Clock()
    queue = ApprovalQueue(tmp_path / "q", ttl_s=60, clock=clock)
    plan = plan_for(fx)
    queue.request(plan, summary="")
    queue.decide(plan.action_digest, approve=True, by="test")
    clock.now += 61
    assert queue.redeem(plan.action_digest, project="p", subject="alice") == ("absent", None)
    assert queue.entries() == []
    with pytest.raises(ApprovalInvalid, match="no pending approval"):
        queue.decide(plan.action_digest, approve=True, by="test")


def test_deciding_twice_refused(fx: HostFixture, tmp_path: Path) -> None:
    queue = ApprovalQueue(tmp_path / "q")
    plan = plan_for(fx)
    queue.request(plan, summary="")
    queue.decide(plan.action_digest, approve=False, by="test")
    with pytest.raises(ApprovalInvalid):
        queue.decide(plan.action_digest, approve=True, by="test")  # a denial cannot be flipped
    assert queue.redeem(plan.action_digest, project="p", subject="alice")[0] == "denied"


def test_malformed_queue_file_fails_closed(fx: HostFixture, tmp_path: Path) -> None:
    queue = ApprovalQueue(tmp_path / "q")
    plan = plan_for(fx)
    queue.request(plan, summary="")
    path = tmp_path / "q" / "approvals.json"
    data = json.loads(path.read_text())
    data["entries"][0]["status"] = "approved-by-someone"
    path.write_text(json.dumps(data))
    with pytest.raises(ApprovalInvalid, match="malformed"):
        queue.redeem(plan.action_digest, project="p", subject="alice")


def test_full_queue_refuses_new_entries(fx: HostFixture, tmp_path: Path) -> None:
    queue = ApprovalQueue(tmp_path / "q")
    for i in range(MAX_PENDING):
        queue.request(plan_for(fx, message=f"m{i}"), summary="", max_per_principal=MAX_PENDING + 1)
    with pytest.raises(ApprovalQueueFull, match=f"the bound is {MAX_PENDING} in all"):
        queue.request(plan_for(fx, message="one more"), summary="", max_per_principal=MAX_PENDING + 1)


def test_one_principal_over_its_pending_share_is_refused(fx: HostFixture, tmp_path: Path) -> None:
    queue = ApprovalQueue(tmp_path / "q")
    for i in range(MAX_PENDING_PER_PRINCIPAL):
        queue.request(plan_for(fx, message=f"m{i}"), summary="")
    with pytest.raises(ApprovalQueueFull, match="per principal") as refused:
        queue.request(plan_for(fx, message="one more"), summary="")
    assert refused.value.details == {"bound": "per_principal", "limit": MAX_PENDING_PER_PRINCIPAL}
    assert len(queue.entries()) == MAX_PENDING_PER_PRINCIPAL


def test_concurrent_requests_lose_no_entry(fx: HostFixture, tmp_path: Path) -> None:
    plans = [plan_for(fx, message=f"c{i}") for i in range(16)]
    errors: list[BaseException] = []

    def add(plan: Any) -> None:
        try:
            ApprovalQueue(tmp_path / "q").request(plan, summary="")  # a queue object per "process"
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(p,)) for p in plans]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert {e.action_digest for e in ApprovalQueue(tmp_path / "q").entries()} == {
        p.action_digest for p in plans
    }


def test_queued_whole_input_lives_exactly_as_long_as_its_entry(fx: HostFixture, tmp_path: Path) -> None:
    queue = ApprovalQueue(tmp_path / "q")
    plan = plan_for(fx, message="whole")
    entry = queue.request(plan, summary="short", full_input='{"message":"whole"}')
    assert queue.full_input(entry) == '{"message":"whole"}'
    queue.decide(plan.action_digest, approve=True, by="test")
    queue.redeem(plan.action_digest, project=entry.project, subject=entry.subject)
    assert queue.full_input(entry) is None
    assert list((tmp_path / "q" / "approvals.inputs").iterdir()) == []
