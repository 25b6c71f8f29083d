"""Per-call cost of the Stockade sandbox against raw wasmtime-py and Extism.

Run: ``python tests/benchmarks/bench_sandbox.py [--calls 2000] [--rounds 3]``

Rows (median µs per call; every row is one complete call returning the echoed input):

  (a)  raw wasmtime-py: fresh Store + instantiate + call of the WAT echo component
  (a') the same with Stockade's engine settings (fuel, epoch deadline) — for reference
  (b)  ``Runtime.run`` on the same component (fresh store + instance, limits, WASI off
       because the component imports none, log, usage)
  (c)  Extism Python SDK, an equivalent echo plugin in WAT against Extism's host ABI:
       new ``Plugin`` from the manifest per call, new ``Plugin`` from a
       ``CompiledPlugin`` per call, and one reused ``Plugin``

Target: b/a <= 1.5.

Hook for more rows (for example Python and JavaScript plugin echoes): a module
``tests/benchmarks/bench_sandbox_plugins.py`` defining
``rows(runtime: Runtime) -> list[tuple[str, Callable[[], object]]]`` is imported if it
exists; each row is measured like the others. Code may also append to :data:`EXTRA_ROWS`
before calling :func:`main`.
"""

from __future__ import annotations

import argparse
import importlib
import os
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
from host.egress.port import DenyAllEgress
from host.runtime import Runtime, SandboxLimits
from host.runtime.engine import build_engine
from tests.support import wat

RowFactory = Callable[[Runtime], list[tuple[str, Callable[[], object]]]]
EXTRA_ROWS: list[RowFactory] = []
"""Factories of extra rows, measured after the built-in ones."""

INPUT = '{"message":"hello, sandbox"}'
LIMITS = SandboxLimits(fuel=10_000_000, memory_bytes=16 << 20, timeout_ms=5_000, max_log_bytes=65_536)

EXTISM_ECHO_WAT = """
(module
  (import "extism:host/env" "input_length" (func $input_length (result i64)))
  (import "extism:host/env" "input_load_u64" (func $input_load_u64 (param i64) (result i64)))
  (import "extism:host/env" "input_load_u8" (func $input_load_u8 (param i64) (result i32)))
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u64" (func $store_u64 (param i64 i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (func (export "echo") (result i32)
    (local $len i64) (local $off i64) (local $i i64)
    (local.set $len (call $input_length))
    (local.set $off (call $alloc (local.get $len)))
    (block $words_done
      (loop $words
        (br_if $words_done (i64.gt_u (i64.add (local.get $i) (i64.const 8)) (local.get $len)))
        (call $store_u64 (i64.add (local.get $off) (local.get $i)) (call $input_load_u64 (local.get $i)))
        (local.set $i (i64.add (local.get $i) (i64.const 8)))
        (br $words)))
    (block $bytes_done
      (loop $bytes
        (br_if $bytes_done (i64.ge_u (local.get $i) (local.get $len)))
        (call $store_u8 (i64.add (local.get $off) (local.get $i)) (call $input_load_u8 (local.get $i)))
        (local.set $i (i64.add (local.get $i) (i64.const 1)))
        (br $bytes)))
    (call $output_set (local.get $off) (local.get $len))
    (i32.const 0)))
"""
"""An Extism plugin (core module against Extism's host ABI) that echoes its input."""


def measure(fn: Callable[[], object], calls: int, rounds: int) -> tuple[float, float]:
    """(median, p90) in µs per call, median over ``rounds`` rounds of ``calls`` calls."""
    for _ in range(min(200, calls)):
        fn()
    medians, p90s = [], []
    for _ in range(rounds):
        samples = []
        for _ in range(calls):
            start = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - start)
        samples.sort()
        medians.append(statistics.median(samples) * 1e6)
        p90s.append(samples[int(len(samples) * 0.9)] * 1e6)
    return statistics.median(medians), statistics.median(p90s)


def raw_rows(echo: bytes) -> list[tuple[str, Callable[[], object]]]:
    """(a) and (a'): wasmtime-py used directly."""
    engine = wasmtime.Engine()
    component = wc.Component(engine, echo)
    linker = wc.Linker(engine)

    def raw() -> object:
        store = wasmtime.Store(engine)
        func = linker.instantiate(store, component).get_func(store, "call")
        assert func is not None
        return func(store, "echo", INPUT)

    metered_engine = build_engine()
    metered_component = wc.Component(metered_engine, echo)
    metered_linker = wc.Linker(metered_engine)

    def raw_metered() -> object:
        store = wasmtime.Store(metered_engine)
        store.set_fuel(LIMITS.fuel)
        store.set_epoch_deadline(1000)
        func = metered_linker.instantiate(store, metered_component).get_func(store, "call")
        assert func is not None
        return func(store, "echo", INPUT)

    assert raw() == INPUT and raw_metered() == INPUT
    return [("(a)  raw wasmtime-py: store+instantiate+call", raw),
            ("(a') raw, fuel + epoch engine", raw_metered)]


def stockade_row(rt: Runtime, echo: bytes) -> tuple[str, Callable[[], object]]:
    """(b): the Stockade sandbox."""
    loaded = rt.load(echo, sha256=wat.sha256(echo), name="echo")
    egress = DenyAllEgress()

    def call() -> object:
        return rt.run(loaded, tool="echo", input_json=INPUT, limits=LIMITS, egress=egress,
                      secret_available=_no_secret)

    assert rt.run(loaded, tool="echo", input_json=INPUT, limits=LIMITS, egress=egress,
                  secret_available=_no_secret).output == INPUT
    return ("(b)  Stockade Runtime.run", call)


def _no_secret(_name: str) -> bool:
    return False


def extism_rows() -> list[tuple[str, Callable[[], object]]]:
    """(c): Extism with an equivalent echo plugin."""
    try:
        import extism  # noqa: PLC0415  # optional peer, imported only for this row
        from extism.extism import CompiledPlugin  # noqa: PLC0415
    except ImportError:
        print("extism not installed: skipping (c)", file=sys.stderr)
        return []
    manifest = {"wasm": [{"data": bytes(wasmtime.wat2wasm(EXTISM_ECHO_WAT))}],
                "memory": {"max_pages": 256}, "timeout_ms": 5000}
    data = INPUT.encode()
    compiled = CompiledPlugin(manifest, wasi=False)
    reused = extism.Plugin(manifest, wasi=False)

    def new_plugin() -> object:
        return extism.Plugin(manifest, wasi=False).call("echo", data)

    def new_from_compiled() -> object:
        return extism.Plugin(compiled).call("echo", data)

    def reuse() -> object:
        return reused.call("echo", data)

    assert bytes(reuse()) == data and bytes(new_plugin()) == data and bytes(new_from_compiled()) == data
    return [("(c1) Extism: new Plugin per call", new_plugin),
            ("(c2) Extism: new Plugin from CompiledPlugin", new_from_compiled),
            ("(c3) Extism: reused Plugin", reuse)]


def plugin_rows(rt: Runtime) -> list[tuple[str, Callable[[], object]]]:
    """Rows from the hook module and :data:`EXTRA_ROWS`."""
    factories = list(EXTRA_ROWS)
    try:
        hook = importlib.import_module("tests.benchmarks.bench_sandbox_plugins")
    except ModuleNotFoundError as exc:
        if exc.name not in ("tests.benchmarks.bench_sandbox_plugins", "tests.benchmarks"):
            raise
    else:
        factories.append(hook.rows)
    return [row for factory in factories for row in factory(rt)]


def main(argv: list[str] | None = None) -> int:
    """Measure and print the table; returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per round (default 2000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per row (default 3)")
    args = parser.parse_args(argv)
    echo = wat.echo_component()
    results: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as state, Runtime(HostConfig(state_dir=Path(state))) as rt:
        rows = [*raw_rows(echo), stockade_row(rt, echo), *extism_rows(), *plugin_rows(rt)]
        for label, fn in rows:
            results[label] = measure(fn, args.calls, args.rounds)
            print(f"  measured {label}", file=sys.stderr)
    _print(results, args)
    return 0


def _print(results: dict[str, tuple[float, float]], args: argparse.Namespace) -> None:
    width = max(len(label) for label in results)
    print(f"\nmedian per call over {args.rounds} x {args.calls} calls; "
          f"wasmtime {wasmtime_version_text()}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}\n")
    print(f"{'row':<{width}}  {'median µs':>10}  {'p90 µs':>9}")
    for label, (median, p90) in results.items():
        print(f"{label:<{width}}  {median:>10.1f}  {p90:>9.1f}")
    by_prefix = {label.split()[0]: median for label, (median, _) in results.items()}
    b = by_prefix["(b)"]
    print(f"\nb/a  = {b / by_prefix['(a)']:.2f}   (target <= 1.5)")
    print(f"b/a' = {b / by_prefix[chr(40) + 'a' + chr(39) + chr(41)]:.2f}")
    for key, name in (("(c1)", "new plugin per call"), ("(c2)", "new plugin from CompiledPlugin"),
                      ("(c3)", "reused plugin")):
        if key in by_prefix:
            print(f"b/{key[1:-1]} = {b / by_prefix[key]:.2f}   (Extism {name})")


def wasmtime_version_text() -> str:
    """The installed wasmtime-py version."""
    from host.runtime.engine import wasmtime_version  # noqa: PLC0415

    return wasmtime_version()


if __name__ == "__main__":
    raise SystemExit(main())
