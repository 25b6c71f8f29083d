"""A rebuild never overwrites a bundle a lock pins.

The build cache is seeded with real (WAT) components under the exact keys the build
computes, so these tests exercise the real build path without running componentize-py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sdk.author import build
from sdk.author.build import BundleLocked
from sdk.author.project import load_project
from sdk.author.scaffold import render
from tests.support import wat
from tests.support.cli import cli_env, run_cli

TOML = """
[package]
name = "mini"
version = "0.1.0"
language = "python"

[[tools]]
name = "mini.echo"
description = "echo"
effect = "read"
risk = "low"
input_schema = { type = "object", additionalProperties = false, required = [], properties = {} }
"""


def _seed(root: Path, cache: Path, module: bytes, work: Path) -> None:
    """Put ``module`` in the build cache under the key the current sources produce."""
    project = load_project(root)
    stage = work / f"stage-{len(list(work.glob('stage-*')))}"
    files = build._stage(project, stage, exclude=root / "dist")
    key = build._cache_key(project, files, build._Target(build.WIT_PATH, "tool"))
    build._cache_put(cache, key, module)


def _lock(root: Path, bundle: Path) -> Path:
    manifest = (bundle / "manifest.json").read_bytes()
    module = (bundle / "module.wasm").read_bytes()
    entry = {
        "name": "mini", "version": "0.1.0", "bundle": bundle.relative_to(root).as_posix(),
        "manifest_sha256": wat.sha256(manifest), "module_sha256": wat.sha256(module),
        "signature": None, "key_id": None,
    }  # fmt: skip
    lock = root / "stockade.lock"
    lock.write_text(json.dumps({"format": "stockade.lock/1", "generation": 1, "previous": None, "packages": [entry]}))
    return lock


@pytest.fixture
def locked(tmp_path: Path) -> tuple[Path, Path, Path, bytes]:
    root = tmp_path / "mini"
    root.mkdir()
    (root / "stockade.toml").write_text(TOML)
    (root / "app.py").write_text("from stockade import tool\n\n@tool('mini.echo')\ndef echo(i):\n    return None\n")
    cache, work = tmp_path / "cache" / "builds", tmp_path / "work"
    work.mkdir()
    first = wat.echo_component()
    _seed(root, cache, first, work)
    result = build.build_project(root, cache_dir=cache)
    assert result.cached
    lock = _lock(root, result.bundle_dir)
    (root / "app.py").write_text((root / "app.py").read_text() + "# changed\n")
    _seed(root, cache, wat.counter_component(), work)
    return root, cache, lock, first


def test_rebuild_of_a_locked_version_refused_and_the_locked_bundle_kept(
    locked: tuple[Path, Path, Path, bytes],
) -> None:
    root, cache, lock, first = locked
    with pytest.raises(BundleLocked) as caught:
        build.build_project(root, cache_dir=cache)
    message = str(caught.value)
    assert str(lock) in message and "mini-0.1.0" in message
    assert f"module_sha256: locked {wat.sha256(first)}, built {wat.sha256(wat.counter_component())}" in message
    assert (root / "dist" / "mini-0.1.0" / "module.wasm").read_bytes() == first  # untouched


def test_rebuild_with_the_locked_digests_is_allowed(locked: tuple[Path, Path, Path, bytes]) -> None:
    root, cache, _, first = locked
    (root / "app.py").write_text((root / "app.py").read_text().replace("# changed\n", ""))
    assert build.build_project(root, cache_dir=cache).module_sha256 == wat.sha256(first)


def test_building_elsewhere_is_not_refused(locked: tuple[Path, Path, Path, bytes], tmp_path: Path) -> None:
    root, cache, _, _ = locked
    result = build.build_project(root, cache_dir=cache, out_dir=tmp_path / "elsewhere")
    assert result.module_sha256 == wat.sha256(wat.counter_component())


def test_cli_build_says_bundle_locked_with_what_to_do(locked: tuple[Path, Path, Path, bytes]) -> None:
    root, cache, lock, _ = locked
    proc = run_cli("build", str(root), cwd=root, env=cli_env(STOCKADE_CACHE_DIR=str(cache.parent)))
    assert proc.returncode == 1
    assert "error: BUNDLE_LOCKED:" in proc.stderr and str(lock) in proc.stderr
    assert "stockade lock remove mini" in proc.stderr and "Traceback" not in proc.stderr


def test_scaffold_gitignore_keeps_the_bundles_a_lock_points_at(tmp_path: Path) -> None:
    # A committed lock must not point at bundles git ignores; private keys stay ignored.
    (tmp_path / ".gitignore").write_text(render("demo", "python")[".gitignore"])
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)

    def ignored(path: str) -> bool:
        return subprocess.run(["git", "-C", str(tmp_path), "check-ignore", "-q", path], check=False).returncode == 0

    assert not ignored("dist/demo-0.1.0/module.wasm") and not ignored("dist/demo-0.1.0/manifest.json")
    assert ignored("signing.pem") and ignored("__pycache__/x.pyc")
