"""``stockade call TOOL@VERSION --input JSON``: call one tool through the host's pipeline.

The call goes through the same steps as a host app's (policy before input, input
validation, approval, rate limit, secrets pre-flight, audit, sandbox, output checks);
``--project`` and ``--subject`` name the principal the policy file (``<state-dir>/
policy.json``) and the secrets store know.

When policy asks for a person's approval, the preview (tool, binding, effect, risk,
hosts, secret names, action digest) is shown and you are asked to approve, if standard
input is a terminal. ``--approve`` approves without asking (for scripts: you approve
every call the command line names). Without a terminal and without ``--approve`` the
call is refused with APPROVAL_REQUIRED.

Prints the tool's output as JSON; ``--json`` prints the whole result (ok, output,
error, audit_id, usage, log, action_digest). Exit codes: 0 ok, 1 refused or failed
(the error code says why), 2 usage error.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from host import CallResult, Host, InvocationPlan
from host.canonical import parse_json
from host.errors import StockadeError
from sdk.commands._common import (
    EXIT_FAILED,
    EXIT_OK,
    add_host_options,
    cell,
    localize_hint,
    open_host,
    print_json,
    safe_text,
    stderr_console,
)

MAX_INPUT_CHARS = 1024 * 1024  # characters of --input; the host bounds canonical input further


def _tool_at_version(text: str) -> tuple[str, str]:
    tool, at, version = text.rpartition("@")
    if not at or not tool or not version:
        raise argparse.ArgumentTypeError(
            f"expected TOOL@VERSION (an exact version, e.g. echo.say@1.0.0), got {text!r}"
        )
    return tool, version


def _json_object(text: str) -> dict[str, Any]:
    if len(text) > MAX_INPUT_CHARS:
        raise argparse.ArgumentTypeError(f"--input is over {MAX_INPUT_CHARS} characters")
    try:
        value = parse_json(text.encode("utf-8", "surrogatepass"), max_bytes=4 * MAX_INPUT_CHARS)
    except StockadeError as exc:
        raise argparse.ArgumentTypeError(f"--input is not strict JSON: {exc.message}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("--input must be a JSON object")
    return value


def register(sub: Any) -> None:
    """Add the ``call`` subcommand."""
    parser = sub.add_parser(
        "call",
        help="call a tool through the host pipeline",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "target", type=_tool_at_version, metavar="TOOL@VERSION", help="exact tool and version"
    )
    parser.add_argument(
        "--input", type=_json_object, default={}, metavar="JSON", help="the input object (default {})"
    )
    parser.add_argument("--project", required=True, help="the principal's project")
    parser.add_argument("--subject", required=True, help="the principal's stable subject id")
    parser.add_argument("--session", default="cli", help="session id (default: cli)")
    parser.add_argument(
        "--approve", action="store_true", help="approve without asking if approval is required"
    )
    add_host_options(parser)
    parser.add_argument("--json", action="store_true", help="print the whole CallResult as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Prepare, obtain approval if needed, execute, print."""
    tool, version = args.target
    request = {
        "principal": {"project": args.project, "subject": args.subject},
        "session": args.session,
        "tool": tool,
        "version": version,
        "input": args.input,
    }
    with open_host(args) as host:
        result = _call(host, request, args)
    return _print_result(result, args)


def _call(host: Host, request: dict[str, Any], args: argparse.Namespace) -> CallResult:
    try:
        plan = host.prepare(request)
    except StockadeError:
        return host.call(request)  # the same refusal, recorded in the audit log
    approval = None
    if plan.status == "approval_required":
        _show_preview(host, plan)
        if args.approve or (sys.stdin.isatty() and _ask()):
            approval = host.approve(plan)
    return host.execute(plan, approval)


def _show_preview(host: Host, plan: InvocationPlan) -> None:
    """The preview on stderr, one field per line: nothing is cut, whatever the width."""
    binding = host.registry.get(plan.tool, plan.version).binding
    lines = [
        "approval required",
        *plan.preview.lines(),
        f"manifest sha256 {binding.manifest_sha256}",
        f"module sha256   {binding.module_sha256}",
    ]
    for line in lines:
        print(safe_text(line), file=sys.stderr)


def _ask() -> bool:
    try:
        answer = stderr_console().input(cell("Approve this call? [y/N] "))
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def _result_dict(result: CallResult, args: argparse.Namespace) -> dict[str, Any]:
    error = result.error
    return {
        "ok": result.ok,
        "output": result.output,
        "error": None
        if error is None
        else {
            "code": error.code,
            "message": error.message,
            "hint": localize_hint(error.hint, args),
            "details": dict(error.details),
        },
        "audit_id": result.audit_id,
        "usage": result.usage.to_dict(),
        "log": result.log,
        "action_digest": result.action_digest,
    }


def _print_result(result: CallResult, args: argparse.Namespace) -> int:
    if args.json:
        print_json(_result_dict(result, args))
    elif result.ok:
        print_json(result.output)
    elif result.error is not None:
        hint = localize_hint(result.error.hint, args)
        if result.error.code == "APPROVAL_REQUIRED":
            hint = "run it in a terminal to approve interactively, or pass --approve (scripts)"
        print(f"error: {result.error.code}: {safe_text(result.error.message)}", file=sys.stderr)
        if hint:
            print(f"  what to do: {safe_text(hint)}", file=sys.stderr)
        trace = str(result.error.details.get("guest_traceback") or "")  # with --debug
        if trace:
            print("guest traceback:\n" + "\n".join(safe_text(t) for t in trace.splitlines()), file=sys.stderr)
    return EXIT_OK if result.ok else EXIT_FAILED
