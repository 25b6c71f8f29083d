"""``stockade test [DIR] [-- PYTEST_ARGS...]``: build a plugin project and run its tests.

Builds the project in ``DIR`` (default ``.``), loads it once into a test host so the
component is compiled before the tests start (compiled artifacts are cached), then runs
``python -m pytest DIR/tests`` in a subprocess. The tests use :mod:`sdk.harness`: a real
host whose network is scripted. Arguments after ``--`` go to pytest.

Exit codes: 0 the tests passed; 1 a test failed, no test ran, or the build failed;
2 usage error.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from host.runtime import ProgressEvent
from sdk.commands._common import EXIT_FAILED, EXIT_OK, CommandFailed, cell, stderr_console
from sdk.harness import Harness
from sdk.project import PROJECT_FILE

_BuildReport = Callable[[str, float], None]
_CompileReport = Callable[[ProgressEvent], None]


def register(sub: Any) -> None:
    """Add the ``test`` subcommand."""
    parser = sub.add_parser(
        "test",
        help="build a plugin project and run its tests through the harness",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("dir", nargs="?", type=Path, default=Path("."), help="project directory")
    parser.add_argument(
        "pytest_args", nargs=argparse.REMAINDER, metavar="-- PYTEST_ARGS", help="arguments passed to pytest"
    )
    parser.set_defaults(func=run, passthrough=[])  # sdk.cli puts everything after `--` here


def run(args: argparse.Namespace) -> int:
    """Build, warm the compile cache, run pytest; 0 when every test passed."""
    project: Path = args.dir
    tests = project / "tests"
    if not (project / PROJECT_FILE).is_file():
        hint = "run it in a plugin project (start one with `stockade new`)"
        raise CommandFailed("PROJECT_NOT_FOUND", f"no {PROJECT_FILE} in {project}", hint=hint)
    if not tests.is_dir():
        raise CommandFailed("NO_TESTS", f"{tests} does not exist", hint="put pytest files in DIR/tests")
    if importlib.util.find_spec("pytest") is None:
        raise CommandFailed("PYTEST_MISSING", "pytest is not installed", hint="pip install pytest")
    _prepare(project)
    extra = list(args.passthrough) or [a for a in (args.pytest_args or []) if a != "--"]
    argv = [sys.executable, "-m", "pytest", str(tests.resolve()), *extra]
    stderr_console().print(f"running {cell(' '.join(argv[1:]))}")
    status = subprocess.run(argv, cwd=project, check=False).returncode
    return EXIT_OK if status == 0 else EXIT_FAILED


def _prepare(project: Path) -> None:
    """Build the project and load it into a test host once (compiling on first use)."""
    console = stderr_console()
    started = time.monotonic()
    compiled: list[str] = []
    with _progress() as (on_build, on_compile):

        def compile_report(event: ProgressEvent) -> None:
            if event.stage == "compiled":
                compiled.append(event.name)
            if on_compile is not None:
                on_compile(event)

        with Harness(project, progress=on_build, compile_progress=compile_report) as harness:
            package = harness.bundle.manifest.package
    note = "compiled" if compiled else "loaded from cache"
    elapsed = time.monotonic() - started
    console.print(f"built {cell(package.name)}-{cell(package.version)}; {note} in {elapsed:.1f} s")


@contextmanager
def _progress() -> Iterator[tuple[_BuildReport | None, _CompileReport | None]]:
    console = stderr_console()
    if not console.is_terminal:
        console.print("building (first builds take about 10-20 s; later ones are cached)")
        yield None, None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("building", total=1.0)

        def on_build(stage: str, fraction: float) -> None:
            bar.update(task, description=stage, completed=fraction)

        def on_compile(event: ProgressEvent) -> None:
            verb = {"cached": "loaded", "compiling": "compiling (first time only)", "compiled": "compiled"}
            done = 1.0 if event.stage != "compiling" else 0.5
            bar.update(task, description=f"{verb[event.stage]} {event.name}", completed=done)

        yield on_build, on_compile
