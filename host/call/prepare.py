"""Preparing a tool call: envelope, registry, policy before input, action digest, approvals.

This is docs/design.md §6 steps 1–6 and §7. :func:`prepare` turns an untrusted
:class:`CallRequest` into an :class:`InvocationPlan` — pure data, with no filesystem,
process, network or timer authority — or raises the refusal:

1. the envelope is parsed exactly (extra fields refused) and the principal is unexpired;
2. the tool is looked up by exact (name, version) in the frozen registry;
3. ``tool.call:{name}`` and every required permission are authorized through the
   :class:`~host.policy.engine.PolicyEngine` port *before the input is looked at*; any
   deny stops; every non-deny decision must carry the same fence;
4. the layered tool policy (managed cap, user selectors, class defaults) and session
   grants are combined with the engine's answer: the strictest wins, and a grant only
   discharges *ask*, never the hard floor (a ``critical`` tool or a managed-cap
   ``ask_always`` selector: ``tool_policy["floor"]``, which no scope discharges
   either); a user allow and a grant hold only while the tool's binding digest
   (:mod:`host.policy.bindings`) is the one they recorded, else the call asks (a rebind);
5. the input is validated and canonicalized; the input digest and the action digest are
   computed;
6. the plan is ``ready`` or ``approval_required`` with a redacted preview.

The values it reads and makes (:class:`~host.types.CallRequest`,
:class:`~host.types.InvocationPlan`, :class:`~host.types.Preview`) live in
:mod:`host.types`; approvals are issued and redeemed by
:class:`host.approvals.ApprovalAuthority`.

Example::

    plan = prepare(request, registry=..., engine=..., tool_policy=..., grants=...)
    if plan.status == "approval_required":
        approval = authority.issue(plan, ttl_s=300)
"""

from __future__ import annotations

import functools
import json
import re
import shlex
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from host import observe
from host.approvals import reference_time
from host.canonical import canonical_json, digest_json, sha256_hex
from host.errors import PolicyDenied, PolicyUnavailable, RequestInvalid, StockadeError
from host.formats.schema import canonicalize
from host.formats.schemaprofile import PROFILE_EXTERNAL, canonicalize_external
from host.policy.bindings import BoundGrants, package_binding
from host.policy.engine import Decision, PolicyEngine, Verdict, check_fences
from host.policy.grants import final_decision
from host.policy.toolpolicy import ToolPolicyStore, service_of
from host.trust.registry import FrozenRegistry, ToolDefinition
from host.types import CallRequest, Fence, InvocationPlan, Preview, Principal, validate_envelope

if TYPE_CHECKING:
    from host.store.port import GrantPort

__all__ = ["ACTION_DOMAIN", "action_digest", "prepare", "required_permissions"]

ACTION_DOMAIN = "stockade/tool-invocation@1"
"""Domain separator of the action digest (docs/design.md §7); versioned like every format."""


def action_digest(principal: Principal, tool: ToolDefinition, input_sha256: str) -> str:
    """The §7 action digest: the stable handle for approvals and audit.

    It binds the principal's project and subject, the tool's exact identity and binding,
    its permissions, effect, risk and timeout, and the canonical input digest. It holds
    no input, secrets or prompts. (The canonical JSON of the tool's part is built once
    per tool; the result is byte-for-byte that of :func:`_action_document`.)
    """
    parts = _digest_template(tool)
    if parts is None:  # pragma: no cover - a tool field holds a placeholder string
        return digest_json(_action_document(principal.project, principal.subject, tool, input_sha256))
    head, between_input_project, between_project_subject, tail = parts
    if not _HEX64.fullmatch(input_sha256):
        raise ValueError("input_sha256 must be 64 lower-case hex digits")
    return sha256_hex(
        head + b'"' + input_sha256.encode("ascii") + b'"' + between_input_project
        + _json_string(principal.project) + between_project_subject
        + _json_string(principal.subject) + tail
    )


def _json_string(text: str) -> bytes:
    """``canonical_json(text)`` for a str, without the generic walk: the C encoder's
    escaping is RFC 8785's; a string with a lone surrogate goes the generic way (and is
    refused there)."""
    if not text.isascii() and _SURROGATE.search(text):
        return canonical_json(text)
    return _encode_basestring(text).encode("utf-8")


_HEX64 = re.compile(r"[0-9a-f]{64}")
_SURROGATE = re.compile("[\ud800-\udfff]")
_encode_basestring: Callable[[str], str] = json.encoder.encode_basestring  # C-accelerated
_SLOTS = ("\x00stockade:input\x00", "\x00stockade:project\x00", "\x00stockade:subject\x00")
_UNKNOWN = object()
_TEMPLATES: dict[tuple[object, ...], tuple[bytes, bytes, bytes, bytes] | None] = {}


def _digest_template(tool: ToolDefinition) -> tuple[bytes, bytes, bytes, bytes] | None:
    """The canonical document of ``tool`` cut around its three per-call values (keys
    ``input_sha256`` < ``project`` < ``subject`` sort in that order), or ``None`` if a
    tool field happens to hold a placeholder."""
    binding = tool.binding
    key = (tool.name, tool.version, binding, tool.permissions, tool.effect, tool.risk, tool.timeout_s)
    known = _TEMPLATES.get(key, _UNKNOWN)
    if known is not _UNKNOWN:
        return known  # type: ignore[return-value]  # the sentinel is excluded above
    text = canonical_json(_action_document(_SLOTS[1], _SLOTS[2], tool, _SLOTS[0]))
    marks = [canonical_json(slot) for slot in _SLOTS]
    parts: tuple[bytes, bytes, bytes, bytes] | None = None
    if all(text.count(mark) == 1 for mark in marks):
        head, rest = text.split(marks[0])
        middle, rest = rest.split(marks[1])
        middle2, tail = rest.split(marks[2])
        parts = (head, middle, middle2, tail)
    if len(_TEMPLATES) >= 4096:
        _TEMPLATES.clear()
    _TEMPLATES[key] = parts
    return parts


def _action_document(project: str, subject: str, tool: ToolDefinition, input_sha256: str) -> dict[str, Any]:
    binding = tool.binding
    return (
        {
            "domain": ACTION_DOMAIN,
            "project": project,
            "subject": subject,
            "tool": tool.name,
            "version": tool.version,
            "binding": {
                "package": binding.package,
                "version": binding.version,
                "generation": binding.generation,
                "manifest_sha256": binding.manifest_sha256,
                "module_sha256": binding.module_sha256,
            },
            "permissions": required_permissions(tool),
            "effect": _enum_value(tool.effect),
            "risk": _enum_value(tool.risk),
            "timeout_s": tool.timeout_s,
            "input_sha256": input_sha256,
        }
    )


def required_permissions(tool: ToolDefinition) -> list[str]:
    """``tool.call:{name}`` followed by the tool's declared permissions."""
    return [f"tool.call:{tool.name}", *tool.permissions]


@functools.lru_cache(maxsize=64)
def _enum_value(value: object) -> str:
    return str(getattr(value, "value", value))


def _decide(engine: PolicyEngine, principal: Principal, permissions: list[str]) -> Iterator[object]:
    """The engine's answers in order, from one policy snapshot when the engine offers
    ``authorize_many`` (one file check per call instead of one per permission)."""
    many = getattr(engine, "authorize_many", None)
    if many is not None:
        yield from many(principal, principal.project, permissions)
        return
    for permission in permissions:
        yield engine.authorize(principal, principal.project, permission)


@observe.staged("stockade.policy")
def _authorize(engine: PolicyEngine, principal: Principal, tool: ToolDefinition) -> tuple[Verdict, Fence]:
    """Ask the engine about every required permission; a deny lists ALL denied ones."""
    decisions: list[Decision] = []
    denied: list[tuple[str, str]] = []
    permissions = required_permissions(tool)
    answers = _decide(engine, principal, permissions)
    for permission in permissions:
        try:
            decision = next(answers)
        except StockadeError:
            raise
        except Exception as exc:  # a broken store (or a short answer) must fail closed, not crash open
            raise PolicyUnavailable(f"policy engine failed: {type(exc).__name__}") from exc
        if not isinstance(decision, Decision) or not isinstance(decision.verdict, Verdict):
            raise PolicyUnavailable("policy engine returned a malformed decision")
        if decision.verdict is Verdict.DENY:
            denied.append((permission, decision.reason))
        else:
            decisions.append(decision)
    if denied:
        raise _denied(principal, tool, denied)
    fence = check_fences(decisions)
    if any(d.verdict is Verdict.REQUIRE_APPROVAL for d in decisions):
        return Verdict.REQUIRE_APPROVAL, fence
    return Verdict.ALLOW, fence


def _denied(principal: Principal, tool: ToolDefinition, denied: list[tuple[str, str]]) -> PolicyDenied:
    missing = [permission for permission, _ in denied]
    words = shlex.join([principal.project, principal.subject, f"{tool.name}@{tool.version}"])
    return PolicyDenied(
        f"policy denies {', '.join(repr(p) for p in missing)} to {principal.subject!r} "
        f"in {principal.project!r}",
        hint=f"An administrator grants exactly what the tool declares with "
        f"`stockade policy grant-tool {words} --role agent`.",
        permission=missing[0],
        permissions=missing,
        reason=denied[0][1],
    )


def _preview(tool: ToolDefinition, digest: str) -> Preview:
    """The tool's preview for one action (the tool's part is built once per tool)."""
    key = (tool.name, tool.version, tool.binding)
    template = _PREVIEWS.get(key)
    if template is None:
        template = _preview_of(tool, "")
        if len(_PREVIEWS) >= 4096:
            _PREVIEWS.clear()
        _PREVIEWS[key] = template
    t = template
    return Preview(
        t.tool, t.version, t.package, t.package_version, t.generation, t.effect, t.risk,
        t.permissions, t.hosts, t.secrets, digest,
    )


_PREVIEWS: dict[tuple[object, ...], Preview] = {}


def _preview_of(tool: ToolDefinition, digest: str) -> Preview:
    http = tool.package.http
    hosts: list[str] = []
    secrets: list[str] = []
    if http is not None:
        for entry in http.allow:
            port = "" if entry.port is None else f":{entry.port}"
            methods = ",".join(entry.methods)
            hosts.append(f"{methods} {entry.scheme}://{entry.host}{port}{entry.path_prefix}")
        secrets = sorted({c.secret for c in http.credentials})
    if tool.schema_profile == PROFILE_EXTERNAL:  # a pinned MCP source: say what the host cannot bound
        hosts = [tool.package.package.description.removeprefix("MCP source: ")]
    binding = tool.binding
    return Preview(
        tool=tool.name,
        version=tool.version,
        package=binding.package,
        package_version=binding.version,
        generation=binding.generation,
        effect=_enum_value(tool.effect),
        risk=_enum_value(tool.risk),
        permissions=tuple(required_permissions(tool)),
        hosts=tuple(hosts),
        secrets=tuple(secrets),
        action_digest=digest,
    )


def prepare(
    request: CallRequest | Mapping[str, Any],
    *,
    registry: FrozenRegistry,
    engine: PolicyEngine,
    tool_policy: ToolPolicyStore,
    grants: GrantPort,
    max_input_bytes: int,
    now: float | None = None,
    validate_input: Callable[..., bytes] = canonicalize,
    bindings: Mapping[tuple[str, str], str] | None = None,
) -> InvocationPlan:
    """Run docs/design.md §6 steps 1–6 and return the plan.

    Args:
        request: the envelope (a CallRequest or its mapping form).
        registry: the frozen registry of this host.
        engine: the PolicyEngine port.
        tool_policy: the layered tool policy store.
        grants: session grants of this host.
        max_input_bytes: canonical input budget (docs/design.md §5: 64 KiB).
        now: reference time for expiry checks (defaults to ``time.time()``); must be finite
            (ValueError otherwise).
        validate_input: the schema validator (a seam for tests that spy on it).
        bindings: ``(tool, version)`` → binding digest of the running generation
            (:mod:`host.policy.bindings`); a tool it does not name has no binding, so a
            user allow of it asks. ``None`` (no lock at hand): the package binding of the
            definition itself, unsigned.

    Raises:
        RequestInvalid: malformed envelope or expired principal.
        ToolNotFound: no tool with that exact name and version.
        PolicyDenied: any permission denied, or the tool is disabled.
        PolicyUnavailable: the engine failed or fences are missing, malformed or mixed.
        InputInvalid: the input fails the tool's schema (only after policy allowed it).
    """
    req = validate_envelope(request)
    reference = reference_time(now)
    expires = req.principal.expires_at
    if expires is not None and not expires > reference:  # written so that NaN counts as expired
        raise RequestInvalid("the principal has expired; authenticate again")
    with observe.span("stockade.registry"):
        tool = registry.get(req.tool, req.version)
    engine_verdict, fence = _authorize(engine, req.principal, tool)
    binding = package_binding(tool, key_id=None) if bindings is None else bindings.get(tool.key)
    try:
        with observe.span("stockade.tool_policy"):
            resolution = tool_policy.resolve_detail(
                req.principal.subject,
                req.principal.project,
                tool=tool.name,
                service=service_of(tool.name),
                effect=tool.effect,
                binding=binding,
            )
    except StockadeError:
        raise
    except Exception as exc:
        raise PolicyUnavailable(f"tool policy failed: {type(exc).__name__}") from exc
    mode = resolution.mode
    # A grant is looked up only when, without one, a person would be asked: it can change
    # nothing else, and with a shared store each lookup is a database round trip. The hard
    # floor (a critical tool, a managed-cap ask_always selector) is never discharged by a
    # grant or a scope: only a person's approval of the exact action.
    verdict = final_decision(engine_verdict, mode, False)
    floor = verdict == "approval" and (_enum_value(tool.risk) == "critical" or resolution.ask_always)
    granted = verdict == "approval" and not floor and _granted(grants, req, tool.name, binding)
    if granted:
        verdict = final_decision(engine_verdict, mode, True)
    if verdict == "deny":
        words = shlex.join([req.principal.project, req.principal.subject, f"{tool.name}@{tool.version}"])
        raise PolicyDenied(
            f"tool {tool.name!r} is disabled by tool policy (managed cap or user tool policy)",
            hint=f"See which layer disables it with `stockade policy explain {words}`.",
            tool=tool.name,
        )
    validate = canonicalize_external if tool.schema_profile == PROFILE_EXTERNAL else validate_input
    with observe.span("stockade.input"):
        canonical = validate(tool.input_schema, req.input, max_bytes=max_input_bytes)
    input_sha = sha256_hex(canonical)
    digest = action_digest(req.principal, tool, input_sha)
    preview = _preview(tool, digest)
    if resolution.rebind and verdict == "approval":
        preview = replace(preview, rebind={"recorded": resolution.recorded or "", "current": binding or ""})
    allow = "bound" if resolution.bound_allow else "rebind" if resolution.rebind else "none"
    return InvocationPlan(
        status="approval_required" if verdict == "approval" else "ready",
        request=req,
        tool=tool.name,
        version=tool.version,
        canonical_input=canonical,
        input_sha256=input_sha,
        action_digest=digest,
        fence=fence,
        preview=preview,
        tool_policy={
            "mode": mode.value, "binding": binding, "allow": allow, **({"floor": True} if floor else {}),
        },
        discharged_by="session_grant" if granted else "policy" if verdict == "allow" else None,
    )


def _granted(grants: GrantPort, req: CallRequest, tool: str, binding: str | None) -> bool:
    """Whether a session grant discharges the ask: bound to the tool's binding when the
    store is a :class:`BoundGrants` (a Host's); a tool without a binding has no grant."""
    if isinstance(grants, BoundGrants):
        return binding is not None and grants.discharges_bound(req.principal.key, req.session, tool, binding)
    return grants.discharges(req.principal.key, req.session, tool)
