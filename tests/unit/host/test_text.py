"""The one escaping rule for text a person reads (host.text)."""

from __future__ import annotations

import pytest

from host.text import UNSAFE_CHARS, escape_unsafe, has_unsafe


@pytest.mark.parametrize(
    "char",
    ["\x00", "\x1b", "\r", "\x7f", "\x85", "\u061c", "\u200b", "\u200d", "\u2028", "\u2029", "\u202e", "\u2066", "\ufeff"],
)
def test_every_unsafe_character_is_escaped_in_both_modes(char: str) -> None:
    shown = f"\\u{ord(char):04x}"
    assert escape_unsafe(f"a{char}b") == f"a{shown}b"
    assert escape_unsafe(f"a{char}b", keep_layout=True) == f"a{shown}b"
    assert has_unsafe(char)


def test_layout_is_kept_only_when_asked() -> None:
    assert escape_unsafe("a\n\tb") == "a\\u000a\\u0009b"
    assert escape_unsafe("a\n\tb", keep_layout=True) == "a\n\tb"


def test_layout_mode_differs_from_the_line_mode_only_on_tab_and_newline() -> None:
    differing = [
        c for c in range(0x3000) if escape_unsafe(chr(c)) != escape_unsafe(chr(c), keep_layout=True)
    ]
    assert differing == [0x09, 0x0A]


def test_ordinary_text_passes_unchanged() -> None:
    text = "naïve café — 東京 👍 \"quoted\" \\ back"
    assert UNSAFE_CHARS.search(text) is None
    assert escape_unsafe(text) == escape_unsafe(text, keep_layout=True) == text
