"""Two repairs of wasmtime-py 50, applied when the runtime is imported.

1. Thread safety of untagged-variant lowering (below).
2. Fewer copies when a ``string`` crosses the boundary (every fresh
   16 MiB buffer costs about 40 ms of page faults on this machine):

   - lowering: wasmtime-py's ``String.convert_to_c`` encodes the text, copies it into a
     fresh ctypes array, then ``memmove``s that into a fresh ``wasm_byte_vec_t``.
     :func:`_lower_string` encodes once and lets ``wasm_byte_vec_new`` copy straight
     from the ``bytes`` (16 MiB: 1.4 ms instead of 80 ms). It also accepts
     :class:`Utf8Text`, text the host already holds as UTF-8 bytes (an ASCII response
     body), lowered without any conversion.
   - lifting: ``String.convert_from_c`` copies the C buffer into a ``bytearray`` and
     decodes that; :func:`_lift_string` decodes straight from the C buffer.

   Both are installed only if ``String``'s converters are still wasmtime-py 50's
   (recognized by the names their code uses); :data:`FAST_STRINGS` says whether they
   were, and :class:`Utf8Text` may only be used when it is true.

Repair 1: ``wasmtime.component._types.VariantLikeType._lower`` picks the case of an *untagged*
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

Upstream: the race is bytecodealliance/wasmtime-py#254 (open). Neither repair has been
offered upstream yet (this project's machines reach package registries only); how a
wasmtime upgrade re-checks both guards: docs/wasmtime-upgrade.md.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator
from typing import Any

from wasmtime import _ffi
from wasmtime.component import _types as _wasmtime_component_types

__all__ = ["FAST_STRINGS", "Utf8Text", "apply"]


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


class Utf8Text:
    """Text held as its UTF-8 bytes, lowered as a WIT ``string`` without conversion.

    Args:
        data: valid UTF-8 (the caller guarantees it; ASCII always is).
    """

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


FAST_STRINGS = False
"""Whether :func:`apply` installed the string converters (and :class:`Utf8Text` works)."""


def _lower_string(self: Any, store: Any, val: Any, ptr: Any) -> None:
    """``String.convert_to_c`` with one copy (see module docstring, repair 2)."""
    del self, store
    if type(val) is Utf8Text:
        data = val.data
    elif isinstance(val, str):
        data = val.encode("utf-8")
    else:
        raise TypeError("expected string type")
    vec = _ffi.wasm_byte_vec_t()
    _ffi.wasm_byte_vec_new(
        ctypes.byref(vec), len(data), ctypes.cast(ctypes.c_char_p(data), ctypes.POINTER(_ffi.wasm_byte_t))
    )
    ptr.contents.kind = _ffi.WASMTIME_COMPONENT_STRING
    ptr.contents.of.string = vec


def _lift_string(self: Any, c: Any) -> str:
    """``String.convert_from_c`` decoding straight from the C buffer (repair 2)."""
    del self
    if c.kind != _ffi.WASMTIME_COMPONENT_STRING.value:
        raise TypeError("expected a string value")
    vec = c.of.string
    try:
        if not vec.size:
            return ""
        buffer = (ctypes.c_char * vec.size).from_address(ctypes.addressof(vec.data.contents))
        return str(buffer, "utf-8")
    finally:
        _ffi.wasm_byte_vec_delete(ctypes.byref(c.of.string))


def _uses(function: Any, *names: str) -> bool:
    code = getattr(function, "__code__", None)
    return code is not None and all(name in code.co_names for name in names)


def apply() -> None:
    """Install both repairs (idempotent)."""
    with _lock:
        current = getattr(_wasmtime_component_types, "case_test_cache", None)
        if type(current) is set:
            _wasmtime_component_types.case_test_cache = _ThreadLocalSet()  # type: ignore[assignment]  # see module docstring
        global FAST_STRINGS  # noqa: PLW0603  # set once, under the lock
        string_type = _wasmtime_component_types.String
        if FAST_STRINGS:
            return
        if _uses(string_type.convert_to_c, "str_to_capi", "WASMTIME_COMPONENT_STRING") and _uses(
            string_type.convert_from_c, "to_str", "wasm_byte_vec_delete"
        ):
            string_type.convert_to_c = _lower_string  # type: ignore[method-assign]  # see module docstring
            string_type.convert_from_c = _lift_string  # type: ignore[method-assign]  # see module docstring
            FAST_STRINGS = True
