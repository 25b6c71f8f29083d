"""Session-wide test fixtures.

The environment is scrubbed for every test (httpx `clean_environ` style): proxies, the
master key and anything STOCKADE_* never leak in from the machine running the tests.

Engines compile with Winch (``STOCKADE_COMPILER=winch``, see :mod:`host.runtime.engine`):
about 10× less compile time per component, which is most of a cold run. Tests whose
subject is the production compiler's behaviour (exact fuel on real plugins, compile-time
limits) carry ``@pytest.mark.cranelift`` and run under Cranelift;
``STOCKADE_TEST_COMPILER=cranelift`` runs the whole suite under it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

_SCRUBBED_PREFIXES = ("STOCKADE_",)
_SCRUBBED_NAMES = {
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
    "http_proxy", "https_proxy", "all_proxy", "no_proxy",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
    # pytest-xdist workers inherit COLUMNS=80/LINES=24 from execnet; CLI tests size tables themselves.
    "COLUMNS", "LINES",
}


_REPO = Path(__file__).resolve().parents[1]
TEST_COMPILER = os.environ.get("STOCKADE_TEST_COMPILER") or "winch"

# Hypothesis: the `ci` profile is deterministic, so a failure in CI is
# replayed by running the same test again: derandomize fixes the seed (derived from each
# test), print_blob prints the @reproduce_failure line, no example database carries state
# between runs, and no deadline makes a loaded 2-core runner fail a test. It is loaded when
# $CI is set (.ci/run runs with CI=true) or HYPOTHESIS_PROFILE=ci; elsewhere `dev` is
# Hypothesis' default (random seed, printed on failure: replay with --hypothesis-seed=N).
hypothesis_settings.register_profile(
    "ci", derandomize=True, print_blob=True, database=None, deadline=None, suppress_health_check=[]
)
hypothesis_settings.register_profile("dev")
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
hypothesis_settings.load_profile(HYPOTHESIS_PROFILE)


def pytest_report_header(config: pytest.Config) -> str:
    """Say which Hypothesis profile runs (and so how to replay a failure)."""
    del config
    if HYPOTHESIS_PROFILE == "ci":
        return "hypothesis profile: ci (derandomize=True: fixed seed per test; rerun the test to replay)"
    return f"hypothesis profile: {HYPOTHESIS_PROFILE} (random seed, printed on failure; HYPOTHESIS_PROFILE=ci fixes it)"


def pytest_configure(config: pytest.Config) -> None:
    """Per-user caches of the code under test live in the checkout's ``.stockade-cache``.

    Builds, the compiled-artifact cache, the harness's and the JavaScript toolchain default
    to ``$XDG_CACHE_HOME/stockade``: pointing it at the (gitignored) checkout cache keeps the
    suite out of the developer's ``~/.cache`` and lets in-process tests, harness runs and CLI
    subprocesses share one cache, so a plugin is built and compiled once per session, not
    once per cache. Tests about the cache itself set their own ``STOCKADE_CACHE_DIR``.
    """
    os.environ["XDG_CACHE_HOME"] = str(_REPO / ".stockade-cache")
    os.environ["STOCKADE_COMPILER"] = TEST_COMPILER  # session-scoped fixtures compile before clean_environ


def _compiler_for(item: pytest.Item) -> str:
    return "cranelift" if item.get_closest_marker("cranelift") is not None else TEST_COMPILER


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Select the test's compiler before any of its fixtures runs (a module-scoped runtime
    of a ``cranelift`` module is built under Cranelift too)."""
    os.environ["STOCKADE_COMPILER"] = _compiler_for(item)


@pytest.fixture(autouse=True)
def clean_environ(request: pytest.FixtureRequest) -> Iterator[None]:
    saved = dict(os.environ)
    for name in list(os.environ):
        if name in _SCRUBBED_NAMES or name.startswith(_SCRUBBED_PREFIXES):
            del os.environ[name]
    os.environ["STOCKADE_COMPILER"] = _compiler_for(request.node)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="session")
def session_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory shared by the whole test session for built plugins and artifacts."""
    return tmp_path_factory.mktemp("stockade-session-cache")


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP listener on 127.0.0.1 (random port) that a sandboxed guest or process must not
    reach; ``accept`` times out after 0.5 s, so "nothing connected" is a TimeoutError."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        server.settimeout(0.5)
        yield server
