"""Session grants discharge *ask* only: never deny/disabled, never across sessions or principals."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import pytest

from host.policy import grants as grants_mod
from host.policy.bindings import BoundGrants
from host.policy.engine import FilePolicyEngine, Verdict, aggregate
from host.policy.grants import SessionGrants, final_decision
from host.policy.toolpolicy import ToolMode, ToolPolicyStore, ToolSelector
from tests.support.policy import P

ALICE, BOB = ("p", "alice"), ("p", "bob")
TOOL = "tracker.create"


def verdict(engine: FilePolicyEngine, store: ToolPolicyStore, grants: SessionGrants, session: str) -> str:
    """What the gateway computes for alice calling TOOL in ``session``."""
    decision = aggregate([engine.authorize(P("p", "alice"), "p", f"tool.call:{TOOL}")])
    mode = store.resolve("alice", "p", tool=TOOL, service="tracker", effect="write")
    return final_decision(decision.verdict, mode, grants.discharges(ALICE, session, TOOL))


@pytest.fixture
def engine(tmp_path: Path) -> FilePolicyEngine:
    engine = FilePolicyEngine.initialize(tmp_path / "policy.json")
    engine.set_role("agent", allow=[], ask=[f"tool.call:{TOOL}"])
    engine.grant_role("p", "alice", "agent")
    return engine


@pytest.fixture
def store(tmp_path: Path) -> ToolPolicyStore:
    return ToolPolicyStore(tmp_path / "tp", admin_dir=None)


def test_always_then_tighten_to_disabled_denies(engine: FilePolicyEngine, store: ToolPolicyStore) -> None:
    grants = SessionGrants()
    assert verdict(engine, store, grants, "s1") == "approval"
    grants.grant(ALICE, "s1", TOOL)  # the person said "always"
    assert verdict(engine, store, grants, "s1") == "allow"
    store.set("alice", "p", ToolSelector(TOOL), ToolMode.DISABLED)  # then tightened
    assert verdict(engine, store, grants, "s1") == "deny"


def test_always_then_engine_revoke_denies(engine: FilePolicyEngine, store: ToolPolicyStore) -> None:
    grants = SessionGrants()
    grants.grant(ALICE, "s1", TOOL)
    assert verdict(engine, store, grants, "s1") == "allow"
    engine.revoke_role("p", "alice", "agent")
    assert verdict(engine, store, grants, "s1") == "deny"


def test_session_a_always_does_not_discharge_session_b(engine: FilePolicyEngine, store: ToolPolicyStore) -> None:
    grants = SessionGrants()
    grants.grant(ALICE, "A", TOOL)
    assert verdict(engine, store, grants, "A") == "allow"
    assert verdict(engine, store, grants, "B") == "approval"


@pytest.mark.parametrize(
    ("principal", "session", "tool"),
    [(BOB, "s1", TOOL), (ALICE, "s2", TOOL), (ALICE, "s1", "tracker.delete"), (("q", "alice"), "s1", TOOL),
     (ALICE, "S1", TOOL), (ALICE, "s1", "tracker")],
    ids=["other-principal", "other-session", "other-tool", "same-subject-other-project", "session-case",
         "service-name-not-tool"],
)
def test_grant_is_exact_to_principal_session_and_tool(principal: tuple[str, str], session: str, tool: str) -> None:
    grants = SessionGrants()
    grants.grant(ALICE, "s1", TOOL)
    assert grants.discharges(ALICE, "s1", TOOL) is True
    assert grants.discharges(principal, session, tool) is False


def test_clear_grants_of_one_session() -> None:
    grants = SessionGrants()
    grants.grant(ALICE, "s1", TOOL)
    grants.grant(BOB, "s1", TOOL)
    grants.grant(ALICE, "s2", TOOL)
    assert grants.clear_grants("s1") == 2
    assert not grants.discharges(ALICE, "s1", TOOL)
    assert not grants.discharges(BOB, "s1", TOOL)
    assert grants.discharges(ALICE, "s2", TOOL)


def test_clear_grants_none_is_logout_of_everything() -> None:
    grants = SessionGrants()
    grants.grant(ALICE, "s1", TOOL)
    grants.grant(BOB, "s2", TOOL)
    assert grants.clear_grants(None) == 2
    assert not grants.discharges(ALICE, "s1", TOOL)
    assert not grants.discharges(BOB, "s2", TOOL)


def test_clear_grants_of_one_principal() -> None:
    grants = SessionGrants()
    grants.grant(ALICE, "s1", TOOL)
    grants.grant(BOB, "s1", TOOL)
    grants.clear_grants(principal_key=ALICE)
    assert not grants.discharges(ALICE, "s1", TOOL)
    assert grants.discharges(BOB, "s1", TOOL)


VERDICTS = {
    (Verdict.DENY, ToolMode.ALLOW): ("deny", "deny"),
    (Verdict.DENY, ToolMode.ASK): ("deny", "deny"),
    (Verdict.DENY, ToolMode.DISABLED): ("deny", "deny"),
    (Verdict.REQUIRE_APPROVAL, ToolMode.ALLOW): ("approval", "allow"),
    (Verdict.REQUIRE_APPROVAL, ToolMode.ASK): ("approval", "allow"),
    (Verdict.REQUIRE_APPROVAL, ToolMode.DISABLED): ("deny", "deny"),
    (Verdict.ALLOW, ToolMode.ALLOW): ("allow", "allow"),
    (Verdict.ALLOW, ToolMode.ASK): ("approval", "allow"),
    (Verdict.ALLOW, ToolMode.DISABLED): ("deny", "deny"),
}


@pytest.mark.parametrize(
    ("effect", "mode", "granted"),
    list(itertools.product(Verdict, ToolMode, [False, True])),
    ids=lambda v: getattr(v, "value", str(v)),
)
def test_final_decision_strictest_wins_and_grant_only_discharges_ask(
    effect: Verdict, mode: ToolMode, granted: bool
) -> None:
    assert final_decision(effect, mode, granted) == VERDICTS[(effect, mode)][int(granted)]


@pytest.mark.parametrize(
    "args",
    [("allow", ToolMode.ALLOW, False), (Verdict.ALLOW, "allow", False), (Verdict.ALLOW, ToolMode.ASK, 1),
     (Verdict.ALLOW, ToolMode.ASK, "yes"), (None, None, True)],
    ids=["raw-effect", "raw-mode", "int-granted", "str-granted", "none"],
)
def test_final_decision_refuses_loose_types(args: tuple) -> None:
    with pytest.raises(TypeError):
        final_decision(*args)


@pytest.mark.parametrize(
    "args",
    [(("p",), "s", "t"), (("p", ""), "s", "t"), (ALICE, "", "t"), (ALICE, "s", ""), (["p", "a"], "s", "t")],
    ids=["short-key", "empty-subject", "empty-session", "empty-tool", "list-key"],
)
def test_malformed_grant_keys_refused(args: tuple) -> None:
    with pytest.raises(TypeError):
        SessionGrants().grant(*args)


def test_grant_table_is_bounded_and_evicts_oldest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grants_mod, "MAX_GRANT_KEYS", 3)
    grants = SessionGrants()
    for n in range(4):
        grants.grant(ALICE, f"s{n}", TOOL)
    assert not grants.discharges(ALICE, "s0", TOOL)  # evicted: asked again, never widened
    assert all(grants.discharges(ALICE, f"s{n}", TOOL) for n in (1, 2, 3))


def test_tools_per_session_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grants_mod, "MAX_TOOLS_PER_SESSION", 2)
    grants = SessionGrants()
    for n in range(3):
        grants.grant(ALICE, "s", f"t{n}")
    assert sum(grants.discharges(ALICE, "s", f"t{n}") for n in range(3)) == 2
    assert grants.discharges(ALICE, "s", "t2")


def test_concurrent_grants_and_clears_are_consistent() -> None:
    grants = SessionGrants()

    def work(n: int) -> None:
        for i in range(200):
            grants.grant(("p", f"u{n}"), f"s{i % 5}", TOOL)
            grants.discharges(("p", f"u{n}"), f"s{i % 5}", TOOL)
            if i % 50 == 0:
                grants.clear_grants(f"s{(i + 1) % 5}")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    grants.clear_grants(None)
    assert not any(grants.discharges(("p", f"u{n}"), f"s{i}", TOOL) for n in range(8) for i in range(5))


# -- the layered tool-policy seed's cases, through binding-keyed grants (a Host's) -----------

BINDING = "b" * 64  # the tool's binding digest in the running generation


def bound_grants() -> tuple[SessionGrants, BoundGrants]:
    inner = SessionGrants()
    return inner, BoundGrants(inner, lambda name: (BINDING,) if name == TOOL else ())


def bound_verdict(engine: FilePolicyEngine, store: ToolPolicyStore, grants: BoundGrants, session: str) -> str:
    decision = aggregate([engine.authorize(P("p", "alice"), "p", f"tool.call:{TOOL}")])
    mode = store.resolve("alice", "p", tool=TOOL, service="tracker", effect="write", binding=BINDING)
    return final_decision(decision.verdict, mode, grants.discharges_bound(ALICE, session, TOOL, BINDING))


def test_b9_always_then_deny_must_stop(engine: FilePolicyEngine, store: ToolPolicyStore) -> None:
    _, grants = bound_grants()
    grants.grant(ALICE, "s1", TOOL)  # "always"
    assert bound_verdict(engine, store, grants, "s1") == "allow"
    store.set("alice", "p", ToolSelector(TOOL), ToolMode.DISABLED)  # then tightened to deny
    assert bound_verdict(engine, store, grants, "s1") == "deny"
    assert grants.discharges(ALICE, "s1", TOOL)  # the grant is still there: it just cannot loosen


def test_b13_grant_in_session_a_never_reaches_session_b(engine: FilePolicyEngine, store: ToolPolicyStore) -> None:
    inner, grants = bound_grants()
    grants.grant(ALICE, "A", TOOL)
    assert bound_verdict(engine, store, grants, "A") == "allow"
    assert bound_verdict(engine, store, grants, "B") == "approval"
    assert not grants.discharges(ALICE, "B", TOOL) and not inner.discharges(ALICE, "B", TOOL)
