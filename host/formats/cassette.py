"""The HTTP cassette format ``stockade.cassette/1``: recorded egress for authors' tests.

A cassette holds the requests a plugin's calls sent and the responses the host received,
with every secret removed (:mod:`host.egress.cassette` records, redacts and replays it;
``docs/authors.md`` shows the loop). It is meant to be committed to a repository.

Invariants:

- the file is canonical JSON (RFC 8785) plus one final newline: the same traffic always
  serializes to the same bytes (there is no timestamp, and ``Date`` headers are not kept);
- at most :data:`MAX_CASSETTE_BYTES` bytes and :data:`MAX_INTERACTIONS` interactions;
- a body is either UTF-8 text (``body``) or base64 (``body_b64``), never both, and
  ``body_sha256`` is the digest of its bytes; a response body is stored *decoded*
  (readable, and redactable), its wire encoding in ``content_encoding``, so replay
  re-encodes it and the host's decoder and its limits run as live;
- unknown fields are refused (``extra="forbid"``), as is any other ``format``.

Example::

    cassette = Cassette.from_bytes(path.read_bytes())
    cassette.interactions[0].request.url      # 'https://api.example.com/v1/x?token=<redacted>'
    path.write_bytes(cassette.to_bytes())
"""

from __future__ import annotations

import base64
import binascii
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from host.canonical import canonical_json, sha256_hex
from host.errors import CassetteInvalid

__all__ = [
    "CASSETTE_FORMAT",
    "MAX_CASSETTE_BYTES",
    "MAX_INTERACTIONS",
    "Cassette",
    "Interaction",
    "RecordedExchange",
    "RecordedResponse",
    "body_fields",
]

CASSETTE_FORMAT: Final = "stockade.cassette/1"
MAX_CASSETTE_BYTES: Final = 16 * 1024 * 1024  # bytes of one cassette file, read or written
MAX_INTERACTIONS: Final = 1024  # interactions in one cassette

Header = tuple[str, str]
ContentEncoding = Literal["identity", "gzip", "deflate"]

_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True)


class _Body(BaseModel):
    """Exactly one of ``body`` (UTF-8 text) and ``body_b64``, and the digest of the bytes."""

    model_config = _STRICT

    body: str | None = None
    body_b64: str | None = None
    body_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")

    @model_validator(mode="after")
    def _one_body(self) -> _Body:
        if (self.body is None) == (self.body_b64 is None):
            raise ValueError("give exactly one of body and body_b64")
        if sha256_hex(self.content) != self.body_sha256:
            raise ValueError("body_sha256 does not match the body")
        return self

    @property
    def content(self) -> bytes:
        """The body's bytes."""
        if self.body is not None:
            return self.body.encode("utf-8")
        try:
            return base64.b64decode(self.body_b64 or "", validate=True)
        except binascii.Error as exc:
            raise ValueError(f"body_b64 is not base64: {exc}") from None


class RecordedExchange(_Body):
    """One request as sent on the wire, redacted.

    Attributes:
        method: the method sent.
        url: the URL sent, redacted (secrets as ``<secret:NAME>``, credential-like query
            parameters as ``<redacted>``).
        headers: every header sent, in order, redacted.
    """

    method: str = Field(min_length=1, max_length=16)
    url: str = Field(min_length=1, max_length=8192)
    headers: tuple[Header, ...]


class RecordedResponse(_Body):
    """One response as the host received it, redacted, body decoded.

    Attributes:
        status: the HTTP status.
        headers: the response headers, redacted, without framing headers
            (``Content-Length``, ``Transfer-Encoding``, ``Content-Encoding``) and ``Date``.
        content_encoding: how the body travelled (replay encodes it the same way).
    """

    status: int = Field(ge=100, le=599)
    headers: tuple[Header, ...]
    content_encoding: ContentEncoding = "identity"


class Interaction(BaseModel):
    """One request and the response it got."""

    model_config = _STRICT

    request: RecordedExchange
    response: RecordedResponse


class Cassette(BaseModel):
    """A cassette: the package it was recorded for and its interactions, in order.

    Attributes:
        package: the package name; a cassette of another package is refused.
        version: the package version recorded (informational).
        manifest_sha256: the digest of the manifest recorded against; another digest is
            used with a warning (the allowlist still decides, as live).
        interactions: in recorded order.
    """

    model_config = _STRICT

    format: Literal["stockade.cassette/1"]
    package: str = Field(min_length=1, max_length=128)
    version: str = Field(min_length=1, max_length=128)
    manifest_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    interactions: tuple[Interaction, ...] = Field(max_length=MAX_INTERACTIONS)

    @classmethod
    def from_bytes(cls, data: bytes) -> Cassette:
        """Parse and validate a cassette file.

        Raises:
            CassetteInvalid: over :data:`MAX_CASSETTE_BYTES` (``too_large``), not JSON,
                another format or a field out of its rules (``malformed``).
        """
        if len(data) > MAX_CASSETTE_BYTES:
            raise CassetteInvalid(
                f"the cassette is {len(data)} bytes, over the ceiling of {MAX_CASSETTE_BYTES}",
                reason="too_large",
            )
        try:
            return cls.model_validate_json(data)
        except (ValueError, ValidationError) as exc:
            raise CassetteInvalid(f"the cassette is not a valid {CASSETTE_FORMAT} file: {exc}",
                                  reason="malformed") from None  # fmt: skip

    def to_bytes(self) -> bytes:
        """Canonical JSON plus a newline; the same cassette always gives the same bytes.

        Raises:
            CassetteInvalid: the result would pass :data:`MAX_CASSETTE_BYTES` (``too_large``).
        """
        data = canonical_json(self.model_dump(mode="json", exclude_none=True)) + b"\n"
        if len(data) > MAX_CASSETTE_BYTES:
            raise CassetteInvalid(
                f"the cassette would be {len(data)} bytes, over the ceiling of {MAX_CASSETTE_BYTES}",
                reason="too_large",
            )
        return data


def body_fields(content: bytes) -> dict[str, str]:
    """``body`` (UTF-8 text) or ``body_b64``, and ``body_sha256``, for ``content``."""
    try:
        fields = {"body": content.decode("utf-8")}
    except UnicodeDecodeError:
        fields = {"body_b64": base64.b64encode(content).decode("ascii")}
    fields["body_sha256"] = sha256_hex(content)
    return fields
