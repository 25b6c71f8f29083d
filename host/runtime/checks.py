"""Load-time checks of a component's imports and exports (docs/design.md §2).

The checks read ``Component.type.imports(engine)`` / ``.exports(engine)``; they never
instantiate anything. A component is accepted only if:

- it exports ``call`` with exactly the world's type
  ``func(tool: string, input: string) -> result<string, tool-error>`` where
  ``tool-error`` is ``variant { invalid-input(string), failed(string) }``. Parameter
  names, case names and case order are compared, not just shapes. Other exports (for
  example the types a toolchain re-exports) are allowed: the host never calls them.
- every import is an *instance* named by an allowed interface:
  ``stockade:plugin/host@1.x`` with x >= 1 (each function it imports must be one the
  host provides, with exactly the WIT type), ``stockade:plugin/types@1.x`` with x >= 1
  (types only), and WASI 0.2.x ``wasi:cli``, ``wasi:io``, ``wasi:clocks``,
  ``wasi:random``, ``wasi:filesystem``, ``wasi:sockets`` (linked, granting nothing: no
  preopens, no network; the monotonic clock is the host's, see
  :mod:`host.runtime.clock`). Anything else, ``wasi:http`` included, is refused with
  the import named.
- a component built for ``stockade:plugin@1.0.0`` (``host@1.0.x`` or ``types@1.0.x``) is
  refused with a hint to rebuild: 1.0.0 carried headers as ``list<header>`` and bodies as
  ``list<u8>``, which wasmtime-py lifts one element at a time in Python, outside every
  limit. 1.1.0 carries each as one ``string``.

How types are compared: wasmtime-py 50 exposes the full structure of component value
types (``RecordType.fields``, ``VariantType.cases``, ``EnumType.names``,
``ResultType.ok/err``, ``OptionType.payload``, ``ListType.element``, primitives as
classes), so :func:`describe` turns a type into a nested tuple and the checks compare
tuples with the expected ones below. Resource, stream, future and error-context types
describe as opaque markers that never equal an expected type.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, final

import wasmtime
from wasmtime import component as wc

from host.errors import ComponentRefused

__all__ = [
    "CALL_EXPORT",
    "EXPECTED_CALL_TYPE",
    "HOST_FUNCTION_TYPES",
    "REBUILD_HINT",
    "WIT_VERSION",
    "ComponentShape",
    "check_component",
    "describe",
    "describe_func",
]

Desc = str | tuple[object, ...] | None
"""A type description: a primitive's name or a nested tuple (see :func:`describe`)."""

CALL_EXPORT: Final = "call"
_MAX_DEPTH = 16

WIT_VERSION: Final = "1.1.0"
"""The version of the ``stockade:plugin`` package this host implements."""

_S: Final = "string"
_REQUEST: Final = (
    "record",
    (
        ("method", _S),
        ("url", _S),
        ("headers", _S),
        ("body", ("option", _S)),
        ("timeout-ms", ("option", "u32")),
    ),
)
_RESPONSE: Final = ("record", (("status", "u16"), ("headers", _S), ("body", _S)))
_HTTP_ERROR: Final = (
    "variant",
    (
        ("denied", _S),
        ("credential-unavailable", _S),
        ("invalid-request", _S),
        ("too-large", None),
        ("timeout", None),
        ("budget-exhausted", None),
        ("network", _S),
    ),
)
_TOOL_ERROR: Final = ("variant", (("invalid-input", _S), ("failed", _S)))
_LOG_LEVEL: Final = ("enum", ("debug", "info", "warn", "error"))

TYPE_DESCRIPTIONS: Final[Mapping[str, Desc]] = {
    "request": _REQUEST,
    "response": _RESPONSE,
    "http-error": _HTTP_ERROR,
    "tool-error": _TOOL_ERROR,
    "log-level": _LOG_LEVEL,
}
"""The named types of ``stockade:plugin/types``, described."""

EXPECTED_CALL_TYPE: Final[Desc] = ((("tool", _S), ("input", _S)), ("result", _S, _TOOL_ERROR))
"""``call: func(tool: string, input: string) -> result<string, tool-error>``."""

HOST_FUNCTION_TYPES: Final[Mapping[str, Desc]] = {
    "http-request": ((("req", _REQUEST),), ("result", _RESPONSE, _HTTP_ERROR)),
    "log": ((("level", _LOG_LEVEL), ("message", _S)), None),
    "secret-available": ((("name", _S),), "bool"),
}
"""The functions of ``stockade:plugin/host``, described."""

_HOST_IFACE = re.compile(r"stockade:plugin/host@1\.([1-9][0-9]*)\.(0|[1-9][0-9]*)")
_TYPES_IFACE = re.compile(r"stockade:plugin/types@1\.([1-9][0-9]*)\.(0|[1-9][0-9]*)")
_OLD_IFACE = re.compile(r"stockade:plugin/(host|types)@1\.0\.(0|[1-9][0-9]*)")
REBUILD_HINT: Final = (
    "The component was built for stockade:plugin@1.0.0; this host implements "
    f"stockade:plugin@{WIT_VERSION}. Rebuild it with the current SDK (`stockade build`): "
    "plugin code needs no change."
)
_WASI_IFACE = re.compile(
    r"wasi:(cli|io|clocks|random|filesystem|sockets)/[a-z][a-z0-9]*(-[a-z0-9]+)*"
    r"@0\.2\.(0|[1-9][0-9]*)"
)

_PRIMITIVES: Final[Mapping[type, str]] = {
    wc.Bool: "bool",
    wc.S8: "s8",
    wc.S16: "s16",
    wc.S32: "s32",
    wc.S64: "s64",
    wc.U8: "u8",
    wc.U16: "u16",
    wc.U32: "u32",
    wc.U64: "u64",
    wc.F32: "f32",
    wc.F64: "f64",
    wc.Char: "char",
    wc.String: "string",
}


@final
@dataclass(frozen=True, slots=True)
class ComponentShape:
    """What the checks learned about an accepted component.

    Args:
        uses_wasi: whether it imports any WASI interface (the call then needs a WASI
            context; a component without WASI imports gets none).
        host_functions: the ``stockade:plugin/host`` functions it imports.
    """

    uses_wasi: bool
    host_functions: frozenset[str]


def describe(ty: object, depth: int = 0) -> Desc:
    """A comparable description of a component value type.

    Args:
        ty: a wasmtime-py ``ValType`` (or ``None`` for "no type").
        depth: recursion depth (types deeper than 16 levels describe as ``"too-deep"``).

    Returns:
        a primitive's name, or ``(kind, ...)`` tuples for compound types.
    """
    if ty is None:
        return None
    if depth > _MAX_DEPTH:
        return "too-deep"
    primitive = _PRIMITIVES.get(type(ty))
    if primitive is not None:
        return primitive
    d = depth + 1
    if isinstance(ty, wc.ListType):
        return ("list", describe(ty.element, d))
    if isinstance(ty, wc.OptionType):
        return ("option", describe(ty.payload, d))
    if isinstance(ty, wc.ResultType):
        return ("result", describe(ty.ok, d), describe(ty.err, d))
    if isinstance(ty, wc.RecordType):
        return ("record", tuple((name, describe(t, d)) for name, t in ty.fields))
    if isinstance(ty, wc.TupleType):
        return ("tuple", tuple(describe(t, d) for t in ty.elements))
    if isinstance(ty, wc.VariantType):
        return ("variant", tuple((name, describe(t, d)) for name, t in ty.cases))
    if isinstance(ty, wc.EnumType):
        return ("enum", tuple(ty.names))
    if isinstance(ty, wc.FlagsType):
        return ("flags", tuple(ty.names))
    return ("opaque", type(ty).__name__)


def describe_func(ty: wc.FuncType) -> Desc:
    """``(((param, desc), ...), result_desc)`` of a component function type."""
    return (tuple((name, describe(t)) for name, t in ty.params), describe(ty.result))


def check_component(component: wc.Component, engine: wasmtime.Engine) -> ComponentShape:
    """Check a compiled component's exports and imports against the world.

    Args:
        component: the compiled component (not instantiated).
        engine: the engine it was compiled with.

    Raises:
        ComponentRefused: ``call`` is missing or has another type, or an import is
            outside the allowed interfaces; the message names the export or import.

    Returns:
        what the runtime needs to know to run it.
    """
    try:
        return _check(component, engine)
    except (TypeError, NotImplementedError, wasmtime.WasmtimeError) as exc:
        # wasmtime-py raises these for item or type kinds it cannot represent.
        raise ComponentRefused(f"the component's types cannot be inspected: {exc}") from exc


def _check(component: wc.Component, engine: wasmtime.Engine) -> ComponentShape:
    ctype = component.type
    _check_call_export(ctype.exports(engine))
    uses_wasi = False
    host_functions: set[str] = set()
    for name, extern in ctype.imports(engine).items():
        item = extern.ty
        if not isinstance(item, wc.ComponentInstanceType):
            raise ComponentRefused(
                f"import {name!r} is not an interface instance: only interfaces of the "
                "stockade:plugin world and WASI may be imported",
                import_name=name,
            )
        if _OLD_IFACE.fullmatch(name):
            raise ComponentRefused(
                f"import {name!r} is from stockade:plugin@1.0.0, which this host no longer "
                f"runs (it implements {WIT_VERSION})",
                hint=REBUILD_HINT,
                import_name=name,
            )
        if _HOST_IFACE.fullmatch(name):
            host_functions |= _check_host_instance(name, item, engine)
        elif _TYPES_IFACE.fullmatch(name):
            _check_types_instance(name, item, engine)
        elif _WASI_IFACE.fullmatch(name):
            uses_wasi = True
        else:
            raise ComponentRefused(
                f"import {name!r} is not allowed: a component may import only "
                "stockade:plugin/host@1.x, stockade:plugin/types@1.x (x >= 1) and wasi:cli, wasi:io, "
                "wasi:clocks, wasi:random, wasi:filesystem, wasi:sockets at 0.2.x",
                import_name=name,
            )
    return ComponentShape(uses_wasi=uses_wasi, host_functions=frozenset(host_functions))


def _check_call_export(exports: Mapping[str, object]) -> None:
    extern = exports.get(CALL_EXPORT)
    if extern is None:
        raise ComponentRefused(
            "the component does not export `call`", export_name=CALL_EXPORT
        )
    ty = extern.ty  # type: ignore[attr-defined]  # ComponentExtern is untyped in wasmtime-py
    if not isinstance(ty, wc.FuncType):
        raise ComponentRefused("export `call` is not a function", export_name=CALL_EXPORT)
    found = describe_func(ty)
    if found != EXPECTED_CALL_TYPE:
        raise ComponentRefused(
            "export `call` has the wrong type: expected func(tool: string, input: string) "
            f"-> result<string, tool-error>, found {_render_func(found)}",
            export_name=CALL_EXPORT,
        )


def _check_host_instance(
    name: str, item: wc.ComponentInstanceType, engine: wasmtime.Engine
) -> set[str]:
    functions: set[str] = set()
    for member, extern in item.exports(engine).items():
        ty = extern.ty
        qualified = f"{name}#{member}"
        if isinstance(ty, wc.FuncType):
            expected = HOST_FUNCTION_TYPES.get(member)
            if expected is None:
                raise ComponentRefused(
                    f"import {qualified!r} is not a function the host provides",
                    import_name=qualified,
                )
            found = describe_func(ty)
            if found != expected:
                raise ComponentRefused(
                    f"import {qualified!r} has type {_render_func(found)}, not the WIT type",
                    import_name=qualified,
                )
            functions.add(member)
        else:
            _check_named_type(qualified, member, ty)
    return functions


def _check_types_instance(
    name: str, item: wc.ComponentInstanceType, engine: wasmtime.Engine
) -> None:
    for member, extern in item.exports(engine).items():
        _check_named_type(f"{name}#{member}", member, extern.ty)


def _check_named_type(qualified: str, member: str, ty: object) -> None:
    expected = TYPE_DESCRIPTIONS.get(member)
    if expected is None or isinstance(ty, (wc.FuncType, wc.ComponentInstanceType)):
        raise ComponentRefused(
            f"import {qualified!r} is not a type of the stockade:plugin world",
            import_name=qualified,
        )
    if describe(ty) != expected:
        raise ComponentRefused(
            f"import {qualified!r} differs from the WIT type of the same name",
            import_name=qualified,
        )


def _render_func(desc: Desc) -> str:
    if not isinstance(desc, tuple) or len(desc) != 2:
        return repr(desc)
    params, result = desc
    rendered = ", ".join(f"{p[0]}: {_render(p[1])}" for p in params)  # type: ignore[attr-defined]
    tail = "" if result is None else f" -> {_render(result)}"
    return f"func({rendered}){tail}"


def _render(desc: object) -> str:
    if desc is None:
        return "_"
    if isinstance(desc, str):
        return desc
    if not isinstance(desc, tuple) or not desc:
        return repr(desc)
    kind, *rest = desc
    if kind in ("list", "option"):
        return f"{kind}<{_render(rest[0])}>"
    if kind == "result":
        return f"result<{_render(rest[0])}, {_render(rest[1])}>"
    if kind in ("record", "variant"):
        inner = ", ".join(
            f"{n}" if t is None else f"{n}: {_render(t)}"
            for n, t in rest[0]
        )
        return f"{kind} {{ {inner} }}"
    if kind in ("enum", "flags", "tuple"):
        return f"{kind}<{', '.join(_render(x) for x in rest[0])}>"
    return f"{kind}:{rest[0]}" if rest else str(kind)
