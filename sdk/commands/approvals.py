"""``stockade approvals list|approve|deny``: decide queued approvals out of band.

When an MCP client cannot ask a person (it did not declare elicitation), a call that
needs approval is refused with APPROVAL_REQUIRED and queued in the state dir
(``approvals.json``, ``stockade.approvals/1``). Review the preview here and decide by
action digest; the same call by the same principal then runs once (approved) or is
refused with APPROVAL_DENIED (denied). Entries expire (15 minutes by default).

  stockade approvals list
  stockade approvals approve 1f49c8f3…   # the full action digest

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
from sdk.commands._common import (
    EXIT_OK,
    add_state_dir,
    add_store_option,
    cell,
    open_store_spec,
    print_json,
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
    with open_store_spec(args.store) as store:
        yield store.pending


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
            cell(e.action_digest),
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
