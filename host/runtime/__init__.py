"""The sandbox runtime: engine, artifact cache, component checks, per-call sandbox (docs/design.md §2, §8).

Example::

    from host.runtime import Runtime, SandboxLimits

    with Runtime(config) as rt:
        component = rt.load(module, sha256=digest, name="tracker")
        result = rt.run(component, tool="tracker.list-issues", input_json="{}",
                        limits=SandboxLimits(fuel=10**9, memory_bytes=64 << 20,
                                             timeout_ms=5_000, max_log_bytes=65_536),
                        egress=DenyAllEgress(), secret_available=lambda name: False)
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

from host.runtime.models import (
    CacheStats,
    LogLine,
    ProgressEvent,
    SandboxLimits,
    SandboxResult,
    SandboxUsage,
)

if _typing.TYPE_CHECKING:
    from host.runtime.runtime import Runtime
    from host.runtime.sandbox import LoadedComponent, Preopen

# The engine's names are imported on first use (PEP 562): the data types above are what
# ``host.runtime.models`` users need (reports, MCP results, the CLI), and importing them
# must not load wasmtime, whose import is the largest single cost of the CLI's start-up.
_LAZY: dict[str, str] = {
    "LoadedComponent": "host.runtime.sandbox",
    "Preopen": "host.runtime.sandbox",
    "Runtime": "host.runtime.runtime",
}

__all__ = [
    "CacheStats",
    "LoadedComponent",
    "LogLine",
    "Preopen",
    "ProgressEvent",
    "Runtime",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUsage",
]


def __getattr__(name: str) -> object:
    """Import an engine name from its module on first access (see ``_LAZY``)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'host.runtime' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
