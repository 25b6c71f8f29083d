"""Build the test plugins under ``tests/plugins/`` once, and cache them across sessions.

``build_test_plugin("echo_py")`` builds ``tests/plugins/echo_py`` with
:func:`sdk.author.build.build_project` and returns its :class:`~sdk.author.build.BuildResult`. Modules
are cached in ``<repo>/.stockade-cache/stockade/builds`` (gitignored) by the build's own source
digest, so a plugin is rebuilt only when its sources, the SDK, the WIT or the toolchain
change; within one process each plugin is built once. A file lock keeps two concurrent
test sessions from building the same plugin at the same time. Bundles are written to a
per-process temporary directory (removed at exit), so sessions never race on them.

Plugins (see each ``stockade.toml``):

- ``echo_py``    benign Python tools: echo, counter, fetch (http), fail, log
- ``hostile_py`` files, environment, stdlib socket, stdout flood, huge allocation, spin
- ``reader_py``  reads the workspace through read-only preopens, tries escapes and writes
- ``sockets_py`` built against ``wit/world.wit``: calls wasi:sockets tcp/name lookup directly
- ``echo_js``    benign JavaScript tools: echo, counter, fetch (http), fail

``ScriptedEgress`` is an egress port answering from a script, for HTTP round trips
without a network. Use the function, or the session fixture ``plugin_builds`` (import it
into the test module)::

    from tests.support.plugins import build_test_plugin
    bundle = build_test_plugin("echo_py")
    module = bundle.module_path.read_bytes()
"""

from __future__ import annotations

import atexit
import fcntl
import functools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from host.config import HostConfig
from host.egress.port import HttpFailure, HttpRequest, HttpResponse
from sdk.author.build import BuildResult, build_project

__all__ = [
    "CACHE_DIR",
    "PLUGINS_DIR",
    "REPO_ROOT",
    "RUNTIME_STATE_DIR",
    "SHARED_ARTIFACTS_DIR",
    "ScriptedEgress",
    "build_test_plugin",
    "plugin_builds",
    "shared_runtime_config",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
PLUGINS_DIR = REPO_ROOT / "tests" / "plugins"
CACHE_DIR = REPO_ROOT / ".stockade-cache" / "stockade" / "builds"
"""The build cache of the session's per-user cache (tests/conftest.py points XDG_CACHE_HOME
at ``.stockade-cache``): the harness, ``stockade build``/``test`` and these builds share it,
so a plugin built here is not built again by a CLI or harness test (and vice versa)."""
_LOCK_DIR = REPO_ROOT / ".stockade-cache" / "plugins"
WASI_WIT = REPO_ROOT / "node_modules" / "@bytecodealliance" / "jco" / "lib" / "wit" / "builtin" / "0.2.12"
SDK_WIT = REPO_ROOT / "sdk" / "wit" / "stockade.wit"


@contextmanager
def _locked(name: str) -> Iterator[None]:
    _LOCK_DIR.mkdir(parents=True, exist_ok=True)
    with (_LOCK_DIR / f"{name}.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@functools.cache
def _out_dir() -> Path:
    path = Path(tempfile.mkdtemp(prefix="stockade-test-bundles-"))
    atexit.register(shutil.rmtree, path, True)
    return path


def _stage_sockets_wit(dest: Path) -> Path:
    """The sockets test world with its deps: the Stockade WIT and WASI 0.2.12 from jco."""
    if not WASI_WIT.is_dir():
        raise RuntimeError(f"{WASI_WIT} is missing: run `npm ci` at the repository root")
    shutil.copy(PLUGINS_DIR / "sockets_py" / "wit" / "world.wit", dest / "world.wit")
    (dest / "deps" / "stockade").mkdir(parents=True)
    shutil.copy(SDK_WIT, dest / "deps" / "stockade" / "stockade.wit")
    for package in ("wasi-io", "wasi-clocks", "wasi-sockets"):
        (dest / "deps" / package).mkdir(parents=True)
        shutil.copy(WASI_WIT / package / "package.wit", dest / "deps" / package / "package.wit")
    return dest


@functools.cache
def build_test_plugin(name: str) -> BuildResult:
    """Build ``tests/plugins/<name>`` (cached on disk and per process).

    Args:
        name: a directory under ``tests/plugins``.

    Returns:
        The build result; ``module_path`` and ``manifest_path`` live until the process exits.
    """
    project = PLUGINS_DIR / name
    if not (project / "stockade.toml").is_file():
        raise ValueError(f"no test plugin {name!r} in {PLUGINS_DIR}")
    with _locked(name), tempfile.TemporaryDirectory(prefix="stockade-test-wit-") as wit_tmp, _repo_toolchain():
        wit_path = _stage_sockets_wit(Path(wit_tmp)) if name == "sockets_py" else None
        return build_project(project, out_dir=_out_dir() / name, cache_dir=CACHE_DIR, wit_path=wit_path)


@contextmanager
def _repo_toolchain() -> Iterator[None]:
    """Point the JavaScript toolchain at the checkout's ``npm ci`` (same pins; spares an
    install into the per-user cache). The build still checks every pinned version."""
    saved = os.environ.get("STOCKADE_JS_TOOLCHAIN")
    os.environ["STOCKADE_JS_TOOLCHAIN"] = str(REPO_ROOT)
    try:
        yield
    finally:
        if saved is None:
            del os.environ["STOCKADE_JS_TOOLCHAIN"]
        else:
            os.environ["STOCKADE_JS_TOOLCHAIN"] = saved


@pytest.fixture(scope="session")
def plugin_builds() -> Callable[[str], BuildResult]:
    """Session fixture: ``plugin_builds("echo_py") -> BuildResult`` (built once)."""
    return build_test_plugin


RUNTIME_STATE_DIR = REPO_ROOT / ".stockade-cache" / "runtime-state"
"""A host state directory kept across test sessions. Only for tests that do not inspect it."""

SHARED_ARTIFACTS_DIR = REPO_ROOT / ".stockade-cache" / "stockade" / "artifacts"
"""The compiled-artifact cache the harness and the CLI use during tests (the per-user cache
under the session's ``XDG_CACHE_HOME``, see tests/conftest.py): a runtime configured with it
shares their compile of each test plugin (8–16 s each) instead of paying its own."""


def shared_runtime_config() -> HostConfig:
    """A host configuration on :data:`RUNTIME_STATE_DIR` and :data:`SHARED_ARTIFACTS_DIR`."""
    return HostConfig(state_dir=RUNTIME_STATE_DIR, artifact_cache_dir=SHARED_ARTIFACTS_DIR)


class ScriptedEgress:
    """An egress port that answers from a script and records every request (one per call).

    Args:
        answers: what ``send`` returns, in order (an ``HttpResponse`` or ``HttpFailure``);
            once they run out, ``budget-exhausted``.
    """

    def __init__(self, *answers: HttpResponse | HttpFailure) -> None:
        self.answers = list(answers)
        self.requests: list[HttpRequest] = []

    def send(self, request: HttpRequest) -> HttpResponse | HttpFailure:
        """Record ``request`` and return the next scripted answer."""
        self.requests.append(request)
        if not self.answers:
            return HttpFailure("budget-exhausted")
        return self.answers.pop(0)
