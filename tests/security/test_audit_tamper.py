"""Tampering with the audit log — editing, deleting, inserting, reordering, truncating — is detected."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from host.audit.key import PUBLIC_KEY_FILE, AuditKey, load_public_keys
from host.audit.log import CHECKPOINT_KIND, AuditLog, checkpoint_statement, verify
from host.canonical import canonical_json
from tests.support.cli import json_out, run_cli

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


# -- signed checkpoints: the chain alone is unkeyed -------------------------

SIGNED_RECORDS = 12


@pytest.fixture
def signed(tmp_path: Path) -> tuple[Path, dict]:
    """A closed log of 12 records with a checkpoint every 5 and one on close."""
    key = AuditKey.load_or_create(tmp_path)
    path = tmp_path / "audit.log"
    with AuditLog(path, signer=key, checkpoint_every=5) as audit:
        for i in range(SIGNED_RECORDS):
            audit.append("call.outcome", {"tool": "t.x", "i": i, "ok": True, "amount": 10})
    keys = load_public_keys([tmp_path / PUBLIC_KEY_FILE])
    report = verify(path, keys=keys)
    assert (report.ok, report.checkpoints, report.closed, report.unsigned_tail) == (True, 3, True, 0)
    return path, keys


def rechain(records: list[dict]) -> list[bytes]:
    """The attacker re-links and re-hashes every record (checkpoints keep their signature)."""
    prev, out = "0" * 64, []
    for seq, original in enumerate(records, start=1):
        record = {k: v for k, v in original.items() if k != "hash"}
        record["seq"], record["prev"] = seq, prev
        if record["kind"] == CHECKPOINT_KIND:
            record["head"], record["count"] = prev, seq - 1
        line = reseal(record)
        prev = json.loads(line)["hash"]
        out.append(line)
    return out


def records_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def test_edit_and_rehash_detected_by_signed_checkpoint(signed: tuple[Path, dict]) -> None:
    path, keys = signed
    records = records_of(path)
    assert records[2]["kind"] == "call.outcome"
    records[2]["amount"] = 1_000_000  # rewrite history ...
    rewrite(path, rechain(records))  # ... and re-hash everything after it
    assert verify(path).ok  # the unkeyed chain cannot tell
    report = verify(path, keys=keys)
    assert not report.ok
    assert report.first_broken == 6  # the first checkpoint after the edit (records 1-5 + it)
    assert "signature does not verify" in report.reason


def test_edit_before_last_checkpoint_detected_even_if_earlier_checkpoints_dropped(
    signed: tuple[Path, dict],
) -> None:
    path, keys = signed
    records = [r for r in records_of(path) if not (r["kind"] == CHECKPOINT_KIND and r["seq"] == 6)]
    records[1]["amount"] = 0
    rewrite(path, rechain(records))
    report = verify(path, keys=keys)
    assert not report.ok and "signature does not verify" in report.reason


def test_forged_checkpoint_under_another_key_detected(signed: tuple[Path, dict], tmp_path: Path) -> None:
    path, keys = signed
    records = records_of(path)
    records[3]["ok"] = False
    forged = rechain(records)
    other = AuditKey.generate()  # the attacker signs with a key of their own
    for index, line in enumerate(forged):
        record = json.loads(line)
        if record["kind"] != CHECKPOINT_KIND:
            continue
        record["key_id"] = other.key_id
        statement = checkpoint_statement(
            head=record["head"], count=record["count"], time=record["time"], key_id=other.key_id,
            reason=record["reason"],
        )
        record["signature"] = base64.b64encode(other.sign(statement)).decode()
        forged[index] = reseal({k: v for k, v in record.items() if k != "hash"})
        forged = forged[: index + 1] + rechain([json.loads(x) for x in forged])[index + 1 :]
    rewrite(path, forged)
    report = verify(path, keys=keys)
    assert not report.ok and "not a given audit public key" in report.reason


def test_checkpoints_stripped_and_rehashed_reported_as_unsigned(signed: tuple[Path, dict]) -> None:
    path, keys = signed
    records = [r for r in records_of(path) if r["kind"] != CHECKPOINT_KIND]
    records[0]["amount"] = 5
    rewrite(path, rechain(records))
    report = verify(path, keys=keys)
    assert report.ok and report.checkpoints == 0  # nothing signed is left to contradict it ...
    assert report.unsigned_tail == SIGNED_RECORDS and not report.closed  # ... and the report says so


def test_truncation_after_last_checkpoint_reported(signed: tuple[Path, dict]) -> None:
    path, keys = signed
    lines = path.read_bytes().splitlines(keepends=True)
    rewrite(path, lines[:-3])  # drop the close checkpoint and the two records before it
    report = verify(path, keys=keys)
    assert report.ok and not report.closed
    assert (report.last_checkpoint, report.records, report.unsigned_tail) == (12, 12, 0)
    rewrite(path, lines[:-1])  # drop only the close checkpoint
    report = verify(path, keys=keys)
    assert report.ok and not report.closed and report.unsigned_tail == 2


def test_checkpoint_statement_is_domain_tagged() -> None:
    statement = json.loads(checkpoint_statement(head="0" * 64, count=0, time=1, key_id="0" * 16, reason="close"))
    assert statement["statement"] == "stockade/audit-checkpoint@1"


def test_caller_cannot_append_a_checkpoint(tmp_path: Path) -> None:
    with AuditLog(tmp_path / "audit.log") as audit, pytest.raises(ValueError, match="written by the log"):
        audit.append(CHECKPOINT_KIND, {"statement": "stockade/audit-checkpoint@1"})


# -- every field of a checkpoint is bound, with and without the key --------------------------

CHECKPOINT_POSITIONS = [6, 12, 15]  # after record 5 and 11 ("records"), and the close one
DAY_MS = 86_400_000


def tamper(records: list[dict], seq: int, field: str, value: object) -> list[bytes]:
    """Set ``field`` of record ``seq`` to ``value`` and re-hash the chain from there on:
    the record is resealed (unless the edited field is its hash) and every later record
    is re-linked and resealed (a later checkpoint's head too), so the unkeyed chain is
    intact wherever the record itself is well-formed."""
    out = [canonical_json(record) + b"\n" for record in records[: seq - 1]]
    target = {**records[seq - 1], field: value}
    if field == "hash":
        line = canonical_json(target) + b"\n"
    else:
        line = reseal({k: v for k, v in target.items() if k != "hash"})
    out.append(line)
    prev = json.loads(line)["hash"]
    for record in records[seq:]:
        relinked = {**{k: v for k, v in record.items() if k != "hash"}, "prev": prev}
        if relinked["kind"] == CHECKPOINT_KIND:
            relinked["head"] = prev  # (its signature still covers the old head)
        line = reseal(relinked)
        prev = json.loads(line)["hash"]
        out.append(line)
    return out


def _other_signature(record: dict, tmp_path: Path) -> str:
    """A valid Ed25519 signature by the log's own key, over another statement."""
    key = AuditKey.load_or_create(tmp_path)
    statement = checkpoint_statement(
        head=record["head"], count=record["count"], time=record["time"] + 1, key_id=record["key_id"],
        reason=record["reason"],
    )
    return base64.b64encode(key.sign(statement)).decode()


def _other_reason(record: dict) -> str:
    return "interval" if record["reason"] != "interval" else "records"


# field -> (new value from the record, what the keyed report says, detected without a key)
CHECKPOINT_FIELDS: dict[str, tuple] = {
    "seq": (lambda r, _: r["seq"] + 1, "where", True),
    "time": (lambda r, _: r["time"] + DAY_MS, "signature does not verify", False),
    "prev": (lambda r, _: "f" * 64, "prev does not match", True),
    "hash": (lambda r, _: "e" * 64, "hash does not match", True),
    "statement": (lambda r, _: "stockade/audit-checkpoint@2", "statement tag", True),
    "head": (lambda r, _: "d" * 64, "head or count", True),
    "count": (lambda r, _: r["count"] - 1, "head or count", True),
    "key_id": (lambda r, _: AuditKey.generate().key_id, "not a given audit public key", False),
    "reason": (lambda r, _: _other_reason(r), "signature does not verify", False),
    "signature": (_other_signature, "signature does not verify", False),
}


def test_checkpoint_field_table_covers_every_field_of_a_checkpoint(signed: tuple[Path, dict]) -> None:
    path, _ = signed
    for seq in CHECKPOINT_POSITIONS:
        record = records_of(path)[seq - 1]
        assert record["kind"] == CHECKPOINT_KIND
        # "kind" is the one field not in the table: see the test after it.
        assert set(record) == {*CHECKPOINT_FIELDS, "kind"}


@pytest.mark.parametrize("seq", CHECKPOINT_POSITIONS, ids=["first", "middle", "last-close"])
@pytest.mark.parametrize("field", list(CHECKPOINT_FIELDS))
def test_any_changed_checkpoint_field_is_broken_at_that_record(
    signed: tuple[Path, dict], tmp_path: Path, seq: int, field: str
) -> None:
    path, keys = signed
    records = records_of(path)
    change, why, keyless = CHECKPOINT_FIELDS[field]
    value = change(records[seq - 1], tmp_path)
    assert value != records[seq - 1][field]
    rewrite(path, tamper(records, seq, field, value))
    report = verify(path, keys=keys)
    assert (report.ok, report.first_broken, report.records) == (False, seq, seq - 1), report.reason
    assert why in report.reason
    unkeyed = verify(path)
    if keyless:  # the checkpoint's shape or place in the chain is wrong: no key needed
        assert (unkeyed.ok, unkeyed.first_broken) == (False, seq), unkeyed.reason
    else:  # only the signature can tell
        assert unkeyed.ok and not unkeyed.keys_checked


@pytest.mark.parametrize("seq", CHECKPOINT_POSITIONS, ids=["first", "middle", "last-close"])
@pytest.mark.parametrize("delta", [DAY_MS, -DAY_MS, 1], ids=["day-later", "day-earlier", "one-ms"])
def test_redated_checkpoint_with_the_chain_rehashed_is_broken_at_that_record(
    signed: tuple[Path, dict], seq: int, delta: int
) -> None:
    path, keys = signed
    records = records_of(path)
    rewrite(path, tamper(records, seq, "time", records[seq - 1]["time"] + delta))
    assert verify(path).ok  # the unkeyed chain cannot tell
    report = verify(path, keys=keys)
    assert (report.ok, report.first_broken) == (False, seq)
    assert "signature does not verify" in report.reason
    assert report.last_checkpoint == (None if seq == 6 else CHECKPOINT_POSITIONS[CHECKPOINT_POSITIONS.index(seq) - 1])


def test_redated_last_checkpoint_is_reported_broken_by_log_verify_with_the_key(
    signed: tuple[Path, dict], tmp_path: Path
) -> None:
    path, _ = signed
    records = records_of(path)
    last = len(records)
    assert records[-1]["reason"] == "close"
    rewrite(path, tamper(records, last, "time", records[-1]["time"] + DAY_MS))
    key = str(tmp_path / PUBLIC_KEY_FILE)
    proc = run_cli("log", "verify", str(path), "--key", key, "--json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout
    report = json_out(proc)
    assert (report["ok"], report["first_broken"], report["keys_checked"]) == (False, last, True)
    assert "signature does not verify" in report["reason"]


def test_checkpoint_turned_into_a_plain_record_is_no_longer_counted(signed: tuple[Path, dict]) -> None:
    path, keys = signed
    records = records_of(path)
    rewrite(path, tamper(records, 12, "kind", "call.outcome"))
    report = verify(path, keys=keys)  # the close checkpoint signs the old head of record 14
    assert (report.ok, report.first_broken, report.last_checkpoint) == (False, 15, 6)
    rewrite(path, tamper(records, 15, "kind", "call.outcome"))
    report = verify(path, keys=keys)  # nothing signed after it: the report shows the loss
    assert report.ok and not report.closed
    assert (report.checkpoints, report.last_checkpoint, report.unsigned_tail) == (2, 12, 3)


@pytest.mark.parametrize("seq", CHECKPOINT_POSITIONS, ids=["first", "middle", "last-close"])
@pytest.mark.parametrize("delta", [-1, 1, 100], ids=["one-less", "one-more", "far"])
def test_keyless_verify_refuses_a_checkpoint_count_off_its_place(
    signed: tuple[Path, dict], seq: int, delta: int
) -> None:
    path, _ = signed
    records = records_of(path)
    assert records[seq - 1]["count"] == seq - 1
    rewrite(path, tamper(records, seq, "count", seq - 1 + delta))
    report = verify(path)  # no key: the count is checked against the chain itself
    assert (report.ok, report.first_broken, report.records) == (False, seq, seq - 1)
    assert report.reason == "checkpoint head or count does not match its place in the chain"
    assert not report.keys_checked
