"""``fs.search``: literal matches beneath a path, bounded, never through a symlink."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.workspace import FsHost, make_fs_host


@pytest.fixture
def fs(tmp_path: Path) -> Iterator[FsHost]:
    fixture = make_fs_host(tmp_path, deny=("private",))
    try:
        yield fixture
    finally:
        fixture.host.close()


def _search(fs: FsHost, text: str, path: str = ".") -> dict[str, object]:
    result = fs.host.call(fs.request("fs.search", path=path, text=text))
    assert result.ok, result.error
    assert isinstance(result.output, dict)
    return result.output


def test_literal_matches_with_line_numbers(fs: FsHost) -> None:
    (fs.ws / "src").mkdir()
    (fs.ws / "src" / "a.py").write_text("x = 1\nneedle = 2\n")
    (fs.ws / "b.txt").write_bytes(b"one\r\nthe needle\r\n")
    (fs.ws / "regex.txt").write_text("needl.\n")
    out = _search(fs, "needle")
    assert out["matches"] == [{"path": "b.txt", "line": 2, "text": "the needle"},
                              {"path": "src/a.py", "line": 2, "text": "needle = 2"}]  # fmt: skip
    assert _search(fs, "needl.")["matches"] == [{"path": "regex.txt", "line": 1, "text": "needl."}]


def test_symlinks_hard_links_denied_binary_skipped(fs: FsHost) -> None:
    outside = fs.root / "outside.txt"
    outside.write_text("needle outside\n")
    (fs.ws / "out_link").symlink_to(outside)
    (fs.ws / "dir_link").symlink_to(fs.root)
    (fs.ws / "hard").hardlink_to(outside)
    (fs.ws / "private").mkdir()
    (fs.ws / "private" / "s.txt").write_text("needle secret\n")
    (fs.ws / "bin").write_bytes(b"needle\x00")
    (fs.ws / "bad").write_bytes(b"needle \xff")
    assert _search(fs, "needle")["matches"] == []


def test_match_count_bounded(fs: FsHost) -> None:
    (fs.ws / "many.txt").write_text("needle\n" * 500)
    out = _search(fs, "needle")
    assert len(out["matches"]) == 100 and out["truncated"] is True  # type: ignore[arg-type]
