"""Decompression bombs from a hostile OCI registry (the third review's item 1).

The client asks for ``Accept-Encoding: identity``; this registry compresses its answers
anyway (512 MiB of text: about 0.5 MB of ``gzip``, 1.3 KB of ``gzip, gzip``). Answers are
decoded under the host's one decoding policy (:mod:`host.egress.decoding`), so the peak
RSS of the pull, measured with the kernel's high-water mark, stays under the manifest
limit + 32 MiB.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from host.errors import DigestMismatch, RegistryRefused, StockadeError
from sdk.oci.client import MAX_OCI_MANIFEST_BYTES, RegistryClient
from tests.mcpsource.bombs import bomb
from tests.support.memory import MiB, peak_rss_growth
from tests.support.servers import ServerSet, respond

BOUND = MAX_OCI_MANIFEST_BYTES + 32 * MiB
MANIFEST = "/v2/team/tool/manifests/1.0.0"


@pytest.fixture
def servers() -> Iterator[ServerSet]:
    group = ServerSet()
    yield group
    group.stop_all()


@pytest.mark.parametrize(
    ("codings", "refusal"),
    [(["gzip"], DigestMismatch), (["gzip", "gzip"], RegistryRefused), (["deflate"], DigestMismatch)],
    ids=["gzip", "gzip-gzip", "deflate"],
)
def test_gzip_bomb_from_registry_manifest_pull_stays_under_memory_bound(
    servers: ServerSet, codings: list[str], refusal: type[StockadeError]
) -> None:
    body = bomb(b'{"schemaVersion":2,"pad":"', 512, b'"}', codings)
    registry = servers.new(routes={MANIFEST: respond(200, body, [("Content-Encoding", ", ".join(codings))])})

    def pull() -> StockadeError | None:
        with RegistryClient(f"127.0.0.1:{registry.port}", insecure=True, credential=None) as client:
            try:
                client.get_manifest("team/tool", "1.0.0")
            except StockadeError as exc:
                return exc
        return None

    refused, growth = peak_rss_growth(pull)
    print(f"peak RSS growth pulling a {'+'.join(codings)} manifest bomb: {growth / MiB:.1f} MiB")
    assert growth < BOUND, f"peak RSS grew {growth / MiB:.0f} MiB"
    assert isinstance(refused, refusal), refused
    assert registry.requests[-1].header("accept-encoding") == "identity"
