"""Hash-chained, append-only audit log with signed checkpoints (docs/design.md §6 steps 9 and 11,
§8 "Audit", §12 "Audit").

One JSON object per line, each the RFC 8785 canonical JSON of::

    {"seq": 7, "time": 1732881234512, "prev": "<hash of record 6>", "kind": "call.outcome",
     ...payload..., "hash": "<sha256 of this record's canonical JSON without 'hash'>"}

Invariants:

- ``time`` is wall-clock Unix time in integer milliseconds (integers keep every record
  on the fast canonical-JSON path; payloads should avoid floats for the same reason).
- ``seq`` starts at 1 and grows by one; the first record's ``prev`` is 64 zeros;
  ``hash`` is the lower-case hex SHA-256 of the canonical JSON of the record without
  ``hash``; each line is exactly the canonical JSON of its record plus ``"\\n"``.
- **Durability** is a named mode (:data:`DURABILITY_MODES`):

  - ``full`` (the default): :meth:`AuditLog.append` returns only after the record is on
    disk. Concurrent appends are *group-committed*: each caller writes its line under
    the log's lock, then one caller fsyncs for everyone whose line is written (one fsync
    per batch); a caller waits at most for the fsync in flight plus its own batch's.
  - ``flush``: ``append`` returns once the line is written to the OS (it survives a
    crash of the process, not of the machine); a background thread fsyncs at most every
    ``flush_interval_ms`` and :meth:`AuditLog.close` fsyncs.

  ``append(..., durable=True)`` waits for the disk in either mode (intent records for
  non-read effects use it: they are on disk before the guest starts, always).
- If a write fails (a full disk, an I/O error) the file is truncated back to its
  previous length, :class:`~host.errors.AuditUnavailable` is raised and the chain state
  (seq, prev) does not advance. If an fsync fails in ``full`` mode, every record of that
  batch is cut off, each of its callers gets AuditUnavailable and the chain resumes from
  the last durable record; in ``flush`` mode (records already acknowledged) the log
  refuses further appends until it is reopened. If the file cannot be truncated back,
  the log refuses every further append until it is reopened.
- **Signed checkpoints** (with a ``signer``, :class:`~host.audit.key.AuditKey`): after
  every ``checkpoint_every`` records, when ``checkpoint_interval_s`` passed since the
  last checkpoint with records written since, and on close, the writer appends a record
  of kind ``audit.checkpoint``::

      {"kind": "audit.checkpoint", "statement": "stockade/audit-checkpoint@1",
       "head": "<hash of record count>", "count": 1000, "key_id": "<16 hex>",
       "reason": "records" | "interval" | "close", "signature": "<base64, 64 bytes>", ...}

  The signature is Ed25519 over :func:`checkpoint_statement` (the statement tag, head,
  count, the record's ``time``, key id and reason), so it vouches for the whole chain up
  to ``head``. Callers cannot append this kind.
- Opening resumes from the last line and verifies it; an incomplete or corrupt tail
  refuses to open (AUDIT_UNAVAILABLE): the operator inspects it with
  ``stockade log verify`` before anything else is written after it.
- One writer per file: the file is ``flock``-ed for as long as the log is open, so a
  second :class:`AuditLog` on the same file (in this or another process) is refused
  instead of forking the chain. Close it (or use ``with``) to release it.

What :func:`verify` detects:

- without a key: any edited, deleted, inserted or reordered line, or an incomplete last
  line (a torn write), naming the first broken record. An edit *followed by re-hashing*
  every later record is **not** detected (the chain is unkeyed);
- with the audit public key(s): additionally an edit plus re-hash of any record up to the
  last checkpoint (its signature no longer verifies), and a forged or altered
  checkpoint; it reports the last verified checkpoint, how many records after it are
  covered by no signature, and whether the log ends with a ``close`` checkpoint. Records
  removed *after* the last checkpoint, or edited and re-hashed there, cannot be told
  apart from a log that simply ended (a crash): the report says so. Cutting the log back
  to an earlier checkpoint, or replacing it by an older copy, is detected only with
  ``expected_head`` (a hash known from later, e.g. an ``audit_id`` handed out).

Example::

    with AuditLog(state_dir / "audit.log", signer=AuditKey.load_or_create(state_dir)) as log:
        audit_id = log.append("call.outcome", {"tool": "tracker.list-issues", "ok": True})
    keys = load_public_keys([state_dir / "audit-key.pub"])
    report = verify(state_dir / "audit.log", expected_head=audit_id, keys=keys)
    assert report.ok and report.closed
"""

from __future__ import annotations

import base64
import binascii
import errno
import hashlib
import logging
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from host import observe
from host._files import LockHeld, lock_exclusive, open_regular
from host.audit.key import AuditKey, verify_signature
from host.canonical import canonical_json, parse_json
from host.errors import AuditUnavailable, StockadeError

__all__ = [
    "CHECKPOINT_KIND",
    "CHECKPOINT_STATEMENT",
    "DURABILITY_MODES",
    "GENESIS",
    "MAX_RECORD_BYTES",
    "REDACTED",
    "RESERVED_FIELDS",
    "AuditLog",
    "CheckpointAnchor",
    "Durability",
    "VerifyReport",
    "check_append_args",
    "checkpoint_payload",
    "checkpoint_reason",
    "checkpoint_statement",
    "encode_for_append",
    "redact_params",
    "verify",
]

_log = logging.getLogger("stockade.audit")

GENESIS = "0" * 64
"""The ``prev`` of the first record."""

MAX_RECORD_BYTES = 1024 * 1024  # bytes of one canonical record line, newline included
RESERVED_FIELDS = frozenset({"seq", "time", "prev", "kind", "hash"})
REDACTED = "[REDACTED]"
CHECKPOINT_KIND: Final = "audit.checkpoint"
CHECKPOINT_STATEMENT: Final = "stockade/audit-checkpoint@1"
CHECKPOINT_REASONS: Final = frozenset({"records", "interval", "close"})
Durability = Literal["full", "flush"]
DURABILITY_MODES: Final = ("full", "flush")
_MAX_KIND_CHARS = 128
_HASH_PLACEHOLDER = "stockade:hash-placeholder"
_HASH_MEMBER = b'"hash":"stockade:hash-placeholder"'
_HEX64 = re.compile(r"[0-9a-f]{64}")
_KEY_ID = re.compile(r"[0-9a-f]{16}")


@dataclass(frozen=True, slots=True)
class CheckpointAnchor:
    """The newest signed checkpoint a verification saw: what to keep outside the log's storage.

    Args:
        seq: the checkpoint record's number.
        hash: the checkpoint record's own hash (pass it back as ``expected_head``).
        head: the hash of the record it signs (its predecessor).
        count: how many records it signs (``seq - 1``).
        time: its time (Unix milliseconds, signed).
        key_id: the audit key that signed it.
    """

    seq: int
    hash: str
    head: str
    count: int
    time: int
    key_id: str


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The result of :func:`verify`.

    Args:
        ok: the whole file is one intact chain, every checkpoint verified (when keys
            were given) and it holds ``expected_head`` (if given).
        records: how many records verified before the first broken one.
        first_broken: the 1-based line number of the first broken record, or None.
        reason: what is wrong with it ("" when ok).
        head: hash of the last intact record (GENESIS for an empty log).
        keys_checked: checkpoint signatures were checked (public keys were given).
        checkpoints: checkpoints found intact (verified when ``keys_checked``).
        last_checkpoint: ``seq`` of the last such checkpoint, or None.
        unsigned_tail: records after the last checkpoint (covered by no signature).
        closed: the log ends with a ``close`` checkpoint (the writer closed it cleanly).
        anchor: the newest checkpoint seen (:class:`CheckpointAnchor`), or None. Kept
            outside the log's storage and passed back as ``expected_head``, it detects
            records removed from the end later, even when whoever removed them also
            rewrote the head.
    """

    ok: bool
    records: int
    first_broken: int | None
    reason: str
    head: str = GENESIS
    keys_checked: bool = False
    checkpoints: int = 0
    last_checkpoint: int | None = None
    unsigned_tail: int = 0
    closed: bool = False
    anchor: CheckpointAnchor | None = None


class _Broken(Exception):
    """One line is not a well-formed record; the message says why."""


def _record_hash(record: Mapping[str, Any]) -> str:
    body = {key: value for key, value in record.items() if key != "hash"}
    return hashlib.sha256(canonical_json(body)).hexdigest()


def checkpoint_statement(*, head: str, count: int, time: int, key_id: str, reason: str) -> bytes:
    """The exact bytes a checkpoint signature covers (canonical JSON, domain-tagged)."""
    return canonical_json(
        {
            "statement": CHECKPOINT_STATEMENT,
            "head": head,
            "count": count,
            "time": time,
            "key_id": key_id,
            "reason": reason,
        }
    )


def checkpoint_payload(signer: AuditKey, *, head: str, count: int, time: int, reason: str) -> dict[str, Any]:
    """The payload of an ``audit.checkpoint`` record over ``head`` (record ``count``),
    signed by ``signer``; the record's ``time`` must be ``time`` (it is signed too)."""
    statement = checkpoint_statement(head=head, count=count, time=time, key_id=signer.key_id, reason=reason)
    return {
        "statement": CHECKPOINT_STATEMENT,
        "head": head,
        "count": count,
        "key_id": signer.key_id,
        "reason": reason,
        "signature": base64.b64encode(signer.sign(statement)).decode("ascii"),
    }


def checkpoint_reason(unsigned: int, *, every: int, stale: bool, closing: bool) -> str | None:
    """Why a checkpoint is due now (``close``, ``records``, ``interval``), or None: the
    cadence every audit sink keeps. ``stale``: the checkpoint interval has passed."""
    if unsigned <= 0:
        return None
    if closing:
        return "close"
    if unsigned >= every:
        return "records"
    return "interval" if stale else None


def check_append_args(kind: str, payload: Mapping[str, object]) -> None:
    """What every audit sink refuses from a caller.

    Raises:
        ValueError: an empty or too long kind, the checkpoint kind (sinks write it
            themselves) or a reserved payload key.
    """
    if not isinstance(kind, str) or not kind or len(kind) > _MAX_KIND_CHARS:
        raise ValueError(f"kind must be a non-empty string of at most {_MAX_KIND_CHARS} characters")
    if kind == CHECKPOINT_KIND:
        raise ValueError(f"{CHECKPOINT_KIND} records are written by the log itself")
    clash = RESERVED_FIELDS.intersection(payload)
    if clash:
        raise ValueError(f"payload keys {sorted(clash)} are reserved")


def encode_for_append(record: dict[str, Any]) -> tuple[bytes, str]:
    """:func:`encode_record`, refusing what no sink may store.

    Raises:
        AuditUnavailable: the record is not canonical JSON or its line is larger than
            :data:`MAX_RECORD_BYTES`.
    """
    try:
        line, digest = encode_record(record)
    except StockadeError as exc:
        raise AuditUnavailable(f"the audit record is not canonical JSON: {exc.message}") from None
    if len(line) > MAX_RECORD_BYTES:
        raise AuditUnavailable(f"the audit record is {len(line)} bytes, over {MAX_RECORD_BYTES}")
    return line, digest


def _check_line(line: bytes) -> dict[str, Any]:
    """Parse one line (without its newline) and check it is a self-consistent record."""
    try:
        record = parse_json(line, max_bytes=MAX_RECORD_BYTES)
    except StockadeError as exc:
        raise _Broken(f"not valid JSON ({exc.message})") from None
    if not isinstance(record, dict):
        raise _Broken("not a JSON object")
    missing = sorted(RESERVED_FIELDS - set(record))
    if missing:
        raise _Broken(f"missing fields {missing}")
    seq, stamp, prev, kind, digest = (record[k] for k in ("seq", "time", "prev", "kind", "hash"))
    if type(seq) is not int or seq < 1:
        raise _Broken("seq is not a positive integer")
    if type(stamp) is not int or stamp < 0:
        raise _Broken("time is not a non-negative integer (Unix ms)")
    if not isinstance(kind, str) or not kind:
        raise _Broken("kind is not a non-empty string")
    for name, value in (("prev", prev), ("hash", digest)):
        if not isinstance(value, str) or not _HEX64.fullmatch(value):
            raise _Broken(f"{name} is not 64 lower-case hex digits")
    if canonical_json(record) != line:
        raise _Broken("the line is not the canonical JSON of its record (edited)")
    if _record_hash(record) != digest:
        raise _Broken("hash does not match the record (edited)")
    return record


def _check_checkpoint(record: Mapping[str, Any], keys: Mapping[str, Ed25519PublicKey] | None) -> None:
    """Check a checkpoint's shape and (with ``keys``) its signature; raise _Broken."""
    if record.get("statement") != CHECKPOINT_STATEMENT:
        raise _Broken(f"checkpoint without the statement tag {CHECKPOINT_STATEMENT!r}")
    head, count, key_id = record.get("head"), record.get("count"), record.get("key_id")
    reason, signature = record.get("reason"), record.get("signature")
    if head != record["prev"] or type(count) is not int or count != record["seq"] - 1:
        raise _Broken("checkpoint head or count does not match its place in the chain")
    if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id) or reason not in CHECKPOINT_REASONS:
        raise _Broken("checkpoint key_id or reason is malformed")
    try:
        raw = base64.b64decode(str(signature), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 64:
        raise _Broken("checkpoint signature is not base64 of 64 bytes")
    if keys is None:
        return
    if key_id not in keys:
        raise _Broken(f"checkpoint signed by key {key_id}, which is not a given audit public key")
    statement = checkpoint_statement(
        head=str(head), count=count, time=int(record["time"]), key_id=key_id, reason=str(reason)
    )
    if not verify_signature(keys, key_id, raw, statement):
        raise _Broken("checkpoint signature does not verify (records up to it were edited and re-hashed)")


@dataclass(slots=True)
class _Walk:
    """Running state of :func:`verify`."""

    prev: str = GENESIS
    count: int = 0
    checkpoints: int = 0
    last_checkpoint: int | None = None
    closed: bool = False
    anchor: CheckpointAnchor | None = None

    def report(self, ok: bool, broken: int | None, reason: str, keys_checked: bool) -> VerifyReport:
        signed = self.last_checkpoint or 0
        return VerifyReport(
            ok, self.count, broken, reason, self.prev, keys_checked, self.checkpoints,
            self.last_checkpoint, self.count - signed, self.closed, self.anchor,
        )


def verify(
    path: Path,
    *,
    expected_head: str | None = None,
    keys: Mapping[str, Ed25519PublicKey] | None = None,
) -> VerifyReport:
    """Check a whole audit log and name the first broken record.

    Args:
        path: the log file.
        expected_head: a record hash known to be in the log (e.g. an ``audit_id``
            handed out earlier); if it is absent the log was truncated or rewritten.
        keys: audit public keys by key id (:func:`host.audit.key.load_public_keys`);
            with them every checkpoint's signature must verify. Without them
            checkpoints are only checked for shape (``keys_checked`` is False).

    Returns:
        A :class:`VerifyReport`; ``ok`` is False for an unreadable file too.
    """
    walk = _Walk()
    seen_expected = expected_head is None
    checked = keys is not None
    try:
        # Non-blocking and fstat-checked: a FIFO or directory is refused, never waited on.
        with open_regular(Path(path), None, what="audit log", error=AuditUnavailable) as handle:
            while True:
                raw = handle.readline(MAX_RECORD_BYTES + 1)
                if not raw:
                    break
                number = walk.count + 1
                if not raw.endswith(b"\n"):
                    why = "record too large" if len(raw) > MAX_RECORD_BYTES else "incomplete last record"
                    return walk.report(False, number, f"{why} (truncated: a torn write)", checked)
                try:
                    record = _check_line(raw[:-1])
                    _check_link(record, number, walk.prev)
                    if record["kind"] == CHECKPOINT_KIND:
                        _check_checkpoint(record, keys)
                except _Broken as exc:
                    return walk.report(False, number, str(exc), checked)
                walk.prev = record["hash"]
                walk.count = number
                walk.closed = record["kind"] == CHECKPOINT_KIND and record["reason"] == "close"
                if record["kind"] == CHECKPOINT_KIND:
                    walk.checkpoints += 1
                    walk.last_checkpoint = number
                    walk.anchor = CheckpointAnchor(
                        number, record["hash"], record["head"], record["count"], record["time"],
                        record["key_id"],
                    )
                seen_expected = seen_expected or walk.prev == expected_head
    except AuditUnavailable as exc:
        return walk.report(False, walk.count + 1, f"cannot read the log: {exc.message}", checked)
    except OSError as exc:
        return walk.report(False, walk.count + 1, f"cannot read the log: {exc.strerror or exc}", checked)
    if not seen_expected:
        why = f"record {expected_head} is not in the log (truncated or rewritten)"
        return walk.report(False, walk.count + 1, why, checked)
    return walk.report(True, None, "", checked)


def _check_link(record: Mapping[str, Any], number: int, prev: str) -> None:
    if record["seq"] != number:
        raise _Broken(f"seq {record['seq']} where {number} was expected (deleted, inserted or reordered)")
    if record["prev"] != prev:
        raise _Broken("prev does not match the previous record's hash (deleted, inserted or reordered)")


def redact_params(input: Mapping[str, Any], sensitive: Iterable[str]) -> dict[str, Any]:
    """A copy of a tool input with each sensitive top-level property replaced by ``[REDACTED]``.

    Args:
        input: the tool input (its root is an object, docs/design.md §5).
        sensitive: the tool's ``sensitive_params`` (top-level property names).

    Returns:
        A new dict; the input is not modified. Absent names are ignored.
    """
    names = frozenset(sensitive)
    return {key: (REDACTED if key in names else value) for key, value in input.items()}


def encode_record(record: dict[str, Any]) -> tuple[bytes, str]:
    """The line (canonical JSON plus newline) and hash of a record that has no ``hash`` yet.

    The record is canonicalized once: it is encoded with a placeholder as its ``hash``,
    the hashed body is that line without the placeholder member, and the line gets the
    real hash spliced in. The top-level member is always in the line, so when the
    placeholder member occurs exactly once it is that one; if a payload holds it too
    (a nested ``"hash"`` key with that value), the record is encoded the slow way.

    Raises:
        StockadeError: the record has no canonical form.
    """
    record["hash"] = _HASH_PLACEHOLDER
    try:
        marked = canonical_json(record)
    finally:
        del record["hash"]
    member = _HASH_MEMBER
    at = marked.find(member)
    end = at + len(member)
    if at <= 0 or marked.find(member, end) != -1:
        digest = hashlib.sha256(canonical_json(record)).hexdigest()
        return canonical_json({**record, "hash": digest}) + b"\n", digest
    if marked[at - 1 : at] == b",":
        body = marked[: at - 1] + marked[end:]
    else:  # the first member: drop the comma after it (there is one: "kind" sorts later)
        body = marked[:at] + marked[end + 1 :]
    digest = hashlib.sha256(body).hexdigest()
    return marked[:at] + b'"hash":"' + digest.encode("ascii") + b'"' + marked[end:] + b"\n", digest


@dataclass(frozen=True, slots=True)
class _Mark:
    """A point in the file: its size and the chain state after it."""

    size: int
    seq: int
    prev: str


class AuditLog:
    """The one writer of a hash-chained audit log file.

    Args:
        path: the log file; created (mode 0600) if missing.
        clock: wall-clock seconds for the ``time`` field.
        durability: ``"full"`` (default) or ``"flush"`` (module docstring).
        flush_interval_ms: in ``flush`` mode, the most time between a write and its fsync.
        signer: the key that signs checkpoints (``None``: no checkpoints).
        checkpoint_every: records between two checkpoints (at most).
        checkpoint_interval_s: seconds after which records written since the last
            checkpoint get one (checked on append and by a background thread).

    Raises:
        AuditUnavailable: the file cannot be opened or locked, or its last record is
            incomplete or corrupt.
        ValueError: an unknown durability mode or a non-positive interval (caller misuse).
    """

    def __init__(
        self,
        path: Path,
        *,
        clock: Callable[[], float] = time.time,
        durability: Durability = "full",
        flush_interval_ms: int = 50,
        signer: AuditKey | None = None,
        checkpoint_every: int = 1000,
        checkpoint_interval_s: float = 60.0,
    ) -> None:
        if durability not in DURABILITY_MODES:
            raise ValueError(f"durability must be one of {DURABILITY_MODES}, got {durability!r}")
        if flush_interval_ms <= 0 or checkpoint_every <= 0 or not checkpoint_interval_s > 0:
            raise ValueError("flush_interval_ms, checkpoint_every and checkpoint_interval_s must be positive")
        self.path = Path(path)
        self.durability: Durability = durability
        self._clock = clock
        self._signer = signer
        self._every = checkpoint_every
        self._interval_s = float(checkpoint_interval_s)
        self._lock = threading.Lock()  # chain state and writes
        self._cond = threading.Condition()  # durability bookkeeping (never held while writing)
        self._broken = False
        self._fd: int | None = None
        self._size, self._seq, self._prev = 0, 0, GENESIS
        self._durable = _Mark(0, 0, GENESIS)
        self._epoch = 0  # bumped when unsynced records are cut off after a failed fsync
        self._cut_at: dict[int, int] = {}  # epoch -> durable size when it ended
        self._syncing = False
        self._unsigned = 0
        self._last_checkpoint = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        try:
            self._fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            raise AuditUnavailable(f"cannot open the audit log: {exc.strerror or exc}") from None
        try:
            self._take_lock()
            self._size = os.fstat(self._fd).st_size
            self._seq, self._prev = self._resume()
        except BaseException:
            self.close()
            raise
        self._durable = _Mark(self._size, self._seq, self._prev)
        if durability == "flush" or signer is not None:
            period = flush_interval_ms / 1000 if durability == "flush" else self._interval_s
            self._thread = threading.Thread(
                target=_background, args=(weakref.ref(self), self._stop, period),
                name="stockade-audit", daemon=True,
            )
            self._thread.start()

    def _take_lock(self) -> None:
        if self._fd is None:  # pragma: no cover - set just before
            return
        try:
            lock_exclusive(self._fd, blocking=False)
        except LockHeld:
            raise AuditUnavailable(
                "the audit log is open in another writer (another Stockade process on this state dir?)",
                hint="Stop the other process, or give this one its own state dir and audit log; processes "
                "that must share state use the PostgreSQL store (--store postgresql://…, docs/operators.md).",
            ) from None
        except OSError as exc:
            raise AuditUnavailable(f"cannot lock the audit log: {exc.strerror or exc}") from None

    def _resume(self) -> tuple[int, str]:
        """Read and verify the last line; return its (seq, hash) or (0, GENESIS)."""
        if self._size == 0:
            return 0, GENESIS
        line = self._last_line()
        try:
            record = _check_line(line)
        except _Broken as exc:
            raise AuditUnavailable(
                f"the last audit record is corrupt: {exc}; run `stockade log verify`"
            ) from None
        return int(record["seq"]), str(record["hash"])

    def _last_line(self) -> bytes:
        fd = self._fd
        if fd is None:  # pragma: no cover - only called while open
            raise AuditUnavailable("the audit log is closed")
        try:
            if os.pread(fd, 1, self._size - 1) != b"\n":
                raise AuditUnavailable(
                    "the last audit record is incomplete (a torn write); run `stockade log verify`"
                )
            start = max(0, self._size - 1 - MAX_RECORD_BYTES)
            tail = os.pread(fd, self._size - 1 - start, start)
        except OSError as exc:
            raise AuditUnavailable(f"cannot read the audit log: {exc.strerror or exc}") from None
        cut = tail.rfind(b"\n")
        if cut < 0 and start > 0:
            raise AuditUnavailable("the last audit record is too large; run `stockade log verify`")
        return tail[cut + 1 :]

    @property
    def head(self) -> tuple[int, str]:
        """(seq, hash) of the last record written (``(0, GENESIS)`` for an empty log)."""
        with self._lock:
            return self._seq, self._prev

    def append(self, kind: str, payload: Mapping[str, object], *, durable: bool | None = None) -> str:
        """Append one record; return once it is as durable as the mode (or ``durable``) asks.

        Args:
            kind: the record kind, e.g. ``call.intent`` or ``call.outcome``.
            payload: JSON data; its keys must not be ``seq``, ``time``, ``prev``,
                ``kind`` or ``hash``.
            durable: ``True``: on disk before returning, whatever the mode; ``None``:
                as the mode says (``full``: on disk; ``flush``: written to the OS).

        Raises:
            AuditUnavailable: the record could not be written or made durable, is not
                canonical JSON or is larger than :data:`MAX_RECORD_BYTES`, or the log is
                closed or broken; nothing was added and the chain state is unchanged.
            ValueError: an empty kind, the checkpoint kind or a reserved payload key
                (caller misuse).

        Returns:
            The new record's hash (its id; the next record's ``prev``).
        """
        check_append_args(kind, payload)
        with self._lock:
            fd = self._writable()
            digest = self._write_record(fd, kind, payload, int(self._clock() * 1000))
            self._unsigned += 1
            self._maybe_checkpoint(fd, closing=False)
            epoch, end = self._epoch, self._size
        if durable or (durable is None and self.durability == "full"):
            self._wait_durable(epoch, end)
        return digest

    def sync(self) -> None:
        """Make every record written so far durable (fsync), group-committed with others.

        Raises:
            AuditUnavailable: the fsync failed or the log is closed.
        """
        with self._lock:
            epoch, end = self._epoch, self._size
        self._wait_durable(epoch, end)

    # -- writing (under self._lock) ------------------------------------------------------

    def _writable(self) -> int:
        fd = self._fd
        if fd is None:
            raise AuditUnavailable("the audit log is closed")
        if self._broken:
            raise AuditUnavailable("an earlier audit write failed and could not be undone; reopen it")
        return fd

    def _write_record(self, fd: int, kind: str, payload: Mapping[str, object], stamp: int) -> str:
        record: dict[str, Any] = {**payload, "seq": self._seq + 1, "time": stamp, "prev": self._prev}
        record["kind"] = kind
        line, digest = encode_for_append(record)
        self._write_line(fd, line)
        self._seq += 1
        self._prev = digest
        self._size += len(line)
        return digest

    def _write_line(self, fd: int, line: bytes) -> None:
        try:
            view = memoryview(line)
            while view:
                written = os.write(fd, view)
                if written <= 0:  # pragma: no cover - os.write raises instead
                    raise OSError(errno.EIO, "short write")
                view = view[written:]
        except OSError as exc:
            self._undo(fd, self._size)
            raise AuditUnavailable(f"cannot write the audit log: {exc.strerror or exc}") from None

    def _undo(self, fd: int, size: int) -> None:
        """Cut the file back to ``size``; if that fails too, refuse further appends."""
        try:
            if os.fstat(fd).st_size != size:
                os.ftruncate(fd, size)
        except OSError:
            self._broken = True

    def _maybe_checkpoint(self, fd: int, *, closing: bool) -> None:
        stale = time.monotonic() - self._last_checkpoint >= self._interval_s
        reason = checkpoint_reason(self._unsigned, every=self._every, stale=stale, closing=closing)
        if self._signer is None or reason is None:
            return
        stamp = int(self._clock() * 1000)
        payload = checkpoint_payload(
            self._signer, head=self._prev, count=self._seq, time=stamp, reason=reason
        )
        try:
            self._write_record(fd, CHECKPOINT_KIND, payload, stamp)
        except AuditUnavailable as exc:  # the record itself is written; retried next time
            _log.error("cannot write an audit checkpoint: %s", exc)
            return
        self._unsigned = 0
        self._last_checkpoint = time.monotonic()

    # -- durability (group commit) --------------------------------------------------------

    def _wait_durable(self, epoch: int, end: int) -> None:
        """Return once the bytes up to ``end`` written in ``epoch`` are on disk.

        The first waiter that finds no fsync in flight becomes the leader: it fsyncs
        everything written so far, for every waiter; the others wait for it.
        """
        while True:
            with self._cond:
                while True:
                    if epoch != self._epoch:
                        if end <= self._cut_at.get(epoch, -1):
                            return
                        raise AuditUnavailable("cannot write the audit log: the fsync of this record failed")
                    if self._durable.size >= end:
                        return
                    if not self._syncing:
                        self._syncing = True
                        break
                    self._cond.wait()
            self._lead_sync()

    def _lead_sync(self) -> None:
        """fsync as the leader of one batch; on failure cut the batch off (or break)."""
        failure: OSError | None = None
        batch, started = 0, time.perf_counter()
        try:
            with self._lock:
                fd = self._fd
                mark = _Mark(self._size, self._seq, self._prev)
                epoch = self._epoch
            if fd is None:
                failure = OSError(errno.EBADF, "the audit log is closed")
            else:
                try:
                    os.fsync(fd)
                except OSError as exc:
                    failure = exc
                    self._after_failed_sync(fd)
        finally:
            with self._cond:
                self._syncing = False
                if failure is None and epoch == self._epoch:
                    batch = mark.seq - self._durable.seq
                    self._durable = mark
                self._cond.notify_all()
        observe.audit_synced(batch, time.perf_counter() - started, failed=failure is not None)
        if failure is not None and fd is None:
            raise AuditUnavailable("the audit log is closed")

    def _after_failed_sync(self, fd: int) -> None:
        """Cut unsynced records off (``full``) or refuse further appends (``flush``)."""
        with self._lock, self._cond:
            durable = self._durable
            _log.error("audit fsync failed; records after seq %d are not durable", durable.seq)
            if self.durability == "full":
                self._undo(fd, durable.size)
                self._size, self._seq, self._prev = durable.size, durable.seq, durable.prev
            else:
                self._broken = True
            self._cut_at[self._epoch] = durable.size
            self._epoch += 1
            while len(self._cut_at) > 64:
                del self._cut_at[min(self._cut_at)]

    def _tick(self) -> None:
        """Background work: the periodic fsync (``flush``) and the interval checkpoint."""
        with self._lock:
            fd = self._fd
            if fd is None or self._broken:
                return
            self._maybe_checkpoint(fd, closing=False)
            dirty = self._size != self._durable.size
        if dirty and self.durability == "flush":
            try:
                self.sync()
            except AuditUnavailable as exc:
                _log.error("periodic audit fsync failed: %s", exc)

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Write the ``close`` checkpoint, fsync, and release the file (and its lock).

        Further appends raise AuditUnavailable. Idempotent.
        """
        self._stop_thread()
        with self._lock:
            fd = self._fd
            if fd is None:
                return
            if not self._broken:
                self._maybe_checkpoint(fd, closing=True)
        if not self._broken:
            try:
                self.sync()
            except AuditUnavailable as exc:
                _log.error("final audit fsync failed: %s", exc)
        with self._lock:
            fd, self._fd = self._fd, None
        with self._cond:
            while self._syncing:
                self._cond.wait()
        if fd is not None:
            os.close(fd)

    def _stop_thread(self) -> None:
        stop = getattr(self, "_stop", None)
        thread = getattr(self, "_thread", None)
        if stop is not None:
            stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()
        fd = getattr(self, "_fd", None)
        if fd is not None:
            os.close(fd)


def _background(ref: weakref.ref[AuditLog], stop: threading.Event, period: float) -> None:
    """The log's background thread; holds only a weak reference, so it never keeps a
    forgotten log alive."""
    while not stop.wait(period):
        log = ref()
        if log is None:
            return
        try:
            log._tick()
        except Exception:  # pragma: no cover - a bug here must not kill the thread silently
            _log.exception("audit background work failed")
        del log
