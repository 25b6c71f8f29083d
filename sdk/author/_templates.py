"""The ``stockade new --template`` projects: the one home of their texts (the logic that
writes them is :mod:`sdk.author.scaffold`). Shared fragments (the schema note, the bearer
credential, the test harness fixtures) are written once and joined in.

- ``read-api`` (the default): a read tool with input validation and a GET tool that
  reaches one API with a bearer token the host injects.
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

_BEARER_CREDENTIAL: Final = """\
secret = "api_token"
location = { type = "bearer" }
hosts = ["api.example.com"]
path_prefixes = ["/v1"]
"""
"""Where the templates' credential goes: the host adds ``Authorization: Bearer <api_token>``."""

_HARNESS_HEAD: Final = """\
from pathlib import Path

import pytest

from sdk.harness import Harness, Response, route

PROJECT = Path(__file__).resolve().parents[1]
"""

_HARNESS_FIXTURES: Final = """\
@pytest.fixture(scope="module")
def h():
    with Harness(PROJECT, secrets=["api_token"]) as harness:
        yield harness


@pytest.fixture(autouse=True)
def fresh(h):
    h.routes.clear()
    h.reset()
"""
"""One harness per test module, with the ``api_token`` secret staged; routes and requests
reset before each test."""

_READ_TOML: Final = Template('''\
# $name: a Stockade plugin. Each section maps one to one onto the bundle's manifest.json.
#   stockade build          build dist/$name-0.1.0/{manifest.json,module.wasm}
#   stockade test           run tests/ against a real host with scripted HTTP
#   stockade inspect dist/$name-0.1.0   what the bundle may do, before you trust it

[package]
name = "$name"
version = "0.1.0"
description = "Describe what these tools are for"
language = "$language"
source = "$source"

[limits]
fuel = 2_000_000_000          # wasm fuel units per call
memory_bytes = 134_217_728    # 128 MiB
timeout_ms = 10_000
max_http_requests = 4
max_log_bytes = 16_384

[http]
# The only places this plugin may reach; the host refuses everything else.
allow = [{ host = "api.example.com", path_prefix = "/v1/items", methods = ["GET"] }]
timeout_ms = 5_000

[[http.credentials]]
# The host adds `Authorization: Bearer <api_token>` to requests under /v1 on that host.
# Store it with `stockade secrets set api_token`; the plugin never sees the value.
''' + _BEARER_CREDENTIAL + '''\

[[tools]]
name = "$name.greet"
description = "Greet someone by name"
effect = "read"               # read | write | execute | external (write and up ask a person)
risk = "low"                  # low | medium | high | critical
timeout_s = 5

''' + _SCHEMA_NOTE + '''\
[tools.input_schema]
type = "object"
additionalProperties = false
required = ["name"]
properties.name = { type = "string", minLength = 1, maxLength = 100, description = "Who to greet" }

[tools.output_schema]
type = "object"
additionalProperties = false
required = ["greeting"]
properties.greeting = { type = "string", maxLength = 200 }

[[tools]]
name = "$name.lookup"
description = "Look an item up by id"
effect = "read"
risk = "low"
permissions = ["items.read"]  # the host app's policy must grant these
timeout_s = 10

[tools.input_schema]
type = "object"
additionalProperties = false
required = ["id"]
properties.id = { type = "integer", minimum = 1, maximum = 1_000_000, description = "Item id" }

[tools.output_schema]
type = "object"
additionalProperties = false
required = ["id", "name"]
properties.id = { type = "integer", minimum = 1, maximum = 1_000_000 }
properties.name = { type = "string", maxLength = 200 }
''')

_READ_PY: Final = Template('''\
"""$name: tools written as plain functions with the Stockade guest SDK."""

from stockade import HttpError, ToolError, ToolInputError, http, tool

API = "https://api.example.com/v1/items"


@tool("$name.greet")
def greet(input):
    name = input["name"].strip()
    if not name:
        raise ToolInputError("name must not be blank")
    return {"greeting": f"Hello, {name}!"}


@tool("$name.lookup")
def lookup(input):
    item_id = input["id"]
    try:
        r = http.get(f"{API}/{item_id}", headers={"Accept": "application/json"})
    except HttpError as exc:
        raise ToolError(f"the items service could not be reached: {exc}") from None
    if r.status == 404:
        raise ToolError(f"item {item_id} not found")
    if r.status != 200:
        raise ToolError(f"the items service answered {r.status}")
    body = r.json()
    return {"id": item_id, "name": str(body.get("name", ""))[:200]}
''')

_READ_JS: Final = Template('''\
// $name: tools written as plain functions with the Stockade guest SDK.
import { HttpError, ToolError, ToolInputError, http, tool } from "stockade";

const API = "https://api.example.com/v1/items";

tool("$name.greet", (input) => {
  const name = input.name.trim();
  if (!name) throw new ToolInputError("name must not be blank");
  return { greeting: `Hello, $${name}!` };
});

tool("$name.lookup", (input) => {
  let r;
  try {
    r = http.get(`$${API}/$${input.id}`, { headers: { Accept: "application/json" } });
  } catch (e) {
    if (e instanceof HttpError) throw new ToolError(`the items service could not be reached: $${e.message}`);
    throw e;
  }
  if (r.status === 404) throw new ToolError(`item $${input.id} not found`);
  if (r.status !== 200) throw new ToolError(`the items service answered $${r.status}`);
  const body = r.json();
  return { id: input.id, name: String(body.name ?? "").slice(0, 200) };
});
''')

_READ_TEST: Final = Template('''\
"""Tests for $name: a real Stockade host runs the plugin; only the network is scripted.

The harness builds the project, loads it with the egress policy, credential injection,
limits and audit all switched on, and answers HTTP from the routes below, or from an
HTTP cassette recorded from the real API (the last test). Where the host injected a
secret, recorded requests show a placeholder such as <secret:api_token>.
"""

''' + _HARNESS_HEAD + '''\
from sdk.author.devrun import read_secret

ITEM_7 = route("GET", "https://api.example.com/v1/items/7")


''' + _HARNESS_FIXTURES + '''\


def test_greet(h):
    result = h.call("$name.greet", {"name": "Ada"})
    assert result.ok, result.error
    assert result.output == {"greeting": "Hello, Ada!"}


def test_blank_name_refused(h):
    result = h.call("$name.greet", {"name": "   "})
    assert result.error.code == "INPUT_INVALID"


def test_input_outside_the_schema_refused(h):
    result = h.call("$name.greet", {"name": "x" * 101})
    assert result.error.code == "INPUT_INVALID"


def test_lookup_gets_the_token_from_the_host(h):
    h.routes[ITEM_7] = Response(200, json={"name": "Widget"})
    result = h.call("$name.lookup", {"id": 7})
    assert result.ok, result.error
    assert result.output == {"id": 7, "name": "Widget"}
    (sent,) = h.requests
    assert sent.header("authorization") == "Bearer <secret:api_token>"


def test_lookup_of_a_missing_item_fails_cleanly(h):
    h.routes[ITEM_7] = Response(404, json={"error": "not found"})
    result = h.call("$name.lookup", {"id": 7})
    assert result.error.code == "TOOL_FAILED"
    assert "not found" in result.error.message


@pytest.mark.cassette("lookup")
def test_lookup_replayed_from_a_cassette(stockade_cassette):
    """The real API's answer, recorded once (secrets removed), replayed offline after:

        API_TOKEN=... stockade test --record-mode once    # writes tests/cassettes/lookup.json
        stockade cassette verify tests/cassettes/lookup.json
        stockade test                                     # replays it; no network at all
    """
    mode, exists = stockade_cassette["record_mode"], stockade_cassette["cassette"].is_file()
    records = mode in ("all", "new_episodes") or (mode == "once" and not exists)
    if not exists and mode == "none":
        pytest.skip("no cassette yet: record it with API_TOKEN=... stockade test --record-mode once")
    # Recording needs the real token, from the environment (never a literal); replay does not.
    secrets = dict([read_secret("api_token=env:API_TOKEN")]) if records else ["api_token"]
    with Harness(PROJECT, secrets=secrets, **stockade_cassette) as replay:
        result = replay.call("$name.lookup", {"id": 7})
    assert result.ok, result.error
''')

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
''' + _BEARER_CREDENTIAL + '''\

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

''' + _HARNESS_HEAD + '''\
CREATE = route("POST", "https://api.example.com/v1/items")


''' + _HARNESS_FIXTURES + '''\


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
    "read-api": {"toml": _READ_TOML, "python": _READ_PY, "javascript": _READ_JS, "test": _READ_TEST},
    "write-with-approval": {
        "toml": _WRITE_TOML, "python": _WRITE_PY, "javascript": _WRITE_JS, "test": _WRITE_TEST
    },
    "compute": {
        "toml": _COMPUTE_TOML, "python": _COMPUTE_PY, "javascript": _COMPUTE_JS, "test": _COMPUTE_TEST
    },
}
"""``{template: {"toml", "python", "javascript", "test": Template}}``, ``read-api`` (the
default) first."""
