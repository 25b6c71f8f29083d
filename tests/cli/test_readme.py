"""The manual's commands (README.md and docs/*.md), run as written (every command shown is exercised).

- the test command is the one ``.ci/run`` extracts and runs (checked by asking
  ``.ci/run --print-test-command``);
- the demo command ends in ``stockade demo``, which ``tests/integration/test_demo.py``
  runs with ``--ci``;
- the author, host (command line and Python) and reviewer quickstarts run line by line,
  in order, in one scratch directory, each from what the previous one left behind, with
  the venv's ``stockade`` on PATH (importing this checkout); a line ending in
  ``# exits N`` must exit N (the reviewer's escalation), every other line 0;
- the CI snippet's ``stockade diff --from-git`` line runs against the quickstart's repo.
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
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
README = "\n".join(page.read_text(encoding="utf-8") for page in PAGES)  # the whole manual
FRONT = PAGES[0].read_text(encoding="utf-8")


def test_readme_is_a_front_page_linking_every_manual_page() -> None:
    assert FRONT.count("\n") <= 250
    assert "<!-- test-command" in FRONT and "<!-- demo-command" in FRONT  # .ci/run reads README
    unlinked = [page.name for page in PAGES[1:] if f"](docs/{page.name})" not in FRONT]
    assert unlinked == []


def test_every_manual_section_title_lives_in_one_page() -> None:
    titles = [line for line in README.splitlines() if line.startswith("## ")]
    repeated = sorted({title for title in titles if titles.count(title) > 1})
    assert repeated == []


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


def python_block(marker: str) -> str:
    """The ```python block that follows ``<!-- marker``."""
    match = re.search(rf"<!-- {re.escape(marker)}[^\n]*-->\n```python\n(.*?)```", README, re.S)
    assert match, f"README has no {marker} block"
    return match.group(1)


def _env() -> dict[str, str]:
    return dict(
        os.environ,
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        PYTHONPATH=str(REPO),  # the `stockade` script imports this checkout, not another install
        XDG_CACHE_HOME=str(REPO / ".stockade-cache"),  # the shared build cache
    )


def _run_lines(lines: list[str], cwd: Path) -> list[subprocess.CompletedProcess[str]]:
    done = []
    for line in lines:
        if line.startswith("cd "):
            cwd = cwd / line[3:].strip()
            continue
        expected = re.search(r"# exits (\d+)", line)
        proc = subprocess.run(
            ["bash", "-c", line], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=600, check=False,
            input="quickstart-token-0123456789\n",  # what a person types at a prompt (secrets set)
        )
        want = int(expected.group(1)) if expected else 0
        assert proc.returncode == want, f"{line}\n{proc.stdout}\n{proc.stderr}"
        done.append(proc)
    return done


def _git(cwd: Path, *argv: str) -> None:
    subprocess.run(["git", *argv], cwd=cwd, check=True, capture_output=True, env=dict(
        os.environ, GIT_AUTHOR_NAME="q", GIT_AUTHOR_EMAIL="q@example.invalid",
        GIT_COMMITTER_NAME="q", GIT_COMMITTER_EMAIL="q@example.invalid"))


@pytest.mark.slow
def test_quickstarts_run_as_written_in_order(tmp_path: Path) -> None:
    author = block("author-quickstart")
    host = block("host-quickstart")
    reviewer = block("reviewer-quickstart")
    assert author[0].startswith("stockade new hello") and author[1] == "cd hello"
    _run_lines(author, tmp_path)
    project = tmp_path / "hello"
    lock = json.loads((project / "stockade.lock").read_text())
    assert lock["generation"] == 1 and lock["packages"][0]["signature"]

    ran = _run_lines(host, project)  # on the signed lock the author quickstart made
    [printed] = [p for line, p in zip(host, ran, strict=True) if "--print-client-config" in line]
    entry = json.loads(printed.stdout)["mcpServers"]["stockade"]  # absolute: a desktop app starts it anywhere
    assert Path(entry["command"]).is_absolute() and str(project / "stockade.host.toml") in entry["args"]
    assert json.loads(ran[-2].stdout) == {"greeting": "Hello, Ada!"}
    assert "p/alice  hello.greet@0.1.0  read  ok" in ran[-1].stdout
    app = subprocess.run([sys.executable, "-c", python_block("host-app-quickstart")], cwd=project, env=_env(),
                         capture_output=True, text=True, timeout=600, check=False)
    assert app.returncode == 0, app.stderr
    assert app.stdout.strip() == "True {'greeting': 'Hello, Ada!'}"
    # It loads what the CLI compiled into the per-user cache; a state-dir cache means it compiled again.
    assert not (project / ".stockade" / "artifacts").exists() and not (project / ".stockade" / "artifact.key").exists()

    _git(project, "init", "-q", "-b", "main")
    _git(project, "add", "-A")
    _git(project, "commit", "-q", "-m", "reviewed")
    _git(project, "update-ref", "refs/remotes/origin/main", "HEAD")
    ran = _run_lines(reviewer, project)
    diff = next(proc for line, proc in zip([x for x in reviewer if not x.startswith("cd ")], ran, strict=True)
                if line.startswith("stockade diff"))
    assert "ESCALATES" in diff.stdout and "http.wildcard" in diff.stdout and "*.example.com" in diff.stdout
    assert json.loads((project / "stockade.lock").read_text())["generation"] == 2

    snippet = re.search(r"<!-- ci-snippet[^\n]*-->\n```yaml\n(.*?)```", README, re.S)
    assert snippet, "README has no CI snippet"
    [command] = [line.split("- run: ", 1)[1] for line in snippet.group(1).splitlines()
                 if "- run: stockade diff" in line]
    gate = subprocess.run(["bash", "-c", command.replace("${{ github.base_ref }}", "main")], cwd=project,
                          env=_env(), capture_output=True, text=True, timeout=600, check=False)
    assert gate.returncode == 3, gate.stdout + gate.stderr  # the job fails on the escalation
