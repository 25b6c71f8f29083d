"""Wiring pinned MCP sources into a :class:`host.Host` (kept out of ``gateway.py``).

:func:`registry_items` turns verified sources into (manifest, binding) pairs for the
frozen registry; :func:`start_sources` starts every server once at ``Host.open`` (a
server that fails is recorded and retried on the first call); :func:`invoke` runs one
call of a pinned tool and returns a :class:`~host.runtime.SandboxResult`, so the rest of
the pipeline (output schema, budget, scrubbing, audit) is the one Wasm tools use.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from host.canonical import parse_json
from host.formats.manifest import PackageManifest
from host.formats.mcppin import PinnedSource
from host.mcpsource.rpc import McpNetwork
from host.policy.bindings import mcp_binding
from host.runtime import SandboxResult, SandboxUsage
from host.secrets.store import SecretsStore
from host.trust.registry import Binding

if TYPE_CHECKING:  # McpSource: the client stack (bwrap, seccomp, stdio) loads only for a lock with sources
    from host.mcpsource.source import McpSource
    from host.store.port import AuditSink

__all__ = ["invoke", "registry_items", "start_sources"]


def registry_items(
    sources: Sequence[PinnedSource], generation: int
) -> Iterator[tuple[PackageManifest, Binding]]:
    """The registry entries of every pinned tool; the binding's module digest is the pin's."""
    for source in sources:
        entry = source.entry
        digest = entry.pin_sha256
        yield source.manifest, Binding(entry.name, entry.version, generation, digest, digest)


def binding_digests(sources: Sequence[PinnedSource]) -> dict[tuple[str, str], str]:
    """``{(tool, version): binding digest}`` of every pinned tool (:mod:`host.policy.bindings`):
    the transport's identity and the pinned definition digest, no secrets, env or limits."""
    out: dict[tuple[str, str], str] = {}
    for source in sources:
        decl = source.pin.source
        transport = decl.transport.identity()
        for tool in source.pin.tools:
            out[(tool.tool, decl.version)] = mcp_binding(
                tool.tool, transport=transport, definition_sha256=tool.digest,
                effect=tool.effect, risk=tool.risk,
            )
    return out


def start_sources(
    sources: Sequence[PinnedSource],
    *,
    state_dir: Path,
    secrets: SecretsStore | None,
    audit: AuditSink,
    network: McpNetwork | None = None,
) -> dict[str, McpSource]:
    """Start every source and run its rug-pull check (never raises for a failing server).

    ``network`` is how HTTP sources are reached (the host's resolver, CA file, loopback opt-in).
    """
    if not sources:
        return {}
    from host.mcpsource.source import McpSource  # noqa: PLC0415 - see the TYPE_CHECKING import

    started: dict[str, McpSource] = {}
    for pinned in sources:
        source = McpSource(pinned, state_dir=state_dir, secrets=secrets, audit=audit, network=network)
        source.connect()
        started[source.name] = source
    return started


def invoke(
    source: McpSource,
    tool: str,
    canonical_input: bytes,
    *,
    timeout_s: float,
    cancel: threading.Event | None = None,
) -> SandboxResult:
    """Call ``tool`` of ``source`` with the canonical input (already checked against the pin).

    Raises:
        Busy, CallCancelled, McpToolChanged, McpTimeout, McpUnavailable, ToolFailed,
        OutputInvalid, CredentialUnavailable, EgressDenied: see :meth:`McpSource.call`.
    """
    started = time.monotonic()
    arguments = parse_json(canonical_input)
    mapping = arguments if isinstance(arguments, Mapping) else {}
    output = source.call(tool, mapping, timeout_s=timeout_s, cancel=cancel)
    wall_ms = (time.monotonic() - started) * 1000
    usage = SandboxUsage(fuel_consumed=0, wall_ms=wall_ms, log_bytes=0, log_truncated=False)
    return SandboxResult(output=output, log=(), usage=usage)
