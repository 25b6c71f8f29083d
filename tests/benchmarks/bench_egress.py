"""Benchmark: host egress path vs plain httpx2, and credential routing with 1,000 mappings.

Run: ``python tests/benchmarks/bench_egress.py [--n 400] [--json]`` (a script, not a test).

What is compared (same loopback server, same process, medians of per-request times):

- **keep-alive**: one ``EgressSession`` sending N requests (its pool keeps the pinned
  connection open, as within one tool call) vs one reused ``httpx2.Client``;
- **new connection per request**: a fresh ``EgressSession`` per request (one tool call =
  one request, the worst case for pinning) vs a fresh ``httpx2.Client`` per request. The
  plain client gets a shared ``ssl.SSLContext`` (``verify=ctx``), otherwise it would spend
  ~35 ms loading CA files per client and the comparison would flatter Stockade.

The egress path includes everything a real call does: budget, hygiene, URL normalization
and allowlist, DNS vetting through a resolver (an in-memory fake: no DNS server on this
machine), a credential mapping injecting a bearer token, streaming with the byte limit,
response header sanitation and redaction of the staged secret. Both plain HTTP and HTTPS
(test CA) are measured.

The server is a minimal keep-alive responder on raw sockets (tests' ``LoopbackServer``
uses ``http.server`` and costs ~0.5 ms per request, which would hide the overhead).

Routing: ``CredentialRouter.match`` + ``inject`` with 1,000 mappings, (a) on 1,000
distinct hosts, (b) all on one host with 1,000 distinct path prefixes; median µs.
Targets: egress ≤ 1.5× plain httpx2; routing ≤ 50 µs median.

Edges (issues 9 and 18), each against a baseline measured in the same run:

- **header redaction**: 8 staged secrets; ``Redactor.texts`` over all names and values
  (one pass per form) vs the former ``Redactor.text`` per name and per value, for 256
  headers (the cap) and 10,500 (the attack, now refused before redaction);
- **decoding**: an honest 8 MiB JSON body gzipped, decoded by ``BodyDecoder`` in 64 KiB
  raw chunks vs one ``zlib.decompress`` call; and the time to refuse a 128 MiB gzip bomb
  under a 1 MiB limit;
- **DNS**: ``EgressPolicy.vet`` with a deadline (worker thread) vs without;
- **body redaction**: ``Redactor.bytes`` of 1 MiB with 8 secrets (every form) vs one
  ``bytes.find`` per raw secret value (the least any redactor must do).
"""

from __future__ import annotations

import argparse
import gzip
import json
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import httpx2

from host.egress.decoding import BodyDecoder, BodyTooLarge
from host.egress.policy import EgressPolicy
from host.egress.port import HttpRequest, HttpResponse
from host.egress.router import CredentialRouter
from host.egress.session import EgressSession
from host.egress.urls import normalize_url
from host.formats.manifest import CredentialMapping
from host.secrets.redact import Redactor
from host.secrets.store import SecretValue
from tests.support.egress_session import FakeResolver, allow, bearer, http_config
from tests.support.tls import CertAuthority

HOST = "api.tracker.example"
SECRET = "bench-token-0123456789abcdef"
BODY = b'{"items": [1, 2, 3], "note": "hello"}'


class TinyServer:
    """A minimal HTTP/1.1 keep-alive responder (fixed 200 response) on 127.0.0.1."""

    RESPONSE = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
        + str(len(BODY)).encode()
        + b"\r\n\r\n"
        + BODY
    )

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.tls = tls
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            buffer = b""
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                buffer += data
                while b"\r\n\r\n" in buffer:
                    _, buffer = buffer.split(b"\r\n\r\n", 1)  # requests carry no body here
                    conn.sendall(self.RESPONSE)
        except OSError:
            return
        finally:
            conn.close()

    def close(self) -> None:
        self._stop = True
        self.sock.close()


def _time(fn: Callable[[], Any], n: int, warmup: int = 30) -> dict[str, float]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(n):
        start = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - start) / 1000)
    return _summary(samples)


def _summary(samples: list[float]) -> dict[str, float]:
    samples = sorted(samples)
    return {"median_us": statistics.median(samples), "p90_us": samples[int(len(samples) * 0.9)]}


def _interleaved(variants: dict[str, Callable[[], Any]], n: int, block: int = 20) -> dict[str, Any]:
    """Time the variants in alternating blocks, so load from other processes hits all alike."""
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for fn in variants.values():
        for _ in range(block):
            fn()  # warm-up
    for _ in range(max(n // block, 1)):
        for name, fn in variants.items():
            for _ in range(block):
                start = time.perf_counter_ns()
                fn()
                samples[name].append((time.perf_counter_ns() - start) / 1000)
    return {name: _summary(values) for name, values in samples.items()}


class EgressFactory:
    """Builds sessions the way the gateway does per call: the manifest's HttpConfig and
    the EgressPolicy exist once per package; the session and its Redactor once per call."""

    def __init__(self, scheme: str, port: int, ca_file: Path | None) -> None:
        self.http = http_config(
            [allow(HOST, port, scheme=scheme)], [bearer("tok", [f"{scheme}://{HOST}:{port}"])]
        )
        self.policy = EgressPolicy.from_allow(self.http.allow)
        self.staged = {"tok": SecretValue(SECRET)}
        self.resolver = FakeResolver({HOST: ["127.0.0.1"]})
        self.ca_file = ca_file

    def session(self) -> EgressSession:
        return EgressSession(
            self.http,
            self.policy,
            package="bench",
            credentials=self.http.credentials,
            staged=self.staged,
            max_requests=10**9,
            deadline=time.monotonic() + 3600,
            resolver=self.resolver,
            ca_file=self.ca_file,
            allow_loopback=True,
            redactor=Redactor(self.staged.values()),
        )


def bench_http(scheme: str, n: int, ca: CertAuthority) -> dict[str, Any]:
    tls = ca.server_context([HOST, "127.0.0.1"]) if scheme == "https" else None
    server = TinyServer(tls)
    ca_file = ca.ca_file if scheme == "https" else None
    plain_ctx = ssl.create_default_context(cafile=str(ca.ca_file))
    egress_url = f"{scheme}://{HOST}:{server.port}/v1/items?page=1"
    plain_url = f"{scheme}://127.0.0.1:{server.port}/v1/items?page=1"
    request = HttpRequest("GET", egress_url, (("Accept", "application/json"),), None, None)
    auth = {"Authorization": f"Bearer {SECRET}", "Accept": "application/json"}
    factory = EgressFactory(scheme, server.port, ca_file)
    client = httpx2.Client(trust_env=False, verify=plain_ctx)
    session = factory.session()

    def plain_keepalive() -> None:
        client.get(plain_url, headers=auth).read()

    def egress_keepalive() -> None:
        if not isinstance(session.send(request), HttpResponse):
            raise RuntimeError("egress request failed")

    def plain_new() -> None:
        with httpx2.Client(trust_env=False, verify=plain_ctx) as fresh:
            fresh.get(plain_url, headers=auth).read()

    def egress_new() -> None:
        with factory.session() as fresh:
            if not isinstance(fresh.send(request), HttpResponse):
                raise RuntimeError("egress request failed")

    try:
        results: dict[str, Any] = _interleaved(
            {"plain_keepalive": plain_keepalive, "egress_keepalive": egress_keepalive}, n
        )
        results.update(
            _interleaved({"plain_new_client": plain_new, "egress_new_session": egress_new}, max(n // 2, 40))
        )
    finally:
        client.close()
        session.close()
        server.close()
    results["ratio_keepalive"] = results["egress_keepalive"]["median_us"] / results["plain_keepalive"]["median_us"]
    results["ratio_new"] = results["egress_new_session"]["median_us"] / results["plain_new_client"]["median_us"]
    return results


def _mapping(i: int, host: str, prefix: str) -> CredentialMapping:
    document = {"secret": f"s{i}", "location": {"type": "header", "name": f"X-K{i}", "prefix": ""},
                "hosts": [host], "path_prefixes": [prefix], "optional": True}
    return CredentialMapping.model_validate_json(json.dumps(document))


def bench_routing(n: int) -> dict[str, Any]:
    staged = {f"s{i}": SecretValue(f"value-{i:06d}-xyz") for i in range(1000)}
    distinct = CredentialRouter([_mapping(i, f"api{i}.example.com", "/v1") for i in range(1000)])
    one_host = CredentialRouter([_mapping(i, "api.example.com", f"/v1/r{i}") for i in range(1000)])
    hit = normalize_url("https://api500.example.com/v1/issues/7")
    miss = normalize_url("https://elsewhere.example.org/v1/issues/7")
    deep = normalize_url("https://api.example.com/v1/r500/items/9")
    reps = n * 25
    return {
        "distinct_hosts_hit": _time(lambda: distinct.inject(distinct.match(hit), staged), reps),
        "distinct_hosts_miss": _time(lambda: distinct.inject(distinct.match(miss), staged), reps),
        "one_host_1000_prefixes": _time(lambda: one_host.inject(one_host.match(deep), staged), reps),
    }


def _median_us(fn: Callable[[], Any], n: int) -> float:
    return _time(fn, n, warmup=3)["median_us"]


SECRETS8 = [f"staged-secret-{i:04d}-value" for i in range(8)]


def bench_header_redaction(n: int) -> dict[str, Any]:
    redactor = Redactor(SECRETS8)
    report: dict[str, Any] = {}
    for count in (256, 10_500):
        items = [text for i in range(count) for text in (f"x-h{i}", f"value {i} of the header")]
        old = _median_us(lambda items=items: [redactor.text(t) for t in items], max(n // 20, 5))
        new = _median_us(lambda items=items: redactor.texts(items), max(n // 20, 5))
        report[f"headers_{count}"] = {"per_item_us": old, "one_pass_us": new, "ratio": new / old}
    return report


def bench_decoding() -> dict[str, Any]:
    payload = b'{"issues": [' + b",".join(b'{"id": %d, "title": "issue %d"}' % (i, i) for i in range(300_000))
    payload = payload[: 8 * 1024 * 1024]
    packed = gzip.compress(payload, 6)
    chunks = [packed[i : i + 65536] for i in range(0, len(packed), 65536)]

    def bounded() -> None:
        decoder = BodyDecoder("gzip", limit=16 * 1024 * 1024)
        out = bytearray()
        for chunk in chunks:
            for piece in decoder.feed(chunk):
                out += piece
        for piece in decoder.finish():
            out += piece

    one_shot = _median_us(lambda: zlib.decompress(packed, 16 + zlib.MAX_WBITS), 5)
    ours = _median_us(bounded, 5)
    report: dict[str, Any] = {
        "decode_8mib": {"zlib_one_shot_us": one_shot, "bounded_us": ours, "ratio": ours / one_shot}
    }

    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    bomb = b"".join(z.compress(b"\0" * 1048576) for _ in range(128)) + z.flush()
    bomb_chunks = [bomb[i : i + 65536] for i in range(0, len(bomb), 65536)]

    def refuse_bomb() -> None:
        decoder = BodyDecoder("gzip", limit=1024 * 1024)
        try:
            for chunk in bomb_chunks:
                for _ in decoder.feed(chunk):
                    pass
        except BodyTooLarge:
            return
        raise RuntimeError("bomb not refused")

    report["gzip_bomb_128mib_refused_us"] = _median_us(refuse_bomb, 5)
    return report


def bench_dns_and_body(n: int) -> dict[str, Any]:
    report: dict[str, Any] = {}
    policy = EgressPolicy.from_allow([allow(HOST, None, scheme="https")])
    target = policy.check("GET", f"https://{HOST}/v1/x")
    resolver = FakeResolver({HOST: ["93.184.216.34"]})
    direct = _median_us(lambda: policy.vet(target, resolver), n)
    bounded_dns = _median_us(lambda: policy.vet(target, resolver, deadline=time.monotonic() + 5), n)
    report["dns_vet"] = {"direct_us": direct, "worker_us": bounded_dns, "ratio": bounded_dns / direct}

    body = (b"lorem ipsum dolor sit amet, " * 40000)[: 1024 * 1024]
    raw = [secret.encode() for secret in SECRETS8]
    redactor = Redactor(SECRETS8)
    floor = _median_us(lambda: [body.find(form) for form in raw], max(n // 10, 10))
    full = _median_us(lambda: redactor.bytes(body), max(n // 10, 10))
    report["redact_body_1mib"] = {"raw_find_us": floor, "redactor_us": full, "ratio": full / floor}
    return report


def bench_edges(n: int) -> dict[str, Any]:
    return {**bench_header_redaction(n), **bench_decoding(), **bench_dns_and_body(n)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=400, help="timed requests per variant")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ca = CertAuthority.create(Path(tmp))
        report = {
            "http": bench_http("http", args.n, ca),
            "https": bench_http("https", args.n, ca),
            "routing_1000_mappings": bench_routing(args.n),
            "edges": bench_edges(args.n),
        }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for scheme in ("http", "https"):
        r = report[scheme]
        print(f"[{scheme}] median µs (p90)")
        for key in ("plain_keepalive", "egress_keepalive", "plain_new_client", "egress_new_session"):
            print(f"  {key:22s} {r[key]['median_us']:9.1f}  ({r[key]['p90_us']:.1f})")
        print(f"  ratio keep-alive {r['ratio_keepalive']:.2f}x   new connection {r['ratio_new']:.2f}x")
    print("[routing, 1,000 mappings] median µs (p90)")
    for key, value in report["routing_1000_mappings"].items():
        print(f"  {key:22s} {value['median_us']:9.2f}  ({value['p90_us']:.2f})")
    print("[edges] median µs")
    for key, value in report["edges"].items():
        if isinstance(value, dict):
            row = "  ".join(f"{k}={v:.2f}" if k == "ratio" else f"{k}={v:.0f}" for k, v in value.items())
            print(f"  {key:22s} {row}")
        else:
            print(f"  {key:22s} {value:.0f}")


if __name__ == "__main__":
    main()
