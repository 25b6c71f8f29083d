"""Ready instances: fresh, never-used instances instantiated ahead of the call that takes them.

Instantiating a componentize-py component costs ~0.6 ms and tearing its store down a
few hundred µs more, most of a small call's time. A :class:`ReadyPools` keeps, per
(component, limits), a few instances that a background thread instantiated beforehand;
a call takes one, sets its own fuel, deadline and output, runs, and hands the store
back to the thread to drop. Every call still gets an instance nobody used: an instance
is taken once and never returned. What stays the same as an instance made for the call:

- **Fuel.** The thread instantiates under the call limits' fuel and epoch deadline, so a
  component whose start-up loops forever is stopped and never pooled; at checkout the
  store gets the call's fuel *minus what instantiation used*, so ``fuel_consumed`` is
  the same number either way.
- **Deadline and cancellation.** Set at checkout (the epoch deadline is relative to the
  epoch at that moment; a cancel watch is installed then).
- **Output.** WASI stdout/stderr write to a :class:`LogSink` that points at the call's
  log from checkout on; what a guest prints during instantiation is dropped.
- **No call context at instantiation.** The thread runs with no
  :class:`~host.runtime.imports.CallContext` active, so a host import the guest calls
  while instantiating is refused (it traps, and the component is not pooled).
- **Preopens** are part of a WASI context, which is fixed at instantiation: a call with
  read-only workspace preopens never takes a ready instance.

Which components are pooled: only those whose instantiation, measured on their first
:data:`SAMPLES` on-demand calls, took at least :data:`POOL_THRESHOLD_S` each. Measured
here: a componentize-py component instantiates in ~560 µs (pooled); a componentize-js
one in ~30 µs and a small WAT one in tens of µs (not pooled: a ready instance would
save them nothing and cost the thread's CPU). A call never waits for the thread: with
the pool empty it instantiates on demand as before. Pools are bounded by ``depth`` instances per key and by
:data:`MAX_KEYS` keys (least recently used dropped), a key unused for
:data:`IDLE_S` seconds is drained, and :meth:`ReadyPools.close` drains everything
(the Runtime closes it; a lock reload opens a new Host, and so a new Runtime).
With the pooling allocator (:mod:`host.runtime.engine`) a ready instance holds one of its
slots like any store; when every slot is taken the thread waits up to
:data:`~host.runtime.engine.POOL_FULL_RETRY_S` and tries again (the key stays pooled).

Example::

    pools = ReadyPools(engine, linker, clock=clock, depth=2)
    ready = pools.take(loaded, limits)        # None: instantiate on demand
    ...
    pools.close()
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, final

import wasmtime
from wasmtime import component as wc

from host import observe
from host.runtime.calllog import CallLog
from host.runtime.engine import POOL_FULL_RETRY_S, PoolFull, deadline_ticks
from host.runtime.imports import current_context
from host.runtime.models import SandboxLimits

__all__ = ["IDLE_S", "MAX_KEYS", "POOL_THRESHOLD_S", "SAMPLES", "LogSink", "ReadyInstance", "ReadyPools"]

POOL_THRESHOLD_S: Final = 0.000_2  # seconds of an on-demand instantiation that make a key pooled
SAMPLES: Final = 3  # on-demand instantiations a key is judged on
MAX_KEYS: Final = 8  # (component, limits) pools kept at once: bounds the idle memory
IDLE_S: Final = 120.0  # seconds without a call after which a key's pool is drained

Key = tuple[str, SandboxLimits]


@final
class LogSink:
    """A ready instance's WASI stdout/stderr: dropped until :meth:`attach`, then the call's log."""

    __slots__ = ("_writers",)

    def __init__(self) -> None:
        self._writers: dict[str, Callable[[bytes], int]] | None = None

    def attach(self, log: CallLog) -> None:
        """Send everything from now on to ``log``."""
        self._writers = {"stdout": log.writer("stdout"), "stderr": log.writer("stderr")}

    def writer(self, source: str) -> Callable[[bytes], int]:
        """The WASI callback for ``source`` (``stdout`` or ``stderr``)."""

        def write(data: bytes) -> int:
            writers = self._writers
            return len(data) if writers is None else writers[source](data)

        return write


@final
@dataclass(slots=True, eq=False)
class ReadyInstance:
    """A never-used instance: its store, its ``call`` export, its output sink and the fuel
    its instantiation used."""

    store: wasmtime.Store
    func: wc.Func
    sink: LogSink
    instantiation_fuel: int


@final
class ReadyPools:
    """The ready instances of one runtime (see the module docstring).

    Args:
        depth: instances kept ready per key (0: none, :meth:`take` always returns None).
        make_store: builds a fresh store for a component under limits, with a WASI
            context writing to the given sink (the sandbox's own store set-up).
        instantiate: instantiates the component in the store and returns ``call``.
    """

    def __init__(
        self,
        *,
        depth: int,
        make_store: Callable[[object, SandboxLimits, LogSink], wasmtime.Store],
        instantiate: Callable[[wasmtime.Store, object], wc.Func],
    ) -> None:
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
            raise ValueError(f"ready instance depth must be an int >= 0, got {depth!r}")
        self.depth = depth
        self._make_store = make_store
        self._instantiate = instantiate
        self._cond = threading.Condition()
        self._pools: OrderedDict[Key, deque[ReadyInstance]] = OrderedDict()
        self._components: dict[Key, object] = {}
        self._used: dict[Key, float] = {}
        self._refused: set[Key] = set()  # fast on demand, or failed in the thread: never pooled
        self._samples: dict[Key, list[float]] = {}
        self._dead: deque[wasmtime.Store] = deque()
        self._closed = False
        self._thread: threading.Thread | None = None
        self.created = 0  # instances instantiated by the thread (tests, stats)
        self.taken = 0  # ready instances handed to calls
        observe.watch_ready(self.ready_total)  # held weakly; read only by a metrics scrape

    # -- the call's side -------------------------------------------------------------

    def take(self, key: Key) -> ReadyInstance | None:
        """A ready instance for ``key``, or None (the caller instantiates on demand)."""
        if self.depth == 0:
            return None
        with self._cond:
            pool = self._pools.get(key)
            if pool is None:
                return None
            self._pools.move_to_end(key)
            self._used[key] = time.monotonic()
            ready = pool.popleft() if pool else None
            if ready is not None:
                self.taken += 1
            self._cond.notify()
            return ready

    def observe(self, key: Key, component: object, instantiate_s: float) -> None:
        """After an on-demand instantiation: pool this key from now on if it is slow.

        A key is judged on the fastest of its first :data:`SAMPLES` instantiations (the
        first one of a component also pays for faulting in its compiled code)."""
        if self.depth == 0 or key in self._refused:  # judged already: the common case, no lock
            return
        with self._cond:
            if self._closed or key in self._pools or key in self._refused:
                return
            samples = self._samples.setdefault(key, [])
            samples.append(instantiate_s)
            if len(samples) < SAMPLES:
                return
            del self._samples[key]
            if min(samples) < POOL_THRESHOLD_S:
                self._refused.add(key)  # fast enough on demand: never pooled
                return
            self._pools[key] = deque()
            self._components[key] = component
            self._used[key] = time.monotonic()
            while len(self._pools) > MAX_KEYS:
                self._forget(next(iter(self._pools)))
            self._ensure_thread()
            self._cond.notify()

    def discard(self, store: wasmtime.Store) -> None:
        """Hand a used store to the thread to drop (teardown off the call's path)."""
        with self._cond:
            if self._closed or self._thread is None:
                return  # dropped by the caller's reference going away
            self._dead.append(store)
            self._cond.notify()

    # -- lifecycle -----------------------------------------------------------------------

    def ready_count(self, key: Key) -> int:
        """Instances ready for ``key`` now."""
        with self._cond:
            pool = self._pools.get(key)
            return len(pool) if pool is not None else 0

    def ready_total(self) -> int:
        """Instances ready now, over every key (the ``stockade.sandbox.ready_instances`` gauge)."""
        with self._cond:
            return sum(len(pool) for pool in self._pools.values())

    def close(self) -> None:
        """Stop the thread (joined) and drop every ready instance. Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._cond:
            self._pools.clear()
            self._components.clear()
            self._dead.clear()

    # -- the thread ----------------------------------------------------------------------

    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="stockade-ready-instances", daemon=True)
            self._thread.start()

    def _forget(self, key: Key) -> None:
        self._pools.pop(key, None)
        self._components.pop(key, None)
        self._used.pop(key, None)

    def _next_job(self) -> tuple[Key, object] | None:
        """Under the lock: the key to refill next, or None to wait."""
        now = time.monotonic()
        for key in [k for k, used in self._used.items() if now - used > IDLE_S]:
            self._forget(key)
        for key, pool in self._pools.items():
            if len(pool) < self.depth:
                return key, self._components[key]
        return None

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._dead and (job := self._next_job()) is None:
                    self._cond.wait(timeout=IDLE_S)
                if self._closed:
                    return
                dead = list(self._dead)
                self._dead.clear()
                job = None if dead else self._next_job()
            del dead  # the stores are freed here, on this thread
            if job is not None:
                self._fill(*job)

    def _fill(self, key: Key, component: object) -> None:
        if current_context() is not None:  # pragma: no cover - the thread never activates one
            raise RuntimeError("a ready instance must be instantiated without a call context")
        limits = key[1]
        sink = LogSink()
        try:
            store = self._make_store(component, limits, sink)
            store.set_fuel(limits.fuel)
            store.set_epoch_deadline(deadline_ticks(limits.timeout_ms))
            func = self._instantiate(store, component)
            used = limits.fuel - store.get_fuel()
        except PoolFull:  # every allocator slot is held: try again when a store is freed
            with self._cond:
                if not self._closed:
                    self._cond.wait(timeout=POOL_FULL_RETRY_S)
            return
        except Exception:  # a start-up that traps: calls instantiate on demand
            with self._cond:
                self._refused.add(key)
                self._forget(key)
            return
        ready = ReadyInstance(store=store, func=func, sink=sink, instantiation_fuel=used)
        with self._cond:
            pool = self._pools.get(key)
            if pool is None or self._closed:
                return
            pool.append(ready)
            self.created += 1
