"""One fixed approver key for the PostgreSQL store tests (test processes and fleet
workers share it, as hosts of one fleet share trusted approver public keys)."""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from host.approverkey import ApproverKey

_SEED = bytes(range(32))
APPROVER = ApproverKey(Ed25519PrivateKey.from_private_bytes(_SEED))


def write_approver_config(home: Path) -> Path:
    """Write ``home/approver.pem`` (0600, as ``stockade keygen`` does) and a
    ``home/stockade.host.toml`` naming it as the approver key; return the PEM path."""
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    pem = Ed25519PrivateKey.from_private_bytes(_SEED).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    path = home / "approver.pem"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
    config = home / "stockade.host.toml"
    config.write_text('format = "stockade.host/1"\n\n[host]\napprover_key = "approver.pem"\n', encoding="utf-8")
    config.chmod(0o600)
    return path
