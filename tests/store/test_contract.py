"""One contract, two backends: every test here runs against ``local`` and ``postgres``.

The contract is :mod:`host.store.port`'s: one verifiable chain in the format of
:mod:`host.audit.log`, approvals redeemed once, rate-limit windows that never admit more than
their limit and count nothing on refusal, grants that answer only for the exact key,
and lock generations that only move forward.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from host.audit.log import verify
from host.canonical import canonical_json
from host.config import HostConfig
from host.errors import ApprovalInvalid, ApprovalQueueFull, LockRollback, RateLimited
from host.store import StateStore
from host.trust.lock import LoadedLock, load_lock
from host.types import InvocationPlan
from tests.support.bundles import lock_digest, lock_entry, make_manifest, write_bundle, write_lock
from tests.support.hosts import ALICE, HostFixture, echo_tool, make_host

BOB = ("p", "bob")


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, InvocationPlan]]:
    """Real plans from a real Host: an approval-required write for alice in s1 and s2."""
    fx: HostFixture = make_host(
        tmp_path_factory.mktemp("plans"),
        tools=[echo_tool(effect="write")],
    )
    try:
        yield {
            "s1": fx.host.prepare(fx.request()),
            "s2": fx.host.prepare(fx.request(session="s2")),
            "other-input": fx.host.prepare(fx.request(input={"message": "other"})),
        }
    finally:
        fx.host.close()


def chain_lines(store: StateStore, backend: tuple[str, object], project: str = "p") -> list[bytes]:
    """The records of ``project``'s chain as exact lines (the local log is one chain)."""
    kind, _ = backend
    if kind == "local":
        return Path(store.audit.path).read_bytes().splitlines(keepends=True)  # type: ignore[attr-defined]
    return [(line + "\n").encode() for line in store.lines(f"project:{project}")]  # type: ignore[attr-defined]


def verify_lines(tmp_path: Path, lines: list[bytes], **kwargs: Any) -> Any:
    exported = tmp_path / "exported.jsonl"
    exported.write_bytes(b"".join(lines))
    return verify(exported, **kwargs)


# -- audit -------------------------------------------------------------------------------


def test_appended_records_form_one_chain_that_verifies(
    store: StateStore, backend: tuple[str, object], tmp_path: Path
) -> None:
    ids = [store.audit.append("call.outcome", {"project": "p", "n": n, "ok": True}) for n in range(5)]
    lines = chain_lines(store, backend)
    assert len(lines) == 5
    records = [json.loads(line) for line in lines]
    assert [r["seq"] for r in records] == [1, 2, 3, 4, 5]
    assert [r["hash"] for r in records] == ids
    assert records[0]["prev"] == "0" * 64
    assert all(records[i]["prev"] == ids[i - 1] for i in range(1, 5))
    report = verify_lines(tmp_path, lines, expected_head=ids[-1])
    assert report.ok and report.records == 5


def test_audit_id_is_the_sha256_of_the_canonical_record(store: StateStore, backend: tuple[str, object]) -> None:
    audit_id = store.audit.append("call.outcome", {"project": "p", "tool": "echo.say"})
    (line,) = chain_lines(store, backend)
    record = json.loads(line)
    body = {k: v for k, v in record.items() if k != "hash"}
    assert hashlib.sha256(canonical_json(body)).hexdigest() == audit_id
    assert canonical_json(record) + b"\n" == line


@pytest.mark.parametrize("payload", [{"seq": 9}, {"hash": "0" * 64}, {"prev": "x"}], ids=["seq", "hash", "prev"])
def test_reserved_fields_cannot_be_forged_into_a_record(store: StateStore, payload: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="reserved"):
        store.audit.append("call.outcome", payload)


def test_edited_exported_record_detected(store: StateStore, backend: tuple[str, object], tmp_path: Path) -> None:
    for n in range(3):
        store.audit.append("call.outcome", {"project": "p", "n": n})
    lines = chain_lines(store, backend)
    lines[1] = lines[1].replace(b'"n":1', b'"n":7')
    report = verify_lines(tmp_path, lines)
    assert not report.ok and report.first_broken == 2


# -- approvals ---------------------------------------------------------------------------


def test_approval_redeemed_once(store: StateStore, plans: dict[str, InvocationPlan]) -> None:
    approval = store.approvals.issue(plans["s1"])
    store.approvals.redeem(plans["s1"], approval)
    with pytest.raises(ApprovalInvalid) as caught:
        store.approvals.redeem(plans["s1"], approval)
    assert caught.value.code == "APPROVAL_INVALID"


@pytest.mark.parametrize("target", ["s2", "other-input"], ids=["other-session", "other-action"])
def test_approval_for_another_session_or_action_refused_and_not_consumed(
    store: StateStore, plans: dict[str, InvocationPlan], target: str
) -> None:
    approval = store.approvals.issue(plans["s1"])
    with pytest.raises(ApprovalInvalid, match="not valid"):
        store.approvals.redeem(plans[target], approval)
    store.approvals.redeem(plans["s1"], approval)  # still redeemable where it belongs


def test_expired_approval_refused(store: StateStore, plans: dict[str, InvocationPlan]) -> None:
    approval = store.approvals.issue(plans["s1"], ttl_s=1.0, now=1_000.0)
    with pytest.raises(ApprovalInvalid):
        store.approvals.redeem(plans["s1"], approval)


def test_forged_approval_with_a_fresh_nonce_refused(store: StateStore, plans: dict[str, InvocationPlan]) -> None:
    approval = store.approvals.issue(plans["s1"])
    forged = approval.model_copy(update={"nonce": "ab" * 16})
    with pytest.raises(ApprovalInvalid):
        store.approvals.redeem(plans["s1"], forged)


@pytest.mark.parametrize("ttl_s", [float("inf"), float("nan"), 0.0, -1.0], ids=["inf", "nan", "zero", "negative"])
def test_approval_that_would_never_expire_is_not_issued(
    store: StateStore, plans: dict[str, InvocationPlan], ttl_s: float
) -> None:
    # Regression (pg_approval_infinite_ttl): the postgres backend wrote its own issue()
    # and checked only ttl_s <= 0, so ttl_s=inf gave an approval valid for ever
    # (to_timestamp('Infinity')) and NaN slipped through; both backends share one now.
    with pytest.raises(ValueError, match="finite"):
        store.approvals.issue(plans["s1"], ttl_s=ttl_s)


def test_approval_redeemed_at_a_non_finite_time_is_refused(
    store: StateStore, plans: dict[str, InvocationPlan]
) -> None:
    approval = store.approvals.issue(plans["s1"])
    with pytest.raises(ValueError, match="finite"):
        store.approvals.redeem(plans["s1"], approval, now=float("nan"))
    store.approvals.redeem(plans["s1"], approval)  # not consumed by the refused attempt


# -- rate limits -------------------------------------------------------------------------


def test_rate_limit_admits_exactly_the_limit_and_refusal_counts_nothing(store: StateStore) -> None:
    limits = store.rate_limits
    for _ in range(3):
        limits.check_and_consume(ALICE.key, "echo.say", per_minute=3, per_hour=None)
    for _ in range(2):
        with pytest.raises(RateLimited) as caught:
            limits.check_and_consume(ALICE.key, "echo.say", per_minute=3, per_hour=None)
        assert caught.value.code == "RATE_LIMITED"
        assert caught.value.details["window"] == "minute" and caught.value.details["limit"] == 3
        assert 0 < caught.value.details["retry_after_s"] <= 61
    # a refusal counted nothing: a larger limit admits exactly one more
    limits.check_and_consume(ALICE.key, "echo.say", per_minute=4, per_hour=None)
    with pytest.raises(RateLimited):
        limits.check_and_consume(ALICE.key, "echo.say", per_minute=4, per_hour=None)


def test_rate_limit_is_per_principal_and_tool(store: StateStore) -> None:
    limits = store.rate_limits
    limits.check_and_consume(ALICE.key, "echo.say", per_minute=1, per_hour=None)
    limits.check_and_consume(BOB, "echo.say", per_minute=1, per_hour=None)
    limits.check_and_consume(ALICE.key, "echo.other", per_minute=1, per_hour=None)
    with pytest.raises(RateLimited):
        limits.check_and_consume(ALICE.key, "echo.say", per_minute=1, per_hour=None)


def test_hour_window_refuses_when_minute_window_has_room(store: StateStore) -> None:
    limits = store.rate_limits
    limits.check_and_consume(ALICE.key, "echo.say", per_minute=10, per_hour=2)
    limits.check_and_consume(ALICE.key, "echo.say", per_minute=10, per_hour=2)
    with pytest.raises(RateLimited) as caught:
        limits.check_and_consume(ALICE.key, "echo.say", per_minute=10, per_hour=2)
    assert caught.value.details["window"] == "hour"


@pytest.mark.parametrize("bad", [0, -1, True, 1.5], ids=["zero", "negative", "bool", "float"])
def test_rate_limit_misuse_is_a_value_error(store: StateStore, bad: Any) -> None:
    with pytest.raises(ValueError, match="per_minute"):
        store.rate_limits.check_and_consume(ALICE.key, "echo.say", per_minute=bad, per_hour=None)


# -- session grants ----------------------------------------------------------------------


def test_grant_answers_only_for_its_exact_principal_session_and_tool(store: StateStore) -> None:
    grants = store.grants
    grants.grant(ALICE.key, "s1", "echo.say")
    grants.grant(ALICE.key, "s1", "echo.say")  # idempotent
    assert grants.discharges(ALICE.key, "s1", "echo.say") is True
    assert grants.discharges(ALICE.key, "s2", "echo.say") is False
    assert grants.discharges(BOB, "s1", "echo.say") is False
    assert grants.discharges(ALICE.key, "s1", "echo.other") is False
    assert grants.discharges(("q", "alice"), "s1", "echo.say") is False


def test_clear_grants_by_session_principal_and_all(store: StateStore) -> None:
    grants = store.grants
    grants.grant(ALICE.key, "s1", "a")
    grants.grant(ALICE.key, "s1", "b")
    grants.grant(ALICE.key, "s2", "a")
    grants.grant(BOB, "s1", "a")
    assert grants.clear_grants("s1", principal_key=BOB) == 1
    assert grants.discharges(BOB, "s1", "a") is False
    assert grants.clear_grants("s1") == 1  # alice's s1 (two tools, one entry)
    assert grants.discharges(ALICE.key, "s1", "a") is False
    assert grants.discharges(ALICE.key, "s2", "a") is True
    assert grants.clear_grants() == 1
    assert grants.discharges(ALICE.key, "s2", "a") is False


def test_grant_key_misuse_is_a_type_error(store: StateStore) -> None:
    with pytest.raises(TypeError):
        store.grants.grant(("p", ""), "s1", "a")
    with pytest.raises(TypeError):
        store.grants.discharges(ALICE.key, "", "a")


# -- lock generations --------------------------------------------------------------------


class Locks:
    """A repo of successive lock generations over one real bundle."""

    def __init__(self, root: Path) -> None:
        self.repo = root / "repo"
        self.config = HostConfig(state_dir=root / "unused-state")
        self.bundle = write_bundle(self.repo / "bundles" / "tracker", make_manifest())

    def chain(self, generations: int) -> list[LoadedLock]:
        locks: list[LoadedLock] = []
        previous: str | None = None
        for generation in range(1, generations + 1):
            path = write_lock(self.repo / f"gen{generation}.lock", [lock_entry(self.repo, self.bundle)],
                              generation=generation, previous=previous)
            locks.append(load_lock(path, config=self.config, trusted_keys=None))
            previous = lock_digest(path)
        return locks


def test_lock_generation_rollback_refused_and_state_unchanged(store: StateStore, tmp_path: Path) -> None:
    gen1, gen2 = Locks(tmp_path).chain(2)
    assert store.locks.current_generation() is None
    store.locks.accept(gen1)
    store.locks.accept(gen2)
    store.locks.accept(gen2)  # the same lock again is fine
    with pytest.raises(LockRollback) as caught:
        store.locks.accept(gen1)
    assert caught.value.code == "LOCK_ROLLBACK"
    assert caught.value.details["reason"] == "rollback"
    assert store.locks.current_generation() == 2


def test_lock_generation_fork_refused(store: StateStore, tmp_path: Path) -> None:
    locks = Locks(tmp_path)
    (gen1,) = locks.chain(1)
    store.locks.accept(gen1)
    other = write_lock(locks.repo / "fork.lock", [lock_entry(locks.repo, locks.bundle)],
                       generation=2, previous="f" * 64)
    with pytest.raises(LockRollback) as caught:
        store.locks.accept(load_lock(other, config=locks.config, trusted_keys=None))
    assert caught.value.details["reason"] == "fork"
    assert store.locks.current_generation() == 1


def test_unsafe_accept_rollback_moves_the_state_back(store: StateStore, tmp_path: Path) -> None:
    gen1, gen2 = Locks(tmp_path).chain(2)
    store.locks.accept(gen2)
    store.locks.accept(gen1, unsafe_accept_rollback=True)
    assert store.locks.current_generation() == 1


# -- pending approvals ---------------------------------------------------------------------


def test_pending_approval_queued_decided_and_redeemed_once(
    store: StateStore, plans: dict[str, InvocationPlan]
) -> None:
    plan = plans["s1"]
    principal = plan.request.principal
    entry = store.pending.request(plan, summary='{"message":"hi"}')
    assert store.pending.request(plan, summary="again") == entry  # one entry per action
    assert [e.action_digest for e in store.pending.entries()] == [plan.action_digest]
    assert store.pending.redeem(plan.action_digest, project="p", subject="alice")[0] == "pending"
    decided = store.pending.decide(plan.action_digest, approve=True, by="reviewer")
    assert decided.status == "approved" and decided.decided_by == "reviewer"
    assert store.pending.redeem(plan.action_digest, project=principal.project, subject="alice")[0] == "approved"
    assert store.pending.redeem(plan.action_digest, project="p", subject="alice") == ("absent", None)
    assert store.pending.entries() == []


def test_pending_approval_of_another_principal_not_redeemed(
    store: StateStore, plans: dict[str, InvocationPlan]
) -> None:
    plan = plans["s1"]
    store.pending.request(plan, summary="")
    store.pending.decide(plan.action_digest, approve=False, by="reviewer")
    assert store.pending.redeem(plan.action_digest, project="p", subject="mallory") == ("absent", None)
    assert store.pending.redeem(plan.action_digest, project="p", subject="alice")[0] == "denied"


def test_one_principal_over_its_pending_share_refused(
    store: StateStore, plans: dict[str, InvocationPlan]
) -> None:
    entry = store.pending.request(plans["s1"], summary="", max_per_principal=1)
    assert store.pending.request(plans["s1"], summary="", max_per_principal=1) == entry  # not a new one
    with pytest.raises(ApprovalQueueFull, match="the bound is 1 per principal"):
        store.pending.request(plans["other-input"], summary="", max_per_principal=1)
    assert store.pending.entries() == [entry]  # the refusal changed nothing


def test_deciding_an_unknown_digest_refused(store: StateStore) -> None:
    with pytest.raises(ApprovalInvalid, match="no pending approval"):
        store.pending.decide("0" * 64, approve=True, by="reviewer")
