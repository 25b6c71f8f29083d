"""The bounded schema subset (host.formats.schema, docs/design.md §5).

The attacks: a manifest smuggling a keyword the host does not enforce (so the model or
author believes in a constraint that is not there), schemas or values sized to exhaust
the host (depth, nodes, properties, enums, items, bytes), type confusion (booleans as
numbers, floats as integers), length confusion (UTF-16 units or bytes instead of code
points), duplicate items respelled to look unique, and outputs from tools that promised
none.
"""

from __future__ import annotations

import copy
import json
from types import MappingProxyType
from typing import Any

import pytest

from host.canonical import MAX_SAFE_INTEGER
from host.errors import InputInvalid, SchemaInvalid
from host.formats.schema import (
    DEFAULT_MAX_BYTES,
    MAX_DEPTH,
    MAX_DESCRIPTION_CHARS,
    MAX_ENUM,
    MAX_ITEMS,
    MAX_NODES,
    MAX_PROPERTIES,
    canonicalize,
    check_schema,
    validate,
)
from tests.support.schemas import (
    count_nodes,
    nested_schema,
    object_schema,
    schema_with_nodes,
    string_schema,
)

INT_0_10 = {"type": "integer", "minimum": 0, "maximum": 10}
NUM_0_10 = {"type": "number", "minimum": 0, "maximum": 10}


def _wrap(node: dict[str, Any]) -> dict[str, Any]:
    """An input schema whose property ``x`` is ``node``."""
    return object_schema({"x": node})


def _schema_refusal(schema: object, *, root_object: bool = True) -> tuple[str, str]:
    with pytest.raises(SchemaInvalid) as exc_info:
        check_schema(schema, root_object=root_object)
    assert exc_info.value.code == "SCHEMA_INVALID"
    return exc_info.value.details["rule"], exc_info.value.details["pointer"]


def _input_refusal(schema: dict[str, Any] | None, value: object, **kwargs: Any) -> tuple[str, str]:
    with pytest.raises(InputInvalid) as exc_info:
        canonicalize(schema, value, **kwargs)
    assert exc_info.value.code == "INPUT_INVALID"
    return exc_info.value.details["rule"], exc_info.value.details["pointer"]


def test_limits_are_the_design_values() -> None:
    assert (MAX_DEPTH, MAX_NODES, MAX_PROPERTIES, MAX_ENUM, MAX_ITEMS) == (8, 256, 64, 64, 256)
    assert DEFAULT_MAX_BYTES == 64 * 1024


# --- check_schema: what is inside the subset --------------------------------------------

DESIGN_EXAMPLE_INPUT = object_schema({"repo": string_schema(200)})
DESIGN_EXAMPLE_OUTPUT = {"type": "array", "maxItems": 100, "items": string_schema(500)}


@pytest.mark.parametrize(
    "node",
    [
        {"type": "null"},
        {"type": "boolean", "description": "a flag"},
        {"type": "string", "maxLength": 0},
        {"type": "string", "maxLength": 5, "minLength": 5, "enum": ["alpha", "gamma"]},
        {"type": "integer", "minimum": -MAX_SAFE_INTEGER, "maximum": MAX_SAFE_INTEGER},
        {"type": "integer", "minimum": 3, "maximum": 3},
        {"type": "number", "minimum": -0.5, "maximum": 1e15},
        {"type": "array", "maxItems": MAX_ITEMS, "minItems": 1, "uniqueItems": True, "items": INT_0_10},
        {"type": "array", "maxItems": 0, "items": {"type": "null"}},
        object_schema({}, []),
        object_schema({"a": {"type": "null"}, "b": NUM_0_10}, ["b"]),
    ],
    ids=[
        "null", "boolean-with-description", "string-zero-length", "string-enum", "integer-full-range",
        "integer-single-value", "number-float-bounds", "array-all-options", "array-empty-only",
        "object-empty", "object-optional-property",
    ],
)
def test_schema_inside_subset_accepted(node: dict[str, Any]) -> None:
    before = copy.deepcopy(node)
    check_schema(_wrap(node))
    check_schema(node, root_object=False)
    assert node == before  # description and everything else kept, nothing rewritten


def test_design_example_schemas_accepted() -> None:
    check_schema(DESIGN_EXAMPLE_INPUT)
    check_schema(DESIGN_EXAMPLE_OUTPUT, root_object=False)


def test_read_only_mapping_schema_accepted() -> None:
    check_schema(MappingProxyType(object_schema({"a": MappingProxyType(string_schema())})))


# --- check_schema: every keyword outside the subset -------------------------------------

FORBIDDEN_KEYWORDS = {
    "$ref": "#/$defs/x", "$defs": {}, "definitions": {}, "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "urn:x", "$anchor": "a", "$dynamicRef": "#x", "$comment": "c", "oneOf": [], "anyOf": [], "allOf": [],
    "not": {}, "if": {}, "then": {}, "else": {}, "pattern": ".*", "format": "uri", "default": "x", "const": "x",
    "examples": ["x"], "title": "t", "readOnly": True, "writeOnly": False, "deprecated": False,
    "contentEncoding": "base64", "contentMediaType": "text/plain", "nullable": True, "x-extension": 1,
    "minimum": 0, "items": {"type": "null"}, "properties": {}, "patternProperties": {}, "propertyNames": {},
    "minProperties": 0, "maxProperties": 1, "dependentRequired": {}, "dependentSchemas": {},
    "unevaluatedProperties": False, "prefixItems": [], "contains": {}, "minContains": 0, "maxContains": 1,
    "unevaluatedItems": False, "exclusiveMinimum": 0, "exclusiveMaximum": 1, "multipleOf": 1,
    "additionalProperties": False, "required": [],
}


@pytest.mark.parametrize("keyword", sorted(FORBIDDEN_KEYWORDS), ids=str)
def test_keyword_outside_subset_refused_on_string(keyword: str) -> None:
    node = {**string_schema(), keyword: FORBIDDEN_KEYWORDS[keyword]}
    assert _schema_refusal(_wrap(node)) == ("keyword-not-allowed", f"/properties/x/{keyword.replace('/', '~1')}")


@pytest.mark.parametrize(
    ("node", "keyword"),
    [
        ({**INT_0_10, "maxLength": 3}, "maxLength"),
        ({**NUM_0_10, "enum": ["1"]}, "enum"),
        ({"type": "boolean", "enum": [True]}, "enum"),
        ({"type": "null", "const": None}, "const"),
        ({**string_schema(), "minimum": 0}, "minimum"),
        ({"type": "array", "maxItems": 1, "items": {"type": "null"}, "properties": {}}, "properties"),
        ({**object_schema({}), "items": {"type": "null"}}, "items"),
        ({**object_schema({}), "maxItems": 3}, "maxItems"),
        ({**object_schema({}), "oneOf": [{"type": "null"}]}, "oneOf"),
        ({"type": "array", "maxItems": 1, "items": {"type": "null"}, "additionalItems": False}, "additionalItems"),
    ],
    ids=[
        "maxLength-on-integer", "enum-on-number", "enum-on-boolean", "const-on-null", "minimum-on-string",
        "properties-on-array", "items-on-object", "maxItems-on-object", "oneOf-on-object", "additionalItems",
    ],
)
def test_keyword_of_another_type_refused(node: dict[str, Any], keyword: str) -> None:
    assert _schema_refusal(_wrap(node)) == ("keyword-not-allowed", f"/properties/x/{keyword}")


def test_forbidden_keyword_deep_inside_refused_with_pointer() -> None:
    leaf = {**string_schema(), "pattern": "^a"}
    schema = object_schema({"a": {"type": "array", "maxItems": 2, "items": object_schema({"b/c": leaf})}})
    assert _schema_refusal(schema) == ("keyword-not-allowed", "/properties/a/items/properties/b~1c/pattern")


# --- check_schema: every missing bound ------------------------------------------------

@pytest.mark.parametrize(
    ("node", "rule"),
    [
        ({"maxLength": 3}, "missing-type"),
        ({"type": "string"}, "missing-maxLength"),
        ({"type": "string", "minLength": 1, "enum": ["a"]}, "missing-maxLength"),
        ({"type": "integer", "maximum": 1}, "missing-minimum"),
        ({"type": "integer", "minimum": 1}, "missing-maximum"),
        ({"type": "number", "maximum": 1}, "missing-minimum"),
        ({"type": "number", "minimum": 1}, "missing-maximum"),
        ({"type": "array", "items": {"type": "null"}}, "missing-maxItems"),
        ({"type": "array", "maxItems": 3}, "missing-items"),
        ({"type": "object", "properties": {}, "required": []}, "missing-additionalProperties"),
        ({"type": "object", "additionalProperties": False, "required": []}, "missing-properties"),
        ({"type": "object", "additionalProperties": False, "properties": {}}, "missing-required"),
    ],
    ids=[
        "type", "string-maxLength", "string-enum-maxLength", "integer-minimum", "integer-maximum",
        "number-minimum", "number-maximum", "array-maxItems", "array-items", "object-additionalProperties",
        "object-properties", "object-required",
    ],
)
def test_missing_bound_refused(node: dict[str, Any], rule: str) -> None:
    assert _schema_refusal(_wrap(node)) == (rule, "/properties/x")


# --- check_schema: malformed values of allowed keywords --------------------------------

@pytest.mark.parametrize(
    ("node", "rule", "at"),
    [
        ({"type": ["string", "null"], "maxLength": 1}, "bad-type", "/type"),
        ({"type": "any"}, "bad-type", "/type"),
        ({"type": "String", "maxLength": 1}, "bad-type", "/type"),
        (string_schema(True), "bad-maxLength", "/maxLength"),
        (string_schema(-1), "bad-maxLength", "/maxLength"),
        (string_schema(1.0), "bad-maxLength", "/maxLength"),
        (string_schema("10"), "bad-maxLength", "/maxLength"),
        (string_schema(MAX_SAFE_INTEGER + 1), "bound-out-of-range", "/maxLength"),
        (string_schema(3, minLength=4), "min-greater-than-max", "/minLength"),
        (string_schema(3, minLength=False), "bad-minLength", "/minLength"),
        (string_schema(3, enum=[]), "bad-enum", "/enum"),
        (string_schema(3, enum="abc"), "bad-enum", "/enum"),
        (string_schema(3, enum=["a", 1]), "bad-enum", "/enum/1"),
        (string_schema(3, enum=["a", None]), "bad-enum", "/enum/1"),
        (string_schema(3, enum=["a", "b", "a"]), "enum-duplicate", "/enum"),
        (string_schema(3, enum=["abcd"]), "enum-outside-length", "/enum/0"),
        (string_schema(3, minLength=2, enum=["a"]), "enum-outside-length", "/enum/0"),
        (string_schema(3, enum=["\ud800"]), "bad-enum", "/enum/0"),
        ({**INT_0_10, "minimum": 0.5}, "bad-minimum", "/minimum"),
        ({**INT_0_10, "maximum": 10.0}, "bad-maximum", "/maximum"),
        ({**INT_0_10, "minimum": True}, "bad-minimum", "/minimum"),
        ({**NUM_0_10, "maximum": False}, "bad-maximum", "/maximum"),
        ({**NUM_0_10, "maximum": "10"}, "bad-maximum", "/maximum"),
        ({**NUM_0_10, "maximum": float("inf")}, "bad-maximum", "/maximum"),
        ({**NUM_0_10, "minimum": float("nan")}, "bad-minimum", "/minimum"),
        ({**INT_0_10, "maximum": MAX_SAFE_INTEGER + 1}, "bound-out-of-range", "/maximum"),
        ({**INT_0_10, "minimum": -MAX_SAFE_INTEGER - 1}, "bound-out-of-range", "/minimum"),
        ({**NUM_0_10, "maximum": 2.0**53}, "bound-out-of-range", "/maximum"),
        ({**INT_0_10, "minimum": 11}, "min-greater-than-max", "/minimum"),
        ({**NUM_0_10, "minimum": 10.5}, "min-greater-than-max", "/minimum"),
        ({"type": "array", "maxItems": 2, "minItems": 3, "items": INT_0_10}, "min-greater-than-max", "/minItems"),
        ({"type": "array", "maxItems": True, "items": INT_0_10}, "bad-maxItems", "/maxItems"),
        ({"type": "array", "maxItems": 2, "minItems": -1, "items": INT_0_10}, "bad-minItems", "/minItems"),
        ({"type": "array", "maxItems": 2, "uniqueItems": 1, "items": INT_0_10}, "bad-uniqueItems", "/uniqueItems"),
        ({"type": "array", "maxItems": 2, "items": [INT_0_10]}, "not-a-schema", "/items"),
        ({"type": "array", "maxItems": 2, "items": True}, "not-a-schema", "/items"),
        ({**object_schema({}), "additionalProperties": True}, "additionalProperties-not-false",
         "/additionalProperties"),
        ({**object_schema({}), "additionalProperties": {}}, "additionalProperties-not-false",
         "/additionalProperties"),
        ({**object_schema({}), "additionalProperties": 0}, "additionalProperties-not-false",
         "/additionalProperties"),
        ({**object_schema({}), "properties": [["a", INT_0_10]]}, "bad-properties", "/properties"),
        ({**object_schema({"a": INT_0_10}), "required": "a"}, "bad-required", "/required"),
        ({**object_schema({"a": INT_0_10}), "required": ["b"]}, "required-not-in-properties", "/required/0"),
        ({**object_schema({"a": INT_0_10}), "required": [1]}, "required-not-in-properties", "/required/0"),
        ({**object_schema({"a": INT_0_10}), "required": ["a", "a"]}, "required-duplicate", "/required/1"),
        (object_schema({"\udc00": INT_0_10}), "bad-properties", "/properties"),
        ({**string_schema(), "description": 3}, "bad-description", "/description"),
        ({**string_schema(), "description": "\ud800"}, "bad-description", "/description"),
        ({**string_schema(), "description": "d" * (MAX_DESCRIPTION_CHARS + 1)}, "description-too-long",
         "/description"),
        (True, "not-a-schema", ""),
        ([], "not-a-schema", ""),
    ],
    ids=[
        "type-array", "type-unknown", "type-wrong-case", "maxLength-bool", "maxLength-negative",
        "maxLength-float", "maxLength-string", "maxLength-huge", "minLength-over-max", "minLength-bool",
        "enum-empty", "enum-string", "enum-int-entry", "enum-null-entry", "enum-duplicate",
        "enum-longer-than-max", "enum-shorter-than-min", "enum-lone-surrogate", "integer-float-minimum",
        "integer-float-maximum", "minimum-bool", "maximum-bool", "maximum-string", "maximum-infinity",
        "minimum-nan", "maximum-over-2**53", "minimum-under-2**53", "number-float-over-2**53",
        "integer-min-over-max", "number-min-over-max", "minItems-over-max", "maxItems-bool",
        "minItems-negative", "uniqueItems-int", "items-tuple-form", "items-boolean-schema",
        "additionalProperties-true", "additionalProperties-schema", "additionalProperties-zero",
        "properties-list", "required-string", "required-unknown", "required-non-string",
        "required-duplicate", "property-name-lone-surrogate", "description-int", "description-surrogate",
        "description-too-long", "boolean-schema", "list-schema",
    ],
)
def test_malformed_keyword_value_refused(node: object, rule: str, at: str) -> None:
    assert _schema_refusal(_wrap(node)) == (rule, "/properties/x" + at)  # type: ignore[arg-type]


def test_description_at_length_limit_accepted() -> None:
    check_schema(_wrap({**string_schema(), "description": "😀" * MAX_DESCRIPTION_CHARS}))


# --- check_schema: limits at the edge and one over -----------------------------------

def test_depth_at_limit_accepted_and_one_over_refused() -> None:
    check_schema(nested_schema(MAX_DEPTH))
    pointer = "/properties/a" * MAX_DEPTH
    assert _schema_refusal(nested_schema(MAX_DEPTH + 1)) == ("too-deep", pointer)


def test_depth_counts_array_items_too() -> None:
    schema: dict[str, Any] = INT_0_10
    for _ in range(MAX_DEPTH - 2):
        schema = {"type": "array", "maxItems": 1, "items": schema}
    check_schema(_wrap(schema))
    assert _schema_refusal(_wrap({"type": "array", "maxItems": 1, "items": schema}))[0] == "too-deep"


def test_node_count_at_limit_accepted_and_one_over_refused() -> None:
    at_limit, over = schema_with_nodes(MAX_NODES), schema_with_nodes(MAX_NODES + 1)
    assert (count_nodes(at_limit), count_nodes(over)) == (MAX_NODES, MAX_NODES + 1)
    check_schema(at_limit)
    assert _schema_refusal(over)[0] == "too-many-nodes"


def test_properties_at_limit_accepted_and_one_over_refused() -> None:
    check_schema(object_schema({f"p{i}": {"type": "null"} for i in range(MAX_PROPERTIES)}))
    over = object_schema({f"p{i}": {"type": "null"} for i in range(MAX_PROPERTIES + 1)})
    assert _schema_refusal(over) == ("too-many-properties", "/properties")


def test_enum_at_limit_accepted_and_one_over_refused() -> None:
    check_schema(_wrap(string_schema(3, enum=[f"{i}" for i in range(MAX_ENUM)])))
    over = _wrap(string_schema(3, enum=[f"{i}" for i in range(MAX_ENUM + 1)]))
    assert _schema_refusal(over) == ("too-many-enum", "/properties/x/enum")


def test_max_items_at_limit_accepted_and_one_over_refused() -> None:
    check_schema(_wrap({"type": "array", "maxItems": MAX_ITEMS, "items": INT_0_10}))
    over = _wrap({"type": "array", "maxItems": MAX_ITEMS + 1, "items": INT_0_10})
    assert _schema_refusal(over) == ("too-many-items", "/properties/x/maxItems")


def test_self_referencing_schema_refused_not_looping() -> None:
    loop: dict[str, Any] = {"type": "array", "maxItems": 1}
    loop["items"] = loop
    assert _schema_refusal(loop, root_object=False)[0] == "too-deep"


def test_hostile_deep_schema_refused_without_recursion_error() -> None:
    schema: dict[str, Any] = {"type": "null"}
    for _ in range(50_000):
        schema = {"type": "array", "maxItems": 1, "items": schema}
    assert _schema_refusal(schema, root_object=False)[0] == "too-deep"


@pytest.mark.parametrize(
    "root",
    [string_schema(), DESIGN_EXAMPLE_OUTPUT, {"type": "null"}, INT_0_10],
    ids=["string", "array", "null", "integer"],
)
def test_input_root_must_be_object(root: dict[str, Any]) -> None:
    assert _schema_refusal(root) == ("root-not-object", "/type")
    check_schema(root, root_object=False)


# --- canonicalize: types -------------------------------------------------------------

@pytest.mark.parametrize(
    ("node", "value"),
    [
        (INT_0_10, True),
        (INT_0_10, False),
        (NUM_0_10, True),
        (NUM_0_10, False),
        (INT_0_10, 1.5),
        (INT_0_10, "1"),
        (NUM_0_10, "1"),
        (NUM_0_10, None),
        (string_schema(), 1),
        (string_schema(), b"bytes"),
        (string_schema(), ["a"]),
        ({"type": "boolean"}, 1),
        ({"type": "boolean"}, "true"),
        ({"type": "null"}, 0),
        ({"type": "null"}, ""),
        ({"type": "array", "maxItems": 3, "items": INT_0_10}, {"0": 1}),
        ({"type": "array", "maxItems": 3, "items": INT_0_10}, {1, 2}),
        (object_schema({}), []),
    ],
    ids=[
        "true-as-integer", "false-as-integer", "true-as-number", "false-as-number", "fraction-as-integer",
        "string-as-integer", "string-as-number", "null-as-number", "int-as-string", "bytes-as-string",
        "list-as-string", "int-as-boolean", "string-as-boolean", "zero-as-null", "empty-as-null",
        "object-as-array", "set-as-array", "array-as-object",
    ],
)
def test_type_confusion_refused(node: dict[str, Any], value: object) -> None:
    assert _input_refusal(_wrap(node), {"x": value}) == ("type", "/x")


@pytest.mark.parametrize(
    ("node", "value", "canonical"),
    [
        (INT_0_10, 1.0, b"1"),
        (INT_0_10, 10, b"10"),
        (INT_0_10, 0, b"0"),
        (INT_0_10, -0.0, b"0"),
        (NUM_0_10, 2.5, b"2.5"),
        (NUM_0_10, 10.0, b"10"),
        ({"type": "boolean"}, False, b"false"),
        ({"type": "null"}, None, b"null"),
        ({"type": "array", "maxItems": 2, "items": INT_0_10}, (1, 2), b"[1,2]"),
    ],
    ids=["integral-float", "max", "min", "negative-zero", "fraction", "float-max", "false", "null", "tuple"],
)
def test_value_accepted_in_canonical_form(node: dict[str, Any], value: object, canonical: bytes) -> None:
    assert canonicalize(_wrap(node), {"x": value}) == b'{"x":' + canonical + b"}"


@pytest.mark.parametrize(
    ("node", "value", "rule"),
    [
        (INT_0_10, -1, "minimum"),
        (INT_0_10, 11, "maximum"),
        (NUM_0_10, -0.0001, "minimum"),
        (NUM_0_10, 10.0000001, "maximum"),
        (NUM_0_10, float("nan"), "not-finite"),
        (NUM_0_10, float("inf"), "not-finite"),
        ({"type": "integer", "minimum": -MAX_SAFE_INTEGER, "maximum": MAX_SAFE_INTEGER}, 2**53, "maximum"),
        ({"type": "integer", "minimum": -MAX_SAFE_INTEGER, "maximum": MAX_SAFE_INTEGER}, -(10**400), "minimum"),
        ({"type": "number", "minimum": -MAX_SAFE_INTEGER, "maximum": MAX_SAFE_INTEGER}, 1e300, "maximum"),
    ],
    ids=["below-min", "above-max", "float-below", "float-above", "nan", "infinity", "int-2**53",
         "int-huge-negative", "float-huge"],
)
def test_number_outside_bounds_refused(node: dict[str, Any], value: object, rule: str) -> None:
    assert _input_refusal(_wrap(node), {"x": value}) == (rule, "/x")


# --- canonicalize: strings count code points ------------------------------------------

@pytest.mark.parametrize(
    ("text", "accepted"),
    [
        ("😀😀😀", True),  # 3 code points, 6 UTF-16 units, 12 UTF-8 bytes
        ("😀😀😀😀", False),
        ("e\u0301e\u0301", False),  # 2 graphemes, 4 code points
        ("ééé", True),
        ("\U0010ffff" * 3, True),
    ],
    ids=["astral-at-max", "astral-over-max", "combining-marks-counted", "latin1-at-max", "max-code-point"],
)
def test_string_length_counts_code_points(text: str, accepted: bool) -> None:
    schema = _wrap(string_schema(3, minLength=3))
    if accepted:
        assert canonicalize(schema, {"x": text}) == ('{"x":"' + text + '"}').encode()
    else:
        assert _input_refusal(schema, {"x": text})[0] == "maxLength"


def test_string_under_min_length_refused() -> None:
    assert _input_refusal(_wrap(string_schema(3, minLength=2)), {"x": "😀"}) == ("minLength", "/x")


def test_string_with_lone_surrogate_refused() -> None:
    assert _input_refusal(_wrap(string_schema()), {"x": "a\ud800"}) == ("lone-surrogate", "/x")


def test_enum_outside_refused_without_echoing_the_value() -> None:
    schema = _wrap(string_schema(16, enum=["read", "write"]))
    assert canonicalize(schema, {"x": "read"}) == b'{"x":"read"}'
    with pytest.raises(InputInvalid) as exc_info:
        canonicalize(schema, {"x": "sk-secret-1234"})
    assert exc_info.value.details["rule"] == "enum"
    assert "sk-secret" not in str(exc_info.value)


# --- canonicalize: arrays -------------------------------------------------------------

ARRAY_2_4 = {"type": "array", "minItems": 2, "maxItems": 4, "items": INT_0_10}
UNIQUE = {"type": "array", "maxItems": 4, "uniqueItems": True}


@pytest.mark.parametrize(
    ("value", "outcome"),
    [([1, 2], None), ([1, 2, 3, 4], None), ([1], "minItems"), ([1, 2, 3, 4, 5], "maxItems")],
    ids=["at-min", "at-max", "under-min", "over-max"],
)
def test_array_length_bounds(value: list[int], outcome: str | None) -> None:
    if outcome is None:
        canonicalize(_wrap(ARRAY_2_4), {"x": value})
    else:
        assert _input_refusal(_wrap(ARRAY_2_4), {"x": value}) == (outcome, "/x")


def test_array_item_error_points_at_item() -> None:
    assert _input_refusal(_wrap(ARRAY_2_4), {"x": [1, 2, True]}) == ("type", "/x/2")


def test_max_items_at_limit_accepted_and_over_refused_at_runtime() -> None:
    schema = _wrap({"type": "array", "maxItems": MAX_ITEMS, "items": {"type": "null"}})
    canonicalize(schema, {"x": [None] * MAX_ITEMS})
    assert _input_refusal(schema, {"x": [None] * (MAX_ITEMS + 1)}) == ("maxItems", "/x")


@pytest.mark.parametrize(
    ("items", "value", "duplicate_at"),
    [
        (INT_0_10, [1, 1.0], "/x/1"),
        (INT_0_10, [0, -0.0], "/x/1"),
        (NUM_0_10, [2.5, 1, 2.50], "/x/2"),
        (string_schema(), ["a", "b", "a"], "/x/2"),
        (object_schema({"a": INT_0_10, "b": INT_0_10}), [{"a": 1, "b": 2}, {"b": 2, "a": 1}], "/x/1"),
        (object_schema({"a": INT_0_10, "b": INT_0_10}), [{"a": 1, "b": 2}, {"b": 2.0, "a": 1}], "/x/1"),
        ({"type": "array", "maxItems": 2, "items": INT_0_10}, [[1, 2], [1.0, 2]], "/x/1"),
    ],
    ids=["int-and-float", "zero-and-negative-zero", "float-respelled", "strings", "object-key-order",
         "object-respelled-number", "nested-array"],
)
def test_unique_items_compares_canonical_forms(items: dict[str, Any], value: list[Any], duplicate_at: str) -> None:
    assert _input_refusal(_wrap({**UNIQUE, "items": items}), {"x": value}) == ("uniqueItems", duplicate_at)


@pytest.mark.parametrize(
    ("items", "value"),
    [
        ({"type": "array", "maxItems": 2, "items": INT_0_10}, [[1, 2], [2, 1]]),
        ({"type": "boolean"}, [True, False]),
        (string_schema(), ["a", "A", "a "]),
    ],
    ids=["array-order-matters", "booleans", "case-and-space"],
)
def test_unique_items_distinct_values_accepted(items: dict[str, Any], value: list[Any]) -> None:
    assert json.loads(canonicalize(_wrap({**UNIQUE, "items": items}), {"x": value})) == {"x": value}
    repeated = value + value[:1]
    assert json.loads(canonicalize(_wrap({**UNIQUE, "uniqueItems": False, "items": items}), {"x": repeated})) == {
        "x": repeated
    }


# --- canonicalize: objects ------------------------------------------------------------

PERSON = object_schema({"name": string_schema(), "age": INT_0_10, "tags": {
    "type": "array", "maxItems": 2, "items": object_schema({"k": string_schema()})}}, ["name"])


@pytest.mark.parametrize(
    ("value", "rule", "pointer"),
    [
        ({"name": "a", "extra": 1}, "additionalProperties", "/extra"),
        ({"name": "a", "__proto__": {}}, "additionalProperties", "/__proto__"),
        ({"name": "a", "tags": [{"k": "v", "z": 1}]}, "additionalProperties", "/tags/0/z"),
        ({"age": 3}, "required", ""),
        ({"name": "a", "tags": [{}]}, "required", "/tags/0"),
        ({"name": "a", "age": None}, "type", "/age"),
        ({"name": "a", 1: "x"}, "additionalProperties", "/1"),
        ({"name": "a", "a/b~": 1}, "additionalProperties", "/a~1b~0"),
    ],
    ids=["unknown-field", "proto-field", "nested-unknown-field", "required-missing", "nested-required-missing",
         "null-for-optional", "non-string-key", "pointer-escaped"],
)
def test_object_rules_refused_with_pointer(value: dict[Any, Any], rule: str, pointer: str) -> None:
    assert _input_refusal(PERSON, value) == (rule, pointer)


def test_object_optional_property_may_be_absent_and_output_is_sorted() -> None:
    assert canonicalize(PERSON, {"tags": [{"k": "v"}], "name": "n"}) == b'{"name":"n","tags":[{"k":"v"}]}'


def test_hostile_deep_value_refused_at_schema_depth_without_recursion_error() -> None:
    deep: list[Any] = []
    for _ in range(200_000):
        deep = [deep]
    schema = _wrap({"type": "array", "maxItems": 1, "items": INT_0_10})
    assert _input_refusal(schema, {"x": deep}) == ("type", "/x/0")
    assert _input_refusal(None, deep) == ("null-only", "")


# --- canonicalize: tools without output_schema ------------------------------------------

def test_no_output_schema_accepts_only_null() -> None:
    assert canonicalize(None, None) == b"null"
    validate(None, None)


@pytest.mark.parametrize("value", [{}, [], 0, False, "", "null"], ids=["object", "array", "zero", "false", "empty", "null-string"])
def test_no_output_schema_refuses_anything_but_null(value: object) -> None:
    assert _input_refusal(None, value) == ("null-only", "")


# --- canonicalize: byte budgets -------------------------------------------------------

BIG_STRING = _wrap(string_schema(1_000_000))


def test_default_input_budget_at_edge_accepted_and_one_over_refused() -> None:
    overhead = len(b'{"x":""}')
    assert len(canonicalize(BIG_STRING, {"x": "a" * (DEFAULT_MAX_BYTES - overhead)})) == DEFAULT_MAX_BYTES
    with pytest.raises(InputInvalid) as exc_info:
        canonicalize(BIG_STRING, {"x": "a" * (DEFAULT_MAX_BYTES - overhead + 1)})
    assert exc_info.value.details == {
        "pointer": "", "rule": "too-large", "size": DEFAULT_MAX_BYTES + 1, "limit": DEFAULT_MAX_BYTES,
    }


def test_output_budget_is_explicit() -> None:
    out = {"type": "array", "maxItems": 4, "items": string_schema(100_000)}
    value = ["b" * 65_533] * 4  # 4 * (65533 + 2) + 3 commas + 2 brackets = 262145 bytes
    assert _input_refusal(out, value, max_bytes=256 * 1024) == ("too-large", "")
    value[0] = value[0][:-1]
    assert len(canonicalize(out, value, max_bytes=256 * 1024)) == 256 * 1024


@pytest.mark.parametrize(
    ("char", "canonical_size"),
    [("é", 2), ("😀", 4), ("\u0001", 6), ('"', 2), ("\n", 2)],
    ids=["two-byte-utf8", "four-byte-utf8", "control-escape", "quote-escape", "newline-escape"],
)
def test_budget_counts_canonical_bytes_not_characters(char: str, canonical_size: int) -> None:
    overhead = len(b'{"x":""}')
    count = 100
    budget = overhead + canonical_size * count
    assert len(canonicalize(BIG_STRING, {"x": char * count}, max_bytes=budget)) == budget
    assert _input_refusal(BIG_STRING, {"x": char * count}, max_bytes=budget - 1)[0] == "too-large"


def test_refusal_leaves_value_untouched() -> None:
    value = {"name": "a", "extra": [1, 2]}
    before = copy.deepcopy(value)
    _input_refusal(PERSON, value)
    assert value == before
