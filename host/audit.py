"""Hash-chained, append-only audit log (DESIGN §6 steps 9 and 11, §8 "Audit").

One JSON object per line, each the RFC 8785 canonical JSON of::

    {"seq": 7, "time": 1732881234512, "prev": "<hash of record 6>", "kind": "call.outcome",
     ...payload..., "hash": "<sha256 of this record's canonical JSON without 'hash'>"}

Invariants:

- ``time`` is wall-clock Unix time in integer milliseconds (integers keep every record
  on the fast canonical-JSON path; payloads should avoid floats for the same reason).
- ``seq`` starts at 1 and grows by one; the first record's ``prev`` is 64 zeros;
  ``hash`` is the lower-case hex SHA-256 of the canonical JSON of the record without
  ``hash``; each line is exactly the canonical JSON of its record plus ``"\\n"``.
- :meth:`AuditLog.append` writes one whole line, then ``fsync``s, before it returns the
  record's hash. If any step fails (a full disk, an I/O error) the file is truncated
  back to its previous length, :class:`~host.errors.AuditUnavailable` is raised and the
  chain state (seq, prev) does not advance; if the file cannot be truncated back either,
  the log refuses every further append until it is reopened.
- Opening resumes from the last line and verifies it; an incomplete or corrupt tail
  refuses to open (AUDIT_UNAVAILABLE): the operator inspects it with
  ``stockade log verify`` before anything else is written after it.
- One writer per file: the file is ``flock``-ed for as long as the log is open, so a
  second :class:`AuditLog` on the same file (in this or another process) is refused
  instead of forking the chain. Close it (or use ``with``) to release it.
- :func:`verify` names the first broken record: an edited, deleted, inserted or
  reordered line, or an incomplete last line. Removing whole records *from the end*
  leaves a valid shorter chain; pass a hash known from earlier (``expected_head``, e.g.
  an ``audit_id`` a caller was given) to detect that truncation too.

Example::

    with AuditLog(state_dir / "audit.log") as log:
        audit_id = log.append("call.outcome", {"tool": "tracker.list-issues", "ok": True})
    report = verify(state_dir / "audit.log", expected_head=audit_id)
    assert report.ok
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

from host.canonical import canonical_json, parse_json
from host.errors import AuditUnavailable, StockadeError

_fcntl: ModuleType | None
try:
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - non-POSIX platforms
    _fcntl = None

__all__ = [
    "GENESIS",
    "MAX_RECORD_BYTES",
    "REDACTED",
    "RESERVED_FIELDS",
    "AuditLog",
    "VerifyReport",
    "redact_params",
    "verify",
]

GENESIS = "0" * 64
"""The ``prev`` of the first record."""

MAX_RECORD_BYTES = 1024 * 1024  # bytes of one canonical record line, newline included
RESERVED_FIELDS = frozenset({"seq", "time", "prev", "kind", "hash"})
REDACTED = "[REDACTED]"
_MAX_KIND_CHARS = 128
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The result of :func:`verify`.

    Args:
        ok: the whole file is one intact chain (and holds ``expected_head`` if given).
        records: how many records verified before the first broken one.
        first_broken: the 1-based line number of the first broken record, or None.
        reason: what is wrong with it ("" when ok).
        head: hash of the last intact record (GENESIS for an empty log).
    """

    ok: bool
    records: int
    first_broken: int | None
    reason: str
    head: str = GENESIS


class _Broken(Exception):
    """One line is not a well-formed record; the message says why."""


def _record_hash(record: Mapping[str, Any]) -> str:
    body = {key: value for key, value in record.items() if key != "hash"}
    return hashlib.sha256(canonical_json(body)).hexdigest()


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


def verify(path: Path, *, expected_head: str | None = None) -> VerifyReport:
    """Check a whole audit log and name the first broken record.

    Args:
        path: the log file.
        expected_head: a record hash known to be in the log (e.g. an ``audit_id``
            handed out earlier); if it is absent the log was truncated or rewritten.

    Returns:
        A :class:`VerifyReport`; ``ok`` is False for an unreadable file too.
    """
    prev = GENESIS
    count = 0
    seen_expected = expected_head is None
    try:
        with open(path, "rb") as handle:
            while True:
                raw = handle.readline(MAX_RECORD_BYTES + 1)
                if not raw:
                    break
                number = count + 1
                if not raw.endswith(b"\n"):
                    why = "record too large" if len(raw) > MAX_RECORD_BYTES else "incomplete last record"
                    return VerifyReport(False, count, number, f"{why} (truncated)", prev)
                try:
                    record = _check_line(raw[:-1])
                except _Broken as exc:
                    return VerifyReport(False, count, number, str(exc), prev)
                if record["seq"] != number:
                    why = f"seq {record['seq']} where {number} was expected (deleted, inserted or reordered)"
                    return VerifyReport(False, count, number, why, prev)
                if record["prev"] != prev:
                    why = "prev does not match the previous record's hash (deleted, inserted or reordered)"
                    return VerifyReport(False, count, number, why, prev)
                prev = record["hash"]
                count = number
                seen_expected = seen_expected or prev == expected_head
    except OSError as exc:
        return VerifyReport(False, count, count + 1, f"cannot read the log: {exc.strerror or exc}", prev)
    if not seen_expected:
        why = f"record {expected_head} is not in the log (truncated or rewritten)"
        return VerifyReport(False, count, count + 1, why, prev)
    return VerifyReport(True, count, None, "", prev)


def redact_params(input: Mapping[str, Any], sensitive: Iterable[str]) -> dict[str, Any]:
    """A copy of a tool input with each sensitive top-level property replaced by ``[REDACTED]``.

    Args:
        input: the tool input (its root is an object, DESIGN §5).
        sensitive: the tool's ``sensitive_params`` (top-level property names).

    Returns:
        A new dict; the input is not modified. Absent names are ignored.
    """
    names = frozenset(sensitive)
    return {key: (REDACTED if key in names else value) for key, value in input.items()}


class AuditLog:
    """The one writer of a hash-chained audit log file.

    Args:
        path: the log file; created (mode 0600) if missing.
        clock: wall-clock seconds for the ``time`` field.

    Raises:
        AuditUnavailable: the file cannot be opened or locked, or its last record is
            incomplete or corrupt.
    """

    def __init__(self, path: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self._clock = clock
        self._lock = threading.Lock()
        self._broken = False
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        try:
            self._fd: int | None = os.open(self.path, flags, 0o600)
        except OSError as exc:
            raise AuditUnavailable(f"cannot open the audit log: {exc.strerror or exc}") from None
        try:
            self._take_lock()
            self._size = os.fstat(self._fd).st_size
            self._seq, self._prev = self._resume()
        except BaseException:
            self.close()
            raise

    def _take_lock(self) -> None:
        if _fcntl is None or self._fd is None:  # pragma: no cover - non-POSIX platforms
            return
        try:
            _fcntl.flock(self._fd, _fcntl.LOCK_EX | _fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                raise AuditUnavailable("the audit log is open in another writer") from None
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
                raise AuditUnavailable("the last audit record is incomplete; run `stockade log verify`")
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

    def append(self, kind: str, payload: Mapping[str, object]) -> str:
        """Append one record and make it durable (write + fsync) before returning.

        Args:
            kind: the record kind, e.g. ``call.intent`` or ``call.outcome``.
            payload: JSON data; its keys must not be ``seq``, ``time``, ``prev``,
                ``kind`` or ``hash``.

        Raises:
            AuditUnavailable: the record could not be written, is not canonical JSON or
                is larger than :data:`MAX_RECORD_BYTES`, or the log is closed or broken;
                nothing was added and the chain state is unchanged.
            ValueError: an empty kind or a reserved payload key (caller misuse).

        Returns:
            The new record's hash (its id; the next record's ``prev``).
        """
        if not isinstance(kind, str) or not kind or len(kind) > _MAX_KIND_CHARS:
            raise ValueError(f"kind must be a non-empty string of at most {_MAX_KIND_CHARS} characters")
        clash = RESERVED_FIELDS.intersection(payload)
        if clash:
            raise ValueError(f"payload keys {sorted(clash)} are reserved")
        with self._lock:
            fd = self._fd
            if fd is None:
                raise AuditUnavailable("the audit log is closed")
            if self._broken:
                raise AuditUnavailable("an earlier audit write failed and could not be undone; reopen it")
            stamp = int(self._clock() * 1000)
            record: dict[str, Any] = {
                **payload, "seq": self._seq + 1, "time": stamp, "prev": self._prev, "kind": kind
            }
            line = self._encode(record)
            self._write_durably(fd, line)
            self._seq += 1
            self._prev = str(record["hash"])
            self._size += len(line)
            return self._prev

    @staticmethod
    def _encode(record: dict[str, Any]) -> bytes:
        try:
            record["hash"] = _record_hash(record)
            line = canonical_json(record) + b"\n"
        except StockadeError as exc:
            raise AuditUnavailable(f"the audit record is not canonical JSON: {exc.message}") from None
        if len(line) > MAX_RECORD_BYTES:
            raise AuditUnavailable(f"the audit record is {len(line)} bytes, over {MAX_RECORD_BYTES}")
        return line

    def _write_durably(self, fd: int, line: bytes) -> None:
        try:
            view = memoryview(line)
            while view:
                written = os.write(fd, view)
                if written <= 0:  # pragma: no cover - os.write raises instead
                    raise OSError(errno.EIO, "short write")
                view = view[written:]
            os.fsync(fd)
        except OSError as exc:
            self._undo(fd)
            raise AuditUnavailable(f"cannot write the audit log: {exc.strerror or exc}") from None

    def _undo(self, fd: int) -> None:
        """Cut a partly written record off; if that fails too, refuse further appends."""
        try:
            if os.fstat(fd).st_size != self._size:
                os.ftruncate(fd, self._size)
        except OSError:
            self._broken = True

    def close(self) -> None:
        """Release the file (and its lock); further appends raise AuditUnavailable."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            os.close(fd)
