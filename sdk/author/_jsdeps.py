"""npm dependencies of a JavaScript plugin.

A JavaScript plugin declares its dependencies the usual way: ``dependencies`` in a
``package.json`` beside ``stockade.toml``, with a ``package-lock.json`` pinning every
package (required: builds must be reproducible). When ``package.json`` lists any, the
build

1. refuses, from the lock alone and before anything is downloaded, a package npm marks
   ``hasInstallScript`` (an ``install``/``preinstall``/``postinstall`` script, or a
   ``binding.gyp`` node-gyp would compile), a ``file:``/link dependency (it would
   point outside the staged copy), a git dependency (``git+ssh://``, ``github:``: npm
   would run the repository's ``prepare`` script to pack it), a package ``resolved``
   outside the configured npm registry (an arbitrary tarball URL) and a package
   without ``integrity`` (nothing would check what was downloaded);
2. runs ``npm ci --ignore-scripts --allow-git=none --omit=dev`` in the staged copy, which holds only
   ``package.json``, the lock and the sources (the project's own ``node_modules`` and
   ``.npmrc`` are never used), so no package code runs at build time;
3. refuses the result if any installed package holds a Node.js native addon (``*.node``,
   ``binding.gyp``) or declares an install script (a lock that hid it);
4. has ``sdk/js/build.mjs`` bundle the entry module, the guest SDK and the packages into
   one ES module with esbuild (pinned in the JavaScript toolchain; platform ``neutral``,
   format ``esm``, the ``wasi:`` and ``stockade:`` component imports left external),
   which componentize-js builds. A package that imports a Node.js built-in (``fs``,
   ``net``) does not bundle, and the error names it: a component has no Node.js.

``devDependencies`` are neither installed nor bundled. Refusals raise
:class:`~sdk.author._pydeps.DependencyRefused` (``BUILD_DEPENDENCY_REFUSED``); npm failures raise
:class:`~sdk.author._pydeps.DependencyError` with npm's output tail.

Example::

    files = package_files(project_root)           # {"package.json": ..., "package-lock.json": ...}
    if needs_bundling(files):
        install_js_dependencies(stage, report)    # stage holds the two files
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from sdk.author._pydeps import DependencyError, DependencyRefused

__all__ = [
    "DEFAULT_REGISTRY",
    "LOCK_FILE",
    "PACKAGE_FILE",
    "check_lock",
    "configured_registry",
    "install_js_dependencies",
    "needs_bundling",
    "package_files",
]

PACKAGE_FILE: Final = "package.json"
LOCK_FILE: Final = "package-lock.json"
MAX_PACKAGE_FILE_BYTES: Final = 16 * 1024 * 1024  # bytes; package.json or its lock
INSTALL_TIMEOUT_S: Final = 600  # s, one npm ci
_INSTALL_SCRIPTS: Final = ("preinstall", "install", "postinstall")
_NATIVE_SUFFIXES: Final = (".node",)
_NATIVE_NAMES: Final = frozenset({"binding.gyp"})
_OUTPUT_TAIL: Final = 3000  # characters of npm's output kept in an error
DEFAULT_REGISTRY: Final = "https://registry.npmjs.org/"
REGISTRY_ENV: Final = "npm_config_registry"  # npm's own variable; also read as NPM_CONFIG_REGISTRY
_GIT_PREFIXES: Final = ("git+", "git:", "github:", "gitlab:", "bitbucket:", "gist:")
_LOCK_HINT: Final = (
    "run `npm install --package-lock-only --ignore-scripts` in the project and commit the lock"
)


def package_files(root: Path) -> dict[str, bytes]:
    """``package.json`` and ``package-lock.json`` of the project at ``root`` (those present).

    They are staged with the sources and are part of the build's cache key, so a change
    of either rebuilds.

    Raises:
        DependencyError: one of them is a symlink, not a regular file, or too large.
    """
    found: dict[str, bytes] = {}
    for name in (PACKAGE_FILE, LOCK_FILE):
        path = root / name
        if not os.path.lexists(path):
            continue
        if path.is_symlink() or not path.is_file():
            raise DependencyError(f"{path} must be a regular file")
        if path.stat().st_size > MAX_PACKAGE_FILE_BYTES:
            raise DependencyError(f"{path} is larger than {MAX_PACKAGE_FILE_BYTES} bytes")
        found[name] = path.read_bytes()
    return found


def _json(name: str, data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError as exc:
        raise DependencyError(f"{name} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise DependencyError(f"{name} must hold a JSON object")
    return value


def needs_bundling(files: dict[str, bytes]) -> bool:
    """Whether ``package.json`` lists ``dependencies`` (then they are installed and bundled).

    Raises:
        DependencyError: ``package.json`` is not JSON or ``dependencies`` is not an object.
        DependencyRefused: there are dependencies but no lock, or the lock lists a package
            with an install script or a local (``file:``/link) package.
    """
    if PACKAGE_FILE not in files:
        return False
    deps = _json(PACKAGE_FILE, files[PACKAGE_FILE]).get("dependencies", {})
    if not isinstance(deps, dict):
        raise DependencyError(f'{PACKAGE_FILE}: "dependencies" must be an object of name: version')
    if not deps:
        return False
    if LOCK_FILE not in files:
        raise DependencyRefused(
            f"{PACKAGE_FILE} lists dependencies but there is no {LOCK_FILE} pinning them; {_LOCK_HINT}"
        )
    check_lock(files[LOCK_FILE])
    return True


def configured_registry() -> str:
    """The npm registry a build installs from, ending in ``/``.

    ``$npm_config_registry`` (or ``$NPM_CONFIG_REGISTRY``) when set, else what
    ``npm config get registry`` answers outside any project (the user's and the global
    ``.npmrc``; a project's own ``.npmrc`` is never used, as the build never stages
    it), else npm's default registry.
    """
    for name in (REGISTRY_ENV, REGISTRY_ENV.upper()):
        value = os.environ.get(name, "").strip()
        if value:
            return value if value.endswith("/") else value + "/"
    npm = shutil.which("npm")
    if npm is not None:
        with tempfile.TemporaryDirectory(prefix="stockade-npmrc-") as neutral:
            try:
                proc = subprocess.run(
                    [npm, "config", "get", "registry"], cwd=neutral, capture_output=True, text=True,
                    timeout=60, check=False, stdin=subprocess.DEVNULL,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                proc = None
        value = proc.stdout.strip() if proc is not None and proc.returncode == 0 else ""
        if value.startswith(("https://", "http://")):
            return value if value.endswith("/") else value + "/"
    return DEFAULT_REGISTRY


def _on_registry(resolved: str, registry: str) -> bool:
    """Whether ``resolved`` is a URL under ``registry`` (same scheme, host and port, path below)."""
    got, want = urlsplit(resolved), urlsplit(registry)
    return (
        got.scheme == want.scheme
        and got.netloc.lower() == want.netloc.lower()
        and "@" not in got.netloc
        and got.path.startswith(want.path)
        and not got.query
        and not got.fragment
    )


def check_lock(data: bytes, registry: str | None = None) -> None:
    """Refuse a lock that would install anything but plain, pinned registry packages.

    Only what ``npm ci --omit=dev`` installs is checked (entries marked ``dev`` are not).
    Refused, each with its own message: a package with an install script, a local
    (``file:``/link) package, a git dependency, a package ``resolved`` outside
    ``registry`` (default :func:`configured_registry`), and a package without
    ``integrity``. A package bundled inside another (``inBundle``) is covered by its
    parent's tarball and integrity.

    Raises:
        DependencyError: the lock is not JSON or predates lockfileVersion 2.
        DependencyRefused: the offending packages, named.
    """
    lock = _json(LOCK_FILE, data)
    packages = lock.get("packages")
    if not isinstance(packages, dict) or lock.get("lockfileVersion") not in (2, 3):
        raise DependencyError(f"{LOCK_FILE} must be lockfileVersion 2 or 3 (npm >= 7); {_LOCK_HINT}")
    scripted, local, git, off_registry, unpinned = [], [], [], [], []
    where = registry
    for key, entry in sorted(packages.items()):
        if not key or not isinstance(entry, dict) or entry.get("dev") is True:
            continue
        name = key.rsplit("node_modules/", 1)[-1]
        resolved = entry.get("resolved")
        resolved = resolved if isinstance(resolved, str) else ""
        if entry.get("hasInstallScript") is True:
            scripted.append(f"{name}@{entry.get('version', '?')}")
        if entry.get("link") is True or resolved.startswith("file:"):
            local.append(name)
            continue
        if entry.get("inBundle") is True:
            continue
        if resolved.startswith(_GIT_PREFIXES) or resolved.endswith(".git") or "gitHead" in entry:
            git.append(f"{name} ({resolved or 'git'})")
            continue
        if resolved:
            where = where or configured_registry()
            if not _on_registry(resolved, where):
                off_registry.append(f"{name} ({resolved})")
        integrity = entry.get("integrity")
        if not isinstance(integrity, str) or not integrity.strip():
            unpinned.append(name)
    if scripted:
        raise DependencyRefused(
            f"{LOCK_FILE}: {', '.join(scripted)} need{'s' if len(scripted) == 1 else ''} an install script "
            "(a native addon or a build step); a plugin can only bundle plain JavaScript that needs no "
            "install step (the component has no Node.js): choose a pure-JavaScript alternative"
        )
    if local:
        what = "is a local package" if len(local) == 1 else "are local packages"
        raise DependencyRefused(
            f"{LOCK_FILE}: {', '.join(local)} {what} (file: or a link); the build installs only "
            "from the registry the lock records: publish it, or copy its sources into the plugin"
        )
    if git:
        what = "is a git dependency" if len(git) == 1 else "are git dependencies"
        raise DependencyRefused(
            f"{LOCK_FILE}: {', '.join(git)} {what}; the build installs only packages published to the "
            "npm registry (npm would run a git package's prepare script to pack it, and a git ref has "
            "no integrity): depend on a published version"
        )
    if off_registry:
        what = "is" if len(off_registry) == 1 else "are"
        raise DependencyRefused(
            f"{LOCK_FILE}: {', '.join(off_registry)} {what} resolved outside the configured npm registry "
            f"{where}; the build installs only from that registry: depend on a published version "
            f"(or set ${REGISTRY_ENV} to the registry the lock was written against)"
        )
    if unpinned:
        what = "has" if len(unpinned) == 1 else "have"
        raise DependencyRefused(
            f"{LOCK_FILE}: {', '.join(unpinned)} {what} no integrity hash, so nothing would check what npm "
            f"downloads; {_LOCK_HINT}"
        )


def _npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        raise DependencyError(
            "npm is not on PATH; JavaScript plugins with dependencies need Node.js >= 20 with npm"
        )
    return npm


def install_js_dependencies(stage: Path, report: Callable[[str, float], None]) -> None:
    """Install the locked dependencies into ``stage/node_modules`` and refuse native ones.

    ``stage`` holds ``package.json`` and ``package-lock.json`` (checked by
    :func:`needs_bundling`). npm runs with ``--ignore-scripts`` (no package code runs) and
    ``--allow-git=none`` (npm fetches no git dependency: a second fence behind the lock check; an npm
    too old to know the option warns about it, and the lock check alone holds).

    Raises:
        DependencyError: npm is missing or failed (the lock out of step with
            ``package.json``, a network error: npm's output tail is in the message).
        DependencyRefused: an installed package holds a native addon or an install script.
    """
    argv = [
        _npm(), "ci", "--ignore-scripts", "--allow-git=none", "--omit=dev", "--no-audit", "--no-fund",
        "--prefer-offline", "--no-update-notifier",
    ]  # fmt: skip
    report("installing npm dependencies (npm ci --ignore-scripts)", 0.07)
    env = {**os.environ, "npm_config_ignore_scripts": "true"}
    try:
        proc = subprocess.run(
            argv, cwd=stage, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False, env=env,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise DependencyError(f"npm ci did not finish in {INSTALL_TIMEOUT_S} s") from None
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-_OUTPUT_TAIL:]
        raise DependencyError(f"npm ci could not install the dependencies of {PACKAGE_FILE}:\n{tail}")
    refuse_native(stage / "node_modules")


def refuse_native(node_modules: Path) -> None:
    """Refuse installed packages holding a native addon or declaring an install script.

    Raises:
        DependencyRefused: naming the package and the file or script.
    """
    for dirpath, dirnames, filenames in os.walk(node_modules, followlinks=False):
        dirnames.sort()
        here = Path(dirpath)
        for name in sorted(filenames):
            if name in _NATIVE_NAMES or name.endswith(_NATIVE_SUFFIXES):
                rel = (here / name).relative_to(node_modules).as_posix()
                raise DependencyRefused(
                    f"dependency {_owner(rel)} holds a Node.js native addon ({rel}); a plugin can only "
                    "bundle plain JavaScript (a component has no Node.js): use a pure-JavaScript package"
                )
        if PACKAGE_FILE in filenames and here != node_modules:
            _refuse_scripts(here / PACKAGE_FILE, node_modules)


def _owner(rel: str) -> str:
    """The package a path under ``node_modules`` belongs to (the innermost one)."""
    parts = rel.split("/")[:-1]
    nested = [i for i, part in enumerate(parts) if part == "node_modules"]
    start = nested[-1] + 1 if nested else 0
    if start >= len(parts):
        return rel
    return "/".join(parts[start : start + (2 if parts[start].startswith("@") else 1)])


def _refuse_scripts(manifest: Path, node_modules: Path) -> None:
    try:
        doc = json.loads(manifest.read_bytes())
    except (OSError, ValueError):
        return  # not a package manifest npm installed (a fixture inside a package)
    if not isinstance(doc, dict) or not isinstance(doc.get("name"), str):
        return
    scripts = doc.get("scripts")
    scripts = scripts if isinstance(scripts, dict) else {}
    found = [s for s in _INSTALL_SCRIPTS if s in scripts]
    if found or doc.get("gypfile") is True:
        what = f"a {found[0]} script" if found else "a node-gyp build (gypfile)"
        rel = manifest.parent.relative_to(node_modules).as_posix()
        raise DependencyRefused(
            f"dependency {doc['name']} ({rel}) declares {what}, which the lock did not record; it was "
            "not run. A plugin can only bundle plain JavaScript that needs no install step: choose a "
            "pure-JavaScript alternative"
        )
