"""Schema builders and hypothesis strategies for the bounded subset (docs/design.md §5).

Builders give schemas exactly at a limit (depth, node count, properties, enum size), so
tests can cross each limit by one. Strategies generate schemas *inside* the subset and
values near their bounds (valid and invalid), for the differential test against
``jsonschema``'s Draft 2020-12 validator and for other suites that need tool schemas.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from host.canonical import MAX_SAFE_INTEGER

# Lone surrogates are a deliberate divergence from jsonschema (we refuse them); keep
# generated text to code points that have a UTF-8 form.
TEXT_CHARS = st.characters(exclude_categories=("Cs",))
PROPERTY_NAMES = st.sampled_from(["a", "b", "c", "é", "~/x", "", "😀"])


def string_schema(max_length: int = 10, **extra: Any) -> dict[str, Any]:
    """A ``string`` schema with the given ``maxLength``."""
    return {"type": "string", "maxLength": max_length, **extra}


def object_schema(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    """An ``object`` schema with ``additionalProperties: false``; all required by default."""
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
        "required": list(properties) if required is None else required,
    }


def nested_schema(depth: int) -> dict[str, Any]:
    """An object schema exactly ``depth`` schema nodes deep (the root is depth 1)."""
    schema: dict[str, Any] = string_schema()
    for _ in range(depth - 1):
        schema = object_schema({"a": schema})
    if depth == 1:
        return object_schema({})
    return schema


def schema_with_nodes(nodes: int) -> dict[str, Any]:
    """An object schema of exactly ``nodes`` nodes (root + 4 objects + string leaves)."""
    leaves = nodes - 5
    if not 0 <= leaves <= 4 * 64:
        raise ValueError(f"cannot build {nodes} nodes")
    counts = [min(64, max(0, leaves - 64 * i)) for i in range(4)]
    children = {
        f"o{i}": object_schema({f"p{j}": string_schema() for j in range(count)})
        for i, count in enumerate(counts)
    }
    return object_schema(children)


def count_nodes(schema: dict[str, Any]) -> int:
    """Count the schema nodes of a subset schema (for asserting builders are exact)."""
    total = 1
    if schema["type"] == "array":
        total += count_nodes(schema["items"])
    elif schema["type"] == "object":
        total += sum(count_nodes(child) for child in schema["properties"].values())
    return total


# --- hypothesis strategies: schemas inside the subset ---------------------------------

_DESCRIPTIONS = st.none() | st.text(TEXT_CHARS, max_size=8)


def _with_description(draw: st.DrawFn, schema: dict[str, Any]) -> dict[str, Any]:
    description = draw(_DESCRIPTIONS)
    if description is not None:
        schema["description"] = description
    return schema


@st.composite
def _string_schemas(draw: st.DrawFn) -> dict[str, Any]:
    high = draw(st.integers(0, 6))
    schema: dict[str, Any] = {"type": "string", "maxLength": high}
    low = draw(st.none() | st.integers(0, high))
    if low is not None:
        schema["minLength"] = low
    if draw(st.booleans()):
        text = st.text(TEXT_CHARS, min_size=low or 0, max_size=high)
        schema["enum"] = draw(st.lists(text, min_size=1, max_size=4, unique=True))
    return _with_description(draw, schema)


_INT_BOUNDS = st.integers(-20, 20) | st.sampled_from([-MAX_SAFE_INTEGER, 0, MAX_SAFE_INTEGER])
_FLOAT_BOUNDS = st.floats(-20, 20, allow_nan=False, allow_infinity=False) | _INT_BOUNDS


@st.composite
def _number_schemas(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["integer", "number"]))
    bounds = _INT_BOUNDS if kind == "integer" else _FLOAT_BOUNDS
    low, high = sorted([draw(bounds), draw(bounds)])
    return _with_description(draw, {"type": kind, "minimum": low, "maximum": high})


_LEAVES = (
    st.builds(lambda: {"type": "null"})
    | st.builds(lambda: {"type": "boolean"})
    | _string_schemas()
    | _number_schemas()
)


@st.composite
def _array_schemas(draw: st.DrawFn, depth: int) -> dict[str, Any]:
    high = draw(st.integers(0, 4))
    schema: dict[str, Any] = {"type": "array", "maxItems": high, "items": draw(subset_schemas(depth))}
    low = draw(st.none() | st.integers(0, high))
    if low is not None:
        schema["minItems"] = low
    unique = draw(st.none() | st.booleans())
    if unique is not None:
        schema["uniqueItems"] = unique
    return _with_description(draw, schema)


@st.composite
def _object_schemas(draw: st.DrawFn, depth: int) -> dict[str, Any]:
    names = draw(st.lists(PROPERTY_NAMES, max_size=4, unique=True))
    properties = {name: draw(subset_schemas(depth)) for name in names}
    required = [name for name in names if draw(st.booleans())]
    return _with_description(draw, object_schema(properties, required))


def subset_schemas(depth: int = 4) -> st.SearchStrategy[dict[str, Any]]:
    """Schemas inside the subset, at most ``depth`` nodes deep."""
    if depth <= 1:
        return _LEAVES
    return _LEAVES | _array_schemas(depth - 1) | _object_schemas(depth - 1)


def root_object_schemas(depth: int = 4) -> st.SearchStrategy[dict[str, Any]]:
    """Input schemas: objects at the root."""
    return _object_schemas(depth - 1)


# --- hypothesis strategies: values near a schema's bounds -----------------------------

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(TEXT_CHARS, max_size=6)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(PROPERTY_NAMES, inner, max_size=4),
    max_leaves=12,
)

CANONICAL_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(TEXT_CHARS, max_size=6),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(TEXT_CHARS, max_size=4), inner, max_size=4),
    max_leaves=16,
)
"""JSON values every canonical_json accepts (safe integers, finite floats, no surrogates)."""


def _number_values(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    low, high = schema["minimum"], schema["maximum"]
    ints = st.integers(int(low) - 2, int(high) + 2)
    near = st.sampled_from([low, high, low - 1, high + 1, low - 0.5, high + 0.5])
    return (
        ints
        | ints.map(float)
        | near
        | st.floats(low - 1, high + 1, allow_nan=False, allow_infinity=False)
        | st.booleans()
    )


def _string_values(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    low, high = schema.get("minLength", 0), schema["maxLength"]
    texts = st.text(TEXT_CHARS, min_size=max(0, low - 1), max_size=high + 1)
    if "enum" in schema:
        return st.sampled_from(schema["enum"]) | texts
    return texts


@st.composite
def _array_values(draw: st.DrawFn, schema: dict[str, Any]) -> list[Any]:
    low, high = schema.get("minItems", 0), schema["maxItems"]
    size = draw(st.integers(max(0, low - 1), high + 1))
    items = [draw(values_for(schema["items"])) for _ in range(size)]
    if items and draw(st.booleans()):
        # Duplicates, sometimes respelled: 1 and 1.0 are the same JSON value.
        twin = items[0]
        if isinstance(twin, int) and not isinstance(twin, bool) and draw(st.booleans()):
            twin = float(twin)
        items[draw(st.integers(0, len(items) - 1))] = twin
    return items


@st.composite
def _object_values(draw: st.DrawFn, schema: dict[str, Any]) -> dict[str, Any]:
    value: dict[str, Any] = {}
    required = set(schema["required"])
    for name, child in schema["properties"].items():
        keep = draw(st.integers(0, 9)) > (0 if name in required else 4)
        if keep:
            value[name] = draw(values_for(child))
    if draw(st.integers(0, 9)) == 0:
        value[draw(st.sampled_from(["zz", "a", "é"]))] = draw(JSON_SCALARS)
    return value


@st.composite
def values_for(draw: st.DrawFn, schema: dict[str, Any]) -> Any:
    """Values shaped by ``schema``, around its bounds; about 1 in 8 nodes is arbitrary JSON."""
    if draw(st.integers(0, 7)) == 0:
        return draw(JSON_VALUES)
    kind = schema["type"]
    if kind == "null":
        return None
    if kind == "boolean":
        return draw(st.booleans())
    if kind == "string":
        return draw(_string_values(schema))
    if kind in ("integer", "number"):
        return draw(_number_values(schema))
    if kind == "array":
        return draw(_array_values(schema))
    return draw(_object_values(schema))
