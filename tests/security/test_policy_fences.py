"""Fences: a multi-permission call is never authorized from decisions of different policy states."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from host.errors import PolicyUnavailable
from host.policy.engine import Decision, FilePolicyEngine, Verdict, aggregate, check_fences
from host.types import Fence
from tests.support.policy import P

F = Fence(4, 9)
ALLOW = Decision(Verdict.ALLOW, F)
ASK = Decision(Verdict.REQUIRE_APPROVAL, F)
DENY = Decision(Verdict.DENY, None)


def test_same_fence_accepted() -> None:
    assert check_fences([ALLOW, ASK, ALLOW]) == F
    assert check_fences([ALLOW, DENY]) == F  # deny decisions need no fence


def test_zero_versions_are_well_formed() -> None:
    assert check_fences([Decision(Verdict.ALLOW, Fence(0, 0))]) == Fence(0, 0)


BAD: list[tuple[str, list[Any]]] = [
    ("no-decisions", []),
    ("missing-fence", [ALLOW, Decision(Verdict.ALLOW, None)]),
    ("negative-policy-version", [Decision(Verdict.ALLOW, Fence(-1, 9))]),
    ("negative-binding-version", [Decision(Verdict.REQUIRE_APPROVAL, Fence(4, -1))]),
    ("bool-version", [Decision(Verdict.ALLOW, Fence(True, 1))]),
    ("bool-version-equal-to-int", [Decision(Verdict.ALLOW, Fence(1, 1)), Decision(Verdict.ALLOW, Fence(True, 1))]),
    ("float-version", [Decision(Verdict.ALLOW, Fence(4.0, 9))]),  # type: ignore[arg-type]
    ("string-version", [Decision(Verdict.ALLOW, Fence("4", 9))]),  # type: ignore[arg-type]
    ("tuple-not-fence", [Decision(Verdict.ALLOW, (4, 9))]),  # type: ignore[arg-type]
    ("mixed-policy-version", [ALLOW, Decision(Verdict.ALLOW, Fence(5, 9))]),
    ("mixed-binding-version", [ASK, Decision(Verdict.REQUIRE_APPROVAL, Fence(4, 10))]),
    ("raw-string-effect", [Decision("allow", F)]),  # type: ignore[arg-type]
    ("not-a-decision", [ALLOW, {"effect": "allow", "fence": F}]),
    ("none-decision", [ALLOW, None]),
    ("only-denies", [DENY, DENY]),
]


@pytest.mark.parametrize("decisions", [d for _, d in BAD], ids=[n for n, _ in BAD])
def test_missing_malformed_or_mixed_fence_fails_closed(decisions: list[Any]) -> None:
    with pytest.raises(PolicyUnavailable) as info:
        check_fences(decisions)
    assert info.value.code == "POLICY_UNAVAILABLE"


@pytest.mark.parametrize(
    "decisions",
    [d for n, d in BAD if n != "only-denies"],
    ids=[n for n, _ in BAD if n != "only-denies"],
)
def test_aggregate_fails_closed_like_check_fences(decisions: list[Any]) -> None:
    with pytest.raises(PolicyUnavailable):
        aggregate(decisions)


def test_aggregate_first_deny_wins_even_after_allows() -> None:
    deny = Decision(Verdict.DENY, F, "no role grants issues.write")
    assert aggregate([ALLOW, ASK, deny, ALLOW]) is deny


def test_aggregate_malformed_decision_refused_even_next_to_a_deny() -> None:
    with pytest.raises(PolicyUnavailable):
        aggregate([DENY, "allow"])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("decisions", "effect"),
    [([ALLOW, ALLOW], Verdict.ALLOW), ([ALLOW, ASK], Verdict.REQUIRE_APPROVAL), ([ASK], Verdict.REQUIRE_APPROVAL)],
    ids=["all-allow", "one-ask", "only-ask"],
)
def test_aggregate_strictest_effect_with_common_fence(decisions: list[Decision], effect: Verdict) -> None:
    result = aggregate(decisions)
    assert (result.verdict, result.fence) == (effect, F)


def test_revoke_between_two_permission_checks_is_a_mixed_fence(tmp_path: Path) -> None:
    """A tool needing two permissions cannot be authorized half before, half after a revoke."""
    engine = FilePolicyEngine.initialize(tmp_path / "policy.json")
    engine.set_role("writer", allow=["tool.call:t.w", "issues.write"])
    engine.set_role("writer2", allow=["issues.write"])
    engine.grant_role("p", "alice", "writer")
    engine.grant_role("p", "alice", "writer2")
    alice = P("p", "alice")
    first = engine.authorize(alice, "p", "tool.call:t.w")
    engine.revoke_role("p", "alice", "writer2")  # issues.write is still allowed through "writer"
    second = engine.authorize(alice, "p", "issues.write")
    assert (first.verdict, second.verdict) == (Verdict.ALLOW, Verdict.ALLOW)
    with pytest.raises(PolicyUnavailable, match="different fences"):
        check_fences([first, second])
