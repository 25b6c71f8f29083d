"""Characters a person must never read raw, and identifiers that must never hold them.

One rule for the whole project: C0 and C1 control characters (terminal escapes, NUL),
zero-width characters, line/paragraph separators and bidirectional controls (U+202E
RIGHT-TO-LEFT OVERRIDE and friends, Trojan Source, CVE-2021-42574). Text shown to a
person — an approval preview, an elicitation, a CLI listing — has them escaped as
``\\uXXXX``; identifiers (a principal's project and subject, a session) refuse them.

Example::

    escape_unsafe("a\\u202eb")   # 'a\\\\u202eb'
    has_unsafe("alice\\x00")     # True
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["UNSAFE_CHARS", "escape_unsafe", "has_unsafe"]

UNSAFE_CHARS: Final = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb]"
)
"""Control characters (C0, DEL, C1), zero-width, separators and bidi controls."""


def escape_unsafe(value: object) -> str:
    """``str(value)`` with every :data:`UNSAFE_CHARS` character shown as ``\\uXXXX``."""
    return UNSAFE_CHARS.sub(lambda match: f"\\u{ord(match.group()):04x}", str(value))


def has_unsafe(value: str) -> bool:
    """Whether ``value`` holds a character of :data:`UNSAFE_CHARS`."""
    return UNSAFE_CHARS.search(value) is not None
