"""Hand-written WebAssembly components (component text format) for tests and benchmarks.

Every component here implements (or deliberately breaks) the ``stockade:plugin/tool``
world of ``sdk/wit/stockade.wit``. They are built with ``wasmtime.wat2wasm`` and cached
per process.

- :func:`echo_component` — the smallest correct guest: one core module, no imports;
  ``call`` returns its input. Used by the benchmark and as the happy path everywhere.
- :func:`guest` — a skeleton for guests that import host functions. Layout: a core
  module ``$Mem`` owns the memory and a bump ``realloc``; the host functions are lowered
  against it; the core module ``$Main`` imports both and exports ``call``. Strings in
  ``strings`` become a data segment, referenced in the body as ``{S:name}`` which expands
  to ``(i32.const ptr) (i32.const len)`` (``{P:name}`` / ``{L:name}`` give one of them).
- hostile guests (loops, recursion, memory and table bombs, traps) and refused shapes
  (core module, wrong ``call`` type, forbidden imports).

Core helpers available in every :func:`guest` body: ``$ok (ptr len) -> retptr``,
``$err (tag ptr len) -> retptr`` (tag 0 = invalid-input, 1 = failed), an output buffer
``$emit (ptr len)``, ``$emit_u32 (n)``, ``$done -> retptr`` (returns ok with the buffer),
and ``$alloc (n) -> ptr``.

:func:`run_module` loads and runs a module once on a :class:`~host.runtime.Runtime` with
:data:`DEFAULT_LIMITS` and deny-all egress.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Mapping, Sequence

import wasmtime

from host.egress.port import DenyAllEgress, EgressPort
from host.runtime import Runtime, SandboxLimits, SandboxResult

__all__ = [
    "DEFAULT_LIMITS",
    "ECHO_WAT",
    "HOST_FUNCS",
    "WAIT_KINDS",
    "WASI_FUNCS",
    "aggregate_memory_bomb_component",
    "core_module",
    "counter_component",
    "echo_component",
    "environment_component",
    "exit_component",
    "guest",
    "http_boundary_component",
    "http_component",
    "import_component",
    "log_flood_component",
    "logging_component",
    "loop_component",
    "memory_bomb_component",
    "post_return_counter_component",
    "recursion_component",
    "run_module",
    "secret_component",
    "sha256",
    "start_loop_component",
    "stream_component",
    "table_bomb_component",
    "tool_error_component",
    "unreachable_component",
    "wasi_wait_component",
    "wrong_call_component",
]

TOOL_ERROR = '(type $te (variant (case "invalid-input" string) (case "failed" string)))'
CALL_TYPE = '(param "tool" string) (param "input" string) (result (result string (error $tool-error)))'

ECHO_WAT = """
(component
  (type $te (variant (case "invalid-input" string) (case "failed" string)))
  (export $tool-error "tool-error" (type $te))
  (core module $m
    (memory (export "mem") 1)
    (global $bump (mut i32) (i32.const 1024))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $p i32) (local $end i32)
      (local.set $p (i32.and (i32.add (global.get $bump) (i32.const 7)) (i32.const -8)))
      (local.set $end (i32.add (local.get $p) (local.get 3)))
      (if (i32.gt_u (local.get $end) (i32.shl (memory.size) (i32.const 16)))
        (then
          (if (i32.eq (memory.grow (i32.add (i32.shr_u (i32.sub (local.get $end)
                        (i32.shl (memory.size) (i32.const 16))) (i32.const 16)) (i32.const 1)))
                      (i32.const -1))
            (then unreachable))))
      (global.set $bump (local.get $end))
      (local.get $p))
    (func (export "call") (param i32 i32 i32 i32) (result i32)
      (i32.store (i32.const 0) (i32.const 0))
      (i32.store (i32.const 4) (local.get 2))
      (i32.store (i32.const 8) (local.get 3))
      (i32.const 0)))
  (core instance $i (instantiate $m))
  (func $call (param "tool" string) (param "input" string) (result (result string (error $tool-error)))
    (canon lift (core func $i "call") (memory (core memory $i "mem")) (realloc (core func $i "realloc"))))
  (export "call" (func $call))
)
"""
"""The trivial echo component: ``call(tool, input)`` returns ``input``."""

_HOST_TYPES = """
    (type $rq (record (field "method" string) (field "url" string) (field "headers" string)
                      (field "body" (option string)) (field "timeout-ms" (option u32))))
    (export "request" (type $request (eq $rq)))
    (type $rs (record (field "status" u16) (field "headers" string) (field "body" string)))
    (export "response" (type $response (eq $rs)))
    (type $he (variant (case "denied" string) (case "credential-unavailable" string)
                       (case "invalid-request" string) (case "too-large") (case "timeout")
                       (case "budget-exhausted") (case "network" string)))
    (export "http-error" (type $http-error (eq $he)))
    (type $ll (enum "debug" "info" "warn" "error"))
    (export "log-level" (type $log-level (eq $ll)))
"""

HOST_FUNCS: Mapping[str, tuple[str, str, str]] = {
    # name: (component func type inside the instance type, core import signature, canon options)
    "log": (
        '(func (param "level" $log-level) (param "message" string))',
        "(param i32 i32 i32)",
        '(memory (core memory $mem "mem"))',
    ),
    "secret-available": (
        '(func (param "name" string) (result bool))',
        "(param i32 i32) (result i32)",
        '(memory (core memory $mem "mem"))',
    ),
    "http-request": (
        '(func (param "req" $request) (result (result $response (error $http-error))))',
        "(param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32)",
        '(memory (core memory $mem "mem")) (realloc (core func $mem "realloc"))',
    ),
}

WASI_FUNCS: Mapping[str, tuple[str, str, str, str]] = {
    # name: (interface, component func type, core import signature, canon options)
    "get-environment": (
        "wasi:cli/environment@0.2.0",
        "(func (result (list (tuple string string))))",
        "(param i32)",
        '(memory (core memory $mem "mem")) (realloc (core func $mem "realloc"))',
    ),
    "get-arguments": (
        "wasi:cli/environment@0.2.0",
        "(func (result (list string)))",
        "(param i32)",
        '(memory (core memory $mem "mem")) (realloc (core func $mem "realloc"))',
    ),
    "get-random-u64": ("wasi:random/random@0.2.0", "(func (result u64))", "(result i64)", ""),
    "exit": ("wasi:cli/exit@0.2.0", '(func (param "status" (result)))', "(param i32)", ""),
}

_PRELUDE = """
    (global $out (mut i32) (i32.const 0))
    (global $outlen (mut i32) (i32.const 0))
    (func $alloc (param $n i32) (result i32)
      (call $realloc (i32.const 0) (i32.const 0) (i32.const 8) (local.get $n)))
    (func $ok (param $p i32) (param $l i32) (result i32)
      (i32.store (i32.const 16) (i32.const 0))
      (i32.store (i32.const 20) (local.get $p))
      (i32.store (i32.const 24) (local.get $l))
      (i32.const 16))
    (func $err (param $tag i32) (param $p i32) (param $l i32) (result i32)
      (i32.store (i32.const 16) (i32.const 1))
      (i32.store (i32.const 20) (local.get $tag))
      (i32.store (i32.const 24) (local.get $p))
      (i32.store (i32.const 28) (local.get $l))
      (i32.const 16))
    (func $emit (param $p i32) (param $l i32)
      (if (i32.eqz (global.get $out)) (then (global.set $out (call $alloc (i32.const 65536)))))
      (memory.copy (i32.add (global.get $out) (global.get $outlen)) (local.get $p) (local.get $l))
      (global.set $outlen (i32.add (global.get $outlen) (local.get $l))))
    (func $emit_u32 (param $n i32)
      (local $buf i32) (local $i i32)
      (local.set $buf (i32.const 48))
      (local.set $i (i32.const 16))
      (loop $digits
        (local.set $i (i32.sub (local.get $i) (i32.const 1)))
        (i32.store8 (i32.add (local.get $buf) (local.get $i))
                    (i32.add (i32.const 48) (i32.rem_u (local.get $n) (i32.const 10))))
        (local.set $n (i32.div_u (local.get $n) (i32.const 10)))
        (br_if $digits (i32.ne (local.get $n) (i32.const 0))))
      (call $emit (i32.add (local.get $buf) (local.get $i)) (i32.sub (i32.const 16) (local.get $i))))
    (func $done (result i32)
      (if (i32.eqz (global.get $out)) (then (global.set $out (call $alloc (i32.const 1)))))
      (call $ok (global.get $out) (global.get $outlen)))
"""

_MEM_MODULE = """
  (core module $Mem
    (memory (export "mem") {pages})
    (global $bump (mut i32) (i32.const {heap}))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $p i32) (local $end i32)
      (local.set $p (i32.and (i32.add (global.get $bump) (i32.const 7)) (i32.const -8)))
      (local.set $end (i32.add (local.get $p) (local.get 3)))
      (if (i32.gt_u (local.get $end) (i32.shl (memory.size) (i32.const 16)))
        (then
          (if (i32.eq (memory.grow (i32.add (i32.shr_u (i32.sub (local.get $end)
                        (i32.shl (memory.size) (i32.const 16))) (i32.const 16)) (i32.const 1)))
                      (i32.const -1))
            (then unreachable))))
      (global.set $bump (local.get $end))
      (local.get $p)))
  (core instance $mem (instantiate $Mem))
"""

_DATA_BASE = 1024


def sha256(data: bytes) -> str:
    """Hex sha256 of ``data`` (the digest :meth:`Runtime.load` expects)."""
    return hashlib.sha256(data).hexdigest()


@functools.cache
def _compile(text: str) -> bytes:
    return bytes(wasmtime.wat2wasm(text))


def echo_component() -> bytes:
    """The trivial echo component (see :data:`ECHO_WAT`)."""
    return _compile(ECHO_WAT)


def _layout(strings: Mapping[str, str]) -> tuple[dict[str, tuple[int, int]], str, int]:
    """Place strings in a data segment; return {name: (ptr, len)}, the segment, heap start."""
    offsets: dict[str, tuple[int, int]] = {}
    blob = bytearray()
    for name, text in strings.items():
        data = text.encode()
        offsets[name] = (_DATA_BASE + len(blob), len(data))
        blob += data
    escaped = "".join(f"\\{b:02x}" for b in blob)
    segment = f'(data (i32.const {_DATA_BASE}) "{escaped}")' if blob else ""
    heap = (_DATA_BASE + len(blob) + 4096) & ~7
    return offsets, segment, heap


def _expand(body: str, offsets: Mapping[str, tuple[int, int]]) -> str:
    for name, (ptr, length) in offsets.items():
        body = body.replace(f"{{S:{name}}}", f"(i32.const {ptr}) (i32.const {length})")
        body = body.replace(f"{{P:{name}}}", f"(i32.const {ptr})")
        body = body.replace(f"{{L:{name}}}", f"(i32.const {length})")
    return body


def guest(
    body: str,
    *,
    host: Sequence[str] = (),
    strings: Mapping[str, str] | None = None,
    funcs: str = "",
    host_interface: str = "stockade:plugin/host@1.1.0",
    extra: str = "",
    pages: int = 1,
    core_start: str = "",
    wasi: Sequence[str] = (),
) -> bytes:
    """A guest whose ``call`` runs ``body`` (core WAT returning the retptr).

    Args:
        body: core instructions of ``call``; params ``$tp $tl $ip $il`` (tool, input).
        host: host functions to import (``log``, ``secret-available``, ``http-request``);
            they are callable in the core module as ``$log``, ``$secret_available``,
            ``$http_request``.
        strings: constant strings, referenced as ``{S:name}``.
        funcs: extra core functions for the main module.
        host_interface: the name of the host interface import.
        extra: extra component-level items (imports, types) placed first.
        pages: initial pages of the memory.
        core_start: the name of a core function to run as the main module's start.
        wasi: WASI functions to import (see :data:`WASI_FUNCS`), callable as
            ``$get_environment`` etc.

    Returns:
        the component binary.
    """
    offsets, segment, heap = _layout(strings or {})
    parts = ["(component", extra, TOOL_ERROR, '(export $tool-error "tool-error" (type $te))']
    if host:
        exports = "\n".join(f'    (export "{n}" {HOST_FUNCS[n][0]})' for n in host)
        parts.append(f'  (import "{host_interface}" (instance $host {_HOST_TYPES}\n{exports}))')
        parts += [f'  (alias export $host "{n}" (func $host-{n}))' for n in host]
    interfaces: dict[str, list[str]] = {}
    for n in wasi:
        interfaces.setdefault(WASI_FUNCS[n][0], []).append(n)
    for k, (iface, names) in enumerate(interfaces.items()):
        exports = " ".join(f'(export "{n}" {WASI_FUNCS[n][1]})' for n in names)
        parts.append(f'  (import "{iface}" (instance $wasi{k} {exports}))')
        parts += [f'  (alias export $wasi{k} "{n}" (func $wasi-{n}))' for n in names]
    parts.append(_MEM_MODULE.format(pages=pages, heap=heap))
    for n in host:
        parts.append(f"  (core func $lowered-{n} (canon lower (func $host-{n}) {HOST_FUNCS[n][2]}))")
    for n in wasi:
        parts.append(f"  (core func $lowered-wasi-{n} (canon lower (func $wasi-{n}) {WASI_FUNCS[n][3]}))")
    core_imports = "\n".join(
        [f'    (import "host" "{n}" (func ${n.replace("-", "_")} {HOST_FUNCS[n][1]}))' for n in host]
        + [f'    (import "wasi" "{n}" (func ${n.replace("-", "_")} {WASI_FUNCS[n][2]}))' for n in wasi]
    )
    start = f"(start ${core_start})" if core_start else ""
    parts.append(f"""
  (core module $Main
    (import "env" "mem" (memory 1))
    (import "env" "realloc" (func $realloc (param i32 i32 i32 i32) (result i32)))
{core_imports}
    {segment}
{_PRELUDE}
{funcs}
    {start}
    (func (export "call") (param $tp i32) (param $tl i32) (param $ip i32) (param $il i32) (result i32)
      {_expand(body, offsets)}))""")
    host_with = " ".join(f'(export "{n}" (func $lowered-{n}))' for n in host)
    wasi_with = " ".join(f'(export "{n}" (func $lowered-wasi-{n}))' for n in wasi)
    parts.append(f"""
  (core instance $main (instantiate $Main
    (with "env" (instance (export "mem" (memory $mem "mem")) (export "realloc" (func $mem "realloc"))))
    (with "host" (instance {host_with}))
    (with "wasi" (instance {wasi_with}))))
  (func $call {CALL_TYPE}
    (canon lift (core func $main "call") (memory (core memory $mem "mem")) (realloc (core func $mem "realloc"))))
  (export "call" (func $call))
)""")
    return _compile("\n".join(parts))


# --- ordinary guests -------------------------------------------------------------------


def counter_component() -> bytes:
    """Increments a core global on every call and returns it: "1" on a fresh instance."""
    return guest(
        """
        (global.set $count (i32.add (global.get $count) (i32.const 1)))
        (call $emit_u32 (global.get $count))
        (call $done)""",
        funcs="(global $count (mut i32) (i32.const 0))",
    )


def post_return_counter_component() -> bytes:
    """``call`` returns a post-return counter; its ``cabi_post_return`` increments it."""
    return _compile("""
(component
  (type $te (variant (case "invalid-input" string) (case "failed" string)))
  (export $tool-error "tool-error" (type $te))
  (core module $m
    (memory (export "mem") 1)
    (global $posts (mut i32) (i32.const 0))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32) (i32.const 4096))
    (func (export "call") (param i32 i32 i32 i32) (result i32)
      (i32.store8 (i32.const 100) (i32.add (i32.const 48) (global.get $posts)))
      (i32.store (i32.const 0) (i32.const 0))
      (i32.store (i32.const 4) (i32.const 100))
      (i32.store (i32.const 8) (i32.const 1))
      (i32.const 0))
    (func (export "post") (param i32) (global.set $posts (i32.add (global.get $posts) (i32.const 1)))))
  (core instance $i (instantiate $m))
  (func $call (param "tool" string) (param "input" string) (result (result string (error $tool-error)))
    (canon lift (core func $i "call") (memory (core memory $i "mem")) (realloc (core func $i "realloc"))
      (post-return (core func $i "post"))))
  (export "call" (func $call))
)""")


def tool_error_component(tag: int) -> bytes:
    """Returns ``tool-error`` case ``tag`` (0 invalid-input, 1 failed) with the input as text."""
    return guest(f"(call $err (i32.const {tag}) (local.get $ip) (local.get $il))")


def logging_component() -> bytes:
    """Logs one message per level, then returns "logged"."""
    return guest(
        """
        (call $log (i32.const 0) {S:d}) (call $log (i32.const 1) {S:i})
        (call $log (i32.const 2) {S:w}) (call $log (i32.const 3) {S:e})
        (call $ok {S:done})""",
        host=["log"],
        strings={"d": "debug line", "i": "info line", "w": "warn line", "e": "error line", "done": "logged"},
    )


def log_flood_component(lines: int, line_bytes: int = 1024) -> bytes:
    """Logs ``lines`` lines of ``line_bytes`` bytes each (a flood), then returns "flooded"."""
    return guest(
        f"""
        (local $n i32)
        (local.set $n (i32.const {lines}))
        (loop $again
          (call $log (i32.const 1) {{S:line}})
          (local.set $n (i32.sub (local.get $n) (i32.const 1)))
          (br_if $again (i32.gt_s (local.get $n) (i32.const 0))))
        (call $ok {{S:done}})""",
        host=["log"],
        strings={"line": "x" * line_bytes, "done": "flooded"},
    )


def secret_component() -> bytes:
    """Asks ``secret-available(input)`` and returns "true" or "false"."""
    return guest(
        """
        (if (result i32) (call $secret_available (local.get $ip) (local.get $il))
          (then (call $ok {S:t}))
          (else (call $ok {S:f})))""",
        host=["secret-available"],
        strings={"t": "true", "f": "false"},
    )


def http_component() -> bytes:
    """Sends POST <input> with header x-test: 1, body "body", timeout 1234 ms.

    Output: ``ok:<status>:<body>`` on success, ``err:<case index>:<detail>`` on error
    (``detail`` empty for the payload-less cases). The body is returned as the latin-1
    text the host sent (UTF-8 in the output).
    """
    return guest(
        """
        (local $r i32)
        (local.set $r (call $alloc (i32.const 64)))
        (call $http_request {S:method} (local.get $ip) (local.get $il)
          {S:headers}
          (i32.const 1) {S:body}
          (i32.const 1) (i32.const 1234)
          (local.get $r))
        (if (i32.eqz (i32.load8_u (local.get $r)))
          (then
            (call $emit {S:ok})
            (call $emit_u32 (i32.load16_u offset=4 (local.get $r)))
            (call $emit {S:colon})
            (call $emit (i32.load offset=16 (local.get $r)) (i32.load offset=20 (local.get $r))))
          (else
            (call $emit {S:err})
            (call $emit_u32 (i32.load8_u offset=4 (local.get $r)))
            (call $emit {S:colon})
            (if (i32.eqz (i32.or
                  (i32.eq (i32.load8_u offset=4 (local.get $r)) (i32.const 3))
                  (i32.or (i32.eq (i32.load8_u offset=4 (local.get $r)) (i32.const 4))
                          (i32.eq (i32.load8_u offset=4 (local.get $r)) (i32.const 5)))))
              (then (call $emit (i32.load offset=8 (local.get $r)) (i32.load offset=12 (local.get $r)))))))
        (call $done)""",
        host=["http-request"],
        strings={"method": "POST", "body": "body", "headers": '[["x-test","1"]]',
                 "ok": "ok:", "err": "err:", "colon": ":"},
    )


def http_boundary_component(
    *, body_bytes: int = 0, fill: str = "none", headers: str | None = None, header_count: int = 0,
    pages: int = 1, body_text: str = "", send_body: bool = True,
) -> bytes:
    """Sends one POST to its input URL with a large body or header block.

    Args:
        body_bytes: characters of the body (one per byte, latin-1 mapping).
        fill: ``none`` (no body), ``ascii`` (``a`` repeated: one UTF-8 byte each),
            ``latin1`` (``é``, U+00E9, repeated: two UTF-8 bytes each, the costly case) or
            ``text`` (``body_text`` as it is).
        headers: the header block text; default: ``header_count`` empty ``["",""]`` pairs.
        header_count: pairs generated when ``headers`` is None.
        pages: initial memory pages (bodies need room in the guest).
        body_text: the body for ``fill="text"``.
        send_body: False builds the body but sends none (to time the guest's own work).

    Output: ``ok:<status>:<UTF-8 bytes of the response body>`` or ``err:<case>:<detail>``.
    """
    if fill not in ("none", "ascii", "latin1", "text"):
        raise ValueError(fill)
    strings = {"method": "POST", "ok": "ok:", "err": "err:", "colon": ":",
               "headers": headers if headers is not None else "[]", "body": body_text}
    if fill == "text":
        make_body = ""
        body_args = "(i32.const 1) {S:body}"
    elif fill == "none":
        make_body = "(local.set $blen (i32.const 0))"
        body_args = "(i32.const 0) (i32.const 0) (i32.const 0)"
    elif fill == "ascii":
        make_body = f"""(local.set $blen (i32.const {body_bytes}))
        (local.set $body (call $alloc (local.get $blen)))
        (memory.fill (local.get $body) (i32.const 0x61) (local.get $blen))"""
        body_args = "(i32.const 1) (local.get $body) (local.get $blen)"
    else:
        make_body = f"""(local.set $blen (i32.const {2 * body_bytes}))
        (local.set $body (call $alloc (local.get $blen)))
        (local.set $i (i32.const 0))
        (block $done (loop $fill
          (br_if $done (i32.ge_u (local.get $i) (local.get $blen)))
          (i32.store16 (i32.add (local.get $body) (local.get $i)) (i32.const 0xA9C3))
          (local.set $i (i32.add (local.get $i) (i32.const 2)))
          (br $fill)))"""
        body_args = "(i32.const 1) (local.get $body) (local.get $blen)"
    if not send_body:
        body_args = "(i32.const 0) (i32.const 0) (i32.const 0)"
    if headers is None and header_count > 0:
        make_headers = f"""(local.set $hlen (i32.add (i32.const 1) (i32.mul (i32.const 8) (i32.const {header_count}))))
        (local.set $hdr (call $alloc (local.get $hlen)))
        (i32.store8 (local.get $hdr) (i32.const 0x5B))
        (local.set $i (i32.const 0))
        (block $done (loop $pairs
          (br_if $done (i32.ge_u (local.get $i) (i32.const {header_count})))
          (i64.store (i32.add (i32.add (local.get $hdr) (i32.const 1)) (i32.mul (local.get $i) (i32.const 8)))
                     (i64.const 0x2C5D22222C22225B))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br $pairs)))
        (i32.store8 (i32.sub (i32.add (local.get $hdr) (local.get $hlen)) (i32.const 1)) (i32.const 0x5D))"""
    else:
        make_headers = "(local.set $hdr {P:headers}) (local.set $hlen {L:headers})"
    return guest(
        f"""
        (local $r i32) (local $body i32) (local $blen i32) (local $hdr i32) (local $hlen i32) (local $i i32)
        {make_body}
        {make_headers}
        (local.set $r (call $alloc (i32.const 64)))
        (call $http_request {{S:method}} (local.get $ip) (local.get $il)
          (local.get $hdr) (local.get $hlen)
          {body_args}
          (i32.const 0) (i32.const 0)
          (local.get $r))
        (if (i32.eqz (i32.load8_u (local.get $r)))
          (then
            (call $emit {{S:ok}})
            (call $emit_u32 (i32.load16_u offset=4 (local.get $r)))
            (call $emit {{S:colon}})
            (call $emit_u32 (i32.load offset=20 (local.get $r))))
          (else
            (call $emit {{S:err}})
            (call $emit_u32 (i32.load8_u offset=4 (local.get $r)))
            (call $emit {{S:colon}})
            (if (i32.eqz (i32.or
                  (i32.eq (i32.load8_u offset=4 (local.get $r)) (i32.const 3))
                  (i32.or (i32.eq (i32.load8_u offset=4 (local.get $r)) (i32.const 4))
                          (i32.eq (i32.load8_u offset=4 (local.get $r)) (i32.const 5)))))
              (then (call $emit (i32.load offset=8 (local.get $r)) (i32.load offset=12 (local.get $r)))))))
        (call $done)""",
        host=["http-request"],
        strings=strings,
        pages=pages,
    )


def environment_component() -> bytes:
    """Returns ``env=<n>,args=<m>``: the number of environment variables and arguments."""
    return guest(
        """
        (call $get_environment (i32.const 32))
        (call $emit {S:env})
        (call $emit_u32 (i32.load (i32.const 36)))
        (call $get_arguments (i32.const 32))
        (call $emit {S:args})
        (call $emit_u32 (i32.load (i32.const 36)))
        (call $done)""",
        wasi=["get-environment", "get-arguments"],
        strings={"env": "env=", "args": ",args="},
    )


def exit_component(status: int) -> bytes:
    """Calls ``wasi:cli/exit`` with ok (``status`` 0) or err (otherwise)."""
    return guest(f"(call $exit (i32.const {1 if status else 0})) (call $done)", wasi=["exit"])


def stream_component(text: str, *, writes: int = 1, stream: str = "stdout", then_trap: bool = False) -> bytes:
    """Writes ``text`` (at most 4096 bytes) ``writes`` times to WASI stdout or stderr.

    Returns "written", or executes ``unreachable`` afterwards if ``then_trap``.
    """
    data = text.encode()
    if len(data) > 4096:
        raise ValueError("blocking-write-and-flush takes at most 4096 bytes")
    escaped = "".join(f"\\{b:02x}" for b in data)
    ending = "(unreachable)" if then_trap else "(call $ret)"
    return _compile(f"""
(component
  {TOOL_ERROR}
  (export $tool-error "tool-error" (type $te))
  (import "wasi:io/error@0.2.0" (instance $io-error (export "error" (type (sub resource)))))
  (alias export $io-error "error" (type $error))
  (import "wasi:io/streams@0.2.0" (instance $streams
    (alias outer 1 $error (type $e))
    (export "error" (type $e2 (eq $e)))
    (export "output-stream" (type $os (sub resource)))
    (type $se (variant (case "last-operation-failed" (own $e2)) (case "closed")))
    (export "stream-error" (type $se2 (eq $se)))
    (export "[method]output-stream.blocking-write-and-flush"
      (func (param "self" (borrow $os)) (param "contents" (list u8)) (result (result (error $se2)))))))
  (alias export $streams "output-stream" (type $output-stream))
  (alias export $streams "[method]output-stream.blocking-write-and-flush" (func $write))
  (import "wasi:cli/{stream}@0.2.0" (instance $cli
    (alias outer 1 $output-stream (type $o))
    (export "output-stream" (type $o2 (eq $o)))
    (export "get-{stream}" (func (result (own $o2))))))
  (alias export $cli "get-{stream}" (func $get-stream))
  (core module $Mem
    (memory (export "mem") 1)
    (func (export "realloc") (param i32 i32 i32 i32) (result i32) (i32.const 32768)))
  (core instance $mem (instantiate $Mem))
  (core func $write-core (canon lower (func $write) (memory (core memory $mem "mem"))))
  (core func $get-stream-core (canon lower (func $get-stream)))
  (core module $Main
    (import "env" "mem" (memory 1))
    (import "wasi" "get-stream" (func $get_stream (result i32)))
    (import "wasi" "write" (func $write (param i32 i32 i32 i32)))
    (data (i32.const 1024) "{escaped}")
    (data (i32.const 8192) "written")
    (func $ret (result i32)
      (i32.store (i32.const 0) (i32.const 0))
      (i32.store (i32.const 4) (i32.const 8192))
      (i32.store (i32.const 8) (i32.const 7))
      (i32.const 0))
    (func (export "call") (param i32 i32 i32 i32) (result i32)
      (local $h i32) (local $n i32)
      (local.set $h (call $get_stream))
      (local.set $n (i32.const {writes}))
      (loop $again
        (call $write (local.get $h) (i32.const 1024) (i32.const {len(data)}) (i32.const 64))
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (br_if $again (i32.gt_s (local.get $n) (i32.const 0))))
      {ending}))
  (core instance $main (instantiate $Main
    (with "env" (instance (export "mem" (memory $mem "mem"))))
    (with "wasi" (instance (export "get-stream" (func $get-stream-core)) (export "write" (func $write-core))))))
  (func $call {CALL_TYPE}
    (canon lift (core func $main "call") (memory (core memory $mem "mem")) (realloc (core func $mem "realloc"))))
  (export "call" (func $call))
)""")


WAIT_KINDS = ("block", "poll", "instant", "stdin-read", "stdin-block", "stdout-block", "flood", "sleeps")
"""The ways :func:`wasi_wait_component` waits inside WASI."""


def wasi_wait_component(
    kind: str, *, seconds: float = 8.0, wasi_version: str = "0.2.0", times: int = 1
) -> bytes:
    """Waits inside a WASI host function, then returns "woke" (no epoch check after).

    Args:
        kind: ``block`` — ``monotonic-clock.subscribe-duration(seconds)`` then
            ``[method]pollable.block`` (the issue-9 sleep); ``poll`` — the same
            pollable through ``wasi:io/poll.poll``; ``instant`` —
            ``subscribe-instant(now + seconds)`` then ``block``; ``stdin-read`` —
            ``[method]input-stream.blocking-read`` of stdin; ``stdin-block`` — stdin's
            ``subscribe`` then ``block``; ``stdout-block`` — stdout's ``subscribe`` then
            ``block``.
        seconds: how long the clock kinds ask to sleep.
        wasi_version: the WASI 0.2.x version the imports name.
    """
    if kind not in WAIT_KINDS:
        raise ValueError(kind)
    ns = int(seconds * 1e9)
    v = wasi_version
    bodies = {
        "block": f"(local.set $p (call $subscribe_duration (i64.const {ns}))) (call $block (local.get $p))",
        "poll": f"""(local.set $p (call $subscribe_duration (i64.const {ns})))
            (i32.store (i32.const 256) (local.get $p))
            (call $poll (i32.const 256) (i32.const 1) (i32.const 264))""",
        "instant": f"""(local.set $p (call $subscribe_instant (i64.add (call $now) (i64.const {ns}))))
            (call $block (local.get $p))""",
        "stdin-read": "(call $blocking_read (call $get_stdin) (i64.const 4096) (i32.const 264))",
        "stdin-block": "(local.set $p (call $input_subscribe (call $get_stdin))) (call $block (local.get $p))",
        "stdout-block": "(local.set $p (call $output_subscribe (call $get_stdout))) (call $block (local.get $p))",
        "sleeps": f"""(local.set $p (i32.const {times}))
            (loop $again
              (call $block (local.tee $h (call $subscribe_duration (i64.const {ns}))))
              (call $drop (local.get $h))
              (local.set $p (i32.sub (local.get $p) (i32.const 1)))
              (br_if $again (i32.gt_s (local.get $p) (i32.const 0))))""",
        "flood": f"""(local.set $p (i32.const {times}))
            (loop $again
              (call $drop (call $subscribe_duration (i64.const {ns})))
              (local.set $p (i32.sub (local.get $p) (i32.const 1)))
              (br_if $again (i32.gt_s (local.get $p) (i32.const 0))))""",
    }
    mem = '(memory (core memory $mem "mem")) (realloc (core func $mem "realloc"))'
    return _compile(f"""
(component
  {TOOL_ERROR}
  (export $tool-error "tool-error" (type $te))
  (import "wasi:io/poll@{v}" (instance $poll
    (export "pollable" (type $p (sub resource)))
    (export "[method]pollable.block" (func (param "self" (borrow $p))))
    (export "poll" (func (param "in" (list (borrow $p))) (result (list u32))))))
  (alias export $poll "pollable" (type $pollable))
  (alias export $poll "[method]pollable.block" (func $block))
  (alias export $poll "poll" (func $poll-fn))
  (import "wasi:clocks/monotonic-clock@{v}" (instance $clock
    (alias outer 1 $pollable (type $p))
    (export "pollable" (type $p2 (eq $p)))
    (export "now" (func (result u64)))
    (export "subscribe-duration" (func (param "when" u64) (result (own $p2))))
    (export "subscribe-instant" (func (param "when" u64) (result (own $p2))))))
  (alias export $clock "now" (func $now))
  (alias export $clock "subscribe-duration" (func $subscribe-duration))
  (alias export $clock "subscribe-instant" (func $subscribe-instant))
  (import "wasi:io/error@{v}" (instance $io-error (export "error" (type (sub resource)))))
  (alias export $io-error "error" (type $error))
  (import "wasi:io/streams@{v}" (instance $streams
    (alias outer 1 $error (type $e))
    (alias outer 1 $pollable (type $pl))
    (export "error" (type $e2 (eq $e)))
    (export "pollable" (type $pl2 (eq $pl)))
    (export "input-stream" (type $is (sub resource)))
    (export "output-stream" (type $os (sub resource)))
    (type $se (variant (case "last-operation-failed" (own $e2)) (case "closed")))
    (export "stream-error" (type $se2 (eq $se)))
    (export "[method]input-stream.blocking-read"
      (func (param "self" (borrow $is)) (param "len" u64) (result (result (list u8) (error $se2)))))
    (export "[method]input-stream.subscribe" (func (param "self" (borrow $is)) (result (own $pl2))))
    (export "[method]output-stream.subscribe" (func (param "self" (borrow $os)) (result (own $pl2))))))
  (alias export $streams "input-stream" (type $input-stream))
  (alias export $streams "output-stream" (type $output-stream))
  (alias export $streams "[method]input-stream.blocking-read" (func $blocking-read))
  (alias export $streams "[method]input-stream.subscribe" (func $input-subscribe))
  (alias export $streams "[method]output-stream.subscribe" (func $output-subscribe))
  (import "wasi:cli/stdin@{v}" (instance $stdin
    (alias outer 1 $input-stream (type $i))
    (export "input-stream" (type $i2 (eq $i)))
    (export "get-stdin" (func (result (own $i2))))))
  (alias export $stdin "get-stdin" (func $get-stdin))
  (import "wasi:cli/stdout@{v}" (instance $stdout
    (alias outer 1 $output-stream (type $o))
    (export "output-stream" (type $o2 (eq $o)))
    (export "get-stdout" (func (result (own $o2))))))
  (alias export $stdout "get-stdout" (func $get-stdout))
{_MEM_MODULE.format(pages=1, heap=32768)}
  (core func $c-block (canon lower (func $block)))
  (core func $c-poll (canon lower (func $poll-fn) {mem}))
  (core func $c-now (canon lower (func $now)))
  (core func $c-subscribe-duration (canon lower (func $subscribe-duration)))
  (core func $c-subscribe-instant (canon lower (func $subscribe-instant)))
  (core func $c-blocking-read (canon lower (func $blocking-read) {mem}))
  (core func $c-input-subscribe (canon lower (func $input-subscribe)))
  (core func $c-output-subscribe (canon lower (func $output-subscribe)))
  (core func $c-get-stdin (canon lower (func $get-stdin)))
  (core func $c-get-stdout (canon lower (func $get-stdout)))
  (core func $c-drop (canon resource.drop $pollable))
  (core module $Main
    (import "env" "mem" (memory 1))
    (import "wasi" "block" (func $block (param i32)))
    (import "wasi" "poll" (func $poll (param i32 i32 i32)))
    (import "wasi" "now" (func $now (result i64)))
    (import "wasi" "subscribe-duration" (func $subscribe_duration (param i64) (result i32)))
    (import "wasi" "subscribe-instant" (func $subscribe_instant (param i64) (result i32)))
    (import "wasi" "blocking-read" (func $blocking_read (param i32 i64 i32)))
    (import "wasi" "input-subscribe" (func $input_subscribe (param i32) (result i32)))
    (import "wasi" "output-subscribe" (func $output_subscribe (param i32) (result i32)))
    (import "wasi" "get-stdin" (func $get_stdin (result i32)))
    (import "wasi" "get-stdout" (func $get_stdout (result i32)))
    (import "wasi" "drop" (func $drop (param i32)))
    (data (i32.const 8192) "woke")
    (func (export "call") (param i32 i32 i32 i32) (result i32)
      (local $p i32) (local $h i32)
      {bodies[kind]}
      (i32.store (i32.const 0) (i32.const 0))
      (i32.store (i32.const 4) (i32.const 8192))
      (i32.store (i32.const 8) (i32.const 4))
      (i32.const 0)))
  (core instance $main (instantiate $Main
    (with "env" (instance (export "mem" (memory $mem "mem"))))
    (with "wasi" (instance
      (export "block" (func $c-block)) (export "poll" (func $c-poll)) (export "now" (func $c-now))
      (export "subscribe-duration" (func $c-subscribe-duration))
      (export "subscribe-instant" (func $c-subscribe-instant))
      (export "blocking-read" (func $c-blocking-read))
      (export "input-subscribe" (func $c-input-subscribe))
      (export "output-subscribe" (func $c-output-subscribe))
      (export "get-stdin" (func $c-get-stdin)) (export "get-stdout" (func $c-get-stdout))
      (export "drop" (func $c-drop))))))
  (func $call {CALL_TYPE}
    (canon lift (core func $main "call") {mem}))
  (export "call" (func $call))
)""")


# --- hostile guests --------------------------------------------------------------------


def loop_component() -> bytes:
    """``call`` loops forever (stopped by fuel, or by the deadline when fuel is huge)."""
    return guest("(loop $forever (br $forever)) (unreachable)")


def start_loop_component() -> bytes:
    """Loops forever in the core start function, i.e. during instantiation."""
    return guest("(call $done)", funcs="(func $spin (loop $forever (br $forever)))", core_start="spin")


def recursion_component() -> bytes:
    """``call`` recurses without end (stack overflow)."""
    return guest(
        "(drop (call $deep (i32.const 0))) (call $done)",
        funcs="(func $deep (param i32) (result i32) (i32.add (call $deep (local.get 0)) (i32.const 1)))",
    )


def unreachable_component() -> bytes:
    """``call`` executes ``unreachable``."""
    return guest("(unreachable)")


def memory_bomb_component(*, report_oom: bool) -> bytes:
    """Grows memory 16 pages at a time until refused, logs the page count, then traps.

    With ``report_oom`` the log line is the allocator-failure message a language runtime
    prints ("out of memory ..."); without it the guest dies silently (just ``pages=N``).
    """
    message = "out of memory: memory.grow refused at pages=" if report_oom else "pages="
    return guest(
        """
        (loop $grow
          (br_if $grow (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
        (call $emit {S:msg})
        (call $emit_u32 (memory.size))
        (call $log (i32.const 3) (global.get $out) (global.get $outlen))
        (unreachable)""",
        host=["log"],
        strings={"msg": message},
    )


def aggregate_memory_bomb_component() -> bytes:
    """Two core modules with a memory each; grows both until refused; returns total pages."""
    return _compile("""
(component
  (type $te (variant (case "invalid-input" string) (case "failed" string)))
  (export $tool-error "tool-error" (type $te))
  (core module $Other
    (memory 1)
    (func (export "bomb") (result i32)
      (loop $grow (br_if $grow (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
      (memory.size)))
  (core instance $other (instantiate $Other))
  (core module $m
    (import "other" "bomb" (func $bomb (result i32)))
    (memory (export "mem") 1)
    (func (export "realloc") (param i32 i32 i32 i32) (result i32) (i32.const 4096))
    (func (export "call") (param i32 i32 i32 i32) (result i32)
      (local $pages i32) (local $n i32) (local $i i32)
      (local.set $pages (call $bomb))
      (loop $grow (br_if $grow (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
      (local.set $n (i32.add (local.get $pages) (memory.size)))
      (local.set $i (i32.const 16))
      (loop $digits
        (local.set $i (i32.sub (local.get $i) (i32.const 1)))
        (i32.store8 (i32.add (i32.const 100) (local.get $i))
                    (i32.add (i32.const 48) (i32.rem_u (local.get $n) (i32.const 10))))
        (local.set $n (i32.div_u (local.get $n) (i32.const 10)))
        (br_if $digits (i32.ne (local.get $n) (i32.const 0))))
      (i32.store (i32.const 0) (i32.const 0))
      (i32.store (i32.const 4) (i32.add (i32.const 100) (local.get $i)))
      (i32.store (i32.const 8) (i32.sub (i32.const 16) (local.get $i)))
      (i32.const 0)))
  (core instance $i (instantiate $m (with "other" (instance $other))))
  (func $call (param "tool" string) (param "input" string) (result (result string (error $tool-error)))
    (canon lift (core func $i "call") (memory (core memory $i "mem")) (realloc (core func $i "realloc"))))
  (export "call" (func $call))
)""")


def table_bomb_component(step: int = 1000) -> bytes:
    """Grows a funcref table ``step`` elements at a time until refused; returns its size."""
    return guest(
        f"""
        (loop $grow
          (br_if $grow (i32.ne (table.grow $t (ref.null func) (i32.const {step})) (i32.const -1))))
        (call $emit_u32 (table.size $t))
        (call $done)""",
        funcs="(table $t 1 funcref)",
    )


# --- refused shapes --------------------------------------------------------------------


def core_module() -> bytes:
    """A core module exporting ``call`` (not a component)."""
    return _compile('(module (func (export "call") (param i32 i32 i32 i32) (result i32) (i32.const 0)))')


def wrong_call_component(kind: str) -> bytes:
    """A component whose ``call`` is wrong in one way.

    Args:
        kind: ``returns-string`` (no result wrapper), ``one-param``, ``param-names``
            (``name``/``input``), ``error-cases`` (tool-error cases renamed), ``missing``
            (exports ``run`` instead).
    """
    te = TOOL_ERROR
    sig = CALL_TYPE
    core_sig = "(param i32 i32 i32 i32) (result i32)"
    export_name = "call"
    if kind == "returns-string":
        sig = '(param "tool" string) (param "input" string) (result string)'
    elif kind == "one-param":
        sig = '(param "input" string) (result (result string (error $tool-error)))'
        core_sig = "(param i32 i32) (result i32)"
    elif kind == "param-names":
        sig = '(param "name" string) (param "input" string) (result (result string (error $tool-error)))'
    elif kind == "error-cases":
        te = '(type $te (variant (case "bad-input" string) (case "failed" string)))'
    elif kind == "missing":
        export_name = "run"
    else:
        raise ValueError(kind)
    return _compile(f"""
(component
  {te}
  (export $tool-error "tool-error" (type $te))
  (core module $m
    (memory (export "mem") 1)
    (func (export "realloc") (param i32 i32 i32 i32) (result i32) (i32.const 4096))
    (func (export "call") {core_sig} (i32.const 0)))
  (core instance $i (instantiate $m))
  (func $call {sig}
    (canon lift (core func $i "call") (memory (core memory $i "mem")) (realloc (core func $i "realloc"))))
  (export "{export_name}" (func $call))
)""")


def import_component(import_decl: str) -> bytes:
    """The echo guest plus one extra component-level import declaration (never used)."""
    return guest("(call $ok (local.get $ip) (local.get $il))", extra=import_decl)


# --- running ---------------------------------------------------------------------------

DEFAULT_LIMITS = SandboxLimits(fuel=50_000_000, memory_bytes=8 << 20, timeout_ms=5_000, max_log_bytes=4096)
"""Small limits for hand-written guests: 50 M fuel, 8 MiB, 5 s, 4 KiB of log."""


def run_module(
    rt: Runtime,
    module: bytes,
    *,
    tool: str = "t",
    input_json: str = "{}",
    limits: SandboxLimits = DEFAULT_LIMITS,
    egress: EgressPort | None = None,
    secret_available: Callable[[str], bool] | None = None,
    scrub: Callable[[str], str] | None = None,
) -> SandboxResult:
    """Load ``module`` (digest computed here) and run one call with deny-all egress."""
    loaded = rt.load(module, sha256=sha256(module), name="wat")
    return rt.run(
        loaded,
        tool=tool,
        input_json=input_json,
        limits=limits,
        egress=egress if egress is not None else DenyAllEgress(),
        secret_available=secret_available if secret_available is not None else (lambda _name: False),
        scrub=scrub if scrub is not None else (lambda s: s),
    )
