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

from host.runtime.models import (
    CacheStats,
    LogLine,
    ProgressEvent,
    SandboxLimits,
    SandboxResult,
    SandboxUsage,
)
from host.runtime.runtime import Runtime
from host.runtime.sandbox import LoadedComponent, Preopen

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
