"""The Host: the one entry point for a tool call (DESIGN §6, §11).

Nothing runs a guest except :meth:`Host.execute`, and nothing reaches it except through
:func:`host.plan.prepare`. The pipeline, in order:

1–6. :func:`host.plan.prepare` — envelope, registry, policy before input, tool policy,
     input canonicalization, action digest, approval requirement;
7.   rate limit per (principal, tool);
8.   pre-flight secrets: every required secret must exist for the principal, or the call
     fails with CREDENTIAL_UNAVAILABLE and the guest never starts; values are staged for
     this call only;
9.   for effects other than ``read``, an intent record is appended to the audit log; if
     that fails the call is refused with AUDIT_UNAVAILABLE and nothing runs;
10.  the guest runs in a fresh sandbox; its output is validated against
     ``output_schema``, canonicalized, bounded and scrubbed of staged secrets;
11.  an outcome record is appended, success or failure, with sensitive params redacted
     and usage (fuel, duration, HTTP requests, bytes).

Every refusal is returned as a :class:`CallResult` with a stable error code; :meth:`call`
never raises for untrusted input. Host-app misuse (a closed host) raises RuntimeError.

Example::

    with Host.open("stockade.lock", config=HostConfig(state_dir=d), secrets=store,
                   policy=FilePolicyEngine(d / "policy.json"), audit=d / "audit.log") as host:
        result = host.call(CallRequest(principal=Principal(project="p", subject="alice"),
                                       session="s1", tool="tracker.list-issues",
                                       version="1.2.0", input={"repo": "x"}))
"""

from __future__ import annotations

import asyncio
import functools
import logging
import shlex
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from host.adapters.schemas import ToolFormat, check_model_names, resolve_model_name, tool_schemas
from host.audit import AuditLog, redact_params
from host.auditkey import AuditKey
from host.canonical import parse_json
from host.config import HostConfig
from host.egress.policy import EgressPolicy, Resolver, system_resolver
from host.egress.port import DenyAllEgress, EgressPort, HttpFailure, HttpRequest, HttpResponse
from host.egress.session import EgressSession
from host.egress.transport import TransportFactory
from host.errors import (
    ApprovalRequired,
    CallCancelled,
    CredentialUnavailable,
    EgressDenied,
    EgressUnreachable,
    OutputInvalid,
    StockadeError,
)
from host.lock import TrustedKeys, load_lock
from host.mcpsource import hosting as mcp_hosting
from host.mcpsource.pin import load_pinned_sources
from host.mcpsource.source import McpSource
from host.plan import Approval, CallRequest, InvocationPlan, Principal, prepare
from host.policy.engine import PolicyEngine
from host.policy.toolpolicy import ToolPolicyStore
from host.redact import Redactor
from host.registry import FrozenRegistry, ToolDefinition
from host.reload import CallGate, GenerationFollower, ReloadEvent, Reopener, between_swaps
from host.runtime import LoadedComponent, ProgressEvent, Runtime, SandboxLimits, SandboxResult
from host.schema import canonicalize
from host.secrets import SecretsStore, SecretValue
from host.store.local import LocalStore
from host.store.port import StateStore
from host.store.watch import DEFAULT_POLL_S

__all__ = ["CallResult", "ErrorInfo", "Host", "ProgressHook", "Usage"]

ProgressHook = Callable[[str, Mapping[str, Any]], None]
"""Receives a call's stages from the worker thread: ``authorized``, ``approved``,
``sandbox_started``, ``http_request`` (once per outbound request, with method, host and
outcome) and ``done``. It must not raise and should return quickly."""

_log = logging.getLogger("stockade.gateway")

_NO_REDACTION = Redactor(())
"""The redactor of a call that staged no secret (built once: it redacts nothing)."""


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """A refusal as the caller sees it: stable code, message, hint, safe details."""

    code: str
    message: str
    hint: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Usage:
    """What a call consumed."""

    fuel: int = 0
    duration_ms: float = 0.0
    http_requests: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (for audit records)."""
        return {
            "fuel": self.fuel,
            "duration_us": round(self.duration_ms * 1000),
            "http_requests": self.http_requests,
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
        }


@dataclass(frozen=True, slots=True)
class CallResult:
    """The answer to a call: ``output`` when ``ok``, else ``error``.

    ``audit_id`` is the hash of the outcome record; ``log`` the guest's captured log
    (scrubbed of staged secrets).
    """

    ok: bool
    output: Any = None
    error: ErrorInfo | None = None
    audit_id: str | None = None
    usage: Usage = field(default_factory=Usage)
    log: str = ""
    action_digest: str | None = None


@dataclass(frozen=True, slots=True)
class _Package:
    component: LoadedComponent
    egress_policy: EgressPolicy | None


class Host:
    """A loaded lock: frozen registry, compiled components, policy, secrets and audit.

    Use :meth:`open`; the constructor is private. Close it (or use ``with``) to stop the
    epoch ticker thread.
    """

    def __init__(
        self,
        *,
        config: HostConfig,
        registry: FrozenRegistry,
        packages: Mapping[str, _Package],
        runtime: Runtime,
        secrets: SecretsStore | None,
        policy: PolicyEngine,
        tool_policy: ToolPolicyStore,
        store: StateStore,
        resolver: Resolver,
        generation: int,
        transport_factory: TransportFactory | None,
        owns_store: bool,
        mcp_sources: Mapping[str, McpSource] | None = None,
    ) -> None:
        """:meta private:"""
        self.config = config
        self.registry = registry
        self.generation = generation
        self.store = store
        self.grants = store.grants
        self._packages = dict(packages)
        self._runtime = runtime
        self._secrets = secrets
        self._policy = policy
        self._tool_policy = tool_policy
        self._audit = store.audit
        self._resolver = resolver
        self._limiter = store.rate_limits
        self._approvals = store.approvals
        self._owns_store = owns_store
        self._transport_factory = transport_factory
        self._closed = threading.Event()
        self._limits_by_tool: dict[tuple[str, str], SandboxLimits] = {}
        self._mcp = dict(mcp_sources or {})
        self._gate = CallGate()  # a generation swap (host.reload) happens between calls
        self._reopen: Reopener | None = None
        self._follower: GenerationFollower | None = None

    # -- opening -----------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        lock: str | Path,
        *,
        config: HostConfig,
        secrets: SecretsStore | None,
        policy: PolicyEngine,
        audit: AuditLog | str | Path | None = None,
        store: StateStore | None = None,
        own_store: bool = False,
        tool_policy: ToolPolicyStore | None = None,
        resolver: Resolver | None = None,
        transport_factory: TransportFactory | None = None,
        progress: Callable[[ProgressEvent], None] | None = None,
        unsafe_accept_rollback: bool = False,
    ) -> Host:
        """Verify a lock, compile its components and build the frozen registry.

        The lock's generation is accepted into the state store only after every digest,
        signature, manifest and component check passed.

        MCP sources the lock pins (``host.mcpsource``) are verified with it; their
        servers are started after the lock is accepted and their live tools compared with
        the pins (a changed or new tool is not offered). A server that fails to start does
        not fail ``open``: it is audited (``mcp.unavailable``) and retried on the first call.

        Args:
            lock: path of ``stockade.lock``.
            config: host configuration and ceilings.
            secrets: the secrets store (``None``: no secrets; packages that require one
                fail their calls with CREDENTIAL_UNAVAILABLE).
            policy: the PolicyEngine port (e.g. ``FilePolicyEngine``).
            audit: an AuditLog, or a path to open one at (closed with the host), for the
                default local store; omit it when passing ``store``.
            store: the state store (:mod:`host.store`) holding the audit chain,
                approvals, rate limits, session grants and accepted lock generations;
                e.g. ``PostgresStore(dsn)`` to share them between host processes. The
                caller closes it unless ``own_store``. Default: a
                :class:`~host.store.LocalStore` on ``config.state_dir`` with ``audit``,
                closed with the host.
            own_store: close ``store`` with the host (also when opening fails).
            tool_policy: layered tool policy store (default: under ``state_dir``).
            resolver: DNS resolver port (default: the system resolver).
            transport_factory: builds the HTTP transport from the vetted pins (default:
                the pinned TLS transport). The author harness passes scripted responses
                here; every policy, credential and redaction step still runs.
            progress: receives compile progress events.
            unsafe_accept_rollback: accept an older, forked or too far ahead lock
                generation, or a package downgrade; logged, recorded in the state file and
                in the audit log (``overridden`` names what was overridden).

        Raises:
            LockInvalid, LockRollback, DigestMismatch, SignatureInvalid: the lock.
            ManifestInvalid: a bundled manifest.
            ComponentRefused: a module is not an acceptable component.
            AuditUnavailable: the audit log cannot be opened or written.
            StoreUnavailable: the state store cannot be reached, or the local state dir
                is in use by another host process.
            TypeError: both or neither of ``audit`` and ``store``.
        """
        if store is not None and audit is not None:
            raise TypeError("pass audit= or store=, not both: the store holds the audit chain")
        config.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            keys = TrustedKeys.load(config.trusted_keys_file) if config.trusted_keys_file else None
            loaded = load_lock(Path(lock), config=config, trusted_keys=keys)
            pinned = load_pinned_sources(
                Path(lock), loaded.lock.mcp, ceilings=config.ceilings,
                require_signatures=config.require_signatures, keys=keys,
            )
        except BaseException:
            if store is not None and own_store:
                store.close()
            raise
        # Opened after the lock verified: a refused lock (e.g. BUNDLE_MISSING) leaves no
        # audit writer or state-dir lock open, so the same process can fetch and open again.
        owns_store = store is None or own_store
        state = store if store is not None else _local_store(config, audit)
        try:
            runtime = Runtime(config)
        except BaseException:
            if owns_store:
                state.close()
            raise
        sources: dict[str, McpSource] = {}
        try:
            items = [(p.binding.package, p.module_bytes, p.binding.module_sha256) for p in loaded.packages]
            components = runtime.load_many(items, progress=progress)
            packages: dict[str, _Package] = {}
            for locked, component in zip(loaded.packages, components, strict=True):
                http = locked.manifest.http
                allow = EgressPolicy.from_allow(http.allow) if http is not None and http.allow else None
                packages[locked.binding.package] = _Package(component, allow)
            registry = FrozenRegistry.from_packages([
                *((p.manifest, p.binding) for p in loaded.packages),
                *mcp_hosting.registry_items(pinned, loaded.generation),
            ])
            check_model_names(registry)  # no tool may vanish behind another's model-facing name
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
                },
            )
            sources = mcp_hosting.start_sources(
                pinned, state_dir=config.state_dir, secrets=secrets, audit=state.audit
            )
        except BaseException:
            for source in sources.values():
                source.close()
            runtime.close()
            if owns_store:
                state.close()
            raise
        tool_store = tool_policy or ToolPolicyStore(
            config.state_dir / "tool-policy", admin_dir=config.admin_policy_dir
        )
        host = cls(
            config=config,
            registry=registry,
            packages=packages,
            runtime=runtime,
            secrets=secrets,
            policy=policy,
            tool_policy=tool_store,
            store=state,
            resolver=resolver or system_resolver,
            generation=loaded.generation,
            transport_factory=transport_factory,
            owns_store=owns_store,
            mcp_sources=sources,
        )
        host._reopen = Reopener(Path(lock), {
            "config": config, "secrets": secrets, "policy": policy, "store": state, "tool_policy": tool_store,
            "resolver": resolver, "transport_factory": transport_factory,
        })
        return host

    # -- the pipeline --------------------------------------------------------------------

    def prepare(self, request: CallRequest | Mapping[str, Any]) -> InvocationPlan:
        """DESIGN §6 steps 1–6 without running anything.

        Raises:
            RequestInvalid, ToolNotFound, PolicyDenied, PolicyUnavailable, InputInvalid.
        """
        self._check_open()
        return prepare(
            request,
            registry=self.registry,
            engine=self._policy,
            tool_policy=self._tool_policy,
            grants=self.grants,
            max_input_bytes=self.config.ceilings.max_input_bytes,
        )

    def approve(self, plan: InvocationPlan, *, ttl_s: float = 300.0) -> Approval:
        """Issue a single-use approval for exactly this plan's action, principal and session.

        Call this only after a person approved the plan's ``preview``.
        """
        self._check_open()
        return self._approvals.issue(plan, ttl_s=ttl_s)

    @between_swaps
    def call(
        self,
        request: CallRequest | Mapping[str, Any],
        *,
        cancel: threading.Event | None = None,
        progress: ProgressHook | None = None,
    ) -> CallResult:
        """Prepare and, if allowed, execute one call. Never raises for untrusted input.

        The plan is used at once, so policy is not decided twice; an approval carried in
        the envelope is redeemed exactly as :meth:`execute` would.

        Args:
            request: the call envelope.
            cancel: set it from another thread to cancel the call: a running guest is
                interrupted within about 10 ms (its store is stopped) and the result is
                CANCELLED, recorded as such in the audit log.
            progress: receives the call's stages (:data:`ProgressHook`).
        """
        try:
            plan = self.prepare(request)
        except StockadeError as exc:
            return self._refused(request, exc)
        return self._admit_and_run(plan, plan.request.approval, cancel, progress)

    async def acall(self, request: CallRequest | Mapping[str, Any]) -> CallResult:
        """The same pipeline as :meth:`call`, run in a worker thread."""
        return await asyncio.to_thread(self.call, request)

    @between_swaps
    def execute(
        self,
        plan: InvocationPlan,
        approval: Approval | None = None,
        *,
        cancel: threading.Event | None = None,
        progress: ProgressHook | None = None,
    ) -> CallResult:
        """Run a prepared plan (DESIGN §6 steps 7–11), re-authorizing first.

        Policy is decided again, so a revoke between prepare and execute denies; the
        fresh plan must have the same action digest; an approval-required plan needs an
        approval bound to that digest, principal and session. ``cancel`` and
        ``progress`` are as for :meth:`call`.
        """
        try:
            current = self.prepare(plan.request)
            if current.action_digest != plan.action_digest:
                raise ApprovalRequired("the action changed since it was prepared; prepare it again")
        except StockadeError as exc:
            return self._refused(plan.request, exc, digest=plan.action_digest)
        return self._admit_and_run(current, approval, cancel, progress)

    def _admit_and_run(
        self,
        plan: InvocationPlan,
        approval: Approval | None,
        cancel: threading.Event | None = None,
        progress: ProgressHook | None = None,
    ) -> CallResult:
        report = progress or _no_progress
        report("authorized", {"tool": plan.tool, "version": plan.version, "status": plan.status})
        try:
            if plan.status == "approval_required":
                if approval is None:
                    raise ApprovalRequired(
                        f"{plan.tool} needs a person's approval",
                        action_digest=plan.action_digest,
                        preview=plan.preview.to_dict(),
                    )
                self._approvals.redeem(plan, approval)
                report("approved", {"action_digest": plan.action_digest})
        except StockadeError as exc:
            return self._refused(plan.request, exc, digest=plan.action_digest)
        result = self._run(plan, cancel, report)
        report("done", {"ok": result.ok, "code": result.error.code if result.error else None})
        return result

    def record_approval(self, plan: InvocationPlan, event: str, *, channel: str) -> str:
        """Append an approval event to the audit log (for front ends such as the MCP server).

        Args:
            plan: the plan the event is about.
            event: ``requested``, ``granted``, ``denied`` or ``redeemed``.
            channel: how the person was asked (``elicitation``, ``input_required``,
                ``queue``, ``cli``).

        Raises:
            AuditUnavailable: the record could not be written (do not run the call).
            ValueError: an unknown event (caller misuse).

        Returns:
            the record's hash.
        """
        if event not in ("requested", "granted", "denied", "redeemed"):
            raise ValueError(f"unknown approval event {event!r}")
        principal = plan.request.principal
        return self._audit.append(
            f"approval.{event}",
            {
                "action_digest": plan.action_digest,
                "project": principal.project,
                "subject": principal.subject,
                "session": plan.request.session,
                "tool": plan.tool,
                "version": plan.version,
                "generation": plan.preview.generation,
                "channel": channel,
            },
        )

    def tools(self, format: ToolFormat = "openai") -> list[dict[str, Any]]:
        """Model-facing tool schemas from the registry (``openai``, ``anthropic`` or ``mcp``)."""
        return tool_schemas([t for t in self.registry if self._offered(t)], format)

    def _offered(self, tool: ToolDefinition) -> bool:
        """A pinned MCP tool is offered only while its live definition matches the pin."""
        source = self._mcp.get(tool.binding.package)
        return source is None or tool.name in source.offered

    def mcp_drift(self) -> list[dict[str, Any]]:
        """Every difference between a connected MCP server's tools and its pin (issue 15)."""
        return [d.to_dict() for source in self._mcp.values() for d in source.drift]

    def resolve_tool(self, format: ToolFormat, name: str) -> tuple[str, str]:
        """Map the name a model used (as offered by :meth:`tools`) to the exact (tool, version).

        Raises:
            ToolNotFound: no tool is offered under that name.
        """
        return resolve_model_name(self.registry, format, name)

    # -- steps 7–11 --------------------------------------------------------------------------

    def _run(
        self, plan: InvocationPlan, cancel: threading.Event | None = None, report: ProgressHook | None = None
    ) -> CallResult:
        holder: list[EgressPort] = []
        try:
            return self._run_in(plan, holder, cancel, report or _no_progress)
        finally:
            for port in holder:
                if isinstance(port, EgressSession):
                    port.close()

    def _run_in(
        self,
        plan: InvocationPlan,
        holder: list[EgressPort],
        cancel: threading.Event | None,
        report: ProgressHook,
    ) -> CallResult:
        tool = self.registry.get(plan.tool, plan.version)
        principal = plan.request.principal
        started = time.monotonic()
        staged: dict[str, SecretValue] = {}
        redactor = _NO_REDACTION
        egress: EgressPort = DenyAllEgress()
        try:
            limit = tool.rate_limit
            self._limiter.check_and_consume(
                principal.key,
                tool.name,
                per_minute=limit.per_minute if limit else None,
                per_hour=limit.per_hour if limit else None,
            )
            staged = self._stage_secrets(plan, tool)
            if staged:
                redactor = self._redactor(tool, staged)
            if _text(tool.effect) != "read":
                # Durable before the guest starts, whatever the audit durability mode.
                self._audit.append("call.intent", self._record(plan, tool, redactor), durable=True)
            egress = self._egress(tool, staged, redactor, started)
            holder.append(egress)
            limits = self._limits(tool)
            if cancel is not None and cancel.is_set():
                raise CallCancelled(f"the caller cancelled the call of {tool.name!r} before it started")
            report("sandbox_started", {"tool": tool.name})
            if tool.binding.package in self._mcp:
                result = self._mcp_invoke(tool, plan, limits)
            else:
                result = self._runtime.run(
                    self._packages[tool.binding.package].component,
                    tool=tool.name,
                    input_json=plan.canonical_input.decode("utf-8"),
                    limits=limits,
                    egress=egress if report is _no_progress else _ReportingEgress(egress, report),
                    secret_available=staged.__contains__,
                    scrub=redactor.text,
                    interrupt=cancel,
                )
            output = self._output(tool, result.output, redactor)
        except StockadeError as failure:
            usage = self._usage(started, egress, failure.details.get("usage"))
            exc = _egress_cause(failure, egress)
            return self._refused(
                plan.request,
                exc,
                digest=plan.action_digest,
                usage=usage,
                plan=plan,
                tool=tool,
                redactor=redactor,
                guest_log=failure.details.get("log"),
            )
        usage = self._usage(started, egress, {"fuel_consumed": result.usage.fuel_consumed})
        record = self._record(plan, tool, redactor) | {
            "ok": True,
            "usage": usage.to_dict(),
            "http": self._http_records(egress),
        }
        try:
            audit_id = self._audit.append("call.outcome", record)
        except StockadeError as exc:
            return self._result_from_error(exc, usage=usage, digest=plan.action_digest)
        log_text = redactor.text(_log_text(result.log))
        return CallResult(
            ok=True,
            output=output,
            audit_id=audit_id,
            usage=usage,
            log=log_text,
            action_digest=plan.action_digest,
        )

    def _mcp_invoke(self, tool: ToolDefinition, plan: InvocationPlan, limits: SandboxLimits) -> SandboxResult:
        source = self._mcp[tool.binding.package]
        return mcp_hosting.invoke(source, tool.name, plan.canonical_input, timeout_s=limits.timeout_ms / 1000)

    def _stage_secrets(self, plan: InvocationPlan, tool: ToolDefinition) -> dict[str, SecretValue]:
        if (source := self._mcp.get(tool.binding.package)) is not None:
            return source.staged_secrets()  # what the server process received, for scrubbing
        http = tool.package.http
        if http is None or not http.credentials:
            return {}
        principal = plan.request.principal
        names = sorted({c.secret for c in http.credentials})
        staged = self._secrets.stage(principal.project, principal.subject, names) if self._secrets else {}
        for mapping in http.credentials:
            if not mapping.optional and mapping.secret not in staged:
                raise CredentialUnavailable(
                    f"secret {mapping.secret!r} is required by package {tool.binding.package!r} "
                    f"but is not stored for {principal.subject!r} in {principal.project!r}",
                    hint=_store_secret_hint(mapping.secret, principal, has_store=self._secrets is not None),
                    secret=mapping.secret,
                    project=principal.project,
                    subject=principal.subject,
                )
        return staged

    def _redactor(self, tool: ToolDefinition, staged: Mapping[str, SecretValue]) -> Redactor:
        http = tool.package.http
        usernames = []
        if http is not None:
            usernames = [c.location.username for c in http.credentials if c.location.type == "basic"]
        return Redactor((v.reveal() for v in staged.values()), basic_usernames=usernames)

    def _egress(
        self, tool: ToolDefinition, staged: Mapping[str, SecretValue], redactor: Redactor, started: float
    ) -> EgressPort:
        package = self._packages.get(tool.binding.package)
        http = tool.package.http
        if http is None or package is None or package.egress_policy is None:
            return DenyAllEgress()
        return EgressSession(
            http,
            package.egress_policy,
            package=tool.binding.package,
            credentials=http.credentials,
            staged=staged,
            max_requests=tool.package.limits.max_http_requests,
            deadline=started + self._limits(tool).timeout_ms / 1000,
            resolver=self._resolver,
            transport_factory=self._transport_factory,
            ca_file=self.config.extra_ca_file,
            allow_loopback=self.config.unsafe_allow_loopback,
            redactor=redactor,
        )

    def _limits(self, tool: ToolDefinition) -> SandboxLimits:
        key = (tool.name, tool.version)
        cached = self._limits_by_tool.get(key)
        if cached is None:
            limits = tool.package.limits
            cached = SandboxLimits(
                fuel=limits.fuel,
                memory_bytes=limits.memory_bytes,
                timeout_ms=min(tool.timeout_s * 1000, limits.timeout_ms),
                max_log_bytes=limits.max_log_bytes,
            )
            self._limits_by_tool[key] = cached
        return cached

    def _output(self, tool: ToolDefinition, raw: str, redactor: Redactor) -> Any:
        budget = self.config.ceilings.max_output_bytes
        try:
            value = parse_json(raw, max_bytes=budget)
            canonicalize(tool.output_schema, value, max_bytes=budget)
        except StockadeError as exc:
            raise OutputInvalid(
                f"{tool.name} returned output outside its schema: {redactor.text(exc.message)}",
                pointer=exc.details.get("pointer"),
            ) from exc
        return value if redactor.empty else redactor.json_value(value)

    # -- records and results ----------------------------------------------------------------

    def _record(self, plan: InvocationPlan, tool: ToolDefinition, redactor: Redactor) -> dict[str, Any]:
        principal = plan.request.principal
        recorded: Any = plan.request.input
        if tool.sensitive_params:
            recorded = redact_params(recorded, tool.sensitive_params)
        if not redactor.empty:
            recorded = redactor.json_value(recorded)
        return {
            "action_digest": plan.action_digest,
            "project": principal.project,
            "subject": principal.subject,
            "session": plan.request.session,
            "tool": tool.name,
            "version": tool.version,
            "generation": tool.binding.generation,
            "effect": _text(tool.effect),
            "input": recorded,
            "fence": [plan.fence.policy_version, plan.fence.role_binding_version],
        }

    def _refused(
        self,
        request: CallRequest | Mapping[str, Any],
        exc: StockadeError,
        *,
        digest: str | None = None,
        usage: Usage | None = None,
        plan: InvocationPlan | None = None,
        tool: ToolDefinition | None = None,
        redactor: Redactor | None = None,
        guest_log: object = None,
    ) -> CallResult:
        scrub = redactor or _NO_REDACTION
        record: dict[str, Any] = {
            "ok": False,
            "error": {"code": exc.code, "message": scrub.text(exc.message)},
        }
        if plan is not None and tool is not None:
            record |= self._record(plan, tool, scrub)
        else:
            record |= _envelope_summary(request)
        if digest:
            record["action_digest"] = digest
        if usage is not None:
            record["usage"] = usage.to_dict()
        audit_id: str | None = None
        try:
            audit_id = self._audit.append("call.outcome", record)
        except StockadeError as audit_exc:
            _log.error("audit log unavailable while recording a refusal: %s", audit_exc)
        return self._result_from_error(
            exc, usage=usage, digest=digest, audit_id=audit_id, scrub=scrub, guest_log=guest_log
        )

    def _result_from_error(
        self,
        exc: StockadeError,
        *,
        usage: Usage | None,
        digest: str | None,
        audit_id: str | None = None,
        scrub: Redactor | None = None,
        guest_log: object = None,
    ) -> CallResult:
        scrub = scrub or _NO_REDACTION
        details = {k: v for k, v in exc.details.items() if k not in {"usage", "log"}}
        # The guest's log is kept on failures too (issue 12): it is what explains them.
        # It was capped at max_log_bytes while captured; scrubbed of staged secrets here.
        log_text = scrub.text(_log_text(guest_log)) if guest_log else ""
        if self.config.debug_guest_errors and guest_log:
            traceback = _guest_traceback(guest_log)
            if traceback:
                details["guest_traceback"] = traceback
        error = ErrorInfo(
            code=exc.code,
            message=scrub.text(exc.message),
            hint=exc.hint,
            details=scrub.json_value(details),  # type: ignore[arg-type]  # json_value keeps the mapping shape
        )
        return CallResult(
            ok=False,
            error=error,
            audit_id=audit_id,
            usage=usage or Usage(),
            action_digest=digest,
            log=log_text,
        )

    @staticmethod
    def _http_records(egress: EgressPort) -> list[dict[str, Any]]:
        if not isinstance(egress, EgressSession):
            return []
        return [
            {
                "method": r.method,
                "host": r.host,
                "path": r.path,
                "status": r.status,
                "bytes_sent": r.bytes_sent,
                "bytes_received": r.bytes_received,
                "outcome": r.outcome,
            }
            for r in egress.usage.requests
        ]

    @staticmethod
    def _usage(started: float, egress: EgressPort, sandbox: object) -> Usage:
        fuel = 0
        if isinstance(sandbox, Mapping):
            fuel = int(sandbox.get("fuel_consumed", 0))
        requests = bytes_sent = bytes_received = 0
        if isinstance(egress, EgressSession):
            usage = egress.usage
            requests = len(usage.requests)
            bytes_sent, bytes_received = usage.bytes_sent, usage.bytes_received
        return Usage(
            fuel=fuel,
            duration_ms=(time.monotonic() - started) * 1000,
            http_requests=requests,
            bytes_sent=bytes_sent,
            bytes_received=bytes_received,
        )

    # -- lifecycle -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed.is_set():
            raise RuntimeError("this Host is closed")

    def follow_generations(
        self, *, poll_s: float = DEFAULT_POLL_S, on_reload: Callable[[ReloadEvent], None] | None = None
    ) -> GenerationFollower:
        """Reload in place whenever the store accepts a newer lock generation (opt-in;
        :mod:`host.reload`): same lock path, every check of :meth:`open`, swapped between
        calls; a refused reload keeps this generation and is logged and audited. Stopped by
        :meth:`close`. Idempotent (the first call's arguments stay)."""
        self._check_open()
        if self._follower is None:
            assert self._reopen is not None, "Host.open sets it"
            follower = GenerationFollower(self, self._reopen, poll_s=poll_s, on_reload=on_reload)
            self._follower = follower.start()
        return self._follower

    def _adopt(self, fresh: Host) -> bool:
        """Swap this host's generation for ``fresh``'s between calls, then close ``fresh``
        (which then holds the old one). False, and nothing swapped, once this host is closed."""
        with self._gate.exclusive():
            adopted = not self._closed.is_set()
            for name in _GENERATION_FIELDS if adopted else ():
                mine, theirs = getattr(self, name), getattr(fresh, name)
                setattr(self, name, theirs)
                setattr(fresh, name, mine)
        fresh.close()
        return adopted

    def close(self) -> None:
        """Stop the epoch ticker and the generation watcher, release compiled components
        and close the state store (and its audit log) if this host opened it. Idempotent."""
        if self._follower is not None:
            self._follower.stop()
        if not self._closed.is_set():
            self._closed.set()
            for source in self._mcp.values():
                source.close()
            self._runtime.close()
            if self._owns_store:
                self.store.close()

    def __enter__(self) -> Host:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


_GENERATION_FIELDS: Final = ("registry", "generation", "_packages", "_runtime", "_mcp", "_limits_by_tool")
"""What one lock generation consists of in a Host (swapped as a whole by :meth:`Host._adopt`)."""


@functools.lru_cache(maxsize=64)
def _text(member: object) -> str:
    """The string value of an enum member (``Enum.value`` is a slow descriptor)."""
    return str(getattr(member, "value", member))


def _no_progress(stage: str, info: Mapping[str, Any]) -> None:
    """The progress hook of calls nobody watches."""


class _ReportingEgress:
    """An egress port that reports each request's outcome to a progress hook."""

    __slots__ = ("_inner", "_report")

    def __init__(self, inner: EgressPort, report: ProgressHook) -> None:
        self._inner = inner
        self._report = report

    def send(self, request: HttpRequest) -> HttpResponse | HttpFailure:
        answer = self._inner.send(request)
        outcome = answer.status if isinstance(answer, HttpResponse) else answer.kind
        self._report("http_request", {"method": request.method[:16], "outcome": outcome})
        return answer


_UNREACHABLE_REASONS: Final = frozenset({"dns_failure", "dns_timeout", "dns_busy"})
_ALLOWLIST_REASONS: Final = frozenset(
    {"empty_allowlist", "host_not_allowed", "port_not_allowed", "path_not_allowed", "method_not_allowed",
     "scheme_not_allowed", "insecure_scheme"}
)  # fmt: skip


def _egress_cause(exc: StockadeError, egress: EgressPort) -> StockadeError:
    """A tool failure that followed an egress refusal, reported as that refusal (issue 12).

    When the guest's call failed (``TOOL_FAILED``) after the host refused one of its
    requests, the refusal is the cause an author and an operator need, not "the plugin
    failed": the last refused request becomes ``EGRESS_DENIED`` (its host, path, method and
    rule), or, when the destination was unreachable (DNS failure, connection error),
    ``EGRESS_UNREACHABLE``. Other failures are returned unchanged.
    """
    if exc.code != "TOOL_FAILED" or not isinstance(egress, EgressSession):
        return exc
    records = egress.usage.requests
    for record in reversed(records):
        kind, _, reason = record.outcome.partition(":")
        if kind in ("denied", "invalid-request") and reason not in _UNREACHABLE_REASONS:
            where = f"{record.method} {record.host}{record.path}" if record.host else "a malformed URL"
            hint = (
                f"if the plugin should reach {record.host}, add it under [http] allow in stockade.toml "
                "(host, path_prefix, methods); the allowlist is part of the reviewed package"
                if reason in _ALLOWLIST_REASONS
                else "the host refuses this request whatever the allowlist says; fix the plugin's request"
            )
            return EgressDenied(
                f"the tool failed after the host refused its request to {where} ({reason}); "
                f"the tool said: {exc.message}",
                reason=reason, hint=hint, host=record.host, path=record.path, method=record.method,
            )  # fmt: skip
    for record in reversed(records):
        kind, _, reason = record.outcome.partition(":")
        if reason in _UNREACHABLE_REASONS or kind == "network":
            return EgressUnreachable(
                f"the tool failed after its request to {record.host} could not be delivered "
                f"({reason or kind}); the tool said: {exc.message}",
                reason=reason or kind, host=record.host, path=record.path, method=record.method,
            )  # fmt: skip
    return exc


def _local_store(config: HostConfig, audit: AuditLog | str | Path | None) -> LocalStore:
    """The default store: ``config.state_dir`` with ``audit`` (opened here if a path)."""
    if audit is None:
        raise TypeError("Host.open needs audit= (a path or an AuditLog) or store=")
    if isinstance(audit, AuditLog):
        return LocalStore(config.state_dir, audit=audit)
    return LocalStore(config.state_dir, audit=_open_audit(Path(audit), config), owns_audit=True)


def _log_text(log: object) -> str:
    if isinstance(log, str):
        return log
    if isinstance(log, tuple | list):
        return "\n".join(_line_text(line) for line in log)
    return str(log)


def _line_text(line: object) -> str:
    if isinstance(line, Mapping):  # a failure's details carry the lines as dicts
        return str(line.get("text", ""))
    return str(getattr(line, "text", line))


GUEST_TRACEBACK_MARKER = "[stockade:traceback]"
"""The first line of the log entry in which both guest SDKs write an unexpected
exception's traceback (Python) or stack (JavaScript)."""
GUEST_TRACEBACK_MAX_CHARS = 8192


def _guest_traceback(log: object) -> str | None:
    """The last traceback the guest logged, without its marker line (capped), or None."""
    if not isinstance(log, tuple | list):
        return None
    for line in reversed(log):
        text = _line_text(line)
        if text.startswith(GUEST_TRACEBACK_MARKER + "\n"):
            return text[len(GUEST_TRACEBACK_MARKER) + 1 :][:GUEST_TRACEBACK_MAX_CHARS]
    return None


def _envelope_summary(request: object) -> dict[str, Any]:
    """What can be recorded about an envelope that failed before the tool was known."""
    if isinstance(request, CallRequest):
        return {
            "project": request.principal.project,
            "subject": request.principal.subject,
            "session": request.session,
            "tool": request.tool,
            "version": request.version,
        }
    if isinstance(request, Mapping):
        summary = {k: v[:256] for k in ("session", "tool", "version") if isinstance(v := request.get(k), str)}
        principal = request.get("principal")
        if isinstance(principal, Mapping):  # who asked, even when the envelope was refused
            summary |= {k: v[:256] for k in ("project", "subject") if isinstance(v := principal.get(k), str)}
        return summary
    return {}


def _open_audit(path: Path, config: HostConfig) -> AuditLog:
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


def _store_secret_hint(secret: str, principal: Principal, *, has_store: bool) -> str:
    """The exact commands that make a missing secret available (issue 13, item 2).

    Every tool of a package is pre-flighted for all of the package's required secrets
    (DESIGN §6 step 8): the manifest does not say which tools make requests, and finding
    a secret missing halfway through a call, after other requests went out, is worse than
    refusing before the guest starts. A mapping that some tools do without is declared
    ``optional``.
    """
    store = (
        f"`stockade secrets set {shlex.quote(secret)} --project {shlex.quote(principal.project)} "
        f"--subject {shlex.quote(principal.subject)}` (it reads the value from standard input)"
    )
    if has_store:
        return f"Store it with {store}."
    return (
        "No secrets store is open (no master key): create one with `stockade secrets init-key`, "
        f"then {store}."
    )
