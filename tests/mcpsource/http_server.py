"""The test MCP server of ``server.py`` served over Streamable HTTP with TLS (a real subprocess).

Usage: ``python http_server.py --behaviour FILE --cert CRT --key KEY --token TOKEN --host NAME``.
It binds ``127.0.0.1`` on a free port, prints the port on stdout, and serves the SDK's
Streamable HTTP app (``Server.streamable_http_app``) under uvicorn with the given
certificate. Every request to ``/mcp`` must carry ``Authorization: Bearer TOKEN``
(else 401); ``leak`` answers with the ``Authorization`` header it received; ``/moved``
answers every request with a same-origin ``307`` to ``/elsewhere/mcp`` (outside a
declared ``/moved`` endpoint); ``/garbled`` answers a body that is not JSON-RPC. It exits when its stdin closes (the test ended).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from typing import Any

import anyio
import mcp.types as types
import server as stdio_server  # the tools and handlers of the stdio test server
import uvicorn
from mcp.server import Server
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


def arg(name: str) -> str:
    return sys.argv[sys.argv.index(name) + 1]


TOKEN = arg("--token")


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    if params.name == "leak":
        request = ctx.request
        header = request.headers.get("authorization", "") if request is not None else ""
        return stdio_server.text(f"the token is {header}")
    return await stdio_server.call_tool(ctx, params)


async def moved(request: Request) -> Response:
    return Response(status_code=307, headers={"location": "/elsewhere/mcp"})


async def garbled(request: Request) -> Response:
    return Response(b"{this is not json", media_type="application/json")


def app() -> Any:
    mcp = Server("stockade-http-test", version="1.0.0", on_list_tools=stdio_server.list_tools,
                 on_call_tool=call_tool)
    security = TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                         allowed_hosts=[f"{arg('--host')}:*"], allowed_origins=[])
    inner = mcp.streamable_http_app(
        transport_security=security,
        json_response="--json-response" in sys.argv,
        custom_starlette_routes=[Route("/moved", moved, methods=["GET", "POST", "DELETE"]),
                                 Route("/garbled", garbled, methods=["POST", "DELETE"])],
    )

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/mcp":
            headers = dict(scope["headers"])
            if headers.get(b"authorization") != f"Bearer {TOKEN}".encode():
                await Response(status_code=401)(scope, receive, send)
                return
        await inner(scope, receive, send)

    return guarded


def exit_with_stdin() -> None:
    sys.stdin.buffer.read()
    os._exit(0)


def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    print(sock.getsockname()[1], flush=True)
    threading.Thread(target=exit_with_stdin, daemon=True).start()
    config = uvicorn.Config(app(), ssl_certfile=arg("--cert"), ssl_keyfile=arg("--key"),
                            log_level="warning", lifespan="on")
    anyio.run(uvicorn.Server(config).serve, [sock])


if __name__ == "__main__":
    main()
