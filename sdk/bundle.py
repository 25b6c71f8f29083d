"""Bundles and package signing for authors (docs/design.md §3, §4).

A bundle is a directory holding ``manifest.json`` and ``module.wasm``. Authors sign the
statement of :func:`host.trust.lock.statement_for` with an Ed25519 key; hosts list the public
key in a trusted keys file (format ``stockade.keys/1``) and verify with ``host.trust.lock``.

Example::

    private_pem, public_raw = generate_keypair()
    bundle = read_bundle(Path("dist/tracker"))
    signature, key_id = sign_package(private_pem, bundle.manifest.package.name,
                                     bundle.manifest.package.version,
                                     bundle.manifest_sha256, bundle.module_sha256)
    write_keys_file(Path("trusted-keys.json"), [public_raw])
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from host.canonical import canonical_json, sha256_hex
from host.config import DEFAULT_CEILINGS, Ceilings
from host.errors import DigestMismatch, LockInvalid
from host.files import atomic_write, create_exclusive, read_regular
from host.formats.manifest import MAX_MANIFEST_BYTES, PackageManifest
from host.trust.lock import KEYS_FORMAT, MAX_MODULE_BYTES, TrustedKeys, key_id_for, statement_for

__all__ = [
    "MIN_PASSPHRASE_CHARS",
    "Bundle",
    "KeyPassphraseRequired",
    "KeyPassphraseWrong",
    "add_trusted_key",
    "generate_keypair",
    "is_encrypted_pem",
    "load_private_key",
    "public_key_of",
    "read_bundle",
    "sign_package",
    "write_keys_file",
    "write_private_key",
]


@dataclass(frozen=True, slots=True)
class Bundle:
    """A bundle read from disk: the parsed manifest, the raw bytes and their digests."""

    directory: Path
    manifest: PackageManifest = field(repr=False)
    manifest_bytes: bytes = field(repr=False)
    module_bytes: bytes = field(repr=False)
    manifest_sha256: str
    module_sha256: str


def read_bundle(directory: Path, *, ceilings: Ceilings = DEFAULT_CEILINGS) -> Bundle:
    """Read and check a bundle directory.

    Args:
        directory: holds ``manifest.json`` and ``module.wasm``.
        ceilings: the ceilings the manifest must respect.

    Raises:
        LockInvalid: a file is missing, not regular or too large.
        ManifestInvalid: the manifest is invalid.
        DigestMismatch: ``module.sha256`` in the manifest is not the module's sha256.

    Returns:
        The bundle.
    """
    directory = Path(directory)
    manifest_path, module_path = directory / "manifest.json", directory / "module.wasm"
    manifest_bytes = read_regular(manifest_path, MAX_MANIFEST_BYTES, what="manifest.json", error=LockInvalid)
    module_bytes = read_regular(module_path, MAX_MODULE_BYTES, what="module.wasm", error=LockInvalid)
    manifest = PackageManifest.from_json(manifest_bytes, ceilings=ceilings)
    module_sha256 = sha256_hex(module_bytes)
    if manifest.module.sha256 != module_sha256:
        raise DigestMismatch(
            f"manifest pins module sha256 {manifest.module.sha256}, module.wasm has {module_sha256}",
            file="module.wasm",
        )
    return Bundle(
        directory=directory,
        manifest=manifest,
        manifest_bytes=manifest_bytes,
        module_bytes=module_bytes,
        manifest_sha256=sha256_hex(manifest_bytes),
        module_sha256=module_sha256,
    )


class KeyPassphraseRequired(ValueError):
    """The private key is passphrase-encrypted and no passphrase was given."""


class KeyPassphraseWrong(ValueError):
    """The passphrase does not decrypt the private key."""


MIN_PASSPHRASE_CHARS = 8  # a shorter passphrase is refused when a key is made


def generate_keypair(passphrase: bytes | None = None) -> tuple[bytes, bytes]:
    """Make a new Ed25519 signing key.

    Args:
        passphrase: when given, the PEM is encrypted with it (``cryptography``'s
            ``BestAvailableEncryption``: PKCS#8 ``ENCRYPTED PRIVATE KEY``, PBES2 with
            scrypt or PBKDF2 and AES-256-CBC, as the linked OpenSSL chooses).

    Raises:
        ValueError: the passphrase is shorter than :data:`MIN_PASSPHRASE_CHARS`.

    Returns:
        ``(private_pem, public_raw)``: the private key as PKCS#8 PEM, encrypted when a
        passphrase is given (store it with mode 0600), and the raw 32-byte public key
        (for the trusted keys file).
    """
    if passphrase is not None and len(passphrase) < MIN_PASSPHRASE_CHARS:
        raise ValueError(f"the passphrase must have at least {MIN_PASSPHRASE_CHARS} characters")
    private = Ed25519PrivateKey.generate()
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(passphrase)
        if passphrase is not None
        else serialization.NoEncryption()
    )
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    public = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return pem, public


def is_encrypted_pem(key: bytes) -> bool:
    """Whether ``key`` is a passphrase-encrypted PEM private key (PKCS#8 or legacy OpenSSL)."""
    return b"-----BEGIN ENCRYPTED PRIVATE KEY-----" in key or b"Proc-Type: 4,ENCRYPTED" in key


def load_private_key(key: bytes | Ed25519PrivateKey, passphrase: bytes | None = None) -> Ed25519PrivateKey:
    """Accept an Ed25519 key as an object, PKCS#8 PEM bytes (plain or encrypted) or 32 raw bytes.

    Args:
        key: the key.
        passphrase: decrypts an encrypted PEM; ignored for an unencrypted key.

    Raises:
        KeyPassphraseRequired: the PEM is encrypted and ``passphrase`` is None.
        KeyPassphraseWrong: the passphrase does not decrypt it.
        ValueError: not an Ed25519 private key.

    Returns:
        The key.
    """
    if isinstance(key, Ed25519PrivateKey):
        return key
    if len(key) == 32:
        return Ed25519PrivateKey.from_private_bytes(key)
    if is_encrypted_pem(key):
        if passphrase is None:
            raise KeyPassphraseRequired("the signing key is encrypted and no passphrase was given")
        try:
            loaded = serialization.load_pem_private_key(key, password=passphrase)
        except ValueError:
            # cryptography says "Bad decrypt. Incorrect password?"; a damaged file says the same.
            raise KeyPassphraseWrong("the passphrase does not decrypt the signing key") from None
    else:
        loaded = serialization.load_pem_private_key(key, password=None)
    if not isinstance(loaded, Ed25519PrivateKey):
        raise ValueError("the signing key must be an Ed25519 private key")
    return loaded


def sign_package(
    private_key: bytes | Ed25519PrivateKey,
    name: str,
    version: str,
    manifest_sha256: str,
    module_sha256: str,
) -> tuple[str, str]:
    """Sign a package statement (:func:`host.trust.lock.statement_for`).

    Args:
        private_key: Ed25519 key (object, PEM or 32 raw bytes).
        name: package name.
        version: exact package version.
        manifest_sha256: sha256 hex of ``manifest.json``.
        module_sha256: sha256 hex of ``module.wasm``.

    Raises:
        ValueError: the key is not an Ed25519 private key.

    Returns:
        ``(signature_b64, key_id)`` for the lock entry.
    """
    key = load_private_key(private_key)
    signature = key.sign(statement_for(name, version, manifest_sha256, module_sha256))
    public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(signature).decode("ascii"), key_id_for(public)


def write_keys_file(path: Path, public_keys: Iterable[bytes]) -> None:
    """Write a trusted keys file (format ``stockade.keys/1``) atomically.

    Args:
        path: where to write it.
        public_keys: raw 32-byte Ed25519 public keys.

    Raises:
        ValueError: a key is not 32 bytes.
    """
    keys = [
        {"key_id": key_id_for(raw), "public_key": base64.b64encode(raw).decode("ascii")}
        for raw in public_keys
    ]
    atomic_write(Path(path), canonical_json({"format": KEYS_FORMAT, "keys": keys}), mode=0o644)


def public_key_of(private_key: bytes | Ed25519PrivateKey) -> bytes:
    """The raw 32-byte public key of an Ed25519 private key (object, PEM or raw bytes).

    Raises:
        ValueError: not an Ed25519 private key (an encrypted PEM: decrypt it first).
    """
    key = load_private_key(private_key)
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def write_private_key(path: Path, pem: bytes) -> None:
    """Create ``path`` with mode 0600 holding ``pem``; never replaces an existing file.

    Raises:
        FileExistsError: something (even a dangling symlink) is already at ``path``.
        OSError: the file cannot be created or written.
    """
    create_exclusive(Path(path), pem, mode=0o600)


def add_trusted_key(path: Path, public_key: bytes) -> bool:
    """Add a public key to a trusted keys file (``stockade.keys/1``), creating it if missing.

    The existing file is validated first (a malformed file is never rewritten), then
    replaced atomically with the key appended.

    Args:
        path: the trusted keys file.
        public_key: the raw 32-byte Ed25519 public key.

    Raises:
        LockInvalid: the existing file is unreadable or invalid.
        ValueError: ``public_key`` is not 32 bytes.

    Returns:
        ``False`` if the key was already listed (the file is unchanged), else ``True``.
    """
    path = Path(path)
    key_id = key_id_for(public_key)
    keys: list[dict[str, str]] = []
    if os.path.lexists(path):
        data = read_regular(path, 1024 * 1024, what="trusted keys file", error=LockInvalid)
        if key_id in TrustedKeys.from_json(data):
            return False
        keys = list(json.loads(data)["keys"])
    keys.append({"key_id": key_id, "public_key": base64.b64encode(public_key).decode("ascii")})
    atomic_write(path, canonical_json({"format": KEYS_FORMAT, "keys": keys}), mode=0o644)
    return True
