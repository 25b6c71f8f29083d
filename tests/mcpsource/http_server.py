"""The test MCP server of ``server.py`` served over Streamable HTTP with TLS (a real subprocess).

Usage: ``python http_server.py --behaviour FILE --cert CRT --key KEY --token TOKEN --host NAME``.
It binds ``127.0.0.1`` on a free port, prints the port on stdout, and serves the SDK's
Streamable HTTP app (``Server.streamable_http_app``) under uvicorn with the given
certificate. Every request to ``/mcp`` must carry ``Authorization: Bearer TOKEN``
(else 401); ``leak`` answers with the ``Authorization`` header it received; ``/moved``
answers every request with a same-origin ``307`` to ``/elsewhere/mcp`` (outside a
declared ``/moved`` endpoint); ``/garbled`` answers a body that is not JSON-RPC; the behaviour file may list the accepted ``tokens``
and ask for hostile answers (:func:`hostile`: decompression bombs, JSON-RPC errors quoting
the credential). It exits when its stdin closes (the test ended).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from typing import Any

import anyio
import mcp.types as types
import server as stdio_server  # the tools and handlers of the stdio test server
import uvicorn
from bombs import bomb
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
        which = stdio_server.behaviour().get("leak_header", "authorization")
        header = request.headers.get(which, "") if request is not None else ""
        if stdio_server.behaviour().get("leak_forms"):
            return stdio_server.text(stdio_server.leak_text(header.removeprefix("Bearer ")))
        return stdio_server.text(f"the token is {header}")
    return await stdio_server.call_tool(ctx, params)


async def moved(request: Request) -> Response:
    return Response(status_code=307, headers={"location": "/elsewhere/mcp"})


async def garbled(request: Request) -> Response:
    return Response(b"{this is not json", media_type="application/json")


async def body_of(receive: Any) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def replay(body: bytes, receive: Any) -> Any:
    """``receive`` with the body already read handed out again first (then the real one:
    an SSE answer waits on it for the client's disconnect)."""
    sent = False

    async def replayed() -> Any:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


def hostile(message: dict[str, Any], token: str) -> Response | None:
    """The hostile answer the behaviour file asks for, for this JSON-RPC request, if any.

    ``bomb``: ``{"method", "codings": ["gzip", ...], "mib", "sse"}`` answers ``method`` with
    a result holding ``mib`` MiB of text, compressed with ``codings`` (``Content-Encoding``
    lists them); ``rpc_error``: ``{"method", "message"}`` answers a JSON-RPC error whose
    message has ``{token}`` replaced by the credential the request carried.
    """
    b = stdio_server.behaviour()
    method, request_id = message.get("method"), message.get("id")
    if method == "initialize" and stdio_server.first_start(b):  # fails its first start
        return Response(status_code=503)
    error = b.get("rpc_error")
    if error and error["method"] == method:
        text = error["message"].replace("{token}", token)
        return Response(json.dumps({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32000, "message": text}}),
                        media_type="application/json")
    spec = b.get("bomb")
    if not spec or spec["method"] != method:
        return None
    key = "tools" if method == "tools/list" else "content"
    shape = {"jsonrpc": "2.0", "id": request_id,
             "result": {key: [{"name": "echo", "description": "@"} if key == "tools" else
                              {"type": "text", "text": "@"}]}}
    prefix, suffix = json.dumps(shape).encode().split(b'"@"')
    prefix, suffix = prefix + b'"', b'"' + suffix
    if spec.get("sse"):
        prefix, suffix = b"event: message\ndata: " + prefix, suffix + b"\n\n"
    body = bomb(prefix, int(spec["mib"]), suffix, list(spec["codings"]))
    kind = "text/event-stream" if spec.get("sse") else "application/json"
    return Response(body, media_type=kind, headers={"content-encoding": ", ".join(spec["codings"])})


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
            tokens = stdio_server.behaviour().get("tokens", [TOKEN])
            given = headers.get(b"authorization", b"").decode("latin-1")
            if given not in [f"Bearer {t}" for t in tokens]:
                await Response(status_code=401)(scope, receive, send)
                return
            if scope["method"] == "POST":
                body = await body_of(receive)
                receive = replay(body, receive)
                try:
                    message = json.loads(body)
                except ValueError:
                    message = None
                answer = hostile(message, given.removeprefix("Bearer ")) if isinstance(message, dict) else None
                if answer is not None:
                    await answer(scope, receive, send)
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
