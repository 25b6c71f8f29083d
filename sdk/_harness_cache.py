"""The compiled-artifact cache that :mod:`sdk.harness` shares between its workspaces.

Every harness opens a host on a fresh, temporary state directory, and a host verifies
each compiled artifact with the HMAC key in its state directory (DESIGN §8). To avoid an
8-16 s compile per harness, the harness keeps one key and one artifacts directory under
its cache (``<cache>/harness/``), gives each workspace a private 0600 copy of the key
(the host refuses a symlinked key) and links ``state_dir/artifacts`` to the shared
directory.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import tempfile
from pathlib import Path
from typing import Final

__all__ = ["ARTIFACT_KEY_BYTES", "share_artifacts", "shared_key"]

ARTIFACT_KEY_BYTES: Final = 32


def share_artifacts(state_dir: Path, cache: Path) -> None:
    """Point a fresh state directory at the shared compiled-artifact cache.

    The host verifies every artifact's HMAC with ``state_dir/artifact.key``, so the
    harness gives each workspace a private copy of the shared key (the host refuses a
    symlinked key) and links ``state_dir/artifacts`` to the shared artifacts.

    Args:
        state_dir: the workspace's state directory (must not exist yet).
        cache: the shared directory (created 0700 if missing).

    Raises:
        OSError: the directories or the key cannot be written.
    """
    state_dir.mkdir(mode=0o700, parents=True)
    cache.mkdir(mode=0o700, parents=True, exist_ok=True)
    (cache / "artifacts").mkdir(mode=0o700, exist_ok=True)
    key = shared_key(cache / "artifact.key")
    fd = os.open(state_dir / "artifact.key", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(key)
    (state_dir / "artifacts").symlink_to(cache / "artifacts", target_is_directory=True)


def shared_key(path: Path) -> bytes:
    """The shared artifact key: created once (0600), replaced if unusable.

    Like the host's own key, a key of the wrong length, a symlink, or a key readable by
    group or others (whoever holds it can forge native code for the harness) is replaced;
    artifacts made under the old key then fail verification and are recompiled.

    Args:
        path: the shared key file.

    Raises:
        RuntimeError: the key could not be created (three lost races).

    Returns:
        The 32 key bytes.
    """
    for _ in range(3):
        with contextlib.suppress(FileNotFoundError):
            info = path.lstat()
            data = path.read_bytes() if stat.S_ISREG(info.st_mode) else b""
            if len(data) == ARTIFACT_KEY_BYTES and not info.st_mode & 0o077:
                return data
            path.unlink()
        key = secrets.token_bytes(ARTIFACT_KEY_BYTES)
        fd, tmp = tempfile.mkstemp(prefix=".artifact.key.", dir=path.parent)  # created 0600
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(key)
            os.link(tmp, path)  # appears whole or not at all; never overwrites
        except FileExistsError:
            continue  # another harness created it first: read theirs
        finally:
            os.unlink(tmp)
        return key
    raise RuntimeError(f"could not create the harness artifact key {path}")
