"""One thread-safety repair of wasmtime-py 50, applied when the runtime is imported.

``wasmtime.component._types.VariantLikeType._lower`` picks the case of an *untagged*
variant (a ``result``/``option``/``variant`` whose cases have distinct Python types) by
filling a **module-global** set, ``case_test_cache``, and then testing
``isinstance(value, tuple(case_test_cache))``. Two threads lowering such a value at the
same time (here: two sandboxes whose guests call ``http-request`` at once, whose result
is ``result<response, http-error>``) can clear and refill each other's set between the
two steps: the host function then fails with "value not valid for this variant" or
lowers a value through the wrong case's converter. wasmtime-py documents that its
bindings are not thread safe (bytecodealliance/wasmtime-py#254).

The repair replaces that global with a set-like object whose storage is per thread.
``_lower`` only calls ``clear``, ``add`` (through ``add_classes``) and iterates it, all
of which :class:`_ThreadLocalSet` provides. It is applied once and only if the global is
still a plain ``set`` (a future wasmtime-py that fixes or removes it is left alone).

Under CPython's GIL the window is narrow (the race was not observed in 800 000 lowerings
from 8 threads with a 1 µs switch interval); it is wide open on a free-threaded build.
``tests/unit/host/runtime/test_concurrency.py`` checks the repair is installed and
stresses concurrent ``http-request`` results.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from wasmtime.component import _types as _wasmtime_component_types

__all__ = ["apply"]


class _ThreadLocalSet:
    """The subset of ``set`` that ``_lower`` uses, stored per thread."""

    __slots__ = ("_local",)

    def __init__(self) -> None:
        self._local = threading.local()

    def _set(self) -> set[type]:
        try:
            return self._local.value  # type: ignore[no-any-return]  # threading.local is untyped
        except AttributeError:
            value: set[type] = set()
            self._local.value = value
            return value

    def clear(self) -> None:
        self._set().clear()

    def add(self, item: type) -> None:
        self._set().add(item)

    def __iter__(self) -> Iterator[type]:
        return iter(self._set())

    def __len__(self) -> int:
        return len(self._set())

    def __contains__(self, item: object) -> bool:
        return item in self._set()


_lock = threading.Lock()


def apply() -> None:
    """Install the per-thread ``case_test_cache`` (idempotent)."""
    with _lock:
        current = getattr(_wasmtime_component_types, "case_test_cache", None)
        if type(current) is set:
            _wasmtime_component_types.case_test_cache = _ThreadLocalSet()  # type: ignore[assignment]  # see module docstring
