"""Tampering with the audit log — editing, deleting, inserting, reordering, truncating — is detected."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from host.audit import AuditLog, verify
from host.canonical import canonical_json

N = 6
POSITIONS = list(range(1, N + 1))


@pytest.fixture
def log(tmp_path: Path) -> tuple[Path, list[bytes], str]:
    path = tmp_path / "audit.log"
    with AuditLog(path) as audit:
        for i in range(N):
            head = audit.append("call.outcome", {"tool": "t.x", "i": i, "ok": True, "amount": 10})
    assert verify(path, expected_head=head).ok
    return path, path.read_bytes().splitlines(keepends=True), head


def rewrite(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(lines))


def reseal(record: dict) -> bytes:
    """An attacker who knows the format recomputes the edited record's own hash."""
    body = {k: v for k, v in record.items() if k != "hash"}
    record["hash"] = hashlib.sha256(canonical_json(body)).hexdigest()
    return canonical_json(record) + b"\n"


def assert_broken_at(path: Path, number: int, *, expected_head: str | None = None) -> None:
    report = verify(path, expected_head=expected_head)
    assert not report.ok
    assert report.first_broken == number, report.reason
    assert report.records == number - 1
    assert report.reason


@pytest.mark.parametrize("pos", POSITIONS)
def test_edited_value_detected(log: tuple[Path, list[bytes], str], pos: int) -> None:
    path, lines, _ = log
    lines[pos - 1] = lines[pos - 1].replace(b'"amount":10', b'"amount":99')
    rewrite(path, lines)
    assert_broken_at(path, pos)


@pytest.mark.parametrize("pos", POSITIONS)
def test_edited_and_resealed_record_detected(log: tuple[Path, list[bytes], str], pos: int) -> None:
    path, lines, head = log
    record = json.loads(lines[pos - 1])
    record["ok"] = False
    lines[pos - 1] = reseal(record)
    rewrite(path, lines)
    if pos < N:
        assert_broken_at(path, pos + 1)  # the next record's prev no longer matches
    else:
        assert verify(path).ok  # a resealed last record needs an anchor...
        assert_broken_at(path, N + 1, expected_head=head)  # ...which catches it


@pytest.mark.parametrize("pos", POSITIONS)
def test_deleted_record_detected(log: tuple[Path, list[bytes], str], pos: int) -> None:
    path, lines, head = log
    del lines[pos - 1]
    rewrite(path, lines)
    if pos < N:
        assert_broken_at(path, pos)
    else:
        assert_broken_at(path, N, expected_head=head)  # tail truncation at a line boundary


@pytest.mark.parametrize("pos", POSITIONS[:-1])
def test_swapped_records_detected(log: tuple[Path, list[bytes], str], pos: int) -> None:
    path, lines, _ = log
    lines[pos - 1], lines[pos] = lines[pos], lines[pos - 1]
    rewrite(path, lines)
    assert_broken_at(path, pos)


@pytest.mark.parametrize("pos", POSITIONS)
def test_duplicated_record_detected(log: tuple[Path, list[bytes], str], pos: int) -> None:
    path, lines, _ = log
    lines.insert(pos, lines[pos - 1])
    rewrite(path, lines)
    assert_broken_at(path, pos + 1)


@pytest.mark.parametrize("pos", POSITIONS)
def test_non_canonical_respelling_detected(log: tuple[Path, list[bytes], str], pos: int) -> None:
    """Same values, different bytes (whitespace): still an edit."""
    path, lines, _ = log
    lines[pos - 1] = lines[pos - 1].replace(b'"ok":true', b'"ok": true')
    rewrite(path, lines)
    assert_broken_at(path, pos)


@pytest.mark.parametrize("pos", POSITIONS)
def test_duplicate_key_smuggling_detected(log: tuple[Path, list[bytes], str], pos: int) -> None:
    path, lines, _ = log
    lines[pos - 1] = lines[pos - 1].replace(b'"ok":true', b'"ok":true,"ok":false')
    rewrite(path, lines)
    assert_broken_at(path, pos)


def test_whole_log_reversed_detected(log: tuple[Path, list[bytes], str]) -> None:
    path, lines, _ = log
    rewrite(path, lines[::-1])
    assert_broken_at(path, 1)


def test_first_record_replaced_by_forged_genesis_detected(log: tuple[Path, list[bytes], str]) -> None:
    path, lines, _ = log
    record = json.loads(lines[0])
    record["tool"] = "t.evil"
    lines[0] = reseal(record)
    rewrite(path, lines)
    assert_broken_at(path, 2)


@pytest.mark.parametrize("cut", [1, 10, 40], ids=["one-byte", "ten-bytes", "forty-bytes"])
def test_truncated_mid_record_detected(log: tuple[Path, list[bytes], str], cut: int) -> None:
    path, lines, _ = log
    path.write_bytes(b"".join(lines)[:-cut])
    assert_broken_at(path, N)
    assert "truncated" in verify(path).reason


def test_truncated_to_empty_detected_with_anchor(log: tuple[Path, list[bytes], str]) -> None:
    path, _, head = log
    path.write_bytes(b"")
    assert verify(path).ok  # an empty log is a valid (empty) chain
    assert_broken_at(path, 1, expected_head=head)


def test_anchor_from_earlier_still_verifies_after_more_appends(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    with AuditLog(path) as audit:
        early = audit.append("a", {})
        for _ in range(3):
            audit.append("b", {})
    assert verify(path, expected_head=early).ok


def test_unreadable_log_reported_not_raised(tmp_path: Path) -> None:
    report = verify(tmp_path / "missing.log")
    assert (report.ok, report.first_broken) == (False, 1)
