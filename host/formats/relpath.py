"""Workspace paths: the grammar of a path relative to a workspace root.

One grammar for every relative workspace path, whoever writes it: the model (the
``path`` of an ``fs.*`` call) and a package author (a manifest's ``workspace.read``).
:func:`parse_path` checks it without touching the filesystem: relative, UTF-8, at most
:data:`MAX_PATH_BYTES` bytes, components of at most :data:`MAX_COMPONENT_BYTES` bytes, no
NUL or other control character, no absolute path, no ``..`` component. ``.`` components
and empty components are dropped; ``.`` (or a path of only ``.``) names the root.
``..notes.txt`` is an ordinary name. A violation is ``INPUT_INVALID`` with the JSON
pointer of the field and a ``reason``.

Resolving a path on disk (beneath a root fd, race-free) is :mod:`host.tools.paths`.

Example::

    parse_path("docs/./api").text   # 'docs/api'
    parse_path("../etc")            # InputInvalid, reason "dotdot"
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from host.errors import InputInvalid

__all__ = ["MAX_COMPONENT_BYTES", "MAX_PATH_BYTES", "RelPath", "parse_path"]

MAX_PATH_BYTES: Final = 4096  # bytes of a path in UTF-8 (Linux PATH_MAX)
MAX_COMPONENT_BYTES: Final = 255  # bytes of one path component (Linux NAME_MAX)


@dataclass(frozen=True, slots=True)
class RelPath:
    """A path that passed the grammar: its components beneath the root (empty = the root)."""

    parts: tuple[str, ...]

    @property
    def text(self) -> str:
        """The normalized relative path (``"."`` for the root)."""
        return "/".join(self.parts) or "."

    def __str__(self) -> str:
        return self.text


def parse_path(value: str, *, pointer: str = "/path") -> RelPath:
    """Check a model-supplied path's grammar (no filesystem call).

    Raises:
        InputInvalid: with ``pointer`` and ``reason`` (``empty``, ``too_long``, ``nul``,
            ``control``, ``absolute``, ``dotdot``, ``component_too_long``).
    """

    def bad(reason: str, message: str) -> InputInvalid:
        return InputInvalid(
            f"path {value[:200]!r} {message}",
            pointer=pointer,
            reason=reason,
            hint="Give a path relative to the workspace root, without '..'.",
        )

    if value == "":
        raise bad("empty", "is empty (use '.' for the workspace root)")
    if "\x00" in value:
        raise bad("nul", "contains a NUL character")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise bad("control", "contains a control character")
    if len(value.encode("utf-8")) > MAX_PATH_BYTES:
        raise bad("too_long", f"is longer than {MAX_PATH_BYTES} bytes")
    if value.startswith("/"):
        raise bad("absolute", "is absolute")
    parts: list[str] = []
    for part in value.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            raise bad("dotdot", "has a '..' component")
        if len(part.encode("utf-8")) > MAX_COMPONENT_BYTES:
            raise bad("component_too_long", f"has a component longer than {MAX_COMPONENT_BYTES} bytes")
        parts.append(part)
    return RelPath(tuple(parts))
