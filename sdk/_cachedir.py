"""Where Stockade keeps per-user caches (builds, compiled artifacts, toolchains).

One root per user: ``$STOCKADE_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/stockade``,
else ``~/.cache/stockade``. Below it:

    builds/              build cache (module bytes by source digest, sdk.build)
    artifacts/           compiled-artifact cache (host.runtime.cache, HMAC-verified)
    artifact.key         its HMAC key (0600)
    toolchain/js-<pin>/  the JavaScript toolchain (sdk.toolchain)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

__all__ = ["CACHE_DIR_ENV", "cache_root"]

CACHE_DIR_ENV: Final = "STOCKADE_CACHE_DIR"


def cache_root() -> Path:
    """The per-user cache root (see the module docstring); not created here."""
    explicit = os.environ.get(CACHE_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "stockade"
