"""Host cost of moving HTTP bodies and headers across the WIT boundary.

Run: ``python tests/benchmarks/bench_boundary.py [--runs 7]``

Every row is one complete ``Runtime.run`` of a hand-written guest
(:func:`tests.support.wat.http_boundary_component`) whose ``http-request`` goes through
the host path: lifting the request record, the header-block and latin-1 body mappings,
an in-memory egress port, mapping and lowering the response. The guest's own work (a
wasm loop filling its body) is included, so each row is an upper bound on the host path.

Rows (median ms over ``--runs`` calls):

  (0) an empty request and response (the fixed cost of a call with one request)
  (1) 8 MiB request body, ASCII                (8 MiB of UTF-8 across the boundary)
  (2) 8 MiB request body, bytes 0x80..0xFF     (16 MiB of UTF-8: the worst case)
  (1g), (2g) the guests of (1) and (2) filling their body but sending none: the host path
      of a request body is (1) - (1g) and (2) - (2g)
  (3) 8 MiB response body, ASCII
  (4) 8 MiB response body, bytes 0x80..0xFF
  (5) 600 000 empty headers (4.8 MB header block), refused before parsing
  (b) baseline, the 1.0.0 way: a 1 MiB ``list<u8>`` lifted by wasmtime-py
  (c) for comparison: Python's base64 decode of 8 MiB (what a base64 mapping would add)

Targets: the host path of each 8 MiB body < 100 ms. Ratios are printed against (b)
scaled to 8 MiB (1.0.0 could not actually carry 8 MiB: it trapped past ~3-4 MiB).
Measured on the shared 2-core machine (load ~11): ASCII rows 25-55 ms (met); the
all-high-bytes rows (2) and (4) 120-200 ms (missed): their UTF-8 form is 16 MiB, every
fresh 16 MiB buffer costs ~40 ms of page faults here, and CPython's UTF-8 codec turns
two-byte sequences into latin-1 at ~300 MB/s. Row (c) shows why base64 is no way out:
its decode alone costs ~80 ms for *every* 8 MiB body, text included.
"""

from __future__ import annotations

import argparse
import base64
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import wasmtime
from wasmtime import component as wc

from host.config import HostConfig
from host.egress.port import HttpFailure, HttpRequest, HttpResponse
from host.runtime import Runtime, SandboxLimits
from tests.support import wat

MiB = 1 << 20
SIZE = 8 * MiB
URL = "https://api.example/v1/upload"
LIMITS = SandboxLimits(fuel=2_000_000_000, memory_bytes=256 * MiB, timeout_ms=30_000, max_log_bytes=4096)

LIST_U8_WAT = """
(component
  (core module $m
    (memory (export "mem") 17)
    (func (export "get") (result i32)
      (i32.store (i32.const 0) (i32.const 16)) (i32.store (i32.const 4) (i32.const 1048576))
      (i32.const 0)))
  (core instance $i (instantiate $m))
  (func $get (result (list u8)) (canon lift (core func $i "get") (memory (core memory $i "mem"))))
  (export "get" (func $get))
)
"""
"""Returns 1 MiB as ``list<u8>``: how 1.0.0 carried a body."""


class _Port:
    """Answers 200 with a fixed body; checks the request body's size."""

    def __init__(self, response_body: bytes, expect_request: int) -> None:
        self.response = HttpResponse(200, (("Content-Type", "application/octet-stream"),), response_body)
        self.expect = expect_request

    def send(self, request: HttpRequest) -> HttpResponse | HttpFailure:
        if len(request.body or b"") != self.expect:
            raise RuntimeError(f"request body of {len(request.body or b'')} bytes, expected {self.expect}")
        return self.response


def _median_ms(fn: Callable[[], object], runs: int) -> float:
    fn()  # warm up (compile, caches)
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def _call_row(rt: Runtime, module: bytes, port: _Port, expected: str) -> Callable[[], object]:
    loaded = rt.load(module, sha256=wat.sha256(module), name="boundary")

    def call() -> object:
        result = rt.run(loaded, tool="t", input_json=URL, limits=LIMITS, egress=port,
                        secret_available=lambda _n: False)
        if result.output != expected:
            raise RuntimeError(f"unexpected output {result.output[:80]!r}")
        return result

    return call


def _list_u8_row() -> Callable[[], object]:
    engine = wasmtime.Engine()
    component = wc.Component(engine, wasmtime.wat2wasm(LIST_U8_WAT))
    linker = wc.Linker(engine)

    def call() -> object:
        store = wasmtime.Store(engine)
        func = linker.instantiate(store, component).get_func(store, "get")
        if func is None:
            raise RuntimeError("no get export")
        return func(store)

    return call


def main(argv: list[str] | None = None) -> int:
    """Measure and print the rows; returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="calls per row (default 7)")
    args = parser.parse_args(argv)
    pages = (4 * SIZE) // 65536 + 16
    ascii_body, high_body = b"a" * SIZE, bytes(range(128, 256)) * (SIZE // 128)
    encoded = base64.b64encode(high_body)
    with tempfile.TemporaryDirectory() as state, Runtime(HostConfig(state_dir=Path(state))) as rt:
        rows: list[tuple[str, Callable[[], object]]] = [
            ("(0) empty request and response",
             _call_row(rt, wat.http_boundary_component(), _Port(b"", 0), "ok:200:0")),
            ("(1) 8 MiB request body, ASCII",
             _call_row(rt, wat.http_boundary_component(body_bytes=SIZE, fill="ascii", pages=pages),
                       _Port(b"", SIZE), "ok:200:0")),
            ("(2) 8 MiB request body, bytes >= 0x80",
             _call_row(rt, wat.http_boundary_component(body_bytes=SIZE, fill="latin1", pages=pages),
                       _Port(b"", SIZE), "ok:200:0")),
            ("(1g) guest of (1), body not sent",
             _call_row(rt, wat.http_boundary_component(body_bytes=SIZE, fill="ascii", pages=pages,
                                                       send_body=False), _Port(b"", 0), "ok:200:0")),
            ("(2g) guest of (2), body not sent",
             _call_row(rt, wat.http_boundary_component(body_bytes=SIZE, fill="latin1", pages=pages,
                                                       send_body=False), _Port(b"", 0), "ok:200:0")),
            ("(3) 8 MiB response body, ASCII",
             _call_row(rt, wat.http_boundary_component(pages=pages), _Port(ascii_body, 0), f"ok:200:{SIZE}")),
            ("(4) 8 MiB response body, bytes >= 0x80",
             _call_row(rt, wat.http_boundary_component(pages=pages), _Port(high_body, 0), f"ok:200:{2 * SIZE}")),
            ("(5) 600k empty headers, refused",
             _call_row(rt, wat.http_boundary_component(header_count=600_000, pages=pages), _Port(b"", 0),
                       "err:2:the header block is over 65536 characters")),
            ("(b) 1.0.0 way: 1 MiB list<u8> lifted", _list_u8_row()),
            ("(c) base64 decode of 8 MiB (Python)", lambda: base64.b64decode(encoded)),
        ]
        results = {name: _median_ms(fn, args.runs) for name, fn in rows}
    old_8mib = results["(b) 1.0.0 way: 1 MiB list<u8> lifted"] * 8
    host_path = {
        "(1) 8 MiB request body, ASCII": results["(1) 8 MiB request body, ASCII"]
        - results["(1g) guest of (1), body not sent"],
        "(2) 8 MiB request body, bytes >= 0x80": results["(2) 8 MiB request body, bytes >= 0x80"]
        - results["(2g) guest of (2), body not sent"],
        "(3) 8 MiB response body, ASCII": results["(3) 8 MiB response body, ASCII"] - results["(0) empty request and response"],
        "(4) 8 MiB response body, bytes >= 0x80": results["(4) 8 MiB response body, bytes >= 0x80"]
        - results["(0) empty request and response"],
    }
    print(f"{'row':44} {'call ms':>8} {'host path ms':>13} {'vs 1.0.0':>9}  target (host path < 100 ms)")
    for name, ms in results.items():
        path = host_path.get(name)
        if path is None:
            print(f"{name:44} {ms:8.1f}")
            continue
        verdict = "ok" if path < 100 else "MISSED"
        print(f"{name:44} {ms:8.1f} {path:13.1f} {path / old_8mib:8.4f}x  {verdict}")
    print(f"(1.0.0 estimate for 8 MiB: {old_8mib:.0f} ms of lifting; it actually traps past ~3-4 MiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
