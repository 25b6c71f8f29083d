"""The host side of ``stockade:plugin/host``: ``log``, ``secret-available``, ``http-request``.

One :class:`wasmtime.component.Linker` per runtime holds WASI p2 and these three
functions; it is built once and shared, read-only, by every call. Per-call state lives in
a :class:`CallContext` that the sandbox installs in a thread-local slot for the duration
of one call. wasmtime runs a call, and every host function it invokes, synchronously on
the calling thread, so the slot always names the call whose guest invoked the function;
two calls on two threads never see each other's context. (StoreContext in wasmtime-py
has no public accessor for store data, and the thread is exactly the call's scope.)

Every host function is guarded: anything it raises becomes a ``WasmtimeError`` with a
fixed, safe message (the guest traps; the sandbox reports SANDBOX_TRAP naming the
import) and the original exception is kept on the context for the host's own error
chain. Letting a Python exception escape would go through wasmtime-py's process-global
``LAST_EXCEPTION``, which another thread's call could pick up.

Conversions (``sdk/wit/stockade.wit`` 1.1.0, :mod:`host.egress.port`). Each value that can
be large crosses as one ``string``, so wasmtime-py moves it with one buffer copy; a
``list<…>`` would cost one Python conversion per element before any check could run
(measured with wasmtime-py 50; docs/design.md §2):

- ``request`` record -> :class:`HttpRequest`. ``headers`` is JSON text, an array of
  ``[name, value]`` string pairs: over :data:`MAX_HEADER_BLOCK_CHARS` characters it is
  refused *before* parsing, over :data:`MAX_REQUEST_HEADERS` pairs after; malformed, it
  is ``invalid-request``. ``body`` is latin-1 text (code point = byte): longer than the
  host's request-body ceiling it is ``too-large``; holding a character above U+00FF it is
  ``invalid-request``. Those answers never reach the egress port.
- :class:`HttpResponse` -> ``response`` record (headers as JSON text, body as latin-1
  text); :class:`HttpFailure` -> ``Variant(kind, detail)``, or ``Variant(kind)`` for the
  payload-less cases ``too-large``, ``timeout`` and ``budget-exhausted``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any, Final

import wasmtime
from wasmtime import component as wc

from host.egress.port import EgressPort, HttpFailure, HttpRequest, HttpResponse
from host.runtime import _compat
from host.runtime.calllog import CallLog
from host.runtime.models import ClockBridge, LogLevel

__all__ = [
    "HOST_INTERFACE",
    "MAX_HEADER_BLOCK_CHARS",
    "MAX_REQUEST_HEADERS",
    "CallContext",
    "activate",
    "build_linker",
    "current_context",
    "deactivate",
]

HOST_INTERFACE: Final = "stockade:plugin/host@1.1.0"
"""The name the host functions are linked under; wasmtime matches any 1.x import to it
(the load-time checks refuse 1.0.x, whose types differ)."""

MAX_HEADER_BLOCK_CHARS: Final = 64 * 1024  # characters of one request's header JSON text
MAX_REQUEST_HEADERS: Final = 128  # [name, value] pairs in one request's header block

_LOG_LEVELS: Final[frozenset[str]] = frozenset({"debug", "info", "warn", "error"})
_PAYLOAD_KINDS: Final = frozenset({"denied", "credential-unavailable", "invalid-request", "network"})
_EMPTY_KINDS: Final = frozenset({"too-large", "timeout", "budget-exhausted"})


class CallContext:
    """The state one call's host functions use. Never shared between calls.

    Args:
        egress: the call's egress port.
        secret_available: whether a secret is staged for this call (never its value).
        log: the call's bounded log.
        deadline_ns: the call's deadline on ``time.monotonic_ns()``'s clock.
        clock: the clock bridge (:mod:`host.runtime.clock`) for guests that use WASI.
        body_ceiling: bytes; a request body over it is ``too-large`` at the boundary (the
            host-wide ceiling; the egress port applies the manifest's own limit).
    """

    __slots__ = (
        "body_ceiling",
        "clock",
        "clock_now",
        "clock_subscribe",
        "clock_subscriptions",
        "deadline_hit",
        "deadline_ns",
        "egress",
        "fatal",
        "host_failure",
        "log",
        "secret_available",
    )

    def __init__(
        self,
        egress: EgressPort,
        secret_available: Callable[[str], bool],
        log: CallLog,
        *,
        deadline_ns: int,
        clock: ClockBridge | None = None,
        body_ceiling: int = 8 << 20,
    ) -> None:
        self.egress = egress
        self.secret_available = secret_available
        self.log = log
        self.deadline_ns = deadline_ns
        self.clock = clock
        self.body_ceiling = body_ceiling
        self.clock_subscribe: wc.Func | None = None
        self.clock_now: wc.Func | None = None
        self.clock_subscriptions = 0
        self.deadline_hit = False
        self.host_failure: tuple[str, Exception] | None = None
        self.fatal: BaseException | None = None


_active = threading.local()


def activate(context: CallContext) -> CallContext | None:
    """Install ``context`` for this thread; return the one it replaces."""
    previous: CallContext | None = getattr(_active, "context", None)
    _active.context = context
    return previous


def deactivate(previous: CallContext | None) -> None:
    """Restore the context :func:`activate` replaced."""
    _active.context = previous


def current_context() -> CallContext | None:
    """The context of the call running on this thread, if any."""
    context: CallContext | None = getattr(_active, "context", None)
    return context


def build_linker(engine: wasmtime.Engine) -> wc.Linker:
    """A linker with WASI p2 and the three host functions.

    ``wasi:http`` is not linked (the load-time checks refuse it anyway): it would perform
    HTTP inside wasmtime, out of reach of the egress rules.

    Args:
        engine: the runtime's engine.

    Returns:
        the linker, to be shared read-only by all calls.
    """
    linker = wc.Linker(engine)
    linker.add_wasip2()
    with linker.root() as root, root.add_instance(HOST_INTERFACE) as host:
        host.add_func("log", _guarded("log", _log))
        host.add_func("secret-available", _guarded("secret-available", _secret_available))
        host.add_func("http-request", _guarded("http-request", _http_request))
    return linker


def _guarded(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    message = f"stockade host import `{name}` failed"

    def host_function(_store: object, *args: Any) -> Any:
        context: CallContext | None = getattr(_active, "context", None)
        if context is None:
            raise wasmtime.WasmtimeError(f"{message}: no active call")
        try:
            return function(context, *args)
        except Exception as exc:
            context.host_failure = (name, exc)
        except BaseException as exc:  # KeyboardInterrupt etc.: re-raised after the call
            context.fatal = exc
        raise wasmtime.WasmtimeError(message)

    return host_function


def _log(context: CallContext, level: object, message: object) -> None:
    lvl: LogLevel = level if isinstance(level, str) and level in _LOG_LEVELS else "info"  # type: ignore[assignment]  # narrowed by the set
    context.log.log(lvl, message if isinstance(message, str) else str(message))


def _secret_available(context: CallContext, name: object) -> bool:
    if not isinstance(name, str):
        return False
    return context.secret_available(name) is True


def _http_request(context: CallContext, record: Any) -> Any:
    request = to_http_request(record, body_ceiling=context.body_ceiling)
    if isinstance(request, HttpFailure):
        return to_wit_result(request)
    outcome = context.egress.send(request)
    return to_wit_result(outcome)


def to_http_request(record: Any, *, body_ceiling: int) -> HttpRequest | HttpFailure:
    """The WIT ``request`` record as an :class:`HttpRequest`, or the failure to answer.

    Args:
        record: the lifted record (untrusted: any field may be malformed).
        body_ceiling: bytes; a longer body is ``too-large``.

    Returns:
        the request, or ``invalid-request`` / ``too-large`` for the guest.
    """
    headers = _parse_header_block(getattr(record, "headers", None))
    if isinstance(headers, HttpFailure):
        return headers
    body = getattr(record, "body", None)
    data: bytes | None = None
    if body is not None:
        if not isinstance(body, str):
            return HttpFailure("invalid-request", "the body must be latin-1 text")
        if len(body) > body_ceiling:  # one character per byte: checked before converting
            return HttpFailure("too-large")
        try:
            data = body.encode("latin-1")
        except UnicodeEncodeError:
            return HttpFailure(
                "invalid-request", "the body holds a character above U+00FF: bodies are latin-1 mapped bytes"
            )
    timeout = getattr(record, "timeout-ms")
    return HttpRequest(
        method=record.method,
        url=record.url,
        headers=headers,
        body=data,
        timeout_ms=int(timeout) if timeout is not None else None,
    )


def _parse_header_block(text: object) -> tuple[tuple[str, str], ...] | HttpFailure:
    """JSON ``[[name, value], ...]`` as pairs; refused over the caps, before parsing."""
    if not isinstance(text, str):
        return HttpFailure("invalid-request", "the header block must be text")
    if len(text) > MAX_HEADER_BLOCK_CHARS:
        return HttpFailure(
            "invalid-request", f"the header block is over {MAX_HEADER_BLOCK_CHARS} characters"
        )
    try:
        items = json.loads(text) if text else []
    except (ValueError, RecursionError):
        return HttpFailure("invalid-request", "the header block is not JSON")
    if not isinstance(items, list):
        return HttpFailure("invalid-request", "the header block must be a JSON array")
    if len(items) > MAX_REQUEST_HEADERS:
        return HttpFailure("invalid-request", f"more than {MAX_REQUEST_HEADERS} headers")
    pairs: list[tuple[str, str]] = []
    for item in items:
        if (
            not isinstance(item, list)
            or len(item) != 2
            or not isinstance(item[0], str)
            or not isinstance(item[1], str)
        ):
            return HttpFailure("invalid-request", "each header must be a [name, value] pair of strings")
        pairs.append((item[0], item[1]))
    return tuple(pairs)


def to_wit_result(outcome: object) -> Any:
    """An egress outcome as the WIT ``result<response, http-error>`` value.

    Raises:
        TypeError: the port returned something else, or a malformed response (a host
            bug: the guarded caller turns it into a trap).
    """
    if isinstance(outcome, HttpResponse):
        status = outcome.status
        if isinstance(status, bool) or not isinstance(status, int) or not 0 <= status <= 0xFFFF:
            raise TypeError("egress returned a status outside u16")
        return _record(status=status, headers=_header_block(outcome.headers), body=_body_text(outcome.body))
    if isinstance(outcome, HttpFailure):
        if outcome.kind in _PAYLOAD_KINDS:
            return wc.Variant(outcome.kind, _text(str(outcome.detail)))
        if outcome.kind in _EMPTY_KINDS:
            return wc.Variant(outcome.kind)
        raise TypeError(f"egress returned an unknown failure kind {outcome.kind!r}")
    raise TypeError(f"egress returned {type(outcome).__name__}, not HttpResponse/HttpFailure")


def _body_text(body: bytes) -> str | _compat.Utf8Text:
    """A response body as latin-1 text; ASCII bytes are already its UTF-8 form."""
    data = bytes(body)
    if _compat.FAST_STRINGS and data.isascii():
        return _compat.Utf8Text(data)
    return data.decode("latin-1")


def _header_block(headers: object) -> str:
    """Response headers as the WIT header block (JSON text of ``[name, value]`` pairs)."""
    pairs: list[list[str]] = []
    for item in headers:  # type: ignore[attr-defined]  # a tuple of pairs; anything else is a host bug
        name, value = item
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError("egress returned a header that is not a pair of strings")
        pairs.append([_text(name), _text(value)])
    return json.dumps(pairs, ensure_ascii=False, separators=(",", ":"))


def _text(text: str) -> str:
    """``text`` with lone surrogates replaced: a WIT string must be encodable as UTF-8,
    and a failed encoding inside wasmtime-py's lowering would escape our guard."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def _record(**fields: object) -> wc.Record:
    # wasmtime-py reads record fields with getattr; Record declares none statically.
    record = wc.Record()
    for key, value in fields.items():
        setattr(record, key, value)
    return record
