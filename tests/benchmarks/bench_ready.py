"""Ready instances and the pooling allocator on and off: plugin echo latency and CPU per
call, interleaved in one run.

Three runtimes on the same compiled artifacts: ``ready_instances=0, pool_instances=0``
(the baseline: every call instantiates its own instance, allocated on demand),
``ready_instances=0`` with the pooling allocator (the default ``pool_instances``), and
both on (the defaults: instances made ahead by the pool's thread, in allocator slots). Rounds alternate between them so load drifts hit both alike. Latency is the
caller's wall time (median); CPU is the process's CPU time per call, the pool's thread
included (what the pool costs). Targets: Python ≤ 0.3×, JavaScript ≤ 0.7× of "off".

    python tests/benchmarks/bench_ready.py [--calls N] [--rounds R]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from host.config import HostConfig
from host.egress.port import DenyAllEgress
from host.runtime import LoadedComponent, Runtime, SandboxLimits
from tests.support.plugins import SHARED_ARTIFACTS_DIR, build_test_plugin

LIMITS = SandboxLimits(fuel=2_000_000_000, memory_bytes=128 << 20, timeout_ms=10_000, max_log_bytes=65_536)
INPUT = '{"message":"hello, sandbox"}'
PLUGINS = (("Python echo (componentize-py)", "echo_py", "echo.echo", 0.3),
           ("JavaScript echo (componentize-js)", "echo_js", "echojs.echo", 0.7))  # fmt: skip


def _round(rt: Runtime, component: LoadedComponent, tool: str, calls: int) -> tuple[list[float], float]:
    walls = []
    cpu = time.process_time()
    for _ in range(calls):
        started = time.perf_counter()
        out = rt.run(component, tool=tool, input_json=INPUT, limits=LIMITS, egress=DenyAllEgress(),
                     secret_available=lambda _n: False).output
        walls.append(time.perf_counter() - started)
        if out != INPUT:
            raise RuntimeError(f"echo returned {out!r}")
        time.sleep(0.002)  # an agent's calls are not back to back: give the pool's thread room
    return walls, (time.process_time() - cpu) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        configs = {"off": (0, 0), "pool": (0, 64), "on": (2, 64)}  # (ready_instances, pool_instances)
        runtimes = {
            key: Runtime(HostConfig(state_dir=Path(tmp) / key, artifact_cache_dir=SHARED_ARTIFACTS_DIR,
                                    ready_instances=depth, pool_instances=slots))
            for key, (depth, slots) in configs.items()
        }  # fmt: skip
        try:
            print(f"{'plugin':36} {'ready, pool':>11} {'median µs':>10} {'CPU µs/call':>12} {'ratio':>6} {'target':>7}")
            for label, name, tool, target in PLUGINS:
                build = build_test_plugin(name)
                module = build.module_path.read_bytes()
                loaded = {d: rt.load(module, sha256=build.module_sha256, name=name) for d, rt in runtimes.items()}
                walls: dict[str, list[float]] = {key: [] for key in runtimes}
                cpus: dict[str, list[float]] = {key: [] for key in runtimes}
                for d, rt in runtimes.items():  # warm-up: the pooled key is learned on the first call
                    _round(rt, loaded[d], tool, 20)
                for _ in range(args.rounds):
                    for d, rt in runtimes.items():
                        w, c = _round(rt, loaded[d], tool, args.calls)
                        walls[d] += w
                        cpus[d].append(c)
                med = {d: statistics.median(w) * 1e6 for d, w in walls.items()}
                cpu = {d: statistics.median(c) * 1e6 for d, c in cpus.items()}
                names = {"off": "off, off", "pool": "off, on", "on": "on, on"}
                for key in runtimes:
                    ratio = med[key] / med["off"]
                    goal = f"≤ {target}" if key == "on" else ""
                    first = label if key == "off" else ""
                    print(f"{first:36} {names[key]:>11} {med[key]:10.0f} {cpu[key]:12.0f} {ratio:6.2f} {goal:>7}")
        finally:
            for rt in runtimes.values():
                rt.close()
    print(f"load average {os.getloadavg()[0]:.2f} (2 cores); CPU includes the pool's refill thread")


if __name__ == "__main__":
    main()
