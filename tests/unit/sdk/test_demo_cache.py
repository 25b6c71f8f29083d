"""The demo caches under the one per-user cache root that ``$STOCKADE_CACHE_DIR`` moves.

It followed a variable of its own (``$STOCKADE_CACHE``), so moving "every per-user cache"
as the manual says left the demo's builds and artifacts behind.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sdk._cachedir import cache_root
from sdk.demo.workspace import cache_root as demo_cache_root


def test_stockade_cache_dir_moves_the_demo_cache_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STOCKADE_CACHE_DIR", str(tmp_path / "moved"))
    monkeypatch.setenv("STOCKADE_CACHE", str(tmp_path / "old-variable"))  # no longer read
    assert demo_cache_root() == tmp_path / "moved" / "demo"
    assert demo_cache_root().parent == cache_root()


def test_demo_cache_defaults_under_the_xdg_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STOCKADE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert demo_cache_root() == tmp_path / "stockade" / "demo"
