"""The compiled-artifact cache must never deserialize bytes it did not write and sign
(docs/design.md §8): a serialized component is native code."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest
from wasmtime import component as wc

from host.config import HostConfig
from host.runtime import Runtime
from host.runtime.cache import KEY_BYTES, MAGIC, ArtifactCache
from host.runtime.engine import build_engine, engine_config_hash, wasmtime_version
from tests.support import wat

ECHO = wat.echo_component()
ECHO_SHA = wat.sha256(ECHO)


def _warm(state: Path) -> Path:
    """Compile the echo component once under ``state``; return its artifact path."""
    with Runtime(HostConfig(state_dir=state)) as rt:
        rt.load(ECHO, sha256=ECHO_SHA)
        assert rt.stats().compiled == 1
    (artifact,) = (state / "artifacts").glob("*.cwasm")
    return artifact


def _load_fresh(state: Path) -> tuple[int, int, int]:
    """Load echo in a new runtime; return (compiled, deserialized, rejected); check it runs."""
    with Runtime(HostConfig(state_dir=state)) as rt:
        assert wat.run_module(rt, ECHO, input_json="still echo").output == "still echo"
        stats = rt.stats()
    return stats.compiled, stats.deserialized, stats.rejected


def test_valid_artifact_loaded_without_compiling(tmp_path: Path) -> None:
    _warm(tmp_path)
    assert _load_fresh(tmp_path) == (0, 1, 0)


@pytest.mark.parametrize(
    "where",
    ["magic", "mac", "payload-start", "payload-middle", "payload-end"],
)
def test_flipped_byte_in_artifact_recompiled_not_loaded(tmp_path: Path, where: str) -> None:
    artifact = _warm(tmp_path)
    blob = bytearray(artifact.read_bytes())
    head = len(MAGIC) + 32
    offset = {
        "magic": 3,
        "mac": len(MAGIC) + 5,
        "payload-start": head,
        "payload-middle": head + (len(blob) - head) // 2,
        "payload-end": len(blob) - 1,
    }[where]
    blob[offset] ^= 0x01
    artifact.write_bytes(bytes(blob))
    # rejected and recompiled, never deserialized
    assert _load_fresh(tmp_path) == (1, 0, 1)
    # and rewritten: the next runtime loads the repaired artifact
    assert artifact.read_bytes() != bytes(blob)
    assert _load_fresh(tmp_path) == (0, 1, 0)


@pytest.mark.parametrize("keep", [0, 10, len(MAGIC) + 32, -100], ids=["empty", "in-magic", "header-only", "short"])
def test_truncated_artifact_recompiled(tmp_path: Path, keep: int) -> None:
    artifact = _warm(tmp_path)
    blob = artifact.read_bytes()
    artifact.write_bytes(blob[:keep])
    assert _load_fresh(tmp_path) == (1, 0, 1)
    assert artifact.read_bytes() != blob[:keep]


def test_artifact_from_another_host_key_recompiled(tmp_path: Path) -> None:
    theirs = _warm(tmp_path / "other-host")
    ours_dir = tmp_path / "our-host"
    _warm(ours_dir)
    (ours,) = (ours_dir / "artifacts").glob("*.cwasm")
    assert ours.name == theirs.name  # same module, version and config: same file name
    shutil.copyfile(theirs, ours)
    assert _load_fresh(ours_dir) == (1, 0, 1)


def test_artifact_of_another_module_recompiled(tmp_path: Path) -> None:
    # An attacker with write access to the cache renames a valid artifact of module A to
    # the name of module B: the HMAC binds the cache key, so B is compiled, not A loaded.
    other = wat.counter_component()
    with Runtime(HostConfig(state_dir=tmp_path)) as rt:
        rt.load(other, sha256=wat.sha256(other))
        artifact_a = rt._cache.path(wat.sha256(other))
        artifact_b = rt._cache.path(ECHO_SHA)
    shutil.copyfile(artifact_a, artifact_b)
    assert _load_fresh(tmp_path) == (1, 0, 1)


def test_key_file_created_private(tmp_path: Path) -> None:
    _warm(tmp_path)
    key = tmp_path / "artifact.key"
    assert len(key.read_bytes()) == KEY_BYTES
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "artifacts").stat().st_mode) & 0o077 == 0


@pytest.mark.parametrize(
    "damage",
    ["world-readable", "short-key", "symlink"],
)
def test_untrustworthy_key_replaced_and_artifacts_recompiled(tmp_path: Path, damage: str) -> None:
    _warm(tmp_path)
    key = tmp_path / "artifact.key"
    old = key.read_bytes()
    if damage == "world-readable":
        key.chmod(0o644)
    elif damage == "short-key":
        key.write_bytes(old[:16])
    else:
        target = tmp_path / "elsewhere.key"
        target.write_bytes(old)
        target.chmod(0o600)
        key.unlink()
        key.symlink_to(target)
    assert _load_fresh(tmp_path) == (1, 0, 1)
    assert not key.is_symlink()
    assert key.read_bytes() != old
    assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_atomic_writes_leave_no_temporary_files(tmp_path: Path) -> None:
    _warm(tmp_path)
    leftovers = [p.name for p in (tmp_path / "artifacts").iterdir() if not p.name.endswith(".cwasm")]
    assert leftovers == []


@pytest.mark.parametrize(
    ("version", "config"),
    [("51.0.0", None), (None, "0" * 64)],
    ids=["new-wasmtime-version", "other-engine-config"],
)
def test_new_wasmtime_version_or_engine_config_is_a_new_key(
    tmp_path: Path, version: str | None, config: str | None
) -> None:
    _warm(tmp_path)
    engine = build_engine()
    cache = ArtifactCache(
        tmp_path / "artifacts",
        tmp_path / "artifact.key",
        engine,
        wasmtime_version=version or wasmtime_version(),
        engine_config_hash=config or engine_config_hash(),
    )
    current = ArtifactCache(
        tmp_path / "artifacts", tmp_path / "artifact.key", engine,
        wasmtime_version=wasmtime_version(), engine_config_hash=engine_config_hash(),
    )
    assert cache.key(ECHO_SHA) != current.key(ECHO_SHA)
    assert cache.load(ECHO_SHA) is None  # a miss, not a reject: nothing exists under that key
    assert cache.stats(0).rejected == 0
    assert isinstance(current.load(ECHO_SHA), wc.Component)  # the artifact _warm stored
    assert current.stats(0).rejected == 0


def test_unusable_artifact_dir_still_runs(tmp_path: Path) -> None:
    # The cache is an optimisation: when it cannot be written, calls still work.
    (tmp_path / "artifacts").write_bytes(b"not a directory")
    with Runtime(HostConfig(state_dir=tmp_path)) as rt:
        assert wat.run_module(rt, ECHO, input_json="ok").output == "ok"
        assert rt.stats().compiled == 1


def test_verified_artifact_deserialized_in_place_not_copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 14.4: the verified bytes go to wasmtime as they are; the public
    ``Component.deserialize`` (which copies them into a ctypes array first) is not used."""
    from host.runtime import cache  # noqa: PLC0415  # the module whose path is observed

    _warm(tmp_path)
    assert cache._RAW_DESERIALIZE
    public_calls: list[int] = []
    original = wc.Component.deserialize

    def counted(engine: object, encoded: bytes) -> wc.Component:
        public_calls.append(len(encoded))
        return original(engine, encoded)  # type: ignore[arg-type]  # a wasmtime.Engine

    monkeypatch.setattr(wc.Component, "deserialize", staticmethod(counted))
    assert _load_fresh(tmp_path) == (0, 1, 0)
    assert public_calls == []


def test_artifact_loads_through_public_deserialize_when_private_names_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from host.runtime import cache  # noqa: PLC0415

    _warm(tmp_path)
    monkeypatch.setattr(cache, "_RAW_DESERIALIZE", False)
    assert _load_fresh(tmp_path) == (0, 1, 0)
