"""Model-facing tool schemas from the frozen registry.

OpenAI and Anthropic function names must match ``^[a-zA-Z0-9_-]{1,64}$``, so a tool
``tracker.list-issues`` at version ``1.2.0`` is offered as ``tracker__list-issues``; when
two versions of one tool are loaded, each name gets a version suffix
(``tracker__list-issues__v1_2_0``). :func:`resolve_model_name` maps a name the model
used back to the exact (tool, version); anything else is TOOL_NOT_FOUND. MCP names keep
the dotted form. The schemas are the manifest's, untouched; descriptions are kept.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any, Literal, Protocol

from host.errors import ToolNotFound

__all__ = ["ToolFormat", "model_name", "resolve_model_name", "tool_schemas"]

ToolFormat = Literal["openai", "anthropic", "mcp"]

_FUNCTION_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class _Tool(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def input_schema(self) -> Any: ...


def model_name(tool: _Tool, *, versioned: bool, format: ToolFormat) -> str:
    """The name a model sees for ``tool`` in ``format``."""
    if format == "mcp":
        return f"{tool.name}@{tool.version}" if versioned else tool.name
    name = tool.name.replace(".", "__")
    if versioned:
        name += "__v" + re.sub(r"[^a-zA-Z0-9]", "_", tool.version)
    if not _FUNCTION_NAME.match(name):
        name = name[:64]
    return name


def _names(tools: Iterable[_Tool], format: ToolFormat) -> dict[str, _Tool]:
    tools = list(tools)
    counts = Counter(t.name for t in tools)
    return {model_name(t, versioned=counts[t.name] > 1, format=format): t for t in tools}


def tool_schemas(registry: Iterable[_Tool], format: ToolFormat) -> list[dict[str, Any]]:
    """Schemas for ``format`` in registry order.

    Raises:
        ValueError: unknown format (caller misuse).
    """
    if format not in ("openai", "anthropic", "mcp"):
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
            out.append({"name": name, "description": tool.description, "inputSchema": schema})
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
