"""The extra ``stockade new --template`` projects (``read-api`` lives in :mod:`sdk.scaffold`).

- ``write-with-approval``: one ``write`` tool that POSTs to an API with a bearer token;
  the host asks a person before every call (effect ``write``), and the tests show the
  ``APPROVAL_REQUIRED`` refusal, the approved call and the intent record in the audit log.
- ``compute``: one pure function, no ``[http]`` section at all (so no network), with
  bounded numeric input.

Every template passes its own tests as generated (``stockade test``), in both languages.
"""

from __future__ import annotations

from string import Template
from typing import Final

__all__ = ["TEMPLATES"]

_SCHEMA_NOTE: Final = """\
# Schemas use a bounded JSON Schema subset: every object lists additionalProperties =
# false, properties and required (write required = [] when nothing is); every string
# needs maxLength, every number minimum and maximum, every array maxItems and items.
"""

_WRITE_TOML: Final = Template('''\
# $name: a Stockade plugin with a write tool. The host asks a person before each call.
#   stockade build / stockade test / stockade dev $name.create-item --input '{"title": "x"}'

[package]
name = "$name"
version = "0.1.0"
description = "Create items in the items service"
language = "$language"
source = "$source"

[limits]
max_http_requests = 2

[http]
# The only place this plugin may reach; the host refuses everything else.
allow = [{ host = "api.example.com", path_prefix = "/v1/items", methods = ["POST"] }]
timeout_ms = 5_000

[[http.credentials]]
# The host adds `Authorization: Bearer <api_token>`; the plugin never sees the value.
secret = "api_token"
location = { type = "bearer" }
hosts = ["api.example.com"]
path_prefixes = ["/v1"]

[[tools]]
name = "$name.create-item"
description = "Create an item with a title"
effect = "write"              # write: the host asks a person before running it
risk = "medium"
permissions = ["items.write"] # the host app's policy must grant it
timeout_s = 10

''' + _SCHEMA_NOTE + '''\
[tools.input_schema]
type = "object"
additionalProperties = false
required = ["title"]
properties.title = { type = "string", minLength = 1, maxLength = 200, description = "The item's title" }

[tools.output_schema]
type = "object"
additionalProperties = false
required = ["id", "title"]
properties.id = { type = "integer", minimum = 1, maximum = 1_000_000_000 }
properties.title = { type = "string", maxLength = 200 }
''')

_WRITE_PY: Final = Template('''\
"""$name: a write tool; the host asks a person first (effect = "write")."""

from stockade import HttpError, ToolError, http, tool

API = "https://api.example.com/v1/items"


@tool("$name.create-item")
def create_item(input):
    try:
        r = http.post(API, json={"title": input["title"]})
    except HttpError as exc:
        raise ToolError(f"the items service could not be reached: {exc}") from None
    if r.status != 201:
        raise ToolError(f"the items service answered {r.status}")
    body = r.json()
    return {"id": int(body["id"]), "title": str(body.get("title", ""))[:200]}
''')

_WRITE_JS: Final = Template('''\
// $name: a write tool; the host asks a person first (effect = "write").
import { HttpError, ToolError, http, tool } from "stockade";

const API = "https://api.example.com/v1/items";

tool("$name.create-item", (input) => {
  let r;
  try {
    r = http.post(API, { json: { title: input.title } });
  } catch (e) {
    if (e instanceof HttpError) throw new ToolError(`the items service could not be reached: $${e.message}`);
    throw e;
  }
  if (r.status !== 201) throw new ToolError(`the items service answered $${r.status}`);
  const body = r.json();
  return { id: Number(body.id), title: String(body.title ?? "").slice(0, 200) };
});
''')

_WRITE_TEST: Final = Template('''\
"""Tests for $name: a real Stockade host runs the plugin; only the network is scripted."""

from pathlib import Path

import pytest

from sdk.harness import Harness, Response, route

PROJECT = Path(__file__).resolve().parents[1]
CREATE = route("POST", "https://api.example.com/v1/items")


@pytest.fixture(scope="module")
def h():
    with Harness(PROJECT, secrets=["api_token"]) as harness:
        yield harness


@pytest.fixture(autouse=True)
def fresh(h):
    h.routes.clear()
    h.reset()


def test_a_person_must_approve_before_anything_is_sent(h):
    result = h.call("$name.create-item", {"title": "Buy milk"})
    assert result.error.code == "APPROVAL_REQUIRED"
    assert h.requests == []


def test_approved_call_posts_with_the_hosts_token(h):
    h.routes[CREATE] = Response(201, json={"id": 42, "title": "Buy milk"})
    result = h.call("$name.create-item", {"title": "Buy milk"}, approve=True)
    assert result.ok, result.error
    assert result.output == {"id": 42, "title": "Buy milk"}
    (sent,) = h.requests
    assert sent.json() == {"title": "Buy milk"}
    assert sent.header("authorization") == "Bearer <secret:api_token>"
    kinds = [record["kind"] for record in h.audit_records()]
    assert "call.intent" in kinds  # written before the guest ran


def test_server_error_is_a_tool_failure(h):
    h.routes[CREATE] = Response(500, json={"error": "down"})
    result = h.call("$name.create-item", {"title": "Buy milk"}, approve=True)
    assert result.error.code == "TOOL_FAILED"


def test_blank_title_refused_before_approval(h):
    result = h.call("$name.create-item", {"title": ""}, approve=True)
    assert result.error.code == "INPUT_INVALID"
    assert h.requests == []
''')

_COMPUTE_TOML: Final = Template('''\
# $name: a Stockade plugin that only computes. No [http] section: it has no network at all.
#   stockade build / stockade test / stockade dev $name.stats --input '{"numbers": [1, 2]}'

[package]
name = "$name"
version = "0.1.0"
description = "Summary statistics of a list of numbers"
language = "$language"
source = "$source"

[[tools]]
name = "$name.stats"
description = "Count, sum, mean, minimum and maximum of a list of numbers"
effect = "read"
risk = "low"
timeout_s = 5

''' + _SCHEMA_NOTE + '''\
[tools.input_schema]
type = "object"
additionalProperties = false
required = ["numbers"]
[tools.input_schema.properties.numbers]
type = "array"
minItems = 1
maxItems = 256
items = { type = "number", minimum = -1e12, maximum = 1e12 }

[tools.output_schema]
type = "object"
additionalProperties = false
required = ["count", "sum", "mean", "min", "max"]
properties.count = { type = "integer", minimum = 1, maximum = 256 }
properties.sum = { type = "number", minimum = -1e15, maximum = 1e15 }
properties.mean = { type = "number", minimum = -1e12, maximum = 1e12 }
properties.min = { type = "number", minimum = -1e12, maximum = 1e12 }
properties.max = { type = "number", minimum = -1e12, maximum = 1e12 }
''')

_COMPUTE_PY: Final = Template('''\
"""$name: a pure computation (no network)."""

from stockade import tool


@tool("$name.stats")
def stats(input):
    numbers = input["numbers"]
    total = sum(numbers)
    return {
        "count": len(numbers),
        "sum": total,
        "mean": total / len(numbers),
        "min": min(numbers),
        "max": max(numbers),
    }
''')

_COMPUTE_JS: Final = Template('''\
// $name: a pure computation (no network).
import { tool } from "stockade";

tool("$name.stats", (input) => {
  const numbers = input.numbers;
  const sum = numbers.reduce((a, b) => a + b, 0);
  return {
    count: numbers.length,
    sum,
    mean: sum / numbers.length,
    min: Math.min(...numbers),
    max: Math.max(...numbers),
  };
});
''')

_COMPUTE_TEST: Final = Template('''\
"""Tests for $name: a real Stockade host runs the plugin."""

from pathlib import Path

import pytest

from sdk.harness import Harness

PROJECT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def h():
    with Harness(PROJECT) as harness:
        yield harness


def test_stats(h):
    result = h.call("$name.stats", {"numbers": [3, 1, 2]})
    assert result.ok, result.error
    assert result.output == {"count": 3, "sum": 6, "mean": 2, "min": 1, "max": 3}


def test_empty_list_refused_by_the_schema(h):
    assert h.call("$name.stats", {"numbers": []}).error.code == "INPUT_INVALID"


def test_out_of_range_number_refused(h):
    assert h.call("$name.stats", {"numbers": [1e13]}).error.code == "INPUT_INVALID"


def test_no_network_at_all(h):
    assert h.bundle.manifest.http.allow == ()
    assert h.requests == []
''')

TEMPLATES: Final[dict[str, dict[str, Template]]] = {
    "write-with-approval": {
        "toml": _WRITE_TOML, "python": _WRITE_PY, "javascript": _WRITE_JS, "test": _WRITE_TEST
    },
    "compute": {
        "toml": _COMPUTE_TOML, "python": _COMPUTE_PY, "javascript": _COMPUTE_JS, "test": _COMPUTE_TEST
    },
}
"""``{template: {"toml", "python", "javascript", "test": Template}}``."""
