"""The wasmtime Engine of a host and its epoch ticker (docs/design.md §8).

One Engine per host, with fuel metering and epoch interruption on. A daemon thread
increments the engine's epoch every :data:`EPOCH_TICK_MS` milliseconds; a store's epoch
deadline is therefore counted in ticks. The ticker stops, and is joined, when the
runtime closes.

The settings applied to the engine are a constant mapping (:data:`ENGINE_SETTINGS`); its
hash, with the compiler, the wasmtime version and the machine, keys the compiled-artifact
cache, so changing a setting can never load code compiled under another one.

The compiler is Cranelift unless ``STOCKADE_COMPILER=winch`` (:func:`selected_compiler`).
Winch, wasmtime's single-pass baseline compiler (tier 1 on x86_64 Linux, like Cranelift),
compiles a componentize-py component about 10× faster (1.4 s of CPU instead of 14 s here)
and runs CPU-bound guests about 1.65× slower; fuel is metered by both, but the counts of
one call differ by about 1.6 %. It is meant for development and test runs, where a
component is compiled once and called a few times; every limit still holds under it. An
unknown value refuses to build the engine (CONFIG_INVALID) rather than fall back.
wasmtime-py's ``Config.strategy`` setter refuses ``"winch"``, so it is set through the
bundled C API (``wasmtime_config_strategy_set``), guarded like ``_compat.py``: the
setter's own code must still map ``"cranelift"`` to 1 (the C enum: auto 0, cranelift 1,
winch 2), else Winch is refused with the reason.

**The pooling allocator.** With ``HostConfig.pool_instances > 0`` (default 64) the engine
allocates instances, memories and tables from pre-reserved slots (wasmtime's pooling
allocator) instead of mapping fresh ones per store: a fresh instance of the WAT echo costs
~39 µs instead of ~53 µs. wasmtime-py does not wrap it, so it is configured through the
bundled C API (``wasmtime_pooling_allocation_*``), guarded like ``_compat.py``: every
setter :data:`_POOL_SETTERS` names must exist with the argument type its C declaration
has, else the engine allocates on demand and :func:`pooling_unavailable` says why. The
slot sizes come from the host ceilings (:func:`pool_sizes`): a memory slot holds the
whole ``memory_bytes`` ceiling, a component slot at most :data:`POOL_CORE_INSTANCES`
core instances, :data:`POOL_TABLES` tables of :data:`POOL_TABLE_ELEMENTS` elements and
:data:`POOL_MEMORIES` memory; the totals are the per-component caps times
``pool_instances``, so a store that got its component slot never runs out of a core
instance, table or memory slot halfway through instantiating. A component that does not
fit a slot, and a call that finds every slot taken, run on an on-demand engine instead
(the runtime's overflow lane): a full pool never fails a call and never waits.

**What a pooled engine costs the process.** Each one reserves its memory slots up front
(``pool_instances`` × ``(4 GiB + 32 MiB)`` of address space, PROT_NONE, nothing committed)
and keeps them until the engine and everything compiled against it are freed. Two limits
of the process bound how many can be alive at once, and wasmtime's C API aborts the whole
process (a Rust panic in ``wasm_engine_new_with_config``) when it cannot reserve them, so
:func:`build_pooled_engine` checks both first and falls back to on-demand allocation:

- the memory maps (``vm.max_map_count``, 65,530 by default): wasmtime's default pool of
  1,000 async fiber stacks cost two maps each (a stack and its guard page), 2,000 per
  engine, so the 33rd live engine aborted (CI lost a test worker to it). Stockade never
  runs guests on async stacks, so the pool has none (``total_stacks`` 0: ~2 maps);
- the address space (``RLIMIT_AS``, else the 128 TiB of a 48-bit user space): an engine
  is refused while the process's mapped size plus its reservation would pass half of it.

A reused slot is reset by wasmtime before the next instance gets it: the first
:data:`POOL_KEEP_RESIDENT` bytes of a memory are zeroed in place, the rest is
decommitted (``madvise(DONTNEED)``, which reads back zeros), its size returns to the
module's initial size; a test writes a marker and reads zeros in the next call.

Example::

    engine = build_engine()
    ticker = EpochTicker(engine)
    ticker.start()
    ...
    ticker.stop()
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import hashlib
import importlib.metadata
import inspect
import json
import logging
import os
import platform
import resource
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal, final

import wasmtime
from wasmtime import _bindings

from host.errors import ConfigInvalid

__all__ = [
    "COMPILERS",
    "COMPILER_ENV",
    "ENGINE_SETTINGS",
    "EPOCH_TICK_MS",
    "POOL_CORE_INSTANCES",
    "POOL_FULL_RETRY_S",
    "POOL_KEEP_RESIDENT",
    "POOL_MEMORIES",
    "POOL_TABLES",
    "POOL_TABLE_ELEMENTS",
    "Compiler",
    "EpochTicker",
    "PoolFull",
    "PoolSizes",
    "PoolSlots",
    "build_engine",
    "build_pooled_engine",
    "deadline_ticks",
    "engine_config_hash",
    "pool_sizes",
    "pooling_unavailable",
    "selected_compiler",
    "wasmtime_version",
]

Compiler = Literal["cranelift", "winch"]
COMPILERS: Final[tuple[Compiler, ...]] = ("cranelift", "winch")
COMPILER_ENV: Final = "STOCKADE_COMPILER"
"""The environment variable that selects the compiler (unset or empty: Cranelift)."""
_WINCH: Final = 2  # wasmtime_strategy_t WASMTIME_STRATEGY_WINCH (wasmtime/config.h)
_log = logging.getLogger("stockade.runtime")

POOL_CORE_INSTANCES: Final = 64  # core instances per component slot (a Python plugin has 14)
POOL_TABLES: Final = 8  # tables per component slot (a Python plugin defines 2)
POOL_TABLE_ELEMENTS: Final = 32_768  # elements per table slot (a Python plugin: 5,674 + headroom)
POOL_MEMORIES: Final = 1  # memories per component slot (every plugin measured defines 1)
POOL_KEEP_RESIDENT: Final = 1 << 20  # bytes of a memory slot zeroed in place instead of decommitted
_POOL_EXTRA_CORE: Final = 2  # core instances a store holds outside its component (the clock bridge)
POOL_FULL_RETRY_S: Final = 0.05  # how long the ready-instance thread waits when every slot is taken


class PoolFull(Exception):  # a condition the runtime handles, not an error it reports
    """Every slot of the pooling allocator is taken: the call's instance was never created.

    Raised before any guest code ran (no output, no host import served), so the runtime
    runs the same call on its on-demand engine instead.
    """


@final
class PoolSlots:
    """Admission to a pooled engine: a store holds one ticket from creation until freed.

    A store on the pooled engine holds at most two component instances (the guest and the
    clock bridge, instantiated in the middle of a call the first time the guest sleeps);
    the pool has two component slots per ticket, so a store that got a ticket can never
    find the pool full halfway through its call. The ticket goes back when the store's
    Python object is freed (``weakref.finalize``, after wasmtime deleted the store).

    Args:
        capacity: tickets (``PoolSizes.instances``).
    """

    __slots__ = ("_lock", "capacity", "in_use")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.in_use = 0  # tickets held now (read without the lock: a snapshot)
        self._lock = threading.Lock()

    def admit(self) -> None:
        """Take a ticket for the next store, never waiting.

        Raises:
            PoolFull: every ticket is held.
        """
        with self._lock:
            if self.in_use >= self.capacity:
                raise PoolFull(f"all {self.capacity} pooling-allocator slots are taken")
            self.in_use += 1

    def bind(self, store: wasmtime.Store) -> None:
        """Return the ticket :meth:`admit` took when ``store`` is freed."""
        weakref.finalize(store, self.release)

    def release(self) -> None:
        """Return a ticket (the store was freed, or could not be made)."""
        with self._lock:
            self.in_use -= 1

EPOCH_TICK_MS: Final = 10
"""Milliseconds between two epoch increments."""

ENGINE_SETTINGS: Final[Mapping[str, object]] = MappingProxyType(
    {
        # Limits (docs/design.md §8): fuel per call and a wall-clock deadline in epoch ticks.
        "consume_fuel": True,
        "epoch_interruption": True,
        "wasm_component_model": True,
        # Shared memories would live outside the store's memory accounting.
        "wasm_threads": False,
        "shared_memory": False,
        "cranelift_opt_level": "speed",
        "parallel_compilation": True,
    }
)
"""Every Config property the runtime sets, applied in this order."""

_ARTIFACT_FORMAT = "stockade-artifact/1"


def selected_compiler(environ: Mapping[str, str] | None = None) -> Compiler:
    """The compiler ``$STOCKADE_COMPILER`` names: ``cranelift`` (also when unset) or ``winch``.

    Raises:
        ConfigInvalid: any other value.
    """
    value = (os.environ if environ is None else environ).get(COMPILER_ENV, "") or "cranelift"
    if value not in COMPILERS:
        raise ConfigInvalid(
            f"{COMPILER_ENV}={value[:40]!r} names no compiler",
            hint=f"Set {COMPILER_ENV} to cranelift (the default) or winch, or unset it.",
        )
    return value


@dataclass(frozen=True, slots=True)
class PoolSizes:
    """Slot counts and sizes of the pooling allocator (see the module docstring).

    Args:
        instances: component instances alive at once (stores, ready ones included).
        memory_bytes: bytes one memory slot may grow to (the host's ``memory_bytes`` ceiling).
    """

    instances: int
    memory_bytes: int
    core_instances: int = POOL_CORE_INSTANCES
    tables: int = POOL_TABLES
    table_elements: int = POOL_TABLE_ELEMENTS
    memories: int = POOL_MEMORIES
    keep_resident: int = POOL_KEEP_RESIDENT

    def fits(self, memories: int, tables: int, max_table_elements: int, core_instances: int) -> bool:
        """Whether a component creating these counts fits one slot (else: on demand)."""
        return (
            memories <= self.memories
            and tables <= self.tables
            and max_table_elements <= self.table_elements
            and core_instances <= self.core_instances
        )


def pool_sizes(instances: int, memory_bytes: int) -> PoolSizes | None:
    """The pool for ``instances`` component slots under a ``memory_bytes`` ceiling (``None``: off)."""
    return PoolSizes(instances, memory_bytes) if instances > 0 else None


# (setter, ctypes name of its value argument) — wasmtime/config.h: counts are uint32_t, sizes size_t.
_POOL_SETTERS: Final = (
    ("total_component_instances", "c_uint"),
    ("max_core_instances_per_component", "c_uint"),
    ("total_core_instances", "c_uint"),
    ("max_memories_per_component", "c_uint"),
    ("max_memories_per_module", "c_uint"),
    ("total_memories", "c_uint"),
    ("max_tables_per_component", "c_uint"),
    ("max_tables_per_module", "c_uint"),
    ("total_tables", "c_uint"),
    ("table_elements", "c_ulong"),
    ("max_memory_size", "c_ulong"),
    ("linear_memory_keep_resident", "c_ulong"),
    ("total_stacks", "c_uint"),
)


def pooling_unavailable() -> str | None:
    """Why this wasmtime's bindings cannot configure the pooling allocator (``None``: they can)."""
    for name in ("wasmtime_pooling_allocation_config_new", "wasmtime_pooling_allocation_config_delete",
                 "wasmtime_pooling_allocation_strategy_set"):
        if not callable(getattr(_bindings, name, None)):
            return f"wasmtime {wasmtime_version()} has no {name}"
    for setter, ctype in _POOL_SETTERS:
        raw = getattr(_bindings, f"_wasmtime_pooling_allocation_config_{setter}_set", None)
        argtypes = getattr(raw, "argtypes", None)
        if not argtypes or len(argtypes) != 2 or getattr(argtypes[1], "__name__", "") != ctype:
            name = f"wasmtime_pooling_allocation_config_{setter}_set"
            return f"wasmtime {wasmtime_version()}: {name} does not take a {ctype}"
    return None


_RESERVATION: Final = 4 << 30  # wasmtime's default memory_reservation on 64-bit hosts
_GUARD: Final = 32 << 20  # its default memory_guard_size


_USER_ADDRESS_SPACE: Final = 1 << 47  # x86-64 and arm64 Linux with 48-bit virtual addresses
_POOL_MAPS: Final = 64  # memory maps a pooled engine may add (measured: 2), with headroom
_MAP_HEADROOM: Final = 4096  # maps left for everything else the process maps later
_CROWDED: Final = "the process has no room for another pool"


@dataclass(frozen=True, slots=True)
class ProcessMaps:
    """What the process has mapped now, and what it may map (``None``: unknown here).

    Args:
        mapped_bytes: the process's virtual size (``VmSize``).
        maps: its memory maps now (lines of ``/proc/self/maps``).
        max_maps: the kernel's ceiling on them (``vm.max_map_count``).
    """

    mapped_bytes: int | None
    maps: int | None
    max_maps: int | None


def process_maps() -> ProcessMaps:
    """This process's mappings, from ``/proc`` (every field ``None`` where it is absent)."""
    mapped = maps = max_maps = None
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    mapped = int(line.split()[1]) * 1024
    with contextlib.suppress(OSError):
        with open("/proc/self/maps", "rb") as table:
            maps = sum(chunk.count(b"\n") for chunk in iter(lambda: table.read(1 << 16), b""))
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/sys/vm/max_map_count", encoding="ascii") as ceiling:
            max_maps = int(ceiling.read())
    return ProcessMaps(mapped, maps, max_maps)


def _pool_refused(pool: PoolSizes, now: ProcessMaps | None = None) -> str | None:
    if ctypes.sizeof(ctypes.c_void_p) < 8:
        return "the pooling allocator's slots need a 64-bit address space"
    if pool.memory_bytes > _RESERVATION:
        return f"memory_bytes ceiling {pool.memory_bytes} exceeds the {_RESERVATION}-byte memory reservation"
    needed = pool.instances * pool.memories * (_RESERVATION + _GUARD)
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit != resource.RLIM_INFINITY and limit < 2 * needed:
        return f"RLIMIT_AS {limit} is too small for {needed} bytes of memory slots"
    now = process_maps() if now is None else now
    space = _USER_ADDRESS_SPACE if limit == resource.RLIM_INFINITY else limit
    if now.mapped_bytes is not None and now.mapped_bytes + needed > space // 2:
        return (f"{_CROWDED}: it maps {now.mapped_bytes} bytes already; {needed} more for memory slots "
                f"would pass half of its {space}-byte address space")
    if now.maps is not None and now.max_maps is not None and (
        now.maps + _POOL_MAPS + _MAP_HEADROOM > now.max_maps
    ):
        return f"{_CROWDED}: it has {now.maps} of its {now.max_maps} memory maps (vm.max_map_count)"
    return None


def _pool_values(pool: PoolSizes) -> dict[str, int]:
    n = pool.instances
    return {
        "total_component_instances": 2 * n,  # a store's guest and its clock bridge
        "max_core_instances_per_component": pool.core_instances,
        "total_core_instances": n * (pool.core_instances + _POOL_EXTRA_CORE),
        "max_memories_per_component": pool.memories,
        "max_memories_per_module": pool.memories,
        "total_memories": n * pool.memories,
        "max_tables_per_component": pool.tables,
        "max_tables_per_module": pool.tables,
        "total_tables": n * pool.tables,
        "table_elements": pool.table_elements,
        "max_memory_size": pool.memory_bytes,
        "linear_memory_keep_resident": min(pool.keep_resident, pool.memory_bytes),
        "total_stacks": 0,  # no async fiber stacks: guests never run on one (module docstring)
    }


def build_engine(compiler: Compiler | None = None, pool: PoolSizes | None = None) -> wasmtime.Engine:
    """A new Engine configured with :data:`ENGINE_SETTINGS`, ``compiler`` and ``pool``.

    Args:
        compiler: the compiler; :func:`selected_compiler` when ``None``.
        pool: the pooling allocator's sizes; ``None`` allocates on demand. Callers check
            :func:`pooling_unavailable` first (:func:`build_pooled_engine` does).

    Returns:
        the engine.

    Raises:
        ConfigInvalid: ``$STOCKADE_COMPILER`` is invalid, or Winch was asked for and this
            wasmtime's bindings are not the ones Winch is selected through.
        wasmtime.WasmtimeError: the pool's sizes are refused by wasmtime.
    """
    compiler = selected_compiler() if compiler is None else compiler
    config = wasmtime.Config()
    for name, value in ENGINE_SETTINGS.items():
        setattr(config, name, value)
    if compiler == "winch":
        _use_winch(config)
    if pool is not None:
        handle = _bindings.wasmtime_pooling_allocation_config_new()
        try:
            for setter, value in _pool_values(pool).items():
                getattr(_bindings, f"wasmtime_pooling_allocation_config_{setter}_set")(handle, value)
            _bindings.wasmtime_pooling_allocation_strategy_set(config.ptr(), handle)  # copies it
        finally:
            _bindings.wasmtime_pooling_allocation_config_delete(handle)
    return wasmtime.Engine(config)


def build_pooled_engine(
    compiler: Compiler | None, pool: PoolSizes | None
) -> tuple[wasmtime.Engine, PoolSizes | None]:
    """An engine on the pooling allocator when ``pool`` is set and it can be had, else on demand.

    Falls back (logged, never an error) when this wasmtime's bindings are not the known
    ones or the sizes would be refused. wasmtime's C API aborts the process on a refused
    configuration (``wasm_engine_new_with_config`` unwraps the error), so they are checked
    here first: a ``memory_bytes`` ceiling above the 4 GiB a memory reserves by default on
    64-bit hosts, a 32-bit host, an address-space limit (``RLIMIT_AS``) too small for the
    slots, or a process whose mappings leave no room for one more engine (the address
    space or ``vm.max_map_count``: see the module docstring).

    Returns:
        the engine and the pool it uses (``None``: on-demand allocation).
    """
    if pool is not None:
        reason = pooling_unavailable() or _pool_refused(pool)
        if reason is not None and reason.startswith(_CROWDED):
            # Engines of closed hosts that sit in reference cycles (an exception's traceback
            # holding a call's frames, say) keep their slots until the collector runs.
            gc.collect()
            reason = _pool_refused(pool)
        if reason is None:
            return build_engine(compiler, pool), pool
        _log.warning("the pooling allocator is off (%s); instances are allocated on demand", reason)
    return build_engine(compiler), None


def _use_winch(config: wasmtime.Config) -> None:
    setter = getattr(_bindings, "wasmtime_config_strategy_set", None)
    strategy = getattr(type(config), "strategy", None)
    try:
        known = isinstance(strategy, property) and strategy.fset is not None and (
            "ffi.wasmtime_config_strategy_set(self.ptr(), 1)" in inspect.getsource(strategy.fset)
        )
    except (OSError, TypeError):
        known = False
    if setter is None or not known:
        raise ConfigInvalid(
            f"this wasmtime ({wasmtime_version()}) is not known to select Winch through "
            "wasmtime_config_strategy_set",
            hint=f"Unset {COMPILER_ENV} (Cranelift), or see docs/wasmtime-upgrade.md.",
        )
    setter(config.ptr(), _WINCH)


def wasmtime_version() -> str:
    """The installed wasmtime-py version (its native library has the same version)."""
    return importlib.metadata.version("wasmtime")


def engine_config_hash(
    settings: Mapping[str, object] = ENGINE_SETTINGS, compiler: Compiler | None = None
) -> str:
    """sha256 (hex) over the engine settings, the compiler, the artifact format and the machine.

    Args:
        settings: the settings to hash (the runtime's own by default).
        compiler: the compiler; :func:`selected_compiler` when ``None``.

    Returns:
        64 hex characters.
    """
    material = {
        "format": _ARTIFACT_FORMAT,
        "machine": platform.machine(),
        "system": platform.system(),
        "settings": dict(settings),
        "compiler": selected_compiler() if compiler is None else compiler,
    }
    encoded = json.dumps(material, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(encoded).hexdigest()


def deadline_ticks(timeout_ms: int) -> int:
    """Epoch ticks for a wall-clock timeout: whole ticks rounded up, plus one.

    The extra tick covers the partial tick already elapsed when the store is created,
    so a call never gets less than its timeout.

    Args:
        timeout_ms: the timeout in milliseconds (positive).

    Returns:
        the relative epoch deadline for ``Store.set_epoch_deadline``.
    """
    return -(-timeout_ms // EPOCH_TICK_MS) + 1


class EpochTicker:
    """A daemon thread that increments an engine's epoch every :data:`EPOCH_TICK_MS` ms.

    Args:
        engine: the engine whose epoch advances.
    """

    __slots__ = ("_engine", "_stop", "_thread")

    def __init__(self, engine: wasmtime.Engine) -> None:
        self._engine = engine
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="stockade-epoch-ticker", daemon=True
        )

    def start(self) -> None:
        """Start ticking."""
        self._thread.start()

    def _run(self) -> None:
        interval = EPOCH_TICK_MS / 1000
        while not self._stop.wait(interval):
            self._engine.increment_epoch()

    def stop(self) -> None:
        """Stop ticking and join the thread (idempotent)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    @property
    def alive(self) -> bool:
        """Whether the ticker thread is running."""
        return self._thread.is_alive()
