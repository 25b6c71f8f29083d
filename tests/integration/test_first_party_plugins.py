"""The first-party plugins' own tests (``plugins/*/tests``) run as part of the main suite.

Each plugin's tests drive it through the author harness (a real host, scripted HTTP),
exactly as ``stockade test plugins/<name>`` does. They run in a subprocess, as an author
would run them, with the harness caches under ``<repo>/.stockade-cache/stockade`` so a
plugin is built (~11 s) and compiled (~10 s) once, not once per session.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PLUGINS = ("tracker", "webfetch", "jsonkit")


def test_every_first_party_plugin_has_tests() -> None:
    found = sorted(p.name for p in (REPO / "plugins").iterdir() if (p / "stockade.toml").is_file())
    assert found == sorted(PLUGINS)
    for name in PLUGINS:
        assert list((REPO / "plugins" / name / "tests").glob("test_*.py")), name


@pytest.mark.parametrize("name", PLUGINS)
def test_first_party_plugin_tests_pass(name: str) -> None:
    env = dict(os.environ, XDG_CACHE_HOME=str(REPO / ".stockade-cache"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", f"plugins/{name}/tests", "-q", "-p", "no:cacheprovider"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, f"{name} tests failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    assert " passed" in proc.stdout and "failed" not in proc.stdout
