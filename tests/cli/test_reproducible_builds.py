"""Rebuilding a project elsewhere, with a fresh cache, and ``stockade verify-build``.

For each language, with and without dependencies, the example is copied into two
directories of different depth; the first copy is built with ``stockade build`` into its
own cache, then ``stockade verify-build`` rebuilds the second copy in a clean temporary
cache and compares. What must hold today: the source digest and toolchain the bundle
records (``build.json``) do not depend on where or when the project was built, and the
modules differ at most in the pre-initialized memory snapshot. What does not hold yet,
byte-identical modules, is pinned as a strict xfail (docs/authors.md, "Reproducible
builds", says which build-time state the toolchains still record), so the day a
toolchain update makes it hold, the xfail fails and the marker must go.

Five real builds in all (about 10-30 s each on 2 cores): the locked-package test rebuilds
a copy of the Python example's first build instead of building one of its own; one
module, so ``--dist loadscope`` keeps them on one worker.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from host.canonical import canonical_json
from tests.support.cli import REPO, cli_env, json_out, run_cli

# The dependency-using examples are the hello examples plus one dependency each, so they
# cover both languages and the dependency staging at half the builds (CI time).
EXAMPLES = {
    "python-deps": "python-deps",
    "javascript-deps": "js-deps",
}
BUILD_TIMEOUT_S = 900


def _copy(example: str, dest: Path) -> Path:
    shutil.copytree(
        REPO / "examples" / example, dest, ignore=shutil.ignore_patterns("dist", "node_modules", "tests")
    )
    return dest


def _run(*args: str, cwd: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd, env=cli_env(STOCKADE_CACHE_DIR=str(cache)), timeout=BUILD_TIMEOUT_S)


def _build(project: Path, cache: Path) -> Path:
    proc = _run("build", str(project), "--json", cwd=project, cache=cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return Path(json_out(proc)["bundle"])


def _verify(
    target: str, source: Path, cwd: Path, cache: Path, lock: Path | None = None
) -> tuple[int, dict[str, Any]]:
    extra = ("--lock", str(lock)) if lock is not None else ()
    proc = _run("verify-build", target, "--source", str(source), "--json", *extra, cwd=cwd, cache=cache)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return proc.returncode, json_out(proc)


def _checks(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["what"]: c for c in report["checks"]}


@pytest.fixture(scope="module", params=sorted(EXAMPLES))
def rebuilt(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One example built in one place, and verify-build's rebuild of a copy in another."""
    root = tmp_path_factory.mktemp(f"repro-{request.param}")
    example = EXAMPLES[request.param]
    first = _copy(example, root / "one" / example)
    second = _copy(example, root / "two" / "much" / "deeper" / example)
    bundle = _build(first, root / "cache-one")
    status, report = _verify(str(bundle), second, cwd=root, cache=root / "cache-two")
    return {"bundle": bundle, "first": first, "second": second, "status": status, "report": report}


@pytest.mark.slow
def test_the_bundle_records_what_it_was_built_from(rebuilt: dict[str, Any]) -> None:
    bundle = rebuilt["bundle"]
    provenance = json.loads((bundle / "build.json").read_bytes())
    manifest = json.loads((bundle / "manifest.json").read_bytes())
    assert provenance["format"] == "stockade-provenance/1"
    assert provenance["module_sha256"] == manifest["module"]["sha256"]
    assert provenance["module_sha256"] == hashlib.sha256((bundle / "module.wasm").read_bytes()).hexdigest()
    assert provenance["source_sha256"] == hashlib.sha256(canonical_json(provenance["files"])).hexdigest()
    if provenance["language"] == "python":
        assert {"app.py", "_stockade_entry.py", "stockade/_dispatch.py"} <= set(provenance["files"])
        assert set(provenance["toolchain"]) == {"componentize-py"}
    else:
        assert {"app.js", "(sdk)/stockade.js", "(sdk)/build.mjs"} <= set(provenance["files"])
        assert {"@bytecodealliance/componentize-js", "node"} <= set(provenance["toolchain"])
    app = rebuilt["first"] / ("app.py" if provenance["language"] == "python" else "app.js")
    assert provenance["files"][app.name] == hashlib.sha256(app.read_bytes()).hexdigest()


@pytest.mark.slow
def test_a_rebuild_elsewhere_in_a_clean_cache_has_the_same_source_and_toolchain(
    rebuilt: dict[str, Any],
) -> None:
    checks = _checks(rebuilt["report"])
    assert rebuilt["report"]["provenance_recorded"] is True
    assert checks["source"]["match"] is True, checks["source"]
    assert checks["toolchain"]["match"] is True, checks["toolchain"]
    assert rebuilt["report"]["files_changed"] == []


@pytest.mark.slow
def test_a_rebuild_differs_at_most_in_the_pre_initialized_snapshot(rebuilt: dict[str, Any]) -> None:
    difference = rebuilt["report"].get("module_difference")
    assert rebuilt["report"]["ok"] or (difference is not None and difference["snapshot_only"]), difference


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="componentize-py and componentize-js pre-initialize with the build machine's randomness, "
    "clock and file times (docs/authors.md, Reproducible builds)",
)
def test_a_rebuild_elsewhere_in_a_clean_cache_is_byte_identical(rebuilt: dict[str, Any]) -> None:
    assert rebuilt["status"] == 0 and rebuilt["report"]["ok"] is True


@pytest.mark.slow
@pytest.mark.parametrize("rebuilt", ["python-deps"], indirect=True)
def test_verify_build_of_a_locked_package_names_a_one_byte_source_change(
    rebuilt: dict[str, Any], tmp_path: Path
) -> None:
    # The fixture's first build (a copy with its bundle, the fixture's project stays as
    # built): one rebuild here, of the changed source, instead of a build and a rebuild.
    project = tmp_path / "humanizer"
    shutil.copytree(rebuilt["first"], project)
    bundle = project / Path(rebuilt["bundle"]).relative_to(rebuilt["first"])
    locked = _run("lock", "add", str(bundle.relative_to(project)), cwd=project, cache=tmp_path / "cache")
    assert locked.returncode == 0, locked.stdout + locked.stderr
    app = project / "app.py"
    source = app.read_bytes()
    index = source.index(b"humanizer")
    app.write_bytes(source[:index] + b"H" + source[index + 1 :])  # "humanizer" -> "Humanizer"
    status, report = _verify(
        "humanizer", project, cwd=tmp_path, cache=tmp_path / "cache", lock=project / "stockade.lock"
    )
    checks = _checks(report)
    assert status == 1 and report["ok"] is False
    assert report["target"].endswith("stockade.lock:humanizer")
    assert checks["module"]["match"] is False and checks["source"]["match"] is False
    assert checks["toolchain"]["match"] is True
    assert report["files_changed"] == ["app.py"]


def test_verify_build_refuses_a_target_that_is_neither_bundle_nor_locked_package(tmp_path: Path) -> None:
    project = _copy("python-hello", tmp_path / "hello")
    proc = _run("verify-build", "nosuch", "--source", str(project), cwd=tmp_path, cache=tmp_path / "cache")
    assert proc.returncode == 2
    assert "VERIFY_TARGET_NOT_FOUND" in proc.stderr and "no lock at stockade.lock" in proc.stderr
    proc = _run("verify-build", "nosuch", "--source", str(tmp_path), cwd=tmp_path, cache=tmp_path / "cache")
    assert proc.returncode == 2 and "VERIFY_SOURCE_INVALID" in proc.stderr


@pytest.mark.slow
def test_the_build_machines_site_packages_are_not_on_the_plugin_path(tmp_path: Path) -> None:
    """componentize-py's CLI appended the site-packages of ``python3`` on PATH (or of
    $VIRTUAL_ENV) to the guest's path: a plugin importing an undeclared package the build
    machine happened to have (pip) built, and the snapshot recorded that machine's files."""
    project = _copy("python-hello", tmp_path / "hello")
    app = project / "app.py"
    app.write_text("import pip  # installed on the build machine, not declared\n" + app.read_text())
    proc = _run("build", str(project), cwd=project, cache=tmp_path / "cache")
    assert proc.returncode != 0
    assert "BUILD_TOOL_FAILED" in proc.stderr and "No module named 'pip'" in proc.stderr, proc.stderr
