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

Conversions (DESIGN §2 WIT, :mod:`host.egress.port`):
- ``request`` record -> :class:`HttpRequest` (headers as pairs, ``body`` bytes or None).
- :class:`HttpResponse` -> ``response`` record; :class:`HttpFailure` ->
  ``Variant(kind, detail)``, or ``Variant(kind)`` for the payload-less cases
  ``too-large``, ``timeout`` and ``budget-exhausted``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import wasmtime
from wasmtime import component as wc

from host.egress.port import EgressPort, HttpFailure, HttpRequest, HttpResponse
from host.runtime.calllog import CallLog
from host.runtime.models import LogLevel

if TYPE_CHECKING:
    from host.runtime.clock import ClockBridge

__all__ = [
    "HOST_INTERFACE",
    "CallContext",
    "activate",
    "build_linker",
    "current_context",
    "deactivate",
]

HOST_INTERFACE: Final = "stockade:plugin/host@1.0.0"
"""The name the host functions are linked under; wasmtime matches any 1.x import to it."""

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
    """

    __slots__ = (
        "clock",
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
    ) -> None:
        self.egress = egress
        self.secret_available = secret_available
        self.log = log
        self.deadline_ns = deadline_ns
        self.clock = clock
        self.clock_subscribe: wc.Func | None = None
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
    request = to_http_request(record)
    outcome = context.egress.send(request)
    return to_wit_result(outcome)


def to_http_request(record: Any) -> HttpRequest:
    """The WIT ``request`` record as an :class:`HttpRequest`."""
    headers = tuple((h.name, h.value) for h in record.headers)
    body = getattr(record, "body")  # noqa: B009  # option<list<u8>>: bytes or None
    timeout = getattr(record, "timeout-ms")
    return HttpRequest(
        method=record.method,
        url=record.url,
        headers=headers,
        body=bytes(body) if body is not None else None,
        timeout_ms=int(timeout) if timeout is not None else None,
    )


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
        return _record(
            status=status,
            headers=[_header(name, value) for name, value in outcome.headers],
            body=bytes(outcome.body),
        )
    if isinstance(outcome, HttpFailure):
        if outcome.kind in _PAYLOAD_KINDS:
            return wc.Variant(outcome.kind, _text(str(outcome.detail)))
        if outcome.kind in _EMPTY_KINDS:
            return wc.Variant(outcome.kind)
        raise TypeError(f"egress returned an unknown failure kind {outcome.kind!r}")
    raise TypeError(f"egress returned {type(outcome).__name__}, not HttpResponse/HttpFailure")


def _header(name: object, value: object) -> wc.Record:
    if not isinstance(name, str) or not isinstance(value, str):
        raise TypeError("egress returned a header that is not a pair of strings")
    return _record(name=_text(name), value=_text(value))


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
