"""Where Stockade keeps per-user caches (builds, compiled artifacts, toolchains).

One root per user (:func:`host.runtime.cache.user_cache_dir`): ``$STOCKADE_CACHE_DIR``
if set, else ``$XDG_CACHE_HOME/stockade``, else ``~/.cache/stockade``. Below it:

    builds/              build cache (module bytes by source digest, sdk.author.build)
    artifacts/           compiled-artifact cache and its HMAC key (host.runtime.cache)
    toolchain/js-<pin>/  the JavaScript toolchain (sdk.author.toolchain)
"""

from __future__ import annotations

from pathlib import Path

from host.runtime.cache import CACHE_DIR_ENV, user_cache_dir

__all__ = ["CACHE_DIR_ENV", "artifacts_dir", "builds_dir", "cache_root", "toolchain_root"]


def cache_root() -> Path:
    """The per-user cache root (not created here)."""
    return user_cache_dir()


def builds_dir(root: Path | None = None) -> Path:
    """``<root>/builds``: the build cache."""
    return (root or cache_root()) / "builds"


def artifacts_dir(root: Path | None = None) -> Path:
    """``<root>/artifacts``: the compiled-artifact cache shared by harness, CLI and hosts."""
    return (root or cache_root()) / "artifacts"


def toolchain_root(root: Path | None = None) -> Path:
    """``<root>/toolchain``: installed toolchains."""
    return (root or cache_root()) / "toolchain"
