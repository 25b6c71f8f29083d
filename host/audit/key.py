"""The Ed25519 key that signs audit checkpoints (docs/design.md §12 "Audit").

Why an Ed25519 key of its own and not a key derived from the secrets master key:

- checking a checkpoint needs only the **public** key, so an auditor (or ``stockade log
  verify`` on another machine) can check a log without holding anything that could forge
  a checkpoint or decrypt a secret; an HMAC key derived from the master key would have
  to be handed to every verifier, and every verifier could then forge;
- a host may run without a master key at all (no secrets store), and the audit log is
  signed all the same.

Files in the host state directory:

- ``audit-key``: the private key, base64 of the raw 32-byte Ed25519 seed plus a newline,
  mode 0600, owned by the host's user. Created on first use with ``O_EXCL`` (never
  replaced: a new key would not verify older checkpoints), fsynced, linked into place.
- ``audit-key.pub``: the public key, base64 of the raw 32 bytes plus a newline. Copy it
  somewhere the host cannot write (the auditor's machine): an attacker who can replace
  both files on the host could re-sign a rewritten log, but not under the pinned key.

The key id is the first 16 hex characters of sha256 of the raw public key (the same
definition as package signing keys, :func:`host.signing.key_id_for`).

Example::

    key = AuditKey.load_or_create(state_dir)
    keys = load_public_keys([state_dir / PUBLIC_KEY_FILE])   # {key_id: public key}
"""

from __future__ import annotations

import base64
import binascii
import secrets as _random
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import BinaryIO, Final, final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from host._files import atomic_write, create_exclusive, open_regular, read_private
from host.errors import AuditUnavailable
from host.signing import key_id_for

__all__ = ["PRIVATE_KEY_FILE", "PUBLIC_KEY_FILE", "AuditKey", "load_public_keys", "verify_signature"]

PRIVATE_KEY_FILE: Final = "audit-key"
PUBLIC_KEY_FILE: Final = "audit-key.pub"
_MAX_KEY_TEXT: Final = 256  # bytes of a key file


@final
class AuditKey:
    """A private Ed25519 checkpoint-signing key. Build it with :meth:`load_or_create`."""

    __slots__ = ("_private", "key_id", "public_bytes")

    def __init__(self, private: Ed25519PrivateKey) -> None:
        self._private = private
        self.public_bytes: bytes = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.key_id: str = key_id_for(self.public_bytes)

    @classmethod
    def generate(cls) -> AuditKey:
        """A fresh key held only in memory (tests, throw-away hosts)."""
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def load_or_create(cls, state_dir: Path) -> AuditKey:
        """Load ``<state_dir>/audit-key``, creating it (and ``audit-key.pub``) if missing.

        Raises:
            AuditUnavailable: the key file is a symlink, not a regular file, readable by
                group or others, owned by another user, not a valid key, or cannot be
                written.
        """
        path = Path(state_dir) / PRIVATE_KEY_FILE
        try:
            seed = _decode(_read_private(path), path)
        except FileNotFoundError:
            seed = _create(path)
        key = cls(Ed25519PrivateKey.from_private_bytes(seed))
        _ensure_public(Path(state_dir) / PUBLIC_KEY_FILE, key.public_bytes)
        return key

    def sign(self, data: bytes) -> bytes:
        """The 64-byte Ed25519 signature of ``data``."""
        return self._private.sign(data)

    def __repr__(self) -> str:
        return f"AuditKey(key_id={self.key_id!r})"

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("AuditKey holds a private key and cannot be pickled")


def load_public_keys(paths: Iterable[Path]) -> dict[str, Ed25519PublicKey]:
    """Read ``audit-key.pub`` files into ``{key_id: public key}``.

    Raises:
        AuditUnavailable: a file is missing, unreadable, not a regular file or not the
            base64 of a 32-byte Ed25519 public key.
    """
    keys: dict[str, Ed25519PublicKey] = {}
    for path in paths:
        raw = _decode(_read_file(Path(path), "audit public key"), Path(path))
        try:
            keys[key_id_for(raw)] = Ed25519PublicKey.from_public_bytes(raw)
        except ValueError as exc:
            raise AuditUnavailable(f"{path} is not an Ed25519 public key") from exc
    return keys


def verify_signature(
    keys: Mapping[str, Ed25519PublicKey], key_id: str, signature: bytes, data: bytes
) -> bool:
    """True when ``signature`` over ``data`` verifies under the key ``key_id`` in ``keys``."""
    key = keys.get(key_id)
    if key is None:
        return False
    try:
        key.verify(signature, data)
    except InvalidSignature:
        return False
    return True


def _open(path: Path, what: str) -> BinaryIO:
    """Open a key file (no symlink, regular only); a missing file raises FileNotFoundError."""
    return open_regular(
        path, None, what=f"the {what}", error=AuditUnavailable, nofollow=True, raw_missing=True
    )


def _read_file(path: Path, what: str) -> bytes:
    with _open(path, what) as handle:
        return handle.read(_MAX_KEY_TEXT + 1)


def _read_private(path: Path) -> bytes:
    return read_private(path, _MAX_KEY_TEXT, what="the audit key", error=AuditUnavailable, raw_missing=True)


def _decode(text: bytes, path: Path) -> bytes:
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise AuditUnavailable(f"{path} is not the base64 of a 32-byte Ed25519 key")
    return raw


def _create(path: Path) -> bytes:
    """Write a new seed to ``path`` (0600, fsynced, linked: never replaces a file)."""
    seed = _random.token_bytes(32)
    try:
        create_exclusive(path, base64.b64encode(seed) + b"\n")
    except FileExistsError:  # another process created it first: use theirs
        return _decode(_read_private(path), path)
    except OSError as exc:
        raise AuditUnavailable(f"cannot create the audit key {path}: {exc.strerror or exc}") from None
    return seed


def _ensure_public(path: Path, public: bytes) -> None:
    """Write ``audit-key.pub`` unless it already holds exactly this key."""
    text = base64.b64encode(public) + b"\n"
    try:
        if _read_file(path, "audit public key") == text:
            return
    except (FileNotFoundError, AuditUnavailable):
        pass
    try:
        atomic_write(path, text, mode=0o644)
    except OSError as exc:
        raise AuditUnavailable(f"cannot write the audit public key {path}: {exc.strerror or exc}") from None
