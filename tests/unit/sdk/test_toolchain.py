"""sdk.author.toolchain: the pinned JavaScript toolchain lives in a per-user cache, never a checkout.

The real install (``npm ci``) runs in ``tests/cli/test_author_quickstart.py`` from a wheel;
here the pins, the checks and the all-or-nothing install are tested with a real
subprocess standing in for npm where the failure must be forced.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from sdk.author import toolchain
from sdk.author.toolchain import ToolchainError
from tests.support.cli import cli_env, run_cli

REPO = Path(__file__).resolve().parents[3]


def test_shipped_pins_are_the_repository_package_json_and_lock() -> None:
    # The wheel ships sdk/toolchain/; a checkout's npm ci reads the root files: one pin set.
    for name in ("package.json", "package-lock.json"):
        assert (toolchain.PINS_DIR / name).read_bytes() == (REPO / name).read_bytes(), name
    root = json.loads((REPO / "package.json").read_text())["dependencies"]
    assert set(toolchain.pinned_packages()) == set(root)
    assert toolchain.pinned_packages()["@bytecodealliance/componentize-js"] == "0.23.0"


def test_esbuild_pinned_exactly_with_its_platform_binary_in_the_lock() -> None:
    # JavaScript plugins' npm dependencies are bundled with esbuild (sdk/author/_jsdeps.py); its
    # native binary is an optional dependency that `npm ci` installs only if the lock has it.
    assert json.loads((REPO / "package.json").read_text())["dependencies"]["esbuild"] == "0.28.2"
    packages = json.loads((REPO / "package-lock.json").read_text())["packages"]
    assert packages["node_modules/esbuild"]["version"] == "0.28.2"
    binary = packages["node_modules/@esbuild/linux-x64"]
    assert binary["version"] == "0.28.2" and binary["integrity"].startswith("sha512-")
    assert binary["optional"] is True and binary["os"] == ["linux"] and binary["cpu"] == ["x64"]


def test_default_toolchain_dir_is_in_the_per_user_cache_keyed_by_the_pins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STOCKADE_CACHE_DIR", str(tmp_path / "cache"))
    path = toolchain.js_toolchain_dir()
    assert path.parent == tmp_path / "cache" / "toolchain"
    assert path.name.startswith("js-") and len(path.name) == 3 + 16
    monkeypatch.delenv("STOCKADE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert toolchain.js_toolchain_dir().parent == tmp_path / "xdg" / "stockade" / "toolchain"


def _fake_toolchain(root: Path, versions: dict[str, str]) -> None:
    for name, version in versions.items():
        package = root / "node_modules" / name
        package.mkdir(parents=True)
        (package / "package.json").write_text(json.dumps({"name": name, "version": version}))


def test_a_toolchain_with_a_wrong_version_is_reported_not_used(tmp_path: Path) -> None:
    pins = toolchain.pinned_packages()
    wrong = dict(pins, **{"@bytecodealliance/componentize-js": "0.19.3"})
    _fake_toolchain(tmp_path, wrong)
    assert toolchain.toolchain_problems(tmp_path) == [
        "@bytecodealliance/componentize-js is 0.19.3, the pin is 0.23.0"
    ]
    assert toolchain.toolchain_problems(REPO) == []  # the checkout's npm ci matches the pins


def test_named_toolchain_without_the_pins_is_refused_never_installed_into(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    named = tmp_path / "elsewhere"
    named.mkdir()
    monkeypatch.setenv("STOCKADE_JS_TOOLCHAIN", str(named))
    with pytest.raises(ToolchainError, match=r"STOCKADE_JS_TOOLCHAIN names .*componentize-js 0\.23\.0 is not installed"):
        toolchain.ensure_js_toolchain()
    assert list(named.iterdir()) == []


def _fake_npm(bin_dir: Path, script: str) -> None:
    bin_dir.mkdir()
    npm = bin_dir / "npm"
    npm.write_text("#!/bin/sh\n" + script)
    npm.chmod(npm.stat().st_mode | stat.S_IXUSR)


def test_failed_install_leaves_no_half_toolchain_for_a_later_build_to_trust(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # npm writes part of node_modules, then fails (a network error mid-install).
    _fake_npm(
        tmp_path / "bin",
        "mkdir -p node_modules/es-module-lexer\n"
        'echo \'{"version": "1.7.0"}\' > node_modules/es-module-lexer/package.json\n'
        "echo 'npm ERR! network ECONNRESET' >&2\nexit 1\n",
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STOCKADE_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(ToolchainError, match=r"npm ci failed with exit status 1:\n.*ECONNRESET"):
        toolchain.ensure_js_toolchain()
    assert list((tmp_path / "cache" / "toolchain").iterdir()) == []


def test_install_that_yields_other_versions_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # npm "succeeds" but the packages are not the pinned ones (a hijacked registry mirror).
    lines = [
        f"mkdir -p node_modules/{name} && echo '{{\"version\": \"9.9.9\"}}' > node_modules/{name}/package.json"
        for name in toolchain.pinned_packages()
    ]
    _fake_npm(tmp_path / "bin", "\n".join(lines) + "\nexit 0\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    target = tmp_path / "tc"
    with pytest.raises(ToolchainError, match=r"incomplete: .*is 9\.9\.9, the pin is"):
        toolchain.install_js_toolchain(target)
    assert not target.exists() and list(tmp_path.glob(".tc-*")) == []


def test_missing_npm_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolchainError, match=r"npm is not on PATH; .*Node\.js >= 20"):
        toolchain.install_js_toolchain(tmp_path / "tc")


def test_cli_status_and_install_against_a_named_toolchain(tmp_path: Path) -> None:
    ok = run_cli("toolchain", "status", "--json", cwd=tmp_path, env=cli_env(STOCKADE_JS_TOOLCHAIN=str(REPO)))
    assert ok.returncode == 0 and json.loads(ok.stdout)["problems"] == []
    empty = tmp_path / "empty"
    empty.mkdir()
    env = cli_env(STOCKADE_JS_TOOLCHAIN=str(empty))
    status = run_cli("toolchain", "status", cwd=tmp_path, env=env)
    assert status.returncode == 1 and "componentize-js 0.23.0 is not installed" in status.stderr
    install = run_cli("toolchain", "install", cwd=tmp_path, env=env)
    assert install.returncode == 1 and "TOOLCHAIN_FAILED" in install.stderr
    assert list(empty.iterdir()) == []  # a named toolchain is never installed into


def test_user_toolchain_installs_no_test_only_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # @modelcontextprotocol/sdk (and its transitive packages) serve only the tests
    # (tests/mcp/ts_client.mjs): a devDependency, which the per-user install omits.
    root = json.loads((REPO / "package.json").read_text())
    assert "@modelcontextprotocol/sdk" in root["devDependencies"]
    assert "@modelcontextprotocol/sdk" not in toolchain.pinned_packages()
    packages = json.loads((toolchain.PINS_DIR / "package-lock.json").read_text())["packages"]
    assert packages["node_modules/@modelcontextprotocol/sdk"]["dev"] is True
    lines = [
        f'mkdir -p node_modules/{name} && echo \'{{"version": "{version}"}}\' > node_modules/{name}/package.json'
        for name, version in toolchain.pinned_packages().items()
    ]
    _fake_npm(tmp_path / "bin", f'echo "$@" > {tmp_path / "argv"}\n' + "\n".join(lines) + "\nexit 0\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    toolchain.install_js_toolchain(tmp_path / "tc")
    argv = (tmp_path / "argv").read_text().split()
    assert argv[0] == "ci" and {"--omit=dev", "--ignore-scripts", "--allow-git=none"} <= set(argv)


def test_toolchain_lock_names_only_registry_packages_with_integrity() -> None:
    # What the plugin lock check demands (sdk/author/_jsdeps.py), for the toolchain's own lock
    # (esbuild declares an install script, which --ignore-scripts never runs).
    packages = json.loads((toolchain.PINS_DIR / "package-lock.json").read_text())["packages"]
    for key, entry in packages.items():
        if key and not entry.get("dev"):
            # No `resolved` (omit-lockfile-registry-resolved): npm fetches from the registry.
            assert entry.get("resolved", "https://registry.npmjs.org/").startswith(
                "https://registry.npmjs.org/"
            )
            assert entry["integrity"].startswith("sha512-"), key
