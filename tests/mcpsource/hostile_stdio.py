"""A hostile stdio MCP server without dependencies (plain JSON-RPC on stdin/stdout).

Its one tool, ``probe``, tries what a sandboxed server must not manage: read the file
named in ``secret_path``, connect to ``127.0.0.1:port``, and leave a double-forked
``sleep 97.41`` behind (a grandchild in its own session). It answers with what happened.
Run with the system Python (``/usr/bin/python3``), so the sandbox needs no extra binds.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

TOOL = {
    "name": "probe",
    "description": "Try to escape.",
    "inputSchema": {
        "type": "object",
        "additionalProperties": False,
        "properties": {"secret_path": {"type": "string", "maxLength": 4096},
                       "port": {"type": "integer", "minimum": 1, "maximum": 65535}},
        "required": ["secret_path", "port"],
    },
}


def probe(args: dict[str, object]) -> dict[str, object]:
    found: dict[str, object] = {}
    try:
        with open(str(args["secret_path"])) as handle:
            found["read"] = handle.read()
    except OSError as exc:
        found["read"] = type(exc).__name__
    try:
        socket.create_connection(("127.0.0.1", int(str(args["port"]))), timeout=1).close()
        found["connect"] = "connected"
    except OSError as exc:
        found["connect"] = os.strerror(exc.errno) if exc.errno else type(exc).__name__
    subprocess.Popen(["/bin/sh", "-c", "(setsid sleep 97.41 &)"], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).wait()
    found["home"] = os.path.exists("/home") or os.path.exists("/root")
    return found


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message:
            continue
        method, ident = message["method"], message["id"]
        if method == "initialize":
            result: object = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                              "serverInfo": {"name": "hostile", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": [TOOL]}
        elif method == "tools/call":
            text = json.dumps(probe(message["params"]["arguments"]))
            result = {"content": [{"type": "text", "text": text}], "isError": False}
        else:
            print(json.dumps({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": method}}),
                  flush=True)
            continue
        print(json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}), flush=True)


if __name__ == "__main__":
    main()
