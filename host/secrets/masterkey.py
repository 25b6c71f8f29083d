"""Master key loading and generation for :mod:`host.secrets.store` (docs/design.md §8 "Secrets").

Private: import ``MasterKey`` and ``generate_key_file`` from :mod:`host.secrets.store`. The
rules (encoding, strength, key file protection) are documented there.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets as _random
from collections.abc import Mapping
from pathlib import Path
from typing import Final, NoReturn, final

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from host._files import create_exclusive, read_private
from host.errors import SecretsUnavailable

__all__ = ["MASTER_KEY_ENV", "MasterKey", "generate_key_file"]

MASTER_KEY_ENV: Final = "STOCKADE_MASTER_KEY"
MIN_KEY_BYTES: Final = 32  # bytes of decoded master key
MAX_KEY_BYTES: Final = 1024  # bytes of decoded master key
MIN_KEY_DISTINCT: Final = 8  # distinct byte values in the master key
MAX_KEY_TEXT: Final = 4096  # characters of encoded key (env var or key file)


@final
class MasterKey:
    """The master key secrets are derived from. Build it with :meth:`load`.

    :meta private: the constructor is for :meth:`load` and :meth:`from_bytes`.
    """

    __slots__ = ("_material",)
    _material: bytes

    def __init__(self, material: bytes) -> None:
        object.__setattr__(self, "_material", _check_key(material))

    @classmethod
    def from_bytes(cls, material: bytes) -> MasterKey:
        """Wrap raw key bytes after checking their strength.

        Args:
            material: 32-1024 bytes with at least 8 distinct byte values.

        Returns:
            The master key.

        Raises:
            SecretsUnavailable: the key is too short, too long or too uniform.
        """
        return cls(material)

    @classmethod
    def load(cls, *, env: Mapping[str, str] | None = None, key_file: Path | None = None) -> MasterKey:
        """Load the master key from ``STOCKADE_MASTER_KEY`` or else from ``key_file``.

        Args:
            env: the environment to read (``os.environ`` when ``None``).
            key_file: a file holding the base64 key, mode 0600, owned by this user.

        Returns:
            The master key.

        Raises:
            SecretsUnavailable: no key, an unreadable or badly protected key file, text
                that is not base64, or a weak key.
        """
        environ = os.environ if env is None else env
        if MASTER_KEY_ENV in environ:
            return cls(_decode_key_text(environ[MASTER_KEY_ENV], MASTER_KEY_ENV))
        if key_file is None:
            raise SecretsUnavailable(f"no master key: {MASTER_KEY_ENV} is not set and no key file was given")
        return cls(_decode_key_text(_read_key_file(Path(key_file)), f"key file {key_file}"))

    def _derive(self, salt: bytes, info: bytes) -> bytes:
        hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=info)
        return hkdf.derive(self._material)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("MasterKey is immutable")

    def __repr__(self) -> str:
        return "MasterKey('********')"

    __str__ = __repr__

    def __reduce__(self) -> NoReturn:
        raise TypeError("MasterKey cannot be pickled")


def _check_key(material: object) -> bytes:
    if not isinstance(material, bytes):
        raise TypeError(f"master key must be bytes, got {type(material).__name__}")
    if not MIN_KEY_BYTES <= len(material) <= MAX_KEY_BYTES:
        raise SecretsUnavailable(
            f"master key is {len(material)} bytes; it must be {MIN_KEY_BYTES}-{MAX_KEY_BYTES}",
            hint="Generate one with `openssl rand -base64 32` or stockade's generate_key_file.",
        )
    if len(set(material)) < MIN_KEY_DISTINCT:
        raise SecretsUnavailable(
            f"master key is weak: fewer than {MIN_KEY_DISTINCT} distinct byte values",
            hint="Generate one with `openssl rand -base64 32` or stockade's generate_key_file.",
        )
    return material


def _decode_key_text(text: str, source: str) -> bytes:
    stripped = text.strip()
    if not stripped or len(stripped) > MAX_KEY_TEXT:
        raise SecretsUnavailable(f"master key from {source} is empty or too long")
    try:
        return base64.b64decode(stripped.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error, ValueError) as exc:
        raise SecretsUnavailable(
            f"master key from {source} is not standard base64 (RFC 4648 with padding)"
        ) from exc


def _read_key_file(path: Path) -> str:
    data = read_private(path, MAX_KEY_TEXT, what="master key file", error=SecretsUnavailable)
    try:
        return data.decode("ascii")
    except UnicodeDecodeError as exc:
        raise SecretsUnavailable(f"master key file {path} is not base64 text") from exc


def generate_key_file(path: Path) -> MasterKey:
    """Write a new random 32-byte master key (base64 text) to ``path`` with mode 0600.

    The key is written to a temporary file, fsynced and linked into place, so ``path``
    either does not exist or holds a complete key; an existing file is never replaced
    (replacing a key would lose every secret encrypted with it).

    Args:
        path: the key file to create.

    Returns:
        The new master key.

    Raises:
        FileExistsError: ``path`` already exists.
        SecretsUnavailable: the file could not be written.
    """
    path = Path(path)
    material = _random.token_bytes(32)
    while len(set(material)) < MIN_KEY_DISTINCT:  # pragma: no cover - p ~ 0
        material = _random.token_bytes(32)
    text = base64.b64encode(material) + b"\n"
    try:
        create_exclusive(path, text)
    except FileExistsError:
        raise
    except OSError as exc:
        raise SecretsUnavailable(f"cannot create master key file {path}") from exc
    return MasterKey(material)
