"""Decompression bombs from a hostile Streamable HTTP MCP source (the third review's item 1).

The host asks every source for ``Accept-Encoding: identity``; this server compresses
anyway (``http_server.py``'s ``bomb`` behaviour: 512 MiB of text in about 0.5 MB of
``gzip``, 1.3 KB of ``gzip, gzip``). Each answer is decoded under the host's one policy
(:mod:`host.egress.decoding`), so each test measures the peak RSS of the receiving
process with the kernel's high-water mark and holds it under ``max_output_bytes`` +
32 MiB, for a call and for pinning (``stockade lock add-mcp`` uses the same transport).
"""

from __future__ import annotations

from typing import Any

import pytest

from host.errors import McpUnavailable
from tests.mcpsource import test_http
from tests.mcpsource.conftest import request
from tests.mcpsource.test_http import HttpWorld
from tests.support.memory import MiB, peak_rss_growth

http_world = test_http.http_world  # the real TLS server fixture of test_http.py

LIMIT = 256 * 1024  # bytes: the source's max_output_bytes, as in the review
BOUND = LIMIT + 32 * MiB


def _bomb(codings: list[str], *, method: str = "tools/call", sse: bool = False) -> dict[str, Any]:
    return {"method": method, "codings": codings, "mib": 512, "sse": sse}


@pytest.mark.parametrize(
    ("codings", "sse"),
    [(["gzip"], False), (["gzip", "gzip"], False), (["deflate"], False), (["gzip"], True)],
    ids=["gzip", "gzip-gzip", "deflate", "gzip-inside-sse"],
)
def test_gzip_bomb_through_http_source_call_stays_under_memory_bound(
    http_world: HttpWorld, codings: list[str], sse: bool
) -> None:
    http_world.pin(http_world.declaration(max_output_bytes=LIMIT))
    host = http_world.open()
    assert host.call(request("test.echo", {"message": "warm"})).ok  # imports and pools are warm
    http_world.behave(bomb=_bomb(codings, sse=sse))
    result, growth = peak_rss_growth(lambda: host.call(request("test.echo", {"message": "boom"})))
    print(f"peak RSS growth {'+'.join(codings)}{' in SSE' if sse else ''}: {growth / MiB:.1f} MiB")
    assert growth < BOUND, f"peak RSS grew {growth / MiB:.0f} MiB"
    assert not result.ok and result.error is not None
    assert result.error.code == "MCP_UNAVAILABLE"
    expected = "malformed" if len(codings) > 1 else "too_large"  # stacked codings: refused unread
    assert result.error.details["reason"] == expected
    http_world.behave()
    assert host.call(request("test.echo", {"message": "after"})).ok  # the next call reconnects


def test_gzip_bomb_through_http_source_during_pinning_stays_under_memory_bound(http_world: HttpWorld) -> None:
    http_world.behave(bomb=_bomb(["gzip"], method="tools/list"))
    decl = http_world.declaration(max_output_bytes=LIMIT)

    def pin() -> BaseException | None:
        try:
            http_world.pin(decl)
        except McpUnavailable as exc:
            return exc
        return None

    refused, growth = peak_rss_growth(pin)
    print(f"peak RSS growth while pinning a gzip bomb: {growth / MiB:.1f} MiB")
    assert growth < BOUND, f"peak RSS grew {growth / MiB:.0f} MiB"
    assert isinstance(refused, McpUnavailable) and refused.details["reason"] == "too_large"


def test_http_source_is_asked_for_identity_encoding(http_world: HttpWorld) -> None:
    http_world.pin()
    host = http_world.open()
    http_world.behave(leak_header="accept-encoding")  # `leak` answers with that request header
    result = host.call(request("test.leak"))
    assert result.ok and result.output == {"text": "the token is identity"}
