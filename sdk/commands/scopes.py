"""``stockade scopes grant|list|show|revoke``: exact tool calls granted ahead of time to an unattended job.

A scope (``stockade.scope/1``) lets one job — a scheduled run, a CI bot — make calls that
would otherwise ask a person, within bounds a person signs off now: exact tools and
versions of the lock, a call count per tool and in all, and a hard end (at most 24 h).
It is signed with the approver key (``approver_key`` in stockade.host.toml), so whoever
writes the state store cannot mint or widen one; every host verifies it on every call.

  stockade scopes grant p ci-bot --tool tracker.create-issue@1.2.0 --max-calls 5 --for 2h --job nightly
  stockade scopes list
  stockade scopes show scope_1f49…
  stockade scopes revoke scope_1f49…     # effective on the next call, fleet-wide

The job then runs ``stockade serve --scope scope_1f49…``: calls the scope covers run
without asking; any other call that would ask a person is refused at once
(APPROVAL_REQUIRED with ``reason``), never queued. A scope never loosens a deny, a
disabled tool, the managed cap, a ``critical`` tool or an ``ask_always`` selector.

Exit codes: 0 ok, 1 refused (SCOPE_INVALID, APPROVER_KEY_MISSING, …), 2 usage error.
"""

from __future__ import annotations

import argparse
import getpass
import re
import time
from typing import Any

from rich.table import Table

from sdk.commands._common import (
    EXIT_OK,
    UsageFailed,
    add_host_options,
    cell,
    host_config,
    print_json,
    safe_text,
    signatures_waived,
    state_dir,
    stdout_console,
    verified_lock,
)
from sdk.commands._scopebook import approver_keys as _approver_keys
from sdk.commands._scopebook import scopes as _scopes

_DURATION = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([smhd]?)$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def register(sub: Any) -> None:
    """Add the ``scopes`` subcommand and its verbs."""
    parser = sub.add_parser(
        "scopes",
        help="grant, list, show and revoke scopes: exact calls an unattended job may make",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    grant = verbs.add_parser("grant", help="grant a job exact tool calls, counted, until an end")
    grant.add_argument("project", help="the principal's project")
    grant.add_argument("subject", help="the principal's subject (the job's identity)")
    grant.add_argument(
        "--tool",
        action="append",
        required=True,
        metavar="NAME@VERSION",
        help="an exact tool of the lock (repeat for more)",
    )
    grant.add_argument(
        "--max-calls",
        action="append",
        required=True,
        type=int,
        metavar="N",
        help="calls of each --tool (one value for all, or one per --tool, in order)",
    )
    grant.add_argument(
        "--max-calls-total",
        type=int,
        default=None,
        metavar="N",
        help="calls over all the tools (default: the sum)",
    )
    grant.add_argument(
        "--for",
        dest="for_",
        required=True,
        metavar="DURATION",
        help="how long it lasts: 90s, 30m, 2h (at most 24h)",
    )
    grant.add_argument("--job", required=True, help="the job it is for (shown in every record)")
    grant.add_argument("--session", default=None, help="only this session may redeem it")
    grant.add_argument(
        "--input",
        action="append",
        default=None,
        metavar="SHA256",
        help="only calls with this input digest (repeat; needs exactly one --tool)",
    )
    grant.add_argument("--json", action="store_true", help="print JSON")
    add_host_options(grant)
    grant.set_defaults(func=_grant)
    listing = verbs.add_parser("list", help="every scope with what is used and left")
    listing.add_argument("--json", action="store_true", help="print JSON")
    add_host_options(listing)
    listing.set_defaults(func=_list)
    show = verbs.add_parser("show", help="one scope: bounds, counts, status")
    show.add_argument("id", help="the scope id (scope_…)")
    show.add_argument("--json", action="store_true", help="print JSON")
    add_host_options(show)
    show.set_defaults(func=_show)
    revoke = verbs.add_parser("revoke", help="revoke a scope (effective on the next call, fleet-wide)")
    revoke.add_argument("id", help="the scope id (scope_…)")
    revoke.add_argument("--json", action="store_true", help="print JSON")
    add_host_options(revoke)
    revoke.set_defaults(func=_revoke)


def parse_duration(text: str) -> float:
    """``90s``, ``30m``, ``2h``, ``1d`` or plain seconds, as seconds.

    Raises:
        UsageFailed: anything else.
    """
    match = _DURATION.match(text.strip())
    if match is None:
        raise UsageFailed("DURATION_INVALID", f"--for {text!r}: give a duration such as 90s, 30m or 2h")
    return float(match.group(1)) * _UNITS[match.group(2)]


def _grant(args: argparse.Namespace) -> int:
    from host.scopes import issue

    tools = [_split(t) for t in args.tool]
    counts = list(args.max_calls)
    if len(counts) == 1:
        counts *= len(tools)
    if len(counts) != len(tools):
        raise UsageFailed("MAX_CALLS_MISMATCH", "give one --max-calls for all tools, or one per --tool")
    if args.input and len(tools) != 1:
        raise UsageFailed("INPUT_NEEDS_ONE_TOOL", "--input digests belong to exactly one --tool")
    key = _approver_keys(args)["approver"]
    loaded = verified_lock(
        args.lock,
        trusted_keys=args.trusted_keys,
        require_signatures=bool(args.require_signatures),
        unsafe_allow_unsigned=signatures_waived(args),
    )
    registry, bindings = _tools_as_the_host_runs_them(args, loaded)
    with _scopes(args) as port:
        signed = issue(
            registry=registry,
            bindings=bindings,
            generation=loaded.generation,
            key=key,
            store=port,
            project=args.project,
            subject=args.subject,
            tools=[
                (name, version, count, args.input)
                for (name, version), count in zip(tools, counts, strict=True)
            ],
            job=args.job,
            issued_by=f"cli:{getpass.getuser()}",
            for_s=parse_duration(args.for_),
            session=args.session,
            max_calls_total=args.max_calls_total,
        )
    scope = signed.scope
    if args.json:
        print_json(signed.model_dump(mode="json"))
    else:
        print(
            f"granted {scope.id} to {safe_text(scope.principal.subject)} "
            f"in {safe_text(scope.principal.project)} for job {safe_text(scope.job)} "
            f"until {_when(scope.not_after)}"
        )
        print(f"  run the job with: stockade serve --scope {scope.id}")
    return EXIT_OK


def _tools_as_the_host_runs_them(
    args: argparse.Namespace, loaded: Any
) -> tuple[Any, dict[tuple[str, str], str]]:
    """The registry a Host opened on this lock and config file runs — package tools, the
    pinned MCP sources' tools, the ``[[workspace]]`` host tools (``fs.*``) — and their
    binding digests, built as the Host builds them (so a scope's identities match)."""
    from pathlib import Path

    from host.call.open import tool_bindings
    from host.mcpsource import hosting
    from host.tools import host_tools_for
    from host.trust.registry import FrozenRegistry
    from sdk.commands.policy import _pinned_sources

    pinned = _pinned_sources(args, loaded)
    host_tools = host_tools_for(host_config(args, state_dir(args)), protected=[Path(args.lock)])
    try:
        registry = FrozenRegistry.from_packages(
            [
                *((p.manifest, p.binding) for p in loaded.packages),
                *hosting.registry_items(pinned, loaded.generation),
                *(host_tools.registry_items(loaded.generation) if host_tools is not None else ()),
            ]
        )
    finally:
        if host_tools is not None:
            host_tools.close()
    return registry, tool_bindings(loaded, pinned, registry)


def _split(text: str) -> tuple[str, str]:
    name, sep, version = text.rpartition("@")
    if not sep or not name or not version:
        raise UsageFailed("TOOL_INVALID", f"--tool {text!r}: give NAME@VERSION (an exact tool of the lock)")
    return name, version


def _when(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(stamp))


def _list(args: argparse.Namespace) -> int:
    with _scopes(args, write=False) as port:
        states = port.entries()
    now = time.time()
    if args.json:
        print_json([s.to_dict(now) for s in states])
        return EXIT_OK
    table = Table("id", "principal", "job", "tools (used/max)", "total", "ends", "status")
    for s in states:
        scope = s.signed.scope
        tools = ", ".join(f"{t.key} {s.used.get(t.key, 0)}/{t.max_calls}" for t in scope.tools)
        table.add_row(
            cell(scope.id),
            cell(f"{scope.principal.subject} in {scope.principal.project}"),
            cell(scope.job),
            cell(tools),
            f"{s.used_total}/{scope.max_calls_total}",
            _when(scope.not_after),
            s.status(now),
        )
    stdout_console().print(table)
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    with _scopes(args, write=False) as port:
        state = port.get(args.id)
    _print_state(args, state)
    return EXIT_OK


def _revoke(args: argparse.Namespace) -> int:
    with _scopes(args) as port:
        state = port.revoke(args.id, by=f"cli:{getpass.getuser()}")
    _print_state(args, state)
    return EXIT_OK


def _print_state(args: argparse.Namespace, state: Any) -> None:
    now = time.time()
    if args.json:
        print_json(state.to_dict(now))
        return
    scope = state.signed.scope
    print(f"{scope.id}: {state.status(now)}")
    print(
        f"  principal {safe_text(scope.principal.subject)} in {safe_text(scope.principal.project)}"
        + (f", session {safe_text(scope.session)}" if scope.session else "")
    )
    print(
        f"  job {safe_text(scope.job)}, issued by {safe_text(scope.issued_by)} at {_when(scope.issued_at)} "
        f"(lock generation {scope.lock_generation}), signed by {state.signed.key_id}"
    )
    print(f"  ends {_when(scope.not_after)}; calls {state.used_total}/{scope.max_calls_total} in all")
    for t in scope.tools:
        inputs = "" if t.inputs is None else f", only {len(t.inputs)} input digest(s)"
        print(
            f"  {safe_text(t.key)}: {state.used.get(t.key, 0)}/{t.max_calls} used, "
            f"{state.remaining(t.tool, t.version)} left{inputs}"
        )
    if state.revoked_at is not None:
        print(f"  revoked at {_when(state.revoked_at)} by {safe_text(state.revoked_by or '?')}")
