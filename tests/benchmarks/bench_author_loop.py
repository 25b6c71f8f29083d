"""Benchmark: the package author's loop, end to end through the real CLI.

Run: ``python tests/benchmarks/bench_author_loop.py [--runs 3] [--no-js]`` (a script, not a
test). Uses a fresh per-user cache in a temporary directory, a scaffolded Python project
(``stockade new``), a copy of ``examples/js-deps`` and real subprocesses; prints every raw
row, medians, the issue's targets and ratios against baselines measured in the same run.

Each row gives the wall time and the CPU time (user + system of the command and its
children). On a machine shared with other work the wall time grows with the load while
the CPU time does not, so the CPU column says what the command costs on an idle machine
(``load average`` is printed last). Commands run with bytecode writing allowed (a
``pip install`` of the wheel compiles it at install time; ``PYTHONDONTWRITEBYTECODE``
would charge every run for compiling Stockade's sources).

Rows:

- ``test cold``: ``stockade test`` on a new project (componentize-py + compile);
- ``edit+test``: change one line of ``app.py`` (a new string each run), ``stockade test``
  (one componentize run + one compile; the issue's target: < 30 s), with its phases
  ``  build`` (componentize-py) and ``  compile`` (wasmtime) read from the progress lines;
- ``dev warm``: ``stockade dev <project>.greet`` on the built project (target < 1.5 s);
- ``inspect warm``: ``stockade inspect`` of the built bundle, its artifact in the per-user
  cache (target < 1 s) vs ``inspect cold`` (an empty cache: a compile, as every inspect
  did before issue 12);
- ``js-deps build cold`` / ``warm``: ``stockade build`` of a JavaScript plugin with an npm
  dependency (npm ci + esbuild + componentize-js) / from the build cache;
- ``python -c pass`` with the same interpreter: the floor of any CLI command.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TARGETS_S = {"edit+test": 30.0, "dev warm": 1.5, "inspect warm": 1.0}
_STAGE = re.compile(r"^\[\s*([0-9.]+) s\] (.*)$", re.MULTILINE)


class Rows:
    """Raw ``(wall s, cpu s)`` samples by row name, in insertion order."""

    def __init__(self) -> None:
        self.samples: dict[str, list[tuple[float, float]]] = {}

    def add(self, name: str, wall: float, cpu: float) -> None:
        self.samples.setdefault(name, []).append((wall, cpu))

    def median(self, name: str) -> float:
        return statistics.median(w for w, _ in self.samples[name])

    def print(self) -> None:
        for name, values in self.samples.items():
            walls = [w for w, _ in values]
            cpus = [c for _, c in values]
            if any(c != c for c in cpus):  # NaN: a phase read from progress lines, wall only
                raw = ", ".join(f"{w:.2f}" for w in walls)
                print(f"{name:20} wall {statistics.median(walls):7.2f} s  cpu       -     raw wall {raw}")
                continue
            raw = ", ".join(f"{w:.2f}/{c:.2f}" for w, c in values)
            print(
                f"{name:20} wall {statistics.median(walls):7.2f} s  cpu {statistics.median(cpus):7.2f} s"
                f"   raw wall/cpu {raw}"
            )


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (children's user + system) and stderr of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{proc.stdout}\n{proc.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu, proc.stderr


def _phases(stderr: str) -> dict[str, float]:
    """``build`` and ``compile`` seconds from the plain progress lines of ``stockade test``."""
    stamps = [(float(t), text) for t, text in _STAGE.findall(stderr)]
    found: dict[str, float] = {}
    written = next((t for t, text in stamps if text.startswith("writing bundle")), None)
    if written is not None:
        found["build"] = written
    compiling = next((t for t, text in stamps if text.startswith("compiling ")), None)
    compiled = next((t for t, text in stamps if text.startswith("compiled ")), None)
    if compiling is not None and compiled is not None:
        found["compile"] = compiled - compiling
    return found


def _python_loop(rows: Rows, root: Path, env: dict[str, str], runs: int) -> None:
    cli = [sys.executable, "-m", "sdk.cli"]
    _run([*cli, "new", "bench", "--dir", str(root / "bench")], root, env)
    project = root / "bench"
    wall, cpu, _ = _run([*cli, "test", str(project), "--", "-q"], root, env)
    rows.add("test cold", wall, cpu)
    app = project / "app.py"
    for i in range(runs):
        app.write_text(app.read_text().replace("must not be blank", f"must not be blank ({i})", 1))
        wall, cpu, stderr = _run([*cli, "test", str(project), "--", "-q"], root, env)
        rows.add("edit+test", wall, cpu)
        for phase, seconds in _phases(stderr).items():
            rows.add(f"  {phase}", seconds, float("nan"))
    _run([*cli, "build", str(project)], root, env)
    bundle = project / "dist" / "bench-0.1.0"
    dev = [*cli, "dev", "bench.greet", "--input", '{"name": "Ada"}', "--project", str(project)]
    dev += ["--secret", "api_token=env:BENCH_TOKEN"]  # the read-api template requires it
    for _ in range(runs):
        rows.add("dev warm", *_run(dev, root, env)[:2])
        rows.add("inspect warm", *_run([*cli, "inspect", str(bundle)], root, env)[:2])
        rows.add("python -c pass", *_run([sys.executable, "-c", "pass"], root, env)[:2])
    cold_env = dict(env, STOCKADE_CACHE_DIR=str(root / "empty-cache"))
    rows.add("inspect cold", *_run([*cli, "inspect", str(bundle)], root, cold_env)[:2])


def _js_deps(rows: Rows, root: Path, env: dict[str, str]) -> None:
    if shutil.which("npm") is None:
        print("(npm not found: js-deps rows skipped)")
        return
    project = root / "js-deps"
    shutil.copytree(
        REPO / "examples" / "js-deps", project, ignore=shutil.ignore_patterns("dist", "node_modules")
    )
    build = [sys.executable, "-m", "sdk.cli", "build", str(project)]
    rows.add("js-deps build cold", *_run(build, root, env)[:2])
    rows.add("js-deps build warm", *_run(build, root, env)[:2])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-js", action="store_true", help="skip the js-deps rows")
    args = parser.parse_args()
    rows = Rows()
    with tempfile.TemporaryDirectory(prefix="bench-author-") as tmp:
        root = Path(tmp)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(
            PYTHONPATH=str(REPO), STOCKADE_CACHE_DIR=str(root / "cache"), BENCH_TOKEN="bench-token-1234"
        )
        env["STOCKADE_JS_TOOLCHAIN"] = str(REPO)
        _python_loop(rows, root, env, args.runs)
        if not args.no_js:
            _js_deps(rows, root, env)
    rows.print()
    for name, target in TARGETS_S.items():
        value = rows.median(name)
        print(
            f"target {name:14} < {target:4.1f} s: median {value:.2f} s ({value / target:.2f} of the target)"
        )
    print(f"inspect cold / inspect warm: {rows.median('inspect cold') / rows.median('inspect warm'):.1f}x")
    print(f"test cold / edit+test: {rows.median('test cold') / rows.median('edit+test'):.2f}x")
    print(f"dev warm - interpreter floor: {rows.median('dev warm') - rows.median('python -c pass'):.2f} s")
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
