"""``fs.read_file`` / ``fs.edit_file`` / ``fs.list`` text rules and limits, through the Host.

Named after the failures measured in the seed's sketch and the official MCP filesystem
server: two matches must be refused (not the first replaced), ``$&`` is literal, CRLF
stays CRLF, ``"a\\nb\\n"`` has two lines, a 50 MiB file is refused unread, pages reassemble.
Every limit is crossed once.
"""

from __future__ import annotations

import difflib
import json
import random
import re
import resource
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from host.errors import InputInvalid, StockadeError
from host.tools.fs import _keep, _unified_diff, line_ending, split_lines
from host.tools.paths import RelPath, parse_path
from sdk.commands._logshow import line_for
from tests.support.workspace import FsHost, make_fs_host


@pytest.fixture
def fs(tmp_path: Path) -> Iterator[FsHost]:
    fixture = make_fs_host(tmp_path)
    try:
        yield fixture
    finally:
        fixture.host.close()


def _error(result: Any) -> tuple[str, Any]:
    assert result.error is not None, result
    return result.error.code, result.error.details.get("reason")


def _prepare_error(fs: FsHost, **input: Any) -> tuple[str, Any, Any]:
    with pytest.raises(StockadeError) as caught:
        fs.prepare_edit(**input)
    return caught.value.code, caught.value.details.get("reason"), caught.value.details


# -- the seed's and the official server's measured failures ----------------------------


def test_two_matches_refused_then_replace_all_replaces_two(fs: FsHost) -> None:
    target = fs.ws / "t.txt"
    target.write_text("x = 1\ny = 2\nx = 1\n")
    code, reason, details = _prepare_error(fs, path="t.txt", old_text="x = 1", new_text="x = 3")
    assert (code, reason, details["count"], details["lines"]) == ("INPUT_INVALID", "ambiguous", 2, [1, 3])
    assert target.read_text() == "x = 1\ny = 2\nx = 1\n"
    result = fs.edit(path="t.txt", old_text="x = 1", new_text="x = 3", replace_all=True)
    assert result.ok and result.output["replacements"] == 2
    assert target.read_text() == "x = 3\ny = 2\nx = 3\n"


@pytest.mark.parametrize("new_text", ["$&", "$1 $$ $'", "\\1 \\g<0>", "%s {0}"])
def test_dollar_ampersand_stays_literal(fs: FsHost, new_text: str) -> None:
    (fs.ws / "t.txt").write_text("hello world\n")
    assert fs.edit(path="t.txt", old_text="world", new_text=new_text).ok
    assert (fs.ws / "t.txt").read_text() == f"hello {new_text}\n"


def test_crlf_file_stays_crlf_byte_for_byte(fs: FsHost) -> None:
    original = b"one\r\ntwo\r\nthree\r\n"
    (fs.ws / "w.txt").write_bytes(original)
    read = fs.read(path="w.txt")
    assert read.output["line_ending"] == "crlf" and read.output["content"] == "1: one\n2: two\n3: three"
    assert fs.edit(path="w.txt", old_text="two\nthree", new_text="2\n3\n4").ok  # the model writes LF
    assert (fs.ws / "w.txt").read_bytes() == b"one\r\n2\r\n3\r\n4\r\n"


def test_mixed_endings_outside_the_span_unchanged(fs: FsHost) -> None:
    (fs.ws / "m.txt").write_bytes(b"\xef\xbb\xbfa\r\nb\nc")  # BOM, mixed, no final newline
    assert fs.read(path="m.txt").output["line_ending"] == "mixed"
    assert fs.edit(path="m.txt", old_text="b", new_text="B").ok
    assert (fs.ws / "m.txt").read_bytes() == b"\xef\xbb\xbfa\r\nB\nc"


def test_a_nl_b_nl_has_two_lines(fs: FsHost) -> None:
    (fs.ws / "ab.txt").write_text("a\nb\n")
    out = fs.read(path="ab.txt").output
    assert (out["total_lines"], out["end_line"], out["content"]) == (2, 2, "1: a\n2: b")
    assert split_lines("") == [] and split_lines("a") == ["a"] and split_lines("a\n\n") == ["a", ""]
    assert [line_ending(b) for b in (b"", b"a\n", b"a\r\n", b"a\r\nb\n")] == ["none", "lf", "crlf", "mixed"]


def test_50mib_file_refused_without_being_read(fs: FsHost) -> None:
    with open(fs.ws / "big.log", "wb") as handle:
        handle.truncate(50 * 1024 * 1024)  # sparse: fstat says 50 MiB
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    read = fs.read(path="big.log")
    code, reason, details = _prepare_error(fs, path="big.log", old_text="a", new_text="b")
    elapsed = time.monotonic() - started
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert _error(read) == ("INPUT_INVALID", "too_large")
    assert (code, reason, details["size"]) == ("INPUT_INVALID", "too_large", 50 * 1024 * 1024)
    assert elapsed < 1.0 and grown_kib < 16 * 1024


def test_1mib_file_read_in_pages_reassembles_byte_exact(fs: FsHost) -> None:
    lines = [f"line {i:06d} " + "é" * (i % 40) + "\t\\ \x1b" for i in range(30_000)]
    data = ("\n".join(lines) + "\n").encode("utf-8")
    assert len(data) > 1024 * 1024
    (fs.ws / "one.txt").write_bytes(data)
    got: list[str] = []
    start, pages = 1, 0
    while True:
        out = fs.read(path="one.txt", start_line=start).output
        pages += 1
        got += [entry.split(": ", 1)[1] for entry in out["content"].split("\n")]
        assert len(out["content"].encode()) <= 64_000 * 2
        if "next_start_line" not in out:
            break
        assert out["truncated"] and out["next_start_line"] == out["end_line"] + 1
        start = out["next_start_line"]
    assert pages > 16
    assert ("\n".join(got) + "\n").encode("utf-8") == data


# -- text and input rules -----------------------------------------------------------------


@pytest.mark.parametrize(("data", "why"), [(b"\xff\xfe bad", "invalid"), (b"text\x00more", "nul"),
                                           (b"a" * 9000 + b"\x00", "late_nul")])  # fmt: skip
def test_not_text_refused(fs: FsHost, data: bytes, why: str) -> None:
    (fs.ws / "bin").write_bytes(data)
    assert _error(fs.read(path="bin")) == ("INPUT_INVALID", "not_text")
    assert _prepare_error(fs, path="bin", old_text="a", new_text="b")[:2] == ("INPUT_INVALID", "not_text")


def test_out_of_range_lines_name_total(fs: FsHost) -> None:
    (fs.ws / "t.txt").write_text("a\nb\n")
    result = fs.read(path="t.txt", start_line=5)
    assert _error(result) == ("INPUT_INVALID", "out_of_range")
    assert result.error is not None and result.error.details["total_lines"] == 2
    assert _error(fs.read(path="t.txt", start_line=2, end_line=3)) == ("INPUT_INVALID", "out_of_range")
    assert fs.read(path="t.txt", start_line=2, end_line=2).output["content"] == "2: b"


def test_empty_file_reads_zero_lines(fs: FsHost) -> None:
    (fs.ws / "e.txt").write_bytes(b"")
    out = fs.read(path="e.txt").output
    assert (out["total_lines"], out["content"], out["line_ending"]) == (0, "", "none")


def test_long_line_cut_with_marker(tmp_path: Path) -> None:
    fs = make_fs_host(tmp_path, max_line_bytes=100)
    try:
        (fs.ws / "l.txt").write_text("x" * 1000 + "\nshort\n")
        out = fs.read(path="l.txt").output
        assert (
            out["truncated"]
            and "…[line cut: 900 more bytes]" in out["content"]
            and "2: short" in out["content"]
        )
    finally:
        fs.host.close()


def test_page_bytes_limit_crossed(tmp_path: Path) -> None:
    fs = make_fs_host(tmp_path, page_bytes=1000)
    try:
        (fs.ws / "p.txt").write_text("".join(f"{i:08d}\n" for i in range(500)))
        out = fs.read(path="p.txt").output
        assert out["truncated"] and len(out["content"].encode()) <= 1000 and out["next_start_line"] > 10
    finally:
        fs.host.close()


def test_max_file_bytes_limit_crossed_by_edit(tmp_path: Path) -> None:
    fs = make_fs_host(tmp_path, max_file_bytes=100)
    try:
        (fs.ws / "s.txt").write_text("a" * 90)
        assert _prepare_error(fs, path="s.txt", old_text="a" * 90, new_text="b" * 101)[1] == "too_large"
        (fs.ws / "s.txt").write_text("a" * 101)
        assert _error(fs.read(path="s.txt")) == ("INPUT_INVALID", "too_large")
    finally:
        fs.host.close()


def test_oversize_diff_refused(tmp_path: Path) -> None:
    fs = make_fs_host(tmp_path, max_diff_bytes=200)
    try:
        (fs.ws / "d.txt").write_text("a\n")
        assert _prepare_error(fs, path="d.txt", old_text="a", new_text="b\n" * 200)[1] == "diff_too_large"
        assert (fs.ws / "d.txt").read_text() == "a\n"
    finally:
        fs.host.close()


def test_not_found_and_no_change_refused(fs: FsHost) -> None:
    (fs.ws / "t.txt").write_text("abc\n")
    assert _prepare_error(fs, path="t.txt", old_text="zzz", new_text="y")[:2] == (
        "INPUT_INVALID",
        "not_found",
    )
    assert _prepare_error(fs, path="t.txt", old_text="abc", new_text="abc")[:2] == (
        "INPUT_INVALID",
        "no_change",
    )
    assert _prepare_error(fs, path="nope.txt", old_text="a", new_text="b")[:2] == (
        "INPUT_INVALID",
        "not_found",
    )
    sha = fs.read(path="t.txt").output["sha256"]
    assert (
        _prepare_error(fs, path="t.txt", old_text="abc", new_text="y", expected_sha256="0" * 64)[1] == "stale"
    )
    assert fs.edit(path="t.txt", old_text="abc", new_text="y", expected_sha256=sha).ok


@pytest.mark.parametrize(
    ("path", "reason"),
    [("", "empty"), ("a/" * 2049, "too_long"), ("x" * 256, "component_too_long"), ("a\nb", "control"),
     ("/etc", "absolute"), ("a/../b", "dotdot"), ("a\x00", "nul")],
    ids=["empty", "path_4098_bytes", "component_256_bytes", "newline", "absolute", "dotdot", "nul"],
)  # fmt: skip
def test_path_grammar_refused_before_any_filesystem_call(path: str, reason: str) -> None:
    with pytest.raises(InputInvalid) as caught:
        parse_path(path)
    assert caught.value.details["reason"] == reason and caught.value.details["pointer"] == "/path"


def test_path_grammar_accepts_legal_names() -> None:
    assert parse_path("..notes.txt").text == "..notes.txt"
    assert parse_path("./a//b/.").text == "a/b" and parse_path(".").parts == ()
    assert parse_path("x" * 255).text == "x" * 255


def test_edit_keeps_mode_and_leaves_no_temp_file(fs: FsHost) -> None:
    target = fs.ws / "run.sh"
    target.write_text("echo a\n")
    target.chmod(0o751)
    assert fs.edit(path="run.sh", old_text="a", new_text="b").ok
    assert target.stat().st_mode & 0o777 == 0o751
    assert sorted(p.name for p in fs.ws.iterdir()) == ["run.sh"]


# -- fs.list ----------------------------------------------------------------------------


def test_list_bounded_by_entries_and_depth(tmp_path: Path) -> None:
    fs = make_fs_host(tmp_path, max_list_entries=5)
    try:
        (fs.ws / "d" / "e" / "f").mkdir(parents=True)
        (fs.ws / "d" / "e" / "f" / "deep.txt").write_text("x")
        (fs.ws / "link").symlink_to("/etc")
        one = fs.host.call(fs.request("fs.list", path="."))
        assert [(e["path"], e["kind"]) for e in one.output["entries"]] == [("d", "dir"), ("link", "symlink")]
        deep = fs.host.call(fs.request("fs.list", path=".", depth=8)).output
        assert "d/e/f/deep.txt" in [e["path"] for e in deep["entries"]] and not deep["truncated"]
        for i in range(10):
            (fs.ws / f"f{i}").write_text("x")
        many = fs.host.call(fs.request("fs.list", path=".")).output
        assert len(many["entries"]) == 5 and many["truncated"]
        assert _error(fs.host.call(fs.request("fs.list", path="link"))) == ("POLICY_DENIED", "symlink")
    finally:
        fs.host.close()


def test_log_show_prints_path_and_lines_added_removed(fs: FsHost) -> None:
    (fs.ws / "n.txt").write_text("a\nb\n")
    assert fs.edit(path="n.txt", old_text="b\n", new_text="c\nd\n").ok
    records = [json.loads(line) for line in fs.audit_path.read_text().splitlines()]
    intent = next(r for r in records if r["kind"] == "call.intent")
    outcome = [r for r in records if r["kind"] == "call.outcome" and r.get("tool") == "fs.edit_file"][-1]
    assert line_for(intent).endswith("  n.txt")
    assert line_for(outcome).endswith("  n.txt +2/\u22121")


def _apply(diff: str, before: list[str]) -> list[str]:
    """Apply a unified diff (as written by fs.edit_file) to a list of lines, checking context."""
    out: list[str] = []
    at = 0
    lines = diff.split("\n")[2:]
    index = 0
    while index < len(lines) and lines[index]:
        match = re.match(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@", lines[index])
        assert match, lines[index]
        start = int(match.group(1)) - (0 if match.group(2) == "0" else 1)
        out += before[at:start]
        at = start
        index += 1
        while index < len(lines) and lines[index] and not lines[index].startswith("@@"):
            line = lines[index]
            text = line[1:] + "\n"
            if index + 1 < len(lines) and lines[index + 1] == "\\ No newline at end of file":
                text = line[1:]
                index += 1
            if line[0] in " -":
                assert before[at] == text, (before[at], text)
                at += 1
            if line[0] in " +":
                out.append(text)
            index += 1
    return out + before[at:]


def test_windowed_diff_is_a_correct_diff_and_difflib_for_one_change() -> None:
    rng = random.Random(7)
    for round_ in range(300):
        before = [f"l{rng.randrange(5)}\n" for _ in range(rng.randrange(0, 40))]
        after = list(before)
        changes = 1 if round_ % 2 else rng.randrange(1, 4)
        for _ in range(changes):
            at = rng.randrange(0, len(after) + 1)
            after[at : at + rng.randrange(0, 3)] = [f"n{rng.randrange(5)}\n"] * rng.randrange(0, 3)
        if rng.random() < 0.3 and after:
            after[-1] = after[-1].rstrip("\n")
        old, new = "".join(before), "".join(after)
        if old == new:
            continue
        ours = _unified_diff(RelPath(("f",)), old, new)[0]
        assert "".join(_apply(ours, _keep(old))) == new
        head = next(
            (i for i, (x, y) in enumerate(zip(old, new, strict=False)) if x != y), min(len(old), len(new))
        )
        back = next((i for i, (x, y) in enumerate(zip(old[::-1], new[::-1], strict=False)) if x != y or i >= len(old) - head),
                    min(len(old), len(new)) - head)  # fmt: skip
        windowed = _unified_diff(RelPath(("f",)), old, new, (head, max(head, len(old) - back)))[0]
        assert "".join(_apply(windowed, _keep(old))) == new
        if changes == 1 and len(set(before)) == len(before):
            ref = difflib.unified_diff(old.splitlines(True), new.splitlines(True), "a/f", "b/f", n=3)
            assert ours == "".join(
                x if x.endswith("\n") else x + "\n\\ No newline at end of file\n" for x in ref
            )
