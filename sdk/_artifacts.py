"""Compile a module for reading (inspect, lock verify) through the per-user artifact cache.

``stockade inspect`` and ``stockade lock verify --components`` used to compile every
component on every run (7-8 s for a Python plugin). They now compile with the host's own
engine configuration and look the result up in, and store it into, the same per-user
compiled-artifact cache the harness, ``stockade dev`` and opted-in hosts use
(:func:`host.runtime.cache.user_artifact_dir`): an artifact is HMAC-verified before it is
deserialized, and a component is stored only after it passed the host's load-time checks,
exactly as :class:`host.runtime.Runtime` does.
"""

from __future__ import annotations

import functools
import hashlib

import wasmtime
from wasmtime import component as wc

from host.errors import ComponentRefused
from host.runtime.cache import ArtifactCache
from host.runtime.engine import (
    Compiler,
    build_engine,
    engine_config_hash,
    selected_compiler,
    wasmtime_version,
)
from sdk._cachedir import artifacts_dir

__all__ = ["CACHE_MAX_BYTES", "cached_component", "is_cached", "remember"]

CACHE_MAX_BYTES = 4 * 1024**3  # bytes; the default cap of HostConfig.artifact_cache_max_bytes


@functools.cache
def _engine(compiler: Compiler) -> wasmtime.Engine:
    return build_engine(compiler)


def _cache(compiler: Compiler) -> ArtifactCache:
    directory = artifacts_dir()
    return ArtifactCache(
        directory,
        directory / "artifact.key",
        _engine(compiler),
        wasmtime_version=wasmtime_version(),
        engine_config_hash=engine_config_hash(compiler=compiler),
        max_bytes=CACHE_MAX_BYTES,
    )


def cached_component(module: bytes) -> tuple[wc.Component, wasmtime.Engine, bool]:
    """The compiled component, from the cache when a verified artifact exists.

    Nothing is stored here: call :func:`remember` once the component passed the checks.

    Raises:
        ComponentRefused: it does not compile.

    Returns:
        ``(component, engine, fresh)``; read types with that engine; ``fresh`` is True
        when it was compiled now.
    """
    compiler = selected_compiler()
    component = _cache(compiler).load(hashlib.sha256(module).hexdigest())
    if component is not None:
        return component, _engine(compiler), False
    try:
        return wc.Component(_engine(compiler), module), _engine(compiler), True
    except wasmtime.WasmtimeError as exc:
        raise ComponentRefused(f"the component does not compile: {str(exc)[:500]}") from exc


def is_cached(module: bytes) -> bool:
    """Whether the per-user artifact cache holds a compiled artifact of ``module`` (for
    progress lines: :func:`cached_component` still verifies it before use)."""
    return _cache(selected_compiler()).path(hashlib.sha256(module).hexdigest()).is_file()


def remember(module: bytes, component: wc.Component) -> None:
    """Store a freshly compiled component that passed the host's load-time checks."""
    _cache(selected_compiler()).store(hashlib.sha256(module).hexdigest(), component)
