"""The ``call`` function type, resolved once per component instead of on every call.

wasmtime-py 50's ``Func.__call__`` asks ``self.type(store)`` for the function type on
every call, reads ``.params`` and ``.result`` (each a round of FFI calls that builds new
type objects), and lifting the ``result<string, tool-error>`` recomputes, again through
FFI, the cases of the result and whether it is tagged. For the trivial echo component
that is about 30 µs of an 85 µs call.

:class:`CallType` does that work once, when the component loads: it holds the parameter
and result types of ``call`` (taken from ``Component.type``, the same types the instance
reports), pins the cases and the tagged flag of the result and of ``tool-error`` on
those objects, and :meth:`CallType.bind` makes a ``Func`` answer ``type()`` with it. The
objects are only read afterwards, so every thread may share them.

This relies on private wasmtime-py methods (``_cases`` and ``_tagged`` of variant-like
types; ``Func.type`` being looked up on the instance), so every use is guarded: a type
without those methods is left unpinned and a ``Func`` whose ``type`` cannot be shadowed
is returned as it is. Without the guards, a wasmtime-py that renamed those methods would
break every component load (an AttributeError while building the type), not only slow
calls down. If a future wasmtime-py stops calling ``self.type`` or these helpers, the
pinned values are simply unused: the call stays correct, only slower (``bench_sandbox.py``
shows it). pyproject.toml pins wasmtime ``>=50,<51``; ``tests/unit/host/runtime/
test_calltype.py`` checks the cached type is what a call uses.
"""

from __future__ import annotations

from typing import Any

from wasmtime import component as wc

__all__ = ["CallType"]


class CallType:
    """The resolved type of ``call``; answers ``Func.type`` for every instance.

    Args:
        functype: the ``call`` export's type from ``Component.type.exports(engine)``,
            already checked to be ``func(tool: string, input: string) ->
            result<string, tool-error>``.
    """

    __slots__ = ("params", "result")

    def __init__(self, functype: wc.FuncType) -> None:
        self.params: list[tuple[str, Any]] = functype.params
        result: Any = functype.result
        if _pin_variant_like(result):
            for _name, case_type in result._cases():
                if isinstance(case_type, wc.VariantType):
                    _pin_variant_like(case_type)
        self.result = result

    def bind(self, func: wc.Func) -> wc.Func:
        """Make ``func`` use this type instead of querying wasmtime on each call.

        A ``Func`` that does not allow it (no ``type`` method, or no instance attributes)
        is returned unchanged: it then queries its type itself, as wasmtime-py does.
        """
        if not callable(getattr(type(func), "type", None)):
            return func
        try:
            setattr(func, "type", self._type)  # noqa: B010  # shadows Func.type on this instance only
        except AttributeError:
            return func
        return func

    def _type(self, _store: object) -> CallType:
        return self


def _pin_variant_like(ty: Any) -> bool:
    """Pin the cases and the tagged flag of ``ty``; False (nothing done) if it has neither."""
    if not (callable(getattr(ty, "_cases", None)) and callable(getattr(ty, "_tagged", None))):
        return False
    cases = list(ty._cases())
    tagged = ty._tagged()
    ty._cases = lambda: cases
    ty._tagged = lambda: tagged
    return True
