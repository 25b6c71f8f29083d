"""``stockade test [DIR] [-- PYTEST_ARGS...]``: build a plugin project and run its tests.

Builds the project in ``DIR`` (default ``.``), loads it once into a test host so the
component is compiled before the tests start (compiled artifacts are cached), then runs
``python -m pytest DIR/tests`` in a subprocess. The tests use :mod:`sdk.harness`: a real
host whose network is scripted or replayed from HTTP cassettes. ``--record-mode MODE``
(``none`` by default: replay only; ``once``, ``new_episodes``, ``all``) is what tests with a
cassette do (:mod:`sdk.pytest_plugin`). Arguments after ``--`` go to pytest.

Exit codes: 0 the tests passed; 1 a test failed, no test ran, or the build failed;
2 usage error.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from host.runtime import ProgressEvent
from sdk._cassette import RECORD_MODE_ENV, RECORD_MODES
from sdk.author.project import PROJECT_FILE
from sdk.commands._common import EXIT_FAILED, EXIT_OK, CommandFailed, cell, stderr_console
from sdk.commands._progress import TEMPORARY_BUNDLE_NOTE, author_progress, problems_listed
from sdk.harness import Harness


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
        "--record-mode", choices=RECORD_MODES, default="none",
        help="HTTP cassettes: none (default: replay only, no network), once, new_episodes or all",
    )  # fmt: skip
    parser.add_argument(
        "pytest_args", nargs=argparse.REMAINDER, metavar="-- PYTEST_ARGS", help="arguments passed to pytest"
    )
    parser.set_defaults(func=run, passthrough=[])  # sdk.cli puts everything after `--` here


def run(args: argparse.Namespace) -> int:
    """Build, warm the compile cache, run pytest; 0 when every test passed."""
    project: Path = args.dir
    check_project(project)
    extra = list(args.passthrough) or [a for a in (args.pytest_args or []) if a != "--"]
    return run_tests(project, extra, record_mode=args.record_mode)


def check_project(project: Path) -> None:
    """Refuse a directory without ``stockade.toml`` or ``tests/``, or a missing pytest.

    Raises:
        CommandFailed: PROJECT_NOT_FOUND, NO_TESTS or PYTEST_MISSING.
    """
    if not (project / PROJECT_FILE).is_file():
        hint = "run it in a plugin project (start one with `stockade new`)"
        raise CommandFailed("PROJECT_NOT_FOUND", f"no {PROJECT_FILE} in {project}", hint=hint)
    if not (project / "tests").is_dir():
        hint = "put pytest files in DIR/tests"
        raise CommandFailed("NO_TESTS", f"{project / 'tests'} does not exist", hint=hint)
    if importlib.util.find_spec("pytest") is None:
        raise CommandFailed(
            "PYTEST_MISSING", "pytest is not installed (stockade test runs the project's tests with it)",
            hint="pip install 'stockade[build]' (the author extra brings pytest), or pip install pytest",
        )


def run_tests(project: Path, pytest_args: list[str], *, record_mode: str = "none") -> int:
    """Build, load once (compiling on first use), run pytest on ``project/tests``.

    The cassette plugin (:mod:`sdk.pytest_plugin`) is loaded, and ``record_mode`` reaches
    the harness as ``$STOCKADE_RECORD_MODE``; a mode that records prints a warning (it
    reaches the real network with the secrets the tests give).

    Raises:
        ManifestInvalid, BuildError, StockadeError: the project does not build or load.

    Returns:
        0 when every test passed, 1 otherwise (pytest's 5, no test ran, included).
    """
    with problems_listed():
        _prepare(project)
    plugin = [] if _plugin_autoloaded() else ["-p", "sdk.pytest_plugin"]
    argv = [sys.executable, "-m", "pytest", *plugin, str((project / "tests").resolve()), *pytest_args]
    console = stderr_console()
    if record_mode != "none":
        console.print(
            f"[bold yellow]note[/]: --record-mode {cell(record_mode)}: tests with a cassette reach the real "
            "network and write tests/cassettes/ (secrets removed; check with `stockade cassette verify`)",
            soft_wrap=True,
        )  # fmt: skip
    console.print(f"running {cell(' '.join(argv[1:]))}")
    env = {**os.environ, RECORD_MODE_ENV: record_mode}
    status = subprocess.run(argv, cwd=project, check=False, env=env).returncode
    return EXIT_OK if status == 0 else EXIT_FAILED


def _plugin_autoloaded() -> bool:
    """Whether pytest loads :mod:`sdk.pytest_plugin` by itself (installed entry point):
    naming it again with ``-p`` would register it twice."""
    from importlib.metadata import entry_points

    return any(e.value == "sdk.pytest_plugin" for e in entry_points(group="pytest11"))


def _prepare(project: Path) -> None:
    """Build the project and load it into a test host once (compiling on first use)."""
    console = stderr_console()
    started = time.monotonic()
    compiled: list[str] = []
    with author_progress() as (on_build, on_compile):

        def compile_report(event: ProgressEvent) -> None:
            if event.stage == "compiled":
                compiled.append(event.name)
            on_compile(event)

        with Harness(project, progress=on_build, compile_progress=compile_report) as harness:
            package = harness.bundle.manifest.package
    note = "compiled" if compiled else "loaded from cache"
    elapsed = time.monotonic() - started
    console.print(f"built {cell(package.name)}-{cell(package.version)}; {note} in {elapsed:.1f} s")
    console.print(TEMPORARY_BUNDLE_NOTE, highlight=False)
