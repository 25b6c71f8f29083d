"""Layered tool policy: class defaults, selector precedence, literal names, managed cap."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from enum import Enum
from pathlib import Path
from typing import Any

import pytest

from host.canonical import canonical_json
from host.errors import PolicyUnavailable
from host.formats.manifest import Effect
from host.policy.toolpolicy import (
    CAP_FILE,
    ClassSelector,
    ServiceSelector,
    ToolMode,
    ToolPolicyStore,
    ToolSelector,
    service_of,
    strictest,
)

A, W = "alice", "p"
ALLOW, ASK, DISABLED = ToolMode.ALLOW, ToolMode.ASK, ToolMode.DISABLED


@pytest.fixture
def store(tmp_path: Path) -> ToolPolicyStore:
    return ToolPolicyStore(tmp_path / "tool-policy", admin_dir=None)


def bind(tool: str) -> str:
    """A stand-in binding digest of ``tool`` as it is now (one per name)."""
    return hashlib.sha256(f"binding of {tool}".encode()).hexdigest()


def put(store: ToolPolicyStore, selector: Any, mode: ToolMode) -> None:
    """``store.set`` as a reviewer does it: an allow of a tool or service is bound to the
    current binding of the tool it covers (``tracker.create`` for a service)."""
    bound = None
    if mode is ALLOW and isinstance(selector, ToolSelector):
        bound = {selector.tool: bind(selector.tool)}
    elif mode is ALLOW and isinstance(selector, ServiceSelector):
        bound = {f"{selector.service}.create": bind(f"{selector.service}.create")}
    store.set(A, W, selector, mode, bound=bound)


def resolve(store: ToolPolicyStore, tool: str = "tracker.create", effect: str = "write") -> ToolMode:
    return store.resolve(A, W, tool=tool, service=service_of(tool), effect=effect, binding=bind(tool))


@pytest.mark.parametrize(
    ("effect", "mode"),
    [("read", ALLOW), ("write", ASK), ("execute", ASK), ("external", ASK)],
    ids=["read-allow", "write-ask", "execute-ask", "external-ask"],
)
def test_class_defaults(store: ToolPolicyStore, effect: str, mode: ToolMode) -> None:
    assert resolve(store, effect=effect) is mode


def test_effect_given_as_str_enum(store: ToolPolicyStore) -> None:
    class Eff(str, Enum):
        READ = "read"

    assert store.resolve(A, W, tool="t.x", service="t", effect=Eff.READ) is ALLOW  # type: ignore[arg-type]


def test_unknown_effect_class_refused(store: ToolPolicyStore) -> None:
    with pytest.raises(ValueError, match="unknown effect class"):
        resolve(store, effect="admin")


PRECEDENCE = [
    ("class-only", [(ClassSelector("write"), ALLOW)], ALLOW),
    ("service-beats-class", [(ClassSelector("write"), ALLOW), (ServiceSelector("tracker"), DISABLED)], DISABLED),
    ("tool-beats-service", [(ServiceSelector("tracker"), DISABLED), (ToolSelector("tracker.create"), ALLOW)], ALLOW),
    (
        "tool-beats-all",
        [(ClassSelector("write"), DISABLED), (ServiceSelector("tracker"), ASK), (ToolSelector("tracker.create"), ALLOW)],
        ALLOW,
    ),
    ("user-can-loosen-default", [(ToolSelector("tracker.create"), ALLOW)], ALLOW),
    ("user-can-tighten-read", [(ClassSelector("read"), DISABLED)], ASK),  # write tool: read rule irrelevant
    ("other-tool-irrelevant", [(ToolSelector("tracker.delete"), DISABLED)], ASK),
    ("other-service-irrelevant", [(ServiceSelector("mail"), ALLOW)], ASK),
    ("other-class-irrelevant", [(ClassSelector("execute"), ALLOW)], ASK),
    ("service-is-not-a-prefix", [(ServiceSelector("track"), ALLOW)], ASK),
    ("tool-name-is-not-a-service", [(ServiceSelector("tracker.create"), DISABLED)], ASK),
]


@pytest.mark.parametrize(("rules", "mode"), [(r, m) for _, r, m in PRECEDENCE], ids=[n for n, _, _ in PRECEDENCE])
def test_tool_beats_service_beats_class(store: ToolPolicyStore, rules: list, mode: ToolMode) -> None:
    for selector, value in rules:
        put(store, selector, value)
    assert resolve(store) is mode


@pytest.mark.parametrize(
    "selector",
    [ToolSelector("*"), ServiceSelector("*"), ToolSelector("tracker.*"), ToolSelector("*.create")],
    ids=["tool-star", "service-star", "tool-prefix-star", "tool-suffix-star"],
)
def test_star_selector_is_a_literal_name(store: ToolPolicyStore, selector: object) -> None:
    put(store, selector, ALLOW)
    assert resolve(store, tool="tracker.create", effect="write") is ASK
    assert resolve(store, tool="mail.send", effect="external") is ASK


def test_star_selector_matches_only_the_literal_star_tool(store: ToolPolicyStore) -> None:
    store.set(A, W, ToolSelector("*"), DISABLED)
    assert store.resolve(A, W, tool="*", service="*", effect="read") is DISABLED
    assert store.resolve(A, W, tool="x", service="x", effect="read") is ALLOW


def test_selectors_compare_structurally() -> None:
    assert ToolSelector("a") == ToolSelector("a")
    assert ToolSelector("a") != ServiceSelector("a")
    assert len({ToolSelector("a"), ToolSelector("a"), ServiceSelector("a")}) == 2


def test_class_selector_from_text_equals_the_enum_one_so_a_rule_cannot_be_missed(store: ToolPolicyStore) -> None:
    # A selector read from a policy file (text) carries the manifest's Effect enum, and
    # equals one built from the enum, so a user's "disable writes" rule matches the tool.
    assert ClassSelector("write") == ClassSelector(Effect.WRITE)
    assert hash(ClassSelector("write")) == hash(ClassSelector(Effect.WRITE))
    assert ClassSelector("write").effect_class is Effect.WRITE
    store.set(A, W, ClassSelector("write"), DISABLED)
    assert store.resolve(A, W, tool="t.x", service="t", effect=Effect.WRITE) is DISABLED
    assert store.load(A, W).lookup(tool="t.x", service="t", effect=Effect.WRITE) is DISABLED


@pytest.mark.parametrize(
    "make",
    [lambda: ClassSelector("admin"), lambda: ToolSelector(""), lambda: ServiceSelector("a\nb"), lambda: ToolSelector("x" * 257)],
    ids=["unknown-class", "empty-tool", "control-char", "too-long"],
)
def test_invalid_selector_refused(make: object) -> None:
    with pytest.raises(ValueError):
        make()  # type: ignore[operator]


def test_partitions_are_isolated(store: ToolPolicyStore) -> None:
    put(store, ToolSelector("tracker.create"), ALLOW)
    assert resolve(store) is ALLOW
    assert store.resolve("bob", W, tool="tracker.create", service="tracker", effect="write") is ASK
    assert store.resolve(A, "q", tool="tracker.create", service="tracker", effect="write") is ASK


def test_set_remove_load_roundtrip(store: ToolPolicyStore) -> None:
    store.set(A, W, ServiceSelector("tracker"), DISABLED)
    put(store, ServiceSelector("tracker"), ALLOW)  # replaces, no duplicate
    store.set(A, W, ClassSelector("read"), ASK)
    assert dict(store.load(A, W).rules) == {ServiceSelector("tracker"): ALLOW, ClassSelector("read"): ASK}
    assert store.remove(A, W, ServiceSelector("tracker")) is True
    assert store.remove(A, W, ServiceSelector("tracker")) is False
    assert dict(store.load(A, W).rules) == {ClassSelector("read"): ASK}
    fresh = ToolPolicyStore(store.root, admin_dir=None)  # another process reading the same files
    assert dict(fresh.load(A, W).rules) == {ClassSelector("read"): ASK}


def test_loaded_rules_are_read_only(store: ToolPolicyStore) -> None:
    with pytest.raises(TypeError):
        store.load(A, W).rules[ToolSelector("x")] = ALLOW  # type: ignore[index]


def test_set_refuses_wrong_types(store: ToolPolicyStore) -> None:
    with pytest.raises(TypeError):
        store.set(A, W, {"tool": "x"}, ALLOW)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        store.set(A, W, ToolSelector("x"), "allow")  # type: ignore[arg-type]


def test_file_name_is_hash_of_canonical_partition_and_holds_the_partition(store: ToolPolicyStore) -> None:
    put(store, ToolSelector("tracker.create"), ALLOW)
    digest = hashlib.sha256(canonical_json({"account": A, "workspace": W})).hexdigest()
    path = store.root / f"{digest}.json"
    assert store.path_for(A, W) == path
    doc = json.loads(path.read_text())
    assert doc == {
        "format": "stockade.toolpolicy/2",
        "partition": {"account": A, "workspace": W},
        "rules": [
            {"selector": {"tool": "tracker.create"}, "mode": "allow", "bound": {"tracker.create": bind("tracker.create")}}
        ],
    }
    assert A not in path.name
    assert path.stat().st_mode & 0o777 == 0o600
    assert not [p for p in store.root.iterdir() if p.name.endswith(".tmp")]


def test_strictest_order() -> None:
    assert strictest(ALLOW, ASK) is ASK
    assert strictest(ASK, DISABLED, ALLOW) is DISABLED
    assert strictest(ALLOW) is ALLOW
    with pytest.raises(ValueError):
        strictest()


def test_service_of_is_the_package_prefix() -> None:
    assert service_of("tracker.list-issues") == "tracker"
    assert service_of("a.b.c") == "a"
    assert service_of("solo") == "solo"


# ---------------------------------------------------------------------------- managed cap


def write_cap(admin: Path, rules: list[dict], fmt: str = "stockade.toolcap/1") -> None:
    admin.mkdir(exist_ok=True)
    (admin / CAP_FILE).write_text(json.dumps({"format": fmt, "rules": rules}))


@pytest.fixture
def admin(tmp_path: Path) -> Path:
    return tmp_path / "admin"


def capped(tmp_path: Path, admin: Path) -> ToolPolicyStore:
    return ToolPolicyStore(tmp_path / "tool-policy", admin_dir=admin)


def test_managed_cap_beats_user_allow(tmp_path: Path, admin: Path) -> None:
    write_cap(admin, [{"selector": {"service": "tracker"}, "max": "ask"}])
    store = capped(tmp_path, admin)
    put(store, ToolSelector("tracker.create"), ALLOW)
    assert resolve(store) is ASK
    write_cap(admin, [{"selector": {"tool": "tracker.create"}, "max": "disabled"}])
    assert resolve(store) is DISABLED


def test_managed_cap_is_a_ceiling_not_a_grant(tmp_path: Path, admin: Path) -> None:
    write_cap(admin, [{"selector": {"class": "write"}, "max": "allow"}])
    store = capped(tmp_path, admin)
    assert resolve(store) is ASK  # default still applies under a permissive cap
    store.set(A, W, ToolSelector("tracker.create"), DISABLED)
    assert resolve(store) is DISABLED


def test_managed_cap_strictest_matching_rule_wins(tmp_path: Path, admin: Path) -> None:
    write_cap(
        admin,
        [
            {"selector": {"tool": "tracker.create"}, "max": "allow"},
            {"selector": {"service": "tracker"}, "max": "disabled"},
        ],
    )
    store = capped(tmp_path, admin)
    put(store, ToolSelector("tracker.create"), ALLOW)
    assert resolve(store) is DISABLED


def test_managed_cap_star_is_literal(tmp_path: Path, admin: Path) -> None:
    write_cap(admin, [{"selector": {"service": "*"}, "max": "disabled"}])
    assert resolve(capped(tmp_path, admin), effect="read") is ALLOW


@pytest.mark.parametrize("layout", ["no-dir", "empty-dir"])
def test_absent_cap_means_no_ceiling(tmp_path: Path, admin: Path, layout: str) -> None:
    if layout == "empty-dir":
        admin.mkdir()
    store = capped(tmp_path, admin)
    put(store, ToolSelector("tracker.create"), ALLOW)
    assert resolve(store) is ALLOW


def _make_unreadable(admin: Path, how: str) -> None:
    if how == "admin-is-a-file":
        admin.write_text("{}")
    elif how == "cap-is-a-directory":
        (admin / CAP_FILE).mkdir(parents=True)
    elif how == "not-json":
        admin.mkdir()
        (admin / CAP_FILE).write_text("{ nope")
    elif how == "unknown-format":
        write_cap(admin, [], fmt="stockade.toolcap/2")
    elif how == "unknown-field":
        admin.mkdir()
        (admin / CAP_FILE).write_text(json.dumps({"format": "stockade.toolcap/1", "rules": [], "x": 1}))
    elif how == "bad-mode":
        write_cap(admin, [{"selector": {"tool": "a"}, "max": "sometimes"}])
    elif how == "duplicate-selector":
        write_cap(admin, [{"selector": {"tool": "a"}, "max": "ask"}, {"selector": {"tool": "a"}, "max": "ask"}])
    elif how == "two-keys-in-selector":
        write_cap(admin, [{"selector": {"tool": "a", "service": "b"}, "max": "ask"}])
    elif how == "cap-is-a-fifo":
        admin.mkdir()
        os.mkfifo(admin / CAP_FILE)
    elif how == "dangling-symlink-cap":
        admin.mkdir()
        (admin / CAP_FILE).symlink_to(admin / "missing-target")
    elif how == "dangling-symlink-dir":
        admin.symlink_to(admin.parent / "missing-target")
        return
    else:  # pragma: no cover
        raise AssertionError(how)


UNREADABLE = [
    "admin-is-a-file", "cap-is-a-directory", "not-json", "unknown-format", "unknown-field",
    "bad-mode", "duplicate-selector", "two-keys-in-selector", "dangling-symlink-dir",
    "dangling-symlink-cap", "cap-is-a-fifo",
]


@pytest.mark.timeout(20)
@pytest.mark.parametrize("how", UNREADABLE)
def test_admin_dir_present_but_unreadable_disables_every_tool(
    tmp_path: Path, admin: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    _make_unreadable(admin, how)
    store = capped(tmp_path, admin)
    put(store, ToolSelector("tracker.create"), ALLOW)
    with caplog.at_level(logging.ERROR, logger="stockade.policy"):
        for tool, effect in [("tracker.create", "write"), ("tracker.list", "read"), ("x", "external")]:
            assert store.resolve(A, W, tool=tool, service=service_of(tool), effect=effect) is DISABLED
    assert "every tool is disabled" in caplog.text


def test_admin_cap_without_read_permission_disables_every_tool(
    tmp_path: Path, admin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EACCES on cap.json (tests run as root, so the kernel's answer is simulated at os.open)."""
    write_cap(admin, [])
    real_open = os.open

    def denying_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path).endswith(CAP_FILE):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", denying_open)
    assert resolve(capped(tmp_path, admin), effect="read") is DISABLED


def test_cap_change_seen_by_next_resolve(tmp_path: Path, admin: Path) -> None:
    write_cap(admin, [])
    store = capped(tmp_path, admin)
    assert resolve(store, effect="read") is ALLOW
    write_cap(admin, [{"selector": {"class": "read"}, "max": "disabled"}])
    assert resolve(store, effect="read") is DISABLED
    (admin / CAP_FILE).write_text("garbage")
    assert resolve(store, effect="read") is DISABLED
    (admin / CAP_FILE).unlink()
    assert resolve(store, effect="read") is ALLOW


@pytest.mark.timeout(10)
def test_fifo_planted_as_user_policy_fails_closed_without_hanging(store: ToolPolicyStore) -> None:
    store.root.mkdir()
    os.mkfifo(store.path_for(A, W))
    with pytest.raises(PolicyUnavailable):
        resolve(store)
