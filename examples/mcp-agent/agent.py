"""An agent session over MCP: a client drives `stockade serve`, a person approves one call.

The "agent" is a script of tool calls (what a model would propose); the client is the
official MCP SDK, connected to ``stockade serve`` over stdio exactly as a desktop
assistant or IDE agent would be. When policy asks for approval, the server sends an
elicitation: this client shows its preview (tool, effect, risk, hosts, secrets, action
digest, input summary) and asks ``Approve? [y/N]`` — or answers ``--approve yes|no``.

    python examples/mcp-agent/agent.py --lock WORKDIR/stockade.lock --state-dir WORKDIR/state \\
        --principal demo/agent --script examples/mcp-agent/session.json [--approve ask|yes|no] \\
        [--mode legacy|auto]

Each answer is printed as one JSON line: ``{"tool", "ok", "code", "result", "audit_id"}``.
Exit status: 0 when the session ran (refusals are answers), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp
from mcp import StdioServerParameters, types


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="An agent session over MCP against stockade serve.")
    parser.add_argument("--lock", type=Path, required=True)
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--principal", default="demo/agent", help="PROJECT/SUBJECT the server acts for")
    parser.add_argument("--script", type=Path, required=True, help='JSON list of {"tool", "arguments"}')
    parser.add_argument("--approve", choices=("ask", "yes", "no"), default="ask")
    parser.add_argument("--mode", choices=("legacy", "auto"), default="legacy",
                        help="legacy: 2025-11-25 handshake era; auto: 2026-07-28 when offered")  # fmt: skip
    return parser.parse_args(argv)


def elicitation(answer: str) -> Any:
    async def callback(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        print("--- approval requested ---\n" + params.message, file=sys.stderr)
        if answer == "ask":
            reply = await anyio.to_thread.run_sync(lambda: input("Approve? [y/N] ").strip().lower())
            approved = reply in ("y", "yes")
        else:
            approved = answer == "yes"
        return types.ElicitResult(action="accept", content={"approve": approved})

    return callback


def line(tool: str, result: types.CallToolResult) -> dict[str, Any]:
    meta = (result.meta or {}).get("dev.stockade/call", {})
    text = (
        result.content[0].text if result.content and isinstance(result.content[0], types.TextContent) else ""
    )
    return {
        "tool": tool,
        "ok": not result.is_error,
        "code": meta.get("code"),
        "result": result.structured_content if not result.is_error else text,
        "audit_id": meta.get("audit_id"),
    }


async def session(args: argparse.Namespace, script: list[dict[str, Any]]) -> None:
    project, _, subject = args.principal.partition("/")
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "sdk.cli", "serve", "--lock", str(args.lock), "--state-dir", str(args.state_dir),
              "--project", project, "--subject", subject],
    )  # fmt: skip
    async with mcp.Client(server, mode=args.mode, elicitation_callback=elicitation(args.approve)) as client:
        tools = await client.list_tools()
        print(json.dumps({"tools": [t.name for t in tools.tools]}))
        for step in script:
            try:
                result = await client.call_tool(step["tool"], step.get("arguments", {}))
            except mcp.MCPError as exc:  # an unknown tool is a protocol error, not a result
                print(json.dumps({"tool": step["tool"], "ok": False, "code": exc.error.code}))
                continue
            print(json.dumps(line(step["tool"], result)))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        script = json.loads(args.script.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"cannot read the script: {exc}", file=sys.stderr)
        return 2
    anyio.run(session, args, script)
    return 0


if __name__ == "__main__":
    sys.exit(main())
