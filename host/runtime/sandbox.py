"""One call in a fresh sandbox (docs/design.md §8).

Per call: a new ``Store`` and a new instance (never reused), fuel = the manifest's limit,
an epoch deadline from the timeout (ticks of 10 ms, rounded up, plus one), store limits
derived from the component's census, WASI with nothing granted (no environment, no
arguments, empty stdin, no network; stdout/stderr into the call log; no preopens but the
read-only ones the caller passes, see :class:`Preopen`), and the host functions bound to
this call's :class:`~host.runtime.imports.CallContext`.

Memory aggregated over all memories. wasmtime's store limiter (the only one wasmtime-py
exposes) caps each linear memory separately. The census counts the memories the
component defines (``N``); the store may create at most ``N`` memories and each may
grow to ``memory_bytes // N``, so their sum never exceeds ``memory_bytes``. Every
componentize-py and componentize-js plugin measured here defines exactly one memory,
which therefore gets the whole budget.

How SANDBOX_MEMORY is detected. A refused ``memory.grow`` returns -1 to the guest; it
does not trap, and wasmtime-py offers no callback on refusal (its C API has no
ResourceLimiter hook; a custom memory creator would mean implementing linear memory,
guard pages included, in Python, and would lose copy-on-write instantiation). So a
failure is reported as SANDBOX_MEMORY when it is a trap or abort (not fuel, not the
deadline) and there is evidence of memory exhaustion in this call: wasmtime's own
memory-limit errors (an initial memory larger than the limit, more memories than
allowed), or the allocator-failure message language runtimes print before aborting
(``MemoryError``, ``out of memory``, ``memory allocation of N bytes failed``) in the trap
text or anywhere in the call's output, including output dropped past ``max_log_bytes``.
A guest can fake that message; it only relabels its own crash. A guest that exhausts
memory silently and then traps is reported as SANDBOX_TRAP; either way the limit held.
The Python guest SDK catches ``MemoryError`` (so the instance ends cleanly) and returns
``failed`` with exactly :data:`GUEST_OUT_OF_MEMORY`; that answer is SANDBOX_MEMORY too.

The deadline bounds the wall time of the whole call (docs/design.md §12). Epoch interruption stops
running wasm; a guest blocked in WASI wakes by the deadline because the monotonic clock
is the host's (:mod:`host.runtime.clock`); and a call that *ends* past its deadline is
SANDBOX_TIMEOUT whatever the guest returned.

Traps are classified in this order: deadline (the clock refused a subscription after the
deadline, or the call ended past it), host import failures, fuel (no fuel left), deadline
(epoch interrupt), memory (above), everything else SANDBOX_TRAP. Trap text is reordered (cause first, then
the backtrace), scrubbed and capped at ``trap_text_bytes``. Every error carries
``details["usage"]`` (a :class:`SandboxUsage` dict) and ``details["log"]``.

``post_return``: wasmtime 50 runs the callee's post-return function inside
``Func.__call__`` (a second call on the same instance works without it, and a
post-return counter advances on every call); the explicit ``post_return`` kept here is
then a no-op and keeps the contract on wasmtime versions where it is not.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, final

import wasmtime
from wasmtime import component as wc

from host.egress.port import EgressPort
from host.errors import (
    CallCancelled,
    InputInvalid,
    SandboxFuelExhausted,
    SandboxMemory,
    SandboxTimeout,
    SandboxTrap,
    ToolFailed,
)
from host.runtime import _compat
from host.runtime._calltype import CallType
from host.runtime.binary import Census
from host.runtime.calllog import CallLog, mentions_oom
from host.runtime.checks import CALL_EXPORT, ComponentShape
from host.runtime.engine import PoolFull, PoolSlots, deadline_ticks
from host.runtime.imports import CallContext, activate, deactivate
from host.runtime.interrupt import InterruptWatch
from host.runtime.models import ClockBridge, LogLine, SandboxLimits, SandboxResult, SandboxUsage
from host.runtime.ready import LogSink, ReadyInstance, ReadyPools

__all__ = [
    "TABLE_HEADROOM", "LoadedComponent", "Preopen", "execute", "new_store", "ready_pools", "store_limits",
]  # fmt: skip

_compat.apply()

TABLE_HEADROOM: Final = 10_000
"""Table elements a table may grow beyond the largest initial table of the component."""

_WASMTIME_MEMORY_ERRORS: Final = (
    "exceeds memory limits",
    "memory count too high",
    "allocation too large",
)


# wasmtime's pooling allocator, when every slot of a kind is taken ("maximum concurrent
# limit of 64 for component instances reached"); raised before any guest code runs.
_POOL_FULL: Final = re.compile(r"\Amaximum concurrent (?:\w+ )*limit of \d+ for [\w -]+ reached\Z")


@final
@dataclass(frozen=True, slots=True, eq=False)
class LoadedComponent:
    """A compiled, checked component, ready to run. Immutable; shared by all its calls.

    Args:
        name: the name given at load (for messages).
        sha256: hex sha256 of the module bytes.
        component: the compiled wasmtime component.
        shape: what the load-time checks learned.
        census: what instantiation creates (drives the store limits).
        call_index: the export index of ``call`` (saves a name lookup per call).
        call_type: the resolved type of ``call`` (saves type queries per call).
    """

    name: str
    sha256: str
    component: wc.Component
    shape: ComponentShape
    census: Census
    call_index: wc.ExportIndex
    call_type: CallType

    def __repr__(self) -> str:
        return f"LoadedComponent(name={self.name!r}, sha256={self.sha256[:12]}…)"


@final
@dataclass(frozen=True, slots=True)
class Preopen:
    """A directory a call's guest may read: a read-only WASI preopen.

    Args:
        fd: an open directory fd owned by the caller (kept open until ``execute``
            returns). wasmtime opens the directory again through ``/proc/self/fd/<fd>``,
            which names exactly the inode the caller opened (its race-free resolution
            beneath a root is the caller's), never a path looked up again.
        guest_path: where the guest sees it (absolute, e.g. ``/workspace/docs``).

    Read-only is wasmtime's ``fs_mutable=False``: no file or directory may be created,
    written, renamed, removed or linked beneath it; ``..``, absolute paths and symlinks
    leading out of it are refused by wasmtime's capability-based resolution.
    """

    fd: int
    guest_path: str


def store_limits(census: Census, memory_bytes: int, *, extra_instances: int = 0) -> dict[str, int]:
    """``Store.set_limits`` arguments for a component under a memory budget.

    Args:
        census: the component's counts.
        memory_bytes: the call's memory limit, summed over all memories.
        extra_instances: core instances the host itself adds to the store (the clock
            bridge of :mod:`host.runtime.clock`; it defines no memory or table).

    Returns:
        keyword arguments for ``Store.set_limits``.
    """
    return {
        "memory_size": memory_bytes // max(census.memories, 1),
        "memories": census.memories,
        "tables": census.tables,
        "table_elements": census.max_table_elements + TABLE_HEADROOM,
        "instances": census.instances + extra_instances,
    }


@dataclass(slots=True)
class _Outcome:
    value: Any = None
    failure: BaseException | None = None
    instantiated: bool = False


def execute(
    *,
    engine: wasmtime.Engine,
    linker: wc.Linker,
    loaded: LoadedComponent,
    tool: str,
    input_json: str,
    limits: SandboxLimits,
    egress: EgressPort,
    secret_available: Callable[[str], bool],
    scrub: Callable[[str], str],
    trap_text_bytes: int,
    interrupt: threading.Event | None = None,
    clock: ClockBridge | None = None,
    request_body_ceiling: int = 8 << 20,
    preopens: Sequence[Preopen] = (),
    pools: ReadyPools | None = None,
    slots: PoolSlots | None = None,
) -> SandboxResult:
    """Run ``call(tool, input_json)`` in a fresh store and instance.

    Args:
        engine: the runtime's engine.
        linker: the runtime's shared linker.
        loaded: the component.
        tool: the tool name passed to ``call``.
        input_json: the canonical JSON input passed to ``call``.
        limits: the call's limits.
        egress: the call's egress port.
        secret_available: whether a secret is staged for this call.
        scrub: removes staged secret values from text leaving the sandbox.
        trap_text_bytes: cap on the trap text kept.
        interrupt: set from another thread to stop the guest within one epoch tick
            (:mod:`host.runtime.interrupt`); the call then raises CallCancelled.
        clock: the deadline clock installed in ``linker`` (required for WASI guests).
        request_body_ceiling: bytes; a guest request body over it is ``too-large``.
        preopens: read-only directories the guest may read (WASI guests only).
        pools: the runtime's ready instances (:mod:`host.runtime.ready`); a call with
            preopens never takes one.
        slots: the admission tickets of a pooled ``engine`` (``None``: on demand).

    Raises:
        CallCancelled: ``interrupt`` was set while the guest ran.
        SandboxFuelExhausted, SandboxTimeout, SandboxMemory, SandboxTrap: the guest
            trapped (or could not be instantiated); ``details["usage"]`` says what it used.
            A call that ends after its deadline is SandboxTimeout whatever the guest
            returned (it may have slept in WASI until the clamped wake-up).
        InputInvalid: the guest returned ``invalid-input``.
        ToolFailed: the guest returned ``failed``.
        PoolFull: ``engine``'s pooling allocator has no free slot; nothing ran.

    Returns:
        the guest's output, the call log and usage.
    """
    log = CallLog(limits.max_log_bytes)
    if loaded.shape.uses_wasi and clock is None:
        raise RuntimeError("a WASI guest needs the deadline clock (host.runtime.clock)")
    started = time.perf_counter()
    deadline_ns = time.monotonic_ns() + limits.timeout_ms * 1_000_000
    context = CallContext(
        egress, secret_available, log,
        deadline_ns=deadline_ns, clock=clock, body_ceiling=request_body_ceiling,
    )
    ready = pools.take((loaded.sha256, limits)) if pools is not None and not preopens else None
    if ready is not None:
        store = ready.store
        # The fuel its instantiation used counts, as for an instance made for the call.
        store.set_fuel(max(limits.fuel - ready.instantiation_fuel, 0))
        ready.sink.attach(log)
    else:
        wasi = _wasi_config(log, preopens) if loaded.shape.uses_wasi else None
        store = new_store(engine, loaded, limits, clock, wasi, slots=slots)
        store.set_fuel(limits.fuel)
    watch = None
    if interrupt is None:
        store.set_epoch_deadline(deadline_ticks(limits.timeout_ms))
    else:
        watch = InterruptWatch.install(store, interrupt, deadline_ticks(limits.timeout_ms))
    outcome = _invoke(
        store, linker, loaded, context, call_args=(tool, input_json), ready=ready, pools=pools, limits=limits
    )
    if time.monotonic_ns() > deadline_ns:
        # The wall-time bound of docs/design.md §12: a guest woken from a clamped WASI sleep may
        # return before meeting another epoch check; its answer came too late.
        context.deadline_hit = True
    fuel_left = store.get_fuel()
    if ready is not None and pools is not None:
        pools.discard(store)  # dropped on the pool's thread, off this call's path
    del store, ready  # free the instance and its memories now, not when the caller drops an error
    if not outcome.instantiated and _pool_full(outcome.failure):
        raise PoolFull(str(outcome.failure).strip())
    usage = SandboxUsage(
        fuel_consumed=limits.fuel - fuel_left,
        wall_ms=(time.perf_counter() - started) * 1000.0,
        log_bytes=log.kept_bytes,
        log_truncated=log.truncated,
    )
    if context.fatal is not None:
        raise context.fatal
    lines = log.lines(scrub)
    if outcome.failure is not None and watch is not None and watch.cancelled:
        raise CallCancelled(f"the caller cancelled the call of {loaded.name!r}", **_details(usage, lines))
    if outcome.failure is None and context.deadline_hit:
        raise SandboxTimeout(
            f"the call ran past its {limits.timeout_ms} ms deadline", **_details(usage, lines)
        )
    if outcome.failure is not None:
        raise _classify(
            outcome.failure,
            context,
            name=loaded.name,
            limits=limits,
            details=_details(usage, lines),
            fuel_left=fuel_left,
            scrub=scrub,
            trap_text_bytes=trap_text_bytes,
        )
    return _result(outcome.value, usage, lines, scrub)


def new_store(
    engine: wasmtime.Engine,
    loaded: LoadedComponent,
    limits: SandboxLimits,
    clock: ClockBridge | None,
    wasi: wasmtime.WasiConfig | None,
    *,
    slots: PoolSlots | None = None,
) -> wasmtime.Store:
    """A fresh store for one instance of ``loaded`` under ``limits`` (fuel and deadline
    are the caller's to set).

    Raises:
        PoolFull: ``slots`` has no free ticket (nothing was created).
    """
    if slots is not None:
        slots.admit()
        try:
            store = wasmtime.Store(engine)
        except BaseException:
            slots.release()
            raise
        slots.bind(store)
    else:
        store = wasmtime.Store(engine)
    extra = clock.extra_instances if clock is not None and loaded.shape.uses_wasi else 0
    store.set_limits(**store_limits(loaded.census, limits.memory_bytes, extra_instances=extra))
    if wasi is not None:
        store.set_wasi(wasi)
    return store


def ready_pools(
    engine: wasmtime.Engine,
    linker: wc.Linker,
    clock: ClockBridge | None,
    *,
    depth: int,
    slots: PoolSlots | None = None,
) -> ReadyPools:
    """The ready-instance pools of a runtime (:mod:`host.runtime.ready`) on this sandbox's
    own store set-up: the same limits and WASI context as an instance made for a call."""

    def make_store(component: object, limits: SandboxLimits, sink: LogSink) -> wasmtime.Store:
        assert isinstance(component, LoadedComponent)
        wasi = _wasi_config(sink, ()) if component.shape.uses_wasi else None
        return new_store(engine, component, limits, clock, wasi, slots=slots)

    def instantiate(store: wasmtime.Store, component: object) -> wc.Func:
        assert isinstance(component, LoadedComponent)
        func = linker.instantiate(store, component.component).get_func(store, component.call_index)
        if func is None:  # checked at load; an instance always has it
            raise wasmtime.WasmtimeError("the instance has no `call` export")
        return func

    return ReadyPools(depth=depth, make_store=make_store, instantiate=instantiate)


def _wasi_config(log: CallLog | LogSink, preopens: Sequence[Preopen]) -> wasmtime.WasiConfig:
    # A default WasiConfig grants nothing: no preopens, no environment, no arguments,
    # empty stdin, and socket operations are denied (verified against a real listener).
    wasi = wasmtime.WasiConfig()
    wasi.stdout_custom = log.writer("stdout")
    wasi.stderr_custom = log.writer("stderr")
    for preopen in preopens:
        # fs_mutable=False: wasmtime's read-only directory and file permissions.
        wasi.preopen_dir(f"/proc/self/fd/{preopen.fd}", preopen.guest_path, False)
    return wasi


def _invoke(
    store: wasmtime.Store,
    linker: wc.Linker,
    loaded: LoadedComponent,
    context: CallContext,
    *,
    call_args: tuple[str, str],
    ready: ReadyInstance | None,
    pools: ReadyPools | None,
    limits: SandboxLimits,
) -> _Outcome:
    outcome = _Outcome()
    previous = activate(context)
    try:
        if ready is not None:
            func = ready.func
            outcome.instantiated = True
        else:
            started = time.perf_counter()
            instance = linker.instantiate(store, loaded.component)
            if pools is not None:
                pools.observe((loaded.sha256, limits), loaded, time.perf_counter() - started)
            found = instance.get_func(store, loaded.call_index)
            if found is None:  # checked at load; an instance always has it
                raise wasmtime.WasmtimeError("the instance has no `call` export")
            func = found
            outcome.instantiated = True
        outcome.value = loaded.call_type.bind(func)(store, *call_args)
        func.post_return(store)
    except Exception as exc:
        # Drop the traceback: its frames hold the store, and with it the guest's memory,
        # for as long as anyone keeps the error.
        outcome.failure = exc.with_traceback(None)
    finally:
        deactivate(previous)
    return outcome


def _pool_full(failure: BaseException | None) -> bool:
    """Whether instantiation failed only because the allocator's pool is full (not a trap)."""
    return isinstance(failure, wasmtime.WasmtimeError) and _POOL_FULL.match(str(failure).strip()) is not None


GUEST_OUT_OF_MEMORY = "out of memory (MemoryError)"
"""The ``failed`` text the guest SDKs return for a caught out-of-memory error."""


def _result(
    value: Any, usage: SandboxUsage, lines: tuple[LogLine, ...], scrub: Callable[[str], str]
) -> SandboxResult:
    if isinstance(value, str):
        return SandboxResult(output=value, log=lines, usage=usage)
    details = _details(usage, lines)
    if isinstance(value, wc.Variant) and isinstance(value.payload, str):
        message = scrub(value.payload)
        if value.tag == "invalid-input":
            raise InputInvalid(f"the tool refused its input: {message}", **details)
        if value.tag == "failed" and value.payload == GUEST_OUT_OF_MEMORY:
            raise SandboxMemory("the guest ran out of memory within its limit (MemoryError)", **details)
        if value.tag == "failed":
            raise ToolFailed(f"the tool failed: {message}", **details)
    raise SandboxTrap(f"`{CALL_EXPORT}` returned a value outside its type", **details)


def _details(usage: SandboxUsage, lines: tuple[LogLine, ...]) -> dict[str, Any]:
    return {
        "usage": usage.to_dict(),
        "log": [{"source": ln.source, "level": ln.level, "text": ln.text} for ln in lines],
    }


def _classify(
    failure: BaseException,
    context: CallContext,
    *,
    name: str,
    limits: SandboxLimits,
    details: dict[str, Any],
    fuel_left: int,
    scrub: Callable[[str], str],
    trap_text_bytes: int,
) -> SandboxTrap:
    raw = str(failure) if isinstance(failure, wasmtime.WasmtimeError) else ""
    cause, text = _trap_text(raw)
    details["trap"] = _cap_utf8(scrub(text), trap_text_bytes)
    error: SandboxTrap
    if not isinstance(failure, wasmtime.WasmtimeError):
        error = SandboxTrap(f"internal error while running {name!r}", **details)
    elif context.deadline_hit and fuel_left > 0:
        error = SandboxTimeout(f"the call ran past its {limits.timeout_ms} ms deadline", **details)
    elif context.host_failure is not None:
        function = context.host_failure[0]
        error = SandboxTrap(f"host import `{function}` failed while serving the guest", **details)
    elif fuel_left == 0 or "all fuel consumed" in cause:
        error = SandboxFuelExhausted(f"the call used all of its {limits.fuel} fuel", **details)
    elif "wasm trap: interrupt" in cause:
        error = SandboxTimeout(f"the call ran past its {limits.timeout_ms} ms deadline", **details)
    elif any(m in cause for m in _WASMTIME_MEMORY_ERRORS) or mentions_oom(raw) or context.log.saw_oom:
        error = SandboxMemory(
            f"the call exhausted its {limits.memory_bytes}-byte memory limit: {details['trap']}", **details
        )
    elif isinstance(failure, wasmtime.ExitTrap):
        error = SandboxTrap(f"the guest exited with status {failure.code}", **details)
    else:
        error = SandboxTrap(f"the guest trapped: {details['trap']}", **details)
    if context.host_failure is not None:
        error.__cause__ = context.host_failure[1]  # for the host's logs; never in the message
    elif not isinstance(failure, wasmtime.WasmtimeError):
        error.__cause__ = failure
    return error


def _trap_text(raw: str) -> tuple[str, str]:
    """(cause, text): the text puts wasmtime's "Caused by" lines before the backtrace."""
    head, sep, tail = raw.partition("Caused by:")
    if not sep:
        return raw, raw.strip()
    cause = " ".join(line.strip() for line in tail.strip().splitlines() if line.strip())
    return cause, f"{cause}\n{head.strip()}"


def _cap_utf8(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    marker = "…[truncated]"
    room = max(limit - len(marker.encode()), 0)
    return data[:room].decode("utf-8", "ignore") + marker
