"""Comparison rules of :func:`sdk.review.report.diff_locks`: one package's manifest, old against new.

Private; the rules are documented in :mod:`sdk.review.report`. Every function yields
:class:`Change` items; ``escalation`` is True for anything that widens what the package
may do or what runs without a person's approval. Unknown differences escalate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from host.egress.urls import HostPattern, parse_host_pattern, path_matches
from host.formats.manifest import AllowEntry, CredentialMapping, Effect, HttpConfig, PackageManifest, ToolSpec

__all__ = ["Change", "credential_location", "manifest_changes", "schema_changes"]

_RISK_RANK: Final = {"low": 0, "medium": 1, "high": 2}
_LIMITS: Final = ("fuel", "memory_bytes", "timeout_ms", "max_http_requests", "max_log_bytes")
_HTTP_LIMITS: Final = ("max_request_bytes", "max_response_bytes", "timeout_ms")
_UPPER_BOUNDS: Final = ("maxLength", "maxItems", "maximum")
_LOWER_BOUNDS: Final = ("minLength", "minItems", "minimum")
_HANDLED_KEYWORDS: Final = frozenset(
    {
        "type",
        "description",
        "properties",
        "required",
        "items",
        "enum",
        "uniqueItems",
        *_UPPER_BOUNDS,
        *_LOWER_BOUNDS,
    }
)


@dataclass(frozen=True, slots=True)
class Change:
    """One difference between two locks.

    Args:
        kind: stable kind (``package.added``, ``tool.effect``, ``http.wildcard``, ...).
        package: the package it belongs to.
        tool: the tool, when the change is about one.
        detail: what changed, for a person.
        escalation: whether it widens what the package may do (see the module docstring).
        old: the old value (JSON-able), if any.
        new: the new value (JSON-able), if any.
    """

    kind: str
    package: str
    detail: str
    escalation: bool
    tool: str | None = None
    old: Any = None
    new: Any = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "kind": self.kind,
            "package": self.package,
            "tool": self.tool,
            "detail": self.detail,
            "escalation": self.escalation,
            "old": self.old,
            "new": self.new,
        }


def manifest_changes(package: str, old: PackageManifest | None, new: PackageManifest) -> Iterator[Change]:
    """Every change from ``old`` (``None``: a new package) to ``new``.

    Args:
        package: the package name, recorded on each change.
        old: the manifest in force, or ``None`` when the package is new.
        new: the proposed manifest.

    Returns:
        The changes, tools first, then http, credentials and limits.
    """
    old_tools = {t.name: t for t in old.tools} if old is not None else {}
    new_tools = {t.name: t for t in new.tools}
    for name in sorted(old_tools.keys() | new_tools.keys()):
        yield from _tool_changes(package, old_tools.get(name), new_tools.get(name))
    old_http = old.http if old is not None else None
    yield from _allow_changes(package, old_http.allow if old_http else (), new.http.allow)
    yield from _credential_changes(package, old_http.credentials if old_http else (), new.http.credentials)
    for host in new.http.token_hosts:
        if old_http is None or host not in old_http.token_hosts:
            yield Change(
                "http.token_host", package, f"the host may now POST token requests to {host}", True, new=host
            )
    yield from _workspace_changes(package, _workspace_read(old), _workspace_read(new))
    if old is not None:
        yield from _limit_changes(
            package, "limits", old.limits.model_dump(), new.limits.model_dump(), _LIMITS
        )
        yield from _limit_changes(
            package, "http", _http_limits(old.http), _http_limits(new.http), _HTTP_LIMITS
        )


# --- tools --------------------------------------------------------------------------------


def _tool_changes(package: str, old: ToolSpec | None, new: ToolSpec | None) -> Iterator[Change]:
    if new is None:
        if old is not None:
            yield Change("tool.removed", package, f"tool {old.name} removed", False, tool=old.name)
        return
    name = new.name
    if old is None:
        yield Change(
            "tool.added",
            package,
            f"new tool {name} ({new.effect.value}, {new.risk.value} risk, permissions "
            f"{', '.join(new.permissions) or 'none'})",
            True,
            tool=name,
            new={"effect": new.effect.value, "risk": new.risk.value, "permissions": list(new.permissions)},
        )
        return
    if old.version != new.version:
        yield Change(
            "tool.version",
            package,
            f"version {old.version} → {new.version}",
            False,
            tool=name,
            old=old.version,
            new=new.version,
        )
    yield from _effect_and_risk(package, old, new)
    yield from _permission_changes(package, old, new)
    yield from _tool_limit_changes(package, old, new)
    if old.description != new.description:
        yield Change(
            "tool.description",
            package,
            "description changed (the model reads it)",
            False,
            tool=name,
            old=old.description,
            new=new.description,
        )
    yield from _schema_changes(package, old, new)


def _schema_changes(package: str, old: ToolSpec, new: ToolSpec) -> Iterator[Change]:
    for which, old_schema, new_schema in (
        ("input", old.input_schema, new.input_schema),
        ("output", old.output_schema, new.output_schema),
    ):
        for pointer, what, widens in schema_changes(old_schema, new_schema):
            yield Change(
                f"tool.{which}_schema",
                package,
                f"{which} schema {pointer or '/'}: {what}",
                widens,
                tool=new.name,
            )


def _effect_and_risk(package: str, old: ToolSpec, new: ToolSpec) -> Iterator[Change]:
    name = new.name
    if old.effect != new.effect:
        why = (
            "now allowed without approval by default"
            if new.effect is Effect.READ
            else "asks for approval by default, but does more"
        )
        yield Change(
            "tool.effect",
            package,
            f"effect {old.effect.value} → {new.effect.value} ({why})",
            True,
            tool=name,
            old=old.effect.value,
            new=new.effect.value,
        )
    if old.risk != new.risk:
        raised = _RISK_RANK[new.risk.value] > _RISK_RANK[old.risk.value]
        yield Change(
            "tool.risk",
            package,
            f"risk {old.risk.value} → {new.risk.value}",
            raised,
            tool=name,
            old=old.risk.value,
            new=new.risk.value,
        )


def _permission_changes(package: str, old: ToolSpec, new: ToolSpec) -> Iterator[Change]:
    added = sorted(set(new.permissions) - set(old.permissions))
    removed = sorted(set(old.permissions) - set(new.permissions))
    if added:
        yield Change(
            "tool.permission.added",
            package,
            f"requires permission {', '.join(added)}",
            True,
            tool=new.name,
            new=added,
        )
    if removed:
        yield Change(
            "tool.permission.removed",
            package,
            f"no longer requires {', '.join(removed)}: more principals may call it",
            True,
            tool=new.name,
            old=removed,
        )


def _tool_limit_changes(package: str, old: ToolSpec, new: ToolSpec) -> Iterator[Change]:
    name = new.name
    if old.timeout_s != new.timeout_s:
        raised = new.timeout_s > old.timeout_s
        yield Change(
            "tool.timeout",
            package,
            f"timeout_s {old.timeout_s} → {new.timeout_s}",
            raised,
            tool=name,
            old=old.timeout_s,
            new=new.timeout_s,
        )
    old_rate = old.rate_limit.model_dump() if old.rate_limit else None
    new_rate = new.rate_limit.model_dump() if new.rate_limit else None
    if old_rate != new_rate:
        raised = new_rate is None or (
            old_rate is not None and any(new_rate[k] > old_rate[k] for k in ("per_minute", "per_hour"))
        )
        shown = "removed (unlimited)" if new_rate is None else f"{new_rate}"
        yield Change(
            "tool.rate_limit",
            package,
            f"rate limit {old_rate} → {shown}",
            raised,
            tool=name,
            old=old_rate,
            new=new_rate,
        )
    unredacted = sorted(set(old.sensitive_params) - set(new.sensitive_params))
    if unredacted:
        yield Change(
            "tool.sensitive_params",
            package,
            f"no longer redacted in the audit log: {', '.join(unredacted)}",
            True,
            tool=name,
            old=unredacted,
        )


# --- schemas ------------------------------------------------------------------------------


def schema_changes(
    old: Mapping[str, Any] | None, new: Mapping[str, Any] | None, pointer: str = ""
) -> list[tuple[str, str, bool]]:
    """``(json pointer, what, widens)`` for every difference between two subset schemas.

    ``None`` is the missing output schema (only ``null`` may be returned).
    """
    if old == new:
        return []
    if old is None or new is None:
        return [
            (pointer, "schema added (more may be returned)" if old is None else "schema removed", old is None)
        ]
    if old.get("type") != new.get("type"):
        return [(pointer, f"type {old.get('type')} → {new.get('type')}", True)]
    found: list[tuple[str, str, bool]] = []
    found.extend(_bound_changes(old, new, pointer))
    found.extend(_enum_changes(old, new, pointer))
    found.extend(_object_changes(old, new, pointer))
    if old.get("items") != new.get("items"):
        found.extend(schema_changes(old.get("items"), new.get("items"), f"{pointer}/items"))
    if old.get("uniqueItems", False) != new.get("uniqueItems", False):
        found.append((pointer, f"uniqueItems → {new.get('uniqueItems', False)}", not new.get("uniqueItems")))
    if old.get("description") != new.get("description"):
        found.append((pointer, "description changed", False))
    for key in sorted((old.keys() | new.keys()) - _HANDLED_KEYWORDS):
        if old.get(key) != new.get(key):
            found.append((pointer, f"{key} {old.get(key)!r} → {new.get(key)!r}", True))
    return found


def _bound_changes(
    old: Mapping[str, Any], new: Mapping[str, Any], pointer: str
) -> Iterator[tuple[str, str, bool]]:
    for key in (*_UPPER_BOUNDS, *_LOWER_BOUNDS):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        if before is None or after is None:
            widens = after is None  # a bound dropped widens; one added narrows
        else:
            widens = after > before if key in _UPPER_BOUNDS else after < before
        yield (pointer, f"{key} {before} → {after}", widens)


def _enum_changes(
    old: Mapping[str, Any], new: Mapping[str, Any], pointer: str
) -> Iterator[tuple[str, str, bool]]:
    before, after = old.get("enum"), new.get("enum")
    if before == after:
        return
    if after is None:
        yield (pointer, "enum removed (any value of the type)", True)
    elif before is None:
        yield (pointer, f"enum {after} added", False)
    else:
        added = [v for v in after if v not in before]
        yield (pointer, f"enum gains {added}" if added else "enum loses values", bool(added))


def _object_changes(
    old: Mapping[str, Any], new: Mapping[str, Any], pointer: str
) -> Iterator[tuple[str, str, bool]]:
    old_props: Mapping[str, Any] = old.get("properties") or {}
    new_props: Mapping[str, Any] = new.get("properties") or {}
    for name in sorted(new_props.keys() - old_props.keys()):
        yield (f"{pointer}/properties/{name}", "property added", True)
    for name in sorted(old_props.keys() - new_props.keys()):
        yield (f"{pointer}/properties/{name}", "property removed", False)
    for name in sorted(old_props.keys() & new_props.keys()):
        yield from schema_changes(old_props[name], new_props[name], f"{pointer}/properties/{name}")
    # A requirement dropped with its property is a removal, not a widening.
    dropped = sorted((set(old.get("required", ())) - set(new.get("required", ()))) & new_props.keys())
    added = sorted(set(new.get("required", ())) - set(old.get("required", ())))
    if dropped:
        yield (f"{pointer}/required", f"no longer required: {', '.join(dropped)}", True)
    if added:
        yield (f"{pointer}/required", f"now required: {', '.join(added)}", False)


# --- http allowlist -----------------------------------------------------------------------


def _describe_entry(entry: AllowEntry) -> str:
    return f"{'/'.join(entry.methods)} {entry.host_pattern()}{entry.path_prefix}"


def _covered(olds: Sequence[AllowEntry], new: AllowEntry) -> bool:
    pattern = new.host_pattern()
    return all(
        any(
            o.host_pattern().covers(pattern)
            and path_matches(o.path_prefix, new.path_prefix)
            and m in o.methods
            for o in olds
        )
        for m in new.methods
    )


def _traced(olds: Sequence[AllowEntry], new: AllowEntry) -> bool:
    """Whether old entries that sent trace context already covered every method of ``new``."""
    return _covered([o for o in olds if o.propagate_trace], new)


def _allow_changes(package: str, olds: Sequence[AllowEntry], news: Sequence[AllowEntry]) -> Iterator[Change]:
    for entry in news:
        if not _covered(olds, entry):
            kind, why = _why_wider(olds, entry)
            yield Change(kind, package, f"{why}: {_describe_entry(entry)}", True, new=entry.model_dump())
    for entry in news:
        if entry.propagate_trace and not _traced(olds, entry):
            yield Change(
                "http.trace", package, f"trace context sent: {_describe_entry(entry)}", True,
                new=entry.model_dump(),
            )  # fmt: skip
    for entry in olds:
        if not _covered(news, entry):
            yield Change(
                "http.narrowed",
                package,
                f"no longer reachable: {_describe_entry(entry)}",
                False,
                old=entry.model_dump(),
            )


def _moved(pattern: HostPattern, to: HostPattern) -> HostPattern:
    """``pattern``'s host under ``to``'s scheme and port (to compare hosts alone)."""
    return dataclasses.replace(pattern, scheme=to.scheme, port=to.port)


def _same_host(a: HostPattern, b: HostPattern) -> bool:
    return (a.host, a.wildcard) == (b.host, b.wildcard)


def _why_wider(olds: Sequence[AllowEntry], entry: AllowEntry) -> tuple[str, str]:
    pattern = entry.host_pattern()
    same_origin = [o for o in olds if o.host_pattern().covers(pattern)]
    if not same_origin:
        old_patterns = [o.host_pattern() for o in olds]
        literals = sorted(
            p.host for p in old_patterns if not p.wildcard and pattern.covers(_moved(p, pattern))
        )
        if pattern.wildcard and literals:
            return "http.wildcard", f"wildcard replaces literal host {', '.join(literals)}"
        if any(_same_host(p, pattern) for p in old_patterns):
            if pattern.scheme == "http" and all(
                p.scheme == "https" for p in old_patterns if _same_host(p, pattern)
            ):
                return "http.scheme", "plain http (unencrypted) to a host that was https only"
            return "http.port", f"another port or scheme for a known host ({pattern})"
        return "http.host", f"new host {pattern}"
    path_ok = [o for o in same_origin if path_matches(o.path_prefix, entry.path_prefix)]
    if not path_ok:
        if any(path_matches(entry.path_prefix, o.path_prefix) for o in same_origin):
            return "http.path", f"shorter path prefix {entry.path_prefix}"
        return "http.path", f"new path prefix {entry.path_prefix}"
    known = {m for o in path_ok for m in o.methods}
    added = [m for m in entry.methods if m not in known]
    return "http.methods", f"new methods {', '.join(added)}"


# --- workspace ----------------------------------------------------------------------------


def _workspace_read(manifest: PackageManifest | None) -> tuple[str, ...]:
    if manifest is None or manifest.workspace is None:
        return ()
    return manifest.workspace.read


def _beneath(path: str, directory: str) -> bool:
    return directory in (".", path) or path.startswith(directory + "/")


def _workspace_changes(package: str, olds: Sequence[str], news: Sequence[str]) -> Iterator[Change]:
    """A declared directory no old one covers is an escalation; ``docs`` → ``.`` is wider."""
    for path in news:
        if not any(_beneath(path, old) for old in olds):
            wider = [old for old in olds if _beneath(old, path)]
            detail = (
                f"reads a wider part of the workspace: {path} (was {', '.join(wider)})"
                if wider
                else f"reads workspace files: {path}"
            )
            yield Change("workspace.read", package, detail, True, new=path, old=wider or None)
    for path in olds:
        if not any(_beneath(path, new) for new in news):
            yield Change("workspace.narrowed", package, f"no longer reads {path}", False, old=path)


# --- credentials --------------------------------------------------------------------------


def credential_location(mapping: CredentialMapping) -> str:
    """Where a credential is injected, for people: ``bearer``, ``basic(username=bot)``,
    ``header(X-Api-Key, prefix 'Token ')`` or ``query(api_key)``."""
    location = mapping.location
    if location.type == "basic":
        return f"basic(username={location.username})"
    if location.type == "header":
        prefix = f", prefix {location.prefix!r}" if location.prefix else ""
        return f"header({location.name}{prefix})"
    if location.type == "query":
        return f"query({location.name})"
    return "bearer"


_location = credential_location


def _describe_credential(mapping: CredentialMapping) -> str:
    return (
        f"secret {mapping.secret} as {_location(mapping)} for {', '.join(mapping.hosts)} "
        f"under {', '.join(mapping.path_prefixes)}"
    )


def _credential_widenings(
    package: str, mapping: CredentialMapping, same: Sequence[CredentialMapping]
) -> Iterator[Change]:
    """How ``mapping`` sends its secret further than the old mappings ``same`` of that secret."""
    if all(o.location != mapping.location for o in same):
        yield Change(
            "credential.location",
            package,
            f"secret {mapping.secret} now injected as {_location(mapping)} "
            f"(was {', '.join(_location(o) for o in same)})",
            True,
            old=[o.location.model_dump() for o in same],
            new=mapping.location.model_dump(),
        )

    yield from _oauth_changes(package, mapping, same)

    # Judge (host, path) pairs, not hosts and paths apart: old {h1: /a} and {h2: /b} do
    # not cover h2 under /a.
    def covered(host: str, path: str) -> bool:
        pattern = parse_host_pattern(host)
        return any(
            any(parse_host_pattern(h).covers(pattern) for h in o.hosts)
            and any(path_matches(prefix, path) for prefix in o.path_prefixes)
            for o in same
        )

    known_hosts = [parse_host_pattern(h) for o in same for h in o.hosts]
    wider = [(h, p) for h in mapping.hosts for p in mapping.path_prefixes if not covered(h, p)]
    new_hosts = sorted({h for h, _ in wider if not any(k.covers(parse_host_pattern(h)) for k in known_hosts)})
    new_paths = sorted({f"{h}{p}" for h, p in wider if h not in new_hosts})
    if new_hosts:
        yield Change(
            "credential.hosts",
            package,
            f"secret {mapping.secret} now sent to {', '.join(new_hosts)}",
            True,
            new=new_hosts,
        )
    if new_paths:
        yield Change(
            "credential.paths",
            package,
            f"secret {mapping.secret} now sent under {', '.join(new_paths)}",
            True,
            new=new_paths,
        )


def _oauth_changes(
    package: str, mapping: CredentialMapping, same: Sequence[CredentialMapping]
) -> Iterator[Change]:
    """An OAuth declaration that is new, or asks a new token URL, a new scope or another
    grant, escalates: the host will spend the stored refresh token somewhere new or for
    more than a person approved."""
    new = mapping.oauth
    if new is None:
        return
    olds = [o.oauth for o in same if o.oauth is not None]
    if not olds:
        yield Change(
            "credential.oauth", package,
            f"secret {mapping.secret} is now an OAuth {new.grant} credential refreshed at {new.token_url}",
            True, new=new.model_dump(),
        )  # fmt: skip
        return
    if all(o.token_url != new.token_url for o in olds):
        yield Change(
            "credential.oauth_token_url", package,
            f"secret {mapping.secret} now refreshed at {new.token_url} "
            f"(was {', '.join(o.token_url for o in olds)})",
            True, old=[o.token_url for o in olds], new=new.token_url,
        )  # fmt: skip
    known = {scope for o in olds for scope in o.scopes}
    wider = [scope for scope in new.scopes if scope not in known]
    if wider:
        yield Change(
            "credential.oauth_scopes", package,
            f"secret {mapping.secret} now asks for scope(s) {', '.join(wider)}",
            True, old=sorted(known), new=list(new.scopes),
        )  # fmt: skip
    if all(o.grant != new.grant for o in olds):
        yield Change(
            "credential.oauth_grant", package,
            f"secret {mapping.secret} now obtained by grant {new.grant} "
            f"(was {', '.join(o.grant for o in olds)})",
            True, old=[o.grant for o in olds], new=new.grant,
        )  # fmt: skip
    if all(o.client != new.client for o in olds):
        yield Change(
            "credential.oauth_client", package,
            f"secret {mapping.secret} now authenticated with client secret {new.client}",
            True, old=[o.client for o in olds], new=new.client,
        )  # fmt: skip


def _credential_changes(
    package: str, olds: Sequence[CredentialMapping], news: Sequence[CredentialMapping]
) -> Iterator[Change]:
    for mapping in news:
        same = [o for o in olds if o.secret == mapping.secret]
        if not same:
            yield Change(
                "credential.added", package, _describe_credential(mapping), True, new=mapping.model_dump()
            )
            continue
        yield from _credential_widenings(package, mapping, same)
    for mapping in olds:
        if not any(n.secret == mapping.secret for n in news):
            yield Change(
                "credential.removed",
                package,
                f"secret {mapping.secret} no longer used",
                False,
                old=mapping.model_dump(),
            )


# --- limits -------------------------------------------------------------------------------


def _http_limits(http: HttpConfig) -> dict[str, int]:
    return {key: getattr(http, key) for key in _HTTP_LIMITS}


def _limit_changes(
    package: str, prefix: str, old: Mapping[str, int], new: Mapping[str, int], keys: Sequence[str]
) -> Iterator[Change]:
    for key in keys:
        if old[key] == new[key]:
            continue
        raised = new[key] > old[key]
        yield Change(
            "limit.raised" if raised else "limit.lowered",
            package,
            f"{prefix}.{key} {old[key]} → {new[key]}",
            raised,
            old=old[key],
            new=new[key],
        )
