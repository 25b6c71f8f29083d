"""``sdk.review.report`` as a library (the demo and CI scripts call it): rules in-process, fast."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from host.formats.manifest import PackageManifest
from sdk.review._manifestdiff import manifest_changes, schema_changes
from sdk.review.report import LockDiff, component_report, diff_locks, lock_report
from tests.support.bundles import lock_digest, lock_entry, make_manifest, write_bundle, write_lock
from tests.support.wat import core_module, echo_component

STRING = {"type": "string", "maxLength": 10}


def _obj(**props: Any) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "properties": props, "required": sorted(props)}


@pytest.mark.parametrize(
    ("old", "new", "widens"),
    [
        (_obj(a=STRING), _obj(a=STRING, b=STRING), True),
        (_obj(a=STRING, b=STRING), _obj(a=STRING), False),
        (_obj(a=STRING), {**_obj(a=STRING), "required": []}, True),
        ({**_obj(a=STRING), "required": []}, _obj(a=STRING), False),
        (_obj(a=STRING), _obj(a={"type": "string", "maxLength": 11}), True),
        (_obj(a=STRING), _obj(a={"type": "string", "maxLength": 9}), False),
        (_obj(a={**STRING, "minLength": 2}), _obj(a={**STRING, "minLength": 1}), True),
        (_obj(a={**STRING, "enum": ["x"]}), _obj(a={**STRING, "enum": ["x", "y"]}), True),
        (_obj(a={**STRING, "enum": ["x", "y"]}), _obj(a={**STRING, "enum": ["x"]}), False),
        (_obj(a={**STRING, "enum": ["x"]}), _obj(a=STRING), True),
        (_obj(a=STRING), _obj(a={"type": "integer", "minimum": 0, "maximum": 1}), True),
        (_obj(a={"type": "integer", "minimum": 0, "maximum": 5}),
         _obj(a={"type": "integer", "minimum": -1, "maximum": 5}), True),
        (_obj(a={"type": "array", "maxItems": 2, "items": STRING}),
         _obj(a={"type": "array", "maxItems": 2, "items": {"type": "string", "maxLength": 99}}), True),
        (_obj(a={"type": "array", "maxItems": 2, "items": STRING, "uniqueItems": True}),
         _obj(a={"type": "array", "maxItems": 2, "items": STRING}), True),
        (None, STRING, True),
        (STRING, None, False),
        ({**STRING, "description": "a"}, {**STRING, "description": "b"}, False),
        ({**STRING, "x-unknown": 1}, {**STRING, "x-unknown": 2}, True),
    ],
    ids=[
        "property-added", "property-removed", "requirement-dropped", "requirement-added", "maxlength-raised",
        "maxlength-lowered", "minlength-lowered", "enum-gains", "enum-loses", "enum-dropped", "type-changed",
        "minimum-lowered", "items-widened", "uniqueness-dropped", "output-schema-added", "output-schema-removed",
        "description-only", "unknown-keyword",
    ],
)
def test_schema_change_classified(old: Any, new: Any, widens: bool) -> None:
    changes = schema_changes(old, new)
    assert changes, "a difference must be reported"
    assert any(w for _, _, w in changes) is widens, changes


def test_diff_locks_returns_data_with_escalations(tmp_path: Path) -> None:
    old_manifest = make_manifest()
    new_manifest = copy.deepcopy(old_manifest)
    new_manifest["http"]["allow"][0]["methods"].append("DELETE")
    old_bundle = write_bundle(tmp_path / "a" / "b", old_manifest)
    old = write_lock(tmp_path / "a" / "stockade.lock", [lock_entry(tmp_path / "a", old_bundle)])
    new_bundle = write_bundle(tmp_path / "n" / "b", new_manifest)
    new = write_lock(tmp_path / "n" / "stockade.lock", [lock_entry(tmp_path / "n", new_bundle)],
                     generation=2, previous=lock_digest(old))
    diff = diff_locks(old, new)
    assert isinstance(diff, LockDiff) and diff.chained
    assert [c.kind for c in diff.escalations] == ["http.methods"]
    assert "DELETE" in diff.escalations[0].detail
    as_dict = diff.to_dict()
    assert as_dict["format"] == "stockade.diff/1" and as_dict["escalations"] == ["http.methods"]
    assert not (tmp_path / "a" / "lock-state.json").exists()


def test_component_report_judges_without_raising() -> None:
    refused = component_report(core_module())
    assert refused["accepted"] is False and refused["refusal"]["code"] == "COMPONENT_REFUSED"
    accepted = component_report(echo_component())
    assert accepted["accepted"] is True and accepted["imports"] == [] and "call" in accepted["exports"]


def test_lock_report_without_imports_compiles_nothing(tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path / "b", make_manifest())
    lock = write_lock(tmp_path / "stockade.lock", [lock_entry(tmp_path, bundle)])
    report = lock_report(lock, imports=False)
    assert report["packages"][0]["component"] is None and report["generation"] == 1


def _credential(hosts: list[str], paths: list[str]) -> dict[str, Any]:
    return {"secret": "tracker_token", "location": {"type": "bearer"}, "hosts": hosts, "path_prefixes": paths,
            "optional": False}


def test_credential_sent_to_a_new_host_path_pair_escalates() -> None:
    """Old: the token goes to api under /v1/issues and to mirror under /v1/other; new: to
    both under both. Hosts and paths are each known; the pair (mirror, /v1/issues) is not."""
    allow = [{"scheme": "https", "host": h, "port": None, "path_prefix": "/v1", "methods": ["GET"]}
             for h in ("api.tracker.example", "mirror.tracker.example")]
    http = {"allow": allow, "max_request_bytes": 1024, "max_response_bytes": 1024, "timeout_ms": 1000}
    old = make_manifest(http={**http, "credentials": [
        _credential(["api.tracker.example"], ["/v1/issues"]),
        _credential(["mirror.tracker.example"], ["/v1/other"]),
    ]})
    new = make_manifest(http={**http, "credentials": [
        _credential(["api.tracker.example", "mirror.tracker.example"], ["/v1/issues", "/v1/other"]),
    ]})
    changes = list(manifest_changes("tracker", _parse(old), _parse(new)))
    [widening] = [c for c in changes if c.escalation]
    assert widening.kind == "credential.paths"
    assert widening.new == ["api.tracker.example/v1/other", "mirror.tracker.example/v1/issues"]


def _parse(manifest: dict[str, Any]) -> PackageManifest:
    return PackageManifest.from_json(json.dumps(manifest).encode())


@pytest.mark.parametrize(
    ("old", "new", "escalations", "shown"),
    [
        (None, ["docs"], [("workspace.read", "docs")], []),  # a new read grant
        (["docs"], ["docs", "src"], [("workspace.read", "src")], []),
        (["docs/api"], ["docs"], [("workspace.read", "docs")], []),  # wider
        (["docs"], ["."], [("workspace.read", ".")], []),  # the whole root
        (["docs"], ["docs/api"], [], [("workspace.narrowed", "docs")]),
        (["docs", "src"], ["docs"], [], [("workspace.narrowed", "src")]),
        (["docs"], ["docs"], [], []),
    ],
)
def test_workspace_read_changes_in_a_diff(
    old: list[str] | None, new: list[str], escalations: list[tuple[str, str]], shown: list[tuple[str, str]]
) -> None:
    base = make_manifest()
    before = base if old is None else {**base, "workspace": {"read": old}}
    after = {**base, "workspace": {"read": new}}
    changes = [c for c in manifest_changes("tracker", _parse(before), _parse(after)) if c.kind.startswith("workspace")]
    assert [(c.kind, c.new) for c in changes if c.escalation] == escalations
    assert [(c.kind, c.old) for c in changes if not c.escalation] == shown


def test_lock_report_lists_the_workspace_directories_a_package_reads(tmp_path: Path) -> None:
    module = echo_component()
    bundle = write_bundle(tmp_path / "b", {**make_manifest(module_bytes=module), "workspace": {"read": ["docs"]}},
                          module)
    lock = write_lock(tmp_path / "stockade.lock", [lock_entry(tmp_path, bundle)])
    [package] = lock_report(lock, imports=False)["packages"]
    assert package["workspace_read"] == ["docs"]
