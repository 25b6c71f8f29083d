"""Benchmark: start-up time of the ``stockade`` command.

Run: ``python tests/benchmarks/bench_cli_startup.py [--n 15] [--baseline-tree DIR] [--json]``
(a script, not a test).

Each row starts a fresh ``python -m sdk.cli ...`` process ``n`` times (after two warm-up
runs, so the OS file cache is hot, as for a person typing commands) and reports the
median and minimum wall time, like ``hyperfine`` would. The ratio column divides by the
bare interpreter (``python -c pass``) measured in the same run, so figures from a loaded
machine stay comparable. ``--baseline-tree DIR`` times the same commands against another
checkout (for example ``/work/main`` before a change): before/after in one run.

Commands measured: ``--help``, ``--version``, ``log show`` on a small audit log (the two
the issue sets a 250 ms target for, plus the cheapest) and ``policy show``.
Target: ``--help`` and ``log show`` < 250 ms median.
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

REPO = Path(__file__).resolve().parents[2]
TARGET_MS = 250.0


def _time(argv: list[str], *, env: dict[str, str], cwd: Path, n: int) -> tuple[float, float]:
    """Median and minimum wall time in ms of ``n`` runs (after 2 warm-ups)."""
    samples: list[float] = []
    for index in range(n + 2):
        start = time.perf_counter()
        subprocess.run(
            argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
        )
        if index >= 2:
            samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples), min(samples)


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
        commands = {
            "--help": ["--help"],
            "--version": ["--version"],
            "log show": ["log", "show", str(audit)],
            "policy show": ["policy", "show", "--state-dir", str(state)],
        }
        trees = [("after", REPO)] + ([("before", opts.baseline_tree.resolve())] if opts.baseline_tree else [])
        base_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        bare_ms, bare_min = _time([sys.executable, "-c", "pass"], env=base_env, cwd=state, n=opts.n)
        rows: list[dict[str, object]] = [
            {"tree": "-", "command": "python -c pass", "median_ms": bare_ms, "min_ms": bare_min, "ratio": 1.0}
        ]
        for label, tree in trees:
            env = dict(base_env, PYTHONPATH=str(tree), STOCKADE_HOME=str(state))
            for name, args in commands.items():
                median, low = _time([sys.executable, "-m", "sdk.cli", *args], env=env, cwd=state, n=opts.n)
                rows.append(
                    {
                        "tree": label,
                        "command": name,
                        "median_ms": median,
                        "min_ms": low,
                        "ratio": median / bare_ms,
                    }
                )
    if opts.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'tree':<7} {'command':<16} {'median ms':>10} {'min ms':>8} {'x python':>9}")
    for row in rows:
        print(
            f"{row['tree']!s:<7} {row['command']!s:<16} {row['median_ms']:>10.1f} {row['min_ms']:>8.1f} "
            f"{row['ratio']:>9.2f}"
        )
    slow = [r for r in rows if r["tree"] == "after" and r["command"] in ("--help", "log show")]
    verdict = all(float(str(r["median_ms"])) < TARGET_MS for r in slow)
    print(f"target --help and log show < {TARGET_MS:.0f} ms median: {'met' if verdict else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
