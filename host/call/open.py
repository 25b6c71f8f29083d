"""The steps of opening a lock, private to the gateway (docs/design.md §4, §11).

:meth:`host.call.host.Host.open` runs them in this order, each one only after the previous
one succeeded:

1. :func:`host.trust.lock.load_lock` verifies the lock (digests, signatures, manifests);
2. :func:`compile_packages` compiles (or loads from the verified artifact cache) every
   package's component and pairs it with its egress allowlist;
3. the frozen registry is built from the verified manifests;
4. :func:`accept_generation` moves the state store's trust state forward to the lock's
   generation (rollback checks) and appends the ``lock.accepted`` audit record.

:func:`load_generation` runs steps 2–4 (and starts the pinned MCP servers) and closes
whatever it started when one fails; steps 2 and 4 are also separate functions so that a
reload can reuse them in the same order.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from host.adapters.schemas import check_model_names
from host.audit.key import AuditKey
from host.audit.log import AuditLog
from host.config import HostConfig
from host.egress.policy import EgressPolicy, Resolver, system_resolver
from host.errors import AuditUnavailable
from host.formats.mcppin import PinnedSource, load_pinned_sources
from host.mcpsource import hosting as mcp_hosting
from host.mcpsource.rpc import McpNetwork
from host.policy.bindings import package_bindings
from host.runtime import LoadedComponent, ProgressEvent, Runtime
from host.secrets.store import SecretsStore
from host.store.local import LocalStore, check_state_dir_free
from host.store.port import StateStore
from host.tools.base import HostToolSet
from host.trust.lock import LoadedLock, TrustedKeys, load_lock
from host.trust.registry import FrozenRegistry

if TYPE_CHECKING:  # annotations only: the MCP client stack loads when a lock pins sources
    from host.mcpsource.source import McpSource

__all__ = [
    "Generation",
    "Package",
    "accept_generation",
    "compile_packages",
    "load_generation",
    "local_store",
    "open_audit",
    "trusted_approver_keys",
    "verify_lock",
]


@dataclass(frozen=True, slots=True)
class Package:
    """A loaded package: its compiled component and its egress allowlist (None: no network)."""

    component: LoadedComponent
    egress_policy: EgressPolicy | None


@dataclass(frozen=True, slots=True)
class Generation:
    """One accepted lock generation, loaded: what a Host runs calls with."""

    runtime: Runtime
    packages: dict[str, Package]
    registry: FrozenRegistry
    sources: dict[str, McpSource]
    bindings: dict[tuple[str, str], str]  # (tool, version) → binding digest (host.policy.bindings)


def load_generation(
    loaded: LoadedLock,
    pinned: tuple[PinnedSource, ...],
    *,
    config: HostConfig,
    state: StateStore,
    secrets: SecretsStore | None,
    progress: Callable[[ProgressEvent], None] | None,
    unsafe_accept_rollback: bool,
    resolver: Resolver | None = None,
    host_tools: HostToolSet | None = None,
) -> Generation:
    """Steps 2–4 of a verified lock: compile, build the registry, accept the generation,
    then start the pinned MCP servers (HTTP ones reached through ``resolver`` and the
    config's CA file and loopback opt-in). On failure the runtime and the servers started
    are closed (the store is the caller's) and the error propagates.

    Raises:
        DigestMismatch, ComponentRefused, LockInvalid, LockRollback, AuditUnavailable,
            StoreUnavailable: as the steps.
    """
    runtime = Runtime(config)
    sources: dict[str, McpSource] = {}
    try:
        packages = compile_packages(runtime, loaded, progress=progress)
        registry = FrozenRegistry.from_packages([
            *((p.manifest, p.binding) for p in loaded.packages),
            *mcp_hosting.registry_items(pinned, loaded.generation),
            *(host_tools.registry_items(loaded.generation) if host_tools is not None else ()),
        ])
        check_model_names(registry)  # no tool may vanish behind another's model-facing name
        accept_generation(state, loaded, config=config, unsafe_accept_rollback=unsafe_accept_rollback)
        network = McpNetwork(resolver or system_resolver, config.extra_ca_file, config.unsafe_allow_loopback)
        sources = mcp_hosting.start_sources(
            pinned, state_dir=config.state_dir, secrets=secrets, audit=state.audit, network=network
        )
    except BaseException:
        for source in sources.values():
            source.close()
        runtime.close()
        raise
    return Generation(runtime, packages, registry, sources, tool_bindings(loaded, pinned, registry))


def tool_bindings(
    loaded: LoadedLock, pinned: tuple[PinnedSource, ...], registry: FrozenRegistry
) -> dict[tuple[str, str], str]:
    """The binding digest of every tool of a verified lock: package tools over what they
    can reach and the key id that signed their package, MCP tools over their transport
    and pinned definition (:mod:`host.policy.bindings`)."""
    key_ids = {entry.name: entry.key_id for entry in loaded.lock.packages}
    mcp = mcp_hosting.binding_digests(pinned)
    packaged = package_bindings((t for t in registry if t.key not in mcp), key_ids)
    return {**packaged, **mcp}


def verify_lock(path: Path, config: HostConfig) -> tuple[LoadedLock, tuple[PinnedSource, ...]]:
    """Step 1: the lock and the MCP sources it pins, every digest and signature verified.

    Raises:
        LockInvalid, LockRollback, DigestMismatch, SignatureInvalid, ManifestInvalid: as
            :func:`host.trust.lock.load_lock` and :func:`host.formats.mcppin.load_pinned_sources`.
    """
    keys = TrustedKeys.load(config.trusted_keys_file) if config.trusted_keys_file else None
    loaded = load_lock(path, config=config, trusted_keys=keys)
    pinned = load_pinned_sources(
        path, loaded.lock.mcp, ceilings=config.ceilings,
        require_signatures=config.require_signatures, keys=keys,
    )  # fmt: skip
    return loaded, pinned


def compile_packages(
    runtime: Runtime, loaded: LoadedLock, *, progress: Callable[[ProgressEvent], None] | None
) -> dict[str, Package]:
    """Compile every package of a verified lock, in parallel (:meth:`Runtime.load_many`).

    Raises:
        DigestMismatch, ComponentRefused: as :meth:`Runtime.load_many`.
    """
    items = [(p.binding.package, p.module_bytes, p.binding.module_sha256) for p in loaded.packages]
    components = runtime.load_many(items, progress=progress)
    packages: dict[str, Package] = {}
    for locked, component in zip(loaded.packages, components, strict=True):
        http = locked.manifest.http
        allow = EgressPolicy.from_allow(http.allow) if http is not None and http.allow else None
        packages[locked.binding.package] = Package(component, allow)
    return packages


def accept_generation(
    state: StateStore, loaded: LoadedLock, *, config: HostConfig, unsafe_accept_rollback: bool
) -> None:
    """Accept the lock's generation into the state store, then record it (``lock.accepted``).

    Raises:
        LockRollback: an older, forked or too far ahead generation, or a package
            downgrade, without ``unsafe_accept_rollback``.
        AuditUnavailable, StoreUnavailable: the store could not record it.
    """
    overridden = state.locks.accept(loaded, unsafe_accept_rollback=unsafe_accept_rollback)
    state.audit.append(
        "lock.accepted",
        {
            "generation": loaded.generation,
            "digest": loaded.digest,
            "packages": [f"{p.binding.package}@{p.binding.version}" for p in loaded.packages],
            "lock_key_id": loaded.lock_key_id,
            "unsafe_accept_rollback": unsafe_accept_rollback,
            "overridden": list(overridden),
            "unsafe_allow_loopback": config.unsafe_allow_loopback,
            "unsafe_allow_unsigned": config.unsafe_allow_unsigned,
            "unsafe_exec_without_sandbox": config.unsafe_exec_without_sandbox,
        },
    )


def local_store(config: HostConfig, audit: AuditLog | str | Path | None) -> LocalStore:
    """The default store: ``config.state_dir`` with ``audit`` (opened here if a path)."""
    if audit is None:
        raise TypeError("Host.open needs audit= (a path or an AuditLog) or store=")
    trusted = functools.partial(trusted_approver_keys, config)
    if isinstance(audit, AuditLog):
        return LocalStore(config.state_dir, audit=audit, trusted_approver_keys=trusted)
    try:
        log = open_audit(Path(audit), config)
    except AuditUnavailable:
        # Held by another writer: most likely another host process on this state dir
        # (`stockade serve`); say that, with the way to share it, as a second store would.
        check_state_dir_free(config.state_dir)
        raise
    return LocalStore(config.state_dir, audit=log, owns_audit=True, trusted_approver_keys=trusted)


def trusted_approver_keys(config: HostConfig) -> TrustedKeys | None:
    """The approver public keys a host verifies scopes against: ``trusted_approver_keys``
    and the public half of ``approver_key`` (read when first needed).

    Raises:
        ConfigInvalid, LockInvalid: a configured key file is unsafe or invalid.
    """
    from host.approverkey import ApproverKey, trusted_with  # noqa: PLC0415 - read on first use

    listed = config.trusted_approver_keys_file
    keys = None if listed is None else TrustedKeys.load(listed)
    own = None if config.approver_key_file is None else ApproverKey.load(config.approver_key_file)
    return trusted_with(keys, own)


def open_audit(path: Path, config: HostConfig) -> AuditLog:
    """The host's own audit log: durability as configured, checkpoints signed by the
    state directory's audit key (created on first use)."""
    return AuditLog(
        path,
        durability=config.audit_durability,
        flush_interval_ms=config.audit_flush_interval_ms,
        signer=AuditKey.load_or_create(config.state_dir),
        checkpoint_every=config.audit_checkpoint_every,
        checkpoint_interval_s=config.audit_checkpoint_interval_s,
    )
