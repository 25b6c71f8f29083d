"""Encrypted, file-backed secrets store (docs/design.md §8 "Secrets", CONTRIBUTING.md principles 11-12).

Model
    A secret is addressed by ``(scope, principal, name)``: ``scope`` is the principal's
    *project* and ``principal`` its stable *subject*. Lookups are exact: there is no
    fallback to another principal, to a default scope or to a shared secret. Names match
    ``^[a-z][a-z0-9_]{0,63}$``. Values are strings of 8 to 65,536 UTF-8 bytes without
    control characters (they are injected into HTTP headers and query strings; a shorter
    value would make redaction erase ordinary text, see :mod:`host.secrets.redact`).

Master key
    :meth:`MasterKey.load` reads ``STOCKADE_MASTER_KEY`` if that variable is present
    (even empty: it is then refused, never skipped), otherwise the ``key_file``. Both hold
    the key as standard base64 text (RFC 4648, ``=`` padding, surrounding whitespace
    ignored), e.g. the output of ``openssl rand -base64 32`` or :func:`generate_key_file`.
    The decoded key must be 32-1024 bytes with at least 8 distinct byte values. A key file
    must be a regular file (not a symlink), owned by the current user, with no permission
    bits for group or others (0600 or 0400). Anything else, or no key at all, raises
    :class:`~host.errors.SecretsUnavailable`. There is never a default key. (The code
    lives in ``host/secrets/masterkey.py``; import it from here.)

Encryption (per value, on every ``set``)
    ``key = HKDF-SHA256(master, salt=32 random bytes, info=b"stockade/secret@1", 32 bytes)``;
    ``AES-256-GCM`` with a 12-byte random nonce; associated data is the RFC 8785 canonical
    JSON of ``["stockade/secret@1", scope, principal, name]``, so a ciphertext moved to
    another name, principal or scope fails to decrypt.

File (``format: "stockade.secrets/1"``, JSON, mode 0600)::

    {"format": "stockade.secrets/1",
     "key_check": {"salt": "<b64 32 bytes>", "mac": "<b64 32 bytes>"},
     "entries": [{"scope": "p", "principal": "alice", "name": "tracker_token",
                  "salt": "<b64>", "nonce": "<b64>", "ciphertext": "<b64>",
                  "created_at": "2025-01-01T00:00:00Z", "updated_at": "..."}]}

    ``key_check.mac`` is HKDF-SHA256(master, salt, info=b"stockade/key-check@1"): a wrong
    master key is refused by every operation, including ``list`` and ``set``, so one file
    never mixes keys. Timestamps are metadata and are not authenticated. The file is at
    most 16 MiB.

Failure is never an empty store: a corrupt file, an unknown format, a symlinked file, a
wrong master key and tampered ciphertext, nonce, salt or associated data all raise
``SecretsUnavailable``; every cryptographic failure carries the same opaque message.
A missing file is an empty store. Writes go to a temporary file in the same directory
(mode 0600), are fsynced, ``os.replace``d over the store and the directory is fsynced;
the file is always read and verified first, so a failed open never overwrites it. A
``threading.RLock`` serializes operations in-process and an ``flock`` on ``<file>.lock``
serializes writers across processes. Rolling the whole file back to an older copy is not
detected (use the state directory's permissions to prevent it).

``SecretValue`` masks itself in ``repr``/``str``/``format``, compares in constant time,
cannot be pickled and is unhashable (so it never becomes a dict key by accident).

Example::

    key = MasterKey.load(key_file=state_dir / "master.key")
    store = SecretsStore(state_dir / "secrets.json", key)
    store.set("proj", "alice", "tracker_token", "tok-123456")
    staged = store.stage("proj", "alice", ["tracker_token", "absent"])  # {"tracker_token": ...}
    staged["tracker_token"]            # SecretValue('********')
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import hashlib
import hmac
import os
import re
import secrets as _random
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Final, Literal, NoReturn, final

import rfc8785
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import AwareDatetime, BaseModel, ConfigDict, ValidationError

from host._files import atomic_write, open_lock, read_regular
from host.errors import SecretsUnavailable
from host.secrets.masterkey import (
    MASTER_KEY_ENV,
    MasterKey,
    generate_key_file,
)

__all__ = [
    "FORMAT",
    "MASTER_KEY_ENV",
    "MAX_VALUE_BYTES",
    "MIN_VALUE_CHARS",
    "MasterKey",
    "SecretInfo",
    "SecretValue",
    "SecretsStore",
    "check_secret",
    "generate_key_file",
]

FORMAT: Final = "stockade.secrets/1"
MIN_VALUE_CHARS: Final = 8  # characters of a secret value (see host.secrets.redact)
MAX_VALUE_BYTES: Final = 64 * 1024  # bytes of a secret value, UTF-8
MAX_FILE_BYTES: Final = 16 * 1024 * 1024  # bytes of the store file
MAX_IDENT_CHARS: Final = 256  # characters of a scope or principal

_SECRET_INFO: Final = b"stockade/secret@1"
_CHECK_INFO: Final = b"stockade/key-check@1"
_SALT_BYTES: Final = 32
_NONCE_BYTES: Final = 12
_NAME_RE: Final = re.compile(r"[a-z][a-z0-9_]{0,63}")
_CONTROL_RE: Final = re.compile(r"[\x00-\x1f\x7f]")
_MASK: Final = "SecretValue('********')"
_OPAQUE: Final = "the secrets store cannot be decrypted: wrong master key, or the file was tampered with"


@final
class SecretValue:
    """A secret string that never shows itself in ``repr``, ``str``, f-strings or logs.

    Args:
        value: the secret.

    Raises:
        TypeError: ``value`` is not a ``str``.
    """

    __slots__ = ("_value",)
    _value: str
    __hash__ = None  # type: ignore[assignment]  # reason: unhashable on purpose (see module doc)

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"SecretValue wraps a str, got {type(value).__name__}")
        object.__setattr__(self, "_value", value)

    def reveal(self) -> str:
        """Return the secret itself; call only where it is injected into a request."""
        return self._value

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("SecretValue is immutable")

    def __repr__(self) -> str:
        return _MASK

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return format(_MASK, spec)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SecretValue):
            return NotImplemented
        return hmac.compare_digest(self.reveal().encode("utf-8"), other.reveal().encode("utf-8"))

    def __reduce__(self) -> NoReturn:
        raise TypeError("SecretValue cannot be pickled")

    def __copy__(self) -> SecretValue:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> SecretValue:
        return self


@dataclass(frozen=True, slots=True)
class SecretInfo:
    """Metadata of one stored secret; never its value."""

    name: str
    created_at: datetime
    updated_at: datetime


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class _KeyCheck(_Model):
    salt: str
    mac: str


class _Entry(_Model):
    scope: str
    principal: str
    name: str
    salt: str
    nonce: str
    ciphertext: str
    created_at: AwareDatetime
    updated_at: AwareDatetime


class _Document(_Model):
    format: Literal["stockade.secrets/1"]
    key_check: _KeyCheck
    entries: tuple[_Entry, ...]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, size: int | None = None) -> bytes:
    """Strict base64 decode; a wrong length is a corrupt file (raises ValueError)."""
    data = base64.b64decode(text.encode("ascii"), validate=True)
    if size is not None and len(data) != size:
        raise ValueError("wrong length")
    return data


def _aad(scope: str, principal: str, name: str) -> bytes:
    encoded: bytes = rfc8785.dumps([_SECRET_INFO.decode("ascii"), scope, principal, name])
    return encoded


def _check_ident(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be str, got {type(value).__name__}")
    if not value or len(value) > MAX_IDENT_CHARS or _CONTROL_RE.search(value):
        raise ValueError(f"{what} must be 1-{MAX_IDENT_CHARS} characters without control characters")
    return value


def _check_name(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"secret name must be str, got {type(name).__name__}")
    if not _NAME_RE.fullmatch(name):
        raise ValueError(f"secret name {name!r} must match ^[a-z][a-z0-9_]{{0,63}}$")
    return name


def check_secret(name: str, value: str) -> None:
    """Check a secret's name and value against the store's rules before storing it.

    For callers that take a value from a person (``stockade dev --secret``): the refusal
    is a usage error there, not a failure halfway through.

    Raises:
        ValueError: the name or value breaks a rule (the message names the rule, never
            the value).
    """
    _check_name(name)
    _check_value(value)


def _check_value(value: object) -> str:
    text = value.reveal() if isinstance(value, SecretValue) else value
    if not isinstance(text, str):
        raise TypeError(f"secret value must be str or SecretValue, got {type(value).__name__}")
    # Messages never include the value.
    if len(text) < MIN_VALUE_CHARS:
        raise ValueError(f"secret value must be at least {MIN_VALUE_CHARS} characters")
    if len(text.encode("utf-8")) > MAX_VALUE_BYTES:
        raise ValueError(f"secret value must be at most {MAX_VALUE_BYTES} bytes (UTF-8)")
    if _CONTROL_RE.search(text):
        raise ValueError("secret value must not contain control characters (CR, LF, NUL, ...)")
    return text


@final
class SecretsStore:
    """Encrypted secrets in one JSON file, addressed by (scope, principal, name).

    Opening verifies the file (format and master key) if it exists, so a bad store
    fails here and not in the middle of a call.

    Args:
        path: the store file (created on the first ``set``; its directory with mode 0700).
        master_key: the master key (see :meth:`MasterKey.load`).

    Raises:
        SecretsUnavailable: the file exists but is corrupt, of an unknown format, a
            symlink, or was written with another master key.
        TypeError: ``master_key`` is not a :class:`MasterKey`.
    """

    __slots__ = ("_key", "_lock", "_path")

    def __init__(self, path: Path, master_key: MasterKey) -> None:
        if not isinstance(master_key, MasterKey):
            raise TypeError("SecretsStore needs a MasterKey (there is no default key)")
        self._path = Path(path)
        self._key = master_key
        self._lock = threading.RLock()
        with self._lock:
            self._read()

    def __repr__(self) -> str:
        return f"SecretsStore({str(self._path)!r})"

    @property
    def path(self) -> Path:
        """The store file."""
        return self._path

    def set(
        self,
        scope: str,
        principal: str,
        name: str,
        value: str | SecretValue,
        *,
        now: datetime | None = None,
    ) -> None:
        """Store (or replace) a secret, with a fresh salt and nonce.

        Args:
            scope: the principal's project.
            principal: the principal's stable subject.
            name: the secret name, ``^[a-z][a-z0-9_]{0,63}$``.
            value: 8 characters to 64 KiB (UTF-8), no control characters.
            now: the time recorded as ``updated_at`` (and ``created_at`` if new);
                must be timezone-aware. Defaults to the current UTC time.

        Raises:
            ValueError: a bad scope, principal, name, value or naive ``now``.
            SecretsUnavailable: the file cannot be read, verified or written.
        """
        key = (_check_ident(scope, "scope"), _check_ident(principal, "principal"), _check_name(name))
        text = _check_value(value)
        stamp = _now(now)
        salt, nonce = _random.token_bytes(_SALT_BYTES), _random.token_bytes(_NONCE_BYTES)
        cipher = AESGCM(self._key._derive(salt, _SECRET_INFO))
        sealed = cipher.encrypt(nonce, text.encode("utf-8"), _aad(*key))
        with self._writing():
            doc = self._read_or_new()
            old = {_key_of(e): e for e in doc.entries}
            created = old[key].created_at if key in old else stamp
            old[key] = _Entry(
                scope=key[0],
                principal=key[1],
                name=key[2],
                salt=_b64(salt),
                nonce=_b64(nonce),
                ciphertext=_b64(sealed),
                created_at=created,
                updated_at=stamp,
            )
            self._write(doc.model_copy(update={"entries": tuple(old[k] for k in sorted(old))}))

    def get(self, scope: str, principal: str, name: str) -> SecretValue | None:
        """Return the secret, or ``None`` if this exact (scope, principal, name) has none.

        Raises:
            ValueError: a bad scope, principal or name.
            SecretsUnavailable: the file cannot be read or the value does not decrypt.
        """
        return self.stage(scope, principal, [name]).get(name)

    def delete(self, scope: str, principal: str, name: str) -> bool:
        """Remove a secret.

        Returns:
            True if it existed (the file is rewritten), False otherwise (untouched).

        Raises:
            ValueError: a bad scope, principal or name.
            SecretsUnavailable: the file cannot be read, verified or written.
        """
        key = (_check_ident(scope, "scope"), _check_ident(principal, "principal"), _check_name(name))
        with self._writing():
            doc = self._read()
            if doc is None:
                return False
            kept = tuple(e for e in doc.entries if _key_of(e) != key)
            if len(kept) == len(doc.entries):
                return False
            self._write(doc.model_copy(update={"entries": kept}))
            return True

    def list(self, scope: str, principal: str) -> builtins.list[SecretInfo]:
        """Names and timestamps of this principal's secrets in this scope, sorted by name.

        Raises:
            ValueError: a bad scope or principal.
            SecretsUnavailable: the file cannot be read or was written with another key.
        """
        _check_ident(scope, "scope")
        _check_ident(principal, "principal")
        with self._lock:
            doc = self._read()
        entries = doc.entries if doc is not None else ()
        return [
            SecretInfo(name=e.name, created_at=e.created_at, updated_at=e.updated_at)
            for e in entries
            if e.scope == scope and e.principal == principal
        ]

    def stage(self, scope: str, principal: str, names: Iterable[str]) -> dict[str, SecretValue]:
        """Decrypt the named secrets for one call; absent names are left out.

        Args:
            scope: the principal's project.
            principal: the principal's stable subject.
            names: secret names to stage.

        Returns:
            ``{name: SecretValue}`` for the names that exist for exactly this principal.

        Raises:
            ValueError: a bad scope, principal or name.
            SecretsUnavailable: the file cannot be read, or any wanted value fails to decrypt.
        """
        _check_ident(scope, "scope")
        _check_ident(principal, "principal")
        wanted = {_check_name(n) for n in names}
        with self._lock:
            doc = self._read()
        if doc is None or not wanted:
            return {}
        staged: dict[str, SecretValue] = {}
        for entry in doc.entries:
            if entry.scope == scope and entry.principal == principal and entry.name in wanted:
                staged[entry.name] = SecretValue(self._open(entry))
        return staged

    @contextlib.contextmanager
    def exclusive(self, scope: str, principal: str, name: str) -> Iterator[None]:
        """Hold one secret exclusively, across threads and processes, for a read-modify-write.

        The OAuth refresh uses it so that one refresh token is spent once: whoever holds it
        re-reads the secret, refreshes only if it is still stale, and writes back with
        :meth:`set` before releasing. Other secrets stay readable and writable meanwhile
        (the lock is ``<file>.<sha256 of scope, principal, name>.lock``, an ``flock``).

        Raises:
            ValueError: a bad scope, principal or name.
            SecretsUnavailable: the lock file cannot be created or locked.
        """
        key = (_check_ident(scope, "scope"), _check_ident(principal, "principal"), _check_name(name))
        digest = hashlib.sha256(_aad(*key)).hexdigest()[:32]
        path = self._path.with_name(f"{self._path.name}.{digest}.lock")
        try:
            self._path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = open_lock(path, nofollow=True)
        except OSError as exc:
            raise SecretsUnavailable(f"cannot lock secret {name!r} in {self._path}") from exc
        try:
            yield
        finally:
            os.close(fd)  # closing releases the flock

    # -- internals -------------------------------------------------------------------------

    def _open(self, entry: _Entry) -> str:
        try:
            salt = _unb64(entry.salt, _SALT_BYTES)
            nonce = _unb64(entry.nonce, _NONCE_BYTES)
            sealed = _unb64(entry.ciphertext)
            cipher = AESGCM(self._key._derive(salt, _SECRET_INFO))
            plain = cipher.decrypt(nonce, sealed, _aad(entry.scope, entry.principal, entry.name))
            return plain.decode("utf-8")
        except (InvalidTag, ValueError, UnicodeError) as exc:
            raise SecretsUnavailable(_OPAQUE) from exc

    def _read(self) -> _Document | None:
        """Read and verify the file; ``None`` if it does not exist."""
        raw = self._read_bytes()
        if raw is None:
            return None
        try:
            doc = _Document.model_validate_json(raw)
        except ValidationError as exc:
            raise _format_error(self._path, raw) from exc
        self._verify(doc)
        return doc

    def _read_or_new(self) -> _Document:
        doc = self._read()
        if doc is not None:
            return doc
        salt = _random.token_bytes(_SALT_BYTES)
        check = _KeyCheck(salt=_b64(salt), mac=_b64(self._key._derive(salt, _CHECK_INFO)))
        return _Document(format=FORMAT, key_check=check, entries=())

    def _read_bytes(self) -> bytes | None:
        try:
            return read_regular(
                self._path, MAX_FILE_BYTES, what="secrets file", error=SecretsUnavailable,
                nofollow=True, raw_missing=True,
            )
        except FileNotFoundError:
            return None

    def _verify(self, doc: _Document) -> None:
        try:
            salt = _unb64(doc.key_check.salt, _SALT_BYTES)
            mac = _unb64(doc.key_check.mac, 32)
        except ValueError as exc:
            raise SecretsUnavailable(_OPAQUE) from exc
        if not hmac.compare_digest(mac, self._key._derive(salt, _CHECK_INFO)):
            raise SecretsUnavailable(_OPAQUE)
        seen: builtins.set[tuple[str, str, str]] = set()
        for entry in doc.entries:
            key = _key_of(entry)
            try:
                _check_ident(entry.scope, "scope")
                _check_ident(entry.principal, "principal")
                _check_name(entry.name)
            except ValueError as exc:
                raise _corrupt(self._path) from exc
            if key in seen:
                raise _corrupt(self._path)
            seen.add(key)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """Hold the in-process lock and an exclusive flock on ``<file>.lock``."""
        with self._lock:
            try:
                self._path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                fd = open_lock(self._path.with_name(self._path.name + ".lock"), nofollow=True)
            except OSError as exc:
                raise SecretsUnavailable(f"cannot lock secrets file {self._path}") from exc
            try:
                yield
            finally:
                os.close(fd)  # closing releases the flock

    def _write(self, doc: _Document) -> None:
        data = doc.model_dump_json(indent=1).encode("utf-8") + b"\n"
        if len(data) > MAX_FILE_BYTES:
            raise SecretsUnavailable(f"secrets file would exceed {MAX_FILE_BYTES} bytes")
        try:
            atomic_write(self._path, data)
        except OSError as exc:
            raise SecretsUnavailable(f"cannot replace secrets file {self._path}") from exc


def _key_of(entry: _Entry) -> tuple[str, str, str]:
    return (entry.scope, entry.principal, entry.name)


def _now(now: datetime | None) -> datetime:
    if now is None:
        return datetime.now(timezone.utc)
    if not isinstance(now, datetime) or now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be a timezone-aware datetime")
    return now


def _corrupt(path: Path) -> SecretsUnavailable:
    return SecretsUnavailable(
        f"secrets file {path} is corrupt (not a valid {FORMAT} file)",
        hint="Restore it from a backup; Stockade never treats a bad store as empty.",
    )


def _format_error(path: Path, raw: bytes) -> SecretsUnavailable:
    """Name an unknown format version precisely; anything else is 'corrupt'."""
    match = re.search(rb'"format"\s*:\s*"([^"\\]{1,64})"', raw[:4096])
    if match and match.group(1) != FORMAT.encode("ascii"):
        found = match.group(1).decode("ascii", "replace")
        return SecretsUnavailable(
            f"secrets file {path} has unknown format {found!r}; this host reads {FORMAT!r}",
            hint="Use the Stockade version that wrote it.",
        )
    return _corrupt(path)
