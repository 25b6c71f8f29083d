"""The wasmtime Engine of a host and its epoch ticker (docs/design.md §8).

One Engine per host, with fuel metering and epoch interruption on. A daemon thread
increments the engine's epoch every :data:`EPOCH_TICK_MS` milliseconds; a store's epoch
deadline is therefore counted in ticks. The ticker stops, and is joined, when the
runtime closes.

The settings applied to the engine are a constant mapping (:data:`ENGINE_SETTINGS`); its
hash, with the wasmtime version and the machine, keys the compiled-artifact cache, so
changing a setting can never load code compiled under another one.

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
import json
import platform
import threading
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

import wasmtime

__all__ = [
    "ENGINE_SETTINGS",
    "EPOCH_TICK_MS",
    "EpochTicker",
    "build_engine",
    "deadline_ticks",
    "engine_config_hash",
    "wasmtime_version",
]

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


def build_engine() -> wasmtime.Engine:
    """A new Engine configured with :data:`ENGINE_SETTINGS`.

    Returns:
        the engine.
    """
    config = wasmtime.Config()
    for name, value in ENGINE_SETTINGS.items():
        setattr(config, name, value)
    return wasmtime.Engine(config)


def wasmtime_version() -> str:
    """The installed wasmtime-py version (its native library has the same version)."""
    return importlib.metadata.version("wasmtime")


def engine_config_hash(settings: Mapping[str, object] = ENGINE_SETTINGS) -> str:
    """sha256 (hex) over the engine settings, the artifact format and the machine.

    Args:
        settings: the settings to hash (the runtime's own by default).

    Returns:
        64 hex characters.
    """
    material = {
        "format": _ARTIFACT_FORMAT,
        "machine": platform.machine(),
        "system": platform.system(),
        "settings": dict(settings),
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
