"""``stockade log verify FILE``: check an audit log's hash chain and signed checkpoints.

Verifies every record's hash and its link to the previous record, and names the first
edited, deleted, inserted, reordered or truncated record (a torn last line included).

Signed checkpoints (written by the host every N records, every T seconds and on close)
are checked with the audit public key: ``--key FILE`` (repeatable; pin a copy kept away
from the host), otherwise ``audit-key.pub`` next to the log, otherwise in ``--state-dir``
(default ``$STOCKADE_HOME`` or ``~/.stockade``). With a key, an edit followed by
re-hashing every later record is detected up to the last checkpoint, and the report
says how many records follow it unsigned (records cut off or rewritten there cannot be
told apart from a crash) and whether the log was closed cleanly. Without a key only the
unkeyed chain is checked. Removing whole records from the end, back to an earlier
checkpoint, leaves a valid shorter log: pass ``--expected-head HASH`` (an ``audit_id``
you were given earlier) to detect that too.

With ``--store postgresql://…`` (or ``STOCKADE_STORE``) instead of FILE, the chain is
verified in place in the PostgreSQL state store (every chain it holds, each reported;
``--chain`` narrows to one, e.g. ``project:p``), and each head row is checked too: records deleted from the
end of the table are detected unless the head row was rewound with them. Every report
names the newest checkpoint it saw (its record hash, how many records it signs, key and
time): keep that hash outside the database and pass it back as ``--expected-head`` to
detect records cut from the end with a rewound head row. ``stockade log export --store …
> audit.jsonl`` writes a chain as an audit log file that ``stockade log verify
audit.jsonl`` checks.

Exit codes: 0 intact, 1 broken, unreadable, or (with ``--strict``) not every record
signed; 2 usage error.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from host.errors import AuditUnavailable
from host.files import open_regular
from sdk.commands._common import (
    EXIT_FAILED,
    EXIT_OK,
    CommandFailed,
    UsageFailed,
    add_state_dir,
    add_store_option,
    open_store_spec,
    print_json,
    state_dir,
)

if TYPE_CHECKING:  # host.audit.log imports cryptography and pydantic: only `log verify` needs them
    from host.audit.log import VerifyReport

PUBLIC_KEY_FILE: Final = "audit-key.pub"  # host.audit.key.PUBLIC_KEY_FILE (a test pins them equal)

_OVERVIEW = """The audit log: `log show` prints it for people (one line per record, newest last:
time, principal, tool, effect, outcome, code, duration, HTTP hosts; --follow, --since,
--tool, --principal, --last, --json; --all adds the signed checkpoints); `log verify
FILE` checks its hash chain and signed checkpoints. See `stockade log ACTION --help`."""


def _hash(text: str) -> str:
    if len(text) != 64 or any(ch not in "0123456789abcdef" for ch in text):
        raise argparse.ArgumentTypeError("expected a record hash: 64 lowercase hex characters")
    return text


def register(sub: Any) -> None:
    """Add the ``log`` subcommand."""
    parser = sub.add_parser(
        "log",
        help="the audit log: show, verify",
        description=_OVERVIEW,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    inner = parser.add_subparsers(dest="log_command", metavar="ACTION", required=True)
    from sdk.commands._logshow import register_show

    register_show(inner)
    check = inner.add_parser(
        "verify",
        help="verify the hash chain and signed checkpoints of an audit log",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument(
        "file", type=Path, nargs="?", default=None,
        help="the audit log (JSON lines), e.g. ~/.stockade/audit.log (or use --store)",
    )
    add_store_option(check, local=False)
    check.add_argument("--chain", default=None, metavar="NAME", help="the store's chain (e.g. project:p)")
    check.add_argument(
        "--expected-head",
        type=_hash,
        default=None,
        metavar="HASH",
        help="a record hash that must be in the log (detects truncation)",
    )
    check.add_argument(
        "--key",
        type=Path,
        action="append",
        default=None,
        metavar="FILE",
        help=f"an audit public key ({PUBLIC_KEY_FILE}) to check checkpoints with (repeatable: "
        "a shared store's chains carry checkpoints signed by each host machine's key)",
    )
    add_state_dir(check)
    check.add_argument(
        "--strict",
        action="store_true",
        help="also fail unless a key was found and the log ends with a verified checkpoint",
    )
    check.add_argument("--json", action="store_true", help="print a JSON report")
    check.set_defaults(func=run_verify)
    export = inner.add_parser(
        "export",
        help="write an audit chain of a PostgreSQL state store as an audit log file",
        description=(
            "Write one audit chain of the state store as JSON lines (stdout or --output), "
            "exactly the format `stockade log verify FILE` checks."
        ),
    )
    add_store_option(export, local=False)
    export.add_argument("--chain", default=None, metavar="NAME", help="the chain (e.g. project:p)")
    export.add_argument("--output", "-o", type=Path, default=None, metavar="FILE", help="default: stdout")
    export.set_defaults(func=run_export)


def _store(args: argparse.Namespace) -> Any:
    if args.store in (None, "local"):
        raise UsageFailed("STORE_REQUIRED", "name the store: --store postgresql://… (or set STOCKADE_STORE)")
    return open_store_spec(args.store)


def run_export(args: argparse.Namespace) -> int:
    """Export one chain; 0 written, 1 store failure."""
    from host.store.chain import export_chain, pick_chain

    with _store(args) as store:
        chain = pick_chain(store, args.chain)
        if args.output is None:
            count = export_chain(store, chain, sys.stdout.buffer)
            sys.stdout.flush()
        else:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
            with os.fdopen(os.open(args.output, flags, 0o600), "wb") as out:  # 0600 whatever the umask
                count = export_chain(store, chain, out)
    print(f"exported {count} records of chain {chain!r}", file=sys.stderr)
    return EXIT_OK


def _key_files(args: argparse.Namespace) -> list[Path]:
    if args.key:
        return list(args.key)
    near = [args.file.parent / PUBLIC_KEY_FILE] if args.file is not None else []
    for candidate in (*near, state_dir(args) / PUBLIC_KEY_FILE):
        if candidate.is_file():
            return [candidate]
    return []


def _signing_summary(report: VerifyReport, files: list[Path]) -> str:
    if not report.keys_checked:
        return (
            f"unsigned check: no audit public key found (pass --key FILE); {report.checkpoints} checkpoints "
            "checked for shape only, so an edit followed by re-hashing is NOT detected"
        )
    shown = ", ".join(str(f) for f in files)
    if report.last_checkpoint is None:
        return f"signed check ({shown}): no checkpoint in the log: no record is covered by a signature"
    text = (
        f"signed check ({shown}): {report.checkpoints} checkpoints verified; the last at record "
        f"{report.last_checkpoint}"
    )
    if report.closed:
        return text + "; the log ends with a close checkpoint (closed cleanly)"
    return text + (
        f"; {report.unsigned_tail} records after it are covered by no signature and the log was not "
        "closed cleanly: records after the checkpoint may have been cut off or edited and re-hashed "
        "undetectably (a crash or a running host also leaves such a tail)"
    )


def _anchor_line(report: VerifyReport) -> str:
    anchor = report.anchor
    if anchor is None:
        return (
            "newest checkpoint: none; records removed from the end (and a rewritten head) "
            "cannot be told apart from a shorter log"
        )
    when = datetime.datetime.fromtimestamp(anchor.time / 1000, datetime.timezone.utc)  # record times are ms
    stamp = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return (
        f"newest checkpoint: record {anchor.seq} ({anchor.hash}), signing {anchor.count} records, "
        f"key {anchor.key_id}, {stamp}. Keep this hash away from the log's storage and pass it "
        "as --expected-head next time: records removed after it are then detected even with "
        "the head rewritten"
    )


def run_verify(args: argparse.Namespace) -> int:
    """Verify the chain and checkpoints; 0 intact, 1 broken."""
    if args.file is not None and not os.path.lexists(args.file):
        raise CommandFailed(
            "AUDIT_LOG_NOT_FOUND",
            f"{args.file} not found",
            hint="check the path: the host writes the audit log the host config names, "
            "by default <state-dir>/audit.log (`stockade log show` finds it)",
        )
    # A FIFO, device or directory is refused before anything reads it (a FIFO
    # used to block for ever), with the same non-blocking check as every other read.
    try:
        if args.file is not None:
            with open_regular(args.file, None, what="audit log", error=AuditUnavailable):
                pass
    except AuditUnavailable as exc:
        raise CommandFailed(
            "AUDIT_LOG_BROKEN", exc.message, hint="pass the audit log itself (a regular file)"
        ) from None
    files = _key_files(args)
    from host.audit.key import load_public_keys
    from host.audit.log import verify

    keys = load_public_keys(files) if files else None
    if args.file is not None:
        report = verify(args.file, expected_head=args.expected_head, keys=keys)
        return _show_verified(args, report, str(args.file), files)
    from host.store.chain import pick_chain, verify_chain

    with _store(args) as store:
        names = [pick_chain(store, args.chain)] if args.chain is not None else _chain_names(store)
        if len(names) > 1 and args.expected_head is not None:
            raise UsageFailed("USAGE", "--expected-head belongs to one chain", hint="name it with --chain")
        reports = [
            (name, verify_chain(store, name, expected_head=args.expected_head, keys=keys)) for name in names
        ]
    named = [(f"chain {name!r} of {store!r}", report) for name, report in reports]
    if len(named) == 1:
        return _show_verified(args, named[0][1], named[0][0], files)
    if args.json:  # one object per chain, each shaped like the single-chain answer
        results = [_verified_dict(args, report, where, files) for where, report in named]
        print_json({"ok": all(r["ok"] for r in results), "chains": results})
        return EXIT_OK if all(r["ok"] for r in results) else EXIT_FAILED
    print(f"{len(named)} audit chains in {store!r} (--chain NAME verifies one):")
    verdicts = [_show_verified(args, report, where, files) for where, report in named]
    return EXIT_FAILED if any(verdicts) else EXIT_OK


def _chain_names(store: Any) -> list[str]:
    """Every chain of the store (``pick_chain`` refuses a store that holds none)."""
    from host.store.chain import pick_chain

    names = [name for name, _, _ in store.chains()]
    return names if names else [pick_chain(store, None)]


def _strict_ok(args: argparse.Namespace, report: VerifyReport) -> bool:
    ok = bool(report.ok)
    if args.strict and ok and not (report.keys_checked and report.records and report.unsigned_tail == 0):
        ok = False
    return ok


def _verified_dict(
    args: argparse.Namespace, report: VerifyReport, where: str, files: list[Path]
) -> dict[str, Any]:
    return {
        "ok": _strict_ok(args, report),
        "file": where,
        "records": report.records,
        "first_broken": report.first_broken,
        "reason": report.reason,
        "head": report.head,
        "keys_checked": report.keys_checked,
        "key_files": [str(f) for f in files],
        "checkpoints": report.checkpoints,
        "last_checkpoint": report.last_checkpoint,
        "unsigned_tail": report.unsigned_tail,
        "closed": report.closed,
        "newest_checkpoint": None if report.anchor is None else dataclasses.asdict(report.anchor),
    }


def _show_verified(args: argparse.Namespace, report: VerifyReport, where: str, files: list[Path]) -> int:
    """Print one verification (or its JSON); the exit status it alone would give."""
    ok = _strict_ok(args, report)
    if args.json:
        print_json(_verified_dict(args, report, where, files))
    elif report.ok:
        print(f"ok: {report.records} records, chain intact ({where})\n  head {report.head}")
        print(f"  {_signing_summary(report, files)}")
        print(f"  {_anchor_line(report)}")
        if not ok:
            why = "--strict needs a key and every record covered by a checkpoint"
            print(f"error: AUDIT_LOG_UNSIGNED: {why}", file=sys.stderr)
    else:
        at = f"record {report.first_broken}" if report.first_broken else "the log"
        print(f"error: AUDIT_LOG_BROKEN: {at} of {where}: {report.reason}", file=sys.stderr)
        print(
            f"  what to do: trust only the first {report.records} records (head {report.head}); "
            "investigate who changed the file",
            file=sys.stderr,
        )
    return EXIT_OK if ok else EXIT_FAILED
