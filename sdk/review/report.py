"""What a security reviewer reads: capability reports and lock diffs (docs/design.md §3, §4). No printing.

A **capability report** (:func:`bundle_report`, :func:`lock_report`) lists everything a
package may do, from its manifest and its component's imports, without running it:
hosts, ports, path prefixes and methods it may reach; the workspace directories it may
read (read-only preopens, only where the operator grants a workspace); every credential by secret name,
where it is injected and for which hosts and paths; its limits; each tool's effect,
risk, permissions, timeout, rate limit and schemas; and the component's imports as
wasmtime reports them (judged by :func:`host.runtime.checks.check_component`).

A **lock diff** (:func:`diff_locks`) lists what a lock change adds, widens or removes.
Every item is a :class:`Change` with a stable ``kind``; ``escalation`` marks the ones
that widen what a package may do or what runs without a person's approval. Rules
(conservative: when unsure, it escalates):

- packages added (and each of their tools, hosts and credentials), signatures dropped or
  made by another key escalate; removals, version and module changes are shown;
- tools added escalate; **any** effect change escalates (towards ``read`` it removes the
  default approval prompt); a higher risk, a longer timeout, a raised or removed rate
  limit, a permission added or removed (fewer permissions let more principals call),
  a sensitive parameter no longer redacted, and a widened input or output schema
  (new property, raised maximum, lowered minimum, new enum value, dropped requirement,
  changed type or anything unrecognized) escalate;
- http: an allow entry not covered by the old ones escalates, named by why: a new host
  (``http.host``), a wildcard replacing a literal (``http.wildcard``), plain http
  (``http.scheme``), another port (``http.port``), a shorter or new path prefix
  (``http.path``), new methods (``http.methods``); an entry that starts sending the
  call's trace context to its destination (``http.trace``, ``propagate_trace``);
- credentials: a new secret (``credential.added``), a new injection location
  (``credential.location``), new hosts (``credential.hosts``) or paths
  (``credential.paths``) escalate;
- workspace: a ``workspace.read`` directory no old entry covers escalates
  (``workspace.read``; ``docs`` → ``.`` is wider); one no longer declared is shown
  (``workspace.narrowed``);
- limits (``limits.*`` and ``http.*`` byte and time limits) raised escalate;
- source (where a registry bundle came from, ``stockade.source.oci/1``): another
  repository (``source.changed``), a package newly pulled from a registry
  (``source.added``) or no longer (``source.removed``) escalate; a new digest in the same
  repository (``source.digest``) is shown (what it changes is judged by the rules above).

Example::

    diff = diff_locks(Path("old/stockade.lock"), Path("new/stockade.lock"))
    if diff.escalations:
        for change in diff.escalations:
            print(change.kind, change.package, change.detail)
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from host.config import DEFAULT_CEILINGS, Ceilings, HostConfig
from host.errors import ComponentRefused
from host.formats.manifest import PackageManifest, ToolSpec
from host.formats.mcppin import PinnedSource
from host.mcpsource.hosting import binding_digests
from host.policy.bindings import package_binding, package_bindings
from host.policy.toolpolicy import ServiceSelector, ToolMode, ToolSelector, read_user_policy
from host.runtime.binary import census, check_header
from host.trust.bundlestore import OciSource
from host.trust.lock import LoadedLock, LockedPackage, LockEntry, TrustedKeys, load_lock
from host.trust.registry import Binding, FrozenRegistry
from sdk.bundle import read_bundle
from sdk.review._manifestdiff import Change, credential_location, manifest_changes
from sdk.review.mcp import mcp_changes, mcp_report, pinned_sources

if TYPE_CHECKING:  # annotations: wasmtime loads when a report lists a component's imports
    import wasmtime
    from wasmtime import component as wc

__all__ = [
    "Change",
    "LockDiff",
    "LockSide",
    "bundle_report",
    "component_report",
    "credential_location",
    "diff_locks",
    "load_for_review",
    "lock_report",
    "package_report",
    "schema_summary",
]

REPORT_FORMAT: Final = "stockade.report/1"
DIFF_FORMAT: Final = "stockade.diff/1"


# --- lock diff -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LockSide:
    """One verified lock of a diff: where it is, its generation and its digests."""

    path: str
    generation: int
    digest: str
    previous: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "path": self.path,
            "generation": self.generation,
            "digest": self.digest,
            "previous": self.previous,
        }


@dataclass(frozen=True, slots=True)
class LockDiff:
    """What changed from ``old`` to ``new``. ``chained`` is whether ``new`` is the direct
    successor of ``old`` (generation + 1, ``previous`` = old digest)."""

    old: LockSide
    new: LockSide
    changes: tuple[Change, ...] = field(default=())
    # tool name → binding digests in (old, new) (host.policy.bindings)
    bindings: tuple[Mapping[str, frozenset[str]], Mapping[str, frozenset[str]]] = field(
        default=({}, {}), compare=False
    )

    @property
    def escalations(self) -> tuple[Change, ...]:
        """The changes that widen what a package may do."""
        return tuple(c for c in self.changes if c.escalation)

    @property
    def chained(self) -> bool:
        """Whether ``new`` directly follows ``old``."""
        return self.new.generation == self.old.generation + 1 and self.new.previous == self.old.digest

    @property
    def relation(self) -> str:
        """How ``new`` relates to ``old``: ``same`` (identical lock), ``successor`` (the
        direct next generation), or what a host would refuse as LOCK_ROLLBACK:
        ``rollback`` (a lower generation), ``fork`` (same generation, other content, or
        the next generation not chained to ``old``), ``skipped`` (generations missing)."""
        old, new = self.old, self.new
        if new.digest == old.digest:
            return "same"
        if self.chained:
            return "successor"
        if new.generation < old.generation:
            return "rollback"
        if new.generation > old.generation + 1:
            return "skipped"
        return "fork"

    def to_dict(self) -> dict[str, Any]:
        """JSON form (format ``stockade.diff/1``)."""
        return {
            "format": DIFF_FORMAT,
            "old": self.old.to_dict(),
            "new": self.new.to_dict(),
            "chained": self.chained,
            "relation": self.relation,
            "escalated": bool(self.escalations),
            "escalations": [c.kind for c in self.escalations],
            "changes": [c.to_dict() for c in self.changes],
        }


def load_for_review(
    path: Path,
    *,
    trusted_keys: Path | TrustedKeys | None = None,
    require_signatures: bool = False,
    ceilings: Ceilings = DEFAULT_CEILINGS,
    operator_keys: Path | TrustedKeys | None = None,
    unsafe_allow_unsigned: bool = False,
) -> LoadedLock:
    """Verify a lock (digests, signatures, manifests) without touching any host state.

    Args:
        path: the lock file.
        trusted_keys: trusted keys (file or loaded); needed when a package is signed.
            When given, every package must be signed unless ``unsafe_allow_unsigned``.
        require_signatures: refuse unsigned packages.
        ceilings: the ceilings the manifests must respect.
        operator_keys: trusted operator keys (file or loaded); when given, the lock must
            carry a valid lock signature by one of them.
        unsafe_allow_unsigned: accept unsigned packages although keys are trusted
            (``HostConfig.unsafe_allow_unsigned``).

    Raises:
        LockInvalid, DigestMismatch, SignatureInvalid, ManifestInvalid: as
        :func:`host.trust.lock.load_lock`.

    Returns:
        The verified lock.
    """
    keys = TrustedKeys.load(trusted_keys) if isinstance(trusted_keys, Path) else trusted_keys
    operators = TrustedKeys.load(operator_keys) if isinstance(operator_keys, Path) else operator_keys
    with tempfile.TemporaryDirectory(prefix="stockade-review-") as scratch:
        config = HostConfig(
            state_dir=Path(scratch), ceilings=ceilings, require_signatures=require_signatures,
            unsafe_allow_unsigned=unsafe_allow_unsigned,
        )
        return load_lock(Path(path), config=config, trusted_keys=keys, operator_keys=operators)


def diff_locks(
    old_path: Path,
    new_path: Path,
    *,
    trusted_keys: Path | TrustedKeys | None = None,
    ceilings: Ceilings = DEFAULT_CEILINGS,
    unsafe_allow_unsigned: bool = False,
) -> LockDiff:
    """Compare two locks, verifying both first (see the module docstring for the rules).

    Args:
        old_path: the lock in force.
        new_path: the proposed lock.
        trusted_keys: trusted keys for signed packages (either lock); when given, every
            package must be signed unless ``unsafe_allow_unsigned``.
        ceilings: the ceilings the manifests must respect.
        unsafe_allow_unsigned: accept unsigned packages although keys are trusted.

    Raises:
        LockInvalid, DigestMismatch, SignatureInvalid, ManifestInvalid: either lock fails
            verification.

    Returns:
        The diff; ``diff.escalations`` is empty when nothing widens.
    """
    keys = TrustedKeys.load(trusted_keys) if isinstance(trusted_keys, Path) else trusted_keys
    old = load_for_review(
        Path(old_path), trusted_keys=keys, ceilings=ceilings, unsafe_allow_unsigned=unsafe_allow_unsigned
    )
    new = load_for_review(
        Path(new_path), trusted_keys=keys, ceilings=ceilings, unsafe_allow_unsigned=unsafe_allow_unsigned
    )
    olds = _by_name(old)
    news = _by_name(new)
    changes: list[Change] = []
    for name in sorted(olds.keys() | news.keys()):
        changes.extend(_package_changes(name, olds.get(name), news.get(name)))
    old_sources, new_sources = _sources(old, keys, ceilings), _sources(new, keys, ceilings)
    changes.extend(mcp_changes(old_sources, new_sources))
    return LockDiff(
        old=_side(old), new=_side(new), changes=tuple(changes),
        bindings=(_lock_bindings(old, old_sources), _lock_bindings(new, new_sources)),
    )


def _lock_bindings(loaded: LoadedLock, sources: Any) -> dict[str, frozenset[str]]:
    """Tool name → the binding digests of its versions in a verified lock, as a Host
    computes them (:func:`host.call.open.tool_bindings`)."""
    key_ids = {entry.name: entry.key_id for entry in loaded.lock.packages}
    digests = {**package_bindings(loaded.registry(), key_ids), **binding_digests(sources)}
    out: dict[str, set[str]] = {}
    for (name, _), digest in digests.items():
        out.setdefault(name, set()).add(digest)
    return {name: frozenset(found) for name, found in out.items()}


def allows_that_ask_again(diff: LockDiff, tool_policy_dir: Path) -> list[dict[str, Any]]:
    """The user allows the lock change would turn back into asks: every bound allow (of
    every partition under ``tool_policy_dir``) whose recorded binding digest holds under
    the old lock and under no version of the tool in the new one. Read only; a file that
    cannot be read or parsed is skipped (a host would quarantine it: its allows apply
    to nobody).

    Returns:
        ``[{"account", "workspace", "selector", "tool", "recorded", "new"}]``; ``new``
        lists the tool's binding digests in the new lock (empty: the tool is gone).
    """
    old, new = diff.bindings
    found: list[dict[str, Any]] = []
    try:
        files = sorted(p for p in Path(tool_policy_dir).iterdir() if p.name.endswith(".json"))
    except OSError:
        return found
    for path in files:
        try:
            policy = read_user_policy(path.read_bytes()[: 1024 * 1024 + 1])
        except (OSError, ValueError):
            continue
        for selector, bound in policy.bound.items():
            if policy.rules.get(selector) is not ToolMode.ALLOW:
                continue
            for tool, recorded in sorted(bound.items()):
                if recorded in old.get(tool, frozenset()) and recorded not in new.get(tool, frozenset()):
                    found.append({
                        "account": policy.account, "workspace": policy.workspace,
                        "selector": {"tool": selector.tool} if isinstance(selector, ToolSelector)
                        else {"service": selector.service if isinstance(selector, ServiceSelector) else ""},
                        "tool": tool, "recorded": recorded, "new": sorted(new.get(tool, frozenset())),
                    })
    return found


_Pkg = tuple[LockEntry, LockedPackage]


def _by_name(loaded: LoadedLock) -> dict[str, _Pkg]:
    return {
        entry.name: (entry, package)
        for entry, package in zip(loaded.lock.packages, loaded.packages, strict=True)
    }


def _sources(loaded: LoadedLock, keys: TrustedKeys | None, ceilings: Ceilings) -> tuple[PinnedSource, ...]:
    return pinned_sources(loaded.path, loaded.lock, keys=keys, require_signatures=False, ceilings=ceilings)


def _side(loaded: LoadedLock) -> LockSide:
    return LockSide(str(loaded.path), loaded.generation, loaded.digest, loaded.previous)


def _package_changes(name: str, old: _Pkg | None, new: _Pkg | None) -> Iterator[Change]:
    if new is None:
        if old is not None:
            yield Change(
                "package.removed", name, f"package {name}@{old[0].version} removed", False, old=old[0].version
            )
        return
    entry, package = new
    if old is None:
        origin = f" from {entry.source.display()}" if entry.source is not None else ""
        added = f"new package {name}@{entry.version}{origin}"
        yield Change("package.added", name, added, True, new=entry.version)
        yield from manifest_changes(name, None, package.manifest)
        return
    old_entry, old_package = old
    if old_entry.version != entry.version:
        yield Change(
            "package.version",
            name,
            f"version {old_entry.version} → {entry.version}",
            False,
            old=old_entry.version,
            new=entry.version,
        )
    if old_entry.module_sha256 != entry.module_sha256:
        yield Change(
            "package.module",
            name,
            "module.wasm changed (new code under the declared capabilities)",
            False,
            old=old_entry.module_sha256,
            new=entry.module_sha256,
        )
    yield from _signature_changes(name, old_entry.key_id, entry.key_id)
    yield from _source_changes(name, old_entry.source, entry.source)
    yield from manifest_changes(name, old_package.manifest, package.manifest)


def _signature_changes(name: str, old_key: str | None, new_key: str | None) -> Iterator[Change]:
    if old_key is not None and new_key is None:
        yield Change(
            "signature.dropped", name, f"no longer signed (was signed by key {old_key})", True, old=old_key
        )
    elif old_key is not None and new_key is not None and old_key != new_key:
        yield Change(
            "signature.key",
            name,
            f"signed by key {new_key} instead of {old_key}",
            True,
            old=old_key,
            new=new_key,
        )
    elif old_key is None and new_key is not None:
        yield Change("signature.added", name, f"now signed by key {new_key}", False, new=new_key)


def _source_changes(name: str, old: OciSource | None, new: OciSource | None) -> Iterator[Change]:
    if old == new:
        return
    if old is None and new is not None:
        yield Change("source.added", name, f"now pulled from {new.display()}", True, new=new.display())
    elif old is not None and new is None:
        was = f"no longer from a registry (was {old.display()})"
        yield Change("source.removed", name, was, True, old=old.display())
    elif old is not None and new is not None and old.repository != new.repository:
        yield Change(
            "source.changed",
            name,
            f"pulled from {new.repository} instead of {old.repository}",
            True,
            old=old.display(),
            new=new.display(),
        )
    elif old is not None and new is not None:
        yield Change(
            "source.digest", name, f"artifact {new.digest} instead of {old.digest}", False,
            old=old.display(), new=new.display(),
        )


# --- capability reports -------------------------------------------------------------------


def schema_summary(schema: Mapping[str, Any] | None, depth: int = 0) -> str:
    """A one-line summary of a schema of the bounded subset (``{repo*: string≤200}``).

    ``*`` marks required properties; ``≤`` and ``[a..b]`` show bounds.
    """
    if schema is None:
        return "null only"
    kind = schema.get("type")
    if depth > 3:
        return str(kind)
    if kind == "object":
        required = set(schema.get("required", ()))
        parts = [
            f"{name}{'*' if name in required else ''}: {schema_summary(sub, depth + 1)}"
            for name, sub in schema.get("properties", {}).items()
        ]
        return "{" + ", ".join(parts) + "}"
    if kind == "array":
        return f"array≤{schema.get('maxItems')} of {schema_summary(schema.get('items'), depth + 1)}"
    if kind == "string":
        enum = schema.get("enum")
        return f"enum{sorted(enum)}" if enum else f"string≤{schema.get('maxLength')}"
    if kind in ("integer", "number"):
        return f"{kind}[{schema.get('minimum')}..{schema.get('maximum')}]"
    return str(kind)


def _tool_report(tool: ToolSpec) -> dict[str, Any]:
    return {
        "name": tool.name,
        "version": tool.version,
        "description": tool.description,
        "effect": tool.effect.value,
        "risk": tool.risk.value,
        "permissions": list(tool.permissions),
        "timeout_s": tool.timeout_s,
        "rate_limit": tool.rate_limit.model_dump() if tool.rate_limit else None,
        "sensitive_params": list(tool.sensitive_params),
        "input": schema_summary(tool.input_schema),
        "output": schema_summary(tool.output_schema),
        "input_schema": tool.input_schema,
        "output_schema": tool.output_schema,
    }


def _http_report(manifest: PackageManifest) -> dict[str, Any]:
    http = manifest.http
    return {
        "allow": [
            {
                "origin": str(entry.host_pattern()),
                "scheme": entry.scheme,
                "host": entry.host,
                "port": entry.host_pattern().port,
                "path_prefix": entry.path_prefix,
                "methods": list(entry.methods),
                "propagate_trace": entry.propagate_trace,
            }
            for entry in http.allow
        ],
        "credentials": [
            {
                "secret": mapping.secret,
                "injected_as": credential_location(mapping),
                "location": mapping.location.model_dump(),
                "hosts": list(mapping.hosts),
                "path_prefixes": list(mapping.path_prefixes),
                "optional": mapping.optional,
                "oauth": mapping.oauth.model_dump() if mapping.oauth else None,
            }
            for mapping in http.credentials
        ],
        "token_hosts": list(http.token_hosts),
        "max_request_bytes": http.max_request_bytes,
        "max_response_bytes": http.max_response_bytes,
        "timeout_ms": http.timeout_ms,
    }


def package_report(
    manifest: PackageManifest,
    *,
    manifest_sha256: str,
    module_sha256: str,
    module_bytes: bytes | None,
    bundle: str | None = None,
    signature: Mapping[str, Any] | None = None,
    source: str | None = None,
) -> dict[str, Any]:
    """The capability report of one package (JSON-able).

    Args:
        manifest: the verified manifest.
        manifest_sha256: sha256 of ``manifest.json``.
        module_sha256: sha256 of ``module.wasm``.
        module_bytes: the module, to list its imports (``None`` skips the component).
        bundle: where the bundle is, for people.
        signature: ``{"signed", "key_id", "verified"}`` from a lock entry, if any.
        source: the registry reference a lock entry was pulled from (``oci://…@sha256:…``).

    Returns:
        ``{"name", "version", "description", "homepage", "bundle", "source",
        "manifest_sha256", "module_sha256", "signature", "limits", "http", "workspace_read",
        "tools", "component"}``; each tool carries its ``binding_digest`` (what a user's allow of
        it is bound to, :mod:`host.policy.bindings`; the signer's key id is part of it).
    """
    bindings = _binding_digests(manifest, signature)
    return {
        "name": manifest.package.name,
        "version": manifest.package.version,
        "description": manifest.package.description,
        "homepage": manifest.package.homepage,
        "bundle": bundle,
        "source": source,
        "manifest_sha256": manifest_sha256,
        "module_sha256": module_sha256,
        "signature": dict(signature) if signature is not None else None,
        "limits": manifest.limits.model_dump(),
        "http": _http_report(manifest),
        "workspace_read": [] if manifest.workspace is None else list(manifest.workspace.read),
        "tools": [
            {**_tool_report(tool), "binding_digest": bindings[tool.name, tool.version]}
            for tool in manifest.tools
        ],
        "component": component_report(module_bytes) if module_bytes is not None else None,
    }


def _binding_digests(
    manifest: PackageManifest, signature: Mapping[str, Any] | None
) -> dict[tuple[str, str], str]:
    key_id = signature.get("key_id") if signature is not None else None
    stand_in = Binding(manifest.package.name, manifest.package.version, 0, "0" * 64, manifest.module.sha256)
    registry = FrozenRegistry.from_packages([(manifest, stand_in)])  # generation and digests take no part
    return {t.key: package_binding(t, key_id=key_id) for t in registry}


def bundle_report(
    directory: Path, *, ceilings: Ceilings = DEFAULT_CEILINGS, imports: bool = True
) -> dict[str, Any]:
    """The capability report of a bundle directory.

    Args:
        directory: holds ``manifest.json`` and ``module.wasm``.
        ceilings: the ceilings the manifest must respect.
        imports: compile the component to list its imports (seconds for a large plugin).

    Raises:
        LockInvalid, ManifestInvalid, DigestMismatch: as :func:`sdk.bundle.read_bundle`.

    Returns:
        ``{"format", "kind": "bundle", "packages": [package_report]}``.
    """
    bundle = read_bundle(Path(directory), ceilings=ceilings)
    report = package_report(
        bundle.manifest,
        manifest_sha256=bundle.manifest_sha256,
        module_sha256=bundle.module_sha256,
        module_bytes=bundle.module_bytes if imports else None,
        bundle=str(directory),
    )
    return {"format": REPORT_FORMAT, "kind": "bundle", "packages": [report]}


def lock_report(
    path: Path,
    *,
    trusted_keys: Path | TrustedKeys | None = None,
    require_signatures: bool = False,
    ceilings: Ceilings = DEFAULT_CEILINGS,
    imports: bool = True,
    unsafe_allow_unsigned: bool = False,
) -> dict[str, Any]:
    """Verify a lock (digests, signatures, manifests) and report every package.

    Raises:
        LockInvalid, DigestMismatch, SignatureInvalid, ManifestInvalid: verification failed.

    Returns:
        ``{"format", "kind": "lock", "path", "generation", "digest", "previous", "packages"}``.
    """
    loaded = load_for_review(
        Path(path), trusted_keys=trusted_keys, require_signatures=require_signatures, ceilings=ceilings,
        unsafe_allow_unsigned=unsafe_allow_unsigned,
    )
    packages = []
    for entry, package in zip(loaded.lock.packages, loaded.packages, strict=True):
        signed = entry.signature is not None
        packages.append(
            package_report(
                package.manifest,
                manifest_sha256=package.binding.manifest_sha256,
                module_sha256=package.binding.module_sha256,
                module_bytes=package.module_bytes if imports else None,
                bundle=entry.bundle,
                signature={"signed": signed, "key_id": entry.key_id, "verified": signed},
                source=entry.source.display() if entry.source is not None else None,
            )
        )
    return {
        "format": REPORT_FORMAT,
        "kind": "lock",
        "path": str(loaded.path),
        "generation": loaded.generation,
        "digest": loaded.digest,
        "previous": loaded.previous,
        "packages": packages,
        "mcp": mcp_report(pinned_sources(
            loaded.path, loaded.lock, keys=TrustedKeys.load(trusted_keys) if isinstance(trusted_keys, Path)
            else trusted_keys, require_signatures=require_signatures, ceilings=ceilings,
        )),
    }


def _imports(component: wc.Component, engine: wasmtime.Engine) -> list[dict[str, Any]]:
    from wasmtime import component as wc  # noqa: PLC0415 - see the TYPE_CHECKING import

    listed = []
    for name, extern in component.type.imports(engine).items():
        ty = extern.ty
        if isinstance(ty, wc.ComponentInstanceType):
            members = ty.exports(engine)
            functions = sorted(m for m, e in members.items() if isinstance(e.ty, wc.FuncType))
            types = sorted(m for m, e in members.items() if not isinstance(e.ty, wc.FuncType))
            listed.append({"name": name, "kind": "instance", "functions": functions, "types": types})
        else:
            listed.append({"name": name, "kind": type(ty).__name__, "functions": [], "types": []})
    return sorted(listed, key=lambda item: str(item["name"]))


def component_report(module: bytes) -> dict[str, Any]:
    """List a component's imports and exports and judge them with the host's load-time checks.

    Never instantiates anything. A refused component is reported, not raised.

    Args:
        module: the ``module.wasm`` bytes.

    Returns:
        ``{"accepted": bool, "refusal": {"code", "message"} | None, "imports":
        [{"name", "kind", "functions", "types"}], "exports": [names]}``.
    """
    # wasmtime (under the checks and the artifact cache) loads only when a component is listed:
    # ``inspect --no-imports`` and the lock and diff reports start without it.
    from host.runtime.checks import check_component  # noqa: PLC0415
    from sdk._artifacts import cached_component, remember  # noqa: PLC0415

    report: dict[str, Any] = {"accepted": False, "refusal": None, "imports": [], "exports": []}
    try:
        check_header(module)
        census(module)  # the host parses the binary's structure before compiling it, too
        component, engine, fresh = cached_component(module)  # per-user artifact cache
        report["imports"] = _imports(component, engine)
        report["exports"] = sorted(component.type.exports(engine))
        check_component(component, engine)
        if fresh:
            remember(module, component)
    except ComponentRefused as exc:
        report["refusal"] = {"code": exc.code, "message": exc.message}
        return report
    report["accepted"] = True
    return report
