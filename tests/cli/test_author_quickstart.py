"""The docs' author quickstart, run as written from a wheel, for Python and JavaScript.

A plain ``pip install`` of a wheel in a fresh per-user cache: nothing is shared with the
checkout, so both plugins are built and compiled, and the JavaScript toolchain installed,
on every run (the slowest test of the suite; a module of its own so ``--dist loadscope``
gives it a worker of its own).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import REPO


def _install_wheel(tmp: Path) -> tuple[Path, Path]:
    """Build a wheel from a copy of the repository and install it with ``pip --target``.

    Returns (site directory, bin directory holding a ``stockade`` launcher). Dependencies
    come from the running venv; ``sdk``/``host`` come from the wheel only.
    """
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for name in ("host", "sdk"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(tmp / "wheel"), str(src)], check=True, timeout=600)
    (wheel,) = (tmp / "wheel").glob("stockade-*.whl")
    site = tmp / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)], check=True, timeout=600)
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    launcher = bin_dir / "stockade"
    launcher.write_text(f"#!{sys.executable}\nimport sys\nfrom sdk.cli import main\nsys.exit(main())\n")
    launcher.chmod(0o755)
    return site, bin_dir


def _readme_block(marker: str) -> list[str]:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]  # the manual
    readme = "\n".join(page.read_text("utf-8") for page in pages)
    match = re.search(rf"<!-- {re.escape(marker)}[^\n]*-->\n```sh\n(.*?)```", readme, re.S)
    assert match, f"README has no {marker} block"
    return [line for line in match.group(1).splitlines() if line.strip()]


@pytest.mark.slow
def test_readme_author_quickstart_runs_from_a_wheel_for_both_languages(tmp_path: Path) -> None:
    # A plain `pip install` of a wheel: no checkout, no node_modules anywhere near sdk/.
    # The JavaScript run installs the pinned toolchain into the fresh per-user cache.
    site, bin_dir = _install_wheel(tmp_path)
    assert not (site / "node_modules").exists()
    env = {  # the suite's compiler stays (tests/conftest.py): a fresh cache compiles both plugins
        k: v for k, v in os.environ.items()
        if (not k.startswith("STOCKADE_") or k == "STOCKADE_COMPILER") and k != "PYTHONPATH"
    }
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env['PATH']}",
        PYTHONPATH=str(site),
        STOCKADE_CACHE_DIR=str(tmp_path / "user-cache"),
        COLUMNS="200",
    )
    lines = _readme_block("author-quickstart")
    assert lines[0] == "stockade new hello --lang python"
    for lang in ("python", "javascript"):
        cwd = tmp_path / lang
        cwd.mkdir()
        for written in lines:
            line = written.replace("--lang python", f"--lang {lang}")
            if line.startswith("cd "):
                cwd = cwd / line[3:].strip()
                continue
            proc = subprocess.run(
                ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False
            )
            assert proc.returncode == 0, f"{lang}: {line}\n{proc.stdout}\n{proc.stderr}"
            if line == "stockade build" and lang == "javascript":
                assert "installing the JavaScript toolchain" in proc.stderr
        where = subprocess.run(
            [sys.executable, "-c", "import sdk; print(sdk.__file__)"], env=env, cwd=cwd,
            capture_output=True, text=True, check=True,
        )
        assert where.stdout.startswith(str(site))
    toolchains = list((tmp_path / "user-cache" / "toolchain").iterdir())
    assert [p.name[:3] for p in toolchains] == ["js-"]
