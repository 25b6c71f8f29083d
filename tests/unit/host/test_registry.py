"""The frozen registry (docs/design.md §5): built once, exact lookups, no way to change it."""

from __future__ import annotations

import copy
import pickle

import pytest

from host.errors import LockInvalid, ToolNotFound
from host.formats.manifest import PackageManifest
from host.trust.registry import Binding, FrozenRegistry, ToolDefinition
from tests.support.bundles import make_manifest, make_tool, manifest_bytes


def manifest(name: str = "tracker", version: str = "1.2.0", tools: list[dict] | None = None) -> PackageManifest:
    raw = make_manifest(
        package={"name": name, "version": version},
        tools=tools if tools is not None else [make_tool(name=f"{name}.list-issues", version=version)],
    )
    raw["http"]["credentials"] = []
    return PackageManifest.from_json(manifest_bytes(raw))


def binding(m: PackageManifest, generation: int = 1) -> Binding:
    return Binding(m.package.name, m.package.version, generation, "a" * 64, m.module.sha256)


@pytest.fixture
def registry() -> FrozenRegistry:
    old = manifest(version="1.2.0")
    new = manifest(version="1.3.0")
    return FrozenRegistry.from_packages([(old, binding(old)), (new, binding(new))])


def test_exact_name_and_version_found(registry: FrozenRegistry) -> None:
    tool = registry.get("tracker.list-issues", "1.3.0")
    assert (tool.name, tool.version, tool.binding.version) == ("tracker.list-issues", "1.3.0", "1.3.0")
    assert tool.package.package.version == "1.3.0"


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("tracker.list-issues", "latest"),
        ("tracker.list-issues", "*"),
        ("tracker.list-issues", ""),
        ("tracker.list-issues", "1.3"),
        ("tracker.list-issues", "1"),
        ("tracker.list-issues", "^1.2.0"),
        ("tracker.list-issues", "v1.3.0"),
        ("tracker.list-issues", "1.3.0 "),
        ("tracker.list", "1.3.0"),
        ("tracker.list-issues.x", "1.3.0"),
        ("Tracker.List-Issues", "1.3.0"),
        ("tracker", "1.3.0"),
        (None, "1.3.0"),
        ("tracker.list-issues", None),
        (("tracker.list-issues",), "1.3.0"),
    ],
    ids=repr,
)
def test_no_latest_prefix_or_fuzzy_lookup(registry: FrozenRegistry, name: object, version: object) -> None:
    with pytest.raises(ToolNotFound) as caught:
        registry.get(name, version)  # type: ignore[arg-type]
    assert caught.value.code == "TOOL_NOT_FOUND"


def test_registry_cannot_be_mutated(registry: FrozenRegistry) -> None:
    before = list(registry)
    for attempt in (
        lambda: setattr(registry, "_by_key", {}),
        lambda: setattr(registry, "extra", 1),
        lambda: delattr(registry, "_ordered"),
    ):
        with pytest.raises(AttributeError):
            attempt()
    with pytest.raises(TypeError):
        registry._by_key[("evil.tool", "1.0.0")] = before[0]  # type: ignore[index]
    for name in ("register", "add", "remove", "update", "__setitem__", "__delitem__"):
        assert not hasattr(registry, name)
    assert list(registry) == before


def test_definition_and_binding_cannot_be_mutated(registry: FrozenRegistry) -> None:
    tool = registry.get("tracker.list-issues", "1.2.0")
    with pytest.raises(AttributeError):
        tool.binding = Binding("x", "1.0.0", 9, "b" * 64, "c" * 64)  # type: ignore[misc]
    with pytest.raises(AttributeError):
        tool.binding.generation = 99  # type: ignore[misc]


def test_registry_cannot_be_subclassed_or_pickled(registry: FrozenRegistry) -> None:
    with pytest.raises(TypeError):
        type("Open", (FrozenRegistry,), {})
    with pytest.raises(TypeError):
        pickle.dumps(registry)
    with pytest.raises(TypeError):
        copy.copy(registry)


def test_schema_changes_after_build_do_not_reach_the_registry() -> None:
    m = manifest()
    registry = FrozenRegistry.from_packages([(m, binding(m))])
    m.tools[0].input_schema["properties"]["repo"]["maxLength"] = 10**9
    assert registry.get("tracker.list-issues", "1.2.0").input_schema["properties"]["repo"]["maxLength"] == 200


def test_duplicate_name_and_version_refused() -> None:
    a = manifest()
    definition = ToolDefinition.from_spec(a.tools[0], a, binding(a))
    with pytest.raises(LockInvalid, match="defined twice"):
        FrozenRegistry([definition, definition])


@pytest.mark.parametrize(("count", "ok"), [(0, True), (128, True), (129, False)], ids=["0", "128", "129"])
def test_registry_size_limit_at_edge(count: int, ok: bool) -> None:
    per_package = 64
    definitions: list[ToolDefinition] = []
    index = 0
    while len(definitions) < count:
        take = min(per_package, count - len(definitions))
        name = f"pkg{index}"
        m = manifest(name=name, tools=[make_tool(name=f"{name}.t{i}") for i in range(take)])
        definitions.extend(ToolDefinition.from_spec(spec, m, binding(m)) for spec in m.tools)
        index += 1
    if ok:
        assert len(FrozenRegistry(definitions)) == count
    else:
        with pytest.raises(LockInvalid, match="more than 128"):
            FrozenRegistry(definitions)


def test_binding_must_match_its_manifest() -> None:
    m = manifest()
    wrong = Binding("tracker", "9.9.9", 1, "a" * 64, m.module.sha256)
    with pytest.raises(LockInvalid, match="does not match"):
        FrozenRegistry.from_packages([(m, wrong)])


def test_every_definition_carries_its_binding(registry: FrozenRegistry) -> None:
    for tool in registry:
        assert tool.binding.to_dict() == {
            "package": "tracker", "version": tool.version, "generation": 1,
            "manifest_sha256": "a" * 64, "module_sha256": tool.package.module.sha256,
        }


def test_membership_iteration_and_len(registry: FrozenRegistry) -> None:
    assert len(registry) == 2
    assert ("tracker.list-issues", "1.2.0") in registry
    assert ("tracker.list-issues", "latest") not in registry
    assert "tracker.list-issues" not in registry
    assert [t.version for t in registry] == ["1.2.0", "1.3.0"]


def test_non_definition_items_refused() -> None:
    with pytest.raises(TypeError):
        FrozenRegistry([{"name": "tracker.x", "version": "1.0.0"}])  # type: ignore[list-item]
