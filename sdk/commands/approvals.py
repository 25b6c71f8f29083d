"""``stockade approvals list|show|approve|deny``: decide queued approvals out of band.

When an MCP client cannot ask a person (it did not declare elicitation), a call that
needs approval is refused with APPROVAL_REQUIRED and queued in the state dir
(``approvals.json``, ``stockade.approvals/1``). Review the preview here and decide by
action digest; the same call by the same principal then runs once (approved) or is
refused with APPROVAL_DENIED (denied). Entries expire (15 minutes by default).

  stockade approvals list
  stockade approvals show 1f49c8f3…      # everything about one, with the whole input
  stockade approvals approve 1f49c8f3…   # the full action digest

Everything shown is escaped: control, zero-width and bidi characters (U+202E …) appear
as ``\\uXXXX``, so what you read is what runs.

Exit codes: 0 ok, 1 refused (no such pending approval), 2 usage error.
"""

from __future__ import annotations

import argparse
import getpass
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.table import Table

from host.approvals import ApprovalQueue, PendingApproval, asdict_entry
from host.errors import ApprovalInvalid
from sdk.commands._common import (
    EXIT_OK,
    add_state_dir,
    add_store_option,
    approver_options,
    cell,
    open_store_spec,
    print_json,
    safe_text,
    state_dir,
    stdout_console,
)


def register(sub: Any) -> None:
    """Add the ``approvals`` subcommand and its verbs."""
    parser = sub.add_parser(
        "approvals",
        help="list, approve or deny queued approvals (MCP clients without elicitation)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    listing = verbs.add_parser("list", help="pending and decided approvals with their previews")
    add_state_dir(listing)
    add_store_option(listing)
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(func=_list)
    show = verbs.add_parser("show", help="one queued action with its whole canonical input")
    show.add_argument("digest", help="the full action digest (64 hex digits)")
    show.add_argument("--project", default=None, help="the principal's project, if ambiguous")
    show.add_argument("--subject", default=None, help="the principal's subject, if ambiguous")
    add_state_dir(show)
    add_store_option(show)
    show.add_argument("--json", action="store_true", help="print JSON (input unescaped, as JSON strings)")
    show.set_defaults(func=_show)
    for verb, approve in (("approve", True), ("deny", False)):
        decide = verbs.add_parser(verb, help=f"{verb} one queued action by its digest")
        decide.add_argument("digest", help="the full action digest (64 hex digits)")
        decide.add_argument("--project", default=None, help="the principal's project, if ambiguous")
        decide.add_argument("--subject", default=None, help="the principal's subject, if ambiguous")
        add_state_dir(decide)
        add_store_option(decide)
        decide.add_argument("--json", action="store_true", help="print JSON")
        decide.set_defaults(func=_decide, approve=approve)


@contextmanager
def _queue(args: argparse.Namespace) -> Iterator[Any]:
    """The state dir's queue, or the shared one of a PostgreSQL store (``--store``)."""
    if args.store in (None, "local"):
        yield ApprovalQueue(state_dir(args))
        return
    settings = getattr(args, "host_file", None)
    keys = approver_options(
        settings.approver_key if settings is not None else None,
        settings.trusted_approver_keys if settings is not None else None,
    )
    with open_store_spec(args.store, **keys) as store:
        yield store.pending


_SHORT = 12  # digest characters in the table; the full digest follows on its own line


def _list(args: argparse.Namespace) -> int:
    with _queue(args) as queue:
        entries = queue.entries()
    if args.json:
        print_json([asdict_entry(e) for e in entries])
        return EXIT_OK
    table = Table(
        "digest", "principal", "tool", "effect/risk", "hosts", "secrets", "input", "status", "expires"
    )
    for e in entries:
        table.add_row(
            cell(e.action_digest[:_SHORT] + "…"),
            cell(f"{e.subject} in {e.project}"),
            cell(f"{e.tool}@{e.version} (gen {e.generation})"),
            cell(f"{e.effect}/{e.risk}"),
            cell(", ".join(e.hosts) or "(no network)"),
            cell(", ".join(e.secrets) or "-"),
            cell(e.summary),
            cell(e.status),
            time.strftime("%H:%M:%S", time.gmtime(e.expires_at)),
        )
    stdout_console().print(table)
    for e in entries:  # whole, one per line, never cut by the table's width: the commands take it
        digest = safe_text(e.action_digest)
        print(f"{digest[:_SHORT]}…  stockade approvals approve {digest}")
    return EXIT_OK


def _decide(args: argparse.Namespace) -> int:
    with _queue(args) as queue:
        entry: PendingApproval = queue.decide(
            args.digest,
            approve=args.approve,
            by=f"cli:{getpass.getuser()}",
            project=args.project,
            subject=args.subject,
        )
    if args.json:
        print_json(asdict_entry(entry))
    else:
        print(f"{entry.status} {entry.tool}@{entry.version} for {entry.subject} in {entry.project}")
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    with _queue(args) as queue:
        matches = [
            e
            for e in queue.entries()
            if e.action_digest == args.digest
            and (args.project is None or e.project == args.project)
            and (args.subject is None or e.subject == args.subject)
        ]
        if len(matches) != 1:
            raise ApprovalInvalid(
                f"no queued approval with digest {args.digest[:64]!r}"
                + ("" if not matches else " for exactly one principal; name --project and --subject"),
                hint="List them with `stockade approvals list`; they expire.",
            )
        entry = matches[0]
        kept = getattr(queue, "full_input", None)  # the file queue keeps it; PostgreSQL does not
        whole = kept(entry) if kept is not None else None
    if args.json:
        print_json(asdict_entry(entry) | {"input": whole})
        return EXIT_OK
    rows = [
        ("action digest", entry.action_digest),
        ("principal", f"{entry.subject} in {entry.project}"),
        ("tool", f"{entry.tool}@{entry.version} (lock generation {entry.generation})"),
        ("effect/risk", f"{entry.effect}/{entry.risk}"),
        ("hosts", ", ".join(entry.hosts) or "(no network)"),
        ("secrets", ", ".join(entry.secrets) or "-"),
        ("status", entry.status),
        ("expires", time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(entry.expires_at))),
    ]
    for name, value in rows:
        print(f"{name}: {safe_text(value)}")
    if whole is None:
        print(f"input (summary; the whole input is not kept by this store): {safe_text(entry.summary)}")
    else:
        print(f"input ({len(whole)} characters, sensitive parameters redacted):")
        print(safe_text(whole))
    return EXIT_OK
