"""jsonkit through the author harness: strict parsing, exact paths, no network at all.

Run with ``stockade test plugins/jsonkit`` (or pytest on this directory).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sdk.harness import Harness

PROJECT = Path(__file__).resolve().parents[1]
DOC = json.dumps({
    "repo": {"name": "stockade", "a.b": 1, "a/b": 2, "m~n": 3},
    "issues": [
        {"number": 3, "title": "C", "state": "open", "labels": ["bug"], "meta": {"votes": 5}},
        {"number": 1, "title": "A", "state": "closed", "labels": [], "meta": {"votes": 9}},
        {"number": 2, "title": "B", "state": "open", "labels": ["bug", "ui"]},
    ],
})


@pytest.fixture(scope="module")
def h() -> Iterator[Harness]:
    with Harness(PROJECT, strict=True) as harness:
        yield harness


def query(h: Harness, path: str, document: str = DOC) -> Any:
    result = h.call("jsonkit.query", {"document": document, "path": path})
    assert result.ok, result.error
    return json.loads(result.output["json"]), result.output["type"]


@pytest.mark.parametrize(
    ("path", "expected", "kind"),
    [
        ("", json.loads(DOC), "object"),
        ("$", json.loads(DOC), "object"),
        ("repo.name", "stockade", "string"),
        ("$.repo.name", "stockade", "string"),
        ("issues[0].number", 3, "number"),
        ("issues[-1].title", "B", "string"),
        ('repo["a.b"]', 1, "number"),
        ("issues[2].labels", ["bug", "ui"], "array"),
        ("/issues/1/state", "closed", "string"),
        ("/repo/a~1b", 2, "number"),
        ("/repo/m~0n", 3, "number"),
        ("issues[1].meta", {"votes": 9}, "object"),
    ],
    ids=["empty", "dollar", "dotted", "dollar-dotted", "index", "negative-index", "quoted-key", "array",
         "pointer", "pointer-escaped-slash", "pointer-escaped-tilde", "object"],
)
def test_query_paths(h: Harness, path: str, expected: Any, kind: str) -> None:
    assert query(h, path) == (expected, kind)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("repo.missing", "no key 'missing'"),
        ("issues[3]", "outside an array of 3"),
        ("issues.name", "needs an index"),
        ("repo.name.first", "a string has no"),
        ("issues[x]", "is not an index"),
        ("repo..name", "empty key"),
        ("/issues/01", "needs an index"),
        ("/issues/-", "needs an index"),
        ("issues[0", "unclosed"),
    ],
    ids=["missing-key", "index-out-of-range", "key-on-array", "key-on-string", "bad-index",
         "empty-segment", "pointer-leading-zero", "pointer-append", "unclosed-bracket"],
)
def test_query_bad_paths_refused_with_the_failing_step(h: Harness, path: str, message: str) -> None:
    result = h.call("jsonkit.query", {"document": DOC, "path": path})
    assert result.error is not None and result.error.code == "INPUT_INVALID"
    assert message in result.error.message


@pytest.mark.parametrize(
    "document",
    ['{"a": NaN}', '{"a": Infinity}', '{"a": 1e999}', '{"a": 1, "a": 2}', "{'a': 1}", '{"a": 1',
     "[" * 65 + "]" * 65, "1" * 5000, ""],
    ids=["nan", "infinity", "float-overflow", "duplicate-key", "single-quotes", "truncated",
         "nested-65-deep", "huge-integer", "empty"],
)
def test_documents_that_are_not_strict_json_refused(h: Harness, document: str) -> None:
    result = h.call("jsonkit.query", {"document": document, "path": ""})
    assert result.error is not None and result.error.code == "INPUT_INVALID"


def test_nesting_of_64_accepted(h: Harness) -> None:
    assert query(h, "", "[" * 64 + "]" * 64)[1] == "array"


def test_brackets_inside_strings_do_not_count_as_nesting(h: Harness) -> None:
    doc = json.dumps({"s": "[" * 100 + '\\"{' * 50})
    assert query(h, "s", doc)[0] == "[" * 100 + '\\"{' * 50


def test_document_over_60000_characters_refused_by_the_host(h: Harness) -> None:
    result = h.call("jsonkit.query", {"document": " " * 60_001, "path": ""})
    assert result.error is not None and result.error.code == "INPUT_INVALID"


def test_largest_document_accepted(h: Harness) -> None:
    doc = json.dumps({"pad": "x" * (60_000 - 20)})
    assert len(doc) <= 60_000
    assert query(h, "pad", doc)[1] == "string"


def transform(h: Harness, **payload: Any) -> Any:
    result = h.call("jsonkit.transform", {"document": DOC, "path": "issues", **payload})
    assert result.ok, result.error
    value = json.loads(result.output["json"])
    assert result.output["count"] == len(value)
    return value


def test_transform_pick(h: Harness) -> None:
    picked = transform(h, operation="pick", fields=["number", "missing"])
    assert picked == [{"number": 3}, {"number": 1}, {"number": 2}]


def test_transform_sort_ascending_and_descending(h: Harness) -> None:
    assert [i["number"] for i in transform(h, operation="sort", key="number")] == [1, 2, 3]
    assert [i["number"] for i in transform(h, operation="sort", key="number", descending=True)] == [3, 2, 1]


def test_transform_sort_by_nested_key_puts_missing_last(h: Harness) -> None:
    assert [i["number"] for i in transform(h, operation="sort", key="meta.votes")] == [3, 1, 2]


def test_transform_count(h: Harness) -> None:
    counted = transform(h, operation="count", key="state")
    assert counted == [{"value": "open", "count": 2}, {"value": "closed", "count": 1}]


def test_transform_unique_keeps_first_seen_order(h: Harness) -> None:
    assert transform(h, operation="unique", key="labels") == [["bug"], [], ["bug", "ui"]]
    assert transform(h, operation="unique", key="state") == ["open", "closed"]


def test_transform_limit(h: Harness) -> None:
    assert len(transform(h, operation="sort", key="number", limit=2)) == 2
    assert transform(h, operation="sort", key="number", limit=0) == []


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"operation": "pick"}, "needs 'fields'"),
        ({"operation": "sort"}, "needs 'key'"),
        ({"operation": "count", "key": "x", "path": "repo"}, "needs an array"),
        ({"operation": "unique", "key": "x", "path": "issues[0].labels"}, "not an object"),
    ],
    ids=["pick-without-fields", "sort-without-key", "not-an-array", "not-objects"],
)
def test_transform_misuse_refused(h: Harness, payload: dict[str, Any], message: str) -> None:
    result = h.call("jsonkit.transform", {"document": DOC, "path": "issues", **payload})
    assert result.error is not None and result.error.code == "INPUT_INVALID"
    assert message in result.error.message


@pytest.mark.parametrize(
    "payload",
    [
        {"operation": "delete"},
        {"operation": "pick", "fields": []},
        {"operation": "pick", "fields": ["a"] * 33},
        {"operation": "sort", "key": "n", "limit": 10_001},
    ],
    ids=["unknown-operation", "no-fields", "too-many-fields", "limit-too-big"],
)
def test_transform_inputs_outside_the_schema_refused(h: Harness, payload: dict[str, Any]) -> None:
    result = h.call("jsonkit.transform", {"document": DOC, **payload})
    assert result.error is not None and result.error.code == "INPUT_INVALID"


def test_transform_result_over_its_limit_is_a_tool_failure(h: Harness) -> None:
    # "1e15" re-serializes as "1000000000000000.0": 60000 characters in, ~228000 out.
    doc = '[{"k":[' + ",".join(["1e15"] * 11_990) + "]}]"
    assert len(doc) <= 60_000
    result = h.call("jsonkit.transform", {"document": doc, "operation": "pick", "fields": ["k"]})
    assert result.error is not None and result.error.code == "TOOL_FAILED"
    assert "over 200000" in result.error.message
    result = h.call("jsonkit.transform", {"document": doc, "operation": "pick", "fields": ["x"]})
    assert result.ok and result.output == {"json": "[{}]", "count": 1}


def test_jsonkit_has_no_network(h: Harness) -> None:
    manifest = h.bundle.manifest
    assert manifest.http.allow == () and manifest.http.credentials == ()
    assert h.requests == []
