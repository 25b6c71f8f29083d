"""The host-MAC'd ``requestState``: bound, expiring, single use; one opaque error."""

from __future__ import annotations

import pytest

from host.errors import ApprovalInvalid
from host.mcp.state import RequestStates

DIGEST = "a" * 64


class Clock:
    now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_state_redeems_once_then_replay_refused() -> None:
    states = RequestStates()
    token = states.mint(DIGEST, ("p", "alice"), generation=1)
    states.redeem(token, DIGEST, ("p", "alice"), generation=1)
    with pytest.raises(ApprovalInvalid):
        states.redeem(token, DIGEST, ("p", "alice"), generation=1)


@pytest.mark.parametrize(
    "digest,principal,generation",
    [
        ("b" * 64, ("p", "alice"), 1),
        (DIGEST, ("p", "mallory"), 1),
        (DIGEST, ("q", "alice"), 1),
        (DIGEST, ("p", "alice"), 2),
    ],
    ids=["other-action", "other-subject", "other-project", "other-generation"],
)
def test_state_for_another_binding_refused(digest: str, principal: tuple[str, str], generation: int) -> None:
    states = RequestStates()
    token = states.mint(DIGEST, ("p", "alice"), generation=1)
    with pytest.raises(ApprovalInvalid):
        states.redeem(token, digest, principal, generation=generation)
    states.redeem(token, DIGEST, ("p", "alice"), generation=1)  # the refusal did not consume it


def test_expired_state_refused() -> None:
    clock = Clock()
    states = RequestStates(ttl_s=60, clock=clock)
    token = states.mint(DIGEST, ("p", "alice"), generation=1)
    clock.now += 61
    with pytest.raises(ApprovalInvalid):
        states.redeem(token, DIGEST, ("p", "alice"), generation=1)


@pytest.mark.parametrize("token", ["", "v1", "v1..", "v2.e30.x", "v1.e30." + "A" * 43, 7, "v1." + "A" * 5000])
def test_malformed_or_forged_state_refused(token: object) -> None:
    with pytest.raises(ApprovalInvalid):
        RequestStates().redeem(token, DIGEST, ("p", "alice"), generation=1)


def test_state_from_another_server_refused() -> None:
    token = RequestStates().mint(DIGEST, ("p", "alice"), generation=1)
    with pytest.raises(ApprovalInvalid):
        RequestStates().redeem(token, DIGEST, ("p", "alice"), generation=1)
