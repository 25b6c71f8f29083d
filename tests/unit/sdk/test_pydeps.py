"""Pure-Python dependencies of Python plugins.

Real pip installs of real wheels, built here by hand into a local directory that pip
reads with ``--find-links`` (no network): one pure-Python, one with a native extension.
The example project (examples/python-deps) bundles a real PyPI package.
"""

from __future__ import annotations

import base64
import hashlib
import sys
import zipfile
from pathlib import Path

import pytest

from host.errors import ManifestInvalid
from sdk.author._pydeps import DependencyError, DependencyRefused, check_dependencies, install_dependencies
from sdk.author.project import load_project
from tests.support.cli import REPO, cli_env, run_cli

HASH = "sha256:" + "a" * 64


def _wheel(directory: Path, name: str, *, native: bool = False) -> Path:
    """A minimal valid wheel ``name-1.0`` holding one module (and a .so when native)."""
    cp = f"cp{sys.version_info.major}{sys.version_info.minor}"  # installable by the running pip
    tag = f"{cp}-{cp}-linux_x86_64" if native else "py3-none-any"
    path = directory / f"{name}-1.0-{tag}.whl"
    files = {f"{name}/__init__.py": b"VALUE = 42\n"}
    if native:
        files[f"{name}/_speedups.cpython-311-x86_64-linux-gnu.so"] = b"\x7fELF not really"
    info = f"{name}-1.0.dist-info"
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode()
    purelib = "false" if native else "true"
    files[f"{info}/WHEEL"] = f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: {purelib}\nTag: {tag}\n".encode()
    record = []
    for rel, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{rel},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(path, "w") as archive:
        for rel, data in files.items():
            archive.writestr(rel, data)
    return path


@pytest.fixture
def local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    return wheels


def _noop(stage: str, fraction: float) -> None:
    del stage, fraction


def test_pure_python_wheel_installed_for_bundling(local_index: Path, tmp_path: Path) -> None:
    _wheel(local_index, "purepkg")
    target = tmp_path / "deps"
    install_dependencies(["purepkg==1.0"], target, _noop)
    assert (target / "purepkg" / "__init__.py").read_text() == "VALUE = 42\n"


def test_native_extension_refused_with_a_clear_message(local_index: Path, tmp_path: Path) -> None:
    _wheel(local_index, "fastpkg", native=True)
    with pytest.raises(DependencyRefused, match=r"dependency fastpkg holds a native extension .*pure-Python"):
        install_dependencies(["fastpkg==1.0"], tmp_path / "deps", _noop)


def test_tampered_dependency_wheel_refused_by_its_hash(local_index: Path, tmp_path: Path) -> None:
    _wheel(local_index, "purepkg")
    with pytest.raises(DependencyError, match=r"(?s)pip could not install.*DO NOT MATCH THE HASHES"):
        install_dependencies([f"purepkg==1.0 --hash={HASH}"], tmp_path / "deps", _noop)
    assert not (tmp_path / "deps" / "purepkg").exists()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["humanize>=4"], "must be pinned exactly"),
        (["humanize"], "must be pinned exactly"),
        (["git+https://example.com/x.git"], "must be pinned exactly"),
        (["a==1", f"b==2 --hash={HASH}"], "every dependency carries --hash"),
        ("humanize==4.9.0", "must be a list of strings"),
    ],
    ids=["range", "unpinned", "url", "mixed-hashes", "not-a-list"],
)
def test_unpinned_or_mixed_dependencies_refused(value: object, message: str) -> None:
    with pytest.raises(DependencyError, match=message):
        check_dependencies(value)


def test_dependencies_reported_against_stockade_toml(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text("")
    (tmp_path / "stockade.toml").write_text(
        '[package]\nname = "x"\nversion = "0.1.0"\nlanguage = "python"\ndependencies = ["requests"]\n'
    )
    with pytest.raises(ManifestInvalid, match=r"stockade.toml: package.dependencies: dependency 'requests'"):
        load_project(tmp_path)


@pytest.mark.slow
def test_example_with_a_real_dependency_passes_its_tests(tmp_path: Path) -> None:
    # examples/python-deps bundles humanize (from the package index pip is configured with).
    proc = run_cli(
        "test", str(REPO / "examples" / "python-deps"), cwd=tmp_path,
        env=cli_env(XDG_CACHE_HOME=str(REPO / ".stockade-cache")), timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout
