"""Value types of the sandbox runtime: limits in, results and usage out (docs/design.md §8).

Everything here is a frozen dataclass: a call's limits cannot change while it runs and a
result cannot be edited after the sandbox produced it.

Example::

    limits = SandboxLimits(fuel=2_000_000_000, memory_bytes=128 << 20,
                           timeout_ms=10_000, max_log_bytes=65_536)
    result = runtime.run(component, tool="echo", input_json="{}", limits=limits,
                         egress=DenyAllEgress(), secret_available=lambda name: False)
    result.output, result.usage.fuel_consumed, result.log
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal, final

if TYPE_CHECKING:
    import wasmtime.component as wc

__all__ = [
    "CacheStats",
    "ClockBridge",
    "LogLevel",
    "LogLine",
    "LogSource",
    "ProgressEvent",
    "ProgressStage",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUsage",
]

LogLevel = Literal["debug", "info", "warn", "error"]
"""The cases of the WIT ``log-level`` enum, spelled as in the WIT."""

LogSource = Literal["log", "stdout", "stderr", "host"]
"""Where a log line came from: the ``log`` import, WASI stdout/stderr, or the host itself
(the truncation marker)."""

ProgressStage = Literal["cached", "compiling", "compiled"]


@final
@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """What one call may use. Units are in the field names.

    Args:
        fuel: wasm fuel units (about one per instruction) for instantiation and the call.
        memory_bytes: bytes of linear memory, summed over all memories of the call.
        timeout_ms: wall-clock milliseconds for instantiation and the call.
        max_log_bytes: bytes of guest output (``log``, stdout, stderr) kept.

    Raises:
        ValueError: a limit is not a positive int (caller misuse; manifests are checked
            against the host ceilings when they load).
    """

    fuel: int
    memory_bytes: int
    timeout_ms: int
    max_log_bytes: int

    def __post_init__(self) -> None:
        for name in ("fuel", "memory_bytes", "timeout_ms", "max_log_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"SandboxLimits.{name} must be a positive int, got {value!r}")


@final
@dataclass(frozen=True, slots=True)
class LogLine:
    """One line of a call's log.

    Args:
        source: ``log`` (the host import), ``stdout``, ``stderr`` or ``host``.
        level: the guest's level for ``log``; ``info`` for stdout, ``warn`` for stderr.
        text: the line, decoded as UTF-8 with replacement characters, scrubbed.
    """

    source: LogSource
    level: LogLevel
    text: str


@final
@dataclass(frozen=True, slots=True)
class SandboxUsage:
    """What a call used; attached to results and, as a dict, to errors (``details["usage"]``).

    Args:
        fuel_consumed: fuel units used by instantiation and the call.
        wall_ms: milliseconds from store creation to the end of the call.
        log_bytes: bytes of guest output kept in the log.
        log_truncated: whether guest output was dropped at ``max_log_bytes``.
    """

    fuel_consumed: int
    wall_ms: float
    log_bytes: int
    log_truncated: bool

    def to_dict(self) -> dict[str, Any]:
        """The usage as a JSON-able mapping."""
        return asdict(self)


@final
@dataclass(frozen=True, slots=True)
class SandboxResult:
    """The outcome of a successful call.

    Args:
        output: the string the guest returned (canonical JSON by contract, unchecked here).
        log: the call's log lines, in order, capped at ``max_log_bytes``.
        usage: what the call used.
    """

    output: str
    log: tuple[LogLine, ...]
    usage: SandboxUsage


@final
@dataclass(frozen=True, slots=True)
class ProgressEvent:
    """Progress of :meth:`Runtime.load_many`.

    Args:
        name: the item's name as given.
        stage: ``cached`` (loaded without compiling), ``compiling`` (started) or
            ``compiled`` (finished).
        done: items finished so far (including this one for ``cached``/``compiled``).
        total: items in the batch.
    """

    name: str
    stage: ProgressStage
    done: int
    total: int


@final
@dataclass(frozen=True, slots=True)
class CacheStats:
    """Counters of the compiled-artifact cache of one Runtime.

    Args:
        compiled: components compiled from module bytes.
        deserialized: components loaded from a verified on-disk artifact.
        memory_hits: loads answered from the in-memory map.
        rejected: on-disk artifacts refused (truncated, tampered, foreign, unreadable).
    """

    compiled: int
    deserialized: int
    memory_hits: int
    rejected: int


@final
@dataclass(frozen=True, slots=True)
class ClockBridge:
    """What the sandbox needs to run guests under the replaced clock.

    Args:
        native_linker: a linker with only wasmtime's WASI (instantiates the bridge).
        component: the compiled clock bridge.
        extra_instances: core instances the bridge adds to a store (for its limits).
        interface: the replaced interface name, e.g. ``wasi:clocks/monotonic-clock@0.2.12``.
    """

    native_linker: wc.Linker
    component: wc.Component
    extra_instances: int
    interface: str
