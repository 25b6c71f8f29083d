"""Bounded body decoding: one encoding at most, every step at most one chunk."""

from __future__ import annotations

import gzip
import random
import zlib

import pytest

from host.egress.decoding import (
    DECODE_CHUNK,
    MAX_DECODE_RATIO,
    RATIO_FLOOR_BYTES,
    BodyDecoder,
    BodyTooLarge,
    ResponseInvalid,
    parse_content_encoding,
)


@pytest.mark.parametrize(
    ("values", "expected"),
    [([], "identity"), ([""], "identity"), (["identity"], "identity"), (["GZIP"], "gzip"),
     (["x-gzip"], "gzip"), (["deflate"], "deflate"), ([" gzip , identity "], "gzip"),
     (["identity", "deflate"], "deflate")],
    ids=["none", "empty", "identity", "upper", "x-gzip", "deflate", "with-identity", "two-headers"],
)  # fmt: skip
def test_one_encoding_is_accepted(values: list[str], expected: str) -> None:
    assert parse_content_encoding(values) == expected


@pytest.mark.parametrize(
    ("values", "match"),
    [(["gzip, gzip"], "stacked"), (["gzip", "deflate"], "stacked"), (["deflate, gzip"], "stacked"),
     (["br"], "not supported"), (["zstd"], "not supported"), (["compress"], "not supported"),
     (["gzip;q=1"], "not supported")],
    ids=["gzip-gzip", "two-headers", "deflate-gzip", "br", "zstd", "compress", "parameter"],
)  # fmt: skip
def test_stacked_or_unknown_encoding_refused(values: list[str], match: str) -> None:
    with pytest.raises(ResponseInvalid, match=match):
        parse_content_encoding(values)


def _decode(decoder: BodyDecoder, data: bytes, step: int = 65536) -> list[bytes]:
    pieces: list[bytes] = []
    for start in range(0, len(data), step):
        pieces += decoder.feed(data[start : start + step])
    pieces += decoder.finish()
    return pieces


@pytest.mark.parametrize("encoding", ["identity", "gzip", "deflate"])
def test_every_decoded_piece_is_at_most_one_chunk(encoding: str) -> None:
    payload = random.Random(7).randbytes(1 << 20) + b"\0" * (3 * DECODE_CHUNK)
    packed = {"identity": payload, "gzip": gzip.compress(payload), "deflate": zlib.compress(payload)}[encoding]
    pieces = _decode(BodyDecoder(encoding, limit=len(payload)), packed, step=len(packed))  # type: ignore[arg-type]
    assert b"".join(pieces) == payload
    assert max(len(piece) for piece in pieces) <= DECODE_CHUNK


def test_limit_counts_decoded_bytes() -> None:
    decoder = BodyDecoder("gzip", limit=1000)
    with pytest.raises(BodyTooLarge, match="over 1000 bytes once decoded"):
        _decode(decoder, gzip.compress(b"a" * 1001))
    assert decoder.decoded <= 1000 + DECODE_CHUNK


def test_ratio_cap_applies_past_the_floor_only() -> None:
    small = b"\0" * RATIO_FLOOR_BYTES  # ~1000:1 but within the floor
    assert b"".join(_decode(BodyDecoder("gzip", limit=10 * RATIO_FLOOR_BYTES), gzip.compress(small))) == small
    with pytest.raises(BodyTooLarge, match=f"{MAX_DECODE_RATIO}:1"):
        _decode(BodyDecoder("gzip", limit=100 * RATIO_FLOOR_BYTES), gzip.compress(small * 4))


def test_raw_deflate_without_zlib_wrapper_is_decoded() -> None:
    z = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    raw = z.compress(b"raw deflate body") + z.flush()
    assert b"".join(_decode(BodyDecoder("deflate", limit=100), raw)) == b"raw deflate body"


def test_corrupt_data_is_invalid() -> None:
    with pytest.raises(ResponseInvalid, match="corrupt gzip"):
        _decode(BodyDecoder("gzip", limit=100), b"\x1f\x8b\x08\x00garbage-garbage")
