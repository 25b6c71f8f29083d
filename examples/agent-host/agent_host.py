"""A small host app: replay a model's tool calls through Stockade, asking a person when needed.

The "model" is a transcript: a JSON list of the tool calls a model proposed, in the shape
model APIs return them (OpenAI-style function names such as ``tracker__list-issues`` and
``arguments`` as a JSON string or an object)::

    [{"id": "call_1", "name": "tracker__list-issues", "arguments": "{\"repo\": \"widgets\"}"},
     {"id": "call_2", "name": "tracker__create-issue", "arguments": {"repo": "widgets", "title": "Hi"}}]

For each proposal the app maps the model's name back to the exact tool and version the
host offered (anything else is TOOL_NOT_FOUND), builds a CallRequest and lets the host
decide. When policy wants a person's approval, the app shows the preview (effect, risk,
hosts, secret names, action digest) and asks; ``--approve yes`` or ``--approve no``
answer for scripts. Each answer is printed as one JSON line: what you would send back to
the model as the tool result.

Usage::

    python examples/agent-host/agent_host.py --lock stockade.lock --state-dir state \\
        --principal demo/agent --transcript transcript.json [--approve ask|yes|no]

The state directory holds ``policy.json`` (a FilePolicyEngine file), ``audit.log`` and,
if the tools need secrets, ``secrets.json`` with ``master.key`` (or STOCKADE_MASTER_KEY).
Exit status: 0 when every proposal was handled (refusals included: they are answers),
2 for bad arguments or an unreadable transcript, 1 when the host could not be opened.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from host import (
    CallRequest,
    CallResult,
    FilePolicyEngine,
    Host,
    HostConfig,
    MasterKey,
    Principal,
    SecretsStore,
    StockadeError,
)
from host.runtime.cache import user_artifact_dir

MAX_TRANSCRIPT_BYTES = 1024 * 1024  # a transcript is untrusted input too


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Replay a model's tool calls through a Stockade host.")
    parser.add_argument("--lock", type=Path, required=True, help="the stockade.lock to load")
    parser.add_argument("--state-dir", type=Path, required=True, help="policy.json, audit.log, secrets")
    parser.add_argument("--transcript", type=Path, required=True, help="JSON list of proposed tool calls")
    parser.add_argument("--principal", default="demo/agent", help="PROJECT/SUBJECT the calls run as")
    parser.add_argument("--session", default="agent-host-1", help="session id (grants never cross sessions)")
    parser.add_argument("--approve", choices=("ask", "yes", "no"), default="ask",
                        help="answer approval prompts: ask a person (default), or always yes / no")
    parser.add_argument("--trusted-keys", type=Path, default=None, help="trusted keys file for signed locks")
    return parser.parse_args(argv)


def load_transcript(path: Path) -> list[dict[str, Any]]:
    data = path.read_bytes()
    if len(data) > MAX_TRANSCRIPT_BYTES:
        raise ValueError(f"{path} is larger than {MAX_TRANSCRIPT_BYTES} bytes")
    calls = json.loads(data)
    if not isinstance(calls, list) or not all(isinstance(c, dict) and isinstance(c.get("name"), str)
                                              for c in calls):
        raise ValueError("the transcript must be a JSON list of objects with a string 'name'")
    return calls


def open_secrets(state: Path) -> SecretsStore | None:
    key_file = state / "master.key"
    if "STOCKADE_MASTER_KEY" not in os.environ and not key_file.exists():
        return None  # tools that need a secret then fail with CREDENTIAL_UNAVAILABLE
    return SecretsStore(state / "secrets.json", MasterKey.load(key_file=key_file))


def ask_person(preview: dict[str, Any], mode: str) -> bool:
    """Show what would run and get a decision. The preview holds no input values or secrets."""
    print(f"\napproval needed: {preview['tool']}@{preview['version']} "
          f"({preview['effect']}, risk {preview['risk']})", file=sys.stderr)
    print(f"  may reach: {', '.join(preview['hosts']) or 'nothing'}", file=sys.stderr)
    print(f"  secrets:   {', '.join(preview['secrets']) or 'none'}", file=sys.stderr)
    print(f"  action:    {preview['action_digest']}", file=sys.stderr)
    if mode != "ask":
        print(f"  --approve {mode}", file=sys.stderr)
        return mode == "yes"
    # The prompt goes to stderr: stdout carries only the JSON answers. EOF means "no".
    print("approve? [y/N] ", end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def arguments_of(call: dict[str, Any]) -> dict[str, Any]:
    raw = call.get("arguments", {})
    value = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(value, dict):
        raise ValueError("arguments must be a JSON object")
    return value


def handle(host: Host, call: dict[str, Any], principal: Principal,
           args: argparse.Namespace) -> dict[str, Any]:
    """One proposal -> the answer for the model."""
    answer: dict[str, Any] = {"id": call.get("id"), "name": call["name"]}
    try:
        tool, version = host.resolve_tool("openai", call["name"])
        request = CallRequest(principal=principal, session=args.session, tool=tool,
                              version=version, input=arguments_of(call))
    except StockadeError as exc:
        return answer | {"ok": False, "error": {"code": exc.code, "message": exc.message}}
    except ValueError as exc:  # the model's arguments were not a JSON object
        return answer | {"ok": False, "error": {"code": "REQUEST_INVALID", "message": str(exc)}}
    result = host.call(request)
    if not result.ok and result.error is not None and result.error.code == "APPROVAL_REQUIRED":
        plan = host.prepare(request)
        if ask_person(plan.preview.to_dict(), args.approve):
            result = host.execute(plan, host.approve(plan))
        else:
            answer["declined"] = True
    return answer | {"tool": f"{tool}@{version}"} | result_json(result)


def result_json(result: CallResult) -> dict[str, Any]:
    if result.ok:
        return {"ok": True, "output": result.output}
    code, message = (result.error.code, result.error.message) if result.error else ("?", "")
    return {"ok": False, "error": {"code": code, "message": message}}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    project, _, subject = args.principal.partition("/")
    try:
        calls = load_transcript(args.transcript)
        principal = Principal(project=project, subject=subject)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # The per-user compiled-artifact cache: a plugin compiled by `stockade test` loads in ms.
    config = HostConfig(state_dir=args.state_dir, trusted_keys_file=args.trusted_keys,
                        artifact_cache_dir=user_artifact_dir())
    try:
        host = Host.open(args.lock, config=config, secrets=open_secrets(args.state_dir),
                         policy=FilePolicyEngine(args.state_dir / "policy.json"),
                         audit=args.state_dir / "audit.log")
    except StockadeError as exc:
        print(f"error: {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    with host:
        offered = [t["function"]["name"] for t in host.tools("openai")]
        print(f"tools offered to the model: {', '.join(offered)}", file=sys.stderr)
        for call in calls:
            print(json.dumps(handle(host, call, principal, args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
