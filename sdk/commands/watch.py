"""``stockade watch [OPTIONS] [DIR] [-- PYTEST_ARGS...]``: rebuild and rerun the tests on every save.

Runs ``stockade test DIR`` once, then watches the project's sources, ``stockade.toml``
and ``tests/`` (polling every ``--interval`` seconds; ``dist/``, hidden directories,
``node_modules`` and caches are ignored) and runs again after each change, once the files
have stopped changing for one interval. The build and compiled-artifact caches make a
rerun after a one-line edit cost one componentize run plus one compile. A project that
does not build is reported and watched on. Stop with Ctrl-C.

Exit codes: 0 the last run passed; 1 it failed; 2 usage error.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any, Final

from host.errors import StockadeError
from sdk.build import BuildError
from sdk.commands._common import EXIT_FAILED, EXIT_OK, cell, safe_text, stderr_console
from sdk.commands.test import check_project, run_tests

_WATCHED: Final = (".py", ".js", ".mjs", ".toml", ".json")
_SKIPPED: Final = frozenset({"dist", "build", "node_modules", "__pycache__"})

Snapshot = dict[str, tuple[int, int]]


def register(sub: Any) -> None:
    """Add the ``watch`` subcommand."""
    parser = sub.add_parser(
        "watch",
        help="rebuild and rerun a plugin project's tests on every save",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("dir", nargs="?", type=Path, default=Path("."), help="project directory")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between checks (default 0.5)")
    parser.add_argument("--max-runs", type=int, default=None, help="stop after N runs (scripts, tests)")
    parser.add_argument(
        "pytest_args", nargs=argparse.REMAINDER, metavar="-- PYTEST_ARGS", help="arguments passed to pytest"
    )
    parser.set_defaults(func=run)


def snapshot(project: Path) -> Snapshot:
    """``{relative path: (mtime_ns, size)}`` of every watched file."""
    found: Snapshot = {}
    for dirpath, dirnames, filenames in os.walk(project):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in _SKIPPED]
        for name in filenames:
            if name.endswith(_WATCHED):
                path = Path(dirpath) / name
                try:
                    info = path.stat()
                except FileNotFoundError:
                    continue
                found[path.relative_to(project).as_posix()] = (info.st_mtime_ns, info.st_size)
    return found


def _changed(old: Snapshot, new: Snapshot) -> list[str]:
    return sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))


def _once(project: Path, pytest_args: list[str]) -> int:
    started = time.monotonic()
    try:
        status = run_tests(project, pytest_args)
    except (StockadeError, BuildError) as exc:
        text = f"{exc.code}: {exc.message}" if isinstance(exc, StockadeError) else f"{exc.code}: {exc}"
        stderr_console().print(f"error: {safe_text(text)}", markup=False, highlight=False)
        status = EXIT_FAILED
    verdict = "[green]passed[/]" if status == EXIT_OK else "[red]failed[/]"
    elapsed = time.monotonic() - started
    stderr_console().print(f"stockade watch: tests {verdict} in {elapsed:.1f} s; watching {cell(project)}")
    return status


def run(args: argparse.Namespace) -> int:
    """Run, then rerun on every change until interrupted (or ``--max-runs``)."""
    project: Path = args.dir
    check_project(project)
    extra = [a for a in (args.pytest_args or []) if a != "--"]
    seen = snapshot(project)
    status = _once(project, extra)
    runs = 1
    try:
        while args.max_runs is None or runs < args.max_runs:
            time.sleep(args.interval)  # polling, not synchronization
            current = snapshot(project)
            if current == seen:
                continue
            while True:  # wait until the files stop changing (editors write in steps)
                time.sleep(args.interval)
                settled = snapshot(project)
                if settled == current:
                    break
                current = settled
            changed = _changed(seen, current)
            seen = current
            more = " ..." if len(changed) > 5 else ""
            stderr_console().print(f"changed: {cell(', '.join(changed[:5]))}{more}")
            status = _once(project, extra)
            runs += 1
    except KeyboardInterrupt:
        stderr_console().print("stopped")
    return status
