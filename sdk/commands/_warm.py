"""Compile a lock's packages into the per-user artifact cache hosts load from.

``stockade serve`` compiles every package before it answers ``initialize``: a cold start
of a Python plugin takes tens of seconds, longer than some clients wait to connect.
``stockade lock add`` (which compiles to check the component), ``stockade init`` and
``stockade lock verify`` leave each package compiled in the cache that ``serve``, ``call``
and hosts opened with ``HostConfig(artifact_cache_dir=user_artifact_dir())`` use, so a
server started after them starts warm. One line per package on stderr.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any, Final

__all__ = ["COMPILE_NOTE", "say_compiling", "warm_packages"]

COMPILE_NOTE: Final = "first time only; 5-20 s on 2 idle cores; stored in the artifact cache hosts use"


def say_compiling(name: str, module: bytes, *, index: int = 1, total: int = 1) -> bool:
    """Print a line before a package is compiled, when it is not in the cache yet.

    Returns:
        True when a line was printed (the compile is expected to be slow).
    """
    from sdk._artifacts import is_cached

    if is_cached(module):
        return False
    print(f"compiling package {name} ({index} of {total}; {COMPILE_NOTE})", file=sys.stderr, flush=True)
    return True


def warm_packages(packages: Sequence[tuple[str, bytes]], *, show: bool = True) -> dict[str, dict[str, Any]]:
    """Compile and check each ``(name, module)`` through the artifact cache.

    Args:
        packages: package names and their ``module.wasm`` bytes.
        show: print one line per package compiled now (stderr).

    Returns:
        ``{name: refusal}`` for each component the host would refuse (``{"code", "message"}``);
        such a component is not stored.
    """
    from sdk.review.report import component_report

    refused: dict[str, dict[str, Any]] = {}
    for index, (name, module) in enumerate(packages, start=1):
        started = time.monotonic()
        slow = show and say_compiling(name, module, index=index, total=len(packages))
        refusal = component_report(module)["refusal"]
        if refusal is not None:
            refused[name] = refusal
        elif slow:
            elapsed = time.monotonic() - started
            print(f"compiled package {name} in {elapsed:.1f} s", file=sys.stderr, flush=True)
    return refused
