"""``exec.run``'s own rules: input refusals, the deadline, the preview, the action digest's
binding of the entry and the profile, and the bounded rendering of captured output."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from host.config import CommandEntry
from host.errors import InputInvalid, PolicyDenied
from host.sandbox.process import Captured, _Capture
from host.tools.exec import render_stream
from tests.support.commands import ExecHost, make_exec_host

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
PYTHON = CommandEntry(name="python3", path=Path("/usr/bin/python3"), max_timeout_ms=5000)


@pytest.fixture
def ex(tmp_path: Path) -> Iterator[ExecHost]:
    fixture = make_exec_host(tmp_path, [PYTHON])
    try:
        yield fixture
    finally:
        fixture.host.close()


# -- capture and rendering ---------------------------------------------------------------


def test_capture_keeps_exact_head_and_tail_of_many_chunks() -> None:
    data = bytes(range(256)) * 1000
    capture = _Capture(1000)
    for start in range(0, len(data), 777):
        capture.feed(data[start : start + 777])
    kept = capture.result()
    assert (kept.head, kept.tail, kept.total) == (data[:500], data[-500:], len(data))
    assert kept.truncated


def test_capture_under_cap_is_whole() -> None:
    capture = _Capture(1000)
    for piece in (b"a" * 400, b"b" * 400, b"c" * 200):
        capture.feed(piece)
    kept = capture.result()
    assert kept.head + kept.tail == b"a" * 400 + b"b" * 400 + b"c" * 200 and not kept.truncated


def test_render_truncated_names_dropped_bytes_between_head_and_tail() -> None:
    text, cut = render_stream(Captured(b"HEAD", b"TAIL", 1000), 4096)
    assert cut and text == "HEAD\n[... 992 bytes omitted ...]\nTAIL"


def test_render_invalid_utf8_replaced() -> None:
    raw = b"ok \xff\xfe end"
    text, cut = render_stream(Captured(raw, b"", len(raw)), 4096)
    assert text == "ok \ufffd\ufffd end" and not cut


@pytest.mark.parametrize("fill", ["\x01", "\ufffd", '"', "\U0001f600"], ids=["control", "bmp", "quote", "astral"])
def test_render_fits_json_budget_whatever_the_characters(fill: str) -> None:
    raw = (fill * 40_000).encode("utf-8")
    budget = 16_384
    text, cut = render_stream(Captured(raw[:8192], raw[-8192:], len(raw)), budget)
    encoded = json.dumps(text, ensure_ascii=False).encode("utf-8")
    assert cut and len(encoded) <= budget + 2  # the two quotes


def test_render_untruncated_but_over_budget_is_cut() -> None:
    text, cut = render_stream(Captured(b"\x00" * 4000, b"", 4000), 1000)
    assert cut and len(json.dumps(text)) <= 1002


# -- input, deadline, preview and binding --------------------------------------------------


@needs_bwrap
def test_nul_in_argv_refused(ex: ExecHost) -> None:
    with pytest.raises(InputInvalid) as caught:
        ex.prepare(argv=["python3", "-c", "print(1)\x00"])
    assert caught.value.details["reason"] == "nul" and caught.value.details["pointer"] == "/argv/2"


@needs_bwrap
@pytest.mark.parametrize(
    ("argv", "reason"),
    [(["sh"], "command_not_allowed"), (["/usr/bin/python3"], "command_not_allowed"),
     (["PYTHON3"], "command_not_allowed")],
    ids=["other_command", "path_instead_of_name", "case"],
)  # fmt: skip
def test_argv0_must_name_a_declared_entry(ex: ExecHost, argv: list[str], reason: str) -> None:
    with pytest.raises(PolicyDenied) as caught:
        ex.prepare(argv=argv)
    assert caught.value.details["reason"] == reason


@needs_bwrap
@pytest.mark.parametrize(("asked", "bound"), [(None, 5000), (800, 800), (3_600_000, 5000)])
def test_deadline_is_min_of_request_and_entry(ex: ExecHost, asked: int | None, bound: int) -> None:
    extra = {} if asked is None else {"timeout_ms": asked}
    plan = ex.prepare(argv=["python3", "-V"], **extra)
    assert plan.effect is not None and plan.effect["bound"]["timeout_ms"] == bound


@needs_bwrap
def test_cwd_outside_workspace_refused(ex: ExecHost) -> None:
    with pytest.raises(InputInvalid) as caught:
        ex.prepare(argv=["python3", "-V"], cwd="../..")
    assert caught.value.details["reason"] == "dotdot"
    with pytest.raises(InputInvalid):
        ex.prepare(argv=["python3", "-V"], cwd="missing")


@needs_bwrap
def test_preview_shows_argv_cwd_entry_network_mode_with_controls_escaped(ex: ExecHost) -> None:
    (ex.ws / "sub").mkdir()
    plan = ex.prepare(argv=["python3", "-c", "print('\x1b[2J')\nsandbox: fake"], cwd="sub")
    detail = plan.preview.detail or ""
    assert "\x1b" not in detail and "\\u001b[2J" in detail
    assert "\nsandbox: fake" not in detail and "\\nsandbox: fake" in detail  # no forged line
    assert "Run python3 (/usr/bin/python3" in detail and "cwd: /workspace/sub (workspace ro" in detail
    assert "network: none" in detail and "sandbox: bwrap" in detail


@needs_bwrap
def test_approval_under_one_profile_never_runs_under_another(tmp_path: Path) -> None:
    first = make_exec_host(tmp_path, [PYTHON])
    try:
        plan = first.prepare(argv=["python3", "-c", "open('w.txt', 'w')"])
        approval = first.host.approve(plan)
    finally:
        first.host.close()
    wider = CommandEntry(name="python3", path=Path("/usr/bin/python3"), max_timeout_ms=5000, workspace="rw")
    second = make_exec_host(tmp_path, [wider])
    try:
        again = second.prepare(argv=["python3", "-c", "open('w.txt', 'w')"])
        assert again.action_digest != plan.action_digest
        result = second.host.execute(plan, approval)
    finally:
        second.host.close()
    assert result.error is not None and result.error.code == "APPROVAL_INVALID"
    assert not (second.ws / "w.txt").exists()
