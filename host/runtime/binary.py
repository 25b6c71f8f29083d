"""Reading a component's binary before wasmtime sees it: layer check and resource census.

Two jobs, both on untrusted bytes, both bounded by the input length:

1. :func:`check_header` refuses anything that is not a component binary. A core module
   and a component share the ``\\0asm`` magic; they differ in the 16-bit version and
   the 16-bit layer that follow it (core: version 1, layer 0; component: version 0x0d,
   layer 1).
2. :func:`census` walks the component's sections (recursively through nested
   components) and counts what a store must be allowed to create: core memories
   defined, tables defined (and the largest initial table), core module
   instantiations. The runtime turns these counts into exact ``Store.set_limits``
   values: each memory gets ``memory_bytes // memories`` so the sum over all memories
   of a call stays within the manifest's limit even though wasmtime's limiter is per
   memory (see :mod:`host.runtime.sandbox`).

The census counts each definition once. A component that instantiates the same core
module twice needs more than counted and then fails at instantiation with a resource
limit error: fail closed, never a larger allowance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, final

from host.errors import ComponentRefused

__all__ = ["COMPONENT_HEADER", "CORE_MODULE_HEADER", "Census", "census", "check_header"]

COMPONENT_HEADER: Final = b"\x00asm\x0d\x00\x01\x00"
"""Magic, version 0x0d, layer 1: a component (the only layer accepted)."""
CORE_MODULE_HEADER: Final = b"\x00asm\x01\x00\x00\x00"
"""Magic, version 1, layer 0: a core module (refused)."""

_MAGIC = b"\x00asm"
_SECTION_CORE_MODULE = 1
_SECTION_CORE_INSTANCE = 2
_SECTION_COMPONENT = 4
_CORE_SECTION_TABLE = 4
_CORE_SECTION_MEMORY = 5
_MAX_NESTING = 32


@final
@dataclass(frozen=True, slots=True)
class Census:
    """What instantiating a component creates, counted from its binary.

    Args:
        memories: core linear memories defined (imported memories are not new ones).
        tables: core tables defined.
        max_table_elements: the largest initial size of any defined table.
        instances: core module instantiations.
    """

    memories: int
    tables: int
    max_table_elements: int
    instances: int


def check_header(module: bytes) -> None:
    """Refuse anything but a component binary.

    Args:
        module: the bytes of the module file.

    Raises:
        ComponentRefused: a core module, a component of another version, or not wasm.
    """
    head = bytes(module[:8])
    if head == COMPONENT_HEADER:
        return
    if head == CORE_MODULE_HEADER:
        raise ComponentRefused(
            "the module is a core WebAssembly module, not a component",
            hint="Build a component for the stockade:plugin/tool world (componentize-py, "
            "componentize-js or wasm-tools component new).",
        )
    if head[:4] == _MAGIC:
        raise ComponentRefused(f"unsupported WebAssembly version/layer {head[4:].hex()}")
    raise ComponentRefused("the module is not a WebAssembly binary")


def census(module: bytes) -> Census:
    """Count memories, tables and core instantiations of a component.

    Args:
        module: a component binary (its header already checked).

    Raises:
        ComponentRefused: the binary is malformed (a section runs past its end).

    Returns:
        the counts.
    """
    counts = _Counts()
    try:
        _walk_component(memoryview(module), 8, len(module), counts, 0)
    except (IndexError, ValueError) as exc:
        raise ComponentRefused(f"malformed component binary: {exc}") from exc
    return Census(
        memories=counts.memories,
        tables=counts.tables,
        max_table_elements=counts.max_table_elements,
        instances=counts.instances,
    )


class _Counts:
    __slots__ = ("instances", "max_table_elements", "memories", "tables")

    def __init__(self) -> None:
        self.memories = 0
        self.tables = 0
        self.max_table_elements = 0
        self.instances = 0


def _leb(data: memoryview, pos: int) -> tuple[int, int]:
    """Unsigned LEB128 at ``pos`` (at most 5 bytes for u32) -> (value, next position)."""
    result = 0
    for shift in range(0, 35, 7):
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
    raise ValueError("LEB128 integer too long")


def _sections(data: memoryview, pos: int, end: int) -> list[tuple[int, int, int]]:
    """(id, start, end) of every section in ``data[pos:end]``."""
    out = []
    while pos < end:
        section_id = data[pos]
        size, pos = _leb(data, pos + 1)
        if pos + size > end:
            raise ValueError("section runs past the end of its container")
        out.append((section_id, pos, pos + size))
        pos += size
    return out


def _walk_component(data: memoryview, pos: int, end: int, counts: _Counts, depth: int) -> None:
    if depth > _MAX_NESTING:
        raise ValueError("components nested too deeply")
    for section_id, start, stop in _sections(data, pos, end):
        if section_id == _SECTION_CORE_MODULE:
            if bytes(data[start : start + 8]) != CORE_MODULE_HEADER:
                raise ValueError("nested core module with a bad header")
            _walk_core_module(data, start + 8, stop, counts)
        elif section_id == _SECTION_COMPONENT:
            if bytes(data[start : start + 8]) != COMPONENT_HEADER:
                raise ValueError("nested component with a bad header")
            _walk_component(data, start + 8, stop, counts, depth + 1)
        elif section_id == _SECTION_CORE_INSTANCE:
            counts.instances += _count_instantiations(data, start, stop)


def _walk_core_module(data: memoryview, pos: int, end: int, counts: _Counts) -> None:
    for section_id, start, _stop in _sections(data, pos, end):
        if section_id == _CORE_SECTION_MEMORY:
            n, _ = _leb(data, start)
            counts.memories += n
        elif section_id == _CORE_SECTION_TABLE:
            n, cursor = _leb(data, start)
            counts.tables += n
            for _ in range(n):
                initial, cursor = _table_initial(data, cursor)
                counts.max_table_elements = max(counts.max_table_elements, initial)


def _table_initial(data: memoryview, pos: int) -> tuple[int, int]:
    """Read one table entry; return its initial size and the position after it."""
    has_init = data[pos] == 0x40  # 0x40 0x00 tabletype constexpr (function references)
    if has_init:
        pos += 2
    reftype = data[pos]
    pos += 1
    if reftype in (0x63, 0x64):  # (ref null? heaptype): the heap type is an s33
        pos = _skip_leb(data, pos)
    flags = data[pos]
    pos += 1
    initial, pos = _leb(data, pos)
    if flags & 0x01:
        _, pos = _leb(data, pos)
    if has_init:
        pos = _skip_const_expr(data, pos)
    return initial, pos


def _skip_leb(data: memoryview, pos: int) -> int:
    while data[pos] & 0x80:
        pos += 1
    return pos + 1


def _skip_const_expr(data: memoryview, pos: int) -> int:
    """Skip ``ref.null ht``, ``ref.func i`` or ``global.get i`` followed by ``end``."""
    opcode = data[pos]
    if opcode not in (0xD0, 0xD2, 0x23):
        raise ValueError(f"unsupported table initializer opcode {opcode:#x}")
    pos = _skip_leb(data, pos + 1)
    if data[pos] != 0x0B:
        raise ValueError("unsupported table initializer expression")
    return pos + 1


def _count_instantiations(data: memoryview, pos: int, end: int) -> int:
    """Entries of a core instance section that instantiate a module (tag 0x00)."""
    count, pos = _leb(data, pos)
    found = 0
    for _ in range(count):
        tag = data[pos]
        pos += 1
        if tag == 0x00:
            found += 1
            _, pos = _leb(data, pos)  # module index
            nargs, pos = _leb(data, pos)
            for _ in range(nargs):
                pos = _skip_name(data, pos)
                pos += 1  # 0x12 (instance sort)
                _, pos = _leb(data, pos)
        elif tag == 0x01:
            nexports, pos = _leb(data, pos)
            for _ in range(nexports):
                pos = _skip_name(data, pos)
                pos += 1  # core sort
                _, pos = _leb(data, pos)
        else:
            raise ValueError(f"unknown core instance tag {tag:#x}")
    if pos > end:
        raise ValueError("core instance section runs past its end")
    return found


def _skip_name(data: memoryview, pos: int) -> int:
    length, pos = _leb(data, pos)
    return pos + length
