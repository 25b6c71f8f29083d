"""``stockade dev TOOL --input JSON``: run one call of a plugin with zero set-up.

Builds the project (``--project DIR``, default ``.``; cached) or takes a built bundle
(``--bundle DIR``), then calls TOOL once through a real host in a throw-away workspace:
a lock, a policy granting exactly the package's tools to a throw-away principal, an
ephemeral state directory and audit log, and the package's own egress allowlist on the
real network. Prints the output (stdout), then the guest's log, every HTTP request the
host sent (``<secret:NAME>`` where a credential was injected, never the value), usage
and timings (stderr). A failing guest's traceback or stack is shown.

Secrets: ``--secret NAME=@FILE`` (the file's content) or ``--secret NAME=env:VAR``;
never a literal value. ``--allow-host HOST`` (or ``scheme://host[:port][/path]``) widens
the allowlist for this run only, and says so loudly: put the host under ``[http] allow``
in stockade.toml to keep it. ``--allow-loopback HOST=127.0.0.1:PORT`` connects an allowed
HOST to a server on this machine (loopback targets only; other hosts keep the public-address
rule; ``--ca-file`` trusts a local HTTPS server's CA). A tool that needs approval is
approved by you for this run.
Nothing here exists in a production host: it is an ordinary ``Host`` with a throw-away
lock, policy and secrets.

Exit codes: 0 the call succeeded; 1 it failed or was refused (the error code says why);
2 usage error.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from sdk._loopback import LoopbackRemap
from sdk.author.devrun import DevOutcome, dev_run, read_secret
from sdk.author.project import PROJECT_FILE
from sdk.commands._common import (
    EXIT_FAILED,
    EXIT_OK,
    UsageFailed,
    cell,
    print_json,
    safe_text,
    stderr_console,
    user_input,
)
from sdk.commands._progress import TEMPORARY_BUNDLE_NOTE, author_progress, problems_listed


def register(sub: Any) -> None:
    """Add the ``dev`` subcommand."""
    parser = sub.add_parser(
        "dev",
        help="build and run one tool call through a throw-away real host (no set-up)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("tool", metavar="TOOL", help="tool name, optionally TOOL@VERSION")
    parser.add_argument("--input", default="{}", help="the tool input as JSON, or @FILE (default {})")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--project", type=Path, default=None, help="plugin project to build (default .)")
    where.add_argument("--bundle", type=Path, default=None, help="a built bundle directory instead")
    parser.add_argument(
        "--secret", action="append", default=[], metavar="NAME=@FILE|NAME=env:VAR", help="store a secret"
    )
    parser.add_argument(
        "--allow-host", action="append", default=[], metavar="HOST",
        help="widen the egress allowlist for this run only (printed as a warning)",
    )  # fmt: skip
    parser.add_argument(
        "--allow-loopback", action="append", default=[], metavar="HOST=127.0.0.1:PORT",
        help="connect an allowed host to a server on this machine (loopback targets only; printed)",
    )  # fmt: skip
    parser.add_argument("--ca-file", type=Path, default=None, help="an extra CA to trust (PEM)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def _input(text: str) -> Any:
    raw = Path(text[1:]).read_text("utf-8") if text.startswith("@") else text
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        hint = "e.g. --input '{\"name\": \"Ada\"}'"
        raise UsageFailed("USAGE", f"--input is not JSON: {exc}", hint=hint) from None
    if not isinstance(value, dict):
        raise UsageFailed("USAGE", "--input must be a JSON object", hint="e.g. --input '{}'")
    return value


def run(args: argparse.Namespace) -> int:
    """Run the call and print what happened."""
    started = time.monotonic()
    project, bundle = args.project, args.bundle
    if project is None and bundle is None:
        project = Path(".")
    if project is not None and not (project / PROJECT_FILE).is_file():
        hint = "run it in a plugin project, or pass --project DIR or --bundle DIR"
        raise UsageFailed("PROJECT_NOT_FOUND", f"no {PROJECT_FILE} in {project}", hint=hint)
    tool, _, version = args.tool.partition("@")
    with user_input("give each --secret as NAME=@FILE or NAME=env:VAR"):
        secrets = dict(read_secret(spec) for spec in args.secret)
    value = _input(args.input)
    console = stderr_console()
    for host in args.allow_host:
        console.print(
            f"[bold red]WARNING[/]: --allow-host {cell(host)} widens the egress allowlist for this dev run "
            "only; add it under \\[http] allow in stockade.toml to keep it", soft_wrap=True,
        )  # fmt: skip
    with user_input("give each --allow-loopback as HOST=127.0.0.1:PORT"):
        loopback = LoopbackRemap.parse(args.allow_loopback) if args.allow_loopback else None
    for line in [] if loopback is None else loopback.describe():
        console.print(
            f"[bold red]WARNING[/]: --allow-loopback {cell(line)}: this dev run connects that host to a "
            "server on this machine (the host runs with unsafe_allow_loopback, recorded in its audit log)",
            soft_wrap=True,
        )  # fmt: skip
    show = not args.json
    with problems_listed(enabled=show), author_progress(enabled=show) as (on_build, on_compile):
        outcome = dev_run(
            tool, value, project=project, bundle=bundle, version=version or None, secrets=secrets,
            allow_hosts=args.allow_host, progress=on_build, compile_progress=on_compile,
            loopback=loopback, ca_file=args.ca_file,
        )  # fmt: skip
    total = time.monotonic() - started
    if args.json:
        print_json(_as_json(outcome, total))
    else:
        _show(outcome, total)
        if project is not None:
            console.print(TEMPORARY_BUNDLE_NOTE, highlight=False)
    return EXIT_OK if outcome.result.ok else EXIT_FAILED


def _as_json(outcome: DevOutcome, total: float) -> dict[str, Any]:
    result = outcome.result
    error = result.error
    return {
        "ok": result.ok,
        "output": result.output,
        "error": None if error is None else {
            "code": error.code, "message": error.message, "hint": error.hint, "details": dict(error.details)
        },
        "log": result.log,
        "requests": [
            {"method": r.method, "url": r.url, "headers": [list(h) for h in r.headers], "status": r.status,
             "error": r.error}
            for r in outcome.requests
        ],
        "usage": result.usage.to_dict(),
        "package": outcome.package,
        "tool_version": outcome.tool_version,
        "approved": outcome.approved,
        "widened": outcome.widened,
        "audit_id": result.audit_id,
        "timings_s": {k: round(v, 3) for k, v in {**outcome.timings, "total": total}.items()},
    }  # fmt: skip


def _lines(text: str) -> list[str]:
    return [safe_text(line) for line in text.splitlines()]


def _show(outcome: DevOutcome, total: float) -> None:
    result = outcome.result
    console = stderr_console()
    if result.ok:
        print(json.dumps(result.output, indent=2, ensure_ascii=False))
    if outcome.approved:
        console.print("approval: needed; given by you for this run (Host.approve)", highlight=False)
    if result.log:
        console.print("[bold]log[/]")
        for line in _lines(result.log):
            console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
    if outcome.requests:
        console.print("[bold]http[/]")
        for r in outcome.requests:
            answer = str(r.status) if r.status is not None else f"failed ({r.error})"
            console.print(f"  {r.method} {safe_text(r.url)} -> {answer}", markup=False, highlight=False)
            for name, value in r.headers:
                console.print(f"      {safe_text(name)}: {safe_text(value)}", markup=False, highlight=False)
    if result.error is not None:
        error = result.error
        console.print(f"error: {error.code}: {safe_text(error.message)}", markup=False, highlight=False)
        if error.hint:
            console.print(f"  what to do: {safe_text(error.hint)}", markup=False, highlight=False)
        trace = str(error.details.get("guest_traceback") or "")
        if trace:
            console.print("guest traceback:", highlight=False)
            for line in _lines(trace):
                console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
    usage = result.usage
    timings = " ".join(f"{k} {v:.2f} s" for k, v in outcome.timings.items())
    console.print(
        f"usage: fuel {usage.fuel:,}, {usage.duration_ms:.1f} ms, {usage.http_requests} requests, "
        f"{usage.bytes_sent} B sent, {usage.bytes_received} B received; {outcome.package}; "
        f"{timings}; total {total:.2f} s",
        markup=False, highlight=False, soft_wrap=True,
    )  # fmt: skip
