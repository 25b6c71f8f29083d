"""Decompression bombs for the hostile HTTP test server (``http_server.py``), built fast.

:func:`bomb` returns ``prefix + b"x" * size + suffix`` compressed with each coding of
``codings`` in turn (``gzip`` or ``deflate``), without ever holding or scanning the
decoded bytes more than once: a deflate block of 1 MiB of ``x`` after a full flush is the
same bytes every time, so it is compressed once and repeated; only the checksum walks
the data (a CRC-32 or Adler-32 of 1 MiB, repeated).
"""

from __future__ import annotations

import struct
import zlib

MiB = 1024 * 1024
_BLOCK = b"x" * MiB


def _deflate_raw(prefix: bytes, blocks: int, suffix: bytes) -> bytes:
    head = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    out = [head.compress(prefix), head.flush(zlib.Z_FULL_FLUSH)]
    middle = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    block = middle.compress(_BLOCK) + middle.flush(zlib.Z_FULL_FLUSH)  # refers to nothing before it
    out.append(block * blocks)
    tail = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    out += [tail.compress(suffix), tail.flush()]
    return b"".join(out)


def _layer(coding: str, prefix: bytes, blocks: int, suffix: bytes) -> bytes:
    body = _deflate_raw(prefix, blocks, suffix)
    if coding == "gzip":
        crc = zlib.crc32(prefix)
        for _ in range(blocks):
            crc = zlib.crc32(_BLOCK, crc)
        crc = zlib.crc32(suffix, crc)
        size = (len(prefix) + blocks * MiB + len(suffix)) & 0xFFFFFFFF
        return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + body + struct.pack("<II", crc, size)
    adler = zlib.adler32(prefix)
    for _ in range(blocks):
        adler = zlib.adler32(_BLOCK, adler)
    adler = zlib.adler32(suffix, adler)
    return b"\x78\xda" + body + struct.pack(">I", adler)


def bomb(prefix: bytes, size_mib: int, suffix: bytes, codings: list[str]) -> bytes:
    """``prefix + x * size_mib MiB + suffix``, compressed with ``codings`` (first applied first)."""
    data = _layer(codings[0], prefix, size_mib, suffix)
    for coding in codings[1:]:
        z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS if coding == "gzip" else zlib.MAX_WBITS)
        data = z.compress(data) + z.flush()
    return data
