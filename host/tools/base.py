"""Host tools: tools the host itself runs, through the same pipeline as package tools.

A host tool is a :class:`HostTool`: a name, an exact version, a description, input and
output schemas in the bounded subset, an effect, a risk, permissions, a timeout, the
input fields the audit log must never hold (``sensitive_params``) and two functions:

- ``prepare(call) -> Prepared`` (optional; tools whose effect is not ``read``): runs after
  policy and input validation, before approval. It computes what the call *would do*
  (an edit's new content and diff) without doing it. ``Prepared.bound`` is folded into
  the action digest (:func:`bind_digest`), so an approval covers exactly that effect;
  ``Prepared.preview`` is what the person sees; ``Prepared.record`` goes into the audit
  intent record (never file contents).
- ``run(call, prepared) -> output``: runs at step 10, after rate limit and the durable
  intent record. It must re-check what ``prepare`` bound (``prepared`` is recomputed from
  the current state by the same ``prepare``; the host compared its ``bound`` with the
  approved one first) and return JSON data matching ``output_schema``. A ``run`` that
  returns a mapping may put the audit outcome fields under the key given by
  :data:`OUTCOME_KEY` in :class:`Ran`.

A :class:`HostToolSet` turns tools into built-in packages (one per name prefix: ``fs``)
of the frozen registry, bound by one digest over their manifests, so the registry, policy
(``tool.call:{name}`` + permissions), layered tool
policy (class defaults: write → ask), approvals, rate limits and audit treat them like any
package tool. Resources (a workspace root fd, command entries) come from the operator's
configuration and are captured by the tools' functions; the model, a client or a manifest
never chooses them.

Example::

    tool = HostTool(name="fs.list", version="1.0.0", description="...", input_schema=...,
                    output_schema=..., effect=Effect.READ, risk=Risk.LOW, permissions=("fs.read",),
                    run=lambda call, prepared: Ran({"entries": []}))
    tools = HostToolSet([tool], ceilings=DEFAULT_CEILINGS)
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from host.canonical import canonical_json, digest_json, parse_json, sha256_hex
from host.config import DEFAULT_CEILINGS, Ceilings
from host.errors import ApprovalInvalid, StockadeError, ToolFailed
from host.formats.manifest import MANIFEST_FORMAT, Effect, PackageManifest, Risk
from host.secrets.store import SecretValue
from host.tools.preopens import PluginReads
from host.trust.registry import Binding, ToolDefinition
from host.types import InvocationPlan, Principal

__all__ = [
    "HOST_PACKAGE",
    "HOST_TOOL_DOMAIN",
    "HostCall",
    "HostTool",
    "HostToolSet",
    "Prepared",
    "Ran",
    "bind_digest",
]

HOST_PACKAGE: Final = "stockade.host"
"""Description of the built-in host packages (each is named after its tools' prefix: ``fs``)."""
HOST_PACKAGE_VERSION: Final = "1.0.0"
_PREPARED_KEPT: Final = 64  # prepared effects kept for run() (each holds one new file image)
HOST_TOOL_DOMAIN: Final = "stockade/host-tool-action@1"
"""Domain separator of a host tool's effect-bound action digest."""


@dataclass(frozen=True, slots=True)
class HostCall:
    """What a host tool's functions get: who calls, in which session, with which input
    (validated against the input schema and canonical), and, for ``run`` only, the
    caller's cancel event (``exec.run`` stops its process when it is set) and the secrets
    the pipeline staged for the call (the names the tool's ``secrets`` function asked for)."""

    principal: Principal
    session: str
    input: Mapping[str, Any]
    cancel: threading.Event | None = None
    secrets: Mapping[str, SecretValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Prepared:
    """What a call would do, computed before approval.

    Args:
        bound: JSON data bound into the action digest (digests, sizes, the path).
        preview: text for the person who approves (e.g. the unified diff), escaped.
        record: fields of the audit intent record (no contents).
    """

    bound: Mapping[str, Any]
    preview: str | None = None
    record: Mapping[str, Any] = field(default_factory=dict)
    state: Any = field(default=None, repr=False, compare=False)  # private to the tool


@dataclass(frozen=True, slots=True)
class Ran:
    """The result of a host tool's ``run``: its output and the audit outcome fields."""

    output: Any
    record: Mapping[str, Any] = field(default_factory=dict)


PrepareFn = Callable[[HostCall], Prepared]
RunFn = Callable[[HostCall, "Prepared | None"], Ran]


@dataclass(frozen=True, slots=True, kw_only=True)
class HostTool:
    """One host tool (see the module docstring for the contract of each function)."""

    name: str
    version: str
    description: str
    input_schema: Mapping[str, Any]
    output_schema: Mapping[str, Any]
    effect: Effect
    risk: Risk
    permissions: tuple[str, ...]
    run: RunFn
    prepare: PrepareFn | None = None
    secrets: Callable[[HostCall], tuple[str, ...]] | None = None  # names to stage for a call
    timeout_s: int = 30
    sensitive_params: tuple[str, ...] = ()

    def spec(self) -> dict[str, Any]:
        """The manifest ``tools`` entry of this tool."""
        return {
            "name": self.name,
            "version": self.version,
            "description": self.description,
            "input_schema": dict(self.input_schema),
            "output_schema": dict(self.output_schema),
            "effect": self.effect.value,
            "risk": self.risk.value,
            "permissions": list(self.permissions),
            "timeout_s": self.timeout_s,
            "sensitive_params": list(self.sensitive_params),
        }


def bind_digest(base: str, bound: Mapping[str, Any]) -> str:
    """The action digest of a host tool call whose effect was prepared: the §7 digest of
    the call and the prepared effect (e.g. pre-image and diff sha256), under their own domain."""
    return digest_json({"domain": HOST_TOOL_DOMAIN, "action": base, "effect": dict(bound)})


class HostToolSet:
    """The host tools of one Host, as one built-in package of the frozen registry.

    Args:
        tools: the tools (distinct names).
        ceilings: the host ceilings (the package manifest is validated under them).
        close: called by :meth:`close` (releases the tools' resources, e.g. root fds).
        plugin_reads: opens a plugin call's read-only workspace preopens
            (``Workspaces.plugin_reads``); None when no workspace is granted.

    Raises:
        ManifestInvalid: a tool's name or schemas leave the manifest rules.
        ValueError: two tools with one name (caller misuse).
    """

    def __init__(
        self,
        tools: Iterable[HostTool],
        *,
        ceilings: Ceilings = DEFAULT_CEILINGS,
        close: Callable[[], None] | None = None,
        plugin_reads: Callable[[Principal, Sequence[str]], PluginReads] | None = None,
    ) -> None:
        self._tools = {t.name: t for t in tools}
        self._close = close
        self._plugin_reads = plugin_reads
        self._lock = threading.Lock()
        self._prepared: dict[str, Prepared] = {}  # by bound action digest, oldest first
        groups: dict[str, list[HostTool]] = {}
        for tool in self._tools.values():
            groups.setdefault(tool.name.split(".", 1)[0], []).append(tool)
        raws = {name: canonical_json(_package_doc(name, group)) for name, group in sorted(groups.items())}
        self.manifests = {
            name: PackageManifest.from_json(raw, ceilings=ceilings) for name, raw in raws.items()
        }
        # One digest over every built-in package: it binds each tool's schemas and rules.
        self.digest = digest_json({name: sha256_hex(raw) for name, raw in raws.items()})

    def __len__(self) -> int:
        return len(self._tools)

    def registry_items(self, generation: int) -> Iterator[tuple[PackageManifest, Binding]]:
        """The registry entries of the built-in packages (one per tool name prefix)."""
        for name, manifest in self.manifests.items():
            yield manifest, Binding(name, HOST_PACKAGE_VERSION, generation, self.digest, self.digest)

    def plugin_reads(self, principal: Principal, declared: Sequence[str]) -> PluginReads:
        """The read-only preopens of a plugin call (all withheld without workspaces)."""
        if self._plugin_reads is None:
            return PluginReads(withheld=[(path, "no_workspace") for path in declared])
        return self._plugin_reads(principal, declared)

    def owns(self, tool: ToolDefinition) -> bool:
        """Whether ``tool`` is one of these host tools (by its exact binding digest)."""
        return tool.binding.module_sha256 == self.digest and tool.name in self._tools

    def bind(self, plan: InvocationPlan, tool: ToolDefinition) -> InvocationPlan:
        """Prepare a host tool's effect and fold it into the plan's action digest and preview.

        Raises:
            StockadeError: the tool's ``prepare`` refused (INPUT_INVALID, POLICY_DENIED, ...).
        """
        host_tool = self._tools[tool.name]
        if host_tool.prepare is None:
            return plan
        prepared = host_tool.prepare(_call_of(plan))
        digest = bind_digest(plan.action_digest, prepared.bound)
        with self._lock:  # run() uses it: the digest determines the effect exactly
            self._prepared[digest] = prepared
            while len(self._prepared) > _PREPARED_KEPT:
                self._prepared.pop(next(iter(self._prepared)))
        preview = dataclasses.replace(plan.preview, action_digest=digest, detail=prepared.preview)
        effect = {"bound": dict(prepared.bound), **prepared.record}
        return dataclasses.replace(plan, action_digest=digest, preview=preview, effect=effect)

    def secret_names(self, plan: InvocationPlan, tool: ToolDefinition) -> tuple[str, ...]:
        """The secrets a host tool's call needs staged (step 8), from its ``secrets`` function."""
        host_tool = self._tools[tool.name]
        return () if host_tool.secrets is None else host_tool.secrets(_call_of(plan))

    def invoke(
        self,
        plan: InvocationPlan,
        tool: ToolDefinition,
        *,
        cancel: threading.Event | None = None,
        staged: Mapping[str, SecretValue] | None = None,
    ) -> Ran:
        """Run a host tool (step 10) for an admitted plan.

        For a tool with ``prepare``, the effect prepared under this exact digest is used
        (it was computed from the state the digest binds; ``run`` re-checks that state
        before it acts, e.g. the pre-image sha256 before the rename); if it is no longer
        kept, it is prepared again and must bind the same effect as the plan did, else
        ``APPROVAL_INVALID`` with ``reason: "stale"`` and nothing is done.

        Raises:
            ApprovalInvalid: the state changed since the plan was prepared (``stale``).
            StockadeError: the tool refused or failed.
        """
        host_tool = self._tools[tool.name]
        call = dataclasses.replace(_call_of(plan, cancel), secrets=dict(staged or {}))
        prepared = None
        if host_tool.prepare is not None:
            with self._lock:
                prepared = self._prepared.pop(plan.action_digest, None)
            if prepared is None:  # not kept (evicted, or prepared by another host object)
                prepared = host_tool.prepare(call)
            if plan.effect is None or dict(prepared.bound) != plan.effect.get("bound"):
                raise stale(tool.name)
        try:
            return host_tool.run(call, prepared)
        except StockadeError:
            raise
        except OSError as exc:
            raise ToolFailed(f"{tool.name} failed: {exc.strerror or exc}", reason="io_error") from exc

    def close(self) -> None:
        """Release the tools' resources (idempotent if ``close`` is)."""
        if self._close is not None:
            self._close()


def _package_doc(name: str, tools: Iterable[HostTool]) -> dict[str, Any]:
    """The manifest of one built-in package: no module, no network, no log."""
    return {
        "format": MANIFEST_FORMAT,
        "package": {"name": name, "version": HOST_PACKAGE_VERSION, "description": HOST_PACKAGE},
        "module": {"file": "module.wasm", "sha256": "0" * 64, "world": "stockade:plugin/tool@1.0.0"},
        "limits": {
            "fuel": 1,
            "memory_bytes": 65536,
            "timeout_ms": 60_000,
            "max_http_requests": 0,
            "max_log_bytes": 1,
        },
        "http": {
            "allow": [],
            "credentials": [],
            "max_request_bytes": 0,
            "max_response_bytes": 0,
            "timeout_ms": 1,
        },
        "tools": [t.spec() for t in tools],
    }


def stale(tool: str) -> ApprovalInvalid:
    """The refusal of a host tool call whose target changed after it was prepared."""
    return ApprovalInvalid(
        f"{tool}: the target changed since the action was prepared and approved; nothing was written",
        reason="stale",
        hint="Read the file again, prepare the edit again and ask for a new approval.",
    )


def _call_of(plan: InvocationPlan, cancel: threading.Event | None = None) -> HostCall:
    value = parse_json(plan.canonical_input)
    return HostCall(plan.request.principal, plan.request.session, value, cancel)
