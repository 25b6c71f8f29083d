"""The hand-written component binary reader on arbitrary bytes: only ComponentRefused.

``host.runtime.binary`` reads untrusted module bytes before wasmtime does. Whatever the
bytes, :func:`census` and :func:`check_header` either return or raise
``ComponentRefused`` (no IndexError, struct or recursion error), and a census is never
negative. The strategies start from real components and mutate them, so the walk gets
past the header into nested sections.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from host.errors import ComponentRefused
from host.runtime.binary import COMPONENT_HEADER, census, check_header
from tests.support import wat

SEEDS = [wat.echo_component(), wat.logging_component(), wat.table_bomb_component(),
         wat.aggregate_memory_bomb_component()]


def _read(module: bytes) -> None:
    for reader in (check_header, census):
        try:
            result = reader(module)
        except ComponentRefused as refused:
            assert refused.code == "COMPONENT_REFUSED"
            continue
        if result is not None:
            assert min(result.memories, result.tables, result.max_table_elements, result.instances) >= 0


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 8))):
        position = draw(st.integers(8, len(data) - 1))
        action = draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip":
            data[position] = draw(st.integers(0, 255))
        elif action == "cut":
            del data[position:]
            if len(data) <= 8:
                break
        else:
            data[position:position] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=256))
def test_arbitrary_bytes_only_refused(data: bytes) -> None:
    _read(data)
    _read(COMPONENT_HEADER + data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_components_only_refused(module: bytes) -> None:
    _read(module)


def test_deep_nesting_refused_not_recursion_error() -> None:
    body = b""
    for _ in range(2000):
        inner = COMPONENT_HEADER + body
        body = bytes([4]) + _leb(len(inner)) + inner
    _read(COMPONENT_HEADER + body)


def _leb(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)
