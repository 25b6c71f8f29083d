"""npm dependencies of JavaScript plugins.

Real npm runs against a real loopback HTTP server serving real package tarballs (a
remote-tarball dependency, recorded in a lock that npm itself writes), so nothing reaches
a registry: one package with an install script and a ``binding.gyp`` (a node-gyp addon),
one shipping a prebuilt ``.node`` addon without any script. The example project
(examples/js-deps) bundles a real npm package from the registry and passes its tests.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdk.author._jsdeps import (
    DEFAULT_REGISTRY,
    check_lock,
    configured_registry,
    install_js_dependencies,
    needs_bundling,
    package_files,
    refuse_native,
)
from sdk.author._pydeps import DependencyError, DependencyRefused
from sdk.author.build import BuildError, build_project
from tests.support.cli import REPO, cli_env, run_cli
from tests.support.servers import LoopbackServer, respond

pytestmark = pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")

EXAMPLE = REPO / "examples" / "js-deps"
CACHE_ENV = {"XDG_CACHE_HOME": str(REPO / ".stockade-cache"), "STOCKADE_JS_TOOLCHAIN": str(REPO)}
TOML = """[package]
name = "uses-deps"
version = "0.1.0"
language = "javascript"

[[tools]]
name = "uses-deps.go"
description = "go"
effect = "read"
risk = "low"
input_schema = { type = "object", additionalProperties = false, properties = {}, required = [] }
"""


def _tarball(name: str, files: dict[str, str], scripts: dict[str, str] | None = None) -> bytes:
    """An npm package tarball (``package/`` prefix) holding ``files`` and a package.json."""
    manifest = {
        "name": name,
        "version": "1.0.0",
        "main": "index.js",
        **({"scripts": scripts} if scripts else {}),
    }
    entries = {"package.json": json.dumps(manifest), "index.js": "module.exports = 42;\n", **files}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for rel, text in entries.items():
            data = text.encode()
            info = tarfile.TarInfo(f"package/{rel}")
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _integrity(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


@pytest.fixture
def native_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[LoopbackServer, Path]]:
    """A loopback server with two native packages; the install script would write ``marker``.

    The server is the configured npm registry (``$npm_config_registry``): the lock check
    refuses a tarball resolved anywhere else."""
    marker = tmp_path / "install-script-ran"
    gyp = _tarball(
        "gyp-addon",
        {"binding.gyp": '{"targets": [{"target_name": "addon", "sources": ["addon.cc"]}]}', "addon.cc": ""},
        scripts={"install": f"touch {marker}"},
    )
    prebuilt = _tarball("prebuilt-addon", {"build/Release/addon.node": "\x7fELF not really"})
    routes = {
        "/gyp-addon-1.0.0.tgz": respond(200, gyp, [("Content-Type", "application/octet-stream")]),
        "/prebuilt-addon-1.0.0.tgz": respond(200, prebuilt, [("Content-Type", "application/octet-stream")]),
    }
    with LoopbackServer(routes=routes) as server:
        monkeypatch.setenv("npm_config_registry", server.url("/"))
        yield server, marker


def _project(root: Path, deps: dict[str, str], *, lock: bool = True) -> Path:
    """A JavaScript plugin project whose package.json lists ``deps``; npm writes its lock."""
    root.mkdir(parents=True)
    (root / "stockade.toml").write_text(TOML)
    (root / "app.js").write_text('import { tool } from "stockade";\ntool("uses-deps.go", () => ({}));\n')
    (root / "package.json").write_text(
        json.dumps({"name": "uses-deps", "private": True, "dependencies": deps})
    )
    if lock:
        subprocess.run(
            ["npm", "install", "--package-lock-only", "--ignore-scripts", "--no-audit", "--no-fund"],
            cwd=root, check=True, capture_output=True, timeout=120,
        )  # fmt: skip
    return root


def _noop(stage: str, fraction: float) -> None:
    del stage, fraction


def test_dependency_with_install_script_refused_from_the_lock_before_any_download(
    tmp_path: Path, native_packages: tuple[LoopbackServer, Path]
) -> None:
    server, marker = native_packages
    project = _project(tmp_path / "p", {"gyp-addon": server.url("/gyp-addon-1.0.0.tgz")})
    fetched = len(server.requests)  # npm fetched the tarball to write the lock
    assert json.loads((project / "package-lock.json").read_text())["packages"]["node_modules/gyp-addon"][
        "hasInstallScript"
    ]
    with pytest.raises(BuildError, match=r"gyp-addon@1\.0\.0 needs an install script") as caught:
        build_project(project, out_dir=tmp_path / "out", cache_dir=tmp_path / "cache")
    assert caught.value.code == "BUILD_DEPENDENCY_REFUSED"
    assert len(server.requests) == fetched and not marker.exists()
    assert not (tmp_path / "out").exists()


def test_cli_reports_a_refused_dependency_with_its_code(
    tmp_path: Path, native_packages: tuple[LoopbackServer, Path]
) -> None:
    server, _ = native_packages
    project = _project(tmp_path / "p", {"gyp-addon": server.url("/gyp-addon-1.0.0.tgz")})
    proc = run_cli("build", str(project), cwd=tmp_path, env=cli_env(**CACHE_ENV))
    assert proc.returncode == 1
    assert (
        "error: BUILD_DEPENDENCY_REFUSED: package-lock.json: gyp-addon@1.0.0 needs an install script"
        in proc.stderr
    )
    as_json = run_cli("build", str(project), "--json", cwd=tmp_path, env=cli_env(**CACHE_ENV))
    assert json.loads(as_json.stdout)["error"]["code"] == "BUILD_DEPENDENCY_REFUSED"


def _stage(project: Path, stage: Path) -> Path:
    stage.mkdir()
    for name, data in package_files(project).items():
        (stage / name).write_bytes(data)
    return stage


def test_install_script_never_runs_at_build_time_even_past_the_lock_check(
    tmp_path: Path, native_packages: tuple[LoopbackServer, Path]
) -> None:
    # Defence in depth: npm ci itself is told not to run scripts (npm would run this one,
    # which the lock records, without --ignore-scripts).
    server, marker = native_packages
    project = _project(tmp_path / "p", {"gyp-addon": server.url("/gyp-addon-1.0.0.tgz")})
    with pytest.raises(DependencyRefused, match=r"dependency gyp-addon holds a Node\.js native addon"):
        install_js_dependencies(_stage(project, tmp_path / "stage"), _noop)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("package", "message"),
    [
        ("gyp-addon", r"dependency gyp-addon holds a Node\.js native addon \(gyp-addon/binding\.gyp\)"),
        (
            "prebuilt-addon",
            r"dependency prebuilt-addon holds a Node\.js native addon \(prebuilt-addon/build/Release/addon\.node\)",
        ),
    ],
    ids=["node-gyp-addon", "prebuilt-addon"],
)
def test_native_addon_hidden_by_a_tampered_lock_refused_and_its_install_script_never_runs(
    tmp_path: Path, native_packages: tuple[LoopbackServer, Path], package: str, message: str
) -> None:
    server, marker = native_packages
    project = _project(tmp_path / "p", {package: server.url(f"/{package}-1.0.0.tgz")})
    lock = json.loads((project / "package-lock.json").read_text())
    lock["packages"][f"node_modules/{package}"].pop("hasInstallScript", None)  # the lock hides it
    (project / "package-lock.json").write_text(json.dumps(lock))
    check_lock((project / "package-lock.json").read_bytes())  # passes the lock check...
    with pytest.raises(DependencyRefused, match=message):  # ...and is caught once installed
        install_js_dependencies(_stage(project, tmp_path / "stage"), _noop)
    assert not marker.exists()  # npm ci --ignore-scripts: the install script never ran


def test_install_script_declared_only_in_the_installed_package_is_refused(tmp_path: Path) -> None:
    # A package whose install script the lock does not record and that ships no addon file.
    node_modules = tmp_path / "node_modules" / "sneaky"
    node_modules.mkdir(parents=True)
    (node_modules / "package.json").write_text(
        json.dumps({"name": "sneaky", "scripts": {"postinstall": "x"}})
    )
    with pytest.raises(
        DependencyRefused, match=r"dependency sneaky \(sneaky\) declares a postinstall script"
    ):
        refuse_native(tmp_path / "node_modules")


def test_native_addon_of_a_nested_scoped_dependency_names_that_package(tmp_path: Path) -> None:
    addon = tmp_path / "node_modules" / "outer" / "node_modules" / "@scope" / "inner" / "build" / "x.node"
    addon.parent.mkdir(parents=True)
    addon.write_bytes(b"\x7fELF")
    with pytest.raises(DependencyRefused, match=r"dependency @scope/inner holds a Node\.js native addon"):
        refuse_native(tmp_path / "node_modules")


def test_dependencies_without_a_lock_refused(tmp_path: Path) -> None:
    project = _project(tmp_path / "p", {"pretty-bytes": "7.2.0"}, lock=False)
    with pytest.raises(BuildError, match=r"lists dependencies but there is no package-lock\.json"):
        build_project(project, out_dir=tmp_path / "out", cache_dir=tmp_path / "cache")


@pytest.mark.parametrize(
    ("lock", "error", "message"),
    [
        ({"lockfileVersion": 1, "dependencies": {}}, DependencyError, "lockfileVersion 2 or 3"),
        (
            {
                "lockfileVersion": 3,
                "packages": {"": {}, "node_modules/mine": {"resolved": "file:../mine", "link": True}},
            },
            DependencyRefused,
            r"mine is a local package",
        ),
        (
            {
                "lockfileVersion": 3,
                "packages": {"": {}, "node_modules/tool": {"hasInstallScript": True, "dev": True}},
            },
            None,
            "",
        ),
    ],
    ids=["lockfile-v1", "local-link", "dev-only-install-script-not-installed"],
)
def test_lock_checks(lock: dict[str, object], error: type[Exception] | None, message: str) -> None:
    if error is None:
        check_lock(json.dumps(lock).encode())
        return
    with pytest.raises(error, match=message):
        check_lock(json.dumps(lock).encode())


def test_symlinked_package_json_refused(tmp_path: Path) -> None:
    # A symlink could make the build read (and hash into its key) a file outside the project.
    (tmp_path / "elsewhere.json").write_text('{"dependencies": {}}')
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "package.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(DependencyError, match=r"package\.json must be a regular file"):
        package_files(tmp_path / "project")


def test_package_json_that_is_not_json_is_reported(tmp_path: Path) -> None:
    (tmp_path / "package.json").write_text("{ not json")
    with pytest.raises(DependencyError, match=r"package\.json is not valid JSON"):
        needs_bundling(package_files(tmp_path))


def test_package_json_without_dependencies_is_not_bundled(tmp_path: Path) -> None:
    (tmp_path / "package.json").write_text(json.dumps({"type": "module", "devDependencies": {"x": "1.0.0"}}))
    assert needs_bundling(package_files(tmp_path)) is False
    (tmp_path / "package.json").write_text('{"dependencies": ["x"]}')
    with pytest.raises(DependencyError, match='"dependencies" must be an object'):
        needs_bundling(package_files(tmp_path))


@pytest.mark.slow
def test_example_with_an_npm_dependency_builds_and_passes_its_tests_through_host(tmp_path: Path) -> None:
    # examples/js-deps bundles pretty-bytes (an ES module) and bytes (CommonJS) from the npm
    # registry with esbuild; its tests call both through the harness's real Host.
    proc = run_cli("test", str(EXAMPLE), cwd=tmp_path, env=cli_env(**CACHE_ENV), timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 passed" in proc.stdout


@pytest.mark.slow
def test_build_is_cached_by_source_and_lock_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STOCKADE_JS_TOOLCHAIN", str(REPO))
    cache = REPO / ".stockade-cache" / "stockade" / "builds"
    copy = tmp_path / "js-deps"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("dist", "node_modules", "tests"))
    first = build_project(copy, out_dir=tmp_path / "out", cache_dir=cache)
    again = build_project(copy, out_dir=tmp_path / "out", cache_dir=cache)
    assert again.cached and again.module_sha256 == first.module_sha256
    # A lock whose integrity was tampered with is a different key: npm ci runs and refuses it
    # (served from the cache, the old module would have hidden the change).
    lock = json.loads((copy / "package-lock.json").read_text())
    lock["packages"]["node_modules/pretty-bytes"]["integrity"] = _integrity(b"something else")
    (copy / "package-lock.json").write_text(json.dumps(lock, indent=2))
    with pytest.raises(BuildError, match=r"(?s)npm ci could not install.*EINTEGRITY"):
        build_project(copy, out_dir=tmp_path / "out", cache_dir=cache)


# Supply chain: the lock may name only registry packages with integrity.
_SHA = "sha512-" + "A" * 86 + "=="


def _lock_with(entry: dict[str, object], name: str = "y") -> bytes:
    return json.dumps(
        {
            "lockfileVersion": 3,
            "packages": {
                "": {"dependencies": {name: "*"}},
                "node_modules/ok": {
                    "version": "1.0.0",
                    "resolved": "https://registry.npmjs.org/ok/-/ok-1.0.0.tgz",
                    "integrity": _SHA,
                },
                f"node_modules/{name}": {"version": "1.0.0", **entry},
            },
        }
    ).encode()


def test_jsdeps_lock_with_git_dependency_refused() -> None:
    lock = _lock_with(
        {"resolved": "git+ssh://git@github.com/evil/y.git#0123456789abcdef0123456789abcdef01234567"}
    )
    with pytest.raises(
        DependencyRefused, match=r"y \(git\+ssh://git@github\.com/evil/y\.git#0123.*\) is a git dependency"
    ):
        check_lock(lock, DEFAULT_REGISTRY)


def test_jsdeps_lock_with_github_shorthand_dependency_refused() -> None:
    with pytest.raises(DependencyRefused, match=r"is a git dependency"):
        check_lock(_lock_with({"resolved": "github:evil/y#main", "integrity": _SHA}), DEFAULT_REGISTRY)


def test_jsdeps_lock_with_off_registry_tarball_refused() -> None:
    lock = _lock_with({"resolved": "https://evil.example/y-1.0.0.tgz", "integrity": _SHA})
    with pytest.raises(
        DependencyRefused,
        match=r"y \(https://evil\.example/y-1\.0\.0\.tgz\) is resolved outside the configured npm registry "
        r"https://registry\.npmjs\.org/",
    ):
        check_lock(lock, DEFAULT_REGISTRY)


@pytest.mark.parametrize(
    "resolved",
    [
        "https://registry.npmjs.org.evil.example/y/-/y-1.0.0.tgz",  # a look-alike host
        "http://registry.npmjs.org/y/-/y-1.0.0.tgz",  # downgraded to plain HTTP
        "https://registry.npmjs.org:8443/y/-/y-1.0.0.tgz",  # another port
        "https://user@registry.npmjs.org/y/-/y-1.0.0.tgz",  # userinfo
    ],
    ids=["lookalike-host", "plain-http", "other-port", "userinfo"],
)
def test_jsdeps_lock_with_lookalike_registry_url_refused(resolved: str) -> None:
    with pytest.raises(DependencyRefused, match=r"resolved outside the configured npm registry"):
        check_lock(_lock_with({"resolved": resolved, "integrity": _SHA}), DEFAULT_REGISTRY)


def test_jsdeps_lock_off_a_registry_path_prefix_refused() -> None:
    mirror = "https://npm.corp.example/api/npm/"
    ok = {"resolved": "https://npm.corp.example/api/npm/y/-/y-1.0.0.tgz", "integrity": _SHA}
    check_lock(
        _lock_with(ok).replace(b"https://registry.npmjs.org/ok", b"https://npm.corp.example/api/npm/ok"),
        mirror,
    )
    with pytest.raises(DependencyRefused, match=r"resolved outside"):
        check_lock(
            _lock_with({"resolved": "https://npm.corp.example/other/y-1.0.0.tgz", "integrity": _SHA}), mirror
        )


def test_jsdeps_lock_entry_without_integrity_refused() -> None:
    lock = _lock_with({"resolved": "https://registry.npmjs.org/y/-/y-1.0.0.tgz"})
    with pytest.raises(DependencyRefused, match=r"package-lock\.json: y has no integrity hash"):
        check_lock(lock, DEFAULT_REGISTRY)


def test_jsdeps_lock_of_registry_packages_with_integrity_passes() -> None:
    check_lock(
        _lock_with({"resolved": "https://registry.npmjs.org/y/-/y-1.0.0.tgz", "integrity": _SHA}),
        DEFAULT_REGISTRY,
    )
    # A dev-only git package is not installed (npm ci --omit=dev): not refused.
    dev = {"resolved": "git+ssh://git@github.com/evil/y.git#0123", "dev": True}
    check_lock(_lock_with(dev), DEFAULT_REGISTRY)


def test_jsdeps_configured_registry_follows_npm_config_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("npm_config_registry", "http://127.0.0.1:4873")
    assert configured_registry() == "http://127.0.0.1:4873/"
    with pytest.raises(
        DependencyRefused, match=r"outside the configured npm registry http://127\.0\.0\.1:4873/"
    ):
        check_lock(_lock_with({"resolved": "https://registry.npmjs.org/y/-/y-1.0.0.tgz", "integrity": _SHA}))


def test_jsdeps_npm_ci_runs_with_allow_git_none_and_ignore_scripts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The installed npm knows --allow-git (a second fence behind the lock check).
    assert "allow-git" in subprocess.run(
        ["npm", "help", "ci"], capture_output=True, text=True, timeout=60, check=False
    ).stdout.replace("\u2010", "-")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "npm"
    fake.write_text(f'#!/bin/sh\necho "$@" > {tmp_path / "argv"}\nmkdir -p node_modules\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    stage = tmp_path / "stage"
    stage.mkdir()
    install_js_dependencies(stage, _noop)
    argv = (tmp_path / "argv").read_text().split()
    assert argv[0] == "ci" and {"--ignore-scripts", "--allow-git=none", "--omit=dev"} <= set(argv)
