"""One compiled-artifact cache per user: shared across hosts, LRU-pruned.

Real wasmtime components (WAT) and real files; each artifact is still HMAC-verified
before it is deserialized (tests/security/test_sandbox_artifacts.py covers tampering).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from host.config import HostConfig
from host.runtime import Runtime
from host.runtime.cache import cache_usage, prune_artifacts, user_artifact_dir, user_cache_dir
from tests.support import wat

ECHO = wat.echo_component()
COUNTER = wat.counter_component()


def _load(state: Path, shared: Path, module: bytes, *, max_bytes: int = 4 * 1024**3) -> tuple[int, int]:
    config = HostConfig(state_dir=state, artifact_cache_dir=shared, artifact_cache_max_bytes=max_bytes)
    with Runtime(config) as rt:
        rt.load(module, sha256=wat.sha256(module))
        stats = rt.stats()
    return stats.compiled, stats.deserialized


def test_two_hosts_with_different_state_dirs_compile_once(tmp_path: Path) -> None:
    shared = tmp_path / "user-cache" / "artifacts"
    assert _load(tmp_path / "state-a", shared, ECHO) == (1, 0)
    assert _load(tmp_path / "state-b", shared, ECHO) == (0, 1)
    key = shared / "artifact.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_bytes()) == 32
    assert not (tmp_path / "state-a" / "artifacts").exists()  # nothing left per state dir
    assert not (tmp_path / "state-b" / "artifact.key").exists()


def test_default_host_keeps_its_cache_in_the_state_dir(tmp_path: Path) -> None:
    config = HostConfig(state_dir=tmp_path)
    assert config.artifact_dir == tmp_path / "artifacts"
    assert config.artifact_key_file == tmp_path / "artifact.key"


def _age(path: Path, seconds_ago: float) -> None:
    when = path.stat().st_mtime - seconds_ago
    os.utime(path, (when, when))


def test_prune_removes_least_recently_used_first(tmp_path: Path) -> None:
    shared = tmp_path / "artifacts"
    _load(tmp_path / "s1", shared, ECHO)
    _load(tmp_path / "s2", shared, COUNTER)
    artifacts = sorted(shared.glob("*.cwasm"))
    assert len(artifacts) == 2
    older, newer = artifacts
    _age(older, 3600)
    _age(newer, 60)
    usage = cache_usage(shared)
    pruned = prune_artifacts(shared, max_bytes=usage.bytes - 1)
    assert (pruned.removed, pruned.entries) == (1, 1)
    assert not older.exists() and newer.exists()
    assert pruned.freed_bytes > 0 and pruned.bytes == usage.bytes - pruned.freed_bytes
    assert (shared / "artifact.key").exists()  # pruning never touches the key


def test_loading_an_artifact_makes_it_recent_so_it_survives_pruning(tmp_path: Path) -> None:
    shared = tmp_path / "artifacts"
    _load(tmp_path / "s1", shared, ECHO)
    (echo_artifact,) = shared.glob("*.cwasm")
    _load(tmp_path / "s2", shared, COUNTER)
    counter_artifact = next(p for p in shared.glob("*.cwasm") if p != echo_artifact)
    _age(echo_artifact, 7200)
    _age(counter_artifact, 3600)
    assert _load(tmp_path / "s3", shared, ECHO) == (0, 1)  # a hit refreshes echo's recency
    pruned = prune_artifacts(shared, max_bytes=echo_artifact.stat().st_size)
    assert pruned.removed == 1 and echo_artifact.exists() and not counter_artifact.exists()


def test_a_write_over_the_cap_prunes_older_artifacts_but_keeps_the_new_one(tmp_path: Path) -> None:
    shared = tmp_path / "artifacts"
    _load(tmp_path / "s1", shared, ECHO)
    (echo_artifact,) = shared.glob("*.cwasm")
    _age(echo_artifact, 3600)
    assert _load(tmp_path / "s2", shared, COUNTER, max_bytes=1) == (1, 0)  # cap below one artifact
    remaining = list(shared.glob("*.cwasm"))
    assert len(remaining) == 1 and remaining[0] != echo_artifact


def test_prune_of_a_missing_directory_is_empty(tmp_path: Path) -> None:
    assert prune_artifacts(tmp_path / "none", max_bytes=0).entries == 0
    assert cache_usage(tmp_path / "none").bytes == 0


def test_user_cache_dir_follows_stockade_cache_dir_then_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert user_cache_dir() == tmp_path / "xdg" / "stockade"
    monkeypatch.setenv("STOCKADE_CACHE_DIR", str(tmp_path / "mine"))
    assert user_artifact_dir() == tmp_path / "mine" / "artifacts"


@pytest.mark.parametrize("mode", [0o644, 0o640], ids=["world-readable", "group-readable"])
def test_readable_shared_key_replaced_so_forged_artifacts_are_recompiled(tmp_path: Path, mode: int) -> None:
    # Whoever can read the shared key can forge compiled artifacts (native code) for every
    # host of this user: a key others can read is replaced, and old artifacts recompiled.
    shared = tmp_path / "artifacts"
    _load(tmp_path / "s1", shared, ECHO)
    key = shared / "artifact.key"
    old = key.read_bytes()
    key.chmod(mode)
    assert _load(tmp_path / "s2", shared, ECHO) == (1, 0)
    assert key.read_bytes() != old and stat.S_IMODE(key.stat().st_mode) == 0o600


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_fifo_planted_as_the_artifact_key_is_replaced_instead_of_hanging_the_host(tmp_path: Path) -> None:
    # A FIFO with no writer used to block os.open for ever: the host never started.
    shared = tmp_path / "artifacts"
    shared.mkdir(mode=0o700)
    os.mkfifo(shared / "artifact.key", 0o600)
    assert _load(tmp_path / "s1", shared, ECHO) == (1, 0)
    key = shared / "artifact.key"
    assert stat.S_ISREG(key.lstat().st_mode) and len(key.read_bytes()) == 32


def test_symlinked_artifact_key_is_replaced_not_followed(tmp_path: Path) -> None:
    shared = tmp_path / "artifacts"
    shared.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere.key"
    elsewhere.write_bytes(b"k" * 32)
    elsewhere.chmod(0o600)
    (shared / "artifact.key").symlink_to(elsewhere)
    assert _load(tmp_path / "s1", shared, ECHO) == (1, 0)
    assert not (shared / "artifact.key").is_symlink()
    assert (shared / "artifact.key").read_bytes() != b"k" * 32
    assert elsewhere.read_bytes() == b"k" * 32
