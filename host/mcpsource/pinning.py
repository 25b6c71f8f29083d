"""Pinning: connect to a declared server once and turn its tool list into a pin (issue 15).

:func:`pin_source` starts the server exactly as a host would (same isolation, same
secrets), lists its tools, and for each one checks the namespaced name and the schemas
against Stockade's rules by building the synthetic manifest a host will build. A tool
that fails is *refused* (listed with the reason) rather than loosened; the others are
pinned with the reviewer's effect and risk (default ``external``/``high``).

Example::

    result = pin_source(decl, state_dir=d, secrets=store, review={"read": (Effect.READ, Risk.LOW)})
    result.pin.tools, result.refused
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, final

from host.config import DEFAULT_CEILINGS, Ceilings
from host.errors import ManifestInvalid
from host.manifest import Effect, Risk
from host.mcpsource.pin import (
    PIN_FORMAT,
    McpDeclaration,
    McpPin,
    PinnedTool,
    definition_of,
    pinned_manifest,
    tool_digest,
)
from host.mcpsource.rpc import McpNetwork
from host.mcpsource.source import probe
from host.redact import Redactor
from host.secrets import SecretsStore

__all__ = ["PinResult", "pin_source", "pin_tools"]

_PLACEHOLDER_DIGEST = "0" * 64  # the real pin digest is only known once the pin is written


@final
@dataclass(frozen=True, slots=True)
class PinResult:
    """A pin and the tools that could not be pinned (``{"name", "reason"}`` each)."""

    pin: McpPin
    refused: tuple[dict[str, str], ...]


def pin_tools(
    decl: McpDeclaration,
    live: list[Mapping[str, Any]],
    *,
    review: Mapping[str, tuple[Effect, Risk]],
    ceilings: Ceilings = DEFAULT_CEILINGS,
) -> PinResult:
    """Pin the tools of a live list (see the module docstring).

    Raises:
        ValueError: ``review`` names a tool the server does not list (caller misuse).
    """
    names = [str(t.get("name")) for t in live]
    unknown = sorted(set(review) - set(names))
    if unknown:
        raise ValueError(f"--review names tools the server does not list: {', '.join(unknown)}")
    pinned: list[PinnedTool] = []
    refused: list[dict[str, str]] = []
    for tool, name in zip(live, names, strict=True):
        if names.count(name) > 1:
            refused.append({"name": name[:128], "reason": "listed more than once"})
            continue
        effect, risk = review.get(name, (Effect.EXTERNAL, Risk.HIGH))
        definition = definition_of(tool)
        try:
            candidate = PinnedTool(
                name=name, tool=f"{decl.name}.{name}", digest=tool_digest(definition),
                definition=definition, effect=effect, risk=risk,
            )
            pinned_manifest(decl, [candidate], _PLACEHOLDER_DIGEST, ceilings=ceilings)
        except ManifestInvalid as exc:
            problems = exc.details.get("problems") or [{"msg": exc.message}]
            refused.append({"name": name[:128], "reason": str(problems[0].get("msg"))[:300]})
            continue
        except ValueError as exc:  # pydantic: a name outside the rules
            refused.append({"name": name[:128], "reason": str(exc).splitlines()[-1][:300]})
            continue
        pinned.append(candidate)
    pin = McpPin(format=PIN_FORMAT, source=decl, tools=tuple(pinned))
    return PinResult(pin=pin, refused=tuple(refused))


def pin_source(
    decl: McpDeclaration,
    *,
    state_dir: Path,
    secrets: SecretsStore | None,
    review: Mapping[str, tuple[Effect, Risk]],
    ceilings: Ceilings = DEFAULT_CEILINGS,
    network: McpNetwork | None = None,
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
    live, scrub = probe(decl, state_dir=state_dir, secrets=secrets, network=network)
    return _without_secrets(pin_tools(decl, live, review=review, ceilings=ceilings), scrub)


def _without_secrets(result: PinResult, scrub: Redactor) -> PinResult:
    """Refuse every tool whose definition holds a secret the server was given (a pin is
    shown to reviewers and written to the lock); scrub what the refusals quote."""
    if scrub.empty:
        return result
    kept = tuple(t for t in result.pin.tools if scrub.json_value(dict(t.definition)) == t.definition)
    leaked = [{"name": scrub.text(t.name), "reason": "its definition holds a secret the server was given"}
              for t in result.pin.tools if t not in kept]
    refused = [{k: scrub.text(v) for k, v in r.items()} for r in result.refused]
    pin = McpPin(format=PIN_FORMAT, source=result.pin.source, tools=kept)
    return PinResult(pin=pin, refused=(*refused, *leaked))
