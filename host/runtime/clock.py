"""The guest's monotonic clock: no WASI sleep outlives the call deadline (docs/design.md §8, §12).

The problem. Epoch interruption stops a guest only at wasm function entries and loop
back-edges, never inside a host function. wasmtime's native WASI
``wasi:io/poll#[method]pollable.block`` and ``#poll`` block in Rust until a pollable is
ready; a guest that subscribes to ``monotonic-clock.subscribe-duration(8 s)`` and blocks
on it under a 1 s deadline would sleep 8 s.

Where a pollable can come from, with the WASI context the sandbox builds (no preopens,
no environment, empty closed stdin, stdout/stderr as host callbacks, sockets and name
lookup denied):

- ``wasi:clocks/monotonic-clock`` ``subscribe-duration`` / ``subscribe-instant``: the
  only source that can stay pending. Replaced here (below).
- ``input-stream.subscribe`` on stdin: ready at once (the stream is closed);
  ``output-stream.subscribe`` on stdout/stderr: ready at once (host callbacks).
- files and sockets: none can be opened (no preopens; sockets are refused at creation).

``tests/security/test_sandbox_wasi_blocking.py`` proves each of these with a guest.

The repair. The linker's ``wasi:clocks/monotonic-clock`` instance (the exact version
wasmtime's WASI defines; a guest importing any ``0.2.x`` resolves to it by semver) is
replaced by host functions:

- ``now`` and ``resolution`` stay wasmtime's own: reading the clock cannot block, and a
  host function in Python costs several µs per read (a componentize-js guest reads it
  about 8 times per call);
- ``subscribe-duration(d)`` / ``subscribe-instant(t)`` — a *native* clock pollable that
  is ready at ``min(requested, deadline + DEADLINE_OVERSHOOT_NS)``. Once the deadline has
  passed, a subscription is refused with a trap the sandbox reports as SANDBOX_TIMEOUT.
  ``t`` is an instant on the guest's clock (wasmtime's ``now``, whose origin is its
  own), so it is turned into a duration with the native ``now`` read through the bridge.

Native pollables must stay native (``wasi:io/streams`` and ``wasi:io/poll`` are wasmtime's
own and only accept their resource type), so they are made by the *clock bridge*: a
tiny component that imports the native clock and re-exports ``subscribe-duration`` and
``now``. It
is instantiated, with a linker holding only native WASI, in the call's own store the
first time the guest subscribes; the pollable it returns is handed to the guest as an
``own<pollable>`` of wasmtime's type, and the guest's ``resource.drop`` frees it natively.

So ``pollable.block`` and ``poll`` return by the deadline plus
:data:`DEADLINE_OVERSHOOT_NS`; the guest then meets an epoch check (SANDBOX_TIMEOUT), or
returns, and the sandbox answers SANDBOX_TIMEOUT because the call ended past its
deadline (:mod:`host.runtime.sandbox`). No thread is started and nothing outlives the
store.

A guest could declare the clock's ``pollable`` as a fresh resource instead of the poll
interface's; its drops would then reach this module's no-op destructor and leave the
native entry in the store until the call ends. :data:`MAX_CLOCK_SUBSCRIPTIONS` bounds
that per call.

Example::

    linker = build_linker(engine)
    clock = install_deadline_clock(linker, engine)     # after add_wasip2
    ...  # per call: CallContext(..., deadline_ns=...), clock.extra_instances in limits
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

import wasmtime
from wasmtime import component as wc

from host.runtime.binary import census
from host.runtime.imports import CallContext, current_context
from host.runtime.models import ClockBridge

__all__ = [
    "CLOCK_BRIDGE_WAT",
    "DEADLINE_OVERSHOOT_NS",
    "MAX_CLOCK_SUBSCRIPTIONS",
    "DeadlineExceeded",
    "install_deadline_clock",
    "native_clock_interface",
]

DEADLINE_OVERSHOOT_NS: Final = 10_000_000
"""A clamped sleep ends this long (one epoch tick) after the deadline, so the sandbox's
wall-time check and the epoch deadline have both passed when the guest wakes."""

MAX_CLOCK_SUBSCRIPTIONS: Final = 65_536
"""Clock subscriptions one call may make (each holds a native table entry until dropped)."""

_CLOCK_PACKAGE: Final = "wasi:clocks/monotonic-clock@0.2."
_MAX_PATCH_PROBED: Final = 200

CLOCK_BRIDGE_WAT: Final = """
(component
  (import "wasi:io/poll@0.2.0" (instance $poll (export "pollable" (type (sub resource)))))
  (alias export $poll "pollable" (type $pollable))
  (import "wasi:clocks/monotonic-clock@0.2.0" (instance $clock
    (alias outer 1 $pollable (type $p))
    (export "pollable" (type $p2 (eq $p)))
    (export "now" (func (result u64)))
    (export "subscribe-duration" (func (param "when" u64) (result (own $p2))))))
  (alias export $clock "subscribe-duration" (func $subscribe))
  (alias export $clock "now" (func $now))
  (core func $subscribe-core (canon lower (func $subscribe)))
  (core func $now-core (canon lower (func $now)))
  (core module $Bridge
    (import "wasi" "subscribe" (func $subscribe (param i64) (result i32)))
    (import "wasi" "now" (func $now (result i64)))
    (func (export "subscribe") (param i64) (result i32) (call $subscribe (local.get 0)))
    (func (export "now") (result i64) (call $now)))
  (core instance $bridge (instantiate $Bridge
    (with "wasi" (instance (export "subscribe" (func $subscribe-core)) (export "now" (func $now-core))))))
  (func $lifted (param "when" u64) (result (own $pollable))
    (canon lift (core func $bridge "subscribe")))
  (func $lifted-now (result u64) (canon lift (core func $bridge "now")))
  (export "subscribe-duration" (func $lifted))
  (export "now" (func $lifted-now))
)
"""
"""The clock bridge: wasmtime's own ``subscribe-duration`` and ``now``, callable from the host."""


class DeadlineExceeded(wasmtime.WasmtimeError):
    """Raised into wasmtime when a guest subscribes to the clock after its deadline."""


def native_clock_interface(engine: wasmtime.Engine) -> str:
    """The exact ``wasi:clocks/monotonic-clock@0.2.N`` name wasmtime's WASI defines.

    A scratch linker with WASI is asked to define ``now`` in each candidate instance;
    only the one wasmtime already defines refuses ("defined twice").

    Raises:
        RuntimeError: none found (a wasmtime whose WASI this module does not know: the
            deadline could not be enforced, so the runtime must not start).
    """
    scratch = wc.Linker(engine)
    scratch.add_wasip2()
    with scratch.root() as root:
        for patch in range(_MAX_PATCH_PROBED):
            name = f"{_CLOCK_PACKAGE}{patch}"
            with root.add_instance(name) as instance:
                try:
                    instance.add_func("now", _now)
                except wasmtime.WasmtimeError as exc:
                    if "defined twice" in str(exc):
                        return name
                    raise
    raise RuntimeError(
        "wasmtime's WASI defines no wasi:clocks/monotonic-clock@0.2.x this runtime can "
        "replace; WASI sleeps could outlive the call deadline, so the runtime refuses to start"
    )


def install_deadline_clock(linker: wc.Linker, engine: wasmtime.Engine) -> ClockBridge:
    """Replace the monotonic clock of ``linker`` (which already holds WASI p2).

    Args:
        linker: the runtime's linker, after ``add_wasip2`` (nothing instantiated yet).
        engine: the runtime's engine.

    Raises:
        RuntimeError: the native clock cannot be found or replaced.

    Returns:
        the bridge the sandbox uses per call.
    """
    interface = native_clock_interface(engine)
    native = wc.Linker(engine)
    native.add_wasip2()
    binary = wasmtime.wat2wasm(CLOCK_BRIDGE_WAT)
    component = wc.Component(engine, binary)
    pollable = _native_pollable_type(engine, native, component)
    linker.allow_shadowing = True
    try:
        with linker.root() as root, root.add_instance(interface) as clock:
            # ``now`` and ``resolution`` stay wasmtime's own (native speed: a JavaScript
            # guest reads the clock several times per call); only subscriptions are ours.
            clock.add_resource("pollable", pollable, _no_drop)
            clock.add_func("subscribe-duration", _guarded(_subscribe_duration))
            clock.add_func("subscribe-instant", _guarded(_subscribe_instant))
    finally:
        linker.allow_shadowing = False
    return ClockBridge(native, component, census(bytes(binary)).instances, interface)


def _native_pollable_type(
    engine: wasmtime.Engine, native: wc.Linker, component: wc.Component
) -> wc.ResourceType:
    """wasmtime's pollable resource type, read off one pollable made in a scratch store."""
    store = wasmtime.Store(engine)
    store.set_wasi(wasmtime.WasiConfig())
    store.set_fuel(1_000_000)  # the runtime's engine meters fuel and epochs
    store.set_epoch_deadline(1 << 32)
    instance = native.instantiate(store, component)
    subscribe = instance.get_func(store, "subscribe-duration")
    if subscribe is None or instance.get_func(store, "now") is None:  # a wasmtime change would show here
        raise RuntimeError("the clock bridge has no subscribe-duration or now export")
    pollable = subscribe(store, 0)
    if not isinstance(pollable, wc.ResourceAny):
        raise RuntimeError("wasmtime's subscribe-duration returned no resource")
    resource_type = pollable.type
    pollable.drop(store)
    return resource_type


def _now(_store: object) -> int:
    return time.monotonic_ns()


def _no_drop(_store: object, _rep: int) -> None:
    """Destructor of the clock instance's ``pollable`` definition (see module docstring)."""


def _guarded(function: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``function(store, context, *args)`` for the active call.

    Only ``WasmtimeError`` may leave a host function (anything else would go through
    wasmtime-py's process-global ``LAST_EXCEPTION``; see :mod:`host.runtime.imports`).
    """

    def host_function(store: Any, *args: Any) -> Any:
        context = current_context()
        if context is None:
            raise wasmtime.WasmtimeError("stockade clock: no active call")
        try:
            return function(store, context, *args)
        except wasmtime.WasmtimeError:
            if time.monotonic_ns() >= context.deadline_ns:
                context.deadline_hit = True  # e.g. the bridge met the epoch deadline
            raise
        except Exception as exc:
            context.host_failure = ("wasi:clocks/monotonic-clock", exc)
        except BaseException as exc:  # KeyboardInterrupt etc.: re-raised after the call
            context.fatal = exc
        raise wasmtime.WasmtimeError("stockade clock failed")

    return host_function


def _subscribe_duration(store: Any, context: CallContext, duration: int) -> Any:
    return _subscribe(store, context, time.monotonic_ns(), int(duration))


def _subscribe_instant(store: Any, context: CallContext, instant: int) -> Any:
    # ``instant`` is on the guest's clock, wasmtime's native ``now`` (its own origin):
    # turned into a duration on that clock, then clamped like any other subscription.
    now = time.monotonic_ns()
    _check_subscription(context, now)
    native_now = _bridge(store, context)[1](store)
    return _subscribe(store, context, now, max(int(instant) - int(native_now), 0))


def _check_subscription(context: CallContext, now: int) -> None:
    if context.deadline_ns - now <= 0:
        context.deadline_hit = True
        raise DeadlineExceeded("the call deadline passed while the guest used the clock")


def _bridge(store: Any, context: CallContext) -> tuple[Any, Any]:
    """(subscribe-duration, now) of the clock bridge in this call's store (instantiated once)."""
    if context.clock_subscribe is not None and context.clock_now is not None:
        return context.clock_subscribe, context.clock_now
    bridge = context.clock
    if bridge is None:
        raise wasmtime.WasmtimeError("stockade clock: the call has no clock bridge")
    instance = bridge.native_linker.instantiate(store, bridge.component)
    subscribe = instance.get_func(store, "subscribe-duration")
    native_now = instance.get_func(store, "now")
    if subscribe is None or native_now is None:  # the bridge exports both (checked at start)
        raise wasmtime.WasmtimeError("stockade clock: the bridge lacks subscribe-duration or now")
    context.clock_subscribe, context.clock_now = subscribe, native_now
    return subscribe, native_now


def _subscribe(store: Any, context: CallContext, now: int, duration: int) -> Any:
    """A native pollable ready after ``duration`` ns, but never past the deadline."""
    remaining = context.deadline_ns - now
    _check_subscription(context, now)
    context.clock_subscriptions += 1
    if context.clock_subscriptions > MAX_CLOCK_SUBSCRIPTIONS:
        raise wasmtime.WasmtimeError(
            f"the guest subscribed to the clock more than {MAX_CLOCK_SUBSCRIPTIONS} times in one call"
        )
    subscribe = _bridge(store, context)[0]
    return subscribe(store, min(duration, remaining + DEADLINE_OVERSHOOT_NS))
