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

Example::

    engine = build_engine()
    ticker = EpochTicker(engine)
    ticker.start()
    ...
    ticker.stop()
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import json
import os
import platform
import threading
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, Literal

import wasmtime
from wasmtime import _bindings

from host.errors import ConfigInvalid

__all__ = [
    "COMPILERS",
    "COMPILER_ENV",
    "ENGINE_SETTINGS",
    "EPOCH_TICK_MS",
    "Compiler",
    "EpochTicker",
    "build_engine",
    "deadline_ticks",
    "engine_config_hash",
    "selected_compiler",
    "wasmtime_version",
]

Compiler = Literal["cranelift", "winch"]
COMPILERS: Final[tuple[Compiler, ...]] = ("cranelift", "winch")
COMPILER_ENV: Final = "STOCKADE_COMPILER"
"""The environment variable that selects the compiler (unset or empty: Cranelift)."""
_WINCH: Final = 2  # wasmtime_strategy_t WASMTIME_STRATEGY_WINCH (wasmtime/config.h)

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


def build_engine(compiler: Compiler | None = None) -> wasmtime.Engine:
    """A new Engine configured with :data:`ENGINE_SETTINGS` and ``compiler``.

    Args:
        compiler: the compiler; :func:`selected_compiler` when ``None``.

    Returns:
        the engine.

    Raises:
        ConfigInvalid: ``$STOCKADE_COMPILER`` is invalid, or Winch was asked for and this
            wasmtime's bindings are not the ones Winch is selected through.
    """
    compiler = selected_compiler() if compiler is None else compiler
    config = wasmtime.Config()
    for name, value in ENGINE_SETTINGS.items():
        setattr(config, name, value)
    if compiler == "winch":
        _use_winch(config)
    return wasmtime.Engine(config)


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
