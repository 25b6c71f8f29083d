"""Observability hooks: OpenTelemetry spans and metrics of the call pipeline.

The pipeline calls the hooks here (one context manager or decorator per stage); they do
nothing until :func:`enable` is called, and this package imports no OpenTelemetry module
before that, so a host without the ``stockade[otel]`` extra pays one global read per stage
and nothing else (``tests/benchmarks/bench_observe.py`` measures it).

What a span, metric or log line may carry (docs/design.md: observability never carries
input, output or a secret): tool names, versions, effect, risk, generation, error codes,
fuel, byte counts, durations, the action digest, the audit record id, and egress method,
host (redacted like the audit record), status and outcome. Never an input value, an
output, a staged secret, a file's contents or a URL path or query.

Example (a host app)::

    from opentelemetry.sdk.trace import TracerProvider
    from host import observe
    observe.enable(tracer_provider=TracerProvider(...))
    host.call(request, trace_context={"traceparent": incoming_header})
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Final, Protocol, TypeVar, final

__all__ = [
    "Span",
    "TracedAudit",
    "approval",
    "audit_synced",
    "carrier",
    "describe_result",
    "describe_tool",
    "disable",
    "egress",
    "enable",
    "enabled",
    "outbound",
    "ready_instances",
    "span",
    "span_ids",
    "staged",
    "store_error",
    "trace_id",
    "watch",
    "watch_ready",
    "watched_sources",
]

Attributes = Mapping[str, "str | int | float | bool"]

_F = TypeVar("_F", bound=Callable[..., Any])

_live: Any = None
"""The OpenTelemetry side (:class:`host.observe._live.Live`) once :func:`enable` ran;
``None``: every hook is a no-op. Typed ``Any`` so that this module never imports it."""


class Span(Protocol):
    """What a stage's ``with`` block may do with its span (nothing, when tracing is off)."""

    @property
    def live(self) -> bool:
        """Whether anything is recorded (compute costly attributes only when True)."""

    def set(self, key: str, value: str | int | float | bool) -> None:
        """Set one attribute (a name of the OTel conventions or ``stockade.*``)."""

    def update(self, attributes: Attributes) -> None:
        """Set several attributes at once."""

    def fail(self, code: str) -> None:
        """Mark the stage failed with a stable error code (``error.type``)."""


@final
class _Off:
    """The span of every stage while observability is off: one shared, stateless object."""

    __slots__ = ()

    live = False

    def __enter__(self) -> _Off:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    def set(self, key: str, value: str | int | float | bool) -> None:
        """No-op."""

    def update(self, attributes: Attributes) -> None:
        """No-op."""

    def fail(self, code: str) -> None:
        """No-op."""


OFF: Any = _Off()


def span(
    name: str,
    attributes: Attributes | None = None,
    *,
    parent: Mapping[str, str] | None = None,
    server: bool = False,
) -> Any:
    """A context manager for one stage's span; its ``__enter__`` returns a :class:`Span`.

    Args:
        name: the span name (``stockade.<stage>``).
        attributes: attributes known when the stage starts.
        parent: a W3C trace context carrier (``traceparent``, ``tracestate``) to continue
            instead of the thread's current span (an invalid ``traceparent`` starts a
            new trace, as W3C Trace Context says).
        server: the span is the server side of a remote request (SpanKind.SERVER).
    """
    live = _live
    if live is None:
        return OFF
    return live.span(name, attributes, parent, live.SERVER if server else live.INTERNAL)


MAX_TRACESTATE_CHARS: Final = 512  # W3C Trace Context: 32 members, 512 characters is enough


def carrier(
    meta: Mapping[str, Any] | None, headers: Mapping[str, str] | None = None
) -> dict[str, str] | None:
    """The W3C trace context a remote caller sent: MCP ``_meta`` first, then HTTP headers.

    MCP carries ``traceparent`` and ``tracestate`` in a request's ``_meta`` (in both
    protocol eras); the Streamable HTTP transport may also carry them as headers. Baggage
    is not taken: nothing of the caller's is recorded except the trace it belongs to.

    Returns:
        ``{"traceparent": ..., "tracestate": ...}`` (tracestate only when sent, and
        dropped when over :data:`MAX_TRACESTATE_CHARS`), or ``None`` when observability is
        off or neither source has a ``traceparent``.
    """
    if _live is None:
        return None
    for source in (meta, headers):
        parent = source.get("traceparent") if source is not None else None
        if isinstance(parent, str):
            found = {"traceparent": parent}
            state = source.get("tracestate") if source is not None else None
            if isinstance(state, str) and len(state) <= MAX_TRACESTATE_CHARS:
                found["tracestate"] = state
            return found
    return None


def staged(name: str) -> Callable[[_F], _F]:
    """Decorate a stage function: its call is one span named ``name``."""

    def decorate(function: _F) -> _F:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            live = _live
            if live is None:
                return function(*args, **kwargs)
            with live.span(name, None, None):
                return function(*args, **kwargs)

        return wrapper  # type: ignore[return-value]  # same signature, by functools.wraps

    return decorate


def egress(port: Any, records: Any) -> Any:
    """``port`` (an egress port), or, when tracing is on, a wrapper giving each request a
    span from the records ``records.usage.requests`` gains (method, host, status, bytes,
    redirect hops)."""
    live = _live
    if live is None:
        return port
    return live.egress(port, records)


def describe_tool(span: Span, tool: Any) -> None:
    """Set a call span's tool attributes from its :class:`~host.trust.registry.ToolDefinition`."""
    if span.live:
        span.update({
            "stockade.tool": tool.name, "stockade.version": tool.version,
            "stockade.effect": str(getattr(tool.effect, "value", tool.effect)),
            "stockade.risk": str(getattr(tool.risk, "value", tool.risk)),
            "stockade.generation": tool.binding.generation,
        })  # fmt: skip


def describe_result(span: Span, result: Any) -> None:
    """Set a call span's outcome attributes from its :class:`~host.types.CallResult`."""
    if span.live:
        attributes: dict[str, str | int] = {
            "stockade.outcome": "ok" if result.ok else result.error.code,
            "stockade.fuel_used": result.usage.fuel,
        }
        if result.action_digest:
            attributes["stockade.action_digest"] = result.action_digest
        if result.audit_id:
            attributes["stockade.audit.record"] = result.audit_id
        span.update(attributes)
        if not result.ok:
            span.fail(result.error.code)


def approval(event: str, channel: str) -> None:
    """Count an approval event (``requested``, ``granted``, ``denied``) a front end records."""
    live = _live
    if live is not None:
        live.approval(event, channel)


def span_ids() -> tuple[str, str] | None:
    """The current span's trace and span ids (hex), or ``None`` outside a recorded span."""
    live = _live
    return None if live is None else live.span_ids()


def audit_synced(records: int, seconds: float, *, failed: bool) -> None:
    """Measure one group commit of the audit log: the records one fsync made durable, its
    latency, and whether it failed."""
    live = _live
    if live is not None:
        live.audit_synced(records, seconds, failed)


def outbound() -> list[tuple[str, str]]:
    """The current span's W3C trace context as headers (``traceparent`` and, when set,
    ``tracestate``) for an outbound request; empty when off or without a valid span
    context (a sampled-out call's context is valid: its flags say not sampled).

    Only egress whose allow entry opts in (``propagate_trace``) sends them."""
    live = _live
    return [] if live is None else live.outbound()


def trace_id() -> str | None:
    """The current span's trace id (32 hex digits), or ``None`` outside a recorded span."""
    live = _live
    return None if live is None else live.trace_id()


class _AuditSink(Protocol):
    def append(self, kind: str, payload: Mapping[str, object], *, durable: bool | None = None) -> str: ...

    def close(self) -> None: ...


@final
class TracedAudit:
    """An audit sink whose appends are spans, and whose records carry the trace id.

    A record appended inside a recorded span gains ``trace_id``, so a person can go from
    a trace to its records (``stockade log show``) and back; with tracing off the record
    is exactly what the pipeline built.
    """

    __slots__ = ("_inner",)

    def __init__(self, inner: _AuditSink) -> None:
        self._inner = inner

    def append(self, kind: str, payload: Mapping[str, object], *, durable: bool | None = None) -> str:
        """Append through the wrapped sink (see :meth:`host.audit.log.AuditLog.append`)."""
        live = _live
        if live is None:
            return self._inner.append(kind, payload, durable=durable)
        record_id: str = live.audit_append(self._inner, kind, payload, durable)
        return record_id

    def close(self) -> None:
        """Close the wrapped sink."""
        self._inner.close()


SourceStats = Callable[[], Iterable[tuple[str, int, int]]]
"""A host's MCP sources as ``(name, restarts, drifted tools)`` (for the observable metrics)."""

_watched: list[weakref.WeakMethod[SourceStats]] = []
_watched_lock = threading.Lock()


def watch(stats: SourceStats) -> None:
    """Register a host's bound method reporting its MCP sources, held weakly (a host that
    is gone drops out); read only when metrics are collected, so it costs nothing off."""
    with _watched_lock:
        _watched[:] = [ref for ref in _watched if ref() is not None]  # hosts gone drop out
        _watched.append(weakref.WeakMethod(stats))


def watched_sources() -> list[tuple[str, int, int]]:
    """Every watched host's MCP sources, now (``(name, restarts, drifted tools)``)."""
    with _watched_lock:
        alive = [method for ref in _watched if (method := ref()) is not None]
        _watched[:] = [weakref.WeakMethod(method) for method in alive]
    return [row for method in alive for row in method()]


def store_error(backend: str, operation: str, code: str) -> None:
    """Count one failed state-store operation (``backend``: ``local`` or ``postgres``;
    ``operation``: a fixed phrase such as ``"append to the audit chain"``; ``code``: the
    raised error's code)."""
    live = _live
    if live is not None:
        live.store_error(backend, operation, code)


ReadyCount = Callable[[], int]
"""A runtime's ready-instance pools as the number of instances ready now."""

_ready: list[weakref.WeakMethod[ReadyCount]] = []


def watch_ready(count: ReadyCount) -> None:
    """Register a ready-instance pool's bound counting method, held weakly; read only
    when metrics are collected (``stockade.sandbox.ready_instances``)."""
    with _watched_lock:
        _ready[:] = [ref for ref in _ready if ref() is not None]
        _ready.append(weakref.WeakMethod(count))


def ready_instances() -> int:
    """The instances ready now in every watched pool."""
    with _watched_lock:
        alive = [method for ref in _ready if (method := ref()) is not None]
        _ready[:] = [weakref.WeakMethod(method) for method in alive]
    return sum(method() for method in alive)


def enabled() -> bool:
    """Whether :func:`enable` turned the hooks on."""
    return _live is not None


def enable(*, tracer_provider: Any = None, meter_provider: Any = None) -> None:
    """Turn the hooks on (needs the ``stockade[otel]`` extra, or at least ``opentelemetry-api``).

    Args:
        tracer_provider: an OpenTelemetry ``TracerProvider`` (default: the global one,
            which is a no-op until the application sets one).
        meter_provider: an OpenTelemetry ``MeterProvider`` (default: the global one).

    Raises:
        RuntimeError: OpenTelemetry is not installed (install ``stockade[otel]``).
    """
    global _live  # noqa: PLW0603  # the one switch every hook reads
    try:
        from host.observe._live import Live  # noqa: PLC0415 - OpenTelemetry only once enabled
    except ImportError as exc:  # pragma: no cover - the suite installs the extra
        raise RuntimeError("observability needs OpenTelemetry: pip install 'stockade[otel]'") from exc
    _live = Live(
        tracer_provider=tracer_provider, meter_provider=meter_provider, sources=watched_sources,
        ready=ready_instances,
    )  # fmt: skip


def disable() -> None:
    """Turn the hooks off again (spans already exported stay exported)."""
    global _live  # noqa: PLW0603  # the one switch every hook reads
    _live = None
