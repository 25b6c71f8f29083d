"""Benchmark: start-up time of the ``stockade`` command.

Run: ``python tests/benchmarks/bench_cli_startup.py [--n 15] [--baseline-tree DIR] [--json]``
(a script, not a test).

Each row starts a fresh ``python -m sdk.cli ...`` process ``n`` times (after two warm-up
runs, so the OS file cache and the bytecode cache are hot, as for a person typing
commands) and reports the median and minimum wall time, like ``hyperfine`` would, and the
median CPU time (user + system) of the process, which a loaded machine inflates less. The
ratio column divides the median by the bare interpreter (``python -c pass``) measured in
the same run, so figures from a loaded machine stay comparable. ``--baseline-tree DIR``
times the same commands against another checkout (for example the main branch before a
change): before/after in one run. Bytecode goes to a temporary ``PYTHONPYCACHEPREFIX``
(``PYTHONDONTWRITEBYTECODE`` is dropped), so no checkout is written to and neither tree
pays for compiling its sources on every run.

Commands measured: ``--help``, ``--version``, ``log show`` on a small audit log,
``policy show``, ``call`` of the WAT echo tool through the whole pipeline on a real lock
(local store, policy file, audit log; the compiled component comes from the artifact
cache after the warm-ups), and ``inspect`` of that lock, with and without listing the
component's imports.
Targets: ``--help`` and ``log show`` < 250 ms median; ``call`` and ``inspect`` <= 250 ms
median (bare Python is about 18 ms on the reference machine).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TARGET_MS = 250.0


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _time(argv: list[str], *, env: dict[str, str], cwd: Path, n: int) -> tuple[float, float, float]:
    """Median and minimum wall time and median CPU time, in ms, of ``n`` runs (after 2 warm-ups).

    Raises:
        RuntimeError: the command failed (a benchmark of an error path would mislead).
    """
    samples: list[float] = []
    cpu: list[float] = []
    for index in range(n + 2):
        start, start_cpu = time.perf_counter(), _cpu_s()
        proc = subprocess.run(
            argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{argv[3:]} exited {proc.returncode}: {proc.stderr.decode()[-2000:]}")
        if index >= 2:
            samples.append((time.perf_counter() - start) * 1000)
            cpu.append((_cpu_s() - start_cpu) * 1000)
    return statistics.median(samples), min(samples), statistics.median(cpu)


def _audit_log(state: Path) -> Path:
    """A real audit log of three records, written by ``host.audit.log``."""
    sys.path.insert(0, str(REPO))
    from host.audit.log import AuditLog  # noqa: PLC0415  # after the sys.path insert

    path = state / "audit.log"
    with AuditLog(path) as log:
        for _ in range(3):
            log.append(
                "call.outcome",
                {
                    "tool": "echo.say",
                    "version": "1.0.0",
                    "ok": True,
                    "principal": {"project": "p", "subject": "a"},
                },
            )
    return path


def _echo_workspace(root: Path) -> tuple[str, ...]:
    """A real lock with the WAT echo package and a policy letting alice call ``echo.say``;
    returns the host options (``--lock``, ``--state-dir``)."""
    from tests.support.cli import echo_workspace  # noqa: PLC0415  # after the sys.path insert

    return echo_workspace(root / "echo").host_args


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=15, help="runs per row (default 15)")
    parser.add_argument(
        "--baseline-tree", type=Path, default=None, help="another checkout to time the same way"
    )
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        audit = _audit_log(state)
        host_args = _echo_workspace(state)
        lock = host_args[1]
        say = ("call", "echo.say@1.0.0", "--input", '{"message": "hi"}', "--project", "p", "--subject", "alice")
        commands = {
            "--help": ["--help"],
            "--version": ["--version"],
            "log show": ["log", "show", str(audit)],
            "policy show": ["policy", "show", "--state-dir", host_args[3]],  # with a policy file
            "call": [*say, *host_args],
            "inspect": ["inspect", lock],
            "inspect --no-imports": ["inspect", "--no-imports", lock],
        }
        trees = [("after", REPO)] + ([("before", opts.baseline_tree.resolve())] if opts.baseline_tree else [])
        drop = ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")
        base_env = {k: v for k, v in os.environ.items() if k not in drop}
        base_env["PYTHONPYCACHEPREFIX"] = str(state / "pycache")
        bare_ms, bare_min, bare_cpu = _time([sys.executable, "-c", "pass"], env=base_env, cwd=state, n=opts.n)
        rows: list[dict[str, object]] = [
            {"tree": "-", "command": "python -c pass", "median_ms": bare_ms, "min_ms": bare_min,
             "cpu_ms": bare_cpu, "ratio": 1.0}
        ]
        for label, tree in trees:
            env = dict(base_env, PYTHONPATH=str(tree), STOCKADE_HOME=str(state))
            for name, args in commands.items():
                median, low, cpu = _time([sys.executable, "-m", "sdk.cli", *args], env=env, cwd=state, n=opts.n)
                rows.append(
                    {
                        "tree": label,
                        "command": name,
                        "median_ms": median,
                        "min_ms": low,
                        "cpu_ms": cpu,
                        "ratio": median / bare_ms,
                    }
                )
    load = os.getloadavg()
    if opts.json:
        print(json.dumps({"rows": rows, "load_average": load}, indent=2))
        return 0
    print(f"{'tree':<7} {'command':<21} {'median ms':>10} {'min ms':>8} {'cpu ms':>8} {'x python':>9}")
    for row in rows:
        print(
            f"{row['tree']!s:<7} {row['command']!s:<21} {row['median_ms']:>10.1f} {row['min_ms']:>8.1f} "
            f"{row['cpu_ms']:>8.1f} {row['ratio']:>9.2f}"
        )
    for names, bound in ((("--help", "log show"), "<"), (("call", "inspect"), "<=")):
        slow = [r for r in rows if r["tree"] == "after" and r["command"] in names]
        values = [float(str(r["median_ms"])) for r in slow]
        met = all(v < TARGET_MS if bound == "<" else v <= TARGET_MS for v in values)
        print(f"target {' and '.join(names)} {bound} {TARGET_MS:.0f} ms median: {'met' if met else 'NOT met'}")
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (2 cores here: above 2, figures are inflated)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
