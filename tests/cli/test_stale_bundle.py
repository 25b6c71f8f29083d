"""``stockade lock add`` never locks a stale bundle silently (the scaffold, built for real).

``stockade test`` and ``dev`` build into temporary directories, so ``dist/`` keeps the
last ``stockade build``; these lock what ``dist/`` holds after an edit. The build is the
template's, cached under ``<repo>/.stockade-cache`` (an effect edit changes the manifest,
not the module).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.cli import author_cli as stockade


def _project(tmp_path: Path) -> Path:
    assert stockade("new", "rt-python", cwd=tmp_path).returncode == 0
    project = tmp_path / "rt-python"
    build = stockade("build", cwd=project)
    assert build.returncode == 0, build.stderr
    return project


def _edit_effect(project: Path) -> None:
    toml = project / "stockade.toml"
    text = toml.read_text()
    assert 'effect = "read"' in text
    toml.write_text(text.replace('effect = "read"', 'effect = "write"', 1))


@pytest.mark.slow
def test_lock_add_refuses_a_bundle_whose_project_changed_its_manifest(tmp_path: Path) -> None:
    project = _project(tmp_path)
    _edit_effect(project)
    tested = stockade("test", cwd=project)  # the path: edit, test, lock what dist/ holds
    assert "built in a temporary directory; dist/ is unchanged" in tested.stderr
    proc = stockade("lock", "add", "dist/rt-python-0.1.0", cwd=project)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "BUNDLE_STALE" in proc.stderr and "manifest differs" in proc.stderr
    assert "stockade build" in proc.stderr
    assert not (project / "stockade.lock").exists()  # nothing locked


@pytest.mark.slow
def test_lock_add_of_a_project_directory_builds_then_locks_what_it_describes(tmp_path: Path) -> None:
    project = _project(tmp_path)
    _edit_effect(project)
    proc = stockade("lock", "add", ".", cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "built dist/rt-python-0.1.0" in proc.stderr
    (entry,) = json.loads((project / "stockade.lock").read_text())["packages"]
    assert entry["bundle"] == "dist/rt-python-0.1.0"
    manifest = json.loads((project / "dist/rt-python-0.1.0/manifest.json").read_text())
    assert manifest["tools"][0]["effect"] == "write"  # the edited manifest, not the old one


@pytest.mark.slow
def test_lock_add_warns_on_a_newer_source_and_strict_refuses(tmp_path: Path) -> None:
    project = _project(tmp_path)
    later = (project / "dist/rt-python-0.1.0/module.wasm").stat().st_mtime + 5
    os.utime(project / "app.py", (later, later))  # edited after the build (the content could differ)
    strict = stockade("lock", "add", "dist/rt-python-0.1.0", "--strict", cwd=project)
    assert strict.returncode == 1 and "BUNDLE_STALE" in strict.stderr and "app.py" in strict.stderr
    assert not (project / "stockade.lock").exists()
    warned = stockade("lock", "add", "dist/rt-python-0.1.0", cwd=project)
    assert warned.returncode == 0, warned.stderr
    assert "warning:" in warned.stderr and "older than app.py" in warned.stderr


@pytest.mark.slow
def test_lock_add_of_a_fresh_build_says_nothing_about_staleness(tmp_path: Path) -> None:
    project = _project(tmp_path)
    proc = stockade("lock", "add", "dist/rt-python-0.1.0", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert "stale" not in proc.stderr and "older than" not in proc.stderr
