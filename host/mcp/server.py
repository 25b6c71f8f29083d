"""Stockade as an MCP server: a thin adapter over :class:`~host.Host` (docs/design.md §12).

Built on the official SDK's low-level ``mcp.server.Server``: the manifest owns the
schemas, and policy is decided before input is looked at, exactly as ``Host.call``. This
module adds transport-independent MCP behaviour and nothing that decides policy:

- **principal**: a fixed one (stdio) or the one a bearer token maps to (HTTP);
- **tools/list**: registry order sorted by name; a tool the principal's policy *denies*
  is hidden, one that needs approval is listed; schemas are the manifest's objects,
  untouched; names from :mod:`host.adapters.schemas` (MCP-valid, unique); annotations
  from the manifest;
- **tools/call**: an unknown name is JSON-RPC -32602; every other refusal is a result
  with ``isError`` whose text is ``CODE: message`` plus the hint, and whose ``_meta``
  holds ``{"code", "action_digest", "audit_id"}`` under :data:`META_KEY`; success is
  ``structuredContent`` (object outputs) plus the same JSON as text;
- **approvals**: 2025-11-25 clients with elicitation get a form elicitation;
  2026-07-28 clients with elicitation get an ``input_required`` result whose
  ``requestState`` is host-MAC'd and single use (:mod:`host.mcp.state`); clients without
  elicitation get APPROVAL_REQUIRED and the action is queued in the state dir
  (:mod:`host.approvals`) for ``stockade approvals approve``; every step is audited;
  with a scope (``ServeOptions.scope``, ``stockade serve --scope``) nobody is asked:
  a call the scope covers runs, any other that would ask is refused at once;
- **cancellation**: a cancelled request sets the call's cancel event, the guest's store
  is interrupted within one epoch tick, and the handler waits for the worker thread to
  finish before the cancellation propagates (no wasm left running in a thread);
- **progress**: with a progress token, each stage of the call is reported;
- **concurrency**: at most ``max_concurrency`` calls at once; one more is BUSY;
- **reload**: :meth:`StockadeMCP.reload` opens the new lock generation with every check
  of ``Host.open``; on success tools/list_changed is sent to handshake-era clients and
  to 2026-07-28 ``subscriptions/listen`` streams; on failure the old generation stays
  and the reason is logged.

Example::

    app = StockadeMCP(opener, options=ServeOptions(principal=Principal(project="p", subject="a"),
                                                   state_dir=state))
    async with mcp.Client(app.server) as client:
        await client.list_tools()
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import json
import logging
import os
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from host import observe
from host.adapters.schemas import mcp_annotations
from host.approvals import MAX_PENDING_PER_PRINCIPAL, ApprovalQueue
from host.audit.log import redact_params
from host.call.host import Host, ProgressHook
from host.canonical import canonical_json
from host.errors import (
    ApprovalDenied,
    ApprovalInvalid,
    ApprovalRequired,
    Busy,
    CallCancelled,
    StockadeError,
    ToolNotFound,
)
from host.mcp.state import RequestStates
from host.store.pending import PendingApprovalPort
from host.text import escape_unsafe
from host.trust.registry import ToolDefinition
from host.types import Approval, CallRequest, CallResult, ErrorInfo, InvocationPlan, Principal

__all__ = ["APPROVAL_KEY", "META_KEY", "ServeOptions", "StockadeMCP"]

_log = logging.getLogger("stockade.mcp")

META_KEY: Final = "dev.stockade/call"
"""The ``_meta`` key of every tools/call result: ``{"code", "action_digest", "audit_id"}``."""
TOOL_META_KEY: Final = "dev.stockade/tool"
APPROVAL_KEY: Final = "approval"
"""The key of the approval elicitation in an ``input_required`` result."""
APPROVAL_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "approve": {
            "type": "boolean",
            "title": "Approve this exact call",
            "description": "true runs the call once; anything else refuses it",
        }
    },
    "required": ["approve"],
}
MAX_SUMMARY_CHARS: Final = 512  # characters of input shown in an approval preview
PROGRESS_BUFFER: Final = 32  # progress messages buffered per call (more are dropped)
PROGRESS_DRAIN_S: Final = 2.0  # s a finished call waits for its progress to reach the client
DISCONNECT_POLL_S: Final = 0.1  # s between checks that an HTTP client is still connected
_INVALID_PARAMS: Final = -32602


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """How one MCP server behaves.

    Args:
        state_dir: the host's state directory (pending approvals live here).
        principal: the fixed principal (stdio); ``None`` when each request carries one
            (HTTP with bearer tokens).
        session: the session id passed to ``Host`` for every call.
        max_concurrency: calls running at once; one more is refused with BUSY.
        max_calls_per_principal: calls one principal may have running at once (a call
            waiting for a person's answer counts); ``None``: half of ``max_concurrency``
            (at least 1), so one principal never holds every slot.
        max_pending_per_principal: queued approvals one principal may have pending;
            one more is APPROVAL_QUEUE_FULL (the queue holds ``MAX_PENDING`` in all).
        max_streams_per_principal: ``subscriptions/listen`` streams one principal may
            hold open; one more is a JSON-RPC error naming the bound.
        max_streams: ``subscriptions/listen`` streams open at once, all principals.
        approval_ttl_s: lifetime of an ``input_required`` state and of a queued approval.
        scope: an unattended job's scope id (:mod:`host.scopes`): a call that would ask a
            person runs only if the scope covers it, else it is refused at once
            (APPROVAL_REQUIRED with ``reason``); no client is ever elicited and nothing
            is queued. The scope must exist when the server starts (SCOPE_INVALID).
    """

    state_dir: Path
    principal: Principal | None = None
    session: str = "mcp"
    max_concurrency: int = max(2, (os.cpu_count() or 1) * 2)
    max_calls_per_principal: int | None = None
    max_pending_per_principal: int = MAX_PENDING_PER_PRINCIPAL
    max_streams_per_principal: int = 4
    max_streams: int = 256
    approval_ttl_s: float = 300.0
    scope: str | None = None

    def __post_init__(self) -> None:
        if self.max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        if self.max_calls_per_principal is not None and self.max_calls_per_principal < 1:
            raise ValueError("max_calls_per_principal must be at least 1")
        if min(self.max_pending_per_principal, self.max_streams_per_principal, self.max_streams) < 1:
            raise ValueError("the pending and stream bounds must be at least 1")

    @property
    def calls_per_principal(self) -> int:
        """The effective per-principal bound on running calls."""
        if self.max_calls_per_principal is not None:
            return min(self.max_calls_per_principal, self.max_concurrency)
        return max(1, self.max_concurrency // 2)


class _Slot:
    """The current Host generation and the calls using it (a reload swaps it)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.users = 0


class StockadeMCP:
    """The MCP server of one Stockade host (see the module docstring).

    Args:
        opener: opens a Host for the current lock (called once now and on every reload).
        options: principal, state dir, concurrency.
    """

    def __init__(self, opener: Callable[[], Host], *, options: ServeOptions) -> None:
        self.options = options
        self._opener = opener
        self._slot = _Slot(opener())
        self._guard = threading.Lock()
        self._active = 0
        self._active_by: dict[tuple[str, str], int] = {}  # running calls per principal
        self._idle = threading.Condition()
        self._limiter = anyio.CapacityLimiter(options.max_concurrency)
        self._states = RequestStates(ttl_s=options.approval_ttl_s)
        self._queue: PendingApprovalPort = ApprovalQueue(
            options.state_dir, ttl_s=max(options.approval_ttl_s, 900.0)
        )
        if self._slot.host.store.kind == "postgres":  # a shared store: the fleet's one queue
            self._queue = self._slot.host.store.pending
        if options.scope is not None:  # fail loudly at start, not at the first call
            try:
                self._slot.host.store.scopes.get(options.scope)
            except BaseException:
                self._slot.host.close()
                raise
        self._listeners: weakref.WeakSet[Any] = weakref.WeakSet()  # handshake-era connections
        self._bus = InMemorySubscriptionBus()  # 2026-07-28 subscriptions/listen streams
        self._listener = ListenHandler(self._bus, max_subscriptions=options.max_streams)
        self._streams_by: dict[tuple[str, str], int] = {}  # open listen streams per principal
        self.server: Server[Any] = Server(
            "stockade",
            version=_version(),
            instructions="Sandboxed tools; every call is policy-checked, approved where needed and audited.",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_subscriptions_listen=self._listen,
        )

    @property
    def host(self) -> Host:
        """The Host of the current lock generation."""
        return self._slot.host

    # -- reload --------------------------------------------------------------------------

    async def reload(self) -> bool:
        """Open the lock again; swap generations only if every check passes.

        Returns:
            True when a new generation was accepted (tools/list_changed was sent).
        """
        try:
            fresh = await anyio.to_thread.run_sync(self._opener)
        except StockadeError as exc:
            _log.error("lock reload refused, keeping generation %d: %s", self.host.generation, exc)
            return False
        with self._guard:
            old, self._slot = self._slot, _Slot(fresh)
            idle = old.users == 0
        if idle:
            old.host.close()
        _log.warning("lock generation %d accepted (was %d)", fresh.generation, old.host.generation)
        await self._notify_list_changed()
        return True

    async def _notify_list_changed(self) -> None:
        await self._bus.publish(ToolsListChanged())
        for connection in list(self._listeners):
            try:
                await connection.send_tool_list_changed()
            except Exception as exc:  # a closed connection must not stop the others
                _log.info("could not send tools/list_changed: %s", type(exc).__name__)

    def _remember(self, ctx: ServerRequestContext[Any, Any]) -> None:
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return  # 2026-07-28 delivers list changes only on subscriptions/listen streams
        # The SDK hands handlers a per-request session; its connection outlives the request.
        connection = getattr(ctx.session, "_connection", None)
        if connection is not None and hasattr(connection, "send_tool_list_changed"):
            self._listeners.add(connection)

    def _acquire(self) -> _Slot:
        with self._guard:
            slot = self._slot
            slot.users += 1
            return slot

    def _release(self, slot: _Slot) -> None:
        with self._guard:
            slot.users -= 1
            retired = slot is not self._slot and slot.users == 0
        if retired:
            slot.host.close()

    async def wait_idle(self) -> None:
        """Return once no tools/call is in flight (cancelled calls included)."""

        def wait() -> None:
            with self._idle:
                self._idle.wait_for(lambda: self._active == 0)

        await anyio.to_thread.run_sync(wait)

    def close(self) -> None:
        """Close the current Host (calls in flight finish first in the caller's hands)."""
        self._slot.host.close()

    # -- principal -----------------------------------------------------------------------

    def _principal(self) -> Principal:
        if self.options.principal is not None:
            return self.options.principal
        token = get_access_token()
        claims = (token.claims or {}) if token is not None else {}
        if token is None or token.subject is None or not isinstance(claims.get("project"), str):
            raise MCPError(code=_INVALID_PARAMS, message="no authenticated principal")
        try:
            return Principal(project=claims["project"], subject=token.subject, expires_at=token.expires_at)
        except ValidationError:  # a control character, an over-long name: the envelope's rule
            raise MCPError(code=_INVALID_PARAMS, message="the authenticated principal is not valid") from None

    # -- subscriptions/listen -------------------------------------------------------------

    async def _listen(self, ctx: ServerRequestContext[Any, Any], params: Any) -> Any:
        """The SDK's listen stream, bounded per principal (a stream lives until the client
        hangs up, so one principal could otherwise hold every one of ``max_streams``)."""
        key = self._principal().key
        bound = self.options.max_streams_per_principal
        if self._streams_by.get(key, 0) >= bound:
            raise MCPError(
                code=_INVALID_PARAMS,
                message=f"BUSY: this principal already holds {bound} listen streams (the bound is {bound} "
                "per principal); close one first",
            )
        self._streams_by[key] = self._streams_by.get(key, 0) + 1
        try:
            return await self._listener(ctx, params)
        finally:
            left = self._streams_by.pop(key, 1) - 1
            if left > 0:
                self._streams_by[key] = left

    # -- tools/list ----------------------------------------------------------------------

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        self._remember(ctx)
        principal = self._principal()
        slot = self._acquire()
        try:
            host = slot.host
            tools = [self._tool(host, entry) for entry in host.tools("mcp")]  # withheld MCP tools stay out
            visible = [t for t, d in tools if not self._hidden(host, principal, d)]
        finally:
            self._release(slot)
        return types.ListToolsResult(tools=sorted(visible, key=lambda t: t.name))

    def visible_tools(self, principal: Principal) -> list[str]:
        """The names ``tools/list`` shows ``principal`` now (``stockade serve`` refuses none)."""
        host = self.host
        tools = [self._tool(host, entry) for entry in host.tools("mcp")]
        return sorted(t.name for t, d in tools if not self._hidden(host, principal, d))

    def _tool(self, host: Host, entry: Mapping[str, Any]) -> tuple[types.Tool, ToolDefinition]:
        name, version = host.resolve_tool("mcp", entry["name"])
        definition = host.registry.get(name, version)
        annotations = mcp_annotations(definition)
        tool = types.Tool(
            name=entry["name"],
            title=entry["title"],
            description=entry["description"],
            input_schema=entry["inputSchema"],
            output_schema=entry.get("outputSchema"),
            annotations=types.ToolAnnotations(
                title=annotations["title"],
                read_only_hint=annotations["readOnlyHint"],
                destructive_hint=annotations["destructiveHint"],
                idempotent_hint=annotations["idempotentHint"],
                open_world_hint=annotations["openWorldHint"],
            ),
            _meta={
                TOOL_META_KEY: {
                    "tool": name,
                    "version": version,
                    "effect": str(definition.effect.value),
                    "risk": str(definition.risk.value),
                    "generation": definition.binding.generation,
                }
            },
        )
        return tool, definition

    def _hidden(self, host: Host, principal: Principal, tool: ToolDefinition) -> bool:
        """A tool is hidden when policy denies it to this principal (decided before input)."""
        probe = CallRequest(
            principal=principal, session=self.options.session, tool=tool.name, version=tool.version, input={}
        )
        try:
            host.prepare(probe)
        except StockadeError as exc:
            return exc.code in ("POLICY_DENIED", "POLICY_UNAVAILABLE", "REQUEST_INVALID")
        return False

    # -- tools/call ----------------------------------------------------------------------

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        # One SERVER span per tools/call, continuing the client's trace (_meta, then headers).
        parent = observe.carrier(ctx.meta, getattr(ctx.request, "headers", None))
        with observe.span("stockade.mcp.tools_call", parent=parent, server=True):
            return await self._traced_call_tool(ctx, params)

    async def _traced_call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        principal = self._principal()
        slot = self._acquire()
        try:
            host = slot.host
            try:
                tool, version = host.resolve_tool("mcp", params.name)
            except ToolNotFound:
                raise _unknown_tool(params.name) from None
            busy = self._enter(principal.key)
            if busy is not None:
                return _error_result(busy)
            try:
                request = {
                    "principal": principal,
                    "session": self.options.session,
                    "tool": tool,
                    "version": version,
                    "input": params.arguments if params.arguments is not None else {},
                }
                async with _progress(ctx) as hook, _until_disconnected(ctx) as outcome:
                    outcome.append(await self._answered(ctx, host, request, params, hook))
                if not outcome:  # the HTTP client went away: the call was cancelled
                    return _error_result(CallCancelled("the client disconnected; the call was cancelled"))
                result = outcome[0]
                if _denied(result) and self._hidden(host, principal, host.registry.get(tool, version)):
                    # A hidden tool answers exactly like an unknown one: the audit record
                    # host.call wrote keeps the truth (POLICY_DENIED).
                    raise _unknown_tool(params.name)
                return result
            finally:
                self._leave(principal.key)
        finally:
            self._release(slot)

    def _enter(self, key: tuple[str, str]) -> Busy | None:
        """Take a call slot for ``key``, or the BUSY refusal naming the bound it hit."""
        bound = self.options.calls_per_principal
        with self._idle:
            if self._active >= self.options.max_concurrency:
                return Busy(
                    f"{self._active} calls are running (the bound is {self.options.max_concurrency} "
                    "in all); this one is not queued"
                )
            if self._active_by.get(key, 0) >= bound:
                return Busy(
                    f"this principal already runs {bound} calls (the bound is {bound} per principal); "
                    "this one is not queued",
                    hint="Finish or cancel a running call (one waiting for an approval counts), then retry.",
                )
            self._active += 1
            self._active_by[key] = self._active_by.get(key, 0) + 1
        return None

    def _leave(self, key: tuple[str, str]) -> None:
        with self._idle:
            self._active -= 1
            left = self._active_by.pop(key, 1) - 1
            if left > 0:
                self._active_by[key] = left
            self._idle.notify_all()

    async def _answered(
        self,
        ctx: ServerRequestContext[Any, Any],
        host: Host,
        request: dict[str, Any],
        params: types.CallToolRequestParams,
        hook: ProgressHook | None,
    ) -> types.CallToolResult | types.InputRequiredResult:
        """:meth:`_call`, with every refusal on the way turned into an ``isError`` result.

        A ``StockadeError`` raised anywhere on the call path (the queue, the audit log, the
        store) becomes the result of its code, never a JSON-RPC internal error.
        """
        try:
            return await self._call(ctx, host, request, params, hook)
        except StockadeError as exc:
            _log.warning("tools/call refused: %s", exc.code)
            return _error_result(exc)

    async def _call(
        self,
        ctx: ServerRequestContext[Any, Any],
        host: Host,
        request: dict[str, Any],
        params: types.CallToolRequestParams,
        hook: ProgressHook | None,
    ) -> types.CallToolResult | types.InputRequiredResult:
        if self.options.scope is not None:  # an unattended job: the scope decides, nobody is asked
            return _call_result(await self._in_thread(
                functools.partial(host.call, request, scope=self.options.scope), hook))
        if params.request_state is None:
            result = await self._in_thread(functools.partial(host.call, request), hook)
            if result.error is None or result.error.code != "APPROVAL_REQUIRED":
                return _call_result(result)
        try:
            plan = await anyio.to_thread.run_sync(host.prepare, request)
        except StockadeError:
            return _call_result(await self._in_thread(functools.partial(host.call, request), hook))
        if plan.status != "approval_required":  # policy changed in between: run as decided now
            return _call_result(await self._in_thread(functools.partial(host.execute, plan), hook))
        return await self._approve_and_run(ctx, host, plan, params, hook)

    async def _approve_and_run(
        self,
        ctx: ServerRequestContext[Any, Any],
        host: Host,
        plan: InvocationPlan,
        params: types.CallToolRequestParams,
        hook: ProgressHook | None,
    ) -> types.CallToolResult | types.InputRequiredResult:
        if not _can_elicit(ctx):
            return await self._queued(host, plan, hook)
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            if params.request_state is None:
                host.record_approval(plan, "requested", channel="input_required")
                return self._input_required(host, plan)
            try:
                self._states.redeem(
                    params.request_state, plan.action_digest, _key(plan), generation=host.generation
                )
            except ApprovalInvalid as exc:
                return _error_result(exc, digest=plan.action_digest)
            answer: object = (params.input_responses or {}).get(APPROVAL_KEY)
            channel = "input_required"
        else:
            host.record_approval(plan, "requested", channel="elicitation")
            try:
                with observe.span("stockade.approval.wait", {"stockade.approval.channel": "elicitation"}):
                    answer = await ctx.session.elicit_form(
                        _preview_message(host, plan), APPROVAL_SCHEMA, related_request_id=ctx.request_id
                    )
            except MCPError as exc:  # the client could not ask: nobody approved
                _log.info("elicitation failed: %s", exc)
                answer = None
            channel = "elicitation"
        if not _accepted(answer):
            recorded = host.record_approval(plan, "denied", channel=channel)
            declined = ApprovalDenied(f"a person declined {plan.tool}")
            return _error_result(declined, digest=plan.action_digest, audit_id=recorded)
        return await self._run_approved(host, plan, channel, hook)

    async def _run_approved(
        self,
        host: Host,
        plan: InvocationPlan,
        channel: str,
        hook: ProgressHook | None,
        *,
        approval: Approval | None = None,
    ) -> types.CallToolResult:
        host.record_approval(plan, "granted", channel=channel)
        if approval is None:
            approval = host.approve(plan)
        return _call_result(await self._in_thread(functools.partial(host.execute, plan, approval), hook))

    def _input_required(self, host: Host, plan: InvocationPlan) -> types.InputRequiredResult:
        state = self._states.mint(plan.action_digest, _key(plan), generation=host.generation)
        elicit = types.ElicitRequest(
            params=types.ElicitRequestFormParams(
                message=_preview_message(host, plan), requested_schema=APPROVAL_SCHEMA
            )
        )
        return types.InputRequiredResult(input_requests={APPROVAL_KEY: elicit}, request_state=state)

    async def _queued(
        self, host: Host, plan: InvocationPlan, hook: ProgressHook | None
    ) -> types.CallToolResult:
        principal = plan.request.principal
        status, entry = self._queue.redeem(
            plan.action_digest, project=principal.project, subject=principal.subject
        )
        if status == "approved":
            # A shared store's decision carries the approver-signed approval; it is what
            # the call redeems (this host never signs one for a row it merely read).
            signed = entry.approval if entry is not None else None
            return await self._run_approved(host, plan, "queue", hook, approval=signed)
        if status == "denied":
            denial = host.record_approval(plan, "denied", channel="queue")
            denied = ApprovalDenied(f"a person denied {plan.tool}")
            return _error_result(denied, digest=plan.action_digest, audit_id=denial)
        recorded: str | None = None  # already queued: its approval.requested record is the earlier one
        if status == "absent":
            try:
                self._queue.request(
                    plan,
                    summary=_input_summary(host, plan),
                    max_per_principal=self.options.max_pending_per_principal,
                    full_input=_full_input(host, plan),
                )
            except StockadeError as exc:
                return _error_result(exc, digest=plan.action_digest)
            recorded = host.record_approval(plan, "requested", channel="queue")
        return _error_result(
            ApprovalRequired(
                f"{plan.tool} needs a person's approval; it is queued as {plan.action_digest}",
                hint=f"A person runs `stockade approvals approve {plan.action_digest}`; then call again.",
                action_digest=plan.action_digest,
            ),
            digest=plan.action_digest,
            audit_id=recorded,
        )

    async def _in_thread(self, work: Callable[..., CallResult], hook: ProgressHook | None) -> CallResult:
        """Run one host call in a worker thread; a cancellation interrupts the guest first."""
        cancel, finished = threading.Event(), threading.Event()

        def run() -> CallResult:
            try:
                return work(cancel=cancel, progress=hook)
            finally:
                finished.set()

        try:
            return await anyio.to_thread.run_sync(run, abandon_on_cancel=True, limiter=self._limiter)
        except anyio.get_cancelled_exc_class():
            cancel.set()
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(finished.wait)
            raise


def _unknown_tool(name: str) -> MCPError:
    return MCPError(code=_INVALID_PARAMS, message=f"Unknown tool: {name[:200]}")


def _denied(result: types.CallToolResult | types.InputRequiredResult) -> bool:
    if not isinstance(result, types.CallToolResult) or not result.is_error or result.meta is None:
        return False
    return result.meta.get(META_KEY, {}).get("code") in ("POLICY_DENIED", "POLICY_UNAVAILABLE")


def _version() -> str:
    try:
        return importlib.metadata.version("stockade")
    except importlib.metadata.PackageNotFoundError:  # an uninstalled checkout has no metadata
        return "0"


def _key(plan: InvocationPlan) -> tuple[str, str]:
    return plan.request.principal.key


def _can_elicit(ctx: ServerRequestContext[Any, Any]) -> bool:
    caps = ctx.session.client_capabilities
    elicitation = caps.elicitation if caps is not None else None
    if elicitation is None:
        return False
    # A bare {} declares form mode (2025-06-18 clients); url-only clients cannot show a form.
    return elicitation.form is not None or elicitation.url is None


def _accepted(answer: object) -> bool:
    if not isinstance(answer, types.ElicitResult):
        return False
    return answer.action == "accept" and (answer.content or {}).get("approve") is True


def _wants_progress(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the caller asked for progress (a token; or an in-process callback)."""
    meta = ctx.meta or {}
    if meta.get("progress_token") is not None or meta.get("progressToken") is not None:
        return True
    # The SDK's in-process (direct) dispatcher has no token: it holds the caller's callback.
    # (Private SDK attributes, read defensively: a missing one means "no progress".)
    outbound = getattr(ctx.session, "_request_outbound", None)
    outbound = getattr(outbound, "_inner", outbound)
    return getattr(outbound, "_on_progress", None) is not None


@contextlib.asynccontextmanager
async def _until_disconnected(
    ctx: ServerRequestContext[Any, Any],
) -> AsyncIterator[list[types.CallToolResult | types.InputRequiredResult]]:
    """Cancel the body when the HTTP client that sent this request disconnects.

    The SDK does not cancel a handler whose response stream was closed, so a watcher
    polls Starlette's ``Request.is_disconnected`` every :data:`DISCONNECT_POLL_S`; the
    cancellation then interrupts the guest like ``notifications/cancelled`` does. The
    yielded list receives the body's result; it stays empty when the body was cancelled.
    """
    is_disconnected = getattr(ctx.request, "is_disconnected", None)
    outcome: list[types.CallToolResult | types.InputRequiredResult] = []
    if is_disconnected is None:  # stdio, in-process: cancellation arrives as a notification
        yield outcome
        return

    async def watch(scope: anyio.CancelScope) -> None:
        while not await is_disconnected():
            await anyio.sleep(DISCONNECT_POLL_S)
        _log.warning("the HTTP client disconnected: cancelling its call")
        scope.cancel()

    async with anyio.create_task_group() as group:
        group.start_soon(watch, group.cancel_scope)
        yield outcome
        group.cancel_scope.cancel()  # the body finished: stop watching


@contextlib.asynccontextmanager
async def _progress(ctx: ServerRequestContext[Any, Any]) -> AsyncIterator[ProgressHook | None]:
    """A progress hook for one call, or ``None`` when the caller asked for no progress.

    The worker thread never waits on the client: it drops each stage into a bounded
    buffer (a full buffer drops the stage) and a task forwards them. A client that stops
    reading cannot stall the call, and forwarding gets at most :data:`PROGRESS_DRAIN_S`
    after the call to flush.
    """
    if not _wants_progress(ctx):
        yield None
        return
    send, receive = anyio.create_memory_object_stream[str](PROGRESS_BUFFER)
    drained = anyio.Event()

    async def forward() -> None:
        count = 0
        try:
            async with receive:
                async for message in receive:
                    count += 1
                    try:
                        await ctx.session.report_progress(count, None, message)
                    except Exception as exc:  # a gone client must not fail the call
                        _log.debug("progress not sent: %s", type(exc).__name__)
        finally:
            drained.set()

    def hook(stage: str, info: Mapping[str, Any]) -> None:
        detail = ", ".join(f"{k}={v}" for k, v in info.items())
        try:
            anyio.from_thread.run_sync(send.send_nowait, f"{stage}: {detail}"[:200])
        except Exception as exc:  # progress is best effort: full, closed or no loop
            _log.debug("progress dropped: %s", type(exc).__name__)

    async with anyio.create_task_group() as group:
        group.start_soon(forward)
        try:
            yield hook
        finally:
            send.close()
            with anyio.move_on_after(PROGRESS_DRAIN_S, shield=True):
                await drained.wait()
            group.cancel_scope.cancel()


def _preview_message(host: Host, plan: InvocationPlan) -> str:
    """What the person reads: every line escaped (control, zero-width and bidi characters
    shown as ``\\uXXXX``, :mod:`host.text`), so a U+202E in the input or a manifest
    cannot reorder what is approved."""
    p = plan.preview
    lines = [
        f"Approve a call of {p.tool}@{p.version}?",
        f"package: {p.package}@{p.package_version} (lock generation {p.generation})",
        f"effect: {p.effect}   risk: {p.risk}",
        f"hosts: {', '.join(p.hosts) or '(no network)'}",
        f"secrets: {', '.join(p.secrets) or '-'}",
        f"action digest: {p.action_digest}",
    ]
    change = [] if p.detail is None else ["change (the exact diff this approval covers):", p.detail]
    escaped = [escape_unsafe(line) for line in lines]
    return "\n".join([*escaped, f"input: {_input_summary(host, plan)}", *change])


def _full_input(host: Host, plan: InvocationPlan) -> str:
    """The whole canonical input, sensitive parameters redacted (unescaped: escape to show)."""
    tool = host.registry.get(plan.tool, plan.version)
    return canonical_json(redact_params(plan.request.input, tool.sensitive_params)).decode("utf-8")


def _input_summary(host: Host, plan: InvocationPlan) -> str:
    """The input as a person reads it in a preview: escaped, cut at :data:`MAX_SUMMARY_CHARS`
    with the whole length said (``stockade approvals show`` prints all of it)."""
    shown = escape_unsafe(_full_input(host, plan))
    if len(shown) > MAX_SUMMARY_CHARS:
        cut = f"…[truncated: {len(shown)} characters in all]"
        shown = shown[: MAX_SUMMARY_CHARS - len(cut)] + cut
    return shown


def _call_result(result: CallResult) -> types.CallToolResult:
    meta = {META_KEY: {"code": None, "action_digest": result.action_digest, "audit_id": result.audit_id}}
    if result.error is not None:
        error = result.error
        meta[META_KEY]["code"] = error.code
        if isinstance(error.details.get("reason"), str):  # e.g. why a scope did not cover the call
            meta[META_KEY]["reason"] = error.details["reason"]
        text = f"{error.code}: {error.message}" + (f"\nwhat to do: {error.hint}" if error.hint else "")
        return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True, _meta=meta)
    body = json.dumps(result.output, ensure_ascii=False, separators=(",", ":"))
    structured = result.output if isinstance(result.output, dict) else None
    return types.CallToolResult(
        content=[types.TextContent(text=body)], structured_content=structured, _meta=meta
    )


def _error_result(
    exc: StockadeError, *, digest: str | None = None, audit_id: str | None = None
) -> types.CallToolResult:
    """A refusal as a result; ``audit_id``: the approval record written for it, if any."""
    info = ErrorInfo(code=exc.code, message=exc.message, hint=exc.hint)
    return _call_result(CallResult(ok=False, action_digest=digest, error=info, audit_id=audit_id))
