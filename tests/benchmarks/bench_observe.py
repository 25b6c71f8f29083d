"""Cost of observability (host.observe) on ``Host.call``, ratios in one run.

Run: ``python tests/benchmarks/bench_observe.py [--calls 2000] [--rounds 5] [--json]``
(a script, not a test).

Each mode runs in a child process of its own (a fresh interpreter: nothing one mode
imported or enabled leaks into another), the modes interleaved round by round so that
all of them see the same machine load; each child opens one host (the WAT echo tool of
``tests/support/hosts.py``, audit log on /dev/shm so fsync does not dominate), warms up,
then times ``--calls`` calls and reports their median. A row is the median over rounds.

- ``without the extra``: OpenTelemetry cannot be imported at all (an import hook refuses
  it), as on a host installed without ``stockade[otel]``: the baseline;
- ``extra, tracing off``: OpenTelemetry importable, :func:`host.observe.enable` not called
  (the default): target 1.0x;
- ``extra, API only``: enabled with the API's default providers (no SDK configured:
  non-recording spans, no-op instruments);
- ``extra, SDK + no-op exporter``: enabled with the SDK's ``TracerProvider`` and a
  ``BatchSpanProcessor`` feeding an exporter that drops every batch, and a
  ``MeterProvider`` whose reader collects but never exports, exemplars off (as ``stockade
  serve`` configures it): what recording costs without the network: target <= 1.1x;
- ``extra, SDK, 10 % of traces sampled``: the same with the standard ratio sampler
  (``OTEL_TRACES_SAMPLER=parentbased_traceidratio``, ``OTEL_TRACES_SAMPLER_ARG=0.1``):
  unsampled calls get non-recording spans; metrics still count every call.

The WAT echo is the cheapest call the host can make (~0.2-0.3 ms), so the overhead of
the ~12 spans of a call shows here at its largest relative size; ``--plugin-us N`` adds
a busy loop of about N µs to each call's guest to show the ratio for a slower tool (a
componentize-py plugin's call takes ~2.4 ms here).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

MODES = {
    "without the extra": "blocked",
    "extra, tracing off": "off",
    "extra, API only": "api",
    "extra, SDK + no-op exporter": "sdk",
    "extra, SDK, 10 % of traces sampled": "sampled",
}

CHILD = textwrap.dedent(
    """
    import importlib.abc, json, statistics, sys, time
    from pathlib import Path
    sys.path.insert(0, {repo!r})
    mode, calls, root, spin = {mode!r}, {calls}, Path({root!r}), {spin}

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "opentelemetry":
                raise ImportError("blocked: the otel extra is not installed")
            return None

    if mode == "blocked":
        sys.meta_path.insert(0, Refuse())
    from host import HostConfig, observe
    from tests.support import wat
    from tests.support.hosts import make_host

    if mode == "api":
        observe.enable()
    elif mode in ("sdk", "sampled"):
        from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, TraceIdRatioBased

        class Drop(SpanExporter):
            def export(self, spans):
                return SpanExportResult.SUCCESS

        tracer = TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.1)) if mode == "sampled" else ALWAYS_ON)
        tracer.add_span_processor(BatchSpanProcessor(Drop()))
        meters = MeterProvider(metric_readers=[InMemoryMetricReader()], exemplar_filter=AlwaysOffExemplarFilter())
        observe.enable(tracer_provider=tracer, meter_provider=meters)
    module = None
    if spin:
        module = wat.guest(
            "(local $i i32) (local.set $i (i32.const " + str(spin) + "))"
            "(loop $l (local.set $i (i32.sub (local.get $i) (i32.const 1))) (br_if $l (local.get $i)))"
            "(call $ok (local.get $ip) (local.get $il))"
        )
    config = HostConfig(state_dir=root / "state", audit_durability="flush")
    fx = make_host(root, audit=root / "audit.log", config=config, module=module)
    request = fx.request(input={{"message": "hello, sandbox"}})
    for _ in range(200):
        assert fx.host.call(request).ok
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        result = fx.host.call(request)
        times.append(time.perf_counter() - started)
        assert result.ok
    fx.host.close()
    loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
    print(json.dumps({{"median_us": statistics.median(times) * 1e6, "otel_modules": len(loaded)}}))
    """
)

SPIN_PER_US = 2100  # loop turns per µs of guest time, roughly (Cranelift, this machine)


def _child(mode: str, calls: int, spin: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(dir="/dev/shm") as root:
        code = CHILD.format(repo=str(REPO), mode=mode, calls=calls, root=root, spin=spin)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"mode {mode}: {done.stderr}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    """Run every mode ``--rounds`` times, interleaved; print medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--plugin-us", type=int, default=0, help="busy guest time per call, µs (default: 0)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    spin = args.plugin_us * SPIN_PER_US
    samples: dict[str, list[float]] = {name: [] for name in MODES}
    modules: dict[str, float] = {}
    for _ in range(args.rounds):
        for name, mode in MODES.items():
            result = _child(mode, args.calls, spin)
            samples[name].append(result["median_us"])
            modules[name] = result["otel_modules"]
    medians = {name: statistics.median(values) for name, values in samples.items()}
    base = medians["without the extra"]
    rows = [
        {"mode": name, "median_us": round(medians[name], 1), "ratio": round(medians[name] / base, 3),
         "opentelemetry_modules_loaded": int(modules[name])}
        for name in MODES
    ]  # fmt: skip
    if args.json:
        print(json.dumps({"calls": args.calls, "rounds": args.rounds, "plugin_us": args.plugin_us, "rows": rows}))
        return 0
    print(f"Host.call, WAT echo{f' + ~{args.plugin_us} µs guest loop' if args.plugin_us else ''}, "
          f"{args.calls} calls x {args.rounds} rounds, median of round medians")
    for row in rows:
        print(f"  {row['mode']:<30} {row['median_us']:>9.1f} µs  {row['ratio']:.3f}x  "
              f"(opentelemetry modules loaded: {row['opentelemetry_modules_loaded']})")
    print("Targets: tracing off 1.0x; SDK + no-op exporter <= 1.1x (of a real tool's call; see --plugin-us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
