"""jsonkit: query and transform JSON documents. Pure computation: no network, no secrets.

Documents arrive as JSON text (the schema subset cannot describe "any JSON value", see
stockade.toml) and are parsed strictly: NaN, Infinity, numbers that overflow a float,
duplicate object keys and nesting deeper than 64 are refused as invalid input. Results
are returned as compact JSON text.

Paths (``jsonkit.query`` and ``transform``'s ``path``):

- ``""`` or ``"$"``: the whole document;
- a JSON Pointer (RFC 6901) when the path starts with ``/``: ``/items/0/name``,
  ``~1`` for ``/`` and ``~0`` for ``~`` inside a key;
- otherwise dotted keys and bracketed indexes: ``items[0].name``, ``items[-1]``
  (from the end), ``["a.b"].c`` (a quoted key), optionally after ``$.``.
"""

import json

from stockade import ToolError, ToolInputError, tool

MAX_DEPTH = 64
MAX_QUERY_JSON = 60_000
MAX_TRANSFORM_JSON = 200_000
_TYPES = ((type(None), "null"), (bool, "boolean"), ((int, float), "number"), (str, "string"),
          (list, "array"), (dict, "object"))
_TYPE_RANK = {"null": 0, "boolean": 1, "number": 2, "string": 3, "array": 4, "object": 5}
_MISSING = object()


# --- parsing ----------------------------------------------------------------------------


def _nesting_depth(text):
    """The deepest [/{ nesting, counted outside strings, without recursion."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def _no_duplicates(pairs):
    obj = {}
    for key, value in pairs:
        if key in obj:
            raise ValueError(f"duplicate key {key[:50]!r}")
        obj[key] = value
    return obj


def _refuse_constant(name):
    raise ValueError(f"{name} is not JSON")


def _finite(text):
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text[:30]} is too large")
    return value


def parse_document(text):
    """Parse JSON text strictly (see the module docstring)."""
    if _nesting_depth(text) > MAX_DEPTH:
        raise ToolInputError(f"document is nested deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(
            text, object_pairs_hook=_no_duplicates, parse_constant=_refuse_constant, parse_float=_finite
        )
    except ValueError as exc:  # json.JSONDecodeError is a ValueError; so are int-size limits
        raise ToolInputError(f"document is not valid JSON: {str(exc)[:200]}") from None


def dump(value, limit):
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    if len(text) > limit:
        raise ToolError(f"result is {len(text)} characters, over {limit}; narrow the path or use limit")
    return text


def type_name(value):
    for kinds, name in _TYPES:
        if isinstance(value, kinds):
            return name
    return "null"


# --- paths ------------------------------------------------------------------------------


def _pointer_steps(path):
    steps = []
    for token in path[1:].split("/"):
        steps.append(token.replace("~1", "/").replace("~0", "~"))
    return steps


def _bracket(path, i):
    """Parse ``[...]`` at ``path[i]``; returns (step, next index)."""
    end = path.find("]", i)
    if path.startswith('["', i):
        close = path.find('"]', i + 2)
        if close < 0:
            raise ToolInputError(f"unclosed quoted key at position {i}")
        return path[i + 2 : close], close + 2
    if end < 0:
        raise ToolInputError(f"unclosed [ at position {i}")
    inner = path[i + 1 : end].strip()
    try:
        return int(inner), end + 1
    except ValueError:
        raise ToolInputError(f"[{inner[:20]}] is not an index; quote keys as [\"key\"]") from None


def _dotted_steps(path):
    if path.startswith("$.") or path.startswith("$["):
        path = path[2:] if path.startswith("$.") else path[1:]
    steps, i, name = [], 0, []
    while i < len(path):
        ch = path[i]
        if ch == ".":
            if name:
                steps.append("".join(name))
                name = []
            elif i == 0 or path[i - 1] != "]":
                raise ToolInputError(f"empty key at position {i}")
            i += 1
        elif ch == "[":
            if name:
                steps.append("".join(name))
                name = []
            step, i = _bracket(path, i)
            steps.append(step)
        else:
            name.append(ch)
            i += 1
    if name:
        steps.append("".join(name))
    elif path.endswith("."):
        raise ToolInputError("path ends with '.'")
    return steps


def parse_path(path):
    """The steps of a path: keys (str) and indexes (int)."""
    if path in ("", "$"):
        return []
    if path.startswith("/"):
        return _pointer_steps(path)
    return _dotted_steps(path)


def _step(value, step, pointer):
    if isinstance(value, list):
        if isinstance(step, str):
            if not step.isdigit() or (len(step) > 1 and step[0] == "0"):
                raise ToolInputError(f"at {pointer or '$'}: an array needs an index, not {step[:50]!r}")
            step = int(step)
        if not -len(value) <= step < len(value):
            raise ToolInputError(f"at {pointer or '$'}: index {step} is outside an array of {len(value)}")
        return value[step]
    if isinstance(value, dict):
        key = str(step)
        if key not in value:
            raise ToolInputError(f"at {pointer or '$'}: no key {key[:50]!r}")
        return value[key]
    raise ToolInputError(f"at {pointer or '$'}: a {type_name(value)} has no {step!r}")


def resolve(document, path):
    """The value at ``path`` in ``document`` (ToolInputError naming the failing step)."""
    value, pointer = document, ""
    for step in parse_path(path):
        value = _step(value, step, pointer)
        pointer += f"/{step}"
    return value


def lookup(item, key):
    """The value of a dotted ``key`` inside one item, or _MISSING."""
    value = item
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


# --- tools ------------------------------------------------------------------------------


@tool("jsonkit.query")
def query(input):
    value = resolve(parse_document(input["document"]), input["path"])
    return {"json": dump(value, MAX_QUERY_JSON), "type": type_name(value)}


def _objects(input):
    items = resolve(parse_document(input["document"]), input.get("path", ""))
    if not isinstance(items, list):
        raise ToolInputError(f"transform needs an array, found a {type_name(items)}")
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise ToolInputError(f"item {index} is a {type_name(item)}, not an object")
    return items


def _need(input, name, operation):
    if name not in input:
        raise ToolInputError(f"operation {operation!r} needs {name!r}")
    return input[name]


def _sort_key(value):
    if value is _MISSING:
        return (9, 0)
    kind = type_name(value)
    if kind in ("number", "string", "boolean"):
        return (_TYPE_RANK[kind], value)
    return (_TYPE_RANK[kind], json.dumps(value, sort_keys=True))


def _pick(items, input):
    fields = _need(input, "fields", "pick")
    return [{f: item[f] for f in fields if f in item} for item in items]


def _sort(items, input):
    key = _need(input, "key", "sort")
    present = [i for i in items if lookup(i, key) is not _MISSING]
    missing = [i for i in items if lookup(i, key) is _MISSING]  # always last
    present.sort(key=lambda i: _sort_key(lookup(i, key)), reverse=bool(input.get("descending", False)))
    return present + missing


def _count(items, input):
    key = _need(input, "key", "count")
    counts = {}
    for item in items:
        value = lookup(item, key)
        if value is not _MISSING:
            marker = json.dumps(value, sort_keys=True)
            counts.setdefault(marker, [value, 0])[1] += 1
    rows = [{"value": v, "count": n} for v, n in counts.values()]
    rows.sort(key=lambda r: (-r["count"], _sort_key(r["value"])))
    return rows


def _unique(items, input):
    key = _need(input, "key", "unique")
    seen, out = set(), []
    for item in items:
        value = lookup(item, key)
        marker = json.dumps(value, sort_keys=True) if value is not _MISSING else None
        if marker is not None and marker not in seen:
            seen.add(marker)
            out.append(value)
    return out


_OPERATIONS = {"pick": _pick, "sort": _sort, "count": _count, "unique": _unique}


@tool("jsonkit.transform")
def transform(input):
    result = _OPERATIONS[input["operation"]](_objects(input), input)
    if "limit" in input:
        result = result[: input["limit"]]
    return {"json": dump(result, MAX_TRANSFORM_JSON), "count": len(result)}
