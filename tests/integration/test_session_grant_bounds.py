"""Session grants are bounded: an end (default 8 h), an optional call count counted once
per call, a record when granted and revoked, and revocation; never the hard floor."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from host.policy.grants import DEFAULT_GRANT_TTL_S, SessionGrants
from tests.support.hosts import HostFixture, echo_tool, make_host

WRITE = echo_tool(name="echo.write", effect="write", risk="medium", permissions=["echo.write"])
PERMS = ("tool.call:echo.write", "echo.write")
ALICE = ("p", "alice")


@pytest.fixture
def fx(tmp_path: Path) -> HostFixture:
    return make_host(tmp_path, tools=[WRITE], allow=PERMS)


def kinds(fx: HostFixture) -> list[str]:
    return [json.loads(line)["kind"] for line in fx.audit_path.read_text().splitlines()]


def test_a_counted_grant_runs_exactly_its_calls_then_asks(fx: HostFixture) -> None:
    with fx.host:
        fx.host.grants.grant(ALICE, "s1", "echo.write", max_calls=2)
        results = [fx.host.call(fx.request(tool="echo.write")) for _ in range(3)]
    assert [r.ok for r in results] == [True, True, False]
    assert results[2].error is not None and results[2].error.code == "APPROVAL_REQUIRED"
    records = [json.loads(line) for line in fx.audit_path.read_text().splitlines()]
    (granted,) = [r for r in records if r["kind"] == "session_grant.granted"]
    assert granted["max_calls"] == 2 and granted["ttl_s"] == DEFAULT_GRANT_TTL_S
    used = [r for r in records if r["kind"] == "call.outcome" and r.get("discharged_by") == "session_grant"]
    assert len(used) == 2


def test_a_revoked_grant_asks_on_the_next_call_and_is_recorded(fx: HostFixture) -> None:
    with fx.host:
        fx.host.grants.grant(ALICE, "s1", "echo.write")
        assert fx.host.call(fx.request(tool="echo.write")).ok
        assert fx.host.grants.revoke(ALICE, "s1", "echo.write") is True
        again = fx.host.call(fx.request(tool="echo.write"))
    assert again.error is not None and again.error.code == "APPROVAL_REQUIRED"
    assert kinds(fx).count("session_grant.revoked") == 1


def test_a_grant_ends_at_its_ttl_on_an_injected_clock() -> None:
    clock = [1000.0]
    grants = SessionGrants(clock=lambda: clock[0])
    grants.grant(ALICE, "s1", "t", ttl_s=60)
    assert grants.discharges(ALICE, "s1", "t")
    clock[0] += 60
    assert not grants.discharges(ALICE, "s1", "t") and grants.consume(ALICE, "s1", "t") == -1


def test_by_default_a_grant_is_no_longer_unbounded() -> None:
    clock = [0.0]
    grants = SessionGrants(clock=lambda: clock[0])
    grants.grant(ALICE, "s1", "t")
    clock[0] = DEFAULT_GRANT_TTL_S - 1
    assert grants.discharges(ALICE, "s1", "t")
    clock[0] = DEFAULT_GRANT_TTL_S
    assert not grants.discharges(ALICE, "s1", "t")


@pytest.mark.parametrize("ttl_s", [math.inf, math.nan, 0, -1, 8 * 86_400, True])
def test_a_grant_that_would_never_end_is_refused(ttl_s: float) -> None:
    with pytest.raises(ValueError, match="ttl_s"):
        SessionGrants().grant(ALICE, "s1", "t", ttl_s=ttl_s)


@pytest.mark.parametrize("max_calls", [0, -1, 1.5, True])
def test_a_zero_or_non_integer_count_is_refused(max_calls: object) -> None:
    with pytest.raises(ValueError, match="max_calls"):
        SessionGrants().grant(ALICE, "s1", "t", max_calls=max_calls)  # type: ignore[arg-type]
