"""The egress proxy of ``exec.run`` against hostile clients, over its real Unix socket.

No sandbox is needed to attack the proxy itself: these tests speak raw bytes to
:class:`host.sandbox.proxy.EgressProxy` as a process inside the sandbox could (through the
relay) and check that request smuggling, chunked bodies, oversized heads, a CONNECT with
more than ``host:port``, too many connections and a passed deadline are refused, with a
record each, while a real loopback server sees only what the allow list admits.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from host.egress.policy import EgressPolicy
from host.sandbox.proxy import MAX_CONNECTIONS, MAX_HEAD_BYTES, EgressProxy
from tests.support.egress_session import FakeResolver
from tests.support.servers import LoopbackServer, respond

NAME = "api.test.example"


@pytest.fixture(scope="module")
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer(routes={"/v1/hello": respond(200, b"hello"), "/admin": respond(200, b"admin")}) as srv:
        yield srv


def _proxy(server: LoopbackServer, **overrides: Any) -> EgressProxy:
    allow = [{"scheme": "http", "host": NAME, "port": server.port, "path_prefix": "/v1", "methods": ["GET", "POST"]}]
    options: dict[str, Any] = {"allow_loopback": True, "max_bytes": 1 << 20, "deadline": time.monotonic() + 10}
    options.update(overrides)
    return EgressProxy(EgressPolicy.from_allow(allow), FakeResolver({NAME: ["127.0.0.1"]}), **options)


def _exchange(proxy: EgressProxy, data: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(5)
        client.connect(str(proxy.socket_path))
        try:
            client.sendall(data)
        except BrokenPipeError:
            pass  # refused before reading (the connection limit): the answer is still there
        chunks = []
        while chunk := client.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _admin_hits(server: LoopbackServer) -> int:
    return sum(1 for r in server.requests if r.target == "/admin")


def test_pipelined_second_request_smuggled_after_allowed_one_never_forwarded(server: LoopbackServer) -> None:
    proxy = _proxy(server)
    before = _admin_hits(server)
    smuggled = (f"GET http://{NAME}:{server.port}/v1/hello HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
                f"GET /admin HTTP/1.1\r\nHost: {NAME}\r\n\r\n").encode()  # fmt: skip
    try:
        answer = _exchange(proxy, smuggled)
    finally:
        proxy.close()
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"hello") and b"admin" not in answer
    assert _admin_hits(server) == before
    (record,) = proxy.records
    assert record["outcome"] == "allowed"


def test_body_beyond_content_length_not_forwarded_as_a_request(server: LoopbackServer) -> None:
    proxy = _proxy(server)
    before = _admin_hits(server)
    request = (f"POST http://{NAME}:{server.port}/v1/hello HTTP/1.1\r\nContent-Length: 2\r\n\r\nok"
               f"GET /admin HTTP/1.1\r\nHost: {NAME}\r\n\r\n").encode()  # fmt: skip
    try:
        _exchange(proxy, request)
    finally:
        proxy.close()
    assert _admin_hits(server) == before
    posted = [r for r in server.requests if r.method == "POST"][-1]
    assert posted.body == b"ok"


@pytest.mark.parametrize(
    ("data", "status", "reason"),
    [
        (b"POST http://%s:%d/v1/hello HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", b"411", "chunked_body"),
        (b"GET /v1/hello HTTP/1.1\r\nHost: %s:%d\r\n\r\n", b"400", "invalid_url"),
        (b"CONNECT %s:%d/path HTTP/1.1\r\n\r\n", b"400", "invalid_url"),
        (b"CONNECT user@%s:%d HTTP/1.1\r\n\r\n", b"403", "userinfo"),
        (b"GET http://%s:%d/v1/\xff HTTP/1.1\r\n\r\n", b"400", "non_ascii"),
        (b"GET http://%s:%d/v1/hello HTTP/1.1\r\nBad Header: x\r\n\r\n", b"400", "header"),
        (b"DELETE http://%s:%d/v1/hello HTTP/1.1\r\n\r\n", b"403", "method_not_allowed"),
        (b"GET http://%s:%d/admin HTTP/1.1\r\n\r\n", b"403", "path_not_allowed"),
    ],
    ids=["chunked", "origin_form", "connect_path", "connect_userinfo", "non_ascii", "bad_header", "method", "path"],
)  # fmt: skip
def test_hostile_request_refused_with_reason(server: LoopbackServer, data: bytes, status: bytes, reason: str) -> None:
    proxy = _proxy(server)
    before = len(server.requests)
    try:
        answer = _exchange(proxy, data.replace(b"%s", NAME.encode()).replace(b"%d", str(server.port).encode()))
    finally:
        proxy.close()
    assert answer.startswith(b"HTTP/1.1 " + status), answer[:100]
    assert f"X-Stockade-Deny: {reason}".encode() in answer
    assert proxy.records[0]["reason"] == reason
    assert len(server.requests) == before


def test_request_head_over_limit_refused(server: LoopbackServer) -> None:
    proxy = _proxy(server)
    head = f"GET http://{NAME}:{server.port}/v1/hello HTTP/1.1\r\nX-Pad: {'a' * MAX_HEAD_BYTES}\r\n\r\n"
    try:
        answer = _exchange(proxy, head.encode())
    finally:
        proxy.close()
    assert answer.startswith(b"HTTP/1.1 431")


def test_head_just_under_limit_accepted(server: LoopbackServer) -> None:
    proxy = _proxy(server)
    start = f"GET http://{NAME}:{server.port}/v1/hello HTTP/1.1\r\nX-Pad: "
    head = start + "a" * (MAX_HEAD_BYTES - len(start) - 100) + "\r\n\r\n"
    try:
        answer = _exchange(proxy, head.encode())
    finally:
        proxy.close()
    assert answer.startswith(b"HTTP/1.1 200")


def test_connection_beyond_limit_refused(server: LoopbackServer) -> None:
    proxy = _proxy(server)
    denied = f"GET http://{NAME}:{server.port}/admin HTTP/1.1\r\n\r\n".encode()
    try:
        answers = [_exchange(proxy, denied) for _ in range(MAX_CONNECTIONS + 1)]
    finally:
        proxy.close()
    assert all(a.startswith(b"HTTP/1.1 403") for a in answers[:MAX_CONNECTIONS])
    assert answers[-1].startswith(b"HTTP/1.1 429")
    assert proxy.connections == MAX_CONNECTIONS + 1 and len(proxy.records) == MAX_CONNECTIONS


def test_nothing_relayed_after_deadline(server: LoopbackServer) -> None:
    proxy = _proxy(server, deadline=time.monotonic() - 1)
    before = len(server.requests)
    try:
        answer = _exchange(proxy, f"GET http://{NAME}:{server.port}/v1/hello HTTP/1.1\r\n\r\n".encode())
    finally:
        proxy.close()
    assert not answer.startswith(b"HTTP/1.1 200")
    assert len(server.requests) == before
