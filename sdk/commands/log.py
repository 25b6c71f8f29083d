"""``stockade log verify FILE``: check an audit log's hash chain.

Verifies every record's hash and its link to the previous record, and names the first
edited, deleted, inserted, reordered or truncated record. Removing whole records from
the end leaves a valid shorter chain: pass ``--expected-head HASH`` (an ``audit_id`` you
were given earlier) to detect that too.

Exit codes: 0 intact, 1 broken (or unreadable), 2 usage error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from host.audit import verify
from sdk.commands._common import EXIT_FAILED, EXIT_OK, print_json


def _hash(text: str) -> str:
    if len(text) != 64 or any(ch not in "0123456789abcdef" for ch in text):
        raise argparse.ArgumentTypeError("expected a record hash: 64 lowercase hex characters")
    return text


def register(sub: Any) -> None:
    """Add the ``log`` subcommand."""
    parser = sub.add_parser("log", help="audit log tools", description="Audit log tools.")
    inner = parser.add_subparsers(dest="log_command", metavar="ACTION", required=True)
    check = inner.add_parser(
        "verify",
        help="verify the hash chain of an audit log",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument("file", type=Path, help="the audit log (JSON lines), e.g. ~/.stockade/audit.log")
    check.add_argument(
        "--expected-head",
        type=_hash,
        default=None,
        metavar="HASH",
        help="a record hash that must be in the log (detects truncation)",
    )
    check.add_argument("--json", action="store_true", help="print a JSON report")
    check.set_defaults(func=run_verify)


def run_verify(args: argparse.Namespace) -> int:
    """Verify the chain; 0 intact, 1 broken."""
    report = verify(args.file, expected_head=args.expected_head)
    if args.json:
        print_json(
            {
                "ok": report.ok,
                "file": str(args.file),
                "records": report.records,
                "first_broken": report.first_broken,
                "reason": report.reason,
                "head": report.head,
            }
        )
    elif report.ok:
        print(f"ok: {report.records} records, chain intact ({args.file})\n  head {report.head}")
    else:
        where = f"record {report.first_broken}" if report.first_broken else "the log"
        print(f"error: AUDIT_LOG_BROKEN: {where} of {args.file}: {report.reason}", file=sys.stderr)
        print(
            f"  what to do: trust only the first {report.records} records (head {report.head}); "
            "investigate who changed the file",
            file=sys.stderr,
        )
    return EXIT_OK if report.ok else EXIT_FAILED
