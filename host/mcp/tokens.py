"""Bearer tokens of ``stockade serve --transport http`` (format ``stockade.tokens/1``).

A token maps to one principal (project, subject) with an optional expiry. The file keeps
only a random salt and SHA-256(salt || secret) per token, never the token: tokens are 256
random bits, so a fast salted hash is enough (no password stretching is needed), and a
stolen file does not let anyone call tools. A token reads ``stk_<id>_<secret>``; the id
finds the entry without scanning, the secret is compared in constant time.

File (mode 0600, replaced atomically, changed under an exclusive ``flock``)::

    {"format": "stockade.tokens/1",
     "tokens": [{"id": "3f9a…", "project": "p", "subject": "alice", "label": "laptop",
                 "salt": "<hex>", "sha256": "<hex>", "created_at": 1764547200,
                 "expires_at": 1767139200}]}

:class:`TokenVerifier` answers the MCP SDK's bearer middleware: unknown, malformed,
revoked and expired tokens are all ``None`` (HTTP 401). The file is re-read when it
changes, so ``stockade tokens revoke`` takes effect on the next request.

Example::

    tokens = TokenFile(state_dir / "tokens.json")
    token, entry = tokens.add(project="p", subject="alice", ttl_s=30 * 86400)
    tokens.verify(token)   # -> the entry, or None
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from host._files import LOCKING, atomic_write, interprocess_lock, read_regular
from host.errors import RequestInvalid
from host.text import has_unsafe

__all__ = ["FORMAT", "TokenEntry", "TokenFile"]

FORMAT: Final = "stockade.tokens/1"
MAX_FILE_BYTES: Final = 1024 * 1024  # bytes of tokens.json
MAX_TOKENS: Final = 1024  # entries in one file
_TOKEN_RE: Final = re.compile(r"stk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")


class TokenEntry(BaseModel):
    """One token's record (no token, only its salted hash)."""

    # defer_build: validators are built on first use, not at import (CLI start-up time):
    # bearer tokens are read only by the MCP HTTP server.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)

    id: str = Field(pattern=r"^[0-9a-f]{16}$")
    project: str = Field(min_length=1, max_length=128)
    subject: str = Field(min_length=1, max_length=256)
    label: str = Field(default="", max_length=256)
    salt: str = Field(pattern=r"^[0-9a-f]{32}$")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    created_at: int
    expires_at: int | None = None


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)

    format: Literal["stockade.tokens/1"]
    tokens: tuple[TokenEntry, ...] = Field(max_length=MAX_TOKENS)


def _hash(salt: str, secret: str) -> str:
    return hashlib.sha256(bytes.fromhex(salt) + secret.encode("ascii")).hexdigest()


class TokenFile:
    """The tokens file (see the module docstring).

    Args:
        path: the file (created on the first ``add``).
        clock: time source (injected in tests).
    """

    def __init__(self, path: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self._clock = clock
        self._cache: tuple[tuple[int, int, int, int], dict[str, TokenEntry]] | None = None

    def add(
        self, *, project: str, subject: str, ttl_s: float | None, label: str = ""
    ) -> tuple[str, TokenEntry]:
        """Create a token for (project, subject); returns (token, entry). Show the token once.

        Raises:
            RequestInvalid: bad project/subject/label, or the file is full or malformed.
        """
        if ttl_s is not None and ttl_s <= 0:
            raise RequestInvalid("a token's lifetime must be positive")
        if has_unsafe(project) or has_unsafe(subject):  # the call envelope would refuse it anyway
            raise RequestInvalid("a token's project and subject must not hold control or bidi characters")
        token_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
        salt = secrets.token_hex(16)
        now = int(self._clock())
        try:
            entry = TokenEntry(
                id=token_id,
                project=project,
                subject=subject,
                label=label,
                salt=salt,
                sha256=_hash(salt, secret),
                created_at=now,
                expires_at=None if ttl_s is None else now + int(ttl_s),
            )
        except ValidationError as exc:
            raise RequestInvalid(f"invalid token fields: {exc.errors()[0]['msg']}") from None
        with self._locked() as entries:
            if len(entries) >= MAX_TOKENS:
                raise RequestInvalid(f"the tokens file holds {MAX_TOKENS} tokens; revoke some first")
            entries[token_id] = entry
        return f"stk_{token_id}_{secret}", entry

    def entries(self) -> list[TokenEntry]:
        """Every token entry, in creation order."""
        return sorted(self._read().values(), key=lambda e: (e.created_at, e.id))

    def revoke(self, token_id: str) -> TokenEntry:
        """Remove a token by id.

        Raises:
            RequestInvalid: no token with that id.
        """
        with self._locked() as entries:
            entry = entries.pop(token_id, None)
        if entry is None:
            raise RequestInvalid(
                f"no token with id {token_id[:32]!r}", hint="List ids with `stockade tokens list`."
            )
        return entry

    def verify(self, token: str) -> TokenEntry | None:
        """The entry of a valid, unexpired token; ``None`` for anything else."""
        match = _TOKEN_RE.fullmatch(token) if isinstance(token, str) and len(token) < 128 else None
        if match is None:
            return None
        try:
            entry = self._current().get(match.group(1))
        except RequestInvalid:
            return None  # an unreadable file authenticates nobody
        if entry is None or not hmac.compare_digest(entry.sha256, _hash(entry.salt, match.group(2))):
            return None
        if entry.expires_at is not None and entry.expires_at <= self._clock():
            return None
        return entry

    # -- the file ------------------------------------------------------------------------

    def _current(self) -> dict[str, TokenEntry]:
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return {}
        stamp = (info.st_mtime_ns, info.st_ctime_ns, info.st_size, info.st_ino)  # ctime: chmod, chown
        if self._cache is None or self._cache[0] != stamp:
            self._cache = (stamp, self._read())
        return self._cache[1]

    def _read(self) -> dict[str, TokenEntry]:
        if not self.path.exists():
            return {}
        data = read_regular(self.path, MAX_FILE_BYTES, what="tokens file", error=RequestInvalid, trusted=True)
        try:
            parsed = _File.model_validate_json(data)
        except ValidationError:
            raise RequestInvalid(f"the tokens file {str(self.path)[:200]!r} is malformed") from None
        return {e.id: e for e in parsed.tokens}

    @contextmanager
    def _locked(self) -> Iterator[dict[str, TokenEntry]]:
        if not LOCKING:  # pragma: no cover - non-POSIX platforms
            raise RuntimeError("changing the tokens file needs flock (POSIX)")
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with interprocess_lock(self.path.with_name(self.path.name + ".lock")):
            entries = self._read()
            yield entries
            body: dict[str, Any] = {"format": FORMAT, "tokens": [e.model_dump() for e in entries.values()]}
            atomic_write(self.path, json.dumps(body, indent=1).encode("utf-8"))
