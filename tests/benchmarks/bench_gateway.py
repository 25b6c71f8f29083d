"""End-to-end cost of ``Host.call`` against raw wasmtime-py and Extism (issue 5).

Run: ``python tests/benchmarks/bench_gateway.py [--calls 1000] [--rounds 3]``

Rows (median µs per call, the trivial WAT echo tool everywhere):

  (a)  raw wasmtime-py: fresh Store + instantiate + call
  (h)  ``Host.call`` end to end: envelope, registry, policy (file engine + tool policy),
       input validation, action digest, rate limit, sandbox, output validation, one
       audit record with flush + fsync — audit log on the working disk
  (h') the same with the audit log on /dev/shm (fsync is nearly free there): what the
       pipeline costs when the disk is fast
  (c1) Extism, new Plugin per call; (c3) Extism, reused Plugin

Then a per-stage breakdown measured in isolation on the same host: policy (engine
decisions + tool policy + grants), validation (canonicalize), sandbox (Runtime.run),
audit (one append with fsync). Target: h/a <= 2.0.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from host.audit import AuditLog
from host.egress.port import DenyAllEgress
from host.schema import canonicalize
from tests.benchmarks.bench_sandbox import extism_rows, measure, raw_rows
from tests.support import wat
from tests.support.hosts import ALICE, HostFixture, make_host

Row = tuple[str, Callable[[], object]]


def _open(root: Path, audit_dir: Path) -> HostFixture:
    return make_host(root, audit=AuditLog(audit_dir / "audit.log"))


def host_rows(fx: HostFixture, label: str) -> list[Row]:
    request = fx.request(input={"message": "hello, sandbox"})

    def call() -> object:
        result = fx.host.call(request)
        if not result.ok:
            raise RuntimeError(result.error)
        return result

    return [(label, call)]


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


def main(argv: list[str] | None = None) -> int:
    """Measure and print the table; returns 0."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="calls per round (default 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per row (default 3)")
    args = parser.parse_args(argv)
    results: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as disk, tempfile.TemporaryDirectory(dir="/dev/shm") as shm:
        fx_disk = _open(Path(disk) / "disk", Path(disk))
        fx_shm = _open(Path(shm) / "shm", Path(shm))
        rows: list[Row] = [*raw_rows(wat.echo_component())[:1], *host_rows(fx_disk, "(h) Host.call, audit on disk"),
                           *host_rows(fx_shm, "(h') Host.call, audit on /dev/shm"),
                           *[r for r in extism_rows() if r[0].startswith(("(c1)", "(c3)"))], *stage_rows(fx_disk)]
        for label, fn in rows:
            results[label] = measure(fn, args.calls, args.rounds)
            print(f"  measured {label}", file=sys.stderr)
        fx_disk.host.close()
        fx_shm.host.close()
    width = max(len(label) for label in results)
    print(f"\nmedian per call over {args.rounds} x {args.calls} calls\n")
    print(f"{'row':<{width}}  {'median µs':>10}  {'p90 µs':>9}")
    for label, (median, p90) in results.items():
        print(f"{label:<{width}}  {median:>10.1f}  {p90:>9.1f}")
    by = {label.split()[0]: median for label, (median, _) in results.items()}
    print(f"\nh/a  = {by['(h)'] / by['(a)']:.2f}   (target <= 2.0; includes one fsync per call)")
    print(f"h'/a = {by[chr(40) + 'h' + chr(39) + chr(41)] / by['(a)']:.2f}   (audit on tmpfs)")
    for key in ("(c1)", "(c3)"):
        if key in by:
            print(f"h/{key[1:-1]} = {by['(h)'] / by[key]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
