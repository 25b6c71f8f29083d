"""Bounded, incremental decoding of response bodies (docs/design.md §8 "Egress").

A server may ignore the ``Accept-Encoding: identity`` the host sends and compress its
answer anyway. Decoding such a body the usual way (every listed encoding in turn, each
chunk decoded whole before any size check) lets 1.8 KB of ``gzip, gzip`` on the wire
become gigabytes in memory. Here:

- at most ONE encoding is decoded: ``gzip`` (``x-gzip``) or ``deflate`` (zlib-wrapped, or
  raw deflate as some servers send it); ``identity`` and empty entries are ignored;
  stacked encodings (``gzip, gzip``) and anything else (``br``, ``zstd``, ``compress``,
  unknown tokens) are refused with :class:`ResponseInvalid`;
- decoding is incremental: every ``zlib`` call is bounded by ``max_length`` =
  :data:`DECODE_CHUNK`, so one call never produces more than one chunk;
- the caller stops at its limit of **decoded** bytes (:class:`BodyTooLarge`), and at a
  decoded/encoded ratio over :data:`MAX_DECODE_RATIO` once more than
  :data:`RATIO_FLOOR_BYTES` were decoded (a bomb is refused early even under a large
  limit).

So a response never holds more than ``limit`` decoded bytes plus one chunk in memory.

Example::

    decoder = BodyDecoder.for_encodings(response.headers.get_list("content-encoding"))
    body = bytearray()
    for raw in response.iter_raw():
        for piece in decoder.feed(raw):
            check(len(body) + len(piece)); body += piece
    for piece in decoder.finish():
        ...
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from typing import Final, Literal

__all__ = [
    "DECODE_CHUNK",
    "MAX_DECODE_RATIO",
    "RATIO_FLOOR_BYTES",
    "BodyDecoder",
    "BodyTooLarge",
    "ResponseInvalid",
    "parse_content_encoding",
]

DECODE_CHUNK: Final = 64 * 1024  # bytes: the most one decompression step may produce
MAX_DECODE_RATIO: Final = 200  # decoded bytes per encoded byte, checked past the floor
RATIO_FLOOR_BYTES: Final = 1024 * 1024  # bytes decoded before the ratio cap applies

Encoding = Literal["identity", "gzip", "deflate"]

_ALIASES: Final[dict[str, Encoding]] = {"gzip": "gzip", "x-gzip": "gzip", "deflate": "deflate"}


class ResponseInvalid(ValueError):
    """The response body cannot be accepted (unknown or stacked encoding, corrupt data)."""


class BodyTooLarge(ValueError):
    """Decoding would pass the decoded-byte limit or the compression-ratio cap."""


def parse_content_encoding(values: Iterable[str]) -> Encoding:
    """The one encoding to decode, from every ``Content-Encoding`` header value.

    Args:
        values: each ``Content-Encoding`` header value (comma lists allowed).

    Raises:
        ResponseInvalid: more than one real encoding, or one the host does not decode.

    Returns:
        ``"identity"``, ``"gzip"`` or ``"deflate"``.
    """
    tokens = [
        token.strip().lower()
        for value in values
        for token in value.split(",")
        if token.strip() and token.strip().lower() != "identity"
    ]
    if not tokens:
        return "identity"
    if len(tokens) > 1:
        raise ResponseInvalid(
            f"stacked content-encodings are refused ({', '.join(t[:16] for t in tokens[:4])})"
        )
    encoding = _ALIASES.get(tokens[0])
    if encoding is None:
        raise ResponseInvalid(f"content-encoding {tokens[0][:32]!r} is not supported")
    return encoding


class BodyDecoder:
    """Decodes one response body in bounded steps and enforces the size and ratio caps.

    Args:
        encoding: from :func:`parse_content_encoding`.
        limit: the most decoded bytes accepted (``http.max_response_bytes``).

    Raises (from :meth:`feed` and :meth:`finish`):
        BodyTooLarge: decoded bytes would pass ``limit`` or the ratio cap.
        ResponseInvalid: the compressed data is corrupt.
    """

    __slots__ = ("_decoded", "_encoded", "_encoding", "_first", "_limit", "_raw_deflate", "_z")

    def __init__(self, encoding: Encoding, *, limit: int) -> None:
        self._encoding = encoding
        self._limit = limit
        self._encoded = 0
        self._decoded = 0
        self._first = True
        self._raw_deflate = False
        self._z: zlib._Decompress | None = self._new()

    @classmethod
    def for_encodings(cls, values: Iterable[str], *, limit: int) -> BodyDecoder:
        """A decoder for a response's ``Content-Encoding`` values (see :func:`parse_content_encoding`)."""
        return cls(parse_content_encoding(values), limit=limit)

    @property
    def decoded(self) -> int:
        """Decoded bytes produced so far."""
        return self._decoded

    def _new(self) -> zlib._Decompress | None:
        if self._encoding == "gzip":
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        if self._encoding == "deflate":
            return zlib.decompressobj(-zlib.MAX_WBITS if self._raw_deflate else zlib.MAX_WBITS)
        return None

    def _account(self, piece: bytes) -> bytes:
        self._decoded += len(piece)
        if self._decoded > self._limit:
            raise BodyTooLarge(f"response body over {self._limit} bytes once decoded")
        if self._decoded > RATIO_FLOOR_BYTES and self._decoded > MAX_DECODE_RATIO * max(self._encoded, 1):
            raise BodyTooLarge(f"response body expands more than {MAX_DECODE_RATIO}:1 when decoded")
        return piece

    def feed(self, data: bytes) -> Iterator[bytes]:
        """Decode ``data`` (raw bytes from the wire); yields pieces of at most one chunk."""
        self._encoded += len(data)
        if self._z is None:
            for start in range(0, len(data), DECODE_CHUNK):
                yield self._account(data[start : start + DECODE_CHUNK])
            return
        yield from self._inflate(data)

    def _inflate(self, data: bytes) -> Iterator[bytes]:
        pending = data
        while self._z is not None:
            try:
                piece = self._z.decompress(pending, DECODE_CHUNK)
            except zlib.error as exc:
                if self._encoding == "deflate" and self._first and not self._raw_deflate:
                    # Some servers send raw deflate without the zlib wrapper (as httpx2 allows).
                    self._raw_deflate = True
                    self._z = self._new()
                    continue
                raise ResponseInvalid(f"corrupt {self._encoding} data: {exc}") from None
            self._first = False
            pending = self._z.unconsumed_tail
            if piece:
                yield self._account(piece)
            if self._z.eof:
                pending = self._z.unused_data + pending
                if not pending or self._encoding != "gzip":
                    # deflate has one stream; bytes after it are ignored, like httpx2 does.
                    return
                self._z = self._new()  # a further gzip member (RFC 1952 §2.2)
                continue
            if not pending and len(piece) < DECODE_CHUNK:
                return

    def finish(self) -> Iterator[bytes]:
        """Flush what the decompressor still holds (bounded like :meth:`feed`)."""
        if self._z is None:
            return
        yield from self._inflate(b"")
        if self._z is not None:
            try:
                tail = self._z.flush(DECODE_CHUNK)
            except zlib.error as exc:
                raise ResponseInvalid(f"corrupt {self._encoding} data: {exc}") from None
            if tail:
                yield self._account(tail)
