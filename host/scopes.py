"""Scopes: exact tool calls a person grants ahead of time to an unattended job.

A scope (``stockade.scope/1``, :mod:`host.formats.scope`) is signed by an approver key
(:mod:`host.approverkey`) and held by the state store, which counts its uses. This
module holds what every backend shares and the local (file) backend:

- :func:`issue` — the only way to make one: from the host app or ``stockade scopes
  grant``, never from a tool call or an MCP request. Unknown tools, and everything
  :func:`host.formats.scope.build_scope` refuses, are ``SCOPE_INVALID``.
- :func:`check_cover` — the part of a redemption that needs no count: the signature
  (against the host's trusted approver keys), the principal, the session, the exact
  (tool, version), its binding identity (a rebuilt package in a later lock generation is
  not covered) and the input digests. Time and counts are the backend's one atomic step.
- :class:`LocalScopes` — ``scopes.json`` under the state dir, changed only under an
  exclusive ``flock`` on ``scopes.lock`` and replaced atomically (fsync, rename): a
  redemption reads, checks, counts and writes in one locked step, so threads and
  processes on one state dir never count past a bound.

What a scope discharges is *ask* only (docs/design.md §6 step 4): the policy fence is
decided before it is looked at, so a deny, a disabled tool or a revoked role wins; and
the hard floor — a ``critical`` tool or a managed-cap ``ask_always`` selector — is never
discharged (:func:`host.call.prepare.prepare` marks such plans).

Refusals are :class:`~host.errors.ApprovalRequired` with ``reason`` one of
:data:`REASONS`: the call is refused at once, never queued.

Audit records: ``scope.issued``, ``scope.redeemed`` (per call: scope, tool, remaining),
``scope.exhausted`` (the call that used the last one), ``scope.expired`` (the first
refusal after the end), ``scope.revoked``. On the local store a record made by a CLI
process while a host holds the audit log is kept in the file's journal and appended by
the host at its next redemption (in order, before that redemption's record).

Example::

    signed = issue(registry=host.registry, bindings=..., generation=host.generation,
                   key=approver, store=host.store.scopes, project="p", subject="ci-bot",
                   tools=[("tracker.create-issue", "1.2.0", 5, None)], for_s=7200,
                   job="nightly", issued_by="alice")
    host.call(request, scope=signed.scope.id)
"""

from __future__ import annotations

import hmac
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from host._files import atomic_write, interprocess_lock, read_regular
from host.approverkey import ApproverKey, scope_verifies, sign_scope
from host.errors import ApprovalRequired, ApproverKeyMissing, ScopeInvalid, StoreUnavailable, ToolNotFound
from host.formats.scope import DEFAULT_CEILING_S, SignedScope, build_scope, scope_tool, tool_identity
from host.signing import TrustedKeys

if TYPE_CHECKING:
    from host.trust.registry import FrozenRegistry, ToolDefinition

__all__ = [
    "MAX_SCOPES",
    "REASONS",
    "LocalScopes",
    "Redeemed",
    "ScopePort",
    "ScopeState",
    "ScopeUse",
    "check_cover",
    "identity_of",
    "issue",
    "issued_record",
    "refusal",
    "resolve_trusted",
    "unknown_scope",
    "use_record",
]

Reason = Literal["not_in_scope", "scope_expired", "scope_exhausted", "scope_revoked"]
REASONS: Final = ("not_in_scope", "scope_expired", "scope_exhausted", "scope_revoked")
MAX_SCOPES: Final = 4096  # scopes one local state dir keeps (live or ended less than a day ago)
KEEP_ENDED_S: Final = 86_400.0  # s an ended scope stays listable
MAX_FILE_BYTES: Final = 64 * 1024 * 1024
MAX_JOURNAL: Final = 10_000  # audit records a local book holds for the next host
FILE_FORMAT: Final = "stockade.scopes/1"

TrustedSource = TrustedKeys | Callable[[], TrustedKeys | None] | None


@dataclass(frozen=True, slots=True)
class ScopeUse:
    """One call presenting a scope: who, where, which exact tool as bound now, which input."""

    scope_id: str
    project: str
    subject: str
    session: str
    tool: str
    version: str
    identity: str
    input_sha256: str
    action_digest: str


@dataclass(frozen=True, slots=True)
class Redeemed:
    """A successful redemption: the scope id and what is left (of the tool, in all)."""

    scope_id: str
    remaining: int
    remaining_total: int


@dataclass(frozen=True, slots=True)
class ScopeState:
    """A stored scope and its counters (for ``stockade scopes list | show``)."""

    signed: SignedScope
    used: Mapping[str, int] = field(default_factory=dict)
    used_total: int = 0
    revoked_at: float | None = None
    revoked_by: str | None = None

    def status(self, now: float) -> str:
        """``revoked``, ``expired``, ``exhausted`` or ``active``."""
        scope = self.signed.scope
        if self.revoked_at is not None:
            return "revoked"
        if not now < scope.not_after:
            return "expired"
        if self.used_total >= scope.max_calls_total or all(
            self.used.get(t.key, 0) >= t.max_calls for t in scope.tools
        ):
            return "exhausted"
        return "active"

    def remaining(self, tool: str, version: str) -> int:
        """Calls left for exactly (tool, version): its own bound and the total's."""
        entry = self.signed.scope.tool_entry(tool, version)
        if entry is None:
            return 0
        left = entry.max_calls - self.used.get(entry.key, 0)
        return max(0, min(left, self.signed.scope.max_calls_total - self.used_total))

    def to_dict(self, now: float) -> dict[str, Any]:
        """JSON form (``--json``)."""
        return {
            **self.signed.model_dump(mode="json"),
            "used": dict(self.used),
            "used_total": self.used_total,
            "revoked_at": self.revoked_at,
            "revoked_by": self.revoked_by,
            "status": self.status(now),
        }


class ScopePort(Protocol):
    """Scopes in a state store: add, redeem once per call (fleet-wide), revoke, list."""

    def add(self, signed: SignedScope) -> None:
        """Store a signed scope and record ``scope.issued``.

        Raises:
            ScopeInvalid: a scope with that id exists, or the store holds too many.
            StoreUnavailable, AuditUnavailable: not recorded.
        """
        ...

    def redeem(self, use: ScopeUse) -> Redeemed:
        """Check ``use`` against the scope and count it, in one atomic step with its record.

        Raises:
            ApprovalRequired: ``reason`` not_in_scope | scope_expired | scope_exhausted |
                scope_revoked; nothing was counted.
            ApproverKeyMissing: this host trusts no approver key.
            StoreUnavailable, AuditUnavailable: the store could not decide (fail closed).
        """
        ...

    def revoke(self, scope_id: str, *, by: str) -> ScopeState:
        """Revoke a scope for every process from the next call on; record ``scope.revoked``.

        Raises:
            ScopeInvalid: no such scope.
        """
        ...

    def get(self, scope_id: str) -> ScopeState:
        """One scope and its counters.

        Raises:
            ScopeInvalid: no such scope.
        """
        ...

    def entries(self) -> list[ScopeState]:
        """Every stored scope, oldest first."""
        ...


def refusal(reason: Reason, scope_id: str, tool: str, **details: object) -> ApprovalRequired:
    """The one refusal of an unattended call a scope does not cover (never queued)."""
    words = {
        "not_in_scope": "is not covered by scope",
        "scope_expired": "is not covered: the scope ended",
        "scope_exhausted": "is not covered: the scope has no calls left for it",
        "scope_revoked": "is not covered: the scope was revoked",
    }[reason]
    return ApprovalRequired(
        f"{tool} needs a person's approval and {words} {scope_id[:40]}; an unattended call is refused",
        hint="A person grants a scope covering this exact tool with `stockade scopes grant`; "
        "see `stockade scopes show ID` for what it covers and what is left.",
        reason=reason,
        scope=scope_id[:40],
        **details,
    )


def identity_of(tool: ToolDefinition, binding: str | None) -> str:
    """The binding identity a scope records for ``tool`` (:func:`host.formats.scope.tool_identity`)."""
    b = tool.binding
    return tool_identity(
        tool=tool.name,
        version=tool.version,
        package=b.package,
        package_version=b.version,
        manifest_sha256=b.manifest_sha256,
        module_sha256=b.module_sha256,
        binding=binding,
    )


def resolve_trusted(source: TrustedSource) -> TrustedKeys:
    """The trusted approver keys of a redeeming host.

    Raises:
        ApproverKeyMissing: none configured (a scope is never redeemed unsigned).
    """
    keys = source() if callable(source) else source
    if keys is None or len(keys) == 0:
        raise ApproverKeyMissing(
            "a scope is signed by an approver key, and this host trusts none: it cannot redeem one",
            hint="Set `trusted_approver_keys` (or `approver_key`) in the [host] table of stockade.host.toml.",
        )
    return keys


def check_cover(signed: SignedScope, use: ScopeUse, trusted: TrustedKeys) -> Reason | None:
    """What stops ``signed`` from covering ``use`` apart from time and counts (``None``:
    nothing). A forged or edited scope, another principal or session, another tool or
    version, a changed binding or an input it does not name are all ``not_in_scope``."""
    scope = signed.scope
    ok = scope.id == use.scope_id
    ok &= scope_verifies(trusted, signed)
    ok &= (scope.principal.project, scope.principal.subject) == (use.project, use.subject)
    ok &= scope.session is None or scope.session == use.session
    entry = scope.tool_entry(use.tool, use.version)
    ok &= entry is not None and hmac.compare_digest(entry.identity, use.identity)
    ok &= entry is not None and (entry.inputs is None or use.input_sha256 in entry.inputs)
    return None if ok else "not_in_scope"


def issue(
    *,
    registry: FrozenRegistry,
    bindings: Mapping[tuple[str, str], str] | None,
    generation: int,
    key: ApproverKey | None,
    store: ScopePort,
    project: str,
    subject: str,
    tools: Sequence[tuple[str, str, int, Sequence[str] | None]],
    job: str,
    issued_by: str,
    for_s: float | None = None,
    not_after: float | None = None,
    session: str | None = None,
    max_calls_total: int | None = None,
    ceiling_s: float = DEFAULT_CEILING_S,
    now: float | None = None,
) -> SignedScope:
    """Issue, sign and store a scope (what a person grants; never a tool call).

    Args:
        registry: the tools of the lock the scope is issued under.
        bindings: ``(tool, version)`` → policy binding digest of that lock (``None``: the
            package binding of each definition, unsigned).
        generation: that lock's generation.
        key: the approver private key that signs it.
        store: where it is kept (``store.scopes`` of a state store, or a :class:`LocalScopes`).
        tools: ``(tool, version, max_calls, input digests or None)`` per covered tool.

    Raises:
        ScopeInvalid: an unknown tool, or anything :func:`~host.formats.scope.build_scope`
            refuses (each named).
        ApproverKeyMissing: no approver key to sign with.
        StoreUnavailable, AuditUnavailable: not stored.
    """
    from host.policy.bindings import package_binding  # noqa: PLC0415 - one lookup per issue

    if key is None:
        raise ApproverKeyMissing(
            "a scope is signed by an approver key, and none is configured here",
            hint="Set `approver_key` in the [host] table of stockade.host.toml (a `stockade keygen` key).",
        )
    entries = []
    for name, version, max_calls, inputs in tools:
        try:
            definition = registry.get(name, version)
        except ToolNotFound:
            raise ScopeInvalid(
                f"no tool {name[:64]}@{version[:64]} in lock generation {generation}: "
                "a scope names exact tools",
                hint="List the tools with `stockade tools`.",
                field="tools",
                tool=name[:64],
            ) from None
        binding = (
            package_binding(definition, key_id=None) if bindings is None else bindings.get(definition.key)
        )
        entries.append(
            scope_tool(
                name, version, identity=identity_of(definition, binding), max_calls=max_calls, inputs=inputs
            )
        )
    scope = build_scope(
        project=project,
        subject=subject,
        job=job,
        issued_by=issued_by,
        tools=entries,
        for_s=for_s,
        not_after=not_after,
        lock_generation=generation,
        session=session,
        max_calls_total=max_calls_total,
        now=now,
        ceiling_s=ceiling_s,
    )
    signed = sign_scope(key, scope)
    store.add(signed)
    return signed


def issued_record(signed: SignedScope) -> dict[str, Any]:
    """The payload of ``scope.issued``: who issued it, for whom, and every bound."""
    scope = signed.scope
    return {
        "scope": scope.id,
        "project": scope.principal.project,
        "subject": scope.principal.subject,
        "session": scope.session,
        "job": scope.job,
        "issued_by": scope.issued_by,
        "not_after": scope.not_after,
        "lock_generation": scope.lock_generation,
        "max_calls_total": scope.max_calls_total,
        "key_id": signed.key_id,
        "tools": [
            {
                "tool": t.tool,
                "version": t.version,
                "max_calls": t.max_calls,
                "inputs": None if t.inputs is None else len(t.inputs),
            }
            for t in scope.tools
        ],
    }


def use_record(signed: SignedScope, use: ScopeUse, **extra: object) -> dict[str, Any]:
    """The payload of ``scope.redeemed`` / ``scope.exhausted`` / ``scope.expired``."""
    scope = signed.scope
    return {
        "scope": scope.id,
        "project": use.project,
        "subject": use.subject,
        "session": use.session,
        "job": scope.job,
        "tool": use.tool,
        "version": use.version,
        "action_digest": use.action_digest,
        **extra,
    }


# -- the local backend -----------------------------------------------------------------------


class _Entry(BaseModel):
    # defer_build: validators are built on first use, not at import (CLI start-up time):
    # scope files are read only when a scope is presented or listed.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)

    signed: SignedScope
    used: dict[str, int] = Field(default_factory=dict)
    used_total: int = 0
    revoked_at: float | None = None
    revoked_by: str | None = None
    expired_recorded: bool = False


class _Journaled(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)

    kind: str
    payload: dict[str, Any]


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)

    format: Literal["stockade.scopes/1"]
    scopes: tuple[_Entry, ...]
    journal: tuple[_Journaled, ...] = ()


class _Book:
    """The mutable contents of ``scopes.json`` inside one locked step."""

    def __init__(self, entries: dict[str, _Entry], journal: list[_Journaled]) -> None:
        self.entries = entries
        self.journal = journal


class _Sink(Protocol):
    def append(self, kind: str, payload: Mapping[str, object], *, durable: bool | None = None) -> str: ...


class LocalScopes:
    """The scopes of one state directory (module docstring).

    Args:
        state_dir: the host's state directory.
        audit: the audit sink records go to; ``None`` (a CLI process while a host holds the
            audit log): records are journaled in the file for the next redeeming host.
        trusted: the approver public keys redemptions verify against (or a loader of them,
            called at the first redemption).
        clock: the time source (injected in tests).
    """

    def __init__(
        self,
        state_dir: Path,
        *,
        audit: _Sink | None,
        trusted: TrustedSource = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._dir = Path(state_dir)
        self._path = self._dir / "scopes.json"
        self._lock_path = self._dir / "scopes.lock"
        self._audit = audit
        self._trusted_source = trusted
        self._trusted: TrustedKeys | None = None
        self._trusted_guard = threading.Lock()
        self._clock = clock

    def _keys(self) -> TrustedKeys:
        with self._trusted_guard:
            if self._trusted is None:
                self._trusted = resolve_trusted(self._trusted_source)
            return self._trusted

    def add(self, signed: SignedScope) -> None:
        """See :meth:`ScopePort.add`."""
        with self._locked() as book:
            if signed.scope.id in book.entries:
                raise ScopeInvalid(f"a scope with id {signed.scope.id} exists")
            if len(book.entries) >= MAX_SCOPES:
                raise ScopeInvalid(
                    f"this state dir holds {MAX_SCOPES} scopes; revoke or let some end first",
                    limit=MAX_SCOPES,
                )
            book.entries[signed.scope.id] = _Entry(signed=signed)
            self._record(book, "scope.issued", issued_record(signed))

    def redeem(self, use: ScopeUse) -> Redeemed:
        """See :meth:`ScopePort.redeem` (one locked step: check, count, write, record)."""
        keys = self._keys()
        with self._locked() as book:
            outcome = self._redeem_in(book, use, keys)
        if isinstance(outcome, ApprovalRequired):
            raise outcome
        return outcome

    def _redeem_in(self, book: _Book, use: ScopeUse, keys: TrustedKeys) -> Redeemed | ApprovalRequired:
        entry = book.entries.get(use.scope_id)
        if entry is None or check_cover(entry.signed, use, keys) is not None:
            return refusal("not_in_scope", use.scope_id, use.tool)
        scope = entry.signed.scope
        tool = scope.tool_entry(use.tool, use.version)
        assert tool is not None, "check_cover found it"
        if entry.revoked_at is not None:
            return refusal("scope_revoked", scope.id, use.tool)
        if not self._clock() < scope.not_after:
            if not entry.expired_recorded:  # the first refusal after the end is recorded
                book.entries[scope.id] = entry.model_copy(update={"expired_recorded": True})
                self._record(book, "scope.expired", use_record(entry.signed, use))
            return refusal("scope_expired", scope.id, use.tool)
        used = entry.used.get(tool.key, 0)
        if used >= tool.max_calls or entry.used_total >= scope.max_calls_total:
            return refusal("scope_exhausted", scope.id, use.tool)
        counts = {**entry.used, tool.key: used + 1}
        book.entries[scope.id] = entry.model_copy(update={"used": counts, "used_total": entry.used_total + 1})
        total_left = scope.max_calls_total - entry.used_total - 1
        left = Redeemed(scope.id, min(tool.max_calls - used - 1, total_left), total_left)
        self._record(
            book,
            "scope.redeemed",
            use_record(entry.signed, use, remaining=left.remaining, remaining_total=left.remaining_total),
        )
        if left.remaining == 0:
            self._record(
                book,
                "scope.exhausted",
                use_record(entry.signed, use, remaining=0, remaining_total=left.remaining_total),
            )
        return left

    def revoke(self, scope_id: str, *, by: str) -> ScopeState:
        """See :meth:`ScopePort.revoke`."""
        with self._locked() as book:
            entry = book.entries.get(scope_id)
            if entry is None:
                raise unknown_scope(scope_id)
            if entry.revoked_at is None:
                entry = entry.model_copy(update={"revoked_at": self._clock(), "revoked_by": by[:256]})
                book.entries[scope_id] = entry
                scope = entry.signed.scope
                self._record(
                    book,
                    "scope.revoked",
                    {
                        "scope": scope.id,
                        "project": scope.principal.project,
                        "subject": scope.principal.subject,
                        "job": scope.job,
                        "revoked_by": by[:256],
                        "used_total": entry.used_total,
                    },
                )
            return _state(entry)

    def get(self, scope_id: str) -> ScopeState:
        """See :meth:`ScopePort.get`."""
        with self._locked(write=False) as book:
            entry = book.entries.get(scope_id)
            if entry is None:
                raise unknown_scope(scope_id)
            return _state(entry)

    def entries(self) -> list[ScopeState]:
        """See :meth:`ScopePort.entries`."""
        with self._locked(write=False) as book:
            return sorted((_state(e) for e in book.entries.values()), key=lambda s: s.signed.scope.issued_at)

    # -- the file ------------------------------------------------------------------------

    def _record(self, book: _Book, kind: str, payload: dict[str, Any]) -> None:
        if len(book.journal) >= MAX_JOURNAL:
            raise StoreUnavailable("the scope journal is full; start a host on this state dir to record it")
        book.journal.append(_Journaled(kind=kind, payload=payload))

    @contextmanager
    def _locked(self, *, write: bool = True) -> Iterator[_Book]:
        self._dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        with interprocess_lock(self._lock_path):
            book = self._load()
            before = (dict(book.entries), list(book.journal))
            yield book
            if not write:
                return
            # Counted and written (fsync) before the records are appended: if the audit
            # sink fails, the use stays counted and the call is refused (the safe side).
            flushed = self._audit is not None and bool(book.journal)
            if (dict(book.entries), list(book.journal)) != before or flushed:
                pending = list(book.journal)
                self._store(book.entries, [] if self._audit is not None else pending)
                if self._audit is not None:
                    self._flush(book.entries, pending)

    def _flush(self, entries: Mapping[str, _Entry], pending: list[_Journaled]) -> None:
        """Append ``pending`` to the audit sink in order; if the sink fails, keep what was
        not appended in the journal (best effort) and re-raise: nothing is lost silently."""
        assert self._audit is not None
        for done, item in enumerate(pending):
            try:
                self._audit.append(item.kind, item.payload)
            except BaseException:
                try:
                    self._store(entries, pending[done:])
                except OSError:  # pragma: no cover - the disk failed as well
                    pass
                raise

    def _load(self) -> _Book:
        if not self._path.exists():
            return _Book({}, [])
        data = read_regular(self._path, MAX_FILE_BYTES, what="scopes.json", error=StoreUnavailable)
        try:
            parsed = _File.model_validate_json(data)
        except ValidationError:
            raise StoreUnavailable(
                "the scope file is malformed; no scope is redeemed from it",
                hint=f"Inspect {self._path}; scopes are granted again with `stockade scopes grant`.",
            ) from None
        now = self._clock()
        live = {e.signed.scope.id: e for e in parsed.scopes if e.signed.scope.not_after + KEEP_ENDED_S > now}
        return _Book(live, list(parsed.journal))

    def _store(self, entries: Mapping[str, _Entry], journal: list[_Journaled]) -> None:
        body = {
            "format": FILE_FORMAT,
            "scopes": [e.model_dump(mode="json") for e in entries.values()],
            "journal": [j.model_dump(mode="json") for j in journal],
        }
        atomic_write(self._path, json.dumps(body, sort_keys=True).encode("utf-8"))


def _state(entry: _Entry) -> ScopeState:
    return ScopeState(entry.signed, dict(entry.used), entry.used_total, entry.revoked_at, entry.revoked_by)


def unknown_scope(scope_id: str) -> ScopeInvalid:
    """The refusal of an id no scope has."""
    return ScopeInvalid(
        f"no scope {scope_id[:40]!r} in this store", hint="List scopes with `stockade scopes list`."
    )
