"""``stockade new`` and ``stockade test`` through the real entry point, in a subprocess.

The round trips (new -> build -> test) build real components with componentize-py and
componentize-js; the build and compile caches live under ``<repo>/.stockade-cache`` and
the scaffolded projects are identical every time, so only the first session pays. Every
template's own tests are in ``test_templates.py``, the JavaScript round trip in
``test_new_and_test_js.py`` and the quickstart from a wheel in ``test_author_quickstart.py``:
separate modules, so ``--dist loadscope`` spreads their builds over the workers. Every
Python project here is the round trip's ``rt-python`` (tests/ is not part of a build), so
the module pays one componentize-py build.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from tests.support.cli import AUTHOR_CACHE_ENV, REPO, cli_env, new_build_test_round_trip
from tests.support.cli import author_cli as stockade


@pytest.mark.slow
def test_new_build_test_round_trip_python(tmp_path: Path) -> None:
    # The JavaScript round trip is in test_new_and_test_js.py: another module, so
    # ``--dist loadscope`` can build the two on different workers.
    new_build_test_round_trip(tmp_path, "python")


@pytest.mark.slow
def test_new_project_readme_takes_an_author_to_a_signed_bundle_in_a_lock(tmp_path: Path) -> None:
    # Runs the command lines of the scaffolded README.md, as written, in the project.
    assert stockade("new", "rt-python", cwd=tmp_path).returncode == 0
    project = tmp_path / "rt-python"
    readme = (project / "README.md").read_text()
    block = readme.split("```sh\n", 1)[1].split("```", 1)[0]
    lines = [line.split("#", 1)[0].split() for line in block.splitlines()]
    assert [words[1] for words in lines] == ["build", "test", "inspect", "keygen", "sign", "lock", "lock"]
    for words in lines:
        assert words[0] == "stockade"
        proc = stockade(*words[1:], cwd=project)
        assert proc.returncode == 0, f"{' '.join(words)}:\n{proc.stdout}\n{proc.stderr}"
    lock = json.loads((project / "stockade.lock").read_text())
    (entry,) = lock["packages"]
    assert entry["name"] == "rt-python" and entry["signature"] and entry["key_id"]


@pytest.mark.slow
def test_test_exit_status_is_1_when_a_test_fails_or_none_ran(tmp_path: Path) -> None:
    # The round trip's project (tests/ is not part of a build): a build cache hit, not a build.
    project = tmp_path / "rt-failing"
    assert stockade("new", "rt-python", "--dir", str(project), cwd=tmp_path).returncode == 0
    (project / "tests" / "test_broken.py").write_text(
        "def test_broken():\n    assert 1 + 1 == 3\n"
    )
    failed = stockade("test", str(project), "--", "-q", cwd=tmp_path)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "1 failed, 5 passed" in failed.stdout
    none_ran = stockade("test", str(project), "--", "-q", "-k", "no_such_test", cwd=tmp_path)
    assert none_ran.returncode == 1  # pytest's 5 (no tests ran) is a failure too
    assert "deselected" in none_ran.stdout


@pytest.mark.parametrize("lang", ["python", "javascript"])
def test_new_project_readme_fences_pair_up(tmp_path: Path, lang: str) -> None:
    # The scaffold's README closed its command block with a doubled fence.
    assert stockade("new", "fences", "--lang", lang, cwd=tmp_path).returncode == 0
    lines = (tmp_path / "fences" / "README.md").read_text().splitlines()
    fences = [n for n, line in enumerate(lines) if line.startswith("```")]
    assert len(fences) % 2 == 0 and all(b - a > 1 for a, b in itertools.pairwise(fences))


def test_new_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    proc = stockade("new", "taken", "--dir", str(target), cwd=tmp_path)
    assert proc.returncode == 1
    assert "DIR_NOT_EMPTY" in proc.stderr and "Traceback" not in proc.stderr
    assert [p.name for p in target.iterdir()] == ["notes.txt"]
    assert (target / "notes.txt").read_text() == "mine"


def test_new_refuses_a_file_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    proc = stockade("new", "file", cwd=tmp_path)
    assert proc.returncode == 1 and "DIR_NOT_EMPTY" in proc.stderr
    assert (tmp_path / "file").read_text() == "x"


@pytest.mark.parametrize(
    "name",
    ["Tracker", "1tools", "my..tools", "my tools", "tools-", "../escape", "a" * 58, "naïve"],
    ids=["uppercase", "leading-digit", "empty-segment", "space", "trailing-dash", "path", "too-long", "non-ascii"],
)
def test_new_refuses_invalid_names_and_writes_nothing(tmp_path: Path, name: str) -> None:
    proc = stockade("new", name, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "NAME_INVALID" in proc.stderr and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_new_longest_name_fits_every_tool_name(tmp_path: Path) -> None:
    name = "a" * 57
    proc = stockade("new", name, "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["ok"] is True and len(out["files"]) == 5
    assert f'name = "{name}.lookup"' in (tmp_path / name / "stockade.toml").read_text()


def test_new_refuses_an_unknown_language(tmp_path: Path) -> None:
    proc = stockade("new", "tools", "--lang", "rust", cwd=tmp_path)
    assert proc.returncode == 2
    assert list(tmp_path.iterdir()) == []


def test_test_refuses_a_directory_without_a_project(tmp_path: Path) -> None:
    proc = stockade("test", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 1
    assert "PROJECT_NOT_FOUND" in proc.stderr and "Traceback" not in proc.stderr


def test_test_refuses_a_project_without_tests(tmp_path: Path) -> None:
    assert stockade("new", "no-tests", cwd=tmp_path).returncode == 0
    project = tmp_path / "no-tests"
    (project / "tests" / "test_tools.py").unlink()
    (project / "tests").rmdir()
    proc = stockade("test", str(project), cwd=tmp_path)
    assert proc.returncode == 1 and "NO_TESTS" in proc.stderr


def test_test_refuses_an_invalid_manifest_before_building(tmp_path: Path) -> None:
    assert stockade("new", "bad-manifest", cwd=tmp_path).returncode == 0
    toml = tmp_path / "bad-manifest" / "stockade.toml"
    toml.write_text(toml.read_text().replace('effect = "read"', 'effect = "anything"', 1))
    proc = stockade("test", str(tmp_path / "bad-manifest"), cwd=tmp_path, timeout=60)
    assert proc.returncode == 1
    assert "MANIFEST_INVALID" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_watch_reruns_the_tests_after_an_edit(tmp_path: Path) -> None:
    # Same project name and content as the round trip: the first run is a cache hit.
    assert stockade("new", "rt-python", cwd=tmp_path).returncode == 0
    project = tmp_path / "rt-python"
    log = tmp_path / "pytest.out"
    argv = [sys.executable, "-m", "sdk.cli", "watch", "--max-runs", "2", "--interval", "0.2", str(project)]
    with log.open("w") as out:
        proc = subprocess.Popen(
            argv, cwd=tmp_path, env=cli_env(**AUTHOR_CACHE_ENV), stdout=out, stderr=subprocess.PIPE, text=True,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:  # blocks until the watcher reports: no sleeps
            lines.append(line)
            if "stockade watch: tests" in line:
                break
        assert "tests passed" in lines[-1], "".join(lines)
        app = project / "app.py"
        app.write_text(app.read_text().replace('f"Hello, {name}!"', 'f"Hi, {name}!"'))  # breaks test_greet
        rest = proc.stderr.read()
        proc.stderr.close()
        assert proc.wait(timeout=900) == 1, rest
    assert "changed: app.py" in rest and "tests failed" in rest
    assert "1 failed, 4 passed" in log.read_text()


def test_new_refuses_an_unknown_template(tmp_path: Path) -> None:
    proc = stockade("new", "tools", "--template", "crud", cwd=tmp_path)
    assert proc.returncode == 2 and "invalid choice: 'crud'" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_test_without_pytest_names_the_build_extra(tmp_path: Path) -> None:
    # `pip install -e '.[build]'` then `stockade test` failed PYTEST_MISSING: the author
    # extra now brings pytest, and the refusal names that extra.
    (tmp_path / "stockade.toml").write_text("")
    (tmp_path / "tests").mkdir()
    hide = "import sys; sys.modules['pytest'] = None; from sdk.cli import main; sys.exit(main(['test', '.']))"
    proc = subprocess.run([sys.executable, "-c", hide], cwd=tmp_path, env=cli_env(), capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 1 and "PYTEST_MISSING" in proc.stderr
    assert "pip install 'stockade[build]'" in proc.stderr
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert any(req.startswith("pytest") for req in pyproject["project"]["optional-dependencies"]["build"])
