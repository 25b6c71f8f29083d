"""Pinning: connect to a declared server once and turn its tool list into a pin.

:func:`pin_source` starts the server exactly as a host would (same isolation, same
secrets), lists its tools, and for each one maps the server's name to a Stockade name
(:func:`~host.formats.mcppin.stockade_tool_name`; a collision refuses both tools) and
checks the schemas against the external profile (:mod:`host.formats.schemaprofile`) by building
the synthetic manifest a host will build. A tool that fails is *refused* (kept in the
pin's ``refused`` list with every reason) rather than loosened; the others are pinned
with the reviewer's effect and risk (default ``external``/``high``) and, if given, the
reviewer's tighter input schema.

Example::

    result = pin_source(decl, state_dir=d, secrets=store, review={"read": (Effect.READ, Risk.LOW)})
    result.pin.tools, result.refused
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, final

from host.canonical import canonical_json
from host.config import DEFAULT_CEILINGS, Ceilings
from host.errors import ManifestInvalid, SchemaInvalid
from host.formats.manifest import Effect, Risk, is_name
from host.formats.mcppin import (
    PIN_FORMAT,
    McpDeclaration,
    McpPin,
    PinnedTool,
    RefusedTool,
    definition_of,
    pinned_manifest,
    stockade_tool_name,
    tool_digest,
)
from host.formats.schemaprofile import check_external
from host.mcpsource.rpc import McpNetwork
from host.mcpsource.source import probe
from host.secrets.redact import Redactor
from host.secrets.store import SecretsStore

__all__ = ["PinResult", "pin_source", "pin_tools"]

_PLACEHOLDER_DIGEST = "0" * 64  # the real pin digest is only known once the pin is written


@final
@dataclass(frozen=True, slots=True)
class PinResult:
    """A pin, the tools it refused (also kept in ``pin.refused``) and how many the server listed."""

    pin: McpPin
    refused: tuple[RefusedTool, ...]
    listed: int

    def summary(self) -> str:
        """``N of M tools pinned`` (the line ``add-mcp`` always prints)."""
        return f"{len(self.pin.tools)} of {self.listed} tools pinned"


def _problems(exc: Exception) -> list[str]:
    if isinstance(exc, ManifestInvalid):
        problems = exc.details.get("problems") or [{"msg": exc.message}]
        return [str(p.get("msg"))[:400] for p in problems][:16]
    return [str(exc).splitlines()[-1][:400]]


def _names(decl: McpDeclaration, names: list[str]) -> dict[str, list[str]]:
    """Problems of each server name: duplicates, unmappable names, collisions after mapping."""
    problems: dict[str, list[str]] = {name: [] for name in names}
    mapped: dict[str, list[str]] = {}
    for name in set(names):
        if names.count(name) > 1:
            problems[name].append("listed more than once by the server")
        local = stockade_tool_name(name)
        if not is_name(f"{decl.name}.{local}"):
            problems[name].append(
                f"{name[:80]!r} maps to {local[:80]!r}, which is not a Stockade tool name "
                "(lowercase letters, digits and separators, starting with a letter, at most 64 characters)"
            )
        mapped.setdefault(local, []).append(name)
    for local, group in mapped.items():
        if len(group) > 1:
            for name in group:
                others = ", ".join(repr(o) for o in sorted(group) if o != name)
                problems[name].append(
                    f"{name!r} and {others} both map to {decl.name}.{local}; both are refused"
                )
    return problems


def _schema_problems(definition: Mapping[str, Any]) -> list[str]:
    found = []
    for key, root in (("inputSchema", True), ("outputSchema", False)):
        schema = definition.get(key)
        if schema is None and not root:
            continue
        try:
            check_external(schema, root_object=root)
        except SchemaInvalid as exc:
            where = f"{key} at {exc.details.get('pointer')!r} ({exc.details.get('rule')})"
            found.append(f"{where}: {exc.message}"[:400])
    return found


def _review_problems(schema: Mapping[str, Any]) -> list[str]:
    text = canonical_json(schema).decode("utf-8")
    if '"$ref"' in text or '"$defs"' in text or '"definitions"' in text:
        return ["the review schema may not use $ref or $defs (it joins the server's schema at its root)"]
    return []


def pin_tools(
    decl: McpDeclaration,
    live: list[Mapping[str, Any]],
    *,
    review: Mapping[str, tuple[Effect, Risk]],
    review_schemas: Mapping[str, Mapping[str, Any]] | None = None,
    ceilings: Ceilings = DEFAULT_CEILINGS,
) -> PinResult:
    """Pin the tools of a live list (see the module docstring).

    Every problem of every tool is reported (``RefusedTool.reasons``), not only the first.

    Raises:
        ValueError: ``review`` or ``review_schemas`` names a tool the server does not list
            (caller misuse).
    """
    tightened = dict(review_schemas or {})
    names = [str(t.get("name"))[:128] for t in live]
    unknown = sorted((set(review) | set(tightened)) - set(names))
    if unknown:
        raise ValueError(f"--review/--schema name tools the server does not list: {', '.join(unknown)}")
    name_problems = _names(decl, names)
    pinned: list[PinnedTool] = []
    refused: list[RefusedTool] = []
    done: set[str] = set()
    for tool, name in zip(live, names, strict=True):
        if name in done:
            continue
        done.add(name)
        local = f"{decl.name}.{stockade_tool_name(name)}"
        reasons = list(name_problems[name])
        effect, risk = review.get(name, (Effect.EXTERNAL, Risk.HIGH))
        definition = definition_of(tool)
        review_schema = dict(tightened[name]) if name in tightened else None
        if review_schema is not None:
            reasons.extend(_review_problems(review_schema))
        candidate: PinnedTool | None = None
        if reasons:  # the name cannot be pinned; report the schemas' problems too
            reasons.extend(_schema_problems(definition))
        else:
            try:
                candidate = PinnedTool(
                    name=name, tool=local, digest=tool_digest(definition), definition=definition,
                    effect=effect, risk=risk, review_schema=review_schema,
                )
                pinned_manifest(decl, [candidate], _PLACEHOLDER_DIGEST, ceilings=ceilings)
            except (ManifestInvalid, ValueError) as exc:  # ValueError: pydantic, a name outside the rules
                reasons.extend(_problems(exc))
        if reasons or candidate is None:
            kept = tuple(reasons[:16]) or ("refused",)
            refused.append(RefusedTool(name=name, tool=local[:200], reasons=kept))
            continue
        pinned.append(candidate)
    pin = McpPin(format=PIN_FORMAT, source=decl, tools=tuple(pinned), refused=tuple(refused))
    return PinResult(pin=pin, refused=tuple(refused), listed=len(live))


def pin_source(
    decl: McpDeclaration,
    *,
    state_dir: Path,
    secrets: SecretsStore | None,
    review: Mapping[str, tuple[Effect, Risk]],
    review_schemas: Mapping[str, Mapping[str, Any]] | None = None,
    ceilings: Ceilings = DEFAULT_CEILINGS,
    network: McpNetwork | None = None,
    progress: Callable[[str], None] | None = None,
) -> PinResult:
    """Start the declared server (or open its HTTP session) once, list its tools, pin them, stop.

    ``network`` is how an HTTP source is reached (default: the system resolver and trust
    store, no loopback), through the same egress rules a host applies.

    Everything the result holds and every error is scrubbed of the secrets the server was
    given: a tool whose definition holds one is refused, never pinned.

    Raises:
        McpUnavailable, McpTimeout, CredentialUnavailable: the server cannot be reached.
        EgressDenied, EgressUnreachable: an HTTP endpoint refused by the egress rules.
        ValueError: ``review`` names an unknown tool.
    """
    say = progress or (lambda _text: None)
    where = decl.transport.command if decl.transport.type == "stdio" else decl.transport.url
    say(f"starting MCP server {decl.name} ({decl.transport.type}: {where[:200]}) and listing its tools")
    live, scrub = probe(decl, state_dir=state_dir, secrets=secrets, network=network)
    result = pin_tools(decl, live, review=review, review_schemas=review_schemas, ceilings=ceilings)
    return _without_secrets(result, scrub)


_LEAK_REASON: Final = "its definition holds a secret the server was given"


def _without_secrets(result: PinResult, scrub: Redactor) -> PinResult:
    """Refuse every tool whose definition holds a secret the server was given (a pin is
    shown to reviewers and written to the lock); scrub what the refusals quote."""
    if scrub.empty:
        return result
    kept = tuple(t for t in result.pin.tools if scrub.json_value(dict(t.definition)) == t.definition)
    leaked = tuple(
        RefusedTool(name=scrub.text(t.name), tool=t.tool, reasons=(_LEAK_REASON,))
        for t in result.pin.tools
        if t not in kept
    )
    refused = tuple(
        RefusedTool(
            name=scrub.text(r.name), tool=scrub.text(r.tool), reasons=tuple(map(scrub.text, r.reasons))
        )
        for r in result.refused
    )
    everything = (*refused, *leaked)
    pin = McpPin(format=PIN_FORMAT, source=result.pin.source, tools=kept, refused=everything)
    return PinResult(pin=pin, refused=everything, listed=result.listed)
