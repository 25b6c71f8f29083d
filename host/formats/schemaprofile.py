"""The external schema profile of pinned MCP tools, ``stockade.schema-profile/external-1``.

Stockade packages keep the bounded subset of :mod:`host.formats.schema` (docs/design.md §5): their
authors control their schemas. A third party's MCP server does not adapt to Stockade, and
the host cannot rewrite its schemas without changing what the server accepts, so a pinned
MCP tool is checked against a second, explicit profile instead:

- **Accepted**: the JSON Schema the MCP spec allows, Draft 2020-12 (the default when
  ``$schema`` is absent) or Draft 7 (as zod-to-json-schema emits it), chosen by
  ``$schema``; any other dialect is refused. Keywords in :data:`ANNOTATIONS` (``title``,
  ``default``, ``examples``, ``format`` …) are kept and never applied: ``default`` never
  fills input and ``format`` is an annotation, as 2020-12 says. Open objects, unbounded
  strings and numbers are accepted — :func:`unbounded` lists them for the reviewer.
- **Refused at pin** (``SchemaInvalid`` with a ``rule``): a keyword outside
  :data:`KEYWORDS` (a keyword the validator would ignore must never look like a
  constraint), a ``$ref`` that is not a local JSON pointer (nothing is ever fetched),
  ``$id``/``$dynamicRef``, a pattern RE2 cannot compile (backreferences, lookaround), a
  schema over :data:`MAX_SCHEMA_BYTES`, :data:`MAX_DEPTH`, :data:`MAX_NODES`, an
  ``enum`` over :data:`MAX_ENUM`, a ``$ref`` expansion over :data:`MAX_EXPANDED_NODES`
  (the exponential "billion laughs" schema), and a recursion through ``$ref`` that does
  not descend into the instance (``{"$defs": {"a": {"$ref": "#/$defs/a"}}}``: validation
  would not be bounded by the input's size).
- **At call time** (:func:`canonicalize_external`): the canonical form first (RFC 8785,
  numbers within ±(2^53−1), the byte budget, depth ≤ 64), then ``jsonschema``'s
  validator of the dialect, whose ``pattern`` and ``patternProperties`` run on RE2
  (linear time; never a backtracking regex on untrusted input), without a format
  checker and without a retriever (no network, no filesystem), and with every keyword
  evaluation counted against :data:`MAX_VALIDATION_STEPS`.

Example::

    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
              "properties": {"message": {"type": "string"}}, "required": ["message"]}
    check_external(schema)                               # raises SchemaInvalid
    canonicalize_external(schema, {"message": "hi"})     # b'{"message":"hi"}'
    unbounded(schema)    # ['(root): open object ...', '/properties/message: string without maxLength']
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

import re2
from jsonschema import Draft7Validator, Draft202012Validator, ValidationError, validators
from jsonschema.protocols import Validator
from referencing import Registry
from referencing.exceptions import NoSuchResource, Unresolvable

from host.canonical import canonical_json, json_pointer
from host.errors import InputInvalid, SchemaInvalid

__all__ = [
    "ANNOTATIONS",
    "KEYWORDS",
    "MAX_DEPTH",
    "MAX_ENUM",
    "MAX_EXPANDED_NODES",
    "MAX_NODES",
    "MAX_SCHEMA_BYTES",
    "MAX_VALIDATION_STEPS",
    "PROFILE_BOUNDED",
    "PROFILE_EXTERNAL",
    "canonicalize_external",
    "check_external",
    "unbounded",
]

PROFILE_BOUNDED: Final = "stockade.schema-profile/bounded-1"
"""The bounded subset of :mod:`host.formats.schema` (docs/design.md §5), for Stockade packages."""
PROFILE_EXTERNAL: Final = "stockade.schema-profile/external-1"
"""This module's profile, for pinned MCP tools."""

MAX_SCHEMA_BYTES: Final = 256 * 1024  # bytes of one schema's canonical JSON
MAX_DEPTH: Final = 24  # nested schema nodes from the root (the root is depth 1)
MAX_NODES: Final = 4096  # schema nodes in one schema, as written
MAX_EXPANDED_NODES: Final = 20_000  # schema nodes with every $ref expanded (recursion cut once)
MAX_ENUM: Final = 1024  # values of one enum
MAX_PATTERN_CHARS: Final = 1024  # characters of one pattern
MAX_VALIDATION_STEPS: Final = 50_000  # keyword evaluations of one validation (about 0.2 s)

_DRAFT7_URIS: Final = frozenset(
    {"http://json-schema.org/draft-07/schema#", "http://json-schema.org/draft-07/schema"}
)
_DRAFT2020_URIS: Final = frozenset(
    {
        "https://json-schema.org/draft/2020-12/schema",
        "https://json-schema.org/draft/2020-12/schema#",
    }
)

ANNOTATIONS: Final = frozenset(
    {
        "$schema",
        "title",
        "description",
        "examples",
        "default",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$comment",
        "format",
        "contentMediaType",
        "contentEncoding",
    }
)
"""Keywords kept as annotations and never applied to input."""

_SUB: Final = frozenset(
    {
        "additionalProperties",
        "propertyNames",
        "contains",
        "not",
        "if",
        "then",
        "else",
        "additionalItems",
        "items",
    }
)  # value is one schema (items: or an array, Draft 7)
_SUB_MAP: Final = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
)  # values are schemas (dependencies: or string arrays)
_SUB_LIST: Final = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
_VALUES: Final = frozenset(
    {
        "type",
        "enum",
        "const",
        "required",
        "minLength",
        "maxLength",
        "pattern",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minProperties",
        "maxProperties",
        "dependentRequired",
        "minContains",
        "maxContains",
        "$ref",
        "$anchor",
    }
)
KEYWORDS: Final = ANNOTATIONS | _SUB | _SUB_MAP | _SUB_LIST | _VALUES
"""Every keyword the profile accepts; anything else refuses the tool at pin."""
_DESCENDING: Final = frozenset(
    {
        "properties",
        "patternProperties",
        "additionalProperties",
        "items",
        "prefixItems",
        "additionalItems",
        "contains",
        "propertyNames",
    }
)
_DIALECT_ONLY: Final = {
    "prefixItems": "2020",
    "dependentRequired": "2020",
    "dependentSchemas": "2020",
    "$defs": "any",
    "minContains": "2020",
    "maxContains": "2020",
    "additionalItems": "7",
    "dependencies": "7",
}


def _refuse(message: str, pointer: str, rule: str) -> SchemaInvalid:
    return SchemaInvalid(
        message,
        pointer=pointer or "(root)",
        rule=rule,
        hint="The external profile (docs/mcp-sources.md) refuses this schema; "
        "the tool stays unpinned.",
    )


def _dialect(schema: Mapping[str, Any]) -> str:
    uri = schema.get("$schema")
    if uri is None or uri in _DRAFT2020_URIS:
        return "2020"
    if uri in _DRAFT7_URIS:
        return "7"
    raise _refuse(f"$schema {str(uri)[:100]!r} is not Draft 2020-12 or Draft 7", "/$schema", "dialect")


def _children(
    node: Mapping[str, Any], tokens: tuple[str | int, ...]
) -> Iterator[tuple[str, Any, tuple[str | int, ...]]]:
    """Yield ``(keyword, subschema, tokens)`` for every subschema of ``node``."""
    for key, value in node.items():
        if key in _SUB:
            if key == "items" and isinstance(value, list):
                for i, item in enumerate(value):
                    yield key, item, (*tokens, key, i)
            else:
                yield key, value, (*tokens, key)
        elif key in _SUB_MAP:
            if not isinstance(value, dict):
                raise _refuse(f"{key} must be an object", json_pointer((*tokens, key)), "shape")
            for name, sub in value.items():
                if key == "dependencies" and isinstance(sub, list):
                    continue
                yield key, sub, (*tokens, key, name)
        elif key in _SUB_LIST:
            if not isinstance(value, list) or not value:
                raise _refuse(f"{key} must be a non-empty array", json_pointer((*tokens, key)), "shape")
            for i, sub in enumerate(value):
                yield key, sub, (*tokens, key, i)


def _compile(pattern: object, pointer: str) -> None:
    if not isinstance(pattern, str) or len(pattern) > MAX_PATTERN_CHARS:
        raise _refuse(
            f"pattern must be a string of at most {MAX_PATTERN_CHARS} characters", pointer, "pattern"
        )
    try:
        _re2(pattern)
    except re2.error as exc:
        raise _refuse(
            f"pattern {pattern[:100]!r} cannot be compiled by RE2, a linear-time engine "
            f"(backreferences and lookaround are refused): {str(exc)[:120]}",
            pointer,
            "pattern",
        ) from None


@functools.lru_cache(maxsize=1024)
def _re2(pattern: str) -> Any:
    options = re2.Options()
    options.max_mem = 8 * 1024 * 1024  # bytes of one compiled program
    options.log_errors = False  # the refusal carries the reason; nothing on stderr
    return re2.compile(pattern, options=options)


def _check_node(node: object, tokens: tuple[str | int, ...], dialect: str) -> None:
    pointer = json_pointer(tokens)
    if isinstance(node, bool):
        return
    if not isinstance(node, dict):
        raise _refuse("a schema must be an object or a boolean", pointer, "shape")
    for key in node:
        if key not in KEYWORDS:
            raise _refuse(
                f"keyword {str(key)[:60]!r} is not in the external profile (the validator would ignore it)",
                pointer,
                "keyword-not-allowed",
            )
        only = _DIALECT_ONLY.get(key)
        if only not in (None, "any", dialect):
            raise _refuse(f"keyword {key!r} does not belong to this schema's dialect", pointer, "dialect")
    if "$schema" in node and tokens:
        raise _refuse("$schema may only appear at the root", pointer, "dialect")
    ref = node.get("$ref")
    if ref is not None and (not isinstance(ref, str) or not ref.startswith("#")):
        raise _refuse(
            f"$ref {str(ref)[:100]!r} is not local: no remote reference is ever fetched",
            pointer,
            "remote-ref",
        )
    enum = node.get("enum")
    if enum is not None and (not isinstance(enum, list) or len(enum) > MAX_ENUM):
        raise _refuse(f"enum must be an array of at most {MAX_ENUM} values", pointer, "enum")
    if "pattern" in node:
        _compile(node["pattern"], json_pointer((*tokens, "pattern")))
    for name in node.get("patternProperties") or {}:
        _compile(name, json_pointer((*tokens, "patternProperties", name)))


def _resolve(root: Mapping[str, Any], ref: str) -> tuple[object, tuple[str | int, ...]]:
    if ref == "#":
        return root, ()
    if not ref.startswith("#/"):
        raise _refuse(
            f"$ref {ref[:100]!r}: only JSON-pointer references (#/...) are supported", "", "remote-ref"
        )
    node: object = root
    tokens: list[str | int] = []
    for raw in ref[2:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
            tokens.append(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
            tokens.append(int(part))
        else:
            raise _refuse(f"$ref {ref[:100]!r} points at nothing in this schema", "", "ref-missing")
    return node, tuple(tokens)


def _expand(root: Mapping[str, Any]) -> int:
    """Count schema nodes with every $ref expanded; refuse growth and non-descending recursion."""
    count = 0
    # Stack of (node, tokens, refs entered on this path: target -> descended since?).
    stack: list[tuple[object, tuple[str | int, ...], dict[str, bool]]] = [(root, (), {})]
    while stack:
        node, tokens, active = stack.pop()
        count += 1
        if count > MAX_EXPANDED_NODES:
            raise _refuse(
                f"expanding $ref gives more than {MAX_EXPANDED_NODES} schema nodes", "", "ref-expansion"
            )
        if not isinstance(node, dict):
            continue
        ref = node.get("$ref")
        if isinstance(ref, str):
            if ref in active:
                if not active[ref]:
                    raise _refuse(
                        f"$ref {ref[:100]!r} recurses without descending into the input: validation "
                        "would not be bounded by the input's size",
                        json_pointer(tokens),
                        "ref-cycle",
                    )
            else:
                target, where = _resolve(root, ref)
                stack.append((target, where, {**active, ref: False}))
        for key, sub, sub_tokens in _children(node, tokens):
            if key in ("$defs", "definitions"):
                continue  # reached through $ref, counted there
            down = key in _DESCENDING
            stack.append((sub, sub_tokens, {k: v or down for k, v in active.items()}))
    return count


def check_external(schema: object, *, root_object: bool = True) -> None:
    """Check that ``schema`` fits the external profile (module docstring).

    Raises:
        SchemaInvalid: ``details["pointer"]`` locates the node, ``details["rule"]`` names
            the bound (``size``, ``depth``, ``nodes``, ``ref-expansion``, ``ref-cycle``,
            ``remote-ref``, ``pattern``, ``enum``, ``dialect``, ``keyword-not-allowed``).
    """
    if not isinstance(schema, dict):
        raise _refuse("a tool schema must be a JSON object", "", "shape")
    try:
        size = len(canonical_json(schema))
    except InputInvalid as exc:
        rule = "depth" if exc.details.get("rule") == "too-deep" else "shape"
        raise _refuse(f"schema is not canonical JSON: {exc.message}", "", rule) from None
    if size > MAX_SCHEMA_BYTES:
        raise _refuse(f"schema is {size} bytes, over {MAX_SCHEMA_BYTES}", "", "size")
    dialect = _dialect(schema)
    if root_object and schema.get("type") != "object":
        raise _refuse('the input schema\'s root must have "type": "object"', "", "root-object")
    nodes = 0
    stack: list[tuple[object, tuple[str | int, ...], int]] = [(schema, (), 1)]
    while stack:
        node, tokens, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise _refuse(f"schema has more than {MAX_NODES} nodes", "", "nodes")
        if depth > MAX_DEPTH:
            raise _refuse(f"schema nests deeper than {MAX_DEPTH} nodes", json_pointer(tokens), "depth")
        _check_node(node, tokens, dialect)
        if isinstance(node, dict):
            stack.extend((sub, t, depth + 1) for _, sub, t in _children(node, tokens))
    _expand(schema)


def _open_nodes(schema: Mapping[str, Any]) -> Iterator[tuple[str, object, str]]:
    """``(pointer, node, what is open)`` for every open parameter of ``schema``."""
    stack: list[tuple[object, tuple[str | int, ...]]] = [(schema, ())]
    while stack:
        node, tokens = stack.pop()
        if not isinstance(node, dict):
            continue
        where = json_pointer(tokens)
        types = node.get("type")
        kinds = set(types) if isinstance(types, list) else {types} if isinstance(types, str) else set()
        if (
            "object" in kinds
            and node.get("additionalProperties", True) is not False
            and "patternProperties" not in node
        ):
            yield where, node, "open object (additional properties accepted)"
        if "string" in kinds and "maxLength" not in node and "enum" not in node and "const" not in node:
            yield where, node, "string without maxLength"
        if "array" in kinds and "maxItems" not in node:
            yield where, node, "array without maxItems"
        if kinds & {"number", "integer"} and (
            ("maximum" not in node and "exclusiveMaximum" not in node)
            or ("minimum" not in node and "exclusiveMinimum" not in node)
        ):
            yield where, node, "number without minimum and maximum"
        pattern = node.get("pattern")
        if isinstance(pattern, str) and not (pattern.startswith("^") and pattern.endswith("$")):
            yield where, node, "unanchored pattern"
        try:
            stack.extend((sub, sub_tokens) for _, sub, sub_tokens in _children(node, tokens))
        except SchemaInvalid:
            continue


def _node_at(schema: Mapping[str, Any], pointer: str) -> object:
    node: object = schema
    for raw in pointer.split("/")[1:] if pointer else ():
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def unbounded(schema: Mapping[str, Any], *, review: Mapping[str, Any] | None = None) -> list[str]:
    """What the schema leaves open, one line per parameter, for the reviewer (sorted).

    With ``review`` (the reviewer's tighter schema, which applies too), a parameter is
    open only if the review schema leaves it open as well or does not mention it.
    """
    still_open = set() if review is None else {(p, what) for p, _, what in _open_nodes(review)}
    found = []
    for pointer, _, what in _open_nodes(schema):
        if review is not None and _node_at(review, pointer) is not None and (pointer, what) not in still_open:
            continue  # the reviewer bounded it
        found.append(f"{pointer or '(root)'}: {what}")
    return sorted(found)


# --- call time ------------------------------------------------------------------------------

_steps: contextvars.ContextVar[list[int]] = contextvars.ContextVar("stockade_schema_steps")


class _CostExceeded(Exception):
    pass


def _counted(fn: Callable[..., Any]) -> Callable[..., Any]:
    def run(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        budget = _steps.get()
        budget[0] -= 1
        if budget[0] < 0:
            raise _CostExceeded
        result = fn(validator, value, instance, schema)
        if result is not None:
            yield from result

    return run


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if isinstance(instance, str) and _re2(pattern).search(instance) is None:
        yield ValidationError(f"does not match the pattern {pattern[:100]!r}")


def _pattern_properties(
    validator: Any, value: Mapping[str, Any], instance: Any, schema: Any
) -> Iterator[Any]:
    if not isinstance(instance, dict):
        return
    for pattern, sub in value.items():
        compiled = _re2(pattern)
        for key, item in instance.items():
            if compiled.search(key) is not None:
                yield from validator.descend(item, sub, path=key, schema_path=pattern)


def _no_retrieve(uri: str) -> Any:
    raise NoSuchResource(uri)  # nothing is ever fetched, from the network or the filesystem


def _profile_validator(base: Any) -> Any:
    keywords = {name: _counted(fn) for name, fn in base.VALIDATORS.items()}
    keywords["pattern"] = _counted(_pattern)
    keywords["patternProperties"] = _counted(_pattern_properties)
    return validators.extend(base, validators=keywords)


_VALIDATOR_CLASSES: Final = {
    "7": _profile_validator(Draft7Validator),
    "2020": _profile_validator(Draft202012Validator),
}


@functools.lru_cache(maxsize=512)
def _compiled(schema_json: bytes) -> Validator:
    schema = json.loads(schema_json)
    cls = _VALIDATOR_CLASSES[_dialect(schema)]
    validator: Validator = cls(schema, registry=Registry(retrieve=_no_retrieve))  # type: ignore[call-arg]  # retrieve is keyword-only in referencing
    return validator


def _validator(schema: Mapping[str, Any]) -> Validator:
    return _compiled(canonical_json(schema))


def canonicalize_external(schema: Mapping[str, Any] | None, value: object, *, max_bytes: int) -> bytes:
    """Validate ``value`` against a schema that passed :func:`check_external`; return canonical JSON.

    Raises:
        InputInvalid: the canonical form fails (``rule`` as :func:`host.canonical.canonical_json`,
            ``too-large``), the schema refuses the value (``details["pointer"]`` is the JSON
            pointer of the offending value, ``details["rule"]`` the keyword), or validation
            took more than :data:`MAX_VALIDATION_STEPS` steps (``rule="validation-cost"``).
    """
    data = canonical_json(value)
    if len(data) > max_bytes:
        raise InputInvalid(
            f"canonical JSON of {len(data)} bytes exceeds the budget of {max_bytes} bytes",
            pointer="",
            rule="too-large",
            size=len(data),
            limit=max_bytes,
        )
    if schema is None:
        if value is not None:
            raise InputInvalid(
                "a tool without output_schema may only return null", pointer="", rule="null-only"
            )
        return data
    validator = _validator(schema)
    token = _steps.set([MAX_VALIDATION_STEPS])
    try:
        error = next(iter(validator.iter_errors(value)), None)
    except (_CostExceeded, RecursionError):
        raise InputInvalid(
            f"validating this input took more than {MAX_VALIDATION_STEPS} schema steps",
            pointer="",
            rule="validation-cost",
            limit=MAX_VALIDATION_STEPS,
        ) from None
    except Unresolvable as exc:  # check_external refuses these at pin; defence in depth
        raise InputInvalid(
            f"the schema has an unresolvable reference: {str(exc)[:100]}", pointer="", rule="ref-missing"
        ) from None
    finally:
        _steps.reset(token)
    if error is not None:
        pointer = json_pointer(tuple(error.absolute_path))
        # The message names the keyword and the schema's value, never the input (it may be sensitive).
        expected = canonical_json(error.validator_value).decode("utf-8", "replace")
        raise InputInvalid(
            f"input at {pointer or '(root)'} fails the tool's schema: {error.validator} {expected[:120]}",
            pointer=pointer,
            rule=str(error.validator),
        )
    return data


def schema_digest(schema: Mapping[str, Any]) -> str:
    """sha256 of a schema's canonical JSON (names a compiled validator)."""
    return hashlib.sha256(canonical_json(schema)).hexdigest()
