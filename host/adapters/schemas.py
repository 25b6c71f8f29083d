"""Model-facing tool schemas from the frozen registry.

OpenAI and Anthropic function names must match ``^[a-zA-Z0-9_-]{1,64}$``, so a tool
``tracker.list-issues`` at version ``1.2.0`` is offered as ``tracker__list-issues``; when
two versions of one tool are loaded, each name gets a version suffix
(``tracker__list-issues__v1_2_0``).

MCP names must match ``^[A-Za-z0-9_.-]{1,128}$`` (no ``@``): the dotted tool name, or
``tracker.list-issues_v1.2.0`` when two versions are loaded (characters outside the set,
such as SemVer's ``+``, become ``_``).

Names are unique by construction. A name that does not fit its format's length, or that
two tools would share (``1.0.0-a`` and ``1.0.0+a`` both sanitize to ``1_0_0_a``), is cut
to leave room for ``_`` and the first 12 hex digits of sha256(``name@version``):
deterministic, so the same registry always offers the same names. If two names still
coincide, :func:`check_model_names` refuses the registry (MANIFEST_INVALID) rather than
silently dropping a tool. :func:`resolve_model_name` maps a name the model used back to
the exact (tool, version); anything else is TOOL_NOT_FOUND. The schemas are the
manifest's, untouched; descriptions are kept.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any, Final, Literal, Protocol

from host.errors import ManifestInvalid, ToolNotFound
from host.formats.manifest import Effect
from host.formats.schemaprofile import PROFILE_EXTERNAL

__all__ = [
    "ToolFormat",
    "check_model_names",
    "mcp_annotations",
    "model_name",
    "resolve_model_name",
    "tool_schemas",
]

ToolFormat = Literal["openai", "anthropic", "mcp"]

_FORMATS: Final = ("openai", "anthropic", "mcp")
_MAX_LENGTH: Final = {"openai": 64, "anthropic": 64, "mcp": 128}
_NOT_ALLOWED: Final = {"openai": re.compile(r"[^a-zA-Z0-9_-]"), "mcp": re.compile(r"[^A-Za-z0-9_.-]")}
_DIGEST_CHARS: Final = 12


class _Tool(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def input_schema(self) -> Any: ...


def _base_name(tool: _Tool, *, versioned: bool, format: ToolFormat) -> str:
    if format == "mcp":
        name = f"{tool.name}_v{tool.version}" if versioned else tool.name
        return _NOT_ALLOWED["mcp"].sub("_", name)
    name = tool.name.replace(".", "__")
    if versioned:
        name += "__v" + re.sub(r"[^a-zA-Z0-9]", "_", tool.version)
    return _NOT_ALLOWED["openai"].sub("_", name)


def _with_digest(base: str, tool: _Tool, format: ToolFormat) -> str:
    digest = hashlib.sha256(f"{tool.name}@{tool.version}".encode()).hexdigest()[:_DIGEST_CHARS]
    return base[: _MAX_LENGTH[format] - _DIGEST_CHARS - 1] + "_" + digest


def model_name(tool: _Tool, *, versioned: bool, format: ToolFormat) -> str:
    """The name a model sees for ``tool`` in ``format`` when no other tool shares it."""
    base = _base_name(tool, versioned=versioned, format=format)
    return base if len(base) <= _MAX_LENGTH[format] else _with_digest(base, tool, format)


def _names(tools: Iterable[_Tool], format: ToolFormat) -> dict[str, _Tool]:
    tools = list(tools)
    versions = Counter(t.name for t in tools)
    bases = [model_name(t, versioned=versions[t.name] > 1, format=format) for t in tools]
    shared = Counter(bases)
    out: dict[str, _Tool] = {}
    for base, tool in zip(bases, tools, strict=True):
        name = base if shared[base] == 1 else _with_digest(base, tool, format)
        if name in out:
            raise ManifestInvalid(
                f"tools {out[name].name}@{out[name].version} and {tool.name}@{tool.version} "
                f"would both be offered to the model as {name!r}",
                hint="Rename one of the tools; two tools may not share a model-facing name.",
            )
        out[name] = tool
    return out


def check_model_names(registry: Iterable[_Tool]) -> None:
    """Refuse a registry in which two tools would share a model-facing name in any format.

    Raises:
        ManifestInvalid: naming both tools and the shared name.
    """
    tools = list(registry)
    for format in _FORMATS:
        _names(tools, format)


def mcp_annotations(tool: Any) -> dict[str, Any]:
    """MCP ``annotations`` derived from the manifest (never from the guest).

    ``readOnlyHint`` for ``read`` effects, ``destructiveHint`` for ``write``/``execute``,
    ``openWorldHint`` when the package may reach the network, ``title`` from the tool's
    exact identity. A pinned MCP source's tool is ``destructiveHint`` and ``openWorldHint``
    unless a reviewer pinned it as ``read`` (the server's own annotations are never trusted).
    """
    effect = Effect(tool.effect)
    http = getattr(tool.package, "http", None)
    if getattr(tool, "schema_profile", None) == PROFILE_EXTERNAL:
        # A pinned MCP source: the host cannot bound what the server does, so only the
        # reviewer's effect may narrow the hints (external, the unreviewed default, is the worst).
        return {
            "title": f"{tool.name} {tool.version}",
            "readOnlyHint": effect is Effect.READ,
            "destructiveHint": effect is not Effect.READ,
            "idempotentHint": False,
            "openWorldHint": True,  # a native process or a remote server may reach anything
        }
    return {
        "title": f"{tool.name} {tool.version}",
        "readOnlyHint": effect is Effect.READ,
        "destructiveHint": effect in (Effect.WRITE, Effect.EXECUTE),
        "idempotentHint": False,
        "openWorldHint": bool(http is not None and http.allow),
    }


def _mcp_entry(name: str, tool: _Tool) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": name,
        "title": f"{tool.name} {tool.version}",
        "description": tool.description,
        "inputSchema": tool.input_schema,
    }
    output = getattr(tool, "output_schema", None)
    if isinstance(output, dict) and output.get("type") == "object":
        entry["outputSchema"] = output  # MCP requires an object root; others are text only
    if hasattr(tool, "effect") and hasattr(tool, "package"):
        entry["annotations"] = mcp_annotations(tool)
    return entry


def tool_schemas(registry: Iterable[_Tool], format: ToolFormat) -> list[dict[str, Any]]:
    """Schemas for ``format`` in registry order.

    Raises:
        ValueError: unknown format (caller misuse).
        ManifestInvalid: two tools would share a name (see :func:`check_model_names`).
    """
    if format not in _FORMATS:
        raise ValueError(f"unknown tool format {format!r}; use openai, anthropic or mcp")
    out: list[dict[str, Any]] = []
    for name, tool in _names(registry, format).items():
        schema = dict(tool.input_schema)
        if format == "openai":
            out.append(
                {
                    "type": "function",
                    "function": {"name": name, "description": tool.description, "parameters": schema},
                }
            )
        elif format == "anthropic":
            out.append({"name": name, "description": tool.description, "input_schema": schema})
        else:
            out.append(_mcp_entry(name, tool))
    return out


def resolve_model_name(registry: Iterable[_Tool], format: ToolFormat, name: str) -> tuple[str, str]:
    """Map a model-facing name back to the exact (tool, version).

    Raises:
        ToolNotFound: no tool is offered under that name.
    """
    tool = _names(registry, format).get(name)
    if tool is None:
        raise ToolNotFound(f"no tool is offered to the model as {name!r}")
    return tool.name, tool.version
