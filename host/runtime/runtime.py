"""The sandbox runtime of one host: engine, ticker, linker, loaded components (docs/design.md §2, §8).

Invariants:
- one Engine (fuel + epoch interruption) and one epoch ticker thread per Runtime; the
  ticker is joined by :meth:`Runtime.close`;
- a component is loaded only after its bytes match the pinned sha256, its header says
  component, and its exports/imports pass :mod:`host.runtime.checks`;
- compiled code comes from the compiler or from an HMAC-verified artifact, never from
  unverified bytes (:mod:`host.runtime.cache`); a module is compiled at most once per
  Runtime;
- every call gets a fresh store and instance (:mod:`host.runtime.sandbox`). The only
  things calls share are the read-only engine, linker and compiled components, which
  wasmtime allows to be used from many threads at once; no lock is held while wasm runs;
- with the pooling allocator on (``HostConfig.pool_instances``, :mod:`host.runtime.engine`)
  a second, on-demand engine (the *overflow lane*, with its own linker, clock and ticker)
  is built the first time a call needs it: when every pool slot is taken, or for a
  component too large for a slot. Its components are deserialized from the pooled
  engine's compiled code (the same bytes; the allocation strategy does not change the
  code). A full pool therefore never fails or delays a call.

Example::

    with Runtime(HostConfig(state_dir=path)) as rt:
        comp = rt.load(module_bytes, sha256=digest, name="tracker")
        result = rt.run(comp, tool="tracker.list-issues", input_json='{"repo":"x"}',
                        limits=limits, egress=DenyAllEgress(),
                        secret_available=lambda name: False)
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import hmac
import os
import re
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import final

import wasmtime
from wasmtime import component as wc

from host.config import HostConfig
from host.egress.port import EgressPort
from host.errors import ComponentRefused, DigestMismatch
from host.runtime._calltype import CallType
from host.runtime.binary import Census, census, check_header
from host.runtime.cache import ArtifactCache
from host.runtime.checks import CALL_EXPORT, check_component
from host.runtime.clock import install_deadline_clock
from host.runtime.engine import (
    Compiler,
    EpochTicker,
    PoolFull,
    PoolSizes,
    PoolSlots,
    build_engine,
    build_pooled_engine,
    deadline_ticks,
    engine_config_hash,
    pool_sizes,
    selected_compiler,
    wasmtime_version,
)
from host.runtime.imports import build_linker
from host.runtime.models import (
    CacheStats,
    ClockBridge,
    ProgressEvent,
    ProgressStage,
    SandboxLimits,
    SandboxResult,
)
from host.runtime.sandbox import TABLE_HEADROOM, LoadedComponent, Preopen, execute, ready_pools

__all__ = ["Runtime"]

ProgressCallback = Callable[[ProgressEvent], None]
_MAX_COMPILE_THREADS = 8
_HEX64 = re.compile(r"[0-9a-f]{64}")


@final
class Runtime:
    """Loads components and runs calls in fresh sandboxes.

    Args:
        config: the host configuration (state directory, ceilings).
    """

    def __init__(self, config: HostConfig) -> None:
        self._config = config
        compiler = selected_compiler()
        self._compiler = compiler
        self._engine, self._pool = build_pooled_engine(
            compiler, pool_sizes(config.pool_instances, config.ceilings.memory_bytes)
        )
        self._slots = PoolSlots(self._pool.instances) if self._pool is not None else None
        self._linker = build_linker(self._engine)
        self._clock = install_deadline_clock(self._linker, self._engine)
        self._overflow: _Lane | None = None  # the on-demand engine, built when first needed
        self._overflow_components: dict[str, LoadedComponent] = {}
        self.overflow_calls = 0  # calls that ran on the overflow lane (tests, stats)
        self._pooled: set[str] = set()  # components that fit a pool slot
        self._cache = self._artifact_cache(self._engine)
        self._compiled: dict[str, LoadedComponent] = {}
        self._key_locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._memory_hits = 0
        self._closed = False
        self._in_flight: Counter[int] = Counter()  # deadline ticks of the calls running now
        self._ticker = EpochTicker(self._engine)
        self._ticker.start()
        self._ready = ready_pools(
            self._engine, self._linker, self._clock, depth=config.ready_instances, slots=self._slots
        )

    @property
    def engine(self) -> wasmtime.Engine:
        """The runtime's engine (for tools that compile against the same configuration)."""
        return self._engine

    def _artifact_cache(self, engine: wasmtime.Engine) -> ArtifactCache:
        # Both lanes share one cache: their engines differ only in the allocation
        # strategy, which compiled code does not depend on.
        config = self._config
        return ArtifactCache(
            config.artifact_dir,
            config.artifact_key_file,
            engine,
            wasmtime_version=wasmtime_version(),
            engine_config_hash=engine_config_hash(compiler=self._compiler),
            max_bytes=config.artifact_cache_max_bytes if config.artifact_cache_dir is not None else None,
        )

    @property
    def pool(self) -> PoolSizes | None:
        """The pooling allocator's sizes (``None``: instances are allocated on demand)."""
        return self._pool

    def __enter__(self) -> Runtime:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop the epoch ticker (joined) and refuse further loads and calls.

        Calls still running are interrupted at their next epoch check (SANDBOX_TIMEOUT); a
        call racing with ``close`` past its open check is still bounded by its fuel.
        Idempotent.
        """
        with self._guard:
            if self._closed:
                return
            self._closed = True
            pending = max(self._in_flight, default=0)
        self._ready.close()  # while the ticker runs: an instantiation in progress is bounded
        with self._guard:
            overflow = self._overflow
        engines = [self._engine] if overflow is None else [self._engine, overflow.engine]
        self._ticker.stop()
        if overflow is not None:
            overflow.ticker.stop()
        # Expire every deadline still pending so no in-flight call waits for a tick that
        # will never come. Only as many ticks as the longest call in flight needs: with
        # none, nothing (stepping a 300 s ceiling's 30,000 ticks took ~0.09 s per close).
        for engine in engines:
            for _ in range(pending + 1 if pending else 0):
                engine.increment_epoch()

    def stats(self) -> CacheStats:
        """Counters of compilation and the artifact cache."""
        with self._guard:
            hits = self._memory_hits
        return self._cache.stats(hits)

    def load(self, module: bytes, *, sha256: str, name: str = "") -> LoadedComponent:
        """Verify, check and compile (or load from cache) one component.

        Args:
            module: the module file's bytes (untrusted).
            sha256: the pinned hex sha256 of ``module``.
            name: a name for messages and progress.

        Raises:
            DigestMismatch: the bytes do not hash to ``sha256``.
            ComponentRefused: not a component, does not compile, wrong ``call`` type or a
                forbidden import (named in the message and ``details``).
            RuntimeError: the runtime is closed.

        Returns:
            the loaded component, for :meth:`run`.
        """
        return self._load(name, module, sha256, None)

    def load_many(
        self,
        items: Sequence[tuple[str, bytes, str]],
        *,
        progress: ProgressCallback | None = None,
    ) -> list[LoadedComponent]:
        """Load several components, compiling in parallel threads.

        Args:
            items: ``(name, module bytes, sha256)`` triples.
            progress: called with a :class:`ProgressEvent` when an item is found cached,
                starts compiling and finishes compiling. Called from worker threads, one
                call at a time.

        Raises:
            DigestMismatch, ComponentRefused: as :meth:`load`, for the first failing item
                in input order (after every item has finished).
            RuntimeError: the runtime is closed.

        Returns:
            the loaded components, in input order.
        """
        self._check_open()
        total = len(items)
        if total == 0:
            return []
        reporter = _Reporter(progress, total)
        workers = min(total, max(2, os.cpu_count() or 1), _MAX_COMPILE_THREADS)
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="stockade-compile") as pool:
            futures = [pool.submit(self._load, n, m, s, reporter) for n, m, s in items]
        results: list[LoadedComponent] = []
        for future in futures:
            results.append(future.result())  # re-raises the first failure in input order
        return results

    def run(
        self,
        component: LoadedComponent,
        *,
        tool: str,
        input_json: str,
        limits: SandboxLimits,
        egress: EgressPort,
        secret_available: Callable[[str], bool],
        scrub: Callable[[str], str] = lambda s: s,
        interrupt: threading.Event | None = None,
        preopens: Sequence[Preopen] = (),
    ) -> SandboxResult:
        """Run one call of ``component`` in a fresh store and instance.

        Safe to call from many threads at once.

        Args:
            component: from :meth:`load` of this runtime.
            tool: the tool name passed to the guest's ``call``.
            input_json: canonical JSON input passed to ``call``.
            limits: fuel, memory, timeout and log limits of this call.
            egress: the port that serves the guest's ``http-request`` for this call.
            secret_available: answers the guest's ``secret-available`` (never a value).
            scrub: removes staged secret values from trap text, tool errors and the log.
            interrupt: set from another thread to stop this call's guest within one
                epoch tick (cancellation); the call then raises CallCancelled.
            preopens: read-only directories the guest may read (the caller owns the
                fds; see :class:`~host.runtime.sandbox.Preopen`).

        Raises:
            CallCancelled: ``interrupt`` was set while the guest ran.
            SandboxFuelExhausted, SandboxTimeout, SandboxMemory, SandboxTrap: the guest
                trapped; ``exc.details["usage"]`` holds fuel, wall time and log size.
            InputInvalid: the guest returned ``invalid-input``.
            ToolFailed: the guest returned ``failed``.
            ValueError: limits over the host's ceilings, or a component of another runtime.
            TypeError: ``tool`` or ``input_json`` is not a str.
            RuntimeError: the runtime is closed.

        Returns:
            output, log and usage.
        """
        self._check_open()
        self._check_limits(limits)
        if not isinstance(tool, str) or not isinstance(input_json, str):
            raise TypeError("tool and input_json must be str")
        known = self._compiled.get(component.sha256)
        if known is None or known.component is not component.component:
            raise ValueError("the component was not loaded by this runtime")
        ticks = deadline_ticks(limits.timeout_ms)
        with self._guard:  # the open check and the in-flight count move together (close)
            self._check_open()
            self._in_flight[ticks] += 1
        call = functools.partial(
            execute,
            tool=tool,
            input_json=input_json,
            limits=limits,
            egress=egress,
            secret_available=secret_available,
            scrub=scrub,
            trap_text_bytes=self._config.ceilings.trap_text_bytes,
            interrupt=interrupt,
            request_body_ceiling=self._config.ceilings.max_request_bytes,
            preopens=preopens,
        )
        try:
            if self._slots is not None and component.sha256 in self._pooled:
                try:
                    return call(
                        engine=self._engine, linker=self._linker, loaded=component, clock=self._clock,
                        pools=self._ready, slots=self._slots,
                    )  # fmt: skip
                except PoolFull:
                    pass  # nothing ran: the same call on the overflow lane
            if self._slots is None:
                return call(
                    engine=self._engine, linker=self._linker, loaded=component, clock=self._clock,
                    pools=self._ready,
                )  # fmt: skip
            lane, loaded = self._overflow_for(component)
            with self._guard:
                self.overflow_calls += 1
            return call(engine=lane.engine, linker=lane.linker, loaded=loaded, clock=lane.clock)
        finally:
            with self._guard:
                self._in_flight[ticks] -= 1
                if not self._in_flight[ticks]:
                    del self._in_flight[ticks]

    def _overflow_lane(self) -> _Lane:
        """The overflow lane, built on first use."""
        with self._key_lock(_OVERFLOW_KEY):
            lane = self._overflow
            if lane is None:
                self._check_open()
                lane = _Lane.build(self._compiler, self._artifact_cache)
                with self._guard:
                    closed = self._closed
                    if not closed:
                        self._overflow = lane
                if closed:  # close() ran meanwhile and did not see this lane
                    lane.ticker.stop()
                    raise RuntimeError("the runtime is closed")
            return lane

    def _overflow_for(self, component: LoadedComponent) -> tuple[_Lane, LoadedComponent]:
        """The overflow lane and ``component`` compiled for it."""
        lane = self._overflow_lane()
        with self._key_lock(_OVERFLOW_KEY):
            loaded = self._overflow_components.get(component.sha256)
            if loaded is None:
                # The pooled engine's code, deserialized (never unverified bytes: it was
                # compiled or HMAC-verified by this runtime).
                moved = wc.Component.deserialize(lane.engine, component.component.serialize())
                index = moved.get_export_index(CALL_EXPORT)
                functype = moved.type.exports(lane.engine)[CALL_EXPORT].ty
                if index is None or not isinstance(functype, wc.FuncType):  # the same component
                    raise ComponentRefused("export `call` is not a function")
                loaded = dataclasses.replace(
                    component, component=moved, call_index=index, call_type=CallType(functype)
                )
                self._overflow_components[component.sha256] = loaded
        return lane, (loaded if loaded.name == component.name else _renamed(loaded, component.name))

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the runtime is closed")

    def _check_limits(self, limits: SandboxLimits) -> None:
        ceilings = self._config.ceilings
        for name, value, ceiling in (
            ("fuel", limits.fuel, ceilings.fuel),
            ("memory_bytes", limits.memory_bytes, ceilings.memory_bytes),
            ("timeout_ms", limits.timeout_ms, ceilings.timeout_ms),
            ("max_log_bytes", limits.max_log_bytes, ceilings.max_log_bytes),
        ):
            if value > ceiling:
                raise ValueError(f"limits.{name}={value} exceeds the host ceiling {ceiling}")

    def _load(
        self, name: str, module: bytes, sha256: str, reporter: _Reporter | None
    ) -> LoadedComponent:
        self._check_open()
        if not isinstance(module, (bytes, bytearray, memoryview)):
            raise TypeError("module must be bytes")
        module = bytes(module)
        digest = hashlib.sha256(module).hexdigest()
        pinned = sha256.lower() if isinstance(sha256, str) else ""
        if not _HEX64.fullmatch(pinned) or not hmac.compare_digest(digest, pinned):
            raise DigestMismatch(
                f"module {name or '(unnamed)'} does not match its pinned sha256",
                expected=str(sha256)[:100],
                actual=digest,
            )
        check_header(module)
        counts = census(module)
        with self._key_lock(digest):
            known = self._compiled.get(digest)
            if known is not None:
                with self._guard:
                    self._memory_hits += 1
                fresh = False
                loaded = _renamed(known, name)
            else:
                fits = self._pool is None or self._pool.fits(
                    counts.memories, counts.tables, counts.max_table_elements + TABLE_HEADROOM,
                    counts.instances,
                )  # fmt: skip
                if fits:
                    loaded, fresh = self._compile_checked(
                        name, module, digest, counts, reporter, engine=self._engine, cache=self._cache
                    )
                else:  # wasmtime refuses to compile it for the pooled engine: the overflow lane's
                    lane = self._overflow_lane()
                    loaded, fresh = self._compile_checked(
                        name, module, digest, counts, reporter, engine=lane.engine, cache=lane.cache
                    )
                    self._overflow_components[digest] = loaded
                self._compiled[digest] = loaded
                if self._pool is not None and fits:
                    self._pooled.add(digest)
        if reporter:
            reporter.finished(name, "compiled" if fresh else "cached")
        return loaded

    def _compile_checked(
        self,
        name: str,
        module: bytes,
        digest: str,
        counts: Census,
        reporter: _Reporter | None,
        *,
        engine: wasmtime.Engine,
        cache: ArtifactCache,
    ) -> tuple[LoadedComponent, bool]:
        """Deserialize a verified artifact or compile; check; cache. -> (loaded, compiled)."""
        component = cache.load(digest)
        fresh = component is None
        if component is None:
            if reporter:
                reporter.started(name)
            component = cache.compile(module)
        shape = check_component(component, engine)
        index = component.get_export_index(CALL_EXPORT)
        functype = component.type.exports(engine)[CALL_EXPORT].ty
        if index is None or not isinstance(functype, wc.FuncType):  # checked just above
            raise ComponentRefused("export `call` is not a function")
        loaded = LoadedComponent(name, digest, component, shape, counts, index, CallType(functype))
        if fresh:  # only components that passed the checks are written to the cache
            cache.store(digest, component)
        return loaded, fresh

    def _key_lock(self, digest: str) -> threading.Lock:
        with self._guard:
            lock = self._key_locks.get(digest)
            if lock is None:
                lock = self._key_locks[digest] = threading.Lock()
            return lock


_OVERFLOW_KEY = "overflow-lane"


@dataclasses.dataclass(frozen=True, slots=True)
class _Lane:
    """An on-demand engine with its own linker, deadline clock and epoch ticker."""

    engine: wasmtime.Engine
    linker: wc.Linker
    clock: ClockBridge
    ticker: EpochTicker
    cache: ArtifactCache

    @classmethod
    def build(cls, compiler: Compiler, cache: Callable[[wasmtime.Engine], ArtifactCache]) -> _Lane:
        engine = build_engine(compiler)
        linker = build_linker(engine)
        clock = install_deadline_clock(linker, engine)
        ticker = EpochTicker(engine)
        ticker.start()
        return cls(engine, linker, clock, ticker, cache(engine))


def _renamed(loaded: LoadedComponent, name: str) -> LoadedComponent:
    if loaded.name == name:
        return loaded
    return dataclasses.replace(loaded, name=name)


class _Reporter:
    """Serializes progress callbacks and counts finished items."""

    __slots__ = ("_callback", "_done", "_lock", "_total")

    def __init__(self, callback: ProgressCallback | None, total: int) -> None:
        self._callback = callback
        self._total = total
        self._done = 0
        self._lock = threading.Lock()

    def started(self, name: str) -> None:
        with self._lock:
            self._emit(ProgressEvent(name, "compiling", self._done, self._total))

    def finished(self, name: str, stage: str) -> None:
        with self._lock:
            self._done += 1
            final_stage: ProgressStage = "compiled" if stage == "compiled" else "cached"
            self._emit(ProgressEvent(name, final_stage, self._done, self._total))

    def _emit(self, event: ProgressEvent) -> None:
        if self._callback is not None:
            self._callback(event)
