"""``stockade watch [OPTIONS] [DIR] [-- PYTEST_ARGS...]``: rebuild and rerun the tests on every save.

Runs ``stockade test DIR`` once, then watches the project's sources, ``stockade.toml``
and ``tests/`` and runs again after each change, once the files have stopped changing for
one ``--interval``. Changes are reported by the operating system through ``watchfiles``
(inotify, FSEvents, ReadDirectoryChangesW via Rust notify: no CPU while idle) when it is
installed (``pip install 'stockade[build]'``), else, or with ``--poll``, found by polling
every ``--interval`` seconds. Either way ``dist/``, ``build/``, hidden directories,
virtual environments (any directory holding ``pyvenv.cfg``, whatever its name; conda
environments), ``node_modules`` and caches are not looked into. The
build and compiled-artifact caches make a rerun after a one-line edit cost one
componentize run plus one compile. A project that does not build is reported and watched
on. Stop with Ctrl-C.

Exit codes: 0 the last run passed; 1 it failed; 2 usage error.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from host.errors import StockadeError
from sdk.author.build import BuildError
from sdk.commands._common import EXIT_FAILED, EXIT_OK, cell, safe_text, stderr_console
from sdk.commands.test import check_project, run_tests

_WATCHED: Final = (".py", ".js", ".mjs", ".toml", ".json")
_SKIPPED: Final = frozenset({"dist", "build", "node_modules", "__pycache__", "site-packages", "venv", "env"})
_ENV_MARKERS: Final = ("pyvenv.cfg", "conda-meta")  # a virtualenv / conda environment root

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
        "--poll", action="store_true", help="poll for changes even when watchfiles is installed"
    )
    parser.add_argument(
        "pytest_args", nargs=argparse.REMAINDER, metavar="-- PYTEST_ARGS", help="arguments passed to pytest"
    )
    parser.set_defaults(func=run)


def _skipped_dir(parent: str, name: str) -> bool:
    """A directory whose files never belong to the project's sources."""
    if name.startswith(".") or name in _SKIPPED:
        return True
    return any(os.path.lexists(os.path.join(parent, name, marker)) for marker in _ENV_MARKERS)


def snapshot(project: Path) -> Snapshot:
    """``{relative path: (mtime_ns, size)}`` of every watched file."""
    found: Snapshot = {}
    for dirpath, dirnames, filenames in os.walk(project):
        dirnames[:] = [d for d in dirnames if not _skipped_dir(dirpath, d)]
        for name in filenames:
            if name.endswith(_WATCHED):
                path = Path(dirpath) / name
                try:
                    info = path.stat()
                except FileNotFoundError:
                    continue
                found[path.relative_to(project).as_posix()] = (info.st_mtime_ns, info.st_size)
    return found


def watched_path(project: Path, path: str) -> bool:
    """Whether a change at ``path`` (absolute, under ``project``) can change :func:`snapshot`."""
    try:
        rel = Path(path).relative_to(project.absolute())
    except ValueError:
        return False
    parent = str(project.absolute())
    for part in rel.parts[:-1]:
        if _skipped_dir(parent, part):
            return False
        parent = os.path.join(parent, part)
    return rel.name.endswith(_WATCHED) or not rel.suffix  # a file, or a directory moved or removed


def _poll(interval: float) -> Iterator[str]:
    while True:
        time.sleep(interval)  # polling, not synchronization
        yield "poll"


def _notified(project: Path, interval: float) -> Iterator[str]:
    """One item per batch of relevant changes the operating system reports (watchfiles).

    The watcher starts now, in a daemon thread, so a save made while the first test run
    is still going is not lost; the iterator's first item comes at once (look again after
    that run), then one per batch of changes.
    """
    import watchfiles

    root = project.absolute()
    changed, ready = threading.Event(), threading.Event()
    failed: list[BaseException] = []

    def pump() -> None:
        try:
            for changes in watchfiles.watch(
                root,
                watch_filter=lambda _change, path: watched_path(root, path),
                debounce=max(50, int(interval * 1000)),
                rust_timeout=1000,  # ms; an empty batch each second says the watcher runs
                yield_on_timeout=True,
                raise_interrupt=False,
            ):
                ready.set()
                if changes:
                    changed.set()
        except BaseException as exc:  # reported to the main thread, which falls back to polling
            failed.append(exc)
            ready.set()
            changed.set()

    threading.Thread(target=pump, name="stockade-watch", daemon=True).start()
    ready.wait(timeout=5.0)

    def events() -> Iterator[str]:
        yield "notify"
        while True:
            while not changed.wait(timeout=1.0):
                pass
            changed.clear()
            if failed:
                raise OSError(f"the watcher stopped: {failed[0]}")
            yield "notify"

    return events()


def change_source(project: Path, interval: float, *, poll: bool) -> tuple[str, Iterator[str]]:
    """``("watchfiles" | "polling", iterator)``: each item means "look again".

    watchfiles is used unless ``poll`` is set or it is not installed (or cannot start a
    watcher here, e.g. out of inotify watches): then polling every ``interval`` seconds.
    """
    if not poll:
        try:
            import watchfiles  # noqa: F401
        except ImportError:
            pass
        else:
            events = _notified(project, interval)
            return "watchfiles", _with_fallback(events, interval)
    return "polling", _poll(interval)


def _with_fallback(events: Iterator[str], interval: float) -> Iterator[str]:
    try:
        yield from events
    except (OSError, RuntimeError) as exc:
        reason = safe_text(str(exc))
        stderr_console().print(f"[yellow]warning:[/] watchfiles stopped ({reason}); polling instead")
        yield from _poll(interval)


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
    how, events = change_source(project, args.interval, poll=args.poll)
    stderr_console().print(f"stockade watch: watching {cell(project)} ({how})")
    status = _once(project, extra)
    runs = 1
    try:
        while args.max_runs is None or runs < args.max_runs:
            next(events)
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
