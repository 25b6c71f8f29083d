"""Non-finite times are refused on every path.

Attack: ``Principal(expires_at=float("nan"))`` never expired, because every comparison
with NaN is false; the same held for a NaN ``now`` or approval ``ttl_s``.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from pydantic import ValidationError

from host import Principal
from host.approvals import ApprovalAuthority
from host.errors import ApprovalInvalid, RequestInvalid
from host.types import Approval, InvocationPlan
from tests.support.hosts import HostFixture, make_host

NON_FINITE = [math.nan, math.inf, -math.inf]
IDS = ["nan", "inf", "-inf"]


@pytest.fixture
def fx(tmp_path: Path) -> HostFixture:
    return make_host(tmp_path)


@pytest.mark.parametrize("value", NON_FINITE, ids=IDS)
def test_principal_that_never_expires_through_nan_refused(value: float) -> None:
    with pytest.raises(ValidationError, match="finite"):
        Principal(project="p", subject="alice", expires_at=value)


@pytest.mark.parametrize("value", NON_FINITE, ids=IDS)
def test_envelope_with_non_finite_expiry_refused(fx: HostFixture, value: float) -> None:
    envelope = {"principal": {"project": "p", "subject": "alice", "expires_at": value}, "session": "s1",
                "tool": "echo.say", "version": "1.0.0", "input": {"message": "hi"}}
    with pytest.raises(RequestInvalid):
        fx.host.prepare(envelope)
    result = fx.host.call(envelope)
    assert result.error is not None and result.error.code == "REQUEST_INVALID"


def test_principal_smuggled_past_validation_with_nan_counts_as_expired(fx: HostFixture) -> None:
    ghost = Principal.model_construct(project="p", subject="alice", expires_at=math.nan)
    with pytest.raises(RequestInvalid, match="expired"):
        fx.host.prepare(fx.request(principal=ghost))


def _plan(fx: HostFixture) -> InvocationPlan:
    return fx.host.prepare(fx.request())


@pytest.mark.parametrize("ttl", [*NON_FINITE, 0, -1], ids=[*IDS, "zero", "negative"])
def test_approval_ttl_must_be_positive_and_finite(fx: HostFixture, ttl: float) -> None:
    with pytest.raises(ValueError, match="finite"):
        fx.host.approve(_plan(fx), ttl_s=ttl)


@pytest.mark.parametrize("now", NON_FINITE, ids=IDS)
def test_non_finite_reference_time_refused(fx: HostFixture, now: float) -> None:
    authority = ApprovalAuthority()
    plan = _plan(fx)
    with pytest.raises(ValueError, match="finite unix time"):
        authority.issue(plan, now=now)
    approval = authority.issue(plan, now=1000.0)
    with pytest.raises(ValueError, match="finite unix time"):
        authority.redeem(plan, approval, now=now)
    authority.redeem(plan, approval, now=1001.0)  # the approval itself was fine
    with pytest.raises(ApprovalInvalid):
        authority.redeem(plan, approval, now=1001.0)  # and single use


@pytest.mark.parametrize("value", NON_FINITE, ids=IDS)
def test_approval_with_non_finite_expiry_refused(value: float) -> None:
    with pytest.raises(ValidationError, match="finite"):
        Approval(action_digest="a" * 64, project="p", subject="alice", session="s1", expires_at=value,
                 nonce="b" * 32, mac="c" * 64)


@pytest.mark.parametrize("name", ["audit_flush_interval_ms", "audit_checkpoint_interval_s"])
@pytest.mark.parametrize("value", NON_FINITE, ids=IDS)
def test_host_config_times_must_be_finite(tmp_path: Path, name: str, value: float) -> None:
    from host import HostConfig  # noqa: PLC0415

    with pytest.raises(ValueError, match=name):
        HostConfig(state_dir=tmp_path, **{name: value})
