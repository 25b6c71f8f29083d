"""Code cites only what a clone of the repository can open.

Comments and docstrings point at ``docs/design.md §N`` or ``CONTRIBUTING.md principle N``
(both in the repository), an RFC or a CVE, or say the reason themselves; never a design
document kept elsewhere or a tracker number, which a reader of the code cannot follow.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[2]
_SOURCES = sorted(
    path
    for root in ("host", "sdk")
    for path in (_REPO / root).rglob("*")
    if path.suffix in {".py", ".wit", ".js", ".mjs"} and "node_modules" not in path.parts
)
_OUTSIDE = re.compile(r"\bDESIGN §|\bSTYLE §|\bissues? \d+\b|\bNOTES\b")
_DESIGN_CITE = re.compile(r"docs/design\.md §(\d+)")
_PRINCIPLE_CITE = re.compile(r"CONTRIBUTING\.md principles? (\d+)(?:-(\d+))?")


def _design_sections() -> set[int]:
    text = (_REPO / "docs" / "design.md").read_text(encoding="utf-8")
    return {int(number) for number in re.findall(r"^## (\d+)\. ", text, flags=re.MULTILINE)}


def _principles() -> set[int]:
    text = (_REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    return {int(number) for number in re.findall(r"^(\d+)\. \*\*", text, flags=re.MULTILINE)}


def test_sources_are_found() -> None:
    assert len(_SOURCES) > 100


@pytest.mark.parametrize("path", _SOURCES, ids=lambda p: str(p.relative_to(_REPO)))
def test_no_citation_of_a_document_outside_the_repository(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    found = [
        f"{number}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), start=1)
        if _OUTSIDE.search(line)
    ]
    assert found == []


@pytest.mark.parametrize("path", _SOURCES, ids=lambda p: str(p.relative_to(_REPO)))
def test_every_design_and_principle_citation_resolves(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    sections, principles = _design_sections(), _principles()
    dangling = [f"§{n}" for n in _DESIGN_CITE.findall(text) if int(n) not in sections]
    for first, last in _PRINCIPLE_CITE.findall(text):
        dangling += [f"principle {n}" for n in (first, last) if n and int(n) not in principles]
    assert dangling == []


def test_the_cited_documents_number_their_sections() -> None:
    assert _design_sections() == set(range(1, 14))
    assert _principles() == set(range(1, 18))
