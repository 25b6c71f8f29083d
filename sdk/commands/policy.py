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
    stockade policy show
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.table import Table

from host.policy.engine import FilePolicyEngine
from sdk.commands._common import (
    EXIT_OK,
    CommandFailed,
    add_state_dir,
    cell,
    print_json,
    state_dir,
    stdout_console,
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
    show = inner.add_parser("show", help="print roles, bindings and versions")
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


def _path(args: argparse.Namespace) -> Any:
    return state_dir(args) / "policy.json"


def _engine(args: argparse.Namespace) -> FilePolicyEngine:
    path = _path(args)
    if not path.exists():
        raise CommandFailed(
            "POLICY_MISSING", f"{path} does not exist", hint="run `stockade policy init` first"
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


def run_show(args: argparse.Namespace) -> int:
    """Print the file's content."""
    _engine(args).fence()  # validates the file (PolicyUnavailable if broken)
    document = json.loads(_path(args).read_text(encoding="utf-8"))
    if args.json:
        print_json(document)
        return EXIT_OK
    table = Table(
        title=f"policy {_path(args)}  "
        f"(versions {document['policy_version']}/{document['role_binding_version']})"
    )
    for column in ("role", "allow", "ask", "bound to"):
        table.add_column(column)
    bound: dict[str, list[str]] = {}
    for project, subjects in document["bindings"].items():
        for subject, roles in subjects.items():
            for role in roles:
                bound.setdefault(role, []).append(f"{subject}@{project}")
    for name, role in sorted(document["roles"].items()):
        table.add_row(
            cell(name),
            cell("\n".join(role.get("allow", []))),
            cell("\n".join(role.get("ask", []))),
            cell(", ".join(bound.get(name, []))),
        )
    stdout_console().print(table)
    return EXIT_OK
