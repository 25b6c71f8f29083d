"""The accepted lock state of a host: trust only moves forward (docs/design.md §4, §12).

CONTRIBUTING.md principle 8: verified first, persisted afterwards, never backwards.

Re-exported by :mod:`host.trust.lock`. :class:`LockState` moves the accepted state of a host
forward only, after :func:`host.trust.lock.load_lock` verified a lock. Each of these raises
LOCK_ROLLBACK (``details["reason"]``) and leaves the state file untouched:

- ``rollback``: a lower generation than the accepted one;
- ``fork``: the same generation with another digest, or the next generation whose
  ``previous`` is not the accepted digest;
- ``jump``: more than :data:`MAX_GENERATION_STEP` (16) generations ahead of the accepted
  one, so a lock numbered 2^53-1 cannot make every later lock look like a rollback;
- ``downgrade``: a package at a lower SemVer precedence than the highest version of that
  package ever accepted here (kept after the package is removed, so removing and
  re-adding an old version is a downgrade too). An equal precedence is not a downgrade.

``unsafe_accept_rollback=True`` overrides all four, logs a warning, and is recorded in
the state file's ``overrides`` list (and, by ``Host.open``, in the audit log); an
overridden downgrade lowers that package's recorded version. Limits of what a host can
know: the first lock a state directory sees is trusted on first use, and a step of 2 to
16 generations cannot be checked for chaining (the generations in between were never
seen). The state file ``state_dir/lock-state.json`` (format ``stockade.lock-state/2``)
holds ``generation``, ``digest``, ``history`` (last 1000 accepted), ``overrides`` and
``packages`` (name → ``{"version", "generation"}``: the highest version accepted and the
generation that first brought it). A ``stockade.lock-state/1`` file is read as having no
package versions yet (they are recorded on the next accept). The file is replaced
atomically, and a corrupt one fails closed (LOCK_INVALID), never counts as empty.

Example::

    loaded = load_lock(Path("stockade.lock"), config=config, trusted_keys=None)
    overridden = LockState(config.state_dir).accept(loaded)   # () unless overridden
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Final, Literal, Protocol, final

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from host._files import atomic_write, interprocess_lock, read_regular
from host.canonical import canonical_json, parse_json
from host.errors import InputInvalid, LockInvalid, LockRollback
from host.formats.manifest import is_name, is_semver

__all__ = [
    "MAX_GENERATION_STEP",
    "STATE_FORMAT",
    "AcceptedState",
    "LockState",
    "OfferedLock",
    "semver_precedence",
]

STATE_FORMAT: Final = "stockade.lock-state/2"
STATE_FILE: Final = "lock-state.json"
MAX_STATE_BYTES: Final = 4 * 1024 * 1024  # bytes; history is capped below
MAX_HISTORY: Final = 1000  # accepted generations remembered in the state file
MAX_GENERATION_STEP: Final = 16  # generations a lock may be ahead of the accepted one

_log = logging.getLogger("stockade.lock")


class _OfferedEntry(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def version(self) -> str: ...


class _OfferedDocument(Protocol):
    @property
    def packages(self) -> Sequence[_OfferedEntry]: ...


class OfferedLock(Protocol):
    """What the forward-only rules read of a verified lock (:class:`host.trust.lock.LoadedLock`).

    Named by what it uses, so this module does not import the lock module, which builds
    on it.
    """

    @property
    def digest(self) -> str:
        """The lock file's digest."""
        ...

    @property
    def generation(self) -> int:
        """The lock's generation."""
        ...

    @property
    def previous(self) -> str | None:
        """The previous generation's digest (``None`` for generation 1)."""
        ...

    @property
    def lock(self) -> _OfferedDocument:
        """The lock document (its package entries' names and versions)."""
        ...


def _check_sha256(value: str) -> str:
    if len(value) != 64 or any(ch not in "0123456789abcdef" for ch in value):
        raise ValueError("must be 64 lowercase hexadecimal characters (sha256)")
    return value


def _check_name(value: str) -> str:
    if not is_name(value):
        raise ValueError(f"{value[:80]!r} is not a package name")
    return value


def _check_version(value: str) -> str:
    if not is_semver(value):
        raise ValueError(f"{value[:80]!r} is not a canonical SemVer version")
    return value


Sha256Hex = Annotated[str, AfterValidator(_check_sha256)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _read(path: Path, limit: int, what: str) -> bytes:
    return read_regular(path, limit, what=what, error=LockInvalid)


_Precedence = tuple[tuple[int, int, int], tuple[int, tuple[tuple[int, int, str], ...]]]


def semver_precedence(version: str) -> _Precedence:
    """A sort key giving SemVer 2.0.0 precedence (semver.org §11) of a canonical version.

    Build metadata is ignored; a pre-release sorts below its release; pre-release
    identifiers compare numerically when numeric, below alphanumeric ones, which compare
    by ASCII; a shorter identifier list sorts first when it is a prefix of a longer one.

    Args:
        version: a canonical SemVer version (see :func:`host.formats.manifest.is_semver`).

    Raises:
        ValueError: ``version`` is not canonical SemVer (caller misuse).

    Returns:
        A key; ``semver_precedence(a) < semver_precedence(b)`` iff ``a`` precedes ``b``.
    """
    if not is_semver(version):
        raise ValueError(f"{version[:80]!r} is not a canonical SemVer version")
    core, _, pre = version.split("+", 1)[0].partition("-")
    major, minor, patch = (int(part) for part in core.split("."))
    if not pre:
        return (major, minor, patch), (1, ())
    ids = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split("."))
    return (major, minor, patch), (0, ids)


_Reason = Literal["rollback", "fork", "jump", "downgrade"]


class _HistoryItem(_Model):
    generation: Annotated[int, Field(ge=1)]
    digest: Sha256Hex
    accepted_at: str


class _Override(_Model):
    at: str
    reason: _Reason
    old_generation: Annotated[int, Field(ge=1)]
    old_digest: Sha256Hex
    new_generation: Annotated[int, Field(ge=1)]
    new_digest: Sha256Hex
    package: str | None = None  # set for a downgrade
    old_version: str | None = None
    new_version: str | None = None


class _PackageMark(_Model):
    version: Annotated[str, AfterValidator(_check_version)]
    generation: Annotated[int, Field(ge=1)]


class AcceptedState(_Model):
    """The state file: the accepted generation and digest, history, overrides, and the
    highest accepted version of every package ever accepted (``packages``)."""

    format: Literal["stockade.lock-state/1", "stockade.lock-state/2"]
    generation: Annotated[int, Field(ge=1)]
    digest: Sha256Hex
    history: tuple[_HistoryItem, ...]
    overrides: tuple[_Override, ...] = ()
    packages: dict[Annotated[str, AfterValidator(_check_name)], _PackageMark] = Field(default_factory=dict)


@final
@dataclass(frozen=True, slots=True)
class _Finding:
    """One reason the accepted state refuses a lock."""

    reason: _Reason
    detail: str
    package: str | None = None
    old_version: str | None = None
    new_version: str | None = None


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


def _generation_finding(current: AcceptedState, lock: OfferedLock) -> _Finding | None:
    offered, accepted = lock.generation, current.generation
    if offered < accepted:
        return _Finding("rollback", f"generation {offered} is older than accepted {accepted}")
    if offered == accepted and lock.digest != current.digest:
        return _Finding("fork", f"generation {offered} differs from the accepted lock of that generation")
    if offered == accepted + 1 and lock.previous != current.digest:
        return _Finding("fork", f"generation {offered} does not chain to accepted generation {accepted}")
    if offered > accepted + MAX_GENERATION_STEP:
        return _Finding(
            "jump",
            f"generation {offered} is {offered - accepted} ahead of accepted {accepted}; "
            f"at most {MAX_GENERATION_STEP} is allowed",
        )
    return None


def _package_findings(current: AcceptedState, lock: OfferedLock) -> list[_Finding]:
    findings = []
    for entry in lock.lock.packages:
        mark = current.packages.get(entry.name)
        if mark is not None and semver_precedence(entry.version) < semver_precedence(mark.version):
            findings.append(_Finding(
                "downgrade",
                f"package {entry.name} {entry.version} is older than {mark.version}, accepted "
                f"since generation {mark.generation}",
                package=entry.name, old_version=mark.version, new_version=entry.version,
            ))
    return findings


@final
class LockState:
    """The accepted lock state of one host, kept in ``state_dir/lock-state.json``.

    Args:
        state_dir: the host's state directory (created with mode 0700 if missing).
        now: clock for timestamps in the state file (injectable for tests).
    """

    __slots__ = ("_now", "_path", "_state_dir")

    def __init__(self, state_dir: Path, *, now: Callable[[], datetime] = _utc_now) -> None:
        self._state_dir = Path(state_dir)
        self._path = self._state_dir / STATE_FILE
        self._now = now

    @property
    def path(self) -> Path:
        """The state file."""
        return self._path

    def current(self) -> AcceptedState | None:
        """The accepted state, or ``None`` if no lock was ever accepted here.

        Raises:
            LockInvalid: the state file exists but is unreadable or corrupt (fail closed:
                a corrupt state is never treated as empty).
        """
        try:
            data = _read(self._path, MAX_STATE_BYTES, "lock state file")
        except LockInvalid:
            if not os.path.lexists(self._path):
                return None
            raise
        try:
            parse_json(data, max_bytes=MAX_STATE_BYTES)
            return AcceptedState.model_validate_json(data, strict=True)
        except (InputInvalid, ValidationError):
            raise LockInvalid(
                f"lock state file {str(self._path)!r} is corrupt; refusing to guess the accepted generation",
                hint="Restore the state file from a backup; deleting it re-trusts any lock on first use.",
            ) from None

    def check(self, lock: OfferedLock, *, unsafe_accept_rollback: bool = False) -> tuple[str, ...]:
        """Raise if :meth:`accept` would refuse ``lock``; never writes.

        Raises:
            LockRollback: rollback, fork, jump or package downgrade (module docstring).
            LockInvalid: the state file is corrupt.

        Returns:
            The reasons ``unsafe_accept_rollback`` would override (empty when none).
        """
        findings = self._judge(self.current(), lock, unsafe_accept_rollback=unsafe_accept_rollback)
        return tuple(f.reason for f in findings)

    def accept(self, lock: OfferedLock, *, unsafe_accept_rollback: bool = False) -> tuple[str, ...]:
        """Accept a verified lock and persist the new state atomically.

        Args:
            lock: a lock returned by :func:`load_lock` (fully verified).
            unsafe_accept_rollback: accept a rollback, fork, jump or package downgrade
                anyway. Logs a warning and is recorded in the state file's
                ``overrides``. Operators only.

        Raises:
            LockRollback: ``details["reason"]`` is ``rollback`` (lower generation),
                ``fork`` (same generation, other digest; or the next one not chaining to
                the accepted digest), ``jump`` (more than :data:`MAX_GENERATION_STEP`
                ahead) or ``downgrade`` (a package below its highest accepted version).
                The state file is left untouched.
            LockInvalid: the state file is corrupt or cannot be written.

        Returns:
            The reasons that were overridden (empty unless ``unsafe_accept_rollback``
            was needed), for the caller's audit record.
        """
        self._state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        with self._exclusive():
            current = self.current()
            findings = self._judge(current, lock, unsafe_accept_rollback=unsafe_accept_rollback)
            if current is not None and not findings and self._already_recorded(current, lock):
                return ()  # the same lock again: nothing to record
            self._write(self._next_state(current, lock, findings))
            return tuple(f.reason for f in findings)

    @staticmethod
    def _already_recorded(current: AcceptedState, lock: OfferedLock) -> bool:
        return (
            current.format == STATE_FORMAT
            and current.digest == lock.digest
            and all(e.name in current.packages for e in lock.lock.packages)
        )

    def _judge(
        self, current: AcceptedState | None, lock: OfferedLock, *, unsafe_accept_rollback: bool
    ) -> list[_Finding]:
        """Return what ``unsafe_accept_rollback`` overrides (empty when acceptable), or raise."""
        if current is None:
            return []  # first use: nothing to compare against
        generation = _generation_finding(current, lock)
        findings = ([generation] if generation else []) + _package_findings(current, lock)
        if not findings:
            return []
        if not unsafe_accept_rollback:
            first = findings[0]
            raise LockRollback(
                f"lock {first.reason} refused: {first.detail}",
                hint=_HINTS[first.reason],
                reason=first.reason,
                reasons=[f.reason for f in findings],
                accepted_generation=current.generation,
                accepted_digest=current.digest,
                offered_generation=lock.generation,
                offered_digest=lock.digest,
                **({"package": first.package, "accepted_version": first.old_version,
                    "offered_version": first.new_version} if first.package else {}),
            )
        for finding in findings:
            _log.warning(
                "unsafe_accept_rollback: accepting lock %s (generation %d, %s) over accepted "
                "generation %d (%s): %s; this is recorded in %s",
                finding.reason, lock.generation, lock.digest, current.generation, current.digest,
                finding.detail, self._path,
            )
        return findings

    def _next_state(
        self, current: AcceptedState | None, lock: OfferedLock, findings: list[_Finding]
    ) -> AcceptedState:
        at = self._now().astimezone(timezone.utc).isoformat()
        history = (*(current.history if current else ()), _HistoryItem(
            generation=lock.generation, digest=lock.digest, accepted_at=at
        ))[-MAX_HISTORY:]
        overrides = current.overrides if current else ()
        if current is not None:
            overrides = (*overrides, *(
                _Override(
                    at=at, reason=f.reason,
                    old_generation=current.generation, old_digest=current.digest,
                    new_generation=lock.generation, new_digest=lock.digest,
                    package=f.package, old_version=f.old_version, new_version=f.new_version,
                )
                for f in findings
            ))
        return AcceptedState(
            format=STATE_FORMAT, generation=lock.generation, digest=lock.digest,
            history=history, overrides=overrides, packages=_next_marks(current, lock),
        )

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """Serialize accept() between processes sharing the state directory."""
        with interprocess_lock(self._state_dir / ".lock-state.lock"):
            yield

    def _write(self, state: AcceptedState) -> None:
        try:
            atomic_write(self._path, canonical_json(state.model_dump(mode="json", exclude_none=True)))
        except OSError as exc:
            raise LockInvalid(f"cannot write the lock state file: {exc.strerror}") from exc


_HINTS: Final[dict[str, str]] = {
    "rollback": "Use a lock with a higher generation; an operator may override with "
    "unsafe_accept_rollback, which is audited.",
    "fork": "Rebuild the lock from the accepted one (`stockade lock add` chains it); an "
    "operator may override with unsafe_accept_rollback, which is audited.",
    "jump": f"A lock may be at most {MAX_GENERATION_STEP} generations ahead of the accepted "
    "one; an operator may override with unsafe_accept_rollback, which is audited.",
    "downgrade": "Lock the package at its accepted version or a newer one; an operator may "
    "override with unsafe_accept_rollback, which is audited.",
}


def _next_marks(current: AcceptedState | None, lock: OfferedLock) -> dict[str, _PackageMark]:
    """Raise each locked package's mark to its version; an (overridden) downgrade lowers it.

    Packages not in this lock keep their marks, so re-adding an old version later is a
    downgrade too.
    """
    marks = dict(current.packages) if current is not None else {}
    for entry in lock.lock.packages:
        mark = marks.get(entry.name)
        if mark is None or semver_precedence(entry.version) != semver_precedence(mark.version):
            marks[entry.name] = _PackageMark(version=entry.version, generation=lock.generation)
    return marks
