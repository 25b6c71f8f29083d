"""The guest SDK's dispatch and HTTP mapping, under CPython against the real bindings.

An exception escaping ``call`` aborts a componentize-py instance (NOTES), so every way a
handler can misbehave must come back as a ``tool-error``, and every ``http-error`` case
must reach the author as its own exception class.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.unit.sdk.conftest import Guest


def _register(guest: Guest, name: str, fn):
    guest.stockade.tool(name)(fn)


def _raise(exc: BaseException):
    def handler(_input):
        raise exc

    return handler


def _tool_error(guest: Guest, message: str) -> BaseException:
    return guest.stockade.ToolError(message)


def _input_error(guest: Guest, message: str) -> BaseException:
    return guest.stockade.ToolInputError(message)


@pytest.mark.parametrize(
    ("make", "case", "message"),
    [
        (lambda g: _input_error(g, "repo is required"), "invalid-input", "repo is required"),
        (lambda g: _tool_error(g, "upstream said no"), "failed", "upstream said no"),
        (lambda g: KeyError("repo"), "failed", "KeyError: 'repo'"),
        (lambda g: MemoryError(), "failed", "out of memory (MemoryError)"),
        (lambda g: SystemExit(3), "failed", "SystemExit: 3"),
        (lambda g: KeyboardInterrupt(), "failed", "KeyboardInterrupt"),
        (lambda g: RecursionError("maximum recursion depth exceeded"), "failed", "RecursionError: maximum"),
    ],
    ids=[
        "tool-input-error",
        "tool-error",
        "key-error",
        "memory-error",
        "system-exit",
        "keyboard-interrupt",
        "recursion",
    ],
)
def test_handler_exception_becomes_tool_error_never_escapes(
    guest: Guest, make, case: str, message: str
) -> None:
    _register(guest, "t.x", _raise(make(guest)))
    got_case, got_message = guest.call("t.x", "{}")
    assert got_case == case
    assert got_message.startswith(message)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [({1, 2}, "TypeError"), (float("nan"), "ValueError"), (object(), "TypeError")],
    ids=["set", "nan", "object"],
)
def test_output_that_is_not_json_fails_the_call(guest: Guest, value: object, fragment: str) -> None:
    _register(guest, "t.out", lambda _input: value)
    assert guest.call("t.out", "{}")[0] == "failed"
    assert fragment in guest.call("t.out", "{}")[1]


def test_huge_failure_message_is_capped(guest: Guest) -> None:
    _register(guest, "t.big", _raise(guest.stockade.ToolError("x" * 1_000_000)))
    case, message = guest.call("t.big", "{}")
    assert case == "failed" and len(message) <= 1024


@pytest.mark.parametrize(
    ("tool", "text", "fragment"),
    [
        ("t.nope", "{}", "unknown tool"),
        ("t.ok", "{not json", "not valid JSON"),
        ("t.ok", "", "not valid JSON"),
    ],
    ids=["unknown-tool", "malformed-json", "empty-input"],
)
def test_unknown_tool_or_malformed_input_is_invalid_input(
    guest: Guest, tool: str, text: str, fragment: str
) -> None:
    _register(guest, "t.ok", lambda value: value)
    case, message = guest.call(tool, text)
    assert (case, fragment in message) == ("invalid-input", True)


def test_round_trip_returns_compact_json(guest: Guest) -> None:
    _register(guest, "t.echo", lambda value: {"got": value, "é": [1, 2.5, None, True]})
    case, text = guest.call("t.echo", '{"a": "ü"}')
    assert case == "ok"
    assert json.loads(text) == {"got": {"a": "ü"}, "é": [1, 2.5, None, True]}


@pytest.mark.parametrize(
    "name",
    ["Upper.case", "", "a..b", "-lead", "x" * 65, 7, "tool.name\n"],
    ids=["uppercase", "empty", "empty-segment", "leading-dash", "too-long", "not-str", "trailing-newline"],
)
def test_invalid_tool_name_refused_at_registration(guest: Guest, name: object) -> None:
    with pytest.raises(ValueError, match="invalid tool name"):
        guest.stockade.tool(name)


def test_bare_decorator_without_name_refused(guest: Guest) -> None:
    with pytest.raises(TypeError, match="use @tool"):
        guest.stockade.tool(lambda value: value)


def test_second_handler_for_same_tool_refused(guest: Guest) -> None:
    _register(guest, "t.dup", lambda v: v)
    with pytest.raises(ValueError, match="already has a handler"):
        guest.stockade.tool("t.dup")
    assert guest.call("t.dup", "1") == ("ok", "1")


def test_handlers_not_matching_manifest_fail_the_build(guest: Guest) -> None:
    _register(guest, "t.a", lambda v: v)
    _register(guest, "t.extra", lambda v: v)
    with pytest.raises(RuntimeError, match=r"no handler for \['t.b'\].*not in stockade.toml: \['t.extra'\]"):
        guest.dispatch.check_tools(["t.a", "t.b"])
    guest.dispatch.check_tools(["t.a", "t.extra"])


CASES = [
    ("HttpError_Denied", "host not allowed", "HttpDenied"),
    ("HttpError_CredentialUnavailable", "tracker_token", "CredentialUnavailable"),
    ("HttpError_InvalidRequest", "bad header", "InvalidRequest"),
    ("HttpError_TooLarge", None, "TooLarge"),
    ("HttpError_Timeout", None, "HttpTimeout"),
    ("HttpError_BudgetExhausted", None, "BudgetExhausted"),
    ("HttpError_Network", "connection reset", "NetworkError"),
]


@pytest.mark.parametrize(("case", "detail", "exc_name"), CASES, ids=[c[2] for c in CASES])
def test_each_http_error_case_raises_its_own_exception(
    guest: Guest, case: str, detail, exc_name: str
) -> None:
    cls = getattr(guest.types, case)
    guest.host.answer = cls(detail) if detail is not None else cls()
    exc_type = getattr(guest.stockade, exc_name)
    with pytest.raises(exc_type) as info:
        guest.stockade.http.get("https://api.example/v1")
    assert isinstance(info.value, guest.stockade.HttpError)
    assert info.value.detail == (detail or "")
    # Uncaught in a handler, it becomes the tool's failed message, naming the case.
    _register(guest, "t.h", lambda _v: guest.stockade.http.get("https://api.example/v1"))
    assert guest.call("t.h", "{}") == ("failed", f"{exc_name}: {info.value}")


def test_request_arguments_reach_the_host_exactly(guest: Guest) -> None:
    t = guest.types
    guest.host.answer = t.Response(
        status=201,
        headers='[["Content-Type","application/json"],["X-A","1"]]',
        body='{"id": 7}',
    )
    r = guest.stockade.http.post(
        "https://api.example/v1/issues", json={"title": "é"}, headers={"X-Trace": "abc"}, timeout_ms=500
    )
    sent = guest.host.requests[0]
    assert (sent.method, sent.url, sent.timeout_ms) == ("POST", "https://api.example/v1/issues", 500)
    assert json.loads(sent.headers) == [["X-Trace", "abc"], ["Content-Type", "application/json"]]
    assert json.loads(sent.body.encode("latin-1")) == {"title": "é"}  # UTF-8 bytes, latin-1 mapped
    assert (r.status, r.ok, r.json(), r.headers["content-type"], r.headers.get("x-missing")) == (
        201,
        True,
        {"id": 7},
        "application/json",
        None,
    )
    guest.stockade.http.request("get", "https://api.example/v1", body="ü")
    assert (guest.host.requests[1].method, guest.host.requests[1].body) == ("GET", "ü".encode().decode("latin-1"))


def test_binary_bodies_cross_the_boundary_byte_for_byte(guest: Guest) -> None:
    # WIT 1.1.0 carries bodies as latin-1 text; the SDK maps bytes both ways, so every
    # byte value survives and the author only ever sees bytes.
    every_byte = bytes(range(256))
    guest.host.answer = guest.types.Response(status=200, headers="[]", body=every_byte[::-1].decode("latin-1"))
    r = guest.stockade.http.request("PUT", "https://api.example/v1/blob", body=every_byte)
    assert guest.host.requests[0].body == every_byte.decode("latin-1")
    assert (r.body, r.headers.items()) == (every_byte[::-1], [])


def test_no_body_and_no_headers_are_none_and_an_empty_block(guest: Guest) -> None:
    guest.host.answer = guest.types.Response(status=204, headers="[]", body="")
    r = guest.stockade.http.get("https://api.example/v1")
    sent = guest.host.requests[0]
    assert (sent.headers, sent.body, r.body, len(r.headers)) == ("[]", None, b"", 0)


@pytest.mark.parametrize(
    "kwargs",
    [{"timeout_ms": 0}, {"timeout_ms": 2**32}, {"timeout_ms": True}, {"headers": {"A": 1}}, {"body": 3}],
    ids=["timeout-zero", "timeout-over-u32", "timeout-bool", "header-not-str", "body-int"],
)
def test_malformed_request_arguments_refused_before_the_host(guest: Guest, kwargs) -> None:
    with pytest.raises((TypeError, ValueError)):
        guest.stockade.http.request("GET", "https://api.example/", **kwargs)
    assert guest.host.requests == []


def test_log_and_secret_available(guest: Guest) -> None:
    guest.host.secrets.add("tracker_token")
    s = guest.stockade
    s.log.info("got %d", 3)
    s.log.warn("bad %d format", "x")  # never raises on a format mistake
    s.log.error("e")
    s.log.debug("d")
    assert guest.host.logs == [
        ("INFO", "got 3"),
        ("WARN", "bad %d format 'x'"),
        ("ERROR", "e"),
        ("DEBUG", "d"),
    ]
    assert (s.secret_available("tracker_token"), s.secret_available("other")) == (True, False)
