"""Header check and resource census of component binaries (host.runtime.binary)."""

from __future__ import annotations

import pytest

from host.errors import ComponentRefused
from host.runtime.binary import COMPONENT_HEADER, Census, census, check_header
from tests.support import wat


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        (wat.echo_component, Census(memories=1, tables=0, max_table_elements=0, instances=1)),
        (wat.logging_component, Census(memories=1, tables=0, max_table_elements=0, instances=2)),
        (wat.aggregate_memory_bomb_component, Census(memories=2, tables=0, max_table_elements=0, instances=2)),
        (wat.table_bomb_component, Census(memories=1, tables=1, max_table_elements=1, instances=2)),
    ],
    ids=["echo", "imports-memory-not-counted", "two-memories", "table"],
)
def test_census_counts_what_instantiation_creates(module, expected: Census) -> None:  # type: ignore[no-untyped-def]
    assert census(module()) == expected


def test_census_counts_nested_components() -> None:
    inner = wat.echo_component()[8:]  # the same sections, as a nested component
    outer = bytearray(COMPONENT_HEADER)
    body = COMPONENT_HEADER + inner
    outer += bytes([4]) + _leb(len(body)) + body
    counted = census(bytes(outer))
    assert counted.memories == 1
    assert counted.instances == 1


def _leb(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


@pytest.mark.parametrize(
    "module",
    [
        COMPONENT_HEADER + b"\x01\x05\x00asm",  # core module section cut short
        COMPONENT_HEADER + b"\x01\x80",  # size LEB cut short
        COMPONENT_HEADER + b"\x01\xff\xff\xff\xff\xff\x01",  # over-long LEB
        COMPONENT_HEADER + b"\x04\x08" + b"\x00asm\x01\x00\x00\x00",  # nested "component" is a module
    ],
    ids=["section-past-end", "truncated-leb", "overlong-leb", "nested-wrong-layer"],
)
def test_malformed_binary_refused(module: bytes) -> None:
    with pytest.raises(ComponentRefused, match="malformed component binary"):
        census(module)


def test_header_accepts_only_the_component_layer() -> None:
    check_header(wat.echo_component())
    with pytest.raises(ComponentRefused, match="core WebAssembly module"):
        check_header(wat.core_module())
