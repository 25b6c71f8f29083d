"""Which parts of two WebAssembly components differ (``stockade verify-build``).

A component is a sequence of sections; its core modules are nested in core-module
sections and hold their own sections. :func:`sections` walks both levels and names each
leaf section by its position (``component[3]/module[9]/data``), so two builds of the same
source can be compared part by part. :func:`differing_parts` tells a reviewer whether two
modules differ in their code (types, imports, exports, functions) or only in what the
build tools' pre-initialization recorded: the ``data`` segments (the memory snapshot) and
``global`` initial values (its heap and stack pointers) of a core module.

Only the section framing is parsed (ids and LEB128 sizes); nothing is validated: a module
this cannot frame is reported as one unparsed part.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final

__all__ = ["SNAPSHOT_SECTIONS", "Part", "differing_parts", "sections"]

_MAGIC: Final = b"\0asm"
_CORE_SECTIONS: Final = {
    0: "custom", 1: "type", 2: "import", 3: "function", 4: "table", 5: "memory", 6: "global",
    7: "export", 8: "start", 9: "element", 10: "code", 11: "data", 12: "datacount", 13: "tag",
}  # fmt: skip
_COMPONENT_SECTIONS: Final = {
    0: "custom", 1: "core-module", 2: "core-instance", 3: "core-type", 4: "component",
    5: "instance", 6: "alias", 7: "type", 8: "canon", 9: "start", 10: "import", 11: "export",
    12: "value",
}  # fmt: skip
SNAPSHOT_SECTIONS: Final = frozenset({"data", "global"})
"""Core-module sections that hold pre-initialized state rather than code."""
MAX_DEPTH: Final = 8  # nested components followed at most this deep


@dataclass(frozen=True, slots=True)
class Part:
    """One leaf section.

    Attributes:
        path: where it is (``component[3]/module[9]/data``).
        kind: the section's name (``data``, ``code``, ``import``, ...).
        size: bytes.
        sha256: hex digest of its bytes.
    """

    path: str
    kind: str
    size: int
    sha256: str


def _leb(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 35:
            raise ValueError("truncated or oversized LEB128")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def _frames(data: bytes) -> list[tuple[int, bytes]]:
    at, out = 8, []
    while at < len(data):
        section_id = data[at]
        size, start = _leb(data, at + 1)
        if start + size > len(data):
            raise ValueError("section runs past the end")
        out.append((section_id, data[start : start + size]))
        at = start + size
    return out


def sections(data: bytes, path: str = "", depth: int = 0) -> list[Part]:
    """Every leaf section of a component or core module, nested modules expanded."""
    digest = hashlib.sha256(data).hexdigest()
    if data[:4] != _MAGIC or len(data) < 8 or depth > MAX_DEPTH:
        return [Part(path or "(whole)", "unparsed", len(data), digest)]
    component = data[4:8] != b"\x01\x00\x00\x00"
    names = _COMPONENT_SECTIONS if component else _CORE_SECTIONS
    try:
        frames = _frames(data)
    except ValueError:
        return [Part(path or "(whole)", "unparsed", len(data), digest)]
    parts: list[Part] = []
    for index, (section_id, body) in enumerate(frames):
        kind = names.get(section_id, f"section-{section_id}")
        here = f"{path}/" if path else ""
        if component and kind in ("core-module", "component") and body[:4] == _MAGIC:
            label = "module" if kind == "core-module" else "component"
            parts += sections(body, f"{here}{label}[{index}]", depth + 1)
        else:
            parts.append(Part(f"{here}{kind}[{index}]", kind, len(body), hashlib.sha256(body).hexdigest()))
    return parts


def differing_parts(a: bytes, b: bytes) -> tuple[list[str], bool]:
    """The parts of ``a`` and ``b`` that differ, and whether only snapshot parts do.

    Returns:
        ``(paths, snapshot_only)``: ``paths`` lists every differing part (and a note when
        the layouts differ); ``snapshot_only`` is True when both have the same sections
        and every difference is in a :data:`SNAPSHOT_SECTIONS` section.
    """
    left, right = sections(a), sections(b)
    if [(p.path, p.kind) for p in left] != [(p.path, p.kind) for p in right]:
        return ["(the section layout differs)"], False
    differing = [x for x, y in zip(left, right, strict=True) if x.sha256 != y.sha256]
    snapshot_only = bool(differing) and all(p.kind in SNAPSHOT_SECTIONS for p in differing)
    return [p.path for p in differing], snapshot_only
