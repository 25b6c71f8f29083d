"""``stockade.scope/1``: a person's grant, ahead of time, of exact tool calls to one unattended job.

A scope names its principal (project, subject), optionally one session, the job it is
for, who issued it and when, a hard end (``not_after``), the lock generation it was
issued under and, per exact (tool, version), the tool's binding identity
(:func:`tool_identity`), a call count and optionally the input digests it covers, plus a
count over all its tools. It only ever discharges *ask* (docs/design.md §6 step 4).

A scope is a signed statement (tag ``stockade/scope@1``, :func:`scope_statement`) by an
approver key (:mod:`host.approverkey`): the state store holds it and counts its uses,
but a row written into the store without the approver's private key covers nothing.

:func:`build_scope` is the one constructor: it refuses, at issue, a ``not_after`` that
is not finite, not in the future or past the host's ceiling (default 24 h), a count
below 1, a duplicate tool and a malformed input digest (``SCOPE_INVALID``). Unknown
tools are refused by the caller that holds the registry (:func:`host.scopes.issue`).

Example::

    scope = build_scope(project="p", subject="ci-bot", job="nightly", issued_by="alice",
                        tools=[ScopeTool(tool="tracker.create-issue", version="1.2.0",
                                         identity=..., max_calls=5)],
                        for_s=7200, lock_generation=3)
"""

from __future__ import annotations

import json
import math
import secrets
import time
from collections.abc import Sequence
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from host.canonical import digest_json
from host.errors import ScopeInvalid
from host.signing import STATEMENT_SCOPE, signed_statement

__all__ = [
    "DEFAULT_CEILING_S",
    "FORMAT",
    "MAX_CALLS",
    "MAX_INPUTS",
    "MAX_TOOLS",
    "Scope",
    "ScopePrincipal",
    "ScopeTool",
    "SignedScope",
    "build_scope",
    "new_scope_id",
    "scope_statement",
    "scope_tool",
    "tool_identity",
]

FORMAT: Final = "stockade.scope/1"
IDENTITY_DOMAIN: Final = "stockade/scope-tool@1"
DEFAULT_CEILING_S: Final = 24 * 3600.0  # s: the longest a scope may live (the host ceiling's default)
MAX_TOOLS: Final = 64  # (tool, version) entries in one scope
MAX_INPUTS: Final = 256  # input digests one tool entry may name
MAX_CALLS: Final = 1_000_000  # calls one scope (or one of its tools) may allow
_HEX64 = r"^[0-9a-f]{64}$"
_ID = r"^scope_[0-9a-f]{32}$"
# defer_build: validators are built on first use, not at import (CLI start-up time):
# scopes are validated only when a job presents or a person grants one.
_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)

_Name = Annotated[str, Field(min_length=1, max_length=256)]
_Count = Annotated[int, Field(ge=1, le=MAX_CALLS)]
_Time = Annotated[float, Field(allow_inf_nan=False, ge=0)]
_Inputs = Annotated[
    tuple[Annotated[str, Field(pattern=_HEX64)], ...], Field(min_length=1, max_length=MAX_INPUTS)
]


class ScopePrincipal(BaseModel):
    """Who may redeem the scope: exactly this (project, subject)."""

    model_config = _STRICT

    project: Annotated[str, Field(min_length=1, max_length=128)]
    subject: _Name


class ScopeTool(BaseModel):
    """One exact (tool, version) the scope covers, bound to its binding identity."""

    model_config = _STRICT

    tool: Annotated[str, Field(min_length=1, max_length=64)]
    version: Annotated[str, Field(min_length=1, max_length=128)]
    identity: Annotated[str, Field(pattern=_HEX64)]
    max_calls: _Count
    inputs: _Inputs | None = None

    @property
    def key(self) -> str:
        """``tool@version`` (how counts are kept per tool)."""
        return f"{self.tool}@{self.version}"


class Scope(BaseModel):
    """The signed part of a scope (the module docstring)."""

    model_config = _STRICT

    format: Literal["stockade.scope/1"]
    id: Annotated[str, Field(pattern=_ID)]
    principal: ScopePrincipal
    session: _Name | None = None
    job: Annotated[str, Field(min_length=1, max_length=128)]
    issued_by: _Name
    issued_at: _Time
    not_after: _Time
    lock_generation: Annotated[int, Field(ge=0)]
    tools: Annotated[tuple[ScopeTool, ...], Field(min_length=1, max_length=MAX_TOOLS)]
    max_calls_total: _Count

    def tool_entry(self, tool: str, version: str) -> ScopeTool | None:
        """The entry of exactly (tool, version), or ``None``."""
        return next((t for t in self.tools if (t.tool, t.version) == (tool, version)), None)


class SignedScope(BaseModel):
    """A scope and the approver signature over :func:`scope_statement` of it."""

    model_config = _STRICT

    scope: Scope
    signature: Annotated[str, Field(pattern=r"^[A-Za-z0-9+/]{86}==$")]
    key_id: Annotated[str, Field(pattern=r"^[0-9a-f]{16}$")]

    @classmethod
    def from_json(cls, data: bytes | str) -> SignedScope:
        """Parse a stored scope.

        Raises:
            ScopeInvalid: not a ``stockade.scope/1`` document (the format named).
        """
        try:
            return cls.model_validate_json(data)
        except ValidationError as exc:
            given = _format_of(data)
            if given is not None and given != FORMAT:
                raise ScopeInvalid(
                    f"unknown scope format {given[:64]!r}: this host reads {FORMAT}",
                    hint="Grant the scope again with this Stockade (`stockade scopes grant`).",
                    format=given[:64],
                ) from None
            raise ScopeInvalid(
                f"not a valid {FORMAT} scope ({exc.error_count()} problems)",
                hint="A scope is issued with `stockade scopes grant`; it is never edited by hand.",
            ) from None


def _format_of(data: bytes | str) -> str | None:
    """The ``scope.format`` a stored document claims, if it is readable at all."""
    try:
        value = json.loads(data)["scope"]["format"]
    except (ValueError, TypeError, KeyError):
        return None
    return value if isinstance(value, str) else None


def scope_tool(
    tool: str, version: str, *, identity: str, max_calls: object, inputs: Sequence[str] | None = None
) -> ScopeTool:
    """One tool entry, validated.

    Raises:
        ScopeInvalid: a count that is not an integer in 1..1,000,000, or a malformed name,
            identity or input digest (named).
    """
    if not _is_count(max_calls):
        raise ScopeInvalid(
            f"max_calls of {tool}@{version} must be an integer in 1..{MAX_CALLS}, not {max_calls!r}",
            hint="Every tool of a scope has a count: `--max-calls N` (N >= 1).",
            field="max_calls",
        )
    try:
        return ScopeTool(
            tool=tool,
            version=version,
            identity=identity,
            max_calls=max_calls,
            inputs=None if inputs is None else tuple(inputs),
        )
    except ValidationError as exc:
        where = ".".join(str(p) for p in exc.errors()[0]["loc"])
        raise ScopeInvalid(
            f"invalid scope tool {tool[:64]}@{version[:64]}: {where}: {exc.errors()[0]['msg']}", field=where
        ) from None


def scope_statement(scope: Scope) -> bytes:
    """The exact bytes an approver signature over ``scope`` covers (tag ``stockade/scope@1``)."""
    return signed_statement(STATEMENT_SCOPE, scope.model_dump(mode="json"))


def tool_identity(
    *,
    tool: str,
    version: str,
    package: str,
    package_version: str,
    manifest_sha256: str,
    module_sha256: str,
    binding: str | None,
) -> str:
    """The digest a scope records per tool: the package, its version and digests, and the
    tool's policy binding digest (:mod:`host.policy.bindings`). A rebuilt or re-signed
    package in a later lock generation has another identity, so the scope no longer
    covers it; a generation that changed nothing about the tool keeps it covered."""
    return digest_json(
        {
            "domain": IDENTITY_DOMAIN,
            "tool": tool,
            "version": version,
            "package": package,
            "package_version": package_version,
            "manifest_sha256": manifest_sha256,
            "module_sha256": module_sha256,
            "binding": binding,
        }
    )


def new_scope_id() -> str:
    """A fresh scope id: ``scope_`` and 32 random hex digits."""
    return "scope_" + secrets.token_hex(16)


def _is_finite(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_CALLS


def build_scope(
    *,
    project: str,
    subject: str,
    job: str,
    issued_by: str,
    tools: Sequence[ScopeTool],
    for_s: float | None = None,
    not_after: float | None = None,
    lock_generation: int,
    session: str | None = None,
    max_calls_total: int | None = None,
    now: float | None = None,
    ceiling_s: float = DEFAULT_CEILING_S,
) -> Scope:
    """Validate and build a scope (unsigned); exactly one of ``for_s`` and ``not_after``.

    Args:
        for_s: how long from ``now`` the scope lives.
        not_after: the unix time it ends.
        max_calls_total: calls over all its tools (default: the sum of their counts).
        now: the issue time (default ``time.time()``).
        ceiling_s: the longest lifetime this host allows.

    Raises:
        ScopeInvalid: an end that is not finite, not after ``now`` or past the ceiling; a
            count that is not an integer in 1..1,000,000; no tool, a duplicate tool, too
            many, or a malformed field (each named).
    """
    issued = time.time() if now is None else now
    if not _is_finite(issued):
        raise ScopeInvalid("the issue time must be a finite unix time")
    if (for_s is None) == (not_after is None):
        raise ScopeInvalid("give exactly one of a lifetime (--for) and an end time (not_after)")
    if for_s is not None:
        if not _is_finite(for_s) or for_s <= 0:
            raise ScopeInvalid(
                f"a scope's lifetime must be a positive, finite number of seconds, not {for_s!r}",
                hint="For example `--for 2h`.",
                field="not_after",
            )
        end = float(issued) + float(for_s)
    else:
        if not _is_finite(not_after):
            raise ScopeInvalid(f"not_after must be a finite unix time, not {not_after!r}", field="not_after")
        end = float(not_after)  # type: ignore[arg-type]  # checked finite just above
    if not end > issued:
        raise ScopeInvalid(
            "not_after is not in the future: a scope must end after it is issued", field="not_after"
        )
    if not _is_finite(ceiling_s) or ceiling_s <= 0:
        raise ValueError("ceiling_s must be a positive, finite number of seconds")
    if end - issued > ceiling_s:
        raise ScopeInvalid(
            f"a scope may live at most {ceiling_s:g} s on this host; this one would live {end - issued:g} s",
            hint="Grant a shorter scope (`--for`) and grant a new one when it ends.",
            field="not_after",
            limit=ceiling_s,
        )
    if not tools:
        raise ScopeInvalid("a scope names at least one tool (--tool NAME@VERSION)", field="tools")
    keys = [(t.tool, t.version) for t in tools]
    if len(set(keys)) != len(keys):
        raise ScopeInvalid("a scope names each (tool, version) once", field="tools")
    for entry in tools:
        if not _is_count(entry.max_calls):
            raise ScopeInvalid(
                f"max_calls of {entry.key} must be an integer in 1..{MAX_CALLS}", field="max_calls"
            )
    total = sum(t.max_calls for t in tools) if max_calls_total is None else max_calls_total
    if not _is_count(total):
        raise ScopeInvalid(
            f"max_calls_total must be an integer in 1..{MAX_CALLS}, not {total!r}", field="max_calls_total"
        )
    try:
        return Scope(
            format=FORMAT,
            id=new_scope_id(),
            principal=ScopePrincipal(project=project, subject=subject),
            session=session,
            job=job,
            issued_by=issued_by,
            issued_at=float(issued),
            not_after=end,
            lock_generation=lock_generation,
            tools=tuple(tools),
            max_calls_total=min(total, MAX_CALLS),
        )
    except ValidationError as exc:
        where = ".".join(str(p) for p in exc.errors()[0]["loc"])
        raise ScopeInvalid(f"invalid scope: {where}: {exc.errors()[0]['msg']}", field=where) from None
