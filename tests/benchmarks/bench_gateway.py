"""End-to-end cost of ``Host.call`` against raw wasmtime-py and Extism (issues 5 and 14).

Run: ``python tests/benchmarks/bench_gateway.py [--calls 1000] [--rounds 3]``

Latency rows (median µs per call, the trivial WAT echo tool everywhere):

  (a)  raw wasmtime-py: fresh Store + instantiate + call
  (f)  one fsync: write a 600-byte line to a file on the working disk and fsync it
  (h') ``Host.call`` end to end with the audit log on /dev/shm (tmpfs: fsync is nearly
       free): envelope, registry, policy (file engine + tool policy), input validation,
       action digest, rate limit, sandbox, output validation, outcome record
  (h0) (h') with the pooling allocator off (``HostConfig.pool_instances=0``)
  (b) / (b0) ``Runtime.run`` alone (the sandbox stage), pooling allocator on / off
  (h)  the same, audit log on the working disk, durability ``full`` (fsync per call)
  (hf) the same, audit log on the working disk, durability ``flush``
  (c1) Extism, new Plugin per call; (c3) Extism, reused Plugin

Throughput rows (calls per second over a fixed number of calls per thread):

  (t1) / (t8)  ``Host.call`` from 1 / 8 threads, audit on disk, ``full`` (group commit)
  (s1) / (s2)  a CPU-bound guest (a fixed loop of 36 M fuel, then echo) from 1 / 2
               threads, audit on /dev/shm: wasm runs without the GIL, so two threads
               should nearly double it on two cores
  (r1) / (r2)  the same guest through raw wasmtime-py from 1 / 2 threads: what the
               machine allows right now (on a shared machine r2/r1 falls below 2 too)

Then a per-stage breakdown measured in isolation on the same host: policy (engine
decisions + tool policy + grants), validation (canonicalize), sandbox (Runtime.run),
audit (one append with fsync).

Targets: h'/a <= 1.5; (h - f)/a <= 2.0; hf/a <= 2.2; t8/t1 >= 3; s2/s1 >= 1.7.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import wasmtime
from wasmtime import component as wc

from host.config import HostConfig
from host.egress.port import DenyAllEgress
from host.formats.schema import canonicalize
from tests.benchmarks.bench_sandbox import extism_rows, measure, raw_rows
from tests.support import wat
from tests.support.hosts import ALICE, HostFixture, make_host

Row = tuple[str, Callable[[], object]]
SPIN_ITERATIONS = 6_000_000  # loop turns of the CPU-bound guest (36 M fuel, ~6 ms)


def spin_component() -> bytes:
    """``call`` counts down a fixed loop, then returns its input (an echo)."""
    return wat.guest(
        f"""(local $i i32)
        (local.set $i (i32.const {SPIN_ITERATIONS}))
        (loop $spin
          (local.set $i (i32.sub (local.get $i) (i32.const 1)))
          (br_if $spin (local.get $i)))
        (call $ok (local.get $ip) (local.get $il))"""
    )


def _open(
    root: Path, audit_dir: Path, durability: str = "full", module: bytes | None = None, pool: int = 64
) -> HostFixture:
    config = HostConfig(
        state_dir=root / "state", audit_durability=durability, pool_instances=pool  # type: ignore[arg-type]
    )
    return make_host(root, audit=audit_dir / "audit.log", config=config, module=module)


def _call(fx: HostFixture) -> Callable[[], object]:
    request = fx.request(input={"message": "hello, sandbox"})

    def call() -> object:
        result = fx.host.call(request)
        if not result.ok:
            raise RuntimeError(result.error)
        return result

    return call


def _sandbox(fx: HostFixture) -> Callable[[], object]:
    return dict(stage_rows(fx))["  stage: sandbox"]


def fsync_row(directory: Path) -> Row:
    fd = os.open(directory / "fsync.probe", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    line = b"x" * 599 + b"\n"

    def one() -> object:
        os.write(fd, line)
        os.fsync(fd)
        return None

    return ("(f)  one 600-byte append + fsync on disk", one)


def stage_rows(fx: HostFixture) -> list[Row]:
    host = fx.host
    request = fx.request(input={"message": "hello, sandbox"})
    plan = host.prepare(request)
    tool = host.registry.get("echo.say", "1.0.0")
    component = host._packages["echo"].component
    limits = host._limits(tool)
    engine, store = host._policy, host._tool_policy

    def policy() -> object:
        for permission in ("tool.call:echo.say", "echo.use"):
            engine.authorize(ALICE, "p", permission)
        store.resolve("alice", "p", tool="echo.say", service="echo", effect="read")
        return host.grants.discharges(ALICE.key, "s1", "echo.say")

    def validation() -> object:
        return canonicalize(tool.input_schema, request.input, max_bytes=65536)

    def sandbox() -> object:
        return host._runtime.run(component, tool="echo.say", input_json=plan.canonical_input.decode(),
                                 limits=limits, egress=DenyAllEgress(), secret_available=lambda _n: False)

    def audit() -> object:
        return host._audit.append("bench", {"tool": "echo.say", "input": request.input})

    return [("  stage: policy", policy), ("  stage: prepare (policy+validation+digest)", lambda: host.prepare(request)),
            ("  stage: validation", validation), ("  stage: sandbox", sandbox), ("  stage: audit append+fsync", audit)]


def measure_paired(first: Callable[[], object], second: Callable[[], object], calls: int, rounds: int
                   ) -> tuple[tuple[float, float], tuple[float, float]]:
    """:func:`measure` for two functions called alternately, so both see the same disk
    (fsync latency on a shared disk drifts by several times within a minute)."""
    samples: list[list[float]] = [[], []]
    for _ in range(min(50, calls)):
        first()
        second()
    out = []
    for _ in range(rounds):
        samples = [[], []]
        for _ in range(calls):
            for index, fn in enumerate((first, second)):
                start = time.perf_counter()
                fn()
                samples[index].append(time.perf_counter() - start)
        out.append([(statistics.median(xs) * 1e6, sorted(xs)[int(len(xs) * 0.9)] * 1e6) for xs in samples])
    pick = [(statistics.median(r[i][0] for r in out), statistics.median(r[i][1] for r in out)) for i in (0, 1)]
    return pick[0], pick[1]


def throughput(fn: Callable[[], object], threads: int, calls: int, rounds: int) -> float:
    """Median calls per second over ``rounds`` runs of ``calls`` calls in each of ``threads``."""
    for _ in range(min(50, calls)):
        fn()
    rates = []
    for _ in range(rounds):
        barrier = threading.Barrier(threads + 1)

        def work(barrier: threading.Barrier) -> None:
            barrier.wait()
            for _ in range(calls):
                fn()

        workers = [threading.Thread(target=work, args=(barrier,)) for _ in range(threads)]
        for w in workers:
            w.start()
        barrier.wait()
        start = time.perf_counter()
        for w in workers:
            w.join()
        rates.append(threads * calls / (time.perf_counter() - start))
    return statistics.median(rates)


def raw_spin() -> Callable[[], object]:
    """The CPU-bound guest through raw wasmtime-py: fresh Store + instantiate + call."""
    engine = wasmtime.Engine()
    component = wc.Component(engine, spin_component())
    linker = wc.Linker(engine)

    def call() -> object:
        store = wasmtime.Store(engine)
        func = linker.instantiate(store, component).get_func(store, "call")
        assert func is not None
        return func(store, "echo.say", '{"message":"hello, sandbox"}')

    return call


def main(argv: list[str] | None = None) -> int:
    """Measure and print the table; returns 0."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="calls per round (default 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per row (default 3)")
    args = parser.parse_args(argv)
    results: dict[str, tuple[float, float]] = {}
    rates: dict[str, float] = {}
    here = Path(__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory(dir=here) as disk, tempfile.TemporaryDirectory(dir="/dev/shm") as shm:
        disk_dir, shm_dir = Path(disk), Path(shm)
        fx_shm = _open(shm_dir / "shm", shm_dir)
        fx_nopool = _open(shm_dir / "nopool", shm_dir / "nopool", pool=0)
        fx_full = _open(disk_dir / "full", disk_dir / "full")
        fx_flush = _open(disk_dir / "flush", disk_dir / "flush", "flush")
        fx_spin = _open(shm_dir / "spin", shm_dir / "spin", module=spin_component())
        fsync_label, fsync = fsync_row(disk_dir)
        full_label = "(h)  Host.call, audit on disk, full (measured alternately with (f))"
        results[fsync_label], results[full_label] = measure_paired(
            fsync, _call(fx_full), max(args.calls // 4, 50), args.rounds
        )
        print("  measured (f) and (h)", file=sys.stderr)
        rows: list[Row] = [
            *raw_rows(wat.echo_component())[:1],
            ("(h') Host.call, audit on /dev/shm", _call(fx_shm)),
            ("(h0) Host.call, audit on /dev/shm, pooling allocator off", _call(fx_nopool)),
            ("(b)  Runtime.run (sandbox stage), pooling allocator on", _sandbox(fx_shm)),
            ("(b0) Runtime.run (sandbox stage), pooling allocator off", _sandbox(fx_nopool)),
            ("(hf) Host.call, audit on disk, flush", _call(fx_flush)),
            *[r for r in extism_rows() if r[0].startswith(("(c1)", "(c3)"))],
            *stage_rows(fx_full),
        ]
        for label, fn in rows:
            results[label] = measure(fn, args.calls, args.rounds)
            print(f"  measured {label}", file=sys.stderr)
        per_thread = max(args.calls // 4, 50)
        spin = raw_spin()
        groups = [
            [("(t1) Host.call x 1 thread, disk, full", _call(fx_full), 1),
             ("(t8) Host.call x 8 threads, disk, full", _call(fx_full), 8)],
            [("(s1) CPU-bound guest x 1 thread", _call(fx_spin), 1),
             ("(s2) CPU-bound guest x 2 threads", _call(fx_spin), 2),
             ("(r1) CPU-bound guest, raw wasmtime x 1 thread", spin, 1),
             ("(r2) CPU-bound guest, raw wasmtime x 2 threads", spin, 2)],
        ]
        for group in groups:  # the rows of a group alternate round by round: same load for each
            samples: dict[str, list[float]] = {label: [] for label, _, _ in group}
            for _ in range(args.rounds):
                for label, fn, threads in group:
                    samples[label].append(throughput(fn, threads, per_thread, 1))
            for label, values in samples.items():
                rates[label] = statistics.median(values)
                print(f"  measured {label}", file=sys.stderr)
        for fx in (fx_shm, fx_nopool, fx_full, fx_flush, fx_spin):
            fx.host.close()
    _print(results, rates, args)
    return 0


def _print(results: dict[str, tuple[float, float]], rates: dict[str, float], args: argparse.Namespace) -> None:
    width = max(len(label) for label in [*results, *rates])
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nmedian per call over {args.rounds} x {args.calls} calls; {os.cpu_count()} CPUs, load average {load}\n")
    print(f"{'row':<{width}}  {'median µs':>10}  {'p90 µs':>9}")
    for label, (median, p90) in results.items():
        print(f"{label:<{width}}  {median:>10.1f}  {p90:>9.1f}")
    print(f"\n{'row':<{width}}  {'calls/s':>10}")
    for label, rate in rates.items():
        print(f"{label:<{width}}  {rate:>10.0f}")
    by = {label.split()[0]: median for label, (median, _) in results.items()}
    rate = {label.split()[0]: value for label, value in rates.items()}
    a, f = by["(a)"], by["(f)"]
    print()
    print(f"h'/a       = {by[chr(40) + 'h' + chr(39) + chr(41)] / a:.2f}   (target <= 1.5; audit on tmpfs)")
    print(f"h0/a       = {by['(h0)'] / a:.2f}   (pooling allocator off, same run)")
    print(f"b/a, b0/a  = {by['(b)'] / a:.2f}, {by['(b0)'] / a:.2f}   (Runtime.run, pooling on / off)")
    print(f"(h - f)/a  = {(by['(h)'] - f) / a:.2f}   (target <= 2.0, i.e. h <= 2a + f; h/(a + f) = {by['(h)'] / (a + f):.2f})")
    print(f"hf/a       = {by['(hf)'] / a:.2f}   (target <= 2.2; flush mode, on disk)")
    print(f"t8/t1      = {rate['(t8)'] / rate['(t1)']:.2f}   (target >= 3; group commit)")
    print(f"s2/s1      = {rate['(s2)'] / rate['(s1)']:.2f}   (target >= 1.7; CPU-bound guest)"
          f"   r2/r1 = {rate['(r2)'] / rate['(r1)']:.2f} (raw wasmtime, same run)")
    for key in ("(c1)", "(c3)"):
        if key in by:
            print(f"h/{key[1:-1]}       = {by['(h)'] / by[key]:.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
