"""Test helpers for the secrets store: real keys, real files, real crypto."""

from __future__ import annotations

import base64
import os
from pathlib import Path

from host.secrets.store import MasterKey, SecretsStore


def key_text(material: bytes | None = None) -> str:
    """Base64 text of ``material`` (32 fresh random bytes when omitted)."""
    return base64.b64encode(material if material is not None else os.urandom(32)).decode("ascii")


def make_key() -> MasterKey:
    """A fresh random master key, loaded the way a host loads one."""
    return MasterKey.load(env={"STOCKADE_MASTER_KEY": key_text()})


def write_key_file(path: Path, material: bytes | None = None, *, mode: int = 0o600) -> Path:
    """Write a key file holding ``material`` as base64 with ``mode``."""
    path.write_text(key_text(material) + "\n")
    path.chmod(mode)
    return path


def make_store(directory: Path, key: MasterKey | None = None) -> SecretsStore:
    """A store at ``directory/secrets.json`` under ``key`` (fresh key when omitted)."""
    return SecretsStore(directory / "secrets.json", key if key is not None else make_key())
