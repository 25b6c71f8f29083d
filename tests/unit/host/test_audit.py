"""AuditLog: chained records, durability, refusal on write failure, concurrency, resume."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import threading
from pathlib import Path

import pytest

from host.audit import log as audit_mod
from host.audit.key import PUBLIC_KEY_FILE, AuditKey, load_public_keys
from host.audit.log import GENESIS, AuditLog, redact_params, verify
from host.canonical import canonical_json
from host.errors import AuditUnavailable


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.25

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    return tmp_path / "audit.log"


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def test_records_are_chained_canonical_lines(log_path: Path) -> None:
    with AuditLog(log_path, clock=Clock()) as log:
        first = log.append("call.intent", {"tool": "t.x", "input": {"b": 1, "a": [1.0, "é"]}})
        second = log.append("call.outcome", {"tool": "t.x", "ok": True})
    records = lines(log_path)
    assert [r["seq"] for r in records] == [1, 2]
    assert records[0]["prev"] == GENESIS
    assert records[1]["prev"] == first == records[0]["hash"]
    assert records[1]["hash"] == second
    assert records[0]["kind"] == "call.intent" and records[0]["time"] == 1_700_000_001_250
    for raw, record in zip(log_path.read_bytes().splitlines(), records, strict=True):
        assert raw == canonical_json(record)
        body = {k: v for k, v in record.items() if k != "hash"}
        assert record["hash"] == hashlib.sha256(canonical_json(body)).hexdigest()
    assert verify(log_path).ok


def test_log_file_is_private(log_path: Path) -> None:
    with AuditLog(log_path):
        pass
    assert log_path.stat().st_mode & 0o777 == 0o600


def test_resume_after_reopen_continues_the_chain(log_path: Path) -> None:
    with AuditLog(log_path) as log:
        log.append("a", {})
        head = log.append("b", {})
    with AuditLog(log_path) as log:
        assert log.head == (2, head)
        log.append("c", {"n": 3})
    assert [r["seq"] for r in lines(log_path)] == [1, 2, 3]
    assert lines(log_path)[2]["prev"] == head
    report = verify(log_path)
    assert (report.ok, report.records) == (True, 3)


@pytest.mark.parametrize(
    ("tail", "match"),
    [
        (b'{"seq":3', "incomplete"),
        (b"garbage\n", "corrupt"),
        (b"\n", "corrupt"),
    ],
    ids=["partial-line", "garbage-line", "empty-line"],
)
def test_corrupt_tail_refuses_to_open(log_path: Path, tail: bytes, match: str) -> None:
    with AuditLog(log_path) as log:
        log.append("a", {})
    before = log_path.read_bytes() + tail
    log_path.write_bytes(before)
    with pytest.raises(AuditUnavailable, match=match):
        AuditLog(log_path)
    assert log_path.read_bytes() == before  # nothing appended after a bad tail


def test_edited_tail_refuses_to_open(log_path: Path) -> None:
    with AuditLog(log_path) as log:
        log.append("a", {"ok": True})
    log_path.write_bytes(log_path.read_bytes().replace(b'"ok":true', b'"ok":false'))
    with pytest.raises(AuditUnavailable, match="corrupt"):
        AuditLog(log_path)


def test_second_writer_on_same_file_refused(log_path: Path) -> None:
    with AuditLog(log_path) as log:
        with pytest.raises(AuditUnavailable, match="another writer"):
            AuditLog(log_path)
        log.append("a", {})
    with AuditLog(log_path) as again:  # released on close
        again.append("b", {})
    assert verify(log_path).records == 2


def test_reserved_payload_keys_refused(log_path: Path) -> None:
    with AuditLog(log_path) as log:
        for key in ("seq", "time", "prev", "kind", "hash"):
            with pytest.raises(ValueError, match="reserved"):
                log.append("a", {key: 1})
        with pytest.raises(ValueError):
            log.append("", {})
        with pytest.raises(ValueError):
            log.append("k" * 129, {})
        assert log.head == (0, GENESIS)
        log.append("k" * 128, {})
        assert log.head[0] == 1


@pytest.mark.parametrize(
    "payload",
    [{"x": float("nan")}, {"x": b"bytes"}, {"x": {1: "int key"}}, {"x": 2**60}, {"x": "\ud800"}],
    ids=["nan", "bytes", "int-key", "huge-int", "lone-surrogate"],
)
def test_non_canonical_payload_refused_and_chain_unchanged(log_path: Path, payload: dict) -> None:
    with AuditLog(log_path) as log:
        log.append("a", {})
        head = log.head
        with pytest.raises(AuditUnavailable, match="canonical"):
            log.append("b", payload)
        assert log.head == head
        log.append("c", {})
    assert verify(log_path).ok


def test_oversized_record_refused(log_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audit_mod, "MAX_RECORD_BYTES", 300)
    with AuditLog(log_path) as log:
        with pytest.raises(AuditUnavailable, match="over"):
            log.append("a", {"blob": "x" * 400})
        assert log.head == (0, GENESIS)
    assert log_path.read_bytes() == b""


def test_full_disk_dev_full_refused_and_chain_unchanged() -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    with AuditLog(Path("/dev/full")) as log:
        with pytest.raises(AuditUnavailable, match="No space left"):
            log.append("call.intent", {"tool": "t.x"})
        assert log.head == (0, GENESIS)
        with pytest.raises(AuditUnavailable):
            log.append("call.intent", {"tool": "t.x"})
        assert log.head == (0, GENESIS)


def _fail_once(monkeypatch: pytest.MonkeyPatch, name: str, *, partial: bool = False) -> list[int]:
    real = getattr(os, name)
    calls: list[int] = []

    def broken(fd: int, *args: object) -> object:
        if not calls:
            calls.append(1)
            if partial:  # half the record reaches the file, then the disk is full
                data = args[0]
                real(fd, bytes(data)[: len(data) // 2])  # type: ignore[arg-type]
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, *args)

    monkeypatch.setattr(audit_mod.os, name, broken)
    return calls


@pytest.mark.parametrize(
    ("name", "partial"),
    [("write", False), ("write", True), ("fsync", False)],
    ids=["write-enospc", "partial-write-then-enospc", "fsync-eio"],
)
def test_write_failure_refused_file_and_chain_unchanged(
    log_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, partial: bool
) -> None:
    with AuditLog(log_path) as log:
        log.append("a", {})
        head = log.head
        before = log_path.read_bytes()
        _fail_once(monkeypatch, name, partial=partial)
        with pytest.raises(AuditUnavailable) as info:
            log.append("call.intent", {"tool": "t.x"})
        assert info.value.code == "AUDIT_UNAVAILABLE"
        assert log.head == head
        assert log_path.read_bytes() == before  # the partial record was cut off
        log.append("call.intent", {"tool": "t.x"})  # disk freed: the chain continues
    records = lines(log_path)
    assert [r["seq"] for r in records] == [1, 2]
    assert records[1]["prev"] == head[1]
    assert verify(log_path).ok


def test_failed_undo_breaks_the_log_until_reopened(log_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with AuditLog(log_path) as log:
        log.append("a", {})
        _fail_once(monkeypatch, "write", partial=True)
        monkeypatch.setattr(audit_mod.os, "ftruncate", lambda fd, n: (_ for _ in ()).throw(OSError(errno.EIO, "EIO")))
        with pytest.raises(AuditUnavailable):
            log.append("b", {})
        monkeypatch.undo()
        with pytest.raises(AuditUnavailable, match="could not be undone"):
            log.append("c", {})
    with pytest.raises(AuditUnavailable, match="incomplete"):
        AuditLog(log_path)  # the operator must look at the partial line first


def test_closed_log_refuses_appends(log_path: Path) -> None:
    log = AuditLog(log_path)
    log.close()
    log.close()  # idempotent
    with pytest.raises(AuditUnavailable, match="closed"):
        log.append("a", {})


def test_unopenable_path_refused(tmp_path: Path) -> None:
    with pytest.raises(AuditUnavailable, match="cannot open"):
        AuditLog(tmp_path / "missing-dir" / "audit.log")


def test_eight_threads_500_appends_each_all_chained(log_path: Path) -> None:
    log = AuditLog(log_path)
    ids: list[str] = []
    guard = threading.Lock()

    def work(n: int) -> None:
        mine = [log.append("call.outcome", {"thread": n, "i": i}) for i in range(500)]
        with guard:
            ids.extend(mine)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.close()
    report = verify(log_path)
    assert (report.ok, report.records) == (True, 4000)
    assert len(set(ids)) == 4000
    records = lines(log_path)
    assert {r["hash"] for r in records} == set(ids)
    assert sorted((r["thread"], r["i"]) for r in records) == [(n, i) for n in range(8) for i in range(500)]


def test_redact_params_replaces_only_named_top_level_values() -> None:
    data = {"token": "s3cret", "repo": "x", "nested": {"token": "kept"}}
    out = redact_params(data, ["token", "absent"])
    assert out == {"token": "[REDACTED]", "repo": "x", "nested": {"token": "kept"}}
    assert data["token"] == "s3cret"  # input untouched


@pytest.mark.parametrize(
    "payload",
    [
        {},
        {"a": 1},
        {"zz": [1, {"hash": "stockade:hash-placeholder"}]},
        {"input": {"hash": "stockade:hash-placeholder"}, "x": "\"hash\":\"stockade:hash-placeholder\""},
        {"é": "ü", "\ue000": 1.5},
    ],
    ids=["empty", "before", "placeholder-nested-after", "placeholder-nested-before", "non-ascii-and-float"],
)
def test_encoded_line_is_canonical_json_of_record_with_its_hash(payload: dict) -> None:
    record = {**payload, "seq": 1, "time": 2, "prev": GENESIS, "kind": "k"}
    line, digest = audit_mod.encode_record(dict(record))
    assert digest == hashlib.sha256(canonical_json(record)).hexdigest()
    assert line == canonical_json({**record, "hash": digest}) + b"\n"


# -- signed checkpoints ---------------------------------------------------------------------


def kinds_and_reasons(path: Path) -> list[str]:
    return [r.get("reason", r["kind"]) for r in lines(path)]


def test_checkpoint_every_n_records_and_on_close(tmp_path: Path) -> None:
    key = AuditKey.load_or_create(tmp_path)
    path = tmp_path / "audit.log"
    with AuditLog(path, signer=key, checkpoint_every=3) as log:
        for i in range(7):
            log.append("call.outcome", {"i": i})
    assert kinds_and_reasons(path) == [
        "call.outcome", "call.outcome", "call.outcome", "records",
        "call.outcome", "call.outcome", "call.outcome", "records",
        "call.outcome", "close",
    ]
    checkpoint = lines(path)[3]
    assert checkpoint["statement"] == "stockade/audit-checkpoint@1"
    assert (checkpoint["count"], checkpoint["head"], checkpoint["key_id"]) == (3, lines(path)[2]["hash"], key.key_id)
    report = verify(path, keys=load_public_keys([tmp_path / PUBLIC_KEY_FILE]))
    assert (report.ok, report.keys_checked, report.checkpoints, report.last_checkpoint, report.closed) == (
        True, True, 3, 10, True,
    )


def test_checkpoint_after_interval(tmp_path: Path) -> None:
    with AuditLog(tmp_path / "audit.log", signer=AuditKey.generate(), checkpoint_interval_s=1e-9) as log:
        log.append("a", {})
        log.append("b", {})
    assert kinds_and_reasons(tmp_path / "audit.log") == ["a", "interval", "b", "interval"]


def test_no_close_checkpoint_when_nothing_new(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    key = AuditKey.generate()
    with AuditLog(path, signer=key) as log:
        log.append("a", {})
    with AuditLog(path, signer=key):
        pass
    assert kinds_and_reasons(path) == ["a", "close"]


def test_audit_key_created_private_and_reused(tmp_path: Path) -> None:
    first = AuditKey.load_or_create(tmp_path)
    assert (tmp_path / "audit-key").stat().st_mode & 0o777 == 0o600
    assert AuditKey.load_or_create(tmp_path).key_id == first.key_id
    assert list(load_public_keys([tmp_path / PUBLIC_KEY_FILE])) == [first.key_id]
    (tmp_path / "audit-key").chmod(0o644)
    with pytest.raises(AuditUnavailable, match="group or others"):
        AuditKey.load_or_create(tmp_path)


# -- durability modes -----------------------------------------------------------------------


def count_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def counted(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(audit_mod.os, "fsync", counted)
    return calls


def test_full_mode_fsyncs_before_append_returns(log_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with AuditLog(log_path) as log:
        fsyncs = count_fsyncs(monkeypatch)
        log.append("a", {})
        assert len(fsyncs) == 1


def test_flush_mode_writes_to_the_os_and_fsyncs_on_demand_and_close(
    log_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = AuditLog(log_path, durability="flush", flush_interval_ms=3_600_000)
    fsyncs = count_fsyncs(monkeypatch)
    digest = log.append("call.outcome", {})
    assert fsyncs == [] and lines(log_path)[-1]["hash"] == digest  # in the file, not yet synced
    log.append("call.intent", {}, durable=True)  # intent records: on disk before returning
    assert len(fsyncs) == 1
    log.append("call.outcome", {})
    log.close()
    assert len(fsyncs) == 2
    assert verify(log_path).records == 3


def test_flush_mode_failed_fsync_breaks_the_log(log_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with AuditLog(log_path, durability="flush", flush_interval_ms=3_600_000) as log:
        log.append("a", {})
        _fail_once(monkeypatch, "fsync")
        with pytest.raises(AuditUnavailable, match="fsync"):
            log.sync()
        with pytest.raises(AuditUnavailable, match="reopen"):
            log.append("b", {})
    assert verify(log_path).records == 1  # acknowledged records are kept, never cut off


def test_group_commit_one_fsync_for_a_batch_of_writers(log_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """8 writers: the first fsync is held until all 8 lines are written; those written
    meanwhile are then made durable together by (at most) one more fsync."""
    writers = 8
    log = AuditLog(log_path)
    all_written = threading.Event()
    written: list[int] = []
    real_write, real_fsync = os.write, os.fsync
    fsyncs: list[int] = []

    def write(fd: int, data: bytes) -> int:
        n = real_write(fd, data)
        written.append(n)
        if len(written) == writers:
            all_written.set()
        return n

    def fsync(fd: int) -> None:
        fsyncs.append(fd)
        if len(fsyncs) == 1:
            assert all_written.wait(30)
        real_fsync(fd)

    monkeypatch.setattr(audit_mod.os, "write", write)
    monkeypatch.setattr(audit_mod.os, "fsync", fsync)
    threads = [threading.Thread(target=log.append, args=("call.outcome", {"n": n})) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 1 <= len(fsyncs) <= 2  # not one per writer
    monkeypatch.undo()
    log.close()
    assert verify(log_path).records == writers


def test_unknown_durability_refused(log_path: Path) -> None:
    with pytest.raises(ValueError, match="durability"):
        AuditLog(log_path, durability="eventually")  # type: ignore[arg-type]


def test_verify_of_a_fifo_reports_broken_instead_of_blocking(tmp_path: Path) -> None:
    # issue 9.8 at the library's depth: host.audit.log.verify used to open a FIFO and wait for a writer.
    import os  # noqa: PLC0415

    from host.audit.log import verify  # noqa: PLC0415

    fifo = tmp_path / "audit.log"
    os.mkfifo(fifo)
    report = verify(fifo)
    assert not report.ok and report.records == 0
    assert "not a regular file" in report.reason
