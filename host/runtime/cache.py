"""The compiled-artifact cache (docs/design.md §2, §8): compile once, verify before every load.

A serialized wasmtime component is native code: deserializing attacker-controlled bytes
means running them. So an artifact on disk is loaded only if it carries a valid
HMAC-SHA256 made with this host's secret key; anything else (missing, truncated,
tampered, written under another key, for another module, wasmtime version or engine
configuration) is never deserialized: the module is compiled again and the artifact
rewritten.

Layout::

    <state_dir>/artifact.key              32 random bytes, mode 0600, created on first use
    <artifact_dir>/<cache key>.cwasm      MAGIC | HMAC (32 bytes) | serialized component

    cache key = sha256("stockade-artifact-key/1" NUL module sha256 NUL wasmtime version
                       NUL engine-config hash)                       (hex)
    HMAC      = HMAC-SHA256(secret key, "stockade-artifact/1" NUL cache key NUL artifact)

Writes are atomic (temporary file in the same directory, fsync, ``os.replace``, fsync of
the directory); readers therefore see a whole old file or a whole new one. The bytes that
were verified are the bytes that are deserialized (no second read of the file).

One cache per user: :func:`user_artifact_dir` (``$STOCKADE_CACHE_DIR`` or
``$XDG_CACHE_HOME/stockade`` or ``~/.cache/stockade``, then ``artifacts/``, holding its own
``artifact.key``) is shared by the authoring harness, the CLI and host apps that opt in
(``HostConfig.artifact_cache_dir``). A successful load refreshes the artifact's mtime; with
``max_bytes`` set, each write prunes the least recently used artifacts until the
directory fits (:func:`prune_artifacts`; the artifact just written is never removed).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import hmac
import logging
import mmap
import os
import secrets
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import wasmtime
from wasmtime import _ffi as ffi
from wasmtime import component as wc

from host._files import FileTooLarge, NotRegularFile, atomic_write, create_exclusive, read_bounded
from host.errors import ComponentRefused
from host.runtime.models import CacheStats

__all__ = [
    "CACHE_DIR_ENV",
    "KEY_BYTES",
    "MAGIC",
    "ArtifactCache",
    "CacheUsage",
    "artifact_key",
    "cache_usage",
    "prune_artifacts",
    "user_artifact_dir",
    "user_cache_dir",
]

_log = logging.getLogger("stockade.runtime.cache")

MAGIC: Final = b"STOCKADE-ARTIFACT/1\n"
KEY_BYTES: Final = 32
_MAC_BYTES = 32
_SUFFIX: Final = ".cwasm"
CACHE_DIR_ENV: Final = "STOCKADE_CACHE_DIR"


def user_cache_dir() -> Path:
    """The per-user cache root: ``$STOCKADE_CACHE_DIR``, else ``$XDG_CACHE_HOME/stockade``,
    else ``~/.cache/stockade`` (not created here)."""
    explicit = os.environ.get(CACHE_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "stockade"


def user_artifact_dir() -> Path:
    """The per-user compiled-artifact cache: ``user_cache_dir() / "artifacts"``."""
    return user_cache_dir() / "artifacts"


@dataclass(frozen=True, slots=True)
class CacheUsage:
    """What an artifact directory holds.

    Attributes:
        entries: number of artifacts.
        bytes: their total size in bytes.
        removed: artifacts removed by the prune that produced this value (0 otherwise).
        freed_bytes: bytes those held.
    """

    entries: int
    bytes: int
    removed: int = 0
    freed_bytes: int = 0


def _artifacts(directory: Path) -> list[tuple[float, int, Path]]:
    """``(mtime, size, path)`` of every artifact, least recently used first."""
    found = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    for name in names:
        if not name.endswith(_SUFFIX):
            continue
        path = directory / name
        with contextlib.suppress(FileNotFoundError):
            info = path.lstat()
            if stat.S_ISREG(info.st_mode):
                found.append((info.st_mtime, info.st_size, path))
    return sorted(found)


def cache_usage(directory: Path) -> CacheUsage:
    """Count the artifacts in ``directory`` (missing directory: empty)."""
    entries = _artifacts(directory)
    return CacheUsage(entries=len(entries), bytes=sum(size for _, size, _ in entries))


def prune_artifacts(directory: Path, *, max_bytes: int, keep: Path | None = None) -> CacheUsage:
    """Remove least recently used artifacts until the directory holds at most ``max_bytes``.

    Args:
        directory: an artifact directory.
        max_bytes: the cap (0 empties the cache).
        keep: an artifact never removed (the one just written).

    Returns:
        The usage after pruning, with what was removed.
    """
    entries = _artifacts(directory)
    total = sum(size for _, size, _ in entries)
    removed = freed = 0
    for _, size, path in entries:
        if total <= max_bytes:
            break
        if keep is not None and path == keep:
            continue
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed += 1
            freed += size
        total -= size
    return CacheUsage(entries=len(entries) - removed, bytes=total, removed=removed, freed_bytes=freed)


def artifact_key(module_sha256: str, wasmtime_version: str, engine_config_hash: str) -> str:
    """The cache key of a compiled module.

    Args:
        module_sha256: hex sha256 of the module bytes.
        wasmtime_version: the wasmtime version that compiles and loads it.
        engine_config_hash: :func:`host.runtime.engine.engine_config_hash`.

    Returns:
        64 hex characters; also the artifact's file name stem.
    """
    material = "\0".join(
        ("stockade-artifact-key/1", module_sha256, wasmtime_version, engine_config_hash)
    )
    return hashlib.sha256(material.encode()).hexdigest()


class ArtifactCache:
    """Loads verified artifacts or compiles, for one engine.

    Args:
        directory: where artifacts live (created 0700 if missing).
        key_file: the HMAC key file (created 0600 with 32 random bytes if missing).
        engine: the engine that compiles and deserializes.
        wasmtime_version: part of every cache key.
        engine_config_hash: part of every cache key.
        max_bytes: prune the directory to this size after each write (None: never).
    """

    def __init__(
        self,
        directory: Path,
        key_file: Path,
        engine: wasmtime.Engine,
        *,
        wasmtime_version: str,
        engine_config_hash: str,
        max_bytes: int | None = None,
    ) -> None:
        self._dir = directory
        self._max_bytes = max_bytes
        self._key_file = key_file
        self._engine = engine
        self._version = wasmtime_version
        self._config_hash = engine_config_hash
        self._secret: bytes | None = None
        self._lock = threading.Lock()
        self._compiled = 0
        self._deserialized = 0
        self._rejected = 0

    def key(self, module_sha256: str) -> str:
        """The cache key for a module under this cache's version and configuration."""
        return artifact_key(module_sha256, self._version, self._config_hash)

    def path(self, module_sha256: str) -> Path:
        """Where the artifact of a module is (or would be) stored."""
        return self._dir / f"{self.key(module_sha256)}{_SUFFIX}"

    def stats(self, memory_hits: int) -> CacheStats:
        """The cache's counters (``memory_hits`` is the runtime's own count)."""
        with self._lock:
            return CacheStats(
                compiled=self._compiled,
                deserialized=self._deserialized,
                memory_hits=memory_hits,
                rejected=self._rejected,
            )

    def load(self, module_sha256: str) -> wc.Component | None:
        """The verified, deserialized artifact of a module, or None to compile.

        Never raises for a bad artifact: it is counted as rejected and None is returned.
        """
        path = self.path(module_sha256)
        try:
            blob = _read_private(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._reject(path, f"unreadable: {exc}")
            return None
        try:
            if self._verify(self.key(module_sha256), blob) is None:
                self._reject(path, "truncated, tampered or written under another key")
                return None
            # The verified buffer itself, private to this process, is what wasmtime reads.
            component = _deserialize_at(self._engine, blob, len(MAGIC) + _MAC_BYTES)
        except wasmtime.WasmtimeError as exc:
            self._reject(path, f"refused by wasmtime: {exc}")
            return None
        finally:
            blob.close()
        with self._lock:
            self._deserialized += 1
        with contextlib.suppress(OSError):  # recency for LRU pruning; best effort
            os.utime(path)
        return component

    def compile(self, module: bytes) -> wc.Component:
        """Compile module bytes (slow; call from a worker thread for big modules).

        Raises:
            ComponentRefused: wasmtime cannot compile it (invalid component).
        """
        try:
            component = wc.Component(self._engine, module)
        except wasmtime.WasmtimeError as exc:
            raise ComponentRefused(f"the component does not compile: {exc}") from exc
        with self._lock:
            self._compiled += 1
        return component

    def store(self, module_sha256: str, component: wc.Component) -> None:
        """Write a component's artifact atomically, with its HMAC.

        A failure to write is logged, not raised: the cache is an optimisation.
        """
        key = self.key(module_sha256)
        payload = bytes(component.serialize())
        blob = MAGIC + self._mac(key, payload) + payload
        try:
            _atomic_write(self._dir, f"{key}{_SUFFIX}", blob)
        except OSError as exc:
            _log.warning("could not write compiled artifact %s: %s", key, exc)
            return
        if self._max_bytes is not None:
            kept = self._dir / f"{key}{_SUFFIX}"
            pruned = prune_artifacts(self._dir, max_bytes=self._max_bytes, keep=kept)
            if pruned.removed:
                _log.info("artifact cache pruned: %d removed, %d bytes", pruned.removed, pruned.freed_bytes)

    def _verify(self, key: str, blob: mmap.mmap) -> bool | None:
        """True when ``blob`` holds MAGIC, then the HMAC of the rest; else None."""
        head = len(MAGIC) + _MAC_BYTES
        if len(blob) <= head or blob[: len(MAGIC)] != MAGIC:
            return None
        mac = blob[len(MAGIC) : head]
        with memoryview(blob) as whole, whole[head:] as payload:  # no copy of the ~40 MB payload
            if not hmac.compare_digest(mac, self._mac(key, payload)):
                return None
        return True

    def _mac(self, key: str, payload: bytes | memoryview) -> bytes:
        mac = hmac.new(self._key(), digestmod=hashlib.sha256)
        mac.update(b"stockade-artifact/1\0" + key.encode() + b"\0")
        mac.update(payload)
        return mac.digest()

    def _reject(self, path: Path, reason: str) -> None:
        _log.warning("compiled artifact %s rejected (%s); recompiling", path.name, reason)
        with self._lock:
            self._rejected += 1

    def _key(self) -> bytes:
        with self._lock:
            if self._secret is None:
                self._secret = _load_or_create_key(self._key_file)
            return self._secret


def _load_or_create_key(path: Path) -> bytes:
    """The 32-byte HMAC key; created 0600 if missing, replaced if unusable.

    A key of the wrong length, a symlink or another non-regular file, or a key readable
    by group/others (it may have leaked, and a leaked key lets anyone forge native code
    for this host) is replaced by a new one: existing artifacts then fail verification
    and are recompiled.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    for _ in range(3):
        try:
            key, info = read_bounded(path, KEY_BYTES, nofollow=True)  # a FIFO is refused, not waited on
        except FileNotFoundError:
            key = secrets.token_bytes(KEY_BYTES)
            with contextlib.suppress(FileExistsError):
                create_exclusive(path, key)
                return key
            continue  # another process created it first: read theirs
        except (NotRegularFile, FileTooLarge):
            pass  # not a regular file, or longer than a key: replace it below
        except OSError as exc:
            if exc.errno != errno.ELOOP:  # a symlink: never follow, replace it below
                raise
        else:
            if len(key) == KEY_BYTES and not info.st_mode & 0o077:
                return key
        _log.warning("artifact key %s is unusable (length, type or permissions); replacing it", path)
        key = secrets.token_bytes(KEY_BYTES)
        _atomic_write(path.parent, path.name, key)
        return key
    raise RuntimeError(f"could not create the artifact key {path}")


def _atomic_write(directory: Path, name: str, data: bytes) -> None:
    """Write ``directory/name`` atomically and durably (mode 0600), creating the directory."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    atomic_write(directory / name, data)


_RAW_DESERIALIZE: Final = (
    hasattr(ffi, "wasmtime_component_deserialize")
    and hasattr(wc.Component, "_from_ptr")
    and hasattr(wasmtime.WasmtimeError, "_from_ptr")
)
"""Whether wasmtime-py's private names used by :func:`_deserialize_at` exist (private
names are guarded, with the public path as the fallback)."""


def _read_private(path: Path) -> mmap.mmap:
    """The file's bytes in private anonymous memory, prefaulted in one go.

    Nothing else can change these bytes between their verification and their
    deserialization (a mapping of the file could change under a writer). Prefaulting the
    whole buffer (``MAP_POPULATE``) costs less than the page faults of filling a fresh
    ``bytes`` (~30 vs ~40-50 ms for a 40 MB artifact here). Artifacts are replaced
    atomically, so the open file keeps its size; a short read leaves zeros at the end,
    which fail verification.
    """
    with path.open("rb", buffering=0) as handle:
        size = os.fstat(handle.fileno()).st_size
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)
        blob = mmap.mmap(-1, max(size, 1), flags=flags)
        got = 0
        with memoryview(blob) as view:
            while got < size:
                count = handle.readinto(view[got:size])
                if not count:
                    break
                got += count
    return blob  # an empty file gives one zero byte: too short to verify


def _deserialize_at(engine: wasmtime.Engine, blob: mmap.mmap, offset: int) -> wc.Component:
    """Deserialize ``blob[offset:]`` without copying it first.

    ``Component.deserialize`` copies its argument into a ctypes array before wasmtime
    copies it again (67 ms of a 330 ms warm load of a 40 MB Python plugin here); a
    pointer into our own private buffer hands wasmtime the bytes in place.

    Raises:
        wasmtime.WasmtimeError: wasmtime refused the artifact.
    """
    size = len(blob) - offset
    if not _RAW_DESERIALIZE or size <= 0:
        return wc.Component.deserialize(engine, blob[offset:])
    window = (ctypes.c_uint8 * size).from_buffer(blob, offset)
    out = ctypes.POINTER(ffi.wasmtime_component_t)()
    try:
        error = ffi.wasmtime_component_deserialize(engine.ptr(), window, size, ctypes.byref(out))
    finally:
        del window  # release the buffer export, so the caller can close the mapping
    if error:
        raise wasmtime.WasmtimeError._from_ptr(error)
    return wc.Component._from_ptr(out)
