"""Hostile schemas a third-party MCP server could list, against the external schema profile
(``host.formats.schemaprofile``): each is refused at pin or bounded at call time, and the test
measures the time and memory it took (printed with ``-s``)."""

from __future__ import annotations

import json
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

from host.errors import InputInvalid, ManifestInvalid, SchemaInvalid
from host.formats.manifest import PackageManifest
from host.formats.schemaprofile import (
    MAX_ENUM,
    MAX_EXPANDED_NODES,
    MAX_VALIDATION_STEPS,
    canonicalize_external,
    check_external,
)

BUDGET = 64 * 1024


def measured(fn: Callable[[], Any]) -> tuple[float, int, BaseException | None]:
    """(seconds, peak bytes allocated, the exception raised): timed in a first run, memory
    traced in a second (tracemalloc slows Python code several times over)."""
    raised: BaseException | None = None
    start = time.perf_counter()
    try:
        fn()
    except (SchemaInvalid, InputInvalid) as exc:
        raised = exc
    seconds = time.perf_counter() - start
    tracemalloc.start()
    try:
        fn()
    except (SchemaInvalid, InputInvalid):
        pass
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"{seconds * 1000:.1f} ms, peak {peak / 1024:.0f} KiB, {raised}")
    return seconds, peak, raised


def obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def test_remote_ref_is_refused_at_pin_and_nothing_is_fetched() -> None:
    for ref in ("https://evil.example/schema.json", "file:///etc/passwd", "other.json#/a", "//evil/x"):
        seconds, _, raised = measured(lambda ref=ref: check_external(obj(x={"$ref": ref})))
        assert isinstance(raised, SchemaInvalid) and raised.details["rule"] == "remote-ref"
        assert seconds < 1.0


def test_redos_pattern_runs_in_linear_time_on_re2() -> None:
    schema = obj(x={"type": "string", "pattern": "^(a+)+$"})
    check_external(schema)  # RE2 compiles it: nested quantifiers are linear there
    hostile = {"x": "a" * 30_000 + "!"}  # catastrophic for a backtracking engine
    seconds, peak, raised = measured(lambda: canonicalize_external(schema, hostile, max_bytes=BUDGET))
    assert isinstance(raised, InputInvalid) and raised.details["rule"] == "pattern"
    assert seconds < 1.0 and peak < 16 * 1024 * 1024


@pytest.mark.parametrize(
    "pattern", [r"(a)\1", r"(?=a)a", r"(?!a)b", r"(?<=a)b"], ids=["backreference", "lookahead",
                                                                   "negative-lookahead", "lookbehind"],
)
def test_patterns_re2_cannot_compile_refuse_the_tool_at_pin(pattern: str) -> None:
    with pytest.raises(SchemaInvalid, match="RE2") as refused:
        check_external(obj(x={"type": "string", "pattern": pattern}))
    assert refused.value.details["rule"] == "pattern"
    with pytest.raises(SchemaInvalid, match="RE2"):
        check_external({"type": "object", "patternProperties": {pattern: {"type": "string"}}})


def test_exponential_ref_expansion_is_refused_at_pin_with_the_number() -> None:
    defs: dict[str, Any] = {"l0": {"type": "string"}}
    for level in range(1, 30):  # 2**30 nodes once expanded, ~90 as written
        defs[f"l{level}"] = {"anyOf": [{"$ref": f"#/$defs/l{level - 1}"}, {"$ref": f"#/$defs/l{level - 1}"}]}
    schema = {"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/l29"}}}
    seconds, peak, raised = measured(lambda: check_external(schema))
    assert isinstance(raised, SchemaInvalid) and raised.details["rule"] == "ref-expansion"
    assert str(MAX_EXPANDED_NODES) in raised.message
    assert seconds < 5.0 and peak < 64 * 1024 * 1024


def test_ten_megabyte_schema_is_refused_at_pin() -> None:
    schema = obj(x={"type": "string", "description": "d" * (10 * 1024 * 1024)})
    seconds, peak, raised = measured(lambda: check_external(schema))
    assert isinstance(raised, SchemaInvalid) and raised.details["rule"] == "size"
    assert "bytes, over" in raised.message
    assert seconds < 5.0 and peak < 64 * 1024 * 1024


def test_huge_enum_is_refused_at_pin() -> None:
    with pytest.raises(SchemaInvalid, match=str(MAX_ENUM)):
        check_external(obj(x={"enum": list(range(MAX_ENUM + 1))}))


def test_deep_nesting_is_refused_at_pin() -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(40):
        schema = obj(x=schema)
    with pytest.raises(SchemaInvalid) as refused:
        check_external(schema)
    assert refused.value.details["rule"] == "depth"


def test_recursion_that_never_descends_into_the_input_is_refused_at_pin() -> None:
    schema = {"type": "object", "$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}]}}, "allOf": [{"$ref": "#/$defs/a"}]}
    with pytest.raises(SchemaInvalid, match="without descending") as refused:
        check_external(schema)
    assert refused.value.details["rule"] == "ref-cycle"


def test_recursive_schema_with_a_deep_input_is_bounded_at_call_time() -> None:
    tree = {"type": "object", "properties": {"child": {"$ref": "#"}, "n": {"type": "integer"}}}
    check_external(tree)  # recursion through "properties" descends: bounded by the input's size
    deep: dict[str, Any] = {"n": 1}
    for _ in range(62):
        deep = {"child": deep}
    canonicalize_external(tree, deep, max_bytes=BUDGET)
    deeper: dict[str, Any] = {"n": 1}
    for _ in range(200):
        deeper = {"child": deeper}
    seconds, peak, raised = measured(lambda: canonicalize_external(tree, deeper, max_bytes=BUDGET))
    assert isinstance(raised, InputInvalid) and raised.details["rule"] == "too-deep"
    assert seconds < 1.0 and peak < 16 * 1024 * 1024


def test_validation_cost_is_bounded_per_call() -> None:
    # Every item is checked against 32 alternatives of 64 properties: cheap to write, costly to run.
    branch = {"type": "object", "properties": {f"p{i}": {"type": "string", "maxLength": 3} for i in range(64)}}
    schema = obj(items={"type": "array", "items": {"anyOf": [dict(branch, required=[f"q{j}"]) for j in range(32)]}})
    check_external(schema)
    # each item matches only the last alternative, so all 32 are evaluated for each
    value = {"items": [{"q31": 1, **{f"p{i}": "x" for i in range(64)}} for _ in range(60)]}
    seconds, peak, raised = measured(lambda: canonicalize_external(schema, value, max_bytes=BUDGET))
    assert isinstance(raised, InputInvalid) and raised.details["rule"] == "validation-cost"
    assert str(MAX_VALIDATION_STEPS) in raised.message
    assert seconds < 10.0 and peak < 64 * 1024 * 1024


def test_unknown_keywords_and_dialects_are_refused_not_ignored() -> None:
    with pytest.raises(SchemaInvalid, match="maxLenght"):
        check_external(obj(x={"type": "string", "maxLenght": 3}))  # a typo would be silently ignored
    with pytest.raises(SchemaInvalid) as refused:
        check_external({"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"})
    assert refused.value.details["rule"] == "dialect"
    with pytest.raises(SchemaInvalid, match="dialect"):
        check_external({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                        "prefixItems": [{"type": "string"}]})


def test_a_package_manifest_cannot_claim_the_external_profile() -> None:
    doc = {
        "format": "stockade.manifest/1",
        "package": {"name": "evil", "version": "1.0.0"},
        "module": {"file": "module.wasm", "sha256": "0" * 64, "world": "stockade:plugin/tool@1.0.0"},
        "limits": {"fuel": 1000, "memory_bytes": 65536, "timeout_ms": 1000, "max_http_requests": 0,
                   "max_log_bytes": 1024},
        "http": {"allow": [], "credentials": [], "max_request_bytes": 0, "max_response_bytes": 0,
                 "timeout_ms": 1},
        "tools": [{"name": "evil.open", "version": "1.0.0", "description": "d",
                   "schema_profile": "stockade.schema-profile/external-1",
                   "input_schema": {"type": "object"}, "effect": "read", "risk": "low",
                   "permissions": [], "timeout_s": 1}],
    }
    with pytest.raises(ManifestInvalid, match="only a pinned MCP tool"):
        PackageManifest.from_json(json.dumps(doc).encode())
