"""The JavaScript build toolchain, installed per user.

JavaScript plugins are built with componentize-js, which runs on Node.js and comes from
npm; esbuild (its platform binary an optional dependency in the lock) bundles a plugin's
npm dependencies (:mod:`sdk.author._jsdeps`). Its exact versions are pinned by
``sdk/toolchain/package.json`` and
``package-lock.json`` (shipped in the wheel, identical to the repository's), and the
toolchain is installed with ``npm ci --ignore-scripts --omit=dev --allow-git=none`` into

    <cache root>/toolchain/js-<first 16 hex of sha256(package-lock.json)>/node_modules

(cache root: :func:`sdk._cachedir.cache_root`). ``--omit=dev`` leaves out the
``devDependencies`` only the repository's tests use (``@modelcontextprotocol/sdk`` and its
transitive packages), so a build never depends on a source
checkout's ``node_modules``. ``$STOCKADE_JS_TOOLCHAIN`` names another directory holding
a ``node_modules`` with the pinned versions (tests point it at a checkout to avoid a
download); such a directory is checked, never installed into.

The first JavaScript build installs the toolchain itself (``ensure_js_toolchain``), with
a progress line; ``stockade toolchain install`` does it ahead of time. The install goes
into a temporary directory beside the final one and is renamed into place once every
pinned package is present at its pinned version, so a failed or interrupted install
never leaves a half toolchain that a later build would trust.

Example::

    toolchain = ensure_js_toolchain(report)
    toolchain.node_modules      # ~/.cache/stockade/toolchain/js-1a2b.../node_modules
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from host.files import replace_dir
from sdk._cachedir import toolchain_root

__all__ = [
    "JS_TOOLCHAIN_ENV",
    "PINS_DIR",
    "JsToolchain",
    "ToolchainError",
    "ensure_js_toolchain",
    "install_js_toolchain",
    "js_toolchain_dir",
    "pinned_packages",
    "toolchain_problems",
]

JS_TOOLCHAIN_ENV: Final = "STOCKADE_JS_TOOLCHAIN"
PINS_DIR: Final = Path(__file__).resolve().parents[1] / "toolchain"
INSTALL_TIMEOUT_S: Final = 900  # s, one npm ci
EXPECTED_INSTALL_S: Final = 10.0  # s, npm ci from a warm npm cache on 2 cores, measured 8.3 s (progress only)
_OUTPUT_TAIL: Final = 3000  # characters of npm's output kept in an error

Report = Callable[[str, float], None]


class ToolchainError(RuntimeError):
    """The toolchain is missing, wrong, or could not be installed (message says what to do)."""


@dataclass(frozen=True, slots=True)
class JsToolchain:
    """An installed, checked JavaScript toolchain.

    Attributes:
        root: the directory holding ``node_modules``.
        versions: ``{package: version}`` of every pinned package, as installed.
        installed_now: True when this call installed it.
    """

    root: Path
    versions: dict[str, str]
    installed_now: bool = False

    @property
    def node_modules(self) -> Path:
        """``root/node_modules``."""
        return self.root / "node_modules"


def _lock_bytes() -> bytes:
    return (PINS_DIR / "package-lock.json").read_bytes()


def pinned_packages() -> dict[str, str]:
    """``{package: exact version}`` of the toolchain's direct dependencies, from the lock."""
    lock = json.loads(_lock_bytes())
    wanted = lock["packages"][""]["dependencies"]
    return {name: str(lock["packages"][f"node_modules/{name}"]["version"]) for name in sorted(wanted)}


def js_toolchain_dir() -> Path:
    """``$STOCKADE_JS_TOOLCHAIN``, else ``<cache root>/toolchain/js-<pin digest>``."""
    explicit = os.environ.get(JS_TOOLCHAIN_ENV)
    if explicit:
        return Path(explicit).expanduser()
    return toolchain_root() / f"js-{hashlib.sha256(_lock_bytes()).hexdigest()[:16]}"


def toolchain_problems(root: Path) -> list[str]:
    """What is missing or at the wrong version under ``root/node_modules`` (empty: usable)."""
    problems = []
    for name, version in pinned_packages().items():
        manifest = root / "node_modules" / name / "package.json"
        try:
            found = json.loads(manifest.read_text("utf-8")).get("version")
        except (OSError, ValueError):
            problems.append(f"{name} {version} is not installed")
            continue
        if found != version:
            problems.append(f"{name} is {found}, the pin is {version}")
    return problems


def _npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        raise ToolchainError(
            "npm is not on PATH; JavaScript plugins need Node.js >= 20 with npm (https://nodejs.org)"
        )
    return npm


def install_js_toolchain(root: Path | None = None, *, report: Report | None = None) -> JsToolchain:
    """Install the pinned toolchain into ``root`` (default :func:`js_toolchain_dir`).

    Runs ``npm ci --ignore-scripts --omit=dev --allow-git=none`` (no package of the
    toolchain needs an install script; the test-only devDependencies are not installed)
    in a temporary directory beside ``root``, checks every pinned version, then renames
    it into place. An already complete toolchain is left alone.

    Raises:
        ToolchainError: npm is missing, failed, or installed other versions than pinned.

    Returns:
        The installed toolchain.
    """
    target = Path(root) if root is not None else js_toolchain_dir()
    if not toolchain_problems(target):
        return JsToolchain(target, pinned_packages())
    progress = report or (lambda stage, fraction: None)
    npm = _npm()
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}-installing-", dir=target.parent))
    try:
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(PINS_DIR / name, work / name)
        argv = [
            npm, "ci", "--ignore-scripts", "--omit=dev", "--allow-git=none", "--no-audit", "--no-fund",
            "--prefer-offline",
        ]  # fmt: skip
        _run_npm(argv, work, progress)
        problems = toolchain_problems(work)
        if problems:
            raise ToolchainError("npm ci finished but the toolchain is incomplete: " + "; ".join(problems))
        replace_dir(work, target)  # an incomplete or outdated toolchain is replaced whole
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return JsToolchain(target, pinned_packages(), installed_now=True)


def _run_npm(argv: list[str], cwd: Path, report: Report) -> None:
    log_path = cwd.parent / f"{cwd.name}.log"
    started = time.monotonic()
    try:
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
            while proc.poll() is None:
                elapsed = time.monotonic() - started
                if elapsed > INSTALL_TIMEOUT_S:
                    proc.kill()
                    proc.wait()
                    raise ToolchainError(f"npm ci did not finish in {INSTALL_TIMEOUT_S} s")
                report(
                    f"installing the JavaScript toolchain into {cwd.parent} "
                    f"(first JavaScript build only; about {EXPECTED_INSTALL_S:.0f} s from npm's cache, "
                    f"longer when downloading; {elapsed:.0f} s)",
                    min(0.9, elapsed / EXPECTED_INSTALL_S),
                )
                time.sleep(0.25)
        if proc.returncode != 0:
            tail = log_path.read_text("utf-8", errors="replace")[-_OUTPUT_TAIL:]
            raise ToolchainError(f"npm ci failed with exit status {proc.returncode}:\n{tail}")
    finally:
        log_path.unlink(missing_ok=True)


def ensure_js_toolchain(report: Report | None = None) -> JsToolchain:
    """The usable toolchain, installing it on first use into the per-user cache.

    A directory named by ``$STOCKADE_JS_TOOLCHAIN`` is only checked, never written.

    Raises:
        ToolchainError: the named directory lacks the pinned packages, or the install failed.
    """
    root = js_toolchain_dir()
    problems = toolchain_problems(root)
    if not problems:
        return JsToolchain(root, pinned_packages())
    if os.environ.get(JS_TOOLCHAIN_ENV):
        raise ToolchainError(
            f"${JS_TOOLCHAIN_ENV} names {root}, which does not hold the pinned JavaScript toolchain ("
            + "; ".join(problems)
            + "); unset it to use the per-user toolchain, or run `npm ci` there with "
            + str(PINS_DIR / "package-lock.json")
        )
    return install_js_toolchain(root, report=report)
