"""Interrupting one running store from another thread (cancellation, docs/design.md §12 "MCP server").

Epoch interruption is engine-wide: incrementing the epoch to stop one call would shorten
every other call's deadline. wasmtime's C API offers a per-store *epoch deadline
callback* instead (``wasmtime_store_epoch_deadline_callback``), which wasmtime-py 50 does
not wrap; :class:`InterruptWatch` installs one through the raw bindings.

With a watch installed the store's deadline is one tick (10 ms) ahead, and on every tick
the callback, running on the thread that runs the guest, either

- traps with ``stockade: call cancelled`` once the caller's :class:`threading.Event` is
  set (so a cancelled call stops within about one tick), or
- traps with a message containing ``wasm trap: interrupt`` once the call's deadline ticks
  are used up (so the sandbox classifies it as SANDBOX_TIMEOUT exactly as without a
  watch), or
- continues for one more tick.

Calls without an event keep the plain deadline (no callback, no per-tick Python work).

Example::

    watch = InterruptWatch.install(store, cancel_event, deadline_ticks(timeout_ms))
    ...  # run the guest; on failure:
    if watch.cancelled: ...
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any, Final, final

import wasmtime
from wasmtime import _ffi as ffi

__all__ = ["CANCELLED_TRAP", "InterruptWatch"]

CANCELLED_TRAP: Final = b"stockade: call cancelled"
_DEADLINE_TRAP: Final = b"stockade: deadline passed (wasm trap: interrupt)"
_CONTINUE: Final = 0  # WASMTIME_UPDATE_DEADLINE_CONTINUE

_Callback = ctypes.CFUNCTYPE(
    ctypes.c_size_t,
    ctypes.POINTER(ffi.wasmtime_context_t),
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_uint64),
    ctypes.POINTER(ctypes.c_uint8),
)
_Finalizer = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@final
class InterruptWatch:
    """The per-store epoch callback; keep the object alive as long as the store."""

    __slots__ = ("_callback", "_event", "_ticks_left", "cancelled")

    def __init__(self, event: threading.Event, deadline_ticks: int) -> None:
        self._event = event
        self._ticks_left = deadline_ticks
        self.cancelled = False
        self._callback = _Callback(self._on_tick)

    @classmethod
    def install(cls, store: wasmtime.Store, event: threading.Event, deadline_ticks: int) -> InterruptWatch:
        """Install a watch on ``store`` (before the guest is instantiated).

        Args:
            store: a fresh store.
            event: set from any thread to stop the guest at its next tick.
            deadline_ticks: the call's deadline in epoch ticks (as ``set_epoch_deadline``).
        """
        watch = cls(event, deadline_ticks)
        no_finalizer = _Finalizer()  # a NULL function pointer: the watch owns no C data
        ffi.wasmtime_store_epoch_deadline_callback(store.ptr(), watch._callback, None, no_finalizer)
        store.set_epoch_deadline(1)
        return watch

    def _on_tick(self, _context: Any, _data: Any, delta: Any, kind: Any) -> int:
        if self._event.is_set():
            self.cancelled = True
            return _trap(CANCELLED_TRAP)
        self._ticks_left -= 1
        if self._ticks_left <= 0:
            return _trap(_DEADLINE_TRAP)
        delta[0] = 1
        kind[0] = _CONTINUE
        return 0


def _trap(message: bytes) -> int:
    error = ffi.wasmtime_error_new(message)
    return int(ctypes.cast(error, ctypes.c_void_p).value or 0)
