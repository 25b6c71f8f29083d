"""The bounded call log (host.runtime.calllog)."""

from __future__ import annotations

import pytest

from host.runtime.calllog import CallLog, mentions_oom


def _same(s: str) -> str:
    return s


def test_stream_writes_split_into_lines_and_flushed() -> None:
    log = CallLog(1000)
    out = log.writer("stdout")
    err = log.writer("stderr")
    out(b"hello ")
    out(b"world\nsecond")
    err(b"oops\n")
    lines = log.lines(_same)
    assert [(ln.source, ln.level, ln.text) for ln in lines] == [
        ("stdout", "info", "hello world"),
        ("stderr", "warn", "oops"),
        ("stdout", "info", "second"),
    ]
    assert log.kept_bytes == len(b"hello world\nsecond") + len(b"oops\n")


def test_cap_cuts_on_utf8_boundary_and_marks() -> None:
    log = CallLog(5)
    log.log("info", "ab€cd")  # € is 3 bytes: "ab€" = 5 bytes
    log.log("info", "more")
    lines = log.lines(_same)
    assert lines[0].text == "ab€"
    assert log.kept_bytes == 5
    assert log.truncated
    assert lines[-1].source == "host"
    assert "6 bytes over the 5-byte limit dropped" in lines[-1].text


def test_cut_never_splits_a_character() -> None:
    log = CallLog(4)
    log.log("info", "ab€")  # 5 bytes; 4 would split €
    assert log.lines(_same)[0].text == "ab"
    assert log.kept_bytes == 2


def test_writer_reports_whole_write_even_when_dropping() -> None:
    log = CallLog(3)
    write = log.writer("stdout")
    assert write(b"0123456789") == 10
    assert write(b"more") == 4
    assert log.kept_bytes == 3


def test_writer_never_raises() -> None:
    log = CallLog(10)
    write = log.writer("stdout")
    assert write(memoryview(b"abc")) == 3
    assert log.lines(_same)[0].text == "abc"


@pytest.mark.parametrize(
    "text",
    ["MemoryError", "Traceback ...\nMemoryError: cannot allocate", "memory allocation of 1048576 bytes failed",
     "uncaught exception: out of memory", "Cannot allocate memory"],
    ids=["python", "python-traceback", "rust", "js", "errno"],
)
def test_oom_messages_recognized(text: str) -> None:
    assert mentions_oom(text)
    log = CallLog(1)  # even when the message itself is dropped
    log.writer("stderr")(text.encode())
    assert log.saw_oom


def test_ordinary_output_is_not_oom() -> None:
    log = CallLog(100)
    log.log("error", "memory usage is fine")
    assert not log.saw_oom


def test_scrub_applied_to_every_line() -> None:
    log = CallLog(100)
    log.log("info", "token=abc")
    log.writer("stdout")(b"abc\n")
    assert [ln.text for ln in log.lines(lambda s: s.replace("abc", "***"))] == ["token=***", "***"]
