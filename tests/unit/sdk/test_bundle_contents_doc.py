"""docs/authors.md says which files a build stages, and says it as the build does it.

Every ``*.py`` under a project root except ``tests/`` went into the bundle without a
word in the manual (a scratch script became part of the plugin).
"""

from __future__ import annotations

import re
from pathlib import Path

from sdk.author import build

AUTHORS = (Path(__file__).resolve().parents[3] / "docs" / "authors.md").read_text(encoding="utf-8")


def _paragraph() -> str:
    match = re.search(r"\*\*What goes into a bundle\.\*\*(.*?)\n\n", AUTHORS, re.S)
    assert match, "docs/authors.md has no 'What goes into a bundle' paragraph"
    return " ".join(match.group(1).split())


def test_the_manual_names_every_directory_the_build_skips() -> None:
    text = _paragraph()
    assert all(f"`{name}/`" in text for name in build._SKIP_DIRS)
    assert "hidden directories" in text


def test_the_manual_names_every_suffix_the_build_stages() -> None:
    text = _paragraph()
    assert all(f"`*{suffix}`" in text for suffixes in build._SUFFIXES.values() for suffix in suffixes)
    assert "`package.json`" in text and "`package-lock.json`" in text
