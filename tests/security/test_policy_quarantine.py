"""A bad tool-policy file is quarantined whole, never half-applied, and never crosses partitions."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from host.policy import toolpolicy
from host.policy.toolpolicy import ServiceSelector, ToolMode, ToolPolicyStore, ToolSelector

A, W = "alice", "p"
BINDING = "b" * 64  # the current binding digest of tracker.create in these tests


def good_doc(account: str = A, workspace: str = W, rules: list | None = None) -> dict:
    return {
        "format": "stockade.toolpolicy/1",
        "partition": {"account": account, "workspace": workspace},
        "rules": rules if rules is not None else [{"selector": {"tool": "tracker.create"}, "mode": "allow"}],
    }


def allow_rule(tool: str = "tracker.create") -> dict:
    return {"selector": {"tool": tool}, "mode": "allow"}


BAD_FILES: list[tuple[str, bytes]] = [
    ("garbage", b"\x00\x01 not json"),
    ("truncated-json", json.dumps(good_doc()).encode()[:-5]),
    ("empty", b""),
    ("unknown-version", json.dumps({**good_doc(), "format": "stockade.toolpolicy/3"}).encode()),
    ("missing-format", json.dumps({k: v for k, v in good_doc().items() if k != "format"}).encode()),
    ("unknown-top-field", json.dumps({**good_doc(), "owner": "eve"}).encode()),
    ("duplicate-selector", json.dumps(good_doc(rules=[allow_rule(), allow_rule()])).encode()),
    (
        "duplicate-selector-different-modes",
        json.dumps(good_doc(rules=[allow_rule(), {"selector": {"tool": "tracker.create"}, "mode": "disabled"}])).encode(),
    ),
    # One good rule next to a bad one: the good rule must NOT survive (no partial application).
    ("partly-invalid-mode", json.dumps(good_doc(rules=[allow_rule(), {"selector": {"tool": "b"}, "mode": "yes"}])).encode()),
    ("partly-invalid-class", json.dumps(good_doc(rules=[allow_rule(), {"selector": {"class": "admin"}, "mode": "ask"}])).encode()),
    ("two-key-selector", json.dumps(good_doc(rules=[{"selector": {"tool": "a", "service": "b"}, "mode": "ask"}])).encode()),
    ("empty-selector", json.dumps(good_doc(rules=[{"selector": {}, "mode": "ask"}])).encode()),
    ("wildcard-typed-selector", json.dumps(good_doc(rules=[{"selector": {"glob": "*"}, "mode": "allow"}])).encode()),
    ("rules-not-a-list", json.dumps({**good_doc(), "rules": {"tool": "allow"}}).encode()),
    ("copied-from-other-account", json.dumps(good_doc(account="bob")).encode()),
    ("copied-from-other-workspace", json.dumps(good_doc(workspace="q")).encode()),
    ("partition-extra-field", json.dumps({**good_doc(), "partition": {"account": A, "workspace": W, "x": 1}}).encode()),
]


@pytest.mark.parametrize("content", [c for _, c in BAD_FILES], ids=[n for n, _ in BAD_FILES])
def test_bad_policy_file_quarantined_and_defaults_apply(
    tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    store = ToolPolicyStore(tmp_path / "tp", admin_dir=None)
    store.root.mkdir()
    path = store.path_for(A, W)
    path.write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="stockade.policy"):
        mode = store.resolve(A, W, tool="tracker.create", service="tracker", effect="write")
    assert mode is ToolMode.ASK  # the write default, not the file's "allow"
    assert not path.exists()
    aside = [p for p in store.root.iterdir() if p.name.startswith(path.name + ".quarantined-")]
    assert len(aside) == 1
    assert aside[0].read_bytes() == content  # moved whole, not rewritten
    assert "moved aside" in caplog.text
    assert dict(store.load(A, W).rules) == {}


def test_file_copied_from_another_partition_grants_nothing(tmp_path: Path) -> None:
    """Bob's file, copied under Alice's name, must not hand Alice Bob's allow rules."""
    store = ToolPolicyStore(tmp_path / "tp", admin_dir=None)
    store.set("bob", W, ServiceSelector("tracker"), ToolMode.ALLOW, bound={"tracker.create": BINDING})
    store.path_for(A, W).write_bytes(store.path_for("bob", W).read_bytes())
    resolve = {"tool": "tracker.create", "service": "tracker", "effect": "write", "binding": BINDING}
    assert store.resolve(A, W, **resolve) is ToolMode.ASK
    assert store.resolve("bob", W, **resolve) is ToolMode.ALLOW


def test_file_corrupted_after_good_reads_is_quarantined_on_next_resolve(tmp_path: Path) -> None:
    store = ToolPolicyStore(tmp_path / "tp", admin_dir=None)
    store.set(A, W, ToolSelector("tracker.create"), ToolMode.ALLOW, bound={"tracker.create": BINDING})
    resolve = {"tool": "tracker.create", "service": "tracker", "effect": "write", "binding": BINDING}
    assert store.resolve(A, W, **resolve) is ToolMode.ALLOW
    store.path_for(A, W).write_text("{ corrupt")
    assert store.resolve(A, W, **resolve) is ToolMode.ASK
    assert not store.path_for(A, W).exists()


def test_set_after_quarantine_starts_from_defaults(tmp_path: Path) -> None:
    store = ToolPolicyStore(tmp_path / "tp", admin_dir=None)
    store.root.mkdir()
    store.path_for(A, W).write_text(json.dumps(good_doc(rules=[allow_rule("x"), allow_rule("x")])))
    store.set(A, W, ToolSelector("y"), ToolMode.DISABLED)
    assert dict(store.load(A, W).rules) == {ToolSelector("y"): ToolMode.DISABLED}
    assert len(list(store.root.glob("*.quarantined-*"))) == 1


def test_oversized_policy_file_quarantined(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(toolpolicy, "MAX_POLICY_FILE_BYTES", 100)
    store = ToolPolicyStore(tmp_path / "tp", admin_dir=None)
    store.root.mkdir()
    store.path_for(A, W).write_text(json.dumps(good_doc(rules=[allow_rule(f"t{i}") for i in range(20)])))
    assert store.resolve(A, W, tool="t1", service="t1", effect="write") is ToolMode.ASK
    assert len(list(store.root.glob("*.quarantined-*"))) == 1


def test_repeated_quarantines_never_overwrite_each_other(tmp_path: Path) -> None:
    store = ToolPolicyStore(tmp_path / "tp", admin_dir=None)
    store.root.mkdir()
    for n in range(3):
        store.path_for(A, W).write_text(f"bad {n}")
        store.load(A, W)
    kept = sorted(p.read_text() for p in store.root.glob("*.quarantined-*"))
    assert kept == ["bad 0", "bad 1", "bad 2"]


def test_too_many_rules_quarantined(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = ToolPolicyStore(tmp_path / "tp", admin_dir=None)
    store.root.mkdir()
    rules = [allow_rule(f"t{i}") for i in range(toolpolicy.MAX_RULES + 1)]
    store.path_for(A, W).write_text(json.dumps(good_doc(rules=rules)))
    assert store.resolve(A, W, tool="t1", service="t1", effect="write") is ToolMode.ASK
    assert not store.path_for(A, W).exists()
