"""sdk.author.build: what is staged, when the cache may be trusted, how tool failures surface."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sdk.author import build
from sdk.author.project import load_project

TOML = """
[package]
name = "mini"
version = "0.1.0"
language = "{language}"

[[tools]]
name = "mini.echo"
description = "echo"
effect = "read"
risk = "low"
input_schema = {{ type = "object", additionalProperties = false, required = [], properties = {{}} }}
"""


def _project(root: Path, source: str, *, language: str = "python", name: str = "app.py") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "stockade.toml").write_text(TOML.format(language=language))
    (root / name).write_text(source)
    return root


def _key(root: Path, tmp: Path) -> tuple[str, set[str]]:
    tmp.mkdir(exist_ok=True)
    project = load_project(root)
    stage = tmp / f"stage-{len(list(tmp.iterdir()))}"
    files = build._stage(project, stage, exclude=root / "dist")
    return build._cache_key(project, files, build._Target(build.WIT_PATH, "tool")), set(files)


def test_staging_skips_outputs_hidden_dirs_and_symlinks(tmp_path: Path) -> None:
    root = _project(tmp_path / "p", "import helper\n")
    (root / "helper.py").write_text("")
    for junk in ("dist/old.py", ".venv/site.py", "node_modules/x.py", "__pycache__/y.py", "build/z.py"):
        (root / junk).parent.mkdir(parents=True, exist_ok=True)
        (root / junk).write_text("raise SystemExit")
    os.symlink("/etc", root / "etc_link")
    os.symlink("/etc/hostname", root / "hostname.py")
    _, files = _key(root, tmp_path / "work")
    assert {f for f in files if not f.startswith("stockade/")} == {
        "app.py",
        "helper.py",
        "_stockade_entry.py",
    }


def test_cache_key_follows_sources_not_descriptions(tmp_path: Path) -> None:
    root = _project(tmp_path / "p", "x = 1\n")
    first, _ = _key(root, tmp_path / "work")
    (root / "stockade.toml").write_text(TOML.format(language="python").replace('"echo"', '"echo, reworded"'))
    assert _key(root, tmp_path / "work")[0] == first
    (root / "app.py").write_text("x = 2\n")
    assert _key(root, tmp_path / "work")[0] != first


def test_project_shadowing_the_sdk_refused(tmp_path: Path) -> None:
    root = _project(tmp_path / "p", "")
    (root / "stockade.py").write_text("")
    with pytest.raises(build.BuildError, match="shadows the Stockade SDK"):
        build._stage(load_project(root), tmp_path / "stage", exclude=root / "dist")


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p.write_bytes(p.read_bytes()[:-1] + b"\x00"),
        lambda p: p.write_bytes(b""),
        lambda p: p.unlink(),
    ],
    ids=["flipped-byte", "truncated", "missing"],
)
def test_damaged_cache_entry_is_not_used(tmp_path: Path, damage) -> None:
    build._cache_put(tmp_path, "k" * 64, b"\0asm-module-bytes")
    assert build._cache_get(tmp_path, "k" * 64) == b"\0asm-module-bytes"
    damage(tmp_path / ("k" * 64) / "module.wasm")
    assert build._cache_get(tmp_path, "k" * 64) is None


def test_bundle_is_replaced_whole(tmp_path: Path) -> None:
    bundle = tmp_path / "out" / "mini-0.1.0"
    build._write_bundle(bundle, b"{}", b"old", b"{}")
    (bundle / "stale.txt").write_text("left over")
    build._write_bundle(bundle, b'{"a":1}', b"new", b'{"b":2}')
    assert sorted(p.name for p in bundle.iterdir()) == ["build.json", "manifest.json", "module.wasm"]
    assert (bundle / "build.json").read_bytes() == b'{"b":2}'
    assert (bundle / "module.wasm").read_bytes() == b"new"
    assert [p.name for p in bundle.parent.iterdir()] == ["mini-0.1.0"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("language", "name", "source", "fragment"),
    [
        ("python", "app.py", "raise RuntimeError('boom at import')\n", "boom at import"),
        (
            "python",
            "app.py",
            "from stockade import tool\n\n@tool('mini.other')\ndef f(i):\n    return i\n",
            "no handler for ['mini.echo']",
        ),
        (
            "javascript",
            "app.js",
            "import { tool } from 'stockade';\ntool('mini.echo', (i) => i;\n",
            "app.js: not a valid ES module",
        ),
    ],
    ids=["python-import-error", "python-handler-mismatch", "js-syntax-error"],
)
def test_build_tool_failure_surfaces_with_its_output(
    tmp_path: Path, language: str, name: str, source: str, fragment: str
) -> None:
    root = _project(tmp_path / "p", source, language=language, name=name)
    with pytest.raises(build.BuildError) as info:
        build.build_project(root, cache_dir=tmp_path / "cache")
    assert fragment in info.value.output_tail
    assert not (root / "dist").exists() and not (tmp_path / "cache").exists()
