"""Handler registry and the world's ``call`` export.

``@tool(name)`` registers a plain function at import time. The module is imported while
componentize-py pre-initialises the component, so the registry is part of the snapshot
and every call starts from it (a fresh instance per call: module state never carries
over).

``call(tool, input)`` never lets an exception escape: an uncaught Python exception
traps a componentize-py instance (the call ends in a trap, with no message the host could
return), so every failure becomes a ``tool-error``.
An unexpected exception's traceback is written to the call's log at level error, after
the line ``[stockade:traceback]`` (the host puts it in ``error.details["guest_traceback"]`` with
``HostConfig(debug_guest_errors=True)``, docs/authors.md).
"""

from __future__ import annotations

import json
import re
import traceback

from stockade._bindings import Err, WorldProtocol, host, types
from stockade.errors import ToolError, ToolInputError

__all__ = ["WitWorld", "call", "check_tools", "registered_tools", "tool"]

_NAME = re.compile(r"[a-z][a-z0-9]*(?:[._-][a-z0-9]+)*")
_MAX_NAME = 64
_MAX_MESSAGE = 1024
_HANDLERS = {}
TRACEBACK_MARKER = "[stockade:traceback]"


def tool(name):
    """Register the decorated function as the handler of tool ``name``.

    The handler takes the tool's input (a JSON value, an object for every tool) and
    returns a JSON-able value (dict, list, str, int, float, bool or None).

    Raises:
        ValueError: the name is not a valid tool name or already has a handler.
        TypeError: used as ``@tool`` without a name.
    """
    if callable(name):
        raise TypeError('use @tool("package.tool-name"), with the tool\'s name')
    if not isinstance(name, str) or len(name) > _MAX_NAME or not _NAME.fullmatch(name):
        raise ValueError(f"invalid tool name {name!r}: lowercase segments like 'tracker.list-issues'")
    if name in _HANDLERS:
        raise ValueError(f"tool {name!r} already has a handler")

    def register(fn):
        if not callable(fn):
            raise TypeError("@tool must decorate a function")
        _HANDLERS[name] = fn
        return fn

    return register


def registered_tools():
    """The names of the registered tools, sorted."""
    return sorted(_HANDLERS)


def check_tools(expected):
    """Fail the build unless the handlers are exactly the manifest's tools.

    Called by the entry module the build generates, during pre-initialisation.

    Raises:
        RuntimeError: a manifest tool has no handler, or a handler no manifest entry.
    """
    missing = sorted(set(expected) - set(_HANDLERS))
    extra = sorted(set(_HANDLERS) - set(expected))
    if missing or extra:
        raise RuntimeError(
            f"handlers do not match stockade.toml: no handler for {missing}, not in stockade.toml: {extra}"
        )


def _short(text):
    text = str(text)
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def _describe(exc):
    if isinstance(exc, ToolError):
        return _short(exc) or type(exc).__name__
    if isinstance(exc, MemoryError):
        # Exact text: the host maps it to SANDBOX_MEMORY (host.runtime.sandbox.GUEST_OUT_OF_MEMORY).
        return "out of memory (MemoryError)"
    detail = str(exc)
    return _short(f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__)


def _invoke(handler, input_text):
    """Run one handler; returns ``(ok, text)``; never raises."""
    try:
        value = json.loads(input_text)
    except ValueError:
        return False, types.ToolError_InvalidInput("input is not valid JSON")
    try:
        result = handler(value)
        return True, json.dumps(result, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ToolInputError as exc:
        return False, types.ToolError_InvalidInput(_describe(exc))
    except BaseException as exc:  # an escaping exception aborts the instance
        # Includes output json.dumps refuses (TypeError/ValueError) and MemoryError.
        _log_traceback(exc)
        return False, types.ToolError_Failed(_describe(exc))


def _log_traceback(exc):
    """Log an unexpected exception's traceback for the author; never raises."""
    if isinstance(exc, (ToolError, MemoryError)):
        return
    try:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        host.log(types.LogLevel.ERROR, f"{TRACEBACK_MARKER}\n{text}")
    except BaseException:  # noqa: S110 - the tool error is what matters; the log is a bonus
        pass


def call(tool_name, input_text):
    """Dispatch one call: JSON text in, JSON text out, or ``Err(tool-error)``."""
    handler = _HANDLERS.get(tool_name)
    if handler is None:
        raise Err(types.ToolError_InvalidInput(_short(f"unknown tool {tool_name!r}")))
    try:
        ok, payload = _invoke(handler, input_text)
    except BaseException:  # even building the error text may fail (MemoryError)
        ok, payload = False, types.ToolError_Failed("out of memory (MemoryError)")
    if ok:
        return payload
    raise Err(payload)


class WitWorld(WorldProtocol):
    """The world's export; the generated entry module re-exports this class."""

    def call(self, tool, input):  # the WIT parameter is named input
        return call(tool, input)
