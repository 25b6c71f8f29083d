"""``stockade log show``: a human view of the audit log.

Reads the JSON lines the host appends (``host.audit.log``) without verifying the chain
(``stockade log verify`` does that) and without importing anything heavy: it must start
fast. A line that is not a JSON object is reported on stderr and makes the exit status 1.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Final

from sdk.commands._common import EXIT_FAILED, EXIT_OK, CommandFailed, add_state_dir, audit_path, safe_text

_AGO: Final = re.compile(r"^(\d+)([smhd])$")
_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}
FOLLOW_POLL_S: Final = 0.25  # seconds between checks for new records with --follow


def register_show(inner: Any) -> None:
    """Add ``log show`` to the ``log`` subparsers."""
    show = inner.add_parser(
        "show",
        help="print the audit log, one line per record, newest last",
        description="Print the audit log for people: time (UTC), principal, tool, effect, outcome, "
        "code, duration, HTTP hosts; newest last.",
    )
    show.add_argument("file", nargs="?", type=Path, help="the audit log (default: the host's)")
    add_state_dir(show)
    show.add_argument(
        "--since", type=_since, default=None, metavar="WHEN", help="ISO time, or 30s/10m/2h/1d ago"
    )
    show.add_argument("--tool", default=None, metavar="NAME[@VERSION]", help="only this tool")
    show.add_argument("--principal", default=None, metavar="[PROJECT/]SUBJECT", help="only this principal")
    show.add_argument("--last", type=int, default=None, metavar="N", help="only the last N matching records")
    show.add_argument("--follow", "-f", action="store_true", help="keep printing new records (Ctrl-C stops)")
    show.add_argument(
        "--all", action="store_true", help="also the log's own signed checkpoints (hidden by default)"
    )
    show.add_argument("--json", action="store_true", help="the records as JSON lines")
    show.set_defaults(func=run_show)


def _since(text: str) -> float:
    """A time as Unix milliseconds: ``30s``/``10m``/``2h``/``1d`` ago, or an ISO 8601 time."""
    match = _AGO.match(text)
    if match:
        return (time.time() - int(match.group(1)) * _UNITS[match.group(2)]) * 1000
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an ISO time or 30s/10m/2h/1d, got {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp() * 1000


_CHECKPOINT: Final = "audit.checkpoint"  # host.audit.log.CHECKPOINT_KIND (not imported: start-up time)
_ACCEPTED: Final = "lock.accepted"


def _matches(record: dict[str, Any], args: argparse.Namespace) -> bool:
    if record.get("kind") == _CHECKPOINT and not args.all:
        return False
    if args.since is not None and not (isinstance(record.get("time"), int) and record["time"] >= args.since):
        return False
    if args.tool is not None:
        name, _, version = args.tool.partition("@")
        if record.get("tool") != name or (version and record.get("version") != version):
            return False
    if args.principal is not None:
        project, _, subject = args.principal.rpartition("/")
        if record.get("subject") != subject or (project and record.get("project") != project):
            return False
    return True


def _outcome(record: dict[str, Any]) -> tuple[str, str]:
    kind = str(record.get("kind", "?"))
    if kind == "call.intent":
        return "intent", "-"
    if kind != "call.outcome":
        return kind, "-"
    if record.get("ok") is True:
        return "ok", "-"
    error = record.get("error")
    code = error.get("code", "?") if isinstance(error, dict) else "?"
    return "refused", str(code)


def line_for(record: dict[str, Any], repeats: int = 1) -> str:
    """One record as one line of text (control characters shown escaped); ``repeats``: how
    many identical ``lock.accepted`` records it stands for."""
    stamp = record.get("time")
    when = (
        datetime.fromtimestamp(stamp / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        if isinstance(stamp, int)
        else "?"
    )
    who = f"{record['project']}/{record['subject']}" if "project" in record and "subject" in record else "-"
    tool = f"{record['tool']}@{record.get('version', '?')}" if "tool" in record else _drifted(record)
    outcome, code = _outcome(record)
    usage = record.get("usage")
    micros = usage.get("duration_us") if isinstance(usage, dict) else None
    duration = f"{micros / 1000:.1f}ms" if isinstance(micros, int) else "-"
    http = record.get("http")
    hosts = (
        sorted({str(r.get("host")) for r in http if isinstance(r, dict)}) if isinstance(http, list) else []
    )
    fields = (
        when,
        who,
        tool,
        str(record.get("effect", "-")),
        outcome,
        code,
        duration,
        ",".join(hosts) or "-",
        *_change(record),
        *_accepted(record, repeats),
    )
    return safe_text("  ".join(fields))


def _drifted(record: dict[str, Any]) -> str:
    """An ``mcp.drift`` record's tools, ``SOURCE: tool (change), …``; ``-`` for other kinds."""
    drift = record.get("drift")
    if record.get("kind") != "mcp.drift" or not isinstance(drift, list):
        return "-"
    tools = [f"{d.get('tool', '?')} ({d.get('change', '?')})" for d in drift if isinstance(d, dict)]
    return f"{record.get('source', '?')}: {', '.join(tools) or '-'}"


def _accepted(record: dict[str, Any], repeats: int) -> tuple[str, ...]:
    """A ``lock.accepted`` record's generation, and how many times it was recorded."""
    if record.get("kind") != _ACCEPTED:
        return ()
    times = f" (recorded {repeats} times: once per host opened on it)" if repeats > 1 else ""
    return (f"generation {record.get('generation', '?')}{times}",)


def fold_accepted(records: list[dict[str, Any]]) -> list[tuple[dict[str, Any], int]]:
    """Each record with how many times it repeats; a ``lock.accepted`` of a generation
    (and digest) seen before is folded into the first one: every CLI invocation that opens
    the host records one, and the log doubled for people."""
    shown: list[tuple[dict[str, Any], int]] = []
    first: dict[tuple[str, str], int] = {}
    for record in records:
        key = _accepted_key(record)
        if key is not None and key in first:
            at = first[key]
            shown[at] = (shown[at][0], shown[at][1] + 1)
            continue
        if key is not None:
            first[key] = len(shown)
        shown.append((record, 1))
    return shown


def _accepted_key(record: dict[str, Any]) -> tuple[str, str] | None:
    if record.get("kind") != _ACCEPTED:
        return None
    return str(record.get("generation")), str(record.get("digest"))


def _change(record: dict[str, Any]) -> tuple[str, ...]:
    """A host tool's file change: its path and ``+added/−removed`` (outcome) or the path (intent)."""
    outcome = record.get("outcome")
    if isinstance(outcome, dict) and "path" in outcome:
        added, removed = outcome.get("lines_added", 0), outcome.get("lines_removed", 0)
        return (f"{outcome['path']} +{added}/\u2212{removed}",)
    change = record.get("change")
    if isinstance(change, dict) and "path" in change:
        return (str(change["path"]),)
    return ()


def _records(handle: IO[bytes], lines: list[int], bad: list[int]) -> Iterator[dict[str, Any]]:
    """Complete records from the handle's position; ``lines[0]`` counts the lines read."""
    for raw in handle:
        if not raw.endswith(b"\n"):  # a record still being written: read it again later
            handle.seek(-len(raw), 1)
            return
        lines[0] += 1
        number = lines[0]
        try:
            record = json.loads(raw)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            bad.append(number)
            print(f"warning: line {number} is not a JSON record; run `stockade log verify`", file=sys.stderr)
            continue
        yield record


def run_show(args: argparse.Namespace) -> int:
    """Print matching records; with ``--follow``, keep printing new ones."""
    path = args.file or audit_path(args)
    if not path.is_file():
        raise CommandFailed(
            "AUDIT_LOG_NOT_FOUND",
            f"{path} not found",
            hint="the host creates it on its first call; name another file, or check --state-dir / --config",
        )
    bad: list[int] = []
    lines = [0]
    with open(path, "rb") as handle:
        found = [r for r in _records(handle, lines, bad) if _matches(r, args)]
        # --json keeps every record; people see a generation's acceptance once, with a count
        rows = [(r, 1) for r in found] if args.json else fold_accepted(found)
        for record, repeats in rows[-args.last :] if args.last else rows:
            _emit(record, args, repeats)
        if args.follow:
            seen = {key for key in map(_accepted_key, found) if key is not None}
            _follow(handle, lines, args, bad, seen)
    return EXIT_FAILED if bad else EXIT_OK


def _emit(record: dict[str, Any], args: argparse.Namespace, repeats: int = 1) -> None:
    text = json.dumps(record, sort_keys=True) if args.json else line_for(record, repeats)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _follow(
    handle: IO[bytes], lines: list[int], args: argparse.Namespace, bad: list[int], seen: set[tuple[str, str]]
) -> None:
    try:
        while True:
            for record in _records(handle, lines, bad):
                key = _accepted_key(record)
                if not args.json and key is not None and key in seen:
                    continue  # the same generation accepted again by another invocation
                if key is not None:
                    seen.add(key)
                if _matches(record, args):
                    _emit(record, args)
            time.sleep(FOLLOW_POLL_S)
    except KeyboardInterrupt:
        return
