"""The §7 action digest: a known-answer vector and the sensitivity of every bound field.

The digest is what an approval is bound to, so an accidental change of its input (a field
dropped, renamed or re-encoded) silently invalidates every approval in flight, and a
field that stops being bound lets an approval for one action run another. The expected
value below is computed independently of ``host.canonical`` (``json.dumps`` with sorted
keys gives RFC 8785 for this ASCII-only document) and pinned as hex.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from host import Principal
from host.call.prepare import action_digest
from host.formats.manifest import Effect, PackageManifest, Risk
from host.trust.registry import Binding, FrozenRegistry, ToolDefinition
from tests.support.bundles import make_manifest, manifest_bytes

PRINCIPAL = Principal(project="acme", subject="alice")
INPUT_SHA256 = hashlib.sha256(b'{"repo":"widgets"}').hexdigest()
BINDING = Binding("tracker", "1.2.0", 7, "1" * 64, "2" * 64)

# sha256 of the canonical JSON of DOCUMENT, pinned: a change here is a format change.
KNOWN_ANSWER = "091243aae7d748cca4e101313aaf2ac272fa44d6dafd4605856db2c1a870510f"

DOCUMENT = {
    "domain": "stockade/tool-invocation@1",
    "project": "acme",
    "subject": "alice",
    "tool": "tracker.list-issues",
    "version": "1.2.0",
    "binding": {
        "package": "tracker",
        "version": "1.2.0",
        "generation": 7,
        "manifest_sha256": "1" * 64,
        "module_sha256": "2" * 64,
    },
    "permissions": ["tool.call:tracker.list-issues", "issues.read"],
    "effect": "read",
    "risk": "low",
    "timeout_s": 30,
    "input_sha256": INPUT_SHA256,
}


@pytest.fixture(scope="module")
def tool() -> ToolDefinition:
    manifest = PackageManifest.from_json(manifest_bytes(make_manifest()))
    return FrozenRegistry.from_packages([(manifest, BINDING)]).get("tracker.list-issues", "1.2.0")


def _independent_digest(document: dict[str, object]) -> str:
    return hashlib.sha256(
        json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    ).hexdigest()


def test_action_digest_known_answer(tool: ToolDefinition) -> None:
    assert _independent_digest(DOCUMENT) == KNOWN_ANSWER
    assert action_digest(PRINCIPAL, tool, INPUT_SHA256) == KNOWN_ANSWER


CHANGES = {
    "effect": {"effect": Effect.WRITE},
    "risk": {"risk": Risk.HIGH},
    "timeout": {"timeout_s": 31},
    "permissions": {"permissions": ("issues.read", "issues.write")},
    "module-digest": {"binding": dataclasses.replace(BINDING, module_sha256="3" * 64)},
    "manifest-digest": {"binding": dataclasses.replace(BINDING, manifest_sha256="3" * 64)},
    "generation": {"binding": dataclasses.replace(BINDING, generation=8)},
    "tool-version": {"version": "1.2.1"},
}


@pytest.mark.parametrize("change", list(CHANGES), ids=list(CHANGES))
def test_every_bound_field_changes_the_digest(tool: ToolDefinition, change: str) -> None:
    changed = dataclasses.replace(tool, **CHANGES[change])  # type: ignore[arg-type]
    digest = action_digest(PRINCIPAL, changed, INPUT_SHA256)
    assert digest != KNOWN_ANSWER
    # ... and to exactly the digest of the document with that one field changed.
    document = json.loads(json.dumps(DOCUMENT))
    document["effect"] = changed.effect.value
    document["risk"] = changed.risk.value
    document["timeout_s"] = changed.timeout_s
    document["version"] = changed.version
    document["permissions"] = [f"tool.call:{changed.name}", *changed.permissions]
    document["binding"] = changed.binding.to_dict()
    assert digest == _independent_digest(document)


def test_all_field_changes_give_distinct_digests(tool: ToolDefinition) -> None:
    digests = {
        action_digest(PRINCIPAL, dataclasses.replace(tool, **fields), INPUT_SHA256)  # type: ignore[arg-type]
        for fields in CHANGES.values()
    }
    assert len(digests) == len(CHANGES)


@pytest.mark.parametrize(
    ("principal", "input_sha256"),
    [(Principal(project="acme", subject="bob"), INPUT_SHA256),
     (Principal(project="other", subject="alice"), INPUT_SHA256),
     (PRINCIPAL, "0" * 64)],
    ids=["subject", "project", "input"],
)
def test_principal_and_input_change_the_digest(
    tool: ToolDefinition, principal: Principal, input_sha256: str
) -> None:
    assert action_digest(principal, tool, input_sha256) != KNOWN_ANSWER
