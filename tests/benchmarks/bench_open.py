"""Loading: ``Host.open`` of a lock with five Python plugins.

Run: ``python tests/benchmarks/bench_open.py [--rounds 5] [--cold]``

Rows:

  (o)  warm ``Host.open`` + ``close`` of a state dir opened before on the same lock,
       every artifact in the compiled-artifact cache (verify the lock's digests, read +
       HMAC-verify + deserialize five ~40 MB artifacts, load checks, accept the
       generation); median of ``--rounds`` opens
  (m)  resident memory per loaded Python plugin: RSS of a fresh process after a warm
       ``open`` minus before it, divided by five; then the same after one call of each
       plugin (a fresh instance per call: what the calls leave behind)
  (k)  with ``--cold``: the same open with an empty artifact cache (compiles all five),
       wall time and process CPU time (all threads); CPU / wall > 1 means compilation used
       more than one core

The plugins are built with the test build cache (``tests.support.plugins.CACHE_DIR``); the warm
artifact cache lives in ``.stockade-cache/bench-open-artifacts`` (the first run compiles,
~15 s per plugin). Targets: o <= 250 ms; m <= 50 MB per plugin; k: CPU / wall near the
number of cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from host.call.host import Host
from host.config import HostConfig
from host.egress.port import DenyAllEgress
from host.policy.engine import FilePolicyEngine
from sdk.author.build import build_project
from tests.support.bundles import lock_entry, write_lock
from tests.support.hosts import write_policy
from tests.support.plugins import CACHE_DIR, REPO_ROOT, build_test_plugin

WARM_ARTIFACTS = REPO_ROOT / ".stockade-cache" / "bench-open-artifacts"
PLUGINS = ("echo_py", "hostile_py", "jsonkit", "tracker", "webfetch")
"""Five Python plugins: two test plugins and the three example plugins."""
CALLS = {"echo": ("echo.echo", {"message": "hi"}), "jsonkit": ("jsonkit.query", {"document": '{"a": 1}', "path": "a"})}
"""One call per package, by package name: what the calls leave resident."""


def build_lock(root: Path) -> Path:
    """Bundles of the five plugins under ``root`` and a lock naming them."""
    entries = []
    for name in PLUGINS:
        if (REPO_ROOT / "tests" / "plugins" / name).is_dir():
            build = build_test_plugin(name)
        else:
            build = build_project(REPO_ROOT / "plugins" / name, out_dir=root / "dist", cache_dir=CACHE_DIR)
        bundle = root / "bundles" / name
        bundle.mkdir(parents=True)
        for item in ("manifest.json", "module.wasm"):
            (bundle / item).write_bytes((build.bundle_dir / item).read_bytes())
        entries.append(lock_entry(root, bundle))
    return write_lock(root / "stockade.lock", entries)


def open_host(root: Path, lock: Path, artifacts: Path, state: str) -> Host:
    """``Host.open`` with state dir ``root/state`` (its policy file written on first use)."""
    config = HostConfig(state_dir=root / state, artifact_cache_dir=artifacts)
    policy_file = root / f"{state}-policy.json"
    policy = FilePolicyEngine(policy_file) if policy_file.exists() else write_policy(policy_file)
    return Host.open(lock, config=config, secrets=None, policy=policy, audit=root / state / "audit.log")


def rss_bytes() -> int:
    """Resident set size of this process (``/proc/self/statm``)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def child_rss(root: Path, lock: Path) -> None:
    """In a fresh process: RSS before open, after open, after one call of each plugin."""
    before = rss_bytes()
    host = open_host(root, lock, WARM_ARTIFACTS, "rss")
    opened = rss_bytes()
    for package, (name, value) in CALLS.items():
        tool = next(t for t in host.registry if t.name == name)
        host._runtime.run(  # a fresh instance, as every call gets
            host._packages[package].component, tool=name, input_json=json.dumps(value),
            limits=host._limits(tool), egress=DenyAllEgress(), secret_available=lambda _n: False,
        )
    called = rss_bytes()
    host.close()
    print(json.dumps({"before": before, "opened": opened, "called": called}))


def main(argv: list[str] | None = None) -> int:
    """Measure and print the rows; returns 0."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="warm opens (default 5)")
    parser.add_argument("--cold", action="store_true", help="also measure a cold open (compiles all five)")
    parser.add_argument("--rss-child", nargs=2, metavar=("ROOT", "LOCK"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rss_child:
        child_rss(Path(args.rss_child[0]), Path(args.rss_child[1]))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        lock = build_lock(root)
        # The first open compiles (very first run only) and creates the state dir; the
        # measured ones reopen it, as a host restarting on the same lock does.
        open_host(root, lock, WARM_ARTIFACTS, "warm").close()
        warm, cpu = [], []
        for _ in range(args.rounds):
            start, used = time.perf_counter(), time.process_time()
            open_host(root, lock, WARM_ARTIFACTS, "warm").close()
            warm.append((time.perf_counter() - start) * 1000)
            cpu.append((time.process_time() - used) * 1000)
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
        out = subprocess.run([sys.executable, __file__, "--rss-child", str(root), str(lock)],
                             check=True, capture_output=True, text=True, env=env).stdout
        rss = json.loads(out.strip().splitlines()[-1])
        cold = None
        if args.cold:
            used, start = time.process_time(), time.perf_counter()
            open_host(root, lock, root / "cold-artifacts", "cold").close()
            cold = (time.perf_counter() - start, time.process_time() - used)
    _print(warm, cpu, rss, cold)
    return 0


def _print(warm: list[float], cpu: list[float], rss: dict[str, int], cold: tuple[float, float] | None) -> None:
    mib = 1 << 20
    n = len(PLUGINS)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\n{n} Python plugins; {os.cpu_count()} CPUs, load average {load}\n")
    print(f"(o) warm Host.open + close: median {statistics.median(warm):.0f} ms "
          f"(rows: {', '.join(f'{w:.0f}' for w in warm)})   target <= 250 ms")
    print(f"    CPU time of those opens (all threads): median {statistics.median(cpu):.0f} ms, "
          f"CPU/wall {statistics.median(c / w for c, w in zip(cpu, warm, strict=True)):.2f}")
    print(f"(m) RSS per loaded plugin: {(rss['opened'] - rss['before']) / n / mib:.1f} MiB after open, "
          f"{(rss['called'] - rss['before']) / n / mib:.1f} MiB after a call of each   target <= 50 MiB")
    if cold is not None:
        wall, cpu = cold
        print(f"(k) cold Host.open (compiles {n}): wall {wall:.1f} s, CPU {cpu:.1f} s, CPU/wall {cpu / wall:.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
