"""A real host whose tool ``echo.fetch`` GETs a URL twice (the first redirected once by
:func:`api`), with a staged bearer secret: what the observability tests call."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from host import HostConfig
from tests.support.egress_session import FakeResolver, allow, bearer
from tests.support.hosts import HostFixture, echo_tool, make_host
from tests.support.secrets import make_store
from tests.support.servers import Exchange, LoopbackServer, respond
from tests.support.wat import guest

API = "api.observe.example"
SECRET = "tok-observe-5e1f0c9b-secret"
CANARY = "input-canary-7731"
URL_SCHEMA = {"type": "object", "additionalProperties": False,
              "properties": {"url": {"type": "string", "maxLength": 300}}, "required": ["url"]}
DONE_SCHEMA = {"type": "object", "additionalProperties": False,
               "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
FETCH = echo_tool(name="echo.fetch", input_schema=URL_SCHEMA, output_schema=DONE_SCHEMA)
PERMS = ("tool.call:echo.fetch", "echo.use")

_SEND = """
        (call $http_request {S:method}
          (i32.add (local.get $ip) (i32.const 8)) (i32.sub (local.get $il) (i32.const 10))
          {S:headers} (i32.const 0) {S:headers} (i32.const 0) (i32.const 0) (local.get $r))"""


def two_requests_component() -> bytes:
    """GETs the URL of its input ``{"url": ...}`` twice, then returns ``{"ok": true}``."""
    return guest(
        f"""
        (local $r i32)
        (local.set $r (call $alloc (i32.const 64)))
        {_SEND}
        {_SEND}
        (call $ok {{S:out}})""",
        host=["http-request"],
        strings={"method": "GET", "headers": "[]", "out": '{"ok":true}'},
    )


@pytest.fixture
def api() -> Iterator[LoopbackServer]:
    hits = {"go": 0}

    def go(ex: Exchange) -> None:
        hits["go"] += 1
        if hits["go"] == 1:
            ex.respond(302, b"", [("Location", "/v1/done")])
        else:
            ex.respond(200, b"{}", [("Content-Type", "application/json")])

    with LoopbackServer(routes={"/v1/go": go, "/v1/done": respond(200, b"{}")}) as server:
        yield server


def fetch_host(
    tmp_path: Path,
    api: LoopbackServer,
    *,
    rate_limit: dict[str, int] | None = None,
    propagate_trace: bool = False,
    **kwargs: Any,
) -> HostFixture:
    store = make_store(tmp_path)
    store.set("p", "alice", "echo_token", SECRET)
    http = {
        "allow": [{**allow(API, api.port, path_prefix="/v1", methods=["GET"]),
                   **({"propagate_trace": True} if propagate_trace else {})}],
        "credentials": [bearer("echo_token", [f"http://{API}:{api.port}"], ["/v1"])],
        "max_request_bytes": 1024, "max_response_bytes": 1024, "timeout_ms": 2000,
    }
    kwargs.setdefault("allow", PERMS)
    tool = FETCH if rate_limit is None else {**FETCH, "rate_limit": rate_limit}
    return make_host(
        tmp_path, tools=[tool], module=two_requests_component(), manifest_overrides={"http": http},
        secrets=store, resolver=FakeResolver({API: ["127.0.0.1"]}),
        config=HostConfig(state_dir=tmp_path / "state", unsafe_allow_loopback=True), **kwargs,
    )  # fmt: skip


def fetch_url(api: LoopbackServer) -> str:
    return f"http://{API}:{api.port}/v1/go?q={CANARY}"
