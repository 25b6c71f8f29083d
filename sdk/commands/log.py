"""``stockade log verify FILE``: check an audit log's hash chain."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from host.audit import verify


def register(sub: Any) -> None:
    """Add the ``log`` subcommand."""
    parser = sub.add_parser("log", help="audit log tools", description="Audit log tools.")
    inner = parser.add_subparsers(dest="log_command", metavar="ACTION", required=True)
    check = inner.add_parser(
        "verify",
        help="verify the hash chain of an audit log",
        description=(
            "Verify every record's hash and its link to the previous record. Names the first "
            "edited, deleted, reordered or truncated record. Exit 0 if intact, 1 if broken."
        ),
    )
    check.add_argument("file", type=Path, help="the audit log (JSON lines)")
    check.add_argument("--json", action="store_true", help="print a JSON report")
    check.set_defaults(func=run_verify)


def run_verify(args: argparse.Namespace) -> int:
    """Verify the chain; 0 intact, 1 broken."""
    report = verify(args.file)
    if args.json:
        print(json.dumps({"ok": report.ok, "records": report.records,
                          "first_broken": report.first_broken, "reason": report.reason}))
    elif report.ok:
        print(f"ok: {report.records} records, chain intact ({args.file})")
    else:
        print(f"BROKEN at record {report.first_broken}: {report.reason} ({args.file})")
    return 0 if report.ok else 1
