"""What a call leaves behind: its result, its audit records, its usage (private to the gateway).

The gateway (:mod:`host.call.host`) is the pipeline; this module holds the pieces it
assembles at the end of a call and that carry no decision of their own:

- filling the public result types of :mod:`host.types` (:class:`CallResult`,
  :class:`ErrorInfo`, :class:`Usage`);
- the audit record of a call (:func:`call_record`, :func:`envelope_summary`,
  :func:`http_records`), scrubbed of staged secrets and with sensitive params redacted;
- :func:`refuse`, which appends the outcome record of a refused or failed call and
  builds its :class:`CallResult` (the record is written before the result exists);
- :func:`egress_cause`, which reports a tool failure that followed an egress refusal
  as that refusal;
- the guest log and traceback helpers.

Invariants: nothing here reads policy or runs a guest; every text that leaves through a
result or a record has passed the call's :class:`~host.secrets.redact.Redactor`.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping
from typing import Any, Final

from host.audit.log import redact_params
from host.egress.port import EgressPort
from host.egress.session import EgressSession
from host.errors import EgressDenied, EgressUnreachable, StockadeError
from host.secrets.redact import Redactor
from host.store.port import AuditSink
from host.trust.registry import ToolDefinition
from host.types import CallRequest, CallResult, ErrorInfo, InvocationPlan, Usage

__all__ = [
    "GUEST_TRACEBACK_MARKER",
    "GUEST_TRACEBACK_MAX_CHARS",
    "NO_REDACTION",
    "approval_record",
    "call_record",
    "egress_cause",
    "envelope_summary",
    "guest_traceback",
    "http_records",
    "log_text",
    "refuse",
    "result_from_error",
    "text",
    "usage_of",
]

_log = logging.getLogger("stockade.gateway")

NO_REDACTION = Redactor(())
"""The redactor of a call that staged no secret (built once: it redacts nothing)."""


@functools.lru_cache(maxsize=64)
def text(member: object) -> str:
    """The string value of an enum member (``Enum.value`` is a slow descriptor)."""
    return str(getattr(member, "value", member))


# -- records ----------------------------------------------------------------------------


def call_record(plan: InvocationPlan, tool: ToolDefinition, redactor: Redactor) -> dict[str, Any]:
    """The fields every record of a planned call carries (intent and outcome).

    The input is recorded with the tool's sensitive params redacted and staged secret
    values scrubbed.
    """
    principal = plan.request.principal
    recorded: Any = plan.request.input
    if tool.sensitive_params:
        recorded = redact_params(recorded, tool.sensitive_params)
    if not redactor.empty:
        recorded = redactor.json_value(recorded)
    record = {
        "action_digest": plan.action_digest,
        "project": principal.project,
        "subject": principal.subject,
        "session": plan.request.session,
        "tool": tool.name,
        "version": tool.version,
        "generation": tool.binding.generation,
        "effect": text(tool.effect),
        "input": recorded,
        "fence": [plan.fence.policy_version, plan.fence.role_binding_version],
        **({"tool_policy": dict(plan.tool_policy)} if plan.tool_policy else {}),
        **({"discharged_by": plan.discharged_by} if plan.discharged_by else {}),
    }
    if plan.effect is not None:  # a host tool's prepared change: digests and sizes, no contents
        record["change"] = dict(plan.effect)
    return record


def approval_record(plan: InvocationPlan, channel: str) -> dict[str, Any]:
    """The fields of an ``approval.*`` record: which action, whose, how they were asked."""
    principal = plan.request.principal
    return {
        "action_digest": plan.action_digest,
        "project": principal.project,
        "subject": principal.subject,
        "session": plan.request.session,
        "tool": plan.tool,
        "version": plan.version,
        "generation": plan.preview.generation,
        "channel": channel,
    }


def envelope_summary(request: object) -> dict[str, Any]:
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


def http_records(egress: EgressPort) -> list[dict[str, Any]]:
    """One record per outbound request of the call (empty without an egress session)."""
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


def usage_of(started: float, egress: EgressPort, sandbox: object) -> Usage:
    """The call's usage: fuel from the sandbox's usage dict, bytes from the egress session,
    wall time since ``started`` (``time.monotonic()``)."""
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


# -- refusals and failures -------------------------------------------------------------------


def refuse(
    audit: AuditSink,
    request: CallRequest | Mapping[str, Any],
    exc: StockadeError,
    *,
    debug_guest_errors: bool,
    digest: str | None = None,
    usage: Usage | None = None,
    plan: InvocationPlan | None = None,
    tool: ToolDefinition | None = None,
    redactor: Redactor | None = None,
    guest_log: object = None,
    outcome: Mapping[str, Any] | None = None,
) -> CallResult:
    """Append the outcome record of a refused or failed call, then build its result.

    The record is written before the result exists; when the audit log itself fails, the
    failure is logged and the result carries no ``audit_id`` (the refusal stands).
    """
    scrub = redactor or NO_REDACTION
    record: dict[str, Any] = {
        "ok": False,
        "error": {"code": exc.code, "message": scrub.text(exc.message)},
    }
    if plan is not None and tool is not None:
        record |= call_record(plan, tool, scrub)
    else:
        record |= envelope_summary(request)
    if digest:
        record["action_digest"] = digest
    if usage is not None:
        record["usage"] = usage.to_dict()
    if outcome:
        record["outcome"] = dict(outcome)
    audit_id: str | None = None
    try:
        audit_id = audit.append("call.outcome", record)
    except StockadeError as audit_exc:
        _log.error("audit log unavailable while recording a refusal: %s", audit_exc)
    return result_from_error(
        exc, usage=usage, digest=digest, audit_id=audit_id, scrub=scrub, guest_log=guest_log,
        debug_guest_errors=debug_guest_errors,
    )


def result_from_error(
    exc: StockadeError,
    *,
    usage: Usage | None,
    digest: str | None,
    debug_guest_errors: bool,
    audit_id: str | None = None,
    scrub: Redactor | None = None,
    guest_log: object = None,
) -> CallResult:
    """The caller's view of a failure: code, scrubbed message and details, the guest log
    (and, with ``debug_guest_errors``, the guest's last traceback)."""
    scrub = scrub or NO_REDACTION
    details = {k: v for k, v in exc.details.items() if k not in {"usage", "log"}}
    # The guest's log is kept on failures too: it is what explains them.
    # It was capped at max_log_bytes while captured; scrubbed of staged secrets here.
    log = scrub.text(log_text(guest_log)) if guest_log else ""
    if debug_guest_errors and guest_log:
        traceback = guest_traceback(guest_log)
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
        log=log,
    )


_UNREACHABLE_REASONS: Final = frozenset({"dns_failure", "dns_timeout", "dns_busy"})
_ALLOWLIST_REASONS: Final = frozenset(
    {"empty_allowlist", "host_not_allowed", "port_not_allowed", "path_not_allowed", "method_not_allowed",
     "scheme_not_allowed", "insecure_scheme"}
)  # fmt: skip


def egress_cause(exc: StockadeError, egress: EgressPort) -> StockadeError:
    """A tool failure that followed an egress refusal, reported as that refusal.

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
            if record.host:
                where = f"its request to {record.method} {record.host}{record.path}"
            elif kind == "invalid-request":
                where = "its request to a malformed URL"
            else:  # refused before its URL was read (a credential-like header): no host to name
                where = f"its {record.method} request" if record.method else "its request"
            hint = (
                f"if the plugin should reach {record.host}, add it under [http] allow in stockade.toml "
                "(host, path_prefix, methods); the allowlist is part of the reviewed package"
                if reason in _ALLOWLIST_REASONS
                else "the host refuses this request whatever the allowlist says; fix the plugin's request"
            )
            return EgressDenied(
                f"the tool failed after the host refused {where} ({reason}); "
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


# -- the guest's log --------------------------------------------------------------------------


def log_text(log: object) -> str:
    """The guest log as one text (lines joined), whatever shape it arrived in."""
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


def guest_traceback(log: object) -> str | None:
    """The last traceback the guest logged, without its marker line (capped), or None."""
    if not isinstance(log, tuple | list):
        return None
    for line in reversed(log):
        entry = _line_text(line)
        if entry.startswith(GUEST_TRACEBACK_MARKER + "\n"):
            return entry[len(GUEST_TRACEBACK_MARKER) + 1 :][:GUEST_TRACEBACK_MAX_CHARS]
    return None
