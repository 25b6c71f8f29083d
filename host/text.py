"""Characters a person must never read raw, and identifiers that must never hold them.

One rule for the whole project: C0 and C1 control characters (terminal escapes, NUL),
zero-width characters, line/paragraph separators and bidirectional controls (U+202E
RIGHT-TO-LEFT OVERRIDE and friends, Trojan Source, CVE-2021-42574). Text shown to a
person — an approval preview, an elicitation, a CLI listing, a file diff — has them
escaped as ``\\uXXXX``; identifiers (a principal's project and subject, a session) refuse
them. Multi-line text (a diff) keeps its newlines and tabs with ``keep_layout=True``;
every other character of the set, carriage return included, is escaped there too, so a
zero-width space inside a changed word or a bare CR that returns the cursor to the start
of a line cannot hide part of a change from the person approving it. There is one
character set and one notation for everything a person reads.

Example::

    escape_unsafe("a\\u202eb")   # 'a\\\\u202eb'
    escape_unsafe("-a\\r\\n+b\\n", keep_layout=True)   # '-a\\\\u000d\\n+b\\n'
    has_unsafe("alice\\x00")     # True
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["UNSAFE_CHARS", "escape_unsafe", "has_unsafe"]

_LAYOUT: Final = "\t\n"
_OTHERS: Final = (
    "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb"
)

UNSAFE_CHARS: Final = re.compile(f"[{_LAYOUT}{_OTHERS}]")
"""Control characters (C0, DEL, C1), zero-width, separators and bidi controls."""

_UNSAFE_BUT_LAYOUT: Final = re.compile(f"[{_OTHERS}]")
""":data:`UNSAFE_CHARS` without tab and newline."""


def escape_unsafe(value: object, *, keep_layout: bool = False) -> str:
    """``str(value)`` with every :data:`UNSAFE_CHARS` character shown as ``\\uXXXX``.

    Args:
        value: what to show; anything, through ``str``.
        keep_layout: keep newline and tab raw (multi-line text such as a diff).
    """
    pattern = _UNSAFE_BUT_LAYOUT if keep_layout else UNSAFE_CHARS
    return pattern.sub(lambda match: f"\\u{ord(match.group()):04x}", str(value))


def has_unsafe(value: str) -> bool:
    """Whether ``value`` holds a character of :data:`UNSAFE_CHARS`."""
    return UNSAFE_CHARS.search(value) is not None
