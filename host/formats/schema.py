"""The bounded JSON Schema subset of tool inputs and outputs (docs/design.md §5).

A tool's ``input_schema`` and ``output_schema`` are checked once, when the manifest
loads (:func:`check_schema`), and every value crossing the sandbox boundary is validated
and canonicalized against them (:func:`canonicalize`). No general JSON Schema engine
runs at call time: the subset is small enough to check exactly, and everything outside
it is refused rather than ignored, so a keyword the host does not enforce can never look
like a constraint.

The subset (a schema node is a JSON object with a single string ``type``):

============  ===========================================  ==========================
``type``      required keywords                            optional keywords
============  ===========================================  ==========================
``null``      –                                            –
``boolean``   –                                            –
``string``    ``maxLength``                                ``minLength``, ``enum``
``number``    ``minimum``, ``maximum``                     –
``integer``   ``minimum``, ``maximum``                     –
``array``     ``maxItems``, ``items`` (one schema)         ``minItems``, ``uniqueItems``
``object``    ``additionalProperties: false``,             –
              ``properties``, ``required``
============  ===========================================  ==========================

``description`` (a string of at most :data:`MAX_DESCRIPTION_CHARS` code points) is
allowed on every node and kept for the model. Everything else — ``$ref``, ``oneOf``,
``anyOf``, ``allOf``, ``not``, ``pattern``, ``format``, ``default``, ``const``,
``$schema``, type arrays, unknown keywords — is refused with rule
``keyword-not-allowed``.

Limits (module constants): depth ≤ :data:`MAX_DEPTH` schema nodes from the root (the
root is depth 1), ≤ :data:`MAX_NODES` nodes, ≤ :data:`MAX_PROPERTIES` properties per
object, ≤ :data:`MAX_ENUM` enum strings, ``maxItems`` ≤ :data:`MAX_ITEMS`. Length and
item bounds are non-negative ``int`` (``bool`` is not an ``int`` here), ``minimum`` and
``maximum`` lie within ±(2**53 − 1) (``int`` for ``integer``; ``int`` or finite
``float`` for ``number``), and every ``min`` ≤ its ``max``. Enum strings are unique and
satisfy the node's length bounds (a dead enum entry is an authoring error).

Validation follows JSON Schema Draft 2020-12 on the subset (a differential test holds
it to ``jsonschema``): ``bool`` is never a number; ``integer`` accepts an ``int`` or a
``float`` with an integral value (``1.0``, as Draft 2020-12 does; it canonicalizes to
``1``); string lengths count code points; ``uniqueItems`` compares canonical forms, so
``1`` and ``1.0`` are equal, ``true`` and ``1`` are not; a ``tuple`` counts as an array
(as in :mod:`host.canonical`). Deliberate differences, all refusals: strings holding
lone surrogates, non-finite floats and values whose canonical form exceeds the byte
budget (``rule="too-large"``). With ``schema=None`` (a tool without ``output_schema``)
only ``null`` is accepted.

Example::

    schema = {"type": "object", "additionalProperties": False,
              "properties": {"repo": {"type": "string", "maxLength": 200}},
              "required": ["repo"]}
    check_schema(schema)                       # raises SchemaInvalid if outside §5
    canonicalize(schema, {"repo": "x"})        # b'{"repo":"x"}'
    canonicalize(schema, {"repo": 1})          # InputInvalid, pointer "/repo", rule "type"
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeAlias, cast

from host.canonical import MAX_SAFE_INTEGER, canonical_json, json_pointer
from host.errors import InputInvalid, SchemaInvalid

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAX_DEPTH",
    "MAX_DESCRIPTION_CHARS",
    "MAX_ENUM",
    "MAX_ITEMS",
    "MAX_NODES",
    "MAX_PROPERTIES",
    "canonicalize",
    "check_schema",
    "validate",
]

MAX_DEPTH: Final = 8
"""Most nested schema nodes; the root is depth 1 (docs/design.md §5)."""
MAX_NODES: Final = 256
"""Most schema nodes in one schema, root included (docs/design.md §5)."""
MAX_PROPERTIES: Final = 64
"""Most properties of one object node (docs/design.md §5)."""
MAX_ENUM: Final = 64
"""Most strings in one ``enum`` (docs/design.md §5)."""
MAX_ITEMS: Final = 256
"""Largest ``maxItems`` (docs/design.md §5: array items ≤ 256)."""
MAX_DESCRIPTION_CHARS: Final = 4096
"""Longest ``description``, in code points: descriptions go to the model's context."""
DEFAULT_MAX_BYTES: Final = 64 * 1024
"""Canonical input budget in bytes (docs/design.md §5); outputs pass 256 KiB explicitly."""

_COMMON: Final = frozenset({"type", "description"})
_ALLOWED: Final[Mapping[str, frozenset[str]]] = {
    "null": _COMMON,
    "boolean": _COMMON,
    "string": _COMMON | {"maxLength", "minLength", "enum"},
    "number": _COMMON | {"minimum", "maximum"},
    "integer": _COMMON | {"minimum", "maximum"},
    "array": _COMMON | {"maxItems", "minItems", "uniqueItems", "items"},
    "object": _COMMON | {"additionalProperties", "properties", "required"},
}
_REQUIRED: Final[Mapping[str, tuple[str, ...]]] = {
    "string": ("maxLength",),
    "number": ("minimum", "maximum"),
    "integer": ("minimum", "maximum"),
    "array": ("maxItems", "items"),
    "object": ("additionalProperties", "properties", "required"),
}

_Tokens: TypeAlias = "tuple[str | int, ...]"


_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _has_surrogate(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def _schema_error(message: str, path: _Tokens, rule: str) -> SchemaInvalid:
    pointer = json_pointer(path)
    return SchemaInvalid(f"{message} (at {pointer or 'the root'!r})", pointer=pointer, rule=rule)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _SchemaChecker:
    """One pass over one schema; counts nodes across the whole tree."""

    def __init__(self) -> None:
        self.nodes = 0

    def node(self, node: object, path: _Tokens, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise _schema_error(f"schema nested deeper than {MAX_DEPTH}", path, "too-deep")
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _schema_error(f"schema has more than {MAX_NODES} nodes", path, "too-many-nodes")
        if not isinstance(node, Mapping):
            raise _schema_error("a schema must be a JSON object", path, "not-a-schema")
        kind = _node_type(node, path)
        for key in node:
            if key not in _ALLOWED[kind]:
                allowed = ", ".join(sorted(_ALLOWED[kind]))
                raise _schema_error(
                    f"keyword {str(key)[:64]!r} is not allowed on type {kind!r} (allowed: {allowed})",
                    (*path, str(key)), "keyword-not-allowed",
                )
        for key in _REQUIRED.get(kind, ()):
            if key not in node:
                raise _schema_error(f"type {kind!r} needs an explicit {key!r}", path, f"missing-{key}")
        _check_description(node, path)
        if kind == "string":
            _check_string(node, path)
        elif kind in ("number", "integer"):
            _check_number(node, path, integral=kind == "integer")
        elif kind == "array":
            _check_count(node, path, "maxItems", MAX_ITEMS)
            _check_min(node, path, "minItems", "maxItems")
            if "uniqueItems" in node and not isinstance(node["uniqueItems"], bool):
                raise _schema_error("'uniqueItems' must be true or false", (*path, "uniqueItems"),
                                    "bad-uniqueItems")
            self.node(node["items"], (*path, "items"), depth + 1)
        elif kind == "object":
            self.object(node, path, depth)

    def object(self, node: Mapping[str, Any], path: _Tokens, depth: int) -> None:
        if node["additionalProperties"] is not False:
            raise _schema_error("'additionalProperties' must be false", (*path, "additionalProperties"),
                                "additionalProperties-not-false")
        properties = node["properties"]
        if not isinstance(properties, Mapping):
            raise _schema_error("'properties' must be an object", (*path, "properties"), "bad-properties")
        if len(properties) > MAX_PROPERTIES:
            raise _schema_error(f"more than {MAX_PROPERTIES} properties", (*path, "properties"),
                                "too-many-properties")
        for name in properties:
            if not isinstance(name, str) or _has_surrogate(name):
                raise _schema_error("property names must be valid strings", (*path, "properties"),
                                    "bad-properties")
        _check_required(node["required"], properties, (*path, "required"))
        for name, child in properties.items():
            self.node(child, (*path, "properties", name), depth + 1)


def _node_type(node: Mapping[Any, Any], path: _Tokens) -> str:
    if "type" not in node:
        raise _schema_error("every schema node needs a 'type'", path, "missing-type")
    kind = node["type"]
    if not isinstance(kind, str):
        raise _schema_error("'type' must be a single string", (*path, "type"), "bad-type")
    if kind not in _ALLOWED:
        allowed = ", ".join(sorted(_ALLOWED))
        raise _schema_error(f"type {kind[:32]!r} is not one of {allowed}", (*path, "type"), "bad-type")
    return kind


def _check_description(node: Mapping[str, Any], path: _Tokens) -> None:
    if "description" not in node:
        return
    text = node["description"]
    where = (*path, "description")
    if not isinstance(text, str) or _has_surrogate(text):
        raise _schema_error("'description' must be a valid string", where, "bad-description")
    if len(text) > MAX_DESCRIPTION_CHARS:
        raise _schema_error(f"'description' longer than {MAX_DESCRIPTION_CHARS} characters", where,
                            "description-too-long")


def _check_count(node: Mapping[str, Any], path: _Tokens, key: str, cap: int) -> None:
    """A length/items bound: an int (never a bool) in 0..cap."""
    value = node[key]
    if not _is_int(value) or value < 0:
        raise _schema_error(f"{key!r} must be a non-negative integer", (*path, key), f"bad-{key}")
    if value > cap:
        rule = "too-many-items" if key == "maxItems" else "bound-out-of-range"
        raise _schema_error(f"{key!r} must be at most {cap}", (*path, key), rule)


def _check_min(node: Mapping[str, Any], path: _Tokens, low: str, high: str) -> None:
    if low not in node:
        return
    _check_count(node, path, low, MAX_SAFE_INTEGER)
    if node[low] > node[high]:
        raise _schema_error(f"{low!r} exceeds {high!r}", (*path, low), "min-greater-than-max")


def _check_string(node: Mapping[str, Any], path: _Tokens) -> None:
    _check_count(node, path, "maxLength", MAX_SAFE_INTEGER)
    _check_min(node, path, "minLength", "maxLength")
    if "enum" not in node:
        return
    enum, where = node["enum"], (*path, "enum")
    if isinstance(enum, (str, bytes)) or not isinstance(enum, Sequence):
        raise _schema_error("'enum' must be an array of strings", where, "bad-enum")
    if not enum:
        raise _schema_error("'enum' must not be empty", where, "bad-enum")
    if len(enum) > MAX_ENUM:
        raise _schema_error(f"'enum' has more than {MAX_ENUM} entries", where, "too-many-enum")
    low, high = node.get("minLength", 0), node["maxLength"]
    for index, entry in enumerate(enum):
        if not isinstance(entry, str) or _has_surrogate(entry):
            raise _schema_error("'enum' entries must be valid strings", (*where, index), "bad-enum")
        if not low <= len(entry) <= high:
            raise _schema_error("'enum' entry outside minLength..maxLength", (*where, index),
                                "enum-outside-length")
    if len(set(enum)) != len(enum):
        raise _schema_error("'enum' entries must be unique", where, "enum-duplicate")


def _check_number(node: Mapping[str, Any], path: _Tokens, *, integral: bool) -> None:
    for key in ("minimum", "maximum"):
        value = node[key]
        ok = _is_int(value) or (not integral and isinstance(value, float) and math.isfinite(value))
        if not ok:
            kind = "an integer" if integral else "a finite number"
            raise _schema_error(f"{key!r} must be {kind}", (*path, key), f"bad-{key}")
        if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            raise _schema_error(f"{key!r} must lie within ±(2**53 - 1)", (*path, key), "bound-out-of-range")
    if node["minimum"] > node["maximum"]:
        raise _schema_error("'minimum' exceeds 'maximum'", (*path, "minimum"), "min-greater-than-max")


def _check_required(required: object, properties: Mapping[str, Any], path: _Tokens) -> None:
    if isinstance(required, (str, bytes)) or not isinstance(required, Sequence):
        raise _schema_error("'required' must be an array of property names", path, "bad-required")
    seen: set[str] = set()
    for index, name in enumerate(required):
        if not isinstance(name, str) or name not in properties:
            raise _schema_error("'required' names a property not in 'properties'", (*path, index),
                                "required-not-in-properties")
        if name in seen:
            raise _schema_error("'required' names a property twice", (*path, index), "required-duplicate")
        seen.add(name)


def check_schema(schema: object, *, root_object: bool = True) -> None:
    """Refuse a schema outside the bounded subset of docs/design.md §5.

    Args:
        schema: the schema, as parsed JSON (mappings and sequences).
        root_object: require the root to be ``type: object`` (tool inputs); pass
            ``False`` for an ``output_schema``.

    Raises:
        SchemaInvalid: ``details["pointer"]`` is the JSON pointer of the schema node or
            keyword at fault, ``details["rule"]`` the rule broken (for example
            ``missing-maxLength``, ``keyword-not-allowed``, ``too-deep``).
    """
    kind = schema.get("type") if isinstance(schema, Mapping) else None
    if root_object and isinstance(kind, str) and kind != "object":
        raise _schema_error("the input schema's root must be of type 'object'", ("type",), "root-not-object")
    _SchemaChecker().node(schema, (), 1)


# --- validation -----------------------------------------------------------------------

# A value path is a linked list (parent, token): no copying per node on the hot path.
_Path: TypeAlias = "tuple[_Path, str | int] | None"


def _value_error(message: str, path: _Path, rule: str) -> InputInvalid:
    tokens: list[str | int] = []
    while path is not None:
        path, token = path
        tokens.append(token)
    pointer = json_pointer(reversed(tokens))
    return InputInvalid(f"{message} (at {pointer or 'the root'!r})", pointer=pointer, rule=rule)


def _type_error(expected: str, value: object, path: _Path) -> InputInvalid:
    return _value_error(f"expected {expected}, got {_json_type(value)}", path, "type")


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    return "object" if isinstance(value, dict) else type(value).__name__


def _validate_null(schema: Mapping[str, Any], value: object, path: _Path) -> None:
    if value is not None:
        raise _type_error("null", value, path)


def _validate_boolean(schema: Mapping[str, Any], value: object, path: _Path) -> None:
    if not isinstance(value, bool):
        raise _type_error("boolean", value, path)


def _validate_string(schema: Mapping[str, Any], value: object, path: _Path) -> None:
    if not isinstance(value, str):
        raise _type_error("string", value, path)
    if _has_surrogate(value):
        raise _value_error("string holds a lone surrogate", path, "lone-surrogate")
    length = len(value)  # code points, as JSON Schema counts
    if length > schema["maxLength"]:
        raise _value_error(f"string longer than {schema['maxLength']} characters", path, "maxLength")
    if length < schema.get("minLength", 0):
        raise _value_error(f"string shorter than {schema['minLength']} characters", path, "minLength")
    enum = schema.get("enum")
    if enum is not None and value not in enum:
        raise _value_error("string is not one of the allowed values", path, "enum")


def _validate_number(schema: Mapping[str, Any], value: object, path: _Path) -> None:
    if schema["type"] == "integer":
        if not (_is_int(value) or (isinstance(value, float) and value.is_integer())):
            raise _type_error("integer", value, path)
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _type_error("number", value, path)
    if isinstance(value, float) and not math.isfinite(value):
        raise _value_error("NaN and Infinity are not JSON numbers", path, "not-finite")
    number = cast(float, value)  # an int or a finite float after the checks above
    if number < schema["minimum"]:
        raise _value_error(f"number below the minimum {schema['minimum']}", path, "minimum")
    if number > schema["maximum"]:
        raise _value_error(f"number above the maximum {schema['maximum']}", path, "maximum")


def _validate_array(schema: Mapping[str, Any], value: object, path: _Path) -> None:
    if not isinstance(value, (list, tuple)):
        raise _type_error("array", value, path)
    if len(value) > schema["maxItems"]:
        raise _value_error(f"array longer than {schema['maxItems']} items", path, "maxItems")
    if len(value) < schema.get("minItems", 0):
        raise _value_error(f"array shorter than {schema['minItems']} items", path, "minItems")
    items = schema["items"]
    for index, item in enumerate(value):
        _validate(items, item, (path, index))
    if schema.get("uniqueItems") is True:
        seen: set[bytes] = set()
        for index, item in enumerate(value):
            form = canonical_json(item)  # 1 and 1.0 share a form; true and 1 do not
            if form in seen:
                raise _value_error("array items are not unique", (path, index), "uniqueItems")
            seen.add(form)


def _validate_object(schema: Mapping[str, Any], value: object, path: _Path) -> None:
    if not isinstance(value, dict):
        raise _type_error("object", value, path)
    properties: Mapping[str, Any] = schema["properties"]
    for key in value:
        if key not in properties:
            raise _value_error("property not in the schema", (path, str(key)), "additionalProperties")
    for name in schema["required"]:
        if name not in value:
            raise _value_error(f"required property {name!r} is missing", path, "required")
    for key, item in value.items():
        _validate(properties[key], item, (path, key))


_VALIDATORS: Final[Mapping[str, Callable[[Mapping[str, Any], object, _Path], None]]] = {
    "null": _validate_null,
    "boolean": _validate_boolean,
    "string": _validate_string,
    "number": _validate_number,
    "integer": _validate_number,
    "array": _validate_array,
    "object": _validate_object,
}


def _validate(schema: Mapping[str, Any], value: object, path: _Path) -> None:
    # Recursion follows the *schema* (depth ≤ MAX_DEPTH), never the value: a hostile,
    # deeply nested value is refused at the first node the schema does not allow.
    _VALIDATORS[schema["type"]](schema, value, path)


def validate(schema: Mapping[str, Any] | None, value: object) -> None:
    """Check ``value`` against a schema that passed :func:`check_schema`.

    Args:
        schema: the checked schema, or ``None`` for "no output_schema" (only ``null``).
        value: the parsed JSON value.

    Raises:
        InputInvalid: ``details["pointer"]`` locates the offending value and
            ``details["rule"]`` names the keyword it breaks (``type``, ``maxLength``,
            ``enum``, ``minimum``, ``uniqueItems``, ``additionalProperties``,
            ``required``, ``not-finite``, ``lone-surrogate``, …). The message never
            quotes the value (it may be sensitive).
    """
    if schema is None:
        if value is not None:
            raise _value_error("a tool without output_schema may only return null", None, "null-only")
        return
    _validate(schema, value, None)


def canonicalize(
    schema: Mapping[str, Any] | None, value: object, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> bytes:
    """Validate ``value`` and return its canonical JSON within a byte budget.

    Args:
        schema: a schema that passed :func:`check_schema`, or ``None`` (only ``null``).
        value: the parsed JSON value.
        max_bytes: the budget for the canonical bytes (docs/design.md §5: 64 KiB for input,
            256 KiB for output).

    Raises:
        InputInvalid: as :func:`validate`, as :func:`~host.canonical.canonical_json`,
            or with ``rule="too-large"`` when the canonical form exceeds ``max_bytes``.

    Returns:
        The RFC 8785 canonical bytes of ``value``.
    """
    validate(schema, value)
    data = canonical_json(value)
    if len(data) > max_bytes:
        raise InputInvalid(
            f"canonical JSON of {len(data)} bytes exceeds the budget of {max_bytes} bytes",
            pointer="", rule="too-large", size=len(data), limit=max_bytes,
        )
    return data
