"""``stockade diff OLD_LOCK NEW_LOCK``: what a lock change adds or widens.

Both locks are verified first (digests, signatures with ``--trusted-keys``, manifests);
no host state is touched. Every difference is listed; escalations are flagged: new
packages and tools, any effect change, higher risk, permissions added or removed,
widened schemas, new hosts, wildcards, plain http, other ports, shorter or new path
prefixes, new methods, new credentials or new places a secret is sent, raised limits,
dropped signatures. Reductions are shown but not flagged.

Exit codes: 0 nothing escalates, 1 a lock failed verification, 2 usage error,
3 at least one escalation (so CI can gate on it).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.table import Table

from sdk.commands._common import EXIT_ESCALATION, EXIT_OK, cell, print_json, stdout_console
from sdk.review import LockDiff, diff_locks


def register(sub: Any) -> None:
    """Add the ``diff`` subcommand."""
    parser = sub.add_parser(
        "diff",
        help="what a lock change adds or widens (exit 3 on escalation)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("old", type=Path, metavar="OLD_LOCK", help="the lock in force")
    parser.add_argument("new", type=Path, metavar="NEW_LOCK", help="the proposed lock")
    parser.add_argument(
        "--trusted-keys", type=Path, default=None, metavar="FILE", help="trusted keys (signed locks)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable diff (format stockade.diff/1)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Diff, print, and exit 3 when anything escalates."""
    diff = diff_locks(args.old, args.new, trusted_keys=args.trusted_keys)
    if args.json:
        print_json(diff.to_dict())
    else:
        render(diff)
    return EXIT_ESCALATION if diff.escalations else EXIT_OK


def render(diff: LockDiff) -> None:
    """Print a diff as a table."""
    console = stdout_console()
    old, new = diff.old, diff.new
    console.print(f"[bold]old[/] {cell(old.path)} generation {old.generation} ({old.digest[:16]}…)")
    console.print(f"[bold]new[/] {cell(new.path)} generation {new.generation} ({new.digest[:16]}…)")
    if not diff.chained:
        console.print("[yellow]note:[/] the new lock is not the direct successor of the old one")
    if not diff.changes:
        console.print("no changes")
        return
    table = Table(show_lines=False)
    for column in ("", "kind", "package", "tool", "change"):
        table.add_column(column, overflow="fold")
    for change in diff.changes:
        flag = "[bold red]ESCALATES[/]" if change.escalation else ""
        table.add_row(flag, change.kind, change.package, cell(change.tool or ""), cell(change.detail))
    console.print(table)
    count = len(diff.escalations)
    if count:
        console.print(f"[bold red]{count} escalation(s)[/]: review before trusting the new lock")
    else:
        console.print("[green]no escalation[/]")
