"""Section-level comparison of two components (what ``stockade verify-build`` reports)."""

from __future__ import annotations

from sdk.author._wasmsections import differing_parts, sections

CORE = b"\0asm\x01\x00\x00\x00"
COMPONENT = b"\0asm\x0d\x00\x01\x00"


def _section(section_id: int, body: bytes) -> bytes:
    assert len(body) < 128  # one-byte LEB128 size is enough here
    return bytes([section_id, len(body)]) + body


def _component(*, code: bytes = b"\x01\x02", data: bytes = b"snapshot", glob: bytes = b"\x10") -> bytes:
    module = CORE + _section(10, code) + _section(6, glob) + _section(11, data)
    return COMPONENT + _section(0, b"\x04name") + _section(1, module)


def test_sections_expand_nested_core_modules() -> None:
    parts = sections(_component())
    assert [p.path for p in parts] == [
        "custom[0]",
        "module[1]/code[0]",
        "module[1]/global[1]",
        "module[1]/data[2]",
    ]
    assert parts[3].size == len(b"snapshot")


def test_identical_components_have_no_differing_part() -> None:
    assert differing_parts(_component(), _component()) == ([], False)


def test_a_snapshot_difference_is_reported_as_snapshot_only() -> None:
    parts, snapshot_only = differing_parts(_component(), _component(data=b"snapshoT", glob=b"\x11"))
    assert parts == ["module[1]/global[1]", "module[1]/data[2]"] and snapshot_only is True


def test_a_code_difference_is_not_snapshot_only() -> None:
    parts, snapshot_only = differing_parts(_component(), _component(code=b"\x01\x03", data=b"snapshoT"))
    assert parts == ["module[1]/code[0]", "module[1]/data[2]"] and snapshot_only is False


def test_a_different_layout_is_named_and_not_snapshot_only() -> None:
    other = _component() + _section(0, b"\x01x")
    assert differing_parts(_component(), other) == (["(the section layout differs)"], False)


def test_bytes_that_cannot_be_framed_are_one_unparsed_part() -> None:
    truncated = _component()[:-3]
    assert [p.kind for p in sections(truncated)] == ["unparsed"]
    assert [p.kind for p in sections(b"not wasm")] == ["unparsed"]
