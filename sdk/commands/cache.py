"""``stockade cache info|prune``: the per-user caches (builds, compiled artifacts, toolchains).

One root per user: ``$STOCKADE_CACHE_DIR``, else ``$XDG_CACHE_HOME/stockade``, else
``~/.cache/stockade``. ``builds/`` holds built modules by source digest; ``artifacts/``
holds compiled components (native code, each verified with an HMAC under
``artifacts/artifact.key`` before it is loaded) shared by ``stockade test``, ``dev``,
``inspect``, ``lock verify`` and ``call``; ``toolchain/`` holds the JavaScript toolchain.

``prune`` removes least recently used entries until artifacts fit ``--max-artifact-bytes``
(default 4 GiB, the cap hosts apply after each write) and builds fit ``--max-build-bytes``
(default 1 GiB); ``--all`` empties both. Toolchains are kept (``rm -r`` the directory to
reinstall).

Exit codes: 0 ok; 2 usage error.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from host.runtime.cache import cache_usage, prune_artifacts
from sdk._artifacts import CACHE_MAX_BYTES
from sdk._cachedir import artifacts_dir, builds_dir, cache_root, toolchain_root
from sdk.author.build import build_cache_entries, prune_build_cache
from sdk.commands._common import EXIT_OK, add_verb, cell, print_json, stdout_console

BUILD_CACHE_MAX_BYTES = 1024**3  # bytes; a Python plugin's module is ~18 MB


def register(sub: Any) -> None:
    """Add the ``cache`` subcommand."""
    parser = sub.add_parser(
        "cache",
        help="show or prune the per-user build and compiled-artifact caches",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    add_verb(verbs, "info", "where the caches are and how big they are", run_info)
    prune = add_verb(verbs, "prune", "remove least recently used entries down to the caps", run_prune)
    prune.add_argument("--max-artifact-bytes", type=int, default=CACHE_MAX_BYTES, metavar="N")
    prune.add_argument("--max-build-bytes", type=int, default=BUILD_CACHE_MAX_BYTES, metavar="N")
    prune.add_argument("--all", action="store_true", help="empty the build and artifact caches")


def _size(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(f.lstat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def _info() -> dict[str, Any]:
    artifacts = cache_usage(artifacts_dir())
    builds = build_cache_entries(builds_dir())
    toolchains = sorted(p for p in toolchain_root().glob("js-*") if p.is_dir())
    return {
        "root": str(cache_root()),
        "artifacts": {"path": str(artifacts_dir()), "entries": artifacts.entries, "bytes": artifacts.bytes,
                      "max_bytes": CACHE_MAX_BYTES},
        "builds": {"path": str(builds_dir()), "entries": len(builds), "bytes": sum(s for _, s, _ in builds),
                   "max_bytes": BUILD_CACHE_MAX_BYTES},
        "toolchains": [{"path": str(p), "bytes": _size(p)} for p in toolchains],
    }  # fmt: skip


def _mib(n: int) -> str:
    return f"{n / 1024**2:,.1f} MiB"


def run_info(args: argparse.Namespace) -> int:
    """Print the caches' locations and sizes."""
    info = _info()
    if args.json:
        print_json({"ok": True, **info})
        return EXIT_OK
    console = stdout_console()
    console.print(f"cache root {cell(info['root'])}")
    for name in ("artifacts", "builds"):
        part = info[name]
        console.print(
            f"  {name:<10} {part['entries']:>4} entries  {_mib(part['bytes']):>12}  "
            f"(cap {_mib(part['max_bytes'])})  {cell(part['path'])}"
        )
    for toolchain in info["toolchains"]:
        console.print(f"  toolchain  {_mib(toolchain['bytes']):>26}  {cell(toolchain['path'])}")
    return EXIT_OK


def run_prune(args: argparse.Namespace) -> int:
    """Prune both caches least recently used first and say what was freed."""
    max_artifacts = 0 if args.all else args.max_artifact_bytes
    max_builds = 0 if args.all else args.max_build_bytes
    artifacts = prune_artifacts(artifacts_dir(), max_bytes=max_artifacts)
    removed, freed = prune_build_cache(builds_dir(), max_bytes=max_builds)
    summary = {
        "artifacts": {
            "removed": artifacts.removed, "freed_bytes": artifacts.freed_bytes, "bytes": artifacts.bytes
        },
        "builds": {"removed": removed, "freed_bytes": freed},
    }
    if args.json:
        print_json({"ok": True, **summary})
        return EXIT_OK
    console = stdout_console()
    left = _mib(artifacts.bytes)
    console.print(f"artifacts: removed {artifacts.removed} ({_mib(artifacts.freed_bytes)}); {left} left")
    console.print(f"builds: removed {removed} ({_mib(freed)})")
    return EXIT_OK
