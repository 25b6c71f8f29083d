"""Signed statements and trusted keys (docs/design.md §4, §12). Re-exported by :mod:`host.trust.lock`.

Definitions (stable; authors' tools and reviewers rely on them):

- **Signed statement**: :func:`signed_statement` — RFC 8785 canonical JSON of an object
  whose ``"statement"`` member is a *domain tag* naming what is signed, plus the signed
  fields. A signature is Ed25519 over exactly those bytes, written as canonical base64
  (standard alphabet, padded) of the 64 signature bytes. The tags (docs/design.md §12):

  - ``"stockade/package@1"`` (:func:`statement_for`): ``{"statement", "package",
    "version", "manifest_sha256", "module_sha256"}``, made by a package signer;
  - ``"stockade/lock@1"`` (:func:`lock_statement`): the whole lock body
    (``format``, ``generation``, ``previous``, ``packages``) plus ``"statement"``,
    made by an operator key;
  - ``"stockade/audit-checkpoint@1"``: audit checkpoints (:mod:`host.audit.log`, signed by
    the host's audit key);
  - ``"stockade/mcp-source@1"``: an external MCP source's pin
    (:func:`host.formats.mcppin.source_statement`);
  - ``"stockade/approval@1"``: a person's approval of one action on a shared store
    (:func:`host.approverkey.approval_statement`), made by an approver key.

  Because the tag is inside the signed bytes, a signature made for one purpose never
  verifies as another, even when one key is trusted for both.
- **Key id**: the first 16 hex characters of sha256 of the raw 32-byte public key
  (:func:`key_id_for`). The trusted keys file must state it, and it must match.
- **Trusted keys file** (format ``stockade.keys/1``)::

      {"format": "stockade.keys/1",
       "keys": [{"key_id": "<16 hex>", "public_key": "<base64 of the raw 32 bytes>"}]}

Example::

    keys = TrustedKeys.load(Path("trusted-keys.json"))
    keys.verify("tracker", "1.2.0", manifest_sha256, module_sha256,
                signature=entry.signature, key_id=entry.key_id)
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Final, Literal, final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from host._files import read_regular
from host.canonical import canonical_json, parse_json, sha256_hex
from host.errors import InputInvalid, LockInvalid, SignatureInvalid

__all__ = [
    "KEYS_FORMAT",
    "STATEMENT_APPROVAL",
    "STATEMENT_AUDIT_CHECKPOINT",
    "STATEMENT_LOCK",
    "STATEMENT_PACKAGE",
    "STATEMENT_SCOPE",
    "STATEMENT_TAGS",
    "TrustedKeys",
    "check_key_id",
    "check_signature_b64",
    "key_id_for",
    "lock_statement",
    "signed_statement",
    "statement_for",
]

KEYS_FORMAT: Final = "stockade.keys/1"
MAX_KEYS_BYTES: Final = 1024 * 1024  # bytes
MAX_KEYS: Final = 256  # trusted keys in one file

STATEMENT_PACKAGE: Final = "stockade/package@1"
STATEMENT_LOCK: Final = "stockade/lock@1"
STATEMENT_AUDIT_CHECKPOINT: Final = "stockade/audit-checkpoint@1"
STATEMENT_MCP_SOURCE: Final = "stockade/mcp-source@1"
STATEMENT_APPROVAL: Final = "stockade/approval@1"
STATEMENT_SCOPE: Final = "stockade/scope@1"
STATEMENT_TAGS: Final = frozenset(
    {
        STATEMENT_PACKAGE, STATEMENT_LOCK, STATEMENT_AUDIT_CHECKPOINT, STATEMENT_MCP_SOURCE,
        STATEMENT_APPROVAL, STATEMENT_SCOPE,
    }
)
"""Every domain tag a Stockade signature may carry (docs/design.md §12); others are refused."""


def signed_statement(tag: str, fields: Mapping[str, Any]) -> bytes:
    """The exact bytes a signature with domain tag ``tag`` covers.

    Args:
        tag: one of :data:`STATEMENT_TAGS`.
        fields: the signed fields (JSON data); may not hold ``"statement"``.

    Raises:
        ValueError: unknown tag, or ``fields`` already names a statement (caller misuse).

    Returns:
        RFC 8785 canonical JSON of ``{"statement": tag, **fields}``.
    """
    if tag not in STATEMENT_TAGS:
        raise ValueError(f"unknown statement tag {tag!r}")
    if "statement" in fields:
        raise ValueError("signed fields may not hold their own 'statement' member")
    return canonical_json({"statement": tag, **fields})


def statement_for(package: str, version: str, manifest_sha256: str, module_sha256: str) -> bytes:
    """The exact bytes a package signature covers (tag ``stockade/package@1``).

    Args:
        package: package name.
        version: exact package version.
        manifest_sha256: sha256 hex of the bundle's ``manifest.json`` bytes.
        module_sha256: sha256 hex of the bundle's ``module.wasm`` bytes.

    Returns:
        RFC 8785 canonical JSON of the tag and the four fields.
    """
    return signed_statement(
        STATEMENT_PACKAGE,
        {
            "package": package,
            "version": version,
            "manifest_sha256": manifest_sha256,
            "module_sha256": module_sha256,
        },
    )


def lock_statement(body: Mapping[str, Any]) -> bytes:
    """The exact bytes a lock signature covers (tag ``stockade/lock@1``).

    Args:
        body: the lock document without its ``signature`` member (``format``,
            ``generation``, ``previous``, ``packages``), as JSON data.

    Raises:
        ValueError: ``body`` holds a ``signature`` or ``statement`` member (caller misuse).

    Returns:
        RFC 8785 canonical JSON of the tag and the body.
    """
    if "signature" in body:
        raise ValueError("a lock signature never covers itself: pass the body without 'signature'")
    return signed_statement(STATEMENT_LOCK, body)


def key_id_for(public_key: bytes) -> str:
    """The key id of a raw Ed25519 public key: the first 16 hex characters of its sha256.

    Args:
        public_key: the raw 32-byte public key.

    Raises:
        ValueError: not 32 bytes (caller misuse).

    Returns:
        16 lowercase hex characters.
    """
    if len(public_key) != 32:
        raise ValueError("an Ed25519 public key is 32 raw bytes")
    return sha256_hex(public_key)[:16]


def _decode_b64(value: str, size: int, what: str) -> bytes:
    try:
        raw = base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise ValueError(f"{what} is not standard base64") from None
    if len(raw) != size or base64.b64encode(raw).decode("ascii") != value:
        raise ValueError(f"{what} must be canonical base64 of exactly {size} bytes")
    return raw


def check_key_id(value: str) -> str:
    """Pydantic check: ``value`` is a key id (16 lowercase hex).

    Raises:
        ValueError: it is not.
    """
    if len(value) != 16 or any(ch not in "0123456789abcdef" for ch in value):
        raise ValueError("key_id must be 16 lowercase hexadecimal characters (see key_id_for)")
    return value


def check_signature_b64(value: str) -> str:
    """Pydantic check: ``value`` is canonical base64 of a 64-byte Ed25519 signature.

    Raises:
        ValueError: it is not.
    """
    _decode_b64(value, 64, "signature")
    return value


def _check_public_key(value: str) -> str:
    _decode_b64(value, 32, "public_key")
    return value


class _KeyEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    key_id: Annotated[str, AfterValidator(check_key_id)]
    public_key: Annotated[str, AfterValidator(_check_public_key)]


class _KeysFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    format: Literal["stockade.keys/1"]
    keys: Annotated[tuple[_KeyEntry, ...], Field(max_length=MAX_KEYS)]


@final
class TrustedKeys:
    """A set of trusted Ed25519 public keys, by key id (package signers or operators).

    Args:
        keys: key id → raw 32-byte public key; every id must equal :func:`key_id_for`.

    Raises:
        LockInvalid: an id does not match its key, or a key is not a valid Ed25519 key.
    """

    __slots__ = ("_keys",)

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        table: dict[str, Ed25519PublicKey] = {}
        for key_id, raw in keys.items():
            if len(raw) != 32 or key_id_for(raw) != key_id:
                raise LockInvalid(f"trusted key {key_id[:40]!r} does not match its public key")
            try:
                table[key_id] = Ed25519PublicKey.from_public_bytes(raw)
            except ValueError as exc:
                raise LockInvalid(f"trusted key {key_id!r} is not an Ed25519 key") from exc
        self._keys: Mapping[str, Ed25519PublicKey] = MappingProxyType(table)

    @classmethod
    def from_json(cls, data: bytes) -> TrustedKeys:
        """Parse a trusted keys file (format ``stockade.keys/1``).

        Raises:
            LockInvalid: malformed file, duplicate key id, or an id not matching its key.

        Returns:
            The keys.
        """
        try:
            parse_json(data, max_bytes=MAX_KEYS_BYTES)
            parsed = _KeysFile.model_validate_json(data, strict=True)
        except (InputInvalid, ValidationError) as exc:
            raise LockInvalid(f"trusted keys file is invalid: {_first_problem(exc)}") from None
        keys: dict[str, bytes] = {}
        for entry in parsed.keys:
            if entry.key_id in keys:
                raise LockInvalid(f"trusted keys file lists key {entry.key_id} twice")
            keys[entry.key_id] = base64.b64decode(entry.public_key)
        return cls(keys)

    @classmethod
    def load(cls, path: Path) -> TrustedKeys:
        """Read and parse a trusted keys file.

        Raises:
            LockInvalid: unreadable or invalid file.

        Returns:
            The keys.
        """
        data = read_regular(
            Path(path), MAX_KEYS_BYTES, what="trusted keys file", error=LockInvalid, trusted=True
        )
        return cls.from_json(data)

    def __contains__(self, key_id: object) -> bool:
        return key_id in self._keys

    def raw_keys(self) -> dict[str, bytes]:
        """Key id → raw 32-byte public key (to extend a set: ``TrustedKeys({**a.raw_keys(), …})``)."""
        return {
            key_id: key.public_bytes(Encoding.Raw, PublicFormat.Raw) for key_id, key in self._keys.items()
        }

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"TrustedKeys({sorted(self._keys)})"

    def verify(
        self,
        package: str,
        version: str,
        manifest_sha256: str,
        module_sha256: str,
        *,
        signature: str | None,
        key_id: str | None,
    ) -> None:
        """Verify a package signature over :func:`statement_for` of the four fields.

        Raises:
            SignatureInvalid: no signature, unknown key id, or the signature does not verify.
        """
        message = statement_for(package, version, manifest_sha256, module_sha256)
        self._verify(message, signature, key_id, f"package {package}@{version}", package=package)

    def verify_lock(self, body: Mapping[str, Any], *, signature: str | None, key_id: str | None) -> None:
        """Verify an operator's lock signature over :func:`lock_statement` of ``body``.

        Raises:
            SignatureInvalid: no signature, unknown key id, or the signature does not verify.
        """
        generation = body.get("generation")
        who = f"lock generation {generation}"
        hint = (
            "Sign the lock with an operator key listed in the operator keys file "
            "(`stockade lock sign --key KEY.pem`); any edit of a signed lock needs a new signature."
        )
        self._verify(lock_statement(body), signature, key_id, who, hint=hint, lock_generation=generation)

    def _verify(
        self,
        message: bytes,
        signature: str | None,
        key_id: str | None,
        who: str,
        *,
        hint: str | None = None,
        **details: Any,
    ) -> None:
        if signature is None or key_id is None:
            raise SignatureInvalid(f"{who} is not signed", hint=hint, **details)
        key = self._keys.get(key_id)
        if key is None:
            raise SignatureInvalid(
                f"{who} is signed by key {key_id[:40]}, which is not a trusted key",
                hint=hint
                or "Check who signed it; if you trust the signer, add their key to your trusted keys "
                "file (`stockade keygen --keys-file` writes one), or sign with a key it lists.",
                key_id=key_id[:40],
                **details,
            )
        try:
            raw = _decode_b64(signature, 64, "signature")
            key.verify(raw, message)
        except (InvalidSignature, ValueError):
            raise SignatureInvalid(
                f"signature of {who} does not verify with key {key_id}", hint=hint, key_id=key_id, **details
            ) from None

    def verify_statement(self, statement: bytes, *, signature: str, key_id: str, what: str) -> None:
        """Verify a signature over ``statement`` (already domain-tagged by its caller).

        Used for MCP source pins (:func:`host.formats.mcppin.source_statement`).

        Raises:
            SignatureInvalid: unknown key id, or the signature does not verify.
        """
        key = self._keys.get(key_id)
        if key is None:
            raise SignatureInvalid(f"{what} is signed by key {key_id[:40]}, which is not a trusted key")
        try:
            key.verify(_decode_b64(signature, 64, "signature"), statement)
        except (InvalidSignature, ValueError):
            raise SignatureInvalid(f"signature of {what} does not verify with key {key_id}") from None


def _first_problem(exc: InputInvalid | ValidationError) -> str:
    if isinstance(exc, InputInvalid):
        return exc.message
    errors = exc.errors(include_url=False, include_input=False)
    if not errors:
        return "invalid"
    first = errors[0]
    return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
