"""``stockade tokens add|list|revoke``: bearer tokens of ``stockade serve --transport http``.

A token maps to one principal (project, subject) with an optional expiry. The file
(``stockade.tokens/1``, default ``<state-dir>/tokens.json``) keeps only a salted hash of
each token: the token is printed once, by ``add``, and cannot be shown again.

  stockade tokens add --project p --subject alice --expires-in-days 30 --label laptop
  stockade serve --transport http        # reads <state-dir>/tokens.json (or --tokens-file FILE)
  # the client sends: Authorization: Bearer stk_…

Exit codes: 0 ok, 1 refused, 2 usage error.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from rich.table import Table

from host.mcp.tokens import TokenEntry, TokenFile
from sdk.commands._common import EXIT_OK, add_state_dir, cell, print_json, state_dir, stdout_console


def _file(args: argparse.Namespace) -> TokenFile:
    return TokenFile(args.file if args.file is not None else state_dir(args) / "tokens.json")


def _common(parser: argparse.ArgumentParser) -> None:
    add_state_dir(parser)
    parser.add_argument(
        "--tokens-file", "--file", dest="file", type=Path, default=None, metavar="FILE",
        help="tokens file (default: <state-dir>/tokens.json, which `stockade serve` reads)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")


def register(sub: Any) -> None:
    """Add the ``tokens`` subcommand and its verbs."""
    parser = sub.add_parser(
        "tokens",
        help="bearer tokens for the MCP HTTP server",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    add = verbs.add_parser("add", help="create a token for a principal (printed once)")
    add.add_argument("--project", required=True, help="the principal's project")
    add.add_argument("--subject", required=True, help="the principal's stable subject id")
    add.add_argument("--label", default="", help="a note for people (where the token is used)")
    add.add_argument(
        "--expires-in-days", type=float, default=90.0, help="lifetime in days (default: 90; 0: never)"
    )
    _common(add)
    add.set_defaults(func=_add)
    listing = verbs.add_parser("list", help="list tokens (ids, principals, expiry; never the tokens)")
    _common(listing)
    listing.set_defaults(func=_list)
    revoke = verbs.add_parser("revoke", help="revoke a token by id (takes effect on the next request)")
    revoke.add_argument("id", help="the token id (from `stockade tokens list`)")
    _common(revoke)
    revoke.set_defaults(func=_revoke)


def _entry(entry: TokenEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "project": entry.project,
        "subject": entry.subject,
        "label": entry.label,
        "created_at": entry.created_at,
        "expires_at": entry.expires_at,
    }


def _add(args: argparse.Namespace) -> int:
    days = args.expires_in_days
    ttl = None if days == 0 else days * 86400
    token, entry = _file(args).add(project=args.project, subject=args.subject, ttl_s=ttl, label=args.label)
    if args.json:
        print_json(_entry(entry) | {"token": token})
    else:
        print(token)
        print(f"token {entry.id} for {entry.subject} in {entry.project}; shown only now", file=sys.stderr)
    return EXIT_OK


def _list(args: argparse.Namespace) -> int:
    entries = _file(args).entries()
    if args.json:
        print_json([_entry(e) for e in entries])
        return EXIT_OK
    table = Table("id", "project", "subject", "label", "expires")
    now = time.time()
    for e in entries:
        expiry = (
            "never" if e.expires_at is None else time.strftime("%Y-%m-%d %H:%M", time.gmtime(e.expires_at))
        )
        if e.expires_at is not None and e.expires_at <= now:
            expiry += " (expired)"
        table.add_row(cell(e.id), cell(e.project), cell(e.subject), cell(e.label), expiry)
    stdout_console().print(table)
    return EXIT_OK


def _revoke(args: argparse.Namespace) -> int:
    entry = _file(args).revoke(args.id)
    if args.json:
        print_json(_entry(entry))
    else:
        print(f"revoked token {entry.id} of {entry.subject} in {entry.project}")
    return EXIT_OK
