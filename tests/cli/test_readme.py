"""README.md's commands, run as written (issue 6: every command shown is exercised).

- the test command is the one ``.ci/run`` extracts and runs (checked by asking
  ``.ci/run --print-test-command``);
- the demo command ends in ``stockade demo``, which ``tests/integration/test_demo.py``
  runs with ``--ci``;
- the author and reviewer quickstarts run line by line, in order, in a scratch directory,
  with the venv's ``stockade`` on PATH.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")


def block(marker: str) -> list[str]:
    """The lines of the ```sh block that follows ``<!-- marker``."""
    match = re.search(rf"<!-- {re.escape(marker)}[^\n]*-->\n```sh\n(.*?)```", README, re.S)
    assert match, f"README has no {marker} block"
    return [line for line in match.group(1).splitlines() if line.strip()]


def test_ci_runs_exactly_the_readme_test_command() -> None:
    # .ci/run's own extraction (its --print-test-command stops right after it), so a change
    # to the awk program or to the README marker that breaks CI fails here.
    (line,) = block("test-command")
    extracted = subprocess.run(
        ["bash", ".ci/run", "--print-test-command"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    assert extracted == line + "\n"
    assert "pip install -e '.[dev]'" in line and line.endswith("python -m pytest -n auto --dist loadscope")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert 'bash -c "set -euo pipefail; $cmd"' in ci  # what it extracts is what it runs


def test_demo_command_installs_then_runs_the_demo() -> None:
    (line,) = block("demo-command")
    assert "pip install -e '.[build]'" in line and line.endswith("stockade demo")


def _run_lines(lines: list[str], cwd: Path) -> None:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    for line in lines:
        if line.startswith("cd "):
            cwd = cwd / line[3:].strip()
            continue
        proc = subprocess.run(
            ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        assert proc.returncode == 0, f"{line}\n{proc.stdout}\n{proc.stderr}"


@pytest.mark.slow
def test_author_and_reviewer_quickstarts_run_as_written(tmp_path: Path) -> None:
    author = block("author-quickstart")
    reviewer = block("reviewer-quickstart")
    assert author[0].startswith("stockade new hello") and author[1] == "cd hello"
    _run_lines(author, tmp_path)
    project = tmp_path / "hello"
    lock = json.loads((project / "stockade.lock").read_text())
    assert lock["generation"] == 1 and lock["packages"][0]["signature"]
    _run_lines(reviewer, project)
    relocked = json.loads((project / "stockade.lock").read_text())
    assert relocked["generation"] == 2
    assert (project / "reviewed.lock").exists()
