"""Benchmark: the package author's loop (issue 12), end to end through the real CLI.

Run: ``python tests/benchmarks/bench_author_loop.py [--runs 3] [--project DIR]`` (a script,
not a test). Uses a fresh per-user cache in a temporary directory, a scaffolded Python
project (``stockade new``), and real subprocesses; prints every raw row, medians and the
ratios against baselines measured in the same run.

Rows:

- ``test cold``: ``stockade test`` on a new project (componentize-py + compile);
- ``edit+test``: change one line of ``app.py`` (a new string each run), ``stockade test``
  (one componentize run + one compile; the issue's target: < 30 s);
- ``dev warm``: ``stockade dev <project>.greet`` on the built project (target < 1.5 s);
- ``inspect warm``: ``stockade inspect`` of the built bundle, its artifact in the per-user
  cache (target < 1 s) vs ``inspect cold`` (an empty cache: a compile, as every inspect
  did before issue 12);
- ``python -c pass`` with the same interpreter: the floor of any CLI command.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{proc.stdout}\n{proc.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    cli = [sys.executable, "-m", "sdk.cli"]
    rows: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-author-") as tmp:
        root = Path(tmp)
        env = dict(os.environ, PYTHONPATH=str(REPO), STOCKADE_CACHE_DIR=str(root / "cache"))
        env["STOCKADE_JS_TOOLCHAIN"] = str(REPO)
        _run([*cli, "new", "bench", "--dir", str(root / "bench")], root, env)
        project = root / "bench"
        rows["test cold"] = [_run([*cli, "test", str(project), "--", "-q"], root, env)]
        app = project / "app.py"
        for i in range(args.runs):
            app.write_text(app.read_text().replace("must not be blank", f"must not be blank ({i})", 1))
            rows.setdefault("edit+test", []).append(_run([*cli, "test", str(project), "--", "-q"], root, env))
        _run([*cli, "build", str(project)], root, env)
        bundle = project / "dist" / "bench-0.1.0"
        dev = [*cli, "dev", "bench.greet", "--input", '{"name": "Ada"}', "--project", str(project)]
        for _ in range(args.runs):
            rows.setdefault("dev warm", []).append(_run(dev, root, env))
            rows.setdefault("inspect warm", []).append(_run([*cli, "inspect", str(bundle)], root, env))
            rows.setdefault("python -c pass", []).append(_run([sys.executable, "-c", "pass"], root, env))
        cold_env = dict(env, STOCKADE_CACHE_DIR=str(root / "empty-cache"))
        rows["inspect cold"] = [_run([*cli, "inspect", str(bundle)], root, cold_env)]
    for name, values in rows.items():
        print(f"{name:16} median {statistics.median(values):7.2f} s   raw {', '.join(f'{v:.2f}' for v in values)}")
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"inspect cold / inspect warm: {med['inspect cold'] / med['inspect warm']:.1f}x")
    print(f"test cold / edit+test: {med['test cold'] / med['edit+test']:.2f}x")
    print(f"dev warm - interpreter floor: {med['dev warm'] - med['python -c pass']:.2f} s")
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
