"""The Host: the one entry point for a tool call (docs/design.md §6, §11).

Nothing runs a guest except :meth:`Host.execute`, and nothing reaches it except through
:func:`host.call.prepare.prepare`. The pipeline, in order:

1–6. :func:`host.call.prepare.prepare` — envelope, registry, policy before input, tool
     policy, input canonicalization, action digest, approval requirement;
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

The steps' details live beside this module in :mod:`host.call` (its docstring maps each
step to its module): :mod:`host.call.open` (opening a lock), :mod:`host.call.stage`
(secrets, limits, egress of a call), :mod:`host.call.records` (records, usage, refusals).

Example::

    with Host.open("stockade.lock", config=HostConfig(state_dir=d), secrets=store,
                   policy=FilePolicyEngine(d / "policy.json"), audit=d / "audit.log") as host:
        result = host.call(CallRequest(principal=Principal(project="p", subject="alice"),
                                       session="s1", tool="tracker.list-issues",
                                       version="1.2.0", input={"repo": "x"}))
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from host import observe
from host._files import UnsafePermissions, check_trusted
from host.adapters.schemas import ToolFormat, resolve_model_name, tool_schemas
from host.approverkey import ApproverKey
from host.audit.log import AuditLog
from host.call.open import Package, load_generation, local_store, verify_lock
from host.call.prepare import prepare
from host.call.records import (
    NO_REDACTION,
    approval_record,
    call_record,
    egress_cause,
    http_records,
    log_text,
    refuse,
    result_from_error,
    text,
    usage_of,
)
from host.call.reload import CallGate, GenerationFollower, ReloadEvent, Reopener, between_swaps
from host.call.stage import (
    ReportingEgress,
    egress_session,
    limits_for,
    redactor_for,
    stage_host_tool_secrets,
    stage_oauth,
    stage_package_secrets,
)
from host.canonical import parse_json
from host.config import HostConfig
from host.egress.oauth import OAuthBroker, OAuthStage, TokenEndpoint
from host.egress.policy import Resolver, system_resolver
from host.egress.port import DenyAllEgress, EgressPort
from host.errors import (
    ApprovalRequired,
    CallCancelled,
    OutputInvalid,
    StockadeError,
    StoreUnavailable,
    ToolNotFound,
)
from host.formats.schema import canonicalize
from host.formats.schemaprofile import PROFILE_EXTERNAL, canonicalize_external
from host.formats.scope import SignedScope
from host.mcpsource import hosting as mcp_hosting
from host.policy.bindings import BoundGrants
from host.policy.engine import PolicyEngine
from host.policy.toolpolicy import ToolMode, ToolPolicyStore, ToolSelector
from host.runtime import ProgressEvent, Runtime, SandboxLimits, SandboxResult
from host.runtime.models import SandboxUsage
from host.scopes import Redeemed, ScopeUse, identity_of
from host.scopes import issue as issue_scope
from host.scopes import refusal as scope_refusal
from host.secrets.redact import Redactor
from host.secrets.store import SecretsStore, SecretValue
from host.store.port import StateStore
from host.store.watch import DEFAULT_POLL_S
from host.tools import host_tools_for
from host.tools.base import HostToolSet, stale
from host.tools.preopens import PluginReads, unblock_fifos_after
from host.trust.registry import FrozenRegistry, ToolDefinition
from host.types import Approval, CallRequest, CallResult, ErrorInfo, InvocationPlan, Usage

if TYPE_CHECKING:  # annotations only: the MCP client stack loads when a lock pins sources,
    # the transport (httpcore2) with the first egress session
    from host.egress.transport import TransportFactory
    from host.mcpsource.source import McpSource

__all__ = ["CallResult", "ErrorInfo", "Host", "ProgressHook", "Usage"]

ProgressHook = Callable[[str, Mapping[str, Any]], None]
"""Receives a call's stages from the worker thread: ``authorized``, ``approved``,
``sandbox_started``, ``http_request`` (once per outbound request, with method, host and
outcome) and ``done``. It must not raise and should return quickly."""


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
        packages: Mapping[str, Package],
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
        host_tools: HostToolSet | None = None,
        bindings: Mapping[tuple[str, str], str] | None = None,
    ) -> None:
        """:meta private:"""
        self.config = config
        self.registry = registry
        self.generation = generation
        self.store = store
        # (tool, version) → binding digest of this generation (host.policy.bindings): a
        # user allow and a session grant hold only while the binding they recorded does.
        self._bindings: dict[tuple[str, str], str] = dict(bindings or {})
        self.grants = BoundGrants(store.grants, self._bindings_of, audit=store.audit)
        self._packages = dict(packages)
        self._runtime = runtime
        self._secrets = secrets
        self._policy = policy
        self._tool_policy = tool_policy
        self._audit = observe.TracedAudit(store.audit)  # spans, and the trace id in each record
        self._resolver = resolver
        self._limiter = store.rate_limits
        self._approvals = store.approvals
        self._owns_store = owns_store
        self._transport_factory = transport_factory
        # One broker per host: its single-flight locks are shared by every call.
        self._oauth = None if secrets is None else OAuthBroker(
            secrets,
            endpoint=TokenEndpoint(resolver=resolver, transport_factory=transport_factory,
                                   ca_file=config.extra_ca_file, allow_loopback=config.unsafe_allow_loopback),
            audit=self._audit.append,
        )  # fmt: skip
        self._closed = threading.Event()
        # Records a refusal or failure, then returns it (host.call.records.refuse).
        self._refused = functools.partial(refuse, self._audit, debug_guest_errors=config.debug_guest_errors)
        self._limits_by_tool: dict[tuple[str, str], SandboxLimits] = {}
        self._mcp = dict(mcp_sources or {})
        self._host_tools = host_tools  # host.tools: the fs.* tools when a workspace is granted
        self._gate = CallGate()  # a generation swap (host.call.reload) happens between calls
        self._reopen: Reopener | None = None
        self._follower: GenerationFollower | None = None
        observe.watch(self._mcp_stats)  # MCP restarts and drift, read when metrics are collected

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
        _open_state_dir(config.state_dir)
        try:
            loaded, pinned = verify_lock(Path(lock), config)
        except BaseException:
            if store is not None and own_store:
                store.close()
            raise
        # Opened after the lock verified: a refused lock (e.g. BUNDLE_MISSING) leaves no
        # audit writer or state-dir lock open, so the same process can fetch and open again.
        owns_store = store is None or own_store
        state = store if store is not None else local_store(config, audit)
        host_tools: HostToolSet | None = None
        try:
            audit_path = [Path(audit)] if isinstance(audit, (str, Path)) else []
            host_tools = host_tools_for(config, protected=[Path(lock), *audit_path], resolver=resolver)
            generation = load_generation(
                loaded, pinned, config=config, state=state, secrets=secrets, progress=progress,
                unsafe_accept_rollback=unsafe_accept_rollback, resolver=resolver, host_tools=host_tools,
            )  # fmt: skip
        except BaseException:
            if host_tools is not None:
                host_tools.close()
            if owns_store:
                state.close()
            raise
        tool_store = tool_policy or ToolPolicyStore(
            config.state_dir / "tool-policy", admin_dir=config.admin_policy_dir
        )
        host = cls(
            config=config,
            registry=generation.registry,
            packages=generation.packages,
            runtime=generation.runtime,
            secrets=secrets,
            policy=policy,
            tool_policy=tool_store,
            store=state,
            resolver=resolver or system_resolver,
            generation=loaded.generation,
            transport_factory=transport_factory,
            owns_store=owns_store,
            mcp_sources=generation.sources,
            host_tools=host_tools,
            bindings=generation.bindings,
        )
        host._reopen = Reopener(Path(lock), {
            "config": config, "secrets": secrets, "policy": policy, "store": state, "tool_policy": tool_store,
            "resolver": resolver, "transport_factory": transport_factory,
        }, cls.open)
        return host

    # -- the pipeline --------------------------------------------------------------------

    def prepare(self, request: CallRequest | Mapping[str, Any]) -> InvocationPlan:
        """docs/design.md §6 steps 1–6 without running anything.

        Raises:
            RequestInvalid, ToolNotFound, PolicyDenied, PolicyUnavailable, InputInvalid.
        """
        self._check_open()
        try:
            with observe.span("stockade.prepare"):
                plan = prepare(
                    request,
                    registry=self.registry,
                    engine=self._policy,
                    tool_policy=self._tool_policy,
                    grants=self.grants,
                    max_input_bytes=self.config.ceilings.max_input_bytes,
                    bindings=self._bindings,
                )
        except ToolNotFound as exc:
            raise self._refused_at_pin(exc) from None
        if self._host_tools is not None:  # a host tool's effect is bound into its digest
            tool = self.registry.get(plan.tool, plan.version)
            if self._host_tools.owns(tool):
                plan = self._host_tools.bind(plan, tool)
        return plan

    def _bindings_of(self, tool: str) -> tuple[str, ...]:
        """The current binding digests of every version of ``tool`` (for session grants)."""
        return tuple(sorted({d for (name, _), d in self._bindings.items() if name == tool}))

    def binding_of(self, tool: str, version: str) -> str | None:
        """The binding digest of one tool of the running generation (``None``: no such tool)."""
        return self._bindings.get((tool, version))

    def bind_allow(self, project: str, subject: str, tool: str, version: str) -> str:
        """A reviewer allows (or re-binds) one tool for a principal, bound to its current
        binding digest; appends a ``policy.rebind`` audit record naming the binding the
        allow held before (``null``: none, or unbound) and the one it holds now.

        Call this only after a person reviewed what the tool can reach (its preview).

        Raises:
            ToolNotFound: no such tool in the running generation.
            ValueError: an invalid project or subject.
            PolicyUnavailable: the user tool policy cannot be read or written.
            AuditUnavailable: the record could not be written (the allow is then set:
                it is the person's decision; the failure is reported).

        Returns:
            The audit record's id.
        """
        self._check_open()
        definition = self.registry.get(tool, version)
        binding = self._bindings.get(definition.key)
        if binding is None:
            raise ToolNotFound(f"tool {tool!r} has no binding in this generation", tool=tool)
        selector = ToolSelector(definition.name)
        before = self._tool_policy.load(subject, project).recorded(selector, definition.name)
        self._tool_policy.set(subject, project, selector, ToolMode.ALLOW, bound={definition.name: binding})
        return self._audit.append("policy.rebind", {
            "project": project, "subject": subject, "tool": definition.name, "version": definition.version,
            "generation": self.generation, "selector": {"tool": definition.name},
            "recorded": before, "binding": binding,
        })

    def _refused_at_pin(self, exc: ToolNotFound) -> ToolNotFound:
        """``exc``, or the pin-time reasons if the name is a tool its MCP source refused."""
        name = exc.details.get("tool")
        for source in self._mcp.values():
            for refused in source.pinned.pin.refused:
                if name in (refused.tool, f"{source.name}.{refused.name}"):
                    return ToolNotFound(
                        f"MCP tool {name} was refused when source {source.name} was pinned: "
                        + "; ".join(refused.reasons),
                        hint="The host never offers a refused tool: the server's own schema must change "
                             "(a newer server release), then re-pin with `stockade lock add-mcp DECL.json`; "
                             "`stockade inspect` lists every refused tool.",
                        tool=name, refused_at_pin=True, reasons=list(refused.reasons),
                    )
        return exc

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
        scope: str | None = None,
        trace_context: Mapping[str, str] | None = None,
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
            scope: an unattended call: the id of the scope (:mod:`host.scopes`) a person
                granted its job. A call that would ask a person is run only if the scope
                covers it (counted once, fleet-wide), else refused at once with
                APPROVAL_REQUIRED and ``reason`` not_in_scope | scope_expired |
                scope_exhausted | scope_revoked. Nothing is queued.
            trace_context: the W3C trace context (``traceparent``, ``tracestate``) of the
                caller's span, continued by the call's ``stockade.call`` span when
                :mod:`host.observe` is enabled (ignored otherwise).
        """
        with observe.span("stockade.call", parent=trace_context) as span:
            try:
                plan = self.prepare(request)
            except StockadeError as exc:
                result = self._refused(request, exc)
            else:
                observe.describe_tool(span, self.registry.get(plan.tool, plan.version))
                result = self._admit_and_run(plan, plan.request.approval, cancel, progress, scope)
            observe.describe_result(span, result)
        return result

    async def acall(self, request: CallRequest | Mapping[str, Any]) -> CallResult:
        """The same pipeline as :meth:`call`, run in a worker thread."""
        import asyncio  # noqa: PLC0415 - only acall needs it (CLI start-up time)

        return await asyncio.to_thread(self.call, request)

    @between_swaps
    def execute(
        self,
        plan: InvocationPlan,
        approval: Approval | None = None,
        *,
        cancel: threading.Event | None = None,
        progress: ProgressHook | None = None,
        scope: str | None = None,
        trace_context: Mapping[str, str] | None = None,
    ) -> CallResult:
        """Run a prepared plan (docs/design.md §6 steps 7–11), re-authorizing first.

        Policy is decided again, so a revoke between prepare and execute denies; the
        fresh plan must have the same action digest; an approval-required plan needs an
        approval bound to that digest, principal and session (or a ``scope`` covering
        it). ``cancel``, ``progress``, ``scope`` and ``trace_context`` are as for
        :meth:`call`.
        """
        with observe.span("stockade.call", {"stockade.entry": "execute"}, parent=trace_context) as span:
            result = self._execute(plan, approval, cancel, progress, scope)
            observe.describe_result(span, result)
        return result

    def _execute(
        self, plan: InvocationPlan, approval: Approval | None, cancel: threading.Event | None,
        progress: ProgressHook | None, scope: str | None,
    ) -> CallResult:
        try:
            current = self.prepare(plan.request)
            if current.action_digest != plan.action_digest and plan.effect is not None:
                raise stale(plan.tool)  # a host tool's target changed since it was prepared
            if current.action_digest != plan.action_digest:
                raise ApprovalRequired("the action changed since it was prepared; prepare it again")
        except StockadeError as exc:
            return self._refused(plan.request, exc, digest=plan.action_digest)
        return self._admit_and_run(current, approval, cancel, progress, scope)

    def _admit_and_run(
        self,
        plan: InvocationPlan,
        approval: Approval | None,
        cancel: threading.Event | None = None,
        progress: ProgressHook | None = None,
        scope: str | None = None,
    ) -> CallResult:
        report = progress or _no_progress
        report("authorized", {"tool": plan.tool, "version": plan.version, "status": plan.status})
        try:
            if plan.status == "approval_required":
                if approval is not None:
                    with observe.span("stockade.approval"):
                        self._approvals.redeem(plan, approval)
                    plan = replace(plan, discharged_by=f"approval:{plan.action_digest}")
                    report("approved", {"action_digest": plan.action_digest})
                elif scope is not None:
                    left = self._redeem_scope(plan, scope)
                    plan = replace(plan, discharged_by=f"scope:{left.scope_id}")
                    report("approved", {"action_digest": plan.action_digest, "scope": left.scope_id,
                                        "remaining": left.remaining})
                else:
                    raise ApprovalRequired(
                        f"{plan.tool} needs a person's approval",
                        action_digest=plan.action_digest,
                        preview=plan.preview.to_dict(),
                    )
            elif plan.discharged_by == "session_grant":
                self._consume_grant(plan)
        except StockadeError as exc:
            return self._refused(plan.request, exc, digest=plan.action_digest)
        result = self._run(plan, cancel, report)
        report("done", {"ok": result.ok, "code": result.error.code if result.error else None})
        return result

    def _consume_grant(self, plan: InvocationPlan) -> None:
        """Count the use of the session grant that discharged ``plan``'s ask.

        Raises:
            ApprovalRequired: the grant ended or ran out since the plan was prepared.
        """
        binding = plan.tool_policy.get("binding")
        principal = plan.request.principal
        left = -1 if not isinstance(binding, str) else self.grants.consume_bound(
            principal.key, plan.request.session, plan.tool, binding
        )
        if left == -1:
            raise ApprovalRequired(
                f"{plan.tool} needs a person's approval: the session grant ended or has no calls left",
                action_digest=plan.action_digest, preview=plan.preview.to_dict(), reason="grant_exhausted",
            )

    def _redeem_scope(self, plan: InvocationPlan, scope_id: str) -> Redeemed:
        """Redeem ``scope_id`` for ``plan`` (the hard floor never: not_in_scope).

        Raises:
            ApprovalRequired: not covered (``reason``); ApproverKeyMissing; StoreUnavailable;
                AuditUnavailable.
        """
        if not isinstance(scope_id, str) or not scope_id:
            raise TypeError("scope must be a non-empty string")
        if plan.tool_policy.get("floor"):
            raise scope_refusal("not_in_scope", scope_id, plan.tool, floor=True)
        tool = self.registry.get(plan.tool, plan.version)
        principal = plan.request.principal
        binding = plan.tool_policy.get("binding")
        return self.store.scopes.redeem(ScopeUse(
            scope_id=scope_id, project=principal.project, subject=principal.subject,
            session=plan.request.session, tool=plan.tool, version=plan.version,
            identity=identity_of(tool, binding if isinstance(binding, str) else None),
            input_sha256=plan.input_sha256, action_digest=plan.action_digest,
        ))

    def issue_scope(
        self,
        *,
        key: ApproverKey | None,
        project: str,
        subject: str,
        tools: Sequence[tuple[str, str, int, Sequence[str] | None]],
        job: str,
        issued_by: str,
        for_s: float | None = None,
        not_after: float | None = None,
        session: str | None = None,
        max_calls_total: int | None = None,
    ) -> SignedScope:
        """Issue a scope for this generation's exact tools (:func:`host.scopes.issue`):
        what a person grants an unattended job from the host app. Never reachable from a
        tool call or an MCP request.

        Raises:
            ScopeInvalid, ApproverKeyMissing, StoreUnavailable, AuditUnavailable.
        """
        self._check_open()
        return issue_scope(
            registry=self.registry, bindings=self._bindings, generation=self.generation, key=key,
            store=self.store.scopes, project=project, subject=subject, tools=tools, job=job,
            issued_by=issued_by, for_s=for_s, not_after=not_after, session=session,
            max_calls_total=max_calls_total, ceiling_s=self.config.ceilings.max_scope_s,
        )

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
        observe.approval(event, channel)
        return self._audit.append(f"approval.{event}", approval_record(plan, channel))

    def tools(self, format: ToolFormat = "openai") -> list[dict[str, Any]]:
        """Model-facing tool schemas from the registry (``openai``, ``anthropic`` or ``mcp``)."""
        return tool_schemas([t for t in self.registry if self._offered(t)], format)

    def _offered(self, tool: ToolDefinition) -> bool:
        """A pinned MCP tool is offered only while its live definition matches the pin."""
        source = self._mcp.get(tool.binding.package)
        return source is None or tool.name in source.offered

    def _mcp_stats(self) -> list[tuple[str, int, int]]:
        """Each MCP source as (name, restarts, drifted tools); nothing once closed."""
        if self._closed.is_set():
            return []
        return [(s.name, max(s.connects - 1, 0), len(s.drift)) for s in self._mcp.values()]

    def mcp_drift(self) -> list[dict[str, Any]]:
        """Every difference between a connected MCP server's tools and its pin."""
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
        """Steps 7–11 of a plan whose policy and approval were decided."""
        call = _Admitted(plan, self.registry.get(plan.tool, plan.version), time.monotonic())
        try:
            self._consume_rate(call)  # step 7
            call.staged, call.redactor = self._stage_secrets(plan, call.tool, call)  # step 8
            if text(call.tool.effect) != "read":  # step 9
                # Durable before the guest starts, whatever the audit durability mode.
                self._audit.append("call.intent", call_record(plan, call.tool, call.redactor), durable=True)
        except StockadeError as failure:
            return self._failed(call, failure, DenyAllEgress())
        with self._egress(call) as egress:
            try:  # step 10
                result = self._run_stage(call, egress, cancel, report or _no_progress)
                _credentials_outcome(call, egress)
                output = self._output(call.tool, result.output, call.redactor)
            except StockadeError as failure:
                return self._failed(call, failure, egress)
            return self._succeeded(call, egress, result, output)  # step 11

    @observe.staged("stockade.rate_limit")
    def _consume_rate(self, call: _Admitted) -> None:
        limit = call.tool.rate_limit
        self._limiter.check_and_consume(
            call.plan.request.principal.key,
            call.tool.name,
            per_minute=limit.per_minute if limit else None,
            per_hour=limit.per_hour if limit else None,
        )

    def _run_stage(
        self, call: _Admitted, egress: EgressPort, cancel: threading.Event | None, report: ProgressHook
    ) -> SandboxResult:
        """:meth:`_sandboxed` as one span (the sandbox, the MCP source or the host tool)."""
        if not observe.enabled():
            return self._sandboxed(call, egress, cancel, report)
        tool = call.tool
        attributes = {"stockade.tool": tool.name}
        if self._host_tools is not None and self._host_tools.owns(tool):
            stage = "stockade.host_tool"
        elif (source := self._mcp.get(tool.binding.package)) is not None:
            stage, attributes["stockade.source"] = "stockade.mcp_source", source.name
        else:
            stage = "stockade.sandbox"
        with observe.span(stage, attributes) as span:
            result = self._sandboxed(call, observe.egress(egress, egress), cancel, report)
            span.set("stockade.fuel_used", result.usage.fuel_consumed)
        return result

    def _sandboxed(
        self, call: _Admitted, egress: EgressPort, cancel: threading.Event | None, report: ProgressHook
    ) -> SandboxResult:
        """Run the tool in a fresh sandbox (or its pinned MCP server)."""
        tool = call.tool
        limits = self._limits(tool)
        if cancel is not None and cancel.is_set():
            raise CallCancelled(f"the caller cancelled the call of {tool.name!r} before it started")
        report("sandbox_started", {"tool": tool.name})
        if self._host_tools is not None and self._host_tools.owns(tool):
            ran = self._host_tools.invoke(call.plan, tool, cancel=cancel, staged=call.staged)
            call.outcome = ran.record
            wall_ms = (time.monotonic() - call.started) * 1000
            return SandboxResult(json.dumps(ran.output), (), SandboxUsage(0, wall_ms, 0, False))
        if (source := self._mcp.get(tool.binding.package)) is not None:
            timeout_s = limits.timeout_ms / 1000
            return mcp_hosting.invoke(
                source, tool.name, call.plan.canonical_input, timeout_s=timeout_s, cancel=cancel
            )
        reads = self._plugin_reads(call)
        try:
            with unblock_fifos_after(reads, limits.timeout_ms / 1000):
                return self._runtime.run(
                    self._packages[tool.binding.package].component,
                    tool=tool.name,
                    input_json=call.plan.canonical_input.decode("utf-8"),
                    limits=limits,
                    egress=egress if report is _no_progress else ReportingEgress(egress, report),
                    secret_available=call.staged.__contains__,
                    scrub=call.redactor.text,
                    interrupt=cancel,
                    preopens=reads.preopens,
                )
        finally:
            reads.close()

    def _plugin_reads(self, call: _Admitted) -> PluginReads:
        """The read-only workspace preopens of a package tool's call (host.tools.preopens),
        recorded in the call's outcome."""
        workspace = call.tool.package.workspace
        if workspace is None:
            return PluginReads()
        principal = call.plan.request.principal
        if self._host_tools is None:
            reads = PluginReads(withheld=[(path, "no_workspace") for path in workspace.read])
        else:
            reads = self._host_tools.plugin_reads(principal, workspace.read)
        call.outcome = {"workspace": reads.record()}
        return reads

    def _failed(self, call: _Admitted, failure: StockadeError, egress: EgressPort) -> CallResult:
        """The outcome of a call that failed after its plan was admitted (recorded)."""
        _credentials_outcome(call, egress)
        return self._refused(
            call.plan.request,
            egress_cause(failure, egress),
            digest=call.plan.action_digest,
            usage=usage_of(call.started, egress, failure.details.get("usage")),
            plan=call.plan,
            tool=call.tool,
            redactor=call.redactor,
            guest_log=failure.details.get("log"),
            outcome=call.outcome,
        )

    def _succeeded(
        self, call: _Admitted, egress: EgressPort, result: SandboxResult, output: Any
    ) -> CallResult:
        """Record the outcome of a successful run, then return it (step 11)."""
        usage = usage_of(call.started, egress, {"fuel_consumed": result.usage.fuel_consumed})
        record = call_record(call.plan, call.tool, call.redactor) | {
            "ok": True,
            "usage": usage.to_dict(),
            "http": http_records(egress),
        }
        if call.outcome:
            record["outcome"] = dict(call.outcome)
        digest = call.plan.action_digest
        try:
            audit_id = self._audit.append("call.outcome", record)
        except StockadeError as exc:
            debug = self.config.debug_guest_errors
            return result_from_error(exc, usage=usage, digest=digest, debug_guest_errors=debug)
        log = call.redactor.text(log_text(result.log))
        return CallResult(
            ok=True, output=output, audit_id=audit_id, usage=usage, log=log, action_digest=digest
        )

    @observe.staged("stockade.secrets")
    def _stage_secrets(
        self, plan: InvocationPlan, tool: ToolDefinition, call: _Admitted
    ) -> tuple[Mapping[str, SecretValue], Redactor]:
        """The secrets a call stages and the redactor of everything it returns and records."""
        if (source := self._mcp.get(tool.binding.package)) is not None:
            # Read from the store for this call (what a restart inside it sends), plus every
            # value the source's connections were handed; no guest sees any of them.
            return {}, source.stage()
        if self._host_tools is not None and self._host_tools.owns(tool):
            staged = stage_host_tool_secrets(self._secrets, plan, self._host_tools.secret_names(plan, tool))
            return staged, (Redactor(v.reveal() for v in staged.values()) if staged else NO_REDACTION)
        staged = stage_package_secrets(self._secrets, plan, tool)
        call.oauth = stage_oauth(self._oauth, plan, tool, staged)
        if call.oauth is not None:
            return call.oauth.staged, call.oauth.redactor()
        return staged, (redactor_for(tool, staged) if staged else NO_REDACTION)

    @contextmanager
    def _egress(self, call: _Admitted) -> Iterator[EgressPort]:
        """The call's egress port, closed (pooled connections and all) once the call is
        recorded: an :class:`EgressSession` for a package with an allowlist, else deny-all."""
        package = self._packages.get(call.tool.binding.package)
        if call.tool.package.http is None or package is None or package.egress_policy is None:
            yield DenyAllEgress()
            return
        deadline = call.started + self._limits(call.tool).timeout_ms / 1000
        with egress_session(
            call.tool, package.egress_policy, call.staged, call.redactor, deadline=deadline,
            resolver=self._resolver, transport_factory=self._transport_factory, config=self.config,
            oauth=call.oauth,
        ) as session:  # fmt: skip
            yield session

    def _limits(self, tool: ToolDefinition) -> SandboxLimits:
        key = (tool.name, tool.version)
        cached = self._limits_by_tool.get(key)
        if cached is None:
            cached = self._limits_by_tool[key] = limits_for(tool)
        return cached

    @observe.staged("stockade.output")
    def _output(self, tool: ToolDefinition, raw: str, redactor: Redactor) -> Any:
        budget = self.config.ceilings.max_output_bytes
        try:
            value = parse_json(raw, max_bytes=budget)
            validate = canonicalize_external if tool.schema_profile == PROFILE_EXTERNAL else canonicalize
            validate(tool.output_schema, value, max_bytes=budget)
        except StockadeError as exc:
            raise OutputInvalid(
                f"{tool.name} returned output outside its schema: {redactor.text(exc.message)}",
                pointer=exc.details.get("pointer"),
            ) from exc
        return value if redactor.empty else redactor.json_value(value)

    # -- lifecycle -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed.is_set():
            raise RuntimeError("this Host is closed")

    def follow_generations(
        self, *, poll_s: float = DEFAULT_POLL_S, on_reload: Callable[[ReloadEvent], None] | None = None
    ) -> GenerationFollower:
        """Reload in place whenever the store accepts a newer lock generation (opt-in;
        :mod:`host.call.reload`): same lock path, every check of :meth:`open`, swapped between
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
            if self._host_tools is not None:
                self._host_tools.close()
            if self._owns_store:
                self.store.close()

    def __enter__(self) -> Host:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


_GENERATION_FIELDS: Final = (
    "registry", "generation", "_packages", "_runtime", "_mcp", "_limits_by_tool", "_host_tools",
    "_bindings",
)
"""What one lock generation consists of in a Host (swapped as a whole by :meth:`Host._adopt`)."""


@dataclass(slots=True)
class _Admitted:
    """A call past policy and approval (steps 7–11): what its records and result need."""

    plan: InvocationPlan
    tool: ToolDefinition
    started: float  # time.monotonic() when step 7 began
    staged: Mapping[str, SecretValue] = field(default_factory=dict)
    redactor: Redactor = NO_REDACTION
    outcome: Mapping[str, Any] | None = None  # a host tool's (or preopens') audit outcome fields
    oauth: OAuthStage | None = None  # the call's OAuth credentials (host.egress.oauth)


def _credentials_outcome(call: _Admitted, egress: EgressPort) -> None:
    """Record which mappings' secrets were injected and which OAuth tokens were refreshed;
    a refresh during the call (a 401) also widens the call's redactor to the new token."""
    injected: set[str] = getattr(egress, "injected", set())
    if not injected and call.oauth is None:
        return
    record: dict[str, Any] = {"injected": sorted(injected)}
    if call.oauth is not None:
        record["refreshed"] = sorted(set(call.oauth.refreshed))
        if call.oauth.renewed:
            call.redactor = call.oauth.redactor()
    call.outcome = {**(call.outcome or {}), "credentials": record}


def _open_state_dir(state_dir: Path) -> None:
    """Create the state directory (0700) or refuse one another user could change.

    Raises:
        StoreUnavailable: group- or world-writable, or another user's (its policy, accepted
            generations and audit log would be theirs to rewrite).
    """
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        check_trusted(state_dir, what="state directory")
    except UnsafePermissions as exc:
        raise StoreUnavailable(exc.message, hint=exc.hint, path=str(state_dir)) from None


def _no_progress(stage: str, info: Mapping[str, Any]) -> None:
    """The progress hook of calls nobody watches."""
