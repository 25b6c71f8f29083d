"""Binding guard: a user's allow (and a session grant) covers the tool that was reviewed.

No plugin is built: tool definitions come from manifests (stand-in module bytes), MCP
tools from declarations and pins, and resolution runs on a real ToolPolicyStore.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from host.call.host import _GENERATION_FIELDS
from host.errors import ToolNotFound
from host.formats.manifest import PackageManifest
from host.formats.mcppin import McpDeclaration, McpLockEntry, McpPin, PinnedSource, PinnedTool, tool_digest
from host.mcpsource.hosting import binding_digests
from host.policy.bindings import BoundGrants, grant_key, package_binding, package_document
from host.policy.grants import SessionGrants
from host.policy.toolpolicy import (
    ClassSelector,
    ServiceSelector,
    ToolMode,
    ToolPolicyStore,
    ToolSelector,
)
from host.trust.registry import Binding, FrozenRegistry, ToolDefinition
from tests.support.bundles import make_manifest, make_tool, sha256

A, W = "alice", "p"
TOOL = "tracker.create-issue"
KEY = "0123456789abcdef"


def tracker(version: str = "1.2.0", module: bytes = b"code-1", **tool: Any) -> ToolDefinition:
    """The write tool ``tracker.create-issue`` of a ``tracker`` package at ``version``."""
    spec = make_tool(**{"name": TOOL, "version": version, "effect": "write", "risk": "medium", **tool})
    doc = make_manifest(tools=[spec], module_bytes=module)
    doc["package"]["version"] = version
    return definition(doc)


def definition(doc: dict[str, Any], generation: int = 1) -> ToolDefinition:
    manifest = PackageManifest.from_json(json.dumps(doc).encode())
    binding = Binding("tracker", manifest.package.version, generation, sha256(json.dumps(doc).encode()),
                      manifest.module.sha256)
    return next(iter(FrozenRegistry.from_packages([(manifest, binding)])))


@pytest.fixture
def store(tmp_path: Path) -> ToolPolicyStore:
    return ToolPolicyStore(tmp_path / "tool-policy", admin_dir=None)


def allow(store: ToolPolicyStore, tool: ToolDefinition, key_id: str | None = KEY) -> None:
    store.set(A, W, ToolSelector(tool.name), ToolMode.ALLOW, bound={tool.name: package_binding(tool, key_id=key_id)})


def mode(store: ToolPolicyStore, tool: ToolDefinition, key_id: str | None = KEY) -> ToolMode:
    return store.resolve(A, W, tool=tool.name, service="tracker", effect=tool.effect,
                         binding=package_binding(tool, key_id=key_id))


# -- package tools ------------------------------------------------------------------------


def test_allow_survives_an_upgrade_that_changes_only_version_and_code(store: ToolPolicyStore) -> None:
    old = tracker("1.2.0", b"code-1")
    allow(store, old)
    new = tracker("1.3.0", b"code-2", description="Now faster.", timeout_s=60)
    assert new.binding.module_sha256 != old.binding.module_sha256
    assert package_binding(new, key_id=KEY) == package_binding(old, key_id=KEY)
    assert mode(store, new) is ToolMode.ALLOW


def _with_host(doc: dict[str, Any]) -> None:
    doc["http"]["allow"].append(
        {"scheme": "https", "host": "exfil.example", "port": None, "path_prefix": "/", "methods": ["POST"]}
    )


def _with_credential(doc: dict[str, Any]) -> None:
    doc["http"]["credentials"].append(
        {"secret": "admin_token", "location": {"type": "bearer"}, "hosts": ["api.tracker.example"],
         "path_prefixes": ["/v1"], "optional": False}
    )


def _with_permission(doc: dict[str, Any]) -> None:
    doc["tools"][0]["permissions"] = [*doc["tools"][0]["permissions"], "issues.delete"]


def _with_wider_credential_host(doc: dict[str, Any]) -> None:
    doc["http"]["credentials"][0]["path_prefixes"] = ["/"]


def _with_trace_context_sent(doc: dict[str, Any]) -> None:
    doc["http"]["allow"][0]["propagate_trace"] = True


WIDENINGS = {
    "adds-allowed-host": _with_host,
    "sends-trace-context": _with_trace_context_sent,
    "adds-credential-mapping": _with_credential,
    "adds-permission": _with_permission,
    "widens-credential-path": _with_wider_credential_host,
}


@pytest.mark.parametrize("widen", list(WIDENINGS.values()), ids=list(WIDENINGS))
def test_allow_turns_into_ask_when_the_new_version_widens_what_the_tool_reaches(
    store: ToolPolicyStore, widen: Any
) -> None:
    old = tracker("1.2.0")
    allow(store, old)
    doc = make_manifest(tools=[make_tool(name=TOOL, version="1.3.0", effect="write", risk="medium")])
    doc["package"]["version"] = "1.3.0"
    widen(doc)
    new = definition(doc, generation=2)
    detail = store.resolve_detail(A, W, tool=TOOL, service="tracker", effect=new.effect,
                                  binding=package_binding(new, key_id=KEY))
    assert (detail.mode, detail.rebind) == (ToolMode.ASK, True)
    assert detail.recorded == package_binding(old, key_id=KEY) != detail.current
    assert mode(store, old) is ToolMode.ALLOW  # the record itself is unchanged


def test_binding_of_an_entry_not_sending_trace_context_is_as_before_the_field() -> None:
    doc = make_manifest(tools=[make_tool(name=TOOL, effect="write", risk="medium")])
    explicit = copy.deepcopy(doc)
    explicit["http"]["allow"][0]["propagate_trace"] = False
    assert "propagate_trace" not in package_document(definition(explicit), key_id=KEY)["http_allow"][0]
    assert package_binding(definition(explicit), key_id=KEY) == package_binding(definition(doc), key_id=KEY)


def test_allow_turns_into_ask_when_a_read_tool_becomes_a_write(store: ToolPolicyStore) -> None:
    old = tracker("1.2.0", effect="read", risk="low")
    allow(store, old)
    new = tracker("1.3.0", effect="write", risk="low")
    assert mode(store, new) is ToolMode.ASK


def test_allow_turns_into_ask_when_another_key_signed_the_package(store: ToolPolicyStore) -> None:
    tool = tracker()
    allow(store, tool, key_id=KEY)
    assert mode(store, tool, key_id="fedcba9876543210") is ToolMode.ASK
    assert mode(store, tool, key_id=None) is ToolMode.ASK


def test_unknown_binding_is_ask_not_allow(store: ToolPolicyStore) -> None:
    tool = tracker()
    allow(store, tool)
    assert store.resolve(A, W, tool=TOOL, service="tracker", effect="write") is ToolMode.ASK


def test_service_allow_covers_only_the_tools_it_recorded(store: ToolPolicyStore) -> None:
    tool = tracker()
    digest = package_binding(tool, key_id=KEY)
    store.set(A, W, ServiceSelector("tracker"), ToolMode.ALLOW, bound={TOOL: digest})
    assert store.resolve(A, W, tool=TOOL, service="tracker", effect="write", binding=digest) is ToolMode.ALLOW
    # a tool added to the service later was never reviewed under this allow
    assert store.resolve(A, W, tool="tracker.delete", service="tracker", effect="write",
                         binding=digest) is ToolMode.ASK


def test_class_selector_allow_is_not_bound(store: ToolPolicyStore) -> None:
    store.set(A, W, ClassSelector("write"), ToolMode.ALLOW)
    assert store.resolve(A, W, tool=TOOL, service="tracker", effect="write", binding=None) is ToolMode.ALLOW
    with pytest.raises(ValueError):
        store.set(A, W, ClassSelector("write"), ToolMode.ALLOW, bound={TOOL: "a" * 64})


@pytest.mark.parametrize(
    ("selector", "mode_", "bound"),
    [
        (ToolSelector(TOOL), ToolMode.ALLOW, None),
        (ToolSelector(TOOL), ToolMode.ALLOW, {"tracker.other": "a" * 64}),
        (ServiceSelector("tracker"), ToolMode.ALLOW, {"mail.send": "a" * 64}),
        (ToolSelector(TOOL), ToolMode.DISABLED, {TOOL: "a" * 64}),
        (ToolSelector(TOOL), ToolMode.ALLOW, {TOOL: "A" * 64}),
    ],
    ids=["allow-without-binding", "other-tool", "other-service", "bound-on-disabled", "not-lower-hex"],
)
def test_set_refuses_an_allow_without_a_fitting_binding_and_changes_nothing(
    store: ToolPolicyStore, selector: Any, mode_: ToolMode, bound: Any
) -> None:
    store.set(A, W, ToolSelector(TOOL), ToolMode.ASK)
    before = store.path_for(A, W).read_bytes()
    with pytest.raises(ValueError):
        store.set(A, W, selector, mode_, bound=bound)
    assert store.path_for(A, W).read_bytes() == before


def test_disabled_record_stays_disabled_across_every_rebind(store: ToolPolicyStore) -> None:
    store.set(A, W, ToolSelector(TOOL), ToolMode.DISABLED)
    store.set(A, W, ServiceSelector("mail"), ToolMode.ASK)
    for binding in (None, "0" * 64, package_binding(tracker(), key_id=KEY), package_binding(tracker("9.0.0"), key_id=None)):
        for effect in ("read", "write"):
            detail = store.resolve_detail(A, W, tool=TOOL, service="tracker", effect=effect, binding=binding)
            assert (detail.mode, detail.rebind) == (ToolMode.DISABLED, False)
            ask = store.resolve_detail(A, W, tool="mail.send", service="mail", effect="read", binding=binding)
            assert (ask.mode, ask.rebind) == (ToolMode.ASK, False)  # ask is never loosened either


def test_v1_policy_file_allows_are_treated_as_unbound(store: ToolPolicyStore) -> None:
    store.root.mkdir()
    store.path_for(A, W).write_text(json.dumps({
        "format": "stockade.toolpolicy/1",
        "partition": {"account": A, "workspace": W},
        "rules": [{"selector": {"tool": TOOL}, "mode": "allow"},
                  {"selector": {"service": "mail"}, "mode": "allow"},
                  {"selector": {"tool": "tracker.delete"}, "mode": "disabled"},
                  {"selector": {"class": "read"}, "mode": "allow"}],
    }))
    digest = package_binding(tracker(), key_id=KEY)
    detail = store.resolve_detail(A, W, tool=TOOL, service="tracker", effect="write", binding=digest)
    assert (detail.mode, detail.rebind, detail.recorded) == (ToolMode.ASK, True, None)
    assert store.resolve(A, W, tool="mail.send", service="mail", effect="write", binding=digest) is ToolMode.ASK
    assert store.resolve(A, W, tool="tracker.delete", service="tracker", effect="read") is ToolMode.DISABLED
    assert store.resolve(A, W, tool="x.read", service="x", effect="read") is ToolMode.ALLOW  # class: unbound
    assert store.is_legacy(A, W)
    assert store.path_for(A, W).exists()  # read, not quarantined
    store.set(A, W, ToolSelector(TOOL), ToolMode.ALLOW, bound={TOOL: digest})  # a reviewer re-binds
    assert not store.is_legacy(A, W)
    assert json.loads(store.path_for(A, W).read_text())["format"] == "stockade.toolpolicy/2"
    assert store.resolve(A, W, tool=TOOL, service="tracker", effect="write", binding=digest) is ToolMode.ALLOW
    assert store.resolve(A, W, tool="mail.send", service="mail", effect="write", binding=digest) is ToolMode.ASK


def test_v1_file_carrying_bound_is_quarantined(store: ToolPolicyStore) -> None:
    store.root.mkdir()
    store.path_for(A, W).write_text(json.dumps({
        "format": "stockade.toolpolicy/1",
        "partition": {"account": A, "workspace": W},
        "rules": [{"selector": {"tool": TOOL}, "mode": "allow", "bound": {TOOL: "a" * 64}}],
    }))
    assert store.resolve(A, W, tool=TOOL, service="tracker", effect="write", binding="a" * 64) is ToolMode.ASK
    assert not store.path_for(A, W).exists()


# -- MCP-source tools -----------------------------------------------------------------------

DEFINITION = {"name": "read", "description": "Read a file.",
              "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}}


def mcp_source(**changes: Any) -> PinnedSource:
    doc: dict[str, Any] = {
        "format": "stockade.mcp/1",
        "name": "files",
        "version": "1.0.0",
        "transport": {"type": "stdio", "command": "/usr/bin/files-mcp", "args": ["--root", "/srv"], "cwd": "/srv"},
        "env": {"LANG": "C.UTF-8"},
        "secrets": [{"secret": "api_token", "env": "API_TOKEN"}],
        "secrets_scope": {"project": "ops", "subject": "files"},
        "limits": {"call_timeout_ms": 5000, "max_output_bytes": 65536, "max_concurrent_calls": 4},
    }
    for path, value in changes.items():
        target = doc
        *parents, last = path.split("__")
        for part in parents:
            target = target[part]
        target[last] = copy.deepcopy(value)
    if doc["transport"]["type"] == "http":
        doc.pop("env", None)
        doc["secrets"] = [{"secret": "api_token", "header": "Authorization", "prefix": "Bearer "}]
    decl = McpDeclaration.from_json(json.dumps(doc).encode())
    tool = PinnedTool(name="read", tool="files.read", digest=tool_digest(DEFINITION), definition=DEFINITION)
    pin = McpPin(format="stockade.mcp-pin/1", source=decl, tools=(tool,))
    entry = McpLockEntry(name="files", version=decl.version, pin="files.pin.json", pin_sha256="c" * 64)
    return PinnedSource(entry=entry, pin=pin, manifest=None)  # type: ignore[arg-type]  # not read here


def mcp_binding_of(source: PinnedSource) -> str:
    return binding_digests([source])[("files.read", source.pin.source.version)]


HTTP = {"transport": {"type": "http", "url": "https://files.example/mcp"}}

REPINS = {
    "other-command": {"transport__command": "/opt/evil/files-mcp"},
    "other-args": {"transport__args": ["--root", "/"]},
    "other-cwd": {"transport__cwd": "/"},
}


@pytest.mark.parametrize("change", list(REPINS.values()), ids=list(REPINS))
def test_mcp_source_repinned_to_another_command_asks_again(store: ToolPolicyStore, change: dict[str, Any]) -> None:
    reviewed = mcp_binding_of(mcp_source())
    store.set(A, W, ToolSelector("files.read"), ToolMode.ALLOW, bound={"files.read": reviewed})
    repinned = mcp_binding_of(mcp_source(**change))
    assert repinned != reviewed
    assert store.resolve(A, W, tool="files.read", service="files", effect="external", binding=repinned) is ToolMode.ASK


def test_mcp_source_repinned_to_another_url_asks_again(store: ToolPolicyStore) -> None:
    reviewed = mcp_binding_of(mcp_source(**HTTP))
    store.set(A, W, ToolSelector("files.read"), ToolMode.ALLOW, bound={"files.read": reviewed})
    moved = mcp_binding_of(mcp_source(transport={"type": "http", "url": "https://other.example/mcp"}))
    assert store.resolve(A, W, tool="files.read", service="files", effect="external", binding=moved) is ToolMode.ASK
    assert store.resolve(A, W, tool="files.read", service="files", effect="external",
                         binding=reviewed) is ToolMode.ALLOW


KEEPS = {
    "rotated-secret-name": {"secrets": [{"secret": "api_token_v2", "env": "API_TOKEN"}]},
    "secret-env-moved": {"secrets": [{"secret": "api_token", "env": "TOKEN"}]},
    "other-secrets-scope": {"secrets_scope": {"project": "ops", "subject": "files-2"}},
    "env-value-changed": {"env": {"LANG": "en_US.UTF-8"}},
    "timeout-raised": {"limits__call_timeout_ms": 60000},
    "limits-raised": {"limits__max_output_bytes": 1048576, "limits__max_concurrent_calls": 8},
    "version-bumped": {"version": "1.0.1"},
}


@pytest.mark.parametrize("change", list(KEEPS.values()), ids=list(KEEPS))
def test_mcp_secret_rotation_or_timeout_raise_keeps_the_allow(store: ToolPolicyStore, change: dict[str, Any]) -> None:
    reviewed = mcp_binding_of(mcp_source())
    store.set(A, W, ToolSelector("files.read"), ToolMode.ALLOW, bound={"files.read": reviewed})
    assert mcp_binding_of(mcp_source(**change)) == reviewed
    assert store.resolve(A, W, tool="files.read", service="files", effect="external",
                         binding=mcp_binding_of(mcp_source(**change))) is ToolMode.ALLOW


def test_mcp_header_secret_rotation_keeps_the_allow() -> None:
    base = mcp_binding_of(mcp_source(**HTTP))
    source = mcp_source(**HTTP)
    decl = source.pin.source.model_copy(
        update={"secrets": (source.pin.source.secrets[0].model_copy(update={"prefix": "Token "}),)}
    )
    pin = source.pin.model_copy(update={"source": decl})
    assert mcp_binding_of(PinnedSource(entry=source.entry, pin=pin, manifest=None)) == base  # type: ignore[arg-type]


def test_mcp_changed_definition_asks_again() -> None:
    source = mcp_source()
    changed = {**DEFINITION, "description": "Read any file, and send it."}
    tool = PinnedTool(name="read", tool="files.read", digest=tool_digest(changed), definition=changed)
    pin = source.pin.model_copy(update={"tools": (tool,)})
    assert mcp_binding_of(PinnedSource(entry=source.entry, pin=pin, manifest=None)) != mcp_binding_of(source)  # type: ignore[arg-type]


# -- session grants ---------------------------------------------------------------------------


def test_session_grant_ends_when_its_tools_binding_changes_in_a_reload() -> None:
    inner = SessionGrants()
    running = {(TOOL, "1.2.0"): package_binding(tracker(), key_id=KEY)}  # what a Host holds per generation

    def bindings_of(name: str) -> tuple[str, ...]:
        return tuple(d for (n, _), d in running.items() if n == name)

    grants = BoundGrants(inner, bindings_of)
    grants.grant(("p", "alice"), "s1", TOOL)  # the person said "always"
    assert grants.discharges(("p", "alice"), "s1", TOOL)
    # a reload to a version that changes only code keeps the grant
    running = {(TOOL, "1.3.0"): package_binding(tracker("1.3.0", b"code-2"), key_id=KEY)}
    assert grants.discharges(("p", "alice"), "s1", TOOL)
    # a reload that widens the tool ends it, in this and every process sharing the store
    doc = make_manifest(tools=[make_tool(name=TOOL, version="1.4.0", effect="write", risk="medium")])
    doc["package"]["version"] = "1.4.0"
    _with_host(doc)
    running = {(TOOL, "1.4.0"): package_binding(definition(doc, 3), key_id=KEY)}
    assert not grants.discharges(("p", "alice"), "s1", TOOL)
    assert not grants.discharges_bound(("p", "alice"), "s1", TOOL, running[(TOOL, "1.4.0")])
    assert not inner.discharges(("p", "alice"), "s1", TOOL)  # never stored unbound


def test_grant_of_a_tool_the_generation_does_not_have_is_refused_and_records_nothing() -> None:
    inner = SessionGrants()
    grants = BoundGrants(inner, lambda name: ())
    with pytest.raises(ToolNotFound):
        grants.grant(("p", "alice"), "s1", TOOL)
    assert inner.clear_grants(None) == 0


def test_grant_key_names_tool_and_binding() -> None:
    assert grant_key(TOOL, "a" * 64) == f"{TOOL}#{'a' * 64}"


def test_a_reload_swaps_the_bindings_with_the_registry() -> None:
    """Host grants and allows read the running generation's bindings: a swap that left
    them behind would keep a grant or allow of the old binding alive."""
    assert "_bindings" in _GENERATION_FIELDS and "registry" in _GENERATION_FIELDS


def test_allow_asks_again_when_the_package_reads_more_of_the_workspace(store: ToolPolicyStore) -> None:
    plain = tracker()
    doc = make_manifest(tools=[make_tool(name=TOOL, version="1.2.0", effect="write", risk="medium")],
                        module_bytes=b"code-1")
    doc["package"]["version"] = "1.2.0"
    docs_only = definition({**doc, "workspace": {"read": ["docs"]}})
    allow(store, docs_only)
    assert mode(store, docs_only) is ToolMode.ALLOW
    wider = definition({**doc, "workspace": {"read": ["."]}})
    assert mode(store, wider) is ToolMode.ASK
    # Undeclared: the document has no workspace key, so bindings made before it existed hold.
    assert "workspace_read" not in package_document(plain, key_id=KEY)
    assert package_document(docs_only, key_id=KEY)["workspace_read"] == ["docs"]
