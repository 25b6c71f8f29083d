"""Reviewing MCP sources: the inspect report, lock-diff changes and pin drift.

Nothing here connects to a server except :func:`live_drift` (used by
``stockade lock add-mcp --dry-run``), which starts it as a host would.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from host.canonical import canonical_json
from host.config import Ceilings
from host.formats.mcppin import (
    PIN_FORMAT,
    McpDeclaration,
    McpPin,
    PinnedSource,
    isolation_text,
    load_pinned_sources,
    tool_unbounded,
)
from host.mcpsource.hosting import binding_digests
from host.secrets.store import SecretsStore
from host.trust.lock import PackageLock, TrustedKeys
from sdk.review._manifestdiff import Change

if TYPE_CHECKING:  # the MCP client stack (bwrap, seccomp) loads only to probe a live server
    from host.mcpsource.source import ToolDrift

__all__ = ["live_drift", "mcp_changes", "mcp_report", "pinned_sources"]

_RISK = {"low": 0, "medium": 1, "high": 2}


def pinned_sources(
    lock_path: Path,
    lock: PackageLock,
    *,
    keys: TrustedKeys | None,
    require_signatures: bool,
    ceilings: Ceilings,
) -> tuple[PinnedSource, ...]:
    """Verify every MCP source of a lock (digests, signatures, pins)."""
    return load_pinned_sources(
        lock_path, lock.mcp, ceilings=ceilings, require_signatures=require_signatures, keys=keys
    )


def mcp_report(sources: Sequence[PinnedSource]) -> list[dict[str, Any]]:
    """What each pinned source is, receives and offers (``stockade inspect``)."""
    report = []
    for source in sources:
        decl, entry = source.pin.source, source.entry
        transport = decl.transport.identity()  # sandbox fields only when not native
        bindings = binding_digests([source])  # what a user's allow of each tool is bound to
        report.append({
            "name": decl.name,
            "version": decl.version,
            "pin": entry.pin,
            "pin_sha256": entry.pin_sha256,
            "signature": {"signed": entry.signature is not None, "key_id": entry.key_id},
            "transport": transport,
            "env": sorted(decl.env),
            "secrets": [
                {"secret": s.secret, "delivered_as": f"env {s.env}" if s.env else f"header {s.header}"}
                for s in decl.secrets
            ],
            "limits": decl.limits.model_dump(mode="json"),
            "isolation": isolation_text(decl),
            "refused": [r.model_dump(mode="json") for r in source.pin.refused],
            "tools": [
                {
                    "name": t.tool,
                    "remote": t.name,
                    "effect": t.effect.value,
                    "risk": t.risk.value,
                    "digest": t.digest,
                    "binding_digest": bindings[(t.tool, decl.version)],
                    "schema_profile": t.schema_profile,
                    "tightened": t.review_schema is not None,
                    "unbounded": tool_unbounded(t),
                    "description": t.definition.get("description"),
                    "input": t.definition.get("inputSchema"),
                    "output": t.definition.get("outputSchema"),
                    "annotations": t.definition.get("annotations"),
                }
                for t in source.pin.tools
            ],
        })
    return report


def live_drift(
    decl: McpDeclaration, current: McpPin, *, state_dir: Path, secrets: SecretsStore | None
) -> list[ToolDrift]:
    """Start the declared server once and compare its live tools with ``current`` (scrubbed
    of the secrets the server was given)."""
    from host.mcpsource.source import compare, probe, scrub_drift  # noqa: PLC0415

    live, scrub = probe(decl, state_dir=state_dir, secrets=secrets)  # errors come scrubbed
    return [scrub_drift(d, scrub) for d in compare(current, live)[1]]


def mcp_changes(old: Sequence[PinnedSource], new: Sequence[PinnedSource]) -> Iterator[Change]:
    """Lock-diff changes of MCP sources; new sources, tools, transports, secrets, changed
    descriptions or schemas and higher effect or risk escalate."""
    olds = {s.pin.source.name: s.pin for s in old}
    news = {s.pin.source.name: s.pin for s in new}
    for name in sorted(olds.keys() | news.keys()):
        before, after = olds.get(name), news.get(name)
        if after is None:
            yield Change("mcp.source.removed", name, f"MCP source {name} removed", False)
            continue
        if before is None:
            yield Change("mcp.source.added", name, f"new MCP source {name} ({_where(after.source)})", True)
            before = McpPin(format=PIN_FORMAT, source=after.source, tools=())
        yield from _source_changes(name, before, after)


def _where(decl: McpDeclaration) -> str:
    t = decl.transport
    return " ".join([t.command, *t.args]) if t.type == "stdio" else t.url


def _source_changes(name: str, before: McpPin, after: McpPin) -> Iterator[Change]:
    a, b = before.source, after.source
    if _where(a) != _where(b):
        detail = f"transport {_where(a)} → {_where(b)}"
        yield Change("mcp.transport", name, detail, True, old=_where(a), new=_where(b))
    if a.env != b.env:
        yield Change("mcp.env", name, "environment changed", True, old=sorted(a.env), new=sorted(b.env))
    old_secrets = {s.model_dump_json() for s in a.secrets}
    for s in b.secrets:
        if s.model_dump_json() not in old_secrets:
            place = f"env {s.env}" if s.env else f"header {s.header}"
            yield Change("mcp.secret", name, f"secret {s.secret} sent as {place}", True, new=s.secret)
    for limit, value in b.limits.model_dump().items():
        old_value = a.limits.model_dump().get(limit)
        if old_value != value:
            raised = value is None or (old_value is not None and value > old_value)
            detail = f"limits.{limit} {old_value} → {value}"
            yield Change("mcp.limit", name, detail, raised, old=old_value, new=value)
    yield from _tool_changes(name, before, after)


def _tool_changes(name: str, before: McpPin, after: McpPin) -> Iterator[Change]:
    olds = {t.name: t for t in before.tools}
    for tool in after.tools:
        old = olds.pop(tool.name, None)
        if old is None:
            detail = f"new tool ({tool.effect.value}, {tool.risk.value})"
            yield Change("mcp.tool.added", name, detail, True, tool=tool.tool)
            continue
        for key, value in tool.definition.items():
            if canonical_json(value) != canonical_json(old.definition.get(key)):
                yield Change("mcp.tool.definition", name, f"{key} changed", True, tool=tool.tool,
                             old=old.definition.get(key), new=value)
        if canonical_json(tool.review_schema) != canonical_json(old.review_schema):
            # The reviewer's tightened schema: dropping or changing it may loosen what is accepted.
            yield Change("mcp.tool.review_schema", name, "reviewer's tightened schema changed", True,
                         tool=tool.tool, old=old.review_schema, new=tool.review_schema)
        opened = sorted(set(tool_unbounded(tool)) - set(tool_unbounded(old)))
        if opened:
            detail = f"newly unbounded: {'; '.join(opened)[:400]}"
            yield Change("mcp.tool.unbounded", name, detail, True, tool=tool.tool, new=opened)
        if tool.effect != old.effect:
            # Any effect change escalates, as for package tools (a "read" tool never asks).
            yield Change("mcp.tool.effect", name, f"effect {old.effect.value} → {tool.effect.value}", True,
                         tool=tool.tool, old=old.effect.value, new=tool.effect.value)
        if tool.risk != old.risk:
            up = _RISK[tool.risk.value] > _RISK[old.risk.value]
            yield Change("mcp.tool.risk", name, f"risk {old.risk.value} → {tool.risk.value}", up,
                         tool=tool.tool, old=old.risk.value, new=tool.risk.value)
    for gone in olds.values():
        yield Change("mcp.tool.removed", name, "tool removed", False, tool=gone.tool)
