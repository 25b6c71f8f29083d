"""The OpenTelemetry side of :mod:`host.observe`: imported only by :func:`host.observe.enable`.

Spans are started with ``record_exception=False``: an exception's message can quote an
input value (a schema error names the offending value), so a failed stage carries only its
stable error code (``error.type``) and an ERROR status without a description.

Cost: a stage inside a call whose span is not recorded (sampled out, or no SDK configured)
makes no span at all, only its measurements (:class:`TimedStage`); a stage without a metric
in such a call is the shared :data:`SKIPPED`. Label dicts are built only for the stages
that have metrics, and the stage histogram's attribute sets are built once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from types import TracebackType
from typing import Any, Final, final

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

SCOPE: Final = "stockade"
"""The instrumentation scope name of every span and instrument."""

_PROPAGATOR: Final = TraceContextTextMapPropagator()  # W3C traceparent/tracestate only: no baggage

# Attributes that are also metric labels (bounded sets: tool names of the registry, error
# codes, allowlisted hosts, outcome kinds) and the numbers metrics record.
_LABELS: Final = frozenset({
    "stockade.tool", "stockade.outcome", "server.address", "stockade.egress.outcome", "stockade.audit.kind",
})  # fmt: skip
_VALUES: Final = frozenset({
    "stockade.fuel_used", "stockade.egress.bytes_sent", "stockade.egress.bytes_received",
})  # fmt: skip
# Stages with a latency histogram: the pipeline's steps, not prepare's sub-steps (their
# spans show them; a histogram record costs about as much as one of them takes).
_TIMED: Final = frozenset({
    "stockade.prepare", "stockade.approval", "stockade.approval.wait", "stockade.rate_limit",
    "stockade.secrets", "stockade.sandbox", "stockade.mcp_source", "stockade.host_tool", "stockade.egress",
    "stockade.output", "stockade.audit.append",
})  # fmt: skip
# Spans that start a unit of work; every other stage is recorded only inside one of them, so
# a Host.prepare outside a call (the MCP server's tools/list hides denied tools with one
# per tool) or the audit records of opening a lock make no stray root spans.
_ROOTS: Final = frozenset({"stockade.call", "stockade.mcp.tools_call"})
# Outside any call, inside a call whose span is not recorded, inside a recorded one.
_OUTSIDE, _UNRECORDED, _RECORDED = 0, 1, 2
_CALL: Final[ContextVar[int]] = ContextVar("stockade_call", default=_OUTSIDE)
# Stages with a metric of their own (see Live.measured); the others only ever make spans.
_MEASURED: Final = _TIMED | {"stockade.call", "stockade.sandbox", "stockade.egress", "stockade.rate_limit",
                              "stockade.approval"}  # fmt: skip
_STAGE_ATTRIBUTES: Final = {name: {"stockade.stage": name} for name in _TIMED}
_NO_LABELS: Final[Mapping[str, str]] = {}
_NO_VALUES: Final[Mapping[str, int]] = {}
_UNKNOWN_TOOL: Final = "_unknown"  # a refused call names no registry tool: no untrusted string as a label

_METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"})


def error_code(exc: BaseException) -> str:
    """A failure's stable code: a StockadeError's ``code``, else the exception's class name."""
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) else type(exc).__name__


def _kept(
    labels: dict[str, str] | None, values: dict[str, int] | None, key: str, value: object
) -> tuple[dict[str, str] | None, dict[str, int] | None]:
    """A stage's labels and numbers after keeping ``key`` if its metrics use it (both
    dicts made on first use: most stages keep nothing)."""
    if key in _LABELS:
        labels = {} if labels is None else labels
        labels[key] = str(value)
    elif key in _VALUES and isinstance(value, int):
        values = {} if values is None else values
        values[key] = value
    return labels, values


@final
class LiveSpan:
    """One stage's span while it runs (the :class:`host.observe.Span` of a recorded stage)."""

    __slots__ = (
        "_attributes",
        "_call_token",
        "_error",
        "_kind",
        "_labels",
        "_live",
        "_measured",
        "_name",
        "_parent",
        "_span",
        "_started",
        "_token",
        "_values",
    )

    live = True

    def __init__(
        self,
        live: Live,
        name: str,
        attributes: Mapping[str, Any] | None,
        parent: Mapping[str, str] | None,
        kind: SpanKind = SpanKind.INTERNAL,
    ) -> None:
        self._live = live
        self._name = name
        self._attributes = attributes
        self._parent = parent
        self._kind = kind
        self._span: Any = None
        self._token: Any = None
        self._started = 0.0
        self._error: str | None = None
        self._call_token: Any = None
        self._measured = name in _MEASURED
        self._labels: dict[str, str] | None = None
        self._values: dict[str, int] | None = None
        if attributes and self._measured:
            for key, value in attributes.items():
                self._keep(key, value)

    def __enter__(self) -> LiveSpan:
        parent = None if self._parent is None else _PROPAGATOR.extract(dict(self._parent))
        span = self._span = self._live.tracer.start_span(
            self._name, context=parent, kind=self._kind, attributes=self._attributes,
            record_exception=False, set_status_on_exception=False,
        )  # fmt: skip
        self._token = otel_context.attach(trace.set_span_in_context(span))
        if self._name in _ROOTS:
            self._call_token = _CALL.set(_RECORDED if span.is_recording() else _UNRECORDED)
        self._started = time.perf_counter()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is not None:
            self.fail(error_code(exc))
        elapsed = time.perf_counter() - self._started
        if self._call_token is not None:
            _CALL.reset(self._call_token)
        otel_context.detach(self._token)
        self._span.end()
        if self._measured:
            self._live.measured(
                self._name, self._labels or _NO_LABELS, self._values or _NO_VALUES, elapsed, self._error
            )

    def set(self, key: str, value: str | int | float | bool) -> None:
        """Set one attribute."""
        self._span.set_attribute(key, value)
        if self._measured:
            self._keep(key, value)

    def update(self, attributes: Mapping[str, Any]) -> None:
        """Set several attributes at once."""
        self._span.set_attributes(attributes)
        if self._measured:
            for key, value in attributes.items():
                self._keep(key, value)

    def _keep(self, key: str, value: object) -> None:
        self._labels, self._values = _kept(self._labels, self._values, key, value)

    def event(self, name: str, attributes: Mapping[str, Any]) -> None:
        """Add one event."""
        self._span.add_event(name, attributes)

    def fail(self, code: str) -> None:
        """Mark the stage failed with ``code``; no description (it could quote an input)."""
        self._error = code
        self._span.set_attribute("error.type", code)
        self._span.set_status(Status(StatusCode.ERROR))


@final
class TimedStage:
    """A stage with metrics inside a call whose span is not recorded: no span, only the
    stage's duration, labels and numbers for :meth:`Live.measured`."""

    __slots__ = ("_error", "_labels", "_live", "_name", "_started", "_values")

    live = False

    def __init__(self, live: Live, name: str, attributes: Mapping[str, Any] | None) -> None:
        self._live = live
        self._name = name
        self._error: str | None = None
        self._labels: dict[str, str] | None = None
        self._values: dict[str, int] | None = None
        self._started = 0.0
        if attributes:
            self.update(attributes)

    def __enter__(self) -> TimedStage:
        self._started = time.perf_counter()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is not None:
            self._error = error_code(exc)
        elapsed = time.perf_counter() - self._started
        labels, values = self._labels or _NO_LABELS, self._values or _NO_VALUES
        self._live.measured(self._name, labels, values, elapsed, self._error)

    def set(self, key: str, value: str | int | float | bool) -> None:
        """Keep a label or a number the stage's metrics use (nothing else is kept)."""
        self._labels, self._values = _kept(self._labels, self._values, key, value)

    def update(self, attributes: Mapping[str, Any]) -> None:
        """:meth:`set` for each attribute."""
        for key, value in attributes.items():
            self.set(key, value)

    def event(self, name: str, attributes: Mapping[str, Any]) -> None:
        """No-op (no span)."""

    def fail(self, code: str) -> None:
        """The stage failed with ``code`` (its metrics' outcome)."""
        self._error = code


@final
class _Skipped:
    """A stage outside any call: not recorded (see :data:`_ROOTS`)."""

    __slots__ = ()

    live = False

    def __enter__(self) -> _Skipped:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    def set(self, key: str, value: str | int | float | bool) -> None:
        """No-op."""

    def update(self, attributes: Mapping[str, Any]) -> None:
        """No-op."""

    def event(self, name: str, attributes: Mapping[str, Any]) -> None:
        """No-op."""

    def fail(self, code: str) -> None:
        """No-op."""


SKIPPED: Final = _Skipped()


@final
class Live:
    """The tracer and instruments of an enabled host (see :func:`host.observe.enable`)."""

    INTERNAL: Final = SpanKind.INTERNAL
    SERVER: Final = SpanKind.SERVER

    def __init__(
        self,
        *,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        sources: Callable[[], list[tuple[str, int, int]]] = list,
        ready: Callable[[], int] = int,
    ) -> None:
        self.tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
        self.stage_duration = meter.create_histogram(
            "stockade.stage.duration", unit="s", description="Duration of one pipeline stage"
        )
        self.calls = meter.create_counter(
            "stockade.calls", unit="{call}", description="Calls by tool and outcome"
        )
        self.call_duration = meter.create_histogram(
            "stockade.call.duration", unit="s", description="Duration of one Host.call, by tool and outcome"
        )
        self.rate_limited = meter.create_counter(
            "stockade.rate_limit.refusals", unit="{call}", description="Calls refused by a rate limit"
        )
        self.approvals = meter.create_counter(
            "stockade.approvals", unit="{event}", description="Approval events (requested, granted, denied, "
            "redeemed, invalid: forged, reused or expired)",
        )  # fmt: skip
        self.fuel = meter.create_histogram(
            "stockade.sandbox.fuel", unit="{fuel}", description="Fuel one sandbox run consumed"
        )
        self.egress_requests = meter.create_counter(
            "stockade.egress.requests",
            unit="{request}",
            description="Guest HTTP requests by host and outcome",
        )
        self._sources = sources
        self.fsync_duration = meter.create_histogram(
            "stockade.audit.fsync.duration", unit="s", description="Latency of one audit log fsync"
        )
        self.fsync_batch = meter.create_histogram(
            "stockade.audit.batch.records", unit="{record}",
            description="Audit records one fsync made durable (group commit)",
        )  # fmt: skip
        self.fsync_failures = meter.create_counter(
            "stockade.audit.fsync.failures", unit="{fsync}", description="Audit log fsyncs that failed"
        )
        meter.create_observable_counter(
            "stockade.mcp.restarts", [self._restarts], unit="{restart}",
            description="Restarts of each pinned MCP source's server (connects after the first)",
        )  # fmt: skip
        meter.create_observable_gauge(
            "stockade.mcp.drift", [self._drift], unit="{tool}",
            description="Tools of each pinned MCP source whose live definition differs from the pin",
        )  # fmt: skip
        self._ready = ready
        meter.create_observable_gauge(
            "stockade.sandbox.ready_instances", [self._ready_instances], unit="{instance}",
            description="Instances instantiated ahead of the calls that will take them, ready now",
        )  # fmt: skip
        self.store_errors = meter.create_counter(
            "stockade.store.errors", unit="{error}",
            description="State-store operations that failed, by backend, operation and error code",
        )  # fmt: skip
        self.egress_bytes = meter.create_counter(
            "stockade.egress.bytes", unit="By", description="Egress bytes by host and direction"
        )

    def measured(
        self,
        name: str,
        labels: Mapping[str, str],
        values: Mapping[str, int],
        elapsed: float,
        error: str | None,
    ) -> None:
        """The metrics of one finished stage (its name, labels and numbers)."""
        stage = _STAGE_ATTRIBUTES.get(name)
        if stage is not None:
            self.stage_duration.record(elapsed, stage)
        if name == "stockade.call":
            by = {"stockade.tool": labels.get("stockade.tool", _UNKNOWN_TOOL),
                  "stockade.outcome": labels.get("stockade.outcome", error or "ok")}  # fmt: skip
            self.calls.add(1, by)
            self.call_duration.record(elapsed, by)
        elif name == "stockade.sandbox" and "stockade.fuel_used" in values:
            tool = labels.get("stockade.tool", _UNKNOWN_TOOL)
            self.fuel.record(values["stockade.fuel_used"], {"stockade.tool": tool})
        elif name == "stockade.egress":
            host = {"server.address": labels.get("server.address", "")}
            outcome = labels.get("stockade.egress.outcome", "")
            self.egress_requests.add(1, host | {"stockade.egress.outcome": outcome})
            sent, received = (
                values.get("stockade.egress.bytes_sent", 0),
                values.get("stockade.egress.bytes_received", 0),
            )
            self.egress_bytes.add(sent, host | {"network.io.direction": "transmit"})
            self.egress_bytes.add(received, host | {"network.io.direction": "receive"})
        elif name == "stockade.rate_limit" and error == "RATE_LIMITED":
            self.rate_limited.add(1)
        elif name == "stockade.approval":
            self.approvals.add(1, {"stockade.approval.event": "invalid" if error else "redeemed"})

    def _restarts(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(restarts, {"stockade.source": name}) for name, restarts, _ in self._sources()]

    def _drift(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(drifted, {"stockade.source": name}) for name, _, drifted in self._sources()]

    def _ready_instances(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(self._ready())]

    def store_error(self, backend: str, operation: str, code: str) -> None:
        """One failed state-store operation."""
        self.store_errors.add(1, {
            "stockade.store.backend": backend, "stockade.store.operation": operation, "error.type": code,
        })  # fmt: skip

    def audit_synced(self, records: int, seconds: float, failed: bool) -> None:
        """One group commit of the audit log."""
        if failed:
            self.fsync_failures.add(1)
            return
        self.fsync_duration.record(seconds)
        self.fsync_batch.record(records)

    def approval(self, event: str, channel: str) -> None:
        """Count one approval event a front end recorded."""
        self.approvals.add(1, {"stockade.approval.event": event, "stockade.approval.channel": channel})

    def span(
        self,
        name: str,
        attributes: Mapping[str, Any] | None,
        parent: Mapping[str, str] | None,
        kind: SpanKind = SpanKind.INTERNAL,
    ) -> LiveSpan | TimedStage | _Skipped:
        """A stage's span (see :func:`host.observe.span`); nothing outside a call, and only
        the stage's measurements inside a call whose span is not recorded."""
        if name not in _ROOTS:
            state = _CALL.get()
            if state == _OUTSIDE:
                return SKIPPED
            if state == _UNRECORDED:
                return TimedStage(self, name, attributes) if name in _MEASURED else SKIPPED
        return LiveSpan(self, name, attributes, parent, kind)

    def trace_id(self) -> str | None:
        """The current span's trace id, if it is recorded."""
        context = trace.get_current_span().get_span_context()
        return format(context.trace_id, "032x") if context.is_valid else None

    def outbound(self) -> list[tuple[str, str]]:
        """The current span's trace context headers (none outside a recorded span)."""
        headers: dict[str, str] = {}
        _PROPAGATOR.inject(headers)
        return list(headers.items())

    def span_ids(self) -> tuple[str, str] | None:
        """The current span's trace and span ids, if it is recorded."""
        context = trace.get_current_span().get_span_context()
        if not context.is_valid:
            return None
        return format(context.trace_id, "032x"), format(context.span_id, "016x")

    def audit_append(self, sink: Any, kind: str, payload: Mapping[str, object], durable: bool | None) -> str:
        """One audit append as a span; the record gains the trace id when there is one."""
        with self.span("stockade.audit.append", {"stockade.audit.kind": kind}, None) as span:
            trace_id = self.trace_id()
            if trace_id is not None and "trace_id" not in payload:
                payload = {**payload, "trace_id": trace_id}
            record_id: str = sink.append(kind, payload, durable=durable)
            span.set("stockade.audit.record", record_id)
            return record_id

    def egress(self, port: Any, records: Any) -> TracedEgress:
        """``port`` with one CLIENT span per request (see :func:`host.observe.egress`)."""
        return TracedEgress(self, port, records)


@final
class TracedEgress:
    """An egress port whose every request is a span built from its audit records.

    The attributes come from the records the egress session keeps for the audit log (host
    already redacted; no path, no query, no header), one span per guest request with one
    ``stockade.egress.redirect`` event per redirect hop it followed.
    """

    __slots__ = ("_inner", "_live", "_records")

    def __init__(self, live: Live, inner: Any, records: Any) -> None:
        self._live = live
        self._inner = inner
        self._records = records

    def send(self, request: Any) -> Any:
        """Send through the wrapped port inside a span."""
        before = self._count()
        method = request.method if request.method in _METHODS else "_OTHER"
        attributes = {"http.request.method": method}
        with self._live.span("stockade.egress", attributes, None, SpanKind.CLIENT) as span:
            answer = self._inner.send(request)
            hops = self._hops(before)
            status = getattr(answer, "status", None)
            outcome = "ok" if status is not None else str(getattr(answer, "kind", "failed"))
            for hop in hops[:-1]:
                span.event("stockade.egress.redirect", {
                    "server.address": hop.host, "http.request.method": hop.method,
                    "http.response.status_code": hop.status or 0,
                })  # fmt: skip
            if hops:
                last = hops[-1]
                outcome = last.outcome
                span.set("server.address", last.host)
            span.set("stockade.egress.outcome", outcome)
            span.set("stockade.egress.redirects", max(len(hops) - 1, 0))
            span.set("stockade.egress.bytes_sent", sum(h.bytes_sent for h in hops))
            span.set("stockade.egress.bytes_received", sum(h.bytes_received for h in hops))
            if status is not None:
                span.set("http.response.status_code", status)
            if outcome != "ok":
                span.fail(outcome.split(":", 1)[0])
            return answer

    def _count(self) -> int:
        usage = getattr(self._records, "usage", None)
        return 0 if usage is None else len(usage.requests)

    def _hops(self, before: int) -> list[Any]:
        usage = getattr(self._records, "usage", None)
        return [] if usage is None else list(usage.requests[before:])
