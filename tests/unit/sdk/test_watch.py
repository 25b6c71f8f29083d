"""``stockade watch``: OS change notification (watchfiles) with polling as the fallback,
and no look into virtual environments, node_modules or caches.

Bug defended: a project holding a 20,000-file virtualenv cost 171 ms per poll (a quarter
of a core while idle) because every poll walked it.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdk.commands import watch


def _project(root: Path) -> Path:
    (root / "tests").mkdir(parents=True)
    (root / "stockade.toml").write_text("[package]\n")
    (root / "app.py").write_text("x = 1\n")
    (root / "tests" / "test_app.py").write_text("")
    return root


def test_watch_skips_virtualenvs_node_modules_and_caches_whatever_their_name(tmp_path: Path) -> None:
    project = _project(tmp_path / "p")
    for env, marker in (("myenv", "pyvenv.cfg"), ("py311", "pyvenv.cfg"), ("conda", "conda-meta")):
        lib = project / env / "lib" / "python3.11" / "site-packages" / "pkg"
        lib.mkdir(parents=True)
        (project / env / marker).write_text("")
        for i in range(50):
            (lib / f"m{i}.py").write_text("")
    for skipped in ("node_modules/x", "__pycache__", ".mypy_cache", ".venv/lib", "dist", "venv/lib"):
        (project / skipped).mkdir(parents=True, exist_ok=True)
        (project / skipped / "a.py").write_text("")
    assert sorted(watch.snapshot(project)) == ["app.py", "stockade.toml", "tests/test_app.py"]
    assert not watch.watched_path(project, str(project / "myenv" / "lib" / "x.py"))
    assert not watch.watched_path(project, str(project / "node_modules" / "x" / "index.js"))
    assert watch.watched_path(project, str(project / "tests" / "test_new.py"))
    assert not watch.watched_path(project, str(tmp_path / "elsewhere.py"))


def test_watch_uses_watchfiles_and_wakes_on_a_save(tmp_path: Path) -> None:
    project = _project(tmp_path / "p")
    how, events = watch.change_source(project, 0.05, poll=False)
    assert how == "watchfiles"

    def edit() -> None:
        time.sleep(0.3)  # then save a file
        (project / "app.py").write_text("x = 2\n")

    # The first item comes at once: the caller compares against the snapshot it took
    # before the first test run, so a save made during that run is not lost.
    assert next(events) == "notify"
    writer = threading.Thread(target=edit)
    writer.start()
    started = time.monotonic()
    assert next(events) == "notify"  # woken by the save, not by a timer
    writer.join()
    assert time.monotonic() - started < 30


def test_watch_polls_without_watchfiles_or_with_poll(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = _project(tmp_path / "p")
    how, events = watch.change_source(project, 0.01, poll=True)
    assert how == "polling" and next(events) == "poll"
    monkeypatch.setitem(sys.modules, "watchfiles", None)  # not installed: import fails
    how, events = watch.change_source(project, 0.01, poll=False)
    assert how == "polling" and next(events) == "poll"


def test_watch_falls_back_to_polling_when_the_watcher_fails(capsys: pytest.CaptureFixture[str]) -> None:
    def broken() -> Iterator[str]:
        raise OSError(28, "inotify watch limit reached")
        yield "notify"  # pragma: no cover

    events = watch._with_fallback(broken(), 0.01)
    assert next(events) == "poll"
    assert "watchfiles stopped" in capsys.readouterr().err
