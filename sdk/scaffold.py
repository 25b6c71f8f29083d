"""Templates for ``stockade new``: a plugin project that builds and whose tests pass.

A new project holds ``stockade.toml``, the source (``app.py`` or ``app.js``), a
``README.md``, a ``.gitignore`` (private keys and caches; not ``dist/``, which a lock
points at) and ``tests/test_tools.py``
(pytest, through :mod:`sdk.harness`). It has
two tools, so the author sees both kinds at once:

- ``<name>.greet``: pure computation, effect ``read``;
- ``<name>.lookup``: one GET to ``https://api.example.com/v1/items/{id}`` with the
  ``api_token`` secret injected by the host as a bearer token (the code never sees it).

Example::

    files = scaffold_project(Path("my-tools"), "my-tools", language="python")
"""

from __future__ import annotations

from pathlib import Path
from string import Template
from typing import Final

from host.files import create_exclusive
from host.manifest import is_name
from sdk._templates import TEMPLATES
from sdk.project import LANGUAGES, PROJECT_FILE, Language

__all__ = ["MAX_PROJECT_NAME", "TEMPLATE_NAMES", "ScaffoldError", "render", "scaffold_project"]

_LONGEST_TOOL: Final = ".lookup"
MAX_PROJECT_NAME: Final = 64 - len(_LONGEST_TOOL)
"""Tool names (``<name>.lookup``) must fit in 64 characters."""


class ScaffoldError(ValueError):
    """The name or the target directory is not usable (nothing was written).

    Args:
        code: ``NAME_INVALID`` (a usage error) or ``DIR_NOT_EMPTY``.
        message: what is wrong and what to do.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


_TOML: Final = Template('''\
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
secret = "api_token"
location = { type = "bearer" }
hosts = ["api.example.com"]
path_prefixes = ["/v1"]

[[tools]]
name = "$name.greet"
description = "Greet someone by name"
effect = "read"               # read | write | execute | external (write and up ask a person)
risk = "low"                  # low | medium | high
timeout_s = 5

# Schemas use a bounded JSON Schema subset: every object lists additionalProperties =
# false, properties and required (write required = [] when nothing is); every string
# needs maxLength, every number minimum and maximum, every array maxItems and items.
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

_PYTHON: Final = Template('''\
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

_JAVASCRIPT: Final = Template('''\
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

_TEST: Final = Template('''\
"""Tests for $name: a real Stockade host runs the plugin; only the network is scripted.

The harness builds the project, loads it with the egress policy, credential injection,
limits and audit all switched on, and answers HTTP from the routes below. Where the host
injected a secret, recorded requests show a placeholder such as <secret:api_token>.
"""

from pathlib import Path

import pytest

from sdk.harness import Harness, Response, route

PROJECT = Path(__file__).resolve().parents[1]
ITEM_7 = route("GET", "https://api.example.com/v1/items/7")


@pytest.fixture(scope="module")
def h():
    with Harness(PROJECT, secrets=["api_token"]) as harness:
        yield harness


@pytest.fixture(autouse=True)
def fresh(h):
    h.routes.clear()
    h.reset()


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
''')

_README: Final = Template('''\
# $name

A Stockade plugin ($language); its tools, egress and limits are declared in `stockade.toml`.

```sh
stockade build              # -> dist/$name-0.1.0/{manifest.json,module.wasm}
stockade test               # build, then run tests/ against a real host with scripted HTTP
stockade inspect dist/$name-0.1.0   # what the bundle may reach and do, as a reviewer sees it
stockade keygen --out signing.pem --keys-file trusted-keys.json   # once; never commit signing.pem
stockade sign dist/$name-0.1.0 --key signing.pem                  # prints the signature
stockade lock add dist/$name-0.1.0 --key signing.pem              # signed entry in ./stockade.lock
stockade lock verify --trusted-keys trusted-keys.json --require-signatures
```
```

- `stockade.toml` declares everything the host enforces: tools and their schemas,
  effects and permissions, the hosts and paths the plugin may reach, where credentials
  are injected, and its limits. The code cannot widen any of it.
- `$source` holds the tool functions (guest SDK: `tool`, `http`, `log`,
  `ToolError`, `ToolInputError`).
- `tests/test_tools.py` drives the tools through `sdk.harness.Harness`.
''')


_GITIGNORE: Final = (
    "# dist/<name>-<version>/ holds built bundles. stockade.lock pins them by path and digest,\n"
    "# so commit the bundles you lock together with the lock (or publish them).\n"
    "__pycache__/\n.pytest_cache/\n*.pem\n"
)


TEMPLATE_NAMES: Final = ("read-api", "write-with-approval", "compute")
"""``stockade new --template`` choices; ``read-api`` (the default) is defined above,
the others in :mod:`sdk._templates`."""


def render(name: str, language: Language, template: str = "read-api") -> dict[str, str]:
    """The files of a new project, ``{relative path: text}``.

    Raises:
        ScaffoldError: ``name`` is not a valid package name or too long, or the template
            is unknown.
    """
    _check_name(name)
    source = LANGUAGES[language]
    values = {"name": name, "language": language, "source": source}
    if template == "read-api":
        toml, code, test = _TOML, (_PYTHON if language == "python" else _JAVASCRIPT), _TEST
    elif template in TEMPLATES:
        parts = TEMPLATES[template]
        toml, code, test = parts["toml"], parts[language], parts["test"]
    else:
        choices = ", ".join(TEMPLATE_NAMES)
        raise ScaffoldError("TEMPLATE_UNKNOWN", f"unknown template {template!r}; one of {choices}")
    return {
        PROJECT_FILE: toml.substitute(values),
        source: code.substitute(values),
        "README.md": _README.substitute(values),
        "tests/test_tools.py": test.substitute(values),
        ".gitignore": _GITIGNORE,
    }


def _check_name(name: str) -> None:
    if not is_name(name):
        raise ScaffoldError(
            "NAME_INVALID",
            f"invalid package name {name!r}: use lowercase letters and digits, segments joined "
            "by '.', '_' or '-', starting with a letter (e.g. 'my-tools')"
        )
    if len(name) > MAX_PROJECT_NAME:
        raise ScaffoldError("NAME_INVALID", f"package name {name!r} is over {MAX_PROJECT_NAME} characters")


def scaffold_project(
    directory: Path, name: str, *, language: Language, template: str = "read-api"
) -> list[Path]:
    """Write a new project into ``directory`` (created; it must not hold anything yet).

    Args:
        directory: the project directory.
        name: the package name (also the prefix of every tool name).
        language: ``"python"`` or ``"javascript"``.
        template: one of :data:`TEMPLATE_NAMES`.

    Raises:
        ScaffoldError: invalid name, or ``directory`` exists and is not an empty directory.

    Returns:
        The files written, in order.
    """
    files = render(name, language, template)
    directory = Path(directory)
    if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
        raise ScaffoldError("DIR_NOT_EMPTY", f"{directory} exists and is not a directory")
    if directory.is_dir() and any(directory.iterdir()):
        raise ScaffoldError("DIR_NOT_EMPTY", f"{directory} is not empty")
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for rel, text in files.items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        create_exclusive(path, text.encode("utf-8"), mode=0o644)
        written.append(path)
    return written
