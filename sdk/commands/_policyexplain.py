"""``stockade policy explain``: the layers of one policy decision (docs/design.md §6 steps 3–4).

The same rules as the gateway, asked layer by layer so each can be shown: the engine's
answer for ``tool.call:NAME`` and every declared permission (and which of the subject's
roles gives it), the managed cap, the user tool policy (selector or class default),
session grants (none outside a running host), and the combination
(:func:`host.policy.grants.final_decision`): the strictest wins.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from sdk.commands._common import audit_path, location_flags, safe_text, state_dir


def explain(
    args: argparse.Namespace, tool: Any, engine: Any, document: dict[str, Any], *, binding: str | None = None
) -> dict[str, Any]:
    """The decision report (JSON-able) for ``args.subject`` in ``args.project`` calling ``tool``
    (``binding``: the tool's binding digest in the lock; a user allow recorded for another
    one is a rebind and asks)."""
    from host.policy.engine import Verdict
    from host.policy.grants import final_decision
    from host.policy.toolpolicy import ToolPolicyStore, service_of
    from host.types import Principal

    principal = Principal(project=args.project, subject=args.subject)
    roles = document["bindings"].get(args.project, {}).get(args.subject, [])
    permissions = []
    for permission in [f"tool.call:{tool.name}", *tool.permissions]:
        decision = engine.authorize(principal, args.project, permission)
        granting = [
            name
            for name in roles
            if permission in document["roles"].get(name, {}).get("allow", [])
            or permission in document["roles"].get(name, {}).get("ask", [])
        ]
        permissions.append({"permission": permission, "effect": decision.verdict.value, "roles": granting})
    effects = [Verdict(p["effect"]) for p in permissions]
    engine_verdict = (
        Verdict.DENY
        if Verdict.DENY in effects
        else Verdict.REQUIRE_APPROVAL
        if Verdict.REQUIRE_APPROVAL in effects
        else Verdict.ALLOW
    )
    effect = tool.effect
    settings = getattr(args, "host_file", None)
    store = ToolPolicyStore(
        state_dir(args) / "tool-policy", admin_dir=settings.admin_policy_dir if settings else None
    )
    service = service_of(tool.name)
    cap = store.cap_mode(tool=tool.name, service=service, effect=effect)
    detail = store.resolve_detail(
        args.subject, args.project, tool=tool.name, service=service, effect=effect, binding=binding
    )
    user_mode, mode = detail.user, detail.mode
    decision = final_decision(engine_verdict, mode, False)
    rebind = None
    if detail.rebind:
        words = shlex.join([args.project, args.subject, f"{tool.name}@{tool.version}"])
        role_word = shlex.quote(roles[0] if roles else "agent")
        rebind = {
            "recorded": detail.recorded,
            "current": binding,
            "fix": f"stockade policy grant-tool {words} --role {role_word} --allow"
            f"{location_flags(args, lock=True)}",
        }
    missing = [p["permission"] for p in permissions if p["effect"] == "deny"]
    fence = engine.fence()
    role = roles[0] if roles else "agent"
    fix = None
    if missing:
        words = shlex.join([args.project, args.subject, f"{tool.name}@{tool.version}"])
        fix = (
            f"stockade policy grant-tool {words} --role {shlex.quote(role)}{location_flags(args, lock=True)}"
        )
    return {
        "tool": f"{tool.name}@{tool.version}",
        "principal": {"project": args.project, "subject": args.subject},
        "decision": decision,
        "engine": {"effect": engine_verdict.value, "roles": roles, "permissions": permissions},
        "managed_cap": {"mode": cap.value, "dir": _admin_dir(settings)},
        "user_tool_policy": {
            "mode": user_mode.value,
            "source": "user selector" if detail.selector is not None else f"class default for {effect.value}",
            "binding": binding,
            "rebind": rebind,
        },
        "tool_policy_mode": mode.value,
        "session_grant": "none: session grants live in a running host's memory and only discharge ask",
        "scopes": _scopes(args, tool, floor=_risk(tool) == "critical" or detail.ask_always),
        "missing": missing,
        "fix": fix,
        "versions": {
            "policy_file": str(engine.path),
            "policy_version": fence.policy_version,
            "role_binding_version": fence.role_binding_version,
        },
        "audit_log": str(audit_path(args)),
    }


def _admin_dir(settings: Any) -> str | None:
    """The managed-policy directory the host file names, or ``None`` (a file without one
    printed ``(None)``)."""
    configured = getattr(settings, "admin_policy_dir", None)
    return str(configured) if configured is not None else None


def _risk(tool: Any) -> str:
    return str(getattr(tool.risk, "value", tool.risk))


def _scopes(args: argparse.Namespace, tool: Any, *, floor: bool) -> dict[str, Any]:
    """Which scopes name this exact tool for this principal, and what is left of each (a
    scope covers the call only while the decision is ``approval``, never the floor)."""
    from sdk.commands._scopebook import covering

    return {"floor": floor, "covering": [] if floor else covering(args, tool.name, tool.version)}


def render(report: dict[str, Any]) -> None:
    """Print the report for people, one fact per line."""
    principal = report["principal"]
    print(
        f"decision: {report['decision'].upper()}  "
        f"({safe_text(principal['subject'])} in {safe_text(principal['project'])} "
        f"calling {safe_text(report['tool'])})"
    )
    engine = report["engine"]
    print(f"1 engine roles: {engine['effect']}  (roles bound: {', '.join(engine['roles']) or 'none'})")
    for item in engine["permissions"]:
        via = f"via {', '.join(item['roles'])}" if item["roles"] else "no role grants it"
        print(f"    {item['effect']:<16} {safe_text(item['permission'])}  ({via})")
    cap = report["managed_cap"]
    print(f"2 managed cap: {cap['mode']}" + (f"  ({safe_text(cap['dir'])})" if cap["dir"] else "  (none)"))
    user = report["user_tool_policy"]
    print(f"3 user tool policy: {user['mode']}  ({user['source']})")
    if user.get("rebind"):
        rebind = user["rebind"]
        print(
            f"    allow recorded for binding {rebind['recorded'] or '(none: unbound)'}, "
            f"current binding {rebind['current'] or '(unknown)'} -> ask (rebind)"
        )
        print(f"    after reviewing what changed (`stockade diff OLD NEW`), re-bind: "
              f"{safe_text(rebind['fix'])}")
    print(f"4 session grant: {report['session_grant']}")
    scopes = report["scopes"]
    if scopes["floor"]:
        print("5 scopes: none can cover it (a critical tool or a managed-cap ask_always selector)")
    elif not scopes["covering"]:
        print("5 scopes: none names this tool for this principal" + (
            "" if report["decision"] != "approval" else "; an unattended call is refused (not_in_scope)"))
    for item in scopes["covering"]:
        print(f"5 scope {item['id']} (job {safe_text(item['job'])}): {item['status']}, "
              f"{item['remaining']} call(s) left" + (f", session {safe_text(item['session'])} only"
                                                      if item["session"] else ""))
    print("the strictest layer wins")
    if report["missing"]:
        print("missing: " + ", ".join(safe_text(p) for p in report["missing"]))
        print(f"  what to do: {safe_text(report['fix'])}")
    versions = report["versions"]
    print(
        f"policy file {safe_text(versions['policy_file'])}: policy version {versions['policy_version']}, "
        f"role-binding version {versions['role_binding_version']}"
    )
