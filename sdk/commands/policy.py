"""``stockade policy``: the roles and bindings file the host's policy engine reads.

The file is ``<state-dir>/policy.json`` (format ``stockade.policy/1``; see
``host.policy.engine``). Roles list permissions they ``--allow`` and permissions that
need a person's approval (``--ask``); bindings give a subject roles in a project.
Permissions are exact strings such as ``tool.call:tracker.list-issues`` or
``issues.read``; ``*`` is a literal character, never a wildcard. Every change bumps the
policy or role-binding version, and a running host sees it on its next decision.

Without this file every call is refused with POLICY_UNAVAILABLE (fail closed).

Example::

    stockade policy init
    stockade policy role agent --allow tool.call:tracker.list-issues issues.read \\
                               --ask tool.call:tracker.create-issue issues.write
    stockade policy grant p alice agent
    stockade policy grant-tool p alice tracker.list-issues@1.2.0 --role agent
    stockade policy explain p alice tracker.list-issues@1.2.0
    stockade policy show

``grant-tool`` adds exactly what a locked tool declares (``tool.call:NAME`` and its
permissions) to the role you name, allowed or, with ``--ask``, needing approval, and
binds the role to the subject. ``explain`` prints the decision for one call and why:
each layer (engine roles, managed cap, user tool policy, session grants), the
permissions missing, and the versions of the policy files.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sdk.commands._common import (
    EXIT_OK,
    CommandFailed,
    add_host_options,
    add_state_dir,
    location_flags,
    print_json,
    safe_text,
    signatures_waived,
    state_dir,
    user_input,
    verified_lock,
)


def register(sub: Any) -> None:
    """Add the ``policy`` subcommand."""
    parser = sub.add_parser(
        "policy",
        help="edit the roles and bindings policy file",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    inner = parser.add_subparsers(dest="policy_command", metavar="ACTION", required=True)
    init = inner.add_parser("init", help="create an empty policy file (refuses to overwrite one)")
    role = inner.add_parser("role", help="define or replace a role")
    role.add_argument("name", help="role name")
    role.add_argument("--allow", nargs="*", default=[], metavar="PERM", help="permissions granted")
    role.add_argument("--ask", nargs="*", default=[], metavar="PERM", help="permissions needing approval")
    grant = inner.add_parser("grant", help="bind a role to a subject in a project")
    revoke = inner.add_parser("revoke", help="remove a role from a subject in a project")
    for action in (grant, revoke):
        action.add_argument("project")
        action.add_argument("subject")
        action.add_argument("role")
    show = inner.add_parser("show", help="print roles (one permission per line), bindings and versions")
    for action, func in (
        (init, run_init),
        (role, run_role),
        (grant, run_grant),
        (revoke, run_revoke),
        (show, run_show),
    ):
        add_state_dir(action)
        action.add_argument("--json", action="store_true", help="machine-readable output")
        action.set_defaults(func=func)
    _register_tool_actions(inner)


def _register_tool_actions(inner: Any) -> None:
    grant_tool = inner.add_parser(
        "grant-tool",
        help="grant exactly what a locked tool declares to a role, and bind it to a subject",
        description="Add tool.call:NAME and every permission the locked tool declares to ROLE "
        "(allowed, or needing approval with --ask), creating the role if needed, and bind ROLE "
        "to SUBJECT in PROJECT. Reads the lock (verified, nothing compiled).",
    )
    explain = inner.add_parser(
        "explain",
        help="the decision for one call and why, layer by layer",
        description="Print the decision policy would make for SUBJECT in PROJECT calling "
        "TOOL@VERSION: each permission's answer from the roles, the managed cap, the user tool "
        "policy and session grants, what is missing, and the policy file versions. "
        "Exit 0 allowed, 1 denied, 3 needs approval.",
    )
    for action, func in ((grant_tool, run_grant_tool), (explain, run_explain)):
        action.add_argument("project")
        action.add_argument("subject")
        action.add_argument("tool", metavar="TOOL@VERSION")
        add_host_options(action)
        action.add_argument("--json", action="store_true", help="machine-readable output")
        action.set_defaults(func=func)
    grant_tool.add_argument("--role", required=True, help="the role to add the permissions to")
    grant_tool.add_argument("--ask", action="store_true", help="the permissions need a person's approval")
    grant_tool.add_argument(
        "--allow",
        action="store_true",
        dest="allow_tool",
        help="also allow the tool in SUBJECT's user tool policy without asking, bound to its current "
        "binding digest (a later lock that widens what it reaches asks again); re-binds a stale allow",
    )


def _path(args: argparse.Namespace) -> Path:
    return state_dir(args) / "policy.json"


def _engine(args: argparse.Namespace) -> Any:
    from host.policy.engine import FilePolicyEngine

    path = _path(args)
    if not path.exists():
        raise CommandFailed(
            "POLICY_MISSING",
            f"{path} does not exist",
            hint=f"run `stockade policy init{location_flags(args)}` first",
        )
    return FilePolicyEngine(path)


def _done(args: argparse.Namespace, what: str, fence: Any) -> int:
    versions = {"policy_version": fence.policy_version, "role_binding_version": fence.role_binding_version}
    if args.json:
        print_json({"ok": True, **versions})
    else:
        print(
            f"{what} (policy version {fence.policy_version}, "
            f"role-binding version {fence.role_binding_version})"
        )
    return EXIT_OK


def run_init(args: argparse.Namespace) -> int:
    """Create the file."""
    from host.policy.engine import FilePolicyEngine

    path = _path(args)
    if path.exists():
        raise CommandFailed(
            "POLICY_EXISTS", f"{path} exists", hint="edit it with `stockade policy role|grant|revoke`"
        )
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    engine = FilePolicyEngine.initialize(path)
    return _done(args, f"created {path}", engine.fence())


def run_role(args: argparse.Namespace) -> int:
    """Define a role."""
    fence = _engine(args).set_role(args.name, allow=args.allow, ask=args.ask)
    return _done(args, f"role {args.name}: {len(args.allow)} allowed, {len(args.ask)} asking", fence)


def run_grant(args: argparse.Namespace) -> int:
    """Bind a role."""
    fence = _engine(args).grant_role(args.project, args.subject, args.role)
    return _done(args, f"granted {args.role} to {args.subject} in {args.project}", fence)


def run_revoke(args: argparse.Namespace) -> int:
    """Unbind a role."""
    fence = _engine(args).revoke_role(args.project, args.subject, args.role)
    return _done(args, f"revoked {args.role} from {args.subject} in {args.project}", fence)


def _document(args: argparse.Namespace) -> dict[str, Any]:
    _engine(args).fence()  # validates the file (PolicyUnavailable if broken)
    document: dict[str, Any] = json.loads(_path(args).read_text(encoding="utf-8"))
    return document


def run_show(args: argparse.Namespace) -> int:
    """Print the file's content: one permission per line, never a wrapped table."""
    document = _document(args)
    if args.json:
        print_json(document)
        return EXIT_OK
    print(
        f"policy {safe_text(_path(args))}\n"
        f"  policy version {document['policy_version']}, "
        f"role-binding version {document['role_binding_version']}"
    )
    bound: dict[str, list[str]] = {}
    for project, subjects in sorted(document["bindings"].items()):
        for subject, roles in sorted(subjects.items()):
            for role in roles:
                bound.setdefault(role, []).append(f"{subject} in {project}")
    if not document["roles"]:
        print("no roles: every call is denied (add one with `stockade policy grant-tool`)")
    for name, role in sorted(document["roles"].items()):
        print(f"role {safe_text(name)}")
        for kind in ("allow", "ask"):
            for permission in role.get(kind, []):
                print(f"  {kind:<6} {safe_text(permission)}")
        for where in bound.get(name, []) or ["(not bound to anyone)"]:
            print(f"  bound  {safe_text(where)}")
    return EXIT_OK


def _split_tool(text: str) -> tuple[str, str]:
    name, sep, version = text.partition("@")
    if not sep or not name or not version:
        raise CommandFailed("USAGE", f"expected TOOL@VERSION, got {text!r}", hint="e.g. echo.say@1.0.0")
    return name, version


def _locked_tool(args: argparse.Namespace) -> Any:
    """The locked ToolSpec named by ``args.tool`` (exact name and version)."""
    return _locked(args)[0]


def _locked(args: argparse.Namespace) -> tuple[Any, str]:
    """The locked ToolSpec named by ``args.tool`` and its binding digest
    (:mod:`host.policy.bindings`: what the tool can reach and the key that signed it)."""
    from host.errors import ToolNotFound
    from host.mcpsource.hosting import binding_digests
    from host.policy.bindings import package_binding

    name, version = _split_tool(args.tool)
    loaded = verified_lock(
        args.lock, trusted_keys=args.trusted_keys, require_signatures=bool(args.require_signatures),
        unsafe_allow_unsigned=signatures_waived(args),
    )
    key_ids = {entry.name: entry.key_id for entry in loaded.lock.packages}
    offered = []
    for package in loaded.packages:
        for tool in package.manifest.tools:
            if (tool.name, tool.version) == (name, version):
                definition = loaded.registry().get(name, version)
                return tool, package_binding(definition, key_id=key_ids.get(package.manifest.package.name))
            offered.append(f"{tool.name}@{tool.version}")
    sources = _pinned_sources(args, loaded)  # MCP-source tools too, bound to their transport and pin
    source_bindings = binding_digests(sources)
    for source in sources:
        for tool in source.manifest.tools:
            if (tool.name, tool.version) == (name, version):
                return tool, source_bindings[(name, version)]
            offered.append(f"{tool.name}@{tool.version}")
    for tool, binding in _host_tools(args, loaded.generation):  # fs.* of the host file's workspaces
        if (tool.name, tool.version) == (name, version):
            return tool, binding
        offered.append(f"{tool.name}@{tool.version}")
    raise ToolNotFound(
        f"no tool {name}@{version} in {args.lock}",
        hint=f"tools in the lock and the host tools of the config file: {', '.join(offered) or 'none'}",
    )


def _host_tools(args: argparse.Namespace, generation: int) -> list[tuple[Any, str]]:
    """The host tools (``fs.*``) a host served with this config file runs, each with its
    binding digest: the ones ``[[workspace]]`` grants in the host file, as the Host builds
    them (a host tool's binding covers its effect, risk and permissions; it has no signer).

    Raises:
        ToolFailed: a workspace root cannot be opened (as when the Host opens).
    """
    settings = getattr(args, "host_file", None)
    if settings is None or not settings.workspaces:
        return []
    from host.policy.bindings import package_bindings
    from host.tools import host_tools_for
    from host.trust.registry import FrozenRegistry
    from sdk.commands._common import host_config

    tools = host_tools_for(host_config(args, state_dir(args)), protected=[Path(args.lock)])
    if tools is None:
        return []
    try:
        items = list(tools.registry_items(generation))
        bindings = package_bindings(FrozenRegistry.from_packages(items), {})  # as the Host: no signer
        return [(spec, bindings[(spec.name, spec.version)])
                for manifest, _ in items for spec in manifest.tools]  # fmt: skip
    finally:
        tools.close()


def _pinned_sources(args: argparse.Namespace, loaded: Any) -> Any:
    """The lock's verified MCP sources (pins checked against the lock, signatures as configured)."""
    from host.config import DEFAULT_CEILINGS
    from host.formats.mcppin import load_pinned_sources
    from host.trust.lock import TrustedKeys

    keys = TrustedKeys.load(args.trusted_keys) if args.trusted_keys is not None else None
    return load_pinned_sources(
        Path(args.lock), loaded.lock.mcp, ceilings=DEFAULT_CEILINGS,
        require_signatures=bool(args.require_signatures) and not signatures_waived(args), keys=keys,
    )


def _required(tool: Any) -> list[str]:
    return [f"tool.call:{tool.name}", *tool.permissions]


def run_grant_tool(args: argparse.Namespace) -> int:
    """Add the tool's permissions to a role and bind it."""
    if args.allow_tool and args.ask:
        raise CommandFailed("USAGE", "--allow and --ask contradict each other", hint="pass one of them")
    tool, binding = _locked(args)
    engine = _engine(args)
    role = _document(args)["roles"].get(args.role, {})
    allow, ask = list(role.get("allow", [])), list(role.get("ask", []))
    target = ask if args.ask else allow
    added = [p for p in _required(tool) if p not in allow and p not in target]
    target.extend(added)
    engine.set_role(args.role, allow=allow, ask=[p for p in ask if p not in allow])
    fence = engine.grant_role(args.project, args.subject, args.role)
    kind = "ask" if args.ask else "allow"
    rebound = _allow_bound(args, tool, binding) if args.allow_tool else None
    if args.json:
        print_json(
            {
                "ok": True,
                "role": args.role,
                kind: added,
                "policy_version": fence.policy_version,
                "role_binding_version": fence.role_binding_version,
                **({} if rebound is None else {"tool_policy": rebound}),
            }
        )
        return EXIT_OK
    print(f"role {args.role}: {kind} {len(added)} new permission(s) for {tool.name}@{tool.version}")
    for permission in added:
        print(f"  {kind:<6} {safe_text(permission)}")
    if rebound is not None:
        before = rebound["recorded"] or "none"
        print(f"user tool policy: allow {tool.name} bound to binding {binding} (was: {before})")
    return _done(args, f"bound {args.role} to {args.subject} in {args.project}", fence)


def _allow_bound(args: argparse.Namespace, tool: Any, binding: str) -> dict[str, Any]:
    """Set the subject's user tool-policy allow of ``tool``, bound to ``binding``."""
    from host.policy.toolpolicy import ToolMode, ToolPolicyStore, ToolSelector

    settings = getattr(args, "host_file", None)
    store = ToolPolicyStore(
        state_dir(args) / "tool-policy", admin_dir=settings.admin_policy_dir if settings else None
    )
    selector = ToolSelector(tool.name)
    with user_input("project and subject must be 1-256 characters without control characters"):
        before = store.load(args.subject, args.project).recorded(selector, tool.name)
        store.set(args.subject, args.project, selector, ToolMode.ALLOW, bound={tool.name: binding})
    return {"tool": tool.name, "mode": "allow", "recorded": before, "binding": binding}


def run_explain(args: argparse.Namespace) -> int:
    """Explain the decision layer by layer; exit 0 allow, 1 deny, 3 approval."""
    from sdk.commands._policyexplain import explain, render

    (tool, binding), engine, document = _locked(args), _engine(args), _document(args)
    with user_input("project and subject must be 1-256 characters without control characters"):
        report = explain(args, tool, engine, document, binding=binding)
    if args.json:
        print_json(report)
    else:
        render(report)
    return {"allow": 0, "deny": 1, "approval": 3}[str(report["decision"])]
