from __future__ import annotations

from pathlib import Path

import pytest

import host.errors as errors
from host.errors import EgressDenied, EgressUnreachable, InputInvalid, StockadeError, all_error_classes

PINNED_CODES = {
    "StockadeError": "STOCKADE_ERROR",
    "RequestInvalid": "REQUEST_INVALID",
    "ToolNotFound": "TOOL_NOT_FOUND",
    "InputInvalid": "INPUT_INVALID",
    "OutputInvalid": "OUTPUT_INVALID",
    "SchemaInvalid": "SCHEMA_INVALID",
    "PolicyDenied": "POLICY_DENIED",
    "PolicyUnavailable": "POLICY_UNAVAILABLE",
    "ApprovalRequired": "APPROVAL_REQUIRED",
    "ApprovalInvalid": "APPROVAL_INVALID",
    "ApprovalDenied": "APPROVAL_DENIED",
    "ApprovalQueueFull": "APPROVAL_QUEUE_FULL",
    "ApproverKeyMissing": "APPROVER_KEY_MISSING",
    "ScopeInvalid": "SCOPE_INVALID",
    "Busy": "BUSY",
    "CallCancelled": "CANCELLED",
    "RateLimited": "RATE_LIMITED",
    "CredentialUnavailable": "CREDENTIAL_UNAVAILABLE",
    "EgressDenied": "EGRESS_DENIED",
    "EgressUnreachable": "EGRESS_UNREACHABLE",
    "SandboxTrap": "SANDBOX_TRAP",
    "SandboxFuelExhausted": "SANDBOX_FUEL_EXHAUSTED",
    "SandboxTimeout": "SANDBOX_TIMEOUT",
    "SandboxMemory": "SANDBOX_MEMORY",
    "SandboxUnavailable": "SANDBOX_UNAVAILABLE",
    "ToolFailed": "TOOL_FAILED",
    "ManifestInvalid": "MANIFEST_INVALID",
    "ComponentRefused": "COMPONENT_REFUSED",
    "LockInvalid": "LOCK_INVALID",
    "LockRollback": "LOCK_ROLLBACK",
    "DigestMismatch": "DIGEST_MISMATCH",
    "SignatureInvalid": "SIGNATURE_INVALID",
    "SecretsUnavailable": "SECRETS_UNAVAILABLE",
    "AuditUnavailable": "AUDIT_UNAVAILABLE",
    "BundleMissing": "BUNDLE_MISSING",
    "RegistryUnavailable": "REGISTRY_UNAVAILABLE",
    "RegistryRefused": "REGISTRY_REFUSED",
    "ArtifactInvalid": "ARTIFACT_INVALID",
    "McpUnavailable": "MCP_UNAVAILABLE",
    "McpTimeout": "MCP_TIMEOUT",
    "McpToolChanged": "MCP_TOOL_CHANGED",
    "StoreUnavailable": "STORE_UNAVAILABLE",
    "ConfigInvalid": "CONFIG_INVALID",
    "CassetteInvalid": "CASSETTE_INVALID",
    "CassetteUnmatched": "CASSETTE_UNMATCHED",
}


def test_error_codes_are_pinned_and_unique() -> None:
    found = {cls.__name__: cls.code for cls in all_error_classes()}
    assert found == PINNED_CODES
    assert len(set(found.values())) == len(found)


def test_every_exported_error_is_in_the_tree() -> None:
    exported = {name for name in errors.__all__ if name[0].isupper()}
    assert exported == set(PINNED_CODES)
    for name in exported:
        assert issubclass(getattr(errors, name), StockadeError)


def _docstring_tree(doc: str) -> dict[str, tuple[str | None, str | None]]:
    """``{class name: (parent name, code)}`` as drawn in the tree of ``doc``."""
    lines = doc[doc.index("Tree (") :].split("::\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    tree: dict[str, tuple[str | None, str | None]] = {}
    stack: list[str] = []  # stack[d] = the last class drawn at depth d
    for line in lines:
        body = line.lstrip(" │├└─")
        prefix = line[: len(line) - len(body)]
        assert (len(prefix) - 4) % 4 == 0, f"misaligned tree line: {line!r}"
        depth = (len(prefix) - 4) // 4
        name, *rest = body.split()
        code = rest[0] if rest else None
        assert depth <= len(stack), f"{name} is drawn below no parent"
        del stack[depth:]
        tree[name] = (stack[-1] if stack else None, code)
        stack.append(name)
    return tree


def test_docstring_tree_matches_class_hierarchy() -> None:
    drawn = _docstring_tree(errors.__doc__ or "")
    actual = {
        cls.__name__: (None if cls is StockadeError else cls.__bases__[0].__name__,
                       None if cls is StockadeError else cls.code)
        for cls in all_error_classes()
    }
    assert drawn == actual


def test_docstring_tree_parser_sees_a_misplaced_class() -> None:
    # The check above must be able to fail: move EgressUnreachable up one level in a copy.
    doc = errors.__doc__ or ""
    moved = doc.replace("│   └── EgressUnreachable    ", "├── EgressUnreachable        ")
    assert moved != doc
    assert _docstring_tree(moved)["EgressUnreachable"] == ("StockadeError", "EGRESS_UNREACHABLE")


@pytest.mark.parametrize("cls", all_error_classes(), ids=lambda c: c.__name__)
def test_every_error_has_a_hint_for_people(cls: type[StockadeError]) -> None:
    if cls is StockadeError:
        return
    assert cls.default_hint, f"{cls.__name__} needs a default hint"
    assert cls.__doc__


def test_hostile_message_is_capped() -> None:
    exc = InputInvalid("x" * 100_000, pointer="/a")
    assert len(exc.message) <= errors.MAX_MESSAGE_CHARS
    assert exc.message.endswith("[truncated]")
    assert exc.to_dict()["details"] == {"pointer": "/a"}


def test_egress_denied_carries_typed_reason() -> None:
    exc = EgressDenied("no", reason="userinfo")
    assert exc.reason == "userinfo"
    assert exc.code == "EGRESS_DENIED"
    assert exc.details["reason"] == "userinfo"
    assert str(exc) == "EGRESS_DENIED: no"


def test_egress_unreachable_is_distinct_from_a_denial_but_caught_with_it() -> None:
    exc = EgressUnreachable("slow DNS", reason="dns_timeout")
    assert exc.code == "EGRESS_UNREACHABLE" != EgressDenied.code
    assert isinstance(exc, EgressDenied) and exc.reason == "dns_timeout"


def test_readme_error_table_names_every_code() -> None:
    page = (Path(__file__).resolve().parents[3] / "docs" / "host-apps.md").read_text(encoding="utf-8")
    table = page[page.index("## Error codes") :]
    missing = [cls.code for cls in all_error_classes() if cls is not StockadeError and f"`{cls.code}`" not in table]
    assert missing == []
