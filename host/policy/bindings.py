"""Binding digests: what a user's ``allow`` (and a session grant) was reviewed for.

A user tool-policy ``allow`` and an "always for this session" grant cover the tool a
person reviewed, not whatever later carries its name. A **binding digest** is the
SHA-256 of the canonical JSON of what a tool can do and who vouched for it; the user
policy records it with every ``allow`` of a tool or service selector, and at resolve time
a digest that differs or is missing turns that ``allow`` into ``ask`` (a rebind).

Package tool (``kind: "package"``)::

    {"domain": "stockade/tool-binding@1", "kind": "package", "tool": <name>,
     "effect": ..., "risk": ..., "permissions": [sorted declared permissions],
     "http_allow": [each http.allow entry: scheme, host, port, path_prefix, methods,
                    and propagate_trace only when true; sorted],
     "credentials": [each http.credentials mapping: secret, location, hosts,
                     path_prefixes, optional; sorted],
     "signer": <the lock entry's key_id, or null when unsigned>,
     "workspace_read": [sorted workspace.read entries; the key is absent when the
                        manifest declares no workspace access]}

Not included: the package or tool version, the lock generation, the manifest and module
digests, descriptions, schemas, limits and timeouts. An upgrade that changes only code or
version keeps the allow; one that widens anything above asks again.

MCP-source tool (``kind: "mcp"``)::

    {"domain": "stockade/tool-binding@1", "kind": "mcp", "tool": <name>,
     "transport": {"type": "http", "url": ...} | {"type": "stdio", "command": ...,
                   "args": [...], "cwd": ...(, any sandbox profile field the transport has)},
     "definition_sha256": <the pinned tool digest>, "effect": ..., "risk": ...}

Not included (the seed's ``mcpBindingDigest`` rule): secrets and where they are delivered
(header names and values, env names), environment values, the secrets scope, limits and
timeouts. Rotating a secret or raising a timeout keeps the allow; re-pinning to another
command, args, cwd or URL, or a changed tool definition, asks again.

Example::

    digest = package_binding(tool, key_id=entry.key_id)
    store.set("alice", "p", ToolSelector(tool.name), ToolMode.ALLOW, bound={tool.name: digest})
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from host.canonical import canonical_json, digest_json
from host.errors import ToolNotFound
from host.policy.grants import DEFAULT_GRANT_TTL_S

if TYPE_CHECKING:
    from host.formats.manifest import PackageManifest

__all__ = [
    "BINDING_DOMAIN",
    "BoundGrants",
    "grant_key",
    "mcp_binding",
    "package_binding",
    "package_bindings",
]

BINDING_DOMAIN = "stockade/tool-binding@1"


class _BoundPackage(Protocol):
    @property
    def package(self) -> str: ...


class BoundTool(Protocol):
    """What a binding digest reads of a package tool: the registry's ``ToolDefinition``
    (``host/trust/registry.py``) is one. Policy and trust are peers that never import each
    other (``tests/unit/test_import_graph.py``), so this names the fields it uses."""

    @property
    def name(self) -> str: ...
    @property
    def effect(self) -> object: ...
    @property
    def risk(self) -> object: ...
    @property
    def permissions(self) -> Sequence[str]: ...
    @property
    def package(self) -> PackageManifest: ...
    @property
    def binding(self) -> _BoundPackage: ...
    @property
    def key(self) -> tuple[str, str]: ...


def _value(item: object) -> str:
    return str(getattr(item, "value", item))


def _sorted_dumps(items: Iterable[Any]) -> list[Any]:
    dumps = [item.model_dump(mode="json") for item in items]
    return sorted(dumps, key=canonical_json)


def _allow_dumps(entries: Iterable[Any]) -> list[Any]:
    """The allow entries; ``propagate_trace`` only when set, so older bindings keep their
    digests and an entry that starts sending trace context asks again."""
    dumps = [item.model_dump(mode="json") for item in entries]
    for dump in dumps:
        if dump.get("propagate_trace") is False:
            dump.pop("propagate_trace")
    return sorted(dumps, key=canonical_json)


def package_document(tool: BoundTool, *, key_id: str | None) -> dict[str, Any]:
    """The canonical document a package tool's binding digest covers (module docstring)."""
    http = tool.package.http
    document: dict[str, Any] = {
        "domain": BINDING_DOMAIN,
        "kind": "package",
        "tool": tool.name,
        "effect": _value(tool.effect),
        "risk": _value(tool.risk),
        "permissions": sorted(set(tool.permissions)),
        "http_allow": [] if http is None else _allow_dumps(http.allow),
        "credentials": [] if http is None else _sorted_dumps(http.credentials),
        "signer": key_id,
    }
    workspace = tool.package.workspace
    if workspace is not None:  # absent when undeclared: older bindings keep their digests
        document["workspace_read"] = sorted(workspace.read)
    return document


def package_binding(tool: BoundTool, *, key_id: str | None) -> str:
    """The binding digest of a package tool (64 hex digits).

    Args:
        tool: the tool definition.
        key_id: the key id that signed its package in the lock (``None``: unsigned).
    """
    return digest_json(package_document(tool, key_id=key_id))


def mcp_document(
    tool: str, *, transport: Mapping[str, Any], definition_sha256: str, effect: object, risk: object
) -> dict[str, Any]:
    """The canonical document an MCP-source tool's binding digest covers (module docstring)."""
    return {
        "domain": BINDING_DOMAIN,
        "kind": "mcp",
        "tool": tool,
        "transport": dict(transport),
        "definition_sha256": definition_sha256,
        "effect": _value(effect),
        "risk": _value(risk),
    }


def mcp_binding(
    tool: str, *, transport: Mapping[str, Any], definition_sha256: str, effect: object, risk: object
) -> str:
    """The binding digest of an MCP-source tool (64 hex digits).

    Args:
        tool: the Stockade tool name (``<source>.<name>``).
        transport: the pinned transport's identity: ``{"type": "http", "url": ...}`` or
            ``{"type": "stdio", "command": ..., "args": [...], "cwd": ...}`` (no secrets,
            headers, environment or limits).
        definition_sha256: the pinned digest of the tool's definition.
        effect: the tool's effect class.
        risk: the tool's risk.
    """
    return digest_json(
        mcp_document(tool, transport=transport, definition_sha256=definition_sha256, effect=effect, risk=risk)
    )


def package_bindings(
    tools: Iterable[BoundTool], key_ids: Mapping[str, str | None]
) -> dict[tuple[str, str], str]:
    """``{(name, version): binding digest}`` of package tools; ``key_ids`` maps a package
    name to the key id that signed it (absent: unsigned)."""
    return {t.key: package_binding(t, key_id=key_ids.get(t.binding.package)) for t in tools}


def grant_key(tool: str, binding: str) -> str:
    """The key a session grant is stored under: the tool name and its binding digest, so
    a grant never discharges a tool whose binding changed (``#`` is not a tool-name
    character)."""
    return f"{tool}#{binding}"


class BoundGrants:
    """A grant store (``GrantPort``) whose grants are bound to each tool's binding digest.

    ``grant(principal, session, tool)`` records one grant per current binding digest of
    ``tool`` (every version of it in the running generation); ``discharges`` looks for the
    current one. A reload that changes a tool's binding therefore ends its grants in every
    process sharing the store; a reload that keeps the binding keeps them.

    With an ``audit`` sink, a grant records ``session_grant.granted`` (its end and count)
    and a revocation ``session_grant.revoked``.

    Args:
        inner: the store's grants (local or shared).
        bindings_of: the current binding digests of a tool name (empty: unknown tool).
        audit: where grant and revocation records go (``None``: nowhere).
    """

    def __init__(
        self, inner: Any, bindings_of: Callable[[str], tuple[str, ...]], *, audit: Any = None
    ) -> None:
        self.inner = inner
        self._bindings_of = bindings_of
        self._audit = audit

    def grant(
        self,
        principal_key: tuple[str, str],
        session: str,
        tool: str,
        *,
        ttl_s: float | None = None,
        max_calls: int | None = None,
    ) -> None:
        """Record "always" for ``tool`` as it is bound now, for ``ttl_s`` seconds (default
        :data:`host.policy.grants.DEFAULT_GRANT_TTL_S`) and at most ``max_calls`` calls.

        Raises:
            TypeError: an empty or non-string part.
            ValueError: an unbounded ``ttl_s`` or a bad ``max_calls``.
            ToolNotFound: no tool of that name in the running generation.
            StoreUnavailable: the grant could not be recorded.
            AuditUnavailable: the grant was recorded, its audit record was not.
        """
        if not isinstance(tool, str) or not tool:
            raise TypeError("tool must be a non-empty string")
        digests = self._bindings_of(tool)
        if not digests:
            raise ToolNotFound(f"no tool {tool[:80]!r} to grant in this generation", tool=tool[:80])
        ttl = DEFAULT_GRANT_TTL_S if ttl_s is None else ttl_s
        for digest in digests:
            self.inner.grant(principal_key, session, grant_key(tool, digest), ttl_s=ttl, max_calls=max_calls)
        if self._audit is not None:
            self._audit.append("session_grant.granted", {
                "project": principal_key[0], "subject": principal_key[1], "session": session, "tool": tool,
                "ttl_s": ttl, "max_calls": max_calls, "bindings": list(digests),
            })

    def discharges(self, principal_key: tuple[str, str], session: str, tool: str) -> bool:
        """Whether a grant exists for this principal, session and tool *as bound now*."""
        if not isinstance(tool, str) or not tool:
            raise TypeError("tool must be a non-empty string")
        return any(
            self.inner.discharges(principal_key, session, grant_key(tool, digest))
            for digest in self._bindings_of(tool)
        )

    def discharges_bound(self, principal_key: tuple[str, str], session: str, tool: str, binding: str) -> bool:
        """Whether a grant exists for exactly this tool and binding digest."""
        return bool(self.inner.discharges(principal_key, session, grant_key(tool, binding)))

    def consume_bound(
        self, principal_key: tuple[str, str], session: str, tool: str, binding: str
    ) -> int | None:
        """Count one use of the grant of exactly this tool and binding (``-1``: none left)."""
        left = self.inner.consume(principal_key, session, grant_key(tool, binding))
        return None if left is None else int(left)

    def consume(self, principal_key: tuple[str, str], session: str, tool: str) -> int | None:
        """Count one use of the grant of ``tool`` as bound now (``-1``: none left)."""
        for digest in self._bindings_of(tool):
            left = self.consume_bound(principal_key, session, tool, digest)
            if left != -1:
                return left
        return -1

    def revoke(self, principal_key: tuple[str, str], session: str, tool: str) -> bool:
        """End the grants of ``tool`` (every binding) in this session; whether there was one.

        Raises:
            AuditUnavailable: revoked, but its record was not written.
        """
        gone = any([
            self.inner.revoke(principal_key, session, grant_key(tool, digest))
            for digest in self._bindings_of(tool)
        ])
        if gone and self._audit is not None:
            self._audit.append("session_grant.revoked", {
                "project": principal_key[0], "subject": principal_key[1], "session": session, "tool": tool,
            })
        return gone

    def clear_grants(
        self, session: str | None = None, *, principal_key: tuple[str, str] | None = None
    ) -> int:
        """Forget grants (as the inner store); recorded as ``session_grant.revoked``."""
        cleared = int(self.inner.clear_grants(session, principal_key=principal_key))
        if cleared and self._audit is not None:
            self._audit.append("session_grant.revoked", {
                **({"project": principal_key[0], "subject": principal_key[1]} if principal_key else {}),
                "session": session, "cleared": cleared,
            })
        return cleared
