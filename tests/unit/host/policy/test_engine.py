"""FilePolicyEngine: roles, bindings, exact permissions, versions, fail-closed reads."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from host.errors import PolicyUnavailable
from host.policy import _files
from host.policy import engine as engine_mod
from host.policy.engine import Decision, FilePolicyEngine, Verdict
from host.types import Fence
from tests.support.policy import P, policy_doc, write_json

ROLES = {
    "reader": {"allow": ["issues.read", "tool.call:tracker.list"], "ask": []},
    "agent": {"allow": [], "ask": ["tool.call:tracker.create", "issues.write", "issues.read"]},
    "globber": {"allow": ["issues.*", "*"], "ask": []},
}


@pytest.fixture
def policy_path(tmp_path: Path) -> Path:
    path = tmp_path / "policy.json"
    write_json(
        path,
        policy_doc(
            roles=ROLES,
            bindings={"p": {"alice": ["reader", "agent"], "bob": ["agent"], "gus": ["globber"]}},
            policy_version=3,
            role_binding_version=7,
        ),
    )
    return path


@pytest.mark.parametrize(
    ("subject", "permission", "effect"),
    [
        ("alice", "issues.read", Verdict.ALLOW),  # allow wins over another role's ask
        ("alice", "issues.write", Verdict.REQUIRE_APPROVAL),
        ("bob", "issues.read", Verdict.REQUIRE_APPROVAL),
        ("bob", "tool.call:tracker.list", Verdict.DENY),
        ("mallory", "issues.read", Verdict.DENY),  # unbound subject
        ("gus", "issues.read", Verdict.DENY),  # "issues.*" is a literal, not a pattern
        ("gus", "tool.call:tracker.list", Verdict.DENY),  # "*" is a literal, not a wildcard
        ("gus", "*", Verdict.ALLOW),
        ("alice", "ISSUES.READ", Verdict.DENY),  # exact, case-sensitive
        ("alice", "issues.read ", Verdict.DENY),
    ],
    ids=[
        "allow-beats-ask", "ask", "ask-only-role", "not-granted", "unbound-subject",
        "star-suffix-is-literal", "star-is-literal", "literal-star", "case-sensitive", "trailing-space",
    ],
)
def test_decision_follows_roles_exactly(policy_path: Path, subject: str, permission: str, effect: Verdict) -> None:
    decision = FilePolicyEngine(policy_path).authorize(P("p", subject), "p", permission)
    assert decision.verdict is effect
    assert decision.fence == Fence(3, 7)


def test_principal_of_another_project_denied(policy_path: Path) -> None:
    engine = FilePolicyEngine(policy_path)
    assert engine.authorize(P("q", "alice"), "p", "issues.read").verdict is Verdict.DENY
    assert engine.authorize(P("p", "alice"), "q", "issues.read").verdict is Verdict.DENY


def test_versions_grow_on_each_change_and_not_on_noops(tmp_path: Path) -> None:
    engine = FilePolicyEngine.initialize(tmp_path / "policy.json")
    assert engine.fence() == Fence(1, 1)
    assert engine.set_role("r", allow=["a"]) == Fence(2, 1)
    assert engine.set_role("r", allow=["a"]) == Fence(2, 1)  # same content: no change
    assert engine.set_role("r", allow=["a", "b"], ask=["c"]) == Fence(3, 1)
    assert engine.grant_role("p", "alice", "r") == Fence(3, 2)
    assert engine.grant_role("p", "alice", "r") == Fence(3, 2)
    assert engine.revoke_role("p", "alice", "r") == Fence(3, 3)
    assert engine.revoke_role("p", "alice", "r") == Fence(3, 3)
    assert engine.fence() == Fence(3, 3)
    doc = json.loads((tmp_path / "policy.json").read_text())
    assert doc["bindings"] == {}
    assert doc["roles"] == {"r": {"allow": ["a", "b"], "ask": ["c"]}}


def test_revoke_is_visible_to_the_next_authorize(tmp_path: Path) -> None:
    path = tmp_path / "policy.json"
    engine = FilePolicyEngine.initialize(path)
    engine.set_role("r", allow=["x"])
    engine.grant_role("p", "alice", "r")
    other = FilePolicyEngine(path)  # e.g. another process sharing the file
    assert other.authorize(P("p", "alice"), "p", "x").verdict is Verdict.ALLOW
    engine.revoke_role("p", "alice", "r")
    after = other.authorize(P("p", "alice"), "p", "x")
    assert after.verdict is Verdict.DENY
    assert after.fence == Fence(2, 3)


def test_external_rewrite_with_same_size_seen_immediately(tmp_path: Path) -> None:
    """Two writes in one file-system clock tick, same size: the racy-clean rule re-reads."""
    path = tmp_path / "policy.json"
    write_json(path, policy_doc(roles={"r": {"allow": ["aaaa"]}}, bindings={"p": {"alice": ["r"]}}))
    engine = FilePolicyEngine(path)
    assert engine.authorize(P("p", "alice"), "p", "aaaa").verdict is Verdict.ALLOW
    write_json(path, policy_doc(roles={"r": {"allow": ["bbbb"]}}, bindings={"p": {"alice": ["r"]}}))
    assert engine.authorize(P("p", "alice"), "p", "aaaa").verdict is Verdict.DENY


def test_stable_file_is_parsed_once(policy_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_files, "RACY_MARGIN_NS", -10**12)  # treat the fresh file as old
    parses = []
    real = engine_mod._compile
    monkeypatch.setattr(engine_mod, "_compile", lambda data: parses.append(1) or real(data))
    reads = []
    real_read = _files.read_bounded
    monkeypatch.setattr(_files, "read_bounded", lambda *a, **k: reads.append(1) or real_read(*a, **k))
    engine = FilePolicyEngine(policy_path)
    for _ in range(50):
        engine.authorize(P("p", "alice"), "p", "issues.read")
    assert (len(parses), len(reads)) == (1, 1)


def _broken_files() -> list[tuple[str, bytes]]:
    good = policy_doc(roles=ROLES, bindings={"p": {"alice": ["reader"]}})
    cases: list[tuple[str, object]] = [
        ("unknown-format", {**good, "format": "stockade.policy/2"}),
        ("unknown-field", {**good, "extra": 1}),
        ("unknown-role-field", {**good, "roles": {"r": {"allow": [], "deny": ["x"]}}}),
        ("binding-names-unknown-role", {**good, "bindings": {"p": {"alice": ["ghost"]}}}),
        ("negative-version", {**good, "policy_version": -1}),
        ("bool-version", {**good, "role_binding_version": True}),
        ("string-version", {**good, "policy_version": "3"}),
        ("missing-bindings", {k: v for k, v in good.items() if k != "bindings"}),
        ("empty-permission", {**good, "roles": {"r": {"allow": [""]}}}),
        ("control-char", {**good, "roles": {"r": {"allow": ["a\nb"]}}}),
        ("not-an-object", [good]),
    ]
    raw = [(name, json.dumps(doc).encode()) for name, doc in cases]
    raw += [("not-json", b"{\"format\": "), ("empty", b""), ("not-utf8", b"\xff\xfe")]
    return raw


@pytest.mark.parametrize(("name", "content"), _broken_files(), ids=[n for n, _ in _broken_files()])
def test_invalid_policy_file_fails_closed(tmp_path: Path, name: str, content: bytes) -> None:
    path = tmp_path / "policy.json"
    path.write_bytes(content)
    with pytest.raises(PolicyUnavailable) as info:
        FilePolicyEngine(path).authorize(P("p", "alice"), "p", "issues.read")
    assert info.value.code == "POLICY_UNAVAILABLE"


def test_missing_policy_file_fails_closed(tmp_path: Path) -> None:
    with pytest.raises(PolicyUnavailable, match="does not exist"):
        FilePolicyEngine(tmp_path / "nope.json").authorize(P("p", "a"), "p", "x")


def test_directory_instead_of_policy_file_fails_closed(tmp_path: Path) -> None:
    (tmp_path / "policy.json").mkdir()
    with pytest.raises(PolicyUnavailable, match="cannot read"):
        FilePolicyEngine(tmp_path / "policy.json").authorize(P("p", "a"), "p", "x")


def test_oversized_policy_file_fails_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "policy.json"
    write_json(path, policy_doc(roles=ROLES))
    monkeypatch.setattr(engine_mod, "MAX_POLICY_BYTES", 64)
    with pytest.raises(PolicyUnavailable):
        FilePolicyEngine(path).authorize(P("p", "a"), "p", "x")


def test_policy_becoming_corrupt_after_good_reads_fails_closed(policy_path: Path) -> None:
    engine = FilePolicyEngine(policy_path)
    assert engine.authorize(P("p", "alice"), "p", "issues.read").verdict is Verdict.ALLOW
    policy_path.write_text("{ broken")
    with pytest.raises(PolicyUnavailable):
        engine.authorize(P("p", "alice"), "p", "issues.read")
    policy_path.unlink()
    with pytest.raises(PolicyUnavailable):
        engine.authorize(P("p", "alice"), "p", "issues.read")


def test_edit_of_corrupt_file_refused_and_file_untouched(policy_path: Path) -> None:
    policy_path.write_text("{ broken")
    with pytest.raises(PolicyUnavailable):
        FilePolicyEngine(policy_path).grant_role("p", "alice", "reader")
    assert policy_path.read_text() == "{ broken"


def test_binding_unknown_role_refused_without_version_change(tmp_path: Path) -> None:
    engine = FilePolicyEngine.initialize(tmp_path / "policy.json")
    with pytest.raises(PolicyUnavailable, match="unknown role"):
        engine.grant_role("p", "alice", "ghost")
    assert engine.fence() == Fence(1, 1)


def test_initialize_never_overwrites(policy_path: Path) -> None:
    before = policy_path.read_bytes()
    with pytest.raises(FileExistsError):
        FilePolicyEngine.initialize(policy_path)
    assert policy_path.read_bytes() == before


def test_edits_are_atomic_and_private(tmp_path: Path) -> None:
    engine = FilePolicyEngine.initialize(tmp_path / "policy.json")
    engine.set_role("r", allow=["x"])
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["policy.json", "policy.json.lock"]  # no temp file left behind
    assert (tmp_path / "policy.json").stat().st_mode & 0o777 == 0o600


def test_decision_is_frozen() -> None:
    decision = Decision(Verdict.ALLOW, Fence(1, 1))
    with pytest.raises(AttributeError):
        decision.verdict = Verdict.DENY  # type: ignore[misc]


@pytest.mark.timeout(10)
def test_fifo_planted_as_policy_file_fails_closed_without_hanging(tmp_path: Path) -> None:
    path = tmp_path / "policy.json"
    os.mkfifo(path)
    with pytest.raises(PolicyUnavailable, match="cannot read"):
        FilePolicyEngine(path).authorize(P("p", "a"), "p", "x")
