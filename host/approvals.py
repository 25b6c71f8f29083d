"""Approvals: the host's single-use approvals of one action, and the queue of those given out of band.

Two halves (docs/design.md §6 step 6, §7, §12):

- :class:`ApprovalAuthority` issues and redeems the approvals a person gives in the
  calling session: an HMAC under a key that lives only in the host process binds the
  action digest, the principal, the session and an expiry, and each approval is single
  use; :func:`approval_binds` is the part of that check every store backend shares, and
  :func:`reference_time` the one reference time of a check. Every failure is one opaque
  ``APPROVAL_INVALID`` (CONTRIBUTING.md principle 12).
- the pending queue below, for approvals given out of band.

The pending queue:

When a call needs a person's approval and the caller cannot ask one (an MCP client
without elicitation), the front end queues the action here and refuses the call with
APPROVAL_REQUIRED. A person lists the queue (``stockade approvals list``) and approves or
denies one action digest; the same call, retried by the same principal, then runs once
(approved) or is refused with APPROVAL_DENIED (denied).

Invariants:

- one file per state dir, ``approvals.json`` (format ``stockade.approvals/1``), changed
  only under an exclusive ``flock`` on ``approvals.lock`` and replaced atomically
  (temp file, fsync, rename), so concurrent servers and CLI commands never lose an entry;
- an entry is bound to the action digest *and* the principal (project, subject); the
  digest already binds the principal, tool, version, lock generation and input;
- an entry expires ``ttl_s`` after it was queued, decided or not; expired entries are
  never redeemed and are dropped on the next write;
- a decision is consumed once: :meth:`ApprovalQueue.redeem` removes an approved or
  denied entry in the same locked step that reads it (single use);
- at most ``max_per_principal`` entries per principal (default
  :data:`MAX_PENDING_PER_PRINCIPAL`) and :data:`MAX_PENDING` in all, so one principal
  cannot fill the queue for the others; a principal over its share, or a full queue, is
  refused with APPROVAL_QUEUE_FULL naming the bound (fail closed);
- an unreadable or malformed file fails closed (APPROVAL_INVALID), never as "empty".

The class is the port a later state-store backend implements (``request``, ``entries``,
``decide``, ``redeem``); nothing else touches the file.

Example::

    queue = ApprovalQueue(state_dir)
    queue.request(plan, summary="{...}")         # -> the pending entry
    queue.decide(digest, approve=True)           # a person, from the CLI
    queue.redeem(digest, project="p", subject="alice")  # -> "approved", once
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import secrets as _random
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from host._files import LOCKING, atomic_write, interprocess_lock, read_regular
from host.canonical import canonical_json
from host.errors import ApprovalInvalid, ApprovalQueueFull
from host.types import Approval, InvocationPlan

__all__ = [
    "FORMAT",
    "MAX_PENDING",
    "MAX_PENDING_PER_PRINCIPAL",
    "ApprovalAuthority",
    "ApprovalQueue",
    "PendingApproval",
    "Redemption",
    "approval_binds",
    "asdict_entry",
    "check_pending_bounds",
    "reference_time",
]

FORMAT: Final = "stockade.approvals/1"
MAX_PENDING: Final = 1024  # entries in one queue, all principals together
MAX_PENDING_PER_PRINCIPAL: Final = 16  # entries one principal may have pending (default)
MAX_FILE_BYTES: Final = 4 * 1024 * 1024  # bytes of approvals.json
DEFAULT_TTL_S: Final = 900.0  # s an entry lives after it was queued
MAX_SUMMARY_CHARS: Final = 1024  # characters of the input summary kept
MAX_INPUT_CHARS: Final = 256 * 1024  # characters of a queued call's whole input (beside the entry)

Status = Literal["pending", "approved", "denied"]
Redemption = Literal["approved", "denied", "pending", "absent"]

_HEX64 = r"^[0-9a-f]{64}$"


def reference_time(now: float | None) -> float:
    """The one reference time of a check: ``time.time()`` or an injected, finite ``now``.

    Raises:
        ValueError: ``now`` is NaN, infinite or not a number (a NaN reference time would
            make every expiry comparison false, so nothing would ever expire).
    """
    if now is None:
        return time.time()
    if not _is_finite(now):
        raise ValueError("now must be a finite unix time")
    return float(now)


def approval_binds(plan: InvocationPlan, approval: Approval, reference: float) -> bool:
    """Whether ``approval`` names ``plan``'s action, principal and session and is still
    valid at ``reference`` (the MAC and single use are each backend's own check)."""
    principal = plan.request.principal
    ok = hmac.compare_digest(approval.action_digest, plan.action_digest)
    ok &= (approval.project, approval.subject) == principal.key
    ok &= approval.session == plan.request.session
    ok &= approval.expires_at > reference
    return ok


def _is_finite(value: object) -> bool:
    """A real number (not a bool) that is neither NaN nor infinite."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


class ApprovalAuthority:
    """Issues and redeems single-use approvals bound to one action.

    The MAC key is random per authority (per Host) and never leaves the process, so an
    approval cannot be forged by whoever writes the call envelope, and approvals do not
    survive a host restart.
    """

    __slots__ = ("_key", "_lock", "_used")

    def __init__(self) -> None:
        self._key = _random.token_bytes(32)
        self._lock = threading.Lock()
        self._used: dict[str, float] = {}

    def issue(self, plan: InvocationPlan, *, ttl_s: float = 300.0, now: float | None = None) -> Approval:
        """Approve ``plan`` for its principal and session, for ``ttl_s`` seconds.

        Raises:
            ValueError: ``ttl_s`` is not a positive, finite number, or ``now`` is not finite.
        """
        if not _is_finite(ttl_s) or ttl_s <= 0:
            raise ValueError("ttl_s must be a positive, finite number of seconds")
        reference = reference_time(now)
        principal = plan.request.principal
        fields = {
            "action_digest": plan.action_digest,
            "project": principal.project,
            "subject": principal.subject,
            "session": plan.request.session,
            "expires_at": reference + ttl_s,
            "nonce": _random.token_hex(16),
        }
        return Approval(**fields, mac=self._mac(fields))

    def redeem(self, plan: InvocationPlan, approval: Approval, *, now: float | None = None) -> None:
        """Check ``approval`` against ``plan`` and mark it used.

        Raises:
            ApprovalInvalid: forged, for another action, principal or session, expired,
                or already used. One opaque error for every case.
            ValueError: ``now`` is not finite (caller misuse).
        """
        reference = reference_time(now)
        fields = approval.model_dump(exclude={"mac", "signature", "key_id"})
        ok = approval.mac is not None and hmac.compare_digest(self._mac(fields), approval.mac)
        ok &= approval_binds(plan, approval, reference)
        with self._lock:
            self._forget_expired(reference)
            ok &= approval.nonce not in self._used
            if not ok:
                raise ApprovalInvalid("the approval is not valid for this action")
            self._used[approval.nonce] = approval.expires_at

    def _forget_expired(self, reference: float) -> None:
        expired = [nonce for nonce, until in self._used.items() if until <= reference]
        for nonce in expired:
            del self._used[nonce]

    def _mac(self, fields: Mapping[str, Any]) -> str:
        return hmac.new(self._key, canonical_json(dict(fields)), hashlib.sha256).hexdigest()


class PendingApproval(BaseModel):
    """One queued action, as stored and as listed."""

    # defer_build: validators are built on first use, not at import (CLI start-up time):
    # the approval queue's files are read only when an approval is queued or decided.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)

    action_digest: str = Field(pattern=_HEX64)
    project: str = Field(min_length=1, max_length=128)
    subject: str = Field(min_length=1, max_length=256)
    tool: str = Field(max_length=64)
    version: str = Field(max_length=128)
    generation: int
    effect: str = Field(max_length=16)
    risk: str = Field(max_length=16)
    hosts: tuple[str, ...]
    secrets: tuple[str, ...]
    summary: str = Field(max_length=MAX_SUMMARY_CHARS)
    requested_at: float
    expires_at: float
    status: Status = "pending"
    decided_at: float | None = None
    decided_by: str | None = Field(default=None, max_length=256)
    # Shared stores only (host.store.pending): the session the action was queued from,
    # and, once approved, the approver-signed approval the retried call redeems.
    session: str | None = Field(default=None, max_length=256)
    approval: Approval | None = None


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)

    format: Literal["stockade.approvals/1"]
    entries: tuple[PendingApproval, ...]


@dataclass(frozen=True, slots=True)
class _Key:
    digest: str
    project: str
    subject: str


class ApprovalQueue:
    """The file-backed queue of one state directory (see the module docstring).

    Args:
        state_dir: the host's state directory (created if missing, mode 0700).
        ttl_s: how long an entry lives after it was queued.
        clock: the time source (injected in tests).
    """

    def __init__(self, state_dir: Path, *, ttl_s: float = DEFAULT_TTL_S, clock: Any = time.time) -> None:
        if ttl_s <= 0:
            raise ValueError("ttl_s must be positive")
        if not LOCKING:  # pragma: no cover - non-POSIX platforms
            raise RuntimeError("the approval queue needs flock (POSIX)")
        self._dir = Path(state_dir)
        self._path = self._dir / "approvals.json"
        self._lock_path = self._dir / "approvals.lock"
        self._inputs = self._dir / "approvals.inputs"
        self._ttl = ttl_s
        self._clock = clock

    # -- the port ------------------------------------------------------------------------

    def request(
        self,
        plan: InvocationPlan,
        *,
        summary: str,
        max_per_principal: int = MAX_PENDING_PER_PRINCIPAL,
        full_input: str | None = None,
    ) -> PendingApproval:
        """Queue ``plan`` for a person's decision, or return the live entry already queued.

        Args:
            plan: the approval-required plan.
            summary: the bounded input summary shown to a person.
            max_per_principal: live entries this plan's principal may hold.
            full_input: the whole canonical input (sensitive parameters redacted), kept
                beside the entry for ``stockade approvals show`` (at most
                :data:`MAX_INPUT_CHARS`), and removed with it.

        Raises:
            ApprovalQueueFull: the principal holds ``max_per_principal`` live entries, or
                the queue holds :data:`MAX_PENDING`.
            ApprovalInvalid: the queue is unreadable.
        """
        key = _key_of(plan)
        with self._locked() as entries:
            existing = entries.get(key)
            if existing is not None:
                return existing
            mine = sum(1 for k in entries if (k.project, k.subject) == (key.project, key.subject))
            check_pending_bounds(mine, len(entries), max_per_principal=max_per_principal)
            now = self._clock()
            preview = plan.preview
            entry = PendingApproval(
                action_digest=plan.action_digest,
                project=key.project,
                subject=key.subject,
                tool=plan.tool,
                version=plan.version,
                generation=preview.generation,
                effect=preview.effect,
                risk=preview.risk,
                hosts=preview.hosts,
                secrets=preview.secrets,
                summary=summary[:MAX_SUMMARY_CHARS],
                requested_at=now,
                expires_at=now + self._ttl,
            )
            entries[key] = entry
            if full_input is not None:
                self._inputs.mkdir(mode=0o700, exist_ok=True)
                atomic_write(self._inputs / _input_name(key), full_input[:MAX_INPUT_CHARS].encode("utf-8"))
            return entry

    def full_input(self, entry: PendingApproval) -> str | None:
        """The whole canonical input kept for ``entry``, or ``None`` when none was kept.

        Raises:
            ApprovalInvalid: the kept input is unreadable.
        """
        path = self._inputs / _input_name(_key(entry))
        if not path.exists():
            return None
        data = read_regular(path, MAX_INPUT_CHARS * 4, what="a queued input", error=ApprovalInvalid)
        return data.decode("utf-8", errors="replace")

    def entries(self) -> list[PendingApproval]:
        """Every live (unexpired) entry, oldest first.

        Raises:
            ApprovalInvalid: the queue file is unreadable or malformed.
        """
        with self._locked(write=False) as entries:
            return sorted(entries.values(), key=lambda e: (e.requested_at, e.action_digest))

    def decide(
        self,
        digest: str,
        *,
        approve: bool,
        by: str,
        project: str | None = None,
        subject: str | None = None,
    ) -> PendingApproval:
        """Approve or deny the pending entry of ``digest`` (optionally naming its principal).

        Raises:
            ApprovalInvalid: no pending, unexpired entry with that digest (and principal),
                or the queue is unreadable.
        """
        with self._locked() as entries:
            matches = [
                k
                for k, e in entries.items()
                if k.digest == digest
                and e.status == "pending"
                and (project is None or k.project == project)
                and (subject is None or k.subject == subject)
            ]
            if len(matches) != 1:
                raise ApprovalInvalid(
                    f"no pending approval with digest {digest[:64]!r}"
                    + ("" if not matches else " for exactly one principal; name --project and --subject"),
                    hint="List pending approvals with `stockade approvals list`; they expire.",
                )
            entry = entries[matches[0]].model_copy(
                update={
                    "status": "approved" if approve else "denied",
                    "decided_at": self._clock(),
                    "decided_by": by[:256],
                }
            )
            entries[matches[0]] = entry
            return entry

    def redeem(self, digest: str, *, project: str, subject: str) -> tuple[Redemption, PendingApproval | None]:
        """Consume the decision for this digest and principal, once.

        Returns:
            ``("approved", entry)`` or ``("denied", entry)`` (the entry is removed),
            ``("pending", entry)`` (nobody decided yet) or ``("absent", None)``.

        Raises:
            ApprovalInvalid: the queue is unreadable.
        """
        key = _Key(digest, project, subject)
        with self._locked() as entries:
            entry = entries.get(key)
            if entry is None:
                return "absent", None
            if entry.status == "pending":
                return "pending", entry
            del entries[key]
            return entry.status, entry

    # -- the file ------------------------------------------------------------------------

    @contextmanager
    def _locked(self, *, write: bool = True) -> Iterator[dict[_Key, PendingApproval]]:
        self._dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        with interprocess_lock(self._lock_path):
            entries, expired = self._load()
            before = dict(entries)
            yield entries
            if write and (expired or entries != before):
                self._store(entries)

    def _load(self) -> tuple[dict[_Key, PendingApproval], bool]:
        """(live entries, whether any expired entry was dropped)."""
        if not self._path.exists():
            return {}, False
        data = read_regular(self._path, MAX_FILE_BYTES, what="approvals.json", error=ApprovalInvalid)
        try:
            parsed = _File.model_validate_json(data)
        except ValidationError as exc:
            raise ApprovalInvalid(
                "the approval queue file is malformed; nothing is approved from it",
                hint=f"Inspect or remove {self._path} (pending approvals are then lost).",
            ) from exc
        now = self._clock()
        live = {_key(e): e for e in parsed.entries if e.expires_at > now}
        return live, len(live) != len(parsed.entries)

    def _store(self, entries: dict[_Key, PendingApproval]) -> None:
        body = {"format": FORMAT, "entries": [asdict_entry(e) for e in entries.values()]}
        # Compact: the C encoder (indent= forces the pure-Python one, ~40 ms for a full queue).
        atomic_write(self._path, json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8"))
        if self._inputs.is_dir():  # an input lives exactly as long as its entry
            kept = {_input_name(k) for k in entries}
            for path in self._inputs.iterdir():
                if path.name not in kept:
                    path.unlink(missing_ok=True)


def check_pending_bounds(mine: int, total: int, *, max_per_principal: int) -> None:
    """Refuse one more entry when the principal (``mine`` live entries) or the queue
    (``total``) is at its bound; shared by every queue backend.

    Raises:
        ApprovalQueueFull: the bound that was reached is named in the message and details.
    """
    if mine >= max_per_principal:
        raise ApprovalQueueFull(
            f"this principal already has {mine} pending approvals (the bound is {max_per_principal} "
            "per principal)",
            bound="per_principal",
            limit=max_per_principal,
        )
    if total >= MAX_PENDING:
        raise ApprovalQueueFull(
            f"the approval queue holds {total} pending approvals (the bound is {MAX_PENDING} in all)",
            bound="total",
            limit=MAX_PENDING,
        )


def asdict_entry(entry: PendingApproval) -> dict[str, Any]:
    """JSON form of an entry (for the file and for ``--json`` listings)."""
    return entry.model_dump(mode="json")


def _input_name(key: _Key) -> str:
    return hashlib.sha256(f"{key.digest}\0{key.project}\0{key.subject}".encode()).hexdigest() + ".json"


def _key(entry: PendingApproval) -> _Key:
    return _Key(entry.action_digest, entry.project, entry.subject)


def _key_of(plan: InvocationPlan) -> _Key:
    principal = plan.request.principal
    return _Key(plan.action_digest, principal.project, principal.subject)
