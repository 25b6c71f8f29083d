"""Approver keys: approvals on a shared store are signed statements (docs/design.md §12, §13).

On the PostgreSQL store every host and approver shares one database role, so a row in
``approvals`` or ``pending_approvals`` proves nothing: whoever can write the database
could insert one, re-arm a used one or flip a status. An approval there is instead a
statement with domain tag ``stockade/approval@1`` (:func:`approval_statement`) binding
the action digest, principal (project, subject), session, expiry and a nonce, signed by
an **approver key** the database never holds:

- the approver's private key (:class:`ApproverKey`) is held by whoever approves: a host
  that approves in-band (``stockade serve`` elicitation, ``Host.approve``) or the person's
  ``stockade approvals approve``; configured as ``approver_key`` in stockade.host.toml;
  a ``stockade keygen`` PEM file (PKCS#8, unencrypted), mode 0600, owned by the user;
- every redeeming host holds the approver **public** keys (``trusted_approver_keys``, a
  ``stockade.keys/1`` file, :class:`host.signing.TrustedKeys`); a host holding a private
  approver key also trusts its own public key.

The local store keeps its per-process MAC (:class:`host.approvals.ApprovalAuthority`): its
key never leaves the process, so nothing outside can mint or re-arm an approval.

Example::

    key = ApproverKey.load(Path("approver.pem"))
    approval = sign_approval(key, fields)            # an Approval with signature and key_id
    verify_approval(trusted, approval)               # ApprovalInvalid unless it verifies
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from host._files import read_private
from host.errors import ApprovalInvalid, ConfigInvalid, SignatureInvalid
from host.formats.scope import Scope, SignedScope, scope_statement
from host.signing import STATEMENT_APPROVAL, TrustedKeys, key_id_for, signed_statement
from host.types import Approval

__all__ = [
    "ApproverKey",
    "approval_statement",
    "scope_verifies",
    "sign_approval",
    "sign_scope",
    "trusted_with",
    "verify_approval",
]

_MAX_KEY_BYTES: Final = 16 * 1024  # bytes of a PEM key file
_SIGNED_FIELDS: Final = ("action_digest", "project", "subject", "session", "expires_at", "nonce")


def approval_statement(fields: Mapping[str, Any]) -> bytes:
    """The exact bytes an approver signature covers (tag ``stockade/approval@1``).

    Args:
        fields: at least the six bound fields (action_digest, project, subject, session,
            expires_at, nonce); others are ignored.

    Returns:
        RFC 8785 canonical JSON of the tag and the six fields.
    """
    return signed_statement(STATEMENT_APPROVAL, {name: fields[name] for name in _SIGNED_FIELDS})


@final
class ApproverKey:
    """A private Ed25519 approver key. Build it with :meth:`load` or :meth:`generate`."""

    __slots__ = ("_private", "key_id", "public_bytes")

    def __init__(self, private: Ed25519PrivateKey) -> None:
        self._private = private
        self.public_bytes: bytes = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.key_id: str = key_id_for(self.public_bytes)

    @classmethod
    def generate(cls) -> ApproverKey:
        """A fresh key held only in memory (tests)."""
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def load(cls, path: Path) -> ApproverKey:
        """Read a ``stockade keygen`` PEM key file.

        Raises:
            ConfigInvalid: missing, a symlink, not a regular file, readable by group or
                others, owned by another user, or not an unencrypted Ed25519 PEM key.
        """
        path = Path(path)
        data = read_private(path, _MAX_KEY_BYTES, what="the approver key", error=ConfigInvalid)
        try:
            private = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError):
            private = None
        if not isinstance(private, Ed25519PrivateKey):
            raise ConfigInvalid(
                f"the approver key {path} is not an unencrypted Ed25519 PEM key",
                hint="Make one with `stockade keygen --out approver.pem`.",
            )
        return cls(private)

    def sign(self, data: bytes) -> str:
        """Canonical base64 of the 64-byte Ed25519 signature of ``data``."""
        return base64.b64encode(self._private.sign(data)).decode("ascii")

    def __repr__(self) -> str:
        return f"ApproverKey(key_id={self.key_id!r})"

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("ApproverKey holds a private key and cannot be pickled")


def trusted_with(keys: TrustedKeys | None, own: ApproverKey | None) -> TrustedKeys | None:
    """The approver public keys a host trusts: ``keys`` plus its own key's public half."""
    if own is None:
        return keys
    table = dict(keys.raw_keys()) if keys is not None else {}
    table[own.key_id] = own.public_bytes
    return TrustedKeys(table)


def sign_approval(key: ApproverKey, fields: Mapping[str, Any]) -> Approval:
    """An :class:`~host.types.Approval` of ``fields`` signed by ``key`` (no MAC)."""
    bound = {name: fields[name] for name in _SIGNED_FIELDS}
    return Approval(**bound, signature=key.sign(approval_statement(bound)), key_id=key.key_id)


def verify_approval(keys: TrustedKeys, approval: Approval) -> None:
    """Check an approver signature over ``approval``'s six bound fields.

    Raises:
        ApprovalInvalid: unsigned, signed by an untrusted key, or the signature does not
            verify (one opaque error; the reason is never told to the caller).
    """
    if approval.signature is None or approval.key_id is None:
        raise ApprovalInvalid("the approval is not valid for this action")
    try:
        keys.verify_statement(
            approval_statement(approval.model_dump()), signature=approval.signature,
            key_id=approval.key_id, what="approval",
        )
    except SignatureInvalid:
        raise ApprovalInvalid("the approval is not valid for this action") from None


def sign_scope(key: ApproverKey, scope: Scope) -> SignedScope:
    """``scope`` signed by ``key`` (statement ``stockade/scope@1``, :mod:`host.formats.scope`)."""
    return SignedScope(scope=scope, signature=key.sign(scope_statement(scope)), key_id=key.key_id)


def scope_verifies(keys: TrustedKeys, signed: SignedScope) -> bool:
    """Whether ``signed`` carries a valid signature by one of ``keys`` (never raises for a
    bad signature: a forged or edited scope simply covers nothing)."""
    try:
        keys.verify_statement(
            scope_statement(signed.scope), signature=signed.signature, key_id=signed.key_id, what="scope"
        )
    except SignatureInvalid:
        return False
    return True
